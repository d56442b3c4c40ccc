"""``qconvert run`` on TensorFlow's own files (no qconvert metadata), int8 and uint8 (issue 18).

The parameters come from the files' scales at load. Oracle: LiteRT 2.3 ``BUILTIN_REF``, every
tensor, each op fed LiteRT's own inputs, on random inputs over the whole range of each input's
type. TensorFlow 2.21's converter still writes uint8 files (``inference_type=tf.uint8``): those
exercise the legacy uint8 kernels, whose CONV_2D multiplier takes ``in·w`` as a float32 product.
"""

from __future__ import annotations

import os
import tempfile

import corpus  # noqa: E402
import numpy as np
import oracle  # noqa: E402
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter writes the files")
pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")

from test_interpreter import assert_matches_litert  # noqa: E402

from qconvert.runtime.interpreter import IntegerModel  # noqa: E402


def _uint8(m: corpus.CorpusModel) -> bytes:
    with tempfile.TemporaryDirectory(prefix="qconvert-u8-") as tmp:
        path = os.path.join(tmp, f"{m.name}.pb")
        with open(path, "wb") as f:
            f.write(m.graph_def)
        conv = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(
            path, list(m.inputs), list(m.outputs), {k: list(v) for k, v in m.shapes.items()})
        conv.inference_type = tf.uint8
        lo_hi = {n: m.input_ranges[n] for n in m.inputs}
        conv.quantized_input_stats = {n: (-lo / ((hi - lo) / 255.0), (hi - lo) / 255.0)
                                      for n, (lo, hi) in lo_hi.items()}
        return conv.convert()


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_tensorflows_int8_files_equal_litert(name: str) -> None:
    tflite = oracle.tf_convert(corpus.build_model(name))
    assert IntegerModel(tflite).computed
    print(name, assert_matches_litert(tflite, n_inputs=4))


# the corpus models whose uint8 file LiteRT runs (with per-channel weight FakeQuants TF writes a uint8
# CONV_2D that LiteRT rejects: "input->type == kTfLiteInt8 || input->type == kTfLiteInt16")
@pytest.mark.parametrize("name", ["depthwise", "classifier_cli_input"])
def test_tensorflows_uint8_files_equal_litert(name: str) -> None:
    tflite = _uint8(corpus.build_model(name))
    model = IntegerModel(tflite)
    assert model.computed and "uint8" in {t.dtype for t in model.tensors}
    rng = np.random.default_rng(0)
    import test_interpreter

    feeds = test_interpreter.random_feeds(model, rng)
    assert {v.dtype for v in feeds.values()} == {np.dtype("uint8")}
    print(name, assert_matches_litert(tflite, n_inputs=4))
