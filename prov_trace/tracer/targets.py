"""Targets: `module:Qual.name` strings resolved to the code objects a backend watches.

Resolution never imports anything: a target whose module is not imported yet
stays pending until the import watcher (``imports.py``) sees the module arrive.
That keeps the host's import order untouched, and it is how Inductor's late
imports get covered.

Code objects are keyed by identity: ``code == code`` compares by value, and two
distinct functions can have equal code.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Callable

from prov_trace.contract import TargetError, TargetSpec

__all__ = ["ResolveError", "ResolvedTarget", "TargetError", "TargetSpec", "original_code", "resolve", "resolve_in_code"]


class ResolveError(LookupError):
    """A well-formed target that does not resolve on this build; the message says why."""


@dataclass
class ResolvedTarget:
    """A target bound to a live code object."""

    spec: TargetSpec
    code: types.CodeType
    #: The function object whose ``__code__`` is ``code``, when there is one (the inject backend needs it).
    function: Callable[..., Any] | None
    #: When the named class inherits the method, the code object is shared with its
    #: siblings: events fire only when ``type(self)`` is (a subclass of) this class.
    self_type: type | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def file(self) -> str:
        return self.code.co_filename

    @property
    def line(self) -> int:
        return self.code.co_firstlineno

    def signature(self) -> str:
        if self.function is not None:
            try:
                return str(inspect.signature(self.function))
            except (TypeError, ValueError):
                pass
        co = self.code
        return "(" + ", ".join(co.co_varnames[: co.co_argcount + co.co_kwonlyargcount]) + ")"

    def parameters(self) -> tuple[str, ...]:
        co = self.code
        n = co.co_argcount + co.co_kwonlyargcount
        n += bool(co.co_flags & inspect.CO_VARARGS) + bool(co.co_flags & inspect.CO_VARKEYWORDS)
        return tuple(co.co_varnames[:n])


#: Code objects a backend put in place of a function's own (the inject backend):
#: id(new) -> (new, original). Resolution sees through them, so a target resolved
#: while traced binds to the original code object, like every other hook on it.
REPLACED_CODE: dict[int, tuple[types.CodeType, types.CodeType]] = {}


def original_code(code: Any) -> Any:
    """The code object `code` stands in for, or `code` itself."""
    hit = REPLACED_CODE.get(id(code))
    return hit[1] if hit is not None and hit[0] is code else code


def _unwrap(obj: Any) -> Any:
    """Reach the plain function under decorators, descriptors and partials."""
    for _ in range(32):
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif isinstance(obj, types.MethodType):
            obj = obj.__func__
        elif isinstance(obj, functools.cached_property):
            obj = obj.func
        else:
            wrapped = inspect.getattr_static(obj, "__wrapped__", None) if not isinstance(obj, type) else None
            if wrapped is None:
                return obj
            obj = wrapped
    return obj


def _nested_code(parent: types.CodeType, name: str) -> types.CodeType | None:
    """Find the code object of `name` defined directly inside `parent`."""
    want = f"{parent.co_qualname}.<locals>.{name}" if hasattr(parent, "co_qualname") else None
    for const in parent.co_consts:
        if isinstance(const, types.CodeType) and const.co_name == name:
            if want is None or const.co_qualname == want:
                return const
    return None


def resolve(spec: TargetSpec, modules: dict[str, types.ModuleType] | None = None) -> ResolvedTarget:
    """Bind `spec` to a code object, using only modules already imported.

    Raises ResolveError with a sentence naming the part that did not resolve.
    """
    modules = sys.modules if modules is None else modules
    module = modules.get(spec.module)
    if module is None:
        raise ResolveError(f"module {spec.module} is not imported yet")
    parts = spec.qualname.split(".")
    obj: Any = module
    owner: type | None = None
    code: types.CodeType | None = None
    path = spec.module
    i = 0
    while i < len(parts):
        part = parts[i]
        if part == "<locals>":
            # `outer.<locals>.inner`: the inner function exists only as a code constant.
            if code is None:
                raise ResolveError(f"{path} is not a function, so it has no locals")
            inner = parts[i + 1]
            nested = _nested_code(code, inner)
            if nested is None:
                raise ResolveError(f"{path} defines no function named {inner}")
            code, obj, owner = nested, None, None
            path = f"{path}.<locals>.{inner}"
            i += 2
            continue
        if obj is None:
            raise ResolveError(f"{path} is a nested function; it has no attribute {part}")
        try:
            attr = inspect.getattr_static(obj, part)
        except AttributeError:
            raise ResolveError(f"{path} has no attribute {part}") from None
        owner = obj if isinstance(obj, type) else None
        obj = _unwrap(attr)
        code = original_code(getattr(obj, "__code__", None)) if not isinstance(obj, type) else None
        if code is not None and not isinstance(code, types.CodeType):
            code = None
        path = f"{path}.{part}" if path != spec.module else f"{spec.module}:{part}"
        i += 1
    if code is None:
        if isinstance(obj, type):
            raise ResolveError(f"{spec} is a class, not a Python function: name one of its methods "
                               f"({spec}.__init__, {spec}.__call__)")
        if isinstance(obj, (types.BuiltinFunctionType, types.BuiltinMethodType, types.WrapperDescriptorType,
                            types.MethodDescriptorType, types.MethodWrapperType)):
            raise ResolveError(f"{spec} is {type(obj).__name__}, not a Python function: it runs no Python code to "
                               "watch, so name the Python function that calls it")
        raise ResolveError(f"{spec} is {type(obj).__name__}, not a Python function (name a method or function)")
    function = obj if obj is not None and original_code(getattr(obj, "__code__", None)) is code else None
    resolved = ResolvedTarget(spec, code, function)
    if owner is not None:
        defining = next((k for k in owner.__mro__ if parts[-1] in vars(k)), owner)
        if defining is not owner:
            resolved.self_type = owner
            resolved.notes.append(
                f"inherited from {defining.__module__}.{defining.__qualname__}: "
                f"events are kept only when type(self) is a {owner.__qualname__}"
            )
    return resolved


def resolve_in_code(spec: TargetSpec, code: types.CodeType) -> ResolvedTarget:
    """Bind `spec` to a function that the module code `code` defines (at the top level, in a class body,
    or nested), found among its code constants by qualified name: for a module that has not run yet,
    such as a script's ``__main__``, whose functions exist only once it runs.

    The function object does not exist yet, so the target has none (``function`` is None).
    """
    want = spec.qualname
    todo, seen = [code], {id(code)}
    while todo:
        for const in todo.pop().co_consts:
            if not isinstance(const, types.CodeType) or id(const) in seen:
                continue
            seen.add(id(const))
            # A class body's code carries the class's name too; a function's code has its own locals.
            if getattr(const, "co_qualname", None) == want and const.co_flags & inspect.CO_NEWLOCALS:
                return ResolvedTarget(spec, const, None)
            todo.append(const)
    raise ResolveError(f"{code.co_filename} (run as {spec.module}) defines no function {want}")
