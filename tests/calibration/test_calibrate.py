"""Post-training calibration of float graphs (``--calibration-data``), against TensorFlow.

The oracle: TensorFlow's full-integer post-training quantization of the same float
frozen graph with the same samples as representative data (tests/fixtures/oracle.py
``tf_ptq_convert``). Per model: every quantized activation's zero point equal and
scale within 1e-5 relative (the calibrated min/max come from a different float
kernel: TFLite's vs our numpy), int8 weights identical, and int8 outputs in LiteRT
within 1 LSB on at least 99.9% of elements (in practice: all equal, see the table
printed with ``-s``).

Hand-derived unit tests cover the parameter formula, the rules for which ranges are
kept, the in-place rule, the data files and the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qconvert import quant as qm
from qconvert.errors import ConversionError
from qconvert.ir import Graph, Node, Tensor

ROOT = Path(__file__).resolve().parents[2]

# Corpus models whose float twins TF quantizes op for op as we do. pad_squeeze_reshape:
# TF folds the Pad into a SAME convolution and drops the Squeeze in float graphs; we
# keep both (same parameters, checked on outputs only).
PTQ_MODELS = ["conv_relu_perchannel", "classifier_cli_input", "depthwise", "residual", "two_inputs_arith",
              "concat_branches", "pad_squeeze_reshape", "sigmoid_tanh_two_outputs", "small_classifier",
              "mean_keepdims_mul", "requantize"]
N_SAMPLES = 32


def _samples(m, seed: int = 0) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(*m.input_ranges[k], size=[N_SAMPLES, *m.shapes[k][1:]]).astype(np.float32)
            for k in m.inputs}


@pytest.mark.parametrize("name", PTQ_MODELS)
def test_calibration_matches_tensorflow_ptq(name: str) -> None:
    """Both engines: numpy (qconvert's kernels) and litert (LiteRT's XNNPACK kernels, whose
    float sums are not TFLite's builtin ones: same bounds, not the depthwise scale's equality)."""
    pytest.importorskip("tensorflow", reason="TensorFlow's post-training quantizer is the oracle")
    import corpus
    import oracle

    from qconvert.api import convert_graph

    m = corpus.build_float_graph(name)
    samples = _samples(m)
    theirs = oracle.tf_ptq_convert(m, samples)
    for engine in ("numpy", "litert"):
        ours = convert_graph(m.graph_def, inputs=m.inputs, outputs=m.outputs, calibration_data=samples,
                             calibration_engine=engine).model
        report = oracle.compare_ptq(ours, theirs, samples, m.inputs)
        print(f"\n{name} ({engine}): {report}")
        assert report.tensors > 0
        assert report.zero_point_diffs == []
        assert report.scale_diffs == []
        assert report.weight_diffs == []
        assert report.within_1_fraction >= 0.999
        if name == "depthwise" and engine == "numpy":  # its depthwise kernel sums as TFLite's: the very scales
            assert report.max_rel_scale == 0.0
        if name != "pad_squeeze_reshape":
            assert report.unpaired == []
        assert oracle.float_tensors(ours) == []


# --- the parameter formula, by hand ---------------------------------------------------

def test_calibrated_params_include_zero_and_use_float32_scale() -> None:
    p = qm.calibrated_range_params(0.5, 6.0)  # widened to [0, 6]
    assert p.zero_point == (-128,)
    assert p.scale[0] == float(np.float32(6.0) / np.float32(255.0))
    q = qm.calibrated_range_params(-1.0, 1.0)
    # scale 2/255 in float32; zero point -128 - (-1)/scale = -0.5 -> rounds away to -1
    assert q.scale[0] == float(np.float32(2.0) / np.float32(255.0)) and q.zero_point == (-1,)


def test_calibrated_params_widen_a_tiny_range() -> None:
    p = qm.calibrated_range_params(0.0, 0.0)  # widened to [-1e-6, 1e-6] (TensorRangeSanityCheck)
    scale = np.float32(np.float32(1e-6) - np.float32(-1e-6)) / np.float32(255)
    assert p.scale[0] == float(scale)
    # zero point: float32(-128 + 1e-6 / scale), about -0.5, rounded half away from zero
    zp = float(np.float32(-128.0 + 1e-6 / float(scale)))
    assert abs(zp + 0.5) < 1e-3 and p.zero_point == (qm.round_half_away(zp),)


def test_legacy_bias_scale_is_a_float32_product() -> None:
    x = qm.calibrated_range_params(-1.0, 3.0)
    w = qm.QuantParams(scale=(0.0123456789, 0.02), zero_point=(0, 0), axis=0, qmin=-127, qmax=127)
    b = qm.bias_params(x, w, legacy_float_scale=True)
    assert b.scale == tuple(float(np.float32(x.scale[0]) * np.float32(s)) for s in w.scale)
    assert qm.bias_params(x, w).scale == tuple(x.scale[0] * s for s in w.scale)


# --- which ranges are kept -----------------------------------------------------------

def _graph(*nodes: tuple[str, list[str], str], inputs=("x",), shape=(1, 4, 4, 2)) -> Graph:  # type: ignore[no-untyped-def]
    g = Graph()
    for name in inputs:
        g.add_tensor(Tensor(name, "float32", shape))
    g.inputs = list(inputs)
    for op, ins, out in nodes:
        g.add_tensor(Tensor(out, "float32", shape))
        g.add_node(Node(op, ins, [out], {"fused_activation_function": "NONE"}, name=out))
    g.outputs = [nodes[-1][2]]
    return g


def test_same_scale_results_take_their_operand_range_and_fixed_outputs_drop_theirs() -> None:
    from qconvert.calibration.calibrate import drop_redundant

    g = _graph(("RELU", ["x"], "a"), ("MAX_POOL_2D", ["a"], "p"), ("RESHAPE", ["p"], "r"), ("LOGISTIC", ["r"], "s"))
    stats = {n: (-1.0, 1.0) for n in ("x", "a", "p", "r", "s")}
    assert set(drop_redundant(g, stats)) == {"x", "a"}


def test_concatenation_keeps_its_result_range_and_drops_its_operands() -> None:
    from qconvert.calibration.calibrate import drop_redundant

    g = _graph(("RELU", ["x"], "a"), ("RELU6", ["x"], "b"), ("CONCATENATION", ["a", "b"], "c"))
    stats = {n: (0.0, 1.0) for n in ("x", "a", "b", "c")}
    assert set(drop_redundant(g, stats)) == {"x", "c"}


def test_an_in_place_add_widens_its_operand_range() -> None:
    from qconvert.calibration.calibrate import _in_place_unions

    # y = relu(x) read twice (not shareable); z = y2 + y (y2 read once: shared); out = z * 2
    g = _graph(("RELU", ["x"], "y"), ("RELU6", ["y"], "y2"), ("ADD", ["y2", "y"], "z"), ("MUL", ["z", "y"], "out"))
    lo = {"x": -1.0, "y": 0.0, "y2": 0.0, "z": 0.0, "out": 0.0}
    hi = {"x": 1.0, "y": 1.0, "y2": 1.0, "z": 2.0, "out": 4.0}
    _in_place_unions(g, lo, hi)
    assert hi["y2"] == 2.0  # ADD wrote z into y2's buffer
    assert hi["y"] == 1.0  # read by three nodes
    assert hi["z"] == 2.0  # MUL's output is the graph output: not shared


# --- data files and the command line -------------------------------------------------

def test_load_samples_npz_npy_directory_and_limit(tmp_path: Path) -> None:
    from qconvert.calibration.data import load_samples

    a = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
    np.savez(tmp_path / "d.npz", x=a)
    np.save(tmp_path / "d.npy", a)
    one = {"x": (1, 3)}
    assert np.array_equal(load_samples(tmp_path / "d.npz", one)["x"], a)
    assert np.array_equal(load_samples(tmp_path / "d.npy", one)["x"], a)
    folder = tmp_path / "dir"
    folder.mkdir()
    np.save(folder / "a.npy", a[:2])
    np.save(folder / "b.npy", a[2])  # a single sample, shape[1:]
    assert np.array_equal(load_samples(folder, one)["x"], a[:3])
    picked = load_samples(tmp_path / "d.npz", one, limit=2, seed=3)["x"]
    assert picked.shape == (2, 3) and np.array_equal(picked, load_samples(tmp_path / "d.npz", one, limit=2, seed=3)["x"])
    with pytest.raises(ConversionError, match=r"shape \[5, 3\]; expected \[N, 4\]"):
        load_samples(tmp_path / "d.npz", {"x": (1, 4)})
    with pytest.raises(ConversionError, match="no array named 'y'"):
        load_samples(tmp_path / "d.npz", {"x": (1, 3), "y": (1, 3)})
    bad = a.copy()
    bad[0, 0] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    with pytest.raises(ConversionError, match="NaN"):
        load_samples(tmp_path / "nan.npy", one)


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.fixture(scope="module")
def float_pb(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    pytest.importorskip("tensorflow", reason="the float test graph is built with TensorFlow")
    import corpus

    m = corpus.build_float_graph("residual")
    path = tmp_path_factory.mktemp("ptq") / "residual_float.pb"
    path.write_bytes(m.graph_def)
    return path, m


def test_cli_calibrates_a_float_graph_and_litert_runs_it(float_pb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, m = float_pb
    np.savez(tmp_path / "calib.npz", **_samples(m))
    out = tmp_path / "m.tflite"
    proc = _run_cli(str(path), "--calibration-data", str(tmp_path / "calib.npz"), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "calibrated 6 tensor range(s) on 32 sample(s)" in proc.stderr
    import oracle

    assert oracle.float_tensors(out.read_bytes()) == []
    oracle.run_litert(out.read_bytes(), {"input": np.zeros(m.shapes["input"], np.int8)})


def test_cli_litert_engine_calibrates_and_names_itself(float_pb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, m = float_pb
    np.savez(tmp_path / "calib.npz", **_samples(m))
    out = tmp_path / "m.tflite"
    proc = _run_cli(str(path), "--calibration-data", str(tmp_path / "calib.npz"), "--calibration-engine", "litert",
                    "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "calibrated 6 tensor range(s) on 32 sample(s)" in proc.stderr and "litert engine" in proc.stderr
    assert "XNNPACK" not in proc.stderr  # LiteRT's own INFO line is not ours to print
    import oracle

    assert oracle.float_tensors(out.read_bytes()) == []
    bad = _run_cli(str(path), "--calibration-data", str(tmp_path / "calib.npz"), "--calibration-engine", "torch",
                   "-o", str(tmp_path / "bad.tflite"))
    assert bad.returncode == 2 and "--calibration-engine" in bad.stderr and not (tmp_path / "bad.tflite").exists()


def test_litert_engine_runs_quantize_dequantize_pairs_like_numpy(float_pb) -> None:  # type: ignore[no-untyped-def]
    """``--inputs-range`` puts a QUANTIZE → DEQUANTIZE pair after the input of the float model
    the engines run: LiteRT runs it as an int8 round trip, as the numpy executor does. Oracle:
    the numpy engine's ranges, within float32 rounding of the sums (1e-5 of each span)."""
    path, m = float_pb
    from qconvert.api import convert_graph

    runs = {e: convert_graph(path, input_ranges={"input": (-1.0, 1.0)}, calibration_data=_samples(m),
                             calibration_engine=e) for e in ("numpy", "litert")}
    lo, hi = runs["numpy"].stats.lo, runs["numpy"].stats.hi
    assert set(runs["litert"].stats.lo) == set(lo) and "input" not in lo and len(lo) == 5
    for n in lo:
        tol = 1e-5 * (hi[n] - lo[n])
        assert abs(runs["litert"].stats.lo[n] - lo[n]) <= tol and abs(runs["litert"].stats.hi[n] - hi[n]) <= tol, n


def test_litert_engine_loads_one_interpreter_per_batch_at_once(float_pb, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Each LiteRT interpreter holds its packed weights and every observed tensor (37 MB on
    MobileNetV2 224): as many load as batches run at once, the first batch's (run before the
    worker threads start) shared with them, whatever the number of batches. Oracle: the count
    of loads (the check's in ``prepare`` included; at most the workers, not one more), and the
    ranges of one worker, which loads one."""
    path, m = float_pb
    from qconvert.api import convert_graph
    from qconvert.converter import litert_engine

    real, loads = litert_engine.interpreter, []

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        loads.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(litert_engine, "interpreter", counted)
    runs = {}
    for workers in (1, 2):
        loads.clear()
        runs[workers] = convert_graph(path, calibration_data=_samples(m), calibration_engine="litert",
                                      calibration_workers=workers)
        assert 1 <= len(loads) <= workers, (workers, len(loads))  # fewer when batches never overlap
    assert runs[2].stats.lo == runs[1].stats.lo and runs[2].stats.hi == runs[1].stats.hi


def test_litert_engine_that_cannot_load_or_run_is_one_line(float_pb, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    path, m = float_pb
    from qconvert.api import convert_graph
    from qconvert.converter import litert_engine

    real = litert_engine.interpreter

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ValueError("Didn't find op for builtin opcode 'CONV_2D' version '9'")

    def fails(*args, **kwargs):  # type: ignore[no-untyped-def]
        it = real(*args, **kwargs)

        def invoke() -> None:
            raise RuntimeError("tensorflow/lite/kernels/conv.cc:351 bad input\nNode number 3 (CONV_2D) failed")

        it.invoke = invoke
        return it

    for fake, message in ((refuse, "LiteRT cannot load the float graph .*CONV_2D"),
                          (fails, "LiteRT failed to run the float graph .*conv.cc:351 bad input\\)")):
        monkeypatch.setattr(litert_engine, "interpreter", fake)
        with pytest.raises(ConversionError, match=message + ".*; use --calibration-engine numpy$"):
            convert_graph(path, calibration_data=_samples(m), calibration_engine="litert")


def test_default_engine_is_litert_and_falls_back_to_numpy_with_the_reason(float_pb, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """``--calibration-engine auto`` (the default): LiteRT where it loads the float graph; where it
    cannot, the numpy executor, and the calibration note says which ran and why; the ranges are the
    numpy engine's own then (the same file as ``--calibration-engine numpy``)."""
    path, m = float_pb
    from qconvert.api import convert_graph
    from qconvert.converter import litert_engine

    default = convert_graph(path, calibration_data=_samples(m))
    assert any(n.endswith("(minmax, litert engine)") for n in default.notes), default.notes
    assert default.model == convert_graph(path, calibration_data=_samples(m), calibration_engine="litert").model

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise ValueError("Didn't find op for builtin opcode 'CONV_2D' version '9'")

    monkeypatch.setattr(litert_engine, "interpreter", refuse)
    fell_back = convert_graph(path, calibration_data=_samples(m))
    note = next(n for n in fell_back.notes if n.startswith("calibrated "))
    assert "numpy engine: LiteRT: LiteRT cannot load the float graph" not in note  # said once
    assert "numpy engine: LiteRT cannot load the float graph (Didn't find op" in note, note
    assert fell_back.model == convert_graph(path, calibration_data=_samples(m), calibration_engine="numpy").model


def test_cli_float_graph_without_data_names_the_fix(float_pb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, _ = float_pb
    proc = _run_cli(str(path), "-o", str(tmp_path / "m.tflite"))
    assert proc.returncode == 1 and "--calibration-data" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "m.tflite").exists()


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"Relu": [1]}', "needs \\[min, max\\]"),
    ('{"no_such_tensor": [0, 1]}', "does not have"),
    ('{"Add": [2, 1]}', "min 2.0 > max 1.0"),
    ('{"input": [0, 1]}', "already has a range"),
    ('{"Conv2D_1/transpose": [0, 1]}', "is a constant"),
])
def test_cli_bad_ranges_file_is_one_line(float_pb, tmp_path: Path, content: str, message: str) -> None:  # type: ignore[no-untyped-def]
    path, _ = float_pb
    (tmp_path / "r.json").write_text(content)
    proc = _run_cli(str(path), "--ranges-file", str(tmp_path / "r.json"), "--inputs-range", "input=-1,1",
                    "-o", str(tmp_path / "m.tflite"))
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not (tmp_path / "m.tflite").exists()
    import re

    assert re.search(message, proc.stderr)


def test_ranges_file_overrides_a_calibrated_range(float_pb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, m = float_pb
    import oracle

    from qconvert.api import convert_graph

    base = convert_graph(path, calibration_data=_samples(m)).model
    over = convert_graph(path, calibration_data=_samples(m), ranges_file={"Add": [-8.0, 8.0]}).model
    want = qm.calibrated_range_params(-8.0, 8.0)
    scales = {d["name"]: d["quantization"] for d in oracle._interpreter(over).get_tensor_details()}
    assert scales["Add"] == (pytest.approx(float(np.float32(want.scale[0]))), want.zero_point[0])
    assert base != over


def test_data_for_a_fully_qat_graph_changes_nothing() -> None:
    pytest.importorskip("tensorflow", reason="the corpus graph is built with TensorFlow")
    import corpus

    from qconvert.api import convert_graph

    m = corpus.build_model("residual")
    plain = convert_graph(m.graph_def, m.input_ranges, inputs=m.inputs, outputs=m.outputs).model
    res = convert_graph(m.graph_def, m.input_ranges, inputs=m.inputs, outputs=m.outputs,
                        calibration_data=_samples(m))
    assert res.model == plain
    assert any("calibrated 0 tensor range(s)" in n for n in res.notes)


def test_batch_manifest_calibrates_a_float_graph(float_pb, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path, m = float_pb
    folder = tmp_path / "zoo"
    folder.mkdir()
    (folder / "float.pb").write_bytes(path.read_bytes())
    np.savez(folder / "calib.npz", **_samples(m))
    (folder / "zoo.toml").write_text('[defaults]\ncalibration_method = "percentile"\npercentile = 99.9\n'
                                     'calibration_engine = "litert"\n\n'
                                     '[[model]]\npath = "float.pb"\ncalibration_data = "calib.npz"\n'
                                     'calibration_samples = 16\n')
    proc = _run_cli("batch", "--manifest", str(folder / "zoo.toml"), "--jobs", "1", "--report", "-")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    (rec,) = report["models"]
    assert rec["status"] == "ok" and rec["float_ops"] == 0
    assert any("calibrated 6 tensor range(s) on 16 sample(s)" in n and "percentile, litert engine" in n
               for n in rec["notes"])
    for bad in ('calibration_method = "kl"', 'calibration_engine = "onnx"'):
        (folder / "zoo.toml").write_text(f'[[model]]\npath = "float.pb"\n{bad}\n')
        proc = _run_cli("batch", "--manifest", str(folder / "zoo.toml"))
        assert proc.returncode == 2 and bad.replace('"', "'") in proc.stderr, proc.stderr


def test_images_as_calibration_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    Image = pytest.importorskip("PIL.Image", reason="Pillow reads images")
    from qconvert.calibration.data import load_samples

    pixels = np.array([[[0, 128, 255], [10, 20, 30], [200, 100, 50]],
                       [[1, 2, 3], [4, 5, 6], [7, 8, 9]]], dtype=np.uint8)  # 2 x 3, RGB
    folder = tmp_path / "imgs"
    folder.mkdir()
    Image.fromarray(pixels, "RGB").save(folder / "a.png")
    Image.fromarray(pixels[::-1].copy(), "RGB").save(folder / "b.png")
    got = load_samples(folder, {"input": (1, 2, 3, 3)}, mean=[127.5, 127.5, 127.5], std=[127.5, 127.5, 127.5])
    assert got["input"].shape == (2, 2, 3, 3)
    np.testing.assert_allclose(got["input"][0], (pixels.astype(np.float32) - 127.5) / 127.5, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got["input"][1], (pixels[::-1].astype(np.float32) - 127.5) / 127.5, atol=1e-6)
    grey = load_samples(folder, {"input": (1, 2, 3, 1)})["input"]
    assert grey.shape == (2, 2, 3, 1) and grey.max() <= 255.0
    with pytest.raises(ConversionError, match="image input"):
        load_samples(folder, {"input": (1, 2, 3, 8)})
    with pytest.raises(ConversionError, match="--image-size 4,4 does not match"):
        load_samples(folder, {"input": (1, 2, 3, 3)}, image_size=(4, 4))
    monkeypatch.setitem(sys.modules, "PIL", None)
    with pytest.raises(ConversionError, match=r"qconvert\[images\]"):
        load_samples(folder, {"input": (1, 2, 3, 3)})


def test_executor_space_to_batch_and_back_match_tensorflow() -> None:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's ops are the oracle")
    from qconvert.ops import float_kernels as kernels

    x = np.random.default_rng(0).normal(size=(3, 5, 6, 2)).astype(np.float32)
    block, pads, crops = np.array([2, 3]), np.array([[1, 0], [0, 3]]), np.array([[1, 0], [2, 1]])
    s2b = kernels.space_to_batch_nd(None, x, block, pads)
    np.testing.assert_array_equal(s2b, tf.space_to_batch_nd(x, block, pads).numpy())
    b2s = kernels.batch_to_space_nd(None, s2b, block, crops)
    np.testing.assert_array_equal(b2s, tf.compat.v1.batch_to_space_nd(s2b, block, crops).numpy())
