"""How fast ``qconvert run``'s integer executor is, next to LiteRT on the same file.

    python bench/run_time.py [small_cnn mobilenet_v2 mobilenet_v2_224 ...] [--repeat 5]

For each model (bench/bench_models.py): convert it with qconvert, then time one inference
(median of --repeat, after a warm-up) with

* qconvert's integer executor (pure numpy, integers only),
* LiteRT's reference kernels (``OpResolverType.BUILTIN_REF``, what ``run`` is checked
  against) — run in a child process, because that resolver aborts on a 1000-class SOFTMAX,
* LiteRT's default optimized kernels (``BUILTIN_WITHOUT_DEFAULT_DELEGATES``),

and print the ratios, plus how many int8 outputs differ from each LiteRT variant on the
same random input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_models  # noqa: E402

_LITERT = r"""
import json, sys, time, statistics
import numpy as np
from ai_edge_litert.interpreter import Interpreter, OpResolverType
path, kind, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
it = Interpreter(model_path=path, experimental_op_resolver_type=getattr(OpResolverType, kind))
it.allocate_tensors()
d = it.get_input_details()[0]
x = np.load(path + ".x.npy")
times = []
for _ in range(repeat + 1):
    it.set_tensor(d["index"], x)
    t = time.perf_counter(); it.invoke(); times.append(time.perf_counter() - t)
out = it.get_tensor(it.get_output_details()[0]["index"])
np.save(path + "." + kind + ".npy", out)
print(json.dumps({"seconds": statistics.median(times[1:])}))
"""


def litert(path: Path, kind: str, repeat: int) -> tuple[float | None, np.ndarray | None, str]:
    proc = subprocess.run([sys.executable, "-c", _LITERT, str(path), kind, str(repeat)], capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        return None, None, f"exit {proc.returncode}"
    seconds = json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]
    return seconds, np.load(f"{path}.{kind}.npy"), ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", default=["small_cnn", "mobilenet_v2", "mobilenet_v2_224"])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    import tempfile

    from qconvert.api import convert_bytes
    from qconvert.runtime.interpreter import IntegerModel

    work = Path(tempfile.mkdtemp(prefix="qconvert-run-time-"))
    print(f"{'model':18} {'ops':>4} {'qconvert run':>13} {'LiteRT ref':>11} {'LiteRT opt':>11} "
          f"{'run/ref':>8} {'run/opt':>8}  outputs differing (ref, opt)")
    for name in args.names:
        m = bench_models.model(name)
        tflite = convert_bytes(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs)
        path = work / f"{name}.tflite"
        path.write_bytes(tflite)
        model = IntegerModel(tflite)
        d = model.input_details()[0]
        x = np.random.default_rng(0).integers(-128, 128, d["shape"]).astype(np.int8)
        np.save(f"{path}.x.npy", x)
        times = []
        for _ in range(args.repeat + 1):
            t = time.perf_counter()
            ours = next(iter(model.run({d["name"]: x}).values()))
            times.append(time.perf_counter() - t)
        ours_s = statistics.median(times[1:])
        cells = []
        diffs = []
        for kind in ("BUILTIN_REF", "BUILTIN_WITHOUT_DEFAULT_DELEGATES"):
            seconds, out, why = litert(path, kind, args.repeat)
            cells.append((seconds, why))
            diffs.append("-" if out is None else f"{int((out != ours).sum())}/{out.size}")
        ref, opt = cells

        def fmt(c: tuple[float | None, str]) -> str:
            return f"{c[0] * 1000:9.1f}ms" if c[0] is not None else f"{c[1]:>11}"

        def ratio(c: tuple[float | None, str]) -> str:
            return f"{ours_s / c[0]:7.2f}x" if c[0] else "       -"

        print(f"{name:18} {len(model.model.operators):>4} {ours_s * 1000:11.1f}ms {fmt(ref)} {fmt(opt)} "
              f"{ratio(ref)} {ratio(opt)}  {diffs[0]}, {diffs[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
