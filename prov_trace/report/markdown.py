"""Markdown renderer: draws a view-layer `Document` as Markdown text.

Every string that came from the trace goes through ``esc`` (text) or ``code``
(inline code), so source text, node names and reprs render as inert text:
table pipes, backticks, HTML, ANSI escapes and NUL included, and a bare URL or
address is not made a link by a forge's autolinking. The lineage is a
Mermaid chart, whose labels go through ``mermaid_label``.
"""

from __future__ import annotations

import functools
import html
import re
from typing import Any

from prov_trace.report import views as V
from prov_trace.report.text import clean, short_path

#: Mermaid renders slowly past a few hundred nodes; the full lineage is in `--format json` and `--format html`.
MERMAID_MAX_NODES = V.MERMAID_MAX_NODES


#: What a forge's Markdown (GitHub's autolink extension) turns into a link without any markup: a scheme's
#: "://", "www.", and the "@" of an address. A backslash escape before the punctuation keeps it text.
_AUTOLINK = re.compile(r"://|(?<![A-Za-z0-9])(?i:www)\.|@")


#: A report shows the same names and paths many times over: the encoder's Markdown escapes ~64k strings,
#: ~3.5k of them different. Short strings' escapes are kept (bounded: a long-lived notebook renders many).
_CACHED_MAX_LEN = 1024
_CACHE_SIZE = 32768


def esc(text: Any) -> str:
    """Safe inside a Markdown table cell."""
    if type(text) is str and len(text) <= _CACHED_MAX_LEN:
        return _esc_cached(text)
    return _esc(text)


def _esc(text: Any) -> str:
    s = html.escape(clean(text), quote=False)
    s = s.replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    s = s.replace("[", "\\[").replace("]", "\\]").replace("\n", " ")
    return _AUTOLINK.sub(lambda m: "\\" + m.group() if m.group() in ("://", "@") else m.group()[:-1] + "\\.", s)


def code(text: Any) -> str:
    """Inline code span that cannot be closed early and renders no HTML.

    A code span's content is literal in CommonMark (`<script>` shows as text), so it is not
    HTML-escaped: an entity there would show as `&lt;`. Its fence is longer than any backtick run inside.
    """
    if type(text) is str and len(text) <= _CACHED_MAX_LEN:
        return _code_cached(text)
    return _code(text)


def _code(text: Any) -> str:
    s = clean(text).replace("\n", " ").replace("|", "\\|")
    fence = "`"
    while fence in s:
        fence += "`"
    pad = " " if s.startswith("`") or s.endswith("`") else ""
    return f"{fence}{pad}{s}{pad}{fence}" if s else ""


_esc_cached = functools.lru_cache(maxsize=_CACHE_SIZE)(_esc)
_code_cached = functools.lru_cache(maxsize=_CACHE_SIZE)(_code)


def inline(value: V.Inline) -> str:
    if type(value) is str:  # most cells: a plain string, or one of the view's own types, read by type
        return esc(value)
    draw = _INLINE.get(type(value))
    if draw is not None:
        return draw(value)
    return _inline(value)


def _inline(value: V.Inline) -> str:
    if isinstance(value, str):
        return esc(value)
    if isinstance(value, V.Code):
        return code(value.text)
    if isinstance(value, V.Sym):
        return V.symbol_text(value, V.EMOJI)
    if isinstance(value, V.Loc):
        return code(f"{short_path(value.file)}:{value.line}")
    if isinstance(value, V.Tag):
        return esc(value.text)
    if isinstance(value, V.Link):
        return inline(value.value)
    if isinstance(value, V.Join):
        return ("<br>" if value.sep == "\n" else esc(value.sep)).join(inline(v) for v in value.items)
    raise TypeError(f"not a view value: {type(value).__name__}")


_INLINE = {
    V.Code: lambda v: code(v.text),
    V.Sym: lambda v: V.symbol_text(v, V.EMOJI),
    V.Loc: lambda v: code(f"{short_path(v.file)}:{v.line}"),
    V.Tag: lambda v: esc(v.text),
    V.Link: lambda v: inline(v.value),
    V.Join: lambda v: ("<br>" if v.sep == "\n" else esc(v.sep)).join(inline(i) for i in v.items),
}


def table(t: V.Table) -> list[str]:
    headers = t.headers if t.headers is not None else [""] * (len(t.rows[0].cells) if t.rows else 2)
    out = ["| " + " | ".join(inline(x) for x in headers) + " |", "|" + "|".join(["---"] * len(headers)) + "|"]
    out += ["| " + " | ".join(inline(c) for c in r.cells) + " |" for r in t.rows]
    if t.more:
        out += ["", f"… {t.more} more rows not shown (all are in the trace and in `--format json`)."]
    return out


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
            arrow = "-.->" if e["via"] in ("inherited", "source", "also_in_origins") else "-->"
            out.append(f"  {a} {arrow}|{e['via'].replace('_', ' ')}| {b}")
    out.append("```")
    return out


def block(b: Any) -> list[str]:
    if isinstance(b, V.Section):
        out = ["#" * b.level + " " + esc(b.title), ""]
        for inner in b.blocks:
            out += block(inner)
        return out
    if isinstance(b, V.Para):
        text = "".join(inline(p) for p in b.parts)
        return [text, ""] if text else []
    if isinstance(b, V.Banner):
        return [f"> **{esc(b.title)}** {inline(b.text)}", ""]
    if isinstance(b, V.Bullets):
        return [f"- {' '.join(inline(p) for p in item)}" for item in b.items] + [""]
    if isinstance(b, V.Table):
        return table(b) + [""]
    if isinstance(b, V.Matrix):
        return table(b.table) + [""]
    if isinstance(b, V.FileViews):
        return []  # the line-by-line views are HTML's; the section's text says so
    if isinstance(b, V.LineageBlock):
        lin = b.lineage
        out = mermaid(lin, b.titles) + [""]
        if len(lin["nodes"]) > MERMAID_MAX_NODES:
            out += [f"Only the first {MERMAID_MAX_NODES} of {len(lin['nodes'])} nodes are drawn; "
                    "all are in `--format json` and `--format html`.", ""]
        if b.changes is not None:
            out += table(b.changes) + [""]
        return out
    raise TypeError(f"not a view block: {type(b).__name__}")


def render_document(doc: V.Document) -> str:
    out = [f"# {esc(doc.title)}", ""]
    for b in doc.blocks:
        out += block(b)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out) + "\n"


def render(model: dict[str, Any]) -> str:
    """The Markdown report of a report model."""
    return render_document(V.report_document(model))


def summary_lines(model: dict[str, Any]) -> list[str]:
    return V.summary_lines(model)
