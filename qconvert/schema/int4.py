"""INT4 tensors as TFLite stores them: two values per byte, the first in the low nibble,
over the flattened tensor (an odd count leaves the last high nibble zero). The schema's
TensorType 17; TensorFlow packs a ``num_bits=4`` weight this way (measured on 2.21:
values [-7, 7] give bytes such as 0x2D = 0b0010_1101 for (-3, 2))."""

from __future__ import annotations

import numpy as np


def pack_int4(values: np.ndarray) -> np.ndarray:
    """int8 values in [-8, 7] → the packed bytes (uint8, ``ceil(n / 2)`` of them)."""
    v = np.asarray(values).reshape(-1)
    if v.size and (v.min() < -8 or v.max() > 7):
        raise ValueError(f"int4 values must lie in [-8, 7], got [{int(v.min())}, {int(v.max())}]")
    nibbles = (v.astype(np.int16) & 0xF).astype(np.uint8)
    if nibbles.size % 2:
        nibbles = np.append(nibbles, np.uint8(0))
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)


def unpack_int4(data: bytes | np.ndarray, count: int) -> np.ndarray:
    """The first ``count`` int4 values of packed bytes, as int8 (sign-extended)."""
    raw = np.frombuffer(bytes(data), dtype=np.uint8) if isinstance(data, (bytes, bytearray)) else \
        np.asarray(data, dtype=np.uint8).reshape(-1)
    if raw.size * 2 < count:
        raise ValueError(f"{raw.size} bytes hold {raw.size * 2} int4 values, {count} needed")
    both = np.empty(raw.size * 2, dtype=np.int16)
    both[0::2] = raw & 0xF
    both[1::2] = raw >> 4
    both = np.where(both > 7, both - 16, both)
    return both[:count].astype(np.int8)
