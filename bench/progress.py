"""What live progress costs: a traced compile with and without it, paired round by round, in one run.

    python bench/progress.py [--runs N] [--json FILE]

Each case compiles the reference MLP once in a fresh process (``torch.compile`` plus
the first call under ``no_grad``, caches defeated), traced by ``prov_trace.trace()``
with the default backend, and times that span (wall clock, and CPU time of the
process and its reaped children, i.e. the C++ compiler). Cases:

    quiet      no progress (``progress=False``, what ``--quiet`` does)
    plain      progress to a file: a line per stage per graph (stderr not a terminal)
    terminal   progress to a pseudo-terminal: one line rewritten in place

The cases are interleaved, each round starting at a different one. "paired" is the
median over rounds of a case's CPU time over the quiet run of the same round, which
cancels the drift of the machine's speed between rounds; "paired self CPU" is the same
for the process's own CPU time, without the C++ compiler it runs (whose time varies by
a second between identical compiles, and which progress can't change). "in progress" is the time
spent inside the progress observer itself (summed over its calls, measured around
each call in the process): the part of the difference that is progress's own work.
The observer is called once per probe record (a target's entry or return); it is not
on the path of any other call, so it cannot cost anything per non-target call.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CASES = ("quiet", "plain", "terminal")


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def run_case(case: str) -> dict:
    """In a fresh process: build the MLP, then time one traced compile with this case's progress."""
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    sys.path.insert(0, str(REPO))
    import importlib.util

    import prov_trace
    from prov_trace.progress import Progress

    spec = importlib.util.spec_from_file_location("reference_mlp", REPO / "examples" / "reference_mlp.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    import torch

    torch.manual_seed(0)
    model = mod.SimpleMLP().eval()
    x = torch.randn(2, 128)

    stream = drain = None
    if case == "plain":
        stream = tempfile.TemporaryFile("w+")
        shown = Progress(stream, tty=False)
    elif case == "terminal":
        master, slave = os.openpty()
        stream = os.fdopen(slave, "w")
        shown = Progress(stream, tty=True)

        def _drain() -> None:
            while True:
                try:
                    if not os.read(master, 65536):
                        return
                except OSError:
                    return

        drain = threading.Thread(target=_drain, daemon=True)
        drain.start()
    inside = [0, 0]

    def timed(record: dict) -> None:
        t0 = time.perf_counter_ns()
        shown(record)
        inside[0] += time.perf_counter_ns() - t0
        inside[1] += 1

    fd, path = tempfile.mkstemp(suffix=".msgpack")
    os.close(fd)
    try:
        cpu0, self0, wall0 = _cpu(), _self_cpu(), time.perf_counter()
        with prov_trace.trace(path, progress=False if case == "quiet" else timed):
            torch._dynamo.reset()
            with torch.no_grad():
                torch.compile(model)(x)
        wall, cpu, own = time.perf_counter() - wall0, _cpu() - cpu0, _self_cpu() - self0
        if case != "quiet":
            shown.close()
    finally:
        os.unlink(path)
    return {"case": case, "wall_s": wall, "cpu_s": cpu, "self_cpu_s": own, "in_progress_us": inside[0] / 1000, "calls": inside[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--json", help="Also write the raw results here.")
    ap.add_argument("--case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    results: list[dict] = []
    for r in range(args.runs):
        order = CASES[r % len(CASES):] + CASES[: r % len(CASES)]
        for case in order:
            proc = subprocess.run([sys.executable, __file__, "--case", case], env=env, capture_output=True,
                                  text=True, timeout=900)
            if proc.returncode != 0:
                sys.exit(f"case {case} failed:\n{proc.stderr[-3000:]}")
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["round"] = r
            results.append(res)
            print(f"round {r + 1}/{args.runs} {case:<9} cpu {res['cpu_s']:.2f} s  wall {res['wall_s']:.2f} s  "
                  f"in progress {res['in_progress_us']:.0f} us over {res['calls']} calls", file=sys.stderr)
    quiet = {r["round"]: r for r in results if r["case"] == "quiet"}
    print(f"Python {sys.version.split()[0]}, {args.runs} rounds, reference MLP (eval), {os.cpu_count()} CPUs\n")
    print("| case | median CPU s | median wall s | paired CPU vs quiet | paired self CPU vs quiet | in progress (median) | observer calls |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        rs = [r for r in results if r["case"] == case]
        cpu = statistics.median(r["cpu_s"] for r in rs)
        wall = statistics.median(r["wall_s"] for r in rs)
        paired = statistics.median(r["cpu_s"] / quiet[r["round"]]["cpu_s"] - 1 for r in rs)
        paired_self = statistics.median(r["self_cpu_s"] / quiet[r["round"]]["self_cpu_s"] - 1 for r in rs)
        inside = statistics.median(r["in_progress_us"] for r in rs)
        calls = statistics.median(r["calls"] for r in rs)
        share = inside / 1e6 / cpu
        print(f"| {case} | {cpu:.2f} | {wall:.2f} | {paired:+.1%} | {paired_self:+.1%} | "
              + ("—" if case == "quiet" else f"{inside:.0f} µs ({share:.4%} of the compile)")
              + f" | {calls:.0f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
