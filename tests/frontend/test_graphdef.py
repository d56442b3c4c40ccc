"""Tests for the TensorFlow-free GraphDef reader.

The TensorFlow tests build real graphs and check that every node and attr we
decode equals what TensorFlow itself parses (``tf.make_ndarray`` for tensors).
The rest use the module's own message classes and need no TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no packaging config yet; let plain `pytest` find qconvert
    sys.path.insert(0, str(ROOT))

from qconvert.errors import ConversionError  # noqa: E402
from qconvert.frontend import graphdef as gd  # noqa: E402

# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _tf():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return pytest.importorskip("tensorflow")


def assert_value_equal(got, want, where=""):
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), where
        assert got.dtype == want.dtype, (where, got.dtype, want.dtype)
        assert got.shape == want.shape, (where, got.shape, want.shape)
        if want.dtype.kind in "fc":
            assert np.array_equal(got, want, equal_nan=True), where
        else:
            assert np.array_equal(got, want), where
        assert not got.flags.writeable, where  # constants are values: passes make new arrays
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for g, w in zip(got, want):
            assert_value_equal(g, w, where)
    else:
        assert type(got) is type(want), (where, got, want)
        assert got == want, (where, got, want)


def tf_expected_attr(tf, v):
    """Decode an AttrValue with TensorFlow's own helpers: the reference we compare to."""

    def shape(s):
        ts = tf.TensorShape(s)
        return None if ts.rank is None else tuple(-1 if d is None else d for d in ts.as_list())

    def text(b):
        try:
            return b.decode("utf-8")
        except UnicodeDecodeError:
            return b

    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "s":
        return text(v.s)
    if kind in ("i", "f", "b", "placeholder"):
        return getattr(v, kind)
    if kind == "type":
        return tf.dtypes.as_dtype(v.type).name
    if kind == "shape":
        return shape(v.shape)
    if kind == "tensor":
        return tf.make_ndarray(v.tensor)
    if kind == "func":
        return v.func.name
    lv = v.list
    for field, conv in (
        ("s", text),
        ("i", None),
        ("f", None),
        ("b", None),
        ("type", lambda t: tf.dtypes.as_dtype(t).name),
        ("shape", shape),
        ("tensor", tf.make_ndarray),
        ("func", lambda f: f.name),
    ):
        items = getattr(lv, field)
        if len(items):
            return [conv(x) if conv else x for x in items]
    return []


def compare_with_tf(tf, data: bytes) -> list[gd.RawNode]:
    decoded = gd.parse_graphdef(data)
    theirs = tf.compat.v1.GraphDef.FromString(data)
    # function calls are inlined: the call keeps its name (as an Identity of the body's
    # result) and the body's nodes are added as "<call>/<node>"; those are checked apart
    calls = {n.name for n in theirs.node if n.op in ("PartitionedCall", "StatefulPartitionedCall")}
    ours = [n for n in decoded if not any(n.name.startswith(c + "/") for c in calls)]
    assert [n.name for n in ours] == [n.name for n in theirs.node]
    for mine, ref in zip(ours, theirs.node):
        if ref.name in calls:
            assert mine.op in ("Identity", "IdentityN")
            continue
        assert mine.op == ref.op
        assert mine.inputs == list(ref.input)
        assert mine.device == ref.device
        assert set(mine.attrs) == set(ref.attr), mine.name
        for key, value in ref.attr.items():
            assert_value_equal(mine.attrs[key], tf_expected_attr(tf, value), f"{mine.name}.{key}")
    return decoded


def tensor_node(tensor, name="c") -> bytes:
    """A one-Const GraphDef built with our own classes."""
    g = gd.GraphDef()
    n = g.node.add(name=name, op="Const")
    n.attr["value"].tensor.CopyFrom(tensor)
    n.attr["dtype"].type = tensor.dtype
    return g.SerializeToString()


def make_tensor(dtype: str, shape, **fields):
    t = gd.TensorProto(dtype=gd.DT[dtype])
    for d in shape:
        t.tensor_shape.dim.add(size=d)
    for k, v in fields.items():
        if isinstance(v, bytes):
            setattr(t, k, v)
        else:
            getattr(t, k).extend(v)
    return t


def one_value(data: bytes):
    (node,) = gd.parse_graphdef(data)
    return node.attrs["value"]


# ---------------------------------------------------------------------------
# against TensorFlow
# ---------------------------------------------------------------------------


def build_tf_graph(tf):
    v1 = tf.compat.v1
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = v1.placeholder(tf.float32, [None, 8, 8, 3], name="x")
        v1.placeholder(tf.float32, None, name="unknown_rank")
        v1.placeholder(tf.int32, [2, 5], name="fixed")
        w = tf.constant(rng.standard_normal((3, 3, 3, 4)).astype(np.float32), name="conv/weights")
        conv = tf.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="SAME", name="conv")
        fq = tf.quantization.fake_quant_with_min_max_args(
            conv, min=-1.5, max=2.25, num_bits=8, narrow_range=True, name="fq"
        )
        a, b = tf.split(fq, 2, axis=3, name="split")
        ctrl = tf.no_op(name="ctrl")
        with tf.control_dependencies([ctrl]):
            out = tf.identity(b, name="out")
        tf.constant(1.5, shape=[2, 3], name="broadcast_f32")
        tf.constant(7, shape=[4], dtype=tf.int32, name="broadcast_i32")
        tf.constant(np.arange(6, dtype=np.int32).reshape(2, 3), name="content_i32")
        tf.constant(np.array([1, -(2**40), 3], dtype=np.int64), name="content_i64")
        tf.constant(-5, shape=[2, 2], dtype=tf.int64, name="broadcast_i64")
        tf.constant(np.array([True, False, True]), name="content_bool")
        tf.constant(True, shape=[3], name="broadcast_bool")
        tf.constant(np.array([0.5, -2.0, 65504.0], dtype=np.float16), name="content_f16")
        tf.constant(0.25, shape=[2, 2], dtype=tf.float16, name="broadcast_f16")
        tf.constant(3.0, name="scalar_f32")
        tf.constant(np.float64(2.5), name="scalar_f64")
        tf.constant(np.array([1, 255], dtype=np.uint8), name="content_u8")
        tf.constant(np.array([-128, 127], dtype=np.int8), name="content_i8")
        tf.constant(np.zeros((0, 3), np.float32), name="empty_f32")
        tf.constant([b"abc", b"\xff\xfe", b""], name="strings")
        tf.constant(np.array([1 + 2j, 3 - 4j], dtype=np.complex64), name="complex")
        tf.cast(out, tf.int8, name="cast")
        tf.raw_ops.IdentityN(input=[out, a], name="idn")
        tf.reshape(out, tf.constant([-1, 2], name="shape_const"), name="reshape")

        @tf.function
        def double(t):
            return t * 2.0

        double(out)  # a PartitionedCall with a func attr; adds a function library
    return g.as_graph_def(add_shapes=True)


def test_matches_tensorflow_on_a_real_graph():
    tf = _tf()
    graph_def = build_tf_graph(tf)
    assert len(graph_def.library.function) >= 1
    nodes = compare_with_tf(tf, graph_def.SerializeToString())
    by_name = {n.name: n for n in nodes}

    # Spot checks on the decoded Python values themselves.
    assert by_name["x"].attrs["shape"] == (-1, 8, 8, 3)
    assert by_name["x"].attrs["dtype"] == "float32"
    assert by_name["unknown_rank"].attrs["shape"] is None
    assert by_name["fixed"].attrs["shape"] == (2, 5)
    conv = by_name["conv"]
    assert conv.inputs == ["x", "conv/weights"]
    assert conv.attrs["strides"] == [1, 2, 2, 1]
    assert conv.attrs["padding"] == "SAME"
    assert conv.attrs["data_format"] == "NHWC"
    assert conv.attrs["explicit_paddings"] == []
    assert conv.attrs["_output_shapes"] == [(-1, 4, 4, 4)]
    fq = by_name["fq"].attrs
    assert (fq["min"], fq["max"], fq["num_bits"], fq["narrow_range"]) == (-1.5, 2.25, 8, True)
    assert by_name["out"].inputs == ["split:1", "^ctrl"]
    assert by_name["idn"].attrs["T"] == ["float32", "float32"]
    assert by_name["cast"].attrs["DstT"] == "int8"
    np.testing.assert_array_equal(by_name["broadcast_f32"].attrs["value"], np.full((2, 3), 1.5, np.float32))
    np.testing.assert_array_equal(by_name["broadcast_bool"].attrs["value"], [True, True, True])
    assert by_name["scalar_f32"].attrs["value"].shape == ()
    assert by_name["strings"].attrs["value"].tolist() == [b"abc", b"\xff\xfe", b""]
    assert by_name["empty_f32"].attrs["value"].shape == (0, 3)
    # double(out) is inlined: t * 2.0 reads "out", the call's name is an Identity of the product
    (call,) = [n.name for n in graph_def.node if n.op in ("PartitionedCall", "StatefulPartitionedCall")]
    assert not any(n.op in ("PartitionedCall", "StatefulPartitionedCall") for n in nodes)
    muls = [n for n in nodes if n.name.startswith(call + "/") and n.op == "Mul"]
    assert len(muls) == 1 and muls[0].inputs[0] == "out"
    assert by_name[call].op == "Identity" and by_name[call].inputs[0].startswith(call + "/")


def test_tensorflow_graph_uses_both_tensor_encodings():
    """Guard the test above: TF must really emit typed fields for the broadcast consts."""
    tf = _tf()
    by_name = {n.name: n for n in build_tf_graph(tf).node}
    t = by_name["broadcast_f32"].attr["value"].tensor
    assert not t.tensor_content and list(t.float_val) == [1.5]
    assert len(by_name["broadcast_f16"].attr["value"].tensor.half_val) == 1
    assert len(by_name["broadcast_bool"].attr["value"].tensor.bool_val) == 1
    assert by_name["conv/weights"].attr["value"].tensor.tensor_content


def test_read_graphdef_from_file(tmp_path):
    tf = _tf()
    path = tmp_path / "model.pb"
    path.write_bytes(build_tf_graph(tf).SerializeToString())
    nodes = gd.read_graphdef(path)
    assert [n.name for n in nodes] == [n.name for n in gd.read_graphdef(str(path))]
    assert nodes[0].name == "x"


def test_schema_matches_tensorflow_descriptors():
    """Every field we model has TensorFlow's number, type, label and oneof."""
    tf = _tf()
    from tensorflow.core.framework import types_pb2

    pool = tf.compat.v1.GraphDef.DESCRIPTOR.file.pool

    def repeated(f):  # protobuf 7 dropped FieldDescriptor.label in favour of is_repeated
        return f.is_repeated if hasattr(f, "is_repeated") else f.label == f.LABEL_REPEATED

    def check(ours):
        theirs = pool.FindMessageTypeByName(ours.full_name)
        assert ours.GetOptions().map_entry == theirs.GetOptions().map_entry, ours.full_name
        for f in ours.fields:
            ref = theirs.fields_by_name[f.name]
            where = f"{ours.full_name}.{f.name}"
            assert (f.number, f.type, repeated(f)) == (ref.number, ref.type, repeated(ref)), where
            assert getattr(f.containing_oneof, "name", None) == getattr(ref.containing_oneof, "name", None)
            if f.message_type is not None:
                assert f.message_type.full_name == ref.message_type.full_name, where
        for nested in ours.nested_types:
            check(nested)

    for cls in (gd.GraphDef, gd.NodeDef, gd.AttrValue, gd.NameAttrList, gd.TensorProto,
                gd.TensorShapeProto, gd.VersionDef, gd.FunctionDefLibrary, gd.FunctionDef, gd.OpDef):
        check(cls.DESCRIPTOR)
    for name, number in gd.DT.items():
        assert types_pb2.DataType.Value(name) == number, name
        if number:
            assert gd.dtype_name(number) == tf.dtypes.as_dtype(number).name, name


_NP_DTYPES = ["float32", "float64", "int32", "int64", "int16", "int8", "uint8", "uint16",
              "bool", "float16", "uint32", "uint64", "complex64", "complex128"]


@settings(max_examples=60, deadline=None, database=None)
@given(
    dtype=st.sampled_from(_NP_DTYPES),
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3),
    seed=st.integers(0, 2**32 - 1),
    broadcast=st.booleans(),
)
def test_random_tensors_match_make_ndarray(dtype, shape, seed, broadcast):
    tf = _tf()
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        arr = rng.integers(0, 2, size=shape).astype(bool)
    elif dt.kind in "iu":
        info = np.iinfo(dt)
        arr = rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    elif dt.kind == "c":
        arr = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)
    else:
        arr = (rng.standard_normal(shape) * 100).astype(dt)
    if broadcast and arr.size:
        value = arr.reshape(-1)[0]
        proto = tf.make_tensor_proto(value, dtype=tf.as_dtype(dt), shape=shape)
    else:
        proto = tf.make_tensor_proto(arr)
    g = tf.compat.v1.GraphDef()
    node = g.node.add(name="c", op="Const")
    node.attr["value"].tensor.CopyFrom(proto)
    compare_with_tf(tf, g.SerializeToString())


# ---------------------------------------------------------------------------
# without TensorFlow
# ---------------------------------------------------------------------------


def test_importing_the_reader_does_not_import_tensorflow():
    code = "import qconvert.frontend.graphdef, sys; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_message_classes_without_upb(monkeypatch):
    """The classes come from upb directly; where it is not used (PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION
    set otherwise, or no upb), from protobuf's descriptor_pool and message_factory: both read a graph alike."""
    g = gd.GraphDef()
    c = g.node.add(name="w", op="Const", input=["^x"])
    c.attr["value"].tensor.CopyFrom(make_tensor("DT_FLOAT", [2, 3], tensor_content=np.arange(6, dtype="<f4").tobytes()))
    c.attr["dtype"].type = gd.DT["DT_FLOAT"]
    c.attr["l"].list.i.extend([1, 2])
    data = g.SerializeToString()
    monkeypatch.setenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
    public = gd._message_classes()["GraphDef"]
    assert public is not gd.GraphDef
    parsed = public()
    parsed.ParseFromString(data)
    for a, b in zip(gd._decode(parsed, "x"), gd.parse_graphdef(data), strict=True):
        assert (a.name, a.op, a.inputs, a.kinds, a.attrs["l"]) == (b.name, b.op, b.inputs, b.kinds, b.attrs["l"])
        np.testing.assert_array_equal(a.attrs["value"], b.attrs["value"])
    code = ("from qconvert.frontend import graphdef as gd; assert 'python_message' in type(gd.GraphDef).__module__; "
            f"print(gd.parse_graphdef({data!r})[0].attrs['l'])")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120, capture_output=True,
                         text=True, env={**os.environ, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"})
    assert out.stdout.strip() == "[1, 2]"


@pytest.mark.parametrize("route", ["upb", "public"])
def test_every_nested_message_gets_a_kept_class(route, monkeypatch):
    """protobuf 4.21's upb crashes the process (SIGSEGV) on reading a nested message whose Python class was
    never made: every .pb conversion died in `shape.dim[0]` (measured with protobuf 4.21.12; 4.23-7.36 do
    not). Both routes make (and keep) a class for each nested type: a shape's Dim and the attr maps' entries."""
    if route == "public":
        monkeypatch.setattr(gd, "_upb", lambda: None)
    classes = gd._message_classes()
    nested = {k for k in classes if "." in k}
    assert {"tensorflow.TensorShapeProto.Dim", "tensorflow.NodeDef.AttrEntry"} <= nested, sorted(nested)
    for key, cls in classes.items():
        assert cls.DESCRIPTOR.full_name == (key if "." in key else f"tensorflow.{key}")
    shape = classes["TensorShapeProto"]()
    shape.dim.add(size=3)
    assert [d.size for d in shape.dim] == [3]


def test_message_classes_when_upb_changed(monkeypatch):
    """upb's pool and class maker are private: a protobuf whose upb refuses the calls (here, a pool that
    raises) still gets its classes, from the public route."""
    class Changed:
        class DescriptorPool:
            def __init__(self):
                raise TypeError("DescriptorPool() takes no arguments in this protobuf")

    monkeypatch.setattr(gd, "_upb", lambda: Changed)
    classes = gd._message_classes()
    parsed = classes["GraphDef"]()
    parsed.ParseFromString(gd.GraphDef(node=[gd.NodeDef(name="a", op="Placeholder")]).SerializeToString())
    assert [n.name for n in parsed.node] == ["a"]


def test_round_trip_with_own_message_classes():
    g = gd.GraphDef()
    g.versions.producer = 1882
    x = g.node.add(name="x", op="Placeholder", device="/device:CPU:0")
    x.attr["dtype"].type = gd.DT["DT_FLOAT"]
    x.attr["shape"].shape.dim.add(size=-1)
    x.attr["shape"].shape.dim.add(size=3)
    c = g.node.add(name="w", op="Const")
    c.attr["value"].tensor.CopyFrom(
        make_tensor("DT_FLOAT", [2, 3], tensor_content=np.arange(6, dtype="<f4").tobytes())
    )
    c.attr["dtype"].type = gd.DT["DT_FLOAT"]
    n = g.node.add(name="op", op="Custom", input=["x", "w:0", "^ctrl"])
    n.attr["s"].s = "héllo".encode()
    n.attr["raw"].s = b"\xff\x00"
    n.attr["i"].i = -(2**40)
    n.attr["f"].f = 0.5
    n.attr["b"].b = False
    n.attr["zero"].i = 0  # a oneof member set to its default is still "set"
    n.attr["unset"].SetInParent()
    n.attr["unk"].shape.unknown_rank = True
    n.attr["scalar_shape"].shape.SetInParent()
    n.attr["fn"].func.name = "my_fn"
    n.attr["ph"].placeholder = "T"
    n.attr["big_type"].type = 99  # an enum value we do not know
    n.attr["ref"].type = 101  # DT_FLOAT_REF
    n.attr["ls"].list.s.extend([b"a", b"b"])
    n.attr["li"].list.i.extend([1, 2, 3])
    n.attr["lf"].list.f.extend([0.25, 1.0])
    n.attr["lb"].list.b.extend([True, False])
    n.attr["lt"].list.type.extend([gd.DT["DT_INT8"], gd.DT["DT_HALF"], gd.DT["DT_STRING"]])
    n.attr["lshape"].list.shape.add().dim.add(size=4)
    n.attr["lshape"].list.shape.add(unknown_rank=True)
    n.attr["ltensor"].list.tensor.add().CopyFrom(make_tensor("DT_INT32", [2], int_val=[5]))
    n.attr["lfunc"].list.func.add(name="f1")
    n.attr["empty_list"].list.SetInParent()

    nodes = gd.parse_graphdef(g.SerializeToString(), source="mem.pb")
    assert [(m.name, m.op, m.inputs, m.device) for m in nodes] == [
        ("x", "Placeholder", [], "/device:CPU:0"),
        ("w", "Const", [], ""),
        ("op", "Custom", ["x", "w:0", "^ctrl"], ""),
    ]
    assert nodes[0].attrs == {"dtype": "float32", "shape": (-1, 3)}
    np.testing.assert_array_equal(nodes[1].attrs["value"], np.arange(6, dtype=np.float32).reshape(2, 3))
    a = nodes[2].attrs
    ltensor = a.pop("ltensor")
    assert a == {
        "s": "héllo",
        "raw": b"\xff\x00",
        "i": -(2**40),
        "f": 0.5,
        "b": False,
        "zero": 0,
        "unset": None,
        "unk": None,
        "scalar_shape": (),
        "fn": "my_fn",
        "ph": "T",
        "big_type": "dtype99",
        "ref": "float32_ref",
        "ls": ["a", "b"],
        "li": [1, 2, 3],
        "lf": [0.25, 1.0],
        "lb": [True, False],
        "lt": ["int8", "float16", "string"],
        "lshape": [(4,), None],
        "lfunc": ["f1"],
        "empty_list": [],
    }
    assert len(ltensor) == 1
    assert_value_equal(ltensor[0], np.array([5, 5], np.int32))
    assert type(a["i"]) is int and type(a["b"]) is bool and type(a["f"]) is float


@pytest.mark.parametrize(
    "tensor, expected",
    [
        (make_tensor("DT_FLOAT", [2, 2], float_val=[1.0, 2.0]), np.array([[1, 2], [2, 2]], np.float32)),
        (make_tensor("DT_FLOAT", [3]), np.zeros(3, np.float32)),
        (make_tensor("DT_FLOAT", [], float_val=[4.5]), np.array(4.5, np.float32)),
        (make_tensor("DT_DOUBLE", [2], double_val=[0.1]), np.array([0.1, 0.1])),
        (make_tensor("DT_INT8", [3], int_val=[-1, 200]), np.array([-1, -56, -56], np.int8)),
        (make_tensor("DT_UINT8", [2], int_val=[255]), np.array([255, 255], np.uint8)),
        (make_tensor("DT_INT16", [1], int_val=[-300]), np.array([-300], np.int16)),
        (make_tensor("DT_UINT16", [1], int_val=[65535]), np.array([65535], np.uint16)),
        (make_tensor("DT_INT64", [2], int64_val=[2**40]), np.array([2**40, 2**40], np.int64)),
        (make_tensor("DT_BOOL", [3], bool_val=[False, True]), np.array([False, True, True])),
        (make_tensor("DT_HALF", [2], half_val=[0x3C00]), np.array([1.0, 1.0], np.float16)),
        (make_tensor("DT_UINT32", [1], uint32_val=[2**32 - 1]), np.array([2**32 - 1], np.uint32)),
        (make_tensor("DT_UINT64", [1], uint64_val=[2**64 - 1]), np.array([2**64 - 1], np.uint64)),
        (make_tensor("DT_COMPLEX64", [2], scomplex_val=[1, 2]), np.array([1 + 2j, 1 + 2j], np.complex64)),
        (make_tensor("DT_COMPLEX128", [1], dcomplex_val=[1, -1]), np.array([1 - 1j])),
        (make_tensor("DT_QINT8", [2], int_val=[-3]), np.array([-3, -3], np.int8)),
        (make_tensor("DT_INT32", [2, 0], int_val=[]), np.zeros((2, 0), np.int32)),
        (
            make_tensor("DT_INT32", [2], tensor_content=np.array([1, -2], "<i4").tobytes()),
            np.array([1, -2], np.int32),
        ),
        (
            make_tensor("DT_HALF", [2], tensor_content=np.array([1.5, -2], "<f2").tobytes()),
            np.array([1.5, -2], np.float16),
        ),
        (
            make_tensor("DT_BOOL", [2], tensor_content=b"\x01\x00"),
            np.array([True, False]),
        ),
    ],
)
def test_typed_fields_and_broadcast_rule(tensor, expected):
    assert_value_equal(one_value(tensor_node(tensor)), expected)


def test_string_tensors():
    got = one_value(tensor_node(make_tensor("DT_STRING", [3], string_val=[b"a", b"\xff"])))
    assert got.dtype == object and got.tolist() == [b"a", b"\xff", b"\xff"]
    got = one_value(tensor_node(make_tensor("DT_STRING", [2])))
    assert got.tolist() == [b"", b""]


def test_bfloat16_tensor():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bits = np.array([1.0, -2.5], dtype=ml_dtypes.bfloat16).view(np.uint16)
    got = one_value(tensor_node(make_tensor("DT_BFLOAT16", [2], tensor_content=bits.astype("<u2").tobytes())))
    assert got.dtype == np.dtype(ml_dtypes.bfloat16) and got.astype(np.float32).tolist() == [1.0, -2.5]
    got = one_value(tensor_node(make_tensor("DT_BFLOAT16", [3], half_val=[int(bits[1])])))
    assert got.astype(np.float32).tolist() == [-2.5] * 3


def test_tensor_content_is_read_only_and_not_the_proto():
    content = np.arange(1000, dtype="<f4").tobytes()
    proto = make_tensor("DT_FLOAT", [10, 100], tensor_content=content)
    got = one_value(tensor_node(proto))
    assert not got.flags.writeable
    with pytest.raises(ValueError):
        got[0, 0] = 42.0  # a pass cannot change a constant in place
    assert got.dtype == np.float32 and got.shape == (10, 100)
    assert np.array_equal(got.reshape(-1), np.arange(1000, dtype=np.float32))


@pytest.mark.parametrize(
    "tensor, message",
    [
        (make_tensor("DT_FLOAT", [2, 3], tensor_content=b"\0" * 20), "tensor_content has 20 bytes"),
        (make_tensor("DT_FLOAT", [2], float_val=[1, 2, 3]), "float_val has 3 values"),
        (make_tensor("DT_FLOAT", [2, -1]), "negative dimension"),
        (make_tensor("DT_FLOAT", [2**20, 2**20]), "absurdly large"),
        (make_tensor("DT_RESOURCE", [1]), "unsupported tensor dtype resource"),
        (make_tensor("DT_STRING", [1], tensor_content=b"x"), "tensor_content"),
        (make_tensor("DT_COMPLEX64", [1], scomplex_val=[1.0]), "odd number"),
    ],
)
def test_bad_tensors_name_the_node(tensor, message):
    with pytest.raises(ConversionError) as info:
        gd.parse_graphdef(tensor_node(tensor, name="bad/const"), source="m.pb")
    text = str(info.value)
    assert text.startswith("m.pb: node 'bad/const'") and message in text, text
    assert "\n" not in text


def test_unknown_rank_tensor_is_an_error():
    t = gd.TensorProto(dtype=gd.DT["DT_FLOAT"])
    t.tensor_shape.unknown_rank = True
    with pytest.raises(ConversionError, match="node 'c'.*unknown rank"):
        gd.parse_graphdef(tensor_node(t))


# --- malformed input -------------------------------------------------------


def _error(data: bytes, source: str = "model.pb") -> str:
    with pytest.raises(ConversionError) as info:
        gd.parse_graphdef(data, source=source)
    text = str(info.value)
    assert text.startswith(source + ":") and "\n" not in text, text
    return text


def test_empty_bytes():
    assert "empty" in _error(b"")


def test_random_bytes_from_a_fixed_seed():
    rng = np.random.default_rng(1234)
    for _ in range(200):
        data = rng.integers(0, 256, size=int(rng.integers(1, 4096)), dtype=np.uint8).tobytes()
        text = _error(data)
        assert "GraphDef" in text, text


def test_truncated_graphdef():
    g = gd.GraphDef()
    n = g.node.add(name="w", op="Const")
    n.attr["value"].tensor.CopyFrom(make_tensor("DT_FLOAT", [256], tensor_content=b"\0" * 1024))
    data = g.SerializeToString()
    assert "protobuf parse failed" in _error(data[: len(data) // 2])


def test_tflite_file():
    assert "this is a TFLite model, not a GraphDef" in _error(b"\x1c\x00\x00\x00TFL3" + b"\0" * 64)


def test_hdf5_and_text_format():
    assert "HDF5" in _error(b"\x89HDF\r\n\x1a\n" + b"\0" * 32)
    assert "text-format" in _error(b'node {\n  name: "x"\n  op: "Placeholder"\n}\n')


def test_node_without_name_or_op():
    g = gd.GraphDef()
    g.node.add(name="ok", op="NoOp")
    g.node.add(op="NoOp")
    assert "node #1 has no name" in _error(g.SerializeToString())
    g = gd.GraphDef()
    g.node.add(name="lonely")
    assert "node 'lonely' has no op" in _error(g.SerializeToString())


def test_graph_without_nodes():
    g = gd.GraphDef()
    g.versions.producer = 10
    assert "no nodes" in _error(g.SerializeToString())


def test_directory_errors(tmp_path):
    with pytest.raises(ConversionError, match="is a directory"):
        gd.read_graphdef(tmp_path)
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01")
    with pytest.raises(ConversionError, match="SavedModel directory") as info:
        gd.read_graphdef(tmp_path)
    assert str(info.value).startswith(str(tmp_path))
    with pytest.raises(ConversionError, match="saved_model.pb.*no nodes.*SavedModel"):
        gd.read_graphdef(tmp_path / "saved_model.pb")


def test_missing_file(tmp_path):
    path = tmp_path / "nope.pb"
    with pytest.raises(ConversionError, match=r"nope\.pb: no such file"):
        gd.read_graphdef(path)


def test_unreadable_file(tmp_path, monkeypatch):
    path = tmp_path / "secret.pb"
    path.write_bytes(b"x")
    import builtins

    real_open = builtins.open

    def deny(file, *args, **kwargs):
        if os.fspath(file) == str(path):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny)
    with pytest.raises(ConversionError, match=r"secret\.pb: cannot read the file \(permission denied\)"):
        gd.read_graphdef(path)


def test_file_errors_name_the_file(tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(b"\x18\x00\x00\x00TFL3\x00\x00")
    with pytest.raises(ConversionError) as info:
        gd.read_graphdef(path)
    assert str(info.value) == f"{path}: this is a TFLite model, not a GraphDef"
    empty = tmp_path / "empty.pb"
    empty.write_bytes(b"")
    with pytest.raises(ConversionError, match="empty"):
        gd.read_graphdef(empty)


# ---------------------------------------------------------------------------
# function calls (PartitionedCall) are inlined
# ---------------------------------------------------------------------------


def _function(library, name, inputs, outputs, body, ret):  # type: ignore[no-untyped-def]
    f = library.function.add()
    f.signature.name = name
    for a in inputs:
        f.signature.input_arg.add(name=a, type=gd.DT["DT_FLOAT"])
    for a in outputs:
        f.signature.output_arg.add(name=a, type=gd.DT["DT_FLOAT"])
    for name_, op, ins in body:
        f.node_def.add(name=name_, op=op, input=ins)
    for k, v in ret.items():
        f.ret[k] = v
    return f


def _call_graph(call_op="PartitionedCall", fname="conv_fn"):  # type: ignore[no-untyped-def]
    g = gd.GraphDef()
    g.node.add(name="x", op="Placeholder")
    g.node.add(name="w", op="Const")
    call = g.node.add(name="block/call", op=call_op, input=["x", "w", "^w"])
    call.attr["f"].func.name = fname
    g.node.add(name="out", op="Relu", input=["block/call:1"])
    # two results: the conv, and the BatchNorm's batch_mean (output 1 of FusedBatchNormV3)
    _function(g.library, "conv_fn", ["inputs", "kernel"], ["y", "mean"],
              [("Conv2D", "Conv2D", ["inputs", "kernel"]),
               ("bn", "FusedBatchNormV3", ["Conv2D:output:0", "kernel", "kernel", "kernel", "kernel"]),
               ("Identity", "Identity", ["bn:batch_mean:0", "^Conv2D"])],
              {"y": "Conv2D:output:0", "mean": "Identity:output:0"})
    return g


def test_a_partitioned_call_is_replaced_by_the_function_body():
    nodes = {n.name: n for n in gd.parse_graphdef(_call_graph().SerializeToString())}
    assert "block/call/Conv2D" in nodes and nodes["block/call/Conv2D"].inputs == ["x", "w"]
    # "node:argument:index" becomes "node:output": batch_mean is FusedBatchNormV3's output 1
    assert nodes["block/call/Identity"].inputs == ["block/call/bn:1", "^block/call/Conv2D"]
    assert nodes["block/call/bn"].inputs[0] == "block/call/Conv2D"
    # the call's name stays, result k as its output k
    assert nodes["block/call"].op == "IdentityN"
    assert nodes["block/call"].inputs == ["block/call/Conv2D", "block/call/Identity"]
    assert nodes["out"].inputs == ["block/call:1"]
    assert not any(n.op == "PartitionedCall" for n in nodes.values())


def test_nested_calls_and_a_function_used_as_an_op_are_inlined():
    g = _call_graph(call_op="outer_fn", fname="unused")
    del g.node[2].attr["f"]
    # outer_fn(a, b) calls conv_fn through a StatefulPartitionedCall and returns its first result
    _function(g.library, "outer_fn", ["a", "b"], ["r0", "r1"],
              [("inner", "StatefulPartitionedCall", ["a", "b"])],
              {"r0": "inner:y:0", "r1": "inner:mean:0"})
    g.node[2].attr["f"].func.name = ""
    g.node[2].ClearField("attr")
    g.library.function[1].node_def[0].attr["f"].func.name = "conv_fn"
    nodes = {n.name: n for n in gd.parse_graphdef(g.SerializeToString())}
    assert nodes["block/call/inner/Conv2D"].inputs == ["x", "w"]
    assert nodes["block/call"].inputs == ["block/call/inner", "block/call/inner:1"]
    assert nodes["block/call/inner"].inputs == ["block/call/inner/Conv2D", "block/call/inner/Identity"]


def test_a_call_to_a_missing_function_is_one_line():
    msg = _error(_call_graph(fname="nowhere").SerializeToString())
    assert "node 'block/call' (PartitionedCall) calls function 'nowhere'" in msg
    assert "not in the GraphDef's function library" in msg


def test_a_recursive_function_is_one_line():
    g = _call_graph()
    f = g.library.function[0]
    f.node_def.add(name="again", op="PartitionedCall", input=["inputs", "kernel"]).attr["f"].func.name = "conv_fn"
    assert "nested more than" in _error(g.SerializeToString())


# ---------------------------------------------------------------------------
# Large constants read in place: ``graphdef._lift`` cuts every tensor_content of 4 KB or
# more out of its node at the protobuf wire level before protobuf parses the rest.
# Oracles: TensorFlow's parser and make_ndarray; otherwise protobuf's parse of the untouched
# bytes (the reader without the lifting). The wire cases are messages protobuf reads in a
# way a naive cut would get wrong: an attr given twice (the last wins), a tensor_content
# given twice, an AttrValue whose oneof is set twice, unknown fields, a truncated node.
# ---------------------------------------------------------------------------

_DTYPES = ["float32", "float16", "float64", "int8", "uint8", "int16", "int32", "int64", "complex64", "bool"]


def _unlifted(data: bytes) -> list[gd.RawNode]:
    """The reader without the lifting: protobuf parses every byte."""
    return gd._decode(gd._parse_message(data, "x"), "x")


def _same(ours: list[gd.RawNode], reference: list[gd.RawNode]) -> None:
    assert [n.name for n in ours] == [n.name for n in reference]
    for mine, ref in zip(ours, reference):
        assert (mine.op, mine.inputs, mine.device) == (ref.op, ref.inputs, ref.device)
        assert set(mine.attrs) == set(ref.attrs)
        for key in ref.attrs:
            want = ref.attrs[key]
            assert_value_equal(mine.attrs[key], want, f"{mine.name}.{key}")


_field = gd._length_field  # a length-delimited field: tag, length, payload


def _entry(name: str, value: bytes) -> bytes:
    """One NodeDef.attr map entry, written by hand."""
    return _field(5, _field(1, name.encode()) + _field(2, value))


def _const_node(name: str, *entries: bytes) -> bytes:
    return _field(1, _field(1, name.encode()) + _field(2, b"Const") + b"".join(entries))


def _tensor_value(values: np.ndarray) -> bytes:
    t = make_tensor("DT_FLOAT", values.shape, tensor_content=values.astype("<f4").tobytes())
    return gd.AttrValue(tensor=t).SerializeToString()


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 4))
def test_large_tensors_match_tensorflow(seed, count):  # type: ignore[no-untyped-def]
    tf = _tf()
    rng = np.random.default_rng(seed)
    g = tf.compat.v1.GraphDef()
    lifted = 0
    for k in range(count):
        dt = np.dtype(rng.choice(_DTYPES))
        size = int(rng.integers(3900, 9000)) // dt.itemsize  # around the 4 KB threshold
        if dt.kind == "b":
            arr = rng.integers(0, 2, size).astype(bool)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            arr = rng.integers(info.min, info.max, size, dtype=dt, endpoint=True)
        elif dt.kind == "c":
            arr = (rng.standard_normal(size) + 1j * rng.standard_normal(size)).astype(dt)
        else:
            arr = (rng.standard_normal(size) * 100).astype(dt)
        arr = arr.reshape(-1, 1) if k % 2 else arr
        # names of any length put the contents at any offset, aligned or not
        node = g.node.add(name="n" * int(rng.integers(1, 9)) + str(k), op="Const")
        node.attr["dtype"].type = tf.as_dtype(dt).as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(arr))
        lifted += len(node.attr["value"].tensor.tensor_content) >= gd._LIFT_BYTES  # not every dtype uses it
    data = g.SerializeToString()
    assert sum(len(v) for v in gd._lift(memoryview(data))[1].values()) == lifted
    note(f"{lifted} of {count} lifted")
    decoded = compare_with_tf(tf, data)
    assert all(not v.flags.writeable for n in decoded for v in n.attrs.values() if isinstance(v, np.ndarray))


def test_a_large_constant_is_a_view_of_the_file(tmp_path):  # type: ignore[no-untyped-def]
    values = np.arange(5000, dtype=np.float32)
    for name in ("c", "cc", "ccc", "cccc"):  # one of them puts the content on a 4-byte boundary
        data = _const_node(name, _entry("value", _tensor_value(values)))
        (where,) = gd._lift(memoryview(data))[1][0].values()
        if where[0] % 4 == 0:
            break
    path = tmp_path / "g.pb"
    path.write_bytes(data)
    (node,) = gd.read_graphdef(path)
    got = node.attrs["value"]
    assert np.array_equal(got, values) and not got.flags.writeable
    base = got
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    assert isinstance(base, memoryview) and base.nbytes == len(data)  # the file's buffer, not a copy


def test_an_unaligned_large_constant_reads_right():
    values = np.arange(5000, dtype=np.float32) * np.float32(0.37)
    for name in ("c", "cc", "ccc", "cccc"):
        data = _const_node(name, _entry("value", _tensor_value(values)))
        (where,) = gd._lift(memoryview(data))[1][0].values()
        if where[0] % 4:
            break
    (node,) = gd.parse_graphdef(data)
    got = node.attrs["value"]
    assert not got.flags.aligned  # a view where the bytes are
    assert np.array_equal(got, values) and np.array_equal(got * 2, values * 2) and float(got.max()) == values.max()


def test_small_constants_are_left_to_protobuf():
    data = _const_node("c", _entry("value", _tensor_value(np.arange(1000, dtype=np.float32))))  # 4000 B
    assert gd._lift(memoryview(data))[1] == {}


_SHAPE_2000 = make_tensor("DT_FLOAT", [2000]).SerializeToString()  # dtype and shape, no values


def _floats(value: float) -> bytes:
    return np.full(2000, value, "<f4").tobytes()


WIRE_CASES = {
    # protobuf keeps the last entry of a map key: the second tensor
    "attr given twice": _const_node("c", _entry("value", _tensor_value(np.zeros(2000))),
                                    _entry("value", _tensor_value(np.ones(2000)))),
    "attr given twice, the last small": _const_node("c", _entry("value", _tensor_value(np.zeros(2000))),
                                                    _entry("value", _tensor_value(np.ones(3)))),
    # a bytes field given twice: the last one wins
    "tensor_content twice": _const_node("c", _entry("value", _field(
        8, _SHAPE_2000 + _field(4, _floats(0)) + _field(4, _floats(7))))),
    # AttrValue's oneof set twice: the later member (a string) wins over the tensor
    "oneof set twice": _const_node("c", _entry("value", _tensor_value(np.zeros(2000)) + _field(2, b"text"))),
    # a message given twice merges: the second TensorProto adds its content to the first's shape
    "tensor given twice": _const_node("c", _entry("value", _field(8, _SHAPE_2000) + _field(8, _field(4, _floats(1))))),
    # unknown fields around the content are kept
    "unknown fields": _const_node("c", _entry("value", _field(
        8, _SHAPE_2000 + bytes([0xF8, 0x06, 0x05]) + _field(4, _floats(1)) + _field(112, b"x")))),  # 111: a varint
    "two large attrs": _const_node("c", _entry("a", _tensor_value(np.arange(2000))),
                                   _entry("value", _tensor_value(-np.arange(3000)))),
}


@pytest.mark.parametrize("case", sorted(WIRE_CASES))
def test_wire_cases_read_as_protobuf_reads_them(case):  # type: ignore[no-untyped-def]
    data = WIRE_CASES[case]
    _same(gd.parse_graphdef(data), _unlifted(data))


def test_a_lifted_wire_case_is_really_lifted():
    _, lifted = gd._lift(memoryview(WIRE_CASES["two large attrs"]))
    assert set(lifted[0]) == {"a", "value"}
    _, lifted = gd._lift(memoryview(WIRE_CASES["attr given twice"]))
    assert lifted == {}  # left whole: protobuf decides which entry wins


@pytest.mark.parametrize("cut", [1, 7, 100, 4500, 8001])
def test_a_truncated_graph_is_one_line_error(cut):  # type: ignore[no-untyped-def]
    data = _const_node("c", _entry("value", _tensor_value(np.ones(2000)))) * 2
    with pytest.raises(ConversionError) as ours:
        gd.parse_graphdef(data[:-cut], "x")
    with pytest.raises(ConversionError) as theirs:
        _unlifted(data[:-cut])
    assert str(ours.value) == str(theirs.value)
    assert "\n" not in str(ours.value)
