"""schema.builder.Builder against flatbuffers.Builder, the layout it reproduces: the same object-API
calls must give the same bytes (every options table with every scalar field set, tables that share
vtables, vectors of each element type, strings, a buffer that grows, whole models)."""

from __future__ import annotations

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from qconvert.ir import Graph, Node, QuantParams, Signature, Tensor
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


def every_kind_graph() -> Graph:
    """What the writer packs only now and then: a custom op with options, intermediates, a blockwise
    weight, a variable, int4 and int16 tensors, an unranked tensor, an empty constant, a builtin code
    above 127, a BuiltinOptions2 table, an op of version 1 and one of version 5, extra metadata (one
    entry empty) and a signature."""
    g = Graph()
    q = QuantParams((0.5,), (3,))
    g.add_tensor(Tensor("x", "int8", (1, 4), quant=q))
    g.add_tensor(Tensor("w", "int4", (2, 4), np.array([[1, -2, 3, -4], [5, -6, 7, -8]], np.int8),
                        quant=QuantParams((0.1, 0.2), (0, 0), axis=0, qmin=-7, qmax=7, dtype="int4")))
    g.add_tensor(Tensor("bw_scales", "float32", (2, 1), np.array([[0.5], [0.25]], np.float32)))
    g.add_tensor(Tensor("bw", "int8", (2, 4), np.ones((2, 4), np.int8), blockwise=("bw_scales", 4)))
    g.add_tensor(Tensor("state", "int16", (1, 2), np.zeros((1, 2), np.int16),
                        quant=QuantParams((2.0**-12,), (0,), dtype="int16"), variable=True))
    g.add_tensor(Tensor("empty", "int32", (0,), np.zeros(0, np.int32)))
    g.add_tensor(Tensor("unranked", "float32"))
    g.add_tensor(Tensor("inter", "int16", (1, 2), quant=QuantParams((0.001,), (0,), dtype="int16")))
    for name in ("y", "z", "u", "v"):
        g.add_tensor(Tensor(name, "int8", (1, 2), quant=q))
    g.add_node(Node("FULLY_CONNECTED", ["x", "w", ""], ["y"], {"keep_num_dims": True}, name="fc", version=5))
    g.add_node(Node("CUSTOM", ["y", "bw"], ["z"], {"custom_code": "MyOp", "custom_options": (("k", "int", 3), ("s", "string", "v"))},
                    name="custom"))
    g.add_node(Node("UNIDIRECTIONAL_SEQUENCE_LSTM", ["z", "state"], ["u"], {"_intermediates": ["inter"]},
                    name="lstm", version=2))
    g.add_node(Node("STABLEHLO_CONCATENATE", ["u", "empty", "unranked"], ["v"], {"dimension": 1},
                    name="concat"))
    g.inputs, g.outputs = ["x"], ["v"]
    g.metadata = {"extra": b"\x01\x02\x03", "empty": b""}
    g.signature = Signature("serving_default", (("in", 0),), (("out", 0),))
    return g


class _AlignedBufferT(schema.BufferT):
    def Pack(self, builder):  # type: ignore[no-untyped-def]
        if self.data is not None and len(self.data):
            builder.Prep(16, len(self.data))
        return super().Pack(builder)


def _object_api(data: bytes) -> bytes:
    """The file read into the generated object API (``ModelT``) and packed again by
    ``flatbuffers.Builder``, constant data 16-byte aligned as the writer places it: the bytes the
    object API gives for the very same model."""
    model = schema.ModelT.InitFromPackedBuf(data, 0)
    for buf in model.buffers:
        buf.__class__ = _AlignedBufferT
    b = flatbuffers.Builder(1024)
    b.Finish(model.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.parametrize("make", [conv_graph, add_graph, every_kind_graph])
def test_whole_models_as_the_object_api_packs_them(make):  # type: ignore[no-untyped-def]
    """The writer packs tables itself (no TensorT, OperatorT, ...): the same bytes as the object API."""
    ours = writer.write_model(make())
    assert _object_api(ours) == ours


def test_the_kitchen_sink_graph_is_what_it_says():
    model = schema.ModelT.InitFromPackedBuf(writer.write_model(every_kind_graph()), 0)
    (sub,) = model.subgraphs
    ops = sub.operators
    assert [c.builtinCode for c in model.operatorCodes] == [9, 32, 44, 169]
    assert [c.deprecatedBuiltinCode for c in model.operatorCodes] == [9, 32, 44, 127]
    assert ops[1].customOptions is not None and ops[2].intermediates.tolist() == [sub.tensors.index(
        next(t for t in sub.tensors if t.name == b"inter"))]
    assert ops[3].builtinOptions2Type != 0 and ops[0].builtinOptionsType != 0
    assert any(t.quantization.details is not None for t in sub.tensors)
    assert any(t.isVariable for t in sub.tensors) and any(not t.hasRank for t in sub.tensors)
    assert [m.name for m in model.metadata] == [b"extra", b"empty", b"min_runtime_version"]
    assert len(model.signatureDefs) == 1


def test_table_vector_and_offsets_calls_are_the_generic_calls():
    """``table``, ``vector`` and ``offsets`` against the calls they stand for, on flatbuffers.Builder:
    fields of 1, 2, 4 and 8 bytes in any alignment, repeated vtables, vectors of 8-byte elements, a
    builder that starts at 1 byte and grows."""
    rng = np.random.default_rng(1)
    formats = {"<b": "PrependInt8Slot", "<H": "PrependUint16Slot", "<i": "PrependInt32Slot",
               "<q": "PrependInt64Slot", "<d": "PrependFloat64Slot", "<?": "PrependBoolSlot"}
    plans = []
    for k in range(40):
        data = rng.integers(-9, 9, int(rng.integers(0, 5))).astype("<i8")
        slots = sorted(rng.choice(9, int(rng.integers(0, 6)), replace=False).tolist())
        fields = [(s, f, (bool(s % 2) if f == "<?" else float(s) + 0.5 if f == "<d" else s + k % 3))
                  for s, f in zip(slots, rng.choice(list(formats), len(slots)))]
        plans.append((data, fields, k % 4 == 0))

    def generic(b):  # type: ignore[no-untyped-def]
        objects = []
        for data, fields, link in plans:
            vec = b.CreateNumpyVector(data)
            b.StartObject(10)
            for slot, fmt, value in fields:
                getattr(b, formats[fmt])(slot, value, 0)
            b.PrependUOffsetTRelativeSlot(9, vec, 0)
            if link and objects:
                b.PrependUOffsetTRelativeSlot(8, objects[-1], 0)
            objects.append(b.EndObject())
        b.StartVector(4, len(objects), 4)
        for off in reversed(objects):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def direct(b):  # type: ignore[no-untyped-def]
        objects = []
        for data, fields, link in plans:
            vec = b.vector(data.tobytes(), 8, 8)
            extra = [(8, "", objects[-1])] if link and objects else []
            given = [f for f in fields if f[2] != 0]  # as the slot methods, table takes no default
            objects.append(b.table(10, [*given, (9, "", vec), *extra]))
        return b.offsets(objects)

    theirs = flatbuffers.Builder(1)
    theirs.Finish(generic(theirs), file_identifier=b"TFL3")
    ours = Builder(1)
    ours.Finish(direct(ours), file_identifier=b"TFL3")
    assert bytes(ours.Bytes[ours.Head():]) == bytes(theirs.Bytes[theirs.Head():])


def test_enum_values_the_writer_writes_as_numbers():
    assert writer._BLOCKWISE_DETAILS == schema.QuantizationDetails.BlockwiseQuantization
    assert schema.CustomOptionsFormat.FLEXBUFFERS == 0  # the default: the writer leaves it out


def test_layout_pack_writes_what_table_writes():
    """``Builder.pack`` (a table of fields known beforehand, in one struct call) against ``Builder.table``:
    every mix of field sizes, slots given or absent, offsets, at every alignment the buffer can be at,
    with vtables shared between tables and written anew."""
    from qconvert.schema.builder import Layout

    rng = np.random.default_rng(0)
    formats = ["<b", "<B", "<?", "<h", "<H", "<i", "<I", "<f", "<q", "<Q", "<d", ""]
    values = {"<b": -5, "<B": 7, "<?": True, "<h": -300, "<H": 600, "<i": -70000, "<I": 70000, "<f": 0.5,
              "<q": -(1 << 40), "<Q": 1 << 40, "<d": 0.25}
    tables = []
    for _ in range(200):
        numfields = int(rng.integers(1, 12))
        slots = sorted(rng.choice(numfields, int(rng.integers(0, numfields + 1)), replace=False).tolist())
        tables.append((numfields, [(slot, formats[int(rng.integers(len(formats)))]) for slot in slots]))
    out = []
    for use_layout in (False, True):
        b = Builder(64)  # grows on the way
        layouts = [Layout(n, fields) for n, fields in tables] * 2  # a layout used twice: its plans reused
        made: list[int] = [b.CreateString("a")]
        for k, layout in enumerate(layouts):
            b.vector(b"\1" * (k % 7), 1, 1)  # a vector of 0-6 bytes: the next table starts at any alignment
            vals = [values[fmt] if fmt else made[(k * 7 + i) % len(made)] for i, (_, fmt) in enumerate(layout.fields)]
            if use_layout:
                made.append(b.pack(layout, vals))
            else:
                made.append(b.table(layout.numfields, [(slot, fmt, v) for (slot, fmt), v in zip(layout.fields, vals)]))
        b.Finish(b.offsets(made[1:]), file_identifier=b"TFL3")
        out.append(b.Output())
    assert out[0] == out[1]
