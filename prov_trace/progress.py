"""Live progress of a traced compile on stderr: each stage as it fires.

A `Progress` is the trace session's probe observer: the session calls it once per
probe record it writes (a target's entry or return, never another call), with the
record's stage, compile id, graph kind and payload. It keeps a running count of
objects per graph and stage and shows:

- on a terminal, one line rewritten in place: graph, stage, objects so far (named for what they are:
  nodes, ops, kernels), elapsed time;
- elsewhere (a file, a pipe, CI's log), a plain line the first time each stage fires
  in each graph, and never more than that.

It does no work between records: no thread, no timer, nothing per non-target call.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from typing import Any, Callable, TextIO

from prov_trace import voice
from prov_trace.stream import schema

#: Payload keys that hold a stage's object count, or a list of its objects, in the order tried.
_COUNT_KEYS = ("node_count", "op_count")
_LIST_KEYS = ("lines", "kernels", "sdsc_bundles", "nodes", "ops")

#: What a payload's objects are, by the key that holds them or by the payload's shape: (one, several).
#: An FX graph's count is all its nodes, placeholders and output included (the report counts its compute
#: nodes and the rest apart); each unit is counted on its own, so a stage's counts never mix kinds.
_UNITS = {
    "lines": ("line", "lines"), "node_count": ("node", "nodes"), "nodes": ("node", "nodes"),
    "op_count": ("op", "ops"), "ops": ("op", "ops"), "kernel": ("kernel", "kernels"), "kernels": ("kernel", "kernels"),
    "sdsc_bundles": ("SDSC bundle", "SDSC bundles"),
    "spyre.op_spec": ("OpSpec", "OpSpecs"), "spyre.define_kernel": ("SuperDSC kernel", "SuperDSC kernels"),
    "spyre.output_dir": ("output directory", "output directories"),
}
_OBJECT = ("object", "objects")


def payload_objects(stage: str, payload: Any) -> int:
    """How many stage objects one probe record's payload holds (a kernel spec record holds one kernel)."""
    if not isinstance(payload, dict):
        return 1
    if "kernel" in payload:
        return 1
    for key in _COUNT_KEYS:
        if isinstance(payload.get(key), int):
            return payload[key]
    for key in _LIST_KEYS:
        value = payload.get(key)
        if value is not None and hasattr(value, "__len__"):
            try:
                return len(value)
            except Exception:  # noqa: BLE001
                return 1
    return 1


def payload_unit(payload: Any) -> tuple[str, str]:
    """What `payload_objects` counts in this payload, as (one, several): ``("node", "nodes")``."""
    if not isinstance(payload, dict):
        return _OBJECT
    shape = payload.get("shape")
    if isinstance(shape, str) and shape in _UNITS:
        return _UNITS[shape]
    if "kernel" in payload:
        return _UNITS["kernel"]
    for key in (*_COUNT_KEYS, *_LIST_KEYS):
        if payload.get(key) is not None:
            return _UNITS.get(key, _OBJECT)
    return _OBJECT


def graph_label(record: dict[str, Any]) -> str:
    """The graph a record belongs to, as the report labels it (``0/0 inference``), or what is known of it."""
    parts = [str(p) for p in (record.get("compile_id"), record.get("graph")) if p]
    return " ".join(parts) or "compile"


class Progress:
    """Shows a traced compile's stages as they fire; ``close()`` when tracing ends."""

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, titles: dict[str, str] | None = None):
        self.stream = stream if stream is not None else sys.stderr
        if tty is None:
            try:
                tty = bool(self.stream.isatty())
            except Exception:  # noqa: BLE001
                tty = False
        self.tty = tty
        self.clock = clock
        self.titles = titles or schema.STAGE_TITLES
        self.t0 = clock()
        self.counts: dict[tuple[str, str, str], int] = {}
        self.shown: set[tuple[str, str]] = set()
        self.said_once: set[str] = set()
        #: A graph break said once its compile goes on: Dynamo also ends a graph at a break in a frame it then
        #: gives up on (an LSTM), whose compile raises next and which the summary lists as raised, not as broken.
        self.held: tuple[Any, str, str] | None = None
        self._line = False
        self._lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        stage = record.get("stage")
        if not isinstance(stage, str):
            return
        label = graph_label(record)
        payload = record.get("payload")
        with self._lock:
            held, self.held = self.held, None
        # A frame Dynamo skipped (no op to trace) is said nowhere live: common, and no failure.
        skipped = stage == schema.COMPILE_ERROR and isinstance(payload, dict) and "skipped" in payload
        raised = stage == schema.COMPILE_ERROR and not skipped
        if held is not None and not (raised and record.get("compile_id") == held[0]):
            self._say(held[1], held[2])
        if skipped:
            return
        if stage in schema.SIDE_STAGES:  # not a stage's objects: why a compile stopped, a graph break, a notice
            said = self._side_line(stage, payload if isinstance(payload, dict) else {})
            if said is None:
                return
            line = f"{voice.name()}: {said}\n" if stage == schema.NOTICE else f"{voice.name()}: [{label}] {said}\n"
            if stage == schema.GRAPH_BREAK:
                with self._lock:
                    self.held = (record.get("compile_id"), said, line)
                return
            self._say(said, line, once=stage != schema.COMPILE_ERROR)
            return
        unit = payload_unit(payload)
        with self._lock:
            n = self.counts.get((label, stage, unit[1]), 0) + payload_objects(stage, payload)
            self.counts[(label, stage, unit[1])] = n
            if self.tty:
                self._rewrite(self._text(label, stage, n, unit))
            elif (label, stage) not in self.shown:
                self.shown.add((label, stage))
                self._write(self._text(label, stage, n, unit) + "\n")

    def _side_line(self, stage: str, payload: dict[str, Any]) -> str | None:
        """The line for a record of no stage: why a compile stopped, a graph break site or a notice; None for
        nothing to say. `_say` writes the last two once each."""
        from prov_trace.report.text import break_site, error_summary, graph_break_summary, limit_summary

        if stage == schema.COMPILE_ERROR:
            limit = limit_summary(payload.get("limit"))
            return limit or f"the compile raised {error_summary(payload.get('error')) or 'an exception'}"
        if stage == schema.GRAPH_BREAK:
            brk = payload.get("graph_break")
            brk = {**brk, "summary": graph_break_summary(brk)} if isinstance(brk, dict) else None
            where = break_site(brk)
            said = f"graph break at {where}: {brk['summary']}" if where is not None and brk else None
        else:
            notice = payload.get("notice") if isinstance(payload.get("notice"), dict) else {}
            said = notice.get("text") if isinstance(notice.get("text"), str) else None
        return said

    def _say(self, said: str, line: str, once: bool = True) -> None:
        """Write a side line on a line of its own; with `once`, only the first time (a recompile breaks at the
        same line again)."""
        with self._lock:
            if once and said in self.said_once:
                return
            self.said_once.add(said)
            if self.tty and self._line:
                self._write("\r\x1b[K")
                self._line = False
            self._write(line)

    def _text(self, label: str, stage: str, n: int, unit: tuple[str, str] = _OBJECT) -> str:
        elapsed = self.clock() - self.t0
        return f"{voice.name()}: [{label}] {self.titles.get(stage, stage)}: {n} {unit[n != 1]} so far, {elapsed:.1f} s"

    def _rewrite(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns
        self._write("\r\x1b[K" + text[: max(width - 1, 20)])
        self._line = True

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:  # noqa: BLE001 - a closed or broken stderr must not reach the traced code
            pass

    def close(self) -> None:
        """Say a graph break still held, and clear the terminal line, so prov-trace's next message starts on a
        clean line."""
        with self._lock:
            held, self.held = self.held, None
        if held is not None:
            self._say(held[1], held[2])
        with self._lock:
            if self.tty and self._line:
                self._write("\r\x1b[K")
                self._line = False
