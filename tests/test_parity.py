"""Parity: the reference MLP's compile traced by two backends gives the same records.

3.12+: monitoring against settrace, and inject against settrace. 3.11: inject
against settrace. Each trace is one `prov-trace run ... --backend NAME --no-report`
in a fresh process (two compiles for the whole file, three on 3.12+). The records
must agree in order and content, apart from what differs between any two
processes: timing fields (t_ns, probe_ns), thread ids, id()-based numbers
(graph_id values, the keys of nn_module_stack), the artifact's temporary
directory, and the header's backend, pid and start time.
"""

from __future__ import annotations

import sys

import msgpack
import pytest

from conftest import EXAMPLES, HAS_MONITORING, cli
from trace_compare import HEADER_VOLATILE, TIMING, differences, normalised, shape

pytestmark = pytest.mark.compile

FAST = "monitoring" if HAS_MONITORING else "inject"
PAIR = (FAST, "settrace")

def _trace(tmp_path_factory, backend: str) -> list[dict]:
    if backend == "settrace" and sys.gettrace() is not None:
        pytest.skip("another sys.settrace tracer (a debugger or coverage) is active")
    d = tmp_path_factory.mktemp(f"parity-{backend}")
    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "-o", str(d / "t.msgpack"),
               "--backend", backend, "--no-report", cwd=d)
    assert proc.returncode == 0, f"--backend {backend} exited {proc.returncode}\n{proc.stderr[-4000:]}"
    assert f"backend {backend}: {backend} was requested" in proc.stderr
    if backend == "inject":
        # Every stock hook is rewritten. Dynamo's own (_compile, _call_user_compiler, ...) were put on the settrace
        # fallback when torch._dynamo was imported during the trace: its import watcher asked Dynamo's rules while
        # importlib still marked the module initializing, and took "can't ask" for "may trace". The records were
        # the same, but settrace ran under the whole compile, and missed a compile in a thread already running.
        assert "inject can't instrument" not in proc.stderr, proc.stderr[-4000:]
    with open(d / "t.msgpack", "rb") as f:
        return list(msgpack.Unpacker(f, raw=False))


@pytest.fixture(scope="session")
def fast_trace(tmp_path_factory) -> list[dict]:
    return _trace(tmp_path_factory, FAST)


@pytest.fixture(scope="session")
def settrace_trace(tmp_path_factory) -> list[dict]:
    return _trace(tmp_path_factory, "settrace")


def test_both_backends_traced_every_stage(fast_trace, settrace_trace):
    for records, backend in ((fast_trace, FAST), (settrace_trace, "settrace")):
        assert records[0]["backend"] == backend
        assert records[-1]["kind"] == "end" and records[-1]["outcome"] == "ok"
        stages = {r["stage"] for r in records if r["kind"] == "probe"}
        assert stages >= {"source", "pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact"}
        assert not [r for r in records if r["kind"] == "error"]


def test_same_sequence_of_stages_targets_and_phases(fast_trace, settrace_trace):
    assert shape(fast_trace) == shape(settrace_trace)


def test_same_payloads_and_hook_states(fast_trace, settrace_trace):
    fast, slow = normalised(fast_trace), normalised(settrace_trace)
    assert len(fast) == len(slow)
    problems = []
    for i, (a, b) in enumerate(zip(fast, slow)):
        for d in differences(a, b):
            problems.append(f"record {i} ({a['kind']} {a.get('stage')}){d}")
    assert not problems, f"{FAST} and settrace traces differ:\n" + "\n".join(problems[:40])


def test_the_headers_differ_only_in_the_backend(fast_trace, settrace_trace):
    a, b = fast_trace[0], settrace_trace[0]
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} <= HEADER_VOLATILE | TIMING
    assert a["backend_reason"] == f"{FAST} was requested" and b["backend_reason"] == "settrace was requested"


@pytest.mark.skipif(not HAS_MONITORING, reason="on 3.11 inject is the fast backend compared above")
def test_inject_on_this_python_traces_what_settrace_does(tmp_path_factory, settrace_trace):
    """inject on 3.12 and 3.13, where `auto` picks monitoring: each has its own call sequence
    (3.12: NULL, callable; 3.13: callable, NULL), and the records must still be settrace's."""
    injected, slow = normalised(_trace(tmp_path_factory, "inject")), normalised(settrace_trace)
    assert len(injected) == len(slow)
    problems = [f"record {i} ({a['kind']} {a.get('stage')}){d}" for i, (a, b) in enumerate(zip(injected, slow))
                for d in differences(a, b)]
    assert not problems, "inject and settrace differ:\n" + "\n".join(problems[:40])


def _cache_entries() -> dict[str, tuple[int, int]]:
    import os
    from pathlib import Path

    root = Path(os.environ["PROV_TRACE_CACHE_DIR"]) / "inject"  # conftest points it at a temp dir
    return {str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in root.rglob("*.marshal")}


@pytest.fixture(scope="session")
def inject_from_cache(tmp_path_factory, fast_trace) -> tuple[list[dict], dict, dict]:
    before = _cache_entries()  # the inject run above kept its rewrites
    records = _trace(tmp_path_factory, "inject")
    return records, before, _cache_entries()


@pytest.mark.skipif(HAS_MONITORING, reason="inject is the default backend on 3.11; the unit tests cover its cache on 3.12+")
def test_inject_from_its_cache_traces_what_a_fresh_rewrite_does(inject_from_cache, settrace_trace):
    """A second inject run finds every rewrite in the cache (no entry added or replaced) and traces the
    same records as settrace, which rewrites nothing."""
    records, before, after = inject_from_cache
    assert before and after == before
    assert records[-1]["kind"] == "end" and records[-1]["outcome"] == "ok"
    cached, slow = normalised(records), normalised(settrace_trace)
    assert len(cached) == len(slow)
    problems = [f"record {i} ({a['kind']} {a.get('stage')}){d}" for i, (a, b) in enumerate(zip(cached, slow))
                for d in differences(a, b)]
    assert not problems, "inject from its cache and settrace differ:\n" + "\n".join(problems[:40])
