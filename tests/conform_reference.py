"""The conform rules read directly: the reference `prov_trace.stream.conform`'s compiled shapes are checked against.

This is the interpreter the reader used before the shapes were compiled (docs/benchmarks.md,
"The report"), kept word for word: it walks a shape on every value. tests/test_reliability_fuzz.py
runs both on generated and on real records and asserts they agree, value and count.
"""

from __future__ import annotations

from typing import Any

from prov_trace.stream import conform, schema


class Count:
    def __init__(self) -> None:
        self.n = 0


def _fix(value: Any, shape: Any, count: Count) -> Any:
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


def record(rec: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """conform.record, by the reference rules."""
    count = Count()
    if conform._nests_beyond(rec, schema.MAX_NESTING):
        rec = conform._cut_nesting(rec, schema.MAX_NESTING, count)
    shape = conform.RECORDS.get(rec.get("kind"))
    if shape is None:
        return rec, count.n
    out = _fix(rec, shape, count)
    if rec.get("kind") == schema.PROBE and out.get("stage") in conform.PAYLOADS and "payload" in out:
        payload = _fix(out["payload"], conform.PAYLOADS[out["stage"]], count)
        out["payload"] = payload if payload is not None else {}
    return out, count.n
