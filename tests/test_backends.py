"""Every event backend this interpreter can run, on toy targets (fast: no torch.compile)."""

from __future__ import annotations

import os
import sys
import threading
import time

import msgpack
import pytest

from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, Profile
from prov_trace.tracer.core import BACKENDS, BackendUnavailable, choose
from prov_trace.tracer.backends.inject import InjectBackend, instrument
from prov_trace.tracer.session import TraceSession
from prov_trace.stream.writer import TraceWriter

HAS_MONITORING = hasattr(sys, "monitoring")
ALL = ("monitoring", "inject", "settrace")
MOD = __name__


# --- the toy targets ---------------------------------------------------------------------


def target_add(a, b):
    c = a + b
    return c * 2


def not_a_target(x):
    return x + 1


def target_raises(x):
    y = x * 2
    raise ValueError(f"boom {y}")


def target_outer(x):
    try:
        target_raises(x)
    except ValueError:
        pass
    return x


def make_adder(n):
    def add(x):
        total = x + n
        return total

    return add


def target_gen(n):
    yield from range(n)


class Widget:
    def __init__(self, k):
        self.k = k

    def scale(self, x):
        return self.k * x


# --- helpers -------------------------------------------------------------------------------


def _snapshot(call: ProbeCall) -> dict:
    simple = {k: v for k, v in call.locals.items() if isinstance(v, (int, str))}
    return {"locals": simple, "retval": call.retval if isinstance(call.retval, (int, str)) else repr(call.retval)}


def _hooks(*names: str) -> tuple[Hook, ...]:
    return tuple(Hook("toy", f"{MOD}:{n}", ev, _snapshot) for n in names for ev in (ENTRY, RETURN))


def _available(name: str) -> None:
    reason = BACKENDS[name].unavailable_reason()
    if reason:
        pytest.skip(f"the {name} backend can't run on Python {sys.version_info.major}.{sys.version_info.minor}: {reason}")
    if name == "settrace" and sys.gettrace() is not None:
        pytest.skip("another sys.settrace tracer (a debugger or coverage) is active")


@pytest.fixture(params=ALL)
def backend(request) -> str:
    _available(request.param)
    return request.param


class Traced:
    def __init__(self, tmp_path, backend: str, *names: str, file: str | None = None):
        self.path = tmp_path / (file or f"{backend}.msgpack")
        self.logs: list[str] = []
        self.session = TraceSession(TraceWriter(self.path), Profile("toy", "toy targets", _hooks(*names)),
                                    backend=backend, log=self.logs.append)

    def __enter__(self) -> "Traced":
        self.session.start()
        return self

    def __exit__(self, *exc) -> None:
        self.session.stop("ok")

    def records(self) -> list[dict]:
        with open(self.path, "rb") as f:
            return list(msgpack.Unpacker(f, raw=False))

    def probes(self, name: str | None = None) -> list[dict]:
        return [r for r in self.records()
                if r["kind"] == "probe" and (name is None or r["target"] == f"{MOD}:{name}")]

    def hooks(self) -> dict[str, dict]:
        return {r["target"]: r for r in self.records() if r["kind"] == "hook"}


# --- every backend -------------------------------------------------------------------------


def test_entry_and_return_carry_arguments_result_and_final_locals(tmp_path, backend):
    with Traced(tmp_path, backend, "target_add") as t:
        assert target_add(2, 3) == 10
        assert target_add(b=1, a=1) == 4
    recs = t.probes("target_add")
    assert [(r["phase"], r["payload"]["locals"]) for r in recs] == [
        (ENTRY, {"a": 2, "b": 3}), (RETURN, {"a": 2, "b": 3, "c": 5}),
        (ENTRY, {"a": 1, "b": 1}), (RETURN, {"a": 1, "b": 1, "c": 2}),
    ]
    assert [r["payload"]["retval"] for r in recs if r["phase"] == RETURN] == [10, 4]
    assert recs[0]["call"] == recs[1]["call"] != recs[2]["call"] == recs[3]["call"]
    header = t.records()[0]
    assert header["backend"] == backend
    hook = t.hooks()[f"{MOD}:target_add"]
    assert hook["installed"] and hook["fired"] == 2 and hook["reason"] is None


def test_a_function_that_is_not_a_target_gets_no_events(tmp_path, backend):
    before = not_a_target.__code__
    with Traced(tmp_path, backend, "target_add") as t:
        assert not_a_target.__code__ is before
        assert sum(not_a_target(i) for i in range(100)) == 5050
        target_add(1, 1)
    assert {r["target"] for r in t.probes()} == {f"{MOD}:target_add"}
    assert len(t.probes()) == 2


def test_an_exception_leaving_a_target_is_paired_as_unwind(tmp_path, backend):
    with Traced(tmp_path, backend, "target_outer", "target_raises") as t:
        assert target_outer(3) == 3
        with pytest.raises(ValueError):
            target_raises(4)
    recs = [(r["target"].split(":")[1], r["phase"], r["call"]) for r in t.probes()]
    outer, inner, last = recs[0][2], recs[1][2], recs[5][2]
    assert recs == [
        ("target_outer", ENTRY, outer),
        ("target_raises", ENTRY, inner),
        ("target_raises", "unwind", inner),   # revealed by the outer return
        ("target_outer", RETURN, outer),
        ("target_raises", ENTRY, last),
        ("target_raises", "unwind", last),    # revealed when tracing stopped
    ]
    unwinds = [r for r in t.probes() if r["phase"] == "unwind"]
    # The second is found when tracing stops: its frame is on no thread's stack by then, so it raised too.
    assert [u["payload"]["why"] for u in unwinds] == ["the call exited by an exception"] * 2


def target_stops_tracing(session):
    session.stop("ok")
    return 1


def test_a_call_still_running_when_tracing_stops_says_so(tmp_path, backend):
    with Traced(tmp_path, backend, "target_stops_tracing") as t:
        assert target_stops_tracing(t.session) == 1
    recs = [(r["phase"], r.get("payload", {}).get("why")) for r in t.probes()]
    assert recs == [(ENTRY, None), ("unwind", "the call had not returned when tracing stopped")]


def test_threads_started_after_tracing_started_are_traced(tmp_path, backend):
    results = []
    with Traced(tmp_path, backend, "target_add") as t:
        worker = threading.Thread(target=lambda: results.append(target_add(5, 6)), name="late-worker")
        worker.start()
        worker.join()
    assert results == [22]
    recs = t.probes("target_add")
    assert [(r["phase"], r["thread"]["name"]) for r in recs] == [(ENTRY, "late-worker"), (RETURN, "late-worker")]
    assert recs[1]["payload"]["retval"] == 22


def test_a_bound_method_taken_before_tracing_still_fires(tmp_path, backend):
    bound = Widget(3).scale
    with Traced(tmp_path, backend, "Widget.scale") as t:
        assert bound(4) == 12
    assert [(r["phase"], r["payload"]["retval"]) for r in t.probes()] == [(ENTRY, "None"), (RETURN, 12)]


def test_tracing_stops_cleanly(tmp_path, backend):
    with Traced(tmp_path, backend, "target_add") as t:
        target_add(1, 2)
    target_add(1, 2)  # after stop: nothing more is written, nothing breaks
    assert len(t.probes()) == 2
    assert t.records()[-1]["kind"] == "end"
    assert sys.gettrace() is None
    if HAS_MONITORING:
        assert all(sys.monitoring.get_tool(i) != "prov-trace" for i in range(6))


# --- inject --------------------------------------------------------------------------------


@pytest.fixture
def rewrite_despite_dynamo(monkeypatch):
    """These tests are about rewriting code objects. Once torch._dynamo is imported (by any earlier test),
    inject leaves functions Dynamo may trace to settrace (tested on its own): say Dynamo skips these."""
    from prov_trace.tracer.backends import inject

    monkeypatch.setattr(inject, "dynamo_may_trace", lambda code, function, **kw: False)


def test_inject_puts_the_original_code_objects_back(rewrite_despite_dynamo, tmp_path):
    _available("inject")
    codes = (target_add.__code__, Widget.scale.__code__)
    with Traced(tmp_path, "inject", "target_add", "Widget.scale"):
        assert target_add.__code__ is not codes[0] and Widget.scale.__code__ is not codes[1]
        assert target_add.__code__.co_qualname == "target_add"
    assert target_add.__code__ is codes[0] and Widget.scale.__code__ is codes[1]


def test_inject_resolution_sees_the_original_code_while_traced(rewrite_despite_dynamo, tmp_path):
    _available("inject")
    from prov_trace.tracer.targets import TargetSpec, resolve

    original = target_add.__code__
    with Traced(tmp_path, "inject", "target_add"):
        resolved = resolve(TargetSpec.parse(f"{MOD}:target_add"))
        assert resolved.code is original and resolved.function is target_add
        assert target_add.__code__ is not original


def test_inject_falls_back_to_settrace_for_a_code_with_no_function(tmp_path, capsys):
    _available("inject")
    _available("settrace")
    add5 = make_adder(5)
    with Traced(tmp_path, "inject", "make_adder.<locals>.add") as t:
        assert add5(1) == 6
    assert sys.gettrace() is None
    assert [(r["phase"], r["payload"]["locals"].get("total")) for r in t.probes()] == [(ENTRY, None), (RETURN, 6)]
    hook = t.hooks()[f"{MOD}:make_adder.<locals>.add"]
    assert hook["installed"]
    err = capsys.readouterr().err
    assert "inject can't instrument make_adder.<locals>.add" in err and "settrace instead" in err
    # The trace says so too, in the hook's notes (the report's Hooks table), not only on stderr.
    assert [n for n in hook["notes"] if "settrace" in n] == [
        "inject watches it with settrace instead: there is no function object whose __code__ could be replaced "
        "(a nested function is made afresh on every call; a script's own function only once the script runs)"], hook


def test_two_inject_sessions_on_one_function(rewrite_despite_dynamo, tmp_path, capsys):
    _available("inject")
    _available("settrace")
    original = target_add.__code__
    with Traced(tmp_path, "inject", "target_add", file="outer.msgpack") as outer:
        rewritten = target_add.__code__
        with Traced(tmp_path, "inject", "target_add", file="inner.msgpack") as inner:
            assert target_add.__code__ is rewritten  # the inner session watches the outer's rewrite with settrace
            assert target_add(1, 2) == 6
        assert sys.gettrace() is None
        assert target_add(2, 2) == 8
    assert target_add.__code__ is original
    assert [(r["phase"], r["payload"]["retval"]) for r in inner.probes()] == [(ENTRY, "None"), (RETURN, 6)]
    assert [r["payload"]["retval"] for r in outer.probes() if r["phase"] == RETURN] == [6, 8]
    assert "another prov-trace session has already rewritten its __code__" in capsys.readouterr().err


def test_inject_refuses_a_generator_in_one_sentence(tmp_path):
    _available("inject")
    with Traced(tmp_path, "inject", "target_gen") as t:
        assert list(target_gen(3)) == [0, 1, 2]
    hook = t.hooks()[f"{MOD}:target_gen"]
    assert not hook["installed"] and "generator" in hook["reason"] and "\n" not in hook["reason"]
    assert t.probes() == []


def _shapes():
    """Functions whose bytecode exercises the rewriting: cells, free vars, try/finally, with, loops, kw-only."""

    def closure_user(x):
        y = x + 1

        def inner():
            return y

        return inner()

    k = 10

    def free_var(x):
        return x + k

    def try_finally(x):
        try:
            if x > 0:
                return "positive"
        finally:
            x += 1
        return None

    def try_except_return(x):
        try:
            return 1 // x
        except ZeroDivisionError:
            return "div0"

    def loop(n, *, step=1):
        total = 0
        for i in range(0, n, step):
            if i == 7:
                break
            total += i
        else:
            return -total
        return total

    def with_block(x):
        import contextlib

        with contextlib.nullcontext(x) as v:
            return v * 2

    def only_raises(x):
        raise KeyError(x)

    class S:
        def m(self, x):
            return super().__repr__() and x

    return [
        (closure_user, [(1,), (5,)]), (free_var, [(1,)]), (try_finally, [(1,), (-1,)]),
        (try_except_return, [(2,), (0,)]), (loop, [(5,), (20,), (6,)]), (with_block, [(4,)]),
        (only_raises, [(1,)]), (S.m, [(S(), 3)]),
    ]


@pytest.mark.parametrize("fn,calls", _shapes(), ids=lambda v: getattr(v, "__name__", ""))
def test_inject_keeps_behaviour_and_reports_every_exit(fn, calls):
    _available("inject")
    seen = []

    def probe(phase, retval):
        seen.append((phase, retval))

    expected = [_outcome(fn, a) for a in calls]
    original = fn.__code__
    fn.__code__ = instrument(original, probe, frozenset((ENTRY, RETURN)))
    # The frame keeps its size (the probes need 5 slots at most), so the frames above it are laid out
    # in the interpreter's stack chunks as untraced (docs/benchmarks.md).
    assert fn.__code__.co_stacksize == max(original.co_stacksize, 5)
    try:
        got = [_outcome(fn, a) for a in calls]
    finally:
        fn.__code__ = original
    assert got == expected
    assert seen == _probe_calls(expected)


def _outcome(fn, args):
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # noqa: BLE001
        return ("raised", repr(exc))


def _probe_calls(expected):
    """The probe calls a run with these outcomes makes: an entry for each call, a return for each that returned."""
    want = []
    for kind, value in expected:
        want.append((ENTRY, None))
        if kind == "ok":
            want.append((RETURN, value))
    return want


def _nested_factory(k):
    def inner(x):
        return x + k
    return inner(1), inner.__code__


@pytest.mark.parametrize("fn,calls", _shapes() + [(_nested_factory, [(2,)])], ids=lambda v: getattr(v, "__name__", ""))
def test_inject_rewrites_kept_on_disk_behave_like_fresh_ones(fn, calls, tmp_path):
    """A rewrite read back from the cache (a new RewriteCache on the same directory, as a later run has)
    calls the same probes with the same values, and keeps the original's nested code objects."""
    _available("inject")
    from prov_trace.tracer.backends.inject import __file__ as INJECT_FILE
    from prov_trace.tracer.backends.rewrites import RewriteCache

    expected = [_outcome(fn, a) for a in calls]
    original = fn.__code__
    both = frozenset((ENTRY, RETURN))
    for run, (hits, misses) in enumerate([(0, 1), (1, 0)]):
        seen = []
        cache = RewriteCache(tmp_path, INJECT_FILE)
        new = cache.rewrite(original, both, lambda phase, retval: seen.append((phase, retval)), instrument)
        assert (cache.hits, cache.misses) == (hits, misses), run
        assert len(list(cache.directory.glob("*.marshal"))) == 1
        nested = [c for c in new.co_consts if isinstance(c, type(original))]
        assert all(any(c is o for o in original.co_consts) for c in nested)  # the original's own objects
        assert new.co_stacksize == max(original.co_stacksize, 5)
        fn.__code__ = new
        try:
            got = [_outcome(fn, a) for a in calls]
        finally:
            fn.__code__ = original
        assert got == expected
        assert seen == _probe_calls(expected)
        if fn is _nested_factory:  # the function `def inner` makes runs the original's nested code object
            assert got[0][1][1] is expected[0][1][1]


def test_inject_cache_rewrites_again_where_an_entry_does_not_fit(tmp_path):
    """A damaged entry, or one written for other code under the same name, is a miss: the code is
    rewritten, and the entry replaced; a cache directory that can't be written is no cache, not an error."""
    _available("inject")
    from prov_trace.tracer.backends.inject import __file__ as INJECT_FILE
    from prov_trace.tracer.backends.rewrites import RewriteCache

    def f(x):
        return x * 2

    both = frozenset((ENTRY, RETURN))
    cache = RewriteCache(tmp_path, INJECT_FILE)
    cache.rewrite(f.__code__, both, lambda *a: None, instrument)
    (entry,) = cache.directory.glob("*.marshal")
    entry.write_bytes(entry.read_bytes()[:40])  # cut short
    again = RewriteCache(tmp_path, INJECT_FILE)
    seen = []
    new = again.rewrite(f.__code__, both, lambda p, v: seen.append((p, v)), instrument)
    assert (again.hits, again.misses) == (0, 1)
    f_new = type(f)(new, f.__globals__)
    assert f_new(3) == 6 and seen == [(ENTRY, None), (RETURN, 6)]
    # Another function's entry under this one's name: it does not fit, so it is not used.
    def g(x):
        return x * 3

    other = RewriteCache(tmp_path / "other", INJECT_FILE)
    other.rewrite(g.__code__, both, lambda *a: None, instrument)
    (g_entry,) = other.directory.glob("*.marshal")
    entry.write_bytes(g_entry.read_bytes())
    third = RewriteCache(tmp_path, INJECT_FILE)
    new = third.rewrite(f.__code__, both, lambda *a: None, instrument)
    assert (third.hits, third.misses) == (0, 1) and type(f)(new, f.__globals__)(3) == 6
    # A cache root that is a file: nothing can be kept, every rewrite is made fresh, nothing raises.
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    none = RewriteCache(blocked, INJECT_FILE)
    new = none.rewrite(f.__code__, both, lambda *a: None, instrument)
    assert (none.hits, none.misses) == (0, 1) and type(f)(new, f.__globals__)(4) == 8


def test_inject_cache_prunes_directories_no_run_used_for_a_month(tmp_path):
    """A run that creates its tag directory removes the sibling tag directories unused for STALE_DAYS days,
    and nothing else: a recent one, a directory that is not a tag, and one holding a file inject never
    writes all stay. A hit marks its directory used, so a directory in use is never stale."""
    _available("inject")
    from prov_trace.tracer.backends.inject import __file__ as INJECT_FILE
    from prov_trace.tracer.backends.rewrites import STALE_DAYS, RewriteCache

    def f(x):
        return x + 1

    inject = tmp_path / "inject"
    old = time.time() - (STALE_DAYS + 1) * 86_400

    def tag_dir(name, *entries):
        d = inject / name
        d.mkdir(parents=True)
        for e in entries:
            (d / e).write_bytes(b"x")
        os.utime(d, (old, old))
        return d

    stale = tag_dir("cpython-311-" + "a" * 20, "k1.marshal", "k2.marshal", ".prov-trace-x.tmp")
    foreign = tag_dir("cpython-310-" + "b" * 20, "k.marshal", "notes.txt")
    not_a_tag = tag_dir("mine", "k.marshal")
    recent = tag_dir("cpython-39-" + "c" * 20, "k.marshal")
    os.utime(recent)  # used just now
    both = frozenset((ENTRY, RETURN))
    cache = RewriteCache(tmp_path, INJECT_FILE)
    cache.rewrite(f.__code__, both, lambda *a: None, instrument)
    assert cache.misses == 1 and cache.directory.is_dir()
    assert not stale.exists()
    assert foreign.exists() and not_a_tag.exists() and recent.exists()
    # A later run that only reads its month-old directory marks it used.
    os.utime(cache.directory, (old, old))
    again = RewriteCache(tmp_path, INJECT_FILE)
    again.rewrite(f.__code__, both, lambda *a: None, instrument)
    assert again.hits == 1 and time.time() - cache.directory.stat().st_mtime < 3600


# --- choosing ------------------------------------------------------------------------------


def _noop(*args) -> None:
    pass


@pytest.mark.skipif(HAS_MONITORING, reason="sys.monitoring exists on this Python (3.12+)")
def test_monitoring_on_311_fails_with_one_sentence():
    with pytest.raises(BackendUnavailable) as info:
        choose("monitoring", _noop)
    msg = str(info.value)
    assert msg == ("the monitoring backend can't run here: sys.monitoring isn't available in Python "
                   f"{sys.version_info.major}.{sys.version_info.minor} (it needs 3.12+)")


@pytest.mark.skipif(HAS_MONITORING, reason="sys.monitoring exists on this Python (3.12+)")
def test_auto_on_311_takes_inject_and_says_why():
    backend, why = choose("auto", _noop)
    try:
        assert backend.name == "inject"
        assert why.startswith("inject is the best backend available (not monitoring: sys.monitoring isn't available")
    finally:
        backend.stop()


@pytest.mark.skipif(not HAS_MONITORING, reason="sys.monitoring needs Python 3.12+")
def test_auto_on_312_takes_monitoring():
    backend, why = choose("auto", _noop)
    try:
        assert backend.name == "monitoring" and why == "monitoring is the best backend available"
    finally:
        backend.stop()


def test_an_unknown_backend_names_the_choices():
    with pytest.raises(BackendUnavailable, match=r"^there is no backend named 'fast': choose one of auto, monitoring, inject, settrace$"):
        choose("fast", _noop)


def test_inject_names_what_it_lacks(monkeypatch):
    monkeypatch.setattr(sys, "version_info", (3, 99, 0, "final", 0))
    reason = InjectBackend.unavailable_reason()
    assert reason == "inject knows the bytecode of Python 3.11 to 3.13 only, and this is Python 3.99"
    monkeypatch.undo()
    monkeypatch.setitem(sys.modules, "bytecode", None)
    assert InjectBackend.unavailable_reason() == "the bytecode package isn't installed (pip install bytecode)"


def test_auto_takes_the_cheapest_backend_that_can_run_and_says_why_not_the_others(monkeypatch):
    """`auto` walks monitoring, inject, settrace; each one that can't run is named with its reason."""
    from prov_trace.tracer.backends.monitoring import MonitoringBackend

    def dispatch(*a):
        pass

    backend, why = choose("auto", dispatch)
    try:
        expected = "monitoring" if HAS_MONITORING else "inject"
        assert backend.name == expected
        assert why.startswith(f"{expected} is the best backend available")
    finally:
        backend.stop()
    monkeypatch.setattr(MonitoringBackend, "unavailable_reason", classmethod(lambda cls: "not today"))
    monkeypatch.setattr(InjectBackend, "unavailable_reason", classmethod(lambda cls: "nor this"))
    backend, why = choose("auto", dispatch)
    try:
        assert backend.name == "settrace"
        assert why == "settrace is the best backend available (not monitoring: not today; not inject: nor this)"
    finally:
        backend.stop()
    assert set(ALL) == set(BACKENDS)
