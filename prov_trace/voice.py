"""How prov-trace signs its own lines: ``prov-trace:``, or ``prov-trace[rank 3]:`` in a rank of a job.

When every rank runs prov-trace itself (``torchrun ... -m prov_trace run train.py``), their progress,
notes and summaries reach one terminal or log interleaved; the rank in each line says whose it is.
`run` sets it once it knows this process is a rank; nothing else changes it.
"""

from __future__ import annotations

_name = "prov-trace"


def name() -> str:
    """``prov-trace``, or ``prov-trace[rank N]`` in a process that is rank N of a job of several."""
    return _name


def sign(rank: int | None) -> None:
    """Sign every later line as rank `rank`'s (None: plain ``prov-trace``)."""
    global _name
    _name = "prov-trace" if rank is None else f"prov-trace[rank {rank}]"
