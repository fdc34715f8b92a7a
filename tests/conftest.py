"""Shared fixtures: each model is compiled once per test session, by the real CLI or in process."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def _session_dir(prefix: str) -> str:
    """A temp dir for this test process, removed when it exits (the processes tests start inherit its path
    and leave it to this one)."""
    path, pid = tempfile.mkdtemp(prefix=prefix), os.getpid()
    # Only by this process: a child a test forks inherits the handler, and must not remove it under us.
    atexit.register(lambda: os.getpid() == pid and shutil.rmtree(path, ignore_errors=True))
    return path


# Hypothesis keeps its example database and caches in .hypothesis/ under the working directory, which
# is the checkout. Tests write only to temp dirs: point it at one before any test asks for it.
if "HYPOTHESIS_STORAGE_DIRECTORY" not in os.environ:
    os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = _session_dir("prov-trace-hypothesis-")
# prov-trace's own cache (inject's rewrites, the Spyre stand-in's library) goes to a temp dir too, for this
# process and every process a test starts, never to ~/.cache or a cache the developer named.
os.environ["PROV_TRACE_CACHE_DIR"] = _session_dir("prov-trace-cache-")
try:
    from hypothesis import configuration as _hypothesis_configuration

    _hypothesis_configuration.set_hypothesis_home_dir(os.environ["HYPOTHESIS_STORAGE_DIRECTORY"])
except (ImportError, AttributeError):  # hypothesis absent, or an API it no longer has: the variable serves
    pass

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
sys.path.insert(0, str(Path(__file__).resolve().parent))

HAS_MONITORING = hasattr(sys, "monitoring")


def cli(*args: str, cwd: Path | str | None = None, env: dict | None = None, timeout: int = 900,
        check: bool = False) -> subprocess.CompletedProcess:
    """Run `python -m prov_trace ARGS` as a user would, in a fresh process."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "prov_trace", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"prov-trace {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


class Run:
    def __init__(self, proc: subprocess.CompletedProcess, trace: Path, report: Path, workdir: Path):
        self.proc, self.trace, self.report, self.workdir = proc, trace, report, workdir

    def model(self):
        from prov_trace.report.model import build
        from prov_trace.stream.reader import read_trace

        return build(read_trace(self.trace))


@pytest.fixture(scope="session")
def mlp_run(tmp_path_factory) -> Run:
    """`prov-trace run examples/reference_mlp.py:SimpleMLP`, once, as a user runs it."""
    d = tmp_path_factory.mktemp("mlp")
    # With the phase marks bench/whole_process.py reads (test_phases.py checks them; they change nothing else).
    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "-o", str(d / "t.msgpack"),
               "--report", str(d / "audit.md"), cwd=d, check=True, env={"PROV_TRACE_PHASES": str(d / "phases.json")})
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="session")
def mlp_provenance_run(tmp_path_factory) -> Run:
    """The same audit with Inductor's own provenance tracking on, and its structured trace in TORCH_TRACE."""
    d = tmp_path_factory.mktemp("mlp_prov")
    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "-o", str(d / "t.msgpack"),
               "--report", str(d / "audit.md"), cwd=d, check=True,
               env={"INDUCTOR_PROVENANCE": "1", "TORCH_TRACE": str(d / "torch_trace")})
    return Run(proc, d / "t.msgpack", d / "audit.md", d)


@pytest.fixture(scope="session")
def graph_break_run(tmp_path_factory) -> Run:
    """`prov-trace run examples/graph_break.py:GraphBreakMLP`, with the report as HTML (its suffix sets the format)."""
    d = tmp_path_factory.mktemp("graph_break")
    proc = cli("run", str(EXAMPLES / "graph_break.py") + ":GraphBreakMLP", "-o", str(d / "t.msgpack"),
               "--report", str(d / "audit.html"), cwd=d, check=True)
    return Run(proc, d / "t.msgpack", d / "audit.html", d)


#: A script that compiles a tiny function, then raises (tests/test_reliability_*.py).
RAISES_AFTER_COMPILE = """\
import torch

@torch.compile
def tiny(x):
    return torch.relu(x) + 1

def fail(value):
    raise ValueError(f"script failed after the compile: {value}")

with torch.no_grad():
    total = tiny(torch.ones(4)).sum().item()
print("compiled", total)
fail(total)
"""


@pytest.fixture(scope="session")
def raising_run(tmp_path_factory) -> Run:
    """`prov-trace run raises.py`: one small real compile, then the script's own exception."""
    d = tmp_path_factory.mktemp("raises")
    (d / "raises.py").write_text(RAISES_AFTER_COMPILE)
    proc = cli("run", "-o", str(d / "t.msgpack"), "--report", str(d / "r.md"), str(d / "raises.py"), cwd=d,
               env={"TORCHINDUCTOR_COMPILE_THREADS": "1"})
    return Run(proc, d / "t.msgpack", d / "r.md", d)


def unknown_wrapper_ops() -> set[str]:
    """The installed torch's wrapper HOPs (torch/_higher_order_ops/wrap.py) that the report's list does not
    name, as WRAPPER_OPS or as NOT_WRAPPER_OPS."""
    import torch._higher_order_ops.wrap as wrap
    from torch._ops import HigherOrderOperator

    from prov_trace.report.model import NOT_WRAPPER_OPS, WRAPPER_OPS

    installed = {v.name() for v in vars(wrap).values() if isinstance(v, HigherOrderOperator)}
    return installed - set(WRAPPER_OPS) - set(NOT_WRAPPER_OPS)
