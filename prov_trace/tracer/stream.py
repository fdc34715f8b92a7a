"""Writes the trace stream: one msgpack object per record, flushed as written.

A record reaches the operating system as soon as it is written, so a crash or a
kill loses nothing that was already recorded; the reader reads a cut stream up
to its last whole record.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, BinaryIO

import msgpack

from prov_trace import schema
from prov_trace.packed import pack_record, skeleton, stream_packer


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


class TraceWriter:
    """Appends records to a trace file. Thread-safe; each record is flushed."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        try:
            self._file: BinaryIO | None = open(self.path, "wb")
        except OSError as exc:
            raise StreamError(f"cannot write the trace to {self.path}: {exc.strerror or exc}") from exc
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
            if self._file is None or self.failure is not None:
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

    def _drop_partial(self, start: int) -> None:
        try:
            self._file.seek(start)
            self._file.truncate()
        except Exception as exc:  # noqa: BLE001
            self.failure = f"writing the trace to {self.path} was interrupted mid-record and could not be repaired: {exc}"

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as exc:
                    self.failure = self.failure or f"closing {self.path} failed: {exc}"
                self._file = None
