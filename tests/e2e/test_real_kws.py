"""Arm's keyword-spotting graphs (../shared/realmodels/arm_ml_kws), converted from ``Mfcc`` with
calibration data, against TensorFlow's ``representative_dataset`` conversion cut at the same
tensor on the same samples (issue 15).

The samples are built as a user would: synthetic one-second 16 kHz WAV clips (tones with an
envelope, plus noise; fixed seed) fed to the graph's own front end (DecodeWav →
AudioSpectrogram → Mfcc), which TensorFlow runs here.

DNN_S has no BatchNorm and is bit-exact. DS_CNN_S and CNN_S fold BatchNorm through
``rsqrt(variance + ε)``, which TensorFlow computes with its CPU kernel (an ``rsqrtps``
approximation and a Newton step, so its bits depend on the CPU); qconvert uses the correctly
rounded value. With TensorFlow's own rsqrt values given to qconvert, every weight and weight
scale is identical; what is left is the calibrated ranges, which qconvert's numpy kernels
and TFLite's float kernels (TensorFlow's calibrator) reach within 3e-7 relative of each other,
and which move an output by 1 LSB now and then. With qconvert's own rsqrt, every zero point is
still identical and the outputs within a few LSB.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kws_samples import mfcc_samples

ROOT = Path(__file__).resolve().parents[2]
KWS = ROOT.parent / "shared" / "realmodels" / "arm_ml_kws"
pytestmark = pytest.mark.skipif(not KWS.is_dir(), reason=f"{KWS} is absent (Arm's keyword-spotting graphs)")


def _convert_both(name: str):  # type: ignore[no-untyped-def]
    tf = pytest.importorskip("tensorflow", reason="TensorFlow computes the MFCCs and is the oracle")
    import oracle

    from qconvert.api import convert_graph

    pb = (KWS / f"{name}.pb").read_bytes()
    x, shape = mfcc_samples(tf, pb)
    samples = {"Mfcc": x}
    theirs = oracle.tf_ptq_convert(oracle.FloatGraph(pb, ["Mfcc"], ["labels_softmax"], {"Mfcc": shape}), samples)
    ours = convert_graph(pb, inputs=["Mfcc"], outputs=["labels_softmax"], calibration_data=samples).model
    return oracle.compare_ptq(ours, theirs, samples, ["Mfcc"])


def _assert_bit_exact(report) -> None:  # type: ignore[no-untyped-def]
    assert report.tensors > 0 and not report.zero_point_diffs and not report.weight_diffs, report
    assert report.max_rel_scale < 1e-5, report  # calibrated in numpy vs TFLite's float kernels
    assert report.max_lsb == 0 and report.within_1 == report.outputs, report


def test_dnn_is_bit_exact() -> None:
    _assert_bit_exact(_convert_both("DNN_S"))


@pytest.mark.parametrize("name", ["DS_CNN_S", "CNN_S"])
def test_batchnorm_graphs_given_tensorflows_rsqrt_have_tensorflows_weights(name: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import oracle

    oracle.use_tensorflows_rsqrt(monkeypatch)
    report = _convert_both(name)
    print(f"\n{name} with TensorFlow's rsqrt: {report}")
    assert report.tensors > 0 and not report.zero_point_diffs and not report.weight_diffs, report
    # The outputs also depend on our own calibration's float sums. DS_CNN_S: 3 of its 5 CONV_2D
    # ranges differ from TensorFlow's in the last bits (Eigen's sums; all 24 scales within 3.4e-7),
    # which moves 3 of 576 outputs by up to 6 LSB (issue 19 measured: with the depthwise kernel
    # summing as TFLite's, 2 of its 4 DEPTHWISE_CONV_2D ranges equal TensorFlow's, 1 of 4 before,
    # and the outputs happened to stay within 1 LSB).
    assert report.max_rel_scale < 1e-5 and report.max_lsb <= 8 and report.within_1_fraction >= 0.99, report


@pytest.mark.parametrize("name", ["DS_CNN_S", "CNN_S"])
def test_batchnorm_graphs_with_the_exact_rsqrt_stay_within_a_few_lsb(name: str) -> None:
    report = _convert_both(name)
    print(f"\n{name}: {report}")
    assert report.tensors > 0 and not report.zero_point_diffs, report
    assert report.within_1_fraction >= 0.98 and report.max_lsb <= 4, report


@pytest.mark.parametrize("name", ["CNN_S", "DNN_S"])
def test_16x8_equals_tensorflows_given_its_ranges(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--activations int16`` on a real trained graph (issue 17): given TensorFlow's recorded ranges
    and rsqrt, the op list, every activation's parameters, every int8 weight and int64 bias, and the
    outputs equal TensorFlow's 16x8 file. (DS_CNN_S: outputs equal too, its op list differs as in int8.)"""
    from collections import Counter

    tf = pytest.importorskip("tensorflow", reason="TensorFlow computes the MFCCs and is the oracle")
    import oracle

    from qconvert.api import convert_graph
    from qconvert.schema.reader import read_model

    pb = (KWS / f"{name}.pb").read_bytes()
    x, shape = mfcc_samples(tf, pb)
    samples = {"Mfcc": x[:16]}
    model = oracle.FloatGraph(pb, ["Mfcc"], ["labels_softmax"], {"Mfcc": shape})
    theirs = oracle.tf_ptq_convert(model, samples, int16=True)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(pb, inputs=["Mfcc"], outputs=["labels_softmax"], calibration_data=samples,
                         activations="int16").model
    a, b = read_model(ours).subgraphs[0], read_model(theirs).subgraphs[0]
    assert Counter((o.builtin, o.version) for o in a.operators) == Counter((o.builtin, o.version) for o in b.operators)
    assert Counter((t.scale, t.zero_point) for t in a.tensors if t.data is None) == \
           Counter((t.scale, t.zero_point) for t in b.tensors if t.data is None)
    consts = [Counter((t.dtype, t.shape, t.scale, t.data) for t in sg.tensors
                      if t.data is not None and t.dtype in ("int8", "int16", "int64") and any(t.data)) for sg in (a, b)]
    assert consts[0] == consts[1]
    oracle.compare_models(ours, theirs)
