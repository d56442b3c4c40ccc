"""``--input-type`` / ``--output-type`` (legalize/io_types.py, quantize_pass/graph_io.py): the same
choices from the command line, a manifest and the API; bad combinations one line, exit 2, nothing
written. (The files themselves are checked against TensorFlow's in tests/e2e/test_model_io_types.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from qconvert.api import convert
from qconvert.cli import main
from qconvert.errors import UsageError
from qconvert.options import ConvertOptions
from qconvert.schema.reader import read_model

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "models" / "example_qat.pb"  # input 'input' [1,28,28,1], output 'output' [1,10], int8 QAT


def _io(model: bytes) -> list[tuple[str, str, tuple, tuple]]:
    sg = read_model(model).subgraphs[0]
    return [(sg.tensors[i].name, sg.tensors[i].dtype, tuple(sg.tensors[i].scale), tuple(sg.tensors[i].zero_point))
            for i in (*sg.inputs, *sg.outputs)]


def test_the_three_sources_give_the_same_file(tmp_path: Path) -> None:
    out = tmp_path / "cli.tflite"
    assert main([str(EXAMPLE), "-o", str(out), "--inputs-range", "-1,1", "--input-type", "input=uint8",
                 "--output-type", "float32"]) == 0
    api = convert(EXAMPLE, None, ConvertOptions.of(inputs_range="-1,1", input_type={"input": "uint8"},
                                                   output_type="float32")).model
    shutil.copy(EXAMPLE, tmp_path / "m.pb")
    (tmp_path / "m.toml").write_text('[[model]]\npath = "m.pb"\ninputs_range = "-1,1"\n'
                                     'input_type = { input = "uint8" }\noutput_type = "float32"\n')
    assert main(["batch", str(tmp_path / "m.pb"), "--manifest", str(tmp_path / "m.toml"), "--jobs", "1"]) == 0
    assert out.read_bytes() == api == (tmp_path / "m.tflite").read_bytes()
    default = convert(EXAMPLE, None, ConvertOptions.of(inputs_range="-1,1")).model
    (_, _, s_in, z_in), (_, _, s_out, z_out) = _io(default)
    # uint8: the int8 scale, zero point + 128 (TensorFlow's); float32: no parameters
    assert _io(api) == [("input", "uint8", s_in, (z_in[0] + 128,)), ("output", "float32", (), ())]


def test_int8_is_the_default_and_changes_nothing() -> None:
    base = ConvertOptions.of(inputs_range="-1,1")
    assert convert(EXAMPLE, None, base).model == convert(EXAMPLE, None, base.replace(
        input_type="int8", output_type={"output": "int8"})).model


def test_a_float_input_runs_in_qconvert_run_as_in_litert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    litert = pytest.importorskip("ai_edge_litert.interpreter")
    model = convert(EXAMPLE, None, ConvertOptions.of(inputs_range="-1,1", input_type="float32",
                                                     output_type="float32")).model
    (tmp_path / "m.tflite").write_bytes(model)
    x = np.random.default_rng(0).uniform(-1.2, 1.2, [1, 28, 28, 1]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(tmp_path / "m.tflite"), "--input", str(tmp_path / "x.npy"), "-o",
                 str(tmp_path / "y.npz")]) == 0
    it = litert.Interpreter(model_content=model, experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    want = it.get_tensor(it.get_output_details()[0]["index"])
    with np.load(tmp_path / "y.npz") as got:
        assert want.dtype == np.float32 and np.array_equal(got["output"], want)


@pytest.mark.parametrize("it, ot, vela_cpu", [("uint8", "float32", "DEQUANTIZE"), ("float32", "uint8", "QUANTIZE")])
def test_check_target_takes_the_boundary_ops(it: str, ot: str, vela_cpu: str, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """LiteRT and TFLite Micro run QUANTIZE and DEQUANTIZE at these types; Vela leaves the op with a
    float32 feature map on the CPU (its static rules, as its own --show-cpu-operations says, measured)."""
    model = convert(EXAMPLE, None, ConvertOptions.of(inputs_range="-1,1", input_type=it, output_type=ot)).model
    (tmp_path / "m.tflite").write_bytes(model)
    assert main(["check", str(tmp_path / "m.tflite"), "--target", "tflm,litert-ref,ethos-u55-128", "--static",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    verdicts = {e["target"]: e["verdict"] for e in report["targets"]}
    assert verdicts == {"litert-ref": "runs", "tflm": "runs", "ethos-u55-128": "partial"}, verdicts
    assert vela_cpu in json.dumps(report)
    pytest.importorskip("tflite_micro", reason="TFLite Micro's interpreter runs the file")
    assert main(["check", str(tmp_path / "m.tflite"), "--target", "tflm", "--json"]) == 0  # equal to LiteRT REF
    (entry,) = json.loads(capsys.readouterr().out)["targets"]
    assert entry["verdict"] == "runs" and entry["basis"] == "tool", entry


BAD = [  # (command-line words, API keywords, what the one line says)
    (["--input-type", "int16"], {"input_type": "int16"}, "int16 is the boundary of a 16x8 model only"),
    (["--output-type", "output=int16"], {"output_type": {"output": "int16"}}, "16x8 model only"),
    (["--input-type", "image=uint8"], {"input_type": "image=uint8"}, "'image' is not a model input; inputs are: input"),
    (["--output-type", "logits=float32"], {"output_type": {"logits": "float32"}}, "'logits' is not a model output"),
    (["--input-type", "uint4"], {"input_type": "uint4"}, "TYPE one of float32, int8, uint8, int16"),
    (["--input-type", "a=int8", "--input-type", "a=uint8"], {"input_type": ["a=int8", "a=uint8"]}, "given twice"),
    (["--output-type", "uint8", "--weights", "int4", "--block-size", "32"],
     {"output_type": "uint8", "weights": "int4", "block_size": 32}, "--block-size 32 keeps activations float"),
    (["--input-type", "int8", "--activations", "float"],
     {"input_type": "int8", "activations": "float"}, "--activations float keeps activations float"),
    (["--input-type", "int8", "--activations", "int16", "--ranges-file", "r.json"],
     {"input_type": "int8", "activations": "int16", "ranges_file": "r.json"}, "TensorFlow ignores int8 there"),
    (["--output-type", "uint8", "--activations", "int16", "--ranges-file", "r.json"],
     {"output_type": "uint8", "activations": "int16", "ranges_file": "r.json"}, "cannot make uint8 from int16"),
]


@pytest.mark.parametrize("words, keywords, why", BAD, ids=[" ".join(b[0]) for b in BAD])
def test_bad_combinations_are_one_line_exit_2_nothing_written(words: list[str], keywords: dict, why: str,
                                                              tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r.json").write_text("{}")
    out = tmp_path / "x.tflite"
    assert main([str(EXAMPLE), "-o", str(out), "--inputs-range", "-1,1", *words]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and not out.exists(), err
    with pytest.raises(UsageError, match=why.replace("(", r"\(")):
        convert(EXAMPLE, str(out), ConvertOptions.of(inputs_range="-1,1", **keywords))
    assert not out.exists()
    if any(isinstance(v, dict) for v in keywords.values()) or "given twice" in why:
        return  # a manifest spells these as tables (below) and has one key per name
    shutil.copy(EXAMPLE, tmp_path / "m.pb")
    lines = [f"{k} = {json.dumps(v)}" for k, v in {"inputs_range": "-1,1", **keywords}.items()]
    (tmp_path / "m.toml").write_text("[defaults]\n" + "\n".join(lines) + "\n")
    code = main(["batch", str(tmp_path / "m.pb"), "--manifest", str(tmp_path / "m.toml"), "--jobs", "1"])
    err = capsys.readouterr().err
    # rules between options are checked before any model runs (exit 2); a name only the graph
    # knows fails that model (exit 1), as every per-model error of a batch does
    assert code == (1 if "not a model" in why or "16x8 model only" in why else 2) and why in err, err
    assert not list(tmp_path.glob("*.tflite"))


def test_a_manifest_names_tensors_in_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(EXAMPLE, tmp_path / "m.pb")
    (tmp_path / "m.toml").write_text('[defaults]\ninputs_range = "-1,1"\noutput_type = { logits = "float32" }\n')
    assert main(["batch", str(tmp_path / "m.pb"), "--manifest", str(tmp_path / "m.toml"), "--jobs", "1"]) == 1
    assert "'logits' is not a model output" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tflite"))


def test_dump_and_the_report_show_float_io_as_the_boundary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A float32 boundary is not a float op left: `float_ops == 0` still gates a fully integer model."""
    out = tmp_path / "m.tflite"
    assert main([str(EXAMPLE), "-o", str(out), "--inputs-range", "-1,1", "--input-type", "float32",
                 "--output-type", "float32", "--report", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["models"][0]["float_ops"] == 0
    capsys.readouterr()
    assert main(["dump", str(out), "--json"]) == 0
    t = json.loads(capsys.readouterr().out)["totals"]
    n = t["operators"]
    assert t["float_ops"] == 0 and t["float_boundary_ops"] == [
        {"subgraph": 0, "index": 0, "op": "QUANTIZE"}, {"subgraph": 0, "index": n - 1, "op": "DEQUANTIZE"}]
    assert main(["dump", str(out)]) == 0
    assert f"float I/O       0 QUANTIZE, {n - 1} DEQUANTIZE" in capsys.readouterr().out
