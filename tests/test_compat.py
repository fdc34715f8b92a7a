"""The end-to-end core, against whatever torch is installed: `make test-compat` runs it in a venv per torch release.

    PROV_TRACE_COMPAT=1 python -m pytest -m compat tests/test_compat.py

Three real compiles, each once per session, by the real CLI, each with Inductor's own provenance
record on (INDUCTOR_PROVENANCE=1, TORCH_TRACE): the reference audit (one inference graph), the same
model with --train (a forward and a backward graph), and a model whose forward has a graph break
(two compile ids). Every assertion here holds on each release measured in docs/compat.md
(2.10.0 through 2.14.1): what a release changes that a user would see belongs in that table, not here.

Skipped unless PROV_TRACE_COMPAT is set: on the main interpreter (torch 2.13.0) the same ground is
covered by test_reference_mlp.py and test_models.py, and `make test` has no time to do it twice.
"""

from __future__ import annotations

import os

import pytest

from conftest import EXAMPLES, Run, cli, unknown_wrapper_ops
from inductor_trace import assert_artifact_matches_file, assert_matches_inductor

pytestmark = [
    pytest.mark.compat,
    pytest.mark.compile,
    pytest.mark.skipif(not os.environ.get("PROV_TRACE_COMPAT"),
                       reason="set PROV_TRACE_COMPAT=1 (make test-compat does) to run the torch-release compat core"),
]

TITLES = ("Source", "Dynamo graph", "FX pre-grad", "AOT graph", "FX post-grad", "LoopLevelIR (pre-pass)",
          "LoopLevelIR (post-pass)", "Kernel spec", "Artifact")
#: The stock profile's hooks that only torch.export and AOTInductor reach: a torch.compile never fires them.
EXPORT_ONLY = ("torch.export._trace:_export", "torch._inductor.codecache:AotCodeCompiler.compile",
               "torch._dynamo.convert_frame:exception_handler",  # and the handler of a compile that raised,
               "torch.compiler:save_cache_artifacts")  # and what a program calls to save its caches


def _run(tmp_path_factory, name: str, *args: str) -> Run:
    d = tmp_path_factory.mktemp(name)
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), *args, cwd=d, check=True,
               env={"INDUCTOR_PROVENANCE": "1", "TORCH_TRACE": str(d / "torch_trace")})
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="session")
def compat_mlp(tmp_path_factory) -> Run:
    return _run(tmp_path_factory, "compat_mlp", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP")


@pytest.fixture(scope="session")
def compat_train(tmp_path_factory) -> Run:
    return _run(tmp_path_factory, "compat_train", "--train", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP")


@pytest.fixture(scope="session")
def compat_graph_break(tmp_path_factory) -> Run:
    return _run(tmp_path_factory, "compat_graph_break", str(EXAMPLES / "graph_break.py") + ":GraphBreakMLP")


AOT_EAGER_TRAIN = """\
import sys
import torch
sys.path.insert(0, {examples!r})
from reference_mlp import SimpleMLP

torch.manual_seed(0)
model = SimpleMLP()
torch.compile(model, backend="aot_eager")(torch.randn(2, 128)).sum().backward()
print("backward done")
"""


@pytest.fixture(scope="session")
def compat_aot_eager(tmp_path_factory) -> Run:
    d = tmp_path_factory.mktemp("compat_aot_eager")
    (d / "aot_eager_train.py").write_text(AOT_EAGER_TRAIN.format(examples=str(EXAMPLES)))
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), str(d / "aot_eager_train.py"),
               cwd=d, check=True)
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="session")
def compat_export(tmp_path_factory) -> Run:
    run = _run(tmp_path_factory, "compat_export", str(EXAMPLES / "export_aoti.py"), "mlp.pt2")  # into its own dir
    assert (run.workdir / "mlp.pt2").is_file()
    return run


def _cells(graph):
    return {(r["layer"], r["field"]): r["cells"] for r in graph["matrix"]}


def _every_stage_fired(run: Run, labels: list[str]) -> dict:
    out = run.proc.stdout.splitlines()
    for title in TITLES:
        line = next(ln for ln in out if ln.strip().startswith(title))
        assert " fired " in line, line
    model = run.model()
    assert model["trace"]["complete"] and not model["errors"], model["errors"]
    assert [g["label"] for g in model["graphs"]] == labels
    for g in model["graphs"]:
        for st in model["stage_order"]:
            assert g["stages"][st]["observed"], (g["label"], st)
    assert all(h["resolved"] and h["installed"] for h in model["hooks"]), model["hooks"]
    backward = any(g["kind"] == "backward" for g in model["graphs"])
    assert all(h["fired"] >= 1 for h in model["hooks"] if h["target"] not in EXPORT_ONLY
               and (backward or not h["target"].endswith(":_aot_stage2b_bw_compile"))), model["hooks"]
    return model


def test_targets_resolve_on_this_torch():
    proc = cli("targets", "--profile", "inductor-cpu")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from prov_trace.probes import profiles

    n = len(profiles.INDUCTOR_CPU.hooks)
    assert proc.stdout.rstrip().endswith(f"{n} targets: {n} ok, 0 drifted"), proc.stdout


def test_the_report_knows_this_torchs_wrapper_ops():
    """The wrapper HOPs AOT inlines, whose call lines are no loss (report/model.py's WRAPPER_OPS)."""
    assert unknown_wrapper_ops() == set()


def test_reference_audit(compat_mlp):
    model = _every_stage_fired(compat_mlp, ["0/0 inference"])
    g = model["graphs"][0]
    st = g["stages"]
    post = [o["name"] for o in st["post_grad"]["objects"]]
    assert post == ["permute", "addmm", "relu", "permute_1", "addmm_1"]  # compute nodes; the boundary is counted apart
    cells = _cells(g)
    assert {k: cells[("FX", k)]["post_grad"]["n"] for k in ("stack_trace", "nn_module_stack", "source_fn_stack",
                                                            "original_aten", "from_node")} == {
        "stack_trace": 5, "nn_module_stack": 4, "source_fn_stack": 5, "original_aten": 5, "from_node": 5}
    assert (cells[("FX", "stack_trace")]["pre_grad"]["n"], cells[("FX", "stack_trace")]["pre_grad"]["total"]) == (3, 3)
    assert (cells[("FX", "stack_trace")]["dynamo_graph"]["n"], cells[("FX", "stack_trace")]["dynamo_graph"]["total"]) == (3, 3)
    assert cells[("FX", "original_aten")]["aot_graph"]["n"] == 5
    kinds = {o["name"]: o["kind"] for o in st["ir_pre"]["objects"]}
    assert kinds == {"buf0": "ExternKernelOut", "buf1": "ComputedBuffer", "buf2": "ExternKernelOut"}
    for stage in ("ir_pre", "ir_post"):
        assert cells[("IR", "origins")][stage]["state"] == "all"
        assert cells[("IR", "get_stack_traces")][stage]["state"] == "all"
    ks = st["kernel_spec"]["objects"]
    assert sorted((k["kind"], k["kernel"]) for k in ks) == [
        ("extern", "extern_kernels.addmm"), ("extern", "extern_kernels.addmm"), ("generated", "cpp_fused_relu_0")]
    rows = {r["text"]: r for r in g["survival"]}
    assert rows["x = self.fc1(x)"]["last_stage"] == "artifact"


def test_inductor_cross_check(compat_mlp):
    model = compat_mlp.model()
    assert assert_matches_inductor(model, compat_mlp.workdir / "torch_trace") == 1
    assert assert_artifact_matches_file(model) == 3


def test_backward_graph(compat_train):
    model = _every_stage_fired(compat_train, ["0/0 forward", "0/0 backward"])
    bw = model["graphs"][1]
    assert bw["stages"]["post_grad"]["objects"], "the backward graph has no post-grad nodes"
    assert _cells(bw)[("FX", "original_aten")]["post_grad"]["n"] > 0
    # Inductor records a mapping for the forward graph; for the backward one it may log only {"version": ...}.
    assert assert_matches_inductor(model, compat_train.workdir / "torch_trace") >= 1
    assert assert_artifact_matches_file(model) >= 1


def test_graph_break(compat_graph_break):
    model = _every_stage_fired(compat_graph_break, ["0/0 inference", "1/0 inference"])
    assert assert_matches_inductor(model, compat_graph_break.workdir / "torch_trace") == 2
    first, second = model["graphs"]
    texts = lambda g: {r["text"] for r in g["survival"]}  # noqa: E731
    assert "x = torch.relu(x)" in texts(first) and "x = x * 2.0" in texts(second)


def test_aot_eager_backend(compat_aot_eager):
    model = compat_aot_eager.model()
    assert model["trace"]["complete"] and not model["errors"], model["errors"]
    assert [g["label"] for g in model["graphs"]] == ["0/0 forward", "0/0 backward"]
    why = "not on this compile's path (backend: aot_eager)"
    for g in model["graphs"]:
        assert g["backend"] == "aot_eager"
        assert g["off_path"] == {st: why for st in ("pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact")}
        assert g["stages"]["dynamo_graph"]["observed"] and g["stages"]["aot_graph"]["observed"]
    fw, bw = model["graphs"]
    assert len(fw["stages"]["dynamo_graph"]["objects"]) == 3 and len(fw["stages"]["aot_graph"]["objects"]) == 5
    assert len(bw["stages"]["aot_graph"]["objects"]) == 18
    assert _cells(fw)[("FX", "stack_trace")]["aot_graph"]["state"] == "all"


def test_export_and_aoti(compat_export):
    model = compat_export.model()
    assert model["trace"]["complete"] and not model["errors"], model["errors"]
    (g,) = model["graphs"]
    assert g["label"] == "export inference" and g["off_path"] == {}
    for st in ("source", "export_graph", "pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact"):
        assert g["stages"][st]["observed"], st
    assert len(g["stages"]["source"]["objects"]) == 4 and len(g["stages"]["artifact"]["objects"]) == 3
    assert _cells(g)[("Backend", "provenance_comment")]["artifact"]["state"] == "all"
    assert assert_matches_inductor(model, compat_export.workdir / "torch_trace") == 1
