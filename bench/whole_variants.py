"""Whole-process cost by part: `python script.py` against several ways of running `prov-trace run script.py`.

    python bench/whole_variants.py [--rounds 5] [--script encoder] [--variants python,traced,no-report,inject]

bench/whole_process.py pairs `python` with the default `prov-trace run`; this one runs more variants
of the traced command, interleaved in one session (each round starts at a different variant and
alternates direction), so their differences say where the whole-process cost is:

    python       python script.py
    traced       prov-trace run (the default backend, trace and Markdown report)
    no-report    prov-trace run --no-report (traced - no-report is the report)
    no-follow    prov-trace run --no-report --no-follow (no-report - no-follow is following the compile workers)
    inject       prov-trace run --backend inject (against traced: the backend)
    inject-no-report

Both sides get caches defeated (TORCHINDUCTOR_FORCE_DISABLE_CACHES=1) and bytecode caches in the
temp dir, and prov-trace its cache there (PROV_TRACE_CACHE_DIR, filled by the warm-up runs), as in
bench/whole_process.py. Per variant: the median wall time, the paired median
(each round's run over the same round's `python` run) with its range, the median CPU time of the
process and its children, and for traced variants the probes' own time (the trace's probe_ns, summed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from whole_process import REPO, SCRIPTS, run_once  # bench/, this script's directory, is on sys.path

OPTIONS = {"traced": [], "no-report": ["--no-report"], "no-follow": ["--no-report", "--no-follow"],
           "inject": ["--backend", "inject"], "inject-no-report": ["--backend", "inject", "--no-report"]}


def probe_seconds(trace: Path) -> float:
    sys.path.insert(0, str(REPO))
    from prov_trace.stream.reader import read_trace

    return sum(r.get("probe_ns") or 0 for r in read_trace(trace).records if r.get("kind") == "probe") / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--script", default="encoder", choices=sorted(SCRIPTS))
    ap.add_argument("--variants", default="python,traced,no-report,inject",
                    help="comma-separated, the first is the baseline: python, " + ", ".join(OPTIONS))
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v != "python" and v not in OPTIONS]
    if unknown:
        sys.exit(f"--variants: unknown {', '.join(unknown)}; choose from python, {', '.join(OPTIONS)}")
    found = shutil.which(args.python)
    if found is None:
        sys.exit(f"--python {args.python}: no such interpreter; give a path or a name on PATH")
    py, script = os.path.abspath(found), str(SCRIPTS[args.script])
    print(f"python {sys.version.split()[0]} ({py}), {args.script}, rounds {args.rounds}, variants {args.variants}")
    with tempfile.TemporaryDirectory(prefix="prov-trace-variants-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "PYTHONPATH": str(REPO),
               "PYTHONPYCACHEPREFIX": f"{tmp}/pycache", "PROV_TRACE_CACHE_DIR": f"{tmp}/prov-trace-cache"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        trace = Path(tmp) / "t.msgpack"

        def command(variant: str) -> list[str]:
            if variant == "python":
                return [py, script]
            return [py, "-m", "prov_trace", "run", "-q", "-o", str(trace), "--report", f"{tmp}/r.md",
                    *OPTIONS[variant], script]

        def run(variant: str) -> tuple[float, float, float | None]:
            wall, cpu, _ = run_once(command(variant), env, tmp)
            return wall, cpu, (probe_seconds(trace) if variant != "python" else None)

        for v in variants:  # warm-up: disk caches, pyc files
            run(v)
        results: dict[str, list[tuple[float, float, float | None]]] = {v: [] for v in variants}
        for i in range(args.rounds):
            order = variants[i % len(variants):] + variants[:i % len(variants)]
            for v in (order if i % 2 == 0 else order[::-1]):
                results[v].append(run(v))
            print(f"  round {i + 1}: " + ", ".join(f"{v} {results[v][-1][0]:.2f}s" for v in variants), flush=True)
    base = results[variants[0]]
    print()
    for v in variants:
        rows = results[v]
        ratios = [r[0] / b[0] - 1 for r, b in zip(rows, base)]
        cpu_ratios = [r[1] / b[1] - 1 for r, b in zip(rows, base)]
        probes = [r[2] for r in rows if r[2] is not None]
        print(f"{v:<17} wall median {statistics.median(r[0] for r in rows):6.2f} s   paired {statistics.median(ratios):+5.1%} "
              f"({min(ratios):+.1%} .. {max(ratios):+.1%})   CPU median {statistics.median(r[1] for r in rows):6.2f} s "
              f"(paired {statistics.median(cpu_ratios):+.1%})"
              + (f"   probes {statistics.median(probes) * 1000:.0f} ms" if probes else ""))


if __name__ == "__main__":
    main()
