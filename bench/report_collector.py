"""What the cyclic garbage collector costs the report after a large compile, and what pausing it saves.

    python bench/report_collector.py TRACE [--objects 300000] [--repeat 3]

`prov-trace run` builds its report in the process that just ran the program, whose heap after a
large compile holds hundreds of thousands of objects (the 24-layer encoder's: ~700k). Every full
collection the report's allocations set off walks all of them. This stands in for that heap with
`--objects` small containers (dicts holding a list and a tuple, which the collector tracks), then
reads TRACE and renders its Markdown, in fresh processes, three ways: collector on (what `run` did
before), collector paused (what `prov_trace.api._collector_paused` does now), and `gc.freeze()`
(the alternative considered). For each it prints the wall time and the growth of peak RSS, so the
memory cost of pausing shows next to the time it saves.

Make a trace to read with, e.g.:

    .venv/bin/prov-trace run --output /tmp/enc.msgpack --no-report bench/scripts/compile_encoder.py
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODES = ("on", "paused", "freeze")

CHILD = r"""
import gc, json, resource, sys, time
from prov_trace.report.report import Report
trace, mode, objects = sys.argv[1], sys.argv[2], int(sys.argv[3])
heap = [{"a": [i], "b": (i,)} for i in range(objects)]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if mode == "paused":
    gc.disable()
elif mode == "freeze":
    gc.freeze()
t = time.perf_counter()
Report.load(trace).render("md")
wall = time.perf_counter() - t
gc.enable()
gc.unfreeze()
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
print(json.dumps({"wall_s": wall, "rss_grew_mb": grew / 1024, "heap": len(heap)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="a trace file (.msgpack) to build the report from")
    parser.add_argument("--objects", type=int, default=300_000, help="tracked objects standing in for the program's heap")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each runs the three modes in turn")
    args = parser.parse_args()
    if not Path(args.trace).is_file():
        parser.error(f"no trace at {args.trace}: make one with the command in this script's --help")
    results: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(args.repeat):
        for mode in MODES:
            out = subprocess.run([sys.executable, "-c", CHILD, args.trace, mode, str(args.objects)],
                                 capture_output=True, text=True, check=True, cwd=REPO)
            results[mode].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"python {sys.version.split()[0]}, trace {args.trace}, {args.objects} objects standing in for the heap")
    for mode in MODES:
        walls = sorted(r["wall_s"] for r in results[mode])
        rss = max(r["rss_grew_mb"] for r in results[mode])
        print(f"  collector {mode:7s} report {walls[len(walls) // 2]:.3f} s (range {walls[0]:.3f} .. {walls[-1]:.3f}), "
              f"peak RSS grew {rss:.0f} MB")


if __name__ == "__main__":
    main()
