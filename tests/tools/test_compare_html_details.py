"""compare_html's side-panel data: JSON has no NaN or infinity, a row's may (a zero float output: cosine NaN)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

from qconvert.tools import compare_html


def test_details_take_non_finite_values() -> None:
    row = SimpleNamespace(as_dict=lambda: {"shape": [1], "snr_db": "inf", "cosine": math.nan,
                                           "max_abs_error": math.inf, "local_snr_db": None})
    op = SimpleNamespace(index=0, op=SimpleNamespace(builtin="ADD"), prec="int8", name="a", consts="", row=row)
    data = json.loads(compare_html._details([op]))  # type: ignore[list-item]
    assert data["0"]["cosine"] is None and data["0"]["max_abs_error"] is None and data["0"]["snr_db"] == "inf"
