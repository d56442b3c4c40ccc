"""Precomputed requantization parameters, stored in the model metadata entry ``qconvert_requant``.

TFLite kernels turn float scales into integer multipliers and shifts in their
Prepare step. qconvert does that work at conversion time and writes the result
here, so a runtime without floating point can use the file as it is.

The layout (header, records, flags, what each op's pairs are, int16 records, what a decoder
must reject) is described once, in docs/formats.md ("The requantization metadata"); this
module writes and reads exactly that (tests/schema/test_schema.py reads the offsets and types
from that description and checks them against ``encode``).
"""

from __future__ import annotations

import struct
from typing import Iterable, Sequence

import numpy as np

from qconvert.quant.requant import Requant
from qconvert.schema.layout import ENUMS

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

_CODES = dict(ENUMS["BuiltinOperator"])
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
