"""IR stage extractor: per LoopLevelIR op, `origins`, `origin_node`, `traceback`, `get_stack_traces()`.

Each field records its value and, separately, whether the slot exists
(``hasattr``), so "slot exists but empty" and "no such slot" stay distinct.
"""

from __future__ import annotations

import itertools
from typing import Any

from prov_trace.probes.snapshot import (
    MAX_ITEMS,
    MAX_SNAPSHOT_BYTES,
    MAX_TRACE_STR,
    BoundedList,
    cut_str,
    names,
    populated,
    safe_str,
    type_name,
)
from prov_trace.probes.source import source_of_stack_trace

#: Bounds on one op-list record: ops kept, and packed bytes; past either, the rest are counted in ``cut_ops``.
MAX_OPS = 50_000
MAX_OPS_BYTES = MAX_SNAPSHOT_BYTES
_MISSING = object()


def _slot(op: Any, name: str) -> tuple[bool, Any]:
    try:
        value = getattr(op, name, _MISSING)
    except Exception:  # noqa: BLE001 - a property that raises reads as "no value"
        return True, None
    return (value is not _MISSING), (None if value is _MISSING else value)


def _field(has: bool, value: Any, rendered: Any) -> dict[str, Any]:
    return {"has": has, "populated": has and populated(value), "type": type_name(value) if has else None, "value": rendered}


def _graph_id(node: Any) -> int | None:
    """The id of the FX graph a node belongs to: the FX stages' `graph_id`, which tells a nested graph's node
    (a torch.cond branch's `addmm`) from the top graph's node of the same name."""
    graph = getattr(node, "graph", None)
    return None if graph is None else id(graph)


def _origins(origins: Any) -> tuple[list[str], list[int | None]]:
    """Origins' names, sorted and bounded as `names` gives them, and each one's FX graph id alongside."""
    pairs = []
    for node in itertools.islice(origins, 256):
        name = getattr(node, "name", None)
        graph = getattr(node, "graph", None)
        pairs.append((name if isinstance(name, str) else safe_str(node, 200), 0 if graph is None else id(graph)))
    pairs.sort()
    return [n for n, _ in pairs], [g or None for _, g in pairs]


def main_graph(ops: Any) -> Any:
    """The FX graph most of the ops come from (their origin_node's, else their first origin's): the graph
    Inductor lowered them from."""
    counts: dict[int, list[Any]] = {}
    for op in ops:
        try:
            node = getattr(op, "origin_node", None) or next(iter(getattr(op, "origins", None) or ()), None)
            graph = getattr(node, "graph", None)
        except Exception:  # noqa: BLE001 - an op whose origins can't be read counts for nothing
            continue
        if graph is not None:
            counts.setdefault(id(graph), [graph, 0])[1] += 1
    return max(counts.values(), key=lambda c: c[1])[0] if counts else None


def op_fields(op: Any, main: Any = None) -> dict[str, dict[str, Any]]:
    """An op's fields. With `main` (the op list's own FX graph, `main_graph`), an op whose origins are not all
    in it lists each one's graph id (`origins.graphs`), and an origin_node in another graph names it
    (`origin_node.graph`): a torch.cond branch's op lists the `cond` node of the graph above it."""
    fields = {}
    has, origins = _slot(op, "origins")
    fields["origins"] = _field(has, origins, names(origins)[0] if origins else [])
    if origins and main is not None and not all(getattr(n, "graph", None) is main for n in itertools.islice(origins, 256)):
        fields["origins"]["value"], fields["origins"]["graphs"] = _origins(origins)
    has, origin_node = _slot(op, "origin_node")
    fields["origin_node"] = _field(has, origin_node, getattr(origin_node, "name", None) if origin_node is not None else None)
    if main is not None and origin_node is not None and getattr(origin_node, "graph", None) is not main:
        fields["origin_node"]["graph"] = _graph_id(origin_node)
    has, tb = _slot(op, "traceback")
    fields["traceback"] = _field(
        has, tb, [cut_str(str(t), MAX_TRACE_STR) for t in list(tb)[:MAX_ITEMS]] if isinstance(tb, (list, tuple)) else safe_str(tb)
    )
    has, fn = _slot(op, "get_stack_traces")
    traces: Any = None
    if has and callable(fn):
        try:
            traces = fn()
        except Exception as exc:  # noqa: BLE001
            traces = None
            fields["get_stack_traces"] = {"has": True, "populated": False, "type": None,
                                          "value": None, "error": f"{type(exc).__name__}: {exc}"[:400]}
    if "get_stack_traces" not in fields:
        fields["get_stack_traces"] = _field(
            has, traces, [cut_str(t, MAX_TRACE_STR) for t in list(traces)[:MAX_ITEMS]] if traces else []
        )
    return fields


def op_sources(fields: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The model lines this op's stack traces point at."""
    seen = set()
    out = []
    for trace in fields["get_stack_traces"].get("value") or []:
        src = source_of_stack_trace(trace)
        if src and (src["file"], src["line"]) not in seen:
            seen.add((src["file"], src["line"]))
            out.append(src)
    return out


def op_name(op: Any) -> str:
    try:
        return op.get_name()
    except Exception:  # noqa: BLE001
        return safe_str(getattr(op, "name", None) or f"<{type(op).__name__}>", 200)


def snapshot_op(op: Any, brief: bool = False, main: Any = None) -> dict[str, Any]:
    fields = op_fields(op, main)
    out: dict[str, Any] = {
        "name": op_name(op),
        "type": type(op).__name__,
        "fields": fields,
        "source": op_sources(fields),
    }
    try:
        out["reads"] = sorted(op.get_read_names())[:MAX_ITEMS]
    except Exception:  # noqa: BLE001 - not every op can list its reads
        out["reads"] = []
    if not brief:
        try:
            attrs = vars(op)
        except TypeError:
            attrs = {}
        out["attrs"] = {k: type_name(v) for k, v in list(attrs.items()) if not k.startswith("_")}
    return out


def snapshot_ops(ops: Any) -> dict[str, Any]:
    """The ops of a GraphLowering (``graph.operations``), bounded by MAX_OPS and MAX_OPS_BYTES."""
    ops = list(ops)
    main = main_graph(ops)
    kept = BoundedList(MAX_OPS, MAX_OPS_BYTES, "ops")
    for op in ops:
        kept.add(lambda: snapshot_op(op, main=main))  # noqa: B023 - called at once
    return {"op_count": kept.total, "ops": kept.items, **({"origin_graph": id(main)} if main is not None else {}),
            **kept.marks("cut_ops")}


def snapshot_scheduler_nodes(snodes: Any) -> dict[str, Any]:
    """Scheduler nodes after fusion; the IR ops are each member's ``.node``.

    The ops are bounded as in ``snapshot_ops``; a group keeps the names of all its members,
    cut or not, so fusion stays readable when the ops' details were cut.
    """
    groups = []
    snodes = list(snodes)
    main = main_graph(getattr(m, "node", None) for s in snodes for m in _members(s))
    kept = BoundedList(MAX_OPS, MAX_OPS_BYTES, "ops")
    for snode in snodes:
        members = []
        group = snode_name(snode)
        for m in _members(snode):
            node = getattr(m, "node", None)
            if node is None:
                continue
            snap = kept.add(lambda: {**snapshot_op(node, main=main), "group": group})  # noqa: B023 - called at once
            members.append(snap["name"] if snap is not None else op_name(node))
        groups.append({"name": group, "type": type(snode).__name__, "members": members})
    return {"op_count": kept.total, "ops": kept.items, "groups": groups,
            **({"origin_graph": id(main)} if main is not None else {}), **kept.marks("cut_ops")}


def _members(snode: Any) -> list[Any]:
    try:
        return list(snode.get_nodes())
    except Exception:  # noqa: BLE001
        return [snode]


def snode_name(snode: Any) -> str:
    try:
        return snode.get_name()
    except Exception:  # noqa: BLE001
        return f"<{type(snode).__name__}>"
