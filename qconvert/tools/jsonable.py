"""Plain JSON values for the tools' ``--json`` documents (``dump``, ``check``, ``compare``).

JSON has no NaN or infinity: ``json.dumps(..., allow_nan=False)`` takes what :func:`jsonable`
returns. A non-finite float is written as null (``finite``), or, where infinity means
something (an SNR with no error at all), as the text ``"inf"`` / ``"-inf"`` (``finite_or_inf``).

May import: the standard library only (numpy scalars are recognised without importing numpy).
"""

from __future__ import annotations

import math
from typing import Any


def finite(v: float) -> float | None:
    """``v`` as a float, or None when it is NaN or infinite."""
    return float(v) if math.isfinite(v) else None


def finite_or_inf(v: float) -> float | str:
    """``v``, or ``"inf"`` for +infinity and ``"-inf"`` otherwise (NaN too: the worst value)."""
    return v if math.isfinite(v) else ("inf" if v > 0 else "-inf")


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, keys as strings, numpy scalars as Python numbers,
    non-finite floats as None, and anything else that JSON cannot hold as its ``str``."""
    if isinstance(value, float):
        return finite(value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:  # np.int64, np.float32, np.bool_
        item = value.item()
        if isinstance(item, (bool, int, float)):
            return jsonable(item)
    return str(value)
