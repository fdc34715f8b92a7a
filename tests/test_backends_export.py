"""Every way a user compiles (issue 16), each on a real compile of the reference MLP, with matrix values asserted.

- backend="aot_eager" with a backward: the Dynamo graph and AOT's forward and backward graphs are measured;
  Inductor's stages are ➖ "not on this compile's path (backend: aot_eager)", in the summary, Markdown and HTML.
- a user's backend function: the Dynamo graph, named by the function.
- torch.export + AOTInductor, by `prov-trace run examples/export_aoti.py`: Source from the export, the
  export graph, Inductor's stages, the artifact from the C++ AOTInductor wrote, and Inductor's own record agrees.
- dynamic=True; mark_dynamic with mode="max-autotune-no-cudagraphs"; a recompile for a new shape.

Each compile runs once per session (the fixtures below); the in-process ones through `prov_trace.trace()`.
Values were measured on torch 2.13.0 (the main test interpreter).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, Run, cli, unknown_wrapper_ops
from inductor_trace import assert_matches_inductor

from prov_trace.stream import schema as S

pytestmark = pytest.mark.compile

OFF = "not on this compile's path (backend: {})"
INDUCTOR = ("pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact")
FX = ("stack_trace", "nn_module_stack", "source_fn_stack", "original_aten", "from_node")


def my_backend(gm, example_inputs):
    """A user's backend: runs Dynamo's graph as it is."""
    return gm.forward


def _trace(tmp_path_factory, name: str, body):
    import torch

    import prov_trace
    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace

    sys.path.insert(0, str(EXAMPLES))
    from reference_mlp import SimpleMLP

    d = tmp_path_factory.mktemp(name)
    torch._dynamo.reset()
    torch.manual_seed(0)
    with prov_trace.trace(d / "t.msgpack", profile="inductor-cpu", log=lambda m: None):
        body(torch, SimpleMLP())
    torch._dynamo.reset()
    return d / "t.msgpack", build(read_trace(d / "t.msgpack"))


@pytest.fixture(scope="session")
def aot_eager_train(tmp_path_factory):
    def body(torch, m):
        torch.compile(m, backend="aot_eager")(torch.randn(2, 128)).sum().backward()
    return _trace(tmp_path_factory, "aot_eager", body)


@pytest.fixture(scope="session")
def user_backend(tmp_path_factory):
    def body(torch, m):
        with torch.no_grad():
            torch.compile(m, backend=my_backend)(torch.randn(2, 128))
    return _trace(tmp_path_factory, "user_backend", body)


@pytest.fixture(scope="session")
def recompiled(tmp_path_factory):
    def body(torch, m):
        c = torch.compile(m, backend="aot_eager")
        with torch.no_grad():
            c(torch.randn(2, 128))
            c(torch.randn(3, 128))  # a new batch size: Dynamo recompiles, with the batch now symbolic
    return _trace(tmp_path_factory, "recompile", body)


@pytest.fixture(scope="session")
def dynamic(tmp_path_factory):
    def body(torch, m):
        with torch.no_grad():
            torch.compile(m, dynamic=True)(torch.randn(2, 128))
    return _trace(tmp_path_factory, "dynamic", body)


@pytest.fixture(scope="session")
def marked_autotune(tmp_path_factory):
    def body(torch, m):
        x = torch.randn(4, 128)
        torch._dynamo.mark_dynamic(x, 0)
        with torch.no_grad():
            torch.compile(m, mode="max-autotune-no-cudagraphs")(x)
    return _trace(tmp_path_factory, "marked_autotune", body)


@pytest.fixture(scope="session")
def export_aoti(tmp_path_factory) -> Run:
    d = tmp_path_factory.mktemp("export_aoti")
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), str(EXAMPLES / "export_aoti.py"),
               str(d / "mlp.pt2"), cwd=d, check=True,
               env={"INDUCTOR_PROVENANCE": "1", "TORCH_TRACE": str(d / "torch_trace"), "TORCHINDUCTOR_COMPILE_THREADS": "1"})
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="session")
def two_exports(tmp_path_factory):
    """Two programs exported (the second strict, which runs Dynamo inside torch.export), then packaged in
    the other order: each export's stages must stay its own, whatever order AOTInductor compiles them in."""
    import torch

    class Softmax(torch.nn.Module):
        def forward(self, x):
            y = torch.exp(x)
            return y / y.sum(dim=-1, keepdim=True)

    def body(torch, m):
        x = torch.randn(2, 128)
        mlp = torch.export.export(m.eval(), (x,))
        soft = torch.export.export(Softmax().eval(), (x,), strict=True)
        d = tmp_path_factory.mktemp("two_exports_pt2")
        for name, ep in (("soft", soft), ("mlp", mlp)):
            torch._inductor.aoti_compile_and_package(ep, package_path=str(d / f"{name}.pt2"))

    return _trace(tmp_path_factory, "two_exports", body)


@pytest.fixture(scope="session")
def nested(tmp_path_factory):
    """Graphs inside graphs: a checkpointed region (trained: forward and backward), a torch.cond, then a custom
    autograd.Function (trained)."""
    def body(torch, m):
        from torch.utils.checkpoint import checkpoint

        class Checkpointed(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

            def inner(self, x):
                h = torch.relu(self.fc1(x))
                return self.fc2(h)

            def forward(self, x):
                y = checkpoint(self.inner, x, use_reentrant=False)
                return (y * 2).sum()

        class Cond(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(16, 16)

            def forward(self, x):
                h = self.fc(x)
                h = torch.cond(h.sum() > 0, lambda t: torch.relu(t) * 2, lambda t: torch.tanh(t) * 2, (h,))
                return h * 3

        class Square(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * x * g

        class Custom(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(16, 16)

            def forward(self, x):
                h = self.fc(x)
                y = Square.apply(h)
                return y.sum()

        torch.compile(Checkpointed())(torch.randn(4, 16)).backward()
        with torch.no_grad():
            torch.compile(Cond(), fullgraph=True)(torch.randn(4, 16))
        torch.compile(Custom())(torch.randn(4, 16)).backward()

    return _trace(tmp_path_factory, "nested", body)


@pytest.fixture(scope="session")
def altered_graphs(tmp_path_factory):
    """Compiles that change the graph on its way: freezing (a line that reads only parameters is folded into a
    constant, under an autocast region), a training step under compiled autograd, flex_attention, whose
    score_mod AOT autograd traces again and whose mask_mod its template computes inline, then torch.func's vmap
    and grad, whose calls AOT autograd runs."""
    def body(torch, m):
        class Folded(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(16, 16)

            def forward(self, x):
                w = self.fc.weight * 0.5
                with torch.autocast("cpu", enabled=False):
                    h = torch.relu(x @ w.t())
                return h + self.fc.bias

        def train(x):
            loss = m(x).pow(2).mean()
            loss.backward()
            return loss

        with torch.no_grad(), torch._inductor.config.patch(freezing=True):
            torch.compile(Folded().eval())(torch.randn(4, 16))
        with torch._dynamo.config.patch(compiled_autograd=True):
            torch.compile(train)(torch.randn(2, 128))

        from torch.nn.attention.flex_attention import flex_attention

        def rel_bias(score, b, h, q_idx, kv_idx):
            return score + (q_idx - kv_idx) * 0.1

        def attend(q, k, v):
            return flex_attention(q, k, v, score_mod=rel_bias)

        with torch.no_grad():
            torch.compile(attend)(*(torch.randn(1, 2, 16, 8) for _ in range(3)))

        from torch.nn.attention.flex_attention import create_block_mask

        def causal(b, h, q_idx, kv_idx):
            return q_idx >= kv_idx

        def masked(q, k, v, block_mask):
            return flex_attention(q, k, v, block_mask=block_mask)

        with torch.no_grad():
            torch.compile(masked)(*(torch.randn(1, 2, 128, 16) for _ in range(3)),
                                  create_block_mask(causal, 1, 1, 128, 128, device="cpu"))

        def score(x, w):
            return (x @ w).sin().sum()

        def transform(xs, w):
            per = torch.vmap(score, in_dims=(0, None))(xs, w)
            return per, torch.func.grad(score)(xs[0], w)

        torch.compile(transform)(torch.randn(3, 4), torch.randn(4, 2))

    return _trace(tmp_path_factory, "altered_graphs", body)


def _cells(g):
    return {r["field"]: {st: (c["state"], c["n"], c["total"]) for st, c in r["cells"].items()} for r in g["matrix"]}


def _counts(g):
    return {st: len(d["objects"]) if d["observed"] else None for st, d in g["stages"].items()}


# --- aot_eager ---------------------------------------------------------------------------------------


def test_aot_eager_measures_the_dynamo_and_aot_graphs(aot_eager_train):
    _, model = aot_eager_train
    assert model["stage_order"][:4] == ["source", "dynamo_graph", "pre_grad", "aot_graph"]
    fw, bw = model["graphs"]
    assert (fw["label"], bw["label"]) == ("0/0 forward", "0/0 backward")
    assert fw["backend"] == bw["backend"] == "aot_eager"
    assert _counts(fw) == {"source": 4, "dynamo_graph": 3, "pre_grad": None, "aot_graph": 5, "post_grad": None,
                           "ir_pre": None, "ir_post": None, "kernel_spec": None, "artifact": None}
    assert _counts(bw)["aot_graph"] == 18 and bw["shared"] == {"source": "0/0 forward", "dynamo_graph": "0/0 forward"}
    c = _cells(fw)
    # The Dynamo graph: what Inductor's pre-grad sees; original_aten and from_node cannot exist yet there.
    assert {f: c[f]["dynamo_graph"] for f in FX} == {
        "stack_trace": ("all", 3, 3), "nn_module_stack": ("some", 2, 3), "source_fn_stack": ("all", 3, 3),
        "original_aten": ("na", 0, 3), "from_node": ("na", 0, 3)}
    assert {f: c[f]["aot_graph"] for f in FX} == {
        "stack_trace": ("all", 5, 5), "nn_module_stack": ("some", 4, 5), "source_fn_stack": ("all", 5, 5),
        "original_aten": ("all", 5, 5), "from_node": ("all", 5, 5)}
    cb = _cells(bw)
    assert {f: cb[f]["aot_graph"] for f in FX} == {
        "stack_trace": ("all", 18, 18), "nn_module_stack": ("some", 1, 18), "source_fn_stack": ("some", 2, 18),
        "original_aten": ("all", 18, 18), "from_node": ("some", 2, 18)}
    rows = {r["text"]: r for r in fw["survival"]}
    assert rows["x = torch.relu(x)"]["last_stage"] == "aot_graph" and rows["x = torch.relu(x)"]["lost_at"] is None


def test_aot_eager_marks_inductors_stages_off_its_path(aot_eager_train):
    from prov_trace.report.views import summary_lines

    _, model = aot_eager_train
    why = OFF.format("aot_eager")
    for g in model["graphs"]:
        assert g["off_path"] == {st: why for st in INDUCTOR}
        states = {(r["field"], st): c for r in g["matrix"] for st, c in r["cells"].items()}
        assert not [k for k, c in states.items() if c["state"] == "unobserved"]
        assert states[("stack_trace", "post_grad")] == {"state": "na", "n": 0, "total": 0, "reason": why}
        assert states[("origins", "kernel_spec")]["reason"] == why
    text = "\n".join(summary_lines(model))
    assert "NOT RESOLVED" not in text and "DID NOT FIRE" not in text
    assert text.count("off path") == len(INDUCTOR) and why in text


def test_aot_eager_report_says_off_path_in_markdown_and_html(aot_eager_train):
    import prov_trace

    path, _ = aot_eager_train
    report = prov_trace.load(path)
    md, html = report.render("md"), report.render("html")
    titles = "FX pre-grad, FX post-grad, LoopLevelIR (pre-pass), LoopLevelIR (post-pass), Kernel spec, Artifact"
    assert f"{titles}: {OFF.format('aot_eager')}." in md.replace("\\_", "_")
    assert titles in html and "(backend: aot_eager)" in html and "Dynamo graph" in html and "AOT graph" in html
    graph = md.split("## Graph 0/0 forward")[1].split("\n## ")[0]
    assert "⚠" not in graph.split("### Per-stage detail")[0] and "➖" in graph  # matrix, survival, counts
    assert "#### FX post-grad (not on this compile's path)" in graph
    # The lineage starts at FX pre-grad, off this path: no claim that the objects "map one to one".
    assert "every object maps one to one" not in graph
    assert ("Only Source has objects to draw here: the links start at FX pre-grad, which this graph's compile did "
            "not pass through, so nothing is linked.") in graph
    counts = md.split("## Counts")[1].split("\n## ")[0]
    assert "| 0/0 forward | 4 | 3 | ➖ | 5 | ➖ | ➖ | ➖ | ➖ | ➖ |" in counts


# --- a user's backend ----------------------------------------------------------------------------------


def test_a_user_backend_function_is_named_and_measured(user_backend):
    _, model = user_backend
    (g,) = model["graphs"]
    assert g["label"] == "0/0" and g["backend"] == "my_backend"
    assert "aot_graph" not in model["stage_order"]  # no AOT autograd on this path: no column
    assert _counts(g)["dynamo_graph"] == 3 and g["stages"]["dynamo_graph"]["boundary"]
    assert _cells(g)["stack_trace"]["dynamo_graph"] == ("all", 3, 3)
    assert g["off_path"] == {st: OFF.format("my_backend") for st in INDUCTOR}
    inputs = model_inputs(path=user_backend[0])
    assert "l_x_: ('2', '128')" in inputs


def model_inputs(path) -> list[str]:
    from prov_trace.stream.reader import read_trace

    return next(r["payload"]["inputs"] for r in read_trace(path).records
                if r.get("kind") == "probe" and r.get("stage") == "dynamo_graph")


# --- torch.export + AOTInductor ---------------------------------------------------------------------


def test_export_and_aoti_script_is_traced_end_to_end(export_aoti):
    model = export_aoti.model()
    assert f"packaged: {export_aoti.workdir / 'mlp.pt2'}" in export_aoti.proc.stdout
    assert model["trace"]["complete"] and not model["errors"], model["errors"]
    (g,) = model["graphs"]
    assert g["label"] == "export inference" and g["backend"] == "torch.export" and g["off_path"] == {}
    assert model["stage_order"] == ["source", "export_graph", "pre_grad", "post_grad", "ir_pre", "ir_post",
                                    "kernel_spec", "artifact"]
    assert _counts(g) == {"source": 4, "export_graph": 3, "pre_grad": 3, "post_grad": 5, "ir_pre": 3, "ir_post": 3,
                          "kernel_spec": 3, "artifact": 3}
    c = _cells(g)
    assert c["file:line"]["source"] == ("all", 4, 4)
    assert {f: c[f]["export_graph"] for f in FX} == {
        "stack_trace": ("all", 3, 3), "nn_module_stack": ("all", 3, 3), "source_fn_stack": ("none", 0, 3),
        "original_aten": ("none", 0, 3), "from_node": ("none", 0, 3)}
    assert c["provenance_comment"]["artifact"] == ("all", 3, 3)
    art = g["stages"]["artifact"]
    assert sorted(o["name"] for o in art["objects"]) == ["aoti_torch_cpu_addmm_out", "aoti_torch_cpu_addmm_out #2",
                                                       "cpp_fused_relu_0"]
    assert art["files"][0].endswith(".wrapper.cpp")
    rows = {r["text"]: r for r in g["survival"]}
    assert all(rows[t]["last_stage"] == "artifact" for t in ("x = self.fc1(x)", "x = torch.relu(x)", "x = self.fc2(x)"))
    assert g["headline"]["sourceless_kernels"] == []


def test_export_and_aoti_agree_with_inductors_own_record(export_aoti):
    model = export_aoti.model()
    assert assert_matches_inductor(model, export_aoti.workdir / "torch_trace") == 1
    assert model["graphs"][0]["mappings"]["kernel_to_post"] == {
        "aoti_torch_cpu_addmm_out": ["addmm", "addmm_1"], "cpp_fused_relu_0": ["relu"]}


def test_each_export_is_its_own_graph_whatever_order_they_are_compiled_in(two_exports):
    """Two exports in one trace were one `export` graph: the second's IR ops replaced the first's (same buffer
    names), and a strict export's Inductor stages went to a `0/0` graph of their own."""
    _, model = two_exports
    assert [g["label"] for g in model["graphs"]] == ["export inference", "export-2 inference"]
    mlp, soft = model["graphs"]
    assert mlp["backend"] == soft["backend"] == "torch.export"
    names = {g["label"]: {st: [o["name"] for o in d["objects"]] for st, d in g["stages"].items() if d["observed"]}
             for g in (mlp, soft)}
    assert names["export inference"]["export_graph"] == ["linear", "relu", "linear_1"]
    assert names["export inference"]["post_grad"] == ["permute", "addmm", "relu", "permute_1", "addmm_1"]
    assert "aoti_torch_cpu_addmm_out" in names["export inference"]["kernel_spec"]
    assert "dynamo_graph" not in names["export inference"]
    # The strict export: Dynamo ran inside torch.export, and AOTInductor restored that Dynamo compile id.
    assert names["export-2 inference"]["dynamo_graph"] == ["y", "sum_1", "res"]
    assert names["export-2 inference"]["export_graph"] == ["exp", "sum_1", "div"]
    assert names["export-2 inference"]["kernel_spec"] == ["cpp_fused_div_exp_sum_0"]
    # Its columns read in the order it ran: Dynamo's graph, then the graph torch.export made of it.
    cols = list(soft["matrix"][0]["cells"])
    assert cols.index("dynamo_graph") + 1 == cols.index("export_graph"), cols
    for g in (mlp, soft):
        assert {r["text"]: r["last_stage"] for r in g["survival"] if r["user"] and not r["note"]} == (
            {"x = self.fc1(x)": "artifact", "x = torch.relu(x)": "kernel_spec", "x = self.fc2(x)": "artifact"}
            if g is mlp else {"y = torch.exp(x)": "kernel_spec", "return y / y.sum(dim=-1, keepdim=True)": "kernel_spec"})
    # (No INDUCTOR_PROVENANCE here: Inductor writes the fused kernels' provenance comments only with it; the
    # extern calls' comments always.)
    # Softmax compiled first: its records come before the MLP's Inductor records in the stream.
    from prov_trace.stream.reader import read_trace

    order = [r["compile_id"] for r in read_trace(two_exports[0]).records
             if r.get("phase") == "entry" and r.get("stage") == "pre_grad"]
    assert order == ["export-2", "export"]


def test_the_wrapper_ops_the_report_knows_are_the_installed_torchs():
    """The report reads only the trace, so it names the wrapper HOPs AOT inlines; a torch that adds one to
    torch/_higher_order_ops/wrap.py fails here rather than reading that op's call line as a loss
    (test_compat.py runs the same check on each release)."""
    assert unknown_wrapper_ops() == set()


def test_nested_graphs_are_read_at_every_fx_stage(nested):
    """A torch.cond's branches and a checkpointed region are graphs inside the graph. Inductor's pre- and
    post-grad passes visit them, so those stages held their nodes while the Dynamo and AOT graphs did not:
    the checkpointed lines read as not attached at the Dynamo graph, then attached at pre-grad."""
    _, model = nested
    assert [g["label"] for g in model["graphs"]][:3] == ["0/0 forward", "0/0 backward", "1/0 inference"]
    fwd, _, cond = model["graphs"][:3]

    def names(g, st):
        return [o["name"] for o in g["stages"][st]["objects"]]

    # The checkpointed region's nodes come first, as Inductor's recursive passes visit them.
    assert names(fwd, "dynamo_graph") == names(fwd, "pre_grad") == \
        ["linear", "h", "linear_1", "tag_activation_checkpoint", "y", "mul", "sum_1"]
    rows = {r["text"]: r for r in fwd["survival"]}
    for text in ("h = torch.relu(self.fc1(x))", "return self.fc2(h)"):
        assert rows[text]["counts"]["dynamo_graph"] == rows[text]["counts"]["pre_grad"] > 0, rows[text]
        assert rows[text]["last_stage"] == "artifact" and rows[text]["lost_at"] is None, rows[text]
    # FX targets read as their names, not as the type of a builtin.
    targets = {o["name"]: o["target"] for o in fwd["stages"]["dynamo_graph"]["objects"]}
    assert targets == {"linear": "torch._C._nn.linear", "h": "torch.relu", "linear_1": "torch._C._nn.linear",
                       "tag_activation_checkpoint": "tag_activation_checkpoint", "y": "operator.getitem",
                       "mul": "operator.mul", "sum_1": "sum"}
    # The checkpoint call's line holds only the wrapper and its getitem, which AOT inlines: dropped by design,
    # not a loss (it was the first "loss" of the graph, pre-grad -> AOT graph).
    call = rows["y = checkpoint(self.inner, x, use_reentrant=False)"]
    assert call["note"].startswith("a wrapper op's call") and call["last_stage"] == "pre_grad", call
    assert call["lost_at"] is None and call["counts"]["aot_graph"] == 0
    assert all(grp["to"] != "aot_graph" for grp in fwd["losses"]), fwd["losses"]
    assert names(cond, "dynamo_graph") == names(cond, "pre_grad") == \
        ["relu", "mul", "tanh", "mul", "h", "sum_1", "gt", "cond", "h_1", "mul"]
    assert names(cond, "aot_graph") == names(cond, "post_grad") == \
        ["relu", "mul", "tanh", "mul", "permute", "addmm", "sum_1", "gt", "cond", "getitem", "mul"]
    # Each branch's `mul` is its own node, and each branch's IR op links to its own branch's `mul`, not to the
    # first node of that name (the IR records each origin's graph).
    post = cond["stages"]["post_grad"]["objects"]
    # The lineage names the first `mul` (the relu branch's) "post_grad:mul", the second "post_grad:mul (2)".
    assert [o["name"] for o in post[:4]] == ["relu", "mul", "tanh", "mul"]
    assert post[0]["graph_id"] == post[1]["graph_id"] != post[2]["graph_id"] == post[3]["graph_id"]
    froms: dict = {}
    for e in cond["lineage"]["edges"]:
        if e["to"].startswith(("ir_pre:true_graph", "ir_pre:false_graph")):
            froms.setdefault(e["to"], {}).setdefault(e["via"], set()).add(e["from"])
    by_branch = {("relu" if "post_grad:relu" in v.get("also_in_origins", ()) else
                  "tanh" if "post_grad:tanh" in v.get("also_in_origins", ()) else None): v for v in froms.values()}
    assert by_branch["relu"]["origin_node"] == {"post_grad:mul"}, froms
    assert by_branch["tanh"]["origin_node"] == {"post_grad:mul (2)"}, froms
    # In HTML, each object's row is its own lineage node: the second `mul` is "post_grad:mul (2)", not a second
    # row with the first one's id (clicking a line lit both branches' rows).
    import prov_trace

    page = prov_trace.load(nested[0]).to_html()
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1][:5]
    rows = set(re.findall(r'<tr data-node="(post_grad:mul(?: \(\d\))?)"', page))
    assert rows == {"post_grad:mul", "post_grad:mul (2)", "post_grad:mul (3)"}, rows
    assert rows <= {n["id"] for n in cond["lineage"]["nodes"]}
    # A nested node keeps its own graph: the branches are two graphs besides the top one.
    assert len({o["graph_id"] for o in cond["stages"]["dynamo_graph"]["objects"]}) == 3
    assert len(cond["stages"]["dynamo_graph"]["boundary"]) == len(cond["stages"]["pre_grad"]["boundary"]) == 10
    # The run's summary counts what the Counts table counts, though each branch has an `output` node as the top
    # graph does (it once counted names, so the three outputs were one).
    summary = {row["stage"]: row for row in model["summary"]}
    for st in ("dynamo_graph", "pre_grad", "aot_graph", "post_grad"):
        # The shared stages are each forward's, shown again in its backward.
        graphs = [g for g in model["graphs"] if st not in ("dynamo_graph", "pre_grad") or g["kind"] != "backward"]
        assert summary[st]["objects"] == sum(len(g["stages"][st]["objects"]) for g in graphs), st
        assert summary[st]["boundary"] == sum(len(g["stages"][st]["boundary"]) for g in graphs), st


def test_a_custom_autograd_functions_backward_is_the_backward_graphs_not_a_loss_of_the_forward(nested):
    """A custom autograd.Function's forward and backward are both in the Dynamo graph that the forward and
    backward graphs share; AOT autograd puts each in its own graph. Each graph read the other's line as lost at
    its AOT graph, the forward's worst loss."""
    _, model = nested
    fwd, bwd = model["graphs"][3:]
    assert (fwd["label"], bwd["label"]) == ("2/0 forward", "2/0 backward")
    for g, mine, theirs, other in ((fwd, "return x * x", "return 2 * x * g", bwd), (bwd, "return 2 * x * g",
                                                                                  "return x * x", fwd)):
        rows = {r["text"]: r for r in g["survival"]}
        assert rows[mine]["counts"]["aot_graph"] > 0 and rows[mine]["note"] is None, rows[mine]
        row = rows[theirs]
        assert row["counts"]["pre_grad"] > 0 and row["counts"]["aot_graph"] == 0, row
        assert row["note"] == f"in graph {other['label']}: AOT autograd put the line's ops there", row
        assert row["lost_at"] is None and row["lost_by"] == []
        assert all(ln["line"] != row["line"] for loss in g["losses"] for ln in loss["lines"]), g["losses"]
        assert g["headline"]["reached"]["aot_graph"] == g["headline"]["lines"], g["headline"]
        # The apply line's nodes are the autograd_function_apply HOP and its getitem, which AOT inlines: the
        # Function's own lines carry its ops. It was ranked "removed" at the AOT graph.
        apply = rows["y = Square.apply(h)"]
        targets = {o["target"] for o in g["stages"]["pre_grad"]["objects"] if o["name"] in apply["carriers"]["pre_grad"]}
        assert targets == {"autograd_function_apply", "operator.getitem"}, targets
        assert apply["note"].startswith("a wrapper op's call: AOT inlines it") and apply["lost_at"] is None, apply


# --- dynamic shapes and modes --------------------------------------------------------------------------


def test_dynamic_true_is_traced_with_symbolic_inputs(dynamic):
    path, model = dynamic
    (g,) = model["graphs"]
    assert g["label"] == "0/0 inference" and g["backend"] == "inductor" and g["off_path"] == {}
    assert _counts(g) == {"source": 4, "dynamo_graph": 3, "pre_grad": 3, "aot_graph": 5, "post_grad": 5,
                          "ir_pre": 3, "ir_post": 3, "kernel_spec": 3, "artifact": 3}
    inputs = model_inputs(path)
    assert "l_x_: ('s77', '128')" in inputs and "s77: SymInt" in inputs
    assert _cells(g)["get_stack_traces"]["kernel_spec"] == ("all", 3, 3)


def test_mark_dynamic_with_max_autotune_on_the_cpu(marked_autotune):
    path, model = marked_autotune
    (g,) = model["graphs"]
    assert g["backend"] == "inductor" and all(d["observed"] for d in g["stages"].values())
    assert any(": ('s" in i and "128')" in i for i in model_inputs(path))
    assert _counts(g)["kernel_spec"] == 3 and _cells(g)["provenance_comment"]["artifact"][0] in ("all", "some")


def test_a_recompile_for_a_new_shape_is_its_own_labelled_graph(recompiled):
    _, model = recompiled
    first, second = model["graphs"]
    assert (first["label"], second["label"]) == ("0/0 inference", "0/1 inference")
    assert first["notes"] == []
    (note,) = second["notes"]
    assert note.startswith("Recompile: compile 2 of frame 0.") and "l_x_: ('s77', '128')" in note
    assert _counts(second)["aot_graph"] == 5



# --- freezing and compiled autograd --------------------------------------------------------------------

def _row_of(g, text):
    return next(r for r in g["survival"] if r["text"] == text)


def _loss_of(g, row):
    (loss,) = [loss for loss in g["losses"] if {"file": row["file"], "line": row["line"]} in loss["lines"]]
    return loss


def test_a_line_freezing_folds_into_a_constant_says_so_and_a_with_line_is_not_a_loss(altered_graphs):
    """`w = self.fc.weight * 0.5` reads only a parameter: freezing's constant folding computes it at compile time
    and its frozen constant is a get_attr with no stack trace. The report ranked it as 'removed: no object here
    comes from the line's carriers'. The autocast line made no node (Dynamo applied it while tracing) and was
    ranked as lost before the Dynamo graph."""
    _, model = altered_graphs
    g = next(g for g in model["graphs"] if g["label"] == "0/0 inference")
    post = g["stages"][S.POST_GRAD]
    assert any(o["kind"] == "get_attr" and o["target"].startswith("_frozen_param") for o in post["boundary"])
    folded = _row_of(g, "w = self.fc.weight * 0.5")
    assert (folded["last_stage"], folded["lost_at"], folded["lost_by"]) == (S.AOT_GRAPH, S.POST_GRAD, []), folded
    assert _loss_of(g, folded)["kind"].startswith("folded into a constant: the line reads only parameters"), g["losses"]
    # The lines that read the input are not folded: they reach the kernels.
    assert _row_of(g, "h = torch.relu(x @ w.t())")["counts"][S.KERNEL_SPEC] >= 1
    assert _row_of(g, "return h + self.fc.bias")["counts"][S.KERNEL_SPEC] >= 1
    assert all(not loss["kind"].startswith("folded") for loss in g["losses"] if loss["lines"] != [
        {"file": folded["file"], "line": folded["line"]}])
    with_line = _row_of(g, 'with torch.autocast("cpu", enabled=False):')
    assert with_line["note"].startswith("a with statement: Dynamo applied its context manager while tracing")
    assert (with_line["lost_at"], with_line["lost_by"]) == (None, [])
    assert g["headline"]["lines"] == 3 and g["headline"]["worst"] == {"from": S.AOT_GRAPH, "to": S.POST_GRAD, "lines": 1}


def test_compiled_autograds_graph_says_what_it_is_and_why_its_aot_graph_holds_no_line(altered_graphs):
    """Under compiled autograd the backward call is traced into a graph of its own (`!0/2/0`): its Dynamo nodes
    carry the forward lines, and lines of the FX code compiled autograd generated (<eval_with_key>), which were
    counted as the model's. Inductor hands it to AOT autograd in a GmWrapper, so pre-grad does not fire and
    no AOT node carries a stack trace; the report ranked that as 'removed'. The forward's backward graph, which
    Inductor never compiled on its own, read 'the run made no backward call'."""
    path, model = altered_graphs
    labels = [g["label"] for g in model["graphs"]]
    ca = next(g for g in model["graphs"] if g["compile_id"].startswith("!"))
    assert labels[:3] == ["0/0 inference", "1/0 forward", "1/0 backward"] and ca["label"] in labels[3:], labels
    assert not ca["stages"][S.PRE_GRAD]["observed"] and ca["stages"][S.AOT_GRAPH]["objects"]
    assert not any(o["fields"]["stack_trace"]["populated"] for o in ca["stages"][S.AOT_GRAPH]["objects"])
    generated = [r for r in ca["survival"] if r["file"].startswith("<eval_with_key>")]
    assert generated and not any(r["user"] for r in generated), generated
    loss_line = _row_of(ca, "loss = m(x).pow(2).mean()")
    assert loss_line["user"] and (loss_line["last_stage"], loss_line["lost_at"]) == (S.DYNAMO_GRAPH, S.AOT_GRAPH)
    (loss,) = ca["losses"]
    assert loss["kind"].startswith("compiled autograd's graph: Inductor hands it to AOT autograd inside a wrapper")
    assert len(loss["lines"]) == ca["headline"]["lines"] == 4  # the MLP's three lines and the loss line
    assert any(n.startswith("Compiled autograd's graph") for n in ca["notes"])
    assert any("no node of its AOT graph carries a stack trace" in n for n in ca["notes"])
    backward = next(g for g in model["graphs"] if g["label"] == "1/0 backward")
    assert backward["headline"]["lazy_backward"] and backward["headline"]["compiled_autograd"] == [ca["label"]]
    assert "compiled_autograd" not in next(g for g in model["graphs"] if g["label"] == "1/0 forward")["headline"]
    import prov_trace
    report = prov_trace.load(path)
    assert (f"did not fire for this graph: Inductor did not compile it on its own, because compiled autograd "
            f"traced the backward call into its own graph ({ca['label']})") in report.to_markdown()
    res = report.check("post_grad:stack_trace>=1")
    why = next(f["why"] for f in res.failures if f["graph"] == "1/0 backward")
    assert "compiled autograd traced the backward call into its own graph" in why, res.text


def test_a_subgraph_aot_traces_again_names_the_line_its_nodes_carry_instead(altered_graphs):
    """flex_attention's score_mod is a nested graph whose nodes carry the score function's line through
    pre-grad; AOT autograd traces it again, and its nodes there carry the flex_attention call's line. The
    report ranked the score function's line as 'removed: no object here comes from the line's carriers'."""
    _, model = altered_graphs
    g = next(g for g in model["graphs"] if any(r["text"] == "return flex_attention(q, k, v, score_mod=rel_bias)"
                                                for r in g["survival"]))
    score = _row_of(g, "return score + (q_idx - kv_idx) * 0.1")
    call = _row_of(g, "return flex_attention(q, k, v, score_mod=rel_bias)")
    assert (score["last_stage"], score["lost_at"], score["lost_by"]) == (S.PRE_GRAD, S.AOT_GRAPH, []), score
    pre = [o for o in g["stages"][S.PRE_GRAD]["objects"] if o["name"] in score["carriers"][S.PRE_GRAD]]
    assert pre and all(o["graph_id"] is not None for o in pre)  # the score_mod's own graph
    again = [o for o in g["stages"][S.AOT_GRAPH]["objects"]
             if o["name"] in score["carriers"][S.PRE_GRAD] and o["graph_id"] is not None]
    assert again and all([sr["line"] for sr in o["sources"]] == [call["line"]] for o in again), again
    loss = _loss_of(g, score)
    assert loss["kind"] == (f"nested graph traced again: AOT autograd traced the subgraph anew, and its nodes carry "
                            f"test_backends_export.py:{call['line']} (the call's line), not this one"), loss
    assert loss["objects"] == [o["name"] for o in again]


def test_a_nested_graph_a_template_computes_inline_names_the_op_and_links_its_nodes(altered_graphs):
    """flex_attention's mask_mod is a nested graph whose nodes carry the mask function's line through post-grad;
    the CPU flex-attention template computes it inside its kernel, and the template's IR op lists the graph's
    get_attr (`sdpa_mask0`) in its origins, not the nodes in it. The report ranked the mask line as 'removed: no
    object here comes from the line's carriers', and the lineage drew nothing from its nodes."""
    _, model = altered_graphs
    g = next(g for g in model["graphs"] if any(r["text"] == "return flex_attention(q, k, v, block_mask=block_mask)"
                                                for r in g["survival"]))
    mask = _row_of(g, "return q_idx >= kv_idx")
    assert (mask["last_stage"], mask["lost_at"], mask["lost_by"]) == (S.POST_GRAD, S.IR_PRE, []), mask
    carriers = [o for o in g["stages"][S.POST_GRAD]["objects"] if o["name"] in mask["carriers"][S.POST_GRAD]]
    (attr,) = [o for o in g["stages"][S.POST_GRAD]["boundary"] if o.get("subgraph") is not None
               and o["subgraph"] == carriers[0]["graph_id"]]
    ops = [o for o in g["stages"][S.IR_PRE]["objects"] if attr["name"] in o["origins"]]
    assert len(ops) == 1, ops
    loss = _loss_of(g, mask)
    assert loss["kind"] == (f"nested graph computed inline: an IR op ({ops[0]['kind']}) computes the nested graph "
                            f"that holds the line's nodes ({attr['name']}), but its origins name that graph's "
                            "get_attr, not the nodes in it, so the stack traces carry only the call's line"), loss
    assert loss["objects"] == [ops[0]["name"]], loss
    lin = g["lineage"]
    ids = {n["id"]: n for n in lin["nodes"]}
    linked = {(ids[e["from"]]["name"], ids[e["to"]]["name"], e["via"]) for e in lin["edges"]
              if ids[e["from"]]["stage"] == S.POST_GRAD and ids[e["to"]]["stage"] == S.IR_PRE}
    assert {(o["name"], ops[0]["name"], "also_in_origins") for o in carriers} <= linked, linked


@pytest.fixture(scope="module")
def unpacked_results(tmp_path_factory):
    """Ops whose result is unpacked: a torch.library custom op (a FallbackKernel and its MultiOutput) and
    torch.var_mean (post-grad `var_mean` and the two `operator.getitem` nodes that pick its outputs; a split
    welford reduction, whose mean a `mean` reads)."""
    import torch

    name = "prov_trace_test::add_one"
    if not hasattr(torch.ops.prov_trace_test, "add_one"):
        @torch.library.custom_op(name, mutates_args=(), schema="(Tensor x) -> Tensor")  # this file's annotations
        def add_one(x):                                                                   # are strings
            return x + 1

        @add_one.register_fake
        def _(x):
            return torch.empty_like(x)

    def body(torch, m):
        def f(x):
            y = torch.ops.prov_trace_test.add_one(x * 2).sigmoid()
            v, mu = torch.var_mean(x, dim=1)
            return y, v.sum() + mu.mean()

        with torch.no_grad():
            torch.compile(f)(torch.randn(4, 8))

    return _trace(tmp_path_factory, "unpacked_results", body)


def test_a_custom_op_lowered_to_a_fallback_and_its_multioutput_is_not_a_decomposition(unpacked_results):
    """A torch.library custom op becomes a FallbackKernel and the MultiOutput that unpacks its result, and its input
    `x * 2` a buffer Inductor realises for it, whose origins name both `mul` and the op (no origin_node). The lineage
    listed the op's node as decomposed into all three, as if Inductor had split the op; the input's buffer is
    `mul`'s, and the op's node a side link of it."""
    _, model = unpacked_results
    (g,) = model["graphs"]
    ir = {o["name"]: o for o in g["stages"][S.IR_PRE]["objects"]}
    ids = {n["id"]: n for n in g["lineage"]["nodes"]}
    to_ir = [(ids[e["from"]], ids[e["to"]]) for e in g["lineage"]["edges"] if e["via"] == "origin_node"]
    op = [(a, b) for a, b in to_ir if a["name"] == "add_one"]
    assert sorted(ir[b["name"]]["kind"] for _, b in op) == ["FallbackKernel", "MultiOutput"], op
    assert not any(ids[d["from"]]["name"] == "add_one" for d in g["lineage"]["decompositions"]), \
        g["lineage"]["decompositions"]
    (realised,) = [o for o in ir.values() if o["kind"] == "ComputedBuffer" and "add_one" in o["origins"]]
    assert realised["origin_node"] is None and sorted(realised["origins"]) == ["add_one", "mul"], realised
    into = {ids[e["from"]]["name"]: e["via"] for e in g["lineage"]["edges"] if ids[e["to"]]["name"] == realised["name"]
            and ids[e["to"]]["stage"] == S.IR_PRE}
    assert into == {"mul": "origins", "add_one": "also_in_origins"}, into


def test_the_getitem_nodes_that_unpack_a_tuple_result_are_not_a_decomposition(unpacked_results):
    """`v, mu = torch.var_mean(x, dim=1)`: post-grad holds `var_mean` and the two `operator.getitem` nodes that pick
    its outputs, all three with pre-grad `var_mean` as their from_node. The lineage listed `var_mean` as decomposed
    into the three, as if a pass had split it."""
    _, model = unpacked_results
    (g,) = model["graphs"]
    post = {o["name"]: o for o in g["stages"][S.POST_GRAD]["objects"]}
    ids = {n["id"]: n for n in g["lineage"]["nodes"]}
    made = sorted(post[ids[e["to"]]["name"]]["target"] for e in g["lineage"]["edges"]
                  if e["via"] == "from_node" and ids[e["from"]]["name"] == "var_mean")
    assert made == ["aten.var_mean.correction", "operator.getitem", "operator.getitem"], made
    decomposed = [(ids[d["from"]]["stage"], ids[d["from"]]["name"]) for d in g["lineage"]["decompositions"]]
    assert (S.PRE_GRAD, "var_mean") not in decomposed, g["lineage"]["decompositions"]
    import prov_trace

    assert "| decomposition | `var_mean` (FX pre-grad) |" not in prov_trace.load(unpacked_results[0]).to_markdown()


def test_an_op_that_reads_a_nodes_buffer_has_that_node_as_input_not_as_a_lowering(unpacked_results):
    """`mu.mean()` reads the buffer of var_mean's welford reduction; its sum's IR op has no origin_node and lists
    `mean` and `var_mean` in its origins. The lineage linked both as lowerings, so var_mean read as decomposed
    into its own reduction passes and `mean`'s op. var_mean is its input (a side link); the reduction's passes,
    each reading the one before, are var_mean's own."""
    _, model = unpacked_results
    (g,) = model["graphs"]
    ir = {o["name"]: o for o in g["stages"][S.IR_PRE]["objects"]}
    ids = {n["id"]: n for n in g["lineage"]["nodes"]}
    (mean,) = [o for o in ir.values() if o["origin_node"] is None and sorted(o["origins"]) == ["mean", "var_mean"]]
    into = {ids[e["from"]]["name"]: e["via"] for e in g["lineage"]["edges"]
            if e["to"] == f"{S.IR_PRE}:{mean['name']}"}
    assert into == {"mean": "origins", "var_mean": "also_in_origins"}, into
    welford = sorted(f"{S.IR_PRE}:{o['name']}" for o in ir.values() if o["origins"] == ["var_mean"])
    assert len(welford) > 1, ir  # a split reduction: one op per pass, all var_mean's
    (dec,) = [d for d in g["lineage"]["decompositions"] if d["from"] == f"{S.POST_GRAD}:var_mean"]
    assert sorted(dec["to"]) == welford, dec


def test_a_torch_func_transforms_line_says_its_nodes_are_bookkeeping_and_names_the_lines_its_ops_carry(altered_graphs):
    """`torch.vmap(score, ...)(xs, w)`: Dynamo's nodes for the line are vmap's bookkeeping calls (entering its level,
    adding and removing the batch dimension); AOT autograd runs them as it traces, and the batched ops carry
    score's line. The report ranked the vmap line as 'removed: no object here comes from the line's carriers'."""
    _, model = altered_graphs
    g = next(g for g in model["graphs"] if any(r["text"].startswith("per = torch.vmap(") for r in g["survival"]))
    per = _row_of(g, "per = torch.vmap(score, in_dims=(0, None))(xs, w)")
    body = _row_of(g, "return (x @ w).sin().sum()")
    assert (per["last_stage"], per["lost_at"], per["lost_by"]) == (S.PRE_GRAD, S.AOT_GRAPH, []), per
    targets = {o["target"] for o in g["stages"][S.PRE_GRAD]["objects"] if o["name"] in per["carriers"][S.PRE_GRAD]}
    assert {"torch._functorch.predispatch._vmap_increment_nesting", "torch._functorch.predispatch._add_batch_dim",
            "torch._functorch.predispatch._remove_batch_dim"} <= targets, targets
    assert body["counts"][S.AOT_GRAPH] > body["counts"][S.PRE_GRAD] >= 1 and body["counts"][S.KERNEL_SPEC] >= 1, body
    loss = _loss_of(g, per)
    assert loss["kind"].startswith("torch.func transform: the line's nodes are its bookkeeping calls ("), loss
    assert "_add_batch_dim" in loss["kind"] and "which AOT autograd runs as it traces" in loss["kind"], loss
    assert loss["kind"].endswith(f"the ops they feed carry test_backends_export.py:{body['line']}"), loss
    # grad's line holds ops of its own (the backward ops autograd.grad traces): it reaches the kernels.
    grad = _row_of(g, "return per, torch.func.grad(score)(xs[0], w)")
    assert grad["counts"][S.KERNEL_SPEC] >= 1 and not any(
        loss["lines"] == [{"file": grad["file"], "line": grad["line"]}] for loss in g["losses"]
        if loss["kind"].startswith("torch.func")), g["losses"]


def test_a_post_grad_pass_that_raises_on_the_top_graph_leaves_its_lines_maybe_cut_short(tmp_path_factory):
    """A user's post-grad pass that raises on the top graph only: Inductor's post-grad passes run on each nested
    graph (a torch.cond's branches) first, so FX post-grad, read at return, holds only the branches' nodes. The
    top graph's other lines were ranked 'removed' at FX post-grad, the graph's worst loss."""
    caught = []

    def body(torch, m):
        def my_pass(graph):
            if any(n.target is torch.ops.higher_order.cond for n in graph.nodes):
                raise RuntimeError("my post-grad pass does not handle cond yet")

        def f(x):
            h = x * 2
            h = torch.cond(h.sum() > 0, lambda t: torch.relu(t) * 2, lambda t: torch.tanh(t) * 2, (h,))
            return h + 1

        with torch._inductor.config.patch(post_grad_custom_post_pass=my_pass):
            try:
                torch.compile(f, fullgraph=True)(torch.randn(4))
            except Exception as exc:  # noqa: BLE001 - the compile is meant to fail
                caught.append(exc)

    path, model = _trace(tmp_path_factory, "post_grad_raises", body)
    assert caught and "my post-grad pass does not handle cond yet" in str(caught[0])
    (g,) = model["graphs"]
    post = g["stages"][S.POST_GRAD]
    assert post["observed"] and post["objects"] and all(o["graph_id"] is not None for o in post["objects"]), post
    stopped = g["headline"]["stopped_in"]
    assert (stopped["stage"], stopped["maybe_cut_short"]) == (S.POST_GRAD, [S.POST_GRAD]), stopped
    assert stopped["error"]["inner"] == {"type": "builtins.RuntimeError", "text": "my post-grad pass does not handle cond yet"}
    for text in ("h = x * 2", "return h + 1"):
        row = _row_of(g, text)
        assert (row["last_stage"], row["lost_at"]) == (S.AOT_GRAPH, S.POST_GRAD), row
        assert _loss_of(g, row)["kind"].startswith("maybe cut short: the compile stopped inside post_grad_passes")
    assert g["headline"]["worst"] is None, g["headline"]
    import prov_trace
    md = prov_trace.load(path).to_markdown()
    assert ("FX post-grad holds only its calls that returned (a graph nested in this one), not the one that did not: "
            "a line lost there is ranked as maybe cut short, not as a drop.") in md


def test_a_tensor_subclass_ops_carry_the_lines_that_called_them_not_its_torch_function(tmp_path_factory):
    """Every op on a `__torch_function__` subclass passes through that method, so the innermost frame outside
    torch of every node's stack trace was its line: the lines that called the ops read 'no op traced to this
    line', and the subclass's `return super().__torch_function__(...)` held all of them."""
    def body(torch, m):
        class Logged(torch.Tensor):
            @classmethod
            def __torch_function__(cls, func, types, args=(), kwargs=None):
                return super().__torch_function__(func, types, args, kwargs or {})

        def f(x):
            y = x * 3
            return y.exp()

        with torch.no_grad():
            assert type(torch.compile(f)(torch.randn(4).as_subclass(Logged))) is Logged

    _, model = _trace(tmp_path_factory, "subclass", body)
    (g,) = model["graphs"]
    rows = {r["text"]: r for r in g["survival"]}
    assert not any("__torch_function__" in t for t in rows), list(rows)
    for text in ("y = x * 3", "return y.exp()"):
        assert rows[text]["counts"][S.DYNAMO_GRAPH] == 1 and rows[text]["counts"][S.KERNEL_SPEC] == 1, rows[text]
    # The stack trace still holds the subclass's frame: only the line a node is read as is the caller's.
    node = next(o for o in g["stages"][S.DYNAMO_GRAPH]["objects"] if o["sources"][0]["line"] == rows["y = x * 3"]["line"])
    assert node["fields"]["stack_trace"]["populated"]


def test_a_frame_past_its_recompile_limit_says_dynamo_stopped_compiling_it(tmp_path_factory):
    """Dynamo checks a frame's compiles against `recompile_limit` before the `try` whose exception handler
    the compile-error hook watches: a frame past it ran uncompiled, and the report said only that `_compile`
    did not return."""
    def body(torch, m):
        def f(x):
            return torch.tanh(x) * 2

        cf = torch.compile(f, dynamic=False)
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=1):
            for n in (1, 2, 3):
                cf(torch.randn(n))  # the second shape is past the limit, and the third too: run uncompiled

    path, model = _trace(tmp_path_factory, "recompile_limit", body)
    assert [g["label"] for g in model["graphs"]] == ["0/0 inference"]
    (frame,) = model["frames_without_graph"]
    said = "Dynamo hit torch._dynamo.config.recompile_limit (1), so it stopped compiling this frame"
    assert frame["compile_id"] == "0/1" and frame["stopped_in"]["limit"] == {"name": "recompile_limit", "value": 1}
    assert "error" not in frame["stopped_in"], frame
    from prov_trace.report.views import summary_lines
    assert f"  [0/1] {said}" in summary_lines(model)
    import prov_trace
    md = prov_trace.load(path).to_markdown()
    assert "(its compile stopped inside `_compile`, whose call did not return: " + said.replace("_", "\\_") + ")" in md
    hooks = {h["target"]: h for h in model["hooks"]}
    assert hooks["torch._dynamo.cache_size:exceeds_recompile_limit"]["fired"] == 2  # checked at each recompile


def test_a_graph_break_in_training_is_said_once_per_compile_in_dynamos_words(tmp_path_factory):
    """`.item()` breaks the graph of a training step: the forward and backward graphs of compile 0/0 share
    its Dynamo graph, so its break is said under the forward only (it was said under both), and Dynamo's
    explanation, which ends with a period, is not given a second one."""
    def body(torch, m):
        class Scaled(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(8, 8)

            def forward(self, x):
                h = self.fc(x)
                scale = h.abs().max().item()
                return (h / scale).sum()

        torch.compile(Scaled(), backend="aot_eager")(torch.randn(4, 8)).backward()

    path, model = _trace(tmp_path_factory, "item_break", body)
    first = {g["label"]: g for g in model["graphs"]}
    fw, bw = first["0/0 forward"], first["0/0 backward"]
    assert fw["graph_break"] == bw["graph_break"] and fw["graph_break"]["summary"].endswith(
        "Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False."), fw["graph_break"]
    import prov_trace
    md = prov_trace.load(path).to_markdown()
    said = [ln for ln in md.splitlines() if ln.startswith("Dynamo ended this graph at a graph break")]
    assert len(said) == 1 and said[0].endswith("capture\\_scalar\\_outputs=False."), said
    assert "(in forward)" in said[0] and f"test_backends_export.py:{fw['graph_break']['stack'][-1]['line']}" in said[0]


def test_a_graph_break_inside_a_library_names_the_programs_line_that_called_it(tmp_path_factory):
    """A break inside an installed package's function (here `.item()` in a helper of a package under a
    site-packages directory) happens on a line the user cannot change: the site says which line of the
    program's own called it, and a package's __init__.py is named with its package."""
    lib = tmp_path_factory.mktemp("libbreak") / "site-packages"
    (lib / "padlib").mkdir(parents=True)
    (lib / "padlib" / "__init__.py").write_text("def scale(x):\n    m = x.abs().max().item()\n    return x / m\n")
    sys.path.insert(0, str(lib))
    try:
        import padlib

        def body(torch, m):
            def f(x):
                h = x * 2
                return padlib.scale(h).relu()

            torch.compile(f, backend="aot_eager")(torch.randn(4))

        path, model = _trace(tmp_path_factory, "lib_break", body)
    finally:
        sys.path.remove(str(lib))
        sys.modules.pop("padlib", None)
    src = Path(__file__).read_text().splitlines()
    call = next(i + 1 for i, s in enumerate(src) if s.strip() == "return padlib.scale(h).relu()")
    from prov_trace.report.text import break_sites
    (site, *_) = break_sites(model)
    assert site["file"].endswith("padlib/__init__.py") and site["line"] == 2, site
    assert site["where"] == f"padlib/__init__.py:2 (in scale), from test_backends_export.py:{call} (in f)", site
    from prov_trace.report.views import summary_lines
    assert any(ln.startswith(f"  [0/0, 1/0] graph break at {site['where']}: Unsupported Tensor.item()")
               for ln in summary_lines(model)), summary_lines(model)
    # A break on the program's own line names that line alone.
    assert all(", from " not in s["where"] for s in break_sites(model) if not s["file"].endswith("__init__.py"))


def test_a_graph_break_right_after_another_is_read_though_no_graph_carries_it(tmp_path_factory):
    """Two breaks in a row: the second ends an empty graph, which Dynamo hands to no backend, so no Dynamo graph
    record holds its reason. The graph break hook reads it where Dynamo ends the graph: the frame that compiled
    no graph carries it, and the summary, the line's note, the live progress and the order of breaks name it."""
    def body(torch, m):
        def f(x):
            x = x + 1
            print("first")
            print("second")
            y = x * 2
            torch._dynamo.graph_break()
            return y.relu()

        torch.compile(f, backend="aot_eager")(torch.randn(4))

    path, model = _trace(tmp_path_factory, "two_breaks", body)
    src = Path(__file__).read_text().splitlines()
    line = {text: next(i + 1 for i, s in enumerate(src) if s.strip() == text)
            for text in ('print("first")', 'print("second")', "torch._dynamo.graph_break()")}
    first, second, user = line['print("first")'], line['print("second")'], line["torch._dynamo.graph_break()"]
    (frame,) = model["frames_without_graph"]
    assert frame["compile_id"] == "1/0" and frame["graph_break"]["stack"][-1]["line"] == second
    assert "`print`" in frame["graph_break"]["summary"], frame
    from prov_trace.report.text import break_frame, run_breaks
    from prov_trace.report.views import _break_lines
    assert [(cid, break_frame(b)["line"]) for cid, b in run_breaks(model)] == [("0/0", first), ("1/0", second),
                                                                               ("2/0", user)]
    said = _break_lines(model)
    assert len(said) == 3 and said[1].startswith(f"  [1/0] graph break at test_backends_export.py:{second}")
    notes = [n for g in model["graphs"] for n in g["notes"] if n.startswith(f"test_backends_export.py:{second} ")]
    assert notes and "(Dynamo: Failed to trace builtin operator" in notes[0], notes
    import prov_trace
    md = prov_trace.load(path).to_markdown()
    frames_line = next(ln for ln in md.splitlines() if ln.startswith("Frames Dynamo compiled that produced no graph"))
    assert f"(a graph break at `test_backends_export.py:{second} (in f)` ended it before any op" in frames_line
    # The live progress says each break as it comes, from the records as the run wrote them.
    import io
    from prov_trace.progress import Progress
    from prov_trace.stream.reader import read_trace
    out = io.StringIO()
    progress = Progress(out, tty=False)
    for r in read_trace(path).records:
        if r.get("kind") == "probe":
            progress(r)
    breaks = [ln for ln in out.getvalue().splitlines() if "graph break at" in ln]
    assert [ln.split("] ")[0].rsplit("[", 1)[1] for ln in breaks] == ["0/0", "1/0", "2/0"], out.getvalue()
    # A break is said once its compile goes on (a frame Dynamo gives up on breaks, then raises); a run that ends
    # right after one still says it, when the trace stops.
    probes = [r for r in read_trace(path).records if r.get("kind") == "probe"]
    last = max(i for i, r in enumerate(probes) if r.get("stage") == "graph_break")
    out = io.StringIO()
    progress = Progress(out, tty=False)
    for r in probes[:last + 1]:
        progress(r)
    assert "[2/0] graph break at" not in out.getvalue(), out.getvalue()
    progress.close()
    assert "[2/0] graph break at" in out.getvalue(), out.getvalue()


def _piecewise_backend(torch, config_of_part: dict | None = None):
    """A vLLM-style piecewise backend: split Dynamo's graph before each sigmoid and compile each part with Inductor's
    compile_fx (with the Inductor config patch `config_of_part` gives that part's index, if any)."""
    from torch._inductor.compile_fx import compile_fx
    from torch.fx.passes.split_module import split_module

    def piecewise(gm, example_inputs):
        part = {"n": 0}

        def split(node):
            if node.op == "call_function" and node.target is torch.sigmoid:
                part["n"] += 1
            return part["n"]

        top = split_module(gm, None, split)
        for i, (name, sub) in enumerate(list(top.named_children())):
            inputs = [n.meta["example_value"] for n in sub.graph.nodes if n.op == "placeholder"]
            with torch._inductor.config.patch((config_of_part or {}).get(i, {})):
                compiled = compile_fx(sub, inputs)
            delattr(top, name)
            top.__dict__[name] = compiled
        return top

    return piecewise


def test_a_backend_that_splits_dynamos_graph_gets_a_graph_per_part(tmp_path_factory):
    """A backend that splits Dynamo's graph and calls Inductor per part (DDPOptimizer's buckets, vLLM's piecewise
    compile): every part ran under one Dynamo compile id, so their nodes, IR ops and kernels were mixed into one
    graph, and IR ops of the same name (each part has a buf0) counted once. Each part is an AOT autograd compile of
    its own: its graphs are 0/0.2, ..., its backward (compiled lazily, at the first backward) among them."""
    def body(torch, m):
        piecewise = _piecewise_backend(torch)

        class Two(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = torch.nn.Linear(8, 8)
                self.b = torch.nn.Linear(8, 8)

            def forward(self, x):
                h = torch.relu(self.a(x))
                g = torch.sigmoid(h)
                return self.b(g) * 2

        torch.compile(Two(), backend=piecewise)(torch.randn(2, 8)).sum().backward()

    path, model = _trace(tmp_path_factory, "parts", body)
    src = Path(__file__).read_text().splitlines()
    line = {text: next(i + 1 for i, s in enumerate(src) if s.strip() == text)
            for text in ("h = torch.relu(self.a(x))", "g = torch.sigmoid(h)", "return self.b(g) * 2")}
    relu, sigmoid, out = line["h = torch.relu(self.a(x))"], line["g = torch.sigmoid(h)"], line["return self.b(g) * 2"]
    graphs = {g["label"]: g for g in model["graphs"]}
    assert sorted(graphs) == ["0/0 backward", "0/0 forward", "0/0.2 backward", "0/0.2 forward"], sorted(graphs)

    def lines_at(label, st):
        return {src["line"] for o in graphs[label]["stages"][st]["objects"] for src in o.get("sources") or []}

    # Each part's own stages hold its own lines only; the Dynamo graph is every part's.
    assert lines_at("0/0 forward", S.POST_GRAD) == {relu} and lines_at("0/0.2 forward", S.POST_GRAD) == {sigmoid, out}
    assert lines_at("0/0 forward", S.PRE_GRAD) == {relu} and lines_at("0/0.2 forward", S.PRE_GRAD) == {sigmoid, out}
    assert lines_at("0/0.2 forward", S.DYNAMO_GRAPH) == {relu, sigmoid, out}
    # The lazy backward of each part is that part's: the sigmoid's derivative is in 0/0.2's backward only.
    assert sigmoid in lines_at("0/0.2 backward", S.POST_GRAD) and sigmoid not in lines_at("0/0 backward", S.POST_GRAD)
    # Part 2 owns its pre-grad; its source and Dynamo graph are part 1's, counted once in the summary.
    assert graphs["0/0.2 forward"]["shared"] == {S.SOURCE: "0/0 forward", S.DYNAMO_GRAPH: "0/0 forward"}
    assert graphs["0/0.2 backward"]["shared"][S.PRE_GRAD] == "0/0.2 forward"
    dynamo_nodes = len(graphs["0/0 forward"]["stages"][S.DYNAMO_GRAPH]["objects"])
    assert next(r for r in model["summary"] if r["stage"] == S.DYNAMO_GRAPH)["objects"] == dynamo_nodes
    ir = {lbl: [o["name"] for o in graphs[lbl]["stages"][S.IR_PRE]["objects"]] for lbl in ("0/0 forward", "0/0.2 forward")}
    assert ir["0/0 forward"][0] == ir["0/0.2 forward"][0] == "buf0", ir  # the same name in each part, both counted
    # A line whose ops are in the other part is not a loss in this one.
    row = next(r for r in graphs["0/0 forward"]["survival"] if r["line"] == sigmoid)
    assert row["lost_at"] is None and row["note"].startswith("in graph 0/0.2 forward"), row
    assert any(n.startswith("The backend (piecewise) split Dynamo's graph 0/0 and compiled it in 2 parts")
               for n in graphs["0/0.2 forward"]["notes"])


def test_a_graph_the_program_hands_inductor_itself_is_not_called_an_export(tmp_path_factory):
    """standalone_compile (or compile_fx) outside Dynamo: no Dynamo compile id is current, and such a compile was
    labelled `export` and introduced as "An exported program (torch.export)". It is its own path: `inductor`,
    `inductor-2` for the next, each an AOT autograd compile, with no source frame or Dynamo graph on it."""
    def body(torch, m):
        from torch.fx.experimental.proxy_tensor import make_fx

        for scale in (2.0, 3.0):
            gm = make_fx(lambda x: x.cos() * scale + 1)(torch.randn(4))
            torch._inductor.standalone_compile(gm, [torch.randn(4)])(torch.randn(4))

    path, model = _trace(tmp_path_factory, "direct", body)
    graphs = {g["label"]: g for g in model["graphs"]}
    assert sorted(graphs) == ["inductor inference", "inductor-2 inference"], sorted(graphs)
    for g in graphs.values():
        assert g["backend"] == "Inductor, called directly"
        # No Dynamo compile in the run: its graph's column is not shown at all.
        assert set(g["off_path"]) == {S.SOURCE} and S.DYNAMO_GRAPH not in model["stage_order"], g["off_path"]
        assert all(g["stages"][st]["observed"] for st in (S.PRE_GRAD, S.POST_GRAD, S.KERNEL_SPEC, S.ARTIFACT))
        assert [o["name"] for o in g["stages"][S.KERNEL_SPEC]["objects"]] == ["cpp_fused_add_cos_mul_0"]
    import prov_trace
    md = prov_trace.load(path).to_markdown()
    assert "An exported program" not in md
    assert md.count("A graph the program handed Inductor itself (`torch._inductor.standalone_compile` or `compile_fx`") == 2


def test_ddp_buckets_are_parts_of_one_dynamo_graph(tmp_path_factory):
    """DDPOptimizer (torch.compile of a DDP module) splits Dynamo's graph at DDP's gradient buckets and compiles
    each bucket's part apart: one graph per part, forward and backward, named for the optimizer's method."""
    def body(torch, m):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        store = tmp_path_factory.mktemp("pg") / "store"
        dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
        try:
            class Three(torch.nn.Module):  # the model's own code: Dynamo skips a frame of torch.nn's
                def __init__(self):
                    super().__init__()
                    self.a, self.b, self.c = (torch.nn.Linear(512, 512) for _ in range(3))

                def forward(self, x):
                    return self.c(torch.tanh(self.b(torch.relu(self.a(x)))))

            # 1 MB buckets (DDP's first bucket is 1 MB): each 512x512 layer's gradient is a bucket of its own.
            torch.compile(DDP(Three(), bucket_cap_mb=1))(torch.randn(4, 512)).sum().backward()
        finally:
            dist.destroy_process_group()

    path, model = _trace(tmp_path_factory, "ddp_parts", body)
    graphs = [g for g in model["graphs"] if g["backend"] == "DDPOptimizer.compile_fn"]
    cids = list(dict.fromkeys(g["compile_id"] for g in graphs))
    assert len(cids) == 3 and cids[1:] == [f"{cids[0]}.2", f"{cids[0]}.3"], [g["label"] for g in model["graphs"]]
    assert sorted(g["kind"] for g in graphs) == ["backward"] * 3 + ["forward"] * 3
    # Each part holds one layer's addmm in its forward; the three together are the Dynamo graph's three linears.
    addmm = [sum(1 for o in g["stages"][S.POST_GRAD]["objects"] if o["name"].startswith("addmm"))
             for g in graphs if g["kind"] == "forward"]
    assert addmm == [1, 1, 1], addmm


def test_a_lazy_backward_after_a_reset_is_its_forwards_graph(tmp_path_factory):
    """Inductor compiles a backward graph at the first backward call. After a torch._dynamo.reset() (a new round
    of compile ids: 0/0#2) that backward took the new round's id, as if another compile's. Its AOT autograd
    compile is its forward's, so it keeps the forward's id."""
    def body(torch, m):
        class Sin(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)

            def forward(self, x):
                return torch.sin(self.fc(x))

        out = torch.compile(Sin())(torch.randn(2, 4)).sum()  # the forward; the backward waits
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(Sin())(torch.randn(2, 4))  # the new round's 0/0
        out.backward()

    path, model = _trace(tmp_path_factory, "lazy_after_reset", body)
    graphs = {g["label"]: g for g in model["graphs"]}
    assert sorted(graphs) == ["0/0 backward", "0/0 forward", "0/0#2 inference"], sorted(graphs)
    assert graphs["0/0 backward"]["stages"][S.KERNEL_SPEC]["observed"]  # compiled at the backward call, after the reset


def test_a_part_whose_compile_raised_says_what_was_raised(tmp_path_factory):
    """A split Dynamo graph whose second part fails in Inductor (here its C++ compiler is missing): Dynamo's handler
    reads the error under the Dynamo compile's id, 0/0, and the part that stopped, 0/0.2, says what it raised."""
    def body(torch, m):
        piecewise = _piecewise_backend(torch, config_of_part={1: {"cpp.cxx": ("/nonexistent/c++",)}})

        def f(x):
            h = torch.relu(x + 1)
            return torch.sigmoid(h) * 2

        try:
            with torch.no_grad():
                torch.compile(f, backend=piecewise)(torch.randn(8))
        except Exception:  # noqa: BLE001 - the part's compile fails, as the test means it to
            pass

    path, model = _trace(tmp_path_factory, "part_raised", body)
    graphs = {g["label"]: g for g in model["graphs"]}
    assert sorted(graphs) == ["0/0 inference", "0/0.2 inference"], sorted(graphs)
    stopped = graphs["0/0.2 inference"]["headline"]["stopped_in"]
    assert stopped and stopped["error"]["type"] == "torch._inductor.exc.InductorError", stopped
    assert "No working C++ compiler found" in stopped["error"]["inner"]["text"], stopped
    # Part 1 compiled to its artifact; the Dynamo graph's compile, which it shares, is what did not finish.
    first = graphs["0/0 inference"]
    assert first["stages"][S.ARTIFACT]["observed"] and first["headline"]["stopped_in"]["stage"] == S.DYNAMO_GRAPH


def test_a_graph_of_one_kernel_says_it_carries(altered_graphs):
    """The headline's kernel clause agrees with its count: it read "0 of 1 kernel carry no source at all"."""
    import prov_trace

    trace, model = altered_graphs
    text = prov_trace.load(trace).to_markdown()
    ones = [g for g in model["graphs"] if g["headline"]["kernels"] == 1]
    assert ones, [g["headline"]["kernels"] for g in model["graphs"]]
    assert f"{len(ones[0]['headline']['sourceless_kernels'])} of 1 kernel carries no source at all" in text
    assert "of 1 kernel carry " not in text and "of 1 kernels" not in text
