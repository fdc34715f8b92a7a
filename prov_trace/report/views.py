"""The view layer: what a report (or a diff) shows, built once, drawn by every renderer.

``report_document(model)`` and ``diff_document(diff)`` turn the model into a
`Document`: sections of paragraphs and tables whose cells are small typed
values (`Code`, `Sym`, `Loc`, ...). The Markdown and HTML renderers only
decide how each kind of block and cell looks, so the two formats carry the
same facts by construction. Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union

from prov_trace.report.sources import python_spans, span_end
from prov_trace.report.text import (MAX_TEXT, basename, break_line, break_site, break_sites, clean, cut, error_summary,
                                    first_line, limit_summary, short_path, skip_summary, skipped_frames,
                                    target_function)
from prov_trace.stream import schema as S

# --- inline values ------------------------------------------------------------------------


@dataclass(frozen=True)
class Code:
    """Text from the trace shown as code (a name, a path, a source line)."""

    text: Any


@dataclass(frozen=True)
class Sym:
    """A state symbol: a matrix cell (``all``, ``some``, ``none``, ``na``, ``empty``, ``unobserved``,
    with n/N where it has them), or a mark (``yes``, ``no``)."""

    state: str
    n: int | None = None
    total: int | None = None


@dataclass(frozen=True)
class Loc:
    """A source location, shown as its short path and line."""

    file: Any
    line: Any


@dataclass(frozen=True)
class Tag:
    """Plain text with a state, which HTML colours (a diff's `▼ dropped`)."""

    text: str
    state: str = ""


@dataclass(frozen=True)
class Link:
    """A value that points at another part of the report (HTML links it; Markdown shows the value)."""

    value: Any
    anchor: str


@dataclass(frozen=True)
class Join:
    """Inline values in a row: ``sep`` is ``", "`` or ``"\\n"`` (a line break)."""

    items: tuple
    sep: str = ", "


Inline = Union[str, Code, Sym, Loc, Tag, Link, Join]


def join(items: Any, sep: str = ", ") -> Join:
    return Join(tuple(items), sep)


# --- blocks -------------------------------------------------------------------------------


@dataclass
class Row:
    cells: list[Inline]
    #: Attributes only HTML uses (``data-src``, ``data-node``, ``class``) to make the row interactive.
    attrs: dict[str, str] = field(default_factory=dict)


@dataclass
class Table:
    headers: list[Inline] | None
    rows: list[Row]
    #: Rows left out by the row bound; the renderers say so under the table.
    more: int = 0
    cls: str = ""


@dataclass
class Para:
    parts: list[Inline]
    cls: str = ""


@dataclass
class Banner:
    title: str
    text: Inline


@dataclass
class Bullets:
    items: list[list[Inline]]
    cls: str = ""


@dataclass
class Matrix:
    """A graph's Stage × Field matrix; ``cells[key]`` lists the objects behind a cell, for HTML's cell view."""

    table: Table
    keys: list[list[str]]
    cells: dict[str, dict[str, Any]]


@dataclass
class LineageBlock:
    lineage: dict[str, Any]
    titles: dict[str, str]
    changes: Table | None


@dataclass
class FileViews:
    """The line-by-line source view and the generated-code view: data HTML's script draws on demand.
    Markdown says where they are."""

    sources: list[dict[str, Any]]
    code: list[dict[str, Any]]
    titles: dict[str, str] = field(default_factory=dict)


@dataclass
class Section:
    title: str
    level: int
    blocks: list[Any] = field(default_factory=list)
    attrs: dict[str, str] = field(default_factory=dict)
    #: HTML folds it (``<details>``); Markdown shows it as a heading like any other.
    collapsed: bool = False


@dataclass
class Document:
    title: str
    blocks: list[Any]
    #: ``report`` (interactive in HTML) or ``diff``.
    kind: str = "report"
    page_title: str = ""


Block = Union[Table, Para, Banner, Bullets, Matrix, LineageBlock, FileViews, Section]

#: Each state's symbol in Markdown (emoji, as the seed's report) and in HTML (text glyphs: an
#: air-gapped machine may have no emoji font).
EMOJI = {"all": "✅", "some": "◐", "none": "❌", "na": "➖", "empty": "∅", "unobserved": "⚠", "yes": "✅", "no": "❌"}
GLYPHS = {"all": "✓", "some": "◐", "none": "✗", "na": "–", "empty": "∅", "unobserved": "⚠", "yes": "✓", "no": "✗"}


def symbol_text(sym: Sym, glyphs: dict[str, str]) -> str:
    """A symbol as text: the glyph, and ``n/N`` where the state counts objects."""
    g = glyphs.get(sym.state, sym.state)
    return f"{g} {sym.n}/{sym.total}" if sym.n is not None and sym.total is not None else g


def cell_sym(cell: dict[str, Any]) -> Sym:
    """A matrix cell's symbol: counted states show n/N."""
    if cell["state"] in ("all", "some", "none"):
        return Sym(cell["state"], cell.get("n", 0), cell.get("total", 0))
    return Sym(cell["state"])


def _n(k: int, noun: str) -> str:
    """``1 event``, ``2 events``."""
    return f"{k} {noun}{'' if k == 1 else 's'}"


def ended(tr: dict[str, Any]) -> str:
    end = tr.get("end")
    if not end:
        return "no end record"
    return f"{end.get('outcome')}" + (f" ({first_line(end.get('detail'))})" if end.get("detail") else "")


def src_id(s: dict[str, Any]) -> str:
    """The lineage node id of a source line."""
    return f"{S.SOURCE}:{s.get('file')}:{s.get('line')}"


def _loc(s: dict[str, Any] | None) -> Inline:
    return Loc(s.get("file"), s.get("line")) if s else Sym("no")


def _field_cell(f: dict[str, Any] | None) -> Inline:
    if not f or not f.get("has"):
        return Sym("na")
    if f.get("populated"):
        return Code((f.get("type") or "?").rsplit(".", 1)[-1])
    return Sym("no")


def _codes(names: Any, limit: int | None = None) -> Join:
    items = list(names or [])
    return join(Code(n) for n in (items if limit is None else items[:limit]))


# --- the report -----------------------------------------------------------------------------

#: Rows per per-stage table; the rest are in the JSON output.
MAX_ROWS = 1000
MERMAID_MAX_NODES = 300
MAX_SVG_NODES = 1500
MAX_CELL_NAMES = 200


#: What the report says about the texts it cuts (text.MAX_TEXT).
TEXTS_CUT = (f"Long texts are cut at {MAX_TEXT:,} characters where shown here, marked …[cut N chars]; "
             "the trace holds them whole.")


def report_document(model: dict[str, Any], max_rows: int = MAX_ROWS, texts: dict[str, Any] | None = None) -> Document:
    """The report's view. `texts` (``sources.load``) are the files the HTML's source and code views show."""
    h, tr = model["header"], model["trace"]
    blocks: list[Any] = []
    if not tr["complete"]:
        blocks.append(Banner("Partial trace.", f"{tr['problem'] or 'the stream has no end record'}. "
                                              "Everything below is what was recorded before that point."))
    if tr.get("repaired"):
        blocks.append(Banner("Malformed records.", f"{tr['repaired']} values in the trace did not have the type "
                             "docs/trace-format.md gives them and were read as empty (the file was changed, or "
                             "written by another tool)."))
    if tr.get("unknown_kinds"):
        blocks.append(Banner("Newer trace.", _unknown_kinds(tr["unknown_kinds"], h.get("version"))))
    if tr.get("warnings"):
        blocks.append(Banner("Warnings.", " ".join(tr["warnings"])))
    for notice in model.get("notices") or []:
        blocks.append(Banner("Notice.", notice["text"].rstrip(".") + "."))
    stop = tr.get("end") or {}
    if stop.get("outcome") in ("interrupted", "signal"):
        blocks.append(Banner("Run stopped early", f"({stop.get('detail') or stop.get('outcome')}): the traced program "
                             "did not finish. The trace is whole up to the stop; stages the compile had not reached "
                             "show as not observed."))
    intro = Section("Run", 2, attrs={"class": "intro"})
    intro.blocks.append(Para(["Measurement only: every count below is computed from one traced run; "
                              "nothing is hand-written."]))
    intro.blocks.append(Table(None, [
        Row(["Run", Code(" ".join(h.get("argv") or []))]),
        Row(["Python / torch", f"{h.get('python')} / {h.get('torch')}"]),
        Row(["Platform", str(h.get("platform"))]),
        Row(["Profile", Code(h.get("profile"))]),
        *([Row(["Spyre", _spyre_line(h)])] if _spyre_line(h) else []),
        Row(["Backend", join([Code(h.get("backend")), str(h.get("backend_reason"))], ": ")]),
        Row(["Trace", join([Code(tr["path"]), f"{int(tr['bytes'] or 0)} bytes", f"{int(tr['records'] or 0)} records"])]),
        Row(["Ended", ended(tr)]),
    ], cls="kv"))
    blocks.append(intro)
    blocks.append(_counts(model))
    blocks.append(Section("Legend", 2, [Bullets([[Sym(k), v["meaning"]] for k, v in model["symbols"].items()],
                                                cls="legend"), Para([TEXTS_CUT])], attrs={"class": "intro"}))
    blocks.append(_source_section(model, texts))
    for gi, g in enumerate(model["graphs"]):
        blocks.append(_graph(g, gi, model, max_rows))
    if model.get("spyre"):
        blocks.append(_spyre(model["spyre"]))
    blocks.append(_hooks(model))
    if model["errors"]:
        blocks.append(Section("Probe errors", 2, [Table(["Stage", "Target", "Phase", "Error"], [
            Row([str(e["stage"]), Code(e["target"]), str(e["phase"]), f"{e['type']}: {e['message']}"])
            for e in model["errors"][:200]], more=max(0, len(model["errors"]) - 200))]))
    return Document("Source-to-kernel provenance audit", blocks,
                    page_title=f"Provenance audit: {h.get('target') or tr.get('path')}")


def _unknown_kinds(kinds: dict[str, int], version: Any) -> str:
    written = f"schema {version[0]}.{version[1]}" if isinstance(version, list) and len(version) == 2 else "a newer schema"
    return (f"{sum(kinds.values())} records of kinds this prov-trace does not know were skipped (the trace was written "
            f"with {written}, newer than this reader's {S.SCHEMA_VERSION[0]}.{S.SCHEMA_VERSION[1]}): "
            + ", ".join(f"{k or '(empty)'} ×{n}" for k, n in sorted(kinds.items())) + ". Upgrade prov-trace to read them.")


def _raised_clause(stopped: dict[str, Any]) -> str:
    said, limit = error_summary(stopped.get("error")), limit_summary(stopped.get("limit"))
    clause = f": it raised {said}" if said else ""
    if limit:
        clause += f" ({limit})" if said else f": {limit}"
    return clause.rstrip(".")  # the sentence goes on (", and the run ended ...") or ends with its own full stop


def _frames_without_graph(sec: Section, model: dict[str, Any]) -> None:
    skipped = {id(f) for f in skipped_frames(model)}
    if model.get("frames_without_graph"):
        sec.blocks.append(Para(["Frames Dynamo compiled that produced no graph: ", join(
            join([str(f["compile_id"]), Code(f.get("qualname")), Loc(f.get("file"), f.get("line"))]
                 + ([join(["(its compile stopped inside ", Code(target_function(f["stopped_in"].get("target"))),
                           ", whose call did not return" + _raised_clause(f["stopped_in"]) + ")"], "")]
                    if f.get("stopped_in") else [])
                 + ([join(["(a graph break at ", Code(break_site(f["graph_break"])), " ended it before any op: ",
                           f["graph_break"]["summary"].rstrip("."), ")"], "")]
                    if break_site(f.get("graph_break")) else [])
                 + ([f"({skip_summary(f['skipped'])})"] if id(f) in skipped else []), " ")
            for f in model["frames_without_graph"]), "."]))


def _outside_compile(sec: Section, model: dict[str, Any], titles: dict[str, str]) -> None:
    def listed(entries: list[dict[str, Any]], where: bool) -> Join:
        return join(join([Code(o.get("target")), f"({titles.get(o['stage'], o['stage'])})",
                          f"{o['snapshots']} snapshot{'s' if o['snapshots'] != 1 else ''}"]
                         + ([join(["in ", Code(o["compile_id"])], "")] if where else []), " ") for o in entries)

    outside = [o for o in model.get("outside_compile") or [] if o.get("compile_id") is None]
    inside = [o for o in model.get("outside_compile") or [] if o.get("compile_id") is not None]
    if outside:
        sec.blocks.append(Para(["Probe snapshots taken while no compile ran (the program called the function "
                                "itself), so they belong to no graph and no rule is checked on them: ",
                                listed(outside, False), "."]))
    if inside:
        sec.blocks.append(Para(["Probe snapshots taken inside a compile or export that recorded no stage of the "
                                "pipeline (it stopped before any did), so they belong to no graph and no rule is "
                                "checked on them: ", listed(inside, True), "."]))


def _counts(model: dict[str, Any]) -> Section:
    titles, order = model["stage_titles"], model["stage_order"]
    sec = Section("Counts", 2, attrs={"class": "intro"})
    rows = []
    for g in model["graphs"]:
        cells: list[Inline] = [g["label"]]
        for st in order:
            d = g["stages"][st]
            if not d["observed"]:
                cells.append(Sym("na" if st in g.get("off_path", {}) else "unobserved"))
            elif st in g.get("shared", {}):
                cells.append(f"{len(d['objects'])} (= {g['shared'][st]})")
            else:
                cells.append(str(len(d["objects"])))
        rows.append(Row(cells))
        if any(g["stages"][st].get("boundary") for st in order):
            rows.append(Row([f"{g['label']}: placeholders and outputs"] + [
                str(len(g["stages"][st]["boundary"])) if "boundary" in g["stages"][st] and g["stages"][st]["observed"]
                else "" for st in order]))
    if not model["graphs"]:
        sec.blocks.append(Para(["Nothing was compiled: the trace holds no graph, so there is nothing to count and no "
                                "matrix. The Hooks table below says which hooks resolved and whether any fired."]))
        before = (model.get("header") or {}).get("compiled_before")
        if isinstance(before, int) and before > 0:
            sec.blocks.append(Para([
                f"Dynamo had compiled {before} graph{'s' if before != 1 else ''} in this process before tracing "
                "started. A call of code compiled then runs from Dynamo's cache and compiles nothing a trace can see "
                "(a notebook cell run again): to trace its compile, call ", Code("torch._dynamo.reset()"),
                " before the traced block, or compile a new object inside it."]))
        _frames_without_graph(sec, model)
        said = {(f["stopped_in"].get("stage"), f["stopped_in"].get("target"))
                for f in model.get("frames_without_graph") or [] if f.get("stopped_in")}
        stopped = [n for n in model.get("not_returned") or []
                   if n.get("stage") in S.STAGES and (n.get("stage"), n.get("target")) not in said]
        if stopped:
            # A compile or export that raised before any graph was recorded: its entry hook never fired.
            sec.blocks.append(Para(["Traced calls that did not return, so the compile stopped inside them: ", join(
                [join([Code(target_function(n.get("target"))), f"({S.STAGE_TITLES.get(n['stage'], n['stage'])}'s hook),",
                       f"{n['calls']} call{'s' if n['calls'] != 1 else ''}:", str(n.get("why") or "no reason recorded")],
                      " ") for n in stopped], "; "), "."]))
        _outside_compile(sec, model, titles)
        return sec
    sec.blocks.append(Table(["Graph"] + [titles[st] for st in order], rows))
    sec.blocks.append(Para(["Objects per stage: source lines, FX compute nodes (call_function, call_method, "
                            "call_module: the ones the matrix measures; placeholders, attributes and outputs are "
                            "counted on their own line), IR ops, kernels, kernels found in the emitted file. The "
                            "kernel spec counts each kernel Inductor defines or calls (extern kernels once per call, and a "
                            "kernel reused for several ops once per use); the artifact counts each kernel the emitted "
                            "file defines, each later call of one it reuses, and each extern call. "
                            "\"= 0/0 forward\" marks a stage a graph shares with the first graph of its compile: "
                            "AOT autograd splits one Dynamo graph into the forward and backward graphs."
                            + (" Under torch-spyre the kernel spec counts OpSpecs (one per op of a SuperDSC kernel) and "
                               "the artifact the ops of the kernels' sdsc_*.json files; the Spyre section counts the "
                               "kernels." if _is_spyre(model) else "")]))
    _frames_without_graph(sec, model)
    _outside_compile(sec, model, titles)
    if model.get("cuts"):
        sec.blocks.append(Para(["Snapshots cut by a bound (docs/trace-format.md, Bounds): the counts and tables cover "
                                "the objects that were recorded. ", join((
                                    f"{c['compile_id']} {c['graph'] or ''} {titles.get(c['stage'], c['stage'])}: "
                                    f"{c['cut']} of {c['total'] if c['total'] is not None else '?'} not recorded "
                                    f"({c['reason'] or 'no reason given'})" for c in model["cuts"]), "; "), "."]))
    return sec


def _graph(g: dict[str, Any], gi: int, model: dict[str, Any], max_rows: int) -> Section:
    titles, order = model["stage_titles"], model["stage_order"]
    sec = Section(f"Graph {g['label']}", 2, attrs={"class": "graph", "data-graph": str(gi), "data-label": str(g["label"])})
    anchors = _anchors(g, gi)
    raised = ((model.get("trace") or {}).get("end") or {}).get("outcome") == "exception"
    sec.blocks.append(_headline(g, titles, "OpSpec" if _is_spyre(model) else "kernel", raised))
    if g.get("backend") == "torch.export":
        sec.blocks.append(Para(["An exported program (", Code("torch.export"), "); what compiled it is in the stages below."]))
    elif g.get("backend") == "Inductor, called directly":
        sec.blocks.append(Para(["A graph the program handed Inductor itself (", Code("torch._inductor.standalone_compile"),
                                " or ", Code("compile_fx"), ", outside Dynamo): no source frame or Dynamo graph is on "
                                "its path, and its nodes carry the stack traces of whatever traced it."]))
    elif g.get("backend"):
        sec.blocks.append(Para(["Dynamo handed this graph to the ", Code(g["backend"]), " backend."]))
    where = break_site(g.get("graph_break"))
    if where and not g.get("shared"):  # a backward graph's Dynamo graph is its forward's, which says it
        sec.blocks.append(Para(["Dynamo ended this graph at a graph break, at ", Code(where), ": ",
                                g["graph_break"]["summary"].rstrip("."), "."]))
    for note in g.get("notes", []):
        sec.blocks.append(Banner("Note.", note))
    by_owner: dict[str, list[str]] = {}
    for st, owner in (g.get("shared") or {}).items():
        by_owner.setdefault(owner, []).append(titles[st])
    for owner, shared in by_owner.items():
        # The same compile id: AOT's forward and backward. Another: a part of a Dynamo graph the backend split.
        who = ("AOT autograd split one Dynamo graph into this graph and that one" if owner.split(" ")[0] == str(g["compile_id"])
               else "the backend split one Dynamo graph into parts, this graph's and that one's")
        sec.blocks.append(Para([", ".join(shared) + f" are shared with {owner}: {who}, so their objects are the same "
                                "objects, counted once in the run's summary."]))
    matrix = Section("Stage × Field matrix", 3, [
        Para(["Each column is measured on the object that stage produces: the FX compute node, the LoopLevelIR op, "
              "the kernel and its IR ops, the kernel's entry in the emitted file. In HTML, hover or click a cell to "
              "list the objects behind its n/N."]),
        _matrix(g, order, titles)])
    off = g.get("off_path") or {}
    reasons = [[Code(r["field"]), f"at {titles[st]}: {c['reason']}."] for r in g["matrix"]
               for st, c in r["cells"].items() if c.get("reason") and st not in off]
    if off:
        by_reason: dict[str, list[str]] = {}
        for st, why in off.items():
            by_reason.setdefault(why, []).append(titles.get(st, st))
        for why, sts in by_reason.items():
            matrix.blocks.append(Para([Sym("na"), f" {', '.join(sts)}: {why}."]))
    if reasons:
        matrix.blocks.append(Para([Sym("na"), " where the field cannot exist yet:"]))
        matrix.blocks.append(Bullets(reasons))
    sec.blocks.append(matrix)
    sec.blocks.append(_losses(g, titles, anchors))
    if g.get("moved"):
        sec.blocks.append(_moved(g, titles, anchors))
    sec.blocks.append(_survival(g, order, titles))
    sec.blocks.append(_lineage(g, titles))
    detail = Section("Per-stage detail", 3)
    for st in order:
        detail.blocks.append(_stage_detail(g, st, titles, max_rows, anchors))
    km = _kernel_map(g)
    if km is not None:
        detail.blocks.append(km)
    handles = _spyre_handles(g, max_rows)
    if handles is not None:
        detail.blocks.append(handles)
    sec.blocks.append(detail)
    return sec


def row_keys(data: dict[str, Any]) -> list[str]:
    """Each object's key in a stage (its objects, then its boundary), numbered as the lineage numbers a repeated
    name: a torch.cond's branches each have a `mul`, keyed ``mul`` and ``mul (2)``, so each row is its own node."""
    seen: dict[str, int] = {}
    keys = []
    for o in list(data.get("objects", [])) + list(data.get("boundary", [])):
        name = str(o["name"])
        seen[name] = n = seen.get(name, 0) + 1
        keys.append(name if n == 1 else f"{name} ({n})")
    return keys


def _anchors(g: dict[str, Any], gi: int) -> dict[str, str]:
    """An HTML id for each object's row in the per-stage tables (``stage:key`` -> ``g0-post_grad-3``; a name
    others link to by name alone, ``stage:name``, is its first object's)."""
    out = {}
    for st, data in g["stages"].items():
        for i, key in enumerate(row_keys(data)):
            out[f"{st}:{key}"] = f"g{gi}-{st}-{i}"
    return out


def _linked(st: str, names: Any, anchors: dict[str, str], limit: int = 50) -> Join:
    items = []
    for n in list(names or [])[:limit]:
        a = anchors.get(f"{st}:{n}")
        items.append(Link(Code(n), a) if a else Code(n))
    return join(items)


def _is_spyre(model: dict[str, Any]) -> bool:
    """Whether torch-spyre compiled this trace (its kernel spec's objects are OpSpecs, its artifact SDSC ops)."""
    return model["header"].get("profile") == "spyre"


def _headline(g: dict[str, Any], titles: dict[str, str], kernel: str = "kernel", raised: bool = False) -> Para:
    """A few measured sentences: how far the model's own lines get, where most are lost, sourceless kernels
    (`kernel` names the kernel spec's objects: under torch-spyre they are OpSpecs, several to a kernel; `raised`:
    the run ended with an exception, which is why a stage may not have fired)."""
    hl = g["headline"]
    parts: list[Inline] = []
    n = hl["lines"]
    reached = [(st, k) for st, k in hl["reached"].items() if k is not None]
    if n:
        parts.append(f"{n} line{'s' if n != 1 else ''} of the model's source hold{'s' if n == 1 else ''} an op in this graph. "
                     "Lines carrying provenance at each stage: "
                     + ", ".join(f"{titles[st]} {k}/{n} ({k / n:.0%})" for st, k in reached) + ". ")
    else:
        parts.append("No line of the model's own source holds an op in this graph. ")
    unobserved = hl.get("unobserved") or []
    worst = hl["worst"]
    if worst:
        parts.append(f"Most lines are lost from {titles.get(worst['from'], 'nothing') if worst['from'] else 'the start'} "
                     f"to {titles[worst['to']]} ({worst['lines']} line{'s' if worst['lines'] != 1 else ''}). ")
    elif n:
        parts.append("No line is lost on the way. " if not unobserved or not reached
                     else f"No line is lost up to {titles[reached[-1][0]]}. ")
    if unobserved:
        names = [titles.get(st, st) for st in unobserved]
        names = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        stopped = hl.get("stopped_in")
        if stopped:
            parts += [f"{names} did not fire for this graph, so nothing is measured there: its compile stopped inside ",
                      Code(target_function(stopped.get("target"))), f" ({titles.get(stopped['stage'], stopped['stage'])}'s hook), whose call did not return"
                      + _raised_clause(stopped) + (", and the run ended with an exception (Ended, above). " if raised else ". ")]
        elif hl.get("lazy_backward") and hl.get("compiled_autograd"):
            ca = hl["compiled_autograd"]
            parts.append(f"{names} did not fire for this graph: Inductor did not compile it on its own, because "
                         f"compiled autograd traced the backward call into its own graph "
                         f"({', '.join(ca)}), which holds this graph's ops. ")
        elif hl.get("lazy_backward") and not raised:
            parts.append(f"{names} did not fire for this graph: Inductor compiles a backward graph at its first "
                         "backward call, and the run made none while it was traced (a forward run outside "
                         "torch.no_grad() builds a backward graph it never needs). ")
        else:
            parts.append(f"{names} did not fire for this graph, so nothing is measured there"
                         + (": the run ended with an exception (Ended, above). " if raised else
                            " (the Counts section shows which hooks did not fire). "))
    elif hl.get("stopped_in"):  # every stage on its path measured, but the compile did not finish
        stopped = hl["stopped_in"]
        parts += ["Its compile did not finish: it stopped inside ", Code(target_function(stopped.get("target"))),
                  f" ({titles.get(stopped['stage'], stopped['stage'])}'s hook), whose call did not return"
                  + _raised_clause(stopped) + (", and the run ended with an exception (Ended, above). " if raised else ". ")]
    maybe_cut_short = (hl.get("stopped_in") or {}).get("maybe_cut_short") or []
    if maybe_cut_short:
        stopped_at = (hl.get("stopped_in") or {}).get("stage")
        inside = [st for st in maybe_cut_short if st != stopped_at]
        if inside:
            parts.append(f"{' and '.join(titles.get(st, st) for st in inside)} was recorded inside that call, so it "
                         "may hold only what the compile made before it stopped: a line lost there is ranked as maybe "
                         "cut short, not as a drop. ")
        if stopped_at in maybe_cut_short:
            # Its hook is read at return: the records it holds are of its other calls (a nested graph's).
            parts.append(f"{titles.get(stopped_at, stopped_at)} holds only its calls that returned (a graph nested "
                         "in this one), not the one that did not: a line lost there is ranked as maybe cut short, "
                         "not as a drop. ")
    if hl["kernels"] is not None:
        bare = hl["sourceless_kernels"]
        # The noun agrees with the total, the verb with the part: "0 of 1 kernel carries", "1 of 8 kernels
        # carries", "0 of 3 kernels carry", "2 of 8 kernels carry".
        one = hl["kernels"] == 1
        parts.append(f"{len(bare)} of {hl['kernels']} {kernel}{'' if one else 's'} "
                     f"{'carries' if one or len(bare) == 1 else 'carry'} "
                     "no source at all"
                     + (": " if bare else "."))
        if bare:
            parts += [join(Code(b) for b in bare[:20]), "."]
    moved = g.get("moved") or []
    if moved:
        parts += [f" {len(moved)} node{'s' if len(moved) != 1 else ''} {'names' if len(moved) == 1 else 'name'} "
                  "another line after a pass than before it (Where provenance moves to another line, below): ",
                  join(Code(m["name"]) for m in moved[:20]), "."]
    return Para(parts, cls="headline")


def _losses(g: dict[str, Any], titles: dict[str, str], anchors: dict[str, str]) -> Section:
    sec = Section("Where provenance is lost", 3)
    if not g["losses"]:
        sec.blocks.append(Para(["No line of the model's source is lost between stages in this graph."
                                if g["survival"] else
                                "No line of source holds an op in this graph, so there is no line to lose."]))
        return sec
    sec.blocks.append(Para(["The model's lines grouped by the stage transition that lost them and by the kind of object "
                            "there that lost them, most lines first: what to fix first."]))
    rows = []
    for rank, grp in enumerate(g["losses"], 1):
        look = S.KERNEL_SPEC if grp["to"] == S.ARTIFACT else grp["to"]
        rows.append(Row([str(rank), f"{titles.get(grp['from'], '—') if grp['from'] else 'never attached'} → "
                         f"{titles[grp['to']]}", grp["kind"], str(len(grp["lines"])),
                         join(Loc(ln["file"], ln["line"]) for ln in grp["lines"][:20]),
                         _linked(look, grp["objects"], anchors)]))
    sec.blocks.append(Table(["Rank", "Lost", "Object kind", "Lines", "Which lines", "Objects"], rows))
    return sec


def _moved(g: dict[str, Any], titles: dict[str, str], anchors: dict[str, str]) -> Section:
    sec = Section("Where provenance moves to another line", 3)
    sec.blocks.append(Para(["Nodes a pass gave another line: the same node (its name and its op) at two stages of "
                            "this graph, carrying none of the lines it carried before. Its own line may still "
                            "survive through other nodes, so the tables of losses need not show it, but from here "
                            "on the node, and what is made from it, names a line it does not come from."]))
    rows = [Row([_linked(m["to"], [m["name"]], anchors), Code(m.get("target")),
                 f"{titles.get(m['from'], m['from'])} → {titles.get(m['to'], m['to'])}",
                 join(Loc(s["file"], s["line"]) for s in m["was"]), join(Loc(s["file"], s["line"]) for s in m["now"])])
            for m in g["moved"]]
    sec.blocks.append(Table(["Node", "Op", "Between", "Line before", "Line after"], rows))
    return sec


def _matrix(g: dict[str, Any], order: list[str], titles: dict[str, str]) -> Matrix:
    rows, keys, cells = [], [], {}
    for ri, r in enumerate(g["matrix"]):
        row_keys = []
        for st in order:
            c = r["cells"][st]
            key = f"{ri}:{st}"
            row_keys.append(key)
            populated = [cut(str(x)) for x in c.get("objects", [])]
            pset = set(populated)
            stage = g["stages"].get(st) or {}
            missing = ([cut(str(o["name"])) for o in stage.get("objects", []) if cut(str(o["name"])) not in pset]
                       [:MAX_CELL_NAMES] if c["state"] in ("some", "none") else [])
            cells[key] = {"field": r["field"], "stage": titles[st], "state": c["state"], "n": c["n"], "total": c["total"],
                          "populated": populated, "missing": missing, "sym": cell_sym(c)}
        keys.append(row_keys)
        rows.append(Row([r["layer"], Code(r["field"])] + [cell_sym(r["cells"][st]) for st in order]))
    return Matrix(Table(["Layer", "Field"] + [titles[st] for st in order], rows, cls="matrix"), keys, cells)


def _survival(g: dict[str, Any], order: list[str], titles: dict[str, str]) -> Section:
    stages = [st for st in order if st != S.SOURCE]
    off = g.get("off_path") or {}
    rows, library = [], []
    for s in g["survival"]:
        sid = src_id(s)
        if s.get("note") and s["last_stage"]:  # carried, then dropped by design (a wrapper op AOT inlines)
            last, lost = titles.get(s["last_stage"], "—"), s["note"]
        elif s.get("note"):
            last, lost = s["note"], "—"
        else:
            last = titles.get(s["last_stage"], "—") if s["last_stage"] else "never attached"
            lost = titles.get(s["lost_at"], "") if s["lost_at"] else "survives"
        row = Row([
            Loc(s.get("file"), s.get("line")), Code(s.get("text")),
            *[(Sym("na" if st in off else "unobserved") if s["counts"].get(st) is None else str(s["counts"][st]))
              for st in stages],
            last, lost, _codes(s["lost_by"]),
        ], attrs={"class": "srcline", "data-src": sid, "data-node": sid, "tabindex": "0"})
        (rows if s.get("user", True) else library).append(row)
    headers: list[Inline] = ["Line", "Code"] + [titles[st] for st in stages] + ["Last attached", "First lost", "Lost by"]
    return Section("Provenance survival per source line", 3, [
        Para(["For each line of model source (your own files first, each file's lines together): the last stage where an object still carries that line, and the first "
              "stage after it where none does (with the objects there that lost it). In HTML, click a line to highlight "
              "everything it flows into, in the lineage graph and the per-stage tables."]),
        (Table(headers, rows) if rows else
         Para(["No line of your own source holds an op in this graph"
               + (": the library and framework lines that do are below." if library else ", and no other line does either.")])),
        *([Section(f"Library and framework lines ({len(library)})", 4, [
            Para(["Lines in installed packages and torch itself that the stack traces name: not your code."]),
            Table(headers, library)], collapsed=True)] if library else []),
        Para([], cls="hlinfo muted"),
    ])


def _lineage(g: dict[str, Any], titles: dict[str, str]) -> Section:
    sec = Section("Lineage", 3, [Para([
        "Each object linked to the objects it came from, by the fields the trace recorded: a source line → the FX "
        "nodes that carry it; ", Code("from_node"), " (pre-grad → post-grad); ", Code("origins"), " (post-grad → "
        "LoopLevelIR, by the op's ", Code("origin_node"), "); the same buffer across the passes; kernel membership (IR "
        "op → kernel); the same kernel in the emitted file (under torch-spyre, the SDSC op that holds the OpSpec's debug handle). The other nodes an op's ", Code("origins"), " list (an input "
        "Inductor realised, an op computed inline) are side links, dashed and listed as \"also in origins\": never "
        "a decomposition or a fusion. A fusion is one kernel holding several IR ops. An object with no source and no "
        "link of its own is linked to its source-bearing producers by its inputs (dashed, ", Code("inherited"), "). "
        "FX placeholders and outputs are not drawn."])])
    lin = g.get("lineage")
    if not lin or not lin["nodes"]:
        sec.blocks.append(Para(["∅ nothing to draw."]))
        return sec
    name = {n["id"]: n for n in lin["nodes"]}

    def nm(nid: str) -> Inline:
        n = name[nid]
        return join([Code(n["name"]), f"({titles.get(n['stage'], n['stage'])})"], " ")

    rows = [Row(["decomposition", nm(d["from"]), join(nm(t) for t in d["to"])]) for d in lin["decompositions"]]
    rows += [Row(["fusion", join(nm(f) for f in d["from"]), nm(d["to"])]) for d in lin["fusions"]]
    rows += [Row(["also in origins", join(nm(f) for f in d["from"]), nm(d["to"])]) for d in lin.get("also_in_origins", [])]
    rows += [Row(["inherited", join(nm(f) for f in n["inherits_from"]), nm(n["id"])])
             for n in lin["nodes"] if n.get("inherited")]
    sec.blocks.append(LineageBlock(lin, titles, Table(["Change", "From", "To"], rows) if rows else None))
    drawn = [st for st in dict.fromkeys(n["stage"] for n in lin["nodes"])]
    if not rows and len(drawn) < 2:
        # aot_eager, eager: only the source lines; no claim about stages the lineage does not draw.
        sec.blocks.append(Para([f"Only {', '.join(titles.get(st, st) for st in drawn)} has objects to draw here: "
                                "the links start at FX pre-grad, which this graph's compile did not pass through, "
                                "so nothing is linked."]))
    elif not rows:
        sec.blocks.append(Para(["No decomposition, fusion, side link or inherited link: every object maps one to one."]))
    return sec


def _stage_detail(g: dict[str, Any], st: str, titles: dict[str, str], max_rows: int,
                  anchors: dict[str, str]) -> Section:
    data = g["stages"][st]
    off = (g.get("off_path") or {}).get(st)
    count = len(data["objects"]) if data["observed"] else ("not on this compile's path" if off else "not observed")
    if data["observed"] and data.get("boundary"):
        count = f"{count} + {len(data['boundary'])} placeholders and outputs"
    sec = Section(f"{titles.get(st, st)} ({count})", 4, collapsed=True)
    if data.get("note"):
        sec.blocks.append(Para([str(data["note"])]))
    if not data["observed"]:
        sec.blocks.append(Para([Sym("na"), f" {off}."] if off else [Sym("unobserved"), " not observed."]))
        return sec
    objs = data["objects"]
    if not objs:
        sec.blocks.append(Para([Sym("empty"), " no objects."]))
        return sec
    keys = row_keys(data)
    key = {id(o): f"{st}:{k}" for o, k in zip(list(objs) + list(data.get("boundary") or []), keys)}

    def attrs(o: dict[str, Any]) -> dict[str, str]:
        return {"data-node": key[id(o)], "id": anchors[key[id(o)]]}

    shown = objs[:max_rows]
    more = len(objs) - len(shown)
    if st == S.SOURCE:
        table = Table(["Line", "Function", "Source"],
                      [Row([_loc(o["sources"][0]), Code(o["kind"]), Code(o.get("text"))],
                           {"data-node": src_id(o["sources"][0]), "id": anchors[key[id(o)]]}) for o in shown], more)
    elif st == S.ARTIFACT and shown and all(o.get("kind") == "sdsc_op" for o in shown):
        # torch-spyre's SuperDSC ops: no def or call lines and no comments; their handle and the lines it names.
        table = Table(["SDSC op", "Kernel", Code("debug_handle_"), "Source line"], [
            Row([Code(o["name"].rsplit("/", 1)[-1]), Code(o.get("kernel")), Code(o["debug_handle_id"])
                 if o.get("debug_handle_id") else Sym("no"),
                 join(_loc(s) for s in o["sources"][:3]) if o["sources"] else Sym("no")],
                attrs(o)) for o in shown], more)
    elif st == S.ARTIFACT:
        table = Table(["Kernel", "Kind", "Def line", "Call lines", "Provenance comments"], [
            Row([Code(o["name"]), f"{o['kind']}, reused" if o.get("reused") else str(o["kind"]), str(o.get("def_line") or ""),
                 ", ".join(map(str, o.get("call_lines") or [])),
                 join((Code(c) for c in o["provenance_comments"]), "\n") if o["provenance_comments"] else Sym("no")],
                attrs(o)) for o in shown], more)
    else:
        fields = list(shown[0]["fields"].keys())
        kernels = st == S.KERNEL_SPEC
        rows = []
        for o in shown:
            cells: list[Inline] = [Code(o["name"]), Code(o.get("kind"))] + [_field_cell(o["fields"].get(f)) for f in fields]
            if kernels:
                cells += [_codes(o.get("ops")), _codes(o.get("origins")) if o.get("origins") else Sym("no")]
            cells.append(join(_loc(s) for s in o["sources"][:3]) if o["sources"] else Sym("no"))
            rows.append(Row(cells, attrs(o)))
        table = Table(["Name", "Kind"] + [Code(f) for f in fields] + (["IR ops", "Origins"] if kernels else [])
                      + ["Source line"], rows, more)
    sec.blocks.append(table)
    boundary = data.get("boundary") or []
    if boundary:
        sec.blocks.append(Para([f"Placeholders and outputs ({len(boundary)}): the graph's boundary, not counted in "
                                "the matrix."]))
        sec.blocks.append(Table(["Name", "Kind", "Source line"], [
            Row([Code(o["name"]), Code(o.get("kind")), join(_loc(x) for x in o["sources"][:3]) if o["sources"] else Sym("no")],
                attrs(o)) for o in boundary[:max_rows]],
            max(0, len(boundary) - max_rows)))
    return sec


def _kernel_map(g: dict[str, Any]) -> Section | None:
    ks = g["stages"].get(S.KERNEL_SPEC)
    if not ks or not ks["observed"] or not ks["objects"]:
        return None
    rows = [Row([Code(k["name"]), str(k["kind"]), _codes(k["ops"]), _codes(k["origins"]) if k["origins"] else Sym("no"),
                 join(_loc(s) for s in k["sources"]) if k["sources"] else Sym("no")]) for k in ks["objects"]]
    return Section("Kernel → IR ops → origins → source line", 4, [
        Table(["Kernel", "Kind", "IR ops", "Origins (post-grad nodes)", "Source lines"], rows)], collapsed=True)


# --- torch-spyre ------------------------------------------------------------------------------


def _spyre_line(h: dict[str, Any]) -> str | None:
    """The run table's Spyre row: the stand-in's line (or torch-spyre's own _C), and the tree."""
    ts = h.get("torch_spyre") if isinstance(h.get("torch_spyre"), dict) else {}
    what = h.get("standin") if isinstance(h.get("standin"), str) else (
        "torch-spyre's own torch_spyre._C" if ts.get("mode") == "real" else None)
    if what is None:
        return None
    return what + (f" (torch-spyre from {ts['tree']})" if isinstance(ts.get("tree"), str) else "")


def _handle_loc(src: Any) -> Inline:
    return Loc(src.get("file"), src.get("line")) if isinstance(src, dict) else Sym("no")


def _spyre_handles(g: dict[str, Any], max_rows: int) -> Section | None:
    """Each OpSpec's DebugHandle, field by field, and the SDSC op that carries the same handle."""
    ks = g["stages"].get(S.KERNEL_SPEC) or {}
    specs = [o for o in ks.get("objects", []) if "debug_handle_fields" in o]
    if not specs:
        return None
    in_bundle: dict[str, list[str]] = {}
    for o in (g["stages"].get(S.ARTIFACT) or {}).get("objects", []):
        if o.get("debug_handle_id"):
            in_bundle.setdefault(str(o["debug_handle_id"]), []).append(str(o["name"]))
    rows = []
    for o in specs[:max_rows]:
        h = o.get("debug_handle_fields")
        if not h:
            rows.append(Row([Code(o["name"]), Sym("no")] + [""] * 6, {"data-node": f"{S.KERNEL_SPEC}:{o['name']}"}))
            continue
        fused = [join([Code(", ".join(p.get("ir_chain") or []) or "?"), Code(p.get("aten_op") or "?"),
                       _handle_loc(p.get("source"))], " ") for p in h.get("fused_from", [])]
        history = [Code(f"{t.get('kind')} {t.get('pass_name')}" + (f": {t['reason']}" if t.get("reason") else ""))
                   for t in h.get("transform_history", [])]
        bundle = in_bundle.get(str(h.get("id")))
        rows.append(Row([
            Code(o["name"]), Code(h.get("id")), _handle_loc(h.get("source")),
            Code(h["aten_op"]) if h.get("aten_op") else Sym("no"), _codes(h.get("ir_chain")),
            join(fused, "\n") if fused else Sym("no"), join(history, "\n") if history else Sym("no"),
            _codes(bundle) if bundle else Sym("no"),
        ], {"data-node": f"{S.KERNEL_SPEC}:{o['name']}"}))
    return Section("Spyre debug_handle", 4, [
        Para(["Each OpSpec's ", Code("debug_handle"), " (torch-spyre's DebugHandle, as its ", Code("to_dict()"),
              " writes it): the source it names (its ", Code("origin_node"), "'s line where Inductor set one, else "
              "the line all its origins share; none when they name several: the lines are then in ",
              Code("fused_from"), "), the ATen op, the IR chain (origins, then the buffer), the handles it was fused "
              "from, the passes that rewrote it, and the SDSC op whose ", Code("debug_handle_"), " is the same "
              "handle."]),
        Table(["OpSpec", "id", "source", "aten_op", "ir_chain", "fused_from", "transform_history", "In bundle"],
              rows, max(0, len(specs) - max_rows))], collapsed=True)


def _lines(file_lines: Any) -> Inline:
    items = list(file_lines or [])
    return join((Code(basename(x)) for x in items), "\n") if items else Sym("no")


def _spyre(sp: dict[str, Any]) -> Section:
    """The run's Spyre section: what the stand-in did, and torch-spyre's own provenance record against the trace."""
    sec = Section("Spyre", 2)
    if sp.get("standin"):
        sec.blocks.append(Para([f"{sp['standin']}: torch-spyre's Python compile path ran as it is; its native "
                                "side (", Code("torch_spyre._C"), ", the device runtime, ", Code("dxp_standalone"),
                                ") was prov-trace's CPU stand-in, which records what it is asked and runs no kernel."]))
    elif sp.get("mode") == "real":
        sec.blocks.append(Para(["torch-spyre's own ", Code("torch_spyre._C"), " was used, so there is no stand-in "
                                "record of its ", Code("register_kernel_provenance"), " calls to check the trace "
                                "against."]))
    if sp.get("error"):
        sec.blocks.append(Para([f"The stand-in's record could not be read at the end of the run: {sp['error']}."]))
    bundles = sp.get("bundles") or []
    if sp.get("recorded"):
        accepted = sum(1 for b in bundles if b.get("accepted"))
        parts: list[Inline] = [f"{len(bundles)} bundle(s) handed to ", Code("dxp_standalone"), f", {accepted} accepted"]
        not_run = sp.get("kernels_not_run") or []
        parts += [f"; {len(not_run)} kernel launch(es) not run", *((": ", _codes(not_run, 20)) if not_run else ()), "."]
        sec.blocks.append(Para(parts))
    if sp.get("op_specs"):
        missing = sp.get("op_specs_in_no_bundle") or []
        sec.blocks.append(Para([f"{sp['op_specs'] - len(missing)} of {sp['op_specs']} OpSpecs have their ",
                                Code("debug_handle"), " on an op of a bundle", *((": in none, ", _codes(missing, 20),
                                " (built and never emitted: a discarded attempt, a kernel reused by its source, or a "
                                "compile that stopped first)") if missing else ()), "."]))
    cc = sp.get("crosscheck")
    if cc is None:
        return sec
    sub = Section("torch-spyre's own record: register_kernel_provenance", 3)
    sec.blocks.append(sub)
    rows = cc.get("kernels") or []
    n_agree = sum(1 for r in rows if r.get("agree"))
    if cc.get("agree"):
        verdict = (f"Agrees: for each of the {len(rows)} kernel(s) torch-spyre registered, the debug-handle ids are "
                   "the bundle's debug_handle_ ids, in order, and the source lines they name are the lines the "
                   "kernel's IR ops carry (kernel → origins → source line).")
    elif not rows and not cc.get("registrations_without_kernel") and not cc.get("kernels_without_registration"):
        verdict = "Nothing to compare: torch-spyre registered no kernel and the trace has no bundle directory."
    else:
        verdict = (f"Disagrees: {n_agree} of {len(rows)} registered kernel(s) agree with the trace; the rows marked "
                   "✗ below, and the lists under the table, say where.")
    sub.blocks.append(Para([verdict]))
    if rows:
        sub.blocks.append(Table(["Graph", "Kernel", "Registered as", "Handle ids", "Ids = bundle's", "Registered lines",
                                 "Trace lines", "Lines agree"], [
            Row([str(r.get("compile_id")), Code(r.get("kernel")), Code(r.get("event_base_name")),
                 str(len(r.get("registered_ids") or [])), Sym("yes" if r.get("ids_agree") else "no"),
                 _lines(r.get("registered_sources")), _lines(r.get("trace_sources")),
                 Sym("yes" if r.get("sources_agree") else "no")]) for r in rows]))
    items: list[list[Inline]] = []
    for r in rows:
        if r.get("ids_not_in_trace"):
            items.append([Code(r.get("kernel")), ": registered ids no OpSpec in the trace has: ",
                          _codes(r["ids_not_in_trace"], 20)])
    for r in cc.get("registrations_without_kernel") or []:
        items.append(["Registered, no bundle directory in the trace: ", Code(r.get("event_base_name"))])
    for r in cc.get("kernels_without_registration") or []:
        items.append(["Bundle directory with no registration: ", Code(r.get("kernel")), f" ({r.get('compile_id')})"])
    if items:
        sub.blocks.append(Bullets(items))
    return sec


def _hooks(model: dict[str, Any]) -> Section:
    # A hook of a stage the trace has no column for (it never fired) still reads by its title.
    titles = {**S.STAGE_TITLES, **model["stage_titles"]}
    rows = [Row([Code(hk.get("target")), titles.get(hk.get("stage"), str(hk.get("stage"))), str(hk.get("event")),
                 Sym("yes" if hk.get("resolved") else "no"), Sym("yes" if hk.get("installed") else "no"),
                 str(hk.get("fired", 0)), "" if hk.get("records") is None else str(hk["records"]),
                 str(hk.get("errors", 0)), str(hk.get("reason") or "; ".join(map(str, hk.get("notes") or [])) or "")])
            for hk in model["hooks"]]
    return Section("Hooks", 2, [
        Para(["Fired counts the calls of each hooked function while the trace ran, Records the snapshots its probe "
              "wrote. A side hook (compile error, graph break, notice) is called at every compile and writes a record "
              "only when something happened: a call with no record is a compile it found nothing in."]),
        Table(["Target", "Stage", "Event", "Resolved", "Installed", "Fired", "Records", "Errors", "Notes"], rows)])


# --- the source and code views -------------------------------------------------------------------

#: Object names listed per stage for one line in the source view.
MAX_LINE_OBJECTS = 20


def _rank(order: list[str], stage: str | None) -> int:
    return order.index(stage) if stage in order else -1


def _line_marks(model: dict[str, Any]) -> dict[str, dict[int, dict[str, Any]]]:
    """Per file and line: the furthest stage any graph carries it to, and per graph what carries it at each stage."""
    order = [st for st in model["stage_order"] if st in S.STAGES]
    marks: dict[str, dict[int, dict[str, Any]]] = {}
    user_files: set[str] = set()
    for gi, g in enumerate(model["graphs"]):
        anchors = _anchors(g, gi)
        # A carrier is named; its row is the object of that name that carries the line (two graphs nested in
        # this one may each have a `mul`, keyed `mul` and `mul (2)`).
        keyed: dict[tuple, list[str]] = {}
        for st, data in g["stages"].items():
            for o, k in zip(data.get("objects", []), row_keys(data)):
                for src in dict.fromkeys((x.get("file"), x.get("line")) for x in o.get("sources") or []):
                    keyed.setdefault((st, o["name"], *src), []).append(k)

        def rows_of(st: str, names: list[str], r: dict[str, Any]) -> list[list[Any]]:
            used: dict[str, int] = {}
            out = []
            for n in names[:MAX_LINE_OBJECTS]:
                ks = keyed.get((st, n, r["file"], r["line"])) or [n]
                i = used[n] = used.get(n, -1) + 1  # the i-th carrier of this name is the i-th such object
                out.append([n, anchors.get(f"{st}:{ks[min(i, len(ks) - 1)]}")])
            return out

        for r in g["survival"]:
            if not isinstance(r.get("file"), str) or not isinstance(r.get("line"), int):
                continue
            m = marks.setdefault(r["file"], {}).setdefault(r["line"], {"last": None, "note": None, "graphs": []})
            if r.get("user"):
                user_files.add(r["file"])
            if r["last_stage"] and _rank(order, r["last_stage"]) > _rank(order, m["last"]):
                m["last"] = r["last_stage"]
            if r.get("note") and not m["note"]:
                m["note"] = r["note"]
            carried = {st: rows_of(st, names, r) for st, names in r["carriers"].items() if names}
            if carried or r["lost_at"]:
                m["graphs"].append({"g": gi, "label": g["label"], "src": src_id(r), "stages": carried,
                                    "lost_at": r["lost_at"], "lost_by": r["lost_by"][:MAX_LINE_OBJECTS]})
    for file_marks in marks.values():  # a line another graph carries is that graph's, not a gap
        for m in file_marks.values():
            if m["last"]:
                m["note"] = None
    for site in break_sites(model):  # a line Dynamo broke the graph at: its note gives Dynamo's reason
        m = marks.get(site["file"], {}).get(site["line"])
        if m and m["note"]:
            m["note"] = f"{m['note']} (Dynamo: {site['summary']})"
    # The model's files first (the survival rows say whose a file is), the one with most carried lines first;
    # then library and framework files.
    carried = {p: sum(1 for m in lines.values() if m["last"]) for p, lines in marks.items()}
    order = list(marks)
    return {p: marks[p] for p in sorted(marks, key=lambda p: (p not in user_files, -carried[p], order.index(p)))}, user_files


def _file_rows(model: dict[str, Any], marks: dict[str, dict[int, dict[str, Any]]], titles: dict[str, str]) -> list[Row]:
    rows = []
    for i, path in enumerate(marks):
        lines = marks[path]
        with_op = [m for m in lines.values() if m["last"] or any(gr["lost_at"] for gr in m["graphs"])]
        survive = sum(1 for m in with_op if m["last"] == S.ARTIFACT)
        furthest = {}
        for m in with_op:
            key = titles.get(m["last"], "never attached") if m["last"] else "never attached"
            furthest[key] = furthest.get(key, 0) + 1
        rows.append(Row([Link(Code(short_path(path)), f"src-{i}"), str(len(with_op)), str(survive),
                         ", ".join(f"{k} {v}" for k, v in furthest.items() if k != titles.get(S.ARTIFACT))]))
    return rows


def _source_section(model: dict[str, Any], texts: dict[str, Any] | None) -> Section:
    """The source files, the user's first: an index with each file's survival, and (HTML) each file line by line."""
    titles = model["stage_titles"]
    marks, user_files = _line_marks(model)
    user = [p for p in marks if p in user_files]
    library = [p for p in marks if p not in user_files]
    sec = Section("The model's source, line by line", 2, attrs={"class": "intro sources"})
    headers: list[Inline] = ["File", "Lines with an op", "Reach the artifact", "Furthest stage of the others"]
    rows = _file_rows(model, marks, titles)
    sec.blocks.append(Para(["Each file the trace names, the model's own first (the files of the code Dynamo "
                            "compiled, and any file outside installed packages), then library and framework files. In HTML, open a file to see every line coloured "
                            "by the last stage its provenance reached, and click a line to list its FX nodes, IR ops "
                            "and kernels; the generated code below links each kernel back to its lines. "
                            "(In Markdown: the tables only; write the report as .html for the views.)"]))
    if user:
        sec.blocks.append(Table(headers, rows[:len(user)]))
    elif model.get("frames_without_graph") and not model.get("graphs"):  # it names their files, with no op in them
        sec.blocks.append(Para(["No line of the model's own holds an op: the frames Dynamo compiled produced no "
                                "graph (Counts, above), so their lines ran uncompiled."]))
    else:
        sec.blocks.append(Para(["The trace names no file of the model's own."]))
    if library:
        sec.blocks.append(Section(f"Library and framework files ({len(library)})", 3,
                                  [Table(headers, rows[len(user):])], collapsed=True))
    code = _code_files(model)
    if code:
        sec.blocks.append(Section("Generated code", 3, [Table(["File", "Kernels", "With a provenance comment"], [
            Row([Link(Code(short_path(c["path"])), f"code-{ci}"), str(len(c["spans"])),
                 str(sum(1 for sp in c["spans"] if sp["commented"]))]) for ci, c in enumerate(code)])]))
    if texts is not None:
        sec.blocks.append(FileViews(_source_files(marks, user_files, texts, code), _code_views(code, texts, list(marks)),
                                    titles))
    return sec


def _code_files(model: dict[str, Any]) -> list[dict[str, Any]]:
    """Per emitted file: its kernels (definition and call lines), each with what it came from."""
    files: dict[str, dict[str, Any]] = {}
    for gi, g in enumerate(model["graphs"]):
        anchors = _anchors(g, gi)
        art = g["stages"].get(S.ARTIFACT) or {}
        ks = {o["name"]: o for o in (g["stages"].get(S.KERNEL_SPEC) or {}).get("objects", [])}
        for o in art.get("objects", []) if art.get("observed") else []:
            path = o.get("file")
            if not isinstance(path, str) or o.get("kind") == "sdsc_op":
                continue
            k = ks.get(o["name"]) or {}
            f = files.setdefault(path, {"path": path, "spans": []})
            f["spans"].append({
                "kernel": o["name"], "g": gi, "label": g["label"], "anchor": anchors.get(f"{S.ARTIFACT}:{o['name']}"),
                # A reused kernel's later uses are their call lines: the definition's span is the first use's.
                "def_line": None if o.get("reused") else o.get("def_line"), "calls": o.get("call_lines") or [],
                "commented": bool(o["fields"].get("provenance_comment", {}).get("populated")),
                "ir": [[n, anchors.get(f"{S.IR_POST}:{n}") or anchors.get(f"{S.IR_PRE}:{n}")] for n in k.get("ops", [])],
                "post": [[n, anchors.get(f"{S.POST_GRAD}:{n}")] for n in k.get("post_nodes", [])],
                "sources": [[sr.get("file"), sr.get("line")] for sr in k.get("sources", [])],
            })
    return list(files.values())


def _text_lines(ft: Any) -> tuple[list[Any], str, str | None]:
    return (ft.lines, ft.status, ft.note) if ft is not None else ([], "missing", "the file was not read")


def _source_files(marks: dict[str, dict[int, dict[str, Any]]], user_files: set[str], texts: dict[str, Any],
                  code: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # A kernel's spans in the code view, by (graph, kernel name): where a line's kernels link to.
    spans = {(sp["g"], sp["kernel"]): f"code-{ci}-{si}" for ci, c in enumerate(code) for si, sp in enumerate(c["spans"])}
    out = []
    for path, lines in marks.items():
        text, status, note = _text_lines(texts.get(path))
        for m in lines.values():
            for gr in m["graphs"]:
                gr["code"] = [[n, spans.get((gr["g"], n))] for n, _ in gr["stages"].get(S.KERNEL_SPEC, [])
                              if spans.get((gr["g"], n))]
        out.append({"path": path, "short": short_path(path), "user": path in user_files, "status": status, "note": note,
                    "lines": text, "marks": {str(n): m for n, m in lines.items()}})
    return out


def _code_views(code: list[dict[str, Any]], texts: dict[str, Any], source_paths: list[str]) -> list[dict[str, Any]]:
    index = {p: i for i, p in enumerate(source_paths)}
    out = []
    for c in code:
        text, status, note = _text_lines(texts.get(c["path"]))
        statements = python_spans(text) if c["path"].endswith(".py") and status == "ok" else None
        spans = []
        for sp in c["spans"]:
            start = sp["def_line"] or (sp["calls"][0] if sp["calls"] else None)
            end = span_end(text, start, statements) if sp["def_line"] and text else start
            spans.append({**sp, "start": start, "end": end,
                          "sources": [[index.get(f), f, ln] for f, ln in sp["sources"]]})
        out.append({"path": c["path"], "short": short_path(c["path"]), "status": status, "note": note, "lines": text,
                    "spans": spans})
    return out


# --- the run summary (a terminal's view) ---------------------------------------------------------


def summary_lines(model: dict[str, Any]) -> list[str]:
    """The short per-stage summary printed at the end of a run."""
    titles = model["stage_titles"]
    out = ["prov-trace summary:"]
    rows = [row for row in model["summary"] if row["hooks"] or row["observed"]]
    if rows and all(_never_imported(row) for row in rows):
        # A program that compiled nothing (no torch.compile, or it stopped before one): one line, not a stage's
        # worth of "module ... was never imported" each.
        modules = list(dict.fromkeys(_unimported(u) for row in rows for u in row["unresolved"]))
        out.append(f"  no stage reached: the program never imported a module the {model['header'].get('profile')} "
                   f"profile watches ({', '.join(modules[:3])}{', ...' if len(modules) > 3 else ''}), "
                   "so it made no compile or export")
        rows = []
    for row in rows:
        if not row["observed"] and row.get("off_path"):
            state = "off path"
        elif not row["observed"] and row.get("outside_compile"):
            state = "outside"  # a user probe whose function ran only while no compile did
        elif _never_imported(row):
            state = "NOT REACHED"  # the run never imported the module: nothing compiled got that far, not drift
        elif row["resolved"] < row["hooks"] and not row["observed"]:
            state = "NOT RESOLVED"
        elif not row["observed"]:  # called (a compile that failed inside it) but no result recorded, or never called
            state = "NO RESULT" if row["fired"] or row.get("raised") else "DID NOT FIRE"
        else:
            state = "fired"
        line = (f"  {titles.get(row['stage'], row['stage']):<26} {state:<13} hooks {row['resolved']}/{row['hooks']} "
                f"resolved, {_n(row['fired'], 'event')}, {_n(row['objects'], 'object')}")
        if row.get("boundary"):
            line += f" (+{row['boundary']} placeholders and outputs)"
        if row.get("outside_compile"):
            line += f" (+{row['outside_compile']} taken " + (
                "outside any graph)" if any(o.get("compile_id") is not None and o.get("stage") == row["stage"]
                                            for o in model.get("outside_compile") or []) else "while no compile ran)")
        if row["errors"]:
            line += f", {_n(row['errors'], 'probe error')}"
        if row.get("raised") and not row["observed"]:
            line += f", {_n(row['raised'], 'call')} raised (the compile failed inside it)"
        elif row.get("raised"):  # a compile of this run stopped here: another may have got through
            line += f", {_n(row['raised'], 'call')} did not return"
        out.append(line)
        if state == "off path":
            out.append(f"      {row['off_path']}")
        for u in row["unresolved"] if state != "off path" else []:
            out.append(f"      unresolved: {u}")
    out += _raised_lines(model)
    out += _break_lines(model)
    out += _skipped_lines(model)
    out += [f"  notice: {n['text']}" for n in model.get("notices") or []]
    tr = model["trace"]
    if not tr["complete"]:
        out.append(f"  trace is partial: {tr['problem']}")
    # For a terminal: trace text (a stage name, a hook's reason) must not carry escape sequences.
    return [clean(line) for line in out]


def _unimported(unresolved: str) -> str | None:
    """The module an unresolved hook's reason says the run never imported (the session writes
    "TARGET: module M was never imported"), else None."""
    _, sep, tail = unresolved.rpartition(" module ")
    return tail.removesuffix(" was never imported") if sep and tail.endswith(" was never imported") else None


def _never_imported(row: dict[str, Any]) -> bool:
    """A stage none of whose hooks resolved because the run never imported their modules."""
    return (row["resolved"] < row["hooks"] and not row["observed"] and bool(row["unresolved"])
            and all(_unimported(u) for u in row["unresolved"]))


#: How many compiles that raised the run's summary names, one line each.
MAX_RAISED_LINES = 5


def _raised_lines(model: dict[str, Any]) -> list[str]:
    """One summary line per compile that raised, graph or frame without one, with what it raised, or that hit a
    recompile limit: the live progress said it as it happened, but --quiet silences that, and a frame Dynamo
    skips says nothing else."""
    stops = [(str(g.get("compile_id")), (g.get("headline") or {}).get("stopped_in") or {})
             for g in model.get("graphs") or []]
    stops += [(str(f.get("compile_id")), f.get("stopped_in") or {}) for f in model.get("frames_without_graph") or []]
    said = []
    for label, stopped in stops:
        raised, limit = error_summary(stopped.get("error")), limit_summary(stopped.get("limit"))
        if raised:
            said.append((label, f"the compile raised {raised}"))
        if limit:
            said.append((label, limit))
    # A compile's forward and backward graphs stopped in the same compile: said once, by its compile id.
    said = list(dict.fromkeys(said))
    out = [f"  [{label}] {text}" for label, text in said[:MAX_RAISED_LINES]]
    if len(said) > MAX_RAISED_LINES:
        out.append(f"  and {len(said) - MAX_RAISED_LINES} more compiles that raised or hit a recompile limit "
                   "(the report lists them)")
    return out


def _skipped_lines(model: dict[str, Any]) -> list[str]:
    """In a run that compiled no graph, one line per frame Dynamo skipped without an error (a function with no op
    to trace): otherwise every stage reads DID NOT FIRE with no word of why. Where graphs were compiled, skips are
    routine (an optimizer's wrappers) and the report alone lists them."""
    if model.get("graphs"):
        return []
    said = [f"  [{f.get('compile_id')}] {f.get('qualname')} ({basename(f.get('file'))}:{f.get('line')}): "
            f"{skip_summary(f['skipped'])}" for f in skipped_frames(model)]
    if len(said) > MAX_RAISED_LINES:
        said = said[:MAX_RAISED_LINES] + [f"  and {len(said) - MAX_RAISED_LINES} more frames Dynamo skipped "
                                          "(the report lists them)"]
    return said


#: How many graph breaks the run's summary names, one line each.
MAX_BREAK_LINES = 5


def _break_lines(model: dict[str, Any]) -> list[str]:
    """One summary line per graph break: where, Dynamo's reason, and the compiles it ended (a compile's forward
    and backward graphs share one; a recompile of the frame breaks at the same line again)."""
    said = break_sites(model)
    out = [f"  {break_line(site)}" for site in said[:MAX_BREAK_LINES]]
    if len(said) > MAX_BREAK_LINES:
        out.append(f"  and {len(said) - MAX_BREAK_LINES} more graph breaks (the report lists them)")
    return out


# --- a diff ------------------------------------------------------------------------------------

CHANGE_WORDS = {"down": "▼ dropped", "up": "▲ rose", "changed": "changed", "earlier": "▼ earlier", "later": "▲ later"}
CHANGE_STATES = {"down": "none", "up": "all", "earlier": "none", "later": "all"}
MAX_DIFF_NAMES = 200
MAX_DIFF_EDGES = 200


def _change(change: str) -> Tag:
    return Tag(CHANGE_WORDS.get(change, change), CHANGE_STATES.get(change, ""))


def diff_document(d: dict[str, Any]) -> Document:
    titles = d["stage_titles"]

    def t(st: str | None) -> str:
        return titles.get(st, st) if st else "never attached"

    blocks: list[Any] = [Table(None, [
        Row(["A", join([Code(d["a"]["path"])] + ([] if d["a"]["complete"] else ["(partial)"]), " ")]),
        Row(["B", join([Code(d["b"]["path"])] + ([] if d["b"]["complete"] else ["(partial)"]), " ")]),
    ], cls="kv")]
    n_fields = sum(len(g["fields"]) for g in d["graphs"])
    lost = [r["graph"] for r in d["regressions"] if r.get("kind") == "graph"]
    drops = sum(1 for r in d["regressions"] if r.get("kind") == "field")
    moved = sum(1 for r in d["regressions"] if r.get("kind") == "moved")
    blocks.append(Para([f"{len(lost)} graph(s) of A missing from B, {drops} field population drop(s), "
                        f"{n_fields} population change(s), {d['survival_earlier']} source line(s) whose provenance "
                        "now ends at an earlier stage"
                        + (f", {moved} node(s) a pass now gives another line." if moved else ".")]))
    gone, new = (d.get("graph_breaks") or {}).get("removed") or [], (d.get("graph_breaks") or {}).get("added") or []
    if gone or new:
        blocks.append(Section("Graph breaks", 2, [
            Para([f"{len(gone)} graph break(s) of A gone in B, {len(new)} new in B (matched by the line Dynamo broke "
                  "at; Dynamo's reason as each trace gave it)."]),
            Table(["Change", "Line", "Compile", "Dynamo's reason"],
                  [Row([Tag("▲ gone", "all"), Code(f"{basename(x['file'])}:{x['line']}"), str(x["compile_id"]),
                        x["summary"]]) for x in gone]
                  + [Row([Tag("▼ new", "none"), Code(f"{basename(x['file'])}:{x['line']}"), str(x["compile_id"]),
                          x["summary"]]) for x in new])]))
    if d.get("files_paired"):
        blocks.append(Para(["The traces name these source files at different paths (another checkout or machine); "
                            "each pair is compared as one file: "]
                           + [join([join([Code(basename(p["a"])), f"(A: {p['a']}, B: {p['b']})"], " ")
                                    for p in d["files_paired"]]), "."]))
    if d.get("lines_moved"):
        blocks.append(Para([f"{d['lines_moved']} source line(s) are at another line number in B than in A (the file "
                            "was edited): each is matched by its text and compared as one line, named by A's number."]))
    for g in d["graphs"]:
        sec = Section(f"Graph {g['label']}", 2)
        blocks.append(sec)
        if g["in"] == "a":
            sec.blocks.append(Para([Tag("▼ lost", "none"), ": only in A. B has no such graph (it compiled less, or "
                                    "nothing), so every field A measured here is gone."]))
            continue
        if g["in"] == "b":
            sec.blocks.append(Para(["Only in B."]))
            continue
        fields = Section("Field population", 3)
        fields.blocks.append(Table(["Layer", "Field", "Stage", "A", "B", "Change"], [
            Row([r["layer"], Code(r["field"]), t(r["stage"]), cell_sym(r["a"]), cell_sym(r["b"]), _change(r["change"])])
            for r in g["fields"]]) if g["fields"] else Para(["No change."]))
        objects = Section("Objects added and removed", 3)
        objects.blocks.append(Table(["Stage", "A", "B", "Added", "Removed"], [
            Row([t(st), str(o["a"]), str(o["b"]), _codes(o["added"], MAX_DIFF_NAMES), _codes(o["removed"], MAX_DIFF_NAMES)])
            for st, o in g["objects"].items()]) if g["objects"] else Para(["No change."]))
        sec.blocks += [fields, objects]
        moved_new, moved_gone = (g.get("moved") or {}).get("added") or [], (g.get("moved") or {}).get("removed") or []
        if moved_new or moved_gone:
            def moved_row(tag: Tag, m: dict[str, Any]) -> Row:
                return Row([tag, Code(m["name"]), Code(m.get("target")), f"{t(m['from'])} → {t(m['to'])}",
                            join(Code(f"{basename(s['file'])}:{s['line']}") for s in m["was"]),
                            join(Code(f"{basename(s['file'])}:{s['line']}") for s in m["now"])])
            sec.blocks.append(Section("Nodes a pass gives another line", 3, [
                Para([f"{len(moved_new)} new in B, {len(moved_gone)} gone in B (the report's \"Where provenance moves "
                      "to another line\")."]),
                Table(["Change", "Node", "Op", "Between", "Line before", "Line after"],
                      [moved_row(Tag("▼ new", "none"), m) for m in moved_new]
                      + [moved_row(Tag("▲ gone", "all"), m) for m in moved_gone])]))
        added, removed = g["edges"]["added"], g["edges"]["removed"]
        if added or removed:
            sec.blocks.append(Section("Lineage edges", 3, [
                Para([f"{len(added)} added, {len(removed)} removed."]),
                Table(["Change", "From", "To"],
                      [Row(["added", Code(a), Code(b)]) for a, b in added[:MAX_DIFF_EDGES]]
                      + [Row(["removed", Code(a), Code(b)]) for a, b in removed[:MAX_DIFF_EDGES]],
                      more=max(0, len(added) - MAX_DIFF_EDGES) + max(0, len(removed) - MAX_DIFF_EDGES))]))
        survival = Section("Source lines whose survival moved", 3)
        survival.blocks.append(Table(
            ["Line", "Source", "A: last attached", "B: last attached", "A: first lost", "B: first lost", "Change"], [
                Row([Code(f"{basename(s['file'])}:{s['line']}" + (f" (B: {s['line_b']})" if s.get("line_b") else "")),
                     Code(s["text"]), t(s["a"]["last_stage"]),
                     t(s["b"]["last_stage"]), t(s["a"]["lost_at"]) if s["a"]["lost_at"] else "survives",
                     t(s["b"]["lost_at"]) if s["b"]["lost_at"] else "survives", _change(s["change"])])
                for s in g["survival"]]) if g["survival"] else Para([
                    "No change." if not g.get("survival_unmatched") else
                    "No source line of this graph is in both traces (they name different files), so no line's "
                    "survival could be compared."]))
        sec.blocks.append(survival)
    return Document("Provenance diff", blocks, kind="diff", page_title="Provenance diff")


__all__ = ["Banner", "Bullets", "Code", "Document", "EMOJI", "GLYPHS", "Join", "LineageBlock", "Loc", "Matrix", "Para",
           "Row", "Section", "Sym", "Table", "Tag", "cell_sym", "diff_document", "report_document", "short_path",
           "src_id", "summary_lines", "symbol_text"]
