"""The pipeline driver: stages in order, invariants checked after each.

    .pb ─import─▶ inputs ─▶ legalize ─▶ fold ─▶ prepare ─▶ quantize ─write─▶ .tflite

Each stage is a list of passes ``pass(graph) -> graph``. ``dump_after`` prints the
IR after the named stage. A broken invariant is reported with the stage and pass
that ran last, so a bug in a pass points at itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, Callable, Mapping, Sequence, TextIO

from qconvert.converter.ir import ConversionError, Graph

Pass = Callable[[Graph], Graph]
STAGES = ("import", "inputs", "legalize", "fold", "prepare", "quantize")


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
    calibration: Any = None  # prepare.calibrate.Calibration (--calibration-data, --ranges-file)


class InvariantError(ConversionError):
    pass


def stages(options: Options) -> list[tuple[str, list[Pass]]]:
    from qconvert.legalize.clamps import legalize_clamps
    from qconvert.legalize.dilated_conv import fold_dilated_conv
    from qconvert.legalize.fake_quant import legalize_fake_quant, move_reshape_above_fake_quant
    from qconvert.legalize.input_ranges import set_input_ranges
    from qconvert.legalize.tf_ops import legalize_ops
    from qconvert.prepare.calibrate import calibrate
    from qconvert.prepare.check import check_quantizable
    from qconvert.prepare.default_ranges import apply_default_ranges
    from qconvert.prepare.drop_fake_quant import drop_fake_quant
    from qconvert.prepare.fold_constants import fold_constants
    from qconvert.prepare.fuse import fold_mul_into_weights, fuse_activation, fuse_bias_add
    from qconvert.prepare.hoist_layout import hoist_layout
    from qconvert.prepare.identity_arith import remove_identity_arith
    from qconvert.prepare.propagate import propagate_quant_params
    from qconvert.quantize_pass.back_to_back import drop_back_to_back_fake_quant
    from qconvert.quantize_pass.constants import quantize_constants
    from qconvert.quantize_pass.finalize import assign_versions, check_int8, requant_metadata, tidy_names
    from qconvert.quantize_pass.fold_ops import float_op_constants, fold_quantized_ops, fold_requantize
    from qconvert.quantize_pass.io import quantize_io

    def move_reshapes(graph: Graph) -> Graph:
        move_reshape_above_fake_quant(graph)
        return graph

    set_ranges = partial(set_input_ranges, ranges=options.input_ranges, default=options.default_ranges,
                         calibrating=options.calibration is not None)

    def default_ranges(graph: Graph) -> Graph:
        if options.default_ranges is None:
            return graph
        return propagate_quant_params(apply_default_ranges(graph, options.default_ranges))
    set_ranges.__name__ = "set_input_ranges"  # type: ignore[attr-defined]

    def calibrated(graph: Graph) -> Graph:
        return calibrate(graph, options.calibration)
    return [
        ("inputs", [move_reshapes, set_ranges]),
        ("legalize", [fold_dilated_conv, legalize_fake_quant, legalize_clamps, legalize_ops]),
        ("fold", [fold_constants, hoist_layout, fold_constants, drop_fake_quant, remove_identity_arith]),
        ("prepare", [fuse_bias_add, fold_mul_into_weights, fuse_bias_add, fuse_activation, calibrated,
                     propagate_quant_params, default_ranges, check_quantizable]),
        (
            "quantize",
            [drop_back_to_back_fake_quant, float_op_constants, quantize_constants, fold_quantized_ops, fold_requantize, fuse_quantized_activation, quantize_io,
             _rename_io, tidy_names, check_int8, assign_versions, requant_metadata],
        ),
    ]


def fuse_quantized_activation(graph: Graph) -> Graph:
    """TensorFlow runs its op fusions again after quantization, so a quantized
    RELU/RELU6/RELU_N1_TO_1 right after a conv, FC, ADD, SUB or MUL whose output it
    alone reads is fused into it; the op then produces the activation's parameters."""
    from qconvert.prepare.fuse import fuse_activation

    return fuse_activation(graph)


def _rename_io(graph: Graph) -> Graph:
    from qconvert.quantize_pass.io import rename_io

    return rename_io(graph, graph.input_names, graph.output_names)


def check_invariants(graph: Graph) -> None:
    """Every tensor a node mentions exists, is produced once, and is produced before it is
    read: the node list stays in execution order through every pass (the writer relies
    on it), which also rules out cycles. One pass over the nodes."""
    tensors = graph.tensors
    produced: set[str] = set(graph.inputs)
    for node in graph.nodes:
        for name in node.inputs:
            t = tensors.get(name) if name else None
            if name and t is None:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{name}'")
            if name and t.data is None and name not in produced:  # type: ignore[union-attr]
                raise InvariantError(
                    f"node '{node.name}' ({node.op}) reads tensor '{name}' before any node produces it")
        for out in node.outputs:
            if out not in tensors:
                raise InvariantError(f"node '{node.name}' ({node.op}) refers to missing tensor '{out}'")
            if out in produced or tensors[out].data is not None:
                raise InvariantError(f"tensor '{out}' is produced twice")
            produced.add(out)
    for name in graph.outputs:
        if name not in graph.tensors:
            raise InvariantError(f"graph output '{name}' is missing")


def check_each_pass(options: Options) -> bool:
    """Invariants are checked after every stage; after every pass too with ``--debug``
    or ``QCONVERT_CHECK_EACH_PASS=1`` (the test suite sets it), so that a broken
    invariant names the pass that broke it. Per pass costs ~10% of conversion time."""
    import os

    return options.check_each_pass or os.environ.get("QCONVERT_CHECK_EACH_PASS", "") not in ("", "0")


def run(graph: Graph, options: Options) -> Graph:
    graph.input_names = list(graph.inputs)
    graph.allow_float = options.allow_float
    each_pass = check_each_pass(options)
    _maybe_dump(graph, "import", options)
    for stage, passes in stages(options):
        for p in passes:
            graph = p(graph)
            if each_pass or p is passes[-1]:
                try:
                    check_invariants(graph)
                except ConversionError as exc:
                    where = f"pass {getattr(p, '__name__', p)}" if each_pass else "rerun with --debug to name the pass"
                    raise InvariantError(f"internal error after stage '{stage}' ({where}): {exc}") from exc
        _maybe_dump(graph, stage, options)
    return graph


def _maybe_dump(graph: Graph, stage: str, options: Options) -> None:
    if stage in options.dump_after:
        import sys

        out = options.dump_to or sys.stdout
        out.write(f"// IR after stage '{stage}'\n{graph.dump()}\n")
