"""A report as an object: built from a trace, rendered in any format, checked, compared.

What the Python API hands back (``prov_trace.load``, ``Tracer.report()``) and
what the command line renders. Never imports torch.
"""

from __future__ import annotations

import html as _html
import os
from dataclasses import dataclass
from typing import Any

from prov_trace.report import check as _check
from prov_trace.report import diff as _diff
from prov_trace.report import html, jsonout, markdown, views
from prov_trace.errors import UsageError
from prov_trace.report.model import ReportModel, build
from prov_trace.stream.reader import read_trace

from prov_trace.report.formats import FORMATS, SUFFIXES, output_format  # noqa: F401 (their home is formats.py)


@dataclass
class CheckResult:
    """The outcome of ``Report.check``: ``ok`` when every rule holds; ``failures`` names each failing cell."""

    ok: bool
    results: list[dict[str, Any]]
    text: str

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [{"rule": r["rule"], **f} for r in self.results for f in r["failures"]]

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return self.text


class Rendered:
    """What every report object offers once it can ``render(fmt)``: each format, and Jupyter's inline view."""

    #: Shown as the iframe's title in a notebook.
    iframe_title = "prov-trace report"

    def render(self, fmt: str = "md") -> str:
        raise NotImplementedError

    def to_markdown(self) -> str:
        return self.render("md")

    def to_html(self) -> str:
        return self.render("html")

    def to_json(self) -> str:
        return self.render("json")

    def _repr_html_(self) -> str:
        """Jupyter shows the HTML report inline: the whole self-contained page in a sandboxed iframe.

        The page is the iframe's ``srcdoc``, so its CSS (which styles ``body``) applies inside the
        frame only and nothing leaks into the notebook; ``sandbox="allow-scripts"`` runs the
        report's own script in an opaque origin, which cannot reach the notebook; the page's
        Content-Security-Policy fetches nothing.
        """
        return ('<iframe class="prov-trace-report" title="' + _html.escape(self.iframe_title, quote=True)
                + '" sandbox="allow-scripts" style="width:100%;height:640px;border:1px solid #d0d0d0;'
                'resize:vertical" srcdoc="' + _html.escape(self.to_html(), quote=True) + '"></iframe>')


class NoSuchGraph(UsageError, KeyError):
    """`matrix(graph)` of a graph the report does not have (a KeyError too, as it was)."""

    def __str__(self) -> str:  # KeyError's would quote the sentence
        return str(self.args[0]) if self.args else ""


class Report(Rendered):
    """The report of one trace: its model as plain data, and every way to show it."""

    def __init__(self, model: ReportModel):
        self.model = model

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Report":
        """Read a trace file and build its report (a cut stream reads up to its last whole record)."""
        return cls(build(read_trace(path)))

    @property
    def partial(self) -> str | None:
        """None for a whole trace, else why it is partial (one sentence)."""
        return self.model["trace"]["problem"]

    @property
    def graphs(self) -> list[str]:
        """The graphs' labels, e.g. ``['0/0 inference']``."""
        return [g["label"] for g in self.model["graphs"]]

    def matrix(self, graph: str | None = None) -> dict[str, Any]:
        """The Stage × Field matrix as plain data: ``{graph label: {field: {stage: cell}}}``.

        A cell is ``{"state", "n", "total"}`` (state: all, some, none, na, empty, unobserved;
        ``reason`` too where a field cannot exist at that stage). With `graph` (a label such as
        ``"0/0 inference"``), that graph's ``{field: {stage: cell}}``.
        """
        out = {g["label"]: {r["field"]: {st: {k: v for k, v in c.items() if k != "objects"}
                                         for st, c in r["cells"].items()} for r in g["matrix"]}
               for g in self.model["graphs"]}
        if graph is None:
            return out
        if graph not in out:
            raise NoSuchGraph(f"there is no graph {graph!r}: the graphs are {', '.join(self.graphs) or 'none'}")
        return out[graph]

    def render(self, fmt: str = "md") -> str:
        if fmt == "html":
            return html.render(self.model)
        if fmt == "json":
            return jsonout.render(self.model)
        if fmt == "md":
            return markdown.render(self.model)
        raise ValueError(f"there is no report format {fmt!r}: choose md, html or json")

    @property
    def iframe_title(self) -> str:  # type: ignore[override]
        return "prov-trace report: " + (", ".join(self.graphs) or "no graph")

    def __repr__(self) -> str:
        state = "complete" if self.partial is None else f"partial: {self.partial}"
        return f"<prov-trace Report: {len(self.graphs)} graph(s) {self.graphs}, {state}>"

    def summary_lines(self) -> list[str]:
        """The short per-stage summary `prov-trace run` prints."""
        return views.summary_lines(self.model)

    def check(self, *rules: str, graphs: list[str] | None = None) -> CheckResult:
        """Check rules (the grammar of ``prov-trace check``, docs/check.md) over the matrix.

        Raises ``RuleError`` (a UsageError) for a rule that does not parse or names nothing here.
        """
        if not rules:  # "0 of 0 rules hold" would pass a test that checks nothing
            raise UsageError("nothing to check: give at least one rule, e.g. check('kernel_spec:origins=all')")
        parsed = [_check.parse_rule(r) for r in rules]
        results = _check.check(self.model, parsed, graphs)
        return CheckResult(all(r["holds"] for r in results), results,
                           _check.render(results, self.model["stage_titles"]))

    def diff(self, other: "Report") -> dict[str, Any]:
        """What changed from this report (A) to `other` (B), as plain data (``regressions`` lists the drops)."""
        return _diff.diff(self.model, other.model)
