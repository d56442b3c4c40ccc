"""Models no keras.applications architecture covers, under post-training quantization, against
TensorFlow's converter (issue 16): a Conv1D audio net (strided and dilated Conv1D, BatchNorm,
PReLU, MaxPooling1D) and unrolled recurrent nets (GRU, two stacked LSTMs).

Each is a small ``tf_keras`` model from a fixed seed, trained a few epochs on random data so
its activations are not those of a fresh initialisation, frozen, and calibrated on 16 samples.
As in test_keras_apps_ptq.py qconvert is given TensorFlow's recorded ranges and TensorFlow's
rsqrt (BatchNorm), so that the comparison is of everything after calibration: the ops, every
scale and zero point, every weight, every output byte in LiteRT REF. Where TensorFlow leaves
part of a model in float (it does on some LSTMs: a DEQUANTIZE and a float SPLIT at a first
step), ours must still be fully int8 and no further from the float model than TensorFlow's.
``qconvert run`` must equal LiteRT REF on each.
"""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the models and is the oracle")
keras = pytest.importorskip("tf_keras", reason="the models are tf-keras models")


def _audio(L):  # type: ignore[no-untyped-def]
    inp = keras.Input((64, 1))
    x = L.PReLU(shared_axes=[1])(L.Conv1D(8, 5, strides=2, padding="same")(inp))
    x = L.Conv1D(16, 3, padding="same", dilation_rate=2)(x)  # SpaceToBatchND around the conv
    x = L.PReLU(shared_axes=[1])(L.BatchNormalization()(x))  # bias and BatchNorm after a Squeeze
    x = L.MaxPooling1D(2)(x)
    x = L.PReLU()(L.Conv1D(16, 3, padding="valid")(x))  # one alpha per element
    x = L.GlobalAveragePooling1D()(x)
    return keras.Model(inp, L.Dense(10)(x)), [1, 64, 1]


def _gru(L):  # type: ignore[no-untyped-def]
    inp = keras.Input((6, 8))
    return keras.Model(inp, L.Dense(4)(L.GRU(16, unroll=True)(inp))), [1, 6, 8]


def _lstm(L):  # type: ignore[no-untyped-def]
    inp = keras.Input((6, 8))
    x = L.LSTM(16, unroll=True, return_sequences=True)(inp)
    return keras.Model(inp, L.Dense(4)(L.LSTM(8, unroll=True)(x))), [1, 6, 8]


def _rescaled(L):  # type: ignore[no-untyped-def]
    # Rescaling(1/127.5, -1): a scalar MUL, then an ADD, before VALID convolutions; a scalar MUL
    # read by two convolutions and a pool; a Rescaling with an offset before a Dense
    inp = keras.Input((16, 16, 3))
    x = L.Rescaling(1 / 127.5, offset=-1)(inp)
    x = L.Conv2D(8, 3, padding="valid", activation="relu")(x)
    x = L.DepthwiseConv2D(3, padding="valid", activation="relu")(L.Rescaling(0.5)(x))
    s = L.Rescaling(2.0)(x)
    x = L.Concatenate()([L.Conv2D(4, 1)(s), L.Conv2D(4, 3, padding="same")(s), L.MaxPooling2D(1)(s)])
    x = L.Rescaling(0.25, offset=0.5)(L.GlobalAveragePooling2D()(x))  # into the Dense's weights and bias
    return keras.Model(inp, L.Dense(10)(x)), [1, 16, 16, 3]


def _normalized(L):  # type: ignore[no-untyped-def]
    # Keras' Normalization (per-channel mean and variance) after Rescaling(1/255) before a SAME
    # convolution, as EfficientNetV2's include_preprocessing writes it: the per-channel MUL stays
    inp = keras.Input((16, 16, 3))
    x = L.Rescaling(1 / 255)(inp)
    x = L.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.229 ** 2, 0.224 ** 2, 0.225 ** 2])(x)
    x = L.Conv2D(8, 3, strides=2, padding="same", activation="relu")(x)
    return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(x))), [1, 16, 16, 3]


MODELS = {"audio_conv1d_prelu": _audio, "gru_unrolled": _gru, "lstm_unrolled": _lstm, "rescaled_valid_convs": _rescaled,
          "normalized_input": _normalized}


def _build(name: str) -> tuple[bytes, list[int], np.ndarray]:
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    model, shape = MODELS[name](keras.layers)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (64, *shape[1:])).astype(np.float32)
    y = rng.normal(size=(64, model.output_shape[-1])).astype(np.float32)
    model.compile("adam", "mse")
    model.fit(x, y, epochs=5, batch_size=8, verbose=0, shuffle=False)
    fn = tf.function(lambda t: model(t, training=False))
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(tf.TensorSpec(shape, tf.float32, name="input")))
    return frozen.graph.as_graph_def().SerializeToString(), shape, x[:16]


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[bytes, list[int], np.ndarray]]:
    return {}


def _model(name: str, cache: dict) -> tuple[bytes, list[int], np.ndarray]:
    if name not in cache:
        cache[name] = _build(name)
    return cache[name]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_matches_tensorflows_ptq(name: str, built, monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    from qconvert.api import convert_graph

    pb, shape, x = _model(name, built)
    samples = {"input": x}
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
    assert not oracle.float_tensors(ours)
    if oracle.float_tensors(theirs):
        errors = oracle.error_against_graph(pb, {"ours": ours, "tf": theirs}, n_inputs=64)
        assert errors["ours"][0] <= errors["tf"][0] and errors["ours"][1] <= errors["tf"][1], errors
        return
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 10 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_lsb == 0, report
    # int32 biases too (compare_ptq leaves them to the scales): a bias folded from an ADD before a
    # VALID convolution is a float32 sum whose last bit shows here
    assert _int32_constants(ours) == _int32_constants(theirs)


def _int32_constants(tflite: bytes) -> list[tuple[str, bytes]]:
    """The int32 biases of the convolutions and FULLY_CONNECTEDs, in op order, all-zero ones left
    out (a zero bias and none give the same sums; an unrolled LSTM's recurrent MatMuls have none in
    both files since issue 35)."""
    import oracle

    weighted = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"}
    return [(op, t[4]) for op, ins, _ in oracle._ops_with_tensors(tflite) if op in weighted for t in ins
            if t and t[1] == 2 and t[4] is not None and any(t[4])]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_run_equals_litert(name: str, built) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from qconvert.api import convert_graph
    from qconvert.runtime.interpreter import IntegerModel

    pb, shape, x = _model(name, built)
    model = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data={"input": x}).model
    it = Interpreter(model_content=model, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    ours = IntegerModel(model)
    d = it.get_input_details()[0]
    for q in np.random.default_rng(5).integers(-128, 128, (8, *shape)).astype(np.int8):
        it.set_tensor(d["index"], q)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        np.testing.assert_array_equal(np.asarray(next(iter(ours.run({"input": q}).values()))), want)
