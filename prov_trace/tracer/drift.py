"""Check a profile's targets against the installed build, without running a compile.

Used by ``prov-trace targets``. Unlike a trace session, this MAY import each
target's module (it runs nothing else), so it resolves every target now: is it
there, where, with which signature, and does that signature still have the
arguments the probe reads (``Hook.reads``)?
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from prov_trace.contract import Hook, TargetError, TargetSpec
from prov_trace.tracer.targets import ResolveError, resolve


def _import(module: str) -> str | None:
    """Import `module`; None when it worked, else why not, in one sentence."""
    if module in sys.modules:
        return None
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or module
        if missing == module or module.startswith(missing + "."):
            return f"module {missing} is not installed here" if "." not in missing else f"there is no module {missing}"
        return f"importing {module} failed: it needs {missing}, which is not installed"
    except BaseException as exc:  # noqa: BLE001 - a module that fails to import is drift, not a crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"importing {module} failed: {type(exc).__name__}: {str(exc)[:300]}"
    return None


def check_hook(hook: Hook) -> dict[str, Any]:
    """One hook's target on this build: resolved or not, where, its signature, and the arguments the probe reads."""
    out: dict[str, Any] = {
        "stage": hook.stage, "event": hook.event, "target": hook.target, "why": hook.why, "torch_range": hook.torch,
        "resolved": False, "reason": None, "file": None, "line": None, "signature": None,
        "parameters": None, "reads": {}, "missing_reads": [], "notes": [], "ok": False, "unchecked": False,
    }
    try:
        spec = TargetSpec.parse(hook.target)
    except TargetError as exc:
        out["reason"] = str(exc)
        return out
    if spec.module == "__main__":  # the script `prov-trace run` runs, not this process's __main__ (prov-trace)
        out.update(ok=True, unchecked=True,
                   reason="a function of the script: it resolves when `prov-trace run` runs that script, and is "
                          "not checkable without it")
        return out
    problem = _import(spec.module)
    if problem:
        out["reason"] = problem
        return out
    try:
        r = resolve(spec)
    except ResolveError as exc:
        out["reason"] = str(exc)
        return out
    params = r.parameters()
    out.update(resolved=True, file=r.file, line=r.line, signature=r.signature(), parameters=list(params),
               notes=list(r.notes))
    out["reads"] = {name: name in params for name in hook.reads}
    out["missing_reads"] = [name for name, ok in out["reads"].items() if not ok]
    if out["missing_reads"]:
        out["reason"] = (f"the probe reads {', '.join(out['missing_reads'])}, which the signature "
                         f"{out['signature']} no longer has")
    out["ok"] = not out["missing_reads"]
    return out


def check(hooks: tuple[Hook, ...] | list[Hook]) -> list[dict[str, Any]]:
    return [check_hook(h) for h in hooks]
