"""The probe vocabulary: a Hook places a probe on a target at an event; a Profile is a list of hooks."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

ENTRY = "entry"
RETURN = "return"


@dataclass(frozen=True)
class ProbeCall:
    """What a probe sees: the frame's locals (the arguments at entry, the final locals at return)."""

    phase: str
    locals: Mapping[str, Any]
    retval: Any = None
    frame: types.FrameType | None = None

    def arg(self, name: str) -> Any:
        try:
            return self.locals[name]
        except KeyError:
            raise KeyError(f"the frame has no local named '{name}' (has: {', '.join(sorted(self.locals))})") from None


#: A probe turns a call into a plain-data payload.
Probe = Callable[[ProbeCall], dict]
#: (stage, frame) -> (compile id, graph kind); reads the compiler's own state.
Context = Callable[[str, types.FrameType], tuple]


def no_context(stage: str, frame: types.FrameType) -> tuple:
    return (None, None)


@dataclass(frozen=True)
class Hook:
    stage: str
    target: str
    event: str
    probe: Probe
    #: The argument names the probe reads, checked against the signature by `prov-trace targets`.
    reads: tuple[str, ...] = ()
    #: Why this target was chosen, for `docs/profiles.md` and `targets`.
    why: str = ""
    #: Keep this hook's records in the session, for the profile's `finish` step.
    keep: bool = False


#: (records the session kept for hooks with ``keep=True``) -> records to write. Each
#: record is a dict with ``stage``, ``target``, ``compile_id``, ``graph`` and ``payload``.
Finish = Callable[[list[dict]], list[dict]]


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    hooks: tuple[Hook, ...]
    context: Context = no_context
    extras: dict = field(default_factory=dict)
    #: Runs once when the session stops, after the compile, before hook statuses are
    #: written: reads what only exists once the compile is done (e.g. files it emitted).
    finish: Finish | None = None
