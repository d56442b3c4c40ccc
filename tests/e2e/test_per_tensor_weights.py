"""``--per-tensor-weights``: one weight scale per tensor for every weighted op (issue 34), as
TensorFlow 2.21 writes them with ``converter._experimental_disable_per_channel = True``.

Measured on TensorFlow 2.21 (re-measured by these tests, with TensorFlow's file as the oracle):

- post-training int8: CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED weights get
  one scale, max|w| / 127 (symmetric, narrow range [-127, 127], zero point 0), quantized_dimension
  0; the bias one scale, input scale × weight scale; the op versions do not change (CONV_2D 3,
  DEPTHWISE_CONV_2D 3, TRANSPOSE_CONV 2 or 3, FULLY_CONNECTED 4);
- 16x8: the same for CONV_2D, TRANSPOSE_CONV and FULLY_CONNECTED (int64 biases); a
  DEPTHWISE_CONV_2D makes TensorFlow's quantizer fail ("Quantized dimension for tensor property
  and quantization parameters do not match. Got 3 and 0"): qconvert refuses it in one line;
- QAT (``from_frozen_graph``, int8 inference): TensorFlow ignores the option, weights with a
  per-channel FakeQuant and weights without FakeQuant stay per channel. qconvert refuses a
  per-channel weight FakeQuant (its trained grid has a scale per channel), keeps per-tensor ones
  (the same file as without the option) and gives weights without FakeQuant one scale.

Every file is also run by ``qconvert run`` against LiteRT REF (every tensor), checked by
``qconvert dump``'s requant check, and by ``qconvert check``'s static rules (the same verdicts as
the per-channel file).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import corpus  # noqa: E402
import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.cli import main  # noqa: E402
from qconvert.errors import ConversionError, UsageError  # noqa: E402
from qconvert.ops import Rule, row  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402
from qconvert.tools import check as C  # noqa: E402
from qconvert.tools.dump import describe  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
# Left out: pad_squeeze_reshape (TensorFlow drops the float graph's Squeeze, so the graphs differ by a
# RESHAPE; tests/calibration/test_calibrate.py) and two_inputs_arith (no weighted op).
PTQ_MODELS = ["conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual",
              "concat_branches", "sigmoid_tanh_two_outputs", "small_classifier", "mean_keepdims_mul", "requantize",
              "narrow_ranges", "fq_args_identity_noop"]
WITH_DEPTHWISE = {"depthwise", "small_classifier"}


def _samples(shapes: dict, ranges: dict | None = None, n: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: rng.uniform(*(ranges or {}).get(k, (-1.0, 1.0)), size=[n, *s[1:]]).astype(np.float32)
            for k, s in shapes.items()}


def _chain(depthwise: bool = True) -> oracle.FloatGraph:
    """Every weighted op: CONV_2D (+ReLU), DEPTHWISE_CONV_2D (multiplier 2), TRANSPOSE_CONV (stride
    2, with a bias), MEAN, FULLY_CONNECTED; per-channel maxima that differ, so that one scale per
    tensor is not the per-channel file."""
    rng = np.random.default_rng(1)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        w = rng.normal(0, 0.3, (3, 3, 3, 8)).astype(np.float32) * np.linspace(0.3, 1.5, 8, dtype=np.float32)
        h = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), rng.normal(0, 0.1, 8).astype(np.float32)))
        c = 8
        if depthwise:
            dw = rng.normal(0, 0.3, (3, 3, 8, 2)).astype(np.float32)
            h = tf.nn.bias_add(tf.nn.depthwise_conv2d(h, dw, [1, 1, 1, 1], "SAME"),
                               rng.normal(0, 0.1, 16).astype(np.float32))
            c = 16
        tw = rng.normal(0, 0.3, (3, 3, 4, c)).astype(np.float32)
        h = tf.nn.conv2d_transpose(h, tw, [1, 16, 16, 4], 2, "SAME") + rng.normal(0, 0.1, 4).astype(np.float32)
        h = tf.reduce_mean(h, axis=[1, 2])
        fw = rng.normal(0, 0.3, (4, 10)).astype(np.float32) * np.linspace(0.2, 2.0, 10, dtype=np.float32)
        tf.identity(tf.matmul(h, fw) + rng.normal(0, 0.1, 10).astype(np.float32), name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["out"], {"input": [1, 8, 8, 3]})


def _convert_given_tensorflows_ranges(monkeypatch: pytest.MonkeyPatch, model, samples: dict,  # type: ignore[no-untyped-def]
                                      int16: bool) -> tuple[bytes, bytes]:
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16, per_tensor=True)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs, calibration_data=samples,
                         per_tensor_weights=True, activations="int16" if int16 else "int8").model
    return ours, theirs


def _weights(tflite: bytes) -> list[tuple[str, tuple[float, ...], int]]:
    """(op, weight scales, quantized_dimension) of every weighted op."""
    sg = read_model(tflite).subgraphs[0]
    out = []
    for op in sg.operators:
        r = row(op.builtin)
        if r is not None and r.rule is Rule.WEIGHTED:
            w = sg.tensors[op.inputs[r.operand_slots[1]]]
            out.append((op.builtin, w.scale, w.quantized_dimension))
    return out


def _assert_same(ours: bytes, theirs: bytes, samples: dict, inputs: list[str]) -> None:
    a, b = read_model(ours).subgraphs[0], read_model(theirs).subgraphs[0]
    # the option is on in both files: one weight scale per weighted op, quantized_dimension 0
    wa, wb = _weights(ours), _weights(theirs)
    assert wb and all(len(s) == 1 and d == 0 for _, s, d in wb), wb
    assert sorted(wa) == sorted(wb)
    assert sorted((o.builtin, o.version) for o in a.operators) == sorted((o.builtin, o.version) for o in b.operators)
    acts = [sorted((t.dtype, t.scale, t.zero_point) for t in sg.tensors if t.data is None and t.scale) for sg in (a, b)]
    assert acts[0] == acts[1]
    # every quantized constant with its parameters and bytes: weights, int32/int64 biases (a FC without
    # bias has none in either file)
    consts = [sorted((t.dtype, t.shape, t.scale, t.zero_point, t.quantized_dimension, t.data) for t in sg.tensors
                     if t.data is not None and t.scale) for sg in (a, b)]
    assert consts[0] == consts[1]
    report = oracle.compare_ptq(ours, theirs, samples, inputs)
    assert report.outputs > 0 and report.max_lsb == 0, report
    oracle.compare_models(ours, theirs)  # I/O parameters; outputs on random inputs in LiteRT REF


@pytest.mark.parametrize("name", PTQ_MODELS)
def test_corpus_twins_equal_tensorflows_per_tensor_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m = corpus.build_float_graph(name)
    samples = _samples(m.shapes, m.input_ranges)
    ours, theirs = _convert_given_tensorflows_ranges(monkeypatch, m, samples, int16=False)
    _assert_same(ours, theirs, samples, m.inputs)


def test_every_weighted_op_equals_tensorflows_per_tensor_file(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chain()
    samples = _samples(model.shapes)
    ours, theirs = _convert_given_tensorflows_ranges(monkeypatch, model, samples, int16=False)
    assert sorted(op for op, _, _ in _weights(ours)) == \
        ["CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"]
    _assert_same(ours, theirs, samples, model.inputs)
    # the per-channel file (the default) differs: the test can fail
    default = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs,
                            calibration_data=samples).model
    assert all(len(s) > 1 for _, s, _ in _weights(default))


def test_own_calibration_gives_tensorflows_weights() -> None:
    """Without TensorFlow's ranges: the same weights, scales and outputs within calibration noise."""
    model = _chain()
    samples = _samples(model.shapes)
    theirs = oracle.tf_ptq_convert(model, samples, per_tensor=True)
    ours = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs, calibration_data=samples,
                         per_tensor_weights=True).model
    report = oracle.compare_ptq(ours, theirs, samples, model.inputs)
    assert report.weights == 4 and not report.weight_diffs and not report.scale_diffs, report
    assert report.within_1_fraction == 1.0, report


def test_a_bias_that_overflows_int32_enlarges_the_one_scale_as_tensorflow_does() -> None:
    """Tiny weights under large biases: TensorFlow's driver enlarges the per-tensor weight scale
    until the largest bias fits (INT32_MAX / 2), conv and dense alike."""
    rng = np.random.default_rng(0)
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 6, 6, 4], name="input")
        h = tf.nn.conv2d(x, rng.normal(0, 1e-6, (3, 3, 4, 8)).astype(np.float32), 1, "SAME") + \
            np.array([50, -3, 0, 1, 2, 0.5, 80, 1], np.float32)
        h = tf.reduce_mean(h, axis=[1, 2])
        tf.identity(tf.matmul(h, rng.normal(0, 1e-7, (8, 5)).astype(np.float32)) +
                    np.array([100, 1, 2, 3, 4], np.float32), name="out")
    model = oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["out"], {"input": [1, 6, 6, 4]})
    samples = _samples(model.shapes, n=8)
    theirs = oracle.tf_ptq_convert(model, samples, per_tensor=True)
    result = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs, calibration_data=samples,
                           per_tensor_weights=True, calibration_engine="numpy")  # TF's ranges to the last bit
    assert sum("would overflow int32" in n for n in result.notes) == 2
    _assert_same(result.model, theirs, samples, model.inputs)


@pytest.mark.parametrize("name", [n for n in PTQ_MODELS if n not in WITH_DEPTHWISE] + ["chain"])
def test_16x8_equals_tensorflows_per_tensor_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _chain(depthwise=False) if name == "chain" else corpus.build_float_graph(name)
    samples = _samples(model.shapes, getattr(model, "input_ranges", None))
    ours, theirs = _convert_given_tensorflows_ranges(monkeypatch, model, samples, int16=True)
    _assert_same(ours, theirs, samples, model.inputs)
    if name == "chain":
        assert {t.dtype for t in read_model(ours).subgraphs[0].tensors if t.data is not None and t.scale} \
            >= {"int8", "int64"}


@pytest.mark.parametrize("name", sorted(WITH_DEPTHWISE))
def test_16x8_depthwise_is_refused_as_tensorflow_fails(name: str) -> None:
    m = corpus.build_float_graph(name)
    samples = _samples(m.shapes, m.input_ranges)
    with pytest.raises(Exception, match="Quantized dimension for tensor property"):
        oracle.tf_ptq_convert(m, samples, int16=True, per_tensor=True)
    with pytest.raises(ConversionError, match=r"^DEPTHWISE_CONV_2D '.+': --per-tensor-weights with int16 "
                                              r"activations: TensorFlow 2.21's 16x8 quantizer fails"):
        convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples,
                      per_tensor_weights=True, activations="int16")


def _runtime():  # type: ignore[no-untyped-def]
    """tests/runtime/test_interpreter.py: ``qconvert run`` against LiteRT REF, every tensor."""
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "runtime"))
    import test_interpreter

    return test_interpreter


# ---------------------------------------------------------------------------
# QAT graphs: TensorFlow ignores the option


def test_qat_per_channel_fakequant_is_refused_where_tensorflow_ignores_the_option(tmp_path: Path) -> None:
    m = corpus.build_model("conv_relu_perchannel")
    theirs = oracle.tf_convert(m, per_tensor=True)
    assert any(len(s) > 1 for _, s, _ in _weights(theirs))  # TensorFlow wrote per-channel weights anyway
    assert _weights(theirs) == _weights(oracle.tf_convert(m))
    with pytest.raises(ConversionError, match=r"^CONV_2D '.+': weight '.+' is quantized per channel by its "
                                              r"FakeQuant .* train with per-tensor weight FakeQuants .* drop "
                                              r"--per-tensor-weights$"):
        convert_graph(m.graph_def, dict(m.input_ranges), inputs=m.inputs, outputs=m.outputs,
                      per_tensor_weights=True)
    pb, out = tmp_path / "m.pb", tmp_path / "m.tflite"
    pb.write_bytes(m.graph_def)
    args = ["convert", str(pb), "-o", str(out), "--per-tensor-weights"]
    for k, (lo, hi) in m.input_ranges.items():
        args += ["--inputs-range", f"{k}={lo},{hi}"]
    assert main(args) == 1 and not out.exists()


@pytest.mark.parametrize("name", ["classifier_cli_input", "depthwise", "two_inputs_arith"])
def test_qat_per_tensor_fakequants_give_the_same_file(name: str) -> None:
    """Per-tensor weight FakeQuants are per-tensor weights already: the option changes nothing, and the
    file is TensorFlow's (with or without the option, which it ignores)."""
    m = corpus.build_model(name)
    kw = dict(inputs=m.inputs, outputs=m.outputs)
    ours = convert_graph(m.graph_def, dict(m.input_ranges), per_tensor_weights=True, **kw).model
    assert ours == convert_graph(m.graph_def, dict(m.input_ranges), **kw).model
    theirs = oracle.tf_convert(m, per_tensor=True)
    assert sorted(_weights(ours)) == sorted(_weights(theirs))
    oracle.compare_models(ours, theirs)


def _qat_without_weight_fakequants() -> tuple[bytes, np.ndarray, np.ndarray]:
    """A QAT graph whose conv and dense kernels have no FakeQuant (as tfmot leaves some)."""
    rng = np.random.default_rng(3)
    w = rng.normal(0, 0.3, (3, 3, 3, 8)).astype(np.float32) * np.linspace(0.3, 1.5, 8, dtype=np.float32)
    fw = rng.normal(0, 0.3, (8, 10)).astype(np.float32)
    g = tf.Graph()
    with g.as_default():
        fq = tf.quantization.fake_quant_with_min_max_vars
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        h = fq(tf.nn.relu(tf.nn.conv2d(fq(x, -1.0, 1.0), w, 1, "SAME") + 0.05), 0.0, 3.0)
        h = fq(tf.reduce_mean(h, axis=[1, 2]), 0.0, 2.0)
        tf.identity(fq(tf.matmul(h, fw) + 0.1, -3.0, 3.0), name="out")
    return g.as_graph_def().SerializeToString(), w, fw


def test_qat_weights_without_fakequant_become_per_tensor() -> None:
    """TensorFlow ignores the option and keeps them per channel (measured); qconvert gives them one
    scale, max|w| / 127, the values rounded half away from zero (hand-derived), and the bias
    input × weight."""
    pb, w, fw = _qat_without_weight_fakequants()
    model = oracle.FloatGraph(pb, ["input"], ["out"], {"input": [1, 8, 8, 3]})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.pb"
        path.write_bytes(pb)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(str(path), ["input"], ["out"], {"input": [1, 8, 8, 3]})
        c.inference_type = tf.int8
        c.quantized_input_stats = {"input": oracle.input_stats(-1.0, 1.0)}
        c._experimental_disable_per_channel = True
        theirs = c.convert()
    assert all(len(s) > 1 for _, s, _ in _weights(theirs))
    ours = convert_graph(pb, {"input": (-1.0, 1.0)}, inputs=model.inputs, outputs=model.outputs,
                         per_tensor_weights=True).model
    sg = read_model(ours).subgraphs[0]
    by_op = {op.builtin: op for op in sg.operators}
    for op_name, value, layout in (("CONV_2D", w, (3, 0, 1, 2)), ("FULLY_CONNECTED", fw, (1, 0))):
        op = by_op[op_name]
        t, b, x = sg.tensors[op.inputs[1]], sg.tensors[op.inputs[2]], sg.tensors[op.inputs[0]]
        m = float(np.abs(value).max())
        assert t.scale == (float(np.float32(m / 127)),) and t.zero_point == (0,)
        expected = np.clip(np.floor(np.abs(value.astype(np.float64) / (m / 127)) + 0.5) * np.sign(value), -127, 127)
        np.testing.assert_array_equal(t.array(), expected.transpose(layout).astype(np.int8))
        assert len(b.scale) == 1 and abs(b.scale[0] / (x.scale[0] * t.scale[0]) - 1) < 1e-6
    _runtime().assert_matches_litert(ours, n_inputs=8)  # `qconvert run` on it equals LiteRT REF


# ---------------------------------------------------------------------------
# run, dump, check on the files


def _files() -> dict[str, bytes]:
    model, model16 = _chain(), _chain(depthwise=False)
    samples = _samples(model.shapes)
    m = corpus.build_float_graph("small_classifier")
    kw = dict(per_tensor_weights=True)
    return {
        "chain": convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs,
                               calibration_data=samples, **kw).model,
        "chain16": convert_graph(model16.graph_def, inputs=model16.inputs, outputs=model16.outputs,
                                 calibration_data=samples, activations="int16", **kw).model,
        "small_classifier": convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs,
                                          calibration_data=_samples(m.shapes, m.input_ranges), **kw).model,
    }


@pytest.fixture(scope="module")
def files() -> dict[str, bytes]:
    return _files()


@pytest.mark.parametrize("name", ["chain", "chain16", "small_classifier"])
def test_run_equals_litert_on_every_tensor(name: str, files: dict[str, bytes]) -> None:
    assert all(len(s) == 1 for _, s, _ in _weights(files[name]))
    print(name, _runtime().assert_matches_litert(files[name], n_inputs=8))


@pytest.mark.parametrize("name", ["chain", "chain16", "small_classifier"])
def test_dump_requant_check_and_static_check_agree(name: str, files: dict[str, bytes], tmp_path: Path) -> None:
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(files[name])
    totals = describe(path)["totals"]
    assert totals["requant_records"] > 0 and totals["requant_flagged"] == 0 and totals["quantization_problems"] == 0
    # `check --target`: per-tensor weights flag nothing that the per-channel file does not
    default = tmp_path / "default.tflite"
    model = _chain(depthwise=name != "chain16")
    samples = _samples(model.shapes)
    if name == "small_classifier":
        m = corpus.build_float_graph(name)
        default.write_bytes(convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs,
                                          calibration_data=_samples(m.shapes, m.input_ranges)).model)
    else:
        default.write_bytes(convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs,
                                          calibration_data=samples,
                                          activations="int16" if name == "chain16" else "int8").model)
    targets = C.parse_targets("all")
    ours = C.check_model(str(path), targets, static_only=True)
    base = C.check_model(str(default), targets, static_only=True)
    assert [(e["target"], e["verdict"]) for e in ours["targets"]] == \
        [(e["target"], e["verdict"]) for e in base["targets"]]
    assert {e["verdict"] for e in ours["targets"]} <= {"runs", "partial"}


# ---------------------------------------------------------------------------
# options


@pytest.mark.parametrize("extra, message", [
    (["--weights", "int4", "--block-size", "32"], "--per-tensor-weights with --block-size 32: blockwise weights"),
    (["--weights", "int4"], "--per-tensor-weights with --weights int4: 4-bit weights are per channel only"),
])
def test_bad_combinations_are_usage_errors(extra: list[str], message: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    m = corpus.build_float_graph("small_classifier")
    pb, out, data = tmp_path / "m.pb", tmp_path / "m.tflite", tmp_path / "d.npy"
    pb.write_bytes(m.graph_def)
    np.save(data, _samples(m.shapes, m.input_ranges)["input"])
    calib = [] if "--block-size" in extra else ["--calibration-data", str(data)]
    assert main(["convert", str(pb), "-o", str(out), "--per-tensor-weights", *calib, *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists()
    with pytest.raises(UsageError, match="--per-tensor-weights with"):
        convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, per_tensor_weights=True,
                      weights="int4", **({"block_size": 32} if "--block-size" in extra else
                                         {"calibration_data": _samples(m.shapes, m.input_ranges)}))
