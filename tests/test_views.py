"""One view layer, two renderers: the Markdown and HTML reports of a real trace carry the same facts.

Both files are parsed back (Markdown tables by their pipes, HTML tables with
html.parser) and compared table by table, cell by cell, heading by heading.
"""

from __future__ import annotations

import html as _html
import re
from html.parser import HTMLParser

from prov_trace.report import views as V

#: The Markdown glyphs as the HTML writes them.
TO_HTML_GLYPHS = {V.EMOJI[k]: V.GLYPHS[k] for k in V.EMOJI}


def _norm(text: str) -> str:
    text = text.replace("\u00a0", " ")
    for emoji, glyph in TO_HTML_GLYPHS.items():
        text = text.replace(emoji, glyph)
    return re.sub(r"[ \t]+", " ", text).strip()


def _md_cell(cell: str) -> str:
    cell = cell.strip().replace("<br>", "\n")
    # Code spans: drop the fences (and the one-space pad a fence with backticks inside gets).
    cell = re.sub(r"(`+) ?(.*?) ?\1", lambda m: m.group(2), cell)
    cell = re.sub(r"\\([|`*_\[\]])", r"\1", cell)
    return _norm(_html.unescape(cell))


def md_tables(text: str) -> list[list[list[str]]]:
    tables, current = [], None
    in_code = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        if line.startswith("|"):
            if re.fullmatch(r"\|(---\|)+", line):
                continue
            cells = re.split(r"(?<!\\)\|", line)[1:-1]
            if current is None:
                current = []
                tables.append(current)
            current.append([_md_cell(c) for c in cells])
        else:
            current = None
    # A key-value table has an empty header row in Markdown (a table needs one); HTML has none.
    return [t[1:] if t and not any(t[0]) else t for t in tables]


def md_headings(text: str) -> list[str]:
    return [_norm(_html.unescape(re.sub(r"\\(.)", r"\1", ln.lstrip("#").strip())))
            for ln in text.splitlines() if re.match(r"#{1,6} ", ln)]


class _HTMLTables(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self.headings: list[str] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._heading: list[str] | None = None
        self._skip = 0

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "style", "svg", "title"):
            self._skip += 1
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append("\n")
        elif tag in ("h1", "h2", "h3", "h4", "summary"):
            self._heading = []

    def handle_endtag(self, tag):
        if tag in ("script", "style", "svg", "title"):
            self._skip -= 1
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(_norm("".join(self._cell)))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._row:
                self.tables[-1].append(self._row)
            self._row = None
        elif tag in ("h1", "h2", "h3", "h4", "summary") and self._heading is not None:
            self.headings.append(_norm("".join(self._heading)))
            self._heading = None

    def handle_data(self, data):
        if self._skip:
            return
        if self._cell is not None:
            self._cell.append(data)
        if self._heading is not None:
            self._heading.append(data)


def html_tables(text: str) -> tuple[list[list[list[str]]], list[str]]:
    p = _HTMLTables()
    p.feed(text)
    return p.tables, p.headings


def test_markdown_and_html_reports_carry_the_same_facts(mlp_run):
    import prov_trace

    report = prov_trace.load(mlp_run.trace)
    md, page = report.to_markdown(), report.to_html()
    md_t, (html_t, html_h) = md_tables(md), html_tables(page)
    assert len(md_t) == len(html_t) >= 10
    for i, (a, b) in enumerate(zip(md_t, html_t)):
        assert a == b, f"table {i} differs:\nmd:   {a[:3]}\nhtml: {b[:3]}"
    assert md_headings(md) == html_h
    # And the facts are the run's: the matrix's post-grad stack_trace cell, the relu line's survival.
    matrix = next(t for t in md_t if t[0][:2] == ["Layer", "Field"])
    row = next(r for r in matrix if r[1] == "stack_trace")
    post = matrix[0].index("FX post-grad")
    cell = report.matrix("0/0 inference")["stack_trace"]["post_grad"]
    assert row[post] == V.symbol_text(V.Sym(cell["state"], cell["n"], cell["total"]), V.GLYPHS)
    survival = next(t for t in md_t if t[0][:2] == ["Line", "Code"] and "Lost by" in t[0])
    relu = next(r for r in survival if r[1] == "x = torch.relu(x)")
    assert relu[-1] == "cpp_fused_relu_0"


def test_diff_markdown_and_html_carry_the_same_facts(mlp_run):
    import copy

    import prov_trace
    from prov_trace.report import diff as dif

    a = prov_trace.load(mlp_run.trace)
    b = prov_trace.Report(copy.deepcopy(a.model))
    g = b.model["graphs"][0]
    g["stages"]["kernel_spec"]["objects"].pop()
    g["lineage"]["edges"].pop()
    row = next(r for r in g["survival"] if r["text"] == "x = self.fc1(x)")
    row["last_stage"], row["lost_at"] = "ir_post", "kernel_spec"
    d = a.diff(b)
    md, page = dif.render(d, "md"), dif.render(d, "html")
    md_t, (html_t, html_h) = md_tables(md), html_tables(page)
    assert md_t == html_t and len(md_t) >= 4
    assert md_headings(md) == html_h
    assert any(r[-1] == "▼ earlier" for t in md_t for r in t)


def test_run_report_markdown_and_html_carry_the_same_facts(mlp_run, tmp_path):
    """The merged report over several ranks (report/ranks.py) goes through the same view layer."""
    import prov_trace
    from test_ranks import write_rank

    for r in range(3):
        write_rank(mlp_run.trace, tmp_path / f"rank-{r}.msgpack", r, world=3, drop_last_kernel=r == 2)
    run = prov_trace.load(tmp_path)
    md, page = run.to_markdown(), run.to_html()
    md_t, (html_t, html_h) = md_tables(md), html_tables(page)
    assert len(md_t) == len(html_t) >= 10
    for i, (a, b) in enumerate(zip(md_t, html_t)):
        assert a == b, f"table {i} differs:\nmd:   {a[:3]}\nhtml: {b[:3]}"
    assert md_headings(md) == html_h
    assert "Rank 2" in html_h and any(r[:2] == ["ranks 0–1", "2"] for t in md_t for r in t)
