"""``--inputs`` names any tensor (``node`` or ``node:k``), as TensorFlow's ``input_arrays`` does:
the graph is cut there, the producer side dropped (issue 15).

Oracles: TensorFlow's converter given the same ``input_arrays`` (bit-exact outputs in LiteRT),
TensorFlow's own shape inference for the cut tensor, and TensorFlow's refusal of TF1 while
loops (Arm's LSTM/GRU keyword spotters, read from ../shared/realmodels when present).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from qconvert.api import convert_graph
from qconvert.errors import ConversionError, UsageError

ROOT = Path(__file__).resolve().parents[2]
KWS = ROOT.parent / "shared" / "realmodels" / "arm_ml_kws"


def _front_end_graph() -> bytes:
    """A QAT graph whose input side TFLite cannot take (a string placeholder decoded by
    DecodeRaw), then conv → relu → FakeQuant → conv → FakeQuant: users cut it at 'features'."""
    tf = pytest.importorskip("tensorflow", reason="the graph is built with TensorFlow")
    tf1 = tf.compat.v1
    g = tf.Graph()
    with g.as_default():
        raw = tf1.placeholder(tf.string, [], name="raw")
        feats = tf.reshape(tf.io.decode_raw(raw, tf.float32), [1, 6, 6, 2], name="features")
        x = tf.quantization.fake_quant_with_min_max_vars(feats, -2.0, 2.0, name="features_fq")
        rng = np.random.default_rng(3)
        w1 = rng.normal(0, 0.4, (3, 3, 2, 4)).astype(np.float32)
        w2 = rng.normal(0, 0.4, (1, 1, 4, 3)).astype(np.float32)

        def fq_w(w: np.ndarray):  # noqa: ANN202
            m = np.abs(w).reshape(-1, w.shape[-1]).max(axis=0)
            return tf.quantization.fake_quant_with_min_max_vars_per_channel(tf.constant(w), -m, m, narrow_range=True)

        h = tf.nn.relu(tf.nn.conv2d(x, fq_w(w1), [1, 1, 1, 1], "SAME"))
        h = tf.quantization.fake_quant_with_min_max_vars(h, 0.0, 3.0, name="mid")
        y = tf.nn.conv2d(h, fq_w(w2), [1, 1, 1, 1], "VALID")
        tf.quantization.fake_quant_with_min_max_vars(y, -3.0, 3.0, name="out")
    return g.as_graph_def().SerializeToString()


def _tf_convert(pb: bytes, inputs: list[str], shapes: dict, stats: dict) -> bytes:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "m.pb")
        Path(path).write_bytes(pb)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, inputs, ["out"], shapes)
        c.inference_type = tf.int8
        c.quantized_input_stats = stats
        return c.convert()


@pytest.mark.parametrize("cut", ["features", "features:0", "mid"])
def test_cut_at_an_internal_tensor_matches_tensorflow(cut: str) -> None:
    import oracle

    pb = _front_end_graph()
    name = cut.split(":")[0]  # TensorFlow's input_arrays takes the node name for output 0
    # 'features' is followed by a FakeQuant (its range wins, in both converters); 'mid' is the
    # FakeQuant's own output, so the cut drops its range and the input needs one.
    shape, lo_hi = ([1, 6, 6, 2], (-2.0, 2.0)) if name == "features" else ([1, 6, 6, 4], (0.0, 3.0))
    ours = convert_graph(pb, {name: lo_hi}, inputs=[cut], outputs=["out"],
                         input_shapes={name: shape} if name == "mid" else None)
    theirs = _tf_convert(pb, [name], {name: shape}, {name: oracle.input_stats(*lo_hi)})
    oracle.compare_models(ours.model, theirs, n_inputs=16, seed=4)


def test_the_cut_tensor_gets_the_shape_tensorflow_infers() -> None:
    from qconvert.frontend.graphdef import parse_graphdef
    from qconvert.frontend.importer import import_graph

    graph = import_graph(parse_graphdef(_front_end_graph()), ["features"], ["out"])
    assert graph.inputs == ["features"] and graph.tensors["features"].shape == (1, 6, 6, 2)
    assert "raw" not in graph.tensors  # the producer side is dropped


def test_an_unknown_input_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"--inputs names 'nope', which is not a node.*placeholders are: raw"):
        convert_graph(_front_end_graph(), inputs=["nope"], outputs=["out"])


@pytest.mark.skipif(not KWS.is_dir(), reason=f"{KWS} is absent (Arm's keyword-spotting graphs)")
@pytest.mark.parametrize("model,shape", [("DS_CNN_S", (1, 49, 10)), ("CNN_S", (1, 49, 10)), ("DNN_S", (1, 25, 10))])
def test_mfcc_shape_is_inferred_through_the_audio_front_end(model: str, shape: tuple[int, ...]) -> None:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's shape inference is the oracle")
    from qconvert.frontend.graphdef import read_graphdef
    from qconvert.frontend.importer import import_graph

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString((KWS / f"{model}.pb").read_bytes()), name="")
    assert tuple(g.get_tensor_by_name("Mfcc:0").shape) == shape  # TensorFlow's own inference
    graph = import_graph(read_graphdef(KWS / f"{model}.pb"), ["Mfcc"], ["labels_softmax"])
    assert graph.tensors["Mfcc"].shape == shape


@pytest.mark.skipif(not KWS.is_dir(), reason=f"{KWS} is absent (Arm's keyword-spotting graphs)")
@pytest.mark.parametrize("model", ["LSTM_S", "GRU_S"])
def test_tf1_while_loops_are_one_line_naming_the_ops(model: str, tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match=r"TF1 while loop \(Enter, Exit, LoopCond, Merge, NextIteration, Switch"):
        convert_graph(KWS / f"{model}.pb", inputs=["Mfcc"], outputs=["labels_softmax"])
    proc = subprocess.run([sys.executable, "-m", "qconvert", str(KWS / f"{model}.pb"), "--inputs", "Mfcc",
                           "--outputs", "labels_softmax", "-o", str(tmp_path / "m.tflite")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "m.tflite").exists()
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's refusal is the oracle")
    c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(str(KWS / f"{model}.pb"), ["Mfcc"], ["labels_softmax"],
                                                           {"Mfcc": [1, 25, 10]})
    with pytest.raises(Exception):  # noqa: B017  TensorFlow's converter raises its own ConverterError
        c.convert()
