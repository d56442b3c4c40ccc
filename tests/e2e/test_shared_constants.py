"""Equal constants stored once, as TensorFlow 2.21 stores them (issue 35), against TensorFlow's file.

TensorFlow merges constants equal as float constants of the graph (dtype, shape, bytes) before it
quantizes them; each reader then gets the quantized constant it needs, one tensor per distinct
quantized form. Constants that differ as floats stay apart, even when their int8 bytes are equal.
Each case compares with TensorFlow's file: the multiset of constant tensors (dtype, shape, scales,
zero points, axis, bytes), the number of tensors, which ops read the same constant tensor (ops
paired by data flow), and the outputs in LiteRT REF.
"""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the graphs and is the oracle")


def _graph(build: Any) -> bytes:
    g = tf.Graph()
    with g.as_default():
        build()
    return g.as_graph_def().SerializeToString()


def _unrolled_cell(n: int, seed: int = 0, fake_quant: bool = False) -> bytes:
    """Three steps of relu(h·W + b)·(t+1), W and b separate Const nodes with equal values each step
    (as an unrolled recurrent cell is frozen); step 3's W differs (step 2's ·2 folds into it)."""
    rng = np.random.default_rng(seed)
    w, b = rng.normal(size=[n, n]).astype(np.float32), rng.normal(size=[n]).astype(np.float32)

    def build() -> None:
        x = tf.compat.v1.placeholder(tf.float32, [1, n], name="input")
        h = x
        if fake_quant:
            h = tf.quantization.fake_quant_with_min_max_vars(h, -1.0, 1.0)
        for t in range(3):
            wt = tf.constant(w)
            if fake_quant:
                m = np.abs(w).max(axis=0)  # symmetric per output channel, as QAT tools train weights
                wt = tf.quantization.fake_quant_with_min_max_vars_per_channel(wt, -m, m, narrow_range=True)
            h = tf.nn.relu(tf.matmul(h, wt) + tf.constant(b))
            if fake_quant:
                h = tf.quantization.fake_quant_with_min_max_vars(h, 0.0, 6.0 * (t + 1))
            else:
                h = h * (t + 1.0)
        tf.identity(h, name="out")

    return _graph(build)


def _one_ulp_apart() -> bytes:
    """W read by two FULLY_CONNECTEDs, and W with one non-maximal element one ulp up: equal int8
    bytes and scales, yet TensorFlow keeps two tensors (it merges floats, not int8 tensors). The
    three read one float bias, and each gets its own int32 tensor, even the two behind the input
    (equal scales and bytes): TensorFlow quantizes a bias per reader."""
    rng = np.random.default_rng(0)
    w = rng.normal(size=[8, 8]).astype(np.float32)
    bias = rng.normal(size=[8]).astype(np.float32)
    w2 = w.copy()
    r = int(np.argmin(np.abs(w[:, 0])))
    w2[r, 0] = np.nextafter(w2[r, 0], np.float32(9))

    def build() -> None:
        x = tf.compat.v1.placeholder(tf.float32, [1, 8], name="input")
        a = tf.nn.relu(tf.matmul(x, tf.constant(w)) + tf.constant(bias))
        b = tf.nn.relu(tf.matmul(x, tf.constant(w2)) + tf.constant(bias))
        d = tf.nn.relu(tf.matmul(a, tf.constant(w)) + tf.constant(bias))
        tf.identity(tf.concat([a, b, d], 1), name="out")

    return _graph(build)


# ----------------------------------------------------------------------------- what is compared


def _constants(tflite: bytes) -> Counter:
    from qconvert.schema.reader import read_model

    sg = read_model(tflite).subgraphs[0]
    return Counter((t.dtype, tuple(t.shape), tuple(np.float32(t.scale)), tuple(t.zero_point),
                    t.quantized_dimension if len(t.scale) > 1 else 0, bytes(t.data))
                   for t in sg.tensors if t.data is not None)


def _tensor_count(tflite: bytes) -> int:
    from qconvert.schema.reader import read_model

    return len(read_model(tflite).subgraphs[0].tensors)


def _sharing(ours: bytes, theirs: bytes) -> tuple[set, set]:
    """Which (op, operand slot) pairs read the same constant tensor, in each file, ops paired by
    data flow: as sets of groups of (index of the pair, slot)."""
    import file_compare

    from qconvert.schema.reader import read_model

    groups: tuple[dict, dict] = ({}, {})
    for p, (_, _, t_in, o_in) in enumerate(file_compare.pair_by_data_flow(read_model(theirs), read_model(ours))):
        for side, operands in enumerate((t_in, o_in)):
            for k, a in enumerate(operands):
                if a[0] == "const":
                    groups[side].setdefault(id(a[1]), set()).add((p, k))
    return {frozenset(g) for g in groups[0].values()}, {frozenset(g) for g in groups[1].values()}


def _assert_as_tensorflow_stores(ours: bytes, theirs: bytes) -> None:
    assert _constants(ours) == _constants(theirs)
    assert _tensor_count(ours) == _tensor_count(theirs)
    t_groups, o_groups = _sharing(ours, theirs)
    assert o_groups == t_groups


def _ptq(pb: bytes, samples: dict[str, np.ndarray], monkeypatch: pytest.MonkeyPatch,
         outputs: tuple[str, ...] = ("out",)) -> tuple[bytes, bytes]:
    import oracle

    from qconvert.api import convert_graph

    shape = list(next(iter(samples.values())).shape[1:])
    model = oracle.FloatGraph(pb, ["input"], list(outputs), {"input": [1, *shape]})
    theirs = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    oracle.use_tensorflows_rsqrt(monkeypatch)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, unpaired[:5]
    ours = convert_graph(pb, inputs=["input"], outputs=list(outputs), calibration_data=samples).model
    report = oracle.compare_ptq(ours, theirs, samples, ["input"])
    assert report.max_rel_scale == 0 and not report.weight_diffs and report.max_lsb == 0, report
    return ours, theirs


# ----------------------------------------------------------------------------- the cases


def test_unrolled_cell_stores_its_weight_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One int8 W read by steps 1 and 2 (step 3's W has the ·2 folded in); three int32 biases,
    as the input scales differ."""
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, 8)).astype(np.float32)}
    ours, theirs = _ptq(_unrolled_cell(8), samples, monkeypatch)
    _assert_as_tensorflow_stores(ours, theirs)
    assert Counter(c[0] for c in _constants(ours)) == {"int8": 3, "int32": 3}


def test_floats_one_ulp_apart_stay_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, 8)).astype(np.float32)}
    ours, theirs = _ptq(_one_ulp_apart(), samples, monkeypatch)
    _assert_as_tensorflow_stores(ours, theirs)
    weights = [c for c in _constants(ours).elements() if c[1] == (8, 8)]
    assert len(weights) == 2 and weights[0][5] == weights[1][5]  # equal bytes, two tensors
    biases = [c for c in _constants(ours).elements() if c[0] == "int32"]
    assert len(biases) == 3 and len(set(biases)) == 2  # two of them equal, still two tensors


@pytest.mark.parametrize("name", ["MobileNetV3Small", "ConvNeXtTiny"])
def test_keras_apps_share_constants_as_tensorflow(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """MobileNetV3Small: the hard-swish 1/6 one int8 scalar read by every MUL; ConvNeXtTiny: the
    LayerNorm axes one int32 tensor, ... (given TensorFlow's recorded ranges)."""
    import keras_apps

    pb, shape = keras_apps.build(name)
    samples = {"input": np.random.default_rng(1).uniform(-1, 1, (8, *shape[1:])).astype(np.float32)}
    ours, theirs = _ptq(pb, samples, monkeypatch, outputs=("Identity",))
    _assert_as_tensorflow_stores(ours, theirs)


def test_qat_unrolled_cell() -> None:
    import oracle

    from qconvert.api import convert_graph

    pb = _unrolled_cell(8, fake_quant=True)
    model = SimpleNamespace(name="cell", graph_def=pb, inputs=["input"], outputs=["out"], shapes={"input": [1, 8]},
                            input_ranges={"input": (-1.0, 1.0)})
    theirs = oracle.tf_convert(model)
    ours = convert_graph(pb, inputs=["input"], outputs=["out"]).model
    _assert_as_tensorflow_stores(ours, theirs)
    assert oracle.compare_models(ours, theirs).max_abs_diff == 0


@pytest.mark.parametrize("weights", ["int8", "float16"])
def test_dynamic_range_and_float16_unrolled_cell(weights: str) -> None:
    """--activations float: W (1024 elements: int8 in the dynamic-range file) and b merged as floats
    before they are quantized, so one int8 W (one FLOAT16 W behind one DEQUANTIZE) is read by steps
    1 and 2 and one bias by all three steps."""
    import file_compare

    from qconvert.api import convert_graph

    pb = _unrolled_cell(32)
    theirs = file_compare.tf_dynamic_range(pb, ["input"], ["out"], {"input": [1, 32]}, weights == "float16")
    ours = convert_graph(pb, inputs=["input"], outputs=["out"], activations="float", weights=weights).model
    _assert_as_tensorflow_stores(ours, theirs)
    file_compare.compare_files(ours, theirs)
    file_compare.compare_outputs(ours, theirs, {"input": [1, 32]})
