"""The report model: records in, plain data out. Measurement only: every number is counted from the trace.

Pure: no torch, no I/O. ``build`` returns a `ReportModel`, typed dicts that
mirror docs/report.schema.json and serialise to JSON as they are. The view
layer (``views.py``) turns it into what the Markdown and HTML renderers draw.
Stage objects come from the readers (``readers.py``), chosen by payload shape.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from prov_trace.contract import RETURN
from prov_trace.report import lineage as _lineage
from prov_trace.report import spyre as _spyre
from prov_trace.report.readers import read_stage
from prov_trace.report.text import basename, first_line, graph_break_summary, is_library_path, target_function
from prov_trace.stream import schema
from prov_trace.stream.reader import Trace

S = schema


# --- the model's types: each mirrors a definition in docs/report.schema.json --------------------
# (tests/test_layering.py checks that every key here is in the schema, and the other way round)


class SourceRef(TypedDict, total=False):
    file: str | None
    line: int | None
    func: str | None
    text: str | None


class FieldPresence(TypedDict, total=False):
    has: bool
    populated: bool
    type: str | None


class StageObject(TypedDict, total=False):
    """An object a stage produced (an FX node, an IR op, a kernel, a source line...); stages add keys of their own."""

    name: Any
    kind: Any
    fields: dict[str, FieldPresence]
    sources: list[SourceRef]


class StageData(TypedDict, total=False):
    observed: bool
    #: What the stage produced and the matrix measures (FX: compute nodes only).
    objects: list[StageObject]
    #: FX stages: the graph's boundary (placeholders, get_attr, the output), counted apart.
    boundary: list[StageObject]
    #: Source stage: the library frames Dynamo compiled (not the user's lines), as ``qualname (file)``.
    library: list[str]
    records: int
    files: list[str]
    #: What the stage is when its objects alone would mislead (torch-spyre's KTIR mode at the artifact).
    note: str


class Cell(TypedDict, total=False):
    state: str
    n: int
    total: int
    objects: list[str]
    #: Why a ➖ cell's field cannot exist yet at that stage.
    reason: str


class MatrixRow(TypedDict):
    layer: str
    field: str
    cells: dict[str, Cell]


class SurvivalRow(TypedDict):
    file: Any
    line: Any
    text: Any
    counts: dict[str, int | None]
    carriers: dict[str, list[str]]
    last_stage: str | None
    lost_at: str | None
    lost_by: list[str]
    #: What the row is when nothing carries the line: "no op on this line", "in graph 1/0"; else None.
    note: str | None
    #: The model's line, not a library's or framework's (``_mark_model_files``).
    user: bool


class Mappings(TypedDict):
    kernel_to_post: dict[str, list[str]]
    pre_to_post: dict[str, list[str]]


class BreakFrame(TypedDict):
    file: str | None
    line: int | None
    func: str | None


class GraphBreak(TypedDict):
    reason: str | None
    summary: str | None
    stack: list[BreakFrame]


class Graph(TypedDict):
    compile_id: str | None
    kind: str | None
    label: str
    stages: dict[str, StageData]
    #: Stages this graph shares with the first graph of its compile id (a backward graph's source
    #: and pre-grad are its forward's): stage -> that graph's label.
    shared: dict[str, str]
    matrix: list[MatrixRow]
    survival: list[SurvivalRow]
    mappings: Mappings
    lineage: _lineage.Lineage
    #: Measured facts that explain the matrix (e.g. a compile of library code only).
    notes: list[str]
    #: What a reader wants first: how far the model's lines get, where most are lost, sourceless kernels.
    headline: dict[str, Any]
    #: The backend Dynamo handed this graph to ("inductor", "aot_eager", a user's function's name), or
    #: "torch.export" for an exported program; None when the trace does not say.
    backend: str | None
    #: Why Dynamo ended this graph, when a graph break did: its reason, the reason's summary, the user frames
    #: it broke in (innermost last). None when the graph ended at the frame's return.
    graph_break: GraphBreak | None
    #: Stages this graph's compile does not pass through (Inductor's with another backend, Dynamo's on the
    #: export path): stage -> why. Their cells are ➖, not ⚠.
    off_path: dict[str, str]
    #: Where provenance is lost, ranked by lines: transition, kind of object, lines, objects.
    losses: list[dict[str, Any]]
    #: Nodes a pass gave another line: name, target, the two stages (`from`, `to`), the lines before and after.
    moved: list[dict[str, Any]]


class TraceInfo(TypedDict):
    path: str
    bytes: int
    records: int
    complete: bool
    problem: str | None
    end: dict[str, Any] | None
    repaired: int
    warnings: list[str]
    unknown_kinds: dict[str, int]


class Symbol(TypedDict):
    symbol: str
    meaning: str


class HookStatus(TypedDict, total=False):
    target: str
    stage: str
    event: str
    resolved: bool
    installed: bool
    fired: int
    #: The records its probe wrote (a side hook, called at every compile, writes one only when something happened).
    records: int
    errors: int
    reason: str | None


class ProbeError(TypedDict):
    stage: str | None
    target: str | None
    phase: str | None
    type: str | None
    message: str | None


class Skipped(TypedDict):
    reason: str | None


class FrameWithoutGraph(TypedDict):
    compile_id: str | None
    file: str | None
    line: int | None
    qualname: str | None
    #: Where its compile stopped, when a traced call of it did not return (fullgraph=True on a graph break).
    stopped_in: StoppedIn | None
    #: The graph break that ended its empty graph (one right after another break), else None.
    graph_break: GraphBreak | None
    #: Dynamo gave the frame up without an error and ran it as Python (`_compile` returned no code): `reason` is
    #: Dynamo's first line ("... No ops traced for the FX graph ..."), None where torch gives none (2.10).
    skipped: Skipped | None


class Notice(TypedDict):
    kind: str | None
    text: str
    #: How many calls said it.
    calls: int


class StoppedIn(TypedDict):
    stage: str
    target: str | None
    #: Per-kernel stages (the kernel spec) some of whose records for the graph came from inside the call that
    #: did not return: they may hold only what the compile made before it stopped (no record says whether it
    #: had made them all: Inductor's codegen and its C++ compile both run inside compile_to_module). Empty
    #: where the compile's `error` says codegen had finished (`AFTER_CODEGEN`).
    maybe_cut_short: list[str]
    #: The exception that ended the compile, as Dynamo's handler received it: `type` (module and qualname),
    #: `text` (where the probe could read it without running the program's code), `inner` (a backend's own
    #: exception, for BackendCompilerFailed). Absent where no handler call was recorded for the compile.
    error: NotRequired[dict[str, Any]]


class OutsideCompile(TypedDict):
    stage: str
    target: str | None
    #: None: taken while no compile ran; else the compile or export it ran in, which recorded no stage of
    #: the pipeline (it raised first).
    compile_id: str | None
    snapshots: int


class NotReturned(TypedDict):
    stage: str
    target: str | None
    #: The unwind record's reason: the call exited by an exception, had not returned when tracing stopped, ...
    why: str | None
    calls: int


class Cut(TypedDict):
    compile_id: str | None
    graph: str | None
    stage: str | None
    total: int | None
    cut: int
    reason: str | None


class SummaryRow(TypedDict):
    stage: str
    hooks: int
    resolved: int
    fired: int
    errors: int
    observed: bool
    objects: int
    #: FX stages: placeholders, attributes and outputs, counted apart from `objects`.
    boundary: int
    unresolved: list[str]
    #: Why the stage is on no graph's path (every graph's `off_path` reason, once), when none observed it.
    off_path: str | None
    #: A user probe's stage: snapshots taken while no compile ran (in no graph, not in `objects`).
    outside_compile: int
    #: Calls of the stage's targets that exited by an exception (a compile that failed inside them).
    raised: int


class ReportModel(TypedDict):
    """The whole report; ``jsonout`` writes it as it is, with ``format`` and ``version`` added."""

    header: dict[str, Any]
    trace: TraceInfo
    stage_order: list[str]
    stage_titles: dict[str, str]
    symbols: dict[str, Symbol]
    hooks: list[HookStatus]
    errors: list[ProbeError]
    graphs: list[Graph]
    frames_without_graph: list[FrameWithoutGraph]
    #: What prov-trace's own settings did to the program (docs/report.md): each text once.
    notices: list[Notice]
    #: User probe snapshots taken while no compile ran (a probe on the user's own function, called by the
    #: program): not a graph's objects.
    outside_compile: list[OutsideCompile]
    #: Traced calls that did not return (unwind records): where a compile or export that raised stopped.
    not_returned: list[NotReturned]
    cuts: list[Cut]
    summary: list[SummaryRow]
    #: A run through torch-spyre (--torch-spyre): the stand-in's record and its cross-check; else None.
    spyre: dict[str, Any] | None


@dataclass(frozen=True)
class FieldSpec:
    """One row of the Stage × Field matrix: where the field is measured, and where it cannot exist yet."""

    layer: str
    field: str
    #: The stages whose objects have this slot; at every other stage the cell is ➖ (no such slot).
    measured_at: tuple[str, ...]
    #: Stages whose objects have the slot but where the pipeline has not created the value yet (the
    #: seed's "–"): the cell is ➖ with this reason unless some object there does carry it.
    not_yet: tuple[tuple[str, str], ...] = ()
    #: Profiles whose objects carry the field; None: every profile's. A profile-only row shows only
    #: for those profiles, or where some object has the field.
    profiles: tuple[str, ...] | None = None


#: The matrix rows, as data. Edit here to add a field (docs/architecture.md, "Add a stage field").
FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("Source", "file:line", (S.SOURCE,)),
    FieldSpec("Source", "source_text", (S.SOURCE,)),
    FieldSpec("FX", "stack_trace", S.FX_STAGES),
    FieldSpec("FX", "nn_module_stack", S.FX_STAGES),
    FieldSpec("FX", "source_fn_stack", S.FX_STAGES),
    FieldSpec("FX", "original_aten", S.FX_STAGES, not_yet=(
        (S.DYNAMO_GRAPH, "set when AOT autograd traces the graph into ATen ops, which happens after Dynamo hands it over"),
        (S.PRE_GRAD, "set when AOT autograd traces the graph into ATen ops, which happens after the pre-grad stage"),)),
    FieldSpec("FX", "from_node", S.FX_STAGES, not_yet=(
        (S.DYNAMO_GRAPH, "names the node a pass made this one from; the graph Dynamo hands over has not been through one"),
        (S.PRE_GRAD, "names the node a pass made this one from; the graph Dynamo hands over has not been through one"),)),
    FieldSpec("IR", "origins", (S.IR_PRE, S.IR_POST, S.KERNEL_SPEC)),
    FieldSpec("IR", "origin_node", (S.IR_PRE, S.IR_POST)),
    FieldSpec("IR", "traceback", (S.IR_PRE, S.IR_POST)),
    FieldSpec("IR", "get_stack_traces", (S.IR_PRE, S.IR_POST, S.KERNEL_SPEC)),
    FieldSpec("Backend", "kernel_metadata", (S.KERNEL_SPEC,)),
    FieldSpec("Backend", "provenance_comment", (S.ARTIFACT,)),
    # torch-spyre: OpSpec.debug_handle at the kernel spec, the op key's debug_handle_ in each sdsc_*.json.
    FieldSpec("Spyre", "debug_handle", (S.KERNEL_SPEC, S.ARTIFACT), profiles=("spyre",)),
)
#: The layer of the rows a user probe's stage adds to the matrix (one per snapshot key).
USER_LAYER = "Probe"
#: FX node kinds that compute: the matrix counts these (the seed's rule). Placeholders, get_attr
#: and the output node are the graph's boundary: counted apart, never in a field's n/N.
COMPUTE_KINDS = ("call_function", "call_method", "call_module")

SYMBOLS = OrderedDict(
    [
        ("all", ("✅", "populated (exists and non-empty) on every object the stage produced")),
        ("some", ("◐", "populated on n of N objects")),
        ("none", ("❌", "reachable at this stage but empty or absent on every object (a drop, or an object with no source to carry)")),
        ("na", ("➖", "not applicable: the object this stage produces has no such slot, or the pipeline has not "
                     "created the field yet at this stage (the matrix's notes say why)")),
        ("empty", ("∅", "the stage fired but produced no objects to measure")),
        ("unobserved", ("⚠", "not observed: the stage's hook did not resolve or did not fire, so nothing was measured")),
    ]
)


def _cell(n: int, total: int) -> dict[str, Any]:
    if total == 0:
        state = "empty"
    elif n == total:
        state = "all"
    elif n == 0:
        state = "none"
    else:
        state = "some"
    return {"state": state, "n": n, "total": total}


# --- graphs -----------------------------------------------------------------------------


def _group(trace: Trace) -> "OrderedDict[tuple, dict[str, list]]":
    """Probe records grouped per graph: (compile id, graph kind) -> stage -> records."""
    probes = [r for r in trace.records if r.get("kind") == S.PROBE and r.get("phase") != "unwind"
              and r.get("stage") not in S.SIDE_STAGES]
    kinds_by_cid: dict[Any, list[str]] = OrderedDict()
    for r in probes:
        kinds_by_cid.setdefault(r.get("compile_id"), [])
        g = r.get("graph")
        if g and g not in kinds_by_cid[r.get("compile_id")]:
            kinds_by_cid[r.get("compile_id")].append(g)
    graphs: "OrderedDict[tuple, dict[str, list]]" = OrderedDict()
    for cid, kinds in kinds_by_cid.items():
        for kind in kinds or [None]:
            graphs[(cid, kind)] = {}
    parts: dict[Any, list] = {}
    for cid in kinds_by_cid:
        if dynamo_compile(cid) != cid and dynamo_compile(cid) in kinds_by_cid:
            parts.setdefault(dynamo_compile(cid), []).append(cid)
    for r in probes:
        for key in _graphs_of(r, kinds_by_cid, parts):
            graphs[key].setdefault(r.get("stage"), []).append(r)
    return graphs


def _graphs_of(r: dict[str, Any], kinds_by_cid: dict[Any, list], parts: dict[Any, list] | None = None) -> list[tuple]:
    """The (compile id, graph kind) keys a record belongs to: its own, or, for a record with no graph kind
    (source, pre-grad, a compile's outer calls), every graph of its compile id; a Source or Dynamo graph
    record, every graph of the parts a backend split that Dynamo graph into, too."""
    cid, kind = r.get("compile_id"), r.get("graph")
    if kind:
        return [(cid, kind)]
    keys = [(cid, k) for k in (kinds_by_cid.get(cid) or [None])]
    if parts and r.get("stage") in DYNAMO_STAGES:
        keys += [(p, k) for p in parts.get(cid, ()) for k in (kinds_by_cid.get(p) or [None])]
    return keys


#: A later part of a Dynamo graph a backend split (``0/0.2``: probes/context.py) and the compile id it is part of.
_PART = re.compile(r"^(.+)\.(\d+)$")
#: The stages before a backend splits Dynamo's graph: every part shares them.
DYNAMO_STAGES = (S.SOURCE, S.DYNAMO_GRAPH)


def dynamo_compile(cid: Any) -> Any:
    """The Dynamo compile a graph's compile id belongs to: itself, or for a later part of a split graph
    (``0/0.2``) the compile it is part of (``0/0``)."""
    m = _PART.match(cid) if isinstance(cid, str) else None
    return m.group(1) if m else cid


def _user_fields(stages: dict[str, dict[str, Any]], stage_order: list[str]) -> list[FieldSpec]:
    """One matrix row per key a user probe's snapshots carry (an argument name, or `return`)."""
    where: "OrderedDict[str, list[str]]" = OrderedDict()
    for st in stage_order:
        if st in S.STAGES:
            continue
        for o in (stages.get(st) or {}).get("objects", []):
            for key in o["fields"]:
                if st not in where.setdefault(key, []):
                    where[key].append(st)
    return [FieldSpec(USER_LAYER, key, tuple(sts)) for key, sts in where.items()]


def _has_field(stages: dict[str, dict[str, Any]], field: str) -> bool:
    return any(field in o["fields"] for d in stages.values() if d for o in d["objects"])


def matrix_fields(stages: dict[str, dict[str, Any]], stage_order: list[str], profile: str | None) -> list[FieldSpec]:
    """The rows this graph's matrix has: every field, but a profile-only one only where it can be measured."""
    rows = [f for f in FIELDS if f.profiles is None or profile in f.profiles or _has_field(stages, f.field)]
    return rows + _user_fields(stages, stage_order)


def _matrix(stages: dict[str, dict[str, Any]], stage_order: list[str], profile: str | None,
            off_path: dict[str, str] | None = None) -> list[dict[str, Any]]:
    off_path = off_path or {}
    rows = []
    for spec in matrix_fields(stages, stage_order, profile):
        fname, not_yet = spec.field, dict(spec.not_yet)
        cells = {}
        for st in stage_order:
            data = stages.get(st)
            if st not in spec.measured_at:
                cells[st] = {"state": "na", "n": 0, "total": 0}
            elif (data is None or not data["observed"]) and st in off_path:
                cells[st] = {"state": "na", "n": 0, "total": 0, "reason": off_path[st]}
            elif data is None or not data["observed"]:
                cells[st] = {"state": "unobserved", "n": 0, "total": 0}
            elif data["objects"] and not any(fname in o["fields"] for o in data["objects"]):
                # None of this stage's objects has such a slot (e.g. a stock kernel has no debug_handle).
                cells[st] = {"state": "na", "n": 0, "total": 0}
            else:
                objs = data["objects"]
                if st not in S.STAGES:
                    # A user probe's key is measured on the snapshots that hold it: `return` is taken at
                    # return only, so a @both probe's entry snapshots are not calls that lost it.
                    objs = [o for o in objs if fname in o["fields"]]
                n = sum(1 for o in objs if o["fields"].get(fname, {}).get("populated"))
                if n == 0 and st in not_yet:
                    # Not created yet at this stage: not a drop. Measured as usual wherever an object has it.
                    cells[st] = {"state": "na", "n": 0, "total": len(objs), "reason": not_yet[st]}
                    continue
                cells[st] = _cell(n, len(objs))
                cells[st]["objects"] = [o["name"] for o in objs if o["fields"].get(fname, {}).get("populated")][:200]
        rows.append({"layer": spec.layer, "field": fname, "cells": cells})
    return rows


def _survival(stages: dict[str, dict[str, Any]], stage_order: list[str]) -> list[dict[str, Any]]:
    """Per model source line: where its provenance is last attached, and where it is first lost."""
    src = stages.get(S.SOURCE)
    seen: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for o in (src["objects"] if src else []):
        seen.setdefault((o["sources"][0].get("file"), o["sources"][0].get("line")), o["sources"][0])
    # Lines of functions Dynamo inlined (a submodule's forward, a Hugging Face layer) are not in the
    # code objects it compiled, but the FX stack traces name them: they get rows too.
    extra: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for st in S.FX_STAGES:
        for o in (stages.get(st) or {}).get("objects", []):
            for s in o["sources"]:
                key = (s.get("file"), s.get("line"))
                if key not in seen:
                    extra.setdefault(key, s)
    lines = list(seen.values()) + [extra[k] for k in sorted(extra, key=lambda k: (str(k[0]), k[1] or 0))]
    # Kernels that carry a provenance comment in the artifact, by name.
    art = stages.get(S.ARTIFACT)
    commented = {o["name"] for o in art["objects"] if o["fields"].get("provenance_comment", {}).get("populated")} if art else set()
    # Each stage's objects by the source lines they carry, built once: a lookup per line, not a scan
    # (a graph with thousands of distinct lines and nodes would otherwise take lines x objects).
    by_line = {st: _by_line(data["objects"]) for st, data in stages.items() if data is not None and data["observed"]}
    ks = stages.get(S.KERNEL_SPEC)
    ks_by_line = _by_line(ks["objects"]) if ks else {}
    sourceless = {}
    rows = []
    for line in lines:
        key = (line.get("file"), line.get("line"))
        per_stage = OrderedDict()
        carriers: dict[str, list[str]] = {}
        for st in stage_order:
            if st == S.SOURCE:
                continue
            data = stages.get(st)
            if data is None or not data["observed"]:
                per_stage[st] = None
                continue
            if st == S.ARTIFACT:
                # The emitted file names no source lines: a line reaches it through the kernels that
                # carry it at the kernel spec, when the file gives those kernels a provenance comment.
                names = [n for n in ks_by_line.get(key, []) if n in commented]
                # An emitted object that names the line itself (a Spyre op key's debug_handle_) carries it directly.
                names += by_line[st].get(key, [])
            else:
                names = list(by_line[st].get(key, []))
            per_stage[st] = len(names)
            carriers[st] = names[:20]
        last = None
        lost = None
        for st, n in per_stage.items():
            if n is None or st not in S.STAGES:  # a user probe's column is a side view, not a pipeline step
                continue
            if n > 0:
                last = st
                lost = None
            elif last is not None and lost is None:
                lost = st
        note = None
        if last is None:
            if _names_only(line.get("text")):
                note = NO_OP  # `return x`, a bare name: nothing on the line makes a node, so nothing can lose it
            else:
                lost = next((st for st, n in per_stage.items() if n is not None and st in S.STAGES), None)
        rows.append({
            "file": line.get("file"), "line": line.get("line"), "text": line.get("text"),
            "counts": dict(per_stage), "carriers": carriers,
            "last_stage": last, "lost_at": lost,
            "lost_by": _lost_by(stages, lost, carriers.get(last, []) if last else [], commented, sourceless),
            "note": note,
            "user": True,  # set for the whole report by _mark_model_files
        })
    return rows


#: torch's own installed files: framework code, never the model's, even where the compile carries their lines
#: (a compiled optimizer step is torch/optim/adam.py through and through).
_TORCH_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]torch[/\\]")


def _mark_model_files(graphs: list[dict[str, Any]]) -> None:
    """Whose each line is: the model's (a file outside installed packages, or an installed file some line of
    which the compile carries, like a Hugging Face model's modeling file), or a library's or framework's (a
    decorator's wrapper in transformers' utils, torch itself). Each graph's rows then run the model's files
    first, each file's lines together and in order."""
    attached: dict[Any, int] = {}
    for g in graphs:
        for r in g["survival"]:
            if r["last_stage"] is not None:
                attached[r["file"]] = attached.get(r["file"], 0) + 1
    for g in graphs:
        first_seen: dict[Any, int] = {}
        ca = is_compiled_autograd(g.get("compile_id"))
        for r in g["survival"]:
            f = r["file"]  # a damaged trace's row may name no file
            r["user"] = not is_library_path(f) or (f in attached and isinstance(f, str) and not _TORCH_PACKAGE.search(f))
            if ca and str(r["file"]).startswith(_GENERATED_FX):
                r["user"] = False  # compiled autograd's own generated code
            first_seen.setdefault(r["file"], len(first_seen))
        # The file with most lines the compile carries first: the model's main file.
        g["survival"].sort(key=lambda r: (not r["user"], -attached.get(r["file"], 0), first_seen[r["file"]],
                                          r["line"] if isinstance(r["line"], int) else 0))


#: A survival row's note when its line holds no operation (``return x``, a bare name).
NO_OP = "no op on this line"


def _names_only(text: Any) -> bool:
    """Whether a source line only names values (``return x``, ``x``, ``return a, b``, ``pass``): no node can come of it."""
    import ast

    if not isinstance(text, str) or not text.strip() or len(text) > 2000:
        return False
    try:
        tree = ast.parse(text.strip())
    except (SyntaxError, ValueError, UnicodeError, RecursionError, MemoryError):  # trace text is not trusted
        return False
    if len(tree.body) != 1:
        return False
    stmt = tree.body[0]
    if isinstance(stmt, ast.Pass):
        return True
    value = stmt.value if isinstance(stmt, (ast.Return, ast.Expr)) else None
    if isinstance(stmt, ast.Return) and value is None:
        return True
    names = value.elts if isinstance(value, ast.Tuple) else [value]
    return value is not None and all(isinstance(v, (ast.Name, ast.Constant)) for v in names)


def _first_of_compile(graphs: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    first: dict[Any, dict[str, Any]] = {}
    for g in graphs:
        first.setdefault(g["compile_id"], g)
    return first


#: The stages AOT autograd has not split yet: one object set per compile id, shown in each of its graphs.
SHARED_STAGES = (S.SOURCE, S.EXPORT_GRAPH, S.DYNAMO_GRAPH, S.PRE_GRAD)


def _mark_shared(graphs: list[dict[str, Any]]) -> None:
    """A backward graph's source and pre-grad are its forward's: say so, don't present them as its own."""
    first = _first_of_compile(graphs)
    for g in graphs:
        owner = first[g["compile_id"]]
        # A later part of a split Dynamo graph: its source and Dynamo graph are the first part's.
        dynamo = first.get(dynamo_compile(g["compile_id"]), owner)
        shared = {st: (dynamo if st in DYNAMO_STAGES else owner)["label"] for st in SHARED_STAGES
                  if st in g["stages"] and g["stages"][st]["observed"]}
        g["shared"] = {st: label for st, label in shared.items() if label != g["label"]}


def _mark_other_graphs(graphs: list[dict[str, Any]]) -> None:
    """A line no object of this graph carries, but another compile's graph does (a graph break): say which."""
    first = _first_of_compile(graphs)
    carried: dict[tuple, list[str]] = {}
    for g in first.values():
        for row in g["survival"]:
            if row["last_stage"] is not None:
                labels = carried.setdefault((row["file"], row["line"]), [])
                if g["label"] not in labels:
                    labels.append(g["label"])
    for g in graphs:
        for row in g["survival"]:
            if row["last_stage"] is not None or row["note"]:
                continue
            others = [lbl for lbl in carried.get((row["file"], row["line"]), []) if lbl != first[g["compile_id"]]["label"]]
            if others:
                row["note"] = f"in graph {', '.join(others)}"
                row["lost_at"], row["lost_by"] = None, []


def _mark_split_by_aot(graphs: list[dict[str, Any]]) -> None:
    """A line the shared stages carry that AOT autograd put only in the other graph of its compile: a custom
    autograd.Function's backward (its ops are the backward graph's), or its forward's ops the backward does
    not recompute. Not a loss where no object of this graph's AOT graph comes from its carriers (an op of this
    graph that dropped the line would be linked to them by from_node, and named as what lost it)."""
    by_compile: dict[Any, list[dict[str, Any]]] = {}
    for g in graphs:
        by_compile.setdefault(g["compile_id"], []).append(g)
    for siblings in by_compile.values():
        if len(siblings) < 2:
            continue
        at_aot = [{(r["file"], r["line"]) for r in g["survival"] if r["counts"].get(S.AOT_GRAPH)} for g in siblings]
        for g in siblings:
            for row in g["survival"]:
                if row["note"] or row["lost_at"] != S.AOT_GRAPH or row["lost_by"]:
                    continue
                others = [o["label"] for o, lines in zip(siblings, at_aot)
                          if o is not g and (row["file"], row["line"]) in lines]
                if others:
                    row["note"] = f"in graph {', '.join(others)}: AOT autograd put the line's ops there"
                    row["lost_at"], row["lost_by"] = None, []


def _mark_split_parts(graphs: list[dict[str, Any]]) -> None:
    """A line Dynamo's graph carries whose ops the backend compiled in another part of that graph (DDPOptimizer's
    buckets, a piecewise backend): every part shares the Dynamo graph, so the line reads as lost after it in
    the parts that do not hold its ops. Not a loss: say which part holds it. Each part's graphs say which part
    they are."""
    by_dynamo: dict[Any, list[Any]] = {}
    for cid in _first_of_compile(graphs):
        by_dynamo.setdefault(dynamo_compile(cid), []).append(cid)
    for part_ids in by_dynamo.values():
        if len(part_ids) < 2:
            continue
        members = [g for g in graphs if g["compile_id"] in part_ids]
        carried: dict[tuple, list[str]] = {}  # a line -> the parts' graphs that carry it past the Dynamo graph
        for g in members:
            n = part_ids.index(g["compile_id"]) + 1
            others = [x for x in part_ids if x != g["compile_id"]]
            g["notes"].append(
                f"The backend ({g.get('backend') or 'its compiler'}) split Dynamo's graph {part_ids[0]} and compiled "
                f"it in {len(part_ids)} parts, each an AOT autograd compile of its own: this is part "
                f"{n} ({', '.join(others)} the other{'s' if len(others) > 1 else ''}). "
                "The parts share the source and the Dynamo graph.")
            for r in g["survival"]:
                if r["last_stage"] is not None and r["last_stage"] not in DYNAMO_STAGES:
                    labels = carried.setdefault((r["file"], r["line"]), [])
                    if g["label"] not in labels:
                        labels.append(g["label"])
        for g in members:
            for row in g["survival"]:
                if row["note"] or row["last_stage"] not in DYNAMO_STAGES:
                    continue
                others = [lbl for lbl in carried.get((row["file"], row["line"]), []) if lbl != g["label"]]
                if others:
                    row["note"] = f"in graph {', '.join(others)}: the backend split Dynamo's graph and compiled the line's ops there"
                    row["lost_at"], row["lost_by"] = None, []


#: A survival row's note when Dynamo broke the graph at its line: the line runs in Python, between graphs.
GRAPH_BREAK = "graph break: runs in Python"

#: Dynamo's name for the function it resumes in after a graph break: ``torch_dynamo_resume_in_forward_at_22``
#: (torch/_dynamo/resume_execution.py), the line being the break's.
_RESUME = re.compile(r"torch_dynamo_resume_in_.*_at_(\d+)$")


def _graph_break(by_stage: dict[str, list]) -> dict[str, Any] | None:
    """Why Dynamo ended this compile's graph, when a graph break did, as the Dynamo graph's probe read it:
    its reason (whole, and its first line) and the user frames it broke in, innermost last."""
    for r in by_stage.get(S.DYNAMO_GRAPH, []):
        p = r.get("payload")
        brk = _break_view(p.get("graph_break") if isinstance(p, dict) else None)
        if brk is not None:
            return brk
    return None


def _break_view(brk: Any) -> dict[str, Any] | None:
    """A recorded graph break as the model gives it: Dynamo's reason (whole, and in one line) and the user
    frames it broke in, innermost last."""
    if not isinstance(brk, dict):
        return None
    stack = [f for f in brk.get("stack") or [] if isinstance(f, dict)]
    return {"reason": brk.get("reason"), "summary": graph_break_summary(brk), "stack": stack}


def _mark_graph_breaks(graphs: list[dict[str, Any]], frames_without_graph: list[dict[str, Any]] = ()) -> None:
    """A line no graph carries, where Dynamo broke the graph (``print(x)``, a call it cannot trace): it runs in
    Python between two graphs, so it holds no op of either. Say so, with Dynamo's reason, and what resumes
    after it (a graph, or a frame that compiled none, like ``loss.backward()``'s); it is not a line whose
    provenance a stage lost. A break is found by the function Dynamo resumes in, or by the frames of the
    reason Dynamo gave for ending a graph."""
    resumed: dict[tuple, list[tuple[str, str]]] = {}
    why: dict[tuple, str] = {}

    def add(func: Any, path: Any, what: tuple[str, str]) -> None:
        m = _RESUME.search(str(func or ""))
        if m and isinstance(path, str):
            whats = resumed.setdefault((path, int(m.group(1))), [])
            if what not in whats:
                whats.append(what)

    first = _first_of_compile(graphs)
    for g in first.values():
        for o in (g["stages"].get(S.SOURCE) or {}).get("objects", []):
            src = (o.get("sources") or [{}])[0]
            add(src.get("func"), src.get("file"), ("graph", g["label"]))
        brk = g.get("graph_break") or {}
        for f in brk.get("stack") or []:
            if isinstance(f.get("file"), str) and isinstance(f.get("line"), int) and brk.get("summary"):
                why.setdefault((f["file"], f["line"]), brk["summary"])
    for f in frames_without_graph:
        add(f.get("qualname"), f.get("file"), ("frame", str(f.get("compile_id"))))
        brk = f.get("graph_break") or {}
        for fr in brk.get("stack") or []:
            if isinstance(fr.get("file"), str) and isinstance(fr.get("line"), int) and brk.get("summary"):
                why.setdefault((fr["file"], fr["line"]), brk["summary"])
    if not resumed and not why:
        return
    for g in graphs:
        own = ("graph", first[g["compile_id"]]["label"])
        noted = []
        for row in g["survival"]:
            key = (row["file"], row["line"])
            if row["last_stage"] is not None or row["note"] or (key not in resumed and key not in why):
                continue
            row["note"] = GRAPH_BREAK
            row["lost_at"], row["lost_by"] = None, []
            noted.append((key, None if key not in resumed else [] if own in resumed[key] else resumed[key]))
        own_stack = {(f.get("file"), f.get("line")) for f in (g.get("graph_break") or {}).get("stack") or []}
        for (path, line), after in noted:
            where = f"{basename(path)}:{line}"
            # The graph's own break gives its reason above the notes (views.py); another graph's says it here.
            reason = f" (Dynamo: {why[(path, line)]})" if (path, line) in why and (path, line) not in own_stack else ""
            g["notes"].append(f"{where} is a graph break{reason}: Dynamo runs that line in Python, so no stage "
                              f"carries it" + (f", and {_resumers(after)} after it." if after is not None else "."))


def _resumers(after: list[tuple[str, str]]) -> str:
    """``graph 1/0 inference resumes``, ``graphs 1/0 inference, 1/1 inference resume``, ``frame 3/0 (which
    compiled no graph) resumes``; ``this graph resumes`` for none."""
    if not after:
        return "this graph resumes"
    graphs = [label for kind, label in after if kind == "graph"]
    frames = [label for kind, label in after if kind == "frame"]
    parts = []
    if graphs:
        parts.append(f"graph{'s' if len(graphs) > 1 else ''} {', '.join(graphs)}")
    if frames:
        parts.append(f"frame{'s' if len(frames) > 1 else ''} {', '.join(frames)} (which compiled no graph)")
    return " and ".join(parts) + (" resumes" if len(after) == 1 else " resume")


#: A survival row's note when the graph's first FX stage names no line for it though every node there names
#: one: Dynamo traced no op to the line (control flow, a branch not taken, Python-only code, a call whose ops
#: are its callee's lines).
NO_OP_TRACED = "no op traced to this line"


def _mark_untraced_lines(graphs: list[dict[str, Any]]) -> None:
    """A line no stage carries is a loss only where a node could have dropped it: when every compute node of the
    graph's first FX stage names its source line, none of them came from this line, so nothing was lost here.
    Where some node names none, the line may be its, and stays counted as never attached."""
    for g in graphs:
        first_fx = next((g["stages"][st] for st in (S.EXPORT_GRAPH, S.DYNAMO_GRAPH, S.PRE_GRAD)
                         if (g["stages"].get(st) or {}).get("observed")), None)
        if first_fx is None or not first_fx["objects"] or any(not o.get("sources") for o in first_fx["objects"]):
            continue
        for row in g["survival"]:
            if row["last_stage"] is None and not row["note"]:
                row["note"] = NO_OP_TRACED
                row["lost_at"], row["lost_by"] = None, []


#: Dynamo's higher-order ops that wrap a function's graph and that AOT autograd inlines: the wrapped code's
#: ops take its own lines with them, and the call's line keeps nothing. They are the HOPs of torch's
#: ``torch/_higher_order_ops/wrap.py`` but ``inductor_compiled_code`` (a call into compiled code, not a
#: graph); the report reads only the trace, so the names are listed, and a test compares them with the
#: installed torch's (tests/test_backends_export.py).
#: ``autograd_function_apply`` (torch/_functorch/autograd_function.py, the same name in torch 2.10-2.14.1) is
#: a custom ``torch.autograd.Function``'s ``apply``: Dynamo traces its forward and backward into two nested
#: graphs, and AOT inlines them into the forward and backward graphs, with the Function's own lines.
WRAPPER_OPS = ("tag_activation_checkpoint", "wrap_activation_checkpoint", "wrap_with_autocast",
               "wrap_with_set_grad_enabled", "wrap", "dynamo_bypassing_wrapper", "autograd_function_apply")
#: The HOPs of ``wrap.py`` that are not such a wrapper.
NOT_WRAPPER_OPS = ("inductor_compiled_code",)
#: A survival row's note when all its line held was such a wrapper's call (``checkpoint(self.block, x)``).
WRAPPER = "a wrapper op's call: AOT inlines it, and the wrapped code's ops carry that code's lines"


def _mark_wrappers(graphs: list[dict[str, Any]]) -> None:
    """A line whose every node is a wrapper op's call (``y = checkpoint(self.inner, x)``: the
    ``tag_activation_checkpoint`` node and the ``getitem`` of its result) is lost where AOT inlines it, by
    design: the ops it ran are the wrapped function's, and they carry that function's lines. Not a loss."""
    for g in graphs:
        by_stage: dict[str, dict[str, Any]] = {}  # each stage's objects by name, built once per graph
        for row in g["survival"]:
            st = row["last_stage"]
            if row["note"] or row["lost_at"] is None or st not in S.FX_STAGES:
                continue
            if st not in by_stage:
                by_stage[st] = {o["name"]: o for o in (g["stages"].get(st) or {}).get("objects", [])}
            by_name = by_stage[st]
            carriers = [by_name.get(n) for n in row["carriers"].get(st, [])]
            if not carriers or any(o is None for o in carriers):
                continue
            wrappers = {o["name"] for o in carriers if str(o.get("target")) in WRAPPER_OPS}
            if wrappers and all(o["name"] in wrappers or (str(o.get("target")) == "operator.getitem"
                                                           and set(o.get("inputs") or []) <= wrappers)
                                for o in carriers):
                row["note"] = WRAPPER
                row["lost_at"], row["lost_by"] = None, []


#: A survival row's note when its line is a `with` statement nothing carries: Dynamo ran its context manager
#: while tracing (autocast, no_grad), so its effect is on the ops under it, which carry their own lines.
CONTEXT_MANAGER = "a with statement: Dynamo applied its context manager while tracing, and the ops under it carry their own lines"
_WITH = re.compile(r"^\s*(?:async\s+)?with\b")


def _mark_context_managers(graphs: list[dict[str, Any]]) -> None:
    """A `with` line no object carries is not a loss: its context manager made no node of its own. (One that
    made a graph break was marked as such before this runs; one that made nodes, a grad mode switch, is
    carried and counted.)"""
    for g in graphs:
        for row in g["survival"]:
            if row["note"] is None and row["last_stage"] is None and _WITH.match(str(row["text"] or "")):
                row["note"] = CONTEXT_MANAGER
                row["lost_at"], row["lost_by"] = None, []


def _counted_rows(g: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows a headline counts: the user's own lines that hold an op of this graph."""
    return [r for r in g["survival"] if r["user"] and not r["note"]]


def _headline(g: dict[str, Any], stage_order: list[str], stopped_in: dict[str, Any] | None = None) -> dict[str, Any]:
    """The measured facts a reader wants first: how far the model's own lines get, where most are lost,
    how many kernels carry no source at all, and where the graph's compile stopped (`stopped_in`)."""
    rows = _counted_rows(g)
    pipeline = [st for st in stage_order if st in S.STAGES and st != S.SOURCE]
    reached = {st: (None if any(r["counts"].get(st) is None for r in rows) or not rows else
                    sum(1 for r in rows if r["counts"].get(st))) for st in pipeline}
    transitions: dict[tuple, int] = {}
    maybe_cut_short = (stopped_in or {}).get("maybe_cut_short") or []
    for r in rows:
        if r["lost_at"] and r["lost_at"] not in maybe_cut_short:  # perhaps not a drop: the compile stopped there
            key = (r["last_stage"], r["lost_at"])
            transitions[key] = transitions.get(key, 0) + 1
    worst = max(transitions.items(), key=lambda kv: (kv[1], -pipeline.index(kv[0][1]) if kv[0][1] in pipeline else 0),
                default=None)
    ks = g["stages"].get(S.KERNEL_SPEC) or {}
    kernels = ks.get("objects", []) if ks.get("observed") else []
    # Stages on this graph's path that measured nothing for it (a compile that raised in Inductor, a hook that
    # did not fire): "no line is lost" holds only up to the last stage that did.
    off = g.get("off_path") or {}
    unobserved = [st for st in pipeline if not (g["stages"].get(st) or {}).get("observed") and st not in off]
    return {
        "lines": len(rows),
        "reached": reached,
        "unobserved": unobserved,
        # Where this graph's compile stopped: the deepest stage whose call for it did not return. A compile can
        # stop where every later stage is off its path (a custom backend that raised), so it stands on its own.
        "stopped_in": stopped_in,
        # A backward graph AOT built at the forward's compile, that Inductor never compiled: it does so at the
        # first backward call, and the run made none (a forward outside torch.no_grad() makes such a graph).
        "lazy_backward": bool(g.get("kind") == "backward" and unobserved and not stopped_in
                              and (g["stages"].get(S.AOT_GRAPH) or {}).get("observed")
                              and all(stage_order.index(st) > stage_order.index(S.AOT_GRAPH) for st in unobserved)),
        "worst": {"from": worst[0][0], "to": worst[0][1], "lines": worst[1]} if worst else None,
        "kernels": len(kernels) if ks.get("observed") else None,
        # The matrix's rule: a kernel carries a source when one of its IR ops has a stack trace.
        "sourceless_kernels": [k["name"] for k in kernels if not k["fields"].get("get_stack_traces", {}).get("populated")],
    }


def _loser_kind(stage: str, obj: dict[str, Any] | None) -> str:
    """The kind of object that lost a line, in the pipeline's words: an aten op, a buffer kind, a kernel kind."""
    if obj is None:
        return "removed: no object here comes from the line's carriers"
    if stage in S.FX_STAGES:
        target = str(obj.get("target") or obj.get("kind") or "?")
        return f"aten op {target}" if stage in (S.POST_GRAD, S.AOT_GRAPH) else f"FX node {target}"
    if stage in (S.IR_PRE, S.IR_POST):
        if obj.get("sources"):  # it comes from the line's nodes (its origins) and carries other lines
            return (f"buffer {obj.get('kind')}: the line's nodes are in its origins, not in its stack traces"
                    + (", which follow its origin_node alone" if obj.get("origin_node") else ""))
        return f"buffer {obj.get('kind')}"
    if stage == S.KERNEL_SPEC:
        if obj.get("sources"):
            return f"{obj.get('kind')} kernel: holds the line's IR ops, carries other lines"
        return f"{obj.get('kind')} kernel"
    if stage == S.ARTIFACT:
        kind = obj.get("kind")
        return "extern call" if kind in ("extern", "fallback") else f"{kind} kernel"
    return str(obj.get("kind") or stage)


#: LoopLevelIR kinds of an op Inductor hands to eager ATen (torch-spyre: "falling back to cpu") and the
#: buffers that unpack its outputs: the backend makes no kernel of its own for them.
_FALLBACK_IR = ("FallbackKernel", "MultiOutput")


def _fallback_kinds(g: dict[str, Any], row: dict[str, Any]) -> list[str] | None:
    """The IR kinds that last carried a line, when every one is a fallback op's (else None)."""
    last = row["last_stage"]
    if last not in (S.IR_PRE, S.IR_POST):
        return None
    names = set(row["carriers"].get(last) or [])
    kinds = {str(o.get("kind")) for o in (g["stages"].get(last) or {}).get("objects", []) if o["name"] in names}
    return sorted(kinds) if kinds and kinds <= set(_FALLBACK_IR) else None


#: The ATen ops Inductor's post-grad pass `remove_noop_ops` drops when their result is their input (its
#: `noop_registry`, torch/_inductor/fx_passes/post_grad.py): by overload packet, and two view overloads.
_NOOP_PACKETS = frozenset({
    "aten.slice", "aten.slice_scatter", "aten.repeat", "aten.constant_pad_nd", "prims.convert_element_type",
    "prims.device_put", "aten.ceil", "aten.floor", "aten.round", "aten.trunc", "aten.pow", "aten.cat",
    "aten.copy", "aten.alias", "aten.clone"})
_NOOP_OVERLOADS = frozenset({"aten.view.default", "aten.view.dtype"})


def _noop_targets(g: dict[str, Any], row: dict[str, Any]) -> list[str] | None:
    """The targets of the AOT-graph nodes that last carried a line, when every one is an op `remove_noop_ops`
    may drop (else None). Dead code elimination may have dropped them instead: either way, ops with no effect."""
    if row["last_stage"] != S.AOT_GRAPH:
        return None
    names = set(row["carriers"].get(S.AOT_GRAPH) or [])
    targets = {str(o.get("target")) for o in (g["stages"].get(S.AOT_GRAPH) or {}).get("objects", [])
               if o["name"] in names}
    if not targets or not all(t in _NOOP_OVERLOADS or t.rpartition(".")[0] in _NOOP_PACKETS for t in targets):
        return None
    return sorted(targets)


#: Where torch.func's transforms (vmap, grad, jacrev, ...) keep their bookkeeping calls: entering and leaving a
#: transform's level, wrapping an input for it (`_vmap_increment_nesting`, `_add_batch_dim`, `_wrap_for_grad`,
#: `_remove_batch_dim`), and the saved-tensor hooks grad turns off around them. Dynamo puts them in its graph
#: with the transform call's line; AOT autograd runs them as it traces (torch/_functorch/predispatch.py, read
#: in torch 2.13), so they make no ATen op of their own: the ops the transform batches or differentiates carry
#: the transformed function's lines.
_FUNCTORCH_PREFIXES = ("torch._functorch.predispatch.", "torch._C._functorch.", "torch._functorch.eager_transforms.",
                       "torch._functorch.vmap.", "torch._C._autograd._saved_tensors_hooks_")


def _carriers_at(g: dict[str, Any], row: dict[str, Any], stage: str,
                 index: dict[str, dict[str, list[tuple[int, dict[str, Any]]]]]) -> list[dict[str, Any]]:
    """The objects of `stage` that carry the row's line, in the stage's order (a name may be a nested graph's
    and the top graph's both). `index` holds each stage's objects by name, built once per graph."""
    if stage not in index:
        by: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, o in enumerate((g["stages"].get(stage) or {}).get("objects", [])):
            by.setdefault(o["name"], []).append((i, o))
        index[stage] = by
    found = [hit for n in set(row["carriers"].get(stage) or []) for hit in index[stage].get(n, ())]
    return [o for _, o in sorted(found, key=lambda hit: hit[0])]


def _functorch_bookkeeping(g: dict[str, Any], row: dict[str, Any],
                           index: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """For a line the AOT graph lost whose every node before it is a torch.func transform's bookkeeping call:
    those calls' names, and the lines that the ops consuming them carry (the transformed function's). Else None.
    Only such a line walks the stage's objects (for the consumers)."""
    if row["last_stage"] not in (S.PRE_GRAD, S.DYNAMO_GRAPH):
        return None
    mine = _carriers_at(g, row, row["last_stage"], index)
    names = {o["name"] for o in mine}
    objs = (g["stages"].get(row["last_stage"]) or {}).get("objects", [])
    if not mine or not all(str(o.get("target") or "").startswith(_FUNCTORCH_PREFIXES) for o in mine):
        return None
    calls = list(dict.fromkeys(str(o["target"]).rpartition(".")[2] for o in mine))
    lines = []
    for o in objs:
        if o["name"] in names or str(o.get("target") or "").startswith(_FUNCTORCH_PREFIXES):
            continue
        if names & {str(i) for i in o.get("inputs") or []}:
            for src in o.get("sources") or []:
                where = f"{basename(src.get('file'))}:{src.get('line')}"
                if src.get("line") is not None and where not in lines:
                    lines.append(where)
    return calls, lines


#: Tensor methods that return the tensor itself when it already is what they ask for (`x.to(torch.float32)` on a
#: float32 tensor, `.contiguous()` on a contiguous one): AOT autograd's trace then records no op for them.
_MAY_RETURN_SELF = frozenset({"to", "type", "type_as", "float", "double", "half", "bfloat16", "int", "long", "bool",
                              "contiguous", "view_as", "reshape_as", "expand_as", "detach", "cpu", "cuda"})
#: Calls Dynamo keeps in its graph that make no tensor: AOT autograd runs them as it traces.
_NO_TENSOR_CALLS = frozenset({"torch._C._log_api_usage_once"})


def _traced_to_nothing(g: dict[str, Any], row: dict[str, Any], index: dict[str, Any]) -> tuple[str, list[str]] | None:
    """For a line the AOT graph lost whose every node before it either may return its input unchanged (a `.to()`
    to the dtype it has) or makes no tensor (an API-usage log call): which of the two, and the calls. Else None."""
    if row["last_stage"] not in (S.PRE_GRAD, S.DYNAMO_GRAPH):
        return None
    mine = _carriers_at(g, row, row["last_stage"], index)
    if not mine:
        return None
    targets = [str(o.get("target") or "") for o in mine]
    if all(o.get("kind") == "call_method" and str(o.get("target")) in _MAY_RETURN_SELF for o in mine):
        return "self", list(dict.fromkeys(targets))
    if all(t in _NO_TENSOR_CALLS for t in targets):
        return "no tensor", list(dict.fromkeys(targets))
    return None


#: The target prefix of the attributes Inductor's freezing (`torch._inductor.config.freezing`) makes of the
#: parameters and of what constant folding computes from them (torch/_inductor/freezing.py).
_FROZEN_PREFIX = "_frozen_param"


def _folded_by_freezing(g: dict[str, Any], row: dict[str, Any]) -> bool:
    """Whether a line last carried by the AOT graph was computed at compile time by freezing's constant folding:
    the post-grad graph reads frozen constants, and none of the line's AOT nodes depends on an input the
    post-grad graph still takes at run time. Inductor's folded constants keep no stack trace (a `get_attr`
    with only `val` in its meta), so the line reaches no later object. Any name it cannot resolve, or a node
    whose inputs the probe cut, reads as depending on an input: the answer is then no."""
    if row["last_stage"] != S.AOT_GRAPH:
        return False
    post = g["stages"].get(S.POST_GRAD) or {}
    boundary = post.get("boundary") or []
    if not any(o.get("kind") == "get_attr" and str(o.get("target") or "").startswith(_FROZEN_PREFIX)
               for o in boundary):
        return False
    runtime = {o["name"] for o in boundary if o.get("kind") == "placeholder"}
    aot = g["stages"].get(S.AOT_GRAPH) or {}
    nodes: dict[str, Any] = {}
    for o in [*aot.get("objects", []), *aot.get("boundary", [])]:
        nodes[o["name"]] = None if o["name"] in nodes else o  # a name two graphs share: unresolved
    carriers = list(row["carriers"].get(S.AOT_GRAPH) or [])
    seen: set[str] = set()
    todo = list(carriers)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        o = nodes.get(name)
        if o is None or name in runtime or len(o.get("inputs") or []) >= schema.MAX_FX_INPUTS:
            return False
        if o.get("kind") == "placeholder":
            # An AOT input the post-grad graph no longer takes: a parameter freezing made a constant, or
            # one it folded away. One it still takes as a placeholder was caught above.
            continue
        todo.extend(str(i) for i in o.get("inputs") or [])
    return bool(carriers)


def _retraced_nested(g: dict[str, Any], row: dict[str, Any],
                     index: dict[str, Any]) -> tuple[list[str], list[str]] | None:
    """A line carried only by a nested graph's nodes (a higher-order op's subgraph: flex_attention's
    score_mod) and lost at the AOT graph, where AOT autograd traced that subgraph again: the AOT graph's
    nested nodes of the same names carry other lines (the op's call) instead. Their names and those lines,
    else None."""
    last = row["last_stage"]
    if row["lost_at"] != S.AOT_GRAPH or last not in S.FX_STAGES:
        return None
    mine = _carriers_at(g, row, last, index)
    names = {o["name"] for o in mine}
    if not mine or any(o.get("graph_id") is None for o in mine):
        return None
    again = [o for o in (g["stages"].get(S.AOT_GRAPH) or {}).get("objects", [])
             if o["name"] in names and o.get("graph_id") is not None and o["sources"]]
    lines = list(dict.fromkeys(f"{basename(sr.get('file'))}:{sr.get('line')}" for o in again for sr in o["sources"]
                               if (sr.get("file"), sr.get("line")) != (row["file"], row["line"])))
    return ([o["name"] for o in again], lines) if again and lines else None


def _inlined_subgraph(g: dict[str, Any], row: dict[str, Any],
                      index: dict[str, Any]) -> tuple[list[str], list[str], list[str]] | None:
    """A line carried only by a nested graph's nodes (flex_attention's mask or score function) and lost at the
    first IR stage after the FX stages, because one IR op computes that graph inline (a template kernel): the op's
    `origins` name the graph's get_attr in the outer graph, not the nodes in it. The ops' names, their kinds and
    the get_attr names, else None."""
    last, lost = row["last_stage"], row["lost_at"]
    if last not in S.FX_STAGES or lost not in (S.IR_PRE, S.IR_POST):
        return None
    gids = {o.get("graph_id") for o in _carriers_at(g, row, last, index)} - {None}
    if not gids:
        return None
    objs = (g["stages"].get(lost) or {}).get("objects", [])
    if any(o.get("origin_node_graph") in gids or gids & set(o.get("origin_graphs") or []) for o in objs):
        return None  # the graph is lowered to ops of its own (a torch.cond's branch): not computed inline
    attrs = [o["name"] for o in (g["stages"].get(last) or {}).get("boundary", []) if o.get("subgraph") in gids]
    ops = [o for o in objs if set(o.get("origins") or []) & set(attrs)]
    if not ops:
        return None
    return [o["name"] for o in ops], list(dict.fromkeys(str(o.get("kind")) for o in ops)), attrs


#: Consecutive FX stages of one graph, the later the earlier after a backend's passes: a node there keeps its name.
SAME_GRAPH = ((S.DYNAMO_GRAPH, S.PRE_GRAD), (S.AOT_GRAPH, S.POST_GRAD))


def _moved(stages: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes a pass gave another line: the same node (its name and its target, both unique in the graph) at two
    consecutive stages of one graph, each carrying source lines, none the same. A pass that rebuilds an op while
    it rewrites another (Inductor's handling of a custom op that mutates its input) can give the rebuilt op the
    other's line: no line is lost, so no survival row shows it, but the op now names the wrong line."""
    out: list[dict[str, Any]] = []
    for before, after in SAME_GRAPH:
        a, b = stages.get(before), stages.get(after)
        if not (a and b and a.get("observed") and b.get("observed")):
            continue
        counts: dict[tuple, int] = {}
        for o in a["objects"] + b["objects"]:
            key = (o.get("name"), o.get("target"))
            counts[key] = counts.get(key, 0) + 1
        earlier = {(o.get("name"), o.get("target")): o for o in a["objects"]}
        for o in b["objects"]:
            key = (o.get("name"), o.get("target"))
            prev = earlier.get(key)
            if prev is None or counts[key] != 2:  # not in both, or not one node in each
                continue
            was = [s for s in prev["sources"] if s.get("line") is not None]
            now = [s for s in o["sources"] if s.get("line") is not None]
            if was and now and not {(s.get("file"), s["line"]) for s in was} & {(s.get("file"), s["line"]) for s in now}:
                out.append({"name": o["name"], "target": o.get("target"), "from": before, "to": after,
                            "was": [{"file": s.get("file"), "line": s["line"]} for s in was],
                            "now": [{"file": s.get("file"), "line": s["line"]} for s in now]})
    return out


def _losses(g: dict[str, Any]) -> list[dict[str, Any]]:
    """Where provenance is lost, ranked: the user's lines grouped by the stage transition that lost them and by
    the kind of object there that lost them; most lines first."""
    groups: dict[tuple, dict[str, Any]] = {}
    names_at: dict[str, dict[str, Any]] = {}  # each stage's objects by name, built once per graph
    carriers_index: dict[str, Any] = {}  # the same, every object of a name, for _carriers_at
    # Compiled autograd's graph whose AOT graph carries no stack trace: the same for every line it lost there.
    ca_unwrapped = is_compiled_autograd(g.get("compile_id")) and _no_aot_stack_traces(g["stages"])
    for r in _counted_rows(g):
        if not r["lost_at"]:
            continue
        st = r["lost_at"]
        # At the artifact, the losers are the kernel spec's kernels the emitted file gives no comment.
        look = S.KERNEL_SPEC if st == S.ARTIFACT else st
        if look not in names_at:
            names_at[look] = {o["name"]: o for o in (g["stages"].get(look) or {}).get("objects", [])}
        by_name = names_at[look]
        losers = r["lost_by"] or [None]
        fallback = _fallback_kinds(g, r) if r["lost_by"] == [] and st == S.KERNEL_SPEC else None
        noop = _noop_targets(g, r) if r["lost_by"] == [] and st == S.POST_GRAD else None
        folded = r["lost_by"] == [] and st == S.POST_GRAD and not noop and _folded_by_freezing(g, r)
        unwrapped = st == S.AOT_GRAPH and ca_unwrapped
        retraced = _retraced_nested(g, r, carriers_index) if r["lost_by"] == [] and not unwrapped else None
        inlined = _inlined_subgraph(g, r, carriers_index) if r["lost_by"] == [] else None
        functorch = (_functorch_bookkeeping(g, r, carriers_index) if r["lost_by"] == [] and st == S.AOT_GRAPH and not unwrapped
                     and not retraced else None)
        nothing = (_traced_to_nothing(g, r, carriers_index) if r["lost_by"] == [] and st == S.AOT_GRAPH and not unwrapped
                   and not retraced and not functorch else None)
        stopped = g["headline"].get("stopped_in") or {}
        for name in losers:
            obj = by_name.get(name) if name is not None else None
            kind = _loser_kind(st, obj) if st != S.ARTIFACT or obj is None else _loser_kind(S.ARTIFACT, obj)
            if st in (stopped.get("maybe_cut_short") or []):
                kind = (f"maybe cut short: the compile stopped inside {target_function(stopped.get('target'))} "
                        "after this stage's last record, perhaps before it made anything of the line")
            elif retraced:
                kind = (f"nested graph traced again: AOT autograd traced the subgraph anew, and its nodes carry "
                        f"{', '.join(retraced[1])} (the call's line), not this one")
            elif inlined:
                ops, kinds, attrs = inlined
                kind = (f"nested graph computed inline: {'an IR op' if len(ops) == 1 else 'IR ops'} ({', '.join(kinds)}) "
                        f"compute{'s' if len(ops) == 1 else ''} the nested graph that holds the line's nodes "
                        f"({', '.join(attrs)}), but {'its' if len(ops) == 1 else 'their'} origins name that graph's "
                        "get_attr, not the nodes in it, so the stack traces carry only the call's line")
            elif functorch:
                calls, fed = functorch
                kind = (f"torch.func transform: the line's nodes are its bookkeeping calls ({', '.join(calls[:4])}"
                        + (", ..." if len(calls) > 4 else "") + "), which AOT autograd runs as it traces, so none "
                        "becomes an ATen op" + (f"; the ops they feed carry {', '.join(fed[:4])}" if fed else ""))
            elif nothing and nothing[0] == "self":
                kind = (f"traced to nothing: each of the line's nodes is a tensor method ({', '.join(nothing[1][:4])}) "
                        "that returns its input when the tensor already has the dtype, device or layout it asks for, "
                        "so AOT autograd's trace records no op for it")
            elif nothing:
                kind = ("traced to nothing: the line's nodes are calls that make no tensor "
                        f"({', '.join(nothing[1][:4])}), which AOT autograd runs as it traces")
            elif unwrapped:
                kind = ("compiled autograd's graph: Inductor hands it to AOT autograd inside a wrapper module (its "
                        "inputs come as one list), and AOT autograd copies node meta only from a GraphModule")
            elif folded:
                kind = ("folded into a constant: the line reads only parameters, so Inductor's freezing computed "
                        "it at compile time, and its frozen constants carry no source")
            elif noop:
                kind = ("no-op: each of the line's ops is one Inductor's post-grad pass remove_noop_ops drops "
                        "when its result is its input (a clone, a view to the same shape, an alias)")
            elif fallback:
                kind = (f"fallback op ({', '.join(fallback)}): runs as eager ATen outside the backend's kernels, "
                        "so no kernel spec holds it")
            key = (r["last_stage"], st, kind)
            grp = groups.setdefault(key, {"from": r["last_stage"], "to": st, "kind": kind, "lines": [], "objects": []})
            if (r["file"], r["line"]) not in grp["lines"]:
                grp["lines"].append((r["file"], r["line"]))
            if name is not None and name not in grp["objects"]:
                grp["objects"].append(name)
            for n in ((retraced[0] if retraced else inlined[0] if inlined else []) if name is None else []):
                if n not in grp["objects"]:
                    grp["objects"].append(n)
    ranked = sorted(groups.values(), key=lambda grp: -len(grp["lines"]))
    return [{**grp, "lines": [{"file": f, "line": ln} for f, ln in grp["lines"]]} for grp in ranked]


def is_compiled_autograd(cid: Any) -> bool:
    """Compiled autograd's graphs have compile ids that start with `!` (`!0/1/0`): Dynamo traced the backward
    pass autograd recorded, not a frame of the program."""
    return isinstance(cid, str) and cid.startswith("!")


#: The FX code compiled autograd generates for its graph (its inputs' unpacking, its gradient accumulation),
#: which Dynamo then compiles as a frame: torch's, not the model's.
_GENERATED_FX = "<eval_with_key>"


def _no_aot_stack_traces(stages: dict[str, dict[str, Any]]) -> bool:
    """The AOT graph was measured, has compute nodes, and none of them carries a stack trace."""
    aot = stages.get(S.AOT_GRAPH) or {}
    objs = aot.get("objects") or []
    return bool(aot.get("observed") and objs
                and not any(o["fields"].get("stack_trace", {}).get("populated") for o in objs))


#: Why a compiled autograd graph's AOT graph carries no stack trace (torch/_inductor/compile_fx.py,
#: torch/_functorch/aot_autograd.py and _aot_autograd/graph_capture_wrappers.py, read in torch 2.13; traced
#: the same on 2.10 and 2.14.1).
CA_UNWRAPPED = ("Inductor hands compiled autograd's graph to AOT autograd inside a wrapper module (its inputs come "
                "as one list), not as a GraphModule; AOT autograd runs pre-grad passes and copies node meta only "
                "for a GraphModule")


def _compiled_autograd_notes(cid: Any, stages: dict[str, dict[str, Any]]) -> list[str]:
    if not is_compiled_autograd(cid):
        return []
    notes = [f"Compiled autograd's graph (its compile id starts with !): Dynamo traced the backward pass autograd "
             f"recorded at a backward call. Its nodes carry the forward lines whose gradients they compute, and "
             f"lines of the FX code compiled autograd generated ({_GENERATED_FX}: unpacking its inputs, accumulating "
             f"gradients), which are torch's, not the model's."]
    if _no_aot_stack_traces(stages):
        pre = stages.get(S.PRE_GRAD) or {}
        notes.append(f"{CA_UNWRAPPED}. So "
                     + ("FX pre-grad did not fire for it, and " if not pre.get("observed") else "")
                     + "no node of its AOT graph carries a stack trace: every line it holds is lost there.")
    return notes


def _mark_backward_by_compiled_autograd(graphs: list[dict[str, Any]]) -> None:
    """A backward graph Inductor never compiled is not always one the run never called: under compiled
    autograd, the backward call is traced into compiled autograd's own graph, whose Dynamo graph calls AOT
    autograd's backward prologue and holds the backward graph's ops (named `aot0_mm`, ...). Such a graph's
    headline names those graphs (`compiled_autograd`)."""
    inlining = [g["label"] for g in graphs if is_compiled_autograd(g.get("compile_id"))
                and any(str(o.get("name")).startswith("call_aot_bwd_prologue")
                        for o in (g["stages"].get(S.DYNAMO_GRAPH) or {}).get("objects", []))]
    for g in graphs:
        if inlining and g["headline"].get("lazy_backward"):
            g["headline"]["compiled_autograd"] = inlining


def _graph_notes(stages: dict[str, dict[str, Any]]) -> list[str]:
    """Facts about a graph that explain its matrix (measured, not advice)."""
    notes = []
    src = stages.get(S.SOURCE) or {}
    pre = stages.get(S.PRE_GRAD) or {}
    if src.get("observed") and not src["objects"] and pre.get("objects"):
        frames = src.get("library") or []
        traced = sum(1 for o in pre["objects"] if o["fields"].get("stack_trace", {}).get("populated"))
        files = [m.group(1) for m in (re.search(r"\(([^()]*)\)$", f) for f in frames) if m]
        if files and len(files) == len(frames) and all(f.startswith("<") for f in files):
            # exec'd or compile()d code, or a forward FX generated: the program's own, with no file to read.
            texts = any(sr.get("text") for o in pre["objects"] for sr in o["sources"])
            notes.append(f"Every frame Dynamo compiled for this graph is code with no file on disk ({', '.join(frames[:3])}): "
                         "made from a string by exec or compile(), or a forward FX generated. The Source stage reads a "
                         f"file's lines, so it holds none; {traced} of {len(pre['objects'])} pre-grad nodes carry a stack "
                         "trace, which names " + ("its lines." if texts else "its lines without their text."))
            return notes
        notes.append("Every frame Dynamo compiled for this graph is library code"
                     + (f" ({', '.join(frames[:3])})" if frames else " (torch's own)")
                     + ", as for an nn.Sequential of torch modules: no line of your source is on this compile's "
                     f"path, so the Source stage holds none, and {traced} of {len(pre['objects'])} pre-grad nodes "
                     "carry a stack trace. A module with a forward of its own shows its lines.")
    return notes


_COMPILE_ID = re.compile(r"^(?:\[[^\]]*\])?(\d+)/(\d+)")


def _recompile_notes(cid: Any, by_stage: dict[str, list]) -> list[str]:
    """A compile id F/A with A > 0 is Dynamo compiling frame F again (its guards failed, e.g. for a new
    input shape): its own graph. Say so, with the inputs its Dynamo graph was built for."""
    m = _COMPILE_ID.match(cid) if isinstance(cid, str) else None
    if not m or int(m.group(2)) == 0:
        return []
    inputs: list[str] = []
    for r in by_stage.get(S.DYNAMO_GRAPH, []):
        p = r.get("payload")
        if isinstance(p, dict) and isinstance(p.get("inputs"), list):
            inputs = [str(i) for i in p["inputs"]][:8]
            break
    return [f"Recompile: compile {int(m.group(2)) + 1} of frame {m.group(1)}. Dynamo compiled this frame again because "
            "the guards of its earlier compile failed (a new input shape, a new type), so this is a graph of its own"
            + (f"; its Dynamo graph's inputs: {', '.join(inputs)}" if inputs else "") + "."]


def _by_line(objects: list[dict[str, Any]]) -> dict[tuple, list[str]]:
    """(file, line) -> the names of the objects that carry that line, in object order, each once."""
    index: dict[tuple, list[str]] = {}
    for o in objects:
        keys = []
        for s in o["sources"]:
            key = (s.get("file"), s.get("line"))
            if key not in keys:
                keys.append(key)
        for key in keys:
            index.setdefault(key, []).append(o["name"])
    return index


def _lost_by(stages: dict[str, Any], lost: str | None, carriers: list[str], commented: set[str],
             cache: dict[str, dict[Any, list[int]]] | None = None) -> list[str]:
    """Name the objects at the losing stage that descend from the last carriers (by origins) but carry no source;
    where none does, those that descend from them and carry only other lines (an extern kernel's buffer, whose
    origins hold the views it reads through but whose stack traces are its origin_node's alone)."""
    if not lost or not carriers:
        return []
    if lost == S.ARTIFACT:
        return [c for c in carriers if c not in commented][:20]
    data = stages.get(lost)
    if not data:
        return []
    cache = {} if cache is None else cache
    index = cache.get(lost)
    if index is None:
        # Link name -> positions of the objects it reaches, sourceless (False) or carrying other lines (True),
        # built once per stage.
        index = cache[lost] = {}
        for i, o in enumerate(data["objects"]):
            links = set(o.get("origins") or []) | set(o.get("ops") or []) | ({o.get("origin_node")} if o.get("origin_node") else set())
            for link in links:
                index.setdefault((bool(o["sources"]), link), []).append(i)
    hits = sorted({i for c in carriers for i in index.get((False, c), ())}) or \
        sorted({i for c in carriers for i in index.get((True, c), ())})
    return [data["objects"][i]["name"] for i in hits[:20]]


def _mappings(stages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """kernel -> post-grad nodes and pre-grad -> post-grad nodes, as Inductor's provenance tracking defines them."""
    kernel_to_post: dict[str, list[str]] = OrderedDict()
    for k in (stages.get(S.KERNEL_SPEC) or {}).get("objects", []):
        names = kernel_to_post.setdefault(k["kernel"], [])
        names.extend(o for o in k["post_nodes"] if o not in names)
    pre = stages.get(S.PRE_GRAD) or {}
    pre_ids = {o.get("graph_id") for o in pre.get("objects", [])}
    pre_to_post: dict[str, list[str]] = OrderedDict()
    for o in (stages.get(S.POST_GRAD) or {}).get("objects", []):
        if o["kind"] != "call_function":
            continue
        for src in o.get("from_node", []):
            if src.get("graph_id") in pre_ids:
                lst = pre_to_post.setdefault(src["name"], [])
                if o["name"] not in lst:
                    lst.append(o["name"])
    return {"kernel_to_post": kernel_to_post, "pre_to_post": pre_to_post}


#: Payload keys in which a probe counts the items a snapshot bound cut (docs/trace-format.md, "Bounds").
_CUT_KEYS = (("cut_nodes", "node_count"), ("cut_ops", "op_count"))


def _cuts(trace: Trace) -> list[dict[str, Any]]:
    """Each snapshot a bound cut: which graph and stage, how many items it holds and how many it lost."""
    out = []
    for r in trace.records:
        p = r.get("payload")
        if r.get("kind") != S.PROBE or not isinstance(p, dict):
            continue
        for cut_key, total_key in _CUT_KEYS:
            cut = p.get(cut_key)
            if isinstance(cut, int) and not isinstance(cut, bool) and cut > 0:
                total = p.get(total_key)
                out.append({"compile_id": r.get("compile_id"), "graph": r.get("graph"), "stage": r.get("stage"),
                            "total": total if isinstance(total, int) else None, "cut": cut,
                            "reason": p.get("cut_reason") if isinstance(p.get("cut_reason"), str) else None})
    return out


def build(trace: Trace) -> ReportModel:
    """The whole report as plain data."""
    written: dict[tuple, int] = {}  # each hook's records, by target and stage: a side hook writes few of its calls
    for r in trace.records:
        if r.get("kind") == S.PROBE:
            key = (r.get("target"), r.get("stage"))
            written[key] = written.get(key, 0) + 1
    hooks = [{**h, "records": written.get((h.get("target"), h.get("stage")), 0)} for h in trace.hooks()]
    profile = trace.header.get("profile") if isinstance(trace.header.get("profile"), str) else None
    # A path's own stage (the export graph, the Dynamo graph, AOT's graphs) shows once a record has it.
    recorded = {r.get("stage") for r in trace.records if r.get("kind") in (S.PROBE, S.ERROR)}
    stage_order = [st for st in S.STAGES if st not in S.PATH_STAGES or st in recorded]
    for r in trace.records:
        st = r.get("stage")
        if st and st not in stage_order and st not in S.STAGES and st not in S.SIDE_STAGES:
            stage_order.append(st)
    graphs = []
    frames_without_graph = []
    outside: dict[tuple, int] = {}
    raised, limits, skipped, breaks, notices = _side_records(trace)
    for (cid, kind), by_stage in _group(trace).items():
        if not any(st in S.STAGES for st in by_stage):
            # Only user probes fired here: their function ran while no compile did (no Dynamo compile id
            # was current), or inside a compile or export that recorded no stage of the pipeline (it raised
            # first). Not a graph: said apart, so a rule on the graphs is not checked against it.
            for st, recs in by_stage.items():
                for r in recs:
                    key = (st, r.get("target") if isinstance(r.get("target"), str) else None,
                           cid if isinstance(cid, str) else None)
                    outside[key] = outside.get(key, 0) + 1
            continue
        if kind is None and set(by_stage) <= {S.SOURCE}:
            # Dynamo compiled the frame but produced no graph (nothing to capture, or it fell back
            # to eager): a fact about the run, not a graph with every stage missing.
            for r in by_stage.get(S.SOURCE, []):
                p = r.get("payload") or {}
                frames_without_graph.append({"compile_id": cid, "file": p.get("file"), "line": p.get("first_line"),
                                             "qualname": p.get("qualname"), "stopped_in": None,
                                             # A break that ended an empty graph (right after another break);
                                             # none where the frame's compile raised (Dynamo gave the frame up).
                                             "graph_break": breaks.get(cid) if cid not in raised else None,
                                             "skipped": skipped.get(cid) if cid not in raised else None})
            continue
        stages: dict[str, dict[str, Any]] = {}
        for st in stage_order:
            recs = by_stage.get(st, [])
            read = read_stage(st, recs)
            stages[st] = {"observed": bool(recs), "objects": read.objects, "records": len(recs)}
            if st in S.FX_STAGES:
                # The graph's boundary (placeholders, attributes, the output) is counted apart.
                stages[st]["objects"] = [o for o in read.objects if o.get("kind") in COMPUTE_KINDS]
                stages[st]["boundary"] = [o for o in read.objects if o.get("kind") not in COMPUTE_KINDS]
            if st == S.ARTIFACT:
                stages[st]["files"] = read.files
            if st == S.SOURCE and read.library:
                stages[st]["library"] = read.library
        stage_notes = _spyre.stage_notes(by_stage, trace.end)
        for st, note in stage_notes.items():
            stages[st]["note"] = note
        backend = _backend(cid, by_stage)
        off_path = _off_path(stages, stage_order, backend, hooks)
        # The Dynamo graph's own record, else the break hook's (a profile with no Dynamo graph hook: spyre).
        brk = (_graph_break(by_stage) or breaks.get(cid)) if dynamo_compile(cid) == cid else None  # a part's is 0/0's
        graphs.append({
            "compile_id": cid,
            "kind": kind,
            "label": f"{cid if cid is not None else '?'} {kind or ''}".strip(),
            "stages": stages,
            "shared": {},
            "matrix": _matrix(stages, stage_order, profile, off_path),
            "backend": backend,
            # Why Dynamo ended this graph, when a graph break did (else None).
            "graph_break": brk,
            "off_path": off_path,
            "survival": (survival := _survival(stages, stage_order)),
            "mappings": _mappings(stages),
            "lineage": _lineage.build(stages, survival),
            "notes": (_graph_notes(stages) + _recompile_notes(cid, by_stage) + _compiled_autograd_notes(cid, stages)
                      + list(stage_notes.values())),
        })
    _mark_shared(graphs)
    _mark_other_graphs(graphs)
    _mark_graph_breaks(graphs, frames_without_graph)
    _mark_context_managers(graphs)  # after the graph breaks: an unsupported context manager breaks the graph
    _mark_untraced_lines(graphs)
    _mark_wrappers(graphs)
    _mark_split_by_aot(graphs)  # after the wrappers: a checkpoint's call line is a wrapper's in either graph
    _mark_split_parts(graphs)
    _mark_model_files(graphs)
    for g, stopped in zip(graphs, _stopped_in(trace, graphs, stage_order)):
        # A part of a split Dynamo graph that raised: Dynamo's handler saw it under the Dynamo compile's id.
        error = raised.get(g["compile_id"]) or raised.get(dynamo_compile(g["compile_id"]))
        if stopped and error:
            stopped["error"] = error
            if _after_codegen(stopped["error"]):
                stopped["maybe_cut_short"] = []  # every kernel was made: the emitted code failed to compile
        if stopped and g["compile_id"] in limits:
            stopped["limit"] = limits[g["compile_id"]]
        g["headline"] = _headline(g, stage_order, stopped)
        g["losses"] = _losses(g)
        g["moved"] = _moved(g["stages"])
    _mark_backward_by_compiled_autograd(graphs)
    # A frame with no graph has one record group of its compile id: where that compile stopped, if it did.
    for f, stopped in zip(frames_without_graph, _stopped_in(
            trace, [{"compile_id": f["compile_id"], "kind": None} for f in frames_without_graph], stage_order)):
        f["stopped_in"] = stopped and {"stage": stopped["stage"], "target": stopped["target"],  # it made no kernel
                                       **({"error": raised[f["compile_id"]]} if f["compile_id"] in raised else {}),
                                       **({"limit": limits[f["compile_id"]]} if f["compile_id"] in limits else {})}
    not_returned = _not_returned(trace)
    errors = [
        {"stage": r.get("stage"), "target": r.get("target"), "phase": r.get("phase"),
         "type": (r.get("error") or {}).get("type"), "message": (r.get("error") or {}).get("message")}
        for r in trace.records if r.get("kind") == S.ERROR
    ]
    return {
        "header": {k: v for k, v in trace.header.items() if k not in ("kind", "seq", "t_ns")},
        "trace": {"path": trace.path, "bytes": trace.size, "records": len(trace.records) + 1,
                  "complete": trace.complete, "problem": trace.problem, "end": trace.end,
                  "repaired": trace.repaired, "warnings": _warnings(trace), "unknown_kinds": dict(trace.unknown_kinds)},
        "stage_order": stage_order,
        "stage_titles": {st: S.STAGE_TITLES.get(st, st) for st in stage_order},
        "symbols": {k: {"symbol": v[0], "meaning": v[1]} for k, v in SYMBOLS.items()},
        "hooks": hooks,
        "errors": errors,
        "graphs": graphs,
        "frames_without_graph": frames_without_graph,
        "notices": notices,
        "outside_compile": [{"stage": st, "target": tgt, "compile_id": cid, "snapshots": n}
                            for (st, tgt, cid), n in outside.items()],
        "not_returned": not_returned,
        "cuts": _cuts(trace),
        "summary": _summary(graphs, hooks, stage_order, outside, _unwound(not_returned)),
        "spyre": _spyre.run_facts(trace),
    }


def _warnings(trace: Trace) -> list[str]:
    """The warnings the tracer wrote as notes (e.g. the program replaced the settrace tracer), and the reader's:
    bytes after the end record, which it does not read."""
    out = [r["text"] for r in trace.records
           if r.get("kind") == S.NOTE and r.get("level") == "warning" and isinstance(r.get("text"), str)]
    if trace.trailing:
        out.append(f"{trace.trailing:,} bytes follow the trace's end record and were not read (was another trace "
                   "appended to this file?); everything here is the trace up to its end record.")
    return out


def _summary(graphs: list[dict[str, Any]], hooks: list[dict[str, Any]], stage_order: list[str],
             outside: dict[tuple, int] | None = None, unwound: dict[str, int] | None = None) -> list[dict[str, Any]]:
    rows = []
    for st in stage_order:
        hs = [h for h in hooks if h.get("stage") == st]
        seen, seen_boundary = set(), set()
        observed = False
        shared = st in SHARED_STAGES  # one object set per compile id, shown in each of its graphs
        for g in graphs:
            d = g["stages"].get(st)
            if d and d["observed"]:
                observed = True
                key = ((dynamo_compile(g["compile_id"]) if st in DYNAMO_STAGES else g["compile_id"]),
                       None if shared else g["kind"])
                # A nested graph's nodes (a torch.cond's branches) may share names with the top graph's.
                seen.update((*key, o.get("graph_id"), o["name"]) for o in d["objects"])
                seen_boundary.update((*key, o.get("graph_id"), o["name"]) for o in d.get("boundary", []))
        objects = len(seen)
        rows.append({
            "stage": st,
            "hooks": len(hs),
            "resolved": sum(1 for h in hs if h.get("resolved")),
            "fired": sum(int(h.get("fired") or 0) for h in hs),
            "errors": sum(int(h.get("errors") or 0) for h in hs),
            "observed": observed,
            "objects": objects,
            "boundary": len(seen_boundary),
            "unresolved": [f"{h.get('target')}: {h.get('reason')}" for h in hs if not h.get("resolved")],
            "off_path": _summary_off_path(graphs, st) if not observed else None,
            "outside_compile": sum(n for (stage, _, _), n in (outside or {}).items() if stage == st),
            # Calls of its targets that exited by an exception (the compile failed inside them): called, no result.
            "raised": (unwound or {}).get(st, 0),
        })
    return rows


def _stopped_in(trace: Trace, graphs: list[dict[str, Any]], stage_order: list[str]) -> list[dict[str, Any] | None]:
    """Per graph (in order), where its compile stopped: the deepest pipeline stage, and its target, whose traced
    call for it did not return (an `unwind` record of its compile: the compile raised there, or tracing stopped
    there); None where no call of its compile was left open."""
    index = {(g["compile_id"], g["kind"]): i for i, g in enumerate(graphs)}
    kinds: dict[Any, list[Any]] = {}
    for cid, kind in index:
        kinds.setdefault(cid, []).append(kind)
    out: list[dict[str, Any] | None] = [None] * len(graphs)
    calls: list[Any] = [None] * len(graphs)  # the stopped call's id: ids are taken in call order
    rank = {st: i for i, st in enumerate(stage_order)}
    kernel_calls: dict[int, list[int]] = {}  # per graph, the calls its kernel spec records came from
    emitted: set[int] = set()  # the graphs whose artifact was recorded: their kernels were all made
    recorded: dict[int, set[str]] = {}  # per graph, the stages with a record for it
    # A hook read at return records nothing for a call that did not return: its stage holds only its other calls.
    at_return = {h.get("target") for h in trace.hooks() if h.get("event") == RETURN}
    for r in trace.records:
        if r.get("kind") != S.PROBE or r.get("stage") not in S.STAGES or r.get("compile_id") is None:
            continue  # a record written before unwinds carried their compile, or outside any compile
        if r.get("phase") != "unwind":
            for key in _graphs_of(r, kinds):
                if key in index:
                    recorded.setdefault(index[key], set()).add(r["stage"])
            if r["stage"] in (S.KERNEL_SPEC, S.ARTIFACT):
                for key in _graphs_of(r, kinds):
                    if key not in index:
                        continue
                    if r["stage"] == S.ARTIFACT:
                        emitted.add(index[key])
                    elif isinstance(r.get("call"), int):
                        kernel_calls.setdefault(index[key], []).append(r["call"])
            continue
        for key in _graphs_of(r, kinds):
            i = index.get(key)
            if i is not None and (out[i] is None or rank.get(r["stage"], -1) > rank.get(out[i]["stage"], -1)):
                out[i] = {"stage": r["stage"], "target": r.get("target"), "maybe_cut_short": []}
                calls[i] = r.get("call")
    for i, stopped in enumerate(out):
        # Kernels are made one at a time inside the call that did not return (Inductor's codegen, inside
        # compile_to_module): the kernel spec may hold only those made before the compile stopped, unless the
        # module that holds them was emitted (a compile that stopped after Inductor, in Dynamo).
        if stopped and i not in emitted and isinstance(calls[i], int) and any(c > calls[i] for c in kernel_calls.get(i, ())):
            stopped["maybe_cut_short"].append(S.KERNEL_SPEC)
        # The stage whose call did not return, read at return, yet with records for this graph: those are of its
        # other calls (Inductor's post-grad passes run on each nested graph, a scan's body, before the top
        # graph), so it measured only part of the graph.
        if (stopped and stopped["target"] in at_return and stopped["stage"] in recorded.get(i, ())
                and stopped["stage"] not in stopped["maybe_cut_short"]):
            stopped["maybe_cut_short"].append(stopped["stage"])
    return out


def _side_records(trace: Trace) -> tuple[Any, ...]:
    """From the records of no stage, in one pass. Per compile id: the exception that ended its compile, as
    Dynamo's handler received it (the last one, should a compile id have several: `type`, and `text` and
    `inner` where the probe could read them); the recompile limit Dynamo hit before it would compile the frame
    again (the `torch._dynamo.config` setting's name, and its value where the probe read it); and the graph
    break that ended its graph (the last). And the run's notices: what prov-trace's own settings did to the
    program (a cache artifact torch did not record because the caches were off), each text once, with how many
    calls said it."""
    errors: dict[Any, dict[str, Any]] = {}
    limits: dict[Any, dict[str, Any]] = {}
    skipped: dict[Any, dict[str, Any]] = {}
    breaks: dict[Any, dict[str, Any]] = {}
    notices: dict[str, dict[str, Any]] = {}
    for r in trace.records:
        if r.get("kind") != S.PROBE or r.get("stage") not in S.SIDE_STAGES:
            continue
        payload = r.get("payload") if isinstance(r.get("payload"), dict) else {}
        if r["stage"] == S.NOTICE:
            n = payload.get("notice")
            if isinstance(n, dict) and isinstance(n.get("text"), str):
                notices.setdefault(n["text"], {"kind": n.get("kind") if isinstance(n.get("kind"), str) else None,
                                               "text": n["text"], "calls": 0})["calls"] += 1
            continue
        if not isinstance(r.get("compile_id"), str):
            continue
        if r["stage"] == S.GRAPH_BREAK:
            brk = _break_view(payload.get("graph_break"))
            if brk is not None:
                breaks[r["compile_id"]] = brk
            continue
        err, limit, skip = payload.get("error"), payload.get("limit"), payload.get("skipped")
        if isinstance(skip, dict):
            skipped[r["compile_id"]] = {"reason": skip["reason"] if isinstance(skip.get("reason"), str) else None}
        if isinstance(err, dict) and isinstance(err.get("type"), str):
            errors[r["compile_id"]] = _error_view(err)
        if isinstance(limit, dict) and isinstance(limit.get("name"), str):
            limits[r["compile_id"]] = {"name": limit["name"],
                                       "value": limit["value"] if isinstance(limit.get("value"), int) else None}
    return errors, limits, skipped, breaks, list(notices.values())


#: Exceptions raised when the code Inductor emitted is compiled, which it does once codegen is done (the C++
#: kernels are built when the emitted module loads: torch/_inductor/codecache.py, read in torch 2.13).
AFTER_CODEGEN = ("torch._inductor.exc.CppCompileError",)


def _after_codegen(err: dict[str, Any]) -> bool:
    """Whether a compile's exception (or, for a backend's failure, the backend's own) says its codegen had
    finished: the kernel spec then holds every kernel, whatever call the compile stopped in."""
    inner = err.get("inner") or {}
    return err.get("type") in AFTER_CODEGEN or inner.get("type") in AFTER_CODEGEN


def _error_view(err: dict[str, Any]) -> dict[str, Any]:
    """A recorded exception, its values checked: a type, and a text and an inner exception where recorded."""
    out: dict[str, Any] = {"type": err["type"]}
    if isinstance(err.get("text"), str):
        out["text"] = err["text"]
    inner = err.get("inner")
    if isinstance(inner, dict) and isinstance(inner.get("type"), str):
        out["inner"] = {"type": inner["type"], **({"text": inner["text"]} if isinstance(inner.get("text"), str) else {})}
    return out


def _not_returned(trace: Trace) -> list[dict[str, Any]]:
    """The traced calls that did not return (`unwind` records), per stage, target and why, in trace order."""
    out: dict[tuple, int] = {}
    for r in trace.records:
        if r.get("kind") == S.PROBE and r.get("phase") == "unwind" and isinstance(r.get("stage"), str):
            payload = r.get("payload")  # a newer version's user stage may carry any shape here
            why = payload.get("why") if isinstance(payload, dict) else None
            key = (r["stage"], r.get("target") if isinstance(r.get("target"), str) else None,
                   why if isinstance(why, str) else None)
            out[key] = out.get(key, 0) + 1
    return [{"stage": st, "target": tgt, "why": why, "calls": n} for (st, tgt, why), n in out.items()]


def _unwound(not_returned: list[dict[str, Any]]) -> dict[str, int]:
    """Per stage, the calls of its targets that did not return (`_not_returned`, summed over targets)."""
    out: dict[str, int] = {}
    for n in not_returned:
        out[n["stage"]] = out.get(n["stage"], 0) + n["calls"]
    return out


def _summary_off_path(graphs: list[dict[str, Any]], stage: str) -> str | None:
    """Why no graph of the run passes through `stage`: each graph's reason, once (None if any graph lacks one)."""
    reasons: list[str] = []
    for g in graphs:
        why = g.get("off_path", {}).get(stage)
        if why is None:
            return None
        if why not in reasons:
            reasons.append(why)
    return "; ".join(reasons) if reasons else None


#: The compile id of what torch.export produced and AOTInductor compiled (probes/context.py's EXPORT_ID).
EXPORT_ID = "export"
#: What a graph's `backend` reads on the export path.
EXPORT_PATH = "torch.export"


def is_export_id(cid: Any) -> bool:
    """``export``, ``export-2``, ...: the session's exported programs, in the order torch.export returned them."""
    prefix = EXPORT_ID + "-"
    return isinstance(cid, str) and (cid == EXPORT_ID or (cid.startswith(prefix) and cid[len(prefix):].isdigit()))


#: The compile id of a graph the program handed Inductor itself (probes/context.py's DIRECT_ID), and its path.
DIRECT_ID = "inductor"
DIRECT_PATH = "Inductor, called directly"


def is_direct_id(cid: Any) -> bool:
    prefix = DIRECT_ID + "-"
    return isinstance(cid, str) and (cid == DIRECT_ID or (cid.startswith(prefix) and cid[len(prefix):].isdigit()))


def _backend(cid: Any, by_stage: dict[str, list]) -> str | None:
    """The backend Dynamo handed this compile's graph to, as the Dynamo graph's probe read it."""
    if is_export_id(cid):
        return EXPORT_PATH
    if is_direct_id(cid):
        return DIRECT_PATH
    for r in by_stage.get(S.DYNAMO_GRAPH, []):
        p = r.get("payload")
        if isinstance(p, dict) and isinstance(p.get("backend"), str):
            return p["backend"]
    return None


def _off_path(stages: dict[str, dict[str, Any]], stage_order: list[str], backend: str | None,
              hooks: list[dict[str, Any]]) -> dict[str, str]:
    """The stages this graph's compile does not pass through, measured, once the graph's path is known:
    Inductor's stages when none of them fired for it (another backend); a path's own stage (the export
    graph, the Dynamo graph, AOT's graphs) when its hooks resolved and did not fire for it (the graph went
    another way). A path stage whose hook did not resolve stays ⚠: that is drift, not another path."""
    if backend is None:
        return {}
    installed = {h.get("stage") for h in hooks if h.get("resolved")}

    def fired(st: str) -> bool:
        return bool((stages.get(st) or {}).get("observed"))

    why = f"not on this compile's path ({'torch.export' if backend == EXPORT_PATH else f'backend: {backend}'})"
    if backend == DIRECT_PATH:
        why = ("not on this compile's path (the program called Inductor itself, standalone_compile or compile_fx: "
               "no Dynamo, no source frame)")
    out: dict[str, str] = {}
    inductor_ran = any(fired(st) for st in S.INDUCTOR_STAGES)
    for st in stage_order:
        if st not in S.STAGES or fired(st):
            continue
        if backend == DIRECT_PATH and st in (S.SOURCE, S.DYNAMO_GRAPH, S.EXPORT_GRAPH):
            out[st] = why
        elif st in S.INDUCTOR_STAGES and not inductor_ran:
            # Whether or not its hooks resolved: Inductor's modules are not even imported with aot_eager.
            out[st] = why
        elif st in S.PATH_STAGES and (not hooks or st in installed):
            out[st] = why
    return out
