"""Built-in profiles: stock targets resolve on this torch; the spyre and triton probes read real objects.

One small model is compiled once, in process (the `stock` fixture), and the probes
of the `spyre` and `inductor-triton` profiles run on the real stock objects of the
types they read: FX graphs, a GraphLowering and its ComputedBuffers, scheduler nodes.

torch-spyre cannot run here. Its OpSpec, DebugHandle and sdsc_*.json are therefore
built in this file TO THE SHAPES DOCUMENTED in docs/profiles.md (read from
torch-spyre's source): they are shapes, NOT torch-spyre output. The same goes for the
stand-in `torch_spyre` package written by `fake_spyre`: it only puts functions with
the documented names and signatures at the documented paths, so that the `spyre`
profile's own target strings, its type(self) filter and its after-the-compile
SDSC read can be exercised end to end through a real TraceSession.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from conftest import HAS_MONITORING, cli
from prov_trace.stream import schema
from prov_trace.probes import profiles, spyre
from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, Profile
from prov_trace.tracer import drift

THIS_FILE = os.path.abspath(__file__)


# --- shapes of torch-spyre's objects (NOT torch-spyre output) --------------------------------


@dataclasses.dataclass(frozen=True)
class SourceLocShape:
    """The shape of torch_spyre._inductor.op_spec.SourceLoc (MLIR FileLineColRange fields)."""

    file: str
    start_line: int
    start_col: int = 0
    end_line: int | None = None
    end_col: int | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class DebugHandleShape:
    """The shape of torch_spyre._inductor.op_spec.DebugHandle; to_dict() writes the id as a string."""

    id: int
    source: SourceLocShape | None
    aten_op: str | None
    ir_chain: tuple = ()
    fused_from: tuple = ()
    transform_history: tuple = ()

    def to_dict(self) -> dict:
        return {"id": str(self.id), "source": self.source.to_dict() if self.source else None,
                "aten_op": self.aten_op, "ir_chain": list(self.ir_chain),
                "fused_from": [h.to_dict() for h in self.fused_from], "transform_history": list(self.transform_history)}


@dataclasses.dataclass
class OpSpecShape:
    """The shape of torch_spyre._inductor.op_spec.OpSpec (mid 2026)."""

    op: str
    is_reduction: bool
    iteration_space: dict
    args: list
    op_info: dict
    tiled_symbols: list = dataclasses.field(default_factory=list)
    symbolic_dim_bounds: dict = dataclasses.field(default_factory=dict)
    debug_handle: DebugHandleShape | None = None


@dataclasses.dataclass
class OpSpecBeforeProvenance:
    """The shape of OpSpec before torch-spyre added debug_handle (late 2025): no provenance field."""

    op: str
    is_reduction: bool
    iteration_space: dict
    args: list
    op_info: dict


class KernelShape:
    """What create_op_spec's `self` is read for: `current_node` (a scheduler node, whose `.node` is the IR op)."""

    def __init__(self, current_node: Any):
        self.current_node = current_node


def sdsc_doc(ops: dict[str, Any]) -> dict:
    """An sdsc_*.json document: {"<n>_<op>": {"debug_handle_": to_dict() | null, ...other SDSC keys}}."""
    return {key: {"debug_handle_": handle, "sdscFoldProps_": [{"factor_": 1, "label_": "time"}],
                  "numCoresUsed_": 1, "coreIdToDsc_": {"0": 0}} for key, handle in ops.items()}


# --- the model and the one in-process compile ------------------------------------------------


def _model():
    import torch
    from torch import nn

    class Tiny(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 16)

        def forward(self, x):
            x = self.fc(x)
            x = torch.relu(x) * 2
            return x

    return Tiny


RELU_TEXT = "x = torch.relu(x) * 2"


def _relu_line() -> int:
    lines, first = inspect.getsourcelines(_model)
    return first + next(i for i, ln in enumerate(lines) if ln.strip() == RELU_TEXT)


class _Pipeline:
    """Stands in for the `self` of a Spyre pass pipeline where a probe only reports its type."""


@pytest.fixture(scope="session")
def stock(tmp_path_factory) -> dict[str, Any]:
    """Compile the tiny model once; keep the real objects, and the spyre/triton probes' output taken live."""
    import torch

    from prov_trace import runner
    from prov_trace.probes.context import inductor_context
    from prov_trace.stream.reader import read_trace
    from prov_trace.tracer.session import TraceSession
    from prov_trace.stream.writer import TraceWriter

    got: dict[str, Any] = {"define_kernel": [], "spyre_kernel": [], "triton_kernel": [], "triton_def": []}

    def pre(call):
        gm = call.arg("gm")
        got["pre_gm"] = gm
        got["spyre_pre"] = spyre.probe_fx(ProbeCall(ENTRY, {"self": _Pipeline(), "graph": gm.graph}))
        return {}

    def post(call):
        gm = call.arg("gm")
        got["post_gm"] = gm
        got["spyre_post"] = spyre.probe_fx(ProbeCall(ENTRY, {"self": _Pipeline(), "graph": gm.graph}))
        return {}

    def lowering(call):
        graph = call.arg("self")
        got["graph"] = graph
        got["ops"] = list(graph.operations)
        locals_ = {"self": _Pipeline(), "graph": graph}
        got["spyre_ir_pre"] = spyre.probe_ir(ProbeCall(ENTRY, locals_))
        got["spyre_ir_post"] = spyre.probe_ir(ProbeCall(RETURN, locals_))
        return {}

    def scheduler(call):
        got["snodes"] = list(call.arg("self").nodes)
        return {}

    def define_kernel(call):
        from torch._inductor.codegen.simd_kernel_features import DisableReduction, EnableReduction
        from torch._inductor.codegen.wrapper import PythonWrapperCodegen
        from torch._inductor.utils import get_kernel_metadata
        from torch._inductor.virtualized import V

        nodes, name = call.arg("nodes"), call.retval
        got["define_kernel"].append((list(nodes), name))
        got["spyre_kernel"].append(spyre.probe_define_kernel(ProbeCall(
            RETURN, {"self": _Pipeline(), "src_code": "", "node_schedule": nodes, "kernel": None}, name)))
        # Triton's node_schedule interleaves reduction markers with the scheduler nodes.
        schedule = [DisableReduction(), *nodes, EnableReduction()]
        tname = "triton_poi_" + name.removeprefix("cpp_")
        got["triton_kernel"].append(profiles.probe_triton_kernel(ProbeCall(
            RETURN, {"self": _Pipeline(), "src_code": "", "node_schedule": schedule, "kernel": None}, tname)))
        # What TritonScheduling._emit_kernel_to_wrapper writes for this kernel, by torch's own functions.
        origins, detailed = get_kernel_metadata(schedule, V.graph.wrapper_code)
        body = (f"async_compile.triton({tname!r}, '''\n@triton.jit\ndef {tname}(in_out_ptr0, xnumel, XBLOCK : tl.constexpr):\n"
                "    xoffset = tl.program_id(0) * XBLOCK\n    tmp0 = tl.load(in_out_ptr0 + xoffset)\n''', device_str='cuda')")
        got["triton_def"].append((tname, PythonWrapperCodegen._format_kernel_definition(
            tname, body, f"# kernel path: /tmp/k/{tname}.py\n{origins}\n{detailed}")))
        if "op_spec_node" not in got:
            got["op_spec_node"] = nodes[0]
        return {}

    def module(call):
        got["module_file"] = call.retval.__file__
        return {}

    hooks = (
        Hook(schema.PRE_GRAD, "torch._inductor.fx_passes.pre_grad:pre_grad_passes", ENTRY, pre),
        Hook(schema.POST_GRAD, "torch._inductor.fx_passes.post_grad:post_grad_passes", RETURN, post),
        Hook(schema.IR_PRE, "torch._inductor.graph:GraphLowering._update_scheduler", ENTRY, lowering),
        Hook(schema.IR_POST, "torch._inductor.scheduler:Scheduler.__init__", RETURN, scheduler),
        Hook(schema.KERNEL_SPEC, "torch._inductor.codegen.cpp:CppScheduling.define_kernel", RETURN, define_kernel),
        Hook(schema.ARTIFACT, "torch._inductor.graph:GraphLowering.compile_to_module", RETURN, module),
    )
    d = tmp_path_factory.mktemp("stock")
    runner.defeat_caches()
    model = _model()().eval()
    with TraceSession(TraceWriter(d / "t.msgpack"), Profile("test-objects", "keeps real objects", hooks,
                                                              context=inductor_context), log=lambda m: None):
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(model)(torch.randn(2, 8))
    trace = read_trace(d / "t.msgpack")
    errors = trace.of_kind(schema.ERROR)
    assert not errors, errors  # a probe that raised here is a bug in the probe, not in the test
    got["hooks"] = trace.hooks()
    return got


# --- stock targets resolve on this torch -------------------------------------------------------


@pytest.mark.parametrize("name", ["inductor-cpu", "inductor-triton"])
def test_stock_profile_targets_resolve_on_this_torch(name):
    import torch

    assert torch.__version__.startswith("2.13.0")
    results = drift.check(profiles.get(name).hooks)
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    for r in results:
        assert r["resolved"] and os.path.isfile(r["file"]) and r["line"] > 0 and r["signature"].startswith("(")
        assert all(r["reads"].values()) and set(r["reads"]) == set(profiles.get(name).hooks[results.index(r)].reads)
    triton = {r["target"]: r for r in results}.get("torch._inductor.codegen.triton:TritonScheduling.define_kernel")
    if name == "inductor-triton":
        assert triton["parameters"][:4] == ["self", "src_code", "node_schedule", "kernel"]


def renamed_argument(self, src_code, nodes_in_order, kernel):
    """A stand-in for a target whose argument was renamed (node_schedule -> nodes_in_order)."""


def test_signature_check_catches_a_renamed_argument():
    hook = Hook(schema.KERNEL_SPEC, f"{__name__}:renamed_argument", RETURN, spyre.probe_define_kernel, ("node_schedule",))
    r = drift.check_hook(hook)
    assert r["resolved"] and not r["ok"]
    assert r["missing_reads"] == ["node_schedule"] and r["reads"] == {"node_schedule": False}
    assert "node_schedule" in r["reason"] and "nodes_in_order" in r["reason"]
    fine = drift.check_hook(dataclasses.replace(hook, reads=("nodes_in_order",)))
    assert fine["ok"] and fine["line"] == renamed_argument.__code__.co_firstlineno


def test_unresolvable_targets_say_why():
    gone = drift.check_hook(Hook("x", "no_such_pkg_for_prov_trace.mod:f", ENTRY, spyre.probe_fx))
    assert not gone["resolved"] and "no_such_pkg_for_prov_trace" in gone["reason"] and "not installed" in gone["reason"]
    moved = drift.check_hook(Hook("x", f"{__name__}:NoSuchClass.method", ENTRY, spyre.probe_fx))
    assert not moved["resolved"] and "has no attribute NoSuchClass" in moved["reason"]


# --- choosing a profile -------------------------------------------------------------------------


def test_auto_picks_by_the_models_device_and_says_why():
    assert profiles.choose("auto", "spyre")[0].name == "spyre"
    assert profiles.choose("auto", "cuda:1")[0].name == "inductor-triton"
    prof, why = profiles.choose("auto", "cpu")
    assert prof.name == "inductor-cpu" and "cpu" in why
    assert profiles.choose("spyre")[0] is profiles.SPYRE
    with pytest.raises(KeyError, match="no profile named"):
        profiles.choose("tpu")


def test_auto_without_a_model_picks_by_the_machine():
    import torch

    prof, why = profiles.choose("auto", None)
    if profiles.spyre_installed():
        assert prof.name == "spyre"
    elif torch.cuda.is_available():
        assert prof.name == "inductor-triton" and "CUDA" in why
    else:
        assert prof.name == "inductor-cpu" and "no spyre or CUDA device" in why


def test_auto_for_a_script_neither_imports_torch_nor_initialises_cuda():
    # Choosing a script's profile must not cost the program anything it would not spend itself: without a
    # GPU device node torch is not imported at all; with one, CUDA is never initialised (fork stays safe).
    code = textwrap.dedent("""
        import sys
        from prov_trace.probes import profiles
        prof, why = profiles.choose("auto", None)
        torch = sys.modules.get("torch")
        print(prof.name, "|", why, "|", torch is not None, "|", bool(torch) and torch.cuda.is_initialized())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    name, why, imported, initialised = (part.strip() for part in proc.stdout.strip().split("|"))
    assert initialised == "False"
    if profiles.gpu_device_nodes() is False and not profiles.spyre_installed():
        assert (name, imported) == ("inductor-cpu", "False")
        assert why == ("no spyre or CUDA device here (this machine has no GPU device node: no /dev/nvidia*, "
                       "no /dev/kfd), so Inductor emits C++ kernels for the CPU")


# --- the spyre profile is data -------------------------------------------------------------------


def test_spyre_profile_names_the_six_hooks_of_the_notes():
    by = {(h.stage, h.event): h for h in profiles.SPYRE.hooks}
    assert by[(schema.PRE_GRAD, ENTRY)].target == "torch_spyre._inductor.passes:CustomPreGradPasses.__call__"
    assert by[(schema.POST_GRAD, ENTRY)].target == "torch_spyre._inductor.passes:CustomPostPasses.__call__"
    assert by[(schema.IR_PRE, ENTRY)].target == by[(schema.IR_POST, RETURN)].target == \
        "torch_spyre._inductor.passes:CustomPreSchedulingPasses.__call__"
    assert by[(schema.KERNEL_SPEC, RETURN)].target == "torch_spyre._inductor.spyre_kernel:SpyreKernel.create_op_spec"
    artifact = [h for h in profiles.SPYRE.hooks if h.stage == schema.ARTIFACT]
    assert [h.target for h in artifact] == ["torch_spyre._inductor.scheduler:SuperDSCScheduling.define_kernel",
                                           "torch_spyre.execution.async_compile:get_output_dir"]
    assert [h.keep for h in artifact] == [False, True] and profiles.SPYRE.finish is spyre.finish
    assert all(h.why for h in profiles.SPYRE.hooks)
    assert "torch_spyre" not in sys.modules  # the profile imports nothing of torch-spyre


# --- spyre probes on real stock objects -----------------------------------------------------------


def test_spyre_fx_probes_read_real_fx_graphs(stock):
    for key, gm in (("spyre_pre", stock["pre_gm"]), ("spyre_post", stock["post_gm"])):
        snap = stock[key]
        assert snap["node_count"] == len(gm.graph.nodes) == len(snap["nodes"])
        assert [n["name"] for n in snap["nodes"]] == [n.name for n in gm.graph.nodes]
        assert snap["pipeline"].endswith("_Pipeline")
    post = {n["name"]: n for n in stock["spyre_post"]["nodes"]}
    relu = post["relu"]
    assert relu["fields"]["stack_trace"]["populated"] and relu["source"]["text"] == RELU_TEXT
    assert relu["source"]["line"] == _relu_line()


def test_spyre_ir_probe_reads_real_computed_buffers(stock):
    ops = stock["ops"]
    assert any(type(op).__name__ == "ComputedBuffer" for op in ops)
    for key in ("spyre_ir_pre", "spyre_ir_post"):
        snap = stock[key]
        assert snap["op_count"] == len(ops)
        assert [o["name"] for o in snap["ops"]] == [op.get_name() for op in ops]
    cb = next(o for o in stock["spyre_ir_pre"]["ops"] if o["type"] == "ComputedBuffer")
    assert cb["fields"]["origins"]["populated"] and set(cb["fields"]["origins"]["value"]) >= {"relu"}
    assert cb["fields"]["traceback"]["has"] and not cb["fields"]["traceback"]["populated"]
    assert any(s["text"] == RELU_TEXT for s in cb["source"])


def test_superdsc_define_kernel_probe_reads_real_scheduler_nodes(stock):
    (nodes, name), = stock["define_kernel"]
    k = stock["spyre_kernel"][0]["superdsc_kernel"]
    assert k["kernel"] == name and k["snodes"] == [n.get_name() for n in nodes]
    assert "relu" in k["origins"] and "mul" in k["origins"]
    assert [o["name"] for o in k["ops"]] == [n.node.get_name() for n in nodes]
    assert "Topologically Sorted Source Nodes" in k["metadata"]


def test_op_spec_probe_on_a_real_ir_node_and_an_opspec_shape(stock):
    snode = stock["op_spec_node"]
    line = _relu_line()
    handle = DebugHandleShape(id=2**62 + 5, source=SourceLocShape(THIS_FILE, line, 12), aten_op="aten.relu.default",
                              ir_chain=("relu", snode.node.get_name()),
                              fused_from=(DebugHandleShape(1, SourceLocShape(THIS_FILE, line), "aten.mul.Tensor", ("mul",)),))
    spec = OpSpecShape("relu", False, {"c0": (16, 1)}, [], {"note": 1}, debug_handle=handle)
    rec = spyre.probe_op_spec(ProbeCall(RETURN, {"self": KernelShape(snode), "op": "relu"}, spec))
    assert rec["kind"] == "op_spec" and rec["kernel"] == f"{snode.node.get_name()}:relu"
    declared = [f["name"] for f in rec["op_spec"]["declared_fields"]]
    assert declared == [f.name for f in dataclasses.fields(OpSpecShape)]
    assert rec["op_spec"]["provenance_fields"] == ["debug_handle"]
    assert rec["op_spec"]["populated_provenance"] == ["debug_handle"]
    assert rec["op_spec"]["fields"]["tiled_symbols"] == {"has": True, "populated": False, "type": "list"}
    dh = rec["debug_handle"]
    assert dh["populated"] and dh["value"] == handle.to_dict()  # to_dict() verbatim
    assert dh["file_line"] == f"{THIS_FILE}:{line}" and dh["source"]["line"] == line
    # The IR node is self.current_node.node, a real ComputedBuffer with its origins.
    assert rec["ops"][0]["name"] == snode.node.get_name() and "relu" in rec["origins"]

    empty = spyre.probe_op_spec(ProbeCall(RETURN, {"self": KernelShape(snode)}, dataclasses.replace(spec, debug_handle=None)))
    assert empty["debug_handle"]["has"] and not empty["debug_handle"]["populated"]
    assert empty["op_spec"]["populated_provenance"] == []
    old = spyre.probe_op_spec(ProbeCall(RETURN, {"self": KernelShape(None)}, OpSpecBeforeProvenance("mm", False, {}, [], {})))
    assert not old["debug_handle"]["has"] and old["op_spec"]["provenance_fields"] == [] and old["ops"] == []


def test_triton_kernel_probe_reads_real_scheduler_nodes_with_reduction_markers(stock):
    (nodes, _), = stock["define_kernel"]
    k = stock["triton_kernel"][0]
    assert k["kernel"].startswith("triton_poi_") and k["kind"] == "generated"
    assert k["snodes"] == [n.get_name() for n in nodes]  # the markers are skipped
    assert {"relu", "mul"} <= set(k["origins"])
    assert "Topologically Sorted Source Nodes" in k["metadata"]


def test_triton_artifact_probe_reads_a_module_with_triton_kernels(stock, tmp_path):
    (tname, definition), = stock["triton_def"]
    src = ("from torch._inductor.async_compile import AsyncCompile\nasync_compile = AsyncCompile()\n"
           f"{definition}\n\nasync_compile.wait(globals())\n\n"
           "def call(args):\n    buf0 = empty_strided_cuda((2, 16), (16, 1), torch.float32)\n"
           "    extern_kernels.mm(arg1_1, reinterpret_tensor(arg0_1, (8, 16), (1, 8), 0), out=buf0)\n"
           "    buf1 = buf0; del buf0  # reuse\n"
           f"    # Topologically Sorted Source Nodes: [relu, mul], Original ATen: [aten.relu, aten.mul]\n"
           f"    stream0 = get_raw_stream(0)\n    {tname}.run(buf1, 32, stream=stream0)\n    return (buf1, )\n")
    path = tmp_path / "module.py"
    path.write_text(src)
    mod = types.SimpleNamespace(__file__=str(path))
    out = profiles.probe_artifact(ProbeCall(RETURN, {"self": None}, mod))
    ks = {k["kernel"]: k for k in out["kernels"]}
    k = ks[tname]
    assert k["how"] == "triton" and k["def_line"] and [c["line"] for c in k["calls"]]
    assert any("Topologically Sorted Source Nodes" in c for c in k["provenance_comments"])
    # The call's own comment is read past the stream line Triton's wrapper puts between them.
    (call,) = k["calls"]
    assert call["comments"] == ["# Topologically Sorted Source Nodes: [relu, mul], Original ATen: [aten.relu, aten.mul]"]
    assert any("kernel path" in c for c in k["comments"])
    assert ks["extern_kernels.mm"]["kind"] == "extern"


# --- the SDSC reader and the after-the-compile step -----------------------------------------------


def _write(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))


def test_sdsc_reader_reads_exactly_the_directories_it_was_given(tmp_path):
    handle = DebugHandleShape(7, SourceLocShape("/src/model.py", 5), "aten.add.Tensor", ("add", "op0")).to_dict()
    a, b, stray = tmp_path / "a_sdsc_add_0", tmp_path / "b_sdsc_mm_1", tmp_path / "stray"
    _write(a / "sdsc_0.json", sdsc_doc({"0_add": handle}))
    _write(a / "sdsc_1.json", {**sdsc_doc({"1_relu": None}), "2_copy": {"numCoresUsed_": 1, "source_loc_": "x"}})
    _write(a / "bundle.json", sdsc_doc({"0_nope": handle}))        # not sdsc_*: not read
    _write(a / "sub" / "sdsc_9.json", sdsc_doc({"9_nope": handle}))  # a subdirectory: not read
    _write(stray / "sdsc_0.json", sdsc_doc({"0_nope": handle}))      # a directory nobody handed out: not read
    _write(b / "sdsc_0.json", "{not json")
    kept = [
        {"compile_id": "0/0", "graph": "inference", "payload": {"kernel_name": "sdsc_add_0", "output_dir": str(a)}},
        {"compile_id": "0/0", "graph": "inference", "payload": {"kernel_name": "sdsc_add_0", "output_dir": str(a)}},
        {"compile_id": "0/0", "graph": "inference", "payload": {"kernel_name": "sdsc_mm_1", "output_dir": str(b)}},
        {"compile_id": "1/0", "graph": "inference", "payload": {"kernel_name": "gone", "output_dir": str(tmp_path / "gone")}},
        {"compile_id": "0/0", "graph": "inference", "payload": {"kernel_name": "x", "output_dir": None, "error": "?"}},
    ]
    recs = spyre.finish(kept)
    assert [(r["compile_id"], r["stage"], r["target"]) for r in recs] == [
        ("0/0", "artifact", spyre.TARGET_OUTPUT_DIR), ("1/0", "artifact", spyre.TARGET_OUTPUT_DIR)]
    bundles = recs[0]["payload"]["sdsc_bundles"]
    assert [(x["kernel"], x["dir"]) for x in bundles] == [("sdsc_add_0", str(a)), ("sdsc_mm_1", str(b))]
    files = bundles[0]["files"]
    assert [os.path.basename(f["path"]) for f in files] == ["sdsc_0.json", "sdsc_1.json"]
    op = files[0]["ops"][0]
    assert op["key"] == "0_add" and op["key_shape"]
    assert op["debug_handle"]["populated"] and op["debug_handle"]["value"] == handle
    assert op["debug_handle"]["file_line"] == "/src/model.py:5"
    assert op["provenance_keys"] == {"debug_handle_": {"populated": True, "type": "dict"}}
    relu, copy = files[1]["ops"]
    assert relu["debug_handle"]["has"] and not relu["debug_handle"]["populated"]
    assert not copy["debug_handle"]["has"] and set(copy["provenance_keys"]) == {"source_loc_"}
    assert "error" in bundles[1]["files"][0] and bundles[1]["files"][0]["ops"] == []
    gone = recs[1]["payload"]["sdsc_bundles"][0]
    assert not gone["exists"] and gone["files"] == [] and "does not exist" in gone["error"]


# --- the spyre profile end to end, on a stand-in package --------------------------------------------


_FAKE = {
    "torch_spyre/__init__.py": '"""Stand-in for tests: the documented names at the documented paths. NOT torch-spyre."""\n',
    "torch_spyre/_inductor/__init__.py": "",
    "torch_spyre/execution/__init__.py": "",
    "torch_spyre/_inductor/passes.py": '''
        class _SpyreGraphPassPipeline:
            def __call__(self, graph):
                return None

        class CustomPreGradPasses(_SpyreGraphPassPipeline):
            pass

        class CustomPrePasses(_SpyreGraphPassPipeline):
            pass

        class CustomPostPasses(_SpyreGraphPassPipeline):
            pass

        class CustomPreSchedulingPasses:
            def __call__(self, graph):
                # The real passes mutate graph.operations in place; this one drops the last op.
                graph.operations.pop()
        ''',
    "torch_spyre/_inductor/spyre_kernel.py": '''
        class SpyreKernel:
            current_node = None
            spec_factory = None

            def create_op_spec(self, op, is_reduction, args, op_info, indirect_var_names=None):
                return self.spec_factory(op, is_reduction, args, op_info)
        ''',
    "torch_spyre/_inductor/scheduler.py": '''
        class SuperDSCScheduling:
            def define_kernel(self, src_code, node_schedule, kernel):
                return "sdsc_fused_" + "_".join(n.get_name() for n in node_schedule)
        ''',
    "torch_spyre/execution/async_compile.py": '''
        import tempfile

        BASE = None

        def get_output_dir(kernel_name: str):
            return tempfile.mkdtemp(dir=BASE, prefix=f"ab12cd34_{kernel_name}_")
        ''',
}


@pytest.fixture
def fake_spyre(tmp_path):
    root = tmp_path / "fake_spyre"
    for rel, text in _FAKE.items():
        _write(root / rel, textwrap.dedent(text).lstrip())
    sys.path.insert(0, str(root))
    try:
        yield root
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "torch_spyre" or m.startswith("torch_spyre.")]:
            del sys.modules[name]


@pytest.mark.skipif(not HAS_MONITORING, reason="the in-process session test uses the monitoring backend (Python 3.12+)")
def test_spyre_profile_end_to_end_on_a_stand_in_package(stock, fake_spyre, tmp_path):
    import importlib

    from prov_trace.report.model import build
    from prov_trace.stream.reader import read_trace
    from prov_trace.tracer.session import TraceSession
    from prov_trace.stream.writer import TraceWriter

    (nodes, _), = stock["define_kernel"]
    line = _relu_line()
    handle = DebugHandleShape(3, SourceLocShape(THIS_FILE, line), "aten.relu.default", ("relu",))
    bundles = tmp_path / "bundles"
    bundles.mkdir()
    path = tmp_path / "t.msgpack"
    with TraceSession(TraceWriter(path), profiles.SPYRE, log=lambda m: None):
        # Imported after the session started: the targets resolve as the modules arrive.
        passes = importlib.import_module("torch_spyre._inductor.passes")
        kmod = importlib.import_module("torch_spyre._inductor.spyre_kernel")
        sched = importlib.import_module("torch_spyre._inductor.scheduler")
        ac = importlib.import_module("torch_spyre.execution.async_compile")
        ac.BASE = str(bundles)
        passes.CustomPreGradPasses()(stock["pre_gm"].graph)
        passes.CustomPrePasses()(stock["pre_gm"].graph)  # shares the code object: must not count as pre-grad
        passes.CustomPostPasses()(stock["post_gm"].graph)
        passes.CustomPreSchedulingPasses()(types.SimpleNamespace(operations=list(stock["ops"])))
        kernel = kmod.SpyreKernel()
        for i, snode in enumerate(nodes):
            kernel.current_node = snode
            kernel.spec_factory = lambda op, r, a, info: OpSpecShape(op, r, {}, a, info, debug_handle=handle)
            kernel.create_op_spec("relu", False, [], {})
        kernel.spec_factory = lambda op, r, a, info: OpSpecShape(op, r, {}, a, info)
        kernel.create_op_spec("mul", False, [], {})
        name = sched.SuperDSCScheduling().define_kernel("src", nodes, kernel)
        out_dir = Path(ac.get_output_dir(name))
        _write(out_dir / "sdsc_0.json", sdsc_doc({"0_relu": handle.to_dict(), "1_mul": None}))
        _write(bundles / "sdsc_guess.json", sdsc_doc({"0_never": handle.to_dict()}))  # beside, never read
    model = build(read_trace(path))
    assert not model["errors"], model["errors"]
    hooks = {(h["stage"], h["event"]): h for h in model["hooks"]}
    for h in profiles.SPYRE.hooks:
        if h.stage == schema.SOURCE:
            continue
        st = hooks[(h.stage, h.event)]
        assert st["resolved"] and st["installed"], st
    assert hooks[(schema.PRE_GRAD, ENTRY)]["fired"] == 1 and hooks[(schema.POST_GRAD, ENTRY)]["fired"] == 1
    assert any("type(self)" in n for n in hooks[(schema.PRE_GRAD, ENTRY)]["notes"])
    (g,) = model["graphs"]
    st = g["stages"]
    for stage, gm in (("pre_grad", stock["pre_gm"]), ("post_grad", stock["post_gm"])):
        fx_nodes = gm.graph.nodes
        assert len(st[stage]["objects"]) == sum(1 for n in fx_nodes if n.op in ("call_function", "call_method", "call_module"))
        assert len(st[stage]["objects"]) + len(st[stage]["boundary"]) == len(fx_nodes)
    assert len(st["ir_pre"]["objects"]) == len(stock["ops"]) and len(st["ir_post"]["objects"]) == len(stock["ops"]) - 1
    cells = {(r["layer"], r["field"]): r["cells"] for r in g["matrix"]}
    dh = cells[("Spyre", "debug_handle")]
    assert (dh["kernel_spec"]["n"], dh["kernel_spec"]["total"]) == (len(nodes), len(nodes) + 1)
    assert (dh["artifact"]["state"], dh["artifact"]["n"], dh["artifact"]["total"]) == ("some", 1, 2)
    assert cells[("Backend", "kernel_metadata")]["kernel_spec"]["state"] == "na"  # an OpSpec has no such slot
    arts = {o["name"]: o for o in st["artifact"]["objects"]}
    assert set(arts) == {f"{name}/sdsc_0.json:0_relu", f"{name}/sdsc_0.json:1_mul"}
    assert arts[f"{name}/sdsc_0.json:0_relu"]["debug_handle"] == f"{THIS_FILE}:{line}"
    assert {"relu", "mul"} <= set(arts[f"{name}/sdsc_0.json:0_relu"]["origins"])
    assert st["artifact"]["files"] == [str(out_dir / "sdsc_0.json")]
    # The model line reaches the emitted JSON through the op key's debug_handle_.
    relu_row = next(r for r in g["survival"] if r["line"] == line)
    assert relu_row["counts"]["artifact"] == 1 and relu_row["lost_at"] is None


def test_spyre_probe_for_moved_module_is_reported_not_raised(fake_spyre, tmp_path):
    """`get_output_dir` lived in torch_spyre._inductor.runtime in late 2025: a move reads as drift."""
    gone = drift.check_hook(Hook(schema.ARTIFACT, "torch_spyre._inductor.runtime:get_output_dir", RETURN,
                                 spyre.probe_output_dir, ("kernel_name",)))
    assert not gone["resolved"] and "runtime" in gone["reason"]
    here = drift.check(profiles.SPYRE.hooks)
    assert all(r["ok"] for r in here), [r for r in here if not r["ok"]]


# --- `prov-trace targets` ----------------------------------------------------------------------------


def test_targets_command_checks_a_stock_profile_and_user_probes(tmp_path):
    proc = cli("targets", "--profile", "inductor-cpu", "--json",
               "--probe", "torch._inductor.scheduler:Scheduler.fuse_nodes@both=fusion", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["profile"] == "inductor-cpu" and out["drifted"] == []
    targets = [(t["target"], t["event"]) for t in out["targets"]]
    assert ("torch._inductor.scheduler:Scheduler.fuse_nodes", "entry") in targets
    assert ("torch._inductor.scheduler:Scheduler.fuse_nodes", "return") in targets
    t = next(t for t in out["targets"] if t["target"].endswith("CppScheduling.define_kernel"))
    assert t["resolved"] and t["reads"] == {"nodes": True} and t["file"].endswith("codegen/cpp.py")

    drifted = cli("targets", "--profile", "inductor-cpu", "--probe", "torch._inductor.scheduler:Scheduler.no_such",
                  cwd=tmp_path)
    assert drifted.returncode == 1
    # The user's own target is not found (a typo, another release), not a profile hook that drifted.
    assert "drifted:" not in drifted.stderr and "not found (check the module and name):" in drifted.stderr
    assert "Scheduler.no_such" in drifted.stderr.split("not found")[1]
    n = len(profiles.INDUCTOR_CPU.hooks)
    assert f"{n + 1} targets: {n} ok, 0 drifted, 1 not found (your --probe targets)" in drifted.stdout
    assert "  MISS  Scheduler.no_such return torch._inductor.scheduler:Scheduler.no_such" in drifted.stdout
    out = json.loads(cli("targets", "--profile", "inductor-cpu", "--json", "--probe",
                         "torch._inductor.scheduler:Scheduler.no_such", cwd=tmp_path).stdout)
    assert out["not_found"] == out["drifted"] == ["torch._inductor.scheduler:Scheduler.no_such"]


def test_targets_does_not_check_a_script_probe_against_prov_traces_own_main(tmp_path):
    """`__main__:func` names a function of the script `run` runs. `targets` runs none, and its own __main__ is
    prov-trace's: `__main__:main` passed on prov-trace's `main()`, and `__main__:f` drifted."""
    proc = cli("targets", "--profile", "inductor-cpu", "--probe", "__main__:main", "--probe", "__main__:f=mine",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(profiles.INDUCTOR_CPU.hooks)
    assert f"{n + 2} targets: {n} ok, 0 drifted, 2 not checkable here (the script's own)" in proc.stdout
    assert "cli.py" not in proc.stdout and "has no attribute" not in proc.stdout
    out = json.loads(cli("targets", "--profile", "inductor-cpu", "--json", "--probe", "__main__:main", cwd=tmp_path).stdout)
    mine = next(t for t in out["targets"] if t["target"] == "__main__:main")
    assert mine["unchecked"] and mine["ok"] and not mine["resolved"] and mine["file"] is None and out["drifted"] == []


def test_targets_for_spyre_without_torch_spyre_is_one_line(tmp_path):
    proc = cli("targets", "--profile", "spyre", cwd=tmp_path, env={"PYTHONPATH": ""})
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "prov-trace: profile spyre: torch-spyre is not installed here (no module named torch_spyre), "
        f"so none of its {len(profiles.SPYRE.hooks)} targets can be resolved; to check them against a torch-spyre "
        "source tree, pass --torch-spyre DIR (the folder holding torch_spyre/)"]


def test_targets_for_spyre_with_the_stand_in_package(fake_spyre, tmp_path):
    proc = cli("targets", "--profile", "spyre", cwd=tmp_path, env={"PYTHONPATH": str(fake_spyre)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    n = len(profiles.SPYRE.hooks)
    assert f"{n} targets: {n} ok, 0 drifted" in proc.stdout
    assert "inherited from torch_spyre._inductor.passes._SpyreGraphPassPipeline" in proc.stdout


# --- inductor-triton on a real GPU ---------------------------------------------------------------------


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(not _cuda(), reason="inductor-triton runs only where CUDA is available: "
                                        "torch.cuda.is_available() is False on this machine")
def test_inductor_triton_profile_on_cuda(tmp_path):
    from conftest import EXAMPLES, Run

    proc = cli("run", str(EXAMPLES / "reference_mlp.py") + ":SimpleMLP", "--device", "cuda",
               "-o", str(tmp_path / "t.msgpack"), "--report", str(tmp_path / "audit.md"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "profile inductor-triton: the model is on CUDA" in proc.stderr
    model = Run(proc, tmp_path / "t.msgpack", tmp_path / "audit.md", tmp_path).model()
    assert not model["errors"]
    ks = model["graphs"][0]["stages"]["kernel_spec"]["objects"]
    assert any(k["kind"] == "generated" and k["kernel"].startswith("triton_") for k in ks)
    art = model["graphs"][0]["stages"]["artifact"]["objects"]
    assert any(o["kind"] == "generated" and o["name"].startswith("triton_") for o in art)
