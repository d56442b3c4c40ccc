"""Start-up time of the CLI: whole-process wall time of short commands, which are mostly imports.

    python bench/startup.py [MODEL.tflite] [--repeats 7] [--qconvert PATH ...]

Prints the median wall time of ``--repeats`` runs (after one untimed warm-up each) of:
``python -c pass`` and ``python -c "import numpy"`` (the floor, for reference),
``qconvert --help``, ``qconvert dump MODEL`` and ``qconvert dump --json MODEL``.

``qconvert`` is the console script beside this interpreter (``--qconvert`` for another one,
e.g. that of a throwaway venv holding a normal, non-editable install: the figure users see);
the reference commands run with the interpreter of that script's venv. Bytecode may be
cached, as in a normal install. With several ``--qconvert`` (say, installs of two commits),
their runs alternate, one column each, so that a change in the machine's load hits both.

Without MODEL, the file is keras.applications MobileNetV2 (alpha 1.0, 224x224, 1000 classes,
``weights=None`` from a fixed seed), quantized to int8 by TensorFlow's converter (post-training,
4 random calibration samples, int8 input and output): built once with TensorFlow and tf-keras
and cached as ``<cache>/bench/mobilenet_v2_1.0_224_int8.tflite`` (cache: ``$QCONVERT_TEST_CACHE`` or
``~/.cache/qconvert-tests``). The machines are shared and noisy: quote medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def _cache_dir() -> Path:
    root = os.environ.get("QCONVERT_TEST_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "qconvert-tests")
    path = Path(root) / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return path


def mobilenet_v2_int8() -> Path:
    """The cached int8 MobileNetV2-1.0 224 file (built with TensorFlow when missing)."""
    path = _cache_dir() / "mobilenet_v2_1.0_224_int8.tflite"
    if path.exists():
        return path
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import numpy as np
    import tensorflow as tf
    import tf_keras as keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV2(weights=None, input_shape=(224, 224, 3), alpha=1.0)
    fn = tf.function(lambda x: model(x, training=False))
    concrete = fn.get_concrete_function(tf.TensorSpec([1, 224, 224, 3], tf.float32, name="input"))
    samples = np.random.default_rng(0).uniform(-1, 1, (4, 1, 224, 224, 3)).astype(np.float32)
    c = tf.lite.TFLiteConverter.from_concrete_functions([concrete], fn)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([x] for x in samples)
    c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    c.inference_input_type = c.inference_output_type = tf.int8
    data = c.convert()
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def wall(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds from start to exit, CPU seconds: user + system) of ``cmd``, output discarded;
    exits on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, check=False)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.decode(errors='replace')[-2000:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _qconvert_script(given: str | None) -> str:
    if given:
        return given
    beside = Path(sys.executable).with_name("qconvert")
    found = str(beside) if beside.exists() else shutil.which("qconvert")
    if not found:
        sys.exit("no qconvert console script beside this interpreter or on PATH: pass --qconvert")
    return found


def _interpreter_of(script: str) -> str:
    """The interpreter named on the script's #! line (the venv it belongs to)."""
    with open(script, "rb") as fh:
        first = fh.readline().decode(errors="replace").strip()
    return first[2:].strip() if first.startswith("#!") and "python" in first else sys.executable


def commands(script: str, model: str) -> list[tuple[str, list[str]]]:
    python = _interpreter_of(script)
    return [
        ("python -c pass", [python, "-c", "pass"]),
        ("python -c 'import numpy'", [python, "-c", "import numpy"]),
        ("qconvert --help", [script, "--help"]),
        ("qconvert dump MODEL", [script, "dump", model]),
        ("qconvert dump --json MODEL", [script, "dump", "--json", model]),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="a .tflite file (default: the cached int8 MobileNetV2-1.0 224)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--qconvert", action="append",
                    help="a qconvert console script to time (default: the one beside this python); repeatable")
    args = ap.parse_args()
    model = args.model or str(mobilenet_v2_int8())
    scripts = [_qconvert_script(q) for q in (args.qconvert or [None])]
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a normal install has its bytecode cached
    print(f"model: {model} ({os.path.getsize(model)} bytes)")
    for k, script in enumerate(scripts):
        print(f"[{k}] {script}")
    print(f"medians of {args.repeats} runs after one warm-up, seconds of wall time (of CPU time, user + "
          f"system, which waits for no other process); {os.cpu_count()} CPUs")
    print(f"{'':28}" + "".join(f"{f'[{k}]':>16}" for k in range(len(scripts))))
    per_script = [commands(s, model) for s in scripts]
    for row in zip(*per_script):
        times: list[list[tuple[float, float]]] = [[] for _ in scripts]
        for _, cmd in row:
            wall(cmd, env)  # warm-up: disk cache, bytecode
        for _ in range(args.repeats):
            for k, (_, cmd) in enumerate(row):
                times[k].append(wall(cmd, env))
        cells = [f"{statistics.median(w for w, _ in t):8.3f} ({statistics.median(c for _, c in t):.3f})" for t in times]
        print(f"{row[0][0]:28}" + "".join(f"{c:>16}" for c in cells), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
