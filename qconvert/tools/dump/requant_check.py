"""qconvert's requantization records in a file (the ``qconvert_requant`` metadata), decoded and
checked against what TFLite's Prepare step computes from the file's float32 scales.

A record that disagrees is flagged (text: ``!! REQUANT MISMATCH``; JSON: ``"requant_ok":
false``). The expected values come from the very function the converter stores records with
(``qconvert.ops.requant``), so a file is checked against the same arithmetic that wrote it;
that arithmetic is checked against TensorFlow's files in the tests.

May import: ``qconvert.ops``, ``qconvert.quant``, ``qconvert.schema.requant_metadata``.
"""

from __future__ import annotations

from typing import Any

from qconvert.ops import requant
from qconvert.quant.requant import Operand, Requant, operand
from qconvert.schema.requant_metadata import METADATA_NAME, decode


def read_records(model: Any) -> tuple[dict[tuple[int, int], Any], list[str], dict[str, Any] | None]:
    """({(subgraph, op index): record}, problems of the metadata as a whole, the metadata
    entry's summary ``{"format_version", "records", "error"}`` or None when the file has none)."""
    records: dict[tuple[int, int], Any] = {}
    problems: list[str] = []
    if METADATA_NAME not in model.metadata:
        return records, problems, None
    try:
        recs = decode(model.metadata[METADATA_NAME])
        raw = bytes(model.metadata[METADATA_NAME])
        info = {"format_version": int.from_bytes(raw[4:6], "little"), "records": len(recs), "error": None}
        for rec in recs:
            key = (rec.subgraph_index, rec.op_index)
            if not (rec.subgraph_index < len(model.subgraphs)
                    and rec.op_index < len(model.subgraphs[rec.subgraph_index].operators)):
                problems.append(f"record for subgraph {rec.subgraph_index} operator {rec.op_index} "
                                f"({rec.builtin}): no such operator")
            else:
                records[key] = rec
    except ValueError as exc:
        info = {"format_version": None, "records": 0, "error": str(exc)}
        problems.append(f"{METADATA_NAME} is corrupt: {exc}")
    return records, problems, info


def check_record(sg: Any, op: Any, rec: Any) -> dict[str, Any]:
    """The record's fields, ``expected`` (Prepare's, or None when they cannot be computed) and
    ``problems`` (empty when they agree)."""
    stored = rec.fields()
    problems: list[str] = []
    if rec.builtin != op.builtin:
        problems.append(f"record is for {rec.builtin}, the operator is {op.builtin}")
    expected = None
    try:
        expected = _expected_requant(sg, op)
    except (ValueError, ArithmeticError, IndexError, KeyError, TypeError) as exc:  # a damaged file
        problems.append(f"cannot recompute from the scales: {type(exc).__name__}: {exc}")
    if expected is not None:
        problems += _differences(stored, expected)
    return {**stored, "expected": expected, "problems": problems}


def _differences(stored: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    problems = []
    st, et = stored["table"], expected["table"]
    if (st is None) != (et is None):
        problems.append("a lookup table, expected none" if et is None else "no lookup table, expected one")
    elif st is not None and list(st) != list(et):
        bad = [k for k in range(min(len(st), len(et))) if st[k] != et[k]]
        k = bad[0] if bad else min(len(st), len(et))
        problems.append(f"{len(bad) or 'its'} lookup table entries differ; entry for x={k if k < 128 else k - 256}")
    sw, ew = stored["wide"], expected["wide"]
    if sw is not None and sw != ew:  # optional: files may carry only the 31-bit pairs
        problems.append("wide FULLY_CONNECTED factors differ from double(in) * double(w) / double(out)"
                        if ew is not None else "wide factors on an op that has none")
    for key in ("per_channel", "act_min", "act_max", "left_shift"):
        if stored[key] != expected[key]:
            problems.append(f"{key} {stored[key]}, expected {expected[key]}")
    sm, em = stored["multipliers"], expected["multipliers"]
    if len(sm) != len(em):
        problems.append(f"{len(sm)} multiplier/shift pairs, expected {len(em)}")
    else:
        bad = [k for k in range(len(sm))
               if (sm[k], stored["shifts"][k]) != (em[k], expected["shifts"][k])]
        if bad:
            k = bad[0]
            problems.append(f"{len(bad)} of {len(sm)} pairs differ; pair {k}: "
                            f"({sm[k]}, {stored['shifts'][k]}), expected ({em[k]}, {expected['shifts'][k]})")
    return problems


def _operand(sg: Any, index: int) -> Operand | None:
    if index < 0:
        return None
    if index >= len(sg.tensors):
        raise ValueError(f"tensor {index} is missing")
    t = sg.tensors[index]
    return operand(t.name, t.scale or (), t.zero_point or (), t.shape, t.dtype)


def _expected_requant(sg: Any, op: Any) -> dict[str, Any]:
    """What TFLite's Prepare computes for ``op`` from the file's float32 scales: the very
    function the converter stores records with (``qconvert.ops.requant``).
    ValueError when it cannot be computed."""
    if not op.outputs:
        raise ValueError("output 0 is missing")
    # an LSTM's intermediates follow its inputs (their parameters feed its Prepare)
    rec = requant(op.builtin, [_operand(sg, i) for i in [*op.inputs, *op.intermediates]], _operand(sg, op.outputs[0]),
                  op.options)
    return (rec or Requant(0, op.builtin, -128, 127, 0)).fields()

