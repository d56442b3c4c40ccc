"""``qconvert run``'s TFLite_Detection_PostProcess (issue 34), against LiteRT 2.3 (``BUILTIN_REF``).

Oracles: LiteRT's own kernel on qconvert's SSD files (``tests/fixtures/ssd.py``, fast and regular NMS,
their options also rewritten: more classes per detection, thresholds that keep few or no boxes), and on
one-op files with float32 inputs built here (random encodings and scores with many ties); hand-derived
detections on hand-built boxes. Every output element is compared exactly (``np.array_equal``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter is the oracle")

from qconvert.runtime.interpreter import IntegerModel
from qconvert.schema import flexbuffer

OPTS = {"max_detections": 10, "max_classes_per_detection": 1, "detections_per_class": 100, "use_regular_nms": False,
        "nms_score_threshold": 1e-8, "nms_iou_threshold": 0.6, "num_classes": 3, "y_scale": 10.0, "x_scale": 10.0,
        "h_scale": 5.0, "w_scale": 5.0}
_KINDS = {bool: "bool", int: "int", float: "float"}


def _options(opts: dict[str, Any]) -> bytes:
    return flexbuffer.encode([(k, _KINDS[type(v)], v) for k, v in opts.items()])


def detection_file(n: int, classes_with_bg: int, anchors: np.ndarray, opts: dict[str, Any]) -> bytes:
    """A one-op .tflite: float32 box encodings [1, n, 4] and scores [1, n, C] in, anchors constant,
    four float32 outputs of empty shape, as TensorFlow writes them."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT()
    m.version = 3
    code = s.OperatorCodeT()
    code.builtinCode, code.deprecatedBuiltinCode, code.version = 32, 32, 1  # CUSTOM
    code.customCode = "TFLite_Detection_PostProcess"
    m.operatorCodes, m.buffers = [code], [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors = []
    for name, shape, data in [("boxes", [1, n, 4], None), ("scores", [1, n, classes_with_bg], None),
                              ("anchors", [n, 4], anchors), ("out_boxes", [], None), ("out_classes", [], None),
                              ("out_scores", [], None), ("count", [], None)]:
        t = s.TensorT()
        t.name, t.type, t.shape = name, 0, shape
        b = s.BufferT()
        if data is not None:
            b.data = list(np.asarray(data, np.float32).tobytes())
        m.buffers.append(b)
        t.buffer = len(m.buffers) - 1
        sg.tensors.append(t)
    sg.inputs, sg.outputs = [0, 1], [3, 4, 5, 6]
    o = s.OperatorT()
    o.opcodeIndex, o.inputs, o.outputs = 0, [0, 1, 2], [3, 4, 5, 6]
    o.customOptions = list(_options(opts))
    sg.operators = [o]
    m.subgraphs = [sg]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def litert(tflite: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def ours(tflite: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    model = IntegerModel(tflite)
    return list(model.run(dict(zip(model.input_names, feeds))).values())


def written(opts: dict[str, Any], count: int) -> np.ndarray:
    """The output slots LiteRT's kernel writes: regular NMS the first max_detections; fast NMS
    min(max_classes_per_detection, num_classes) slots per detection, none past the count. The others
    keep whatever LiteRT's arena held (measured: stale values), and are 0 in `run`."""
    per, k = opts["max_classes_per_detection"], min(opts["max_classes_per_detection"], opts["num_classes"])
    slot = np.arange(opts["max_detections"] * per)
    if opts.get("use_regular_nms"):
        return slot < opts["max_detections"]
    return (slot // per < count) & (slot % per < k)


def assert_same(a: list[np.ndarray], b: list[np.ndarray], opts: dict[str, Any] | None = None) -> None:
    """Every element exactly; with ``opts``, only the slots LiteRT writes (the others are 0 here)."""
    assert len(a) == len(b) == 4
    mask = None if opts is None else written(opts, int(b[3][0]))
    for u, v in zip(a, b):
        assert u.dtype == v.dtype == np.float32 and u.shape == v.shape
        if mask is not None and u.ndim > 1:
            assert np.array_equal(u[0][mask], v[0][mask]) and not u[0][~mask].any(), (u, v)
        else:
            assert np.array_equal(u, v), (u, v)


def _anchors(rng: np.random.Generator, n: int) -> np.ndarray:
    centre = rng.uniform(0.0, 1.0, (n, 2))
    size = rng.uniform(0.05, 0.5, (n, 2))
    return np.concatenate([centre, size], axis=1).astype(np.float32)


def _inputs(rng: np.random.Generator, n: int, c: int, levels: int) -> list[np.ndarray]:
    """Encodings around 0 (some boxes far apart, many overlapping) and scores on a coarse grid of
    ``levels`` values: many exact ties, as dequantized uint8/int8 scores have."""
    boxes = rng.normal(0.0, 2.0, (1, n, 4)).astype(np.float32)
    scores = (rng.integers(0, levels, (1, n, c)) / levels).astype(np.float32)
    return [boxes, scores]


VARIANTS = [  # (name, option changes): each on 32 random inputs
    ("fast", {}),
    ("regular", {"use_regular_nms": True}),
    ("fast_2_classes", {"max_classes_per_detection": 2}),
    ("fast_more_classes_than_there_are", {"max_classes_per_detection": 5, "max_detections": 4}),
    ("regular_2_per_class", {"use_regular_nms": True, "detections_per_class": 2}),
    ("regular_high_threshold", {"use_regular_nms": True, "nms_score_threshold": 0.85}),
    ("fast_high_threshold", {"nms_score_threshold": 0.85, "max_classes_per_detection": 3}),
    ("all_under_threshold", {"nms_score_threshold": 2.0}),
    ("regular_all_under_threshold", {"use_regular_nms": True, "nms_score_threshold": 2.0}),
    ("iou_one", {"nms_iou_threshold": 1.0, "use_regular_nms": True}),
    ("no_background", {"num_classes": 4}),
]


@pytest.mark.parametrize("name,changes", VARIANTS, ids=[v[0] for v in VARIANTS])
def test_one_op_equals_litert(name: str, changes: dict[str, Any]) -> None:
    rng = np.random.default_rng(abs(hash(name)) % 2**32)
    n, c = 40, 4
    opts = {**OPTS, **changes}
    tflite = detection_file(n, c, _anchors(rng, n), opts)
    counts = []
    for trial in range(32):
        feeds = _inputs(rng, n, c, levels=(8, 64)[trial % 2])
        expected = litert(tflite, feeds)
        assert_same(ours(tflite, feeds), expected, opts)
        counts.append(int(expected[3][0]))
    if "all_under" in name:
        assert set(counts) == {0}
    elif "high_threshold" not in name:
        assert max(counts) > 0


@pytest.mark.parametrize("regular", [False, True], ids=["fast_nms", "regular_nms"])
def test_ssd_fixture_equals_litert(regular: bool) -> None:
    """qconvert's SSD file (int8 heads, DEQUANTIZE, the custom op), 32 random int8 images: its scores
    are dequantized int8 values, full of ties."""
    oracle = pytest.importorskip("oracle")
    from qconvert import api
    from tests.fixtures import ssd

    model = ssd.build_ssd(regular)
    data = api.convert_bytes(model.graph_def, input_ranges=dict(model.input_ranges), input_shapes=model.shapes,
                             inputs=model.inputs, outputs=model.outputs, allow_custom_ops=True)
    ours_ = IntegerModel(data)
    rng = np.random.default_rng(34)
    ties = 0
    for _ in range(32):
        x = rng.integers(-128, 128, (1, 8, 8, 3)).astype(np.int8)
        expected = oracle.run_litert(data, {ours_.input_names[0]: x})
        assert_same(list(ours_.run({ours_.input_names[0]: x}).values()), expected)
        ties += len(expected[2][0]) - len(set(expected[2][0].tolist()))
    assert ties > 0  # equal scores among the detections: their order is LiteRT's


@pytest.mark.parametrize("regular", [False, True], ids=["fast_nms", "regular_nms"])
def test_whole_uint8_ssd_files_equal_litert(regular: bool) -> None:
    """The whole-model uint8 SSD (``--inference-type uint8``, per-tensor weights) as qconvert writes
    it and as TensorFlow's QUANTIZED_UINT8 path writes it: uint8 heads, DEQUANTIZE, the custom op;
    `run` equals LiteRT REF on both files, 8 random uint8 images each."""
    oracle = pytest.importorskip("oracle")
    pytest.importorskip("tensorflow", reason="TensorFlow writes the other file")
    from qconvert import api
    from tests.fixtures import ssd

    model = ssd.build_ssd(regular, per_tensor=True)
    files = {"qconvert": api.convert_bytes(model.graph_def, input_ranges=dict(model.input_ranges),
                                           input_shapes=model.shapes, inputs=model.inputs, outputs=model.outputs,
                                           allow_custom_ops=True, inference_type="uint8"),
             "tensorflow": oracle.tf_convert(model, inference_type="uint8", allow_custom_ops=True)}
    rng = np.random.default_rng(8)
    for data in files.values():
        ours_ = IntegerModel(data)
        for _ in range(8):
            x = rng.integers(0, 256, (1, 8, 8, 3)).astype(np.uint8)
            expected = oracle.run_litert(data, {ours_.input_names[0]: x})
            assert_same(list(ours_.run({ours_.input_names[0]: x}).values()), expected)


def test_hand_derived_detections() -> None:
    """Three anchors, two classes plus background, encodings 0 (boxes = anchors): anchor 1 overlaps
    anchor 0 (IoU 0.81 > 0.5) and is suppressed in the fast NMS; the regular NMS keeps it for class 1
    (where anchor 0 scores under the threshold); max_detections 2 cuts the regular list."""
    anchors = np.array([[0.5, 0.5, 0.2, 0.2], [0.51, 0.5, 0.2, 0.2], [0.1, 0.1, 0.1, 0.1]], np.float32)
    boxes = np.zeros((1, 3, 4), np.float32)
    scores = np.array([[[0, 0.9, 0.0], [0, 0.8, 0.7], [0, 0.3, 0.6]]], np.float32)
    opts = {**OPTS, "num_classes": 2, "max_detections": 2, "nms_iou_threshold": 0.5, "nms_score_threshold": 0.1}
    fast = ours(detection_file(3, 3, anchors, opts), [boxes, scores])
    # fast: best classes 0 (0.9), 0 (0.8), 1 (0.6); anchor 1 suppressed by anchor 0
    assert fast[3].tolist() == [2.0]
    assert fast[1].tolist() == [[0.0, 1.0]] and fast[2].tolist() == [[np.float32(0.9), np.float32(0.6)]]
    y0 = np.float32(np.float32(0.5) - np.float32(0.1))
    assert fast[0][0, 0, 0] == y0
    regular = ours(detection_file(3, 3, anchors, {**opts, "use_regular_nms": True}), [boxes, scores])
    # class 0: anchors 0 (0.9), 2 (0.3) (1 suppressed); class 1: anchors 1 (0.7), 2 (0.6) -> best two: 0.9, 0.7
    assert regular[3].tolist() == [2.0]
    assert regular[1].tolist() == [[0.0, 1.0]] and regular[2].tolist() == [[np.float32(0.9), np.float32(0.7)]]
    for opt in (opts, {**opts, "use_regular_nms": True}):
        tflite = detection_file(3, 3, anchors, opt)
        assert_same(ours(tflite, [boxes, scores]), litert(tflite, [boxes, scores]), opt)


def test_bad_options_are_one_line() -> None:
    from qconvert.errors import RunError

    anchors = np.full((2, 4), 0.5, np.float32)
    tflite = detection_file(2, 2, anchors, {**OPTS, "num_classes": 1, "nms_iou_threshold": 1.5})
    with pytest.raises(RunError) as err:
        ours(tflite, [np.zeros((1, 2, 4), np.float32), np.zeros((1, 2, 2), np.float32)])
    assert "\n" not in str(err.value) and "nms_iou_threshold" in str(err.value)
