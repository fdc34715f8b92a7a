"""How much of a compile runs inside the targets' own bytecode: the most inject's rewriting can slow.

    python bench/target_self_time.py [--model encoder|mlp] [--profile inductor-cpu]

inject replaces each target's ``__code__`` with a rewritten copy. If the copy ran
slower than the original (say the adaptive interpreter specialised it less),
the cost would be bounded by the time spent in the targets' *own* instructions:
their self time, without the functions they call. This compiles the model once,
untraced, under cProfile, and prints each target's calls and self time, and their
sum as a share of the whole compile. A rewritten copy would have to run that share
many times slower to explain a gap of a few percent.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))
MODELS = {"mlp": ("reference_mlp", "SimpleMLP"), "encoder": ("encoder_stack", "EncoderStack")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(MODELS), default="encoder")
    ap.add_argument("--profile", default="inductor-cpu")
    args = ap.parse_args()
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"

    import importlib

    import torch

    from prov_trace.probes.profiles import get

    module, attr = MODELS[args.model]
    mod = importlib.import_module(module)
    model = getattr(mod, attr)().eval()
    example = getattr(mod, "example_inputs", None)
    inputs = example() if callable(example) else (torch.randn(2, 128),)
    targets = {}
    for h in get(args.profile).hooks:  # each target's code object, by file and first line, as cProfile keys it
        modname, qual = h.target.split(":")
        obj = importlib.import_module(modname)
        for part in qual.split("."):
            obj = getattr(obj, part)
        code = obj.__code__
        targets[(code.co_filename, code.co_firstlineno)] = h.target

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    with torch.no_grad():
        torch.compile(model)(*inputs)
    prof.disable()
    wall = time.perf_counter() - t0

    stats = pstats.Stats(prof)
    total = stats.total_tt
    rows = []
    for (filename, line, _name), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        if (filename, line) in targets:
            rows.append((targets[filename, line], nc, tt, ct))
    print(f"python {sys.version.split()[0]}, torch {torch.__version__}, model {args.model}: compile + first call "
          f"{wall:.1f} s under cProfile (profiled total {total:.1f} s)")
    print(f"{'target':<62} {'calls':>6} {'self ms':>9} {'with callees s':>15}")
    for target, nc, tt, ct in sorted(rows, key=lambda r: -r[2]):
        print(f"{target:<62} {nc:>6} {tt * 1000:>9.2f} {ct:>15.2f}")
    self_total = sum(r[2] for r in rows)
    calls = sum(r[1] for r in rows)
    print(f"{'all targets':<62} {calls:>6} {self_total * 1000:>9.2f}   = {self_total / total:.4%} of the profiled compile")


if __name__ == "__main__":
    main()
