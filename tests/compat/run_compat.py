#!/usr/bin/env python3
"""`make test-compat`: the end-to-end core on each extra torch release, each in its own venv.

For each release it builds (or reuses) a venv, installs that torch, then prov-trace with --no-deps
(so the venv's torch is never replaced), checks the torch it got, and runs the `compat` selection of
the test suite (tests/test_compat.py: the reference audit, the Inductor cross-check, a backward
graph and a graph break, each model compiled once). It then summarises the traces those tests wrote
into a release x stage table (docs/compat.md quotes it) and prints its wall time.

    python3 tests/compat/run_compat.py                    # the default releases below
    python3 tests/compat/run_compat.py 2.12.1@3.12        # any release@python; python is optional
    python3 tests/compat/run_compat.py --fresh            # rebuild the venvs even when they exist

Stdlib only: it runs with any python3. Environment:
  PROV_TRACE_COMPAT_HOME  where venvs, test dirs and results go (default: .compat/ in the checkout)
  PYENV_ROOT              where pyenv's Pythons are looked for (default: `pyenv root` or ~/.pyenv)
Exit status: 0 when every release passed, 1 when one failed, 2 for bad input (no such Python).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: (torch release, Pythons to try in order). The oldest supported release and the newest the
#: registry serves here (a pip constraint caps torch at 2.14.1 on these machines, CI's too).
#: 2.14.1 runs on 3.11: its cp311 wheel and CUDA libraries are on this machine's disk, so the venv
#: takes ~1.5 min instead of a ~2.6 GB download; 3.11 also puts the `inject` backend under test.
#: 2.10.0 is downloaded whatever the Python; it runs on 3.13, which puts the `sys.monitoring` backend
#: under test there and is CI's only run on 3.13 (the main suite runs on 3.12 and 3.11).
DEFAULT_RELEASES = (("2.10.0", ("3.13", "3.12", "3.11")), ("2.14.1", ("3.11", "3.12", "3.13")))
#: What prov-trace needs besides torch, and what the tests need (no hypothesis, no transformers:
#: the compat selection uses neither).
DEPS = ("msgpack>=1.0", "click>=8.1", "bytecode>=0.15", "pytest>=7")


def say(msg: str) -> None:
    print(f"test-compat: {msg}", flush=True)


def find_python(version: str) -> str | None:
    root = os.environ.get("PYENV_ROOT")
    if not root:
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            root = os.path.expanduser("~/.pyenv")
    found = sorted(glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", "python")))
    if found:
        return found[-1]
    return shutil.which(f"python{version}")


def pick_python(pythons: tuple[str, ...]) -> tuple[str, str] | None:
    for v in pythons:
        exe = find_python(v)
        if exe:
            return v, exe
    return None


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, **kw)


def torch_version(python: Path) -> str | None:
    proc = run([str(python), "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def build_venv(venv: Path, py_exe: str, release: str, fresh: bool) -> float:
    """Make `venv` hold torch==release and prov-trace (editable, --no-deps). Returns seconds spent."""
    t0 = time.monotonic()
    python = venv / "bin" / "python"
    marker = venv / ".compat-installed"
    if fresh and venv.exists():
        shutil.rmtree(venv)
    if marker.exists() and marker.read_text().strip() == release and (torch_version(python) or "").split("+")[0] == release:
        say(f"torch {release}: reusing {venv} (--fresh rebuilds it)")
    else:
        if venv.exists():
            shutil.rmtree(venv)
        say(f"torch {release}: creating {venv} with {py_exe}")
        run([py_exe, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        run([*pip, f"torch=={release}", *DEPS], check=True)
        marker.write_text(release + "\n")
    # prov-trace from this checkout, every time (the checkout may have changed); never its dependencies,
    # so the venv's torch stays the one under test.
    run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps", "-e", str(REPO)],
        check=True)
    got = torch_version(python)
    if (got or "").split("+")[0] != release:
        raise RuntimeError(f"the venv {venv} has torch {got}, not {release}")
    return time.monotonic() - t0


def run_tests(venv: Path, workdir: Path) -> tuple[int, float]:
    t0 = time.monotonic()
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.parent.mkdir(parents=True, exist_ok=True)  # pytest makes --basetemp itself, not its parents
    env = {**os.environ, "PROV_TRACE_COMPAT": "1", "PYTHONUNBUFFERED": "1"}
    env.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # two shared cores: no compile worker pool
    env.pop("PYTHONPATH", None)
    proc = run([str(venv / "bin" / "python"), "-m", "pytest", "-q", "-m", "compat", "-p", "no:cacheprovider",
                f"--basetemp={workdir}", "tests/test_compat.py"], cwd=REPO, env=env)
    return proc.returncode, time.monotonic() - t0


def summarize(venv: Path, workdir: Path, out: Path) -> dict | None:
    traces = {name: workdir / f"{name}0" / "t.msgpack" for name, _ in RUNS}
    have = [str(p) for p in traces.values() if p.exists()]
    if not have:
        return None
    proc = run([str(venv / "bin" / "python"), str(REPO / "tests" / "compat" / "summarize.py"), *have],
               capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        say(f"could not summarise the traces: {proc.stderr.strip()[-400:]}")
        return None
    data = json.loads(proc.stdout)
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return data


STAGES = ("source", "dynamo_graph", "export_graph", "pre_grad", "aot_graph", "post_grad", "ir_pre", "ir_post",
          "kernel_spec", "artifact")
RUNS = (("compat_mlp", "audit"), ("compat_train", "--train"), ("compat_graph_break", "graph break"),
        ("compat_aot_eager", "aot_eager --train"), ("compat_export", "export + AOTI"))


def stage_cell(g: dict, st: str) -> str:
    """Objects when the stage fired; ➖ off the compile's path (or a stage this path has no column for); else ⚠."""
    d = g["stages"].get(st)
    if d is not None and d["fired"]:
        return str(d["objects"])
    return "➖" if d is None or st in g.get("off_path", {}) else "⚠"


def table(results: list[dict]) -> str:
    """Markdown: one row per release x run x graph; each stage cell is `objects` when it fired, ➖ off the
    compile's path, else ⚠."""
    head = "| torch | Python (backend) | run | graph | " + " | ".join(STAGES) + " | cross-check |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for res in results:
        data = res.get("summary") or {}
        for key, run_name in RUNS:
            s = next((v for k, v in data.items() if f"/{key}0/" in k), None)
            if s is None:
                lines.append(f"| {res['release']} | {res['python']} | {run_name} | (no trace) |" + " |" * (len(STAGES) + 1))
                continue
            for g in s["graphs"]:
                cells = [stage_cell(g, st) for st in STAGES]
                lines.append(f"| {s['torch']} | {s['python']} ({s['backend']}) | {run_name} | {g['label']} | "
                             + " | ".join(cells) + f" | {'pass' if res['rc'] == 0 else 'see log'} |")
    return "\n".join(lines) + "\n"


def parse_release(text: str) -> tuple[str, tuple[str, ...]]:
    rel, _, py = text.partition("@")
    return rel, ((py,) if py else ("3.12", "3.13", "3.11"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("releases", nargs="*", metavar="RELEASE[@PYTHON]", help="e.g. 2.12.1@3.12 (default: %s)" %
                    " ".join(f"{r}@{p[0]}" for r, p in DEFAULT_RELEASES))
    ap.add_argument("--fresh", action="store_true", help="rebuild each venv even when it exists")
    args = ap.parse_args()
    releases = [parse_release(r) for r in args.releases] or list(DEFAULT_RELEASES)
    home = Path(os.environ.get("PROV_TRACE_COMPAT_HOME") or REPO / ".compat").resolve()
    (home / "results").mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    results = []
    for release, pythons in releases:
        picked = pick_python(pythons)
        if picked is None:
            say(f"error: no Python {' or '.join(pythons)} found for torch {release} (pyenv or python3.X on PATH)")
            return 2
        pyver, py_exe = picked
        venv = home / "venvs" / f"torch-{release}-py{pyver}"
        res = {"release": release, "python": pyver, "venv": str(venv), "rc": 1, "install_s": None, "tests_s": None}
        try:
            res["install_s"] = round(build_venv(venv, py_exe, release, args.fresh), 1)
        except (subprocess.CalledProcessError, RuntimeError, OSError) as exc:
            say(f"torch {release}: could not build the venv: {exc}")
            results.append(res)
            continue
        say(f"torch {release} (Python {pyver}): venv ready in {res['install_s']} s; running the compat tests")
        workdir = home / "runs" / f"torch-{release}"
        res["rc"], tests_s = run_tests(venv, workdir)
        res["tests_s"] = round(tests_s, 1)
        res["summary"] = summarize(venv, workdir, home / "results" / f"torch-{release}.json")
        say(f"torch {release}: tests {'passed' if res['rc'] == 0 else 'FAILED (exit %d)' % res['rc']} in {res['tests_s']} s")
        results.append(res)
    wall = time.monotonic() - start
    md = table(results)
    (home / "results" / "table.md").write_text(md)
    (home / "results" / "runs.json").write_text(json.dumps(
        [{k: v for k, v in r.items() if k != "summary"} for r in results], indent=1) + "\n")
    print(md)
    for r in results:
        say(f"torch {r['release']} on Python {r['python']}: venv {r['install_s']} s, tests {r['tests_s']} s, "
            f"{'ok' if r['rc'] == 0 else 'FAILED'}")
    ok = sum(1 for r in results if r["rc"] == 0)
    say(f"wall time {wall:.0f} s for {len(results)} torch releases; results in {home / 'results'}")
    print(f"{ok} passed, {len(results) - ok} failed")
    return 0 if ok == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
