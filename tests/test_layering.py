"""The architecture, checked: imports run one way, no module cycles, no private names across modules.

Read from the source with ``ast`` (imports inside functions count too), so the
check needs no import of prov_trace and cannot be fooled by lazy imports.
docs/architecture.md draws the same layers.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from conftest import REPO

PKG = REPO / "prov_trace"

#: Each module's layer, by the longest matching prefix. A module may import its own group and lower
#: layers only; the groups of one layer (tracer, probes, report, standin) never import each other.
LAYERS: list[tuple[str, int]] = [
    ("prov_trace.version", 0), ("prov_trace.errors", 0), ("prov_trace.contract", 0), ("prov_trace.stream.schema", 0),
    ("prov_trace.signals", 0), ("prov_trace.torchver", 0), ("prov_trace.voice", 0),
    ("prov_trace.stream", 1), ("prov_trace.files", 1),
    ("prov_trace.tracer", 2), ("prov_trace.probes", 2), ("prov_trace.report", 2), ("prov_trace.standin", 2),
    ("prov_trace.runner", 3), ("prov_trace.progress", 3), ("prov_trace.follow", 3),
    ("prov_trace.api", 4),
    ("prov_trace.cli", 5), ("prov_trace.pytest_plugin", 5), ("prov_trace.__main__", 5), ("prov_trace", 5),
]
#: The groups of layer 2: siblings that must not import each other.
SIBLINGS = ("prov_trace.tracer", "prov_trace.probes", "prov_trace.report", "prov_trace.standin")


def module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(mod: str) -> tuple[int, str]:
    best = max((p for p, _ in LAYERS if mod == p or mod.startswith(p + ".")), key=len)
    return dict(LAYERS)[best], best


def group_of(mod: str) -> str | None:
    return next((g for g in SIBLINGS if mod == g or mod.startswith(g + ".")), None)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports_of(path: Path, mod: str, known: set[str]) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of a prov_trace module."""
    tree = ast.parse(path.read_text(), str(path))
    package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("prov_trace"):
                    out.append((a.name, None, node.lineno))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if not base.startswith("prov_trace"):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                if sub in known:  # `from prov_trace.report import html` imports the module html
                    out.append((sub, None, node.lineno))
                else:
                    out.append((base, a.name, node.lineno))
    return out


def test_every_module_has_a_layer():
    for mod in modules():
        assert layer_of(mod), mod


def test_imports_run_one_way():
    mods = modules()
    known = set(mods)
    bad = []
    for mod, path in mods.items():
        lm, _ = layer_of(mod)
        gm = group_of(mod)
        for target, _, line in imports_of(path, mod, known):
            lt, _ = layer_of(target)
            gt = group_of(target)
            if target == "prov_trace" and mod != "prov_trace":
                bad.append(f"{mod}:{line} imports the package root (import the module that defines the name)")
            elif lt > lm:
                bad.append(f"{mod}:{line} (layer {lm}) imports {target} (layer {lt}): against the flow")
            elif gm and gt and gm != gt:
                bad.append(f"{mod}:{line} ({gm}) imports {target} ({gt}): siblings must not import each other")
    assert not bad, "\n".join(bad)


def test_no_import_cycles_between_modules():
    mods = modules()
    known = set(mods)
    graph = {m: sorted({t for t, _, _ in imports_of(p, m, known) if t in known and t != m}) for m, p in mods.items()}
    # Tarjan's strongly connected components: any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_no_module_imports_another_modules_private_name():
    mods = modules()
    known = set(mods)
    bad = []
    for mod, path in mods.items():
        aliases: dict[str, str] = {}
        tree = ast.parse(path.read_text(), str(path))
        for target, name, line in imports_of(path, mod, known):
            if name and name.startswith("_") and not name.startswith("__") and target != mod:
                bad.append(f"{mod}:{line} imports {target}.{name}")
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prov_trace"):
                for a in node.names:
                    if f"{node.module}.{a.name}" in known:
                        aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in known and a.asname:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                bad.append(f"{mod}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    assert not bad, "\n".join(bad)


# --- the typed report model mirrors docs/report.schema.json ----------------------------------------

SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())


def _schema_keys(ref: str) -> set[str]:
    node = SCHEMA
    for part in ref.split("/"):
        node = node[part]
    return set(node["properties"])


@pytest.mark.parametrize("typename,ref", [
    ("ReportModel", None), ("Graph", "$defs/graph"), ("MatrixRow", "$defs/matrixRow"), ("Cell", "$defs/cell"),
    ("SurvivalRow", "$defs/survivalRow"), ("StageData", "$defs/stage"), ("StageObject", "$defs/object"),
    ("SourceRef", "$defs/sourceRef"), ("FieldPresence", "$defs/fieldPresence"), ("TraceInfo", "properties/trace"),
    ("Mappings", "$defs/graph/properties/mappings"), ("Cut", "properties/cuts/items"),
    ("SummaryRow", "properties/summary/items"), ("FrameWithoutGraph", "properties/frames_without_graph/items"),
    ("NotReturned", "properties/not_returned/items"),
    ("HookStatus", "properties/hooks/items"), ("Symbol", "properties/symbols/additionalProperties"),
    ("Lineage", "$defs/lineage"), ("LineageNode", "$defs/lineageNode"), ("LineageEdge", "$defs/lineageEdge"),
])
def test_typed_model_mirrors_the_json_schema(typename, ref):
    from prov_trace.report import lineage, model

    cls = getattr(model, typename, None) or getattr(lineage, typename)
    keys = set(cls.__annotations__)
    schema_keys = _schema_keys(ref) - {"format", "version"} if ref else set(SCHEMA["properties"]) - {"format", "version"}
    assert keys == schema_keys, (typename, sorted(keys ^ schema_keys))
