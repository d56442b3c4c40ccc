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

from qconvert.calibration.stage import CALIBRATE
from qconvert.errors import ConversionError, InvariantError
from qconvert.fold.stage import FOLD
from qconvert.fuse.stage import FUSE
from qconvert.ir import Graph
from qconvert.ir.invariants import check_invariants
from qconvert.ir.passes import Context, Stage
from qconvert.legalize.stage import INPUTS, LEGALIZE
from qconvert.prepare.stage import PREPARE
from qconvert.quantize_pass.stage import BLOCKWISE, QUANTIZE

# each stage is declared, with its passes, in its package's stage.py
STAGES: tuple[Stage, ...] = (INPUTS, LEGALIZE, FOLD, FUSE, CALIBRATE, PREPARE, QUANTIZE)

STAGE_NAMES: tuple[str, ...] = ("import", *(s.name for s in STAGES))

# --weights int4 --block-size N: dynamic range, activations float; the stages up to fuse, then blockwise
BLOCKWISE_STAGES: tuple[Stage, ...] = (INPUTS, LEGALIZE, FOLD, FUSE, BLOCKWISE)


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
