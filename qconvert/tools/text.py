"""Text output shared by the tools: aligned tables."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def table(rows: Sequence[Sequence[str]], right: Iterable[int] = (), max_width: int = 56) -> list[str]:
    """Rows of cells → aligned lines (two spaces between columns; a cell wider than
    ``max_width`` overflows instead of widening its column)."""
    right = set(right)
    widths = [0] * max(len(r) for r in rows)
    for r in rows:
        for k, cell in enumerate(r):
            if len(cell) <= max_width:
                widths[k] = max(widths[k], len(cell))
    out = []
    for r in rows:
        cells = [c.rjust(widths[k]) if k in right else c.ljust(widths[k]) for k, c in enumerate(r)]
        out.append("  " + "  ".join(cells).rstrip())
    return out
