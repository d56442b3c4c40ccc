"""The ``inputs`` stage: graph inputs get their int8 parameters.

    input ──▶ op        ⇒        input ──▶ Q(range) ──▶ DQ ──▶ op

The range comes from ``--inputs-range`` and is turned into parameters the way
TensorFlow's converter turns ``quantized_input_stats`` into them (signed domain; unsigned
under ``--inference-type uint8``).
An input whose every reader is a FakeQuant keeps the FakeQuant's range instead,
as in TensorFlow; a range given for it is reported as ignored.
"""

from __future__ import annotations

import math
from typing import Mapping

from qconvert.errors import ConversionError, UsageError
from qconvert.ir import Graph
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after
from qconvert.quant import input_range_params, input_range_params_uint8, int16_range_params, signed_range_params

_FAKE_QUANTS = {"FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel"}


def resolve_ranges(graph: Graph, ranges: Mapping[str | None, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """Match ``--inputs-range`` entries to graph inputs; a nameless range needs a single input."""
    out: dict[str, tuple[float, float]] = {}
    for name, (lo, hi) in ranges.items():
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise UsageError(f"--inputs-range {name or ''}: MIN and MAX must be finite numbers, got {lo},{hi}")
        if not lo < hi:
            raise UsageError(f"--inputs-range {name or ''}: MIN must be less than MAX, got {lo},{hi}")
        if name is None:
            if len(graph.inputs) != 1:
                raise UsageError(
                    f"the graph has {len(graph.inputs)} inputs ({', '.join(graph.inputs)}); "
                    f"give each range a name: --inputs-range NAME=MIN,MAX"
                )
            name = graph.inputs[0]
        if name not in graph.inputs:
            raise UsageError(
                f"--inputs-range names '{name}', which is not a graph input; inputs are: {', '.join(graph.inputs)}"
            )
        out[name] = (float(lo), float(hi))
    return out


def set_input_ranges(graph: Graph, ctx: Context) -> bool:
    """Ranges from ``ctx.options``: ``input_ranges``, ``precision.default_ranges``; with calibration
    data an input with no range is left to calibration (the ``calibrate`` stage)."""
    ranges = ctx.options.input_ranges
    default = ctx.options.precision.default_ranges
    # 16-bit activation FakeQuants make the graph a 16x8 one, from its inputs on
    ctx.qat16 = any(n.op in _FAKE_QUANTS and int(n.attrs.get("num_bits", 8)) == 16 for n in graph)
    if ctx.options.precision.dynamic_range:  # activations stay float
        for name in ranges:
            ctx.note(f"--inputs-range {name or ''}: not used; with {ctx.options.precision.dynamic_range_flag} "
                     f"the activations stay float")
        return False
    calibrating = ctx.calibration is not None
    changed = False
    named = resolve_ranges(graph, ranges)
    for name in graph.inputs:
        readers = graph.consumers(name)
        if readers and all(n.op in _FAKE_QUANTS and n.inputs[0] == name for n in readers):
            if name in named:
                ctx.note(
                    f"input '{name}': the FakeQuant '{readers[0].name}' after it sets its range; "
                    f"--inputs-range {name}={named[name][0]:g},{named[name][1]:g} is ignored (as in TensorFlow)"
                )
            continue
        if name not in named and default is not None:
            ctx.note(f"input '{name}' has no range: --default-ranges {default[0]:g},{default[1]:g} used")
            insert_qdq_after(graph, name, signed_range_params(*default), Origin.DEFAULT_RANGE)
            changed = True
            continue
        if name not in named and calibrating:
            continue
        if name not in named:
            raise ConversionError(
                f"input '{name}' has no range and no FakeQuant after it; pass --inputs-range {name}=MIN,MAX "
                f"(the float range of the data you feed, e.g. -1,1), or --calibration-data for a float graph"
            )
        lo, hi = named[name]
        if ctx.activation_bits == 16:  # symmetric: the int16 kernels take zero point 0
            m = max(abs(lo), abs(hi))
            insert_qdq_after(graph, name, int16_range_params(-m, m, legacy_float_scale=False), Origin.INPUT_RANGE)
        elif ctx.options.precision.inference_type == "uint8":  # TF's stats in the unsigned domain
            insert_qdq_after(graph, name, input_range_params_uint8(lo, hi), Origin.INPUT_RANGE)
        else:
            insert_qdq_after(graph, name, input_range_params(lo, hi), Origin.INPUT_RANGE)
        changed = True
    return changed
