"""Hybrid vision transformers and a YOLOv8 detector from keras-cv-attention-models under
post-training quantization, side by side with TensorFlow 2.21's converter (issue 35).

    python bench/kcam_zoo_ptq.py [NAME ...] [--samples 8] [--untrained] [--size N] [--repeat K] [--engine E]

Models come from ``tests/fixtures/kcam_zoo.py`` (``pretrained=None``, fixed seed, smallest input,
trained briefly, frozen). Per model:

- ``qconvert``: converts with its own calibration (``ok``) or its one-line error;
- ``TF int8``: TensorFlow's file is fully int8 (``ok``), has float tensors (``float``) or fails;
- ``exact``: given TensorFlow's recorded ranges (``oracle.use_tensorflows_statistics`` and
  ``use_tensorflows_rsqrt``), the largest output difference in LSB in LiteRT REF on the
  calibration samples (``compare_ptq``), then ``w`` when weights differ, ``u`` when op counts
  differ, ``s`` when scales or zero points differ;
- ``err ours`` / ``err TF``: each file (qconvert's own calibration, TensorFlow's) against the
  float graph on 8 held-out samples: RMS of the dequantized output error over the RMS of the
  float output;
- ``ours s`` / ``TF s`` / ``×``: conversion times (the median of ``--repeat`` runs, one by default;
  TensorFlow's includes its graph import and calibration, as qconvert's does) and their ratio.

``--size N`` builds every model at N pixels (cached apart), ``--engine litert`` calibrates
qconvert with LiteRT instead of numpy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # before TensorFlow: kcam builds on tf_keras


def main() -> None:
    import kcam_zoo

    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="*", default=list(kcam_zoo.MODELS))
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--untrained", action="store_true", help="skip the brief training")
    ap.add_argument("--size", type=int, default=None, help="input side in pixels (default: each model's smallest)")
    ap.add_argument("--repeat", type=int, default=1, help="time each conversion this many times, the median")
    ap.add_argument("--engine", default="numpy", help="qconvert's calibration engine (numpy, litert)")
    args = ap.parse_args()

    print(f"{'model':20} {'qconvert':>8} {'TF int8':>7} {'exact':>8} {'err ours':>8} {'err TF':>7} "
          f"{'ours s':>6} {'TF s':>6} {'×':>5}  note", flush=True)
    for name in args.names:
        row = measure(name, args.samples, not args.untrained, args.size, args.repeat, args.engine)
        print(f"{name:20} {row['ours']:>8} {row['tf']:>7} {row['exact']:>8} {row['err_ours']:>8} "
              f"{row['err_tf']:>7} {row['t_ours']:>6} {row['t_tf']:>6} {row['ratio']:>5}  {row['note'][:160]}",
              flush=True)


def _timed(fn, repeat: int):  # noqa: ANN001, ANN202 - the median of ``repeat`` runs, and the last result
    times, result = [], None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def measure(name: str, n_samples: int, trained: bool, size: int | None = None, repeat: int = 1,
            engine: str = "numpy") -> dict[str, str]:
    import kcam_zoo
    import oracle
    from _pytest.monkeypatch import MonkeyPatch

    from qconvert.api import convert_graph
    from qconvert.errors import ConversionError

    pb, shape = kcam_zoo.build(name, trained=trained, size=size)
    model = oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape})
    rng = np.random.default_rng(1)
    samples = {"input": rng.uniform(-1, 1, (n_samples, *shape[1:])).astype(np.float32)}
    held_out = rng.uniform(-1, 1, (8, *shape[1:])).astype(np.float32)
    row = dict.fromkeys(("ours", "tf", "exact", "err_ours", "err_tf", "t_ours", "t_tf", "ratio"), "-")
    notes = []

    try:
        t_ours, ours = _timed(lambda: convert_graph(pb, inputs=["input"], outputs=["Identity"],
                                                    calibration_data=samples, calibration_engine=engine).model, repeat)
        row["ours"] = "ok"
    except ConversionError as exc:
        t_ours, ours, row["ours"] = 0.0, None, "FAIL"
        notes.append(str(exc))
    try:
        t_tf, theirs = _timed(lambda: oracle.tf_ptq_convert(model, samples), repeat)
        row["tf"] = "float" if oracle.float_tensors(theirs) else "ok"
    except Exception as exc:  # noqa: BLE001 - TensorFlow's failures are data here
        t_tf, theirs, row["tf"] = 0.0, None, "FAIL"
        notes.append(f"TF: {str(exc).splitlines()[0][:100]}")
    row["t_ours"], row["t_tf"] = f"{t_ours:.2f}", f"{t_tf:.2f}"
    if ours is not None and theirs is not None:
        row["ratio"] = f"{t_tf / t_ours:.1f}"
    if ours is not None or theirs is not None:
        errors = _errors(pb, {"ours": ours, "tf": theirs}, held_out)
        row["err_ours"], row["err_tf"] = (f"{errors[k]:.4f}" if k in errors else "-" for k in ("ours", "tf"))
    if theirs is not None:
        mp = MonkeyPatch()
        try:
            stats, calibrated = oracle.tf_calibration_statistics(model, samples)
            oracle.use_tensorflows_rsqrt(mp)
            unpaired = oracle.use_tensorflows_statistics(mp, stats, calibrated, samples)
            given = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
            rep = oracle.compare_ptq(given, theirs, samples, ["input"])
            flags = ("w" if rep.weight_diffs else "") + ("u" if rep.unpaired else "") + \
                    ("s" if rep.scale_diffs or rep.zero_point_diffs else "")
            row["exact"] = f"{rep.max_lsb}{' ' + flags if flags else ''}"
            if rep.unpaired:
                notes.append("ops: " + "; ".join(rep.unpaired))
            if unpaired:
                notes.append(f"{len(unpaired)} tensors without TF range")
        except ConversionError:
            pass  # qconvert's error is already in the notes
        finally:
            mp.undo()
    row["note"] = " | ".join(notes)
    return row


def _errors(pb: bytes, files: dict[str, bytes | None], xs: np.ndarray) -> dict[str, float]:
    """RMS error of each file's dequantized output against the float graph, over RMS of the float output."""
    import oracle
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(tf.compat.v1.GraphDef.FromString(pb), name="")
    with tf.compat.v1.Session(graph=g) as sess:
        want = np.stack([sess.run("Identity:0", {"input:0": xs[i:i + 1]}) for i in range(len(xs))]).astype(np.float64)
    out = {}
    for key, buf in files.items():
        if buf is None:
            continue
        interp = oracle._interpreter(buf)
        (i,), (o,) = interp.get_input_details(), interp.get_output_details()
        got = []
        for k in range(len(xs)):
            si, zi = i["quantization"]
            info = np.iinfo(i["dtype"]) if si else None
            q = np.clip(np.round(xs[k:k + 1] / si + zi), info.min, info.max).astype(i["dtype"]) if si else xs[k:k + 1]
            interp.set_tensor(i["index"], q)
            interp.invoke()
            so, zo = o["quantization"]
            y = interp.get_tensor(o["index"]).astype(np.float64)
            got.append((y - zo) * so if so else y)
        out[key] = float(np.sqrt(np.mean((np.stack(got) - want) ** 2)) / (np.sqrt(np.mean(want ** 2)) + 1e-12))
    return out


if __name__ == "__main__":
    main()
