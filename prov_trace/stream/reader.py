"""Read a trace stream back, with explicit size limits, up to its last whole record.

Never imports torch. A stream cut short (a crash, a kill) reads up to its last
whole record and says where it stopped; anything that is not a prov-trace
stream gets one sentence, raised as TraceReadError.
"""

from __future__ import annotations

import os
import reprlib
import stat
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgpack

from prov_trace.errors import UsageError
from prov_trace.stream import conform, schema



class TraceReadError(UsageError):
    """The file can't be read as a trace; the message is one sentence for the user."""


@dataclass
class Trace:
    path: str
    size: int
    header: dict[str, Any]
    records: list[dict[str, Any]] = field(default_factory=list)
    end: dict[str, Any] | None = None
    #: None for a whole stream; else a sentence such as "incomplete at byte 1234".
    problem: str | None = None
    #: Values that did not have their documented type and were replaced by an empty one (report/conform.py).
    repaired: int = 0
    #: Records of kinds this reader does not know, skipped, by kind (only in a stream of a newer minor version).
    unknown_kinds: dict[str, int] = field(default_factory=dict)
    #: Bytes after the end record, not read (a file of known size only: another trace appended to this one).
    trailing: int = 0

    @property
    def complete(self) -> bool:
        return self.problem is None and self.end is not None

    def hooks(self) -> list[dict[str, Any]]:
        """The last status of each hook (a stream cut short still has the resolution-time status)."""
        last: dict[tuple, dict[str, Any]] = {}
        for r in self.records:
            if r.get("kind") == schema.HOOK:
                last[(r.get("target"), r.get("stage"), r.get("event"))] = r
        return list(last.values())

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r.get("kind") == kind]


def read_trace(path: str | os.PathLike[str]) -> Trace:
    path = os.fspath(path)
    try:
        size = os.path.getsize(path)
        f = open(path, "rb")
    except FileNotFoundError:
        if path == "-":
            raise TraceReadError("there is no file -: to read a trace from standard input, give /dev/stdin") from None
        raise TraceReadError(f"there is no file {path}: give the path of a trace written by 'prov-trace run'") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path} is a directory: give the path of a trace file") from None
    except OSError as exc:
        raise TraceReadError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        try:
            regular = stat.S_ISREG(os.fstat(f.fileno()).st_mode)
        except OSError:
            regular = True
        # A pipe (`cat t.msgpack | prov-trace report /dev/stdin`) has no size: read it as it comes.
        return read_stream(f, size if regular else None, path)


class _Counted:
    """A stream of unknown length (a pipe, a device) read through, counting the bytes it gave."""

    def __init__(self, f: BinaryIO):
        self._f = f
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self._f.read(n)
        self.count += len(data)
        return data


def read_stream(f: BinaryIO, size: int | None, path: str = "<stream>") -> Trace:
    """Read a trace from an open binary file of `size` bytes (None: a pipe or other stream, read as it comes).

    A stream of unknown length is read a chunk at a time and only as far as its records go, so one that is
    not a trace (``/dev/zero``, a log piped in by mistake) is refused after its first bytes, not read whole."""
    counted = None
    if size is None:
        f = counted = _Counted(f)  # type: ignore[assignment]
    elif size == 0:
        raise TraceReadError(f"{path} is empty: it is not a prov-trace trace (was the run killed before it started?)")
    unpacker = msgpack.Unpacker(f, read_size=1024 * 1024, **schema.UNPACK_OPTIONS, **schema.READ_LIMITS)
    records: list[dict[str, Any]] = []
    unknown: dict[str, int] = {}
    newer = False
    problem = None
    def of_size() -> str:  # a stream of unknown length: what was read of it so far
        return f"of {size}" if counted is None else f"of the {counted.count} read"

    while True:
        offset = unpacker.tell()
        try:
            obj = unpacker.unpack()
        except msgpack.OutOfData:
            if counted is not None:
                size = counted.count
                if size == 0:
                    raise TraceReadError(f"{path} is empty: it is not a prov-trace trace (was the run killed before "
                                         "it started?)") from None
            if offset < size:
                problem = f"incomplete at byte {offset} of {size}: the stream was cut short"
            break
        except (ValueError, msgpack.FormatError, msgpack.StackError, msgpack.ExtraData,
                msgpack.BufferFull, UnicodeDecodeError, TypeError, OverflowError, MemoryError):
            problem = f"incomplete at byte {offset} {of_size()}: the bytes there are not a whole record"
            break
        if not records:
            _check_header(path, obj)
            newer = tuple(obj["version"]) > schema.SCHEMA_VERSION
        elif not isinstance(obj, dict) or obj.get("kind") not in schema.RECORD_KINDS:
            if newer and isinstance(obj, dict) and isinstance(obj.get("kind"), str):
                # A newer minor version may add record kinds: skip them, counted, and read on.
                unknown[obj["kind"]] = unknown.get(obj["kind"], 0) + 1
                continue
            problem = f"incomplete at byte {offset} {of_size()}: the record there is not a prov-trace record"
            break
        records.append(obj)
        if obj.get("kind") == schema.END:
            break
    trailing = size - unpacker.tell() if counted is None and records and records[-1].get("kind") == schema.END else 0
    if counted is not None:
        size = counted.count
    if not records:
        raise TraceReadError(f"{path} is not a prov-trace trace: it holds no whole record")
    repaired = 0
    for i, rec in enumerate(records):
        records[i], n = conform.record(rec)
        repaired += n
    header = records[0]
    body = records[1:]
    end = body[-1] if body and body[-1].get("kind") == schema.END else None
    if end is None and problem is None:
        problem = f"incomplete at byte {size} of {size}: the stream has no end record (the run did not finish)"
    return Trace(path=path, size=size, header=header, records=body, end=end, problem=problem, repaired=repaired,
                 unknown_kinds=unknown, trailing=max(trailing, 0))


#: The suffixes of prov-trace's reports (report/formats.py): a file with one given where a trace belongs.
_REPORT_SUFFIXES = {".md": "Markdown", ".html": "HTML", ".htm": "HTML", ".json": "JSON"}


def _check_header(path: str, obj: Any) -> None:
    if not isinstance(obj, dict) or obj.get("kind") != schema.HEADER or obj.get("schema") != schema.SCHEMA_NAME:
        kind = _REPORT_SUFFIXES.get(os.path.splitext(str(path))[1].lower())
        hint = (f"; its name is a {kind} report's: give the trace a report was built from (`prov-trace run -o`, "
                "prov-trace.msgpack by default)" if kind else "")
        raise TraceReadError(f"{path} is not a prov-trace trace: it does not start with a prov-trace header record{hint}")
    version = obj.get("version")
    if not (isinstance(version, list) and len(version) == 2 and all(type(v) is int and v >= 0 for v in version)):
        raise TraceReadError(f"{path} has a malformed header: its schema version is {reprlib.repr(version)}, "
                             "not [major, minor]")
    if version[0] < schema.SCHEMA_VERSION[0]:
        raise TraceReadError(
            f"{path} was written with trace schema {version[0]}.{version[1]}, older than this prov-trace reads "
            f"({schema.SCHEMA_VERSION[0]}.x): trace the run again with this prov-trace"
        )
    if version[0] > schema.SCHEMA_VERSION[0]:
        raise TraceReadError(
            f"{path} was written with trace schema {version[0]}.{version[1]}, newer than this prov-trace reads "
            f"({schema.SCHEMA_VERSION[0]}.x): upgrade prov-trace to read it"
        )
