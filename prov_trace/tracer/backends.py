"""Event backends: each one delivers entry and return events for the target code objects only.

Every backend implements the same small interface (``start``, ``watch``,
``stop``) and calls one dispatch function; the session never asks which backend
it has. Which one runs is decided in one place, ``choose()``, and the reason is
kept as a plain sentence that goes into the trace header and onto stderr.

Exits by exception: ``sys.monitoring``'s ``PY_UNWIND`` can only be enabled
globally before Python 3.15, which would call into the tracer for every frame
in the process that unwinds. We do not enable it. The session pairs entry and
return events by frame identity on a per-thread stack; an entry whose frame
never returned is closed as ``unwind`` when an outer return or the end of the
session reveals it. No backend needs to see unwinds for that.
"""

from __future__ import annotations

import sys
import threading
import types
from typing import Any, Callable

ENTRY = "entry"
RETURN = "return"

#: dispatch(code, phase, frame, return_value)
Dispatch = Callable[[types.CodeType, str, types.FrameType, Any], None]


class BackendUnavailable(RuntimeError):
    """This backend cannot run here; the message is a sentence for the user."""


class Backend:
    """The interface every backend implements."""

    name = "?"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """None when this interpreter can run the backend, else why not."""
        return None

    def start(self, dispatch: Dispatch) -> None:
        raise NotImplementedError

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None) -> None:
        """Deliver `phases` events for `code` from now on. May raise BackendUnavailable for this code."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class MonitoringBackend(Backend):
    """``sys.monitoring`` (3.12+) with PY_START/PY_RETURN as local events on the targets only.

    Code that is not a target has no events enabled, so it runs at full speed.
    """

    name = "monitoring"
    #: 3 and 4 are unassigned by convention (0 debugger, 1 coverage, 2 profiler, 5 optimizer).
    TOOL_IDS = (3, 4, 5)

    def __init__(self) -> None:
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
        for tool_id in self.TOOL_IDS:
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
            raise BackendUnavailable(
                "every sys.monitoring tool id prov-trace may use is taken: " + ", ".join(taken)
            )
        self._dispatch = dispatch
        E = mon.events
        mon.register_callback(self.tool_id, E.PY_START, self._on_start)
        mon.register_callback(self.tool_id, E.PY_RETURN, self._on_return)

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None) -> None:
        E = sys.monitoring.events
        events = (E.PY_START if ENTRY in phases else 0) | (E.PY_RETURN if RETURN in phases else 0)
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
        mon.register_callback(self.tool_id, E.PY_START, None)
        mon.register_callback(self.tool_id, E.PY_RETURN, None)
        mon.free_tool_id(self.tool_id)
        self.tool_id = None

    # The callbacks run inside the target's frame: sys._getframe(1) is that frame.
    def _on_start(self, code: types.CodeType, offset: int) -> None:
        self._dispatch(code, ENTRY, sys._getframe(1), None)

    def _on_return(self, code: types.CodeType, offset: int, retval: Any) -> None:
        self._dispatch(code, RETURN, sys._getframe(1), retval)


class SettraceBackend(Backend):
    """``sys.settrace`` on any Python: a global trace function that returns at once for non-targets.

    It also covers threads started later (``threading.settrace``). Every Python
    call in the process still pays for one C-to-Python call into the filter, so
    this is the slowest backend; its cost is in docs/benchmarks.md.
    """

    name = "settrace"

    def __init__(self) -> None:
        self._codes: dict[int, tuple[types.CodeType, frozenset[str]]] = {}
        self._dispatch: Dispatch | None = None
        self._started = False

    def start(self, dispatch: Dispatch) -> None:
        other = sys.gettrace()
        if other is not None:
            raise BackendUnavailable(
                f"another sys.settrace tracer is active ({other!r}); settrace would replace it"
            )
        self._dispatch = dispatch
        threading.settrace(self._global)
        sys.settrace(self._global)
        self._started = True

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None) -> None:
        _, old = self._codes.get(id(code), (code, frozenset()))
        self._codes[id(code)] = (code, old | phases)

    def stop(self) -> None:
        if self._started:
            sys.settrace(None)
            threading.settrace(None)  # type: ignore[arg-type]
            self._started = False
        self._codes.clear()

    def _global(self, frame: types.FrameType, event: str, arg: Any):
        entry = self._codes.get(id(frame.f_code))
        if entry is None or entry[0] is not frame.f_code:
            return None
        frame.f_trace_lines = False
        if ENTRY in entry[1]:
            self._dispatch(frame.f_code, ENTRY, frame, None)
        return self._local if RETURN in entry[1] else None

    def _local(self, frame: types.FrameType, event: str, arg: Any):
        if event == "return" and _returned_normally(frame):
            self._dispatch(frame.f_code, RETURN, frame, arg)
        return self._local


_RETURN_OPS = {op for name, op in __import__("dis").opmap.items() if name in ("RETURN_VALUE", "RETURN_CONST")}


def _returned_normally(frame: types.FrameType) -> bool:
    """A 'return' trace event also fires when a frame exits by exception; tell the two apart."""
    code = frame.f_code.co_code
    i = frame.f_lasti
    return 0 <= i < len(code) and code[i] in _RETURN_OPS


BACKENDS: dict[str, type[Backend]] = {
    "monitoring": MonitoringBackend,
    "settrace": SettraceBackend,
}
#: The order `auto` tries them in.
AUTO_ORDER = ("monitoring", "inject", "settrace")


def register(cls: type[Backend]) -> None:
    BACKENDS[cls.name] = cls


def choose(requested: str, dispatch: Dispatch) -> tuple[Backend, str]:
    """Start the requested backend (or the best one for `auto`); return it and why it was chosen."""
    if requested != "auto":
        cls = BACKENDS.get(requested)
        if cls is None:
            raise BackendUnavailable(
                f"there is no backend named '{requested}': choose one of auto, {', '.join(sorted(BACKENDS))}"
            )
        reason = cls.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"the {requested} backend can't run here: {reason}")
        backend = cls()
        try:
            backend.start(dispatch)
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"the {requested} backend can't run here: {exc}") from None
        return backend, f"{requested} was requested"
    skipped: list[str] = []
    for name in AUTO_ORDER:
        cls = BACKENDS.get(name)
        if cls is None:
            continue
        reason = cls.unavailable_reason()
        if reason:
            skipped.append(f"not {name}: {reason}")
            continue
        backend = cls()
        try:
            backend.start(dispatch)
        except BackendUnavailable as exc:
            skipped.append(f"not {name}: {exc}")
            continue
        why = f"{name} is the best backend available"
        if skipped:
            why += " (" + "; ".join(skipped) + ")"
        return backend, why
    raise BackendUnavailable("no backend can run here: " + "; ".join(skipped))


# The inject backend lives in its own module and registers itself on import.
from prov_trace.tracer import inject as _inject  # noqa: E402,F401
