"""Summarise a prov-trace trace as plain data: per graph and stage, fired / objects / matrix cells; per hook, its state.

    python tests/compat/summarize.py TRACE [TRACE...]   -> JSON on stdout

Used by `make test-compat` (tests/compat/run_compat.py) to build the torch release x stage table of docs/compat.md,
and by hand to compare two torch releases. Reads the trace only (no torch import).
"""

from __future__ import annotations

import json
import sys
from typing import Any

SYM = {"all": "✅", "some": "◐", "none": "❌", "na": "➖", "empty": "∅", "unobserved": "⚠"}


def cell_text(c: dict[str, Any]) -> str:
    s = SYM.get(c["state"], c["state"])
    return f"{s} {c['n']}/{c['total']}" if c["state"] in ("all", "some", "none") else s


def summarize_model(model: dict[str, Any]) -> dict[str, Any]:
    graphs = []
    for g in model["graphs"]:
        stages = {}
        for st in model["stage_order"]:
            d = g["stages"].get(st) or {}
            stages[st] = {"fired": bool(d.get("observed")), "records": d.get("records", 0),
                          "objects": len(d.get("objects") or [])}
        cells = {f"{r['layer']}:{r['field']}": {st: cell_text(c) for st, c in r["cells"].items() if c["state"] != "na"}
                 for r in g["matrix"]}
        graphs.append({"label": g["label"], "stages": stages, "cells": {k: v for k, v in cells.items() if v},
                       "backend": g.get("backend"), "off_path": g.get("off_path") or {}})
    hooks = [{"stage": h.get("stage"), "target": h.get("target"), "resolved": bool(h.get("resolved")),
              "fired": int(h.get("fired") or 0), "errors": int(h.get("errors") or 0), "reason": h.get("reason")}
             for h in model["hooks"]]
    return {"torch": model["header"].get("torch"), "python": model["header"].get("python"),
            "backend": model["header"].get("backend"), "complete": model["trace"]["complete"],
            "errors": model["errors"], "graphs": graphs, "hooks": hooks,
            "frames_without_graph": model.get("frames_without_graph", [])}


def summarize(path: str) -> dict[str, Any]:
    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace

    return summarize_model(build(read_trace(path)))


if __name__ == "__main__":
    json.dump({p: summarize(p) for p in sys.argv[1:]}, sys.stdout, indent=1, ensure_ascii=False)
    print()
