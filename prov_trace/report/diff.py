"""Compare two report models: what changed between trace A and trace B.

Pure: two models in (``model.build``), one plain-data diff out, and renderers
for it (Markdown, HTML, JSON). Graphs are matched by label (compile id and
graph kind), objects by name within a stage, source lines by file and line.

A *regression* is a field whose population dropped at a stage: a cell that had
populated objects in A and, in B, has a smaller populated fraction, or was not
measured at all (the stage did not fire, or produced no objects).
"""

from __future__ import annotations

from typing import Any

from prov_trace.report.markdown import _table, code, esc

S_NA = "na"


def _frac(cell: dict[str, Any]) -> float | None:
    return cell["n"] / cell["total"] if cell.get("total") else None


def _dropped(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if a["state"] == S_NA or not a.get("n"):
        return False
    fa, fb = _frac(a), _frac(b)
    return fb is None or fb < fa


def _raised(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if b["state"] == S_NA or not b.get("n"):
        return False
    fa, fb = _frac(a), _frac(b)
    return fa is None or fb > fa


def _cell(c: dict[str, Any]) -> dict[str, Any]:
    return {"state": c["state"], "n": c.get("n", 0), "total": c.get("total", 0)}


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    order = list(a["stage_order"]) + [st for st in b["stage_order"] if st not in a["stage_order"]]
    titles = {**a["stage_titles"], **b["stage_titles"]}
    ga = {g["label"]: g for g in a["graphs"]}
    gb = {g["label"]: g for g in b["graphs"]}
    labels = list(ga) + [lbl for lbl in gb if lbl not in ga]
    graphs = []
    regressions = []
    for label in labels:
        x, y = ga.get(label), gb.get(label)
        entry: dict[str, Any] = {"label": label, "in": "both" if x and y else ("a" if x else "b"),
                                 "fields": [], "objects": {}, "edges": {"added": [], "removed": []}, "survival": []}
        graphs.append(entry)
        if not (x and y):
            continue
        rows_b = {(r["layer"], r["field"]): r for r in y["matrix"]}
        for ra in x["matrix"]:
            rb = rows_b.get((ra["layer"], ra["field"]))
            if rb is None:
                continue
            for st in order:
                ca, cb = ra["cells"].get(st), rb["cells"].get(st)
                if ca is None or cb is None or _cell(ca) == _cell(cb):
                    continue
                change = "down" if _dropped(ca, cb) else ("up" if _raised(ca, cb) else "changed")
                row = {"layer": ra["layer"], "field": ra["field"], "stage": st, "a": _cell(ca), "b": _cell(cb), "change": change}
                entry["fields"].append(row)
                if change == "down":
                    regressions.append({"graph": label, **row})
        for st in order:
            sa, sb = x["stages"].get(st), y["stages"].get(st)
            na = [str(o["name"]) for o in (sa or {}).get("objects", [])]
            nb = [str(o["name"]) for o in (sb or {}).get("objects", [])]
            added = [n for n in nb if n not in set(na)]
            removed = [n for n in na if n not in set(nb)]
            if added or removed:
                entry["objects"][st] = {"added": added, "removed": removed, "a": len(na), "b": len(nb)}
        ea = {(e["from"], e["to"]) for e in (x.get("lineage") or {}).get("edges", [])}
        eb = {(e["from"], e["to"]) for e in (y.get("lineage") or {}).get("edges", [])}
        entry["edges"] = {"added": [list(e) for e in sorted(eb - ea)], "removed": [list(e) for e in sorted(ea - eb)]}
        sv_b = {(r["file"], r["line"]): r for r in y["survival"]}
        for ra in x["survival"]:
            rb = sv_b.get((ra["file"], ra["line"]))
            if rb is None:
                continue
            ia, ib = _rank(order, ra["last_stage"]), _rank(order, rb["last_stage"])
            if ia == ib and ra["lost_at"] == rb["lost_at"]:
                continue
            entry["survival"].append({
                "file": ra["file"], "line": ra["line"], "text": ra["text"],
                "a": {"last_stage": ra["last_stage"], "lost_at": ra["lost_at"]},
                "b": {"last_stage": rb["last_stage"], "lost_at": rb["lost_at"]},
                "change": "earlier" if ib < ia else ("later" if ib > ia else "changed"),
            })
    return {
        "a": {"path": a["trace"]["path"], "complete": a["trace"]["complete"], "argv": a["header"].get("argv"),
              "torch": a["header"].get("torch")},
        "b": {"path": b["trace"]["path"], "complete": b["trace"]["complete"], "argv": b["header"].get("argv"),
              "torch": b["header"].get("torch")},
        "stage_order": order,
        "stage_titles": titles,
        "symbols": a["symbols"],
        "graphs": graphs,
        "regressions": regressions,
        "survival_earlier": sum(1 for g in graphs for s in g["survival"] if s["change"] == "earlier"),
    }


def _rank(order: list[str], stage: str | None) -> int:
    """Position of a stage in the pipeline; -1 for 'never attached'."""
    return order.index(stage) if stage in order else -1


def _sym(c: dict[str, Any], symbols: dict[str, Any]) -> str:
    sym = symbols.get(c["state"], {}).get("symbol", c["state"])
    return f"{sym} {c['n']}/{c['total']}" if c["state"] in ("all", "some", "none") else sym


def _arrow(change: str) -> str:
    return {"down": "▼ dropped", "up": "▲ rose", "changed": "changed", "earlier": "▼ earlier",
            "later": "▲ later"}.get(change, change)


def render_markdown(d: dict[str, Any]) -> str:
    titles, sy = d["stage_titles"], d["symbols"]
    t = lambda st: titles.get(st, st) if st else "never attached"  # noqa: E731
    out = ["# Provenance diff", "", *_table(["", ""], [
        ["A", code(d["a"]["path"]) + ("" if d["a"]["complete"] else " (partial)")],
        ["B", code(d["b"]["path"]) + ("" if d["b"]["complete"] else " (partial)")],
    ]), ""]
    n_fields = sum(len(g["fields"]) for g in d["graphs"])
    out += [f"{len(d['regressions'])} field population drop(s), {n_fields} population change(s), "
            f"{d['survival_earlier']} source line(s) whose provenance now ends at an earlier stage.", ""]
    for g in d["graphs"]:
        out += [f"## Graph {esc(g['label'])}", ""]
        if g["in"] != "both":
            out += [f"Only in {g['in'].upper()}.", ""]
            continue
        out += ["### Field population", ""]
        if g["fields"]:
            out += _table(["Layer", "Field", "Stage", "A", "B", "Change"], [
                [esc(r["layer"]), code(r["field"]), esc(t(r["stage"])), _sym(r["a"], sy), _sym(r["b"], sy), _arrow(r["change"])]
                for r in g["fields"]])
        else:
            out += ["No change."]
        out += ["", "### Objects added and removed", ""]
        if g["objects"]:
            out += _table(["Stage", "A", "B", "Added", "Removed"], [
                [esc(t(st)), str(o["a"]), str(o["b"]), ", ".join(code(n) for n in o["added"][:50]),
                 ", ".join(code(n) for n in o["removed"][:50])] for st, o in g["objects"].items()])
        else:
            out += ["No change."]
        if g["edges"]["added"] or g["edges"]["removed"]:
            out += ["", f"Lineage edges: {len(g['edges']['added'])} added, {len(g['edges']['removed'])} removed.", ""]
            out += _table(["Change", "From", "To"], [["added", code(a), code(b)] for a, b in g["edges"]["added"][:100]]
                          + [["removed", code(a), code(b)] for a, b in g["edges"]["removed"][:100]])
        out += ["", "### Source lines whose survival moved", ""]
        if g["survival"]:
            out += _table(["Line", "Source", "A: last attached", "B: last attached", "A: first lost", "B: first lost", "Change"], [
                [code(f"{_base(s['file'])}:{s['line']}"), code(s["text"]), esc(t(s["a"]["last_stage"])), esc(t(s["b"]["last_stage"])),
                 esc(t(s["a"]["lost_at"]) if s["a"]["lost_at"] else "survives"),
                 esc(t(s["b"]["lost_at"]) if s["b"]["lost_at"] else "survives"), _arrow(s["change"])]
                for s in g["survival"]])
        else:
            out += ["No change."]
        out += [""]
    return "\n".join(out) + "\n"


def _base(path: Any) -> str:
    return str(path or "").replace("\\", "/").rsplit("/", 1)[-1]


def render_html(d: dict[str, Any]) -> str:
    """The same tables as the Markdown, as one self-contained page (no script, no network)."""
    from prov_trace.report.html import CSS, h

    md_rows: list[str] = []
    titles, sy = d["stage_titles"], d["symbols"]
    t = lambda st: titles.get(st, st) if st else "never attached"  # noqa: E731

    def table(headers: list[str], rows: list[list[str]]) -> None:
        md_rows.append("<table><thead><tr>" + "".join(f"<th>{x}</th>" for x in headers) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows) + "</tbody></table>")

    md_rows.append(f"<p>A: <code>{h(d['a']['path'])}</code><br>B: <code>{h(d['b']['path'])}</code></p>")
    md_rows.append(f"<p>{len(d['regressions'])} field population drop(s); {d['survival_earlier']} source line(s) "
                   "whose provenance now ends at an earlier stage.</p>")
    for g in d["graphs"]:
        md_rows.append(f"<h2>Graph {h(g['label'])}</h2>")
        if g["in"] != "both":
            md_rows.append(f"<p>Only in {h(g['in'].upper())}.</p>")
            continue
        md_rows.append("<h3>Field population</h3>")
        table(["Layer", "Field", "Stage", "A", "B", "Change"], [
            [h(r["layer"]), f"<code>{h(r['field'])}</code>", h(t(r["stage"])), h(_sym(r["a"], sy)), h(_sym(r["b"], sy)),
             f'<span class="{"st-none" if r["change"] == "down" else "st-all" if r["change"] == "up" else ""}">{h(_arrow(r["change"]))}</span>']
            for r in g["fields"]])
        md_rows.append("<h3>Objects added and removed</h3>")
        table(["Stage", "A", "B", "Added", "Removed"], [
            [h(t(st)), h(o["a"]), h(o["b"]), ", ".join(f"<code>{h(n)}</code>" for n in o["added"][:200]),
             ", ".join(f"<code>{h(n)}</code>" for n in o["removed"][:200])] for st, o in g["objects"].items()])
        md_rows.append("<h3>Source lines whose survival moved</h3>")
        table(["Line", "Source", "A: last attached", "B: last attached", "Change"], [
            [f"<code>{h(_base(s['file']))}:{h(s['line'])}</code>", f"<code>{h(s['text'])}</code>",
             h(t(s["a"]["last_stage"])), h(t(s["b"]["last_stage"])), h(_arrow(s["change"]))] for s in g["survival"]])
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
            f"<title>Provenance diff</title><style>{CSS}</style></head><body><h1>Provenance diff</h1>\n"
            + "\n".join(md_rows) + "\n</body></html>\n")


def render_json(d: dict[str, Any]) -> str:
    from prov_trace.report.jsonout import render

    return render(d, kind="diff")

