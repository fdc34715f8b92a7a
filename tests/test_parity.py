"""Parity: the reference MLP's compile traced by two backends gives the same records.

3.12+: monitoring against settrace. 3.11: inject against settrace. Each trace
is one `prov-trace run ... --backend NAME --no-report` in a fresh process (two
compiles for the whole file). The records must agree in order and content,
apart from what differs between any two processes: timing fields (t_ns,
probe_ns), thread ids, id()-based numbers (graph_id values, the keys of
nn_module_stack), the artifact's temporary directory, and the header's
backend, pid and start time.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

import msgpack
import pytest

from conftest import EXAMPLES, HAS_MONITORING, cli

pytestmark = pytest.mark.compile

FAST = "monitoring" if HAS_MONITORING else "inject"
PAIR = (FAST, "settrace")

_TIMING = {"t_ns", "probe_ns"}
_HEADER_VOLATILE = {"backend", "backend_reason", "pid", "start_time"}
_ID_KEY = re.compile(r"^\d{6,}$")


def _trace(tmp_path_factory, backend: str) -> list[dict]:
    if backend == "settrace" and sys.gettrace() is not None:
        pytest.skip("another sys.settrace tracer (a debugger or coverage) is active")
    d = tmp_path_factory.mktemp(f"parity-{backend}")
    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "-o", str(d / "t.msgpack"),
               "--backend", backend, "--no-report", cwd=d)
    assert proc.returncode == 0, f"--backend {backend} exited {proc.returncode}\n{proc.stderr[-4000:]}"
    assert f"backend {backend}: {backend} was requested" in proc.stderr
    with open(d / "t.msgpack", "rb") as f:
        return list(msgpack.Unpacker(f, raw=False))


@pytest.fixture(scope="session")
def fast_trace(tmp_path_factory) -> list[dict]:
    return _trace(tmp_path_factory, FAST)


@pytest.fixture(scope="session")
def settrace_trace(tmp_path_factory) -> list[dict]:
    return _trace(tmp_path_factory, "settrace")


class _Normaliser:
    """Rewrites one trace's process-specific values into stable ones; id()-numbers by first appearance."""

    def __init__(self) -> None:
        self.ids: dict[Any, str] = {}

    def _id(self, value: Any) -> str:
        return self.ids.setdefault(value, f"<id{len(self.ids)}>")

    def record(self, rec: dict) -> dict:
        rec = self.value(rec)
        if rec["kind"] == "header":
            for key in _HEADER_VOLATILE:
                rec.pop(key, None)
        if isinstance(rec.get("thread"), dict):
            rec["thread"] = {**rec["thread"], "id": None}
        payload = rec.get("payload")
        if rec.get("stage") == "artifact" and isinstance(payload, dict) and isinstance(payload.get("path"), str):
            payload["path"] = os.path.basename(payload["path"])
        return rec

    def value(self, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k in _TIMING:
                    continue
                if k == "graph_id" and x is not None:
                    out[k] = self._id(x)
                elif isinstance(k, str) and _ID_KEY.match(k):
                    out[self._id(k)] = self.value(x)
                else:
                    out[k] = self.value(x)
            return out
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v


def _normalised(records: list[dict]) -> list[dict]:
    n = _Normaliser()
    return [n.record(r) for r in records]


def _shape(records: list[dict]) -> list[tuple]:
    return [(r["kind"], r.get("stage"), r.get("target"), r.get("phase"), r.get("compile_id"), r.get("graph"))
            for r in records]


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += _differences(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.200} != {b!r:.200}"]


def test_both_backends_traced_every_stage(fast_trace, settrace_trace):
    for records, backend in ((fast_trace, FAST), (settrace_trace, "settrace")):
        assert records[0]["backend"] == backend
        assert records[-1]["kind"] == "end" and records[-1]["outcome"] == "ok"
        stages = {r["stage"] for r in records if r["kind"] == "probe"}
        assert stages >= {"source", "pre_grad", "post_grad", "ir_pre", "ir_post", "kernel_spec", "artifact"}
        assert not [r for r in records if r["kind"] == "error"]


def test_same_sequence_of_stages_targets_and_phases(fast_trace, settrace_trace):
    assert _shape(fast_trace) == _shape(settrace_trace)


def test_same_payloads_and_hook_states(fast_trace, settrace_trace):
    fast, slow = _normalised(fast_trace), _normalised(settrace_trace)
    assert len(fast) == len(slow)
    problems = []
    for i, (a, b) in enumerate(zip(fast, slow)):
        for d in _differences(a, b):
            problems.append(f"record {i} ({a['kind']} {a.get('stage')}){d}")
    assert not problems, f"{FAST} and settrace traces differ:\n" + "\n".join(problems[:40])


def test_the_headers_differ_only_in_the_backend(fast_trace, settrace_trace):
    a, b = fast_trace[0], settrace_trace[0]
    assert {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} <= _HEADER_VOLATILE | _TIMING
    assert a["backend_reason"] == f"{FAST} was requested" and b["backend_reason"] == "settrace was requested"
