"""Precomputed requantization parameters, stored in the model metadata entry ``qconvert_requant``.

TFLite kernels turn float scales into integer multipliers and shifts in their
Prepare step. qconvert does that work at conversion time and writes the result
here, so a runtime without floating point can use the file as it is.

Layout (version 2; version 1 is the same without the table flag and without
records for standalone RELU*, SOFTMAX, LOGISTIC and TANH; version 3 is version 2 with
records for int16 (16x8) operators, which follow the int16 kernels: see the end). All
integers are little-endian; every field is naturally
aligned when the entry starts on a 4-byte boundary::

    header   (12 bytes)
      0  4  magic           b"QCRQ"
      4  u16 format_version  2
      6  u16 reserved        0
      8  u32 record_count
    record   (28 bytes + 8 * count), record_count times
      0  u32 subgraph_index
      4  u32 operator_index   index into the subgraph's operators
      8  u16 builtin_code     BuiltinOperator code of that operator (a cross-check)
     10  u16 flags            bit 0: per-channel; bit 1: table; bit 2: wide;
                              bits 3..15 reserved, 0
     12  i32 activation_min   output clamp in the output's integer domain,
     16  i32 activation_max   fused activation included
     20  i32 left_shift       ADD/SUB: the input left shift (20 for int8); else 0
     24  u32 count            number of 8-byte slots that follow
     28  count x (i32 multiplier, i32 shift)     (no flag)
         count/2 x (i32 multiplier, i32 shift),
         then count/2 x u64 binary64 bits       (wide flag)
         8 * count int8 table entries            (table flag)

A pair follows TFLite's QuantizeMultiplier: ``real ≈ multiplier * 2**(shift - 31)``
with ``multiplier`` in [2**30, 2**31) (0 when the scale is zero or too small
to represent), a positive ``shift`` meaning a left shift. What the pairs of a record are:

    CONV_2D, DEPTHWISE_CONV_2D  one per output channel (per-channel flag set),
                                in_scale * w_scale[c] / out_scale
    FULLY_CONNECTED             one (per-tensor weights) or one per output channel; wide:
                                each pair also has the IEEE-754 binary64 bits of
                                double(in) * double(w) / double(out), the factor LiteRT's
                                reference kernel multiplies the accumulator by in double
                                precision (an integer runtime can reproduce it exactly)
    ADD, SUB                    three: input1, input2, output, with left_shift 20
                                (input_i: in_i_scale / (2 * max_in_scale),
                                 output: 2 * max_in_scale / (2**20 * out_scale))
    MUL                         one: in1_scale * in2_scale / out_scale
    QUANTIZE (int8 → int8)      one: in_scale / out_scale
    MEAN                        one: in_scale / out_scale (the kernel folds 1/n in)
    RELU, RELU6, RELU_N1_TO_1   one: float32(in_scale / out_scale); the clamp is the
                                activation's range in the output's domain
    SOFTMAX                     one: (input_multiplier, input_left_shift) of
                                beta * in_scale * 2**26 (reference fixed-point kernel;
                                diff_min = -floor(31 * 2**26 / 2**shift))
    LOGISTIC, TANH              table flag, count 32: the 256 int8 outputs of the
                                reference kernel's lookup table, indexed by uint8(x)
    other ops with a clamp      none (count 0), only activation_min/max

int16 operators (16x8 files, format version 3; the operator's output tensor is int16). The
clamp is in the int16 domain; the pairs are the int8 ones except:

    ADD, SUB                    left_shift 15 (pot_scale_int16 false), the three pairs
                                computed with it
    SOFTMAX                     one: QuantizeMultiplier(in_scale * beta / (10 / 65535))
    LOGISTIC, TANH              one: (input_multiplier, input_left_shift) of the int16
                                kernel's Prepare (multiplier 0: a power-of-two scale); no table
    CONV_2D, DEPTHWISE_CONV_2D, the same pairs; the int16 kernels apply them to an int64
    TRANSPOSE_CONV              accumulator with the multiplier cut to 16 bits
    FULLY_CONNECTED             as int8, wide factors included (LiteRT 2.3's reference kernel
                                rounds in double for int16 inputs too; measured)
    RSQRT, GELU                 no record (`qconvert run` has no int16 kernel for them)

Records appear in operator order; a decoder must reject an unknown magic,
format version, non-zero reserved bits, or a length that does not match.
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

import numpy as np
from ai_edge_litert.schema_py_generated import BuiltinOperator

from qconvert.quant.requant import Requant

METADATA_NAME = "qconvert_requant"
MAGIC = b"QCRQ"
FORMAT_VERSION = 2  # int8 files; 3 for files with int16 (16x8) operators
INT16_FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
FLAG_PER_CHANNEL = 0x0001
FLAG_TABLE = 0x0002
FLAG_WIDE = 0x0004
TABLE_SIZE = 256
ADD_SUB_LEFT_SHIFT = 20  # tensorflow/lite/kernels/add.cc: left_shift for 8-bit inputs

_HEADER = struct.Struct("<4sHHI")
_RECORD = struct.Struct("<IIHHiiiI")
_PAIR = np.dtype("<i4")
_INT32 = (-(2**31), 2**31 - 1)
_UINT32_MAX = 2**32 - 1

_CODES = {k: v for k, v in vars(BuiltinOperator).items() if not k.startswith("_")}
_NAMES = {v: k for k, v in _CODES.items()}


RequantRecord = Requant  # the record as this module encodes and decodes it


def _check_int(name: str, value: int, lo: int, hi: int, record: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"requant record {record}: {name} must be an integer, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"requant record {record}: {name}={value} outside [{lo}, {hi}]")
    return int(value)


def _pairs_array(pairs: Sequence[tuple[int, int]] | np.ndarray, record: int) -> np.ndarray:
    arr = np.asarray(pairs, dtype=np.int64)
    if arr.size == 0:
        return np.zeros((0, 2), dtype=_PAIR)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ValueError(f"requant record {record}: pairs must be (multiplier, shift) pairs")
    if arr.min() < _INT32[0] or arr.max() > _INT32[1]:
        raise ValueError(f"requant record {record}: a multiplier or shift does not fit int32")
    return arr.astype(_PAIR)


def encode(records: Iterable[RequantRecord], int16: bool = False) -> bytes:
    """Records → the ``qconvert_requant`` bytes (format version 3 with ``int16``: a 16x8
    file's records, which a version-2 reader would take for int8 ones). ValueError on
    out-of-range fields."""
    chunks: list[bytes] = []
    seen: set[tuple[int, int]] = set()
    count = 0
    for k, r in enumerate(records):
        if r.builtin not in _CODES:
            raise ValueError(f"requant record {k}: '{r.builtin}' is not a TFLite builtin")
        key = (
            _check_int("subgraph_index", r.subgraph_index, 0, _UINT32_MAX, k),
            _check_int("op_index", r.op_index, 0, _UINT32_MAX, k),
        )
        if key in seen:
            raise ValueError(f"requant record {k}: a second record for operator {key[1]}")
        seen.add(key)
        act_min = _check_int("act_min", r.act_min, *_INT32, k)
        act_max = _check_int("act_max", r.act_max, *_INT32, k)
        if act_min > act_max:
            raise ValueError(f"requant record {k}: act_min {act_min} > act_max {act_max}")
        flags = FLAG_PER_CHANNEL if r.per_channel else 0
        if r.table is not None:
            if r.pairs:
                raise ValueError(f"requant record {k}: a table record has no multiplier pairs")
            table = np.asarray(r.table, dtype=np.int64)
            if table.shape != (TABLE_SIZE,) or table.min() < -128 or table.max() > 127:
                raise ValueError(f"requant record {k}: a table must be {TABLE_SIZE} int8 values")
            payload = table.astype(np.int8).tobytes()
            flags |= FLAG_TABLE
        else:
            payload = _pairs_array(r.pairs, k).tobytes()
            if r.wide is not None:
                if len(r.wide) != len(r.pairs) or any(not 0 <= int(w) < 2**64 for w in r.wide):
                    raise ValueError(f"requant record {k}: wide needs one 64-bit pattern per pair")
                payload += np.asarray([int(w) for w in r.wide], dtype="<u8").tobytes()
                flags |= FLAG_WIDE
        chunks.append(
            _RECORD.pack(
                *key, _CODES[r.builtin], flags, act_min, act_max,
                _check_int("left_shift", r.left_shift, *_INT32, k), len(payload) // 8,
            )
        )
        chunks.append(payload)
        count += 1
    version = INT16_FORMAT_VERSION if int16 else FORMAT_VERSION
    return _HEADER.pack(MAGIC, version, 0, count) + b"".join(chunks)


def decode(data: bytes) -> list[RequantRecord]:
    """The ``qconvert_requant`` bytes → records. Strict: ValueError on any inconsistency."""
    data = bytes(data)
    if len(data) < _HEADER.size:
        raise ValueError(f"{METADATA_NAME}: {len(data)} bytes, shorter than the header")
    magic, version, reserved, count = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise ValueError(f"{METADATA_NAME}: bad magic {magic!r}, expected {MAGIC!r}")
    if version not in READABLE_VERSIONS:
        raise ValueError(
            f"{METADATA_NAME}: format version {version}, this reader knows "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    known_flags = FLAG_PER_CHANNEL | (FLAG_TABLE | FLAG_WIDE if version >= 2 else 0)
    if reserved != 0:
        raise ValueError(f"{METADATA_NAME}: reserved header field is {reserved}, expected 0")
    records = []
    pos = _HEADER.size
    for k in range(count):
        if pos + _RECORD.size > len(data):
            raise ValueError(f"{METADATA_NAME}: truncated at record {k} of {count}")
        sub, op, code, flags, act_min, act_max, left_shift, n = _RECORD.unpack_from(data, pos)
        pos += _RECORD.size
        if flags & ~known_flags:
            raise ValueError(f"{METADATA_NAME}: record {k} has reserved flag bits {flags:#06x}")
        if code not in _NAMES:
            raise ValueError(f"{METADATA_NAME}: record {k} has unknown builtin code {code}")
        end = pos + n * 2 * _PAIR.itemsize
        if end > len(data):
            raise ValueError(f"{METADATA_NAME}: record {k} declares {n} pairs past the end")
        table = wide = None
        pairs = np.zeros((0, 2), dtype=_PAIR)
        if flags & FLAG_TABLE and flags & FLAG_WIDE:
            raise ValueError(f"{METADATA_NAME}: record {k} has both the table and the wide flag")
        if flags & FLAG_WIDE:
            if n % 2:
                raise ValueError(f"{METADATA_NAME}: record {k} is wide with an odd slot count {n}")
            pairs = np.frombuffer(data, dtype=_PAIR, count=n, offset=pos).reshape(n // 2, 2)
            wide = np.frombuffer(data, dtype="<u8", count=n // 2, offset=pos + 4 * n).tolist()
        elif flags & FLAG_TABLE:
            if 8 * n != TABLE_SIZE:
                raise ValueError(f"{METADATA_NAME}: record {k} has a table of {8 * n} entries, not {TABLE_SIZE}")
            table = np.frombuffer(data, dtype=np.int8, count=TABLE_SIZE, offset=pos).tolist()
        else:
            pairs = np.frombuffer(data, dtype=_PAIR, count=2 * n, offset=pos).reshape(n, 2)
        pos = end
        records.append(
            RequantRecord(
                op_index=op,
                builtin=_NAMES[code],
                act_min=act_min,
                act_max=act_max,
                left_shift=left_shift,
                pairs=[(m, s) for m, s in pairs.tolist()],
                per_channel=bool(flags & FLAG_PER_CHANNEL),
                subgraph_index=sub,
                table=table,
                wide=wide,
            )
        )
    if pos != len(data):
        extra = len(data) - pos
        raise ValueError(f"{METADATA_NAME}: {extra} unexpected bytes after {count} records")
    return records
