"""What identifies a constant's value: a digest of its dtype, shape and bytes (equal constants
stored once, ``quantize_pass/share.py``; repeated ops on equal constants, ``fold/dedupe.py``)."""

from __future__ import annotations

import numpy as np

from qconvert.ir.graph import dtype_name


def value_digest(value: np.ndarray) -> bytes:
    """16 bytes that differ for constants of another dtype, shape or contents (blake2b)."""
    try:  # hashlib's own blake2b (hashlib.blake2b is _blake2.blake2b) without the 2 ms of loading OpenSSL
        from _blake2 import blake2b
    except ImportError:  # a Python built without it
        from hashlib import blake2b

    value = np.ascontiguousarray(value)
    h = blake2b(digest_size=16)
    h.update(f"{dtype_name(value.dtype)}{value.shape}".encode())
    h.update(value.tobytes())
    return h.digest()
