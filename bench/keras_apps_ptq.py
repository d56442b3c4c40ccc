"""keras.applications under post-training quantization: does qconvert convert each
architecture, and how close is it to TensorFlow's converter on the same calibration samples?

    python bench/keras_apps_ptq.py [NAME ...] [--size 32] [--samples 8]

Models come from ``tests/fixtures/keras_apps.py``: ``weights=None``, without the classifier
(global average pooling is the output), from a fixed seed, trained briefly (BatchNorm
statistics from a batch) unless ``--untrained``. For each: qconvert's result (or its one-line
error), TensorFlow's, the share of int8 outputs equal to TensorFlow's in LiteRT REF, the largest
difference in LSB, and the conversion times (median of 1 run each; TensorFlow includes its own
graph import).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

def main() -> None:
    ap = argparse.ArgumentParser()
    import keras_apps
    import oracle

    ap.add_argument("names", nargs="*", default=list(keras_apps.APPS))
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--untrained", action="store_true", help="skip keras_apps.train_briefly")
    args = ap.parse_args()

    from qconvert.api import convert_graph
    from qconvert.errors import ConversionError

    print(f"{'model':18} {'qconvert':>9} {'TF':>4} {'equal':>7} {'max LSB':>7} {'ours s':>7} {'TF s':>6}  note")
    counts = {"converts": 0, "tf": 0, "exact": 0}
    for name in args.names:
        pb, shape = keras_apps.build(name, args.size, trained=not args.untrained)
        samples = {"input": np.random.default_rng(1).uniform(-1, 1, (args.samples, *shape[1:])).astype(np.float32)}
        t0 = time.perf_counter()
        try:
            ours = convert_graph(pb, inputs=["input"], outputs=["Identity"], calibration_data=samples).model
            err = ""
        except ConversionError as exc:
            ours, err = None, str(exc)
        t_ours = time.perf_counter() - t0
        t0 = time.perf_counter()
        try:
            theirs = oracle.tf_ptq_convert(oracle.FloatGraph(pb, ["input"], ["Identity"], {"input": shape}), samples)
        except Exception as exc:  # noqa: BLE001 - TensorFlow's failures are data here
            theirs, err = None, err or f"TF: {str(exc).splitlines()[0][:80]}"
        t_tf = time.perf_counter() - t0
        equal, lsb = "-", "-"
        if ours is not None and theirs is not None:
            report = oracle.compare_ptq(ours, theirs, samples, ["input"])
            equal = f"{report.outputs and (report.outputs - _differing(ours, theirs, samples)) / report.outputs:.0%}"
            lsb = str(report.max_lsb)
            counts["exact"] += report.max_lsb == 0
        counts["converts"] += ours is not None
        counts["tf"] += theirs is not None
        print(f"{name:18} {'ok' if ours is not None else 'FAIL':>9} {'ok' if theirs is not None else 'FAIL':>4} "
              f"{equal:>7} {lsb:>7} {t_ours:7.2f} {t_tf:6.2f}  {err[:150]}", flush=True)
    n = len(args.names)
    print(f"\nqconvert converts {counts['converts']}/{n}; TensorFlow {counts['tf']}/{n}; "
          f"bit-exact outputs on the samples {counts['exact']}/{n}")


def _differing(ours: bytes, theirs: bytes, samples: dict[str, np.ndarray]) -> int:
    import oracle

    diff = 0
    for i in range(len(samples["input"])):
        x = samples["input"][i:i + 1]
        a = oracle.run_litert(ours, {"input": _q(ours, x)})[0]
        b = oracle.run_litert(theirs, {"input": _q(theirs, x)})[0]
        diff += int(np.count_nonzero(a != b))
    return diff


def _q(model: bytes, x: np.ndarray) -> np.ndarray:
    import oracle

    scale, zp = oracle.io_details(model)["inputs"][0]["quant"]
    return np.clip(np.round(x / scale) + zp, -128, 127).astype(np.int8)


if __name__ == "__main__":
    main()
