"""prov-trace: where source provenance survives, and where it is dropped, in torch.compile.

The Python API (docs/api.md)::

    import prov_trace
    with prov_trace.trace() as t:          # every compile in the body is traced
        torch.compile(model)(x)
    report = t.report()                     # or prov_trace.load(t.path), the stream it wrote
    report.check("post_grad:stack_trace=all")

Importing ``prov_trace`` imports nothing else: the API loads on first use.
"""

from __future__ import annotations

from typing import Any

from prov_trace.version import VERSION as __version__

_API = ("trace", "start", "stop", "load", "load_run", "run", "Tracer", "Report", "RunResult", "ProvTraceError", "UsageError")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from prov_trace import api

        return getattr(api, name)
    raise AttributeError(f"module 'prov_trace' has no attribute {name!r}")
