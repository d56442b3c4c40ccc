"""The ``inputs`` stage: which type each model input and output will have (``--input-type``,
``--output-type``), checked against the graph before any work is done.

    --input-type image=uint8 --output-type float32   ⇒   inputs: [uint8]   outputs: [float32, float32]

A name is the user's (a placeholder, an output node; ``NAME:0`` is ``NAME``); a type without a
name is every input (output) not named. The default is the model's activation type: int8, or
int16 in a 16x8 model. The quantize stage builds the boundary from these
(``quantize_pass/graph_io.py``).
"""

from __future__ import annotations

from typing import Mapping

from qconvert.errors import UsageError
from qconvert.ir import Graph
from qconvert.ir.passes import Context
from qconvert.options import boundary_problem


def _resolve(flag: str, types: Mapping[str | None, str], names: list[str], default: str, bits: int) -> list[str]:
    known = {n: i for i, n in enumerate(names)}
    out = [types.get(None, default)] * len(names)
    for name, t in types.items():
        if name is None:
            continue
        key = name[:-2] if name.endswith(":0") else name
        if key not in known:
            raise UsageError(f"{flag} {name}={t}: '{name}' is not a model {flag[2:-5]}; "
                             f"{flag[2:-5]}s are: {', '.join(names)}")
        out[known[key]] = t
    for name, t in types.items():
        problem = boundary_problem(flag, name, t, bits)
        if problem:
            raise UsageError(problem)
    return out


def io_types(graph: Graph, ctx: Context) -> tuple[list[str], list[str]]:
    """The type of each graph input and output, in order (the user's names are
    ``graph.input_names`` / ``graph.output_names``); a UsageError for an unknown name or a type
    the model's activations cannot have at the boundary."""
    bits = ctx.activation_bits
    default = "int16" if bits == 16 else "int8"
    p = ctx.options.precision
    ins = _resolve("--input-type", p.input_type, list(graph.input_names or graph.inputs), default, bits)
    outs = _resolve("--output-type", p.output_type, list(graph.output_names or graph.outputs), default, bits)
    if p.inference_type == "uint8":  # int8 until the quantize stage moves the whole model to uint8
        return [default] * len(ins), [default] * len(outs)
    return ins, outs


def check_io_types(graph: Graph, ctx: Context) -> bool:
    """Fail early (before calibration) on a bad ``--input-type``/``--output-type``."""
    io_types(graph, ctx)
    return False
