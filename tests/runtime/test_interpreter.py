"""``qconvert run``: the integer-only executor against LiteRT's reference kernels.

Oracle: LiteRT's interpreter with ``OpResolverType.BUILTIN_REF`` and
``experimental_preserve_all_tensors=True``. For every corpus model of the QAT issues and
32 random int8 inputs, every tensor our executor computes must equal LiteRT's, bit for bit.

That the stored metadata is what drives the arithmetic (and not the float scales) is
checked twice: a file whose float scales are all rewritten runs to the same bytes, and a
file with one corrupted multiplier runs differently (and ``dump`` flags it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import corpus  # noqa: E402
import numpy as np
import oracle  # noqa: E402
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert's interpreter is the oracle")

from qconvert.api import convert_bytes  # noqa: E402
from qconvert.errors import RunError  # noqa: E402
from qconvert.runtime.interpreter import IntegerModel  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
N_INPUTS = 32

# Ops where bit equality with LiteRT's BUILTIN_REF is not reached: op -> (max LSB, why).
# None: FULLY_CONNECTED, which LiteRT 2.3 rounds in double precision, is reproduced from the
# factor's 64 bits stored in the file. With integer_fully_connected (TFLite's classic
# integer kernel, the 31-bit multiplier) it may differ by this much:
INTEGER_FC = {"FULLY_CONNECTED": (1, "the 31-bit multiplier with double rounding vs LiteRT 2.3's double product")}


def litert_tensors(tflite: bytes, feeds: dict[str, np.ndarray], resolver: str = "ref") -> dict[str, np.ndarray]:
    """Every tensor after one run in LiteRT: reference kernels, or the builtin ones
    (``resolver="builtin"``: REF lacks DEPTHWISE_CONV_2D v7, the INT4-weight version)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_REF if resolver == "ref" else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_content=bytes(tflite), experimental_op_resolver_type=kind,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], feeds[d["name"]])
    it.invoke()
    out = {}
    for d in it.get_tensor_details():
        try:
            out[d["name"]] = it.get_tensor(d["index"]).copy()
        except ValueError:  # tensors with no data (none in our files, but be safe)
            pass
    return out


def random_feeds(model: IntegerModel, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random values over the whole range of each input's type (int8, or int16 in a 16x8 file)."""
    return {d["name"]: rng.integers(np.iinfo(d["dtype"]).min, np.iinfo(d["dtype"]).max + 1, d["shape"])
            .astype(d["dtype"]) for d in model.input_details()}


def convert_corpus_model(m: corpus.CorpusModel) -> bytes:
    return convert_bytes(m.graph_def, input_ranges=dict(m.input_ranges),
                   input_shapes={k: list(v) for k, v in m.shapes.items()},
                   inputs=list(m.inputs), outputs=list(m.outputs))


def assert_matches_litert(tflite: bytes, n_inputs: int = N_INPUTS, seed: int = 0,
                          integer_fully_connected: bool = False, resolver: str = "ref") -> dict[str, Any]:
    """Each operator, run on LiteRT's own input tensors, gives LiteRT's output tensor (within
    INTEGER_FC when asked for the integer FULLY_CONNECTED); the whole integer run gives
    LiteRT's outputs. Returns the figures: per op, (elements differing, elements, max LSB);
    and for the model outputs the same."""
    not_exact = INTEGER_FC if integer_fully_connected else {}
    model = IntegerModel(tflite, integer_fully_connected=integer_fully_connected)
    rng = np.random.default_rng(seed)
    per_op: dict[str, list[int]] = {}
    outputs = [0, 0, 0]
    for _ in range(n_inputs):
        feeds = random_feeds(model, rng)
        ref = litert_tensors(tflite, feeds, resolver)
        for k, op in enumerate(model.model.operators):
            name = model.tensors[op.outputs[0]].name
            got = model.run_op(k, ref)
            pairs = [(v, ref[model.tensors[i].name]) for v, i in zip(got if isinstance(got, list) else [got],
                                                                       op.outputs)]  # SPLIT, UNPACK: several
            for a, b in pairs:
                assert a.shape == b.shape and a.dtype == b.dtype, \
                    f"op {k} {op.builtin} '{name}': {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
            d = np.concatenate([np.abs(a.astype(np.float64) - b.astype(np.float64)).reshape(-1) for a, b in pairs])
            f = per_op.setdefault(op.builtin, [0, 0, 0])
            f[0] += int((d > 0).sum())
            f[1] += d.size
            f[2] = max(f[2], int(np.ceil(d.max())) if d.size else 0)
            allowed = not_exact.get(op.builtin, (0, ""))[0]
            assert d.max(initial=0) <= allowed, \
                f"op {k} {op.builtin} '{name}': differs from LiteRT BUILTIN_REF by up to {d.max()} LSB"
        ours = model.run(feeds)
        for name, v in ours.items():
            d = np.abs(v.astype(np.float64) - ref[name].astype(np.float64))
            outputs[0] += int((d > 0).sum())
            outputs[1] += d.size
            outputs[2] = max(outputs[2], int(np.ceil(d.max())))
    if not any(op in not_exact for op in per_op):
        assert outputs[0] == 0, f"model outputs differ from LiteRT: {outputs}"
    return {"ops": {k: tuple(v) for k, v in per_op.items()}, "outputs": tuple(outputs)}


# ---------------------------------------------------------------------------
# bit equality with LiteRT, every tensor


@pytest.mark.parametrize("name", corpus.MODEL_NAMES)
def test_tf1_corpus_every_tensor_equals_litert(name: str, record_property: Callable[[str, Any], None]) -> None:
    figures = assert_matches_litert(convert_corpus_model(corpus.build_model(name)))
    record_property("figures", figures)
    print(name, figures)


def _variants():  # type: ignore[no-untyped-def]
    import variants

    return variants


@pytest.mark.parametrize("name", _variants().BIT_EXACT + _variants().DOUBLE_FAKE_QUANT)
def test_edge_case_variants_every_tensor_equals_litert(name: str) -> None:
    variants = _variants()
    every = variants.BIT_EXACT + list(variants.TF_LEAVES_FLOAT) + variants.DOUBLE_FAKE_QUANT
    m = corpus.build_qat_graph(name, 100 + every.index(name), getattr(variants, name))  # as test_e2e_variants
    print(name, assert_matches_litert(convert_corpus_model(m)))


def test_integer_fully_connected_is_within_one_lsb() -> None:
    """TFLite's classic integer FULLY_CONNECTED (31-bit multiplier, double rounding) against
    LiteRT 2.3's double-precision reference: at most 1 LSB apart, and apart somewhere."""
    differing = total = 0
    for name in ("fq_args_identity_noop", "narrow_ranges", "pad_squeeze_reshape", "small_classifier"):
        figures = assert_matches_litert(convert_corpus_model(corpus.build_model(name)), integer_fully_connected=True)
        d, n, worst = figures["ops"]["FULLY_CONNECTED"]
        assert worst <= 1
        differing, total = differing + d, total + n
    print(f"integer FULLY_CONNECTED: {differing} of {total} outputs 1 LSB off LiteRT")
    assert 0 < differing < total // 50


PTQ_MODELS = ["conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual", "two_inputs_arith",
              "concat_branches", "pad_squeeze_reshape", "sigmoid_tanh_two_outputs", "small_classifier",
              "mean_keepdims_mul", "requantize"]


@pytest.mark.parametrize("name", PTQ_MODELS)
def test_calibrated_float_twins_every_tensor_equals_litert(name: str) -> None:
    """Post-training calibrated models (per-channel FULLY_CONNECTED, calibrated scales)."""
    pytest.importorskip("tensorflow", reason="the float twins are built with TensorFlow")
    from qconvert.api import convert_graph

    m = corpus.build_float_graph(name)
    rng = np.random.default_rng(0)
    samples = {k: rng.uniform(*m.input_ranges[k], size=[16, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}
    tflite = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples).model
    print(name, assert_matches_litert(tflite))


def _registered_in_ref(tflite: bytes) -> bytes:
    """The file with DEPTHWISE_CONV_2D version 7 (INT4 weights) relabelled 6: LiteRT 2.3 registers
    the reference depthwise kernel only up to version 6, but that kernel reads INT4 filters (it
    unpacks them); the result is compared against its arithmetic, not the version number."""
    def edit(m: Any) -> None:
        for oc in m.operatorCodes:
            if oc.builtinCode == 4 and oc.version == 7:
                oc.version = 6
    return oracle.repack(tflite, edit)


@pytest.mark.parametrize("name", ["conv_relu_perchannel", "depthwise", "small_classifier", "residual"])
def test_int4_weight_models_every_tensor_equals_litert(name: str) -> None:
    """4-bit QAT weights stored INT4 (CONV_2D v7, DEPTHWISE_CONV_2D v7, FULLY_CONNECTED v10): the
    executor unpacks them from the file."""
    pytest.importorskip("tensorflow", reason="the corpus is built with TensorFlow")
    seed, fn = corpus._BUILDERS[name]
    tflite = convert_corpus_model(corpus.build_qat_graph(name, seed, fn, weight_bits=4))
    assert any(t.dtype == "int4" for t in IntegerModel(tflite).tensors)
    print(name, assert_matches_litert(_registered_in_ref(tflite), n_inputs=8))


def test_weights_int4_float_twin_every_tensor_equals_litert() -> None:
    """``--weights int4`` on a calibrated float graph: CONV_2D v7 and FULLY_CONNECTED v10 with
    per-channel INT4 weights, which LiteRT's reference kernels run."""
    pytest.importorskip("tensorflow", reason="the float twins are built with TensorFlow")
    from qconvert.api import convert_graph

    m = corpus.build_float_graph("small_classifier")
    rng = np.random.default_rng(0)
    samples = {k: rng.uniform(*m.input_ranges[k], size=[16, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}
    tflite = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples,
                           weights="int4").model
    print(assert_matches_litert(tflite, n_inputs=8))


@pytest.fixture(scope="module")
def tfmot():  # type: ignore[no-untyped-def]
    pytest.importorskip("tensorflow", reason="the tfmot corpus is built with TensorFlow")
    import tfmot_corpus

    return tfmot_corpus


TFMOT = ["mobilenet_v2", "mobilenet_v1", "resnet_small", "mlp", "lenet", "conv_bn_gap_head", "extras",
         "depthwise_multiplier"]


@pytest.mark.parametrize("name", TFMOT)
def test_tfmot_corpus_every_tensor_equals_litert(name: str, tfmot) -> None:  # type: ignore[no-untyped-def]
    assert name in tfmot.TFMOT_MODEL_NAMES
    print(name, assert_matches_litert(convert_corpus_model(tfmot.build_tfmot_model(name)), n_inputs=N_INPUTS))


def test_example_model_every_tensor_equals_litert() -> None:
    tflite = convert_bytes(ROOT / "models" / "digits_qat.pb", input_ranges={"input": (-1.0, 1.0)})
    print("digits_qat", assert_matches_litert(tflite))


# ---------------------------------------------------------------------------
# the metadata, not the float scales, drives the arithmetic


@pytest.fixture(scope="module")
def example() -> bytes:
    return convert_bytes(ROOT / "models" / "digits_qat.pb", input_ranges={"input": (-1.0, 1.0)})


def test_without_metadata_the_parameters_come_from_the_scales(example: bytes) -> None:
    """The same file without qconvert's metadata (as another converter would write it): ``run``
    derives the records from the scales, and they are the stored ones; the outputs are equal."""
    bare = oracle.repack(example, lambda m: setattr(m, "metadata", []))
    with_records, without = IntegerModel(example), IntegerModel(bare)
    assert without.computed and not with_records.computed
    computed = {k: r.fields() for k, r in without.records.items()}
    assert computed == {k: r.fields() for k, r in with_records.records.items()}
    feeds = random_feeds(with_records, np.random.default_rng(2))
    for name, v in with_records.run(feeds).items():
        np.testing.assert_array_equal(v, without.run(feeds)[name])


def test_float_scales_are_not_read(example: bytes) -> None:
    """Every float scale in the file tripled (but the fixed 1/256 of SOFTMAX's output, which
    LiteRT insists on): LiteRT's answer changes, ours does not."""
    def triple_scales(m: Any) -> None:
        sg = m.subgraphs[0]
        fixed = {op.outputs[0] for op in sg.operators
                 if m.operatorCodes[op.opcodeIndex].builtinCode in (25, 14, 28)}  # SOFTMAX, LOGISTIC, TANH
        for k, t in enumerate(sg.tensors):
            q = t.quantization
            if k not in fixed and q is not None and q.scale is not None:
                q.scale = [float(s) * 3.0 for s in q.scale]

    tampered = oracle.repack(example, triple_scales)
    rng = np.random.default_rng(1)
    model = IntegerModel(example)
    feeds = random_feeds(model, rng)
    ours_before = model.run(feeds)
    ours_after = IntegerModel(tampered).run(feeds)
    for k in ours_before:
        np.testing.assert_array_equal(ours_before[k], ours_after[k])
    ref_before, ref_after = litert_tensors(example, feeds), litert_tensors(tampered, feeds)
    assert any(not np.array_equal(ref_before[k], ref_after[k]) for k in ours_before), \
        "LiteRT should recompute its multipliers from the tripled scales"


def _corrupt_first_multiplier(tflite: bytes, op_index: int, delta: int) -> bytes:
    from qconvert.schema.requant_metadata import METADATA_NAME, decode, encode

    def edit(m: Any) -> None:
        for md in m.metadata:
            name = md.name.decode() if isinstance(md.name, bytes) else md.name
            if name == METADATA_NAME:
                buf = m.buffers[md.buffer]
                recs = decode(bytes(bytearray(buf.data)))
                rec = next(r for r in recs if r.op_index == op_index)
                mult, shift = rec.pairs[0]
                rec.pairs[0] = (mult + delta, shift)
                buf.data = np.frombuffer(encode(recs), dtype=np.uint8)

    return oracle.repack(tflite, edit)


def test_a_corrupted_multiplier_changes_the_result_and_dump_flags_it(example: bytes, tmp_path: Path) -> None:
    from qconvert.tools.dump import describe

    bad = _corrupt_first_multiplier(example, 0, -(2**28))  # CONV_2D channel 0: multiplier x ~0.85
    rng = np.random.default_rng(2)
    good_model, bad_model = IntegerModel(example), IntegerModel(bad)
    diverged = 0
    for _ in range(8):
        feeds = random_feeds(good_model, rng)
        _, a = good_model.run(feeds, trace=True)
        _, b = bad_model.run(feeds, trace=True)
        first = good_model.tensors[good_model.model.operators[0].outputs[0]].name
        diverged += int(not np.array_equal(a[first], b[first]))
        # LiteRT ignores our metadata: it still agrees with the good file
        np.testing.assert_array_equal(litert_tensors(bad, feeds)[first], a[first])
    assert diverged == 8
    (tmp_path / "bad.tflite").write_bytes(bad)
    doc = describe(tmp_path / "bad.tflite")
    flagged = [op for op in doc["subgraphs"][0]["operators"] if op["requant_ok"] is False]
    assert [op["index"] for op in flagged] == [0]


# ---------------------------------------------------------------------------
# the command


def qconvert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, cwd=ROOT)


def test_run_command_writes_outputs_and_trace(example: bytes, tmp_path: Path) -> None:
    model_path = tmp_path / "m.tflite"
    model_path.write_bytes(example)
    model = IntegerModel(example)
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (5, 1, 8, 8, 1)).astype(np.int8)  # 5 samples
    np.savez(tmp_path / "x.npz", input=x)
    r = qconvert("run", str(model_path), "--input", str(tmp_path / "x.npz"), "-o", str(tmp_path / "out.npz"),
                 "--trace")
    assert r.returncode == 0, r.stderr
    assert "SOFTMAX" in r.stdout and "Identity" in r.stdout
    out = np.load(tmp_path / "out.npz")
    for k in range(5):
        ref = litert_tensors(example, {"input": x[k]})
        for op in model.model.operators:
            name = model.tensors[op.outputs[0]].name
            np.testing.assert_array_equal(out[name][k], ref[name])


def test_run_quantizes_float_inputs_only_when_asked(example: bytes, tmp_path: Path) -> None:
    model_path = tmp_path / "m.tflite"
    model_path.write_bytes(example)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 8, 8, 1)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    r = qconvert("run", str(model_path), "--input", str(tmp_path / "x.npy"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--quantize-inputs" in r.stderr
    r = qconvert("run", str(model_path), "--input", str(tmp_path / "x.npy"), "--quantize-inputs",
                 "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    scale = 2.0 / 255.0  # input range [-1, 1]: the interpreter's own quantization, by hand
    q = np.clip(np.floor(np.abs(x / np.float32(scale)) + 0.5) * np.sign(x), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")["Identity"], litert_tensors(example, {"input": q})[
        "Identity"])


def test_run_errors_are_one_line(example: bytes, tmp_path: Path) -> None:
    model_path = tmp_path / "m.tflite"
    model_path.write_bytes(example)
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 1), np.int8))
    tf_file = tmp_path / "tf.tflite"  # a file without qconvert's metadata
    tf_file.write_bytes(oracle.repack(example, lambda m: setattr(m, "metadata", [])))
    r = qconvert("run", str(tf_file), "--input", str(tmp_path / "x.npy"))  # no metadata: from the scales
    assert r.returncode == 0, r.stderr
    cases = {
        "missing input file": ["run", str(model_path), "--input", str(tmp_path / "nope.npz")],
        "wrong shape": ["run", str(model_path), "--input", str(tmp_path / "wrong.npy")],
        "not a model": ["run", str(tmp_path / "x.npy"), "--input", str(tmp_path / "x.npy")],
        "not an array file": ["run", str(model_path), "--input", str(tmp_path / "garbage.npz")],
    }
    (tmp_path / "garbage.npz").write_text("not numpy\n")
    np.save(tmp_path / "wrong.npy", np.zeros((3, 3), np.int8))
    for what, args in cases.items():
        r = qconvert(*args)
        assert r.returncode == 1, (what, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (what, r.stderr)
        assert "pickle" not in r.stderr, r.stderr
    r = qconvert("run", str(model_path))
    assert r.returncode == 2


# ---------------------------------------------------------------------------
# the table and fixed-point kernels over every int8 value


def _activation_graph(lo: float, hi: float, relu_hi: float) -> bytes:
    tf = pytest.importorskip("tensorflow", reason="the graph is built with TensorFlow")
    fq = tf.quantization.fake_quant_with_min_max_args
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 256], name="x")
        xq = fq(x, min=lo, max=hi, num_bits=8)
        tf.identity(fq(tf.sigmoid(xq), min=0.0, max=1.0), name="sigmoid_out")
        tf.identity(fq(tf.tanh(xq), min=-1.0, max=1.0), name="tanh_out")
        tf.identity(fq(tf.nn.softmax(xq), min=0.0, max=1.0), name="softmax_out")
        tf.identity(fq(tf.nn.relu6(xq), min=0.0, max=6.0), name="relu6_out")
        tf.identity(fq(tf.nn.relu(xq), min=0.0, max=relu_hi), name="relu_out")
    return g.as_graph_def().SerializeToString()


@pytest.mark.parametrize("lo, hi, relu_hi", [(-8.0, 8.0, 5.0), (-3.0, 1.5, 1.2), (-0.5, 12.0, 20.0)])
def test_activations_equal_litert_on_every_int8_value(lo: float, hi: float, relu_hi: float) -> None:
    tflite = convert_bytes(_activation_graph(lo, hi, relu_hi), input_ranges={"x": (lo, hi)},
                     outputs=["sigmoid_out", "tanh_out", "softmax_out", "relu6_out", "relu_out"])
    model = IntegerModel(tflite)
    assert {op.builtin for op in model.model.operators} >= {"LOGISTIC", "TANH", "SOFTMAX", "RELU6", "RELU"}
    rng = np.random.default_rng(5)
    rows = [np.arange(-128, 128)] + [rng.permutation(256) - 128 for _ in range(3)]
    rows += [rng.integers(-128, 128, 256) for _ in range(12)] + [np.full(256, 7), np.r_[np.full(255, -128), 127]]
    for row in rows:
        feeds = {"x": row.astype(np.int8).reshape(1, 256)}
        ref = litert_tensors(tflite, feeds)
        ours = model.run(feeds)
        for name, value in ours.items():
            np.testing.assert_array_equal(value, ref[name], err_msg=name)


# ---------------------------------------------------------------------------
# data-movement kernels no corpus model reaches, against TensorFlow's ops


def _call(builtin: str, inputs: list, output_zp: int = 0, shape: tuple = ()) -> Any:
    from qconvert.runtime.kernels import OpCall

    return OpCall(index=0, builtin=builtin, name="y", options={}, inputs=inputs, input_zps=[0] * len(inputs),
                  output_zp=output_zp, output_shape=shape, record=None)


def test_space_to_batch_and_back_equal_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's ops are the oracle")
    from qconvert.runtime import kernels

    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (2, 5, 7, 3)).astype(np.int8)
    block, pads, zp = np.array([2, 3], np.int32), np.array([[1, 0], [2, 0]], np.int32), -7
    ours = kernels.space_to_batch_nd(_call("SPACE_TO_BATCH_ND", [x, block, pads], output_zp=zp))
    ref = tf.space_to_batch_nd(x.astype(np.int32) - zp, block, pads).numpy() + zp  # padded with the zero point
    np.testing.assert_array_equal(ours, ref)
    crops = np.array([[1, 0], [2, 0]], np.int32)
    back = kernels.batch_to_space_nd(_call("BATCH_TO_SPACE_ND", [ours, block, crops]))
    np.testing.assert_array_equal(back, tf.batch_to_space(ours, block, crops).numpy())
    np.testing.assert_array_equal(back, x)


def test_maximum_minimum_broadcast_equal_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's ops are the oracle")
    from qconvert.runtime import kernels

    rng = np.random.default_rng(9)
    a = rng.integers(-128, 128, (1, 4, 4, 3)).astype(np.int8)
    b = rng.integers(-128, 128, (1, 1, 1, 3)).astype(np.int8)
    np.testing.assert_array_equal(kernels.maximum(_call("MAXIMUM", [a, b])), tf.maximum(a, b).numpy())
    np.testing.assert_array_equal(kernels.minimum(_call("MINIMUM", [a, b])), tf.minimum(a, b).numpy())


def test_damaged_files_fail_with_one_line_not_a_crash(example: bytes) -> None:
    """500 mutated copies of a model (bit flips, truncations, splices: bench/fuzz.py): each one
    runs or is refused with a RunError naming the problem — never another exception."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fuzz

    from qconvert.errors import ConversionError

    x = {"input": np.random.default_rng(11).integers(-128, 128, (1, 8, 8, 1)).astype(np.int8)}
    outcomes = {"ran": 0, "refused": 0}
    for label, data in fuzz.mutations(example, 6000, 3):
        try:
            IntegerModel(data).run(x)
            outcomes["ran"] += 1
        except ConversionError as exc:
            assert "\n" not in str(exc), (label, str(exc))
            outcomes["refused"] += 1
    assert outcomes["refused"] > 50 and outcomes["ran"] > 50, outcomes


# ---------------------------------------------------------------------------
# the integer emulation of LiteRT's double-precision FULLY_CONNECTED rescale

def _double_round(acc: int, d: float) -> int:
    """The FPU's answer: the product in binary64, then std::round (half away from zero)."""
    import math

    v = float(np.float64(acc) * np.float64(d))
    whole = math.floor(abs(v))
    return int(math.copysign(whole + (abs(v) - whole >= 0.5), v))


@settings(max_examples=3000, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1),
       st.floats(min_value=0.0, max_value=1.0, allow_nan=False, allow_infinity=False, allow_subnormal=True))
def test_scale_by_binary64_equals_the_fpu(acc: int, d: float) -> None:
    from qconvert.runtime.int_math import _scale_by_binary64

    bits = int(np.float64(d).view(np.uint64))
    assert _scale_by_binary64(acc, bits) == _double_round(acc, d)


def test_scale_by_binary64_ties_and_product_rounding() -> None:
    from qconvert.runtime.int_math import _scale_by_binary64

    cases = [(3, 0.5), (-3, 0.5), (5, 0.1), (-5, 0.1), (2**31 - 1, 1 / 3), (-(2**31), 0.3),
             (0, 0.7), (7, 5e-324), (123456789, 0.49999999999999994)]
    for acc, d in cases:
        assert _scale_by_binary64(acc, int(np.float64(d).view(np.uint64))) == _double_round(acc, d), (acc, d)
    assert _scale_by_binary64(3, int(np.float64(0.5).view(np.uint64))) == 2  # 1.5 rounds away from zero
    assert _scale_by_binary64(-3, int(np.float64(0.5).view(np.uint64))) == -2


def test_run_takes_samples_on_the_batch_axis(example: bytes, tmp_path: Path) -> None:
    """models/digits_test.npz: 360 float images [360, 8, 8, 1] for a [1, 8, 8, 1] input."""
    model_path = tmp_path / "m.tflite"
    model_path.write_bytes(example)
    r = qconvert("run", str(model_path), "--input", str(ROOT / "models" / "digits_test.npz"), "--quantize-inputs",
                 "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    out = np.load(tmp_path / "o.npz")["Identity"]
    assert out.shape == (360, 10)
    x = np.load(ROOT / "models" / "digits_test.npz")["input"]
    scale = 2.0 / 255.0  # input range [-1, 1]; LiteRT's own quantization of the image, by hand
    for k in (0, 123, 359):
        v = x[k:k + 1] / np.float32(scale)
        q = np.clip(np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5)), -128, 127).astype(np.int8)
        np.testing.assert_array_equal(out[k], litert_tensors(example, {"input": q})["Identity"][0])
    labels = np.load(ROOT / "models" / "digits_test.npz")["labels"]
    assert (out.argmax(axis=1) == labels).mean() > 0.97  # the digits model's int8 accuracy, 98.06% in LiteRT


# ---------------------------------------------------------------------------
# 16x8 files (--activations int16, 16-bit QAT): the int16 kernels, every tensor against LiteRT REF


def _int16_twin(name: str) -> bytes:
    pytest.importorskip("tensorflow", reason="the float twins are built with TensorFlow")
    from qconvert.api import convert_graph

    m = corpus.build_float_graph(name)
    rng = np.random.default_rng(0)
    samples = {k: rng.uniform(*m.input_ranges[k], size=[16, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}
    return convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples,
                         activations="int16").model


@pytest.mark.parametrize("name", PTQ_MODELS)
def test_16x8_float_twins_every_tensor_equals_litert(name: str) -> None:
    """The calibrated float twins in 16x8: int16 inputs over the whole int16 range. CONV_2D,
    DEPTHWISE_CONV_2D, TRANSPOSE_CONV rescale int64 accumulators by the multiplier cut to 16 bits;
    FULLY_CONNECTED by LiteRT 2.3's double product, as in int8; ADD/SUB with left shift 15."""
    tflite = _int16_twin(name)
    model = IntegerModel(tflite)
    assert {t.dtype for t in model.tensors if t.data is None} == {"int16"}
    assert {t.dtype for t in model.tensors if t.data is not None and t.name.endswith("bias")} <= {"int64"}
    print(name, assert_matches_litert(tflite, n_inputs=8))


def _one_op_graph(fn: Callable[[Any], Any], shape: tuple[int, ...] = (1, 8, 8, 4)) -> bytes:
    tf = pytest.importorskip("tensorflow", reason="the graphs are built with TensorFlow")
    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, shape, name="input")
        tf.identity(fn(x), name="output")
    return g.as_graph_def().SerializeToString()


def _one_op_16x8() -> dict[str, Callable[[Any], Any]]:
    tf = pytest.importorskip("tensorflow", reason="the graphs are built with TensorFlow")
    c = np.random.default_rng(4).normal(0, 0.3, 4).astype(np.float32)
    w = np.random.default_rng(5).normal(0, 0.3, (3, 3, 4, 4)).astype(np.float32)
    resize = tf.compat.v1.image
    return {  # the ops the twins do not reach, one graph each
        "LEAKY_RELU": lambda x: tf.nn.leaky_relu(x, 0.2),
        "RESIZE_BILINEAR": lambda x: resize.resize_bilinear(x, [13, 11], half_pixel_centers=True),
        "RESIZE_NEAREST_NEIGHBOR": lambda x: resize.resize_nearest_neighbor(x, [16, 16]),
        "STRIDED_SLICE": lambda x: x[:, 1:7, 1:7, :],
        "SLICE": lambda x: tf.slice(x, [0, 1, 1, 0], [1, 5, 5, 4]),
        "TRANSPOSE": lambda x: tf.transpose(x, [0, 2, 1, 3]),
        "SPLIT": lambda x: tf.concat(tf.split(x, 2, axis=3)[::-1], 3),
        "UNPACK": lambda x: tf.concat(tf.unstack(x, axis=3)[::-1], 2),
        "PACK": lambda x: tf.stack([x, x * 2.0], axis=1),
        "GATHER": lambda x: tf.gather(x, [3, 1, 2, 0], axis=3),
        "REDUCE_MAX": lambda x: tf.reduce_max(x, axis=[1, 2]),
        "MINIMUM": lambda x: tf.minimum(x, tf.constant(c)),
        "MAXIMUM": lambda x: tf.maximum(x, x * 0.5),
        "MUL": lambda x: x * tf.constant(c) + tf.constant(c[::-1]),  # int16 constants
        "MAX_POOL_2D": lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME"),
        "AVERAGE_POOL_2D": lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"),
        "RELU": lambda x: tf.nn.relu(x),
        "MEAN": lambda x: tf.reduce_mean(x, axis=[3]),
        "PAD": lambda x: tf.pad(x, [[0, 0], [1, 2], [2, 1], [0, 0]]) * 2.0,
        "TRANSPOSE_CONV": lambda x: tf.nn.conv2d_transpose(x, tf.constant(w), [1, 16, 16, 4], 2, "SAME")
        + tf.constant(c),
        "CONV_2D": lambda x: tf.nn.relu6(tf.nn.conv2d(x, tf.constant(w), 1, "SAME", dilations=2) + tf.constant(c)),
        "CONCATENATION": lambda x: tf.concat([x, x * 3.0], 3),  # the inputs' ranges kept: a QUANTIZE v2 each
        "LOGISTIC": lambda x: tf.sigmoid(x * 3.0),
        "TANH": lambda x: tf.tanh(x * 3.0),
        "SOFTMAX": lambda x: tf.nn.softmax(x * 3.0),
        "ABS": lambda x: tf.abs(x - tf.constant(c)),
        "EXP": lambda x: tf.exp(x * 2.0),
        "LOG": lambda x: tf.math.log(tf.abs(x) + 0.05),
    }


@pytest.mark.parametrize("op", ["LEAKY_RELU", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "STRIDED_SLICE", "SLICE",
                                "TRANSPOSE", "SPLIT", "UNPACK", "PACK", "GATHER", "REDUCE_MAX", "MINIMUM", "MAXIMUM",
                                "MUL", "MAX_POOL_2D", "AVERAGE_POOL_2D", "RELU", "MEAN", "PAD", "TRANSPOSE_CONV",
                                "CONV_2D", "CONCATENATION", "LOGISTIC", "TANH", "SOFTMAX", "ABS", "EXP",
                                "LOG"])
def test_16x8_one_op_every_tensor_equals_litert(op: str) -> None:
    from qconvert.api import convert_graph

    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 4)).astype(np.float32)}
    tflite = convert_graph(_one_op_graph(_one_op_16x8()[op]), inputs=["input"], outputs=["output"],
                           calibration_data=samples, activations="int16").model
    model = IntegerModel(tflite)
    assert op in {o.builtin for o in model.model.operators}
    print(op, assert_matches_litert(tflite, n_inputs=4))


def test_16bit_qat_files_every_tensor_equals_litert() -> None:
    """16-bit QAT (FakeQuants with num_bits=16 on every activation) converts to a 16x8 file that
    ``run`` executes as LiteRT does."""
    pytest.importorskip("tensorflow", reason="the corpus is built with TensorFlow")
    for name in ("residual", "sigmoid_tanh_two_outputs", "small_classifier"):
        seed, fn = corpus._BUILDERS[name]
        tflite = convert_corpus_model(corpus.build_qat_graph(name, seed, fn, act_bits=16))
        print(name, assert_matches_litert(tflite, n_inputs=4))


def test_16x8_refusals_and_command_line(tmp_path: Path) -> None:
    """An int16 op ``run`` has no kernel for is one line before anything runs; a 16x8 file's records
    are what dump recomputes from its scales; ``run --quantize-inputs`` quantizes to int16."""
    from qconvert.api import convert_graph

    samples = {"input": np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 4)).astype(np.float32)}
    tf = pytest.importorskip("tensorflow", reason="the graphs are built with TensorFlow")
    rsqrt = convert_graph(_one_op_graph(lambda x: tf.math.rsqrt(tf.nn.relu(x) + 1.0)), inputs=["input"],
                          outputs=["output"], calibration_data=samples, activations="int16").model
    with pytest.raises(RunError, match=r"RSQRT .* is int16: `qconvert run` has no int16 kernel"):
        IntegerModel(rsqrt)
    (tmp_path / "r.tflite").write_bytes(rsqrt)
    np.save(tmp_path / "x.npy", samples["input"][:1])
    r = qconvert("run", str(tmp_path / "r.tflite"), "--input", str(tmp_path / "x.npy"), "--quantize-inputs")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "RSQRT" in r.stderr, r.stderr

    tflite = _int16_twin("residual")
    (tmp_path / "m.tflite").write_bytes(tflite)
    r = qconvert("dump", str(tmp_path / "m.tflite"), "--json", "--ops")
    assert r.returncode == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    records = [op["requant"] for sg in doc["subgraphs"] for op in sg["operators"] if op.get("requant")]
    assert records and not any(rec["problems"] for rec in records)
    assert any(rec["left_shift"] == 15 for rec in records)  # the int16 ADD

    model = IntegerModel(tflite)
    d = model.input_details()[0]
    x = np.random.default_rng(3).uniform(-1, 1, d["shape"]).astype(np.float32)
    np.save(tmp_path / "f.npy", x)
    r = qconvert("run", str(tmp_path / "m.tflite"), "--input", str(tmp_path / "f.npy"), "--quantize-inputs",
                 "-o", str(tmp_path / "o.npz"))
    assert r.returncode == 0, r.stderr
    t = model.tensors[model.model.inputs[0]]
    q = np.clip(np.floor(np.abs(x / np.float32(t.scale[0])) + 0.5) * np.sign(x), -32768, 32767).astype(np.int16)
    ref = litert_tensors(tflite, {d["name"]: q})
    out = np.load(tmp_path / "o.npz")
    for name in model.output_names:
        np.testing.assert_array_equal(out[name], ref[name])


def test_int8_rsqrt_table_is_litert_on_every_input_byte() -> None:
    """``rsqrt_table`` (the array form ``run`` and ``dump`` use) against LiteRT REF's int8 RSQRT kernel: a
    one-op file whose input is the RSQRT's (zero point -128, so no byte is below it), fed all 256 bytes."""
    from qconvert.api import convert_graph
    from qconvert.quant.multipliers import rsqrt_table
    from qconvert.schema.reader import read_model

    tf = pytest.importorskip("tensorflow", reason="the graphs are built with TensorFlow")
    samples = {"input": np.random.default_rng(0).uniform(0.05, 3.0, (8, 256)).astype(np.float32)}
    tflite = convert_graph(_one_op_graph(lambda x: tf.math.rsqrt(x), (1, 256)), inputs=["input"], outputs=["output"],
                           calibration_data=samples).model
    io = oracle.io_details(tflite)
    (s_in, z_in), (s_out, z_out) = io["inputs"][0]["quant"], io["outputs"][0]["quant"]
    assert z_in == -128 and [o.builtin for o in read_model(tflite).operators] == ["RSQRT"]
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    want = oracle.run_litert(tflite, {"input": x})[0].reshape(-1)
    table = rsqrt_table(s_in, z_in, s_out, z_out)
    np.testing.assert_array_equal([table[int(b) & 0xFF] for b in x.reshape(-1)], want)
