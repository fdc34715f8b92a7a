"""Reliability, part 2: the trace file is never lost or misread (docs/reliability.md).

Bad input files, partial traces and a missing output directory are covered in
tests/test_stream.py and tests/test_cli.py; this file adds unwritable outputs, a
full disk, atomic replacement, signals in the middle of a write, and records a
reader would refuse.
"""

from __future__ import annotations

import errno
import io
import os
import textwrap

import msgpack
import pytest
from click.testing import CliRunner

import reliability_support as rs
from prov_trace import cli, files
from prov_trace.stream import schema
from prov_trace.stream.reader import TraceReadError, read_stream, read_trace
from prov_trace.stream import writer as stream
from prov_trace.stream.writer import TraceWriter

SCRIPT = textwrap.dedent("""
    import sys
    open("ran", "w").write("yes")
    print("program ran to its end")
    sys.exit(3)
""")


def _script(tmp_path):
    p = tmp_path / "prog.py"
    p.write_text(SCRIPT)
    return p


def _small_trace(path):
    return rs.write_trace(path, [(schema.PROBE, {"stage": "source", "target": "m:f", "phase": "entry", "call": 1,
                                                  "compile_id": "0/0", "graph": None, "thread": {"id": 1, "name": "t"},
                                                  "payload": {"file": "/m.py", "qualname": "f", "user": True,
                                                              "lines": [{"line": 1, "text": "x = 1"}]}}),
                                 (schema.END, {"outcome": "ok", "detail": None})])


# --- unwritable outputs --------------------------------------------------------------------------------


def test_unwritable_trace_directory_is_refused_before_running(tmp_path):
    script = _script(tmp_path)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.access(ro, os.W_OK):
            # Running as root: mode bits don't stop writes. Inject the error open() would give instead.
            patch = ("import errno, builtins\nfrom prov_trace.stream import writer as stream\n"
                     "def _open(*a, **k):\n    raise PermissionError(errno.EACCES, 'Permission denied')\n"
                     "stream.open = _open\n")
            proc = rs.prov_trace_with(patch, ["run", "-o", str(ro / "t.msgpack"), "--report", str(tmp_path / "r.md"),
                                              str(script)], tmp_path)
            needle = "cannot write the trace to"
        else:
            proc = rs.prov_trace_with("", ["run", "-o", str(ro / "t.msgpack"), str(script)], tmp_path)
            needle = "is not writable"
    finally:
        ro.chmod(0o700)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "ran").exists()


FULL_DISK = textwrap.dedent("""
    import errno
    from prov_trace import cli
    from prov_trace.stream import writer as stream

    class _FullDisk:
        # The disk fills after a few records: every later write fails with ENOSPC.
        def __init__(self, f, room):
            self.f, self.room = f, room
        def write(self, data):
            self.room -= 1
            if self.room < 0:
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)
        def __getattr__(self, name):
            return getattr(self.f, name)

    _init = stream.TraceWriter.__init__
    def __init__(self, path, **options):
        _init(self, path, **options)
        if self._file is not None:
            self._file = _FullDisk(self._file, ROOM)
    stream.TraceWriter.__init__ = __init__
""")


@pytest.mark.parametrize("room", [0, 3])
def test_full_disk_warns_and_the_program_runs_to_its_own_exit(tmp_path, room):
    script = _script(tmp_path)
    trace, report = tmp_path / "t.msgpack", tmp_path / "r.md"
    proc = rs.prov_trace_with(FULL_DISK.replace("ROOM", str(room)),
                              ["run", "-o", str(trace), "--report", str(report), str(script)], tmp_path)
    assert proc.returncode == 3, proc.stderr  # the program's own status
    assert "program ran to its end" in proc.stdout and (tmp_path / "ran").read_text() == "yes"
    assert "Traceback" not in proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if "warning:" in ln]
    assert len(warning) == 1 and "No space left on device" in warning[0], proc.stderr
    assert "the trace holds what was written before that" in warning[0]
    if room == 0:
        # Not even the header: there is no trace to report on, and it says so.
        with pytest.raises(TraceReadError, match="is empty"):
            read_trace(trace)
        assert "no report:" in proc.stderr and not report.exists()
    else:
        t = read_trace(trace)
        assert len(t.records) + 1 == room and not t.complete
        assert "**Partial trace.**" in report.read_text()


def test_full_disk_for_the_report_keeps_the_programs_exit(tmp_path):
    script = _script(tmp_path)
    patch = ("import errno\nfrom prov_trace import files\n"
             "def _full(path, text):\n    raise OSError(errno.ENOSPC, 'No space left on device')\n"
             "files.write_atomic = _full\n")
    proc = rs.prov_trace_with(patch, ["run", "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "r.md"),
                                      str(script)], tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert "could not write the report to" in proc.stderr and "No space left on device" in proc.stderr
    assert read_trace(tmp_path / "t.msgpack").complete


# --- atomic replacement --------------------------------------------------------------------------------


class _FailsHalfway:
    """A text file whose write gets half the text out, then fails like a full disk."""

    def __init__(self, f):
        self.f = f

    def write(self, text):
        self.f.write(text[: len(text) // 2])
        self.f.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.f.close()


def test_a_failure_mid_write_leaves_the_old_report_intact(tmp_path, monkeypatch):
    report = tmp_path / "r.md"
    report.write_text("the old report\n")
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FailsHalfway(real_fdopen(fd, *a, **k)))
    with pytest.raises(OSError):
        files.write_atomic(str(report), "the new report\n" * 1000)
    assert report.read_text() == "the old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]  # no temp file left behind


def test_a_failed_rename_leaves_the_old_report_intact(tmp_path, monkeypatch):
    report = tmp_path / "r.md"
    report.write_text("the old report\n")

    def no_rename(a, b):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", no_rename)
    with pytest.raises(OSError):
        files.write_atomic(str(report), "new")
    assert report.read_text() == "the old report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.md"]


def test_report_command_that_cannot_write_says_so_in_one_sentence(tmp_path, monkeypatch):
    trace = _small_trace(tmp_path / "t.msgpack")
    report = tmp_path / "r.md"
    report.write_text("the old report\n")
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda fd, *a, **k: _FailsHalfway(real_fdopen(fd, *a, **k)))
    result = CliRunner().invoke(cli.cli, ["report", str(trace), "-o", str(report)])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("prov-trace: error:")]
    assert len(errors) == 1, result.stderr
    assert "could not write the report to" in errors[0] and "No space left on device" in errors[0]
    assert "the file there is unchanged" in errors[0]
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert report.read_text() == "the old report\n"


# --- the writer ------------------------------------------------------------------------------------


class _InterruptedMidRecord:
    """A file whose next write gets half the bytes out, then a signal handler's exception arrives."""

    def __init__(self, f):
        self.f = f
        self.armed = False

    def write(self, data):
        if self.armed:
            self.armed = False
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise KeyboardInterrupt
        return self.f.write(data)

    def __getattr__(self, name):
        return getattr(self.f, name)


def test_a_signal_mid_record_leaves_the_stream_whole(tmp_path):
    path = tmp_path / "t.msgpack"
    w = TraceWriter(path)
    w._file = _InterruptedMidRecord(w._file)
    w.write(schema.HEADER, {"schema": schema.SCHEMA_NAME, "version": list(schema.SCHEMA_VERSION)})
    w.write(schema.PROBE, {"stage": "a", "payload": {"n": 1}})
    w._file.armed = True
    with pytest.raises(KeyboardInterrupt):
        w.write(schema.PROBE, {"stage": "b", "payload": {"text": "x" * 10_000}})
    w.write(schema.END, {"outcome": "interrupted", "detail": "KeyboardInterrupt"})
    w.close()
    t = read_trace(path)
    assert t.complete, t.problem
    assert [r.get("stage") for r in t.records] == ["a", None] and t.end["outcome"] == "interrupted"


def test_records_a_reader_would_refuse_are_written_as_error_records(tmp_path, monkeypatch):
    path = tmp_path / "t.msgpack"
    w = TraceWriter(path)
    w.write(schema.HEADER, {"schema": schema.SCHEMA_NAME, "version": list(schema.SCHEMA_VERSION)})
    w.write(schema.PROBE, {"stage": "many", "target": "m:f", "payload": {"zeros": [0] * 5_000_000}})
    w.write(schema.PROBE, {"stage": "wide", "target": "m:f", "payload": {str(i): 0 for i in range(1_100_000)}})
    monkeypatch.setattr(schema, "MAX_RECORD_BYTES", 2 * 1024 * 1024)
    w.write(schema.PROBE, {"stage": "big", "target": "m:f", "payload": "x" * 3 * 1024 * 1024})
    w.write(schema.PROBE, {"stage": "fine", "target": "m:f", "payload": {"ok": True}})
    w.write(schema.END, {"outcome": "ok"})
    w.close()
    assert w.replaced == 3
    monkeypatch.undo()
    t = read_trace(path)
    assert t.complete, t.problem
    kinds = [(r["kind"], r.get("stage")) for r in t.records]
    assert kinds == [("error", "many"), ("error", "wide"), ("error", "big"), ("probe", "fine"), ("end", None)]
    assert "max_array_len" in t.records[0]["error"]["message"]
    assert "max_map_len" in t.records[1]["error"]["message"]
    assert "record too large" in t.records[2]["error"]["message"]


# --- the reader's size limits ------------------------------------------------------------------------

_HEADER = msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": "prov-trace",
                         "version": list(schema.SCHEMA_VERSION)})
_PROBE_OPEN = (b"\x85" + msgpack.packb("kind") + msgpack.packb("probe") + msgpack.packb("seq") + msgpack.packb(1)
               + msgpack.packb("t_ns") + msgpack.packb(0) + msgpack.packb("stage") + msgpack.packb("s")
               + msgpack.packb("payload"))


@pytest.mark.parametrize("name,body", [
    ("map32 of 4G entries", b"\xdf\xff\xff\xff\xff" + b"\x00" * 64),
    ("array32 of 4G items", b"\xdd\xff\xff\xff\xff" + b"\x00" * 64),
    ("bin32 of 4 GiB", b"\xc6\xff\xff\xff\xff" + b"\x00" * 64),
    ("ext32 of 4 GiB", b"\xc9\xff\xff\xff\xff\x01" + b"\x00" * 64),
    ("a payload map32 of 4G entries", _PROBE_OPEN + b"\xdf\xff\xff\xff\xff" + b"\x00" * 64),
    ("a payload array32 of 4G items", _PROBE_OPEN + b"\xdd\xff\xff\xff\xff" + b"\x00" * 64),
    ("100,000 nested arrays", b"\x91" * 100_000 + b"\x00"),
])
def test_a_huge_declared_length_is_refused_without_allocating(name, body):
    good = msgpack.packb({"kind": "note", "seq": 1, "t_ns": 0, "text": "before"})
    data = _HEADER + good + body
    t = read_stream(io.BytesIO(data), len(data))
    assert [r["kind"] for r in t.records] == ["note"]
    assert t.problem == f"incomplete at byte {len(_HEADER) + len(good)} of {len(data)}: the bytes there are not a whole record" \
        or t.problem.startswith(f"incomplete at byte {len(_HEADER) + len(good)} of {len(data)}"), t.problem


def test_records_of_the_wrong_shape_are_read_as_empty_and_counted(tmp_path):
    """Bytes that decode but break the documented shape (a changed file, another tool): a report, not a crash."""
    path = rs.write_trace(tmp_path / "t.msgpack", [
        (schema.PROBE, {"stage": "post_grad", "target": "m:f", "phase": "return", "call": 1, "compile_id": "0/0",
                        "graph": "inference", "thread": {"id": 1, "name": "t"},
                        "payload": {"nodes": [{"name": ["not", "a", "name"], "op": "call_function", "inputs": 5,
                                               "fields": {"stack_trace": 7}}, "junk", None]}}),
        (schema.HOOK, {"target": "m:f", "stage": "post_grad", "event": "return", "fired": "many", "notes": "x"}),
        (schema.END, {"outcome": "ok", "detail": None})])
    t = read_trace(path)
    assert t.complete and t.repaired == 6
    node = t.records[0]["payload"]["nodes"]
    assert node == [{"name": None, "op": "call_function", "inputs": [], "fields": {}}]
    result = CliRunner().invoke(cli.cli, ["report", str(path), "-o", str(tmp_path / "r.md")])
    assert result.exit_code == 0, result.output
    assert "**Malformed records.** 6 values" in (tmp_path / "r.md").read_text()
