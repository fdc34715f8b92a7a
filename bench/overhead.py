"""What tracing costs: compile wall time per backend, against no tracer and against monkey-patching.

    python bench/overhead.py [--runs N] [--model mlp|encoder|all] [--cases A,B] [--no-micro] [--json FILE]
    python bench/overhead.py --table FILE      # the tables of a saved --json run, again

Every case runs in a fresh process that imports torch, builds the model, then
times (wall clock, and CPU time of the process and its reaped children, i.e.
the C++ compiler) only ``torch.compile(model)`` plus the first call (under ``no_grad``,
caches defeated, the way ``prov-trace run`` does it), including starting and
stopping the tracer. The cases are interleaved: run 1 of every case, then run 2
of every case, and so on, each round starting at a different case, so drift in
the machine's load spreads over all of them. Cases:

    untraced      no tracer
    monitoring    prov-trace, sys.monitoring backend (3.12+)
    inject        prov-trace, inject backend (3.11-3.13)
    settrace      prov-trace, settrace backend
    patch         the same probes captured by monkey-patching (bench/patch_capture.py)

"paired" is the median, over rounds, of a case's CPU time over the untraced
run of the same round: it cancels the drift of the machine's speed between
rounds. "p. self" is the same for the process's own CPU time, without the C++
compiler it runs: the tracer can't change the compiler's work (the generated code
is the same), but its time varies by a second between identical runs. "in gc" is
the time the host's garbage collector ran inside the timed span, and "gcs" how many
collections it made (medians): what the tracer's allocations cost the host beyond
its own time. "in probes" is the sum of the records' probe_ns: the time the probes spent
snapshotting. "in tracer" is all the time spent in the tracer's own code: its
start and stop, resolving and installing targets as their modules are imported
(for inject, rewriting the bytecode), and every event, probes included, in CPU
time of the thread (for the patch case: installing and removing the patches,
not the imports of the target modules, which the compile makes anyway, plus
its probes' time; its wrappers' own binding of arguments is not counted). "in probes" is wall time (the
records' own field), "in tracer" thread CPU time: both are measured inside the
process, so they are far less hostage to the machine's load than the totals.
Not in them: event delivery before the tracer's code runs (the sys.monitoring
or settrace callback, the injected call), and settrace's filter calls for every
non-target frame, which is what makes settrace slow.

Then a microbenchmark, in one process: ns per call of a function that is NOT a
target while each backend is active (and of one that is, with a no-op dispatch),
against no tracer.

Results go to stdout (and with --json, to a file); docs/benchmarks.md holds a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = {
    "mlp": (REPO / "examples" / "reference_mlp.py", "SimpleMLP"),
    "encoder": (REPO / "examples" / "encoder_stack.py", "EncoderStack"),
}
BACKEND_CASES = ("monitoring", "inject", "settrace")


def available_cases() -> list[str]:
    sys.path.insert(0, str(REPO))
    from prov_trace.tracer.core import BACKENDS

    cases = ["untraced"]
    cases += [b for b in BACKEND_CASES if b in BACKENDS and BACKENDS[b].unavailable_reason() is None]
    return cases + ["patch"]


# --- one case, in its own process ------------------------------------------------------------


def run_case(case: str, model_name: str, trace_path: str) -> dict:
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    import torch  # noqa: F401  (imported before the clock starts, in every case)

    from prov_trace import runner

    runner.defeat_caches()
    path, attr = MODELS[model_name]
    module = runner.load_module(str(path))
    model = runner.build_model(module, attr)
    inputs, _ = runner.example_inputs(model, module, None, "float32", "cpu")
    model.eval()
    import gc

    gc.collect()
    gc_ns = [0, 0, 0]  # total, collections, start of the current one

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            gc_ns[2] = time.perf_counter_ns()
        else:
            gc_ns[0] += time.perf_counter_ns() - gc_ns[2]
            gc_ns[1] += 1

    gc.callbacks.append(on_gc)
    trace_bytes = records = own = None
    c0 = _cpu_seconds()
    k0 = os.times()
    t0 = time.perf_counter()
    if case == "untraced":
        runner.run_model(model, inputs, train=False)
    elif case == "patch":
        sys.path.insert(0, str(REPO / "bench"))
        from patch_capture import PatchCapture

        from prov_trace.probes.profiles import INDUCTOR_CPU
        from prov_trace.stream.writer import TraceWriter

        import importlib

        for hook in INDUCTOR_CPU.hooks:  # the compile imports these anyway: not counted as the capture's own time
            importlib.import_module(hook.target.split(":")[0])
        writer = TraceWriter(trace_path)
        cap = PatchCapture(writer, INDUCTOR_CPU)
        s0 = time.thread_time()
        cap.install()
        own = time.thread_time() - s0
        try:
            runner.run_model(model, inputs, train=False)
        finally:
            s0 = time.thread_time()
            cap.uninstall()
            own += time.thread_time() - s0
        records = writer.records_written
        if cap.missed:
            print(f"patch capture missed: {cap.missed}", file=sys.stderr)
    else:
        from prov_trace.probes.profiles import INDUCTOR_CPU
        from prov_trace.tracer.session import TraceSession
        from prov_trace.stream.writer import TraceWriter

        class TimedSession(TraceSession):
            """Adds up the time spent in the tracer's own code: start, stop, late installs, every event."""

            own_ns = 0

            def _dispatch(self, *a):
                t = time.thread_time_ns()
                try:
                    return super()._dispatch(*a)
                finally:
                    TimedSession.own_ns += time.thread_time_ns() - t

            def _on_module_loaded(self, name):
                t = time.thread_time_ns()
                try:
                    return super()._on_module_loaded(name)
                finally:
                    TimedSession.own_ns += time.thread_time_ns() - t

        writer = TraceWriter(trace_path)
        session = TimedSession(writer, INDUCTOR_CPU, backend=case, log=lambda msg: None)
        s0 = time.thread_time_ns()
        session.start()
        TimedSession.own_ns += time.thread_time_ns() - s0
        try:
            runner.run_model(model, inputs, train=False)
        finally:
            s0 = time.thread_time_ns()
            session.stop("ok")
            TimedSession.own_ns += time.thread_time_ns() - s0
        records = writer.records_written
        own = TimedSession.own_ns / 1e9
    wall = time.perf_counter() - t0
    cpu = _cpu_seconds() - c0
    k1 = os.times()
    children = (k1.children_user + k1.children_system) - (k0.children_user + k0.children_system)
    gc.callbacks.remove(on_gc)
    probe_s = None
    if case != "untraced":
        trace_bytes = os.path.getsize(trace_path)
        probe_s = _probe_seconds(trace_path)
    return {"case": case, "model": model_name, "wall_s": wall, "cpu_s": cpu, "trace_bytes": trace_bytes,
            "records": records, "probe_s": probe_s, "children_cpu_s": children, "own_s": own, "gc_s": gc_ns[0] / 1e9, "gc_collections": gc_ns[1]}


def _probe_seconds(trace_path: str) -> float:
    """The time the probes themselves took (the sum of the records' probe_ns), measured inside the process."""
    import msgpack

    with open(trace_path, "rb") as f:
        return sum(r.get("probe_ns") or 0 for r in msgpack.Unpacker(f, raw=False) if r.get("kind") == "probe") / 1e9


def _cpu_seconds() -> float:
    """CPU time of this process and its reaped children (the C++ compiler): less hostage to other load than wall time."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# --- the microbenchmark ----------------------------------------------------------------------


def _not_a_target(x):
    return x


def _a_target(x):
    return x


def micro(calls: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """ns per call, for a non-target and for a target (no-op dispatch), per backend active."""
    sys.path.insert(0, str(REPO))
    from prov_trace.tracer.core import BACKENDS, choose

    def noop(code, phase, frame, retval):
        return None

    cases = ["none"] + [b for b in BACKEND_CASES if b in BACKENDS and BACKENDS[b].unavailable_reason() is None]
    out: dict[str, dict[str, list[float]]] = {c: {"non_target": [], "target": []} for c in cases}
    loop = range(calls)

    def time_calls(fn) -> float:
        t0 = time.perf_counter_ns()
        for _ in loop:
            fn(1)
        return (time.perf_counter_ns() - t0) / calls

    for rep in range(repeats):
        order = cases[rep % len(cases):] + cases[:rep % len(cases)]
        for case in order:
            backend = None
            if case != "none":
                backend, _ = choose(case, noop)
                backend.watch(_a_target.__code__, frozenset(("entry", "return")), _a_target)
            try:
                out[case]["non_target"].append(time_calls(_not_a_target))
                out[case]["target"].append(time_calls(_a_target) if case != "none" else time_calls(_not_a_target))
            finally:
                if backend is not None:
                    backend.stop()
    return out


# --- the driver ------------------------------------------------------------------------------


def _spread(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def compile_bench(models: list[str], runs: int, warmup: int, env: dict, only: list[str] | None = None) -> list[dict]:
    cases = [c for c in available_cases() if not only or c in only]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="prov-trace-bench-") as tmp:
        for model in models:
            print(f"\n== {model}: {runs} runs x {len(cases)} cases ({', '.join(cases)}), interleaved"
                  + (f", after {warmup} untimed warm-up run(s)" if warmup else ""), flush=True)
            schedule = [(-1 - w, "untraced") for w in range(warmup)]
            for r in range(runs):
                k = r % len(cases)
                schedule += [(r, c) for c in cases[k:] + cases[:k]]
            for r, case in schedule:
                trace = os.path.join(tmp, f"{model}-{case}-{r}.msgpack")
                cache = tempfile.mkdtemp(prefix="inductor-cache-", dir=tmp)
                proc = subprocess.run(
                    [sys.executable, __file__, "--case", case, "--model", model, "--trace", trace],
                    env={**env, "TORCHINDUCTOR_CACHE_DIR": cache}, capture_output=True, text=True,
                )
                if proc.returncode != 0:
                    raise SystemExit(f"case {case} ({model}) failed:\n{proc.stderr[-3000:]}")
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                res["run"] = r
                label = "warm-up" if r < 0 else f"run {r + 1}"
                print(f"  {label:8} {case:11} {res['wall_s']:8.2f} s wall {res['cpu_s']:8.2f} s cpu"
                      + (f"  {res['trace_bytes']:>10,} B" if res["trace_bytes"] else ""), flush=True)
                if os.path.exists(trace):
                    os.unlink(trace)
                if r >= 0:
                    results.append(res)
    return results


def _self_cpu(r: dict) -> float | None:
    """The process's own CPU time, without its children's (None for runs saved before it was recorded)."""
    return r["cpu_s"] - r["children_cpu_s"] if r.get("children_cpu_s") is not None else None


def print_compile_table(results: list[dict]) -> None:
    for model in dict.fromkeys(r["model"] for r in results):
        rows = [r for r in results if r["model"] == model]
        n = len([r for r in rows if r["case"] == "untraced"])
        print(f"\n{model}: compile + first call, seconds over {n} runs (median, min-max, median vs untraced's median)")
        print(f"  {'case':11} {'wall':>8} {'min-max':>13} {'vs untraced':>11}   {'cpu':>8} {'min-max':>13} "
              f"{'vs untraced':>11} {'paired':>7} {'p. self':>7} {'trace size':>12} {'in probes':>10} {'in tracer':>10} {'= of cpu':>8} "
              f"{'in gc':>8} {'gcs':>5}")
        base = {k: statistics.median(r[k] for r in rows if r["case"] == "untraced") for k in ("wall_s", "cpu_s")}
        for case in dict.fromkeys(r["case"] for r in rows):
            line = f"  {case:11}"
            for key in ("wall_s", "cpu_s"):
                med, lo, hi = _spread([r[key] for r in rows if r["case"] == case])
                ratio = f"{(med / base[key] - 1) * 100:+.1f}%" if case != "untraced" else "-"
                line += f" {med:8.2f} {lo:6.2f}-{hi:<6.2f} {ratio:>11}  "
            if case != "untraced":
                # Paired: this case's cpu time over the untraced run of the same round, median over rounds.
                base_by_run = {r["run"]: r["cpu_s"] for r in rows if r["case"] == "untraced"}
                paired = [r["cpu_s"] / base_by_run[r["run"]] - 1 for r in rows
                          if r["case"] == case and r["run"] in base_by_run]
                line += f"{statistics.median(paired) * 100:+7.1f}%" if paired else f"{'-':>8}"
                # The same for the process alone, without the C++ compiler it runs, whose work the tracer
                # can't change (it compiles the same generated code) but whose time varies by a second.
                self_by_run = {r["run"]: _self_cpu(r) for r in rows if r["case"] == "untraced"}
                paired_self = [_self_cpu(r) / self_by_run[r["run"]] - 1 for r in rows
                               if r["case"] == case and self_by_run.get(r["run"]) and _self_cpu(r) is not None]
                line += f"{statistics.median(paired_self) * 100:+7.1f}%" if paired_self else f"{'-':>8}"
            else:
                line += f"{'-':>8}{'-':>8}"
            sizes = [r["trace_bytes"] for r in rows if r["case"] == case and r["trace_bytes"]]
            line += f" {int(statistics.median(sizes)):>10,} B" if sizes else f" {'-':>12}"
            probes = [r["probe_s"] for r in rows if r["case"] == case and r.get("probe_s") is not None]
            line += f" {statistics.median(probes):8.3f} s" if probes else f" {'-':>10}"
            # The patch case's own_s is installing and removing the patches; its probes run outside that.
            owns = [r["own_s"] + (r.get("probe_s") or 0 if case == "patch" else 0)
                    for r in rows if r["case"] == case and r.get("own_s") is not None]
            if owns:
                line += f" {statistics.median(owns):8.3f} s {statistics.median(owns) / base['cpu_s'] * 100:7.2f}%"
            else:
                line += f" {'-':>10} {'-':>8}"
            gcs = [r for r in rows if r["case"] == case and r.get("gc_s") is not None]
            if gcs:
                line += (f" {statistics.median(r['gc_s'] for r in gcs):6.2f} s"
                         f" {int(statistics.median(r['gc_collections'] for r in gcs)):>5}")
            print(line)


def print_micro(res: dict, calls: int, repeats: int) -> None:
    none = statistics.median(res["none"]["non_target"])
    print(f"\nmicro: ns per call, {calls:,} calls x {repeats} interleaved repeats (median, min-max)")
    print(f"  {'backend active':15} {'non-target':>22} {'vs none':>9} {'target, no-op probe':>24}")
    for case, v in res.items():
        med, lo, hi = _spread(v["non_target"])
        tmed, tlo, thi = _spread(v["target"])
        target = "-" if case == "none" else f"{tmed:8.1f} ({tlo:.1f}-{thi:.1f})"
        print(f"  {case:15} {med:8.1f} ({lo:5.1f}-{hi:5.1f}) {med - none:+8.1f} {target:>24}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="timed runs per case (default 5)")
    ap.add_argument("--model", choices=("mlp", "encoder", "all"), default="mlp")
    ap.add_argument("--warmup", type=int, default=1, help="untimed untraced runs first, per model (default 1)")
    ap.add_argument("--compile-threads", default="1",
                    help="TORCHINDUCTOR_COMPILE_THREADS for every case (default 1: no compile worker pool, less noise)")
    ap.add_argument("--cases", metavar="A,B", help="only these cases (default: untraced, every backend available, patch)")
    ap.add_argument("--no-micro", action="store_true", help="skip the per-call microbenchmark")
    ap.add_argument("--micro-only", action="store_true", help="run only the microbenchmark")
    ap.add_argument("--micro-calls", type=int, default=200_000)
    ap.add_argument("--micro-repeats", type=int, default=9)
    ap.add_argument("--json", metavar="FILE", help="also write the raw results here")
    ap.add_argument("--table", metavar="FILE", help="print the tables of a --json file again, run nothing")
    # internal: one case in a child process
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.case:
        print(json.dumps(run_case(args.case, args.model, args.trace)))
        return

    if args.table:
        with open(args.table) as f:
            saved = json.load(f)
        print(f"python {saved['python']}; {saved['nproc']} CPUs: {saved['cpu']}")
        if saved.get("compile"):
            print_compile_table(saved["compile"])
        if saved.get("micro"):
            print_micro(saved["micro"], saved.get("micro_calls", 0), saved.get("micro_repeats", 0))
        return

    import platform

    print(f"python {platform.python_version()} ({sys.executable}); {os.cpu_count()} CPUs: {_cpu_model()}")
    try:
        import importlib.metadata as md

        print(f"torch {md.version('torch')}; cases here: {', '.join(available_cases())}; "
              f"TORCHINDUCTOR_COMPILE_THREADS={args.compile_threads}")
    except Exception:  # noqa: BLE001
        pass
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": str(args.compile_threads), "PYTHONUNBUFFERED": "1"}
    out: dict = {"python": platform.python_version(), "cpu": _cpu_model(), "nproc": os.cpu_count()}
    if not args.micro_only:
        models = ["mlp", "encoder"] if args.model == "all" else [args.model]
        started = time.time()
        only = [c.strip() for c in args.cases.split(",")] if args.cases else None
        results = compile_bench(models, args.runs, args.warmup, env, only)
        print_compile_table(results)
        print(f"\n(compile benchmark took {time.time() - started:.0f} s)")
        out["compile"] = results
    if not args.no_micro:
        res = micro(args.micro_calls, args.micro_repeats)
        print_micro(res, args.micro_calls, args.micro_repeats)
        out["micro"] = res
        out["micro_calls"], out["micro_repeats"] = args.micro_calls, args.micro_repeats
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
