"""Compare two report models: what changed between trace A and trace B.

Pure: two models in (``model.build``), one plain-data diff out; ``render`` draws
it through the view layer (``views.diff_document``) as Markdown, HTML or JSON. Graphs are matched by label (compile id and
graph kind), objects by name within a stage, source lines by file and line, graph breaks by the line they broke at.

A *regression* is a graph of A that B does not have (B compiled less, or
nothing), a field whose population dropped at a stage: a cell that had
populated objects in A and, in B, has a smaller populated fraction, or was not
measured at all (the stage did not fire, or produced no objects); or a node a
pass gives another line in B and not in A (the report's "Where provenance moves
to another line").
"""

from __future__ import annotations

import os
from typing import Any, Callable

from prov_trace.report import html, jsonout, markdown, views
from prov_trace.report.text import break_sites
from prov_trace.stream import schema as S

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


def _source_files(m: dict[str, Any]) -> set[str]:
    return {r["file"] for g in m["graphs"] for r in g["survival"] if isinstance(r.get("file"), str)}


def _parts(path: str) -> list[str]:
    return [p for p in path.replace("\\", "/").split("/") if p]


def _shared_tail(a: list[str], b: list[str]) -> int:
    """How many trailing path parts two paths share (``models/a/model.py`` and ``x/models/a/model.py``: 3)."""
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _pair_files(files_a: set[str], files_b: set[str]) -> dict[str, str]:
    """B's path -> A's, for a source file the traces name at different paths (another checkout, another
    machine, another virtual environment): of the files only one side names, each is paired with the file of
    the other side whose path ends the same way for the most parts, when that file is the only one that close
    and it is its best match too. Two `model.py` files, `a/model.py` and `b/model.py`, pair each with its own."""
    only_a, only_b = sorted(files_a - files_b), sorted(files_b - files_a)
    parts = {f: _parts(f) for f in (*only_a, *only_b)}

    def best(f: str, others: list[str]) -> str | None:
        scores = [(_shared_tail(parts[f], parts[o]), o) for o in others]
        top = max((n for n, _ in scores), default=0)
        hits = [o for n, o in scores if n == top]
        return hits[0] if top >= 1 and len(hits) == 1 else None

    by_name: dict[str, list[str]] = {}  # only files of one name can pair: compare within a name
    for f in only_a:
        by_name.setdefault(parts[f][-1] if parts[f] else f, []).append(f)
    pairs = {}
    for b in only_b:
        cands = by_name.get(parts[b][-1] if parts[b] else b, [])
        a = best(b, cands)
        if a is not None and best(a, [o for o in only_b if parts[o][-1:] == parts[a][-1:]]) == b:
            pairs[b] = a
    return pairs


Line = tuple[Any, Any]


def _line_texts(m: dict[str, Any]) -> dict[Line, Any]:
    return {(r["file"], r["line"]): r.get("text") for g in m["graphs"] for r in g["survival"]}


def _line_map(ta: dict[Line, Any], tb: dict[Line, Any], pairs: dict[str, str]) -> dict[Line, Line]:
    """B's source line -> the same line in A: the same number with the same text, else the one line of that
    text in the file on both sides (an edit above it moved it). A line of B with neither is in no map."""

    def unique(texts: dict[Line, Any]) -> dict[tuple[Any, Any], Any]:
        seen: dict[tuple[Any, Any], Any] = {}
        for (f, ln), text in texts.items():
            key = (f, text)
            seen[key] = None if key in seen else ln
        return seen

    ua, ub = unique(ta), unique(tb)
    out: dict[Line, Line] = {}
    for (fb, lb), text in tb.items():
        fa = pairs.get(fb, fb)
        if (fa, lb) in ta and ta[(fa, lb)] == text:
            out[(fb, lb)] = (fa, lb)
        elif text and ub.get((fb, text)) is not None and ua.get((fa, text)) is not None:
            out[(fb, lb)] = (fa, ua[(fa, text)])
    return out


def _renamer(lines: dict[Line, Line], taken: set[Line]) -> Callable[[str], str]:
    """Rename a source line's name (`file:line`) or lineage id (`source:file:line`) to A's name of that line.
    A line of B that is no line of A but has the name of one (`taken`: an edit changed its text) is marked
    `(B)`, so that the two read as one removed and one added, not as the same line."""
    def rename(name: str) -> str:
        prefix = "source:" if name.startswith("source:") else ""
        path, sep, line = name[len(prefix):].rpartition(":")
        key = (path, int(line)) if sep and line.isdigit() else None
        to = lines.get(key) if key else None
        if to:
            return f"{prefix}{to[0]}:{to[1]}"
        return f"{name} (B)" if key in taken else name
    return rename


def diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    order = list(a["stage_order"]) + [st for st in b["stage_order"] if st not in a["stage_order"]]
    pairs = _pair_files(_source_files(a), _source_files(b))
    ta, tb = _line_texts(a), _line_texts(b)
    lines = _line_map(ta, tb, pairs)
    rename = _renamer(lines, {k for k in tb if k not in lines and (pairs.get(k[0], k[0]), k[1]) in ta})
    moved = sum(1 for fb_lb, fa_la in lines.items() if fb_lb[1] != fa_la[1])
    titles = {**a["stage_titles"], **b["stage_titles"]}
    ga = {g["label"]: g for g in a["graphs"]}
    gb = {g["label"]: g for g in b["graphs"]}
    labels = list(ga) + [lbl for lbl in gb if lbl not in ga]
    graphs = []
    regressions = []
    for label in labels:
        x, y = ga.get(label), gb.get(label)
        entry: dict[str, Any] = {"label": label, "in": "both" if x and y else ("a" if x else "b"),
                                 "fields": [], "objects": {}, "edges": {"added": [], "removed": []}, "survival": [],
                                 "moved": {"added": [], "removed": []}}
        graphs.append(entry)
        if x and not y:
            # B compiled less: every field A measured in that graph is gone with it.
            regressions.append({"graph": label, "kind": "graph", "layer": None, "field": None, "stage": None,
                                "change": "lost"})
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
                if ca["state"] == cb["state"] == "na":  # ➖ on both sides: nothing measured to compare
                    continue
                change = "down" if _dropped(ca, cb) else ("up" if _raised(ca, cb) else "changed")
                row = {"layer": ra["layer"], "field": ra["field"], "stage": st, "a": _cell(ca), "b": _cell(cb), "change": change}
                entry["fields"].append(row)
                if change == "down":
                    regressions.append({"graph": label, "kind": "field", **row})
        for st in order:
            sa, sb = x["stages"].get(st), y["stages"].get(st)
            na = [str(o["name"]) for o in (sa or {}).get("objects", [])]
            nb = [rename(str(o["name"])) if st == S.SOURCE else str(o["name"]) for o in (sb or {}).get("objects", [])]
            set_a, set_b = set(na), set(nb)  # once per stage: a set per element would be quadratic
            added = [n for n in nb if n not in set_a]
            removed = [n for n in na if n not in set_b]
            if added or removed:
                entry["objects"][st] = {"added": added, "removed": removed, "a": len(na), "b": len(nb)}
        # Nodes a pass gave another line, by node, op and stages: new in B is a regression, gone in B a fix.
        ma, mb = {_moved_key(m): m for m in x.get("moved") or []}, {_moved_key(m): m for m in y.get("moved") or []}
        entry["moved"] = {"added": [m for k, m in mb.items() if k not in ma],
                          "removed": [m for k, m in ma.items() if k not in mb]}
        regressions += [{"graph": label, "kind": "moved", "layer": None, "field": None, "stage": m["to"],
                         "change": "moved", "node": m["name"], "target": m.get("target")}
                        for m in entry["moved"]["added"]]
        ea = {(e["from"], e["to"]) for e in (x.get("lineage") or {}).get("edges", [])}
        eb = {(rename(e["from"]), e["to"]) for e in (y.get("lineage") or {}).get("edges", [])}
        entry["edges"] = {"added": [list(e) for e in sorted(eb - ea)], "removed": [list(e) for e in sorted(ea - eb)]}
        sv_b = {lines[(r["file"], r["line"])]: r for r in y["survival"] if (r["file"], r["line"]) in lines}
        entry["survival_compared"] = 0
        for ra in x["survival"]:
            rb = sv_b.get((ra["file"], ra["line"]))
            if rb is None:
                continue
            entry["survival_compared"] += 1
            ia, ib = _rank(order, ra["last_stage"]), _rank(order, rb["last_stage"])
            if ia == ib and ra["lost_at"] == rb["lost_at"]:
                continue
            entry["survival"].append({
                "file": ra["file"], "line": ra["line"], "text": ra["text"],
                **({"line_b": rb["line"]} if rb["line"] != ra["line"] else {}),
                "a": {"last_stage": ra["last_stage"], "lost_at": ra["lost_at"]},
                "b": {"last_stage": rb["last_stage"], "lost_at": rb["lost_at"]},
                "change": "earlier" if ib < ia else ("later" if ib > ia else "changed"),
            })
        # Both have source lines and none is in both: "no change" would be no comparison at all.
        entry["survival_unmatched"] = bool(x["survival"] and y["survival"]) and not entry.pop("survival_compared")
    breaks_a = _breaks(a, lambda key: key)
    breaks_b = _breaks(b, lambda key: lines.get(key) or (pairs.get(key[0], key[0]), key[1]))
    return {
        "a": {"path": a["trace"]["path"], "complete": a["trace"]["complete"], "argv": a["header"].get("argv"),
              "torch": a["header"].get("torch")},
        "b": {"path": b["trace"]["path"], "complete": b["trace"]["complete"], "argv": b["header"].get("argv"),
              "torch": b["header"].get("torch")},
        # Source files the two traces name at different paths, compared as one file (B's path -> A's).
        "files_paired": [{"a": fa, "b": fb} for fb, fa in sorted(pairs.items(), key=lambda p: p[1])],
        # Source lines B has at another number than A (matched by their text): compared as one line.
        "lines_moved": moved,
        "stage_order": order,
        "stage_titles": titles,
        "symbols": a["symbols"],
        "graphs": graphs,
        "regressions": regressions,
        "survival_earlier": sum(1 for g in graphs for s in g["survival"] if s["change"] == "earlier"),
        # Graph breaks by their line (as A names it): gone in B (fixed), and new in B.
        "graph_breaks": {"removed": [v for k, v in breaks_a.items() if k not in breaks_b],
                         "added": [v for k, v in breaks_b.items() if k not in breaks_a]},
    }


def _moved_key(m: dict[str, Any]) -> tuple:
    return (m.get("name"), m.get("target"), m.get("from"), m.get("to"))


def _breaks(m: dict[str, Any], where: Callable[[Line], Line]) -> dict[Line, dict[str, Any]]:
    """Where each compile's graph ended at a graph break, as A names the line (the innermost frame of Dynamo's
    reason), with the compile and Dynamo's summary. A site is compared by its line alone: a reason's text may
    name an object's address (`<function helper at 0x7f...>`), which differs from run to run."""
    out: dict[Line, dict[str, Any]] = {}
    for s in break_sites(m):
        site = where((s["file"], s["line"]))
        out.setdefault(site, {"file": site[0], "line": site[1], "compile_id": s["compile_ids"][0], "summary": s["summary"]})
    return out


def _rank(order: list[str], stage: str | None) -> int:
    """Position of a stage in the pipeline; -1 for 'never attached'."""
    return order.index(stage) if stage in order else -1


def render(d: dict[str, Any], fmt: str = "md") -> str:
    """The diff as Markdown, HTML (one static page) or JSON."""
    if fmt == "json":
        return jsonout.render(d, kind="diff")
    doc = views.diff_document(d)
    return html.render_document(doc) if fmt == "html" else markdown.render_document(doc)


def describe(r: dict[str, Any]) -> str:
    """One regression in a few words, for a terminal."""
    if r.get("kind") == "graph":
        return f"graph {r['graph']} is missing from B"
    if r.get("kind") == "moved":
        return f"node {r['node']} ({r['target']}) names another line from {r['stage']} on in graph {r['graph']}"
    return f"{r['field']} at {r['stage']} in graph {r['graph']}"
