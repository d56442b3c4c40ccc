"""The ``calibrate`` stage: ranges of a float graph from calibration data (``--calibration-data``).

    op ──▶ y (no range)        ⇒        op ──▶ Q(calibrated) ──▶ DQ ──▶ y

Runs after the ``fuse`` stage, on the float model TensorFlow's calibrator would run (see
``executor.py`` beside this module), records each tensor's range over the samples, keeps the
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

import contextlib
import os
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the samples, the executor and the statistics load only when a graph is calibrated
    from qconvert.calibration.data import Samples
    from qconvert.calibration.stats import Stats
from qconvert.errors import ConversionError
from qconvert.ir import Graph
from qconvert.calibration.precision import choose_int16_ops, choose_ops, int16_boundaries
from qconvert.ir.passes import Context, Origin
from qconvert.ir.qdq import insert_qdq_after, is_quantize, source_of
from qconvert.ops import Rule, float_operands, pool_fill, row
from qconvert.options import CalibrationOptions
from qconvert.quant import calibrated_range_params

METHODS = ("minmax", "percentile", "entropy", "mse")


@dataclass(eq=False)  # compared by identity: no generated __eq__ (0.1 ms of every start-up)
class Calibration:
    """What ``--calibration-data``, ``--stats`` and ``--ranges-file`` bring to the pipeline: the
    user's choices (``options``, declared in ``qconvert.options``) and what was opened from them."""

    options: CalibrationOptions = field(default_factory=CalibrationOptions)  # method, batch, workers, ...
    samples: Samples | None = None  # read a batch at a time
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)  # --ranges-file, read
    progress: Callable[[int, int], None] | None = None  # (samples done, total)
    recorded: Stats | None = None  # set by record_ranges: the statistics used
    # --calibration-engine: None runs the numpy executor; else (graph, observed names) → a factory
    # of per-thread runners ``run(feeds, record) -> samples`` (converter/litert_engine.py), which may
    # raise EngineUnavailable (auto: then numpy runs, and ``engine_used`` says why)
    engine: Callable[[Graph, list[str]], Callable[[], Callable[..., int]]] | None = None
    engine_used: str = ""  # set by collect: "litert", or "numpy" with the reason after a colon

    @property
    def has_data(self) -> bool:
        return self.samples is not None or bool(self.options.stats)


def _needs_range(graph: Graph, name: str) -> bool:
    t = graph.tensors.get(name)
    if t is None or t.dtype != "float32" or t.data is not None:
        return False
    readers = graph.consumers(name)
    return not (readers and all(is_quantize(r) for r in readers))


def candidates(graph: Graph) -> list[str]:
    """Float tensors that a float model would hold and that have no parameters yet, in graph order
    (a recurrent op's state tensors, whose final values its kernel gives, before its output)."""
    names = [n for n in graph.inputs if _needs_range(graph, n)]
    for node in graph.nodes:
        r = row(node.op)
        if r is None or r.rule is Rule.QUANT:
            continue
        names += [node.inputs[s] for s in r.state_slots if s < len(node.inputs) and node.inputs[s]
                  and graph.tensors[node.inputs[s]].variable and graph.tensors[node.inputs[s]].quant is None]
        names += [o for o in node.outputs if _needs_range(graph, o)]
    return names


def pads_a_pool(graph: Graph, node) -> bool:  # type: ignore[no-untyped-def]
    """A pad whose fill is ±inf (PyTorch's padded max pool, as litert-torch writes it): its output's
    range is that of its finite values (its input's), and its output shares its input's parameters."""
    r = row(node.op)
    slot = r.fill_slot if r is not None else None
    return (slot is not None and slot < len(node.inputs) and graph.is_const(node.inputs[slot])
            and pool_fill(node.op, graph.const(node.inputs[slot])))


def _state_ranges(graph: Graph, ranges: Mapping[str, tuple[float, float]],
                  recorded: Mapping[str, tuple[float, float]], kept: Mapping[str, tuple[float, float]]) -> set[str]:
    """A state tensor's range goes to the op that reads it (``attrs["_state_ranges"]``, by slot), with
    the range recorded for the op's own output (``"output"``, before ``drop_redundant``) and whether
    that range was kept (``"output_kept"``): the op's row gives its states and intermediates their
    parameters from these in the prepare stage. Returns the state tensors."""
    states = set()
    for node in graph.nodes:
        r = row(node.op)
        if r is None or not r.state_slots:
            continue
        found = {}
        for s in r.state_slots:
            name = node.inputs[s] if s < len(node.inputs) else ""
            if name and graph.tensors[name].variable:
                states.add(name)
                if name in ranges:
                    found[s] = tuple(float(v) for v in ranges[name])
        out = node.outputs[0]
        if found and out in recorded:
            found["output"] = tuple(float(v) for v in recorded[out])
            found["output_kept"] = out in kept
        if found:
            node.attrs["_state_ranges"] = found
    return states


class EngineUnavailable(Exception):
    """The automatic engine choice cannot use LiteRT on this graph (the message says why): the
    numpy executor runs it instead."""


def _blas_single_thread():  # type: ignore[no-untyped-def]
    """BLAS limited to one thread while the samples run, on one worker or several. Each worker is a
    thread: two BLAS pools on two cores fight, 25.8 against 16.5 ms per MobileNetV2 sample, measured.
    On one thread too: OpenBLAS's threaded products cost more than they gain on the small matrices of a
    calibrated model (MobileViT_XXS at 32 px: 8 samples in 45 ms single-threaded, 130 ms with the first
    batch on two BLAS threads, measured on a shared 2-core machine), and their float32 results differ
    in the last bits from the single-threaded ones, so that a range, and the file, depended on the
    machine's cores (MobileViT_XXS's file differed in 33,734 bytes, measured)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a dependency; without it, BLAS keeps its threads
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def collect(graph: Graph, calib: Calibration, names: list[str]) -> Stats:
    """Run the float graph over the samples: each observed tensor's min and max (and its
    fixed-bin histogram for a histogram method, or with ``calib.options.histograms``).

    Batches run on ``calib.options.workers`` threads (numpy releases the GIL in its kernels; by
    default the cores, or one when the first batch's pace leaves less than ``_POOL_PAYS_FROM`` s), on
    runners taken from the idle ones, each with its own statistics, merged at the end: min, max and counts do not depend on the
    order, and a sample's values do not depend on the thread (a BLAS product splits its
    output among threads, never a sum), so the statistics are those of one thread. At most
    two batches per worker are read ahead: memory does not grow with the number of samples."""
    from qconvert.calibration import executor
    from qconvert.calibration.stats import Stats, fingerprint_later

    assert calib.samples is not None
    wanted = set(names)
    padded = {n.outputs[0] for n in graph.nodes if pads_a_pool(graph, n)}
    hist = calib.options.histograms or calib.options.method != "minmax"
    fp = fingerprint_later(graph, names)  # hashed only if asked for (--save-stats, `calibrate`)
    idle: list[tuple[Stats, Callable[..., int]]] = []
    shards: list[Stats] = []
    make = None
    calib.engine_used = "numpy"
    if calib.engine is not None:
        try:
            make = calib.engine(graph, list(names))
            calib.engine_used = "litert"
        except EngineUnavailable as exc:
            calib.engine_used = f"numpy: {exc}"

    # VARIABLE state tensors (an LSTM's): TensorFlow's calibrator invokes its float model once per
    # sample, in order, without resetting them, so each sample starts from the state the one before
    # left: the samples run in order on one worker, the states carried from batch to batch
    states: dict[str, np.ndarray] | None = {} if any(t.variable for t in graph.tensors.values()) else None

    def numpy_run(feeds: dict[str, np.ndarray], record: Callable[[str, np.ndarray], None]) -> int:
        executor.run(graph, feeds, record, states=states)
        return len(next(iter(feeds.values())))

    def run_one(feeds: dict[str, np.ndarray]) -> int:
        # a runner and its statistics are taken from the idle ones, not kept by a thread: the batch
        # the main thread runs first and the pool's threads share them, so that no more runners
        # exist than batches run at once (a LiteRT runner holds an interpreter: its packed weights
        # and every observed tensor, 37 MB on MobileNetV2 224, measured)
        try:
            stats, run = idle.pop()  # atomic: two threads never take the same one
        except IndexError:
            stats, run = Stats(fp, list(names), hist={} if hist else None), make() if make is not None else numpy_run
            with lock:
                shards.append(stats)

        def record(name: str, value: np.ndarray) -> None:
            if name in wanted:
                if name in padded:  # a max pool's ±inf padding: the range of the finite values
                    value = value[np.abs(value) < np.finfo(np.float32).max]
                stats.update(name, value)

        def record_many(names: list[str], values: list[np.ndarray]) -> None:  # record on each, at once
            if any(n not in wanted or n in padded for n in names):
                for n, v in zip(names, values):
                    record(n, v)
            else:
                stats.update_many(names, values)

        record.many = record_many  # type: ignore[attr-defined]

        try:
            return run(feeds, record)
        finally:
            idle.append((stats, run))

    lock = threading.Lock()
    total, done = calib.samples.count, 0
    if calib.progress is not None:
        calib.progress(0, total)
    batches = calib.samples.batches(calib.options.batch)
    workers = max(1, min(calib.options.workers or default_workers(), total))
    if states is not None and make is None:
        workers = 1
    # every sample, the first too: a sample's values do not depend on the cores. LiteRT's kernels never
    # call BLAS: no threadpoolctl then (its import and BLAS look-up: 3.2 ms, measured)
    with _blas_single_thread() if make is None else contextlib.nullcontext():
        first = next(batches, None)  # one batch here first: it also builds the graph's look-up index
        if first is not None:
            start = time.perf_counter()
            done += run_one(first)
            left = (time.perf_counter() - start) / max(done, 1) * (total - done)  # seconds, at this pace
            if calib.options.workers is None and left < _POOL_PAYS_FROM:
                workers = 1
            if calib.progress is not None:
                calib.progress(done, total)
        if workers == 1:
            for feeds in batches:
                done += run_one(feeds)
                if calib.progress is not None:
                    calib.progress(done, total)
        else:
            # here, not at the top: concurrent.futures brings logging (7 ms a QAT conversion never needs)
            from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, as_completed, wait

            with ThreadPoolExecutor(workers) as pool:
                pending: set = set()
                for feeds in batches:
                    pending.add(pool.submit(run_one, feeds))
                    while len(pending) >= 2 * workers:
                        finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                        done += sum(f.result() for f in finished)
                        if calib.progress is not None:
                            calib.progress(done, total)
                for f in as_completed(pending):
                    done += f.result()
                    if calib.progress is not None:
                        calib.progress(done, total)
    stats = Stats(fp, list(names), hist={} if hist else None)
    for shard in shards:
        stats.merge(shard)
    stats.samples = done
    return stats


# Seconds of samples left, at the first batch's pace, below which the default is one worker: a pool costs
# its own fixed time (a second LiteRT interpreter 3-8 ms, concurrent.futures 4, the threads), and the
# recording holds the GIL. 8 samples at 32 px, 2 cores, whole process: 10-50 ms slower on two workers on
# each of five models, and still slower at 64 samples (0.1 s left; measured, numpy and LiteRT engines).
_POOL_PAYS_FROM = 0.25


def default_workers() -> int:
    """Calibration threads: the cores this process may use, at most 4."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4))


def record_ranges(graph: Graph, calib: Calibration, names: list[str], promoted: frozenset = frozenset()
                  ) -> dict[str, tuple[float, float]]:
    """Each observed tensor's range: from the samples, or from ``--stats`` files (merged), by
    ``calib.options.method``; the statistics are kept in ``calib.recorded``. ``promoted``: the ops of
    --int16/--keep-float islands, whose operands keep their own ranges (no in-place union)."""
    from qconvert.calibration import methods as cm
    from qconvert.calibration.stats import fingerprint, histogram_bins, merged

    if calib.options.stats:
        stats = merged(calib.options.stats, fingerprint(graph, names), list(names))
        if calib.options.method != "minmax" and stats.hist is None:
            raise ConversionError(f"--calibration-method {calib.options.method} needs histograms, and "
                                  f"'{calib.options.stats[0]}' has none: record it with --calibration-method "
                                  f"{calib.options.method} (or --histograms)")
    else:
        stats = collect(graph, calib, names)
    calib.recorded = stats
    lo, hi = dict(stats.lo), dict(stats.hi)
    bad = [n for n in lo if not (np.isfinite(lo[n]) and np.isfinite(hi[n]))]
    if bad:
        raise ConversionError(f"tensor '{bad[0]}' takes non-finite values on the calibration data; "
                              "check the data and the model")
    if calib.options.method == "minmax":
        _in_place_unions(graph, lo, hi, promoted)
        return {n: (lo[n], hi[n]) for n in names if n in lo}
    assert stats.hist is not None
    out = {}
    for n in names:
        if n not in lo:
            continue
        if not hi[n] > lo[n]:
            out[n] = (lo[n], hi[n])
            continue
        counts, edges = histogram_bins(stats.hist[n], lo[n], hi[n])
        if calib.options.method == "percentile":
            out[n] = cm.percentile(counts, edges, calib.options.percentile)
        elif calib.options.method == "entropy":
            out[n] = cm.entropy(counts, edges)
        else:
            out[n] = cm.mse(counts, edges)
    return out


_SCALAR_TENSOR_BYTES = 8  # arena_planner.h kScalarTensorBytes


def _in_place_unions(graph: Graph, lo: dict[str, float], hi: dict[str, float], promoted: frozenset = frozenset()
                     ) -> None:
    """TensorFlow's calibrator runs the float model in a TFLite interpreter and logs each
    op's inputs after the op ran. When the arena planner let an ADD/SUB/MUL write its
    output into an operand's buffer (``ArenaPlanner::IdentifyInPlaceTensors``: the
    first operand, in order, of the same byte size (> 8), read by no other node, not a
    graph input, whose buffer's root is read once, and the output is not a graph
    output), that operand is logged holding the output's values: its range becomes the
    union of both. Measured on TF 2.21 (tests/calibration/test_calibrate.py). An op of a
    --int16/--keep-float island (``promoted``) is left out: the union is an artefact of TensorFlow's
    logging that no TensorFlow file of a mixed model has to match, and it would hand the island's
    int8 operand the island's wide range (an attention's ``scores + mask``: the mask's -1e4)."""
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
        if r is None or not r.in_place or not node.outputs or node in promoted:  # (kTfLiteInplaceOpInput0Shared
            continue  # | ...1Shared)
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
    if pads_a_pool(graph, node):
        return False  # one activation operand: as PAD, the input's range
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
    """Ranges from ``ctx.calibration`` (a :class:`Calibration`); a graph calibrated
    here is post-training quantized (``ctx.legacy_float_scale``)."""
    calib = ctx.calibration
    if calib is None or (not calib.has_data and not calib.ranges):
        return False
    names = candidates(graph)
    unknown = [n for n in calib.ranges if n not in graph.tensors]
    if unknown:
        close = [n for n in graph.tensors if unknown[0].split("/")[-1] in n][:3]
        hint = f" (similar: {', '.join(close)})" if close else ""
        raise ConversionError(f"--ranges-file names tensor '{unknown[0]}', which the graph does not have{hint}")
    if names:  # a graph whose every range comes from FakeQuants stays on the QAT arithmetic
        ctx.legacy_float_scale = True  # TensorFlow's post-training quantizer (mlir_quantize)
    choose_int16_ops(graph, ctx)
    t0 = time.perf_counter()
    stats = record_ranges(graph, calib, names, _promoted(graph, ctx)) if calib.has_data else {}
    seconds = time.perf_counter() - t0
    if calib.options.save_stats is not None and calib.recorded is not None:
        calib.recorded.save(calib.options.save_stats)
    kept = drop_redundant(graph, stats, ctx.activation_bits == 16)
    by_hand = dict(calib.ranges)
    _widen_for_kernels(graph, kept, ctx)
    _widen_for_kernels(graph, by_hand, ctx)
    states = _state_ranges(graph, {**kept, **{n: r for n, r in by_hand.items() if n in names}}, stats, kept)
    for name in names:
        if name in states:
            continue
        if name not in by_hand and name in kept:
            insert_qdq_after(graph, name, calibrated_range_params(*kept[name], num_bits=ctx.bits(graph.producer(name))),
                             Origin.CALIBRATION)
    for name, (lo, hi) in by_hand.items():
        if not hi >= lo:
            raise ConversionError(f"--ranges-file: tensor '{name}' has min {lo} > max {hi}")
        if name in states:
            continue
        if name not in names:
            why = ("is a constant (weights and biases get their parameters from their values)"
                   if graph.is_const(name) else "already has a range (a FakeQuant or --inputs-range)")
            raise ConversionError(f"--ranges-file: tensor '{name}' {why}; remove it from the file")
        insert_qdq_after(graph, name, calibrated_range_params(lo, hi, num_bits=ctx.bits(graph.producer(name))),
                         Origin.RANGES_FILE)
    int16_boundaries(graph, ctx, {**stats, **kept, **by_hand})
    _warn_zero_divisors(graph, {**kept, **by_hand}, ctx)
    if calib.recorded is not None:
        where = f"{len(calib.options.stats)} statistics file(s), " if calib.options.stats else ""
        engine = f", {calib.engine_used.replace(':', ' engine:', 1) if ':' in calib.engine_used else calib.engine_used + ' engine'}" \
            if calib.engine_used and not calib.options.stats else ""
        ctx.note(f"calibrated {len(kept)} tensor range(s) on {where}{calib.recorded.samples} sample(s) "
                 f"in {seconds:.2f} s ({calib.options.method}{engine})")
    return bool(names) or bool(by_hand)


def _promoted(graph: Graph, ctx: Context) -> frozenset:
    """The ops --int16 and --keep-float take (the latter chosen again in ``prepare``)."""
    keep = ctx.options.precision.keep_float
    floats = choose_ops(graph, keep, "--keep-float", "keeps float") if keep else {}
    return frozenset(ctx.int16_ops) | frozenset(floats)


def _warn_zero_divisors(graph: Graph, ranges: dict[str, tuple[float, float]], ctx: Context) -> None:
    """An int8 divisor (the op table's ``divisor_slot``: DIV) whose calibrated values come within half
    a quantization step of 0 quantizes some of them to its zero point, and LiteRT's int8 DIV (and
    ``run``) stop on a zero divisor: said in one line with the fix (dp_net's ``sqrt(a² + b² + ε)``:
    12 of 32 held-out samples stopped)."""
    for node in graph.nodes:
        op_row = row(node.op)
        if op_row is None or op_row.divisor_slot is None or ctx.bits(node) != 8:
            continue
        divisor = source_of(graph, node.inputs[op_row.divisor_slot])[0]  # before the calibrated pair
        if divisor not in ranges or graph.is_const(divisor):
            continue
        lo, hi = ranges[divisor]
        half_step = calibrated_range_params(lo, hi).scale[0] / 2
        if lo < half_step and hi > -half_step:
            ctx.note(f"{node.op} '{node.name}': its divisor '{divisor}' takes values within half an int8 step "
                     f"({half_step:.3g}) of 0 (calibrated [{lo:.3g}, {hi:.3g}]); they quantize to 0 and LiteRT's int8 "
                     f"{node.op} stops on a zero divisor: keep it float (--keep-float '^{re.escape(divisor)}$') or bound it "
                     f"away from 0")


def _widen_for_kernels(graph: Graph, ranges: dict[str, tuple[float, float]], ctx: Context) -> None:
    """An int8 op whose kernel needs a least input scale (the op table's ``least_input_scale``:
    SOFTMAX's reference kernel and TFLite Micro's abort at or below ``2**-26 / beta``) gets its
    calibrated input range widened about its centre to the smallest width they take, with a note
    naming the tensor. Near-constant scores (an untrained attention at a larger input) get such
    ranges; TensorFlow writes them as they are (its file aborts LiteRT REF, measured)."""
    for node in graph.nodes:
        op_row = row(node.op)
        if op_row is None or op_row.least_input_scale is None or ctx.bits(node) != 8:
            continue
        least = op_row.least_input_scale(node.attrs)
        tensor = node.inputs[0]
        while tensor not in ranges:  # an op moving elements shares its input's range
            producer = graph.producer(tensor)
            producer_row = row(producer.op) if producer is not None else None
            if producer_row is None or not producer_row.moves_elements:
                break
            tensor = producer.inputs[0]  # type: ignore[union-attr]
        if tensor not in ranges or not least > 0:
            continue
        lo, hi = ranges[tensor]
        if not hi >= lo or calibrated_range_params(lo, hi).scale[0] > least:
            continue
        width = 255.0 * least
        while True:
            new_lo, new_hi = (lo + hi - width) / 2, (lo + hi + width) / 2
            if calibrated_range_params(new_lo, new_hi).scale[0] > least:
                break
            width *= 1.0 + 2.0**-20
        ranges[tensor] = (new_lo, new_hi)
        ctx.note(f"{node.op} '{node.name}': input '{tensor}' range [{lo:.3g}, {hi:.3g}] widened to "
                 f"[{new_lo:.3g}, {new_hi:.3g}] (int8 scale above {least:.3g}, the least LiteRT's reference "
                 f"kernel and TFLite Micro accept; TensorFlow writes the narrower scale, which they refuse); "
                 f"near-constant values: is the model trained?")


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Calibration progress on stderr: on a terminal one line redrawn in place (bar, samples/s,
    ETA, at most 10 times a second); elsewhere (CI logs, a redirected stderr) one line at every
    10 %. Called as ``progress(done, total)``; ``done == 0`` starts the clock."""

    def __init__(self, stream=None, tty: bool | None = None,  # type: ignore[no-untyped-def]
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.t0: float | None = None
        self.shown_tenths = 0
        self.last = -1.0

    def __call__(self, done: int, total: int) -> None:
        now = self.clock()
        if self.t0 is None or done == 0:
            self.t0, self.shown_tenths, self.last = now, 0, -1.0
            if done == 0:
                return
        elapsed = max(now - self.t0, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else 0.0
        if self.tty:
            if done < total and now - self.last < 0.1:
                return
            self.last = now
            width = 30
            filled = width * done // max(total, 1)
            end = "\n" if done >= total else ""
            self.stream.write(f"\rcalibrating [{'#' * filled}{'.' * (width - filled)}] {done}/{total} "
                              f"{rate:.1f} samples/s ETA {_clock(eta)} {end}")
        else:
            tenths = 10 * done // max(total, 1)
            if tenths <= self.shown_tenths:
                return
            self.shown_tenths = tenths
            self.stream.write(f"calibrating: {done}/{total} samples ({100 * done // max(total, 1)} %), "
                              f"{rate:.1f} samples/s, elapsed {_clock(elapsed)}, ETA {_clock(eta)}\n")
        self.stream.flush()
