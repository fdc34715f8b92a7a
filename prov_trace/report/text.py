"""Text helpers shared by the model and every renderer: trace strings made printable, paths shortened.

Strings in a trace come from the traced program; ``clean`` makes them inert
printable text before any renderer escapes them for its own format.
"""

from __future__ import annotations

import functools
import re
from typing import Any

_CTRL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: Lone surrogates: what invalid UTF-8 decoded with surrogateescape leaves in a str.
_SURROGATE = re.compile("[\ud800-\udfff]")

#: The most of one text a Markdown or HTML report shows (a source line, a name, a message). A longer
#: one (a 60 MB source line) is cut with a visible mark before anything copies it, so a report's size
#: and memory stay bounded; the trace holds it whole. The JSON report keeps up to MAX_JSON_TEXT.
MAX_TEXT = 2000
MAX_JSON_TEXT = 64 * 1024

#: Where installed packages and the standard library live: a path holding one is not the program's own.
_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "\\site-packages\\")
_STDLIB = re.compile(r"[/\\]lib[/\\]python\d+(\.\d+)?[/\\]")


def is_library_path(path: Any) -> bool:
    """Whether a path is an installed package's, the standard library's or generated code's (``<string>``).
    Read from the path alone: the report may be built on another machine."""
    if not isinstance(path, str) or not path or path.startswith("<"):
        return True
    return any(m in path for m in _LIBRARY_MARKERS) or bool(_STDLIB.search(path))


def target_function(target: Any) -> str:
    """A hook target's qualified name without its module: ``GraphLowering.compile_to_module``."""
    return str(target or "?").rpartition(":")[2]


def cut(text: str, limit: int = MAX_TEXT) -> str:
    """`text`, or its first `limit` characters and ``…[cut N chars]`` (the mark the probes' bounds use)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}…[cut {len(text) - limit} chars]"


def clean(text: Any) -> str:
    """Plain printable text: cut at MAX_TEXT, control characters (ANSI escapes, NUL) shown as \\xNN,
    invalid UTF-8 replaced."""
    if type(text) is str and len(text) <= _CACHED_MAX_LEN:
        return _clean_cached(text)
    return _clean(text)


def _clean(text: Any) -> str:
    s = cut("" if text is None else text if isinstance(text, str) else str(text))
    s = s.encode("utf-8", "replace").decode("utf-8", "replace") if _SURROGATE.search(s) else s
    return _CTRL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


#: A report shows the same names and paths many times over (the encoder's: ~115k strings drawn, a few
#: thousand different), so short strings' results are kept, in a bounded cache.
_CACHED_MAX_LEN = 1024
_clean_cached = functools.lru_cache(maxsize=32768)(_clean)


def basename(path: Any) -> str:
    """The file name of a path, whichever separator it uses."""
    return str(path or "").replace("\\", "/").rsplit("/", 1)[-1]


def short_path(path: Any) -> str:
    """The last two parts of a path (``examples/reference_mlp.py``): enough to tell files apart in a table."""
    p = str(path or "")
    if p.startswith("<"):
        # Code with no file: FX's generated forward is `<eval_with_key>.0 from /path/model.py:7 in forward`; its
        # own name stays, or the row would read as a line of model.py.
        head, sep, tail = p.partition(" from ")
        return f"{head}{sep}{short_path(tail)}" if sep else p
    parts = p.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else p


def first_line(detail: Any, limit: int = 200) -> str:
    """How a run ended, as one line for a table cell: the first line of the detail that says something. A
    multi-line exception text (torch's own advice after it, torchrun's ChildFailedError with its banners)
    filled the cell; a first line that only names the exception (``ChildFailedError:``) takes the next one."""
    lines = [ln.strip() for ln in str(detail).splitlines() if ln.strip().strip("=-").strip()]
    if not lines:
        return str(detail).strip()
    text = lines[0]
    if text.endswith(":") and len(lines) > 1:
        text = f"{text} {lines[1]}"
    return text if len(text) <= limit else text[:limit] + "…"


def error_summary(err: dict[str, Any] | None) -> str | None:
    """A compile's exception in one line: its class, its text's first line and Dynamo's explanation where it gives
    one ("TorchRuntimeError: RuntimeError when making fake tensor call: Dynamo failed to run FX node with fake
    tensors: ... got RuntimeError('a and b must have same reduction dim ...')"), and for a backend's failure
    (`inner`) the backend's own exception, e.g. "BackendCompilerFailed, from CppCompileError: C++ compile error"."""
    if not isinstance(err, dict) or not isinstance(err.get("type"), str):
        return None

    def one(e: dict[str, Any]) -> str:
        name = e["type"].rpartition(".")[2]
        text = e["text"] if isinstance(e.get("text"), str) else ""
        first = first_line(text) if text else ""
        return f"{name}: {_explained(first, text)}" if first else name

    inner = err.get("inner")
    if isinstance(inner, dict) and isinstance(inner.get("type"), str):
        return f"{err['type'].rpartition('.')[2]}, from {one(inner)}"
    return one(err)


def limit_summary(limit: dict[str, Any] | None) -> str | None:
    """A recompile limit Dynamo hit, as a clause: "Dynamo hit torch._dynamo.config.recompile_limit (8), so it
    stopped compiling this frame"."""
    if not isinstance(limit, dict) or not isinstance(limit.get("name"), str):
        return None
    value = f" ({limit['value']})" if isinstance(limit.get("value"), int) else ""
    return f"Dynamo hit torch._dynamo.config.{limit['name']}{value}, so it stopped compiling this frame"


#: How Dynamo's skip reason starts when the skip came from inside its trace; the rest is the reason itself.
_SKIP_PREFIX = "Dynamo decided to skip the frame while tracing: "


def skip_reason(skipped: dict[str, Any] | None) -> str | None:
    """Dynamo's reason for skipping a frame, without its "Dynamo decided to skip ..." opening; None where torch
    gave none (2.10)."""
    reason = skipped.get("reason") if isinstance(skipped, dict) else None
    if not isinstance(reason, str) or not reason:
        return None
    return (reason[len(_SKIP_PREFIX):] if reason.startswith(_SKIP_PREFIX) else reason).rstrip(".")


def skip_summary(skipped: dict[str, Any] | None) -> str | None:
    """A frame Dynamo gave up without an error, as a clause: "Dynamo skipped it and ran it as Python: No ops
    traced for the FX graph. ..." (torch 2.10 gives no reason, and the clause says so)."""
    if not isinstance(skipped, dict):
        return None
    reason = skip_reason(skipped)
    return f"Dynamo skipped it and ran it as Python: {reason}" if reason else \
        "Dynamo skipped it and ran it as Python; this torch does not say why"


def skipped_frames(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The frames Dynamo skipped without an error, a break or a recompile limit, in the run's order."""
    return [f for f in model.get("frames_without_graph") or []
            if f.get("skipped") and not f.get("stopped_in") and not break_site(f.get("graph_break"))]


#: Dynamo's graph break reasons (torch 2.7+) give a summary line, then ``  Explanation: ...``, hints and
#: debug context; older ones, and some still (``generic_jump TensorVariable()``), are one line.
_EXPLANATION = re.compile(r"^\s*Explanation:\s*(.+)$", re.MULTILINE)


def graph_break_summary(brk: Any) -> str | None:
    """Dynamo's reason for a graph break in one line: its first line and its explanation, where it gives one
    (``Failed to trace builtin operator: Dynamo does not know how to trace builtin operator `print` ...``)."""
    reason = brk.get("reason") if isinstance(brk, dict) else None
    if not isinstance(reason, str) or not reason.strip():
        return None
    return _explained(first_line(reason, 300), reason)


def _explained(head: str, text: str) -> str:
    """A message's first line and the ``Explanation:`` Dynamo gives under it (torch 2.7+), in 400 characters."""
    m = _EXPLANATION.search(text)
    out = f"{head.rstrip('.:')}: {m.group(1).strip()}" if m and m.group(1).strip() not in head else head
    return out if len(out) <= 400 else out[:400] + "…"


def break_frame(brk: Any) -> dict[str, Any] | None:
    """The frame a graph break happened in: the innermost frame of Dynamo's reason that names a file and a line
    (None when the graph did not end at a break, or its reason has no summary or names no line)."""
    if not isinstance(brk, dict) or not brk.get("summary"):
        return None
    return next((f for f in reversed(brk.get("stack") or [])
                 if isinstance(f.get("file"), str) and isinstance(f.get("line"), int)), None)


def _frame_site(frame: dict[str, Any]) -> str:
    """A frame as ``file.py:7 (in f)``; a package's ``__init__.py`` with its package (``padlib/__init__.py``)."""
    name = basename(frame["file"])
    if name in ("__init__.py", "__main__.py"):
        name = short_path(frame["file"])
    return f"{name}:{frame['line']}" + (f" (in {frame['func']})" if frame.get("func") else "")


def break_site(brk: dict[str, Any] | None) -> str | None:
    """Where a graph break happened, as ``file.py:7 (in f)``: the innermost frame of Dynamo's reason. Where that
    frame is a library's and an outer one is not, the line of the program's own that led there follows it
    (``helpers.py:40 (in pad), from model.py:12 (in forward)``): the line a user can change. None when the graph
    did not end at a graph break, or its reason names no line."""
    frame = break_frame(brk)
    if frame is None:
        return None
    site = _frame_site(frame)
    if is_library_path(frame["file"]):
        own = next((f for f in reversed(brk.get("stack") or []) if isinstance(f.get("file"), str)
                    and isinstance(f.get("line"), int) and not is_library_path(f["file"])), None)
        if own is not None:
            site += f", from {_frame_site(own)}"
    return site


def _compile_order(cid: Any) -> tuple:
    """A Dynamo compile id's place in the run: ``1/0`` (frame 1, first compile) before ``1/1`` and ``10/0``."""
    nums = re.findall(r"\d+", cid) if isinstance(cid, str) else []
    return (0, tuple(int(n) for n in nums)) if nums else (1, ())


def run_breaks(model: dict[str, Any]) -> list[tuple[Any, dict[str, Any]]]:
    """Every graph break of a run, in compile order, as (compile id, break): those that ended a graph, and those
    that ended an empty graph (a break right after another), which a frame that compiled no graph holds."""
    found = [(g.get("compile_id"), g["graph_break"]) for g in model.get("graphs") or [] if g.get("graph_break")]
    found += [(f.get("compile_id"), f["graph_break"]) for f in model.get("frames_without_graph") or []
              if f.get("graph_break")]
    return sorted(found, key=lambda item: _compile_order(item[0]))


def break_sites(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's graph break sites, in compile order: each line Dynamo broke a graph at, once however many compiles
    broke there (a compile's forward and backward share one; a recompile breaks at the same line again), with
    `file`, `line`, `where` (``f.py:7 (in f)``), Dynamo's `summary` and the `compile_ids` it ended."""
    sites: dict[tuple, dict[str, Any]] = {}
    for cid, brk in run_breaks(model):
        frame = break_frame(brk)
        if frame is None:
            continue
        site = sites.setdefault((frame["file"], frame["line"]), {
            "file": frame["file"], "line": frame["line"], "where": break_site(brk), "summary": brk["summary"],
            "compile_ids": []})
        if str(cid) not in site["compile_ids"]:
            site["compile_ids"].append(str(cid))
    return list(sites.values())


def break_line(site: dict[str, Any]) -> str:
    """A break site in one line: ``[0/0, 0/1] graph break at f.py:7 (in f): <Dynamo's reason>``."""
    return f"[{', '.join(site['compile_ids'])}] graph break at {site['where']}: {site['summary']}"
