"""Hand-built attention blocks against TensorFlow 2.21's converter (issue 35, the attention core).

The block, as a float frozen graph (tf.compat.v1, ``tf.linalg.matmul`` throughout): Q/K/V projections
``x @ W + b`` with constant 2-D weights, multi-head by RESHAPE [B, T, H, D] and TRANSPOSE to
[B, H, T, D], scores ``q @ kᵀ`` (``transpose_b``) scaled by 1/√D, SOFTMAX over the last axis of the
4-D scores, ``p @ v``, back to [B, T, H·D] and an output projection. What TensorFlow writes for it,
measured (and what qconvert must write):

- ``BatchMatMulV2`` with a 2-D constant right operand: FULLY_CONNECTED v5 (``keep_num_dims``), the
  weights transposed to [N, K], no bias unless a BiasAdd follows (then it is the bias);
- both operands activations: BATCH_MATMUL v2 (int8 and 16x8), ``adj_x``/``adj_y`` as given, its output
  its own range;
- TRANSPOSE v2 on activations, its input's scale; SOFTMAX v2 over [B, H, T, T].

Post-training, qconvert is given TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics``,
as in test_keras_apps_ptq.py): every scale, zero point and weight equal, outputs 0 LSB apart in LiteRT
REF; the QAT form (FakeQuants) against TensorFlow's frozen-graph int8 file; 16x8 likewise; and
``qconvert run`` equal to LiteRT REF on every file.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

T, D = 8, 16  # tokens, model width
SHAPE = [1, T, D]
HEADS = [1, 2]


def _fq_none(x, lo, hi):  # type: ignore[no-untyped-def]
    return x


def _fq(x, lo, hi):  # type: ignore[no-untyped-def]
    return tf.quantization.fake_quant_with_min_max_vars(x, lo, hi)


def _weight(rng: np.random.Generator, qat: bool, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    w = rng.normal(0, 1 / np.sqrt(shape[0]), shape).astype(np.float32)
    if not qat:
        return tf.constant(w)
    m = float(np.abs(w).max())
    return _fq(tf.constant(w), -m, m)


def _block(x, heads: int, qat: bool):  # type: ignore[no-untyped-def]
    """One attention block (float, or with FakeQuants after each activation and on each weight)."""
    fq = _fq if qat else _fq_none
    rng = np.random.default_rng(35)
    dh = D // heads

    def project(h, lo, hi):  # type: ignore[no-untyped-def]
        b = rng.normal(0, 0.1, (D,)).astype(np.float32)
        return fq(tf.nn.bias_add(tf.linalg.matmul(h, _weight(rng, qat, (D, D))), b), lo, hi)

    def split(h):  # type: ignore[no-untyped-def]
        return h if heads == 1 else tf.transpose(tf.reshape(h, [1, T, heads, dh]), [0, 2, 1, 3])

    x = fq(x, -1.0, 1.0)
    q, k, v = (split(project(x, -3.0, 3.0)) for _ in range(3))
    scores = fq(tf.linalg.matmul(q, k, transpose_b=True), -12.0, 12.0)
    scores = fq(scores * np.float32(1 / np.sqrt(dh)), -4.0, 4.0)
    p = fq(tf.nn.softmax(scores), 0.0, 1.0)
    o = fq(tf.linalg.matmul(p, v), -3.0, 3.0)
    if heads > 1:
        o = tf.reshape(tf.transpose(o, [0, 2, 1, 3]), [1, T, D])
    return project(o, -4.0, 4.0)


_GRAPHS: dict[tuple[int, bool], bytes] = {}


def _graph(heads: int, qat: bool) -> bytes:
    if (heads, qat) not in _GRAPHS:
        g = tf.Graph()
        with g.as_default():
            x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
            tf.identity(_block(x, heads, qat), name="out")
        _GRAPHS[heads, qat] = g.as_graph_def().SerializeToString()
    return _GRAPHS[heads, qat]


def _samples() -> dict[str, np.ndarray]:
    return {"input": np.random.default_rng(1).uniform(-1, 1, (8, *SHAPE[1:])).astype(np.float32)}


def _ops(tflite: bytes) -> list[tuple[str, int]]:
    return sorted((o.builtin, o.version) for o in read_model(tflite).subgraphs[0].operators)


def _ptq(monkeypatch: pytest.MonkeyPatch, heads: int, int16: bool) -> tuple[bytes, bytes, dict]:
    pb, samples = _graph(heads, qat=False), _samples()
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": SHAPE})
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples,
                         activations="int16" if int16 else "int8").model
    return ours, theirs, samples


@pytest.mark.parametrize("heads", HEADS)
def test_ptq_bit_exact_with_tensorflow_given_its_ranges(heads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs, samples = _ptq(monkeypatch, heads, int16=False)
    assert _ops(ours) == _ops(theirs)
    assert ("BATCH_MATMUL", 2) in _ops(ours) and ("FULLY_CONNECTED", 5) in _ops(ours)
    assert heads == 1 or ("TRANSPOSE", 2) in _ops(ours)
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    # the four weight matrices and the scale 1/√D (a constant operand of MUL)
    assert report.tensors > 8 and report.weights == 5 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("heads", HEADS)
def test_16x8_bit_exact_with_tensorflow_given_its_ranges(heads: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs, samples = _ptq(monkeypatch, heads, int16=True)
    assert _ops(ours) == _ops(theirs)
    a, b = read_model(ours).subgraphs[0], read_model(theirs).subgraphs[0]
    assert {t.dtype for t in a.tensors if t.data is None} == {"int16"}
    acts = [sorted((t.scale, t.zero_point) for t in sg.tensors if t.data is None) for sg in (a, b)]
    assert acts[0] == acts[1]
    consts = [sorted((t.dtype, t.shape, t.scale, t.zero_point, t.data) for t in sg.tensors
                     if t.data is not None and t.dtype in ("int8", "int16", "int64")) for sg in (a, b)]
    assert consts[0] == consts[1]
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.max_lsb == 0 and report.outputs > 0, report
    oracle.compare_models(ours, theirs)
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("heads", HEADS)
def test_qat_matches_tensorflow(heads: int) -> None:
    pb = _graph(heads, qat=True)
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": SHAPE})
    model.name, model.input_ranges = "attention", {"input": (-1.0, 1.0)}  # type: ignore[attr-defined]
    theirs = oracle.tf_convert(model)
    ours = convert_graph(pb, {"input": (-1.0, 1.0)}, inputs=["input"], outputs=["out"]).model
    assert _ops(ours) == _ops(theirs)
    assert not oracle.float_tensors(ours) and not oracle.float_tensors(theirs)
    oracle.compare_models(ours, theirs, n_inputs=32, seed=3)
    oracle.assert_run_equals_litert(ours)


# ---------------------------------------------------------------------------
# one op at a time: each form of BatchMatMulV2 and TRANSPOSE, float (int8 and 16x8 post-training,
# given TensorFlow's ranges) and with FakeQuants (QAT), as TensorFlow writes it

_W = np.random.default_rng(2).normal(0, 0.5, (8, 6)).astype(np.float32)
_B = np.random.default_rng(3).normal(0, 0.1, (6,)).astype(np.float32)

# name: (build(inputs, fq), input shapes, the (op, version) list TensorFlow writes, int8 and 16x8 alike)
ONE_OP = {
    "both_activations_adj_y": (lambda a, b, fq: fq(tf.linalg.matmul(a, b, transpose_b=True), -4.0, 4.0),
                               [[1, 2, 4, 8], [1, 2, 5, 8]], [("BATCH_MATMUL", 2)]),
    "both_activations_adj_x": (lambda a, b, fq: fq(tf.linalg.matmul(a, b, transpose_a=True), -4.0, 4.0),
                               [[1, 2, 8, 4], [1, 2, 8, 5]], [("BATCH_MATMUL", 2)]),
    "broadcast_batch": (lambda a, b, fq: fq(tf.linalg.matmul(a, b), -4.0, 4.0), [[1, 2, 4, 8], [1, 1, 8, 5]],
                        [("BATCH_MATMUL", 2)]),
    "rank3": (lambda a, b, fq: fq(tf.linalg.matmul(a, b), -4.0, 4.0), [[1, 4, 8], [1, 8, 5]], [("BATCH_MATMUL", 2)]),
    # a constant left operand stays BATCH_MATMUL, the constant quantized as an activation (its own range)
    "constant_left": (lambda a, fq: fq(tf.linalg.matmul(_fq_weight(fq, _W.T), a), -4.0, 4.0), [[1, 8, 4]],
                      [("BATCH_MATMUL", 2)]),
    # a 3-D constant right operand ([1, K, N]) stays BATCH_MATMUL too
    "constant_right_3d": (lambda a, fq: fq(tf.linalg.matmul(a, _fq_weight(fq, _W[None])), -4.0, 4.0), [[1, 4, 8]],
                          [("BATCH_MATMUL", 2)]),
    # a 2-D constant right operand: FULLY_CONNECTED v5 (keep_num_dims), the BiasAdd its bias, RELU fused
    "weight_bias_relu": (lambda a, fq: fq(tf.nn.relu(tf.linalg.matmul(a, _fq_weight(fq, _W)) + _B), 0.0, 4.0),
                         [[1, 4, 8]], [("FULLY_CONNECTED", 5)]),
    "weight_4d_no_bias": (lambda a, fq: fq(tf.linalg.matmul(a, _fq_weight(fq, _W)), -4.0, 4.0), [[1, 2, 4, 8]],
                          [("FULLY_CONNECTED", 5)]),
    "weight_transposed": (lambda a, fq: fq(tf.linalg.matmul(a, _fq_weight(fq, _W.T), transpose_b=True), -4.0, 4.0),
                          [[1, 4, 8]], [("FULLY_CONNECTED", 5)]),
    "weight_adj_x": (lambda a, fq: fq(tf.linalg.matmul(a, _fq_weight(fq, _W), transpose_a=True), -4.0, 4.0),
                     [[1, 8, 4]], [("TRANSPOSE", 2), ("FULLY_CONNECTED", 5)]),
    # a real permutation of an activation (not only moves of size-1 dimensions): TRANSPOSE v2, same scale
    "transpose": (lambda a, fq: tf.transpose(fq(a * 2.0, -2.0, 2.0), [0, 3, 1, 2]), [[1, 4, 2, 8]],
                  [("MUL", 2), ("TRANSPOSE", 2)]),
}


def _fq_weight(fq, w):  # type: ignore[no-untyped-def]
    if fq is _fq_none:
        return tf.constant(w)
    m = float(np.abs(w).max())
    return fq(tf.constant(w), -m, m)


def _one_op(name: str, qat: bool) -> tuple[bytes, list[str], dict[str, list[int]]]:
    build, shapes, _ = ONE_OP[name]
    fq = _fq if qat else _fq_none
    g = tf.Graph()
    with g.as_default():
        xs = [fq(tf.compat.v1.placeholder(tf.float32, s, name=f"in{i}"), -1.0, 1.0) for i, s in enumerate(shapes)]
        tf.identity(build(*xs, fq), name="out")
    names = [f"in{i}" for i in range(len(shapes))]
    return g.as_graph_def().SerializeToString(), names, dict(zip(names, shapes))


@pytest.mark.parametrize("int16", [False, True], ids=["int8", "16x8"])
@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_one_op_post_training_equals_tensorflow(name: str, int16: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    pb, names, shapes = _one_op(name, qat=False)
    rng = np.random.default_rng(0)
    samples = {n: rng.uniform(-1, 1, (8, *s[1:])).astype(np.float32) for n, s in shapes.items()}
    model = oracle.FloatGraph(pb, names, ["out"], shapes)
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=names, outputs=["out"], calibration_data=samples,
                         activations="int16" if int16 else "int8").model
    assert _ops(ours) == _ops(theirs) == sorted(ONE_OP[name][2])
    report = oracle.compare_ptq(ours, theirs, samples, names)
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.outputs > 0, report
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("name", sorted(ONE_OP))
def test_one_op_qat_equals_tensorflow(name: str) -> None:
    pb, names, shapes = _one_op(name, qat=True)
    model = oracle.FloatGraph(pb, names, ["out"], shapes)
    model.name, model.input_ranges = name, {n: (-1.0, 1.0) for n in names}  # type: ignore[attr-defined]
    theirs = oracle.tf_convert(model)
    ours = convert_graph(pb, {n: (-1.0, 1.0) for n in names}, inputs=names, outputs=["out"]).model
    assert _ops(ours) == _ops(theirs)
    assert not oracle.float_tensors(ours) and not oracle.float_tensors(theirs)
    oracle.compare_models(ours, theirs, n_inputs=16, seed=3)
    oracle.assert_run_equals_litert(ours)


@pytest.mark.parametrize("activations", ["int8", "int16"])
def test_check_targets_agree_with_vela_and_tflite_micro(activations: str, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The two-head block: Vela 5.2 places every op on the Ethos-U85 NPU in int8 and 16x8, and on the U55 in
    int8; in 16x8 it leaves the two BATCH_MATMULs to the U55's CPU ("IFM precision must be Int8"), which
    the static rule says too. TFLite Micro registers BATCH_MATMUL and TRANSPOSE and runs the file."""
    from qconvert.tools import check as C

    versions = C.tool_versions()
    if versions["vela"] is None or versions["tflm"] is None:
        pytest.skip("ethos-u-vela and tflite-micro are the oracles here (pip install 'qconvert[vela,tflm]')")
    path = tmp_path / "attention.tflite"
    ours, _, _ = _ptq(monkeypatch, 2, int16=activations == "int16")
    path.write_bytes(ours)
    doc = C.check_model(str(path), ["tflm", "ethos-u55-128", "ethos-u85-256"], n_inputs=2)
    got = {e["target"]: e for e in doc["targets"]}
    assert all(e["basis"] == "tool" for e in got.values())
    assert got["tflm"]["verdict"] == got["ethos-u85-256"]["verdict"] == "runs"
    u55 = got["ethos-u55-128"]
    if activations == "int8":
        assert u55["verdict"] == "runs" and not u55["static"]["problems"]
    else:
        assert u55["verdict"] == "partial"
        assert [(p["op"], p["rule"]) for p in u55["static"]["problems"]] == [("BATCH_MATMUL", "matmul-int16")] * 2


def test_near_constant_scores_get_the_least_softmax_scale_litert_reference_accepts() -> None:
    """Scores ``x·1e-6`` (an untrained attention at a larger input: MobileViT_XXS at 160 px):
    TensorFlow writes the SOFTMAX input scale from the calibrated range, 7.8e-9 here, below the
    2^-26 that LiteRT's reference kernel and TFLite Micro need (``PreprocessSoftmaxScaling``;
    measured: TF's file aborts LiteRT REF at allocate_tensors, rc 134). qconvert widens that
    range to the least scale they take, says so naming the tensor, and the file runs in LiteRT
    REF with the float graph's output (softmax of near-equal scores: 1/16 each)."""
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, SHAPE, name="input")
        tf.identity(tf.nn.softmax(x * 1e-6), name="out")
    pb, samples = g.as_graph_def().SerializeToString(), _samples()
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": SHAPE})
    theirs = read_model(oracle.tf_ptq_convert(model, samples)).subgraphs[0]
    tf_scale = next(t.scale[0] for t in theirs.tensors if t.name == "mul")
    assert tf_scale * 2.0**26 < 1.0  # TensorFlow's scale: below what the reference kernel takes

    result = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples)
    sub = read_model(result.model).subgraphs[0]
    softmax = next(o for o in sub.operators if o.builtin == "SOFTMAX")
    scale = sub.tensors[softmax.inputs[0]].scale[0]
    assert 1.0 < scale * 2.0**26 < 1.001
    assert any("SOFTMAX" in n and "'mul'" in n and "widened" in n for n in result.notes)
    q = oracle.run_litert(result.model, {"input": np.round(samples["input"][:1] / 0.0078125).clip(-128, 127)
                                         .astype(np.int8)})[0]
    assert np.all((q.astype(np.int32) + 128) * (1 / 256) == pytest.approx(1 / SHAPE[-1], abs=1 / 256))
