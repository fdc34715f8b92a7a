"""Reliability, round two: traces and inputs that crashed or misled the reader, the report and check.

docs/reliability.md, "The trace file is never lost or misread" and "Hostile content".
Every trace here is synthetic (written with the real writer), so no test compiles.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import pytest

import reliability_support as rs
from conftest import cli
from prov_trace.report import html, jsonout, markdown
from prov_trace.report.model import build
from prov_trace.stream import schema
from prov_trace.stream.reader import TraceReadError, read_stream, read_trace

BASE = {"target": "m:f", "call": 1, "compile_id": "0/0", "thread": {"id": 1, "name": "t"}}


def _post_grad(n: int = 2, stack: bool = True) -> tuple[str, dict]:
    nodes = [{"name": f"n{i}", "op": "call_function", "target": "aten.add", "inputs": [],
              "fields": {"stack_trace": {"has": stack, "populated": stack, "type": "str",
                                         "value": 'File "/m.py", line 3, in forward\n    x = x + 1' if stack else None}},
              "source": {"file": "/m.py", "line": 3, "text": "x = x + 1"} if stack else None} for i in range(n)]
    return (schema.PROBE, {**BASE, "stage": "post_grad", "phase": "return", "graph": "inference",
                           "payload": {"graph_id": 1, "node_count": n, "nodes": nodes}})


def _all_outputs_build(path: Path, tmp_path: Path) -> None:
    """report in every format, diff and check: each exits 0 or 1 (a rule), never a traceback."""
    for fmt in ("md", "html", "json"):
        proc = cli("report", str(path), "-o", str(tmp_path / f"r.{fmt}"), cwd=tmp_path, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (fmt, proc.stderr[-3000:])
    proc = cli("diff", str(path), str(path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    proc = cli("check", str(path), "--require", "*:stack_trace>=0", cwd=tmp_path, timeout=300)
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-3000:]


# --- 9. a rule that checks nothing ---------------------------------------------------------------------


def test_a_rule_on_a_field_measured_nowhere_fails(tmp_path):
    """Stock kernels and emitted files have no debug_handle (torch-spyre's have): no cell measures it."""
    kernel = (schema.PROBE, {**BASE, "stage": "kernel_spec", "phase": "return", "graph": "inference",
                             "payload": {"kernel": "k0", "kind": "generated", "snodes": ["op0"], "ops": [],
                                         "origins": ["n0"], "metadata": "", "detailed": ""}})
    artifact = (schema.PROBE, {**BASE, "stage": "artifact", "phase": "return", "graph": "inference",
                               "payload": {"path": "/tmp/k.py", "bytes": 1, "kernels": [
                                   {"kernel": "k0", "kind": "generated", "def_line": 1, "calls": [], "comments": [],
                                    "provenance_comments": []}]}})
    records = [_post_grad(), kernel, artifact, (schema.END, {"outcome": "ok"})]
    # With a profile that has no debug_handle, the rule is refused as bad input, in one sentence.
    path = rs.write_trace(tmp_path / "cpu.msgpack", records)
    cpu = cli("check", str(path), "--require", "*:debug_handle=all", cwd=tmp_path, timeout=300)
    assert cpu.returncode == 2 and "measured only with the spyre profile" in cpu.stderr, cpu.stderr
    # With the spyre profile the row is there, but no object of this trace has the slot: it fails.
    path = rs.write_trace(tmp_path / "t.msgpack", records, header={"profile": "spyre"})
    proc = cli("check", str(path), "--require", "*:debug_handle=all", cwd=tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  *:debug_handle=all" in proc.stdout
    assert "debug_handle is measured at no stage of this trace" in proc.stdout, proc.stdout
    assert "(0 cells)" not in proc.stdout
    ok = cli("check", str(path), "--require", "post_grad:stack_trace=all", cwd=tmp_path, timeout=300)
    assert ok.returncode == 0 and "ok    post_grad:stack_trace=all  (1 cell)" in ok.stdout, ok.stdout


# --- 10. records that decode but break the format ---------------------------------------------------------


def _deep(levels: int):
    value: object = 0
    for _ in range(levels):
        value = [value]
    return value


def _from_node_chain(levels: int) -> list:
    chain: list = []
    for i in range(levels):
        chain = [{"name": f"a{i}", "graph_id": 1, "from_node": chain}]
    return chain


CRAFTED = {
    "note with a list stage": [(schema.NOTE, {"stage": ["a", "b"], "text": "x"}), (schema.END, {"outcome": "ok"})],
    "end with a dict stage": [_post_grad(), (schema.END, {"outcome": "ok", "stage": {"a": 1}})],
    "hook with a list stage": [(schema.HOOK, {"target": "m:f", "stage": [1], "event": "entry"}), (schema.END, {"outcome": "ok"})],
    "user argument whose type is a list": [
        (schema.PROBE, {**BASE, "stage": "user.s", "phase": "return", "graph": None,
                        "payload": {"args": {"x": {"type": ["a", "b"], "populated": True, "kind": {"k": 1},
                                                   "value": 1}}, "return": {"type": {"t": 1}, "populated": True}}}),
        (schema.END, {"outcome": "ok"})],
    "a user payload nested 990 deep": [
        (schema.PROBE, {**BASE, "stage": "user.s", "phase": "return", "graph": None,
                        "payload": {"args": {"x": {"type": "list", "populated": True, "kind": "generic",
                                                   "value": _deep(990)}}}}),
        (schema.END, {"outcome": "ok"})],
    "a from_node chain 980 deep": [
        (schema.PROBE, {**BASE, "stage": "post_grad", "phase": "return", "graph": "inference",
                        "payload": {"nodes": [{"name": "n", "op": "call_function", "fields": {
                            "from_node": {"has": True, "populated": True, "type": "list",
                                          "value": _from_node_chain(490)}}}]}}),
        (schema.END, {"outcome": "ok"})],
    "a header and an end nested 990 deep": [_post_grad(), (schema.END, {"outcome": "ok", "extra": _deep(990)})],
}


@pytest.mark.parametrize("case", list(CRAFTED))
def test_crafted_records_do_not_crash_report_diff_or_check(tmp_path, case):
    header = {"deep": _deep(990)} if "header" in case else None
    path = rs.write_trace(tmp_path / "t.msgpack", CRAFTED[case], header=header)
    _all_outputs_build(path, tmp_path)


# --- 11. forward compatibility ---------------------------------------------------------------------------


def test_a_newer_minor_version_skips_and_counts_unknown_record_kinds(tmp_path):
    minor = schema.SCHEMA_VERSION[1] + 1
    path = rs.write_trace(tmp_path / "t.msgpack", [
        ("widget", {"stage": "post_grad", "anything": [1, 2]}), _post_grad(),
        ("widget", {}), ("gadget", {"x": 1}), (schema.END, {"outcome": "ok"})],
        header={"version": [schema.SCHEMA_VERSION[0], minor]})
    t = read_trace(path)
    assert t.complete and t.problem is None, t.problem
    assert t.unknown_kinds == {"widget": 2, "gadget": 1}
    model = build(t)
    assert model["trace"]["complete"] and len(model["graphs"]) == 1
    assert model["trace"]["unknown_kinds"] == {"widget": 2, "gadget": 1}
    text = markdown.render(model)
    assert "Partial trace" not in text and "3 records of kinds this prov-trace does not know" in text, text[:2000]


def test_an_unknown_kind_in_this_version_is_still_not_a_record(tmp_path):
    path = rs.write_trace(tmp_path / "t.msgpack", [_post_grad(), ("widget", {}), (schema.END, {"outcome": "ok"})])
    t = read_trace(path)
    assert not t.complete and "not a prov-trace record" in t.problem


@pytest.mark.parametrize("version", [[0, 9], [0, 0], [True, True], [1, False], [1, -1], [-1, 0], "1.1", 1.1, None,
                                     [1], [1, 1, 1], [1.0, 1.0], {"major": 1}])
def test_old_and_malformed_schema_versions_are_refused_in_one_sentence(tmp_path, version):
    data = msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": "prov-trace", "version": version})
    path = tmp_path / "t.msgpack"
    path.write_bytes(data + msgpack.packb({"kind": "end", "seq": 1, "t_ns": 0, "outcome": "ok"}))
    with pytest.raises(TraceReadError) as err:
        read_trace(path)
    message = str(err.value)
    assert "\n" not in message and len(message) < 400, message
    assert ("older" in message) if version in ([0, 9], [0, 0]) else ("malformed" in message), message
    proc = cli("report", str(path), "-o", str(tmp_path / "r.md"), cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr


# --- 12. memory amplification ---------------------------------------------------------------------------


def test_a_huge_source_line_is_cut_in_every_renderer(tmp_path):
    huge = "x = " + "1 + " * 2_500_000 + "1"  # 10 MB on one line
    path = rs.write_trace(tmp_path / "t.msgpack", [
        (schema.PROBE, {**BASE, "stage": "source", "phase": "entry", "graph": None,
                        "payload": {"file": "/m.py", "qualname": "f", "first_line": 1, "user": True,
                                    "lines": [{"line": 3, "text": huge}]}}),
        _post_grad(), (schema.END, {"outcome": "ok"})])
    model = build(read_trace(path))
    for name, render in (("md", markdown.render), ("html", html.render), ("json", jsonout.render)):
        out = render(model)
        assert len(out) < 2_000_000, (name, len(out))
        assert "[cut " in out, name
    text = markdown.render(model)
    assert "Long texts are cut" in text


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak memory from /proc")
def test_a_60_mb_source_line_reports_in_bounded_memory(tmp_path):
    huge = "y = " + "a" * 60_000_000
    path = rs.write_trace(tmp_path / "t.msgpack", [
        (schema.PROBE, {**BASE, "stage": "source", "phase": "entry", "graph": None,
                        "payload": {"file": "/m.py", "qualname": "f", "first_line": 1, "user": True,
                                    "lines": [{"line": 3, "text": huge}]}}),
        _post_grad(), (schema.END, {"outcome": "ok"})])
    del huge
    # The peak resident size of this process alone: /proc's VmHWM (ru_maxrss carries the parent's peak over exec).
    code = ("import sys\nfrom prov_trace.cli import main\n"
            "sys.argv = ['prov-trace', 'report', sys.argv[1], '-o', sys.argv[2]]\n"
            "try:\n    main()\nfinally:\n"
            "    hwm = [ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')][0]\n"
            "    print('maxrss', hwm, file=sys.stderr)\n")
    for out in ("r.md", "r.html", "r.json"):
        proc = subprocess.run([sys.executable, "-c", code, str(path), str(tmp_path / out)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        rss_mb = int(proc.stderr.split("maxrss")[1].split()[0]) / 1024
        assert (tmp_path / out).stat().st_size < 2_000_000, out
        assert rss_mb < 250, (out, rss_mb)  # the record read (60 MB) and its string (60 MB), and little more


# --- minor ----------------------------------------------------------------------------------------------


def test_a_trace_piped_into_report_through_dev_stdin(tmp_path):
    path = rs.write_trace(tmp_path / "t.msgpack", [_post_grad(), (schema.END, {"outcome": "ok"})])
    with open(path, "rb") as f:
        proc = subprocess.run([sys.executable, "-m", "prov_trace", "report", "/dev/stdin", "-o", str(tmp_path / "r.md")],
                              stdin=f, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "# Source-to-kernel provenance audit" in (tmp_path / "r.md").read_text()
    empty = subprocess.run([sys.executable, "-m", "prov_trace", "report", "/dev/stdin", "-o", str(tmp_path / "e.md")],
                           input=b"", cwd=tmp_path, capture_output=True, timeout=300)
    assert empty.returncode == 2 and b"is empty" in empty.stderr
    dash = subprocess.run([sys.executable, "-m", "prov_trace", "report", "-", "-o", str(tmp_path / "d.md")],
                          input=b"", cwd=tmp_path, capture_output=True, timeout=300)
    assert dash.returncode == 2 and b"to read a trace from standard input, give /dev/stdin" in dash.stderr


def test_read_stream_of_unknown_size():
    header = msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": "prov-trace",
                            "version": list(schema.SCHEMA_VERSION)})
    end = msgpack.packb({"kind": "end", "seq": 1, "t_ns": 0, "outcome": "ok"})
    t = read_stream(io.BytesIO(header + end), None)
    assert t.complete and t.size == len(header + end)


def test_an_endless_stream_that_is_not_a_trace_is_refused_at_its_first_bytes(tmp_path):
    """A pipe or device of unknown length is read only as far as its records go: an endless one that is no
    trace (here /dev/zero, read only) is one sentence, at once, not read whole into memory (it was: 23 GB)."""
    with open("/dev/zero", "rb") as zeros:
        proc = subprocess.run([sys.executable, "-m", "prov_trace", "report", "/dev/stdin", "-o", str(tmp_path / "r.md")],
                              stdin=zeros, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "does not start with a prov-trace header record" in proc.stderr and "Traceback" not in proc.stderr
    # A trace followed by (nearly) endless bytes that are no record reads up to its last record and stops there.
    header = msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": "prov-trace",
                            "version": list(schema.SCHEMA_VERSION)})

    class Endless(io.RawIOBase):  # 64 MiB of 0xc1, a byte msgpack never uses (bounded, should a regression read it all)
        left = 64 << 20

        def readinto(self, b):
            n = min(len(b), self.left)
            b[:n] = b"\xc1" * n
            self.left -= n
            return n

    t = read_stream(io.BufferedReader(_Then(header, Endless())), None)
    assert len(t.records) == 0 and t.problem.startswith(f"incomplete at byte {len(header)} of the ") \
        and "not a whole record" in t.problem, t.problem


class _Then(io.RawIOBase):
    """`first`'s bytes, then those of `rest`."""

    def __init__(self, first: bytes, rest: io.RawIOBase):
        self._first, self._rest = first, rest

    def readable(self) -> bool:
        return True

    def readinto(self, b):
        if self._first:
            n = min(len(b), len(self._first))
            b[:n], self._first = self._first[:n], self._first[n:]
            return n
        return self._rest.readinto(b)


def test_bytes_after_the_end_record_are_named_in_the_report(tmp_path):
    """`cat a.msgpack b.msgpack > c.msgpack` gave the report of a alone, and said nothing of b."""
    path = rs.write_trace(tmp_path / "t.msgpack", [_post_grad(), (schema.END, {"outcome": "ok"})])
    whole = path.read_bytes()
    (tmp_path / "two.msgpack").write_bytes(whole + whole)
    t = read_trace(tmp_path / "two.msgpack")
    assert t.complete and t.trailing == len(whole) and read_trace(path).trailing == 0
    md = markdown.render(build(t))
    assert f"{len(whole):,} bytes follow the trace's end record and were not read" in md
    assert "bytes follow" not in markdown.render(build(read_trace(path)))


def test_bare_urls_in_trace_text_are_not_links_in_markdown(tmp_path):
    text = "see https://evil.example/x and www.evil.example and mail@evil.example"
    path = rs.write_trace(tmp_path / "t.msgpack", rs.hostile_records(text))
    md = markdown.render(build(read_trace(path)))
    outside_code, fenced = [], False
    for line in md.splitlines():
        if line.startswith("```"):  # a fenced block (the Mermaid chart) is never autolinked
            fenced = not fenced
            continue
        if not fenced:
            outside_code += line.split("`")[0::2]
    plain = " ".join(outside_code)
    assert "https://" not in plain and "www.evil" not in plain and "mail@evil" not in plain
    assert "https\\://evil.example" in plain or "https:\\//evil.example" in plain, plain[:3000]


def test_a_probes_file_with_a_utf8_bom_is_read(tmp_path):
    p = tmp_path / "p.toml"
    p.write_bytes("\ufeff[[probe]]\ntarget = \"json:dumps\"\n".encode("utf-8"))
    proc = cli("targets", "--probes", str(p), "--json", cwd=tmp_path, timeout=300)
    assert "Invalid statement" not in proc.stderr and "not valid TOML" not in proc.stderr, proc.stderr
    assert "json:dumps" in proc.stdout


def test_probes_file_errors_are_printable(tmp_path):
    p = tmp_path / "p.toml"
    p.write_bytes(b'[[probe]]\ntarget = "json:dumps"\nevent = "x\\u0000\\u001b[31my"\n')
    proc = subprocess.run([sys.executable, "-m", "prov_trace", "targets", "--probes", str(p)], cwd=tmp_path,
                          capture_output=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert b"\x00" not in proc.stderr and b"\x1b" not in proc.stderr, proc.stderr
    assert b"\\x00" in proc.stderr
    bad_name = tmp_path / "q\x1b[31m.toml"
    proc = subprocess.run([sys.executable, "-m", "prov_trace", "targets", "--probes", str(bad_name)], cwd=tmp_path,
                          capture_output=True, timeout=300)
    assert proc.returncode == 2 and b"\x1b" not in proc.stderr, proc.stderr
