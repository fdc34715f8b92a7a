"""The merged report's build time over 8 ranks of the 24-layer encoder's trace.

    python bench/ranks.py [--trace enc.msgpack] [--ranks 8] [--repeat 3]

The encoder's trace is made once when --trace is not given (``prov-trace run
examples/encoder_stack.py:EncoderStack --no-report``, a minute or two). It is copied
--ranks times with a rank's header (rank, world size, run id, host, pid), as
``prov-trace run`` writes a torchrun job's streams, into a temporary directory. Timed, in
this process, median of --repeat (min-max):

    one stream      prov_trace.load(enc.msgpack), then each format: what `prov-trace report FILE` does
    load_run        read and build every rank's model, compare them (report/ranks.py)
    md, html, json  render the merged report

The ranks are identical, so the comparison runs to the end of every rank (the worst case:
a diverging rank stops nothing, every fact is compared either way).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_trace(out: Path) -> None:
    env = {**os.environ, "TORCHINDUCTOR_COMPILE_THREADS": os.environ.get("TORCHINDUCTOR_COMPILE_THREADS", "1")}
    subprocess.run([sys.executable, "-m", "prov_trace", "run", "-q", str(REPO / "examples" / "encoder_stack.py") +
                    ":EncoderStack", "--no-report", "-o", str(out)], check=True, env=env, cwd=REPO)


def write_ranks(src: Path, d: Path, n: int) -> None:
    import msgpack

    from prov_trace.stream import schema

    with open(src, "rb") as f:
        recs = list(msgpack.Unpacker(f, **schema.UNPACK_OPTIONS, **schema.READ_LIMITS))
    body = b"".join(msgpack.packb(r, **schema.PACK_OPTIONS) for r in recs[1:])
    for r in range(n):
        head = {**recs[0], "rank": r, "local_rank": r % 8, "world_size": n, "run_id": "bench", "host": "node0",
                "pid": 1000 + r, "ppid": 999, "restart": 0, "follow": "child"}
        (d / f"rank-{r}.msgpack").write_bytes(msgpack.packb(head, **schema.PACK_OPTIONS) + body)


def timed(fn, repeat: int) -> tuple[float, float, float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", help="the encoder's trace (made when not given)")
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import prov_trace

    with tempfile.TemporaryDirectory(prefix="prov-trace-ranks-bench-") as tmp:
        tmp = Path(tmp)
        trace = Path(args.trace) if args.trace else tmp / "enc.msgpack"
        if not trace.exists():
            make_trace(trace)
        d = tmp / "ranks"
        d.mkdir()
        write_ranks(trace, d, args.ranks)
        size = sum(p.stat().st_size for p in d.iterdir())
        rows = []
        m, lo, hi, one = timed(lambda: prov_trace.load(trace), args.repeat)
        rows.append(("one stream: load", m, lo, hi))
        for fmt in ("md", "html", "json"):
            rows.append((f"one stream: {fmt}",) + timed(lambda: one.render(fmt), args.repeat)[:3])
        m, lo, hi, run = timed(lambda: prov_trace.load_run(d), args.repeat)
        rows.append((f"{args.ranks} ranks: load_run", m, lo, hi))
        for fmt in ("md", "html", "json"):
            rows.append((f"{args.ranks} ranks: {fmt}",) + timed(lambda: run.render(fmt), args.repeat)[:3])
        print(f"{trace.name}: {trace.stat().st_size / 1e6:.1f} MB, {len(one.graphs)} graphs; "
              f"{args.ranks} ranks: {size / 1e6:.1f} MB; agree={run.agree}")
        for name, m, lo, hi in rows:
            print(f"  {name:<24} {m:7.2f} s ({lo:.2f}-{hi:.2f})")
        total = rows[4][1] + rows[5][1]
        print(f"  `prov-trace report DIR` (md) ~ {total:.2f} s, against {rows[0][1] + rows[1][1]:.2f} s for one stream")
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
