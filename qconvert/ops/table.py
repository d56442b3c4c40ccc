"""THE op table: one row per TFLite builtin, with everything the passes, calibration,
``dump``, ``check`` and the runtime need to know about it.

A row says how the op's int8 parameters relate to its neighbours' (``Rule``), the op
version TensorFlow writes for its int8 form, fixed output parameters, the weight's
per-channel axis, which fusions it takes part in, its float kernel (constant folding and
calibration), its requantization recipe (what the int8 kernel computes in Prepare), and its
forms: 16x8 (``form16``), uint8, int8 → int16 and int32 shapes, which ``run`` executes with the
integer kernel registered under the row's name (``qconvert/runtime/kernels.py``'s ``KERNELS``),
and where qconvert meets it (``made``). Passes and tools look rows up here; nobody else branches
on TFLite op names, and nothing else lists ops by a property (``tools/targets.WEIGHTED`` is the
weighted rows).

Adding an op: ``docs/adding-an-op.md`` (a row here, its float kernel in ``float_kernels.py``, its
recipe in ``recipes.py`` if it rescales, its integer kernel, its TensorFlow op);
``tests/ops/test_op_rows.py`` names any piece a row lacks.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from qconvert import quant as qm
from qconvert.ops import float_kernels as fk
from qconvert.ops import recipes as r
from qconvert.ops import recipes_seq as rs
from qconvert.quant.multipliers import IntPairs
from qconvert.quant.requant import Operand, Requant


class Rule(enum.Enum):
    """How an op's int8 parameters relate to its neighbours' (TFLite int8 spec)."""

    FREE = "free"  # output has its own range (from a FakeQuant); the kernel rescales
    WEIGHTED = "weighted"  # like FREE, plus int8 weights and an int32 bias of scale in*w
    SAME_SCALE = "same-scale"  # inputs and output share one scale and zero point
    FIXED = "fixed-output"  # the kernel requires fixed output parameters
    RAW = "raw"  # none: the kernel converts raw values and reads no parameters (CAST)
    QUANT = "quant"  # QUANTIZE / DEQUANTIZE themselves


class Form16(enum.Enum):
    """An op's 16x8 form (int16 activations, int8 weights), as measured on TensorFlow 2.21's
    converter and LiteRT: what ``--activations int16`` writes and what ``run`` executes."""

    NONE = "none"  # TF 2.21 writes none, or LiteRT's int16 kernel is missing or unusable: both refuse it
    WRITTEN = "written"  # written as TF writes it, with no record: `run` has no int16 kernel for it
    RUN = "run"  # written, with its record (requant16, else requant), and `run` executes it


class Made(enum.Enum):
    """Where qconvert meets the op, which decides the kernels it needs."""

    FLOAT = "float"  # the frontend or a fusion makes it in the float graph: folding and calibration run it
    INT8 = "int8"  # the quantize stage makes it from int8 ops (SPLIT from STRIDED_SLICEs): no float kernel
    OTHERS = "others"  # only other converters' files (run, dump, check): qconvert never writes it


class OpRow:
    """Everything about one TFLite builtin (see the module docstring). Read-only.

    The annotated class attributes below are the fields and their defaults; a row stores only the
    ones it is given. (A plain class: ``@dataclass(frozen=True)`` spent 2.1 ms of every start-up
    generating the 62-argument ``__init__``, ``__eq__`` and ``__hash__`` nobody uses.)"""

    name: str
    rule: Rule
    int8_version: int
    fixed: tuple[float, int] | None = None  # (scale, zero_point) for Rule.FIXED
    weight_axis: int | None = None  # per-channel axis of the weight (None: per-tensor)
    operand_slots: tuple[int, int, int] = (0, 1, 2)  # WEIGHTED: the (input, weights, bias) slots
    float_inputs: tuple[int, ...] | None = None  # operand slots carrying activations (None: all)
    # fusions (prepare)
    fuses_activation: bool = False  # a following RELU/RELU6/RELU_N1_TO_1 fuses into it
    fuses_activation_only_with_bias: bool = False  # ...under calibration, only once it has a bias
    activation: str | None = None  # this op is that activation: its fused_activation_function value
    bias_sign: int = 0  # ADD (+1) / SUB (-1) of a per-channel constant folds into a preceding bias
    scales_weights: bool = False  # MUL by a per-channel constant folds into preceding weights
    absorbs_input_scale: bool = False  # a MUL by a scalar before it folds into its weights (input side)
    folds_mul_first: bool = False  # a MUL after it folds before the FULLY_CONNECTED fusions (TF-dialect FuseMulAndConv2D)
    # ScalarizeSplatConstantForBroadcastableOps: after a conv/depthwise/FC, a splat second operand becomes a scalar
    # when the affine op's bias is a constant ("shift": ADD, SUB) and its weights too ("scale": MUL, DIV)
    splat_scalar: str | None = None
    symmetric_weights: bool = False  # the int8 kernel takes weight zero point 0 only (conv.cc)
    int4_version: int | None = None  # the version with INT4 weights (None: the kernel takes none)
    int4_in_reference: bool = False  # LiteRT's reference kernels register that version (2.3: not DEPTHWISE v7)
    blockwise_weights: bool = False  # XNNPACK runs it on float inputs with blockwise int4 weights (--block-size)
    # dynamic range (--activations float): (version, weight axis) of its hybrid form, float input and int8
    # per-channel weights, as TF 2.21 writes it; None: its constants stay float
    hybrid: tuple[int, int] | None = None
    hybrid_options: tuple[tuple[str, Any], ...] = ()  # options TF sets on the hybrid form
    float_drops_zero_bias: bool = False  # float and hybrid forms: TF writes no bias where it is all zeros
    absent_bias_written: bool = False  # a missing optional bias is written as operand -1, as TF writes it
    # constant operand slots TF rewrites after it merges equal constants: each op keeps its own (share.py)
    unshared_slots: tuple[int, ...] = ()
    # the float form's version from its options and which operands are given (None: 1)
    float_version: Callable[[Mapping[str, Any], Sequence[bool]], int] | None = None
    grouped_version: int | None = None  # float, hybrid and float16 forms: the version of a grouped convolution
    # 16x8 (--activations int16): fixed output parameters, options and version where they differ from int8
    fixed16: tuple[float, int] | None = None
    int16_options: tuple[tuple[str, Any], ...] = ()
    int16_version: int | None = None
    form16: Form16 = Form16.RUN
    per_tensor16: bool = True  # WEIGHTED: TensorFlow writes its 16x8 form with per-tensor weights (False: it fails)
    requant16: Callable[..., dict[str, Any]] | None = None  # the int16 kernel's recipe where it differs
    lut: Callable[[Any], Any] | None = None  # the float32 function whose int8 table its kernel builds (LUTPopulate)
    # the integer forms `run` executes besides int8 (its kernel in qconvert/runtime/kernels.py's KERNELS)
    uint8: bool = False  # TFLite's older uint8 form: the int8 kernel with bounds 0..255
    # uint8 (--inference-type uint8): the kernel rescales inputs whose parameters differ from the output's,
    # so TensorFlow's uint8 path keeps each input's own (no requantize): CONCATENATION (measured on TF 2.21)
    uint8_rescales_inputs: bool = False
    int8_to_int16: bool = False  # int8 in, int16 out (TFLite Micro's SOFTMAX)
    int32_shapes: bool = False  # on int32 shape values (SHAPE → PACK → RESHAPE in other files)
    index_output: bool = False  # its output is an int32/int64 index or shape, with no parameters
    # `run` executes it on raw values of any element type its LiteRT kernel takes (runtime/interpreter.py's
    # RAW_TYPES: bool, 8- to 64-bit integers, float32/64), reading no quantization parameters (CAST, TILE)
    any_type: bool = False
    # a TFLite custom op, filed under its custom code (the file's operator is CUSTOM): `run` executes it on
    # float32 operands with the options of its FlexBuffer map (TFLite_Detection_PostProcess)
    custom: bool = False
    made: Made = Made.FLOAT
    # constant folding, identities (fold)
    kernel: Callable[..., Any] | None = None  # float32 kernel: kernel(node, *values)
    folds: bool = False  # constant folding evaluates it when all its inputs are constants
    reshapes: bool = False  # output = input in the output tensor's shape (no kernel)
    # TF's optimize pass moves an element-wise op of one operand (``hoists``) before an op that only moves
    # elements (``moves_elements``: RESHAPE, SQUEEZE, EXPAND_DIMS, TRANSPOSE, DEPTH_TO_SPACE) read only by it
    hoists: bool = False
    moves_elements: bool = False
    layout: str | None = None  # "transpose" / "reshape": a weight layout change (hoisted above Q/DQ)
    neutral: tuple[float, tuple[int, ...]] | None = None  # (identity constant, slots it may stand in)
    removable_if_same_shape: bool = False  # MEAN over axes of size 1 is the identity
    dropped_after_legalize: bool = False  # FAKE_QUANT: its range already lives in a Q/DQ pair
    # calibration
    in_place: bool = False  # TFLite's kernels may share the output buffer with an input
    # int8: the input scale its reference kernel needs to exceed, from the options (None: any)
    least_input_scale: Callable[[Mapping[str, Any]], float] | None = None
    divisor_slot: int | None = None  # int8: the operand its kernel divides by (it stops on a zero divisor)
    zero_pads: bool = False  # PAD: slot 1 holds the paddings, the fill is zero
    # PADV2: the slot of its fill value, quantized with the shared parameters; a fill of -inf or +inf
    # (or ±FLT_MAX, as TensorFlow writes them) pads a max or min pool: its output's range is not recorded,
    # it takes its input's, and the fill becomes the lowest or highest integer (``pool_fill``)
    fill_slot: int | None = None
    takes_same_padding: bool = False  # a window op whose VALID + zero PAD may become SAME (fuse_pad_into_conv)
    weight_slots: tuple[int, ...] = ()  # FREE ops: constant operands quantized as weights (symmetric)
    # a recurrent op's VARIABLE state operands: its float kernel returns their final values too,
    # which calibration records under their names; ``state_params`` gives every constant and state
    # operand its parameters from the input's, the output's and the recorded state ranges
    state_slots: tuple[int, ...] = ()
    state_params: Callable[..., Any] | None = None
    arith: str | None = None  # element-wise "add" / "sub" / "mul": what pattern fusions look for
    # requantization (quantize pass, dump, run)
    requant: Callable[..., dict[str, Any]] | None = None
    version: Callable[..., int] | None = None  # the int8 version when it depends on the scales

    def __init__(self, name: str, rule: Rule, int8_version: int, **fields: Any) -> None:
        unknown = [k for k in fields if k not in OpRow.__annotations__]
        if unknown:
            raise TypeError(f"OpRow() got an unexpected keyword argument {unknown[0]!r}")
        self.__dict__.update(name=name, rule=rule, int8_version=int8_version, **fields)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"OpRow {self.name} is read-only: cannot set {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"OpRow {self.name} is read-only: cannot delete {name!r}")

    def __repr__(self) -> str:
        return f"OpRow({', '.join(f'{k}={v!r}' for k, v in self.__dict__.items())})"

    @property
    def int16(self) -> bool:
        """It has a 16x8 form (``--activations int16`` writes it)."""
        return self.form16 is not Form16.NONE

    @property
    def rescales(self) -> bool:
        """Its int8 kernel derives multipliers, a table or a clamp from the scales (a recipe)."""
        return self.rule in (Rule.FREE, Rule.WEIGHTED, Rule.FIXED) and not self.index_output


def _row(name: str, rule: Rule, int8_version: int, **kw: Any) -> tuple[str, OpRow]:
    return name, OpRow(name, rule, int8_version, **kw)

# Fixed output parameters and where the kernels require them:
#   SOFTMAX  - activations.cc SoftmaxPrepare: zero_point == -128, scale == 1/256
#   LOGISTIC - activations.cc SigmoidPrepare: scale == 1/256 exactly, zero_point -128
#   TANH     - activations.cc TanhPrepare / converter: scale 1/128, zero_point 0
#   int16 (16x8): all three 1/32768, zero point 0 (measured on TF 2.21)
TABLE: dict[str, OpRow] = dict([
    _row("CONV_2D", Rule.WEIGHTED, 3, uint8=True, weight_axis=0, int4_version=7, int4_in_reference=True, hybrid=(5, 0),
         grouped_version=6,
         fuses_activation=True, float_inputs=(0,), takes_same_padding=True,
         int16_options=(("quantized_bias_type", "INT64"),), symmetric_weights=True, absorbs_input_scale=True,
         folds_mul_first=True, kernel=fk.conv_2d, requant=r.convolution, version=r.conv_2d_version),
    # per_tensor16: TF 2.21's 16x8 quantizer fails on per-tensor depthwise weights ("Quantized dimension for
    # tensor property and quantization parameters do not match. Got 3 and 0"; measured)
    _row("DEPTHWISE_CONV_2D", Rule.WEIGHTED, 3, uint8=True, weight_axis=3, int4_version=7, fuses_activation=True,
         hybrid=(6, 3), float_version=r.depthwise_float_version,
         float_inputs=(0,), takes_same_padding=True, per_tensor16=False,
         symmetric_weights=True, absorbs_input_scale=True, kernel=fk.depthwise_conv_2d, requant=r.convolution),
    # (output shape, weights [O, H, W, I], input, bias); no bias until a BiasAdd fuses into it
    _row("TRANSPOSE_CONV", Rule.WEIGHTED, 2, weight_axis=0, fuses_activation=True, float_inputs=(2,), hybrid=(2, 0),
         float_version=r.transpose_conv_float_version,
         operand_slots=(2, 1, 3), fuses_activation_only_with_bias=True, symmetric_weights=True,
         int16_options=(("quantized_bias_type", "INT64"),), kernel=fk.transpose_conv, requant=r.convolution,
         version=r.transpose_conv_version),
    _row("FULLY_CONNECTED", Rule.WEIGHTED, 4, uint8=True, int4_version=10, int4_in_reference=True,
         hybrid=(12, 0), hybrid_options=(("asymmetric_quantize_inputs", True),), float_drops_zero_bias=True,
         absent_bias_written=True,
         float_version=r.fully_connected_float_version,
         blockwise_weights=True, int16_options=(("quantized_bias_type", "INT64"),), fuses_activation=True,
         float_inputs=(0,), absorbs_input_scale=True, kernel=fk.fully_connected, folds=True,
         requant=r.fully_connected, version=r.fully_connected_version),
    # both operands activations (attention's Q·Kᵀ and scores·V): version 2 in int8 and 16x8 (TF 2.21); a
    # constant operand is quantized as an activation (its own range), as TensorFlow writes it
    _row("BATCH_MATMUL", Rule.FREE, 2, kernel=fk.batch_matmul, folds=True, requant=r.batch_matmul),
    _row("ADD", Rule.FREE, 2, uint8=True, int16_options=(("pot_scale_int16", False),), requant16=r.add_sub16,
         fuses_activation=True, bias_sign=1, splat_scalar="shift",
         neutral=(0.0, (0, 1)), in_place=True,
         kernel=fk.binary(lambda a, b: a + b), folds=True, requant=r.add_sub, arith="add"),
    _row("SUB", Rule.FREE, 2, uint8=True, int16_options=(("pot_scale_int16", False),), requant16=r.add_sub16,
         fuses_activation=True, bias_sign=-1, splat_scalar="shift",
         neutral=(0.0, (1,)), in_place=True,
         kernel=fk.binary(lambda a, b: a - b), folds=True, requant=r.add_sub, arith="sub"),
    _row("MUL", Rule.FREE, 2, uint8=True, fuses_activation=True, scales_weights=True, splat_scalar="scale",
         neutral=(1.0, (0, 1)),
         in_place=True, kernel=fk.binary(lambda a, b: a * b), folds=True, requant=r.mul, version=r.mul_version,
         arith="mul"),
    # both operands activations (ReLU linear attention's x / (sum + eps)); x / c is a MUL by 1/c. int8 v1 (TF
    # 2.21, measured); its output takes its own range, the divisor's range is not constrained; no 16x8 form (TF 2.21:
    # "Quantization to 16x8-bit not yet supported for op: 'DIV'")
    _row("DIV", Rule.FREE, 1, form16=Form16.NONE, fuses_activation=True, in_place=True, splat_scalar="scale",
         kernel=fk.binary(lambda a, b: a / b), folds=True,
         requant=r.div, version=r.div_version, divisor_slot=1),
    _row("MEAN", Rule.FREE, 2, uint8=True, float_inputs=(0,), removable_if_same_shape=True, kernel=fk.mean,
         requant=r.mean),
    # LiteRT's int16 SUM adds the raw int16 values (no rescale, wrapping): no usable 16x8 form (measured)
    _row("SUM", Rule.FREE, 2, form16=Form16.NONE, float_inputs=(0,), removable_if_same_shape=True, kernel=fk.reduce_sum,
         requant=r.sum_),
    _row("SLICE", Rule.SAME_SCALE, 2, uint8=True, int32_shapes=True, float_inputs=(0,), kernel=fk.slice_,
         folds=True),
    _row("STRIDED_SLICE", Rule.SAME_SCALE, 2, uint8=True, int32_shapes=True, float_inputs=(0,),
         kernel=fk.strided_slice, folds=True, unshared_slots=(1, 2, 3)),
    _row("RELU", Rule.FREE, 2, hoists=True, uint8=True, activation="RELU", kernel=fk.relu, requant=r.relu),
    _row("RELU6", Rule.FREE, 2, hoists=True, uint8=True, activation="RELU6", kernel=fk.relu6, requant=r.relu),
    _row("RELU_N1_TO_1", Rule.FREE, 1, hoists=True, form16=Form16.NONE, activation="RELU_N1_TO_1", kernel=fk.relu_n1_to_1,
         requant=r.relu),
    # TF 2.21 writes LEAKY_RELU v1 for int8, v2 for int16
    _row("LEAKY_RELU", Rule.FREE, 1, int16_version=2, kernel=fk.leaky_relu, requant=r.leaky_relu),
    _row("PRELU", Rule.FREE, 1, form16=Form16.NONE, weight_slots=(1,), kernel=fk.prelu,
         requant=r.prelu),  # fused from Keras' PReLU
    _row("HARD_SWISH", Rule.FREE, 1, form16=Form16.NONE, kernel=fk.hard_swish,
         requant=r.hard_swish),  # fused from x·relu6(x+3)/6
    # LayerNormalization's variance and 1/sqrt(variance + eps) (ConvNeXt), where TF keeps them int8
    _row("SQUARED_DIFFERENCE", Rule.FREE, 2, form16=Form16.NONE, kernel=fk.squared_difference,
         requant=r.squared_difference),
    _row("RSQRT", Rule.FREE, 2, form16=Form16.WRITTEN, kernel=fk.rsqrt, requant=r.rsqrt),
    _row("ABS", Rule.FREE, 2, kernel=fk.abs_, requant=r.abs_),  # int16 (16x8): v2 too (TF 2.21)
    # TF 2.21 (measured): EXP and LOG int8 v2 and 16x8 v2, SQRT int8 v2 and no 16x8 form ("Quantization to
    # 16x8-bit not yet supported for op: 'SQRT'"); each output takes its own range. Their int8 kernels are
    # tables of the float32 function (LUTPopulate), SQRT's computed in float32 per element; EXP and LOG int16
    # LiteRT's 513-entry interpolated tables (exp.cc, elementwise.cc)
    _row("EXP", Rule.FREE, 2, kernel=fk.exp, lut=qm.exp_float32, requant=r.lookup_table, requant16=r.lut16),
    _row("LOG", Rule.FREE, 2, kernel=fk.log, requant=r.log_, requant16=r.lut16),
    _row("SQRT", Rule.FREE, 2, form16=Form16.NONE, kernel=fk.sqrt, requant=r.sqrt),
    # fused from 0.5·x·erfc(-x/√2) (legalize/gelu.py)
    _row("GELU", Rule.FREE, 2, form16=Form16.RUN, kernel=fk.gelu, requant=r.gelu, requant16=r.gelu16),
    _row("MAXIMUM", Rule.SAME_SCALE, 2, uint8=True, kernel=fk.maximum, folds=True),
    _row("MINIMUM", Rule.SAME_SCALE, 2, uint8=True, kernel=fk.minimum, folds=True),
    _row("AVERAGE_POOL_2D", Rule.SAME_SCALE, 2, uint8=True, kernel=fk.average_pool_2d),
    _row("MAX_POOL_2D", Rule.SAME_SCALE, 2, uint8=True, kernel=fk.max_pool_2d),
    _row("RESIZE_NEAREST_NEIGHBOR", Rule.SAME_SCALE, 2, uint8=True, float_inputs=(0,),
         kernel=fk.resize_nearest_neighbor, version=r.resize_version),
    _row("RESIZE_BILINEAR", Rule.SAME_SCALE, 2, uint8=True, float_inputs=(0,), kernel=fk.resize_bilinear,
         version=r.resize_bilinear_version),
    _row("REDUCE_MAX", Rule.SAME_SCALE, 2, float_inputs=(0,), kernel=fk.reduce_max),
    _row("CONCATENATION", Rule.SAME_SCALE, 2, uint8=True, uint8_rescales_inputs=True, int32_shapes=True, kernel=fk.concatenation, folds=True),
    _row("PACK", Rule.SAME_SCALE, 2, uint8=True, int32_shapes=True, kernel=fk.pack, folds=True),
    # regrouped from per-output STRIDED_SLICEs once int8 (quantize_pass/regroup.py)
    _row("SPLIT", Rule.SAME_SCALE, 2, made=Made.INT8, uint8=True, float_inputs=(1,)),
    _row("SPLIT_V", Rule.SAME_SCALE, 2, made=Made.INT8, uint8=True, float_inputs=(0,)),
    _row("UNPACK", Rule.SAME_SCALE, 2, made=Made.INT8, uint8=True, int16_version=1,  # TF 2.21 writes v1 for int16
         float_inputs=(0,)),
    _row("RESHAPE", Rule.SAME_SCALE, 1, moves_elements=True, uint8=True, int32_shapes=True, float_inputs=(0,), reshapes=True, folds=True,
         layout="reshape"),
    _row("SQUEEZE", Rule.SAME_SCALE, 1, moves_elements=True, uint8=True, reshapes=True, folds=True),
    _row("PAD", Rule.SAME_SCALE, 2, uint8=True, float_inputs=(0,), kernel=fk.pad, folds=True, zero_pads=True),
    # TF 2.21 (measured): v2 in int8, input, fill and output at the output's parameters (its range includes
    # the fill), the fill quantized and clamped; its 16x8 form keeps a float32 fill, which LiteRT refuses
    _row("PADV2", Rule.SAME_SCALE, 2, form16=Form16.NONE, float_inputs=(0, 2), kernel=fk.padv2, folds=True,
         fill_slot=2),
    _row("SOFTMAX", Rule.FIXED, 2, uint8=True, int8_to_int16=True, fixed=(1.0 / 256.0, -128),
         fixed16=(1.0 / 32768.0, 0), kernel=fk.softmax, requant=r.softmax, requant16=r.softmax16,
         least_input_scale=qm.softmax_least_input_scale),
    _row("LOGISTIC", Rule.FIXED, 2, hoists=True, uint8=True, fixed=(1.0 / 256.0, -128), fixed16=(1.0 / 32768.0, 0), kernel=fk.logistic,
         lut=qm.logistic_float32, requant=r.lookup_table, requant16=r.logistic_tanh16),
    _row("TANH", Rule.FIXED, 2, hoists=True, uint8=True, fixed=(1.0 / 128.0, 0), fixed16=(1.0 / 32768.0, 0), kernel=fk.tanh,
         lut=qm.tanh_float32, requant=r.lookup_table, requant16=r.logistic_tanh16),
    # int16 → int16: v2 (TF 2.21)
    _row("QUANTIZE", Rule.QUANT, 1, uint8=True, int16_version=2, requant=r.requantize, version=r.quantize_version),
    _row("DEQUANTIZE", Rule.QUANT, 2),  # to float32 at a model output only (`run`: the float boundary)
    _row("FAKE_QUANT", Rule.QUANT, 1, kernel=fk.fake_quant, folds=True, dropped_after_legalize=True),
    _row("TRANSPOSE", Rule.SAME_SCALE, 2, moves_elements=True, uint8=True, float_inputs=(0,), kernel=fk.transpose, folds=True,
         layout="transpose", version=r.transpose_version),
    # TF 2.21: version 3 in int8 and 16x8 (a Bidirectional LSTM's backward half reverses the time axis)
    _row("REVERSE_V2", Rule.SAME_SCALE, 3, float_inputs=(0,), kernel=fk.reverse_v2, folds=True),
    _row("SPACE_TO_DEPTH", Rule.SAME_SCALE, 2, form16=Form16.NONE, kernel=fk.space_to_depth, folds=True),
    _row("DEPTH_TO_SPACE", Rule.SAME_SCALE, 2, moves_elements=True, form16=Form16.NONE, kernel=fk.depth_to_space, folds=True),
    # int32/int64 output: no parameters; TF 2.21 has no 16x8 form, LiteRT no int16 kernel
    _row("ARG_MAX", Rule.FREE, 2, form16=Form16.NONE, uint8=True, index_output=True, float_inputs=(0,),
         kernel=fk.arg_max),
    _row("GATHER", Rule.SAME_SCALE, 2, uint8=True, int32_shapes=True, float_inputs=(0,), kernel=fk.gather,
         folds=True),
    _row("SPACE_TO_BATCH_ND", Rule.SAME_SCALE, 2, float_inputs=(0,), kernel=fk.space_to_batch_nd),
    _row("BATCH_TO_SPACE_ND", Rule.SAME_SCALE, 2, float_inputs=(0,), kernel=fk.batch_to_space_nd),
    # sequence ops with VARIABLE state tensors (the activation, LSTM output and cell states): `run` executes
    # their int8 forms (int16 state); the converter writes the LSTM of a Keras LSTM layer (TF 2.21: version 1)
    _row("SVDF", Rule.FREE, 3, form16=Form16.NONE, made=Made.OTHERS, float_inputs=(0,), requant=rs.svdf),
    _row("UNIDIRECTIONAL_SEQUENCE_LSTM", Rule.FREE, 1, form16=Form16.NONE, float_inputs=(0,),
         kernel=fk.unidirectional_sequence_lstm, state_slots=(rs.LSTM_OUTPUT_STATE, rs.LSTM_CELL_STATE),
         state_params=rs.lstm_operands, requant=rs.unidirectional_sequence_lstm),
    # in other converters' files only (the frontend makes RESHAPE of an ExpandDims and folds a Shape)
    _row("EXPAND_DIMS", Rule.SAME_SCALE, 1, moves_elements=True, made=Made.OTHERS, uint8=True, float_inputs=(0,)),
    _row("SHAPE", Rule.FREE, 1, made=Made.OTHERS, uint8=True, index_output=True, float_inputs=(0,)),
    # TF 2.21's post-training quantizer keeps TILE same-scale, v3 in int8 and 16x8 (LiteRT 2.3's reference
    # resolver registers v1-2 only), and writes CAST (after ARG_MAX: int64 -> float32, int32 -> uint8) but
    # no 16x8 CAST ("Quantization to 16x8-bit not yet supported for op: 'CAST'"); both kernels copy or
    # convert the raw values, whatever the parameters (measured)
    _row("TILE", Rule.SAME_SCALE, 3, made=Made.OTHERS, uint8=True, int32_shapes=True, any_type=True,
         float_inputs=(0,)),
    _row("CAST", Rule.RAW, 1, made=Made.OTHERS, form16=Form16.NONE, any_type=True),
    # custom ops `run` executes (the frontend writes any unknown op as CUSTOM, whose node names no row):
    # the SSD detector's post-processing, float32 in and out, as TF 2.21 writes it (version 1)
    _row("TFLite_Detection_PostProcess", Rule.RAW, 1, made=Made.OTHERS, form16=Form16.NONE, custom=True),
])

# The fused_activation_function values a kernel clamps to (kernel_util.cc).
CLAMPS = ("NONE", "RELU", "RELU6", "RELU_N1_TO_1")
# hard-swish's gate relu6(x + 3): the ADD's fused activation once RELU6 has fused into it
HARD_SWISH_GATE = TABLE["RELU6"].activation
# PReLU's halves relu(x) and relu(-x): a RELU op, or MUL(x, -1)'s fused activation
PRELU_GATE = TABLE["RELU"].activation


# A TFLite custom op (--allow-custom-ops): no row; it stays float32 between DEQUANTIZE and QUANTIZE,
# as TensorFlow writes it, and its node's attrs hold custom_code and custom_options.
CUSTOM = "CUSTOM"


def is_custom(op: str) -> bool:
    """``op`` is a TFLite custom op (its custom code names it); the converter's graph holds it as
    CUSTOM, and only ``run`` looks its custom code up (rows with ``custom``)."""
    return op == CUSTOM


def custom_row(builtin: str, custom_code: str | None) -> OpRow | None:
    """The row of a file's custom operator that ``run`` executes, filed under its custom code."""
    r_ = TABLE.get(custom_code) if builtin == CUSTOM and custom_code is not None else None
    return r_ if r_ is not None and r_.custom else None


def pool_fill(op: str, fill: Any) -> bool:
    """``fill``, the constant in ``op``'s fill slot, pads a max (min) pool: -inf (+inf), or ±FLT_MAX,
    the value TensorFlow's converter writes for an infinity. Such a value has no int8 form; the
    padded tensor takes its input's range and the fill its lowest (highest) integer."""
    r_ = TABLE.get(op)
    if r_ is None or r_.fill_slot is None:
        return False
    v = np.asarray(fill, np.float32).reshape(-1)
    return v.size == 1 and bool(np.abs(v[0]) >= np.finfo(np.float32).max)


def row(op: str) -> OpRow | None:
    """The row of ``op``, or None for an op qconvert does not know."""
    return TABLE.get(op)


def float_operands(op: str, inputs: Sequence[str]) -> list[int]:
    """Operand slots of ``op`` that carry float activations (not shapes, axes, weights)."""
    r_ = TABLE.get(op)
    if r_ is None or r_.float_inputs is None:
        return list(range(len(inputs)))
    return [i for i in r_.float_inputs if i < len(inputs)]


def requant(op: str, inputs: Sequence[Operand | None], output: Operand, options: Mapping[str, Any],
            index: int = 0) -> Requant | None:
    """THE requantization function: what TFLite's int8 kernel of ``op`` derives in Prepare from
    its tensors (the converter stores it, ``dump`` recomputes it to check a file). None for an
    op that neither rescales nor clamps. ValueError when the scales are out of the kernel's reach."""
    act = str(options.get("fused_activation_function", "NONE") or "NONE")
    r_ = TABLE.get(op)
    # 16x8: the int16 kernel's recipe where it has its own (an int8 input makes it the int8 kernel, as
    # SOFTMAX int8 → int16 in TFLite Micro's files)
    first = inputs[0] if inputs else None
    int16 = output.dtype == "int16" and (first is None or first.dtype in ("int16", ""))
    if r_ is None:
        recipe = None
    elif int16:  # only a form `run` executes has a record (RSQRT's and GELU's int8 tables mean nothing there)
        recipe = (r_.requant16 or r_.requant) if r_.form16 is Form16.RUN else None
    else:
        recipe = r_.requant
    if recipe is None and act == "NONE":
        return None
    bounds = {"int16": (-32768, 32767), "uint8": (0, 255), "int32": (-2**31, 2**31 - 1)}.get(output.dtype, (-128, 127))
    lo, hi = qm.activation_range(act, output.s, output.zp, *bounds) if act in CLAMPS else bounds
    parts = recipe(r_, inputs, output, options) if recipe is not None else {}
    lo, hi = parts.get("clamp", (lo, hi))
    return Requant(op_index=index, builtin=op, act_min=int(lo), act_max=int(hi),
                   left_shift=int(parts.get("left_shift", 0)),
                   pairs=_int_pairs(parts.get("pairs", [])),
                   per_channel=bool(parts.get("per_channel", False)), table=parts.get("table"),
                   wide=parts.get("wide"))


def _int_pairs(pairs: Sequence[tuple[Any, Any]]) -> list[tuple[int, int]]:
    """A recipe's ``(multiplier, shift)`` pairs as Python ints (numpy integers converted)."""
    if isinstance(pairs, IntPairs):
        return list(pairs)
    return [(int(a), int(b)) for a, b in pairs]


def float_version(op: str, options: Mapping[str, Any], operands: Sequence[bool] = ()) -> int:
    """The version TensorFlow writes for the float form of ``op`` (float32 inputs and weights, as
    in its dynamic-range and float16 files): 1 unless the row's ``float_version`` says otherwise.
    ``operands``: whether each operand slot is given (an optional bias)."""
    r_ = TABLE.get(op)
    return r_.float_version(options, operands) if r_ is not None and r_.float_version is not None else 1


def uint8_version(op: str, options: Mapping[str, Any], operands: Sequence[bool] = ()) -> int:
    """The version TensorFlow writes for the uint8 form of ``op`` (``inference_type=tf.uint8``):
    TFLite's version rules give uint8 the float form's version (1, or higher only for options such
    as FULLY_CONNECTED's keep_num_dims: 5), QUANTIZE and DEQUANTIZE 1 (measured on TF 2.21)."""
    r_ = TABLE.get(op)
    if r_ is not None and r_.rule is Rule.QUANT:
        return 1
    return float_version(op, options, operands)


def int8_version(op: str, operands: Callable[[], tuple[Sequence[Operand | None], Operand]],
                 options: Mapping[str, Any]) -> int:
    """The version TensorFlow writes for the int8 form of ``op`` (1 for an op not in the table;
    the row's ``int4_version`` when its weights are INT4, as TF 2.21 writes for 4-bit QAT weights;
    its ``int16_version`` when its output is int16, where TF's 16x8 file differs from int8).
    ``operands()`` gives (inputs, output), asked for only when the version depends on them."""
    r_ = TABLE.get(op)
    if r_ is None:
        return 1
    if r_.int16_version is None and r_.int4_version is None and r_.version is None:
        return r_.int8_version
    ins, out = operands()
    if r_.int16_version is not None and out.dtype == "int16" and r_.version is None:
        return r_.int16_version
    slot = r_.operand_slots[1]
    if r_.int4_version is not None and slot < len(ins) and ins[slot] is not None \
            and ins[slot].dtype == "int4":  # type: ignore[union-attr]
        return r_.int4_version
    return r_.version(r_, ins, out, options) if r_.version is not None else r_.int8_version
