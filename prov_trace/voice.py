"""How prov-trace signs its own lines: ``prov-trace:``, or ``prov-trace[rank 3]:`` in a rank of a job.

When every rank runs prov-trace itself (``torchrun ... -m prov_trace run train.py``), their progress,
notes and summaries reach one terminal or log interleaved; the rank in each line says whose it is.
`run` sets it once it knows this process is a rank; nothing else changes it.

A message that names an option of `prov-trace run` names it as its reader wrote it: ``--input-shape`` on
the command line, ``input_shape`` for a caller of ``prov_trace.run()`` (`opt`).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Iterator

_name = "prov-trace"


def name() -> str:
    """``prov-trace``, or ``prov-trace[rank N]`` in a process that is rank N of a job of several."""
    return _name


def sign(rank: int | None) -> None:
    """Sign every later line as rank `rank`'s (None: plain ``prov-trace``)."""
    global _name
    _name = "prov-trace" if rank is None else f"prov-trace[rank {rank}]"


# --- naming an option: the command line's flag, or the keyword of prov_trace.run() --------------------------

#: The keyword `prov_trace.run()` takes for each option of `prov-trace run` that a message may name.
KEYWORDS = {
    "--input-shape": "input_shape", "--dtype": "dtype", "--device": "device", "--torch-spyre": "torch_spyre",
    "--profile": "profile", "--tool-id": "tool_id", "--no-follow": "follow=False", "--no-report": "report=None",
    "-o": "output", "--report": "report", "-m": "module", "--help": "help(prov_trace.run)",
}

_on_command_line: contextvars.ContextVar[bool] = contextvars.ContextVar("prov_trace_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within it, messages name options as the command line spells them (``--input-shape``); elsewhere as
    the keyword a caller of ``prov_trace.run()`` passes (``input_shape``)."""
    token = _on_command_line.set(True)
    try:
        yield
    finally:
        _on_command_line.reset(token)


def opt(flag: str) -> str:
    """``--input-shape`` from the command line, ``input_shape`` from Python."""
    return flag if _on_command_line.get() else KEYWORDS.get(flag, flag)


def given(flag: str, value: object, quote: bool = False) -> str:
    """An option with its value: ``--device tpu`` (``--input-shape '2,x'`` with `quote`) from the command
    line, ``device='tpu'`` from Python."""
    if _on_command_line.get():
        return f"{flag} '{value}'" if quote else f"{flag} {value}"
    return f"{KEYWORDS.get(flag, flag)}={value!r}"
