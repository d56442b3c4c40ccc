"""``--allow-custom-ops`` against TensorFlow 2.21's converter (``allow_custom_ops=True``).

The SSD detector as ``export_tflite_ssd_graph`` lays it out (``tests/fixtures/ssd.py``) and a
general unknown op with attributes of every kind TensorFlow writes. Compared with TensorFlow's
int8 file: operators with versions, custom codes and custom-options bytes; every operand's type,
shape, scales, zero points and constant bytes; graph I/O; the four float32 outputs of
TFLite_Detection_PostProcess in LiteRT (REF resolver; the custom op is LiteRT's own kernel),
element for element.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from qconvert import api
from qconvert.errors import ConversionError

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")

from tests.fixtures import oracle, ssd  # noqa: E402

_TYPES = {0: "float32", 2: "int32", 3: "uint8", 9: "int8"}


_REGISTERED: set[str] = set()  # TensorFlow aborts the process when an op is registered twice


def _tf_convert(model: ssd.CorpusModel, custom_opdef: str | None = None) -> bytes:
    if custom_opdef is not None and custom_opdef not in _REGISTERED:
        from tensorflow.lite.python.convert import register_custom_opdefs

        register_custom_opdefs([custom_opdef])
        _REGISTERED.add(custom_opdef)
    return oracle.tf_convert(model, allow_custom_ops=True)


def _ours(model: ssd.CorpusModel, **keys: object) -> bytes:
    return api.convert_bytes(model.graph_def, input_ranges=dict(model.input_ranges), input_shapes=model.shapes,
                             inputs=model.inputs, outputs=model.outputs, allow_custom_ops=True, **keys)


def _operators(data: bytes) -> list[tuple]:
    """Each operator as (name, version, custom options, operands): every operand's type, shape,
    scales, zero points and constant bytes; tensor names left out (they differ)."""
    from ai_edge_litert import schema_py_generated as schema

    m = oracle._model_t(data)
    sg = m.subgraphs[0]
    names = oracle.op_names(data)
    out = []
    for k, op in enumerate(sg.operators):
        def operand(i: int) -> tuple:
            t = sg.tensors[i]
            q = t.quantization
            buf = m.buffers[t.buffer].data
            return (_TYPES.get(int(t.type), t.type), tuple(int(d) for d in (t.shape if t.shape is not None else ())),
                    () if q is None or q.scale is None else tuple(np.asarray(q.scale, np.float32).tolist()),
                    () if q is None or q.zeroPoint is None else tuple(np.asarray(q.zeroPoint).tolist()),
                    None if buf is None or t.type not in (0, 2, 9) else np.asarray(buf, np.uint8).tobytes())
        custom = None if op.customOptions is None else np.asarray(op.customOptions, np.uint8).tobytes()
        if custom is not None:
            assert op.customOptionsFormat == schema.CustomOptionsFormat.FLEXBUFFERS
        ins = [operand(i) for i in op.inputs if i >= 0]
        out.append((names[k], m.operatorCodes[op.opcodeIndex].version, custom, tuple(ins),
                    tuple(operand(i) for i in op.outputs)))
    return out


def _same_operators(ours: bytes, theirs: bytes) -> None:
    a, b = Counter(map(repr, _operators(ours))), Counter(map(repr, _operators(theirs)))
    assert a == b, f"ours only: {list((a - b).elements())}\nTF only: {list((b - a).elements())}"


def _same_outputs(ours: bytes, theirs: bytes, n: int = 16) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    io_o, io_t = oracle.io_details(ours), oracle.io_details(theirs)
    assert [(d["name"], d["dtype"]) for d in io_o["outputs"]] == [(d["name"], d["dtype"]) for d in io_t["outputs"]]
    assert [(d["dtype"], d["scales"], d["zero_points"]) for d in io_o["inputs"]] == \
        [(d["dtype"], d["scales"], d["zero_points"]) for d in io_t["inputs"]]
    last = []
    for _ in range(n):
        feeds = {d["name"]: rng.integers(-128, 128, d["shape"], dtype=np.int64).astype(np.int8) for d in io_t["inputs"]}
        x, y = oracle.run_litert(ours, feeds), oracle.run_litert(theirs, feeds)
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v)
        last = x
    return last


@pytest.fixture(scope="module", params=[False, True], ids=["fast_nms", "regular_nms"])
def ssd_pair(request: pytest.FixtureRequest) -> tuple[bytes, bytes]:
    model = ssd.build_ssd(request.param)
    return _ours(model), _tf_convert(model)


def test_ssd_file_equals_tensorflows(ssd_pair: tuple[bytes, bytes]) -> None:
    ours, theirs = ssd_pair
    _same_operators(ours, theirs)


def test_ssd_custom_op_as_tensorflow_writes_it(ssd_pair: tuple[bytes, bytes]) -> None:
    """Custom code, the 11 attributes without a leading underscore as a FlexBuffer map, float32
    inputs through DEQUANTIZE, a float32 anchors constant, four float32 outputs of empty shape."""
    from qconvert.schema import flexbuffer

    ours, theirs = ssd_pair
    for data in (ours, theirs):
        (post,) = [op for op in _operators(data) if op[0].startswith("custom:")]
        assert post[0] == "custom:TFLite_Detection_PostProcess" and post[1] == 1
        options = flexbuffer.decode(post[2])
        expected = {k: v for k, (_, v) in ssd.postprocess_attrs(bool(options["use_regular_nms"])).items()
                    if not k.startswith("_")}
        assert sorted(options) == sorted(expected) and len(options) == 11
        assert all(np.float32(options[k]) == np.float32(v) for k, v in expected.items())
        assert [o[0] for o in post[3]] == ["float32"] * 3 and post[3][2][1] == (ssd.NUM_ANCHORS, 4)
        assert post[4] == (("float32", (), (), (), None),) * 4


def test_ssd_outputs_equal_tensorflows_in_litert(ssd_pair: tuple[bytes, bytes]) -> None:
    ours, theirs = ssd_pair
    boxes, classes, scores, count = _same_outputs(ours, theirs)
    assert boxes.shape == (1, 10, 4) and classes.shape == scores.shape == (1, 10) and count.shape == (1,)


def test_ssd_without_the_flag_is_one_line() -> None:
    model = ssd.build_ssd()
    with pytest.raises(ConversionError) as err:
        api.convert_bytes(model.graph_def, input_ranges=dict(model.input_ranges), inputs=model.inputs,
                          outputs=model.outputs)
    text = str(err.value)
    assert "\n" not in text and "TFLite_Detection_PostProcess" in text and "--allow-custom-ops" in text


_MY_OPDEF = ("name: 'MyCustomOp' input_arg: { name: 'x' type: DT_FLOAT } output_arg: { name: 'y' type: DT_FLOAT } "
             "attr: { name: 'alpha' type: 'float' } attr: { name: 'count' type: 'int' } "
             "attr: { name: 'flag' type: 'bool' } attr: { name: 'mode' type: 'string' } "
             "attr: { name: 'T' type: 'type' }")


def test_unknown_op_with_every_attribute_kind() -> None:
    """A custom op in general: DEQUANTIZE before it, float32 result out of the model; options
    with a float, an int, a bool, a string and a type (TFLite's TensorType number), no ``_hidden``."""
    model = ssd.build_unknown_op()
    ours, theirs = _ours(model), _tf_convert(model, _MY_OPDEF)
    _same_operators(ours, theirs)  # (LiteRT has no MyCustomOp kernel: nothing to run)
    graph = oracle._model_t(ours).subgraphs[0]
    assert [graph.tensors[i].type for i in graph.outputs] == [0]  # float32 out of the model, as TensorFlow's


# ------------------------------------------------- an op after a custom op: its input's shape

def _custom_mid_graph(with_shapes: bool) -> ssd.CorpusModel:
    """input → FakeQuant → MyCustomOp → FakeQuant [-2, 2] → conv 3×3 (FakeQuant'd weights) → ReLU
    → FakeQuant: an op that needs the custom op's output shape. ``with_shapes``: the custom node
    carries ``_output_shapes`` as ``tf.io.write_graph(..., add_shapes=True)`` writes it."""
    head, tail = tf.Graph(), tf.Graph()
    with head.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        tf.quantization.fake_quant_with_min_max_args(x, -1.0, 1.0, name="fq0")
    with tail.as_default():
        y = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="custom")
        y = tf.quantization.fake_quant_with_min_max_args(y, -2.0, 2.0, name="fq1")
        w = np.random.default_rng(0).normal(size=[3, 3, 3, 4]).astype(np.float32)
        w = tf.quantization.fake_quant_with_min_max_args(tf.constant(w), -3.0, 3.0, narrow_range=True, name="fqw")
        z = tf.nn.relu(tf.nn.conv2d(y, w, 1, "SAME"))
        tf.quantization.fake_quant_with_min_max_args(z, 0.0, 6.0, name="output")
    gd = head.as_graph_def()
    node = gd.node.add()
    node.name, node.op = "custom", "MyCustomOp"
    node.input.append("fq0")
    node.attr["alpha"].f, node.attr["count"].i, node.attr["flag"].b = 0.5, 2, False
    node.attr["mode"].s, node.attr["T"].type = b"x", 1
    if with_shapes:
        shape = node.attr["_output_shapes"].list.shape.add()
        for d in (1, 8, 8, 3):
            shape.dim.add().size = d
    for n in tail.as_graph_def().node:
        if n.name != "custom":
            gd.node.add().CopyFrom(n)
    tail_model = ssd.CorpusModel(name="tail", graph_def=tail.as_graph_def().SerializeToString(), inputs=["custom"],
                                 outputs=["output"], shapes={"custom": [1, 8, 8, 3]},
                                 input_ranges={"custom": (-2.0, 2.0)}, description="", ops=frozenset())
    return ssd.CorpusModel(name="custom_mid", graph_def=gd.SerializeToString(), inputs=["input"], outputs=["output"],
                           shapes={"input": [1, 8, 8, 3]}, input_ranges={"input": (-1.0, 1.0)},
                           description="input -> MyCustomOp -> conv", ops=frozenset(n.op for n in gd.node)), tail_model


def test_an_op_that_needs_a_custom_ops_unknown_shape_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TensorFlow ignores ``_output_shapes`` and leaves the conv unconverted (a ``CUSTOM:Conv2D`` in
    its file, which no runtime has); qconvert refuses in one line naming the op, the tensor and the
    custom op, and writes nothing."""
    import subprocess
    import sys

    model, _ = _custom_mid_graph(with_shapes=False)
    assert "custom:Conv2D" in oracle.op_names(_tf_convert(model, _MY_OPDEF))
    pb, out = tmp_path / "m.pb", tmp_path / "m.tflite"
    pb.write_bytes(model.graph_def)
    done = subprocess.run([sys.executable, "-m", "qconvert", str(pb), "--inputs-range", "input=-1,1",
                           "--outputs", "output", "--allow-custom-ops", "-o", str(out)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1 and not out.exists(), done.stderr
    error = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(error) == 1 and "'Conv2D'" in error[0] and "'fq1'" in error[0] and "'custom'" in error[0] \
        and "_output_shapes" in error[0] and "--outputs" in error[0], done.stderr
    assert "Traceback" not in done.stderr


def test_output_shapes_let_the_ops_after_a_custom_op_convert() -> None:
    """With ``_output_shapes`` the conv after the custom op converts: DEQUANTIZE, the custom op,
    QUANTIZE, CONV_2D. Everything after the custom op equals TensorFlow's file for the graph's tail
    alone (the custom op's output as its input, range [-2, 2]): conv, weights, bias, parameters."""
    model, tail = _custom_mid_graph(with_shapes=True)
    ours = _ours(model)
    assert oracle.op_names(ours) == ["DEQUANTIZE", "custom:MyCustomOp", "QUANTIZE", "CONV_2D"]
    theirs = oracle.tf_convert(tail)
    mine, tfs = _operators(ours), _operators(theirs)
    assert mine[3] == tfs[0]  # CONV_2D: version, every operand and the output
    assert mine[2][4] == (tfs[0][3][0],)  # the QUANTIZE gives what TF's conv reads: int8 [1,8,8,3], scale 4/255, zp 0
    custom = [t for t in oracle._model_t(ours).subgraphs[0].tensors if t.name == b"custom"]
    assert [list(t.shape) for t in custom] == [[1, 8, 8, 3]]



# ------------------------------------------------- TFLite Micro: the detector's output shapes

def test_tflite_micro_needs_the_detection_output_shapes(ssd_pair: tuple[bytes, bytes], tmp_path,  # type: ignore[no-untyped-def]
                                                       request: pytest.FixtureRequest) -> None:
    """TensorFlow's file and qconvert's default give TFLite_Detection_PostProcess outputs no shape;
    TFLite Micro does not resize outputs and computes garbage (its own run, in a child process: every
    value differs from LiteRT's), so ``check --target tflm`` says cannot-run with the fix. With
    ``--target tflm`` qconvert writes the shapes LiteRT's kernel gives them, and TFLite Micro's outputs
    equal LiteRT REF's element for element; LiteRT's outputs are those of the default file."""
    from qconvert.tools.check import check_model

    ours, theirs = ssd_pair
    for name, data in (("ours", ours), ("tf", theirs)):
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(data)
        (entry,) = check_model(str(path), ["tflm"], n_inputs=2, static_only=True)["targets"]
        assert entry["verdict"] == "cannot-run", entry
        assert [p["rule"] for p in entry["problems"]] == ["detection-output-shape"], entry
        assert "--target tflm" in entry["problems"][0]["fix"]
    pytest.importorskip("tflite_micro", reason="TFLite Micro's interpreter runs the file")
    (entry,) = check_model(str(tmp_path / "ours.tflite"), ["tflm"], n_inputs=2)["targets"]
    assert entry["verdict"] == "cannot-run" and entry["basis"] == "tool", entry
    assert all(r["differing"] == r["elements"] for r in entry["cost"]["outputs"]), entry["cost"]  # measured, not assumed

    model = ssd.build_ssd(use_regular_nms=request.node.callspec.params["ssd_pair"])
    shaped = _ours(model, targets=["tflm"])
    sg = oracle._model_t(shaped).subgraphs[0]
    n = 10  # the fixture's max_detections × max_classes_per_detection
    assert [list(sg.tensors[i].shape) for i in sg.outputs] == [[1, n, 4], [1, n], [1, n], [1]]
    rng = np.random.default_rng(3)
    for _ in range(8):
        x = rng.integers(-128, 128, (1, 8, 8, 3), dtype=np.int64).astype(np.int8)
        ref = oracle.run_litert(shaped, {"normalized_input_image_tensor": x})
        assert all(np.array_equal(a, b) for a, b in
                   zip(ref, oracle.run_litert(ours, {"normalized_input_image_tensor": x})))
        micro = oracle.tflm_outputs(shaped, [x], 4)
        for a, b in zip(micro, ref):
            assert np.array_equal(np.asarray(a).reshape(b.shape), b)
