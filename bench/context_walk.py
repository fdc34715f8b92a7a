"""What a user probe's context costs per call: placing it in an export, and in a compile's graph kind.

    python bench/context_walk.py [--depth 150] [--calls 10000]

A user probe's record is given a compile id by `probes/context.py`. To find a running `torch.export` it
first asks the session's own bookkeeping (is an `_export` call open on this thread?) and walks up the
frames (`_running_export`, up to 200 frames) only when it cannot tell. Inside a compile it also walks up
to 60 frames for Inductor's graph kind (`graph_kind`). This times, from a frame --depth calls deep, with no
export running (the common case, and the longest walk), the mean over --calls calls of:

- the export check as a real trace session gives it its state (the stock inductor-cpu profile, tracing,
  with `torch.export` imported so that `_export` is one of its targets);
- the export walk alone (a state with no session bookkeeping: a profile that does not trace `_export`);
- the graph kind walk.

All three run in one process, one after the other, so their ratios stand however busy the machine is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from prov_trace.probes.context import _running_export, graph_kind


def _time(fn, frame, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn(frame)
    return (time.perf_counter_ns() - t0) / calls / 1000


def _at_depth(n: int, calls: int, session_state: dict) -> tuple[int, float, float, float]:
    if n:
        return _at_depth(n - 1, calls, session_state)
    frame, depth = sys._getframe(), 0
    f = frame
    while f is not None:
        depth, f = depth + 1, f.f_back
    bare: dict = {}
    return (depth, _time(lambda fr: _running_export(session_state, fr), frame, calls),
            _time(lambda fr: _running_export(bare, fr), frame, calls), _time(graph_kind, frame, calls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=150, help="calls below this script to start from")
    ap.add_argument("--calls", type=int, default=10000, help="calls timed per walk")
    args = ap.parse_args()
    sys.setrecursionlimit(max(1000, args.depth + 100))

    import torch.export._trace  # noqa: F401 - so that `_export` is a target of the session below
    from prov_trace.probes.profiles import INDUCTOR_CPU
    from prov_trace.stream.writer import TraceWriter
    from prov_trace.tracer.session import TraceSession

    with tempfile.TemporaryDirectory() as tmp:
        with TraceSession(TraceWriter(Path(tmp) / "t.msgpack"), INDUCTOR_CPU, log=lambda m: None) as session:
            state = session._context_state
            traced = sum(1 for _ in state["traced_codes"]())
            depth, gated_us, walk_us, kind_us = _at_depth(args.depth, args.calls, state)
    print(f"Python {sys.version.split()[0]}, a frame {depth} deep, mean of {args.calls} calls:")
    print(f"  export check, a session's state ({traced} targets traced): {gated_us:.2f} us")
    print(f"  export walk alone (_running_export, no session state): {walk_us:.1f} us")
    print(f"  graph kind walk (graph_kind):                          {kind_us:.1f} us")


if __name__ == "__main__":
    main()
