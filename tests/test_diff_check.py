"""`prov-trace diff` and `prov-trace check` on real traces.

The two traces that differ are the reference MLP compiled with Inductor's
`debug_ir_traceback` off (the shared `mlp_run`) and on (`traceback_run`), which
turns the LoopLevelIR `traceback` field from empty to populated.
"""

from __future__ import annotations

import copy
import json
import os
import re

import pytest

from conftest import EXAMPLES, REPO, Run, cli
from prov_trace.report import check as chk
from prov_trace.report import diff as dif

SCRIPT = """\
import sys

import torch
import torch._inductor.config as inductor_config

sys.path.insert(0, sys.argv[1])
from reference_mlp import SimpleMLP

inductor_config.debug_ir_traceback = True
torch.manual_seed(0)
model = SimpleMLP()
with torch.no_grad():
    torch.compile(model)(torch.randn(2, 128))
"""


@pytest.fixture(scope="session")
def traceback_run(tmp_path_factory) -> Run:
    """The reference MLP compiled by a script with torch._inductor.config.debug_ir_traceback = True."""
    d = tmp_path_factory.mktemp("mlp_traceback")
    (d / "compile_mlp.py").write_text(SCRIPT)
    # prov-trace's own options go before the script; what follows it is the script's argv.
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), str(d / "compile_mlp.py"), str(EXAMPLES),
               cwd=d, check=True)
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


def test_diff_matches_a_source_file_at_another_path_and_lines_an_edit_moved(mlp_run, tmp_path):
    """A baseline trace from another checkout or machine names the model at another path, and an edit above a
    line moves it: both used to read as every source line removed and added, and 'No change' in survival
    meant no line had been compared at all."""
    copy_dir = tmp_path / "elsewhere"
    copy_dir.mkdir()
    text = (EXAMPLES / "reference_mlp.py").read_text()
    (copy_dir / "reference_mlp.py").write_text("# an edit above the model\n# moves every line down by two\n" + text)
    (tmp_path / "compile_mlp.py").write_text(SCRIPT)
    cli("run", "-q", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"),
        str(tmp_path / "compile_mlp.py"), str(copy_dir), cwd=tmp_path, check=True)
    proc = cli("diff", str(mlp_run.trace), str(tmp_path / "t.msgpack"), "-o", str(tmp_path / "d.json"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    (pair,) = d["files_paired"]
    assert pair["a"] == str(EXAMPLES / "reference_mlp.py") and pair["b"] == str(copy_dir / "reference_mlp.py")
    (g,) = d["graphs"]
    lines = {r["line"] for r in mlp_run.model()["graphs"][0]["survival"]}
    assert d["lines_moved"] == len(lines) and not g["survival_unmatched"], d["lines_moved"]
    # The same model: no source object, lineage edge or line's survival differs; the traceback field rose.
    assert g["objects"] == {} and g["edges"] == {"added": [], "removed": []} and g["survival"] == []
    assert [(r["field"], r["change"]) for r in g["fields"]] == [("traceback", "up"), ("traceback", "up")]
    md = cli("diff", str(mlp_run.trace), str(tmp_path / "t.msgpack"), check=True).stdout
    said = next(ln for ln in md.splitlines() if "each pair is compared as one file" in ln).replace("\\", "")
    assert said.endswith(f"`reference_mlp.py` (A: {pair['a']}, B: {pair['b']}).") and "5 source line(s)" not in said, said
    assert md.split("### Source lines whose survival moved", 1)[1].strip() == "No change."


def test_diff_pairs_files_of_one_name_by_the_path_they_end_with():
    """Two checkouts, each with `models/a/model.py` and `models/b/model.py`: the files were paired only when a
    name was unique on each side, so neither pair was compared. A tie still pairs nothing."""
    from prov_trace.report.diff import _pair_files

    a = {"/ci/x/models/a/model.py", "/ci/x/models/b/model.py", "/ci/x/train.py", "/same/util.py"}
    b = {"/home/y/src/models/a/model.py", "/home/y/src/models/b/model.py", "/home/y/src/train.py", "/same/util.py"}
    assert _pair_files(a, b) == {"/home/y/src/models/a/model.py": "/ci/x/models/a/model.py",
                                 "/home/y/src/models/b/model.py": "/ci/x/models/b/model.py",
                                 "/home/y/src/train.py": "/ci/x/train.py"}
    assert _pair_files({"/x/a/model.py", "/x/b/model.py"}, {"/y/c/model.py"}) == {}  # which one: no telling
    assert _pair_files({"/x/a/model.py"}, {"/y/c/model.py"}) == {"/y/c/model.py": "/x/a/model.py"}
    assert _pair_files({"C:\\w\\m\\model.py"}, {"/w/m/model.py", "/w/n/model.py"}) == {"/w/m/model.py": "C:\\w\\m\\model.py"}


def test_diff_a_line_whose_text_an_edit_changed_is_removed_and_added_not_the_same_line(mlp_run):
    """On the pure function: B's line 19 says something else than A's line 19 and matches no other line of A."""
    a = mlp_run.model()
    b = copy.deepcopy(a)
    row = next(r for r in b["graphs"][0]["survival"] if r["text"] == "x = self.fc1(x)")
    row["text"] = "x = self.fc0(x)"
    (g,) = dif.diff(a, b)["graphs"]
    name = f"{row['file']}:{row['line']}"
    assert g["objects"]["source"]["added"] == [f"{name} (B)"] and g["objects"]["source"]["removed"] == [name]
    assert all(e[0] == f"source:{name} (B)" for e in g["edges"]["added"]) and g["edges"]["added"]
    assert not any(s["line"] == row["line"] for s in g["survival"])  # not compared with A's line 19


def _cells(model, field):
    return next(r for r in model["graphs"][0]["matrix"] if r["field"] == field)["cells"]


def test_the_two_traces_differ_in_traceback_only(mlp_run, traceback_run):
    off, on = mlp_run.model(), traceback_run.model()
    for st in ("ir_pre", "ir_post"):
        assert (_cells(off, "traceback")[st]["state"], _cells(on, "traceback")[st]["state"]) == ("none", "all")


def test_diff_off_to_on_shows_traceback_rising(mlp_run, traceback_run):
    proc = cli("diff", str(mlp_run.trace), str(traceback_run.trace), "--fail-on-regression")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("# Provenance diff")
    assert "| IR | `traceback` | LoopLevelIR (pre-pass) | ❌ 0/3 | ✅ 3/3 | ▲ rose |" in out
    assert "| IR | `traceback` | LoopLevelIR (post-pass) | ❌ 0/3 | ✅ 3/3 | ▲ rose |" in out
    assert "0 graph(s) of A missing from B, 0 field population drop(s)" in out
    # Same model, same graph: no object added or removed, no survival moved.
    section = out.split("### Objects added and removed", 1)[1]
    assert section.split("###", 1)[0].strip() == "No change."
    assert out.split("### Source lines whose survival moved", 1)[1].strip() == "No change."


def test_diff_on_to_off_is_a_regression(mlp_run, traceback_run, tmp_path):
    proc = cli("diff", str(traceback_run.trace), str(mlp_run.trace), "--fail-on-regression")
    assert proc.returncode == 1
    assert "| IR | `traceback` | LoopLevelIR (pre-pass) | ✅ 3/3 | ❌ 0/3 | ▼ dropped |" in proc.stdout
    assert "2 regression(s): traceback at ir_pre" in proc.stderr
    # Without the flag a drop is reported, not failed.
    assert cli("diff", str(traceback_run.trace), str(mlp_run.trace)).returncode == 0
    # JSON and HTML, by suffix.
    proc = cli("diff", str(traceback_run.trace), str(mlp_run.trace), "-o", str(tmp_path / "d.json"))
    assert proc.returncode == 0, proc.stderr
    d = json.loads((tmp_path / "d.json").read_text())
    assert d["format"] == "prov-trace-diff"
    assert [(r["field"], r["stage"], r["a"]["n"], r["b"]["n"]) for r in d["regressions"]] == [
        ("traceback", "ir_pre", 3, 0), ("traceback", "ir_post", 3, 0)]
    proc = cli("diff", str(traceback_run.trace), str(mlp_run.trace), "--format", "html", "-o", str(tmp_path / "d.out"))
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "d.out").read_text()
    assert page.startswith("<!DOCTYPE html>") and "▼ dropped" in page and "<script" not in page


def test_diff_reports_objects_and_earlier_survival(mlp_run):
    """On the pure function: a model against a copy where a line's provenance ends earlier and a kernel is gone."""
    a = mlp_run.model()
    b = copy.deepcopy(a)
    g = b["graphs"][0]
    row = next(r for r in g["survival"] if r["text"] == "x = self.fc1(x)")
    row["last_stage"], row["lost_at"] = "ir_post", "kernel_spec"
    g["stages"]["kernel_spec"]["objects"] = [o for o in g["stages"]["kernel_spec"]["objects"] if o["name"] != "cpp_fused_relu_0"]
    d = dif.diff(a, b)
    (gd,) = d["graphs"]
    assert d["survival_earlier"] == 1
    assert [(s["line"], s["a"]["last_stage"], s["b"]["last_stage"], s["change"]) for s in gd["survival"]] == [
        (row["line"], "artifact", "ir_post", "earlier")]
    assert gd["objects"]["kernel_spec"]["removed"] == ["cpp_fused_relu_0"]
    text = dif.render(d, "md")
    assert "| Kernel spec | 3 | 2 |  | `cpp_fused_relu_0` |" in text
    assert re.search(r"`x = self.fc1\(x\)` \| Artifact \| LoopLevelIR \(post-pass\) \| survives \| Kernel spec \| ▼ earlier", text)
    # The HTML diff draws the same view: the first-lost columns and the lineage edges table too.
    gone = g["lineage"]["edges"].pop()
    d = dif.diff(a, b)
    page = dif.render(d, "html")
    md = dif.render(d, "md")
    for needle in ("A: first lost", "B: first lost", "Lineage edges", "0 added, 1 removed."):
        assert needle in page and needle in md, needle
    assert f"<td>removed</td><td><code>{gone['from']}</code></td><td><code>{gone['to']}</code></td>" in page


def test_diff_does_not_list_a_cell_that_is_not_applicable_on_both_sides(mlp_run):
    """➖ against ➖ is no change, whatever object counts the two graphs had there; ➖ against a measured
    cell still is one."""
    a = mlp_run.model()
    b = copy.deepcopy(a)
    row = next(r for r in b["graphs"][0]["matrix"] if r["field"] == "original_aten")
    cell = row["cells"]["pre_grad"]
    assert cell["state"] == "na"
    cell["total"] = cell.get("total", 0) + 2  # B's graph had two more nodes there
    assert not [f for f in dif.diff(a, b)["graphs"][0]["fields"] if f["field"] == "original_aten"]
    cell.update(state="none", n=0)
    (changed,) = [f for f in dif.diff(a, b)["graphs"][0]["fields"] if f["field"] == "original_aten"]
    assert changed["stage"] == "pre_grad" and changed["a"]["state"] == "na" and changed["b"]["state"] == "none"


def test_diff_bad_input_exits_2_with_one_sentence(mlp_run, tmp_path):
    not_trace = tmp_path / "notes.txt"
    not_trace.write_text("hello\n")
    for a, b in ((tmp_path / "missing.msgpack", mlp_run.trace), (mlp_run.trace, not_trace)):
        proc = cli("diff", str(a), str(b))
        assert proc.returncode == 2
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("prov-trace: error: "), proc.stderr
    proc = cli("diff", str(mlp_run.trace), str(mlp_run.trace), "-o", str(mlp_run.trace))
    assert proc.returncode == 2 and "overwrite" in proc.stderr


# --- check -----------------------------------------------------------------------------


def test_check_passes_and_fails_on_real_traces(mlp_run, traceback_run):
    ok = cli("check", str(mlp_run.trace), "--require", "kernel_spec:origins=all", "--require", "ir_pre:traceback=none",
             "--require", "post_grad:stack_trace=all", "--require", "source:file:line=all", "--require", "artifact:provenance_comment>=60%")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.splitlines()[-1] == "5 of 5 rules hold"
    bad = cli("check", str(mlp_run.trace), "--require", "post_grad:nn_module_stack>=0.9", "--require", "ir_post:traceback=any",
              "--require", "kernel_spec:origins=all")
    assert bad.returncode == 1
    # The post-grad compute nodes: permute, addmm, relu, permute_1, addmm_1; relu (a function call) has no module.
    assert "FAIL  post_grad:nn_module_stack>=0.9\n        graph 0/0 inference, FX post-grad: 4/5 populated (80%)" in bad.stdout
    assert "FAIL  ir_post:traceback=any\n        graph 0/0 inference, LoopLevelIR (post-pass): 0/3 populated (0%)" in bad.stdout
    assert "ok    kernel_spec:origins=all" in bad.stdout and "1 of 3 rules hold; 2 failed" in bad.stdout
    # With Inductor's IR traceback on, the same gate passes.
    on = cli("check", str(traceback_run.trace), "--require", "ir_post:traceback=any", "--require", "ir_pre:traceback=all")
    assert on.returncode == 0, on.stdout
    # A wildcard stage checks every stage that measures the field.
    star = cli("check", str(mlp_run.trace), "--require", "*:nn_module_stack>=75%")
    assert star.returncode == 1 and "FX pre-grad: 2/3" in star.stdout and "FX post-grad" not in star.stdout


@pytest.mark.parametrize("rule, says", [
    ("kernel_spec:no_such_field=all", "there is no field 'no_such_field'"),
    ("post_grad:origins=all", "origins is not measured at post_grad"),
    ("nowhere:origins=all", "there is no stage 'nowhere'"),
    ("post_grad:stack_trace>=1.5", "outside 0..1"),
    ("post_grad:stack_trace>=all", "takes '=' only"),
    ("post_grad:stack_trace=most", "is not all, any, none"),
    ("stack_trace", "cannot read the rule"),
])
def test_check_bad_rule_exits_2(mlp_run, rule, says):
    proc = cli("check", str(mlp_run.trace), "--require", rule)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and says in proc.stderr, proc.stderr


def test_check_bad_file_or_graph_exits_2(mlp_run, tmp_path):
    proc = cli("check", str(tmp_path / "none.msgpack"), "--require", "kernel_spec:origins=all")
    assert proc.returncode == 2 and "there is no file" in proc.stderr
    proc = cli("check", str(mlp_run.trace), "--require", "kernel_spec:origins=all", "--graph", "9/9 inference")
    assert proc.returncode == 2 and "there is no graph '9/9 inference'" in proc.stderr
    proc = cli("check", str(mlp_run.trace), "--require", "kernel_spec:origins=all", "--graph", "0/0 inference")
    assert proc.returncode == 0


def test_rule_semantics():
    r = chk.parse_rule("post_grad:stack_trace>=0.5")
    assert (r.stage, r.field, r.op, r.value) == ("post_grad", "stack_trace", ">=", 0.5)
    assert r.holds(1, 2) and not r.holds(4, 9)
    assert chk.parse_rule("source:file:line=all").field == "file:line"
    assert chk.parse_rule("x:y>=50%").value == 0.5
    assert chk.parse_rule("x:y = any").holds(1, 5) and not chk.parse_rule("x:y=any").holds(0, 5)
    assert chk.parse_rule("x:y==none").holds(0, 5)
    # A stage that fired with no objects: only none, < and <= hold.
    assert chk.parse_rule("x:y=none").holds(0, 0) and chk.parse_rule("x:y<0.5").holds(0, 0)
    assert not chk.parse_rule("x:y=all").holds(0, 0) and not chk.parse_rule("x:y>=0").holds(0, 0)


def test_check_doc_examples_parse():
    doc = (REPO / "docs" / "check.md").read_text().split("## Examples", 1)[1]
    rules = re.findall(r"--require '?([^'\s]+)'?", doc)
    assert len(rules) >= 4
    for rule in rules:
        chk.parse_rule(rule)


def test_help_states_exit_codes():
    for cmd, codes in (("diff", ("0 ", "1 ", "2 ")), ("check", ("0 ", "1 ", "2 "))):
        proc = cli(cmd, "--help")
        assert proc.returncode == 0
        tail = proc.stdout.split("Exit status:", 1)[1]
        for c in codes:
            assert re.search(rf"^\s+{c}", tail, re.M), (cmd, c, tail)
    assert "--format [auto|md|html|json]" in cli("report", "--help").stdout
    assert "--format [auto|md|html|json]" in cli("run", "--help").stdout


def test_diff_names_the_graph_breaks_gone_and_new(graph_break_run, mlp_run):
    """The graph break model against the reference MLP (no break): its print's break is gone in B, and new
    the other way round, each with Dynamo's reason. The diff said only that a graph of A was missing."""
    a, b = graph_break_run.model(), mlp_run.model()
    d = dif.diff(a, b)
    (gone,) = d["graph_breaks"]["removed"]
    assert (os.path.basename(gone["file"]), gone["line"], gone["compile_id"]) == ("graph_break.py", 22, "0/0"), gone
    assert gone["summary"] == a["graphs"][0]["graph_break"]["summary"] and d["graph_breaks"]["added"] == []
    text = dif.render(d, "md")
    assert "1 graph break(s) of A gone in B, 0 new in B" in text and "| ▲ gone | `graph_break.py:22` | 0/0 |" in text
    back = dif.diff(b, a)
    assert back["graph_breaks"] == {"removed": [], "added": [gone]}
    assert "| ▼ new | `graph_break.py:22` | 0/0 |" in dif.render(back, "md")
    # A trace against itself: no break is gone or new.
    assert dif.diff(a, a)["graph_breaks"] == {"removed": [], "added": []}


def test_check_on_a_run_with_no_graph_names_the_recompile_limit_it_stopped_at():
    """On the pure function: a run whose only compile hit the recompile limit (its earlier compiles ran before
    tracing started, as in a notebook) says so where it says the compile stopped."""
    stop = {"stage": "source", "target": "torch._dynamo.convert_frame:_compile"}
    limited = {"stopped_in": {**stop, "limit": {"name": "recompile_limit", "value": 8}}}
    raised = {"stopped_in": {**stop, "error": {"type": "torch._dynamo.exc.Unsupported", "text": "x"}}}
    model = {"not_returned": [stop], "frames_without_graph": [limited]}
    limit = "Dynamo hit torch._dynamo.config.recompile_limit (8), so it stopped compiling this frame"
    assert chk._stopped(model) == f" (the compile stopped inside _compile: {limit})"
    model["frames_without_graph"] = [raised, limited]
    assert chk._stopped(model) == f" (the compile stopped inside _compile: it raised Unsupported: x; {limit})"


def test_check_graph_breaks_counts_the_runs_break_sites_and_names_each(graph_break_run, mlp_run):
    """`graph_breaks<=N` gates CI on the graph breaks a run has: the break sites, each listed with the compiles it
    ended and Dynamo's reason when the rule fails."""
    bad = cli("check", str(graph_break_run.trace), "--require", "graph_breaks<=0", "--require", "graph_breaks=1")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    lines = bad.stdout.splitlines()
    assert lines[:3] == ["FAIL  graph_breaks<=0", "        1 graph break site:",
                         "          [0/0] graph break at graph_break.py:22 (in forward): Failed to trace builtin operator: "
                         "Dynamo does not know how to trace builtin operator `print` with argument types ['str'] "
                         "(has_kwargs False)"], bad.stdout
    assert "ok    graph_breaks=1  (1 graph break site)" in lines and lines[-1] == "1 of 2 rules hold; 1 failed"
    ok = cli("check", str(mlp_run.trace), "--require", "graph_breaks<=0", "--require", "kernel_spec:origins=all")
    assert ok.returncode == 0 and "ok    graph_breaks<=0  (0 graph break sites)" in ok.stdout, ok.stdout
    # --graph picks the graphs of matrix rules; the break count is the run's.
    one = cli("check", str(graph_break_run.trace), "--require", "graph_breaks<=0", "--graph", "1/0 inference")
    assert one.returncode == 1 and "1 graph break site:" in one.stdout
    # A count that is not a whole number is bad input.
    for rule in ("graph_breaks<=x", "graph_breaks<=0.5"):
        proc = cli("check", str(mlp_run.trace), "--require", rule)
        assert proc.returncode == 2 and "is not a count: graph_breaks takes a whole number" in proc.stderr, proc.stderr


def test_check_graph_breaks_fails_on_a_trace_that_did_not_watch_them(graph_break_run):
    """A trace whose break hook did not resolve (an older prov-trace, a torch where it drifted) cannot say the run
    had no break: the rule fails rather than count zero."""
    model = copy.deepcopy(graph_break_run.model())
    model["hooks"] = [h for h in model["hooks"] if h.get("stage") != "graph_break"]
    (res,) = chk.check(model, [chk.parse_rule("graph_breaks<=5")])
    assert not res["holds"] and res["failures"][0]["why"].startswith("graph breaks were not watched in this trace")
