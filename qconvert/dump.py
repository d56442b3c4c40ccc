"""``qconvert dump``: what is in a .tflite model, for people (text) and scripts (JSON).

A first version: model header and metadata, graph I/O, one line per operator with
its options and (for qconvert files) the stored requantization parameters, and one
line per tensor with dtype, shape and quantization. Per-channel scales are
summarised. Works on any TFLite file, including TensorFlow's.
"""

from __future__ import annotations

import json
import os
from typing import Any

from qconvert.converter.ir import ConversionError


def _load(path: str | os.PathLike):
    from qconvert.schema.reader import read_model

    from qconvert.converter.files import read_bytes

    data = read_bytes(path, "a .tflite file")
    try:
        return read_model(data)
    except ValueError as exc:
        raise ConversionError(f"{path}: {exc}") from None


def describe(path: str | os.PathLike) -> dict[str, Any]:
    from qconvert.schema.requant_metadata import METADATA_NAME, decode

    model = _load(path)
    requant: dict[int, Any] = {}
    if METADATA_NAME in model.metadata:
        try:
            for rec in decode(model.metadata[METADATA_NAME]):
                requant[rec.op_index] = rec
        except ValueError as exc:
            raise ConversionError(f"{path}: metadata '{METADATA_NAME}' is corrupt: {exc}") from None
    meta = {}
    for name, raw in model.metadata.items():
        if name == "min_runtime_version":
            meta[name] = raw.rstrip(b"\0").decode("ascii", "replace")
        else:
            meta[name] = f"{len(raw)} bytes"
    subgraphs = []
    for sg in model.subgraphs:
        tensors = []
        for i, t in enumerate(sg.tensors):
            entry: dict[str, Any] = {"index": i, "name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                                     "buffer_bytes": len(t.data) if t.data is not None else 0}
            if t.scale:
                entry["scale"] = [float(s) for s in t.scale]
                entry["zero_point"] = [int(z) for z in t.zero_point]
                entry["quantized_dimension"] = t.quantized_dimension
            tensors.append(entry)
        ops = []
        for i, op in enumerate(sg.operators):
            entry = {"index": i, "op": op.builtin, "version": op.version, "inputs": list(op.inputs),
                     "outputs": list(op.outputs), "options": op.options}
            rec = requant.get(i)
            if rec is not None:
                entry["requant"] = {"act_min": rec.act_min, "act_max": rec.act_max, "left_shift": rec.left_shift,
                                    "multipliers": [p[0] for p in rec.pairs], "shifts": [p[1] for p in rec.pairs]}
            ops.append(entry)
        subgraphs.append({"name": sg.name, "inputs": list(sg.inputs), "outputs": list(sg.outputs),
                          "operators": ops, "tensors": tensors})
    return {"description": model.description, "version": model.version, "metadata": meta, "subgraphs": subgraphs}


def _q(t: dict[str, Any]) -> str:
    if "scale" not in t:
        return ""
    s, z = t["scale"], t["zero_point"]
    if len(s) == 1:
        return f" scale={s[0]:.6g} zp={z[0]}"
    return f" scale[{len(s)}]={min(s):.4g}..{max(s):.4g} zp={sorted(set(z))[:3]} axis={t['quantized_dimension']}"


def dump_model(path: str | os.PathLike, as_json: bool = False) -> str:
    info = describe(path)
    if as_json:
        return json.dumps(info, indent=2, default=str) + "\n"
    lines = [f"model: {info['description']!r}, schema version {info['version']}"]
    for k, v in info["metadata"].items():
        lines.append(f"metadata {k}: {v}")
    for sg in info["subgraphs"]:
        t = sg["tensors"]
        lines.append(f"subgraph {sg['name']!r}: {len(sg['operators'])} ops, {len(t)} tensors")
        for kind in ("inputs", "outputs"):
            for i in sg[kind]:
                lines.append(f"  {kind[:-1]:6} {i}: {t[i]['name']} {t[i]['dtype']}{t[i]['shape']}{_q(t[i])}")
        for op in sg["operators"]:
            opts = ", ".join(f"{k}={v}" for k, v in op["options"].items())
            lines.append(f"  op {op['index']:3} {op['op']} v{op['version']} {op['inputs']} -> {op['outputs']}"
                         + (f" ({opts})" if opts else ""))
            rq = op.get("requant")
            if rq:
                m = rq["multipliers"]
                desc = (f"{len(m)} multipliers {min(m)}..{max(m)}, shifts {min(rq['shifts'])}..{max(rq['shifts'])}"
                        if len(m) > 3 else ", ".join(f"({a}, {b})" for a, b in zip(m, rq["shifts"])))
                lines.append(f"         requant: {desc}; clamp [{rq['act_min']}, {rq['act_max']}]"
                             + (f"; left_shift {rq['left_shift']}" if rq["left_shift"] else ""))
        for x in t:
            lines.append(f"  tensor {x['index']:3} {x['name']} {x['dtype']}{x['shape']}"
                         f"{' const ' + str(x['buffer_bytes']) + ' B' if x['buffer_bytes'] else ''}{_q(x)}")
    return "\n".join(lines) + "\n"
