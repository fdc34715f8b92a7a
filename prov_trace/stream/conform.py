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

from typing import Any

from prov_trace.stream import schema


class _Count:
    def __init__(self) -> None:
        self.n = 0


# Shapes: "str", "int", "bool", "key" (a str, int, float or bool: something hashable), "any",
# ("list", item), ("map", value[, {key: value for that key}]), {key: shape} (a map with these keys).


def _fix(value: Any, shape: Any, count: _Count) -> Any:
    if shape == "any":
        return value
    if value is None:
        # A null list or mapping reads as an empty one; a null scalar or record stays null.
        if isinstance(shape, tuple):
            return [] if shape[0] == "list" else {}
        return None
    if shape == "str":
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)):  # bool too: a name written as a number still names it
            return str(value)
        count.n += 1
        return None
    if shape == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        count.n += 1
        return None
    if shape == "key":
        if isinstance(value, (str, int, float)):
            return value
        count.n += 1
        return None
    if shape == "bool":
        if isinstance(value, bool):
            return value
        count.n += 1
        return False
    if isinstance(shape, tuple) and shape[0] == "list":
        if not isinstance(value, list):
            count.n += 1
            return []
        item = shape[1]
        out = []
        for v in value:
            fixed = _fix(v, item, count)
            if fixed is None and v is not None and item != "any":
                continue  # an item of the wrong type is dropped, not kept as a hole
            if isinstance(item, dict) and fixed is None:
                continue  # a null where a record belongs: nothing to read
            out.append(fixed)
        return out
    if isinstance(shape, tuple) and shape[0] == "map":
        if not isinstance(value, dict):
            count.n += 1
            return {}
        special = shape[2] if len(shape) > 2 else {}
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                count.n += 1
                continue
            fixed = _fix(v, special.get(k, shape[1]), count)
            if fixed is None and isinstance(shape[1], dict):
                continue  # a map of records (a node's fields) holds records, not holes
            out[k] = fixed
        return out
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            count.n += 1
            return None
        out = dict(value)
        for key, sub in shape.items():
            if key in out:
                out[key] = _fix(out[key], sub, count)
        return out
    raise AssertionError(f"unknown shape {shape!r}")


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
    "fields": ("map", _FIELD, _FX_FIELDS), "source": _SRC,
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
PAYLOADS = {
    schema.SOURCE: _SOURCE, schema.PRE_GRAD: _FX, schema.POST_GRAD: _FX, schema.IR_PRE: _IR, schema.IR_POST: _IR,
    schema.KERNEL_SPEC: _KERNEL, schema.ARTIFACT: {**_ARTIFACT, "files": ("list", "str")},
    schema.DYNAMO_GRAPH: _FX_PATH, schema.EXPORT_GRAPH: _FX_PATH, schema.AOT_GRAPH: _FX,
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
    """Whether maps and lists nest more than `limit` deep in `value` (a walk without recursion)."""
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        v, depth = pop()
        if depth >= limit:
            return True
        items = v.values() if type(v) is dict else v
        for item in items:
            if type(item) is dict or type(item) is list:
                push((item, depth + 1))
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


def record(rec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The record with its documented keys of the documented types, and how many values were replaced."""
    count = _Count()
    if _nests_beyond(rec, schema.MAX_NESTING):
        rec = _cut_nesting(rec, schema.MAX_NESTING, count)
    shape = RECORDS.get(rec.get("kind"))
    if shape is None:
        return rec, count.n
    out = _fix(rec, shape, count)
    if rec.get("kind") == schema.PROBE and out.get("stage") in PAYLOADS and "payload" in out:
        payload = _fix(out["payload"], PAYLOADS[out["stage"]], count)
        out["payload"] = payload if payload is not None else {}
    return out, count.n
