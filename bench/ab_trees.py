"""Two versions of prov-trace against `python`, timed in one interleaved loop.

    python bench/ab_trees.py --tree before=/tmp/prefix --tree after=. [--script mlp] [--rounds 5]

Each `--tree NAME=DIR` is a source tree of prov-trace (a checkout, or `git worktree add DIR COMMIT`),
imported through PYTHONPATH; each round runs `python SCRIPT` and `python -m prov_trace run --no-report
SCRIPT` from every tree, in an order that rotates from round to round, after one warm-up run of each.
Both sides get TORCHINDUCTOR_FORCE_DISABLE_CACHES=1, and each tree its own prov-trace cache (inject's
rewrites), warmed by its warm-up run. Prints each run and the medians against `python`'s.

For the whole-process figures use bench/whole_process.py (report included, phases); this is for telling
two commits apart on one machine in one session, where days apart the machine is not the same.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {"mlp": REPO / "bench" / "scripts" / "compile_mlp.py",
           "encoder": REPO / "bench" / "scripts" / "compile_encoder.py"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, metavar="NAME=DIR",
                    help="a prov-trace source tree to time (repeatable)")
    ap.add_argument("--script", default="mlp", help="mlp, encoder, or a path (default mlp)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="auto", help="prov-trace's --backend (default auto)")
    args = ap.parse_args()
    script = str(SCRIPTS.get(args.script, Path(args.script).resolve()))
    trees = {}
    for spec in args.tree:
        name, sep, path = spec.partition("=")
        if not sep or not (Path(path) / "prov_trace" / "__init__.py").is_file():
            sys.exit(f"--tree {spec}: give NAME=DIR, DIR a prov-trace source tree")
        trees[name] = str(Path(path).resolve())
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="prov-trace-ab-") as tmp:
        base = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}
        cases = {"python": ([py, script], base)}
        for name, path in trees.items():
            cases[name] = ([py, "-m", "prov_trace", "run", "-q", "--backend", args.backend, "-o", f"{tmp}/t.msgpack",
                            "--no-report", script],
                           {**base, "PYTHONPATH": path, "PROV_TRACE_CACHE_DIR": f"{tmp}/cache-{name}"})

        def run(name: str) -> float:
            cmd, env = cases[name]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                sys.exit(f"{name}: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
            return wall

        names = list(cases)
        for name in names:
            run(name)  # warm-up: bytecode caches, inject's rewrites
        times: dict[str, list[float]] = {n: [] for n in names}
        for i in range(args.rounds):
            order = names[i % len(names):] + names[:i % len(names)]
            for name in order:
                times[name].append(run(name))
                print(f"  round {i + 1}: {name} {times[name][-1]:.2f} s", flush=True)
    plain = statistics.median(times["python"])
    print(f"{Path(script).name}, {args.rounds} rounds, median wall:")
    for name in names:
        med = statistics.median(times[name])
        print(f"  {name:<10} {med:7.2f} s" + ("" if name == "python" else f"  ({100 * (med / plain - 1):+.1f}%)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
