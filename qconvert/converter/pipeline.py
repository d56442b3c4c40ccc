"""The pipeline, declared as data: ``STAGES`` in order, each a package's passes.

    .pb ─import─▶ inputs ─▶ legalize ─▶ fold ─▶ fuse ─▶ calibrate ─▶ prepare ─▶ quantize ─write─▶ .tflite

Every pass is ``pass(graph, ctx) -> bool`` (True when it changed the graph); ``ctx`` is an
:class:`~qconvert.ir.passes.Context` holding the :class:`~qconvert.options.ConvertOptions`. ``run`` checks the
IR's invariants after each stage (after each pass with ``--debug``), so a broken invariant
names the stage, or the pass, that broke it. ``--dump-after STAGE`` prints the IR after a
stage, ``stop_before`` ends before one (``compare`` takes the float model that way, before
``calibrate``), and docs/architecture.md's stage table is this list.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Sequence, TextIO

from qconvert.calibration.stage import CALIBRATE
from qconvert.errors import ConversionError, InvariantError
from qconvert.fold.stage import FOLD
from qconvert.fuse.stage import FUSE
from qconvert.ir import Graph
from qconvert.ir.invariants import check_invariants
from qconvert.ir.passes import Context, Stage
from qconvert.legalize.stage import INPUTS, LEGALIZE
from qconvert.options import ConvertOptions
from qconvert.prepare.stage import PREPARE
from qconvert.quantize_pass.stage import DYNAMIC_RANGE, QUANTIZE

# each stage is declared, with its passes, in its package's stage.py
STAGES: tuple[Stage, ...] = (INPUTS, LEGALIZE, FOLD, FUSE, CALIBRATE, PREPARE, QUANTIZE)

STAGE_NAMES: tuple[str, ...] = ("import", *(s.name for s in STAGES))

# --activations float, --weights int4 --block-size N: dynamic range, activations float; the stages up to
# fuse, then the weights alone
DYNAMIC_RANGE_STAGES: tuple[Stage, ...] = (INPUTS, LEGALIZE, FOLD, FUSE, DYNAMIC_RANGE)


def check_each_pass(debug: bool = False) -> bool:
    """Invariants are checked after every stage; after every pass too with ``--debug``
    or ``QCONVERT_CHECK_EACH_PASS=1`` (the test suite sets it), so that a broken
    invariant names the pass that broke it. Per pass costs ~10% of conversion time."""
    return debug or os.environ.get("QCONVERT_CHECK_EACH_PASS", "") not in ("", "0")


def run(graph: Graph, options: ConvertOptions, calibration: Any = None, stop_before: str | None = None,
        dump_to: TextIO | None = None, debug: bool = False) -> tuple[Graph, Context]:
    """Run the stages on ``graph`` (edited in place); return it and the pass context (notes,
    requantization records). ``calibration``: the loaded samples and ranges (a
    :class:`~qconvert.calibration.calibrate.Calibration`) for the calibrate stage;
    ``stop_before``: a stage name to end before; ``dump_to``: where ``options.dump_after``
    prints (stdout); ``debug``: check the invariants after every pass."""
    if stop_before is not None and stop_before not in STAGE_NAMES[1:]:
        raise ValueError(f"unknown stage {stop_before!r}; stages: {', '.join(STAGE_NAMES[1:])}")
    graph.input_names = list(graph.inputs)
    ctx = Context(options=options, calibration=calibration, allow_float=options.precision.allow_float)
    each_pass = check_each_pass(debug)
    dump = (options.dump_after, dump_to or sys.stdout)
    _maybe_dump(graph, "import", dump)
    for stage in (DYNAMIC_RANGE_STAGES if options.precision.dynamic_range else STAGES):
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
        _maybe_dump(graph, stage.name, dump)
    return graph, ctx


def _maybe_dump(graph: Graph, stage: str, dump: tuple[Sequence[str], TextIO]) -> None:
    if stage in dump[0]:
        dump[1].write(f"// IR after stage '{stage}'\n{graph.dump()}\n")
