"""The reference MLP, audited end to end by the real CLI: the numbers come from that run."""

from __future__ import annotations

import re

import msgpack

from conftest import EXAMPLES, HAS_MONITORING
from inductor_trace import assert_matches_inductor


def _cells(graph):
    return {(r["layer"], r["field"]): r["cells"] for r in graph["matrix"]}


def test_run_writes_trace_report_and_summary(mlp_run):
    import prov_trace

    report = prov_trace.load(mlp_run.trace)
    # The report on disk is the report of the trace on disk, and the summary printed is the trace's.
    assert mlp_run.report.read_text() == report.to_markdown()
    assert mlp_run.proc.stdout.splitlines() == report.summary_lines()
    objects = {}
    for line in report.summary_lines()[1:]:
        title, rest = line[:29].strip(), line[29:]
        assert rest.startswith("fired "), line
        objects[title] = int(re.search(r" events?, (\d+) objects?", rest).group(1))
    assert objects == {"Source": 4, "Dynamo graph": 3, "FX pre-grad": 3, "AOT graph": 5, "FX post-grad": 5,
                       "LoopLevelIR (pre-pass)": 3, "LoopLevelIR (post-pass)": 3, "Kernel spec": 3, "Artifact": 3}
    expected = "monitoring" if HAS_MONITORING else "inject"
    assert f"prov-trace: backend {expected}: {expected} is the best backend available" in mlp_run.proc.stderr


def test_one_inference_graph_with_every_stage(mlp_run):
    model = mlp_run.model()
    assert model["trace"]["complete"]
    assert [g["label"] for g in model["graphs"]] == ["0/0 inference"]
    g = model["graphs"][0]
    for st in model["stage_order"]:
        assert g["stages"][st]["observed"], st
    # torch.export's and AOTInductor's hooks are not on a torch.compile's path (tests/test_backends_export.py),
    # and an inference graph has no backward for AOT's backward hook.
    # Dynamo's exception handler runs only for a compile that raised, save_cache_artifacts only for a program
    # that asks for its cache artifacts.
    export_only = ("torch.export._trace:_export", "torch._inductor.codecache:AotCodeCompiler.compile",
                   "torch._functorch._aot_autograd.graph_compile:_aot_stage2b_bw_compile",
                   "torch._dynamo.convert_frame:exception_handler", "torch.compiler:save_cache_artifacts")
    assert all(h["resolved"] and h["installed"] for h in model["hooks"]), model["hooks"]
    assert all(h["fired"] >= 1 for h in model["hooks"] if h["target"] not in export_only), model["hooks"]
    assert "export_graph" not in model["stage_order"]
    assert not model["errors"]


def test_matrix_values_measured_on_cpu(mlp_run):
    g = mlp_run.model()["graphs"][0]
    st = g["stages"]
    # Post-grad: the compute nodes permute, addmm, relu, permute_1, addmm_1; 5 placeholders and the output apart.
    post = [o["name"] for o in st["post_grad"]["objects"]]
    assert post == ["permute", "addmm", "relu", "permute_1", "addmm_1"]
    assert [o["name"] for o in st["post_grad"]["boundary"] if not o["name"].startswith("arg")] == ["output"]
    cells = _cells(g)
    assert cells[("FX", "stack_trace")]["post_grad"] == {**cells[("FX", "stack_trace")]["post_grad"], "state": "all", "n": 5, "total": 5}
    assert cells[("FX", "original_aten")]["pre_grad"]["state"] == "na"
    assert cells[("FX", "from_node")]["post_grad"]["n"] == 5
    # LoopLevelIR: buf0/buf2 are extern addmm, buf1 the relu ComputedBuffer; traceback is an unused slot.
    kinds = {o["name"]: o["kind"] for o in st["ir_pre"]["objects"]}
    assert kinds == {"buf0": "ExternKernelOut", "buf1": "ComputedBuffer", "buf2": "ExternKernelOut"}
    for stage in ("ir_pre", "ir_post"):
        assert cells[("IR", "origins")][stage]["state"] == "all"
        assert cells[("IR", "traceback")][stage] == {**cells[("IR", "traceback")][stage], "state": "none", "n": 0, "total": 3}
    # Kernel spec accounts for the extern kernels too: one C++ kernel, two extern addmm calls.
    ks = st["kernel_spec"]["objects"]
    assert sorted((k["kind"], k["kernel"]) for k in ks) == [
        ("extern", "extern_kernels.addmm"), ("extern", "extern_kernels.addmm"), ("generated", "cpp_fused_relu_0")]
    # Artifact: the extern calls carry Inductor's comment; the C++ kernel carries none.
    art = {o["name"]: o for o in st["artifact"]["objects"]}
    assert art["cpp_fused_relu_0"]["provenance_comments"] == []
    assert all(art[n]["provenance_comments"] for n in art if n.startswith("extern_kernels.addmm"))
    assert cells[("Backend", "provenance_comment")]["artifact"]["n"] == 2


def test_survival_rows_per_source_line(mlp_run):
    g = mlp_run.model()["graphs"][0]
    rows = {r["text"]: r for r in g["survival"]}
    assert set(rows) >= {"x = self.fc1(x)", "x = torch.relu(x)", "x = self.fc2(x)", "return x"}
    assert rows["x = self.fc1(x)"]["lost_at"] is None and rows["x = self.fc1(x)"]["last_stage"] == "artifact"
    relu = rows["x = torch.relu(x)"]
    assert relu["last_stage"] == "kernel_spec" and relu["lost_at"] == "artifact"
    assert relu["lost_by"] == ["cpp_fused_relu_0"]
    assert rows["return x"]["last_stage"] is None
    assert all(r["file"].endswith("reference_mlp.py") for r in g["survival"])


def test_trace_stream_records(mlp_run):
    with open(mlp_run.trace, "rb") as f:
        records = list(msgpack.Unpacker(f, raw=False))
    header, end = records[0], records[-1]
    assert header["kind"] == "header" and header["schema"] == "prov-trace" and header["version"][0] == 1
    for key in ("tool_version", "python", "torch", "platform", "backend", "backend_reason", "profile", "argv", "start_time"):
        assert key in header, key
    assert end["kind"] == "end" and end["outcome"] == "ok"
    assert [r["seq"] for r in records] == list(range(len(records)))
    probes = [r for r in records if r["kind"] == "probe"]
    for r in probes:
        for key in ("stage", "target", "phase", "compile_id", "graph", "thread", "payload", "t_ns"):
            assert key in r
    assert {r["compile_id"] for r in probes} == {"0/0"}
    # Source, the Dynamo graph and pre-grad come before AOT autograd names the graph's kind.
    assert {r["graph"] for r in probes if r["stage"] not in ("source", "dynamo_graph", "pre_grad")} == {"inference"}


def test_mappings_equal_inductors_own_record(mlp_provenance_run):
    model = mlp_provenance_run.model()
    assert assert_matches_inductor(model, mlp_provenance_run.workdir / "torch_trace") == 1
    g = model["graphs"][0]
    assert set(g["mappings"]["pre_to_post"]["x"]) == {"permute", "addmm"}


def test_report_command_rebuilds_the_same_report(mlp_run, tmp_path):
    from conftest import cli

    out = tmp_path / "again.md"
    proc = cli("report", str(mlp_run.trace), "-o", str(out), env={"PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == mlp_run.report.read_text()


def test_report_needs_no_torch(mlp_run):
    import subprocess
    import sys

    code = ("import sys, prov_trace; r = prov_trace.load(%r); r.to_markdown(); r.to_html(); r.to_json(); "
            "r.check('post_grad:stack_trace=any'); assert 'torch' not in sys.modules, 'torch imported'" % str(mlp_run.trace))
    subprocess.run([sys.executable, "-c", code], check=True)
