"""``qconvert tune`` (issue 37) on three models where full int8 loses for different reasons
(tests/fixtures/tune_models.py: massive activations before a tanh, two channels of ×300 gain
before a tanh, wide cancelling weights, an attention block with a −1e4 mask constant).

Oracles: the float model is TensorFlow's float .tflite; the quantized files (TensorFlow's full
int8 and ours) run in LiteRT REF; the output SNR is computed here from those outputs on 100
evaluation samples that neither the calibration nor the search saw. The recipe written must
reproduce the file through ``convert`` with its keys.
"""

from __future__ import annotations

import html
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow builds the models and is the oracle")
pytest.importorskip("tf_keras", reason="the models are tf-keras models")

import oracle
import tune_models as tm

from qconvert.cli import main
from qconvert.schema.reader import read_model

N_CAL, N_EVAL = 256, 100
# compute ops tune promotes on each (measured; the target is max(2, a tenth of the compute ops),
# met on massive, wide_weights and attention; outliers' ×300 gain also amplifies its input's int8
# error ×300: the wide tensor in float alone gives 25.3 dB on the held-out samples, so tune keeps the
# Dense before it float too)
EXPECTED_MAX_PROMOTED = {"outliers": 4, "massive": 2, "wide_weights": 2, "attention": 2}


def _shape(name: str) -> list[int]:
    return [1, tm.TOKENS, tm.WIDTH] if name == "attention" else [1, tm.WIDTH]


_CASES: dict[str, dict] = {}  # type: ignore[type-arg]


@pytest.fixture(scope="module", params=sorted(tm.BUILDERS))
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    return _make_case(request.param, tmp_path_factory)


@pytest.fixture(scope="module")
def case_of(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """One named model's case, for the checks one model is enough for."""
    return lambda name: _make_case(name, tmp_path_factory)


def _make_case(name: str, tmp_path_factory: pytest.TempPathFactory) -> dict:  # type: ignore[type-arg]
    if name in _CASES:
        return _CASES[name]
    d = tmp_path_factory.mktemp(name)
    pb = d / "model.pb"
    pb.write_bytes(tm.build(name))
    np.savez(d / "cal.npz", input=tm.data(name, 1, N_CAL))
    ev = tm.data(name, 2, N_EVAL)
    np.savez(d / "eval.npz", input=ev)
    fg = oracle.FloatGraph(pb.read_bytes(), ["input"], ["Identity"], {"input": _shape(name)})
    ref = oracle.tf_float_convert(fg)
    floats = [oracle.run_litert(ref, {"input": x[None]})[0].astype(np.float64) for x in ev]
    _CASES[name] = {"name": name, "dir": d, "pb": pb, "eval": ev, "floats": floats, "fg": fg}
    return _CASES[name]


def _snr(case: dict, tflite: bytes) -> float:  # type: ignore[type-arg]
    """Output SNR (dB) of ``tflite`` (LiteRT REF) against TensorFlow's float model on the evaluation samples."""
    return oracle.snr_db(tflite, [{"input": x[None]} for x in case["eval"]], [[f] for f in case["floats"]])


def _promoted(tflite: bytes) -> tuple[int, int, dict[str, str]]:
    """(promoted compute ops, compute ops, output name -> type of each promoted op) read from the file."""
    sg = read_model(tflite).subgraphs[0]
    ops = [op for op in sg.operators if op.builtin not in ("QUANTIZE", "DEQUANTIZE")]
    kinds = {sg.tensors[op.outputs[0]].name: sg.tensors[op.outputs[0]].dtype for op in ops}
    up = {n: k for n, k in kinds.items() if k != "int8"}
    return len(up), len(ops), up


def _tune(case: dict, *extra: str) -> tuple[int, Path, Path]:  # type: ignore[type-arg]
    d = case["dir"]
    tag = "_".join(a.strip("-").replace("/", "_") for a in extra)[:60]
    out, recipe = d / f"out_{tag}.tflite", d / f"recipe_{tag}.toml"
    out.unlink(missing_ok=True)
    recipe.unlink(missing_ok=True)
    rc = main(["tune", str(case["pb"]), "--inputs", "input", "--outputs", "Identity", "--calibration-data",
               str(d / "cal.npz"), "--eval-data", str(d / "eval.npz"), "-o", str(out), "--recipe-out", str(recipe),
               *extra])
    return rc, out, recipe


def test_tune_meets_30_db_on_held_out_samples(case: dict, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[type-arg]
    name = case["name"]
    full_tf = oracle.tf_ptq_convert(case["fg"], {"input": tm.data(name, 1, N_CAL)})
    rc, out, recipe = _tune(case, "--min-snr", "30")
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    tuned = out.read_bytes()
    s_tf, s_tuned = _snr(case, full_tf), _snr(case, tuned)
    n_up, n_ops, up = _promoted(tuned)
    print(f"{name}: TensorFlow full int8 {s_tf:.1f} dB; tune --min-snr 30: {s_tuned:.1f} dB on {N_EVAL} held-out "
          f"samples (LiteRT REF), {n_up} of {n_ops} compute ops promoted {up}; target max(2, {n_ops / 10:g})")
    assert s_tf < 15, s_tf  # full int8 loses badly in TensorFlow too
    assert s_tuned >= 30, s_tuned
    assert n_up <= EXPECTED_MAX_PROMOTED[name], up
    # the recipe reproduces the file: exact patterns, batch-manifest keys
    values = tomllib.loads(recipe.read_text())
    assert values["version"] == 1 and set(values) == {"version", "keep_float", "int16"}
    assert all(p.startswith("^") and p.endswith("$") for p in values["keep_float"] + values["int16"])
    # consistency (ours against ours): `convert --recipe` on the same calibration data writes tune's file,
    # the way CI keeps the choice
    again = case["dir"] / "again.tflite"
    assert main(["convert", str(case["pb"]), "--inputs", "input", "--outputs", "Identity", "--calibration-data",
                 str(case["dir"] / "cal.npz"), "--recipe", str(recipe), "-o", str(again)]) == 0
    assert again.read_bytes() == tuned
    assert "float alone dB" in captured.out and "qconvert: tune: sensitivity" in captured.err


def test_tuned_file_runs_in_tflite_micro(case: dict) -> None:  # type: ignore[type-arg]
    pytest.importorskip("tflite_micro", reason="TFLite Micro's Python interpreter (pip install 'qconvert[tflm]')")
    rc, out, _ = _tune(case, "--min-snr", "30")
    assert rc == 0
    tuned = out.read_bytes()
    d = oracle.io_details(tuned)
    iscale, izp = d["inputs"][0]["quant"]
    x = np.clip(np.round(case["eval"][:1] / iscale + izp), -128, 127).astype(np.int8)
    try:
        micro = oracle.tflm_outputs(tuned, [x], 1)[0]
    except Exception as exc:  # noqa: BLE001 - only an op TFLite Micro lacks is a skip (saying which)
        if not re.search(r"Didn't find op|Failed to get registration|not supported|unsupported", str(exc)):
            raise
        pytest.skip(f"TFLite Micro does not run it: {str(exc).splitlines()[0][:120]}")
    ref = oracle.run_litert(tuned, {"input": x})[0]
    assert np.abs(micro.astype(np.int32) - ref.astype(np.int32)).max() <= 1


def test_a_budget_it_cannot_meet_exits_1_and_writes_nothing(case_of, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    case = case_of("wide_weights")
    rc, out, recipe = _tune(case, "--min-snr", "200")
    err = capsys.readouterr().err
    assert rc == 1 and not out.exists() and not recipe.exists()
    line = [e for e in err.splitlines() if e.startswith("qconvert: error:")]
    assert len(line) == 1 and "cannot meet 200 dB output SNR: the best found gives" in line[0] \
        and "compute ops" in line[0], line


def test_max_drop_with_labels(case_of, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[type-arg]
    """Labels = the float model's top-1 (TensorFlow): float accuracy 100 %; --max-drop 3 must hold in LiteRT REF."""
    case = case_of("outliers")
    labels = np.array([int(np.argmax(f)) for f in case["floats"]])
    np.save(case["dir"] / "labels.npy", labels)
    rc, out, _ = _tune(case, "--max-drop", "3", "--labels", str(case["dir"] / "labels.npy"))
    assert rc == 0, capsys.readouterr().err
    tuned = out.read_bytes()
    d = oracle.io_details(tuned)
    iscale, izp = d["inputs"][0]["quant"]
    hits = 0
    for x, lab in zip(case["eval"], labels):
        xi = np.clip(np.round(x[None] / iscale + izp), -128, 127).astype(np.int8)
        hits += int(np.argmax(oracle.run_litert(tuned, {"input": xi})[0])) == lab
    assert 100.0 * hits / len(labels) >= 97.0


@pytest.mark.parametrize("args, message", [
    ([], "tune needs a budget"),
    (["--max-drop", "1"], "--max-drop needs --labels"),
    (["--min-snr", "30", "--labels", "x.npy"], "--labels is for --max-drop"),
    (["--min-snr", "30", "--recipe", "r.toml"], "No such option '--recipe'"),  # tune writes recipes, reads none
])
def test_usage_errors_exit_2(args: list[str], message: str, capsys: pytest.CaptureFixture[str],
                             tmp_path: Path) -> None:
    rc = main(["tune", "m.pb", "--calibration-data", "c.npz", "--eval-data", "e.npz", "-o", str(tmp_path / "o.tflite"),
               *args])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o.tflite").exists()


def test_deterministic(case_of) -> None:  # type: ignore[no-untyped-def]
    case = case_of("attention")
    rc1, out1, rec1 = _tune(case, "--min-snr", "30")
    first = (out1.read_bytes(), rec1.read_text())
    rc2, out2, rec2 = _tune(case, "--min-snr", "30")
    assert rc1 == rc2 == 0 and (out2.read_bytes(), rec2.read_text()) == first


# ---------------------------------------------------------------------------
# tune --html / --model-explorer: the report of what tune decided (oracles: LiteRT's reading of the tuned
# file for each op's precision, the SNR computed above from TensorFlow's float model and LiteRT REF,
# Chromium for the page's script)


def _kind(name: str, in_types: list[str]) -> str:
    """An op's precision as LiteRT's tensor types say it (compare --html's rule)."""
    if name in ("QUANTIZE", "DEQUANTIZE"):
        return "conv"
    return "float" if "float32" in in_types else "int16" if "int16" in in_types else "int8"


def _tune_html(case: dict, budget: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]):  # type: ignore[type-arg]
    page, nodes = tmp_path / "tune.html", tmp_path / "tune.json"
    rc, out, recipe = _tune(case, "--min-snr", budget, "--html", str(page), "--model-explorer", str(nodes))
    captured = capsys.readouterr()
    return rc, out, recipe, page, nodes, captured


@pytest.mark.parametrize("name", ["attention", "wide_weights"])  # a 16x8 island; float islands
def test_html_report_marks_each_ops_precision_as_the_file_says(
        case_of, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    import html_report

    from qconvert.tools.tune_html import tensors_in_table

    case = case_of(name)
    rc, out, recipe, page, nodes, captured = _tune_html(case, "30", tmp_path, capsys)
    assert rc == 0, captured.err
    text = page.read_text()
    html_report.well_formed(text)  # self-contained: no http(s)://, every link in the page
    ops = html_report.litert_ops(out)
    kinds = [_kind(n, t) for n, t, _ in ops]
    # every op of the tuned file is drawn, marked by the precision LiteRT's tensor types give it
    boxes = html_report.nodes(text)
    assert sorted(boxes) == list(range(len(ops)))
    for k, kind in enumerate(kinds):
        assert f"k-{kind}" in boxes[k], (k, ops[k], boxes[k])
    assert ("int16" in kinds) == (name == "attention") and ("float" in kinds) == (name == "wide_weights")
    # the sensitivity table has every tensor tune printed, one row each
    printed = [line.split()[0] for line in captured.out.splitlines()[2:] if line.startswith("  ")]
    assert sorted(tensors_in_table(text)) == sorted(printed) and len(printed) >= 6
    # each row's "in the file" is its writer's precision in LiteRT; each chosen tensor's op is promoted so
    writer = {t: k for k, (_, _, outs) in enumerate(ops) for t in outs}
    writer.update({t: writer[o] for t, o in [("model/ff2/BiasAdd", "Identity"), ("model/d4/BiasAdd", "Identity")]
                   if o in writer})
    rows = re.findall(r'<tr data-i="(\d+)"( class="chosen (\w+)")? data-tensor="([^"]+)">.*?<td class="prec">'
                      r'(\w+)</td></tr>', text)
    assert len(rows) == len(printed)
    chosen = 0
    for i, _, mode, tensor, prec in rows:
        assert int(i) == writer[tensor] and prec == kinds[int(i)], (tensor, i, prec, ops[int(i)])
        if mode:
            chosen += 1
            assert kinds[int(i)] == mode
    values = tomllib.loads(recipe.read_text())
    assert chosen == len(values["int16"] + values["keep_float"]) >= 1
    # the header's held-out SNR is the one TensorFlow's float model and LiteRT REF give the file
    oracle_snr = _snr(case, out.read_bytes())
    shown = float(re.search(r"output SNR: <b>(-?[\d.]+) dB</b> on 100 held-out", text).group(1))
    assert abs(shown - oracle_snr) < 0.5, (shown, oracle_snr)
    assert '<span class="verdict met">budget met</span>' in text
    # the search's steps, as its progress lines said them
    steps = [line.split("qconvert: tune: ")[1] for line in captured.err.splitlines() if "tune: search:" in line]
    assert steps and all(html.escape(s) in text for s in steps)
    # Model Explorer node data: keyed by the tuned file's operator indices
    doc = json.loads(nodes.read_text())
    assert doc["results"] and {int(k) for k in doc["results"]} <= set(range(len(ops)))


def test_html_report_when_the_budget_is_not_met(case_of, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 1, no model, no recipe; the report is written all the same and says how close it got."""
    import html_report

    case = case_of("wide_weights")
    rc, out, recipe, page, nodes, captured = _tune_html(case, "200", tmp_path, capsys)
    assert rc == 1 and not out.exists() and not recipe.exists()
    error = [e for e in captured.err.splitlines() if e.startswith("qconvert: error:")]
    assert len(error) == 1 and "cannot meet 200 dB" in error[0]
    text = page.read_text()
    html_report.well_formed(text)
    assert '<span class="verdict miss">budget NOT met</span>' in text and "not written" in text
    assert html.escape(error[0].split("qconvert: error: ")[1]) in text
    assert json.loads(nodes.read_text())["results"]


def test_html_report_in_headless_chromium(case_of, tmp_path: Path,  # type: ignore[no-untyped-def]
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """The page's script runs (it marks the root with the number of boxes it wired, selects the worst
    op), the sensitivity table is drawn; the screenshot is far from blank."""
    import html_report

    case = case_of("attention")
    html_report.browser()
    rc, out, _, page, _, captured = _tune_html(case, "30", tmp_path, capsys)
    assert rc == 0, captured.err
    dom = html_report.chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-qc-ready="{len(html_report.litert_ops(out))}"' in dom.stdout, dom.stdout[:300]
    assert re.search(r'<tr data-i="\d+"[^>]*\bsel\b', dom.stdout), dom.stdout[:300]  # the worst op selected
    assert "<td>SNR op alone</td>" in dom.stdout  # ... and its side panel drawn
    png = tmp_path / "tune.png"
    shot = html_report.chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,1800", page.as_uri())
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    width, height, raw = html_report.png_pixels(png)
    assert (width, height) == (1400, 1800) and len(set(raw)) > 100


# ---------------------------------------------------------------------------
# the model as convert takes it, and what tune checks before its search


def test_tune_takes_a_keras_file_frozen_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A .keras file is frozen by TensorFlow once (not read as GraphDef bytes, not re-frozen for each
    candidate); the tuned file has the Keras model's one input and output."""
    import tf_keras

    from qconvert.frontend import tf_frozen

    rng = np.random.default_rng(0)
    model = tf_keras.Sequential([tf_keras.Input((8,)), tf_keras.layers.Dense(8, activation="tanh"),
                                 tf_keras.layers.Dense(4)])
    model.set_weights([rng.normal(size=w.shape).astype(np.float32) for w in model.get_weights()])
    path = tmp_path / "m.keras"
    model.save(path)
    np.savez(tmp_path / "cal.npz", x=rng.normal(size=(16, 8)).astype(np.float32))
    np.savez(tmp_path / "ev.npz", x=rng.normal(size=(8, 8)).astype(np.float32))
    calls = []
    real = tf_frozen.freeze
    monkeypatch.setattr(tf_frozen, "freeze", lambda p: calls.append(p) or real(p))
    out = tmp_path / "m.tflite"
    rc = main(["tune", str(path), "--calibration-data", str(tmp_path / "cal.npz"), "--eval-data",
               str(tmp_path / "ev.npz"), "--min-snr", "10", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert len(calls) == 1, calls
    sg = read_model(out.read_bytes()).subgraphs[0]
    assert len(sg.inputs) == 1 and len(sg.outputs) == 1


def test_recipe_out_holds_the_precision_options_given(case_of, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """`tune --per-tensor-weights --recipe-out R` then `convert --recipe R` writes the tuned file: the
    recipe holds the precision options the user set, not only the patterns."""
    case = case_of("massive")
    rc, out, recipe = _tune(case, "--min-snr", "30", "--per-tensor-weights")
    assert rc == 0, capsys.readouterr().err
    values = tomllib.loads(recipe.read_text())
    assert values["per_tensor_weights"] is True and set(values) == {"version", "per_tensor_weights", "keep_float",
                                                                   "int16"}
    again = case["dir"] / "again_pt.tflite"
    assert main(["convert", str(case["pb"]), "--inputs", "input", "--outputs", "Identity", "--calibration-data",
                 str(case["dir"] / "cal.npz"), "--recipe", str(recipe), "-o", str(again)]) == 0
    assert again.read_bytes() == out.read_bytes()


@pytest.mark.parametrize("where, rc_expected, message", [
    ("recipe.yaml", 2, "a recipe is a .toml or a .json file"),
    ("no_dir/recipe.toml", 1, "does not exist"),
])
def test_targets_are_checked_before_the_search(case_of, where: str, rc_expected: int, message: str,  # type: ignore[no-untyped-def]
                                               capsys: pytest.CaptureFixture[str]) -> None:
    case = case_of("massive")
    d = case["dir"]
    out = d / "early.tflite"
    out.unlink(missing_ok=True)
    rc = main(["tune", str(case["pb"]), "--inputs", "input", "--outputs", "Identity", "--calibration-data",
               str(d / "cal.npz"), "--eval-data", str(d / "eval.npz"), "--min-snr", "30", "-o", str(out),
               "--recipe-out", str(d / where)])
    err = capsys.readouterr().err
    assert rc == rc_expected and message in err, err
    assert "qconvert: tune:" not in err and len(err.strip().splitlines()) == 1, err  # no calibration, one line
    assert not out.exists()


@pytest.mark.parametrize("content, rc_expected, message", [
    (b"", 1, "cannot read --labels"),  # empty
    (b"\x93NUMPY\x01\x00v\x00{'descr': '<i8', 'fortran_order': False, 'shape': (100,), }" + b" " * 50 + b"\n"
     + b"\x00" * 40, 1, "cannot read --labels"),  # truncated .npy
    (b"PK\x03\x04truncated", 1, "--labels"),  # truncated .npz
    (None, 2, "--labels has 3 label(s), --eval-data 100 sample(s)"),  # the count
])
def test_bad_labels_are_one_line_before_calibration(case_of, tmp_path: Path, content: bytes | None,  # type: ignore[no-untyped-def]
                                                    rc_expected: int, message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    case = case_of("outliers")
    labels = tmp_path / ("labels.npz" if content and content.startswith(b"PK") else "labels.npy")
    if content is None:
        np.save(labels, np.arange(3))
    else:
        labels.write_bytes(content)
    rc, out, _ = _tune(case, "--max-drop", "3", "--labels", str(labels))
    err = capsys.readouterr().err
    assert rc == rc_expected and message in err, err
    assert "internal error" not in err and "qconvert: tune:" not in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_calibration_data_as_a_glob(case_of, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    """`--calibration-data 'dir/*.npz'` is read as convert reads it (the same samples, in file order)."""
    case = case_of("massive")
    cal = np.load(case["dir"] / "cal.npz")["input"]
    parts = tmp_path / "parts"
    parts.mkdir()
    np.savez(parts / "a.npz", input=cal[:100])
    np.savez(parts / "b.npz", input=cal[100:])
    out = tmp_path / "glob.tflite"
    rc = main(["tune", str(case["pb"]), "--inputs", "input", "--outputs", "Identity", "--calibration-data",
               str(parts / "*.npz"), "--eval-data", str(case["dir"] / "eval.npz"), "--min-snr", "30", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    rc, whole, _ = _tune(case, "--min-snr", "30")
    assert rc == 0 and out.read_bytes() == whole.read_bytes()
