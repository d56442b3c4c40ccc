"""``qconvert dump``: text and JSON agree with LiteRT's view of the file, the requant
metadata check flags a corrupted record, and broken files are one line, exit 1.

The golden text and the corruption tests need no TensorFlow; the comparisons on
TensorFlow's own files skip cleanly without it. Regenerate the golden file with
``QCONVERT_UPDATE_GOLDEN=1 pytest tests/tools/test_dump.py`` and review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qconvert.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "models" / "example_qat.pb"
GOLDEN = ROOT / "tests" / "fixtures" / "data" / "example_qat.dump.txt"


def run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "qconvert", *args], capture_output=True, text=True, env=env, check=False,
                          timeout=120)


@pytest.fixture(scope="module")
def example_tflite(tmp_path_factory) -> Path:
    from qconvert import api

    path = tmp_path_factory.mktemp("dump") / "example_qat.tflite"
    path.write_bytes(api.convert_bytes(str(EXAMPLE), {"input": (-1.0, 1.0)}))
    return path


def dump(capsys, *args: str) -> str:
    capsys.readouterr()
    code = main(["dump", *args])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def dump_json(capsys, *args: str) -> dict:
    return json.loads(dump(capsys, "--json", *args))


# ---------------------------------------------------------------------------
# Against the LiteRT interpreter


def check_against_interpreter(tflite: bytes, doc: dict) -> None:
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=tflite)
    assert doc["schema_version"] == 1
    sg = doc["subgraphs"][0]
    tensors = sg["tensors"]
    details = interp.get_tensor_details()
    assert details, "the interpreter reports no tensors"
    for d in details:
        t = tensors[d["index"]]
        where = f"tensor {d['index']} {d['name']!r}"
        assert t["name"] == d["name"], where
        assert t["dtype"] == np.dtype(d["dtype"]).name, where
        assert t["shape"] == [int(x) for x in d["shape"]], where
        qp = d["quantization_parameters"]
        if len(qp["scales"]) == 0:
            assert t["quantization"] is None, where
            continue
        q = t["quantization"]
        assert q is not None, where
        assert np.array_equal(np.asarray(q["scale"], dtype=np.float32), qp["scales"]), where
        assert q["zero_point"] == [int(z) for z in qp["zero_points"]], where
        assert q["quantized_dimension"] == qp["quantized_dimension"], where
        if len(qp["scales"]) == 1:
            assert (np.float32(q["scale"][0]), q["zero_point"][0]) == (np.float32(d["quantization"][0]),
                                                                      d["quantization"][1]), where
    ops = interp._get_ops_details()
    assert [o["op_name"] for o in ops] == [o["op"] for o in sg["operators"]]
    for o, ours in zip(ops, sg["operators"]):
        assert o["index"] == ours["index"]
        assert [int(x) for x in o["inputs"]] == ours["inputs"] and [int(x) for x in o["outputs"]] == ours["outputs"]
    assert doc["totals"]["operators"] == len(ops)


def test_qconvert_example_matches_interpreter(example_tflite: Path, capsys) -> None:
    doc = dump_json(capsys, str(example_tflite))
    check_against_interpreter(example_tflite.read_bytes(), doc)
    t = doc["totals"]
    assert t["requant_records"] > 0 and t["requant_flagged"] == 0 and t["float_ops"] == 0
    assert all(op["requant_ok"] in (True, None) for op in doc["subgraphs"][0]["operators"])
    assert doc["model"]["min_runtime_version"] and doc["model"]["version"] == 3


@pytest.mark.parametrize("name", ["residual", "mean_keepdims_mul", "requantize"])
def test_tensorflow_and_qconvert_int8_files_match_interpreter(name: str, tmp_path: Path, capsys) -> None:
    pytest.importorskip("tensorflow")
    import corpus
    import oracle

    from qconvert import api

    model = corpus.build_model(name)
    theirs = oracle.tf_convert(model)
    ours = api.convert_bytes(model.graph_def, model.input_ranges, model.shapes, model.inputs, model.outputs)
    for label, data in (("tf", theirs), ("qconvert", ours)):
        path = tmp_path / f"{label}.tflite"
        path.write_bytes(data)
        doc = dump_json(capsys, str(path))
        check_against_interpreter(data, doc)
        assert doc["totals"]["float_ops"] == 0
        if label == "qconvert":
            assert doc["totals"]["requant_records"] > 0 and doc["totals"]["requant_flagged"] == 0, doc["requant_problems"]
        else:
            assert doc["totals"]["requant_records"] == 0
        assert "CONV_2D" in dump(capsys, str(path))


def test_tensorflow_float_model_matches_interpreter(tmp_path: Path, capsys) -> None:
    tf = pytest.importorskip("tensorflow")
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
        wv = np.random.default_rng(0).normal(size=(3, 3, 3, 4)).astype(np.float32)
        w = tf.constant(wv)
        y = tf.nn.relu(tf.nn.conv2d(x, w, strides=[1, 2, 2, 1], padding="SAME"))
        tf.reduce_mean(y, axis=[1, 2], name="output")
    pb = tmp_path / "float.pb"
    pb.write_bytes(graph.as_graph_def().SerializeToString())
    data = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(str(pb), ["input"], ["output"],
                                                               {"input": [1, 8, 8, 3]}).convert()
    path = tmp_path / "float.tflite"
    path.write_bytes(data)
    doc = dump_json(capsys, str(path))
    check_against_interpreter(data, doc)
    t = doc["totals"]
    assert t["float_ops"] == t["operators"] > 0 and t["float32_buffer_bytes"] >= 3 * 3 * 3 * 4 * 4
    assert t["int8_buffer_bytes"] == 0 and t["requant_records"] == 0
    text = dump(capsys, str(path))
    assert "float32[1,8,8,3]" in text and "float ops left" in text
    w_index = next(x["index"] for x in doc["subgraphs"][0]["tensors"] if x["buffer_bytes"] == 3 * 3 * 3 * 4 * 4)
    values = dump_json(capsys, "--tensor", str(w_index), str(path))["tensor"]
    assert sorted(values["values"]) == sorted(wv.reshape(-1).tolist())


# ---------------------------------------------------------------------------
# Golden text


def test_golden_text(example_tflite: Path, capsys) -> None:
    text = dump(capsys, str(example_tflite))
    if os.environ.get("QCONVERT_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(text)
    expected = GOLDEN.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            str(GOLDEN), "qconvert dump (now)"))
        pytest.fail(f"dump text differs from the golden file (QCONVERT_UPDATE_GOLDEN=1 to regenerate):\n{diff}")


def test_golden_text_agrees_with_interpreter(capsys) -> None:
    """The stored golden file itself: every tensor line carries LiteRT's name, dtype and shape."""
    from ai_edge_litert.interpreter import Interpreter

    from qconvert import api

    interp = Interpreter(model_content=api.convert_bytes(str(EXAMPLE), {"input": (-1.0, 1.0)}))
    lines = GOLDEN.read_text().splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("tensors ("))
    rows = {int(line.split()[0]): line.split() for line in lines[start + 2:] if line.strip() and line.split()[0].isdigit()}
    for d in interp.get_tensor_details():
        cols = rows[d["index"]]
        shape = "[" + ",".join(str(int(x)) for x in d["shape"]) + "]"
        assert cols[1:4] == [d["name"], np.dtype(d["dtype"]).name, shape]
        if len(d["quantization_parameters"]["scales"]) == 1:
            assert f"zp={d['quantization'][1]}" in cols
            # the type column in MLIR's notation carries the same float32 scale and zero point
            scale, zp = d["quantization"]
            typed = re.search(r"!quant\.uniform<i\d+(?:<-?\d+:\d+>)?:f32, ([^:>]+)(?::(-?\d+))?>>", " ".join(cols))
            assert np.float32(typed.group(1)) == np.float32(scale) and int(typed.group(2) or 0) == zp


# ---------------------------------------------------------------------------
# Selectors


def test_selectors(example_tflite: Path, capsys) -> None:
    p = str(example_tflite)
    ops = dump_json(capsys, "--ops", p)
    assert "operators" in ops["subgraphs"][0] and "tensors" not in ops["subgraphs"][0] and "model" not in ops
    tensors = dump_json(capsys, "--tensors", p)
    assert "tensors" in tensors["subgraphs"][0] and "operators" not in tensors["subgraphs"][0]
    meta = dump_json(capsys, "--metadata", p)
    assert "subgraphs" not in meta and {e["name"] for e in meta["metadata"]} >= {"qconvert_requant", "min_runtime_version"}
    text = dump(capsys, "--ops", p)
    assert "CONV_2D" in text and "requant" in text and "tensors (" not in text
    text = dump(capsys, "--tensors", p)
    assert "tensors (" in text and "operators (" not in text


def test_tensor_values_dequantized(example_tflite: Path, capsys) -> None:
    from qconvert.schema.reader import read_model

    model = read_model(example_tflite.read_bytes())
    index, t = next((i, t) for i, t in enumerate(model.tensors) if len(t.scale) > 1 and t.dtype == "int8")
    doc = dump_json(capsys, "--tensor", t.name, str(example_tflite))
    assert set(doc) == {"schema_version", "file", "tensor"}
    v = doc["tensor"]
    assert v["index"] == index and len(v["values"]) == int(np.prod(t.shape))
    expected = (t.array().astype(np.float64)
                * np.asarray(t.scale, np.float32).astype(np.float64).reshape(-1, *[1] * (len(t.shape) - 1)))
    np.testing.assert_allclose(v["values"], expected.reshape(-1), rtol=1e-12)
    assert sum(v["histogram"]["counts"]) == len(v["values"])
    text = dump(capsys, "--tensor", str(index), str(example_tflite))
    assert "histogram" in text and "#" in text and t.name in text
    act = dump_json(capsys, "--tensor", "Relu", str(example_tflite))["tensor"]
    assert act["values"] is None


def test_unknown_tensor_is_usage_error_with_close_names(example_tflite: Path, capsys) -> None:
    capsys.readouterr()
    assert main(["dump", str(example_tflite), "--tensor", "Relu_7"]) == 2
    err = capsys.readouterr().err
    assert "usage error" in err and "'Relu_1'" in err and len(err.strip().splitlines()) == 1
    assert main(["dump", str(example_tflite), "--tensor", "999", "--json"]) == 2


# ---------------------------------------------------------------------------
# The requant check


def test_corrupted_multiplier_is_flagged(example_tflite: Path, tmp_path: Path, capsys) -> None:
    from qconvert.schema.requant_metadata import decode

    data = bytearray(example_tflite.read_bytes())
    at = data.find(b"QCRQ")
    assert at > 0 and data.find(b"QCRQ", at + 1) == -1
    from qconvert.schema.reader import read_model

    records_before = decode(read_model(bytes(data)).metadata["qconvert_requant"])  # the layout we poke
    first = records_before[0]
    pos = at + 12 + 28  # header, first record's fixed part: its first multiplier
    assert int.from_bytes(data[pos:pos + 4], "little", signed=True) == first.pairs[0][0]
    data[pos] ^= 0x01
    bad = tmp_path / "bad_requant.tflite"
    bad.write_bytes(bytes(data))

    doc = dump_json(capsys, str(bad))
    ops = doc["subgraphs"][0]["operators"]
    flagged = [op["index"] for op in ops if op["requant_ok"] is False]
    assert flagged == [first.op_index]
    assert doc["totals"]["requant_flagged"] == 1
    rq = ops[first.op_index]["requant"]
    assert rq["multipliers"][0] == first.pairs[0][0] ^ 1 and rq["expected"]["multipliers"][0] == first.pairs[0][0]

    text = dump(capsys, str(bad))
    marked = [line for line in text.splitlines() if "!! REQUANT MISMATCH" in line]
    assert len(marked) == 2  # the op's requant line and the totals line
    assert f"pair 0: ({first.pairs[0][0] ^ 1}, {first.pairs[0][1]}), expected ({first.pairs[0][0]}" in text
    assert "!! REQUANT MISMATCH" not in dump(capsys, str(example_tflite))


# ---------------------------------------------------------------------------
# Broken files


def assert_one_line_error(code: int, err: str) -> None:
    assert code == 1, err
    assert err.startswith("qconvert: error:"), err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_broken_files_subprocess(tmp_path: Path, example_tflite: Path) -> None:
    empty = tmp_path / "empty.tflite"
    empty.write_bytes(b"")
    proc = run("dump", str(empty))
    assert_one_line_error(proc.returncode, proc.stderr)
    assert "empty" in proc.stderr and proc.stdout == ""
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(example_tflite.read_bytes()[:1000])
    proc = run("dump", "--json", str(cut))
    assert_one_line_error(proc.returncode, proc.stderr)
    assert "not a TFLite file" in proc.stderr and proc.stdout == ""


def test_broken_files(tmp_path: Path, example_tflite: Path, capsys) -> None:
    good = example_tflite.read_bytes()
    cases = {"random": np.random.default_rng(1234).integers(0, 256, 4096, dtype=np.uint8).tobytes(),
             "identifier": good[:4] + b"XXXX" + good[8:], "tiny": good[:5]}
    for k, off in enumerate(np.linspace(8, len(good) - 1, 10).astype(int)):
        cases[f"cut{k}@{off}"] = good[:off]
    for name, content in cases.items():
        path = tmp_path / f"{name}.tflite"
        path.write_bytes(content)
        for args in ([str(path)], ["--json", str(path)]):
            capsys.readouterr()
            code = main(["dump", *args])
            out, err = capsys.readouterr()
            assert_one_line_error(code, err)
            assert out == "", name
            assert "not a TFLite file" in err, (name, err)
    capsys.readouterr()
    assert main(["dump", str(tmp_path / "missing.tflite")]) == 1
    assert "no such file" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Types in MLIR's quant notation, and what a file needs of a runtime (issue 17)

TF_MLIR = ROOT.parent / "shared" / "realmodels" / "tf_mlir_end2end"


@pytest.mark.skipif(not TF_MLIR.is_dir(), reason=f"{TF_MLIR} is absent (TensorFlow's own test graphs)")
@pytest.mark.parametrize("name", ["fake_quant_per_channel", "fake_quant_per_channel_4bit"])
def test_types_read_like_tensorflows_mlir_check_lines(name: str, tmp_path: Path, capsys) -> None:
    """TensorFlow's expected output names the input, output and weight types in this notation
    (double scales; the file holds their float32): the dump of qconvert's file must say the same."""
    from qconvert import api

    text = (TF_MLIR / f"{name}.pbtxt").read_text()
    path = tmp_path / f"{name}.tflite"
    path.write_bytes(api.convert_bytes(str(TF_MLIR / f"{name}.pb"), {"input": (-33.614346, 21.54917)},
                                 {"input": [1, 1, 1, 256]}, ["input"], ["output"]))
    doc = dump_json(capsys, "--tensors", str(path))
    types = {t["name"]: t["type"] for t in doc["subgraphs"][0]["tensors"]}
    io = re.findall(r"tensor<([0-9x]+)x!quant\.uniform<(i8):f32, ([0-9.e-]+):(-?\d+)>>", text)
    for (dims, storage, scale, zp), name_ in zip(io, ["input", "output"]):
        got = re.fullmatch(rf"tensor<{dims}x!quant\.uniform<{storage}:f32, ([0-9.e-]+):{zp}>>", types[name_])
        assert got, (types[name_], dims, storage, zp)
        assert np.float32(got.group(1)) == np.float32(scale) or name_ == "input"  # input: see test_real_tf_mlir
    weight = re.search(r"tensor<(186x1x1x256)x!quant\.uniform<(i\d<-\d+:\d+>):f32:0, \{([0-9.e-]+)", text)
    dims, storage, first = weight.groups()
    conv_w = next(t for t in types.values() if t.startswith(f"tensor<{dims}x"))
    assert conv_w.startswith(f"tensor<{dims}x!quant.uniform<{storage}:f32:0, {{")
    assert np.float32(conv_w.split("{")[1].split(",")[0]) == np.float32(first)


def test_zero_points_of_zero_and_full_ranges_are_left_out() -> None:
    from qconvert.schema.reader import TensorInfo
    from qconvert.tools.dump import mlir_type

    t = TensorInfo("x", "int8", (1, 4), 0, None, (0.5,), (0,))
    assert mlir_type(t) == "tensor<1x4x!quant.uniform<i8:f32, 0.5>>"
    t = TensorInfo("b", "int32", (2,), 0, b"\0" * 8, (0.25, 0.125), (0, 0))
    assert mlir_type(t) == "tensor<2x!quant.uniform<i32:f32:0, {0.25,0.125}>>"
    assert mlir_type(TensorInfo("f", "float32", (3,), 0, None)) == "tensor<3xf32>"


def test_short_types_are_the_whole_types_cut(tmp_path: Path) -> None:
    """The text output asks for types that list ``keep`` scales (formatting 35,000 scales of
    MobileNetV2 costs more than the rest of the text): the same text as the whole type cut
    by ``short_type``, for every tensor of a file, at several ``keep``, and for scale lists
    whose zero points are too few, non-finite scales and exponents."""
    from qconvert.schema.reader import TensorInfo
    from qconvert.tools.dump import load_tflite, mlir_type, short_type
    from qconvert.tools.dump.mlir import weight_operands

    out = tmp_path / "m.tflite"
    assert main([str(ROOT / "models" / "example_qat.pb"), "--inputs-range", "input=-1,1", "-o", str(out)]) == 0
    model, _ = load_tflite(out)
    sg = model.subgraphs[0]
    tensors = list(enumerate(sg.tensors))
    tensors += [(-1, TensorInfo("a", "int8", (5, 3), 0, None, (0.5, 1e-5, 3e38, float("inf"), 2.0**-20),
                                (1, 0, -3, 0, 0), quantized_dimension=0)),
                (-1, TensorInfo("z", "int32", (6,), 0, None, tuple(0.1 * k for k in range(1, 7)), (0, 0, 0))),
                (-1, TensorInfo("p", "int8", (1, 4), 0, None, (0.25,), (0,), quantized_dimension=1))]
    weights = weight_operands(sg)
    assert weights
    for i, t in tensors:
        whole = mlir_type(t, sg, i in weights)
        for keep in (0, 1, 2, 3, 8):
            assert mlir_type(t, sg, i in weights, keep) == short_type(whole, keep), (t.name, keep)


def test_runtime_warnings_for_int4_and_blockwise_files(tmp_path: Path, capsys) -> None:
    """A file with INT4 weights warns that Vela cannot take it; a blockwise-quantized FULLY_CONNECTED
    (ai-edge-quantizer's layout: INT4 weights, BlockwiseQuantization details naming a FLOAT16 scale
    tensor) warns that only XNNPACK computes it, and its type reads ``{1:32}``."""
    from ai_edge_litert import schema_py_generated as schema

    from qconvert.ir import Graph, Node, QuantParams, Tensor
    from qconvert.schema.writer import write_model

    g = Graph()
    g.add_tensor(Tensor("x", "float32", (1, 64)))
    w = np.random.default_rng(0).integers(-7, 8, (2, 64)).astype(np.int8)
    g.add_tensor(Tensor("w", "int4", (2, 64), w, quant=QuantParams((1.0,), (0,), qmin=-7, qmax=7, dtype="int4")))
    g.add_tensor(Tensor("w_scales", "float16", (2, 2), np.array([[0.5, 0.25], [1.0, 2.0]], np.float16)))
    g.add_tensor(Tensor("y", "float32", (1, 2)))
    g.add_node(Node("FULLY_CONNECTED", ["x", "w", ""], ["y"], {}, name="fc"))
    g.add_tensor(Tensor("z", "float32", (2, 2)))
    g.add_node(Node("ADD", ["y", "w_scales"], ["z"], {}, name="keep_scales"))  # so the writer keeps the scales
    g.inputs, g.outputs = ["x"], ["z"]
    packed = write_model(g)
    int4_path = tmp_path / "int4.tflite"
    int4_path.write_bytes(packed)
    doc = dump_json(capsys, str(int4_path))
    assert any("INT4" in w and "Vela" in w and "--int4-storage int8" in w for w in doc["totals"]["runtime_warnings"])

    import flatbuffers

    m = schema.ModelT.InitFromPackedBuf(packed, 0)
    sg = m.subgraphs[0]
    names = [t.name.decode() for t in sg.tensors]
    q = sg.tensors[names.index("w")].quantization
    q.scale, q.zeroPoint = None, None
    q.detailsType = schema.QuantizationDetails.BlockwiseQuantization
    q.details = schema.BlockwiseQuantizationT()
    q.details.scales, q.details.blockSize = names.index("w_scales"), 32
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    block_path = tmp_path / "blockwise.tflite"
    block_path.write_bytes(bytes(b.Output()))
    doc = dump_json(capsys, str(block_path))
    assert any("blockwise" in w and "XNNPACK" in w for w in doc["totals"]["runtime_warnings"])
    wtype = next(t["type"] for t in doc["subgraphs"][0]["tensors"] if t["name"] == "w")
    assert wtype == "tensor<2x64x!quant.uniform<i4:f32:{1:32}, {{0.5,0.25},{1.0,2.0}}>>"
    text = dump(capsys, str(block_path))
    assert "!! blockwise-quantized weights" in text


def test_custom_options_are_decoded_from_flexbuffer() -> None:
    """A custom op's FlexBuffer options (TensorFlow's format) are shown decoded, text and JSON."""
    from qconvert.tools.dump.render import _custom_text

    from tests.schema.test_flexbuffer import _TF_SSD
    from qconvert.tools.dump.describe import _decoded

    decoded = _decoded(_TF_SSD)
    assert decoded["max_detections"] == 10 and decoded["use_regular_nms"] is False
    text = _custom_text(_TF_SSD.hex(), decoded)
    assert text.startswith(f"custom_options={len(_TF_SSD)}B flexbuffer{{detections_per_class=100, ")
    assert "nms_iou_threshold=0.6," in text
    assert _custom_text("0102", _decoded(b"\x01\x02")) .startswith("custom_options=2B:0102")
