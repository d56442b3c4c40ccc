"""Does conversion time grow linearly with graph size? The synthetic chain at 125..2,000 layers.

    python bench/scaling.py [--layers 125 250 500 1000 2000] [--repeats 3]

For each chain (bench/bench_models.py; built once with TensorFlow, then cached) it prints
the median in-process conversion time (``qconvert.api.convert``: parse, pipeline, write;
no start-up cost), the time per layer, and that per-layer time relative to the smallest
chain's. A quadratic pass would show as a ratio growing with the size; the target is
below 2x at 2,000 layers. The whole-process time of ``python -m qconvert`` is printed
too (it adds ~0.25 s of interpreter start and imports). Machines are noisy: medians.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_models  # noqa: E402
from convert_time import measure  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, nargs="*", default=[125, 250, 500, 1000, 2000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from qconvert.api import convert_bytes

    models = [bench_models.chain(n) for n in args.layers]
    print(f"medians of {args.repeats} runs")
    print(f"{'layers':>6} {'nodes':>6} {'pb MB':>6} | {'convert s':>9} {'ms/layer':>8} {'vs first':>8} | {'process s':>9}")
    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for n, m in zip(args.layers, models):
            convert_bytes(m.graph_def, m.input_ranges)  # warm-up
            times = []
            for _ in range(args.repeats):
                gc.collect()
                t0 = time.perf_counter()
                convert_bytes(m.graph_def, m.input_ranges)
                times.append(time.perf_counter() - t0)
            seconds = statistics.median(times)
            per_layer = 1000 * seconds / n
            first = first or per_layer
            pb = Path(tmp) / f"{m.name}.pb"
            pb.write_bytes(m.graph_def)
            cmd = [sys.executable, "-m", "qconvert", str(pb), "-o", str(Path(tmp) / "q.tflite"),
                   "--inputs-range", "input=-1,1"]
            process = statistics.median(measure(cmd)[0] for _ in range(args.repeats))
            nodes = len(_node_names(m.graph_def))
            print(f"{n:6} {nodes:6} {len(m.graph_def) / 1e6:6.2f} | {seconds:9.3f} {per_layer:8.2f} "
                  f"{per_layer / first:7.2f}x | {process:9.3f}", flush=True)
    return 0


def _node_names(graph_def: bytes) -> list[str]:
    from qconvert.frontend.graphdef import parse_graphdef

    return [n.name for n in parse_graphdef(graph_def)]


if __name__ == "__main__":
    sys.exit(main())
