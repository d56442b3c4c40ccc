"""Where a .tflite file runs: the known constraints of each target, as data, and the static
checker that applies them (``qconvert check`` without the target's tool, or with ``--static``).

``RULES`` has one row per (target, rule): which targets, what is checked (a predicate of
``CHECKS`` and its parameters), what breaking it does there (``effect``: ``fails`` = the
runtime rejects the file or the compiler crashes, ``wrong`` = it runs and computes wrong
values, ``cpu`` = the NPU compiler leaves the op to the CPU), the constraint in words, the fix
when there is one, and where the fact comes from (a file or document of TFLite Micro, Vela or
LiteRT, or a measurement made for this project with the versions named). ``tool_sees`` is
false for a rule a real run cannot reveal (LiteRT's reference kernels read blockwise weights
as zeros without an error): such a finding stands even when the tool ran.

The op sets and version tables below were measured: a one-operator model for every
BuiltinOperator (and for LiteRT every version 1..15) loaded in the runtime, an op counting as
present unless the runtime answered "Didn't find op for builtin opcode". Vela's op sets are
its own report (``vela --supported-ops-report``, Vela 5.2.0's SUPPORTED_OPS.md).

May import: ``qconvert.ops`` (operand slots, weight axes), ``qconvert.tools.tflite_file`` (the
quantization checks LiteRT's loader makes), numpy. It reads ``qconvert.schema.reader``'s dataclasses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from qconvert.ops import TABLE, Rule, row
from qconvert.options import TARGETS
ETHOS_U = TARGETS[3:]
U55_U65 = ("ethos-u55-128", "ethos-u55-256", "ethos-u65-256")
U85 = ("ethos-u85-256",)
LITERT = ("litert", "litert-ref")

TARGET_NAMES = {
    "litert": "LiteRT, default kernels (builtin ops + XNNPACK delegate)",
    "litert-ref": "LiteRT, reference kernels (OpResolverType.BUILTIN_REF)",
    "tflm": "TensorFlow Lite Micro (reference kernels)",
    "ethos-u55-128": "Arm Ethos-U55, 128 MACs/cycle (Vela)",
    "ethos-u55-256": "Arm Ethos-U55, 256 MACs/cycle (Vela)",
    "ethos-u65-256": "Arm Ethos-U65, 256 MACs/cycle (Vela)",
    "ethos-u85-256": "Arm Ethos-U85, 256 MACs/cycle (Vela)",
}

EFFECTS = ("fails", "wrong", "cpu")

# --- sources ------------------------------------------------------------------------------
_VELA_OPS = "Vela 5.2.0 SUPPORTED_OPS.md (vela --supported-ops-report)"
_VELA_OPS_U55 = _VELA_OPS + ", Ethos-U55 and Ethos-U65 TFLite"
_VELA_OPS_U85 = _VELA_OPS + ", Ethos-U85 TFLite"
_MEASURED_VELA = "measured: ethos-u-vela 5.2.0 exits on SIGFPE (status 136) for ethos-u55-128, u65-256, u85-256"
_TFLM_VERSION = "tflite-micro 0.dev20261023182759"
_MEASURED_TFLM = f"measured: {_TFLM_VERSION} Python interpreter"
_MEASURED_LITERT = "measured: ai-edge-litert 2.3.0"

# --- op sets (data) -----------------------------------------------------------------------
TFLM_CUSTOM_OPS = ("TFLite_Detection_PostProcess",)  # custom ops TFLite Micro's op resolver registers
TFLM_OPS = frozenset("""
ABS ADD ADD_N ARG_MAX ARG_MIN ASSIGN_VARIABLE AVERAGE_POOL_2D BATCH_MATMUL BATCH_TO_SPACE_ND BROADCAST_ARGS
BROADCAST_TO CALL_ONCE CAST CEIL CONCATENATION CONV_2D COS CUMSUM DEPTHWISE_CONV_2D DEPTH_TO_SPACE DEQUANTIZE DIV
DYNAMIC_UPDATE_SLICE ELU EMBEDDING_LOOKUP EQUAL EXP EXPAND_DIMS FILL FLOOR FLOOR_DIV FLOOR_MOD FULLY_CONNECTED
GATHER GATHER_ND GREATER GREATER_EQUAL HARD_SWISH IF L2_NORMALIZATION L2_POOL_2D LEAKY_RELU LESS LESS_EQUAL LOG
LOGICAL_AND LOGICAL_NOT LOGICAL_OR LOGISTIC LOG_SOFTMAX MAXIMUM MAX_POOL_2D MEAN MINIMUM MIRROR_PAD MUL NEG
NOT_EQUAL PACK PAD PADV2 PRELU QUANTIZE READ_VARIABLE REDUCE_ALL REDUCE_MAX REDUCE_MIN RELU RELU6 RESHAPE
RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 ROUND RSQRT SELECT_V2 SHAPE SIN SLICE SOFTMAX SPACE_TO_BATCH_ND
SPACE_TO_DEPTH SPLIT SPLIT_V SQRT SQUARE SQUARED_DIFFERENCE SQUEEZE STRIDED_SLICE SUB SUM SVDF TANH TRANSPOSE
TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK VAR_HANDLE WHILE ZEROS_LIKE
""".split())

VELA_U55_OPS = frozenset("""
ABS ADD ARG_MAX AVERAGE_POOL_2D BATCH_MATMUL CONCATENATION CONV_2D DEPTHWISE_CONV_2D ELU EXP EXPAND_DIMS
FULLY_CONNECTED GELU HARD_SWISH LEAKY_RELU LOG LOGISTIC MAXIMUM MAX_POOL_2D MEAN MINIMUM MIRROR_PAD MUL NEG PACK PAD
PADV2 PRELU QUANTIZE REDUCE_MAX REDUCE_MIN RELU RELU6 RELU_0_TO_1 RELU_N1_TO_1 RESHAPE RESIZE_BILINEAR
RESIZE_NEAREST_NEIGHBOR REVERSE_V2 RSQRT SLICE SOFTMAX SPLIT SPLIT_V SQUARED_DIFFERENCE SQUEEZE STRIDED_SLICE SUB SUM
TANH TILE TRANSPOSE TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK
""".split())

VELA_U85_OPS = VELA_U55_OPS | frozenset("""
ASSIGN_VARIABLE CAST DIV EQUAL GATHER GREATER GREATER_EQUAL LESS LESS_EQUAL LOGICAL_AND LOGICAL_NOT LOGICAL_OR
NOT_EQUAL READ_VARIABLE REDUCE_ALL REDUCE_ANY SCATTER_ND SELECT SELECT_V2
""".split())

# U55/U65 ops whose specific constraints say "32-bit feature-maps are not supported"
VELA_U55_NO_INT32 = frozenset("""
ABS AVERAGE_POOL_2D CONCATENATION CONV_2D DEPTHWISE_CONV_2D ELU EXP GELU HARD_SWISH LEAKY_RELU LOG LOGISTIC MAXIMUM
MAX_POOL_2D MEAN MINIMUM PACK PAD PADV2 PRELU QUANTIZE REDUCE_MAX REDUCE_MIN RELU RELU6 RELU_0_TO_1 RELU_N1_TO_1
RESIZE_BILINEAR RESIZE_NEAREST_NEIGHBOR REVERSE_V2 RSQRT SLICE SOFTMAX SPLIT SPLIT_V SQUARED_DIFFERENCE
STRIDED_SLICE TANH TILE TRANSPOSE_CONV UNIDIRECTIONAL_SEQUENCE_LSTM UNPACK
""".split())

# the ops with int8 weights and an int32 bias (the op table's weighted rows): CONV_2D, DEPTHWISE_CONV_2D,
# FULLY_CONNECTED, TRANSPOSE_CONV
WEIGHTED = tuple(sorted(name for name, r in TABLE.items() if r.rule is Rule.WEIGHTED))
# Ops whose TFLite Micro kernel rescales otherwise than LiteRT 2.3's reference kernel (a 32-bit
# multiplier against double precision): 1-2 LSB apart is expected (issue 18's measurement).
TFLM_ROUNDS_OTHERWISE = frozenset({"FULLY_CONNECTED"})

# Highest version of each builtin that LiteRT 2.3's reference resolver registers ...
LITERT_REF_VERSIONS: Mapping[str, int] = {
    "ABS": 3, "ADD": 5, "ADD_N": 1, "ARG_MAX": 2, "ARG_MIN": 2, "ASSIGN_VARIABLE": 1, "ATAN2": 1,
    "AVERAGE_POOL_2D": 3, "BATCH_MATMUL": 4, "BATCH_TO_SPACE_ND": 4, "BIDIRECTIONAL_SEQUENCE_LSTM": 3,
    "BIDIRECTIONAL_SEQUENCE_RNN": 3, "BITCAST": 1, "BITWISE_XOR": 1, "BROADCAST_ARGS": 1, "BROADCAST_TO": 4,
    "BUCKETIZE": 1, "CALL_ONCE": 1, "CAST": 9, "COMPLEX_ABS": 1, "CONCATENATION": 7, "CONV_2D": 8, "CONV_3D": 1,
    "CONV_3D_TRANSPOSE": 1, "COS": 1, "CUMSUM": 1, "DENSIFY": 1, "DEPTHWISE_CONV_2D": 6, "DEPTH_TO_SPACE": 1,
    "DEQUANTIZE": 9, "DILATE": 1, "DIV": 2, "DYNAMIC_UPDATE_SLICE": 6, "EMBEDDING_LOOKUP": 5,
    "EMBEDDING_LOOKUP_SPARSE": 1, "EQUAL": 5, "EXP": 2, "EXPAND_DIMS": 1, "FAKE_QUANT": 2, "FILL": 5, "FLOOR": 1,
    "FLOOR_DIV": 3, "FLOOR_MOD": 2, "FULLY_CONNECTED": 14, "GATHER": 8, "GATHER_ND": 6, "GELU": 2, "GREATER": 2,
    "GREATER_EQUAL": 3, "HARD_SWISH": 1, "HASHTABLE_LOOKUP": 1, "IF": 1, "IMAG": 1, "L2_NORMALIZATION": 2,
    "L2_POOL_2D": 1, "LEAKY_RELU": 2, "LESS": 3, "LESS_EQUAL": 2, "LOCAL_RESPONSE_NORMALIZATION": 1, "LOG": 2,
    "LOGICAL_AND": 1, "LOGICAL_NOT": 1, "LOGICAL_OR": 1, "LOGISTIC": 3, "LOG_SOFTMAX": 2, "LSH_PROJECTION": 1,
    "LSTM": 4, "MATRIX_DIAG": 1, "MATRIX_SET_DIAG": 1, "MAXIMUM": 4, "MAX_POOL_2D": 3, "MEAN": 3, "MINIMUM": 4,
    "MIRROR_PAD": 3, "MUL": 7, "MULTINOMIAL": 1, "NEG": 1, "NON_MAX_SUPPRESSION_V4": 1, "NON_MAX_SUPPRESSION_V5": 1,
    "NOT_EQUAL": 4, "ONE_HOT": 1, "PACK": 5, "PAD": 6, "PADV2": 6, "POW": 1, "PRELU": 1, "QUANTIZE": 6,
    "RANDOM_STANDARD_NORMAL": 1, "RANDOM_UNIFORM": 1, "RANGE": 1, "RANK": 1, "READ_VARIABLE": 1, "REAL": 1,
    "REDUCE_ALL": 1, "REDUCE_ANY": 1, "REDUCE_MAX": 3, "REDUCE_MIN": 3, "REDUCE_PROD": 2, "REDUCE_WINDOW": 1,
    "RELU": 3, "RELU6": 3, "RELU_0_TO_1": 1, "RELU_N1_TO_1": 1, "RESHAPE": 1, "RESIZE_BILINEAR": 4,
    "RESIZE_NEAREST_NEIGHBOR": 4, "REVERSE_SEQUENCE": 1, "REVERSE_V2": 4, "RFFT2D": 1, "RIGHT_SHIFT": 1, "RNN": 3,
    "RSQRT": 3, "SCATTER_ND": 1, "SELECT": 4, "SELECT_V2": 2, "SHAPE": 1, "SIGN": 2, "SIN": 1, "SKIP_GRAM": 1,
    "SLICE": 8, "SOFTMAX": 3, "SPACE_TO_BATCH_ND": 4, "SPACE_TO_DEPTH": 2, "SPARSE_TO_DENSE": 3, "SPLIT": 5,
    "SPLIT_V": 3, "SQRT": 2, "SQUARE": 1, "SQUARED_DIFFERENCE": 2, "SQUEEZE": 1, "STABLEHLO_ADD": 1,
    "STABLEHLO_COMPOSITE": 1, "STABLEHLO_GATHER": 1, "STABLEHLO_MAXIMUM": 1, "STABLEHLO_MINIMUM": 1,
    "STABLEHLO_MULTIPLY": 1, "STABLEHLO_PAD": 1, "STABLEHLO_REDUCE_WINDOW": 1, "STABLEHLO_RNG_BIT_GENERATOR": 1,
    "STABLEHLO_SCATTER": 1, "STRIDED_SLICE": 4, "SUB": 5, "SUM": 2, "SVDF": 4, "TANH": 3, "TILE": 2, "TOPK_V2": 3,
    "TRANSPOSE": 8, "TRANSPOSE_CONV": 5, "UNIDIRECTIONAL_SEQUENCE_LSTM": 3, "UNIDIRECTIONAL_SEQUENCE_RNN": 3,
    "UNIQUE": 1, "UNPACK": 6, "UNSORTED_SEGMENT_MAX": 1, "UNSORTED_SEGMENT_MIN": 1, "UNSORTED_SEGMENT_PROD": 1,
    "UNSORTED_SEGMENT_SUM": 1, "VAR_HANDLE": 1, "WHERE": 2, "WHILE": 1, "ZEROS_LIKE": 1,
}
# ... and its default (builtin) resolver, where that differs.
LITERT_BUILTIN_VERSIONS: Mapping[str, int] = {**LITERT_REF_VERSIONS, **{
    "ABS": 5, "ADD": 6, "ARG_MAX": 3, "ARG_MIN": 3, "CEIL": 1, "COS": 2, "DEPTHWISE_CONV_2D": 7,
    "DEPTH_TO_SPACE": 2, "ELU": 1, "GELU": 3, "HASHTABLE": 1, "HASHTABLE_FIND": 1, "HASHTABLE_IMPORT": 1,
    "HASHTABLE_SIZE": 1, "MUL": 8, "RANGE": 2, "ROUND": 1, "SEGMENT_SUM": 1, "SIN": 2, "SOFTMAX": 4, "SQUEEZE": 2,
    "STABLEHLO_AND": 1, "STABLEHLO_CASE": 1, "STABLEHLO_SHIFT_LEFT": 1, "STRIDED_SLICE": 8, "TILE": 3,
    "TRANSPOSE": 9, "UNIDIRECTIONAL_SEQUENCE_LSTM": 4,
}}


# --- the rows -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    targets: tuple[str, ...]
    rule: str  # short id, unique per target
    check: str  # a key of CHECKS
    params: Mapping[str, Any]
    effect: str  # one of EFFECTS
    constraint: str  # what the target requires, in words
    source: str
    fix: str = ""
    tool_sees: bool = True  # False: a real run does not reveal it (wrong values, no error)


def _r(targets: tuple[str, ...], rule: str, check: str, params: Mapping[str, Any], effect: str, constraint: str,
       source: str, fix: str = "", tool_sees: bool = True) -> Rule:
    return Rule(targets, rule, check, params, effect, constraint, source, fix, tool_sees)


RULES: tuple[Rule, ...] = (
    # LiteRT
    _r(("litert-ref",), "op-version", "op_version_above", {"versions": LITERT_REF_VERSIONS}, "fails",
       "the reference resolver registers each builtin up to a version (LiteRT 2.3 REF lacks DEPTHWISE_CONV_2D v7, "
       "INT4 weights, which the default resolver has)",
       _MEASURED_LITERT + ": a one-op model per builtin and version with OpResolverType.BUILTIN_REF",
       "run it with LiteRT's default kernels, or convert with --int4-storage int8"),
    _r(("litert",), "op-version", "op_version_above", {"versions": LITERT_BUILTIN_VERSIONS}, "fails",
       "the default resolver registers each builtin up to a version",
       _MEASURED_LITERT + ": a one-op model per builtin and version with the default resolver"),
    _r(LITERT, "quantization", "quantization_problems", {}, "fails",
       "per-axis parameters must name a dimension of the tensor and give one scale per element of it",
       _MEASURED_LITERT + " model loader (\"quantized_dimension must be in range [0, rank)\")"),
    _r(("litert-ref",), "blockwise", "blockwise", {}, "wrong",
       "the reference kernels read blockwise (sub-channel) weights as zeros, without an error",
       _MEASURED_LITERT + ": BUILTIN_REF and BUILTIN_WITHOUT_DEFAULT_DELEGATES give the bias alone; XNNPACK "
       "(the default) computes the product", "run it with LiteRT's default kernels (XNNPACK)", tool_sees=False),
    _r(LITERT, "lstm-cell-scale", "lstm_cell_scale_below",
       {"ops": ("UNIDIRECTIONAL_SEQUENCE_LSTM",), "slot": 19, "log2": -15}, "wrong",
       "the integer LSTM's tanh of the cell state handles cell scales 2^-15 and up (0 to 6 integer bits): below "
       "that it writes nothing and the output gate multiplies the step's input gate instead of tanh(c)",
       _MEASURED_LITERT + ": a Keras LSTM that TF 2.21 gives a 2^-16 cell scale, outputs against the Keras model: "
       "max error 0.34 for outputs of at most 0.19 (BUILTIN_REF and default alike; TFLite Micro 0.0009; the same "
       "LSTM at 2^-14: 0.0054); lite/kernels/lstm_eval.cc", "run it in TFLite Micro, or calibrate so that the cell "
       "state's range reaches 2^-15 · 32768 = 1.0", tool_sees=False),
    # TensorFlow Lite Micro
    _r(("tflm",), "op-set", "op_not_in", {"ops": TFLM_OPS, "custom": TFLM_CUSTOM_OPS}, "fails",
       "the builtin must be registered with the interpreter's op resolver (op versions are not checked); of custom "
       "ops, TFLite_Detection_PostProcess (AddDetectionPostprocess)",
       _MEASURED_TFLM + " (\"Didn't find op for builtin opcode\"); tensorflow/lite/micro/micro_mutable_op_resolver.h"),
    _r(("tflm",), "detection-output-shape", "custom_output_unshaped", {"custom": ("TFLite_Detection_PostProcess",)},
       "wrong", "TFLite Micro does not resize outputs: TFLite_Detection_PostProcess writes max_detections rows into "
       "outputs the file must size (TensorFlow 2.21 writes them without shape)",
       _MEASURED_TFLM + " on TensorFlow's and qconvert's SSD files (tests/fixtures/ssd.py): it runs and every output "
       "value differs from LiteRT's, infinities among them; with the shapes written, equal on every value",
       "convert with --target tflm (qconvert then writes the outputs' shapes)", tool_sees=False),
    _r(("tflm",), "blockwise", "blockwise", {}, "fails",
       "no kernel takes blockwise (sub-channel) weights: FULLY_CONNECTED with float input takes float weights only",
       _MEASURED_TFLM + " (\"Input type: FLOAT32 with filter type: INT4 not supported\"); "
       "tensorflow/lite/micro/kernels/fully_connected.cc Prepare",
       "convert with per-channel int8 weights for a microcontroller"),
    _r(("tflm",), "int16-int4", "weights_with_input",
       {"ops": ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"), "inputs": ("int16",), "weights": ("int4",)},
       "fails", "int16 activations need int8 weights",
       _MEASURED_TFLM + " (CONV_2D, DEPTHWISE_CONV_2D: \"Hybrid models are not supported\"; FULLY_CONNECTED: "
       "\"Input type: INT16 with filter type: INT4 not supported\")", "use int8 weights with --activations int16"),
    _r(("tflm",), "hybrid", "weights_with_input",
       {"ops": ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"), "inputs": ("float32",),
        "weights": ("int8", "int4")},
       "fails", "float activations need float weights (no hybrid, dynamic-range kernels)",
       "tensorflow/lite/micro/kernels/conv_common.cc, depthwise_conv_common.cc (\"Hybrid models are not supported on "
       "TFLite Micro\"), fully_connected.cc Prepare", "quantize the activations too (a full-integer file)"),
    _r(("tflm",), "uint8", "feature_map_dtype", {"dtypes": ("uint8",), "only": ("CONV_2D", "AVERAGE_POOL_2D", "MUL")},
       "fails", "these kernels take no uint8 feature maps (TFLite Micro dropped most uint8 kernels; its "
       "DEPTHWISE_CONV_2D still prepares one)",
       _MEASURED_TFLM + " on whole-uint8 files (--inference-type uint8, TensorFlow's QUANTIZED_UINT8): CONV_2D "
       "\"Hybrid models are not supported on TFLite Micro\", AVERAGE_POOL_2D and MUL \"Type UINT8 (3) not "
       "supported\"", "convert with --inference-type int8 (and --input-type uint8 for a uint8 boundary)"),
    _r(("tflm",), "float16", "tensor_dtype", {"dtypes": ("float16",)}, "fails",
       "DEQUANTIZE takes int8, int16 and uint8 inputs: float16 constants (--weights float16) fail at allocation",
       _MEASURED_TFLM + " (dequantize_common.cc: \"input->type == kTfLiteInt8 || ... kTfLiteUInt8 was not true\") "
       "on TensorFlow 2.21's float16 file", "convert with int8 weights and activations for a microcontroller"),
    _r(("tflm",), "fc-int4-per-channel", "per_channel_weights", {"ops": ("FULLY_CONNECTED",), "weights": ("int4",)},
       "fails", "FULLY_CONNECTED takes INT4 weights only per tensor",
       _MEASURED_TFLM + "; tensorflow/lite/micro/kernels/fully_connected_common.cc CalculateOpDataFullyConnected "
       "(per-channel: filter type must not be INT4)", "store the FULLY_CONNECTED weights as int8 (--weights int8)"),
    # Ethos-U (Vela)
    _r(ETHOS_U, "int4", "tensor_dtype", {"dtypes": ("int4",)}, "fails",
       "Vela 5.2 crashes on any INT4 tensor (the same values stored as INT8 compile fully)", _MEASURED_VELA,
       "convert with --int4-storage int8"),
    _r(U55_U65, "op-set", "op_not_in", {"ops": VELA_U55_OPS}, "cpu",
       "the operator must be one Vela places on the NPU", _VELA_OPS_U55 + " summary table"),
    _r(U85, "op-set", "op_not_in", {"ops": VELA_U85_OPS}, "cpu",
       "the operator must be one Vela places on the NPU", _VELA_OPS_U85 + " summary table"),
    _r(U55_U65, "float", "feature_map_dtype",
       {"dtypes": ("float32", "float16", "bfloat16", "float64"), "except": ()}, "cpu",
       "feature maps must be INT8, UINT8, INT16, INT32 or INT64", _VELA_OPS_U55 + " generic constraints"),
    _r(U85, "float", "feature_map_dtype",
       {"dtypes": ("float32", "float16", "bfloat16", "float64"), "except": ("ASSIGN_VARIABLE", "READ_VARIABLE")},
       "cpu", "feature maps must be BOOL, INT8, UINT8, INT16, INT32 or INT64", _VELA_OPS_U85 + " generic constraints"),
    _r(U55_U65, "int32", "feature_map_dtype", {"dtypes": ("int32",), "only": VELA_U55_NO_INT32}, "cpu",
       "32-bit feature maps are not supported by this operator on the NPU", _VELA_OPS_U55 + " operator constraints"),
    _r(ETHOS_U, "per-axis", "per_axis_activation", {"allowed": WEIGHTED}, "cpu",
       "per-axis quantization only on CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED and TRANSPOSE_CONV weights",
       _VELA_OPS + " generic constraints"),
    _r(ETHOS_U, "weights-8bit", "weight_dtype", {"ops": WEIGHTED, "allowed": ("int8", "uint8")}, "cpu",
       "weight tensors must be 8-bit", _VELA_OPS + " CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, TRANSPOSE_CONV"),
    _r(U55_U65, "bias", "bias", {"ops": WEIGHTED, "limit": 1099511627775}, "cpu",
       "bias constant, INT32 or INT64, INT64 values under 1099511627775", _VELA_OPS_U55 + " operator constraints"),
    _r(U85, "bias", "bias", {"ops": WEIGHTED, "limit": 281474976710655}, "cpu",
       "bias constant, INT32 or INT64, INT64 values under 281474976710655", _VELA_OPS_U85 + " operator constraints"),
    _r(U55_U65, "weight-sum", "weight_sum", {"ops": WEIGHTED, "limit8": 8323072, "limit16": 8323072}, "cpu",
       "the sum of absolute weights (less the zero point) of one output channel must not exceed 8323072",
       _VELA_OPS_U55 + " operator constraints"),
    _r(U85, "weight-sum", "weight_sum", {"ops": WEIGHTED, "limit8": 8323072, "limit16": 2130706432}, "cpu",
       "the sum of absolute weights of one output channel must not exceed 8323072 (8-bit input) or 2130706432 "
       "(16-bit input)", _VELA_OPS_U85 + " operator constraints"),
    _r(U55_U65, "matmul-int16", "feature_map_dtype", {"dtypes": ("int16",), "only": ("BATCH_MATMUL",)}, "cpu",
       "BATCH_MATMUL (a product of two feature maps) takes INT8 inputs only (U85: INT16 too)",
       "measured: ethos-u-vela 5.2.0 --show-cpu-operations on 16x8 BATCH_MATMUL files (\"IFM precision must be "
       "Int8\"; int8 BATCH_MATMUL and TRANSPOSE, and both in 16x8 on ethos-u85-256, run on the NPU)",
       "convert with --activations int8 for an Ethos-U55/U65"),
    _r(U55_U65, "stride", "stride_above", {"ops": ("DEPTHWISE_CONV_2D",), "limit": 3}, "cpu",
       "DEPTHWISE_CONV_2D stride in 1..3", _VELA_OPS_U55 + " DEPTHWISE_CONV_2D constraints"),
    _r(ETHOS_U, "softmax-hw", "softmax_hw", {"ops": ("SOFTMAX",), "limit": 65536}, "cpu",
       "SOFTMAX input width × height under 65536", _VELA_OPS + " SOFTMAX constraints"),
    _r(ETHOS_U, "rank", "rank_above", {"ops": ("TRANSPOSE",), "limit": 8}, "cpu",
       "TRANSPOSE tensors of at most 8 dimensions", _VELA_OPS + " TRANSPOSE constraints"),
)


# --- findings -----------------------------------------------------------------------------
@dataclass
class Finding:
    target: str
    rule: str
    effect: str
    message: str
    source: str
    subgraph: int = 0
    op_index: int | None = None
    op: str | None = None
    tensor: str | None = None
    fix: str = ""
    tool_sees: bool = True
    extra: dict[str, Any] = field(default_factory=dict)  # more JSON keys
    because: str = ""  # a tool finding: the static finding that explains it, for the summary line

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "effect": self.effect, "subgraph": self.subgraph, "op_index": self.op_index,
                "op": self.op, "tensor": self.tensor, "message": self.message, "fix": self.fix or None,
                "source": self.source}


# A hit of a predicate: (subgraph, op index or None, op name or None, tensor name or None, detail text)
Hit = tuple[int, "int | None", "str | None", "str | None", str]
_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _op_name(op: Any) -> str:
    return f"custom op '{op.custom_code}'" if op.custom_code is not None else op.builtin


def _ops(model: Any) -> Iterator[tuple[int, int, Any, Any]]:
    for s, sg in enumerate(model.subgraphs):
        for k, op in enumerate(sg.operators):
            yield s, k, sg, op


def _tensor(sg: Any, i: int) -> Any:
    return sg.tensors[i] if 0 <= i < len(sg.tensors) else None


def _slots(op: Any) -> tuple[int, int, int]:
    """(input, weights, bias) operand slots, from the op table (TRANSPOSE_CONV: 2, 1, 3)."""
    r = row(op.builtin)
    return r.operand_slots if r is not None else (0, 1, 2)


def _operand(sg: Any, op: Any, which: int) -> Any:
    slot = _slots(op)[which]
    return _tensor(sg, op.inputs[slot]) if slot < len(op.inputs) else None


def _weights(sg: Any, op: Any) -> Any:
    return _operand(sg, op, 1)


def _is_const(t: Any) -> bool:
    return t is not None and t.data is not None


def _tensor_dtype(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, sg in enumerate(model.subgraphs):
        for t in sg.tensors:
            if t.dtype in p["dtypes"]:
                yield s, None, None, t.name, f"tensor '{t.name}' is {t.dtype.upper()}"


def _blockwise(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        for i in op.inputs:
            t = _tensor(sg, i)
            if t is not None and t.blockwise is not None:
                yield s, k, op.builtin, t.name, (f"weights '{t.name}' are blockwise-quantized "
                                                 f"({t.dtype.upper()}, blocks of {t.blockwise[2]})")


def _op_not_in(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin not in p["ops"] and not (op.custom_code is not None and op.custom_code in p.get("custom", ())):
            yield s, k, op.builtin, None, f"{_op_name(op)} is not supported"


def _custom_output_unshaped(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.custom_code in p["custom"]:
            for i in op.outputs:
                t = _tensor(sg, i)
                if t is not None and not t.shape:
                    yield s, k, op.builtin, t.name, (f"{_op_name(op)} writes output '{t.name}', which the file gives "
                                                     f"no shape")
                    break


def _op_version_above(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    versions = p["versions"]
    for s, k, sg, op in _ops(model):
        top = versions.get(op.builtin, 0)
        if op.custom_code is None and op.version > top:
            yield s, k, op.builtin, None, (f"{op.builtin} version {op.version} is not registered (up to {top})"
                                           if top else f"{op.builtin} is not registered")


def _quantization_problems(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    from qconvert.tools.tflite_file import quantization_problems

    for s, sg in enumerate(model.subgraphs):
        for t in sg.tensors:
            if t.scale:
                for problem in quantization_problems(t):
                    if "LiteRT rejects" in problem:
                        yield s, None, None, t.name, f"tensor '{t.name}': {problem}"


def _weights_with_input(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"] and op.inputs:
            x, w = _operand(sg, op, 0), _weights(sg, op)
            if x is not None and w is not None and x.dtype in p["inputs"] and w.dtype in p["weights"]:
                yield s, k, op.builtin, w.name, (f"{op.builtin} has {x.dtype} input '{x.name}' and "
                                                 f"{w.dtype.upper()} weights '{w.name}'")


def _per_channel_weights(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"]:
            w = _weights(sg, op)
            if w is not None and w.dtype in p["weights"] and len(w.scale) > 1 and w.blockwise is None:
                yield s, k, op.builtin, w.name, (f"{op.builtin} weights '{w.name}' are {w.dtype.upper()} with "
                                                 f"{len(w.scale)} per-channel scales")


def _feature_maps(sg: Any, op: Any) -> Iterator[Any]:
    for i in (*op.inputs, *op.outputs):
        t = _tensor(sg, i)
        if t is not None and not _is_const(t):
            yield t


def _feature_map_dtype(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    only = p.get("only")
    for s, k, sg, op in _ops(model):
        if op.builtin in p.get("except", ()) or (only is not None and op.builtin not in only):
            continue
        for t in _feature_maps(sg, op):
            if t.dtype in p["dtypes"]:
                yield s, k, op.builtin, t.name, f"{op.builtin} feature map '{t.name}' is {t.dtype}"
                break


def _per_axis_activation(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["allowed"]:
            continue
        for i in (*op.inputs, *op.outputs):
            t = _tensor(sg, i)
            if t is not None and len(t.scale) > 1:
                yield s, k, op.builtin, t.name, f"{op.builtin} tensor '{t.name}' has {len(t.scale)} per-axis scales"
                break


def _weight_dtype(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"]:
            w = _weights(sg, op)
            if w is not None and w.dtype not in p["allowed"] and w.dtype not in _FLOATS:
                yield s, k, op.builtin, w.name, f"{op.builtin} weights '{w.name}' are {w.dtype.upper()}"


def _bias(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin not in p["ops"]:
            continue
        b = _operand(sg, op, 2)
        if b is None or b.dtype in _FLOATS:
            continue
        if not _is_const(b):
            yield s, k, op.builtin, b.name, f"{op.builtin} bias '{b.name}' is not a constant"
        elif b.dtype not in ("int32", "int64"):
            yield s, k, op.builtin, b.name, f"{op.builtin} bias '{b.name}' is {b.dtype}"
        elif b.dtype == "int64":
            top = int(np.abs(b.array().astype(np.int64)).max(initial=0))
            if top >= p["limit"]:
                yield s, k, op.builtin, b.name, f"{op.builtin} bias '{b.name}' reaches {top} (limit {p['limit']})"


def _channel_axis(op: Any, w: Any) -> int:
    """The weight's output-channel axis: its quantized dimension, else the op table's."""
    if len(w.scale) > 1:
        return int(w.quantized_dimension)
    r = row(op.builtin)
    axis = r.weight_axis if r is not None and r.weight_axis is not None else 0
    return axis if axis < len(w.shape) else 0


def _weight_sum(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin not in p["ops"] or not op.inputs:
            continue
        w, x = _weights(sg, op), _operand(sg, op, 0)
        if not _is_const(w) or w.dtype not in ("int8", "uint8", "int4") or not w.shape or w.blockwise is not None:
            continue
        limit = p["limit16"] if x is not None and x.dtype == "int16" else p["limit8"]
        values = w.array().astype(np.int64)
        axis = _channel_axis(op, w)
        zp = np.asarray(w.zero_point or (0,), np.int64)
        if zp.size > 1 and zp.size == values.shape[axis]:
            shape = [1] * values.ndim
            shape[axis] = zp.size
            zp = zp.reshape(shape)
        else:
            zp = zp.reshape(-1)[0]
        sums = np.abs(values - zp).sum(axis=tuple(a for a in range(values.ndim) if a != axis))
        top = int(sums.max(initial=0))
        if top > limit:
            yield s, k, op.builtin, w.name, (f"{op.builtin} weights '{w.name}': an output channel's sum of "
                                             f"absolute weights is {top} (limit {limit})")


def _stride_above(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"]:
            sh, sw = op.options.get("stride_h", 1), op.options.get("stride_w", 1)
            if max(sh, sw) > p["limit"]:
                yield s, k, op.builtin, None, f"{op.builtin} has stride {sh}x{sw}"


def _softmax_hw(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"] and op.inputs:
            x = _tensor(sg, op.inputs[0])
            if x is not None and len(x.shape) >= 3:
                hw = int(x.shape[-2]) * int(x.shape[-3])
                if hw >= p["limit"]:
                    yield s, k, op.builtin, x.name, f"SOFTMAX input '{x.name}' has width × height {hw}"


def _lstm_cell_scale_below(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin not in p["ops"] or len(op.inputs) <= p["slot"]:
            continue
        x, cell = _tensor(sg, op.inputs[0]), _tensor(sg, op.inputs[p["slot"]])
        if x is None or cell is None or x.dtype != "int8" or not cell.scale:
            continue
        if 0 < cell.scale[0] < 2.0 ** p["log2"] * (1 - 1e-3):
            yield s, k, op.builtin, cell.name, (f"cell state '{cell.name}' has scale {cell.scale[0]:.6g} "
                                                f"(2^{np.log2(cell.scale[0]):.0f})")


def _rank_above(model: Any, p: Mapping[str, Any]) -> Iterator[Hit]:
    for s, k, sg, op in _ops(model):
        if op.builtin in p["ops"]:
            for t in _feature_maps(sg, op):
                if len(t.shape) > p["limit"]:
                    yield s, k, op.builtin, t.name, f"{op.builtin} tensor '{t.name}' has rank {len(t.shape)}"
                    break


CHECKS: Mapping[str, Callable[[Any, Mapping[str, Any]], Iterator[Hit]]] = {
    "tensor_dtype": _tensor_dtype, "blockwise": _blockwise, "op_not_in": _op_not_in,
    "custom_output_unshaped": _custom_output_unshaped,
    "op_version_above": _op_version_above, "quantization_problems": _quantization_problems,
    "weights_with_input": _weights_with_input, "per_channel_weights": _per_channel_weights,
    "feature_map_dtype": _feature_map_dtype, "per_axis_activation": _per_axis_activation,
    "weight_dtype": _weight_dtype, "bias": _bias, "weight_sum": _weight_sum, "stride_above": _stride_above,
    "softmax_hw": _softmax_hw, "rank_above": _rank_above, "lstm_cell_scale_below": _lstm_cell_scale_below,
}


def rules_for(target: str) -> list[Rule]:
    return [r for r in RULES if target in r.targets]


def static_check(model: Any, target: str) -> list[Finding]:
    """Every known constraint of ``target`` that ``model`` (a ``read_model`` result) breaks."""
    out = []
    for r in rules_for(target):
        for s, k, op, tensor, detail in CHECKS[r.check](model, r.params):
            out.append(Finding(target, r.rule, r.effect, f"{detail}: {r.constraint}", r.source, s, k, op, tensor,
                               r.fix, r.tool_sees))
    return out


def verdict(findings: list[Finding]) -> str:
    """``cannot-run`` when a finding fails or computes wrong values, ``partial`` when ops fall
    back to the CPU, else ``runs``."""
    effects = {f.effect for f in findings}
    if effects & {"fails", "wrong"}:
        return "cannot-run"
    return "partial" if "cpu" in effects else "runs"


# ---------------------------------------------------------------------------
# convert --target: the conversion choices a target makes


# Targets that cannot take INT4 weight tensors as TensorFlow writes them, and why (the rules above).
INT4_REJECTED: Mapping[str, str] = {
    **{t: "Vela 5.2 crashes on any INT4 tensor (measured)" for t in ETHOS_U},
    "tflm": "TFLite Micro rejects per-channel INT4 FULLY_CONNECTED (measured; fully_connected_common.cc)",
    "litert-ref": "LiteRT's reference kernels register DEPTHWISE_CONV_2D up to version 6, not INT4's 7 (measured)",
}


def has_4bit_weights(graph: Any) -> bool:
    """Whether a converted graph holds 4-bit weights (integer range [-7, 7] or [-8, 7]): the
    notes of :func:`conversion_choices` apply only then."""
    return any(t.quant is not None and t.quant.qmax == 7 and t.quant.qmin in (-7, -8) for t in graph.tensors.values())


def cannot_run(checked: Mapping[str, Any]) -> str | None:
    """The first target of a ``qconvert check`` document that cannot run the file, as
    "TARGET cannot run it: WHY"; None when every target can."""
    bad = next((e for e in checked["targets"] if e["verdict"] == "cannot-run"), None)
    if bad is None:
        return None
    return f"{bad['target']} cannot run it: {bad['problems'][0]['message'] if bad['problems'] else bad['summary']}"


def conversion_choices(targets: list[str], int4_storage: str | None) -> tuple[str, list[str]]:
    """(int4_storage, notes) for converting to ``targets``: 4-bit weights are stored as int8 in
    [-7, 7] when a target cannot take INT4 tensors, unless ``int4_storage`` was given. (Blockwise
    weights for a target other than LiteRT's default kernels are refused by the options
    themselves: ``qconvert.options``.)"""
    if int4_storage is not None:
        return int4_storage, []
    why = [(t, INT4_REJECTED[t]) for t in targets if t in INT4_REJECTED]
    if not why:
        return "packed", []
    return "int8", [f"--target {why[0][0]}: 4-bit weights stored as int8 in [-7, 7] ({why[0][1]}); "
                    "--int4-storage packed keeps INT4"]
