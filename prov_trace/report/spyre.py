"""torch-spyre's payloads in the report: OpSpecs at the kernel spec, SuperDSC bundle ops at the artifact.

The reader side of ``probes/spyre.py``: the probes name these shapes in their
payloads (``spyre.op_spec``, ``spyre.define_kernel``, ``spyre.output_dir``, ``spyre.sdsc``), and
``report/readers.py`` hands each record to the reader its shape names. Pure.
"""

from __future__ import annotations

from typing import Any

from prov_trace.report import spyre_crosscheck
from prov_trace.report.objects import KernelNames, Read, kernel_object
from prov_trace.report.text import basename
from prov_trace.stream import schema as S
from prov_trace.stream.reader import Trace

OP_SPEC = "spyre.op_spec"
DEFINE_KERNEL = "spyre.define_kernel"
SDSC = "spyre.sdsc"
OUTPUT_DIR = "spyre.output_dir"
#: The note record prov-trace writes at the end of a run on the Spyre CPU stand-in (api.write_spyre_note).
STANDIN_NOTE = "spyre.standin"
#: Items kept per list read from a debug handle (the trace is bounded already; this bounds the report).
MAX_HANDLE_ITEMS = 64


# --- DebugHandle, as torch-spyre's to_dict() writes it -------------------------------------------


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else (str(value) if isinstance(value, int) and not isinstance(value, bool)
                                                 else None)


def handle_source(src: Any) -> dict[str, Any] | None:
    """A handle's ``source`` (``SourceLoc``: file, start_line, ...) as ``{file, line}``; None when it names none."""
    if not isinstance(src, dict) or not isinstance(src.get("file"), str):
        return None
    line = src.get("start_line")
    return {"file": src["file"], "line": line if isinstance(line, int) and not isinstance(line, bool) else None}


def handle_lines(handle: dict[str, Any]) -> list[dict[str, Any]]:
    """The source lines a probe's ``debug_handle`` record names: its own ``source``, then each ``fused_from``
    constituent's (torch-spyre: a fused op's handle names one line, and consumers fall back to ``fused_from``
    for the rest). Each line once, in that order."""
    value = handle.get("value") if isinstance(handle.get("value"), dict) else {}
    found = [handle.get("source") if isinstance(handle.get("source"), dict) else None]
    for part in _list(value.get("fused_from"))[:MAX_HANDLE_ITEMS]:
        loc = handle_source(part.get("source")) if isinstance(part, dict) else None
        if loc is not None and loc["line"] is not None:  # shaped as the probe shapes the handle's own
            found.append({"file": loc["file"], "line": loc["line"], "func": None, "text": None})
    return add_lines([], found)


def add_lines(lines: list[dict[str, Any]], more: list[Any]) -> list[dict[str, Any]]:
    """`lines` with each source of `more` it lacks appended (by file and line), in order; `lines` itself."""
    for src in more:
        if src and not any((o.get("file"), o.get("line")) == (src.get("file"), src.get("line")) for o in lines):
            lines.append(src)
    return lines


def handle_fields(value: Any, depth: int = 0) -> dict[str, Any] | None:
    """``DebugHandle.to_dict()`` as report data: id, source, aten_op, ir_chain, fused_from, transform_history.

    ``fused_from`` holds the constituents' handles (one level deep is shown; deeper ones are counted).
    Anything of another type than torch-spyre writes is read as empty, never raised on.
    """
    if not isinstance(value, dict):
        return None
    chain = value.get("ir_chain")
    fused = value.get("fused_from")
    history = value.get("transform_history")
    out: dict[str, Any] = {
        "id": _str(value.get("id")),
        "source": handle_source(value.get("source")),
        "aten_op": _str(value.get("aten_op")),
        "ir_chain": [x for x in (_str(c) for c in (chain if isinstance(chain, list) else [])[:MAX_HANDLE_ITEMS]) if x],
        "transform_history": [
            {"kind": _str(t.get("kind")), "pass_name": _str(t.get("pass_name")), "reason": _str(t.get("reason"))}
            for t in (history if isinstance(history, list) else [])[:MAX_HANDLE_ITEMS] if isinstance(t, dict)],
    }
    parts = [f for f in (fused if isinstance(fused, list) else [])[:MAX_HANDLE_ITEMS] if isinstance(f, dict)]
    if depth == 0:
        out["fused_from"] = [h for h in (handle_fields(f, 1) for f in parts) if h is not None]
    else:
        out["fused_from_count"] = len(parts)
    return out


def op_spec_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    """One object per OpSpec: the IR op it was built from, and its ``debug_handle`` in place of kernel metadata."""
    out = []
    names = KernelNames()
    for rec in records:
        k = rec.get("payload") or {}
        obj = kernel_object(names(k.get("kernel")), k)
        dh = k.get("debug_handle") if isinstance(k.get("debug_handle"), dict) else {}
        obj["fields"]["debug_handle"] = {"has": bool(dh.get("has")), "populated": bool(dh.get("populated")),
                                         "type": dh.get("type")}
        add_lines(obj["sources"], handle_lines(dh))
        spec = k.get("op_spec") if isinstance(k.get("op_spec"), dict) else {}
        obj.update(debug_handle=dh.get("file_line"),
                   op_spec_fields=[f.get("name") for f in _list(spec.get("declared_fields")) if isinstance(f, dict)],
                   populated_provenance=spec.get("populated_provenance", []),
                   debug_handle_fields=handle_fields(dh.get("value")))
        out.append(obj)
    return Read(out)


def no_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    """``define_kernel`` and ``get_output_dir`` records: they name kernels, origins and bundle directories
    for the bundle ops; they are not objects themselves."""
    return Read()


def _kernel_origins(stage_records: list[dict[str, Any]]) -> dict[Any, list[str]]:
    out = {}
    for rec in stage_records:
        k = (rec.get("payload") or {}).get("superdsc_kernel")
        if isinstance(k, dict):
            out[k.get("kernel")] = k.get("origins", [])
    return out


def sdsc_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    """One object per op key of each ``sdsc_*.json`` read from the kernels' exact bundle directories."""
    origins = _kernel_origins(stage_records)
    read = Read()
    for rec in records:
        payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
        for bundle in [b for b in _list(payload.get("sdsc_bundles")) if isinstance(b, dict)]:
            kernel = bundle.get("kernel")
            for f in [f for f in _list(bundle.get("files")) if isinstance(f, dict)]:
                read.files.append(f.get("path"))
                base = basename(f.get("path"))
                for op in [op for op in _list(f.get("ops")) if isinstance(op, dict)]:
                    dh = op.get("debug_handle") if isinstance(op.get("debug_handle"), dict) else {}
                    read.objects.append({
                        "name": f"{kernel}/{base}:{op.get('key')}",
                        "kernel": kernel,
                        "kind": "sdsc_op",
                        "file": f.get("path"),
                        "def_line": None,
                        "call_lines": [],
                        "provenance_comments": [],
                        "provenance_keys": sorted(op.get("provenance_keys") or {}),
                        "debug_handle": dh.get("file_line"),
                        "debug_handle_id": _str((dh.get("value") or {}).get("id")
                                                if isinstance(dh.get("value"), dict) else None),
                        "origins": origins.get(kernel, []),
                        "fields": {"debug_handle": {"has": bool(dh.get("has")), "populated": bool(dh.get("populated")),
                                                    "type": dh.get("type")}},
                        "sources": handle_lines(dh),
                    })
            # KTIR mode (TORCH_SPYRE_KTIR=1): one .ktir file per kernel in place of the sdsc_*.json. torch-spyre's
            # KTIR emitter writes no debug_handle, so the file has no such slot (the matrix reads ➖ there).
            for name in bundle.get("ktir_files") if isinstance(bundle.get("ktir_files"), list) else []:
                path = f"{bundle.get('dir')}/{name}"
                read.files.append(path)
                read.objects.append({"name": f"{kernel}/{name}", "kernel": kernel, "kind": "ktir", "file": path,
                                     "def_line": None, "call_lines": [], "provenance_comments": [],
                                     "origins": origins.get(kernel, []), "fields": {}, "sources": []})
    return read


READERS = {OP_SPEC: op_spec_objects, DEFINE_KERNEL: no_objects, OUTPUT_DIR: no_objects, SDSC: sdsc_objects}


# --- what a stage or a run needs said in words ------------------------------------------------------


def _payloads(records: list[dict[str, Any]], shape: str) -> list[dict[str, Any]]:
    return [r["payload"] for r in records if isinstance(r.get("payload"), dict) and r["payload"].get("shape") == shape]


def _names(items: list[str], limit: int = 4) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def stage_notes(by_stage: dict[str, list[dict[str, Any]]], end: dict[str, Any] | None) -> dict[str, str]:
    """What a Spyre stage is when its objects alone would mislead: today, the artifact stage in KTIR mode.

    KTIR mode (``TORCH_SPYRE_KTIR=1``) writes ``<kernel>.ktir`` in the directory ``get_output_dir``
    returned, in place of ``sdsc_*.json``; with no file, the note says why from what was recorded.
    """
    recs = by_stage.get(S.ARTIFACT) or []
    ktir_kernels = [str(p["superdsc_kernel"].get("kernel")) if isinstance(p.get("superdsc_kernel"), dict)
                    else "?" for p in _payloads(recs, DEFINE_KERNEL) if p.get("emitter") == "ktir"]
    bundles = [b for p in _payloads(recs, SDSC) for b in _list(p.get("sdsc_bundles")) if isinstance(b, dict)]
    ktir_bundles = [b for b in bundles if b.get("emitter") == "ktir" or str(b.get("kernel")).startswith("ktir_")
                    or b.get("ktir_files")]
    files = [str(f) for b in ktir_bundles for f in _list(b.get("ktir_files"))]
    if not ktir_kernels and not ktir_bundles:
        return {}
    if files:
        return {S.ARTIFACT: f"KTIR emitter (TORCH_SPYRE_KTIR=1): {len(files)} .ktir file(s) ({_names(files)}) in the "
                            "directories get_output_dir returned, in place of SuperDSC bundles. torch-spyre's KTIR "
                            "emitter writes no debug_handle into them, so the artifact's debug_handle reads ➖."}
    names = _names(ktir_kernels or [str(b.get("kernel")) for b in ktir_bundles])
    if ktir_bundles:
        why = "the directory get_output_dir returned for it holds no .ktir file"
    else:
        why = ("get_output_dir never returned a directory for it: torch-spyre writes a kernel's .ktir only after its "
               "device prerequisites pass (BUNDLE_SYMBOLIC_ARGS=0, KTIR_DEVICE_MLIR, dbo-opt on PATH) and "
               "generate_ktir succeeds")
    if isinstance(end, dict) and end.get("outcome") == "exception" and end.get("detail"):
        detail = " ".join(str(end["detail"]).split()).split(" Set TORCHDYNAMO_VERBOSE", 1)[0]  # torch's own hint
        why += f"; the run ended with {detail[:400]}"
    return {S.ARTIFACT: f"KTIR emitter (TORCH_SPYRE_KTIR=1): no .ktir file. define_kernel named {names}, but {why}."}


def run_facts(trace: Trace) -> dict[str, Any] | None:
    """The Spyre side of a run, for the report's Spyre section; None for a run that did not use torch-spyre.

    From the header (``torch_spyre``, ``standin``) and the stand-in's note record: the bundles
    ``dxp_standalone`` accepted, the kernels launched and not run, torch-spyre's own
    ``register_kernel_provenance`` record checked against the trace, and the OpSpecs whose
    ``debug_handle`` is in no bundle op.
    """
    header = trace.header
    notes = [r["payload"] for r in trace.records if r.get("kind") == S.NOTE and isinstance(r.get("payload"), dict)
             and r["payload"].get("shape") == STANDIN_NOTE]
    tree = header.get("torch_spyre") if isinstance(header.get("torch_spyre"), dict) else None
    if not notes and tree is None and not header.get("standin"):
        return None
    note = notes[-1] if notes else None
    regs = [_registration(r) for r in _list((note or {}).get("kernel_provenance")) if isinstance(r, dict)]
    bundles = [b for b in _list((note or {}).get("bundles")) if isinstance(b, dict)]
    in_bundles = {op.get("debug_handle_id") for op in _sdsc_ops(trace)}
    specs = [(r.get("compile_id"), r["payload"].get("kernel"), _handle_id(r["payload"].get("debug_handle")))
             for r in trace.records if r.get("kind") == S.PROBE and r.get("stage") == S.KERNEL_SPEC
             and isinstance(r.get("payload"), dict) and r["payload"].get("shape") == OP_SPEC]
    return {
        "standin": header.get("standin") if isinstance(header.get("standin"), str) else None,
        "tree": tree.get("tree") if tree else (note or {}).get("tree"),
        "mode": tree.get("mode") if tree else ("stand-in" if note else None),
        "recorded": note is not None,
        "error": (note or {}).get("error"),
        "kernels_not_run": [str(k) for k in _list((note or {}).get("kernels_not_run"))],
        "bundles": [{"dir": _str(b.get("dir")), "sdsc_files": len(_list(b.get("sdsc_files"))), "ops": b.get("ops"),
                     "accepted": bool(b.get("accepted")), "error": b.get("error")} for b in bundles],
        "registrations": len(regs),
        "crosscheck": spyre_crosscheck.crosscheck(trace, regs) if note is not None else None,
        "op_specs": len(specs),
        "op_specs_in_no_bundle": [f"{cid} {name}" for cid, name, hid in specs if hid is None or hid not in in_bundles],
    }


def _sdsc_ops(trace: Trace) -> list[dict[str, Any]]:
    read = sdsc_objects([r for r in trace.records if r.get("kind") == S.PROBE and isinstance(r.get("payload"), dict)
                         and r["payload"].get("shape") == SDSC], [])
    return read.objects


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _handle_id(snapshot: Any) -> str | None:
    value = snapshot.get("value") if isinstance(snapshot, dict) else None
    return _str(value.get("id")) if isinstance(value, dict) else None


def _registration(reg: dict[str, Any]) -> dict[str, Any]:
    """One recorded ``register_kernel_provenance`` call, with the types the cross-check reads."""
    return {"event_base_name": _str(reg.get("event_base_name")), "key": _str(reg.get("key")),
            "debug_handle_ids": [x for x in (_str(i) for i in _list(reg.get("debug_handle_ids"))) if x is not None],
            "accepted": bool(reg.get("accepted")),
            "code_dirs": [d for d in _list(reg.get("code_dirs")) if isinstance(d, str)]}
