"""The oracle: TensorFlow's own converter, and LiteRT's reference kernels.

``tf_convert`` converts a corpus model with
``tf.compat.v1.lite.TFLiteConverter.from_frozen_graph`` (int8 inference, input
stats from the model's input ranges). ``compare_models`` checks that two
.tflite files have the same graph inputs/outputs (dtype, shape, scale, zero
point) and produce identical int8 outputs on the same random inputs in LiteRT.

LiteRT runs with ``OpResolverType.BUILTIN_REF`` (reference kernels) so that the
optimized kernels' different rounding neither hides nor invents differences.

TensorFlow is imported lazily: only ``tf_convert`` needs it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

# TensorType enum of the TFLite schema (schema.fbs).
_TENSOR_TYPE_NAMES = {
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 5: "string", 6: "bool",
    7: "int16", 8: "complex64", 9: "int8", 10: "float64",
}


def input_stats(lo: float, hi: float) -> tuple[float, float]:
    """(mean, std) for an int8 input whose real range is [lo, hi].

    int8 stats live in the signed domain: real = (q - mean) / std, so q = -128 maps
    to lo and q = 127 maps to hi.
    """
    std = 255.0 / (hi - lo)
    mean = -128.0 - lo * std
    return mean, std


def tf_convert(model: Any) -> bytes:
    """Convert a CorpusModel with TensorFlow's converter (int8 inference)."""
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="qconvert-oracle-") as tmp:
        path = os.path.join(tmp, f"{model.name}.pb")
        with open(path, "wb") as f:
            f.write(model.graph_def)
        conv = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(
            path, list(model.inputs), list(model.outputs), {k: list(v) for k, v in model.shapes.items()}
        )
        conv.inference_type = tf.int8
        conv.quantized_input_stats = {n: input_stats(*model.input_ranges[n]) for n in model.inputs}
        return conv.convert()


# ---------------------------------------------------------------------------
# LiteRT
# ---------------------------------------------------------------------------


def _interpreter(tflite: bytes) -> Any:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    interp = Interpreter(
        model_content=bytes(tflite), experimental_op_resolver_type=OpResolverType.BUILTIN_REF
    )
    interp.allocate_tensors()
    return interp


def _feed_order(details: list[dict], feeds: dict[str, np.ndarray]) -> list[tuple[dict, np.ndarray]]:
    """Pair the interpreter's inputs with the feeds.

    Rule: when every interpreter input name is a key of ``feeds``, match by name;
    otherwise match by position (``feeds`` in insertion order against
    ``get_input_details()`` order). TF's converter usually keeps placeholder names,
    but a converter is free to name tensors differently, and position is the
    only thing the two files must share then.
    """
    if len(details) != len(feeds):
        raise ValueError(f"model has {len(details)} inputs, {len(feeds)} feeds given")
    names = [d["name"] for d in details]
    if all(n in feeds for n in names):
        return [(d, feeds[d["name"]]) for d in details]
    return list(zip(details, feeds.values()))


def _run(interp: Any, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    for d, value in _feed_order(interp.get_input_details(), feeds):
        value = np.asarray(value)
        if value.dtype != d["dtype"] or list(value.shape) != list(d["shape"]):
            raise ValueError(
                f"feed for input {d['name']!r} is {value.dtype}{list(value.shape)}, "
                f"model wants {np.dtype(d['dtype']).name}{list(d['shape'])}"
            )
        interp.set_tensor(d["index"], value)
    interp.invoke()
    return [interp.get_tensor(d["index"]).copy() for d in interp.get_output_details()]


def run_litert(tflite: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run a .tflite once in LiteRT (reference kernels); outputs in get_output_details order.

    Feeds are matched to inputs by tensor name when every input name is a key of
    ``feeds``, else by position (see ``_feed_order``).
    """
    return _run(_interpreter(tflite), feeds)


def _io_entry(d: dict) -> dict:
    q = d.get("quantization_parameters", {})
    scales = [float(s) for s in np.asarray(q.get("scales", []), dtype=np.float32)]
    zps = [int(z) for z in np.asarray(q.get("zero_points", []))]
    return {
        "name": d["name"],
        "dtype": np.dtype(d["dtype"]).name,
        "shape": [int(s) for s in d["shape"]],
        # (scale, zero_point) of the per-tensor quantization, float32 scale as written.
        "quant": (float(np.float32(d["quantization"][0])), int(d["quantization"][1])),
        "scales": scales,
        "zero_points": zps,
    }


def io_details(tflite: bytes) -> dict[str, list[dict]]:
    """Graph inputs/outputs: name, dtype, shape, (scale, zero_point)."""
    interp = _interpreter(tflite)
    return {
        "inputs": [_io_entry(d) for d in interp.get_input_details()],
        "outputs": [_io_entry(d) for d in interp.get_output_details()],
    }


# ---------------------------------------------------------------------------
# Flatbuffer-level checks
# ---------------------------------------------------------------------------


def _model_t(tflite: bytes) -> Any:
    from ai_edge_litert import schema_py_generated as schema

    return schema.ModelT.InitFromPackedBuf(bytearray(tflite), 0)


def repack(tflite: bytes, edit: Any) -> bytes:
    """The model with ``edit(ModelT)`` applied, packed again (for tests that damage a file)."""
    import flatbuffers

    m = _model_t(tflite)
    edit(m)
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def op_names(tflite: bytes) -> list[str]:
    """Builtin op names in execution order (first subgraph)."""
    from ai_edge_litert import schema_py_generated as schema

    codes = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    m = _model_t(tflite)
    names = []
    for op in m.subgraphs[0].operators:
        oc = m.operatorCodes[op.opcodeIndex]
        code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
        names.append(codes.get(code, f"code{code}") if code != 32 else f"custom:{oc.customCode}")
    return names


def float_tensors(tflite: bytes) -> list[str]:
    """Descriptions of every operator input/output tensor that is not int8/int32.

    A fully-int8 model has none: weights int8, biases int32, shapes/axes int32,
    activations int8.
    """
    m = _model_t(tflite)
    ops = op_names(tflite)
    bad = []
    for sg in m.subgraphs:
        for i, op in enumerate(sg.operators):
            for role, idxs in (("input", op.inputs), ("output", op.outputs)):
                for t in [] if idxs is None else list(idxs):
                    if t < 0:
                        continue
                    tensor = sg.tensors[t]
                    tname = _TENSOR_TYPE_NAMES.get(int(tensor.type), str(tensor.type))
                    if tname not in ("int8", "int32"):
                        name = tensor.name.decode() if isinstance(tensor.name, bytes) else tensor.name
                        bad.append(f"op {i} {ops[i] if sg is m.subgraphs[0] else '?'} {role} "
                                   f"{name!r} is {tname}")
    return bad


# ---------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------


@dataclass
class CompareReport:
    n_inputs: int
    outputs: list[dict] = field(default_factory=list)  # per output: name, max_diff, n_diff, size

    @property
    def max_abs_diff(self) -> int:
        return max((o["max_diff"] for o in self.outputs), default=0)

    def __str__(self) -> str:
        parts = [f"{o['name']}: max |diff| {o['max_diff']} LSB, {o['n_diff']}/{o['size']} differ"
                 for o in self.outputs]
        return f"{self.n_inputs} random inputs; " + "; ".join(parts)


def _pair_io(ours: list[dict], theirs: list[dict]) -> list[tuple[dict, dict]]:
    """Pair graph inputs/outputs by name when both sides use the same names, else by position."""
    if len(ours) != len(theirs):
        raise AssertionError(
            f"different number of tensors: ours {[d['name'] for d in ours]}, "
            f"theirs {[d['name'] for d in theirs]}"
        )
    if sorted(d["name"] for d in ours) == sorted(d["name"] for d in theirs):
        by_name = {d["name"]: d for d in ours}
        return [(by_name[t["name"]], t) for t in theirs]
    return list(zip(ours, theirs))


def _check_io(kind: str, pairs: Sequence[tuple[dict, dict]]) -> list[str]:
    problems = []
    for o, t in pairs:
        for key in ("dtype", "shape", "quant", "scales", "zero_points"):
            if o[key] != t[key]:
                problems.append(f"{kind} {t['name']!r} {key}: ours {o[key]!r} vs TF {t[key]!r}")
    return problems


def _random_input(d: dict, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(d["dtype"])
    info = np.iinfo(dtype) if dtype.kind in "iu" else None
    if info is None:
        return rng.uniform(-1.0, 1.0, size=d["shape"]).astype(dtype)
    lo, hi = max(info.min, -128), min(info.max, 127)
    return rng.integers(lo, hi, size=d["shape"], endpoint=True, dtype=np.int64).astype(dtype)


def compare_models(ours: bytes, theirs: bytes, n_inputs: int = 16, seed: int = 0, max_lsb: int = 0) -> CompareReport:
    """Assert two .tflite files agree on graph I/O params and on every int8 output.

    Inputs/outputs are paired by name when the names agree, else by position.
    Inputs are uniform random int8 over [-128, 127] (fixed seed). Raises
    AssertionError naming the output, how many elements differ and the largest
    difference in LSBs; returns a CompareReport (max diff 0) otherwise.
    """
    io_o, io_t = io_details(ours), io_details(theirs)
    in_pairs = _pair_io(io_o["inputs"], io_t["inputs"])
    out_pairs = _pair_io(io_o["outputs"], io_t["outputs"])
    problems = _check_io("input", in_pairs) + _check_io("output", out_pairs)
    if problems:
        raise AssertionError("graph I/O differs from TensorFlow's:\n  " + "\n  ".join(problems))

    rng = np.random.default_rng(seed)
    out_index_o = {d["name"]: i for i, d in enumerate(io_o["outputs"])}
    out_index_t = {d["name"]: i for i, d in enumerate(io_t["outputs"])}
    report = CompareReport(n_inputs=n_inputs)
    stats = {t["name"]: {"name": t["name"], "max_diff": 0, "n_diff": 0, "size": 0, "first": None}
             for _, t in out_pairs}
    interp_o, interp_t = _interpreter(ours), _interpreter(theirs)
    for k in range(n_inputs):
        feeds_t = {t["name"]: _random_input(t, rng) for _, t in in_pairs}
        feeds_o = {o["name"]: feeds_t[t["name"]] for o, t in in_pairs}
        res_o = _run(interp_o, feeds_o)
        res_t = _run(interp_t, feeds_t)
        for o, t in out_pairs:
            a = res_o[out_index_o[o["name"]]].astype(np.int64)
            b = res_t[out_index_t[t["name"]]].astype(np.int64)
            diff = np.abs(a - b)
            s = stats[t["name"]]
            s["size"] += diff.size
            s["n_diff"] += int(np.count_nonzero(diff))
            if diff.size and int(diff.max()) > s["max_diff"]:
                s["max_diff"] = int(diff.max())
            if s["first"] is None and diff.any():
                idx = tuple(int(i) for i in np.argwhere(diff)[0])
                s["first"] = f"sample {k} index {idx}: ours {a[idx]} vs TF {b[idx]}"
    report.outputs = [stats[t["name"]] for _, t in out_pairs]
    bad = [s for s in report.outputs if s["max_diff"] > max_lsb]
    if bad:
        lines = [f"output {s['name']!r}: {s['n_diff']}/{s['size']} elements differ, "
                 f"max {s['max_diff']} LSB (first: {s['first']})" for s in bad]
        raise AssertionError(f"int8 outputs differ from TensorFlow's over {n_inputs} random "
                             "inputs:\n  " + "\n  ".join(lines))
    return report


# ---------------------------------------------------------------------------
# Post-training quantization (float graphs + representative data)
# ---------------------------------------------------------------------------


def tf_ptq_convert(model: Any, samples: dict[str, np.ndarray]) -> bytes:
    """TensorFlow's full-integer post-training quantization of a float frozen graph:
    ``optimizations=[DEFAULT]``, ``representative_dataset`` yielding the samples one at a
    time (batch 1, in order), ``TFLITE_BUILTINS_INT8``, int8 input and output."""
    import tempfile

    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pb")
        with open(path, "wb") as f:
            f.write(model.graph_def)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, model.inputs, model.outputs, model.shapes)
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        n = len(next(iter(samples.values())))

        def representative() -> Any:
            for i in range(n):
                yield [samples[name][i:i + 1] for name in model.inputs]

        c.representative_dataset = representative
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        c.inference_input_type = tf.int8
        c.inference_output_type = tf.int8
        return c.convert()


@dataclass
class PtqReport:
    tensors: int = 0  # quantized activation tensors compared
    weights: int = 0  # int8 constant tensors compared
    max_rel_scale: float = 0.0
    zero_point_diffs: list[str] = field(default_factory=list)
    scale_diffs: list[str] = field(default_factory=list)
    weight_diffs: list[str] = field(default_factory=list)
    unpaired: list[str] = field(default_factory=list)  # op types whose counts differ (TF folded some)
    outputs: int = 0
    within_1: int = 0
    max_lsb: int = 0

    @property
    def within_1_fraction(self) -> float:
        return self.within_1 / max(self.outputs, 1)

    def __str__(self) -> str:
        return (f"{self.tensors} activations (max rel scale diff {self.max_rel_scale:.1e}, "
                f"{len(self.zero_point_diffs)} zero points differ), {self.weights} weights "
                f"({len(self.weight_diffs)} differ), outputs {self.within_1}/{self.outputs} within 1 LSB "
                f"(max {self.max_lsb}){'; unpaired ' + ', '.join(self.unpaired) if self.unpaired else ''}")


def _ops_with_tensors(tflite: bytes) -> list[tuple[str, list[Any], list[Any]]]:
    m = _model_t(tflite)
    sg = m.subgraphs[0]
    names = op_names(tflite)
    out = []
    for k, o in enumerate(sg.operators):
        def info(i: int) -> Any:
            if i < 0:
                return None
            t = sg.tensors[i]
            q = t.quantization
            data = m.buffers[t.buffer].data
            return (t.name.decode(), int(t.type),
                    None if q is None or q.scale is None else np.asarray(q.scale, np.float32),
                    None if q is None or q.zeroPoint is None else np.asarray(q.zeroPoint, np.int64),
                    None if data is None else np.asarray(data, np.uint8).tobytes())
        out.append((names[k], [info(i) for i in o.inputs], [info(i) for i in o.outputs]))
    return out


def compare_ptq(ours: bytes, theirs: bytes, samples: dict[str, np.ndarray], inputs: Sequence[str]) -> PtqReport:
    """Pair the two files' ops (k-th op of a type with the k-th op of that type) and compare
    every quantized operand: zero points, scales (relative difference), int8 weight bytes;
    then run both in LiteRT (reference kernels) on the samples quantized with each file's
    input parameters and count int8 outputs within 1 LSB."""
    report = PtqReport()
    a, b = _ops_with_tensors(theirs), _ops_with_tensors(ours)
    by_type_a: dict[str, list[Any]] = {}
    by_type_b: dict[str, list[Any]] = {}
    for op in a:
        by_type_a.setdefault(op[0], []).append(op)
    for op in b:
        by_type_b.setdefault(op[0], []).append(op)
    for op_type in sorted(set(by_type_a) | set(by_type_b)):
        la, lb = by_type_a.get(op_type, []), by_type_b.get(op_type, [])
        if len(la) != len(lb):
            report.unpaired.append(f"{op_type} TF {len(la)} vs ours {len(lb)}")
            continue
        for x, y in zip(la, lb):
            for tx, ty in zip(x[1] + x[2], y[1] + y[2]):
                if tx is None or ty is None or tx[2] is None or ty[2] is None or tx[1] != ty[1]:
                    continue
                where = f"{op_type} {tx[0]!r}/{ty[0]!r}"
                if tx[2].shape != ty[2].shape:
                    report.scale_diffs.append(f"{where}: {tx[2].size} vs {ty[2].size} scales")
                    continue
                rel = float(np.max(np.abs(tx[2].astype(np.float64) / ty[2].astype(np.float64) - 1.0)))
                if tx[4] is not None and tx[1] == 9:  # int8 constant: a weight
                    report.weights += 1
                    if tx[4] != ty[4] or rel > 0 or not np.array_equal(tx[3], ty[3]):
                        report.weight_diffs.append(where)
                    continue
                if tx[4] is not None:
                    continue  # int32 biases follow from the scales
                report.tensors += 1
                report.max_rel_scale = max(report.max_rel_scale, rel)
                if rel > 1e-5:
                    report.scale_diffs.append(f"{where}: rel {rel:.2e}")
                if not np.array_equal(tx[3], ty[3]):
                    report.zero_point_diffs.append(f"{where}: {tx[3].tolist()} vs {ty[3].tolist()}")
    results = []
    for buf in (theirs, ours):
        interp = _interpreter(buf)
        details = interp.get_input_details()
        n = len(next(iter(samples.values())))
        rows = []
        for i in range(n):
            for j, d in enumerate(details):
                name = d["name"] if d["name"] in samples else list(inputs)[j]
                scale, zp = d["quantization"]
                x = samples[name][i:i + 1]
                interp.set_tensor(d["index"], np.clip(np.round(x / scale + zp), -128, 127).astype(np.int8))
            interp.invoke()
            rows.append(np.concatenate([interp.get_tensor(o["index"]).astype(np.int64).ravel()
                                        for o in interp.get_output_details()]))
        results.append(np.stack(rows))
    diff = np.abs(results[0] - results[1])
    report.outputs, report.within_1, report.max_lsb = diff.size, int(np.count_nonzero(diff <= 1)), int(diff.max())
    return report


if __name__ == "__main__":  # python tests/oracle.py: convert the corpus with TF, self-compare
    import sys
    import time

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import corpus

    t0 = time.perf_counter()
    models = corpus.build_corpus()
    t1 = time.perf_counter()
    print(f"corpus: {len(models)} models in {t1 - t0:.2f}s")
    for m in models:
        t = time.perf_counter()
        flat = tf_convert(m)
        dt = time.perf_counter() - t
        floats = float_tensors(flat)
        report = compare_models(flat, flat, n_inputs=4)
        print(f"{m.name:28s} {dt:5.2f}s {len(flat):6d} B  ops={op_names(flat)}")
        print(f"{'':28s} io={io_details(flat)['inputs'][0]['quant']}->"
              f"{[o['quant'] for o in io_details(flat)['outputs']]} float={floats} self: {report}")
