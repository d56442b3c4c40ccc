"""``qconvert compare ... --html REPORT.html`` and ``--model-explorer FILE.json``: the report people look at.

One self-contained HTML file (inline CSS, SVG and a few lines of JavaScript; nothing fetched
when it is opened): a header with the output SNR, the per-layer SNR chart, the graph drawn
with each op as a box coloured by its error and marked by its precision, and the tables.

The precision of an op is read from the .tflite's tensor types, never from its name: an op
whose activations are int8 is int8, one with an int16 activation is 16x8, one whose
activations are float32 is float, and one whose input and output types differ (QUANTIZE,
DEQUANTIZE, an int8↔int16 QUANTIZE) is a conversion at a precision boundary.

The graph's layout is a layered top-to-bottom drawing: each op on the layer one below its
deepest producer (longest path), edges across several layers routed through dummy points,
the order inside a layer by barycentre sweeps (the order with the fewest crossings kept),
and x positions pulled towards the neighbours' mean under a minimum gap.

May import: ``qconvert.tools.compare`` and what it imports.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from qconvert.io import write_atomic
from qconvert.schema.reader import ModelInfo, OpInfo
from qconvert.schema.reader import read_model as read_tflite
from qconvert.tools.compare import Report, Row
from qconvert.tools.jsonable import jsonable

# SNR (dB) → fill colour; above the last stop the last colour, below the first the first.
STOPS: tuple[tuple[float, str], ...] = (
    (0.0, "#d7301f"), (10.0, "#fc8d59"), (20.0, "#fdcc8a"), (30.0, "#e6f5a0"), (40.0, "#9bd57f"),
)
UNMEASURED = "#eceff1"
CHART_TOP = 60  # dB: the chart's scale stops here; an op alone above it is a triangle at the top
CAP = 100.0  # dB written for a layer without any error (Model Explorer's values must be finite)
_ACTIVATION_TYPES = ("float32", "float16", "int8", "uint8", "int16")


def colour(snr: float | None) -> str:
    """The fill colour of an SNR on the report's scale (``UNMEASURED`` for None)."""
    if snr is None or math.isnan(snr):
        return UNMEASURED
    if snr <= STOPS[0][0]:
        return STOPS[0][1]
    for (a, ca), (b, cb) in zip(STOPS, STOPS[1:]):
        if snr <= b:
            t = (snr - a) / (b - a)
            return "#" + "".join(f"{round(int(ca[k:k + 2], 16) * (1 - t) + int(cb[k:k + 2], 16) * t):02x}"
                                 for k in (1, 3, 5))
    return STOPS[-1][1]


# ---------------------------------------------------------------------------
# what each op is: precision from tensor types


def precision(model: ModelInfo, op: OpInfo) -> str:
    """'int8', 'int16' (16x8), 'float', 'A→B' for a conversion between two types, or the
    output's type for anything else, from the op's activation tensors' types."""
    tensors = model.tensors
    ins = [tensors[i].dtype for i in op.inputs if i >= 0 and tensors[i].data is None]
    outs = [tensors[i].dtype for i in op.outputs if i >= 0]
    first_in = next((d for d in ins if d in _ACTIVATION_TYPES), None)
    first_out = next((d for d in outs if d in _ACTIVATION_TYPES), None)
    if first_in and first_out and first_in != first_out:
        return f"{_short(first_in)}→{_short(first_out)}"
    seen = set(ins + outs)
    if "int16" in seen:
        return "int16"
    if "float32" in seen or "float16" in seen:
        return "float"
    if "int8" in seen or "uint8" in seen:
        return "int8"
    return outs[0] if outs else "?"


def _short(dtype: str) -> str:
    return {"float32": "f32", "float16": "f16", "int8": "i8", "uint8": "u8", "int16": "i16"}.get(dtype, dtype)


def _badge(prec: str) -> str:
    return {"int8": "i8", "int16": "16x8", "float": "f32"}.get(prec, prec)


def _kind(prec: str) -> str:
    """The CSS class of a precision: int8, int16, float, conv(ersion) or other."""
    if "→" in prec:
        return "conv"
    return prec if prec in ("int8", "int16", "float") else "other"


def _constants(model: ModelInfo, op: OpInfo) -> str:
    types = []
    for i in op.inputs:
        if i >= 0 and model.tensors[i].data is not None and model.tensors[i].dtype not in types:
            types.append(model.tensors[i].dtype)
    return ", ".join(types)


def _snr(v: float) -> float | None:
    return None if math.isnan(v) else v


def _fmt(v: float | None, unit: str = " dB") -> str:
    if v is None:
        return "–"
    if math.isinf(v):
        return ("∞" if v > 0 else "−∞") + unit
    return f"{v:.1f}{unit}"


# ---------------------------------------------------------------------------
# layout


@dataclass
class _Vertex:
    key: str
    width: float
    height: float
    preds: list[int] = field(default_factory=list)
    succs: list[int] = field(default_factory=list)
    layer: int = 0
    x: float = 0.0
    dummy: bool = False


@dataclass
class Layout:
    vertices: list[_Vertex]
    edges: list[list[int]]  # each a path of vertex indices from a real vertex to a real vertex
    layers: list[list[int]]
    width: float
    height: float
    layer_y: list[float]
    crossings: int


GAP_X, GAP_Y, MARGIN = 22.0, 34.0, 24.0


def layout(sizes: Sequence[tuple[str, float, float]], edges: Sequence[tuple[int, int]], sweeps: int = 12) -> Layout:
    """A layered drawing of a DAG whose vertices are given in a topological order.

    ``sizes`` are (key, width, height) per vertex; ``edges`` (source, target) pairs with
    source < target. Longest-path layers from the sources (a source that feeds only a deep
    vertex sits right above it), dummy vertices on long edges, barycentre ordering sweeps
    keeping the order with the fewest crossings, then x positions by neighbour means
    under the minimum gap, alternately from above and from below."""

    vs = [_Vertex(k, w, h) for k, w, h in sizes]
    edges = sorted(set(edges))
    for a, b in edges:
        if a >= b:
            raise ValueError(f"edge {a}→{b} is not in topological order")
        vs[a].succs.append(b)
        vs[b].preds.append(a)
    for v in vs:  # longest path from the sources
        v.layer = max((vs[p].layer + 1 for p in v.preds), default=0)
    for v in reversed(vs):  # sources hang right above their first consumer
        if not v.preds and v.succs:
            v.layer = min(vs[s].layer for s in v.succs) - 1
    paths: list[list[int]] = []
    real = len(vs)
    for a, b in edges:
        path = [a]
        for layer in range(vs[a].layer + 1, vs[b].layer):
            d = _Vertex(f"d{len(vs)}", 2.0, 0.0, layer=layer, dummy=True)
            vs.append(d)
            path.append(len(vs) - 1)
        path.append(b)
        for u, w in zip(path, path[1:]):
            if u >= real or w >= real:
                vs[u].succs.append(w)
                vs[w].preds.append(u)
        paths.append(path)
    depth = max((v.layer for v in vs), default=-1) + 1
    layers: list[list[int]] = [[] for _ in range(depth)]
    for k, v in enumerate(vs):  # first order: creation order (the file's execution order)
        layers[v.layer].append(k)

    best, best_cross = [list(lay) for lay in layers], _crossings(vs, layers)
    for sweep in range(sweeps):
        down = sweep % 2 == 0
        order = range(1, depth) if down else range(depth - 2, -1, -1)
        for li in order:
            pos = {k: i for i, k in enumerate(layers[li - 1 if down else li + 1])}
            cur = {k: i for i, k in enumerate(layers[li])}

            def bary(k: int) -> float:
                nb = [pos[n] for n in (vs[k].preds if down else vs[k].succs) if n in pos]
                return sum(nb) / len(nb) if nb else cur[k]

            layers[li].sort(key=lambda k: (bary(k), cur[k]))
        c = _crossings(vs, layers)
        if c < best_cross:
            best, best_cross = [list(lay) for lay in layers], c
    layers = best

    for lay in layers:  # packed from the left
        x = 0.0
        for k in lay:
            vs[k].x = x + vs[k].width / 2
            x += vs[k].width + GAP_X
    for it in range(8):
        down = it % 2 == 0
        for li in (range(1, depth) if down else range(depth - 2, -1, -1)):
            want = []
            for k in layers[li]:
                nb = vs[k].preds if down else vs[k].succs
                want.append(sum(vs[n].x for n in nb) / len(nb) if nb else vs[k].x)
            _place(vs, layers[li], want)
    left = min((vs[k].x - vs[k].width / 2 for lay in layers for k in lay), default=0.0)
    for v in vs:
        v.x += MARGIN - left
    width = max((v.x + v.width / 2 for v in vs), default=0.0) + MARGIN
    layer_y, y = [], MARGIN
    for lay in layers:
        h = max((vs[k].height for k in lay), default=0.0)
        layer_y.append(y + h / 2)
        y += h + GAP_Y
    return Layout(vs, paths, layers, width, y - GAP_Y + MARGIN, layer_y, best_cross)


def _place(vs: list[_Vertex], lay: list[int], want: list[float]) -> None:
    """x positions as near ``want`` as the order and the gaps allow: the mean of a
    left-to-right and a right-to-left pass (both feasible, so their mean is)."""
    n = len(lay)
    if not n:
        return
    gap = [(vs[lay[i]].width + vs[lay[i + 1]].width) / 2 + GAP_X for i in range(n - 1)]
    a = list(want)
    for i in range(1, n):
        a[i] = max(a[i], a[i - 1] + gap[i - 1])
    b = list(want)
    for i in range(n - 2, -1, -1):
        b[i] = min(b[i], b[i + 1] - gap[i])
    for i in range(n):
        vs[lay[i]].x = (a[i] + b[i]) / 2


def _crossings(vs: list[_Vertex], layers: list[list[int]]) -> int:
    """Edge crossings between adjacent layers (inversions of the targets' positions)."""
    total = 0
    for upper, lower in zip(layers, layers[1:]):
        pu = {k: i for i, k in enumerate(upper)}
        pl = {k: i for i, k in enumerate(lower)}
        pairs = sorted((pu[k], pl[s]) for k in upper for s in vs[k].succs if s in pl)
        seen: list[int] = []
        for _, t in pairs:  # count earlier edges whose target lies right of t
            lo, hi = 0, len(seen)
            while lo < hi:
                mid = (lo + hi) // 2
                if seen[mid] <= t:
                    lo = mid + 1
                else:
                    hi = mid
            total += len(seen) - lo
            seen.insert(lo, t)
    return total


# ---------------------------------------------------------------------------
# the page


@dataclass
class _Op:
    index: int
    op: OpInfo
    name: str
    prec: str
    consts: str
    row: Row | None
    worst: int  # rank among the worst layers (1-based), 0 if not among them


def _ops(report: Report, model: ModelInfo) -> list[_Op]:
    rows = {r.index: r for r in report.rows}
    worst = {r.index: k + 1 for k, r in enumerate(report.worst())}
    out = []
    for k, op in enumerate(model.operators):
        name = model.tensors[op.outputs[0]].name if op.outputs else f"op {k}"
        out.append(_Op(k, op, name, precision(model, op), _constants(model, op), rows.get(k), worst.get(k, 0)))
    return out


def output_rows(report: Report, model: ModelInfo) -> list[tuple[str, Row | None]]:
    """Per model output: its name and the row that measures it (through a final DEQUANTIZE
    or QUANTIZE, the row of the int8 tensor it converts)."""
    by_tensor = {r.tensor: r for r in report.rows}
    producer = {t: k for k, op in enumerate(model.operators) for t in op.outputs}
    found = []
    for i in model.outputs:
        t = i
        while model.tensors[t].name not in by_tensor and t in producer:
            op = model.operators[producer[t]]
            if "→" not in precision(model, op):
                break
            t = op.inputs[0]
        found.append((model.tensors[i].name, by_tensor.get(model.tensors[t].name)))
    return found


OP_W, OP_H, CONV_H = 210.0, 54.0, 34.0


def _op_width(o: _Op) -> float:
    """Wide enough for '#index BUILTIN' and the badge (11 px bold capitals ≈ 7.6 px each)."""
    return max(OP_W, 16 + 7.6 * len(f"#{o.index} {o.op.builtin}") + 7.0 * len(_badge(o.prec)) + 24)


def _label(name: str, n: int = 32) -> str:
    """The end of a tensor name (its most specific part), at most ``n`` characters."""
    name = name.split(";")[0]
    return name if len(name) <= n else "…" + name[-(n - 1):]


def _graph_svg(report: Report, model: ModelInfo, ops: list[_Op]) -> tuple[str, int]:
    tensors = model.tensors
    sizes: list[tuple[str, float, float]] = []
    for k in model.inputs:
        sizes.append((f"in{k}", max(110.0, 7.0 * len(_label(tensors[k].name, 28)) + 20), 26.0))
    first_op = len(sizes)
    for o in ops:
        sizes.append((f"op{o.index}", _op_width(o), CONV_H if _kind(o.prec) == "conv" else OP_H))
    first_out = len(sizes)
    for k in model.outputs:
        sizes.append((f"out{k}", max(110.0, 7.0 * len(_label(tensors[k].name, 28)) + 20), 26.0))
    producer: dict[int, int] = {k: j for j, k in enumerate(model.inputs)}
    edges = []
    edge_tensor: dict[tuple[int, int], int] = {}
    for o in ops:
        v = first_op + o.index
        for i in o.op.inputs:
            if i >= 0 and i in producer:
                edges.append((producer[i], v))
                edge_tensor[(producer[i], v)] = i
        for i in o.op.outputs:
            producer[i] = v
    for j, k in enumerate(model.outputs):
        if k in producer:
            edges.append((producer[k], first_out + j))
            edge_tensor[(producer[k], first_out + j)] = k
    lay = layout(sizes, edges)
    vs = lay.vertices

    def top(k: int) -> tuple[float, float]:
        return vs[k].x, lay.layer_y[vs[k].layer] - vs[k].height / 2

    def bottom(k: int) -> tuple[float, float]:
        return vs[k].x, lay.layer_y[vs[k].layer] + vs[k].height / 2

    parts = [f'<svg id="graph-svg" width="{lay.width:.0f}" height="{lay.height:.0f}" '
             f'viewBox="0 0 {lay.width:.0f} {lay.height:.0f}" data-w="{lay.width:.0f}" data-h="{lay.height:.0f}">',
             '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#78909c"/></marker></defs>',
             '<g class="edges">']
    for path in lay.edges:
        pts = [bottom(path[0])]
        pts += [(vs[k].x, lay.layer_y[vs[k].layer]) for k in path[1:-1]]
        pts.append(top(path[-1]))
        d = [f"M{pts[0][0]:.1f},{pts[0][1]:.1f}"]
        for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
            dy = (y1 - y0) / 2
            d.append(f"C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} {x1:.1f},{y1:.1f}")
        t = tensors[edge_tensor[(path[0], path[-1])]]
        parts.append(f'<path d="{" ".join(d)}" marker-end="url(#arrow)">'
                     f'<title>{html.escape(t.name)} {t.dtype}{list(t.shape)}</title></path>')
    parts.append("</g><g class=\"nodes\">")
    for j, k in enumerate(model.inputs):
        parts.append(_io_node(vs[j], lay, tensors[k], "input"))
    for o in ops:
        parts.append(_op_node(vs[first_op + o.index], lay, o))
    for j, k in enumerate(model.outputs):
        parts.append(_io_node(vs[first_out + j], lay, tensors[k], "output"))
    parts.append("</g></svg>")
    return "".join(parts), lay.crossings


def _io_node(v: _Vertex, lay: Layout, t: Any, what: str) -> str:
    x, y = v.x - v.width / 2, lay.layer_y[v.layer] - v.height / 2
    return (f'<g class="io" transform="translate({x:.1f},{y:.1f})"><title>{what} {html.escape(t.name)} '
            f'{t.dtype}{list(t.shape)}</title><rect width="{v.width:.0f}" height="{v.height:.0f}" rx="13"/>'
            f'<text x="{v.width / 2:.0f}" y="17" text-anchor="middle">{what}: {html.escape(_label(t.name, 28))}'
            f'</text></g>')


def _op_node(v: _Vertex, lay: Layout, o: _Op) -> str:
    x, y = v.x - v.width / 2, lay.layer_y[v.layer] - v.height / 2
    r = o.row
    e2e = _snr(r.e2e.snr_db()) if r else None
    local = _snr(r.local.snr_db()) if r and r.local.count else None
    kind = _kind(o.prec)
    fill_l, fill_e = colour(local if local is not None else e2e), colour(e2e)
    cls = f"node k-{kind}" + (" worst" if o.worst else "")
    w, h = v.width, v.height
    title = (f"#{o.index} {o.op.builtin} ({o.prec})\n{o.name}\nend to end {_fmt(e2e)}, op alone {_fmt(local)}"
             if r else f"#{o.index} {o.op.builtin} ({o.prec})\n{o.name}\nnot measured")
    rank = f' data-rank="{o.worst}"' if o.worst else ""
    out = [f'<g class="{cls}" id="n{o.index}" data-i="{o.index}"{rank} data-cl="{fill_l}" data-ce="{fill_e}" '
           f'transform="translate({x:.1f},{y:.1f})"><title>{html.escape(title)}</title>']
    if kind == "int16":  # a double border: 16x8
        out.append(f'<rect class="outer" x="-4" y="-4" width="{w + 8:.0f}" height="{h + 8:.0f}" rx="8"/>')
    out.append(f'<rect class="box" width="{w:.0f}" height="{h:.0f}" rx="{14 if kind == "conv" else 5}" '
               f'fill="{fill_l}"/>')
    out.append(f'<text class="op" x="8" y="15">#{o.index} {html.escape(o.op.builtin)}</text>')
    badge = _badge(o.prec)
    bw = 7.0 * len(badge) + 10
    out.append(f'<g class="badge b-{kind}" transform="translate({w - bw - 5:.0f},4)"><rect width="{bw:.0f}" '
               f'height="15" rx="3"/><text x="{bw / 2:.0f}" y="11" text-anchor="middle">{html.escape(badge)}'
               f'</text></g>')
    if kind == "conv":
        line2 = f"{_fmt(e2e)}" if r else ""
        out.append(f'<text class="v" x="8" y="28">{html.escape(line2)}</text>')
    else:
        line2 = f"op {_fmt(local)} · e2e {_fmt(e2e)}" if r else "not measured"
        out.append(f'<text class="v" x="8" y="30">{html.escape(line2)}</text>')
        out.append(f'<text class="t" x="8" y="46">{html.escape(_label(o.name))}</text>')
    if o.worst:
        out.append(f'<g class="rank"><circle cx="0" cy="0" r="9"/><text x="0" y="4" text-anchor="middle">'
                   f'{o.worst}</text></g>')
    out.append("</g>")
    return "".join(out)


def _chart_svg(report: Report, ops: list[_Op]) -> str:
    rows = report.rows
    n = len(rows)
    if not n:
        return "<p>No layer measured.</p>"
    finite = [v for r in rows for v in (r.e2e.snr_db(), r.local.snr_db() if r.local.count else 0.0)
              if math.isfinite(v)]
    top = float(min(CHART_TOP, max(40, math.ceil(max(finite, default=40.0) / 10) * 10)))
    step = max(6.0, min(40.0, 1100.0 / n))
    labels = n <= 120
    left, ph, bottom = 44.0, 190.0, (120.0 if labels else 30.0)
    width, height = left + step * n + 20, ph + bottom + 16
    bad = {r.index: k + 1 for k, r in enumerate(report.worst())}
    prec = {o.index: o.prec for o in ops}

    def y(v: float) -> float:
        return 8 + ph * (1 - max(0.0, min(v, top)) / top)

    out = [f'<svg id="chart-svg" width="{width:.0f}" height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}">']
    for g in range(0, int(top) + 1, 10):
        out.append(f'<line class="grid" x1="{left}" x2="{width - 10:.0f}" y1="{y(g):.1f}" y2="{y(g):.1f}"/>'
                   f'<text class="ax" x="{left - 6}" y="{y(g) + 4:.1f}" text-anchor="end">{g}</text>')
    out.append(f'<text class="ax" transform="translate(12,{8 + ph / 2:.0f}) rotate(-90)" text-anchor="middle">'
               f'SNR (dB)</text>')
    for k, r in enumerate(rows):
        e2e, local = r.e2e.snr_db(), (r.local.snr_db() if r.local.count else None)
        x0 = left + k * step
        bw = max(2.0, step * 0.7)
        cls = "bar worst" if r.index in bad else "bar"
        tip = html.escape(f"#{r.index} {r.op} ({prec.get(r.index, '')}) {r.tensor}\nend to end {_fmt(e2e)}, "
                          f"op alone {_fmt(local)}")
        ev = 0.0 if math.isnan(e2e) else e2e
        out.append(f'<g class="col" data-i="{r.index}"><title>{tip}</title>'
                   f'<rect class="hit" x="{x0:.1f}" y="8" width="{step:.1f}" height="{ph:.0f}"/>'
                   f'<rect class="{cls}" x="{x0 + (step - bw) / 2:.1f}" y="{y(ev):.1f}" width="{bw:.1f}" '
                   f'height="{max(0.0, 8 + ph - y(ev)):.1f}" fill="{colour(e2e)}"/>')
        if local is not None and not math.isnan(local):
            cx, rr = x0 + step / 2, min(4.0, step / 3)
            if local > top:  # above the chart (up to a lossless op): a triangle at the top
                out.append(f'<path class="dot" d="M{cx - rr:.1f},{y(top) + rr:.1f} h{2 * rr:.1f} '
                           f'l{-rr:.1f},{-2 * rr:.1f} z"/>')
            else:
                out.append(f'<circle class="dot" cx="{cx:.1f}" cy="{y(local):.1f}" r="{rr:.1f}"/>')
        if r.index in bad:
            yy = y(local if local is not None else ev)
            out.append(f'<text class="wlabel" x="{x0 + step / 2:.1f}" y="{max(yy - 7, 16):.1f}" '
                       f'text-anchor="middle">{_fmt(local, "")}</text>')
        if labels:
            out.append(f'<text class="xl" transform="translate({x0 + step / 2 + 3:.1f},{8 + ph + 6:.0f}) '
                       f'rotate(-60)" text-anchor="end">{r.index} {html.escape(r.op)}</text>')
        elif k % 10 == 0:
            out.append(f'<text class="xl" x="{x0:.1f}" y="{8 + ph + 14:.0f}">{r.index}</text>')
        out.append("</g>")
    out.append(f'<line class="axis" x1="{left}" x2="{width - 10:.0f}" y1="{8 + ph}" y2="{8 + ph}"/></svg>')
    return "".join(out)


def _table(ops: list[_Op]) -> str:
    cols = [("#", "n"), ("op", "s"), ("precision", "s"), ("tensor", "s"), ("shape", "s"), ("SNR dB", "n"),
            ("op alone dB", "n"), ("cosine", "n"), ("max |err|", "n"), ("max LSB", "n"), ("mean LSB", "n"),
            ("mean |LSB|", "n"), ("scale", "n"), ("zero point", "n")]
    out = ['<table class="sortable" id="layers"><thead><tr>']
    out += [f'<th data-t="{t}">{html.escape(c)}</th>' for c, t in cols]
    out.append("</tr></thead><tbody>")
    for o in ops:
        if o.row is None:
            continue
        d = o.row.as_dict()

        def num(v: Any, fmt: str) -> str:
            if v is None:
                return '<td data-v="">–</td>'
            if isinstance(v, str):
                return f'<td data-v="{"1e308" if v == "inf" else "-1e308"}">{"∞" if v == "inf" else "−∞"}</td>'
            return f'<td data-v="{v!r}">{format(v, fmt)}</td>'

        cls = ' class="worst"' if o.worst else ""
        out.append(f'<tr data-i="{o.index}"{cls}><td data-v="{o.index}">{o.index}</td>'
                   f'<td>{html.escape(o.op.builtin)}</td><td>{html.escape(o.prec)}</td>'
                   f'<td class="name">{html.escape(o.row.tensor)}</td><td>{html.escape(str(list(o.row.shape)))}</td>'
                   + num(d["snr_db"], ".1f") + num(d["local_snr_db"], ".1f") + num(d["cosine"], ".5f")
                   + num(d["max_abs_error"], ".4g") + num(d["max_error_lsb"], ".1f") + num(d["mean_error_lsb"], "+.3f")
                   + num(d["mean_abs_error_lsb"], ".3f") + num(d["scale"], ".4g") + num(d["zero_point"], "d")
                   + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _others(ops: list[_Op], model: ModelInfo) -> str:
    rest = [o for o in ops if o.row is None]
    if not rest:
        return ""
    out = ['<h2 id="unmeasured">Ops not measured</h2><p class="note">Ops whose output the float graph '
           'does not have (a conversion at a precision boundary, a float op, an op TensorFlow fused away), '
           'or whose output is not int8/int16.</p><table class="sortable"><thead><tr><th data-t="n">#</th>'
           '<th data-t="s">op</th><th data-t="s">precision</th><th data-t="s">output</th><th data-t="s">type</th>'
           '<th data-t="s">constants</th></tr></thead><tbody>']
    for o in rest:
        t = model.tensors[o.op.outputs[0]] if o.op.outputs else None
        out.append(f'<tr data-i="{o.index}"><td data-v="{o.index}">{o.index}</td><td>{html.escape(o.op.builtin)}'
                   f'</td><td>{html.escape(o.prec)}</td><td class="name">{html.escape(o.name)}</td>'
                   f'<td>{html.escape(t.dtype + str(list(t.shape))) if t else ""}</td>'
                   f'<td>{html.escape(o.consts)}</td></tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _details(ops: list[_Op]) -> str:
    """Per op, what the side panel shows when its box is clicked (JSON, '</' escaped)."""
    data = {}
    for o in ops:
        d = o.row.as_dict() if o.row else {}
        data[o.index] = {"op": o.op.builtin, "prec": {"int16": "16x8 (int16 activations)"}.get(o.prec, o.prec), "name": o.name, "consts": o.consts,
                         **{k: d.get(k) for k in ("shape", "snr_db", "local_snr_db", "cosine", "max_abs_error",
                                                  "max_error_lsb", "mean_error_lsb", "mean_abs_error_lsb",
                                                  "scale", "zero_point")}}
    return json.dumps(jsonable(data), allow_nan=False).replace("</", "<\\/")  # cosine, max_abs_error: NaN/inf


def render(report: Report, model: ModelInfo | None = None) -> str:
    """The report as one self-contained HTML document."""
    if model is None:
        model = read_tflite(Path(report.tflite).read_bytes())
    ops = _ops(report, model)
    outs = output_rows(report, model)
    out_snr = " · ".join(f"<b>{_fmt(_snr(r.e2e.snr_db()))}</b> ({html.escape(_label(n, 40))})" if r else
                         f"<b>–</b> ({html.escape(_label(n, 40))}: no int8/int16 tensor measured)" for n, r in outs)
    worst = report.worst()
    worst_text = ", ".join(f'<a href="#n{r.index}" data-i="{r.index}">#{r.index} {html.escape(r.op)} '
                           f'({_fmt(_snr(r.local.snr_db()))})</a>' for r in worst)
    doc = report.as_dict()
    min_snr = doc["min_snr_db"]
    title = f"qconvert compare: {Path(report.tflite).name}"
    header = _HEADER.format(
        title=html.escape(title), model=html.escape(report.pb), tflite=html.escape(report.tflite),
        samples=report.samples, engine=html.escape(report.engine),
        reference="float graph with its FakeQuants" if report.fake_quant else "float graph", out_snr=out_snr or "–",
        min_snr=_fmt(float("inf") if min_snr == "inf" else float("-inf") if min_snr == "-inf" else min_snr),
        n_ops=len(ops), n_rows=len(report.rows), prec_text=precision_counts(ops), worst=worst_text or "–")
    return page(title, header, report, model, f"Generated by qconvert compare; {len(report.unmapped)} op(s) not "
                f"measured. This file needs no network.", ops=ops)


def precision_counts(ops: Sequence[_Op]) -> str:
    """'5 int8, 2 float, 4 conversions': how many ops of each precision."""
    counts: dict[str, int] = {}
    for o in ops:
        counts[_kind(o.prec)] = counts.get(_kind(o.prec), 0) + 1
    names = {"int8": "int8", "int16": "16x8", "float": "float", "conv": "conversions", "other": "other"}
    return ", ".join(f"{counts[k]} {names[k]}" for k in names if counts.get(k))


def page(title: str, header: str, report: Report, model: ModelInfo, footer: str, before: str = "",
         css: str = "", ops: list[_Op] | None = None) -> str:
    """A whole document: ``header`` (HTML), ``before`` (sections ahead of the per-layer ones),
    then the chart, the graph and the tables of ``report`` on ``model``, the footer (text) and
    the script. Other reports (``tune``'s) build on it."""
    ops = _ops(report, model) if ops is None else ops
    graph, crossings = _graph_svg(report, model, ops)
    legend_stops = ", ".join(f"{c} {100 * s / STOPS[-1][0]:.0f}%" for s, c in STOPS)
    sections = _SECTIONS.format(
        chart=_chart_svg(report, ops), graph=graph, crossings=crossings, legend_stops=legend_stops,
        ticks="".join(f'<span style="left:{100 * s / STOPS[-1][0]:.0f}%">{s:g}</span>' for s, _ in STOPS),
        table=_table(ops), others=_others(ops, model))
    return (_HEAD.format(title=html.escape(title), css=_CSS + css) + header + "<main>" + before + sections
            + "</main>" + _FOOT.format(footer=html.escape(footer), data=_details(ops), js=_JS))


def write_html(report: Report, path: str) -> None:
    write_atomic(path, render(report).encode("utf-8"))


# ---------------------------------------------------------------------------
# Model Explorer


def model_explorer(report: Report) -> dict[str, Any]:
    """Per-op error as Model Explorer node data for one graph: results keyed by node id (the
    operator's index in the subgraph, as Model Explorer's .tflite adapter numbers nodes), the
    value the op-alone SNR in dB (the end-to-end SNR where the op alone was not measured;
    ±100 for a layer without error / without signal), coloured by thresholds of the report's
    scale."""

    def finite(v: float) -> float:
        return max(-CAP, min(CAP, v))

    results = {}
    for r in report.rows:
        v = r.local.snr_db() if r.local.count else r.e2e.snr_db()
        if not math.isnan(v):
            results[str(r.index)] = {"value": round(finite(v), 3)}
    thresholds = [{"value": b, "bgColor": c} for (b, _), (_, c) in zip(STOPS[1:], STOPS)]
    thresholds.append({"value": CAP, "bgColor": STOPS[-1][1]})
    return {"results": results, "thresholds": thresholds}


def model_explorer_text(report: Report) -> str:
    return json.dumps(model_explorer(report), indent=1, allow_nan=False) + "\n"


def write_model_explorer(report: Report, path: str) -> None:
    write_atomic(path, model_explorer_text(report).encode("utf-8"))


_CSS = """
:root{--fg:#1f2933;--muted:#607080;--line:#d5dde5;--bg:#f7f9fb}
*{box-sizing:border-box}
body{margin:0;font:13px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
header{padding:14px 22px 10px;background:#fff;border-bottom:1px solid var(--line)}
h1{font-size:18px;margin:0 0 6px}
h2{font-size:15px;margin:18px 0 8px}
.facts{display:flex;flex-wrap:wrap;gap:6px 26px;color:var(--muted)}
.facts b{color:var(--fg)}
.big{font-size:15px;color:var(--fg)}
main{padding:0 22px 30px}
section{background:#fff;border:1px solid var(--line);border-radius:6px;padding:10px 14px;margin-top:14px}
.scrollx{overflow-x:auto}
.note{color:var(--muted);margin:2px 0 8px}
#chart-svg .grid{stroke:#e6ebf0}#chart-svg .axis{stroke:#90a4ae}
#chart-svg .ax,#chart-svg .xl{font-size:10px;fill:#455a64}
#chart-svg .bar{stroke:#78909c;stroke-width:.5}#chart-svg .bar.worst{stroke:#b71c1c;stroke-width:2}
#chart-svg .dot{fill:#263238}#chart-svg .wlabel{font-size:10px;fill:#b71c1c;font-weight:600}
#chart-svg .hit{fill:transparent;cursor:pointer}#chart-svg .col:hover .hit{fill:#eef3f7}
.toolbar{display:flex;flex-wrap:wrap;align-items:center;gap:10px 18px;margin-bottom:8px}
.toolbar button{font:inherit;padding:2px 9px;border:1px solid var(--line);background:#fff;border-radius:4px;cursor:pointer}
.toolbar button:hover{background:#eef3f7}
.legend{display:flex;align-items:center;gap:8px;flex-wrap:wrap}
.scale{position:relative;width:220px;height:12px;border-radius:2px;border:1px solid #b0bec5;margin-bottom:14px}
.scale span{position:absolute;top:13px;transform:translateX(-50%);font-size:10px;color:var(--muted)}
.sw{display:inline-block;width:26px;height:14px;vertical-align:middle;border-radius:3px;margin-right:3px;background:#fff}
.sw.int8{border:1.5px solid #37474f}.sw.int16{border:4px double #1565c0}.sw.float{border:2px dashed #6a1b9a}
.sw.conv{border:1.5px solid #90a4ae;border-radius:8px}.sw.none{background:#eceff1;border:1px solid #b0bec5}
.sw.worst{border:3px solid #c62828}
.graphwrap{display:flex;gap:12px;align-items:stretch}
#graph-box{flex:1;height:76vh;overflow:auto;border:1px solid var(--line);border-radius:4px;background:#fbfcfd}
#panel{width:330px;flex:none;height:76vh;overflow:auto;border:1px solid var(--line);border-radius:4px;padding:8px 10px;background:#fff}
#panel table{font-size:12px}#panel td:first-child{color:var(--muted);padding-right:8px;white-space:nowrap}
#panel .nm{word-break:break-all}#panel td{white-space:normal;text-align:left;vertical-align:top}
#graph-svg{display:block;margin:0 auto}
#graph-svg .edges path{fill:none;stroke:#90a4ae;stroke-width:1.2}
#graph-svg text{font-size:11px;fill:#1f2933;pointer-events:none}
#graph-svg .node{cursor:pointer}
#graph-svg .node .box{stroke:#37474f;stroke-width:1.2}
#graph-svg .node .op{font-weight:600}
#graph-svg .node .t{fill:#455a64;font-size:10px}
#graph-svg .k-float .box{stroke:#6a1b9a;stroke-width:2;stroke-dasharray:6 3}
#graph-svg .k-int16 .box{stroke:#1565c0;stroke-width:1.5}
#graph-svg .k-int16 .outer{fill:none;stroke:#1565c0;stroke-width:1.5}
#graph-svg .k-conv .box{stroke:#90a4ae}
#graph-svg .worst .box{stroke:#c62828;stroke-width:3.5;stroke-dasharray:none}
#graph-svg .rank circle{fill:#c62828}#graph-svg .rank text{fill:#fff;font-weight:700;font-size:11px}
#graph-svg .badge rect{fill:#37474f}#graph-svg .badge text{fill:#fff;font-size:10px;font-weight:600}
#graph-svg .b-int16 rect{fill:#1565c0}#graph-svg .b-float rect{fill:#6a1b9a}#graph-svg .b-conv rect{fill:#90a4ae}
#graph-svg .io rect{fill:#fff;stroke:#546e7a;stroke-width:1.2}
#graph-svg .node.sel .box{stroke:#0d47a1;stroke-width:4;stroke-dasharray:none}
table{border-collapse:collapse;font-size:12px}
th,td{padding:3px 8px;border-bottom:1px solid #edf1f4;text-align:right;white-space:nowrap}
th{position:sticky;top:0;background:#f0f4f7;cursor:pointer;user-select:none}
th[data-t=s],td.name,td:nth-child(2),td:nth-child(3){text-align:left}
td.name{max-width:420px;overflow:hidden;text-overflow:ellipsis}
tr.worst td{background:#ffebee}tr.sel td{background:#e3f2fd}
tbody tr{cursor:pointer}tbody tr:hover td{background:#f5f8fa}
th.asc:after{content:" ▲"}th.desc:after{content:" ▼"}
.tablebox{max-height:70vh;overflow:auto}
footer{color:var(--muted);padding:6px 22px 20px}
"""

_JS = r"""
(function(){
var D=JSON.parse(document.getElementById('qc-data').textContent);
var svg=document.getElementById('graph-svg'),box=document.getElementById('graph-box');
var W=+svg.dataset.w,H=+svg.dataset.h,z=1;
function zoom(f,keep){var cx=box.scrollLeft+box.clientWidth/2,cy=box.scrollTop+box.clientHeight/2,old=z;
 z=Math.max(0.05,Math.min(3,f));svg.setAttribute('width',W*z);svg.setAttribute('height',H*z);
 if(keep!==false){box.scrollLeft=cx*z/old-box.clientWidth/2;box.scrollTop=cy*z/old-box.clientHeight/2;}
 document.getElementById('zl').textContent=Math.round(z*100)+'%';}
document.getElementById('zin').onclick=function(){zoom(z*1.25)};
document.getElementById('zout').onclick=function(){zoom(z/1.25)};
document.getElementById('z1').onclick=function(){zoom(1)};
document.getElementById('zfit').onclick=function(){zoom(Math.max(0.1,Math.min(box.clientWidth/W,box.clientHeight/H)),false)};
box.addEventListener('wheel',function(e){if(e.ctrlKey){e.preventDefault();zoom(z*(e.deltaY<0?1.1:1/1.1));}},{passive:false});
var nodes=svg.querySelectorAll('.node');
function paint(by){nodes.forEach(function(n){n.querySelector('.box').setAttribute('fill',by==='e2e'?n.dataset.ce:n.dataset.cl);});}
document.querySelectorAll('input[name=colour]').forEach(function(r){r.onchange=function(){paint(r.value)};});
function f(v,d,u){if(v===null||v===undefined)return'–';if(v==='inf')return'∞'+(u||'');if(v==='-inf')return'−∞'+(u||'');
 return (+v).toFixed(d)+(u||'');}
function esc(s){return String(s).replace(/[&<>"]/g,function(c){return{'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c];});}
function select(i,scroll){var d=D[i];if(!d)return;
 document.querySelectorAll('.sel').forEach(function(e){e.classList.remove('sel')});
 var n=document.getElementById('n'+i);if(n){n.classList.add('sel');
  if(scroll){var b=n.getBBox(),m=n.transform.baseVal.consolidate().matrix;
   box.scrollTo({left:(m.e+b.width/2)*z-box.clientWidth/2,top:(m.f+b.height/2)*z-box.clientHeight/2,behavior:'smooth'});}}
 document.querySelectorAll('tr[data-i="'+i+'"]').forEach(function(r){r.classList.add('sel')});
 var rows=[['op','#'+i+' '+esc(d.op)],['precision',esc(d.prec)],['output','<span class="nm">'+esc(d.name)+'</span>'],
  ['constants',esc(d.consts||'–')]];
 if(d.snr_db!==null&&d.snr_db!==undefined){rows=rows.concat([['shape',esc(JSON.stringify(d.shape))],
  ['SNR end to end',f(d.snr_db,1,' dB')],['SNR op alone',f(d.local_snr_db,1,' dB')],['cosine',f(d.cosine,5)],
  ['max |err|',f(d.max_abs_error,4)],['max err (LSB)',f(d.max_error_lsb,1)],['mean err (LSB)',f(d.mean_error_lsb,3)],
  ['mean |err| (LSB)',f(d.mean_abs_error_lsb,3)],['scale',f(d.scale,6)],['zero point',esc(d.zero_point)]]);}
 else rows.push(['error','not measured']);
 document.getElementById('pbody').innerHTML='<table>'+rows.map(function(r){return'<tr><td>'+r[0]+'</td><td>'+r[1]+'</td></tr>'}).join('')+'</table>';}
nodes.forEach(function(n){n.addEventListener('click',function(){select(n.dataset.i,false)});});
document.querySelectorAll('tbody tr[data-i], #chart-svg .col, a[data-i]').forEach(function(e){
 e.addEventListener('click',function(ev){ev.preventDefault();select(e.dataset.i,true);
  document.getElementById('graph').scrollIntoView({behavior:'smooth'});});});
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('th').forEach(function(th,c){th.addEventListener('click',function(){
  var asc=!th.classList.contains('asc'),num=th.dataset.t==='n',tb=t.tBodies[0];
  t.querySelectorAll('th').forEach(function(h){h.classList.remove('asc','desc')});th.classList.add(asc?'asc':'desc');
  var rs=Array.prototype.slice.call(tb.rows);
  rs.sort(function(a,b){var x=a.cells[c],y=b.cells[c],r;
   if(num){var p=x.dataset.v===''?Infinity:+x.dataset.v,q=y.dataset.v===''?Infinity:+y.dataset.v;r=p-q;}
   else r=x.textContent.localeCompare(y.textContent);return asc?r:-r;});
  rs.forEach(function(r){tb.appendChild(r)});});});});
var w=document.querySelector('.node[data-rank="1"]');if(w)select(w.dataset.i,false);
var first=svg.querySelector('.io');if(first&&W>box.clientWidth){var m=first.transform.baseVal.consolidate().matrix;
 box.scrollLeft=m.e+first.getBBox().width/2-box.clientWidth/2;}
document.documentElement.setAttribute('data-qc-ready',String(nodes.length));
})();
"""

_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{title}</title><style>{css}</style></head>
<body>
"""

_HEADER = """<header><h1>{title}</h1>
<div class="facts"><span>float model <b>{model}</b></span><span>quantized file <b>{tflite}</b></span>
<span>reference: {reference}</span><span>int side: {engine}</span><span><b>{samples}</b> sample(s)</span></div>
<div class="facts"><span class="big">output SNR {out_snr}</span><span class="big">lowest layer SNR <b>{min_snr}</b></span>
<span>{n_ops} ops: {prec_text}</span><span>{n_rows} measured</span></div>
<div class="facts"><span>worst layers (SNR of the op alone, on the int8 inputs it read): {worst}</span></div>
</header>
"""

_SECTIONS = """<section id="chart"><h2>SNR per layer</h2>
<p class="note">Bars: SNR end to end (errors of earlier layers included), coloured on the scale below. Dots: SNR of the
op alone, the float op run on the very int8 inputs it read (a triangle: above the scale); the layers it ranks worst
are outlined red with their value. Click a bar to find the op in the graph.</p>
<div class="scrollx">{chart}</div></section>
<section id="graph"><h2>Graph</h2>
<div class="toolbar">
<span>colour by <label><input type="radio" name="colour" value="local" checked> SNR of the op alone</label>
<label><input type="radio" name="colour" value="e2e"> SNR end to end</label></span>
<span><button id="zout" title="zoom out">−</button> <span id="zl">100%</span> <button id="zin" title="zoom in">+</button>
<button id="z1">100%</button> <button id="zfit">fit</button> <small>(ctrl + wheel zooms)</small></span>
</div>
<div class="toolbar legend">
<span>SNR (dB)</span><span class="scale" style="background:linear-gradient(90deg,{legend_stops})">{ticks}</span>
<span><span class="sw none"></span>not measured</span>
<span><span class="sw int8"></span>int8</span><span><span class="sw int16"></span>16x8 (int16 activations)</span>
<span><span class="sw float"></span>float</span><span><span class="sw conv"></span>QUANTIZE / DEQUANTIZE at a boundary</span>
<span><span class="sw worst"></span>worst (rank)</span>
</div>
<div class="graphwrap"><div id="graph-box">{graph}</div>
<div id="panel"><b>Selected op</b><div id="pbody"><p class="note">Click a box, a bar or a row.</p></div></div></div>
<p class="note">Each box is an op of the .tflite (#index, builtin), its output tensor and its error; the badge is its
precision, read from its tensors' types. {crossings} edge crossing(s) in this layout.</p>
</section>
<section><h2 id="layers-title">Layers</h2><p class="note">Click a column to sort.</p>
<div class="tablebox">{table}</div>{others}</section>
"""

_FOOT = """
<footer>{footer}</footer>
<script type="application/json" id="qc-data">{data}</script>
<script>{js}</script>
</body></html>
"""
