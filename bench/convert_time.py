"""Whole-process conversion time: qconvert's CLI against TensorFlow's converter.

    python bench/convert_time.py [--repeats 3] [--models NAME ...] [--corpus tf1|tfmot|all]

Builds the QAT corpora (tests/corpus.py and tests/tfmot_corpus.py, need TensorFlow), writes each graph to a
temporary .pb, then times, as separate processes so that import costs count:
  * ``python -m qconvert MODEL.pb --inputs-range ...``
  * a small script doing ``TFLiteConverter.from_frozen_graph`` with int8 inference
    and the same input stats (what a user of TensorFlow's converter runs).
Prints the median wall time of each and the ratio. The machines are shared and
noisy: quote medians and ratios, not single runs.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

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


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--corpus", choices=["tf1", "tfmot", "all"], default="all",
                    help="tf1: hand-written QAT graphs; tfmot: tf_keras + tfmot models (cached builds)")
    args = ap.parse_args()
    import corpus

    models = corpus.build_corpus() if args.corpus in ("tf1", "all") else []
    if args.corpus in ("tfmot", "all"):
        import tfmot_corpus

        models += tfmot_corpus.build_tfmot_corpus()
    if args.models:
        models = [m for m in models if m.name in args.models]
    print(f"{'model':28} {'bytes':>8} {'qconvert s':>11} {'TF s':>8} {'TF/qconvert':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            pb = Path(tmp) / f"{m.name}.pb"
            pb.write_bytes(m.graph_def)
            ranges = [a for n, (lo, hi) in m.input_ranges.items() for a in ("--inputs-range", f"{n}={lo},{hi}")]
            ours = [sys.executable, "-m", "qconvert", str(pb), "-o", str(Path(tmp) / "q.tflite"),
                    "--inputs", ",".join(m.inputs), "--outputs", ",".join(m.outputs), *ranges]
            stats = {n: (-128 - lo * 255 / (hi - lo), 255 / (hi - lo)) for n, (lo, hi) in m.input_ranges.items()}
            theirs = [sys.executable, "-c", TF_SCRIPT, str(pb), str(Path(tmp) / "t.tflite"),
                      repr(m.inputs), repr(m.outputs), repr(m.shapes), repr(stats)]
            q = statistics.median(timed(ours) for _ in range(args.repeats))
            t = statistics.median(timed(theirs) for _ in range(args.repeats))
            print(f"{m.name:28} {len(m.graph_def):8} {q:11.3f} {t:8.3f} {t / q:11.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
