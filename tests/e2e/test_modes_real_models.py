"""The conversion modes of issue 34 on keras.applications architectures and on real third-party
graphs (``../shared/realmodels``), against TensorFlow 2.21's converter on the same graphs.

- Dynamic range (``--activations float``) and float16 weights (``--weights float16``): every
  operator paired by data flow with TensorFlow's and compared on version, options, operand kinds,
  tensor types, shapes, quantization parameters and constant bytes (``file_compare.compare_files``),
  then both files in LiteRT REF on the same inputs, float outputs bit for bit. BatchNorm is folded
  with TensorFlow's rsqrt (``oracle.use_tensorflows_rsqrt``; docs/differences.md).
- Per-tensor weights, float32 I/O and a uint8 input with a float32 output (post-training, given
  TensorFlow's recorded ranges as in tests/e2e/test_keras_apps_ptq.py): every scale, zero point,
  weight and bias per op exact, outputs 0 LSB apart (``oracle.compare_ptq``); graph I/O, boundary
  ops, the op multiset and activation parameters equal (``file_compare.structure``); constants
  equal as sets: TensorFlow merges equal float constants into one tensor (MobileNetV3's hard-swish
  1/6: one tensor in its file, one per use in qconvert's; docs/differences.md).

The keras.applications models are the ones tests/e2e/test_keras_apps_ptq.py builds (built once per
process, ``keras_apps.build``); the real graphs are Arm's keyword-spotting DS-CNN, CNN and DNN (inputs
from WAV clips through their own front end) and nnstreamer's MNIST (scikit-learn's digits); and
TensorFlow's own QAT test graphs (tf_mlir_end2end: an SSD box predictor slice with per-channel weight
FakeQuants) for float32 I/O and ``--inference-type uint8`` on the frozen-graph path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")
pytest.importorskip("tf_keras", reason="keras.applications comes from tf-keras")
pytest.importorskip("ai_edge_litert", reason="LiteRT runs both files")

import oracle  # noqa: E402
from file_compare import compare_files, compare_outputs, structure, tf_dynamic_range  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realmodels"

FLOAT_APPS = ["VGG16", "ResNet50", "DenseNet121", "ResNet50V2", "MobileNetV3Small", "RegNetX002", "ConvNeXtTiny",
              "EfficientNetB0"]
PTQ_APPS = ["MobileNetV3Small", "ConvNeXtTiny", "DenseNet121"]
REAL_GRAPHS = ["DS_CNN_S", "CNN_S", "DNN_S", "mnist"]
PTQ_MODES = {"per_tensor": {"per_tensor_weights": True}, "float_io": {"input_type": "float32", "output_type": "float32"},
             "uint8_in": {"input_type": "uint8", "output_type": "float32"}}


def _keras_app(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    import keras_apps

    pb, shape = keras_apps.build(name)
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    return oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape}), samples


def _real_graph(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    if name == "mnist":
        path = REAL / "nnstreamer" / "mnist.pb"
        if not path.is_file():
            pytest.skip(f"{path} is absent (a real third-party graph)")
        datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn ships the digits")
        digits = datasets.load_digits().images[:64] / 16.0  # as tests/e2e/test_real_mnist.py
        images = np.pad(np.kron(digits, np.ones((3, 3))), ((0, 0), (2, 2), (2, 2))).reshape(64, 784)
        return oracle.FloatGraph(path.read_bytes(), ["input"], ["softmax"], {"input": [1, 784]}), \
            {"input": images.astype(np.float32)}
    path = REAL / "arm_ml_kws" / f"{name}.pb"
    if not path.is_file():
        pytest.skip(f"{path} is absent (Arm's keyword-spotting graphs)")
    from kws_samples import mfcc_samples

    pb = path.read_bytes()
    x, shape = mfcc_samples(tf, pb)
    return oracle.FloatGraph(pb, ["Mfcc"], ["labels_softmax"], {"Mfcc": shape}), {"Mfcc": x}


def _model(name: str) -> tuple[Any, dict[str, np.ndarray]]:
    return _real_graph(name) if name in REAL_GRAPHS else _keras_app(name)


@pytest.mark.parametrize("weights", ["int8", "float16"])
@pytest.mark.parametrize("name", FLOAT_APPS + REAL_GRAPHS)
def test_dynamic_range_and_float16_equal_tensorflows(name: str, weights: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m, _ = _model(name)
    theirs = tf_dynamic_range(m.graph_def, m.inputs, m.outputs, m.shapes, weights == "float16")
    oracle.use_tensorflows_rsqrt(monkeypatch)
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, activations="float", weights=weights).model
    assert compare_files(ours, theirs) > 0
    compare_outputs(ours, theirs, m.shapes, n=2)


def _as_sets(s: dict[str, Any]) -> dict[str, Any]:
    return {**s, "constants": set(s["constants"])}


@pytest.mark.parametrize("mode", sorted(PTQ_MODES))
@pytest.mark.parametrize("name", PTQ_APPS + REAL_GRAPHS)
def test_ptq_modes_equal_tensorflows(name: str, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    m, samples = _model(name)
    keys = PTQ_MODES[mode]
    tf_keys = {"per_tensor": True} if mode == "per_tensor" else keys
    theirs = oracle.tf_ptq_convert(m, samples, **tf_keys)
    stats, calibrated = oracle.tf_calibration_statistics(m, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples, **keys).model
    report = oracle.compare_ptq(ours, theirs, samples, m.inputs)
    assert report.tensors > 0 and not report.unpaired, report
    assert report.max_rel_scale == 0 and not report.zero_point_diffs and not report.weight_diffs, report
    a, b = _as_sets(structure(ours)), _as_sets(structure(theirs))
    for key in ("inputs", "outputs", "boundary", "ops", "activations", "constants"):
        assert a[key] == b[key], f"{key}: ours {str(a[key])[:300]}\n  TF   {str(b[key])[:300]}"
    x = samples[m.inputs[0]]
    feeds = [{m.inputs[0]: x[k:k + 1]} for k in range(4)]
    if mode == "uint8_in":  # the model's input is uint8 now: TensorFlow's quantization of the same samples
        d = oracle.io_details(theirs)["inputs"][0]
        feeds = [{m.inputs[0]: np.clip(np.round(f[m.inputs[0]] / d["scales"][0]) + d["zero_points"][0], 0, 255)
                  .astype(np.uint8)} for f in feeds]
    elif mode == "per_tensor":
        d = oracle.io_details(theirs)["inputs"][0]
        feeds = [{m.inputs[0]: np.clip(np.round(f[m.inputs[0]] / d["scales"][0]) + d["zero_points"][0], -128, 127)
                  .astype(np.int8)} for f in feeds]
    for feed in feeds:
        for u, v in zip(oracle.run_litert(ours, feed), oracle.run_litert(theirs, feed)):
            assert u.dtype == v.dtype and np.array_equal(u, v), "outputs differ from TensorFlow's in LiteRT REF"


# ------------------------------------------------ TensorFlow's own QAT test graphs (tf_mlir_end2end)

MLIR = REAL / "tf_mlir_end2end"
MLIR_GRAPHS = ["fake_quant_per_channel", "fake_quant_per_channel_4bit", "fake_quant_without_identity",
               "fake_quant_without_identity_4bit"]


def _mlir_graph(name: str) -> Any:
    import re
    from dataclasses import dataclass

    if not (MLIR / f"{name}.pb").is_file():
        pytest.skip(f"{MLIR} is absent (TensorFlow's own test graphs)")
    run = " ".join(line[6:] for line in (MLIR / f"{name}.pbtxt").read_text().splitlines() if line.startswith("# RUN:"))
    o = {k: v.strip("'\"") for k, v in re.findall(r"-tf-([a-z-]+)=(\S+)", run)}

    @dataclass
    class Graph:
        name: str
        graph_def: bytes
        inputs: list
        outputs: list
        shapes: dict
        input_ranges: dict

    x = o["input-arrays"]
    return Graph(name, (MLIR / f"{name}.pb").read_bytes(), [x], [o["output-arrays"]],
                 {x: [int(d) for d in o["input-shapes"].split(",")]},
                 {x: (float(o["input-min-values"]), float(o["input-max-values"]))})


@pytest.mark.parametrize("name", MLIR_GRAPHS)
def test_qat_graphs_float_io_and_uint8_as_tensorflow(name: str) -> None:
    """float32 I/O: TensorFlow's frozen-graph file (``inference_input_type=float32``) in graph I/O,
    boundary ops, op multiset, activation parameters and constants. ``--inference-type uint8``: the
    per-channel weight FakeQuants are refused in one line, where TensorFlow writes a uint8 CONV_2D that
    LiteRT refuses at Prepare."""
    from qconvert.errors import ConversionError

    m = _mlir_graph(name)
    keys = {"inputs": m.inputs, "outputs": m.outputs, "inputs_range": m.input_ranges, "input_shapes": m.shapes}
    ours = convert_graph(m.graph_def, input_type="float32", output_type="float32", **keys).model
    assert structure(ours) == structure(oracle.tf_convert(m, input_type="float32"))
    with pytest.raises(ConversionError, match="per channel|per-channel"):
        convert_graph(m.graph_def, inference_type="uint8", **keys)
    theirs = oracle.tf_convert(m, inference_type="uint8")
    with pytest.raises(Exception, match="kTfLiteInt8"):
        oracle.run_litert(theirs, {m.inputs[0]: np.zeros(m.shapes[m.inputs[0]], np.uint8)})
