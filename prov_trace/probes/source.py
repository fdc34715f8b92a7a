"""Source locations: parse FX stack traces, and read the code Dynamo compiles (the source stage)."""

from __future__ import annotations

import linecache
import os
import re
import sys
import types
from functools import lru_cache
from typing import Any

from prov_trace.probes.snapshot import cut_str

# Every part stays on its own line ([ \t], [^"\n]): a hostile text of many blank lines or unclosed quotes
# costs linear time, not a rescan from each line start.
_FRAME_RE = re.compile(r'^[ \t]*File "(?P<file>[^"\n]+)", line (?P<line>\d{1,9}), in (?P<func>[^\n]+)\n(?P<text>[^\n]*)', re.M)


@lru_cache(maxsize=1)
def _library_dirs() -> tuple[str, ...]:
    """Directories whose frames are the library's, not the user's model."""
    dirs = []
    for name in ("torch",):
        mod = sys.modules.get(name)
        f = getattr(mod, "__file__", None)
        if f:
            dirs.append(os.path.dirname(os.path.abspath(f)) + os.sep)
    return tuple(dirs)


def is_library_file(path: str) -> bool:
    return path.startswith(_library_dirs()) or path.startswith("<")


def parse_stack_trace(text: str) -> list[dict[str, Any]]:
    """Frames of a formatted traceback, outermost first: file, line, func, text."""
    frames = []
    for m in _FRAME_RE.finditer(text or ""):
        frames.append(
            {"file": m.group("file"), "line": int(m.group("line")), "func": m.group("func").strip(),
             "text": cut_str(m.group("text").strip(), 400)}
        )
    return frames


#: A tensor subclass's dispatch hooks: every op on such a tensor passes through one, so its line is the same for
#: all of them; the line that called the op is the frame outside it.
_DISPATCH_HOOKS = ("__torch_function__", "__torch_dispatch__")


def user_frame(frames: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The model's own line: the innermost frame outside torch, passing over a tensor subclass's
    `__torch_function__` or `__torch_dispatch__` where a frame of the model's calls it; else the innermost frame."""
    hook = None
    for fr in reversed(frames):
        if not is_library_file(fr["file"]):
            if fr["func"] not in _DISPATCH_HOOKS:
                return fr
            hook = hook or fr
    return hook or (frames[-1] if frames else None)


def source_of_stack_trace(text: Any) -> dict[str, Any] | None:
    """The model line a stack trace points at (`user_frame`), as file, line, func and text; a new dict each call."""
    if not isinstance(text, str) or not text:
        return None
    # A str subclass is parsed as it comes: caching it would call its own __hash__ and __eq__.
    src = _source_of_str(text) if type(text) is str else _source(text)
    return dict(src) if src is not None else None


def _source(text: str) -> dict[str, Any] | None:
    fr = user_frame(parse_stack_trace(text))
    if fr is None:
        return None
    return {"file": fr["file"], "line": fr["line"], "func": fr["func"], "text": fr["text"]}


#: Stack traces repeat: every node one model line produces carries the same text, and each stage's nodes
#: share their predecessors' strings (the encoder's 4,832 FX node snapshots hold 2 different texts). Each text
#: is parsed once; the cache is bounded, so a long-lived process tracing many models keeps only the newest.
_source_of_str = lru_cache(maxsize=4096)(_source)


#: The source of the programs prov-trace runs (path -> lines), read once as each starts: a program that
#: deletes or rewrites its own file still has its text. linecache is left alone, so the program's own
#: tracebacks and torch's stack traces read the file as they would untraced.
_PROGRAMS: dict[str, list[str]] = {}


def remember_program(path: str, text: str) -> None:
    _PROGRAMS[path] = text.splitlines()


def forget_program(path: str) -> None:
    _PROGRAMS.pop(path, None)


def _line(filename: str, n: int) -> str:
    lines = _PROGRAMS.get(filename)
    if lines is not None:
        return lines[n - 1] if 0 < n <= len(lines) else ""
    return linecache.getline(filename, n)


def snapshot_code(code: types.CodeType) -> dict[str, Any]:
    """The source stage: every line of a code object Dynamo compiles, with its text."""
    lines = sorted({ln for _, _, ln in code.co_lines() if ln is not None and ln >= code.co_firstlineno})
    filename = code.co_filename
    # The first line, `def` or a decorator's (a decorated function's first line), holds no statement of
    # the body: only the frame's RESUME maps to it.
    if lines and lines[0] == code.co_firstlineno and _line(filename, lines[0]).lstrip().startswith(("def ", "async def ", "@")):
        lines = lines[1:]
    return {
        "file": filename,
        "qualname": getattr(code, "co_qualname", code.co_name),
        "first_line": code.co_firstlineno,
        "user": not is_library_file(filename),
        "lines": [{"line": ln, "text": cut_str(_line(filename, ln).strip(), 400)} for ln in lines],
    }
