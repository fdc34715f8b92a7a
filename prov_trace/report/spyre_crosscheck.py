"""Cross-check a spyre trace against torch-spyre's own kernel provenance record.

torch-spyre hands each compiled kernel's debug-handle ids to ``register_kernel_provenance``
(event name, ids); the Spyre CPU stand-in records those calls and, through the
``prepare_kernel(code_dir/spyreCodeDir, profiler_name=event name)`` call that follows, the
bundle directory each one belongs to (``StandIn.kernel_provenance()``). The trace has, per
kernel, the directory ``get_output_dir`` returned, the ``debug_handle_`` of every op in that
directory's ``sdsc_*.json``, the OpSpecs' ``debug_handle``, and the kernel's IR ops with the
source lines their origins' stack traces name.

For each kernel this compares:

- ids: the registered ids, in order, against the ``debug_handle_`` ids of the bundle's ops
  (file order, first occurrence), and checks every registered id is an OpSpec's handle;
- sources: the source lines the registered handles name (their ``source`` and, recursively,
  their ``fused_from`` constituents') against the lines the kernel's IR ops' origins carry
  (kernel -> origins -> stack traces -> the model's file:line).

Pure: plain data in, plain data out; nothing here imports torch or torch-spyre.
"""

from __future__ import annotations

import os
from typing import Any, Iterable

from prov_trace.stream import schema
from prov_trace.stream.reader import Trace

OUTPUT_DIR_TARGET = "torch_spyre.execution.async_compile:get_output_dir"
DEFINE_KERNEL_TARGET = "torch_spyre._inductor.scheduler:SuperDSCScheduling.define_kernel"


def _norm(path: str | None) -> str | None:
    return os.path.normpath(path) if isinstance(path, str) else None


def _probes(trace: Trace) -> Iterable[dict[str, Any]]:
    for rec in trace.records:
        if rec.get("kind") == "probe" and isinstance(rec.get("payload"), dict):
            yield rec


def _handle_sources(handle: Any, out: set[tuple[str, int]]) -> None:
    if not isinstance(handle, dict):
        return
    src = handle.get("source")
    if isinstance(src, dict) and isinstance(src.get("file"), str) and isinstance(src.get("start_line"), int):
        out.add((src["file"], src["start_line"]))
    for part in handle.get("fused_from") or ():
        _handle_sources(part, out)


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The dicts of a list read from a trace (anything else in it, or a non-list, is skipped)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _lines(pairs: Iterable[tuple[str, int]]) -> list[str]:
    return [f"{f}:{n}" for f, n in sorted(pairs)]


def collect(trace: Trace) -> dict[str, Any]:
    """What the trace says per kernel: bundle dirs, bundle handle ids, IR-op source lines, OpSpec handles."""
    dirs: dict[str, dict[str, Any]] = {}
    kernels: dict[tuple, dict[str, Any]] = {}
    handles: dict[str, dict[str, Any]] = {}
    for rec in _probes(trace):
        p = rec["payload"]
        cid = rec.get("compile_id")
        if rec.get("stage") == schema.KERNEL_SPEC:
            dh = p.get("debug_handle") if isinstance(p.get("debug_handle"), dict) else {}
            value = dh.get("value")
            if isinstance(value, dict) and value.get("id") is not None:
                handles.setdefault(str(value["id"]), value)
        elif rec.get("target") == OUTPUT_DIR_TARGET and rec.get("phase") != "finish":
            d = _norm(p.get("output_dir"))
            if d:
                dirs.setdefault(d, {"kernel": p.get("kernel_name"), "compile_id": cid, "artifact_ids": [],
                                    "sdsc_files": 0})
        elif rec.get("target") == OUTPUT_DIR_TARGET and rec.get("phase") == "finish":
            for bundle in _dicts(p.get("sdsc_bundles")):
                d = _norm(bundle.get("dir"))
                entry = dirs.setdefault(d, {"kernel": bundle.get("kernel"), "compile_id": cid, "artifact_ids": [],
                                            "sdsc_files": 0})
                for f in _dicts(bundle.get("files")):
                    entry["sdsc_files"] += 1
                    for op in _dicts(f.get("ops")):
                        value = op["debug_handle"].get("value") if isinstance(op.get("debug_handle"), dict) else None
                        if isinstance(value, dict) and value.get("id") is not None:
                            hid = str(value["id"])
                            if hid not in entry["artifact_ids"]:
                                entry["artifact_ids"].append(hid)
                            handles.setdefault(hid, value)
        elif rec.get("target") == DEFINE_KERNEL_TARGET:
            k = p.get("superdsc_kernel") if isinstance(p.get("superdsc_kernel"), dict) else {}
            name = k.get("kernel")
            if not isinstance(name, str) or not name:
                continue
            lines: set[tuple[str, int]] = set()
            origins: list[str] = []
            for op in _dicts(k.get("ops")):
                fields = op.get("fields") if isinstance(op.get("fields"), dict) else {}
                ori = fields.get("origins") if isinstance(fields.get("origins"), dict) else {}
                for o in ori.get("value") if isinstance(ori.get("value"), list) else ():
                    if isinstance(o, str) and o not in origins:
                        origins.append(o)
                for src in op.get("source") if isinstance(op.get("source"), list) else ():
                    if isinstance(src, dict) and isinstance(src.get("file"), str) and isinstance(src.get("line"), int):
                        lines.add((src["file"], src["line"]))
            kernels[(cid, name)] = {"origins": origins, "lines": lines, "ops": [op.get("name") for op in _dicts(k.get("ops"))]}
    return {"dirs": dirs, "kernels": kernels, "handles": handles}


def crosscheck(trace: Trace, registrations: list[dict[str, Any]]) -> dict[str, Any]:
    """Compare torch-spyre's ``register_kernel_provenance`` record with the trace, kernel by kernel.

    `registrations` is ``StandIn.kernel_provenance()``: dicts with ``event_base_name``,
    ``key``, ``debug_handle_ids``, ``accepted`` and ``code_dirs``.
    """
    seen = collect(trace)
    dirs, kernels, handles = seen["dirs"], seen["kernels"], seen["handles"]
    rows = []
    matched_dirs: set[str] = set()
    unmatched = []
    for reg in registrations:
        code_dirs = [_norm(d) for d in reg.get("code_dirs") or ()]
        hits = [d for d in code_dirs if d in dirs]
        if not hits:
            unmatched.append({"event_base_name": reg.get("event_base_name"), "code_dirs": code_dirs,
                              "why": "no get_output_dir directory in the trace is this kernel's"})
            continue
        for d in hits:
            matched_dirs.add(d)
            info = dirs[d]
            ids = [str(i) for i in reg.get("debug_handle_ids") or ()]
            unknown = [i for i in ids if i not in handles]
            reg_lines: set[tuple[str, int]] = set()
            for i in ids:
                _handle_sources(handles.get(i), reg_lines)
            k = kernels.get((info["compile_id"], info["kernel"])) or {"origins": [], "lines": set(), "ops": []}
            ids_agree = ids == info["artifact_ids"] and not unknown
            sources_agree = reg_lines == k["lines"]
            rows.append({
                "kernel": info["kernel"],
                "compile_id": info["compile_id"],
                "dir": d,
                "event_base_name": reg.get("event_base_name"),
                "accepted": reg.get("accepted"),
                "registered_ids": ids,
                "artifact_ids": list(info["artifact_ids"]),
                "ids_not_in_trace": unknown,
                "ids_agree": ids_agree,
                "registered_sources": _lines(reg_lines),
                "kernel_ops": k["ops"],
                "kernel_origins": k["origins"],
                "trace_sources": _lines(k["lines"]),
                "sources_agree": sources_agree,
                "agree": ids_agree and sources_agree,
            })
    unregistered = [{"kernel": v["kernel"], "compile_id": v["compile_id"], "dir": d}
                    for d, v in dirs.items() if d not in matched_dirs]
    return {
        "kernels": rows,
        "registrations_without_kernel": unmatched,
        "kernels_without_registration": unregistered,
        "agree": bool(rows) and all(r["agree"] for r in rows) and not unmatched and not unregistered,
    }
