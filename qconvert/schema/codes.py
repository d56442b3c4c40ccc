"""The TFLite schema's names: builtin codes, tensor types, option enums, and the spelling
of generated field names. Shared by the writer and the reader (which must not need the
writer, nor the IR it knows)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

FILE_IDENTIFIER = b"TFL3"

# Option fields that hold a schema enum, by generated (camelCase) field name.
ENUM_FIELDS: dict[str, type] = {
    "padding": schema.Padding,
    "fusedActivationFunction": schema.ActivationFunctionType,
    "weightsFormat": schema.FullyConnectedOptionsWeightsFormat,
    "quantizedBiasType": schema.TensorType,
    "outputType": schema.TensorType,
    "inDataType": schema.TensorType,
    "outDataType": schema.TensorType,
    "idxOutType": schema.TensorType,
    "outType": schema.TensorType,
    "keyDtype": schema.TensorType,
    "valueDtype": schema.TensorType,
    "type": schema.LSHProjectionType,
    "kernelType": schema.LSTMKernelType,
    "combiner": schema.CombinerType,
    "mode": schema.MirrorPadMode,
    "reduceFunction": schema.ReduceWindowFunction,
    "comparisonDirection": schema.StablehloComparisonDirection,
    "compareType": schema.StablehloComparisonType,
    "algorithm": schema.RngAlgorithm,
    "compositeAttributesFormat": schema.CustomOptionsFormat,
}


def _members(enum: type) -> dict[str, int]:
    return {k: v for k, v in vars(enum).items() if not k.startswith("_")}


BUILTIN_CODES: dict[str, int] = _members(schema.BuiltinOperator)
BUILTIN_NAMES: dict[int, str] = {v: k for k, v in BUILTIN_CODES.items()}
TENSOR_TYPES: dict[str, int] = {k.lower(): v for k, v in _members(schema.TensorType).items()}
TENSOR_TYPE_NAMES: dict[int, str] = {v: k for k, v in TENSOR_TYPES.items()}


def snake_to_camel(name: str) -> str:
    """``dilation_w_factor`` → ``dilationWFactor``: the generated field names."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_to_snake(name: str) -> str:
    """``dilationWFactor`` → ``dilation_w_factor``; the inverse of :func:`snake_to_camel`."""
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), name)



def enum_name(field: str, value: Any) -> Any:
    """An enum field's integer as its schema name (``padding`` 1 → "VALID"), else the value."""
    enum = ENUM_FIELDS.get(field)
    if enum is None or isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        return value
    for name, code in _members(enum).items():
        if code == value:
            return name
    return int(value)
