"""``qconvert/options.py``: every option declared once, and the command line, manifests, the
API and docs/cli.md agree with that declaration; a bad value is the same error everywhere."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qconvert import options as O
from qconvert.cli import cli, main, reference
from qconvert.errors import UsageError
from qconvert.options import ConvertOptions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "models" / "example_qat.pb"


def test_docs_cli_md_is_generated_from_the_declaration() -> None:
    """docs/cli.md is `python -m qconvert.cli --reference`: regenerate it after changing an option."""
    assert (ROOT / "docs" / "cli.md").read_text() == reference()


def test_every_option_is_a_flag_a_key_and_a_keyword() -> None:
    flags = {c: {o for p in cli.commands[c].params for o in p.opts} for c in ("convert", "calibrate")}
    for spec in O.SPECS:
        assert (spec.flag in flags["convert"]) == (spec.key != "histograms"), spec.flag
        assert (spec.flag in flags["calibrate"]) == spec.calibrate, spec.flag
        assert spec.key in ConvertOptions().flat()
        ConvertOptions.of(**{spec.key: spec.get(ConvertOptions())})  # the default is a valid value
    assert len({s.key for s in O.SPECS}) == len({s.flag for s in O.SPECS}) == len(O.SPECS)
    assert {s.key for s in O.manifest_specs()} == {s.key for s in O.SPECS} - {"dump_after"}


def test_names_the_options_check_against_are_the_code_s() -> None:
    from qconvert.converter.pipeline import STAGE_NAMES
    from qconvert.quantize_pass.blockwise import BLOCK_SIZES
    from qconvert.tools.targets import TARGETS

    assert O.STAGES == STAGE_NAMES and O.BLOCK_SIZES == BLOCK_SIZES and O.TARGETS == TARGETS


BAD = [  # (flag words, key, value, what the message says)
    (["--calibration-method", "kl"], "calibration_method", "kl", "expected one of minmax, percentile, entropy, mse"),
    (["--percentile", "20"], "percentile", 20, "expected a value in (50, 100]"),
    (["--calibration-batch", "0"], "calibration_batch", 0, "must be at least 1"),
    (["--activations", "int4"], "activations", "int4", "expected one of int8, int16"),
    (["--block-size", "48"], "block_size", 48, "expected one of 32, 64, 128, 256"),
    (["--inputs-range", "input=1,-1"], "inputs_range", "input=1,-1", "MIN must be less than MAX"),
    (["--input-shapes", "input=1,x"], "input_shapes", "input=1,x", "dimensions must be integers"),
    (["--target", "npu9"], "target", "npu9", "unknown target 'npu9'"),
    (["--image-size", "32"], "image_size", "32", "expected 2 numbers"),
]


@pytest.mark.parametrize("words, key, value, why", BAD, ids=[b[1] for b in BAD])
def test_a_bad_value_is_the_same_usage_error_everywhere(words: list[str], key: str, value: object, why: str,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "x.tflite"
    assert main([str(EXAMPLE), "-o", str(out), *words]) == 2  # the command line: names the flag
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words[0] in err and why in err and not out.exists()

    with pytest.raises(UsageError, match=rf"^{key} = .*{__import__('re').escape(why)}"):  # the API: names the key
        ConvertOptions.of(**{key: value})

    shutil.copy(EXAMPLE, tmp_path / "m.pb")  # a manifest: names the file and the key
    text = f'"{value}"' if isinstance(value, str) else str(value)
    (tmp_path / "m.toml").write_text(f"[defaults]\n{key} = {text}\n")
    assert main(["batch", str(tmp_path / "m.pb"), "--manifest", str(tmp_path / "m.toml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key} = " in err and why in err and "m.toml" in err
    assert not list(tmp_path.glob("*.tflite"))


def test_rules_between_options_are_usage_errors_from_the_api_too() -> None:
    with pytest.raises(UsageError, match="--save-stats records statistics of --calibration-data"):
        ConvertOptions.of(save_stats="s.npz")
    with pytest.raises(UsageError, match="not both"):
        ConvertOptions.of(calibration_data="x.npz", stats=[str(EXAMPLE)])
    with pytest.raises(UsageError, match="--per-tensor-weights with --activations float: dynamic-range weights"):
        ConvertOptions.of(per_tensor_weights=True, activations="float")
    with pytest.raises(UsageError, match="unknown option 'calibration_dat'"):
        ConvertOptions.of(calibration_dat="x.npz")


def test_the_three_sources_build_the_same_options(tmp_path: Path) -> None:
    """The same choices from the command line, a manifest and Python are one ConvertOptions."""
    from qconvert.tools.batch import plan

    cli_words = {"inputs_range": ("input=-1,1",), "calibration_method": "entropy", "allow_float": True,
                 "input_shapes": ("input=1,28,28,1",), "mean": "127.5", "target": ("tflm",)}
    from_cli = ConvertOptions.from_cli(cli_words)
    from_api = ConvertOptions.of(inputs_range={"input": (-1, 1)}, calibration_method="entropy", allow_float=True,
                                 input_shapes={"input": [1, 28, 28, 1]}, mean=127.5, target=["tflm"])
    shutil.copy(EXAMPLE, tmp_path / "m.pb")
    (tmp_path / "m.toml").write_text('[[model]]\npath = "m.pb"\ninputs_range = { input = [-1, 1] }\n'
                                     'calibration_method = "entropy"\nallow_float = true\n'
                                     'input_shapes = { input = [1, 28, 28, 1] }\nmean = 127.5\ntarget = "tflm"\n')
    (job,) = plan([], str(tmp_path / "m.toml"))
    assert from_cli == from_api == job.options
    assert from_api.changed() == {"inputs_range": {"input": (-1.0, 1.0)}, "input_shapes": {"input": (1, 28, 28, 1)},
                                  "calibration_method": "entropy", "allow_float": True, "mean": (127.5,),
                                  "target": ("tflm",)}


def test_the_old_keywords_still_convert() -> None:
    """convert_graph's 0.1 keywords (input_ranges, positional ranges and shapes) are the same options."""
    from qconvert.api import convert, convert_graph

    old = convert_graph(str(EXAMPLE), {None: (-1.0, 1.0)}, calibration_method="minmax").model
    new = convert(EXAMPLE, None, ConvertOptions.of(inputs_range="-1,1")).model
    assert old == new and old[4:8] == b"TFL3"
