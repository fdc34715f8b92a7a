"""How the HTML report behaves in a real headless Chromium on large graphs: load, first paint, clicks.

    python bench/html_views.py [--rounds 5] [--models encoder,gpt2] [--keep DIR]

For each model it traces one compile with `prov-trace run` (or reuses DIR's trace),
writes the HTML report, and opens it in Chromium with `#selftest`, which times, in
the page: the script's end (``ready_ms``, from navigation start: HTML parsed and
the page's script run), the first contentful paint, opening each file view, and a
click on every marked source line and every kernel of the generated code (each
click's handler plus the layout it forces). Medians over the rounds; the numbers
and the command go in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import html as _html
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MODELS = {"mlp": "examples/reference_mlp.py:SimpleMLP", "encoder": "examples/encoder_stack.py:EncoderStack",
          "gpt2": "examples/gpt2_tiny.py:build", "bert": "examples/bert_tiny.py:build"}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def selftest(page: Path) -> dict:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        sys.exit("chromium is not installed: apt-get install -y chromium")
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
        out = subprocess.run([exe, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri() + "#selftest"],
                             capture_output=True, text=True, timeout=600)
    m = re.search(r'<pre id="selftest-result">(.*?)</pre>', out.stdout, re.S)
    if not m:
        sys.exit(f"no self-test result from {page}: {out.stderr[-1500:]}")
    return json.loads(_html.unescape(m.group(1)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="encoder,gpt2")
    ap.add_argument("--keep", help="a directory to keep (and reuse) the traces and pages in")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="prov-trace-html-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.models.split(","):
        d = work / name
        d.mkdir(exist_ok=True)
        trace, page = d / "t.msgpack", d / "report.html"
        if not trace.exists():
            subprocess.run([sys.executable, "-m", "prov_trace", "run", str(REPO / MODELS[name]), "-o", str(trace),
                            "--no-report"], cwd=d, check=True, env={**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": "1"})
        subprocess.run([sys.executable, "-m", "prov_trace", "report", str(trace), "-o", str(page)], check=True)
        import prov_trace

        model = prov_trace.load(trace).model
        post = sum(len(g["stages"]["post_grad"]["objects"]) for g in model["graphs"])
        lineage = sum(len(g["lineage"]["nodes"]) for g in model["graphs"])
        runs = [selftest(page) for _ in range(args.rounds)]
        t = [r["timing"] for r in runs]

        def med(key: str) -> float:
            vals = [x[key] for x in t if x.get(key) is not None]
            return statistics.median(vals) if vals else float("nan")

        rows.append((name, page.stat().st_size, post, lineage, len(runs[0]["lines"]), len(runs[0]["code"]),
                     med("first-contentful-paint"), med("ready_ms"), med("open_max_ms"), med("click_median_ms"),
                     max(x["click_max_ms"] for x in t)))
    print(f"{'model':<8} {'page':>9} {'post-grad':>9} {'lineage':>7} {'lines':>5} {'kernels':>7} "
          f"{'first paint':>11} {'ready':>7} {'open file':>9} {'click med':>9} {'click max':>9}")
    for r in rows:
        print(f"{r[0]:<8} {r[1] / 1e6:>7.2f}MB {r[2]:>9} {r[3]:>7} {r[4]:>5} {r[5]:>7} {r[6]:>9.0f}ms {r[7]:>5.0f}ms "
              f"{r[8]:>7.0f}ms {r[9]:>7.1f}ms {r[10]:>7.1f}ms")
    print(f"(median of {args.rounds} rounds; click max over all rounds; traces and pages in {work})")


if __name__ == "__main__":
    main()
