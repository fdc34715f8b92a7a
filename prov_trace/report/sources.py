"""The files the HTML report's source and code views show: read at report time, bounded, checked against the trace.

The trace records the text of every line it names. A file read here is shown
whole when it still holds those lines; when it changed or vanished since the
run, the view says so and shows the recorded lines only. Binary files are not
shown; text that is not UTF-8 is decoded with replacement characters and said
so; lines and files are cut at fixed bounds, and each cut is marked. This is the
report's only I/O besides the trace, and nothing here runs what it reads.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

#: Bounds on what a view shows of one file: bytes read, lines kept, characters per line.
MAX_FILE_BYTES = 4 * 1024 * 1024
MAX_LINES = 50_000
MAX_LINE_CHARS = 10_000
CUT_LINE = "…[line cut: {n} more characters]"


@dataclass
class FileText:
    """A file as a view shows it: its lines (1-based by position), and why it may not be the whole file."""

    path: str
    #: ok, changed (differs from the trace: recorded lines only), missing (recorded lines only), binary, unreadable.
    status: str
    lines: list[str | None] = field(default_factory=list)
    #: What a reader should know, in one sentence (a cut, a changed file, replaced characters).
    note: str | None = None


def _cut_line(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[:MAX_LINE_CHARS] + CUT_LINE.format(n=len(text) - MAX_LINE_CHARS)


def _from_recorded(path: str, recorded: dict[int, str], status: str, note: str) -> FileText:
    last = min(max(recorded, default=0), MAX_LINES)
    lines: list[str | None] = [None] * last
    for n, text in recorded.items():
        if 1 <= n <= last:
            lines[n - 1] = _cut_line(text or "")
    return FileText(path, status, lines, note)


def read_source(path: str, recorded: dict[int, str] | None = None) -> FileText:
    """`path`'s text, or the lines the trace recorded of it when the file is gone or changed."""
    recorded = recorded or {}
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except (OSError, ValueError) as exc:  # a path from a trace may hold a NUL byte
        return _from_recorded(path, recorded, "missing",
                              f"the file is not readable here ({getattr(exc, 'strerror', None) or exc}): the lines the trace recorded are shown")
    notes = []
    if len(data) > MAX_FILE_BYTES:
        data = data[:MAX_FILE_BYTES]
        notes.append(f"only its first {MAX_FILE_BYTES // (1024 * 1024)} MiB are shown")
    if b"\0" in data:
        return FileText(path, "binary", [], "the file is binary: it is not shown")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        notes.append("it is not UTF-8: undecodable bytes show as \ufffd")
    raw = text.splitlines()
    if len(raw) > MAX_LINES:
        notes.append(f"only its first {MAX_LINES} lines are shown")
        raw = raw[:MAX_LINES]
    lines: list[str | None] = [_cut_line(t) for t in raw]
    if any(len(t) > MAX_LINE_CHARS for t in raw):
        notes.append(f"lines over {MAX_LINE_CHARS} characters are cut")
    # The trace's lines are stripped of indentation and may be cut (``…[cut N chars]``): compare what both have.
    changed = [n for n, t in recorded.items()
               if t and not (1 <= n <= len(raw) and raw[n - 1].strip().startswith(t.split("…[cut ")[0]))]
    if changed:
        return _from_recorded(path, recorded, "changed",
                              f"the file changed since the run (line {changed[0]} differs): the lines the trace recorded are shown")
    return FileText(path, "ok", lines, "; ".join(notes).capitalize() + "." if notes else None)


_TOP_LEVEL = re.compile(r"^(?:[A-Za-z_]\w*\s*=|def |class |async def |async_compile\.wait|if __name__|@|//|extern |#include|\"\"\")")


def python_spans(lines: list[str | None]) -> dict[int, int]:
    """First line -> last line of each top-level statement of a Python file (Inductor's wrapper module)."""
    import ast

    try:
        tree = ast.parse("\n".join(t or "" for t in lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    return {node.lineno: node.end_lineno or node.lineno for node in tree.body}


def span_end(lines: list[str | None], start: int, spans: dict[int, int] | None = None) -> int:
    """The last line (1-based) of the definition that begins at line `start`: the statement's end in a Python
    file (`spans`, from ``python_spans``), else up to the next top-level statement."""
    if spans and start in spans:
        return spans[start]
    end = start
    for i in range(start, len(lines)):  # lines[i] is line i + 1: the lines after the start
        text = lines[i]
        if text is None:
            continue
        if text.strip() and not text[0].isspace() and _TOP_LEVEL.match(text):
            break
        if text.strip():
            end = i + 1
    return end


def load(model: dict[str, Any]) -> dict[str, FileText]:
    """Every file a report's views show: the source files its survival rows name, and the emitted code files."""
    recorded: dict[str, dict[int, str]] = {}
    for g in model["graphs"]:
        for r in g["survival"]:
            if isinstance(r.get("file"), str) and isinstance(r.get("line"), int):
                recorded.setdefault(r["file"], {})[r["line"]] = r.get("text") or ""
    out = {path: read_source(path, lines) for path, lines in recorded.items()}
    for g in model["graphs"]:
        art = g["stages"].get("artifact") or {}
        for path in art.get("files", []) or []:
            if isinstance(path, str) and path not in out and os.path.splitext(path)[1] in (".py", ".cpp", ".h", ".cu"):
                out[path] = read_source(path)
    return out
