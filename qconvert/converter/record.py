"""The report record of one conversion (docs/formats.md, ``qconvert/tools/report_schema.json``):
what ``convert --report``, ``batch --report`` and ``Result.record`` hold."""

from __future__ import annotations

import re
from typing import Any, Sequence

from qconvert.errors import ConversionError, UsageError

_NODE_RE = re.compile(r"node '([^']+)'")


def _io_records(info: Any, indices: Sequence[int]) -> list[dict]:
    out = []
    for i in indices:
        t = info.tensors[i]
        out.append({"name": t.name, "dtype": t.dtype, "shape": list(t.shape),
                    "scale": float(t.scale[0]) if t.scale else None,
                    "zero_point": int(t.zero_point[0]) if t.zero_point else None})
    return out


def build_record(model: str, output: str, data: bytes | None = None, notes: Sequence[str] = (),
                 error: BaseException | str | None = None, seconds: float = 0.0) -> dict:
    """One report record; with ``error``, the record of a failed conversion (the node it
    names, if any, in ``node``). The file is read back (``data``) for its ops and I/O."""
    rec: dict[str, Any] = {"model": str(model), "output": str(output), "status": "ok" if error is None else "failed",
                           "error": None, "node": None, "inputs": [], "outputs": [], "op_histogram": {},
                           "float_ops": 0, "bytes": None, "sha256": None, "seconds": round(seconds, 3),
                           "notes": list(notes)}
    if error is not None:
        msg = str(error) if isinstance(error, (str, ConversionError, UsageError)) else f"{type(error).__name__}: {error}"
        rec["error"] = msg
        m = _NODE_RE.search(msg)
        rec["node"] = m.group(1) if m else None
        return rec
    import hashlib  # here: OpenSSL's 2.5 ms at start-up, for a record only

    from qconvert.schema.reader import read_model  # the flatbuffer reader: only when a record is asked for

    info = read_model(data)
    hist: dict[str, int] = {}
    float_ops = 0
    sg = info.subgraphs[0]
    for op in info.operators:
        hist[op.builtin] = hist.get(op.builtin, 0) + 1
        if any(0 <= i < len(info.tensors) and info.tensors[i].dtype == "float32" for i in [*op.inputs, *op.outputs]) \
                and not sg.float_boundary(op):  # float I/O (--input-type float32) is not a float op left
            float_ops += 1
    rec.update(inputs=_io_records(info, info.inputs), outputs=_io_records(info, info.outputs),
               op_histogram=dict(sorted(hist.items())), float_ops=float_ops, bytes=len(data),
               sha256=hashlib.sha256(data).hexdigest())
    return rec
