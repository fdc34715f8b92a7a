"""`prov-trace run SCRIPT` runs a script exactly as `python SCRIPT` does (issue 15).

Each case runs the same script twice, with plain python and under prov-trace, and
compares what the script saw and printed: the uncaught exception through
``sys.excepthook`` (the script's own hook too), ``sys.path[0]`` replaced rather than
inserted, ``-P`` / ``PYTHONSAFEPATH`` honoured, and the working directory the script
left. The scripts compile nothing, so these are quick.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": os.pathsep.join(
    [str(REPO), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]])}


def _plain(script: Path, *flags: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *flags, str(script)], cwd=cwd, env={**ENV, **(env or {})},
                          capture_output=True, text=True, timeout=120)


def _traced(script: Path, *flags: str, cwd: Path, env: dict | None = None, launcher: str = "-m") -> subprocess.CompletedProcess:
    opts = ["-o", str(cwd / "t.msgpack"), "--no-report"]
    if launcher == "-m":
        cmd = [sys.executable, *flags, "-m", "prov_trace", "run", *opts, str(script)]
    else:  # the console script, whose directory python put first on sys.path
        cmd = [sys.executable, *flags, launcher, "run", *opts, str(script)]
    return subprocess.run(cmd, cwd=cwd, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=300)


def _prov_trace_run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m prov_trace run ARGS` in `cwd`, output captured."""
    return subprocess.run([sys.executable, "-m", "prov_trace", "run", *args], cwd=cwd, env=ENV, capture_output=True,
                          text=True, timeout=300)


def _own_stderr(text: str) -> str:
    """The script's stderr: prov-trace's own lines taken out."""
    return "".join(line for line in text.splitlines(keepends=True) if not line.startswith("prov-trace:"))


def _stdout_of_script(text: str) -> str:
    """The script's stdout: the per-stage summary prov-trace prints after it taken out."""
    return text.split("prov-trace summary:")[0]


SYS_PATH = """\
import json, sys
print(json.dumps({"path": sys.path, "safe_path": sys.flags.safe_path}))
"""


def _console_script() -> str | None:
    exe = Path(sys.executable).parent / "prov-trace"
    return str(exe) if exe.exists() else None


@pytest.mark.parametrize("launcher", ["-m", "console"])
def test_sys_path_0_is_replaced_not_inserted(tmp_path, launcher):
    if launcher == "console":
        launcher = _console_script()
        if launcher is None:
            pytest.skip("no prov-trace console script beside this interpreter")
    d = tmp_path / "scripts"
    d.mkdir()
    script = d / "show_path.py"
    script.write_text(SYS_PATH)
    plain = _plain(script, cwd=tmp_path)
    traced = _traced(script, cwd=tmp_path, launcher=launcher)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    want, got = json.loads(plain.stdout), json.loads(_stdout_of_script(traced.stdout))
    assert got["path"][0] == str(d) == want["path"][0]
    # Replaced: the directory python put first for prov-trace (the cwd, or the console script's bin) is gone.
    assert got["path"] == want["path"]


@pytest.mark.parametrize("how", ["-P", "PYTHONSAFEPATH"])
def test_safe_path_is_honoured(tmp_path, how):
    d = tmp_path / "scripts"
    d.mkdir()
    script = d / "show_path.py"
    script.write_text(SYS_PATH)
    flags, env = (("-P",), None) if how == "-P" else ((), {"PYTHONSAFEPATH": "1"})
    plain = _plain(script, *flags, cwd=tmp_path, env=env)
    traced = _traced(script, *flags, cwd=tmp_path, env=env)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    want, got = json.loads(plain.stdout), json.loads(_stdout_of_script(traced.stdout))
    assert want["safe_path"] and got["safe_path"]
    assert str(d) not in want["path"] and str(d) not in got["path"]
    assert got["path"] == want["path"]


OWN_HOOK = """\
import sys

def hook(kind, value, tb):
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    print(f"my hook: {kind.__name__}: {value} via {frames}", file=sys.stderr)

sys.excepthook = hook

def inner():
    raise LookupError("no such thing")

inner()
"""

DEFAULT_HOOK = """\
def inner():
    raise LookupError("no such thing")

def outer():
    try:
        {}["k"]
    except KeyError:
        inner()

outer()
"""

FAILING_HOOK = """\
import sys

def hook(kind, value, tb):
    raise RuntimeError("the hook itself failed")

sys.excepthook = hook
raise LookupError("no such thing")
"""


@pytest.mark.parametrize("source", [OWN_HOOK, DEFAULT_HOOK, FAILING_HOOK], ids=["own-hook", "default-hook", "failing-hook"])
def test_uncaught_exception_goes_through_sys_excepthook(tmp_path, source):
    script = tmp_path / "raises.py"
    script.write_text(source)
    plain = _plain(script, cwd=tmp_path)
    traced = _traced(script, cwd=tmp_path)
    assert plain.returncode == traced.returncode == 1
    assert _own_stderr(traced.stderr) == plain.stderr
    if source is OWN_HOOK:
        assert plain.stderr == "my hook: LookupError: no such thing via ['<module>', 'inner']\n"
    # The trace still ends with its end record, saying how the script ended.
    from prov_trace.stream.reader import read_trace

    trace = read_trace(tmp_path / "t.msgpack")
    assert trace.complete and trace.end["outcome"] == "exception" and "LookupError" in trace.end["detail"]


LEAVES_CWD = """\
import atexit, os
os.makedirs("elsewhere", exist_ok=True)
os.chdir("elsewhere")

@atexit.register
def where():
    with open("left.txt", "w") as f:
        f.write(os.getcwd())
"""


def test_the_working_directory_is_what_the_script_left(tmp_path):
    a, b = tmp_path / "plain", tmp_path / "traced"
    for d in (a, b):
        d.mkdir()
        (d / "cd.py").write_text(LEAVES_CWD)
    (b / "out").mkdir()
    plain = _plain(a / "cd.py", cwd=a)
    traced = subprocess.run([sys.executable, "-m", "prov_trace", "run", "-o", "out/t.msgpack", "--report", "out/r.md",
                             "cd.py"], cwd=b, env=ENV, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0 and traced.returncode == 0, traced.stderr
    # The script's exit handler ran where the script left python, as it does under plain python ...
    assert (a / "elsewhere" / "left.txt").read_text() == str(a / "elsewhere")
    assert (b / "elsewhere" / "left.txt").read_text() == str(b / "elsewhere")
    # ... and the trace and report went where they were asked for, relative to where prov-trace started.
    assert (b / "out" / "t.msgpack").stat().st_size > 0 and (b / "out" / "r.md").read_text().startswith("#")
    assert not (b / "elsewhere" / "out").exists()


GLOBALS = """\
import json, sys
print(json.dumps({"globals": list(globals()), "file": __file__, "argv0": sys.argv[0], "path0": sys.path[0],
                  "builtins": type(__builtins__).__name__, "len": __builtins__.len("abc"),
                  "loader": [type(__loader__).__name__, __loader__.name, __loader__.path], "cached": __cached__,
                  "annotations": globals().get("__annotations__")}))
"""


def test_the_script_sees_the_globals_and_file_python_gives_it(tmp_path):
    """A script's ``__main__`` globals, in python's order: ``__builtins__`` the module (not a dict), a
    SourceFileLoader, ``__cached__`` None, ``__annotations__``; ``__file__`` absolute as written, ``..`` kept."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "show.py").write_text(GLOBALS)
    cwd = tmp_path / "b"
    plain = subprocess.run([sys.executable, "../a/show.py"], cwd=cwd, env=ENV, capture_output=True, text=True,
                           timeout=120)
    traced = _prov_trace_run("-o", str(cwd / "t.msgpack"), "--no-report", "../a/show.py", cwd=cwd)
    assert plain.returncode == traced.returncode == 0, traced.stderr
    want, got = json.loads(plain.stdout), json.loads(_stdout_of_script(traced.stdout))
    assert got == want
    assert want["file"] == str(cwd / ".." / "a" / "show.py") and want["builtins"] == "module"


STREAMS = {
    "stdout-closed": "import sys\nprint('out')\nsys.stdout.close()\n",
    "fd-1-closed": "import os, sys\nprint('out', flush=True)\nos.close(1)\n",
    "stdout-none": "import sys\nprint('out')\nsys.stdout = None\n",
    "stderr-closed": "import sys\nprint('out')\nsys.stderr.close()\n",
    "stdout-wrapped": ("import sys\nclass Upper:\n    def __init__(self, s): self.s = s\n"
                       "    def write(self, t): return self.s.write(t.upper())\n    def flush(self): self.s.flush()\n"
                       "sys.stdout = Upper(sys.stdout)\nprint('out')\n"),
    "stdout-stringio": "import io, sys\nsys.stdout = io.StringIO()\nprint('out')\n",
}


@pytest.mark.parametrize("case", list(STREAMS))
def test_a_program_that_replaces_or_closes_its_streams_keeps_its_exit_status(tmp_path, case):
    """prov-trace's own lines go to the streams the process started with, whatever the program did to
    sys.stdout and sys.stderr (a closed one's descriptor, else nothing: never an exception): the exit status is
    python's, nothing of prov-trace's is drawn by the program's wrapper, and the report is written."""
    script = tmp_path / "streams.py"
    script.write_text(STREAMS[case])
    plain = _plain(script, cwd=tmp_path)
    traced = _prov_trace_run("-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script),
                             cwd=tmp_path)
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert "Traceback" not in traced.stderr and "lost sys.stderr" not in traced.stderr, traced.stderr
    assert _stdout_of_script(traced.stdout) == plain.stdout
    assert (tmp_path / "r.md").is_file()
    if case in ("stdout-closed", "stdout-none", "stdout-wrapped", "stdout-stringio"):  # fd 1 still open
        assert "prov-trace summary:" in traced.stdout, traced.stdout
    if case == "stderr-closed":  # the stream object is closed, its descriptor is not: written there
        assert "prov-trace: report written to" in traced.stderr, traced.stderr


INTERRUPTS_ITSELF = """\
import atexit
atexit.register(lambda: print("exit handler ran", flush=True))
print("start", flush=True)
raise KeyboardInterrupt
"""


def test_a_script_left_with_a_keyboardinterrupt_ends_by_sigint_as_under_python(tmp_path):
    """python prints the traceback, runs the exit handlers, then ends by SIGINT (a parent sees the signal,
    a shell 130): traced, the same, after the trace and report are written. A script's own
    sys.exit(130) stays an exit status."""
    import signal

    script = tmp_path / "interrupts.py"
    script.write_text(INTERRUPTS_ITSELF)
    plain = _plain(script, cwd=tmp_path)
    traced = _prov_trace_run("-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"), str(script),
                             cwd=tmp_path)
    assert plain.returncode == traced.returncode == -signal.SIGINT, traced.stderr
    assert _own_stderr(traced.stderr) == plain.stderr and "KeyboardInterrupt" in plain.stderr
    assert plain.stdout == "start\nexit handler ran\n" and traced.stdout.startswith("start\n")
    assert traced.stdout.rstrip().endswith("exit handler ran") and (tmp_path / "r.md").is_file()
    script.write_text("import sys\nsys.exit(130)\n")
    exits = _prov_trace_run("-o", str(tmp_path / "t.msgpack"), "--no-report", str(script), cwd=tmp_path)
    assert exits.returncode == 130 == _plain(script, cwd=tmp_path).returncode
