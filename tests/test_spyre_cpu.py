"""torch-spyre's real compile path on the CPU, through the Spyre CPU stand-in, traced with the spyre profile.

The torch-spyre source comes from ``../shared/third_party/torch-spyre-9a6b71e4.tar.gz``
(or ``$PROV_TRACE_TORCH_SPYRE_TARBALL``); without it these tests skip and name the file.
Each model is compiled once per session by the command line a user runs
(``prov-trace run MODEL --torch-spyre DIR``), in its own process: the stand-in patches
torch process-wide through ``torch_spyre._autoload``, and must not reach the pytest
process. Everything is written under pytest's temporary directories (the stand-in's C++
library into a session cache dir, Inductor's cache and the bundles into each run's dir).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
TARBALL_NAME = "torch-spyre-9a6b71e4.tar.gz"
TARBALL_ENV = "PROV_TRACE_TORCH_SPYRE_TARBALL"
STANDIN_LINE = "Spyre CPU stand-in: compile path real, kernels not run"

pytestmark = pytest.mark.compile


def _tarball() -> Path:
    explicit = os.environ.get(TARBALL_ENV)
    return Path(explicit) if explicit else (REPO.parent / "shared" / "third_party" / TARBALL_NAME)


def _need_tarball() -> Path:
    path = _tarball()
    if not path.is_file():
        pytest.skip(f"the torch-spyre source tarball {path} is not here (set {TARBALL_ENV} to its path)")
    return path


@pytest.fixture(scope="session")
def spyre_tree(tmp_path_factory) -> Path:
    """The tarball unpacked once into a session temp dir; returns the tree root (holding torch_spyre/)."""
    tarball = _need_tarball()
    dest = tmp_path_factory.mktemp("torch_spyre_src")
    with tarfile.open(tarball) as tf:
        tf.extractall(dest, filter="data")
    roots = [p.parent for p in dest.rglob("_C.pyi") if p.parent.name == "torch_spyre"]
    assert len(roots) == 1, f"expected one torch_spyre/_C.pyi in {tarball}, found {roots}"
    return roots[0].parent


@pytest.fixture(scope="session")
def spyre_env(tmp_path_factory) -> dict:
    """The environment of every stand-in process: this checkout first, temp dirs for everything it writes."""
    base = tmp_path_factory.mktemp("spyre_env")
    tmp = base / "tmp"
    tmp.mkdir()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1",
           "TMPDIR": str(tmp), "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.setdefault("PROV_TRACE_CACHE_DIR", str(base / "prov-trace-cache"))
    for var in ("TORCH_SPYRE_KTIR", "BUNDLE_SYMBOLIC_ARGS", "TORCH_SPYRE_FFDC", "TORCH_TRACE", "PROV_TRACE_TORCH_SPYRE",
                "TORCHINDUCTOR_CACHE_DIR"):
        env.pop(var, None)
    return env


def prov_trace(*args: str, env: dict, cwd: Path, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "prov_trace", *args], cwd=cwd, env={**env, **(extra_env or {})},
                          capture_output=True, text=True, timeout=1500)


class SpyreRun:
    """One `prov-trace run ... --torch-spyre TREE`: its process, trace, Markdown report, and report model."""

    def __init__(self, out: Path, proc: subprocess.CompletedProcess):
        import prov_trace

        self.out, self.proc = out, proc
        self.trace_path = out / "trace.msgpack"
        self.markdown = (out / "report.md").read_text()
        self.report = prov_trace.load(self.trace_path)
        self.model = self.report.model

    def trace(self):
        from prov_trace.stream.reader import read_trace

        return read_trace(self.trace_path)

    def note(self) -> dict:
        (note,) = [r["payload"] for r in self.trace().records if r.get("kind") == "note"]
        return note

    def graph(self, compile_id: str) -> dict:
        return next(g for g in self.model["graphs"] if g["compile_id"] == compile_id)

    def cell(self, compile_id: str, field: str, stage: str) -> tuple:
        """(state, n, total) of one matrix cell."""
        row = next(r for r in self.graph(compile_id)["matrix"] if r["field"] == field)
        c = row["cells"][stage]
        return c["state"], c["n"], c["total"]

    def sdsc_files(self) -> list[Path]:
        """The sdsc_*.json files, read from disk in the directories dxp_standalone was handed."""
        return sorted(p for b in self.note()["bundles"] for p in Path(b["dir"]).glob("sdsc_*.json"))


def _run(tree: Path, env: dict, out: Path, target: str, *args: str, options: tuple = (),
         extra_env: dict | None = None, expect: int = 0) -> SpyreRun:
    out.mkdir(parents=True)
    proc = prov_trace("run", "--torch-spyre", str(tree), "-o", str(out / "trace.msgpack"), "--report",
                      str(out / "report.md"), *options, target, *args, env=env, cwd=out,
                      extra_env={"TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache"), **(extra_env or {})})
    assert proc.returncode == expect and (out / "trace.msgpack").is_file(), (
        f"prov-trace run exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return SpyreRun(out, proc)


@pytest.fixture(scope="session")
def spyre_mlp(spyre_tree, spyre_env, tmp_path_factory) -> SpyreRun:
    """`prov-trace run examples/reference_mlp.py:SimpleMLP --profile spyre --torch-spyre TREE`, once."""
    out = tmp_path_factory.mktemp("spyre_mlp") / "out"
    return _run(spyre_tree, spyre_env, out, f"{REPO / 'examples' / 'reference_mlp.py'}:SimpleMLP",
                options=("--profile", "spyre"))


@pytest.fixture(scope="session")
def spyre_break(spyre_tree, spyre_env, tmp_path_factory) -> SpyreRun:
    """The graph break + cross-line fused matmul, with the tree given by $PROV_TRACE_TORCH_SPYRE and profile auto."""
    out = tmp_path_factory.mktemp("spyre_break") / "out"
    out.mkdir()
    proc = prov_trace("run", f"{TESTS / 'spyre_models.py'}:GraphBreakFused", "-o", str(out / "trace.msgpack"),
                      "--report", str(out / "report.md"), env=spyre_env, cwd=out,
                      extra_env={"PROV_TRACE_TORCH_SPYRE": str(spyre_tree),
                                 "TORCHINDUCTOR_CACHE_DIR": str(out / "inductor-cache")})
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    return SpyreRun(out, proc)


def _compute_nodes(stage: dict) -> list[dict]:
    return [o for o in stage["objects"] if o.get("kind") not in ("placeholder", "output", "get_attr")]


def _source_line(path: Path, text: str) -> int:
    return next(i + 1 for i, line in enumerate(path.read_text().splitlines()) if line.strip() == text)


# --- the reference MLP, end to end through the command line ---------------------------------------------


def test_mlp_compiles_then_says_once_that_the_kernels_were_not_run(spyre_mlp):
    err = spyre_mlp.proc.stderr
    assert f"prov-trace: {STANDIN_LINE}; torch-spyre from" in err
    assert "prov-trace: weights and inputs in float16: torch-spyre refuses float32 matmuls" in err
    notes = [ln for ln in err.splitlines() if "not run" in ln and "Spyre kernel" in ln]
    assert notes == ["prov-trace: compiled and traced; 1 Spyre kernel(s) not run (sdsc_fused_linear_relu_0): the CPU "
                     "stand-in compiles, running them needs a Spyre card"], err
    assert "Traceback" not in err
    assert spyre_mlp.model["trace"]["end"]["outcome"] == "ok"
    header = spyre_mlp.model["header"]
    assert header["standin"] == STANDIN_LINE and header["torch_spyre"]["mode"] == "stand-in"
    assert f"| Spyre | {STANDIN_LINE} (torch-spyre from" in spyre_mlp.markdown
    note = spyre_mlp.note()
    assert note["kernels_not_run"] == ["sdsc_fused_linear_relu_0"]
    assert note["counts"]["start_runtime"] == 1 and note["counts"]["launch_jobplan"] == 1


def test_mlp_every_spyre_hook_resolves_and_fires(spyre_mlp):
    from prov_trace.probes import profiles

    hooks = spyre_mlp.model["hooks"]
    assert len(hooks) == len(profiles.SPYRE.hooks)
    for h in hooks:
        # Dynamo's exception handler runs only for a compile that raised; save_cache_artifacts only when the
        # program asks for its cache artifacts.
        fired = h["fired"] >= 1 or h["target"] in ("torch._dynamo.convert_frame:exception_handler",
                                                    "torch.compiler:save_cache_artifacts")
        assert h["resolved"] and h["installed"] and fired and h["errors"] == 0, h
    assert spyre_mlp.model["errors"] == []
    counts = {s["stage"]: s["objects"] for s in spyre_mlp.model["summary"]}
    assert counts == {"source": 4, "pre_grad": 3, "post_grad": 7, "ir_pre": 5, "ir_post": 5, "kernel_spec": 5,
                      "artifact": 5}, counts


def test_mlp_matrix_as_measured(spyre_mlp):
    g = spyre_mlp.graph("0/0")
    post = _compute_nodes(g["stages"]["post_grad"])
    assert [n["name"] for n in post] == ["permute", "mm", "add", "relu", "permute_1", "mm_1", "add_1"]
    # The measured matrix docs/spyre.md quotes, cell by cell.
    assert spyre_mlp.cell("0/0", "stack_trace", "pre_grad") == ("all", 3, 3)
    assert spyre_mlp.cell("0/0", "stack_trace", "post_grad") == ("all", 7, 7)
    assert len(g["stages"]["post_grad"]["boundary"]) == 6  # 5 placeholders and the output, counted apart
    assert spyre_mlp.cell("0/0", "traceback", "ir_pre") == ("none", 0, 5)
    assert spyre_mlp.cell("0/0", "traceback", "ir_post") == ("none", 0, 5)
    assert spyre_mlp.cell("0/0", "get_stack_traces", "ir_pre") == ("all", 5, 5)
    assert spyre_mlp.cell("0/0", "get_stack_traces", "ir_post") == ("all", 5, 5)
    assert spyre_mlp.cell("0/0", "get_stack_traces", "kernel_spec") == ("all", 5, 5)
    assert spyre_mlp.cell("0/0", "origins", "kernel_spec") == ("all", 5, 5)
    assert spyre_mlp.cell("0/0", "debug_handle", "kernel_spec") == ("all", 5, 5)
    assert spyre_mlp.cell("0/0", "debug_handle", "artifact") == ("all", 5, 5)


def test_inject_rewrites_the_spyre_profiles_targets(spyre_mlp):
    """On 3.11 (inject) torch-spyre's hooks were watched with settrace: Dynamo's rules would trace
    third-party code, though nothing Dynamo compiles calls a compile-pipeline step. (3.12+: monitoring.)"""
    assert "inject can't instrument" not in spyre_mlp.proc.stderr, spyre_mlp.proc.stderr[-4000:]


def test_mlp_opspecs_and_sdsc_bundles(spyre_mlp):
    g = spyre_mlp.graph("0/0")
    specs = g["stages"]["kernel_spec"]["objects"]
    assert [s["name"] for s in specs] == ["buf0:batchmatmul", "buf1:add", "buf2:relufwd", "buf3:batchmatmul",
                                          "buf4:add"]
    # The report calls them what they are: five OpSpecs of one kernel (it said "5 kernels", and 1 kernel below).
    assert "0 of 5 OpSpecs carry no source at all." in spyre_mlp.markdown
    assert "Under torch-spyre the kernel spec counts OpSpecs" in spyre_mlp.markdown
    # The Artifact table shows an SDSC op's handle and lines, not the generated-code columns (all empty here).
    assert "| SDSC op | Kernel | `debug_handle_` | Source line |" in spyre_mlp.markdown
    assert "| Kernel | Kind | Def line | Call lines | Provenance comments |" not in spyre_mlp.markdown
    # the SDSC files on disk, in the directory get_output_dir returned, as dxp_standalone was handed them
    (bundle,) = spyre_mlp.note()["bundles"]
    assert bundle["accepted"] and bundle["sdsc_files"] == [f"sdsc_{i}.json" for i in range(5)]
    files = spyre_mlp.sdsc_files()
    assert len(files) == 5
    for f in files:
        (op,) = json.loads(f.read_text()).values()
        assert op["debug_handle_"]["source"]["file"].endswith("reference_mlp.py")
    assert len(g["stages"]["artifact"]["objects"]) == 5
    trace_dirs = {r["payload"]["output_dir"] for r in spyre_mlp.trace().records
                  if r.get("kind") == "probe" and r.get("phase") == "return"
                  and r.get("target", "").endswith(":get_output_dir")}
    assert trace_dirs == {bundle["dir"]}
    # each OpSpec's handle, field by field, and the bundle op that carries it
    buf0 = specs[0]["debug_handle_fields"]
    mlp = REPO / "examples" / "reference_mlp.py"
    assert buf0["source"] == {"file": str(mlp), "line": _source_line(mlp, "x = self.fc1(x)")}
    assert (buf0["aten_op"], buf0["ir_chain"], buf0["transform_history"]) == ("aten.linear.default",
                                                                              ["mm", "permute", "buf0"], [])
    assert [p["ir_chain"] for p in buf0["fused_from"]] == [["mm"], ["permute"]]
    assert spyre_mlp.model["spyre"]["op_specs"] == 5 and spyre_mlp.model["spyre"]["op_specs_in_no_bundle"] == []
    table = spyre_mlp.markdown.split("#### Spyre debug\\_handle", 1)[1]
    assert f"| `buf0:batchmatmul` | `{buf0['id']}` | `examples/reference_mlp.py:{buf0['source']['line']}` |" in table
    assert "`sdsc_fused_linear_relu_0/sdsc_0.json:0_batchmatmul` |" in table


def test_mlp_register_kernel_provenance_agrees_with_the_trace(spyre_mlp):
    regs = spyre_mlp.note()["kernel_provenance"]
    assert len(regs) == 1 and regs[0]["accepted"] and len(regs[0]["debug_handle_ids"]) == 5
    cc = spyre_mlp.model["spyre"]["crosscheck"]
    assert cc["agree"], cc
    (k,) = cc["kernels"]
    mlp = REPO / "examples" / "reference_mlp.py"
    expect = {f"{mlp}:{_source_line(mlp, t)}" for t in ("x = self.fc1(x)", "x = torch.relu(x)", "x = self.fc2(x)")}
    assert set(k["registered_sources"]) == set(k["trace_sources"]) == expect
    assert k["registered_ids"] == k["artifact_ids"] == regs[0]["debug_handle_ids"]
    section = spyre_mlp.markdown.split("### torch-spyre's own record: register\\_kernel\\_provenance", 1)[1]
    assert section.lstrip().startswith("Agrees: for each of the 1 kernel(s) torch-spyre registered")


def test_the_report_shows_where_a_perturbed_record_disagrees(spyre_mlp):
    from prov_trace.report import model
    from prov_trace.report.report import Report

    trace = spyre_mlp.trace()
    note = next(r for r in trace.records if r.get("kind") == "note")["payload"]
    ids = note["kernel_provenance"][0]["debug_handle_ids"]
    note["kernel_provenance"][0]["debug_handle_ids"] = list(reversed(ids))[:-1]
    rep = Report(model.build(trace))
    cc = rep.model["spyre"]["crosscheck"]
    assert not cc["agree"] and not cc["kernels"][0]["ids_agree"]
    assert "Disagrees: 0 of 1 registered kernel(s) agree with the trace" in rep.to_markdown()


def test_spyre_report_tables_are_the_same_in_markdown_and_html(spyre_break):
    from test_views import html_tables, md_headings, md_tables

    md, page = spyre_break.report.to_markdown(), spyre_break.report.to_html()
    md_t, (html_t, html_h) = md_tables(md), html_tables(page)
    assert md_t == html_t and md_headings(md) == html_h
    assert sum(1 for t in md_t if t[0][:2] == ["OpSpec", "id"]) == 2  # one Spyre debug_handle table per graph
    assert any(t[0][:2] == ["Graph", "Kernel"] and len(t) == 3 for t in md_t)  # the cross-check, one row per kernel


# --- a graph break and a fused op ----------------------------------------------------------------


def test_graph_break_compiles_both_graphs_and_fusion_shows_in_fused_from(spyre_break):
    assert "profile spyre: the model is on a spyre device" in spyre_break.proc.stderr
    assert spyre_break.note()["kernels_not_run"] == ["sdsc_fused_linear_relu_0", "sdsc_fused_mm_mul_t_0"]
    assert [g["compile_id"] for g in spyre_break.model["graphs"]] == ["0/0", "1/0"]
    models = TESTS / "spyre_models.py"
    # The spyre profile has no Dynamo graph hook: the break is read by the graph break hook, with Dynamo's reason.
    brk = spyre_break.graph("0/0")["graph_break"]
    assert brk["stack"][-1]["line"] == _source_line(models, 'print("graph break: Dynamo cannot put print() in a graph")') and "`print`" in brk["summary"], brk
    t_line, mm_line = _source_line(models, "w = self.proj.t()"), _source_line(models, "x = x @ w")
    handles = [op["debug_handle_"] for f in spyre_break.sdsc_files() for op in json.loads(f.read_text()).values()]
    fused = [h for h in handles if len({(p["source"] or {}).get("start_line") for p in h["fused_from"]}) > 1]
    assert len(fused) == 1, handles
    (h,) = fused
    assert sorted((p["source"]["start_line"], p["aten_op"]) for p in h["fused_from"]) == [
        (t_line, "aten.t.default"), (mm_line, "aten.mm.default")]
    assert h["source"]["start_line"] == mm_line  # the buffer's origin_node is the mm
    # the compiler-inserted restickify carries a handle with no source line
    assert any(h["source"] is None and h["ir_chain"][0].startswith("restickify") for h in handles)
    # ... and the report shows both, in graph 1/0's Spyre debug_handle table
    specs = {o["name"]: o["debug_handle_fields"] for o in spyre_break.graph("1/0")["stages"]["kernel_spec"]["objects"]}
    mm = specs["buf0:batchmatmul"]
    assert [(p["ir_chain"], p["aten_op"], p["source"]["line"]) for p in mm["fused_from"]] == [
        (["mm"], "aten.mm.default", mm_line), (["permute"], "aten.t.default", t_line)]
    assert mm["transform_history"] == [{"kind": "rewrite", "pass_name": "insert_restickify",
                                        "reason": "redirect consumer to restickified input"}]
    assert specs["buf3:ReStickifyOpHBM"]["source"] is None
    assert (f"`permute` `aten.t.default` `tests/spyre_models.py:{t_line}`" in spyre_break.markdown)
    assert spyre_break.cell("1/0", "get_stack_traces", "ir_post") == ("some", 3, 4)
    # The fused op carries both lines to the SDSC op too, through fused_from (its handle names the mm's line
    # only). The report counted the transpose's line lost from Kernel spec to Artifact, though the op has it.
    lines = lambda obj: sorted(s["line"] for s in obj["sources"] if s.get("file", "").endswith("spyre_models.py"))
    arts = [o for o in spyre_break.graph("1/0")["stages"]["artifact"]["objects"] if o.get("debug_handle_id")]
    fused_op = next(o for o in arts if o["debug_handle_id"] == str(h["id"]))
    assert lines(fused_op) == sorted({t_line, mm_line})
    assert lines(next(o for o in spyre_break.graph("1/0")["stages"]["kernel_spec"]["objects"]
                      if o["name"] == "buf0:batchmatmul")) == sorted({t_line, mm_line})
    # Lineage runs on to the Artifact stage: each OpSpec to the SDSC op holding its handle (names never match).
    lin = spyre_break.graph("1/0")["lineage"]
    ids = {n["id"]: n for n in lin["nodes"]}
    into_art = [e for e in lin["edges"] if ids[e["to"]]["stage"] == "artifact"]
    assert into_art and all(e["via"] == "debug_handle" for e in into_art), into_art
    spec_of = {ids[e["to"]]["name"]: ids[e["from"]]["name"] for e in into_art}
    assert spec_of[fused_op["name"]] == "buf0:batchmatmul"
    losses = spyre_break.graph("1/0")["losses"]
    assert not any(loss["to"] == "artifact" and any(ln["line"] == t_line for ln in loss["lines"]) for loss in losses), losses


def test_an_op_that_falls_back_to_the_cpu_is_named_as_a_fallback_not_a_removal(spyre_tree, spyre_env, tmp_path):
    """torch-spyre has no kernel for cumsum: Inductor makes it a FallbackKernel that runs as eager ATen on the CPU,
    and no OpSpec holds it. Its line was ranked as 'removed: no object here comes from the line's carriers'."""
    # Inductor's make_fallback raises for an op that has a decomposition when $CI is set (torch's own CI
    # guard), which torch-spyre's cumsum fallback meets: the model's compile needs it unset.
    env = {k: v for k, v in spyre_env.items() if k != "CI"}
    # On 3.11 the fallback op, run after the compile, raises in torch-spyre's own warning
    # (warnings.warn(skip_file_prefixes=...) is 3.12+): the compile is traced whole, the run ends with it.
    old_python = sys.version_info < (3, 12)
    run = _run(spyre_tree, env, tmp_path / "out", f"{TESTS / 'spyre_models.py'}:CpuFallback",
               expect=1 if old_python else 0)
    if old_python:
        assert "'skip_file_prefixes' is an invalid keyword argument for warn()" in run.proc.stderr
    else:
        assert "aten.cumsum.default is falling back to cpu" in run.proc.stderr
    line = _source_line(TESTS / "spyre_models.py", "return torch.cumsum(h, dim=-1)")
    (g,) = run.model["graphs"]
    ir = {o["name"]: o["kind"] for o in g["stages"]["ir_post"]["objects"]
          if any(s.get("line") == line for s in o["sources"])}
    assert sorted(ir.values()) == ["FallbackKernel", "MultiOutput"], ir
    row = next(r for r in g["survival"] if r["line"] == line)
    assert (row["last_stage"], row["lost_at"], row["lost_by"]) == ("ir_post", "kernel_spec", [])
    (loss,) = [x for x in g["losses"] if any(ln["line"] == line for ln in x["lines"])]
    assert loss["kind"] == ("fallback op (FallbackKernel, MultiOutput): runs as eager ATen outside the backend's "
                            "kernels, so no kernel spec holds it"), loss
    # The matmul's line, which torch-spyre compiles, reaches the SDSC bundle.
    fc = next(r for r in g["survival"] if r["line"] == _source_line(TESTS / "spyre_models.py", "h = self.fc(x)"))
    assert fc["last_stage"] == "artifact" and fc["lost_at"] is None, fc


def test_graph_break_register_kernel_provenance_agrees(spyre_break):
    cc = spyre_break.model["spyre"]["crosscheck"]
    assert cc["agree"], cc
    assert sorted(k["compile_id"] for k in cc["kernels"]) == ["0/0", "1/0"]


# --- the switch's other paths: targets, a script, KTIR, bad input ------------------------------------------


def test_targets_resolve_every_spyre_target_in_the_tree(spyre_tree, spyre_env, tmp_path):
    proc = prov_trace("targets", "--profile", "spyre", "--torch-spyre", str(spyre_tree), "--json", env=spyre_env,
                      cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    from prov_trace.probes import profiles

    assert len(out["targets"]) == len(profiles.SPYRE.hooks) and out["drifted"] == []
    assert all(t["file"].startswith(str(spyre_tree)) for t in out["targets"] if "torch_spyre" in t["target"])
    assert proc.stderr.startswith(f"prov-trace: {STANDIN_LINE}; torch-spyre from {spyre_tree}")


def test_a_script_stops_at_its_first_launch_after_the_compile(spyre_tree, spyre_env, tmp_path):
    script = tmp_path / "compile_scale.py"
    script.write_text("import sys\nimport torch\nsys.path.insert(0, sys.argv[1])\nfrom spyre_models import Scale\n"
                      "m = Scale().to(torch.float16).to('spyre')\n"
                      "x = torch.randn(4, 64, dtype=torch.float16).to('spyre')\n"
                      "with torch.no_grad():\n    torch.compile(m)(x)\nprint('the kernel ran')\n")
    run = _run(spyre_tree, spyre_env, tmp_path / "out", str(script), str(TESTS), expect=1)
    assert "the kernel ran" not in run.proc.stdout
    assert "KernelNotRun: Spyre CPU stand-in: the compile is complete, but the compiled Spyre kernel " \
           "sdsc_fused_add_mul_0 cannot run here" in run.proc.stderr
    assert "prov-trace: the program stopped at its first Spyre kernel launch" in run.proc.stderr
    assert run.note()["kernels_not_run"] == ["sdsc_fused_add_mul_0"] and run.note()["launch"] == "raise"
    # the compile had finished: its bundle was written and read back by the trace
    assert run.cell("0/0", "debug_handle", "artifact") == ("all", 2, 2)
    assert run.model["spyre"]["crosscheck"]["agree"]


def test_ktir_mode_is_reported_as_ktir(spyre_tree, spyre_env, tmp_path):
    run = _run(spyre_tree, spyre_env, tmp_path / "out", f"{TESTS / 'spyre_models.py'}:Scale",
               extra_env={"TORCH_SPYRE_KTIR": "1"}, expect=1)
    art = run.graph("0/0")["stages"]["artifact"]
    assert art["observed"] and art["objects"] == []
    assert art["note"].startswith("KTIR emitter (TORCH_SPYRE_KTIR=1): no .ktir file. define_kernel named "
                                  "ktir_fused_add_mul_0, but get_output_dir never returned a directory for it")
    assert "the run ended with InductorError: RuntimeError: OpSpec->KTIR: cannot compile for the device:" in art["note"]
    assert art["note"] in run.graph("0/0")["notes"]
    # the OpSpecs were built, with their handles, before the KTIR emitter refused
    assert run.cell("0/0", "debug_handle", "kernel_spec") == ("all", 2, 2)
    assert run.model["spyre"]["op_specs_in_no_bundle"] == ["0/0 buf0:mul", "0/0 buf1:add"]


def test_bad_torch_spyre_trees_are_one_sentence_exit_2(spyre_tree, spyre_env, tmp_path):
    proc = prov_trace("run", f"{REPO / 'examples' / 'reference_mlp.py'}:SimpleMLP", "--torch-spyre", str(tmp_path),
                      env=spyre_env, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"prov-trace: error: {tmp_path} is not a torch-spyre source tree: it has no torch_spyre package with a "
        "_C.pyi in it."], proc.stderr
    assert not (tmp_path / "prov-trace.msgpack").exists()
    # a tree whose _C.pyi (or Python) wants what the stand-in does not define: named, before anything is installed
    tree = tmp_path / "tree"
    pkg = tree / "torch_spyre"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "_C.pyi").write_text((spyre_tree / "torch_spyre" / "_C.pyi").read_text()
                                + "\ndef brand_new_runtime_call(x: int) -> int: ...\n")
    (pkg / "user.py").write_text("from torch_spyre._C import another_new_symbol\n")
    proc = prov_trace("targets", "--profile", "spyre", env=spyre_env, cwd=tmp_path,
                      extra_env={"PROV_TRACE_TORCH_SPYRE": str(tree)})
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("prov-trace: error:")]
    assert "missing: declared in its _C.pyi: brand_new_runtime_call; used by its Python code: another_new_symbol " \
           "(torch_spyre/user.py)" in line
    assert "Traceback" not in proc.stderr
    proc = prov_trace("run", "x.py:M", "--profile", "inductor-cpu", "--torch-spyre", str(spyre_tree), env=spyre_env,
                      cwd=tmp_path)
    assert proc.returncode == 2 and "only the spyre profile watches" in proc.stderr
    assert "PROV_TRACE_TORCH_SPYRE" not in proc.stderr
    # The same tree from the environment: the sentence says where it came from (it named only --torch-spyre).
    proc = prov_trace("run", "x.py:M", "--profile", "inductor-cpu", env=spyre_env, cwd=tmp_path,
                      extra_env={"PROV_TRACE_TORCH_SPYRE": str(spyre_tree)})
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        "prov-trace: error: --torch-spyre compiles through torch-spyre, which only the spyre profile watches: drop "
        "--profile inductor-cpu, or give --profile spyre (the torch-spyre tree comes from PROV_TRACE_TORCH_SPYRE, set "
        "in the environment)"], proc.stderr
    # A model on another device would compile with stock Inductor under a report that says torch-spyre did
    # (--device cpu exited 0 so); --device cuda was torch's traceback.
    mlp = f"{REPO / 'examples' / 'reference_mlp.py'}:SimpleMLP"
    for device in ("cpu", "cuda"):
        proc = prov_trace("run", mlp, "--torch-spyre", str(spyre_tree), "--device", device, env=spyre_env, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.splitlines() == [
            f"prov-trace: error: --torch-spyre compiles a model on the spyre device, not on {device}: drop --device "
            f"{device}, or drop --torch-spyre to compile it with stock Inductor"], proc.stderr
    (tmp_path / "afile").write_text("")
    proc = prov_trace("run", mlp, "--torch-spyre", str(tmp_path / "afile"), env=spyre_env, cwd=tmp_path)
    assert proc.returncode == 2 and "is not a torch-spyre source tree: it is a file" in proc.stderr
    assert not (tmp_path / "prov-trace.msgpack").exists()


# --- activate(): no leak, a real extension --------------------------------------------------------


def test_importing_prov_trace_installs_nothing(spyre_env):
    code = ("import sys, prov_trace, prov_trace.standin, prov_trace.probes.profiles, prov_trace.cli, prov_trace.api\n"
            "import torch\n"
            "print(sorted(m for m in sys.modules if m.startswith('torch_spyre')),"
            " torch._C._get_privateuse1_backend_name())\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=spyre_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.stdout.strip() == "[] privateuseone", proc.stdout + proc.stderr


def test_building_the_stand_in_adds_no_cuda_warning(spyre_env, tmp_path):
    """A CUDA build of torch without a GPU warns "No CUDA runtime is found" when cpp_extension is first imported;
    the stand-in's build imports it for its include paths, so that line was prov-trace's, before the program ran."""
    import torch

    if not torch.version.cuda:
        pytest.skip("a CPU build of torch logs no CUDA warning: nothing to leave out")
    bare = subprocess.run([sys.executable, "-c", "import torch.utils.cpp_extension"], env=spyre_env,
                          capture_output=True, text=True, timeout=300)
    if "No CUDA runtime is found" not in bare.stderr:
        pytest.skip("this machine's torch finds a CUDA runtime: it logs no such warning")
    code = ("import logging, sys; from pathlib import Path; from prov_trace.standin.spyre import native\n"
            "cmd = native._command('c++', Path(sys.argv[1]))\n"
            "logging.getLogger('torch.utils.cpp_extension').warning('No CUDA runtime is found, after the build')\n"
            "print(any(a.startswith('-I') for a in cmd))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "x.so")], env=spyre_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "True", proc.stdout + proc.stderr
    # Left out while prov-trace imports cpp_extension, and only then: the program's own warnings still reach it.
    warned = [ln for ln in proc.stderr.splitlines() if "No CUDA runtime" in ln]
    assert len(warned) == 1 and warned[0].endswith("No CUDA runtime is found, after the build"), proc.stderr


def test_stand_in_never_reached_this_process(spyre_mlp):
    assert "torch_spyre" not in sys.modules and "torch_spyre._C" not in sys.modules
    import torch

    assert torch._C._get_privateuse1_backend_name() == "privateuseone"


def test_a_real_extension_is_used_and_the_stand_in_never_installed(spyre_tree, spyre_env):
    # a stand-in for a real extension: any name resolves (to a mock), and it is not prov-trace's stand-in
    code = ("import sys, types; from unittest import mock\n"
            "real = types.ModuleType('torch_spyre._C'); real.__getattr__ = lambda name: mock.MagicMock(name=name)\n"
            "sys.modules['torch_spyre._C'] = real\n"
            "from prov_trace.api import activate_spyre, spyre_header\n"
            "s = activate_spyre(sys.argv[1], log=print)\n"
            "import torch\n"
            "print(s.mode, sys.modules['torch_spyre._C'] is real, s.calls(),"
            " torch._C._get_privateuse1_backend_name(), hasattr(torch.ops.prov_trace_spyre, 'host_view'))\n"
            "print(sorted(spyre_header(s)))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(spyre_tree)], env=spyre_env,
                          capture_output=True, text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 3 and "own native extension" in lines[0], proc.stdout + proc.stderr
    assert lines[1:] == ["real True [] spyre False", "['torch_spyre']"]


def test_an_extension_that_does_not_import_falls_back_to_the_stand_in_and_says_why(spyre_tree, spyre_env, tmp_path):
    import importlib.machinery
    import shutil

    tree = tmp_path / "tree"
    shutil.copytree(spyre_tree / "torch_spyre", tree / "torch_spyre")
    (tree / "torch_spyre" / ("_C" + importlib.machinery.EXTENSION_SUFFIXES[0])).write_bytes(b"not an ELF file")
    code = ("import sys\n"
            "from prov_trace.standin import activate\n"
            "s = activate(sys.argv[1])\n"
            "import torch_spyre._C as C\n"
            "print(s.mode, getattr(C, '__prov_trace_standin__', False))\nprint(s.description)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], env=spyre_env, capture_output=True,
                          text=True, timeout=600)
    lines = proc.stdout.strip().splitlines()
    assert lines[:1] == ["stand-in True"], proc.stdout + proc.stderr
    assert lines[1].startswith(f"{STANDIN_LINE} (the tree's own torch_spyre._C did not import: ImportError")


# --- pieces that need no torch-spyre -----------------------------------------------------------


def test_not_a_tree_is_one_sentence(tmp_path):
    from prov_trace.standin import NotATorchSpyreTree, activate

    with pytest.raises(NotATorchSpyreTree) as info:
        activate(tmp_path)
    msg = str(info.value)
    assert msg.endswith(".") and msg.count(". ") == 0 and str(tmp_path) in msg
    assert "torch_spyre._C" not in sys.modules


def test_ktir_files_become_the_artifact_stage(tmp_path):
    """KTIR mode with its files (this machine cannot make one: see docs/spyre.md): the probe's and reader's part."""
    from prov_trace.probes import spyre
    from prov_trace.report import model
    from prov_trace.stream.reader import Trace

    (tmp_path / "ktir_fused_add_0.ktir").write_text("module {}\n")
    out = spyre.read_bundle_dir("ktir_fused_add_0", str(tmp_path))
    assert out["files"] == [] and out["ktir_files"] == ["ktir_fused_add_0.ktir"] and out["emitter"] == "ktir"
    assert spyre.emitter_of("ktir_fused_add_0") == "ktir" and spyre.emitter_of("sdsc_fused_add_0") == "sdsc"
    assert spyre.emitter_of("triton_poi_0") is None
    env = {"kind": "probe", "compile_id": "0/0", "graph": "inference", "phase": "return"}
    records = [
        {**env, "stage": "artifact", "target": "torch_spyre._inductor.scheduler:SuperDSCScheduling.define_kernel",
         "payload": {"shape": "spyre.define_kernel", "emitter": "ktir",
                     "superdsc_kernel": {"kernel": "ktir_fused_add_0", "ops": [], "origins": ["add"]}}},
        {**env, "stage": "artifact", "target": spyre.TARGET_OUTPUT_DIR, "payload": {
            "shape": "spyre.output_dir", "kernel_name": "ktir_fused_add_0", "output_dir": str(tmp_path)}},
    ]
    records += [{**r, "kind": "probe", "phase": "finish"} for r in spyre.finish(records[1:])]
    rep = model.build(Trace(path="t", size=0, header={"profile": "spyre"}, records=records, end=None, problem=None,
                            repaired=0))
    art = rep["graphs"][0]["stages"]["artifact"]
    assert [(o["name"], o["kind"]) for o in art["objects"]] == [("ktir_fused_add_0/ktir_fused_add_0.ktir", "ktir")]
    assert art["note"].startswith("KTIR emitter (TORCH_SPYRE_KTIR=1): 1 .ktir file(s) (ktir_fused_add_0.ktir)")
    row = next(r for r in rep["graphs"][0]["matrix"] if r["field"] == "debug_handle")
    assert row["cells"]["artifact"]["state"] == "na"  # a .ktir file has no debug_handle slot


def test_layouts_as_the_cpp_computes_them():
    import torch

    from prov_trace.standin.spyre import layout as L

    fp16 = L.DataFormats.SEN169_FP16
    a = L.SpyreTensorLayout([256, 128], torch.float16)
    assert (a.device_size, a.stride_map, a.device_dtype) == ([2, 256, 64], [64, 128, 1], fp16)
    # a Linear weight moved with dim_order [1, 0]: the stick runs along dim 0
    w = L.SpyreTensorLayout([256, 128], [128, 1], torch.float16, [1, 0])
    assert (w.device_size, w.stride_map) == ([4, 128, 64], [8192, 1, 128])
    b = L.SpyreTensorLayout([2, 3, 4, 5], torch.float16)
    assert (b.device_size, b.stride_map) == ([3, 4, 1, 2, 64], [20, 5, 64, 60, 1])
    assert L.SpyreTensorLayout([], torch.float16).stride_map == [-1, -1]
    f32 = L.SpyreTensorLayout([2, 128], torch.float32)
    assert (f32.device_size, f32.device_dtype, f32.elems_per_stick()) == ([4, 2, 32], L.DataFormats.IEEE_FP32, 32)
    assert L.get_device_dtype(torch.bfloat16) is fp16 and L.get_elem_in_stick(torch.float16) == 64
    assert L.get_device_dtype(torch.float64) is L.DataFormats.INVALID
    assert str(L.DataFormats.IEEE_FP32) == "DataFormats.IEEE_FP32" and int(L.DataFormats.BOOL) == 16
    assert L.encode_constant(1.0, L.DataFormats.IEEE_FP32) == 0x3F800000
    # the generated wrapper writes repr() and evaluates it back
    scope = {"SpyreTensorLayout": L.SpyreTensorLayout, "DataFormats": L.DataFormats,
             "ElementArrangement": L.ElementArrangement}
    for layout in (a, w, b, w.with_element_arrangement(L.ElementArrangement.EXX2)):
        back = eval(repr(layout), scope)  # noqa: S307 - the repr is ours
        assert back == layout and hash(back) == hash(layout) and repr(back) == repr(layout)
    assert repr(w) == ("SpyreTensorLayout(device_size=[4, 128, 64], stride_map =[8192, 1, 128], "
                       "device_dtype=DataFormats.SEN169_FP16)")
    with pytest.raises(TypeError):
        L.SpyreTensorLayout([1, 2], [2, 1])


def test_dxp_standalone_stand_in_accepts_only_a_bundle(tmp_path):
    script = REPO / "prov_trace" / "standin" / "spyre" / "dxp_standin.py"
    log = tmp_path / "dxp.jsonl"
    env = {**os.environ, "PROV_TRACE_SPYRE_DXP_LOG": str(log), "PYTHONDONTWRITEBYTECODE": "1"}
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = subprocess.run([sys.executable, str(script), "-d", str(empty)], env=env, capture_output=True, text=True)
    assert bad.returncode == 1 and "no sdsc_*.json" in bad.stderr
    good = tmp_path / "bundle"
    good.mkdir()
    (good / "sdsc_0.json").write_text(json.dumps({"0_add": {"debug_handle_": None}}))
    ok = subprocess.run([sys.executable, str(script), "-d", str(good)], env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(e["accepted"], e["sdsc_files"], e["ops"]) for e in entries] == [(False, [], 0), (True, ["sdsc_0.json"], 1)]


def test_interface_reader_tells_torch_spyre_c_from_torch_c(tmp_path):
    from prov_trace.standin.spyre import pyi

    pkg = tmp_path / "torch_spyre"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("from torch_spyre._C import (alpha, beta as b)\nimport torch\ntorch._C._not_ours()\n")
    (pkg / "b.py").write_text("from torch import _C\n_C._dispatch_thing()\n")
    (pkg / "sub" / "c.py").write_text("from torch_spyre import _C as K\nK.gamma()\n"
                                      "def f(self):\n    return self._C.delta\n"
                                      "CODE = 'from torch_spyre._C import epsilon, zeta as z'\n")
    assert sorted(pyi.used_names(str(pkg))) == ["alpha", "beta", "delta", "epsilon", "gamma", "zeta"]


def test_spyre_payloads_of_the_wrong_shape_still_make_a_report():
    """A changed or hostile trace: the Spyre readers, notes and cross-check read wrong types as empty, never crash."""
    from prov_trace.report import markdown, model
    from prov_trace.report.report import Report
    from prov_trace.stream.reader import Trace

    env = {"kind": "probe", "compile_id": "0/0", "graph": "inference", "phase": "return"}
    records = [
        {**env, "stage": "kernel_spec", "payload": {"shape": "spyre.op_spec", "kernel": "buf0:add",
                                                    "debug_handle": {"value": {"id": [1], "source": "x",
                                                                               "fused_from": "ab", "ir_chain": 3}}}},
        {**env, "stage": "kernel_spec", "payload": {"shape": "spyre.op_spec", "debug_handle": "not a dict",
                                                    "op_spec": {"declared_fields": [1, None]}}},
        {**env, "stage": "artifact", "payload": {"shape": "spyre.define_kernel", "superdsc_kernel": "s",
                                                 "emitter": "ktir"}},
        {**env, "stage": "artifact", "phase": "finish", "payload": {"shape": "spyre.sdsc", "sdsc_bundles": [
            1, {"kernel": "ktir_x", "ktir_files": "nope", "files": 5}, {"files": [{"ops": [{"debug_handle": 7}]}]}]}},
        {"kind": "note", "payload": {"shape": "spyre.standin", "kernel_provenance": [{"debug_handle_ids": 5}, "x"],
                                     "bundles": [1, {"dir": 3}], "kernels_not_run": {}}},
    ]
    header = {"profile": "spyre", "standin": "Spyre CPU stand-in: compile path real, kernels not run",
              "torch_spyre": {"tree": "/t", "mode": "stand-in"}}
    rep = model.build(Trace(path="t", size=0, header=header, records=records, end=None, problem=None, repaired=0))
    assert rep["spyre"]["recorded"] and rep["spyre"]["registrations"] == 1
    text = markdown.render(rep)
    assert "## Spyre" in text and "Spyre debug\\_handle" in text
    Report(rep).to_html()


def test_a_run_on_torch_spyres_own_c_says_there_is_nothing_to_cross_check():
    from prov_trace.report import markdown, model
    from prov_trace.stream.reader import Trace

    header = {"profile": "spyre", "torch_spyre": {"tree": "/src/torch-spyre", "mode": "real"}}
    rep = model.build(Trace(path="t", size=0, header=header, records=[], end=None, problem=None, repaired=0))
    assert rep["spyre"]["mode"] == "real" and rep["spyre"]["crosscheck"] is None and rep["spyre"]["standin"] is None
    text = markdown.render(rep)
    assert "| Spyre | torch-spyre's own torch\\_spyre.\\_C (torch-spyre from /src/torch-spyre) |" in text
    assert "so there is no stand-in record of its `register_kernel_provenance` calls" in text
    assert "Spyre CPU stand-in" not in text
    assert model.build(Trace(path="t", size=0, header={"profile": "spyre"}, records=[], end=None, problem=None,
                             repaired=0))["spyre"] is None
