"""Probes of the graphs every backend and torch.export have, and of AOTInductor's C++ output.

- The Dynamo graph: the FX GraphModule Dynamo hands to whatever backend (`inductor`, `aot_eager`, a
  user's function), with the backend's name and the input shapes (symbolic sizes read ``s77``).
- AOT autograd's forward, inference and backward graphs, for any aot_autograd backend.
- torch.export: the user's module's forward as the source, the exported program's graph.
- AOTInductor: the C++ wrapper and kernel files `AotCodeCompiler.compile` wrote, scanned for the
  provenance comments (``//``) Inductor writes above each kernel call, as in the Python wrapper (``#``).

Pure functions of what they are handed, bounded through `snapshot.py`, like the other probe modules.
"""

from __future__ import annotations

import re
import sys
from typing import Any

from prov_trace.contract import NO_RECORD, ProbeCall
from prov_trace.probes import fx, source
from prov_trace.probes.snapshot import cut_str, safe_str
from prov_trace.probes.artifact import scan_cpp_source

#: Placeholders listed per graph in the Dynamo graph's `inputs`.
MAX_INPUTS = 256


def backend_name(output_graph: Any) -> str | None:
    """The backend of this compile: torch.compile wraps it in a debug wrapper whose ``__name__`` is the
    registered name (``inductor``, ``aot_eager``, ``eager``) or the user's function's name."""
    fn = getattr(output_graph, "compiler_fn", None)
    if fn is None:
        return None
    name = getattr(fn, "__name__", None) or getattr(fn, "compiler_name", None)
    owner = getattr(fn, "__self__", None)
    if name is not None and owner is not None and not isinstance(owner, type(sys)):
        # A bound method names its class: DDPOptimizer.compile_fn, which splits the graph at DDP's buckets.
        name = f"{type(owner).__qualname__}.{name}"
    return safe_str(name, 200) if name is not None else safe_str(type(fn).__qualname__, 200)


def input_shapes(gm: Any) -> list[str]:
    """Each placeholder's example value's shape as text; a symbolic size reads as its symbol (``s77``)."""
    out = []
    for node in getattr(gm, "graph", gm).nodes:
        if node.op != "placeholder":
            continue
        val = node.meta.get("example_value", node.meta.get("val"))
        shape = getattr(val, "shape", None)
        out.append(cut_str(f"{node.name}: {tuple(str(s) for s in shape)}" if shape is not None
                           else f"{node.name}: {type(val).__name__}", 2000))
        if len(out) >= MAX_INPUTS:
            break
    return out


#: How many frames of a graph break's user stack a record keeps (innermost last, as Dynamo lists them).
MAX_BREAK_FRAMES = 16


def graph_break(output_graph: Any) -> dict | None:
    """Why Dynamo ended this graph, when a graph break did (not the frame's return): Dynamo's reason
    (`OutputGraph.compile_subgraph_reason`, a `GraphCompileReason` it also hangs on the GraphModule) and the
    user frames it broke in, innermost last. Its text is Dynamo's own, written before the backend runs."""
    return describe_break(getattr(output_graph, "compile_subgraph_reason", None))


def describe_break(reason: Any) -> dict | None:
    """A `GraphCompileReason` that is a graph break, as plain data (None for any other reason to end a graph,
    such as the frame's return)."""
    if reason is None or getattr(reason, "graph_break", None) is not True:
        return None
    text = getattr(reason, "reason", None)
    frames = []
    for f in list(getattr(reason, "user_stack", None) or [])[-MAX_BREAK_FRAMES:]:
        file, line, func = getattr(f, "filename", None), getattr(f, "lineno", None), getattr(f, "name", None)
        frames.append({"file": cut_str(file, 2000) if isinstance(file, str) else None,
                       "line": line if isinstance(line, int) else None,
                       "func": cut_str(func, 200) if isinstance(func, str) else None})
    return {"reason": cut_str(text, MAX_ERROR_TEXT) if isinstance(text, str) else None, "stack": frames}


def probe_dynamo_graph(call: ProbeCall) -> dict:
    gm = call.arg("gm")
    out = {**fx.snapshot_graph(gm, nested=True), "backend": backend_name(call.arg("self")), "inputs": input_shapes(gm)}
    brk = graph_break(call.arg("self"))
    if brk is not None:
        out["graph_break"] = brk
    return out


def probe_graph_break(call: ProbeCall) -> Any:
    """Dynamo ends the graph it is building (`OutputGraph.compile_subgraph`, entered with its reason): a record
    only at a graph break. Most breaks end a graph the Dynamo graph's record also holds; a break right after
    another ends an empty graph, which Dynamo hands to no backend, and this record is all there is of it."""
    brk = describe_break(call.arg("reason"))
    return NO_RECORD if brk is None else {"graph_break": brk}


def probe_aot_forward(call: ProbeCall) -> dict:
    return {**fx.snapshot_graph(call.arg("fw_module"), nested=True), "is_inference": bool(call.arg("is_inference"))}


def probe_aot_backward(call: ProbeCall) -> dict:
    return {**fx.snapshot_graph(call.arg("bw_module"), nested=True), "is_inference": False}


# --- a compile that raised --------------------------------------------------------------------------

#: How many characters of an exception's text a record keeps (Dynamo's messages run to a few hundred,
#: with their explanation and hints).
MAX_ERROR_TEXT = 2000


def describe_exception(exc: Any, depth: int = 0) -> dict:
    """An exception as plain data: its type, its text where reading it runs no code of the program's (a
    torch exception, or a builtin one whose arguments are plain values), and for a backend's failure the
    exception the backend raised (`inner`, one level)."""
    t = type(exc)
    mod = getattr(t, "__module__", "") or ""
    out: dict[str, Any] = {"type": f"{mod}.{getattr(t, '__qualname__', t.__name__)}"}
    text = None
    try:
        args = getattr(exc, "args", ())
        if mod.startswith("torch"):
            text = safe_str(exc, MAX_ERROR_TEXT)
        elif mod == "builtins" and t.__str__ is BaseException.__str__ and all(
                isinstance(a, (str, int, float, bool)) for a in args):
            text = cut_str(str(exc), MAX_ERROR_TEXT)
    except Exception:  # noqa: BLE001 - an exception we cannot read is recorded by its type alone
        text = None
    if text is not None:
        out["text"] = text
    inner = getattr(exc, "inner_exception", None)
    if depth == 0 and isinstance(inner, BaseException):
        out["inner"] = describe_exception(inner, 1)
    return out


def probe_compile_error(call: ProbeCall) -> dict:
    """Dynamo's handler of an exception that ended a frame's compile: what was raised."""
    return {"error": describe_exception(call.arg("e"))}


def probe_recompile_limit(call: ProbeCall) -> Any:
    """Dynamo checked a frame's compiles against its recompile limits (`exceeds_recompile_limit` returns
    ``(exceeded, limit_type)``, the name of a `torch._dynamo.config` setting): a record only when one was hit,
    with the setting's name and value. Dynamo then stops compiling the frame and runs it as Python (or, with
    `fullgraph=True` or `fail_on_recompile_limit_hit`, raises)."""
    rv = call.retval
    if not (isinstance(rv, tuple) and len(rv) == 2 and rv[0] is True):
        return NO_RECORD
    name = rv[1] if isinstance(rv[1], str) else None
    value = None
    config = sys.modules.get("torch._dynamo.config")
    if name is not None and config is not None:
        try:
            got = getattr(config, name, None)
        except Exception:  # noqa: BLE001 - a setting we cannot read is recorded by its name alone
            got = None
        value = got if type(got) is int else None
    return {"limit": {"name": cut_str(name, 200) if name is not None else None, "value": value}}


def probe_frame_skipped(call: ProbeCall) -> Any:
    """Dynamo's `_compile` returned: a record only when it returned no compiled code, which is Dynamo giving the
    frame up without an error (its callees are still compiled on their own) - most often a frame with no op to
    put in a graph. torch 2.13 says why in `skip_reason` (Dynamo's first line is kept); 2.10 does not, and
    the record holds no reason. A compile that raised returns nothing, and the error hook has it."""
    rv = call.retval
    if rv is None or not hasattr(rv, "guarded_code") or rv.guarded_code is not None:
        return NO_RECORD
    reason = getattr(rv, "skip_reason", None)
    if isinstance(reason, str) and reason.strip():
        return {"skipped": {"reason": cut_str(reason.strip().splitlines()[0], 2000)}}
    return {"skipped": {}}


# --- torch.export ---------------------------------------------------------------------------------


def probe_export_source(call: ProbeCall) -> dict:
    """`_export` returned: the user's module's forward is the source of what was exported."""
    mod = call.arg("mod")
    code = getattr(getattr(type(mod), "forward", None), "__code__", None)
    if code is None:
        return {"error": f"{type(mod).__name__} has no forward code"}
    return source.snapshot_code(code)


def probe_export_graph(call: ProbeCall) -> dict:
    gm = getattr(call.retval, "graph_module", None)
    if gm is None:
        return {"error": "torch.export returned no graph_module"}
    return {**fx.snapshot_graph(gm, nested=True), "inputs": input_shapes(gm)}


# --- AOTInductor's C++ -----------------------------------------------------------------------------

def probe_aoti_artifact(call: ProbeCall) -> dict:
    """`AotCodeCompiler.compile` returned the files it wrote: one payload per C++ source (wrapper, kernels),
    shaped as the Python wrapper's (``path``, ``kernels``) plus every file written, under ``files``."""
    files = call.retval if isinstance(call.retval, (list, tuple)) else [call.retval]
    written = [safe_str(f, 2000) for f in files if isinstance(f, str)][:256]
    cpp = [f for f in written if f.endswith(".cpp")]
    # A kernel defined in the kernel file and called in the wrapper is one kernel: merged by name.
    merged: dict[str, dict[str, Any]] = {}
    for path in cpp:
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for k in scan_cpp_source(text):
            entry = merged.get(k["kernel"])
            if entry is None:
                merged[k["kernel"]] = {**k, "file": path}
                continue
            if entry["def_line"] is None and k["def_line"] is not None:
                entry.update(def_line=k["def_line"], file=path, comments=k["comments"])
            entry["calls"].extend(k["calls"])
            entry["provenance_comments"].extend(k["provenance_comments"])
    wrapper = next((f for f in cpp if "wrapper" in f.rsplit("/", 1)[-1]), cpp[0] if cpp else None)
    return {"path": wrapper, "files": written, "kernels": list(merged.values())}
