"""Element-wise passes over large weights in cache-sized blocks.

A chain of in-place numpy operations on a whole 20 M-element weight streams it from
memory once per operation; on blocks of 32 K elements the chain runs in the cache (2.7×
faster for ``quantize_array``, 1.3–1.5× for the FakeQuant kernel; the same bits, since
every operation is element-wise)."""

from __future__ import annotations

from typing import Iterator

BLOCK = 1 << 15  # elements per block: 128 KB of float32, 256 KB of float64


def row_blocks(rows: int, row_size: int) -> Iterator[slice]:
    """Slices of whole rows (``row_size`` elements each) holding about ``BLOCK`` elements."""
    step = max(1, BLOCK // max(1, row_size))
    for start in range(0, rows, step):
        yield slice(start, start + step)
