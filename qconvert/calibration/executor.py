"""A float32 numpy executor for the TFLite-level IR, used to calibrate float graphs.

Kernels are the op table's (``qconvert.ops.float_kernels``, shared with constant folding).
It runs the graph as it stands after the ``fuse`` stage (bias adds, BatchNorm
and activations fused into CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED / ADD ...),
which is the float model TensorFlow's calibrator runs: the tensors it records are the
tensors of that model. QUANTIZE → DEQUANTIZE pairs (ranges from FakeQuants) are run
as quantize-then-dequantize in float, as a TFLite float model with those ops runs.

Axis 0 is the batch: the graph's shapes say 1, and a batch of B samples runs at once
(RESHAPE and SQUEEZE targets get B in place of their leading 1).

Layouts are TFLite's: NHWC activations, CONV_2D weights [O, H, W, I], DEPTHWISE_CONV_2D
weights [1, H, W, C*M], FULLY_CONNECTED weights [O, I]. Convolutions are im2col views
(``as_strided``) and one BLAS product.
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.ops import TABLE, Rule, row
from qconvert.quant import round_half_away_array

Kernel = Callable[..., np.ndarray]


def _like_output(graph: Graph, node: Node, batch: int) -> list[int]:
    """The node's output shape with the batch in place of the leading 1."""
    shape = list(graph.tensors[node.outputs[0]].shape or ())
    if batch != 1:
        if not shape or shape[0] != 1:
            raise ConversionError(
                f"node '{node.name}' ({node.op}) reshapes the batch dimension; calibrate with --calibration-batch 1")
        shape[0] = batch
    return shape


def _quant_view(graph: Graph, name: str, x: np.ndarray):  # type: ignore[no-untyped-def]
    q = graph.tensors[name].quant
    if q is None:
        raise ConversionError(f"tensor '{name}' has no quantization parameters")
    scale = np.asarray(q.scale, np.float64)
    zp = np.asarray(q.zero_point, np.float64)
    if q.axis is not None and x.ndim:
        shape = [1] * x.ndim
        shape[q.axis] = -1
        scale, zp = scale.reshape(shape), zp.reshape(shape)
    return q, scale, zp


def _quantize(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    q, scale, zp = _quant_view(graph, node.outputs[0], x)
    return np.clip(round_half_away_array(x.astype(np.float64) / scale) + zp, q.qmin, q.qmax)


def _dequantize(graph: Graph, node: Node, x: np.ndarray) -> np.ndarray:
    _, scale, zp = _quant_view(graph, node.inputs[0], x)
    return ((x - zp) * scale).astype(np.float32)


def run(graph: Graph, feeds: Mapping[str, np.ndarray],
        record: Callable[[str, np.ndarray], None] | None = None,
        fake_quant: bool = True, states: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Run the graph on ``feeds`` (graph input name → [B, ...] float32); call ``record(name,
    value)`` for every tensor computed; return the graph outputs. With ``fake_quant=False``
    QUANTIZE and DEQUANTIZE pass values through: the float model without its FakeQuants.
    ``states``: VARIABLE state tensors (an LSTM's) carried from run to run, as a TFLite
    interpreter keeps them between invocations (the samples then run in order, each from the
    state the one before left; missing entries start at zero); updated in place. Without it
    every sample starts at zero."""
    values: dict[str, np.ndarray] = {}
    batch = None
    for name in graph.inputs:
        if name not in feeds:
            raise ConversionError(f"no calibration data for input '{name}'")
        values[name] = np.ascontiguousarray(feeds[name], dtype=np.float32)
        batch = values[name].shape[0] if batch is None else batch
        if record is not None:
            record(name, values[name])
    readers = {t: len(graph.consumers(t)) for n in graph.nodes for t in n.outputs}
    outputs = set(graph.outputs)
    for node in graph.nodes:
        args = []
        for i in node.inputs:
            if not i:
                args.append(None)
            elif graph.tensors[i].variable:  # a state: carried, or None (the kernel starts at zero)
                if states is None:
                    args.append(None)
                else:
                    t = graph.tensors[i]
                    args.append(states.get(i, np.zeros(t.shape or (), np.float32)))
            elif i in values:
                args.append(values[i])
            else:
                data = graph.const(i)
                if data is None:
                    raise ConversionError(f"node '{node.name}' ({node.op}) reads '{i}', which has no value")
                args.append(data)
        if not fake_quant and (is_quantize(node) or is_dequantize(node)):
            y = np.asarray(args[0], dtype=np.float32)
        else:
            y = evaluate(graph, node, args, batch or 1)
        if isinstance(y, tuple):  # a recurrent op: its output, and its states' final values
            y, finals = y
            r = row(node.op)
            for slot, value in zip(r.state_slots if r is not None else (), finals):
                if record is not None:
                    record(node.inputs[slot], value)
                if states is not None:
                    states[node.inputs[slot]] = value[-1:]
        out = node.outputs[0]
        values[out] = y
        if record is not None and y.dtype == np.float32:
            record(out, y)
        for i in set(node.inputs):  # free what no later node reads
            if i in readers:
                readers[i] -= 1
                if readers[i] == 0 and i not in outputs:
                    values.pop(i, None)
    return {name: values[name] for name in graph.outputs}


def evaluate(graph: Graph, node: Node, args: list, batch: int) -> np.ndarray:  # type: ignore[type-arg]
    """One node on its argument values (``None`` for an absent optional input): the op
    table's float kernel; Q/DQ pairs quantize and dequantize."""
    r = row(node.op)
    if r is not None and r.kernel is not None:
        return r.kernel(node, *args)
    if is_quantize(node):
        return _quantize(graph, node, args[0])
    if is_dequantize(node):
        return _dequantize(graph, node, args[0])
    if r is not None and r.reshapes:
        return args[0].reshape(_like_output(graph, node, batch))
    runnable = sorted(k for k, v in TABLE.items() if v.kernel is not None or v.reshapes or v.rule is Rule.QUANT)
    raise ConversionError(f"node '{node.name}': {node.op} cannot be run for calibration; supported: "
                          f"{', '.join(runnable)}")
