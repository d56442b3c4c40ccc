"""schema.builder.Builder against flatbuffers.Builder, the layout it reproduces: the same object-API
calls must give the same bytes (every options table with every scalar field set, tables that share
vtables, vectors of each element type, strings, a buffer that grows, whole models)."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from qconvert.schema import writer
from qconvert.schema.builder import Builder

from test_schema import add_graph, conv_graph  # noqa: E402 (this directory is on sys.path under pytest)

OPTIONS = sorted(n for n in dir(schema) if n.endswith("OptionsT") and isinstance(getattr(schema, n), type))


def _both(pack, size: int = 1024) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    out = []
    for cls in (flatbuffers.Builder, Builder):
        b = cls(size)
        b.Finish(pack(b), file_identifier=b"TFL3")
        out.append(bytes(b.Bytes[b.Head():]))
    return out[0], out[1]


def _non_default(obj) -> None:  # type: ignore[no-untyped-def]
    """Every scalar field away from its default (so that each slot is written)."""
    for k, v in vars(obj).items():
        if isinstance(v, bool):
            setattr(obj, k, not v)
        elif isinstance(v, int):
            setattr(obj, k, v + 3)
        elif isinstance(v, float):
            setattr(obj, k, v + 0.25)


def test_options_tables_cover_the_schema():
    assert len(OPTIONS) > 100


@pytest.mark.parametrize("name", OPTIONS)
def test_every_options_table(name: str):
    defaults, changed = getattr(schema, name)(), getattr(schema, name)()
    _non_default(changed)

    def pack(b):  # type: ignore[no-untyped-def]
        first, second = defaults.Pack(b), changed.Pack(b)  # two tables, then the first's vtable again
        again = getattr(schema, name)().Pack(b)
        b.StartVector(4, 3, 4)
        for off in (again, second, first):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    ours, theirs = _both(pack)
    assert ours == theirs


def test_tensors_operators_buffers_and_growth():
    """Tensors with quantization vectors of each type, operators with options, odd-sized buffers, a
    builder that starts at 1 byte and doubles."""
    rng = np.random.default_rng(0)
    model = schema.ModelT()
    model.version, model.description = 3, "t"
    sub = schema.SubGraphT()
    sub.name, sub.tensors, sub.operators = "main", [], []
    model.buffers = [schema.BufferT()]
    for k in range(12):
        t = schema.TensorT()
        t.name, t.type, t.hasRank = f"t{k}é", k % 10, bool(k % 2)
        t.shape = rng.integers(1, 9, k % 4 + 1).astype("<i4")
        q = schema.QuantizationParametersT()
        q.scale = rng.random(k % 3 + 1).astype(np.float32)
        q.zeroPoint = rng.integers(-5, 5, k % 3 + 1).astype(np.int64)
        q.quantizedDimension = k % 2
        t.quantization = q
        buf = schema.BufferT()
        buf.data = rng.integers(0, 255, 7 * k + 1).astype(np.uint8)
        t.buffer = len(model.buffers)
        model.buffers.append(buf)
        sub.tensors.append(t)
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = k % 3, np.array([k, -1], "<i4"), np.array([k], "<i4")
        op.builtinOptionsType = schema.BuiltinOptions.AddOptions
        op.builtinOptions = schema.AddOptionsT()
        op.builtinOptions.fusedActivationFunction = k % 3
        sub.operators.append(op)
    sub.inputs, sub.outputs = np.array([0], "<i4"), [1, 2]  # a list: the element-by-element path
    model.subgraphs = [sub]
    code = schema.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version, code.customCode = 0, 0, 2, "c"
    model.operatorCodes = [code]
    model.signatureDefs = []
    ours, theirs = _both(model.Pack, size=1)
    assert ours == theirs


@pytest.mark.parametrize("make", [conv_graph, add_graph])
def test_whole_models(make, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    ours = writer.write_model(make())
    monkeypatch.setattr(writer, "Builder", flatbuffers.Builder)
    assert writer.write_model(make()) == ours
