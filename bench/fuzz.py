"""Fuzz qconvert with mutated .pb and .tflite files, in process.

    python bench/fuzz.py --count 20000 --seed 0 [--kind pb|tflite|float|both] [--real]

``tflite`` mutates an int8 file and dumps it; ``float`` mutates a float .tflite (built here,
without TensorFlow: conv, pool, reshape, dense, softmax) and converts it with calibration data.
``--real`` also mutates every .tflite under ../shared/realmodels/ (files written by other
people's converters: TOCO, the MLIR converter, Vela; custom ops, uint8, options as lists), and
converts mutations of its float files.

Every input must end with exit code 0, 1 or 2, without "internal error" or
"Traceback" on stderr, within --timeout seconds. Prints counts per exit code,
the worst per-input time, max RSS, and every failing input (saved under
--save-dir for reproduction). tests/test_fuzz.py imports the generators from here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import random
import resource
import signal
import struct
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXAMPLE = ROOT / "models" / "example_qat.pb"
REALMODELS = ROOT.parent / "shared" / "realmodels"


def real_tflite_seeds(root: Path = REALMODELS) -> list[tuple[str, bytes]]:
    """(name, bytes) of every .tflite under ``root`` (none when it is absent), sorted by name."""
    if not root.is_dir():
        return []
    return [(str(p.relative_to(root)), p.read_bytes()) for p in sorted(root.rglob("*.tflite"))]


def seeded_mutations(seeds: list[tuple[str, bytes]], per_seed: int, seed: int) -> Iterator[tuple[str, bytes]]:
    """``per_seed`` mutations of each seed, labelled with the seed's name."""
    for k, (name, data) in enumerate(seeds):
        for kind, mutated in mutations(data, per_seed, seed + k):
            yield f"{name}:{kind}", mutated


# ---------------------------------------------------------------------------
# Generators
# ---------------------------------------------------------------------------


def mutate(data: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One random mutation of ``data``: (kind, mutated bytes)."""
    kind = rng.choice(("bitflip", "truncate", "splice", "duplicate", "bytes"))
    buf = bytearray(data)
    n = len(buf)
    if kind == "bitflip":
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(n)
            buf[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        buf = buf[: rng.randrange(n)]
    elif kind == "splice":  # replace a slice with random bytes of another length
        i = rng.randrange(n)
        j = min(n, i + rng.randint(1, 64))
        buf[i:j] = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
    elif kind == "duplicate":  # copy a slice elsewhere (duplicated / overlapping protobuf fields)
        i = rng.randrange(n)
        j = min(n, i + rng.randint(1, 512))
        k = rng.randrange(n + 1)
        buf[k:k] = buf[i:j]
    else:  # set a few bytes to interesting values
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(n)
            buf[i] = rng.choice((0x00, 0x01, 0x7F, 0x80, 0xFF))
    return kind, bytes(buf)


def mutations(base: bytes, count: int, seed: int) -> Iterator[tuple[str, bytes]]:
    rng = random.Random(seed)
    for _ in range(count):
        yield mutate(base, rng)


def crafted_tflite(base: bytes, limit: int = 2048) -> Iterator[tuple[str, bytes]]:
    """Every aligned word in the first ``limit`` bytes set to a huge value, and to 0
    (a uoffset of 0 points to itself); plus the root table's vtable offset set to 0."""
    for off in range(0, min(limit, len(base) - 3), 4):
        for value in (0x7FFFFFF0, 0):
            buf = bytearray(base)
            struct.pack_into("<I", buf, off, value)
            yield f"word@{off}={value:#x}", bytes(buf)
    root = struct.unpack_from("<I", base, 0)[0]
    buf = bytearray(base)
    struct.pack_into("<i", buf, root, 0)  # table's vtable is the table itself
    yield "root-vtable-self", bytes(buf)
    buf = bytearray(base)
    struct.pack_into("<I", buf, 0, 0)  # root offset points to itself
    yield "root-self", bytes(buf)
    buf = bytearray(base)
    struct.pack_into("<i", buf, root, -(len(base) * 4))  # vtable far outside the file
    yield "root-vtable-out", bytes(buf)


def float_tflite(seed: int = 0) -> bytes:
    """A small float .tflite written by qconvert's own writer (no TensorFlow): input [1,8,8,3] →
    CONV_2D (RELU) → MAX_POOL_2D → RESHAPE → FULLY_CONNECTED → SOFTMAX, weights from ``seed``."""
    import numpy as np

    from qconvert.ir import Graph, Node, Tensor
    from qconvert.schema.writer import write_model

    rng = np.random.default_rng(seed)
    g = Graph()
    g.add_tensor(Tensor("input", "float32", (1, 8, 8, 3)))
    g.inputs = ["input"]
    w = g.add_const("conv/w", rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32))
    b = g.add_const("conv/b", rng.normal(0, 0.1, 4).astype(np.float32))
    fw = g.add_const("fc/w", rng.normal(0, 0.3, (5, 64)).astype(np.float32))
    fb = g.add_const("fc/b", rng.normal(0, 0.1, 5).astype(np.float32))
    shape = g.add_const("flat/shape", np.asarray([1, 64], np.int32))
    for name, dims in (("conv", (1, 8, 8, 4)), ("pool", (1, 4, 4, 4)), ("flat", (1, 64)), ("fc", (1, 5)),
                       ("output", (1, 5))):
        g.add_tensor(Tensor(name, "float32", dims))
    g.add_node(Node("CONV_2D", ["input", w, b], ["conv"], {"padding": "SAME", "stride_w": 1, "stride_h": 1,
                    "fused_activation_function": "RELU", "dilation_w_factor": 1, "dilation_h_factor": 1}, "conv"))
    g.add_node(Node("MAX_POOL_2D", ["conv"], ["pool"], {"padding": "VALID", "stride_w": 2, "stride_h": 2,
                    "filter_width": 2, "filter_height": 2, "fused_activation_function": "NONE"}, "pool"))
    g.add_node(Node("RESHAPE", ["pool", shape], ["flat"], {}, "flat"))
    g.add_node(Node("FULLY_CONNECTED", ["flat", fw, fb], ["fc"], {"fused_activation_function": "NONE"}, "fc"))
    g.add_node(Node("SOFTMAX", ["fc"], ["output"], {"beta": 1.0}, "output"))
    g.outputs = ["output"]
    return write_model(g, description="fuzz float seed")


def float_samples(data: bytes, path: Path, n: int = 2) -> bool:
    """Calibration samples for the float inputs of the .tflite ``data``, saved to ``path`` (.npz);
    False when the file cannot be read or has a non-float input."""
    import numpy as np

    from qconvert.schema.reader import read_model

    try:
        info = read_model(data)
        ins = [info.tensors[i] for i in info.inputs]
    except (ValueError, IndexError):
        return False
    if not ins or any(t.dtype != "float32" for t in ins):
        return False
    rng = np.random.default_rng(0)
    np.savez(path, **{t.name: rng.uniform(-1, 1, (n, *t.shape[1:])).astype(np.float32) for t in ins})
    return True


def tiny_graphdef() -> bytes:
    """Placeholder -> FakeQuant(min/max Consts) -> Relu -> FakeQuant, built without TensorFlow."""
    from qconvert.frontend.graphdef import DT, GraphDef

    g = GraphDef()

    def const(name: str, value: float) -> None:
        n = g.node.add(name=name, op="Const")
        n.attr["dtype"].type = DT["DT_FLOAT"]
        t = n.attr["value"].tensor
        t.dtype = DT["DT_FLOAT"]
        t.float_val.append(value)

    def fq(name: str, x: str, lo: float, hi: float) -> None:
        const(f"{name}/min", lo)
        const(f"{name}/max", hi)
        n = g.node.add(name=name, op="FakeQuantWithMinMaxVars", input=[x, f"{name}/min", f"{name}/max"])
        n.attr["num_bits"].i = 8
        n.attr["narrow_range"].b = False

    p = g.node.add(name="input", op="Placeholder")
    p.attr["dtype"].type = DT["DT_FLOAT"]
    for d in (1, 4, 4, 3):
        p.attr["shape"].shape.dim.add(size=d)
    fq("in/fq", "input", -1.0, 1.0)
    r = g.node.add(name="relu", op="Relu", input=["in/fq"])
    r.attr["T"].type = DT["DT_FLOAT"]
    fq("output", "relu", 0.0, 1.0)
    return g.SerializeToString()


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm; a BaseException so qconvert's guard does not swallow it."""


@dataclass
class Outcome:
    code: int | str
    seconds: float
    stderr: str

    @property
    def bad(self) -> bool:
        return (self.code not in (0, 1, 2) or "internal error" in self.stderr
                or "Traceback" in self.stderr)


def run_main(argv: list[str], timeout: float = 10.0) -> Outcome:
    """``qconvert.cli.main(argv)`` with stdout/stderr captured and a wall-clock limit."""
    from qconvert.cli import main

    out, err = io.StringIO(), io.StringIO()

    def on_alarm(signum, frame):  # noqa: ARG001
        raise Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code: int | str = main(argv)
    except Hang:
        code = "hang"
    except BaseException as exc:  # noqa: BLE001 - anything escaping main() is a bug
        import traceback

        code = f"raised {type(exc).__name__}"
        err.write("Traceback (escaped main)\n" + traceback.format_exc())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return Outcome(code, time.perf_counter() - t0, err.getvalue())


@dataclass
class Stats:
    codes: Counter = field(default_factory=Counter)
    worst: float = 0.0
    worst_case: str = ""
    failures: list[tuple[str, Outcome, bytes]] = field(default_factory=list)

    def add(self, label: str, outcome: Outcome, data: bytes) -> None:
        self.codes[outcome.code] += 1
        if outcome.seconds > self.worst:
            self.worst, self.worst_case = outcome.seconds, label
        if outcome.bad:
            self.failures.append((label, outcome, data))


def _fuzz_convert(cases: Iterator[tuple[str, bytes]], src: Path, out: Path, options: list[str], label: str,
                  timeout: float) -> Stats:
    """Convert each mutated model written to ``src`` into ``out`` with ``options``; a failing
    conversion must leave no output file."""
    stats = Stats()
    for i, (kind, data) in enumerate(cases):
        src.write_bytes(data)
        if out.exists():
            out.unlink()
        o = run_main([str(src), *options, "-o", str(out)], timeout)
        if o.code != 0 and out.exists():  # never a partial output file
            o.code = f"exit {o.code} with an output file"
        stats.add(f"{label}#{i}:{kind}", o, data)
    return stats


def fuzz_pb(base: bytes, cases: Iterator[tuple[str, bytes]], workdir: Path, timeout: float = 10.0,
            ranges: str = "-1,1") -> Stats:
    return _fuzz_convert(cases, workdir / "m.pb", workdir / "m.tflite", ["--inputs-range", ranges], "pb", timeout)


def fuzz_tflite(cases: Iterator[tuple[str, bytes]], workdir: Path, timeout: float = 10.0) -> Stats:
    stats = Stats()
    src = workdir / "m.tflite"
    for i, (kind, data) in enumerate(cases):
        src.write_bytes(data)
        for extra in ([], ["--json"]):
            o = run_main(["dump", str(src), *extra], timeout)
            stats.add(f"tflite#{i}:{kind}{' --json' if extra else ''}", o, data)
    return stats


def fuzz_float_tflite(cases: Iterator[tuple[str, bytes]], workdir: Path, samples: Path,
                      timeout: float = 10.0) -> Stats:
    """Convert each mutated float .tflite with the calibration data ``samples`` (.npz)."""
    return _fuzz_convert(cases, workdir / "float.tflite", workdir / "float_int8.tflite",
                         ["--calibration-data", str(samples)], "float", timeout)


def real_float_seeds(root: Path = REALMODELS) -> list[tuple[str, bytes]]:
    """The float .tflite files under ``root`` that convert as they are (qconvert's float inputs)."""
    seeds = []
    for name, data in real_tflite_seeds(root):
        with tempfile.TemporaryDirectory() as tmp:
            x = Path(tmp) / "x.npz"
            if float_samples(data, x) and run_main([str(_write(Path(tmp) / "m.tflite", data)), "--calibration-data",
                                                    str(x), "-o", str(Path(tmp) / "o.tflite")]).code == 0:
                seeds.append((name, data))
    return seeds


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _report(title: str, stats: Stats, save_dir: Path | None, suffix: str) -> None:
    codes = ", ".join(f"{k}: {v}" for k, v in sorted(stats.codes.items(), key=lambda kv: str(kv[0])))
    print(f"{title}: {sum(stats.codes.values())} runs; exit codes {{{codes}}}; "
          f"worst {stats.worst:.3f} s ({stats.worst_case}); failures {len(stats.failures)}")
    seen: set[str] = set()
    for label, o, data in stats.failures:
        first = o.stderr.strip().splitlines()[-1] if o.stderr.strip() else ""
        key = f"{o.code}|{first.split(':')[2] if first.count(':') >= 2 else first}"
        path = ""
        if save_dir is not None:
            save_dir.mkdir(parents=True, exist_ok=True)
            p = save_dir / (label.replace(":", "_").replace("#", "_").replace(" ", "").replace("@", "_")
                            .replace("=", "_") + suffix)
            p.write_bytes(data)
            path = f" saved {p}"
        if key not in seen or len(seen) < 20:
            print(f"  FAIL {label}: exit {o.code}: {first[:300]}{path}")
        seen.add(key)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=20000, help="mutated inputs per kind (default 20000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kind", choices=("pb", "tflite", "float", "both"), default="both")
    ap.add_argument("--base", choices=("example", "tiny"), default="example", help=".pb to mutate")
    ap.add_argument("--timeout", type=float, default=10.0, help="per-input limit, seconds")
    ap.add_argument("--save-dir", type=Path, default=None, help="save failing inputs here")
    ap.add_argument("--real", action="store_true", help="also mutate the .tflite files under ../shared/realmodels")
    args = ap.parse_args(argv)

    from qconvert import api

    rss0 = max_rss_mb()
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pb = EXAMPLE.read_bytes() if args.base == "example" else tiny_graphdef()
        if args.kind in ("pb", "both"):
            t0 = time.perf_counter()
            stats = fuzz_pb(pb, mutations(pb, args.count, args.seed), work, args.timeout)
            _report(f".pb ({args.base}, {time.perf_counter() - t0:.1f} s)", stats, args.save_dir, ".pb")
            failed += len(stats.failures)
        if args.kind in ("tflite", "both"):
            tfl = api.convert_bytes(EXAMPLE, {None: (-1.0, 1.0)})
            t0 = time.perf_counter()
            stats = fuzz_tflite(mutations(tfl, args.count, args.seed), work, args.timeout)
            _report(f".tflite mutated ({time.perf_counter() - t0:.1f} s)", stats, args.save_dir, ".tflite")
            failed += len(stats.failures)
            stats = fuzz_tflite(crafted_tflite(tfl), work, args.timeout)
            _report(".tflite crafted", stats, args.save_dir, ".tflite")
            failed += len(stats.failures)
            seeds = real_tflite_seeds() if args.real else []
            if seeds:
                t0 = time.perf_counter()
                per_seed = max(1, args.count // len(seeds))
                stats = fuzz_tflite(seeded_mutations(seeds, per_seed, args.seed), work, args.timeout)
                _report(f".tflite real files x{per_seed} ({time.perf_counter() - t0:.1f} s)", stats, args.save_dir,
                        ".tflite")
                failed += len(stats.failures)
        if args.kind in ("float", "both"):
            base = float_tflite()
            x = work / "x.npz"
            float_samples(base, x)
            t0 = time.perf_counter()
            stats = fuzz_float_tflite(mutations(base, args.count, args.seed), work, x, args.timeout)
            _report(f"float .tflite converted ({time.perf_counter() - t0:.1f} s)", stats, args.save_dir, ".tflite")
            failed += len(stats.failures)
            for name, data in (real_float_seeds() if args.real else []):
                x = work / "real.npz"
                float_samples(data, x)
                per_seed = max(1, args.count // 20)
                stats = fuzz_float_tflite(seeded_mutations([(name, data)], per_seed, args.seed), work, x, args.timeout)
                _report(f"float {name} x{per_seed}", stats, args.save_dir, ".tflite")
                failed += len(stats.failures)
    rss1 = max_rss_mb()
    print(f"max RSS {rss1:.0f} MB (start {rss0:.0f} MB, growth {rss1 - rss0:+.0f} MB)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
