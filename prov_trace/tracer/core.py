"""Which event backend runs, and why: decided here and nowhere else.

Like coverage.py's ``core.py``: ``choose`` tries the best backend first and,
when one can't run, keeps the reason as a plain sentence. The chosen backend
and that sentence go into the trace header and onto stderr, so a user can
always see why a run was traced the way it was.
"""

from __future__ import annotations

from prov_trace.tracer.backends.base import Backend, BackendUnavailable, Dispatch
from prov_trace.tracer.backends.inject import InjectBackend
from prov_trace.tracer.backends.monitoring import MonitoringBackend
from prov_trace.tracer.backends.settrace import SettraceBackend

BACKENDS: dict[str, type[Backend]] = {
    "monitoring": MonitoringBackend,
    "inject": InjectBackend,
    "settrace": SettraceBackend,
}
#: The order `auto` tries them in: the cheapest first.
AUTO_ORDER = ("monitoring", "inject", "settrace")
#: What `--backend` accepts.
CHOICES = ("auto", *BACKENDS)

__all__ = ["AUTO_ORDER", "BACKENDS", "CHOICES", "Backend", "BackendUnavailable", "choose"]


def _make(cls: type[Backend], tool_id: int | None) -> Backend:
    return MonitoringBackend(tool_id) if cls is MonitoringBackend else cls()


def choose(requested: str, dispatch: Dispatch, *, tool_id: int | None = None) -> tuple[Backend, str]:
    """Start the requested backend (or the best one for `auto`); return it and why it was chosen.

    `tool_id` is the ``sys.monitoring`` tool id to hold (None: the first free one of 4, 3).
    """
    if requested != "auto":
        cls = BACKENDS.get(requested)
        if cls is None:
            raise BackendUnavailable(
                f"there is no backend named '{requested}': choose one of {', '.join(CHOICES)}"
            )
        reason = cls.unavailable_reason()
        if reason:
            raise BackendUnavailable(f"the {requested} backend can't run here: {reason}")
        backend = _make(cls, tool_id)
        try:
            backend.start(dispatch)
        except BackendUnavailable as exc:
            raise BackendUnavailable(f"the {requested} backend can't run here: {exc}") from None
        return backend, f"{requested} was requested"
    skipped: list[str] = []
    for name in AUTO_ORDER:
        cls = BACKENDS[name]
        reason = cls.unavailable_reason()
        if reason:
            skipped.append(f"not {name}: {reason}")
            continue
        backend = _make(cls, tool_id)
        try:
            backend.start(dispatch)
        except BackendUnavailable as exc:
            skipped.append(f"not {name}: {exc}")
            continue
        why = f"{name} is the best backend available"
        if skipped:
            why += " (" + "; ".join(skipped) + ")"
        return backend, why
    raise BackendUnavailable("no backend can run here: " + "; ".join(skipped))
