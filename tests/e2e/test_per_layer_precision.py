"""Per-layer precision (issue 37): ``convert --keep-float PATTERN`` float islands in an int8 model.

The model: Dense(32, relu) → Dense(32) → tanh → Dense(8), trained briefly from fixed seeds, then two
of the middle Dense's output channels scaled by 300 (massive activations): the tensor before tanh has
a range hundreds of times the others', so full int8 rounds the other 30 channels to a few levels.

Oracle: TensorFlow 2.21's ``QuantizationDebugger`` with ``denylisted_nodes`` (the float ops, by the
float model's tensor names) or ``denylisted_ops``: ``get_nondebug_quantized_model()`` writes a
full-int8 file with those ops in float (its I/O float32, whatever the converter's inference types
say). Given TensorFlow's recorded ranges, ours must be that file op by op (builtin, version,
options, tensor types, parameters, constant bytes) and give the same float outputs in LiteRT REF.
Accuracy: the float graph run by TensorFlow's float .tflite, on 64 samples calibration never saw.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow builds the model and is the oracle")
keras = pytest.importorskip("tf_keras", reason="the model is a tf-keras model")

import file_compare
import oracle
from model_cache import cached

from qconvert.schema.reader import read_model

WIDE = "dense_1/BiasAdd"  # the tensor before tanh: two channels ×300


def _build() -> bytes:
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    L = keras.layers
    inp = keras.Input((16,))
    x = L.Dense(32, activation="relu")(inp)
    x = L.Activation("tanh")(L.Dense(32)(x))
    model = keras.Model(inp, L.Dense(8)(x))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 16)).astype(np.float32)
    model.compile("adam", "mse")
    model.fit(x, rng.normal(size=(256, 8)).astype(np.float32), epochs=5, batch_size=16, verbose=0, shuffle=False)
    w, b = model.layers[2].get_weights()
    w[:, :2] *= 300.0
    b[:2] *= 300.0
    model.layers[2].set_weights([w, b])
    fn = tf.function(lambda t: model(t, training=False))
    frozen = convert_variables_to_constants_v2(fn.get_concrete_function(tf.TensorSpec([1, 16], tf.float32,
                                                                                       name="input")))
    return frozen.graph.as_graph_def().SerializeToString()


@pytest.fixture(scope="module")
def pb() -> bytes:
    return cached("per_layer_precision_tanh_v1.pb", _build)


def _data(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 16)).astype(np.float32)


CALIB, HELD_OUT = _data(1, 32), _data(2, 64)


def _float_graph(pb: bytes) -> oracle.FloatGraph:
    return oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": [1, 16]})


def _tf_denylisted(pb: bytes, nodes: list[str] | None = None, ops: list[str] | None = None) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pb")
        Path(path).write_bytes(pb)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, ["input"], ["Identity"], {"input": [1, 16]})
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        c.representative_dataset = lambda: ([CALIB[i:i + 1]] for i in range(len(CALIB)))
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=c, debug_dataset=lambda: ([CALIB[i:i + 1]] for i in range(4)),
            debug_options=tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=nodes, denylisted_ops=ops))
        return debugger.get_nondebug_quantized_model()


def _ours(pb: bytes, **keys) -> tuple[bytes, list[str]]:  # type: ignore[no-untyped-def]
    from qconvert.api import convert_graph

    r = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data={"input": CALIB}, **keys)
    return r.model, r.notes


def _snr(pb: bytes, tflite: bytes) -> float:
    """Output SNR (dB) against the float model on the held-out samples (LiteRT REF)."""
    feeds = [{"input": x[None]} for x in HELD_OUT]
    return oracle.snr_db(tflite, feeds, oracle.float_references(oracle.tf_float_convert(_float_graph(pb)), feeds))


def _precision_of_ops(tflite: bytes) -> dict[str, tuple[str, str]]:
    """Each compute op (not QUANTIZE/DEQUANTIZE) by its output name: (builtin, float32 or the activation type)."""
    sg = read_model(tflite).subgraphs[0]
    out = {}
    for op in sg.operators:
        if op.builtin in ("QUANTIZE", "DEQUANTIZE"):
            continue
        name = sg.tensors[op.outputs[0]].name
        out[name] = (op.builtin, sg.tensors[op.outputs[0]].dtype)
    return out


def test_keep_float_recovers_the_accuracy_full_int8_loses(pb: bytes) -> None:
    full, _ = _ours(pb)
    kept, notes = _ours(pb, keep_float=[WIDE])
    snr_full, snr_kept = _snr(pb, full), _snr(pb, kept)
    print(f"output SNR vs float on 64 held-out samples: full int8 {snr_full:.1f} dB, --keep-float {WIDE} "
          f"{snr_kept:.1f} dB")
    assert snr_full < 10 and snr_kept > snr_full + 20, (snr_full, snr_kept)
    # exactly the producer of the wide tensor and its reader in float, every other compute op int8
    assert _precision_of_ops(kept) == {
        "model/dense/Relu": ("FULLY_CONNECTED", "int8"),
        "model/dense_1/BiasAdd": ("FULLY_CONNECTED", "float32"),
        "model/activation/Tanh": ("TANH", "float32"),
        "Identity": ("FULLY_CONNECTED", "int8")}
    said = "\n".join(notes)
    assert "FULLY_CONNECTED 'model/dense_1/MatMul' stays float32 (--keep-float 'dense_1/BiasAdd' matches its " \
           "output 'model/dense_1/BiasAdd')" in said
    assert "TANH 'model/activation/Tanh' stays float32 (it reads 'model/dense_1/BiasAdd'" in said
    boundaries = [n for n in notes if n.startswith("boundary:")]
    assert len(boundaries) == 2, boundaries
    assert boundaries[0].startswith("boundary: 'model/dense/Relu' int8 scale ") and \
        boundaries[0].endswith("→ float32 (DEQUANTIZE) into the float FULLY_CONNECTED 'model/dense_1/MatMul'")
    # TANH's output keeps TANH's fixed int8 parameters (1/128, 0), as TensorFlow writes it
    assert boundaries[1] == "boundary: 'model/activation/Tanh' float32 → int8 scale 0.0078125 zero point 0 " \
                            "(QUANTIZE) for FULLY_CONNECTED 'model/dense_2/MatMul'"


@pytest.mark.parametrize("case", ["tensor_name", "op_type"])
def test_equals_tensorflows_denylisted_file(pb: bytes, case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given TensorFlow's ranges: --keep-float dense_1/BiasAdd is TF's denylisted_nodes=[that FC, the TANH];
    --keep-float ^TANH$ is TF's denylisted_ops=['TANH'] (TF's input and output float32 here)."""
    model = _float_graph(pb)
    samples = {"input": CALIB}
    if case == "tensor_name":
        theirs = _tf_denylisted(pb, nodes=["model/dense_1/MatMul;model/dense_1/BiasAdd", "model/activation/Tanh"])
        pattern = WIDE
    else:
        theirs = _tf_denylisted(pb, ops=["TANH"])
        pattern = "^TANH$"
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours, _ = _ours(pb, keep_float=[pattern], input_type="float32", output_type="float32")
    assert [op.builtin for op in read_model(ours).subgraphs[0].operators] == \
        [op.builtin for op in read_model(theirs).subgraphs[0].operators]
    assert file_compare.compare_files(ours, theirs) >= 6
    file_compare.compare_outputs(ours, theirs, {"input": [1, 16]}, n=16)


def test_promoting_the_producer_alone_does_nothing_in_tensorflow(pb: bytes) -> None:
    """Why a name match takes the readers too (measured): TF with only the FC denylisted re-quantizes
    its float output to int8 for the TANH, and the accuracy stays that of full int8."""
    full = _tf_denylisted(pb)
    producer_only = _tf_denylisted(pb, nodes=["model/dense_1/MatMul;model/dense_1/BiasAdd"])
    both = _tf_denylisted(pb, nodes=["model/dense_1/MatMul;model/dense_1/BiasAdd", "model/activation/Tanh"])
    s_full, s_one, s_both = _snr(pb, full), _snr(pb, producer_only), _snr(pb, both)
    print(f"TensorFlow: full int8 {s_full:.1f} dB, FC alone float {s_one:.1f} dB, FC and TANH float {s_both:.1f} dB")
    assert abs(s_one - s_full) < 3 and s_both > s_full + 20


@pytest.mark.parametrize("case", ["ours_name", "ours_tanh", "ours_fc", "ours_float_io", "tf_nodes", "tf_ops",
                                  "tf_fc"])
def test_qconvert_run_executes_float_islands_as_litert_ref(pb: bytes, case: str) -> None:
    """`qconvert run` executes the float islands (DEQUANTIZE, float FULLY_CONNECTED and TANH, QUANTIZE) as
    LiteRT REF does: every tensor both hold (the float32 ones byte for byte) on 64 random inputs, on our
    --keep-float files and on TensorFlow's QuantizationDebugger files (denylisted nodes; denylisted ops
    TANH, FULLY_CONNECTED: there the first FULLY_CONNECTED reads the float32 model input directly)."""
    files = {
        "ours_name": lambda: _ours(pb, keep_float=[WIDE])[0],
        "ours_tanh": lambda: _ours(pb, keep_float=["^TANH$"])[0],
        "ours_fc": lambda: _ours(pb, keep_float=["^FULLY_CONNECTED$"])[0],
        "ours_float_io": lambda: _ours(pb, keep_float=[WIDE], input_type="float32", output_type="float32")[0],
        "tf_nodes": lambda: _tf_denylisted(pb, nodes=["model/dense_1/MatMul;model/dense_1/BiasAdd",
                                                      "model/activation/Tanh"]),
        "tf_ops": lambda: _tf_denylisted(pb, ops=["TANH"]),
        "tf_fc": lambda: _tf_denylisted(pb, ops=["FULLY_CONNECTED"]),
    }
    tflite = files[case]()
    assert any(read_model(tflite).subgraphs[0].tensors[op.outputs[0]].dtype == "float32"
               for op in read_model(tflite).subgraphs[0].operators if op.builtin in ("FULLY_CONNECTED", "TANH"))
    assert oracle.assert_run_equals_litert_everywhere(tflite, n=64, float_range=1.5) >= 5


def test_qconvert_run_refuses_a_float_op_it_has_no_kernel_for(pb: bytes) -> None:
    """A float op `run` has no LiteRT-REF float kernel for is refused in one line naming it."""
    from qconvert.errors import RunError
    from qconvert.runtime import float_ref
    from qconvert.runtime.interpreter import IntegerModel

    kept, _ = _ours(pb, keep_float=[WIDE])
    saved = float_ref.FLOAT_KERNELS.pop("TANH")
    try:
        with pytest.raises(RunError, match=r"^operator 3 \(TANH 'model/activation/Tanh'\) is float32: `qconvert run` "
                                           r"executes float islands of [A-Z_, 0-9]+; run this file in LiteRT$"):
            IntegerModel(kept)
    finally:
        float_ref.FLOAT_KERNELS["TANH"] = saved


def test_a_pattern_that_matches_nothing_is_a_usage_error(pb: bytes, tmp_path: Path) -> None:
    from click.testing import CliRunner

    from qconvert.cli import cli

    (tmp_path / "m.pb").write_bytes(pb)
    np.save(tmp_path / "x.npy", CALIB)
    out = tmp_path / "m.tflite"
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.pb"), "-o", str(out), "--calibration-data",
                                  str(tmp_path / "x.npy"), "--keep-float", WIDE, "--keep-float", "dense_9"])
    assert r.exit_code == 2, r.output
    assert "--keep-float 'dense_9' matches no op" in r.output
    assert not out.exists()
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.pb"), "-o", str(out), "--calibration-data",
                                  str(tmp_path / "x.npy"), "--keep-float", "dense_1/(Bias"])
    assert r.exit_code == 2 and "is not a regular expression" in r.output, r.output


def manifest_equals_library(pb: bytes, tmp_path: Path, key: str) -> bytes:
    """The option ``key`` (keep_float / int16) = [WIDE] in a batch manifest and as a keyword of
    ``qconvert.convert``: the same file (consistency, ours against ours); that file."""
    from click.testing import CliRunner

    import qconvert
    from qconvert.cli import cli

    (tmp_path / "m.pb").write_bytes(pb)
    np.save(tmp_path / "x.npy", CALIB)
    api = qconvert.convert(str(tmp_path / "m.pb"), tmp_path / "api.tflite", calibration_data=str(tmp_path / "x.npy"),
                           **{key: WIDE})
    (tmp_path / "m.toml").write_text(f'[[model]]\npath = "m.pb"\noutput = "batch.tflite"\n'
                                     f'calibration_data = "x.npy"\n{key} = ["{WIDE}"]\n')
    r = CliRunner().invoke(cli, ["batch", str(tmp_path / "m.pb"), "--manifest", str(tmp_path / "m.toml"),
                                 "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "batch.tflite").read_bytes() == api.model
    return api.model


def test_manifest_and_library(pb: bytes, tmp_path: Path) -> None:
    model = manifest_equals_library(pb, tmp_path, "keep_float")
    assert _precision_of_ops(model)["model/dense_1/BiasAdd"] == ("FULLY_CONNECTED", "float32")


def test_qat_graph_the_fake_quant_between_float_ops_is_not_applied() -> None:
    """A QAT graph (the corpus' small classifier: conv, depthwise, pointwise, pool, Dense, Softmax; every
    range from a FakeQuant): --keep-float on the Dense's output keeps the Dense and the Softmax float;
    the FakeQuant between them is not applied (said in one line: its range), the FakeQuants at the
    boundary are (DEQUANTIZE/QUANTIZE at their parameters), the Dense reads its fake-quantized weights
    in float. Against the training graph (which rounds and clamps the logits at that FakeQuant) the mean
    error stays that of the all-int8 file; the largest grows (measured 0.033 against 0.006 on 32 random
    inputs: the logits are no longer clamped to the FakeQuant's range)."""
    import corpus

    from qconvert.api import convert_graph

    m = corpus.build_model("small_classifier")
    full = convert_graph(m.graph_def, input_ranges=m.input_ranges).model
    r = convert_graph(m.graph_def, input_ranges=m.input_ranges, keep_float=["BiasAdd_3"])
    precision = _precision_of_ops(r.model)
    assert {k: v for k, v in precision.items() if v[1] == "float32"} == {
        "BiasAdd_3": ("FULLY_CONNECTED", "float32"), "Softmax": ("SOFTMAX", "float32")}
    assert all(v[1] == "int8" for k, v in precision.items() if k not in ("BiasAdd_3", "Softmax"))
    sg = read_model(r.model).subgraphs[0]
    softmax = next(op for op in sg.operators if op.builtin == "SOFTMAX")
    fc = next(op for op in sg.operators if op.outputs == softmax.inputs[:1])  # no QUANTIZE/DEQUANTIZE between
    assert fc.builtin == "FULLY_CONNECTED" and sg.tensors[softmax.inputs[0]].dtype == "float32"
    assert any(n.startswith("tensor 'BiasAdd_3' stays float32 between float ops: the FakeQuant range on it (int8 "
                            "scale ") for n in r.notes), r.notes
    errors = oracle.error_against_graph(m.graph_def, {"full": full, "kept": r.model}, n_inputs=32)
    print(f"QAT small_classifier vs its training graph, (mean, max) |error|: {errors}")
    assert errors["kept"][0] <= errors["full"][0] * 1.25 and errors["kept"][1] <= 0.05


def test_compare_measures_the_float_islands_tensors(pb: bytes, tmp_path: Path) -> None:
    """`compare` runs the --keep-float file with qconvert's executor and reports the float island's tensors as
    rows too (SNR against the float graph; no LSB figures): the island's TANH carries the error of the int8
    Dense before it, so its SNR is finite, and well above full int8's at the same tensor."""
    from qconvert.tools.compare import compare, render_text

    kept, _ = _ours(pb, keep_float=[WIDE])
    full, _ = _ours(pb)
    (tmp_path / "m.pb").write_bytes(pb)
    (tmp_path / "kept.tflite").write_bytes(kept)
    (tmp_path / "full.tflite").write_bytes(full)
    report = compare(tmp_path / "m.pb", tmp_path / "kept.tflite", {"input": HELD_OUT[:16]})
    baseline = compare(tmp_path / "m.pb", tmp_path / "full.tflite", {"input": HELD_OUT[:16]})
    assert report.engine == "integer executor", report.engine
    rows = {r["tensor"]: r for r in report.as_dict()["tensors"]}
    assert rows["model/dense_1/BiasAdd"]["dtype"] == "float32" and rows["model/activation/Tanh"]["dtype"] == "float32"
    assert rows["model/dense_1/BiasAdd"]["max_error_lsb"] is None and rows["model/dense/Relu"]["dtype"] == "int8"
    snr = rows["model/activation/Tanh"]["snr_db"]
    before = {r["tensor"]: r for r in baseline.as_dict()["tensors"]}["model/activation/Tanh"]["snr_db"]
    print(f"SNR at model/activation/Tanh: float island {snr:.1f} dB, full int8 {before:.1f} dB; at the wide "
          f"tensor: {rows['model/dense_1/BiasAdd']['snr_db']:.1f} dB")
    assert 20 < snr < 200 and snr > before + 10, (snr, before)
    assert "model/dense_1/BiasAdd" not in report.unmapped and "model/dense_1/BiasAdd" in render_text(report)
