"""Per-layer precision (issue 37): ``convert --int16 PATTERN`` 16x8 islands in an int8 model.

The model is test_per_layer_precision.py's: Dense(32, relu) → Dense(32) → tanh → Dense(8), two of the
middle Dense's output channels ×300, so the tensor before tanh is wide. ``--int16 dense_1/BiasAdd``
makes that Dense and the tanh 16x8 (int16 activations, int8 weights, int64 biases).

Oracle: TensorFlow has no per-op 16x8 mix, so (a) each 16x8 op of ours must be the op TensorFlow's
whole-model 16x8 conversion writes, and each int8 op the op of its int8 conversion, given
TensorFlow's recorded ranges (version, options, constants' bytes and parameters, the parameters of
its activation operands and result); the QUANTIZE at each boundary goes from the one to the other;
(b) LiteRT REF runs the file, and the int8 op before the island gives TensorFlow's int8 file's
values; (c) against the float model (TensorFlow's float .tflite) on held-out samples, the output SNR
rises from full int8's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow builds the model and is the oracle")
pytest.importorskip("tf_keras", reason="the model is a tf-keras model")

import oracle
import test_per_layer_precision as plp

from qconvert.schema.reader import read_model

WIDE = plp.WIDE
pb = plp.pb  # the module fixture (cached model)


def _compute_ops(tflite: bytes) -> list:  # type: ignore[type-arg]
    sg = read_model(tflite).subgraphs[0]
    return [op for op in sg.operators if op.builtin not in ("QUANTIZE", "DEQUANTIZE")]


def _facts(sg, i: int) -> tuple:  # type: ignore[no-untyped-def,type-arg]
    t = sg.tensors[i]
    return t.dtype, tuple(t.shape), tuple(np.float32(t.scale)), tuple(t.zero_point), t.data


def _versions(tflite: bytes) -> dict[str, int]:
    return {c.builtin: c.version for c in read_model(tflite).operator_codes}


def test_each_op_is_tensorflows_16x8_or_int8_op_given_its_ranges(pb: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    model = plp._float_graph(pb)
    samples = {"input": plp.CALIB}
    tf8 = oracle.tf_ptq_convert(model, samples)
    tf16 = oracle.tf_ptq_convert(model, samples, int16=True)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    assert not oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    ours, notes = plp._ours(pb, int16=[WIDE])
    sg, s8, s16 = (read_model(f).subgraphs[0] for f in (ours, tf8, tf16))
    mine, ref8, ref16 = _compute_ops(ours), _compute_ops(tf8), _compute_ops(tf16)
    assert [o.builtin for o in mine] == [o.builtin for o in ref8] == [o.builtin for o in ref16]
    kinds = []
    for o, a, b in zip(mine, ref8, ref16):
        kind = sg.tensors[o.outputs[0]].dtype
        kinds.append(kind)
        ref, rsg, rfile = (b, s16, tf16) if kind == "int16" else (a, s8, tf8)
        where = f"{o.builtin} {sg.tensors[o.outputs[0]].name} ({kind})"
        assert o.options == ref.options, where
        assert _versions(ours)[o.builtin] == _versions(rfile)[o.builtin] or o.builtin == "QUANTIZE", where
        for mi, ri in zip(o.inputs, ref.inputs):  # activations and constants: types, parameters, bytes
            assert _facts(sg, mi) == _facts(rsg, ri), f"{where}: operand {sg.tensors[mi].name}"
        assert _facts(sg, o.outputs[0]) == _facts(rsg, ref.outputs[0]), where
    # the dense before tanh and the tanh are 16x8 (INT64 biases), the others int8
    assert kinds == ["int8", "int16", "int16", "int8"]
    assert [sg.tensors[o.inputs[2]].dtype for o in mine if o.builtin == "FULLY_CONNECTED"] == ["int32", "int64", "int32"]
    # the boundaries: int8 → int16 into the island (TF's int8 Relu → TF's 16x8 input of the dense),
    # int16 → int8 out of it (TF's 16x8 tanh output → TF's int8 input of the last dense: 1/128)
    qs = [op for op in sg.operators if op.builtin == "QUANTIZE"]
    assert [(_facts(sg, q.inputs[0])[:4], _facts(sg, q.outputs[0])[:4]) for q in qs] == [
        (_facts(s8, ref8[0].outputs[0])[:4], _facts(s16, ref16[1].inputs[0])[:4]),
        (_facts(s16, ref16[2].outputs[0])[:4], _facts(s8, ref8[3].inputs[0])[:4])]
    # LiteRT's QUANTIZE int8 → int16 is version 2 (the op code's, one per builtin at its highest version)
    assert _versions(ours)["QUANTIZE"] == 2
    said = "\n".join(notes)
    assert "FULLY_CONNECTED 'model/dense_1/MatMul' is 16x8: int16 activations, int8 weights (--int16 " \
           "'dense_1/BiasAdd' matches its output 'model/dense_1/BiasAdd')" in said
    assert "TANH 'model/activation/Tanh' is 16x8" in said
    boundaries = [n for n in notes if n.startswith("boundary:")]
    assert boundaries == [
        f"boundary: 'model/dense/Relu' requantized to int16 scale {float(s16.tensors[ref16[1].inputs[0]].scale[0]):.6g} "
        f"zero point 0 (QUANTIZE) into the 16x8 FULLY_CONNECTED 'model/dense_1/MatMul'",
        "boundary: 'model/activation/Tanh' requantized to int8 scale 0.0078125 zero point 0 (QUANTIZE) for the int8 "
        "FULLY_CONNECTED 'model/dense_2/MatMul'"], boundaries


def _tensor_values(tflite: bytes, x: np.ndarray, name: str) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(model_content=bytes(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                         experimental_preserve_all_tensors=True)
    interp.allocate_tensors()
    interp.set_tensor(interp.get_input_details()[0]["index"], x)
    interp.invoke()
    return next(interp.get_tensor(d["index"]) for d in interp.get_tensor_details() if d["name"] == name)


def test_litert_ref_runs_it_and_the_int8_part_is_tensorflows(pb: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    model = plp._float_graph(pb)
    samples = {"input": plp.CALIB}
    tf8 = oracle.tf_ptq_convert(model, samples)
    stats, calibrated = oracle.tf_calibration_statistics(model, samples)
    unpaired = oracle.use_tensorflows_statistics(monkeypatch, stats, calibrated, samples)
    assert not unpaired, unpaired
    ours, _ = plp._ours(pb, int16=[WIDE])
    rng = np.random.default_rng(3)
    for _ in range(8):
        x = rng.integers(-128, 128, (1, 16)).astype(np.int8)
        np.testing.assert_array_equal(_tensor_values(ours, x, "model/dense/Relu"),
                                      _tensor_values(tf8, x, "model/dense/MatMul;model/dense/Relu;model/dense/BiasAdd"))
        assert oracle.run_litert(ours, {"input": x})[0].dtype == np.int8


def test_int16_recovers_the_accuracy_where_an_activation_is_wide(pb: bytes) -> None:
    full, _ = plp._ours(pb)
    promoted, _ = plp._ours(pb, int16=[WIDE])
    kept, _ = plp._ours(pb, keep_float=[WIDE])
    s_full, s16, s_float = plp._snr(pb, full), plp._snr(pb, promoted), plp._snr(pb, kept)
    print(f"output SNR vs float, 64 held-out samples: full int8 {s_full:.1f} dB, --int16 {WIDE} {s16:.1f} dB, "
          f"--keep-float {WIDE} {s_float:.1f} dB")
    assert s_full < 10 and s16 > s_full + 15, (s_full, s16)
    assert plp._precision_of_ops(promoted) == {
        "model/dense/Relu": ("FULLY_CONNECTED", "int8"),
        "model/dense_1/BiasAdd": ("FULLY_CONNECTED", "int16"),
        "model/activation/Tanh": ("TANH", "int16"),
        "Identity": ("FULLY_CONNECTED", "int8")}


def test_an_island_at_the_model_output_ends_in_int8(pb: bytes) -> None:
    """--int16 ^FULLY_CONNECTED$ (op type: the three Dense alone): the TANH between stays int8, the
    last Dense is 16x8 and a QUANTIZE int16 → int8 gives the int8 model output. (The op list is the
    rule's consequence; the oracles: `run` equals LiteRT REF on every tensor, and the output against
    the float model is no worse than full int8's, the wide tensor still read by an int8 TANH.)"""
    ours, notes = plp._ours(pb, int16=["^FULLY_CONNECTED$"])
    sg = read_model(ours).subgraphs[0]
    assert [(op.builtin, sg.tensors[op.outputs[0]].dtype) for op in sg.operators] == [
        ("QUANTIZE", "int16"), ("FULLY_CONNECTED", "int16"), ("FULLY_CONNECTED", "int16"), ("QUANTIZE", "int8"),
        ("TANH", "int8"), ("QUANTIZE", "int16"), ("FULLY_CONNECTED", "int16"), ("QUANTIZE", "int8")]
    assert sg.tensors[sg.outputs[0]].dtype == "int8" and sg.tensors[sg.inputs[0]].dtype == "int8"
    # an int16 reader of TANH's int8 result reads it at TANH's fixed int16 parameters (1/32768), as in 16x8
    assert sg.tensors[sg.operators[5].outputs[0]].scale == (1 / 32768,)
    assert any(n.endswith("(QUANTIZE) for the model output") for n in notes), notes
    assert oracle.assert_run_equals_litert_everywhere(ours, n=32) >= 8
    full, _ = plp._ours(pb)
    assert plp._snr(pb, ours) >= plp._snr(pb, full) - 0.5


def test_a_qat_graphs_fake_quant_tensor_is_refused_by_int16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FakeQuant says 8 bits: --int16 on an op that reads or writes such a tensor is a one-line usage
    error and no file (it wrote a file whose FULLY_CONNECTED had an int16 input and an int8 result,
    all -128 in LiteRT); a weight's FakeQuant (int8, as 16x8 keeps) is not what it refuses."""
    from qconvert.cli import main

    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(0, 1, (8, 28, 28, 1)).astype(np.float32))
    out = tmp_path / "a.tflite"
    example = Path(__file__).resolve().parents[2] / "models" / "example_qat.pb"
    rc = main(["convert", str(example), "-o", str(out), "--inputs-range", "input=0,1", "--calibration-data", str(x),
               "--int16", "BiasAdd_3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists() and len(err) == 1 and "FakeQuant" in err[0], err


@pytest.mark.parametrize("args, said", [
    (["--int16", "dense_9"], "--int16 'dense_9' matches no op"),
    (["--int16", WIDE, "--keep-float", WIDE], f"--int16 '{WIDE}' and --keep-float '{WIDE}'"),
    (["--int16", WIDE, "--keep-float", "^TANH$"], "TANH 'model/activation/Tanh' is taken by --keep-float"),
    (["--int16", WIDE, "--activations", "int16"], "--int16 with --activations int16"),
])
def test_usage_errors(pb: bytes, tmp_path: Path, args: list[str], said: str) -> None:
    from click.testing import CliRunner

    from qconvert.cli import cli

    (tmp_path / "m.pb").write_bytes(pb)
    np.save(tmp_path / "x.npy", plp.CALIB)
    out = tmp_path / "m.tflite"
    r = CliRunner().invoke(cli, ["convert", str(tmp_path / "m.pb"), "-o", str(out), "--calibration-data",
                                 str(tmp_path / "x.npy"), *args])
    assert r.exit_code == 2, r.output
    assert said in r.output, r.output
    assert not out.exists()


def test_needs_calibration_data() -> None:
    from qconvert.errors import UsageError
    from qconvert.options import ConvertOptions

    with pytest.raises(UsageError, match="--int16 gives int16 tensors the parameters of their calibrated ranges"):
        ConvertOptions.of(int16="x")


def test_manifest_and_library(pb: bytes, tmp_path: Path) -> None:
    model = plp.manifest_equals_library(pb, tmp_path, "int16")
    assert plp._precision_of_ops(model)["model/dense_1/BiasAdd"] == ("FULLY_CONNECTED", "int16")


@pytest.mark.parametrize("pattern", [WIDE, "^FULLY_CONNECTED$"])
def test_qconvert_run_executes_the_mixed_file_as_litert_ref(pb: bytes, pattern: str) -> None:
    """`qconvert run`'s int8 and int16 kernels and its QUANTIZE int8 <-> int16 give LiteRT REF's outputs
    to the bit, on random int8 inputs over the whole range."""
    ours, _ = plp._ours(pb, int16=[pattern])
    oracle.assert_run_equals_litert(ours, n=16)


@pytest.mark.parametrize("keys", [dict(int16=["model/dense/"], keep_float=["^TANH$"]),
                                  dict(keep_float=["model/dense/Relu"], int16=["^TANH$"])], ids=["int16-float", "float-int16"])
def test_qconvert_run_executes_int8_int16_and_float_in_one_file(pb: bytes, keys: dict) -> None:
    """An int16 island next to a float island meets it directly: --int16 on the first two Dense and
    --keep-float ^TANH$ give int16 FULLY_CONNECTED → DEQUANTIZE (of the int16 tensor) → float TANH →
    QUANTIZE → int8 FULLY_CONNECTED; the other way round, float FULLY_CONNECTED → QUANTIZE (to int16)
    → 16x8 TANH. No int8 tensor between them (an int8 hop at the wide tensor's range would undo the
    promotion: its scale is 1.78). Every tensor as LiteRT REF has it; the output SNR against the float
    model is the promotions' (≥ 28 dB, full int8: 6.5)."""
    ours, notes = plp._ours(pb, **keys)
    sg = read_model(ours).subgraphs[0]
    assert {sg.tensors[op.outputs[0]].dtype for op in sg.operators} == {"int8", "int16", "float32"}
    producer = {t: op for op in sg.operators for t in op.outputs}
    for op in sg.operators:  # no QUANTIZE → DEQUANTIZE (or DEQUANTIZE → QUANTIZE) chain between the islands
        before = producer.get(op.inputs[0])
        if op.builtin in ("QUANTIZE", "DEQUANTIZE") and before is not None:
            assert before.builtin not in ("QUANTIZE", "DEQUANTIZE"), (before.builtin, op.builtin)
    assert not any(n.startswith("boundary") and "requantized to int8" in n and "TANH" in n for n in notes), notes
    assert plp._snr(pb, ours) >= 28.0
    assert oracle.assert_run_equals_litert_everywhere(ours, n=64) >= 8


def test_compare_takes_the_mixed_file(pb: bytes) -> None:
    """`compare` runs it with qconvert's integer executor (not the LiteRT fallback) and reports the
    int16 tensors with the int8 ones."""
    from qconvert.tools.compare import compare

    with __import__("tempfile").TemporaryDirectory() as tmp:
        ours, _ = plp._ours(pb, int16=[WIDE])
        (Path(tmp) / "m.pb").write_bytes(pb)
        (Path(tmp) / "m.tflite").write_bytes(ours)
        report = compare(Path(tmp) / "m.pb", Path(tmp) / "m.tflite", {"input": plp.HELD_OUT[:8]})
    assert report.engine == "integer executor", report.engine
    tensors = {r.tensor for r in report.rows}
    assert {"model/dense_1/BiasAdd", "model/activation/Tanh"} <= tensors, tensors


@pytest.mark.parametrize("flag, npu", [("int16", "6/6 ops on the NPU"), ("keep_float", "2/6 ops on the NPU")])
def test_check_says_which_targets_run_a_mixed_file(pb: bytes, tmp_path: Path, flag: str, npu: str) -> None:
    """Measured by the tools themselves: TFLite Micro runs both mixed files (int16 FULLY_CONNECTED and
    TANH, QUANTIZE int8 <-> int16, and float FULLY_CONNECTED/TANH with DEQUANTIZE/QUANTIZE); Vela puts the
    16x8 island on the Ethos-U55 NPU, the float island's four ops (DEQUANTIZE, the float ops, QUANTIZE)
    on the CPU."""
    pytest.importorskip("tflite_micro", reason="TFLite Micro's interpreter runs the file")
    pytest.importorskip("ethosu.vela", reason="Vela compiles the file")
    from click.testing import CliRunner

    from qconvert.cli import cli

    ours, _ = plp._ours(pb, **{flag: [WIDE]})
    (tmp_path / "m.tflite").write_bytes(ours)
    r = CliRunner().invoke(cli, ["check", str(tmp_path / "m.tflite"), "--target", "tflm", "--target", "ethos-u55-128"])
    lines = {ln.split()[0]: ln for ln in r.output.splitlines() if ln.startswith("  ") and len(ln.split()) > 2}
    assert " runs " in lines["tflm"], r.output
    assert npu in lines["ethos-u55-128"], r.output
