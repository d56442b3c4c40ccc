"""The stages this package holds: ``inputs`` (graph inputs get their int8 parameters) and
``legalize`` (TensorFlow ops become TFLite ops, FakeQuant* Q/DQ pairs)."""

from __future__ import annotations

from qconvert.ir.passes import Stage
from qconvert.legalize.clamps import legalize_clamps
from qconvert.legalize.dilated_conv import fold_dilated_conv
from qconvert.legalize.fake_quant_pairs import legalize_fake_quant, move_reshape_above_fake_quant
from qconvert.legalize.gelu import fuse_gelu
from qconvert.legalize.input_ranges import set_input_ranges
from qconvert.legalize.io_types import check_io_types
from qconvert.legalize.tf_rewrites import legalize_ops

INPUTS = Stage("inputs", "legalize", "--inputs-range → int8 parameters on graph inputs",
               (move_reshape_above_fake_quant, set_input_ranges, check_io_types))

# patterns of TF ops first (dilated convolutions, clamps, GELU), then each remaining op alone
LEGALIZE = Stage("legalize", "legalize", "TF ops → TFLite ops; FakeQuant* → QUANTIZE/DEQUANTIZE pairs; GELU",
                 (fold_dilated_conv, legalize_fake_quant, legalize_clamps, fuse_gelu, legalize_ops))
