"""How the trace and the report grow with the graph: the reference MLP, a tiny GPT-2, the 24-layer encoder stack.

    python bench/scale.py [--models mlp,gpt2,encoder]

For each model, two fresh processes compile it once on the CPU with caches
defeated: one untraced, one traced (`prov-trace run`, the default backend).
Each child reports its compile wall time and its peak RSS. From the trace the
parent reads the post-grad node count, the trace size, the time spent inside
probes (as a share of the traced compile), and times building the report
model and rendering it as Markdown, HTML and JSON. Results go to stdout as a
Markdown table; docs/benchmarks.md quotes them with the machine they ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = {
    "mlp": str(REPO / "examples" / "reference_mlp.py") + ":SimpleMLP",
    "gpt2": str(REPO / "examples" / "gpt2_tiny.py") + ":build",
    "encoder": str(REPO / "examples" / "encoder_stack.py") + ":EncoderStack",
}


def child(mode: str, target: str, trace: str) -> None:
    """Runs in a fresh process: compile once, print {"compile_s", "rss_mb"} as JSON on the last line."""
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    from prov_trace import runner

    mt = runner.ModelTarget.parse(target)
    module = runner.load_module(mt.module)
    model = runner.build_model(module, mt.attr)
    inputs, _ = runner.example_inputs(model, module, None, "float32", "cpu")
    if mode == "traced":
        from prov_trace.probes.profiles import INDUCTOR_CPU
        from prov_trace.tracer.session import TraceSession
        from prov_trace.stream.writer import TraceWriter

        t0 = time.perf_counter()
        with TraceSession(TraceWriter(trace), INDUCTOR_CPU, log=lambda m: None):
            runner.run_model(model, inputs, train=False)
        elapsed = time.perf_counter() - t0
    else:
        t0 = time.perf_counter()
        runner.run_model(model, inputs, train=False)
        elapsed = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"compile_s": elapsed, "rss_mb": rss_mb}))


def _spawn(mode: str, target: str, trace: str) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, target, trace],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure(name: str, target: str, workdir: str) -> dict:
    from prov_trace.report import html, jsonout, markdown
    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace

    trace = os.path.join(workdir, f"{name}.msgpack")
    untraced = _spawn("untraced", target, trace)
    traced = _spawn("traced", target, trace)
    t0 = time.perf_counter()
    tr = read_trace(trace)
    model = build(tr)
    t_build = time.perf_counter() - t0
    times = {}
    for fmt, render in (("md", markdown.render), ("html", html.render), ("json", jsonout.render)):
        t = time.perf_counter()
        render(model)
        times[fmt] = t_build + time.perf_counter() - t
    probe_s = sum(r.get("probe_ns", 0) for r in tr.records if r.get("kind") == "probe") / 1e9
    nodes = sum(len(g["stages"]["post_grad"]["objects"]) for g in model["graphs"])
    return {
        "model": name, "post_grad_nodes": nodes, "trace_kb": os.path.getsize(trace) / 1024,
        "bytes_per_node": os.path.getsize(trace) / max(nodes, 1),
        "compile_untraced_s": untraced["compile_s"], "compile_traced_s": traced["compile_s"],
        "probe_share": probe_s / traced["compile_s"],
        "rss_untraced_mb": untraced["rss_mb"], "rss_traced_mb": traced["rss_mb"],
        "report_md_s": times["md"], "report_html_s": times["html"], "report_json_s": times["json"],
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(*sys.argv[2:5])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,gpt2,encoder", help="comma-separated: " + ", ".join(MODELS))
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in args.models.split(","):
            if name == "gpt2":
                try:
                    import transformers  # noqa: F401
                except ImportError:
                    print("skipping gpt2: transformers is not installed", file=sys.stderr)
                    continue
            rows.append(measure(name, MODELS[name], d))
            print(f"measured {name}", file=sys.stderr, flush=True)
    cols = ["model", "post_grad_nodes", "trace_kb", "bytes_per_node", "compile_untraced_s", "compile_traced_s",
            "probe_share", "rss_untraced_mb", "rss_traced_mb", "report_md_s", "report_html_s", "report_json_s"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        cells = []
        for c in cols:
            v = r[c]
            cells.append(f"{v:.1%}" if c == "probe_share" else f"{v:.2f}" if isinstance(v, float) else str(v))
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
