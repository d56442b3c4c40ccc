"""A small ``.tflite`` reader: bytes → plain dataclasses, for ``dump`` and round-trip tests.

Nothing here is tied to qconvert's own files; it reads what TensorFlow writes too.
Option tables come back as snake_case dicts with enum fields by name, the same
shape the writer takes as ``node.attrs``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from qconvert.schema.codes import (
    BUILTIN_NAMES,
    FILE_IDENTIFIER,
    TENSOR_TYPE_NAMES,
    camel_to_snake,
    enum_name,
)
from qconvert.ops import Rule, row
from qconvert.schema.int4 import unpack_int4


@dataclass
class TensorInfo:
    name: str
    dtype: str  # numpy-style name: "int8", "float32", ...
    shape: tuple[int, ...]
    buffer: int
    data: bytes | None  # raw little-endian bytes of a constant, None for activations
    scale: tuple[float, ...] = ()
    zero_point: tuple[int, ...] = ()
    quantized_dimension: int = 0
    # BlockwiseQuantization details: (scales tensor, zero-points tensor, block size)
    blockwise: tuple[int, int, int] | None = None
    is_variable: bool = False  # a state tensor (SVDF, LSTM) the op updates in place; starts at zero
    shape_signature: tuple[int, ...] = ()  # the shape with -1 where a dimension is dynamic (empty: as shape)
    sparse: bool = False  # a constant stored sparse (TensorT.sparsity): its buffer is not the dense array

    def array(self) -> np.ndarray | None:
        """The constant as a numpy array of its dtype and shape."""
        if self.data is None:
            return None
        if self.dtype == "int4":  # packed two per byte: the values as int8
            return unpack_int4(self.data, int(np.prod(self.shape, dtype=np.int64))).reshape(self.shape)
        dtype = np.dtype(self.dtype).newbyteorder("<")
        return np.frombuffer(self.data, dtype=dtype).reshape(self.shape)


@dataclass
class OperatorCodeInfo:
    builtin: str
    version: int
    deprecated_builtin_code: int
    custom_code: str | None = None


@dataclass
class OpInfo:
    builtin: str  # BuiltinOperator name, or "CUSTOM"
    version: int
    inputs: list[int]
    outputs: list[int]
    options: dict[str, Any] = field(default_factory=dict)
    options_type: str = "NONE"  # the union member, e.g. "Conv2DOptions"
    custom_code: str | None = None
    custom_options: bytes | None = None  # a custom op's options, as stored (flexbuffer or anything)
    intermediates: list[int] = field(default_factory=list)  # LSTM: tensors that carry only quantization


@dataclass
class SubgraphInfo:
    name: str
    tensors: list[TensorInfo]
    operators: list[OpInfo]
    inputs: list[int]
    outputs: list[int]

    def float_boundary(self, op: OpInfo) -> bool:
        """A QUANTIZE from a float32 model input or a DEQUANTIZE to a float32 model output: the
        boundary of an integer model with float I/O (``--input-type float32``), not a float op."""
        r = row(op.builtin)
        if r is None or r.rule is not Rule.QUANT:
            return False
        floats = [i for i in (*op.inputs, *op.outputs) if 0 <= i < len(self.tensors)
                  and self.tensors[i].dtype in ("float32", "float16")]
        return bool(floats) and all(i in self.inputs and i in op.inputs or i in self.outputs and i in op.outputs
                                    for i in floats)


@dataclass
class SignatureInfo:
    key: str  # the signature's name ("serving_default")
    subgraph: int
    inputs: dict[str, int]  # the signature's input name → tensor index in its subgraph
    outputs: dict[str, int]


@dataclass
class ModelInfo:
    version: int
    description: str
    operator_codes: list[OperatorCodeInfo]
    subgraphs: list[SubgraphInfo]
    metadata: dict[str, bytes]
    signatures: list[SignatureInfo] = field(default_factory=list)

    # The first subgraph, which is the model for everything qconvert writes.
    @property
    def tensors(self) -> list[TensorInfo]:
        return self.subgraphs[0].tensors

    @property
    def operators(self) -> list[OpInfo]:
        return self.subgraphs[0].operators

    @property
    def inputs(self) -> list[int]:
        return self.subgraphs[0].inputs

    @property
    def outputs(self) -> list[int]:
        return self.subgraphs[0].outputs

    def tensor(self, name: str) -> TensorInfo:
        for t in self.tensors:
            if t.name == name:
                return t
        raise KeyError(name)


def _text(value: bytes | str | None) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _ints(values: Any) -> list[int]:
    return [] if values is None else [int(v) for v in values]


def _option_value(key: str, value: Any) -> Any:
    """An option field as plain data: arrays and vectors as lists, nested tables as dicts,
    enum fields by name."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (bytes, bytearray)):
        return _text(bytes(value))
    if isinstance(value, (list, tuple)):
        return [_option_value(key, v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return _options_dict(value)
    return enum_name(key, value)


def _options_dict(options: Any) -> dict[str, Any]:
    return {camel_to_snake(key): _option_value(key, value) for key, value in vars(options).items()}


def _union_member(union: type, code: int) -> str:
    for name, value in vars(union).items():
        if not name.startswith("_") and value == code:
            return name
    return str(code)


def _blockwise(q: Any) -> tuple[int, int, int] | None:
    """The BlockwiseQuantization details of a tensor's quantization (schema.fbs, details type 2)."""
    blockwise = getattr(schema.QuantizationDetails, "BlockwiseQuantization", None)  # absent from older schemas
    if q is None or blockwise is None or int(q.detailsType) != blockwise or q.details is None:
        return None
    d = q.details
    return int(d.scales), int(d.zeroPoints), int(d.blockSize)


def _fail(reason: str) -> ValueError:
    return ValueError(f"not a TFLite file: {reason}")


def read_model(data: bytes) -> ModelInfo:
    """Parse ``.tflite`` bytes. ValueError("not a TFLite file: ...") when they are not one."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"read_model expects bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) < 8:
        raise _fail(f"only {len(data)} bytes")
    if data[4:8] != FILE_IDENTIFIER:
        raise _fail(f"identifier {data[4:8]!r} at bytes 4..8, expected {FILE_IDENTIFIER!r}")
    try:
        model = schema.ModelT.InitFromPackedBuf(data, 0)
        return _convert(model, data)
    except ValueError as e:
        if str(e).startswith("not a TFLite file"):
            raise
        raise _fail(f"cannot parse the flatbuffer ({e})") from None
    except Exception as e:  # the generated code raises whatever struct/numpy raise
        raise _fail(f"cannot parse the flatbuffer ({type(e).__name__}: {e})") from None


def _convert(model: Any, data: bytes) -> ModelInfo:
    buffers = model.buffers or []

    def buffer_bytes(index: int) -> bytes | None:
        if index == 0 and not buffers:  # buffer 0 is the empty sentinel; a file may omit it (LiteRT loads it)
            return None
        if not 0 <= index < len(buffers):
            raise _fail(f"buffer index {index} out of range ({len(buffers)} buffers)")
        buf = buffers[index]
        if buf.offset > 1:  # stored after the flatbuffer (models over 2 GiB)
            end = buf.offset + buf.size
            if end > len(data):
                raise _fail(f"buffer {index} ends at byte {end}, past the end of the file")
            return data[buf.offset:end]
        if buf.data is None or len(buf.data) == 0:
            return None
        return np.asarray(buf.data, dtype=np.uint8).tobytes()

    codes = []
    for oc in model.operatorCodes or []:
        # Files from before code 127 store the builtin in the deprecated byte only.
        code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
        codes.append(
            OperatorCodeInfo(
                builtin=BUILTIN_NAMES.get(code, f"UNKNOWN_{code}"),
                version=int(oc.version),
                deprecated_builtin_code=int(oc.deprecatedBuiltinCode),
                custom_code=_text(oc.customCode) if oc.customCode is not None else None,
            )
        )

    if not model.subgraphs:
        raise _fail("the model has no subgraph")
    subgraphs = []
    for sg in model.subgraphs:
        tensors = []
        for t in sg.tensors or []:
            q = t.quantization
            with np.errstate(invalid="ignore", over="ignore"):  # a damaged file's values are shown as they are
                scale = () if q is None or q.scale is None else tuple(np.asarray(q.scale, np.float64).tolist())
                zp = () if q is None or q.zeroPoint is None else tuple(np.asarray(q.zeroPoint, np.int64).tolist())
            tensors.append(
                TensorInfo(
                    name=_text(t.name),
                    dtype=TENSOR_TYPE_NAMES.get(int(t.type), f"unknown_{t.type}"),
                    shape=tuple(_ints(t.shape)),
                    buffer=int(t.buffer),
                    data=buffer_bytes(int(t.buffer)),
                    scale=scale,
                    zero_point=zp,
                    quantized_dimension=0 if q is None else int(q.quantizedDimension),
                    blockwise=_blockwise(q),
                    is_variable=bool(t.isVariable),
                    shape_signature=tuple(_ints(t.shapeSignature)),
                    sparse=t.sparsity is not None,
                )
            )

        def check(indices: list[int], what: str, optional: bool = False) -> list[int]:
            for i in indices:
                if not (0 <= i < len(tensors) or (optional and i == -1)):
                    raise _fail(f"{what} refers to tensor {i} ({len(tensors)} tensors)")
            return indices

        ops = []
        for k, op in enumerate(sg.operators or []):
            if not 0 <= op.opcodeIndex < len(codes):
                raise _fail(f"operator {k} has opcode index {op.opcodeIndex} ({len(codes)} codes)")
            oc = codes[op.opcodeIndex]
            options: dict[str, Any] = {}
            options_type = "NONE"
            if op.builtinOptions is not None:
                options = _options_dict(op.builtinOptions)
                options_type = _union_member(schema.BuiltinOptions, op.builtinOptionsType)
            elif op.builtinOptions2 is not None:
                options = _options_dict(op.builtinOptions2)
                options_type = _union_member(schema.BuiltinOptions2, op.builtinOptions2Type)
            ops.append(
                OpInfo(
                    builtin=oc.builtin,
                    version=oc.version,
                    inputs=check(_ints(op.inputs), f"operator {k} input", optional=True),
                    outputs=check(_ints(op.outputs), f"operator {k} output"),
                    options=options,
                    options_type=options_type,
                    custom_code=oc.custom_code,
                    custom_options=None if op.customOptions is None else np.asarray(op.customOptions, np.uint8).tobytes(),
                    intermediates=check(_ints(op.intermediates), f"operator {k} intermediate"),
                )
            )
        subgraphs.append(
            SubgraphInfo(
                name=_text(sg.name),
                tensors=tensors,
                operators=ops,
                inputs=check(_ints(sg.inputs), "subgraph input"),
                outputs=check(_ints(sg.outputs), "subgraph output"),
            )
        )

    metadata = {}
    for entry in model.metadata or []:
        metadata[_text(entry.name)] = buffer_bytes(int(entry.buffer)) or b""

    signatures = []
    for sig in model.signatureDefs or []:
        index = int(sig.subgraphIndex)
        if not 0 <= index < len(subgraphs):
            raise _fail(f"signature '{_text(sig.signatureKey)}' refers to subgraph {index} ({len(subgraphs)} subgraphs)")
        n = len(subgraphs[index].tensors)
        ports = []
        for entries in (sig.inputs or [], sig.outputs or []):
            ports.append({_text(e.name): int(e.tensorIndex) for e in entries})
            for name, i in ports[-1].items():
                if not 0 <= i < n:
                    raise _fail(f"signature '{_text(sig.signatureKey)}' maps '{name}' to tensor {i} ({n} tensors)")
        signatures.append(SignatureInfo(_text(sig.signatureKey), index, ports[0], ports[1]))

    return ModelInfo(
        version=int(model.version),
        description=_text(model.description),
        operator_codes=codes,
        subgraphs=subgraphs,
        metadata=metadata,
        signatures=signatures,
    )
