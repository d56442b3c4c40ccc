"""``convert --recipe FILE`` (issue 37) on test_per_layer_precision.py's model (Dense → Dense with two
channels ×300 → tanh → Dense).

1. Consistency (ours against ours, not an oracle): a conversion with ``--recipe`` is the conversion
   with the same flags, byte for byte, for our TOML and JSON forms and for the LiteRT Quantizer's form.
2. Oracle: the precision of each op, read by LiteRT's interpreter from the file's tensor types, is
   the one the recipe asks for (the int16 or float island: the wide tensor's writer and its reader;
   every other compute op int8).

Bench (not a test: the LiteRT Quantizer lives in another environment, /work/venv-bench). Their
quantizer on TensorFlow's float .tflite of this model with tests/fixtures/litert_recipes/
a8w8_dense1_a16w8.json makes the Dense whose output matches ``dense_1/BiasAdd`` 16x8 ALONE and
requantizes its int16 result to int8 for the int8 TANH; ``qconvert --recipe`` of the same file
makes the Dense and the TANH reading its result 16x8 (precision belongs to a tensor), with a note
saying so.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="the model is built with TensorFlow")
pytest.importorskip("tf_keras", reason="the model is a tf-keras model")

import test_per_layer_precision as plp

from qconvert.cli import main
from qconvert.recipe import write_recipe

pb = plp.pb  # the module fixture (cached model)
LITERT = Path(__file__).resolve().parents[1] / "fixtures" / "litert_recipes"
WIDE = plp.WIDE


def _convert(tmp: Path, pb: bytes, *words: str) -> tuple[bytes, str]:
    model, data, out = tmp / "model.pb", tmp / "calib.npz", tmp / f"out{len(list(tmp.glob('out*')))}.tflite"
    if not model.exists():
        model.write_bytes(pb)
        np.savez(data, input=plp.CALIB)
    assert main([str(model), "--inputs", "input", "--outputs", "Identity", "--calibration-data", str(data),
                 "-o", str(out), *words]) == 0
    return out.read_bytes(), str(out)


def _precision(path: str) -> dict[str, str]:
    """Each compute op's result tensor → its type, as LiteRT reads the file."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_path=path)
    types = {t["index"]: np.dtype(t["dtype"]).name for t in it.get_tensor_details()}
    names = {t["index"]: t["name"] for t in it.get_tensor_details()}
    return {names[op["outputs"][0]]: types[op["outputs"][0]] for op in it._get_ops_details()
            if op["op_name"] not in ("QUANTIZE", "DEQUANTIZE")}


CASES = [  # (recipe file name, its content (a path: the LiteRT fixture), the same flags, each op's type)
    ("int16.toml", {"int16": [WIDE]}, ["--int16", WIDE],
     {"model/dense/Relu": "int8", "model/dense_1/BiasAdd": "int16", "model/activation/Tanh": "int16",
      "Identity": "int8"}),
    ("float.json", {"keep_float": [WIDE]}, ["--keep-float", WIDE],
     {"model/dense/Relu": "int8", "model/dense_1/BiasAdd": "float32", "model/activation/Tanh": "float32",
      "Identity": "int8"}),
    ("tanh.toml", {"keep_float": ["^TANH$"], "per_tensor_weights": True}, ["--keep-float", "^TANH$",
                                                                          "--per-tensor-weights"],
     {"model/dense/Relu": "int8", "model/dense_1/BiasAdd": "int8", "model/activation/Tanh": "float32",
      "Identity": "int8"}),
    ("litert.json", LITERT / "a8w8_dense1_a16w8.json", ["--int16", WIDE],
     {"model/dense/Relu": "int8", "model/dense_1/BiasAdd": "int16", "model/activation/Tanh": "int16",
      "Identity": "int8"}),
]


@pytest.mark.parametrize("name, content, flags, types", CASES, ids=[c[0] for c in CASES])
def test_a_recipe_converts_as_its_flags_and_gives_each_op_its_precision(
        pb: bytes, tmp_path: Path, name: str, content: object, flags: list[str], types: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / name
    if isinstance(content, Path):
        recipe.write_text(content.read_text())
    else:
        write_recipe(recipe, content)  # type: ignore[arg-type]
    by_recipe, path = _convert(tmp_path, pb, "--recipe", str(recipe))
    err = capsys.readouterr().err
    by_flags, _ = _convert(tmp_path, pb, *flags)
    assert by_recipe == by_flags  # consistency: ours against ours
    assert _precision(path) == types  # oracle: LiteRT reads the types the recipe asks for
    if name == "litert.json":
        assert "the LiteRT Quantizer takes the writing op alone" in err


def test_the_command_line_wins_over_the_recipe_with_a_note(pb: bytes, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.json").write_text(json.dumps({"version": 1, "int16": [WIDE], "keep_float": ["^TANH$"]}))
    both, path = _convert(tmp_path, pb, "--recipe", str(tmp_path / "r.json"), "--int16", "dense/Relu")
    err = capsys.readouterr().err
    assert f"--int16 on the command line replaces the recipe's int16 = ['{WIDE}']" in err
    assert both == _convert(tmp_path, pb, "--int16", "dense/Relu", "--keep-float", "^TANH$")[0]


def test_the_library_keyword(pb: bytes, tmp_path: Path) -> None:
    from qconvert.api import convert_graph

    write_recipe(tmp_path / "r.toml", {"int16": [WIDE]})
    r = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data={"input": plp.CALIB},
                      recipe=str(tmp_path / "r.toml"))
    assert r.model == plp._ours(pb, int16=[WIDE])[0]
