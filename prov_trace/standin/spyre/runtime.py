"""The runtime half of the stand-in: calls that would reach the device become records.

``start_runtime``, ``prepare_kernel``, ``launch_jobplan`` and ``register_kernel_provenance``
do no device work; each one appends what it was asked to a ``Recorder``. The kernel
provenance registry keeps the semantics of torch-spyre's C++ registry (a key is taken from
the event name; a second, different registration for a key is a conflict and is refused),
so torch-spyre's code sees the same answers it would on a card.
"""

from __future__ import annotations

import os
import re
import threading
import time
import warnings
from typing import Any, Sequence

from .errors import KernelNotRun

#: AIUPTI's activity name is a 128-byte C string; the usable length leaves the NUL.
AIUPTI_ACTIVITY_NAME_MAX_BYTES = 127

_EVENT_PREFIX = "spyre_kernel_v1_"
# get_output_dir names a bundle directory f"{8 hex digits}_{kernel_name}_" + 8 random characters
_BUNDLE_DIR_RE = re.compile(r"\A[0-9a-f]{8}_(?P<kernel>.+)_[a-z0-9_]{8}\Z")
_KEY_WIDTH = 16
_DISPLAY_RE = re.compile(r"\A[A-Za-z0-9_]+\Z")
_KEY_RE = re.compile(r"\A[a-z2-7]+\Z")


class Recorder:
    """What torch-spyre asked of the device side, in order. Thread-safe; read with ``snapshot()``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[dict[str, Any]] = []
        self.counts: dict[str, int] = {}

    def add(self, call: str, **fields: Any) -> dict[str, Any]:
        entry = {"call": call, "t": time.time(), **fields}
        with self._lock:
            self.calls.append(entry)
            self.counts[call] = self.counts.get(call, 0) + 1
        return entry

    def count(self, call: str) -> None:
        """Count a frequent call (copies, fills) without keeping an entry for each."""
        with self._lock:
            self.counts[call] = self.counts.get(call, 0) + 1

    def of(self, call: str) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(c) for c in self.calls if c["call"] == call]

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": [dict(c) for c in self.calls], "counts": dict(self.counts)}


# --- the kernel provenance registry ------------------------------------------------------


def extract_kernel_provenance_key(event_name: str) -> str | None:
    """The bundle key at the end of a ``spyre_kernel_v1_<display>_<key>[#<step>]`` event name."""
    if not isinstance(event_name, str):
        raise TypeError("event_name must be a str")
    name = event_name
    hash_at = name.rfind("#")
    if hash_at != -1:
        step = name[hash_at + 1:]
        if not step or not step.isdigit() or not step.isascii():
            return None
        name = name[:hash_at]
    if len(name) <= len(_EVENT_PREFIX) + _KEY_WIDTH + 1 or not name.startswith(_EVENT_PREFIX):
        return None
    key_start = len(name) - _KEY_WIDTH
    if name[key_start - 1] != "_":
        return None
    display = name[len(_EVENT_PREFIX):key_start - 1]
    key = name[key_start:]
    if not display or not _DISPLAY_RE.match(display) or not _KEY_RE.match(key):
        return None
    return key


class ProvenanceRegistry:
    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._lock = threading.Lock()
        self._entries: dict[str, list[str]] = {}
        self._hits = 0
        self._misses = 0
        self._conflicts = 0
        self._warned_noncanonical = False
        self._warned_conflict = False

    def register(self, event_base_name: str, debug_handle_ids: Sequence[str]) -> bool:
        if not isinstance(event_base_name, str):
            raise TypeError("register_kernel_provenance(): event_base_name must be a str")
        if isinstance(debug_handle_ids, (str, bytes)):
            raise TypeError("register_kernel_provenance(): debug_handle_ids must be a sequence of str")
        ids = [str(i) if isinstance(i, str) else _refuse_non_str(i) for i in debug_handle_ids]
        key = extract_kernel_provenance_key(event_base_name)
        accepted = False
        reason = None
        if key is None:
            reason = "noncanonical event name"
            if not self._warned_noncanonical:
                self._warned_noncanonical = True
                warnings.warn(f"Cannot register Spyre kernel provenance for a noncanonical event name: "
                              f"{event_base_name}", RuntimeWarning, stacklevel=3)
        else:
            with self._lock:
                existing = self._entries.get(key)
                if existing is None:
                    self._entries[key] = list(ids)
                    accepted = True
                elif existing == ids:
                    accepted = True
                else:
                    self._conflicts += 1
                    reason = "conflicting registration for the key; the first one is kept"
            if reason and not self._warned_conflict:
                self._warned_conflict = True
                warnings.warn(f"Conflicting Spyre kernel provenance registration for key {key}; preserving the "
                              f"first debug-handle mapping", RuntimeWarning, stacklevel=3)
        self._recorder.add("register_kernel_provenance", event_base_name=event_base_name,
                           debug_handle_ids=list(ids), key=key, accepted=accepted,
                           **({"refused": reason} if reason else {}))
        return accepted

    def lookup(self, key: str) -> list[str] | None:
        with self._lock:
            ids = self._entries.get(key)
            if ids is None:
                self._misses += 1
                return None
            self._hits += 1
            return list(ids)

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"entries": len(self._entries), "hits": self._hits, "misses": self._misses,
                    "conflicts": self._conflicts}


def _refuse_non_str(value: Any) -> str:
    raise TypeError(f"register_kernel_provenance(): debug handle ids must be str, got {type(value).__name__}")


# --- job plans ---------------------------------------------------------------------------


def kernel_of_dir(code_dir: str) -> str:
    """The kernel name in a bundle directory's name (the directory's name when it is not of that shape)."""
    base = os.path.basename(code_dir.rstrip("/"))
    m = _BUNDLE_DIR_RE.match(base)
    return m.group("kernel") if m else base


class JobPlan:
    """What ``prepare_kernel`` returns: the kernel it was asked to prepare, and no device steps."""

    def __init__(self, spyrecode_dir: str, profiler_name: str | None) -> None:
        self.spyrecode_dir = spyrecode_dir
        self.code_dir = os.path.dirname(spyrecode_dir.rstrip("/")) or spyrecode_dir
        self.profiler_name = profiler_name
        self.kernel = kernel_of_dir(self.code_dir)

    def num_steps(self) -> int:
        return 0

    def job_allocation_size(self) -> int:
        return 0

    def get_step_type(self, idx: int) -> str:
        raise IndexError("Step index out of range (the Spyre CPU stand-in prepares no device steps)")

    def get_step_name(self, idx: int) -> str | None:
        raise IndexError("Step index out of range (the Spyre CPU stand-in prepares no device steps)")

    def get_step_pipeline_barrier(self, idx: int) -> bool:
        raise IndexError("Step index out of range (the Spyre CPU stand-in prepares no device steps)")

    def __repr__(self) -> str:
        return f"<JobPlan steps=0 job_allocation_size=0 kernel={self.kernel} (Spyre CPU stand-in: not prepared)>"


class Launcher:
    """``prepare_kernel`` and ``launch_jobplan``: recorded; a launch raises or is deferred."""

    def __init__(self, recorder: Recorder, mode: str) -> None:
        if mode not in ("raise", "defer"):
            raise ValueError(f"launch must be 'raise' or 'defer', not {mode!r}")
        self._recorder = recorder
        self.mode = mode
        self.not_run: list[str] = []
        self._lock = threading.Lock()

    def prepare_kernel(self, spyrecode_dir: str, stream: Any = None, profiler_name: str | None = None) -> JobPlan:
        spyrecode_dir = os.fspath(spyrecode_dir)
        if profiler_name is not None and len(f"{profiler_name}#0".encode()) > AIUPTI_ACTIVITY_NAME_MAX_BYTES:
            raise RuntimeError(f"profiler-visible compute name exceeds AIUPTI limit: {profiler_name}")
        plan = JobPlan(spyrecode_dir, profiler_name)
        self._recorder.add("prepare_kernel", spyrecode_dir=spyrecode_dir, code_dir=plan.code_dir,
                           profiler_name=profiler_name, code_dir_exists=os.path.isdir(plan.code_dir))
        return plan

    def launch_jobplan(self, job_plan: Any, args: Sequence[Any], symbolic_args: Sequence[Any] = ()) -> None:
        kernel = getattr(job_plan, "kernel", None) or repr(job_plan)
        self._recorder.add("launch_jobplan", kernel=kernel, code_dir=getattr(job_plan, "code_dir", None),
                           profiler_name=getattr(job_plan, "profiler_name", None), n_args=len(args),
                           n_symbolic_args=len(symbolic_args or ()), mode=self.mode)
        with self._lock:
            self.not_run.append(kernel)
        if self.mode == "raise":
            raise KernelNotRun([kernel])

    def check(self) -> None:
        with self._lock:
            pending = list(self.not_run)
            self.not_run.clear()
        if pending:
            raise KernelNotRun(pending, deferred=True)


# --- streams, device state ------------------------------------------------------------


class SymbolicArgKind:
    """Members ``kAddress`` and ``kDimension``, like the pybind11 enum."""

    __slots__ = ("name", "value")
    kAddress: "SymbolicArgKind"
    kDimension: "SymbolicArgKind"
    __members__: dict[str, "SymbolicArgKind"]

    def __init__(self, value: int) -> None:
        value = int(value)
        names = {0: "kAddress", 1: "kDimension"}
        if value not in names:
            raise ValueError(f"{value} is not a valid SymbolicArgKind")
        object.__setattr__(self, "name", names[value])
        object.__setattr__(self, "value", value)

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SymbolicArgKind) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"<SymbolicArgKind.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"SymbolicArgKind.{self.name}"


SymbolicArgKind.kAddress = SymbolicArgKind(0)
SymbolicArgKind.kDimension = SymbolicArgKind(1)
SymbolicArgKind.__members__ = {"kAddress": SymbolicArgKind.kAddress, "kDimension": SymbolicArgKind.kDimension}


class SymbolicArg:
    __slots__ = ("kind", "tensor_id", "dim_index", "value")

    def __init__(self, kind: SymbolicArgKind, tensor_id: int, dim_index: int = -1, value: int = -1) -> None:
        if not isinstance(kind, SymbolicArgKind):
            raise TypeError("SymbolicArg(): kind must be a SymbolicArgKind")
        self.kind = kind
        self.tensor_id = int(tensor_id)
        self.dim_index = int(dim_index)
        self.value = int(value)

    def __repr__(self) -> str:
        return f"<SymbolicArg kind={self.kind.value} tensor_id={self.tensor_id} dim_index={self.dim_index}>"


class _SimpleEnum:
    """A small stand-in for a pybind11 enum: members are class attributes with ``name``/``value``."""

    __slots__ = ("name", "value")
    _names: dict[int, str] = {}

    def __init__(self, value: int) -> None:
        value = int(value)
        if value not in self._names:
            raise ValueError(f"{value} is not a valid {type(self).__name__}")
        object.__setattr__(self, "name", self._names[value])
        object.__setattr__(self, "value", value)

    def __int__(self) -> int:
        return self.value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.value))

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


def _members(cls: type) -> type:
    cls.__members__ = {}
    for value, name in cls._names.items():
        member = cls(value)
        setattr(cls, name, member)
        cls.__members__[name] = member
    return cls


@_members
class SpyreStreamError(_SimpleEnum):
    _names = {0: "Success", 1: "Shutdown"}


@_members
class SpyreDeviceState(_SimpleEnum):
    _names = {0: "Ok", 1: "NotInitialized", 2: "StreamError"}


class SpyreStreamBase:
    """A stream on the single stand-in device: work is never queued, so it is always complete."""

    def __init__(self, device: Any, stream_id: int, priority: int = 0) -> None:
        self._device = device
        self._id = stream_id
        self._priority = priority

    def synchronize(self) -> None:
        return None

    def query(self) -> bool:
        return True

    def device(self) -> Any:
        return self._device

    def id(self) -> int:
        return self._id

    def priority(self) -> int:
        return self._priority

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SpyreStreamBase) and (other._id, other._device) == (self._id, self._device)

    def __hash__(self) -> int:
        return hash((self._id, str(self._device)))

    def __repr__(self) -> str:
        return f"<torch_spyre.Stream device={getattr(self._device, 'index', 0) or 0} id={self._id}>"


class Streams:
    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._lock = threading.Lock()
        self._next_id = 1
        self._current: SpyreStreamBase | None = None
        self._default: SpyreStreamBase | None = None

    def _dev(self, device: Any = None) -> Any:
        import torch

        return torch.device("spyre", 0) if device is None else torch.device(device)

    def default_stream(self, device: Any = None) -> SpyreStreamBase:
        with self._lock:
            if self._default is None:
                self._default = SpyreStreamBase(self._dev(device), 0)
            return self._default

    def current_stream(self, device: Any = None) -> SpyreStreamBase:
        current = self._current
        return current if current is not None else self.default_stream(device)

    def set_current_stream(self, stream: SpyreStreamBase) -> None:
        if not isinstance(stream, SpyreStreamBase):
            raise TypeError("set_current_stream(): expected a stream")
        self._current = stream

    def get_stream_from_pool(self, device: Any = None, priority: int = 0) -> SpyreStreamBase:
        with self._lock:
            sid = self._next_id
            self._next_id += 1
        return SpyreStreamBase(self._dev(device), sid, int(priority))

    def host_compute_stream(self, device: Any = None) -> SpyreStreamBase:
        return self.get_stream_from_pool(device)

    def host_compute_stream_by_id(self, id: int, device: Any = None) -> SpyreStreamBase:  # noqa: A002
        return SpyreStreamBase(self._dev(device), int(id))

    def synchronize(self, device: Any = None) -> None:
        return None
