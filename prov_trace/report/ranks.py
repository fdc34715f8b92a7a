"""One report over every process of a run: ranks that compiled the same shown once, the ones that did not.

Offline and pure over the streams: ``load_streams`` reads directories (their ``*.msgpack``,
sub-directories too, so the directories copied from several nodes can sit side by side)
and files; ``build_run`` turns their report models into the run's model: each process
(host, pid, rank, how its stream ended), the groups of processes that compiled the same
(same graphs, per-stage object counts, kernel names and matrix cells), and for each group
that differs from the reference (the lowest rank) its differences, first one first.
tlparse's ``--all-ranks-html`` compile-id divergence is the model; this compares the
provenance too. ``run_document`` is its view (the renderers only draw it), followed by
the reference's own report. `RunReport` is what ``prov_trace.load(DIR)`` returns.

Bad input is one sentence each: a directory with no stream (UsageError), streams of
two runs mixed (UsageError naming both, unless ``run=`` picks one), a stream cut short
(reported as cut, the others as they are), a file that is not a stream (listed, skipped).
"""

from __future__ import annotations

import gc
import os
import time
from typing import Any

from prov_trace.errors import UsageError
from prov_trace.report import check as _check
from prov_trace.report import diff as _diff
from prov_trace.report import html, jsonout, markdown, views
from prov_trace.report.model import build
from prov_trace.report.report import CheckResult, NoSuchGraph, Rendered, Report
from prov_trace.report.text import clean, first_line
from prov_trace.report.views import Banner, Code, Document, Para, Row, Section, Table, join
from prov_trace.stream import schema as S
from prov_trace.stream.reader import Trace, TraceReadError, read_trace

#: The format name of a run's JSON report (``--format json`` over several streams); its version is the report's.
FORMAT = "prov-trace-run"

#: What a stage's objects are called in a sentence.
UNITS = {S.SOURCE: "lines", **{st: "nodes" for st in S.FX_STAGES}, S.IR_PRE: "ops", S.IR_POST: "ops",
         S.KERNEL_SPEC: "kernels", S.ARTIFACT: "kernels"}
#: Cell states that count objects (n of N); the others are compared by state alone.
COUNTED = ("all", "some", "none")
#: Differences listed per diverging group; the rest are counted.
MAX_DIFFERENCES = 50


# --- reading ------------------------------------------------------------------------------------


def find_streams(paths: list[str]) -> tuple[list[str], list[str]]:
    """The stream files named by `paths` (a directory: every ``*.msgpack`` in it and below), and the
    directories among them. A directory that holds none is a UsageError."""
    found: list[str] = []
    dirs: list[str] = []
    for p in paths:
        p = os.fspath(p)
        if os.path.isdir(p):
            dirs.append(p)
            inside = []
            for root, subdirs, names in os.walk(p):
                subdirs.sort()
                inside += [os.path.join(root, n) for n in sorted(names) if n.endswith(".msgpack")]
            if not inside:
                raise UsageError(f"{p} holds no prov-trace stream (no *.msgpack file in it or below): give the "
                                 "directory `prov-trace run -o DIR/` wrote (or the .procs directory beside a trace), "
                                 "or the stream files themselves")
            found += inside
        else:
            found.append(p)
    seen, out = set(), []
    for f in found:
        key = os.path.realpath(f)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out, dirs


def load_streams(paths: list[str]) -> tuple[list[Trace], list[dict[str, str]]]:
    """Every stream read (a cut one up to its last whole record). A file named on its own that is not a
    stream is a TraceReadError, as for one trace; one found in a directory is listed as unreadable."""
    files_, _ = find_streams(paths)
    explicit = {os.path.realpath(os.fspath(p)) for p in paths if not os.path.isdir(p)}
    traces, unreadable = [], []
    for f in files_:
        try:
            traces.append(read_trace(f))
        except TraceReadError as exc:
            if os.path.realpath(f) in explicit:
                raise
            unreadable.append({"path": f, "reason": str(exc)})
    if not traces:
        raise UsageError(f"none of the {len(files_)} .msgpack files there is a prov-trace stream: "
                         + "; ".join(u["reason"] for u in unreadable[:3]))
    return traces, unreadable


# --- who wrote each stream ----------------------------------------------------------------------


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) and v else None


def process_of(trace: Trace, model: dict[str, Any]) -> dict[str, Any]:
    h = trace.header
    end = trace.end or {}
    if not trace.complete:
        status = "cut"
    elif end.get("outcome") in ("signal", "interrupted"):
        status = "stopped"
    else:
        status = "complete"
    graphs = model["graphs"]
    kernels = sum(len(g["stages"].get(S.KERNEL_SPEC, {}).get("objects", [])) for g in graphs)
    return {
        "path": trace.path,
        "name": os.path.splitext(os.path.basename(trace.path))[0],
        "host": _str(h.get("host")),
        "pid": _int(h.get("pid")),
        "ppid": _int(h.get("ppid")),
        "rank": _int(h.get("rank")),
        "local_rank": _int(h.get("local_rank")),
        "world_size": _int(h.get("world_size")),
        "restart": _int(h.get("restart")),
        "run_id": _str(h.get("run_id")),
        "job_id": _str(h.get("job_id")),
        "follow": _str(h.get("follow")),
        "start_time": h.get("start_time") if isinstance(h.get("start_time"), (int, float)) else None,
        "graphs": len(graphs),
        "kernels": kernels,
        "complete": trace.complete,
        "problem": trace.problem,
        "end": trace.end,
        "status": status,
        "role": None,
        "compared": False,
        "note": None,
    }


def label(p: dict[str, Any]) -> str:
    """A process in a sentence: ``rank 3``, else ``pid 1234``."""
    if p["rank"] is not None:
        return f"rank {p['rank']}"
    return f"pid {p['pid']}" if p["pid"] is not None else p["name"]


def ranks_label(members: list[dict[str, Any]]) -> str:
    """``ranks 0–3, 5`` for ranks (runs of consecutive ranks joined), else the processes' labels."""
    ranks = sorted(p["rank"] for p in members if p["rank"] is not None)
    if len(ranks) != len(members):
        return ", ".join(label(p) for p in members)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    spans, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}–{a}")
            start = b
    return "ranks " + ", ".join(spans)


# --- runs ---------------------------------------------------------------------------------------


def _run_groups(procs: list[dict[str, Any]]) -> list[set[int]]:
    """Processes of one run, by their run id or their elastic job's id (the nodes of one torchrun job)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in procs:
        keys = [f"run:{p['run_id']}"] * bool(p["run_id"]) + [f"job:{p['job_id']}"] * bool(p["job_id"])
        if p["rank"] is not None and p["host"] and p["ppid"]:
            # The ranks one elastic agent started (torchrun -m prov_trace run ...: a run id each, and
            # no job id under static rendezvous) share that agent as their parent.
            keys.append(f"agent:{p['host']}:{p['ppid']}")
        for k in keys[1:]:
            parent[find(k)] = find(keys[0])
    groups: dict[str, set[int]] = {}
    for i, p in enumerate(procs):
        key = p["run_id"] and f"run:{p['run_id']}" or p["job_id"] and f"job:{p['job_id']}"
        if key:
            groups.setdefault(find(key), set()).add(i)
    return list(groups.values())


def _describe_run(procs: list[dict[str, Any]], idx: set[int]) -> str:
    members = [procs[i] for i in sorted(idx)]
    ids = sorted({p["run_id"] for p in members if p["run_id"]}) or sorted({p["job_id"] for p in members if p["job_id"]})
    starts = [p["start_time"] for p in members if p["start_time"]]
    when = f", started {time.strftime('%Y-%m-%d %H:%M', time.localtime(min(starts)))}" if starts else ""
    names = ", ".join(shown(p["path"]) for p in members[:4]) + (", ..." if len(members) > 4 else "")
    return f"run {'/'.join(ids)} ({len(members)} stream{'s' if len(members) != 1 else ''}: {names}{when})"


def select_run(procs: list[dict[str, Any]], run: str | None) -> tuple[list[int], list[int]]:
    """The processes of the one run (or of `run`), and those of other runs left out."""
    groups = _run_groups(procs)
    everyone = set(range(len(procs)))
    labelled = set().union(*groups) if groups else set()
    if run is not None:
        chosen = next((g for g in groups if any(procs[i]["run_id"] == run or procs[i]["job_id"] == run for i in g)), None)
        if chosen is None:
            ids = sorted({procs[i]["run_id"] or procs[i]["job_id"] for g in groups for i in g})
            raise UsageError(f"no stream there belongs to run {run}: the runs are {', '.join(ids) or 'unnamed'}")
        keep = chosen | (everyone - labelled)
        return sorted(keep), sorted(everyone - keep)
    if len(groups) > 1:
        groups.sort(key=lambda g: min(procs[i]["start_time"] or 0 for i in g))
        # Run twice into one -o DIR/: the ranks' streams are replaced by name, but the launcher's (pid-N) is
        # not, and it compiled nothing. Where every stream of the earlier runs compiled nothing, the newest
        # run is the one (the report notes what it left out); streams of two runs that compiled are refused.
        if not any(procs[i]["graphs"] for g in groups[:-1] for i in g):
            keep = groups[-1] | (everyone - labelled)
            return sorted(keep), sorted(everyone - keep)
        # The latest three (the one to suggest among them), and how many earlier ones there are.
        latest = [_describe_run(procs, g) for g in groups[-3:]]
        earlier = len(groups) - len(latest)
        if earlier:
            latest.append(f"{earlier} earlier run{'s' if earlier != 1 else ''}")
        runs = ", ".join(latest[:-1]) + " and " + latest[-1]
        first = procs[min(groups[-1])]
        raise SeveralRuns(f"{len(groups)} different runs: {runs}", first["run_id"] or first["job_id"])
    return sorted(everyone), []


class SeveralRuns(UsageError):
    """Streams of several runs where one run was meant; `str()` is the sentence for `report` and `check`;
    `runs` ("N different runs: run a (...) and run b (...)") and `latest` (the newest's id) let a command
    without --run word its own advice."""

    def __init__(self, runs: str, latest: str | None):
        super().__init__(f"the streams come from {runs}: pick one with --run {latest} (or another's id), or move "
                         "the other runs' streams away")
        self.runs, self.latest = runs, latest


# --- comparing ----------------------------------------------------------------------------------


def facts(model: dict[str, Any]) -> dict[str, Any]:
    """What two processes must share to have compiled the same: per graph, the objects each stage
    produced, the kernels' names and every matrix cell."""
    order = model["stage_order"]
    graphs = {}
    for g in model["graphs"]:
        counts = {st: (len(d["objects"]) if d.get("observed") else None) for st, d in g["stages"].items()}
        kernels = [str(o.get("name")) for o in g["stages"].get(S.KERNEL_SPEC, {}).get("objects", [])]
        cells = {(r["field"], st): ((c["state"], c.get("n", 0), c.get("total", 0)) if c["state"] in COUNTED
                                    else (c["state"], None, None))
                 for r in g["matrix"] for st, c in r["cells"].items()}
        graphs[g["label"]] = {"counts": counts, "kernels": kernels, "cells": cells}
    return {"labels": [g["label"] for g in model["graphs"]], "graphs": graphs, "order": order,
            "titles": model["stage_titles"]}


def _key(f: dict[str, Any]) -> Any:
    return tuple((lbl, tuple(sorted(f["graphs"][lbl]["counts"].items(), key=lambda kv: kv[0])),
                  tuple(f["graphs"][lbl]["kernels"]), tuple(sorted(f["graphs"][lbl]["cells"].items())))
                 for lbl in f["labels"])


def _cell_text(c: tuple | None) -> str:
    if c is None:
        return "not measured"
    state, n, total = c
    return views.symbol_text(views.cell_sym({"state": state, "n": n or 0, "total": total or 0}), views.GLYPHS)


def differences(ref: dict[str, Any], other: dict[str, Any], ref_name: str, name: str) -> list[dict[str, Any]]:
    """How `other` compiled differently from `ref`, in the order a reader wants them: the graphs, then per
    graph each stage's object count, the kernels' names, and the matrix cells. Each has a sentence."""
    out: list[dict[str, Any]] = []
    la, lb = ref["labels"], other["labels"]
    titles = {**ref["titles"], **other["titles"]}
    if len(la) != len(lb):
        out.append({"graph": None, "what": "graphs", "ref": len(la), "this": len(lb),
                    "text": f"{name} compiled {len(lb)} graph{'s' if len(lb) != 1 else ''}, {ref_name} {len(la)}"})
    for lbl in la:
        if lbl not in other["graphs"]:
            out.append({"graph": lbl, "what": "graph", "ref": "compiled", "this": "missing",
                        "text": f"graph {lbl} was compiled on {ref_name}, not on {name}"})
    for lbl in lb:
        if lbl not in ref["graphs"]:
            out.append({"graph": lbl, "what": "graph", "ref": "missing", "this": "compiled",
                        "text": f"graph {lbl} was compiled on {name}, not on {ref_name}"})
    order = ref["order"] + [st for st in other["order"] if st not in ref["order"]]
    for lbl in la:
        a, b = ref["graphs"][lbl], other["graphs"].get(lbl)
        if b is None:
            continue
        for st in order:
            ca, cb = a["counts"].get(st), b["counts"].get(st)
            if ca != cb:
                unit = UNITS.get(st, "objects")
                show = lambda c: ("none (the stage did not fire)" if c is None  # noqa: E731
                                  else f"{c} {unit[:-1] if c == 1 and unit.endswith('s') else unit}")
                out.append({"graph": lbl, "what": f"{titles.get(st, st)}: {unit}", "stage": st, "ref": ca, "this": cb,
                            "text": f"graph {lbl}, {titles.get(st, st)}: {show(cb)} on {name}, {show(ca)} on {ref_name}"})
        if a["kernels"] != b["kernels"]:
            only_a = [k for k in a["kernels"] if k not in set(b["kernels"])]
            only_b = [k for k in b["kernels"] if k not in set(a["kernels"])]
            if only_a or only_b:
                text = (f"graph {lbl}, kernel names: " + (f"{', '.join(only_b[:5])} only on {name}" if only_b else "")
                        + ("; " if only_a and only_b else "") + (f"{', '.join(only_a[:5])} only on {ref_name}" if only_a else ""))
            else:
                text = f"graph {lbl}, kernel names: the same kernels, in another order"
            out.append({"graph": lbl, "what": "kernel names", "stage": S.KERNEL_SPEC, "ref": only_a, "this": only_b,
                        "text": text})
        for key in sorted(set(a["cells"]) | set(b["cells"]), key=lambda k: (k[0], order.index(k[1]) if k[1] in order else 99)):
            ca, cb = a["cells"].get(key), b["cells"].get(key)
            # The same state at all or none over another number of objects says no more than the count above.
            if ca != cb and not (ca and cb and ca[0] == cb[0] and ca[0] in ("all", "none")):
                fld, st = key
                out.append({"graph": lbl, "what": "matrix cell", "field": fld, "stage": titles.get(st, st), "ref": _cell_text(ca),
                            "this": _cell_text(cb),
                            "text": f"graph {lbl}, {fld} at {titles.get(st, st)}: {_cell_text(cb)} on {name}, "
                                    f"{_cell_text(ca)} on {ref_name}"})
    return out


def build_run(traces: list[Trace], models: list[dict[str, Any]], *, run: str | None = None,
              unreadable: list[dict[str, str]] | None = None) -> tuple[dict[str, Any], list[int]]:
    """The run's model (plain data), and the indices of `traces` it covers (the chosen run's)."""
    all_procs = [process_of(t, m) for t, m in zip(traces, models)]
    keep, left_out = select_run(all_procs, run)
    # Launchers first (the processes that compiled nothing), then ranks by rank, then other processes by start.
    keep.sort(key=lambda i: (all_procs[i]["rank"] is not None or bool(all_procs[i]["graphs"]),
                             all_procs[i]["rank"] if all_procs[i]["rank"] is not None else float("inf"),
                             all_procs[i]["start_time"] or 0, all_procs[i]["path"]))
    procs = [all_procs[i] for i in keep]
    fx = [facts(models[i]) for i in keep]
    problems: list[str] = []
    # Two streams of one process (the same host, pid and start time: a stream copied within the directory,
    # or given twice): the whole one is read, the other is said and left out of every count and comparison.
    copies: set[int] = set()
    same: dict[tuple, list[int]] = {}
    for i, p in enumerate(procs):
        if p["host"] and p["pid"] is not None and p["start_time"] is not None:
            same.setdefault((p["host"], p["pid"], p["start_time"]), []).append(i)
    for idx in same.values():
        if len(idx) > 1:
            # The whole one; of equals, the one under the name prov-trace gave it (rank-N, pid-N), not the copy's.
            idx.sort(key=lambda i: (procs[i]["status"] != "complete", -procs[i]["graphs"],
                                    procs[i]["name"] != (f"rank-{procs[i]['rank']}" if procs[i]["rank"] is not None
                                                         else f"pid-{procs[i]['pid']}"), procs[i]["path"]))
            kept = procs[idx[0]]
            for i in idx[1:]:
                copies.add(i)
                procs[i]["note"] = f"a copy of {os.path.basename(kept['path'])}"
                problems.append(f"{shown(procs[i]['path'])} is a copy of {shown(kept['path'])} (the same host, pid and "
                                "start time: one process's stream): it is read once")
    # An elastic restart writes a rank's stream again: the last attempt is that rank's.
    by_rank: dict[int, list[int]] = {}
    for i, p in enumerate(procs):
        if p["rank"] is not None and i not in copies:
            by_rank.setdefault(p["rank"], []).append(i)
    superseded = set()
    for rank, idx in by_rank.items():
        if len(idx) > 1:
            idx.sort(key=lambda i: ((procs[i]["restart"] or 0), procs[i]["start_time"] or 0))
            for i in idx[:-1]:
                superseded.add(i)
                procs[i]["note"] = f"superseded by {os.path.basename(procs[idx[-1]]['path'])}"
            problems.append(f"rank {rank} has {len(idx)} streams (an elastic restart, or copies): "
                            f"{os.path.basename(procs[idx[-1]]['path'])}, the last, is the one compared")
    has_ranks = bool(by_rank)
    for i, p in enumerate(procs):
        if i in copies:
            p["role"] = "copy"
        elif i in superseded:
            p["role"] = "superseded"
        elif p["rank"] is not None:
            p["role"] = "rank"
        elif p["graphs"]:
            p["role"] = "process"
        else:
            p["role"] = "no compile"
        p["compared"] = p["role"] == "rank" or (p["role"] == "process" and not has_ranks)
    compared = [i for i, p in enumerate(procs) if p["compared"]]
    compared.sort(key=lambda i: (procs[i]["rank"] if procs[i]["rank"] is not None else -1,
                                 procs[i]["start_time"] or 0, procs[i]["name"]))
    ref = next((i for i in compared if procs[i]["status"] != "cut"), compared[0] if compared else None)
    groups: list[dict[str, Any]] = []
    if ref is not None:
        keyed: dict[Any, list[int]] = {}
        for i in compared:
            keyed.setdefault(_key(fx[i]), []).append(i)
        ordered = sorted(keyed.values(), key=lambda members: (ref not in members, min(compared.index(i) for i in members)))
        for members in ordered:
            rep = members[0]
            group = {"members": members, "label": ranks_label([procs[i] for i in members]),
                     "identical": ref in members, "graphs": procs[rep]["graphs"], "kernels": procs[rep]["kernels"],
                     "differences": [], "first": None, "more": 0}
            if ref not in members:
                name = group["label"]
                diffs = differences(fx[ref], fx[rep], label(procs[ref]), name)
                group["differences"] = diffs[:MAX_DIFFERENCES]
                group["more"] = max(0, len(diffs) - MAX_DIFFERENCES)
                group["first"] = diffs[0]["text"] if diffs else "the same, told apart by nothing this report compares"
            groups.append(group)
    world = sorted({p["world_size"] for p in procs if p["world_size"]})
    world_size = world[-1] if world else None
    missing = [r for r in range(world_size)] if world_size else []
    missing = [r for r in missing if r not in by_rank]
    cut = [procs[i] for i in compared if procs[i]["status"] == "cut"]
    for p in cut:
        problems.insert(0, f"{label(p)}'s stream ({os.path.basename(p['path'])}) was cut short: {p['problem']}; it is "
                           "reported as it was when cut (the process was killed, or is still running)"
                        + (", the others are complete" if len(cut) < len(compared) else ""))
    # A stopped process that compiled exactly what a complete one did was stopped after its compiles (a pool's
    # terminate() stops its idle workers with SIGTERM): said, and no disagreement. Any other stop is one.
    complete_peer = {i: j for g in groups for i in g["members"] for j in g["members"]
                     if j != i and procs[j]["status"] == "complete"}
    stopped = [procs[i] for i in compared if procs[i]["status"] == "stopped" and i not in complete_peer]
    for i in compared:
        p, end = procs[i], procs[i]["end"] or {}
        if p["status"] != "stopped":
            continue
        how = first_line(end.get("detail") or end.get("outcome"))
        if i in complete_peer:
            problems.append(f"{label(p)} was stopped ({how}) after it had compiled the same as "
                            f"{label(procs[complete_peer[i]])}: nothing it compiled was cut short")
        else:
            problems.append(f"{label(p)} was stopped ({how}) before it finished: its stream is whole up to the stop, "
                            "and stages its compile had not reached show as not observed")
    for p in procs:  # an uncaught exception ended it: not a disagreement in what it compiled, but worth saying
        end = p["end"] or {}
        if end.get("outcome") == "exception":
            problems.append(f"{label(p)} ended with an exception ({first_line(end.get('detail') or '')}), after what "
                            "its stream holds")
    if missing:
        problems.append(f"the world size is {world_size} but there is no stream for rank{'s' if len(missing) > 1 else ''} "
                        f"{', '.join(map(str, missing[:16]))}{', ...' if len(missing) > 16 else ''}: "
                        "those ranks compiled nothing, were not traced, or their streams were not copied here")
    for u in unreadable or []:
        problems.append(f"{shown(u['path'])} was skipped: {u['reason']}")
    if left_out:
        problems.append(f"{len(left_out)} stream{'s' if len(left_out) != 1 else ''} of another run "
                        f"{'were' if len(left_out) != 1 else 'was'} left out: "
                        + ", ".join(shown(all_procs[i]["path"]) for i in left_out[:5]))
    if len(world) > 1:
        problems.append(f"the ranks' streams disagree on the world size ({', '.join(map(str, world))})")
    diverging = [g for g in groups if not g["identical"]]
    agree = bool(compared) and not diverging and not cut and not stopped and not missing
    return {
        "run_ids": sorted({p["run_id"] for p in procs if p["run_id"]}),
        "job_ids": sorted({p["job_id"] for p in procs if p["job_id"]}),
        "processes": procs,
        "hosts": sorted({p["host"] for p in procs if p["host"]}),
        "world_size": world_size,
        "ranked": has_ranks,
        "reference": ref,
        "groups": groups,
        "missing_ranks": missing,
        "problems": problems,
        "agree": agree,
    }, keep


def verdict(run: dict[str, Any]) -> str:
    """The run's agreement in one sentence."""
    procs = run["processes"]
    groups = run["groups"]
    who = "ranks" if run["ranked"] else "processes"
    if not groups:
        return "No process compiled anything." if not run["ranked"] else "No rank's stream was found."
    ref = procs[run["reference"]]
    first = groups[0]
    if len(groups) == 1:
        n = len(first["members"])
        if n == 1:
            return f"Only {label(ref)} was compared: there is no other {who[:-1] if who == 'ranks' else 'process'} to compare it with."
        return f"{_cap(first['label'])}: identical (the same graphs, node and kernel counts, kernel names and matrix cells)."
    diverging = groups[1:]
    n = sum(len(g["members"]) for g in diverging)
    total = sum(len(g["members"]) for g in groups)
    same = f"{_cap(first['label'])}: identical; " if len(first["members"]) > 1 else ""
    unfinished = [procs[i] for g in diverging for i in g["members"]]
    if all(p["status"] in ("cut", "stopped") for p in unfinished):
        # A process cut or stopped mid-compile differs in what it did not get to; that is not a disagreement.
        return (f"{same}agreement cannot be established: "
                + "; ".join(f"{label(p)} was {'cut short' if p['status'] == 'cut' else 'stopped'} before its compile "
                            "finished" for p in unfinished[:4]) + ("; ..." if len(unfinished) > 4 else "") + ".")
    return (f"{same}{n} of {total} {who} compiled differently from {label(ref)}: "
            + "; ".join(f"{g['label']} ({g['first']})" for g in diverging[:4]) + ("; ..." if len(diverging) > 4 else "") + ".")


def _cap(text: str) -> str:
    """A label at the start of a sentence or heading: "Rank 1", but "pid 1234" stays as the tool writes it."""
    return text if text.startswith("pid ") else text[:1].upper() + text[1:]


# --- the view ------------------------------------------------------------------------------------


def _ended(p: dict[str, Any]) -> str:
    if p["status"] == "cut":
        return "cut (no end record)"
    end = p["end"] or {}
    return f"{end.get('outcome')}" + (f" ({first_line(end.get('detail'))})" if end.get("detail") else "")


def _shifted(block: Any, by: int) -> Any:
    """A view block with its sections one level deeper (a per-process diff inside the run's)."""
    if isinstance(block, Section):
        return Section(block.title, min(6, block.level + by), [_shifted(b, by) for b in block.blocks], dict(block.attrs),
                       block.collapsed)
    return block


def shown(path: str) -> str:
    """A stream's path as the report shows it: relative to the working directory when under it."""
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def run_document(run: dict[str, Any], reference: dict[str, Any] | None, texts: dict[str, Any] | None = None) -> Document:
    """The run's view: its processes, which ranks agree, how the others diverge; then the reference's report
    (`texts`: the files its HTML source and code views show)."""
    procs = run["processes"]
    blocks: list[Any] = []
    for text in run["problems"]:
        blocks.append(Banner("Note.", text))
    intro = Section("Processes", 2, attrs={"class": "intro"})
    intro.blocks.append(Para([verdict(run)], cls="headline"))
    facts_ = [f"{len(procs)} stream{'s' if len(procs) != 1 else ''}"]
    if run["world_size"]:
        facts_.append(f"world size {run['world_size']}")
    if run["hosts"]:
        facts_.append(f"{len(run['hosts'])} host{'s' if len(run['hosts']) != 1 else ''}")
    if run["run_ids"]:
        facts_.append("run " + ", ".join(run["run_ids"]))
    if run["job_ids"]:
        facts_.append("elastic job " + ", ".join(run["job_ids"]))
    intro.blocks.append(Para([", ".join(facts_) + "."]))
    intro.blocks.append(Table(["Stream", "Rank", "Local rank", "Host", "PID", "Parent", "Graphs", "Kernels", "Ended",
                               "Compared"], [
        Row([Code(shown(p["path"])),
             "" if p["rank"] is None else str(p["rank"]), "" if p["local_rank"] is None else str(p["local_rank"]),
             str(p["host"] or ""), str(p["pid"] or ""), str(p["ppid"] or ""), str(p["graphs"]), str(p["kernels"]),
             _ended(p), "yes" if p["compared"] else (p["note"] or ("no (not a rank)" if p["role"] == "process" else
                                                                   p["role"]) or "no")])
        for p in procs]))
    blocks.append(intro)
    agree = Section("Rank agreement" if run["ranked"] else "Process agreement", 2)
    if run["groups"]:
        ref = procs[run["reference"]]
        agree.blocks.append(Para([f"Each {'rank' if run['ranked'] else 'process'} is compared with {label(ref)} (the "
                                  "reference): its graphs, the objects each stage produced, its kernels' names and "
                                  "every Stage × Field matrix cell. Those that compiled the same are one row."]))
        agree.blocks.append(Table(["Processes", "Streams", "Graphs", "Kernels", "Compared with the reference"], [
            Row([g["label"], str(len(g["members"])), str(g["graphs"]), str(g["kernels"]),
                 "identical" + (" (the reference)" if i == 0 else "") if g["identical"] else f"differs: {g['first']}"])
            for i, g in enumerate(run["groups"])]))
    else:
        agree.blocks.append(Para(["Nothing to compare: no stream holds a compiled graph."]))
    blocks.append(agree)
    div = Section("Divergence", 2)
    diverging = [g for g in run["groups"] if not g["identical"]]
    if not diverging:
        div.blocks.append(Para(["No " + ("rank" if run["ranked"] else "process") + " compiled differently."
                                if run["groups"] else "Nothing was compared."]))
    for g in diverging:
        ref_label = label(procs[run["reference"]])
        div.blocks.append(Section(_cap(g["label"]), 3, [
            Para([f"First difference: {g['first']}."]),
            Table(["Graph", "What", _cap(ref_label), _cap(g["label"])], [
                Row([str(d["graph"] or "all"), (f"{d['field']} at {d['stage']}" if d["what"] == "matrix cell" else d["what"]),
                     _value(d["ref"]), _value(d["this"])]) for d in g["differences"]], more=g["more"])]))
    blocks.append(div)
    if reference is not None:
        ref = procs[run["reference"]]
        blocks.append(Section(f"Report of {label(ref)}", 2, [Para([
            f"The sections below are {label(ref)}'s report ({os.path.basename(ref['path'])}), the reference: every "
            f"{'rank' if run['ranked'] else 'process'} marked identical above compiled the same. ",
            Code("prov-trace report STREAM"), " gives any other stream's own report."])]))
        blocks += views.report_document(reference, texts=texts).blocks
    n = sum(1 for p in procs if p["role"] != "copy")
    return Document(f"Source-to-kernel provenance audit: {n} process{'es' if n != 1 else ''}", blocks,
                    page_title=f"Provenance audit: {n} processes")


def _value(v: Any) -> Any:
    if isinstance(v, list):
        return join(Code(x) for x in v[:20]) if v else "—"
    return "none" if v is None else str(v)


# --- the object ---------------------------------------------------------------------------------


class RunReport(Rendered):
    """The report of several processes' streams: `run` (plain data, ``build_run``) and each one's `Report`."""

    iframe_title = "prov-trace run report"

    def __init__(self, run: dict[str, Any], reports: list[Report]):
        self.run = run
        self.reports = reports

    @classmethod
    def load(cls, paths: list[str | os.PathLike[str]] | str | os.PathLike[str], *, run: str | None = None) -> "RunReport":
        if isinstance(paths, (str, os.PathLike)):
            paths = [paths]
        # Every rank's model stays alive while the next is built: with the collector on, each full
        # collection walks all of them again (8 ranks of the 24-layer encoder: 3.2 s, 1.9 s without).
        # What is built here is trees of plain data; nothing is left for the collector to free.
        collecting = gc.isenabled()
        gc.disable()
        try:
            traces, unreadable = load_streams([os.fspath(p) for p in paths])
            models = [build(t) for t in traces]
            data, keep = build_run(traces, models, run=run, unreadable=unreadable)
        finally:
            if collecting:
                gc.enable()
        return cls(data, [Report(models[i]) for i in keep])

    # --- what it says ---

    @property
    def processes(self) -> list[dict[str, Any]]:
        return self.run["processes"]

    @property
    def agree(self) -> bool:
        """True when every rank (or process) compared compiled the same, none was cut, none is missing."""
        return self.run["agree"]

    @property
    def divergences(self) -> list[dict[str, Any]]:
        """The groups that compiled differently from the reference: ``label``, ``first`` and ``differences``."""
        return [g for g in self.run["groups"] if not g["identical"]]

    @property
    def reference(self) -> Report | None:
        i = self.run["reference"]
        return self.reports[i] if i is not None else None

    def report_of(self, rank: int) -> Report:
        """The report of one rank's stream."""
        for p, r in zip(self.processes, self.reports):
            if p["rank"] == rank and p["role"] == "rank":
                return r
        raise KeyError(f"there is no stream for rank {rank}")

    @property
    def graphs(self) -> list[str]:
        return self.reference.graphs if self.reference is not None else []

    @property
    def partial(self) -> str | None:
        """None when every stream is whole, else the first problem in one sentence."""
        cut = [p for p in self.processes if p["status"] == "cut"]
        if not cut:
            return None
        return "; ".join(f"{label(p)}'s stream is cut: {p['problem']}" for p in cut[:3])

    def matrix(self, graph: str | None = None) -> dict[str, Any]:
        """The reference's matrix (every identical rank's)."""
        if self.reference is None:
            raise NoSuchGraph("no process compiled a graph")
        return self.reference.matrix(graph)

    # --- renderings ---

    def document(self) -> Document:
        ref = self.reference
        return run_document(self.run, ref.model if ref is not None else None)

    def render(self, fmt: str = "md") -> str:
        if len(self.processes) == 1 and not self.run["problems"]:
            return self.reports[0].render(fmt)  # one stream: its own report, as `report FILE` gives it
        if fmt == "json":
            ref = self.reference
            return jsonout.render({"run": self.run, "reference": ref.model if ref is not None else None}, kind="run")
        if fmt == "html":
            from prov_trace.report import sources

            ref = self.reference
            doc = run_document(self.run, ref.model if ref is not None else None,
                               texts=sources.load(ref.model) if ref is not None else None)
            return html.render_document(doc, ref.model["symbols"] if ref is not None else None)
        if fmt == "md":
            return markdown.render_document(self.document())
        raise ValueError(f"there is no report format {fmt!r}: choose md, html or json")


    def __repr__(self) -> str:
        return (f"<prov-trace RunReport: {len(self.processes)} streams, "
                f"{'agree' if self.agree else 'do not agree'}{', partial' if self.partial else ''}>")

    def summary_lines(self) -> list[str]:
        """The short summary `prov-trace run` prints for a run of several processes."""
        out = [f"prov-trace summary: {len(self.processes)} processes"
               + (f" (run {', '.join(self.run['run_ids'])})" if self.run["run_ids"] else "")]
        for p in self.processes:
            what = (f"{p['graphs']} graph{'s' if p['graphs'] != 1 else ''}, {p['kernels']} kernel{'s' if p['kernels'] != 1 else ''}"
                    if p["graphs"] else "compiled nothing")
            out.append(f"  {label(p):<10} {os.path.basename(p['path']):<24} {what}, {_ended(p)}")
        out.append("  " + verdict(self.run))
        for text in self.run["problems"]:
            out.append(f"  note: {text}")
        ref = self.reference
        if ref is not None:
            out.append(f"  {label(self.processes[self.run['reference']])}, the reference:")
            out += ["  " + line for line in ref.summary_lines()[1:]]
        return [clean(line) for line in out]

    # --- checks and diffs ---

    def check(self, *rules: str, graphs: list[str] | None = None, require_ranks_agree: bool = False) -> CheckResult:
        """`prov-trace check` over every process that compiled: each group of identical ones checked once,
        named; with `require_ranks_agree`, a rank (or process) that diverges, is cut or missing fails too."""
        parsed = [_check.parse_rule(r) for r in rules]
        results: list[dict[str, Any]] = []
        text: list[str] = []
        seen: dict[Any, list[int]] = {}
        for i, p in enumerate(self.processes):
            if p["graphs"] and p["role"] not in ("superseded", "copy"):
                seen.setdefault(_key(facts(self.reports[i].model)), []).append(i)
        if parsed:
            if not seen:
                results += [{"rule": r.text, "holds": False, "checked": [], "processes": None,
                             "failures": [{"graph": None, "stage": None, "state": None, "n": 0, "total": 0,
                                           "why": "no stream holds a graph: nothing was compiled"}]} for r in parsed]
                text.append("no stream holds a graph: nothing was compiled")
            for members in seen.values():
                who = ranks_label([self.processes[i] for i in members])
                model = self.reports[members[0]].model
                res = _check.check(model, parsed, [g for g in (graphs or []) if g in {x["label"] for x in model["graphs"]}] or None)
                results += [{**r, "processes": who} for r in res]
                text.append(f"{who}" + (f" ({len(members)} processes, identical)" if len(members) > 1 else "") + ":")
                text += ["  " + line for line in _check.render(res, model["stage_titles"]).splitlines()]
        if require_ranks_agree:
            why = [] if self.agree else self._disagreement()
            results.append({"rule": "ranks agree", "holds": self.agree, "checked": [], "processes": None,
                            "failures": [{"graph": None, "stage": None, "state": None, "n": 0, "total": 0, "why": w}
                                         for w in why]})
            said = verdict(self.run)
            text.append("ok    ranks agree: " + said[:1].lower() + said[1:] if self.agree else "FAIL  ranks agree")
            text += [f"        {w}" for w in why]
        failed = sum(1 for r in results if not r["holds"])
        text.append(f"{len(results) - failed} of {len(results)} checks hold" + (f"; {failed} failed" if failed else ""))
        return CheckResult(failed == 0, results, "\n".join(text) + "\n")

    def _disagreement(self) -> list[str]:
        run = self.run
        out = []
        ref = run["reference"]
        for g in run["groups"]:
            if not g["identical"]:
                out.append(f"{g['label']} diverges from {label(self.processes[ref])}: {g['first']}")
        out += [t for t in run["problems"] if "cut short" in t or "no stream for rank" in t or "was stopped" in t]
        if not run["groups"]:
            out.append("no stream holds a compiled graph: there is nothing to compare")
        return out

    def diff(self, other: "RunReport | Report") -> dict[str, Any]:
        """What changed from this run (A) to `other` (B), process by process (see `pairs`)."""
        if isinstance(other, Report):
            other = RunReport.single(other)
        return run_diff(self, other)

    @classmethod
    def single(cls, report: Report) -> "RunReport":
        """One stream as a run of one process (a file diffed against a directory)."""
        tr = report.model["trace"]
        trace = Trace(path=tr["path"], size=tr["bytes"], header={**report.model["header"]}, end=tr["end"],
                      problem=tr["problem"])
        data, _ = build_run([trace], [report.model])
        return cls(data, [report])


def _compared(rr: RunReport) -> list[int]:
    idx = [i for i, p in enumerate(rr.processes) if p["compared"]]
    return idx or [i for i, p in enumerate(rr.processes) if p["graphs"]]


def pairs(a: RunReport, b: RunReport) -> list[tuple[int | None, int | None]]:
    """Which process of A is compared with which of B: rank with rank when both have ranks; one process
    against each of the other side's when one side has only one; else in order."""
    ia, ib = _compared(a), _compared(b)
    ra = {a.processes[i]["rank"]: i for i in ia if a.processes[i]["rank"] is not None}
    rb = {b.processes[i]["rank"]: i for i in ib if b.processes[i]["rank"] is not None}
    if ra and rb:
        return [(ra.get(r), rb.get(r)) for r in sorted(set(ra) | set(rb))]
    if len(ia) == 1 and len(ib) > 1:
        return [(ia[0], j) for j in ib]
    if len(ib) == 1 and len(ia) > 1:
        return [(i, ib[0]) for i in ia]
    n = max(len(ia), len(ib))
    return [(ia[k] if k < len(ia) else None, ib[k] if k < len(ib) else None) for k in range(n)]


def run_diff(a: RunReport, b: RunReport) -> dict[str, Any]:
    out_pairs, regressions = [], []
    for i, j in pairs(a, b):
        la = label(a.processes[i]) if i is not None else None
        lb = label(b.processes[j]) if j is not None else None
        name = la if la == lb or lb is None else (lb if la is None else f"{la} → {lb}")
        if i is None or j is None:
            out_pairs.append({"a": la, "b": lb, "name": name, "diff": None})
            if j is None:
                regressions.append({"process": name, "graph": None, "kind": "process", "layer": None, "field": None,
                                    "stage": None, "change": "lost"})
            continue
        d = _diff.diff(a.reports[i].model, b.reports[j].model)
        out_pairs.append({"a": la, "b": lb, "name": name, "diff": d})
        regressions += [{"process": name, **r} for r in d["regressions"]]
    return {"kind": "run-diff", "a": {"paths": [p["path"] for p in a.processes]},
            "b": {"paths": [p["path"] for p in b.processes]}, "pairs": out_pairs, "regressions": regressions}


def run_diff_document(d: dict[str, Any]) -> Document:
    blocks: list[Any] = [Para([f"{len(d['pairs'])} pair{'s' if len(d['pairs']) != 1 else ''} of processes compared, "
                               f"{len(d['regressions'])} regression{'s' if len(d['regressions']) != 1 else ''}."])]
    for pr in d["pairs"]:
        sec = Section(_cap(str(pr["name"])), 2)
        if pr["diff"] is None:
            sec.blocks.append(Para([f"Only in {'A' if pr['b'] is None else 'B'}: the other side has no such process."]))
        else:
            sec.blocks += [_shifted(blk, 1) for blk in views.diff_document(pr["diff"]).blocks]
        blocks.append(sec)
    return Document("Provenance diff over processes", blocks, kind="diff", page_title="Provenance diff")


def render_run_diff(d: dict[str, Any], fmt: str = "md") -> str:
    if fmt == "json":
        return jsonout.render(d, kind="run-diff")
    doc = run_diff_document(d)
    return html.render_document(doc) if fmt == "html" else markdown.render_document(doc)


def describe(r: dict[str, Any]) -> str:
    """One regression of a run diff in a few words."""
    if r.get("kind") == "process":
        return f"{r['process']} is missing from B"
    return f"{r['process']}: {_diff.describe(r)}"


__all__ = ["FORMAT", "RunReport", "build_run", "describe", "differences", "facts", "find_streams", "load_streams",
           "pairs", "ranks_label", "render_run_diff", "run_diff", "run_document", "verdict"]
