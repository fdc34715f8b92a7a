"""FX stage extractor: per node, the five provenance fields of ``node.meta``."""

from __future__ import annotations

import enum
import itertools
import types
from typing import Any

from prov_trace.probes.snapshot import (
    MAX_ITEMS,
    MAX_SNAPSHOT_BYTES,
    MAX_TRACE_STR,
    BoundedList,
    cut_str,
    populated,
    safe_str,
    type_name,
)
from prov_trace.probes.source import source_of_stack_trace
from prov_trace.stream.schema import FX_FIELDS, MAX_FX_INPUTS

#: Bound on input names per node.
MAX_NAMES = MAX_FX_INPUTS

#: Bound on nodes per graph snapshot; a larger graph is cut and the cut counted.
MAX_NODES = 50_000
#: Bound on one graph record's packed size (well under the reader's record limit); past it, nodes are cut.
MAX_GRAPH_BYTES = MAX_SNAPSHOT_BYTES
MAX_FROM_NODE_DEPTH = 32
#: Bound on the NodeSource entries kept per from_node chain, all levels together (a chain may be a wide tree).
MAX_FROM_NODE_ITEMS = 256
#: Bound on the meta keys listed per node.
MAX_META_KEYS = 256


class _Budget:
    def __init__(self, items: int):
        self.left = items
        self.cut = 0
        self.depth_cut = False


def _from_node(sources: Any, budget: _Budget, depth: int = 0) -> list[dict[str, Any]]:
    out = []
    try:
        seq = list(itertools.islice(sources or (), MAX_ITEMS + 1)) if isinstance(sources, (list, tuple)) else []
        total = len(sources) if isinstance(sources, (list, tuple)) else 0
    except Exception:  # noqa: BLE001
        return out
    for i, src in enumerate(seq[:MAX_ITEMS]):
        if budget.left <= 0:
            budget.cut += total - i
            return out
        budget.left -= 1
        item = {
            "name": safe_str(getattr(src, "name", None), 200),
            "graph_id": _int_or_none(getattr(src, "graph_id", None)),
            "pass_name": safe_str(getattr(src, "pass_name", None), 200),
            "action": _action(getattr(src, "action", None)),
        }
        inner = getattr(src, "from_node", None)
        if depth < MAX_FROM_NODE_DEPTH:
            item["from_node"] = _from_node(inner, budget, depth + 1)
        elif isinstance(inner, (list, tuple)) and inner:
            budget.depth_cut = True
            item["cut"] = "depth"
        out.append(item)
    if total > MAX_ITEMS:
        budget.cut += total - MAX_ITEMS
    return out


def _action(value: Any) -> str:
    """A NodeSource's action as torch prints it: ``create``, ``replace``, ``create+replace``.

    torch 2.6+ keeps a list of `NodeSourceAction` members (a str before); only enum members are read
    (their ``name``), anything else goes through `safe_str`.
    """
    if isinstance(value, (list, tuple)) and all(issubclass(type(a), enum.Enum) for a in value[:MAX_ITEMS]):
        return cut_str("+".join(str(a.name).lower() for a in value[:MAX_ITEMS]), 200)
    return safe_str(value, 200)


def _int_or_none(v: Any) -> Any:
    return v if v is None or type(v) is int else safe_str(v, 200)


def _field_value(field: str, value: Any) -> tuple[Any, dict[str, Any]]:
    """The recorded value of one provenance field, and the marks of any bound that cut it."""
    if value is None:
        return None, {}
    if field == "stack_trace":
        return (cut_str(value, MAX_TRACE_STR) if isinstance(value, str) else safe_str(value)), {}
    if field == "nn_module_stack":
        # {key: (module path, module type)}
        if not isinstance(value, dict):
            return safe_str(value), {}
        out = {}
        for k, v in itertools.islice(dict.items(value), MAX_ITEMS):
            if isinstance(v, tuple) and len(v) == 2:
                out[safe_str(k, 200)] = [safe_str(v[0], 400), safe_str(getattr(v[1], "__qualname__", v[1]), 400)]
            else:
                out[safe_str(k, 200)] = safe_str(v, 400)
        return out, ({"cut": len(value) - MAX_ITEMS} if len(value) > MAX_ITEMS else {})
    if field == "source_fn_stack":
        if not isinstance(value, (list, tuple)):
            return safe_str(value), {}
        out = []
        for entry in value[:MAX_ITEMS]:
            if isinstance(entry, tuple) and len(entry) == 2:
                fn = entry[1]
                qn = getattr(fn, "__qualname__", None)
                out.append([safe_str(entry[0], 200), qn if isinstance(qn, str) else safe_str(fn, 200)])
            else:
                out.append(safe_str(entry, 200))
        return out, ({"cut": len(value) - MAX_ITEMS} if len(value) > MAX_ITEMS else {})
    if field == "original_aten":
        return safe_str(value, 400), {}
    if field == "from_node":
        budget = _Budget(MAX_FROM_NODE_ITEMS)
        out = _from_node(value, budget)
        marks: dict[str, Any] = {}
        if budget.cut:
            marks["cut"] = budget.cut
        if budget.depth_cut:
            marks["cut_depth"] = MAX_FROM_NODE_DEPTH
        return out, marks
    return safe_str(value), {}


#: Sorted meta keys by key set: a graph's nodes have a handful of different ones (the encoder's 4,832 FX node snapshots, 11).
_META_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {}
_META_KEYS_MAX = 1024


def _meta_keys(keys: list[Any]) -> list[str]:
    """`keys` as strings (each cut at 200 characters), sorted."""
    if not all(type(k) is str for k in keys):  # another type's __hash__ is not run: no cache for it
        return sorted(safe_str(k, 200) for k in keys)
    key = tuple(keys)
    hit = _META_KEYS.get(key)
    if hit is None:
        if len(_META_KEYS) >= _META_KEYS_MAX:
            _META_KEYS.clear()
        hit = _META_KEYS[key] = tuple(sorted(cut_str(k, 200) for k in keys))
    return list(hit)


#: Callables whose name attributes are plain slots: reading them runs no user code.
_NAMED_CALLABLES = (types.BuiltinFunctionType, types.FunctionType, types.MethodDescriptorType,
                    types.WrapperDescriptorType, types.ClassMethodDescriptorType)
#: A builtin's module as Python spells it for a reader (``operator.getitem``, not ``_operator.getitem``).
_MODULE_ALIASES = {"_operator": "operator", "builtins": ""}


def target_name(target: Any) -> str:
    """An FX node's target as a reader knows it: ``torch.relu``, ``torch._C._nn.linear``, ``operator.getitem``,
    ``TensorBase.add``, ``torch.nn.functional.dropout``; a string target (a method, a module, an attribute)
    as it is; torch's own objects (``aten.addmm.default``, a higher-order op) by their str()."""
    if type(target) in _NAMED_CALLABLES:
        try:
            name = object.__getattribute__(target, "__qualname__" if type(target) is types.FunctionType else "__name__")
            owner = getattr(target, "__objclass__", None) if isinstance(target, (
                types.MethodDescriptorType, types.WrapperDescriptorType, types.ClassMethodDescriptorType)) else None
            if owner is not None:
                prefix = type.__getattribute__(owner, "__qualname__")
            else:
                prefix = object.__getattribute__(target, "__module__") or ""
                prefix = _MODULE_ALIASES.get(prefix, prefix)
            if isinstance(name, str) and isinstance(prefix, str):
                return cut_str(f"{prefix}.{name}" if prefix else name, 400)
        except Exception:  # noqa: BLE001 - fall back to the type's name below
            pass
    return safe_str(target, 400)


def snapshot_node(node: Any) -> dict[str, Any]:
    meta = node.meta
    fields = {}
    for f in FX_FIELDS:
        has = f in meta
        value = meta.get(f)
        rendered, marks = _field_value(f, value)
        fields[f] = {
            "has": has,
            "populated": has and populated(value),
            "type": type_name(value) if has else None,
            "value": rendered,
            **marks,
        }
    inputs = node.all_input_nodes
    keys = list(itertools.islice(meta.keys(), MAX_META_KEYS))
    out = {
        "name": safe_str(node.name, 400),
        "op": safe_str(node.op, 200),
        "target": target_name(node.target),
        "inputs": [safe_str(n.name, 400) for n in inputs[:MAX_NAMES]],
        "meta_keys": _meta_keys(keys),
        "fields": fields,
        "source": source_of_stack_trace(meta.get("stack_trace")),
    }
    if len(inputs) > MAX_NAMES:
        out["cut_inputs"] = len(inputs) - MAX_NAMES
    if len(meta) > MAX_META_KEYS:
        out["cut_meta_keys"] = len(meta) - MAX_META_KEYS
    if node.op == "get_attr":
        sub = _subgraph_of(node)
        if sub is not None:
            out["subgraph"] = id(sub)
    return out


def _subgraph_of(node: Any) -> Any:
    """The FX graph a ``get_attr`` node names, when it names a nested GraphModule (a flex_attention mask or score
    function, a torch.cond branch); else None (a parameter, a buffer, a constant)."""
    owner = getattr(node.graph, "owning_module", None)
    if owner is None or not isinstance(node.target, str):
        return None
    return _graph_of(_submodule(owner, node.target))


def _submodule(owner: Any, target: str) -> Any:
    """The module at a dotted `target` under `owner`, else None. A walk of ``_modules``: a parameter's get_attr,
    the common case, raises no exception inside the probe."""
    obj = owner
    try:
        for part in target.split("."):
            modules = getattr(obj, "_modules", None)
            obj = modules.get(part) if isinstance(modules, dict) else None
            if obj is None:
                return None
    except Exception:  # noqa: BLE001 - a module whose attributes raise: no nested graph read
        return None
    return obj


def _graph_of(mod: Any) -> Any:
    """A GraphModule's FX graph, else None."""
    try:
        graph = mod.graph if mod is not None and hasattr(type(mod), "graph") else None
    except Exception:  # noqa: BLE001 - a module whose graph property raises
        return None
    return graph if hasattr(graph, "nodes") else None


#: Bound on the depth of nested graphs followed (a branch of a torch.cond inside a while_loop's body ...).
MAX_NESTING = 16


def nested_graphs(gm: Any) -> list[Any]:
    """The graphs nested in a GraphModule, innermost first: each GraphModule a ``get_attr`` node names (a
    torch.cond's branches, a checkpointed region, a while_loop's body), each once, in their nodes' order.
    Inductor's pre- and post-grad passes visit them the same way (``_recursive_*_grad_passes``), so a stage
    read from one call holds the same nodes as those read from one call per graph."""
    out: list[Any] = []
    seen = {id(getattr(gm, "graph", gm))}

    def visit(mod: Any, depth: int) -> None:
        graph = getattr(mod, "graph", None)
        if graph is None or depth > MAX_NESTING:
            return
        for node in graph.nodes:
            if node.op != "get_attr" or not isinstance(node.target, str):
                continue
            sub = _submodule(mod, node.target)
            sub_graph = _graph_of(sub)
            if sub_graph is None or id(sub_graph) in seen:
                continue
            seen.add(id(sub_graph))
            visit(sub, depth + 1)
            out.append(sub_graph)

    visit(gm, 1)
    return out


def snapshot_graph(graph: Any, nested: bool = False) -> dict[str, Any]:
    """Snapshot an ``fx.Graph`` (or a GraphModule's graph); with ``nested``, the graphs nested in the
    GraphModule first (`nested_graphs`), each of their nodes keyed with its own ``graph_id``.

    Bounded: at most MAX_NODES nodes and MAX_GRAPH_BYTES packed bytes, all graphs together; the nodes past
    a bound are counted in ``cut_nodes`` (and ``cut_reason`` says which bound).
    """
    inner = nested_graphs(graph) if nested else []
    graph = getattr(graph, "graph", graph)
    nodes = BoundedList(MAX_NODES, MAX_GRAPH_BYTES, "nodes")
    for sub in inner:
        gid = id(sub)
        for node in sub.nodes:
            nodes.add(lambda: {**snapshot_node(node), "graph_id": gid})  # noqa: B023 - called at once
    for node in graph.nodes:
        nodes.add(lambda: snapshot_node(node))  # noqa: B023 - called at once
    return {"graph_id": id(graph), "node_count": nodes.total, "nodes": nodes.items, **nodes.marks("cut_nodes")}
