"""Markdown, HTML and JSON reports of real traces: the reference MLP and a model with a graph break.

The HTML is opened in a real headless Chromium (Debian's `chromium` package).
"""

from __future__ import annotations

import copy
import html as _html
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import EXAMPLES, REPO, Run, cli
from browser import browse as _browse
from browser import png_pixels as _png_pixels
from browser import selftest as _selftest
from jsonschema_subset import check_schema, validate
from prov_trace.report import html, jsonout, lineage
from prov_trace.report.markdown import render as render_md

SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())
INJECT = "<script>window.__provtrace_injected=1</script><img src=x onerror=\"window.__provtrace_injected=1\">"


# --- graph break: two graphs, each with its own lineage and survival -------------------


def test_graph_break_gives_two_graphs_each_with_lineage(graph_break_run):
    model = graph_break_run.model()
    assert [g["label"] for g in model["graphs"]] == ["0/0 inference", "1/0 inference"]
    first, second = model["graphs"]
    for g, fc, pointwise in ((first, "x = self.fc1(x)", "relu"), (second, "x = self.fc2(x)", "mul")):
        lin = g["lineage"]
        edges = {(e["from"], e["to"], e["via"]) for e in lin["edges"]}
        assert {("pre_grad:x", "post_grad:permute", "from_node"), ("pre_grad:x", "post_grad:addmm", "from_node")} <= edges
        assert any(n["id"] == f"post_grad:{pointwise}" for n in lin["nodes"])
        row = next(r for r in g["survival"] if r["text"] == fc)
        assert row["last_stage"] == "artifact" and row["lost_at"] is None
    # The line with the break is compiled into neither graph.
    brk = [r for r in second["survival"] if r["text"].startswith("print(")]
    assert len(brk) == 1 and brk[0]["last_stage"] is None
    assert {r["text"] for r in second["survival"]} == {brk[0]["text"], "x = self.fc2(x)", "x = x * 2.0", "return x"}


def test_graph_break_markdown(graph_break_run, tmp_path):
    proc = cli("report", str(graph_break_run.trace), "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "r.md").read_text()
    assert text.count("```mermaid\nflowchart LR") == 2
    assert "## Graph 0/0 inference" in text and "## Graph 1/0 inference" in text
    # Dynamo graph, FX pre-grad, AOT graph, FX post-grad, IR pre, IR post, Kernel spec, Artifact.
    assert re.search(r"\| `[^`]*graph_break.py:24` \| `x = x \* 2.0` \| 1 \| 1 \| 1 \| 1 \| 1 \| 1 \| 1 \| 0 \| Kernel spec \| Artifact \| `cpp_fused_mul_0` \|", text), text
    # The line with the break is a source node of the second graph, its quotes made inert for Mermaid.
    assert '["graph_break.py:22 print(#quot;graph break: Dynamo cannot put print() in a graph#quot;)"]' in text


def test_run_writes_html_when_the_report_path_says_so(graph_break_run):
    text = graph_break_run.report.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert text.count('<section class="graph"') == 2
    assert "report written to" in graph_break_run.proc.stderr


# --- JSON ------------------------------------------------------------------------------


def test_json_matches_the_schema(mlp_run, graph_break_run, tmp_path):
    check_schema(SCHEMA)
    for run, name in ((mlp_run, "mlp.json"), (graph_break_run, "gb.json")):
        out = tmp_path / name
        proc = cli("report", str(run.trace), "-o", str(out))  # the .json suffix sets the format
        assert proc.returncode == 0, proc.stderr
        data = json.loads(out.read_text())
        assert validate(data, SCHEMA) == []
        assert data["format"] == "prov-trace-report" and data["version"] == 2
        assert [g["label"] for g in data["graphs"]] == [g["label"] for g in run.model()["graphs"]]
    mlp = json.loads((tmp_path / "mlp.json").read_text())
    g = mlp["graphs"][0]
    assert {r["text"]: r["last_stage"] for r in g["survival"]}["x = torch.relu(x)"] == "kernel_spec"
    assert {"from": "pre_grad:x", "to": ["post_grad:permute", "post_grad:addmm"], "stage": "post_grad"} in g["lineage"]["decompositions"]


def test_json_to_stdout_and_the_validator_catches_errors(mlp_run):
    proc = cli("report", str(mlp_run.trace), "--format", "json", "-o", "-")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert validate(data, SCHEMA) == []
    broken = copy.deepcopy(data)
    broken["graphs"][0]["matrix"][0]["cells"]["source"]["state"] = "maybe"
    del broken["graphs"][0]["lineage"]["edges"][0]["via"]
    errors = validate(broken, SCHEMA)
    assert any("'maybe' is not one of" in e for e in errors) and any("missing required key 'via'" in e for e in errors)


def test_json_is_valid_unicode_whatever_the_trace_holds(mlp_run):
    model = mlp_run.model()
    model["graphs"][0]["survival"][0]["text"] = "bad \udcff byte"
    model["header"]["odd"] = (1, float("nan"), b"\xff")
    data = json.loads(jsonout.render(model))
    assert data["graphs"][0]["survival"][0]["text"] == "bad \ufffd byte"
    assert data["header"]["odd"] == [1, "nan", "\ufffd"]
    jsonout.render(model).encode("utf-8")


# --- HTML ------------------------------------------------------------------------------


def test_html_is_self_contained_and_escapes_the_trace(mlp_run):
    model = mlp_run.model()
    g = model["graphs"][0]
    g["survival"][0]["text"] = INJECT
    g["stages"]["source"]["objects"][0]["text"] = INJECT
    text = html.render(model)
    # Nothing is fetched: no external script, style, image, font or frame.
    assert not re.search(r"<(link|iframe|object|embed)\b", text, re.I)
    # Links point inside the page only (#anchors); nothing has a src.
    assert not re.search(r"<\w+\b[^>]*\s(src|href)\s*=\s*\"(?!#)", text, re.I)
    assert "@import" not in text and "url(" not in text
    assert set(re.findall(r"https?://[^\s\"'<>]+", text)) <= {"http://www.w3.org/2000/svg"}
    assert "default-src 'none'" in text
    # Two script elements, both ours; the injected one is text.
    assert len(re.findall(r"<script\b", text)) == 2
    assert "&lt;script&gt;window.__provtrace_injected=1&lt;/script&gt;" in text
    data = re.search(r'<script type="application/json" id="prov-data">(.*?)</script>', text, re.S).group(1)
    assert "<" not in data


@pytest.fixture
def output_dir(tmp_path) -> Path:
    """Where the browser test leaves its screenshot: PROV_TRACE_TEST_OUTPUT when set (to keep it), else its temp dir."""
    d = Path(os.environ.get("PROV_TRACE_TEST_OUTPUT") or tmp_path / "artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


def test_html_renders_and_highlights_in_chromium(mlp_run, tmp_path, output_dir):
    model = mlp_run.model()
    g = model["graphs"][0]
    # A source line holding markup must show as text and run nothing.
    g["survival"][-1]["text"] = INJECT
    g["stages"]["source"]["objects"][-1]["text"] = INJECT
    page = tmp_path / "audit.html"
    page.write_text(html.render(model), encoding="utf-8")
    result = _selftest(tmp_path, page)
    assert result["injected"] is False and result["scripts"] == 2
    (r,) = result["graphs"]
    assert r["label"] == "0/0 inference"
    # The grid: one coloured cell per field and stage, laid out.
    assert r["grid_cells"] == len(g["matrix"]) * len(model["stage_order"]) == r["grid_colored"]
    assert r["grid_height"] > 0
    # The graph: every lineage node and edge drawn.
    assert r["svg_nodes"] == r["svg_drawn_nodes"] == len(g["lineage"]["nodes"])
    assert r["svg_edges"] == len(g["lineage"]["edges"]) and r["svg_width"] > 0
    # A cell lists the objects behind its n/N.
    # (The page shows the first ◐ cell: the MLP's nn_module_stack in the graph Dynamo handed Inductor,
    # 2 of its 3 compute nodes.)
    row, st = next((row, st) for row in g["matrix"] for st in model["stage_order"] if row["cells"][st]["state"] == "some")
    cell = row["cells"][st]
    assert (row["field"], st, cell["n"], cell["total"]) == ("nn_module_stack", "dynamo_graph", 2, 3)
    assert r["cell"]["field"] == row["field"] and r["cell"]["label"].endswith(f" {cell['n']}/{cell['total']}")
    assert r["cell"]["listed"] == cell["total"] and all(n in r["cell"]["text"] for n in cell["objects"])
    # Clicking the first line that flows anywhere highlights exactly what it flows into.
    line19 = next(s for s in g["survival"] if s["text"] == "x = self.fc1(x)")
    start = f"source:{line19['file']}:{line19['line']}"
    assert r["clicked"] == start
    assert set(r["highlighted_nodes"]) == set(lineage.reach(g["lineage"], start))
    assert {"pre_grad:x", "post_grad:permute", "post_grad:addmm", "kernel_spec:extern_kernels.addmm",
            "artifact:extern_kernels.addmm"} <= set(r["highlighted_nodes"])
    reached = set(r["highlighted_nodes"])
    assert r["highlighted_edges"] == sum(1 for e in g["lineage"]["edges"] if e["from"] in reached and e["to"] in reached)
    assert r["highlighted_rows"] >= 1

    # Without the self-test the page shows the injected text as text.
    dom = _browse(tmp_path, page.as_uri(), "--dump-dom").stdout
    assert "&lt;script&gt;window.__provtrace_injected=1&lt;/script&gt;" in dom

    shot = output_dir / "audit-selftest.png"
    proc = _browse(tmp_path, page.as_uri() + "#selftest", f"--screenshot={shot}", "--window-size=1000,700", "--hide-scrollbars")
    assert shot.exists(), proc.stderr[-2000:]
    width, height, hist = _png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 700)
    # The matrix is drawn at the top in self-test mode: its cells' colours (report.css) cover real area.
    # The MLP has cells populated on all (green), some (amber) and none (red) of their objects.
    for state, rgb in (("all", (0xB9, 0xE4, 0xBD)), ("some", (0xFF, 0xE1, 0xA8)), ("none", (0xF7, 0xB9, 0xB9))):
        assert hist.get(rgb, 0) > 1000, (state, hist.get(rgb, 0))


def test_graph_break_html_in_chromium(graph_break_run, tmp_path):
    model = graph_break_run.model()
    result = _selftest(tmp_path, graph_break_run.report)
    assert [r["label"] for r in result["graphs"]] == ["0/0 inference", "1/0 inference"]
    for r, g in zip(result["graphs"], model["graphs"]):
        assert r["svg_nodes"] == r["svg_drawn_nodes"] == len(g["lineage"]["nodes"]) > 0
        assert r["svg_edges"] == len(g["lineage"]["edges"])
        assert set(r["highlighted_nodes"]) == set(lineage.reach(g["lineage"], r["clicked"]))
        assert "pre_grad:x" in r["highlighted_nodes"]


def test_markdown_escapes_the_trace(mlp_run):
    model = mlp_run.model()
    model["graphs"][0]["survival"][0]["text"] = INJECT
    model["graphs"][0]["lineage"]["nodes"][0]["label"] = INJECT + '"]'
    text = render_md(model)
    # Inside a code span the text is literal in CommonMark (it shows `<script>` as text); outside
    # one, no tag may survive. The Mermaid block is checked by its entity codes below.
    from test_reliability_content import _outside_code_spans

    body = text.split("```mermaid")[0] + text.split("```mermaid")[-1].split("```", 1)[-1]
    for line in body.splitlines():
        outside = _outside_code_spans(line)
        assert "<script" not in outside and "<img" not in outside, line
    assert f"`{INJECT}`" in text
    assert '#lt;script#gt;' in text and '#quot;' in text
