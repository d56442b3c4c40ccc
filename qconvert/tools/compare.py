"""``qconvert compare MODEL.pb MODEL.tflite --data x.npz``: where quantization loses accuracy.

Both models run on the same float samples:

* the float graph: the .pb imported and taken through qconvert's legalize, fold and fusion
  passes (the float model whose tensors get quantized), run by the float executor with its
  FakeQuants passed through (``--fake-quant`` keeps them), so the reference is the model
  as it would compute in float;
* the int8 model: ``qconvert run``'s integer executor (float inputs quantized at the
  boundary) — or, for a file it does not take (TensorFlow's own, or one with float ops
  left in), LiteRT's built-in kernels with every tensor kept; each int8 tensor is
  dequantized with its scale and zero point.

Tensors are mapped by name (qconvert names each op output after the float op it comes
from); model inputs and outputs by position. Per mapped tensor:

* ``snr_db``: 10·log10(Σf² / Σ(f−q)²) end to end (errors of earlier layers included);
* ``cosine``: Σf·q / (‖f‖·‖q‖);
* ``max_abs_error`` (float units), ``max_error_lsb``, ``mean_error_lsb`` (signed: a bias) and
  ``mean_abs_error_lsb``, in units of the tensor's scale;
* ``local_snr_db``: the op alone — its int8 output against the float op run on the very
  (dequantized) int8 inputs it read, float weights — so a layer that loses accuracy itself
  (a clipping range, coarse weights) stands out from one that inherits its input's error.
  Layers are ranked worst-first by it.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from qconvert.calibration import executor
from qconvert.calibration.calibrate import Calibration
from qconvert.calibration.data import GLOB_CHARS, Samples, as_samples, open_samples
from qconvert.converter.conversion import is_tflite, load_graph
from qconvert.converter.pipeline import run
from qconvert.errors import ConversionError, RunError
from qconvert.frontend.importer import import_graph
from qconvert.frontend.load import read_nodes
from qconvert.io import write_atomic
from qconvert.ir import Graph
from qconvert.ir.qdq import is_dequantize, is_quantize
from qconvert.ops import Rule
from qconvert.ops import row as op_row
from qconvert.options import ConvertOptions
from qconvert.quant import round_half_away_array
from qconvert.runtime.interpreter import quantize_float
from qconvert.schema.litert import interpreter
from qconvert.schema.reader import read_model as read_tflite
from qconvert.tools.jsonable import finite_or_inf
from qconvert.tools.run import read_model as read_integer_model
from qconvert.tools.text import table as text_table


@dataclass
class _Stats:
    """Running sums over samples for one tensor."""

    signal: float = 0.0  # Σ f²
    noise: float = 0.0  # Σ (f - q)²
    dot: float = 0.0  # Σ f q
    quant: float = 0.0  # Σ q²
    max_abs: float = 0.0
    err_sum: float = 0.0
    abs_sum: float = 0.0
    count: int = 0

    def add(self, f: np.ndarray, q: np.ndarray) -> None:
        f = f.astype(np.float64).reshape(-1)
        q = q.astype(np.float64).reshape(-1)
        e = q - f
        self.signal += float(f @ f)
        self.noise += float(e @ e)
        self.dot += float(f @ q)
        self.quant += float(q @ q)
        if e.size:
            self.max_abs = max(self.max_abs, float(np.abs(e).max()))
        self.err_sum += float(e.sum())
        self.abs_sum += float(np.abs(e).sum())
        self.count += e.size

    def snr_db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    def cosine(self) -> float:
        if self.signal == 0.0 or self.quant == 0.0:
            return 1.0 if self.signal == self.quant else 0.0
        return self.dot / math.sqrt(self.signal * self.quant)


@dataclass
class Row:
    index: int  # operator index in the .tflite
    op: str
    tensor: str
    shape: tuple[int, ...]
    scale: float
    zero_point: int
    e2e: _Stats = field(default_factory=_Stats)
    local: _Stats = field(default_factory=_Stats)
    dtype: str = "int8"  # int8, int16, or float32 (a float island's tensor, measured as it is)

    def as_dict(self) -> dict[str, Any]:
        lsb = self.scale or 1.0
        n = max(self.e2e.count, 1)
        quantized = self.dtype != "float32"  # a float island's tensor has no LSB: its errors in float units only
        return {
            "index": self.index, "op": self.op, "tensor": self.tensor, "shape": list(self.shape), "dtype": self.dtype,
            "scale": self.scale if quantized else None, "zero_point": self.zero_point if quantized else None,
            "snr_db": finite_or_inf(self.e2e.snr_db()), "cosine": self.e2e.cosine(),
            "max_abs_error": self.e2e.max_abs, "max_error_lsb": self.e2e.max_abs / lsb if quantized else None,
            "mean_error_lsb": self.e2e.err_sum / n / lsb if quantized else None,
            "mean_abs_error_lsb": self.e2e.abs_sum / n / lsb if quantized else None,
            "local_snr_db": finite_or_inf(self.local.snr_db()) if self.local.count else None,
        }


def _sort_key(v: float | str | None) -> float:
    if v is None:
        return math.inf
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return float(v)


# ---------------------------------------------------------------------------
# the float side


def float_graph(nodes: Sequence[Any], inputs: Sequence[str] | None, outputs: Sequence[str] | None,
                input_shapes: Mapping[str, Sequence[int]] | None) -> Graph:
    """A GraphDef's nodes taken through qconvert's passes up to (not including) quantization
    parameters: the float model whose tensors the int8 model quantizes."""

    graph = import_graph(nodes, inputs, outputs, input_shapes)
    options = ConvertOptions.of(input_shapes=dict(input_shapes or {}), inputs=inputs, outputs=outputs)
    return run(graph, options, Calibration(), stop_before="calibrate")[0]  # as if calibrating: no input range


def _fake_quant_chain(graph: Graph, name: str) -> list[Any]:
    """The QUANTIZE → DEQUANTIZE pair (a legalized FakeQuant) that alone reads ``name``, if any."""
    readers = graph.consumers(name)
    if len(readers) != 1 or not is_quantize(readers[0]):
        return []
    after = graph.consumers(readers[0].outputs[0])
    if len(after) != 1 or not is_dequantize(after[0]):
        return []
    return [readers[0], after[0]]


def _float_name(graph: Graph, name: str) -> str:
    """The float tensor behind a chain of QUANTIZE / DEQUANTIZE nodes."""
    while True:
        node = graph.producer(name)
        if not (is_quantize(node) or is_dequantize(node)):
            return name
        name = node.inputs[0]


# ---------------------------------------------------------------------------
# the int8 side


class _LiteRTModel:
    """A .tflite that ``qconvert run`` does not take (float ops left in, an op it has no kernel
    for): LiteRT's built-in kernels (no delegate), every tensor kept."""

    engine = "LiteRT built-in kernels"
    notes: tuple[str, ...] = ()  # LiteRT's own kernels: nothing departs from them

    def __init__(self, data: bytes, keep_all: bool = True) -> None:
        try:
            self.model = read_tflite(data)
        except ValueError as exc:
            raise RunError(str(exc)) from None

        try:
            self._it = interpreter(data, preserve_all_tensors=keep_all)
        except ValueError as exc:
            raise RunError(f"LiteRT cannot load the .tflite: {exc}") from None
        self.tensors = self.model.tensors
        self.input_names = [self.tensors[i].name for i in self.model.inputs]
        self.output_names = [self.tensors[i].name for i in self.model.outputs]

    def run(self, feeds: Mapping[str, np.ndarray], trace: bool, quantize_inputs: bool) -> Any:
        for i, name in zip(self.model.inputs, self.input_names):
            t, x = self.tensors[i], np.asarray(feeds[name])
            if t.dtype == "int8" and x.dtype.kind == "f":
                x = quantize_float(x, t.scale[0], t.zero_point[0] if t.zero_point else 0)
            elif t.dtype == "int16" and x.dtype.kind == "f":  # 16x8: zero point 0, the int16 range
                q = round_half_away_array((x.astype(np.float32) / np.float32(t.scale[0])).astype(np.float32))
                x = np.clip(q, -32768, 32767).astype(np.int16)
            self._it.set_tensor(i, x.astype(np.dtype(t.dtype)))
        self._it.invoke()
        if not trace:  # the outputs only
            return {n: self._it.get_tensor(i).copy() for i, n in zip(self.model.outputs, self.output_names)}, {}
        values = {}
        for k, t in enumerate(self.tensors):
            if t.data is None:
                try:
                    values[t.name] = self._it.get_tensor(k).copy()
                except ValueError:
                    pass
        return {n: values[n] for n in self.output_names}, values


def _converts(builtin: str) -> bool:
    """QUANTIZE / DEQUANTIZE (the op table's rule QUANT): a float tensor they write is a boundary, not a row."""
    r = op_row(builtin)
    return r is not None and r.rule is Rule.QUANT


def _int8_model(path: str | os.PathLike, runtime: str = "litert-ref") -> tuple[Any, str]:
    """qconvert's integer executor (``runtime``'s arithmetic) when it takes the file, else LiteRT (and why)."""

    try:
        model = read_integer_model(path, runtime=runtime)
        if runtime != "litert-ref":
            return model, f"integer executor, {runtime} arithmetic"
        if model.computed:  # another converter's file: the kernels' parameters from its scales
            return model, "integer executor; parameters from the file's scales (no qconvert metadata)"
        return model, "integer executor"
    except RunError as exc:
        data = Path(path).read_bytes() if Path(path).is_file() else None
        if data is None:
            raise
        reason = str(exc)
    short = "no qconvert metadata" if "metadata" in reason and "no '" in reason else reason.split(";")[0][:80]
    return _LiteRTModel(data), f"{_LiteRTModel.engine}; {short}"


# ---------------------------------------------------------------------------


@dataclass
class Report:
    pb: str
    tflite: str
    samples: int
    fake_quant: bool
    rows: list[Row]
    unmapped: list[str]
    engine: str = "integer executor"
    notes: list[str] = field(default_factory=list)  # the executor's: where it follows another kernel than REF

    def worst(self, k: int | None = None) -> list[Row]:
        """The k layers with the lowest local SNR (default: 1 per 8 layers, 1 to 5)."""
        scored = [r for r in self.rows if r.local.count]
        k = max(1, min(5, len(self.rows) // 8)) if k is None else k
        return sorted(scored, key=lambda r: _sort_key(finite_or_inf(r.local.snr_db())))[:k]

    def gate(self, min_snr_db: float) -> str | None:
        """None when every layer's end-to-end SNR is at least ``min_snr_db``; else one line."""
        low = [r for r in self.rows if r.e2e.snr_db() < min_snr_db]
        if not low:
            return None
        worst = min(low, key=lambda r: r.e2e.snr_db())
        return (f"{len(low)} layer(s) below {min_snr_db:g} dB SNR; worst '{worst.tensor}' ({worst.op}) at "
                f"{worst.e2e.snr_db():.1f} dB")

    def as_dict(self) -> dict[str, Any]:
        rows = [r.as_dict() for r in self.rows]
        return {"pb": self.pb, "tflite": self.tflite, "engine": self.engine, "samples": self.samples,
                "fake_quant": self.fake_quant,
                "tensors": rows, "worst": [r.tensor for r in self.worst()], "unmapped": self.unmapped, "notes": self.notes,
                "min_snr_db": min((r["snr_db"] for r in rows), key=_sort_key, default=None)}


def compare(pb: str | os.PathLike, tflite: str | os.PathLike, data: str | os.PathLike | Mapping[str, np.ndarray],
            samples: int | None = None, seed: int = 0, fake_quant: bool = False,
            inputs: Sequence[str] | None = None, outputs: Sequence[str] | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None, runtime: str = "litert-ref") -> Report:
    model, engine = _int8_model(tflite, runtime)
    tensors = model.tensors
    if is_tflite(pb):  # a float .tflite: the model the int8 file was converted from
        options = ConvertOptions.of(inputs=inputs, outputs=outputs)
        graph = run(load_graph(pb, options, check=True)[0], options, Calibration(), stop_before="calibrate")[0]
    else:
        nodes, inputs, outputs = read_nodes(pb, inputs, outputs)  # as `convert` reads it
        names = {n.name for n in nodes}
        if inputs is None and all(n in names for n in model.input_names):  # the .tflite's names, when the .pb
            inputs = list(model.input_names)                                # has them (qconvert keeps them)
        if outputs is None and all(n in names for n in model.output_names):
            outputs = list(model.output_names)
        graph = float_graph(nodes, inputs, outputs, input_shapes)
    if len(graph.inputs) != len(model.input_names) or len(graph.outputs) != len(model.output_names):
        raise ConversionError(
            f"the .pb has {len(graph.inputs)} input(s) and {len(graph.outputs)} output(s), the .tflite "
            f"{len(model.input_names)} and {len(model.output_names)}; pass the --inputs/--outputs used to convert")
    for name, i in zip(graph.outputs, model.model.outputs):
        want, got = graph.tensors[name].shape, tuple(tensors[i].shape)
        if want is not None and int(np.prod(want)) != int(np.prod(got)):
            raise ConversionError(f"output '{name}' of the float model has shape {list(want)}, the .tflite's "
                                  f"'{tensors[i].name}' {list(got)}: not the model it was converted from; pass the "
                                  f"--inputs/--outputs used to convert")
    shapes = {name: list(tensors[i].shape) for name, i in zip(graph.inputs, model.model.inputs)}
    if isinstance(data, Mapping):
        arrays = {n: as_samples(n, np.asarray(data[n]), shapes[n], "data") for n in graph.inputs}
        source = Samples.from_arrays({k: v[:samples] for k, v in arrays.items()})
    else:
        if not Path(data).exists() and not GLOB_CHARS & set(str(data)):  # a glob: open_samples expands it
            raise ConversionError(f"--data '{data}' does not exist")
        source = open_samples(data, shapes, limit=samples, seed=seed, what="--data")  # one sample at a time
        if source.images:  # compare has no --mean/--std/--image-size: raw pixels would give wrong SNRs silently
            raise ConversionError(f"--data '{data}' holds images; compare takes arrays (.npz/.npy) of the model's "
                                  f"float inputs: save them with the --mean/--std used to calibrate")
    n = len(source)

    # tflite tensor name -> float tensor name
    mapping: dict[str, str] = {}
    for t in tensors:
        if t.data is not None:
            continue
        # qconvert keeps the float op's name; TensorFlow's converter may join fused ops' names with ';'
        found = [p for p in [t.name, *t.name.split(";")] if p in graph.tensors]
        if found:
            mapping[t.name] = _float_name(graph, found[0])
    for i, name in zip(model.model.inputs, graph.inputs):
        mapping[tensors[i].name] = _float_name(graph, name)
    for i, name in zip(model.model.outputs, graph.outputs):
        mapping[tensors[i].name] = _float_name(graph, name)

    rows: list[Row] = []
    unmapped: list[str] = []
    for k, op in enumerate(model.model.operators):
        t = tensors[op.outputs[0]]
        island = t.dtype == "float32" and not _converts(op.builtin)  # a float island's op
        if t.name not in mapping or t.dtype not in ("int8", "int16") and not island:
            unmapped.append(t.name)
            continue
        rows.append(Row(k, op.builtin, t.name, tuple(t.shape), float(t.scale[0]) if t.scale and not island else 0.0,
                        int(t.zero_point[0]) if t.zero_point and not island else 0, dtype=t.dtype))
    if fake_quant:  # compare with the FakeQuant's output, as the training graph computes it
        chains = {t: _fake_quant_chain(graph, f) for t, f in mapping.items()}
        reference = {t: chains[t][-1].outputs[0] if chains[t] else f for t, f in mapping.items()}
    else:
        chains = {}
        reference = dict(mapping)
    wanted = set(reference.values())

    tflite_of = {f: t for t, f in mapping.items()}  # float tensor -> .tflite tensor
    scales = {t.name: (float(t.scale[0]), int(t.zero_point[0]) if t.zero_point else 0)
              for t in tensors if t.scale and t.data is None}
    for feed in source.batches(1):
        ref: dict[str, np.ndarray] = {}

        def record(name: str, value: np.ndarray) -> None:
            if name in wanted:
                ref[name] = value  # the whole tensor: its leading dimension is not always the batch (windows, heads)

        executor.run(graph, {name: feed[name] for name in graph.inputs}, record=record, fake_quant=fake_quant)
        int_feeds = {tensors[i].name: feed[name] for i, name in zip(model.model.inputs, graph.inputs)}
        _, ints = model.run(int_feeds, trace=True, quantize_inputs=True)
        deq = {name: (v.astype(np.float64) - scales[name][1]) * scales[name][0]
               for name, v in ints.items() if name in scales}
        deq.update({name: np.asarray(v, np.float64) for name, v in ints.items()  # float islands: as they are
                    if name not in scales and np.asarray(v).dtype == np.float32})
        for row in rows:
            f = ref.get(reference[row.tensor])
            if f is None:
                continue
            q = deq[row.tensor]
            row.e2e.add(f.reshape(q.shape), q)
            local = _float_op(graph, mapping[row.tensor], tflite_of, deq)
            for node in chains.get(row.tensor, []) if local is not None else []:
                local = np.asarray(executor.evaluate(graph, node, [local.astype(np.float32)], 1), np.float64)
            if local is not None:
                row.local.add(local.reshape(q.shape), q)
    return Report(str(pb), str(tflite), n, fake_quant, rows, unmapped, engine, list(model.notes))


def _float_op(graph: Graph, name: str, tflite_of: Mapping[str, str],
              deq: Mapping[str, np.ndarray]) -> np.ndarray | None:
    """The float op that produces ``name``, run on the dequantized int8 values its int8
    twin read (constants as float): what the op alone should have given."""

    node = graph.producer(name)
    if node is None:
        return None
    args = []
    for i in node.inputs:
        if not i:
            args.append(None)
            continue
        source = _float_name(graph, i)
        data = graph.const(source)
        if data is not None:
            args.append(data)
        elif tflite_of.get(source) in deq:
            args.append(deq[tflite_of[source]].astype(np.float32))
        else:
            return None
    try:
        return np.asarray(executor.evaluate(graph, node, args, 1), dtype=np.float64)
    except ConversionError:
        return None


# ---------------------------------------------------------------------------
# output


def _num(v: Any, fmt: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    return format(v, fmt)


def render_text(report: Report, worst: int | None = None) -> str:

    doc = report.as_dict()
    bad = {r.tensor for r in report.worst(worst)}
    rows = [["#", "op", "tensor", "SNR dB", "cosine", "max|err|", "max LSB", "mean LSB", "mean|LSB|", "local dB", ""]]
    for r in doc["tensors"]:
        rows.append([str(r["index"]), r["op"], r["tensor"], _num(r["snr_db"], ".1f"), _num(r["cosine"], ".5f"),
                     _num(r["max_abs_error"], ".4g"), _num(r["max_error_lsb"], ".1f"),
                     _num(r["mean_error_lsb"], "+.3f"), _num(r["mean_abs_error_lsb"], ".3f"),
                     _num(r["local_snr_db"], ".1f"), "<< worst" if r["tensor"] in bad else ""])
    lines = [f"compare {report.pb} (float{' with FakeQuant' if report.fake_quant else ''}) "
             f"with {report.tflite} (int8, {report.engine}) on {report.samples} sample(s)", ""]
    lines += text_table(rows, right=(0, 3, 4, 5, 6, 7, 8, 9))
    lines.append("")
    worst_rows = report.worst(worst)
    if worst_rows:
        lines.append("worst layers (by local SNR: the op alone, on the int8 inputs it read): " + ", ".join(
            f"{r.tensor} ({_num(finite_or_inf(r.local.snr_db()), '.1f')} dB)" for r in worst_rows))
    if report.unmapped:
        lines.append(f"not in the float graph: {', '.join(report.unmapped)}")
    for note in report.notes:
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def plot(report: Report, path: str | os.PathLike, worst: int | None = None) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConversionError("--plot needs matplotlib: pip install 'qconvert[plot]'") from None
    rows = report.rows
    cap = 80.0  # dB; an exact layer (inf) or a lossless one is drawn at the cap

    def clip(v: float) -> float:
        return min(max(v, 0.0), cap)

    e2e = [clip(r.e2e.snr_db()) for r in rows]
    local = [clip(r.local.snr_db()) for r in rows]
    bad = {id(r) for r in report.worst(worst)}
    fig, ax = plt.subplots(figsize=(max(8.0, 0.3 * len(rows) + 4), 4.5), dpi=100)
    x = np.arange(len(rows))
    colors = ["#d62728" if id(r) in bad else "#1f77b4" for r in rows]
    ax.bar(x, e2e, color=colors, label="SNR end to end (dB)")
    ax.plot(x, local, "k.", label="SNR of the op alone (dB)")
    for k, r in enumerate(rows):
        if id(r) in bad:
            ax.annotate(f"{local[k]:.1f}", (k, local[k]), textcoords="offset points", xytext=(0, 4),
                        ha="center", fontsize=7, color="#d62728")
    ax.set_xticks(x)
    ax.set_xticklabels([f"{r.index} {r.op}" for r in rows], rotation=75, fontsize=7, ha="right")
    ax.set_ylabel(f"SNR (dB, capped at {cap:g})")
    ax.set_title(f"{Path(report.tflite).name}: per-layer SNR vs float ({report.samples} samples; red = worst)",
                 fontsize=9)
    ax.set_ylim(0, max([*e2e, *local, 10.0]) * 1.1)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()


    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    write_atomic(path, buf.getvalue())
