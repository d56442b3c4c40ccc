"""The stored multiplier/shift parameters, checked against a from-scratch
implementation of TFLite's Prepare formulas (written here, independently of
qconvert.quant) applied to the float32 scales in the file.

Formulas: kernel_util.cc PopulateConvolutionQuantizationParams (conv/depthwise,
double product per channel), GetQuantizedConvolutionMultipler (FC: float32 product),
add.cc/sub.cc (left shift 20, twice the larger input scale), mul.cc (float32),
quantize.cc and reduce.cc (double ratio), quantization_util.cc QuantizeMultiplier,
CalculateActivationRangeQuantized (clamps), activations.cc (standalone RELU*: float32
ratio; SOFTMAX: PreprocessSoftmaxScaling), elementwise.cc (ABS: float32 ratio). LOGISTIC / TANH tables are checked against
LiteRT itself in tests/runtime/test_interpreter.py.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from ai_edge_litert import schema_py_generated as schema

from qconvert.api import convert_bytes
from qconvert.schema.requant_metadata import METADATA_NAME, decode

ROOT = Path(__file__).resolve().parents[2]
f32 = np.float32


def quantize_multiplier(m: float) -> tuple[int, int]:
    if m == 0.0:
        return 0, 0
    mant, exp = math.frexp(m)
    q = int(math.floor(abs(mant) * 2**31 + 0.5)) * (1 if mant >= 0 else -1)
    if q == 2**31:
        q //= 2
        exp += 1
    if exp < -31:
        return 0, 0
    return q, exp


def clamp_for(act: int, scale: float, zp: int) -> tuple[int, int]:
    def q(v: float) -> int:
        x = float(f32(v) / f32(scale))
        return zp + int(math.copysign(math.floor(abs(x) + 0.5), x))

    A = schema.ActivationFunctionType
    if act == A.RELU:
        return max(-128, q(0.0)), 127
    if act == A.RELU6:
        return max(-128, q(0.0)), min(127, q(6.0))
    if act == A.RELU_N1_TO_1:
        return max(-128, q(-1.0)), min(127, q(1.0))
    return -128, 127


def expected(model, op) -> tuple[list[tuple[int, int]], int, tuple[int, int] | None]:
    sg = model.subgraphs[0]
    code = model.operatorCodes[op.opcodeIndex].builtinCode
    B = schema.BuiltinOperator
    t = [sg.tensors[i] for i in op.inputs]
    out = sg.tensors[op.outputs[0]]
    s = lambda x: float(f32(x.quantization.scale[0]))  # noqa: E731
    so = s(out)
    act = getattr(op.builtinOptions, "fusedActivationFunction", 0) if op.builtinOptions is not None else 0
    clamp = clamp_for(act, so, int(out.quantization.zeroPoint[0]))
    if code in (B.CONV_2D, B.DEPTHWISE_CONV_2D):
        ws = [float(f32(v)) for v in t[1].quantization.scale]
        n = t[1].shape[0] if code == B.CONV_2D else t[1].shape[3]
        ws = ws * n if len(ws) == 1 else ws
        return [quantize_multiplier(s(t[0]) * w / so) for w in ws], 0, clamp
    if code == B.FULLY_CONNECTED:
        product = float(f32(f32(s(t[0])) * f32(t[1].quantization.scale[0])))
        return [quantize_multiplier(product / so)], 0, clamp
    if code in (B.ADD, B.SUB):
        twice = float(f32(2.0) * f32(max(s(t[0]), s(t[1]))))
        real_out = twice / float(f32(1 << 20) * f32(so))
        return [quantize_multiplier(s(t[0]) / twice), quantize_multiplier(s(t[1]) / twice),
                quantize_multiplier(real_out)], 20, clamp
    if code == B.BATCH_MATMUL:  # batch_matmul.cc Prepare: GetQuantizedConvolutionMultipler, no bias
        return [quantize_multiplier(float(f32(f32(s(t[0])) * f32(s(t[1])))) / so)], 0, clamp
    if code == B.MUL:
        return [quantize_multiplier(float(f32(f32(s(t[0])) * f32(s(t[1]))) / f32(so)))], 0, clamp
    if code in (B.QUANTIZE, B.MEAN):
        return [quantize_multiplier(s(t[0]) / so)], 0, clamp
    if code in (B.RELU, B.RELU6, B.RELU_N1_TO_1):  # activations.cc ReluPrepare: float32 ratio
        kind = {B.RELU: schema.ActivationFunctionType.RELU, B.RELU6: schema.ActivationFunctionType.RELU6,
                B.RELU_N1_TO_1: schema.ActivationFunctionType.RELU_N1_TO_1}[code]
        return ([quantize_multiplier(float(f32(s(t[0])) / f32(so)))], 0,
                clamp_for(kind, so, int(out.quantization.zeroPoint[0])))
    if code == B.ABS:  # elementwise.cc GenericPrepare: float32 ratio (equal scales: no multiplication, ratio 1)
        return [quantize_multiplier(float(f32(s(t[0])) / f32(so)))], 0, clamp
    if code == B.SOFTMAX:  # PreprocessSoftmaxScaling(beta, in_scale, 5 integer bits)
        beta = float(op.builtinOptions.beta)
        return [quantize_multiplier(min(beta * s(t[0]) * 2.0**26, 2.0**31 - 1))], 0, clamp
    return [], 0, clamp


def check_model(flat: bytes) -> int:
    model = schema.ModelT.InitFromPackedBuf(bytearray(flat), 0)
    meta = {m.name.decode(): bytes(model.buffers[m.buffer].data) for m in model.metadata}
    records = {r.op_index: r for r in decode(meta[METADATA_NAME])}
    ops = model.subgraphs[0].operators
    checked = 0
    for i, op in enumerate(ops):
        pairs, left_shift, clamp = expected(model, op)
        if not pairs:
            if i in records:  # an op without multipliers is recorded only for its clamp
                assert (records[i].act_min, records[i].act_max) == clamp
            continue
        rec = records[i]
        assert [tuple(p) for p in rec.pairs] == pairs, f"op {i}: multipliers differ"
        code = model.operatorCodes[op.opcodeIndex].builtinCode
        if code == schema.BuiltinOperator.FULLY_CONNECTED:  # LiteRT 2.3's reference factor, in double
            sg = model.subgraphs[0]
            sc = lambda t: float(f32(sg.tensors[t].quantization.scale[0]))  # noqa: E731
            ws = [float(f32(w)) for w in sg.tensors[op.inputs[1]].quantization.scale]
            want = [struct.unpack("<Q", struct.pack("<d", sc(op.inputs[0]) * w / sc(op.outputs[0])))[0] for w in ws]
            assert rec.wide == want, f"op {i}: wide factors differ"
        assert rec.left_shift == left_shift and (rec.act_min, rec.act_max) == clamp, f"op {i}"
        checked += 1
    return checked


def test_example_model_requant_params() -> None:
    flat = convert_bytes(ROOT / "models" / "example_qat.pb", {"input": (-1.0, 1.0)})
    assert check_model(flat) >= 4


def test_quantize_multiplier_reference_by_hand() -> None:
    # 0.5 = 0.5 * 2^0 -> (2^30, 0); 0.75 -> (0.75 * 2^31, 0); 1.0 = 0.5 * 2^1 -> (2^30, 1)
    assert quantize_multiplier(0.5) == (1 << 30, 0)
    assert quantize_multiplier(0.75) == (3 << 29, 0)
    assert quantize_multiplier(1.0) == (1 << 30, 1)
    assert quantize_multiplier(2.0**-40) == (0, 0)


def test_corrupted_record_is_detected() -> None:
    flat = bytearray(convert_bytes(ROOT / "models" / "example_qat.pb", {"input": (-1.0, 1.0)}))
    model = schema.ModelT.InitFromPackedBuf(flat, 0)
    entry = next(m for m in model.metadata if m.name.decode() == METADATA_NAME)
    data = bytes(model.buffers[entry.buffer].data)
    at = flat.find(data)
    records = decode(data)
    first = records[0]
    target = first.pairs[0][0].to_bytes(4, "little", signed=True)
    pos = flat.find(target, at)
    flat[pos] ^= 1
    with pytest.raises(AssertionError, match="multipliers differ"):
        check_model(bytes(flat))


@pytest.mark.skipif(os.environ.get("QCONVERT_SKIP_TF") == "1", reason="TF disabled")
def test_corpus_requant_params() -> None:
    pytest.importorskip("tensorflow", reason="the corpus is built with TensorFlow")
    import corpus

    total = 0
    for m in corpus.build_corpus():
        flat = convert_bytes(m.graph_def, m.input_ranges, m.shapes, m.inputs, m.outputs)
        total += check_model(flat)
    assert total >= 20


def test_abs_requant_params() -> None:
    """ABS after a rescaling op and with equal scales on both sides (the pair is then (2^30, 1),
    the identity the kernel uses instead of a multiplication)."""
    tf = pytest.importorskip("tensorflow", reason="the graph is built with TensorFlow")
    from qconvert.api import convert_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 4, 4, 3], name="input")
        fq = tf.quantization.fake_quant_with_min_max_vars
        h = fq(fq(x * 2.0, -2.0, 2.0) - 0.5, -3.0, 2.0)
        tf.identity(fq(tf.abs(fq(tf.abs(h), 0.0, 3.0)), 0.0, 3.0), name="out")
    flat = convert_graph(g.as_graph_def().SerializeToString(), {"input": (-1.0, 1.0)}).model
    model = schema.ModelT.InitFromPackedBuf(bytearray(flat), 0)
    codes = [model.operatorCodes[op.opcodeIndex].builtinCode for op in model.subgraphs[0].operators]
    assert codes.count(schema.BuiltinOperator.ABS) == 2
    records = [r for r in decode({m.name.decode(): bytes(model.buffers[m.buffer].data)
                                  for m in model.metadata}[METADATA_NAME]) if r.builtin == "ABS"]
    assert sorted(tuple(r.pairs[0]) for r in records)[0] == (1 << 30, 1)  # the second ABS: 3/255 on both sides
    assert check_model(flat) >= 3


def test_batch_matmul_requant_params() -> None:
    """BATCH_MATMUL of two activations (attention's scores), int8: one pair from the float32 product of
    the input scales over the output scale."""
    tf = pytest.importorskip("tensorflow", reason="the graph is built with TensorFlow")
    from qconvert.api import convert_graph

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 2, 4, 8], name="input")
        fq = tf.quantization.fake_quant_with_min_max_vars
        a = fq(x, -1.0, 1.0)
        b = fq(fq(a * 0.7, -0.7, 0.7) + 0.1, -0.6, 0.8)
        tf.identity(fq(tf.linalg.matmul(a, b, transpose_b=True), -5.0, 6.0), name="out")
    flat = convert_graph(g.as_graph_def().SerializeToString(), {"input": (-1.0, 1.0)}).model
    model = schema.ModelT.InitFromPackedBuf(bytearray(flat), 0)
    codes = [model.operatorCodes[op.opcodeIndex].builtinCode for op in model.subgraphs[0].operators]
    assert codes.count(schema.BuiltinOperator.BATCH_MATMUL) == 1
    assert check_model(flat) >= 3  # MUL, ADD, BATCH_MATMUL
