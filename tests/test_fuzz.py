"""Short fuzz runs (CI): mutated .pb and .tflite files never crash, hang or leak.

Generators and the in-process runner live in bench/fuzz.py (the long version).
Each corpus is run once per module; the contract checks (exit code 0/1/2, no
traceback, time bound, memory) must pass, and so must "no internal error" (the
bugs the fuzzer found are fixed; regression tests at the bottom).
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import fuzz  # noqa: E402  (bench/fuzz.py)

EXAMPLE = ROOT / "models" / "example_qat.pb"
COUNT = 2000
SEED = 0
TIME_LIMIT = 5.0  # seconds per input
TIMEOUT = 10.0  # the alarm: anything slower is reported as a hang


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


@pytest.fixture(scope="module")
def tflite_model() -> bytes:
    from qconvert import api

    return api.convert_bytes(EXAMPLE, {None: (-1.0, 1.0)})


@pytest.fixture(scope="module")
def pb_stats(tmp_path_factory) -> tuple[fuzz.Stats, float]:
    base = EXAMPLE.read_bytes()
    rss0 = _rss_mb()
    stats = fuzz.fuzz_pb(base, fuzz.mutations(base, COUNT, SEED), tmp_path_factory.mktemp("fuzz_pb"), TIMEOUT)
    return stats, _rss_mb() - rss0


@pytest.fixture(scope="module")
def tflite_stats(tflite_model: bytes, tmp_path_factory) -> tuple[fuzz.Stats, float]:
    rss0 = _rss_mb()
    work = tmp_path_factory.mktemp("fuzz_tflite")
    stats = fuzz.fuzz_tflite(fuzz.mutations(tflite_model, COUNT, SEED), work, TIMEOUT)
    crafted = fuzz.fuzz_tflite(fuzz.crafted_tflite(tflite_model), work, TIMEOUT)
    stats.codes.update(crafted.codes)
    stats.failures += crafted.failures
    if crafted.worst > stats.worst:
        stats.worst, stats.worst_case = crafted.worst, crafted.worst_case
    return stats, _rss_mb() - rss0


def _summary(stats: fuzz.Stats) -> str:
    return f"codes {dict(stats.codes)}, worst {stats.worst:.3f} s ({stats.worst_case})"


def _contract(stats: fuzz.Stats, growth_mb: float) -> None:
    bad_codes = {k: v for k, v in stats.codes.items() if k not in (0, 1, 2)}
    assert not bad_codes, f"exit codes outside 0/1/2 (or hangs): {bad_codes}; {_summary(stats)}"
    tracebacks = [(label, o.stderr[-500:]) for label, o, _ in stats.failures if "Traceback" in o.stderr]
    assert not tracebacks, tracebacks[:3]
    assert stats.worst < TIME_LIMIT, _summary(stats)
    assert growth_mb < 500, f"max RSS grew by {growth_mb:.0f} MB"


def _internal_errors(stats: fuzz.Stats) -> list[str]:
    return [f"{label}: {o.stderr.strip()[:200]}" for label, o, _ in stats.failures if "internal error" in o.stderr]


def test_mutated_pb_contract(pb_stats) -> None:
    stats, growth = pb_stats
    assert sum(stats.codes.values()) == COUNT
    _contract(stats, growth)


def test_mutated_pb_no_internal_error(pb_stats) -> None:
    stats, _ = pb_stats
    assert not _internal_errors(stats), _internal_errors(stats)


def test_mutated_tflite_dump_contract(tflite_stats) -> None:
    stats, growth = tflite_stats
    _contract(stats, growth)


def test_mutated_tflite_dump_no_internal_error(tflite_stats) -> None:
    stats, _ = tflite_stats
    assert not _internal_errors(stats), _internal_errors(stats)


@pytest.fixture(scope="module")
def float_stats(tmp_path_factory) -> tuple[fuzz.Stats, float]:
    """Mutations of a float .tflite (qconvert's own writer, no TensorFlow), converted with calibration data."""
    base = fuzz.float_tflite()
    work = tmp_path_factory.mktemp("fuzz_float")
    samples = work / "x.npz"
    assert fuzz.float_samples(base, samples)
    assert fuzz.run_main([str(fuzz._write(work / "base.tflite", base)), "--calibration-data", str(samples),
                          "-o", str(work / "base_int8.tflite")]).code == 0
    rss0 = _rss_mb()
    stats = fuzz.fuzz_float_tflite(fuzz.mutations(base, COUNT, SEED), work, samples, TIMEOUT)
    return stats, _rss_mb() - rss0


def test_mutated_float_tflite_convert_contract(float_stats) -> None:
    """Converting a damaged float .tflite: exit 0, 1 or 2, one line, no partial output, in time."""
    stats, growth = float_stats
    assert sum(stats.codes.values()) == COUNT and stats.codes[0] > 0
    _contract(stats, growth)
    assert not _internal_errors(stats), _internal_errors(stats)


REAL_PER_SEED = 12


@pytest.fixture(scope="module")
def real_stats(tmp_path_factory) -> tuple[fuzz.Stats, float]:
    seeds = fuzz.real_tflite_seeds()
    if not seeds:
        pytest.skip(f"{fuzz.REALMODELS} is absent (real third-party files; see its README)")
    rss0 = _rss_mb()
    work = tmp_path_factory.mktemp("fuzz_real")
    originals = fuzz.fuzz_tflite(iter([(f"{name}:original", data) for name, data in seeds]), work, TIMEOUT)
    stats = fuzz.fuzz_tflite(fuzz.seeded_mutations(seeds, REAL_PER_SEED, SEED), work, TIMEOUT)
    stats.codes.update(originals.codes)
    stats.failures += originals.failures
    return stats, _rss_mb() - rss0


def test_real_files_and_their_mutations_dump_contract(real_stats) -> None:
    """Every .tflite in ../shared/realmodels, and 12 mutations of each, dump or fail in one line."""
    stats, growth = real_stats
    _contract(stats, growth)
    assert not _internal_errors(stats), _internal_errors(stats)


def test_tiny_graph_converts_and_survives_mutation(tmp_path: Path) -> None:
    """The hand-built Placeholder -> FakeQuant -> Relu -> FakeQuant graph converts; its mutations obey the contract."""
    base = fuzz.tiny_graphdef()
    src = tmp_path / "tiny.pb"
    src.write_bytes(base)
    o = fuzz.run_main([str(src), "--inputs-range", "-1,1", "-o", str(tmp_path / "tiny.tflite")])
    assert o.code == 0, o.stderr
    stats = fuzz.fuzz_pb(base, fuzz.mutations(base, 300, SEED), tmp_path, TIMEOUT)
    _contract(stats, 0.0)
    assert not _internal_errors(stats), _internal_errors(stats)


# ---------------------------------------------------------------------------
# Bugs the fuzzer found (fixed): regression tests
# ---------------------------------------------------------------------------


def test_bug_dump_quantization_without_zero_points(tflite_model: bytes, tmp_path: Path) -> None:
    data = bytearray(tflite_model)
    assert data[11520:11528] == bytes.fromhex("4c00000008000000"), "converter output changed; re-derive the offset"
    data[11524] = 0
    path = tmp_path / "m.tflite"
    path.write_bytes(bytes(data))
    for extra in ([], ["--json"]):
        o = fuzz.run_main(["dump", str(path), *extra])
        assert o.code in (0, 1) and "internal error" not in o.stderr, o.stderr
