"""Bounded, side-effect-free snapshots of live objects as plain data.

Everything a probe writes goes through here: strings, lists and mappings are
cut at fixed bounds and the cut is marked, never silent. No user ``__repr__``,
``__str__`` or ``__getattr__`` is called on an object of unknown type: the
generic snapshot reads ``type(obj)`` and, for containers, their length and
first items, and for dataclasses the declared field names.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import sys
from typing import Any, Callable

from prov_trace.stream import schema
from prov_trace.stream.packed import PackedList, new_packer

MAX_STR = 2000
MAX_TRACE_STR = 8000
MAX_ITEMS = 64
MAX_DEPTH = 4

CUT_MARK = "…[cut {n} chars]"

#: Bound on one graph or op-list snapshot's packed size: half of what a reader accepts for a whole
#: record, leaving room for the record's other keys; past it, the rest of the items are counted, not kept.
MAX_SNAPSHOT_BYTES = schema.MAX_RECORD_BYTES // 2

class BoundedList:
    """Snapshots of a graph's items (FX nodes, IR ops), kept up to a count and a packed-byte bound.

    ``add(make)`` calls ``make()`` only while both bounds have room; once one is passed, the
    rest are counted in ``cut`` and ``reason`` says which bound cut them. Each kept snapshot
    is packed at once (``items`` is a `PackedList`): the host's garbage collector never
    sees a graph's worth of our dicts, and the packed size is what the bound counts.
    """

    def __init__(self, max_items: int, max_bytes: int, noun: str) -> None:
        self.items = PackedList()
        self.total = 0
        self.reason: str | None = None
        self._max_items, self._max_bytes, self._noun = max_items, max_bytes, noun
        self._packer = new_packer()

    def add(self, make: Callable[[], Any]) -> Any:
        """Snapshot one more item; returns the snapshot, or None when a bound cut it.

        An item msgpack can't pack raises here, and the probe's error record says why.
        """
        self.total += 1
        if self.reason is not None:
            return None
        if len(self.items) >= self._max_items:
            self.reason = f"more than {self._max_items} {self._noun}"
            return None
        snap = make()
        data = self._packer.pack(snap)
        if self.items.size + len(data) > self._max_bytes:
            self.reason = f"the snapshot passed {self._max_bytes} bytes"
            return None
        self.items.append_packed(data)
        return snap

    @property
    def cut(self) -> int:
        return self.total - len(self.items)

    def marks(self, key: str) -> dict[str, Any]:
        """``{key: N, "cut_reason": ...}`` when items were cut, else ``{}``."""
        return {key: self.cut, "cut_reason": self.reason} if self.cut else {}


def cut_str(text: str, limit: int = MAX_STR) -> str:
    """Cut `text` to `limit` characters, marking the cut with how much was dropped."""
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARK.format(n=len(text) - limit)


def type_name(obj: Any) -> str:
    t = type(obj)
    mod = t.__module__
    if mod in ("builtins", None):
        return t.__qualname__
    return f"{mod}.{t.__qualname__}"


def populated(value: Any) -> bool:
    """The project's population rule: exists and non-empty. `0` counts; None, "", [], {} do not."""
    if value is None:
        return False
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)):
        return len(value) > 0
    try:
        length = type(value).__len__  # only the class's own __len__, never __getattr__
    except AttributeError:
        return True
    try:
        return length(value) > 0
    except Exception:
        return True


def safe_str(obj: Any, limit: int = MAX_STR) -> str:
    """str() for types whose str() we know is pure; a type name for anything else."""
    if isinstance(obj, str):
        return cut_str(obj, limit)
    if isinstance(obj, (int, float, bool)) or obj is None:
        return str(obj)
    mod = type(obj).__module__ or ""
    # torch's own value types (OpOverload, Target, sympy exprs) have pure __str__.
    if mod.startswith(("torch", "sympy")):
        try:
            return cut_str(str(obj), limit)
        except Exception as exc:  # noqa: BLE001 - a broken __str__ is data, not a crash
            return f"<{type_name(obj)}: str() raised {type(exc).__name__}>"
    return f"<{type_name(obj)}>"


def _is_tensor(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    # issubclass on type(obj), never isinstance: isinstance may read obj.__class__, which runs user code.
    return torch is not None and issubclass(type(obj), torch.Tensor)


def _big_int(obj: int) -> dict[str, Any]:
    # str() of an int past sys.get_int_max_str_digits() raises; the bit length never does.
    return {"type": "int", "bits": int.bit_length(obj), "negative": obj < 0}


def generic(obj: Any, depth: int = 0) -> Any:
    """A bounded, safe snapshot of any object, for user probes and unknown values.

    Reads only ``type(obj)`` and, for the built-in containers (and their subclasses),
    the built-in type's own length and iteration: no ``__repr__``, ``__str__``,
    ``__getattr__``, ``__getattribute__``, ``__class__``, ``__len__``, ``__iter__``
    or ``__getitem__`` of the object's class runs. Nesting is cut at MAX_DEPTH (so a
    container that holds itself ends there) and every container at MAX_ITEMS items,
    with the cut counted.
    """
    t = type(obj)
    if obj is None or t in (bool, float):
        return obj
    if issubclass(t, int):
        v = int.__index__(obj)  # an int subclass's own __index__/__repr__ never runs
        if not -(2**63) <= v < 2**64:
            return _big_int(v)
        return v
    if issubclass(t, float):
        return float.__float__(obj)
    if issubclass(t, str):
        return cut_str(str.__str__(obj))
    if issubclass(t, (bytes, bytearray)):
        base = bytes if issubclass(t, bytes) else bytearray
        return {"type": type_name(obj), "len": base.__len__(obj)}
    if _is_tensor(obj):
        try:
            return {"type": type_name(obj), "shape": list(obj.shape), "dtype": str(obj.dtype), "device": str(obj.device)}
        except Exception:  # noqa: BLE001
            return {"type": type_name(obj)}
    if depth >= MAX_DEPTH:
        return {"type": type_name(obj), "cut": "depth"}
    for base in (list, tuple, set, frozenset):
        if issubclass(t, base):
            n = base.__len__(obj)
            items = list(itertools.islice(base.__iter__(obj), MAX_ITEMS))
            out = {"type": type_name(obj), "len": n, "items": [generic(i, depth + 1) for i in items]}
            if n > MAX_ITEMS:
                out["cut"] = n - MAX_ITEMS
            return out
    if issubclass(t, dict):
        n = dict.__len__(obj)
        pairs = list(itertools.islice(dict.items(obj), MAX_ITEMS))
        out = {"type": type_name(obj), "len": n,
               "items": [[generic(k, depth + 1), generic(v, depth + 1)] for k, v in pairs]}
        if n > MAX_ITEMS:
            out["cut"] = n - MAX_ITEMS
        return out
    fields = inspect.getattr_static(t, "__dataclass_fields__", None)
    if isinstance(fields, dict):
        return {"type": type_name(obj), "fields": [str(k) for k in itertools.islice(fields, MAX_ITEMS)]}
    return {"type": type_name(obj)}


def names(items: Any, limit: int = 256) -> tuple[list[str], int]:
    """The `.name` of each item (FX nodes, buffers), sorted, bounded; returns (names, total)."""
    out = []
    total = 0
    for item in items:
        total += 1
        if len(out) < limit:
            name = getattr(item, "name", None)
            out.append(name if isinstance(name, str) else safe_str(item, 200))
    return sorted(out), total


_ABSENT = object()


def _instance_dict(obj: Any) -> dict:
    try:
        d = object.__getattribute__(obj, "__dict__")
    except AttributeError:
        return {}
    return d if isinstance(d, dict) else {}


def read_static(obj: Any, name: str, default: Any = _ABSENT) -> Any:
    """``obj.name`` without running any Python code of the object's class.

    Instance attributes, slots and plain class attributes are read. A property, a
    ``__getattr__`` or any other Python-level descriptor is not run: the name reads
    as `default` (AttributeError when no default is given).
    """
    import inspect
    import types as _types

    try:
        value = inspect.getattr_static(obj, name)
    except AttributeError:
        if default is _ABSENT:
            raise
        return default
    if isinstance(value, (_types.MemberDescriptorType, _types.GetSetDescriptorType)):
        try:
            return value.__get__(obj, type(obj))  # a slot or a C-level field: no user code runs
        except AttributeError:
            if default is _ABSENT:
                raise
            return default
    d = _instance_dict(obj)
    if name in d and d[name] is value:
        return value
    if hasattr(type(value), "__get__") and not isinstance(value, (_types.FunctionType, type)):
        if default is _ABSENT:
            raise AttributeError(f"{type(obj).__qualname__}.{name} is a descriptor; it is not run")
        return default
    return value


#: Modules whose types' ``__len__`` is known to be pure; on any other type it is not called.
PURE_LEN_MODULES = ("builtins", "collections", "torch", "sympy", "torch_spyre")


def safe_populated(value: Any) -> bool:
    """The population rule, calling ``__len__`` only on types from PURE_LEN_MODULES (else: exists = populated)."""
    mod = type(value).__module__ or ""
    if mod.split(".", 1)[0] in PURE_LEN_MODULES:
        return populated(value)
    return value is not None


def is_dataclass_instance(obj: Any) -> bool:
    return dataclasses.is_dataclass(type(obj)) and not isinstance(obj, type)


def dataclass_fields(obj: Any, value_of: Any = None) -> dict[str, Any]:
    """A dataclass instance: its declared fields (name, annotation) and, per field, has/populated/type.

    Field values are read with ``read_static``; `value_of(name, value)` may add a ``value``.
    """
    cls = type(obj)
    declared = []
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        ann = f.type if isinstance(f.type, str) else getattr(f.type, "__qualname__", None) or safe_str(f.type, 200)
        declared.append({"name": f.name, "type": cut_str(str(ann), 200)})
        value = read_static(obj, f.name, _ABSENT)
        has = value is not _ABSENT
        entry: dict[str, Any] = {
            "has": has,
            "populated": has and safe_populated(value),
            "type": type_name(value) if has else None,
        }
        if has and value_of is not None:
            entry["value"] = value_of(f.name, value)
        fields[f.name] = entry
    return {"type": type_name(obj), "declared_fields": declared, "fields": fields}
