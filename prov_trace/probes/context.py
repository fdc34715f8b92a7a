"""Which compile a probe event belongs to: Dynamo's compile id and the graph kind.

Both are read from the compiler's own state, never guessed: the compile id from
``torch._guards.CompileContext``, the graph kind from the ``is_backward`` /
``is_inference`` locals of Inductor's ``codegen_and_compile`` frame, which every
post-grad stage runs under.
"""

from __future__ import annotations

import sys
import types

from prov_trace.stream import schema

_MAX_WALK = 60


def compile_id() -> str | None:
    guards = sys.modules.get("torch._guards")
    if guards is None:
        return None
    try:
        cid = guards.CompileContext.current_compile_id()
    except Exception:  # noqa: BLE001
        return None
    return None if cid is None else str(cid)


def graph_kind(frame: types.FrameType | None) -> str | None:
    f = frame
    for _ in range(_MAX_WALK):
        if f is None:
            return None
        code = f.f_code
        if "is_backward" in code.co_varnames and "is_inference" in code.co_varnames:
            local = f.f_locals
            if isinstance(local.get("is_backward"), bool):
                if local["is_backward"]:
                    return "backward"
                return "inference" if local.get("is_inference") else "forward"
        f = f.f_back
    return None


#: The compile id of what torch.export and AOTInductor compile: no Dynamo compile id is current there.
EXPORT_ID = "export"


def aot_graph_kind(frame: types.FrameType | None) -> str | None:
    """inference / forward / backward for an AOT graph, read from the AOT function the probe fired in."""
    if frame is None:
        return None
    name = frame.f_code.co_name
    if name == "_aot_stage2b_bw_compile":
        return "backward"
    if name == "_aot_stage2b_compile_forward_or_inference":
        return "inference" if frame.f_locals.get("is_inference") else "forward"
    return graph_kind(frame)


def inductor_context(stage: str, frame: types.FrameType) -> tuple[str | None, str | None]:
    if stage == schema.SOURCE:
        if frame.f_code.co_name == "_export":
            return EXPORT_ID, None
        cid = frame.f_locals.get("compile_id")
        return (None if cid is None else str(cid)), None
    if stage == schema.EXPORT_GRAPH:
        return EXPORT_ID, None
    cid = compile_id()
    # No Dynamo compile is current: Inductor compiles an exported program (AOTInductor).
    cid = EXPORT_ID if cid is None else cid
    if stage in (schema.PRE_GRAD, schema.DYNAMO_GRAPH):
        # The Dynamo graph, before AOT autograd splits it: shared by every graph of this compile id.
        return cid, None
    if stage == schema.AOT_GRAPH:
        return cid, aot_graph_kind(frame)
    return cid, graph_kind(frame)
