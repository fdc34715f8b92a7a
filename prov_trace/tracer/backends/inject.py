"""The ``inject`` backend: a probe call compiled into each target's own bytecode.

For Python 3.11, where ``sys.monitoring`` does not exist, this is the backend
that costs nothing outside the targets. For each target function it builds a
new code object with the ``bytecode`` package:

* right after the prologue (``MAKE_CELL`` / ``COPY_FREE_VARS`` / ``RESUME``,
  which must stay first) a call ``probe("entry", None)``;
* before every ``RETURN_VALUE`` a call ``probe("return", <the value>)`` on a
  copy of the value about to be returned (``RETURN_CONST c`` on 3.12+ gets
  ``probe("return", c)``).

``probe`` is a closure placed in the new code's ``co_consts`` and loaded with
``LOAD_CONST``, so no global or attribute lookup is added to the target. It
reads the target's frame with ``sys._getframe(1)`` and hands the *original*
code object to the session's dispatch, so the session sees exactly what the
other backends deliver. The new code is assigned to ``function.__code__``: the
function object stays the same, so references taken before tracing started
(bound methods, ``functools.wraps`` wrappers, registries) hit the probe too.
``stop()`` puts the original code object back, the identical object.
While traced, target resolution sees through the new code objects
(``targets.REPLACED_CODE``), so a second hook on the same function, or one
resolved later, binds to the original code object like the first.

Not instrumented, and why:

* generators and coroutines: their "return" is every ``yield`` suspension and
  their "entry" every resumption; the target is refused with a sentence.
* a function Dynamo may trace (a user's helper that ``forward`` calls, an
  ``nn.Module.forward``): Dynamo would trace the probe call compiled into it as
  part of the user's code, and it cannot (the compile fails). Such a code object
  is watched by the ``settrace`` fallback below, and the compile is the one an
  untraced run makes. Dynamo's own rules (``torch._dynamo.trace_rules.check``,
  read, never changed) say which functions it skips; before Dynamo is imported
  they can't be asked, so a function rewritten then is asked again the moment
  ``torch._dynamo`` has been imported, before it can compile anything, and is
  put back and moved to the fallback where Dynamo may trace it. Only a user's
  probe target is asked: a profile's hook is a step of the compile pipeline
  (``Hook.pipeline``), which never runs inside a graph Dynamo traces, though
  Dynamo's rules would trace a third-party one (torch-spyre's) if it did.
* a code object with no function to assign to (a ``<locals>`` function, whose
  function objects are made afresh on every call), one whose ``__code__`` cannot
  be assigned or rewritten, or one another prov-trace session has already
  rewritten: it is watched by a ``settrace`` backend started for these codes
  only, and a line on stderr says so. That fallback covers the thread that
  started it and threads started later, not threads already running.

The rewrite keeps CPython's own exception-table depths and sets the stack size
to the original's plus 4 (what one inserted call needs), instead of running the
``bytecode`` package's flow analysis: that is most of its cost, and on a few
Inductor functions its depths differ from the compiler's. Checked over every
plain function in torch._dynamo, torch._inductor and torch.fx (about 14,900
on 3.11 and 3.12): same names, flags and exception depths as the original.
On 3.12 and 3.13 (each with its own call sequence), where `auto` picks the
monitoring backend, tests/test_parity.py checks that inject traces the reference
MLP's compile with the same records as settrace; CI runs it on 3.12, and it was
run on 3.13.0 with torch 2.13.0 (docs/compat.md).

When several function objects share one code object (a factory returning
closures), only the function the target resolved to is instrumented.

Each rewrite is kept on disk (``rewrites.py``) and read back by later runs where
the entry's original equals the target's code object, so a run pays the
``bytecode`` package only for functions it has not rewritten before.
"""

from __future__ import annotations

import importlib.util
import inspect
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

from prov_trace import files, voice
from prov_trace.contract import ENTRY, RETURN
from prov_trace.tracer.backends.base import Backend, BackendUnavailable, Dispatch
from prov_trace.tracer.backends.rewrites import RewriteCache
from prov_trace.tracer.backends.settrace import SettraceBackend
from prov_trace.tracer.imports import ImportWatcher
from prov_trace.tracer.targets import REPLACED_CODE, original_code

#: Bytecode layouts this module knows: the call sequence changed in 3.11, 3.12 and 3.13.
SUPPORTED = ((3, 11), (3, 12), (3, 13))

_UNINSTRUMENTABLE = (
    inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
)


#: Why a function Dynamo may trace is not rewritten.
DYNAMO_TRACES = ("Dynamo may trace it into a compiled graph (inline it, or compile it as a frame), and it would "
                 "trace the probe call compiled into it too")


def dynamo_may_trace(code: types.CodeType, function: Any, *, imported: bool = False) -> bool | None:
    """Whether Dynamo may trace `code` (inline it into a graph, or compile its frame), by Dynamo's own rules;
    None while ``torch._dynamo`` is not (wholly) imported, when its rules can't be asked. `imported`: the
    caller knows its import has finished executing (the import watcher calls right after it does, while
    importlib still marks the module ``_initializing``)."""
    dynamo = sys.modules.get("torch._dynamo")
    rules = sys.modules.get("torch._dynamo.trace_rules")
    if dynamo is None or rules is None or (
            not imported and getattr(getattr(dynamo, "__spec__", None), "_initializing", False)):
        return None
    try:
        skipped = rules.check(function if function is not None else code, is_inlined_call=True) and rules.check(code)
    except Exception:  # noqa: BLE001 - rules that can't answer: the safe side
        return True
    return not skipped


def _log(msg: str) -> None:
    print(f"{voice.name()}: {msg}", file=sys.stderr, flush=True)


@dataclass
class _Rewrite:
    code: types.CodeType          # the original: reported to the session, restored by stop()
    new_code: types.CodeType
    function: Any
    phases: set[str]              # the phases dispatched; the probe reads it on every call


class InjectBackend(Backend):
    """Rewrites each target function's ``__code__`` to call a probe at entry and at each return."""

    name = "inject"

    def __init__(self) -> None:
        self._dispatch: Dispatch | None = None
        self._rewrites: dict[int, _Rewrite] = {}
        self._settrace: SettraceBackend | None = None
        #: id(code) -> (code, why) for the codes watched by the settrace fallback.
        self.fallbacks: dict[int, tuple[types.CodeType, str]] = {}
        #: id(code object the fallback's frames run) -> the target's code object reported for it.
        self._aliases: dict[int, types.CodeType] = {}
        self._runs: dict[int, types.CodeType] = {}   # id(target code) -> the code its frames run
        #: id(code) of rewrites made before Dynamo's rules could be asked: asked once torch._dynamo is imported.
        self._unsure: set[int] = set()
        self._dynamo_watch: ImportWatcher | None = None
        self._problems: list[str] = []
        self.log: Callable[[str], None] = _log
        #: Rewrites kept from earlier runs (rewrites.py); set up by start().
        self.cache: RewriteCache | None = None

    @classmethod
    def unavailable_reason(cls) -> str | None:
        version = sys.version_info[:2]
        if version not in SUPPORTED:
            lo, hi = SUPPORTED[0], SUPPORTED[-1]
            return (f"inject knows the bytecode of Python {lo[0]}.{lo[1]} to {hi[0]}.{hi[1]} only, "
                    f"and this is Python {version[0]}.{version[1]}")
        # Found, not imported (~14 ms): a run whose rewrites all come from the cache never needs it.
        if "bytecode" in sys.modules:
            found = sys.modules["bytecode"] is not None
        else:
            try:
                found = importlib.util.find_spec("bytecode") is not None
            except (ImportError, ValueError):
                found = False
        if not found:
            return "the bytecode package isn't installed (pip install bytecode)"
        return None

    def start(self, dispatch: Dispatch) -> None:
        reason = self.unavailable_reason()
        if reason:
            raise BackendUnavailable(reason)
        self._dispatch = dispatch
        if self.cache is None:
            try:
                root = files.cache_root()
            except Exception:  # noqa: BLE001 - no home directory to find a cache in: rewrite every time
                root = None
            self.cache = RewriteCache(root, __file__)

    def watch(self, code: types.CodeType, phases: frozenset[str], function: Any = None, *,
              pipeline: bool = False) -> None:
        if self._dispatch is None:
            raise BackendUnavailable("the inject backend has not been started")
        if code.co_flags & _UNINSTRUMENTABLE:
            raise BackendUnavailable(
                f"{code.co_qualname} is a generator or coroutine, whose entry and return inject can't instrument"
            )
        done = self._rewrites.get(id(code))
        if done is not None and done.code is code:
            done.phases.update(phases)  # both probe calls are always compiled in; this only widens the filter
            return
        if id(code) in self.fallbacks and self.fallbacks[id(code)][0] is code:
            assert self._settrace is not None
            self._settrace.watch(self._runs[id(code)], phases)
            return
        if function is None:
            self._fall_back(code, phases, "there is no function object whose __code__ could be replaced "
                                          "(a nested function is made afresh on every call; a script's "
                                          "own function only once the script runs)")
            return
        current = getattr(function, "__code__", None)
        if current is not code:
            if isinstance(current, types.CodeType) and original_code(current) is code:
                why = "another prov-trace session has already rewritten its __code__"
            else:
                why = f"{function!r} does not hold this code object in __code__"
            self._fall_back(code, phases, why, runs=current if isinstance(current, types.CodeType) else code)
            return
        # A pipeline step runs outside any graph Dynamo traces, wherever it lives (torch-spyre's, which Dynamo's
        # rules would trace as third-party code); a user's probe target is asked about.
        may_trace = False if pipeline else dynamo_may_trace(code, function)
        if may_trace:
            self._fall_back(code, phases, DYNAMO_TRACES)
            return
        self._rewrite(code, phases, function)
        if may_trace is None and id(code) in self._rewrites:
            self._unsure.add(id(code))
            self._watch_for_dynamo()

    def _watch_for_dynamo(self) -> None:
        if self._dynamo_watch is None:
            self._dynamo_watch = ImportWatcher(self._on_dynamo_imported)
            self._dynamo_watch.watch("torch._dynamo")
            self._dynamo_watch.install()

    def _on_dynamo_imported(self, name: str) -> None:
        """torch._dynamo has been imported (it can't have compiled anything yet): ask its rules about every
        rewrite made before, and put back the ones it may trace, watching them with settrace instead."""
        if self._dynamo_watch is not None:
            self._dynamo_watch.uninstall()
            self._dynamo_watch = None
        unsure, self._unsure = self._unsure, set()
        for key in unsure:
            rw = self._rewrites.get(key)
            if rw is None or self._dispatch is None:
                continue
            try:
                if dynamo_may_trace(rw.code, rw.function, imported=True) is False:
                    continue
                if rw.function.__code__ is rw.new_code:
                    rw.function.__code__ = rw.code
                REPLACED_CODE.pop(id(rw.new_code), None)
                del self._rewrites[key]
                self._fall_back(rw.code, frozenset(rw.phases), DYNAMO_TRACES)
            except Exception as exc:  # noqa: BLE001 - never into the host's import
                self.log(f"inject: {rw.code.co_qualname} could not be moved off its rewrite "
                         f"({type(exc).__name__}: {exc}); it is no longer watched")

    def _rewrite(self, code: types.CodeType, phases: frozenset[str], function: Any) -> None:
        wanted = set(phases)
        try:
            probe = _make_probe(code, self, wanted)
            both = frozenset((ENTRY, RETURN))
            new_code = (self.cache.rewrite(code, both, probe, instrument) if self.cache is not None
                        else instrument(code, probe, both))
        except Exception as exc:  # noqa: BLE001 - any bytecode it can't rewrite
            self._fall_back(code, phases, f"its bytecode could not be rewritten ({type(exc).__name__}: {exc})")
            return
        try:
            function.__code__ = new_code
        except (AttributeError, TypeError, ValueError) as exc:
            self._fall_back(code, phases, f"its __code__ can't be assigned ({exc})")
            return
        REPLACED_CODE[id(new_code)] = (new_code, code)
        self._rewrites[id(code)] = _Rewrite(code, new_code, function, wanted)

    def stop(self) -> None:
        self._dispatch = None  # probes still running in live frames go quiet at once
        if self._dynamo_watch is not None:
            self._dynamo_watch.uninstall()
            self._dynamo_watch = None
        self._unsure.clear()
        problems = []
        for rw in self._rewrites.values():
            REPLACED_CODE.pop(id(rw.new_code), None)
            if rw.function.__code__ is rw.new_code:
                rw.function.__code__ = rw.code
            else:
                problems.append(rw.code.co_qualname)
        self._rewrites.clear()
        if self._settrace is not None:
            self._settrace.stop()
            self._problems += self._settrace.problems()
            self._settrace = None
        self.fallbacks.clear()
        self._aliases.clear()
        self._runs.clear()
        if problems:
            self.log("left __code__ alone where someone replaced it while traced: " + ", ".join(problems))

    def problems(self) -> list[str]:
        return list(self._problems)

    def watch_note(self, code: types.CodeType) -> str | None:
        fallback = self.fallbacks.get(id(code))
        if fallback is None or fallback[0] is not code:
            return None
        return f"inject watches it with settrace instead: {fallback[1]}"

    def _fall_back(self, code: types.CodeType, phases: frozenset[str], why: str,
                   runs: types.CodeType | None = None) -> None:
        """Watch `code` with settrace; `runs` is the code object its frames actually execute, when not `code`."""
        if self._settrace is None:
            st = SettraceBackend()
            try:
                st.start(self._dispatch_fallback)
            except BackendUnavailable as exc:
                raise BackendUnavailable(f"inject can't instrument it: {why}; and the settrace fallback can't run: {exc}") from None
            self._settrace = st
        runs = code if runs is None else runs
        self._settrace.watch(runs, phases)
        self._aliases[id(runs)] = code
        self._runs[id(code)] = runs
        self.fallbacks[id(code)] = (code, why)
        self.log(f"inject can't instrument {code.co_qualname}: {why}; watching it with settrace instead")

    def _dispatch_fallback(self, code: types.CodeType, phase: str, frame: types.FrameType, retval: Any) -> None:
        dispatch = self._dispatch
        if dispatch is not None:
            dispatch(self._aliases.get(id(code), code), phase, frame, retval)


def _make_probe(code: types.CodeType, backend: InjectBackend, wanted: set[str]) -> Callable[[str, Any], None]:
    """The callable compiled into the new code: it reports against the original code object."""
    getframe = sys._getframe

    def probe(phase: str, retval: Any) -> None:
        dispatch = backend._dispatch
        if dispatch is not None and phase in wanted:
            try:
                dispatch(code, phase, getframe(1), retval)
            except Exception:  # noqa: BLE001 - never into the host (the session already catches its own)
                pass

    probe.__qualname__ = probe.__name__ = f"prov_trace_probe<{code.co_qualname}>"
    return probe


def instrument(code: types.CodeType, probe: Callable[[str, Any], None], phases: frozenset[str]) -> types.CodeType:
    """A copy of `code` that calls ``probe("entry", None)`` first and ``probe("return", value)`` before each return."""
    from bytecode import Bytecode, Instr

    version = sys.version_info[:2]
    if version not in SUPPORTED:
        raise RuntimeError(f"Python {version[0]}.{version[1]} bytecode is not supported")

    def call(loc: Any, args: list) -> list:
        # 3.11: NULL, callable, args, PRECALL, CALL. 3.12: NULL, callable, args, CALL. 3.13: callable, NULL, args, CALL.
        if version >= (3, 13):
            seq = [Instr("LOAD_CONST", probe, location=loc), Instr("PUSH_NULL", location=loc)]
        else:
            seq = [Instr("PUSH_NULL", location=loc), Instr("LOAD_CONST", probe, location=loc)]
        seq += args
        if version == (3, 11):
            seq.append(Instr("PRECALL", 2, location=loc))
        seq += [Instr("CALL", 2, location=loc), Instr("POP_TOP", location=loc)]
        return seq

    bc = Bytecode.from_code(code, conserve_exception_block_stackdepth=True)
    out: list = []
    entered = ENTRY not in phases
    for ins in bc:
        if RETURN in phases and isinstance(ins, Instr) and ins.name in ("RETURN_VALUE", "RETURN_CONST"):
            loc = ins.location
            if ins.name == "RETURN_VALUE":
                # Stack: value, NULL/probe, probe/NULL, "return" -> COPY 4 is the value.
                value = Instr("COPY", 4, location=loc)
            else:
                value = Instr("LOAD_CONST", ins.arg, location=loc)
            out += call(loc, [Instr("LOAD_CONST", RETURN, location=loc), value])
        out.append(ins)
        if not entered and isinstance(ins, Instr) and ins.name == "RESUME":
            loc = ins.location
            out += call(loc, [Instr("LOAD_CONST", ENTRY, location=loc), Instr("LOAD_CONST", None, location=loc)])
            entered = True
    if not entered:
        raise RuntimeError("no RESUME instruction to put the entry probe after")
    bc[:] = out
    # Seed the local names in their original order (bytecode would number them by first use),
    # so co_varnames, and the order of frame.f_locals, stay as they were.
    bc.argnames = list(code.co_varnames)
    # Each inserted sequence is balanced and pushes 4 values above the depth at its point, so the
    # exception table's depths (read from the original) stay right: no control-flow analysis needed,
    # which is most of bytecode's cost. And the stack size stays the original's: the entry sequence
    # runs on an empty stack, and CPython (3.11-3.13) returns with nothing on the stack but the value
    # (RETURN_VALUE asserts it; RETURN_CONST has not even that), so the probes need 4 and 5 slots. A
    # frame the same size as untraced keeps every frame the compile pushes above a target where it
    # would be in the interpreter's 16 KiB stack chunks, so no call lands on a chunk's edge that
    # would not untraced (each such call maps and unmaps a chunk: docs/benchmarks.md).
    concrete = bc.to_concrete_bytecode(compute_exception_stack_depths=False)
    for entry in concrete.exception_table or ():
        # bytecode 0.19 can lay out an empty range when it re-reads code it wrote itself;
        # assembling that would loop forever, so refuse (the caller falls back to settrace).
        if entry.stop_offset < entry.start_offset or entry.stack_depth < 0:
            raise RuntimeError("the rewritten exception table has an empty range")
    new = concrete.to_code(stacksize=max(code.co_stacksize, 5 if RETURN in phases else 4),
                           compute_exception_stack_depths=False)
    for attr in ("co_name", "co_qualname", "co_filename", "co_firstlineno", "co_argcount",
                 "co_posonlyargcount", "co_kwonlyargcount", "co_varnames", "co_freevars", "co_cellvars", "co_flags"):
        if getattr(new, attr) != getattr(code, attr):
            raise RuntimeError(f"rewriting changed {attr}")
    return new

