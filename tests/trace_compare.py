"""Compare two traces of the same compile: normalise what differs between any two processes, then diff."""

from __future__ import annotations

import os
import re
from typing import Any

TIMING = {"t_ns", "probe_ns"}
HEADER_VOLATILE = {"backend", "backend_reason", "tool_id", "pid", "start_time", "run_id", "argv"}  # argv: the command, -o and --backend included
_ID_KEY = re.compile(r"^\d{6,}$")


class _Normaliser:
    """Rewrites one trace's process-specific values into stable ones; id()-numbers by first appearance."""

    def __init__(self) -> None:
        self.ids: dict[Any, str] = {}

    def _id(self, value: Any) -> str:
        return self.ids.setdefault(value, f"<id{len(self.ids)}>")

    def record(self, rec: dict) -> dict:
        rec = self.value(rec)
        if rec["kind"] == "header":
            for key in HEADER_VOLATILE:
                rec.pop(key, None)
        if isinstance(rec.get("thread"), dict):
            rec["thread"] = {**rec["thread"], "id": None}
        payload = rec.get("payload")
        if rec.get("stage") == "artifact" and isinstance(payload, dict) and isinstance(payload.get("path"), str):
            payload["path"] = os.path.basename(payload["path"])
        return rec

    def value(self, v: Any) -> Any:
        if isinstance(v, dict):
            out = {}
            for k, x in v.items():
                if k in TIMING:
                    continue
                if k == "graph_id" and x is not None:
                    out[k] = self._id(x)
                elif k in ("origin_graph", "graph") and isinstance(x, int) and not isinstance(x, bool):
                    out[k] = self._id(x)  # the IR probes' FX graph ids (a record's own `graph` is a kind: str)
                elif k == "graphs" and isinstance(x, list):
                    out[k] = [self._id(g) if isinstance(g, int) else g for g in x]
                elif isinstance(k, str) and _ID_KEY.match(k):
                    out[self._id(k)] = self.value(x)
                else:
                    out[k] = self.value(x)
            return out
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v


def normalised(records: list[dict]) -> list[dict]:
    n = _Normaliser()
    return [n.record(r) for r in records]


def shape(records: list[dict]) -> list[tuple]:
    return [(r["kind"], r.get("stage"), r.get("target"), r.get("phase"), r.get("compile_id"), r.get("graph"))
            for r in records]


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += differences(a.get(k, "<missing>"), b.get(k, "<missing>"), f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r:.200} != {b!r:.200}"]


