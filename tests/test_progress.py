"""Live progress of a traced compile (issue 15): each stage as it fires, on stderr.

On a terminal (a real pseudo-terminal here) one line is rewritten in place; elsewhere
plain lines, at most one per stage per graph; ``--quiet`` silences it.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading

import pytest

import prov_trace
from conftest import REPO
from prov_trace.progress import Progress, payload_objects, payload_unit
from prov_trace.stream import schema

PROGRESS = re.compile(r"prov-trace: \[(?P<graph>[^\]]+)\] (?P<title>[^:]+): (?P<n>\d+) (?P<unit>[\w ]+?) so far, (?P<t>[\d.]+) s")
TITLES = {v: k for k, v in schema.STAGE_TITLES.items()}


def _rec(stage, payload, cid="0/0", graph="inference"):
    return {"stage": stage, "compile_id": cid, "graph": graph, "payload": payload}


def test_plain_lines_at_most_one_per_stage_per_graph():
    out = io.StringIO()
    clock = iter(range(100))
    p = Progress(out, tty=False, clock=lambda: float(next(clock)))
    p(_rec("post_grad", {"node_count": 11, "nodes": []}))
    p(_rec("kernel_spec", {"kernel": "k0", "ops": [1, 2]}))
    p(_rec("kernel_spec", {"kernel": "k1", "ops": [1]}))
    p(_rec("post_grad", {"node_count": 19}, graph="backward"))
    p.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "prov-trace: [0/0 inference] FX post-grad: 11 nodes so far, 1.0 s",
        "prov-trace: [0/0 inference] Kernel spec: 1 kernel so far, 2.0 s",
        "prov-trace: [0/0 backward] FX post-grad: 19 nodes so far, 3.0 s",
    ]
    assert p.counts[("0/0 inference", "kernel_spec", "kernels")] == 2


def test_a_terminal_gets_one_line_rewritten():
    out = io.StringIO()
    p = Progress(out, tty=True, clock=lambda: 0.0)
    p(_rec("ir_pre", {"op_count": 3}))
    p(_rec("kernel_spec", {"kernel": "k0"}))
    p(_rec("kernel_spec", {"kernel": "k1"}))
    p.close()
    text = out.getvalue()
    assert "\n" not in text
    assert text.count("\r\x1b[K") == 4 and text.endswith("\r\x1b[K")
    assert "Kernel spec: 2 kernels so far" in text


def test_a_compile_that_raised_is_said_on_a_line_of_its_own():
    """A compile_error record is no stage's objects: it says what the compile raised, on a terminal too
    (ending the rewritten line first), and its inner exception for a backend's failure."""
    out = io.StringIO()
    p = Progress(out, tty=True, clock=lambda: 0.0)
    p(_rec("ir_pre", {"op_count": 3}))
    p(_rec(schema.COMPILE_ERROR, {"error": {"type": "torch._inductor.exc.InductorError", "text": "x",
                                            "inner": {"type": "builtins.NotImplementedError",
                                                      "text": "cannot generate this kernel\nmore"}}}, graph=None))
    p(_rec(schema.COMPILE_ERROR, {"error": {"type": "torch._dynamo.exc.Unsupported"}}, cid="1/0", graph=None))
    p(_rec(schema.COMPILE_ERROR, "not a map", cid="2/0", graph=None))
    p(_rec(schema.COMPILE_ERROR, {"limit": {"name": "recompile_limit", "value": 8}}, cid="0/8", graph=None))
    p.close()
    text = out.getvalue()
    assert text.startswith("\r\x1b[Kprov-trace: [0/0 inference] LoopLevelIR (pre-pass): 3 ops so far, 0.0 s\r\x1b[K"), text
    assert ("prov-trace: [0/0] the compile raised InductorError, from NotImplementedError: cannot generate this "
            "kernel\n") in text
    assert "prov-trace: [1/0] the compile raised Unsupported\n" in text
    assert "prov-trace: [2/0] the compile raised an exception\n" in text
    assert "prov-trace: [0/8] Dynamo hit torch._dynamo.config.recompile_limit (8), so it stopped compiling this frame\n" in text
    assert not any(st == schema.COMPILE_ERROR for (_, st, _) in p.counts)


def test_object_counts_from_payloads():
    assert payload_objects("source", {"lines": [1, 2, 3, 4]}) == 4
    assert payload_objects("post_grad", {"node_count": 11, "nodes": [1]}) == 11
    assert payload_objects("ir_post", {"op_count": 3, "ops": []}) == 3
    assert payload_objects("kernel_spec", {"kernel": "cpp_fused_relu_0", "ops": [1, 2]}) == 1
    assert payload_objects("artifact", {"path": "x.py", "kernels": [1, 2]}) == 2
    assert payload_objects("fusion", {"args": {}}) == 1
    assert payload_objects("fusion", None) == 1


def test_each_count_names_what_it_counts():
    assert payload_unit({"lines": []}) == ("line", "lines")
    assert payload_unit({"node_count": 11, "nodes": []}) == ("node", "nodes")
    assert payload_unit({"op_count": 3}) == ("op", "ops")
    assert payload_unit({"kernel": "k", "ops": []}) == ("kernel", "kernels")
    assert payload_unit({"shape": "spyre.op_spec", "kernel": "buf0:add", "ops": []}) == ("OpSpec", "OpSpecs")
    assert payload_unit({"shape": "spyre.sdsc", "sdsc_bundles": []}) == ("SDSC bundle", "SDSC bundles")
    assert payload_unit({"args": {}}) == payload_unit(None) == ("object", "objects")
    # A stage whose records hold different kinds (torch-spyre's artifact: a kernel's name, its directory, its
    # bundles) counts each kind apart, never one number for all.
    out = io.StringIO()
    p = Progress(out, tty=True, clock=lambda: 0.0)
    p(_rec("artifact", {"shape": "spyre.define_kernel", "superdsc_kernel": {}}))
    p(_rec("artifact", {"shape": "spyre.output_dir", "kernel_name": "k"}))
    p(_rec("artifact", {"shape": "spyre.sdsc", "sdsc_bundles": [1, 2]}))
    p.close()
    assert "Artifact: 1 SuperDSC kernel so far" in out.getvalue()
    assert "Artifact: 2 SDSC bundles so far" in out.getvalue()


def test_a_broken_stderr_does_not_reach_the_traced_code():
    class Broken(io.StringIO):
        def write(self, s):
            raise OSError("stderr is gone")

    p = Progress(Broken(), tty=True)
    p(_rec("post_grad", {"node_count": 1}))
    p.close()


def _stage_lines(stderr: str) -> list[re.Match]:
    return [m for m in map(PROGRESS.fullmatch, stderr.splitlines()) if m]


def test_no_terminal_plain_lines_in_a_real_run(mlp_run):
    """`prov-trace run` of the MLP with stderr a pipe: each stage of the graph once, with its objects."""
    lines = _stage_lines(mlp_run.proc.stderr)
    keys = [(m["graph"].split()[0], m["title"]) for m in lines]
    assert len(keys) == len(set(keys)), keys  # never more than one per stage per graph
    titles = [m["title"] for m in lines]
    # Every stage a torch.compile reaches (the export graph is torch.export's).
    assert titles == [schema.STAGE_TITLES[s] for s in schema.STAGES if s != schema.EXPORT_GRAPH], titles
    counts = {TITLES[m["title"]]: int(m["n"]) for m in lines}
    assert counts["ir_pre"] == 3 and counts["post_grad"] > 0 and counts["source"] > 0
    # Each count is named for what it counts, and an FX stage's is the report's objects and boundary together.
    units = {TITLES[m["title"]]: m["unit"] for m in lines}
    assert units["source"] == "lines" and units["post_grad"] == "nodes" and units["ir_pre"] == "ops", units
    g = prov_trace.load(mlp_run.trace).model["graphs"][0]
    for st in (schema.DYNAMO_GRAPH, schema.PRE_GRAD, schema.AOT_GRAPH, schema.POST_GRAD):
        assert counts[st] == len(g["stages"][st]["objects"]) + len(g["stages"][st]["boundary"]), st
    assert "\r" not in mlp_run.proc.stderr and "\x1b" not in mlp_run.proc.stderr
    times = [float(m["t"]) for m in lines]
    assert times == sorted(times)


TINY = """\
import torch

@torch.compile
def tiny(x):
    return torch.relu(x) + 1

with torch.no_grad():
    print("result", tiny(torch.ones(4)).sum().item())
"""


def _run_on_a_pty(tmp_path, *opts: str) -> tuple[int, str, str]:
    """`prov-trace run tiny.py` with stderr on a pseudo-terminal; (status, stdout, what the terminal got)."""
    (tmp_path / "tiny.py").write_text(TINY)
    master, slave = os.openpty()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1", "COLUMNS": "200",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "prov_trace", "run", *opts, "-o", "t.msgpack", "--no-report", "tiny.py"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    stdout, _ = proc.communicate(timeout=600)
    reader.join(timeout=30)
    os.close(master)
    return proc.returncode, stdout.decode(), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.compile
def test_a_terminal_sees_each_stage_on_one_line_and_quiet_silences_it(tmp_path):
    (tmp_path / "loud").mkdir()
    code, stdout, term = _run_on_a_pty(tmp_path / "loud")
    assert code == 0 and "result 8.0" in stdout, term[-3000:]
    updates = [u for u in term.split("\r\x1b[K") if u.startswith("prov-trace: [")]
    # Every stage showed up as it fired, each update rewriting the same line: none ends its line ...
    shown = {PROGRESS.match(u)["title"] for u in updates}
    assert shown == {schema.STAGE_TITLES[s] for s in schema.STAGES} - {"Export graph"}, updates  # a torch.compile, no export
    assert not re.search(r"so far, [\d.]+ s\r?\n", term), term[-3000:]
    # ... and the line is cleared before prov-trace's next message, which starts on a clean line.
    assert "\r\x1b[Kprov-trace: trace written to t.msgpack" in term, term[-3000:]

    (tmp_path / "quiet").mkdir()
    code, stdout, term = _run_on_a_pty(tmp_path / "quiet", "--quiet")
    assert code == 0 and "result 8.0" in stdout
    assert "so far" not in term and "\x1b[K" not in term
    assert "prov-trace: trace written to t.msgpack" in term


def test_the_summary_names_five_stopped_compiles_and_counts_the_rest_limits_too():
    """On the pure function: six frames stopped, five by an exception and one at the recompile limit; the
    summary names five, and its last line counts the one it cut, whichever kind it was."""
    from prov_trace.report.views import _raised_lines

    err = {"type": "torch._dynamo.exc.Unsupported", "text": "x"}
    frames = [{"compile_id": f"{i}/0", "stopped_in": {"error": err}} for i in range(5)]
    frames.append({"compile_id": "5/8", "stopped_in": {"limit": {"name": "recompile_limit", "value": 8}}})
    lines = _raised_lines({"graphs": [], "frames_without_graph": frames})
    assert lines[:5] == [f"  [{i}/0] the compile raised Unsupported: x" for i in range(5)]
    assert lines[5:] == ["  and 1 more compiles that raised or hit a recompile limit (the report lists them)"]
    frames.pop(0)
    assert _raised_lines({"graphs": [], "frames_without_graph": frames})[-1] == (
        "  [5/8] Dynamo hit torch._dynamo.config.recompile_limit (8), so it stopped compiling this frame")
