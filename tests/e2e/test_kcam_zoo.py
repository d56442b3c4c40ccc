"""Hybrid vision transformers and a YOLOv8 detector from keras-cv-attention-models against
TensorFlow 2.21's post-training quantizer (issue 35; tests/fixtures/kcam_zoo.py builds them,
bench/kcam_zoo_ptq.py measures all twelve).

Given TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics``, TensorFlow's rsqrt),
qconvert writes TensorFlow's op list, every activation scale and zero point and every weight equal,
and outputs 0 LSB apart in LiteRT REF. Ten models at their smallest input (about 10 s each):
attention by BATCH_MATMUL (MobileViT_XXS, EfficientFormerL1: with GELU and layer scale; EfficientFormerV2S0,
whose twin ZeroPadding2D are one PAD, in 16x8 too), FastViT's
re-parameterised blocks (twin BatchNormalizations), FasterNet's partial convolutions (SPLIT_V,
CONCATENATION), RepViT's BatchNormalization after global pooling (folded into the classifier's
FULLY_CONNECTED), EfficientViT_M0's zero-initialised residual BatchNormalizations (their
convolutions stay, with zero weights), EfficientViT_B0's ReLU linear attention (DIV by an activation,
the ReLUs of q and k before the RESHAPE that follows the SPLIT, as TensorFlow moves them), TinyViT_5M's
window attention (its last stage's output projection a FULLY_CONNECTED on [1, 320] whose residual ADD
broadcasts) and YOLOv8-N's detector head.
"""

from __future__ import annotations

import collections
import importlib.util

import numpy as np
import pytest

# not imported here: kcam sets TF_USE_LEGACY_KERAS when imported, which would change tf.keras for every
# later test of the process; kcam_zoo builds the models in a child process
if importlib.util.find_spec("keras_cv_attention_models") is None:
    pytest.skip("pip install --no-deps keras-cv-attention-models==1.4.3 pillow", allow_module_level=True)
pytest.importorskip("tf_keras", reason="keras-cv-attention-models builds on tf_keras")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import kcam_zoo  # noqa: E402
import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

MODELS = ["MobileViT_XXS", "EfficientFormerL1", "EfficientFormerV2S0", "FastViT_T8", "FasterNetT0", "RepViT_M09",
          "EfficientViT_M0", "EfficientViT_B0", "TinyViT_5M",
          "YOLOV8_N"]


def _ops(tflite: bytes) -> collections.Counter:
    return collections.Counter((o.builtin, o.version) for o in read_model(tflite).subgraphs[0].operators)


@pytest.mark.parametrize("name", MODELS)
def test_kcam_model_bit_exact_with_tensorflows_ptq_given_its_ranges(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        pb, shape = kcam_zoo.build(name)
    except RuntimeError as exc:  # tf.keras already resolved to Keras 3 in this process
        pytest.skip(str(exc))
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    assert not oracle.float_tensors(theirs)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
    assert _ops(ours) == _ops(theirs)
    assert not oracle.float_tensors(ours)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 100 and not report.unpaired, report
    assert not report.weight_diffs and not report.zero_point_diffs and report.max_rel_scale < 1e-6, report
    assert report.max_lsb == 0, report


@pytest.mark.parametrize("name", ["FastViT_T8", "FasterNetT0", "EfficientFormerV2S0"])
def test_kcam_model_16x8_bit_exact_with_tensorflows_given_its_ranges(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """16x8: FastViT's layer-scaled convolutions have channels with max|w| below 5e-7, whose scale
    TensorFlow's 16x8 quantizer does not widen (tests/e2e/test_bias_fit.py has the rule)."""
    try:
        pb, shape = kcam_zoo.build(name)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples, int16=True)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples,
                         activations="int16").model
    assert _ops(ours) == _ops(theirs)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 100 and report.weights > 10 and not report.unpaired, report
    assert not report.weight_diffs and not report.bias_diffs and not report.zero_point_diffs, report
    assert report.max_rel_scale < 1e-6 and report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours, n=2)


def test_levit_written_as_tensorflow_writes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """LeViT128S, untrained at 96 px (briefly trained, its BatchNormalizations' statistics from one batch on
    1x1 maps reach 1e16 at the output: no model to compare on). Its BatchNormalizations are read by a Dense and
    a residual ADD (test_kcam_patterns.py's shared-BatchNorm cases): TensorFlow's ops, every weight, and
    its outputs 0 LSB apart given its ranges. One tensor's parameters are not compared: the output of
    stack1_block2's projection, whose BatchNormalization has γ = 0 (an all-zero tensor, which the
    statistics' pairing by value cannot place)."""
    try:
        pb, shape = kcam_zoo.build("LeViT128S", trained=False, size=96)
    except RuntimeError as exc:  # tf.keras already resolved to Keras 3 in this process
        pytest.skip(str(exc))
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
    assert _ops(ours) == _ops(theirs)
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.tensors > 500 and not report.unpaired and not report.weight_diffs, report
    assert all("stack1_block2_out" in d for d in report.zero_point_diffs), report
    assert report.max_lsb == 0, report


def test_kcam_transformer_16x8_refused_in_one_line_where_tensorflows_file_does_not_run() -> None:
    try:
        pb, shape = kcam_zoo.build("MobileViT_XXS")
    except RuntimeError as exc:
        pytest.skip(str(exc))
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (2, *shape[1:])).astype(np.float32)}
    with pytest.raises(ConversionError) as e:
        convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples, activations="int16")
    assert "SQUARED_DIFFERENCE" in str(e.value) and "--activations int8" in str(e.value)



def test_numpy_engine_file_does_not_depend_on_the_worker_count() -> None:
    """The numpy engine runs every sample with single-threaded BLAS: OpenBLAS's threaded products
    differ in the last float32 bits, and with the first batch on two BLAS threads MobileViT_XXS's file
    differed in 33,734 bytes between --calibration-workers 1 and 2 (measured on 2 cores)."""
    try:
        pb, shape = kcam_zoo.build("MobileViT_XXS")
    except RuntimeError as exc:
        pytest.skip(str(exc))
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    files = {w: convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples,
                              calibration_engine="numpy", calibration_workers=w).model for w in (1, 2)}
    assert files[1] == files[2]
