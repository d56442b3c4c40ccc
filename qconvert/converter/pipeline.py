"""The pipeline, declared as data: ``STAGES`` in order, each a package's passes.

    .pb ─import─▶ inputs ─▶ legalize ─▶ fold ─▶ fuse ─▶ calibrate ─▶ prepare ─▶ quantize ─write─▶ .tflite

Every pass is ``pass(graph, ctx) -> bool`` (True when it changed the graph); ``ctx`` is an
:class:`~qconvert.ir.passes.Context` built from the :class:`Options`. ``run`` checks the
IR's invariants after each stage (after each pass with ``--debug``), so a broken invariant
names the stage, or the pass, that broke it. ``--dump-after STAGE`` prints the IR after a
stage, ``stop_before`` ends before one (``compare`` takes the float model that way, before
``calibrate``), and the README's pipeline table is this list.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence, TextIO

from qconvert.calibration.calibrate import calibrate
from qconvert.errors import ConversionError, InvariantError
from qconvert.fold.dedupe import dedupe_ops
from qconvert.fold.drop_fake_quant import drop_fake_quant
from qconvert.fold.fold_constants import fold_constants
from qconvert.fold.hoist_layout import hoist_layout
from qconvert.fold.identity_arith import remove_identity_arith
from qconvert.fuse.activation_patterns import fuse_hard_swish, fuse_prelu
from qconvert.fuse.into_op import (
    fold_mul_into_following_weights,
    fold_mul_into_weights,
    fuse_activation,
    fuse_add_into_fully_connected,
    fuse_bias_add,
    fuse_pad_into_conv,
)
from qconvert.fuse.reshapes import (
    fuse_reshapes_into_fully_connected,
    keep_reduced_dims,
    merge_reshapes,
    move_binary_before_reshape,
)
from qconvert.ir import Graph
from qconvert.ir.invariants import check_invariants
from qconvert.ir.passes import Context, Pass
from qconvert.legalize.clamps import legalize_clamps
from qconvert.legalize.dilated_conv import fold_dilated_conv
from qconvert.legalize.fake_quant_pairs import (
    legalize_fake_quant,
    move_reshape_above_fake_quant,
)
from qconvert.legalize.gelu import fuse_gelu
from qconvert.legalize.input_ranges import set_input_ranges
from qconvert.legalize.tf_rewrites import legalize_ops
from qconvert.prepare.default_ranges import apply_default_ranges
from qconvert.prepare.propagate import bypass_requantize_for_weighted, propagate_quant_params
from qconvert.prepare.quantizable import check_quantizable
from qconvert.quantize_pass.back_to_back import drop_back_to_back_fake_quant
from qconvert.quantize_pass.blockwise import blockwise_weights
from qconvert.quantize_pass.constants import quantize_constants
from qconvert.quantize_pass.finalize import (
    assign_versions,
    check_int8,
    int16_options,
    requant_records,
    tidy_names,
)
from qconvert.quantize_pass.fold_ops import (
    float_op_constants,
    fold_quantized_ops,
    fold_requantize,
    fuse_quantized_activation,
)
from qconvert.quantize_pass.graph_io import quantize_io, rename_io
from qconvert.quantize_pass.regroup import regroup_splits


@dataclass(frozen=True)
class Stage:
    name: str
    package: str  # where its passes live
    summary: str  # one line for --help and the README
    passes: tuple[Pass, ...]


STAGES: tuple[Stage, ...] = (
    Stage("inputs", "legalize", "--inputs-range → int8 parameters on graph inputs",
          (move_reshape_above_fake_quant, set_input_ranges)),
    Stage("legalize", "legalize", "TF ops → TFLite ops; FakeQuant* → QUANTIZE/DEQUANTIZE pairs; GELU",
          (fold_dilated_conv, legalize_fake_quant, legalize_clamps, fuse_gelu, legalize_ops)),
    Stage("fold", "fold", "constants, FakeQuant on weights (TF's float32 kernel), weight layouts, identities, "
          "repeated ops", (fold_constants, hoist_layout, fold_constants, drop_fake_quant, remove_identity_arith,
                           dedupe_ops)),
    Stage("fuse", "fuse", "zero Pad into SAME convs; Dense on N-D; ops across RESHAPEs; bias adds, BatchNorm "
          "and an input scale into weights/bias; ReLU/ReLU6/ReLU1 into the op; hard-swish; PReLU",
          (fuse_pad_into_conv, fuse_reshapes_into_fully_connected, move_binary_before_reshape,
           merge_reshapes, keep_reduced_dims, remove_identity_arith, fuse_add_into_fully_connected, fuse_bias_add,
           fold_mul_into_weights, fold_mul_into_following_weights, fuse_bias_add, fuse_activation, fuse_hard_swish,
           fuse_prelu)),
    Stage("calibrate", "calibration", "float graphs: ranges from --calibration-data / --ranges-file",
          (calibrate,)),
    Stage("prepare", "prepare", "propagate parameters (bias = in×w, same-scale, fixed-output, requantize); "
          "refuse what cannot be quantized",
          (propagate_quant_params, bypass_requantize_for_weighted, apply_default_ranges, check_quantizable)),
    Stage("quantize", "quantize_pass", "DQ→op→Q ⇒ int8 op; int8/int32 constants; int8 graph I/O; versions; "
          "multiplier/shift records",
          (drop_back_to_back_fake_quant, float_op_constants, quantize_constants, fold_quantized_ops,
           fold_requantize, fuse_quantized_activation, regroup_splits, quantize_io, rename_io, tidy_names, check_int8,
           assign_versions, int16_options, requant_records)),
)

STAGE_NAMES: tuple[str, ...] = ("import", *(s.name for s in STAGES))

# --weights int4 --block-size N: dynamic range, activations float; the stages up to fuse, then this
BLOCKWISE_STAGE = Stage("blockwise", "quantize_pass", "--block-size: FULLY_CONNECTED weights int4 in blocks along "
                        "the input dimension, FLOAT16 scales; activations float (dynamic range)",
                        (blockwise_weights,))
BLOCKWISE_STAGES: tuple[Stage, ...] = (*STAGES[:STAGE_NAMES.index("calibrate") - 1], BLOCKWISE_STAGE)


@dataclass
class Options:
    input_ranges: Mapping[str | None, tuple[float, float]] = field(default_factory=dict)
    input_shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    inputs: Sequence[str] | None = None
    outputs: Sequence[str] | None = None
    dump_after: Sequence[str] = ()
    dump_to: TextIO | None = None
    default_ranges: tuple[float, float] | None = None
    allow_float: bool = False
    check_each_pass: bool = False  # --debug
    calibration: Any = None  # calibration.calibrate.Calibration (--calibration-data, --ranges-file)
    int4_storage: str = "packed"  # 4-bit weights: "packed" INT4 (as TensorFlow) or "int8" in [-7, 7]
    low_bit_activations: str = "error"  # activation FakeQuants below 8 bits: "error", or "8bit" resolution
    weights: str = "int8"  # weights without FakeQuant: "int8", or "int4" (CONV_2D / FULLY_CONNECTED, per channel)
    block_size: int | None = None  # with weights "int4": blockwise FULLY_CONNECTED weights, float activations
    activations: str = "int8"  # "int16": TensorFlow's 16x8 mode (int16 activations, int8 weights, int64 biases)

    @property
    def dynamic_range(self) -> bool:
        """Activations stay float (blockwise weights): no ranges, no calibration, no int8 ops."""
        return self.block_size is not None


def check_each_pass(options: Options) -> bool:
    """Invariants are checked after every stage; after every pass too with ``--debug``
    or ``QCONVERT_CHECK_EACH_PASS=1`` (the test suite sets it), so that a broken
    invariant names the pass that broke it. Per pass costs ~10% of conversion time."""
    return options.check_each_pass or os.environ.get("QCONVERT_CHECK_EACH_PASS", "") not in ("", "0")


def run(graph: Graph, options: Options, stop_before: str | None = None) -> tuple[Graph, Context]:
    """Run the stages on ``graph`` (edited in place); return it and the pass context (notes,
    requantization records). ``stop_before``: a stage name to end before."""
    if stop_before is not None and stop_before not in STAGE_NAMES[1:]:
        raise ValueError(f"unknown stage {stop_before!r}; stages: {', '.join(STAGE_NAMES[1:])}")
    graph.input_names = list(graph.inputs)
    ctx = Context(options=options, allow_float=options.allow_float)
    each_pass = check_each_pass(options)
    _maybe_dump(graph, "import", options)
    for stage in (BLOCKWISE_STAGES if options.dynamic_range else STAGES):
        if stage.name == stop_before:
            break
        changed = False
        for p in stage.passes:
            changed_now = p(graph, ctx)
            changed = changed or changed_now
            # invariants: after every pass that changed the graph (each_pass), else once per stage
            if (each_pass and changed_now) or (p is stage.passes[-1] and changed):
                try:
                    check_invariants(graph)
                except ConversionError as exc:
                    where = f"pass {p.__name__}" if each_pass else "rerun with --debug to name the pass"
                    raise InvariantError(f"internal error after stage '{stage.name}' ({where}): {exc}") from exc
        _maybe_dump(graph, stage.name, options)
    return graph, ctx


def _maybe_dump(graph: Graph, stage: str, options: Options) -> None:
    if stage in options.dump_after:
        out = options.dump_to or sys.stdout
        out.write(f"// IR after stage '{stage}'\n{graph.dump()}\n")
