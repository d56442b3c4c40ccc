"""The flatbuffer builder the writer packs the model with: ``flatbuffers.Builder``'s layout, faster.

The object API generated into ``ai_edge_litert`` (``ModelT.Pack(builder)`` and every table's ``Pack``)
drives a builder through a few calls: ``StartObject``, the ``Prepend…Slot`` family, ``EndObject``,
``StartVector``/``EndVector``, ``CreateString``, ``CreateNumpyVector``, ``Prepend…``. This class
answers those calls with the same algorithm as ``flatbuffers.Builder`` (flatbuffers 25.x,
``builder.py``), so that the same calls give the same bytes:

- the buffer is built back to front; ``Prep(size, additional)`` aligns the next ``size``-byte value
  to come after ``additional`` bytes, padding with zeros, and grows the buffer by doubling it;
- a value in a table's slot is written only when it differs from the slot's default;
- ``EndObject`` writes the object's offset to its vtable, and the vtable itself unless an equal one
  (same field offsets and object size) was written before, which it reuses;
- a vector is its elements, aligned, after their 32-bit count; a string ends in a zero byte.

Beyond those calls, ``table``, ``vector`` and ``offsets`` write a whole table or vector in one call,
as the generated calls would, for the writer's many tensors and operators; ``pack`` writes a table
whose fields are known beforehand (a :class:`Layout`) in one ``struct`` call.

What it leaves out is ``flatbuffers.Builder``'s per-call cost: checks that each number fits its
type (``struct`` refuses one that does not), and zero padding written byte by byte (the bytes below
``head`` are never written before, and a new buffer is zeros). ``tests/schema/test_builder.py``
packs every kind of table the writer emits both ways and compares the bytes; the byte-identity
corpus compares whole files.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, Sequence

import numpy as np

_MAX = 2**31  # flatbuffers.Builder.MAX_BUFFER_SIZE
_pack = struct.pack_into
# Bytes per scalar format; "" is an offset (uoffset_t).
_SIZES = {"": 4, "<?": 1, "<B": 1, "<b": 1, "<H": 2, "<h": 2, "<I": 4, "<i": 4, "<Q": 8, "<q": 8, "<f": 4, "<d": 8}


def _scalar(fmt: str, size: int):  # type: ignore[no-untyped-def]
    """``Prepend<T>`` and ``Prepend<T>Slot`` for one scalar type."""

    def prepend(self: "Builder", x: Any) -> None:
        self.Prep(size, 0)
        self.head -= size
        _pack(fmt, self.Bytes, self.head, x)

    def prepend_slot(self: "Builder", slot: int, x: Any, default: Any) -> None:
        if x != default:
            self.Prep(size, 0)
            self.head -= size
            _pack(fmt, self.Bytes, self.head, x)
            self.vtable[slot] = len(self.Bytes) - self.head  # type: ignore[index]

    return prepend, prepend_slot


class Layout:
    """A table whose fields are known before their values: ``fields`` as :meth:`Builder.table` takes
    them, without the values ((slot, format) each, in the order the generated ``Pack`` adds them).
    :meth:`Builder.pack` writes such a table in one ``struct`` call, from the table's placement worked
    out once for each alignment it can start at (``plans``)."""

    __slots__ = ("numfields", "fields", "plans")

    def __init__(self, numfields: int, fields: Sequence[tuple[int, str]]) -> None:
        self.numfields, self.fields = numfields, tuple(fields)
        self.plans: dict[int, tuple[Any, ...]] = {}

    def plan(self, phase: int) -> tuple[Any, ...]:
        """Where ``table`` puts each field when the buffer holds ``phase`` (mod 8) bytes: (the object's
        size, its ``struct`` format low to high from the offset to the vtable on, each value's index
        and, for an offset, its distance from the object's end, the vtable, the fields' largest size)."""
        used = phase
        at = []  # each field's offset from the buffer's end
        largest = 4
        for slot, fmt in self.fields:
            size = _SIZES[fmt]
            used += (-used & (size - 1)) + size
            at.append(used)
            largest = max(largest, size)
        used += (-used & 3) + 4  # the offset to the vtable
        here = used
        n = max((slot + 1 for slot, _ in self.fields), default=0)
        vt = [0] * n
        for (slot, _), u in zip(self.fields, at):
            vt[slot] = here - u
        key = ((n + 2) * 2, here - phase, *vt)
        fmt, order, pos = "<i", [], 4  # low to high: the offset to the vtable, then the fields
        for i in sorted(range(len(at)), key=lambda i: -at[i]):
            start = here - at[i]
            if start > pos:
                fmt += f"{start - pos}x"
            field_fmt = self.fields[i][1]
            fmt += field_fmt[1:] if field_fmt else "I"
            pos = start + _SIZES[field_fmt]
            order.append((i, at[i] - phase if not field_fmt else None))
        plan = (here - phase, struct.Struct(fmt), tuple(order), key, struct.Struct(f"<{len(key)}H"), largest)
        self.plans[phase] = plan
        return plan


def _zeros(size: int) -> memoryview:
    """``size`` zero bytes that cost nothing until written: a deferred vector's room never is. A large
    buffer is an anonymous mapping, which the OS fills on first touch (calloc is one only above malloc's
    mmap threshold, which the command line raises to 32 MB: then it zero-fills, 5 ms on EfficientViT_M0's
    9 MB float model, measured); bytearray(n) writes its n zeros (RepViT_M09's 19 MB: 7 ms)."""
    if size >= 1 << 20:
        import mmap

        return memoryview(mmap.mmap(-1, size))
    return memoryview(np.zeros(size, np.uint8))


class Builder:
    """A flatbuffer builder with ``flatbuffers.Builder``'s layout (see the module's docstring);
    the methods the generated object API calls keep its names."""

    def __init__(self, initial_size: int = 1024) -> None:
        if not 0 <= initial_size <= _MAX:
            raise ValueError("a flatbuffer holds at most 2 GiB")
        self.Bytes = _zeros(initial_size)  # noqa: N815 (flatbuffers.Builder's name)
        self.head = initial_size
        self.deferred: list[tuple[int, Any]] = []  # (offset from the end of the buffer, bytes) placed by Output
        self.minalign = 1
        self.vtable: list[int] | None = None  # the slots of the table being built: offsets, 0 = absent
        self.object_end = 0
        self.vtables: dict[tuple[int, ...], int] = {}  # a written vtable's fields and object size → its offset
        self.nested = False
        self.vector_len = 0

    # -- space -----------------------------------------------------------------
    def Offset(self) -> int:  # noqa: N802
        """Offset from the end of the buffer."""
        return len(self.Bytes) - self.head

    def Head(self) -> int:  # noqa: N802
        return self.head

    def Output(self) -> bytes:  # noqa: N802
        """The finished buffer, the deferred vectors' bytes in their room: one copy of each byte."""
        parts, at, end = [], self.head, len(self.Bytes)
        for offset, data in reversed(self.deferred):  # the last written lies lowest
            start = end - offset
            parts += [self.Bytes[at:start], data]
            at = start + len(data)
        parts.append(self.Bytes[at:])
        return b"".join(parts)

    def Prep(self, size: int, additional: int) -> None:  # noqa: N802
        """Align so that a ``size``-byte value can follow ``additional`` bytes, with room for both."""
        if size > self.minalign:
            self.minalign = size
        used = len(self.Bytes) - self.head
        pad = -(used + additional) & (size - 1)
        needed = pad + size + additional
        if self.head < needed:
            self._grow(needed)
        self.head -= pad  # zeros already: nothing below head has been written

    def _grow(self, needed: int) -> None:
        old = len(self.Bytes)
        new = old
        while self.head + (new - old) < needed:
            if new == _MAX:
                raise ValueError("a flatbuffer holds at most 2 GiB")
            new = min(max(new * 2, 1), _MAX)
        grown = _zeros(new)
        grown[new - old:] = self.Bytes
        self.Bytes = grown
        self.head += new - old

    # -- tables ----------------------------------------------------------------
    def StartObject(self, numfields: int) -> None:  # noqa: N802
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        self.vtable = [0] * numfields
        self.object_end = len(self.Bytes) - self.head
        self.nested = True

    def PrependUOffsetTRelativeSlot(self, slot: int, x: int, default: int) -> None:  # noqa: N802
        if x != default:
            self.PrependUOffsetTRelative(x)
            self.vtable[slot] = len(self.Bytes) - self.head  # type: ignore[index]

    def EndObject(self) -> int:  # noqa: N802
        """Write the object's vtable offset and, unless an equal one exists, the vtable."""
        assert self.vtable is not None and self.nested
        vt, self.vtable, self.nested = self.vtable, None, False
        return self._end_object(vt, self.object_end)

    def _end_object(self, vt: list[int], object_end: int) -> int:
        needed = 8 + 2 * (len(vt) + 2)  # the offset to the vtable, its padding, the vtable
        if self.head < needed:
            self._grow(needed)
        B = self.Bytes
        end = len(B)
        head = self.head - ((self.head - end) & 3) - 4  # Prep(4, 0): the offset to the vtable, below
        if self.minalign < 4:
            self.minalign = 4
        here = end - head
        n = len(vt)
        while n and not vt[n - 1]:  # absent fields at the end take no room
            n -= 1
        # The vtable as it is laid out, low to high: its size, the object's size, a field offset per slot.
        key = ((n + 2) * 2, here - object_end, *[here - e if e else 0 for e in vt[:n]])
        found = self.vtables.get(key)
        if found is None:  # 2-byte entries right below a 4-aligned head: no padding
            head -= len(key) * 2
            _pack(f"<{len(key)}H", B, head, *key)
            found = end - head
            self.vtables[key] = found
        _pack("<i", B, end - here, found - here)
        self.head = head
        return here

    def table(self, numfields: int, fields: Sequence[tuple[int, str, Any]]) -> int:
        """A whole table in one call: what ``StartObject``, one ``Prepend…Slot`` per field and
        ``EndObject`` write, without a method call per field (the writer's tensors, operators and
        buffers: about half its time on MobileViT_XXS).

        ``fields``: (slot, format, value) in the order the generated ``Pack`` adds them, the fields
        equal to their default left out (as the slot methods skip them); ``format`` is a ``struct``
        format for a scalar, or "" for an offset to an object written before."""
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        needed = 16 * len(fields) + 2 * numfields + 16  # each field and its padding, the vtable
        if self.head < needed:
            self._grow(needed)
        B = self.Bytes
        end = len(B)
        head = self.head
        object_end = end - head
        minalign = self.minalign if self.minalign > 4 else 4
        vt = [0] * numfields
        n = 0  # the slots up to the last one given: absent fields at the end take no room
        for slot, fmt, value in fields:
            size = _SIZES[fmt]
            head -= ((head - end) & (size - 1)) + size  # Prep(size, 0), then the value
            if fmt:
                _pack(fmt, B, head, value)
            else:
                _pack("<I", B, head, end - head - value)
            vt[slot] = end - head
            if slot >= n:
                n = slot + 1
            if size > minalign:
                minalign = size
        head -= ((head - end) & 3) + 4  # EndObject: the offset to the vtable, written below
        here = end - head
        key = ((n + 2) * 2, here - object_end, *[here - e if e else 0 for e in vt[:n]])
        found = self.vtables.get(key)
        if found is None:
            head -= len(key) * 2
            _pack(f"<{len(key)}H", B, head, *key)
            found = end - head
            self.vtables[key] = found
        _pack("<i", B, end - here, found - here)
        self.head, self.minalign = head, minalign
        return here

    def pack(self, layout: Layout, values: Sequence[Any]) -> int:
        """:meth:`table` of ``layout``'s fields with ``values`` (one each, in its order; offsets to
        objects written before, or scalars, none equal to its default): the same bytes, without a
        step per field (1,138 tensors of EfficientViT_M0: 2.5 ms less, measured)."""
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        end = len(self.Bytes)
        used = end - self.head
        size, fmt, order, key, key_fmt, largest = layout.plans.get(used & 7) or layout.plan(used & 7)
        if self.head < size + 2 * len(key) + 8:
            self._grow(size + 2 * len(key) + 8)
            end = len(self.Bytes)
        B = self.Bytes
        head = end - used - size
        here = used + size
        found = self.vtables.get(key)
        if found is None:
            key_fmt.pack_into(B, head - 2 * len(key), *key)
            found = self.vtables[key] = here + 2 * len(key)
            self.head = head - 2 * len(key)
        else:
            self.head = head
        fmt.pack_into(B, head, found - here,
                      *[values[i] if at is None else used + at - values[i] for i, at in order])
        if largest > self.minalign:
            self.minalign = largest
        elif self.minalign < 4:
            self.minalign = 4
        return here

    # -- vectors and strings ---------------------------------------------------
    def PrependUOffsetTRelative(self, off: int) -> None:  # noqa: N802
        self.Prep(4, 0)
        here = len(self.Bytes) - self.head
        if off > here:
            raise ValueError("flatbuffers: offset arithmetic error")
        self.head -= 4
        _pack("<I", self.Bytes, self.head, here - off + 4)

    def StartVector(self, elem_size: int, num_elems: int, alignment: int) -> int:  # noqa: N802
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        self.nested = True
        self.vector_len = num_elems
        self.Prep(4, elem_size * num_elems)
        self.Prep(alignment, elem_size * num_elems)
        return len(self.Bytes) - self.head

    def EndVector(self, num_elems: int | None = None) -> int:  # noqa: N802
        self.nested = False
        if num_elems is not None and num_elems != self.vector_len:
            raise ValueError("flatbuffers: vector length mismatch")
        self.head -= 4  # the count: room made by StartVector's Prep
        _pack("<I", self.Bytes, self.head, self.vector_len)
        return len(self.Bytes) - self.head

    def _place(self, payload: bytes) -> None:
        self.head -= len(payload)
        self.Bytes[self.head:self.head + len(payload)] = payload

    def vector(self, data: bytes | np.ndarray, elem_size: int, alignment: int = 4, defer: bool = False) -> int:
        """A vector of numbers from their little-endian bytes (``bytes``, or a contiguous uint8
        array, placed without an intermediate copy): ``StartVector``, the elements, ``EndVector``.
        ``defer``: the bytes are kept (not copied, not to be changed) and placed by :meth:`Output`, in
        the one copy it makes anyway (a model's constants: 19 MB copied once instead of twice)."""
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        size = len(data)
        if alignment < 4:
            alignment = 4  # StartVector's Prep(4, size) then Prep(alignment, size)
        if self.head < size + 2 * alignment:
            self._grow(size + 2 * alignment)
        if alignment > self.minalign:
            self.minalign = alignment
        end = len(self.Bytes)
        top = self.head - ((self.head - end - size) & (alignment - 1))  # the padding of both Preps
        head = top - size
        if defer:
            if size:
                self.deferred.append((end - head, data))
        else:
            self.Bytes[head:top] = data
        head -= 4
        _pack("<I", self.Bytes, head, size // elem_size)
        self.head = head
        return end - head

    def offsets(self, offsets: Sequence[int]) -> int:
        """A vector of offsets to objects written before: ``StartVector`` then
        ``PrependUOffsetTRelative`` for each, last to first, then ``EndVector``."""
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        n = len(offsets)
        self.Prep(4, 4 * n)
        end = len(self.Bytes)
        head = self.head - 4 * n
        _pack(f"<{n + 1}I", self.Bytes, head - 4, n, *[end - head - 4 * i - off for i, off in enumerate(offsets)])
        self.head = head - 4
        return end - self.head

    def CreateNumpyVector(self, x: np.ndarray) -> int:  # noqa: N802
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "biuf" or x.ndim > 1:
            raise TypeError("CreateNumpyVector takes a 1-D numpy array of numbers")
        self.StartVector(x.itemsize, x.size, x.dtype.alignment)
        self._place((x if x.dtype.str[0] != ">" else x.byteswap()).tobytes(order="C"))
        self.vector_len = x.size
        return self.EndVector()

    def CreateString(self, s: str | bytes) -> int:  # noqa: N802
        if self.nested:
            raise ValueError("flatbuffers: an object or vector is already being built")
        self.nested = True
        x = s.encode("utf-8") if isinstance(s, str) else bytes(s)
        self.Prep(4, len(x) + 1)
        self.head -= 1  # the terminating zero
        self._place(x)
        self.vector_len = len(x)
        return self.EndVector()

    def Finish(self, root: int, file_identifier: bytes | None = None) -> int:  # noqa: N802
        self.Prep(self.minalign, 4 + (4 if file_identifier is not None else 0))
        if file_identifier is not None:
            self.Prep(4, 4)
            self._place(bytes(file_identifier))
        self.PrependUOffsetTRelative(root)
        return self.head

    PrependBool, PrependBoolSlot = _scalar("<?", 1)  # noqa: N815
    PrependUint8, PrependUint8Slot = _scalar("<B", 1)  # noqa: N815
    PrependInt8, PrependInt8Slot = _scalar("<b", 1)  # noqa: N815
    PrependUint16, PrependUint16Slot = _scalar("<H", 2)  # noqa: N815
    PrependInt16, PrependInt16Slot = _scalar("<h", 2)  # noqa: N815
    PrependUint32, PrependUint32Slot = _scalar("<I", 4)  # noqa: N815
    PrependInt32, PrependInt32Slot = _scalar("<i", 4)  # noqa: N815
    PrependUint64, PrependUint64Slot = _scalar("<Q", 8)  # noqa: N815
    PrependInt64, PrependInt64Slot = _scalar("<q", 8)  # noqa: N815
    PrependFloat32, PrependFloat32Slot = _scalar("<f", 4)  # noqa: N815
    PrependFloat64, PrependFloat64Slot = _scalar("<d", 8)  # noqa: N815
