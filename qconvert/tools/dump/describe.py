"""A .tflite file as ``qconvert dump``'s document: plain data (its shape is in
``qconvert.tools.dump``'s docstring), which the text and JSON outputs render.

Reading a file costs the reader and numpy; the op table is imported only where it is used
(a subgraph with quantized int8/int4 constants: which of them are symmetric weights;
qconvert's requantization records; INT4 tensors).

May import: ``qconvert.tools.tflite_file``, ``qconvert.tools.jsonable``, the dump's ``mlir``
and ``requant`` modules, ``qconvert.schema.requant_metadata``, ``qconvert.schema.flexbuffer`` (custom
options), numpy.
"""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from qconvert.errors import UsageError
from qconvert.schema.requant_metadata import METADATA_NAME
from qconvert.tools.dump.mlir import mlir_type, weight_operands
from qconvert.tools.jsonable import finite, jsonable
from qconvert.tools.tflite_file import load_tflite, quantization_problems, runtime_warnings

SCHEMA_VERSION = 1
SECTIONS = ("metadata", "ops", "tensors")
_FLOAT_DTYPES = ("float32", "float16", "float64", "bfloat16")


def describe(path: str | os.PathLike, sections: Iterable[str] | None = None, tensor: str | None = None,
             type_scales: int | None = None) -> dict[str, Any]:
    """The JSON document (see ``qconvert.tools.dump``). ``sections``: subset of ("metadata",
    "ops", "tensors"), None or empty for all; ``tensor``: NAME_OR_INDEX. ``type_scales``: the
    ``type`` of each tensor in ``tensors`` lists at most that many scales, then ``,... N}``
    (the text output's form, ``mlir.short_type``); None for all of them."""
    selected = set(sections or ())
    unknown = selected - set(SECTIONS)
    if unknown:
        raise UsageError(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if not selected and tensor is None:
        selected = set(SECTIONS)
    model, size = load_tflite(path)
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION,
                           "file": {"name": os.path.basename(os.fspath(path)), "bytes": size}}
    records: dict[tuple[int, int], Any] = {}
    requant_problems: list[str] = []
    requant_info = None
    if METADATA_NAME in model.metadata:  # qconvert's files
        from qconvert.tools.dump.requant_check import read_records

        records, requant_problems, requant_info = read_records(model)
    if "metadata" in selected:
        runtime = model.metadata.get("min_runtime_version")
        doc["model"] = {"description": model.description, "version": model.version,
                        "min_runtime_version": _text_entry(runtime) if runtime is not None else None}
        doc["metadata"] = [{"name": name, "bytes": len(raw), "text": _text_entry(raw),
                            "requant": requant_info if name == METADATA_NAME else None}
                           for name, raw in model.metadata.items()]
        doc["signatures"] = [{"key": sig.key, "subgraph": sig.subgraph, "inputs": dict(sig.inputs),
                              "outputs": dict(sig.outputs)} for sig in model.signatures]
    if selected:
        totals = _Totals(flagged=len(requant_problems))
        subgraphs = [_subgraph(s, sg, selected, records, totals, type_scales) for s, sg in enumerate(model.subgraphs)]
        if "ops" in selected or "tensors" in selected:
            doc["subgraphs"] = subgraphs
        doc["totals"] = totals.as_dict(model, records)
        doc["requant_problems"] = requant_problems
    if tensor is not None:
        doc["tensor"] = _tensor_values(model, tensor)
    return doc


@dataclass
class _Totals:
    """The ``totals`` section, summed over the subgraphs."""

    flagged: int = 0  # requant records that disagree, and problems of the metadata as a whole
    n_ops: int = 0
    n_tensors: int = 0
    histogram: Counter[str] = field(default_factory=Counter)
    by_dtype: Counter[str] = field(default_factory=Counter)  # constant buffers, each counted once
    seen_buffers: set[int] = field(default_factory=set)
    float_ops: list[dict[str, Any]] = field(default_factory=list)
    boundary_ops: list[dict[str, Any]] = field(default_factory=list)  # QUANTIZE/DEQUANTIZE at float I/O
    bad_quant: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self, model: Any, records: dict[tuple[int, int], Any]) -> dict[str, Any]:
        by_dtype = self.by_dtype
        return {
            "operators": self.n_ops, "tensors": self.n_tensors,
            "ops": dict(sorted(self.histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
            "parameter_bytes": sum(by_dtype.values()),
            "buffer_bytes_by_dtype": dict(sorted(by_dtype.items())),
            "int8_buffer_bytes": by_dtype.get("int8", 0), "int32_buffer_bytes": by_dtype.get("int32", 0),
            "float32_buffer_bytes": by_dtype.get("float32", 0),
            "float_ops": len(self.float_ops), "float_op_list": self.float_ops,
            "float_boundary_ops": self.boundary_ops,
            "requant_records": len(records), "requant_flagged": self.flagged,
            "quantization_problems": len(self.bad_quant), "quantization_problem_list": self.bad_quant,
            "runtime_warnings": [w for sg in model.subgraphs for w in runtime_warnings(sg)],
        }


def _subgraph(s: int, sg: Any, selected: set[str], records: dict[tuple[int, int], Any], totals: _Totals,
              type_scales: int | None) -> dict[str, Any]:
    """Subgraph ``s``'s entry (its operators and tensors as selected); adds it to ``totals``."""
    totals.n_ops += len(sg.operators)
    totals.n_tensors += len(sg.tensors)
    for k, t in enumerate(sg.tensors):
        if t.scale and quantization_problems(t):
            totals.bad_quant.append({"subgraph": s, "index": k, "name": t.name, "problems": quantization_problems(t)})
        if t.data is not None and t.buffer not in totals.seen_buffers:
            totals.seen_buffers.add(t.buffer)
            totals.by_dtype[t.dtype] += len(t.data)
    ops = []
    for i, op in enumerate(sg.operators):
        totals.histogram[op.builtin] += 1
        if sg.float_boundary(op):
            totals.boundary_ops.append({"subgraph": s, "index": i, "op": op.builtin})
        elif any(sg.tensors[k].dtype in _FLOAT_DTYPES for k in (*op.inputs, *op.outputs) if k >= 0):
            totals.float_ops.append({"subgraph": s, "index": i, "op": op.builtin})
        requant = None
        if (s, i) in records:
            from qconvert.tools.dump.requant_check import check_record

            requant = check_record(sg, op, records[(s, i)])
            totals.flagged += bool(requant["problems"])
        if "ops" in selected:
            ops.append({"index": i, "op": op.builtin, "custom_code": op.custom_code, "version": op.version,
                        "inputs": list(op.inputs), "outputs": list(op.outputs),
                        "options_type": op.options_type, "options": jsonable(op.options),
                        "custom_options": op.custom_options.hex() if op.custom_options is not None else None,
                        "custom_options_decoded": _decoded(op.custom_options),
                        "requant": requant,
                        "requant_ok": None if requant is None else not requant["problems"]})
    entry: dict[str, Any] = {"index": s, "name": sg.name, "inputs": list(sg.inputs), "outputs": list(sg.outputs)}
    if "ops" in selected:
        entry["operators"] = ops
    if "tensors" in selected:
        weights = weight_operands(sg)
        entry["tensors"] = [_tensor_entry(i, t, sg, weights, type_scales) for i, t in enumerate(sg.tensors)]
    return entry


def _tensor_entry(i: int, t: Any, sg: Any = None, weights: frozenset[int] = frozenset(),
                  type_scales: int | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": i, "name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                             "buffer": t.buffer, "buffer_bytes": len(t.data) if t.data is not None else 0,
                             "quantization": None}
    if t.scale:
        scales = list(t.scale) if all(map(math.isfinite, t.scale)) else [finite(s) for s in t.scale]
        entry["quantization"] = {"scale": scales, "zero_point": list(t.zero_point),
                                 "quantized_dimension": int(t.quantized_dimension),
                                 "problems": quantization_problems(t)}
    entry["type"] = mlir_type(t, sg, i in weights, type_scales)
    return entry


def _text_entry(raw: bytes) -> str | None:
    body = raw.rstrip(b"\0")
    if not body or len(body) > 200:
        return None
    try:
        text = body.decode("ascii")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None


# ---------------------------------------------------------------------------
# --tensor


def _find_tensor(model: Any, key: str) -> tuple[int, int]:
    for s, sg in enumerate(model.subgraphs):
        for i, t in enumerate(sg.tensors):
            if t.name == key:
                return s, i
    text = key.strip()
    if text.lstrip("-").isdigit():
        i = int(text)
        n = len(model.subgraphs[0].tensors)
        if 0 <= i < n:
            return 0, i
        raise UsageError(f"tensor index {i} out of range: the model has {n} tensors (0..{n - 1})")
    import difflib

    names = [t.name for sg in model.subgraphs for t in sg.tensors]
    close = difflib.get_close_matches(key, names, n=5, cutoff=0.5)
    if not close:
        close = [n for n in names if key.lower() in n.lower()][:5]
    hint = f"; close names: {', '.join(repr(c) for c in close)}" if close else f"; e.g. {', '.join(repr(n) for n in names[:5])}"
    raise UsageError(f"no tensor named {key!r}{hint} (or give an index)")


def _tensor_values(model: Any, key: str) -> dict[str, Any]:
    """The ``tensor`` section: the entry (its whole type), its values dequantized, their
    statistics and a histogram of 10 bins."""
    import numpy as np

    s, i = _find_tensor(model, key)
    t = model.subgraphs[s].tensors[i]
    sg = model.subgraphs[s]
    entry = {"subgraph": s, **_tensor_entry(i, t, sg, weight_operands(sg)), "values": None, "stats": None,
             "histogram": None}
    if t.data is None:
        return entry
    try:
        raw = t.array()
    except (TypeError, ValueError) as exc:
        entry["note"] = f"cannot decode {t.dtype} data: {exc}"
        return entry
    if raw.dtype.kind not in "biuf":
        entry["note"] = f"{t.dtype} values are not numeric"
        return entry
    x = raw.astype(np.float64)
    if t.scale:
        scale = np.asarray(t.scale, dtype=np.float32).astype(np.float64)
        zp = np.asarray(t.zero_point or [0] * len(t.scale), dtype=np.float64)
        if len(scale) > 1 and x.ndim > t.quantized_dimension and x.shape[t.quantized_dimension] == len(scale):
            shape = [1] * x.ndim
            shape[t.quantized_dimension] = len(scale)
            scale, zp = scale.reshape(shape), zp.reshape(shape)
        else:
            scale, zp = scale[:1], zp[:1]
        x = (x - zp) * scale
    flat = x.reshape(-1)
    entry["values"] = [finite(v) for v in flat.tolist()]
    kept = flat[np.isfinite(flat)]
    if kept.size:
        entry["stats"] = {"count": int(flat.size), "min": float(kept.min()), "max": float(kept.max()),
                          "mean": float(kept.mean()), "std": float(kept.std())}
        bins = 10 if kept.min() < kept.max() else 1
        counts, edges = np.histogram(kept, bins=bins)
        entry["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return entry


def _decoded(options: bytes | None) -> Any:
    """A custom op's options decoded from FlexBuffer (TensorFlow's format), or None: JSON-ready."""
    if options is None:
        return None
    from qconvert.schema.flexbuffer import decode

    return jsonable(decode(options))
