"""A float ``.tflite`` in, an integer ``.tflite`` out (issue 36), against TensorFlow's converter.

The oracle: TensorFlow's float conversion of a model (``from_frozen_graph``, no optimizations) is
what a user has; given to qconvert with calibration samples it must give the file TensorFlow's own
full-int8 conversion of the same model writes (``representative_dataset`` on the same samples),
given TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics``: the last bits of a deep
net's ranges depend on TensorFlow's float kernels and thread count): the same op types and
versions, every scale and zero point, every int8 weight, 0 LSB in LiteRT REF. With qconvert's
own calibration: fully int8, and no further from the float file than TensorFlow's int8 file.

Also: float16 weights (TensorFlow's float16 file), a file already quantized, a second subgraph,
``--inputs``/``--outputs`` by tensor and signature names, damaged files (one line, exit 1, no output).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow writes the float files and is the oracle")

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realmodels"
for _where in (ROOT / "bench", ROOT / "tests" / "e2e"):  # fuzz.run_main; test_layer_ops' graphs
    if str(_where) not in sys.path:
        sys.path.insert(0, str(_where))


def _ops(tflite: bytes) -> list[tuple[str, int]]:
    from qconvert.schema.reader import read_model

    return sorted((op.builtin, op.version) for op in read_model(tflite).subgraphs[0].operators)


def _as_tensorflow(model, samples: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch) -> tuple[bytes, bytes]:  # type: ignore[no-untyped-def]
    """(qconvert's file from TensorFlow's float .tflite given TensorFlow's ranges, TensorFlow's int8 file)."""
    import oracle

    from qconvert.api import convert_graph

    flt = oracle.tf_float_convert(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    return convert_graph(flt, calibration_data=samples).model, theirs


def _assert_tensorflows_file(ours: bytes, theirs: bytes, samples: dict[str, np.ndarray], inputs: list[str]) -> None:
    import oracle

    assert not [t for t in oracle.float_tensors(ours) if "int64" not in t]  # ARG_MAX's index is int64 in both
    assert _ops(ours) == _ops(theirs)
    report = oracle.compare_ptq(ours, theirs, samples, inputs)
    assert report.tensors > 0 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0 and report.within_1 == report.outputs, report


# --- the QAT corpus' float twins (conv+relu/relu6, depthwise, dense, add, concat, pools, mean, softmax, ...)

CORPUS = ["conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual", "two_inputs_arith",
          "concat_branches", "pad_squeeze_reshape", "sigmoid_tanh_two_outputs", "narrow_ranges",
          "fq_args_identity_noop", "small_classifier", "mean_keepdims_mul", "requantize"]


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_float_file_gives_tensorflows_int8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import corpus
    import oracle

    m = corpus.build_float_graph(name)
    rng = np.random.default_rng(3)
    samples = {n: rng.uniform(*m.input_ranges[n], (16, *m.shapes[n][1:])).astype(np.float32) for n in m.inputs}
    ours, theirs = _as_tensorflow(oracle.FloatGraph(m.graph_def, m.inputs, m.outputs, m.shapes), samples, monkeypatch)
    _assert_tensorflows_file(ours, theirs, samples, m.inputs)


# --- one op at a time (tests/e2e/test_layer_ops.py's float graphs): the ops Keras layers make

LAYER_OPS = ["prelu", "hard_swish_keras", "leaky_relu", "conv1d", "dense_3d", "layer_norm", "gelu",
             "upsampling_bilinear", "split", "split_v", "unpack", "pack", "concat_after_pool", "pool_branches",
             "strided_slice_shrink", "conv2d_transpose_relu", "zero_pad_depthwise_stride2", "gather", "arg_max",
             "reduce_max", "space_to_depth", "grouped_conv_two_groups", "exp", "log", "sqrt", "pow_half"]


@pytest.mark.parametrize("name", LAYER_OPS)
def test_layer_op_float_file_gives_tensorflows_int8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    import test_layer_ops as layers

    pb = layers._graph(name, qat=False)
    samples = {"input": np.random.default_rng(7).uniform(-1, 1, (32, *layers.SHAPE[1:])).astype(np.float32)}
    ours, theirs = _as_tensorflow(oracle.FloatGraph(pb, ["input"], ["out"], {"input": layers.SHAPE}), samples,
                                  monkeypatch)
    if name in layers.TF_SOMETIMES_FLOAT and oracle.float_tensors(theirs):
        # TensorFlow left UNPACK float this run (it does in about half): the .pb's own test holds the
        # comparison with the runs where it quantizes it; here the two inputs must give one file
        from qconvert.api import convert_graph

        from_pb = convert_graph(pb, inputs=["input"], outputs=["out"], calibration_data=samples).model
        _assert_tensorflows_file(ours, from_pb, samples, ["input"])
        return
    _assert_tensorflows_file(ours, theirs, samples, ["input"])


# --- keras.applications (tests/e2e/test_keras_apps_ptq.py's models, 32 px, 8 samples): MobileNetV2 and
# the PTQ corpus (ResNet50, VGG16, DenseNet121, ResNet50V2, MobileNetV3Small, RegNetX002, ConvNeXtTiny,
# EfficientNetB0); no use_tensorflows_rsqrt: TensorFlow's float file has its BatchNorms folded already

KERAS_APPS = ["MobileNetV2", "ResNet50", "VGG16", "DenseNet121", "ResNet50V2", "MobileNetV3Small", "RegNetX002",
              "ConvNeXtTiny", "EfficientNetB0"]


@pytest.mark.parametrize("name", KERAS_APPS)
def test_keras_app_float_file_gives_tensorflows_int8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import keras_apps
    import oracle

    pb, shape = keras_apps.build(name)
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    ours, theirs = _as_tensorflow(oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape}), samples,
                                  monkeypatch)
    _assert_tensorflows_file(ours, theirs, samples, ["input"])


# --- the custom PTQ models (tests/e2e/test_custom_ptq.py's MODELS: Conv1D audio net with PReLU, unrolled
# GRU and LSTMs, Rescaling before VALID convolutions, Keras' Normalization), 16 samples


def _custom_models() -> list[str]:
    import test_custom_ptq

    return sorted(test_custom_ptq.MODELS)


@pytest.mark.parametrize("name", _custom_models())
def test_custom_ptq_float_file_gives_tensorflows_int8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    import test_custom_ptq as custom

    pb, shape, x = custom._build(name)
    samples = {"input": x}
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    ours, theirs = _as_tensorflow(model, samples, monkeypatch)
    if oracle.float_tensors(theirs):
        # TensorFlow leaves part of the unrolled LSTM float (a DEQUANTIZE and a float SPLIT at a first
        # step, as from the .pb: test_custom_ptq.py): ours fully int8, no further from the float model
        assert not oracle.float_tensors(ours)
        errors = oracle.error_against_graph(pb, {"ours": ours, "tf": theirs}, n_inputs=64)
        assert errors["ours"][0] <= errors["tf"][0] and errors["ours"][1] <= errors["tf"][1], errors
        return
    _assert_tensorflows_file(ours, theirs, samples, ["input"])
    assert custom._int32_constants(ours) == custom._int32_constants(theirs)  # the biases, to the last bit


# --- qconvert's own calibration: no further from the float file than TensorFlow's int8 file


def _error(tflite: bytes, flt: bytes, x: np.ndarray, name: str) -> float:
    """Mean absolute error of the (dequantized) outputs against the float file's, in LiteRT REF."""
    import oracle

    d_in = oracle.io_details(tflite)["inputs"][0]
    d_out = oracle.io_details(tflite)["outputs"]
    errs = []
    for k in range(len(x)):
        scale, zp = d_in["quant"]
        q = np.clip(np.round(x[k:k + 1] / scale + zp), -128, 127).astype(np.int8)
        got = oracle.run_litert(tflite, {d_in["name"]: q})
        want = oracle.run_litert(flt, {name: x[k:k + 1]})
        for y, w, d in zip(got, want, d_out):
            s, z = d["quant"]
            errs.append(float(np.mean(np.abs((y.astype(np.float64) - z) * s - w))))
    return float(np.mean(errs))


def test_own_calibration_is_fully_int8_and_no_worse_than_tensorflows() -> None:
    import keras_apps
    import oracle

    from qconvert.api import convert_graph

    pb, shape = keras_apps.build("MobileNetV2")
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    rng = np.random.default_rng(1)
    samples = {"input": rng.uniform(-1, 1, (16, *shape[1:])).astype(np.float32)}
    flt = oracle.tf_float_convert(model)
    theirs = oracle.tf_ptq_convert(model, samples)
    ours = convert_graph(flt, calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    assert _ops(ours) == _ops(theirs)
    x = rng.uniform(-1, 1, (8, *shape[1:])).astype(np.float32)
    mine, tfs = _error(ours, flt, x, "input"), _error(theirs, flt, x, "input")
    print(f"\nMobileNetV2 32 px, mean |error| against the float file: qconvert {mine:.5f}, TensorFlow {tfs:.5f}")
    assert mine <= tfs * 1.02, (mine, tfs)


# --- float16 weights, files already quantized, subgraphs, names


def _small_model():  # type: ignore[no-untyped-def]
    import corpus
    import oracle

    m = corpus.build_float_graph("residual")
    samples = {n: np.random.default_rng(3).uniform(-1, 1, (16, *m.shapes[n][1:])).astype(np.float32) for n in m.inputs}
    return oracle.FloatGraph(m.graph_def, m.inputs, m.outputs, m.shapes), samples


def test_float16_file_converts_as_its_weights_say() -> None:
    """TensorFlow's float16 file (FLOAT16 weights and biases behind DEQUANTIZE) converts fully int8, to
    the file qconvert writes from the float32 file whose weights are those float16 values."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.schema.reader import read_model

    model, samples = _small_model()
    f16 = oracle.tf_float_convert(model, float16=True)
    assert "DEQUANTIZE" in {op.builtin for op in read_model(f16).operators}
    ours = convert_graph(f16, calibration_data=samples)
    assert not oracle.float_tensors(ours.model)
    assert any("float16" in n for n in ours.notes), ours.notes

    def to_float16(m):  # type: ignore[no-untyped-def]
        for t in m.subgraphs[0].tensors:
            buf = m.buffers[t.buffer]
            if t.type == 0 and buf.data is not None and len(buf.data):
                v = np.frombuffer(bytes(buf.data), np.float32).astype(np.float16).astype(np.float32)
                buf.data = np.frombuffer(v.tobytes(), np.uint8)

    rounded = oracle.repack(oracle.tf_float_convert(model), to_float16)
    expected = convert_graph(rounded, calibration_data=samples).model
    assert _ops(ours.model) == _ops(expected)
    report = oracle.compare_ptq(ours.model, expected, samples, model.inputs)
    assert report.max_rel_scale == 0 and not report.weight_diffs and report.max_lsb == 0, report


def test_already_quantized_file_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """The choice: a clear error (exit 1), not "nothing to do" with exit 0 and no file."""
    import oracle
    from fuzz import run_main

    model, samples = _small_model()
    src = tmp_path / "int8.tflite"
    src.write_bytes(oracle.tf_ptq_convert(model, samples))
    np.savez(tmp_path / "x.npz", **samples)
    out = tmp_path / "out.tflite"
    o = run_main([str(src), "--calibration-data", str(tmp_path / "x.npz"), "-o", str(out)])
    assert o.code == 1 and not out.exists(), o.stderr
    assert "already quantized" in o.stderr and len(o.stderr.strip().splitlines()) == 1, o.stderr


def test_a_second_subgraph_nobody_calls_is_left_out_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    import copy

    import oracle

    from qconvert.api import convert_graph

    model, samples = _small_model()
    flt = oracle.tf_float_convert(model)
    two = oracle.repack(flt, lambda m: m.subgraphs.append(copy.deepcopy(m.subgraphs[0])))
    a = convert_graph(flt, calibration_data=samples)
    b = convert_graph(two, calibration_data=samples)
    assert a.model == b.model
    assert any("2 subgraphs" in n for n in b.notes), b.notes


def test_control_flow_is_refused_in_one_line() -> None:
    from qconvert.api import convert_graph
    from qconvert.errors import ConversionError

    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def loop(x):  # type: ignore[no-untyped-def]
        return tf.while_loop(lambda i, v: i < 3, lambda i, v: (i + 1, tf.nn.relu(v * 1.5 - 0.1)), [0, x])[1]

    flt = tf.lite.TFLiteConverter.from_concrete_functions([loop.get_concrete_function()], loop).convert()
    with pytest.raises(ConversionError, match="calls another subgraph"):
        convert_graph(flt, calibration_data={"x": np.zeros((2, 1, 4), np.float32)})


def test_signature_and_tensor_names_select_inputs_and_outputs() -> None:
    """A Keras model's file (``from_keras_model``): its signature names ("input_a", "output_1") and
    its tensor names both work in --inputs / --outputs; cutting at an inner output drops the rest."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.errors import UsageError
    from qconvert.schema.reader import read_model

    keras = pytest.importorskip("tf_keras", reason="a Keras model gives the signature")
    keras.utils.set_random_seed(0)
    x = keras.Input((8,), name="input_a")
    h = keras.layers.Dense(6, activation="relu", name="hidden")(x)
    model = keras.Model(x, [keras.layers.Dense(3, name="head")(h), keras.layers.Dense(2, name="aux")(h)])
    flt = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    info = read_model(flt)
    sig = info.signatures[0]
    assert "input_a" in sig.inputs and len(sig.outputs) == 2
    tensor_in = info.tensors[sig.inputs["input_a"]].name
    out_name = sorted(sig.outputs)[0]
    samples = {tensor_in: np.random.default_rng(0).uniform(-1, 1, (8, 8)).astype(np.float32)}
    whole = convert_graph(flt, calibration_data=samples)
    assert len(whole.graph.outputs) == 2
    one = convert_graph(flt, inputs=["input_a"], outputs=[out_name], calibration_data=samples)
    by_tensor = convert_graph(flt, inputs=[tensor_in], outputs=[info.tensors[sig.outputs[out_name]].name],
                              calibration_data=samples)
    assert one.model == by_tensor.model and len(one.graph.outputs) == 1
    assert len(_ops(one.model)) == 2 and not oracle.float_tensors(one.model)
    with pytest.raises(UsageError, match="--outputs names 'nope'"):
        convert_graph(flt, outputs=["nope"], calibration_data=samples)


@pytest.mark.parametrize("damage", ["truncated", "identifier", "zeroed_root"])
def test_damaged_file_is_one_line_exit_1_and_no_output(damage: str, tmp_path: Path) -> None:
    import oracle
    from fuzz import run_main

    model, samples = _small_model()
    data = bytearray(oracle.tf_float_convert(model))
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "identifier":
        data[4:8] = b"XXXX"
    else:
        data[0:4] = b"\xf0\xff\xff\x7f"
    src = tmp_path / "bad.tflite"
    src.write_bytes(bytes(data))
    np.savez(tmp_path / "x.npz", **samples)
    out = tmp_path / "out.tflite"
    o = run_main([str(src), "--calibration-data", str(tmp_path / "x.npz"), "-o", str(out)])
    assert o.code == 1 and not out.exists(), o.stderr
    assert "Traceback" not in o.stderr and len(o.stderr.strip().splitlines()) == 1, o.stderr
    assert "not a TFLite file" in o.stderr, o.stderr


def test_default_output_is_not_the_input(tmp_path: Path) -> None:
    import oracle
    from fuzz import run_main

    model, samples = _small_model()
    src = tmp_path / "m.tflite"
    src.write_bytes(oracle.tf_float_convert(model))
    before = src.read_bytes()
    np.savez(tmp_path / "x.npz", **samples)
    o = run_main(["convert", str(src), "--calibration-data", str(tmp_path / "x.npz")])
    assert o.code == 0, o.stderr
    assert src.read_bytes() == before and (tmp_path / "m_quant.tflite").is_file()


# --- real float graphs (../shared/realmodels): TensorFlow's float conversion of them


@pytest.mark.skipif(not (REAL / "arm_ml_kws").is_dir(), reason=f"{REAL}/arm_ml_kws is absent (Arm's keyword spotters)")
@pytest.mark.parametrize("name", ["DNN_S", "DS_CNN_S", "CNN_S"])
def test_real_kws_float_file_gives_tensorflows_int8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    from kws_samples import mfcc_samples

    pb = (REAL / "arm_ml_kws" / f"{name}.pb").read_bytes()
    x, shape = mfcc_samples(tf, pb)
    samples = {"Mfcc": x}
    ours, theirs = _as_tensorflow(oracle.FloatGraph(pb, ["Mfcc"], ["labels_softmax"], {"Mfcc": shape}), samples,
                                  monkeypatch)
    _assert_tensorflows_file(ours, theirs, samples, ["Mfcc"])


REAL_FLOAT_FILES = ["mlcommons_tiny/ad01_fp32.tflite", "mlcommons_tiny/kws_ref_model_float32.tflite",
                    "mlcommons_tiny/pretrainedResnet.tflite", "mlcommons_tiny/vww_96_float.tflite",
                    "tflite_micro/hello_world_float.tflite", "tflite_micro/magic_wand.tflite"]
# the int8 file its publisher made of each float file with TensorFlow's converter (calibrated on real data)
PUBLISHED_INT8 = {"mlcommons_tiny/ad01_fp32.tflite": "mlcommons_tiny/ad01_int8.tflite",
                  "mlcommons_tiny/kws_ref_model_float32.tflite": "mlcommons_tiny/kws_ref_model.tflite",
                  "mlcommons_tiny/pretrainedResnet.tflite": "mlcommons_tiny/pretrainedResnet_quant.tflite",
                  "mlcommons_tiny/vww_96_float.tflite": "mlcommons_tiny/vww_96_int8.tflite",
                  "tflite_micro/hello_world_float.tflite": "tflite_micro/hello_world_int8.tflite"}

def _uniform_samples(info, amplitude: float) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """8 samples per input of a read model, uniform in [-amplitude, amplitude] (seed 0)."""
    rng = np.random.default_rng(0)
    return {info.tensors[i].name: rng.uniform(-amplitude, amplitude, (8, *info.tensors[i].shape[1:])).astype(np.float32)
            for i in info.inputs}



@pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} is absent (real third-party files)")
@pytest.mark.parametrize("path", REAL_FLOAT_FILES)
def test_real_float_files_convert_fully_int8(path: str) -> None:
    """Float files written by other people (MLPerf Tiny, TFLite Micro's examples) convert fully int8
    and run in LiteRT REF as `qconvert run` runs them."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.schema.reader import read_model

    data = (REAL / path).read_bytes()
    info = read_model(data)
    samples = _uniform_samples(info, 1.0)
    ours = convert_graph(data, calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    assert len(read_model(ours).operators) >= len(info.operators) - 1  # a RESHAPE before a FULLY_CONNECTED may go
    oracle.assert_run_equals_litert(ours, n=2)
    # error against the float file (LiteRT), on 16 held-out samples of the same distribution: at least 15 dB,
    # and no worse than the publisher's own int8 file (TensorFlow's converter, real calibration data) on the
    # same samples (measured: ours 18.4-42.4 dB, theirs 3.2-34.1 dB)
    held = {n: np.random.default_rng(1).uniform(-1, 1, (16, *v.shape[1:])).astype(np.float32)
            for n, v in samples.items()}
    snr = _snr_against_float(ours, data, held)
    assert snr >= 15.0, (path, snr)
    if path in PUBLISHED_INT8 and (REAL / PUBLISHED_INT8[path]).is_file():
        theirs = _snr_against_float((REAL / PUBLISHED_INT8[path]).read_bytes(), data, held)
        assert snr >= theirs, (path, snr, theirs)


def _snr_against_float(model: bytes, float_file: bytes, samples: dict[str, np.ndarray]) -> float:
    """SNR (dB) of an integer file's outputs against the float file's, both run in LiteRT (the float file with
    its builtin kernels, the integer one with the reference kernels)."""
    import oracle

    feeds = [{n: v[k:k + 1] for n, v in samples.items()} for k in range(len(next(iter(samples.values()))))]
    return oracle.snr_db(model, feeds, oracle.float_references(float_file, feeds, "builtin"))


@pytest.mark.skipif(not (REAL / "tflite_micro" / "dp_net.tflite").is_file(),
                    reason=f"{REAL}/tflite_micro/dp_net.tflite is absent (TFLite Micro's DPCRN noise suppressor)")
def test_dp_net_converts_fully_int8_and_runs_as_litert() -> None:
    """TFLite Micro's dp_net (TOCO, 2,338 ops: GRUs unrolled, TRANSPOSE_CONV, PRELU, the softplus log(1 +
    exp(z)), POW(x, 2) and SQRT(a² + b² + eps) as a divisor) converts fully int8. Its samples are uniform in
    [-0.01, 0.01]: on [-1, 1] exp(z) overflows float32 in the float file itself. Its two DIVs' divisor has
    values below half a step of its int8 range, which the int8 DIV kernel refuses (a zero divisor): on each
    sample LiteRT REF and `qconvert run` both stop there or give the same outputs; the file cut before the
    DIVs (the other three outputs) runs as LiteRT REF."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.errors import RunError
    from qconvert.runtime.interpreter import IntegerModel
    from qconvert.schema.reader import read_model

    data = (REAL / "tflite_micro" / "dp_net.tflite").read_bytes()
    info = read_model(data)
    samples = _uniform_samples(info, 0.01)
    ours = convert_graph(data, calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    ops = [o.builtin for o in read_model(ours).operators]
    assert {"EXP", "LOG", "SQRT", "DIV"} <= set(ops) and "POW" not in ops
    # the calibration samples, quantized as the file's inputs say
    feeds = {}
    for d in oracle.io_details(ours)["inputs"]:
        (s, z), x = d["quant"], samples[d["name"]]
        feeds[d["name"]] = np.clip(np.round(x / s + z), -128, 127).astype(np.int8)
    for k in range(4):  # LiteRT REF and `qconvert run` stop at the same DIV, or give the same outputs
        one = {name: x[k:k + 1] for name, x in feeds.items()}
        try:
            expected = oracle.run_litert(ours, one)
        except RuntimeError as exc:
            assert "DIV" in str(exc)
            with pytest.raises(RunError, match="DIV .*a divisor equal to its zero point"):
                IntegerModel(ours).run(one)
            continue
        for a, b in zip(IntegerModel(ours).run(one).values(), expected):
            np.testing.assert_array_equal(np.asarray(a), b)
    outputs = [info.tensors[i].name for i in info.outputs if "truediv" not in info.tensors[i].name]
    assert len(outputs) == 3
    cut = convert_graph(data, calibration_data=samples, outputs=outputs).model
    assert not oracle.float_tensors(cut)
    first = {name: x[:1] for name, x in feeds.items()}
    expected = oracle.run_litert(cut, first)
    got = list(IntegerModel(cut).run(first).values())
    assert len(got) == len(expected) == 3
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(a), b)
    oracle.assert_run_equals_litert(cut, n=1)
    # the fix: the divisor (and so the two DIVs) kept float runs every held-out sample in LiteRT
    held = np.random.default_rng(3)
    mixed = convert_graph(data, calibration_data=samples, keep_float=["^tf_op_layer_Sqrt/Sqrt$"]).model
    float_ops = [o.builtin for o in read_model(mixed).operators if o.builtin in ("SQRT", "DIV")]
    assert len(float_ops) == 3 and oracle.float_tensors(mixed)
    stopped = 0
    for _ in range(8):
        x = {d["name"]: np.clip(np.round(held.uniform(-0.01, 0.01, (1, *d["shape"][1:])) / d["quant"][0]
                                         + d["quant"][1]), -128, 127).astype(np.int8)
             for d in oracle.io_details(mixed)["inputs"]}
        oracle.run_litert(mixed, x)
        try:
            oracle.run_litert(ours, x)
        except RuntimeError:
            stopped += 1
    assert stopped > 0  # the all-int8 file stops on some of the same inputs


def test_compare_takes_the_float_file(tmp_path: Path) -> None:
    """`qconvert compare model.tflite model_quant.tflite`: every int8 op against the float file's tensor,
    with the float side computed from the .tflite as from the .pb it came from."""
    import oracle

    from qconvert.api import convert_graph
    from qconvert.tools.compare import compare

    model, samples = _small_model()
    flt = tmp_path / "m.tflite"
    flt.write_bytes(oracle.tf_float_convert(model))
    q = tmp_path / "q.tflite"
    q.write_bytes(convert_graph(flt, calibration_data=samples).model)
    pb = tmp_path / "m.pb"
    pb.write_bytes(model.graph_def)
    a, b = compare(flt, q, samples), compare(pb, q, samples, inputs=model.inputs, outputs=model.outputs)
    assert not a.unmapped and len(a.rows) == len(b.rows) > 0
    for x, y in zip(a.rows, b.rows):
        assert x.e2e.snr_db() == pytest.approx(y.e2e.snr_db(), abs=0.5) and x.e2e.snr_db() > 20, (x, y)


# --- every mode on a float .tflite (issue 36): TensorFlow's float file given to qconvert in a mode is
# TensorFlow's own conversion of the same graph in that mode, compared as the .pb path's tests compare
# (test_int16.py, test_dynamic_range.py, test_per_tensor_weights.py, test_model_io_types.py), given
# TensorFlow's recorded ranges where calibrated

MODE_MODELS = ["conv_relu_perchannel", "depthwise", "residual", "sigmoid_tanh_two_outputs", "small_classifier",
               "MobileNetV2"]


def _mode_model(name: str) -> tuple:  # type: ignore[type-arg]
    """(FloatGraph, samples, input ranges): a QAT-corpus twin, or keras.applications MobileNetV2 at 32 px."""
    import corpus
    import oracle

    if name == "MobileNetV2":
        import keras_apps

        pb, shape = keras_apps.build(name)
        samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
        return oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape}), samples, {"input": (-1.0, 1.0)}
    m = corpus.build_float_graph(name)
    rng = np.random.default_rng(3)
    samples = {n: rng.uniform(*m.input_ranges[n], (16, *m.shapes[n][1:])).astype(np.float32) for n in m.inputs}
    return oracle.FloatGraph(m.graph_def, m.inputs, m.outputs, m.shapes), samples, dict(m.input_ranges)


def _ours_given_tensorflows_ranges(model, samples: dict[str, np.ndarray],  # type: ignore[no-untyped-def]
                                   monkeypatch: pytest.MonkeyPatch, **options) -> bytes:
    """qconvert's file from TensorFlow's float .tflite in a mode, calibrated with TensorFlow's ranges."""
    import oracle

    from qconvert.api import convert_graph

    flt = oracle.tf_float_convert(model)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    return convert_graph(flt, calibration_data=samples, **options).model


@pytest.mark.parametrize("name", MODE_MODELS)
def test_16x8_from_the_float_file_equals_tensorflows_16x8_file(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    import test_int16

    model, samples, _ = _mode_model(name)
    theirs = oracle.tf_ptq_convert(model, samples, int16=True)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch, activations="int16")
    test_int16._assert_same(ours, theirs, samples, model.inputs)


@pytest.mark.parametrize("weights", ["int8", "float16"])
@pytest.mark.parametrize("name", MODE_MODELS)
def test_dynamic_range_and_float16_from_the_float_file_equal_tensorflows(name: str, weights: str) -> None:
    import oracle
    from file_compare import compare_files, compare_outputs, tf_dynamic_range

    from qconvert.api import convert_graph

    model, _, _ = _mode_model(name)
    theirs = tf_dynamic_range(model.graph_def, model.inputs, model.outputs, model.shapes, weights == "float16")
    ours = convert_graph(oracle.tf_float_convert(model), activations="float", weights=weights).model
    assert compare_files(ours, theirs) > 0
    compare_outputs(ours, theirs, model.shapes, n=2)


@pytest.mark.parametrize("name", [n for n in MODE_MODELS if n != "sigmoid_tanh_two_outputs"] + ["requantize"])
def test_per_tensor_weights_from_the_float_file_equal_tensorflows(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    import test_per_tensor_weights

    model, samples, _ = _mode_model(name)
    theirs = oracle.tf_ptq_convert(model, samples, per_tensor=True)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch, per_tensor_weights=True)
    test_per_tensor_weights._assert_same(ours, theirs, samples, model.inputs)


IO_CASES = [("two_inputs_arith", "uint8", "float32", False), ("sigmoid_tanh_two_outputs", "float32", "float32", False),
            ("conv_relu_perchannel", "uint8", "uint8", False), ("MobileNetV2", "float32", "uint8", False),
            ("sigmoid_tanh_two_outputs", "float32", "int16", True), ("residual", "float32", "float32", True)]


@pytest.mark.parametrize("name, it, ot, int16", IO_CASES, ids=[f"{n}-{i}-{o}{'-16x8' if s else ''}"
                                                                for n, i, o, s in IO_CASES])
def test_model_io_types_from_the_float_file_equal_tensorflows(name: str, it: str, ot: str, int16: bool,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle
    import test_model_io_types

    model, samples, ranges = _mode_model(name)
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16, input_type=it, output_type=ot)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch, activations="int16" if int16 else "int8",
                                          input_type=it, output_type=ot)
    test_model_io_types._assert_same(ours, theirs, ranges)


@pytest.mark.parametrize("name", ["conv_relu_perchannel", "small_classifier", "MobileNetV2"])
def test_int4_weights_from_the_float_file_equal_the_frozen_graphs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow has no int4 post-training mode: the oracle is the file qconvert writes from the frozen
    graph (its INT4 weights checked by hand in tests/e2e/test_low_bit.py), both given TensorFlow's
    ranges, and the hand rule: every INT4 weight clip(round(w / s), -7, 7) with s = max|w| / 7 of its
    output channel, from the float file's own weights."""
    import oracle
    from file_compare import structure

    from qconvert.api import convert_graph
    from qconvert.schema.reader import read_model

    model, samples, _ = _mode_model(name)
    ours = _ours_given_tensorflows_ranges(model, samples, monkeypatch, weights="int4")
    oracle.use_tensorflows_rsqrt(monkeypatch)  # the float file's BatchNorms are folded with TensorFlow's rsqrt
    from_pb = convert_graph(model.graph_def, inputs=model.inputs, outputs=model.outputs, calibration_data=samples,
                            weights="int4").model
    a, b = structure(ours), structure(from_pb)
    for key in ("inputs", "outputs", "ops", "activations", "constants"):
        assert a[key] == b[key], f"{key}: ours {str(a[key])[:300]}\n  .pb {str(b[key])[:300]}"
    report = oracle.compare_ptq(ours, from_pb, samples, model.inputs)
    assert report.outputs > 0 and report.max_lsb == 0 and not report.weight_diffs, report
    flt = read_model(oracle.tf_float_convert(model)).subgraphs[0]
    float_weights: dict[tuple, list] = {}
    for t in flt.tensors:
        if t.data is not None and t.dtype == "float32":
            float_weights.setdefault(tuple(t.shape), []).append(t.array().astype(np.float32))

    def by_hand(w: np.ndarray, t) -> bool:  # type: ignore[no-untyped-def]
        m_abs = np.abs(w.reshape(w.shape[0], -1)).max(axis=1).astype(np.float64)
        x = w.astype(np.float64) / (m_abs / 7).reshape(-1, *[1] * (w.ndim - 1))
        return (np.array_equal(np.asarray(t.scale, np.float32), (m_abs / 7).astype(np.float32))
                and np.array_equal(t.array(), np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -7, 7).astype(np.int8)))

    sg = read_model(ours).subgraphs[0]
    int4 = [sg.tensors[o.inputs[1]] for o in sg.operators
            if len(o.inputs) > 1 and sg.tensors[o.inputs[1]].dtype == "int4"]
    assert int4
    for t in int4:  # the float file's weight it came from (several may share a shape)
        assert any(by_hand(w, t) for w in float_weights[tuple(t.shape)]), t.name


# --- POW (older converters wrote tf.pow(x, 2) as POW: TFLite Micro's dp_net)


def _pow_graph(exponent: float, absolute: bool = False):  # type: ignore[no-untyped-def]
    import oracle

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8], name="input")
        tf.identity(tf.pow((tf.abs(x) if absolute else x) * 1.5, exponent), name="out")
    return oracle.FloatGraph(g.as_graph_def().SerializeToString(), ["input"], ["out"], {"input": [1, 8]})


def _pow_file(exponent: float, absolute: bool = False) -> bytes:
    """A float file with POW(x, exponent): TensorFlow 2.21 writes tf.pow(x, 3) as POW (x**2 as MUL, x**0.5
    as SQRT), so the POW of x**3 gets the exponent wanted."""
    import oracle

    def set_exponent(m):  # type: ignore[no-untyped-def]
        for t in m.subgraphs[0].tensors:
            buf = m.buffers[t.buffer]
            if t.type == 0 and buf.data is not None and len(buf.data) == 4 \
                    and np.frombuffer(bytes(buf.data), np.float32)[0] == 3.0:
                buf.data = np.frombuffer(np.float32(exponent).tobytes(), np.uint8)

    flt = oracle.tf_float_convert(_pow_graph(3.0, absolute))
    assert "POW" in oracle.op_names(flt)
    return oracle.repack(flt, set_exponent)


def test_pow_of_2_is_tensorflows_mul(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow 2.21 converts tf.pow(x, 2) to MUL(x, x) and quantizes it (measured); a float file's
    POW(x, 2) gives TensorFlow's int8 file of that graph, given its ranges."""
    import oracle

    from qconvert.api import convert_graph

    model = _pow_graph(2.0)
    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    assert oracle.op_names(theirs).count("MUL") == 2
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(_pow_file(2.0), calibration_data=samples).model
    _assert_tensorflows_file(ours, theirs, samples, ["input"])


def test_pow_of_half_is_tensorflows_sqrt(monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow 2.21 converts tf.pow(x, 0.5) to SQRT (int8 v2, measured); a float file's POW(x, 0.5)
    (TOCO wrote it so: dp_net) gives TensorFlow's int8 file of that graph, given its ranges."""
    import oracle

    from qconvert.api import convert_graph

    model = _pow_graph(0.5, absolute=True)
    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    assert "SQRT" in oracle.op_names(theirs) and "POW" not in oracle.op_names(theirs)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(_pow_file(0.5, absolute=True), calibration_data=samples).model
    _assert_tensorflows_file(ours, theirs, samples, ["input"])


def test_other_pow_is_refused_in_one_line_as_tensorflow_leaves_it_float(tmp_path: Path) -> None:
    """TensorFlow 2.21 has no int8 POW: it writes DEQUANTIZE, POW, QUANTIZE even under TFLITE_BUILTINS_INT8."""
    import oracle
    from fuzz import run_main

    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(_pow_graph(3.0), samples)
    assert [n for n in oracle.op_names(theirs) if n != "MUL"] == ["DEQUANTIZE", "POW", "QUANTIZE"]
    src = tmp_path / "pow3.tflite"
    src.write_bytes(_pow_file(3.0))
    np.savez(tmp_path / "x.npz", **samples)
    out = tmp_path / "out.tflite"
    o = run_main([str(src), "--calibration-data", str(tmp_path / "x.npz"), "-o", str(out)])
    assert o.code == 1 and not out.exists() and len(o.stderr.strip().splitlines()) == 1, o.stderr
    assert "POW (exponent 3)" in o.stderr and "TensorFlow 2.21 leaves float" in o.stderr, o.stderr


def _split_model() -> bytes:
    """A float .tflite with CONV_2D, MAX_POOL_2D, SPLIT, MUL, CONCATENATION, RESHAPE and
    FULLY_CONNECTED (TensorFlow's float conversion), for the damage tests below."""
    rng = np.random.default_rng(0)
    w = tf.constant(rng.normal(size=(3, 3, 3, 8)).astype(np.float32) * 0.3)
    d = tf.constant(rng.normal(size=(392, 4)).astype(np.float32) * 0.1)

    @tf.function(input_signature=[tf.TensorSpec([1, 16, 16, 3], tf.float32, name="inp")])
    def f(x):  # type: ignore[no-untyped-def]
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, w, 1, "VALID")), 2, 2, "VALID")
        a, b = tf.split(h, 2, axis=-1)
        return tf.matmul(tf.reshape(tf.concat([a * 2.0, b], -1), [1, -1]), d)

    return tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f).convert()


def _op(m, builtin):  # type: ignore[no-untyped-def]  # the first operator of that builtin in a ModelT
    from ai_edge_litert import schema_py_generated as S

    code = getattr(S.BuiltinOperator, builtin)
    return next(o for o in m.subgraphs[0].operators if m.operatorCodes[o.opcodeIndex].builtinCode == code)


def _int8_weight(scales: int, zero_points: int, axis: int):  # type: ignore[no-untyped-def]
    def edit(m):  # type: ignore[no-untyped-def]
        from ai_edge_litert import schema_py_generated as S

        t = m.subgraphs[0].tensors[_op(m, "CONV_2D").inputs[1]]
        t.type = S.TensorType.INT8
        buf = S.BufferT()
        buf.data = np.zeros(216, np.uint8)
        m.buffers.append(buf)
        t.buffer = len(m.buffers) - 1
        q = S.QuantizationParametersT()
        q.scale, q.zeroPoint = np.full(scales, 0.01, np.float32), np.zeros(zero_points, np.int64)
        q.quantizedDimension = axis
        t.quantization = q
    return edit


DAMAGE = {  # found by a reviewer's mutations: each was "internal error" in convert or compare
    "split_without_x": lambda m: setattr(_op(m, "SPLIT"), "inputs", list(_op(m, "SPLIT").inputs)[:1]),
    "split_axis_absent": lambda m: _op(m, "SPLIT").inputs.__setitem__(0, -1),
    "int8_weight_axis_out_of_range": _int8_weight(8, 8, 9),
    "int8_weight_scales_and_zero_points_disagree": _int8_weight(5, 3, 0),
    "conv_stride_0": lambda m: setattr(_op(m, "CONV_2D").builtinOptions, "strideW", 0),
    "concat_axis_out_of_range": lambda m: setattr(_op(m, "CONCATENATION").builtinOptions, "axis", 9),
    "fully_connected_without_weights": lambda m: setattr(_op(m, "FULLY_CONNECTED"), "inputs",
                                                         list(_op(m, "FULLY_CONNECTED").inputs)[:1]),
    "output_is_the_input": lambda m: setattr(m.subgraphs[0], "outputs", np.array([m.subgraphs[0].inputs[0]], np.int32)),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_float_file_is_one_line_in_convert_and_compare(damage: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Each damage: `convert` exits non-zero with one line and writes nothing (or, for a file whose
    output is its input, converts that trivial model), and `compare` against the undamaged file's int8
    conversion exits non-zero with one line; never an internal error."""
    import oracle

    from qconvert.cli import main

    good = _split_model()
    (tmp_path / "good.tflite").write_bytes(good)
    np.savez(tmp_path / "x.npz", inp=np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype(np.float32))
    assert main([str(tmp_path / "good.tflite"), "--calibration-data", str(tmp_path / "x.npz"),
                 "-o", str(tmp_path / "q.tflite")]) == 0
    (tmp_path / "bad.tflite").write_bytes(oracle.repack(good, DAMAGE[damage]))
    capsys.readouterr()
    out = tmp_path / "o.tflite"
    rc = main([str(tmp_path / "bad.tflite"), "--calibration-data", str(tmp_path / "x.npz"), "-o", str(out)])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("qconvert: ") and "note:" not in line]
    if damage != "output_is_the_input":
        assert rc in (1, 2) and not out.exists() and len(err) == 1 and "internal error" not in err[0], err
    rc = main(["compare", str(tmp_path / "bad.tflite"), str(tmp_path / "q.tflite"), "--data", str(tmp_path / "x.npz")])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("qconvert: ")]
    assert rc in (1, 2) and len(err) == 1 and "internal error" not in err[0], err


def test_outputs_naming_a_constant_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--outputs` naming one of the file's constants (a weight): one line, exit 2 (was an internal KeyError)."""
    from qconvert.cli import main
    from qconvert.schema.reader import read_model

    good = _split_model()
    (tmp_path / "good.tflite").write_bytes(good)
    np.savez(tmp_path / "x.npz", inp=np.zeros((2, 16, 16, 3), np.float32))
    weight = next(t.name for t in read_model(good).subgraphs[0].tensors if t.data is not None)
    rc = main([str(tmp_path / "good.tflite"), "--calibration-data", str(tmp_path / "x.npz"), "--outputs", weight,
               "-o", str(tmp_path / "o.tflite")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "is a constant" in err[0] and not (tmp_path / "o.tflite").exists(), err
