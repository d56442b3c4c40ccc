"""Keras LSTM layers (tf_keras) from a SavedModel, against TensorFlow's post-training file.

TensorFlow 2.21's ``TFLiteConverter.from_saved_model`` (and ``from_keras_model``) fuses a tf_keras
``LSTM`` (its ``standard_lstm`` function, ``api_implements = "lstm_<uuid>"``) into one
UNIDIRECTIONAL_SEQUENCE_LSTM, version 1: int8 input and output, int8 weights (one symmetric scale
per gate matrix), int32 biases (input × weight scale), an int8 output state with the output's
parameters and an int16 cell state with a power-of-two scale (both VARIABLE), options TANH,
cell_clip 10, proj_clip 0, batch-major; five intermediates, four float32 ones without
parameters and the hidden one with the output's; the last output a STRIDED_SLICE of the sequence
(measured). qconvert reads the same SavedModel (``qconvert.frontend.tf_frozen`` keeps the call,
``graphdef._keras_lstm`` recognises it).

The comparison gives qconvert TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics``),
then checks the op list, versions, options, every
tensor's type, shape, scale and zero point, every constant's bytes, the intermediates, the
VARIABLE flags, and every output byte in LiteRT REF; ``qconvert run`` against LiteRT REF; and with
qconvert's own calibration (the LSTM state carried from sample to sample, as TensorFlow's calibrator
does) TensorFlow's parameters to float32 rounding, and the error against the Keras model no worse
than TensorFlow's file.
Models: [1, 16, 8] → LSTM(16) → Dense(4) → softmax (a keyword spotter's shape), two stacked
LSTMs (return_sequences=True, then LSTM(8)), a Bidirectional(LSTM(16)) (TensorFlow: REVERSE_V2,
two UNIDIRECTIONAL_SEQUENCE_LSTM, their last steps, CONCATENATION) and a Bidirectional(LSTM(8,
return_sequences=True)) before an LSTM(8) (the backward sequence reversed back: REVERSE_V2 after
it), trained two epochs on random data from fixed seeds.

TensorFlow's float .tflite of the same Keras models (``from_keras_model``, no optimizations: float
UNIDIRECTIONAL_SEQUENCE_LSTMs without intermediates) is an input too (issue 36): given TensorFlow's
ranges it gives TensorFlow's int8 file; with qconvert's calibration the SavedModel's file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the models and is the oracle")
keras = pytest.importorskip("tf_keras", reason="the fused LSTM is tf_keras' (Keras 3's LSTM is a plain While loop)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
import oracle  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402

STEPS, FEATURES = 16, 8
INPUT = "frames"
ARCHITECTURES = ["last_output", "stacked", "bidirectional", "bidirectional_sequence"]


def _layers(name: str) -> list:
    lstm, bi = keras.layers.LSTM, keras.layers.Bidirectional
    return {"last_output": [lstm(16)],
            "stacked": [lstm(16, return_sequences=True), lstm(8)],
            "bidirectional": [bi(lstm(16))],
            "bidirectional_sequence": [bi(lstm(8, return_sequences=True)), lstm(8)]}[name]


def _lstms(name: str) -> int:
    return sum(2 if isinstance(layer, keras.layers.Bidirectional) else 1 for layer in _layers(name))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """name → (SavedModel folder, Keras model, calibration samples)."""
    out = {}
    for k, name in enumerate(ARCHITECTURES):
        keras.utils.set_random_seed(k)
        inp = keras.Input((STEPS, FEATURES), batch_size=1, name=INPUT)
        x = inp
        for layer in _layers(name):
            x = layer(x)
        model = keras.Model(inp, keras.layers.Softmax()(keras.layers.Dense(4)(x)))
        rng = np.random.default_rng(k)
        data = rng.normal(size=(64, STEPS, FEATURES)).astype(np.float32)
        model.compile("adam", "sparse_categorical_crossentropy")
        model.fit(data, rng.integers(0, 4, 64), epochs=2, verbose=0)
        folder = tmp_path_factory.mktemp(name) / "saved"
        model.save(str(folder))
        out[name] = (folder, model, data[:8])
    return out


def _tf_ptq(folder: Path, samples: np.ndarray, calibrate_only: bool = False) -> bytes:
    c = tf.lite.TFLiteConverter.from_saved_model(str(folder))
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([samples[i:i + 1]] for i in range(len(samples)))
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type = c.inference_output_type = tf.int8
    c._experimental_calibrate_only = calibrate_only
    return c.convert()


def _tf_statistics(folder: Path, samples: np.ndarray) -> tuple[dict[str, tuple[float, float]], bytes]:
    calibrated = _tf_ptq(folder, samples, calibrate_only=True)
    sg = oracle._model_t(calibrated).subgraphs[0]
    stats = {t.name.decode(): (float(t.quantization.min[0]), float(t.quantization.max[0])) for t in sg.tensors
             if t.quantization is not None and t.quantization.min is not None and len(t.quantization.min) == 1}
    return stats, calibrated


def _data_flow_order(sg) -> list[int]:  # type: ignore[no-untyped-def]
    """The ops in the order a walk back from the outputs finishes them, operands in order: the same
    for two files that compute the same thing, whatever order each wrote its ops in (TensorFlow
    writes a Bidirectional layer's backward half first)."""
    producer = {int(t): k for k, o in enumerate(sg.operators) for t in o.outputs}
    order: list[int] = []

    def visit(k: int) -> None:
        if k in order:
            return
        for t in sg.operators[k].inputs:
            if int(t) in producer:
                visit(producer[int(t)])
        order.append(k)

    for t in sg.outputs:
        visit(producer[int(t)])
    return order


def _structure(tflite: bytes) -> list[tuple]:
    """Per op in data-flow order: name, version, options, and per operand (inputs, outputs,
    intermediates): type, shape, scales, zero points, VARIABLE flag and constant bytes."""
    m = oracle._model_t(tflite)
    sg = m.subgraphs[0]
    names = oracle.op_names(tflite)

    def tensor(i: int) -> tuple | None:
        if i < 0:
            return None
        t = sg.tensors[i]
        q = t.quantization
        data = m.buffers[t.buffer].data
        return (int(t.type), tuple(int(d) for d in t.shape),
                None if q is None or q.scale is None else tuple(np.asarray(q.scale, np.float32).tolist()),
                None if q is None or q.zeroPoint is None else tuple(int(z) for z in q.zeroPoint),
                bool(t.isVariable), None if data is None else np.asarray(data, np.uint8).tobytes())

    ops = []
    for k in _data_flow_order(sg):
        o = sg.operators[k]
        opts = o.builtinOptions
        ops.append((names[k], m.operatorCodes[o.opcodeIndex].version,
                    None if opts is None else {a: v for a, v in vars(opts).items() if not a.startswith("_")},
                    [tensor(i) for i in o.inputs], [tensor(i) for i in o.outputs],
                    [tensor(i) for i in (o.intermediates if o.intermediates is not None else [])]))
    return ops


# A Bidirectional layer's LSTM outputs take the concatenation's parameters. TensorFlow 2.21 still gives
# each LSTM's output state and hidden intermediate their own recorded ranges, though the integer kernel
# writes the output in the hidden value's parameters and copies the state's bytes to the output; and it
# gives a REVERSE_V2 (a returned backward sequence) its own output range, though LiteRT's copies bytes.
# qconvert keeps one set of parameters through both (test_bidirectional_keeps_one_scale_...)
DIFFERS = {"bidirectional", "bidirectional_sequence"}


@pytest.mark.parametrize("name", [n for n in ARCHITECTURES if n not in DIFFERS])
def test_keras_lstm_bit_exact_with_tensorflows_ptq_given_its_ranges(name: str, built: dict, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _, samples = built[name]
    _assert_bit_exact(folder, folder, samples, _lstms(name), tmp_path, monkeypatch)


def test_keras_lstm_with_unknown_batch_converts_where_tensorflow_fails(built: dict, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same LSTM saved with an unknown batch dimension (``keras.Input((16, 8))``, Keras' default):
    TensorFlow 2.21 refuses it ("'tf.TensorListReserve' op requires element_shape to be static",
    from_saved_model and from_keras_model alike, measured); qconvert gives batch 1 and the file
    TensorFlow writes for the batch-1 twin."""
    folder, model, samples = built["last_output"]
    inp = keras.Input((STEPS, FEATURES), name=INPUT)
    twin = keras.Model(inp, model.layers[-1](model.layers[-2](model.layers[-3](inp))))
    unknown = tmp_path / "unknown_batch"
    twin.save(str(unknown))
    with pytest.raises(Exception, match="TensorListReserve"):
        _tf_ptq(unknown, samples)
    _assert_bit_exact(unknown, folder, samples, 1, tmp_path, monkeypatch)


def _assert_bit_exact(ours_from: Path | bytes, tf_from: Path, samples: np.ndarray, lstms: int, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch, input_name: str = INPUT) -> None:
    """qconvert's file from ``ours_from`` (a SavedModel, or a float .tflite whose input is ``input_name``)
    given TensorFlow's ranges is TensorFlow's int8 file of the SavedModel ``tf_from``."""
    theirs = _tf_ptq(tf_from, samples)
    stats, calibrated = _tf_statistics(tf_from, samples)
    feeds = {input_name: samples}
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, feeds)
    assert not unpaired, f"tensors with no TensorFlow range: {unpaired[:5]}"
    ours = convert_graph(ours_from, calibration_data=feeds).model
    assert "DEQUANTIZE" not in oracle.op_names(ours)  # (types: compared below; the cell state is int16)
    a, b = _structure(theirs), _structure(ours)
    assert [(op[0], op[1], op[2]) for op in a] == [(op[0], op[1], op[2]) for op in b]
    assert [op[0] for op in a].count("UNIDIRECTIONAL_SEQUENCE_LSTM") == lstms
    for x, y in zip(a, b):
        for part in (3, 4, 5):  # inputs, outputs, intermediates: every field, constants byte for byte
            assert x[part] == y[part], f"{x[0]} operands differ"
    report = oracle.compare_ptq(ours, theirs, feeds, list(feeds))
    assert report.max_lsb == 0, report
    oracle.assert_run_equals_litert(ours, n=4)
    _assert_dump_recomputes_the_records(ours, tmp_path)


@pytest.mark.parametrize("name", [n for n in ARCHITECTURES if n not in DIFFERS])
def test_tensorflows_float_tflite_gives_tensorflows_int8_file(name: str, built: dict, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """TensorFlow's float conversion of the Keras model (``from_keras_model``, no optimizations: one float
    UNIDIRECTIONAL_SEQUENCE_LSTM per layer) given to qconvert: TensorFlow's own int8 file, intermediates
    and states included, given its ranges (issue 36)."""
    _, model, samples = built[name]
    flt = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    assert oracle.op_names(flt).count("UNIDIRECTIONAL_SEQUENCE_LSTM") == _lstms(name)
    _assert_bit_exact(flt, built[name][0], samples, _lstms(name), tmp_path, monkeypatch,
                      input_name=f"serving_default_{INPUT}:0")


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_tensorflows_float_tflite_gives_the_saved_models_file(name: str, built: dict) -> None:
    """With qconvert's own calibration (the numpy engine: LiteRT's cannot carry the LSTM state from
    sample to sample; the note says so), TensorFlow's float .tflite of the Keras model (which has no
    intermediates: qconvert derives them from the calibrated states, as from the SavedModel) gives the
    SavedModel's file: every op, option, operand, intermediate, scale and constant byte; so also its
    error against the Keras model, no worse than TensorFlow's (the accuracy test above). The
    Bidirectional models too, where TensorFlow's own file is inconsistent (DIFFERS)."""
    folder, model, samples = built[name]
    flt = tf.lite.TFLiteConverter.from_keras_model(model).convert()
    assert not any(op.intermediates is not None and len(op.intermediates)
                   for op in oracle._model_t(flt).subgraphs[0].operators)
    from_tflite = convert_graph(flt, calibration_data={f"serving_default_{INPUT}:0": samples})
    assert any("numpy engine: the graph has state tensors" in n for n in from_tflite.notes), from_tflite.notes
    from_saved = convert_graph(folder, calibration_data={INPUT: samples}).model
    assert _structure(from_tflite.model) == _structure(from_saved)
    assert oracle.op_names(from_tflite.model).count("UNIDIRECTIONAL_SEQUENCE_LSTM") == _lstms(name)


def _assert_dump_recomputes_the_records(tflite: bytes, tmp_path: Path) -> None:
    """``qconvert dump`` recomputes every stored multiplier (the LSTM's 12 pairs from its operands
    and intermediates) from the file's scales and finds them equal."""
    import json

    from qconvert.tools.dump import dump_model

    path = tmp_path / "ours.tflite"
    path.write_bytes(tflite)
    ops = json.loads(dump_model(path, as_json=True))["subgraphs"][0]["operators"]
    lstms = [op for op in ops if op["op"] == "UNIDIRECTIONAL_SEQUENCE_LSTM"]
    assert lstms and all(op["requant_ok"] is True for op in lstms)
    assert all(op["requant_ok"] in (True, None) for op in ops)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_keras_lstm_with_own_calibration_no_less_accurate_than_tensorflow(name: str, built: dict) -> None:
    folder, model, samples = built[name]
    theirs = _tf_ptq(folder, samples)
    result = convert_graph(folder, calibration_data={INPUT: samples})
    ours = result.model
    # the stacked model's second LSTM gets a 2^-16 cell scale (as in TensorFlow's file), which LiteRT's
    # integer LSTM computes wrongly: said in one line (its error against Keras is the larger for it)
    small_cell = [n for n in result.notes if "cell state scale 2^-16" in n]
    assert len(small_cell) == (1 if name == "stacked" else 0), result.notes
    test = np.random.default_rng(9).normal(size=(32, STEPS, FEATURES)).astype(np.float32)
    want = model.predict(test, batch_size=1, verbose=0)
    errors = []
    for tflite in (theirs, ours):
        d = oracle.io_details(tflite)
        (si, zi), (so, zo) = d["inputs"][0]["quant"], d["outputs"][0]["quant"]
        got = []
        for x in test:
            q = np.clip(np.round(x[None] / si + zi), -128, 127).astype(np.int8)
            # a fresh interpreter per sample: the LSTM's state starts at zero, as in Keras
            y = oracle.run_litert(tflite, {d["inputs"][0]["name"]: q})[0]
            got.append((y.astype(np.float32) - zo) * so)
        errors.append(float(np.abs(np.concatenate(got) - want).mean()))
    report = oracle.compare_ptq(ours, theirs, {INPUT: samples}, [INPUT])
    print(f"{name}: mean |error| against Keras: ours {errors[1]:.6f}, TensorFlow's {errors[0]:.6f}; {report}")
    assert errors[1] <= errors[0] * 1.05 + 1e-4, f"mean |error| ours {errors[1]:.5f}, TensorFlow's {errors[0]:.5f}"
    if name not in DIFFERS:  # the state carried from sample to sample as TensorFlow's calibrator does: its ranges
        _assert_same_parameters(theirs, ours)


def _assert_same_parameters(theirs: bytes, ours: bytes, rel: float = 1e-5) -> None:
    """The same ops (data-flow order), types, shapes, zero points and constants, scales equal to
    ``rel`` (the last float32 bits of a calibrated range may differ)."""
    a, b = _structure(theirs), _structure(ours)
    assert [op[:3] for op in a] == [op[:3] for op in b]
    for x, y in zip(a, b):
        for part in (3, 4, 5):
            for p, q in zip(x[part], y[part]):
                assert (p is None) == (q is None), x[0]
                if p is None:
                    continue
                assert p[:2] == q[:2] and p[3:] == q[3:], (x[0], p[:2], q[:2], p[3:5], q[3:5])  # and bytes
                if p[2] is not None:
                    assert np.allclose(p[2], q[2], rtol=rel, atol=0), (x[0], p[2], q[2])


def test_keras_lstm_int16_is_refused_in_one_line(built: dict) -> None:
    """TensorFlow 2.21: "Quantization to 16x8-bit not yet supported for op: 'UNIDIRECTIONAL_SEQUENCE_LSTM'"."""
    folder, _, samples = built["last_output"]
    with pytest.raises(ConversionError) as err:
        convert_graph(folder, calibration_data={INPUT: samples}, activations="int16")
    assert "UNIDIRECTIONAL_SEQUENCE_LSTM" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", sorted(DIFFERS))
def test_bidirectional_keeps_one_scale_where_tensorflows_file_reads_bytes_at_another(name: str, built: dict) -> None:
    """Measured on TF 2.21: in its Bidirectional files an LSTM's output, output state and hidden
    intermediate have different parameters (the 8x8_16 kernel writes h at the hidden value's
    parameters into the state and copies the state's bytes into the output), and, with
    return_sequences, the REVERSE_V2 after the backward LSTM has other output parameters than input
    ones (LiteRT's kernel copies bytes). qconvert gives each group one set of parameters; its error
    against the Keras model is several times smaller (the accuracy test above; 0.0020 against
    0.0145 and 0.0084 against 0.0167 mean absolute softmax error on 64 inputs, measured)."""
    folder, _, samples = built[name]

    def groups(tflite: bytes) -> list[set]:
        out = []
        for op, _, _, ins, outs, inter in _structure(tflite):
            if op == "UNIDIRECTIONAL_SEQUENCE_LSTM":
                out.append({(t[2], t[3]) for t in (outs[0], ins[18], inter[4])})
            elif op == "REVERSE_V2":
                out.append({(t[2], t[3]) for t in (ins[0], outs[0])})
        return out

    theirs = groups(_tf_ptq(folder, samples))
    assert any(len(g) > 1 for g in theirs), "TensorFlow's file is consistent now: compare it bit for bit again"
    ours = groups(convert_graph(folder, calibration_data={INPUT: samples}).model)
    assert ours and all(len(g) == 1 for g in ours), ours


@pytest.mark.parametrize("layer", ["GRU", "SimpleRNN"])
def test_other_recurrent_layers_are_one_line(layer: str, tmp_path: Path) -> None:
    """A tf_keras GRU or SimpleRNN stays a While loop (TensorFlow fuses only the LSTM; measured on TF
    2.21: from_saved_model's int8 calibration crashes, segmentation fault, on both): one line naming
    the loop, with the fix."""
    keras.utils.set_random_seed(0)
    inp = keras.Input((STEPS, FEATURES), batch_size=1, name=INPUT)
    model = keras.Model(inp, keras.layers.Dense(4)(getattr(keras.layers, layer)(8)(inp)))
    model.save(str(tmp_path / "saved"))
    samples = np.random.default_rng(0).normal(size=(4, STEPS, FEATURES)).astype(np.float32)
    with pytest.raises(ConversionError) as err:
        convert_graph(tmp_path / "saved", calibration_data={INPUT: samples})
    text = str(err.value)
    assert "while loop" in text and "unroll=True" in text and "\n" not in text


def test_tf_keras_file_gives_the_saved_models_file(built: dict, tmp_path: Path) -> None:
    """A tf_keras ``.h5`` file (which Keras 3, TensorFlow 2.21's ``tf.keras``, cannot read: "Unrecognized
    keyword arguments passed to LSTM: {'time_major': False}") is read with tf_keras: the same
    operators, parameters and constants as from the SavedModel (only the names differ)."""
    folder, model, samples = built["stacked"]
    model.save(str(tmp_path / "m.h5"))
    from_h5 = convert_graph(tmp_path / "m.h5", calibration_data={"input": samples}).model
    from_saved = convert_graph(folder, calibration_data={INPUT: samples}).model
    assert _structure(from_h5) == _structure(from_saved)
    assert oracle.op_names(from_h5).count("UNIDIRECTIONAL_SEQUENCE_LSTM") == 2
