"""Count what the seed counts, and label what really happened (issue 18), on real compiles.

The seed's audit counts FX compute nodes; cells for a field the pipeline cannot
have created yet read "–"; lineage names a fusion only where a kernel holds
several IR ops. Every number here is measured from a real run.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import prov_trace
from conftest import cli
from prov_trace.report import lineage
from prov_trace.stream import schema as S


def _graph(run, label="0/0 inference"):
    report = prov_trace.load(run.trace)
    return report, next(g for g in report.model["graphs"] if g["label"] == label)


def test_fx_cells_count_compute_nodes_and_placeholders_apart(mlp_run):
    report, g = _graph(mlp_run)
    cells = report.matrix("0/0 inference")
    # The CPU MLP's post-grad graph: permute, addmm, relu, permute_1, addmm_1 compute; all carry a stack trace.
    assert cells["stack_trace"]["post_grad"] == {"state": "all", "n": 5, "total": 5}
    assert [o["name"] for o in g["stages"]["post_grad"]["objects"]] == ["permute", "addmm", "relu", "permute_1", "addmm_1"]
    boundary = g["stages"]["post_grad"]["boundary"]
    assert len(boundary) == 6 and {o["kind"] for o in boundary} == {"placeholder", "output"}
    assert cells["stack_trace"]["pre_grad"] == {"state": "all", "n": 3, "total": 3}
    assert g["moved"] == []  # no pass gives a node of the MLP another line
    assert "ok    moved_nodes<=0  (0 moved nodes)" in report.check("moved_nodes<=0").text
    # The rule `check` applies is the same: a fully populated graph passes.
    assert report.check("post_grad:stack_trace=all", "pre_grad:stack_trace>=0.5").ok
    # The run's summary and the Markdown count them apart too.
    line = next(ln for ln in report.summary_lines() if ln.strip().startswith("FX post-grad"))
    assert line.endswith("5 objects (+6 placeholders and outputs)"), line
    assert "| 0/0 inference: placeholders and outputs |  | 6 | 6 |" in report.to_markdown()


def test_a_field_that_cannot_exist_yet_is_not_a_drop(mlp_run):
    report, g = _graph(mlp_run)
    cells = report.matrix("0/0 inference")
    for field in ("original_aten", "from_node"):
        pre = cells[field]["pre_grad"]
        assert pre["state"] == "na" and pre["n"] == 0 and pre["total"] == 3, (field, pre)
        assert "AOT autograd" in pre["reason"] or "pass" in pre["reason"]
        assert cells[field]["post_grad"]["state"] == "all"
    md = report.to_markdown()
    assert "- `original_aten` at FX pre-grad: set when AOT autograd traces the graph into ATen ops" in md
    # Source, Dynamo graph, FX pre-grad (not yet), AOT graph, FX post-grad.
    assert "| FX | `original_aten` | ➖ | ➖ | ➖ | ✅ 5/5 | ✅ 5/5 |" in md
    result = prov_trace.load(mlp_run.trace).check
    try:
        result("pre_grad:original_aten=all")
    except prov_trace.UsageError as exc:
        assert "original_aten cannot exist yet at pre_grad" in str(exc)
    else:
        raise AssertionError("a rule on a field that cannot exist yet must be refused")


def test_profile_only_rows_show_only_for_their_profile(mlp_run):
    report, g = _graph(mlp_run)
    assert "debug_handle" not in report.matrix("0/0 inference")
    assert "`debug_handle`" not in report.to_markdown()
    try:
        report.check("kernel_spec:debug_handle=all")
    except prov_trace.UsageError as exc:
        assert "debug_handle is measured only with the spyre profile, and this trace used inductor-cpu" in str(exc)
    else:
        raise AssertionError("a spyre-only rule on a CPU trace must say so")


def test_lineage_labels_what_the_trace_shows_and_agrees_with_survival(mlp_run):
    _, g = _graph(mlp_run)
    lin = g["lineage"]
    edges = {(e["from"], e["to"]): e["via"] for e in lin["edges"]}
    # relu is buf1's origin_node; in buf2's origins only as an input Inductor realised.
    assert edges[("post_grad:relu", "ir_pre:buf1")] == "origin_node"
    assert edges[("post_grad:relu", "ir_pre:buf2")] == "also_in_origins"
    assert edges[("post_grad:addmm_1", "ir_pre:buf2")] == "origin_node"
    # No decomposition of relu, no fusion anywhere: each kernel holds one IR op.
    assert not lin["fusions"]
    assert [(d["from"], sorted(d["to"])) for d in lin["decompositions"]] == [
        ("pre_grad:x", ["post_grad:addmm", "post_grad:permute"]),
        ("pre_grad:x_2", ["post_grad:addmm_1", "post_grad:permute_1"])]
    assert {(tuple(sorted(a["from"])), a["to"]) for a in lin["also_in_origins"]} == {
        (("post_grad:permute",), "ir_pre:buf0"), (("post_grad:permute_1", "post_grad:relu"), "ir_pre:buf2")}
    # The lineage of each line matches the survival table at every stage up to the kernel spec.
    for row in g["survival"]:
        start = f"source:{row['file']}:{row['line']}"
        reached = lineage.reach(lin, start)
        for st in (S.PRE_GRAD, S.POST_GRAD, S.IR_PRE, S.IR_POST, S.KERNEL_SPEC):
            flowed = sorted(n.split(":", 1)[1] for n in reached if n.startswith(st + ":"))
            assert flowed == sorted(row["carriers"].get(st, [])), (row["text"], st, flowed, row["carriers"].get(st))
    relu = next(r for r in g["survival"] if r["text"] == "x = torch.relu(x)")
    assert relu["carriers"]["ir_pre"] == ["buf1"] and relu["carriers"]["kernel_spec"] == ["cpp_fused_relu_0"]


def test_survival_rows_say_what_they_are(mlp_run, graph_break_run):
    _, g = _graph(mlp_run)
    ret = next(r for r in g["survival"] if r["text"] == "return x")
    assert ret["note"] == "no op on this line" and ret["lost_at"] is None and ret["lost_by"] == []
    report = prov_trace.load(graph_break_run.trace)
    first, second = report.model["graphs"]
    # Lines after the break are compiled into graph 1/0: graph 0/0 says so instead of "first lost".
    rows = {r["text"]: r for r in first["survival"]}
    for text in ("x = self.fc2(x)", "x = x * 2.0"):
        assert rows[text]["note"] == "in graph 1/0 inference" and rows[text]["lost_at"] is None, rows[text]
    # The line with the break runs in Python, between the graphs: each graph says so (Dynamo named graph 1/0's
    # function for it), neither counts it as a line of its own that a stage lost.
    for g in (first, second):
        brk = next(r for r in g["survival"] if r["text"].startswith("print("))
        assert brk["note"] == "graph break: runs in Python" and brk["last_stage"] is None, brk
        assert brk["lost_at"] is None and brk["lost_by"] == []
        assert g["headline"]["lines"] == 2, g["headline"]
        assert not any(loss["lines"] == [{"file": brk["file"], "line": brk["line"]}] for loss in g["losses"]), g["losses"]
    assert [n for n in first["notes"] if "graph break" in n] == [
        "graph_break.py:22 is a graph break: Dynamo runs that line in Python, so no stage carries it, "
        "and graph 1/0 inference resumes after it."]
    assert any(n.endswith("and this graph resumes after it.") for n in second["notes"]), second["notes"]
    # Why Dynamo broke there, as Dynamo said it when it ended graph 0/0 (its GraphCompileReason): the graph
    # that ended at the break carries it; the graph that resumes after it names it in its note.
    brk = first["graph_break"]
    assert brk["summary"].startswith("Failed to trace builtin operator: Dynamo does not know how to trace builtin "
                                     "operator `print`"), brk
    assert (os.path.basename(brk["stack"][-1]["file"]), brk["stack"][-1]["line"], brk["stack"][-1]["func"]) == (
        "graph_break.py", 22, "forward"), brk["stack"]
    assert second["graph_break"] is None  # it ended at the frame's return
    assert [n for n in second["notes"] if "graph break" in n] == [
        f"graph_break.py:22 is a graph break (Dynamo: {brk['summary']}): Dynamo runs that line in Python, so no stage "
        "carries it, and this graph resumes after it."]
    md = report.to_markdown()
    assert ("Dynamo ended this graph at a graph break, at `graph_break.py:22 (in forward)`: Failed to trace builtin "
            "operator: Dynamo does not know how to trace builtin operator \\`print\\`") in md
    # The run's summary names it: --quiet silences the live progress, not this.
    assert ("  [0/0] graph break at graph_break.py:22 (in forward): Failed to trace builtin operator: Dynamo does "
            "not know how to trace builtin operator `print`") in graph_break_run.proc.stdout
    assert "| in graph 1/0 inference | — |" in md
    assert "| no op on this line | — |" in md
    assert "| graph break: runs in Python | — |" in md and "never attached" not in md
    # The Hooks table tells calls from records: the recompile limit's hook ran at both compiles and wrote
    # nothing (it read as a compile error that "fired" twice); the graph break hook wrote one of its calls.
    hooks = {h["target"].rpartition(":")[2]: h for h in report.model["hooks"]}
    limit, ended = hooks["exceeds_recompile_limit"], hooks["OutputGraph.compile_subgraph"]
    assert (limit["fired"], limit["records"]) == (2, 0) and (ended["fired"], ended["records"]) == (2, 1), hooks
    compiled = hooks["OutputGraph._call_user_compiler"]
    assert compiled["records"] == compiled["fired"] == 2, compiled
    assert "| `torch._dynamo.cache_size:exceeds_recompile_limit` | Compile error | return | ✅ | ✅ | 2 | 0 | 0 |" in md


def test_from_node_actions_read_as_torch_prints_them(mlp_run):
    """torch 2.6+ keeps a NodeSource's action as a list of enum members; the trace records the names."""
    from prov_trace.stream.reader import read_trace

    actions = []

    def walk(items):
        for item in items or ():
            actions.append(item["action"])
            walk(item.get("from_node"))

    for r in read_trace(mlp_run.trace).records:
        if r["kind"] == S.PROBE and r["stage"] == "post_grad":
            for node in r["payload"]["nodes"]:
                walk(node["fields"]["from_node"]["value"])
    assert actions, "the MLP's post-grad nodes carry from_node"
    assert set(actions) <= {"", "create", "replace", "create+replace"}, set(actions)
    assert "create" in actions or "replace" in actions


TRAIN_STEP = """\
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)


@torch.compile
def train_step(x, y):
    opt.zero_grad(set_to_none=True)
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss


x, y = torch.randn(8, 8), torch.randint(0, 2, (8,))
for i in range(2):
    print(i, round(train_step(x, y).item(), 4))
"""


def test_a_compiled_train_step_counts_its_breaks_and_torchs_lines_as_no_loss(tmp_path):
    """A whole train step under torch.compile: `loss.backward()` and `opt.step()` break the graph, and the frames
    after them compile no graph; the optimizer's own graph is torch/optim code. Those rows were ranked as the
    step's worst losses ("never attached -> Dynamo graph"), and adam.py's lines counted as the model's."""
    (tmp_path / "step.py").write_text(TRAIN_STEP)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "step.py", cwd=tmp_path,
               env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    model = prov_trace.load(tmp_path / "t.msgpack").model
    fwd = next(g for g in model["graphs"] if g["label"].endswith("forward"))
    rows = {r["text"]: r for r in fwd["survival"]}
    for text in ("loss.backward()", "opt.step()"):
        assert rows[text]["note"] == "graph break: runs in Python" and rows[text]["lost_at"] is None, rows[text]
    assert any("(which compiled no graph) resumes after it." in n for n in fwd["notes"]), fwd["notes"]
    lost = [ln["line"] for loss in fwd["losses"] for ln in loss["lines"]]
    assert rows["loss.backward()"]["line"] not in lost and rows["opt.step()"]["line"] not in lost
    assert fwd["headline"]["reached"]["dynamo_graph"] == fwd["headline"]["lines"], fwd["headline"]
    # The optimizer's graph is torch's code through and through: none of its lines is the model's.
    for g in model["graphs"]:
        assert not any(r["user"] for r in g["survival"] if "torch" + os.sep + "optim" in str(r["file"])), g["label"]


REUSED_KERNEL = """\
import torch
import torch._inductor.config as c
c.trace.provenance_tracking_level = 1
def f(x, w):
    a = x @ w
    a = torch.tanh(a) + a
    a = a @ w
    b = torch.tanh(a) + a
    return b
def g(x, w):  # the same ops, compiled with a C++ wrapper: the module embeds its wrapper and kernels as C++
    a = x @ w
    a = torch.tanh(a) + a
    a = a @ w
    b = torch.tanh(a) + a
    return b
print(torch.compile(f)(torch.randn(4, 4), torch.randn(4, 4)).shape)
with c.patch(cpp_wrapper=True):
    print(torch.compile(g)(torch.randn(4, 4), torch.randn(4, 4)).shape)
"""


def test_a_kernel_inductor_reuses_is_one_artifact_object_per_use_and_cpp_wrapper_code_is_read(tmp_path):
    """Lines 6 and 8 lower to the same code, so Inductor defines one kernel and calls it twice. The second use
    was the kernel spec's `#2` with no artifact object of that name: line 8 read as lost at the artifact though
    the emitted file comments its call. Under cpp_wrapper the module holds C++ in a string, which was not read:
    every line read as lost at the artifact."""
    (tmp_path / "reuse.py").write_text(REUSED_KERNEL)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "reuse.py", cwd=tmp_path,
               env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = prov_trace.load(tmp_path / "t.msgpack")
    g, cpp = report.model["graphs"]
    assert (g["label"], cpp["label"]) == ("0/0 inference", "1/0 inference")
    _assert_reuse_read(report, g, first_line=6)
    _assert_reuse_read(report, cpp, first_line=12)
    # The C++ wrapper's calls are C++: the shim's aoti_torch_cpu_mm_out for the matmuls, with their // comments.
    art = cpp["stages"][S.ARTIFACT]["objects"]
    assert [o["name"] for o in art if o["kind"] == "extern"] == ["aoti_torch_cpu_mm_out", "aoti_torch_cpu_mm_out #2"]
    assert all(c.startswith("// ") for o in art for c in o["provenance_comments"])
    assert cpp["headline"]["reached"][S.ARTIFACT] == cpp["headline"]["lines"] == 4, cpp["headline"]


def _assert_reuse_read(report, g, first_line):
    spec = [o["name"] for o in g["stages"][S.KERNEL_SPEC]["objects"] if o["kind"] == "generated"]
    assert len(spec) == 2 and spec[1] == f"{spec[0]} #2", spec
    art = {o["name"]: o for o in g["stages"][S.ARTIFACT]["objects"] if o["kind"] == "generated"}
    first, second = art[spec[0]], art[spec[1]]
    assert first["def_line"] == second["def_line"] and first["call_lines"][0] < second["call_lines"][0]
    assert second.get("reused") and not first.get("reused")
    # Each use carries the debug handle at its own call, not the other's.
    assert first["provenance_comments"] != second["provenance_comments"]
    assert all(c.endswith(f"{second['kernel']}:{c.rsplit(':', 1)[1]}") for c in second["provenance_comments"])
    rows = {r["line"]: r for r in g["survival"]}
    last = rows[first_line + 2]  # the reused kernel's second use
    assert last["last_stage"] == S.ARTIFACT and last["lost_at"] is None, last
    assert last["counts"][S.ARTIFACT] == 1 and g["losses"] == []
    edges = {(e["from"], e["to"], e["via"]) for e in g["lineage"]["edges"]}
    assert (lineage.node_id(S.KERNEL_SPEC, spec[1]), lineage.node_id(S.ARTIFACT, spec[1]), "name") in edges
    assert f"| `{spec[1]}` | generated, reused | {second['def_line']} |" in report.to_markdown()


VIEWS_INTO_AN_EXTERN_KERNEL = """\
import torch
import torch.nn.functional as F
from torch import nn
qkv, out, drop = nn.Linear(32, 96), nn.Linear(32, 32), nn.Dropout(0.1).eval()
def attend(x):
    q, k, v = (t.view(2, 8, 4, 8).transpose(1, 2) for t in qkv(x).chunk(3, dim=-1))
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    y = y.transpose(1, 2).reshape(2, 8, 32)
    z = drop(x)
    return out(y) + z
with torch.no_grad():
    print(torch.compile(attend)(torch.randn(2, 8, 32)).shape)
"""


def test_a_line_whose_views_an_extern_kernel_reads_through_names_that_kernel_and_a_no_op_says_so(tmp_path):
    """Line 8's permute and view make no IR op: the addmm of line 10 reads through them, and its ExternKernelOut
    lists them in its origins. Inductor takes an extern kernel's stack traces from its origin_node alone, so
    the buffer carries line 10 only. Line 9's dropout, in eval, is a clone that Inductor's remove_noop_ops drops
    at post-grad. Both losses were ranked as 'removed: no object here comes from the line's carriers', which
    the first one's origins contradict and which says nothing of the second's no-op."""
    (tmp_path / "attend.py").write_text(VIEWS_INTO_AN_EXTERN_KERNEL)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "attend.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (g,) = prov_trace.load(tmp_path / "t.msgpack").model["graphs"]
    row = next(r for r in g["survival"] if r["line"] == 8)
    assert (row["last_stage"], row["lost_at"]) == (S.POST_GRAD, S.IR_PRE), row
    (name,) = row["lost_by"]
    op = next(o for o in g["stages"][S.IR_PRE]["objects"] if o["name"] == name)
    assert op["kind"] == "ExternKernelOut" and set(row["carriers"][S.POST_GRAD]) <= set(op["origins"]), op
    assert op["origin_node"] not in row["carriers"][S.POST_GRAD]
    assert [s["line"] for s in op["sources"]] == [10], op["sources"]
    (loss,) = [loss for loss in g["losses"] if {"file": row["file"], "line": 8} in loss["lines"]]
    assert loss["kind"] == ("buffer ExternKernelOut: the line's nodes are in its origins, not in its stack traces, "
                            "which follow its origin_node alone"), loss
    assert loss["objects"] == [name]
    drop = next(r for r in g["survival"] if r["line"] == 9)
    assert (drop["last_stage"], drop["lost_at"], drop["lost_by"]) == (S.AOT_GRAPH, S.POST_GRAD, []), drop
    (clone,) = [o for o in g["stages"][S.AOT_GRAPH]["objects"] if o["name"] in drop["carriers"][S.AOT_GRAPH]]
    assert clone["target"] == "aten.clone.default", clone
    (loss,) = [loss for loss in g["losses"] if {"file": row["file"], "line": 9} in loss["lines"]]
    assert loss["kind"].startswith("no-op: each of the line's ops is one Inductor's post-grad pass "
                                   "remove_noop_ops drops"), loss


RANDOM_SEEDS = """\
import torch
import torch.nn.functional as F
def noisy(x):
    return F.dropout(x.sin(), 0.5, training=True).sum()
with torch.no_grad():
    print(torch.compile(noisy)(torch.randn(64)).shape)
"""


def test_the_random_seeds_call_is_an_artifact_kernel_and_its_empty_comment_is_no_provenance(tmp_path):
    """A graph with a random op gets Inductor's seeds: `aten.randint.low_out(..., out=buf0)`, called through
    the module's `aten = torch.ops.aten`, under a comment that names no node. The artifact scan took only
    `extern_kernels.*` and `torch.ops.*` calls, so the emitted file read one kernel short of the kernel spec;
    and the comment would have counted as provenance. The headline's verb agrees with its one kernel."""
    (tmp_path / "noisy.py").write_text(RANDOM_SEEDS)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "noisy.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    spec = {o["name"]: o for o in g["stages"][S.KERNEL_SPEC]["objects"]}
    art = {o["name"]: o for o in g["stages"][S.ARTIFACT]["objects"]}
    assert set(art) == set(spec), (sorted(art), sorted(spec))
    seeds = art["aten.randint.low_out"]
    assert seeds["kind"] == "fallback" and seeds["call_lines"], seeds
    assert seeds["provenance_comments"] == ["# Topologically Sorted Source Nodes: [], Original ATen: []"], seeds
    assert seeds["fields"]["provenance_comment"]["populated"] is False
    # The same comment in a C++ wrapper (cpp_wrapper, AOTInductor) is `//`.
    assert S.names_nothing("// Topologically Sorted Source Nodes: [], Original ATen: []")
    assert not S.names_nothing("// Topologically Sorted Source Nodes: [h], Original ATen: [aten.addmm]")
    assert spec["aten.randint.low_out"]["sources"] == []
    assert g["headline"]["sourceless_kernels"] == ["aten.randint.low_out"]
    assert f"1 of {len(spec)} kernels carries no source at all: `aten.randint.low_out`." in report.to_markdown()
    edges = {(e["from"], e["to"], e["via"]) for e in g["lineage"]["edges"]}
    assert (lineage.node_id(S.KERNEL_SPEC, "aten.randint.low_out"),
            lineage.node_id(S.ARTIFACT, "aten.randint.low_out"), "name") in edges


MUTATING_CUSTOM_OP = """\
import torch
@torch.library.custom_op("provtest::scale", mutates_args=())
def scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s
@scale.register_fake
def _(x, s):
    return torch.empty_like(x)
@torch.library.custom_op("provtest::bump_", mutates_args=("x",))
def bump_(x: torch.Tensor) -> None:
    x.add_(1)
@torch.compile
def f(x):
    y = scale(x.sin(), 2.0)
    z = y.clone()
    bump_(z)
    return z.cos()
print(f(torch.randn(4)))
"""


def test_a_node_a_pass_gives_another_line_is_listed_where_provenance_moves(tmp_path):
    """A custom op whose output is cloned and then mutated by another custom op: Inductor's post-grad passes rebuild
    the first op's node (the same name and op) with the second's line, 13 -> 15. Line 13 survives through `sin`,
    so no loss or survival row showed that the op now names the wrong line."""
    from jsonschema_subset import validate

    (tmp_path / "cop.py").write_text(MUTATING_CUSTOM_OP)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "cop.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = prov_trace.load(tmp_path / "t.msgpack")
    (g,) = report.model["graphs"]
    path = str(tmp_path / "cop.py")
    assert g["moved"] == [{"name": "scale", "target": "provtest.scale.default", "from": S.AOT_GRAPH, "to": S.POST_GRAD,
                           "was": [{"file": path, "line": 13}], "now": [{"file": path, "line": 15}]}], g["moved"]
    # The rebuilt node's from_node names the other op's node: the pass's own record agrees with the move.
    edges = {(e["from"], e["to"], e["via"]) for e in g["lineage"]["edges"]}
    assert (lineage.node_id(S.PRE_GRAD, "bump__default"), lineage.node_id(S.POST_GRAD, "scale"), "from_node") in edges
    assert next(r for r in g["survival"] if r["line"] == 13)["lost_at"] == S.ARTIFACT  # line 13 lives on in `sin`
    md = report.to_markdown()
    assert ("1 node names another line after a pass than before it (Where provenance moves to another line, "
            "below): `scale`.") in md
    assert "| `scale` | `provtest.scale.default` | AOT graph → FX post-grad | `" in md
    schema = json.loads((Path(__file__).resolve().parent.parent / "docs" / "report.schema.json").read_text())
    assert validate(json.loads(report.to_json()), schema) == []
    # A CI gate on it: `moved_nodes<=0` fails and names the node, its op and its lines.
    gate = report.check("moved_nodes<=0")
    assert not gate.ok
    assert ("[0/0 inference] scale (provtest.scale.default): cop.py:13 at AOT graph, cop.py:15 at FX post-grad"
            in gate.text), gate.text
    assert report.check("moved_nodes<=1").ok
    # And `diff`: B's new moved node is a regression (`--fail-on-regression`), one gone in B a fix. A is the same
    # run's model without it (diff is a pure function of two models).
    import copy

    from prov_trace.report import diff as _diff

    before = copy.deepcopy(report.model)
    before["graphs"][0]["moved"] = []
    d = _diff.diff(before, report.model)
    (reg,) = [r for r in d["regressions"] if r["kind"] == "moved"]
    assert _diff.describe(reg) == ("node scale (provtest.scale.default) names another line from post_grad on in "
                                   "graph 0/0 inference")
    assert d["graphs"][0]["moved"] == {"added": g["moved"], "removed": []}
    assert "| ▼ new | `scale` | `provtest.scale.default` | AOT graph → FX post-grad | `cop.py:13` | `cop.py:15` |" in \
        _diff.render(d, "md")
    back = _diff.diff(report.model, before)
    assert not [r for r in back["regressions"] if r["kind"] == "moved"]
    assert back["graphs"][0]["moved"] == {"added": [], "removed": g["moved"]}


TRACED_TO_NOTHING = """\
import torch
from torch import nn
class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(8, 8) for _ in range(3))
    def forward(self, x):
        x = x.to(torch.float32)
        for layer in self.layers[:2]:
            x = layer(x)
        return x.contiguous().relu()
with torch.no_grad():
    print(torch.compile(Stack())(torch.randn(2, 8)).shape)
"""


def test_a_line_aot_traces_to_nothing_says_why(tmp_path):
    """`x.to(torch.float32)` on a float32 tensor returns x, and slicing a ModuleList builds a new one whose
    __init__ logs API usage (`torch._C._log_api_usage_once`, which Dynamo keeps): AOT autograd's trace makes no op
    of either. Both read as "removed: no object here comes from the line's carriers" (as in a tiny Llama's
    RMSNorm, rotary embedding and layer loop)."""
    (tmp_path / "stack.py").write_text(TRACED_TO_NOTHING)
    proc = cli("run", "-q", "--report", "r.md", "-o", "t.msgpack", "stack.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (g,) = prov_trace.load(tmp_path / "t.msgpack").model["graphs"]
    kinds = {ln["line"]: loss["kind"] for loss in g["losses"] for ln in loss["lines"]}
    assert kinds[8] == ("traced to nothing: each of the line's nodes is a tensor method (to) that returns its input "
                        "when the tensor already has the dtype, device or layout it asks for, so AOT autograd's trace "
                        "records no op for it"), kinds
    assert kinds[9] == ("traced to nothing: the line's nodes are calls that make no tensor "
                         "(torch._C._log_api_usage_once), which AOT autograd runs as it traces"), kinds
    # `.contiguous()` shares line 11 with a relu, which carries it on: not lost at the AOT graph.
    assert not kinds.get(11, "").startswith("traced to nothing"), kinds
    row = next(r for r in g["survival"] if r["line"] == 8)
    assert (row["last_stage"], row["lost_at"]) == (S.PRE_GRAD, S.AOT_GRAPH), row


def test_folded_by_freezing_needs_frozen_constants_and_no_path_to_a_runtime_input():
    """The rule behind 'folded into a constant', on hand-made graphs (the real compile is in
    test_backends_export): every name must resolve, and none of the line's AOT nodes may reach an input the
    post-grad graph still takes."""
    from prov_trace.report.model import _folded_by_freezing

    def node(name, kind="call_function", target="aten.mul.Tensor", inputs=()):
        return {"name": name, "kind": kind, "target": target, "inputs": list(inputs)}

    aot = {"objects": [node("mul", inputs=["arg0_1"]), node("add", inputs=["mul", "arg1_1"]), node("odd", inputs=["ghost"])],
           "boundary": [node("arg0_1", "placeholder", "arg0_1"), node("arg1_1", "placeholder", "arg1_1")]}
    frozen = {"boundary": [node("arg1_1", "placeholder", "arg1_1"), node("c", "get_attr", "_frozen_param3")]}
    unfrozen = {"boundary": [node("arg1_1", "placeholder", "arg1_1"), node("arg0_1", "get_attr", "fc.weight")]}

    def g(post):
        return {"stages": {S.AOT_GRAPH: aot, S.POST_GRAD: post}}

    def row(*names):
        return {"last_stage": S.AOT_GRAPH, "carriers": {S.AOT_GRAPH: list(names)}}

    assert _folded_by_freezing(g(frozen), row("mul"))            # a parameter only: folded
    assert not _folded_by_freezing(g(frozen), row("add"))        # reads arg1_1, still an input at run time
    assert not _folded_by_freezing(g(frozen), row("odd"))        # an input the trace does not name: not known
    assert not _folded_by_freezing(g(unfrozen), row("mul"))      # no frozen constant: freezing did not run
    assert not _folded_by_freezing(g(frozen), row())             # nothing carried it
    assert not _folded_by_freezing(g(frozen), {**row("mul"), "last_stage": S.PRE_GRAD})
    wide = {**aot, "objects": [node("cat", inputs=["arg0_1"] * 256)]}
    assert not _folded_by_freezing({"stages": {S.AOT_GRAPH: wide, S.POST_GRAD: frozen}}, row("cat"))  # inputs cut


def test_graph_break_summary_is_dynamos_first_line_and_its_explanation():
    """Dynamo's reasons come in two shapes: a summary line with an indented explanation, hints and debug context
    (the real one is read in test_survival_rows_say_what_they_are), and a single line that some still are."""
    from prov_trace.report.text import graph_break_summary

    assert graph_break_summary({"reason": "generic_jump TensorVariable()"}) == "generic_jump TensorVariable()"
    assert graph_break_summary({"reason": "Skip calling `torch.compiler.disable()`d function\n  Explanation: Skip "
                                          "calling function `helper` since it was wrapped\n  Hint: Remove it\n"}) == (
        "Skip calling `torch.compiler.disable()`d function: Skip calling function `helper` since it was wrapped")
    assert graph_break_summary({"reason": "\n\n  "}) is None and graph_break_summary({"reason": None}) is None
    assert graph_break_summary(None) is None and graph_break_summary({}) is None
    long = graph_break_summary({"reason": "x" * 250 + "\n  Explanation: " + "y" * 500})
    assert len(long) == 401 and long.endswith("…")
