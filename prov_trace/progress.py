"""Live progress of a traced compile on stderr: each stage as it fires.

A `Progress` is the trace session's probe observer: the session calls it once per
probe record it writes (a target's entry or return, never another call), with the
record's stage, compile id, graph kind and payload. It keeps a running count of
objects per graph and stage and shows:

- on a terminal, one line rewritten in place: graph, stage, objects so far, elapsed time;
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

from prov_trace.stream import schema

#: Payload keys that hold a stage's object count, or a list of its objects, in the order tried.
_COUNT_KEYS = ("node_count", "op_count")
_LIST_KEYS = ("lines", "kernels", "sdsc_bundles", "nodes", "ops")


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
        self.counts: dict[tuple[str, str], int] = {}
        self.shown: set[tuple[str, str]] = set()
        self._line = False
        self._lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        stage = record.get("stage")
        if not isinstance(stage, str):
            return
        label = graph_label(record)
        key = (label, stage)
        with self._lock:
            n = self.counts.get(key, 0) + payload_objects(stage, record.get("payload"))
            self.counts[key] = n
            if self.tty:
                self._rewrite(self._text(label, stage, n))
            elif key not in self.shown:
                self.shown.add(key)
                self._write(self._text(label, stage, n) + "\n")

    def _text(self, label: str, stage: str, n: int) -> str:
        elapsed = self.clock() - self.t0
        return (f"prov-trace: [{label}] {self.titles.get(stage, stage)}: "
                f"{n} object{'s' if n != 1 else ''} so far, {elapsed:.1f} s")

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
        """Clear the terminal line, so prov-trace's next message starts on a clean line."""
        with self._lock:
            if self.tty and self._line:
                self._write("\r\x1b[K")
                self._line = False
