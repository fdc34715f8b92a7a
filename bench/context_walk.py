"""What a user probe's context costs per call: the frame walks that place it in a compile or an export.

    python bench/context_walk.py [--depth 150] [--calls 10000]

A user probe's record is given a compile id by `probes/context.py`: it looks up the frames for a running
`torch.export` (`_running_export`, up to 200 frames, the whole stack when none is running) and for
Inductor's graph kind (`graph_kind`, up to 60). This times each walk from a frame --depth calls deep, the
mean over --calls calls, with no export running (the common case, and the longest walk). Both are timed in
one process, one after the other, so their ratio stands however busy the machine is.
"""

from __future__ import annotations

import argparse
import sys
import time

from prov_trace.probes.context import _running_export, graph_kind


def _time(fn, frame, calls: int) -> float:
    t0 = time.perf_counter_ns()
    for _ in range(calls):
        fn(frame)
    return (time.perf_counter_ns() - t0) / calls / 1000


def _at_depth(n: int, calls: int) -> tuple[int, float, float]:
    if n:
        return _at_depth(n - 1, calls)
    frame, depth = sys._getframe(), 0
    f = frame
    while f is not None:
        depth, f = depth + 1, f.f_back
    state: dict = {}
    return depth, _time(lambda fr: _running_export(state, fr), frame, calls), _time(graph_kind, frame, calls)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=150, help="calls below this script to start from")
    ap.add_argument("--calls", type=int, default=10000, help="calls timed per walk")
    args = ap.parse_args()
    sys.setrecursionlimit(max(1000, args.depth + 100))
    depth, export_us, kind_us = _at_depth(args.depth, args.calls)
    print(f"Python {sys.version.split()[0]}, a frame {depth} deep, mean of {args.calls} calls:")
    print(f"  export walk (_running_export): {export_us:.1f} us")
    print(f"  graph kind walk (graph_kind):  {kind_us:.1f} us")


if __name__ == "__main__":
    main()
