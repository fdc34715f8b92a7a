"""The contract between the tracer and the probes: targets, hooks, profiles, and what a probe sees.

Both sides import this module and nothing of each other. The tracer turns a
`Hook`'s target into live events; a probe turns a `ProbeCall` into plain data;
a `Profile` is the list of hooks a pipeline needs. Nothing here imports torch
or any other part of prov_trace but `torchver` (version ranges).
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from prov_trace import torchver

#: The two events a hook can watch: a call starting, and a call returning normally.
ENTRY = "entry"
RETURN = "return"
PHASES = (ENTRY, RETURN)
#: What a backend also reports for a generator or coroutine, so its entry and return pair across
#: suspensions: the frame suspended at a ``yield`` or ``await``, and the same frame running again.
#: No probe runs on these.
YIELD = "yield"
RESUME = "resume"


# --- targets --------------------------------------------------------------------------------

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_TARGET_RE = re.compile(rf"^({_IDENT}(?:\.{_IDENT})*):((?:{_IDENT}|<locals>)(?:\.(?:{_IDENT}|<locals>))*)$")


class TargetError(ValueError):
    """A target string that cannot name anything; the message says how to write one."""


@dataclass(frozen=True)
class TargetSpec:
    """A parsed ``module:Qual.name``: the function a hook watches, named the way the tracer resolves it."""

    module: str
    qualname: str

    @classmethod
    def parse(cls, text: str) -> "TargetSpec":
        text = text.strip()
        m = _TARGET_RE.match(text)
        if not m:
            raise TargetError(
                f"'{text}' is not a target: write it as 'package.module:Qualified.name', "
                "e.g. 'torch._inductor.scheduler:Scheduler.fuse_nodes'"
            )
        if m.group(2).startswith("<locals>") or m.group(2).endswith("<locals>"):
            raise TargetError(f"'{text}': '<locals>' must sit between a function and the name defined in it")
        return cls(m.group(1), m.group(2))

    def __str__(self) -> str:
        return f"{self.module}:{self.qualname}"


# --- probes ---------------------------------------------------------------------------------


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


class _NoRecord:
    def __repr__(self) -> str:
        return "NO_RECORD"


#: What a probe returns for a call with nothing to record: a check whose every call it watches but only
#: some matter (Dynamo's recompile limit, checked at each compile and hit by few). No record is written.
NO_RECORD: Any = _NoRecord()

#: (stage, frame, the call's return value or None, a dict the session keeps for it) -> (compile id, graph
#: kind); reads the compiler's own state. The dict is new with each session: what the context must
#: remember between calls (the exported programs it has numbered) lives there, not in the module. The
#: session puts two functions in it: ``open_codes()``, the code objects of the calling thread's target calls
#: that have started and not returned (outermost first; one that left by an exception may linger), and
#: ``traced_codes()``, every target's code object traced now.
Context = Callable[[str, types.FrameType, Any, dict], tuple]


def no_context(stage: str, frame: types.FrameType, retval: Any = None, state: dict | None = None) -> tuple:
    return (None, None)


@dataclass(frozen=True)
class Hook:
    """A probe placed on a target at an event; its payloads become objects of `stage`."""

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
    #: The torch releases whose target and arguments this hook is written for, e.g. ">=2.10" or
    #: ">=2.10,<2.15"; "" is every release. A target that moved between releases is two hooks with
    #: disjoint ranges (prov_trace/torchver.py), never a version branch in probe code.
    torch: str = ""
    #: The target is a step of the compile pipeline, which runs outside any graph Dynamo traces (a stock
    #: profile's hook). False for a user's probe, whose target may be code Dynamo traces into a graph (a
    #: model's helper): the inject backend asks Dynamo's rules before rewriting one of those.
    pipeline: bool = True

    def __post_init__(self) -> None:
        torchver.check_range(self.torch)


#: (records the session kept for hooks with ``keep=True``) -> records to write. Each
#: record is a dict with ``stage``, ``target``, ``compile_id``, ``graph`` and ``payload``.
Finish = Callable[[list[dict]], list[dict]]


@dataclass(frozen=True)
class Profile:
    """A pipeline's hooks, how to tell its compiles apart, and what to read once it is done."""

    name: str
    description: str
    hooks: tuple[Hook, ...]
    context: Context = no_context
    extras: dict[str, Any] = field(default_factory=dict)
    #: Runs once when the session stops, after the compile, before hook statuses are
    #: written: reads what only exists once the compile is done (e.g. files it emitted).
    finish: Finish | None = None

    def hooks_for(self, version: str | None) -> tuple[Hook, ...]:
        """The hooks whose torch range holds `version` (every hook when the version is unknown)."""
        if not version:
            return tuple(self.hooks)
        return tuple(h for h in self.hooks if torchver.in_range(version, h.torch))
