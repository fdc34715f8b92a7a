"""The trace stream: written record by record, read back up to its last whole record, never misread."""

from __future__ import annotations

import io
import json
import os

import msgpack
import pytest

from conftest import cli
from prov_trace.stream import schema
from prov_trace.report.model import build
from prov_trace.stream.reader import TraceReadError, read_stream, read_trace
from prov_trace.stream.writer import TraceWriter


def _header(**over):
    h = {"kind": "header", "seq": 0, "t_ns": 0, "schema": "prov-trace", "version": list(schema.SCHEMA_VERSION)}
    h.update(over)
    return h


def test_roundtrip_and_records_are_flushed_as_written(tmp_path):
    path = tmp_path / "t.msgpack"
    w = TraceWriter(path)
    w.write(schema.HEADER, {"schema": "prov-trace", "version": list(schema.SCHEMA_VERSION)})
    w.write(schema.PROBE, {"stage": "post_grad", "payload": {"nodes": []}})
    # Readable before close: each record reaches the OS as it is written.
    partial = read_trace(path)
    assert len(partial.records) == 1 and not partial.complete and "no end record" in partial.problem
    w.write(schema.END, {"outcome": "ok"})
    w.close()
    t = read_trace(path)
    assert t.complete and t.end["outcome"] == "ok" and [r["seq"] for r in t.records] == [1, 2]


def test_every_cut_of_a_real_trace_reads_to_its_last_whole_record(mlp_run):
    data = mlp_run.trace.read_bytes()
    # Offsets where whole records end.
    unpacker = msgpack.Unpacker(io.BytesIO(data), raw=False)
    ends = []
    for _ in unpacker:
        ends.append(unpacker.tell())
    assert ends[-1] == len(data)
    for cut in range(1, len(data)):
        whole = sum(1 for e in ends if e <= cut)
        if whole == 0:
            with pytest.raises(TraceReadError):
                read_stream(io.BytesIO(data[:cut]), cut)
            continue
        t = read_stream(io.BytesIO(data[:cut]), cut)
        assert len(t.records) + 1 == whole, cut
        assert not t.complete
        if cut not in ends:
            assert t.problem.startswith(f"incomplete at byte {ends[whole - 1]} "), (cut, t.problem)
    # And the report builds from a cut stream too, with what it has.
    half = len(data) // 2
    model = build(read_stream(io.BytesIO(data[:half]), half))
    assert model["trace"]["complete"] is False


@pytest.mark.parametrize("content,needle", [
    (b"", "is empty"),
    (os.urandom(4096), "not a prov-trace trace"),
    (json.dumps({"kind": "header"}).encode(), "not a prov-trace trace"),
    (msgpack.packb({"kind": "header", "schema": "other-tool", "version": [1, 0]}), "not a prov-trace trace"),
    (msgpack.packb([1, 2, 3]), "not a prov-trace trace"),
    (msgpack.packb(_header(version=[99, 0])), "newer than this prov-trace reads"),
])
def test_bad_files_get_one_sentence_and_exit_2(tmp_path, content, needle):
    path = tmp_path / "bad.msgpack"
    path.write_bytes(content)
    with pytest.raises(TraceReadError, match=needle):
        read_trace(path)
    proc = cli("report", str(path), "-o", str(tmp_path / "r.md"))
    assert proc.returncode == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prov-trace: error:") and needle in err[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_report_given_where_a_trace_belongs_says_which_file_to_give(mlp_run, tmp_path):
    """`prov-trace report audit.md` (the report, not its trace): the sentence said only that it is not a trace."""
    for fmt in ("md", "html", "json"):
        name = f"audit.{fmt}"
        cli("report", str(mlp_run.trace), "-o", str(tmp_path / name), check=True)
        proc = cli("check", str(tmp_path / name), "--require", "graph_breaks<=0")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.rstrip().endswith(
            f"{tmp_path / name} is not a prov-trace trace: it does not start with a prov-trace header record; its "
            f"name is a {({'md': 'Markdown', 'html': 'HTML', 'json': 'JSON'})[fmt]} report's: give the trace a "
            "report was built from (`prov-trace run -o`, prov-trace.msgpack by default)"), proc.stderr


def test_missing_trace_and_directory(tmp_path):
    with pytest.raises(TraceReadError, match="there is no file"):
        read_trace(tmp_path / "nope.msgpack")
    with pytest.raises(TraceReadError, match="is a directory"):
        read_trace(tmp_path)


def test_a_huge_declared_length_does_not_allocate(tmp_path):
    # A str32 header claiming 4 GiB: the reader must refuse by its limits, not try to allocate.
    path = tmp_path / "huge.msgpack"
    path.write_bytes(msgpack.packb(_header()) + b"\xdb\xff\xff\xff\xff" + b"x" * 16)
    t = read_trace(path)
    assert t.problem.startswith("incomplete at byte") and len(t.records) == 0


def test_report_on_partial_trace_has_a_banner(mlp_run, tmp_path):
    data = mlp_run.trace.read_bytes()
    cut = tmp_path / "cut.msgpack"
    cut.write_bytes(data[: int(len(data) * 0.8)])
    out = tmp_path / "cut.md"
    proc = cli("report", str(cut), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "**Partial trace.**" in out.read_text()
    assert "partial" in proc.stderr


def test_report_never_overwrites_its_trace(mlp_run, tmp_path):
    copy = tmp_path / "t.msgpack"
    copy.write_bytes(mlp_run.trace.read_bytes())
    proc = cli("report", str(copy), "-o", str(copy))
    assert proc.returncode == 2 and "would overwrite the trace" in proc.stderr
    assert copy.read_bytes() == mlp_run.trace.read_bytes()


def test_packed_items_are_spliced_byte_for_byte(tmp_path):
    """Snapshots kept packed (a PackedList) write exactly the bytes the plain dicts would, wherever they sit."""
    from prov_trace.stream.packed import PackedList, new_packer

    items = [{"name": "relu", "args": [1, 2.5, None], "text": "bad \udcff utf-8"}, {"name": "out", "meta": {}}]
    nodes = PackedList()
    packer = new_packer()
    for item in items:
        nodes.append_packed(packer.pack(item))
    assert len(nodes) == 2 and list(nodes) == items and nodes == items and nodes[1] == items[1]
    plain = TraceWriter(tmp_path / "plain.msgpack")
    spliced = TraceWriter(tmp_path / "spliced.msgpack")
    for w, value in ((plain, items), (spliced, nodes)):
        w.write("probe", {"stage": "s", "payload": {"graph": {"nodes": value, "n": 2}, "in_a_list": [value]}})
        w.close()
    a = list(msgpack.Unpacker(open(tmp_path / "plain.msgpack", "rb"), raw=False, unicode_errors="surrogateescape"))
    b = list(msgpack.Unpacker(open(tmp_path / "spliced.msgpack", "rb"), raw=False, unicode_errors="surrogateescape"))
    for r in a + b:
        r.pop("t_ns")
    assert a == b and a[0]["payload"]["graph"]["nodes"] == items


def test_packed_items_are_checked_against_the_reader_limits(tmp_path, monkeypatch):
    """A record whose items are kept packed is still refused (and replaced by an error record) past a reader limit."""
    from prov_trace.stream.packed import PackedList, new_packer
    from prov_trace.stream import writer as stream

    monkeypatch.setattr(stream, "_CHECK_ABOVE", 64)
    monkeypatch.setattr(stream, "_UNPACK_LIMITS", {**stream._UNPACK_LIMITS, "max_array_len": 10, "max_str_len": 100})
    packer = new_packer()

    def nodes(*items):
        out = PackedList()
        for item in items:
            out.append_packed(packer.pack(item))
        return out

    w = TraceWriter(tmp_path / "t.msgpack")
    fine = nodes(*({"name": f"n{i}", "text": "x" * 50} for i in range(10)))
    too_many = nodes(*({"name": f"n{i}"} for i in range(11)))
    long_str = nodes({"name": "n", "text": "x" * 101})
    for value in (fine, too_many, long_str):
        w.write("probe", {"stage": "s", "payload": {"nodes": value}})
    w.close()
    assert w.replaced == 2
    records = list(msgpack.Unpacker(open(tmp_path / "t.msgpack", "rb"), raw=False))
    assert records[0]["kind"] == "probe" and len(records[0]["payload"]["nodes"]) == 10
    assert [r["kind"] for r in records[1:]] == ["error", "error"]
    assert "a list of 11 items" in records[1]["error"]["message"]
    assert "beyond the reader's limits" in records[2]["error"]["message"]
