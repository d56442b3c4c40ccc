"""``qconvert dump``: what is in a .tflite model, for people (text) and scripts (JSON).

Works on any valid TFLite file (qconvert's, TensorFlow's, float or int8) and never
imports TensorFlow. For qconvert files the ``qconvert_requant`` metadata is decoded
and each record is checked against what TFLite's Prepare step computes from the
float32 scales in the file (``qconvert.quant``); a record that
disagrees is flagged (text: ``!! REQUANT MISMATCH``; JSON: ``"requant_ok": false``).

Selectors (``--ops``, ``--tensors``, ``--metadata``, ``--tensor NAME_OR_INDEX``)
restrict the output to those sections, in text and in JSON; with none, everything
but ``--tensor`` is shown.

JSON shape (``--json``), schema_version 1. Keys are stable; new keys may be added
without a version bump, existing ones are not renamed or removed. A section that
was not selected is absent::

    {
      "schema_version": 1,
      "file": {"name": str, "bytes": int},
      "model": {"description": str, "version": int,             # --metadata
                "min_runtime_version": str | null},
      "metadata": [                                              # --metadata
        {"name": str, "bytes": int,
         "text": str | null,           # printable entries (min_runtime_version)
         "requant": null | {"format_version": int, "records": int, "error": str | null}}
      ],
      "subgraphs": [                                             # --ops / --tensors
        {"index": int, "name": str, "inputs": [int], "outputs": [int],
         "operators": [                                          # --ops
           {"index": int, "op": str,   # BuiltinOperator name, or "CUSTOM"
            "custom_code": str | null, "version": int,
            "inputs": [int], "outputs": [int],   # tensor indices, -1 = optional absent
            "options_type": str, "options": {snake_case: value},
            "requant": null | {
              "per_channel": bool, "act_min": int, "act_max": int, "left_shift": int,
              "multipliers": [int], "shifts": [int],
              "table": null | [int],   # LOGISTIC / TANH: 256 int8 entries by uint8(x)
              "wide": null | [int],    # FULLY_CONNECTED: binary64 bits of in*w/out per pair
              "expected": null | {same 8 keys},   # TFLite's Prepare on the file's scales
              "problems": [str]},
            "requant_ok": bool | null}],     # null: no record for this op
         "tensors": [                                            # --tensors
           {"index": int, "name": str, "dtype": str,  # numpy-style, e.g. "int8"
            "shape": [int], "buffer": int, "buffer_bytes": int,  # 0 for activations
            "quantization": null | {"scale": [float], "zero_point": [int],
                                    "quantized_dimension": int},
            "type": str}]}      # MLIR notation: tensor<8x3x!quant.uniform<i8<-127:127>:f32:0, {...}>>
      ],
      "totals": {                                                # always (unless --tensor)
        "operators": int, "tensors": int, "ops": {op: count},
        "parameter_bytes": int,                 # constant buffers, each counted once
        "buffer_bytes_by_dtype": {dtype: int},
        "int8_buffer_bytes": int, "int32_buffer_bytes": int, "float32_buffer_bytes": int,
        "float_ops": int,                       # ops with a float32/float16 input or output
        "float_op_list": [{"subgraph": int, "index": int, "op": str}],
        "requant_records": int, "requant_flagged": int,
        "runtime_warnings": [str]},             # what the file needs of a runtime (INT4, blockwise)
      "requant_problems": [str],   # records naming no operator, corrupt metadata
      "tensor": {                                                # --tensor only
        "subgraph": int, ...the tensor's entry as in "tensors"...,
        "values": null | [float],         # dequantized, flattened; null for activations
        "stats": null | {"count", "min", "max", "mean", "std"},
        "histogram": null | {"edges": [float], "counts": [int]}}
    }

Scales are the file's float32 values widened exactly to double. Non-finite floats
are written as null. Shapes are the stored shapes (not shape_signature).

Each tensor's ``type`` is written in the MLIR quant dialect's notation (the seed documents'
and TensorFlow's CHECK lines): ``!quant.uniform<i8:f32, 0.0078431377:-1>`` per tensor,
``!quant.uniform<i8<-127:127>:f32:0, {0.1,0.2}>`` per axis (a zero point of 0 is omitted, a
storage range is shown where it is narrower than the type's: the symmetric weights of
convolutions and FULLY_CONNECTED), ``!quant.uniform<i4:f32:{1:32}, {{...}}>`` for blockwise
(sub-channel) weights, blocks of 32 along dimension 1. Scales print as the shortest decimal
that gives back the file's float32. The text output shortens long scale lists.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from qconvert.errors import ConversionError, UsageError
from qconvert.io import read_bytes
from qconvert.ops import requant, row
from qconvert.quant.requant import Operand, Requant, operand
from qconvert.schema.reader import read_model
from qconvert.schema.requant_metadata import METADATA_NAME, decode
from qconvert.tools.jsonable import finite, jsonable
from qconvert.tools.text import table as text_table

SCHEMA_VERSION = 1
SECTIONS = ("metadata", "ops", "tensors")
_FLOAT_DTYPES = ("float32", "float16", "float64", "bfloat16")
_MISMATCH = "!! REQUANT MISMATCH"


# ---------------------------------------------------------------------------
# Loading


def load_tflite(path: str | os.PathLike) -> tuple[Any, int]:
    """(the model, its size in bytes); one-line ConversionError for an empty or damaged file."""
    data = read_bytes(path, "a .tflite file")
    if not data:
        raise ConversionError(f"{os.fspath(path)}: the file is empty, not a TFLite file")
    try:
        return read_model(data), len(data)
    except ValueError as exc:
        raise ConversionError(f"{os.fspath(path)}: {exc}") from None


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
# Requantization records: decode and check


def _operand(sg: Any, index: int) -> Operand | None:
    if index < 0:
        return None
    if index >= len(sg.tensors):
        raise ValueError(f"tensor {index} is missing")
    t = sg.tensors[index]
    return operand(t.name, t.scale or (), t.zero_point or (), t.shape, t.dtype)


def _expected_requant(sg: Any, op: Any) -> dict[str, Any]:
    """What TFLite's Prepare computes for ``op`` from the file's float32 scales: the very
    function the converter stores records with (``qconvert.ops.requant``).
    ValueError when it cannot be computed."""
    if not op.outputs:
        raise ValueError("output 0 is missing")
    rec = requant(op.builtin, [_operand(sg, i) for i in op.inputs], _operand(sg, op.outputs[0]),
                  op.options)
    return (rec or Requant(0, op.builtin, -128, 127, 0)).fields()


def _check_record(sg: Any, op: Any, rec: Any) -> dict[str, Any]:
    stored = rec.fields()
    problems: list[str] = []
    if rec.builtin != op.builtin:
        problems.append(f"record is for {rec.builtin}, the operator is {op.builtin}")
    expected = None
    try:
        expected = _expected_requant(sg, op)
    except (ValueError, ArithmeticError, IndexError, KeyError, TypeError) as exc:  # a damaged file
        problems.append(f"cannot recompute from the scales: {type(exc).__name__}: {exc}")
    if expected is not None:
        st, et = stored["table"], expected["table"]
        if (st is None) != (et is None):
            problems.append("a lookup table, expected none" if et is None else "no lookup table, expected one")
        elif st is not None and list(st) != list(et):
            bad = [k for k in range(min(len(st), len(et))) if st[k] != et[k]]
            k = bad[0] if bad else min(len(st), len(et))
            problems.append(f"{len(bad) or 'its'} lookup table entries differ; entry for x={k if k < 128 else k - 256}")
        sw, ew = stored["wide"], expected["wide"]
        if sw is not None and sw != ew:  # optional: files may carry only the 31-bit pairs
            problems.append("wide FULLY_CONNECTED factors differ from double(in) * double(w) / double(out)"
                            if ew is not None else "wide factors on an op that has none")
        for key in ("per_channel", "act_min", "act_max", "left_shift"):
            if stored[key] != expected[key]:
                problems.append(f"{key} {stored[key]}, expected {expected[key]}")
        sm, em = stored["multipliers"], expected["multipliers"]
        if len(sm) != len(em):
            problems.append(f"{len(sm)} multiplier/shift pairs, expected {len(em)}")
        else:
            bad = [k for k in range(len(sm))
                   if (sm[k], stored["shifts"][k]) != (em[k], expected["shifts"][k])]
            if bad:
                k = bad[0]
                problems.append(f"{len(bad)} of {len(sm)} pairs differ; pair {k}: "
                                f"({sm[k]}, {stored['shifts'][k]}), expected ({em[k]}, {expected['shifts'][k]})")
    return {**stored, "expected": expected, "problems": problems}


# ---------------------------------------------------------------------------
# The document


def _tensor_entry(i: int, t: Any, sg: Any = None, weights: frozenset[int] = frozenset()) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": i, "name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                             "buffer": t.buffer, "buffer_bytes": len(t.data) if t.data is not None else 0,
                             "quantization": None}
    if t.scale:
        scales = list(t.scale) if all(map(math.isfinite, t.scale)) else [finite(s) for s in t.scale]
        entry["quantization"] = {"scale": scales, "zero_point": list(t.zero_point),
                                 "quantized_dimension": int(t.quantized_dimension),
                                 "problems": quantization_problems(t)}
    entry["type"] = mlir_type(t, sg, i in weights)
    return entry


# MLIR's names of TFLite's tensor types (storage types of quantized tensors for the integers)
_MLIR_ELEMENT = {"float32": "f32", "float16": "f16", "float64": "f64", "bfloat16": "bf16", "int8": "i8",
                 "int4": "i4", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8", "uint16": "u16",
                 "uint32": "u32", "uint64": "u64", "bool": "i1", "string": "!tf_type.string"}


def _num(v: float | None) -> str:
    """A float32 scale as the shortest decimal that reads back as that float32."""
    return "nan" if v is None or not math.isfinite(v) else str(np.float32(v)).replace("e-0", "e-").replace("e+0", "e+")


def _param(scale: float | None, zp: int) -> str:
    return _num(scale) + (f":{zp}" if zp else "")


def _weight_operands(sg: Any) -> frozenset[int]:
    """Tensors read as the weights of an op whose kernel takes symmetric weights."""
    out = set()
    for op in sg.operators:
        r_ = row(op.builtin)
        if r_ is not None and (r_.symmetric_weights or r_.int4_version is not None):
            slot = r_.operand_slots[1]
            if slot < len(op.inputs) and op.inputs[slot] >= 0:
                out.add(op.inputs[slot])
    return frozenset(out)


def mlir_type(t: Any, sg: Any = None, weight: bool = False, limit: int | None = None) -> str:
    """``tensor<...>`` in the MLIR quant dialect's notation (see the module docstring); ``limit``
    shortens a scale list to that many entries."""
    dims = "".join(f"{d}x" for d in t.shape)
    storage = _MLIR_ELEMENT.get(t.dtype, t.dtype)
    if t.blockwise is not None and sg is not None:
        return f"tensor<{dims}{_blockwise_type(t, sg, storage, limit)}>"
    if not t.scale:
        return f"tensor<{dims}{storage}>"
    if weight and t.data is not None and t.dtype in ("int8", "int4"):
        lo = -7 if t.dtype == "int4" else -127
        try:
            if int(t.array().min(initial=0)) >= lo:
                storage += f"<{lo}:{-lo}>"
        except (TypeError, ValueError):
            pass
    zps = list(t.zero_point) or [0] * len(t.scale)
    if len(t.scale) == 1 and not (t.quantized_dimension and len(t.shape) > 1):
        return f"tensor<{dims}!quant.uniform<{storage}:f32, {_param(t.scale[0], zps[0])}>>"
    pairs = [_param(s, z) for s, z in zip(t.scale, zps)]
    if limit is not None and len(pairs) > limit:
        pairs = [*pairs[:limit], f"... {len(t.scale)} scales"]
    return f"tensor<{dims}!quant.uniform<{storage}:f32:{t.quantized_dimension}, {{{','.join(pairs)}}}>>"


def _blockwise_type(t: Any, sg: Any, storage: str, limit: int | None) -> str:
    """The sub-channel type: blocks of ``block_size`` along the last dimension (the input
    dimension of a FULLY_CONNECTED weight), scales from the details' scale tensor, row by row."""
    scales_at, zps_at, block = t.blockwise
    axis = len(t.shape) - 1
    try:
        s = sg.tensors[scales_at].array().astype(np.float32)
        rows = s.reshape(s.shape[0], -1) if s.ndim else s.reshape(1, 1)
        text_rows = [",".join(_num(float(v)) for v in (r if limit is None else r[:limit])) +
                     (",..." if limit is not None and len(r) > limit else "") for r in
                     (rows if limit is None else rows[:limit])]
        more = f",... {rows.shape[0]} rows" if limit is not None and rows.shape[0] > limit else ""
        params = "{" + ",".join(f"{{{r}}}" for r in text_rows) + more + "}"
    except (AttributeError, IndexError, TypeError, ValueError):
        params = f"{{scales in tensor {scales_at}}}"
    return f"!quant.uniform<{storage}:f32:{{{axis}:{block}}}, {params}>"


def runtime_warnings(sg: Any) -> list[str]:
    """What a subgraph needs of a runtime beyond the int8 builtins (measured in issue 17 with
    LiteRT 2.3, TFLite Micro and Vela 5.2)."""
    out = []
    int4 = [t for t in sg.tensors if t.dtype == "int4"]
    if int4:
        no_ref = sorted({o.builtin for o in sg.operators
                         if (r := row(o.builtin)) is not None and r.int4_version is not None
                         and not r.int4_in_reference and o.version >= r.int4_version})
        out.append(f"INT4 tensors ({len(int4)}, e.g. '{int4[0].name}'): Vela 5.2 (Ethos-U) crashes on them; "
                   f"convert with --int4-storage int8 for an NPU"
                   + "".join(f"; LiteRT's reference kernels lack {op} v{row(op).int4_version} "  # type: ignore[union-attr]
                             f"(its default kernels run it)" for op in no_ref))
    blocks = [t for t in sg.tensors if t.blockwise is not None]
    if blocks:
        out.append(f"blockwise-quantized weights ({len(blocks)}, e.g. '{blocks[0].name}'): only LiteRT's XNNPACK "
                   f"delegate computes them (its reference kernels read the weights as zero; TFLite Micro rejects "
                   f"the file; Vela 5.2 crashes)")
    return out


def quantization_problems(t: Any) -> list[str]:
    """What LiteRT's model loader rejects in a tensor's quantization (measured with ai-edge-litert
    2.3: "quantized_dimension must be in range [0, rank)", and per-axis scales that do not
    match the dimension). TFLite Micro does not check these."""
    problems = []
    rank, dim, n = len(t.shape), int(t.quantized_dimension), len(t.scale)
    if rank and not 0 <= dim < rank:
        problems.append(f"quantized_dimension {dim} is outside the tensor's {rank} dimension(s): LiteRT rejects "
                        f"the file ({'per-tensor' if n == 1 else f'{n} scales'})")
    elif n > 1 and rank and t.shape[dim] != n:
        problems.append(f"{n} scales along dimension {dim} of size {t.shape[dim]}: LiteRT rejects the file")
    if t.zero_point and len(t.zero_point) != n:
        problems.append(f"{len(t.zero_point)} zero points for {n} scales")
    return problems


def describe(path: str | os.PathLike, sections: Iterable[str] | None = None,
             tensor: str | None = None) -> dict[str, Any]:
    """The JSON document (see the module docstring). ``sections``: subset of
    ("metadata", "ops", "tensors"), None or empty for all; ``tensor``: NAME_OR_INDEX."""
    selected = set(sections or ())
    unknown = selected - set(SECTIONS)
    if unknown:
        raise UsageError(f"unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    if not selected and tensor is None:
        selected = set(SECTIONS)
    model, size = load_tflite(path)
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION,
                           "file": {"name": os.path.basename(os.fspath(path)), "bytes": size}}

    # Requant metadata
    records: dict[tuple[int, int], Any] = {}
    requant_problems: list[str] = []
    requant_info = None
    if METADATA_NAME in model.metadata:
        try:
            recs = decode(model.metadata[METADATA_NAME])
            raw = bytes(model.metadata[METADATA_NAME])
            requant_info = {"format_version": int.from_bytes(raw[4:6], "little"), "records": len(recs), "error": None}
            for rec in recs:
                key = (rec.subgraph_index, rec.op_index)
                if not (rec.subgraph_index < len(model.subgraphs)
                        and rec.op_index < len(model.subgraphs[rec.subgraph_index].operators)):
                    requant_problems.append(f"record for subgraph {rec.subgraph_index} operator {rec.op_index} "
                                            f"({rec.builtin}): no such operator")
                else:
                    records[key] = rec
        except ValueError as exc:
            requant_info = {"format_version": None, "records": 0, "error": str(exc)}
            requant_problems.append(f"{METADATA_NAME} is corrupt: {exc}")

    if "metadata" in selected:
        runtime = model.metadata.get("min_runtime_version")
        doc["model"] = {"description": model.description, "version": model.version,
                        "min_runtime_version": _text_entry(runtime) if runtime is not None else None}
        doc["metadata"] = [{"name": name, "bytes": len(raw), "text": _text_entry(raw),
                            "requant": requant_info if name == METADATA_NAME else None}
                           for name, raw in model.metadata.items()]

    # Subgraphs and totals
    histogram: Counter[str] = Counter()
    by_dtype: Counter[str] = Counter()
    seen_buffers: set[int] = set()
    float_ops: list[dict[str, Any]] = []
    flagged = len(requant_problems)
    bad_quant: list[dict[str, Any]] = []
    n_ops = n_tensors = 0
    subgraphs = []
    for s, sg in enumerate(model.subgraphs):
        n_ops += len(sg.operators)
        n_tensors += len(sg.tensors)
        for k, t in enumerate(sg.tensors):
            if t.scale and quantization_problems(t):
                bad_quant.append({"subgraph": s, "index": k, "name": t.name, "problems": quantization_problems(t)})
            if t.data is not None and t.buffer not in seen_buffers:
                seen_buffers.add(t.buffer)
                by_dtype[t.dtype] += len(t.data)
        ops = []
        for i, op in enumerate(sg.operators):
            name = op.builtin
            histogram[name] += 1
            if any(sg.tensors[k].dtype in _FLOAT_DTYPES for k in (*op.inputs, *op.outputs) if k >= 0):
                float_ops.append({"subgraph": s, "index": i, "op": name})
            rec = records.get((s, i))
            requant = _check_record(sg, op, rec) if rec is not None else None
            if requant is not None and requant["problems"]:
                flagged += 1
            if "ops" in selected:
                ops.append({"index": i, "op": name, "custom_code": op.custom_code, "version": op.version,
                            "inputs": list(op.inputs), "outputs": list(op.outputs),
                            "options_type": op.options_type, "options": jsonable(op.options),
                            "custom_options": op.custom_options.hex() if op.custom_options is not None else None,
                            "requant": requant,
                            "requant_ok": None if requant is None else not requant["problems"]})
        if "ops" in selected or "tensors" in selected:
            entry: dict[str, Any] = {"index": s, "name": sg.name, "inputs": list(sg.inputs),
                                     "outputs": list(sg.outputs)}
            if "ops" in selected:
                entry["operators"] = ops
            if "tensors" in selected:
                weights = _weight_operands(sg)
                entry["tensors"] = [_tensor_entry(i, t, sg, weights) for i, t in enumerate(sg.tensors)]
            subgraphs.append(entry)
    if "ops" in selected or "tensors" in selected:
        doc["subgraphs"] = subgraphs
    if selected:
        doc["totals"] = {
            "operators": n_ops, "tensors": n_tensors,
            "ops": dict(sorted(histogram.items(), key=lambda kv: (-kv[1], kv[0]))),
            "parameter_bytes": sum(by_dtype.values()),
            "buffer_bytes_by_dtype": dict(sorted(by_dtype.items())),
            "int8_buffer_bytes": by_dtype.get("int8", 0), "int32_buffer_bytes": by_dtype.get("int32", 0),
            "float32_buffer_bytes": by_dtype.get("float32", 0),
            "float_ops": len(float_ops), "float_op_list": float_ops,
            "requant_records": len(records), "requant_flagged": flagged,
            "quantization_problems": len(bad_quant), "quantization_problem_list": bad_quant,
            "runtime_warnings": [w for sg in model.subgraphs for w in runtime_warnings(sg)],
        }
        doc["requant_problems"] = requant_problems
    if tensor is not None:
        doc["tensor"] = _tensor_values(model, tensor)
    return doc


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
    names = [t.name for sg in model.subgraphs for t in sg.tensors]
    close = difflib.get_close_matches(key, names, n=5, cutoff=0.5)
    if not close:
        close = [n for n in names if key.lower() in n.lower()][:5]
    hint = f"; close names: {', '.join(repr(c) for c in close)}" if close else f"; e.g. {', '.join(repr(n) for n in names[:5])}"
    raise UsageError(f"no tensor named {key!r}{hint} (or give an index)")


def _tensor_values(model: Any, key: str) -> dict[str, Any]:

    s, i = _find_tensor(model, key)
    t = model.subgraphs[s].tensors[i]
    sg = model.subgraphs[s]
    entry = {"subgraph": s, **_tensor_entry(i, t, sg, _weight_operands(sg)), "values": None, "stats": None,
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
    finite_values = flat[np.isfinite(flat)]
    if finite_values.size:
        entry["stats"] = {"count": int(flat.size), "min": float(finite_values.min()), "max": float(finite_values.max()),
                          "mean": float(finite_values.mean()), "std": float(finite_values.std())}
        bins = 10 if finite_values.min() < finite_values.max() else 1
        counts, edges = np.histogram(finite_values, bins=bins)
        entry["histogram"] = {"edges": [float(e) for e in edges], "counts": [int(c) for c in counts]}
    return entry


# ---------------------------------------------------------------------------
# Text


def _shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _quant_text(q: dict[str, Any] | None) -> str:
    if not q:
        return ""
    s, z = q["scale"], q["zero_point"]
    flags = "".join(f"  !! {p}" for p in q.get("problems") or [])
    if len(s) == 1:
        scale = "non-finite" if s[0] is None else f"{s[0]:.6g}"
        dim = f" dim={q['quantized_dimension']}" if q["quantized_dimension"] else ""
        return f"scale={scale} zp={z[0] if z else 0}{dim}{flags}"
    known = [v for v in s if v is not None] or [0.0]
    zs = sorted(set(z))
    zp = "zp=none" if not zs else f"zp={zs[0]}" if len(zs) == 1 else f"zp={zs[0]}..{zs[-1]}"
    return f"{len(s)} scales {min(known):.4g}..{max(known):.4g} {zp} dim={q['quantized_dimension']}{flags}"


def _short_type(text: str, keep: int = 3) -> str:
    """An MLIR type with a long ``{...}`` scale list cut to ``keep`` entries (text output)."""
    start = text.find(", {")
    if start < 0:
        return text
    body = text[start + 3:text.rfind("}")]
    parts = body.split(",")
    if len(parts) <= keep + 1:
        return text
    return f"{text[:start + 3]}{','.join(parts[:keep])},... {len(parts)}}}>>"


def _bytes(n: int) -> str:
    return f"{n} B" if n < 10_000 else f"{n} B ({n / 1024:.1f} KiB)" if n < 10_000_000 else f"{n} B ({n / 2**20:.1f} MiB)"


_ABBREV = {"fused_activation_function": "act", "depth_multiplier": "depth_mult"}
_HIDE = {("quantized_bias_type", "FLOAT32"), ("weights_format", "DEFAULT"), ("asymmetric_quantize_inputs", False),
         ("keep_num_dims", False), ("fused_activation_function", "NONE"), ("dilation", "1x1"),
         ("pot_scale_int16", True), ("pot_scale_int16", False)}


def _options_text(options: dict[str, Any]) -> str:
    opts = dict(options)
    for pair, (h, w) in (("stride", ("stride_h", "stride_w")), ("filter", ("filter_height", "filter_width")),
                         ("dilation", ("dilation_h_factor", "dilation_w_factor"))):
        if h in opts and w in opts:
            opts[pair] = f"{opts.pop(h)}x{opts.pop(w)}"
    parts = []
    for k, v in opts.items():
        if v is None or v == [] or v == {} or (isinstance(v, (str, int, float, bool)) and (k, v) in _HIDE):
            continue
        parts.append(f"{_ABBREV.get(k, k)}={_value_text(v)}")
    return " ".join(parts)


def _value_text(v: Any, limit: int = 8) -> str:
    """An option value of any shape, compactly: lists as [a,b,...], tables as {k=v}."""
    if isinstance(v, dict):
        return "{" + " ".join(f"{k}={_value_text(x, limit)}" for k, x in v.items() if x not in (None, [], {})) + "}"
    if isinstance(v, (list, tuple)):
        shown = ",".join(_value_text(x, limit) for x in v[:limit])
        return f"[{shown}{',...' if len(v) > limit else ''}]" + (f"({len(v)})" if len(v) > limit else "")
    return str(v)


def _custom_text(hexed: str | None) -> str:
    if hexed is None:
        return ""
    n = len(hexed) // 2
    return f"custom_options={n}B:{hexed[:32]}{'...' if n > 16 else ''}"


def _pairs_text(mults: list[int], shifts: list[int]) -> str:
    if len(mults) <= 3:
        return " ".join(f"({m},{s})" for m, s in zip(mults, shifts))
    return f"{len(mults)} pairs: mult {min(mults)}..{max(mults)} shift {min(shifts)}..{max(shifts)}"


def _requant_text(rq: dict[str, Any]) -> list[str]:
    table = rq.get("table")
    text = (f"table {len(table)} entries" if table is not None
            else _pairs_text(rq["multipliers"], rq["shifts"]) or "no pairs")
    extra = f" left_shift={rq['left_shift']}" if rq["left_shift"] else ""
    head = f"requant {text} clamp=[{rq['act_min']},{rq['act_max']}]{extra}"
    if not rq["problems"]:
        return [head + "  ok"]
    return [f"{head}  {_MISMATCH}"] + [f"    !! {p}" for p in rq["problems"]]


def _histogram_lines(h: dict[str, Any], width: int = 40) -> list[str]:
    counts, edges = h["counts"], h["edges"]
    top = max(counts) or 1
    rows = [[f"[{edges[k]:.4g},", f"{edges[k + 1]:.4g}{']' if k == len(counts) - 1 else ')'}", str(c),
             "#" * max(1 if c else 0, round(width * c / top))] for k, c in enumerate(counts)]
    return text_table(rows, right=(0, 1, 2))


def render_text(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    f = doc["file"]
    if "model" in doc:
        m = doc["model"]
        lines += ["model", *text_table([["file", f"{f['name']}, {f['bytes']} bytes"],
                                    ["description", m["description"]],
                                    ["schema version", str(m["version"])],
                                    ["min_runtime_version", m["min_runtime_version"] or "-"]])]
        lines.append("")
        lines.append(f"metadata ({len(doc['metadata'])} entries)")
        rows = []
        for e in doc["metadata"]:
            if e["requant"] is not None:
                rq = e["requant"]
                what = (f"!! corrupt: {rq['error']}" if rq["error"]
                        else f"requant records: {rq['records']} (format {rq['format_version']})")
            else:
                what = repr(e["text"]) if e["text"] is not None else "(binary)"
            rows.append([e["name"], f"{e['bytes']} B", what])
        if rows:
            lines += text_table(rows, right=(1,))
        lines.append("")
    for sg in doc.get("subgraphs", []):
        tensors = sg.get("tensors")
        lines.append(f"subgraph {sg['index']} {sg['name']!r}")
        if tensors is not None:
            io_rows = [[kind, str(i), tensors[i]["name"], tensors[i]["dtype"] + _shape(tensors[i]["shape"]),
                        _quant_text(tensors[i]["quantization"])]
                       for kind in ("inputs", "outputs") for i in sg[kind]]
            if io_rows:
                lines += text_table([[r[0][:-1], *r[1:]] for r in io_rows], right=(1,))
        else:
            lines.append(f"  inputs {sg['inputs']} outputs {sg['outputs']}")
        if "operators" in sg:
            lines.append("")
            lines.append(f"operators ({len(sg['operators'])})")
            rows, extra = [], {}
            for op in sg["operators"]:
                name = op["op"] + (f":{op['custom_code']}" if op["custom_code"] else "")
                ins = ",".join(str(k) if k >= 0 else "-" for k in op["inputs"])
                outs = ",".join(str(k) for k in op["outputs"])
                rows.append([str(op["index"]), name, f"v{op['version']}", f"{ins} -> {outs}",
                             " ".join(x for x in (_options_text(op["options"]), _custom_text(op["custom_options"])) if x)])
                if op["requant"] is not None:
                    extra[len(rows) - 1] = _requant_text(op["requant"])
            if rows:
                table = text_table([["#", "op", "ver", "inputs -> outputs", "options"], *rows], right=(0,))
                lines.append(table[0])
                for k, line in enumerate(table[1:]):
                    lines.append(line)
                    lines += [" " * 8 + x for x in extra.get(k, [])]
        if tensors is not None:
            lines.append("")
            lines.append(f"tensors ({len(tensors)})")
            rows = [[str(t["index"]), t["name"], t["dtype"], _shape(t["shape"]),
                     _bytes(t["buffer_bytes"]) if t["buffer_bytes"] else "-", _quant_text(t["quantization"]),
                     _short_type(t["type"])]
                    for t in tensors]
            if rows:
                lines += text_table([["#", "name", "dtype", "shape", "buffer", "quantization", "type"], *rows],
                                    right=(0, 4))
        lines.append("")
    if "totals" in doc:
        t = doc["totals"]
        hist = ", ".join(f"{k} {v}" for k, v in t["ops"].items()) or "-"
        by = ", ".join(f"{k} {_bytes(v)}" for k, v in t["buffer_bytes_by_dtype"].items())
        fl = ", ".join(f"{o['index']} {o['op']}" if o["subgraph"] == 0 else f"{o['subgraph']}:{o['index']} {o['op']}"
                       for o in t["float_op_list"][:10])
        more = f", ... {t['float_ops'] - 10} more" if t["float_ops"] > 10 else ""
        rows = [["operators", f"{t['operators']}: {hist}"],
                ["tensors", str(t["tensors"])],
                ["parameters", _bytes(t["parameter_bytes"]) + (f" ({by})" if by else "")],
                ["int8 / int32", f"{_bytes(t['int8_buffer_bytes'])} / {_bytes(t['int32_buffer_bytes'])}"],
                ["float ops left", str(t["float_ops"]) + (f" ({fl}{more})" if fl else "")]]
        if t["requant_records"] or doc["requant_problems"]:
            flag = f"  {_MISMATCH}" if t["requant_flagged"] else ""
            rows.append(["requant", f"{t['requant_records']} records, {t['requant_flagged']} flagged{flag}"])
        if t.get("quantization_problems"):
            first = t["quantization_problem_list"][0]
            rows.append(["quantization", f"!! {t['quantization_problems']} tensor(s) LiteRT rejects, e.g. "
                                         f"{first['index']} '{first['name']}': {first['problems'][0]}"])
        rows += [["runtime", f"!! {w}"] for w in t.get("runtime_warnings", [])]
        lines.append("totals")
        lines += text_table(rows)
        lines += [f"  !! {p}" for p in doc["requant_problems"]]
        lines.append("")
    if "tensor" in doc:
        t = doc["tensor"]
        lines.append(f"tensor {t['index']} {t['name']!r} (subgraph {t['subgraph']})")
        rows = [["dtype", t["dtype"]], ["shape", _shape(t["shape"])],
                ["buffer", f"{t['buffer']} ({_bytes(t['buffer_bytes'])})" if t["buffer_bytes"] else f"{t['buffer']} (none)"],
                ["quantization", _quant_text(t["quantization"]) or "-"],
                ["type", _short_type(t["type"], keep=8)]]
        q = t["quantization"]
        if q and len(q["scale"]) > 1:
            rows.append(["scales", " ".join(f"{s:.6g}" if s is not None else "nan" for s in q["scale"][:8])
                         + (" ..." if len(q["scale"]) > 8 else "")])
        if t["values"] is None:
            rows.append(["values", t.get("note") or "none: not a constant (activation or input)"])
        else:
            vals = t["values"]
            rows.append(["values", " ".join(f"{v:.6g}" if v is not None else "nan" for v in vals[:12])
                         + (f" ... ({len(vals)} values)" if len(vals) > 12 else "")])
        if t["stats"]:
            st = t["stats"]
            rows.append(["stats", f"min {st['min']:.6g}  max {st['max']:.6g}  mean {st['mean']:.6g}  std {st['std']:.6g}"])
        lines += text_table(rows)
        if t["histogram"]:
            lines.append("  histogram")
            lines += ["  " + x for x in _histogram_lines(t["histogram"])]
        lines.append("")
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def dump_model(path: str | os.PathLike, as_json: bool = False, sections: Iterable[str] | None = None,
               tensor: str | None = None) -> str:
    """``qconvert dump``: the text (or JSON) description of a .tflite file."""
    doc = describe(path, sections, tensor)
    if as_json:
        return json.dumps(doc, allow_nan=False, separators=(",", ":")) + "\n"
    return render_text(doc)
