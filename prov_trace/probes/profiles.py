"""Built-in profiles: which target each stage reads, at which event, with which probe.

A profile is data. Adding a backend adds a profile here, not control flow
anywhere else. docs/profiles.md explains each target choice.
"""

from __future__ import annotations

from prov_trace.stream import schema
from prov_trace.probes import artifact, caches, fx, graphs, ir, kernels, source, spyre
from prov_trace.contract import ENTRY, RETURN, Hook, ProbeCall, Profile
from prov_trace.probes.context import inductor_context

# --- probes shared by the stock Inductor profiles -------------------------------------


def probe_source(call: ProbeCall) -> dict:
    return source.snapshot_code(call.arg("code"))


def probe_pre_grad(call: ProbeCall) -> dict:
    return fx.snapshot_graph(call.arg("gm"))


def probe_post_grad(call: ProbeCall) -> dict:
    return {**fx.snapshot_graph(call.arg("gm")), "is_inference": bool(call.arg("is_inference"))}


def probe_ir_pre(call: ProbeCall) -> dict:
    return ir.snapshot_ops(call.arg("self").operations)


def probe_ir_post(call: ProbeCall) -> dict:
    return ir.snapshot_scheduler_nodes(call.arg("self").nodes)


def probe_cpp_kernel(call: ProbeCall) -> dict:
    return kernels.generated_kernel(call.retval, call.arg("nodes"))


def probe_triton_kernel(call: ProbeCall) -> dict:
    return kernels.generated_kernel(call.retval, call.arg("node_schedule"))


def probe_extern_kernel(call: ProbeCall) -> dict:
    return kernels.extern_kernel(call.arg("self"), call.locals.get("kernel_name"))


def probe_artifact(call: ProbeCall) -> dict:
    path = getattr(call.retval, "__file__", None)
    if not path:
        return {"path": None, "kernels": [], "error": "the compiled module has no __file__"}
    return artifact.scan_module_file(path)


_COMMON = (
    Hook(schema.SOURCE, "torch._dynamo.convert_frame:_compile", ENTRY, probe_source, ("code", "compile_id"),
         "Dynamo's per-frame compile entry: the code object it is about to trace is the model source."),
    Hook(schema.PRE_GRAD, "torch._inductor.fx_passes.pre_grad:pre_grad_passes", ENTRY, probe_pre_grad, ("gm",),
         "Inductor's first look at the Dynamo graph, before any pre-grad pass rewrites it."),
    Hook(schema.POST_GRAD, "torch._inductor.fx_passes.post_grad:post_grad_passes", RETURN, probe_post_grad,
         ("gm", "is_inference"),
         "The AOT graph after the post-grad passes: exactly what lowering receives. Fires per forward/backward/inference graph."),
    Hook(schema.IR_PRE, "torch._inductor.graph:GraphLowering._update_scheduler", ENTRY, probe_ir_pre, ("self",),
         "The lowered IR (`operations`) just before the scheduler is built from it."),
    Hook(schema.IR_POST, "torch._inductor.scheduler:Scheduler.__init__", RETURN, probe_ir_post, ("self",),
         "The scheduler's nodes after its passes and fusion; each member's `.node` is the IR op."),
    Hook(schema.KERNEL_SPEC, "torch._inductor.ir:ExternKernel.codegen_comment", ENTRY, probe_extern_kernel,
         ("self", "kernel_name"),
         "Extern kernels (e.g. CPU addmm) never reach define_kernel; this is where Inductor records their provenance."),
)

#: Not a stage: why a compile stopped. Dynamo calls its handler with the exception that ended a frame's
#: compile (a graph break it cannot resume from, a backend that raised), whether it then raises it or not.
_COMPILE_ERROR = Hook(
    schema.COMPILE_ERROR, "torch._dynamo.convert_frame:exception_handler", ENTRY, graphs.probe_compile_error, ("e",),
    "Dynamo's handler of the exception that ended a frame's compile (an unsupported construct, a backend's "
    "failure): its type and text say why the compile stopped.",
)

#: Not a stage either: a frame Dynamo stops compiling because it hit a recompile limit. Dynamo checks the limit
#: inside `_compile` but before the `try` whose handler the hook above watches, so that hook never sees it.
_RECOMPILE_LIMIT = Hook(
    schema.COMPILE_ERROR, "torch._dynamo.cache_size:exceeds_recompile_limit", RETURN, graphs.probe_recompile_limit,
    (), "Dynamo's check of a frame's compiles against `recompile_limit` (and `accumulated_recompile_limit`), "
    "at each compile: recorded only when it says a limit was hit, after which Dynamo runs the frame uncompiled.",
)

#: Not a stage: a frame Dynamo gave up without an error (no op to trace, most often), read at `_compile`'s return.
_FRAME_SKIPPED = Hook(
    schema.COMPILE_ERROR, "torch._dynamo.convert_frame:_compile", RETURN, graphs.probe_frame_skipped, (),
    "Dynamo's per-frame compile, at its return: recorded only when it returned no compiled code (a frame it "
    "skipped and ran as Python, such as one with no op to trace), with Dynamo's reason where torch gives one.",
)

#: Not a stage: a graph break, read where Dynamo ends the graph at it. A break right after another ends an empty
#: graph, which reaches no backend, so the Dynamo graph's hook never sees that one.
_GRAPH_BREAK = Hook(
    schema.GRAPH_BREAK, "torch._dynamo.output_graph:OutputGraph.compile_subgraph", ENTRY, graphs.probe_graph_break,
    ("reason",), "Dynamo ending the graph it traced, with its reason, once per graph: recorded only at a graph "
    "break (Dynamo's reason and the user frames), including one that ends an empty graph no backend sees.",
)

#: Not a stage: torch's cache artifacts, which prov-trace's default (the caches off) leaves empty. A program that
#: saves them, or a standalone_compile artifact, is told why it got none as it happens.
_CACHE_ARTIFACTS = Hook(
    schema.NOTICE, "torch.compiler:save_cache_artifacts", RETURN, caches.probe_cache_artifacts, (),
    "torch's cache artifacts, which a program saves (and `standalone_compile` builds its artifact from): a record "
    "only when none came back because the caches were off, prov-trace's default, so the run says why.",
)

_AOT = "torch._functorch._aot_autograd.graph_compile"

#: The graphs every torch.compile backend and torch.export have, on every stock profile: with
#: backend="aot_eager" or a user's function, they are what the report measures.
_PATHS = (
    Hook(schema.DYNAMO_GRAPH, "torch._dynamo.output_graph:OutputGraph._call_user_compiler", ENTRY,
         graphs.probe_dynamo_graph, ("self", "gm"),
         "The GraphModule Dynamo hands to the backend, whatever the backend; `self.compiler_fn.__name__` names "
         "it. Entry, not return: a backend may rewrite the graph in place (Inductor's pre-grad passes do)."),
    # AOT's graphs for any aot_autograd backend. The backward graph is read when AOT builds it (at the
    # forward's compile), even where its compile is lazy (at the first backward call).
    Hook(schema.AOT_GRAPH, f"{_AOT}:_aot_stage2b_compile_forward_or_inference", ENTRY, graphs.probe_aot_forward,
         ("fw_module", "is_inference"), "AOT autograd's forward or inference graph, as its compiler receives it.",
         torch=">=2.10"),
    Hook(schema.AOT_GRAPH, f"{_AOT}:_aot_stage2b_bw_compile", ENTRY, graphs.probe_aot_backward, ("bw_module",),
         "AOT autograd's backward graph, as its compiler will receive it.", torch=">=2.10"),
    # torch.export: neither Dynamo's _compile nor the Dynamo graph is on the non-strict path (the default).
    Hook(schema.SOURCE, "torch.export._trace:_export", RETURN, graphs.probe_export_source, ("mod",),
         "torch.export's entry for strict and non-strict export alike: the user's module, whose forward is the source."),
    Hook(schema.EXPORT_GRAPH, "torch.export._trace:_export", RETURN, graphs.probe_export_graph, ("mod",),
         "The ExportedProgram's graph: the FX graph a user deploys, with its nodes' stack_trace."),
    _COMPILE_ERROR,
    _RECOMPILE_LIMIT,
    _FRAME_SKIPPED,
    _GRAPH_BREAK,
    _CACHE_ARTIFACTS,
)

_ARTIFACT = Hook(
    schema.ARTIFACT, "torch._inductor.graph:GraphLowering.compile_to_module", RETURN, probe_artifact, ("self",),
    "Returns the generated module; its __file__ is the exact emitted source, scanned for provenance comments.",
)
#: AOTInductor (aoti_compile_and_package) never calls compile_to_module: its artifact is the C++ it wrote.
_AOTI_ARTIFACT = Hook(
    schema.ARTIFACT, "torch._inductor.codecache:AotCodeCompiler.compile", RETURN, graphs.probe_aoti_artifact,
    ("graph", "wrapper_code", "kernel_code"),
    "AOTInductor's compile: returns the files it wrote (the wrapper and kernel .cpp, the .so, metadata); "
    "the C++ sources are scanned for the provenance comments Inductor writes above each kernel call.",
)

INDUCTOR_CPU = Profile(
    name="inductor-cpu",
    description="stock Inductor on the CPU: C++ kernels from CppScheduling, extern kernels for matmuls",
    hooks=_COMMON + _PATHS + (
        Hook(schema.KERNEL_SPEC, "torch._inductor.codegen.cpp:CppScheduling.define_kernel", RETURN,
             probe_cpp_kernel, ("nodes",),
             "The C++ backend names each generated kernel here; `nodes` are the scheduler nodes it was built from."),
        _ARTIFACT,
        _AOTI_ARTIFACT,
    ),
    context=inductor_context,
)

INDUCTOR_TRITON = Profile(
    name="inductor-triton",
    description="stock Inductor on CUDA: Triton kernels from TritonScheduling",
    hooks=_COMMON + _PATHS + (
        Hook(schema.KERNEL_SPEC, "torch._inductor.codegen.triton:TritonScheduling.define_kernel", RETURN,
             probe_triton_kernel, ("node_schedule",),
             "The Triton backend names each generated kernel here; `node_schedule` holds its scheduler nodes."),
        _ARTIFACT,
        _AOTI_ARTIFACT,
    ),
    context=inductor_context,
)

# --- torch-spyre --------------------------------------------------------------------------

_SPYRE_PASSES = "torch_spyre._inductor.passes"

SPYRE = Profile(
    name="spyre",
    description="the torch-spyre compile path: Spyre FX and pre-scheduling passes, OpSpec, SuperDSC bundles",
    hooks=(
        _COMMON[0],  # the source stage is Dynamo's, the same on every backend
        _COMPILE_ERROR,
        _RECOMPILE_LIMIT,
        _FRAME_SKIPPED,
        _GRAPH_BREAK,
        _CACHE_ARTIFACTS,
        Hook(schema.PRE_GRAD, f"{_SPYRE_PASSES}:CustomPreGradPasses.__call__", ENTRY, spyre.probe_fx, ("self", "graph"),
             "torch-spyre's pre-grad pass pipeline, entered with the Dynamo graph before its passes run. The "
             "`__call__` is inherited from a base shared with CustomPrePasses and CustomPostPasses: only calls "
             "whose `type(self)` is a CustomPreGradPasses are kept."),
        Hook(schema.POST_GRAD, f"{_SPYRE_PASSES}:CustomPostPasses.__call__", ENTRY, spyre.probe_fx, ("self", "graph"),
             "torch-spyre's post-grad custom pass, entered with the AOT graph (the same shared `__call__`, kept "
             "only when `type(self)` is a CustomPostPasses)."),
        Hook(schema.IR_PRE, f"{_SPYRE_PASSES}:CustomPreSchedulingPasses.__call__", ENTRY, spyre.probe_ir,
             ("self", "graph"),
             "Entered with the GraphLowering just before the scheduler is built: `graph.operations` is the "
             "LoopLevelIR before the Spyre pre-scheduling passes."),
        Hook(schema.IR_POST, f"{_SPYRE_PASSES}:CustomPreSchedulingPasses.__call__", RETURN, spyre.probe_ir,
             ("self", "graph"),
             "The same call at return: the passes mutate `graph.operations` in place (e.g. restickify buffers "
             "with no origin_node), so reading it again shows what they changed."),
        Hook(schema.KERNEL_SPEC, "torch_spyre._inductor.spyre_kernel:SpyreKernel.create_op_spec", RETURN,
             spyre.probe_op_spec, ("self",),
             "Returns the OpSpec, the per-op device spec the SuperDSC generator consumes; its `debug_handle` is "
             "the provenance Spyre carries past the IR. The IR node is `self.current_node.node`."),
        Hook(schema.ARTIFACT, "torch_spyre._inductor.scheduler:SuperDSCScheduling.define_kernel", RETURN,
             spyre.probe_define_kernel, ("node_schedule",),
             "Names each Spyre kernel; `node_schedule` holds the scheduler nodes, hence the kernel's origins."),
        Hook(schema.ARTIFACT, spyre.TARGET_OUTPUT_DIR, RETURN, spyre.probe_output_dir, ("kernel_name",),
             "Returns the exact directory a kernel's bundle is written to. After the compile, the `sdsc_*.json` "
             "files in exactly these directories are read: no directory is guessed.", keep=True),
    ),
    context=inductor_context,
    finish=spyre.finish,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (INDUCTOR_CPU, INDUCTOR_TRITON, SPYRE)}


def spyre_installed() -> bool:
    """Whether torch-spyre can be imported here (looked up, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch_spyre") is not None
    except (ImportError, ValueError):
        return False


def gpu_device_nodes() -> bool | None:
    """Whether the kernel shows a GPU torch could use as "cuda": NVIDIA's /dev/nvidia0.. or AMD's /dev/kfd.

    None where this can't be told from the file system (not Linux). Costs a directory listing.
    """
    import glob
    import os
    import sys

    if not sys.platform.startswith("linux"):
        return None
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def cuda_available() -> tuple[bool, str]:
    """Whether torch sees a CUDA device, and why not when it doesn't.

    Never initialises CUDA in this process: a program that forks workers after prov-trace
    asked would otherwise fail in them ("Cannot re-initialize CUDA in forked subprocess").
    On a Linux machine with no GPU device node, torch is not even imported (the program
    imports it when it needs it, at no extra cost); elsewhere NVML counts the devices,
    and only where NVML can't answer does torch's own check run.
    """
    import sys

    if "torch" not in sys.modules and gpu_device_nodes() is False:
        return False, "this machine has no GPU device node: no /dev/nvidia*, no /dev/kfd"
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return False, f"torch cannot be imported ({type(exc).__name__})"
    built = getattr(torch.version, "cuda", None) or getattr(torch.version, "hip", None)
    if not built:
        return False, "torch is built without CUDA"
    try:
        count_nvml = getattr(torch.cuda, "_device_count_nvml", None)
        count = count_nvml() if callable(count_nvml) and not getattr(torch.version, "hip", None) else -1
        if count is None or count < 0:  # no NVML (or ROCm): torch's own check, which initialises the driver
            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # noqa: BLE001
        return False, f"asking torch for CUDA devices raised {type(exc).__name__}"
    if count > 0:
        return True, f"torch sees {count} CUDA device(s)"
    return False, f"torch is built with CUDA {built} but sees no CUDA device"


def choose(name: str, device: str | None = None) -> tuple[Profile, str]:
    """The profile for `name`; for `auto`, pick by what the model and the machine use, and say why.

    `device` is the model's device type when it is known before the compile (a model target);
    None when it is not (a script), and then the machine decides.
    """
    if name != "auto":
        return get(name), "requested"
    if device:
        dev = device.split(":")[0]
        if dev == "spyre":
            return SPYRE, "the model is on a spyre device"
        if dev == "cuda":
            return INDUCTOR_TRITON, "the model is on CUDA, where Inductor emits Triton kernels"
        return INDUCTOR_CPU, f"the model is on {dev}, where Inductor emits C++ kernels"
    if spyre_installed():
        return SPYRE, "torch-spyre can be imported here (the script's device is known only once it runs)"
    cuda, why = cuda_available()
    if cuda:
        return INDUCTOR_TRITON, f"{why}, where Inductor emits Triton kernels (the script's device is known only once it runs)"
    return INDUCTOR_CPU, f"no spyre or CUDA device here ({why}), so Inductor emits C++ kernels for the CPU"


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"there is no profile named '{name}': choose one of {', '.join(sorted(PROFILES))}") from None
