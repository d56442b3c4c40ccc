"""Calibration at scale: qconvert's calibrate+convert against TensorFlow's
``representative_dataset`` conversion of the same float graph and samples, side by side.

    python bench/calibration_speed.py [--samples 500] [--large 5000] [--repeats 3] [--size 224]

The model is keras.applications MobileNetV2 (alpha 1.0, ``--size`` pixels, include_top=False with
average pooling), trained briefly by ``tests/fixtures/keras_apps.py`` (a few SGD steps, BatchNorm
statistics from data) so that its activations keep a realistic scale: with random weights they
collapse and the comparison measures nothing. Samples are uniform in [-1, 1] from a fixed seed,
written once as one ``.npy`` of ``--large`` samples; the first ``--samples`` of them are a second
file. Both tools read the files lazily (TensorFlow's generator yields from a memory map), so the
memory figures are the tools', not the data's.

Each command runs as its own process (imports count), ``--repeats`` times after one warm-up;
printed: medians of wall time, ms per sample, peak RSS (``ru_maxrss`` of the child), the ratios
TF/qconvert, and qconvert's peak RSS at ``--large`` samples against ``--samples`` (one run each).
Both calibration engines run: ``numpy`` (the default: qconvert's kernels) and ``litert``
(``--calibration-engine litert``: LiteRT's XNNPACK kernels).
Also checked: ``qconvert calibrate`` on 4 shards merged with ``--stats`` writes the same bytes as
one run. The machines are shared and noisy: quote medians and ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
from convert_time import child_env, measure  # noqa: E402

TF_SCRIPT = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
pb, data, out, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
x = np.load(data, mmap_mode="r")
c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(pb, ["input"], ["Identity"], {"input": [1, size, size, 3]})
c.optimizations = [tf.lite.Optimize.DEFAULT]
c.representative_dataset = lambda: ([np.asarray(x[i:i + 1])] for i in range(len(x)))
c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
c.inference_input_type = c.inference_output_type = tf.int8
open(out, "wb").write(c.convert())
"""


def write_uniform_images(path: Path, count: int, size: int, seed: int = 0) -> None:
    """``count`` images of uniform noise in [-1, 1] (size x size x 3, float32) into an ``.npy`` written
    250 at a time through a memory map (the benchmarks' samples, never all in memory)."""
    rng = np.random.default_rng(seed)
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(count, size, size, 3))
    for start in range(0, count, 250):
        stop = min(count, start + 250)
        x[start:stop] = rng.uniform(-1, 1, (stop - start, size, size, 3)).astype(np.float32)
    x.flush()
    del x


def build(folder: Path, size: int, large: int, samples: int) -> tuple[Path, Path, Path]:
    import keras_apps

    pb = folder / "mobilenet_v2.pb"
    if not pb.exists():
        graph_def, _ = keras_apps.build("MobileNetV2", size)
        pb.write_bytes(graph_def)
    big = folder / f"x{large}.npy"
    if not big.exists():
        write_uniform_images(big, large, size)
    small = folder / f"x{samples}.npy"
    if not small.exists():
        np.save(small, np.load(big, mmap_mode="r")[:samples])
    return pb, small, big


def median(cmd: list[str], repeats: int) -> tuple[float, float]:
    measure(cmd)  # warm-up: disk cache, bytecode
    runs = [measure(cmd) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def ours(pb: Path, data: Path, out: Path, engine: str = "numpy") -> list[str]:
    return [sys.executable, "-m", "qconvert", str(pb), "--calibration-data", str(data), "-o", str(out),
            "--calibration-engine", engine]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=500)
    ap.add_argument("--large", type=int, default=5000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--folder", help="keep the model and samples here between runs (default: a temporary folder)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        pb, small, big = build(folder, args.size, args.large, args.samples)
        n = args.samples
        print(f"MobileNetV2 alpha 1.0 {args.size}x{args.size}, {n} samples; medians of {args.repeats} runs, "
              f"whole process, {os.cpu_count()} CPUs", flush=True)
        q_s, q_mb = median(ours(pb, small, folder / "q.tflite"), args.repeats)
        r_s, r_mb = median(ours(pb, small, folder / "q_litert.tflite", "litert"), args.repeats)
        t_s, t_mb = median([sys.executable, "-c", TF_SCRIPT, str(pb), str(small), str(folder / "t.tflite"),
                            str(args.size)], args.repeats)
        print(f"{'':20} {'seconds':>8} {'ms/sample':>10} {'peak MB':>8}")
        print(f"{'qconvert (numpy)':20} {q_s:8.2f} {1e3 * q_s / n:10.1f} {q_mb:8.0f}")
        print(f"{'qconvert (litert)':20} {r_s:8.2f} {1e3 * r_s / n:10.1f} {r_mb:8.0f}")
        print(f"{'TensorFlow':20} {t_s:8.2f} {1e3 * t_s / n:10.1f} {t_mb:8.0f}")
        print(f"speed-up: numpy engine {t_s / q_s:.2f}x, litert engine {t_s / r_s:.2f}x; memory "
              f"{q_mb / t_mb:.2f} and {r_mb / t_mb:.2f} of TensorFlow's", flush=True)

        for engine, peak in (("numpy", q_mb), ("litert", r_mb)):
            l_s, l_mb = measure(ours(pb, big, folder / f"q_large_{engine}.tflite", engine))
            print(f"qconvert ({engine}) at {args.large} samples: {l_s:.1f} s ({1e3 * l_s / args.large:.1f} "
                  f"ms/sample), peak {l_mb:.0f} MB = {l_mb / peak:.3f} x the peak at {n}", flush=True)

        shards = []
        x = np.load(small, mmap_mode="r")
        for k, part in enumerate(np.array_split(np.arange(n), 4)):
            np.save(folder / f"shard{k}.npy", x[part[0]:part[-1] + 1])
            stats = folder / f"s{k}.npz"
            subprocess.run([sys.executable, "-m", "qconvert", "calibrate", str(pb), "--calibration-data",
                            str(folder / f"shard{k}.npy"), "--save-stats", str(stats)],
                           check=True, capture_output=True, env=child_env())
            shards.append(str(stats))
        subprocess.run([sys.executable, "-m", "qconvert", str(pb), "--stats", *shards, "-o",
                        str(folder / "merged.tflite")], check=True, capture_output=True, env=child_env())
        same = (folder / "merged.tflite").read_bytes() == (folder / "q.tflite").read_bytes()
        print(f"4 shards calibrated apart and merged: {'the same bytes' if same else 'DIFFERENT bytes'} "
              f"as one run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
