"""qconvert on real third-party files: ``dump``, ``dump --json``, ``run`` and conversion over
../shared/realmodels (files written by other people's converters and training scripts).

    python bench/real_files.py [--root ../shared/realmodels] [--only tflite|pb] [--json out.json]

Every command runs as a user runs it (``python -m qconvert …`` in a subprocess) and is judged
by the CLI contract: exit 0, or 1/2 with one line on stderr and no traceback; anything else
(a crash, "internal error", a hang past --timeout) is a FAIL. Prints one row per file and a
summary (counts per outcome, median seconds).

Conversion options for ``.pb`` files: TensorFlow's end-to-end test graphs carry their
``tf_tfl_translate`` command in the ``.pbtxt`` beside them (``# RUN:`` lines: inputs, shapes,
min/max); Arm's keyword spotters are cut at ``Mfcc`` and calibrated; other float graphs are
calibrated on random data of their input's shape. ``run`` feeds random data of each input's
dtype and shape (a file qconvert did not write is refused in one line until issue 18).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT.parent / "shared" / "realmodels"


def qconvert(args: list[str], timeout: float) -> tuple[str, float, str]:
    """(outcome, seconds, first stderr line): ok | error | FAIL."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "qconvert", *args], cwd=ROOT, capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        return "FAIL", timeout, f"hang (> {timeout:.0f} s)"
    seconds = time.perf_counter() - t0
    err = p.stderr.strip().splitlines()
    line = err[-1] if err else ""
    if p.returncode == 0:
        return "ok", seconds, ""
    if p.returncode in (1, 2) and "Traceback" not in p.stderr and "internal error" not in p.stderr:
        return "error", seconds, line
    return "FAIL", seconds, f"exit {p.returncode}: {line}"


def run_inputs(tflite: Path, work: Path, timeout: float) -> Path | None:
    """A .npz of random data for each input of ``tflite`` (names, dtypes, shapes from dump --json)."""
    p = subprocess.run([sys.executable, "-m", "qconvert", "dump", str(tflite), "--json", "--tensors"], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        return None
    doc = json.loads(p.stdout)
    sg = doc["subgraphs"][0]
    rng = np.random.default_rng(0)
    feeds = {}
    for i in sg["inputs"]:
        t = sg["tensors"][i]
        dtype = np.dtype(t["dtype"]) if t["dtype"] in ("int8", "uint8", "int16", "int32", "float32") else None
        if dtype is None or any(d < 0 for d in t["shape"]):
            return None
        shape = [max(d, 1) for d in t["shape"]]
        if dtype.kind == "f":
            feeds[t["name"]] = rng.uniform(-1, 1, shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            feeds[t["name"]] = rng.integers(max(info.min, -128), min(info.max, 127) + 1, shape).astype(dtype)
    path = work / f"{tflite.stem}.npz"
    np.savez(path, **feeds)
    return path


def pb_options(pb: Path, work: Path) -> list[str]:
    text_path = pb.with_suffix(".pbtxt")
    if text_path.is_file():
        run = " ".join(ln[len("# RUN:"):] for ln in text_path.read_text().splitlines() if ln.startswith("# RUN:"))
        o = {k: v.strip("'\"") for k, v in re.findall(r"-tf-([a-z-]+)=(\S+)", run)}
        names = o.get("input-arrays", "").split(",")
        args = ["--inputs", o["input-arrays"]] if "input-arrays" in o else []
        shapes = o.get("input-shapes", "").split(":")
        los, his = o.get("input-min-values", "").split(","), o.get("input-max-values", "").split(",")
        for k, name in enumerate(n for n in names if n):
            if k < len(shapes) and shapes[k]:
                args += ["--input-shapes", f"{name}={shapes[k]}"]
            if k < len(los) and los[k] and k < len(his) and his[k]:
                args += ["--inputs-range", f"{name}={los[k]},{his[k]}"]
        if "output-arrays" in o:
            args += ["--outputs", o["output-arrays"]]
        return args
    if pb.parent.name == "arm_ml_kws":
        frames = 25 if pb.stem in ("DNN_S", "LSTM_S", "GRU_S") else 49
        data = work / f"{pb.stem}_mfcc.npz"
        np.savez(data, Mfcc=np.random.default_rng(0).normal(0, 10, (16, frames, 10)).astype(np.float32))
        return ["--inputs", "Mfcc", "--outputs", "labels_softmax", "--calibration-data", str(data)]
    if pb.parent.name == "nnstreamer":
        data = work / f"{pb.stem}_calib.npz"
        np.savez(data, input=np.random.default_rng(0).uniform(0, 1, (16, 784)).astype(np.float32))
        return ["--calibration-data", str(data)]
    return []


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=REAL)
    ap.add_argument("--only", choices=("tflite", "pb"))
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = ap.parse_args(argv)
    if not args.root.is_dir():
        print(f"{args.root} is absent: nothing to measure")
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="qconvert-real-") as tmp:
        work = Path(tmp)
        for path in sorted(args.root.rglob("*")):
            rel = str(path.relative_to(args.root))
            if path.suffix == ".tflite" and args.only != "pb":
                row = {"file": rel, "bytes": path.stat().st_size}
                row["dump"] = qconvert(["dump", str(path)], args.timeout)
                row["dump_json"] = qconvert(["dump", str(path), "--json"], args.timeout)
                feeds = run_inputs(path, work, args.timeout)
                row["run"] = (qconvert(["run", str(path), "--input", str(feeds)], args.timeout) if feeds
                              else ("skipped", 0.0, "no static numeric inputs"))
                rows.append(row)
            elif path.suffix == ".pb" and args.only != "tflite":
                row = {"file": rel, "bytes": path.stat().st_size}
                out = work / f"{path.stem}.tflite"
                row["convert"] = qconvert([str(path), *pb_options(path, work), "-o", str(out)], args.timeout)
                rows.append(row)
    cols = ("dump", "dump_json", "run", "convert")
    print(f"{'file':58s} {'KiB':>7s}  " + "  ".join(f"{c:>14s}" for c in cols) + "  note")
    for r in rows:
        cells = [f"{r[c][0]:>6s} {r[c][1]:6.2f}s" if c in r else f"{'':>14s}" for c in cols]
        note = next((r[c][2] for c in cols if c in r and r[c][2]), "")
        print(f"{r['file'][:58]:58s} {r['bytes'] / 1024:7.1f}  " + "  ".join(cells) + f"  {note[:90]}")
    print()
    for c in cols:
        outcomes = Counter(r[c][0] for r in rows if c in r)
        if outcomes:
            secs = [r[c][1] for r in rows if c in r and r[c][0] != "skipped"]
            print(f"{c:10s} {dict(outcomes)}  median {statistics.median(secs):.2f} s" if secs else f"{c:10s} {dict(outcomes)}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 1 if any(r[c][0] == "FAIL" for r in rows for c in cols if c in r) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
