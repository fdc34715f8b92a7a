"""Artifact extractor: scan Inductor's generated module for each kernel's provenance comments.

``scan_module_source`` is a pure function of the file's text; it finds each
kernel definition (``name = async_compile.<kind>(``) and each call in the
wrapper (generated kernels, ``extern_kernels.*``, ``torch.ops.*`` fallbacks),
and keeps the comment lines directly above each one.
"""

from __future__ import annotations

import re
from typing import Any

from prov_trace.probes.snapshot import cut_str
from prov_trace.stream.schema import is_provenance_comment

_DEF_RE = re.compile(r"^(?P<name>[A-Za-z_]\w*) = async_compile\.(?P<how>\w+)\(")
_CALL_RE = re.compile(r"^\s+(?:(?P<assign>[\w, ]+)\s*=\s*)?(?P<name>(?:extern_kernels\.\w+|torch\.ops\.[\w.]+|[A-Za-z_]\w*))(?:\.run)?\(")


# Triton's wrapper writes a kernel's comment, then the stream it runs on (once per device), then the call.
_STREAM_RE = re.compile(r"^\s*stream\w* = get_raw_stream\(")


def _comments_above(lines: list[str], index: int) -> list[str]:
    out = []
    i = index - 1
    if i >= 0 and _STREAM_RE.match(lines[i]):
        i -= 1
    while i >= 0 and lines[i].lstrip().startswith("#"):
        out.append(cut_str(lines[i].strip(), 2000))
        i -= 1
    out.reverse()
    return out


def scan_module_source(text: str) -> list[dict[str, Any]]:
    """Each kernel in a generated module, with where it is defined and called and its comments."""
    lines = text.splitlines()
    kernels: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines):
        m = _DEF_RE.match(line)
        if m:
            comments = _comments_above(lines, i)
            kernels[m.group("name")] = {
                "kernel": m.group("name"),
                "kind": "generated",
                "how": m.group("how"),
                "def_line": i + 1,
                "calls": [],
                "comments": comments,
            }
    for i, line in enumerate(lines):
        m = _CALL_RE.match(line)
        if not m:
            continue
        name = m.group("name")
        if name in kernels:
            entry = kernels[name]
        elif name.startswith("extern_kernels.") or name.startswith("torch.ops."):
            entry = kernels.setdefault(
                name,
                {"kernel": name, "kind": "extern" if name.startswith("extern_kernels.") else "fallback",
                 "def_line": None, "calls": [], "comments": []},
            )
        else:
            continue
        entry["calls"].append({"line": i + 1, "comments": _comments_above(lines, i)})
    return with_provenance_comments(kernels)


def with_provenance_comments(kernels: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each scanned kernel with ``provenance_comments``: the provenance comments above its definition
    and above each of its calls (whatever language the scanner read)."""
    for entry in kernels.values():
        found = [c for c in entry["comments"] if is_provenance_comment(c)]
        for call in entry["calls"]:
            found.extend(c for c in call["comments"] if is_provenance_comment(c))
        entry["provenance_comments"] = found
    return list(kernels.values())


def scan_module_file(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return {"path": path, "bytes": len(text.encode("utf-8", "replace")), "kernels": scan_module_source(text)}
