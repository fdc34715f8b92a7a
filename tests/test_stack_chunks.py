"""Probes run at the start of a fresh frame-stack chunk (`tracer/stack.py`: `on_fresh_stack`; docs/benchmarks.md).

CPython 3.11+ keeps frames in 16 KiB chunks and unmaps a chunk as soon as the call that opened it
returns, so code that keeps calling across a chunk's edge maps and unmaps a chunk (fresh pages) per
call. Where a probe starts is the host's stack depth; these tests check that a probe's calls no
longer pay that, whatever the depth.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import textwrap

import pytest

from prov_trace.contract import ENTRY, Hook, ProbeCall, Profile
from prov_trace.stream.reader import read_trace
from prov_trace.stream.writer import TraceWriter
from prov_trace.tracer.core import BACKENDS
from prov_trace.tracer.session import TraceSession
from prov_trace.tracer.stack import on_fresh_stack

MOD = __name__


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _leaf(x: int) -> int:
    return x + 1


# A frame of ~1 KiB, larger than one step of `_at_depth`: some start depth puts it across every chunk edge.
_leaf.__code__ = _leaf.__code__.replace(co_stacksize=128)


def _many_calls() -> int:
    total = 0
    for i in range(300):
        total = _leaf(total)
    return total


def _at_depth(depth: int, fn, *args):
    if depth == 0:
        return fn(*args)
    return _at_depth(depth - 1, fn, *args)


def test_on_fresh_stack_is_the_call_it_wraps():
    assert on_fresh_stack(divmod, 17, 5) == (3, 2)
    assert on_fresh_stack(lambda *a: a) == ()
    with pytest.raises(ZeroDivisionError):
        on_fresh_stack(divmod, 1, 0)
    # Its frame is larger than a 16 KiB chunk, so it always opens one of its own.
    assert on_fresh_stack.__code__.co_stacksize * 8 > 16 * 1024


def test_calls_on_a_chunk_edge_map_one_chunk_not_one_per_call():
    """At every start depth, 300 calls through `on_fresh_stack` fault a few pages; called directly, at
    the depths where the leaf call crosses a chunk's edge, each of the 300 calls maps a chunk."""
    worst_direct = worst_fresh = 0
    for depth in range(0, 420):
        f0 = _faults()
        _at_depth(depth, _many_calls)
        f1 = _faults()
        _at_depth(depth, on_fresh_stack, _many_calls)
        f2 = _faults()
        worst_direct = max(worst_direct, f1 - f0)
        worst_fresh = max(worst_fresh, f2 - f1)
    if worst_direct < 300:
        pytest.skip(f"this Python ({sys.version.split()[0]}) does not unmap a frame-stack chunk per call "
                    f"(worst {worst_direct} page faults for 300 calls)")
    assert worst_fresh <= 40, (worst_direct, worst_fresh)


def probed(x: int) -> int:
    return x * 2


def _where(call: ProbeCall) -> dict:
    f = sys._getframe()
    names = []
    while f is not None:
        names.append(f.f_code.co_name)
        f = f.f_back
    return {"via_fresh_stack": "on_fresh_stack" in names}


@pytest.mark.parametrize("backend", ["monitoring", "inject", "settrace"])
def test_every_backend_runs_probes_on_a_fresh_stack(tmp_path, backend):
    reason = BACKENDS[backend].unavailable_reason()
    if reason:
        pytest.skip(f"the {backend} backend can't run here: {reason}")
    if backend == "settrace" and sys.gettrace() is not None:
        pytest.skip("another sys.settrace tracer (a debugger or coverage) is active")
    path = tmp_path / "t.msgpack"
    hooks = (Hook("toy", f"{MOD}:probed", ENTRY, _where),)
    with TraceSession(TraceWriter(path), Profile("toy", "toy targets", hooks), backend=backend, log=lambda m: None):
        assert probed(3) == 6
    probes = [r for r in read_trace(path).records if r["kind"] == "probe"]
    assert [r["payload"] for r in probes] == [{"via_fresh_stack": True}]


#: Prints where the module frame sits in its chunk, and after how many nested calls the next chunks begin.
EDGES = textwrap.dedent("""
    import ctypes, sys

    def frame_address(f):  # PyFrameObject: refcount, type, f_back, then f_frame, the interpreter frame
        return ctypes.c_void_p.from_address(id(f) + 24).value

    addresses = []

    def down(n):
        addresses.append(frame_address(sys._getframe()))
        if n:
            down(n - 1)

    down(400)
    size = addresses[1] - addresses[0]
    edges = [i for i in range(1, len(addresses)) if addresses[i] - addresses[i - 1] != size]
    print("module frame at", hex(frame_address(sys._getframe()) & 0xfff), "chunk edges after calls", edges[:3])
""")


@pytest.mark.skipif(not (3, 11) <= sys.version_info[:2] <= (3, 13) or sys.implementation.name != "cpython",
                    reason="reads CPython 3.11-3.13's frame layout")
@pytest.mark.parametrize("how", ["script", "module"])
def test_the_program_meets_the_stack_chunks_edges_where_it_does_under_python(tmp_path, how):
    """`prov-trace run` runs the program's frames at the offsets python gives them in the interpreter's
    stack chunks, so its calls cross the chunks' edges at the same depths (and pay for it as under python)."""
    (tmp_path / "edges.py").write_text(EDGES)
    target = ["edges.py"] if how == "script" else ["-m", "edges"]
    env = {**os.environ, "PYTHONPATH": ""}
    plain = subprocess.run([sys.executable, *target], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=120)
    traced = subprocess.run([sys.executable, "-m", "prov_trace", "run", "-q", "--no-report", "-o",
                             str(tmp_path / "t.msgpack"), *target], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=300)
    assert plain.returncode == 0 and traced.returncode == 0, (plain.stderr, traced.stderr)
    assert plain.stdout.startswith("module frame at"), plain.stdout
    assert traced.stdout == plain.stdout
