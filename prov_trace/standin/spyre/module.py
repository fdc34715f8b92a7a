"""The stand-in ``torch_spyre._C`` module: layouts and dtypes, a host-backed device, recorded runtime calls.

``build_module(state)`` returns a fresh module object with every name the tree's ``_C.pyi``
declares, plus the few names torch-spyre's Python code uses that the stub file does not
declare (``_logging``, ``NativePermutationLayoutSolver``, ``reinterpret_tensor``, ...).
``activate()`` puts it at ``sys.modules["torch_spyre._C"]``.
"""

from __future__ import annotations

import threading
import types
from typing import Any, Sequence

from . import layout as L
from . import native
from .runtime import (
    AIUPTI_ACTIVITY_NAME_MAX_BYTES,
    JobPlan,
    Launcher,
    ProvenanceRegistry,
    Recorder,
    SpyreDeviceState,
    SpyreStreamError,
    Streams,
    SymbolicArg,
    SymbolicArgKind,
    SpyreStreamBase,
    extract_kernel_provenance_key,
)

#: Names torch-spyre's Python code may ask ``_C`` for that the stand-in deliberately lacks, and why.
NOT_PROVIDED = {
    "createSpyreCCLBackend": "the Spyre collective-communication backend (torch.distributed 'spyreccl') needs devices",
}


class DeviceState:
    """What the module's functions share: the recorder, the launcher, the registry, the streams."""

    def __init__(self, launch: str = "raise") -> None:
        self.recorder = Recorder()
        self.launcher = Launcher(self.recorder, launch)
        self.registry = ProvenanceRegistry(self.recorder)
        self.streams = Streams(self.recorder)
        self.runtime_started = False
        self.generators: dict[int, Any] = {}
        self.lock = threading.Lock()


def _ops():
    return native.ops()


def _is_spyre(t: Any) -> bool:
    import torch

    return isinstance(t, torch.Tensor) and t.device.type == torch._C._get_privateuse1_backend_name()


def _layout_from_record(t: Any) -> L.SpyreTensorLayout:
    """The tensor's layout record; a tensor with none gets the layout of its allocation, as torch-spyre's
    allocation kernels compute it (``SpyreTensorLayout(sizes, strides, dtype, generic order)``)."""
    size, smap, ddtype, arrangement = _ops().layout_of(t)
    if ddtype >= 0:
        return L.SpyreTensorLayout._make(size, smap, L.DataFormats(ddtype), L.ElementArrangement(arrangement))
    dma_sizes, dma_strides = _ops().dma_of(t)
    stl = L.SpyreTensorLayout(list(dma_sizes), list(dma_strides), t.dtype, L.generic_dim_order(len(dma_sizes)))
    _store(t, stl)
    return stl


def _store(t: Any, stl: L.SpyreTensorLayout) -> None:
    _ops().set_layout(t, stl.device_size, stl.stride_map, stl.device_dtype.value, stl.element_arrangement.value)


def _require_layout(stl: Any) -> L.SpyreTensorLayout:
    if not isinstance(stl, L.SpyreTensorLayout):
        raise TypeError(f"expected a SpyreTensorLayout, got {type(stl).__name__}")
    return stl


def _require_spyre(t: Any, what: str) -> None:
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what}: expected a Tensor, got {type(t).__name__}")
    if not _is_spyre(t):
        raise RuntimeError(f"{what}: expected a tensor on the spyre device, got one on {t.device}")


def build_module(state: DeviceState, name: str = "torch_spyre._C") -> types.ModuleType:
    import torch

    rec = state.recorder
    mod = types.ModuleType(name, "Spyre C++ bindings (prov-trace CPU stand-in: compile path real, kernels not run)")
    mod.__prov_trace_standin__ = True

    # --- types and constants
    mod.DataFormats = L.DataFormats
    mod.ElementArrangement = L.ElementArrangement
    mod.SpyreTensorLayout = L.SpyreTensorLayout
    mod.AIUPTI_ACTIVITY_NAME_MAX_BYTES = AIUPTI_ACTIVITY_NAME_MAX_BYTES
    mod.JobPlan = JobPlan
    mod.SymbolicArg = SymbolicArg
    mod.SymbolicArgKind = SymbolicArgKind
    mod.SpyreStreamError = SpyreStreamError
    mod.SpyreDeviceState = SpyreDeviceState
    mod._SpyreStreamBase = SpyreStreamBase  # the name _C.pyi gives it
    for cls in (JobPlan, SymbolicArg, SymbolicArgKind, SpyreStreamError, SpyreDeviceState, SpyreStreamBase):
        cls.__module__ = name

    # --- dtypes
    mod.get_device_dtype = L.get_device_dtype
    mod.get_elem_in_stick = L.get_elem_in_stick
    mod.encode_constant = L.encode_constant
    mod.get_downcast_warning = L.get_downcast_warning
    mod.set_downcast_warning = L.set_downcast_warning

    # --- tensors on the device
    def get_spyre_tensor_layout(tensor: torch.Tensor) -> L.SpyreTensorLayout:
        _require_spyre(tensor, "get_spyre_tensor_layout")
        return _layout_from_record(tensor)

    def set_spyre_tensor_layout(tensor: torch.Tensor, layout: L.SpyreTensorLayout) -> None:
        _require_spyre(tensor, "set_spyre_tensor_layout")
        _store(tensor, _require_layout(layout))

    def spyre_empty_with_layout(size: Sequence[int], stride: Sequence[int], dtype: torch.dtype,
                                layout: L.SpyreTensorLayout) -> torch.Tensor:
        stl = _require_layout(layout)
        _check_dtype(dtype)
        rec.count("spyre_empty_with_layout")
        return _ops().empty_with_layout(list(size), list(stride), dtype, stl.device_size, stl.stride_map,
                                        stl.device_dtype.value, stl.element_arrangement.value, stl.device_bytes())

    def empty_with_layout(size: Sequence[int], layout: L.SpyreTensorLayout, dtype: torch.dtype | None = None,
                          device: Any = None, pin_memory: bool | None = None,
                          memory_format: Any = None) -> torch.Tensor:
        stl = _require_layout(layout)
        dtype = dtype if dtype is not None else torch.get_default_dtype()
        _check_dtype(dtype)
        if device is not None and torch.device(device).type != torch._C._get_privateuse1_backend_name():
            raise RuntimeError(f"empty_with_layout: expected the spyre device, got {device}")
        if pin_memory:
            raise RuntimeError("Pin memory can only be on CPU")
        if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
            raise RuntimeError(f"Spyre backend only supports contiguous memory format, got: {memory_format}")
        size = [int(s) for s in size]
        strides = L._contiguous_strides(size)
        rec.count("empty_with_layout")
        return _ops().empty_with_layout(size, strides, dtype, stl.device_size, stl.stride_map,
                                        stl.device_dtype.value, stl.element_arrangement.value, stl.device_bytes())

    def as_strided_with_layout(tensor: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                               storage_offset: int | None, layout: L.SpyreTensorLayout) -> torch.Tensor:
        _require_spyre(tensor, "as_strided_with_layout")
        stl = _require_layout(layout)
        _layout_from_record(tensor)  # the source's record must exist to compare against
        offset = tensor.storage_offset() if storage_offset is None else int(storage_offset)
        return _ops().view_with_layout(tensor, list(size), list(stride), offset, False, True, stl.device_size,
                                       stl.stride_map, stl.device_dtype.value, stl.element_arrangement.value)

    def reinterpret_tensor_with_layout(tensor: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                                       offset_increment: int, layout: L.SpyreTensorLayout) -> torch.Tensor:
        if not _is_spyre(tensor):
            from torch._C._dynamo.guards import _reinterpret_tensor

            return _reinterpret_tensor(tensor, list(size), list(stride), int(offset_increment))
        stl = _require_layout(layout)
        _layout_from_record(tensor)
        return _ops().view_with_layout(tensor, list(size), list(stride), int(offset_increment), True, False,
                                       stl.device_size, stl.stride_map, stl.device_dtype.value,
                                       stl.element_arrangement.value)

    def reinterpret_tensor(tensor: torch.Tensor, size: Sequence[int], stride: Sequence[int],
                           offset_increment: int) -> torch.Tensor:
        if not _is_spyre(tensor):
            from torch._C._dynamo.guards import _reinterpret_tensor

            return _reinterpret_tensor(tensor, list(size), list(stride), int(offset_increment))
        return reinterpret_tensor_with_layout(tensor, size, stride, offset_increment, _layout_from_record(tensor))

    def copy_tensor(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> None:
        if not (_is_spyre(self) or _is_spyre(dst)):
            raise RuntimeError("copy_tensor: one of the tensors must be on the spyre device")
        src = _ops().host_view(self) if _is_spyre(self) else self
        out = _ops().host_view(dst) if _is_spyre(dst) else dst
        with torch.no_grad():
            out.copy_(src)
        rec.count("copy_tensor")

    def fill_tensor(self: torch.Tensor, value: float) -> torch.Tensor:
        _require_spyre(self, "spyre_fill_tensor")
        if self.numel() == 0:
            raise RuntimeError("spyre_fill_tensor: cannot fill empty tensor")
        with torch.no_grad():
            _ops().host_view(self).fill_(float(value))
        rec.count("fill_tensor")
        return self

    def to_with_layout(tensor: torch.Tensor, layout: L.SpyreTensorLayout) -> torch.Tensor:
        stl = _require_layout(layout)
        dst = spyre_empty_with_layout(tensor.size(), tensor.stride(), tensor.dtype, stl)
        copy_tensor(tensor, dst)
        return dst

    mod.get_spyre_tensor_layout = get_spyre_tensor_layout
    mod.set_spyre_tensor_layout = set_spyre_tensor_layout
    mod.spyre_empty_with_layout = spyre_empty_with_layout
    mod.empty_with_layout = empty_with_layout
    mod.as_strided_with_layout = as_strided_with_layout
    mod.reinterpret_tensor = reinterpret_tensor
    mod.reinterpret_tensor_with_layout = reinterpret_tensor_with_layout
    mod.copy_tensor = copy_tensor
    mod.fill_tensor = fill_tensor
    mod.to_with_layout = to_with_layout

    # --- the runtime: recorded, never started
    def start_runtime() -> None:
        with state.lock:
            first = not state.runtime_started
            state.runtime_started = True
        rec.add("start_runtime", first=first)

    def free_runtime() -> None:
        with state.lock:
            state.runtime_started = False
        rec.add("free_runtime")

    def get_device_state() -> SpyreDeviceState:
        return SpyreDeviceState.Ok if state.runtime_started else SpyreDeviceState.NotInitialized

    def set_device(idx: int) -> None:
        if int(idx) != 0:
            raise RuntimeError(f"Device index {idx} out of range [0, 1)")

    mod.start_runtime = start_runtime
    mod.free_runtime = free_runtime
    mod.get_device_state = get_device_state
    mod.device_count = lambda: 1
    mod.set_device = set_device
    mod.current_device = lambda: 0
    mod.prepare_kernel = state.launcher.prepare_kernel
    mod.launch_jobplan = state.launcher.launch_jobplan

    # --- kernel provenance (torch-spyre's own record)
    mod.register_kernel_provenance = state.registry.register
    mod.lookup_kernel_provenance = state.registry.lookup
    mod.kernel_provenance_registry_stats = state.registry.stats
    mod.extract_kernel_provenance_key = extract_kernel_provenance_key

    # --- streams
    mod.get_stream_from_pool = state.streams.get_stream_from_pool
    mod.current_stream = state.streams.current_stream
    mod.default_stream = state.streams.default_stream
    mod.set_current_stream = state.streams.set_current_stream
    mod.host_compute_stream = state.streams.host_compute_stream
    mod.host_compute_stream_by_id = state.streams.host_compute_stream_by_id
    mod.synchronize = state.streams.synchronize
    mod.stream_get_error = lambda stream: SpyreStreamError.Success
    mod.stream_get_error_string = lambda error: str(getattr(error, "name", error))

    # --- random numbers: host generators, one per device index
    def _get_default_generator(device: int = -1) -> torch.Generator:
        idx = 0 if device is None or int(device) < 0 else int(device)
        with state.lock:
            gen = state.generators.get(idx)
            if gen is None:
                gen = state.generators[idx] = torch.Generator(device="cpu")
        return gen

    mod._get_default_generator = _get_default_generator
    mod.manual_seed = lambda seed, device=-1: _get_default_generator(device).manual_seed(int(seed)) and None
    mod.manual_seed_all = lambda seed: _get_default_generator(0).manual_seed(int(seed)) and None
    mod.get_rng_state = lambda device=-1: _get_default_generator(device).get_state()
    mod.set_rng_state = lambda new_state, device=-1: _get_default_generator(device).set_state(new_state) and None
    mod.initial_seed = lambda device=-1: _get_default_generator(device).initial_seed()

    # --- allocator statistics (host memory the stand-in device holds)
    def _spyre_get_allocator_stats(device: int = 0) -> dict[str, int]:
        live, count = _ops().memory_stats()
        return {"allocated_bytes.all.current": int(live), "allocation.all.current": int(count)}

    mod._spyre_get_allocator_stats = _spyre_get_allocator_stats
    mod._spyre_reset_accumulated_stats = lambda device=0: None
    mod._spyre_reset_peak_stats = lambda device=0: None

    # --- the scratchpad layout packer: torch-spyre's own Python solver, which the native one reproduces
    class NativePermutationLayoutSolver:
        """Builds torch-spyre's canonical Python ``PermutationBasedLayoutSolver`` (the native packer is a
        faster copy of it); the stand-in has no native packer of its own."""

        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            from torch_spyre._inductor.scratchpad.permutation_layout import PermutationBasedLayoutSolver

            rec.count("NativePermutationLayoutSolver")
            return PermutationBasedLayoutSolver(*args, **kwargs)

    NativePermutationLayoutSolver.__module__ = name
    mod.NativePermutationLayoutSolver = NativePermutationLayoutSolver

    mod._logging = _logging_module(name + "._logging")
    return mod


def _check_dtype(dtype: Any) -> None:
    if not L.is_supported_dtype(dtype):
        raise RuntimeError(f"Spyre backend does not support dtype {dtype}")


def supported_scalar_types() -> list[Any]:
    """The torch dtypes the device accepts: a device format with a stick size (``is_supported_dtype``)."""
    return [dt for dt in L._dtype_names() if L.is_supported_dtype(dt)]


# --- C++ logging configuration: kept, never printed from --------------------------------


def _logging_module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name, "C++ logging interface (stand-in: configuration is kept, nothing logs from C++)")

    class LogLevel(int):
        __members__: dict[str, "LogLevel"] = {}

        def __new__(cls, value: int) -> "LogLevel":
            return int.__new__(cls, value)

        @property
        def name(self) -> str:
            return {0: "NOTSET", 10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}.get(int(self), "")

        @property
        def value(self) -> int:
            return int(self)

        def __repr__(self) -> str:
            return f"<LogLevel.{self.name}: {int(self)}>"

        def __str__(self) -> str:
            return f"LogLevel.{self.name}"

    for level_name, value in (("NOTSET", 0), ("DEBUG", 10), ("INFO", 20), ("WARNING", 30), ("ERROR", 40),
                              ("CRITICAL", 50)):
        member = LogLevel(value)
        setattr(LogLevel, level_name, member)
        LogLevel.__members__[level_name] = member
        setattr(mod, level_name, member)

    class LoggingConfig:
        _instance: "LoggingConfig | None" = None

        def __init__(self) -> None:
            self._levels: dict[str, int] = {}
            self._file = ""

        @classmethod
        def instance(cls) -> "LoggingConfig":
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

        def initialize_from_python(self, config: Sequence[tuple[str, int]]) -> None:
            self._levels = {str(c): int(level) for c, level in config}

        def get_log_level(self, component: str) -> LogLevel:
            parts = component.split(".")
            for i in range(len(parts), 0, -1):
                key = ".".join(parts[:i])
                if key in self._levels:
                    return LogLevel(self._levels[key])
            return LogLevel(30)

        def set_log_level(self, component: str, level: Any) -> None:
            self._levels[component] = int(level)

        def is_enabled(self, component: str, level: Any) -> bool:
            return int(level) >= int(self.get_log_level(component))

        def get_components(self) -> list[str]:
            return sorted(self._levels)

        def set_log_file(self, path: str) -> None:
            self._file = path

    def log_level_to_string(level: Any) -> str:
        return LogLevel(int(level)).name or "UNKNOWN"

    def string_to_log_level(level_str: str) -> LogLevel:
        return getattr(LogLevel, level_str, None) if level_str in LogLevel.__members__ and level_str != "NOTSET" \
            else LogLevel(0)

    mod.LogLevel = LogLevel
    mod.LoggingConfig = LoggingConfig
    mod.log_level_to_string = log_level_to_string
    mod.string_to_log_level = string_to_log_level
    mod.log_message = lambda component, level, message: None
    mod.emit_test_log = lambda component, level, message: None
    return mod
