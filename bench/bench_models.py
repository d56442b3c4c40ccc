"""The frozen QAT graphs the benchmarks convert, from small to large.

    small_cnn          models/digits_qat.pb: tfmot QAT CNN on scikit-learn's digits (in the repo)
    mobilenet_v2       tfmot QAT keras MobileNetV2 alpha 0.35, 64x64 (tests/fixtures/tfmot_corpus.py)
    mobilenet_v2_224   tfmot QAT keras MobileNetV2 alpha 1.0, 224x224, 1000 classes (bench only)
    chain_N            a synthetic chain of N conv layers (below), e.g. chain_1000

The tfmot models are built by tests/fixtures/tfmot_corpus.py (TensorFlow, tf-keras and
tensorflow-model-optimization; MobileNetV2 224 takes about 2.5 minutes on 2 cores)
and cached on disk. A chain is a TF1 graph built with TensorFlow from a fixed seed
(about 10 s for 2,000 layers) and cached next to them in ``<cache>/bench/``.

Chain layer i (input [1, 16, 16, 16], 16 channels throughout)::

    y = FakeQuant[0, 6](Relu6(BiasAdd(Conv2D 3x3 SAME(x, FakeQuant_narrow[-a, a](W_i)), b_i)))
    every 4th layer also adds the block input:  y = FakeQuant[0, 12](y + x_block)

so it has per-tensor weight ranges, fused bias and activation, and residual tensors
read by two nodes. Its input range is [-1, 1].
"""

from __future__ import annotations

import hashlib
import inspect
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))

from corpus import CorpusModel  # noqa: E402

CHAIN_SHAPE = [1, 16, 16, 16]
NAMES = ["small_cnn", "mobilenet_v2", "mobilenet_v2_224", "chain_1000"]


def _chain_graph_def(n_layers: int, seed: int = 0) -> bytes:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf

    tf1 = tf.compat.v1
    rng = np.random.default_rng(seed)
    channels = CHAIN_SHAPE[-1]
    graph = tf.Graph()
    with graph.as_default():
        x = tf1.placeholder(tf.float32, CHAIN_SHAPE, name="input")
        block_in = y = x
        for i in range(n_layers):
            w = rng.normal(0.0, 0.15, (3, 3, channels, channels)).astype(np.float32)
            a = float(np.abs(w).max())
            wq = tf.quantization.fake_quant_with_min_max_vars(
                tf.constant(w), -a, a, narrow_range=True, name=f"layer{i}/weights_fq")
            b = tf.constant(rng.normal(0.0, 0.1, channels).astype(np.float32))
            y = tf.nn.relu6(tf.nn.bias_add(tf.nn.conv2d(y, wq, 1, "SAME"), b), name=f"layer{i}/relu6")
            y = tf.quantization.fake_quant_with_min_max_vars(y, 0.0, 6.0, name=f"layer{i}/act_fq")
            if i % 4 == 3:
                y = tf.quantization.fake_quant_with_min_max_vars(
                    tf.add(y, block_in, name=f"layer{i}/add"), 0.0, 12.0, name=f"layer{i}/add_fq")
                block_in = y
        tf.identity(y, name="output")
    return graph.as_graph_def().SerializeToString(deterministic=True)


def _cache_dir() -> Path:
    root = os.environ.get("QCONVERT_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "qconvert-tests")
    return Path(root) / "bench"


def chain(n_layers: int) -> CorpusModel:
    """The synthetic chain of ``n_layers`` layers (cached; built with TensorFlow if missing)."""
    recipe = hashlib.sha256(inspect.getsource(_chain_graph_def).encode()).hexdigest()[:12]
    path = _cache_dir() / f"chain_{n_layers}-{recipe}.pb"
    if not path.is_file():  # build in a fresh process: TensorFlow stays out of this one
        subprocess.run([sys.executable, __file__, "--build-chain", str(n_layers), str(path)], check=True)
    return CorpusModel(
        name=f"chain_{n_layers}", graph_def=path.read_bytes(), inputs=["input"], outputs=["output"],
        shapes={"input": CHAIN_SHAPE}, input_ranges={"input": (-1.0, 1.0)},
        description=f"synthetic chain of {n_layers} conv layers", ops=frozenset(),
    )


def model(name: str) -> CorpusModel:
    if name.startswith("chain_"):
        return chain(int(name.split("_", 1)[1]))
    if name == "small_cnn":
        return CorpusModel(
            name=name, graph_def=(ROOT / "models" / "digits_qat.pb").read_bytes(), inputs=["input"],
            outputs=["Identity"], shapes={"input": [1, 8, 8, 1]}, input_ranges={"input": (-1.0, 1.0)},
            description="models/digits_qat.pb (tfmot QAT CNN, scikit-learn digits)", ops=frozenset(),
        )
    import tfmot_corpus

    return tfmot_corpus.build_tfmot_model(name)


if __name__ == "__main__":  # bench_models.py --build-chain N PATH (used by chain())
    if len(sys.argv) == 4 and sys.argv[1] == "--build-chain":
        out = Path(sys.argv[3])
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(_chain_graph_def(int(sys.argv[2])))
        os.replace(tmp, out)
    else:
        for name in sys.argv[1:] or NAMES:
            m = model(name)
            print(f"{m.name:20} {len(m.graph_def):>10} B  {m.description}")
