"""The ``monitoring`` backend: ``sys.monitoring`` (3.12+) local events on the target code objects only."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

from prov_trace import voice
from prov_trace.contract import ENTRY, RESUME, RETURN, YIELD
from prov_trace.tracer.backends.base import Backend, BackendUnavailable, Dispatch


#: A generator's or coroutine's frame is suspended at each yield and await, and resumed later.
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR


class MonitoringBackend(Backend):
    """``sys.monitoring`` (3.12+) with PY_START/PY_RETURN as local events on the targets only.

    Code that is not a target has no events enabled, so it runs at full speed. A generator or
    coroutine target also gets PY_YIELD and PY_RESUME, so its suspended frame is not taken for one
    that exited by an exception.
    """

    name = "monitoring"
    #: The ids CPython leaves unassigned (0 debugger, 1 coverage, 2 profiler, 5 optimizer), in the
    #: order prov-trace tries them. A host that wants an id of its own most likely asks for the first
    #: free one, 3, so prov-trace takes 4 first and leaves 3 to the host while 4 is free.
    TOOL_IDS = (4, 3)

    def __init__(self, tool_id: int | None = None) -> None:
        #: The id asked for (``--tool-id``), else None to take the first free one of TOOL_IDS.
        self.requested_id = tool_id
        self.tool_id: int | None = None
        self._events: dict[int, tuple[types.CodeType, int]] = {}
        self._dispatch: Dispatch | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        if not hasattr(sys, "monitoring"):
            return f"sys.monitoring isn't available in Python {sys.version_info.major}.{sys.version_info.minor} (it needs 3.12+)"
        return None

    def start(self, dispatch: Dispatch) -> None:
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        mon = sys.monitoring
        taken = []
        for tool_id in (self.TOOL_IDS if self.requested_id is None else (self.requested_id,)):
            holder = mon.get_tool(tool_id)
            if holder is not None:
                taken.append(f"{tool_id} ({holder})")
                continue
            try:
                mon.use_tool_id(tool_id, "prov-trace")
            except ValueError:  # taken between the check and the claim
                taken.append(f"{tool_id} ({mon.get_tool(tool_id)})")
                continue
            self.tool_id = tool_id
            break
        else:
            if self.requested_id is not None:
                raise BackendUnavailable(f"sys.monitoring tool id {taken[0]} is taken: choose another with {voice.opt('--tool-id')}")
            raise BackendUnavailable(
                "every sys.monitoring tool id prov-trace may use is taken: " + ", ".join(taken)
            )
        self._dispatch = dispatch
        E = mon.events
        mon.register_callback(self.tool_id, E.PY_START, self._on_start)
        mon.register_callback(self.tool_id, E.PY_RETURN, self._on_return)
        mon.register_callback(self.tool_id, E.PY_YIELD, self._on_yield)
        mon.register_callback(self.tool_id, E.PY_RESUME, self._on_resume)

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None, *,
              pipeline: bool = False) -> None:
        E = sys.monitoring.events
        events = (E.PY_START if ENTRY in phases else 0) | (E.PY_RETURN if RETURN in phases else 0)
        if code.co_flags & _SUSPENDS:
            events |= E.PY_YIELD | E.PY_RESUME
        _, old = self._events.get(id(code), (code, 0))
        events |= old
        sys.monitoring.set_local_events(self.tool_id, code, events)
        self._events[id(code)] = (code, events)

    def stop(self) -> None:
        if self.tool_id is None:
            return
        mon = sys.monitoring
        for code, _ in self._events.values():
            try:
                mon.set_local_events(self.tool_id, code, 0)
            except ValueError:
                pass
        self._events.clear()
        E = mon.events
        for event in (E.PY_START, E.PY_RETURN, E.PY_YIELD, E.PY_RESUME):
            mon.register_callback(self.tool_id, event, None)
        mon.free_tool_id(self.tool_id)
        self.tool_id = None

    # The callbacks run inside the target's frame: sys._getframe(1) is that frame.
    def _on_start(self, code: types.CodeType, offset: int) -> None:
        self._dispatch(code, ENTRY, sys._getframe(1), None)

    def _on_return(self, code: types.CodeType, offset: int, retval: Any) -> None:
        self._dispatch(code, RETURN, sys._getframe(1), retval)

    def _on_yield(self, code: types.CodeType, offset: int, retval: Any) -> None:
        self._dispatch(code, YIELD, sys._getframe(1), None)

    def _on_resume(self, code: types.CodeType, offset: int) -> None:
        self._dispatch(code, RESUME, sys._getframe(1), None)


