"""The stages this package holds: ``quantize`` (the int8 graph) and ``dynamic-range``
(``--activations float``, ``--weights int4 --block-size N``: in place of calibrate, prepare and
quantize, weights only)."""

from __future__ import annotations

from qconvert.ir.passes import Stage
from qconvert.quantize_pass.back_to_back import drop_back_to_back_fake_quant
from qconvert.quantize_pass.blockwise import blockwise_weights
from qconvert.quantize_pass.constants import quantize_constants
from qconvert.quantize_pass.dynamic_range import (
    drop_zero_bias,
    float16_constants,
    float_versions,
    hybrid_weights,
)
from qconvert.quantize_pass.finalize import (
    assign_versions,
    check_int8,
    int16_options,
    requant_records,
    tidy_names,
    write_absent_bias,
)
from qconvert.quantize_pass.fold_ops import (
    float_op_constants,
    fold_quantized_ops,
    fold_requantize,
    fuse_quantized_activation,
)
from qconvert.quantize_pass.graph_io import detection_output_shapes, quantize_io, rename_io
from qconvert.quantize_pass.regroup import regroup_splits
from qconvert.quantize_pass.share import share_constants
from qconvert.quantize_pass.uint8 import to_uint8

QUANTIZE = Stage("quantize", "quantize_pass", "DQ→op→Q ⇒ int8 op; int8/int32 constants; int8 graph I/O; uint8 models; equal constants once; "
                 "versions; multiplier/shift records",
                 (drop_back_to_back_fake_quant, float_op_constants, quantize_constants, fold_quantized_ops,
                  fold_requantize, fuse_quantized_activation, regroup_splits, quantize_io, rename_io, detection_output_shapes,
                  tidy_names,
                  check_int8, to_uint8, share_constants, assign_versions, int16_options, requant_records,
                  write_absent_bias))

DYNAMIC_RANGE = Stage("dynamic-range", "quantize_pass", "activations float: equal constants once; --activations float (int8 weights of "
                      "hybrid ops, or float16 constants), --block-size (FULLY_CONNECTED weights int4 in blocks "
                      "along the input dimension, FLOAT16 scales)",
                      (share_constants, blockwise_weights, drop_zero_bias, hybrid_weights, float16_constants, float_versions,
                       write_absent_bias))
