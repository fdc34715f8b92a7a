"""Stage objects: the readers of stock Inductor's payloads (and of user probes'), and their helpers.

Which reader reads a record is chosen in ``report/readers.py``. Pure: plain
data in, plain data out. Every reader takes the records of its shape and all
the records of the stage in that graph (for a shape that needs another's).

Every object has ``name``, ``kind``, ``fields`` (field -> has/populated/type)
and ``sources`` (the model lines it carries); each stage adds the keys its
lineage and tables read.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable

from prov_trace.stream import schema as S


@dataclass
class Read:
    """What a reader found in a stage's records: its objects, and the files they were read from."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    #: Source stage: the library frames Dynamo compiled (``qualname (file)``), which are not the user's lines.
    library: list[str] = field(default_factory=list)


def field_row(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: {"has": bool(v.get("has")), "populated": bool(v.get("populated")), "type": v.get("type")}
            for k, v in fields.items()}


def _sources_of_ops(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sources: list[dict[str, Any]] = []
    seen = set()
    for op in ops:
        for src in op.get("source") or []:
            if (src.get("file"), src.get("line")) not in seen:
                seen.add((src.get("file"), src.get("line")))
                sources.append(src)
    return sources


# --- stock shapes ------------------------------------------------------------------------


def source_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    objs: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    library: list[str] = []
    for rec in records:
        p = rec.get("payload") or {}
        if not p.get("user", True):
            frame = f"{p.get('qualname')} ({p.get('file')})"
            if frame not in library:
                library.append(frame)
            continue
        for ln in p.get("lines", []):
            key = (p.get("file"), ln.get("line"))
            src = {"file": p.get("file"), "line": ln.get("line"), "text": ln.get("text"), "func": p.get("qualname")}
            objs[key] = {
                "name": f"{p.get('file')}:{ln.get('line')}",
                "kind": p.get("qualname"),
                "text": ln.get("text"),
                "fields": {
                    "file:line": {"has": True, "populated": True, "type": "str"},
                    "source_text": {"has": True, "populated": bool(ln.get("text")), "type": "str"},
                },
                "sources": [src],
            }
    return Read(list(objs.values()), library=library)


def _from_node_roots(chain: Any) -> list[dict[str, Any]]:
    """Flatten a from_node chain to (name, graph_id) pairs, in Inductor's walk order."""
    out = []
    stack = list(chain or [])
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            out.append({"name": item.get("name"), "graph_id": item.get("graph_id")})
            stack.extend(item.get("from_node") or [])
    return out


def fx_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    objs: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    for rec in records:
        p = rec.get("payload") or {}
        for node in p.get("nodes", []):
            gid = node.get("graph_id", p.get("graph_id"))  # a nested graph's node names its own graph
            key = f"{gid}:{node.get('name')}"
            objs[key] = {
                "name": node.get("name"),
                "kind": node.get("op"),
                "target": node.get("target"),
                "inputs": node.get("inputs", []),
                "fields": field_row(node.get("fields", {})),
                "from_node": _from_node_roots(node.get("fields", {}).get("from_node", {}).get("value")),
                "sources": [node["source"]] if node.get("source") else [],
                "graph_id": gid,
            }
            if node.get("subgraph") is not None:  # a get_attr naming a nested graph: that graph's id
                objs[key]["subgraph"] = node["subgraph"]
    return Read(list(objs.values()))


def ir_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    objs: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    for rec in records:
        payload = rec.get("payload") or {}
        main = _graph_id(payload.get("origin_graph"))
        for op in payload.get("ops", []):
            origins = (op.get("fields", {}).get("origins") or {})
            origin_node = (op.get("fields", {}).get("origin_node") or {})
            names = origins.get("value") or []
            objs[op.get("name")] = {
                "name": op.get("name"),
                "kind": op.get("type"),
                "group": op.get("group"),
                "fields": field_row(op.get("fields", {})),
                "origins": names,
                "origin_node": origin_node.get("value"),
                # Each origin's FX graph id (the FX stages' `graph_id`): the op list's own graph unless the op
                # names another; None in a trace written before prov-trace recorded them (linked by name).
                "origin_graphs": _graph_ids(origins.get("graphs"), len(names), main),
                "origin_node_graph": _graph_id(origin_node["graph"]) if "graph" in origin_node else main,
                "reads": op.get("reads", []),
                "sources": op.get("source") or [],
            }
    return Read(list(objs.values()))


def _graph_id(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _graph_ids(value: Any, n: int, main: int | None) -> list[int | None]:
    if isinstance(value, list) and len(value) == n:
        return [_graph_id(v) for v in value]
    return [main] * n


def post_nodes(kind: Any, ops: list[dict[str, Any]]) -> list[str]:
    """The post-grad nodes a kernel implements, by Inductor's own rule (debug.set_kernel_post_grad_provenance_tracing):
    an extern kernel's origin_node when it has one, else its origins; a generated kernel's ops' origins."""
    out: list[str] = []
    for op in ops:
        f = op.get("fields", {})
        on = (f.get("origin_node") or {}).get("value")
        picks = [on] if (kind == "extern" and on) else ((f.get("origins") or {}).get("value") or [])
        out.extend(n for n in picks if n not in out)
    return out


def kernel_object(name: str, k: dict[str, Any]) -> dict[str, Any]:
    """One kernel (or per-op spec) with the IR ops it holds: the fields every kernel-spec object has."""
    ops = k.get("ops", [])
    return {
        "name": name,
        "kernel": k.get("kernel"),
        "post_nodes": post_nodes(k.get("kind"), ops),
        "kind": k.get("kind"),
        "ops": [op.get("name") for op in ops],
        "origins": k.get("origins", []),
        "metadata": k.get("metadata"),
        "fields": {
            "origins": {"has": True, "populated": bool(k.get("origins")), "type": "list"},
            "get_stack_traces": {"has": True, "type": "list",
                                 "populated": any(op.get("fields", {}).get("get_stack_traces", {}).get("populated") for op in ops)},
        },
        "sources": _sources_of_ops(ops),
    }


class KernelNames:
    """An extern kernel is called once per op: number the repeats so each call is its own object."""

    def __init__(self) -> None:
        self._seen: dict[Any, int] = {}

    def __call__(self, raw: Any) -> str:
        self._seen[raw] = self._seen.get(raw, 0) + 1
        n = self._seen[raw]
        return raw if n == 1 else f"{raw} #{n}"


def kernel_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    out = []
    names = KernelNames()
    for rec in records:
        k = rec.get("payload") or {}
        obj = kernel_object(names(k.get("kernel")), k)
        obj["fields"]["kernel_metadata"] = {"has": "metadata" in k, "populated": bool(k.get("metadata")), "type": "str"}
        out.append(obj)
    return Read(out)


def artifact_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    read = Read()
    for rec in records:
        p = rec.get("payload") or {}
        if p.get("path"):
            read.files.append(p["path"])
        for k in p.get("kernels", []):
            calls = k.get("calls", [])
            if k.get("kind") == "generated" and len(calls) <= 1:
                entries = [(k.get("kernel"), k.get("def_line"), calls, k.get("provenance_comments", []))]
            elif k.get("kind") == "generated":
                # A kernel Inductor reused (the same code for another op) is defined once and called once per
                # use; the kernel spec has one object per use, in call order. The comment above the definition
                # was written for the first use only, so a later use carries only its call's comments.
                head = [x for x in k.get("comments", []) if S.is_provenance_comment(x)]
                entries = [
                    (k.get("kernel") if i == 0 else f"{k.get('kernel')} #{i + 1}", k.get("def_line"), [c],
                     (head if i == 0 else []) + [x for x in c.get("comments", []) if S.is_provenance_comment(x)])
                    for i, c in enumerate(calls)
                ]
            else:
                # Extern and fallback kernels have no definition: each call site is one kernel, as at the kernel spec.
                entries = [
                    (k.get("kernel") if i == 0 else f"{k.get('kernel')} #{i + 1}", None, [c],
                     [x for x in c.get("comments", []) if S.is_provenance_comment(x)])
                    for i, c in enumerate(k.get("calls", []))
                ]
            for name, def_line, calls, comments in entries:
                read.objects.append({
                    "name": name,
                    "kernel": k.get("kernel"),
                    "kind": k.get("kind"),
                    **({"reused": True} if k.get("kind") == "generated" and name != k.get("kernel") else {}),
                    "file": p.get("path"),
                    "def_line": def_line,
                    "call_lines": [c.get("line") for c in calls],
                    "provenance_comments": comments,
                    # A comment that names no node is there but empty (the seeds' call): not populated.
                    "fields": {"provenance_comment": {"has": True, "type": "list",
                                                      "populated": any(not S.names_nothing(c) for c in comments)}},
                    "sources": [],
                })
    return read


def _snapshot_sources(value: Any, out: list[dict[str, Any]], seen: set, budget: list[int]) -> None:
    """The model lines named inside a generic snapshot (its FX nodes' and IR ops' `source`), bounded."""
    if budget[0] <= 0:
        return
    budget[0] -= 1
    if isinstance(value, dict):
        src = value.get("source")
        for s in (src if isinstance(src, list) else [src]):
            # A source names a file (str) and a line (int); anything else in a user payload is not one.
            if isinstance(s, dict) and isinstance(s.get("file"), str) and s.get("file") and isinstance(s.get("line"), int):
                key = (s.get("file"), s.get("line"))
                if key not in seen:
                    seen.add(key)
                    out.append(s)
        for k, v in value.items():
            if k != "source" and isinstance(v, (dict, list)):
                _snapshot_sources(v, out, seen, budget)
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, (dict, list)):
                _snapshot_sources(v, out, seen, budget)


def _name(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def generic_objects(records: list[dict[str, Any]], stage_records: list[dict[str, Any]]) -> Read:
    """A user probe's stage: one object per call and phase, with one field per snapshot key.

    A field is an argument name (or `return`); it is populated when the snapshotted value
    was, by the population rule applied to the live value when it was taken.
    """
    out = []
    for r in records:
        p = r.get("payload") or {}
        name = f"call {r.get('call')} ({r.get('phase')})"
        if isinstance(p, dict) and isinstance(p.get("args"), dict):
            snaps = dict(p["args"])
            if "return" in p:
                snaps["return"] = p["return"]
            # A payload's own words (type, kind) are names only where they are strings: a user probe's
            # payload is not shaped by the reader (stream/conform.py), so anything may stand there.
            fields = {k: {"has": True, "populated": bool(isinstance(v, dict) and v.get("populated")),
                          "type": _name(v.get("type")) if isinstance(v, dict) else None} for k, v in snaps.items()}
            sources: list[dict[str, Any]] = []
            _snapshot_sources([v.get("value") for v in snaps.values() if isinstance(v, dict)], sources, set(), [20000])
            out.append({"name": name, "kind": r.get("target"), "fields": fields,
                        "kinds": {k: _name(v.get("kind")) for k, v in snaps.items() if isinstance(v, dict)},
                        "sources": sources})
            continue
        out.append({"name": name, "kind": r.get("target"),
                    "fields": {k: {"has": True, "populated": bool(v), "type": type(v).__name__}
                               for k, v in p.items()} if isinstance(p, dict) else {},
                    "sources": []})
    return Read(out)


#: A reader: (the records of its shape, all the stage's records in the graph) -> what it read.
Reader = Callable[[list[dict[str, Any]], list[dict[str, Any]]], Read]
