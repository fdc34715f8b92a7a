"""inject's rewritten code objects, kept on disk so a later run does not rewrite the same function again.

Rewriting a target with the ``bytecode`` package costs milliseconds per function, tens for a large one
(Inductor's ``AotCodeCompiler.compile``: ~57 ms on 3.11), and every run rewrote every target again: about
130 ms of a 3.11 run's fixed cost (docs/benchmarks.md). The rewrite is a pure function of the original
code object and the rewriting code, so its result is kept, with ``marshal``, under
``<cache root>/inject/<tag>/`` (the cache root is ``$PROV_TRACE_CACHE_DIR``, else
``$XDG_CACHE_HOME/prov-trace``, else ``~/.cache/prov-trace``). The tag is a digest of the Python
build, the ``bytecode`` package's version file and the rewriting code (this module and inject.py), so
a change to any of them starts afresh.

What is cached is the rewrite with a placeholder constant where the probe goes (a probe is a closure,
which ``marshal`` can't write); `bind` puts the run's probe there. An entry holds the original code
object beside the rewrite, and is used only where that original equals the code object being rewritten
(same file, name, line, bytecode, constants, names, line and exception tables): anything else, and any
entry that can't be read, is a miss, and the code is rewritten as before. Nested code objects (the
constants a ``def`` or ``lambda`` inside the target makes functions from) are the original's own
objects in the result, as in a rewrite made in the process, so the functions they make are the ones
target resolution finds.

Nothing here may hurt the host: a cache that can't be created, read or written is skipped. Entries are
written to a temporary file and renamed into place, so two processes filling the cache at once never
read half an entry.

Old directories are pruned: a run that uses a directory marks it used (its modification time, at most
once a day), and a run that creates a new one removes its siblings unused for `STALE_DAYS` days, so
upgrading Python, ``bytecode`` or prov-trace does not leave the old rewrites behind for good. Only what
this module writes is removed: directories named as `_tag` names them, holding ``*.marshal`` entries.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import re
import sys
import time
import types
from pathlib import Path
from typing import Any, Callable

from prov_trace import files

#: The constant a cached rewrite carries where the probe goes; `bind` replaces it.
PLACEHOLDER = "\x00prov-trace: inject's probe\x00"
#: Bump when the layout of an entry changes.
FORMAT = 1
#: A tag directory unused for this many days is removed when a run creates a new one.
STALE_DAYS = 30
#: A directory `_tag` names: only these are ever pruned.
_TAG_DIR = re.compile(r"^[A-Za-z0-9_.-]+-[0-9a-f]{20}$")
#: A directory's use is marked at most this often (seconds), so a run costs no write when nothing changed.
_MARK_EVERY = 86_400
#: The original's attributes an entry must match (code equality leaves out co_filename, and, on some
#: versions, others listed here; checking them costs nothing).
_SAME = ("co_filename", "co_name", "co_qualname", "co_firstlineno", "co_flags", "co_argcount",
         "co_posonlyargcount", "co_kwonlyargcount", "co_varnames", "co_freevars", "co_cellvars", "co_names",
         "co_stacksize", "co_code", "co_linetable", "co_exceptiontable")


class Miss(Exception):
    """A cached rewrite that does not fit the code object at hand."""


def _bytecode_files() -> list[str]:
    """The bytecode package's version file (else its __init__), found without importing it (~14 ms)."""
    module = sys.modules.get("bytecode")
    origin = getattr(module, "__file__", None) or importlib.util.find_spec("bytecode").origin
    version = Path(origin).with_name("version.py")
    return [str(version if version.is_file() else origin)]


def _tag(rewriter: str) -> str:
    """The Python build, the bytecode package and the code that rewrites (`rewriter`, inject.py, and this
    module): a change to any starts a new directory."""
    digest = hashlib.sha256(f"{FORMAT}|{sys.version}|{sys.implementation.cache_tag}".encode())
    for path in (rewriter, __file__, *_bytecode_files()):
        digest.update(Path(path).read_bytes())
    return f"{sys.implementation.cache_tag}-{digest.hexdigest()[:20]}"


def _key(code: types.CodeType, phases: frozenset[str]) -> str:
    digest = hashlib.sha256()
    for part in (code.co_filename, code.co_qualname, str(code.co_firstlineno), ",".join(sorted(phases))):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\x00")
    digest.update(code.co_code)
    return digest.hexdigest()[:32]


def bind(rewrite: types.CodeType, original: types.CodeType, probe: Callable[[str, Any], None]) -> types.CodeType:
    """`rewrite` with the probe in the placeholder's place and the original's own nested code objects."""
    nested = [c for c in original.co_consts if isinstance(c, types.CodeType)]
    consts = []
    for c in rewrite.co_consts:
        if type(c) is str and c == PLACEHOLDER:
            consts.append(probe)
        elif isinstance(c, types.CodeType):
            for i, o in enumerate(nested):
                if o == c and o.co_filename == c.co_filename:
                    consts.append(nested.pop(i))
                    break
            else:
                raise Miss(f"nested code {c.co_qualname} is not the original's")
        else:
            consts.append(c)
    return rewrite.replace(co_consts=tuple(consts))


def _fits(cached: types.CodeType, code: types.CodeType) -> bool:
    return cached == code and all(getattr(cached, a, None) == getattr(code, a, None) for a in _SAME)


class RewriteCache:
    """Rewrites by (code object, phases), on disk; `hits` and `misses` count this process's lookups."""

    def __init__(self, root: Path | None, rewriter: str) -> None:
        self.hits = 0
        self.misses = 0
        #: Whether this process has marked its directory used (or written to it, which does the same).
        self._marked = False
        self._dir: Path | None = None
        if root is not None:
            try:
                self._dir = Path(root) / "inject" / _tag(rewriter)
            except Exception:  # noqa: BLE001 - no bytecode package, an unreadable source: no cache
                self._dir = None

    @property
    def directory(self) -> Path | None:
        return self._dir

    def rewrite(self, code: types.CodeType, phases: frozenset[str], probe: Callable[[str, Any], None],
                make: Callable[[types.CodeType, Any, frozenset[str]], types.CodeType]) -> types.CodeType:
        """The rewrite of `code` with `probe` bound: from the cache when an entry fits, else made with `make`
        (``instrument``) and kept."""
        cacheable = self._dir is not None and not any(type(c) is str and c == PLACEHOLDER for c in code.co_consts)
        if not cacheable:
            return make(code, probe, phases)
        path = self._dir / f"{_key(code, phases)}.marshal"
        try:
            with open(path, "rb") as f:
                fmt, original, rewritten = marshal.load(f)
            if fmt != FORMAT or not _fits(original, code):
                raise Miss("a different code object")
            new = bind(rewritten, code, probe)
        except Exception:  # noqa: BLE001 - absent, unreadable, stale or foreign: rewrite it
            pass
        else:
            self.hits += 1
            self._mark_used()
            return new
        self.misses += 1
        rewritten = make(code, PLACEHOLDER, phases)
        self._store(path, code, rewritten)
        return bind(rewritten, code, probe)

    def _store(self, path: Path, code: types.CodeType, rewritten: types.CodeType) -> None:
        try:
            data = marshal.dumps((FORMAT, code, rewritten))
            new = not path.parent.is_dir()
            path.parent.mkdir(parents=True, exist_ok=True)
            files.replace_file(path, data)
        except Exception:  # noqa: BLE001 - a read-only or full cache: this run simply keeps its rewrite
            return
        self._marked = True  # writing the entry updated the directory's time
        if new:
            prune(path.parent.parent, keep=path.parent.name)

    def _mark_used(self) -> None:
        """Set the directory's modification time to now, where it is more than a day old (once a process)."""
        if self._marked or self._dir is None:
            return
        self._marked = True
        try:
            if time.time() - self._dir.stat().st_mtime > _MARK_EVERY:
                os.utime(self._dir)
        except OSError:
            pass


def prune(inject_dir: Path, keep: str) -> list[str]:
    """Remove the tag directories in `inject_dir` other than `keep` that no run used for `STALE_DAYS` days;
    their names. Nothing else is touched: a directory whose name is not a tag, or that holds anything but
    ``*.marshal`` entries (and the temporary files of an interrupted write), stays; an error skips it."""
    cutoff = time.time() - STALE_DAYS * 86_400
    removed = []
    try:
        candidates = [d for d in os.scandir(inject_dir) if d.name != keep and _TAG_DIR.match(d.name)]
    except OSError:
        return removed
    for d in candidates:
        try:
            if not d.is_dir(follow_symlinks=False) or d.stat(follow_symlinks=False).st_mtime > cutoff:
                continue
            entries = list(os.scandir(d.path))
            if not all(e.is_file(follow_symlinks=False) and (e.name.endswith(".marshal") or e.name.startswith(".prov-trace-"))
                       for e in entries):
                continue
            for e in entries:
                os.unlink(e.path)
            os.rmdir(d.path)
            removed.append(d.name)
        except OSError:
            continue
    return removed
