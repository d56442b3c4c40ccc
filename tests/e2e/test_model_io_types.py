"""Model I/O types (``--input-type`` / ``--output-type``, issue 34) against TensorFlow 2.21's files.

Oracles, measured on TF 2.21 (tests/e2e/test_model_io_types.py docstrings and docs/differences.md):
- PTQ (``representative_dataset``, ``TFLITE_BUILTINS_INT8``): ``inference_input_type`` and
  ``inference_output_type`` are honoured separately. float32: a QUANTIZE v1 after each input, a
  DEQUANTIZE v2 before each output, the float tensors without quantization parameters; uint8: a
  QUANTIZE v1 uint8 → int8 after each input and int8 → uint8 before each output, the uint8 tensor at
  the int8 scale with zero point + 128. 16x8: float32 the same with int16 (QUANTIZE v1, DEQUANTIZE v2).
- QAT frozen graph (``from_frozen_graph``, ``inference_type=int8``): ``inference_input_type=float32``
  gives float32 inputs *and* outputs (the output type follows the input's and
  ``inference_output_type`` is ignored), with the same boundary ops as PTQ; uint8 makes the whole
  model uint8 (not this option), so the uint8 boundary of a QAT graph is checked by LiteRT alone.

Each comparison: the op multiset (builtin, version), each boundary op's place in the data flow and
its tensors' types and parameters, every activation's parameters and every constant's bytes (as
multisets: tensor names and op order differ), and every output element, bit for bit, in LiteRT REF on
the same inputs; and ``qconvert run`` equal to LiteRT REF on both files.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")
pytest.importorskip("ai_edge_litert", reason="ai-edge-litert runs the converted models")

import corpus
import oracle
from file_compare import BOUNDARY, structure

from qconvert.api import convert_graph
from qconvert.runtime.interpreter import IntegerModel
from qconvert.schema.reader import read_model


def _feeds(tflite: bytes, ranges: dict[str, tuple[float, float]], n: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    sg = read_model(tflite).subgraphs[0]
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feed = {}
        for i in sg.inputs:
            t = sg.tensors[i]
            if t.dtype == "float32":  # a little past the range: the QUANTIZE clamps
                lo, hi = ranges[t.name]
                x = rng.uniform(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), size=t.shape)
                feed[t.name] = x.astype(np.float32)
            else:
                info = np.iinfo(t.dtype)
                feed[t.name] = rng.integers(info.min, info.max, size=t.shape, endpoint=True).astype(t.dtype)
        out.append(feed)
    return out


def _assert_same(ours: bytes, theirs: bytes, ranges: dict[str, tuple[float, float]], n: int = 16) -> None:
    a, b = structure(ours), structure(theirs)
    for key in ("inputs", "outputs", "boundary", "ops", "activations", "constants"):
        if isinstance(a[key], dict):
            assert a[key] == b[key], f"{key}: ours {a[key]}\n  TF   {b[key]}"
        else:
            diff = [x for x in a[key] if x not in b[key]]
            assert a[key] == b[key], f"{key}: {len(diff)} of ours not in TF's, e.g. {str(diff[:1])[:300]}"
    ours_run, theirs_run = IntegerModel(ours), IntegerModel(theirs)
    for feed in _feeds(theirs, ranges, n):
        lo, lt = oracle.run_litert(ours, feed), oracle.run_litert(theirs, feed)
        for x, y in zip(lo, lt):
            assert x.dtype == y.dtype and np.array_equal(x, y), "outputs differ from TensorFlow's in LiteRT REF"
        for model, expected in ((ours_run, lo), (theirs_run, lt)):  # qconvert run == LiteRT REF
            got = list(model.run(feed).values())
            for x, y in zip(got, expected):
                assert x.dtype == y.dtype and np.array_equal(x, y), "qconvert run differs from LiteRT REF"


# -------------------------------------------------------------------- QAT (frozen graph, float I/O)

QAT_MODELS = ["two_inputs_arith", "sigmoid_tanh_two_outputs", "conv_relu_perchannel"]


@pytest.mark.parametrize("name", QAT_MODELS)
def test_qat_float_io_equals_tensorflows(name: str) -> None:
    m = corpus.build_model(name)
    theirs = oracle.tf_convert(m, input_type="float32")
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, inputs_range=m.input_ranges,
                         input_type="float32", output_type="float32").model
    _assert_same(ours, theirs, m.input_ranges)


@pytest.mark.parametrize("it, ot", [("uint8", "float32"), ("float32", "uint8"), ("uint8", "uint8"),
                                    ("int8", "float32")])
def test_qat_boundaries_run_as_the_int8_model_does(it: str, ot: str) -> None:
    """TF's frozen-graph path has no int8 model with a uint8 boundary (uint8 makes it all uint8):
    the boundary of a QAT graph must compute what the int8 file computes, in LiteRT REF, and what TF
    writes for PTQ (the structure, checked in the PTQ tests below)."""
    m = corpus.build_model("two_inputs_arith")
    kw = dict(inputs=m.inputs, outputs=m.outputs, inputs_range=m.input_ranges)
    base = convert_graph(m.graph_def, **kw).model
    ours = convert_graph(m.graph_def, input_type=it, output_type=ot, **kw).model
    sb, so = structure(base), structure(ours)
    assert [op for op in so["ops"] if op[0] not in BOUNDARY] == sb["ops"]
    for name, (dtype, shape, scale, zp) in so["inputs"].items():
        bd, bs, bsc, bzp = sb["inputs"][name]
        want = {"float32": ("float32", (), ()), "uint8": ("uint8", bsc, tuple(z + 128 for z in bzp)),
                "int8": ("int8", bsc, bzp)}[it]
        assert (dtype, scale, zp) == want and shape == bs
    model = IntegerModel(ours)
    (_, _, s, z), = sb["outputs"].values()
    for feed in _feeds(ours, m.input_ranges, 8):
        got = oracle.run_litert(ours, feed)
        for x, y in zip(got, model.run(feed).values()):  # qconvert run == LiteRT REF
            assert x.dtype == y.dtype and np.array_equal(x, y)
        if it == "float32":
            continue  # an int8 reference feed would need LiteRT's own rounding of x / scale
        int8_feed = {k: (x.astype(np.int16) - 128 if x.dtype == np.uint8 else x).astype(np.int8)
                     for k, x in feed.items()}
        for x, y in zip(got, oracle.run_litert(base, int8_feed)):  # the int8 model's result, converted
            if ot == "float32":  # (q - zp) * scale, as LiteRT's DEQUANTIZE computes it
                assert np.array_equal(x, (y.astype(np.int32) - z[0]).astype(np.float32) * np.float32(s[0]))
            elif ot == "uint8":
                assert np.array_equal(x.astype(np.int16) - 128, y)
            else:
                assert np.array_equal(x, y)


# -------------------------------------------------------------------- PTQ, given TensorFlow's ranges

def _ptq(monkeypatch: pytest.MonkeyPatch, name: str, it: str, ot: str, int16: bool = False) -> tuple[bytes, bytes, Any]:
    m = corpus.build_float_graph(name)
    rng = np.random.default_rng(0)
    samples = {k: rng.uniform(*m.input_ranges[k], size=[16, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}
    model = oracle.FloatGraph(m.graph_def, m.inputs, m.outputs, m.shapes)
    theirs = oracle.tf_ptq_convert(model, samples, int16=int16, input_type=it, output_type=ot)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples,
                         activations="int16" if int16 else "int8", input_type=it, output_type=ot).model
    return ours, theirs, m


PTQ_CASES = [
    ("two_inputs_arith", "uint8", "float32"),
    ("two_inputs_arith", "float32", "uint8"),
    ("sigmoid_tanh_two_outputs", "uint8", "uint8"),
    ("sigmoid_tanh_two_outputs", "float32", "float32"),
    ("conv_relu_perchannel", "int8", "float32"),
    ("conv_relu_perchannel", "uint8", "int8"),
]


@pytest.mark.parametrize("name, it, ot", PTQ_CASES, ids=[f"{n}-{i}-{o}" for n, i, o in PTQ_CASES])
def test_ptq_boundaries_equal_tensorflows(name: str, it: str, ot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs, m = _ptq(monkeypatch, name, it, ot)
    _assert_same(ours, theirs, m.input_ranges)


CASES_16X8 = [("two_inputs_arith", "float32", "float32"), ("sigmoid_tanh_two_outputs", "int16", "float32"),
              ("sigmoid_tanh_two_outputs", "float32", "int16"), ("sigmoid_tanh_two_outputs", "uint8", "float32")]


@pytest.mark.parametrize("name, it, ot", CASES_16X8, ids=[f"{n}-{i}-{o}" for n, i, o in CASES_16X8])
def test_16x8_boundaries_equal_tensorflows(name: str, it: str, ot: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ours, theirs, m = _ptq(monkeypatch, name, it, ot, int16=True)
    _assert_same(ours, theirs, m.input_ranges)


@pytest.mark.parametrize("name", ["lenet", "mobilenet_v2"])
def test_tfmot_float_io_equals_tensorflows(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """tfmot-trained Keras models (frozen, cached): float32 I/O, as TF's frozen-graph path writes it
    with ``inference_input_type=float32`` (BatchNorm folded with TF's rsqrt, to compare every constant:
    docs/differences.md)."""
    pytest.importorskip("tensorflow_model_optimization", reason="tfmot builds the QAT models")
    import tfmot_corpus

    oracle.use_tensorflows_rsqrt(monkeypatch)

    m = tfmot_corpus.build_tfmot_model(name)
    theirs = oracle.tf_convert(m, input_type="float32")
    ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, inputs_range=m.input_ranges,
                         input_type="float32", output_type="float32").model
    _assert_same(ours, theirs, m.input_ranges, n=4)
