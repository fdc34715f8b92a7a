"""The report model: records in, plain data out. Measurement only: every number is counted from the trace.

Pure: no torch, no I/O. Renderers (markdown, and others) are pure functions of
what ``build`` returns, a tree of dicts and lists that serialises to JSON as is.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from prov_trace import schema
from prov_trace.report.reader import Trace
from prov_trace.report import lineage as _lineage

S = schema

#: (layer, field, stages where the field is measured). Everywhere else the cell is "not applicable".
FIELDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Source", "file:line", (S.SOURCE,)),
    ("Source", "source_text", (S.SOURCE,)),
    *(("FX", f, (S.PRE_GRAD, S.POST_GRAD)) for f in S.FX_FIELDS),
    ("IR", "origins", (S.IR_PRE, S.IR_POST, S.KERNEL_SPEC)),
    ("IR", "origin_node", (S.IR_PRE, S.IR_POST)),
    ("IR", "traceback", (S.IR_PRE, S.IR_POST)),
    ("IR", "get_stack_traces", (S.IR_PRE, S.IR_POST, S.KERNEL_SPEC)),
    ("Backend", "kernel_metadata", (S.KERNEL_SPEC,)),
    ("Backend", "provenance_comment", (S.ARTIFACT,)),
    # torch-spyre: OpSpec.debug_handle at the kernel spec, the op key's debug_handle_ in each sdsc_*.json.
    ("Spyre", "debug_handle", (S.KERNEL_SPEC, S.ARTIFACT)),
)
#: The layer of the rows a user probe's stage adds to the matrix (one per snapshot key).
USER_LAYER = "Probe"

SYMBOLS = OrderedDict(
    [
        ("all", ("✅", "populated (exists and non-empty) on every object the stage produced")),
        ("some", ("◐", "populated on n of N objects")),
        ("none", ("❌", "reachable at this stage but empty or absent on every object (a drop, or an object with no source to carry)")),
        ("na", ("➖", "not applicable: the object this stage produces has no such slot")),
        ("empty", ("∅", "the stage fired but produced no objects to measure")),
        ("unobserved", ("⚠", "not observed: the stage's hook did not resolve or did not fire, so nothing was measured")),
    ]
)


def _cell(n: int, total: int) -> dict[str, Any]:
    if total == 0:
        state = "empty"
    elif n == total:
        state = "all"
    elif n == 0:
        state = "none"
    else:
        state = "some"
    return {"state": state, "n": n, "total": total}


def _fmt_loc(src: dict[str, Any] | None) -> str | None:
    if not src:
        return None
    return f"{src.get('file')}:{src.get('line')}"


# --- objects per stage ------------------------------------------------------------------


def _field_row(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: {"has": bool(v.get("has")), "populated": bool(v.get("populated")), "type": v.get("type")} for k, v in fields.items()}


def _fx_objects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    for rec in records:
        p = rec.get("payload") or {}
        for node in p.get("nodes", []):
            key = f"{p.get('graph_id')}:{node.get('name')}"
            objs[key] = {
                "name": node.get("name"),
                "kind": node.get("op"),
                "target": node.get("target"),
                "inputs": node.get("inputs", []),
                "fields": _field_row(node.get("fields", {})),
                "from_node": _from_node_roots(node.get("fields", {}).get("from_node", {}).get("value")),
                "sources": [node["source"]] if node.get("source") else [],
                "graph_id": p.get("graph_id"),
            }
    return list(objs.values())


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


def _ir_objects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs: "OrderedDict[str, dict[str, Any]]" = OrderedDict()
    for rec in records:
        for op in (rec.get("payload") or {}).get("ops", []):
            objs[op.get("name")] = {
                "name": op.get("name"),
                "kind": op.get("type"),
                "group": op.get("group"),
                "fields": _field_row(op.get("fields", {})),
                "origins": (op.get("fields", {}).get("origins") or {}).get("value") or [],
                "origin_node": (op.get("fields", {}).get("origin_node") or {}).get("value"),
                "reads": op.get("reads", []),
                "sources": op.get("source") or [],
            }
    return list(objs.values())


def _kernel_objects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    seen_names: dict[str, int] = {}
    for rec in records:
        k = rec.get("payload") or {}
        ops = k.get("ops", [])
        raw = k.get("kernel")
        seen_names[raw] = seen_names.get(raw, 0) + 1
        # An extern kernel is called once per op: number the repeats so each call is its own object.
        name = raw if seen_names[raw] == 1 else f"{raw} #{seen_names[raw]}"
        sources: list[dict[str, Any]] = []
        seen = set()
        for op in ops:
            for src in op.get("source") or []:
                if (src.get("file"), src.get("line")) not in seen:
                    seen.add((src.get("file"), src.get("line")))
                    sources.append(src)
        # The post-grad nodes a kernel implements, by Inductor's own rule (debug.set_kernel_post_grad_provenance_tracing):
        # an extern kernel's origin_node when it has one, else its origins; a generated kernel's ops' origins.
        post_nodes: list[str] = []
        for op in ops:
            f = op.get("fields", {})
            on = (f.get("origin_node") or {}).get("value")
            picks = [on] if (k.get("kind") == "extern" and on) else ((f.get("origins") or {}).get("value") or [])
            post_nodes.extend(n for n in picks if n not in post_nodes)
        fields = {
            "origins": {"has": True, "populated": bool(k.get("origins")), "type": "list"},
            "get_stack_traces": {"has": True, "type": "list",
                                 "populated": any(op.get("fields", {}).get("get_stack_traces", {}).get("populated") for op in ops)},
            "kernel_metadata": {"has": "metadata" in k, "populated": bool(k.get("metadata")), "type": "str"},
        }
        if k.get("kind") == "op_spec":
            # A torch-spyre OpSpec: no kernel metadata slot; its provenance is `debug_handle`.
            del fields["kernel_metadata"]
            dh = k.get("debug_handle") or {}
            fields["debug_handle"] = {"has": bool(dh.get("has")), "populated": bool(dh.get("populated")), "type": dh.get("type")}
            if dh.get("source") and not any((s.get("file"), s.get("line")) == (dh["source"].get("file"), dh["source"].get("line"))
                                            for s in sources):
                sources.append(dh["source"])
        out.append({
            "name": name,
            "kernel": raw,
            "post_nodes": post_nodes,
            "kind": k.get("kind"),
            "ops": [op.get("name") for op in ops],
            "origins": k.get("origins", []),
            "metadata": k.get("metadata"),
            "fields": fields,
            "sources": sources,
            **({"debug_handle": (k.get("debug_handle") or {}).get("file_line"),
                "op_spec_fields": [f.get("name") for f in (k.get("op_spec") or {}).get("declared_fields", [])],
                "populated_provenance": (k.get("op_spec") or {}).get("populated_provenance", [])}
               if k.get("kind") == "op_spec" else {}),
        })
    return out


def _sdsc_objects(records: list[dict[str, Any]], paths: list[str]) -> list[dict[str, Any]]:
    """torch-spyre: one object per op key of each sdsc_*.json read from the kernels' exact bundle directories."""
    kernels = {}
    for rec in records:
        k = (rec.get("payload") or {}).get("superdsc_kernel")
        if isinstance(k, dict):
            kernels[k.get("kernel")] = k
    out = []
    for rec in records:
        for bundle in (rec.get("payload") or {}).get("sdsc_bundles", []):
            kernel = bundle.get("kernel")
            for f in bundle.get("files", []):
                paths.append(f.get("path"))
                base = str(f.get("path") or "").replace("\\", "/").rsplit("/", 1)[-1]
                for op in f.get("ops", []):
                    dh = op.get("debug_handle") or {}
                    out.append({
                        "name": f"{kernel}/{base}:{op.get('key')}",
                        "kernel": kernel,
                        "kind": "sdsc_op",
                        "file": f.get("path"),
                        "def_line": None,
                        "call_lines": [],
                        "provenance_comments": [],
                        "provenance_keys": sorted(op.get("provenance_keys") or {}),
                        "debug_handle": dh.get("file_line"),
                        "origins": (kernels.get(kernel) or {}).get("origins", []),
                        "fields": {"debug_handle": {"has": bool(dh.get("has")), "populated": bool(dh.get("populated")),
                                                    "type": dh.get("type")}},
                        "sources": [dh["source"]] if dh.get("source") else [],
                    })
    return out


def _artifact_objects(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    out = []
    paths = []
    out.extend(_sdsc_objects(records, paths))
    for rec in records:
        p = rec.get("payload") or {}
        if p.get("path"):
            paths.append(p["path"])
        for k in p.get("kernels", []):
            if k.get("kind") == "generated":
                entries = [(k.get("kernel"), k.get("def_line"), k.get("calls", []), k.get("provenance_comments", []))]
            else:
                # Extern and fallback kernels have no definition: each call site is one kernel, as at the kernel spec.
                entries = [
                    (k.get("kernel") if i == 0 else f"{k.get('kernel')} #{i + 1}", None, [c],
                     [x for x in c.get("comments", []) if _is_provenance(x)])
                    for i, c in enumerate(k.get("calls", []))
                ]
            for name, def_line, calls, comments in entries:
                out.append({
                    "name": name,
                    "kernel": k.get("kernel"),
                    "kind": k.get("kind"),
                    "file": p.get("path"),
                    "def_line": def_line,
                    "call_lines": [c.get("line") for c in calls],
                    "provenance_comments": comments,
                    "fields": {"provenance_comment": {"has": True, "populated": bool(comments), "type": "list"}},
                    "sources": [],
                })
    return out, paths


def _is_provenance(line: str) -> bool:
    from prov_trace.probes.artifact import is_provenance_comment

    return is_provenance_comment(line)


def _source_objects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    objs: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for rec in records:
        p = rec.get("payload") or {}
        if not p.get("user", True):
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
    return list(objs.values())


_EXTRACT = {
    S.SOURCE: _source_objects,
    S.PRE_GRAD: _fx_objects,
    S.POST_GRAD: _fx_objects,
    S.IR_PRE: _ir_objects,
    S.IR_POST: _ir_objects,
    S.KERNEL_SPEC: _kernel_objects,
}


# --- graphs -----------------------------------------------------------------------------


def _group(trace: Trace) -> "OrderedDict[tuple, dict[str, list]]":
    """Probe records grouped per graph: (compile id, graph kind) -> stage -> records."""
    probes = [r for r in trace.records if r.get("kind") == S.PROBE and r.get("phase") != "unwind"]
    kinds_by_cid: dict[Any, list[str]] = OrderedDict()
    for r in probes:
        kinds_by_cid.setdefault(r.get("compile_id"), [])
        g = r.get("graph")
        if g and g not in kinds_by_cid[r.get("compile_id")]:
            kinds_by_cid[r.get("compile_id")].append(g)
    graphs: "OrderedDict[tuple, dict[str, list]]" = OrderedDict()
    for cid, kinds in kinds_by_cid.items():
        for kind in kinds or [None]:
            graphs[(cid, kind)] = {}
    for r in probes:
        cid, g = r.get("compile_id"), r.get("graph")
        # Records with no graph kind (source, pre-grad) belong to every graph of their compile id.
        targets = [(cid, g)] if g else [(cid, k) for k in (kinds_by_cid.get(cid) or [None])]
        for key in targets:
            graphs[key].setdefault(r.get("stage"), []).append(r)
    return graphs


def _observed(stage: str, records: list[dict[str, Any]], hooks: list[dict[str, Any]]) -> bool:
    return bool(records)


def _user_fields(stages: dict[str, dict[str, Any]], stage_order: list[str]) -> list[tuple[str, str, tuple[str, ...]]]:
    """One matrix row per key a user probe's snapshots carry (an argument name, or `return`)."""
    where: "OrderedDict[str, list[str]]" = OrderedDict()
    for st in stage_order:
        if st in S.STAGES:
            continue
        for o in (stages.get(st) or {}).get("objects", []):
            for key in o["fields"]:
                if st not in where.setdefault(key, []):
                    where[key].append(st)
    return [(USER_LAYER, key, tuple(sts)) for key, sts in where.items()]


def _matrix(stages: dict[str, dict[str, Any]], stage_order: list[str]) -> list[dict[str, Any]]:
    rows = []
    for layer, fname, where in FIELDS + tuple(_user_fields(stages, stage_order)):
        cells = {}
        for st in stage_order:
            data = stages.get(st)
            if st not in where:
                cells[st] = {"state": "na", "n": 0, "total": 0}
            elif data is None or not data["observed"]:
                cells[st] = {"state": "unobserved", "n": 0, "total": 0}
            elif data["objects"] and not any(fname in o["fields"] for o in data["objects"]):
                # None of this stage's objects has such a slot (e.g. a stock kernel has no debug_handle).
                cells[st] = {"state": "na", "n": 0, "total": 0}
            else:
                objs = data["objects"]
                n = sum(1 for o in objs if o["fields"].get(fname, {}).get("populated"))
                cells[st] = _cell(n, len(objs))
                cells[st]["objects"] = [o["name"] for o in objs if o["fields"].get(fname, {}).get("populated")][:200]
        rows.append({"layer": layer, "field": fname, "cells": cells})
    return rows


def _survival(stages: dict[str, dict[str, Any]], stage_order: list[str]) -> list[dict[str, Any]]:
    """Per model source line: where its provenance is last attached, and where it is first lost."""
    src = stages.get(S.SOURCE)
    seen: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for o in (src["objects"] if src else []):
        seen.setdefault((o["sources"][0].get("file"), o["sources"][0].get("line")), o["sources"][0])
    # Lines of functions Dynamo inlined (a submodule's forward, a Hugging Face layer) are not in the
    # code objects it compiled, but the FX stack traces name them: they get rows too.
    extra: "OrderedDict[tuple, dict[str, Any]]" = OrderedDict()
    for st in (S.PRE_GRAD, S.POST_GRAD):
        for o in (stages.get(st) or {}).get("objects", []):
            for s in o["sources"]:
                key = (s.get("file"), s.get("line"))
                if key not in seen:
                    extra.setdefault(key, s)
    lines = list(seen.values()) + [extra[k] for k in sorted(extra, key=lambda k: (str(k[0]), k[1] or 0))]
    # Kernels that carry a provenance comment in the artifact, by name.
    art = stages.get(S.ARTIFACT)
    commented = {o["name"] for o in art["objects"] if o["fields"].get("provenance_comment", {}).get("populated")} if art else set()
    # Each stage's objects by the source lines they carry, built once: a lookup per line, not a scan
    # (a graph with thousands of distinct lines and nodes would otherwise take lines x objects).
    by_line = {st: _by_line(data["objects"]) for st, data in stages.items() if data is not None and data["observed"]}
    ks = stages.get(S.KERNEL_SPEC)
    ks_by_line = _by_line(ks["objects"]) if ks else {}
    sourceless = {}
    rows = []
    for line in lines:
        key = (line.get("file"), line.get("line"))
        per_stage = OrderedDict()
        carriers: dict[str, list[str]] = {}
        for st in stage_order:
            if st == S.SOURCE:
                continue
            data = stages.get(st)
            if data is None or not data["observed"]:
                per_stage[st] = None
                continue
            if st == S.ARTIFACT:
                # The emitted file names no source lines: a line reaches it through the kernels that
                # carry it at the kernel spec, when the file gives those kernels a provenance comment.
                names = [n for n in ks_by_line.get(key, []) if n in commented]
                # An emitted object that names the line itself (a Spyre op key's debug_handle_) carries it directly.
                names += by_line[st].get(key, [])
            else:
                names = list(by_line[st].get(key, []))
            per_stage[st] = len(names)
            carriers[st] = names[:20]
        last = None
        lost = None
        for st, n in per_stage.items():
            if n is None or st not in S.STAGES:  # a user probe's column is a side view, not a pipeline step
                continue
            if n > 0:
                last = st
                lost = None
            elif last is not None and lost is None:
                lost = st
        if last is None:
            lost = next((st for st, n in per_stage.items() if n is not None and st in S.STAGES), None)
        rows.append({
            "file": line.get("file"), "line": line.get("line"), "text": line.get("text"),
            "counts": dict(per_stage), "carriers": carriers,
            "last_stage": last, "lost_at": lost,
            "lost_by": _lost_by(stages, lost, carriers.get(last, []) if last else [], commented, sourceless),
        })
    return rows


def _by_line(objects: list[dict[str, Any]]) -> dict[tuple, list[str]]:
    """(file, line) -> the names of the objects that carry that line, in object order, each once."""
    index: dict[tuple, list[str]] = {}
    for o in objects:
        keys = []
        for s in o["sources"]:
            key = (s.get("file"), s.get("line"))
            if key not in keys:
                keys.append(key)
        for key in keys:
            index.setdefault(key, []).append(o["name"])
    return index


def _lost_by(stages: dict[str, Any], lost: str | None, carriers: list[str], commented: set[str],
             cache: dict[str, dict[Any, list[int]]] | None = None) -> list[str]:
    """Name the objects at the losing stage that descend from the last carriers (by origins) but carry no source."""
    if not lost or not carriers:
        return []
    if lost == S.ARTIFACT:
        return [c for c in carriers if c not in commented][:20]
    data = stages.get(lost)
    if not data:
        return []
    cache = {} if cache is None else cache
    index = cache.get(lost)
    if index is None:
        # Link name -> positions of the sourceless objects it reaches, built once per stage.
        index = cache[lost] = {}
        for i, o in enumerate(data["objects"]):
            if o["sources"]:
                continue
            links = set(o.get("origins") or []) | set(o.get("ops") or []) | ({o.get("origin_node")} if o.get("origin_node") else set())
            for link in links:
                index.setdefault(link, []).append(i)
    hits = sorted({i for c in carriers for i in index.get(c, ())})
    return [data["objects"][i]["name"] for i in hits[:20]]


def _mappings(stages: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """kernel -> post-grad nodes and pre-grad -> post-grad nodes, as Inductor's provenance tracking defines them."""
    kernel_to_post: dict[str, list[str]] = OrderedDict()
    for k in (stages.get(S.KERNEL_SPEC) or {}).get("objects", []):
        names = kernel_to_post.setdefault(k["kernel"], [])
        names.extend(o for o in k["post_nodes"] if o not in names)
    pre = stages.get(S.PRE_GRAD) or {}
    pre_ids = {o.get("graph_id") for o in pre.get("objects", [])}
    pre_to_post: dict[str, list[str]] = OrderedDict()
    for o in (stages.get(S.POST_GRAD) or {}).get("objects", []):
        if o["kind"] != "call_function":
            continue
        for src in o.get("from_node", []):
            if src.get("graph_id") in pre_ids:
                lst = pre_to_post.setdefault(src["name"], [])
                if o["name"] not in lst:
                    lst.append(o["name"])
    return {"kernel_to_post": kernel_to_post, "pre_to_post": pre_to_post}


#: Payload keys in which a probe counts the items a snapshot bound cut (docs/trace-format.md, "Bounds").
_CUT_KEYS = (("cut_nodes", "node_count"), ("cut_ops", "op_count"))


def _cuts(trace: Trace) -> list[dict[str, Any]]:
    """Each snapshot a bound cut: which graph and stage, how many items it holds and how many it lost."""
    out = []
    for r in trace.records:
        p = r.get("payload")
        if r.get("kind") != S.PROBE or not isinstance(p, dict):
            continue
        for cut_key, total_key in _CUT_KEYS:
            cut = p.get(cut_key)
            if isinstance(cut, int) and not isinstance(cut, bool) and cut > 0:
                total = p.get(total_key)
                out.append({"compile_id": r.get("compile_id"), "graph": r.get("graph"), "stage": r.get("stage"),
                            "total": total if isinstance(total, int) else None, "cut": cut,
                            "reason": p.get("cut_reason") if isinstance(p.get("cut_reason"), str) else None})
    return out


def build(trace: Trace) -> dict[str, Any]:
    """The whole report as plain data."""
    hooks = trace.hooks()
    stage_order = list(S.STAGES)
    for r in trace.records:
        st = r.get("stage")
        if st and st not in stage_order:
            stage_order.append(st)
    graphs = []
    frames_without_graph = []
    for (cid, kind), by_stage in _group(trace).items():
        if kind is None and set(by_stage) <= {S.SOURCE}:
            # Dynamo compiled the frame but produced no graph (nothing to capture, or it fell back
            # to eager): a fact about the run, not a graph with every stage missing.
            for r in by_stage.get(S.SOURCE, []):
                p = r.get("payload") or {}
                frames_without_graph.append({"compile_id": cid, "file": p.get("file"), "line": p.get("first_line"),
                                             "qualname": p.get("qualname")})
            continue
        stages: dict[str, dict[str, Any]] = {}
        for st in stage_order:
            recs = by_stage.get(st, [])
            if st == S.ARTIFACT:
                objs, paths = _artifact_objects(recs)
                stages[st] = {"observed": bool(recs), "objects": objs, "files": paths, "records": len(recs)}
            elif st in _EXTRACT:
                stages[st] = {"observed": bool(recs), "objects": _EXTRACT[st](recs), "records": len(recs)}
            else:
                stages[st] = {"observed": bool(recs), "objects": _generic_objects(recs), "records": len(recs)}
        graphs.append({
            "compile_id": cid,
            "kind": kind,
            "label": f"{cid if cid is not None else '?'} {kind or ''}".strip(),
            "stages": stages,
            "matrix": _matrix(stages, stage_order),
            "survival": (survival := _survival(stages, stage_order)),
            "mappings": _mappings(stages),
            "lineage": _lineage.build(stages, survival),
        })
    errors = [
        {"stage": r.get("stage"), "target": r.get("target"), "phase": r.get("phase"),
         "type": (r.get("error") or {}).get("type"), "message": (r.get("error") or {}).get("message")}
        for r in trace.records if r.get("kind") == S.ERROR
    ]
    return {
        "header": {k: v for k, v in trace.header.items() if k not in ("kind", "seq", "t_ns")},
        "trace": {"path": trace.path, "bytes": trace.size, "records": len(trace.records) + 1,
                  "complete": trace.complete, "problem": trace.problem, "end": trace.end,
                  "repaired": getattr(trace, "repaired", 0)},
        "stage_order": stage_order,
        "stage_titles": {st: S.STAGE_TITLES.get(st, st) for st in stage_order},
        "symbols": {k: {"symbol": v[0], "meaning": v[1]} for k, v in SYMBOLS.items()},
        "hooks": hooks,
        "errors": errors,
        "graphs": graphs,
        "frames_without_graph": frames_without_graph,
        "cuts": _cuts(trace),
        "summary": _summary(graphs, hooks, stage_order),
    }


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


def _generic_objects(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
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
            fields = {k: {"has": True, "populated": bool(isinstance(v, dict) and v.get("populated")),
                          "type": v.get("type") if isinstance(v, dict) else None} for k, v in snaps.items()}
            sources: list[dict[str, Any]] = []
            _snapshot_sources([v.get("value") for v in snaps.values() if isinstance(v, dict)], sources, set(), [20000])
            out.append({"name": name, "kind": r.get("target"), "fields": fields,
                        "kinds": {k: v.get("kind") for k, v in snaps.items() if isinstance(v, dict)},
                        "sources": sources})
            continue
        out.append({"name": name, "kind": r.get("target"),
                    "fields": {k: {"has": True, "populated": bool(v), "type": type(v).__name__} for k, v in p.items()} if isinstance(p, dict) else {},
                    "sources": []})
    return out


def _summary(graphs: list[dict[str, Any]], hooks: list[dict[str, Any]], stage_order: list[str]) -> list[dict[str, Any]]:
    rows = []
    for st in stage_order:
        hs = [h for h in hooks if h.get("stage") == st]
        seen = set()
        observed = False
        shared = st in (S.SOURCE, S.PRE_GRAD)  # one object set per compile id, shown in each of its graphs
        for g in graphs:
            d = g["stages"].get(st)
            if d and d["observed"]:
                observed = True
                seen.update((g["compile_id"], None if shared else g["kind"], o["name"]) for o in d["objects"])
        objects = len(seen)
        rows.append({
            "stage": st,
            "hooks": len(hs),
            "resolved": sum(1 for h in hs if h.get("resolved")),
            "fired": sum(int(h.get("fired") or 0) for h in hs),
            "errors": sum(int(h.get("errors") or 0) for h in hs),
            "observed": observed,
            "objects": objects,
            "unresolved": [f"{h.get('target')}: {h.get('reason')}" for h in hs if not h.get("resolved")],
        })
    return rows
