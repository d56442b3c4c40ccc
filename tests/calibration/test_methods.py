"""Calibration methods: hand-derived checks of each, then what they do to real models.

* A float CNN trained on scikit-learn's digits, converted with every method: int8 top-1
  accuracy in LiteRT against the float model's in TensorFlow (minmax within 1 point).
* A model with a heavy-tailed activation (Student-t inputs): output SNR of the int8
  model in LiteRT against TensorFlow's float output; percentile or entropy must beat
  minmax, whose range the rare outliers stretch.
Run with ``-s`` to see the tables.
"""

from __future__ import annotations

import numpy as np
import pytest

from qconvert.calibration import methods as cm

METHODS = ["minmax", "percentile", "entropy", "mse"]


def _hist(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    counts, edges = np.histogram(values, bins=cm.BINS, range=(float(values.min()), float(values.max())))
    return counts, edges


def test_percentile_drops_a_rare_outlier() -> None:
    values = np.concatenate([np.linspace(0.0, 1.0, 100_000), [50.0]])  # 1 in 100,001 < 0.01%
    lo, hi = cm.percentile(*_hist(values), 99.99)
    assert lo == 0.0
    assert 0.99 <= hi <= 1.0 + 50.0 / cm.BINS  # within one bin of the uniform part's end
    lo, hi = cm.percentile(*_hist(values), 100.0)
    assert hi == 50.0


def test_percentile_is_two_sided() -> None:
    values = np.concatenate([[-40.0], np.linspace(-1.0, 1.0, 100_000), [40.0]])
    lo, hi = cm.percentile(*_hist(values), 99.99)
    step = 80.0 / cm.BINS
    assert -1.0 - step <= lo <= -0.99 and 0.99 <= hi <= 1.0 + step


def test_mse_clips_outliers_but_not_the_bulk() -> None:
    rng = np.random.default_rng(0)
    # 1e6 values in [0, 1] and one at 5: keeping [0, 5] costs about 1e6 * (5/255)**2 / 12 = 32,
    # clipping at 1 costs (5 - 1)**2 = 16 plus a finer grid: the minimum clips
    values = np.concatenate([rng.uniform(0.0, 1.0, 1_000_000), [5.0]])
    lo, hi = cm.mse(*_hist(values))
    assert 0.0 <= lo < 1e-3 and 0.9 <= hi < 4.0
    # with a single far outlier (30) among few values, keeping it is cheaper: no clipping
    lo, hi = cm.mse(*_hist(np.concatenate([rng.uniform(0.0, 1.0, 50_000), [30.0]])))
    assert hi > 20.0
    lo, hi = cm.mse(*_hist(rng.uniform(-1.0, 1.0, 50_000)))  # no outlier: (almost) the full range
    assert hi >= 0.9 and lo <= -0.9


def test_entropy_on_a_gaussian_clips_a_few_sigmas_out() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(0.0, 1.0, 200_000)
    lo, hi = cm.entropy(*_hist(values))
    assert lo == -hi and 2.0 < hi < float(np.abs(values).max())
    lo, hi = cm.entropy(*_hist(np.abs(values)))  # one sign: [0, t]
    assert lo == 0.0 and 2.0 < hi <= float(np.abs(values).max()) + 1e-9  # 256 levels: little or no clipping


# --- real models -------------------------------------------------------------------------

def _freeze(tf, fn, shape):  # type: ignore[no-untyped-def]
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    concrete = tf.function(fn).get_concrete_function(tf.TensorSpec(shape, tf.float32, name="input"))
    frozen = convert_variables_to_constants_v2(concrete)
    gd = frozen.graph.as_graph_def()
    return gd.SerializeToString(), [t.name.split(":")[0] for t in frozen.outputs]


def _litert_outputs(tflite: bytes, x: np.ndarray) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    (inp,), (out,) = it.get_input_details(), it.get_output_details()
    s_in, z_in = inp["quantization"]
    s_out, z_out = out["quantization"]
    rows = []
    for sample in x:
        it.set_tensor(inp["index"], np.clip(np.round(sample[None] / s_in + z_in), -128, 127).astype(np.int8))
        it.invoke()
        rows.append((it.get_tensor(out["index"]).astype(np.float32) - z_out) * s_out)
    return np.concatenate(rows)


@pytest.fixture(scope="module")
def tf():  # type: ignore[no-untyped-def]
    pytest.importorskip("sklearn", reason="scikit-learn ships the digits data")
    return pytest.importorskip("tensorflow", reason="the float models are built and run with TensorFlow")


def test_digits_float_cnn_accuracy_per_method(tf) -> None:  # type: ignore[no-untyped-def]
    from sklearn.datasets import load_digits

    from qconvert.api import convert_graph

    keras = tf.keras
    d = load_digits()
    x = (d.images.astype(np.float32) / 8.0 - 1.0)[..., None]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(7).permutation(len(x))
    x, y = x[order], y[order]
    split = int(len(x) * 0.8)
    (x_train, y_train), (x_test, y_test) = (x[:split], y[:split]), (x[split:], y[split:])
    keras.utils.set_random_seed(7)
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(16, 3, padding="same"), keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.Conv2D(32, 3, strides=2, padding="same"), keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10), keras.layers.Softmax(),
    ])
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy")
    model.fit(x_train, y_train, epochs=40, batch_size=32, verbose=0)
    float_acc = float(np.mean(np.argmax(model.predict(x_test, verbose=0), axis=1) == y_test))
    pb, outputs = _freeze(tf, lambda inp: model(inp, training=False), [1, 8, 8, 1])
    calib = {"input": x_train[:256]}
    print(f"\ndigits float CNN: float accuracy {100 * float_acc:.2f}% on {len(y_test)} test images")
    accs = {}
    for method in METHODS:
        tflite = convert_graph(pb, outputs=outputs, calibration_data=calib, calibration_method=method).model
        probs = _litert_outputs(tflite, x_test)
        accs[method] = float(np.mean(np.argmax(probs, axis=1) == y_test))
        print(f"  {method:10} int8 accuracy {100 * accs[method]:.2f}% ({100 * (accs[method] - float_acc):+.2f} points)")
    assert float_acc > 0.9
    assert accs["minmax"] >= float_acc - 0.01
    for method in METHODS:
        assert accs[method] >= float_acc - 0.05, method


def test_heavy_tailed_activation_snr_per_method(tf) -> None:  # type: ignore[no-untyped-def]
    from qconvert.api import convert_graph

    rng = np.random.default_rng(3)
    w1 = rng.normal(0, 0.3, (16, 32)).astype(np.float32)
    b1 = rng.normal(0, 0.1, 32).astype(np.float32)
    w2 = rng.normal(0, 0.3, (32, 8)).astype(np.float32)
    tf1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        inp = tf1.placeholder(tf.float32, [1, 16], name="input")
        h = tf.nn.relu(tf.nn.bias_add(tf.matmul(inp, tf.constant(w1)), tf.constant(b1)))
        # a saturating head, so that the output SNR measures the typical values, not the outliers
        tf.identity(tf.tanh(tf.matmul(h, tf.constant(w2))), name="output")
    pb = graph.as_graph_def().SerializeToString()

    def data(n: int, seed: int) -> np.ndarray:
        return np.random.default_rng(seed).standard_t(1.5, size=(n, 16)).astype(np.float32)

    calib, test = data(512, 10), data(512, 11)
    with tf1.Session(graph=graph) as sess:
        ref = np.concatenate([sess.run("output:0", {"input:0": row[None]}) for row in test])
    snr = {}
    print("\nheavy-tailed activation (Student-t, 1.5 degrees of freedom): output SNR")
    for method in METHODS:
        tflite = convert_graph(pb, outputs=["output"], calibration_data={"input": calib},
                               calibration_method=method).model
        got = _litert_outputs(tflite, test)
        snr[method] = 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - got) ** 2))
        print(f"  {method:10} {snr[method]:6.2f} dB")
    assert max(snr["percentile"], snr["entropy"]) > snr["minmax"]
