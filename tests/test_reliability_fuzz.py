"""Reliability, part 4: fuzzing the reader and the report (docs/reliability.md, "Fuzzing").

Bounded for CI: each target runs a fixed number of examples with no deadline.
PROV_TRACE_FUZZ_EXAMPLES raises the count for a longer local run.
"""

from __future__ import annotations

import io
import os

import msgpack
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import reliability_support as rs
from prov_trace.stream import schema
from prov_trace.report.model import build
from prov_trace.stream.reader import Trace, TraceReadError, read_stream

N = int(os.environ.get("PROV_TRACE_FUZZ_EXAMPLES", "0")) or None
FUZZ = settings(max_examples=N or 300, deadline=None, derandomize=N is None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
_PACKER = dict(use_bin_type=True, unicode_errors="surrogateescape")


def _read(data: bytes) -> Trace | None:
    """The reader's contract: a Trace, or TraceReadError with one sentence. Anything else is a bug."""
    try:
        t = read_stream(io.BytesIO(data), len(data))
    except TraceReadError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg
        return None
    assert isinstance(t, Trace) and isinstance(t.header, dict)
    assert t.problem is None or t.problem.startswith("incomplete at byte")
    return t


def _header() -> bytes:
    return msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": schema.SCHEMA_NAME,
                          "version": list(schema.SCHEMA_VERSION)}, **_PACKER)


# --- the reader on arbitrary bytes -------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=4096))
def test_reader_on_arbitrary_bytes(data):
    _read(data)


@FUZZ
@given(st.binary(max_size=4096))
def test_reader_on_a_header_then_arbitrary_bytes(data):
    t = _read(_header() + data)
    assert t is not None  # a whole header always reads


# --- the reader on mutated real traces -----------------------------------------------------------------


@pytest.fixture(scope="module")
def real_traces(raising_run, tmp_path_factory):
    """Bytes of real traces: one from a real compile, one synthetic with hostile strings in every field."""
    synthetic = rs.write_trace(tmp_path_factory.mktemp("fuzz") / "t.msgpack", rs.hostile_records())
    return _Traces([raising_run.trace.read_bytes(), synthetic.read_bytes()])


class _Traces(list):
    def __repr__(self) -> str:  # hypothesis prints its arguments on a failure: not 40 kB of msgpack
        return f"<{len(self)} real traces>"


_MUTATION = st.tuples(st.sampled_from(["flip", "set", "delete", "insert", "truncate", "duplicate", "length"]),
                      st.floats(0, 1, exclude_max=True), st.integers(1, 64), st.binary(min_size=1, max_size=16))


def _mutate(data: bytes, mutations) -> bytes:
    b = bytearray(data)
    for kind, where, n, blob in mutations:
        if not b:
            break
        i = int(where * len(b))
        if kind == "flip":
            b[i] ^= 1 << (n % 8)
        elif kind == "set":
            b[i:i + len(blob)] = blob
        elif kind == "delete":
            del b[i:i + n]
        elif kind == "insert":
            b[i:i] = blob
        elif kind == "truncate":
            del b[i:]
        elif kind == "duplicate":
            b[i:i] = b[i:i + n * 16]
        elif kind == "length":  # a container or string header claiming a huge length
            b[i:i] = bytes([0xdd, 0xdf, 0xdb, 0xc6][n % 4]) + b"\xff\xff\xff" + bytes([n])
    return bytes(b)


@FUZZ
@given(data=st.data())
def test_reader_on_mutated_real_traces(real_traces, data):
    base = real_traces[data.draw(st.integers(0, len(real_traces) - 1), label="trace")]
    mutated = _mutate(base, data.draw(st.lists(_MUTATION, min_size=1, max_size=6)))
    t = _read(mutated)
    if t is not None:
        # What reads also builds and renders: corruption that still decodes is data, not a crash.
        _report(t)


# --- the report builder and renderers on generated record streams --------------------------------------

_text = st.one_of(st.text(max_size=20), st.sampled_from(rs.HOSTILE_TEXT), st.sampled_from(["", "a", "b", "relu", "buf0"]))
_name = st.one_of(st.sampled_from(["a", "b", "c", "relu", "add", "buf0", "buf1", "op0", "k0", "cpp_fused_0", rs.BAD]),
                  st.text(max_size=8))
_int = st.one_of(st.integers(-5, 50), st.integers(-(2**63), 2**64 - 1))


def _opt(s):
    return st.one_of(st.none(), s)


def _dict(optional: dict):
    """A documented map where any key may be missing, or null."""
    return st.fixed_dictionaries({}, optional={k: _opt(v) for k, v in optional.items()})


_json = st.recursive(st.one_of(st.none(), st.booleans(), _int, st.floats(allow_nan=True), _text, st.binary(max_size=8)),
                     lambda c: st.one_of(st.lists(c, max_size=4), st.dictionaries(_text, c, max_size=4)), max_leaves=12)
_src = _dict({"file": st.sampled_from(["/m/model.py", "/m/other.py", rs.BAD]), "line": st.integers(0, 6),
              "func": _text, "text": _text})
_field = _dict({"has": st.booleans(), "populated": st.booleans(), "type": _text, "value": _json})
_from_node = st.recursive(st.just([]), lambda c: st.lists(
    _dict({"name": _name, "graph_id": _int, "pass_name": _text, "action": _text, "from_node": c}), max_size=3),
    max_leaves=6)
_fx_fields = st.fixed_dictionaries({}, optional={
    **{f: _field for f in schema.FX_FIELDS},
    "from_node": _dict({"has": st.booleans(), "populated": st.booleans(), "type": _text, "value": _from_node}),
})
_fx_node = _dict({"name": _name, "op": st.sampled_from(["placeholder", "call_function", "output", "get_attr"]),
                  "target": _text, "inputs": st.lists(_name, max_size=3), "meta_keys": st.lists(_text, max_size=3),
                  "fields": _fx_fields, "source": _src, "cut_inputs": _int})
_fx = _dict({"graph_id": st.integers(0, 3), "node_count": _int, "nodes": st.lists(_fx_node, max_size=5),
             "cut_nodes": _int, "is_inference": st.booleans()})
_ir_fields = st.fixed_dictionaries({}, optional={
    "origins": _dict({"has": st.booleans(), "populated": st.booleans(), "type": _text, "value": st.lists(_name, max_size=3)}),
    "origin_node": _dict({"has": st.booleans(), "populated": st.booleans(), "type": _text, "value": _name}),
    "traceback": _field,
    "get_stack_traces": _dict({"has": st.booleans(), "populated": st.booleans(), "type": _text,
                               "value": st.lists(_text, max_size=2)}),
})
_ir_op = _dict({"name": _name, "type": _text, "group": _name, "fields": _ir_fields,
                "source": st.lists(_src, max_size=2), "reads": st.lists(_name, max_size=3), "attrs": _json})
_ir = _dict({"op_count": _int, "ops": st.lists(_ir_op, max_size=4),
             "groups": st.lists(_dict({"name": _name, "type": _text, "members": st.lists(_name, max_size=3)}), max_size=3)})
_kernel = _dict({"kernel": _name, "kind": st.sampled_from(["generated", "extern", "op_spec", "other"]),
                 "snodes": st.lists(_name, max_size=3), "ops": st.lists(_ir_op, max_size=3),
                 "origins": st.lists(_name, max_size=3), "metadata": _text, "detailed": _text})
_call = _dict({"line": st.integers(0, 99), "comments": st.lists(
    st.one_of(_text, st.just("# Topologically Sorted Source Nodes: [relu]")), max_size=2)})
_artifact = _dict({"path": _text, "bytes": _int, "kernels": st.lists(_dict({
    "kernel": _name, "kind": st.sampled_from(["generated", "extern", "fallback"]), "how": _text,
    "def_line": st.integers(0, 99), "calls": st.lists(_call, max_size=3), "comments": st.lists(_text, max_size=2),
    "provenance_comments": st.lists(_text, max_size=2)}), max_size=3)})
_source = _dict({"file": st.sampled_from(["/m/model.py", "/m/other.py", rs.BAD]), "qualname": _text,
                 "first_line": st.integers(0, 9), "user": st.booleans(),
                 "lines": st.lists(_dict({"line": st.integers(0, 6), "text": _text}), max_size=4)})
_user_stage = st.sampled_from(["user.stage", "Scheduler.fuse_nodes", "my-probe"])
# A user probe's payload, shaped as probes/user.py writes it (and not quite: values of any kind, sources anywhere).
_sourced = st.recursive(st.one_of(_json, _src, _dict({"file": _json, "line": _json})), lambda c: st.one_of(
    st.lists(c, max_size=3), st.dictionaries(st.one_of(_text, st.just("source")), c, max_size=3),
    st.fixed_dictionaries({"source": st.one_of(_src, _json, st.lists(st.one_of(_src, _json), max_size=2))})),
    max_leaves=8)
def _nest(depth: int, kind: str, leaf=0):
    """A value nested `depth` maps or lists deep (msgpack decodes up to 1,024 levels in a whole record)."""
    value = leaf
    for i in range(depth):
        value = [value] if kind == "list" or (kind == "mixed" and i % 2) else {"k": value}
    return value


_deep = st.builds(_nest, st.integers(0, 1000), st.sampled_from(["list", "dict", "mixed"]))
# A field that should hold a name holding anything: a list or a map is unhashable where a name is a key.
_any_name = st.one_of(_text, _json, st.just(["a", "b"]), st.just({"a": 1}))
_snap = _dict({"type": st.one_of(_text, _any_name), "populated": st.booleans(),
               "kind": st.one_of(st.sampled_from(["generic", "fx_graph", "fx_node", "fx_nodes", "ir_op", "ir_ops",
                                                  "scheduler_nodes", "dataclass"]), _any_name),
               "value": st.one_of(_json, _fx, _fx_node, _ir, _ir_op, _sourced, _deep), "error": _text})
_user_payload = st.one_of(_json, st.fixed_dictionaries(
    {"args": st.dictionaries(st.one_of(_text, st.integers(0, 3)), st.one_of(_snap, _json), max_size=3)},
    optional={"return": st.one_of(_snap, _json)}))
_error = _dict({"type": st.one_of(_text, st.just("torch._dynamo.exc.Unsupported")), "text": _text})
_compile_error = st.one_of(_dict({"error": st.one_of(_dict({"type": _text, "text": _text, "inner": _error}), _json)}),
                           _json)
_PAYLOADS = {schema.SOURCE: _source, schema.PRE_GRAD: _fx, schema.POST_GRAD: _fx, schema.IR_PRE: _ir,
             schema.IR_POST: _ir, schema.KERNEL_SPEC: _kernel, schema.ARTIFACT: _artifact,
             schema.COMPILE_ERROR: _compile_error}


@st.composite
def _probe(draw):
    stage = draw(st.one_of(st.sampled_from(list(schema.STAGES + schema.SIDE_STAGES)), _user_stage))
    payload = draw(_PAYLOADS.get(stage, _user_payload))
    return schema.PROBE, draw(_dict({
        "target": _text, "phase": st.sampled_from(["entry", "return", "unwind", "finish"]), "call": _int,
        "compile_id": st.sampled_from(["0/0", "1/0", "0/1"]), "graph": st.sampled_from(["inference", "forward", "backward"]),
        "thread": _dict({"id": _int, "name": _text}), "probe_ns": _int,
    })) | {"stage": stage, "payload": payload}


_hook = st.tuples(st.just(schema.HOOK), _dict({
    "target": _text, "stage": st.one_of(st.sampled_from(list(schema.STAGES)), _user_stage, _any_name), "event": _text,
    "resolved": st.booleans(), "installed": st.booleans(), "reason": _text, "file": _text, "line": _int,
    "signature": _text, "notes": st.lists(_text, max_size=2), "fired": _int, "errors": _int}))
_error = st.tuples(st.just(schema.ERROR), _dict({
    "stage": st.one_of(st.sampled_from(list(schema.STAGES)), _user_stage), "target": _text, "phase": _text,
    "call": _int, "compile_id": _text, "graph": _text,
    "error": _dict({"type": _text, "message": _text, "traceback": _text})}))
_note = st.tuples(st.just(schema.NOTE), _dict({"text": st.one_of(_text, _json), "level": st.one_of(_text, _json),
                                              "stage": _any_name, "extra": _deep}))
_end = st.tuples(st.just(schema.END), _dict({"outcome": st.sampled_from(["ok", "exit", "exception", "interrupted",
                                                                          "signal"]), "detail": _text, "records": _int,
                                             "stage": _any_name, "extra": _deep}))
# A probe record whose payload is nested deep (a stage's shape or a user's payload).
_deep_probe = st.tuples(st.just(schema.PROBE), st.fixed_dictionaries({
    "stage": st.one_of(st.sampled_from(list(schema.STAGES)), _user_stage), "phase": st.just("return"),
    "compile_id": st.just("0/0"), "graph": st.just("inference"),
    "payload": st.one_of(_deep, st.builds(lambda d: {"nodes": [{"name": "n", "fields": {"from_node": {
        "value": _nest(d, "list", {"name": "a", "from_node": []})}}}]}, st.integers(0, 990)),
        st.builds(lambda d: {"args": {"x": {"type": "t", "value": d}}}, _deep))}))
_records = st.lists(st.one_of(_probe(), _probe(), _probe(), _hook, _error, _note, _deep_probe), max_size=14)


def _stream(records, end, header: bytes | None = None) -> bytes:
    out = [header or _header()]
    for i, (kind, body) in enumerate(records + ([end] if end else []), 1):
        out.append(msgpack.packb({**body, "kind": kind, "seq": i, "t_ns": i}, **_PACKER))
    return b"".join(out)


def _report(trace: Trace) -> None:
    from prov_trace.report import markdown

    from prov_trace.report import check, diff

    model = build(trace)
    for name, render in rs.renderers().items():
        out = render(model)
        assert isinstance(out, str), name
    markdown.summary_lines(model)
    d = diff.diff(model, model)
    for fmt in ("md", "html", "json"):
        assert isinstance(diff.render(d, fmt), str)
    check.render(check.check(model, [check.parse_rule("*:stack_trace>=0"), check.parse_rule("*:origins=all")]),
                 model["stage_titles"])


@FUZZ
@given(records=_records, end=_opt(_end))
def test_report_builds_and_renders_any_record_stream(records, end):
    data = _stream(records, end)
    t = _read(data)
    assert t is not None and len(t.records) == len(records) + (1 if end else 0)
    _report(t)


# --- a newer minor version: record kinds this reader does not know -------------------------------------

_unknown = st.tuples(st.sampled_from(["widget", "gadget", "probe2", ""]), _dict({"stage": _any_name, "x": _json}))


@FUZZ
@given(records=st.lists(st.one_of(_probe(), _hook, _note, _unknown, _unknown), max_size=12), end=_opt(_end))
# Found by CI: a user stage's unwind whose payload is not a map (a newer version may write any shape there).
@example(records=[("probe", {"stage": "source", "payload": {}}),
                  ("probe", {"phase": "unwind", "stage": "user.stage", "payload": 1})], end=None)
def test_a_newer_minor_version_reads_past_unknown_kinds(records, end):
    header = msgpack.packb({"kind": "header", "seq": 0, "t_ns": 0, "schema": schema.SCHEMA_NAME,
                            "version": [schema.SCHEMA_VERSION[0], schema.SCHEMA_VERSION[1] + 1]}, **_PACKER)
    t = _read(_stream(records, end, header))
    assert t is not None
    unknown = sum(1 for kind, _ in records if kind not in schema.RECORD_KINDS)
    assert sum(t.unknown_kinds.values()) == unknown
    assert len(t.records) == len(records) - unknown + (1 if end else 0)
    _report(t)


# --- the reader's conform step: compiled shapes against the rules read directly -------------------------

import copy  # noqa: E402

import conform_reference  # noqa: E402
from prov_trace.stream import conform  # noqa: E402


def _shaped(shape, depth: int = 0):
    """Values for `shape`: of its type, or of any other (what a changed byte or a buggy writer gives)."""
    if shape == "any":
        return _json
    if isinstance(shape, str):
        right = {"str": _text, "int": _int, "key": st.one_of(_text, _int, st.floats()), "bool": st.booleans()}[shape]
        return st.one_of(right, right, _json)
    if depth > 3:
        return _json
    if isinstance(shape, tuple) and shape[0] == "list":
        return st.one_of(st.lists(_shaped(shape[1], depth + 1), max_size=4), _json)
    if isinstance(shape, tuple):  # a map, with its special keys
        special = shape[2] if len(shape) > 2 else {}
        keys = st.one_of(_text, st.sampled_from(sorted(special) or ["k"]), st.integers(0, 3))
        return st.one_of(st.dictionaries(keys, st.one_of(*(_shaped(s, depth + 1) for s in (shape[1], *special.values()))),
                                         max_size=4), _json)
    known = st.fixed_dictionaries({}, optional={k: _shaped(s, depth + 1) for k, s in shape.items()})
    return st.one_of(st.builds(lambda d, extra: {**extra, **d}, known, st.dictionaries(_text, _json, max_size=2)),
                     known, _json)


@st.composite
def _conform_input(draw):
    kind = draw(st.sampled_from(sorted(conform.RECORDS) + ["widget"]))
    rec = draw(_shaped(conform.RECORDS.get(kind, {})))
    rec = rec if isinstance(rec, dict) else {"value": rec}
    if kind == schema.PROBE and draw(st.booleans()):
        stage = draw(st.sampled_from(sorted(conform.PAYLOADS)))
        rec["stage"] = stage
        rec["payload"] = draw(_shaped(conform.PAYLOADS[stage]))
    rec["kind"] = kind
    return rec


@FUZZ
@given(_conform_input())
def test_compiled_shapes_conform_as_the_rules_say(rec):
    assert conform.record(copy.deepcopy(rec)) == conform_reference.record(copy.deepcopy(rec))


def test_compiled_shapes_conform_real_and_mutated_traces_as_the_rules_say(real_traces):
    import random

    rng = random.Random(20)
    checked = 0
    for base in real_traces:
        for trial in range(40):
            data = base if trial == 0 else _mutate(base, [(rng.choice(["flip", "set", "delete", "insert"]), rng.random(),
                                                           rng.randint(1, 64), bytes([rng.randrange(256)]))])
            unpacker = msgpack.Unpacker(io.BytesIO(data), **schema.UNPACK_OPTIONS, **schema.READ_LIMITS)
            try:
                records = [r for r in unpacker if isinstance(r, dict)]
            except Exception:  # a mutation the reader stops at: the records before it still count
                continue
            for rec in records:
                assert conform.record(copy.deepcopy(rec)) == conform_reference.record(copy.deepcopy(rec))
                checked += 1
    assert checked > 100
