"""A trace session: resolves a profile's targets, runs a backend, turns events into records.

The session is the only place where live events meet the stream. It never
lets a probe's failure reach the host: a probe that raises becomes an error
record for that hook, and the traced code carries on.
"""

from __future__ import annotations

import itertools
import os
import platform
import sys
import threading
import time
import traceback
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from prov_trace.contract import ENTRY, NO_RECORD, RESUME, RETURN, YIELD, Hook, ProbeCall, Profile, TargetError, TargetSpec
from prov_trace import torchver, voice
from prov_trace.signals import outcome
from prov_trace.stream import schema
from prov_trace.stream.writer import TraceWriter
from prov_trace.tracer import core
from prov_trace.tracer.backends.base import Backend, BackendUnavailable
from prov_trace.tracer.imports import ImportWatcher
from prov_trace.tracer.stack import on_fresh_stack
from prov_trace.tracer.targets import ResolvedTarget, ResolveError, resolve, resolve_in_code
from prov_trace.version import VERSION

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"{voice.name()}: {msg}", file=sys.stderr, flush=True)


@dataclass
class HookState:
    """What became of one hook: the status that ends up in the hooks table."""

    hook: Hook
    spec: TargetSpec | None
    resolved: ResolvedTarget | None = None
    reason: str | None = None
    installed: bool = False
    fired: int = 0
    errors: int = 0
    #: How the backend watches it, where not its own way (inject's settrace fallback): a note for the hook.
    watch_note: str | None = None

    def status(self) -> dict[str, Any]:
        r = self.resolved
        return {
            "target": self.hook.target,
            "stage": self.hook.stage,
            "event": self.hook.event,
            "resolved": r is not None,
            "installed": self.installed,
            "reason": self.reason,
            "file": r.file if r else None,
            "line": r.line if r else None,
            "signature": r.signature() if r else None,
            "notes": (list(r.notes) if r else []) + ([self.watch_note] if self.watch_note else []),
            "fired": self.fired,
            "errors": self.errors,
        }


@dataclass
class _Frame:
    frame_id: int
    code: types.CodeType
    call: int
    #: The thread that made the call: an unwind found when tracing stops is written by another thread.
    thread: dict[str, Any] | None = None
    #: (compile id, graph kind) as the call's entry probe read them: an unwind names the compile it broke.
    context: tuple[Any, Any] | None = None


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.stack: list[_Frame] = []
        self.busy = False


@dataclass
class _CodeEntry:
    code: types.CodeType
    states: list[HookState] = field(default_factory=list)


class TraceSession:
    """Context manager: ``with TraceSession(writer, profile): <compile>``."""

    def __init__(
        self,
        writer: TraceWriter,
        profile: Profile,
        *,
        backend: str = "auto",
        extra_hooks: tuple[Hook, ...] = (),
        argv: list[str] | None = None,
        log: Log = _stderr,
        header_extra: dict[str, Any] | None = None,
        tool_id: int | None = None,
        observer: Callable[[dict[str, Any]], None] | None = None,
        defer_main: bool = False,
    ):
        self.writer = writer
        #: Called with each probe record once it is written (live progress); only on target events.
        self.observer = observer
        #: Targets in ``__main__`` wait for the program's own __main__ (``module_ready``), not this process's.
        self.defer_main = defer_main
        self._main_pending: list[HookState] = []
        self.tool_id = tool_id
        self.profile = profile
        self.requested_backend = backend
        # The profile's hooks for the torch installed here: a hook names the releases its target holds for.
        self.hooks = profile.hooks_for(torchver.installed()) + tuple(extra_hooks)
        #: The hooks the caller added to the profile's (a user's probes).
        self.user_hooks = tuple(extra_hooks)
        self.argv = list(sys.argv if argv is None else argv)
        self.log = log
        self.header_extra = header_extra or {}
        self.backend: Backend | None = None
        self.backend_reason = ""
        self.states: list[HookState] = []
        self._by_code: dict[int, _CodeEntry] = {}
        self._pending: dict[str, list[HookState]] = {}
        self._watcher = ImportWatcher(self._on_module_loaded)
        self._tls = _ThreadState()
        self._all_stacks: list[list[_Frame]] = []
        #: Generators and coroutines suspended at a yield or await, by id(frame): off every thread's
        #: stack until they resume (on whichever thread), so they are not taken for an exit by exception.
        self._suspended: dict[int, _Frame] = {}
        self._lock = threading.RLock()
        self._calls = itertools.count(1)
        #: The profile's context keeps what it must remember between calls here (contract.Context), next to
        #: two views of the session's own bookkeeping: the code objects of the calling thread's open target
        #: calls (outermost first), and of every target traced now.
        self._context_state: dict[str, Any] = {"open_codes": self._open_codes, "traced_codes": self._traced_codes}
        self._active = False
        self.ended: dict[str, Any] | None = None
        #: Records of hooks with ``keep=True``, for the profile's ``finish`` step.
        self.kept: list[dict[str, Any]] = []
        #: Called in a forked child (its parent's writer is detached there): a (writer, header keys) for the
        #: child's own stream, or None, and this process stops tracing. Set by the session's owner.
        self.on_fork: Callable[[], tuple[TraceWriter, dict[str, Any]] | None] | None = None

    # --- lifecycle ---------------------------------------------------------------

    @property
    def active(self) -> bool:
        """True from a successful ``start()`` until ``stop()``."""
        return self._active

    def __enter__(self) -> "TraceSession":
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.stop(*outcome(exc_type, exc))

    def start(self) -> None:
        self.backend, self.backend_reason = core.choose(self.requested_backend, self._dispatch, tool_id=self.tool_id)
        self.log(f"backend {self.backend.name}: {self.backend_reason}")
        self._write_header()
        self._active = True
        _SESSIONS.add(self)
        for hook in self.hooks:
            try:
                spec = TargetSpec.parse(hook.target)
            except TargetError as exc:
                state = HookState(hook, None, reason=str(exc))
                self.states.append(state)
                self._write_status(state)
                continue
            state = HookState(hook, spec)
            self.states.append(state)
            self._try_resolve(state)
        self._watcher.install()

    def _write_header(self) -> None:
        self.writer.write(schema.HEADER, {
            "schema": schema.SCHEMA_NAME,
            "version": list(schema.SCHEMA_VERSION),
            "tool_version": VERSION,
            "python": platform.python_version(),
            # torch.__version__, imported or not ("2.13.0+cu130"; the package metadata says "2.13.0").
            "torch": torchver.installed(),
            "platform": platform.platform(),
            "backend": self.backend.name,
            "backend_reason": self.backend_reason,
            "tool_id": self.backend.tool_id,
            "profile": self.profile.name,
            "argv": self.argv,
            "pid": os.getpid(),
            "start_time": time.time(),
            **self.header_extra,
        })

    def _after_fork_in_child(self) -> None:
        """In a forked child. Its parent's writer is detached here, so nothing the child does reaches the
        parent's stream, and the parent's end record is never written from here. The owner's ``on_fork``
        gives the child a stream of its own (written from the start: header, hook statuses), or none:
        then tracing stops in this process, its backend and import watcher with it."""
        self._tls = _ThreadState()
        self._all_stacks = []
        self._lock = threading.RLock()
        own = None
        if self.on_fork is not None:
            try:
                own = self.on_fork()
            except Exception:  # noqa: BLE001 - never break the host's fork
                own = None
        if own is None:
            self._active = False
            self.ended = {"outcome": "forked", "detail": "a forked child: it writes no stream", "records": 0}
            self._watcher.uninstall()
            if self.backend is not None:
                try:
                    self.backend.stop()
                except Exception:  # noqa: BLE001
                    pass
            return
        self.writer, extra = own
        self.header_extra = {**self.header_extra, **extra}
        self.kept = []
        self._write_header()
        for state in self.states:
            state.fired = state.errors = 0
            self._write_status(state)

    def stop(self, outcome: str = "ok", detail: str | None = None) -> None:
        if not self._active:
            return
        self._active = False
        _SESSIONS.discard(self)
        self._watcher.uninstall()
        if self.backend is not None:
            for state in self.states:  # a target can move to a fallback after it was installed (inject)
                if state.installed and state.resolved is not None:
                    state.watch_note = self._watch_note(state.resolved.code)
            try:
                self.backend.stop()
            except Exception as exc:  # noqa: BLE001
                self.log(f"stopping the {self.backend.name} backend failed: {exc}")
            for text in self.backend.problems():
                self.log(f"warning: {text}")
                self.writer.write(schema.NOTE, {"level": "warning", "text": text})
        with self._lock:
            running = _running_frames() if any(self._all_stacks) else None
            for stack in self._all_stacks:
                while stack:
                    fr = stack.pop()
                    # No event says a call left by an exception until a call under it returns: whether its
                    # frame is still on a thread's stack says which it was.
                    self._write_unwind(fr, "the call had not returned when tracing stopped"
                                       if running is None or _same_function(running.get(fr.frame_id), fr.code)
                                       else "the call exited by an exception",
                                       stack)
            for fr in self._suspended.values():
                self._write_unwind(fr, "the generator or coroutine was suspended, not finished, when tracing stopped")
            self._suspended.clear()
        self._finish()
        for state in self.states:
            if not state.resolved and state.reason is None and state.spec is not None:
                state.reason = ("the program's __main__ never ran" if state in self._main_pending
                                else f"module {state.spec.module} was never imported")
            self._write_status(state)
        self.ended = {"outcome": outcome, "detail": detail, "records": self.writer.records_written + 1}
        self.writer.write(schema.END, self.ended)
        self.writer.close()

    def _finish(self) -> None:
        """The profile's after-the-compile step (e.g. reading the files the compile emitted)."""
        finish = self.profile.finish
        if finish is None:
            return
        try:
            records = list(finish(list(self.kept)) or ())
        except Exception as exc:  # noqa: BLE001 - a failed finish is an error record, not a crash
            self.writer.write(schema.ERROR, {"stage": None, "target": f"{self.profile.name}:finish",
                                             "phase": "finish", "error": _error(exc)})
            return
        for rec in records:
            body = {
                "stage": rec.get("stage"), "target": rec.get("target") or f"{self.profile.name}:finish",
                "phase": "finish", "call": None, "compile_id": rec.get("compile_id"), "graph": rec.get("graph"),
                "thread": _thread(), "payload": rec.get("payload"),
            }
            if self.writer.write(schema.PROBE, body) is not None:
                self._observe(body)

    # --- resolution ----------------------------------------------------------------

    def _try_resolve(self, state: HookState) -> None:
        assert state.spec is not None
        if self.defer_main and state.spec.module == "__main__":
            self._main_pending.append(state)
            return
        try:
            resolved = resolve(state.spec)
        except ResolveError as exc:
            if state.spec.module not in sys.modules:
                self._pending.setdefault(state.spec.module, []).append(state)
                self._watcher.watch(state.spec.module)
                state.reason = None
                return
            state.reason = str(exc)
            self._write_status(state)
            return
        state.resolved = resolved
        state.reason = None
        self._install(state)

    def _install(self, state: HookState) -> None:
        resolved = state.resolved
        assert resolved is not None and self.backend is not None
        with self._lock:
            entry = self._by_code.get(id(resolved.code))
            if entry is None or entry.code is not resolved.code:
                entry = self._by_code[id(resolved.code)] = _CodeEntry(resolved.code)
            entry.states.append(state)
        try:
            # Both events, always: pairing entries with returns is what detects exits by exception.
            self.backend.watch(resolved.code, frozenset((ENTRY, RETURN)), resolved.function,
                               pipeline=state.hook.pipeline)
        except BackendUnavailable as exc:
            state.reason = f"the {self.backend.name} backend cannot watch it: {exc}"
            entry.states.remove(state)
        else:
            state.installed = True
            state.watch_note = self._watch_note(resolved.code)
        self._write_status(state)

    def _watch_note(self, code: types.CodeType) -> str | None:
        try:
            return self.backend.watch_note(code) if self.backend is not None else None
        except Exception:  # noqa: BLE001 - a note is never worth a failed run
            return None

    def module_ready(self, name: str, module: types.ModuleType | None = None, code: types.CodeType | None = None) -> None:
        """The program's own `name` module (its ``__main__``) is about to run: resolve the targets waiting for
        it, in `module` where they are there already, else among the functions its `code` defines.

        Called by whoever runs the program (``runner.run_program``), so that ``--probe '__main__:fn'``
        names the traced script's function, not one of the process that runs it.
        """
        if not self._active or name != "__main__":
            return
        states, self._main_pending = self._main_pending, []
        for state in states:
            assert state.spec is not None
            try:
                resolved = None
                if module is not None:
                    try:
                        resolved = resolve(state.spec, {name: module})
                    except ResolveError:
                        if code is None:
                            raise
                if resolved is None:
                    if code is None:
                        raise ResolveError(f"the program's {name} could not be read")
                    resolved = resolve_in_code(state.spec, code)
            except ResolveError as exc:
                state.reason = str(exc)
                self._write_status(state)
            except Exception as exc:  # noqa: BLE001 - never break the host's run
                state.reason = f"resolving failed: {type(exc).__name__}: {exc}"
                self._write_status(state)
            else:
                state.resolved = resolved
                state.reason = None
                self._install(state)

    def _on_module_loaded(self, name: str) -> None:
        if not self._active:
            return
        states = self._pending.pop(name, [])
        self._watcher.unwatch(name)
        for state in states:
            try:
                self._try_resolve(state)
            except Exception as exc:  # noqa: BLE001 - never break the host's import
                state.reason = f"resolving failed: {type(exc).__name__}: {exc}"
        for state in states:
            if state.spec is not None and not state.resolved and state.reason is None:
                state.reason = f"module {name} was imported but the target was not found in it"

    def _write_status(self, state: HookState) -> None:
        self.writer.write(schema.HOOK, state.status())

    # --- events ----------------------------------------------------------------------

    def _dispatch(self, code: types.CodeType, phase: str, frame: types.FrameType, retval: Any) -> None:
        entry = self._by_code.get(id(code))
        if entry is None or entry.code is not code or not self._active:
            return
        tls = self._tls
        if tls.busy:  # a probe reached a target itself: not an event of the host's
            return
        tls.busy = True
        try:
            if phase in (YIELD, RESUME):
                self._suspend_or_resume(tls, code, phase, frame)
                return
            call = self._pair(tls, code, phase, frame)
            for state in entry.states:
                if state.hook.event == phase:
                    context = on_fresh_stack(self._run_probe, state, phase, frame, retval, call)
                    if context is not None and phase == ENTRY and tls.stack and tls.stack[-1].call == call:
                        tls.stack[-1].context = context
        except Exception as exc:  # noqa: BLE001 - the tracer's own fault must not reach the host
            try:
                self.writer.write(schema.ERROR, {"stage": None, "target": None, "phase": phase,
                                                 "error": _error(exc)})
            except Exception:  # noqa: BLE001
                pass
        finally:
            tls.busy = False

    def _pair(self, tls: _ThreadState, code: types.CodeType, phase: str, frame: types.FrameType) -> int:
        stack = tls.stack
        if not stack:
            with self._lock:
                if not any(s is stack for s in self._all_stacks):
                    self._all_stacks.append(stack)
        if phase == ENTRY:
            if self._suspended:
                self._drop_stale(id(frame))
            call = next(self._calls)
            stack.append(_Frame(id(frame), code, call, _thread()))
            return call
        fid = id(frame)
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].frame_id == fid and stack[i].code is code:
                # Everything above it exited by exception without a return event.
                while len(stack) > i + 1:
                    self._write_unwind(stack.pop(), "the call exited by an exception", stack)
                return stack.pop().call
        if self._suspended:  # a generator that returned after a throw(), with no resume event
            with self._lock:
                fr = self._suspended.get(fid)
                if fr is not None and fr.code is code:
                    del self._suspended[fid]
                    return fr.call
        return next(self._calls)

    def _suspend_or_resume(self, tls: _ThreadState, code: types.CodeType, phase: str, frame: types.FrameType) -> None:
        """A generator or coroutine frame suspending (off this thread's stack) or resuming (back onto it)."""
        stack = tls.stack
        fid = id(frame)
        if phase == RESUME:
            with self._lock:
                fr = self._suspended.get(fid)
                if fr is None or fr.code is not code:
                    return  # started before tracing did
                del self._suspended[fid]
                if not any(s is stack for s in self._all_stacks):
                    self._all_stacks.append(stack)
            stack.append(fr)
            return
        for i in range(len(stack) - 1, -1, -1):
            if stack[i].frame_id == fid and stack[i].code is code:
                while len(stack) > i + 1:
                    self._write_unwind(stack.pop(), "the call exited by an exception", stack)
                fr = stack.pop()
                with self._lock:
                    self._drop_stale(fid)
                    self._suspended[fid] = fr
                return

    def _open_codes(self) -> list[types.CodeType]:
        """The code objects of this thread's target calls that have started and not yet returned, outermost
        first. A call that left by an exception may still be listed (no event says so), never a call that is
        running and missing, unless it started before tracing did."""
        return [fr.code for fr in self._tls.stack]

    def _traced_codes(self) -> list[types.CodeType]:
        """The code objects traced now: a target resolved later (its module imported later) joins then."""
        return [entry.code for entry in list(self._by_code.values())]

    def _drop_stale(self, fid: int) -> None:
        """A suspended frame whose id a new frame now has was dropped unfinished (its generator freed)."""
        with self._lock:
            stale = self._suspended.pop(fid, None)
        if stale is not None:
            self._write_unwind(stale, "the generator or coroutine was dropped before it finished")

    def _write_unwind(self, fr: _Frame, why: str, outer: Sequence[_Frame] = ()) -> None:
        """One `unwind` record for a call that did not return. It names the compile its entry probe read, or,
        for a target probed only on return (Inductor's compile_to_module), the compile of the nearest call
        under it on the same stack that has one: the call ran inside that compile."""
        entry = self._by_code.get(id(fr.code))
        if not entry or not entry.states:
            return
        # One record per call, whichever hooks share the code object: the unwind belongs to the call.
        state = entry.states[0]
        context = fr.context or next((f.context for f in reversed(outer) if f.context is not None), None)
        compile_id, graph = context or (None, None)
        self.writer.write(schema.PROBE, {
            "stage": state.hook.stage, "target": state.hook.target, "phase": "unwind",
            "call": fr.call, "compile_id": compile_id, "graph": graph,
            "thread": fr.thread or _thread(), "payload": {"why": why},
        })

    def _run_probe(self, state: HookState, phase: str, frame: types.FrameType, retval: Any,
                   call: int) -> tuple[Any, Any] | None:
        """Run one hook's probe and write its record; returns the (compile id, graph kind) it read, None when
        the hook does not apply to this call."""
        hook = state.hook
        locals_ = frame.f_locals
        resolved = state.resolved
        if resolved is not None and resolved.self_type is not None:
            first = frame.f_code.co_varnames[0] if frame.f_code.co_argcount else None
            if first is None or not isinstance(locals_.get(first), resolved.self_type):
                return None
        state.fired += 1
        base = {"stage": hook.stage, "target": hook.target, "phase": phase, "call": call, "thread": _thread()}
        try:
            compile_id, graph = self.profile.context(hook.stage, frame, retval, self._context_state)
        except Exception:  # noqa: BLE001
            compile_id, graph = None, None
        base["compile_id"] = compile_id
        base["graph"] = graph
        t0 = time.perf_counter_ns()
        try:
            payload = hook.probe(ProbeCall(phase, locals_, retval, frame))
        except Exception as exc:  # noqa: BLE001 - recorded, and the compile carries on
            state.errors += 1
            self.writer.write(schema.ERROR, {**base, "error": _error(exc)})
            return compile_id, graph
        if payload is NO_RECORD:
            return compile_id, graph
        base["probe_ns"] = time.perf_counter_ns() - t0
        replaced = self.writer.replaced
        record = {**base, "payload": payload}
        written = self.writer.write(schema.PROBE, record)
        if self.writer.replaced != replaced:  # the writer wrote an error record in its place
            state.errors += 1
        elif written is not None:
            self._observe(record)
        if hook.keep:
            self.kept.append({**base, "payload": payload})
        return compile_id, graph

    def _observe(self, record: dict[str, Any]) -> None:
        if self.observer is None:
            return
        try:
            self.observer(record)
        except Exception:  # noqa: BLE001 - an observer's fault (a closed stderr) must not reach the host
            pass


#: The sessions tracing in this process, for the fork handler below.
_SESSIONS: "weakref.WeakSet[TraceSession]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for session in list(_SESSIONS):
        session._after_fork_in_child()
        if not session.active:
            _SESSIONS.discard(session)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _running_frames() -> dict[int, types.CodeType] | None:
    """Every frame running on some thread now, by id, with its code (a frame object keeps its id while it
    runs); None where the interpreter cannot list them."""
    out: dict[int, types.CodeType] = {}
    try:
        tops = list(sys._current_frames().values())
    except Exception:  # noqa: BLE001
        return None
    for f in tops:
        while f is not None and id(f) not in out:
            out[id(f)] = f.f_code
            f = f.f_back
    return out


def _same_function(a: types.CodeType | None, b: types.CodeType) -> bool:
    """The same function's code: inject runs a rewritten copy of the target's code object."""
    return a is b or (a is not None and (a.co_name, a.co_filename, a.co_firstlineno)
                      == (b.co_name, b.co_filename, b.co_firstlineno))


def _thread() -> dict[str, Any]:
    t = threading.current_thread()
    return {"id": threading.get_ident(), "name": t.name}


def _error(exc: BaseException) -> dict[str, Any]:
    """An exception as plain data. Its own ``__str__`` may raise too: that must not lose the record."""
    try:
        message = str(exc)
        if not isinstance(message, str):
            raise TypeError("__str__ returned a non-string")
    except Exception as inner:  # noqa: BLE001
        message = f"<str() of the exception raised {type(inner).__name__}>"
    try:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=8))
    except Exception as inner:  # noqa: BLE001
        tb = f"<the traceback could not be formatted: {type(inner).__name__}>"
    return {"type": type(exc).__name__, "message": message[:2000], "traceback": tb[-6000:]}

