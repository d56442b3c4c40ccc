"""The TFLite schema's names: builtin codes, tensor types, option enums, and the spelling
of generated field names. Shared by the writer and the reader (which must not need the
writer, nor the IR it knows). Read from ``layout`` (generated from ``ai_edge_litert``'s schema module,
which importing this does not load: 8 ms of start-up)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from qconvert.schema.layout import ENUMS

FILE_IDENTIFIER = b"TFL3"

# Option fields that hold a schema enum (its names → values), by generated (camelCase) field name.
ENUM_FIELDS: dict[str, dict[str, int]] = {
    "padding": ENUMS["Padding"],
    "fusedActivationFunction": ENUMS["ActivationFunctionType"],
    "weightsFormat": ENUMS["FullyConnectedOptionsWeightsFormat"],
    "quantizedBiasType": ENUMS["TensorType"],
    "outputType": ENUMS["TensorType"],
    "inDataType": ENUMS["TensorType"],
    "outDataType": ENUMS["TensorType"],
    "idxOutType": ENUMS["TensorType"],
    "outType": ENUMS["TensorType"],
    "keyDtype": ENUMS["TensorType"],
    "valueDtype": ENUMS["TensorType"],
    "type": ENUMS["LSHProjectionType"],
    "kernelType": ENUMS["LSTMKernelType"],
    "combiner": ENUMS["CombinerType"],
    "mode": ENUMS["MirrorPadMode"],
    "reduceFunction": ENUMS["ReduceWindowFunction"],
    "comparisonDirection": ENUMS["StablehloComparisonDirection"],
    "compareType": ENUMS["StablehloComparisonType"],
    "algorithm": ENUMS["RngAlgorithm"],
    "compositeAttributesFormat": ENUMS["CustomOptionsFormat"],
}


BUILTIN_CODES: dict[str, int] = ENUMS["BuiltinOperator"]
BUILTIN_NAMES: dict[int, str] = {v: k for k, v in BUILTIN_CODES.items()}
TENSOR_TYPES: dict[str, int] = {k.lower(): v for k, v in ENUMS["TensorType"].items()}
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
    for name, code in enum.items():
        if code == value:
            return name
    return int(value)
