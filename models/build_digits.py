"""Train the digits demo model with QAT and freeze it (needs TensorFlow, tf-keras,
tensorflow-model-optimization and scikit-learn).

    python models/build_digits.py

scikit-learn ships the 8x8 handwritten digits (1,797 images, 10 classes); nothing is
downloaded. The images are scaled to [-1, 1], split 80/20 with a fixed seed, and a
small CNN (conv-BN-ReLU x2, global average pooling, dense, softmax) is trained with
tensorflow-model-optimization's quantization-aware training, then frozen with
``convert_variables_to_constants_v2``. Written next to this script:

* ``digits_qat.pb``   the frozen QAT graph (input ``input`` [1,8,8,1], output ``Identity``)
* ``digits_test.npz`` the held-out images (float32, [-1, 1]) and labels
* ``digits_qat.json`` the QAT model's own float accuracy on them, measured in TensorFlow

``models/evaluate_digits.py`` then measures the int8 accuracy of a converted file.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

HERE = Path(__file__).resolve().parent
SEED = 7


def load_digits() -> tuple:
    import numpy as np
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = (d.images.astype(np.float32) / 8.0 - 1.0)[..., None]  # 0..16 -> [-1, 1]
    y = d.target.astype(np.int64)
    order = np.random.default_rng(SEED).permutation(len(x))
    x, y = x[order], y[order]
    split = int(len(x) * 0.8)
    return (x[:split], y[:split]), (x[split:], y[split:])


def build_model(keras):
    inp = keras.Input((8, 8, 1), name="image")
    x = keras.layers.Conv2D(16, 3, padding="same", use_bias=False)(inp)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(10)(x)
    out = keras.layers.Softmax()(x)
    return keras.Model(inp, out)


def main() -> int:
    import numpy as np
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    import tf_keras as keras
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.utils.set_random_seed(SEED)
    tf.config.experimental.enable_op_determinism()
    (x_train, y_train), (x_test, y_test) = load_digits()
    model = build_model(keras)
    model.compile(keras.optimizers.Adam(1e-2), "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x_train, y_train, epochs=15, batch_size=32, verbose=0, shuffle=False)
    q = tfmot.quantization.keras.quantize_model(model)
    q.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy", metrics=["accuracy"])
    q.fit(x_train, y_train, epochs=5, batch_size=32, verbose=0, shuffle=False)
    qat_acc = float(np.mean(np.argmax(q.predict(x_test, verbose=0), axis=1) == y_test))

    fn = tf.function(lambda x: q(x, training=False)).get_concrete_function(
        tf.TensorSpec((1, 8, 8, 1), tf.float32, name="input")
    )
    frozen = convert_variables_to_constants_v2(fn)
    (HERE / "digits_qat.pb").write_bytes(frozen.graph.as_graph_def().SerializeToString(deterministic=True))
    np.savez_compressed(HERE / "digits_test.npz", input=x_test, labels=y_test)  # "input": the model input's name
    info = {"qat_float_accuracy": qat_acc, "test_samples": int(len(y_test)), "input_range": [-1.0, 1.0],
            "seed": SEED, "built_with": {"tensorflow": tf.__version__, "tfmot": tfmot.__version__}}
    (HERE / "digits_qat.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote digits_qat.pb; QAT model accuracy in TensorFlow: {qat_acc:.4f} on {len(y_test)} test images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
