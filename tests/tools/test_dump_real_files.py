"""``qconvert dump`` on the real third-party files in ../shared/realmodels (issue 15).

The oracle is LiteRT's loader: every file LiteRT loads (or refuses only for a custom op
it lacks) must dump, as text and JSON, with exit 0; files LiteRT calls "not a valid
Flatbuffer" get one error line and exit 1. Facts about single files (a tensor LiteRT
names as invalid, a custom op, options stored as a list, uint8 tensors) are checked
against LiteRT's own report or the file's documented contents (realmodels/README.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT.parent / "shared" / "realmodels"
FILES = sorted(REAL.rglob("*.tflite")) if REAL.is_dir() else []
pytestmark = pytest.mark.skipif(not FILES, reason=f"{REAL} is absent (real third-party files, not in this repo)")


def _litert_verdict(path: Path) -> str:
    """'loads', 'custom op', or LiteRT's first error line."""
    from ai_edge_litert.interpreter import Interpreter

    try:
        Interpreter(model_path=str(path)).allocate_tensors()
        return "loads"
    except Exception as exc:  # noqa: BLE001  LiteRT raises RuntimeError or ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return "custom op" if "custom op" in first.lower() or "unresolved" in first.lower() else first


def _dump(path: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qconvert", "dump", str(path), *extra], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(REAL)) for p in FILES])
def test_every_real_file_dumps_or_fails_in_one_line(path: Path) -> None:
    pytest.importorskip("ai_edge_litert")
    verdict = _litert_verdict(path)
    text, js = _dump(path), _dump(path, "--json")
    for proc in (text, js):
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    if verdict in ("loads", "custom op") or "quantized_dimension" in verdict or "quantization" in verdict:
        assert text.returncode == 0 and js.returncode == 0, (verdict, text.stderr, js.stderr)
        doc = json.loads(js.stdout)
        assert doc["totals"]["operators"] == sum(len(sg["operators"]) for sg in doc["subgraphs"])
    elif text.returncode != 0:
        assert text.returncode == 1 and js.returncode == 1, (text.returncode, js.returncode)
        assert len(text.stderr.strip().splitlines()) == 1, text.stderr


def _doc(name: str) -> dict:
    proc = _dump(REAL / name, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_person_detect_flags_the_tensor_litert_rejects() -> None:
    pytest.importorskip("ai_edge_litert")
    path = REAL / "tflite_micro" / "person_detect.tflite"
    assert "quantized_dimension must be in range" in _litert_verdict(path)
    doc = _doc("tflite_micro/person_detect.tflite")
    flagged = {e["index"] for e in doc["totals"]["quantization_problem_list"]}
    # LiteRT's message names the first tensor it checks: "Tensor 33 has invalid quantization parameters"
    from ai_edge_litert.interpreter import Interpreter

    with pytest.raises(Exception) as info:
        Interpreter(model_path=str(path)).allocate_tensors()
    named = int(str(info.value).split("Tensor ")[1].split()[0])
    assert named in flagged
    t = doc["subgraphs"][0]["tensors"][named]
    assert t["quantization"]["problems"] and len(t["shape"]) <= t["quantization"]["quantized_dimension"]
    assert "LiteRT rejects" in _dump(path).stdout


def test_files_litert_loads_have_no_quantization_problem() -> None:
    pytest.importorskip("ai_edge_litert")
    for path in FILES:
        if _litert_verdict(path) == "loads":
            doc = json.loads(_dump(path, "--json").stdout)
            assert doc["totals"]["quantization_problems"] == 0, (path.name, doc["totals"]["quantization_problem_list"][:2])


def test_custom_op_code_and_options_are_shown() -> None:
    doc = _doc("tflite_micro/person_detect_vela.tflite")
    custom = [op for op in doc["subgraphs"][0]["operators"] if op["op"] == "CUSTOM"]
    assert custom and custom[0]["custom_code"] == "ethos-u" and custom[0]["custom_options"]
    assert "ethos-u" in _dump(REAL / "tflite_micro" / "person_detect_vela.tflite").stdout


def test_options_stored_as_lists_are_shown() -> None:
    doc = _doc("tflite_micro/micro_speech.tflite")
    reshape = next(op for op in doc["subgraphs"][0]["operators"] if op["op"] == "RESHAPE")
    assert isinstance(reshape["options"]["new_shape"], list)
    assert "new_shape=[" in _dump(REAL / "tflite_micro" / "micro_speech.tflite").stdout


def test_a_file_without_buffers_dumps() -> None:
    """model_invoking_error.tflite has no buffers at all; LiteRT loads it (and fails only on its custom op)."""
    pytest.importorskip("ai_edge_litert")
    path = REAL / "coral_test_data" / "model_invoking_error.tflite"
    assert _litert_verdict(path) == "custom op"
    doc = _doc("coral_test_data/model_invoking_error.tflite")
    assert doc["totals"]["parameter_bytes"] == 0


def test_uint8_files_show_uint8_tensors() -> None:
    doc = _doc("coral_test_data/mobilenet_v1_0.25_128_quant.tflite")
    dtypes = {t["dtype"] for t in doc["subgraphs"][0]["tensors"]}
    assert "uint8" in dtypes
