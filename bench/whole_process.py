"""The cost a user sees: `prov-trace run script.py` against `python script.py`, from start to exit.

    python bench/whole_process.py [--rounds 12] [--scripts mlp,encoder] [--backend auto]

Paired and interleaved: each round runs the script untraced and traced, in an
order that alternates round by round, after one warm-up pair. Both get
TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 (prov-trace sets it anyway: a cache hit
would skip the stages it traces), so both compile for real; prov-trace's own cache
(inject's rewrites, PROV_TRACE_CACHE_DIR) is in the temp dir, filled by the warm-up. Reported per
script: the median wall time of each, the median of the per-round traced /
untraced ratios (the paired overhead), and the processes' CPU time.

Phases of the traced runs, measured in the process (PROV_TRACE_PHASES, written
by `prov_trace.api`): interpreter start-up to prov-trace imported; its set-up
(profile choice, the tracer started); the program itself, with its compile span
(first to last probe record, from the trace's own timestamps); the report built
and written; and the exit after it (the process's end as the parent saw it).
Each phase is the time from the mark before it. The untraced column comes from
--baseline-runs more runs of the script through bench/scripts/marked.py (runpy,
marking the program's start and end): start-up, the program, and the exit, where
torch's own shutdown (its compile workers) takes about as long traced or not.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = {"mlp": REPO / "bench" / "scripts" / "compile_mlp.py", "encoder": REPO / "bench" / "scripts" / "compile_encoder.py"}


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(cmd: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds, and the wall-clock time it ended."""
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True)
    wall, end = time.perf_counter() - t0, time.time()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    return wall, _children_cpu() - cpu0, end


def phases(path: Path, ended: float) -> dict[str, float]:
    """Seconds per phase of one traced run, from its marks and its trace: each mark's time since the one before."""
    data = json.loads(path.read_text())
    marks = sorted(data["marks"], key=lambda m: m[1])
    out = {}
    start = data.get("process_start")
    previous = start if start else marks[0][1]
    for name, t in marks if start else marks[1:]:
        out[f"to {name}"] = t - previous
        previous = t
        if name == "program ended" and data.get("trace"):
            sys.path.insert(0, str(REPO))
            from prov_trace.stream.reader import read_trace

            trace = read_trace(data["trace"])
            probes = [r["t_ns"] for r in trace.records if r.get("kind") == "probe"]
            if probes:
                out["  of which the compile span"] = (max(probes) - min(probes)) / 1e9
    out["to the process's exit"] = ended - previous
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--scripts", default="mlp,encoder")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--baseline-runs", type=int, default=3, help="untraced runs that mark their phases (default 3)")
    args = ap.parse_args()
    # The cases run in temp dirs: a relative --python (.venv311/bin/python) is made absolute here,
    # not resolved (a venv's python is a symlink whose target has no venv).
    found = shutil.which(args.python)
    if found is None:
        sys.exit(f"--python {args.python}: no such interpreter; give a path or a name on PATH")
    py = os.path.abspath(found)
    print(f"python {sys.version.split()[0]} ({py}), rounds {args.rounds}, backend {args.backend}")
    with tempfile.TemporaryDirectory(prefix="prov-trace-whole-") as tmp:
        env = {**os.environ, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1", "PYTHONPATH": str(REPO),
               # Bytecode caches on for both sides, kept in the temp dir: an environment with
               # PYTHONDONTWRITEBYTECODE=1 (these machines set it) and an editable install, which has no
               # __pycache__, would otherwise charge prov-trace ~110 ms a run for compiling its own modules,
               # a cost no installed copy has.
               "PYTHONPYCACHEPREFIX": f"{tmp}/pycache",
               # prov-trace's own cache (inject's rewrites) in the temp dir too, filled by the warm-up run, as
               # a user's is by their first run.
               "PROV_TRACE_CACHE_DIR": f"{tmp}/prov-trace-cache"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for name in args.scripts.split(","):
            script = str(SCRIPTS[name])
            plain = [py, script]
            traced = [py, "-m", "prov_trace", "run", "-q", "--backend", args.backend, "-o", f"{tmp}/t.msgpack",
                      "--report", f"{tmp}/r.md", script]
            phase_file = Path(tmp) / "phases.json"
            tenv = {**env, "PROV_TRACE_PHASES": str(phase_file)}
            run_once(plain, env, tmp), run_once(traced, tenv, tmp)  # warm-up pair: disk caches, pyc files
            walls = {"python": [], "prov-trace": []}
            cpus = {"python": [], "prov-trace": []}
            ratios, all_phases = [], []
            for i in range(args.rounds):
                order = (("python", plain, env), ("prov-trace", traced, tenv))
                for label, cmd, e in (order if i % 2 == 0 else order[::-1]):
                    wall, cpu, ended = run_once(cmd, e, tmp)
                    walls[label].append(wall)
                    cpus[label].append(cpu)
                    if label == "prov-trace":
                        all_phases.append(phases(phase_file, ended))
                ratios.append(walls["prov-trace"][-1] / walls["python"][-1])
                print(f"  {name} round {i + 1}: python {walls['python'][-1]:.2f}s, prov-trace "
                      f"{walls['prov-trace'][-1]:.2f}s ({ratios[-1] - 1:+.1%})", flush=True)
            med = {k: statistics.median(v) for k, v in walls.items()}
            cmed = {k: statistics.median(v) for k, v in cpus.items()}
            print(f"\n{name}: median wall python {med['python']:.2f} s, prov-trace {med['prov-trace']:.2f} s "
                  f"({med['prov-trace'] / med['python'] - 1:+.1%}); paired median {statistics.median(ratios) - 1:+.1%} "
                  f"(range {min(ratios) - 1:+.1%} .. {max(ratios) - 1:+.1%}); CPU python {cmed['python']:.2f} s, "
                  f"prov-trace {cmed['prov-trace']:.2f} s ({cmed['prov-trace'] / cmed['python'] - 1:+.1%})")
            # The untraced side's phases: a few runs through a runner that marks the program's start and end.
            base_file = Path(tmp) / "untraced-phases.json"
            marked = [py, str(REPO / "bench" / "scripts" / "marked.py"), script]
            base = []
            for _ in range(args.baseline_runs):
                base.append(phases(base_file, run_once(marked, {**env, "PROV_TRACE_PHASES": str(base_file)}, tmp)[2]))
            print(f"  phases of the traced run (median of {len(all_phases)}), and of {len(base)} untraced runs "
                  "through bench/scripts/marked.py:")
            for key in all_phases[0]:
                vals = [p[key] for p in all_phases if key in p]
                line = f"    {key:<38} {statistics.median(vals) * 1000:9.0f} ms"
                bkey = {"to prov-trace imported": "to runner started"}.get(key, key)
                if base and bkey in base[0]:
                    line += f"   untraced {statistics.median(p[bkey] for p in base) * 1000:9.0f} ms"
                print(line)
            print()


if __name__ == "__main__":
    main()
