"""The cost a user sees, counted in instructions: `prov-trace run script.py` against `python script.py`.

    python bench/instructions.py [--scripts mlp,encoder] [--cases plain,traced,no-report] [--backend auto]

Time on these shared 2-core VMs cannot resolve a few percent of a whole process (the same command's wall
time ranges ±15%), and their VMs expose no hardware counters (`perf stat` says "not supported"). Valgrind's
callgrind counts the instructions a process executes instead: the same binary on the same inputs gives
the same count whatever else the machine is doing. Each case runs once under
`valgrind --tool=callgrind`; the count is the main process's instructions (Ir), from its start to its exit:

  plain        python SCRIPT
  traced       prov-trace run SCRIPT                 (trace and Markdown report)
  no-report    prov-trace run --no-report SCRIPT     (trace only: traced - no-report is the report)
  empty        python EMPTY.py, and prov-trace run EMPTY.py (prov-trace's own start-up and exit, no torch)

The C++ compiler Inductor starts (g++) runs natively and is not counted, on either side: both sides get
TORCHINDUCTOR_COMPILE_THREADS=1, so every Python-side step of the compile runs in the counted process, and
the same C++ is compiled traced or not. Both sides also get PYTHONHASHSEED=0, caches defeated,
TORCHINDUCTOR_CPP_MARCH=x86-64-v3 and ATEN_CPU_CAPABILITY=avx2 (valgrind cannot run the AVX-512 code
Inductor and ATen would otherwise use on this CPU), OMP_NUM_THREADS=1 (valgrind runs threads one at a
time, and OpenMP workers spinning while they wait would add a count set by its scheduling), and a
bytecode cache warmed by one untimed run of each command (an editable install under
PYTHONDONTWRITEBYTECODE=1 would otherwise charge prov-trace for compiling its own modules).

Instructions are not time: a cache miss costs more than an add. The count answers "how much more work
does the process do", which the timed benchmarks (bench/whole_process.py) cannot resolve here; they
remain the measure of time. Under callgrind the MLP takes about 4 minutes a case and the encoder about
12; run it with --jobs 2 on an otherwise idle machine, or in the background: the counts do not depend on load.
With --cache-sim callgrind also simulates the caches (first level and last level, the machine's sizes) and
counts their misses: what a different memory layout would cost shows there, not in the instructions.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {"mlp": REPO / "bench" / "scripts" / "compile_mlp.py",
           "encoder": REPO / "bench" / "scripts" / "compile_encoder.py"}
CASES = ("plain", "traced", "no-report", "empty")


#: Callgrind's cache-simulation events: instruction fetches (Ir), data reads (Dr) and writes (Dw), and the
#: misses of each in the first-level (I1/D1) and last-level (IL/DL) caches it simulates.
CACHE_EVENTS = ("Ir", "I1mr", "ILmr", "Dr", "D1mr", "DLmr", "Dw", "D1mw", "DLmw")


def callgrind(cmd: list[str], env: dict[str, str], cwd: str, out: Path,
              cache_sim: bool = False) -> tuple[dict[str, int], float]:
    """The events (Ir, and with `cache_sim` the cache misses) of the main process of `cmd` under
    callgrind, and the wall seconds it took."""
    t0 = time.perf_counter()
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                           "--collect-jumps=no", *(["--cache-sim=yes"] if cache_sim else []), *cmd],
                          env=env, cwd=cwd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode} under callgrind:\n{proc.stderr[-3000:]}")
    text = out.read_text(errors="replace")
    events = re.search(r"^events:\s*(.+)$", text, re.M)
    summary = re.search(r"^summary:\s*(.+)$", text, re.M)
    if events is None or summary is None:
        raise RuntimeError(f"callgrind wrote no events or summary line in {out}")
    return dict(zip(events.group(1).split(), map(int, summary.group(1).split()))), wall


def commands(py: str, script: str, tmp: str, backend: str) -> dict[str, list[str]]:
    run = [py, "-m", "prov_trace", "run", "-q", "--backend", backend, "-o", f"{tmp}/t.msgpack"]
    return {"plain": [py, script], "traced": [*run, "--report", f"{tmp}/r.md", script],
            "no-report": [*run, "--no-report", script]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scripts", default="mlp", help="comma-separated: mlp, encoder (default mlp)")
    ap.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    ap.add_argument("--backend", default="auto", help="prov-trace's --backend (auto: monitoring on 3.12+, inject on 3.11)")
    ap.add_argument("--python", default=sys.executable, help="the interpreter both sides run on")
    ap.add_argument("--jobs", type=int, default=1, help="cases run at once (each keeps one core busy)")
    ap.add_argument("--cache-sim", action="store_true",
                    help="also simulate the caches (callgrind --cache-sim=yes, about twice as slow): misses per case")
    ap.add_argument("--json", metavar="FILE", help="also write every count to FILE")
    ap.add_argument("--keep", metavar="DIR", help="also keep callgrind's output of each case in DIR "
                    "(SCRIPT-CASE.callgrind, for callgrind_annotate)")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed: apt-get install valgrind (callgrind counts the instructions)")
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        sys.exit(f"unknown case {unknown[0]}: choose from {', '.join(CASES)}")
    # The cases run in temp dirs: a relative --python (.venv311/bin/python) is made absolute here,
    # not resolved (a venv's python is a symlink whose target has no venv).
    found = shutil.which(args.python)
    if found is None:
        sys.exit(f"--python {args.python}: no such interpreter; give a path or a name on PATH")
    py = os.path.abspath(found)
    version = subprocess.run([py, "-c", "import sys, torch; print(sys.version.split()[0], torch.__version__)"],
                             capture_output=True, text=True).stdout.strip()
    print(f"python, torch: {version} ({py}); backend {args.backend}; cases {', '.join(cases)}", flush=True)
    results: dict[str, dict[str, int]] = {}
    with tempfile.TemporaryDirectory(prefix="prov-trace-instr-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1",
               "PYTHONHASHSEED": "0", "PYTHONPATH": str(REPO), "PYTHONPYCACHEPREFIX": f"{tmp}/pycache",
               # Inductor compiles its C++ with -march=native and for the best vector ISA the CPU reports;
               # valgrind 3.19 cannot run AVX-512 (the encoder's first call died with SIGILL in a generated
               # kernel). x86-64-v3 (AVX2) and ATen's AVX2 kernels on both sides.
               "TORCHINDUCTOR_CPP_MARCH": "x86-64-v3", "ATEN_CPU_CAPABILITY": "avx2",
               # One OpenMP thread: valgrind runs a process's threads one at a time, and OpenMP's workers
               # spin while they wait, so a parallel kernel (the encoder's first call) would add a count
               # that depends on valgrind's scheduling, not on the program.
               "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        empty = Path(tmp) / "empty.py"
        empty.write_text("")
        targets = [(name, SCRIPTS.get(name)) for name in args.scripts.split(",") if name]
        for name, script in targets:
            if script is None:
                sys.exit(f"unknown script {name}: choose from {', '.join(SCRIPTS)}")
        if "empty" in cases:
            targets.append(("empty", empty))
        jobs: list[tuple[str, str, list[str], str]] = []
        for name, script in targets:
            wanted = ("plain", "no-report") if name == "empty" else cases
            for case in wanted:
                if case == "empty":
                    continue
                cwd = f"{tmp}/{name}-{case}"
                os.makedirs(cwd)
                jobs.append((name, case, commands(py, str(script), cwd, args.backend)[case], cwd))
        for _, _, cmd, cwd in jobs:  # warm the bytecode cache, untimed and uncounted
            subprocess.run(cmd, env=env, cwd=cwd, capture_output=True)

        failed: list[str] = []

        def one(job: tuple[str, str, list[str], str]) -> tuple[str, str, dict[str, int] | None, float]:
            name, case, cmd, cwd = job
            try:
                ev, wall = callgrind(cmd, env, cwd, Path(cwd) / "callgrind.out", args.cache_sim)
            except RuntimeError as exc:  # said at once, not when the other cases are done
                print(f"  {name} {case}: failed: {exc}", file=sys.stderr, flush=True)
                failed.append(f"{name} {case}")
                return name, case, None, 0.0
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                shutil.copyfile(Path(cwd) / "callgrind.out", Path(args.keep) / f"{name}-{case}.callgrind")
            misses = "".join(f", {k} {ev[k]:,}" for k in CACHE_EVENTS[1:] if k in ev)
            print(f"  {name} {case}: {ev['Ir']:,} instructions{misses} ({wall:.0f} s under callgrind)", flush=True)
            return name, case, ev, wall

        events: dict[str, dict[str, dict[str, int]]] = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for name, case, ev, _ in pool.map(one, jobs):
                if ev is None:
                    continue
                results.setdefault(name, {})[case] = ev["Ir"]
                events.setdefault(name, {})[case] = ev

    print()
    if failed:
        print(f"failed under callgrind: {', '.join(failed)} (each one's error is above)")
    for name, by_case in results.items():
        plain = by_case.get("plain")
        if name == "empty":
            if plain and "no-report" in by_case:
                extra = by_case["no-report"] - plain
                print(f"empty script: python {plain:,}, prov-trace run {by_case['no-report']:,} instructions: "
                      f"prov-trace's start-up and exit add {extra:,}")
            continue
        print(f"{name}:")
        for case in ("plain", "no-report", "traced"):
            if case in by_case:
                ratio = f"  {by_case[case] / plain - 1:+.2%} of python" if plain and case != "plain" else ""
                print(f"  {case:<10} {by_case[case]:>16,}{ratio}")
        if "traced" in by_case and "no-report" in by_case:
            rep = by_case["traced"] - by_case["no-report"]
            print(f"  the report: {rep:,}" + (f" ({rep / plain:.2%} of python)" if plain else ""))
        if plain and "no-report" in by_case:
            print(f"  tracing, start-up and exit: {by_case['no-report'] - plain:,} ({by_case['no-report'] / plain - 1:+.2%})")
        if args.cache_sim and "plain" in events.get(name, {}):
            base = events[name]["plain"]
            for case, ev in events[name].items():
                if case != "plain":
                    print(f"  {case} against plain, misses: " + ", ".join(
                        f"{k} {ev[k] - base[k]:+,} ({ev[k] / base[k] - 1:+.2%})" for k in CACHE_EVENTS[1:] if base.get(k)))
    if args.json:
        Path(args.json).write_text(json.dumps({"python_torch": version, "backend": args.backend, "counts": results,
                                               "events": events}, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
