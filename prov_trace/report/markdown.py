"""Markdown renderer: a pure function from the report model to text.

Every string that came from the trace goes through ``esc`` (table cells) or
``code`` (inline code), so source text, node names and reprs render as inert
text: table pipes, backticks, HTML, ANSI escapes and NUL included.
"""

from __future__ import annotations

import html
import re
from typing import Any

from prov_trace import schema

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: Any) -> str:
    """Plain printable text: control characters (ANSI escapes, NUL) shown as \\xNN, invalid UTF-8 replaced."""
    s = "" if text is None else str(text)
    s = s.encode("utf-8", "replace").decode("utf-8", "replace") if any(0xD800 <= ord(c) <= 0xDFFF for c in s) else s
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def esc(text: Any) -> str:
    """Safe inside a Markdown table cell."""
    s = html.escape(clean(text), quote=False)
    s = s.replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    s = s.replace("[", "\\[").replace("]", "\\]").replace("\n", " ")
    return s


def code(text: Any) -> str:
    """Inline code span that cannot be closed early and renders no HTML.

    A code span's content is literal in CommonMark (`<script>` shows as text), so it is not
    HTML-escaped: an entity there would show as `&lt;`. Its fence is longer than any backtick run inside.
    """
    s = clean(text).replace("\n", " ").replace("|", "\\|")
    fence = "`"
    while fence in s:
        fence += "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}" if s else ""


def symbol(cell: dict[str, Any], symbols: dict[str, Any]) -> str:
    state = cell["state"]
    sym = symbols[state]["symbol"]
    if state == "some":
        return f"{sym} {cell['n']}/{cell['total']}"
    if state in ("all", "none"):
        return f"{sym} {cell['n']}/{cell['total']}"
    return sym


def _loc(src: dict[str, Any] | None) -> str:
    if not src:
        return "❌"
    return code(f"{_short(src.get('file'))}:{src.get('line')}")


def _short(path: Any) -> str:
    p = str(path or "")
    parts = p.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else p


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(["---"] * len(headers)) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _field_cell(f: dict[str, Any] | None) -> str:
    if not f or not f.get("has"):
        return "➖"
    if f.get("populated"):
        return code((f.get("type") or "?").rsplit(".", 1)[-1])
    return "❌"


def render(model: dict[str, Any], max_rows: int = 400) -> str:
    h = model["header"]
    titles = model["stage_titles"]
    order = model["stage_order"]
    symbols = model["symbols"]
    out: list[str] = ["# Source-to-kernel provenance audit", ""]
    tr = model["trace"]
    if not tr["complete"]:
        out += [f"> **Partial trace.** {esc(tr['problem'] or 'the stream has no end record')}. "
                "Everything below is what was recorded before that point.", ""]
    if tr.get("repaired"):
        out += [f"> **Malformed records.** {tr['repaired']} values in the trace did not have the type "
                "docs/trace-format.md gives them and were read as empty (the file was changed, or written by "
                "another tool).", ""]
    stopped = tr.get("end") or {}
    if stopped.get("outcome") in ("interrupted", "signal"):
        out += [f"> **Run stopped early** ({esc(stopped.get('detail') or stopped.get('outcome'))}): the traced program "
                "did not finish. The trace is whole up to the stop; stages the compile had not reached show as not observed.", ""]
    out += ["Measurement only: every count below is computed from one traced run; nothing is hand-written.", ""]
    out += _table(["", ""], [
        ["Run", code(" ".join(h.get("argv") or []))],
        ["Python / torch", f"{esc(h.get('python'))} / {esc(h.get('torch'))}"],
        ["Platform", esc(h.get("platform"))],
        ["Profile", code(h.get("profile"))],
        ["Backend", f"{code(h.get('backend'))}: {esc(h.get('backend_reason'))}"],
        ["Trace", f"{code(tr['path'])}, {tr['bytes']} bytes, {tr['records']} records"],
        ["Ended", esc(_ended(tr))],
    ])
    out += ["", "## Counts", ""]
    rows = []
    for g in model["graphs"]:
        rows.append([esc(g["label"])] + [str(len(g["stages"][st]["objects"])) if g["stages"][st]["observed"] else "⚠" for st in order])
    out += _table(["Graph"] + [esc(titles[st]) for st in order], rows)
    out += ["", "Objects per stage: source lines, FX nodes, IR ops, kernels, kernels found in the emitted file. "
            "The kernel spec counts each kernel Inductor defines or calls (extern kernels once per call); "
            "the artifact counts each kernel the emitted file defines, and each extern call in it.", ""]
    if model.get("frames_without_graph"):
        out += ["Frames Dynamo compiled that produced no graph: " + ", ".join(
            f"{esc(f['compile_id'])} {code(f.get('qualname'))} ({code(_short(f.get('file')))}:{f.get('line')})"
            for f in model["frames_without_graph"]) + ".", ""]
    if model.get("cuts"):
        out += ["**Snapshots cut by a bound** (docs/trace-format.md, Bounds): the counts and tables cover the "
                "objects that were recorded. " + "; ".join(
                    f"{esc(c['compile_id'])} {esc(c['graph'] or '')} {esc(titles.get(c['stage'], c['stage']))}: "
                    f"{c['cut']} of {c['total'] if c['total'] is not None else '?'} not recorded ({esc(c['reason'] or 'no reason given')})"
                    for c in model["cuts"]) + ".", ""]

    out += ["## Stage × Field matrix", "", "Symbols:", ""]
    out += [f"- {v['symbol']} {esc(v['meaning'])}" for v in symbols.values()]
    out += ["", "Each column is measured on the object that stage produces: the FX node, the LoopLevelIR op, "
            "the kernel and its IR ops, the kernel's entry in the emitted file."]
    for g in model["graphs"]:
        out += ["", f"### Graph {esc(g['label'])}", ""]
        rows = [[esc(r["layer"]), code(r["field"])] + [symbol(r["cells"][st], symbols) for st in order] for r in g["matrix"]]
        out += _table(["Layer", "Field"] + [esc(titles[st]) for st in order], rows)

    out += ["", "## Provenance survival per source line", "",
            "For each line of model source: the last stage where an object still carries that line, "
            "and the first stage after it where none does (with the objects there that lost it).", ""]
    for g in model["graphs"]:
        out += [f"### Graph {esc(g['label'])}", ""]
        rows = []
        for s in g["survival"]:
            rows.append([
                _loc(s), code(s.get("text")),
                *[("⚠" if s["counts"].get(st) is None else str(s["counts"][st])) for st in order if st != schema.SOURCE],
                esc(titles.get(s["last_stage"], "—")) if s["last_stage"] else "never attached",
                esc(titles.get(s["lost_at"], "")) if s["lost_at"] else "survives",
                ", ".join(code(n) for n in s["lost_by"]) or "",
            ])
        out += _table(["Line", "Source"] + [esc(titles[st]) for st in order if st != schema.SOURCE]
                      + ["Last attached", "First lost", "Lost by"], rows) + [""]

    out += _lineage_section(model)

    out += ["## Per-stage detail", ""]
    for g in model["graphs"]:
        out += [f"### Graph {esc(g['label'])}", ""]
        for st in order:
            data = g["stages"][st]
            out += [f"#### {esc(titles[st])}", ""]
            if not data["observed"]:
                out += ["⚠ not observed.", ""]
                continue
            objs = data["objects"]
            if not objs:
                out += ["∅ no objects.", ""]
                continue
            out += _detail(st, objs, max_rows) + [""]
        out += _kernel_map(g) + [""]

    out += ["## Hooks", ""]
    rows = []
    for hk in model["hooks"]:
        rows.append([code(hk.get("target")), esc(titles.get(hk.get("stage"), hk.get("stage"))), esc(hk.get("event")),
                     "✅" if hk.get("resolved") else "❌", "✅" if hk.get("installed") else "❌",
                     str(hk.get("fired", 0)), str(hk.get("errors", 0)),
                     esc(hk.get("reason") or "; ".join(hk.get("notes") or []) or "")])
    out += _table(["Target", "Stage", "Event", "Resolved", "Installed", "Fired", "Errors", "Notes"], rows)
    if model["errors"]:
        out += ["", "## Probe errors", ""]
        out += _table(["Stage", "Target", "Phase", "Error"], [
            [esc(e["stage"]), code(e["target"]), esc(e["phase"]), esc(f"{e['type']}: {e['message']}")] for e in model["errors"][:100]
        ])
    return "\n".join(out) + "\n"


#: Mermaid renders slowly past a few hundred nodes; the full lineage is in `--format json` and `--format html`.
MERMAID_MAX_NODES = 300


def mermaid_label(text: Any) -> str:
    """A Mermaid node label, quoted: entity codes for every character Mermaid or HTML would read."""
    s = clean(text).replace("\n", " ")
    s = s.replace("#", "#35;")  # first: the codes below start with '#'
    for ch, code_ in (('"', "#quot;"), ("<", "#lt;"), (">", "#gt;"), ("&", "#amp;"), ("`", "#96;")):
        s = s.replace(ch, code_)
    return f'"{s}"'


def mermaid(lineage: dict[str, Any], titles: dict[str, str], max_nodes: int = MERMAID_MAX_NODES) -> list[str]:
    """The lineage as a Mermaid `flowchart LR`, one subgraph per stage."""
    nodes = lineage["nodes"][:max_nodes]
    ids = {n["id"]: f"n{i}" for i, n in enumerate(nodes)}
    out = ["```mermaid", "flowchart LR"]
    for si, st in enumerate(lineage["stages"]):
        members = [n for n in nodes if n["stage"] == st]
        if not members:
            continue
        out.append(f"  subgraph s{si}[{mermaid_label(titles.get(st, st))}]")
        for n in members:
            label = n["label"] + (" (inherited)" if n.get("inherited") else "")
            out.append(f"    {ids[n['id']]}[{mermaid_label(label)}]")
        out.append("  end")
    for e in lineage["edges"]:
        a, b = ids.get(e["from"]), ids.get(e["to"])
        if a and b:
            arrow = "-.->" if e["via"] in ("inherited", "source") else "-->"
            out.append(f"  {a} {arrow}|{e['via']}| {b}")
    out.append("```")
    return out


def _lineage_section(model: dict[str, Any]) -> list[str]:
    titles = model["stage_titles"]
    out = ["## Lineage", "",
           "Each object linked to the objects it came from, by the fields the trace recorded: a source line → the "
           "FX nodes that carry it; `from_node` (pre-grad → post-grad); `origins` (post-grad → LoopLevelIR); the same "
           "buffer across the passes; kernel membership (IR op → kernel); the same kernel in the emitted file. "
           "An object with no source and no link of its own is linked to its source-bearing producers by its inputs "
           "(dotted, `inherited`). FX placeholders and outputs are not drawn.", ""]
    for g in model["graphs"]:
        lin = g.get("lineage")
        if not lin:
            continue
        out += [f"### Graph {esc(g['label'])}", ""]
        if not lin["nodes"]:
            out += ["∅ nothing to draw.", ""]
            continue
        out += mermaid(lin, titles) + [""]
        if len(lin["nodes"]) > MERMAID_MAX_NODES:
            out += [f"Only the first {MERMAID_MAX_NODES} of {len(lin['nodes'])} nodes are drawn; "
                    "all are in `--format json` and `--format html`.", ""]
        name = {n["id"]: n for n in lin["nodes"]}

        def nm(nid: str) -> str:
            n = name[nid]
            return f"{code(n['name'])} ({esc(titles.get(n['stage'], n['stage']))})"

        rows = [["decomposition", nm(d["from"]), ", ".join(nm(t) for t in d["to"])] for d in lin["decompositions"]]
        rows += [["fusion", ", ".join(nm(f) for f in d["from"]), nm(d["to"])] for d in lin["fusions"]]
        rows += [["inherited", ", ".join(nm(f) for f in n["inherits_from"]), nm(n["id"])]
                 for n in lin["nodes"] if n.get("inherited")]
        if rows:
            out += _table(["Change", "From", "To"], rows) + [""]
        else:
            out += ["No decomposition, fusion or inherited link: every object maps one to one.", ""]
    return out


def _ended(tr: dict[str, Any]) -> str:
    end = tr.get("end")
    if not end:
        return "no end record"
    return f"{end.get('outcome')}" + (f" ({end.get('detail')})" if end.get("detail") else "")


def _detail(stage: str, objs: list[dict[str, Any]], max_rows: int) -> list[str]:
    shown = objs[:max_rows]
    if stage == schema.SOURCE:
        rows = [[_loc(o["sources"][0]), code(o["kind"]), code(o.get("text"))] for o in shown]
        out = _table(["Line", "Function", "Source"], rows)
    elif stage == schema.ARTIFACT:
        rows = [[code(o["name"]), esc(o["kind"]), str(o.get("def_line") or ""), ", ".join(map(str, o.get("call_lines") or [])),
                 "<br>".join(code(c) for c in o["provenance_comments"]) or "❌"] for o in shown]
        out = _table(["Kernel", "Kind", "Def line", "Call lines", "Provenance comments"], rows)
    else:
        fields = list(shown[0]["fields"].keys())
        rows = [[code(o["name"]), code(o.get("kind"))] + [_field_cell(o["fields"].get(f)) for f in fields]
                + [", ".join(_loc(s) for s in o["sources"][:3]) or "❌"] for o in shown]
        out = _table(["Name", "Kind"] + [code(f) for f in fields] + ["Source line"], rows)
    if len(objs) > max_rows:
        out.append(f"\n… {len(objs) - max_rows} more rows not shown (all are in the trace and in `--format json`).")
    return out


def _kernel_map(g: dict[str, Any]) -> list[str]:
    ks = g["stages"].get(schema.KERNEL_SPEC)
    if not ks or not ks["observed"] or not ks["objects"]:
        return []
    out = ["#### Kernel → IR ops → origins → source line", ""]
    rows = [[code(k["name"]), esc(k["kind"]), ", ".join(code(o) for o in k["ops"]), ", ".join(code(o) for o in k["origins"]) or "❌",
             ", ".join(_loc(s) for s in k["sources"]) or "❌"] for k in ks["objects"]]
    return out + _table(["Kernel", "Kind", "IR ops", "Origins (post-grad nodes)", "Source lines"], rows)


def summary_lines(model: dict[str, Any]) -> list[str]:
    """The short per-stage summary printed at the end of a run."""
    titles = model["stage_titles"]
    out = ["prov-trace summary:"]
    for row in model["summary"]:
        if row["hooks"] == 0 and not row["observed"]:
            continue
        if row["resolved"] < row["hooks"] and not row["observed"]:
            state = "NOT RESOLVED"
        elif not row["observed"]:
            state = "DID NOT FIRE"
        else:
            state = "fired"
        line = f"  {titles.get(row['stage'], row['stage']):<26} {state:<13} hooks {row['resolved']}/{row['hooks']} resolved, {row['fired']} events, {row['objects']} objects"
        if row["errors"]:
            line += f", {row['errors']} probe errors"
        out.append(line)
        for u in row["unresolved"]:
            out.append(f"      unresolved: {u}")
    tr = model["trace"]
    if not tr["complete"]:
        out.append(f"  trace is partial: {tr['problem']}")
    # For a terminal: trace text (a stage name, a hook's reason) must not carry escape sequences.
    return [clean(line) for line in out]
