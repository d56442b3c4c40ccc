"""``qconvert tune MODEL --calibration-data X --eval-data Y --min-snr DB -o OUT.tflite``: the smallest
per-tensor promotion (``--int16`` or ``--keep-float``) whose file meets an error budget (docs/tune.md).

1. Calibrate once (the statistics are kept in a temporary ``--stats`` file: every candidate
   conversion after that only quantizes).
2. Score: the output SNR (dB) of a candidate file against the float model, as ``compare``
   computes it (its running sums; the float side is qconvert's float executor on the fused float
   graph, the quantized side LiteRT's built-in kernels, which run int8, 16x8 and float islands
   alike); with ``--max-drop`` also the share of samples whose top-1 class differs from the float
   model's. Tuning scores on the last quarter of the calibration samples (at most ``TUNE_SAMPLES``,
   in file order; calibration does not see them).
3. Sensitivity: for every tensor a compute op writes, the output SNR when that tensor alone is
   kept float (its producer and every reader: precision belongs to a tensor). One quantization per
   tensor; float is the most that promoting the tensor can give, whatever the cause (an activation
   range, a wide weight or constant), so the ranking does not depend on the mode chosen later.
4. Search, greedy in that order: each tensor is tried in int16 (16x8) and in float on top of
   those already chosen; int16 is kept when it comes within ``INT16_ENOUGH_DB`` of float (or
   meets the budget), float otherwise; a tensor that gains less than ``MIN_GAIN_DB`` is skipped.
   Rounds repeat on what is left (then pairs: a tensor with one its producer reads) until the
   budget is met, or a round gains less than ``ROUND_GAIN_DB`` in all (the budget is out of reach:
   exit 1, saying how close it got). Then each chosen tensor is dropped again if the budget holds
   without it on the tuning samples (last chosen first), the margin given up; if the evaluation
   below fails that pruned choice, the search's own is evaluated instead.
5. Check: the chosen promotion is converted as ``convert --recipe`` would (calibrated on every
   calibration sample) and that file is scored on ``--eval-data``, samples the search never saw;
   only a file that meets the budget there is written (with its recipe).

May import: ``qconvert.api`` (conversions), ``qconvert.converter``, ``qconvert.calibration``
(samples, the float executor), ``qconvert.tools.compare`` (the SNR sums, LiteRT model),
``qconvert.schema`` (reading candidate files), ``qconvert.frontend.load`` (the model, read or frozen
once), ``qconvert.io``, ``qconvert.errors``, ``qconvert.options``.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from qconvert import api
from qconvert.calibration import executor
from qconvert.calibration.data import Samples, load_arrays, samples_from
from qconvert.calibration.precision import choose_ops, compute
from qconvert.converter.conversion import run_conversion
from qconvert.errors import ConversionError, UsageError
from qconvert.frontend.load import model_bytes
from qconvert.io import write_atomic
from qconvert.options import ConvertOptions, recipe_specs
from qconvert.recipe import recipe_kind, write_recipe
from qconvert.schema.reader import read_model
from qconvert.tools.compare import _LiteRTModel, _Stats

TUNE_SAMPLES = 64  # calibration samples the search scores on: the last quarter, at most this many, in file order
TUNE_MARGIN_DB = 1.0  # the search aims this far above --min-snr on the tuning samples (they are few)
INT16_ENOUGH_DB = 1.0  # int16 is chosen when its SNR comes this close to float's
MIN_GAIN_DB = 0.1  # a promotion gaining less is not made
ROUND_GAIN_DB = 1.0  # a round of the search gaining less in all ends it (a budget out of reach)


def pattern(tensor: str) -> str:
    """The exact pattern of one tensor: ``^`` + re.escape(name) + ``$``."""
    return "^" + re.escape(tensor) + "$"


@dataclass(frozen=True)
class Budget:
    min_snr: float | None = None  # dB, output SNR against the float model
    max_drop: float | None = None  # percentage points of top-1 accuracy

    def met(self, m: Measure, labelled: bool = False) -> bool:
        if self.min_snr is not None and not m.snr >= self.min_snr:
            return False
        if self.max_drop is not None:
            drop = m.drop if labelled and m.drop is not None else m.disagree
            if not drop <= self.max_drop:
                return False
        return True

    def text(self) -> str:
        parts = []
        if self.min_snr is not None:
            parts.append(f"{self.min_snr:g} dB output SNR")
        if self.max_drop is not None:
            parts.append(f"a top-1 drop of at most {self.max_drop:g} %")
        return " and ".join(parts)


@dataclass
class Measure:
    snr: float  # dB: the worst output's SNR against the float model
    disagree: float  # % of samples whose top-1 (first output, last axis) differs from the float model's
    accuracy: float | None = None  # % top-1 against --labels
    float_accuracy: float | None = None

    @property
    def drop(self) -> float | None:
        if self.accuracy is None or self.float_accuracy is None:
            return None
        return self.float_accuracy - self.accuracy

    def text(self) -> str:
        s = f"{self.snr:.1f} dB"
        if self.accuracy is not None:
            s += f", top-1 {self.accuracy:.1f} % (float {self.float_accuracy:.1f} %)"
        return s


class Reference:
    """Samples with the float model's outputs on them, computed once; ``measure`` scores a file."""

    def __init__(self, graph: Any, samples: Samples, labels: np.ndarray | None = None) -> None:
        self.graph = graph
        self.feeds: list[dict[str, np.ndarray]] = []
        self.outputs: list[list[np.ndarray]] = []
        for feed in samples.batches(1):
            self.feeds.append({n: feed[n] for n in graph.inputs})
            out = executor.run(graph, self.feeds[-1], fake_quant=False)
            self.outputs.append([np.asarray(out[n], np.float64) for n in graph.outputs])
        self.labels = labels
        if labels is not None and len(labels) != len(self.feeds):
            raise UsageError(f"--labels has {len(labels)} label(s), --eval-data {len(self.feeds)} sample(s); "
                             "give one label per evaluation sample, in order")
        self.float_top1 = [int(np.argmax(o[0].reshape(-1))) for o in self.outputs]
        self.float_accuracy = (100.0 * float(np.mean(np.asarray(self.float_top1) == labels.reshape(-1)))
                               if labels is not None else None)

    def __len__(self) -> int:
        return len(self.feeds)

    def measure(self, data: bytes) -> Measure:
        model = _LiteRTModel(data, keep_all=False)
        tensors = model.tensors
        sums = [_Stats() for _ in self.graph.outputs]
        differ = hits = 0
        for k, feed in enumerate(self.feeds):
            feeds = {tensors[i].name: feed[n] for i, n in zip(model.model.inputs, self.graph.inputs)}
            outs, _ = model.run(feeds, trace=False, quantize_inputs=True)
            for j, (i, name) in enumerate(zip(model.model.outputs, model.output_names)):
                t, q = tensors[i], outs[name].astype(np.float64)
                if t.dtype != "float32":
                    q = (q - (t.zero_point[0] if t.zero_point else 0)) * (t.scale[0] if t.scale else 1.0)
                f = self.outputs[k][j]
                sums[j].add(f.reshape(q.shape), q)
                if j == 0:
                    top = int(np.argmax(q.reshape(-1)))
                    differ += top != self.float_top1[k]
                    if self.labels is not None:
                        hits += top == int(self.labels.reshape(-1)[k])
        n = max(len(self.feeds), 1)
        acc = 100.0 * hits / n if self.labels is not None else None
        return Measure(min(s.snr_db() for s in sums), 100.0 * differ / n, acc, self.float_accuracy)


@dataclass
class Row:
    """One tensor of the sensitivity table."""

    tensor: str
    op: str  # the producer's op type
    ops: int  # compute ops a promotion of it takes (producer and readers)
    alone: float  # output SNR (tuning samples) with this tensor alone kept float
    mode: str = ""  # "int16" / "float" when chosen
    covers: tuple[tuple[str, str], ...] = ()  # (op type, first output) of each op the promotion takes


@dataclass
class Step:
    """One decision of the search, as its progress line says it (the HTML report draws them)."""

    kind: str  # "chosen", "skipped", "pruned", "reverted", "stopped"
    tensors: tuple[str, ...]
    mode: str  # the mode chosen ("int16" / "float"), "" otherwise
    tried: dict[str, float]  # mode -> output SNR (dB, tuning samples) of the trial
    snr: float  # the output SNR (tuning samples) of the choice after this step
    text: str  # the progress line


@dataclass
class Tuned:
    met: bool
    budget: Budget
    compute_ops: int
    full: Measure  # full int8 on the tuning samples
    full_eval: Measure  # ... on the evaluation samples
    rows: list[Row]
    chosen: dict[str, str]  # tensor -> "int16" | "float"
    promoted_ops: int
    tuned: Measure  # the chosen file on the tuning samples
    evaluated: Measure  # ... on the evaluation samples
    model: bytes
    conversions: int
    tune_samples: int
    eval_samples: int
    notes: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # every progress line, in order
    steps: list[Step] = field(default_factory=list)
    eval_arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # the evaluation samples, per input
    target_snr: float | None = None  # what the search aimed at on the tuning samples (--min-snr + its margin)
    outputs: list[str] = field(default_factory=list)  # the graph's output tensors (the file's outputs, in order)
    precision: dict[str, Any] = field(default_factory=dict)  # the recipe keys the user set (--per-tensor-weights ...)

    @property
    def recipe(self) -> dict[str, Any]:
        """The recipe that reproduces the file: the precision options the user set, and the patterns chosen."""
        return {**self.precision,
                "keep_float": [pattern(t) for t, m in self.chosen.items() if m == "float"],
                "int16": [pattern(t) for t, m in self.chosen.items() if m == "int16"]}

    def failure(self) -> str:
        """One line: how close the search got and what it would cost."""
        return (f"cannot meet {self.budget.text()}: the best found gives {self.evaluated.text()} on --eval-data "
                f"({len(self)} sample(s); {self.tuned.text()} on the tuning samples) promoting {self.promoted_ops} "
                f"of {self.compute_ops} compute ops ({len(self.chosen)} tensor(s)); full int8 gives "
                f"{self.full_eval.text()}")

    def __len__(self) -> int:
        return self.eval_samples


def _samples(source: Any, shapes: Mapping[str, Any], limit: int | None, options: ConvertOptions,
             what: str) -> Samples:
    c = options.calibration
    return samples_from(source, shapes, limit, c.seed, c.image_size, c.mean, c.std, what)


def _labels(source: Any) -> np.ndarray:
    """--labels: a .npy, or a .npz of one array (the shared loader: a file that cannot be read is one line)."""
    if isinstance(source, (str, os.PathLike)):
        loaded = load_arrays(source, "--labels")
        if not isinstance(loaded, np.ndarray):
            files = list(loaded.files)
            if len(files) != 1:
                raise ConversionError(f"--labels '{source}' holds {len(files)} arrays; give one (class ids)")
            try:
                loaded = loaded[files[0]]
            except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
                raise ConversionError(f"cannot read --labels '{source}': {exc}") from None
        source = loaded
    a = np.asarray(source)
    if a.dtype.kind not in "iu":
        raise ConversionError("--labels must hold integer class ids (one per evaluation sample)")
    return a.reshape(-1)


def check_usage(options: ConvertOptions, min_snr: float | None, max_drop: float | None, labels: Any) -> None:
    if min_snr is None and max_drop is None:
        raise UsageError("tune needs a budget: --min-snr DB and/or --max-drop PCT (with --labels)")
    if max_drop is not None and labels is None:
        raise UsageError("--max-drop needs --labels (the evaluation samples' class ids)")
    if labels is not None and max_drop is None:
        raise UsageError("--labels is for --max-drop; add --max-drop PCT")
    if max_drop is not None and not max_drop >= 0:
        raise UsageError(f"--max-drop {max_drop:g}: expected a percentage >= 0")
    if min_snr is not None and not math.isfinite(min_snr):
        raise UsageError(f"--min-snr {min_snr}: expected a finite number of dB")
    c, p = options.calibration, options.precision
    if c.data is None:
        raise UsageError("tune needs --calibration-data (it calibrates once and measures sensitivity on it)")
    if p.recipe is not None:
        raise UsageError("tune chooses the precision itself: drop --recipe (its keys are what --recipe-out writes)")
    if p.dynamic_range or p.activations != "int8" or p.inference_type != "int8":
        raise UsageError("tune promotes tensors of an int8 model: drop --activations/--block-size/--inference-type")


def tune(model: bytes | str | os.PathLike, options: ConvertOptions, eval_data: Any, min_snr: float | None = None,
         max_drop: float | None = None, labels: Any = None,
         echo: Callable[[str], None] = lambda s: None) -> Tuned:
    """Search the smallest promotion meeting the budget (module docstring). Writes nothing."""
    check_usage(options, min_snr, max_drop, labels)
    budget = Budget(min_snr, max_drop)
    log: list[str] = []
    steps: list[Step] = []

    def say(line: str) -> None:  # every progress line is also kept for the report
        log.append(line)
        echo(line)
    # read once: every candidate converts from these bytes (a SavedModel or Keras file frozen by
    # TensorFlow once, its signature's inputs and outputs in the options, as convert takes them)
    model, inputs, outputs = model_bytes(model, options.inputs, options.outputs)
    if (inputs, outputs) != (options.inputs, options.outputs):
        options = options.replace(inputs=inputs, outputs=outputs)
    c = options.calibration
    floats = run_conversion(model, options, stop_before="calibrate").graph
    shapes = {n: floats.tensors[n].shape for n in floats.inputs}
    # the evaluation samples and their labels are opened (and counted) before anything is calibrated
    eval_samples = _samples(eval_data, shapes, None, options, "--eval-data")
    label_ids = _labels(labels) if labels is not None else None
    if label_ids is not None and len(label_ids) != len(eval_samples):
        raise UsageError(f"--labels has {len(label_ids)} label(s), --eval-data {len(eval_samples)} sample(s); "
                         "give one label per evaluation sample, in order")
    whole = _samples(c.data, shapes, c.samples, options, "calibration data").read_all()
    total = len(next(iter(whole.values())))
    held = min(TUNE_SAMPLES, total // 4)
    if held < 1:
        raise UsageError(f"tune needs at least 4 calibration samples (it scores candidates on a quarter of them, "
                         f"which calibration does not see); --calibration-data has {total}")
    keep = {"histograms": True} if c.method != "minmax" else {}
    calibrated = run_conversion(model, options.replace(
        calibration_data={n: a[:total - held] for n, a in whole.items()}, calibration_samples=None, **keep),
        stop_before="prepare")
    if calibrated.stats is None:
        raise ConversionError("the graph has no tensor to calibrate: every range comes from FakeQuants; "
                              "tune works on float graphs")
    say(f"calibrated on {calibrated.stats.samples} sample(s); {held} more set aside for tuning; the float "
         f"model's outputs on them and on the evaluation samples")
    tune_ref = Reference(floats, Samples.from_arrays({n: a[total - held:] for n, a in whole.items()}))
    eval_ref = Reference(floats, eval_samples, label_ids)

    graph = calibrated.graph
    candidates = [(node, out) for node in graph.nodes if compute(node) for out in node.outputs if out]
    takes = {out: choose_ops(graph, (pattern(out),), "--keep-float", "keeps float") for _, out in candidates}
    n_compute = sum(1 for node in graph.nodes if compute(node))

    with tempfile.TemporaryDirectory(prefix="qconvert-tune-") as tmp:
        stats_file = os.path.join(tmp, "stats.npz")
        calibrated.stats.save(stats_file)
        base = options.replace(calibration_data=None, calibration_samples=None, stats=[stats_file])
        count = [0]

        def convert(chosen: Mapping[str, str]) -> bytes:
            count[0] += 1
            return api.convert(model, None, base.replace(
                keep_float=[pattern(t) for t, m in chosen.items() if m == "float"],
                int16=[pattern(t) for t, m in chosen.items() if m == "int16"])).model

        def convert_all(chosen: Mapping[str, str]) -> bytes:
            """The file `convert --recipe` writes: calibrated on every --calibration-data sample."""
            count[0] += 1
            return api.convert(model, None, options.replace(
                keep_float=[pattern(t) for t, m in chosen.items() if m == "float"],
                int16=[pattern(t) for t, m in chosen.items() if m == "int16"])).model

        full_model = convert({})
        full = tune_ref.measure(full_model)
        say(f"full int8: {full.text()} on {len(tune_ref)} tuning sample(s); {n_compute} compute ops, "
             f"{len(candidates)} tensor(s) to try")
        rows: list[Row] = []
        chosen: dict[str, str] = {}
        current = full
        target = Budget(min_snr + TUNE_MARGIN_DB if min_snr is not None else None, max_drop)
        producer_of = {out: node for node, out in candidates}
        pairs = False  # a round of pairs: a tensor with a tensor its producer reads (in-place range unions)
        round_no = 0
        while not target.met(current):
            round_no += 1
            alive = [(node, out) for node, out in candidates if out not in chosen]
            units: list[tuple[str, ...]] = [(out,) for _, out in alive] if not pairs else [
                (out, i) for node, out in alive for i in dict.fromkeys(_source(graph, x) for x in node.inputs if x)
                if i in producer_of and i not in chosen]
            if not units:
                break
            scores: list[tuple[float, int, tuple[str, ...]]] = []  # (float on top of the chosen, order, unit)
            for k, unit in enumerate(units):
                trial = _with(chosen, unit, "float", takes)
                what = " + ".join(f"'{t}'" for t in unit)
                try:
                    snr = tune_ref.measure(convert(trial)).snr  # type: ignore[arg-type]
                except (ConversionError, UsageError) as exc:  # cannot be kept float here: never chosen
                    say(f"sensitivity {k + 1}/{len(units)}: {what} cannot be promoted ({exc})")
                    continue
                scores.append((snr, k, unit))
                if round_no == 1:
                    rows.append(Row(unit[0], producer_of[unit[0]].op, len(takes[unit[0]]), snr,
                                    covers=tuple((n.op, n.outputs[0] if n.outputs else n.name) for n in takes[unit[0]])))
                word = "float alone" if round_no == 1 else f"float on top (round {round_no})"
                say(f"sensitivity {k + 1}/{len(units)}: {what} ({producer_of[unit[0]].op}) {word}: {snr:.1f} dB")
            added, start = False, current.snr  # the scores are gains over the round's start
            for snr, _, unit in sorted(scores, key=lambda s: (-s[0], s[1])):
                if target.met(current) or snr < start + MIN_GAIN_DB:
                    break  # met, or nothing further down the list gains on its own
                if any(t in chosen for t in unit):
                    continue
                what = " + ".join(f"'{t}'" for t in unit)
                tried: dict[str, Measure] = {}
                trials = {mode: _with(chosen, unit, mode, takes) for mode in ("int16", "float")}
                for mode, trial in trials.items():
                    if trial is None:
                        continue
                    try:
                        tried[mode] = tune_ref.measure(convert(trial))
                    except (ConversionError, UsageError):  # no 16x8 form of an op, ...
                        continue
                best = _pick(tried, target)
                if best == "int16" and tried["int16"].snr < current.snr + MIN_GAIN_DB and "float" in tried \
                        and tried["float"].snr >= current.snr + MIN_GAIN_DB:
                    best = "float"  # int16 gains nothing where float does
                if best is None or tried[best].snr < current.snr + MIN_GAIN_DB and not target.met(tried[best]):
                    say(f"search: {what} gains nothing on top "
                         f"({', '.join(f'{m} {v.snr:.1f} dB' for m, v in tried.items())}): skipped")
                    steps.append(Step("skipped", unit, "", {m: v.snr for m, v in tried.items()}, current.snr, log[-1]))
                    continue
                chosen, current, added = trials[best], tried[best], True  # type: ignore[assignment]
                say(f"search: {what} {best} -> {current.text()}")
                steps.append(Step("chosen", unit, best, {m: v.snr for m, v in tried.items()}, current.snr, log[-1]))
            if added and current.snr < start + ROUND_GAIN_DB and not target.met(current):
                say(f"search: round {round_no} gained {current.snr - start:.1f} dB (less than {ROUND_GAIN_DB:g}); "
                     f"stopping: the budget is out of reach at this rate")
                steps.append(Step("stopped", (), "", {}, current.snr, log[-1]))
                break
            if added:
                pairs = False
            elif not pairs:
                pairs = True
            else:
                break
        searched, searched_measure = dict(chosen), current
        if chosen and target.met(current):
            # drop what the others made unnecessary: down to the budget itself on the tuning samples
            # (the margin was for the search); the evaluation below decides whether that holds
            for tensor in list(reversed(chosen)):
                rest = {t: m for t, m in chosen.items() if t != tensor}
                m = tune_ref.measure(convert(rest))
                if budget.met(m):
                    say(f"prune: '{tensor}' not needed ({m.text()} without it)")
                    chosen, current = rest, m
                    steps.append(Step("pruned", (tensor,), "", {}, m.snr, log[-1]))
        final = convert_all(chosen)
        evaluated = eval_ref.measure(final)
        if chosen != searched and not budget.met(evaluated, labelled=True):
            say(f"evaluation: the pruned choice gives {evaluated.text()}; back to the search's choice "
                 f"(its {TUNE_MARGIN_DB:g} dB margin)")
            chosen, current = searched, searched_measure
            steps.append(Step("reverted", tuple(chosen), "", {}, current.snr, log[-1]))
            final = convert_all(chosen)
            evaluated = eval_ref.measure(final)
        for row in rows:
            row.mode = chosen.get(row.tensor, "")
        full_eval = eval_ref.measure(convert_all({})) if chosen else evaluated
        promoted = set().union(*(takes[t] for t in chosen)) if chosen else set()
        met = budget.met(current) and budget.met(evaluated, labelled=True)
        say(f"evaluation on {len(eval_ref)} held-out sample(s): {evaluated.text()}")
        eval_arrays = {n: np.concatenate([f[n] for f in eval_ref.feeds]) for n in floats.inputs}
        return Tuned(met, budget, n_compute, full, full_eval, rows, chosen, len(promoted), current, evaluated,
                     final, count[0], len(tune_ref), len(eval_ref), log=log, steps=steps, eval_arrays=eval_arrays,
                     target_snr=target.min_snr, outputs=[_source(graph, o) for o in graph.outputs],
                     precision=user_precision(options))


def user_precision(options: ConvertOptions) -> dict[str, Any]:
    """The recipe keys the user set (those that differ from their defaults), but the patterns tune chooses."""
    keys = {s.key for s in recipe_specs()} - {"keep_float", "int16"}
    return {k: v for k, v in options.changed().items() if k in keys}


def _source(graph: Any, tensor: str) -> str:
    """The tensor behind a chain of QUANTIZE / DEQUANTIZE nodes (the calibrated pairs)."""
    while True:
        node = graph.producer(tensor)
        if node is None or compute(node) or not node.inputs:
            return tensor
        tensor = node.inputs[0]


def _with(chosen: Mapping[str, str], unit: Sequence[str], mode: str, takes: Mapping[str, Any]
          ) -> dict[str, str] | None:
    """``chosen`` with the tensors of ``unit`` in ``mode``. An op has one precision: an int16 promotion
    sharing an op with a float one is impossible (None); a float one turns the int16 ones it shares ops
    with float."""
    out = dict(chosen)
    ops = set().union(*(takes[t].keys() for t in unit))
    for other, m in chosen.items():
        if m != mode and takes[other].keys() & ops:
            if mode == "int16":
                return None
            out[other] = "float"
    for t in unit:
        out[t] = mode
    return out


def _pick(tried: Mapping[str, Measure], budget: Budget) -> str | None:
    """int16 when it suffices (meets the budget, or comes within INT16_ENOUGH_DB of float), else float."""
    if "int16" in tried and (budget.met(tried["int16"]) or "float" not in tried
                             or tried["int16"].snr >= tried["float"].snr - INT16_ENOUGH_DB):
        return "int16"
    return "float" if "float" in tried else None


# ---------------------------------------------------------------------------------- output


def check_targets(output: str | os.PathLike | None, recipe_out: str | os.PathLike | None,
                  *reports: str | os.PathLike | None) -> None:
    """What ``write`` (and the reports) need, checked before the search: the directories exist, the recipe
    is .toml/.json."""
    if recipe_out is not None:
        recipe_kind(os.fspath(recipe_out), f"--recipe-out '{os.fspath(recipe_out)}'")
    for target in (output, recipe_out, *reports):
        if target is not None and not Path(target).resolve().parent.is_dir():
            raise ConversionError(f"cannot write '{target}': directory '{Path(target).parent}' does not exist")


def write(result: Tuned, output: str | os.PathLike, recipe_out: str | os.PathLike | None) -> None:
    """The model, then the recipe (a budget met only: the caller checks ``result.met``)."""
    check_targets(output, recipe_out)
    write_atomic(output, result.model)
    if recipe_out is not None:
        write_recipe(recipe_out, result.recipe, [
            f"qconvert tune: {result.budget.text()}; {result.evaluated.text()} on {result.eval_samples} evaluation "
            f"sample(s), full int8 {result.full_eval.text()}",
            f"{result.promoted_ops} of {result.compute_ops} compute ops promoted; use: qconvert convert MODEL "
            f"--recipe THIS_FILE (or these keys in a batch manifest)"])


def render_table(result: Tuned) -> str:
    from qconvert.tools.text import table as text_table

    head = [f"full int8: {result.full.text()} on {result.tune_samples} tuning sample(s), "
            f"{result.full_eval.text()} on {result.eval_samples} evaluation sample(s)"]
    rows = [["tensor", "op", "ops", "float alone dB", "chosen"]]
    for r in sorted(result.rows, key=lambda r: -r.alone):
        rows.append([r.tensor, r.op, str(r.ops), f"{r.alone:.1f}", r.mode or "-"])
    tail = [f"chosen: {', '.join(f'{t} {m}' for t, m in result.chosen.items()) or 'nothing (full int8)'}; "
            f"{result.promoted_ops} of {result.compute_ops} compute ops promoted; {result.tuned.text()} on the tuning "
            f"samples, {result.evaluated.text()} on the evaluation samples ({result.conversions} conversions)"]
    body = text_table(rows, right=(2, 3)) if len(rows) > 1 else []
    return "\n".join([*head, *body, *tail]) + "\n"
