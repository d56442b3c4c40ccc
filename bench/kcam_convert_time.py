"""Whole-process post-training int8 of the keras-cv-attention-models zoo (issue 35): qconvert's
CLI against TensorFlow 2.21's converter, side by side, as a user runs each from a shell.

    python bench/kcam_convert_time.py [NAME ...] [--size N] [--samples 8] [--repeats 3]

Models come from ``tests/fixtures/kcam_zoo.py`` (cached ``.pb``, trained briefly at their
smallest input; ``--size N`` builds them untrained at N pixels, cached apart). Samples: uniform
in [-1, 1] (fixed seed), one ``.npy`` every tool reads. Each conversion is its own process, so
imports count (``bench/convert_time.py``'s ``measure``: wall time and the child's peak RSS):

- TensorFlow: ``from_frozen_graph`` + ``representative_dataset`` (full int8, int8 I/O);
- qconvert: ``python -m qconvert MODEL.pb --inputs input --outputs Identity --calibration-data
  X.npy`` (the default calibration engine).

Run it with the Python of an environment where qconvert is installed as users install it (``pip install .``):
an editable install (``pip install -e .``) adds its import hook to every process (7 ms measured). Medians of
``--repeats`` runs after one warm-up; printed with the ratio TF / qconvert. For the
same comparison in one process (TensorFlow imported once, the conversion alone), see
``bench/kcam_zoo_ptq.py``'s ``ours s`` / ``TF s`` columns.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "fixtures"))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # kcam builds on tf_keras
from calibration_speed import TF_SCRIPT
from convert_time import median_of


def _how_installed() -> str:
    from importlib import metadata

    try:
        url = metadata.distribution("qconvert").read_text("direct_url.json") or ""
    except metadata.PackageNotFoundError:
        return "not installed (run from the source tree)"
    return "installed editable (its import hook costs every process)" if '"editable": true' in url else "installed"


def main() -> int:
    import kcam_zoo

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", default=list(kcam_zoo.MODELS))
    ap.add_argument("--size", type=int, default=None, help="input side in pixels (untrained; default: each "
                    "model's smallest, trained briefly)")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"medians of {args.repeats} runs (after one warm-up), whole processes, {args.samples} samples, "
          f"{os.cpu_count()} CPUs, qconvert {_how_installed()}")
    print(f"{'model':20} {'px':>4} | {'qconvert s':>10} {'TF s':>7} {'speed-up':>8} | {'qconvert MB':>11} {'TF MB':>7}")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name in args.names:
            pb, shape = kcam_zoo.build(name, trained=args.size is None, size=args.size)
            (folder / "m.pb").write_bytes(pb)
            x = np.random.default_rng(1).uniform(-1, 1, (args.samples, *shape[1:])).astype(np.float32)
            np.save(folder / "x.npy", x)
            ours = [sys.executable, "-m", "qconvert", str(folder / "m.pb"), "-o", str(folder / "q.tflite"),
                    "--inputs", "input", "--outputs", "Identity", "--calibration-data", str(folder / "x.npy")]
            theirs = [sys.executable, "-c", TF_SCRIPT, str(folder / "m.pb"), str(folder / "x.npy"),
                      str(folder / "t.tflite"), str(shape[1])]
            try:
                q_s, q_mb = median_of(ours, args.repeats)
                t_s, t_mb = median_of(theirs, args.repeats)
            except SystemExit as exc:  # measure() exits with the child's stderr: a model neither converts
                print(f"{name:20} {shape[1]:>4} | failed: {str(exc).strip().splitlines()[-1][:120]}", flush=True)
                continue
            ratios.append(t_s / q_s)
            print(f"{name:20} {shape[1]:>4} | {q_s:10.3f} {t_s:7.3f} {t_s / q_s:7.1f}x | {q_mb:11.0f} {t_mb:7.0f}",
                  flush=True)
    if ratios:
        print(f"speed-up: median {statistics.median(ratios):.1f}x, lowest {min(ratios):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
