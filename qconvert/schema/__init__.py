"""The TFLite backend: the flatbuffer writer, a reader, and the requant-parameter metadata.

This package is the only place in qconvert that imports the flatbuffer bindings
(``ai_edge_litert.schema_py_generated``); the rest of the project sees plain data.
"""

from __future__ import annotations

from qconvert.schema.reader import ModelInfo, OpInfo, TensorInfo, read_model
from qconvert.schema.requant_metadata import RequantRecord
from qconvert.schema.requant_metadata import decode as decode_requant
from qconvert.schema.requant_metadata import encode as encode_requant
from qconvert.schema.writer import write_model

__all__ = [
    "ModelInfo",
    "OpInfo",
    "RequantRecord",
    "TensorInfo",
    "decode_requant",
    "encode_requant",
    "read_model",
    "write_model",
]
