"""Traced and untraced compiles of the same model, in this process: the host sees no difference."""

from __future__ import annotations

import threading

import pytest
import torch

from prov_trace.probes.profiles import INDUCTOR_CPU
from prov_trace.report.model import build
from prov_trace.stream.reader import read_trace
from prov_trace.runner import defeat_caches
from prov_trace.tracer.session import TraceSession
from prov_trace.stream.writer import TraceWriter


def _mlp():
    import importlib.util

    from conftest import EXAMPLES

    spec = importlib.util.spec_from_file_location("reference_mlp", EXAMPLES / "reference_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    return mod.SimpleMLP()


def _traced(path, fn):
    with TraceSession(TraceWriter(path), INDUCTOR_CPU, log=lambda m: None):
        result = fn()
    return result, build(read_trace(path))


def _train_step(model, x):
    torch._dynamo.reset()
    compiled = torch.compile(model)
    model.zero_grad()
    out = compiled(x)
    out.sum().backward()
    return out.detach().clone(), [p.grad.clone() for p in model.parameters()]


@pytest.fixture(scope="module")
def train_results(tmp_path_factory):
    defeat_caches()
    model = _mlp()
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(1))
    plain = _train_step(model, x)
    traced, report = _traced(tmp_path_factory.mktemp("train") / "t.msgpack", lambda: _train_step(model, x))
    return plain, traced, report


def test_train_outputs_and_grads_bitwise_equal(train_results):
    (out_a, grads_a), (out_b, grads_b), _ = train_results
    assert torch.equal(out_a, out_b)
    assert all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))


def test_train_gives_forward_and_backward_graphs(train_results):
    report = train_results[2]
    labels = [g["label"] for g in report["graphs"]]
    # The backward graph compiles under the forward's compile id.
    assert labels == ["0/0 forward", "0/0 backward"], labels
    for g in report["graphs"]:
        assert g["stages"]["post_grad"]["observed"] and g["stages"]["kernel_spec"]["objects"], g["label"]
    fwd, bwd = report["graphs"][0], report["graphs"][-1]
    bwd_nodes = {o["name"] for o in bwd["stages"]["post_grad"]["objects"]}
    assert bwd_nodes != {o["name"] for o in fwd["stages"]["post_grad"]["objects"]}
    # The backward graph's inputs are the tangents: placeholders, counted apart from its compute nodes.
    assert any(o["name"].startswith("tangents") for o in bwd["stages"]["post_grad"]["boundary"])
    assert bwd["shared"] == {"source": "0/0 forward", "dynamo_graph": "0/0 forward", "pre_grad": "0/0 forward"}
    assert fwd["shared"] == {}


def test_inference_output_bitwise_equal(tmp_path):
    defeat_caches()
    model = _mlp().eval()
    x = torch.randn(2, 128, generator=torch.Generator().manual_seed(2))

    def once():
        torch._dynamo.reset()
        with torch.no_grad():
            return torch.compile(model)(x)

    plain = once()
    traced, report = _traced(tmp_path / "t.msgpack", once)
    assert torch.equal(plain, traced)
    assert report["graphs"][0]["label"] == "0/0 inference"


def test_compile_on_another_thread_is_traced(tmp_path):
    defeat_caches()
    model = _mlp().eval()
    x = torch.randn(2, 128)
    box = {}

    def work():
        # torch's compile config is thread-local: the main thread's cache setting does not reach here.
        torch.compiler.config.force_disable_caches = True
        torch._dynamo.reset()
        with torch.no_grad():
            box["out"] = torch.compile(model)(x)

    def run():
        t = threading.Thread(target=work, name="compile-worker")
        t.start()
        t.join()

    _, report = _traced(tmp_path / "t.msgpack", run)
    assert "out" in box
    trace = read_trace(tmp_path / "t.msgpack")
    threads = {r["thread"]["name"] for r in trace.records if r["kind"] == "probe"}
    assert threads == {"compile-worker"}
    assert report["graphs"][0]["stages"]["artifact"]["observed"]


def _seen_by_coverage_while_traced() -> int:
    return 42  # runs only inside the traced window of the test below


def test_the_suites_own_coverage_run_and_prov_trace_see_their_events(tmp_path):
    """Under `make test` on 3.12+ this suite runs under coverage.py's sys.monitoring core: in one process,
    coverage measures lines while prov-trace traces a compile with its own tool id, and neither loses events."""
    import inspect
    import sys

    coverage = pytest.importorskip("coverage")
    cov = coverage.Coverage.current()
    mon = getattr(sys, "monitoring", None)
    if cov is None or mon is None or mon.get_tool(mon.COVERAGE_ID) != "coverage.py":
        pytest.skip("not under a sys.monitoring coverage run (make test runs the 3.12+ suite under one)")
    defeat_caches()
    model = _mlp().eval()
    x = torch.randn(2, 128)

    def once():
        torch._dynamo.reset()
        with torch.no_grad():
            out = torch.compile(model)(x)
        assert mon.get_tool(mon.COVERAGE_ID) == "coverage.py" and "prov-trace" in map(mon.get_tool, (3, 4, 5))
        return out, _seen_by_coverage_while_traced()

    (_, answer), report = _traced(tmp_path / "t.msgpack", once)
    assert answer == 42
    trace = read_trace(tmp_path / "t.msgpack")
    assert trace.complete and trace.header["backend"] == "monitoring"
    # prov-trace saw every stage of the compile ...
    stages = report["graphs"][0]["stages"]
    assert all(stages[s]["observed"] for s in ("pre_grad", "post_grad", "ir_post", "kernel_spec", "artifact")), stages
    # ... and coverage saw the line that ran only while prov-trace was tracing.
    body = inspect.getsourcelines(_seen_by_coverage_while_traced)[1] + 1
    assert body in (cov.get_data().lines(__file__) or ()), "coverage lost its line events while prov-trace traced"
    assert mon.get_tool(mon.COVERAGE_ID) == "coverage.py" and "prov-trace" not in map(mon.get_tool, (3, 4, 5))


def _load_example(name: str):
    import importlib.util

    from conftest import EXAMPLES

    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.heavy
def test_encoder_stack_forward_and_backward_bitwise_equal(tmp_path):
    """The 24-layer encoder (about 1,750 post-grad nodes forward), trained one step with and without tracing.

    Dropout is 0, so the step is deterministic: the two compiles make the same kernels, and any byte
    of difference in the output or in a parameter's grad would be the tracer's doing.
    """
    defeat_caches()
    enc = _load_example("encoder_stack")
    torch.manual_seed(0)
    model = enc.EncoderStack().train()
    (x,) = enc.example_inputs()
    plain = _train_step(model, x)
    traced, report = _traced(tmp_path / "t.msgpack", lambda: _train_step(model, x))

    (out_a, grads_a), (out_b, grads_b) = plain, traced
    assert len(grads_a) == len(grads_b) == len(list(model.parameters())) and grads_a
    assert torch.equal(out_a, out_b)
    unequal = [n for (n, _), a, b in zip(model.named_parameters(), grads_a, grads_b) if not torch.equal(a, b)]
    assert not unequal, unequal
    # The traced step really compiled the stack, forward and backward, with its ~1,750-node forward graph.
    labels = [g["label"] for g in report["graphs"]]
    assert labels == ["0/0 forward", "0/0 backward"], labels
    for g in report["graphs"]:
        assert len(g["stages"]["post_grad"]["objects"]) > 1000, (g["label"], len(g["stages"]["post_grad"]["objects"]))
        assert g["stages"]["kernel_spec"]["objects"], g["label"]
