"""Device data formats, stick sizes and ``SpyreTensorLayout``, as torch-spyre's C++ defines them.

Written for prov-trace from the behaviour described by torch-spyre's ``_C.pyi`` and
``csrc/`` (``types_mapping.h``, ``spyre_tensor_impl.{h,cpp}``, ``module.cpp``); no code
is taken from there.

What the C++ takes from a library outside the torch-spyre tree (the DeepTools
``dataFormatToStickSize`` table and ``FloatToFp16Bin``) is not in the source; where this
module has to stand in for them it says so next to the value.
"""

from __future__ import annotations

import enum
import inspect
import operator
import struct
import threading
import warnings
from typing import Any, Iterable, Sequence

#: A stick is 128 bytes on the device (``BYTES_IN_STICK`` in the C++).
BYTES_IN_STICK = 128

#: The module name these types report, so a trace or a pickle names them as the real extension does.
MODULE = "torch_spyre._C"


class DataFormats(enum.Enum):
    """Device and host data formats; member values are the C++ enum's (see ``_C.pyi``).

    A plain ``Enum``: ``str(DataFormats.IEEE_FP32)`` is ``"DataFormats.IEEE_FP32"``, which
    generated code relies on, as it does with the real (pybind11) enum.
    """

    SEN169_FP16 = 0
    IEEE_FP32 = 1
    INVALID = 2
    SEN143_FP8 = 3
    SEN152_FP8 = 4
    SEN153_FP9 = 5
    SENINT2 = 6
    SENINT4 = 7
    SENINT8 = 8
    SENINT16 = 9
    SENINT24 = 10
    IEEE_INT64 = 11
    IEEE_INT32 = 12
    SENUINT32 = 13
    SENUINT2 = 14
    IEEE_FP16 = 15
    BOOL = 16
    BFLOAT16 = 17
    SEN18F_FP24 = 18

    def elems_per_stick(self) -> int:
        return elems_per_stick(self)

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


class ElementArrangement(enum.Enum):
    """How device coordinates are ordered in memory; values as in ``spyre_tensor_impl.h``."""

    STANDARD = 0
    DL16_TO_FP32 = 1
    QFP8CH = 2
    EXX2 = 3
    FP32_TO_DL16 = 4
    QFP8WT = 5

    def __int__(self) -> int:
        return self.value

    def __index__(self) -> int:
        return self.value


for _cls in (DataFormats, ElementArrangement):
    _cls.__module__ = MODULE

# Bits per element on the device. The C++ reads elements-per-stick from DeepTools'
# ``dataFormatToStickSize`` (not in the torch-spyre tree) except for IEEE_INT32, which it
# fixes at 32. The stand-in derives the count from the 128-byte stick and the element width,
# for the formats whose width divides the stick; the others (a 9-bit and two 24-bit formats)
# get 0, which torch-spyre's ``is_supported_dtype`` reads as "not supported".
_ELEMENT_BITS: dict[DataFormats, int] = {
    DataFormats.SEN169_FP16: 16,
    DataFormats.IEEE_FP32: 32,
    DataFormats.SEN143_FP8: 8,
    DataFormats.SEN152_FP8: 8,
    DataFormats.SENINT2: 2,
    DataFormats.SENINT4: 4,
    DataFormats.SENINT8: 8,
    DataFormats.SENINT16: 16,
    DataFormats.IEEE_INT64: 64,
    DataFormats.IEEE_INT32: 32,
    DataFormats.SENUINT32: 32,
    DataFormats.SENUINT2: 2,
    DataFormats.IEEE_FP16: 16,
    DataFormats.BOOL: 16,      # a bool is 2 bytes on the device (``elementSize`` in types_mapping.h)
    DataFormats.BFLOAT16: 16,
}


def elems_per_stick(df: DataFormats) -> int:
    """Elements of format `df` in one 128-byte stick (0: a format with no stick size)."""
    df = DataFormats(int(df)) if not isinstance(df, DataFormats) else df
    if df is DataFormats.IEEE_INT32:
        return 32  # fixed in the C++ itself
    bits = _ELEMENT_BITS.get(df)
    return 0 if not bits else BYTES_IN_STICK * 8 // bits


# torch dtype -> the name the C++ uses for it (``torchScalarToString``).
def _dtype_names() -> dict[Any, str]:
    import torch

    pairs = [
        ("uint8", "uint8"), ("int8", "int8"), ("float8_e4m3fn", "fp8_143"), ("float8_e5m2fnuz", "fp8_152"),
        ("int16", "int16"), ("int32", "int32"), ("int64", "int64"), ("float16", "float16"),
        ("float32", "float32"), ("float64", "float64"), ("bool", "bool"), ("bfloat16", "bfloat16"),
        ("complex32", "complex32"), ("complex64", "complex64"), ("complex128", "complex128"),
        ("qint8", "qint8"), ("quint8", "quint8"), ("qint32", "qint32"), ("quint4x2", "quint4x2"),
        ("quint2x4", "quint2x4"),
    ]
    return {getattr(torch, attr): name for attr, name in pairs if hasattr(torch, attr)}


# name -> (host format, device format) (``stringToDTDataFormatPair``).
_FORMAT_PAIRS: dict[str, tuple[DataFormats, DataFormats]] = {
    "float16": (DataFormats.IEEE_FP16, DataFormats.SEN169_FP16),
    "float32": (DataFormats.IEEE_FP32, DataFormats.IEEE_FP32),
    "int8": (DataFormats.SENINT8, DataFormats.SENINT8),
    "int16": (DataFormats.SENINT16, DataFormats.SENINT16),
    "int32": (DataFormats.IEEE_INT32, DataFormats.IEEE_INT32),
    "int64": (DataFormats.IEEE_INT64, DataFormats.IEEE_INT32),
    "bool": (DataFormats.BOOL, DataFormats.SEN169_FP16),
    "bfloat16": (DataFormats.BFLOAT16, DataFormats.SEN169_FP16),
    "quint8": (DataFormats.SENUINT32, DataFormats.SENUINT32),
    "qint8": (DataFormats.SENINT8, DataFormats.SENINT8),
    "quint4x2": (DataFormats.SENUINT2, DataFormats.SENUINT2),
    "quint2x4": (DataFormats.SENUINT2, DataFormats.SENUINT2),
    "uint8": (DataFormats.SENUINT32, DataFormats.SENUINT32),
    "int4": (DataFormats.SENINT4, DataFormats.SENINT4),
    "int2": (DataFormats.SENINT2, DataFormats.SENINT2),
    "fp8_143": (DataFormats.SEN143_FP8, DataFormats.SEN143_FP8),
    "fp8_152": (DataFormats.SEN152_FP8, DataFormats.SEN152_FP8),
    "fp9_153": (DataFormats.SEN153_FP9, DataFormats.SEN153_FP9),
    "int24": (DataFormats.SENINT24, DataFormats.SENINT24),
}

_DOWNCAST_ENV = "SPYRE_DOWNCAST_WARN"
_downcast_lock = threading.Lock()
_downcast = {"enabled": True, "warned": False, "env_read": False}


def _downcast_enabled() -> bool:
    import os

    with _downcast_lock:
        if not _downcast["env_read"]:
            _downcast["env_read"] = True
            value = os.environ.get(_DOWNCAST_ENV)
            if value is not None:
                _downcast["enabled"] = value.strip().lower() not in ("0", "false", "off")
        return _downcast["enabled"]


def set_downcast_warning(enabled: bool) -> None:
    with _downcast_lock:
        _downcast["env_read"] = True
        _downcast["enabled"] = bool(enabled)


def get_downcast_warning() -> bool:
    return _downcast_enabled()


def format_pair(dtype: Any, warn: bool = True) -> tuple[DataFormats, DataFormats]:
    """(host format, device format) of a torch dtype; INVALID twice for a dtype with none.

    int64 is kept as int32 on the device; the first such lookup warns (as the C++ does), unless
    `warn` is false or the downcast warning is switched off.
    """
    name = _dtype_names().get(dtype, "")
    pair = _FORMAT_PAIRS.get(name)
    if pair is None:
        return DataFormats.INVALID, DataFormats.INVALID
    if warn and name == "int64" and _downcast_enabled():
        with _downcast_lock:
            first = not _downcast["warned"]
            _downcast["warned"] = True
        if first:
            warnings.warn(
                "Backend Spyre does not support int64; downcasting to int32 may change values outside the "
                "32-bit range. You can silence this via warnings.filterwarnings(...) or "
                f"spyre.set_downcast_warning(False) or the {_DOWNCAST_ENV} environment variable.",
                UserWarning,
                stacklevel=3,
            )
    return pair


def get_device_dtype(dtype: Any) -> DataFormats:
    _require_dtype(dtype)
    return format_pair(dtype)[1]


def get_elem_in_stick(dtype: Any) -> int:
    _require_dtype(dtype)
    return elems_per_stick(format_pair(dtype)[1])


def is_supported_dtype(dtype: Any) -> bool:
    dev = format_pair(dtype, warn=False)[1]
    return dev is not DataFormats.INVALID and elems_per_stick(dev) > 0


def encode_constant(value: float, df: DataFormats) -> int:
    """The bit pattern of a scalar constant as the device reads it.

    IEEE_FP32: the float32 bits. Any other format: 16-bit half-precision bits. (The C++
    calls DeepTools' ``FloatToFp16Bin``, which is not in the torch-spyre tree; the stand-in
    encodes IEEE binary16, so a constant's bits in a stand-in bundle may differ from the
    hardware toolchain's for values a DL16 format rounds differently.)
    """
    value = float(value)
    df = df if isinstance(df, DataFormats) else DataFormats(int(df))
    if df is DataFormats.IEEE_FP32:
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return struct.unpack("<H", struct.pack("<e", _clamp_half(value)))[0]


def _clamp_half(value: float) -> float:
    # struct refuses values beyond the half range; a conversion saturates to infinity
    if value != value:
        return value
    if value > 65504.0:
        return float("inf")
    if value < -65504.0:
        return float("-inf")
    return value


def _require_dtype(dtype: Any) -> None:
    import torch

    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"expected a torch.dtype, got {type(dtype).__name__}")


# --- SpyreTensorLayout ------------------------------------------------------------------


def generic_dim_order(rank: int) -> list[int]:
    return list(range(rank))


def _ints(value: Any, what: str) -> list[int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a sequence of integers, got {type(value).__name__}")
    try:
        return [operator.index(v) for v in value]
    except TypeError:
        raise TypeError(f"{what} must be a sequence of integers") from None


def stick_dim_map(dim_order: Sequence[int]) -> list[int]:
    """Device dimensions in terms of host dimensions: non-stick dims once, the stick dim twice.

    For dim order (d0, ..., dk): (d1, ..., dk, d0, dk). A 7-entry order is only valid for a
    sparse stick (last entry -1).
    """
    rank = len(dim_order)
    if rank == 7 and dim_order[6] != -1:
        raise RuntimeError("7-element dim_order is only valid for sparse-stick (last entry must be -1)")
    if rank < 1 or rank > 7:
        raise RuntimeError(f"Unsupported tensor rank: {rank}")
    return [*dim_order[1:], dim_order[0], dim_order[-1]]


def compute_layout(host_size: Sequence[int], host_strides: Sequence[int], dtype: Any,
                   dim_order: Sequence[int]) -> tuple[list[int], list[int], DataFormats]:
    """(device_size, stride_map, device_dtype) of a host tensor, per ``SpyreTensorLayout::init``."""
    host_size = list(host_size)
    host_strides = list(host_strides)
    dim_order = list(dim_order)
    if not (len(host_size) == len(dim_order)
            or (len(host_size) + 1 == len(dim_order) and dim_order and dim_order[-1] == -1)):
        raise RuntimeError("Incompatible host_size and dim_order")
    device_dtype = format_pair(dtype)[1]
    eps = elems_per_stick(device_dtype)
    if not host_size:
        return [1, eps], [-1, -1], device_dtype
    if eps <= 0:
        raise RuntimeError(f"Spyre backend does not support dtype {dtype} (device format {device_dtype.name} "
                           "has no stick size)")
    dim_map = stick_dim_map(dim_order)
    sparse = dim_order[-1] == -1
    per_stick = 1 if sparse else eps
    stick_dim = dim_map[-1]
    device_size = [0] * len(dim_map)
    device_size[-1] = eps
    for i, dim in enumerate(dim_map[:-1]):
        if dim == stick_dim:
            device_size[i] = 1 if sparse else -(-host_size[stick_dim] // per_stick)
        else:
            device_size[i] = host_size[dim]
    # Walk device dims from the innermost out; a host dim that appears twice gets its host
    # stride at the inner (stick) position and that stride times the stick at the outer one.
    n = len(dim_map)
    stride_map = [-1] * n
    last = [-1] * max(n, len(host_size))
    for j in range(n - 1, -1, -1):
        d = dim_map[j]
        if d == -1 or host_size[d] == 1:
            stride_map[j] = -1
            continue
        stride_map[j] = host_strides[d] if last[d] == -1 else last[d]
        last[d] = stride_map[j] * device_size[j]
    return device_size, stride_map, device_dtype


def _contiguous_strides(size: Sequence[int]) -> list[int]:
    strides = [0] * len(size)
    acc = 1
    for i in range(len(size) - 1, -1, -1):
        strides[i] = acc
        acc *= size[i]
    return strides


def _is_torch_dtype(value: Any) -> bool:
    import torch

    return isinstance(value, torch.dtype)


_PICKLE_VERSION = 3


class SpyreTensorLayout:
    """The on-device layout of a tensor: ``device_size``, ``stride_map``, ``device_dtype``, ``element_arrangement``.

    Three constructors, as in ``_C.pyi``: ``(host_size, dtype)``;
    ``(host_size, host_strides, dtype, dim_order, element_arrangement=STANDARD)``;
    ``(device_size, stride_map, device_dtype, element_arrangement=STANDARD)``. ``repr``
    is the C++ ``toString()`` text, which evaluates back to an equal layout where
    ``SpyreTensorLayout``, ``DataFormats`` and ``ElementArrangement`` are in scope.
    """

    __slots__ = ("_device_size", "_stride_map", "_device_dtype", "_arrangement")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        for signature, builder in _CONSTRUCTORS:
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                continue
            bound.apply_defaults()
            try:
                builder(self, **bound.arguments)
            except _NoMatch:
                continue
            return
        raise TypeError(
            "SpyreTensorLayout(): incompatible constructor arguments. The supported signatures are:\n"
            "    1. (host_size: Sequence[int], dtype: torch.dtype)\n"
            "    2. (host_size: Sequence[int], host_strides: Sequence[int], dtype: torch.dtype, "
            "dim_order: Sequence[int], element_arrangement: ElementArrangement = STANDARD)\n"
            "    3. (device_size: Sequence[int], stride_map: Sequence[int], device_dtype: DataFormats, "
            "element_arrangement: ElementArrangement = STANDARD)\n"
            f"Invoked with: {args!r} {kwargs!r}"
        )

    # one builder per constructor; each raises _NoMatch when the arguments are not of its types
    def _from_host_size(self, host_size: Any, dtype: Any) -> None:
        if not _is_torch_dtype(dtype):
            raise _NoMatch("1")
        size = _ints_or_nomatch(host_size)
        self._set(*compute_layout(size, _contiguous_strides(size), dtype, generic_dim_order(len(size))),
                  ElementArrangement.STANDARD)

    def _from_host_strides(self, host_size: Any, host_strides: Any, dtype: Any, dim_order: Any,
                           element_arrangement: Any) -> None:
        if not _is_torch_dtype(dtype) or not isinstance(element_arrangement, ElementArrangement):
            raise _NoMatch("2")
        size = _ints_or_nomatch(host_size)
        strides = _ints_or_nomatch(host_strides)
        order = _ints_or_nomatch(dim_order)
        self._set(*compute_layout(size, strides, dtype, order), element_arrangement)

    def _from_device(self, device_size: Any, stride_map: Any, device_dtype: Any, element_arrangement: Any) -> None:
        if not isinstance(device_dtype, DataFormats) or not isinstance(element_arrangement, ElementArrangement):
            raise _NoMatch("3")
        self._set(_ints_or_nomatch(device_size), _ints_or_nomatch(stride_map), device_dtype, element_arrangement)

    def _set(self, device_size: list[int], stride_map: list[int], device_dtype: DataFormats,
             arrangement: ElementArrangement) -> None:
        object.__setattr__(self, "_device_size", tuple(device_size))
        object.__setattr__(self, "_stride_map", tuple(stride_map))
        object.__setattr__(self, "_device_dtype", device_dtype)
        object.__setattr__(self, "_arrangement", arrangement)

    @classmethod
    def _make(cls, device_size: Sequence[int], stride_map: Sequence[int], device_dtype: DataFormats,
              arrangement: ElementArrangement = ElementArrangement.STANDARD) -> "SpyreTensorLayout":
        obj = cls.__new__(cls)
        obj._set(list(device_size), list(stride_map), device_dtype, arrangement)
        return obj

    # read-only fields; each read gives a fresh list, like the pybind11 binding
    @property
    def device_size(self) -> list[int]:
        return list(self._device_size)

    @property
    def stride_map(self) -> list[int]:
        return list(self._stride_map)

    @property
    def device_dtype(self) -> DataFormats:
        return self._device_dtype

    @property
    def element_arrangement(self) -> ElementArrangement:
        return self._arrangement

    def elems_per_stick(self) -> int:
        return elems_per_stick(self._device_dtype)

    def with_element_arrangement(self, element_arrangement: ElementArrangement) -> "SpyreTensorLayout":
        if not isinstance(element_arrangement, ElementArrangement):
            raise TypeError(f"expected an ElementArrangement, got {type(element_arrangement).__name__}")
        return SpyreTensorLayout._make(self._device_size, self._stride_map, self._device_dtype, element_arrangement)

    def device_bytes(self) -> int:
        """Bytes the layout takes on the device: whole sticks (``get_device_size_in_bytes``)."""
        total = BYTES_IN_STICK
        for extent in self._device_size[:-1]:
            total *= extent
        return total

    def __repr__(self) -> str:
        text = (f"SpyreTensorLayout(device_size=[{', '.join(map(str, self._device_size))}], "
                f"stride_map =[{', '.join(map(str, self._stride_map))}], "
                f"device_dtype=DataFormats.{self._device_dtype.name}")
        if self._arrangement is not ElementArrangement.STANDARD:
            text += f", element_arrangement=ElementArrangement.{self._arrangement.name}"
        return text + ")"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SpyreTensorLayout):
            return NotImplemented
        return self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple:
        return (self._device_size, self._stride_map, self._device_dtype.value, self._arrangement.value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"SpyreTensorLayout.{name} is read-only")

    def __getstate__(self) -> tuple:
        return (_PICKLE_VERSION, list(self._device_size), list(self._stride_map), self._device_dtype,
                self._arrangement)

    def __setstate__(self, state: tuple) -> None:
        version = state[0]
        if version == 3 and len(state) == 5:
            self._set(list(state[1]), list(state[2]), DataFormats(int(state[3])), ElementArrangement(int(state[4])))
        elif version == 2 and len(state) == 4:
            self._set(list(state[1]), list(state[2]), DataFormats(int(state[3])), ElementArrangement.STANDARD)
        elif version == 1 and len(state) == 5:
            self._set(list(state[1]), list(state[3]), DataFormats(int(state[4])), ElementArrangement.STANDARD)
        else:
            raise ValueError(f"Unsupported SpyreTensorLayout pickle version: {version}")

    def __reduce__(self):
        return (_unpickle_layout, (self.__getstate__(),))

    def __copy__(self) -> "SpyreTensorLayout":
        return self

    def __deepcopy__(self, memo: dict) -> "SpyreTensorLayout":
        return self


def _unpickle_layout(state: tuple) -> SpyreTensorLayout:
    obj = SpyreTensorLayout.__new__(SpyreTensorLayout)
    obj.__setstate__(state)
    return obj


class _NoMatch(Exception):
    pass


def _ints_or_nomatch(value: Any) -> list[int]:
    try:
        return _ints(value, "argument")
    except TypeError:
        raise _NoMatch("not a sequence of integers") from None


def _signature(*names: str, arrangement: bool) -> inspect.Signature:
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
    if arrangement:
        params.append(inspect.Parameter("element_arrangement", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=ElementArrangement.STANDARD))
    return inspect.Signature(params)


# tried in this order, as pybind11 tries overloads
_CONSTRUCTORS = (
    (_signature("host_size", "dtype", arrangement=False), SpyreTensorLayout._from_host_size),
    (_signature("host_size", "host_strides", "dtype", "dim_order", arrangement=True),
     SpyreTensorLayout._from_host_strides),
    (_signature("device_size", "stride_map", "device_dtype", arrangement=True), SpyreTensorLayout._from_device),
)

SpyreTensorLayout.__module__ = MODULE
_unpickle_layout.__module__ = __name__
