"""Read a TensorFlow frozen GraphDef (.pb) into plain Python/numpy data.

We own the GraphDef schema: the protobuf message classes are built at import
time from a ``FileDescriptorProto`` written out below, in a private descriptor
pool. Reading a .pb therefore never imports TensorFlow (that import costs ~5 s
and drags in a huge dependency), needs no generated ``_pb2`` files and no
``protoc``, and works with protobuf 4.x through 7.x.

Field numbers are TensorFlow's own, from tensorflow/core/framework/
{graph,node_def,attr_value,tensor,tensor_shape,types,versions}.proto, so the
wire format is identical. Fields we do not model (debug info, resource handles,
...) are kept by protobuf as unknown fields and ignored. Calls to the function
library (PartitionedCall) are inlined (see ``_inline``).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
from google.protobuf import message
from google.protobuf.message import DecodeError

from qconvert.errors import ConversionError
from qconvert.io import read_buffer

__all__ = [
    "RawNode",
    "parse_graphdef",
    "read_graphdef",
    "dtype_name",
    "GraphDef",
    "NodeDef",
    "AttrValue",
    "NameAttrList",
    "TensorProto",
    "TensorShapeProto",
    "VersionDef",
    "FunctionDefLibrary",
    "FunctionDef",
    "OpDef",
    "DT",
]

# A tensor bigger than this is certainly a corrupt shape, not a real weight.
MAX_ELEMENTS = 2**31


# ---------------------------------------------------------------------------
# The schema
# ---------------------------------------------------------------------------

# types.proto: enum DataType (the non-reference values). Reference types are
# these plus 100 and only appear on attrs of stateful graphs.
DT: dict[str, int] = {
    "DT_INVALID": 0,
    "DT_FLOAT": 1,
    "DT_DOUBLE": 2,
    "DT_INT32": 3,
    "DT_UINT8": 4,
    "DT_INT16": 5,
    "DT_INT8": 6,
    "DT_STRING": 7,
    "DT_COMPLEX64": 8,
    "DT_INT64": 9,
    "DT_BOOL": 10,
    "DT_QINT8": 11,
    "DT_QUINT8": 12,
    "DT_QINT32": 13,
    "DT_BFLOAT16": 14,
    "DT_QINT16": 15,
    "DT_QUINT16": 16,
    "DT_UINT16": 17,
    "DT_COMPLEX128": 18,
    "DT_HALF": 19,
    "DT_RESOURCE": 20,
    "DT_VARIANT": 21,
    "DT_UINT32": 22,
    "DT_UINT64": 23,
    "DT_FLOAT8_E5M2": 24,
    "DT_FLOAT8_E4M3FN": 25,
    "DT_FLOAT8_E4M3FNUZ": 26,
    "DT_FLOAT8_E4M3B11FNUZ": 27,
    "DT_FLOAT8_E5M2FNUZ": 28,
    "DT_INT4": 29,
    "DT_UINT4": 30,
    "DT_INT2": 31,
    "DT_UINT2": 32,
    "DT_FLOAT4_E2M1FN": 33,
}

_DTYPE_NAMES: dict[int, str] = {
    1: "float32",
    2: "float64",
    3: "int32",
    4: "uint8",
    5: "int16",
    6: "int8",
    7: "string",
    8: "complex64",
    9: "int64",
    10: "bool",
    11: "qint8",
    12: "quint8",
    13: "qint32",
    14: "bfloat16",
    15: "qint16",
    16: "quint16",
    17: "uint16",
    18: "complex128",
    19: "float16",
    20: "resource",
    21: "variant",
    22: "uint32",
    23: "uint64",
    24: "float8_e5m2",
    25: "float8_e4m3fn",
    26: "float8_e4m3fnuz",
    27: "float8_e4m3b11fnuz",
    28: "float8_e5m2fnuz",
    29: "int4",
    30: "uint4",
    31: "int2",
    32: "uint2",
    33: "float4_e2m1fn",
}

_PKG = "tensorflow"

# The schema is serialized here as a FileDescriptorProto, by descriptor.proto's field numbers,
# without protobuf's descriptor_pb2 (importing it costs 1.5 ms of every start-up).


class _T:
    """descriptor.proto's FieldDescriptorProto.Type values the schema uses."""

    TYPE_DOUBLE, TYPE_FLOAT, TYPE_INT64, TYPE_UINT64, TYPE_INT32 = 1, 2, 3, 4, 5
    TYPE_BOOL, TYPE_STRING, TYPE_MESSAGE, TYPE_BYTES, TYPE_UINT32, TYPE_ENUM = 8, 9, 11, 12, 13, 14


_LABEL_OPTIONAL, _LABEL_REPEATED = 1, 3  # FieldDescriptorProto.Label


def _length_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _encode_varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3) + _encode_varint(value)


def _text_field(number: int, text: str) -> bytes:
    return _length_field(number, text.encode())


class _Message:
    """A DescriptorProto being written: its name, fields (each serialized), nested messages and
    oneofs; ``map_entry`` for a map's entry type."""

    def __init__(self, name: str, map_entry: bool = False) -> None:
        self.name, self.map_entry = name, map_entry
        self.fields: list[bytes] = []
        self.nested_types: list[_Message] = []
        self.oneofs: list[str] = []

    def nested(self, name: str, map_entry: bool = False) -> _Message:
        message = _Message(name, map_entry)
        self.nested_types.append(message)
        return message

    def serialize(self) -> bytes:
        # DescriptorProto: name 1, field 2, nested_type 3, options 7 (MessageOptions.map_entry 7), oneof_decl 8
        return b"".join([
            _text_field(1, self.name),
            *(_length_field(2, f) for f in self.fields),
            *(_length_field(3, m.serialize()) for m in self.nested_types),
            _length_field(7, _varint_field(7, 1)) if self.map_entry else b"",
            *(_length_field(8, _text_field(1, name)) for name in self.oneofs),  # OneofDescriptorProto.name 1
        ])


def _add_field(
    msg: _Message,
    name: str,
    number: int,
    ftype: int,
    repeated: bool = False,
    type_name: str = "",
    oneof: int | None = None,
) -> None:
    # FieldDescriptorProto: name 1, number 3, label 4, type 5, type_name 6, oneof_index 9
    msg.fields.append(b"".join([
        _text_field(1, name),
        _varint_field(3, number),
        _varint_field(4, _LABEL_REPEATED if repeated else _LABEL_OPTIONAL),
        _varint_field(5, ftype),
        _text_field(6, f".{_PKG}.{type_name}") if type_name else b"",
        _varint_field(9, oneof) if oneof is not None else b"",
    ]))


def _add_map(msg: _Message, name: str, number: int, value_type: str) -> None:
    """``map<string, V> name = number`` (V a message, or "string"): a repeated nested
    ``XxxEntry`` with map_entry set."""
    entry_name = "".join(p.capitalize() for p in name.split("_")) + "Entry"
    entry = msg.nested(entry_name, map_entry=True)
    _add_field(entry, "key", 1, _T.TYPE_STRING)
    if value_type == "string":
        _add_field(entry, "value", 2, _T.TYPE_STRING)
    else:
        _add_field(entry, "value", 2, _T.TYPE_MESSAGE, type_name=value_type)
    _add_field(msg, name, number, _T.TYPE_MESSAGE, repeated=True, type_name=f"{msg.name}.{entry_name}")


def _schema() -> bytes:
    """The subset of TensorFlow's framework protos that a frozen graph uses: a serialized
    FileDescriptorProto."""
    messages: list[_Message] = []

    def message(name: str) -> _Message:
        messages.append(_Message(name))
        return messages[-1]

    T = _T  # brevity

    # tensor_shape.proto
    shape = message("TensorShapeProto")
    dim = shape.nested("Dim")
    _add_field(dim, "size", 1, T.TYPE_INT64)
    _add_field(dim, "name", 2, T.TYPE_STRING)
    _add_field(shape, "dim", 2, T.TYPE_MESSAGE, repeated=True, type_name="TensorShapeProto.Dim")
    _add_field(shape, "unknown_rank", 3, T.TYPE_BOOL)

    # tensor.proto
    tensor = message("TensorProto")
    _add_field(tensor, "dtype", 1, T.TYPE_ENUM, type_name="DataType")
    _add_field(tensor, "tensor_shape", 2, T.TYPE_MESSAGE, type_name="TensorShapeProto")
    _add_field(tensor, "version_number", 3, T.TYPE_INT32)
    _add_field(tensor, "tensor_content", 4, T.TYPE_BYTES)
    _add_field(tensor, "half_val", 13, T.TYPE_INT32, repeated=True)
    _add_field(tensor, "float_val", 5, T.TYPE_FLOAT, repeated=True)
    _add_field(tensor, "double_val", 6, T.TYPE_DOUBLE, repeated=True)
    _add_field(tensor, "int_val", 7, T.TYPE_INT32, repeated=True)
    _add_field(tensor, "string_val", 8, T.TYPE_BYTES, repeated=True)
    _add_field(tensor, "scomplex_val", 9, T.TYPE_FLOAT, repeated=True)
    _add_field(tensor, "int64_val", 10, T.TYPE_INT64, repeated=True)
    _add_field(tensor, "bool_val", 11, T.TYPE_BOOL, repeated=True)
    _add_field(tensor, "dcomplex_val", 12, T.TYPE_DOUBLE, repeated=True)
    _add_field(tensor, "uint32_val", 16, T.TYPE_UINT32, repeated=True)
    _add_field(tensor, "uint64_val", 17, T.TYPE_UINT64, repeated=True)

    # attr_value.proto
    attr = message("AttrValue")
    lst = attr.nested("ListValue")
    _add_field(lst, "s", 2, T.TYPE_BYTES, repeated=True)
    _add_field(lst, "i", 3, T.TYPE_INT64, repeated=True)
    _add_field(lst, "f", 4, T.TYPE_FLOAT, repeated=True)
    _add_field(lst, "b", 5, T.TYPE_BOOL, repeated=True)
    _add_field(lst, "type", 6, T.TYPE_ENUM, repeated=True, type_name="DataType")
    _add_field(lst, "shape", 7, T.TYPE_MESSAGE, repeated=True, type_name="TensorShapeProto")
    _add_field(lst, "tensor", 8, T.TYPE_MESSAGE, repeated=True, type_name="TensorProto")
    _add_field(lst, "func", 9, T.TYPE_MESSAGE, repeated=True, type_name="NameAttrList")
    attr.oneofs.append("value")
    _add_field(attr, "s", 2, T.TYPE_BYTES, oneof=0)
    _add_field(attr, "i", 3, T.TYPE_INT64, oneof=0)
    _add_field(attr, "f", 4, T.TYPE_FLOAT, oneof=0)
    _add_field(attr, "b", 5, T.TYPE_BOOL, oneof=0)
    _add_field(attr, "type", 6, T.TYPE_ENUM, type_name="DataType", oneof=0)
    _add_field(attr, "shape", 7, T.TYPE_MESSAGE, type_name="TensorShapeProto", oneof=0)
    _add_field(attr, "tensor", 8, T.TYPE_MESSAGE, type_name="TensorProto", oneof=0)
    _add_field(attr, "list", 1, T.TYPE_MESSAGE, type_name="AttrValue.ListValue", oneof=0)
    _add_field(attr, "func", 10, T.TYPE_MESSAGE, type_name="NameAttrList", oneof=0)
    _add_field(attr, "placeholder", 9, T.TYPE_STRING, oneof=0)

    func = message("NameAttrList")
    _add_field(func, "name", 1, T.TYPE_STRING)
    _add_map(func, "attr", 2, "AttrValue")

    # node_def.proto
    node = message("NodeDef")
    _add_field(node, "name", 1, T.TYPE_STRING)
    _add_field(node, "op", 2, T.TYPE_STRING)
    _add_field(node, "input", 3, T.TYPE_STRING, repeated=True)
    _add_field(node, "device", 4, T.TYPE_STRING)
    _add_map(node, "attr", 5, "AttrValue")

    # versions.proto
    versions = message("VersionDef")
    _add_field(versions, "producer", 1, T.TYPE_INT32)
    _add_field(versions, "min_consumer", 2, T.TYPE_INT32)
    _add_field(versions, "bad_consumers", 3, T.TYPE_INT32, repeated=True)

    # op_def.proto: a function's signature (names and dtypes of its arguments)
    opdef = message("OpDef")
    argdef = opdef.nested("ArgDef")
    _add_field(argdef, "name", 1, T.TYPE_STRING)
    _add_field(argdef, "type", 3, T.TYPE_ENUM, type_name="DataType")
    _add_field(argdef, "number_attr", 5, T.TYPE_STRING)
    _add_field(argdef, "type_list_attr", 6, T.TYPE_STRING)
    _add_field(opdef, "name", 1, T.TYPE_STRING)
    _add_field(opdef, "input_arg", 2, T.TYPE_MESSAGE, repeated=True, type_name="OpDef.ArgDef")
    _add_field(opdef, "output_arg", 3, T.TYPE_MESSAGE, repeated=True, type_name="OpDef.ArgDef")

    # function.proto: the bodies PartitionedCall nodes call (Keras wraps a grouped conv in one)
    fdef = message("FunctionDef")
    _add_field(fdef, "signature", 1, T.TYPE_MESSAGE, type_name="OpDef")
    _add_field(fdef, "node_def", 3, T.TYPE_MESSAGE, repeated=True, type_name="NodeDef")
    _add_map(fdef, "ret", 4, "string")
    _add_map(fdef, "attr", 5, "AttrValue")  # api_implements: a Keras LSTM's function (tf_frozen keeps its calls)
    library = message("FunctionDefLibrary")
    _add_field(library, "function", 1, T.TYPE_MESSAGE, repeated=True, type_name="FunctionDef")

    # graph.proto (debug_info = 5 stays an unknown field)
    graph = message("GraphDef")
    _add_field(graph, "node", 1, T.TYPE_MESSAGE, repeated=True, type_name="NodeDef")
    _add_field(graph, "library", 2, T.TYPE_MESSAGE, type_name="FunctionDefLibrary")
    _add_field(graph, "versions", 4, T.TYPE_MESSAGE, type_name="VersionDef")
    _add_field(graph, "version", 3, T.TYPE_INT32)
    # FileDescriptorProto: name 1, package 2, message_type 4, enum_type 5, syntax 12; the DataType
    # enum's values (EnumDescriptorProto: name 1, value 2; EnumValueDescriptorProto: name 1, number 2)
    data_type = _text_field(1, "DataType") + b"".join(
        _length_field(2, _text_field(1, name) + _varint_field(2, number)) for name, number in DT.items())
    return b"".join([
        _text_field(1, "qconvert/tensorflow_graphdef.proto"),
        _text_field(2, _PKG),
        *(_length_field(4, m.serialize()) for m in messages),
        _length_field(5, data_type),
        _text_field(12, "proto3"),
    ])


def _upb() -> Any:
    """protobuf's C core, upb (``google._upb._message``, in every protobuf since 4.21), unless
    ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION`` asks for another implementation or it is missing."""
    if os.environ.get("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "upb") != "upb":
        return None
    try:
        from google._upb import _message
    except ImportError:
        return None
    return _message


def _message_classes() -> dict[str, type]:
    """A class for each message of :func:`_schema`: the top-level ones by name, the nested ones (a
    shape's ``Dim``, the attr maps' entries) by full name. Every nested one gets its class too, and
    is kept: protobuf 4.21's upb crashes (SIGSEGV) on reading a nested message whose class was never
    made (``shape.dim[0]``, measured with 4.21.12)."""
    names = ("GraphDef", "NodeDef", "AttrValue", "NameAttrList", "TensorProto",
             "TensorShapeProto", "VersionDef", "FunctionDefLibrary", "FunctionDef", "OpDef")
    upb = _upb()
    if upb is not None:
        # upb's own pool and class maker, which descriptor_pool and message_factory hand back over upb:
        # importing those two loads protobuf's pure-Python implementation (python_message, text_format,
        # decoder, ...), 9 ms of every .pb conversion (EfficientViT_M0, whole process, medians)
        try:
            pool = upb.DescriptorPool()
            pool.AddSerializedFile(_schema())
            top = {n: pool.FindMessageTypeByName(f"{_PKG}.{n}") for n in names}
            return {key: upb.MessageMeta(d.name, (message.Message,), {"DESCRIPTOR": d, "__module__": None})
                    for key, d in _and_nested(top).items()}
        except Exception:  # noqa: BLE001 - a private module: a protobuf that changed it takes the public route
            pass
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(_schema())
    get_class = getattr(message_factory, "GetMessageClass", None)
    if get_class is None:  # protobuf < 4.22 has only the (later removed) factory API
        factory = message_factory.MessageFactory(pool)
        get_class = factory.GetPrototype
    top = {n: pool.FindMessageTypeByName(f"{_PKG}.{n}") for n in names}
    return {key: get_class(d) for key, d in _and_nested(top).items()}


def _and_nested(top: dict[str, Any]) -> dict[str, Any]:
    """``top`` (name -> message descriptor), then every type nested in them, by full name."""
    found, todo = dict(top), list(top.values())
    while todo:
        for d in todo.pop().nested_types:
            found[d.full_name] = d
            todo.append(d)
    return found


_CLASSES = _message_classes()
GraphDef = _CLASSES["GraphDef"]
NodeDef = _CLASSES["NodeDef"]
AttrValue = _CLASSES["AttrValue"]
NameAttrList = _CLASSES["NameAttrList"]
TensorProto = _CLASSES["TensorProto"]
TensorShapeProto = _CLASSES["TensorShapeProto"]
VersionDef = _CLASSES["VersionDef"]
FunctionDefLibrary = _CLASSES["FunctionDefLibrary"]
FunctionDef = _CLASSES["FunctionDef"]
OpDef = _CLASSES["OpDef"]


# ---------------------------------------------------------------------------
# Decoding
# ---------------------------------------------------------------------------


class RawNode:
    """One NodeDef with its attrs decoded to Python/numpy values; no TF types leak out. Compared by
    identity. (A plain class: as a dataclass its generated methods cost 0.3 ms of every start-up.)"""

    __slots__ = ("attrs", "device", "inputs", "kinds", "name", "op")
    name: str
    op: str
    inputs: list[str]  # as in the NodeDef, e.g. "conv/weights", "split:1", "^ctrl_dep"
    attrs: dict[str, Any]
    device: str
    kinds: dict[str, str]  # each attr's AttrValue kind ("i", "f", "type", ...)

    def __init__(self, name: str, op: str, inputs: list[str], attrs: dict[str, Any], device: str = "",
                 kinds: dict[str, str] | None = None) -> None:
        self.name, self.op, self.inputs, self.attrs, self.device = name, op, inputs, attrs, device
        self.kinds = {} if kinds is None else kinds

    def __repr__(self) -> str:
        return (f"RawNode(name={self.name!r}, op={self.op!r}, inputs={self.inputs!r}, attrs={self.attrs!r}, "
                f"device={self.device!r}, kinds={self.kinds!r})")


def dtype_name(enum_value: int) -> str:
    """numpy-style name of a DataType enum value ("float32", ...; "float32_ref" for refs)."""
    name = _DTYPE_NAMES.get(enum_value)
    if name is not None:
        return name
    if enum_value > 100 and enum_value - 100 in _DTYPE_NAMES:
        return _DTYPE_NAMES[enum_value - 100] + "_ref"
    return f"dtype{enum_value}"


def _bfloat16() -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise ValueError("bfloat16 tensors need the 'ml_dtypes' package") from None
    return np.dtype(ml_dtypes.bfloat16)


# DataType -> (numpy dtype of the result, typed repeated field used when there is
# no tensor_content). Quantized TF types become their plain storage type.
_TENSOR_KINDS: dict[int, tuple[Any, str]] = {
    1: (np.float32, "float_val"),
    2: (np.float64, "double_val"),
    3: (np.int32, "int_val"),
    4: (np.uint8, "int_val"),
    5: (np.int16, "int_val"),
    6: (np.int8, "int_val"),
    7: (object, "string_val"),
    8: (np.complex64, "scomplex_val"),
    9: (np.int64, "int64_val"),
    10: (np.bool_, "bool_val"),
    11: (np.int8, "int_val"),
    12: (np.uint8, "int_val"),
    13: (np.int32, "int_val"),
    14: ("bfloat16", "half_val"),
    15: (np.int16, "int_val"),
    16: (np.uint16, "int_val"),
    17: (np.uint16, "int_val"),
    18: (np.complex128, "dcomplex_val"),
    19: (np.float16, "half_val"),
    22: (np.uint32, "uint32_val"),
    23: (np.uint64, "uint64_val"),
}


# DataType -> (numpy dtype, its little-endian form: tensor_content's), made once (2 µs a constant)
_NUMPY_DTYPES: dict[int, tuple[np.dtype, np.dtype]] = {
    k: (np.dtype(dt), np.dtype(dt).newbyteorder("<")) for k, (dt, _) in _TENSOR_KINDS.items() if not isinstance(dt, str)
}


def _tensor_shape(shape: Any) -> tuple[tuple[int, ...], int]:
    """A tensor's concrete shape and element count; raises ValueError for shapes no real constant can have."""
    if shape.unknown_rank:
        raise ValueError("tensor has unknown rank")
    dims = tuple([d.size for d in shape.dim])
    if dims and min(dims) < 0:
        raise ValueError(f"tensor has a negative dimension in shape {list(dims)}")
    count = math.prod(dims)
    if count > MAX_ELEMENTS:
        raise ValueError(f"tensor shape {list(dims)} is absurdly large (more than 2**31 elements)")
    return dims, count


def _tensor_to_numpy(t: Any, content: np.ndarray | None = None) -> np.ndarray:
    """TensorProto -> numpy array, following TensorFlow's Tensor::FromProto rules.

    ``content`` is the tensor's ``tensor_content`` when it was lifted out of the message
    (a view of the file's buffer, see ``_lift``). The array is read-only: a graph's
    constants are values, and every pass that changes one makes a new array. Raises
    ValueError; the caller adds the node name.
    """
    value = _tensor_values(t, content)
    value.flags.writeable = False
    return value


def _tensor_values(t: Any, lifted: np.ndarray | None) -> np.ndarray:
    shape, count = _tensor_shape(t.tensor_shape)
    dtype = t.dtype  # each read of a message field is a call into protobuf: read once
    kind = _TENSOR_KINDS.get(dtype)
    if kind is None:
        raise ValueError(f"unsupported tensor dtype {dtype_name(dtype)}")
    dt, field = kind
    is_bf16 = isinstance(dt, str)
    dt, wire = (_bfloat16(), np.dtype("<u2")) if is_bf16 else _NUMPY_DTYPES[dtype]

    content = t.tensor_content if lifted is None else lifted
    if len(content):
        if dt.kind == "O":
            raise ValueError("string tensor uses tensor_content, which TensorFlow does not allow")
        if len(content) != count * dt.itemsize:
            raise ValueError(
                f"tensor_content has {len(content)} bytes but shape {list(shape)} of "
                f"{dtype_name(dtype)} needs {count * dt.itemsize}"
            )
        # Little-endian on the wire. ``content`` is already a bytes object of its own (the
        # proto's field is copied out on access), so on a little-endian machine the array
        # reads it in place (a second copy cost 23 ms on a 94 MB graph).
        flat = np.frombuffer(content, dtype=wire)
        # A lifted view may start at any byte; numpy works on unaligned arrays (copying one
        # aligned cost what it saved on the three large tfmot graphs, 0.72-0.80 s either way,
        # and kept 57 MB more alive beside the file's buffer)
        if not flat.dtype.isnative:
            flat = flat.astype(flat.dtype.newbyteorder("="))
        if is_bf16:
            flat = flat.view(dt)
        return flat.reshape(shape)

    values = getattr(t, field)
    n = len(values)
    if field in ("scomplex_val", "dcomplex_val"):
        if n % 2:
            raise ValueError(f"{field} has an odd number of values ({n})")
        n //= 2
    if n > count:
        raise ValueError(f"{field} has {n} values but shape {list(shape)} holds {count}")
    if n == 0:
        if dt.kind == "O":
            return np.full(shape, b"", dtype=object)
        return np.zeros(shape, dtype=dt)

    if dt.kind == "O":
        flat = np.empty(n, dtype=object)
        flat[:] = list(values)
    elif field == "half_val":  # uint16 bit patterns stored in int32s
        flat = np.array(values, dtype=np.int32).astype(np.uint16).view(dt)
    elif field == "int_val":  # int32 storage; narrow like C++'s static_cast
        flat = np.array(values, dtype=np.int32).astype(dt)
    elif field in ("scomplex_val", "dcomplex_val"):
        real = np.float32 if field == "scomplex_val" else np.float64
        flat = np.array(values, dtype=real).view(dt)
    else:
        flat = np.array(values, dtype=dt)

    if n < count:  # TensorFlow repeats the last value to fill the shape
        full = np.empty(count, dtype=dt)
        full[:n] = flat
        full[n:] = flat[-1]
        flat = full
    return flat.reshape(shape)


def _shape_attr(shape: Any) -> tuple[int, ...] | None:
    if shape.unknown_rank:
        return None
    return tuple(d.size if d.size >= 0 else -1 for d in shape.dim)


def _text(s: bytes) -> str | bytes:
    try:
        return s.decode("utf-8")
    except UnicodeDecodeError:
        return s


def _list_attr(lv: Any) -> list[Any]:
    # TensorFlow treats a ListValue as whichever field is non-empty.
    if len(lv.s):
        return [_text(s) for s in lv.s]
    if len(lv.i):
        return list(lv.i)
    if len(lv.f):
        return list(lv.f)
    if len(lv.b):
        return list(lv.b)
    if len(lv.type):
        return [dtype_name(x) for x in lv.type]
    if len(lv.shape):
        return [_shape_attr(x) for x in lv.shape]
    if len(lv.tensor):
        return [_tensor_to_numpy(x) for x in lv.tensor]
    if len(lv.func):
        return [f.name for f in lv.func]
    return []


def _attr_value(v: Any, content: np.ndarray | None = None) -> Any:
    """AttrValue -> Python value; raises ValueError for bad tensors. ``content``: a lifted
    ``tensor_content`` of its tensor."""
    return _attr_of_kind(v, v.WhichOneof("value"), content)


def _attr_of_kind(v: Any, kind: str | None, content: np.ndarray | None) -> Any:
    """``_attr_value`` of an AttrValue whose oneof member ``kind`` the caller has read."""
    if kind == "type":  # the kinds by how often frozen graphs use them
        dtype = v.type
        return _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
    if kind == "tensor":
        return _tensor_to_numpy(v.tensor, content)
    if kind == "b":
        return v.b
    if kind == "s":
        return _text(v.s)
    if kind == "list":
        return _list_attr(v.list)
    if kind == "f":
        return v.f
    if kind == "i":
        return v.i
    if kind is None:
        return None
    if kind == "shape":
        return _shape_attr(v.shape)
    if kind == "func":
        return v.func.name
    return v.placeholder  # "placeholder"


# ---------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------


def _sniff(data: bytes, source: str) -> None:
    """Recognise files that are clearly not a binary GraphDef before protobuf guesses."""
    if not data:
        raise ConversionError(f"{source}: the file is empty, not a GraphDef")
    if data[4:8] == b"TFL3":
        raise ConversionError(f"{source}: this is a TFLite model, not a GraphDef")
    if data[:8] == b"\x89HDF\r\n\x1a\n":
        raise ConversionError(f"{source}: this is a Keras/HDF5 file, not a GraphDef")
    head = data[:64].lstrip()
    if head.startswith((b"node {", b"node{", b"versions {", b"library {")):
        raise ConversionError(
            f"{source}: this is a text-format GraphDef (.pbtxt); convert it to binary .pb first"
        )


def _parse_message(data: bytes, source: str, sniff: bool = True) -> Any:
    if sniff:
        _sniff(data, source)
    graph = GraphDef()
    try:
        graph.ParseFromString(data)
    except (DecodeError, ValueError) as e:
        raise ConversionError(f"{source}: not a valid GraphDef (protobuf parse failed: {e})") from None
    if len(graph.node) == 0:
        hint = ""
        if os.path.basename(source) == "saved_model.pb":
            hint = " (this looks like a SavedModel's saved_model.pb; SavedModel input is not supported yet)"
        raise ConversionError(f"{source}: not a GraphDef (parsed, but it has no nodes){hint}")
    return graph


def _decode_node(nd: Any, index: int, source: str, name: str | None = None,
                 inputs: list[str] | None = None, contents: dict[str, np.ndarray] | None = None) -> RawNode:
    own = nd.name
    name = own if name is None else name
    op = nd.op
    if not own:
        raise ConversionError(f"{source}: not a valid GraphDef (node #{index} has no name)")
    if not op:
        raise ConversionError(f"{source}: not a valid GraphDef (node '{name}' has no op)")
    attrs: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    attr = nd.attr
    # keys, then look-ups, in one pass: the map's items() is collections.abc's Python generator
    # (two passes over it were 9 of the 13 ms of decoding RepViT_M09's 1,850 nodes)
    for key in attr:
        value = attr[key]
        kind = value.WhichOneof("value")
        if kind == "type":  # dtypes: 45 % of the attrs, read here without a call (EfficientViT_M0: -1 ms)
            dtype = value.type
            attrs[key] = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
            kinds[key] = kind
            continue
        if kind == "placeholder" and name != own:  # in a function body
            raise ConversionError(f"{source}: node '{name}' ({op}) attr '{key}' is a function attribute "
                                  f"placeholder (${value.placeholder}): freeze a concrete function")
        try:
            attrs[key] = _attr_of_kind(value, kind, contents.get(key) if contents else None)
        except ValueError as e:
            raise ConversionError(f"{source}: node '{name}' ({op}) attr '{key}': {e}") from None
        kinds[key] = kind or ""
    return RawNode(name, op, list(nd.input) if inputs is None else inputs, attrs, nd.device, kinds)


def _decode(graph: Any, source: str, buffer: memoryview | None = None,
            lifted: dict[int, dict[str, tuple[int, int]]] | None = None) -> list[RawNode]:
    def contents(index: int) -> dict[str, np.ndarray] | None:
        where = lifted.get(index) if lifted else None
        if not where:
            return None
        return {key: np.frombuffer(buffer, np.uint8, n, offset) for key, (offset, n) in where.items()}

    nodes = [_decode_node(nd, index, source, contents=contents(index)) for index, nd in enumerate(graph.node)]
    functions = {f.signature.name: f for f in graph.library.function}
    if any(_callee(n, functions) for n in nodes):
        nodes = _inline(nodes, functions, source, depth=0)
        _refuse_lstm_state(nodes, source)
    return nodes


# ---------------------------------------------------------------------------
# Function calls: a frozen graph can still call functions of its library
# (convert_variables_to_constants_v2 keeps a Keras grouped conv, a jit-compiled
# tf.function, as a PartitionedCall). Each call is replaced by the function's body,
# its nodes named "<call>/<node>", and an Identity (IdentityN for several results)
# named like the call, so "call" and "call:k" still name the results.
# ---------------------------------------------------------------------------

_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
_MAX_CALL_DEPTH = 32

# Output arguments of the multi-output ops, by name: inside a function body an input
# names a result as "node:argument:index" (op_def.proto), not "node:index".
_OUTPUT_ARGS: dict[str, tuple[str, ...]] = {
    "FusedBatchNorm": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV2": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2"),
    "FusedBatchNormV3": ("y", "batch_mean", "batch_variance", "reserve_space_1", "reserve_space_2",
                         "reserve_space_3"),
    "TopKV2": ("values", "indices"),
    "Unique": ("y", "idx"),
}


def _callee(node: RawNode, functions: dict[str, Any]) -> str | None:
    """The library function a node calls, if any (a call op, or the function's name as op)."""
    if node.op in _CALL_OPS:
        return str(node.attrs.get("f"))
    return node.op if node.op in functions else None


def _output_index(node: RawNode, arg: str, index: int, functions: dict[str, Any]) -> int | None:
    callee = _callee(node, functions)
    if callee is not None and callee in functions:
        names = [a.name for a in functions[callee].signature.output_arg]
    else:
        names = list(_OUTPUT_ARGS.get(node.op, ()))
    if not names:  # one output argument (a single tensor or a list): the index is the output
        return index
    return names.index(arg) + index if arg in names else None


def _inline(nodes: list[RawNode], functions: dict[str, Any], source: str, depth: int) -> list[RawNode]:
    out: list[RawNode] = []
    for node in nodes:
        callee = _callee(node, functions)
        if callee is None:
            out.append(node)
            continue
        if callee not in functions:
            raise ConversionError(f"{source}: node '{node.name}' ({node.op}) calls function '{callee}', "
                                  "which is not in the GraphDef's function library")
        if _implements(functions[callee]).startswith(KERAS_LSTM_IMPLEMENTS):
            out.extend(_keras_lstm(node, functions[callee], source))
            continue
        if depth >= _MAX_CALL_DEPTH:
            raise ConversionError(f"{source}: node '{node.name}' ({node.op}): function calls nested more than "
                                  f"{_MAX_CALL_DEPTH} deep (recursive function?)")
        out.extend(_expand(node, functions[callee], functions, source, depth))
    return out


def _expand(call: RawNode, fdef: Any, functions: dict[str, Any], source: str, depth: int) -> list[RawNode]:
    sig = fdef.signature
    where = f"{source}: node '{call.name}' ({call.op}) calling '{sig.name}'"
    data_inputs = [i for i in call.inputs if not i.startswith("^")]
    if any(a.number_attr or a.type_list_attr for a in sig.input_arg) or len(sig.input_arg) != len(data_inputs):
        raise ConversionError(f"{where}: {len(data_inputs)} inputs for {len(sig.input_arg)} arguments; "
                              "freeze a concrete function")
    args = {a.name: data_inputs[k] for k, a in enumerate(sig.input_arg)}
    prefix = call.name + "/"
    body = {nd.name: _decode_node(nd, k, source, name=prefix + nd.name, inputs=[])
            for k, nd in enumerate(fdef.node_def)}

    def ref(text: str) -> str:
        control = text.startswith("^")
        parts = text.lstrip("^").split(":")
        if parts[0] in args and len(parts) == 1:
            target = args[parts[0]]
            return "^" + target.lstrip("^").split(":")[0] if control else target
        if parts[0] in body and (control or len(parts) in (1, 3)):
            node = body[parts[0]]
            if control or len(parts) == 1:
                return ("^" if control else "") + node.name
            k = _output_index(node, parts[1], int(parts[2]), functions) if parts[2].isdigit() else None
            if k is not None:
                return node.name if k == 0 else f"{node.name}:{k}"
        raise ConversionError(f"{where}: cannot resolve the reference '{text}' in the function body")

    for nd in fdef.node_def:
        body[nd.name].inputs = [ref(i) for i in nd.input]
    expanded = _inline(list(body.values()), functions, source, depth + 1)
    results = [ref(fdef.ret[a.name]) for a in sig.output_arg]
    op = "Identity" if len(results) == 1 else "IdentityN"
    expanded.append(RawNode(call.name, op, results, {}, call.device))
    return expanded


# ---------------------------------------------------------------------------
# A Keras LSTM layer's function (tf_keras ``standard_lstm``: api_implements "lstm_<uuid>";
# its operands inputs, init_h, init_c, kernel, recurrent_kernel, bias; its results last_output,
# outputs, new_h, new_c, runtime). TensorFlow's converter fuses each call into one
# UNIDIRECTIONAL_SEQUENCE_LSTM keyed on that attribute, the last output a STRIDED_SLICE of its
# sequence (measured on TF 2.21); so does the frontend, with the TensorFlow-level node
# ``KerasLSTM`` (the legalize stage makes it the TFLite op).
# ---------------------------------------------------------------------------

KERAS_LSTM_IMPLEMENTS = "lstm_"
KERAS_LSTM = "KerasLSTM"  # the frontend's node for the whole layer (qconvert.frontend.tf_ops)
_LSTM_RESULTS = ("last_output", "outputs", "new_h", "new_c", "runtime")


def _implements(fdef: Any) -> str:
    value = fdef.attr.get("api_implements") if "api_implements" in fdef.attr else None
    if value is None or value.WhichOneof("value") != "s":
        return ""
    return value.s.decode(errors="replace")


def _keras_lstm(call: RawNode, fdef: Any, source: str) -> list[RawNode]:
    """``call(x, h0, c0, kernel, recurrent_kernel, bias)`` ⇒ ``seq = KerasLSTM(...)`` (of
    ``ReverseV2(x, [1])`` when the function runs backwards, ``go_backwards``),
    ``last = StridedSlice(seq, [0,-1,0], [0,0,0], [1,1,1])`` (shrinking the time axis), and an
    IdentityN named like the call giving (last, seq, last): results 0..2. The final cell state
    (``return_state=True``'s third value) has no TFLite operand: reading it is refused."""
    sig = fdef.signature
    data_inputs = [i for i in call.inputs if not i.startswith("^")]
    if len(sig.input_arg) != 6 or len(data_inputs) != 6 or len(sig.output_arg) != len(_LSTM_RESULTS):
        raise ConversionError(f"{source}: node '{call.name}' calls Keras LSTM function '{sig.name}' with "
                              f"{len(data_inputs)} operands and {len(sig.output_arg)} results; expected 6 and 5 "
                              "(tf_keras LSTM: inputs, init_h, init_c, kernel, recurrent_kernel, bias)")
    attrs = {k: _attr_value(fdef.attr[k]) for k in ("time_major", "go_backwards") if k in fdef.attr}
    attrs["api_implements"] = _implements(fdef)
    before: list[RawNode] = []
    if attrs.get("go_backwards") and not attrs.get("time_major"):  # the backward half of a Bidirectional layer:
        # the sequence reversed in time first (REVERSE_V2, as TensorFlow writes it); its results stay in
        # the order it ran (Bidirectional reverses a returned sequence back itself)
        axis = RawNode(f"{call.name}/reverse/axis", "Const", [], {"value": np.array([1], np.int32), "dtype": "int32"})
        flipped = RawNode(f"{call.name}/reverse", "ReverseV2", [data_inputs[0], axis.name],
                          {"T": "float32", "Tidx": "int32"}, call.device)
        before = [axis, flipped]
        data_inputs = [flipped.name, *data_inputs[1:]]
        attrs["go_backwards"] = False
    seq = RawNode(f"{call.name}/sequence", KERAS_LSTM, data_inputs, attrs, call.device)
    consts = [RawNode(f"{call.name}/last/{k}", "Const", [], {"value": np.array(v, np.int32), "dtype": "int32"})
              for k, v in (("begin", [0, -1, 0]), ("end", [0, 0, 0]), ("strides", [1, 1, 1]))]
    last = RawNode(f"{call.name}/last", "StridedSlice", [seq.name, *(c.name for c in consts)],
                   {"begin_mask": 5, "end_mask": 5, "ellipsis_mask": 0, "new_axis_mask": 0, "shrink_axis_mask": 2,
                    "T": "float32", "Index": "int32"}, call.device)
    results = RawNode(call.name, "IdentityN", [last.name, seq.name, last.name], {}, call.device)
    return [*before, seq, *consts, last, results]


def _refuse_lstm_state(nodes: list[RawNode], source: str) -> None:
    """A reader of a Keras LSTM's final cell state or of its ``runtime`` result: one line."""
    calls = {n.name for n in nodes if n.op == KERAS_LSTM}
    for n in nodes:
        for ref in n.inputs:
            node, _, port = ref.lstrip("^").partition(":")
            if port in ("3", "4") and f"{node}/sequence" in calls:
                what = "final cell state (return_state=True)" if port == "3" else "runtime marker"
                raise ConversionError(
                    f"{source}: node '{n.name}' reads the {what} of Keras LSTM '{node}'; TensorFlow's fused "
                    f"UNIDIRECTIONAL_SEQUENCE_LSTM gives only the output sequence (and its last step): return "
                    f"the sequence or the last output only, or cut the graph with --outputs")


def parse_graphdef(data: bytes, source: str = "<bytes>") -> list[RawNode]:
    """Decode a binary GraphDef; ``source`` names it in error messages."""
    if not isinstance(data, bytes):
        data = bytes(data)
    return _parse_lifted(memoryview(data), source)


def _parse_lifted(buffer: memoryview, source: str) -> list[RawNode]:
    """Decode a GraphDef whose large constants stay in ``buffer`` (see ``_lift``)."""
    _sniff(bytes(buffer[:64]), source)
    try:
        data, lifted = _lift(buffer)
    except _Wire:  # not a well-formed message at the top level: protobuf says why
        data, lifted = bytes(buffer), {}
    return _decode(_parse_message(data, source, sniff=False), source, buffer, lifted)


# ---------------------------------------------------------------------------
# Large constants read in place. A frozen graph is mostly its weights, the tensor_content
# of its Const nodes; protobuf's parser copies every byte into its arena and reading the
# field copies it again (on ResNet50's 95 MB: two copies of 23,000 page faults each, about
# 140 ms). Before protobuf parses, every tensor_content of _LIFT_BYTES or more is cut out
# of its node at the wire level (node → attr map entry → AttrValue.tensor →
# TensorProto.tensor_content); the constant becomes a view of the file's buffer. Anything
# unexpected on the way (a group, a field that appears twice and would merge, a repeated
# attr name, a length past the end) leaves that node whole for protobuf to judge.
# ---------------------------------------------------------------------------

_LIFT_BYTES = 4096


class _Wire(Exception):
    """Not the wire format this reader lifts from."""


def _varint(mv: memoryview, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Wire
        byte = mv[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(mv: memoryview, start: int, end: int) -> list[tuple[int, int, int, int, int]]:
    """Each field of the message in ``mv[start:end]``: (number, wire type, where the field
    starts, where its value starts, where it ends)."""
    out = []
    pos = start
    while pos < end:
        first = pos
        key = mv[pos]  # one-byte varints read in place (keys of fields 1-15, short lengths): a third of the time
        if key < 0x80:
            pos += 1
        else:
            key, pos = _varint(mv, pos, end)
        number, wire = key >> 3, key & 7
        value = pos
        if wire == 2:
            if pos < end and mv[pos] < 0x80:
                size, value = mv[pos], pos + 1
            else:
                size, value = _varint(mv, pos, end)
            pos = value + size
        elif wire == 0:
            pos = _varint(mv, pos, end)[1]
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:  # groups and invalid wire types
            raise _Wire
        if pos > end or number == 0:
            raise _Wire
        out.append((number, wire, first, value, pos))
    return out


def _only(fields: list[tuple[int, int, int, int, int]], number: int) -> tuple[int, int, int, int, int] | None:
    """Field ``number`` if it appears exactly once, length-delimited."""
    found = [f for f in fields if f[0] == number]
    return found[0] if len(found) == 1 and found[0][1] == 2 else None


def _lift(mv: memoryview) -> tuple[bytes, dict[int, dict[str, tuple[int, int]]]]:
    """The GraphDef without its large tensor contents, and where each one is in ``mv``:
    ``{node index: {attr name: (offset, length)}}``."""
    pieces: list[Any] = []
    lifted: dict[int, dict[str, tuple[int, int]]] = {}
    index = 0
    kept = 0  # the bytes from here to the next lifted node are kept as they are: one slice (not one a node, 0.3 ms)
    for number, wire, first, value, end in _fields(mv, 0, len(mv)):
        if number == 1 and wire == 2:  # GraphDef.node
            if end - value >= _LIFT_BYTES:
                try:
                    node, found = _lift_node(mv, value, end)
                except _Wire:
                    found = {}
                if found:
                    lifted[index] = found
                    pieces += [mv[kept:first], _length_field(1, node)]
                    kept = end
            index += 1
    pieces.append(mv[kept:])
    return b"".join(pieces), lifted


def _lift_node(mv: memoryview, start: int, end: int) -> tuple[bytes, dict[str, tuple[int, int]]]:
    fields = _fields(mv, start, end)
    # NodeDef.attr, map<string, AttrValue>: each entry's own fields, read once
    entries = {f: _fields(mv, f[3], f[4]) for f in fields if f[0] == 5 and f[1] == 2}
    keys = [_only(inner, 1) for inner in entries.values()]
    names = [bytes(mv[k[3]:k[4]]) if k else None for k in keys]
    if None in names or len(set(names)) != len(names):  # the last of two entries would win
        return b"", {}
    parts: list[Any] = []
    found: dict[str, tuple[int, int]] = {}
    for f in fields:
        got = _lift_entry(mv, entries[f]) if f in entries and f[4] - f[3] >= _LIFT_BYTES else None
        if got is None:
            parts.append(mv[f[2]:f[4]])
            continue
        entry, name, where = got
        parts.append(_length_field(5, entry))
        found[name] = where
    return b"".join(parts), found


def _lift_entry(mv: memoryview, entry: list[tuple[int, int, int, int, int]]
                ) -> tuple[bytes, str, tuple[int, int]] | None:
    """A map entry's fields {1: name, 2: AttrValue{8: TensorProto{4: content, ...}}} as bytes
    without the content, the attr's name and where the content is; None if not that shape."""
    key, value = _only(entry, 1), _only(entry, 2)
    if key is None or value is None or len(entry) != 2:
        return None
    attr = _fields(mv, value[3], value[4])
    tensor = _only(attr, 8)
    if tensor is None or len(attr) != 1:  # AttrValue is a oneof: another member would win
        return None
    parts = _fields(mv, tensor[3], tensor[4])
    content = _only(parts, 4)
    if content is None or content[4] - content[3] < _LIFT_BYTES:
        return None
    try:
        name = bytes(mv[key[3]:key[4]]).decode("utf-8")
    except UnicodeDecodeError:
        return None
    rest = b"".join(mv[f[2]:f[4]] for f in parts if f is not content)
    new = bytes(mv[key[2]:key[4]]) + _length_field(2, _length_field(8, rest))
    return new, name, (content[3], content[4] - content[3])


def read_graphdef(path: str | os.PathLike[str]) -> list[RawNode]:
    """Read and decode a frozen GraphDef file, with one-line errors for the usual mistakes."""
    source = os.fspath(path)
    if os.path.isdir(source):
        if os.path.isfile(os.path.join(source, "saved_model.pb")):
            raise ConversionError(
                f"{source}: this is a SavedModel directory, not a frozen GraphDef .pb; "
                "freeze it to a .pb first (SavedModel input is not supported yet)"
            )
    return _parse_lifted(read_buffer(source, "a GraphDef .pb file"), source)
