"""Dynamic-range and float16 files (``--activations float [--weights float16]``, issue 34) against
TensorFlow 2.21's converter on the same float graphs: ``optimizations=[DEFAULT]`` with no
representative dataset (hybrid ops, int8 weights), and with ``target_spec.supported_types=[tf.float16]``
(float16 constants behind DEQUANTIZE).

Operators are paired by data flow (a constant read through a DEQUANTIZE counts as that constant) and
compared on builtin, version, options, operand kinds, tensor types, shapes, quantization parameters and
constant bytes; both files then run in LiteRT's reference kernels on the same inputs and must give the
same float outputs, bit for bit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="TensorFlow's converter is the oracle")
pytest.importorskip("ai_edge_litert", reason="LiteRT runs both files")

import oracle  # noqa: E402
from corpus import MODEL_NAMES, build_float_graph  # noqa: E402

from qconvert.api import convert_graph  # noqa: E402
from qconvert.errors import ConversionError, UsageError  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _graph(build: Any) -> tuple[bytes, list[str], list[str], dict[str, list[int]]]:
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        inputs, outputs, shapes = build(tf, np.random.default_rng(0))
    return g.as_graph_def().SerializeToString(), inputs, outputs, shapes


def _convnet(tf: Any, rng: np.random.Generator) -> tuple:
    """Conv (432 weights: stays float) → conv (4608) + ReLU6 → depthwise (288) → depthwise ×4 (1152, no
    bias) → mean → dense (8192) + ReLU → dense (640, no bias)."""
    def const(*shape: int, s: float = 1.0) -> Any:
        return tf.constant((rng.normal(size=shape) * s).astype(np.float32))
    x = tf.compat.v1.placeholder(tf.float32, [1, 8, 8, 3], name="input")
    y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, const(3, 3, 3, 16, s=0.3), 1, "SAME"), const(16)))
    y = tf.nn.relu6(tf.nn.conv2d(y, const(3, 3, 16, 32, s=0.1), 1, "SAME") + const(32))
    y = tf.nn.depthwise_conv2d(y, const(3, 3, 32, 1), [1, 1, 1, 1], "SAME")
    y = tf.nn.depthwise_conv2d(y, const(3, 3, 32, 4), [1, 1, 1, 1], "SAME")
    y = tf.reduce_mean(y, [1, 2])
    y = tf.nn.relu(tf.matmul(y, const(128, 64, s=0.1)) + const(64))
    tf.identity(tf.matmul(y, const(64, 10)), name="output")
    return ["input"], ["output"], {"input": [1, 8, 8, 3]}


def _mlp(tf: Any, rng: np.random.Generator) -> tuple:
    """Dense layers at the threshold: 1024 weights (int8), 1023 (float), 4096 with a zero channel and
    exact ties (x/s = k + 0.5), a strided conv between them."""
    w = rng.normal(size=[64, 64]).astype(np.float32)
    w[:, 0] = 0.0  # a zero output channel: scale 1e-6/254
    w[:, 1] = np.concatenate([[127.0, -0.5, 0.5, 1.5, 2.5, -2.5], np.arange(58) + 0.5])  # scale 1: ties
    x = tf.compat.v1.placeholder(tf.float32, [1, 32], name="input")
    y = tf.nn.relu(tf.matmul(x, tf.constant(rng.normal(size=[32, 32]).astype(np.float32))))
    y = tf.matmul(y[:, :31], tf.constant(rng.normal(size=[31, 33]).astype(np.float32)))
    y = tf.matmul(tf.concat([y, y[:, :31]], 1), tf.constant(w))
    y = tf.reshape(y, [1, 4, 4, 4])
    y = tf.nn.conv2d(y, tf.constant(rng.normal(size=[2, 2, 4, 128]).astype(np.float32)), 2, "VALID")
    tf.identity(y, name="output")
    return ["input"], ["output"], {"input": [1, 32]}


def _deconv(tf: Any, rng: np.random.Generator) -> tuple:
    """A transposed convolution (4608 weights), with and without a bias."""
    x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 32], name="input")
    w = tf.constant(rng.normal(size=[3, 3, 16, 32]).astype(np.float32))
    y = tf.nn.conv2d_transpose(x, w, [1, 8, 8, 16], 2, "SAME")
    z = tf.nn.bias_add(tf.nn.conv2d_transpose(x, w * 0.5, [1, 8, 8, 16], 2, "SAME"),
                       tf.constant(rng.normal(size=[16]).astype(np.float32)))
    tf.identity(y + z, name="output")
    return ["input"], ["output"], {"input": [1, 4, 4, 32]}


GRAPHS = {"convnet": _convnet, "mlp": _mlp, "deconv": _deconv}


def tf_dynamic_range(graph_def: bytes, inputs: list[str], outputs: list[str], shapes: dict, float16: bool) -> bytes:
    import tensorflow as tf

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pb")
        Path(path).write_bytes(graph_def)
        c = tf.compat.v1.lite.TFLiteConverter.from_frozen_graph(path, inputs, outputs, shapes)
        c.optimizations = [tf.lite.Optimize.DEFAULT]
        if float16:
            c.target_spec.supported_types = [tf.float16]
        return c.convert()


# ----------------------------------------------------------------------------- pairing by data flow


def _operand(sg: Any, producers: dict[int, Any], index: int) -> tuple[str, Any]:
    if index < 0:
        return ("none", None)
    t = sg.tensors[index]
    if t.data is not None:
        return ("const", t)
    p = producers.get(index)
    if p is not None and p.builtin == "DEQUANTIZE" and sg.tensors[p.inputs[0]].data is not None:
        return ("const", sg.tensors[p.inputs[0]], p)
    return ("act", index)


def _const_dequantizes(sg: Any, producers: dict[int, Any]) -> set[int]:
    return {id(o) for o in sg.operators if o.builtin == "DEQUANTIZE" and sg.tensors[o.inputs[0]].data is not None}


def pair_by_data_flow(theirs: Any, ours: Any) -> list[tuple[Any, Any, list, list]]:
    """[(their op, our op, their operands, our operands)], every op of both files paired."""
    ts, os_ = theirs.subgraphs[0], ours.subgraphs[0]
    tp = {o: op for op in ts.operators for o in op.outputs}
    op_ = {o: op for op in os_.operators for o in op.outputs}
    mapping = {a: b for a, b in zip(ts.inputs, os_.inputs)}
    t_ops = [o for o in ts.operators if id(o) not in _const_dequantizes(ts, tp)]
    o_ops = [o for o in os_.operators if id(o) not in _const_dequantizes(os_, op_)]
    assert len(t_ops) == len(o_ops), ([o.builtin for o in t_ops], [o.builtin for o in o_ops])
    pairs, left = [], list(o_ops)
    for t in t_ops:
        t_in = [_operand(ts, tp, i) for i in t.inputs]
        for o in left:
            o_in = [_operand(os_, op_, i) for i in o.inputs]
            if o.builtin == t.builtin and len(o_in) == len(t_in) and all(
                    a[0] == b[0] and (a[0] != "act" or mapping.get(a[1]) == b[1]) for a, b in zip(t_in, o_in)):
                pairs.append((t, o, t_in, o_in))
                mapping.update(zip(t.outputs, o.outputs))
                left.remove(o)
                break
        else:
            raise AssertionError(f"TF's {t.builtin} (inputs {t_in}) has no counterpart")
    return pairs


def _tensor_facts(t: Any) -> dict:
    return {"dtype": t.dtype, "shape": tuple(t.shape), "scale": tuple(np.float32(t.scale)),
            "zero_point": tuple(t.zero_point), "axis": t.quantized_dimension if len(t.scale) > 1 else 0}


def compare_files(ours: bytes, theirs: bytes) -> int:
    """Every difference as an assertion; returns the number of constants compared."""
    o, t = read_model(ours), read_model(theirs)
    consts = 0
    for top, oop, t_in, o_in in pair_by_data_flow(t, o):
        where = f"{top.builtin} (TF's outputs {top.outputs})"
        assert (oop.version, oop.options) == (top.version, top.options), where
        for a, b in zip(t_in, o_in):
            if a[0] == "const":
                assert _tensor_facts(b[1]) == _tensor_facts(a[1]), f"{where}: constant '{a[1].name}'"
                assert b[1].data == a[1].data, f"{where}: the bytes of constant '{a[1].name}'"
                if len(a) == 3:  # read through a DEQUANTIZE
                    assert len(b) == 3 and b[2].version == a[2].version, f"{where}: DEQUANTIZE of '{a[1].name}'"
                consts += 1
        for a, b in zip(top.outputs, oop.outputs):
            assert _tensor_facts(o.subgraphs[0].tensors[b]) == _tensor_facts(t.subgraphs[0].tensors[a]), where
    assert {c.builtin: c.version for c in o.operator_codes} == {c.builtin: c.version for c in t.operator_codes}
    assert o.metadata["min_runtime_version"] == t.metadata["min_runtime_version"]
    return consts


def compare_outputs(ours: bytes, theirs: bytes, shapes: dict, n: int = 8) -> None:
    rng = np.random.default_rng(1)
    for _ in range(n):
        feeds = {k: rng.normal(size=s).astype(np.float32) for k, s in shapes.items()}
        for a, b in zip(oracle.run_litert(ours, feeds), oracle.run_litert(theirs, feeds)):
            np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("weights", ["int8", "float16"])
@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_equal_to_tensorflow(name: str, weights: str) -> None:
    graph_def, inputs, outputs, shapes = _graph(GRAPHS[name])
    theirs = tf_dynamic_range(graph_def, inputs, outputs, shapes, weights == "float16")
    ours = convert_graph(graph_def, activations="float", weights=weights, outputs=outputs).model
    assert compare_files(ours, theirs) > 0
    compare_outputs(ours, theirs, shapes)
    if weights == "float16":
        assert read_model(ours).metadata.get("reduced_precision_support") == b"fp16accfp32"


# known differences (the outputs are equal; the files are not yet):
_TWIN_DIFFERENCES = {
    # TF's float file keeps the graph's -1 in a RESHAPE's shape constant; qconvert writes the resolved size
    "fq_args_identity_noop": "RESHAPE shape constant: TF keeps -1, qconvert writes the size",
    "small_classifier": "RESHAPE shape constant: TF keeps -1, qconvert writes the size",
    # TF's float pipeline drops the squeezing RESHAPE before a FULLY_CONNECTED (it flattens its input anyway)
    "pad_squeeze_reshape": "TF drops the RESHAPE (Squeeze) before FULLY_CONNECTED in float files",
}


@pytest.mark.parametrize("weights", ["int8", "float16"])
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=_TWIN_DIFFERENCES[n], strict=True))
                                  if n in _TWIN_DIFFERENCES else n for n in MODEL_NAMES])
def test_corpus_float_twins(name: str, weights: str) -> None:
    m = build_float_graph(name)
    theirs = tf_dynamic_range(m.graph_def, m.inputs, m.outputs, m.shapes, weights == "float16")
    ours = convert_graph(m.graph_def, activations="float", weights=weights, outputs=m.outputs).model
    compare_files(ours, theirs)
    compare_outputs(ours, theirs, m.shapes, n=4)


def test_weights_by_hand() -> None:
    """The int8 weights against the formula: scale max|w|/127 per output channel (1e-6/254 for a
    zero channel), values round-half-away(w / scale); 1023 weights stay float, 1024 do not."""
    graph_def, _, outputs, _ = _graph(_mlp)
    sg = read_model(convert_graph(graph_def, activations="float", outputs=outputs).model).subgraphs[0]
    weights = [sg.tensors[o.inputs[1]] for o in sg.operators if o.builtin == "FULLY_CONNECTED"]
    assert [w.dtype for w in weights] == ["int8", "float32", "int8"]
    w = oracle.tflite_layout_weights(graph_def)[2].astype(np.float64)
    m = np.abs(w).max(axis=1)
    scale = np.where(m > 0, m / 127, 1e-6 / 254)
    np.testing.assert_array_equal(np.float32(weights[2].scale), scale.astype(np.float32))
    x = w / scale[:, None]
    np.testing.assert_array_equal(weights[2].array(), np.sign(x) * np.floor(np.abs(x) + 0.5))
    assert list(weights[2].array()[1, :6]) == [127, -1, 1, 2, 3, -3]  # ties away from zero


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    graph_def, _, _, _ = _graph(_convnet)
    pb = tmp_path / "net.pb"
    pb.write_bytes(graph_def)
    samples = tmp_path / "s.npy"
    np.save(samples, np.zeros((2, 1, 8, 8, 3), np.float32))
    bad = {
        ("--activations", "float", "--calibration-data", str(samples)): "--calibration-data",
        ("--activations", "float", "--default-ranges", "-1,1"): "--default-ranges",
        ("--weights", "float16"): "--activations float",
        ("--activations", "float", "--weights", "int4"): "--block-size",
    }
    for args, says in bad.items():
        out = tmp_path / "out.tflite"
        done = subprocess.run([sys.executable, "-m", "qconvert", str(pb), "-o", str(out), *args],
                              capture_output=True, text=True, timeout=120, check=False, cwd=ROOT)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, (args, done.stderr)
        assert not out.exists()
    with pytest.raises(UsageError, match="--activations float"):
        convert_graph(graph_def, weights="float16")


def test_qat_graphs_are_refused() -> None:
    """TensorFlow writes QUANTIZE/DEQUANTIZE pairs around float ops for a QAT graph (measured): not a
    dynamic-range file. qconvert refuses in one line."""
    with pytest.raises(ConversionError, match="trained with FakeQuant.*without --activations float"):
        convert_graph(ROOT / "models" / "example_qat.pb", activations="float")


def test_an_input_range_is_unused_with_a_note() -> None:
    graph_def, _, outputs, _ = _graph(_convnet)
    result = convert_graph(graph_def, {"input": (-1.0, 1.0)}, activations="float", outputs=outputs)
    assert any("--inputs-range input: not used; with --activations float" in n for n in result.notes)


@pytest.mark.parametrize("weights,kind", [("int8", "dynamic-range"), ("float16", "float16")])
def test_run_refuses_and_dump_and_check_say_which(tmp_path: Path, weights: str, kind: str) -> None:
    """`qconvert run` refuses hybrid and float16 files in one line that names the kind; `dump` says what
    runs them; the static rules of `check` fail both for TFLite Micro (its real run: 'Hybrid models are not
    supported', DEQUANTIZE takes no float16)."""
    from qconvert.errors import RunError
    from qconvert.runtime.interpreter import IntegerModel
    from qconvert.tools.dump import runtime_warnings
    from qconvert.tools.targets import static_check

    graph_def, _, outputs, _ = _graph(_convnet)
    model = convert_graph(graph_def, activations="float", weights=weights, outputs=outputs).model
    with pytest.raises(RunError, match=f"a {kind} file .*`qconvert run` executes integer kernels only") as err:
        IntegerModel(model)
    assert "\n" not in str(err.value)
    warned = runtime_warnings(read_model(model).subgraphs[0])
    assert any(w.startswith("dynamic range:" if weights == "int8" else "float16 weights:") for w in warned)
    assert any(f.rule == ("hybrid" if weights == "int8" else "float16")
               for f in static_check(read_model(model), "tflm"))
