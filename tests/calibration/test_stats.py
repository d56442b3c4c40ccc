"""Calibration at scale: samples read lazily, statistics that merge, worker threads, progress.

Oracles: numpy's own reading of the same files (the samples), the definition of the fixed
bins (float32 bit patterns), one run over the union of the shards (merged statistics and the
``.tflite`` bytes must equal it exactly), tracemalloc for memory, and a fake clock for the
progress lines.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from qconvert.calibration import stats as st
from qconvert.calibration.calibrate import Progress
from qconvert.calibration.data import load_samples, open_samples
from qconvert.errors import ConversionError

ROOT = Path(__file__).resolve().parents[2]


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, env=env,
                          timeout=300)


# --- samples, read lazily -------------------------------------------------------------------

def _stack(samples, batch: int) -> np.ndarray:  # type: ignore[no-untyped-def]
    return np.concatenate([f["x"] for f in samples.batches(batch)])


def test_files_directories_and_globs_read_in_batches(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.normal(size=(7, 3, 2)).astype(np.float32)
    b = rng.normal(size=(5, 3, 2)).astype(np.float64)  # converted to float32 per batch
    np.savez(tmp_path / "a.npz", x=a)
    np.savez_compressed(tmp_path / "b.npz", x=b)
    np.save(tmp_path / "c.npy", a[:2])
    one = {"x": (1, 3, 2)}
    union = np.concatenate([a, b.astype(np.float32), a[:2]])
    for batch in (1, 3, 5, 100):
        assert np.array_equal(_stack(open_samples(tmp_path, one), batch), union)
    assert np.array_equal(_stack(open_samples(str(tmp_path / "[ab].npz"), one), 4), union[:12])
    assert open_samples(tmp_path, one).count == 14
    # a draw of N samples is the same draw as before streaming: indices into the union, sorted
    pick = np.sort(np.random.default_rng(3).choice(14, size=6, replace=False))
    assert np.array_equal(load_samples(tmp_path, one, limit=6, seed=3)["x"], union[pick])
    fortran = np.asfortranarray(rng.normal(size=(4, 3, 2)).astype(np.float32))
    np.savez(tmp_path / "f.npz", x=fortran)
    assert np.array_equal(load_samples(tmp_path / "f.npz", one)["x"], fortran)


def test_a_directory_of_many_files_keeps_one_open(tmp_path: Path) -> None:
    """300 one-sample files under a limit of 128 open files: one file is open at a time."""
    resource = pytest.importorskip("resource", reason="POSIX file limits")
    x = np.arange(300 * 4, dtype=np.float32).reshape(300, 4)
    for k in range(300):
        (np.save if k % 2 else np.savez)(tmp_path / f"s{k:03d}", x[k:k + 1])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, hard))
    try:
        got = load_samples(tmp_path, {"x": (1, 4)})["x"]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert np.array_equal(got, x)


def test_bad_files_are_one_line_errors(tmp_path: Path) -> None:
    one = {"x": (1, 4)}
    with pytest.raises(ConversionError, match="matches no file"):
        open_samples(str(tmp_path / "*.npz"), one)
    np.savez(tmp_path / "ok.npz", x=np.zeros((50, 4), np.float32))
    raw = (tmp_path / "ok.npz").read_bytes()
    (tmp_path / "cut.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ConversionError, match="cut.npz"):
        load_samples(tmp_path / "cut.npz", one)
    buf = io.BytesIO()  # an array whose member is shorter than its header says
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("x.npy", raw_npy_header((50, 4)) + b"\0" * 64)
    (tmp_path / "short.npz").write_bytes(buf.getvalue())
    with pytest.raises(ConversionError, match="ends early"):
        load_samples(tmp_path / "short.npz", one)
    np.save(tmp_path / "nan.npy", np.array([[0, 1, 2, np.nan]], np.float32))
    with pytest.raises(ConversionError, match="NaN"):
        load_samples(tmp_path / "nan.npy", one)


def raw_npy_header(shape: tuple[int, ...]) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    return buf.getvalue()  # the magic string and the header


@pytest.mark.parametrize("kind", ["npy", "npz", "npz_compressed"])
def test_reading_holds_one_batch_not_the_file(tmp_path: Path, kind: str) -> None:
    """tracemalloc sees numpy's buffers: iterating 200 samples of 48 KB in batches of 4 must
    peak near one batch (4 x 48 KB), never near the file (9.8 MB)."""
    x = np.random.default_rng(1).normal(size=(200, 64, 64, 3)).astype(np.float32)
    path = tmp_path / f"x.{kind[:3]}"
    {"npy": np.save, "npz": np.savez, "npz_compressed": np.savez_compressed}[kind](path, x)
    samples = open_samples(path, {"x": (1, 64, 64, 3)})
    tracemalloc.start()
    total = 0.0
    for feed in samples.batches(4):
        total += float(feed["x"].sum(dtype=np.float64))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert total == pytest.approx(float(x.sum(dtype=np.float64)), rel=1e-9)
    assert peak < 2 << 20, f"peak {peak / 1e6:.1f} MB for a {x.nbytes / 1e6:.1f} MB file"


# --- fixed bins -----------------------------------------------------------------------------

def test_fixed_bins_are_the_float32_bit_patterns() -> None:
    values = np.array([0.0, -0.0, 1.0, 1.0 + 2 ** -8, 1.0 + 2 ** -7, -3.5, 1e-30, 3e38], np.float32)
    counts = st.histogram(values)
    assert counts.sum() == len(values)
    for v in values:
        assert counts[int(np.array([v], np.float32).view(np.uint32)[0]) >> 16] >= 1
    # 1.0 and 1 + 2^-8 share a bin (same upper 16 bits); 1 + 2^-7 is the next bin
    assert counts[0x3F80] == 2 and counts[0x3F81] == 1
    c, edges = st.histogram_bins(counts, -3.5, 3e38)
    # ascending; an outer bin may shrink to its one value (a negative bin is closed at the top: -3.5)
    assert c.sum() == len(values) and np.all(np.diff(edges) >= 0) and edges[0] == -3.5 and edges[-1] == 3e38
    assert c[0] == 1 and c[-1] == 1  # -3.5 and 3e38 alone in the outer bins
    k = int(np.searchsorted(edges, 1.0, side="right")) - 1  # positive bins are [a, b)
    assert edges[k] == 1.0 and edges[k + 1] == 1.0 + 2 ** -7 and c[k] == 2


def test_shards_merge_to_the_union_exactly() -> None:
    rng = np.random.default_rng(5)
    data = [rng.standard_t(3, size=1000).astype(np.float32) for _ in range(4)]
    parts = []
    for d in data:
        s = st.Stats("fp", ["t"], hist={})
        s.update("t", d)
        parts.append(s)
    whole = st.Stats("fp", ["t"], hist={})
    whole.update("t", np.concatenate(data))
    merged = st.Stats("fp", ["t"], hist={})
    for p in parts:
        merged.merge(p)
    assert (merged.lo, merged.hi) == (whole.lo, whole.hi)
    assert np.array_equal(merged.hist["t"], whole.hist["t"])
    with pytest.raises(ConversionError, match="another graph"):
        merged.merge(st.Stats("other", ["t"]))


# --- progress -------------------------------------------------------------------------------

class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_update_many_is_update_one_after_another() -> None:
    """Signed zeros keep the sign one reduction finds, NaN and empty tensors as ``update`` takes them."""
    rng = np.random.default_rng(3)
    f = np.float32
    samples = [[rng.normal(size=(1, 4, 4, 3)).astype(f), np.maximum(rng.normal(size=(1, 8)).astype(f), f(0)),
                np.array([[-0.0, 0.0, 0.0]], f), np.array([[0.0, -0.0]], f), np.zeros((1, 0), f),
                np.array([[1.0, np.nan, -2.0]], f), rng.normal(size=(1, 5)).astype(f)] for _ in range(3)]
    names = [f"t{k}" for k in range(7)]
    one, many = st.Stats("fp", names), st.Stats("fp", names)
    for values in samples:
        for n, v in zip(names, values):
            one.update(n, v)
        many.update_many(names, values)
    assert list(one.lo) == list(many.lo) and repr(one.lo) == repr(many.lo) and repr(one.hi) == repr(many.hi)


def test_progress_in_ci_is_one_line_per_tenth() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(out, tty=False, clock=clock)
    p(0, 500)
    for done in range(1, 501):
        clock.t += 0.02  # 50 samples/s
        p(done, 500)
    lines = out.getvalue().splitlines()
    assert len(lines) == 10
    assert lines[0] == "calibrating: 50/500 samples (10 %), 50.0 samples/s, elapsed 0:01, ETA 0:09"
    assert lines[-1].startswith("calibrating: 500/500 samples (100 %)") and lines[-1].endswith("ETA 0:00")


def test_progress_on_a_terminal_is_a_bar_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), _Clock()
    p = Progress(out, tty=True, clock=clock)
    p(0, 40)
    clock.t += 2.0
    p(10, 40)  # 5 samples/s, 30 to go: 6 s
    assert out.getvalue() == "\rcalibrating [#######.......................] 10/40 5.0 samples/s ETA 0:06 "
    clock.t += 0.05
    p(11, 40)  # within 0.1 s of the last line: not redrawn
    assert out.getvalue().count("\r") == 1
    clock.t += 6.0
    p(40, 40)
    assert out.getvalue().endswith("40/40 5.0 samples/s ETA 0:00 \n")  # 40 in 8.05 s


# --- through the converter ------------------------------------------------------------------

@pytest.fixture(scope="module")
def float_model(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    pytest.importorskip("tensorflow", reason="the float test graph is built with TensorFlow")
    import corpus

    m = corpus.build_float_graph("depthwise")
    folder = tmp_path_factory.mktemp("stats")
    (folder / "m.pb").write_bytes(m.graph_def)
    rng = np.random.default_rng(7)
    x = {k: rng.uniform(*m.input_ranges[k], size=[40, *m.shapes[k][1:]]).astype(np.float32) for k in m.inputs}
    np.savez(folder / "all.npz", **x)
    for k in range(4):
        np.savez(folder / f"shard{k}.npz", **{n: v[10 * k:10 * (k + 1)] for n, v in x.items()})
    return folder, m


@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy", "mse"])
def test_sharded_statistics_give_the_same_bytes_as_one_run(float_model, method: str) -> None:  # type: ignore[no-untyped-def]
    from qconvert.api import calibrate_graph, convert_graph

    folder, m = float_model
    kw = dict(inputs=m.inputs, outputs=m.outputs, calibration_method=method)
    one = convert_graph(folder / "m.pb", calibration_data=folder / "all.npz", **kw)
    files = []
    for k in range(4):
        s = calibrate_graph(folder / "m.pb", folder / f"shard{k}.npz", **kw)
        s.save(folder / f"{method}{k}.npz")
        files.append(folder / f"{method}{k}.npz")
    merged = convert_graph(folder / "m.pb", stats=files, **kw)
    assert merged.model == one.model
    assert merged.stats.lo == one.stats.lo and merged.stats.hi == one.stats.hi and merged.stats.samples == 40
    if method != "minmax":
        assert all(np.array_equal(merged.stats.hist[n], one.stats.hist[n]) for n in one.stats.names)


def test_the_fingerprint_is_hashed_only_when_asked_and_is_the_calibrated_graphs(  # type: ignore[no-untyped-def]
        float_model, monkeypatch: pytest.MonkeyPatch) -> None:
    """A conversion hashes no constant unless its statistics' fingerprint is asked for; asked after
    the whole pipeline, it is the fingerprint of the graph the samples ran through (the value a
    ``calibrate`` shard and ``--stats`` compute)."""
    import hashlib

    from qconvert.api import calibrate_graph, convert_graph

    folder, m = float_model
    kw = dict(inputs=m.inputs, outputs=m.outputs, calibration_data=folder / "all.npz")
    hashed = []
    real = hashlib.sha256
    monkeypatch.setattr(hashlib, "sha256", lambda *a: hashed.append(a) or real(*a))
    converted = convert_graph(folder / "m.pb", **kw)
    assert hashed == []
    assert converted.stats.fingerprint == calibrate_graph(folder / "m.pb", **kw).fingerprint
    assert len(hashed) == 2


def test_worker_threads_do_not_change_the_statistics(float_model) -> None:  # type: ignore[no-untyped-def]
    from qconvert.api import convert_graph

    folder, m = float_model
    runs = [convert_graph(folder / "m.pb", inputs=m.inputs, outputs=m.outputs, calibration_data=folder / "all.npz",
                          calibration_method="entropy", calibration_workers=w) for w in (1, 3)]
    assert runs[0].model == runs[1].model
    assert runs[0].stats.lo == runs[1].stats.lo and runs[0].stats.hi == runs[1].stats.hi
    assert all(np.array_equal(runs[0].stats.hist[n], runs[1].stats.hist[n]) for n in runs[0].stats.names)


def test_litert_engine_shards_and_threads_give_one_run(float_model) -> None:  # type: ignore[no-untyped-def]
    """``--calibration-engine litert``: each worker thread has its own interpreter (one kernel
    thread); 4 shards merged and 1 or 3 workers give the statistics and bytes of one run."""
    from qconvert.api import calibrate_graph, convert_graph

    folder, m = float_model
    kw = dict(inputs=m.inputs, outputs=m.outputs, calibration_method="entropy", calibration_engine="litert")
    runs = [convert_graph(folder / "m.pb", calibration_data=folder / "all.npz", calibration_workers=w, **kw)
            for w in (1, 3)]
    assert runs[0].model == runs[1].model
    assert runs[0].stats.lo == runs[1].stats.lo and runs[0].stats.hi == runs[1].stats.hi
    assert all(np.array_equal(runs[0].stats.hist[n], runs[1].stats.hist[n]) for n in runs[0].stats.names)
    shards = [calibrate_graph(folder / "m.pb", folder / f"shard{k}.npz", **kw) for k in range(4)]
    for k, s in enumerate(shards):
        s.save(folder / f"litert{k}.npz")
    merged = convert_graph(folder / "m.pb", stats=[folder / f"litert{k}.npz" for k in range(4)], **kw)
    assert merged.model == runs[0].model and merged.stats.samples == 40


def test_cli_calibrate_then_convert_with_several_stats(float_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder, m = float_model
    names = ["--inputs", ",".join(m.inputs), "--outputs", ",".join(m.outputs)]
    for k in range(4):
        proc = _run_cli("calibrate", str(folder / "m.pb"), *names, "--calibration-data", str(folder / f"shard{k}.npz"),
                        "--save-stats", str(tmp_path / f"s{k}.npz"))
        assert proc.returncode == 0, proc.stderr
        assert f"wrote {tmp_path / f's{k}.npz'}: min/max of" in proc.stderr and "over 10 sample(s)" in proc.stderr
    one = _run_cli(str(folder / "m.pb"), *names, "--calibration-data", str(folder / "all.npz"), "-o",
                   str(tmp_path / "one.tflite"))
    assert one.returncode == 0, one.stderr
    # several files after one --stats, and a quoted glob
    for stats in ([str(tmp_path / f"s{k}.npz") for k in range(4)], [str(tmp_path / "s*.npz")]):
        proc = _run_cli(str(folder / "m.pb"), *names, "--stats", *stats, "-o", str(tmp_path / "merged.tflite"))
        assert proc.returncode == 0, proc.stderr
        assert "on 4 statistics file(s), 40 sample(s)" in proc.stderr
        assert (tmp_path / "merged.tflite").read_bytes() == (tmp_path / "one.tflite").read_bytes()


def test_cli_refuses_statistics_it_cannot_use(float_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    folder, m = float_model
    names = ["--inputs", ",".join(m.inputs), "--outputs", ",".join(m.outputs)]
    proc = _run_cli("calibrate", str(folder / "m.pb"), *names, "--calibration-data", str(folder / "shard0.npz"),
                    "--save-stats", str(tmp_path / "s.npz"))
    assert proc.returncode == 0, proc.stderr
    # another graph: the same model cut at another output has other observed tensors
    other = _run_cli(str(folder / "m.pb"), "--inputs", ",".join(m.inputs), "--stats", str(tmp_path / "s.npz"),
                     "--input-shapes", f"{m.inputs[0]}=2,{','.join(map(str, m.shapes[m.inputs[0]][1:]))}")
    assert other.returncode == 1 and "recorded on another graph" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1 and "Traceback" not in other.stderr
    # a histogram method from min/max statistics
    hist = _run_cli(str(folder / "m.pb"), *names, "--stats", str(tmp_path / "s.npz"), "--calibration-method", "mse")
    assert hist.returncode == 1 and "needs histograms" in hist.stderr and "--histograms" in hist.stderr
    # not a statistics file, both sources, no data for calibrate
    np.savez(tmp_path / "junk.npz", a=np.zeros(3))
    junk = _run_cli(str(folder / "m.pb"), *names, "--stats", str(tmp_path / "junk.npz"))
    assert junk.returncode == 1 and "not written by --save-stats" in junk.stderr
    both = _run_cli(str(folder / "m.pb"), *names, "--stats", str(tmp_path / "s.npz"), "--calibration-data",
                    str(folder / "all.npz"))
    assert both.returncode == 2 and "not both" in both.stderr
    none = _run_cli("calibrate", str(folder / "m.pb"), "--save-stats", str(tmp_path / "t.npz"))
    assert none.returncode == 2 and "--calibration-data" in none.stderr
    assert not (tmp_path / "t.npz").exists()
    nowhere = _run_cli("calibrate", str(folder / "m.pb"), *names, "--calibration-data", str(folder / "all.npz"),
                       "--save-stats", str(tmp_path / "no" / "t.npz"))  # refused before the samples run
    assert nowhere.returncode == 1 and "does not exist" in nowhere.stderr and "calibrating" not in nowhere.stderr


def test_dask_shards_give_the_same_tflite_as_one_process(float_model, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The Dask recipe of docs/calibration.md: a LocalCluster of worker processes calibrates 4 shards at
    once (``calibrate_graph`` returns a picklable Stats), the driver merges them by
    ``convert_graph(stats=...)``. Oracle: one process over all the samples."""
    distributed = pytest.importorskip("distributed", reason="Dask is an optional extra (pip install 'qconvert[dask]')")
    from qconvert.api import calibrate_graph, convert_graph

    folder, m = float_model
    kw = dict(inputs=m.inputs, outputs=m.outputs, calibration_method="percentile", calibration_workers=1)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        futures = client.map(lambda k: calibrate_graph(str(folder / "m.pb"), str(folder / f"shard{k}.npz"), **kw),
                             range(4))
        shards = client.gather(futures)
    paths = []
    for k, s in enumerate(shards):
        s.save(tmp_path / f"d{k}.npz")
        paths.append(tmp_path / f"d{k}.npz")
    merged = convert_graph(folder / "m.pb", stats=paths, **kw).model
    one = convert_graph(folder / "m.pb", calibration_data=folder / "all.npz", **kw).model
    assert merged == one


def test_damaged_compressed_files_are_one_line_errors(tmp_path: Path) -> None:
    """Bytes overwritten inside the deflate streams of a statistics file and of compressed
    samples: a ConversionError (one line, exit 1), never zlib's own exception."""
    rng = np.random.default_rng(2)
    s = st.Stats("fp", [f"t{k}" for k in range(8)], hist={})
    for n in s.names:
        s.update(n, rng.normal(size=5000).astype(np.float32))
    s.save(tmp_path / "s.npz")
    np.savez_compressed(tmp_path / "x.npz", x=rng.normal(size=(20, 64, 64, 3)).astype(np.float32))
    for name, read in (("s.npz", lambda p: st.Stats.load(p)),
                       ("x.npz", lambda p: load_samples(p, {"x": (1, 64, 64, 3)}))):
        raw = (tmp_path / name).read_bytes()
        for step in range(1, 40):  # 39 places; some give a bad CRC, one at least a broken deflate stream
            off = len(raw) * step // 40
            bad = tmp_path / f"bad_{name}"
            bad.write_bytes(raw[:off] + b"\x55" * 64 + raw[off + 64:])
            with pytest.raises(ConversionError):
                read(bad)
