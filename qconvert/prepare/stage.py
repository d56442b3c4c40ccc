"""The stage this package holds: ``prepare`` (every value on the quantized path gets its int8
parameters, or the conversion says which op cannot be quantized)."""

from __future__ import annotations

from qconvert.ir.passes import Stage
from qconvert.prepare.default_ranges import apply_default_ranges
from qconvert.prepare.precision import keep_float
from qconvert.prepare.propagate import bypass_requantize_for_weighted, propagate_quant_params
from qconvert.prepare.quantizable import check_quantizable

PREPARE = Stage("prepare", "prepare", "propagate parameters (bias = in×w, same-scale, fixed-output, requantize); "
                "refuse what cannot be quantized; --keep-float islands",
                (propagate_quant_params, bypass_requantize_for_weighted, apply_default_ranges, check_quantizable, keep_float))
