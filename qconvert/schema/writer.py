"""The TFLite backend: IR :class:`Graph` (TFLite-level ops) → ``.tflite`` bytes.

Tables are packed into ``schema.builder.Builder`` (``flatbuffers.Builder``'s layout, without its
per-call checks), which computes every offset and vtable. The model, its subgraph, tensors,
operators and buffers are packed field by field as the generated object API of ``ai-edge-litert``
(``ModelT``, ``TensorT``, ... ``.Pack``) packs them, without building those objects first
(tests/schema/test_builder.py checks the bytes against ``ModelT.Pack``). Options tables are packed
from ``layout`` (each table's slots, types and defaults, generated from the same schema module),
so that converting never imports ``schema_py_generated`` (8 ms of start-up); the rare tables with
a vector, string or sub-table field set, blockwise details and signatures go through the object API,
imported where used::

    Graph ──collect──▶ tensors (referenced only) + buffers (constants, metadata)
          ──map──────▶ OperatorCode per builtin (max version), Operator per node,
                       options table from node.attrs (snake_case → camelCase)
          ──pack─────▶ Model v3, subgraph "main", metadata + min_runtime_version, "TFL3"

Requires: nodes in topological order, ``node.op`` a ``BuiltinOperator`` name,
``node.attrs`` the option fields in snake_case (names starting with "_" are
internal and skipped), every referenced tensor present in ``graph.tensors``.
Ensures: the same graph gives the same bytes.

What TensorFlow 2.21's exporter writes, checked by converting small graphs, and
matched here: ops without attributes get no options table, except the few in
``_EMPTY_OPTIONS_OPS``; RESHAPE with a shape input gets no ``ReshapeOptions``;
every tensor has a (possibly empty) ``QuantizationParameters`` table and
``has_rank`` set. Unlike TensorFlow, activations share the empty buffer 0, and
constant data starts on a 16-byte boundary.
"""

from __future__ import annotations

import math
import struct as _struct
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, QuantParams, Tensor
from qconvert.schema.codes import (  # noqa: F401  (the names tests and tools know from here)
    BUILTIN_CODES,
    BUILTIN_NAMES,
    ENUM_FIELDS,
    FILE_IDENTIFIER,
    TENSOR_TYPE_NAMES,
    TENSOR_TYPES,
    camel_to_snake,
    enum_name,
    snake_to_camel,
)
from qconvert.schema import flexbuffer
from qconvert.schema.builder import Builder, Layout
from qconvert.schema.int4 import pack_int4
from qconvert.schema.layout import ENUMS, OPTIONS

SCHEMA_VERSION = 3  # TFLITE_SCHEMA_VERSION
SUBGRAPH_NAME = "main"
MIN_RUNTIME_VERSION = "min_runtime_version"
# flatbuffer_export.cc: kByteStringSize, the size of the min_runtime_version buffer.
_RUNTIME_VERSION_BYTES = 16
# Builtin codes >= 127 do not fit the deprecated int8 field (schema.fbs).
_PLACEHOLDER_FOR_GREATER_OP_CODES = 127
# Constant data starts on this boundary, so int32/float kernels read aligned memory.
_BUFFER_ALIGNMENT = 16
# A flatbuffer cannot exceed 2 GiB; leave room for everything that is not a buffer.
_MAX_FLATBUFFER_BYTES = 2**31 - 2**24

# BuiltinOperator members that are not ops this writer can emit.
_NOT_WRITABLE = frozenset({"CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"})

# Options tables whose name is not the CamelCase of the op name. Every other op
# finds its table by name: CONV_2D → Conv2DOptions, PADV2 → PadV2Options, ...
_OPTIONS_OVERRIDES: dict[str, str] = {
    "AVERAGE_POOL_2D": "Pool2DOptions",
    "MAX_POOL_2D": "Pool2DOptions",
    "L2_POOL_2D": "Pool2DOptions",
    "MEAN": "ReducerOptions",
    "SUM": "ReducerOptions",
    "REDUCE_MAX": "ReducerOptions",
    "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions",
    "REDUCE_ANY": "ReducerOptions",
    "REDUCE_ALL": "ReducerOptions",
    "MAXIMUM": "MaximumMinimumOptions",
    "MINIMUM": "MaximumMinimumOptions",
    "L2_NORMALIZATION": "L2NormOptions",
    "UNIDIRECTIONAL_SEQUENCE_RNN": "SequenceRNNOptions",
    "CONV_3D_TRANSPOSE": "Conv3DOptions",
    "RANDOM_STANDARD_NORMAL": "RandomOptions",
    "RANDOM_UNIFORM": "RandomOptions",
    "MULTINOMIAL": "RandomOptions",
}

# Ops that have no attributes, yet TensorFlow 2.21 writes an empty options table
# for them (seen in converted models). Other attribute-less ops get none.
_EMPTY_OPTIONS_OPS = frozenset({"PAD", "PADV2", "EXP", "NEG", "SQUARE", "LOG_SOFTMAX", "SELECT"})

# Attributes that duplicate an input tensor. TensorFlow writes the input only, so
# the attribute is dropped when that input is present: op → (attr, input index).
_ATTRS_GIVEN_AS_INPUT: dict[str, tuple[str, int]] = {
    "RESHAPE": ("new_shape", 1),
}


# Minimum runtime version per (builtin, op version): entry i of a tuple is version
# i + 1, None where that version has no entry. From TensorFlow's
# tensorflow/compiler/mlir/lite/tools/versioning/runtime_version.cc; pairs not
# listed contribute nothing, as there.
RUNTIME_VERSIONS: dict[str, tuple[str | None, ...]] = {
    "ABS": ("1.13.0", "2.4.0", "2.5.0", "2.6.0", "2.12.0"),
    "ADD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.13.0", "2.23.0"),
    "ADD_N": ("1.14.0",),
    "ARG_MAX": ("1.9.0", "1.14.0", "2.9.0"),
    "ARG_MIN": ("1.9.0", "1.14.0", "2.9.0"),
    "ASSIGN_VARIABLE": ("2.6.0",),
    "ATAN2": ("2.10.0",),
    "AVERAGE_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"),
    "BATCH_MATMUL": ("2.3.0", "2.3.0", "2.4.0", "2.5.0"),
    "BATCH_TO_SPACE_ND": ("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ("1.14.0", "1.14.0", "1.14.0"),
    "BIDIRECTIONAL_SEQUENCE_RNN": ("1.14.0", "1.14.0", "2.3.0"),
    "BITCAST": ("2.13.0",),
    "BITWISE_XOR": ("2.13.0",),
    "BROADCAST_ARGS": ("2.6.0",),
    "BROADCAST_TO": (None, "2.5.0", "2.5.0"),
    "BUCKETIZE": ("2.8.0",),
    "CALL_ONCE": ("2.5.0",),
    "CAST": ("1.5.0", "2.7.0", "2.8.0", "2.9.0", "2.12.0", "2.15.0", "2.17.0", "2.21.0"),
    "CEIL": ("1.14.0",),
    "COMPLEX_ABS": ("2.5.0",),
    "CONCATENATION": ("1.5.0", "1.14.0", "2.3.0", "2.14.0", "2.21.0"),
    "CONV_2D": ("1.5.0", "1.14.0", "1.14.0", "2.3.0", "2.4.0", "2.9.0", "2.11.0", "2.15.0"),
    "CONV_3D": ("2.5.0",),
    "CONV_3D_TRANSPOSE": ("2.6.0",),
    "COS": ("1.14.0",),
    "CUMSUM": ("2.4.0",),
    "DENSIFY": ("2.2.0",),
    "DEPTH_TO_SPACE": ("2.1.0", "2.5.0"),
    "DEPTHWISE_CONV_2D": ("1.5.0", "1.12.0", "1.14.0", "2.2.0", "2.3.0", "2.3.0", "2.11.0"),
    "DEQUANTIZE": ("1.13.1", "1.14.0", "1.15.0", "2.2.0", "2.7.0", "2.18.0", "2.21.0", "2.22.0"),
    "DILATE": ("2.15.0",),
    "DIV": ("1.6.0", "2.3.0"),
    "DYNAMIC_UPDATE_SLICE": ("2.9.0", "2.17.0", "2.19.0", "2.20.0", "2.21.0", "2.22.0"),
    "ELU": ("1.14.0",),
    "EMBEDDING_LOOKUP": ("1.13.0", "1.14.0", "1.14.0", "2.18.0", "2.21.0"),
    "EMBEDDING_LOOKUP_SPARSE": ("1.5.0",),
    "EQUAL": ("1.14.0", "1.14.0", "2.3.0", "2.13.0", "2.21.0"),
    "EXP": ("1.7.0", "2.12.0"),
    "EXPAND_DIMS": ("1.10.0",),
    "FAKE_QUANT": ("1.5.0", "1.10.0"),
    "FILL": ("1.13.0", "2.3.0", "2.5.0", "2.12.0"),
    "FLOOR": ("1.9.0",),
    "FLOOR_DIV": ("1.14.0", "1.14.0", "2.13.0"),
    "FLOOR_MOD": ("1.13.0", "2.13.0"),
    "FULLY_CONNECTED": (
        "1.5.0", "1.10.0", "1.14.0", "1.14.0", "2.0.0", "2.1.0", "2.3.0",
        "2.3.0", "2.3.0", "2.11.0", "2.15.0", "2.17.0", "2.18.0", "2.21.0",
    ),
    "GATHER": ("1.6.0", "1.14.0", "1.15.0", "2.4.0", "2.5.0", "2.13.0", "2.15.0"),
    "GATHER_ND": ("1.14.0", "2.3.0", "2.5.0", "2.13.0", "2.16.0"),
    "GELU": ("2.9.0", "2.9.0"),
    "GREATER": ("1.14.0", "1.14.0"),
    "GREATER_EQUAL": ("1.14.0", "1.14.0", "2.13.0"),
    "HARD_SWISH": ("1.15.0",),
    "HASHTABLE": ("2.5.0",),
    "HASHTABLE_FIND": ("2.5.0",),
    "HASHTABLE_IMPORT": ("2.5.0",),
    "HASHTABLE_LOOKUP": ("1.5.0",),
    "HASHTABLE_SIZE": ("2.5.0",),
    "IF": ("1.15.0",),
    "IMAG": ("2.5.0",),
    "L2_NORMALIZATION": ("1.5.0", "1.14.0"),
    "L2_POOL_2D": ("1.5.0",),
    "LEAKY_RELU": ("1.13.1", "2.3.0"),
    "LESS": ("1.14.0", "1.14.0", "2.13.0"),
    "LESS_EQUAL": ("1.14.0", "1.14.0"),
    "LOCAL_RESPONSE_NORMALIZATION": ("1.5.0",),
    "LOG": ("1.14.0", "2.15.0"),
    "LOG_SOFTMAX": ("1.14.0", "1.14.0"),
    "LOGICAL_AND": ("1.11.0",),
    "LOGICAL_NOT": ("1.11.0",),
    "LOGICAL_OR": ("1.11.0",),
    "LOGISTIC": ("1.14.0", "1.14.0", "2.3.0"),
    "LSH_PROJECTION": ("1.5.0",),
    "LSTM": ("1.7.0", "1.10.0", "1.14.0", "2.3.0"),
    "MATRIX_DIAG": ("1.14.0",),
    "MATRIX_SET_DIAG": ("1.14.0",),
    "MAX_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"),
    "MAXIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
    "MEAN": ("1.6.0", "1.14.0", "2.4.0"),
    "MINIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
    "MIRROR_PAD": ("1.13.1", "2.3.0", "2.12.0"),
    "MUL": ("1.5.0", "1.14.0", "1.15.0", "2.3.0", "2.6.0", "2.11.0", "2.13.0", "2.23.0"),
    "MULTINOMIAL": ("2.8.0",),
    "NEG": ("1.9.0",),
    "NON_MAX_SUPPRESSION_V4": ("2.1.0",),
    "NON_MAX_SUPPRESSION_V5": ("2.1.0",),
    "NOT_EQUAL": ("1.14.0", "1.14.0", "2.3.0", "2.21.0"),
    "ONE_HOT": ("1.11.0",),
    "PACK": ("1.11.0", "1.14.0", "2.3.0", "2.13.0"),
    "PAD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
    "PADV2": ("1.9.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
    "POW": ("1.10.0",),
    "PRELU": ("1.8.0",),
    "QUANTIZE": ("1.14.0", "1.15.0", "2.7.0", "2.21.0", "2.21.0", "2.21.0"),
    "RANDOM_STANDARD_NORMAL": ("2.8.0",),
    "RANDOM_UNIFORM": ("2.8.0",),
    "RANGE": ("1.13.0", "2.14.0"),
    "RANK": ("1.14.0",),
    "READ_VARIABLE": ("2.6.0",),
    "REAL": ("2.5.0",),
    "REDUCE_ALL": ("2.6.0",),
    "REDUCE_ANY": ("1.11.0",),
    "REDUCE_MAX": ("1.11.0", "1.14.0", "2.5.0"),
    "REDUCE_MIN": ("1.11.0", "1.14.0", "2.5.0"),
    "REDUCE_PROD": ("1.11.0", "2.6.0"),
    "REDUCE_WINDOW": ("2.15.0",),
    "RELU": ("1.5.0", "2.1.0", "2.5.0"),
    "RELU6": ("1.5.0", "1.14.0", "2.5.0"),
    "RELU_0_TO_1": ("2.10.0",),
    "RELU_N1_TO_1": ("1.5.0",),
    "RESHAPE": ("1.5.0",),
    "RESIZE_BILINEAR": ("1.7.0", "1.14.0", "2.2.0", "2.5.0"),
    "RESIZE_NEAREST_NEIGHBOR": ("1.13.1", "1.14.0", "2.3.0", "2.4.0"),
    "REVERSE_SEQUENCE": ("1.14.0",),
    "REVERSE_V2": ("1.14.0", "2.2.0", "2.5.0"),
    "RFFT2D": ("2.5.0",),
    "RIGHT_SHIFT": ("2.13.0",),
    "RNN": ("1.5.0", "1.14.0", "2.3.0"),
    "ROUND": ("1.14.0",),
    "RSQRT": ("1.10.0", "2.5.0", "2.15.0"),
    "SCATTER_ND": ("2.1.0",),
    "SEGMENT_SUM": ("2.2.0",),
    "SELECT": ("1.14.0", "1.14.0", "2.12.0", "2.12.0"),
    "SELECT_V2": ("2.2.0", "2.12.0"),
    "SHAPE": ("1.10.0",),
    "SIGN": ("2.11.0", "2.12.0"),
    "SIN": ("1.9.0",),
    "SKIP_GRAM": ("1.5.0",),
    "SLICE": ("1.14.0", "1.14.0", "1.14.0", "2.4.0", "2.5.0", "2.14.0", "2.21.0"),
    "SOFTMAX": ("1.5.0", "1.14.0", "2.3.0"),
    "SPACE_TO_BATCH_ND": ("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
    "SPACE_TO_DEPTH": ("1.5.0", "1.14.0"),
    "SPARSE_TO_DENSE": ("1.9.0", "1.14.0", "1.15.0"),
    "SPLIT": ("1.5.0", "1.14.0", "1.14.0", "2.3.0"),
    "SPLIT_V": ("1.13.1", "2.3.0"),
    "SQRT": ("1.10.0", "2.21.0"),
    "SQUARE": ("1.12.0",),
    "SQUARED_DIFFERENCE": ("1.13.1", "2.5.0"),
    "SQUEEZE": ("1.6.0", "2.5.0"),
    "STABLEHLO_ADD": ("2.16.0",),
    "STABLEHLO_AND": ("2.17.0",),
    "STABLEHLO_CASE": ("2.17.0",),
    "STABLEHLO_CBRT": ("2.17.0",),
    "STABLEHLO_COMPOSITE": ("2.17.0",),
    "STABLEHLO_GATHER": ("2.16.0",),
    "STABLEHLO_MAXIMUM": ("2.16.0",),
    "STABLEHLO_MINIMUM": ("2.16.0",),
    "STABLEHLO_MULTIPLY": ("2.16.0",),
    "STABLEHLO_PAD": ("2.16.0",),
    "STABLEHLO_REDUCE_WINDOW": ("2.16.0",),
    "STABLEHLO_RNG_BIT_GENERATOR": ("2.15.0",),
    "STABLEHLO_SCATTER": ("2.15.0",),
    "STABLEHLO_SHIFT_LEFT": ("2.17.0",),
    "STRIDED_SLICE": ("1.6.0", "1.14.0", "2.1.0", "2.2.0", "2.5.0", "2.6.0", "2.14.0", "2.14.0"),
    "SUB": ("1.6.0", "1.14.0", "2.3.0", "2.4.0", "2.4.0"),
    "SUM": ("1.10.0", "1.15.0"),
    "SVDF": ("1.5.0", "1.14.0", "2.2.0", "2.3.0"),
    "TANH": ("1.14.0", "1.14.0", "2.3.0"),
    "TILE": ("1.10.1", "2.2.0", "2.8.0"),
    "TOPK_V2": ("1.7.0", "1.14.0", "2.13.0"),
    "TRANSPOSE": ("1.6.0", "1.14.0", "1.15.0", "2.3.0", "2.4.0", "2.12.0", "2.14.4", "2.22.0"),
    "TRANSPOSE_CONV": ("1.9.0", "2.2.0", "2.3.0", "2.13.0", "2.15.0"),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("1.13.1", "1.14.0", "2.3.0", "2.12.0"),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ("1.14.0", "1.14.0", "2.3.0"),
    "UNIQUE": ("1.14.0",),
    "UNPACK": ("1.11.0", "1.14.0", "2.2.0", "2.3.0", "2.22.0"),
    "UNSORTED_SEGMENT_MAX": ("2.10.0",),
    "UNSORTED_SEGMENT_MIN": ("2.11.0",),
    "UNSORTED_SEGMENT_PROD": ("2.10.0",),
    "UNSORTED_SEGMENT_SUM": ("2.10.0",),
    "VAR_HANDLE": ("2.6.0",),
    "WHERE": ("1.14.0", "2.8.0"),
    "WHILE": ("1.15.0",),
    "ZEROS_LIKE": ("1.12.0",),
}




@lru_cache(maxsize=None)
def options_table(op: str) -> tuple[str, int, str] | None:
    """The options union member of a builtin: (union name, type code, table name, a key of
    ``layout.OPTIONS``).

    The union is ``BuiltinOptions`` or ``BuiltinOptions2``. None when the op has no table.
    """
    wanted = (_OPTIONS_OVERRIDES.get(op) or op.replace("_", "") + "Options").lower()
    for union in ("BuiltinOptions", "BuiltinOptions2"):
        for member, code in ENUMS[union].items():
            if member.lower() == wanted and code != 0:
                return union, code, member
    return None



def runtime_version_key(version: str) -> tuple[int, ...]:
    """Numeric per-component order, as TensorFlow's CompareRuntimeVersion ("1.14.0" > "1.5.0")."""
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


def min_runtime_version(op_versions: Sequence[tuple[str, int]]) -> str:
    """The largest table entry over (builtin, version) pairs, "" when none is known."""
    best = ""
    for op, version in op_versions:
        row = RUNTIME_VERSIONS.get(op, ())
        found = row[version - 1] if 1 <= version <= len(row) else None
        if found and (not best or runtime_version_key(found) > runtime_version_key(best)):
            best = found
    return best


# -- packing ----------------------------------------------------------------
def _numpy_name(dtype: str) -> str | None:
    try:
        return np.dtype(dtype).name
    except TypeError:
        return None


# The TensorType of a dtype spelled as numpy names it ("int8", "float32", ...): what _tensor_type
# finds for it through np.dtype.
_TYPE_BY_DTYPE = {name: code for name, code in TENSOR_TYPES.items() if _numpy_name(name) == name}


def _tensor_type(tensor: Tensor) -> int:
    known = _TYPE_BY_DTYPE.get(tensor.dtype) if isinstance(tensor.dtype, str) else None
    if known is not None:  # np.dtype(...).name costs 3 us a tensor
        return known
    if tensor.dtype == "int4":  # no numpy type: the values are held as int8 (see _constant_bytes)
        return TENSOR_TYPES["int4"]
    try:
        return TENSOR_TYPES[np.dtype(tensor.dtype).name]
    except (TypeError, KeyError):
        raise ValueError(
            f"tensor '{tensor.name}': dtype {tensor.dtype!r} has no TFLite TensorType "
            f"(supported: {', '.join(sorted(TENSOR_TYPES))})"
        ) from None


# A dtype name → its little-endian numpy dtype, as met (np.dtype(...).newbyteorder: 1 µs a constant)
_WIRE_DTYPES: dict[str, np.dtype] = {}


def _wire_dtype(name: Any) -> np.dtype:
    dtype = _WIRE_DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        dtype = np.dtype(name).newbyteorder("<")
        if isinstance(name, str):
            _WIRE_DTYPES[name] = dtype
    return dtype


def _constant_bytes(tensor: Tensor, shape: tuple[int, ...]) -> np.ndarray:
    """The little-endian bytes of a constant as a flat uint8 array (no per-element Python)."""
    data = np.asarray(tensor.data)
    if data.size != math.prod(shape):  # Python's product: numpy's cost 2 µs a constant
        raise ValueError(
            f"tensor '{tensor.name}': data has {data.size} elements but shape {list(shape)}"
        )
    if tensor.dtype == "int4":
        try:
            return pack_int4(data)
        except ValueError as exc:
            raise ValueError(f"tensor '{tensor.name}': {exc}") from None
    dtype = _wire_dtype(tensor.dtype)
    if data.dtype != dtype:
        cast = data.astype(dtype)
        if data.dtype.kind in "iub" and dtype.kind in "iub" and not np.array_equal(cast, data):
            raise ValueError(
                f"tensor '{tensor.name}': {data.dtype.name} data does not fit {tensor.dtype}"
            )
        data = cast
    return np.ascontiguousarray(data).reshape(-1).view(np.uint8)


# A tensor's QuantizationParameters: scale (<f4 bytes), zero_point (<i8 bytes), quantized_dimension and the
# blockwise details (a BlockwiseQuantizationT) or None.
_Quant = tuple["bytes | None", "bytes | None", int, Any]
_NO_QUANT: _Quant = (None, None, 0, None)


def _blockwise(tensor: Tensor, index: dict[str, int]) -> _Quant:
    """BlockwiseQuantization details (schema.fbs): the scale tensor's index, no zero points (-1),
    the block size; no per-tensor scale or zero point (ai-edge-quantizer's layout)."""
    from ai_edge_litert import schema_py_generated as schema  # rare: not loaded at start-up

    scales, block = tensor.blockwise  # type: ignore[misc]
    details = schema.BlockwiseQuantizationT()
    details.scales, details.zeroPoints, details.blockSize = index[scales], -1, int(block)
    return None, None, 0, details


def _quantization(tensor: Tensor, shape: tuple[int, ...] | None) -> _Quant:
    q: QuantParams | None = tensor.quant
    if q is None:
        return _NO_QUANT  # TensorFlow writes an empty table for float tensors too
    if not q.scale or len(q.scale) != len(q.zero_point):
        raise ValueError(
            f"tensor '{tensor.name}': quantization needs one zero point per scale "
            f"(got {len(q.scale)} scales, {len(q.zero_point)} zero points)"
        )
    if q.axis is None and len(q.scale) != 1:
        raise ValueError(
            f"tensor '{tensor.name}': {len(q.scale)} scales need a per-channel axis"
        )
    if q.axis is not None and shape is not None:
        if not 0 <= q.axis < len(shape) or shape[q.axis] != len(q.scale):
            raise ValueError(
                f"tensor '{tensor.name}': per-channel axis {q.axis} with {len(q.scale)} scales "
                f"does not fit shape {list(shape)}"
            )
    return _float32s(q.scale), _int64s(q.zero_point), q.axis or 0, None


def _float32s(values: Sequence[float]) -> bytes:
    """``np.array(values, np.float64).astype("<f4").tobytes()`` (each value rounded to the nearest
    float32, as C's cast), by struct: 1.5 µs less a quantized tensor."""
    try:
        return _struct.pack(f"<{len(values)}f", *values)
    except (_struct.error, TypeError, OverflowError):  # beyond float32 (numpy gives inf), or not a number
        return np.array(values, dtype=np.float64).astype("<f4").tobytes()


def _int64s(values: Sequence[int]) -> bytes:
    """``np.array(values, "<i8").tobytes()``, by struct (as :func:`_int32s`)."""
    try:
        return _struct.pack(f"<{len(values)}q", *values)
    except (_struct.error, TypeError):
        return np.array(values, dtype="<i8").tobytes()


@lru_cache(maxsize=None)
def _defaults(table: str) -> dict[str, Any]:
    """An options table's fields and their defaults (generated camelCase names), once per table."""
    return {field: default for field, _, _, default in OPTIONS[table][1]}


_CAMEL: dict[str, str] = {}  # snake_case attribute → generated field name, as met (snake_to_camel: 1 µs)
_NUMBERS = (bool, int, float)


@lru_cache(maxsize=None)
def _has_offsets(table: str) -> bool:
    """The options table has a vector, string or sub-table field."""
    return any(not fmt for _, _, fmt, _ in OPTIONS[table][1])


def _coerce(node: Node, attr: str, field: str, value: Any, default: Any) -> Any:
    """An attribute value in the type the generated field expects."""
    where = f"{node.op} '{node.name}': attribute '{attr}'"
    enum = ENUM_FIELDS.get(field)
    if value is None:
        raise ValueError(f"{where}: no value (None)")
    if isinstance(value, str):
        members = enum if enum is not None and not isinstance(default, list) else {}
        if value not in members:
            known = f" (one of {', '.join(members)})" if members else ""
            raise ValueError(f"{where}: unexpected string {value!r}{known}")
        return members[value]
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return [v.item() if isinstance(v, np.generic) else v for v in value]
    if default is None:  # a vector (or nested table) field
        raise ValueError(f"{where}: expected a list, got {value!r}")
    if isinstance(default, bool):
        if not isinstance(value, (bool, int)):
            raise ValueError(f"{where}: expected a bool, got {value!r}")
        return bool(value)
    if isinstance(default, float):
        return float(value)
    if isinstance(default, int):
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(f"{where}: expected an integer, got {value!r}")
        return int(value)
    return value


def _operator_options(node: Node) -> tuple[str, int, Any] | None:
    attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
    given_as_input = _ATTRS_GIVEN_AS_INPUT.get(node.op)
    if given_as_input is not None:
        attr, index = given_as_input
        if len(node.inputs) > index and node.inputs[index]:
            attrs.pop(attr, None)
    if not attrs and node.op not in _EMPTY_OPTIONS_OPS:
        return None
    table = options_table(node.op)
    if table is None:
        if not attrs:
            return None
        raise ValueError(
            f"{node.op} '{node.name}': attribute(s) {', '.join(sorted(attrs))} given, "
            f"but TFLite {node.op} has no options table"
        )
    union, code, name = table
    defaults = _defaults(name)
    values = {}
    for attr, value in attrs.items():
        field = _CAMEL.get(attr)
        if field is None:
            field = _CAMEL[attr] = snake_to_camel(attr)
        if field not in defaults:
            known = ", ".join(camel_to_snake(f) for f in defaults) or "none"
            raise ValueError(
                f"{node.op} '{node.name}': unknown attribute '{attr}' for "
                f"{name} (known: {known})"
            )
        default = defaults[field]
        kind = type(value)
        # what _coerce gives these, without its checks (1 µs an attribute): a number of the field's
        # own type, a name of the field's enum
        if kind is type(default) and kind in _NUMBERS:
            values[field] = value
        elif kind is str and field in ENUM_FIELDS and value in ENUM_FIELDS[field] and not isinstance(default, list):
            values[field] = ENUM_FIELDS[field][value]
        else:
            values[field] = _coerce(node, attr, field, value, default)
    numfields, fields = OPTIONS[name]
    if _has_offsets(name) and any(not fmt for field, _, fmt, _ in fields if field in values):  # a vector, string, table
        from ai_edge_litert import schema_py_generated as schema  # rare: not loaded at start-up

        options = getattr(schema, name + "T")()
        for field, value in values.items():
            setattr(options, field, value)
        return union, code, options
    # The table as its generated Pack writes it: the scalar fields in order, those equal to their default left out.
    return union, code, (numfields, [(slot, fmt, values[field]) for field, slot, fmt, default in fields
                                     if field in values and values[field] != default])


def _tensor_order(graph: Graph) -> list[str]:
    """Referenced tensor names in first-use order: graph inputs, node by node, graph outputs."""
    seen: dict[str, None] = {}
    for name in graph.inputs:
        seen.setdefault(name)
    for node in graph.nodes:
        for name in (*node.inputs, *node.outputs, *node.attrs.get("_intermediates", ())):
            if name:
                seen.setdefault(name)
    for name in graph.outputs:
        seen.setdefault(name)
    for name in list(seen):  # a blockwise weight's scales: named by its quantization details, read by no op
        if graph.tensors[name].blockwise is not None:
            seen.setdefault(graph.tensors[name].blockwise[0])  # type: ignore[index]
    return list(seen)


def _check_references(graph: Graph) -> None:
    for node in graph.nodes:
        if node.op not in BUILTIN_CODES or node.op in _NOT_WRITABLE and not _custom_code(node):
            raise ValueError(f"node '{node.name}': '{node.op}' is not a TFLite builtin operator")
        for name in (*node.inputs, *node.outputs):
            if name and name not in graph.tensors:
                raise ValueError(f"{node.op} '{node.name}': tensor '{name}' is not in the graph")
    for name in (*graph.inputs, *graph.outputs):
        if name not in graph.tensors:
            raise ValueError(f"graph input/output '{name}' is not in the graph")
    if MIN_RUNTIME_VERSION in graph.metadata:
        raise ValueError(f"metadata '{MIN_RUNTIME_VERSION}' is reserved: the writer computes it")


# A tensor as the writer packs it: name, TensorType, shape (<i4, None when unranked), buffer index,
# is_variable, quantization.
_TensorRecord = tuple[str, int, "bytes | None", int, bool, _Quant]


def _int32s(values: Sequence[int]) -> bytes:
    """Little-endian int32s, as ``np.array(values, "<i4").tobytes()`` gives them (and its error for
    a value that does not fit), in a fifth of its time (struct)."""
    try:
        return _struct.pack(f"<{len(values)}i", *values)
    except (_struct.error, TypeError):  # not an int, or out of range: numpy casts or raises
        return np.array(values, dtype="<i4").tobytes()


def _tensors(graph: Graph, constants: list[np.ndarray | None]) -> tuple[list[_TensorRecord], dict[str, int]]:
    """A record per referenced tensor; constants append their bytes to ``constants`` (a buffer each)."""
    tensors: list[_TensorRecord] = []
    order = _tensor_order(graph)
    index: dict[str, int] = {name: k for k, name in enumerate(order)}
    for name in order:
        t = graph.tensors[name]
        shape = t.shape
        if shape is None and t.data is not None:
            shape = tuple(np.shape(t.data))
        dims = _int32s(shape) if shape is not None else None
        quant = _blockwise(t, index) if t.blockwise is not None else _quantization(t, shape)
        buffer = 0
        if t.data is not None:
            buffer = len(constants)
            constants.append(_constant_bytes(t, shape if shape is not None else ()))
        tensors.append((name, _tensor_type(t), dims, buffer, t.variable, quant))
    return tensors, index


def _custom_code(node: Node) -> str | None:
    """A custom op's custom code (CUSTOM nodes carry it in ``attrs``), else None."""
    code = node.attrs.get("custom_code")
    return str(code) if code else None


def _code_key(node: Node) -> tuple[str, str | None]:
    return node.op, _custom_code(node)


def _operator_codes(graph: Graph) -> dict[tuple[str, str | None], int]:
    """(builtin, custom code) → the highest version among its nodes, in first-use order (one code
    per builtin, one per custom code)."""
    codes: dict[tuple[str, str | None], int] = {}
    for node in graph.nodes:
        key = _code_key(node)
        codes[key] = max(codes.get(key, 0), int(node.version))
    return codes


# An operator as the writer packs it: opcode index, inputs, outputs, intermediates (None: absent),
# custom options (flexbuffer bytes, None: a builtin), the options union member (or None).
_OperatorRecord = tuple[int, bytes, bytes, "bytes | None", "np.ndarray | None", Any]


def _operator(node: Node, opcode_index: int, index: dict[str, int]) -> _OperatorRecord:
    inputs = _int32s([index[i] if i else -1 for i in node.inputs])
    outputs = _int32s([index[o] for o in node.outputs])
    intermediates = None
    if node.attrs.get("_intermediates"):  # LSTM: tensors that carry only quantization parameters
        intermediates = _int32s([index[t] for t in node.attrs["_intermediates"]])
    if _custom_code(node) is not None:
        try:
            custom = np.frombuffer(flexbuffer.encode(node.attrs.get("custom_options", ())), np.uint8)
        except ValueError as exc:  # an attribute TFLite's options cannot hold (a type it has no number for)
            raise ConversionError(f"node '{node.name}' ({_custom_code(node)}): {exc}; qconvert writes int, float, "
                                  f"bool, string and TFLite tensor type attributes into a custom op's options") from None
        return opcode_index, inputs, outputs, intermediates, custom, None
    return opcode_index, inputs, outputs, intermediates, None, _operator_options(node)


def _metadata(
    graph: Graph, codes: dict[tuple[str, str | None], int], constants: list[np.ndarray | None]
) -> list[tuple[str, int]]:
    """The graph's entries, then min_runtime_version (16 bytes, zero-padded), as TensorFlow: (name,
    buffer index) each."""
    runtime = min_runtime_version([(op, v) for (op, _), v in codes.items()]).encode("ascii")
    if len(runtime) >= _RUNTIME_VERSION_BYTES:  # as TensorFlow: too long → left as zeros
        runtime = b""
    runtime = runtime.ljust(_RUNTIME_VERSION_BYTES, b"\0")
    metadata = []
    for name, blob in [*graph.metadata.items(), (MIN_RUNTIME_VERSION, runtime)]:
        if not isinstance(blob, (bytes, bytearray)):
            raise ValueError(f"metadata '{name}': expected bytes, got {type(blob).__name__}")
        metadata.append((name, len(constants)))
        constants.append(np.frombuffer(bytes(blob), dtype=np.uint8))
    return metadata


def _signature_defs(graph: Graph, inputs: list[int], outputs: list[int]) -> list[Any]:
    """The graph's signature (none for a .pb's graph, as TensorFlow's from_frozen_graph): each name
    mapped to the tensor now in its input/output position, subgraph 0."""
    if graph.signature is None:
        return []
    from ai_edge_litert import schema_py_generated as schema  # rare (a .tflite's signature): not loaded at start-up

    def tensor_maps(ports: tuple[tuple[str, int], ...], indices: list[int]) -> list[Any]:
        maps = []
        for name, position in ports:
            entry = schema.TensorMapT()
            entry.name, entry.tensorIndex = name, int(indices[position])
            maps.append(entry)
        return maps

    sig = schema.SignatureDefT()
    sig.signatureKey = graph.signature.key
    sig.subgraphIndex = 0
    sig.inputs = tensor_maps(graph.signature.inputs, inputs)
    sig.outputs = tensor_maps(graph.signature.outputs, outputs)
    return [sig]


# -- packing ----------------------------------------------------------------
# Each table is packed as its generated ``Pack`` would (tests/schema/test_builder.py compares the
# two): its vectors, strings and sub-tables first, then its fields in the schema's order, a field
# equal to its default left out. Slot numbers are the field ids in schema.fbs. Packing straight
# into the builder, without building ``TensorT``/``OperatorT``/... objects first, saves about half
# of write_model's time (MobileViT_XXS: 25 → 12 ms).
_BLOCKWISE_DETAILS = 2  # QuantizationDetails.BlockwiseQuantization


# A table's fields by kind, all of them: (slot, format) in the order the generated Pack adds them.
_TENSOR_FIELDS = ((0, ""), (1, "<b"), (2, "<I"), (3, ""), (4, ""), (5, "<?"), (8, "<?"))
_QUANT_FIELDS = ((2, ""), (3, ""), (4, "<B"), (5, ""), (6, "<i"))
_OPERATOR_FIELDS = ((0, "<I"), (1, ""), (2, ""), (3, "<B"), (4, ""), (5, ""), (8, ""), (11, "<B"), (12, ""))
_LAYOUTS: dict[tuple[Any, ...], Layout] = {}  # (the fields of a kind, which are set) → their Layout


def _pack_set(b: Builder, numfields: int, fields: tuple[tuple[int, str], ...], values: tuple[Any, ...]) -> int:
    """The table of ``fields`` whose value is set (true: a value equal to its default is 0 or False,
    an offset never 0), by its :class:`Layout`, one per set of fields present."""
    present = tuple(map(bool, values))
    layout = _LAYOUTS.get((fields, present))
    if layout is None:
        layout = _LAYOUTS[(fields, present)] = Layout(numfields, [f for f, p in zip(fields, present) if p])
    return b.pack(layout, [v for v in values if v])


def _pack_quantization(b: Builder, quant: _Quant) -> int:
    scale, zero_point, dimension, details = quant
    scale_offset = b.vector(scale, 4) if scale is not None else 0
    zero_point_offset = b.vector(zero_point, 8, 8) if zero_point is not None else 0
    details_offset = details.Pack(b) if details is not None else 0
    return _pack_set(b, 7, _QUANT_FIELDS, (scale_offset, zero_point_offset, details_offset and _BLOCKWISE_DETAILS,
                                           details_offset, dimension))


def _pack_tensor(b: Builder, tensor: _TensorRecord, lean: bool = False) -> int:
    name, dtype, shape, buffer, variable, quant = tensor
    shape_offset = b.vector(shape, 4) if shape is not None else 0
    name_offset = b.CreateString(name) if not lean else 0
    quant_offset = _pack_quantization(b, quant) if not lean or quant is not _NO_QUANT else 0
    return _pack_set(b, 11, _TENSOR_FIELDS, (shape_offset, dtype, buffer, name_offset, quant_offset, variable,
                                             shape is not None))  # the last: has_rank


def _pack_options(b: Builder, table: Any) -> int:
    """An options table: (number of slots, fields) from ``layout``, or an ``...OptionsT`` object."""
    return b.table(*table) if isinstance(table, tuple) else table.Pack(b)


def _pack_operator(b: Builder, op: _OperatorRecord) -> int:
    opcode_index, inputs, outputs, intermediates, custom, options = op
    union, code, table = options if options is not None else (None, 0, None)
    inputs_offset, outputs_offset = b.vector(inputs, 4), b.vector(outputs, 4)
    options_offset = _pack_options(b, table) if union == "BuiltinOptions" else 0
    # custom_options_format FLEXBUFFERS is the default: not written
    custom_offset = b.vector(custom, 1, 1) if custom is not None else 0
    intermediates_offset = b.vector(intermediates, 4) if intermediates is not None else 0
    options2_offset = _pack_options(b, table) if union == "BuiltinOptions2" else 0
    return _pack_set(b, 14, _OPERATOR_FIELDS, (
        opcode_index, inputs_offset, outputs_offset, options_offset and code, options_offset, custom_offset,
        intermediates_offset, options2_offset and code, options2_offset))


def _pack_operator_code(b: Builder, key: tuple[str, str | None], version: int) -> int:
    op, custom = key
    builtin = BUILTIN_CODES[op]
    deprecated = min(builtin, _PLACEHOLDER_FOR_GREATER_OP_CODES)
    fields = [(0, "<b", deprecated)] if deprecated else []
    if custom is not None:
        fields.append((1, "", b.CreateString(custom)))
    if version != 1:
        fields.append((2, "<i", version))
    if builtin:
        fields.append((3, "<i", builtin))
    return b.table(4, fields)


def _pack_buffer(b: Builder, data: np.ndarray | None) -> int:
    if data is None:
        return b.table(3, ())
    if data.nbytes:
        b.Prep(_BUFFER_ALIGNMENT, data.nbytes)  # the data starts on the boundary
    return b.table(3, [(0, "", b.vector(data, 1, 1, defer=True))])


def _pack_metadata(b: Builder, name: str, buffer: int) -> int:
    fields = [(0, "", b.CreateString(name))]
    if buffer:
        fields.append((1, "<I", buffer))
    return b.table(2, fields)


def write_model(graph: Graph, description: str = "qconvert", lean: bool = False) -> bytes:
    """Serialize a TFLite-level graph to ``.tflite`` bytes (deterministic). ``lean``: a file for LiteRT to
    run and nothing else (the calibration's float model): tensors without names, and without the empty
    quantization table of a float tensor (LiteRT reads both as absent; EfficientViT_M0's float model,
    1,138 tensors: 2.5 ms less to write, measured)."""
    _check_references(graph)
    constants: list[np.ndarray | None] = [None]  # buffer 0: the empty sentinel
    tensors, index = _tensors(graph, constants)
    codes = _operator_codes(graph)
    opcode_index = {key: i for i, key in enumerate(codes)}
    inputs = [index[n] for n in graph.inputs]
    outputs = [index[n] for n in graph.outputs]
    operators = [_operator(n, opcode_index[_code_key(n)], index) for n in graph.nodes]
    metadata = _metadata(graph, codes, constants)
    signature_defs = _signature_defs(graph, inputs, outputs)

    payload = sum(c.nbytes + _BUFFER_ALIGNMENT for c in constants if c is not None)
    if payload > _MAX_FLATBUFFER_BYTES:
        raise ValueError(f"constants take {payload} bytes; a flatbuffer holds at most 2 GiB")
    # Start big enough for every buffer and quantization vector so the builder never
    # regrows (a regrow recopies the whole file: 29 ms on ResNet50's 24 MB).
    vectors = sum(3 * len(q[0]) for *_, q in tensors if q[0] is not None)
    b = Builder(payload + vectors + 1024 + 256 * (len(tensors) + len(graph.nodes)))

    # ModelT.Pack's order: operator codes, the subgraph, description, buffers, metadata, signatures.
    operator_codes = b.offsets([_pack_operator_code(b, key, version) for key, version in codes.items()])
    subgraph_tensors = b.offsets([_pack_tensor(b, t, lean) for t in tensors])
    subgraph_inputs, subgraph_outputs = b.vector(_int32s(inputs), 4), b.vector(_int32s(outputs), 4)
    subgraph_operators = b.offsets([_pack_operator(b, op) for op in operators])
    subgraph = b.table(6, [
        (0, "", subgraph_tensors), (1, "", subgraph_inputs), (2, "", subgraph_outputs),
        (3, "", subgraph_operators), (4, "", b.CreateString(SUBGRAPH_NAME)),
    ])
    subgraphs = b.offsets([subgraph])
    description_offset = b.CreateString(description)
    buffers = b.offsets([_pack_buffer(b, data) for data in constants])
    metadata_offset = b.offsets([_pack_metadata(b, name, buffer) for name, buffer in metadata])
    signatures = b.offsets([sig.Pack(b) for sig in signature_defs])
    model = b.table(10, [
        (0, "<I", SCHEMA_VERSION), (1, "", operator_codes), (2, "", subgraphs), (3, "", description_offset),
        (4, "", buffers), (6, "", metadata_offset), (7, "", signatures),
    ])
    b.Finish(model, file_identifier=FILE_IDENTIFIER)
    return b.Output()
