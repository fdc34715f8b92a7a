"""HTML renderer: one self-contained file from the report model.

No network: all CSS and JS are inline, the lineage is inline SVG laid out here,
and a Content-Security-Policy forbids fetching anything, so the file opens the
same from disk on an air-gapped machine. Every string that came from the trace
goes through ``h`` (HTML text and attributes) or ``_json`` (the data island), so
a source line holding ``<script>`` shows as text.

Opening the file with ``#selftest`` at the end of its URL runs a check on load:
it counts the drawn grid cells, lineage nodes and edges, clicks the first source
line, counts what is highlighted, and writes the result as JSON into
``<pre id="selftest-result">`` (the tests read it with ``chromium --dump-dom``).
"""

from __future__ import annotations

import html as _html
import json
from typing import Any

from prov_trace import schema
from prov_trace.report.markdown import _ended, _short, clean

#: Lineage nodes drawn per graph; the rest are listed in the JSON output.
MAX_SVG_NODES = 1500
COL_W = {schema.SOURCE: 240, schema.KERNEL_SPEC: 170, schema.ARTIFACT: 170}
DEFAULT_COL_W = 130
COL_GAP = 44
ROW_H = 30
BOX_H = 22
TOP = 34


def h(text: Any) -> str:
    """Safe as HTML text and inside a quoted attribute."""
    return _html.escape(clean(text), quote=True)


def _json(data: Any) -> str:
    """JSON that cannot end the <script> element it sits in, nor open a comment."""
    s = json.dumps(data, ensure_ascii=True, separators=(",", ":"), default=str)
    return s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


#: Text glyphs in place of the Markdown report's emoji: an air-gapped machine may have no emoji font.
GLYPHS = {"all": "✓", "some": "◐", "none": "✗", "na": "–", "empty": "∅", "unobserved": "⚠"}


def _sym(cell: dict[str, Any], symbols: dict[str, Any]) -> str:
    sym = GLYPHS.get(cell["state"]) or symbols[cell["state"]]["symbol"]
    if cell["state"] in ("all", "some", "none"):
        return f"{sym} {cell['n']}/{cell['total']}"
    return sym


CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 24px;color:#1b1b1b;background:#fff}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}h3{font-size:16px}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #d0d0d0;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f4f4f4}code,.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
.banner{background:#fff3cd;border:1px solid #e0c060;padding:8px 12px}
.matrix td.cell{cursor:pointer;text-align:center;min-width:92px;white-space:nowrap}
.st-all{background:#b9e4bd}.st-some{background:#ffe1a8}.st-none{background:#f7b9b9}.st-na{background:#eeeeee;color:#888}
.st-empty{background:#f8f8f8;color:#888}.st-unobserved{background:#fff3cd;color:#8a6d00}
.matrix td.cell.sel{outline:3px solid #1f5fbf;outline-offset:-3px}
.legend span{display:inline-block;padding:1px 8px;margin:2px 6px 2px 0;border:1px solid #ccc}
.cellinfo{border:1px solid #bbb;background:#fafafa;padding:6px 10px;margin:6px 0;min-height:1.4em;max-height:260px;overflow:auto}
.cellinfo ul{margin:2px 0 6px 18px;padding:0}
tr.srcline{cursor:pointer}tr.srcline:hover{background:#eef4ff}
tr.hl,tr.srcline.hl{background:#fff59d}
svg.lineage{border:1px solid #ddd;background:#fcfcfc;max-width:none}
svg .ln rect{fill:#fff;stroke:#777;stroke-width:1}svg .ln text{font:11.5px ui-monospace,Menlo,Consolas,monospace;fill:#111}
svg .ln.src rect{fill:#eef4ff;cursor:pointer}svg .ln.inh rect{stroke-dasharray:4 3}
svg .le{fill:none;stroke:#9a9a9a;stroke-width:1.2}svg .le.dash{stroke-dasharray:5 4}
svg .stage-title{font:bold 12px system-ui,sans-serif;fill:#333}
svg .ln.hl rect{fill:#fff59d;stroke:#c77800;stroke-width:2}svg .le.hl{stroke:#e08a00;stroke-width:2.4}
svg.dim .ln:not(.hl){opacity:.35}svg.dim .le:not(.hl){opacity:.2}
details{margin:6px 0}summary{cursor:pointer;font-weight:600}
.muted{color:#777}
body.selftest .intro{display:none}
"""

JS = r"""
(function(){
  var DATA = JSON.parse(document.getElementById('prov-data').textContent);
  function each(list, f){ Array.prototype.forEach.call(list, f); }
  function reach(g, start){
    var succ = DATA.graphs[g].succ, seen = {}, out = [], q = [start]; seen[start] = 1;
    while (q.length){ var n = q.shift(); out.push(n); (succ[n] || []).forEach(function(m){ if(!seen[m]){ seen[m]=1; q.push(m);} }); }
    return out;
  }
  function clearHl(sec){ each(sec.querySelectorAll('.hl'), function(e){ e.classList.remove('hl'); });
    var svg = sec.querySelector('svg.lineage'); if (svg) svg.classList.remove('dim'); }
  function highlight(sec, g, start){
    clearHl(sec);
    var set = {}; reach(g, start).forEach(function(n){ set[n] = 1; });
    each(sec.querySelectorAll('[data-node]'), function(e){ if (set[e.getAttribute('data-node')]) e.classList.add('hl'); });
    each(sec.querySelectorAll('svg .le'), function(e){
      if (set[e.getAttribute('data-from')] && set[e.getAttribute('data-to')]) e.classList.add('hl'); });
    var svg = sec.querySelector('svg.lineage'); if (svg) svg.classList.add('dim');
    var info = sec.querySelector('.hlinfo');
    if (info) info.textContent = Object.keys(set).length + ' objects downstream of ' + start + ' (highlighted).';
    return Object.keys(set).length;
  }
  function showCell(td){
    var sec = td.closest('section.graph'), g = +sec.getAttribute('data-graph');
    var c = DATA.graphs[g].cells[td.getAttribute('data-cell')], box = sec.querySelector('.cellinfo');
    each(sec.querySelectorAll('td.cell.sel'), function(e){ e.classList.remove('sel'); });
    td.classList.add('sel');
    box.textContent = '';
    var head = document.createElement('div');
    head.textContent = c.field + ' at ' + c.stage + ': ' + c.label;
    box.appendChild(head);
    [['populated', c.populated, c.n], ['not populated', c.missing, c.total - c.n]].forEach(function(p){
      if (!c.total) return;
      var d = document.createElement('div'); d.textContent = p[0] + ' (' + p[2] + '):'; box.appendChild(d);
      var ul = document.createElement('ul');
      p[1].forEach(function(name){ var li = document.createElement('li'); li.className = 'mono'; li.textContent = name; ul.appendChild(li); });
      if (p[1].length < p[2]) { var li = document.createElement('li'); li.textContent = '… ' + (p[2] - p[1].length) + ' more'; ul.appendChild(li); }
      box.appendChild(ul);
    });
    return c;
  }
  each(document.querySelectorAll('td.cell'), function(td){
    td.addEventListener('click', function(){ showCell(td); });
    td.addEventListener('mouseenter', function(){ showCell(td); });
  });
  each(document.querySelectorAll('[data-src]'), function(el){
    el.addEventListener('click', function(){
      var sec = el.closest('section.graph'); highlight(sec, +sec.getAttribute('data-graph'), el.getAttribute('data-src'));
    });
  });
  if (location.hash === '#selftest') {
    var res = {graphs: [], injected: !!window.__provtrace_injected, scripts: document.scripts.length};
    each(document.querySelectorAll('section.graph'), function(sec){
      var svg = sec.querySelector('svg.lineage'), grid = sec.querySelector('table.matrix');
      var r = {label: sec.getAttribute('data-label'),
               grid_cells: sec.querySelectorAll('table.matrix td.cell').length,
               grid_colored: 0, grid_height: grid ? grid.getBoundingClientRect().height : 0,
               svg_nodes: svg ? svg.querySelectorAll('.ln').length : 0,
               svg_edges: svg ? svg.querySelectorAll('.le').length : 0,
               svg_width: svg ? svg.getBoundingClientRect().width : 0,
               svg_drawn_nodes: 0};
      each(sec.querySelectorAll('table.matrix td.cell'), function(td){
        var bg = getComputedStyle(td).backgroundColor; if (bg && bg !== 'rgba(0, 0, 0, 0)' && bg !== 'transparent') r.grid_colored++; });
      if (svg) each(svg.querySelectorAll('.ln rect'), function(rc){ var b = rc.getBBox(); if (b.width > 0 && b.height > 0) r.svg_drawn_nodes++; });
      var cell = sec.querySelector('td.cell.st-some') || sec.querySelector('td.cell.st-all');
      if (cell) { var c = showCell(cell); r.cell = {field: c.field, stage: c.stage, label: c.label,
        listed: sec.querySelectorAll('.cellinfo li').length, text: sec.querySelector('.cellinfo').textContent}; }
      var rows = sec.querySelectorAll('tr.srcline'), clicked = null;
      for (var i = 0; i < rows.length; i++) { var id = rows[i].getAttribute('data-src');
        if ((DATA.graphs[+sec.getAttribute('data-graph')].succ[id] || []).length) { clicked = rows[i]; break; } }
      if (clicked) {
        clicked.dispatchEvent(new MouseEvent('click', {bubbles: true}));
        r.clicked = clicked.getAttribute('data-src');
        r.highlighted_nodes = Array.prototype.map.call(svg.querySelectorAll('.ln.hl'), function(e){ return e.getAttribute('data-node'); });
        r.highlighted_edges = svg.querySelectorAll('.le.hl').length;
        r.highlighted_rows = sec.querySelectorAll('tr.hl').length;
      }
      res.graphs.push(r);
    });
    var pre = document.getElementById('selftest-result'); pre.textContent = JSON.stringify(res); pre.hidden = false;
    document.body.classList.add('selftest');
  }
})();
"""


def render(model: dict[str, Any], max_rows: int = 2000) -> str:
    titles = model["stage_titles"]
    order = model["stage_order"]
    symbols = model["symbols"]
    hd = model["header"]
    tr = model["trace"]
    out: list[str] = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        # Nothing may be fetched: the file is complete as it is.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Provenance audit: {h(hd.get('target') or tr.get('path'))}</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>Source-to-kernel provenance audit</h1>",
    ]
    if not tr["complete"]:
        out.append(f'<p class="banner"><b>Partial trace.</b> {h(tr["problem"] or "the stream has no end record")}. '
                   "Everything below is what was recorded before that point.</p>")
    out.append('<div class="intro">')
    out.append("<p>Measurement only: every count below is computed from one traced run; nothing is hand-written.</p>")
    out.append(_kv([
        ("Run", f"<code>{h(' '.join(hd.get('argv') or []))}</code>"),
        ("Python / torch", f"{h(hd.get('python'))} / {h(hd.get('torch'))}"),
        ("Platform", h(hd.get("platform"))),
        ("Profile", f"<code>{h(hd.get('profile'))}</code>"),
        ("Backend", f"<code>{h(hd.get('backend'))}</code>: {h(hd.get('backend_reason'))}"),
        ("Trace", f"<code>{h(tr['path'])}</code>, {int(tr['bytes'] or 0)} bytes, {int(tr['records'] or 0)} records"),
        ("Ended", h(_ended(tr))),
    ]))
    out.append("<h2>Counts</h2>")
    rows = [[h(g["label"])] + [str(len(g["stages"][st]["objects"])) if g["stages"][st]["observed"] else "⚠" for st in order]
            for g in model["graphs"]]
    out.append(_table(["Graph"] + [h(titles[st]) for st in order], rows))
    if model.get("frames_without_graph"):
        out.append("<p>Frames Dynamo compiled that produced no graph: " + ", ".join(
            f"{h(f['compile_id'])} <code>{h(f.get('qualname'))}</code> (<code>{h(f.get('file'))}:{h(f.get('line'))}</code>)"
            for f in model["frames_without_graph"]) + ".</p>")
    if model.get("cuts"):
        out.append("<p><strong>Snapshots cut by a bound</strong> (docs/trace-format.md, Bounds): the counts and tables "
                   "cover the objects that were recorded. " + "; ".join(
                       f"{h(c['compile_id'])} {h(c['graph'] or '')} {h(titles.get(c['stage'], c['stage']))}: "
                       f"{int(c['cut'])} of {h(c['total'] if c['total'] is not None else '?')} not recorded "
                       f"({h(c['reason'] or 'no reason given')})" for c in model["cuts"]) + ".</p>")
    out.append('<h2>Legend</h2><p class="legend">' + "".join(
        f'<span class="st-{h(k)}">{h(GLYPHS.get(k) or v["symbol"])} {h(v["meaning"])}</span><br>' for k, v in symbols.items()) + "</p>" + "</div>")

    data: dict[str, Any] = {"graphs": []}
    for gi, g in enumerate(model["graphs"]):
        gdata: dict[str, Any] = {"cells": {}, "succ": {}}
        for e in (g.get("lineage") or {}).get("edges", []):
            gdata["succ"].setdefault(e["from"], []).append(e["to"])
        data["graphs"].append(gdata)
        out.append(f'<section class="graph" data-graph="{gi}" data-label="{h(g["label"])}">')
        out.append(f"<h2>Graph {h(g['label'])}</h2>")
        out += _matrix(g, gi, gdata, order, titles, symbols)
        out += _survival(g, order, titles)
        out += _lineage(g, titles)
        out.append("<h3>Per-stage detail</h3>")
        for st in order:
            out += _stage_detail(g, st, titles, max_rows)
        out.append("</section>")

    out.append("<h2>Hooks</h2>")
    out.append(_table(["Target", "Stage", "Event", "Resolved", "Installed", "Fired", "Errors", "Notes"], [
        [f"<code>{h(hk.get('target'))}</code>", h(titles.get(hk.get("stage"), hk.get("stage"))), h(hk.get("event")),
         "✓" if hk.get("resolved") else "✗", "✓" if hk.get("installed") else "✗",
         h(hk.get("fired", 0)), h(hk.get("errors", 0)), h(hk.get("reason") or "; ".join(map(str, hk.get("notes") or [])) or "")]
        for hk in model["hooks"]]))
    if model["errors"]:
        out.append("<h2>Probe errors</h2>")
        out.append(_table(["Stage", "Target", "Phase", "Error"], [
            [h(e["stage"]), f"<code>{h(e['target'])}</code>", h(e["phase"]), h(f"{e['type']}: {e['message']}")]
            for e in model["errors"][:200]]))
    out.append('<pre id="selftest-result" hidden></pre>')
    out.append(f'<script type="application/json" id="prov-data">{_json(data)}</script>')
    out.append(f"<script>{JS}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _kv(rows: list[tuple[str, str]]) -> str:
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _table(headers: list[str], rows: list[list[str]], row_attrs: list[str] | None = None) -> str:
    out = ["<table><thead><tr>" + "".join(f"<th>{x}</th>" for x in headers) + "</tr></thead><tbody>"]
    for i, r in enumerate(rows):
        attrs = (" " + row_attrs[i]) if row_attrs and row_attrs[i] else ""
        out.append(f"<tr{attrs}>" + "".join(f"<td>{x}</td>" for x in r) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _matrix(g, gi, gdata, order, titles, symbols) -> list[str]:
    out = ["<h3>Stage × Field matrix</h3>",
           "<p>Hover or click a cell to list the objects behind its n/N.</p>",
           '<table class="matrix"><thead><tr><th>Layer</th><th>Field</th>'
           + "".join(f"<th>{h(titles[st])}</th>" for st in order) + "</tr></thead><tbody>"]
    for ri, r in enumerate(g["matrix"]):
        tds = []
        for st in order:
            c = r["cells"][st]
            key = f"{ri}:{st}"
            populated = [str(x) for x in c.get("objects", [])]
            pset = set(populated)
            stage = g["stages"].get(st) or {}
            missing = [str(o["name"]) for o in stage.get("objects", []) if str(o["name"]) not in pset][:200] if c["state"] in ("some", "none") else []
            gdata["cells"][key] = {"field": r["field"], "stage": titles[st], "label": _sym(c, symbols), "state": c["state"],
                                   "n": c["n"], "total": c["total"], "populated": populated, "missing": missing}
            tip = symbols[c["state"]]["meaning"]
            if populated or missing:
                tip = "populated: " + (", ".join(populated[:30]) or "none") + ("; not: " + ", ".join(missing[:30]) if missing else "")
            tds.append(f'<td class="cell st-{h(c["state"])}" data-cell="{h(key)}" tabindex="0" title="{h(tip)}">{h(_sym(c, symbols))}</td>')
        out.append(f"<tr><td>{h(r['layer'])}</td><td><code>{h(r['field'])}</code></td>{''.join(tds)}</tr>")
    out.append("</tbody></table>")
    out.append('<div class="cellinfo" aria-live="polite"><span class="muted">No cell selected.</span></div>')
    return out


def _src_id(s: dict[str, Any]) -> str:
    return f"{schema.SOURCE}:{s.get('file')}:{s.get('line')}"


def _survival(g, order, titles) -> list[str]:
    out = ["<h3>Provenance survival per source line</h3>",
           "<p>Click a line to highlight everything it flows into, in the lineage graph and the per-stage tables.</p>"]
    stages = [st for st in order if st != schema.SOURCE]
    rows, attrs = [], []
    for s in g["survival"]:
        rows.append([
            f"<code>{h(_short(s.get('file')))}:{h(s.get('line'))}</code>", f"<code>{h(s.get('text'))}</code>",
            *[("⚠" if s["counts"].get(st) is None else h(s["counts"][st])) for st in stages],
            h(titles.get(s["last_stage"], "—")) if s["last_stage"] else "never attached",
            h(titles.get(s["lost_at"], "")) if s["lost_at"] else "survives",
            ", ".join(f"<code>{h(n)}</code>" for n in s["lost_by"]),
        ])
        sid = _src_id(s)
        attrs.append(f'class="srcline" data-src="{h(sid)}" data-node="{h(sid)}" tabindex="0"')
    out.append(_table(["Line", "Source"] + [h(titles[st]) for st in stages] + ["Last attached", "First lost", "Lost by"],
                      rows, attrs))
    out.append('<p class="hlinfo muted"></p>')
    return out


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


def _lineage(g, titles) -> list[str]:
    lin = g.get("lineage")
    out = ["<h3>Lineage</h3>"]
    if not lin or not lin["nodes"]:
        return out + ["<p>∅ nothing to draw.</p>"]
    out.append("<p>Each object linked to the objects it came from: source line → FX nodes carrying it, "
               "<code>from_node</code>, <code>origins</code>, the same buffer across the passes, kernel membership, "
               "the same kernel in the emitted file. Dashed: a source-line link or an inherited one (an op with no "
               "source of its own, linked to its source-bearing producers by its inputs). Click a source line (left "
               "column) to highlight everything it flows into.</p>")
    pos, cols, width, height = _layout(lin)
    svg = [f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="lineage graph">']
    for st, x, w in cols:
        svg.append(f'<text class="stage-title" x="{x:.0f}" y="18">{h(titles.get(st, st))}</text>')
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
        dash = " dash" if e["via"] in ("source", "inherited") else ""
        svg.append(f'<path class="le{dash}" d="{d}" data-from="{h(e["from"])}" data-to="{h(e["to"])}">'
                   f'<title>{h(e["via"])}</title></path>')
    for n in lin["nodes"]:
        if n["id"] not in pos:
            continue
        x, y, w = pos[n["id"]]
        cls = "ln" + (" src" if n["stage"] == schema.SOURCE else "") + (" inh" if n.get("inherited") else "")
        label = n["label"] + (" (inherited)" if n.get("inherited") else "")
        chars = int((w - 10) / 7)
        shown = label if len(label) <= chars else label[: chars - 1] + "…"
        src_attr = f' data-src="{h(n["id"])}"' if n["stage"] == schema.SOURCE else ""
        svg.append(f'<g class="{cls}" data-node="{h(n["id"])}"{src_attr}><title>{h(n["id"])}'
                   f'{h(" (" + str(n.get("kind")) + ")") if n.get("kind") else ""}</title>'
                   f'<rect x="{x:.0f}" y="{y:.0f}" width="{w:.0f}" height="{BOX_H}" rx="4"></rect>'
                   f'<text x="{x + 5:.0f}" y="{y + 15:.0f}">{h(shown)}</text></g>')
    svg.append("</svg>")
    out.append('<div style="overflow:auto">' + "".join(svg) + "</div>")
    if len(lin["nodes"]) > MAX_SVG_NODES:
        out.append(f"<p>Only the first {MAX_SVG_NODES} of {len(lin['nodes'])} nodes are drawn; all are in the JSON output.</p>")
    name = {n["id"]: n for n in lin["nodes"]}

    def nm(nid: str) -> str:
        n = name[nid]
        return f"<code>{h(n['name'])}</code> ({h(titles.get(n['stage'], n['stage']))})"

    rows = [["decomposition", nm(d["from"]), ", ".join(nm(t) for t in d["to"])] for d in lin["decompositions"]]
    rows += [["fusion", ", ".join(nm(f) for f in d["from"]), nm(d["to"])] for d in lin["fusions"]]
    rows += [["inherited", ", ".join(nm(f) for f in n["inherits_from"]), nm(n["id"])] for n in lin["nodes"] if n.get("inherited")]
    if rows:
        out.append(_table(["Change", "From", "To"], rows))
    return out


def _field_cell(f: dict[str, Any] | None) -> str:
    if not f or not f.get("has"):
        return "–"
    if f.get("populated"):
        return f"<code>{h((f.get('type') or '?').rsplit('.', 1)[-1])}</code>"
    return "✗"


def _loc(s: dict[str, Any] | None) -> str:
    return f"<code>{h(_short(s.get('file')))}:{h(s.get('line'))}</code>" if s else "✗"


def _stage_detail(g, st, titles, max_rows) -> list[str]:
    data = g["stages"][st]
    count = len(data["objects"]) if data["observed"] else 0
    out = [f"<details><summary>{h(titles.get(st, st))} ({count if data['observed'] else 'not observed'})</summary>"]
    if not data["observed"]:
        return out + ["<p>⚠ not observed.</p></details>"]
    objs = data["objects"]
    if not objs:
        return out + ["<p>∅ no objects.</p></details>"]
    shown = objs[:max_rows]
    attrs = [f'data-node="{h(str(st) + ":" + str(o["name"]))}"' for o in shown]
    if st == schema.SOURCE:
        rows = [[_loc(o["sources"][0]), f"<code>{h(o['kind'])}</code>", f"<code>{h(o.get('text'))}</code>"] for o in shown]
        attrs = [f'data-node="{h(_src_id(o["sources"][0]))}"' for o in shown]
        out.append(_table(["Line", "Function", "Source"], rows, attrs))
    elif st == schema.ARTIFACT:
        rows = [[f"<code>{h(o['name'])}</code>", h(o["kind"]), h(o.get("def_line") or ""),
                 h(", ".join(map(str, o.get("call_lines") or []))),
                 "<br>".join(f"<code>{h(c)}</code>" for c in o["provenance_comments"]) or "✗"] for o in shown]
        out.append(_table(["Kernel", "Kind", "Def line", "Call lines", "Provenance comments"], rows, attrs))
    else:
        fields = list(shown[0]["fields"].keys())
        extra = st == schema.KERNEL_SPEC
        rows = [[f"<code>{h(o['name'])}</code>", f"<code>{h(o.get('kind'))}</code>"]
                + [_field_cell(o["fields"].get(f)) for f in fields]
                + ([", ".join(f"<code>{h(x)}</code>" for x in o.get("ops", [])),
                    ", ".join(f"<code>{h(x)}</code>" for x in o.get("origins", [])) or "✗"] if extra else [])
                + [", ".join(_loc(s) for s in o["sources"][:3]) or "✗"] for o in shown]
        out.append(_table(["Name", "Kind"] + [f"<code>{h(f)}</code>" for f in fields]
                          + (["IR ops", "Origins"] if extra else []) + ["Source line"], rows, attrs))
    if len(objs) > max_rows:
        out.append(f"<p>… {len(objs) - max_rows} more rows not shown (all are in the JSON output).</p>")
    return out + ["</details>"]
