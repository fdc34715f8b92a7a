"""HTML renderer: draws a view-layer `Document` as one self-contained page, from Jinja templates.

The templates (``templates/*.j2``) escape every value by default, so a source
line holding ``<script>`` shows as text; the data the page's script reads is a
JSON island written by ``tojson``, which escapes ``<``, ``>`` and ``&``. No
network: CSS and JS are inline, the lineage is inline SVG laid out here, and a
Content-Security-Policy forbids fetching anything, so the file opens the same
from disk on an air-gapped machine.

Opening a report with ``#selftest`` at the end of its URL runs a check on load:
it counts the drawn grid cells, lineage nodes and edges, clicks the first source
line, counts what is highlighted, and writes the result as JSON into
``<pre id="selftest-result">`` (the tests read it with ``chromium --dump-dom``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

from prov_trace.report import views as V
from prov_trace.report.lineage import flow_successors
from prov_trace.report.text import clean, cut, short_path
from prov_trace.stream import schema

#: Lineage nodes drawn per graph; the rest are listed in the JSON output.
MAX_SVG_NODES = V.MAX_SVG_NODES
COL_W = {schema.SOURCE: 240, schema.KERNEL_SPEC: 170, schema.ARTIFACT: 170}
DEFAULT_COL_W = 130
COL_GAP = 44
ROW_H = 30
BOX_H = 22
TOP = 34
_TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def _finalize(value: Any) -> Any:
    """Every ``{{ }}`` value: None shows as nothing, text from the trace as printable text (then escaped)."""
    if value is None:
        return ""
    if isinstance(value, _markup()):  # the page's own CSS, JS and JSON island
        return value
    return clean(value) if isinstance(value, str) else value


@functools.lru_cache(maxsize=1)
def _markup() -> type:
    from markupsafe import Markup  # with jinja2, imported only when a page is drawn

    return Markup


def _cell_tip(info: dict[str, Any]) -> str:
    populated, missing = info["populated"], info["missing"]
    if populated or missing:
        return "populated: " + (", ".join(populated[:30]) or "none") + ("; not: " + ", ".join(missing[:30]) if missing else "")
    return info["meaning"]


@functools.lru_cache(maxsize=1)
def _env() -> Any:
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(_TEMPLATES), autoescape=True, finalize=_finalize,
                             trim_blocks=False, lstrip_blocks=False, undefined=jinja2.StrictUndefined)
    env.tests.update({
        "code_value": lambda v: isinstance(v, V.Code), "sym_value": lambda v: isinstance(v, V.Sym),
        "loc_value": lambda v: isinstance(v, V.Loc), "tag_value": lambda v: isinstance(v, V.Tag),
        "join_value": lambda v: isinstance(v, V.Join), "link_value": lambda v: isinstance(v, V.Link),
        "section_block": lambda v: isinstance(v, V.Section), "para_block": lambda v: isinstance(v, V.Para),
        "banner_block": lambda v: isinstance(v, V.Banner), "bullets_block": lambda v: isinstance(v, V.Bullets),
        "table_block": lambda v: isinstance(v, V.Table), "matrix_block": lambda v: isinstance(v, V.Matrix),
        "lineage_block": lambda v: isinstance(v, V.LineageBlock), "fileviews_block": lambda v: isinstance(v, V.FileViews),
    })
    env.filters.update({"glyph": lambda s: V.symbol_text(s, V.GLYPHS), "short_path": short_path,
                        "cell_tip": _cell_tip, "svg_layout": svg_layout})
    with open(os.path.join(_TEMPLATES, "report.css"), encoding="utf-8") as f:
        env.globals["css"] = Markup(f.read())
    with open(os.path.join(_TEMPLATES, "report.js"), encoding="utf-8") as f:
        env.globals["js"] = Markup(f.read())
    return env


def _layout(lin: dict[str, Any]) -> tuple[dict[str, tuple[float, float, float]], list[tuple[str, float, float]], float, float]:
    """Columns per stage; rows ordered by the mean row of each node's predecessors (fewer crossings)."""
    nodes = lin["nodes"][:MAX_SVG_NODES]
    pred: dict[str, list[str]] = {}
    for e in lin["edges"]:
        pred.setdefault(e["to"], []).append(e["from"])
    pos: dict[str, tuple[float, float, float]] = {}
    cols: list[tuple[str, float, float]] = []
    x = 10.0
    tallest = 0
    row_of: dict[str, float] = {}
    for st in lin["stages"]:
        members = [n for n in nodes if n["stage"] == st]
        if not members:
            continue
        w = COL_W.get(st, DEFAULT_COL_W)

        def key(item):
            i, n = item
            ps = [row_of[p] for p in pred.get(n["id"], []) if p in row_of]
            return (sum(ps) / len(ps) if ps else float(i), i)

        ordered = [n for _, n in sorted(enumerate(members), key=key)]
        for r, n in enumerate(ordered):
            row_of[n["id"]] = r
            pos[n["id"]] = (x, TOP + r * ROW_H, w)
        cols.append((st, x, w))
        tallest = max(tallest, len(ordered))
        x += w + COL_GAP
    return pos, cols, x - COL_GAP + 10, TOP + tallest * ROW_H + 10


def svg_layout(b: V.LineageBlock) -> dict[str, Any]:
    """Where each node and edge of the lineage is drawn: plain numbers and strings for the template."""
    lin, titles = b.lineage, b.titles
    pos, cols, width, height = _layout(lin)
    edges = []
    for e in lin["edges"]:
        if e["from"] not in pos or e["to"] not in pos:
            continue
        x1, y1, w1 = pos[e["from"]]
        x2, y2, w2 = pos[e["to"]]
        y1 += BOX_H / 2
        y2 += BOX_H / 2
        if abs(x1 - x2) < 1:  # same stage (inherited): an arc on the right
            sx, tx = x1 + w1, x2 + w2
            d = f"M{sx:.1f},{y1:.1f} C{sx + 40:.1f},{y1:.1f} {tx + 40:.1f},{y2:.1f} {tx:.1f},{y2:.1f}"
        else:
            sx, tx = x1 + w1, x2
            mid = (sx + tx) / 2
            d = f"M{sx:.1f},{y1:.1f} C{mid:.1f},{y1:.1f} {mid:.1f},{y2:.1f} {tx:.1f},{y2:.1f}"
        edges.append({"d": d, "source": e["from"], "target": e["to"], "via": e["via"].replace("_", " "),
                      "dashed": e["via"] in ("source", "inherited", "also_in_origins")})
    nodes = []
    for n in lin["nodes"]:
        if n["id"] not in pos:
            continue
        x, y, w = pos[n["id"]]
        label = clean(n["label"]) + (" (inherited)" if n.get("inherited") else "")
        chars = int((w - 10) / 7)
        nodes.append({
            "id": n["id"], "src": n["stage"] == schema.SOURCE,
            "cls": "ln" + (" src" if n["stage"] == schema.SOURCE else "") + (" inh" if n.get("inherited") else ""),
            "title": n["id"] + (f" ({n.get('kind')})" if n.get("kind") else ""),
            "x": f"{x:.0f}", "y": f"{y:.0f}", "w": f"{w:.0f}", "tx": f"{x + 5:.0f}", "ty": f"{y + 15:.0f}",
            "label": label if len(label) <= chars else label[: chars - 1] + "…",
        })
    return {"width": f"{width:.0f}", "height": f"{height:.0f}", "box_h": BOX_H,
            "columns": [{"x": f"{x:.0f}", "title": titles.get(st, st)} for st, x, w in cols],
            "edges": edges, "nodes": nodes, "shown": len(nodes), "total": len(lin["nodes"]),
            "cut": len(lin["nodes"]) > MAX_SVG_NODES}


def _script_data(doc: V.Document) -> dict[str, Any]:
    """What the page's script reads, per graph: each matrix cell's objects, and each lineage node's successors."""
    graphs = []

    def walk(blocks: list[Any], g: dict[str, Any] | None) -> None:
        for b in blocks:
            if isinstance(b, V.Section):
                if "data-graph" in b.attrs:
                    g = {"cells": {}, "succ": {}}
                    graphs.append(g)
                walk(b.blocks, g)
            elif isinstance(b, V.Matrix) and g is not None:
                for key, c in b.cells.items():
                    g["cells"][key] = {**{k: v for k, v in c.items() if k != "sym"},
                                       "label": V.symbol_text(c["sym"], V.GLYPHS)}
            elif isinstance(b, V.LineageBlock) and g is not None:
                # ids cut as the page's data-node attributes are (text.clean)
                g["succ"] = {cut(a): [cut(b) for b in bs] for a, bs in flow_successors(b.lineage).items()}

    walk(doc.blocks, None)
    views = next((b for b in _all_blocks(doc.blocks) if isinstance(b, V.FileViews)), None)
    return {"graphs": graphs, "sources": views.sources if views else [], "code": views.code if views else [],
            "titles": views.titles if views else {}, "stage_order": list(views.titles) if views else []}


def _all_blocks(blocks: list[Any]) -> Any:
    for b in blocks:
        yield b
        if isinstance(b, V.Section):
            yield from _all_blocks(b.blocks)


def _with_meanings(doc: V.Document, symbols: dict[str, Any]) -> None:
    """A cell's tooltip falls back to its state's meaning."""
    def walk(blocks: list[Any]) -> None:
        for b in blocks:
            if isinstance(b, V.Section):
                walk(b.blocks)
            elif isinstance(b, V.Matrix):
                for c in b.cells.values():
                    c.setdefault("meaning", symbols.get(c["state"], {}).get("meaning", ""))
    walk(doc.blocks)


def render_document(doc: V.Document, symbols: dict[str, Any] | None = None) -> str:
    """The page: interactive (matrix cells, highlighting, self-test) for a report, static for a diff."""
    interactive = doc.kind == "report"
    _with_meanings(doc, symbols or {})
    data = _script_data(doc) if interactive else None
    return _env().get_template("page.html.j2").render(doc=doc, interactive=interactive, data=data) + "\n"


def render(model: dict[str, Any]) -> str:
    """The HTML report of a report model, with its source and code views (the files are read now, bounded)."""
    from prov_trace.report import sources

    return render_document(V.report_document(model, texts=sources.load(model)), model["symbols"])
