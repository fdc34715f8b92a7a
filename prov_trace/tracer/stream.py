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


class StreamError(OSError):
    """The trace file could not be opened or written."""


class TraceWriter:
    """Appends records to a trace file. Thread-safe; each record is flushed."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        try:
            self._file: BinaryIO | None = open(self.path, "wb")
        except OSError as exc:
            raise StreamError(f"cannot write the trace to {self.path}: {exc.strerror or exc}") from exc
        self._packer = msgpack.Packer(use_bin_type=True, unicode_errors="surrogateescape")
        self._lock = threading.Lock()
        self._seq = 0
        self._t0 = time.monotonic_ns()
        self.records_written = 0
        self.bytes_written = 0
        #: The first write error, if any; later records are dropped, never raised into the host.
        self.failure: str | None = None

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
                data = self._packer.pack(record)
            except Exception as exc:  # unpackable payload: record why, keep the stream valid
                data = self._packer.pack(
                    {"kind": schema.ERROR, "seq": seq, "t_ns": record["t_ns"],
                     "stage": body.get("stage"), "target": body.get("target"),
                     "phase": body.get("phase"),
                     "error": {"type": type(exc).__name__, "message": f"record not serialisable: {exc}"}}
                )
            try:
                self._file.write(data)
                self._file.flush()
            except OSError as exc:
                self.failure = f"writing the trace to {self.path} failed: {exc.strerror or exc}"
                return None
            self._seq += 1
            self.records_written += 1
            self.bytes_written += len(data)
            return seq

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError as exc:
                    self.failure = self.failure or f"closing {self.path} failed: {exc}"
                self._file = None
