"""Helpers shared by the tests/test_reliability_*.py files: hostile objects, synthetic traces, subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from prov_trace.stream import schema
from prov_trace.stream.writer import TraceWriter

#: Inductor compiles C++ in a worker pool by default; one thread keeps these runs light and childless.
LIGHT_ENV = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "PYTHONUNBUFFERED": "1"}

# --- objects built to misbehave -------------------------------------------------------------

#: Every call of user code on a hostile object appends here; a safe snapshot leaves it empty.
TOUCHED: list[str] = []


class Hostile:
    """Every hook Python offers a class, each one recording that it ran and then raising."""

    def _touch(self, what: str):
        TOUCHED.append(what)
        raise RuntimeError(f"{what} must not be called by a probe")

    def __repr__(self):
        return self._touch("__repr__")

    def __str__(self):
        return self._touch("__str__")

    def __format__(self, spec):
        return self._touch("__format__")

    def __getattr__(self, name):
        return self._touch(f"__getattr__({name})")

    def __getattribute__(self, name):
        if name in ("_touch",):
            return object.__getattribute__(self, name)
        TOUCHED.append(f"__getattribute__({name})")
        return object.__getattribute__(self, name)

    def __len__(self):
        return self._touch("__len__")

    def __iter__(self):
        return self._touch("__iter__")

    def __bool__(self):
        return self._touch("__bool__")

    def __eq__(self, other):
        return self._touch("__eq__")

    __hash__ = object.__hash__

    @property
    def __class__(self):  # isinstance() reads this when the type check fails
        TOUCHED.append("__class__")
        return Hostile


class HostileList(list):
    def __len__(self):
        TOUCHED.append("HostileList.__len__")
        return 10**9

    def __iter__(self):
        TOUCHED.append("HostileList.__iter__")
        return iter([Hostile()] * 3)

    def __getitem__(self, i):
        TOUCHED.append("HostileList.__getitem__")
        raise IndexError(i)

    def __repr__(self):
        TOUCHED.append("HostileList.__repr__")
        return "boom"


class HostileDict(dict):
    def __getitem__(self, k):
        TOUCHED.append("HostileDict.__getitem__")
        raise KeyError(k)

    def keys(self):
        TOUCHED.append("HostileDict.keys")
        return ["not", "these"]

    def items(self):
        TOUCHED.append("HostileDict.items")
        return []

    def __len__(self):
        TOUCHED.append("HostileDict.__len__")
        return -1


class HostileInt(int):
    def __repr__(self):
        TOUCHED.append("HostileInt.__repr__")
        return "boom"

    def __index__(self):
        TOUCHED.append("HostileInt.__index__")
        return 0


class HostileStr(str):
    def __str__(self):
        TOUCHED.append("HostileStr.__str__")
        return "boom"

    def __len__(self):
        TOUCHED.append("HostileStr.__len__")
        return 0


class BadStrError(Exception):
    def __str__(self):
        TOUCHED.append("BadStrError.__str__")
        raise RuntimeError("an exception whose str() raises")


def hostile_values() -> dict[str, Any]:
    """Name -> a value built to break a snapshot: raising hooks, side effects, self-reference, sheer size."""
    selfref_list: list = []
    selfref_list.append(selfref_list)
    selfref_dict: dict = {}
    selfref_dict["me"] = selfref_dict
    deep: Any = []
    for _ in range(10_000):
        deep = [deep]
    return {
        "hostile": Hostile(),
        "hostile_list": HostileList([1, 2, 3]),
        "hostile_dict": HostileDict(a=Hostile()),
        "hostile_int": HostileInt(7),
        "hostile_str": HostileStr("text"),
        "list_of_hostile": [Hostile(), {Hostile(): Hostile()}],
        "selfref_list": selfref_list,
        "selfref_dict": selfref_dict,
        "deep": deep,
        "huge_list": list(range(1_000_000)),
        "huge_set": set(range(200_000)),
        "huge_dict": {i: i for i in range(200_000)},
        "huge_str": "x" * 10_000_000,
        "huge_bytes": b"\0" * 10_000_000,
        "huge_int": 10**100_000,
        "class": Hostile,
    }


# --- hostile text ---------------------------------------------------------------------------

#: Strings a source line, a node name or a repr may hold, each meant to break one renderer.
HOSTILE_TEXT = [
    "a | b || c",
    "`code` ``x`` ```",
    "<script>alert(1)</script>",
    '<img src=x onerror="alert(2)">',
    "\x1b[31mred\x1b[0m \x1b]8;;http://evil\x07link\x1b]8;;\x07",
    "nul\x00byte",
    "bad utf8 \udcff\udcfe end",  # surrogate escapes: written as the raw bytes 0xff 0xfe
    "*bold* _it_ [link](javascript:alert(3)) ![img](x)",
    "# heading\n| new | row |\n---",
    "&amp; &lt; &#x3c;",
    "]] --> end\"] click n0 call alert(4)",
    "\u202eevil rtl\u202c \u200b zero width",
    "\x9b31m c1 csi \x85 nel",
    "-->",
    "line\r\nbreak",
]
BAD = "".join(HOSTILE_TEXT)


def hostile_records(text: str = BAD) -> list[tuple[str, dict[str, Any]]]:
    """A whole synthetic record stream (after the header) with `text` in every string a renderer shows."""
    t = text
    src = {"file": f"/m/{t}.py", "line": 3, "func": t, "text": t}
    field = {"has": True, "populated": True, "type": t, "value": t}
    fx_node = {"name": t, "op": "call_function", "target": t, "inputs": [t], "meta_keys": [t],
               "fields": {f: dict(field) for f in schema.FX_FIELDS}, "source": src}
    fx_node["fields"]["from_node"]["value"] = [{"name": t, "graph_id": 1, "pass_name": t, "action": t, "from_node": []}]
    ir_op = {"name": t, "type": t, "source": [src], "reads": [t], "attrs": {t: t}, "group": t,
             "fields": {"origins": {"has": True, "populated": True, "type": t, "value": [t]},
                        "origin_node": {"has": True, "populated": True, "type": t, "value": t},
                        "traceback": {"has": True, "populated": True, "type": t, "value": [t]},
                        "get_stack_traces": {"has": True, "populated": True, "type": t, "value": [t]}}}
    base = {"target": t, "call": 1, "compile_id": "0/0", "thread": {"id": 1, "name": t}, "probe_ns": 1}
    return [
        (schema.HOOK, {"target": t, "stage": schema.SOURCE, "event": "entry", "resolved": False, "installed": False,
                       "reason": t, "file": t, "line": 1, "signature": t, "notes": [t], "fired": 0, "errors": 0}),
        (schema.PROBE, {**base, "stage": schema.SOURCE, "phase": "entry", "graph": None,
                        "payload": {"file": f"/m/{t}.py", "qualname": t, "first_line": 1, "user": True,
                                    "lines": [{"line": 3, "text": t}]}}),
        (schema.PROBE, {**base, "stage": schema.PRE_GRAD, "phase": "entry", "graph": None,
                        "payload": {"graph_id": 1, "node_count": 1, "nodes": [fx_node]}}),
        (schema.PROBE, {**base, "stage": schema.POST_GRAD, "phase": "return", "graph": "inference",
                        "payload": {"graph_id": 2, "node_count": 1, "is_inference": True,
                                    "nodes": [{**fx_node, "name": t + "2"}]}}),
        (schema.PROBE, {**base, "stage": schema.IR_PRE, "phase": "entry", "graph": "inference",
                        "payload": {"op_count": 1, "ops": [ir_op]}}),
        (schema.PROBE, {**base, "stage": schema.IR_POST, "phase": "return", "graph": "inference",
                        "payload": {"op_count": 1, "ops": [ir_op], "groups": [{"name": t, "type": t, "members": [t]}]}}),
        (schema.PROBE, {**base, "stage": schema.KERNEL_SPEC, "phase": "return", "graph": "inference",
                        "payload": {"kernel": t, "kind": "generated", "snodes": [t], "ops": [ir_op], "origins": [t],
                                    "metadata": t, "detailed": t}}),
        (schema.PROBE, {**base, "stage": schema.KERNEL_SPEC, "phase": "entry", "graph": "inference",
                        "payload": {"kernel": t, "kind": "extern", "snodes": [], "ops": [ir_op], "origins": [t],
                                    "metadata": t, "detailed": t}}),
        (schema.PROBE, {**base, "stage": schema.ARTIFACT, "phase": "return", "graph": "inference",
                        "payload": {"path": f"/tmp/{t}.py", "bytes": 10, "kernels": [
                            {"kernel": t, "kind": "generated", "def_line": 1, "calls": [{"line": 2, "comments": [t]}],
                             "comments": [t], "provenance_comments": [t]},
                            {"kernel": t, "kind": "extern", "calls": [{"line": 4, "comments": ["# Topologically Sorted Source Nodes: " + t]}],
                             "comments": [t], "provenance_comments": [t]}]}}),
        (schema.PROBE, {**base, "stage": "user." + "stage", "phase": "return", "graph": None,
                        "payload": {"args": {t: {"type": t, "populated": True, "kind": "generic", "value": t}},
                                    t: t}}),
        (schema.PROBE, {**base, "stage": t, "phase": "return", "graph": None, "payload": {t: [t, {t: t}]}}),
        (schema.ERROR, {**base, "stage": schema.POST_GRAD, "phase": "return", "graph": None,
                        "error": {"type": t, "message": t, "traceback": t}}),
        (schema.NOTE, {"text": t}),
        (schema.END, {"outcome": "exception", "detail": t}),
    ]


def write_trace(path: Path, records: list[tuple[str, dict[str, Any]]], header: dict[str, Any] | None = None) -> Path:
    """Write a synthetic trace with the real writer."""
    w = TraceWriter(path)
    w.write(schema.HEADER, {"schema": schema.SCHEMA_NAME, "version": list(schema.SCHEMA_VERSION), "tool_version": "0",
                            "python": "3", "torch": "2", "platform": "p", "backend": "monitoring",
                            "backend_reason": "test", "profile": "inductor-cpu", "argv": ["prov-trace"],
                            "pid": 1, "start_time": 0.0, **(header or {})})
    for kind, body in records:
        w.write(kind, body)
    w.close()
    assert w.failure is None, w.failure
    return path


def renderers() -> dict[str, Any]:
    """Every report renderer present in prov_trace/report/, by name: a pure function of the report model."""
    import importlib

    out = {}
    for name, mod, fn in (("markdown", "prov_trace.report.markdown", "render"),
                          ("html", "prov_trace.report.html", "render"),
                          ("json", "prov_trace.report.jsonout", "render")):
        try:
            out[name] = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError):
            continue
    return out


# --- subprocesses ---------------------------------------------------------------------------


def prov_trace_with(patch: str, args: list[str], cwd: Path, env: dict | None = None,
                    timeout: int = 900) -> subprocess.CompletedProcess:
    """`prov-trace ARGS` in a fresh process, after running the Python code `patch` in it (fault injection)."""
    code = patch + "\nimport sys\nfrom prov_trace.cli import main\nsys.argv = ['prov-trace', *" + json.dumps(args) + "]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env={**os.environ, **LIGHT_ENV, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def _as_from_a_terminal() -> None:
    """In the child, before exec: SIGINT as a terminal's foreground program has it.

    A shell without job control starts background jobs with SIGINT ignored, and the ignore is
    inherited: Python then installs no KeyboardInterrupt handler, and Ctrl-C does nothing, traced or
    not. A suite started that way (`bash .ci/run &`, nohup) must still test what Ctrl-C does.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_prov_trace(args: list[str], cwd: Path, stdout, stderr) -> subprocess.Popen:
    """`python -m prov_trace ARGS` in its own session (so a stray compile worker can be cleaned up by group)."""
    return subprocess.Popen([sys.executable, "-m", "prov_trace", *args], cwd=cwd, stdout=stdout, stderr=stderr,
                            env={**os.environ, **LIGHT_ENV}, start_new_session=True, preexec_fn=_as_from_a_terminal)


def wait_for_probe_record(proc: subprocess.Popen, trace: Path, timeout: float) -> None:
    """Wait until the trace being written holds a probe record (the compile is under way)."""
    from prov_trace.stream.reader import TraceReadError, read_trace

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"prov-trace exited ({proc.returncode}) before any probe record")
        if trace.exists() and trace.stat().st_size:
            try:
                if any(r.get("kind") == schema.PROBE for r in read_trace(trace).records):
                    return
            except TraceReadError:
                pass
        time.sleep(0.5)
    raise AssertionError(f"no probe record in {trace} after {timeout} s")


def finish(proc: subprocess.Popen, timeout: float) -> int:
    """The exit status; on a timeout the process group this test started is killed and the test fails."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"prov-trace did not exit within {timeout} s of the signal") from None
    finally:
        try:  # a compile worker the run left behind, in the group this test started
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
