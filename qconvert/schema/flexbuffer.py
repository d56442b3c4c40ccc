"""A custom op's options: the FlexBuffer map TensorFlow's converter writes, and back.

TensorFlow 2.21 writes a custom op's attributes as one FlexBuffer map (keys sorted,
widths picked by flexbuffers' builder); ``flatbuffers.flexbuffers`` builds the same bytes (checked byte for byte against TensorFlow's files in
``tests/e2e/test_custom_ops.py``). Entries are ``(key, kind, value)`` with kind
"int", "float", "bool", "string" or "type" (a dtype name, written as its TensorType number).
"""

from __future__ import annotations

from typing import Any, Sequence

from qconvert.schema.codes import TENSOR_TYPES


def encode(entries: Sequence[tuple[str, str, Any]]) -> bytes:
    """The FlexBuffer map of ``entries``. The keys are written in sorted order: TensorFlow's
    attributes reach its builder sorted (MLIR keeps them so), and the key strings' order is
    part of the bytes (the map's key vector is sorted either way)."""
    from flatbuffers import flexbuffers  # here, not at start-up: only custom ops need it (1.3 ms)

    builder = flexbuffers.Builder()
    with builder.Map():
        for key, kind, value in sorted(entries, key=lambda e: e[0]):
            if kind == "bool":
                builder.Bool(key, bool(value))
            elif kind == "int":
                builder.Int(key, int(value))
            elif kind == "float":
                builder.Float(key, float(value))
            elif kind == "string":
                builder.String(key, str(value))
            elif kind == "type" and value in TENSOR_TYPES:
                builder.Int(key, TENSOR_TYPES[value])
            else:
                raise ValueError(f"custom option '{key}': {kind} {value!r} is not an int, float, bool, string or "
                                 f"TFLite tensor type")
    return bytes(builder.Finish())


def decode(data: bytes) -> Any:
    """The value a FlexBuffer holds (a dict for a map), or None when the bytes are not one."""
    if not data:
        return None
    from flatbuffers import flexbuffers

    try:
        return flexbuffers.Loads(bytes(data))
    except Exception:  # noqa: BLE001 (any malformed buffer: the caller shows hex instead)
        return None
