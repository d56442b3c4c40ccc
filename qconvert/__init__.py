"""qconvert: TensorFlow graphs to integer TFLite flatbuffers.

    import qconvert
    qconvert.convert("model.pb", "model.tflite", inputs_range={"input": (-1, 1)})

``convert``, ``ConvertOptions`` and ``Result`` are ``qconvert.api``'s, loaded on first use
so that ``import qconvert`` (and ``qconvert --help``) stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"
__all__ = ["ConvertOptions", "Result", "TargetError", "calibrate_graph", "convert", "__version__"]


def __getattr__(name: str) -> Any:
    if name in __all__:  # by name, so that modules importing __version__ do not depend on the API
        return getattr(importlib.import_module("qconvert.api"), name)
    raise AttributeError(f"module 'qconvert' has no attribute '{name}'")
