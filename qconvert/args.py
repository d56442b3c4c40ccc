"""Parsing of the textual arguments shared by `convert`, `batch` and manifests.

Pure Python (no numpy), so the CLI can use it before importing anything heavy.
Errors are ValueError with a message that quotes the text; callers turn them into
usage errors.
"""

from __future__ import annotations

import math


def parse_range(text: str) -> tuple[str | None, tuple[float, float]]:
    """``[NAME=]MIN,MAX`` → (name or None, (min, max)), both finite and min < max."""
    name, sep, rng = str(text).rpartition("=")
    if not sep:
        name, rng = "", str(text)
    parts = rng.split(",")
    if len(parts) != 2:
        raise ValueError(f"'{text}': expected [NAME=]MIN,MAX, e.g. input=-1,1")
    try:
        lo, hi = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"'{text}': MIN and MAX must be numbers, e.g. input=-1,1") from None
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"'{text}': MIN and MAX must be finite")
    if not lo < hi:
        raise ValueError(f"'{text}': MIN must be less than MAX")
    return (name or None), (lo, hi)
