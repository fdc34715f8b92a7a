"""Reports that read like a map (issue 17), in a real headless Chromium on real traces.

The source view (each line coloured by the last stage it reached; a click lists
its FX nodes, IR ops and kernels), the code view (each kernel linked back to its
lines), the headline above every table, and the "where provenance is lost"
ranking: on the reference MLP, the graph-break example and a BERT built from a
config.
"""

from __future__ import annotations

import importlib.util
import re

import pytest

import prov_trace
from browser import selftest
from conftest import EXAMPLES, Run, cli


def _page(run: Run, tmp_path):
    page = tmp_path / "audit.html"
    page.write_text(prov_trace.load(run.trace).to_html(), encoding="utf-8")
    return selftest(tmp_path, page)


def _headline_numbers(text: str) -> tuple[int, dict[str, tuple[int, int]], tuple[int, int]]:
    lines = int(re.match(r"(\d+) lines? of the model's source", text).group(1))
    stages = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in re.finditer(r"([A-Za-z][\w -]*(?:\([\w-]+\))?) (\d+)/(\d+) \(", text)}
    bare = re.search(r"(\d+) of (\d+) kernels? carr(?:y|ies) no source", text)
    # The verb agrees with the count ("0 of 1 kernel carry" and "1 of 8 kernels carry" read wrong).
    assert re.search(r"\b1 of \d+ kernels? carries|of 1 kernel carries|\b(?!1 )\d+ of (?!1 )\d+ kernels carry ", text), text
    return lines, stages, (int(bare.group(1)), int(bare.group(2)))


def _check_headline(report, r, g):
    lines, stages, (bare, kernels) = _headline_numbers(r["headline"])
    hl = g["headline"]
    assert lines == hl["lines"]
    titles = report.model["stage_titles"]
    assert {titles[st]: (k, lines) for st, k in hl["reached"].items() if k is not None} == \
        {k.strip(): v for k, v in stages.items()}
    # The kernels' numbers are the matrix's: kernels with no stack trace on any IR op.
    cell = report.matrix(g["label"])["get_stack_traces"]["kernel_spec"]
    assert (bare, kernels) == (cell["total"] - cell["n"], cell["total"])
    # And the per-line numbers are the survival table's.
    rows = [row for row in g["survival"] if row["user"] and not row["note"]]
    for st, k in hl["reached"].items():
        if k is not None:
            assert k == sum(1 for row in rows if row["counts"][st])


def test_mlp_source_and_code_views(mlp_run, tmp_path):
    report = prov_trace.load(mlp_run.trace)
    res = _page(mlp_run, tmp_path)
    # The source index lists the model file first.
    assert res["sources"][0]["path"].endswith("examples/reference_mlp.py") and res["sources"][0]["user"]
    assert res["sources"][0]["status"] == "ok"
    lines = {ln["line"]: ln for ln in res["lines"] if ln["file"].endswith("reference_mlp.py")}
    text = {r["line"]: r["text"] for r in report.model["graphs"][0]["survival"]}
    relu = next(n for n, t in text.items() if t == "x = torch.relu(x)")
    # A click on `x = torch.relu(x)` lists relu, buf1 and cpp_fused_relu_0; the line is coloured by its last stage.
    listed = lines[relu]["listed"]
    assert listed["post_grad"] == ["relu"] and listed["ir_pre"] == ["buf1"] and listed["kernel_spec"] == ["cpp_fused_relu_0"]
    assert "lv-kernel_spec" in lines[relu]["cls"]
    fc1 = next(n for n, t in text.items() if t == "x = self.fc1(x)")
    assert "lv-artifact" in lines[fc1]["cls"] and listed.get("artifact") is None
    ret = next(n for n, t in text.items() if t == "return x")
    assert "lv-noop" in lines[ret]["cls"]
    # The code view links cpp_fused_relu_0 back to line 20, and each extern call to its own line.
    code = {c["kernel"]: c for c in res["code"]}
    assert code["cpp_fused_relu_0"]["sources"] == [f"#src-0-{relu}"]
    assert code["extern_kernels.addmm"]["sources"] == [f"#src-0-{fc1}"]
    assert code["cpp_fused_relu_0"]["end"] > code["cpp_fused_relu_0"]["start"]  # the whole definition is one span
    # The headline's numbers equal the matrix's and the survival table's.
    (r,) = res["graphs"]
    _check_headline(report, r, report.model["graphs"][0])
    # Clicks are fast on a small model (the 24-layer encoder's numbers are in docs/benchmarks.md).
    assert res["timing"]["clicks"] == len(res["lines"]) + len(res["code"])


def test_losses_are_ranked_by_lines_and_link_their_objects(mlp_run):
    report = prov_trace.load(mlp_run.trace)
    g = report.model["graphs"][0]
    (first,) = g["losses"]
    assert (first["from"], first["to"], first["kind"]) == ("kernel_spec", "artifact", "generated kernel")
    assert [ln["line"] for ln in first["lines"]] == [r["line"] for r in g["survival"] if r["text"] == "x = torch.relu(x)"]
    assert first["objects"] == ["cpp_fused_relu_0"]
    md = report.to_markdown()
    assert "| 1 | Kernel spec → Artifact | generated kernel | 1 |" in md
    assert "The line-by-line" not in md and "write the report as .html for the views" in md
    page = report.to_html()
    # In HTML the ranking's object links to its row in the per-stage tables.
    anchor = re.search(r'<a href="#(g0-kernel_spec-\d+)"><code>cpp_fused_relu_0</code></a>', page).group(1)
    assert f'id="{anchor}"' in page


def test_graph_break_views(graph_break_run, tmp_path):
    report = prov_trace.load(graph_break_run.trace)
    res = _page(graph_break_run, tmp_path)
    assert res["sources"][0]["path"].endswith("examples/graph_break.py")
    lines = {ln["line"]: ln for ln in res["lines"]}
    by_text = {r["text"]: r["line"] for g in report.model["graphs"] for r in g["survival"]}
    # A line of the second graph is listed under that graph, and coloured by how far it got there.
    mul = lines[by_text["x = x * 2.0"]]
    assert mul["listed"]["post_grad"] == ["mul"] and "lv-kernel_spec" in mul["cls"]
    # The line with the break runs in Python between the graphs: grey like a line with no op, not "never attached".
    brk = lines[by_text['print("graph break: Dynamo cannot put print() in a graph")']]
    assert "lv-noop" in brk["cls"]
    # Its panel says so, in Dynamo's words (it said only "graph break: runs in Python").
    assert brk["note"].startswith("graph break: runs in Python (Dynamo: Failed to trace builtin operator: "), brk
    assert not [ln for ln in lines.values() if "lv-never" in ln["cls"]]
    for r, g in zip(res["graphs"], report.model["graphs"]):
        _check_headline(report, r, g)


@pytest.fixture(scope="module")
def bert_run(tmp_path_factory) -> Run:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (it is in the `test` extra: pip install -e '.[test]')")
    d = tmp_path_factory.mktemp("bert")
    proc = cli("run", str(EXAMPLES / "bert_tiny.py") + ":build", "-o", str(d / "t.msgpack"), "--report",
               str(d / "audit.html"), cwd=d, check=True)
    return Run(proc, d / "t.msgpack", d / "audit.html", d)


@pytest.mark.heavy
def test_bert_views_put_the_model_file_first(bert_run, tmp_path):
    report = prov_trace.load(bert_run.trace)
    res = _page(bert_run, tmp_path)
    # The model's file is the one whose code Dynamo compiled, modeling_bert.py, though it is installed; the
    # framework's files (transformers' utils, torch) form the library group after it.
    users = [s for s in res["sources"] if s["user"]]
    libs = [s for s in res["sources"] if not s["user"]]
    assert res["sources"][0]["path"].endswith("transformers/models/bert/modeling_bert.py")
    assert res["sources"][:len(users)] == users and libs
    assert any("/transformers/utils/" in s["path"] or "/torch/" in s["path"] for s in libs)
    (g,) = report.model["graphs"]
    # The survival table puts the model's rows first; the decorator lines of transformers/utils come later.
    flags = [r["user"] for r in g["survival"]]
    assert flags == sorted(flags, reverse=True)
    (r,) = res["graphs"]
    _check_headline(report, r, g)
    # Every kernel in the code view links to at least one source line, or the headline counts it as sourceless.
    bare = set(g["headline"]["sourceless_kernels"])
    for c in res["code"]:
        assert c["sources"] or c["kernel"] in bare or c["kernel"].split(" #")[0] in bare, c
    assert res["timing"]["click_max_ms"] < 1000
