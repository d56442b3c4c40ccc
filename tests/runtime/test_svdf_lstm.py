"""``qconvert run`` on SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM (int8 activations, int16 state).

Oracle: LiteRT 2.3's interpreter, ``OpResolverType.BUILTIN_REF``, a fresh interpreter per sample
(its VARIABLE state tensors at their reset values, as ``IntegerModel.run`` starts them), every
tensor it holds after ``invoke()`` (the states as the op left them included) against
``IntegerModel.run(trace=True)``. Files: TFLite Micro's and Coral's real files in
../shared/realmodels (skipped when absent), and small Keras LSTMs TensorFlow 2.21 converts with
full-integer post-training quantization (built in a subprocess with Keras 2, ``tf_keras``:
TensorFlow's calibration of a Keras 3 LSTM crashes the process on this machine), and CIFG
copies of two real LSTMs. TensorFlow has no SVDF layer, so SVDF is checked on the real file only.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from qconvert.errors import RunError
from qconvert.ops import requant
from qconvert.quant.requant import operand
from qconvert.runtime import lstm
from qconvert.runtime.interpreter import IntegerModel

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realmodels"
needs_real = pytest.mark.skipif(not REAL.is_dir(), reason=f"{REAL} is absent (real third-party files)")

SVDF_FILES = ["tflite_micro/keyword_scrambled.tflite"]
LSTM_FILES = ["tflite_micro/micro_speech_lstm.tflite", "tflite_micro/trained_lstm_int8.tflite",
              "tflite_micro/dtln_noise_suppression.tflite", "coral_test_data/keras_lstm_mnist_ptq.tflite"]


def _litert(tflite: bytes, feeds: list[np.ndarray]) -> dict[int, np.ndarray]:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=tflite, experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds):
        it.set_tensor(d["index"], x)
    it.invoke()
    out = {}
    for d in it.get_tensor_details():
        try:
            out[d["index"]] = it.get_tensor(d["index"]).copy()
        except ValueError:  # the LSTM's float intermediates hold no data
            pass
    return out


def _trace(model: IntegerModel, feeds: list[np.ndarray]) -> dict[int, np.ndarray]:
    """``run(trace=True)`` by tensor index (TFLite Micro's files leave every name empty): the
    same steps as ``run``, and ``run``'s outputs checked against them."""
    values = model._initial_states()
    values.update(zip(model.model.inputs, feeds))
    for k, op in enumerate(model.model.operators):
        y = model._execute(k, op, values)
        values.update(zip(op.outputs, y if isinstance(y, list) else [y]))
    outputs = model.run(dict(zip(model.input_names, feeds)))
    for i in model.model.outputs:
        assert np.array_equal(outputs[model.tensors[i].name], values[i])
    return values


def _compare(tflite: bytes, feeds_list: list[list[np.ndarray]]) -> dict[str, int]:
    """Every tensor we compute (states as the ops leave them included) against LiteRT's, by
    index; returns the counts compared."""
    model = IntegerModel(tflite)
    assert model.computed
    counts = {"tensors": 0, "elements": 0, "states": 0}
    for feeds in feeds_list:
        ref = _litert(tflite, feeds)
        for i, v in _trace(model, feeds).items():
            assert v.dtype == ref[i].dtype and v.shape == ref[i].shape, (i, v.dtype, ref[i].dtype)
            diff = np.flatnonzero(v != ref[i])
            first = diff[0] if diff.size else 0
            assert diff.size == 0, (f"tensor {i} '{model.tensors[i].name}': {diff.size} of {v.size} differ, first "
                                    f"at {first}: ours {v.reshape(-1)[first]}, LiteRT {ref[i].reshape(-1)[first]}")
            counts["tensors"] += 1
            counts["elements"] += v.size
            counts["states"] += int(model.tensors[i].is_variable)
    return counts


def _random_feeds(model: IntegerModel, rng: np.random.Generator, spread: float) -> list[np.ndarray]:
    """Integers over ``spread`` of each input type's range, around the middle."""
    feeds = []
    for d in model.input_details():
        info = np.iinfo(d["dtype"])
        mid, half = (int(info.min) + int(info.max)) / 2, (int(info.max) - int(info.min)) / 2 * spread
        feeds.append(np.clip(np.rint(rng.uniform(mid - half, mid + half, d["shape"])), info.min, info.max)
                     .astype(d["dtype"]))
    return feeds


@needs_real
@pytest.mark.parametrize("name", SVDF_FILES + LSTM_FILES)
def test_real_files_every_tensor_equals_litert(name: str) -> None:
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")
    tflite = (REAL / name).read_bytes()
    model = IntegerModel(tflite)
    rng = np.random.default_rng(7)
    feeds = [_random_feeds(model, rng, spread) for spread in (1.0, 0.25, 0.05)]
    counts = _compare(tflite, feeds)
    print(name, counts)
    assert counts["states"] >= 3  # the ops' states were compared, as the ops left them


@needs_real
@pytest.mark.parametrize("name", ["tflite_micro/trained_lstm_int8.tflite", "tflite_micro/micro_speech_lstm.tflite"])
def test_cifg_lstm_every_tensor_equals_litert(name: str) -> None:
    """CIFG (no input gate: 1 - forget stands in): a real LSTM with its input-gate weights and bias
    taken out (inputs 1, 5 and 12 set to -1), as LiteRT runs it."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    data = (REAL / name).read_bytes()
    tree = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
    op = tree.subgraphs[0].operators[0]
    op.inputs = [-1 if j in (1, 5, 12) else int(i) for j, i in enumerate(op.inputs)]
    builder = flatbuffers.Builder(0)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    tflite = bytes(builder.Output())
    model = IntegerModel(tflite)
    assert model.records[0].pairs[0] == (0, 0)  # no input gate
    rng = np.random.default_rng(2)
    counts = _compare(tflite, [_random_feeds(model, rng, spread) for spread in (1.0, 0.2)])
    assert counts["states"] == 4, counts


@needs_real
def test_svdf_state_as_the_op_leaves_it() -> None:
    """keyword_scrambled: the first SVDF's new state has one non-zero column (the newest entry of
    each filter) and LiteRT's has the same values; the trace shows that state."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")
    tflite = (REAL / "tflite_micro/keyword_scrambled.tflite").read_bytes()
    model = IntegerModel(tflite)
    x = np.random.default_rng(3).integers(0, 20000, (1, 96)).astype(np.int16)
    ref = _litert(tflite, [x])
    values = _trace(model, [x])
    op = model.model.operators[1]
    assert op.builtin == "SVDF"
    state = values[op.inputs[4]].reshape(64, 8)
    assert np.array_equal(values[op.outputs[0]], ref[op.outputs[0]])
    assert np.array_equal(values[op.inputs[4]], ref[op.inputs[4]])
    assert not state[:, :7].any() and state[:, 7].any()


@needs_real
def test_runs_start_from_a_fresh_state() -> None:
    """Two runs on the same input give the same output: no state carries over."""
    tflite = (REAL / "tflite_micro/trained_lstm_int8.tflite").read_bytes()
    model = IntegerModel(tflite)
    x = np.random.default_rng(1).integers(-128, 128, (1, 28, 28)).astype(np.int8)
    first, second = model.run({model.input_names[0]: x}), model.run({model.input_names[0]: x})
    assert all(np.array_equal(first[k], second[k]) for k in first)


@needs_real
def test_int8_state_svdf_is_refused_in_one_line() -> None:
    """keyword_scrambled_8bit (TFLite Micro's int8-state SVDF): LiteRT 2.3's integer kernel reads
    the int8 weights_time and state as int16, past their ends, and corrupts its heap ('malloc():
    invalid size' or 'double free' on the next allocation, measured); `run` refuses the file."""
    with pytest.raises(RunError) as info:
        IntegerModel((REAL / "tflite_micro/keyword_scrambled_8bit.tflite").read_bytes())
    assert "\n" not in str(info.value) and "int16" in str(info.value) and "SVDF" in str(info.value)


# ---------------------------------------------------------------------------
# TensorFlow-built LSTMs

_BUILD = textwrap.dedent('''
    import sys
    import numpy as np
    import tensorflow as tf
    keras = tf.keras
    out = sys.argv[1]

    def convert(model, shape, seed, scale):
        rng = np.random.default_rng(seed)
        def representative():
            for _ in range(16):
                yield [rng.normal(0, scale, shape).astype(np.float32)]
        c = tf.lite.TFLiteConverter.from_keras_model(model)
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = representative
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        c.inference_input_type = c.inference_output_type = tf.int8
        return c.convert()

    def save(name, inp, x, seed, gain, scale):
        model = keras.Model(inp, x)
        rng = np.random.default_rng(seed)
        model.set_weights([rng.uniform(-gain, gain, w.shape).astype(np.float32) for w in model.get_weights()])
        open(out + "/" + name + ".tflite", "wb").write(convert(model, tuple(inp.shape), seed, scale))

    inp = keras.Input(shape=(6, 5), batch_size=2)
    save("stacked", inp, keras.layers.LSTM(4)(keras.layers.LSTM(7, return_sequences=True)(inp)), 0, 0.5, 1.0)
    inp = keras.Input(shape=(5, 3), batch_size=2)
    x = keras.layers.Lambda(lambda t: tf.transpose(t, [1, 0, 2]))(inp)
    save("time_major", inp, keras.layers.LSTM(16, return_sequences=True, time_major=True)(x), 1, 0.5, 3.0)
    inp = keras.Input(shape=(6, 5), batch_size=2)
    save("small_cell", inp, keras.layers.LSTM(7, return_sequences=True)(inp), 0, 0.3, 0.2)
''')


@pytest.fixture(scope="module")
def tf_lstms(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    if importlib.util.find_spec("tensorflow") is None or importlib.util.find_spec("tf_keras") is None:
        pytest.skip("TensorFlow and tf_keras build the LSTMs")
    out = tmp_path_factory.mktemp("lstm")
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONHASHSEED="0", TF_ENABLE_ONEDNN_OPTS="0", TF_DETERMINISTIC_OPS="1")
    proc = subprocess.run([sys.executable, "-c", _BUILD, str(out)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {p.stem: p.read_bytes() for p in out.glob("*.tflite")}


@pytest.mark.parametrize("name", ["stacked", "time_major", "small_cell"])
def test_tf_built_lstm_every_tensor_equals_litert(tf_lstms: dict[str, bytes], name: str) -> None:
    """Two stacked LSTMs (batch 2, batch-major), a time-major one, and one with a small cell
    state; every tensor, 4 samples each."""
    pytest.importorskip("ai_edge_litert", reason="LiteRT is the oracle")
    tflite = tf_lstms[name]
    model = IntegerModel(tflite)
    rng = np.random.default_rng(11)
    counts = _compare(tflite, [_random_feeds(model, rng, spread) for spread in (1.0, 0.5, 0.2, 0.05)])
    print(name, counts)
    assert counts["states"] >= 8


def test_tf_built_lstms_cover_both_tanh_paths(tf_lstms: dict[str, bytes]) -> None:
    """TensorFlow gives a small cell state a power-of-two scale below 2**-15 (measured: the
    second stacked LSTM and small_cell at 2**-16, the first stacked and time_major 2**-14), where LiteRT's
    ApplyTanh writes nothing and the step's input gate stands in for tanh(c) (``lstm.py``): the
    comparisons above cover both paths."""
    scales = []
    for tflite in tf_lstms.values():
        model = IntegerModel(tflite)
        scales += [model.records[k].pairs[9][0] for k, op in enumerate(model.model.operators)
                   if op.builtin == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert len(scales) == 4 and min(scales) < -15 <= max(scales), scales


# ---------------------------------------------------------------------------
# the int16 gemmlowp functions, all 65536 inputs


def test_int16_logistic_and_tanh_track_the_functions() -> None:
    """Every int16 input: gemmlowp's 16-bit logistic (Q3.12) and tanh (Q0 to Q6) against the real
    functions in Q0.15: measured at most 6.4 LSB (logistic) and 12.0 LSB (tanh) off, held to 8
    and 16; odd / complementary as gemmlowp makes them. (Bit-exactness comes from the LiteRT
    comparisons above: the real files reach 18,921 distinct sigmoid and 11,695 tanh inputs.)"""
    a = np.arange(-32768, 32768, dtype=np.int64)
    sig = lstm.logistic16(a, 3)
    want = 32768.0 / (1.0 + np.exp(-a / 4096.0))
    assert np.abs(sig - want).max() <= 8
    pairs = (sig[1:] + sig[1:][::-1])[a[1:] != 0]
    assert np.array_equal(pairs, np.full(65534, 32767))  # logistic(-x) = 1 - logistic(x), x != 0
    for bits in range(7):
        t = lstm.tanh16(a, bits)
        assert np.abs(t - 32768.0 * np.tanh(a / 2.0 ** (15 - bits))).max() <= 16, bits
        assert np.array_equal(t[1:], -t[1:][::-1])  # odd
        assert t.min() >= -32768 and t.max() <= 32767


def test_lstm_refuses_what_it_does_not_compute() -> None:
    """Projection, peephole and layer-norm LSTMs are refused by the recipe (a one-line RunError
    at load); an LSTM without its five intermediates too."""
    def op(dtype: str, scale: float = 0.01) -> object:
        return operand("t", (scale,), (0,), (4, 4), dtype)

    ins: list = [op("int8")] + [op("int8")] * 8 + [None] * 3 + [op("int32")] * 4 + [None, None]
    ins += [op("int8"), operand("c", (2.0**-11,), (0,), (1, 4), "int16")] + [None] * 4
    hidden = [None] * 4 + [op("int8")]
    out = op("int8")
    rec = requant("UNIDIRECTIONAL_SEQUENCE_LSTM", ins + hidden, out, {"cell_clip": 10.0}, 0)
    assert rec is not None and len(rec.pairs) == 12 and rec.pairs[9] == (-11, 0) and rec.pairs[10] == (20480, 0)
    for slot, kind in ((16, "projection"), (10, "peephole"), (21, "layer norm")):
        bad = list(ins)
        bad[slot] = op("int8")
        with pytest.raises(ValueError, match=kind):
            requant("UNIDIRECTIONAL_SEQUENCE_LSTM", bad + hidden, out, {}, 0)
    with pytest.raises(ValueError, match="intermediates"):
        requant("UNIDIRECTIONAL_SEQUENCE_LSTM", ins, out, {}, 0)


@needs_real
@pytest.mark.parametrize("name,shape,dtype", [("tflite_micro/trained_lstm_int8.tflite", (1, 28, 28), np.int8),
                                              ("tflite_micro/keyword_scrambled.tflite", (1, 96), np.int16)])
def test_damaged_sequence_files_fail_with_one_line(name: str, shape: tuple[int, ...], dtype: type) -> None:
    """150 mutated copies (bench/fuzz.py): each runs or is refused with a one-line RunError, never
    another exception from the SVDF / LSTM kernels or recipes."""
    sys.path.insert(0, str(ROOT / "bench"))
    import fuzz

    from qconvert.errors import ConversionError

    x = np.random.default_rng(5).integers(-100, 100, shape).astype(dtype)
    outcomes = {"ran": 0, "refused": 0}
    for label, data in fuzz.mutations((REAL / name).read_bytes(), 150, 9):
        try:
            model = IntegerModel(data)
            model.run({n: x for n in model.input_names})
            outcomes["ran"] += 1
        except ConversionError as exc:
            assert "\n" not in str(exc), (label, str(exc))
            outcomes["refused"] += 1
    assert outcomes["ran"] > 10 and outcomes["refused"] > 10, outcomes


def test_a_cell_scale_below_2_15_is_flagged_for_litert_and_refused_for_tflm(tf_lstms: dict[str, bytes]) -> None:
    """Below a 2^-15 cell scale LiteRT's LSTM skips tanh(c) (measured on a Keras LSTM against the Keras
    model: max error 0.34 for outputs of at most 0.19; TFLite Micro 0.0009): `check` says LiteRT
    computes wrong values there, and `run --runtime tflm` refuses rather than pass LiteRT's result off
    as TFLite Micro's (whose LSTM is another implementation: 1 of 160 outputs 1 LSB apart from LiteRT's
    at a 2^-14 cell scale, measured)."""
    from qconvert.errors import RunError
    from qconvert.schema.reader import read_model
    from qconvert.tools import targets as T

    small, big = tf_lstms["small_cell"], tf_lstms["time_major"]
    for target in ("litert", "litert-ref"):
        found = [f for f in T.static_check(read_model(small), target) if f.rule == "lstm-cell-scale"]
        assert found and found[0].effect == "wrong" and T.verdict(found) == "cannot-run"
        assert not [f for f in T.static_check(read_model(big), target) if f.rule == "lstm-cell-scale"]
    for tflite, log2 in ((small, -16), (big, -14)):
        with pytest.raises(RunError, match=rf"cell state scale 2\^{log2}\): `run --runtime tflm` has LiteRT's") \
                as info:
            IntegerModel(tflite, runtime="tflm")
        assert "\n" not in str(info.value)
        IntegerModel(tflite)  # LiteRT's arithmetic: runs
