"""The command-line contract: exit codes, one-line errors, atomic output.

Runs on the example model in models/ and needs no TensorFlow.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qconvert.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "models" / "example_qat.pb"


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_convert_writes_an_int8_model_litert_runs(tmp_path: Path) -> None:
    out = tmp_path / "m.tflite"
    assert main([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(out)]) == 0
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=out.read_bytes(), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    (inp,), (outp,) = it.get_input_details(), it.get_output_details()
    assert inp["dtype"] == np.int8 and outp["dtype"] == np.int8
    assert inp["quantization"][1] == -1  # [-1, 1] in the signed domain
    it.set_tensor(inp["index"], np.zeros(inp["shape"], np.int8))
    it.invoke()
    assert it.get_tensor(outp["index"]).shape == (1, 10)
    assert not [n for n in os.listdir(tmp_path) if n != "m.tflite"], "temporary files left behind"


def test_default_command_and_default_output(tmp_path: Path) -> None:
    pb = tmp_path / "model.pb"
    pb.write_bytes(EXAMPLE.read_bytes())
    assert main(["convert", str(pb), "--inputs-range=-1,1"]) == 0
    assert (tmp_path / "model.tflite").is_file()
    proc = run(str(pb), "--inputs-range", "-1,1", "-o", str(tmp_path / "b.tflite"))
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "b.tflite").read_bytes() == (tmp_path / "model.tflite").read_bytes()


@pytest.mark.parametrize("rng", ["1,", "a,b", "3,1", "nan,1", "-inf,1", "1,1", "1,2,3"])
def test_malformed_range_is_a_usage_error(tmp_path: Path, rng: str, capsys) -> None:
    out = tmp_path / "x.tflite"
    assert main([str(EXAMPLE), "--inputs-range", f"input={rng}", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "usage error" in err and rng in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_unknown_input_name_lists_the_real_ones(capsys) -> None:
    assert main([str(EXAMPLE), "--inputs-range", "image=-1,1", "-o", os.devnull]) == 2
    err = capsys.readouterr().err
    assert "'image'" in err and "inputs are: input" in err


def test_missing_range_fails_and_leaves_existing_output_untouched(tmp_path: Path) -> None:
    out = tmp_path / "keep.tflite"
    out.write_bytes(b"old contents")
    proc = run(str(EXAMPLE), "-o", str(out))
    assert proc.returncode == 1
    assert "input 'input' has no range" in proc.stderr and "--inputs-range input=MIN,MAX" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert out.read_bytes() == b"old contents"
    assert sorted(os.listdir(tmp_path)) == ["keep.tflite"]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty"),
        (b"\x08\x96\x01garbage\xff\xfe" * 7, ""),
        (b"\x1c\x00\x00\x00TFL3" + b"\x00" * 64, "TFLite"),
    ],
)
def test_bad_model_file_is_one_line_exit_1(tmp_path: Path, content: bytes, message: str) -> None:
    pb = tmp_path / "bad.pb"
    pb.write_bytes(content)
    proc = run(str(pb), "--inputs-range", "-1,1")
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("qconvert: error:") and message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad.tflite").exists()


def test_missing_file_and_missing_output_dir(tmp_path: Path, capsys) -> None:
    assert main([str(tmp_path / "nope.pb"), "--inputs-range", "-1,1"]) == 1
    assert main([str(EXAMPLE), "--inputs-range", "-1,1", "-o", str(tmp_path / "no" / "x.tflite")]) == 1
    err = capsys.readouterr().err
    assert "nope.pb" in err and "does not exist" in err


def test_debug_shows_a_traceback(tmp_path: Path) -> None:
    proc = run(str(tmp_path / "nope.pb"), "--inputs-range", "-1,1", "--debug")
    assert proc.returncode == 1 and "Traceback" in proc.stderr


def test_dump_after_prints_the_ir(tmp_path: Path, capsys) -> None:
    assert main([str(EXAMPLE), "--inputs-range", "-1,1", "-o", str(tmp_path / "m.tflite"),
                 "--dump-after", "legalize", "--dump-after", "quantize"]) == 0
    out = capsys.readouterr().out
    assert "// IR after stage 'legalize'" in out and "FAKE_QUANT" in out
    assert "// IR after stage 'quantize'" in out and "CONV_2D" in out


def test_dump_reads_our_output_and_rejects_garbage(tmp_path: Path) -> None:
    out = tmp_path / "m.tflite"
    assert main([str(EXAMPLE), "--inputs-range", "-1,1", "-o", str(out)]) == 0
    proc = run("dump", str(out))
    assert proc.returncode == 0 and "CONV_2D" in proc.stdout and "requant" in proc.stdout
    proc = run("dump", str(EXAMPLE))
    assert proc.returncode == 1 and "not a TFLite file" in proc.stderr and "Traceback" not in proc.stderr


def test_help_is_usage_not_error() -> None:
    proc = run("--help")
    assert proc.returncode == 0 and "convert" in proc.stdout
    proc = run("convert", "--bogus-flag")
    assert proc.returncode == 2


def test_default_ranges_and_allow_float_flags(tmp_path: Path, capsys) -> None:
    from qconvert.frontend.graphdef import GraphDef

    gd = GraphDef.FromString(EXAMPLE.read_bytes())
    # drop the FakeQuant after the first convolution's ReLU: its readers now read the ReLU directly
    fq = next(n for n in gd.node if n.name == "conv1/fq")
    src = fq.input[0]
    for n in gd.node:
        n.input[:] = [src if i == "conv1/fq" else i for i in n.input]
    pb = tmp_path / "missing.pb"
    pb.write_bytes(gd.SerializeToString())
    out = tmp_path / "m.tflite"
    assert main([str(pb), "--inputs-range", "-1,1", "-o", str(out)]) == 1
    assert "'Relu'" in capsys.readouterr().err and not out.exists()
    assert main([str(pb), "--inputs-range", "-1,1", "-o", str(out), "--allow-float"]) == 0
    assert "stays float32" in capsys.readouterr().err
    assert main([str(pb), "--inputs-range", "-1,1", "-o", str(out), "--default-ranges", "0,6"]) == 0
    assert "--default-ranges 0,6 used for 1 tensor" in capsys.readouterr().err
    assert main([str(pb), "--inputs-range", "-1,1", "-o", str(out), "--default-ranges", "6,0"]) == 2


# --- start-up cost: each command imports only what it needs -------------------------

_MODULES_AFTER = """
import contextlib, io, json, sys
from qconvert.cli import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    code = main(json.loads(sys.argv[1]))
print(json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""

_STAGES = ("qconvert.converter.pipeline", "qconvert.frontend.importer", "qconvert.frontend.graphdef", "qconvert.fold",
           "qconvert.calibration.calibrate", "qconvert.calibration.executor",
           "qconvert.legalize", "qconvert.fuse", "qconvert.prepare", "qconvert.quantize_pass")


def _modules_after(args: list[str]) -> set[str]:
    import json

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", _MODULES_AFTER, json.dumps(args)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["code"] == 0
    return set(result["modules"])


def _loaded(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.mark.parametrize("args", [["--help"], ["dump", "--help"], ["batch", "--help"], ["convert", "--help"],
                                  ["run", "--help"], ["compare", "--help"]])
def test_help_imports_no_numpy_and_no_converter(args: list[str]) -> None:
    modules = _modules_after(args)
    assert _loaded(modules, ("numpy", "google.protobuf", "ai_edge_litert", "flatbuffers", "tensorflow",
                             "qconvert.converter", "qconvert.schema", "qconvert.tools.dump", "qconvert.tools.batch")) == []


def test_dump_imports_no_converter_stages_and_no_protobuf(tmp_path: Path) -> None:
    out = tmp_path / "m.tflite"
    assert main([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(out)]) == 0
    modules = _modules_after(["dump", str(out)])
    assert "qconvert.tools.dump" in modules
    assert _loaded(modules, _STAGES + ("google.protobuf", "tensorflow", "qconvert.tools.batch")) == []


def test_convert_imports_no_tensorflow_and_no_dump(tmp_path: Path) -> None:
    modules = _modules_after([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(tmp_path / "m.tflite")])
    assert "qconvert.converter.pipeline" in modules
    assert _loaded(modules, ("tensorflow", "tf_keras", "qconvert.tools.dump", "qconvert.tools.batch")) == []


def test_run_and_compare_import_no_tensorflow_and_no_stages(tmp_path: Path) -> None:
    import numpy as np

    out = tmp_path / "m.tflite"
    assert main([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(out)]) == 0
    np.save(tmp_path / "x.npy", np.zeros((1, 28, 28, 1), np.int8))
    modules = _modules_after(["run", str(out), "--input", str(tmp_path / "x.npy")])
    assert "qconvert.runtime.kernels" in modules
    assert _loaded(modules, _STAGES + ("google.protobuf", "tensorflow", "matplotlib", "qconvert.tools.batch")) == []
    np.save(tmp_path / "f.npy", np.zeros((2, 28, 28, 1), np.float32))
    modules = _modules_after(["compare", str(EXAMPLE), str(out), "--data", str(tmp_path / "f.npy")])
    assert "qconvert.tools.compare" in modules
    assert _loaded(modules, ("tensorflow", "tf_keras", "matplotlib", "qconvert.tools.batch")) == []


def test_a_reader_that_goes_away_is_not_an_error_line(tmp_path: Path) -> None:
    """`qconvert ... --dump-after fold | head -1`: the pipe closes early; no 'internal error'."""
    proc = subprocess.Popen([sys.executable, "-m", "qconvert", str(EXAMPLE), "--inputs-range", "input=-1,1",
                             "--dump-after", "fold", "--dump-after", "quantize", "-o", str(tmp_path / "m.tflite")],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"// IR after stage 'fold'")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "internal error" not in err and "Traceback" not in err, err


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to make every write fail")
@pytest.mark.parametrize("args", [["--version"], ["--help"], ["dump", "MODEL"]], ids=["version", "help", "dump"])
def test_a_full_disk_on_stdout_is_one_error_line(args: list[str], tmp_path: Path) -> None:
    """stdout on a full device: click's own --help/--version text and a command's output alike fail
    with exit 1 and one line naming the cause, no traceback, no 'internal error'."""
    model = tmp_path / "m.tflite"
    if "MODEL" in args:
        assert main([str(EXAMPLE), "--inputs-range", "input=-1,1", "-o", str(model)]) == 0
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "qconvert", *[str(model) if a == "MODEL" else a for a in args]],
                              cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines() == ["qconvert: error: cannot write the output: No space left on device"]
