"""The interface every event backend implements, and the one error a backend raises.

A backend delivers entry and return events for the target code objects only,
through one dispatch function; the session never asks which backend it has.
Which one runs is decided in one place, ``tracer/core.py``.

Exits by exception: ``sys.monitoring``'s ``PY_UNWIND`` can only be enabled
globally before Python 3.15, which would call into the tracer for every frame
in the process that unwinds. We do not enable it. The session pairs entry and
return events by frame identity on a per-thread stack; an entry whose frame
never returned is closed as ``unwind`` when an outer return or the end of the
session reveals it. No backend needs to see unwinds for that.

Generators and coroutines: a backend that can also reports ``YIELD`` (the frame
suspends at a yield or await) and ``RESUME`` (it goes on), which the session uses
only to keep a suspended frame off the stack (``monitoring``: PY_YIELD/PY_RESUME
local events; ``settrace``: a 'return' event at a YIELD_VALUE, then 'call' again).
``inject`` refuses them.
"""

from __future__ import annotations

import types
from typing import Any, Callable

#: dispatch(code, phase, frame, return_value); phase is ENTRY, RETURN, YIELD or RESUME
Dispatch = Callable[[types.CodeType, str, types.FrameType, Any], None]


class BackendUnavailable(RuntimeError):
    """This backend cannot run here; the message is a sentence for the user."""


class Backend:
    """The interface every backend implements."""

    name = "?"
    #: The ``sys.monitoring`` tool id the backend holds while started (the monitoring backend), else None.
    tool_id: int | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when this interpreter can run the backend, else why not."""
        return None

    def start(self, dispatch: Dispatch) -> None:
        raise NotImplementedError

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None, *,
              pipeline: bool = False) -> None:
        """Deliver `phases` events for `code` from now on. May raise BackendUnavailable for this code.
        `pipeline`: the code is a step of the compile pipeline, never traced by Dynamo (``Hook.pipeline``)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def watch_note(self, code: types.CodeType) -> str | None:
        """How `code` is watched, where that is not the backend's own way (a fallback), as a note for its hook."""
        return None

    def problems(self) -> list[str]:
        """What kept the backend from seeing events, as sentences for the user (read after ``stop()``)."""
        return []
