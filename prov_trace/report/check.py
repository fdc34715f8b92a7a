"""`prov-trace check`: rules over the Stage × Field matrix, for a CI gate.

Grammar (docs/check.md)::

    RULE  := STAGE ":" FIELD OP LEVEL  |  "graph_breaks" OP COUNT  |  "moved_nodes" OP COUNT
    STAGE := a stage name (source, pre_grad, post_grad, ir_pre, ir_post, kernel_spec,
             artifact, or a user probe's stage) | "*" (every stage that measures FIELD)
    FIELD := a matrix field name: stack_trace, origins, debug_handle, file:line, ...
    OP    := "=" | "==" | ">=" | ">" | "<=" | "<"
    LEVEL := "all" | "any" | "none"     (with "=" only)
           | a fraction 0..1 ("0.5") or a percentage ("50%")

``=all``: every object the stage produced has the field populated; ``=any``: at
least one has; ``=none``: none has. A number compares the populated fraction
n/N. A rule is evaluated in every graph of the trace and holds only when it
holds in each. ``graph_breaks<=N`` counts the run's graph break sites (the lines
Dynamo broke a graph at), whatever graphs ``--graph`` names; ``moved_nodes<=N`` the nodes a pass gave another
line (the report's "Where provenance moves to another line") in the graphs checked. A stage that did not fire
fails every rule; a stage that fired with no objects satisfies only ``=none``, ``<`` and ``<=``. A rule that would
check no cell at all (``*`` on a field no stage of the trace measures) fails.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from prov_trace.errors import UsageError
from prov_trace.report.model import FIELDS
from prov_trace.report.text import (basename, break_line, break_sites, error_summary, limit_summary, skip_reason,
                                    skipped_frames, target_function)
from prov_trace.stream import schema as S

LEVEL_WORDS = ("all", "any", "none")
OPS = (">=", "<=", "==", "=", ">", "<")

_RULE = re.compile(r"^\s*(?P<stage>[^:\s]+)\s*:\s*(?P<field>.+?)\s*(?P<op>>=|<=|==|=|>|<)\s*(?P<level>\S+)\s*$")
#: The rules on counts, not on a matrix cell: the run's graph break sites; the nodes a pass gave another line.
GRAPH_BREAKS = "graph_breaks"
MOVED_NODES = "moved_nodes"
_BREAKS_RULE = re.compile(r"^\s*(?P<name>graph_breaks|moved_nodes)\s*(?P<op>>=|<=|==|=|>|<)\s*(?P<level>\S+)\s*$")


class RuleError(UsageError):
    """A rule that cannot be parsed or names nothing in the trace; the message is one sentence."""


@dataclass(frozen=True)
class Rule:
    text: str
    stage: str
    field: str
    op: str
    word: str | None = None
    value: float | None = None

    @property
    def on_breaks(self) -> bool:
        """``graph_breaks OP COUNT``: a rule on the run's graph breaks, not on a matrix cell."""
        return self.field == GRAPH_BREAKS and not self.stage

    @property
    def on_moved(self) -> bool:
        """``moved_nodes OP COUNT``: a rule on the nodes a pass gave another line."""
        return self.field == MOVED_NODES and not self.stage

    def counts(self, n: int) -> bool:
        v = self.value
        assert v is not None
        return {"=": n == v, "==": n == v, ">=": n >= v, ">": n > v, "<=": n <= v, "<": n < v}[self.op]

    def holds(self, n: int, total: int) -> bool:
        if total == 0:
            return self.word == "none" or (self.value is not None and self.op in ("<", "<="))
        if self.word == "all":
            return n == total
        if self.word == "any":
            return n > 0
        if self.word == "none":
            return n == 0
        f = n / total
        v = self.value
        assert v is not None
        return {"=": f == v, "==": f == v, ">=": f >= v, ">": f > v, "<=": f <= v, "<": f < v}[self.op]


def parse_rule(text: str) -> Rule:
    if not isinstance(text, str):
        raise RuleError(f"a rule is a string such as 'kernel_spec:origins=all', not a {type(text).__name__}: give "
                        "several rules as separate arguments, check('a', 'b') (or check(*rules))")
    b = _BREAKS_RULE.match(text or "")
    if b:
        if not b.group("level").isdigit():
            raise RuleError(f"in the rule {text!r}, {b.group('level')!r} is not a count: {b.group('name')} takes a "
                            f"whole number, e.g. '{b.group('name')}<=0'")
        return Rule(text, "", b.group("name"), b.group("op"), value=float(int(b.group("level"))))
    m = _RULE.match(text or "")
    if not m:
        if re.match(r"^\s*[^:\s]+\s*:\s*[^=<>]+$", text or ""):
            # STAGE:FIELD with no operator: an unquoted '>=0.5' was taken by the shell as a redirection.
            raise RuleError(f"the rule {text!r} has no operator: if you wrote {text.strip()}>=..., the shell read '>' "
                            f"as a redirection; quote the rule, e.g. --require '{text.strip()}>=0.5'")
        raise RuleError(f"cannot read the rule {text!r}: write STAGE:FIELD=LEVEL, e.g. kernel_spec:origins=all "
                        "or 'post_grad:stack_trace>=0.5', or 'graph_breaks<=N' or 'moved_nodes<=N' (see docs/check.md)")
    stage, field, op, level = m.group("stage"), m.group("field"), m.group("op"), m.group("level")
    if level.lower() in LEVEL_WORDS:
        if op not in ("=", "=="):
            raise RuleError(f"in the rule {text!r}, '{level}' takes '=' only: write {stage}:{field}={level}")
        return Rule(text, stage, field, op, word=level.lower())
    try:
        value = float(level[:-1]) / 100 if level.endswith("%") else float(level)
    except ValueError:
        raise RuleError(f"in the rule {text!r}, the level {level!r} is not all, any, none, a fraction or a percentage") from None
    if not 0 <= value <= 1:
        raise RuleError(f"in the rule {text!r}, the level {level} is outside 0..1: write a fraction (0.5) or a percentage (50%)")
    return Rule(text, stage, field, op, value=value)


def _resolve(rule: Rule, model: dict[str, Any]) -> list[str]:
    """The stages a rule applies to; RuleError when it names a stage or field the report does not have."""
    fields: dict[str, set[str]] = {}
    not_yet: dict[tuple[str, str], str] = {}
    for g in model["graphs"]:
        for r in g["matrix"]:
            fields.setdefault(r["field"], set()).update(st for st, c in r["cells"].items() if c["state"] != "na")
            not_yet.update({(r["field"], st): c["reason"] for st, c in r["cells"].items() if c.get("reason")})
    if not fields:
        fields = {f.field: set(f.measured_at) for f in FIELDS}
    if rule.field not in fields:
        spec = next((f for f in FIELDS if f.field == rule.field and f.profiles), None)
        if spec is not None:
            raise RuleError(f"in the rule {rule.text!r}, {rule.field} is measured only with the "
                            f"{' or '.join(spec.profiles)} profile, and this trace used "
                            f"{model['header'].get('profile') or 'another'}")
        raise RuleError(f"in the rule {rule.text!r}, there is no field {rule.field!r}: the fields are {', '.join(sorted(fields))}")
    measured = [st for st in model["stage_order"] if st in fields[rule.field]]
    if rule.stage == "*":
        return measured
    if rule.stage not in model["stage_order"]:
        raise RuleError(f"in the rule {rule.text!r}, there is no stage {rule.stage!r}: the stages are {', '.join(model['stage_order'])}")
    if rule.stage not in fields[rule.field] and (rule.field, rule.stage) in not_yet:
        raise RuleError(f"in the rule {rule.text!r}, {rule.field} cannot exist yet at {rule.stage} "
                        f"({not_yet[(rule.field, rule.stage)]}): it is measured at {', '.join(measured) or 'no stage'}")
    if rule.stage not in fields[rule.field]:
        raise RuleError(f"in the rule {rule.text!r}, {rule.field} is not measured at {rule.stage}: it is measured at "
                        f"{', '.join(measured) or 'no stage'}")
    return [rule.stage]


def check(model: dict[str, Any], rules: list[Rule], graphs: list[str] | None = None) -> list[dict[str, Any]]:
    """One result per rule: holds, and the (graph, stage) cells that fail it."""
    chosen = [g for g in model["graphs"] if not graphs or g["label"] in graphs]
    if graphs:
        missing = [lbl for lbl in graphs if lbl not in {g["label"] for g in model["graphs"]}]
        if missing:
            raise RuleError(f"there is no graph {missing[0]!r} in the trace: the graphs are "
                            f"{', '.join(g['label'] for g in model['graphs']) or 'none'}")
    results = []
    for rule in rules:
        if rule.on_breaks:
            results.append(_check_breaks(model, rule))
            continue
        if rule.on_moved:
            results.append(_check_moved(model, rule, chosen))
            continue
        stages = _resolve(rule, model)
        failures, checked, skipped = [], [], []
        for g in chosen:
            row = next((r for r in g["matrix"] if r["field"] == rule.field), None)
            for st in stages:
                c = (row or {}).get("cells", {}).get(st) or {"state": "unobserved", "n": 0, "total": 0}
                if c["state"] == "na":
                    # ➖ in this graph's matrix: the stage is off its path (an export that Inductor did not
                    # compile), or the pipeline has not made the field yet there. Not this graph's to hold.
                    skipped.append(c.get("reason") or "not applicable")
                    continue
                item = {"graph": g["label"], "stage": st, "state": c["state"], "n": c["n"], "total": c["total"]}
                checked.append(item)
                if c["state"] == "unobserved":
                    why = "the stage did not fire: nothing was measured"
                    hl = g.get("headline") or {}
                    if hl.get("stopped_in") and st in hl.get("unobserved", []):
                        said = error_summary(hl["stopped_in"].get("error"))
                        why += (f" (the graph's compile stopped inside {target_function(hl['stopped_in'].get('target'))}"
                                + (f": it raised {said})" if said else ")"))
                    elif hl.get("compiled_autograd") and st in hl.get("unobserved", []):
                        why += (" (compiled autograd traced the backward call into its own graph, "
                                f"{', '.join(hl['compiled_autograd'])}, so Inductor did not compile this one)")
                    elif hl.get("lazy_backward") and st in hl.get("unobserved", []):
                        why += (" (Inductor compiles a backward graph at its first backward call, and the run made "
                                "none; under torch.no_grad() there is no backward graph)")
                    failures.append({**item, "why": why})
                elif st in ((g.get("headline") or {}).get("stopped_in") or {}).get("maybe_cut_short", []):
                    # Perhaps measured on part of the graph's objects: the rule cannot be said to hold.
                    stopped = g["headline"]["stopped_in"]
                    failures.append({**item, "why": f"the stage may be cut short: the graph's compile stopped "
                                                    f"inside {target_function(stopped.get('target'))} after it "
                                                    f"recorded {c['total']}, perhaps before it made them all"})
                elif not rule.holds(c["n"], c["total"]):
                    failures.append({**item, "why": _why(rule, c)})
        if not chosen:
            failures.append({"graph": None, "stage": None, "state": None, "n": 0, "total": 0,
                             "why": "the trace holds no graph: nothing was compiled" + _stopped(model)})
        elif not stages:  # `*` on a field no stage's objects carry: a rule that checks nothing must not pass
            failures.append({"graph": None, "stage": None, "state": None, "n": 0, "total": 0,
                             "why": f"{rule.field} is measured at no stage of this trace (no stage's objects have "
                                    "such a slot), so the rule checks nothing"})
        elif not checked:  # every cell it names is ➖: a rule that checks nothing must not pass
            failures.append({"graph": None, "stage": None, "state": None, "n": 0, "total": 0,
                             "why": "the rule applies to no graph here: its cells are not applicable ("
                                    + "; ".join(dict.fromkeys(skipped)) + "), so it checks nothing"})
        results.append({"rule": rule.text, "holds": not failures, "checked": checked, "failures": failures})
    return results


def _check_moved(model: dict[str, Any], rule: Rule, chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """``moved_nodes OP COUNT`` over the graphs checked: the nodes a pass gave another line, each named with its
    graph, its op, the stages and the lines before and after."""
    moved = [(g["label"], m) for g in chosen for m in g.get("moved") or []]
    titles = model.get("stage_titles") or {}
    checked = [{"graph": None, "stage": None, "moved": len(moved)}]
    none = {"graph": None, "stage": None, "state": None, "n": len(moved), "total": 0}
    if not chosen:
        return {"rule": rule.text, "holds": False, "checked": checked,
                "failures": [{**none, "why": "the trace holds no graph: nothing was compiled" + _stopped(model)}]}
    if rule.counts(len(moved)):
        return {"rule": rule.text, "holds": True, "checked": checked, "failures": []}

    def lines(refs: list[dict[str, Any]]) -> str:
        return ", ".join(f"{basename(s.get('file'))}:{s.get('line')}" for s in refs)

    failures = [{**none, "why": f"{len(moved)} node{'s' if len(moved) != 1 else ''} a pass gave another line:",
                 "site": None}]
    failures += [{**none, "graph": label, "site": {"name": m["name"], "target": m.get("target")},
                  "why": f"[{label}] {m['name']} ({m.get('target')}): {lines(m['was'])} at "
                         f"{titles.get(m['from'], m['from'])}, {lines(m['now'])} at {titles.get(m['to'], m['to'])}"}
                 for label, m in moved]
    return {"rule": rule.text, "holds": False, "checked": checked, "failures": failures}


def _check_breaks(model: dict[str, Any], rule: Rule) -> dict[str, Any]:
    """``graph_breaks OP COUNT`` over the whole run: its graph break sites (a line Dynamo broke a graph at, once
    however many compiles broke there), each named with the compiles it ended and Dynamo's reason."""
    sites = break_sites(model)
    checked = [{"graph": None, "stage": None, "breaks": len(sites)}]
    none = {"graph": None, "stage": None, "state": None, "n": len(sites), "total": 0}
    if not model["graphs"]:  # a compile that raised at a break (fullgraph=True) leaves no graph and no break
        return {"rule": rule.text, "holds": False, "checked": checked,
                "failures": [{**none, "why": "the trace holds no graph: nothing was compiled" + _stopped(model)}]}
    if not any(h.get("stage") == S.GRAPH_BREAK and h.get("resolved") for h in model.get("hooks") or []):
        return {"rule": rule.text, "holds": False, "checked": checked, "failures": [{**none, "why": (
            "graph breaks were not watched in this trace (no resolved hook on OutputGraph.compile_subgraph: a trace "
            "written before prov-trace watched them, or a torch where that hook drifted), so none can be counted")}]}
    if rule.counts(len(sites)):
        return {"rule": rule.text, "holds": True, "checked": checked, "failures": []}
    failures = [{**none, "why": f"{len(sites)} graph break site{'s' if len(sites) != 1 else ''}:", "site": None}]
    failures += [{**none, "why": break_line(s), "site": {k: s[k] for k in ("file", "line", "compile_ids", "summary")}}
                 for s in sites]
    return {"rule": rule.text, "holds": False, "checked": checked, "failures": failures}


def _stopped(model: dict[str, Any]) -> str:
    """Where a run that compiled no graph stopped: the pipeline's calls that did not return, if any."""
    names = [target_function(n.get("target")) for n in model.get("not_returned") or [] if n.get("stage") in S.STAGES]
    if names:
        frames = model.get("frames_without_graph") or []
        said = [error_summary((f.get("stopped_in") or {}).get("error")) for f in frames]
        said = list(dict.fromkeys(x for x in said if x))
        limits = list(dict.fromkeys(x for x in (limit_summary((f.get("stopped_in") or {}).get("limit")) for f in frames) if x))
        parts = ([f"it raised {'; '.join(said[:3])}" + (f"; and {len(said) - 3} more" if len(said) > 3 else "")]
                 if said else []) + limits[:3]
        return f" (the compile stopped inside {', '.join(dict.fromkeys(names))}" + (
            f": {'; '.join(parts)}" if parts else "") + ")"
    skipped = skipped_frames(model)
    if skipped:  # Dynamo gave up every frame it was handed without an error (no op to trace)
        said = list(dict.fromkeys(skip_reason(f["skipped"]) or "this torch does not say why" for f in skipped))
        return (f" (Dynamo skipped {'the frame' if len(skipped) == 1 else f'all {len(skipped)} frames'} it was handed "
                f"and ran {'it' if len(skipped) == 1 else 'them'} as Python: {'; '.join(said[:3])})")
    before = (model.get("header") or {}).get("compiled_before")
    if isinstance(before, int) and before > 0:  # a notebook cell run again: the model runs from Dynamo's cache
        return (f" (Dynamo had compiled {before} graph{'s' if before != 1 else ''} before tracing started, and code "
                "compiled then runs from its cache: call torch._dynamo.reset() before the traced block)")
    return ""


def _why(rule: Rule, c: dict[str, Any]) -> str:
    if c["total"] == 0:
        return "the stage produced no objects"
    return f"{c['n']}/{c['total']} populated ({c['n'] / c['total']:.0%})"


def render(results: list[dict[str, Any]], titles: dict[str, str]) -> str:
    out = []
    for r in results:
        cells = len(r["checked"])
        breaks = r["checked"][0].get("breaks") if r["checked"] else None
        moved = r["checked"][0].get("moved") if r["checked"] else None
        if r["holds"] and breaks is not None:
            out.append(f"ok    {r['rule']}  ({breaks} graph break site{'s' if breaks != 1 else ''})")
        elif r["holds"] and moved is not None:
            out.append(f"ok    {r['rule']}  ({moved} moved node{'s' if moved != 1 else ''})")
        elif r["holds"]:
            out.append(f"ok    {r['rule']}  ({cells} cell{'s' if cells != 1 else ''})")
        else:
            out.append(f"FAIL  {r['rule']}")
            for f in r["failures"]:
                if "site" in f:  # graph_breaks, moved_nodes: the count, then one line per site or node
                    out.append(f"        {'  ' if f['site'] else ''}{f['why']}")
                    continue
                where = f"graph {f['graph']}, {titles.get(f['stage'], f['stage'])}" if f["graph"] else "trace"
                out.append(f"        {where}: {f['why']}")
    failed = sum(1 for r in results if not r["holds"])
    out.append(f"{len(results) - failed} of {len(results)} rules hold" + (f"; {failed} failed" if failed else ""))
    return "\n".join(out) + "\n"
