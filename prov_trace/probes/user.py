"""User probes: ``--probe 'pkg.mod:Qual.name[@entry|@return|@both][=STAGE]'`` and ``--probes FILE.toml``.

A user probe attaches the generic probe to any Python function: a bounded, safe
snapshot of its arguments (and, at return, its return value). FX graphs, FX
nodes, LoopLevelIR ops, scheduler nodes and dataclasses go through the stage
extractors; anything else through ``snapshot.generic``, which never calls a
user ``__repr__``/``__str__``/``__getattr__``. The probe's stage becomes a column of
the report. docs/probes.md documents the syntax and the file format.
"""

from __future__ import annotations

import inspect
import re
import sys
from dataclasses import dataclass
from typing import Any

from prov_trace.stream import schema
from prov_trace.probes import fx, ir
from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, TargetError, TargetSpec
from prov_trace.probes.snapshot import (
    MAX_ITEMS,
    dataclass_fields,
    generic,
    is_dataclass_instance,
    safe_populated,
    type_name,
)

EVENTS: dict[str, tuple[str, ...]] = {"entry": (ENTRY,), "return": (RETURN,), "both": (ENTRY, RETURN)}
#: At return the snapshot holds the arguments too, so one record has both.
DEFAULT_EVENT = "return"
_STAGE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,63}$")
_SPEC_RE = re.compile(r"^(?P<target>[^@=]+?)\s*(?:@(?P<event>[^=]*))?\s*(?:=(?P<stage>.*))?$")
FILE_KEYS = ("target", "event", "stage")


class ProbeSpecError(ValueError):
    """A probe given on the command line or in a file that can't be used; the message says where and why."""


@dataclass(frozen=True)
class UserProbe:
    target: str
    event: str
    stage: str
    #: Where it was given: ``--probe '...'`` or ``FILE:LINE``.
    origin: str

    def hooks(self) -> tuple[Hook, ...]:
        why = f"user probe ({self.origin})"
        return tuple(Hook(self.stage, self.target, ev, generic_probe, (), why, pipeline=False)
                     for ev in EVENTS[self.event])


def default_stage(spec: TargetSpec) -> str:
    """``Scheduler.fuse_nodes`` for ``torch._inductor.scheduler:Scheduler.fuse_nodes``."""
    return spec.qualname.replace(".<locals>.", ".")[-64:].lstrip(".") or spec.qualname


def check_stage(stage: str) -> str | None:
    """None when `stage` can name a user stage, else what is wrong with it."""
    if stage in schema.STAGES or stage in schema.SIDE_STAGES:
        return (f"'{stage}' is a built-in stage; a user probe needs a stage of its own "
                f"(built-in: {', '.join(schema.STAGES + schema.SIDE_STAGES)})")
    if not _STAGE_RE.match(stage):
        return (f"'{stage}' is not a stage name: use letters, digits, '_', '.' or '-', "
                "starting with a letter or '_', at most 64 characters")
    return None


def make(target: str, event: str | None, stage: str | None, origin: str) -> UserProbe:
    try:
        spec = TargetSpec.parse(target)
    except TargetError as exc:
        raise ProbeSpecError(f"{origin}: {exc}") from None
    event = DEFAULT_EVENT if event is None else event
    if event not in EVENTS:
        raise ProbeSpecError(f"{origin}: '{event}' is not an event: use entry, return or both")
    stage = default_stage(spec) if stage is None else stage
    problem = check_stage(stage)
    if problem:
        raise ProbeSpecError(f"{origin}: {problem}")
    return UserProbe(str(spec), event, stage, origin)


def parse_spec(text: str, origin: str | None = None) -> UserProbe:
    """``pkg.mod:Qual.name[@entry|@return|@both][=STAGE]``."""
    origin = origin or f"--probe '{text}'"
    m = _SPEC_RE.match(text.strip())
    if not m:
        raise ProbeSpecError(f"{origin}: write a probe as 'package.module:Qual.name[@entry|@return|@both][=STAGE]'")
    event = m.group("event")
    stage = m.group("stage")
    if event is not None:
        event = event.strip()
        if not event:
            raise ProbeSpecError(f"{origin}: '@' must be followed by entry, return or both")
    if stage is not None:
        stage = stage.strip()
        if not stage:
            raise ProbeSpecError(f"{origin}: '=' must be followed by a stage name")
        if "@" in stage:
            raise ProbeSpecError(f"{origin}: put '@EVENT' before '=STAGE', e.g. 'mod:fn@both=my_stage'")
    return make(m.group("target").strip(), event, stage, origin)


# --- the probes file ------------------------------------------------------------------------


_HEADER_RE = re.compile(r"^\s*\[\[\s*(?P<name>[^\]]*?)\s*\]\]")
_TABLE_RE = re.compile(r"^\s*\[\s*(?P<name>[^\]]*?)\s*\]")
_KEY_RE = re.compile(r"""^\s*(?P<q>["']?)(?P<key>[A-Za-z0-9_\-]+)(?P=q)\s*=""")


def _key_lines(text: str) -> tuple[dict[str, int], list[dict[str, int]]]:
    """Where each key sits: top-level keys, and per ``[[probe]]`` table its header and keys (1-based lines)."""
    top: dict[str, int] = {}
    tables: list[dict[str, int]] = []
    current: dict[str, int] | None = top
    for n, line in enumerate(text.splitlines(), 1):
        m = _HEADER_RE.match(line)
        if m:
            if m.group("name") == "probe":
                tables.append({"[[probe]]": n})
                current = tables[-1]
            else:
                top.setdefault(m.group("name"), n)
                current = None
            continue
        m = _TABLE_RE.match(line)
        if m:
            top.setdefault(m.group("name"), n)
            current = None
            continue
        m = _KEY_RE.match(line)
        if m and current is not None:
            current.setdefault(m.group("key"), n)
    return top, tables


def load_file(path: str) -> list[UserProbe]:
    """The probes in a TOML file; a wrong file raises ProbeSpecError naming the line and the problem."""
    import tomllib

    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ProbeSpecError(f"there is no probes file {path}") from None
    except IsADirectoryError:
        raise ProbeSpecError(f"{path} is a directory: give a .toml file") from None
    except OSError as exc:
        raise ProbeSpecError(f"cannot read the probes file {path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ProbeSpecError(f"{path}:{line}: the file is not UTF-8 text") from None
    if text.startswith("\ufeff"):  # a byte-order mark some editors write: not part of the TOML
        text = text[1:]
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", msg)
        if m:
            msg = msg[: m.start()]
            raise ProbeSpecError(f"{path}:{m.group(1)}: not valid TOML: {msg} (column {m.group(2)})") from None
        m = re.search(r"\(at end of document\)", msg)
        last = text.count("\n") + 1
        raise ProbeSpecError(f"{path}:{last}: not valid TOML: {msg.replace(m.group(0), '').strip() if m else msg}") from None
    top, tables = _key_lines(text)
    for key in data:
        if key != "probe":
            raise ProbeSpecError(f"{path}:{top.get(key, 1)}: unknown key '{key}': the file holds [[probe]] tables only")
    items = data.get("probe")
    if items is None:
        raise ProbeSpecError(f"{path}:1: no [[probe]] table: add one with target = \"package.module:Qual.name\" "
                             "(see docs/probes.md)")
    if not isinstance(items, list) or not all(isinstance(t, dict) for t in items):
        raise ProbeSpecError(f"{path}:{top.get('probe', 1)}: 'probe' must be an array of tables, written [[probe]]")
    out = []
    for i, table in enumerate(items):
        lines = tables[i] if i < len(tables) else {}
        where = lambda key: lines.get(key, lines.get("[[probe]]", 1))  # noqa: E731
        for key in table:
            if key not in FILE_KEYS:
                raise ProbeSpecError(f"{path}:{where(key)}: unknown key '{key}' in probe {i + 1}: "
                                     f"the keys are {', '.join(FILE_KEYS)}")
        if "target" not in table:
            raise ProbeSpecError(f"{path}:{where('[[probe]]')}: probe {i + 1} has no target: "
                                 "add target = \"package.module:Qual.name\"")
        for key in FILE_KEYS:
            if key in table and not isinstance(table[key], str):
                raise ProbeSpecError(f"{path}:{where(key)}: '{key}' in probe {i + 1} must be a string, "
                                     f"not {type(table[key]).__name__}")
        event, stage = table.get("event"), table.get("stage")
        if event is not None and event not in EVENTS:
            raise ProbeSpecError(f"{path}:{where('event')}: '{event}' is not an event: use entry, return or both")
        problem = check_stage(stage) if stage is not None else None
        if problem:
            raise ProbeSpecError(f"{path}:{where('stage')}: {problem}")
        out.append(make(table["target"], event, stage, f"{path}:{where('target')}"))
    return out


def hooks_for(probes: list[UserProbe]) -> tuple[Hook, ...]:
    """Every probe's hooks; the same target, event and stage twice is an error."""
    seen: dict[tuple[str, str, str], str] = {}
    hooks = []
    for p in probes:
        for h in p.hooks():
            key = (h.target, h.event, h.stage)
            if key in seen:
                raise ProbeSpecError(f"{p.origin}: repeats {seen[key]} ({h.target} at {h.event}, stage {h.stage})")
            seen[key] = p.origin
            hooks.append(h)
    return tuple(hooks)


# --- the generic probe ------------------------------------------------------------------------


def _cls(module: str, name: str) -> type | None:
    mod = sys.modules.get(module)
    c = getattr(mod, name, None) if mod is not None else None
    return c if isinstance(c, type) else None


def _is(obj: Any, *classes: type | None) -> bool:
    t = type(obj)  # never obj.__class__: no user code
    return any(c is not None and issubclass(t, c) for c in classes)


def _kinds() -> dict[str, tuple[type | None, ...]]:
    return {
        "fx_graph": (_cls("torch.fx", "GraphModule"), _cls("torch.fx", "Graph")),
        "fx_node": (_cls("torch.fx", "Node"),),
        "scheduler_node": (_cls("torch._inductor.scheduler", "BaseSchedulerNode"),),
        "ir_op": (_cls("torch._inductor.ir", "IRNode"), _cls("torch._inductor.ir", "Operation")),
    }


def snapshot_value(obj: Any) -> dict[str, Any]:
    """A value as the generic probe records it: type, populated, and what the matching extractor reads."""
    kinds = _kinds()
    out: dict[str, Any] = {"type": type_name(obj), "populated": safe_populated(obj)}
    try:
        if _is(obj, *kinds["fx_graph"]):
            out["kind"], out["value"] = "fx_graph", fx.snapshot_graph(obj)
        elif _is(obj, *kinds["fx_node"]):
            out["kind"], out["value"] = "fx_node", fx.snapshot_node(obj)
        elif _is(obj, *kinds["scheduler_node"]):
            out["kind"], out["value"] = "scheduler_nodes", ir.snapshot_scheduler_nodes([obj])
        elif _is(obj, *kinds["ir_op"]):
            out["kind"], out["value"] = "ir_op", ir.snapshot_op(obj, brief=True)
        elif type(obj) in (list, tuple) and obj and all(_is(i, *kinds["scheduler_node"]) for i in obj):
            out["kind"], out["value"] = "scheduler_nodes", ir.snapshot_scheduler_nodes(obj)
        elif type(obj) in (list, tuple) and obj and all(_is(i, *kinds["ir_op"]) for i in obj):
            out["kind"], out["value"] = "ir_ops", ir.snapshot_ops(obj)
        elif type(obj) in (list, tuple) and obj and all(_is(i, *kinds["fx_node"]) for i in obj):
            out["kind"], out["value"] = "fx_nodes", {"node_count": len(obj),
                                                     "nodes": [fx.snapshot_node(n) for n in obj[:MAX_ITEMS]]}
        elif is_dataclass_instance(obj):
            out["kind"], out["value"] = "dataclass", dataclass_fields(obj, lambda name, v: generic(v, 1))
        else:
            out["kind"], out["value"] = "generic", generic(obj)
    except Exception as exc:  # noqa: BLE001 - an extractor that can't read it falls back to the generic snapshot
        out["kind"], out["value"] = "generic", generic(obj)
        out["error"] = f"{type(exc).__name__}: {exc}"[:400]
    return out


def _parameters(call: ProbeCall) -> list[str]:
    frame = call.frame
    if frame is None:
        return list(call.locals)
    co = frame.f_code
    n = co.co_argcount + co.co_kwonlyargcount
    n += bool(co.co_flags & inspect.CO_VARARGS) + bool(co.co_flags & inspect.CO_VARKEYWORDS)
    return list(co.co_varnames[:n])


def generic_probe(call: ProbeCall) -> dict[str, Any]:
    """The arguments (at entry: as passed; at return: as they are then) and, at return, the return value."""
    args = {}
    for name in _parameters(call)[:MAX_ITEMS]:
        if name in call.locals:
            args[name] = snapshot_value(call.locals[name])
    out: dict[str, Any] = {"args": args}
    if call.phase == RETURN:
        out["return"] = snapshot_value(call.retval)
    return out
