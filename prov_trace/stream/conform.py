"""Give each record read from a trace the shape docs/trace-format.md documents.

The report builder relies on that shape: a node's ``inputs`` is a list of names, a
field's ``populated`` a bool, and so on. A stream that decodes but does not keep
to it (bytes changed on disk, a writer with a bug, a record from a future minor
version) must still build a report, never crash it. Maps and lists nested deeper
than ``schema.MAX_NESTING`` are read as null (and counted) first, so nothing that
walks a record recurses past Python's limit. So each documented key of a
known record kind or stage is checked against its type; a value of the wrong
type is replaced by that type's empty value (``None``, ``[]``, ``{}``, ``False``)
and counted. Keys the format does not document, and user probes' payloads, are
left as they are. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

from prov_trace.stream import schema


class _Count:
    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 0


# Shapes: "str", "int", "bool", "key" (a str, int, float or bool: something hashable), "any",
# ("list", item), ("map", value[, {key: value for that key}]), {key: shape} (a map with these keys).
#
# What each shape does to a value:
#   any      the value as it is.
#   null     a null list or map reads as an empty one ([] or {}), a null scalar or record stays null.
#   str      a str; an int, float or bool as its str (a name written as a number still names it);
#            anything else null, counted.
#   int      an int that is not a bool; anything else null, counted.
#   key      a str, int, float or bool; anything else null, counted.
#   bool     a bool; anything else False, counted.
#   list     each item by the item shape: an item of the wrong type is dropped, not kept as a hole,
#            and so is a null where a record belongs; a value that is not a list is [], counted.
#   map      each str key's value by its key's shape, or else the value shape; a non-str key is
#            dropped, counted; a null where a map of records holds a record is dropped; a value that
#            is not a map is {}, counted.
#   record   the map with each documented key's value by its shape; other keys as they are; a value
#            that is not a map is null, counted.
#
# Maps and lists are fixed in place: the reader's records are fresh from the stream, and copying
# every map of a large trace was a tenth of the report's time.
#
# Each shape is compiled once, at import, into a function that does just that: a report of a large
# model conforms hundreds of thousands of values, and a value of the right type returns at once.
# tests/test_reliability_fuzz.py checks the compiled functions against a direct reading of the rules
# above (tests/conform_reference.py), on generated values and on real traces cut at random.

Fixer = Callable[[Any, _Count], Any]


def _compile(shape: Any, memo: dict[int, Fixer]) -> Fixer:
    key = id(shape)
    if key in memo:
        return memo[key]
    if isinstance(shape, dict):
        # A record may hold itself (a node's from_node list holds from_node records): bind late.
        cell: list[Fixer] = []
        memo[key] = lambda value, count: cell[0](value, count)
        cell.append(_compile_record(shape, memo))
        memo[key] = cell[0]
        return cell[0]
    memo[key] = _compile_scalar(shape) if isinstance(shape, str) else _compile_container(shape, memo)
    return memo[key]


def _any(value: Any, count: _Count) -> Any:
    return value


def _str(value: Any, count: _Count) -> Any:
    if type(value) is str or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    count.n += 1
    return None


def _int(value: Any, count: _Count) -> Any:
    if type(value) is int or value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    count.n += 1
    return None


def _key(value: Any, count: _Count) -> Any:
    if value is None or isinstance(value, (str, int, float)):
        return value
    count.n += 1
    return None


def _bool(value: Any, count: _Count) -> Any:
    if value is True or value is False or value is None:
        return value
    count.n += 1
    return False


_SCALARS: dict[str, Fixer] = {"any": _any, "str": _str, "int": _int, "key": _key, "bool": _bool}


def _compile_scalar(shape: str) -> Fixer:
    if shape not in _SCALARS:
        raise AssertionError(f"unknown shape {shape!r}")
    return _SCALARS[shape]


def _compile_container(shape: Any, memo: dict[int, Fixer]) -> Fixer:
    if isinstance(shape, tuple) and shape[0] == "list":
        return _compile_list(shape[1], memo)
    if isinstance(shape, tuple) and shape[0] == "map":
        return _compile_map(shape, memo)
    raise AssertionError(f"unknown shape {shape!r}")


def _compile_list(item: Any, memo: dict[int, Fixer]) -> Fixer:
    if item == "any":
        def fix_any_list(value: Any, count: _Count) -> Any:
            if isinstance(value, list):
                return value
            if value is not None:
                count.n += 1
            return []
        return fix_any_list
    fix_item = _compile(item, memo)
    holds_records = isinstance(item, dict)
    exact = {"str": str, "int": int}.get(item) if isinstance(item, str) else None

    def fix_list(value: Any, count: _Count) -> Any:
        if not isinstance(value, list):
            if value is not None:
                count.n += 1
            return []
        if exact is not None and all(type(v) is exact for v in value):
            return value
        out = []
        for v in value:
            fixed = fix_item(v, count)
            if fixed is None and (v is not None or holds_records):
                continue  # an item of the wrong type is dropped; so is a null where a record belongs
            out.append(fixed)
        return out
    return fix_list


def _compile_map(shape: tuple, memo: dict[int, Fixer]) -> Fixer:
    fix_value = _compile(shape[1], memo)
    special = {k: _compile(s, memo) for k, s in (shape[2] if len(shape) > 2 else {}).items()}
    holds_records = isinstance(shape[1], dict)

    def fix_map(value: Any, count: _Count) -> Any:
        if not isinstance(value, dict):
            if value is not None:
                count.n += 1
            return {}
        get = special.get
        dropped = None
        for k, v in value.items():  # in place, as records are; replacing a value is safe while iterating
            if type(k) is not str and not isinstance(k, str):
                count.n += 1
                dropped = (dropped or []) + [k]
                continue
            fixed = get(k, fix_value)(v, count)
            if fixed is None and holds_records:
                dropped = (dropped or []) + [k]  # a map of records (a node's fields) holds records, not holes
            elif fixed is not v:
                value[k] = fixed
        for k in dropped or ():
            del value[k]
        return value
    return fix_map


def _compile_record(shape: dict, memo: dict[int, Fixer]) -> Fixer:
    keys = tuple((key, _compile(sub, memo)) for key, sub in shape.items() if sub != "any")

    def fix_record(value: Any, count: _Count) -> Any:
        if not isinstance(value, dict):
            if value is not None:
                count.n += 1
            return None
        for key, fix in keys:  # in place: the reader's records are its own, fresh from the stream
            if key in value:
                value[key] = fix(value[key], count)
        return value
    return fix_record


_SRC = {"file": "str", "line": "int", "func": "str", "text": "str"}
_FIELD = {"has": "bool", "populated": "bool", "type": "str", "value": "any", "cut": "any", "error": "str"}
_FROM_NODE: dict[str, Any] = {"name": "str", "graph_id": "key", "pass_name": "str", "action": "str"}
_FROM_NODE["from_node"] = ("list", _FROM_NODE)

def _field(value: Any) -> dict[str, Any]:
    return {**_FIELD, "value": value}


#: The provenance fields whose value the report reads, by name; any other field's value is left as it is.
_FX_FIELDS = {"stack_trace": _field("str"), "original_aten": _field("str"), "from_node": _field(("list", _FROM_NODE))}
_IR_FIELDS = {"origins": _field(("list", "str")), "origin_node": _field("str"),
              "get_stack_traces": _field(("list", "str"))}
_FX_NODE = {
    "name": "str", "op": "str", "target": "str", "inputs": ("list", "str"), "meta_keys": ("list", "str"),
    "fields": ("map", _FIELD, _FX_FIELDS), "source": _SRC, "graph_id": "key", "subgraph": "key",
}
_FX = {"graph_id": "key", "node_count": "int", "nodes": ("list", _FX_NODE), "cut_nodes": "int", "cut_reason": "str",
       "is_inference": "bool"}
_IR_OP = {
    "name": "str", "type": "str", "group": "str", "fields": ("map", _FIELD, _IR_FIELDS), "source": ("list", _SRC),
    "reads": ("list", "str"), "attrs": "any",
}
_IR = {"op_count": "int", "ops": ("list", _IR_OP), "cut_ops": "int", "cut_reason": "str", "groups": ("list", {"name": "str", "type": "str", "members": ("list", "str")})}
_KERNEL = {
    "kernel": "str", "kind": "str", "snodes": ("list", "str"), "ops": ("list", _IR_OP), "origins": ("list", "str"),
    "metadata": "str", "detailed": "str",
}
_CALL = {"line": "int", "comments": ("list", "str")}
_ARTIFACT = {
    "path": "str", "bytes": "int",
    "kernels": ("list", {"kernel": "str", "kind": "str", "how": "str", "def_line": "int", "calls": ("list", _CALL),
                         "comments": ("list", "str"), "provenance_comments": ("list", "str")}),
}
_SOURCE = {"file": "str", "qualname": "str", "first_line": "int", "user": "bool",
           "lines": ("list", {"line": "int", "text": "str"})}
#: The Dynamo and export graphs: an FX payload plus the backend's name and the placeholders' shapes.
_FX_PATH = {**_FX, "backend": "str", "inputs": ("list", "str")}
#: A graph break: Dynamo's reason and the user frames it broke in, innermost last.
_BREAK = {"reason": "str", "stack": ("list", {"file": "str", "line": "int", "func": "str"})}
PAYLOADS = {
    schema.SOURCE: _SOURCE, schema.PRE_GRAD: _FX, schema.POST_GRAD: _FX, schema.IR_PRE: _IR, schema.IR_POST: _IR,
    schema.KERNEL_SPEC: _KERNEL, schema.ARTIFACT: {**_ARTIFACT, "files": ("list", "str")},
    schema.DYNAMO_GRAPH: {**_FX_PATH, "graph_break": _BREAK},
    schema.EXPORT_GRAPH: _FX_PATH, schema.AOT_GRAPH: _FX,
    schema.COMPILE_ERROR: {"error": {"type": "str", "text": "str", "inner": {"type": "str", "text": "str"}},
                           "limit": {"name": "str", "value": "int"}, "skipped": {"reason": "str"}},
    schema.GRAPH_BREAK: {"graph_break": _BREAK},
    schema.NOTICE: {"notice": {"kind": "str", "text": "str"}},
}
_ENVELOPE = {"stage": "str", "target": "str", "phase": "str", "call": "int", "compile_id": "str", "graph": "str",
             "thread": {"id": "int", "name": "str"}, "probe_ns": "int"}
HEADER = {"argv": ("list", "str"), "tool_version": "str", "python": "str", "torch": "str", "platform": "str",
          "backend": "str", "backend_reason": "str", "profile": "str", "pid": "int", "target": "str",
          "target_kind": "str", "train": "bool", "standin": "str", "torch_spyre": {"tree": "str", "mode": "str"}}
RECORDS = {
    schema.HEADER: {**HEADER, "stage": "str"},
    schema.PROBE: _ENVELOPE,
    schema.ERROR: {**_ENVELOPE, "error": {"type": "str", "message": "str", "traceback": "str"}},
    schema.HOOK: {"target": "str", "stage": "str", "event": "str", "resolved": "bool", "installed": "bool",
                  "reason": "str", "file": "str", "line": "int", "signature": "str", "notes": ("list", "str"),
                  "fired": "int", "errors": "int"},
    # Every kind's `stage` is a name: the report groups records by it (a list there is unhashable).
    schema.NOTE: {"text": "str", "level": "str", "stage": "str"},
    schema.END: {"outcome": "str", "detail": "str", "records": "int", "stage": "str"},
}


def _nests_beyond(value: Any, limit: int) -> bool:
    """Whether maps and lists nest more than `limit` deep in `value` (a walk without recursion, a level at a time)."""
    level = [value]
    depth = 0
    while level:
        if depth >= limit:
            return True
        below = []
        push = below.append
        for v in level:
            for item in (v.values() if type(v) is dict else v):
                t = type(item)
                if t is dict or t is list:
                    push(item)
        level = below
        depth += 1
    return False


def _cut_nesting(value: Any, limit: int, count: _Count) -> Any:
    """`value` with each map or list at depth `limit` replaced by null (counted); recursion stays under `limit`."""
    if type(value) is dict:
        if limit <= 0:
            count.n += 1
            return None
        return {k: _cut_nesting(v, limit - 1, count) for k, v in value.items()}
    if type(value) is list:
        if limit <= 0:
            count.n += 1
            return None
        return [_cut_nesting(v, limit - 1, count) for v in value]
    return value


_MEMO: dict[int, Fixer] = {}
_RECORD_FIXERS = {kind: _compile(shape, _MEMO) for kind, shape in RECORDS.items()}
_PAYLOAD_FIXERS = {stage: _compile(shape, _MEMO) for stage, shape in PAYLOADS.items()}


def record(rec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The record with its documented keys of the documented types, and how many values were replaced.

    `rec`'s own maps and lists are fixed in place and reused (the reader's records are fresh from the
    stream): give a copy to keep the original."""
    count = _Count()
    if _nests_beyond(rec, schema.MAX_NESTING):
        rec = _cut_nesting(rec, schema.MAX_NESTING, count)
    fix = _RECORD_FIXERS.get(rec.get("kind"))
    if fix is None:
        return rec, count.n
    out = fix(rec, count)
    if rec.get("kind") == schema.PROBE and out.get("stage") in _PAYLOAD_FIXERS and "payload" in out:
        payload = _PAYLOAD_FIXERS[out["stage"]](out["payload"], count)
        out["payload"] = payload if payload is not None else {}
    return out, count.n
