"""``qconvert compare --html`` and ``--model-explorer``: the report people look at.

Oracles: LiteRT's interpreter for which op writes which tensor and each tensor's type (the
precision marks of a file TensorFlow wrote with one op denylisted to float, and of its 16x8
file), the layout's invariants checked geometrically (every edge goes down, no two boxes of a
layer overlap), hand-derived colours, an HTML parser for well-formedness, and Chromium itself
(headless: the page's script runs and marks every op, the screenshot is not blank). The
browser tests skip when no Chromium is installed (Debian: ``apt-get install chromium``).
"""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from html_report import browser as _browser
from html_report import chromium as _chromium
from html_report import litert_ops as _litert_ops
from html_report import nodes as _nodes
from html_report import png_pixels as _png_pixels
from html_report import well_formed as _well_formed

from qconvert.schema.reader import ModelInfo, OpInfo, SubgraphInfo, TensorInfo
from qconvert.tools import compare_html
from qconvert.tools.compare_html import GAP_X, colour, layout, precision

ROOT = Path(__file__).resolve().parents[2]
NAME = "small_classifier"


# ---------------------------------------------------------------------------
# pure parts: colours, precision from tensor types, layout


def test_colour_scale_ends_and_midpoint() -> None:
    assert colour(-5.0) == colour(0.0) == "#d7301f"
    assert colour(40.0) == colour(math.inf) == colour(80.0) == "#9bd57f"
    assert colour(None) == colour(math.nan) == compare_html.UNMEASURED
    # halfway between #fc8d59 (10 dB) and #fdcc8a (20 dB): fc/fd → 252.5 → fc (round half even), 8d/cc → 172.5
    # → ac, 59/8a → 113.5 → 72 (Python's round: halves to even)
    assert colour(15.0) == "#fcac72"


def _model(tensors: list[tuple[str, str, bool]], ops: list[tuple[list[int], list[int]]]) -> ModelInfo:
    ts = [TensorInfo(name, dtype, (1, 4), 0, b"\0" * 4 if const else None) for name, dtype, const in tensors]
    sg = SubgraphInfo("main", ts, [OpInfo("OP", 1, i, o) for i, o in ops], [0], [len(ts) - 1])
    return ModelInfo(3, "", [], [sg], {})


def test_precision_is_read_from_tensor_types() -> None:
    m = _model([("x", "float32", False), ("q", "int8", False), ("w", "int8", True), ("b", "int32", True),
                ("y", "int8", False), ("y16", "int16", False), ("w16", "int8", True), ("b64", "int64", True),
                ("z16", "int16", False), ("f", "float32", False), ("wf", "float32", True), ("g", "float32", False),
                ("i", "int32", False), ("out", "float32", False)],
               [([0], [1]),            # QUANTIZE float → int8
                ([1, 2, 3], [4]),      # int8 op, int8 weights, int32 bias
                ([4], [5]),            # QUANTIZE int8 → int16
                ([5, 6, 7], [8]),      # 16x8: int16 activations, int8 weights, int64 bias
                ([8], [9]),            # DEQUANTIZE int16 → float
                ([9, 10], [11]),       # float op with float weights
                ([4], [12]),           # int8 in, int32 out (an ARG_MAX): int8
                ([11], [13])])         # float → float
    assert [precision(m, op) for op in m.operators] == [
        "f32→i8", "int8", "i8→i16", "int16", "i16→f32", "float", "int8", "float"]


def _check_layout(n: int, edges: list[tuple[int, int]], sizes: list[tuple[str, float, float]] | None = None):
    sizes = sizes or [(f"v{k}", 100.0 + 37 * (k % 4), 40.0) for k in range(n)]
    lay = layout(sizes, edges)
    vs = lay.vertices
    for path in lay.edges:  # every edge goes down one layer per step, from its source to its target
        assert [vs[k].layer for k in path] == list(range(vs[path[0]].layer, vs[path[-1]].layer + 1))
    assert sorted((p[0], p[-1]) for p in lay.edges) == sorted(set(edges))
    for layer in lay.layers:  # no two boxes (or routing points) of a layer overlap
        xs = sorted((vs[k].x - vs[k].width / 2, vs[k].x + vs[k].width / 2) for k in layer)
        for (_, right), (left, _) in zip(xs, xs[1:]):
            assert left - right >= GAP_X - 1e-6
    assert all(v.x - v.width / 2 >= 0 and v.x + v.width / 2 <= lay.width for v in vs)
    return lay


def test_layout_of_a_diamond_with_a_skip_edge() -> None:
    """0 → 1 → 3, 0 → 2 → 3, 0 → 3 (a residual): three layers, the skip routed through one
    dummy on the middle layer, no crossing, the two branches side by side."""
    lay = _check_layout(4, [(0, 1), (0, 2), (1, 3), (2, 3), (0, 3)])
    vs = lay.vertices
    assert [vs[k].layer for k in range(4)] == [0, 1, 1, 2]
    assert len(vs) == 5 and vs[4].dummy and vs[4].layer == 1
    assert lay.crossings == 0
    assert vs[1].x != vs[2].x


def test_layout_untangles_crossings_by_barycentre() -> None:
    """Two chains given interleaved (a0 b0 / b1 a1): the first order crosses, the sweeps do not."""
    lay = _check_layout(4, [(0, 3), (1, 2)], [("a0", 100, 40), ("b0", 100, 40), ("b1", 100, 40), ("a1", 100, 40)])
    assert lay.crossings == 0


def test_layout_scales_to_a_600_op_graph() -> None:
    """A transformer-sized DAG (a chain with residual skips and 3-way attention splits) lays
    out in seconds with the invariants above."""
    rnd = random.Random(3)
    edges, n = [], 600
    for k in range(1, n):
        edges.append((k - 1, k))
        if k >= 6 and rnd.random() < 0.2:
            edges.append((k - rnd.randint(2, 6), k))
    t = time.perf_counter()
    lay = _check_layout(n, edges)
    assert time.perf_counter() - t < 20
    assert lay.height > n * 40


# ---------------------------------------------------------------------------
# the report of real files


@pytest.fixture(scope="module")
def bad(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    pytest.importorskip("tensorflow", reason="the models are built with TensorFlow")
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import corpus

    from qconvert.api import convert_bytes

    tmp = tmp_path_factory.mktemp("bad")
    seed, fn = corpus._BUILDERS[NAME]
    lo, hi = corpus._calibrate(__import__("tensorflow"), seed, fn)["dw1"]
    m = corpus.build_qat_graph("bad_dw1", seed, fn, override={"dw1": (lo, hi / 10)})  # clips most of dw1
    pb, tfl, data = tmp / "bad.pb", tmp / "bad.tflite", tmp / "x.npz"
    pb.write_bytes(m.graph_def)
    tfl.write_bytes(convert_bytes(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs))
    np.savez(data, input=np.random.default_rng(7).uniform(-1, 1, (16, *m.shapes["input"][1:])).astype(np.float32))
    return pb, tfl, data


@pytest.fixture(scope="module")
def tensorflow_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """The float twin, TensorFlow's file with FULLY_CONNECTED denylisted (left float between
    DEQUANTIZE and QUANTIZE by its QuantizationDebugger), and TensorFlow's 16x8 file."""
    tf = pytest.importorskip("tensorflow", reason="the mixed files are TensorFlow's")
    sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
    import corpus
    import oracle

    tmp = tmp_path_factory.mktemp("mixed")
    m = corpus.build_float_graph(NAME)
    x = np.random.default_rng(7).uniform(-1, 1, (16, *m.shapes["input"][1:])).astype(np.float32)
    pb, data, mixed, i16 = tmp / "float.pb", tmp / "x.npz", tmp / "denylisted.tflite", tmp / "16x8.tflite"
    pb.write_bytes(m.graph_def)
    np.savez(data, input=x)
    c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(str(pb), m.inputs, m.outputs, m.shapes)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    c.representative_dataset = lambda: ([x[i:i + 1]] for i in range(len(x)))
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=c, debug_dataset=lambda: ([x[i:i + 1]] for i in range(len(x))),
        debug_options=tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=["FULLY_CONNECTED"]))
    mixed.write_bytes(debugger.get_nondebug_quantized_model())
    i16.write_bytes(oracle.tf_ptq_convert(m, {"input": x}, int16=True))
    return pb, data, mixed, i16


def test_report_has_every_layer_and_marks_the_worst(bad: tuple[Path, Path, Path]) -> None:
    from qconvert.tools.compare import compare

    pb, tfl, data = bad
    report = compare(pb, tfl, data)
    text = compare_html.render(report)
    checker = _well_formed(text)
    ops = _litert_ops(tfl)
    nodes = _nodes(text)
    assert sorted(nodes) == list(range(len(ops)))  # every op of the file is drawn
    for k, (name, _, _) in enumerate(ops):
        assert f"#{k} {name}</text>" in text
    for r in report.rows:  # every measured layer is in the table, with its tensor, and in the chart
        assert re.search(rf'<tr data-i="{r.index}"[^>]*>.*?<td class="name">{re.escape(r.tensor)}</td>', text)
        assert f'<g class="col" data-i="{r.index}">' in text
    worst = report.worst(1)[0]
    assert ops[worst.index][0] == "DEPTHWISE_CONV_2D" and "worst" in nodes[worst.index]
    assert {"graph-svg", "chart-svg", "layers", "qc-data", "panel"} <= checker.ids
    out = [r for r in report.rows if r.tensor == "output"]
    assert f"output SNR <b>{out[0].e2e.snr_db():.1f} dB</b>" in text


def test_model_explorer_node_data_is_keyed_by_operator_index(bad: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """Model Explorer's .tflite adapter numbers nodes by operator index: each key's op in
    LiteRT's reading of the file writes the measured tensor; values are the op-alone SNR."""
    from qconvert.tools.compare import compare

    pb, tfl, data = bad
    report = compare(pb, tfl, data)
    path = tmp_path / "me.json"
    compare_html.write_model_explorer(report, str(path))
    doc = json.loads(path.read_text())
    ops = _litert_ops(tfl)
    assert set(doc) == {"results", "thresholds"}
    assert set(doc["results"]) == {str(r.index) for r in report.rows}
    for r in report.rows:
        assert ops[r.index][2][0] == r.tensor
        v = doc["results"][str(r.index)]["value"]
        assert abs(v - max(-100.0, min(100.0, r.local.snr_db()))) < 1e-3
    values = [t["value"] for t in doc["thresholds"]]
    assert values == sorted(values) and all(re.fullmatch(r"#[0-9a-f]{6}", t["bgColor"]) for t in doc["thresholds"])


def test_model_explorers_own_adapter_numbers_the_nodes_so(bad: tuple[Path, Path, Path]) -> None:
    """Model Explorer's .tflite adapter (pip package ai-edge-model-explorer-adapter) gives the
    node of operator k the id "k", labelled with its builtin, its first output's tensor_name the
    tensor we measure: the node data keys land on the right boxes."""
    adapter = pytest.importorskip("ai_edge_model_explorer_adapter",
                                  reason="pip install ai-edge-model-explorer-adapter to check the node ids")
    from qconvert.tools.compare import compare

    pb, tfl, data = bad
    graph = json.loads(adapter.ConvertFlatbufferDirectlyToJson(adapter.VisualizeConfig(), str(tfl)))
    nodes = {n["id"]: n for n in graph[0]["subgraphs"][0]["nodes"]}
    report = compare(pb, tfl, data)
    for key in compare_html.model_explorer(report)["results"]:
        row = next(r for r in report.rows if str(r.index) == key)
        node = nodes[key]
        names = [dict((a["key"], a["value"]) for a in m["attrs"]).get("tensor_name") for m in node["outputsMetadata"]]
        assert node["label"].upper() == row.op and names[0] == row.tensor, (key, node["label"], names, row.tensor)


def test_mixed_precision_is_drawn_from_the_files_tensor_types(
        tensorflow_files: tuple[Path, Path, Path, Path]) -> None:
    """TensorFlow's file with FULLY_CONNECTED denylisted: that op is drawn float, the
    DEQUANTIZE / QUANTIZE around it as conversions, every other compute op int8 (LiteRT's
    tensor types say which); TensorFlow's 16x8 file: every compute op 16x8."""
    from qconvert.tools.compare import compare

    pb, data, mixed, i16 = tensorflow_files
    for tfl in (mixed, i16):
        text = compare_html.render(compare(pb, tfl, data))
        _well_formed(text)
        nodes = _nodes(text)
        ops = _litert_ops(tfl)
        assert sorted(nodes) == list(range(len(ops)))
        for k, (name, in_types, _) in enumerate(ops):
            expected = ("conv" if name in ("QUANTIZE", "DEQUANTIZE")
                        else "float" if "float32" in in_types else "int16" if "int16" in in_types else "int8")
            assert f"k-{expected}" in nodes[k], (tfl.name, k, name, in_types, nodes[k])
        kinds = [re.search(r"k-(\w+)", c).group(1) for c in nodes.values()]
        if tfl == mixed:
            assert kinds.count("float") == 1 and ops[kinds.index("float")][0] == "FULLY_CONNECTED"
        else:
            assert "int16" in kinds and "int8" not in kinds and "float" not in kinds


def test_cli_writes_the_html_and_the_node_data(bad: tuple[Path, Path, Path], tmp_path: Path) -> None:
    pb, tfl, data = bad
    page, nodes = tmp_path / "r.html", tmp_path / "r.json"
    r = subprocess.run([sys.executable, "-m", "qconvert", "compare", str(pb), str(tfl), "--data", str(data),
                        "--samples", "4", "--html", str(page), "--model-explorer", str(nodes)],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert f"wrote {page}" in r.stdout and f"wrote {nodes}" in r.stdout
    _well_formed(page.read_text())
    assert json.loads(nodes.read_text())["results"]
    r = subprocess.run([sys.executable, "-m", "qconvert", "compare", str(pb), str(tfl), "--data", str(data),
                        "--html", str(tmp_path / "missing" / "r.html")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "does not exist" in r.stderr, r.stderr


# ---------------------------------------------------------------------------
# a real browser


def test_the_report_runs_in_headless_chromium(bad: tuple[Path, Path, Path], tmp_path: Path) -> None:
    """The page's script runs (it marks the root with the number of boxes it wired) and the
    screenshot at 1400×1000 has the report's colours in it."""
    from qconvert.tools.compare import compare

    browser_tmp = tmp_path
    _browser()
    pb, tfl, data = bad
    page = tmp_path / "report.html"
    report = compare(pb, tfl, data)
    compare_html.write_html(report, str(page))
    n_ops = len(_litert_ops(tfl))
    dom = _chromium(browser_tmp, "--virtual-time-budget=5000", "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert f'data-qc-ready="{n_ops}"' in dom.stdout, dom.stdout[:300]
    selected = re.findall(r'<g class="node [^"]*\bsel\b[^"]*" id="n(\d+)"', dom.stdout)
    assert selected == [str(report.worst(1)[0].index)]  # the script selected the worst op
    assert "<td>SNR op alone</td>" in dom.stdout  # and filled the side panel
    png = tmp_path / "report.png"
    shot = _chromium(browser_tmp, f"--screenshot={png}", "--window-size=1400,1000", page.as_uri())
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    width, height, raw = _png_pixels(png)
    assert (width, height) == (1400, 1000)
    assert len(set(raw)) > 100 and len(raw) > 1400 * 1000  # far from a blank page
