"""The comparison case for the benchmark: the same probes, captured by monkey-patching.

This is what prov-trace exists to avoid, done as well as a monkey-patcher can:
import every target module, resolve each target to its function object, and
replace EVERY binding of that object found in a module's dict or a class's
dict (including staticmethod/classmethod wrappers) with a wrapper. The wrapper
binds the call's arguments with ``inspect.signature(...).bind`` and runs the
profile's probes at entry and at return, writing the same records to the same
kind of stream (``TraceWriter``).

What it cannot see, and the tracer does: references taken before the patch
(bound methods, closures, ``from x import f`` made into a local), and the final
locals at return (it has only the arguments it bound at entry).
"""

from __future__ import annotations

import importlib
import inspect
import os
import platform
import sys
import threading
import time
import types
from typing import Any

from prov_trace import __version__
from prov_trace.stream import schema
from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, Profile
from prov_trace.stream.writer import TraceWriter
from prov_trace.tracer.targets import TargetSpec, resolve


class _FrameView:
    """Enough of a frame for a profile's context function: the bound arguments, then the real callers."""

    def __init__(self, code: types.CodeType, f_locals: dict, f_back: types.FrameType | None):
        self.f_code = code
        self.f_locals = f_locals
        self.f_back = f_back


class PatchCapture:
    """``with PatchCapture(writer, profile): <compile>`` — install the wrappers, and take them out after."""

    def __init__(self, writer: TraceWriter, profile: Profile):
        self.writer = writer
        self.profile = profile
        self.patched: list[tuple[Any, str, Any]] = []   # (namespace, name, original value)
        self.missed: dict[str, str] = {}
        self.kept: list[dict] = []
        self._calls = iter(range(1, 1 << 62))
        self._busy = threading.local()

    def __enter__(self) -> "PatchCapture":
        self.install()
        return self

    def __exit__(self, *exc) -> None:
        self.uninstall()

    def install(self) -> None:
        self.writer.write(schema.HEADER, {
            "schema": schema.SCHEMA_NAME, "version": list(schema.SCHEMA_VERSION), "tool_version": __version__,
            "python": platform.python_version(), "platform": platform.platform(), "backend": "monkey-patch",
            "backend_reason": "bench/patch_capture.py", "profile": self.profile.name, "argv": sys.argv,
            "pid": os.getpid(), "start_time": time.time(),
        })
        by_function: dict[int, tuple[Any, Any, list[Hook]]] = {}
        for hook in self.profile.hooks:
            spec = TargetSpec.parse(hook.target)
            try:
                importlib.import_module(spec.module)
                resolved = resolve(spec)
            except Exception as exc:  # noqa: BLE001
                self.missed[hook.target] = f"{type(exc).__name__}: {exc}"
                continue
            if resolved.function is None:
                self.missed[hook.target] = "no function object to patch"
                continue
            by_function.setdefault(id(resolved.function), (resolved.function, resolved, []))[2].append(hook)
        for fn, resolved, hooks in by_function.values():
            wrapper = self._wrapper(fn, resolved, hooks)
            if not self._replace_everywhere(fn, wrapper):
                for hook in hooks:
                    self.missed[hook.target] = "no module or class binds the function"

    def uninstall(self) -> None:
        for namespace, name, original in reversed(self.patched):
            setattr(namespace, name, original)
        self.patched.clear()
        finish = getattr(self.profile, "finish", None)
        if finish is not None:
            for rec in finish(list(self.kept)) or ():
                self.writer.write(schema.PROBE, {"stage": rec.get("stage"), "target": rec.get("target"),
                                                 "phase": "finish", "call": None, "compile_id": rec.get("compile_id"),
                                                 "graph": rec.get("graph"), "thread": _thread(),
                                                 "payload": rec.get("payload")})
        self.writer.write(schema.END, {"outcome": "ok", "detail": None, "missed": self.missed,
                                       "records": self.writer.records_written + 1})
        self.writer.close()

    # --- patching ----------------------------------------------------------------------

    def _replace_everywhere(self, fn: Any, wrapper: Any) -> int:
        count = 0
        for module in list(sys.modules.values()):
            d = getattr(module, "__dict__", None)
            if not isinstance(module, types.ModuleType) or not isinstance(d, dict):
                continue
            for name, value in list(d.items()):
                if value is fn:
                    self._set(module, name, value, wrapper)
                    count += 1
                elif isinstance(value, type) and vars(value).get("__module__") == module.__name__:
                    count += self._replace_in_class(value, fn, wrapper)
        return count

    def _replace_in_class(self, cls: type, fn: Any, wrapper: Any) -> int:
        count = 0
        for name, value in list(vars(cls).items()):
            if value is fn:
                self._set(cls, name, value, wrapper)
                count += 1
            elif isinstance(value, (staticmethod, classmethod)) and value.__func__ is fn:
                self._set(cls, name, value, type(value)(wrapper))
                count += 1
        return count

    def _set(self, namespace: Any, name: str, original: Any, new: Any) -> None:
        setattr(namespace, name, new)
        self.patched.append((namespace, name, original))

    def _wrapper(self, fn: Any, resolved: Any, hooks: list[Hook]) -> Any:
        sig = inspect.signature(fn)
        entry = [h for h in hooks if h.event == ENTRY]
        ret = [h for h in hooks if h.event == RETURN]
        self_type = resolved.self_type
        capture = self

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if getattr(capture._busy, "on", False) or (self_type is not None and not (args and isinstance(args[0], self_type))):
                return fn(*args, **kwargs)
            try:
                bound = sig.bind(*args, **kwargs)
                bound.apply_defaults()
                arguments = dict(bound.arguments)
            except TypeError:
                return fn(*args, **kwargs)
            view = _FrameView(fn.__code__, arguments, sys._getframe(1))
            call = next(capture._calls)
            for hook in entry:
                capture._probe(hook, ENTRY, arguments, None, view, call)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                for hook in hooks:
                    capture.writer.write(schema.PROBE, {"stage": hook.stage, "target": hook.target, "phase": "unwind",
                                                        "call": call, "compile_id": None, "graph": None,
                                                        "thread": _thread(), "payload": {"why": "the call exited by an exception"}})
                    break
                raise
            for hook in ret:
                capture._probe(hook, RETURN, arguments, result, view, call)
            return result

        wrapper.__wrapped__ = fn  # type: ignore[attr-defined]
        wrapper.__name__ = getattr(fn, "__name__", "wrapper")
        wrapper.__qualname__ = getattr(fn, "__qualname__", "wrapper")
        return wrapper

    def _probe(self, hook: Hook, phase: str, arguments: dict, retval: Any, view: _FrameView, call: int) -> None:
        self._busy.on = True
        try:
            base = {"stage": hook.stage, "target": hook.target, "phase": phase, "call": call, "thread": _thread()}
            try:
                base["compile_id"], base["graph"] = self.profile.context(hook.stage, view)  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001
                base["compile_id"], base["graph"] = None, None
            t0 = time.perf_counter_ns()
            try:
                payload = hook.probe(ProbeCall(phase, arguments, retval, view))  # type: ignore[arg-type]
            except Exception as exc:  # noqa: BLE001
                self.writer.write(schema.ERROR, {**base, "error": {"type": type(exc).__name__, "message": str(exc)[:2000]}})
                return
            base["probe_ns"] = time.perf_counter_ns() - t0
            self.writer.write(schema.PROBE, {**base, "payload": payload})
            if getattr(hook, "keep", False):
                self.kept.append({**base, "payload": payload})
        finally:
            self._busy.on = False


def _thread() -> dict[str, Any]:
    return {"id": threading.get_ident(), "name": threading.current_thread().name}
