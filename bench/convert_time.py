"""Whole-process wall time and peak memory: qconvert's CLI against TensorFlow's converter.

    python bench/convert_time.py [--repeats 5] [--models NAME ...]
    python bench/convert_time.py --corpus tf1|tfmot|all      # the test corpora instead

Default models (bench/bench_models.py): small_cnn, mobilenet_v2 (alpha 0.35, 64x64),
mobilenet_v2_224 (alpha 1.0, 224x224), chain_1000; any ``chain_N`` may be named.
Building the TensorFlow-made models needs TensorFlow, tf-keras and
tensorflow-model-optimization; they are cached after the first run.

Each model is written to a temporary .pb, then, as separate processes so that import
costs count, REPEATS times each after one untimed warm-up run of each:
  * ``python -m qconvert MODEL.pb --inputs-range ...`` (this interpreter; bytecode is
    allowed to be cached, as in a normal install)
  * a small script doing ``TFLiteConverter.from_frozen_graph`` with int8 inference and
    the same input stats (what a user of TensorFlow's converter runs).
Wall time is measured around the child; peak RSS is the child's own ``ru_maxrss``
(``os.wait4`` in a small launcher process, see ``_MEASURE``). Prints medians and the ratios TF/qconvert. The machines are shared
and noisy: quote medians and ratios, not single runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_models  # noqa: E402  (puts tests/ on sys.path)

TF_SCRIPT = """
import os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
pb, out, inputs, outputs, shapes, stats = sys.argv[1], sys.argv[2], *[eval(a) for a in sys.argv[3:]]
c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(pb, inputs, outputs, shapes)
c.inference_type = tf.int8
c.quantized_input_stats = stats
open(out, "wb").write(c.convert())
"""


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a normal install has its bytecode cached
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env


# Runs one command and prints "<wall seconds> <peak RSS KB>". A child's ru_maxrss
# includes the memory image it was forked from, so the command must be started from
# this small process, not from the benchmark (which may hold TensorFlow).
_MEASURE = """
import os, subprocess, sys, time
t0 = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
err = proc.stderr.read()
_, status, usage = os.wait4(proc.pid, 0)
seconds = time.perf_counter() - t0
code = os.waitstatus_to_exitcode(status)
if code != 0:
    sys.stderr.buffer.write(err[-3000:])
    sys.exit(code)
print(seconds, usage.ru_maxrss)
"""


def measure(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, its peak RSS in MB). Exits on failure."""
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, env=child_env())
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd[:4])} ...\n{proc.stderr[-3000:]}")
    seconds, kb = proc.stdout.split()
    return float(seconds), float(kb) / 1024  # ru_maxrss is in KB on Linux


def commands(m, folder: Path) -> tuple[list[str], list[str]]:  # type: ignore[no-untyped-def]
    pb = folder / f"{m.name}.pb"
    pb.write_bytes(m.graph_def)
    ranges = [a for n, (lo, hi) in m.input_ranges.items() for a in ("--inputs-range", f"{n}={lo},{hi}")]
    ours = [sys.executable, "-m", "qconvert", str(pb), "-o", str(folder / "q.tflite"),
            "--inputs", ",".join(m.inputs), "--outputs", ",".join(m.outputs), *ranges]
    stats = {n: (-128 - lo * 255 / (hi - lo), 255 / (hi - lo)) for n, (lo, hi) in m.input_ranges.items()}
    theirs = [sys.executable, "-c", TF_SCRIPT, str(pb), str(folder / "t.tflite"),
              repr(m.inputs), repr(m.outputs), repr(m.shapes), repr(stats)]
    return ours, theirs


def median_of(cmd: list[str], repeats: int) -> tuple[float, float]:
    measure(cmd)  # warm-up: disk cache, bytecode
    runs = [measure(cmd) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", nargs="*", help=f"default: {' '.join(bench_models.NAMES)}")
    ap.add_argument("--corpus", choices=["tf1", "tfmot", "all"],
                    help="time the test corpora instead (tests/fixtures/corpus.py, tests/fixtures/tfmot_corpus.py)")
    args = ap.parse_args()
    if args.corpus:
        import corpus
        import tfmot_corpus

        models = corpus.build_corpus() if args.corpus in ("tf1", "all") else []
        if args.corpus in ("tfmot", "all"):
            models += tfmot_corpus.build_tfmot_corpus()
        if args.models:
            models = [m for m in models if m.name in args.models]
    else:
        models = [bench_models.model(n) for n in (args.models or bench_models.NAMES)]
    print(f"medians of {args.repeats} runs (after one warm-up), whole process, {os.cpu_count()} CPUs")
    print(f"{'model':20} {'pb MB':>6} | {'qconvert s':>10} {'TF s':>7} {'speed-up':>8} | "
          f"{'qconvert MB':>11} {'TF MB':>7} {'lighter':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            ours, theirs = commands(m, Path(tmp))
            q_s, q_mb = median_of(ours, args.repeats)
            t_s, t_mb = median_of(theirs, args.repeats)
            print(f"{m.name:20} {len(m.graph_def) / 1e6:6.2f} | {q_s:10.3f} {t_s:7.3f} {t_s / q_s:7.1f}x | "
                  f"{q_mb:11.0f} {t_mb:7.0f} {t_mb / q_mb:6.1f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
