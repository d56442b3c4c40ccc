"""The library API, at the name users import (it lives in ``qconvert.converter.api``)."""

from qconvert.converter.api import Result, convert, convert_graph, default_output  # noqa: F401

__all__ = ["Result", "convert", "convert_graph", "default_output"]
