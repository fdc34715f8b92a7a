"""A probe's cost against the depth it starts at: CPython's frame-stack chunks, with and without `on_fresh_stack`.

    python bench/stack_chunks.py [--model encoder|mlp] [--depths 400] [--repeat 3]

CPython 3.11+ keeps frames in 16 KiB chunks; a call that does not fit maps a new chunk, and the
chunk is unmapped when that call returns. Code that keeps calling across a chunk's edge maps and
unmaps a chunk per call. The host decides where a probe starts, so a probe can land on an edge.

This snapshots a real FX graph (the model traced by `torch.fx.symbolic_trace`, the probes' own
`fx.snapshot_graph`) at each start depth from 0 to --depths frames below this script, twice per
depth: called directly, and through `prov_trace.tracer.stack.on_fresh_stack`, as the session
calls every probe. For each it keeps the best of --repeat runs and the page faults of that run
(`ru_minflt`), and prints the spread over the depths: median and worst time, the worst depth's
faults, and how many depths cost more than 1.5 times the median. Both columns come from the same
process, interleaved, so the ratio stands however busy the machine is.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return getattr(mod, name)


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _at_depth(depth: int, fn, *args):
    """``fn(*args)`` called `depth` small frames below here."""
    if depth == 0:
        return fn(*args)
    return _at_depth(depth - 1, fn, *args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("encoder", "mlp"), default="encoder")
    ap.add_argument("--depths", type=int, default=400, help="deepest start depth, in frames (default 400)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per depth and way; the best is kept (default 3)")
    a = ap.parse_args()
    if sys.version_info < (3, 11):
        sys.exit("frame-stack chunks arrived in Python 3.11: run this with 3.11 or later")
    sys.setrecursionlimit(max(sys.getrecursionlimit(), a.depths + 200))

    import torch.fx

    from prov_trace.probes import fx
    from prov_trace.tracer.stack import on_fresh_stack

    if a.model == "encoder":
        model = _load(REPO / "examples" / "encoder_stack.py", "EncoderStack")()
    else:
        model = _load(REPO / "examples" / "reference_mlp.py", "SimpleMLP")()
    gm = torch.fx.symbolic_trace(model)
    nodes = len(gm.graph.nodes)

    def run(depth: int, fresh: bool) -> tuple[float, int]:
        best = None
        for _ in range(a.repeat):
            f0 = _faults()
            t0 = time.perf_counter()
            if fresh:
                _at_depth(depth, on_fresh_stack, fx.snapshot_graph, gm)
            else:
                _at_depth(depth, fx.snapshot_graph, gm)
            dt = time.perf_counter() - t0
            got = (dt, _faults() - f0)
            best = got if best is None or got[0] < best[0] else best
        return best  # type: ignore[return-value]

    run(0, False)  # warm-up: imports, caches
    rows = {False: [], True: []}
    for depth in range(a.depths + 1):
        for fresh in (False, True):
            rows[fresh].append((depth, *run(depth, fresh)))

    print(f"python {sys.version.split()[0]}, model {a.model} ({nodes} FX nodes, symbolic_trace), "
          f"start depths 0..{a.depths}, best of {a.repeat}")
    print(f"{'':22s} {'median ms':>10s} {'worst ms':>9s} {'worst/median':>13s} {'worst depth':>12s} "
          f"{'its faults':>11s} {'depths > 1.5x':>14s}")
    for fresh, label in ((False, "called directly"), (True, "on_fresh_stack")):
        times = [r[1] for r in rows[fresh]]
        med = statistics.median(times)
        worst = max(rows[fresh], key=lambda r: r[1])
        slow = sum(1 for t in times if t > 1.5 * med)
        print(f"{label:22s} {med * 1e3:10.2f} {worst[1] * 1e3:9.2f} {worst[1] / med:13.2f} {worst[0]:12d} "
              f"{worst[2]:11d} {slow:14d}")


if __name__ == "__main__":
    main()
