"""Target strings and their resolution to code objects (no torch needed)."""

from __future__ import annotations

import functools
import sys
import textwrap

import pytest

from prov_trace.tracer.targets import ResolveError, TargetError, TargetSpec, resolve


def deco(fn):
    @functools.wraps(fn)
    def wrapper(*a, **k):
        return fn(*a, **k)

    return wrapper


class Base:
    def __call__(self, graph):
        return graph

    @staticmethod
    def static(x):
        return x

    @classmethod
    def klass(cls, x):
        return x

    @property
    def prop(self):
        return 1

    @deco
    def decorated(self, y):
        return y


class Child(Base):
    pass


def outer():
    def inner(z):
        return z

    return inner


@pytest.mark.parametrize("text", ["nomodule", "a.b", ":x", "a:", "a:1x", "a b:c", "a:<locals>", "a:f.<locals>"])
def test_malformed_targets_get_one_sentence(text):
    with pytest.raises(TargetError) as e:
        TargetSpec.parse(text)
    assert "\n" not in str(e.value)


def test_resolve_functions_methods_and_descriptors():
    mod = __name__
    assert resolve(TargetSpec.parse(f"{mod}:outer")).code is outer.__code__
    assert resolve(TargetSpec.parse(f"{mod}:Base.__call__")).code is Base.__call__.__code__
    assert resolve(TargetSpec.parse(f"{mod}:Base.static")).code is Base.static.__code__
    assert resolve(TargetSpec.parse(f"{mod}:Base.klass")).code is Base.klass.__func__.__code__
    assert resolve(TargetSpec.parse(f"{mod}:Base.prop")).code is Base.prop.fget.__code__


def test_decorators_are_unwrapped_to_the_real_code():
    r = resolve(TargetSpec.parse(f"{__name__}:Base.decorated"))
    assert r.code.co_name == "decorated" and r.code is Base.decorated.__wrapped__.__code__
    assert "y" in r.parameters()


def test_nested_function_by_locals():
    r = resolve(TargetSpec.parse(f"{__name__}:outer.<locals>.inner"))
    assert r.code is outer().__code__
    assert r.function is None and r.parameters() == ("z",)


def test_inherited_method_is_filtered_on_type_of_self():
    r = resolve(TargetSpec.parse(f"{__name__}:Child.__call__"))
    assert r.code is Base.__call__.__code__
    assert r.self_type is Child and "inherited" in r.notes[0]
    assert resolve(TargetSpec.parse(f"{__name__}:Base.__call__")).self_type is None


def test_unresolvable_targets_say_why():
    with pytest.raises(ResolveError, match="not imported yet"):
        resolve(TargetSpec.parse("surely_not_imported_module_xyz:f"))
    with pytest.raises(ResolveError, match="has no attribute Nope"):
        resolve(TargetSpec.parse(f"{__name__}:Base.Nope"))
    with pytest.raises(ResolveError, match="not a Python function"):
        resolve(TargetSpec.parse(f"{__name__}:Base"))
    with pytest.raises(ResolveError, match="defines no function named nope"):
        resolve(TargetSpec.parse(f"{__name__}:outer.<locals>.nope"))


def test_builtin_is_not_a_python_function():
    with pytest.raises(ResolveError, match="not a Python function: it runs no Python code to watch, so name the "
                                           "Python function that calls it"):
        resolve(TargetSpec.parse("builtins:len"))
    with pytest.raises(ResolveError, match=r"is a class, not a Python function: name one of its methods \("):
        resolve(TargetSpec.parse(f"{__name__}:Base"))


def test_lazy_target_resolves_when_its_module_is_imported(tmp_path, monkeypatch):
    from prov_trace.contract import Hook, Profile
    from prov_trace.stream.reader import read_trace
    from prov_trace.tracer.session import TraceSession
    from prov_trace.stream.writer import TraceWriter

    (tmp_path / "late_mod_for_test.py").write_text(textwrap.dedent("""
        def work(a, b=2):
            c = a + b
            return c * 10
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("late_mod_for_test", None)
    seen = []
    hook_in = Hook("user", "late_mod_for_test:work", "entry", lambda c: {"a": c.arg("a")})
    hook_out = Hook("user", "late_mod_for_test:work", "return", lambda c: seen.append(c.locals["c"]) or {"ret": c.retval})
    writer = TraceWriter(tmp_path / "t.msgpack")
    with TraceSession(writer, Profile("t", "test", (hook_in, hook_out)), log=lambda m: None):
        assert "late_mod_for_test" not in sys.modules
        import late_mod_for_test

        assert late_mod_for_test.work(1) == 30
        # The imported module carries no trace of the watcher.
        assert type(late_mod_for_test.__loader__).__name__ != "_ChainedLoader"
    assert seen == [3]
    trace = read_trace(tmp_path / "t.msgpack")
    probes = [r for r in trace.records if r["kind"] == "probe"]
    assert [(r["phase"], r["payload"]) for r in probes] == [("entry", {"a": 1}), ("return", {"ret": 30})]
    assert probes[0]["call"] == probes[1]["call"]
    assert all(h["resolved"] and h["installed"] and h["fired"] == 1 for h in trace.hooks())
