"""Items kept already packed: a graph's node snapshots as msgpack bytes, not as live dicts.

A snapshot of a 1,750-node graph is tens of thousands of small dicts and lists.
Held until the record is written, they live through the host's garbage
collections, get promoted, and add full collections to the host's compile (one
more on the 24-layer encoder, about 1% of its compile time). Packing each item
the moment it is made leaves the collector nothing of ours to see: the bytes are
not tracked, and the item's dicts die young. The writer splices the packed items
into the record, so the stream is byte for byte what packing the dicts would give.

Read in-process (tests, user code), a `PackedList` unpacks its items on demand.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import msgpack

from prov_trace.stream.schema import PACK_OPTIONS as _PACK_OPTIONS
from prov_trace.stream.schema import UNPACK_OPTIONS as _UNPACK_OPTIONS


def new_packer() -> msgpack.Packer:
    """The packer settings of the trace stream. A Packer is not thread-safe: one per user."""
    return msgpack.Packer(**_PACK_OPTIONS)


class PackedList(Sequence):
    """A list of items, each held as its msgpack encoding."""

    __slots__ = ("_items", "size")

    def __init__(self) -> None:
        self._items: list[bytes] = []
        #: Sum of the items' packed sizes.
        self.size = 0

    def append_packed(self, data: bytes) -> None:
        self._items.append(data)
        self.size += len(data)

    def packed_items(self) -> list[bytes]:
        return self._items

    def packed(self) -> bytes:
        """The msgpack encoding of the whole list, as packing the unpacked items would give."""
        return new_packer().pack_array_header(len(self._items)) + b"".join(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [msgpack.unpackb(d, **_UNPACK_OPTIONS) for d in self._items[index]]
        return msgpack.unpackb(self._items[index], **_UNPACK_OPTIONS)

    def __iter__(self) -> Iterator[Any]:
        for data in self._items:
            yield msgpack.unpackb(data, **_UNPACK_OPTIONS)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedList):
            return self._items == other._items
        if isinstance(other, (list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"PackedList({len(self._items)} items, {self.size} bytes)"


def _holds_packed(obj: dict, depth: int = 0) -> bool:
    for value in obj.values():
        if isinstance(value, PackedList):
            return True
        if type(value) is dict and depth < 8 and _holds_packed(value, depth + 1):
            return True
    return False


def _default(obj: Any) -> Any:
    # A PackedList somewhere the splice does not look (inside a list): packed from its items.
    if isinstance(obj, PackedList):
        return list(obj)
    raise TypeError(f"can not serialize {type(obj).__name__!r} object")


def pack_record(packer: msgpack.Packer, record: dict) -> bytes:
    """Pack `record`, splicing in the packed bytes of each `PackedList` reached through dicts."""
    if not _holds_packed(record):
        return packer.pack(record)
    return _splice(packer, record, 0)


def _splice(packer: msgpack.Packer, obj: Any, depth: int) -> bytes:
    if isinstance(obj, PackedList):
        return obj.packed()
    if type(obj) is dict and depth <= 8 and _holds_packed(obj):
        parts = [packer.pack_map_header(len(obj))]
        for key, value in obj.items():
            parts.append(packer.pack(key))
            parts.append(_splice(packer, value, depth + 1))
        return b"".join(parts)
    return packer.pack(obj)


def skeleton(record: dict) -> tuple[dict, list[PackedList]]:
    """`record` with each PackedList that `pack_record` splices replaced by ``[]``, and those lists.

    For checking a large record against the reader's limits without unpacking its items
    (which would build, all at once, the very objects that packing early avoided).
    """
    lists: list[PackedList] = []

    def strip(obj: Any, depth: int) -> Any:
        if isinstance(obj, PackedList):
            lists.append(obj)
            return []
        if type(obj) is dict and depth <= 8:
            return {k: strip(v, depth + 1) for k, v in obj.items()}
        return obj

    return strip(record, 0), lists


def stream_packer() -> msgpack.Packer:
    """The writer's packer: the stream's settings, and PackedLists inside lists packed from their items."""
    return msgpack.Packer(default=_default, **_PACK_OPTIONS)
