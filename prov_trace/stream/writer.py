"""Writes the trace stream: one msgpack object per record, flushed as written.

A record reaches the operating system as soon as it is written, so a crash or a
kill loses nothing that was already recorded; the reader reads a cut stream up
to its last whole record.

A forked child never writes into its parent's stream: the writer holds its lock
across ``fork`` (no record is half written when the child is made), and in the
child every writer inherited from the parent is detached, its copy of the file
closed. A deferred writer (``defer=True``, a followed child process) keeps its
records in memory until the first probe or error record, so a process that
never compiles leaves no file.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, BinaryIO

import msgpack

from prov_trace.stream import schema
from prov_trace.stream.packed import pack_record, skeleton, stream_packer


class StreamError(OSError):
    """The trace file could not be opened or written."""


#: Records up to this size cannot break a reader limit; bigger ones are checked against the limits.
_CHECK_ABOVE = 1024 * 1024
_UNPACK_LIMITS = {k: v for k, v in schema.READ_LIMITS.items() if k != "max_buffer_size"}


def _beyond_read_limits(record: dict[str, Any], data: bytes) -> str | None:
    """None when the reader will read this packed record, else why it would refuse it.

    A record's items kept packed (PackedList) are checked by their count, and each by
    unpacking only when it alone is over the size that could break a limit.
    """
    if len(data) <= _CHECK_ABOVE:
        return None
    if len(data) > schema.MAX_RECORD_BYTES:
        return f"record too large: {len(data)} bytes packed, over the {schema.MAX_RECORD_BYTES}-byte limit readers apply"
    bare, lists = skeleton(record)
    parts = [data] if not lists else [stream_packer().pack(bare)]
    for items in lists:
        if len(items) > _UNPACK_LIMITS["max_array_len"]:
            return f"record beyond the reader's limits ({len(data)} bytes packed): a list of {len(items)} items"
        parts += [item for item in items.packed_items() if len(item) > _CHECK_ABOVE]
    for part in parts:
        try:
            msgpack.unpackb(part, **schema.UNPACK_OPTIONS, **_UNPACK_LIMITS)
        except Exception as exc:  # noqa: BLE001
            return f"record beyond the reader's limits ({len(data)} bytes packed): {exc}"
    return None


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, (str, int)) else repr(type(value))


#: Record kinds that open a deferred writer's file: the process is compiling.
_OPENS_DEFERRED = (schema.PROBE, schema.ERROR)

#: Every writer of this process that may still write, for the fork handlers below.
_LIVE: "weakref.WeakSet[TraceWriter]" = weakref.WeakSet()


class TraceWriter:
    """Appends records to a trace file. Thread-safe; each record is flushed.

    With ``defer=True`` nothing touches the disk until the first probe or error record: the
    records before it (the header, hook statuses) are kept in memory and written first then,
    and a writer closed before that leaves no file (the directory is made when the file is).
    """

    def __init__(self, path: str | os.PathLike[str], *, defer: bool = False):
        self.path = os.fspath(path)
        #: Packed records waiting for a deferred writer's file; None once it is open (or never deferred).
        self._pending: list[bytes] | None = [] if defer else None
        self._file: BinaryIO | None = None
        #: Whether the file was created (at once, or for a deferred writer at its first probe record).
        self.opened = not defer
        if not defer:
            try:
                self._file = open(self.path, "wb")
            except OSError as exc:
                raise StreamError(f"cannot write the trace to {self.path}: {exc.strerror or exc}") from exc
        #: True in a forked child for a writer its parent opened: it writes nothing more.
        self.detached = False
        _LIVE.add(self)
        self._packer = stream_packer()
        self._lock = threading.Lock()
        self._seq = 0
        self._t0 = time.monotonic_ns()
        self.records_written = 0
        self.bytes_written = 0
        #: The first write error, if any; later records are dropped, never raised into the host.
        self.failure: str | None = None
        #: Records written as an error record instead (unpackable, or beyond what a reader accepts).
        self.replaced = 0

    def elapsed_ns(self) -> int:
        return time.monotonic_ns() - self._t0

    def write(self, kind: str, body: dict[str, Any]) -> int | None:
        """Write one record; returns its sequence number, or None if the stream has failed."""
        with self._lock:
            if (self._file is None and self._pending is None) or self.failure is not None:
                return None
            seq = self._seq
            record = {"kind": kind, "seq": seq, "t_ns": self.elapsed_ns(), **body}
            try:
                data = pack_record(self._packer, record)
                unreadable = _beyond_read_limits(record, data)
            except Exception as exc:  # unpackable payload: record why, keep the stream valid
                data, unreadable = None, f"record not serialisable: {type(exc).__name__}: {exc}"
            if unreadable is not None:
                self.replaced += 1
                # A record the reader would refuse would end the readable stream there; write why instead.
                data = self._packer.pack(
                    {"kind": schema.ERROR, "seq": seq, "t_ns": record["t_ns"],
                     "stage": _plain(body.get("stage")), "target": _plain(body.get("target")),
                     "phase": _plain(body.get("phase")), "call": _plain(body.get("call")),
                     "compile_id": _plain(body.get("compile_id")), "graph": _plain(body.get("graph")),
                     "error": {"type": "RecordError", "message": unreadable[:2000], "record_kind": kind}}
                )
            if self._pending is not None:  # deferred: kept until the process compiles
                if kind not in _OPENS_DEFERRED:
                    self._pending.append(data)
                    self._seq += 1
                    self.records_written += 1
                    self.bytes_written += len(data)
                    return seq
                if not self._open_deferred():
                    return None
            start = self.bytes_written
            try:
                self._file.write(data)
                self._file.flush()
            except OSError as exc:
                self.failure = f"writing the trace to {self.path} failed: {exc.strerror or exc}"
                return None
            except BaseException:
                # A signal handler's exception (Ctrl-C, SIGTERM) in the middle of a large write: cut the
                # part of this record that reached the file, so the records after it stay readable.
                self._drop_partial(start)
                raise
            self._seq += 1
            self.records_written += 1
            self.bytes_written += len(data)
            return seq

    def _open_deferred(self) -> bool:
        """Open a deferred writer's file and write what it kept; False (and ``failure``) when it can't."""
        try:
            directory = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(directory, exist_ok=True)
            self._file = open(self.path, "wb")
            self.opened = True
            for data in self._pending or ():
                self._file.write(data)
            self._file.flush()
        except OSError as exc:
            self.failure = f"cannot write the trace to {self.path}: {exc.strerror or exc}"
            self._file = None
            return False
        finally:
            self._pending = None
        return True

    def idle(self, timeout: float = 0.5) -> bool:
        """True when no record is being written, or the one being written was finished within `timeout`.

        False when the write in progress belongs to the calling thread itself (a signal handler that
        interrupted it): writing from there would deadlock, so the caller writes nothing.
        """
        if not self._lock.acquire(timeout=timeout):
            return False
        self._lock.release()
        return True

    def _drop_partial(self, start: int) -> None:
        try:
            self._file.seek(start)
            self._file.truncate()
        except Exception as exc:  # noqa: BLE001
            self.failure = f"writing the trace to {self.path} was interrupted mid-record and could not be repaired: {exc}"

    def close(self) -> None:
        with self._lock:
            self._pending = None  # a deferred writer that never opened leaves no file
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as exc:
                    self.failure = self.failure or f"closing {self.path} failed: {exc}"
                self._file = None
        _LIVE.discard(self)

    def _detach_in_child(self) -> None:
        """In a forked child: drop the parent's file (this process's copy of it) and write nothing more."""
        self._lock = threading.Lock()
        self._pending = None
        self.detached = True
        f, self._file = self._file, None
        if f is None:
            return
        try:
            # This process's copy of the descriptor is pointed at /dev/null before the file object is closed,
            # so nothing left in its buffer can reach the parent's file from here.
            null = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(null, f.fileno())
            finally:
                os.close(null)
            f.close()
        except (OSError, ValueError):
            pass


#: The writers whose locks are held across a fork.
_HELD: list[TraceWriter] = []


def _before_fork() -> None:
    for w in list(_LIVE):
        w._lock.acquire()
        _HELD.append(w)


def _after_fork_in_parent() -> None:
    while _HELD:
        _HELD.pop()._lock.release()


def _after_fork_in_child() -> None:
    for w in list(_LIVE):
        w._detach_in_child()
    _LIVE.clear()
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
