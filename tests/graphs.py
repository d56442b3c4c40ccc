"""Tiny IR graphs built by hand for pass-level tests (no TensorFlow needed)."""

from __future__ import annotations

import numpy as np

from qconvert.ir import Graph, Node, QuantParams, Tensor


def graph_with_input(shape=(1, 4, 4, 3), name="x") -> Graph:
    g = Graph()
    g.add_tensor(Tensor(name, "float32", tuple(shape)))
    g.inputs = [name]
    g.input_names = [name]
    return g


def op(g: Graph, op_name: str, inputs: list[str], out: str, shape, **attrs) -> str:
    g.add_tensor(Tensor(out, "float32", tuple(shape)))
    g.add_node(Node(op_name, list(inputs), [out], dict(attrs), name=out))
    return out


def const(g: Graph, name: str, value) -> str:
    value = np.asarray(value)
    g.add_tensor(Tensor(name, value.dtype.name, tuple(value.shape), value))
    return name


def fake_quant(g: Graph, x: str, lo: float, hi: float, out: str, narrow: bool = False) -> str:
    mn = const(g, f"{out}/min", np.float32(lo))
    mx = const(g, f"{out}/max", np.float32(hi))
    shape = g.tensors[x].shape
    return op(g, "FakeQuantWithMinMaxVars", [x, mn, mx], out, shape, num_bits=8, narrow_range=narrow)


def per_tensor(scale: float, zp: int) -> QuantParams:
    return QuantParams((scale,), (zp,))
