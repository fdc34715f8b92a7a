"""torch-spyre probes: pure functions that read the Spyre compile path's objects by attribute.

Nothing here imports ``torch_spyre``. Each probe reads only what the object it is
handed carries: an FX graph's nodes, a ``GraphLowering``'s ``operations``, a
scheduler node's ``.node``, an ``OpSpec`` dataclass, the ``sdsc_*.json`` files in
the exact directories ``get_output_dir`` returned. That is what lets the tests run
them on stock Inductor objects of the same types, and on dataclasses and JSON
files built to the shapes documented in ``docs/profiles.md``.

Targets and shapes (torch-spyre, mid 2026; see /docs/profiles.md):

- ``CustomPreGradPasses.__call__(self, graph)`` / ``CustomPostPasses.__call__(self, graph)``:
  an ``fx.Graph`` (or GraphModule); both share one inherited ``__call__``, told apart by ``type(self)``.
- ``CustomPreSchedulingPasses.__call__(self, graph)``: a ``GraphLowering``; entry is the
  LoopLevelIR before the Spyre passes, return the same ``graph.operations`` after them.
- ``SpyreKernel.create_op_spec(self, op, is_reduction, args, op_info, ...) -> OpSpec``;
  the IR node is ``self.current_node.node``.
- ``SuperDSCScheduling.define_kernel(self, src_code, node_schedule, kernel) -> kernel_name``.
- ``get_output_dir(kernel_name) -> str``: the exact bundle directory of that kernel. Each
  ``sdsc_*.json`` in it is ``{"<n>_<op>": {"debug_handle_": DebugHandle.to_dict() | null, ...}}``.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from prov_trace.stream import schema
from prov_trace.probes import fx, ir, kernels
from prov_trace.contract import ProbeCall
from prov_trace.probes.snapshot import (
    MAX_ITEMS,
    cut_str,
    dataclass_fields,
    generic,
    is_dataclass_instance,
    populated,
    read_static,
    safe_str,
    type_name,
)

#: A name that looks like it carries provenance: a field of ``OpSpec``, a key of an SDSC op.
PROVENANCE_NAME_RE = re.compile(
    r"debug_?handle|provenance|origin|stack_?trace|traceback|source_?(?:loc|file|line|fn)|(?:^|_)loc(?:ation)?(?:_|$)"
    r"|file_?line|aten",
    re.IGNORECASE,
)
#: The shape of an op key in an SDSC file: ``0_batchmatmul``.
OP_KEY_RE = re.compile(r"^\d+_\w+$")
#: Bounds on what the bundle reader takes in.
MAX_SDSC_BYTES = 64 * 1024 * 1024
MAX_SDSC_FILES = 4096
MAX_PLAIN_DEPTH = 12

TARGET_OUTPUT_DIR = "torch_spyre.execution.async_compile:get_output_dir"


def is_provenance_name(name: Any) -> bool:
    return isinstance(name, str) and bool(PROVENANCE_NAME_RE.search(name))


# --- plain data ---------------------------------------------------------------------------


def plain(value: Any, depth: int = 0) -> Any:
    """JSON-like data copied as it is, within bounds; anything else through the generic snapshot."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        return cut_str(value)
    if depth >= MAX_PLAIN_DEPTH:
        return {"__cut__": "depth"}
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if i >= MAX_ITEMS:
                out["__cut__"] = len(value) - MAX_ITEMS
                break
            out[k if isinstance(k, str) else safe_str(k, 200)] = plain(v, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        items = [plain(v, depth + 1) for v in value[:MAX_ITEMS]]
        if len(value) > MAX_ITEMS:
            items.append({"__cut__": len(value) - MAX_ITEMS})
        return items
    return generic(value, depth)


def debug_handle_location(handle: Any) -> dict[str, Any] | None:
    """The source a ``DebugHandle.to_dict()`` names: ``source.file`` and ``source.start_line``."""
    if not isinstance(handle, dict):
        return None
    src = handle.get("source")
    if not isinstance(src, dict):
        return None
    file = src.get("file")
    line = src.get("start_line")
    if not isinstance(file, str) or not file or isinstance(line, bool) or not isinstance(line, int):
        return None
    return {"file": file, "line": line, "file_line": f"{file}:{line}"}


def _handle_dict(handle: Any) -> tuple[Any, str | None]:
    """``handle.to_dict()`` as torch-spyre serialises it (the SDSC writer calls the same method)."""
    if isinstance(handle, dict):
        return handle, None
    to_dict = getattr(type(handle), "to_dict", None)
    if to_dict is None or not callable(to_dict):
        return None, f"{type_name(handle)} has no to_dict()"
    try:
        return handle.to_dict(), None  # torch-spyre's own serialisation, as its SDSC writer calls it
    except Exception as exc:  # noqa: BLE001 - recorded, never raised
        return None, f"to_dict() raised {type(exc).__name__}: {exc}"[:400]


def snapshot_debug_handle(handle: Any, has: bool = True) -> dict[str, Any]:
    """``has``/``populated``/``type``, the ``to_dict()`` verbatim (bounded), and the derived ``file:line``."""
    out: dict[str, Any] = {"has": has, "populated": has and populated(handle),
                           "type": type_name(handle) if has else None, "value": None,
                           "file_line": None, "source": None}
    if not out["populated"]:
        return out
    value, error = _handle_dict(handle)
    if error:
        out["error"] = error
    out["value"] = plain(value)
    loc = debug_handle_location(value)
    if loc:
        out["file_line"] = loc["file_line"]
        out["source"] = {"file": loc["file"], "line": loc["line"], "func": None, "text": None}
    return out


# --- FX and LoopLevelIR -------------------------------------------------------------------


def _pipeline(call: ProbeCall) -> str | None:
    me = call.locals.get("self")
    return None if me is None else type_name(me)


def probe_fx(call: ProbeCall) -> dict[str, Any]:
    """``Custom{PreGrad,Post}Passes.__call__(self, graph)`` at entry: the FX graph's nodes."""
    return {**fx.snapshot_graph(call.arg("graph")), "pipeline": _pipeline(call)}


def probe_ir(call: ProbeCall) -> dict[str, Any]:
    """``CustomPreSchedulingPasses.__call__(self, graph)``: ``graph.operations`` (entry: pre-pass; return: post-pass)."""
    return {**ir.snapshot_ops(call.arg("graph").operations), "pipeline": _pipeline(call)}


# --- OpSpec -------------------------------------------------------------------------------


def _ir_node_of(kernel: Any) -> Any:
    """``self.current_node.node`` of a SpyreKernel, or None."""
    snode = getattr(kernel, "current_node", None)
    return None if snode is None else getattr(snode, "node", None)


def snapshot_op_spec(spec: Any, ir_node: Any = None) -> dict[str, Any]:
    """One ``OpSpec``: its declared fields, which of them are populated, and its ``debug_handle``.

    Shaped like a kernel-spec record (``kernel``, ``kind``, ``ops``, ``origins``) so the
    report reads it with the kernel-spec stage's other objects.
    """
    op_value = read_static(spec, "op", None)
    if is_dataclass_instance(spec):
        described = dataclass_fields(spec)
        for name in ("op", "is_reduction"):
            if described["fields"].get(name, {}).get("has"):
                described["fields"][name]["value"] = safe_str(read_static(spec, name, None), 400)
    else:
        described = {"type": type_name(spec), "declared_fields": [], "fields": {},
                     "error": "not a dataclass: no declared fields to read"}
    provenance = [name for name in described["fields"] if is_provenance_name(name)]
    handle_has = "debug_handle" in described["fields"] and described["fields"]["debug_handle"]["has"]
    handle = read_static(spec, "debug_handle", None) if handle_has else None
    ops = [ir.snapshot_op(ir_node, brief=True)] if ir_node is not None else []
    origins = sorted({o for op in ops for o in (op["fields"]["origins"]["value"] or [])})
    ir_name = ops[0]["name"] if ops else None
    return {
        "shape": "spyre.op_spec",
        "kernel": f"{ir_name or '?'}:{safe_str(op_value, 200)}",
        "kind": "op_spec",
        "op": safe_str(op_value, 200),
        "op_spec": {**described, "provenance_fields": provenance,
                    "populated_provenance": [n for n in provenance if described["fields"][n]["populated"]]},
        "debug_handle": snapshot_debug_handle(handle, has=handle_has),
        "ops": ops,
        "origins": origins,
        "snodes": [],
    }


def probe_op_spec(call: ProbeCall) -> dict[str, Any]:
    """``SpyreKernel.create_op_spec`` at return: the OpSpec it built, and the IR node it was built from."""
    return snapshot_op_spec(call.retval, _ir_node_of(call.locals.get("self")))


# --- SuperDSC -----------------------------------------------------------------------------


#: torch-spyre names a kernel "<emitter>_<fused name>_<n>": sdsc (SuperDSC bundle) or, with TORCH_SPYRE_KTIR=1, ktir.
EMITTERS = ("sdsc", "ktir")


def emitter_of(kernel_name: Any) -> str | None:
    """``"sdsc"`` or ``"ktir"``: which artifact torch-spyre emits for a kernel, read from its name."""
    head = kernel_name.split("_", 1)[0] if isinstance(kernel_name, str) else None
    return head if head in EMITTERS else None


def probe_define_kernel(call: ProbeCall) -> dict[str, Any]:
    """``SuperDSCScheduling.define_kernel`` at return: the kernel name, its emitter, and its nodes' origins."""
    return {"shape": "spyre.define_kernel",
            "superdsc_kernel": kernels.generated_kernel(call.retval, call.arg("node_schedule")),
            "emitter": emitter_of(call.retval)}


def probe_output_dir(call: ProbeCall) -> dict[str, Any]:
    """``get_output_dir(kernel_name)`` at return: the exact directory that kernel's bundle is written to."""
    out = call.retval
    path = os.fspath(out) if isinstance(out, (str, os.PathLike)) else None
    return {"shape": "spyre.output_dir", "kernel_name": safe_str(call.arg("kernel_name"), 400),
            "output_dir": path if isinstance(path, str) else None,
            **({} if isinstance(path, str) else {"error": f"get_output_dir returned a {type_name(out)}"})}


def read_sdsc_op(key: str, op: Any) -> dict[str, Any]:
    """One op of an SDSC file: which provenance-like keys it carries, and its ``debug_handle_``."""
    keys = list(op.keys()) if isinstance(op, dict) else []
    prov = [k for k in keys if is_provenance_name(k)]
    has = "debug_handle_" in keys
    handle = op.get("debug_handle_") if has else None
    snap = {"has": has, "populated": has and populated(handle), "type": type(handle).__name__ if has else None,
            "value": plain(handle) if has else None, "file_line": None, "source": None}
    loc = debug_handle_location(handle)
    if loc:
        snap["file_line"] = loc["file_line"]
        snap["source"] = {"file": loc["file"], "line": loc["line"], "func": None, "text": None}
    return {
        "key": cut_str(key, 400),
        "key_shape": bool(OP_KEY_RE.match(key)),
        "provenance_keys": {k: {"populated": populated(op.get(k)), "type": type(op.get(k)).__name__} for k in prov},
        "debug_handle": snap,
    }


def read_sdsc_file(path: str) -> dict[str, Any]:
    """Every op key of one ``sdsc_*.json``; a file that can't be read is recorded with why."""
    out: dict[str, Any] = {"path": path, "ops": []}
    try:
        size = os.path.getsize(path)
        out["bytes"] = size
        if size > MAX_SDSC_BYTES:
            out["error"] = f"{size} bytes is over the {MAX_SDSC_BYTES}-byte limit; not read"
            return out
        with open(path, encoding="utf-8", errors="replace") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"[:400]
        return out
    if not isinstance(doc, dict):
        out["error"] = f"the top level is a JSON {type(doc).__name__}, not an object of op keys"
        return out
    for key, op in doc.items():
        if isinstance(op, dict):
            out["ops"].append(read_sdsc_op(key, op))
        else:
            out.setdefault("other_keys", []).append(cut_str(key, 200))
    return out


def read_bundle_dir(kernel_name: str | None, directory: str) -> dict[str, Any]:
    """The ``sdsc_*.json`` files directly in `directory` (no recursion, no other directory)."""
    out: dict[str, Any] = {"kernel": kernel_name, "dir": directory, "exists": os.path.isdir(directory), "files": []}
    if not out["exists"]:
        out["error"] = "the directory does not exist (any more)"
        return out
    try:
        names = sorted(n for n in os.listdir(directory) if n.startswith("sdsc_") and n.endswith(".json"))
    except OSError as exc:
        out["error"] = f"cannot list it: {exc.strerror or exc}"
        return out
    if len(names) > MAX_SDSC_FILES:
        out["cut_files"] = len(names) - MAX_SDSC_FILES
        names = names[:MAX_SDSC_FILES]
    out["files"] = [read_sdsc_file(os.path.join(directory, n)) for n in names]
    # KTIR mode (TORCH_SPYRE_KTIR=1) writes "<kernel>.ktir" in the same directory instead of sdsc_*.json
    try:
        out["ktir_files"] = sorted(n for n in os.listdir(directory) if n.endswith(".ktir"))[:MAX_SDSC_FILES]
    except OSError:
        out["ktir_files"] = []
    out["emitter"] = "ktir" if out["ktir_files"] and not names else ("sdsc" if names else None)
    return out


def finish(kept: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """After the compile: read the bundles in exactly the directories ``get_output_dir`` returned.

    One artifact record per (compile id, graph) the directories were handed out in.
    """
    groups: dict[tuple, list[tuple[str | None, str]]] = {}
    for rec in kept:
        p = rec.get("payload") or {}
        d = p.get("output_dir")
        if not isinstance(d, str):
            continue
        key = (rec.get("compile_id"), rec.get("graph"))
        entry = (p.get("kernel_name"), d)
        if entry not in groups.setdefault(key, []):
            groups[key].append(entry)
    out = []
    for (cid, graph), dirs in groups.items():
        out.append({
            "stage": schema.ARTIFACT,
            "target": TARGET_OUTPUT_DIR,
            "compile_id": cid,
            "graph": graph,
            "payload": {"shape": "spyre.sdsc", "sdsc_bundles": [read_bundle_dir(k, d) for k, d in dirs]},
        })
    return out
