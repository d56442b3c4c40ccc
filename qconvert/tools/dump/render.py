"""``qconvert dump``'s outputs: the document (``describe``) as text for people, or as JSON.

The text output shortens long lists (scales, values); the JSON has everything.

May import: ``qconvert.tools.text``, the dump's ``mlir`` module (short types).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from qconvert.tools.dump.mlir import short_type
from qconvert.tools.text import table as text_table

_MISMATCH = "!! REQUANT MISMATCH"
TYPE_SCALES = 3  # scales a tensor's type lists in the tensors table


def render_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, allow_nan=False, separators=(",", ":")) + "\n"


def render_text(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    if "model" in doc:
        lines += _model_lines(doc)
    for sg in doc.get("subgraphs", []):
        lines += _subgraph_lines(sg)
    if "totals" in doc:
        lines += _totals_lines(doc["totals"], doc["requant_problems"])
    if "tensor" in doc:
        lines += _tensor_lines(doc["tensor"])
    while lines and lines[-1] == "":
        lines.pop()
    return "\n".join(lines) + "\n"


def _model_lines(doc: dict[str, Any]) -> list[str]:
    f, m = doc["file"], doc["model"]
    lines = ["model", *text_table([["file", f"{f['name']}, {f['bytes']} bytes"],
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
    signatures = doc.get("signatures", [])
    if not signatures:  # a .pb's file (TensorFlow's from_frozen_graph writes none either)
        return lines
    lines.append(f"signatures ({len(signatures)})")
    for sig in signatures:
        lines.append(f"  {sig['key']} (subgraph {sig['subgraph']})")
        for kind in ("inputs", "outputs"):
            ports = ", ".join(f"{name} -> {i}" for name, i in sig[kind].items())
            lines.append(f"    {kind} {ports or '(none)'}")
    lines.append("")
    return lines


def _subgraph_lines(sg: dict[str, Any]) -> list[str]:
    tensors = sg.get("tensors")
    lines = [f"subgraph {sg['index']} {sg['name']!r}"]
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
                         " ".join(x for x in (_options_text(op["options"]), _custom_text(op["custom_options"], op.get("custom_options_decoded"))) if x)])
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
                 short_type(t["type"], TYPE_SCALES)]
                for t in tensors]
        if rows:
            lines += text_table([["#", "name", "dtype", "shape", "buffer", "quantization", "type"], *rows],
                                right=(0, 4))
    lines.append("")
    return lines


def _totals_lines(t: dict[str, Any], requant_problems: list[str]) -> list[str]:
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
    if t.get("float_boundary_ops"):
        rows.append(["float I/O", ", ".join(f"{o['index']} {o['op']}" for o in t["float_boundary_ops"][:10])
                     + " (the model's float32 inputs and outputs)"])
    if t["requant_records"] or requant_problems:
        flag = f"  {_MISMATCH}" if t["requant_flagged"] else ""
        rows.append(["requant", f"{t['requant_records']} records, {t['requant_flagged']} flagged{flag}"])
    if t.get("quantization_problems"):
        first = t["quantization_problem_list"][0]
        rows.append(["quantization", f"!! {t['quantization_problems']} tensor(s) LiteRT rejects, e.g. "
                                     f"{first['index']} '{first['name']}': {first['problems'][0]}"])
    rows += [["runtime", f"!! {w}"] for w in t.get("runtime_warnings", [])]
    return ["totals", *text_table(rows), *[f"  !! {p}" for p in requant_problems], ""]


def _tensor_lines(t: dict[str, Any]) -> list[str]:
    lines = [f"tensor {t['index']} {t['name']!r} (subgraph {t['subgraph']})"]
    rows = [["dtype", t["dtype"]], ["shape", _shape(t["shape"])],
            ["buffer", f"{t['buffer']} ({_bytes(t['buffer_bytes'])})" if t["buffer_bytes"] else f"{t['buffer']} (none)"],
            ["quantization", _quant_text(t["quantization"]) or "-"],
            ["type", short_type(t["type"], keep=8)]]
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
    return lines


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


def _custom_text(hexed: str | None, decoded: Any = None) -> str:
    if hexed is None:
        return ""
    n = len(hexed) // 2
    if isinstance(decoded, dict):  # a FlexBuffer map, as TensorFlow writes a custom op's attributes
        return f"custom_options={n}B flexbuffer{{" + ", ".join(f"{k}={_short(v)}" for k, v in decoded.items()) + "}"
    return f"custom_options={n}B:{hexed[:32]}{'...' if n > 16 else ''}"


def _short(value: Any) -> str:
    return f"{value:.7g}" if isinstance(value, float) else str(value)


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

