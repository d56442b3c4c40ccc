"""Post-training int8 of MobileNetV2-1.0 224: qconvert against TensorFlow and the LiteRT Quantizer,
wall time and peak memory, side by side.

    python bench/ptq_speed_memory.py [--samples 100 500 1000] [--repeats 3] [--repeat-at 500]
                                     [--bench-python /work/venv-bench/bin/python] [--folder DIR]

The model: keras.applications MobileNetV2 (alpha 1.0, 224x224, tf_keras, weights=None, fixed
seed), trained a few steps by tests/fixtures/keras_apps.py so that its activations keep a
realistic scale, frozen to a ``.pb``; TensorFlow's float conversion of that ``.pb``
(``from_frozen_graph``, no optimizations) is the float ``.tflite``. Samples: uniform in [-1, 1]
(fixed seed) in one ``.npy`` per count, which every tool reads lazily (a memory map), so the
memory figures are the tools', not the data's.

Contestants, each its own process (imports count), peak RSS from the child's ``ru_maxrss``:

- TensorFlow 2.21: ``from_frozen_graph`` + ``representative_dataset`` (full int8, int8 I/O);
- the LiteRT Quantizer (``litert-quantizer``, Python API): ``recipe.static_wi8_ai8()`` from the
  float ``.tflite`` (it needs ``--bench-python``: an environment with it installed; skipped with a
  line otherwise);
- qconvert from the ``.pb`` and from the float ``.tflite``, with ``--calibration-engine numpy`` and
  ``litert``.

Wall time is the median of ``--repeats`` runs (after one warm-up) at ``--repeat-at`` samples,
one run at the other counts. Printed: a table per count, ratios against TensorFlow and against
the LiteRT Quantizer, and each tool's peak memory at every count against its peak at the first
(flat in the sample count: 1.00).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))
from convert_time import child_env, measure

SIZE = 224

TF_PTQ = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import numpy as np
import tensorflow as tf
pb, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.load(data, mmap_mode="r")
c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(pb, ["input"], ["Identity"], {"input": [1, 224, 224, 3]})
c.optimizations = [tf.lite.Optimize.DEFAULT]
c.representative_dataset = lambda: ([np.asarray(x[i:i + 1])] for i in range(len(x)))
c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
c.inference_input_type = c.inference_output_type = tf.int8
open(out, "wb").write(c.convert())
"""

TF_FLOAT = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(sys.argv[1], ["input"], ["Identity"], {"input": [1, 224, 224, 3]})
open(sys.argv[2], "wb").write(c.convert())
"""

LITERT_QUANTIZER = """
import sys
sys.path.insert(0, sys.argv[4])
import numpy as np
from litert_quantizer import quantizer, recipe
from producers import with_signature
flt, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
x = np.load(data, mmap_mode="r")
signed = with_signature(open(flt, "rb").read())

class Samples:  # read lazily, one sample at a time, as TensorFlow's generator does
    def __len__(self):
        return len(x)
    def __iter__(self):
        return ({"input": np.asarray(x[i:i + 1])} for i in range(len(x)))

q = quantizer.Quantizer(bytearray(signed))
q.load_quantization_recipe(recipe.static_wi8_ai8())
result = q.calibrate({"serving_default": Samples()})
open(out, "wb").write(bytes(q.quantize(result, enable_progress_report=False).quantized_model))
"""


def build(folder: Path, counts: list[int]) -> tuple[Path, Path, dict[int, Path]]:
    import keras_apps

    pb = folder / "mobilenet_v2_224.pb"
    if not pb.exists():
        graph_def, _ = keras_apps.build("MobileNetV2", SIZE)
        pb.write_bytes(graph_def)
    flt = folder / "mobilenet_v2_224_float.tflite"
    if not flt.exists():
        subprocess.run([sys.executable, "-c", TF_FLOAT, str(pb), str(flt)], check=True, env=child_env())
    largest = max(counts)
    big = folder / f"x{largest}.npy"
    if not big.exists():
        from calibration_speed import write_uniform_images

        write_uniform_images(big, largest, SIZE)
    data = {largest: big}
    for n in counts:
        if n != largest:
            data[n] = folder / f"x{n}.npy"
            if not data[n].exists():
                np.save(data[n], np.load(big, mmap_mode="r")[:n])
    return pb, flt, data


def commands(pb: Path, flt: Path, data: Path, folder: Path, bench_python: str | None) -> dict[str, list[str]]:
    q = [sys.executable, "-m", "qconvert"]
    out = {
        "TensorFlow (.pb, representative_dataset)": [sys.executable, "-c", TF_PTQ, str(pb), str(data),
                                                    str(folder / "tf.tflite")],
    }
    if bench_python:
        out["LiteRT Quantizer (.tflite, static_wi8_ai8)"] = [bench_python, "-c", LITERT_QUANTIZER, str(flt), str(data),
                                                              str(folder / "lq.tflite"), str(HERE)]
    for src, path in ((".pb", pb), (".tflite", flt)):
        for engine in ("numpy", "litert"):
            out[f"qconvert ({src}, {engine})"] = [*q, str(path), "--calibration-data", str(data), "-o",
                                                  str(folder / f"q_{src[1:]}_{engine}.tflite"),
                                                  "--calibration-engine", engine]
    return out


def has_litert_quantizer(python: str) -> str | None:
    """None when ``python`` imports litert_quantizer, else why not."""
    if not python or not Path(python).exists():
        return f"{python or '(none)'} does not exist"
    proc = subprocess.run([python, "-c", "import litert_quantizer"], check=False, capture_output=True, text=True,
                          env=child_env())
    return None if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["import failed"])[-1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, nargs="+", default=[100, 500, 1000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--repeat-at", type=int, default=500, help="the count measured --repeats times")
    ap.add_argument("--bench-python", default="/work/venv-bench/bin/python",
                    help="a Python with litert-quantizer installed (the LiteRT Quantizer's runs)")
    ap.add_argument("--folder", help="keep the model and samples here between runs (default: a temporary folder)")
    ap.add_argument("--only", nargs="*", default=[], help="contestants whose name contains one of these")
    args = ap.parse_args()
    why = has_litert_quantizer(args.bench_python)
    if why:
        print(f"skipped the LiteRT Quantizer: {why} (--bench-python)")
    bench_python = None if why else args.bench_python
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.folder or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        pb, flt, data = build(folder, args.samples)
        print(f"MobileNetV2 alpha 1.0 224x224 ({pb.stat().st_size / 1e6:.1f} MB .pb, {flt.stat().st_size / 1e6:.1f} MB "
              f"float .tflite); {os.cpu_count()} CPUs; median of {args.repeats} runs at {args.repeat_at} samples, "
              f"one run at the others", flush=True)
        results: dict[int, dict[str, tuple[float, float]]] = {}
        for n in args.samples:
            results[n] = {}
            for name, cmd in commands(pb, flt, data[n], folder, bench_python).items():
                if args.only and not any(o in name for o in args.only):
                    continue
                if n == args.repeat_at and args.repeats > 1:
                    measure(cmd)  # warm-up: disk cache, bytecode
                    runs = [measure(cmd) for _ in range(args.repeats)]
                    seconds, mb = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
                else:
                    seconds, mb = measure(cmd)
                results[n][name] = (seconds, mb)
                print(f"  {n:5d} samples  {name:45} {seconds:8.2f} s  {mb:8.0f} MB", flush=True)
        report(results, args.samples)
    return 0


def report(results: dict[int, dict[str, tuple[float, float]]], counts: list[int]) -> None:
    tf_name = next((k for k in results[counts[0]] if k.startswith("TensorFlow")), None)
    lq_name = next((k for k in results[counts[0]] if k.startswith("LiteRT")), None)
    for n in counts:
        r = results[n]
        print(f"\n{n} samples\n| | seconds | ms/sample | peak RSS | faster than TF | faster than LiteRT Quantizer "
              f"| memory / TF | memory / LiteRT Quantizer |\n|---|---|---|---|---|---|---|---|")
        for name, (s, mb) in r.items():
            cells = [f"{s:.2f}", f"{1e3 * s / n:.1f}", f"{mb:,.0f} MB"]
            for ref in (tf_name, lq_name):
                cells.append(f"{r[ref][0] / s:.2f}x" if ref in r else "")
            for ref in (tf_name, lq_name):
                cells.append(f"{mb / r[ref][1]:.2f}" if ref in r else "")
            print(f"| {name} | " + " | ".join(cells) + " |")
    first = counts[0]
    print(f"\npeak RSS against the peak at {first} samples\n| | " + " | ".join(str(n) for n in counts) + " |\n|---|"
          + "---|" * len(counts))
    for name in results[first]:
        cells = [f"{results[n][name][1] / results[first][name][1]:.2f}" if name in results[n] else "" for n in counts]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    sys.exit(main())
