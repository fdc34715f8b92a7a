"""Reliability, round two: the tracer and the host (docs/reliability.md, "The host program is untouched").

Probes on coroutines and generators, on the traced script's own functions, on a
helper Dynamo inlines (inject); the sys.monitoring tool id a host may want; a
script that replaces the settrace tracer; the recursion depth a script has; a
script that deletes itself.
"""

from __future__ import annotations

import asyncio
import subprocess
import os
import sys
import textwrap

import msgpack
import pytest

import reliability_support as rs
from conftest import HAS_MONITORING, cli
from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, Profile
from prov_trace.stream.reader import read_trace
from prov_trace.stream.writer import TraceWriter
from prov_trace.tracer.core import BACKENDS
from prov_trace.tracer.session import TraceSession

MOD = __name__


def _available(name: str) -> None:
    reason = BACKENDS[name].unavailable_reason()
    if reason:
        pytest.skip(f"the {name} backend can't run here: {reason}")
    if name == "settrace" and sys.gettrace() is not None:
        pytest.skip("another sys.settrace tracer (a debugger or coverage) is active")


def _snapshot(call: ProbeCall) -> dict:
    simple = {k: v for k, v in call.locals.items() if isinstance(v, (int, str, float))}
    return {"locals": simple, "retval": call.retval if isinstance(call.retval, (int, str)) else repr(call.retval)}


def _session(path, backend: str, *names: str) -> TraceSession:
    hooks = tuple(Hook("toy", f"{MOD}:{n}", ev, _snapshot) for n in names for ev in (ENTRY, RETURN))
    return TraceSession(TraceWriter(path), Profile("toy", "toy targets", hooks), backend=backend, log=lambda m: None)


def _records(path) -> list[dict]:
    with open(path, "rb") as f:
        return list(msgpack.Unpacker(f, raw=False))


# --- 5. coroutines and generators ------------------------------------------------------------------


async def probed_coro(i, delay):
    await asyncio.sleep(delay)
    await asyncio.sleep(0)
    return i * 10


def probed_gen(n):
    for i in range(n):
        yield i
    return "done"


def probed_plain(x):
    return x + 1


@pytest.mark.parametrize("backend", ["monitoring", "settrace"])
def test_concurrent_coroutines_and_a_suspended_generator_pair_their_calls(tmp_path, backend):
    _available(backend)
    path = tmp_path / "t.msgpack"

    async def main():
        return await asyncio.gather(probed_coro(1, 0.03), probed_coro(2, 0.01), probed_coro(3, 0.02))

    with _session(path, backend, "probed_coro", "probed_gen", "probed_plain"):
        assert asyncio.run(main()) == [10, 20, 30]
        g = probed_gen(3)
        assert next(g) == 0  # suspended at its first yield while another probed call runs
        assert probed_plain(1) == 2
        inner = probed_gen(2)
        assert next(inner) == 0 and next(g) == 1
        assert list(inner) == [1] and list(g) == [2]
    probes = [r for r in _records(path) if r["kind"] == "probe"]
    assert not [r for r in probes if r["phase"] == "unwind"], [r["payload"] for r in probes if r["phase"] == "unwind"]
    calls: dict[int, list[dict]] = {}
    for r in probes:
        calls.setdefault(r["call"], []).append(r)
    assert len(calls) == 6, {c: [(r["target"], r["phase"]) for r in rs] for c, rs in calls.items()}
    for call, recs in calls.items():
        assert [r["phase"] for r in recs] == [ENTRY, RETURN], (call, recs)
        assert recs[0]["target"] == recs[1]["target"]
    coro = {recs[0]["payload"]["locals"]["i"]: recs[1]["payload"]["retval"] for recs in calls.values()
            if recs[0]["target"].endswith(":probed_coro")}
    assert coro == {1: 10, 2: 20, 3: 30}
    gens = sorted((recs[0]["payload"]["locals"]["n"], recs[1]["payload"]["retval"]) for recs in calls.values()
                  if recs[0]["target"].endswith(":probed_gen"))
    assert gens == [(2, "done"), (3, "done")]


def test_inject_refuses_a_coroutine_in_one_sentence(tmp_path):
    _available("inject")
    path = tmp_path / "t.msgpack"
    with _session(path, "inject", "probed_coro"):
        assert asyncio.run(probed_coro(1, 0)) == 10
    hook = next(r for r in _records(path) if r["kind"] == "hook")
    assert not hook["installed"] and "coroutine" in hook["reason"] and "\n" not in hook["reason"]


# --- 7. the traced script's own functions ---------------------------------------------------------------

OWN_FUNCTIONS = textwrap.dedent("""
    class Box:
        def get(self, k):
            return k * 3

    def work(x):
        return x * 2

    print("work", work(21), Box().get(2))
""")


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_probe_on_the_scripts_own_main_module(tmp_path, how):
    (tmp_path / "own.py").write_text(OWN_FUNCTIONS)
    target = ["own.py"] if how == "script" else ["-m", "own"]
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), "--probe", "__main__:work@both=mywork",
               "--probe", "__main__:Box.get=boxget", *target, cwd=tmp_path, env=rs.LIGHT_ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "work 42 6" in proc.stdout
    t = read_trace(tmp_path / "t.msgpack")
    hooks = {(h["target"], h["event"]): h for h in t.hooks()}
    assert hooks[("__main__:work", ENTRY)]["fired"] == 1 and hooks[("__main__:work", RETURN)]["fired"] == 1, hooks
    assert hooks[("__main__:Box.get", RETURN)]["fired"] == 1, hooks
    assert hooks[("__main__:work", ENTRY)]["file"].endswith("own.py")
    phases = [(r["stage"], r["phase"]) for r in t.records if r["kind"] == "probe"]
    assert phases == [("mywork", ENTRY), ("mywork", RETURN), ("boxget", RETURN)], phases


def test_a_probe_on_a_function_the_script_does_not_have_says_so(tmp_path):
    (tmp_path / "own.py").write_text(OWN_FUNCTIONS)
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), "--probe", "__main__:nothing", "own.py",
               cwd=tmp_path, env=rs.LIGHT_ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    hook = read_trace(tmp_path / "t.msgpack").hooks()[0]
    assert not hook["resolved"] and "nothing" in hook["reason"] and "own.py" in hook["reason"], hook


# --- 4. inject, and a helper Dynamo inlines -------------------------------------------------------------

INLINED_HELPER = textwrap.dedent("""
    import torch
    from helpers import helper

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return helper(self.lin(x))

    torch.manual_seed(0)
    m = M()
    with torch.no_grad():
        out = torch.compile(m)(torch.ones(2, 4))
        eager = helper(torch.ones(2))
    print("ok", tuple(out.shape), eager.tolist(), round(float(out.sum()), 4))
""")


def test_inject_probe_on_a_helper_dynamo_inlines(tmp_path):
    """Dynamo traces the helper's bytecode into forward's graph: a probe call compiled into it would be
    traced too (and broke the compile); the helper is watched another way, and the compile is unchanged."""
    _available("inject")
    (tmp_path / "helpers.py").write_text("import torch\n\ndef helper(x):\n    return torch.relu(x) + 1\n")
    (tmp_path / "model.py").write_text(INLINED_HELPER)
    plain = subprocess.run([sys.executable, "model.py"], cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, **rs.LIGHT_ENV}, timeout=900)
    assert plain.returncode == 0, plain.stderr
    proc = cli("run", "--backend", "inject", "--probe", "helpers:helper@both=helper", "-o", str(tmp_path / "t.msgpack"),
               "--report", str(tmp_path / "r.md"), "model.py", cwd=tmp_path, env=rs.LIGHT_ENV, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines()[0] == plain.stdout.splitlines()[0], (proc.stdout, plain.stdout)
    assert "Dynamo" in proc.stderr and "helper" in proc.stderr  # says why it is watched another way
    t = read_trace(tmp_path / "t.msgpack")
    user = [(r["phase"], r["call"]) for r in t.records if r["kind"] == "probe" and r["stage"] == "helper"]
    assert [p for p, _ in user] == [ENTRY, RETURN] and user[0][1] == user[1][1], user  # the eager call
    graphs = {(r["compile_id"], r["graph"]) for r in t.records if r["kind"] == "probe" and r["stage"] == "post_grad"}
    assert len(graphs) == 1, graphs  # one graph: the helper was inlined, not broken out


# --- 6. the sys.monitoring tool id a host may want -----------------------------------------------------

HOST_WANTS_ID_3 = textwrap.dedent("""
    import sys
    sys.monitoring.use_tool_id(3, "host-tool")
    print("host holds", sys.monitoring.get_tool(3))
    sys.monitoring.free_tool_id(3)
""")


@pytest.mark.skipif(not HAS_MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_a_host_that_asks_for_tool_id_3_gets_it(tmp_path):
    (tmp_path / "host.py").write_text(HOST_WANTS_ID_3)
    plain = subprocess.run([sys.executable, "host.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), "host.py", cwd=tmp_path, env=rs.LIGHT_ENV,
               timeout=300)
    assert (proc.returncode, proc.stdout.splitlines()[:1]) == (plain.returncode, plain.stdout.splitlines()[:1]), proc.stderr
    assert proc.stdout.startswith("host holds host-tool")
    t = read_trace(tmp_path / "t.msgpack")
    assert t.header["backend"] == "monitoring" and t.header["tool_id"] == 4


def test_help_says_which_tool_id_is_held(tmp_path):
    proc = cli("run", "--help", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert "Default: 4" in text and "leaving 3" in text and "never 5" in text, text


# --- 8. a script that installs its own sys.settrace ---------------------------------------------------

OWN_SETTRACE = textwrap.dedent("""
    import sys

    def mine(frame, event, arg):
        return None

    sys.settrace(mine)
    import helpers
    print("h", helpers.h(2))
""")


def test_a_script_that_replaces_the_settrace_tracer_gets_a_warning(tmp_path):
    (tmp_path / "helpers.py").write_text("def h(x):\n    return x + 1\n")
    (tmp_path / "own.py").write_text(OWN_SETTRACE)
    proc = cli("run", "--backend", "settrace", "--probe", "helpers:h=hh", "-o", str(tmp_path / "t.msgpack"),
               "--report", str(tmp_path / "r.md"), "own.py", cwd=tmp_path, env=rs.LIGHT_ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "h 3" in proc.stdout
    warnings = [ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: warning:")]
    assert len(warnings) == 1 and "replaced" in warnings[0] and "settrace" in warnings[0], proc.stderr
    t = read_trace(tmp_path / "t.msgpack")
    notes = [r for r in t.records if r["kind"] == "note"]
    assert notes and "replaced" in notes[0]["text"] and notes[0]["level"] == "warning"
    report = (tmp_path / "r.md").read_text()
    assert "**Warnings.**" in report and "replaced" in report


# --- minor: the recursion depth a script has ---------------------------------------------------------

DEEP = textwrap.dedent("""
    import sys

    def rec(n):
        try:
            return rec(n + 1)
        except RecursionError:
            return n

    print("max", rec(0))
""")


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_deep_recursing_script_has_the_depth_python_gives_it(tmp_path, how):
    (tmp_path / "deep.py").write_text(DEEP)
    target = ["deep.py"] if how == "script" else ["-m", "deep"]
    plain = subprocess.run([sys.executable, *target], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    proc = cli("run", "--no-report", "-o", str(tmp_path / "t.msgpack"), *target, cwd=tmp_path, env=rs.LIGHT_ENV,
               timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == plain.stdout.splitlines()[0], (proc.stdout, plain.stdout)


# --- minor: a script that deletes itself ---------------------------------------------------------------

DELETES_ITSELF = textwrap.dedent("""
    import os
    import torch

    os.remove(__file__)

    @torch.compile
    def f(x):
        y = torch.relu(x)
        return y + 1

    with torch.no_grad():
        print("out", f(torch.ones(3)).tolist())
""")


def test_a_script_that_deletes_itself_keeps_its_source_text(tmp_path):
    script = tmp_path / "gone.py"
    script.write_text(DELETES_ITSELF)
    proc = cli("run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script),
               cwd=tmp_path, env=rs.LIGHT_ENV, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "out [2.0, 2.0, 2.0]" in proc.stdout and not script.exists()
    t = read_trace(tmp_path / "t.msgpack")
    src = [r["payload"] for r in t.records if r["kind"] == "probe" and r["stage"] == "source"
           and r["payload"]["qualname"] == "f"]
    assert src, [r["payload"].get("qualname") for r in t.records if r["kind"] == "probe" and r["stage"] == "source"]
    assert [ln["text"] for ln in src[0]["lines"]] == ["y = torch.relu(x)", "return y + 1"], src[0]["lines"]
    report = (tmp_path / "r.md").read_text()
    assert "never attached" not in report, [ln for ln in report.splitlines() if "never attached" in ln]
