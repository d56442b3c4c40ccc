"""``qconvert compare``: per-layer error of the int8 model against the float graph.

Oracles: TensorFlow running the float twin of a corpus model (same weights, no FakeQuant)
for the reference values, LiteRT's reference kernels for the int8 outputs, and the SNR
formula written out here. A deliberately badly ranged model must rank its bad layer worst.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="the models and the float oracle are built with TensorFlow")
import corpus  # noqa: E402

from qconvert.api import convert_bytes  # noqa: E402
from qconvert.errors import ConversionError  # noqa: E402
from qconvert.tools.compare import compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NAME = "small_classifier"


def _files(tmp: Path, m: corpus.CorpusModel) -> tuple[Path, Path, Path]:
    pb, tfl, data = tmp / f"{m.name}.pb", tmp / f"{m.name}.tflite", tmp / "x.npz"
    pb.write_bytes(m.graph_def)
    tfl.write_bytes(convert_bytes(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs))
    x = np.random.default_rng(7).uniform(-1, 1, (32, *m.shapes["input"][1:])).astype(np.float32)
    np.savez(data, input=x)
    return pb, tfl, data


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return _files(tmp_path_factory.mktemp("good"), corpus.build_model(NAME))


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    seed, fn = corpus._BUILDERS[NAME]
    ranges = corpus._calibrate(__import__("tensorflow"), seed, fn)
    lo, hi = ranges["dw1"]
    m = corpus.build_qat_graph("bad_dw1", seed, fn, override={"dw1": (lo, hi / 10)})  # clips most of dw1
    return _files(tmp_path_factory.mktemp("bad"), m)


def _snr(f: np.ndarray, q: np.ndarray) -> float:
    f, q = f.astype(np.float64), q.astype(np.float64)
    return 10 * math.log10(float((f * f).sum()) / float(((f - q) ** 2).sum()))


def test_output_snr_matches_tensorflow_float_and_litert_int8(good: tuple[Path, Path, Path]) -> None:
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    pb, tfl, data = good
    x = np.load(data)["input"]
    twin = corpus.build_float_graph(NAME)  # same weights, no FakeQuant: TensorFlow's float answer
    gd = tf.compat.v1.GraphDef.FromString(twin.graph_def)
    with tf.Graph().as_default() as g:
        tf.graph_util.import_graph_def(gd, name="")
        with tf.compat.v1.Session(graph=g) as sess:
            f = np.concatenate([sess.run("output:0", {"input:0": x[k:k + 1]}) for k in range(len(x))])
    it = Interpreter(model_path=str(tfl), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    i, o = it.get_input_details()[0], it.get_output_details()[0]
    (s_in, z_in), (s_out, z_out) = i["quantization"], o["quantization"]
    q = []
    for k in range(len(x)):
        v = x[k:k + 1] / np.float32(s_in)
        it.set_tensor(i["index"], np.clip(np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5)) + z_in,
                                          -128, 127).astype(np.int8))
        it.invoke()
        q.append((it.get_tensor(o["index"]).astype(np.float64) - z_out) * s_out)
    expected = _snr(f, np.concatenate(q))

    report = compare(pb, tfl, data).as_dict()
    out = [r for r in report["tensors"] if r["tensor"] == "output"]
    assert len(out) == 1
    # same int8 values (run equals LiteRT); the float references differ in summation order (0.012 dB)
    assert abs(out[0]["snr_db"] - expected) < 0.05, (out[0]["snr_db"], expected)
    assert all(isinstance(r["snr_db"], float) and r["snr_db"] > 15 for r in report["tensors"]), report["tensors"]
    assert all(0.97 < r["cosine"] <= 1.0 + 1e-12 for r in report["tensors"])
    assert report["samples"] == 32 and not report["unmapped"]


def test_the_badly_ranged_layer_ranks_worst(good: tuple[Path, Path, Path], bad: tuple[Path, Path, Path]) -> None:
    g, b = compare(*good), compare(*bad)
    worst = b.worst(1)[0]
    assert worst.op == "DEPTHWISE_CONV_2D", [(r.op, r.local.snr_db()) for r in b.rows]
    dw_good = next(r for r in g.rows if r.op == "DEPTHWISE_CONV_2D")
    assert worst.local.snr_db() < dw_good.local.snr_db() - 10
    assert g.worst(1)[0].op != "DEPTHWISE_CONV_2D"


def qconvert(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, cwd=ROOT)


def test_cli_table_json_plot_and_gate(bad: tuple[Path, Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot needs matplotlib")
    pb, tfl, data = bad
    png = tmp_path / "report.png"
    r = qconvert("compare", str(pb), str(tfl), "--data", str(data), "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "DEPTHWISE_CONV_2D" in r.stdout and "<< worst" in r.stdout and "worst layers" in r.stdout
    head = png.read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    r = qconvert("compare", str(pb), str(tfl), "--data", str(data), "--json", "--samples", "4")
    doc = json.loads(r.stdout)
    assert doc["samples"] == 4 and doc["worst"][0] == next(t["tensor"] for t in doc["tensors"]
                                                            if t["op"] == "DEPTHWISE_CONV_2D")
    assert {"snr_db", "cosine", "max_abs_error", "mean_error_lsb", "local_snr_db"} <= set(doc["tensors"][0])
    r = qconvert("compare", str(pb), str(tfl), "--data", str(data), "--fail-below-snr", "12")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "below 12 dB" in r.stderr, r.stderr
    r = qconvert("compare", str(pb), str(tfl), "--data", str(data), "--fail-below-snr", "-50")
    assert r.returncode == 0, r.stderr


def test_cli_errors(good: tuple[Path, Path, Path], tmp_path: Path) -> None:
    pb, tfl, data = good
    np.savez(tmp_path / "wrong.npz", other=np.zeros((2, 3), np.float32), more=np.zeros(2, np.float32))
    for args in (["compare", str(pb), str(tfl), "--data", str(tmp_path / "wrong.npz")],
                 ["compare", str(tfl), str(tfl), "--data", str(data)],
                 ["compare", str(pb), str(pb), "--data", str(data)]):
        r = qconvert(*args)
        assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, (args, r.stderr)
    assert qconvert("compare", str(pb), str(tfl)).returncode == 2


def test_fake_quant_reference_measures_the_conversion_alone(good: tuple[Path, Path, Path]) -> None:
    """Against the training graph (FakeQuants kept) the int8 convolutions are off by at most
    2 LSB (accumulation order and rounding), far closer than against the pure float graph."""
    fq = {r["tensor"]: r for r in compare(*good, fake_quant=True).as_dict()["tensors"]}
    pure = {r["tensor"]: r for r in compare(*good).as_dict()["tensors"]}
    convs = [t for t, r in fq.items() if r["op"] in ("CONV_2D", "DEPTHWISE_CONV_2D")]
    assert len(convs) == 3
    for t in convs:
        assert fq[t]["max_error_lsb"] <= 2.0 + 1e-6 and fq[t]["mean_abs_error_lsb"] < 0.05, fq[t]
        assert fq[t]["snr_db"] > pure[t]["snr_db"] + 5, (fq[t]["snr_db"], pure[t]["snr_db"])


def test_tensorflows_own_file_is_compared_through_the_scales(good: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """A file without qconvert metadata runs in the integer executor with parameters from its
    scales; TensorFlow's fused tensor names ('Relu;BiasAdd;Conv2D;...') still map to the float graph."""
    import oracle

    pb, tfl, data = good
    theirs = tmp_path / "tf.tflite"
    theirs.write_bytes(oracle.tf_convert(corpus.build_model(NAME)))
    a, b = compare(pb, tfl, data).as_dict(), compare(pb, theirs, data).as_dict()
    assert a["engine"] == "integer executor" and b["engine"].startswith("integer executor; parameters from")
    assert [r["op"] for r in b["tensors"]] == [r["op"] for r in a["tensors"]] and not b["unmapped"]
    for x, y in zip(a["tensors"], b["tensors"]):
        assert abs(x["snr_db"] - y["snr_db"]) < 0.5, (x, y)


def test_runtime_tflm_runs_the_int8_side_with_tflite_micros_arithmetic(good: tuple[Path, Path, Path]) -> None:
    """--runtime tflm: the same table, the int8 side by TFLite Micro's FULLY_CONNECTED; up to the
    first FULLY_CONNECTED the figures are the default's, and the engine says which arithmetic ran."""
    pb, tfl, data = good
    a, b = compare(pb, tfl, data).as_dict(), compare(pb, tfl, data, runtime="tflm").as_dict()
    assert b["engine"] == "integer executor, tflm arithmetic"
    assert [r["op"] for r in a["tensors"]] == [r["op"] for r in b["tensors"]]
    for x, y in zip(a["tensors"], b["tensors"]):
        if x["op"] == "FULLY_CONNECTED":
            break
        assert x["snr_db"] == y["snr_db"], (x, y)


def test_samples_are_read_one_at_a_time(good: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """compare streams its data as calibration does: one sample at a time, never every sample at once."""
    from qconvert.calibration import data as samples_module

    sizes: list[int] = []
    batches = samples_module.Samples.batches

    def spy(self, size):  # type: ignore[no-untyped-def]
        sizes.append(size)
        return batches(self, size)

    monkeypatch.setattr(samples_module.Samples, "batches", spy)
    monkeypatch.setattr(samples_module.Samples, "read_all", lambda self: pytest.fail("read every sample at once"))
    after = compare(*good, samples=5).as_dict()
    assert sizes == [1] and after["samples"] == 5 and after["tensors"]


def test_a_tensor_whose_leading_dimension_is_not_the_batch(tmp_path: Path) -> None:
    """Windows and heads put more than 1 in a tensor's first dimension at batch 1 (TinyViT's
    [16,1,1,128]): compare measures the whole tensor (it used to take its first row and fail to
    reshape it, so no report at all for such models). Oracle: TensorFlow runs the float graph;
    the int8 side is LiteRT REF's, dequantized; the SNR formula is written out here."""
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (1, 1, 4, 8)).astype(np.float32)
    with tf.Graph().as_default() as g:
        x = tf.compat.v1.placeholder(tf.float32, (1, 4, 16), name="input")
        windows = tf.reshape(x, (4, 1, 4, 4), name="windows")  # 4 windows at batch 1
        y = tf.nn.relu(tf.nn.conv2d(windows, tf.constant(w), 1, "VALID"), name="dense")  # [4, 1, 4, 8]
        tf.reshape(y, (1, 128), name="output")
        gd = g.as_graph_def()
    samples = rng.uniform(-1, 1, (8, 1, 4, 16)).astype(np.float32)
    pb, tfl, data = tmp_path / "m.pb", tmp_path / "m.tflite", tmp_path / "x.npz"
    pb.write_bytes(gd.SerializeToString())
    np.savez(data, input=samples[:, 0])
    r = subprocess.run([sys.executable, "-m", "qconvert", "convert", str(pb), "--calibration-data", str(data),
                        "-o", str(tfl)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    report = compare(pb, tfl, data)
    rows = {r.tensor: r for r in report.rows}
    dense = next(r for r in report.rows if r.shape == (4, 1, 4, 8))
    assert len(rows) >= 2 and dense.e2e.count == 8 * 128

    with tf.compat.v1.Session(graph=g) as sess:
        f = np.stack([sess.run("dense:0", {"input:0": s}) for s in samples])
    it = Interpreter(model_path=str(tfl), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    i = it.get_input_details()[0]
    t = next(d for d in it.get_tensor_details() if d["name"] == dense.tensor)
    (si, zi), (st, zt) = i["quantization"], t["quantization"]
    q = []
    for s in samples:
        v = s / np.float32(si)
        it.set_tensor(i["index"], np.clip(np.where(v >= 0, np.floor(v + 0.5), np.ceil(v - 0.5)) + zi,
                                          -128, 127).astype(np.int8))
        it.invoke()
        q.append((it.get_tensor(t["index"]).astype(np.float64) - zt) * st)
    q = np.stack(q)
    expected = 10 * math.log10(float((f.astype(np.float64) ** 2).sum()) / float(((f - q) ** 2).sum()))
    assert abs(dense.e2e.snr_db() - expected) < 0.05, (dense.e2e.snr_db(), expected)


def test_data_given_as_a_glob_is_the_same_samples(good: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """--data takes what --calibration-data takes: the samples of one .npz split over two files and
    named by a glob give the report of the one file (it was refused as a path that does not exist)."""
    pb, tfl, data = good
    x = np.load(data)["input"]
    np.savez(tmp_path / "part0.npz", input=x[:20])
    np.savez(tmp_path / "part1.npz", input=x[20:])
    whole = compare(pb, tfl, data).as_dict()
    split = compare(pb, tfl, str(tmp_path / "part*.npz")).as_dict()
    assert split["samples"] == whole["samples"] == len(x)
    assert [(t["tensor"], t["snr_db"]) for t in split["tensors"]] == [(t["tensor"], t["snr_db"]) for t in whole["tensors"]]
    with pytest.raises(ConversionError, match=r"^--data '.*none\*\.npz' matches no file$"):  # its own flag's name
        compare(pb, tfl, str(tmp_path / "none*.npz"))
    (tmp_path / "bad0.npz").write_bytes(b"not a zip")
    with pytest.raises(ConversionError, match=r"^--data '.*bad0\.npz' is not a \.npy or \.npz file$"):
        compare(pb, tfl, str(tmp_path / "bad*.npz"))


def test_data_of_images_is_refused_in_one_line(good: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """compare has no --mean/--std/--image-size: a folder of pictures (which --calibration-data takes) would be
    compared as raw pixels, with wrong SNRs and no error; it is refused, naming the fix."""
    image = pytest.importorskip("PIL.Image", reason="pillow writes the pictures")
    pb, tfl, data = good
    shape = np.load(data)["input"].shape[1:]
    for k in range(2):
        pixels = np.random.default_rng(k).integers(0, 256, shape[:2], dtype=np.uint8)
        image.fromarray(pixels).save(tmp_path / f"{k}.png")
    with pytest.raises(ConversionError, match="holds images.*--mean/--std"):
        compare(pb, tfl, str(tmp_path))
