"""Kernel-spec extractor: a kernel, the scheduler nodes it was built from, their IR ops and origins.

Generated kernels come from ``define_kernel``; extern kernels (e.g. the CPU
``addmm`` that lowers to ``extern_kernels.addmm``) are IR ops that never reach
``define_kernel``, so they are read where Inductor writes their provenance
comment, ``ExternKernel.codegen_comment``.
"""

from __future__ import annotations

import sys
from typing import Any

from prov_trace.probes.ir import snode_name, snapshot_op
from prov_trace.probes.snapshot import cut_str, safe_str


def _metadata(node_schedule: Any) -> dict[str, Any]:
    """``get_kernel_metadata`` as Inductor computes it for the comment it emits."""
    utils = sys.modules.get("torch._inductor.utils")
    virtualized = sys.modules.get("torch._inductor.virtualized")
    if utils is None or virtualized is None:
        return {"error": "torch._inductor is not loaded"}
    try:
        wrapper = virtualized.V.graph.wrapper_code
        short, detailed = utils.get_kernel_metadata(node_schedule, wrapper)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"[:400]}
    return {"metadata": cut_str(short or "", 4000), "detailed": cut_str(detailed or "", 8000)}


def _ops_of_schedule(node_schedule: Any) -> tuple[list[dict[str, Any]], list[str]]:
    ops = []
    snode_names = []
    for snode in node_schedule or ():
        if not hasattr(snode, "get_nodes"):
            continue  # Triton's EnableReduction / DisableReduction markers
        snode_names.append(snode_name(snode))
        for m in snode.get_nodes():
            node = getattr(m, "node", None)
            if node is not None:
                ops.append(snapshot_op(node, brief=True))
    return ops, snode_names


def _kernel(name: Any, kind: str, ops: list[dict[str, Any]], snodes: list[str], node_schedule: Any) -> dict[str, Any]:
    origins = sorted({o for op in ops for o in (op["fields"]["origins"]["value"] or [])})
    return {
        "kernel": safe_str(name, 400),
        "kind": kind,
        "snodes": snodes,
        "ops": ops,
        "origins": origins,
        **_metadata(node_schedule),
    }


def generated_kernel(kernel_name: Any, node_schedule: Any) -> dict[str, Any]:
    """`define_kernel(self, src_code, nodes|node_schedule, ...)` returned `kernel_name`."""
    ops, snodes = _ops_of_schedule(node_schedule)
    return _kernel(kernel_name, "generated", ops, snodes, node_schedule)


def extern_kernel(ir_node: Any, kernel_name: Any = None) -> dict[str, Any]:
    """`ExternKernel.codegen_comment(self, wrapper, kernel_name=None)` for one extern call."""
    if not kernel_name:
        try:
            kernel_name = ir_node.try_get_kernel_name()
        except Exception:  # noqa: BLE001
            kernel_name = None
    op = snapshot_op(ir_node, brief=True)
    return _kernel(kernel_name or f"<extern {type(ir_node).__name__}>", "extern", [op], [op["name"]], ir_node)
