"""How long ``qconvert tune`` takes on MobileNetV2 1.0 at 224 px (issue 37: minutes, not hours).

The model is tests/fixtures/keras_apps.py's (weights from a fixed seed, trained briefly; cached
under ~/.cache/qconvert-tests/bench); 200 calibration samples (150 calibrate, 50 score the
candidates) and 100 evaluation samples, uniform in [-1, 1]. Prints the wall time of each phase
(from the progress lines), the number of conversions and the result.

    python bench/tune_time.py [--min-snr DB] [--calibration N] [--eval N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "fixtures")]
CACHE = Path(os.environ.get("QCONVERT_TEST_CACHE", Path.home() / ".cache" / "qconvert-tests")) / "bench"


def model() -> Path:
    path = CACHE / "mobilenetv2_224_trained_v1.pb"
    if not path.exists():
        import keras_apps

        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(keras_apps.build("MobileNetV2", 224)[0])
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--min-snr", type=float, default=30.0)
    ap.add_argument("--calibration", type=int, default=200)
    ap.add_argument("--eval", type=int, default=100)
    args = ap.parse_args()
    from qconvert.options import ConvertOptions
    from qconvert.tools import tune

    pb = model()
    rng = np.random.default_rng(0)
    cal = rng.uniform(-1, 1, (args.calibration, 224, 224, 3)).astype(np.float32)
    ev = rng.uniform(-1, 1, (args.eval, 224, 224, 3)).astype(np.float32)
    t0 = time.perf_counter()
    marks: dict[str, float] = {}

    def echo(line: str) -> None:
        now = time.perf_counter() - t0
        key = line.split(" ", 1)[0].rstrip(":")
        marks.setdefault(key, now)
        marks[key + " (last)"] = now
        print(f"[{now:7.1f} s] {line}", file=sys.stderr)

    options = ConvertOptions.of(inputs=["input"], outputs=["Identity"], calibration_data={"input": cal})
    r = tune.tune(pb.read_bytes(), options, {"input": ev}, min_snr=args.min_snr, echo=echo)
    total = time.perf_counter() - t0
    print(tune.render_table(r).splitlines()[0])
    print(tune.render_table(r).splitlines()[-1])
    print(f"MobileNetV2 1.0 224, {args.calibration} calibration + {args.eval} evaluation samples, --min-snr "
          f"{args.min_snr:g}: {'met' if r.met else 'not met'} in {total:.0f} s ({total / 60:.1f} min), "
          f"{r.conversions} conversions; phases (s from start): " +
          ", ".join(f"{k} {v:.0f}" for k, v in marks.items()))


if __name__ == "__main__":
    main()
