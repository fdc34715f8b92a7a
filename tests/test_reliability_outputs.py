"""Reliability, round two: outputs (docs/reliability.md, "The trace file is never lost or misread").

An output path that is not a regular file (a FIFO, a character device, a symlink
to one) is written through or refused, never replaced; paths are read against the
directory prov-trace started in; an output that is one of the run's inputs is
refused; signals during a write leave no temporary file and lose no report.

Device nodes here are made with mknod inside the test's own temp dir (as root),
never the machine's own: a character device with /dev/null's numbers (1, 3).
"""

from __future__ import annotations

import fcntl
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import reliability_support as rs
from conftest import cli
from prov_trace.stream import schema
from prov_trace.stream.reader import read_trace

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _small_trace(path: Path) -> Path:
    return rs.write_trace(path, [(schema.PROBE, {"stage": "source", "target": "m:f", "phase": "entry", "call": 1,
                                                  "compile_id": "0/0", "graph": None, "thread": {"id": 1, "name": "t"},
                                                  "payload": {"file": "/m.py", "qualname": "f", "user": True,
                                                              "lines": [{"line": 1, "text": "x = 1"}]}}),
                                 (schema.END, {"outcome": "ok", "detail": None})])


class _FifoReader:
    """The read end of a FIFO, opened before the writer runs (so the writer's open never blocks), with a
    pipe buffer big enough for a small report: read it all once the writer is done."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            fcntl.fcntl(self.fd, fcntl.F_SETPIPE_SZ, 1024 * 1024)
        except (AttributeError, OSError):
            pass

    def read(self) -> bytes:
        out = b""
        while True:
            try:
                chunk = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            out += chunk
        os.close(self.fd)
        return out


def _one_error(stderr: str) -> str:
    errors = [ln for ln in stderr.splitlines() if ln.startswith("prov-trace: error:")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr, stderr
    return errors[0]


# --- 1. outputs that are not regular files -----------------------------------------------------------


def test_report_to_a_fifo_is_written_through_not_replaced(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    fifo = _FifoReader(tmp_path / "fifo")
    proc = cli("report", str(trace), "-o", str(fifo.path), cwd=tmp_path, timeout=120)
    got = fifo.read()
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode), "the FIFO was replaced"
    assert got.startswith(b"# Source-to-kernel provenance audit"), got[:200]
    assert not list(tmp_path.glob(".prov-trace-*"))


def test_diff_to_a_fifo_is_written_through_not_replaced(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    fifo = _FifoReader(tmp_path / "fifo")
    proc = cli("diff", str(trace), str(trace), "-o", str(fifo.path), cwd=tmp_path, timeout=120)
    got = fifo.read()
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode), "the FIFO was replaced"
    assert got.startswith(b"# Provenance diff"), got[:200]


@pytest.mark.skipif(not IS_ROOT, reason="mknod of a character device needs root")
def test_report_to_a_character_device_is_written_through_not_replaced(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    node = tmp_path / "null"  # /dev/null's device numbers, in the test's own directory
    os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    proc = cli("report", str(trace), "-o", str(node), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    st = os.lstat(node)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3), "the device node was replaced"
    assert not list(tmp_path.glob(".prov-trace-*"))


@pytest.mark.skipif(not IS_ROOT, reason="mknod of a block device needs root")
def test_report_to_a_block_device_is_refused(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    node = tmp_path / "blk"  # device 0,0: no device behind it, so nothing could be written even by a bug
    os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(0, 0))
    proc = cli("report", str(trace), "-o", str(node), cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "is a block device" in _one_error(proc.stderr)
    assert stat.S_ISBLK(os.lstat(node).st_mode)


def test_report_to_a_symlink_to_stdout_is_written_through(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")  # what /dev/stdout is
    proc = cli("report", str(trace), "-o", str(link), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert os.path.islink(link) and os.readlink(link) == "/proc/self/fd/1", "the symlink was replaced"
    assert proc.stdout.startswith("# Source-to-kernel provenance audit"), proc.stdout[:200]


def test_report_through_a_symlink_to_stdout_appends_to_a_redirected_file(tmp_path):
    """`-o /dev/stdout >> log`: the log keeps what was in it; the report goes after it."""
    trace = _small_trace(tmp_path / "t.msgpack")
    link = tmp_path / "out"
    link.symlink_to("/proc/self/fd/1")
    log = tmp_path / "log.md"
    log.write_text("earlier output\n")
    with open(log, "a") as f:
        proc = subprocess.run([sys.executable, "-m", "prov_trace", "report", str(trace), "-o", str(link)],
                              cwd=tmp_path, stdout=f, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = log.read_text()
    assert text.startswith("earlier output\n# Source-to-kernel provenance audit"), text[:200]
    assert os.path.islink(link)


def test_report_through_a_symlink_to_a_file_keeps_the_symlink(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    real = tmp_path / "real.md"
    real.write_text("old\n")
    link = tmp_path / "link.md"
    link.symlink_to(real)
    proc = cli("report", str(trace), "-o", str(link), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert os.path.islink(link) and os.readlink(link) == str(real), "the symlink was replaced"
    assert real.read_text().startswith("# Source-to-kernel provenance audit")


NO_COMPILE = textwrap.dedent("""
    print("script ran")
""")


def test_run_report_to_a_fifo_is_written_through_not_replaced(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(NO_COMPILE)
    fifo = _FifoReader(tmp_path / "fifo")
    proc = cli("run", "-o", str(tmp_path / "t.msgpack"), "--report", str(fifo.path), str(script), cwd=tmp_path,
               env=rs.LIGHT_ENV, timeout=300)
    got = fifo.read()
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode), "the FIFO was replaced"
    assert got.startswith(b"# Source-to-kernel provenance audit"), got[:200]


def test_run_trace_to_a_fifo(tmp_path):
    """The trace is written through a FIFO; a report needs to read it back, which a FIFO can't give."""
    script = tmp_path / "s.py"
    script.write_text(NO_COMPILE)
    fifo = _FifoReader(tmp_path / "fifo")
    refused = cli("run", "-o", str(fifo.path), "--report", str(tmp_path / "r.md"), str(script), cwd=tmp_path,
                  env=rs.LIGHT_ENV, timeout=300)
    assert refused.returncode == 2, refused.stderr
    assert "is a FIFO" in _one_error(refused.stderr) and "--no-report" in refused.stderr
    assert "script ran" not in refused.stdout
    proc = cli("run", "-o", str(fifo.path), "--no-report", str(script), cwd=tmp_path, env=rs.LIGHT_ENV, timeout=300)
    got = fifo.read()
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.lstat(fifo.path).st_mode), "the FIFO was replaced"
    assert b"prov-trace" in got[:200] and b"header" in got[:200]


# --- 14. SIGTERM in the middle of a report write ------------------------------------------------------

SLOW_WRITE = textwrap.dedent("""
    import os, sys, time
    _fdopen = os.fdopen
    class _Slow:
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, text):
            self.f.write(text[:100])
            self.f.flush()
            print("WRITING", file=sys.stderr, flush=True)
            time.sleep(60)
            self.f.write(text[100:])
    os.fdopen = lambda fd, *a, **k: _Slow(_fdopen(fd, *a, **k))
""")


def test_sigterm_during_a_report_write_leaves_no_temporary_file(tmp_path):
    trace = _small_trace(tmp_path / "t.msgpack")
    report = tmp_path / "r.md"
    report.write_text("the old report\n")
    code = SLOW_WRITE + ("from prov_trace.cli import main\nsys.argv = ['prov-trace', 'report', "
                         f"{str(trace)!r}, '-o', {str(report)!r}]\nmain()\n")
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **rs.LIGHT_ENV})
    try:
        deadline = time.monotonic() + 120
        line = ""
        while "WRITING" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
        assert "WRITING" in line, "the report write never started"
        assert list(tmp_path.glob(".prov-trace-*.tmp")), "the temporary file should exist mid-write"
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc in (-signal.SIGTERM, 128 + signal.SIGTERM), rc
    assert not list(tmp_path.glob(".prov-trace-*")), "a temporary file was left behind"
    assert report.read_text() == "the old report\n"


# --- 2. a script that changes directory ----------------------------------------------------------------

CHDIR = textwrap.dedent("""
    import os
    os.chdir("elsewhere")
    print("now in", os.path.basename(os.getcwd()))
""")


def test_a_script_that_changes_directory_writes_where_the_user_asked(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(CHDIR)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    _small_trace(elsewhere / "t.msgpack")  # a stale trace that happens to sit in the script's new directory
    stale = (elsewhere / "t.msgpack").read_bytes()
    (elsewhere / "r.md").write_text("a file of the user's\n")
    (tmp_path / "p.toml").write_text('[[probe]]\ntarget = "json:dumps"\n')
    proc = cli("run", "-o", "t.msgpack", "--report", "r.md", "--probes", "p.toml", "s.py", cwd=tmp_path,
               env=rs.LIGHT_ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "now in elsewhere" in proc.stdout
    assert (elsewhere / "r.md").read_text() == "a file of the user's\n"
    assert (elsewhere / "t.msgpack").read_bytes() == stale
    t = read_trace(tmp_path / "t.msgpack")
    assert t.complete and t.header["argv"][-1] == "s.py"
    assert any(h["target"] == "json:dumps" for h in t.hooks())
    assert (tmp_path / "r.md").read_text().startswith("# Source-to-kernel provenance audit")


# --- 3. an output that is one of the run's inputs -------------------------------------------------------


@pytest.mark.parametrize("case", ["trace=script", "report=script", "trace=model", "report=probes", "trace=probes",
                                  "trace=module", "report=model-module"])
def test_an_output_that_is_an_input_is_refused_before_running(tmp_path, case):
    script = tmp_path / "s.py"
    script.write_text("open('ran', 'w').write('yes')\n")
    model = tmp_path / "m.py"
    model.write_text("open('ran', 'w').write('yes')\nimport torch\nclass Net(torch.nn.Linear):\n"
                     "    def __init__(self):\n        super().__init__(3, 3)\n")
    probes = tmp_path / "p.toml"
    probes.write_text('[[probe]]\ntarget = "json:dumps"\n')
    args = {
        "trace=script": ["-o", "s.py", "s.py"],
        "report=script": ["--report", "./s.py", "s.py"],
        "trace=model": ["-o", str(model), "m.py:Net"],
        "report=probes": ["--probes", "p.toml", "--report", "p.toml", "s.py"],
        "trace=probes": ["--probes", "p.toml", "-o", str(probes), "s.py"],
        "trace=module": ["-o", "s.py", "-m", "s"],
        "report=model-module": ["--report", "m.py", "m:Net"],
    }[case]
    before = {p: p.read_bytes() for p in (script, model, probes)}
    proc = cli("run", *args, cwd=tmp_path, env=rs.LIGHT_ENV, timeout=300)
    assert proc.returncode == 2, proc.stderr
    err = _one_error(proc.stderr)
    assert "would overwrite" in err and "input" in err, err
    assert not (tmp_path / "ran").exists(), "the program ran"
    assert {p: p.read_bytes() for p in before} == before


# --- 13. Ctrl-C ------------------------------------------------------------------------------------------

def _start(code: str, cwd: Path) -> subprocess.Popen:
    """`python -c code` with SIGINT as a terminal's foreground program has it, stderr read line by line."""
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **rs.LIGHT_ENV},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for(stream, marker: str, proc: subprocess.Popen, timeout: float = 300) -> list[str]:
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if marker in line:
            return seen
    raise AssertionError(f"no {marker!r} from the process: {''.join(seen)[-3000:]}")


#: Reading a trace announces itself on stderr and then takes a while: a Ctrl-C lands in the middle of it.
SLOW_READ = textwrap.dedent("""
    import sys, time
    from prov_trace.report import report as _report
    _build = _report.build
    def build(trace):
        print("BUILDING", file=sys.stderr, flush=True)
        for _ in range(600):
            time.sleep(0.1)
        return _build(trace)
    _report.build = build
""")


def _big_trace(path: Path) -> Path:
    nodes = [{"name": f"n{i}", "op": "call_function", "target": "aten.add", "inputs": [f"n{i - 1}"],
              "fields": {"stack_trace": {"has": True, "populated": True, "type": "str",
                                         "value": f'File "/m.py", line {i % 500}, in forward\n    x = x + {i}'}},
              "source": {"file": "/m.py", "line": i % 500, "text": f"x = x + {i}"}} for i in range(5000)]
    return rs.write_trace(path, [(schema.PROBE, {"stage": "post_grad", "target": "m:f", "phase": "return", "call": 1,
                                                  "compile_id": "0/0", "graph": "inference",
                                                  "thread": {"id": 1, "name": "t"},
                                                  "payload": {"graph_id": 1, "node_count": len(nodes), "nodes": nodes}}),
                                 (schema.END, {"outcome": "ok", "detail": None})])


@pytest.mark.parametrize("command", ["report", "diff", "check"])
def test_ctrl_c_during_report_diff_or_check_exits_130(tmp_path, command):
    trace = _big_trace(tmp_path / "t.msgpack")
    out = tmp_path / "out.md"
    args = {"report": ["report", str(trace), "-o", str(out)],
            "diff": ["diff", str(trace), str(trace), "--fail-on-regression", "-o", str(out)],
            "check": ["check", str(trace), "--require", "post_grad:stack_trace=all"]}[command]
    code = SLOW_READ + f"from prov_trace.cli import main\nsys.argv = ['prov-trace', *{args!r}]\nmain()\n"
    proc = _start(code, tmp_path)
    try:
        _wait_for(proc.stderr, "BUILDING", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "prov-trace: interrupted" in err and "Traceback" not in err and "Aborted" not in err, err
    assert not out.exists() and not list(tmp_path.glob(".prov-trace-*"))


LOOPS = textwrap.dedent("""
    import time
    print("READY", flush=True)
    while True:
        time.sleep(0.05)
""")

#: The report of a run announces itself on stderr and takes a while: a second Ctrl-C lands in it.
#: (`run` builds its report's model with `prov_trace.report.model.build`, looked up when the program
#: has ended, so the slow stand-in takes its place there.)
SLOW_REPORT = textwrap.dedent("""
    import sys, time
    from prov_trace.report import model as _model
    _build = _model.build
    def build(trace):
        print("FINISHING", file=sys.stderr, flush=True)
        for _ in range(30):
            time.sleep(0.1)
        return _build(trace)
    _model.build = build
""")


def test_a_second_ctrl_c_while_the_run_finishes_keeps_the_report(tmp_path):
    script = tmp_path / "loops.py"
    script.write_text(LOOPS)
    trace, report = tmp_path / "t.msgpack", tmp_path / "r.md"
    args = ["run", "-o", str(trace), "--report", str(report), str(script)]
    code = SLOW_REPORT + f"from prov_trace.cli import main\nsys.argv = ['prov-trace', *{args!r}]\nmain()\n"
    proc = _start(code, tmp_path)
    try:
        _wait_for(proc.stdout, "READY", proc)
        proc.send_signal(signal.SIGINT)
        _wait_for(proc.stderr, "FINISHING", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGINT, err  # ends by SIGINT, as python does after a Ctrl-C
    t = read_trace(trace)
    assert t.complete and t.end["outcome"] == "interrupted", t.problem
    assert "**Run stopped early**" in report.read_text()
    assert "report written to" in err and "finishing the trace and the report first" in err
    assert not list(tmp_path.glob(".prov-trace-*"))
