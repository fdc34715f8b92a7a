"""Built-in profiles: which target each stage reads, at which event, with which probe.

A profile is data. Adding a backend adds a profile here, not control flow
anywhere else. docs/profiles.md explains each target choice.
"""

from __future__ import annotations

from prov_trace import schema
from prov_trace.probes import artifact, fx, ir, kernels, source, spyre
from prov_trace.probes.base import ENTRY, RETURN, Hook, ProbeCall, Profile
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

_ARTIFACT = Hook(
    schema.ARTIFACT, "torch._inductor.graph:GraphLowering.compile_to_module", RETURN, probe_artifact, ("self",),
    "Returns the generated module; its __file__ is the exact emitted source, scanned for provenance comments.",
)

INDUCTOR_CPU = Profile(
    name="inductor-cpu",
    description="stock Inductor on the CPU: C++ kernels from CppScheduling, extern kernels for matmuls",
    hooks=_COMMON + (
        Hook(schema.KERNEL_SPEC, "torch._inductor.codegen.cpp:CppScheduling.define_kernel", RETURN,
             probe_cpp_kernel, ("nodes",),
             "The C++ backend names each generated kernel here; `nodes` are the scheduler nodes it was built from."),
        _ARTIFACT,
    ),
    context=inductor_context,
)

INDUCTOR_TRITON = Profile(
    name="inductor-triton",
    description="stock Inductor on CUDA: Triton kernels from TritonScheduling",
    hooks=_COMMON + (
        Hook(schema.KERNEL_SPEC, "torch._inductor.codegen.triton:TritonScheduling.define_kernel", RETURN,
             probe_triton_kernel, ("node_schedule",),
             "The Triton backend names each generated kernel here; `node_schedule` holds its scheduler nodes."),
        _ARTIFACT,
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


def cuda_available() -> tuple[bool, str]:
    """Whether torch sees a CUDA device, and why not when it doesn't."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return False, f"torch cannot be imported ({type(exc).__name__})"
    try:
        if torch.cuda.is_available():
            return True, f"torch sees {torch.cuda.device_count()} CUDA device(s)"
    except Exception as exc:  # noqa: BLE001
        return False, f"torch.cuda.is_available() raised {type(exc).__name__}"
    built = getattr(torch.version, "cuda", None)
    return False, ("torch is built with CUDA " + built + " but sees no CUDA device") if built else "torch is built without CUDA"


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
        return SPYRE, "torch-spyre is installed on this machine (the script's device is known only once it runs)"
    cuda, why = cuda_available()
    if cuda:
        return INDUCTOR_TRITON, f"{why}, where Inductor emits Triton kernels (the script's device is known only once it runs)"
    return INDUCTOR_CPU, f"no spyre or CUDA device here ({why}), so Inductor emits C++ kernels for the CPU"


def get(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"there is no profile named '{name}': choose one of {', '.join(sorted(PROFILES))}") from None
