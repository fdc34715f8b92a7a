"""The interpreter's frame stack in chunks: where a frame lands, and frames sized to choose it.

CPython 3.11+ keeps frames in chunks of 16 KiB. A call that does not fit in the current chunk maps a
new one, and the chunk is unmapped as soon as that call returns, so code that keeps calling across a
chunk's edge maps and unmaps a chunk (fresh pages) per call. How deep code starts decides where it
pays that (docs/benchmarks.md, "Probes on a frame-stack chunk's edge"). Two users:

- the session runs each probe through `on_fresh_stack`, so a probe's calls never sit on the host's edge;
- the runner execs the program from a frame sized so that its frames meet the edges where they would
  under ``python`` (prov_trace/runner.py).
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

#: Slots of an interpreter frame besides its locals and stack (FRAME_SPECIALS_SIZE); None where unknown.
FRAME_SPECIALS = 9 if (3, 11) <= sys.version_info[:2] <= (3, 13) else None
#: A frame of this many 8-byte slots never fits in a 16 KiB chunk (2,045 slots after its header): it opens
#: a 32 KiB one (4,093 slots) and leaves 2,044 slots after it, what python's first chunk leaves the first
#: frame it runs there (one slot in).
OWN_CHUNK = 2048 + 1


def frame_slots(code: types.CodeType) -> int:
    """The slots an interpreter frame of `code` takes: locals, cells and free variables, stack, specials."""
    assert FRAME_SPECIALS is not None
    return len(set(code.co_varnames) | set(code.co_cellvars)) + len(code.co_freevars) + code.co_stacksize + FRAME_SPECIALS


def sized(fn: Callable[..., Any], slots: int) -> Callable[..., Any]:
    """`fn`, its code's stack grown so that its frame takes exactly `slots` slots (`FRAME_SPECIALS` known)."""
    code = fn.__code__
    fn.__code__ = code.replace(co_stacksize=code.co_stacksize + slots - frame_slots(code))
    return fn


def on_fresh_stack(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, with its calls at the start of a fresh chunk of the interpreter's frame stack.

    A probe that starts where the host's stack leaves a chunk almost full maps and unmaps a chunk on
    every call that crosses the edge: in the encoder's AOT graph probe, 15,000 page faults and 140 ms
    for what takes 40 ms anywhere else (bench/stack_chunks.py). This function's frame is larger than
    a chunk, so it always opens one of its own: one chunk mapped per probe instead of one per call.
    """
    return fn(*args)


#: 2,100 stack slots alone are more than a 16 KiB chunk holds, whatever this Python's frame layout.
on_fresh_stack.__code__ = on_fresh_stack.__code__.replace(co_stacksize=2100)
