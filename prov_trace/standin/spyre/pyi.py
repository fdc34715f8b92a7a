"""What a torch-spyre tree expects of ``torch_spyre._C``, read from its sources (nothing is imported).

Two readings: the names ``_C.pyi`` declares (top-level names, and the public members of each
class: enum members, methods, properties), and the names the tree's Python code takes from
``_C`` (``from torch_spyre._C import X``, ``_C.X``, and the same inside generated-code
strings). ``missing(tree, module)`` lists what the stand-in module lacks of either.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from typing import Any, Iterable

_IMPORT_IN_TEXT = re.compile(r"from\s+torch_spyre\._C\s+import\s+([A-Za-z_][\w ,]*)")
_C_MODULES = ("torch_spyre._C",)


@dataclass
class Declared:
    names: set[str] = field(default_factory=set)
    members: dict[str, set[str]] = field(default_factory=dict)


def read_pyi(path: str) -> Declared:
    """Top-level names and class members declared in a ``_C.pyi``."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    out = Declared()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out.names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            out.names.add(node.name)
            out.members[node.name] = _class_members(node)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id != "__all__":
                out.names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == "__all__":
                    try:
                        out.names.update(str(v) for v in ast.literal_eval(node.value))
                    except (ValueError, TypeError):
                        pass
                elif isinstance(target, ast.Name):
                    out.names.add(target.id)
    return out


def _class_members(cls: ast.ClassDef) -> set[str]:
    members: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            name = node.name
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        else:
            continue
        if name.startswith("__") and name.endswith("__"):
            continue  # pybind11's protocol methods: how the binding works, not what the tree calls
        members.add(name)
    return members


def used_names(package_dir: str) -> dict[str, set[str]]:
    """The ``_C`` names the package's Python files use, each with the files that use it."""
    used: dict[str, set[str]] = {}
    for root, dirs, files in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d not in ("__pycache__", "csrc")]
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, os.path.dirname(package_dir))
            for sym in _names_in_file(path):
                used.setdefault(sym, set()).add(rel)
    return used


def _names_in_file(path: str) -> Iterable[str]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tree = ast.parse(text, filename=path)
    except (OSError, SyntaxError, ValueError):
        return []
    found: set[str] = set()
    # a bare `_C` is torch-spyre's (e.g. `_C = self._C`) unless the file binds torch's own `_C` to that name
    c_aliases = {"_C"}
    torch_c: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if module in _C_MODULES or (node.level and module == "_C"):
                found.update(a.name for a in node.names if a.name != "*")
            elif (module == "torch_spyre" or (node.level and module == "")) and any(a.name == "_C" for a in node.names):
                c_aliases.update(a.asname or "_C" for a in node.names if a.name == "_C")
            elif module == "torch" and not node.level:
                torch_c.update(a.asname or "_C" for a in node.names if a.name == "_C")
        elif isinstance(node, ast.Import):
            torch_c.update(a.asname for a in node.names if a.name == "torch._C" and a.asname)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "torch_spyre._C" in node.value:
            for match in _IMPORT_IN_TEXT.finditer(node.value):
                for part in match.group(1).split(","):
                    bits = part.split()
                    if bits:
                        found.add(bits[0])
    if "_C" in torch_c:
        c_aliases.discard("_C")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in c_aliases:
                found.add(node.attr)
            elif (isinstance(base, ast.Attribute) and base.attr == "_C"
                  and not (isinstance(base.value, ast.Name) and base.value.id == "torch")):
                found.add(node.attr)
    return found


def _has_member(cls: Any, member: str) -> bool:
    if hasattr(cls, member):
        return True
    # an Enum's ``name``/``value`` live on its members, not on the class
    members = getattr(cls, "__members__", None)
    if members is not None and hasattr(members, "values") and len(members):
        return hasattr(next(iter(members.values())), member)
    return False


@dataclass
class Check:
    missing_declared: list[str]
    missing_used: dict[str, list[str]]
    not_provided: dict[str, str]

    @property
    def ok(self) -> bool:
        return not self.missing_declared and not self.missing_used


def check(package_dir: str, module: Any, not_provided: dict[str, str]) -> Check:
    """What `module` lacks of the tree's ``_C.pyi`` and of the tree's Python uses of ``_C``."""
    declared = read_pyi(os.path.join(package_dir, "_C.pyi"))
    missing: list[str] = []
    for name in sorted(declared.names):
        if not hasattr(module, name):
            missing.append(name)
            continue
        obj = getattr(module, name)
        for member in sorted(declared.members.get(name, ())):
            if not _has_member(obj, member):
                missing.append(f"{name}.{member}")
    used = used_names(package_dir)
    missing_used = {}
    skipped = {}
    for name in sorted(used):
        if hasattr(module, name) or name in declared.names:
            continue
        if name in not_provided:
            skipped[name] = not_provided[name]
        else:
            missing_used[name] = sorted(used[name])
    return Check(missing, missing_used, skipped)
