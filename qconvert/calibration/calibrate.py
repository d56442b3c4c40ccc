"""Stage 4a': ranges of a float graph from calibration data (``--calibration-data``).

    op ──▶ y (no range)        ⇒        op ──▶ Q(calibrated) ──▶ DQ ──▶ y

Runs after the fusions, on the float model TensorFlow's calibrator would run (see
``converter/executor.py``), records each tensor's range over the samples, keeps the
ranges TensorFlow keeps, and gives them to the tensors as Q → DQ pairs; propagation
then does the rest as for a QAT graph (biases, weights from their values, same-scale
and fixed-output ops).

Which recorded ranges are used is TensorFlow's ``RemoveRedundantStatsOps``
(quantization_lib/quantization_utils.cc):
  0. a tensor that already has parameters (FakeQuant, --inputs-range) keeps them;
  1. forward: the result of a one-operand same-scale op (pool, reshape, pad, ...) whose
     operand has a range takes the operand's (its own range is dropped), and so on down
     the chain; a fixed-output op's result (softmax, logistic, tanh) drops its range;
  2. backward: a same-scale op whose result keeps its range (two or more float operands,
     constants counted: concatenation, maximum, minimum, also of an activation and a
     constant — measured: max(conv, C) gives the conv MAXIMUM's range, max(input, C) the
     graph input) drops its operands' ranges, and so on up, through
     ranges step 1 dropped as well (DenseNet: a concat's range reaches back through
     MaxPool and Pad to the ReLU of the stem convolution).
``--ranges-file`` entries replace recorded ranges (or give ranges with no data at all).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from qconvert.calibration import executor
from qconvert.calibration import methods as cm
from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after, is_quantize
from qconvert.ops import Rule, float_operands, row
from qconvert.quant import calibrated_range_params

METHODS = ("minmax", "percentile", "entropy", "mse")


@dataclass
class Calibration:
    """What ``--calibration-data`` and ``--ranges-file`` bring to the pipeline."""

    samples: Mapping[str, np.ndarray] | None = None  # graph input name -> [N, ...] float32
    batch: int = 1
    method: str = "minmax"
    percentile: float = 99.99  # --percentile, for method "percentile"
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # --ranges-file
    progress: Callable[[int, int], None] | None = None  # (samples done, total)


def _needs_range(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    if t is None or t.dtype != "float32" or t.data is not None:
        return False
    readers = graph.consumers(name)
    return not (readers and all(is_quantize(r) for r in readers))


def candidates(graph: Graph) -> list[str]:
    """Float tensors that a float model would hold and that have no parameters yet, in graph order."""
    names = [n for n in graph.inputs if _needs_range(graph, n)]
    for node in graph.nodes:
        r = row(node.op)
        if r is None or r.rule is Rule.QUANT:
            continue
        names += [o for o in node.outputs if _needs_range(graph, o)]
    return names


def record_ranges(graph: Graph, calib: Calibration, names: list[str]) -> dict[str, tuple[float, float]]:
    """Run the float graph over the samples; the min and max of each tensor in ``names``."""
    assert calib.samples is not None
    wanted = set(names)
    lo: dict[str, float] = {}
    hi: dict[str, float] = {}

    def record(name: str, value: np.ndarray) -> None:
        if name in wanted and value.size:
            a, b = float(value.min()), float(value.max())
            lo[name] = min(lo.get(name, a), a)
            hi[name] = max(hi.get(name, b), b)

    passes = 1 if calib.method == "minmax" else 2
    total = passes * len(next(iter(calib.samples.values())))
    done = 0

    def run_all(callback: Callable[[str, np.ndarray], None]) -> None:
        nonlocal done
        for feeds in executor.batches(calib.samples, calib.batch):  # type: ignore[arg-type]
            executor.run(graph, feeds, callback)
            done += len(next(iter(feeds.values())))
            if calib.progress is not None:
                calib.progress(done, total)

    run_all(record)
    bad = [n for n in lo if not (np.isfinite(lo[n]) and np.isfinite(hi[n]))]
    if bad:
        raise ConversionError(f"tensor '{bad[0]}' takes non-finite values on the calibration data; "
                              "check the data and the model")
    if calib.method == "minmax":
        _in_place_unions(graph, lo, hi)
        return {n: (lo[n], hi[n]) for n in names if n in lo}
    return _from_histograms(calib, names, lo, hi, run_all)


def _from_histograms(calib: Calibration, names: list[str], lo: dict[str, float], hi: dict[str, float],
                     run_all: Callable[[Callable[[str, np.ndarray], None]], None]) -> dict[str, tuple[float, float]]:
    """Second pass: a histogram per tensor over its [min, max], then the method's range."""
    counts = {n: np.zeros(cm.BINS, np.int64) for n in names if n in lo and hi[n] > lo[n]}

    def record(name: str, value: np.ndarray) -> None:
        if name in counts:
            counts[name] += np.histogram(value, bins=cm.BINS, range=(lo[name], hi[name]))[0]

    run_all(record)
    out = {}
    for n in names:
        if n not in lo:
            continue
        if n not in counts:
            out[n] = (lo[n], hi[n])
            continue
        edges = np.linspace(lo[n], hi[n], cm.BINS + 1)
        if calib.method == "percentile":
            out[n] = cm.percentile(counts[n], edges, calib.percentile)
        elif calib.method == "entropy":
            out[n] = cm.entropy(counts[n], edges)
        else:
            out[n] = cm.mse(counts[n], edges)
    return out


_SCALAR_TENSOR_BYTES = 8  # arena_planner.h kScalarTensorBytes


def _in_place_unions(graph: Graph, lo: dict[str, float], hi: dict[str, float]) -> None:
    """TensorFlow's calibrator runs the float model in a TFLite interpreter and logs each
    op's inputs after the op ran. When the arena planner let an ADD/SUB/MUL write its
    output into an operand's buffer (``ArenaPlanner::IdentifyInPlaceTensors``: the
    first operand, in order, of the same byte size (> 8), read by no other node, not a
    graph input, whose buffer's root is read once, and the output is not a graph
    output), that operand is logged holding the output's values: its range becomes the
    union of both. Measured on TF 2.21 (tests/test_calibration.py)."""
    refcount: dict[str, int] = {}
    for name in graph.outputs:
        refcount[name] = refcount.get(name, 0) + 1
    for node in graph.nodes:
        for i in node.inputs:
            if i:
                refcount[i] = refcount.get(i, 0) + 1
    root: dict[str, str] = {}
    inputs, outputs = set(graph.inputs), set(graph.outputs)
    for node in graph.nodes:
        r = row(node.op)  # in_place: the kernel may write its output into an operand's buffer
        if r is None or not r.in_place or not node.outputs:  # (kTfLiteInplaceOpInput0Shared | ...1Shared)
            continue
        out = node.outputs[0]
        t_out = graph.tensors[out]
        if out in outputs or t_out.shape is None:
            continue
        chosen = None
        for slot, name in enumerate(node.inputs[:2]):
            t = graph.tensors.get(name)
            if (t is None or t.data is not None or name in inputs or t.shape != t_out.shape
                    or t.dtype != t_out.dtype or 4 * int(np.prod(t.shape)) <= _SCALAR_TENSOR_BYTES
                    or refcount.get(name, 0) > 1):
                continue
            chosen = name
            break
        if chosen is None:
            continue
        shared = root.get(chosen, chosen)
        if refcount.get(shared, 0) > 1:
            continue
        root[out] = shared
        if chosen in lo and out in lo:
            lo[chosen] = min(lo[chosen], lo[out])
            hi[chosen] = max(hi[chosen], hi[out])


def _prefers_result_scale(graph: Graph, node) -> bool:  # type: ignore[no-untyped-def]
    """A same-scale op with two or more float operands (a concat; MAXIMUM/MINIMUM of an activation
    and a constant too) keeps its result's range, which its operands then take."""
    slots = float_operands(node.op, node.inputs)
    return len([s for s in slots if node.inputs[s]]) >= 2


def drop_redundant(graph: Graph, stats: dict[str, tuple[float, float]], keep_merged_inputs: bool = False
                   ) -> dict[str, tuple[float, float]]:
    """TensorFlow's RemoveRedundantStatsOps on our ranges (see the module docstring). With
    ``keep_merged_inputs`` (16x8) the inputs of a same-scale op with several inputs (a concat)
    keep their ranges: TensorFlow requantizes them to the result's instead."""
    def rule(node) -> Rule | None:  # type: ignore[no-untyped-def]
        r = row(node.op) if node is not None else None
        return r.rule if r is not None else None

    redundant: set[str] = set()
    work = list(stats)
    while work:
        t = work.pop()
        if rule(graph.producer(t)) is Rule.FIXED:
            redundant.add(t)
        for user in graph.consumers(t):
            if rule(user) is not Rule.SAME_SCALE or _prefers_result_scale(graph, user):
                continue
            for res in user.outputs:
                if res in stats:
                    redundant.add(res)
                    work.append(res)
    work = [t for t in stats if t not in redundant]
    seen = set(work)
    while work:  # through ranges the forward walk dropped too: they do not stop it
        t = work.pop()
        prod = graph.producer(t)
        if rule(prod) is not Rule.SAME_SCALE or (keep_merged_inputs and _prefers_result_scale(graph, prod)):
            continue
        for i in prod.inputs:
            if i in stats:
                redundant.add(i)
                if i not in seen:
                    seen.add(i)
                    work.append(i)
    return {t: r for t, r in stats.items() if t not in redundant}


def calibrate(graph: Graph, ctx: Context) -> bool:
    """Ranges from ``ctx.options.calibration`` (a :class:`Calibration`); a graph calibrated
    here is post-training quantized (``ctx.legacy_float_scale``)."""
    calib = ctx.options.calibration
    if calib is None or (calib.samples is None and not calib.ranges):
        return False
    names = candidates(graph)
    unknown = [n for n in calib.ranges if n not in graph.tensors]
    if unknown:
        close = [n for n in graph.tensors if unknown[0].split("/")[-1] in n][:3]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise ConversionError(f"--ranges-file names tensor '{unknown[0]}', which the graph does not have{hint}")
    if names:  # a graph whose every range comes from FakeQuants stays on the QAT arithmetic
        ctx.legacy_float_scale = True  # TensorFlow's post-training quantizer (mlir_quantize)
    t0 = time.perf_counter()
    stats = record_ranges(graph, calib, names) if calib.samples is not None else {}
    seconds = time.perf_counter() - t0
    kept = drop_redundant(graph, stats, ctx.activation_bits == 16)
    by_hand = calib.ranges
    for name in names:
        if name not in by_hand and name in kept:
            insert_qdq_after(graph, name, calibrated_range_params(*kept[name], num_bits=ctx.activation_bits),
                             Origin.CALIBRATION)
    for name, (lo, hi) in by_hand.items():
        if not hi >= lo:
            raise ConversionError(f"--ranges-file: tensor '{name}' has min {lo} > max {hi}")
        if name not in names:
            why = ("is a constant (weights and biases get their parameters from their values)"
                   if graph.is_const(name) else "already has a range (a FakeQuant or --inputs-range)")
            raise ConversionError(f"--ranges-file: tensor '{name}' {why}; remove it from the file")
        insert_qdq_after(graph, name, calibrated_range_params(lo, hi, num_bits=ctx.activation_bits),
                         Origin.RANGES_FILE)
    if calib.samples is not None:
        n = len(next(iter(calib.samples.values())))
        ctx.note(f"calibrated {len(kept)} tensor range(s) on {n} sample(s) in {seconds:.2f} s ({calib.method})")
    return bool(names) or bool(by_hand)


def print_progress(done: int, total: int) -> None:
    """A progress line on a terminal (stderr), nothing otherwise."""
    if not sys.stderr.isatty():
        return
    width = 30
    filled = width * done // max(total, 1)
    end = "\n" if done >= total else ""
    sys.stderr.write(f"\rcalibrating [{'#' * filled}{'.' * (width - filled)}] {done}/{total}{end}")
    sys.stderr.flush()
