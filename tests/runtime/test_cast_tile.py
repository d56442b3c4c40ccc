"""``qconvert run``'s CAST and TILE (issue 34): kernels that copy or convert raw values of any type.

Oracle: LiteRT 2.3's interpreter, ``OpResolverType.BUILTIN_REF``, on one-op files built here with
LiteRT's own flatbuffer schema (every pair of element types CAST converts, every element type TILE
copies, int32 and int64 multiples), and TensorFlow 2.21's own post-training int8 and 16x8 files that
hold them (TILE between two convolutions, ARG_MAX → CAST). Measured on LiteRT 2.3 (``test_float_to_int``):
float → integer truncates toward zero and saturates, NaN to the type's maximum; integer → integer wraps;
CAST reads no quantization parameters.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import oracle  # noqa: E402
import pytest

pytest.importorskip("ai_edge_litert", reason="LiteRT's interpreter is the oracle")

from qconvert.errors import RunError  # noqa: E402
from qconvert.runtime.interpreter import RAW_TYPES, IntegerModel  # noqa: E402
from qconvert.schema.codes import TENSOR_TYPES  # noqa: E402


def one_op_file(op: str, inputs: list[tuple[str, tuple[int, ...], Any]], out: tuple[str, tuple[int, ...]],
                version: int = 1, quant: dict[int, tuple[float, int]] | None = None) -> bytes:
    """A one-operator .tflite: ``inputs`` as (dtype, shape, constant or None: a model input), one
    output; ``quant``: (scale, zero point) by tensor index (inputs first, then the output)."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as s

    m = s.ModelT()
    m.version = 3
    code = s.OperatorCodeT()
    code.builtinCode = getattr(s.BuiltinOperator, op)
    code.deprecatedBuiltinCode = min(code.builtinCode, 127)
    code.version = version
    m.operatorCodes, m.buffers = [code], [s.BufferT()]
    sg = s.SubGraphT()
    sg.tensors, sg.inputs = [], []
    for k, (dtype, shape, data) in enumerate([*inputs, (out[0], out[1], None)]):
        t = s.TensorT()
        t.name, t.type, t.shape = ("output" if k == len(inputs) else f"in{k}"), TENSOR_TYPES[dtype], list(shape)
        b = s.BufferT()
        if data is not None:
            b.data = list(np.ascontiguousarray(np.asarray(data, dtype).reshape(shape)).tobytes())
        m.buffers.append(b)
        t.buffer = len(m.buffers) - 1
        if quant and k in quant:
            t.quantization = s.QuantizationParametersT()
            t.quantization.scale, t.quantization.zeroPoint = [quant[k][0]], [quant[k][1]]
        sg.tensors.append(t)
        if data is None and k < len(inputs):
            sg.inputs.append(k)
    sg.outputs = [len(inputs)]
    o = s.OperatorT()
    o.opcodeIndex, o.inputs, o.outputs = 0, list(range(len(inputs))), [len(inputs)]
    sg.operators = [o]
    m.subgraphs = [sg]
    b = flatbuffers.Builder(0)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


def litert_output(tflite: bytes, x: np.ndarray, resolver: str = "ref") -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = OpResolverType.BUILTIN_REF if resolver == "ref" else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    it = Interpreter(model_content=tflite, experimental_op_resolver_type=kind)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"]).copy()


def ours(tflite: bytes, x: np.ndarray) -> np.ndarray:
    model = IntegerModel(tflite)
    return next(iter(model.run({model.input_names[0]: x}).values()))


def assert_same(a: np.ndarray, b: np.ndarray) -> None:
    """Equal bit for bit: dtype, shape and bytes (NaN included)."""
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    assert a.tobytes() == b.tobytes(), (a.reshape(-1)[:16], b.reshape(-1)[:16])


# edge values of each type: both ends of every other type's range, their neighbours, ties, NaN, infinities
_EDGES = [0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 32767, 32768, -32768, -32769, 65535, 65536, 2**24 + 1,
          2**31 - 1, 2**31, -2**31, -2**31 - 1, 2**32 - 1, 2**32, 2**53 + 1, 2**63 - 1, -2**63]
_FLOAT_EDGES = [0.5, -0.5, 1.5, -1.5, 2.5, -2.7, 127.9, 128.0, -128.5, -129.0, 255.5, 256.0, -0.0, 32767.5,
                65535.9, 2147483520.0, 2.0**31, 2.0**32, 2.0**63, -2.0**63, -2.0**64, 2.0**64, 1e30, -1e30,
                np.nan, np.inf, -np.inf, 1e-40, -1e-40]


def _values(dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype == "bool":
        return np.array([True, False] * 16)
    d = np.dtype(dtype)
    if d.kind == "f":
        edges = np.array(_FLOAT_EDGES + [-v for v in _EDGES] + _EDGES, np.float64)
        return np.concatenate([edges, rng.normal(0, 1e3, 64), rng.normal(0, 3e9, 64)]).astype(d)
    info = np.iinfo(d)
    edges = [v for v in _EDGES if info.min <= v <= info.max]
    return np.concatenate([np.array(edges, d), rng.integers(info.min, info.max, 64, dtype=d, endpoint=True)])


@pytest.mark.parametrize("source,target", list(itertools.product(RAW_TYPES, RAW_TYPES)))
def test_cast_equals_litert(source: str, target: str) -> None:
    x = _values(source, np.random.default_rng(len(source) * 31 + len(target)))
    tflite = one_op_file("CAST", [(source, x.shape, None)], (target, x.shape), version=1)
    assert_same(ours(tflite, x), litert_output(tflite, x))


def test_float_to_int() -> None:
    """LiteRT 2.3's CAST of float32 to integers, as measured: truncation toward zero; below the
    range its minimum, above it and NaN its maximum; 2^31 - 128 (the largest float32 below 2^31)
    stays, 2^31 saturates int32."""
    x = np.array([-1.5, -0.5, 0.5, 1.5, 2.5, -2.7, 127.9, 128.0, 300.0, -129.0, np.nan, np.inf, -np.inf,
                  2147483520.0, 2.0**31], np.float32)
    expected = {
        "int8": [-1, 0, 0, 1, 2, -2, 127, 127, 127, -128, 127, 127, -128, 127, 127],
        "uint8": [0, 0, 0, 1, 2, 0, 127, 128, 255, 0, 255, 255, 0, 255, 255],
        "int32": [-1, 0, 0, 1, 2, -2, 127, 128, 300, -129, 2**31 - 1, 2**31 - 1, -2**31, 2147483520, 2**31 - 1],
        "int64": [-1, 0, 0, 1, 2, -2, 127, 128, 300, -129, 2**63 - 1, 2**63 - 1, -2**63, 2147483520, 2**31],
        "bool": [True, True, True, True, True, True, True, True, True, True, True, True, True, True, True],
    }
    for target, want in expected.items():
        tflite = one_op_file("CAST", [("float32", x.shape, None)], (target, x.shape))
        want_array = np.array(want, target)
        assert_same(litert_output(tflite, x), want_array)  # the measurement, held
        assert_same(ours(tflite, x), want_array)


def test_cast_reads_no_quantization_parameters() -> None:
    """A quantized int8 tensor cast to float32 or int32 gives its raw values in LiteRT, not the
    dequantized ones (and in `run`)."""
    x = np.arange(-128, 128, dtype=np.int8)
    for target in ("float32", "int32", "uint8"):
        tflite = one_op_file("CAST", [("int8", x.shape, None)], (target, x.shape), quant={0: (0.5, 3)})
        assert_same(litert_output(tflite, x), x.astype(target))
        assert_same(ours(tflite, x), x.astype(target))


_SHAPES = [((), ()), ((5,), (3,)), ((2, 3), (2, 1)), ((1, 2, 3), (3, 1, 2)), ((2, 1, 3, 2), (1, 4, 1, 2)),
           ((2, 3), (0, 2))]


@pytest.mark.parametrize("dtype", RAW_TYPES)
@pytest.mark.parametrize("multiples_dtype", ["int32", "int64"])
def test_tile_equals_litert(dtype: str, multiples_dtype: str) -> None:
    rng = np.random.default_rng(7)
    for shape, multiples in _SHAPES:
        x = _values(dtype, rng)[:int(np.prod(shape))]
        x = rng.permutation(x).reshape(shape).astype(dtype)
        out = tuple(d * m for d, m in zip(shape, multiples))
        tflite = one_op_file("TILE", [(dtype, shape, None), (multiples_dtype, (len(multiples),), multiples)],
                             (dtype, out))
        assert_same(ours(tflite, x), litert_output(tflite, x))


def test_tile_of_a_quantized_tensor_copies_the_bytes() -> None:
    """Input and output parameters that differ change nothing: LiteRT copies the raw int8 values."""
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 16, 16)
    tflite = one_op_file("TILE", [("int8", x.shape, None), ("int32", (3,), [2, 1, 3])], ("int8", (2, 16, 48)),
                         quant={0: (0.5, 3), 2: (0.25, -7)})
    assert_same(litert_output(tflite, x), np.tile(x, (2, 1, 3)))
    assert_same(ours(tflite, x), np.tile(x, (2, 1, 3)))


def test_what_cast_and_tile_do_not_take_is_one_line() -> None:
    x_shape = (4,)
    cases = {
        "float16": one_op_file("CAST", [("float16", x_shape, None)], ("float32", x_shape)),
        "keeps its input's type": one_op_file("TILE", [("int8", x_shape, None), ("int32", (1,), [2])],
                                              ("int16", (8,))),
        "int32 or int64": one_op_file("TILE", [("int8", x_shape, None), ("int16", (1,), [2])], ("int8", (8,))),
    }
    for expected, tflite in cases.items():
        with pytest.raises(RunError) as info:
            IntegerModel(tflite)
        assert "\n" not in str(info.value) and expected in str(info.value), str(info.value)
    wrong = one_op_file("TILE", [("int8", x_shape, None), ("int32", (2,), [2, 2])], ("int8", (8,)))
    with pytest.raises(RunError, match="one non-negative multiple per dimension"):
        ours(wrong, np.zeros(x_shape, np.int8))


# ---------------------------------------------------------------------------
# TensorFlow 2.21's own files (post-training quantization): every tensor equal to LiteRT


def _tf_file(kind: str, mode: str) -> bytes:
    tf = pytest.importorskip("tensorflow", reason="TensorFlow's converter writes the files")
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.3, (3, 3, 3, 4)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (1, 1, 4, 2)).astype(np.float32)

    def conv(x: Any) -> Any:
        return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))

    fn = {
        "tile": lambda x: tf.nn.conv2d(tf.tile(conv(x), [1, 2, 1, 3])[..., :4], w2, 1, "SAME"),
        "argmax_cast_float": lambda x: tf.cast(tf.argmax(conv(x), axis=-1), tf.float32),
        "argmax_cast_uint8": lambda x: tf.cast(tf.argmax(conv(x), axis=-1, output_type=tf.int32), tf.uint8),
    }[kind]
    f = tf.function(fn, input_signature=[tf.TensorSpec([1, 4, 4, 3], tf.float32)])
    c = tf.lite.TFLiteConverter.from_concrete_functions([f.get_concrete_function()], f)
    c.optimizations = [tf.lite.Optimize.DEFAULT]
    samples = [rng.uniform(-1, 1, (1, 4, 4, 3)).astype(np.float32) for _ in range(16)]
    c.representative_dataset = lambda: ([s] for s in samples)
    if mode == "int16":
        c.target_spec.supported_ops = [tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8]
        c.inference_input_type = tf.int16
    else:
        c.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        c.inference_input_type = tf.int8
    return c.convert()


def _relabel_tile(tflite: bytes) -> bytes:
    """TILE version 3 (TF 2.21 writes it for int8 and int16) relabelled 2: LiteRT 2.3's reference
    resolver registers TILE v1-2 only, and its one TILE kernel copies any 8/16/32/64-bit type."""
    def edit(m: Any) -> None:
        for oc in m.operatorCodes:
            if oc.builtinCode == 69 and oc.version == 3:
                oc.version = 2
    return oracle.repack(tflite, edit)


@pytest.mark.parametrize("kind,mode", [("tile", "int8"), ("tile", "int16"), ("argmax_cast_float", "int8"),
                                       ("argmax_cast_uint8", "int8")])
def test_tensorflows_files_equal_litert(kind: str, mode: str) -> None:
    from test_interpreter import assert_matches_litert

    tflite = _tf_file(kind, mode)
    model = IntegerModel(tflite)
    ops = [op.builtin for op in model.model.operators]
    assert ("TILE" if kind == "tile" else "CAST") in ops, ops
    if kind == "tile":
        # (LiteRT's default resolver runs v3, but its optimized DEQUANTIZE at the output is 1 float32 ulp off
        # the reference one on some values: REF is the oracle)
        assert {oc.version for oc in model.model.operator_codes if oc.builtin == "TILE"} == {3}
        tflite = _relabel_tile(tflite)
    print(kind, mode, "ref", assert_matches_litert(tflite, n_inputs=4))
