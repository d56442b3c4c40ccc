"""The TFLite writer, reader and requant metadata, checked against LiteRT's interpreter.

The oracle is independent of qconvert: the interpreter (reference kernels) loads
the bytes, reports tensor details and op names, and runs the graphs. Reference
numbers below are derived by hand in numpy, not with qconvert code.
"""

from __future__ import annotations


import numpy as np
import pytest

from qconvert.ir import Graph, Node, QuantParams, Tensor
from qconvert.schema import requant_metadata as rq
from qconvert.schema.reader import read_model
from qconvert.schema.writer import min_runtime_version, write_model

Interpreter = pytest.importorskip("ai_edge_litert.interpreter").Interpreter
OpResolverType = pytest.importorskip("ai_edge_litert.interpreter").OpResolverType


def interpreter(model: bytes, preserve: bool = False):
    interp = Interpreter(
        model_content=model,
        experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
        experimental_preserve_all_tensors=preserve,
    )
    interp.allocate_tensors()
    return interp


def run(model: bytes, feeds: dict[str, np.ndarray], preserve: bool = True):
    interp = interpreter(model, preserve)
    by_name = {d["name"]: d["index"] for d in interp.get_tensor_details()}
    for name, value in feeds.items():
        interp.set_tensor(by_name[name], value)
    interp.invoke()
    return interp, {name: interp.get_tensor(i) for name, i in by_name.items()}


# -- hand-built graphs ----------------------------------------------------------
IN_Q = QuantParams((0.05,), (3,))
W_SCALES = (0.0123, 0.0171, 0.0093, 0.0207)
OUT_Q = QuantParams((0.0377,), (-7,))
SOFTMAX_Q = QuantParams((1 / 256,), (-128,))  # fixed by TFLite's softmax kernel


def conv_graph() -> Graph:
    """int8 1x1 CONV_2D (per-channel weights) → MAX_POOL_2D → RESHAPE → SOFTMAX."""
    rng = np.random.default_rng(7)
    g = Graph()
    g.add_tensor(Tensor("input", "int8", (1, 2, 2, 3), quant=IN_Q))
    w = rng.integers(-127, 128, size=(4, 1, 1, 3)).astype(np.int8)
    g.add_tensor(Tensor("weights", "int8", (4, 1, 1, 3), w, QuantParams(W_SCALES, (0,) * 4, axis=0, qmin=-127)))
    bias_scales = tuple(IN_Q.scale[0] * s for s in W_SCALES)
    b = np.array([100, -250, 37, 0], dtype=np.int32)
    g.add_tensor(Tensor("bias", "int32", (4,), b, QuantParams(bias_scales, (0,) * 4, axis=0, dtype="int32")))
    g.add_tensor(Tensor("conv", "int8", (1, 2, 2, 4), quant=OUT_Q))
    g.add_tensor(Tensor("pool", "int8", (1, 1, 1, 4), quant=OUT_Q))
    g.add_tensor(Tensor("shape", "int32", (2,), np.array([1, 4], dtype=np.int32)))
    g.add_tensor(Tensor("flat", "int8", (1, 4), quant=OUT_Q))
    g.add_tensor(Tensor("probs", "int8", (1, 4), quant=SOFTMAX_Q))
    g.add_tensor(Tensor("unused", "float32", (3,), np.zeros(3, np.float32)))
    g.add_node(Node("CONV_2D", ["input", "weights", "bias"], ["conv"], {
        "padding": "VALID", "stride_w": 1, "stride_h": 1, "dilation_w_factor": 1,
        "dilation_h_factor": 1, "fused_activation_function": "NONE", "_fused_from": "Relu",
    }, name="conv", version=3))
    g.add_node(Node("MAX_POOL_2D", ["conv"], ["pool"], {
        "padding": "VALID", "stride_w": 2, "stride_h": 2, "filter_width": 2, "filter_height": 2,
        "fused_activation_function": "NONE",
    }, name="pool", version=2))
    g.add_node(Node("RESHAPE", ["pool", "shape"], ["flat"], {"new_shape": [1, 4]}, name="reshape"))
    g.add_node(Node("SOFTMAX", ["flat"], ["probs"], {"beta": 1.0}, name="softmax", version=2))
    g.inputs, g.outputs = ["input"], ["probs"]
    return g


def add_graph() -> Graph:
    """Float: relu(a + b) + c, with c constant."""
    g = Graph()
    for name in ("a", "b", "t", "out"):
        g.add_tensor(Tensor(name, "float32", (2, 3)))
    g.add_tensor(Tensor("c", "float32", (2, 3), np.arange(6, dtype=np.float32).reshape(2, 3) / 7))
    g.add_node(Node("ADD", ["a", "b"], ["t"], {"fused_activation_function": "RELU"}, name="add1"))
    g.add_node(Node("ADD", ["t", "c"], ["out"], {"fused_activation_function": "NONE"}, name="add2"))
    g.inputs, g.outputs = ["a", "b"], ["out"]
    return g


def round_half_away(x: np.ndarray) -> np.ndarray:
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


# -- the file as LiteRT sees it ---------------------------------------------------
def test_header_identifier_and_model_fields():
    data = write_model(conv_graph(), description="hello")
    assert data[4:8] == b"TFL3"
    info = read_model(data)
    assert info.version == 3
    assert info.description == "hello"
    assert info.subgraphs[0].name == "main"
    assert [info.tensors[i].name for i in info.inputs] == ["input"]
    assert [info.tensors[i].name for i in info.outputs] == ["probs"]


def test_tensor_details_match_the_ir():
    g = conv_graph()
    details = {d["name"]: d for d in interpreter(write_model(g)).get_tensor_details()}
    assert "unused" not in details  # only referenced tensors are written
    assert set(details) == {"input", "weights", "bias", "conv", "pool", "shape", "flat", "probs"}
    for name, d in details.items():
        t = g.tensors[name]
        assert list(d["shape"]) == list(t.shape), name
        assert np.dtype(d["dtype"]).name == t.dtype, name
        qp = d["quantization_parameters"]
        if t.quant is None:
            assert len(qp["scales"]) == 0, name
        else:
            np.testing.assert_array_equal(qp["scales"], np.float32(t.quant.scale), err_msg=name)
            np.testing.assert_array_equal(qp["zero_points"], t.quant.zero_point, err_msg=name)
            assert qp["quantized_dimension"] == (t.quant.axis or 0), name


def test_op_names_and_versions():
    data = write_model(conv_graph())
    ops = interpreter(data)._get_ops_details()
    assert [op["op_name"] for op in ops] == ["CONV_2D", "MAX_POOL_2D", "RESHAPE", "SOFTMAX"]
    assert [(op.builtin, op.version) for op in read_model(data).operators] == [
        ("CONV_2D", 3), ("MAX_POOL_2D", 2), ("RESHAPE", 1), ("SOFTMAX", 2)
    ]


def test_int8_conv_pool_reshape_softmax_numerics():
    g = conv_graph()
    x = np.random.default_rng(1).integers(-128, 128, size=(1, 2, 2, 3)).astype(np.int8)
    _, out = run(write_model(g), {"input": x})

    # Reference, by hand: the 1x1 conv is a per-pixel matmul in int32, then
    # rescaled by in_scale * w_scale[c] / out_scale (float32 scales, in double).
    w = g.tensors["weights"].data.reshape(4, 3).astype(np.int64)
    acc = (x.reshape(4, 3).astype(np.int64) - IN_Q.zero_point[0]) @ w.T + g.tensors["bias"].data
    mult = np.float64(np.float32(IN_Q.scale[0])) * np.float32(W_SCALES) / np.float64(np.float32(OUT_Q.scale[0]))
    real = acc * mult
    # Keep the data away from rounding ties, where rounding modes may legitimately differ.
    assert np.min(np.abs(np.abs(real - np.trunc(real)) - 0.5)) > 1e-3
    conv = np.clip(round_half_away(real) + OUT_Q.zero_point[0], -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out["conv"].reshape(4, 4), conv)
    pooled = conv.max(axis=0)
    np.testing.assert_array_equal(out["flat"], pooled.reshape(1, 4))

    logits = (pooled.astype(np.float64) - OUT_Q.zero_point[0]) * OUT_Q.scale[0]
    soft = np.exp(logits - logits.max())
    soft /= soft.sum()
    got = (out["probs"].astype(np.float64) + 128) / 256
    np.testing.assert_allclose(got, soft.reshape(1, 4), atol=2 / 256)


def test_float_add_numerics():
    g = add_graph()
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    interp, out = run(write_model(g), {"a": a, "b": b})
    assert [op["op_name"] for op in interp._get_ops_details()] == ["ADD", "ADD"]
    expected = np.maximum(a + b, np.float32(0)) + g.tensors["c"].data
    np.testing.assert_array_equal(out["out"], expected)


# -- options ------------------------------------------------------------------
def test_options_round_trip_through_the_reader():
    ops = read_model(write_model(conv_graph())).operators
    conv, pool, reshape, softmax = ops
    assert conv.options_type == "Conv2DOptions"
    assert conv.options["padding"] == "VALID"
    assert conv.options["fused_activation_function"] == "NONE"
    assert (conv.options["stride_w"], conv.options["dilation_h_factor"]) == (1, 1)
    assert "_fused_from" not in conv.options
    assert pool.options_type == "Pool2DOptions"
    assert (pool.options["filter_width"], pool.options["stride_h"]) == (2, 2)
    # TF 2.21 writes RESHAPE with the shape as an input tensor and no options.
    assert (reshape.options_type, reshape.options) == ("NONE", {})
    assert softmax.options == {"beta": 1.0}


def test_options_derived_generically():
    g = Graph()
    g.add_tensor(Tensor("x", "float32", (1, 4, 4, 2)))
    g.add_tensor(Tensor("axes", "int32", (2,), np.array([1, 2], np.int32)))
    g.add_tensor(Tensor("pads", "int32", (4, 2), np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32)))
    for name, shape in [("m", (1, 1, 1, 2)), ("s", (1, 2)), ("p", (1, 6, 6, 2)), ("h", (1, 6, 6, 2)),
                        ("c", (1, 6, 6, 4)), ("q", (1, 6, 6, 4))]:
        g.add_tensor(Tensor(name, "float32", shape))
    g.add_node(Node("MEAN", ["x", "axes"], ["m"], {"keep_dims": True}))
    g.add_node(Node("SQUEEZE", ["m"], ["s"], {"squeeze_dims": np.array([1, 2])}))
    g.add_node(Node("PAD", ["x", "pads"], ["p"]))
    g.add_node(Node("HARD_SWISH", ["p"], ["h"]))
    g.add_node(Node("CONCATENATION", ["p", "h"], ["c"], {"axis": -1, "fused_activation_function": "NONE"}))
    g.add_node(Node("LOGISTIC", ["c"], ["q"]))
    g.inputs, g.outputs = ["x"], ["s", "q"]
    data = write_model(g)
    ops = read_model(data).operators
    assert [(o.builtin, o.options_type) for o in ops] == [
        ("MEAN", "ReducerOptions"), ("SQUEEZE", "SqueezeOptions"), ("PAD", "PadOptions"),
        ("HARD_SWISH", "NONE"), ("CONCATENATION", "ConcatenationOptions"), ("LOGISTIC", "NONE"),
    ]
    assert ops[0].options == {"keep_dims": True}
    assert ops[1].options == {"squeeze_dims": [1, 2]}
    assert ops[4].options == {"axis": -1, "fused_activation_function": "NONE"}

    x = np.random.default_rng(0).standard_normal((1, 4, 4, 2)).astype(np.float32)
    _, out = run(data, {"x": x})
    np.testing.assert_allclose(out["s"], x.mean(axis=(1, 2)), rtol=1e-6)
    p = np.pad(x, [(0, 0), (1, 1), (1, 1), (0, 0)])
    h = p * np.clip(p + 3, 0, 6) / 6
    c = np.concatenate([p, h], axis=3)
    np.testing.assert_allclose(out["q"], 1 / (1 + np.exp(-c)), rtol=1e-5, atol=1e-6)


def test_reshape_without_shape_input_keeps_new_shape():
    g = Graph()
    g.add_tensor(Tensor("x", "float32", (2, 3)))
    g.add_tensor(Tensor("y", "float32", (3, 2)))
    g.add_node(Node("RESHAPE", ["x"], ["y"], {"new_shape": (3, 2)}))
    g.inputs, g.outputs = ["x"], ["y"]
    data = write_model(g)
    (op,) = read_model(data).operators
    assert (op.options_type, op.options) == ("ReshapeOptions", {"new_shape": [3, 2]})
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(run(data, {"x": x})[1]["y"], x.reshape(3, 2))


def test_high_builtin_code_uses_the_placeholder():
    g = Graph()
    g.add_tensor(Tensor("x", "float32", (4,)))
    g.add_tensor(Tensor("y", "float32", (4,)))
    g.add_node(Node("GELU", ["x"], ["y"], {"approximate": False}))
    g.inputs, g.outputs = ["x"], ["y"]
    data = write_model(g)
    (code,) = read_model(data).operator_codes
    assert (code.builtin, code.deprecated_builtin_code) == ("GELU", 127)
    assert [op["op_name"] for op in interpreter(data)._get_ops_details()] == ["GELU"]


def test_one_operator_code_per_builtin_with_max_version():
    g = add_graph()
    g.nodes[1].version = 2
    codes = read_model(write_model(g)).operator_codes
    assert [(c.builtin, c.version, c.deprecated_builtin_code) for c in codes] == [("ADD", 2, 0)]


def test_unknown_attribute_names_op_and_attr():
    g = add_graph()
    g.nodes[0].attrs["stride_w"] = 2
    with pytest.raises(ValueError, match=r"ADD 'add1'.*unknown attribute 'stride_w'"):
        write_model(g)


def test_bad_enum_value_and_unknown_op():
    g = add_graph()
    g.nodes[0].attrs["fused_activation_function"] = "SWISH"
    with pytest.raises(ValueError, match="unexpected string 'SWISH'"):
        write_model(g)
    g = add_graph()
    g.nodes[0].op = "NOT_AN_OP"
    with pytest.raises(ValueError, match="'NOT_AN_OP' is not a TFLite builtin"):
        write_model(g)
    g = add_graph()
    g.nodes[0].attrs = {"beta": 1.0, "_note": "x"}
    g.nodes[0].op = "RELU"
    with pytest.raises(ValueError, match="RELU has no options table"):
        write_model(g)


def test_attribute_value_types_are_checked():
    g = Graph()
    g.add_tensor(Tensor("x", "float32", (1, 1, 3)))
    g.add_tensor(Tensor("y", "float32", (3,)))
    g.add_node(Node("SQUEEZE", ["x"], ["y"], {"squeeze_dims": 1}, name="sq"))
    g.inputs, g.outputs = ["x"], ["y"]
    with pytest.raises(ValueError, match="SQUEEZE 'sq': attribute 'squeeze_dims': expected a list"):
        write_model(g)
    g.nodes[0].attrs = {"squeeze_dims": (0, 1)}
    g.tensors["x"].quant = QuantParams((0.1, 0.2), (0, 0))
    with pytest.raises(ValueError, match="2 scales need a per-channel axis"):
        write_model(g)


def test_missing_tensor_is_reported():
    g = add_graph()
    g.nodes[1].inputs = ["t", "nowhere"]
    with pytest.raises(ValueError, match="tensor 'nowhere' is not in the graph"):
        write_model(g)


# -- metadata, runtime version, determinism -------------------------------------
def test_min_runtime_version_entry():
    info = read_model(write_model(conv_graph()))
    assert list(info.metadata) == ["min_runtime_version"]
    assert info.metadata["min_runtime_version"] == b"1.14.0".ljust(16, b"\0")
    g = conv_graph()
    g.nodes[3].op, g.nodes[3].version, g.nodes[3].attrs = "HARD_SWISH", 1, {}
    assert read_model(write_model(g)).metadata["min_runtime_version"] == b"1.15.0".ljust(16, b"\0")


def test_runtime_versions_compare_numerically():
    assert min_runtime_version([("CONV_2D", 1), ("TILE", 1)]) == "1.10.1"  # not "1.5.0"
    assert min_runtime_version([("FULLY_CONNECTED", 4), ("QUANTIZE", 1)]) == "1.14.0"
    assert min_runtime_version([("FULLY_CONNECTED", 6), ("DEPTHWISE_CONV_2D", 3)]) == "2.1.0"
    assert min_runtime_version([("RESHAPE", 9), ("NO_SUCH_OP", 1)]) == ""
    assert min_runtime_version([("BROADCAST_TO", 1)]) == ""


def test_requant_metadata_survives_the_file():
    records = [
        rq.RequantRecord(0, "CONV_2D", -128, 127, 0, [(1518500250, -7), (1276901417, -6)], per_channel=True),
        rq.RequantRecord(2, "ADD", 0, 127, 20, [(1073741824, 0), (1610612736, -1), (1288490189, -18)]),
        rq.RequantRecord(3, "MAX_POOL_2D", -128, 127, 0, []),
    ]
    g = add_graph()
    g.metadata[rq.METADATA_NAME] = rq.encode(records)
    g.metadata["other"] = b"\x01\x02"
    info = read_model(write_model(g))
    assert list(info.metadata) == [rq.METADATA_NAME, "other", "min_runtime_version"]
    assert rq.decode(info.metadata[rq.METADATA_NAME]) == records
    assert info.metadata["other"] == b"\x01\x02"
    interpreter(write_model(g))  # LiteRT still loads it


def test_requant_layout_is_as_documented():
    blob = rq.encode([rq.RequantRecord(5, "MUL", -128, 127, 0, [(1 << 30, -3)], subgraph_index=1)])
    assert blob[:12] == b"QCRQ" + (2).to_bytes(2, "little") + b"\0\0" + (1).to_bytes(4, "little")
    fields = np.frombuffer(blob[12:], dtype="<i4")
    assert len(blob) == 12 + 28 + 8
    assert blob[12:20] == (1).to_bytes(4, "little") + (5).to_bytes(4, "little")
    assert int.from_bytes(blob[20:22], "little") == 18  # BuiltinOperator.MUL
    assert int.from_bytes(blob[22:24], "little") == 0  # flags
    assert list(fields[3:]) == [-128, 127, 0, 1, 1 << 30, -3]


def test_requant_decode_is_strict():
    good = rq.encode([rq.RequantRecord(0, "QUANTIZE", -128, 127, 0, [(1 << 30, 1)])])
    rq.decode(good)
    bad = {
        "bad magic": b"QCRX" + good[4:],
        "format version": good[:4] + (4).to_bytes(2, "little") + good[6:],  # 3: files with int16 records
        "reserved header": good[:6] + b"\1\0" + good[8:],
        "truncated at record": good[:20],
        "past the end": good[:-4],
        "unexpected bytes": good + b"\0",
        "reserved flag": good[:22] + b"\x08\0" + good[24:],
        "odd slot count": good[:22] + b"\4\0" + good[24:],  # wide: pairs then as many 64-bit factors
        "shorter than the header": b"QCRQ",
        # version 1 had no table flag
        "reserved flag bits": good[:4] + (1).to_bytes(2, "little") + good[6:22] + b"\2\0" + good[24:],
    }
    for reason, blob in bad.items():
        with pytest.raises(ValueError, match=reason):
            rq.decode(blob)


def test_requant_table_records():
    table = [(v * 7) % 256 - 128 for v in range(256)]
    recs = [rq.RequantRecord(1, "LOGISTIC", -128, 127, 0, table=table),
            rq.RequantRecord(2, "SOFTMAX", -128, 127, 0, [(2119739776, 20)])]
    blob = rq.encode(recs)
    assert len(blob) == 12 + 28 + 256 + 28 + 8
    assert int.from_bytes(blob[22:24], "little") == 2  # table flag
    assert int.from_bytes(blob[36:40], "little") == 32  # count: 32 x 8 bytes
    assert np.frombuffer(blob[40:296], dtype=np.int8).tolist() == table
    assert rq.decode(blob) == recs
    with pytest.raises(ValueError, match="a table must be 256 int8 values"):
        rq.encode([rq.RequantRecord(1, "TANH", -128, 127, 0, table=table[:255])])
    with pytest.raises(ValueError, match="no multiplier pairs"):
        rq.encode([rq.RequantRecord(1, "TANH", -128, 127, 0, [(1, 1)], table=table)])
    v1 = rq.encode([rq.RequantRecord(0, "MUL", -128, 127, 0, [(1 << 30, -3)])])
    assert rq.decode(v1[:4] + (1).to_bytes(2, "little") + v1[6:])[0].pairs == [(1 << 30, -3)]  # v1 still reads


def test_requant_wide_records():
    import struct

    wide = [struct.unpack("<Q", struct.pack("<d", v))[0] for v in (0.0123, 0.5)]
    rec = rq.RequantRecord(3, "FULLY_CONNECTED", -128, 127, 0, [(1690862756, -6), (1 << 30, 0)], per_channel=True,
                           wide=wide)
    blob = rq.encode([rec])
    assert len(blob) == 12 + 28 + 16 + 16
    assert int.from_bytes(blob[22:24], "little") == 5  # per-channel | wide
    assert int.from_bytes(blob[36:40], "little") == 4  # 8-byte slots: 2 pairs, 2 factors
    assert struct.unpack("<2d", blob[56:72]) == (0.0123, 0.5)
    assert rq.decode(blob) == [rec]
    with pytest.raises(ValueError, match="one 64-bit pattern per pair"):
        rq.encode([rq.RequantRecord(3, "FULLY_CONNECTED", -128, 127, 0, [(1, 1)], wide=wide)])


def test_requant_encode_validates():
    with pytest.raises(ValueError, match="does not fit int32"):
        rq.encode([rq.RequantRecord(0, "CONV_2D", -128, 127, 0, [(2**31, 0)])])
    with pytest.raises(ValueError, match="act_min"):
        rq.encode([rq.RequantRecord(0, "CONV_2D", 5, 4, 0, [])])
    with pytest.raises(ValueError, match="second record"):
        rq.encode([rq.RequantRecord(0, "ADD", 0, 1, 20, []), rq.RequantRecord(0, "ADD", 0, 1, 20, [])])
    with pytest.raises(ValueError, match="not a TFLite builtin"):
        rq.encode([rq.RequantRecord(0, "CONV", 0, 1, 0, [])])


def _python_calls(fn):
    """(fn's result, the function calls made from Python code while it ran): a profile hook's
    count. Tests of "vectorised" use it instead of a wall-clock limit, which a shared, loaded
    machine breaks; a loop over elements makes at least a call per element."""
    import sys

    calls = [0]

    def count(frame, event, arg):
        if event in ("call", "c_call"):
            calls[0] += 1

    sys.setprofile(count)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, calls[0]


def test_requant_large_per_channel_is_vectorised():
    """200,000 channels round-trip, and neither side handles a pair at a time in Python."""
    pairs = np.stack([np.arange(200_000) + (1 << 30), -(np.arange(200_000) % 31)], axis=1)

    def round_trip():
        return rq.decode(rq.encode([rq.RequantRecord(0, "CONV_2D", -128, 127, 0, pairs, per_channel=True)]))

    (record,), calls = _python_calls(round_trip)
    assert calls < 10_000, f"{calls} calls for one record of 200,000 pairs"
    assert record.pairs[:2] == [(1 << 30, 0), ((1 << 30) + 1, -1)]
    assert len(record.pairs) == 200_000


def test_same_graph_same_bytes():
    assert write_model(conv_graph()) == write_model(conv_graph())
    g = conv_graph()
    assert write_model(g) == write_model(g)


def test_large_constant_packs_fast_and_aligned():
    g = Graph()
    weights = np.random.default_rng(0).integers(-127, 128, size=(1000, 15_000)).astype(np.int8)
    g.add_tensor(Tensor("x", "int8", (1, 15_000), quant=QuantParams((0.1,), (0,))))
    g.add_tensor(Tensor("w", "int8", weights.shape, weights, QuantParams((0.01,), (0,))))
    g.add_tensor(Tensor("b", "int32", (1000,), np.arange(1000, dtype=np.int32), QuantParams((0.001,), (0,), dtype="int32")))
    g.add_tensor(Tensor("y", "int8", (1, 1000), quant=QuantParams((0.5,), (0,))))
    g.add_node(Node("FULLY_CONNECTED", ["x", "w", "b"], ["y"], {
        "fused_activation_function": "NONE", "keep_num_dims": False, "weights_format": "DEFAULT",
    }, version=4))
    g.inputs, g.outputs = ["x"], ["y"]
    data, calls = _python_calls(lambda: write_model(g))
    assert calls < 100_000, f"packing 15 MB made {calls} calls: an element at a time?"
    assert len(data) > weights.nbytes
    offset = data.find(weights.tobytes())
    assert offset > 0 and offset % 16 == 0
    assert data.find(g.tensors["b"].data.tobytes()) % 16 == 0
    info = read_model(data)
    np.testing.assert_array_equal(info.tensor("w").array(), weights)
    assert info.metadata["min_runtime_version"].rstrip(b"\0") == b"1.14.0"


# -- the reader on bad input ---------------------------------------------------------
def test_reader_rejects_non_tflite_input():
    good = write_model(conv_graph())
    cases = {
        "empty": b"",
        "short": good[:6],
        "wrong identifier": good[:4] + b"TFL2" + good[8:],
        "garbage": bytes(np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8)),
        "truncated": good[: len(good) // 3],
        "header only": good[:8],
        "garbage with identifier": b"\xff\xff\xff\x7fTFL3" + bytes(range(256)) * 4,
    }
    for what, blob in cases.items():
        with pytest.raises(ValueError, match="not a TFLite file"):
            read_model(blob)
            pytest.fail(what)


# -- TensorFlow's own converter -------------------------------------------------------
def test_reader_reads_a_tensorflow_converted_model(tmp_path):
    tf = pytest.importorskip("tensorflow", reason="TensorFlow is the oracle for this test")
    tf1 = tf.compat.v1
    graph = tf1.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, [1, 4, 4, 2], name="input")
        xq = tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0)
        w = tf.quantization.fake_quant_with_min_max_args(
            tf.constant(np.linspace(-1, 1, 3 * 3 * 2 * 3, dtype=np.float32).reshape(3, 3, 2, 3)), -1.0, 1.0
        )
        y = tf.nn.relu(tf.nn.conv2d(xq, w, [1, 1, 1, 1], "SAME"))
        y = tf.quantization.fake_quant_with_min_max_args(y, 0.0, 4.0)
        y = tf.reshape(tf.nn.max_pool2d(y, 2, 2, "VALID"), [1, 12])
        tf.identity(tf.nn.softmax(y), name="out")
    pb = tmp_path / "tiny.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    conv = tf1.lite.TFLiteConverter.from_frozen_graph(str(pb), ["input"], ["out"], {"input": [1, 4, 4, 2]})
    conv.inference_type = tf.int8
    conv.quantized_input_stats = {"input": (-0.5, 127.5)}
    data = conv.convert()

    info = read_model(data)
    interp = interpreter(data)
    assert [op.builtin for op in info.operators] == [op["op_name"] for op in interp._get_ops_details()]
    details = {d["name"]: d for d in interp.get_tensor_details()}
    for t in info.tensors:
        d = details[t.name]
        assert list(d["shape"]) == list(t.shape)
        assert np.dtype(d["dtype"]).name == t.dtype
        np.testing.assert_array_equal(d["quantization_parameters"]["scales"], np.float32(t.scale))
        np.testing.assert_array_equal(d["quantization_parameters"]["zero_points"], t.zero_point)
    # Our runtime-version table reproduces what TensorFlow computed for its own file.
    expected = min_runtime_version([(c.builtin, c.version) for c in info.operator_codes])
    assert info.metadata["min_runtime_version"].rstrip(b"\0").decode() == expected
    conv_op = next(op for op in info.operators if op.builtin == "CONV_2D")
    assert conv_op.options["padding"] == "SAME"
    assert conv_op.options["fused_activation_function"] == "RELU"


def test_int4_packing_by_hand():
    """Two values a byte, the first in the low nibble, two's complement nibbles; an odd count
    leaves the last high nibble 0. (-3, 2) -> 0x2D, (7, -8) -> 0x87, (1) -> 0x01."""
    from qconvert.schema.int4 import pack_int4, unpack_int4

    packed = pack_int4(np.array([-3, 2, 7, -8, 1], np.int8))
    assert packed.tolist() == [0x2D, 0x87, 0x01]
    assert unpack_int4(packed.tobytes(), 5).tolist() == [-3, 2, 7, -8, 1]
    with pytest.raises(ValueError):
        pack_int4(np.array([8], np.int8))


def test_int4_tensor_round_trips_through_writer_and_reader():
    g = Graph()
    g.add_tensor(Tensor("x", "int8", (1, 3), quant=QuantParams((0.5,), (0,))))
    w = np.array([[-7, 0, 7], [1, -1, 2]], np.int8)
    g.add_tensor(Tensor("w", "int4", (2, 3), w, quant=QuantParams((0.1, 0.2), (0, 0), axis=0, qmin=-7, qmax=7,
                                                                  dtype="int4")))
    g.add_tensor(Tensor("y", "int8", (1, 2), quant=QuantParams((1.0,), (0,))))
    g.add_node(Node("FULLY_CONNECTED", ["x", "w"], ["y"], {}, name="fc"))
    g.inputs, g.outputs = ["x"], ["y"]
    t = read_model(write_model(g)).tensor("w")
    assert (t.dtype, len(t.data), t.array().tolist()) == ("int4", 3, w.tolist())


def test_requant_layout_is_the_one_docs_formats_md_describes():
    """docs/formats.md is the one description of the metadata: fields read at the offsets and
    types it lists, from a record encoded here, give the record's values."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "formats.md").read_text(encoding="utf-8")
    block = doc[doc.index("header   (12 bytes)"):]
    block = block[:block.index("```")]
    header_text, record_text = block.split("record   (28 bytes")
    row = re.compile(r"^\s*(\d+)\s+(u16|u32|i32|4)\s+(\w+)", re.M)
    kinds = {"u16": "<u2", "u32": "<u4", "i32": "<i4", "4": "S4"}
    header = {name: (int(off), kinds[t]) for off, t, name in row.findall(header_text)}
    record = {name: (int(off), kinds[t]) for off, t, name in row.findall(record_text)}
    assert set(header) == {"magic", "format_version", "reserved", "record_count"}
    assert {"subgraph_index", "operator_index", "builtin_code", "flags", "activation_min", "activation_max",
            "left_shift", "count"} <= set(record)

    blob = rq.encode([rq.RequantRecord(5, "ADD", -100, 127, 20, [(1 << 30, -3), (3 << 29, 1), (1 << 30, -20)],
                                       subgraph_index=1)])

    def read(fields, name, base):
        off, kind = fields[name]
        return np.frombuffer(blob, dtype=kind, count=1, offset=base + off)[0]

    assert read(header, "magic", 0) == b"QCRQ" and read(header, "record_count", 0) == 1
    assert read(header, "format_version", 0) == 2 and read(header, "reserved", 0) == 0
    got = {n: int(read(record, n, 12)) for n in ("subgraph_index", "operator_index", "builtin_code", "flags",
                                                   "activation_min", "activation_max", "left_shift", "count")}
    assert got == {"subgraph_index": 1, "operator_index": 5, "builtin_code": 0, "flags": 0,  # 0 = ADD
                   "activation_min": -100, "activation_max": 127, "left_shift": 20, "count": 3}
    assert list(np.frombuffer(blob, "<i4", 6, 12 + 28)) == [1 << 30, -3, 3 << 29, 1, 1 << 30, -20]
