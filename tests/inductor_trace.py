"""Read Inductor's own provenance record from a TORCH_TRACE directory, and compare a trace with it.

Inductor 2.13 (with INDUCTOR_PROVENANCE=1) logs `inductor_provenance_tracking_node_mappings`
per compiled graph: preToPost, postToPre, cppCodeToPost, postToCppCode. Kernel keys carry a
debug-handle suffix (`extern_kernels.addmm:1`), a global counter we do not reproduce; the
check compares kernel names with the suffix removed, merging repeats.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def artifacts(trace_dir: Path, name: str) -> list[dict[str, Any]]:
    """Each JSON payload of the named structured-trace artifact, in log order."""
    out = []
    for log in sorted(Path(trace_dir).glob("*.log")):
        lines = log.read_text(errors="replace").splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            i += 1
            if '"artifact"' not in line or f'"name": "{name}"' not in line:
                continue
            payload = []
            while i < len(lines) and lines[i].startswith("\t"):
                payload.append(lines[i][1:])
                i += 1
            out.append(json.loads("\n".join(payload)))
    return out


def _strip(mapping: dict[str, list[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for key, names in mapping.items():
        out.setdefault(key.rsplit(":", 1)[0], set()).update(names)
    return out


def assert_matches_inductor(model: dict[str, Any], trace_dir: Path) -> int:
    """Every graph's kernel->post and pre->post mappings equal Inductor's record. Returns graphs compared."""
    records = artifacts(trace_dir, "inductor_provenance_tracking_node_mappings")
    assert records, f"no inductor_provenance_tracking_node_mappings artifact in {trace_dir}"
    graphs = [g for g in model["graphs"] if g["stages"]["kernel_spec"]["observed"]]
    assert len(graphs) == len(records), f"{len(graphs)} traced graphs with kernels vs {len(records)} Inductor records"
    compared = 0
    for g, rec in zip(graphs, records):
        if "cppCodeToPost" not in rec:
            # Inductor 2.13 records nothing for some graphs (a backward graph logs only {"version": 2.0}).
            continue
        compared += 1
        ours_k = {k: set(v) for k, v in _strip(g["mappings"]["kernel_to_post"]).items()}
        theirs_k = _strip(rec["cppCodeToPost"])
        assert ours_k == theirs_k, f"graph {g['label']}: kernel->post differs\nours:   {ours_k}\ntheirs: {theirs_k}"
        ours_p = {k: set(v) for k, v in g["mappings"]["pre_to_post"].items()}
        theirs_p = {k: set(v) for k, v in rec["preToPost"].items()}
        assert ours_p == theirs_p, f"graph {g['label']}: pre->post differs\nours:   {ours_p}\ntheirs: {theirs_p}"
    return compared


def assert_artifact_matches_file(model: dict[str, Any]) -> int:
    """Every kernel in each emitted file is in the artifact scan, at the lines and with the comments the file has."""
    import re

    checked = 0
    for g in model["graphs"]:
        art = g["stages"]["artifact"]
        for path in art.get("files", []):
            lines = Path(path).read_text().splitlines()
            objs = [o for o in art["objects"] if o["file"] == path]
            defined = {m.group(1) for m in (re.match(r"^(\w+) = async_compile\.", ln) for ln in lines) if m}
            assert defined == {o["kernel"] for o in objs if o["kind"] == "generated"}, path
            extern_calls = sum(1 for ln in lines if re.match(r"^\s+extern_kernels\.\w+\(", ln))
            assert extern_calls == sum(1 for o in objs if o["kind"] == "extern"), path
            for o in objs:
                for ln in ([o["def_line"]] if o["def_line"] else []) + o["call_lines"]:
                    assert o["kernel"] in lines[ln - 1], (path, ln, o["kernel"])
                above = set()
                for ln in ([o["def_line"]] if o["def_line"] else []) + o["call_lines"]:
                    i = ln - 2
                    while i >= 0 and lines[i].lstrip().startswith("#"):
                        above.add(lines[i].strip())
                        i -= 1
                assert set(o["provenance_comments"]) <= above, (path, o["name"])
                assert {c for c in above if "Topologically Sorted Source Nodes" in c} <= set(o["provenance_comments"]), o["name"]
                checked += 1
    return checked
