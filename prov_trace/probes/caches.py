"""What prov-trace's own setting does to a program that asks torch for its caches.

`prov-trace run` (and `prov_trace.trace`) turn Inductor's caches off, so that a cache hit never skips
the stages after post-grad. torch then records no cache artifact either: `torch.compiler.
save_cache_artifacts()` returns None, and `torch._inductor.standalone_compile`, which builds its artifact
from them, returns one whose `save()` raises. That is the tracer's doing, not the program's, so a probe
says so as it happens, where the program's own error would leave the user guessing.

Pure functions of what they are handed, like the other probe modules.
"""

from __future__ import annotations

import sys
from typing import Any

from prov_trace.contract import NO_RECORD, ProbeCall

#: The notice's text: what happened, why, and what to do.
CACHES_OFF = ("torch.compiler.save_cache_artifacts() returned None: Inductor's caches are off (prov-trace turns them "
              "off, so that every compile reaches codegen, unless run with --keep-caches; "
              "TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 turns them off too), so torch recorded no cache artifact, and a "
              "torch._inductor.standalone_compile artifact's save() raises. To keep them, trace with --keep-caches "
              "(keep_caches=True in Python), TORCHINDUCTOR_FORCE_DISABLE_CACHES unset and an empty "
              "TORCHINDUCTOR_CACHE_DIR, so that no earlier run's cache entry skips a stage")


def caches_forced_off() -> bool:
    """Whether Inductor's caches are off in this thread (`torch.compiler.config.force_disable_caches`)."""
    config = sys.modules.get("torch.compiler.config")
    try:
        return getattr(config, "force_disable_caches", False) is True
    except Exception:  # noqa: BLE001 - a config we cannot read: say nothing
        return False


def probe_cache_artifacts(call: ProbeCall) -> Any:
    """`torch.compiler.save_cache_artifacts` returned: a notice only when it returned nothing with the caches
    off, which is what prov-trace's default does to it."""
    if call.retval is not None or not caches_forced_off():
        return NO_RECORD
    return {"notice": {"kind": "caches_off", "text": CACHES_OFF}}
