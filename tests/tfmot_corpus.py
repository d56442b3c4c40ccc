"""QAT graphs made the way real users make them: Keras 2 + tensorflow-model-optimization.

Each model is a ``tf_keras`` model wrapped by ``tfmot.quantization.keras.quantize_model``,
trained on random data (fixed seeds) so that the FakeQuant ranges are realistic,
then frozen with ``convert_variables_to_constants_v2`` on
``tf.function(lambda x: q(x, training=False))`` (placeholder "input", batch 1; the
output node is "Identity") and serialized with ``SerializeToString(deterministic=True)``.

Training data: "images" with 256 grey levels scaled to [-1, 1]
(``k / 127.5 - 1`` for k in 0..255), so the input quantizer (tfmot's
AllValuesQuantizer: running min/max over everything it saw) learns exactly
[-1, 1], the range every model gets on the command line. Labels are random
classes 0..9; Adam(1e-3), sparse categorical cross-entropy, no shuffling.

Training length: tfmot's activation quantizers (MovingAverageQuantizer) start at
[-6, 6] and follow the batch min/max with a hard-coded EMA decay of 0.999, so after
a "few steps" (24) every activation range is still about [-5.9, 5.9], even after a
ReLU. The models are therefore trained for 256 to 3072 steps with small batches
(``_BUILDERS``): ranges then move to [-6 * 0.999**steps, max] (e.g. [-0.77, 3.0] after
2048 steps; every ReLU output's min is that same negative number, as in real tfmot
models) and differ from layer to layer. The MobileNets get fewer steps (cost), so
their ranges stay nearer [-6, 6].

Building needs TensorFlow, tf-keras and tensorflow-model-optimization and takes
5 s to 80 s per model on 2 cores (about 4 minutes for all), so every model is
built in a fresh subprocess (``BUILD_ENV`` must be set before TensorFlow is
imported, and a test session may have imported it already) and cached on disk:
``$QCONVERT_CACHE/tfmot/`` or ``~/.cache/qconvert-tests/tfmot/``, keyed by name,
``CORPUS_VERSION``, the versions of the three packages and a hash of the model's
recipe (its builder entry and source, ``_training_data``, ``_build_in_process``).
Within a run the cache is the source of truth. Building twice on the same machine
gives identical GraphDef bytes (``tests/test_tfmot_corpus.py`` checks two small
models; ``python tests/tfmot_corpus.py --check-determinism`` checks all).

API mirrors ``tests/corpus.py``: ``TFMOT_MODEL_NAMES``, ``build_tfmot_model(name)``,
``build_tfmot_corpus()``; models are ``corpus.CorpusModel``.

``python tests/tfmot_corpus.py [names...]`` builds (or loads) and lists the models.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import CorpusModel  # noqa: E402

# Bump when a builder, the training recipe or the freezing changes.
CORPUS_VERSION = "1"

INPUT_NAME = "input"
INPUT_RANGE = (-1.0, 1.0)
NUM_CLASSES = 10

# Environment of the build subprocess (must be set before TensorFlow is imported).
BUILD_ENV = {
    "TF_USE_LEGACY_KERAS": "1",  # tfmot 0.8 needs Keras 2 (tf_keras)
    "TF_ENABLE_ONEDNN_OPTS": "0",  # plain Eigen kernels: same float results on every x86 CPU
    "TF_DETERMINISTIC_OPS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "CUDA_VISIBLE_DEVICES": "",
    "PYTHONHASHSEED": "0",
}


# ---------------------------------------------------------------------------
# The models. Each builder gets the ``tf_keras`` module and returns
# (float Keras model, input shape with batch 1, description, training settings).
# ---------------------------------------------------------------------------


def _mobilenet_v2(keras: Any) -> tuple[Any, list[int], str]:
    model = keras.applications.MobileNetV2(
        input_shape=(64, 64, 3), alpha=0.35, weights=None, classes=NUM_CLASSES
    )
    return model, [1, 64, 64, 3], "keras.applications.MobileNetV2(64x64x3, alpha=0.35, 10 classes)"


def _mobilenet_v2_224(keras: Any) -> tuple[Any, list[int], str]:
    model = keras.applications.MobileNetV2(
        input_shape=(224, 224, 3), alpha=1.0, weights=None, classes=1000
    )
    return model, [1, 224, 224, 3], "keras.applications.MobileNetV2(224x224x3, alpha=1.0, 1000 classes)"


def _mobilenet_v1(keras: Any) -> tuple[Any, list[int], str]:
    model = keras.applications.MobileNet(
        input_shape=(32, 32, 3), alpha=0.25, weights=None, classes=NUM_CLASSES
    )
    return model, [1, 32, 32, 3], "keras.applications.MobileNet(32x32x3, alpha=0.25, 10 classes)"


def _resnet_small(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers

    def conv_bn(x: Any, filters: int, k: int, stride: int = 1, relu: bool = True) -> Any:
        x = L.Conv2D(filters, k, strides=stride, padding="same", use_bias=False)(x)
        x = L.BatchNormalization()(x)
        return L.ReLU()(x) if relu else x

    def block(x: Any, filters: int, stride: int) -> Any:
        shortcut = x
        if stride != 1 or int(x.shape[-1]) != filters:  # projection shortcut
            shortcut = L.Conv2D(filters, 1, strides=stride, use_bias=False)(x)
            shortcut = L.BatchNormalization()(shortcut)
        y = conv_bn(x, filters, 3, stride)
        y = conv_bn(y, filters, 3, relu=False)
        return L.ReLU()(L.Add()([y, shortcut]))

    inp = keras.Input((32, 32, 3))
    x = conv_bn(inp, 8, 3)
    x = block(x, 8, 1)  # identity shortcut
    x = block(x, 16, 2)  # projection shortcut
    x = block(x, 16, 1)
    x = block(x, 32, 2)
    x = L.GlobalAveragePooling2D()(x)
    x = L.Dense(NUM_CLASSES)(x)
    out = L.Softmax()(x)
    return (keras.Model(inp, out, name="resnet_small"), [1, 32, 32, 3],
            ("ResNet-style: conv-BN-ReLU, 4 residual blocks (identity and strided 1x1 projection "
            "shortcuts, Add, ReLU), GlobalAveragePooling2D, Dense, Softmax layer"))


def _mlp(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers
    model = keras.Sequential([
        keras.Input((8, 8, 1)),
        L.Flatten(),
        L.Dense(32, activation="relu"),
        L.Dense(NUM_CLASSES, activation="softmax"),
    ], name="mlp")
    return model, [1, 8, 8, 1], "Flatten(8x8x1) -> Dense(32, relu) -> Dense(10, softmax)"


def _lenet(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers
    model = keras.Sequential([
        keras.Input((28, 28, 1)),
        L.Conv2D(6, 5, activation="relu"),
        L.MaxPooling2D(2),
        L.Conv2D(16, 5, activation="relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(32, activation="relu"),
        L.Dense(NUM_CLASSES, activation="softmax"),
    ], name="lenet")
    return (model, [1, 28, 28, 1],
            ("LeNet on 28x28x1: Conv(5x5, relu)-MaxPool-Conv(5x5, relu)-MaxPool-Flatten-"
            "Dense(relu)-Dense(softmax)"))


def _conv_bn_gap_head(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        L.Conv2D(16, 3, padding="same"),
        L.BatchNormalization(),
        L.ReLU(),
        L.GlobalAveragePooling2D(),
        L.Dense(NUM_CLASSES),
        L.Softmax(),
    ], name="conv_bn_gap_head")
    return (model, [1, 16, 16, 3],
            ("Conv2D(bias)-BatchNormalization-ReLU-GlobalAveragePooling2D-Dense-Softmax"))


def _extras(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers
    model = keras.Sequential([
        keras.Input((24, 24, 3)),
        L.Conv2D(8, 3, strides=2, padding="same", activation="relu"),  # strided conv
        L.Conv2D(8, 3, dilation_rate=2, padding="same", activation="relu"),  # dilated conv
        # tfmot's LayerReLUQuantize transform gives a Conv2D/DepthwiseConv2D/Dense that
        # a ReLU *layer* follows a NoOpQuantizeConfig: its kernel gets NO FakeQuant (and
        # its output none either; the ReLU's output has one). TF's converter then
        # quantizes those kernels itself (per channel, symmetric, [-127, 127]).
        L.DepthwiseConv2D(3, depth_multiplier=2, padding="same"),  # depth_multiplier 2
        L.ReLU(6.0),
        L.ZeroPadding2D(((1, 2), (0, 1))),  # asymmetric padding, then a VALID conv
        L.Conv2D(12, 3, padding="valid"),
        L.ReLU(6.0),
        L.GlobalAveragePooling2D(keepdims=True),
        L.Reshape((-1,)),
        L.Dense(NUM_CLASSES, activation="softmax"),
    ], name="extras")
    return (model, [1, 24, 24, 3],
            ("strided conv, dilated conv (dilation_rate=2: SpaceToBatchND/Conv2D/BatchToSpaceND), "
            "DepthwiseConv2D depth_multiplier=2 + ReLU(6.0) layer, ZeroPadding2D((1,2),(0,1)) + "
            "VALID conv + ReLU(6.0) layer (both kernels WITHOUT FakeQuant: tfmot's "
            "LayerReLUQuantize), GlobalAveragePooling2D(keepdims=True), Reshape((-1,)) "
            "(Shape/StridedSlice/Pack), Dense softmax"))


def _depthwise_multiplier(keras: Any) -> tuple[Any, list[int], str]:
    L = keras.layers
    model = keras.Sequential([
        keras.Input((16, 16, 3)),
        L.Conv2D(4, 3, padding="same", activation="relu"),
        # activation="relu6" would be refused by tfmot ("Only some Keras activations under
        # `keras.activations` are supported"), so relu here and ReLU(6.0) after the BN
        L.DepthwiseConv2D(3, depth_multiplier=2, padding="same", activation="relu"),
        L.DepthwiseConv2D(3, depth_multiplier=2, strides=2, padding="same", use_bias=False),
        L.BatchNormalization(),
        L.ReLU(6.0),
        L.GlobalAveragePooling2D(),
        L.Dense(NUM_CLASSES, activation="softmax"),
    ], name="depthwise_multiplier")
    return (model, [1, 16, 16, 3],
            ("DepthwiseConv2D depth_multiplier=2 with activation='relu' (kernel FakeQuant per "
            "channel along the multiplier axis: 2 ranges), strided DepthwiseConv2D "
            "depth_multiplier=2 + BatchNormalization + ReLU(6.0), GlobalAveragePooling2D, "
            "Dense softmax"))


# name -> (seed, builder, batch size, training steps). See "Training" in the module
# docstring for why the step counts are in the hundreds to thousands.
_BUILDERS: dict[str, tuple[int, Callable[[Any], tuple[Any, list[int], str]], int, int]] = {
    "mobilenet_v2": (201, _mobilenet_v2, 4, 256),
    "mobilenet_v1": (202, _mobilenet_v1, 8, 512),
    "resnet_small": (203, _resnet_small, 4, 1024),
    "mlp": (204, _mlp, 8, 3072),
    "lenet": (205, _lenet, 8, 2048),
    "conv_bn_gap_head": (206, _conv_bn_gap_head, 8, 2048),
    "extras": (207, _extras, 8, 2048),
    "depthwise_multiplier": (208, _depthwise_multiplier, 8, 2048),
}

# Built only for bench/ (too slow to build and convert in every test run). Its 128
# steps leave activation ranges near tfmot's initial [-6, 6]: fine for timing.
BENCH_BUILDERS: dict[str, tuple[int, Callable[[Any], tuple[Any, list[int], str]], int, int]] = {
    "mobilenet_v2_224": (209, _mobilenet_v2_224, 2, 128),
}

TFMOT_MODEL_NAMES: list[str] = list(_BUILDERS)
_BUILDERS.update(BENCH_BUILDERS)

# Training set size (samples); an epoch is _N_SAMPLES / batch steps, run as one
# graph execution (steps_per_execution) to keep Python overhead out of it.
_N_SAMPLES = 256


# ---------------------------------------------------------------------------
# Building (runs in the subprocess)
# ---------------------------------------------------------------------------


def _training_data(seed: int, n: int, shape: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """256-level "images" in [-1, 1] (levels k / 127.5 - 1, exactly -1 and 1 included)."""
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 256, size=[n, *shape[1:]])
    x = (levels.astype(np.float64) / 127.5 - 1.0).astype(np.float32)
    y = rng.integers(0, NUM_CLASSES, size=[n])
    return x, y


def _build_in_process(name: str) -> tuple[bytes, dict[str, Any]]:
    """Build, train and freeze one model in this process: (GraphDef bytes, metadata).

    Needs the environment of BUILD_ENV set before TensorFlow was imported.
    """
    for k, v in BUILD_ENV.items():
        os.environ.setdefault(k, v)
    import tensorflow as tf
    import tensorflow_model_optimization as tfmot
    import tf_keras as keras
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    seed, fn, batch, steps = _BUILDERS[name]
    t0 = time.perf_counter()
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)  # Python, NumPy and TF seeds
    tf.config.experimental.enable_op_determinism()
    model, shape, description = fn(keras)
    q = tfmot.quantization.keras.quantize_model(model)
    steps_per_epoch = _N_SAMPLES // batch
    q.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        steps_per_execution=steps_per_epoch,
    )
    x, y = _training_data(seed + 10_000, _N_SAMPLES, shape)
    epochs = -(-steps // steps_per_epoch)
    q.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0)
    t_train = time.perf_counter() - t0

    fn_graph = tf.function(lambda inp: q(inp, training=False))
    concrete = fn_graph.get_concrete_function(tf.TensorSpec(shape, tf.float32, name=INPUT_NAME))
    frozen = convert_variables_to_constants_v2(concrete)
    gd = frozen.graph.as_graph_def()
    inputs = [t.name.split(":")[0] for t in frozen.inputs]
    outputs = [t.name.split(":")[0] for t in frozen.outputs]
    meta = {
        "name": name,
        "inputs": inputs,
        "outputs": outputs,
        "shapes": {inputs[0]: list(shape)},
        "input_ranges": {inputs[0]: list(INPUT_RANGE)},
        "description": description,
        "ops": sorted({n.op for n in gd.node}),
        "train_seconds": round(t_train, 2),
        "train_steps": epochs * steps_per_epoch,
        "batch_size": batch,
        "build_seconds": round(time.perf_counter() - t0, 2),
        "versions": _versions(),
    }
    return gd.SerializeToString(deterministic=True), meta


# ---------------------------------------------------------------------------
# Cache and subprocess driver
# ---------------------------------------------------------------------------


@functools.cache
def _versions() -> dict[str, str]:
    out = {}
    for dist in ("tensorflow", "tf_keras", "tensorflow-model-optimization"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "none"
    return out


def cache_dir() -> Path:
    root = os.environ.get("QCONVERT_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "qconvert-tests"
    )
    return Path(root) / "tfmot"


def _recipe_source(name: str) -> str:
    """Everything a model's bytes depend on in this file: its builder entry and the recipe code."""
    import inspect

    seed, fn, batch, steps = _BUILDERS[name]
    parts = [repr((seed, batch, steps, _N_SAMPLES, INPUT_NAME, INPUT_RANGE, BUILD_ENV))]
    parts += [inspect.getsource(f) for f in (fn, _training_data, _build_in_process)]
    return "\n".join(parts)


def _cache_key(name: str) -> str:
    """Cache file stem: name, CORPUS_VERSION and a hash of the package versions and the recipe."""
    blob = json.dumps(
        {"v": CORPUS_VERSION, "name": name, "recipe": _recipe_source(name), **_versions()},
        sort_keys=True,
    )
    return f"{name}-v{CORPUS_VERSION}-{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def build_in_subprocess(name: str, out_dir: Path, timeout: float = 1800) -> tuple[bytes, dict[str, Any]]:
    """Build one model in a fresh Python (BUILD_ENV set), files ``<out_dir>/<name>.pb/.json``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **BUILD_ENV)
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--build-one", name, "--out-dir", str(out_dir)],
        check=False, capture_output=True, text=True, env=env, timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"building tfmot model {name!r} failed (exit {proc.returncode}):\n"
            f"{proc.stderr[-6000:]}"
        )
    pb = (out_dir / f"{name}.pb").read_bytes()
    meta = json.loads((out_dir / f"{name}.json").read_text())
    return pb, meta


def _to_model(pb: bytes, meta: dict[str, Any]) -> CorpusModel:
    return CorpusModel(
        name=meta["name"],
        graph_def=pb,
        inputs=list(meta["inputs"]),
        outputs=list(meta["outputs"]),
        shapes={k: [int(d) for d in v] for k, v in meta["shapes"].items()},
        input_ranges={k: (float(v[0]), float(v[1])) for k, v in meta["input_ranges"].items()},
        description=meta["description"],
        ops=frozenset(meta["ops"]),
    )


def load_meta(name: str) -> dict[str, Any]:
    """The cached metadata (build times, versions, ...) of a built model."""
    build_tfmot_model(name)
    return json.loads((cache_dir() / f"{_cache_key(name)}.json").read_text())


@functools.cache
def build_tfmot_model(name: str) -> CorpusModel:
    """One tfmot QAT model: from the disk cache, else built in a subprocess and cached."""
    if name not in _BUILDERS:
        raise KeyError(f"unknown tfmot model {name!r}; known: {', '.join(_BUILDERS)}")
    key = _cache_key(name)
    pb_path, meta_path = cache_dir() / f"{key}.pb", cache_dir() / f"{key}.json"
    if not (pb_path.is_file() and meta_path.is_file()):
        with tempfile.TemporaryDirectory(prefix="qconvert-tfmot-") as tmp:
            pb, meta = build_in_subprocess(name, Path(tmp))
        meta["sha256"] = hashlib.sha256(pb).hexdigest()
        _write_atomic(pb_path, pb)
        _write_atomic(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())
    pb = pb_path.read_bytes()
    meta = json.loads(meta_path.read_text())
    if hashlib.sha256(pb).hexdigest() != meta.get("sha256"):
        raise RuntimeError(f"cache entry {pb_path} is corrupt (sha256 mismatch); delete it")
    return _to_model(pb, meta)


def build_tfmot_corpus() -> list[CorpusModel]:
    """All tfmot models, in TFMOT_MODEL_NAMES order."""
    return [build_tfmot_model(n) for n in TFMOT_MODEL_NAMES]


def _main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="models (default: all)")
    p.add_argument("--build-one", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    p.add_argument("--check-determinism", action="store_true",
                   help="build each model twice in fresh processes (no cache) and compare bytes")
    args = p.parse_args(argv)
    if args.build_one:
        pb, meta = _build_in_process(args.build_one)
        out = Path(args.out_dir)
        (out / f"{args.build_one}.pb").write_bytes(pb)
        (out / f"{args.build_one}.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
        return 0
    names = args.names or TFMOT_MODEL_NAMES
    ok = True
    for name in names:
        t = time.perf_counter()
        m = build_tfmot_model(name)
        meta = load_meta(name)
        print(f"{name:18s} {len(m.graph_def):8d} B  load {time.perf_counter() - t:6.2f}s  "
              f"build {meta['build_seconds']}s  in={m.inputs} out={m.outputs}")
        print(f"{'':18s} ops={sorted(m.ops)}")
        if args.check_determinism:
            with tempfile.TemporaryDirectory(prefix="qconvert-tfmot-") as tmp:
                again, _ = build_in_subprocess(name, Path(tmp))
            same = again == m.graph_def
            ok &= same
            print(f"{'':18s} rebuilt: {'identical' if same else 'DIFFERENT'} bytes")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
