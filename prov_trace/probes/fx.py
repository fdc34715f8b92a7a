"""FX stage extractor: per node, the five provenance fields of ``node.meta``."""

from __future__ import annotations

from typing import Any

from prov_trace.probes.snapshot import MAX_ITEMS, MAX_TRACE_STR, cut_str, populated, safe_str, type_name
from prov_trace.probes.source import source_of_stack_trace
from prov_trace.schema import FX_FIELDS

#: Bound on nodes per graph snapshot; a larger graph is cut and the cut counted.
MAX_NODES = 50_000
MAX_FROM_NODE_DEPTH = 32


def _from_node(sources: Any, depth: int = 0) -> list[dict[str, Any]]:
    out = []
    for src in list(sources or ())[:MAX_ITEMS]:
        item = {
            "name": safe_str(getattr(src, "name", None), 200),
            "graph_id": getattr(src, "graph_id", None),
            "pass_name": safe_str(getattr(src, "pass_name", None), 200),
            "action": safe_str(getattr(src, "action", None), 200),
        }
        if depth < MAX_FROM_NODE_DEPTH:
            item["from_node"] = _from_node(getattr(src, "from_node", None), depth + 1)
        out.append(item)
    return out


def _field_value(field: str, value: Any) -> Any:
    if value is None:
        return None
    if field == "stack_trace":
        return cut_str(value, MAX_TRACE_STR) if isinstance(value, str) else safe_str(value)
    if field == "nn_module_stack":
        # {key: (module path, module type)}
        out = {}
        for k, v in list(value.items())[:MAX_ITEMS]:
            if isinstance(v, tuple) and len(v) == 2:
                out[safe_str(k, 200)] = [safe_str(v[0], 400), safe_str(getattr(v[1], "__qualname__", v[1]), 400)]
            else:
                out[safe_str(k, 200)] = safe_str(v, 400)
        return out
    if field == "source_fn_stack":
        out = []
        for entry in list(value)[:MAX_ITEMS]:
            if isinstance(entry, tuple) and len(entry) == 2:
                fn = entry[1]
                out.append([safe_str(entry[0], 200), getattr(fn, "__qualname__", None) or safe_str(fn, 200)])
            else:
                out.append(safe_str(entry, 200))
        return out
    if field == "original_aten":
        return safe_str(value, 400)
    if field == "from_node":
        return _from_node(value)
    return safe_str(value)


def snapshot_node(node: Any) -> dict[str, Any]:
    meta = node.meta
    fields = {}
    for f in FX_FIELDS:
        has = f in meta
        value = meta.get(f)
        fields[f] = {
            "has": has,
            "populated": has and populated(value),
            "type": type_name(value) if has else None,
            "value": _field_value(f, value),
        }
    return {
        "name": node.name,
        "op": node.op,
        "target": safe_str(node.target, 400),
        "inputs": [n.name for n in node.all_input_nodes][:MAX_ITEMS],
        "meta_keys": sorted(str(k) for k in meta.keys()),
        "fields": fields,
        "source": source_of_stack_trace(meta.get("stack_trace")),
    }


def snapshot_graph(graph: Any) -> dict[str, Any]:
    """Snapshot an ``fx.Graph`` (or a GraphModule's graph)."""
    graph = getattr(graph, "graph", graph)
    nodes = []
    total = 0
    for node in graph.nodes:
        total += 1
        if len(nodes) < MAX_NODES:
            nodes.append(snapshot_node(node))
    out = {"graph_id": id(graph), "node_count": total, "nodes": nodes}
    if total > len(nodes):
        out["cut_nodes"] = total - len(nodes)
    return out
