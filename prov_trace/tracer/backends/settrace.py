"""The ``settrace`` backend: a global ``sys.settrace`` filter, on any Python; the slowest."""

from __future__ import annotations

import dis
import inspect
import sys
import threading
import types
from typing import Any

from prov_trace.contract import ENTRY, RESUME, RETURN, YIELD
from prov_trace.tracer.backends.base import Backend, BackendUnavailable, Dispatch


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
        #: id(frame) of the generators and coroutines suspended at a yield or await: their next 'call'
        #: event is a resumption, not a new call. Guarded by the GIL (set add/discard are atomic).
        self._suspended: set[int] = set()
        self._problems: list[str] = []

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

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None, *,
              pipeline: bool = False) -> None:
        _, old = self._codes.get(id(code), (code, frozenset()))
        self._codes[id(code)] = (code, old | phases)

    def stop(self) -> None:
        if self._started:
            current = sys.gettrace()
            if current == self._global:
                sys.settrace(None)
            else:  # the program installed its own tracer (it is the program's now, and stays), or none
                how = (f"the program replaced prov-trace's sys.settrace tracer (with {_name(current)})" if current is not None
                       else "prov-trace's sys.settrace tracer was switched off during the run (by the program's "
                            "sys.settrace(None), or by Python after an error inside it such as a RecursionError)")
                self._problems.append(
                    f"{how}, so the settrace backend saw no call after that: stages may show as not fired "
                    "(the monitoring backend, 3.12+, or inject has no such limit)")
            if getattr(threading, "gettrace", lambda: self._global)() == self._global:
                threading.settrace(None)  # type: ignore[arg-type]
            self._started = False
        self._codes.clear()
        self._suspended.clear()

    def problems(self) -> list[str]:
        return list(self._problems)

    def _global(self, frame: types.FrameType, event: str, arg: Any):
        entry = self._codes.get(id(frame.f_code))
        if entry is None or entry[0] is not frame.f_code:
            return None
        frame.f_trace_lines = False
        fid = id(frame)
        if fid in self._suspended:  # a generator or coroutine going on after a yield or await
            self._suspended.discard(fid)
            self._dispatch(frame.f_code, RESUME, frame, None)
        elif ENTRY in entry[1]:
            self._dispatch(frame.f_code, ENTRY, frame, None)
        return self._local if RETURN in entry[1] or frame.f_code.co_flags & _SUSPENDS else None

    def _local(self, frame: types.FrameType, event: str, arg: Any):
        if event == "return":
            how = _how_it_left(frame)
            if how == RETURN:
                self._dispatch(frame.f_code, RETURN, frame, arg)
            elif how == YIELD:
                self._suspended.add(id(frame))
                self._dispatch(frame.f_code, YIELD, frame, None)
        return self._local


def _name(fn: Any) -> str:
    if fn is None:
        return "none"
    try:
        return getattr(fn, "__qualname__", None) or type(fn).__name__
    except Exception:  # noqa: BLE001
        return "another tracer"


_RETURN_OPS = {op for name, op in dis.opmap.items() if name in ("RETURN_VALUE", "RETURN_CONST")}
_YIELD_OPS = {op for name, op in dis.opmap.items() if name == "YIELD_VALUE"}
#: 3.13+: a yield's 'return' event has f_lasti on the RESUME after YIELD_VALUE (before 3.13, on the YIELD_VALUE).
_RESUME_AFTER_YIELD = dis.opmap.get("RESUME") if sys.version_info >= (3, 13) else None
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _how_it_left(frame: types.FrameType) -> str | None:
    """A 'return' trace event fires for a return, for a yield (a generator or coroutine suspending), and
    for an exit by exception: RETURN, YIELD, or None for the last."""
    code = frame.f_code.co_code
    i = frame.f_lasti
    if not 0 <= i < len(code):
        return None
    if code[i] in _RETURN_OPS:
        return RETURN
    if code[i] in _YIELD_OPS:
        return YIELD
    if code[i] == _RESUME_AFTER_YIELD and i >= 2 and code[i - 2] in _YIELD_OPS:
        return YIELD
    return None


