"""Requantization recipes: for each op that rescales, what TFLite's int8 kernel computes in
Prepare from its tensors' float32 scales (the formulas are in ``qconvert.quant.multipliers``).

A recipe takes the op's row, its input operands (``None`` for an absent optional input),
its output operand and its options, and returns the parts of a ``Requant`` record it
decides: ``pairs``, and where they apply ``per_channel``, ``left_shift``, ``wide``,
``table`` and a ``clamp`` that replaces the fused activation's.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from qconvert import quant as qm
from qconvert.quant.int16_params import logistic_tanh_int16_params, softmax_int16_params
from qconvert.quant.requant import Operand

Inputs = Sequence["Operand | None"]
Parts = dict[str, Any]


def _input(ins: Inputs, slot: int) -> Operand:
    if slot >= len(ins) or ins[slot] is None:
        raise ValueError(f"input {slot} is missing")
    return ins[slot]  # type: ignore[return-value]


def _weights(row: Any, ins: Inputs) -> Operand:
    w = _input(ins, row.operand_slots[1])
    if not w.scale:
        raise ValueError(f"weights '{w.name}' have no quantization")
    return w


def convolution(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV: one pair per output channel (the weight's
    quantized axis), per-tensor weights included."""
    w = _weights(row, ins)
    channels = w.shape[row.weight_axis]
    x = _input(ins, row.operand_slots[0])
    return {"pairs": qm.conv_requant(x.s, w.scale, out.s, channels, legacy_uint8=x.dtype == "uint8"),
            "per_channel": True}


def fully_connected(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """One pair (per-tensor weights) or one per channel, and the binary64 factors of LiteRT's
    reference kernel (the wide flag)."""
    w = _weights(row, ins)
    x = _input(ins, 0)
    bias = ins[2] if len(ins) > 2 else None
    return {"pairs": qm.fully_connected_requant(x.s, w.scale, out.s, bias.s if bias is not None else None),
            "per_channel": len(w.scale) > 1, "wide": qm.fully_connected_effective_scales(x.s, w.scale, out.s)}


def batch_matmul(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """One pair: QuantizeMultiplier(double(float32(lhs · rhs)) / double(out)), the convolution
    multiplier without a bias (batch_matmul.cc Prepare, int8 and int16 alike)."""
    return {"pairs": qm.fully_connected_requant(_input(ins, 0).s, _input(ins, 1).s, out.s)}


def _bounds(out: Operand) -> tuple[int, int]:
    """The output's integer range: int16 (16x8), uint8 (older TFLite files) or int8."""
    return {"int16": (-32768, 32767), "uint8": (0, 255)}.get(out.dtype, (-128, 127))


def add_sub(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    p = qm.add_sub_requant(_input(ins, 0).s, _input(ins, 1).s, out.s, row.name == "SUB")
    return {"pairs": [p["input1"], p["input2"], p["output"]], "left_shift": int(p["left_shift"])}  # type: ignore[arg-type]


def add_sub16(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """int16 ADD / SUB with ``pot_scale_int16`` false (what TensorFlow writes): the int8 recipe
    with left shift 15 (add.cc / sub.cc Prepare)."""
    if options.get("pot_scale_int16", True):
        raise ValueError("an int16 ADD/SUB with pot_scale_int16 true takes power-of-two scales; qconvert "
                         "writes pot_scale_int16 false")
    p = qm.add_sub_requant(_input(ins, 0).s, _input(ins, 1).s, out.s, row.name == "SUB", left_shift=15)
    return {"pairs": [p["input1"], p["input2"], p["output"]], "left_shift": 15}


def mul(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    return {"pairs": [qm.mul_requant(_input(ins, 0).s, _input(ins, 1).s, out.s)]}


def div(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    return {"pairs": [qm.div_requant(_input(ins, 0).s, _input(ins, 1).s, out.s)]}


def div_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """DIV: version 2 when its operands broadcast over more than 4 dimensions, else 1 (TFLite's
    op_version rules; int8 v1 measured on TF 2.21)."""
    a, b = _input(ins, 0).shape, _input(ins, 1).shape
    return 2 if tuple(a) != tuple(b) and max(len(a), len(b)) > 4 else row.int8_version


def requantize(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """QUANTIZE int8 → int8."""
    return {"pairs": [qm.quantize_requant(_input(ins, 0).s, out.s)]}


def mean(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """Prepare's pair; the kernel folds 1/n in at Eval (``qm.fold_mean_multiplier``)."""
    x = _input(ins, 0)
    n = int(np.prod(x.shape)) // max(1, int(np.prod(out.shape))) if x.shape else 1
    m = qm.mean_requant(x.s, x.zp, out.s, out.zp, max(n, 1))
    return {"pairs": [(m.multiplier, m.shift)]}


def sum_(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """SUM (reduce.cc ``PrepareMeanOrSum``): ``QuantizeMultiplier(double(in) / double(out))``;
    the kernel sums ``x - in_zp`` and rescales, with no 1/n fold."""
    x = _input(ins, 0)
    return {"pairs": [qm.quantize_multiplier(float(np.float32(x.s)) / float(np.float32(out.s)))]}


def relu(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """Standalone RELU / RELU6 / RELU_N1_TO_1: the ratio, and the activation's own clamp."""
    return {"pairs": [qm.relu_requant(_input(ins, 0).s, out.s)],
            "clamp": qm.activation_range(row.activation, out.s, out.zp, *_bounds(out))}


def leaky_relu(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """LEAKY_RELU (activations.cc ``LeakyReluPrepare``): two pairs, identity ``in / out`` and
    alpha ``in·alpha / out``, each computed in FLOAT32 and widened. Eval: ``x - in_zp`` through
    the identity pair where it is ≥ 0, else the alpha pair, plus ``out_zp``, clamped."""
    s_in, s_out = np.float32(_input(ins, 0).s), np.float32(out.s)
    alpha = np.float32(options.get("alpha", 0.2))
    identity = float(np.float32(s_in / s_out))
    scaled = float(np.float32(np.float32(s_in * alpha) / s_out))
    return {"pairs": [qm.quantize_multiplier(identity), qm.quantize_multiplier(scaled)]}


def prelu(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """PRELU (activations.cc ``PreluPrepare``): identity ``in / out`` and alpha
    ``in·alpha / out``, both in double. Eval: ``x - in_zp`` through the identity pair where it
    is ≥ 0, else ``(x - in_zp)·(alpha - alpha_zp)`` through the alpha pair; plus ``out_zp``."""
    x, a = _input(ins, 0), _input(ins, 1)
    return {"pairs": [qm.quantize_multiplier(x.s / out.s), qm.quantize_multiplier(x.s * a.s / out.s)]}


def hard_swish(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """HARD_SWISH: the 256-entry table of TFLite's reference int8 kernel (table flag)."""
    x = _input(ins, 0)
    return {"table": qm.hard_swish_table(x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def squared_difference(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """SQUARED_DIFFERENCE: the two input pairs and the output pair, left shift 7."""
    return {"pairs": qm.squared_difference_requant(_input(ins, 0).s, _input(ins, 1).s, out.s), "left_shift": 7}


def abs_(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """ABS (elementwise.cc GenericPrepare): ``QuantizeMultiplier(in / out)``, the ratio in float32.
    The kernel skips the multiplication when the two scales are equal, where the pair is (2^30, 1),
    which gives every input back exactly. int16: both zero points must be 0."""
    x = _input(ins, 0)
    if out.dtype == "int16":
        _zero_points_zero(ins, out)
    return {"pairs": [qm.quantize_multiplier(float(np.float32(np.float32(x.s) / np.float32(out.s))))]}


def rsqrt(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """RSQRT: the int8 kernel's 256 outputs (table flag)."""
    x = _input(ins, 0)
    return {"table": qm.rsqrt_table(x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def log_(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """LOG int8 (elementwise.cc LogLUTPrepare): the 256-entry table of ``logf``, an input ``<= 0``
    giving the output's lowest value."""
    x = _input(ins, 0)
    low = float(np.float32(np.float32(-128 - int(out.zp)) * np.float32(out.s)))
    return {"table": qm.activation_table(qm.log_float32(low), x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def sqrt(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """SQRT int8: the kernel's 256 outputs (it computes them in float32 from the two scales)."""
    x = _input(ins, 0)
    return {"table": qm.sqrt_table(x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def lut16(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """EXP / LOG int16: LiteRT's kernel builds its 513-entry table from the two scales in Prepare
    (``qm.activation_table16``), as ``run`` does; the record holds the clamp only."""
    _zero_points_zero(ins, out)
    return {"clamp": (-32768, 32767)}


def gelu(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """GELU: the reference kernel's 256-entry table of its erfc (or, ``approximate``, tanh) form."""
    x = _input(ins, 0)
    transform = qm.gelu_approximate_float32 if options.get("approximate") else qm.gelu_float32
    return {"table": qm.activation_table(transform, x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def gelu16(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """GELU int16: LiteRT's kernel builds its 513-entry table from the two scales in Prepare
    (``qm.activation_table16``), as ``run`` does; the record holds the clamp only."""
    _zero_points_zero(ins, out)
    return {"clamp": (-32768, 32767)}


def softmax(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    beta = options.get("beta")
    return {"pairs": [qm.softmax_requant(_input(ins, 0).s, 1.0 if beta is None else float(beta))]}


def _zero_points_zero(ins: Inputs, out: Operand) -> Operand:
    x = _input(ins, 0)
    if x.zp or out.zp:
        raise ValueError(f"int16 input zero point {x.zp} / output {out.zp}: the int16 kernel takes 0")
    return x


def softmax16(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """int16 SOFTMAX (SoftmaxPrepare): one pair, ``input_scale * beta / (10 / 65535)``; the
    kernel's exp and 1/(1+x) tables are constants of the kernel, not of the model."""
    beta = options.get("beta")
    x = _zero_points_zero(ins, out)
    return {"pairs": [softmax_int16_params(x.s, 1.0 if beta is None else float(beta))]}


def logistic_tanh16(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """int16 LOGISTIC / TANH (SigmoidPrepare / TanhPrepare): one pair, (input_multiplier,
    input_left_shift) that bring the input to the kernel's table resolution."""
    x = _zero_points_zero(ins, out)
    return {"pairs": [logistic_tanh_int16_params(x.s, row.name)]}


def lookup_table(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """LOGISTIC / TANH: the reference kernel's 256-entry int8 table of the row's float32
    function (``row.lut``)."""
    x = _input(ins, 0)
    if row.lut is None:
        raise ValueError(f"{row.name}: its row names no table function (lut)")
    if out.dtype == "uint8":  # TFLite's older uint8 kernel: a table over [0, 255]
        return {"table": qm.activation_table(row.lut, x.s, x.zp, out.s, out.zp, "uint8"), "clamp": (0, 255)}
    return {"table": qm.activation_table(row.lut, x.s, x.zp, out.s, out.zp), "clamp": (-128, 127)}


def resize_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """RESIZE_NEAREST_NEIGHBOR int8: version 2, 3 with align_corners or half_pixel_centers
    (measured on TF 2.21)."""
    return 3 if options.get("align_corners") or options.get("half_pixel_centers") else row.int8_version


def resize_bilinear_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """RESIZE_BILINEAR int8: version 2, 3 with half_pixel_centers (TFLite's op_version rules)."""
    return 3 if options.get("half_pixel_centers") else row.int8_version


def conv_2d_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """CONV_2D int8: version 3, 6 for a grouped conv (filter input channels < input channels)."""
    x, w = _input(ins, 0), _input(ins, 1)
    return 6 if len(x.shape) == 4 and len(w.shape) == 4 and w.shape[3] != x.shape[3] else row.int8_version


def transpose_conv_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """TRANSPOSE_CONV int8: version 2, 3 with a bias, 4 with a fused activation (measured on TF 2.21)."""
    if options.get("fused_activation_function", "NONE") not in (None, "NONE"):
        return 4
    return 3 if len(ins) > 3 and ins[3] is not None else row.int8_version


def transpose_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """TRANSPOSE: version 6 above 5 dimensions, 4 on 5 (int8), else the row's (TFLite's op_version rules;
    a 6-D patch extraction measured on TF 2.21)."""
    rank = len(_input(ins, 0).shape)
    if rank > 5:
        return 6
    return 4 if rank > 4 and out.dtype != "int16" else row.int8_version


def fully_connected_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """FULLY_CONNECTED int8: version 4, 5 with keep_num_dims (TFLite's op_version rules)."""
    return 5 if options.get("keep_num_dims") else row.int8_version


# float forms (dynamic-range and float16 files): (options, operands given) -> version, TFLite's op_version rules
def fully_connected_float_version(options: Mapping[str, Any], operands: Sequence[bool]) -> int:
    """FULLY_CONNECTED float: version 1, 5 with keep_num_dims (measured on TF 2.21)."""
    return 5 if options.get("keep_num_dims") else 1


def depthwise_float_version(options: Mapping[str, Any], operands: Sequence[bool]) -> int:
    """DEPTHWISE_CONV_2D float: version 1, 2 with a dilation."""
    return 2 if options.get("dilation_h_factor", 1) != 1 or options.get("dilation_w_factor", 1) != 1 else 1


def transpose_conv_float_version(options: Mapping[str, Any], operands: Sequence[bool]) -> int:
    """TRANSPOSE_CONV float: version 1, 3 with a bias, 4 with a fused activation."""
    if options.get("fused_activation_function", "NONE") not in (None, "NONE"):
        return 4
    return 3 if len(operands) > 3 and operands[3] else 1


def quantize_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """QUANTIZE: version 1 at a model boundary (from float32 or uint8, to uint8) and int8 → int8;
    2 for an int16 requantize (measured on TF 2.21's 16x8 files: the float32 → int16 and uint8 → int16
    QUANTIZE after an input are version 1)."""
    src = ins[0].dtype if ins and ins[0] is not None else "float32"
    if src in ("float32", "uint8") or out.dtype == "uint8":
        return 1
    return row.int16_version if out.dtype == "int16" else row.int8_version


def mul_version(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> int:
    """MUL is version 3 when its rescale factor in1·in2/out is at least 1 (float32)."""
    a, b, o = (np.float32(t.s) for t in (_input(ins, 0), _input(ins, 1), out))
    return 3 if np.float32(a * b) / o >= 1.0 else row.int8_version
