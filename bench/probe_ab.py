"""The probes of two versions of prov-trace on the same objects, in one process: same output, and how long each takes.

A change to a probe (to make it cheaper) must keep its records byte for byte. Timing a traced compile against
another cannot show a few milliseconds on these machines, and two compiles hand the probes different objects
(graph ids, kernel paths). So this runs one compile traced by the working tree, keeps every object its FX,
IR and kernel snapshot functions were handed, and then calls the working tree's function and the base
revision's (``git archive REV``, loaded as ``prov_trace_base``) on each, alternately: the two outputs are
compared packed, and each side's best time of ``--reps`` is summed per function.

Caveat: the calls are repeated after the compile, so work a first call caches on Inductor's objects
(``inner_fn_opcount``) is not in either side's time, and the kernel functions, which read ``V.graph`` (unset
after the compile), take their error path. Compare those in the trace's own ``probe_ns`` instead.

    python bench/probe_ab.py [--base HEAD] [--model mlp|encoder] [--reps 5]
"""

from __future__ import annotations

import argparse
import atexit
import gc
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BASE = "prov_trace_base"
#: (module, function) of the snapshot functions compared.
FUNCTIONS = [("fx", "snapshot_graph"), ("ir", "snapshot_ops"), ("ir", "snapshot_scheduler_nodes"),
             ("kernels", "generated_kernel"), ("kernels", "extern_kernel")]


def load_base(rev: str, into: Path) -> None:
    """The package at `rev`, as `prov_trace_base` under `into`."""
    archive = into / "base.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), rev, "prov_trace"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    (into / "prov_trace").rename(into / BASE)
    for path in (into / BASE).rglob("*.py"):
        path.write_text(re.sub(r"\bprov_trace\b", BASE, path.read_text()))
    sys.path.insert(0, str(into))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="the revision to compare the working tree with (default HEAD)")
    ap.add_argument("--model", choices=("mlp", "encoder"), default="encoder")
    ap.add_argument("--reps", type=int, default=5, help="calls per side per object; the best is kept")
    args = ap.parse_args()
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    sys.path.insert(0, str(REPO / "examples"))
    tmp = Path(tempfile.mkdtemp(prefix="probe-ab-"))
    atexit.register(shutil.rmtree, tmp, True)
    load_base(args.base, tmp)

    import importlib

    import msgpack
    import torch

    import prov_trace

    caught: list[tuple[str, str, tuple, dict]] = []
    for mod_name, fn_name in FUNCTIONS:
        mod = importlib.import_module(f"prov_trace.probes.{mod_name}")
        original = getattr(mod, fn_name)

        def keep(*a, _m=mod_name, _f=fn_name, _orig=original, **k):
            caught.append((_m, _f, a, k))
            return _orig(*a, **k)

        keep.original = original  # type: ignore[attr-defined]
        setattr(mod, fn_name, keep)

    if args.model == "encoder":
        from encoder_stack import EncoderStack as Model, example_inputs
    else:
        from reference_mlp import SimpleMLP as Model

        def example_inputs():
            return (torch.randn(2, Model().fc1.in_features),)
    torch.manual_seed(0)
    model = Model().eval()
    with prov_trace.trace(str(tmp / "t.msgpack")), torch.no_grad():
        torch.compile(model)(*example_inputs())

    packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")

    def plain(x):
        if hasattr(x, "packed_items"):
            return [msgpack.unpackb(d, raw=False, strict_map_key=False, unicode_errors="surrogateescape")
                    for d in x.packed_items()]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, list):
            return [plain(i) for i in x]
        return x

    totals: dict[str, list[float]] = {}
    same = different = 0
    gc.disable()
    for mod_name, fn_name, a, k in caught:
        new = getattr(importlib.import_module(f"prov_trace.probes.{mod_name}"), fn_name).original
        old = getattr(importlib.import_module(f"{BASE}.probes.{mod_name}"), fn_name)
        if packer.pack(plain(old(*a, **k))) == packer.pack(plain(new(*a, **k))):
            same += 1
        else:
            different += 1
            print(f"different output: {mod_name}.{fn_name}")
        best_old = best_new = float("inf")
        for _ in range(args.reps):
            t0 = time.perf_counter()
            old(*a, **k)
            t1 = time.perf_counter()
            new(*a, **k)
            t2 = time.perf_counter()
            best_old, best_new = min(best_old, t1 - t0), min(best_new, t2 - t1)
        row = totals.setdefault(f"{mod_name}.{fn_name}", [0.0, 0.0, 0])
        row[0] += best_old
        row[1] += best_new
        row[2] += 1
    print(f"model {args.model}, base {args.base} against the working tree, best of {args.reps} per call")
    for key, (o, n, c) in sorted(totals.items()):
        print(f"  {key:30s} {c:4d} calls   base {1e3 * o:7.1f} ms   now {1e3 * n:7.1f} ms   ({100 * (n / o - 1):+.1f}%)")
    all_old = sum(r[0] for r in totals.values())
    all_new = sum(r[1] for r in totals.values())
    print(f"  all: base {1e3 * all_old:.1f} ms, now {1e3 * all_new:.1f} ms; outputs identical {same}, different {different}")
    sys.exit(1 if different else 0)


if __name__ == "__main__":
    main()
