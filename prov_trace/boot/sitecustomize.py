"""Start-up hook of the processes a `prov-trace run` follows (prov_trace/follow.py, docs/processes.md).

`prov-trace run` puts this directory first on PYTHONPATH and ``PROV_TRACE_FOLLOW`` in the
environment, so every Python process its program starts imports this module before running
any code of its own. It claims the process's rank and starts tracing when torch is first
imported (a process that never imports torch is not slowed down). Then any other
``sitecustomize`` on the path runs, as it would have without prov-trace. Nothing here may
fail the process: a child that cannot be traced runs untraced.
"""

import os
import sys


def _start() -> None:
    from prov_trace import api, follow

    options = follow.child_options()
    if options is None:
        return
    tracer = api.Tracer(**options)
    tracer.start()
    follow.arm(tracer)


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one hides (the first after this directory on sys.path)."""
    import importlib.machinery
    import importlib.util

    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


if os.environ.get("PROV_TRACE_FOLLOW"):
    try:
        from prov_trace import follow as _follow

        _follow.claim_rank()
        sys.meta_path.insert(0, _follow.StartOnImport("torch", _start))
    except Exception:  # noqa: BLE001 - an untraced child, never a broken one
        pass
# The program sees the sys.path it would have had: this directory was needed only to get here
# (it stays on PYTHONPATH, so the program's own children get here too).
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
try:
    _next_sitecustomize()
except ImportError as exc:  # none to run; one that fails to import is reported by site, as untraced
    if exc.name != "sitecustomize":
        raise
