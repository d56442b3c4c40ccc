"""Stage 5d: op versions, tidy tensor names, and the requantization metadata.

1. Each op gets the version TensorFlow writes for its int8 form (op table), and
   MUL version 3 when its rescale factor in1·in2/out is at least 1.
2. Quantized tensors named ``x/q`` take back the name ``x`` where it is free.
3. For every op that rescales, the integer multiplier(s) and shift(s) TFLite's
   kernels compute in Prepare are stored in the ``qconvert_requant`` metadata
   entry (see ``qconvert.schema.requant_metadata``), with the activation clamp.
"""

from __future__ import annotations

import numpy as np

from qconvert.converter.ir import ConversionError, Graph, Node
from qconvert.converter.ops import TFL_OPS
from qconvert.quantize_pass.io import rename_tensors


def _scale(graph: Graph, name: str) -> float:
    return float(np.float32(graph.tensors[name].quant.scale[0]))


def assign_versions(graph: Graph) -> Graph:
    for node in graph.nodes:
        if node.op in ("QUANTIZE", "DEQUANTIZE"):
            node.attrs = {}  # bookkeeping (who set the parameters) is not a TFLite option
        row = TFL_OPS.get(node.op)
        node.version = row.int8_version if row is not None else 1
        if node.attrs.get("_float"):
            node.version = 1
            continue
        if node.op == "MUL":
            a, b, o = (np.float32(_scale(graph, t)) for t in (*node.inputs[:2], node.outputs[0]))
            if np.float32(a * b) / o >= 1.0:
                node.version = 3
    return graph


def tidy_names(graph: Graph) -> Graph:
    mapping: dict[str, str] = {}
    taken = set(graph.tensors)
    for name in graph.tensors:
        for suffix in ("/q", "/dq"):
            if name.endswith(suffix):
                base = name[: -len(suffix)]
                if base not in taken:
                    mapping[name] = base
                    taken.add(base)
                break
    rename_tensors(graph, mapping)
    return graph


def check_int8(graph: Graph) -> Graph:
    floats = [
        f"{n.op} '{n.name}' tensor '{t}'"
        for n in graph.nodes
        if not (graph.allow_float and (n.attrs.get("_float") or n.op in ("QUANTIZE", "DEQUANTIZE")))
        for t in n.inputs + n.outputs
        if graph.tensors[t].dtype == "float32"
    ]
    if floats:
        raise ConversionError(f"float tensors left after quantization: {'; '.join(floats[:10])}")
    return graph


def _record(graph: Graph, index: int, node: Node):
    from qconvert.converter import quant_math as qm
    from qconvert.schema.requant_metadata import RequantRecord

    t = graph.tensors
    out = t[node.outputs[0]]
    op = node.op
    act = node.attrs.get("fused_activation_function", "NONE")
    lo, hi = qm.activation_range(act, _scale(graph, out.name), out.quant.zero_point[0])
    pairs: list[tuple[int, int]] = []
    left_shift = 0
    per_channel = False
    wide = None
    if op in ("CONV_2D", "DEPTHWISE_CONV_2D"):
        w = t[node.inputs[1]]
        channels = w.shape[0] if op == "CONV_2D" else w.shape[3]
        pairs = qm.conv_requant(_scale(graph, node.inputs[0]), w.quant.scale, _scale(graph, out.name), channels)
        per_channel = True
    elif op == "FULLY_CONNECTED":
        w = t[node.inputs[1]]
        bias = node.inputs[2] if len(node.inputs) > 2 else None
        pairs = qm.fully_connected_requant(
            _scale(graph, node.inputs[0]), w.quant.scale, _scale(graph, out.name),
            _scale(graph, bias) if bias else None,
        )
        per_channel = len(w.quant.scale) > 1
        wide = qm.fully_connected_effective_scales(_scale(graph, node.inputs[0]), w.quant.scale,
                                                   _scale(graph, out.name))
    elif op in ("ADD", "SUB"):
        p = qm.add_sub_requant(
            _scale(graph, node.inputs[0]), _scale(graph, node.inputs[1]), _scale(graph, out.name), op == "SUB"
        )
        left_shift = int(p["left_shift"])
        pairs = [p["input1"], p["input2"], p["output"]]  # type: ignore[list-item]
    elif op == "MUL":
        pairs = [qm.mul_requant(_scale(graph, node.inputs[0]), _scale(graph, node.inputs[1]), _scale(graph, out.name))]
    elif op == "QUANTIZE":
        pairs = [qm.quantize_requant(_scale(graph, node.inputs[0]), _scale(graph, out.name))]
    elif op == "MEAN":
        x = t[node.inputs[0]]
        n = int(np.prod(x.shape)) // max(1, int(np.prod(out.shape)))
        m = qm.mean_requant(_scale(graph, x.name), x.quant.zero_point[0], _scale(graph, out.name), out.quant.zero_point[0], n)
        pairs = [(m.multiplier, m.shift)]
    elif op in ("RELU", "RELU6", "RELU_N1_TO_1"):
        pairs = [qm.relu_requant(_scale(graph, node.inputs[0]), _scale(graph, out.name))]
        lo, hi = qm.activation_range(op, _scale(graph, out.name), out.quant.zero_point[0])
    elif op == "SOFTMAX":
        pairs = [qm.softmax_requant(_scale(graph, node.inputs[0]), float(node.attrs.get("beta", 1.0)))]
    elif op in ("LOGISTIC", "TANH"):
        x = t[node.inputs[0]]
        table = qm.activation_table(op, _scale(graph, x.name), x.quant.zero_point[0], _scale(graph, out.name),
                                    out.quant.zero_point[0])
        return RequantRecord(op_index=index, builtin=op, act_min=-128, act_max=127, left_shift=0, table=table)
    elif act == "NONE":
        return None
    return RequantRecord(
        op_index=index, builtin=op, act_min=int(lo), act_max=int(hi), left_shift=left_shift,
        pairs=[(int(a), int(b)) for a, b in pairs], per_channel=per_channel, wide=wide,
    )


def requant_metadata(graph: Graph) -> Graph:
    from qconvert.schema.requant_metadata import encode

    records = []
    for index, node in enumerate(graph.nodes):
        if node.attrs.get("_float") or any(graph.tensors[t].dtype == "float32" for t in node.inputs + node.outputs):
            continue
        try:
            rec = _record(graph, index, node)
        except ValueError as exc:  # TFLite's Prepare would reject these scales too
            raise ConversionError(
                f"{node.op} '{node.name}': its quantization parameters are outside what TFLite's kernels "
                f"accept ({exc}); check the FakeQuant ranges around it"
            ) from None
        if rec is not None:
            records.append(rec)
    graph.metadata["qconvert_requant"] = encode(records)
    return graph
