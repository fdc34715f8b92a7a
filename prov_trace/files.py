"""The files a run writes besides the stream: checked before anything runs, replaced in one step.

A report is written to a temporary file beside its target and renamed over it,
so a reader never sees half a report and a failure leaves the old one intact.
An output that is not a regular file is never replaced: a FIFO or a character
device (``/dev/null``, a terminal) is written through, as ``open()`` would, and so
is a symlink into ``/proc/*/fd`` (``/dev/stdout``); a symlink to a regular file is
kept, and the file it points to is replaced; a block device or a socket is refused.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from prov_trace.errors import UsageError
from prov_trace.signals import SigtermUnwinds

#: Where prov-trace keeps what it builds once and reuses (the Spyre stand-in's device library, inject's
#: rewritten code): $PROV_TRACE_CACHE_DIR, else $XDG_CACHE_HOME/prov-trace, else ~/.cache/prov-trace.
CACHE_ENV = "PROV_TRACE_CACHE_DIR"


def cache_root() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "prov-trace"

#: A directory of a process's open files: a symlink in it names an open file, not a place to rename into.
_FD_DIR = re.compile(r"^/proc/[^/]+/fd$|^/dev/fd$")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def _via_open_file_link(path: str) -> bool:
    """Whether `path` is, or leads through symlinks to, an entry of /proc/*/fd (what /dev/stdout is)."""
    p = path
    for _ in range(40):
        if _FD_DIR.match(os.path.realpath(os.path.dirname(os.path.abspath(p)))):
            return True
        try:
            target = os.readlink(p)
        except OSError:
            return False
        p = os.path.join(os.path.dirname(os.path.abspath(p)), target)
    return False


def output_kind(path: str) -> str:
    """How an output at `path` is written: ``new`` (nothing there yet), ``regular`` (replaced in one step),
    ``through`` (written through: a FIFO, a character device, an open file of /proc/*/fd), or the name of
    what is there and cannot be written (``a directory``, ``a block device``, ``a socket``)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "new"
    except OSError:
        return "new"  # let the write itself say what is wrong
    if stat.S_ISDIR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISSOCK(st.st_mode):
        return _kind(st.st_mode)
    if stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode) or _via_open_file_link(path):
        return "through"
    return "regular" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode)


def describe(path: str) -> str:
    """What is at `path`, in words (``a FIFO``, ``a character device``...), following symlinks."""
    try:
        return _kind(os.stat(path).st_mode)
    except OSError:
        return "missing"


def check_writable(path: str, what: str) -> None:
    """Raise UsageError, before anything runs, when `path` can't be written."""
    if not path:
        raise UsageError(f"the {what} path is empty: give a file name")
    kind = output_kind(path)
    if kind == "a directory":
        raise UsageError(f"the {what} path {path} is a directory: give a file name")
    if kind in ("a block device", "a socket"):
        raise UsageError(f"the {what} path {path} is {kind}: give a regular file, a FIFO or a character device")
    if kind == "through":
        if not os.access(path, os.W_OK):
            raise UsageError(f"cannot write the {what} to {path}: it is {describe(path)} that is not writable")
        return
    target = os.path.realpath(path)  # a symlink stays; the file it names is written
    directory = os.path.dirname(target) or "."
    if not os.path.isdir(directory):
        raise UsageError(f"cannot write the {what} to {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"cannot write the {what} to {path}: the directory {directory} is not writable")


def write_atomic(path: str, text: str) -> None:
    """Replace `path` with `text` in one step: write a temp file beside it, then rename.

    A FIFO, a character device or /dev/stdout is written through instead (appending, for an open file that
    is a regular file, as a shell's ``>>`` would keep what is there); a symlink to a file is kept.
    A SIGTERM in the middle removes the temporary file before the process ends.
    """
    kind = output_kind(path)
    if kind == "through":
        mode = "a" if describe(path) == "a regular file" else "w"
        with open(path, mode, encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        return
    if kind not in ("new", "regular"):
        raise IsADirectoryError(21, f"it is {kind}") if kind == "a directory" else OSError(f"it is {kind}")
    with SigtermUnwinds():
        replace_file(os.path.realpath(path), text.encode("utf-8", "surrogateescape"), as_open=True)


def replace_file(target: str | os.PathLike[str], data: bytes, *, as_open: bool = False) -> None:
    """Write `data` to a temporary file beside `target` and rename it over `target`: a reader sees the old
    file or the new one, never half of one; on any failure the temporary file is removed. `as_open` gives
    the file the mode a plain open() would (0666 less the umask), not mkstemp's 0600."""
    fd, tmp = tempfile.mkstemp(prefix=".prov-trace-", suffix=".tmp", dir=os.path.dirname(target) or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if as_open:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_output(path: str, text: str, what: str) -> None:
    """`write_atomic`, with a failure (a full disk, a read-only directory) as a UsageError in one sentence."""
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise UsageError(f"could not write the {what} to {path}: {exc.strerror or exc}; "
                         f"{'the file there is unchanged' if os.path.exists(path) else 'nothing was written'}") from None


def refuse_inputs_as_outputs(outputs: list[tuple[str, str]], inputs: list[tuple[str, str]]) -> None:
    """UsageError when an output (what, path) is one of the run's inputs (what, path): it would be overwritten."""
    for out_what, out in outputs:
        for in_what, src in inputs:
            if src and os.path.exists(src) and same_file(out, src):
                raise UsageError(f"the {out_what} would overwrite the {in_what} {src}, an input of this run: "
                                 f"give the {out_what} another path")


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
