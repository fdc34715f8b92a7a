"""Real models and real scripts, each traced once by the real CLI, and checked against Inductor's own record."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from conftest import EXAMPLES, Run, cli
from inductor_trace import assert_artifact_matches_file, assert_matches_inductor

pytestmark = pytest.mark.heavy


def _run(tmp_path_factory, name: str, *args: str) -> Run:
    d = tmp_path_factory.mktemp(name)
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "audit.md"), *args, cwd=d, check=True,
               env={"INDUCTOR_PROVENANCE": "1", "TORCH_TRACE": str(d / "torch_trace")})
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="module")
def mlp_train(tmp_path_factory):
    return _run(tmp_path_factory, "mlp_train", "--train", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return _run(tmp_path_factory, "encoder", str(EXAMPLES / "encoder_stack.py") + ":EncoderStack")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed (it is in the `test` extra: pip install -e '.[test]')")
    return _run(tmp_path_factory, "gpt2", str(EXAMPLES / "gpt2_tiny.py") + ":build")


@pytest.fixture(scope="module")
def recompile(tmp_path_factory):
    return _run(tmp_path_factory, "recompile", str(EXAMPLES / "recompile.py"))


@pytest.fixture(scope="module")
def train_script(tmp_path_factory):
    return _run(tmp_path_factory, "train", str(EXAMPLES / "train.py"), "--steps", "3", "--compile-optimizer")


def _check(run: Run) -> dict:
    model = run.model()
    assert model["trace"]["complete"] and not model["errors"], model["errors"]
    assert assert_matches_inductor(model, run.workdir / "torch_trace") >= 1
    assert assert_artifact_matches_file(model) >= 1
    return model


def test_mlp_train_forward_and_backward(mlp_train):
    model = _check(mlp_train)
    assert [g["label"] for g in model["graphs"]] == ["0/0 forward", "0/0 backward"]
    bwd = model["graphs"][1]
    # The backward graph's inputs are the tangents: placeholders, counted apart from its compute nodes.
    assert any(o["name"].startswith("tangents") for o in bwd["stages"]["post_grad"]["boundary"])
    assert bwd["shared"] == {"source": "0/0 forward", "dynamo_graph": "0/0 forward", "pre_grad": "0/0 forward"}


def test_encoder_stack_24_layers(encoder):
    model = _check(encoder)
    (g,) = model["graphs"]
    post = g["stages"]["post_grad"]["objects"]
    assert len(post) > 1400, len(post)  # compute nodes; the fast path is off: ordinary ops, not 24 opaque nodes
    assert not any("_transformer_encoder_layer_fwd" in (o.get("target") or "") for o in post)
    # Every layer's source line reaches the kernel spec.
    rows = {r["text"]: r for r in g["survival"]}
    assert rows["x = layer(x)"]["counts"]["kernel_spec"] > 24
    # The loop's own line makes no op: every Dynamo graph node names its line, none names this one, so it is
    # not a line a stage lost (it was ranked first in "Where provenance is lost").
    loop = rows["for layer in self.layers:"]
    assert loop["note"] == "no op traced to this line" and loop["lost_at"] is None and loop["lost_by"] == []
    assert not any(ln["line"] == loop["line"] for loss in g["losses"] for ln in loss["lines"]), g["losses"]


def test_gpt2_tiny(gpt2):
    model = _check(gpt2)
    assert model["graphs"], "no graph traced"
    files = {r["file"] for g in model["graphs"] for r in g["survival"]}
    assert any(f.endswith("modeling_gpt2.py") for f in files), files


def test_graph_break_and_recompile_each_graph_by_compile_id(recompile):
    model = _check(recompile)
    assert [g["label"] for g in model["graphs"]] == ["0/0 inference", "1/0 inference", "0/1 inference", "1/1 inference"]
    for g in model["graphs"]:
        for st in ("source", "pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact"):
            assert g["stages"][st]["observed"], (g["label"], st)
    first = {r["text"] for r in model["graphs"][0]["survival"]}
    second = {r["text"] for r in model["graphs"][1]["survival"]}
    assert "x = torch.relu(x)" in first and "x = x * 2.0" in second
    assert "batch 8: output (8, 64)" in recompile.proc.stdout
    # The recompile breaks at the same line: one summary line names both compiles.
    breaks = [ln for ln in recompile.proc.stdout.splitlines() if "graph break at" in ln]
    assert breaks == ["  [0/0, 0/1] graph break at graph_break.py:22 (in forward): Failed to trace builtin operator: "
                      "Dynamo does not know how to trace builtin operator `print` with argument types ['str'] "
                      "(has_kwargs False)"], breaks
    # The break line: the frame before it names both resumed graphs; a resumed graph and its recompile, itself.
    breaks = {g["label"]: [n.split(", so no stage carries it, ")[1] for n in g["notes"] if "is a graph break" in n]
              for g in model["graphs"]}
    assert breaks == {"0/0 inference": ["and graphs 1/0 inference, 1/1 inference resume after it."],
                      "0/1 inference": ["and graphs 1/0 inference, 1/1 inference resume after it."],
                      "1/0 inference": ["and this graph resumes after it."],
                      "1/1 inference": ["and this graph resumes after it."]}, breaks


def test_training_script_unmodified(train_script):
    model = _check(train_script)
    labels = [g["label"] for g in model["graphs"]]
    assert "0/0 forward" in labels and "0/0 backward" in labels, labels
    assert len(labels) > 2, f"the compiled optimizer step was not traced: {labels}"
    # Frames Dynamo compiled without producing a graph (the optimizer's wrappers) are listed apart,
    # not shown as graphs whose every stage is missing.
    assert all(g["stages"]["post_grad"]["observed"] for g in model["graphs"]), labels
    assert model["frames_without_graph"], "the optimizer's wrapper frames should be listed"
    # Each says why it has no graph: a break that ended it before any op, or Dynamo's skip of a frame with no
    # op (its resume function after that break), which listed with no reason at all.
    for f in model["frames_without_graph"]:
        assert f["graph_break"] or f["skipped"] or f["stopped_in"], f
    (resumed,) = [f for f in model["frames_without_graph"] if "torch_dynamo_resume_in_wrapper" in f["qualname"]]
    # torch 2.13's words (the suite's torch); 2.10 gives no reason.
    assert resumed["skipped"]["reason"].startswith("Dynamo decided to skip the frame while tracing: No ops traced "
                                                   "for the FX graph."), resumed
    md = train_script.report.read_text()
    said = ("(Dynamo skipped it and ran it as Python: No ops traced for the FX graph. \\`torch.compile\\` will skip "
            "the frame and fall back to eager)")
    assert f"`{resumed['qualname']}` " in md and said in md, md[:3000]
    # The compiled optimizer step is torch's own code (torch/optim): framework lines, never the model's, though
    # the compile carries them; its graph counts no line of the model, as its note says.
    for g in model["graphs"]:
        torch_rows = [r for r in g["survival"] if "/torch/" in str(r["file"]) and "packages" in str(r["file"])]
        assert not any(r["user"] for r in torch_rows), (g["label"], [r["file"] for r in torch_rows if r["user"]][:3])
    step = [g for g in model["graphs"] if not any(r["user"] for r in g["survival"])]
    assert step and all(g["headline"]["lines"] == 0 for g in step), [g["label"] for g in model["graphs"]]
    assert "step 2: loss" in train_script.proc.stdout
