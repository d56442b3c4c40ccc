"""What identifies a constant's value: a digest of its dtype, shape and bytes (equal constants
stored once, ``quantize_pass/share.py``; repeated ops on equal constants, ``fold/dedupe.py``)."""

from __future__ import annotations

import numpy as np

from qconvert.ir.graph import dtype_name


def value_digest(value: np.ndarray) -> bytes:
    """16 bytes that differ for constants of another dtype, shape or contents (blake2b)."""
    import hashlib  # here: OpenSSL's start-up cost only for conversions that compare constants

    value = np.ascontiguousarray(value)
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{dtype_name(value.dtype)}{value.shape}".encode())
    h.update(value.tobytes())
    return h.digest()
