"""Reliability, part 1: the host program is untouched (docs/reliability.md, "The host program is untouched").

A traced run ends the way the untraced run would (exit status, traceback), a signal
stops it cleanly, a probe's failure stays an error record, another sys.monitoring
tool keeps working, and two compiles on two threads are traced apart.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import types

import msgpack
import pytest

import reliability_support as rs
from conftest import HAS_MONITORING, cli
from prov_trace.stream import schema
from prov_trace.probes import snapshot
from prov_trace.contract import ENTRY, RETURN, Hook, Profile
from prov_trace.report.model import build
from prov_trace.stream.reader import read_trace
from prov_trace.tracer.session import TraceSession
from prov_trace.stream.writer import TraceWriter

#: A script that compiles again and again until it is stopped.
COMPILES_FOREVER = textwrap.dedent("""
    import itertools
    import torch

    for i in itertools.count():
        torch._dynamo.reset()
        f = torch.compile(lambda x: torch.sin(x) * (i + 1))
        with torch.no_grad():
            f(torch.ones(8))
        print("compiled", i, flush=True)
""")


# --- a script that raises ------------------------------------------------------------------------------


def test_script_that_raises_after_a_compile(raising_run):
    proc, d = raising_run.proc, raising_run.workdir
    assert proc.returncode == 1, proc.stderr  # what python gives for an uncaught exception
    # The script's own traceback, as python prints it (its two frames), with no prov-trace frame in it.
    tb = proc.stderr[proc.stderr.index("Traceback"):]
    tb = tb[:tb.index("ValueError: script") + 60]
    assert "ValueError: script failed after the compile: 8.0" in tb
    assert tb.count('File "') == 2 and "in <module>" in tb and "in fail" in tb and "prov_trace" not in tb
    # The trace is whole up to the failure, and its end record says how the run ended.
    trace = read_trace(d / "t.msgpack")
    assert trace.complete
    assert trace.end["outcome"] == "exception"
    assert trace.end["detail"] == "ValueError: script failed after the compile: 8.0"
    assert trace.end["records"] == len(trace.records) + 1
    stages = {r["stage"] for r in trace.records if r["kind"] == "probe"}
    assert {"source", "post_grad", "kernel_spec", "artifact"} <= stages
    report = (d / "r.md").read_text()
    assert "exception (ValueError: script failed after the compile: 8.0)" in report


# --- signals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("sig,code,outcome,detail", [
    # As python ends: by the signal itself (a shell shows 130 and 143), once the trace and report are written.
    (signal.SIGINT, -signal.SIGINT, "interrupted", "KeyboardInterrupt"),
    (signal.SIGTERM, -signal.SIGTERM, "signal", "SIGTERM"),
])
def test_signal_while_compiling_stops_cleanly(tmp_path, sig, code, outcome, detail):
    script = tmp_path / "forever.py"
    script.write_text(COMPILES_FOREVER)
    trace, report = tmp_path / "t.msgpack", tmp_path / "r.md"
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = rs.start_prov_trace(["run", "-o", str(trace), "--report", str(report), str(script)], tmp_path, out, err)
        try:
            rs.wait_for_probe_record(proc, trace, timeout=600)
        except BaseException:
            rs.finish(proc, 1)
            raise
        proc.send_signal(sig)
        if sig == signal.SIGINT:
            # Python drops a KeyboardInterrupt raised in a weakref callback or a __del__ ("Exception ignored
            # in ..."), untraced too; a user presses Ctrl-C again. (A dropped SIGTERM prov-trace raises again.)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=60)
            if proc.poll() is None and "Exception ignored" in (tmp_path / "err").read_text():
                proc.send_signal(sig)
        rc = rs.finish(proc, timeout=300)
    stderr = (tmp_path / "err").read_text()
    assert rc == code, stderr[-3000:]
    t = read_trace(trace)
    assert t.complete, t.problem
    assert (t.end["outcome"], t.end["detail"]) == (outcome, detail)
    assert any(r["kind"] == "probe" for r in t.records)
    # Every hook's last status was written on the way out.
    assert t.hooks() and all("fired" in h for h in t.hooks())
    text = report.read_text()
    assert "**Run stopped early**" in text and detail in text
    if sig == signal.SIGINT:
        assert "KeyboardInterrupt" in stderr and "Traceback" in stderr
    else:
        assert "stopped by SIGTERM" in stderr
        assert "Traceback" not in stderr


#: Programs where the first `Terminated` does not unwind them; each sends itself SIGTERM. Untraced, each ends at once.
SIGTERM_NOT_UNWOUND = {
    # Python drops an exception raised in a __del__ ("Exception ignored in ..."): prov-trace raises it again.
    "dropped": textwrap.dedent("""
        import os, signal, time

        class StopsHere:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs here, inside __del__
                    pass

        StopsHere()
        while True:
            time.sleep(0.01)
    """),
    # The program catches it once and runs on: raised again RESEND_S later.
    "caught": textwrap.dedent("""
        import os, signal, time

        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)
        except BaseException as exc:
            print("caught", type(exc).__name__, flush=True)
        while True:
            time.sleep(0.01)
    """),
    # The program catches it every time: GIVE_UP_S after the signal, its default action ends the process.
    "stubborn": textwrap.dedent("""
        import os, signal, time

        sent = False
        while True:
            try:
                if not sent:
                    sent = True
                    os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.01)
            except BaseException:
                print("caught", flush=True)
    """),
}


@pytest.mark.parametrize("case", sorted(SIGTERM_NOT_UNWOUND))
def test_sigterm_that_does_not_unwind_still_ends_the_run(tmp_path, case):
    """A SIGTERM ends a traced run even where python drops prov-trace's exception or the program catches it."""
    from prov_trace.signals import SigtermStop

    script = tmp_path / "s.py"
    script.write_text(SIGTERM_NOT_UNWOUND[case])
    plain = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == -signal.SIGTERM, plain.stderr  # untraced, the signal ends it at once
    trace, report = tmp_path / "t.msgpack", tmp_path / "r.md"
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        proc = rs.start_prov_trace(["run", "-o", str(trace), "--report", str(report), str(script)], tmp_path, out, err)
        rc = rs.finish(proc, timeout=120 + SigtermStop.GIVE_UP_S)
    stdout, stderr = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    t = read_trace(trace)
    assert t.complete, t.problem
    assert (t.end["outcome"], t.end["detail"]) == ("signal", "SIGTERM")
    assert "Exception ignored" not in stderr and "Traceback" not in stderr
    if case == "stubborn":
        assert rc == -signal.SIGTERM, stderr[-3000:]  # the default action, as untraced: no report
        assert stdout.count("caught") >= 2 and not report.exists()
    else:
        assert rc == -signal.SIGTERM, stderr[-3000:]  # by the signal, as python ends, once the report is written
        assert "stopped by SIGTERM" in stderr and "**Run stopped early**" in report.read_text()
        assert ("caught Terminated" in stdout) == (case == "caught")


def test_sigterm_handler_is_put_back(tmp_path):
    """After `run` the process has the SIGTERM handler it had before; an ignored SIGTERM stays ignored."""
    script = tmp_path / "s.py"
    script.write_text("import signal\nh = signal.getsignal(signal.SIGTERM)\n"
                      "print('during', 'default' if h == signal.SIG_DFL else 'ignored' if h == signal.SIG_IGN else h)\n")
    patch = ("import atexit, signal\n"
             "atexit.register(lambda: print('after', 'default' if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else '?'))")
    proc = rs.prov_trace_with(patch, ["run", "--no-report", "-o", str(tmp_path / "t.msgpack"), str(script)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "during <bound method SigtermStop._handle" in proc.stdout
    assert "after default" in proc.stdout
    ignored = rs.prov_trace_with("import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)",
                                 ["run", "--no-report", "-o", str(tmp_path / "t2.msgpack"), str(script)], tmp_path)
    assert ignored.returncode == 0, ignored.stderr
    assert "during ignored" in ignored.stdout


# --- probes that fail ----------------------------------------------------------------------------------

VICTIM_SOURCE = textwrap.dedent("""
    def victim(x):
        return ("victim ran", type(x).__name__)
""")


@pytest.fixture
def victim_module():
    mod = types.ModuleType("prov_trace_reliability_victim")
    exec(compile(VICTIM_SOURCE, "<victim>", "exec"), mod.__dict__)
    sys.modules[mod.__name__] = mod
    yield mod
    del sys.modules[mod.__name__]


class _StrRaises(Exception):
    def __str__(self):
        raise RuntimeError("str() of this exception raises")


def _raises(call):
    raise ValueError("the probe itself failed")


def _raises_badly(call):
    raise _StrRaises()


def test_misbehaving_probes_and_arguments_leave_the_call_alone(tmp_path, victim_module):
    target = f"{victim_module.__name__}:victim"
    hooks = (
        Hook("arg_snapshot", target, ENTRY, lambda call: {"x": snapshot.generic(call.arg("x"))}),
        Hook("probe_raises", target, RETURN, _raises),
        Hook("probe_raises_badly", target, RETURN, _raises_badly),
        Hook("unpackable", target, RETURN, lambda call: {"obj": object()}),
        Hook("selfref_payload", target, RETURN, lambda call: (lambda d: (d.__setitem__("me", d), d)[1])({})),
        Hook("oversize_payload", target, RETURN, lambda call: {"zeros": [0] * 5_000_000}),
    )
    profile = Profile("reliability", "probes built to fail", hooks)
    values = rs.hostile_values()
    expected = {name: victim_module.victim(v) for name, v in values.items()}  # untraced
    rs.TOUCHED.clear()
    path = tmp_path / "t.msgpack"
    with TraceSession(TraceWriter(path), profile, log=lambda m: None):
        got = {name: victim_module.victim(v) for name, v in values.items()}
    assert got == expected
    assert rs.TOUCHED == [], "a probe ran the argument's own code: " + ", ".join(rs.TOUCHED[:10])

    trace = read_trace(path)
    assert trace.complete
    n = len(values)
    by_stage: dict[str, list] = {}
    for r in trace.records:
        if r["kind"] in ("probe", "error"):
            by_stage.setdefault(r["stage"], []).append(r)
    # The generic snapshot: one bounded probe record per call, never an error.
    snaps = by_stage["arg_snapshot"]
    assert [r["kind"] for r in snaps] == ["probe"] * n
    sizes = [len(msgpack.packb(r, use_bin_type=True, unicode_errors="surrogateescape")) for r in snaps]
    assert max(sizes) < 64 * 1024, sizes
    x = {name: r["payload"]["x"] for name, r in zip(values, snaps)}
    assert x["hostile"] == {"type": f"{rs.Hostile.__module__}.Hostile"}
    assert x["hostile_list"]["len"] == 3 and len(x["hostile_list"]["items"]) == 3
    assert x["hostile_dict"]["len"] == 1
    assert x["hostile_int"] == 7 and x["hostile_str"] == "text"
    assert _depth_cut(x["selfref_list"]) and _depth_cut(x["selfref_dict"]) and _depth_cut(x["deep"])
    assert x["huge_list"]["len"] == 1_000_000 and x["huge_list"]["cut"] == 1_000_000 - snapshot.MAX_ITEMS
    assert x["huge_set"]["cut"] == 200_000 - snapshot.MAX_ITEMS and x["huge_dict"]["cut"] == 200_000 - snapshot.MAX_ITEMS
    assert x["huge_str"].endswith(snapshot.CUT_MARK.format(n=10_000_000 - snapshot.MAX_STR))
    assert x["huge_bytes"] == {"type": "bytes", "len": 10_000_000}
    assert x["huge_int"]["type"] == "int" and x["huge_int"]["bits"] > 300_000
    # Probes that raise (even an exception whose str() raises): one error record per call, for that hook.
    for stage, message in (("probe_raises", "the probe itself failed"),
                           ("probe_raises_badly", "<str() of the exception raised RuntimeError>")):
        recs = by_stage[stage]
        assert [r["kind"] for r in recs] == ["error"] * n, stage
        assert all(r["target"] == target and r["phase"] == "return" for r in recs)
        assert recs[0]["error"]["message"] == message
    # Payloads the stream can't hold, or a reader would refuse: an error record for that hook instead.
    for stage, needle in (("unpackable", "not serialisable"), ("selfref_payload", "not serialisable"),
                          ("oversize_payload", "beyond the reader's limits")):
        recs = by_stage[stage]
        assert [r["kind"] for r in recs] == ["error"] * n, stage
        assert needle in recs[0]["error"]["message"] and recs[0]["target"] == target
    # The hooks table counts each of those as the hook's errors.
    errors = {h["stage"]: h["errors"] for h in trace.hooks()}
    assert errors["arg_snapshot"] == 0
    assert all(errors[s] == n for s in ("probe_raises", "probe_raises_badly", "unpackable", "selfref_payload",
                                        "oversize_payload"))
    # And the report builds and renders from it.
    model = build(trace)
    for render in rs.renderers().values():
        render(model)


def _depth_cut(snap) -> bool:
    while isinstance(snap, dict) and "items" in snap and snap["items"]:
        item = snap["items"][0]
        snap = item[1] if isinstance(item, list) else item
    return snap.get("cut") == "depth"


def test_user_probe_on_the_command_line_meets_a_hostile_argument(tmp_path):
    (tmp_path / "hostile_mod.py").write_text(textwrap.dedent("""
        TOUCHED = []

        class Bad:
            def __repr__(self):
                TOUCHED.append("repr"); raise RuntimeError("repr")
            def __getattr__(self, name):
                TOUCHED.append(name); raise RuntimeError(name)
            def __len__(self):
                TOUCHED.append("len"); raise RuntimeError("len")

        def victim(x, y):
            return "ok"
    """))
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import sys
        import hostile_mod
        loop = []
        loop.append(loop)
        print("result", hostile_mod.victim(hostile_mod.Bad(), loop), hostile_mod.TOUCHED)
        sys.exit(4)
    """))
    proc = rs.prov_trace_with("", ["run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"),
                                   "--probe", "hostile_mod:victim@both=victim", str(script)], tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "result ok []" in proc.stdout
    trace = read_trace(tmp_path / "t.msgpack")
    recs = [r for r in trace.records if r.get("stage") == "victim" and r["kind"] in ("probe", "error")]
    assert [r["phase"] for r in recs] == ["entry", "return"]
    assert all(r["kind"] == "probe" for r in recs), recs
    assert "victim" in (tmp_path / "r.md").read_text()


# --- another sys.monitoring tool ------------------------------------------------------------------------

COVERED = textwrap.dedent("""
    import sys
    import torch

    def pick(n):
        if n > 2:
            return "big"
        return "small"

    with torch.no_grad():
        out = torch.compile(lambda x: torch.cos(x) * 2)(torch.ones(4))
    print("tools", sys.monitoring.get_tool(1), sys.monitoring.get_tool(4), sys.monitoring.get_tool(3), sys.monitoring.get_tool(5))
    print(pick(5), pick(1), out.sum().item())
""")


@pytest.mark.skipif(not HAS_MONITORING, reason="sys.monitoring (and coverage's sysmon core) need Python 3.12+")
def test_coverage_sysmon_and_prov_trace_both_see_their_events(tmp_path):
    pytest.importorskip("coverage")
    import coverage

    script = tmp_path / "covered.py"
    script.write_text(COVERED)
    data_file = tmp_path / ".coverage"
    proc = subprocess.run([sys.executable, "-m", "coverage", "run", f"--data-file={data_file}", f"--include={script}",
                           "-m", "prov_trace", "run", "-o", str(tmp_path / "t.msgpack"), "--no-report", str(script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, **rs.LIGHT_ENV, "COVERAGE_CORE": "sysmon"})
    assert proc.returncode == 0, proc.stderr
    # Both tools held their own sys.monitoring ids at once; prov-trace took 4, leaving 3 to the host
    # and never touching 5 (CPython's optimizer id).
    assert "tools coverage.py prov-trace None None" in proc.stdout, proc.stdout
    assert "big small" in proc.stdout
    # Coverage measured every line of the script (each one runs), through prov-trace's runner.
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    lines = set(data.lines(str(script)) or ())
    every = {i for i, ln in enumerate(COVERED.splitlines(), 1) if ln.strip()}
    assert lines == every, (sorted(lines), sorted(every))
    trace = read_trace(tmp_path / "t.msgpack")
    assert trace.complete and trace.header["backend"] == "monitoring"
    stages = {r["stage"] for r in trace.records if r["kind"] == "probe"}
    assert {"source", "post_grad", "kernel_spec"} <= stages


TOOL_IDS_TAKEN = textwrap.dedent("""
    import json, sys
    from prov_trace.contract import Profile
    from prov_trace.tracer.session import TraceSession
    from prov_trace.stream.writer import TraceWriter

    out = {}
    sys.monitoring.use_tool_id(4, "other-4")
    s = TraceSession(TraceWriter(sys.argv[1] + "/a.msgpack"), Profile("p", "d", ()), log=lambda m: None)
    s.start()
    out["one_taken"] = [s.backend.name, s.backend.tool_id]
    s.stop()
    sys.monitoring.use_tool_id(3, "other-3")
    s = TraceSession(TraceWriter(sys.argv[1] + "/b.msgpack"), Profile("p", "d", ()), log=lambda m: None)
    s.start()
    out["all_taken"] = [s.backend.name, s.backend_reason]
    s.stop()
    out["holders"] = [sys.monitoring.get_tool(i) for i in (3, 4, 5)]
    print(json.dumps(out))
    # And the command line says it, on stderr.
    from prov_trace.cli import main
    sys.argv = ["prov-trace", "run", "--no-report", "-o", sys.argv[1] + "/c.msgpack", sys.argv[1] + "/s.py"]
    main()
""")


@pytest.mark.skipif(not HAS_MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_all_tool_ids_taken_falls_back_with_a_clear_message(tmp_path):
    (tmp_path / "s.py").write_text("print('script ran')\n")
    proc = subprocess.run([sys.executable, "-c", TOOL_IDS_TAKEN, str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, **rs.LIGHT_ENV})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.splitlines()[0])
    assert out["one_taken"] == ["monitoring", 3]
    backend, reason = out["all_taken"]
    assert backend == "inject"
    assert "every sys.monitoring tool id prov-trace may use is taken: 4 (other-4), 3 (other-3)" in reason
    assert out["holders"] == ["other-3", "other-4", None]  # never evicted, and 5 (the optimizer's) never taken
    assert "script ran" in proc.stdout
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: backend "))
    assert "taken: 4 (other-4), 3 (other-3)" in line, proc.stderr
    assert read_trace(tmp_path / "c.msgpack").header["backend"] == backend


# --- threads ------------------------------------------------------------------------------------------


def test_two_compiles_on_two_threads_at_once_are_traced_apart(tmp_path):
    torch = pytest.importorskip("torch")
    from prov_trace.probes.profiles import INDUCTOR_CPU
    from prov_trace.runner import defeat_caches

    defeat_caches()
    torch._dynamo.reset()

    def model_a(x):
        return torch.sin(x) + 1

    def model_b(y):
        return torch.cos(y) * 3

    barrier = threading.Barrier(2)
    box: dict = {}

    def work(name, fn):
        barrier.wait()
        with torch.no_grad():
            box[name] = torch.compile(fn)(torch.ones(8))

    path = tmp_path / "t.msgpack"
    with TraceSession(TraceWriter(path), INDUCTOR_CPU, log=lambda m: None):
        threads = [threading.Thread(target=work, args=(n, f), name=f"compile-{n}")
                   for n, f in (("a", model_a), ("b", model_b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    # Compiled kernels may differ from eager in the last bit; that is Inductor's, not the tracer's.
    assert torch.allclose(box["a"], torch.sin(torch.ones(8)) + 1) and torch.allclose(box["b"], torch.cos(torch.ones(8)) * 3)

    trace = read_trace(path)
    probes = [r for r in trace.records if r["kind"] in ("probe", "error") and r.get("phase") != "finish"]
    assert not [r for r in probes if r["kind"] == "error"]
    names = {r["thread"]["name"] for r in probes}
    assert names == {"compile-a", "compile-b"}
    # Each compile id belongs to one thread, each thread has its own compile id.
    owner: dict = {}
    for r in probes:
        if r["compile_id"] is not None:
            assert owner.setdefault(r["compile_id"], r["thread"]["id"]) == r["thread"]["id"], r["compile_id"]
    assert len(owner) == 2 and len(set(owner.values())) == 2
    # Entry and return of one call are on one thread.
    calls: dict = {}
    for r in probes:
        assert calls.setdefault(r["call"], r["thread"]["id"]) == r["thread"]["id"]
    # Each graph holds only its own model's source and kernels.
    model = build(trace)
    assert len(model["graphs"]) == 2
    texts = {}
    for g in model["graphs"]:
        texts[g["compile_id"]] = {s["text"] for s in g["survival"]}
        assert g["stages"]["kernel_spec"]["objects"], g["label"]
    by_thread = {owner[cid]: t for cid, t in texts.items()}
    assert sorted(map(sorted, by_thread.values())) == sorted([["return torch.cos(y) * 3"], ["return torch.sin(x) + 1"]])
    thread_of = {r["thread"]["name"]: r["thread"]["id"] for r in probes}
    assert by_thread[thread_of["compile-a"]] == {"return torch.sin(x) + 1"}
    assert by_thread[thread_of["compile-b"]] == {"return torch.cos(y) * 3"}


# --- what prov-trace's own settings do to a program ----------------------------------------------------

SAVES_ITS_CACHES = """\
import sys
import torch
from torch.fx.experimental.proxy_tensor import make_fx

gm = make_fx(lambda x: x.cos() * 2)(torch.randn(4))
compiled = torch._inductor.standalone_compile(gm, [torch.randn(4)])
compiled.save(path=sys.argv[1], format="binary")
print("saved", flush=True)
"""


def test_a_program_that_saves_its_compiled_artifact_is_told_why_it_cannot_and_how_to(tmp_path):
    """With Inductor's caches off (prov-trace's default) torch records no cache artifact, so a standalone_compile
    artifact's save() raises (vLLM saves its graphs that way): the program failed with torch's message alone.
    prov-trace says why as it happens, before the program's traceback, and in the report; with --keep-caches and
    an empty cache dir the program saves it and every stage is still traced."""
    script = tmp_path / "saves.py"
    script.write_text(SAVES_ITS_CACHES)
    art = tmp_path / "artifact.bin"
    proc = cli("run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script), str(art),
                  cwd=tmp_path)
    assert proc.returncode == 1 and not art.exists(), proc.stderr  # the program's own failure, as untraced with caches off
    said = "torch.compiler.save_cache_artifacts() returned None: Inductor's caches are off (prov-trace turns them off"
    assert said in proc.stderr and proc.stderr.index(said) < proc.stderr.index("Traceback"), proc.stderr
    assert "RuntimeError: CompiledArtifact.save failed to save since there's no artifact to save" in proc.stderr
    assert f"  notice: {said}" in proc.stdout  # the run's summary
    model = build(read_trace(tmp_path / "t.msgpack"))
    assert [(n["kind"], n["calls"]) for n in model["notices"]] == [("caches_off", 1)]
    assert (tmp_path / "r.md").read_text().split("\n")[2].startswith(
        "> **Notice.** torch.compiler.save\\_cache\\_artifacts() returned None")
    # What the notice says to do works: the artifact is saved, and the compile is traced to its artifact.
    kept = cli("run", "--keep-caches", "-o", str(tmp_path / "k.msgpack"), "--no-report", str(script), str(art),
                  cwd=tmp_path, env={"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "empty-cache"),
                                     # This test process may have turned them off for good (test_api's runs):
                                     "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "0", "TORCH_COMPILE_FORCE_DISABLE_CACHES": "0"})
    assert kept.returncode == 0 and "saved" in kept.stdout and art.stat().st_size > 0, kept.stderr
    assert "notice" not in kept.stderr
    trace = read_trace(tmp_path / "k.msgpack")
    assert {"post_grad", "ir_post", "kernel_spec", "artifact"} <= {r["stage"] for r in trace.records if r["kind"] == "probe"}
