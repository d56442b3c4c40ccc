"""``qconvert/recipe.py`` and ``--recipe``: a recipe file holds the precision options; it reads back
what was written; bad files are one-line usage errors (exit 2) naming the file and the key; the
command line, a manifest and the API take it alike, values given beside it winning; the LiteRT
Quantizer's shipped recipes read into the options their documented meaning gives (expectations
written by hand from their recipe_manager's rules, not from our output).

The conversions themselves (a recipe gives the file its flags give, and the ops the precision it
asks for) are in tests/e2e/test_recipe_precisions.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from qconvert.cli import main
from qconvert.errors import UsageError
from qconvert.options import ConvertOptions, recipe_specs
from qconvert.recipe import load_recipe, read_recipe, write_recipe

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "models" / "example_qat.pb"
LITERT = ROOT / "tests" / "fixtures" / "litert_recipes"

VALUES = {"int16": ["dense_1/BiasAdd", r"block\d+/add$", "it's"], "keep_float": ["^SOFTMAX$"],
          "per_tensor_weights": True, "low_bit_activations": "8bit", "allow_float": False}


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_write_then_read_gives_the_same_values_and_options(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"r{suffix}"
    write_recipe(path, {**VALUES, "block_size": None, "keep_float": tuple(VALUES["keep_float"])})
    assert read_recipe(path) == VALUES  # None (the default) left out, tuples as lists
    if suffix == ".json":
        assert json.loads(path.read_text())["version"] == 1
    else:
        assert path.read_text().startswith("version = 1\n")
    with_recipe = ConvertOptions.of(recipe=str(path), calibration_data="x.npz")
    with_keys = ConvertOptions.of(**VALUES, calibration_data="x.npz")
    assert with_recipe.precision.recipe == str(path) and with_recipe.replace(recipe=None) == with_keys
    assert {k: v for k, v in with_recipe.changed().items() if k != "recipe"} == with_keys.changed()


def test_toml_is_written_readably() -> None:
    """Regexes as TOML literal strings (no doubled backslashes) where they can be."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        write_recipe(Path(tmp) / "r.toml", {"int16": [r"block\d+"], "keep_float": ["it's"]})
        assert (Path(tmp) / "r.toml").read_text() == "version = 1\nint16 = ['block\\d+']\nkeep_float = [\"it's\"]\n"


def test_the_recipe_keys_are_the_precision_options() -> None:
    assert {s.key for s in recipe_specs()} == {
        "activations", "weights", "block_size", "int4_storage", "per_tensor_weights", "inference_type",
        "low_bit_activations", "allow_float", "keep_float", "int16"}
    assert all(s.group == "precision" and s.manifest for s in recipe_specs())


BAD = [  # (file name, text, what the one line says)
    ("syntax.toml", "version = 1\nint16 = [\n", "is not valid TOML"),
    ("syntax.json", '{"version": 1, "int16": [}', "is not valid JSON"),
    ("unknown.toml", "version = 1\nint17 = ['x']\n", "unknown key 'int17'; a recipe holds version and activations"),
    ("not_precision.toml", "version = 1\ncalibration_method = 'mse'\n", "unknown key 'calibration_method'"),
    ("type.toml", "version = 1\nint16 = 3\n", "int16 = 3: expected a regular expression or a list of them"),
    ("type2.toml", "version = 1\nper_tensor_weights = 'yes'\n", "per_tensor_weights = 'yes': expected true or false"),
    ("choice.json", '{"version": 1, "activations": "int4"}', "activations = 'int4': expected one of int8, int16"),
    ("regex.toml", "version = 1\nkeep_float = ['dense(']\n", "is not a regular expression"),
    ("noversion.toml", "int16 = ['x']\n", "no version; add version = 1"),
    ("version2.toml", "version = 2\n", "version = 2; this qconvert reads version 1"),
    ("list.json", '[1, 2]', "a JSON recipe is an object"),
    ("recipe.yaml", "version: 1\n", "a recipe is a .toml or a .json file"),
    ("rules.toml", "version = 1\nactivations = 'float'\nint16 = ['x']\n", "--int16 with --activations float"),
]


@pytest.mark.parametrize("name, text, why", BAD, ids=[b[0] for b in BAD])
def test_a_bad_recipe_is_one_line_exit_2(name: str, text: str, why: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / name).write_text(text)
    out = tmp_path / "x.tflite"
    assert main([str(EXAMPLE), "-o", str(out), "--recipe", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and not out.exists(), err
    if name != "rules.toml":
        assert f"recipe '{tmp_path / name}'" in err
    with pytest.raises(UsageError, match=why.replace("(", r"\(").replace("[", r"\[")):  # the API alike
        ConvertOptions.of(recipe=str(tmp_path / name))


def test_a_missing_recipe_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(EXAMPLE), "-o", str(tmp_path / "x.tflite"), "--recipe", str(tmp_path / "none.toml")]) == 2
    assert "cannot read recipe" in capsys.readouterr().err


def test_a_value_given_beside_the_recipe_wins_with_a_note(tmp_path: Path) -> None:
    write_recipe(tmp_path / "r.toml", {"int16": ["a"], "keep_float": ["b"]})
    cli = ConvertOptions.from_cli({"recipe": str(tmp_path / "r.toml"), "int16": ("c",), "calibration_data": "x.npz"})
    assert cli.precision.int16 == ("c",) and cli.precision.keep_float == ("b",)
    assert cli.precision.recipe_notes == (f"recipe '{tmp_path / 'r.toml'}': --int16 on the command line replaces the "
                                          f"recipe's int16 = ['a'] (a value given beside a recipe wins)",)
    api = ConvertOptions.of(recipe=str(tmp_path / "r.toml"), int16=["c"], calibration_data="x.npz")
    assert api == cli and "int16=['c'] replaces" in api.precision.recipe_notes[0]
    same = ConvertOptions.of(recipe=str(tmp_path / "r.toml"), int16=["a"], calibration_data="x.npz")
    assert same.precision.recipe_notes == ()  # the same value: nothing to say


def test_the_manifest_key_recipe_is_relative_to_the_manifest(tmp_path: Path) -> None:
    from qconvert.tools.batch import plan

    (tmp_path / "recipes").mkdir()
    write_recipe(tmp_path / "recipes" / "r.toml", {"int16": ["a"], "keep_float": ["b"]})
    shutil.copy(EXAMPLE, tmp_path / "m.pb")
    shutil.copy(EXAMPLE, tmp_path / "n.pb")
    (tmp_path / "m.toml").write_text('[defaults]\nrecipe = "recipes/r.toml"\ncalibration_data = "x.npz"\n'
                                     '[[model]]\npath = "m.pb"\n[[model]]\npath = "n.pb"\nkeep_float = ["z"]\n')
    m, n = plan([], str(tmp_path / "m.toml"))
    assert (m.options.precision.int16, m.options.precision.keep_float) == (("a",), ("b",))
    assert (n.options.precision.int16, n.options.precision.keep_float) == (("a",), ("z",))
    assert "manifest key 'keep_float' replaces the recipe's keep_float = ['b']" in n.options.precision.recipe_notes[0]
    (tmp_path / "recipes" / "r.toml").write_text("version = 1\nint17 = 1\n")
    with pytest.raises(UsageError, match=r"manifest '.*m.toml' \[defaults\]: recipe '.*r.toml': unknown key 'int17'"):
        plan([], str(tmp_path / "m.toml"))


# ---------------------------------------------------------------------------------- the LiteRT Quantizer's recipes

LITERT_MAPS = [  # (their file, our options, a note that must be given)
    ("default_a8w8_recipe.json", {}, None),  # static int8: qconvert's default
    ("default_a16w8_recipe.json", {"activations": "int16"}, None),  # TensorFlow's 16x8
    ("dynamic_legacy_wi8_afp32_recipe.json", {"activations": "float"}, None),  # min 1024 elements: TensorFlow's
    ("dynamic_wi8_afp32_recipe.json", {"activations": "float"}, "min_weight_elements 0"),
    ("a8w8_dense1_a16w8.json", {"int16": ["dense_1/BiasAdd"]}, "takes the writing op alone"),
]


@pytest.mark.parametrize("name, values, note", LITERT_MAPS, ids=[m[0] for m in LITERT_MAPS])
def test_litert_recipes_read_into_our_options(name: str, values: dict, note: str | None) -> None:
    r = load_recipe(LITERT / name)
    assert r.form == "litert" and r.values == values
    assert (note is None) == (not r.notes) and (note is None or note in r.notes[0]), r.notes


def _entry(regex: str, op: str = "*", a: int | None = 8, w: int | None = 8, compute: str = "INTEGER",
           algo: str = "min_max_uniform_quantize", wgran: str = "CHANNELWISE") -> dict:
    cfg: dict = {"compute_precision": compute}
    if a:
        cfg["activation_tensor_config"] = {"num_bits": a, "symmetric": a == 16, "granularity": "TENSORWISE",
                                           "dtype": "INT"}
    if w:
        cfg["weight_tensor_config"] = {"num_bits": w, "symmetric": True, "granularity": wgran, "dtype": "INT"}
    return {"regex": regex, "operation": op, "algorithm_key": algo, "op_config": cfg}


TRANSLATED = [  # (entries, our options): the rules of their recipe_manager, read by hand
    ([_entry(".*"), _entry("attn/", a=16), _entry(".*", "SOFTMAX", algo="no_quantize")],
     {"int16": ["attn/"], "keep_float": ["^SOFTMAX$"]}),
    ([_entry(".*"), _entry("head;", compute="FLOAT", a=None, w=None)], {"keep_float": ["head$"]}),  # ';' ends a name
    ([_entry(".*", wgran="TENSORWISE")], {"per_tensor_weights": True}),
    ([_entry(".*", w=4)], {"weights": "int4"}),
    ([_entry(".*", a=None, w=4, wgran="BLOCKWISE_32")], {"activations": "float", "weights": "int4", "block_size": 32}),
    ([_entry(".*", "CONV_2D_TRANSPOSE", a=16), _entry(".*")], {}),  # a '*' entry for a regex replaces its list
    ([_entry("x", a=16), _entry(".*"), _entry("x", "*", algo="no_quantize")], None),  # x keeps its first place
    ([_entry(".*"), _entry(".*", "CONV_2D_TRANSPOSE", a=16)], {"int16": ["^TRANSPOSE_CONV$"]}),
]


@pytest.mark.parametrize("entries, values", TRANSLATED, ids=range(len(TRANSLATED)))
def test_their_entries_translate_as_their_rules_say(tmp_path: Path, entries: list, values: dict | None) -> None:
    (tmp_path / "r.json").write_text(json.dumps(entries))
    if values is None:  # their order: 'x' first (dict position kept), then '.*': the whole-model entry overrides
        with pytest.raises(UsageError, match="comes first, with no entry for every op before it"):
            read_recipe(tmp_path / "r.json")
        return
    assert read_recipe(tmp_path / "r.json") == values


UNMAPPED = [  # (their file or entries, the one line names the entry and why)
    ("default_af32w8float_recipe.json", "entry #1: every op float (weight-only): qconvert writes no such file"),
    ("sample_advanced_usage_recipe.json", "entry #2: weight-only (4-bit weights, float compute) for '^FULLY_CONNECTED$'"),
    ([_entry(".*"), _entry("attn", "FULLY_CONNECTED", a=16)], "entry #2: regex 'attn' with operation 'FULLY_CONNECTED'"),
    ([_entry(".*"), _entry("attn", algo="gptq")], "entry #2: algorithm_key 'gptq' has no qconvert equivalent"),
    ([_entry("attn", a=16)], "entry #1 (regex 'attn', operation '*') comes first"),
    ([_entry(".*"), _entry("a", a=16), _entry("a/b")], "entry #3 puts ops matching 'a/b' back to the model's"),
    ([_entry(".*", a=16), _entry("a", w=4)], "entry #2 (int8 activations with int4 channelwise weights for 'a')"),
    ([_entry(".*"), _entry(".*", "INPUT", a=16)], "entry #2: operation 'INPUT' is not a TFLite op"),
    ([{**_entry(".*"), "op_config": {"activation_tensor_config": {"num_bits": 8, "symmetric": True},
                                     "compute_precision": "INTEGER"}}], "8-bit activations with symmetric True"),
]


@pytest.mark.parametrize("recipe, why", UNMAPPED, ids=range(len(UNMAPPED)))
def test_what_does_not_map_is_one_line_naming_the_entry(tmp_path: Path, recipe: object, why: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = LITERT / recipe if isinstance(recipe, str) else tmp_path / "r.json"
    if not isinstance(recipe, str):
        path.write_text(json.dumps(recipe))
    assert main([str(EXAMPLE), "-o", str(tmp_path / "x.tflite"), "--recipe", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(LiteRT Quantizer recipe)" in err and why in err, err


def _mutations(text: str, rng: Any, n: int) -> list[str]:
    """Byte-level (flip, drop, duplicate a span) and value-level (a JSON value replaced by another
    type) mutations of a recipe's text."""
    out = []
    data = text.encode("utf-8")
    odd = [None, True, -1, 1e308, "", "((", [], {}, [1, [2]], {"regex": 3}, "x" * 300]
    for _ in range(n):
        kind = int(rng.integers(4))
        b = bytearray(data)
        if kind == 0 and b:
            i = int(rng.integers(len(b)))
            b[i] = int(rng.integers(256))
        elif kind == 1 and b:
            i, j = sorted(int(v) for v in rng.integers(0, len(b), 2))
            del b[i:j]
        elif kind == 2 and b:
            i, j = sorted(int(v) for v in rng.integers(0, len(b), 2))
            b[j:j] = b[i:i + 64]
        else:
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            if doc is not None:
                def walk(x):  # type: ignore[no-untyped-def]
                    if isinstance(x, dict) and x:
                        k = list(x)[int(rng.integers(len(x)))]
                        if rng.random() < 0.5:
                            x[k] = odd[int(rng.integers(len(odd)))]
                        else:
                            walk(x[k])
                    elif isinstance(x, list) and x:
                        i = int(rng.integers(len(x)))
                        if rng.random() < 0.5:
                            x[i] = odd[int(rng.integers(len(odd)))]
                        else:
                            walk(x[i])
                walk(doc)
                b = bytearray(json.dumps(doc).encode("utf-8"))
        out.append(bytes(b).decode("utf-8", errors="surrogateescape"))
    return out


def test_mutated_recipes_are_read_or_refused_in_one_line(tmp_path: Path) -> None:
    """A recipe is a new input path: 600 mutations of our TOML and JSON recipes and of the LiteRT
    Quantizer's shipped ones are each read (and then checked as options) or refused with a
    UsageError — never another exception."""
    import numpy as np

    rng = np.random.default_rng(41)
    seeds = [(p.suffix, p.read_text()) for p in sorted(LITERT.glob("*.json"))]
    write_recipe(tmp_path / "ours.toml", VALUES)
    write_recipe(tmp_path / "ours.json", VALUES)
    seeds += [(".toml", (tmp_path / "ours.toml").read_text()), (".json", (tmp_path / "ours.json").read_text())]
    refused = read = 0
    for k, (suffix, text) in enumerate(seeds):
        for m, mutated in enumerate(_mutations(text, rng, 600 // len(seeds))):
            path = tmp_path / f"m{k}_{m}{suffix}"
            path.write_bytes(mutated.encode("utf-8", errors="surrogateescape"))
            try:
                ConvertOptions.of(recipe=str(path), calibration_data="x.npz")
                read += 1
            except UsageError as exc:
                assert "\n" not in str(exc).strip(), str(exc)
                refused += 1
    print(f"recipe fuzz: {read} read, {refused} refused in one line")
    assert refused > 100 and read > 10, (refused, read)
