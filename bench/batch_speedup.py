"""Wall time of ``qconvert batch --jobs 1`` against ``--jobs 2`` on a zoo of copied models.

    python bench/batch_speedup.py [--copies 10] [--repeats 3] [--jobs 2]

Copies models/example_qat.pb and models/digits_qat.pb COPIES times each into a temporary
directory with a manifest (example_qat needs its input range), then runs ``qconvert batch``
as a subprocess (import costs count) with --jobs 1 and --jobs N, REPEATS times each, and
prints the medians and the speed-up. Needs no TensorFlow. Machines are noisy: quote medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_zoo(folder: Path, copies: int) -> int:
    lines = ['[defaults]\noutput_dir = "out"\n']
    for i in range(copies):
        shutil.copy(ROOT / "models" / "example_qat.pb", folder / f"example_{i:02d}.pb")
        shutil.copy(ROOT / "models" / "digits_qat.pb", folder / f"digits_{i:02d}.pb")
        lines.append(f'[[model]]\npath = "example_{i:02d}.pb"\ninputs_range = "-1,1"\n')
    (folder / "zoo.toml").write_text("\n".join(lines))
    (folder / "out").mkdir()
    return 2 * copies


def time_batch(folder: Path, jobs: int) -> float:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), CI="true")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "qconvert", "batch", str(folder), "--manifest",
                           str(folder / "zoo.toml"), "--jobs", str(jobs)], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"qconvert batch --jobs {jobs} failed:\n{proc.stderr}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="qconvert-zoo-") as tmp:
        folder = Path(tmp)
        n = build_zoo(folder, args.copies)
        print(f"{n} models, {args.repeats} repeats, {os.cpu_count()} CPUs")
        medians = {}
        for jobs in (1, args.jobs):
            times = [time_batch(folder, jobs) for _ in range(args.repeats)]
            medians[jobs] = statistics.median(times)
            print(f"--jobs {jobs}: median {medians[jobs]:.2f} s  (runs: {', '.join(f'{t:.2f}' for t in times)})")
        print(f"speed-up --jobs {args.jobs} vs --jobs 1: {medians[1] / medians[args.jobs]:.2f}x")


if __name__ == "__main__":
    main()
