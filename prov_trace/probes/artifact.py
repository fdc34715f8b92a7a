"""Artifact extractor: scan Inductor's generated module for each kernel's provenance comments.

``scan_module_source`` is a pure function of the file's text; it finds each
kernel definition (``name = async_compile.<kind>(``) and each call in the
wrapper (generated kernels, ``extern_kernels.*``, ``torch.ops.*`` fallbacks and
those called through the module's own names for op namespaces, ``aten.*``),
and keeps the comment lines directly above each one. Under ``cpp_wrapper`` the
module embeds its wrapper and kernels as C++, which ``scan_cpp_source`` reads
(as it reads AOTInductor's ``.cpp`` files).
"""

from __future__ import annotations

import re
from typing import Any

from prov_trace.probes.snapshot import cut_str
from prov_trace.stream.schema import is_provenance_comment

_DEF_RE = re.compile(r"^(?P<name>[A-Za-z_]\w*) = async_compile\.(?P<how>\w+)\(")
_CALL_RE = re.compile(r"^\s+(?:(?P<assign>[\w, ]+)\s*=\s*)?(?P<name>(?:extern_kernels\.\w+|torch\.ops\.[\w.]+|[A-Za-z_]\w*))(?:\.run)?\(")
# The module names op namespaces at its top (`aten = torch.ops.aten`, `inductor_ops = torch.ops.inductor`), and
# some fallbacks are called through them: Inductor's random seeds are `aten.randint.low_out(..., out=buf9)`.
_ALIAS_RE = re.compile(r"^(?P<alias>[A-Za-z_]\w*) = torch\.ops\.\w+\s*$")
_ALIAS_CALL_RE = re.compile(r"^\s+(?:(?P<assign>[\w, ]+)\s*=\s*)?(?P<name>(?P<alias>[A-Za-z_]\w*)\.\w+(?:\.\w+)*)\(")


# Triton's wrapper writes a kernel's comment, then the stream it runs on (torch 2.13 writes
# `stream0 = get_raw_stream(0)`, or `raw_stream = ...` in a user's stream context, before each call), then the call.
_STREAM_RE = re.compile(r"^\s*\w+\s*=\s*get_raw_stream\(")


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


def scan_python_source(text: str) -> list[dict[str, Any]]:
    """Each kernel of a Python wrapper, with where it is defined and called and its comments."""
    lines = text.splitlines()
    kernels: dict[str, dict[str, Any]] = {}
    aliases: set[str] = set()
    for i, line in enumerate(lines):
        a = _ALIAS_RE.match(line)
        if a:
            aliases.add(a.group("alias"))
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
        aliased = m is None and (m := _ALIAS_CALL_RE.match(line)) is not None and m.group("alias") in aliases
        if m is None:
            continue
        name = m.group("name")
        if name in kernels:
            entry = kernels[name]
        elif name.startswith("extern_kernels.") or name.startswith("torch.ops.") or aliased:
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


# --- C++: AOTInductor's files, and the wrapper a `cpp_wrapper` module embeds -----------------------

_CPP_DEF_RE = re.compile(r'^extern "C"\s+\S+\s+(?P<name>cpp_fused_\w+|cpp_\w+_kernel\w*)\((?P<args>[^)]*)\)\s*(?P<end>;|\{|$)')
#: Kernels are the generated cpp_fused_* functions and the C shim's per-device ops, aoti_torch_<device>_<op>
#: (aoti_torch_cpu_addmm_out); other aoti_torch_* calls allocate, view or set modes (aoti_torch_empty_strided,
#: aoti_torch_grad_mode_set_enabled) and are not kernels.
_CPP_CALL_RE = re.compile(r"^\s+(?:AOTI_TORCH_ERROR_CODE_CHECK\()?(?P<name>aoti_torch_(?:cpu|cuda|xpu|mps)_\w+|cpp_fused_\w+)\(")


def _cpp_comments_above(lines: list[str], i: int) -> list[str]:
    """The ``//`` lines above line i, skipping the ``static constexpr`` size arrays AOTI writes between."""
    out = []
    j = i - 1
    while j >= 0 and (lines[j].lstrip().startswith("//") or lines[j].lstrip().startswith("static constexpr")):
        if lines[j].lstrip().startswith("//"):
            out.append(cut_str(lines[j].strip(), 2000))
        j -= 1
    out.reverse()
    return out


def scan_cpp_source(text: str) -> list[dict[str, Any]]:
    """Each kernel a C++ file defines (``extern "C" ... cpp_fused_*``) or calls (``cpp_fused_*``,
    ``aoti_torch_<device>_*``), with the comment lines above it: the artifact payload's ``kernels``."""
    lines = text.splitlines()
    kernels: dict[str, dict[str, Any]] = {}
    for i, line in enumerate(lines):
        m = _CPP_DEF_RE.match(line)
        if m and m.group("end") != ";":
            kernels.setdefault(m.group("name"), {"kernel": m.group("name"), "kind": "generated", "def_line": i + 1,
                                                  "calls": [], "comments": _cpp_comments_above(lines, i)})
    for i, line in enumerate(lines):
        m = _CPP_CALL_RE.match(line)
        if not m:
            continue
        name = m.group("name")
        entry = kernels.setdefault(name, {"kernel": name, "kind": "extern" if name.startswith("aoti_torch_") else "generated",
                                          "def_line": None, "calls": [], "comments": []})
        entry["calls"].append({"line": i + 1, "comments": _cpp_comments_above(lines, i)})
    return with_provenance_comments(kernels)


_CPP_WRAPPER_START = "cpp_wrapper_src = ("
_STRING_END = re.compile(r"^\s*(\"\"\"|\'\'\')\s*$")


def _cpp_wrapper_span(lines: list[str]) -> tuple[int, int] | None:
    """The lines of the C++ an Inductor ``cpp_wrapper`` module embeds in its ``cpp_wrapper_src`` string."""
    for i, line in enumerate(lines):
        if line.startswith(_CPP_WRAPPER_START):
            end = next((j for j in range(i + 2, len(lines)) if _STRING_END.match(lines[j])), len(lines))
            return i + 1, end
    return None


def scan_module_source(text: str) -> list[dict[str, Any]]:
    """Each kernel in a generated module: the Python wrapper's, and under ``cpp_wrapper`` the embedded
    C++'s (its kernels are defined and called there), numbered by the module's own lines."""
    kernels = scan_python_source(text)
    if _CPP_WRAPPER_START not in text:  # the usual Python wrapper: no second pass over its lines
        return kernels
    lines = text.splitlines()
    span = _cpp_wrapper_span(lines)
    if span is not None:
        first, last = span
        seen = {k["kernel"] for k in kernels}
        for k in scan_cpp_source("\n".join(lines[first:last])):
            if k["kernel"] in seen:
                continue
            if k["def_line"] is not None:
                k["def_line"] += first
            for c in k["calls"]:
                c["line"] += first
            kernels.append(k)
    return kernels


def scan_module_file(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return {"path": path, "bytes": len(text.encode("utf-8", "replace")), "kernels": scan_module_source(text)}
