"""The library API, at the name users import (it lives in ``qconvert.converter.api``)."""

from qconvert.calibration.stats import Stats  # noqa: F401
from qconvert.converter.api import Result, calibrate_graph, convert, convert_graph, default_output  # noqa: F401

__all__ = ["Result", "Stats", "calibrate_graph", "convert", "convert_graph", "default_output"]
