"""Lineage: how each object of one stage descends from the objects of the stage before it.

Pure: the report model's per-stage objects in, nodes and edges out. Every edge
comes from a field the trace recorded, never from a name that merely looks alike:

=================  ==============================  =============================================
to stage           edge ``via``                    read from
=================  ==============================  =============================================
FX pre-grad        ``source``                      the node's own source line (its stack trace)
FX post-grad       ``from_node``                   the node's ``from_node`` chain (name *and* graph id)
LoopLevelIR pre    ``origin_node``                 the op's ``origin_node``: the node whose value it is
LoopLevelIR pre    ``also_in_origins``             the op's other ``origins``: nodes Inductor lists there
                                                   (an input it realised, an op computed inline), and the
                                                   nodes of a nested graph one of them names (a template's
                                                   mask function); a side link, not a lowering of that node
LoopLevelIR pre    ``origins``                     an op with no ``origin_node``: its ``origins``, but a
                                                   node another op is the value of (the kernel an input
                                                   was realised for), or one an op it reads was lowered
                                                   from (its input), is an ``also_in_origins`` side link
LoopLevelIR post   ``name``                        the same buffer name before the passes, else as above
Kernel spec        ``member``                      the IR ops the kernel holds
Artifact           ``name``                        the same kernel in the emitted file
(any)              ``source``                      a source line, when the object carries one but
                                                   has no link from the stage before it
(any)              ``inherited``                   an object with no source and no link of its own:
                                                   its nearest source-bearing producers, by inputs/reads
=================  ==============================  =============================================

Only the edges that say one object became another (``FLOW``) draw a line's
flow, and only they make a decomposition: a node with several such successors in
the next stage (``linear`` → ``permute`` + ``addmm``), not counting what unpacks
an op's outputs: ``MultiOutput`` buffers, and post-grad ``operator.getitem`` nodes.
A fusion is named only where one kernel really holds several IR ops. ``also_in_origins`` links are listed
apart, never called a decomposition or a fusion. FX placeholders and outputs are
graph boundaries, not ops, and are left out.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any, TypedDict

from prov_trace.report.text import basename, cut
from prov_trace.stream import schema as S


class LineageNode(TypedDict, total=False):
    id: str
    stage: str
    name: str
    kind: Any
    label: str
    sources: list[dict[str, Any]]
    inherited: bool
    inherits_from: list[str]
    fan_in: int
    fan_out: int


#: "from" is a keyword: these are spelled in TypedDict's functional form.
LineageEdge = TypedDict("LineageEdge", {"from": str, "to": str, "via": str})
Decomposition = TypedDict("Decomposition", {"from": str, "to": list[str], "stage": str})
Fusion = TypedDict("Fusion", {"from": list[str], "to": str, "stage": str})


AlsoInOrigins = TypedDict("AlsoInOrigins", {"from": list[str], "to": str, "stage": str})


class Lineage(TypedDict):
    stages: list[str]
    nodes: list[LineageNode]
    edges: list[LineageEdge]
    decompositions: list[Decomposition]
    fusions: list[Fusion]
    also_in_origins: list[AlsoInOrigins]


#: The edges that say an object became (or was emitted as) another: a line's flow follows these.
FLOW = ("source", "from_node", "origin_node", "origins", "name", "member", "debug_handle")
#: The edges that make a decomposition when one node has several of them into the next stage.
LOWERING = ("from_node", "origin_node", "origins")

#: The stages lineage is drawn across, in order. A user probe's own stage has no linking rule and is left out.
STAGES = (S.SOURCE, S.PRE_GRAD, S.POST_GRAD, S.IR_PRE, S.IR_POST, S.KERNEL_SPEC, S.ARTIFACT)

_BOUNDARY = ("placeholder", "output")


def node_id(stage: str, name: Any) -> str:
    return f"{stage}:{name}"


def _src_keys(obj: dict[str, Any]) -> list[tuple[Any, Any]]:
    return [(s.get("file"), s.get("line")) for s in obj.get("sources") or []]


def build(stages: dict[str, dict[str, Any]], survival: list[dict[str, Any]]) -> Lineage:
    """Nodes and edges for one graph, from the model's stages and survival rows."""
    nodes: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    edges: list[dict[str, Any]] = []
    seen_edges: set[tuple[str, str]] = set()

    def add_node(stage: str, name: Any, obj: dict[str, Any] | None, label: str | None = None, **extra: Any) -> str:
        nid = node_id(stage, name)
        base, i = nid, 2
        while nid in nodes:
            nid = f"{base} ({i})"
            i += 1
        nodes[nid] = {
            "id": nid, "stage": stage, "name": str(name), "kind": (obj or {}).get("kind"),
            "label": label if label is not None else str(name),
            "sources": [{"file": f, "line": ln} for f, ln in _src_keys(obj or {})],
            "inherited": False, "inherits_from": [], **extra,
        }
        return nid

    def add_edge(a: str | None, b: str | None, via: str) -> None:
        if a is None or b is None or a == b or (a, b) in seen_edges:
            return
        seen_edges.add((a, b))
        edges.append({"from": a, "to": b, "via": via})

    def observed(st: str) -> bool:
        return bool((stages.get(st) or {}).get("observed"))

    def objects(st: str) -> list[dict[str, Any]]:
        return (stages.get(st) or {}).get("objects", []) if observed(st) else []

    # Source lines: the survival rows are the model's lines (they fall back to FX lines when the source stage is missing).
    src_ids: dict[tuple[Any, Any], str] = {}
    for row in survival:
        key = (row.get("file"), row.get("line"))
        nid = add_node(S.SOURCE, f"{row.get('file')}:{row.get('line')}",
                       {"kind": "line", "sources": [{"file": row.get("file"), "line": row.get("line")}]},
                       label=f"{basename(row.get('file'))}:{row.get('line')} {cut(str(row.get('text') or ''))}".strip(),
                       text=row.get("text"))
        src_ids[key] = nid

    def link_sources(obj: dict[str, Any], nid: str) -> None:
        for key in _src_keys(obj):
            add_edge(src_ids.get(key), nid, "source")

    # FX pre-grad: from the source line each node carries.
    pre_keys: dict[tuple[Any, Any], str] = {}
    pre_objs = [o for o in objects(S.PRE_GRAD) if o.get("kind") not in _BOUNDARY]
    for o in pre_objs:
        nid = add_node(S.PRE_GRAD, o["name"], o, target=o.get("target"))
        pre_keys[(o.get("graph_id"), o["name"])] = nid
    for o in pre_objs:
        link_sources(o, pre_keys[(o.get("graph_id"), o["name"])])

    # FX post-grad: from_node names a pre-grad node by name and graph id.
    post_objs = [o for o in objects(S.POST_GRAD) if o.get("kind") not in _BOUNDARY]
    post_ids: dict[Any, str] = {}
    post_keys: dict[tuple[Any, Any], str] = {}  # (graph id, name): a nested graph's nodes share names with others
    in_graph: dict[Any, list[str]] = {}  # graph id -> its nodes, for a get_attr naming a nested graph
    for o in post_objs:
        nid = add_node(S.POST_GRAD, o["name"], o, target=o.get("target"))
        post_ids.setdefault(o["name"], nid)
        post_keys[(o.get("graph_id"), o["name"])] = nid
        in_graph.setdefault(o.get("graph_id"), []).append(nid)
        linked = False
        for root in o.get("from_node") or []:
            pid = pre_keys.get((root.get("graph_id"), root.get("name")))
            if pid:
                add_edge(pid, nid, "from_node")
                linked = True
        if not linked:
            link_sources(o, nid)

    # LoopLevelIR before the passes: origin_node names the post-grad node whose value the op is; the
    # rest of origins are nodes Inductor lists too (an input it realised, an op computed inline).
    def post_node(name: Any, graph: Any) -> str | None:
        # By graph id and name where the trace has the origin's graph; else by name (an older trace, or a graph
        # the post-grad stage did not read).
        return post_keys.get((graph, name)) or post_ids.get(name)

    # An origin that is a get_attr naming a nested graph (flex_attention's mask function) whose nodes no op is
    # made from: the op computes that graph inline, and its nodes are side links of the op, as the other nodes in
    # its origins are. (A torch.cond's branches are lowered to ops of their own, linked as any op is.)
    nested: dict[Any, list[str]] = {}
    inline: list[tuple[Any, str]] = []  # (get_attr name, op): filled by link_origins
    for o in (stages.get(S.POST_GRAD) or {}).get("boundary", []) if observed(S.POST_GRAD) else []:
        if o.get("kind") == "get_attr" and o.get("subgraph") in in_graph:
            nested.setdefault(o["name"], []).extend(in_graph[o["subgraph"]])

    # The nodes some op is the value of (its origin_node). An op with no origin_node of its own (an input Inductor
    # realised for a fallback kernel: origins `add_one`, `mul`) lists such a node among its origins only because
    # that node's lowering made it: a side link, as for an op with an origin_node; its other origins lower to it.
    valued = {post_node(o.get("origin_node"), o.get("origin_node_graph"))
              for st in (S.IR_PRE, S.IR_POST) for o in objects(st)} - {None}
    # The nodes each IR op was lowered from, by buffer name (a buffer keeps its name through the passes): an op
    # that reads one has those nodes among its origins as its input (`mean` reading `var_mean`'s welford
    # buffer), not as what it computes.
    made_from: dict[Any, set[str]] = {}

    def link_origins(o: dict[str, Any], nid: str) -> bool:
        origins = o.get("origins") or []
        graphs = o.get("origin_graphs") or []
        graphs = graphs if len(graphs) == len(origins) else [None] * len(origins)
        primary = post_node(o.get("origin_node"), o.get("origin_node_graph"))
        pids = [post_node(n, gid) for n, gid in zip(origins, graphs)]
        lowers: set[str] = set()
        if primary is None:
            candidates = {p for p in pids if p is not None and p not in valued}
            inputs = set().union(*(made_from.get(r, ()) for r in o.get("reads") or []))
            # All of them inputs: the op goes on with the same node's work (a split reduction's second pass).
            lowers = candidates - inputs or candidates or {p for p in pids if p is not None}
        made_from.setdefault(o["name"], {primary} if primary is not None else lowers)
        linked = False
        if primary is not None:
            add_edge(primary, nid, "origin_node")
            linked = True
        for n, pid in zip(origins, pids):
            if pid is not None and pid != primary:
                add_edge(pid, nid, "origins" if pid in lowers else "also_in_origins")
                linked = True
            if n in nested and primary is not None:
                inline.append((n, nid))
        return linked

    ir_pre_ids: dict[Any, str] = {}
    for o in objects(S.IR_PRE):
        nid = add_node(S.IR_PRE, o["name"], o)
        ir_pre_ids.setdefault(o["name"], nid)
        if not link_origins(o, nid):
            link_sources(o, nid)
    lowered = {e["from"] for e in edges if nodes[e["to"]]["stage"] == S.IR_PRE}
    for attr, nid in inline:
        if not lowered & set(nested[attr]):
            for pid in nested[attr]:
                add_edge(pid, nid, "also_in_origins")
    inline.clear()  # the post-pass ops' origins: the same graphs, linked once through the pre-pass ops

    # LoopLevelIR after the passes: the same buffer, else (a buffer a pass made) its origins.
    ir_post_ids: dict[Any, str] = {}
    for o in objects(S.IR_POST):
        nid = add_node(S.IR_POST, o["name"], o)
        ir_post_ids.setdefault(o["name"], nid)
        if o["name"] in ir_pre_ids:
            add_edge(ir_pre_ids[o["name"]], nid, "name")
        elif not link_origins(o, nid):
            link_sources(o, nid)

    # Kernel spec: the IR ops each kernel holds, at the last IR stage observed.
    ir_last = ir_post_ids if observed(S.IR_POST) else ir_pre_ids
    kernel_ids: dict[Any, str] = {}
    handle_ids: dict[str, str] = {}  # torch-spyre: an OpSpec by its DebugHandle's id
    for k in objects(S.KERNEL_SPEC):
        nid = add_node(S.KERNEL_SPEC, k["name"], k, kernel=k.get("kernel"))
        kernel_ids.setdefault(k["name"], nid)
        handle = (k.get("debug_handle_fields") or {}).get("id")
        if isinstance(handle, str) and handle:
            handle_ids.setdefault(handle, nid)
        linked = False
        for op in k.get("ops") or []:
            if op in ir_last:
                add_edge(ir_last[op], nid, "member")
                linked = True
        if not linked:
            link_sources(k, nid)

    # Artifact: the same kernel (same name, numbered the same way) in the emitted file; under torch-spyre, the
    # SDSC op whose debug_handle_ is the OpSpec's handle (their names never match: buf0:batchmatmul, 0_batchmatmul).
    for a in objects(S.ARTIFACT):
        nid = add_node(S.ARTIFACT, a["name"], a, kernel=a.get("kernel"))
        if a["name"] in kernel_ids:
            add_edge(kernel_ids[a["name"]], nid, "name")
        elif a.get("debug_handle_id") in handle_ids:
            add_edge(handle_ids[a["debug_handle_id"]], nid, "debug_handle")

    _inherit(nodes, edges, add_edge, stages, objects)
    return _summarise(nodes, edges)


def _inherit(nodes, edges, add_edge, stages, objects) -> None:
    """An op with no source and no link of its own inherits from its nearest source-bearing producers."""
    incoming = {e["to"] for e in edges}
    for st, inputs_key in ((S.PRE_GRAD, "inputs"), (S.POST_GRAD, "inputs"), (S.IR_PRE, "reads"), (S.IR_POST, "reads")):
        objs = {o["name"]: o for o in objects(st) if o.get("kind") not in _BOUNDARY}
        for name, o in objs.items():
            nid = node_id(st, name)
            if nid not in nodes or nid in incoming or o.get("sources"):
                continue
            producers: list[str] = []
            seen = {name}
            queue = deque(i for i in (o.get(inputs_key) or []) if i != name)
            while queue:
                p = queue.popleft()
                if p in seen or p not in objs:
                    continue
                seen.add(p)
                po = objs[p]
                pid = node_id(st, p)
                if po.get("sources") or (pid in incoming):
                    producers.append(pid)
                else:
                    queue.extend(po.get(inputs_key) or [])
            for pid in producers:
                if pid in nodes:
                    add_edge(pid, nid, "inherited")
            if producers:
                nodes[nid]["inherited"] = True
                nodes[nid]["inherits_from"] = [p for p in producers if p in nodes]


def _unpacks(node: dict[str, Any]) -> bool:
    """An object that only picks one output of a multi-output op: IR's MultiOutput, FX's tuple getitem."""
    return node.get("kind") == "MultiOutput" or (node["stage"] == S.POST_GRAD and node.get("target") == "operator.getitem")


def _summarise(nodes: "OrderedDict[str, dict[str, Any]]", edges: list[dict[str, Any]]) -> Lineage:
    """Decompositions (one node lowered into several), fusions (one kernel holding several IR ops),
    and the side links of ``origins``, each read from the edges of its own kind."""
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    members: dict[str, list[str]] = {}
    also: dict[str, list[str]] = {}
    for e in edges:
        if nodes[e["from"]]["stage"] == nodes[e["to"]]["stage"]:
            continue
        if e["via"] in FLOW and e["via"] != "source":
            succ.setdefault(e["from"], []).append(e["to"])
            pred.setdefault(e["to"], []).append(e["from"])
        if e["via"] == "member":
            members.setdefault(e["to"], []).append(e["from"])
        elif e["via"] == "also_in_origins":
            also.setdefault(e["to"], []).append(e["from"])
    lowered: dict[str, list[str]] = {}
    for e in edges:
        if e["via"] in LOWERING:
            lowered.setdefault(e["from"], []).append(e["to"])
    for nid, n in nodes.items():
        n["fan_out"] = len(succ.get(nid, []))
        n["fan_in"] = len(pred.get(nid, []))
    # A MultiOutput buffer picks one output of the op beside it (a fallback kernel's, a custom op's), and a post-grad
    # `operator.getitem` one output of the node beside it (`var_mean`'s two): a node lowered to that op and what
    # unpacks its result is one op, not a decomposition.
    decompositions = [{"from": a, "to": b, "stage": nodes[b[0]]["stage"]} for a, b in lowered.items()
                      if sum(1 for n in b if not _unpacks(nodes[n])) > 1]
    fusions = [{"from": a, "to": b, "stage": nodes[b]["stage"]} for b, a in members.items() if len(a) > 1]
    return {
        "stages": [st for st in STAGES if any(n["stage"] == st for n in nodes.values())],
        "nodes": list(nodes.values()),
        "edges": edges,
        "decompositions": decompositions,
        "fusions": fusions,
        "also_in_origins": [{"from": a, "to": b, "stage": nodes[b]["stage"]} for b, a in also.items()],
    }


def flow_successors(lineage: dict[str, Any]) -> dict[str, list[str]]:
    """Each node's successors along the flow edges (``FLOW``): what it became at the next stages."""
    succ: dict[str, list[str]] = {}
    for e in lineage["edges"]:
        if e["via"] in FLOW:
            succ.setdefault(e["from"], []).append(e["to"])
    return succ


def reach(lineage: dict[str, Any], start: str) -> list[str]:
    """Every node a node flows into (along ``FLOW`` edges), itself first, in breadth-first order."""
    succ = flow_successors(lineage)
    out, seen, queue = [], {start}, deque([start])
    while queue:
        n = queue.popleft()
        out.append(n)
        for m in succ.get(n, []):
            if m not in seen:
                seen.add(m)
                queue.append(m)
    return out
