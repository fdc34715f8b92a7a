"""Which compile a probe event belongs to: Dynamo's compile id and the graph kind.

Both are read from the compiler's own state, never guessed: the compile id from
``torch._guards.CompileContext``, the graph kind from the ``is_backward`` /
``is_inference`` locals of Inductor's ``codegen_and_compile`` frame, which every
post-grad stage runs under.
"""

from __future__ import annotations

import re
import sys
import types
import weakref
from typing import Any

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


#: The compile id of a graph Inductor compiles with neither Dynamo nor AOTInductor around it: a program that calls
#: ``torch._inductor.standalone_compile`` or ``compile_fx`` itself. The session's first is ``inductor``, its second
#: ``inductor-2``: each is an AOT autograd compile of its own (``aot_config.aot_id``).
DIRECT_ID = "inductor"


def _direct_id(state: dict, stage: str, frame: types.FrameType) -> str:
    aot_id = _aot_id(stage, frame)
    direct = state.setdefault("direct", [])
    if aot_id is None:
        return DIRECT_ID if len(direct) <= 1 else f"{DIRECT_ID}-{len(direct)}"
    if aot_id not in direct:
        direct.append(aot_id)
    n = direct.index(aot_id) + 1
    return DIRECT_ID if n == 1 else f"{DIRECT_ID}-{n}"


def is_direct_id(cid: Any) -> bool:
    return isinstance(cid, str) and (cid == DIRECT_ID or (cid.startswith(DIRECT_ID + "-") and cid[len(DIRECT_ID) + 1:].isdigit()))


#: The compile id of what torch.export and AOTInductor compile: no Dynamo compile id is current there.
#: The session's first exported program is ``export``, its second ``export-2``, and so on.
EXPORT_ID = "export"
#: How far up from a stage's frame to look for torch.export's ``_export`` or AOTInductor's call.
_MAX_EXPORT_WALK = 200


def _is_export_frame(code: types.CodeType) -> bool:
    return code.co_name == "_export" and code.co_filename.replace("\\", "/").endswith("torch/export/_trace.py")


def _next_export(state: dict, spend: bool) -> str:
    """The id the session's next exported program takes (``spend``: an earlier export raised before
    returning, so the number it reserved is skipped)."""
    if spend:
        state["n_exports"] = state.get("n_exports", 0) + 1
    n = state.get("n_exports", 0) + 1
    return EXPORT_ID if n == 1 else f"{EXPORT_ID}-{n}"


def _no_export_open(state: dict) -> bool:
    """True when no ``_export`` can be running on this thread: its module is not loaded, or the session's
    own bookkeeping proves it (``_export`` is a target, and none of this thread's open target calls is
    one). A program outside any export (the common case) then skips the walk up its whole stack. False
    when only the walk can tell: ``_export`` is not traced (a profile without the export hooks), or one
    is open (it may have left by an exception)."""
    if "torch.export._trace" not in sys.modules:  # where ``_export`` lives: no frame of it without the module
        return True
    open_codes, traced_codes = state.get("open_codes"), state.get("traced_codes")
    if open_codes is None or traced_codes is None:
        return False
    if any(_is_export_frame(c) for c in open_codes()):
        return False
    return any(_is_export_frame(c) for c in traced_codes())


def _running_export(state: dict, frame: types.FrameType | None) -> str | None:
    """The id of the export running above this frame (a strict export runs Dynamo inside ``_export``),
    reserved until ``_export`` returns its program; None outside an export."""
    if _no_export_open(state):
        return None
    f = frame
    for _ in range(_MAX_EXPORT_WALK):
        if f is None:
            return None
        if _is_export_frame(f.f_code):
            pending = state.get("pending")
            if pending is not None and pending[0] == id(f):
                return pending[1]
            eid = _next_export(state, spend=pending is not None)
            state["pending"] = (id(f), eid)
            return eid
        f = f.f_back
    return None


def _export_id(state: dict, ep: Any, frame: types.FrameType) -> str:
    """The id of the ExportedProgram ``_export`` (``frame``) returned: numbered in the order this session's
    exports ran; the number reserved while it ran, if a stage inside it (strict export's Dynamo) took one."""
    exports = state.setdefault("exports", {})
    got = exports.get(id(ep))
    if got is not None and got[0]() is ep:
        return got[1]
    returned = state.get("returned")  # the other hook on the same return (Source and Export graph share it)
    if returned is not None and returned[:2] == (id(frame), id(ep)):  # ids only: the program is the caller's
        return returned[2]
    pending = state.pop("pending", None)
    eid = _next_export(state, spend=pending is not None and pending[0] != id(frame))
    state["n_exports"] = state.get("n_exports", 0) + 1
    state["last_export"] = eid
    state["returned"] = (id(frame), id(ep), eid)
    try:
        exports[id(ep)] = (weakref.ref(ep), eid)
    except TypeError:  # not weak-referenceable: an id alone could be reused, so it is not remembered
        pass
    return eid


def _compiled_export(state: dict, frame: types.FrameType | None) -> str | None:
    """Which of this session's exported programs AOTInductor is compiling: the ``exported_program`` of the
    call above (``aoti_compile_and_package``); None when no frame above holds one."""
    exports = state.get("exports")
    f = frame
    for _ in range(_MAX_EXPORT_WALK if exports else 0):
        if f is None:
            break
        if "exported_program" in f.f_code.co_varnames:
            ep = f.f_locals.get("exported_program")
            got = exports.get(id(ep))
            if got is not None and got[0]() is ep:
                return got[1]
        f = f.f_back
    return None


def _aot_compiling() -> bool:
    """AOTInductor is compiling (``compile_fx_aot``): it restores the Dynamo compile id a strict export's graph
    carries, so that id names the export's Dynamo run, not a torch.compile."""
    virtualized = sys.modules.get("torch._inductor.virtualized")
    try:
        return bool(virtualized is not None and virtualized.V.aot_compilation)
    except Exception:  # noqa: BLE001
        return False


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


def inductor_context(stage: str, frame: types.FrameType, retval: Any = None,
                     state: dict | None = None) -> tuple[str | None, str | None]:
    state = {} if state is None else state
    cid, kind = _context(stage, frame, retval, state)
    if cid is None or cid == EXPORT_ID or cid.startswith(EXPORT_ID + "-") or is_direct_id(cid):
        return cid, kind
    cid = _after_resets(state, cid, stage == schema.SOURCE and not _is_export_frame(frame.f_code))
    return _part(state, cid, stage, frame), kind


#: The stages of one AOT autograd compile: a backend that splits Dynamo's graph compiles each part apart.
_PART_STAGES = frozenset(schema.INDUCTOR_STAGES) | {schema.AOT_GRAPH}


def _aot_id(stage: str, frame: types.FrameType) -> int | None:
    """The AOT autograd compile this stage runs in (its ``aot_config.aot_id``), from AOT's own state: the AOT
    graph's frame holds the config; Inductor's later stages run while AOT names the graph it is compiling
    (``graph_being_compiled``, ``"<aot_id>_forward"``, also at a lazy backward's compile); pre-grad runs inside
    AOT's entry (a frame above holds the config) or, on older torch, just before it (the id AOT gives next).
    None where none can be read."""
    try:
        if stage == schema.AOT_GRAPH:
            aot_id = getattr(frame.f_locals.get("aot_config"), "aot_id", None)
            return aot_id if type(aot_id) is int else None
        if stage == schema.PRE_GRAD:
            # torch 2.13 runs the pre-grad passes inside aot_module_simplified, whose config is made first;
            # torch 2.10 runs them before AOT autograd starts, and the next id AOT gives is this part's.
            f = frame.f_back
            for _ in range(_MAX_AOT_WALK):
                if f is None:
                    break
                if "aot_config" in f.f_code.co_varnames:
                    aot_id = getattr(f.f_locals.get("aot_config"), "aot_id", None)
                    if type(aot_id) is int:
                        return aot_id
                f = f.f_back
            counter = getattr(sys.modules.get("torch._functorch.aot_autograd"), "AOT_COUNTER", None)
            m = _COUNT.match(repr(counter)) if counter is not None else None
            return int(m.group(1)) if m else None
        logging_utils = sys.modules.get("torch._functorch._aot_autograd.logging_utils")
        being = getattr(logging_utils, "graph_being_compiled", None)
        head = being[0].partition("_")[0] if isinstance(being, list) and being and isinstance(being[0], str) else ""
        return int(head) if head.isdigit() else None
    except Exception:  # noqa: BLE001 - no part is read: the compile id alone
        return None


_COUNT = re.compile(r"count\((\d+)")
#: How far up from the pre-grad stage to look for AOT autograd's config.
_MAX_AOT_WALK = 40


def _part(state: dict, cid: str, stage: str, frame: types.FrameType) -> str:
    """Dynamo's compile id, or for the second and later parts of a graph the backend split (DDPOptimizer's
    buckets, a piecewise backend calling Inductor per part), ``0/0.2``, ``0/0.3``: each part is an AOT autograd
    compile of its own (its forward and backward share it), so its objects are not mixed with the others'.
    An AOT compile keeps the id its first stage took: a backward Inductor compiles lazily, at the first
    backward, after a ``torch._dynamo.reset()`` that started a new round of ids, is still its forward's."""
    if stage not in _PART_STAGES:
        return cid
    aot_id = _aot_id(stage, frame)
    if aot_id is None:
        return cid
    taken = state.setdefault("aot_ids", {})
    if aot_id in taken:
        return taken[aot_id]
    parts = state.setdefault("parts", {}).setdefault(cid, [])
    parts.append(aot_id)
    taken[aot_id] = cid if len(parts) == 1 else f"{cid}.{len(parts)}"
    return taken[aot_id]


def _after_resets(state: dict, cid: str, starts: bool) -> str:
    """Dynamo's compile id, told apart from the same id before a ``torch._dynamo.reset()``.

    A reset sets Dynamo's frame counters back to zero, so the next compile is ``0/0`` again and its
    records would join the first ``0/0``'s graph. Dynamo starts each id once (``_compile``, the Source
    hook, ``starts``); an id that starts again is the first of a new round of compiles. The ids of the
    second round read ``0/0#2``, of the third ``0/0#3``. (A backward graph compiled lazily, at the first
    backward after a reset, is told apart by its AOT compile: `_part`.)"""
    started = state.setdefault("started_ids", set())
    if starts:
        if cid in started:
            state["round"] = state.get("round", 1) + 1
            started.clear()
        started.add(cid)
    n = state.get("round", 1)
    return cid if n == 1 else f"{cid}#{n}"


def _context(stage: str, frame: types.FrameType, retval: Any, state: dict) -> tuple[str | None, str | None]:
    if stage == schema.EXPORT_GRAPH or (stage == schema.SOURCE and _is_export_frame(frame.f_code)):
        return _export_id(state, retval, frame), None
    # Dynamo's _compile, at entry (the Source) and at return (a frame it skipped): its compile context is
    # not open yet, or closed again, so its `compile_id` argument names the compile.
    at_compile = stage == schema.SOURCE or (stage == schema.COMPILE_ERROR and frame.f_code.co_name == "_compile")
    if stage in (schema.SOURCE, schema.DYNAMO_GRAPH) or at_compile:
        # A strict export runs Dynamo inside _export: what it compiles is that export's.
        eid = _running_export(state, frame)
        if eid is not None:
            return eid, None
        if at_compile:
            cid = frame.f_locals.get("compile_id")
            return (None if cid is None else str(cid)), None
    if stage not in schema.STAGES:
        return _user_context(state, frame)
    cid = compile_id()
    if state.get("exports") and (cid is None or _aot_compiling()):
        # AOTInductor compiles an exported program: the one its caller names, else the last exported.
        cid = _compiled_export(state, frame) or state.get("last_export", EXPORT_ID)
    elif cid is None and _aot_compiling():
        cid = EXPORT_ID  # AOTInductor, on a program exported before tracing started
    elif cid is None:
        cid = _direct_id(state, stage, frame)  # the program called Inductor itself
    if stage in (schema.PRE_GRAD, schema.DYNAMO_GRAPH):
        # The Dynamo graph, before AOT autograd splits it: shared by every graph of this compile id.
        return cid, None
    if stage == schema.AOT_GRAPH:
        return cid, aot_graph_kind(frame)
    return cid, graph_kind(frame)


def _user_context(state: dict, frame: types.FrameType) -> tuple[str | None, str | None]:
    """A user probe's function may run anywhere: inside an export (strict or not), inside an AOTInductor or
    torch.compile compile, or outside any compile, where it belongs to no graph (not to the last export)."""
    eid = _running_export(state, frame)
    if eid is not None:
        return eid, None
    cid = compile_id()
    if _aot_compiling():
        cid = _compiled_export(state, frame) or state.get("last_export") or cid or EXPORT_ID
    return cid, (graph_kind(frame) if cid is not None else None)
