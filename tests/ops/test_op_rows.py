"""The op table is the one place an op's facts live (issue 33): every other registry is keyed by
its rows, and every row has the pieces its facts call for.

Each ``check_*`` function returns one message per missing piece, naming the op, the piece and the
file it goes in; ``docs/adding-an-op.md`` lists the same pieces as steps, and
``test_adding_an_op_step_by_step`` walks those steps with a fake op, each check failing until its
step is done.

1. Registries keyed by op name hold table rows only: ``qconvert/runtime/kernels.py``'s ``KERNELS``,
   the float kernels' fused activations, the TensorFlow op table's TFLite ops.
2. A row has what its facts need: a float kernel when the float graph holds it (``made``
   FLOAT: constant folding and calibration run it), a recipe when its int8 kernel rescales
   (``rescales``), fixed output parameters for each form of a fixed-output op, an integer
   kernel for each form ``run`` executes (int8; 16x8 when ``form16`` is RUN; uint8, int8 → int16
   and int32 shapes when the row says so), the table function a table recipe reads (``lut``).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Mapping

import numpy as np
import pytest

from qconvert.ops import TABLE, Form16, Made, OpRow, Rule, float_kernels, recipes

RUNTIME = "qconvert/runtime/kernels.py KERNELS"
FLOAT = "qconvert/ops/float_kernels.py"
RECIPES = "qconvert/ops/recipes.py"
TF_TABLE = "qconvert/frontend/tf_ops.py TF_OPS"


def _table(table: Mapping[str, OpRow] | None) -> Mapping[str, OpRow]:
    return TABLE if table is None else table


def _runtime_kernels(kernels: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if kernels is not None:
        return kernels
    from qconvert.runtime.kernels import KERNELS

    return KERNELS


def _tf_ops(tf_ops: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The TensorFlow ops whose TFLite op the frontend makes (not Split/SplitV/Unpack: the importer
    makes one STRIDED_SLICE per output, regrouped once int8)."""
    from qconvert.frontend.tf_ops import MULTI_OUTPUT, TF_OPS

    return {k: v for k, v in (TF_OPS if tf_ops is None else tf_ops).items() if k not in MULTI_OUTPUT}


def _in_float_kernels(fn: Any) -> bool:
    """A float kernel lives in ``float_kernels`` (``binary(...)`` closures included)."""
    return getattr(fn, "__module__", None) == float_kernels.__name__


def check_registries_are_rows(table: Mapping[str, OpRow] | None = None, kernels: Mapping[str, Any] | None = None,
                              tf_ops: Mapping[str, Any] | None = None) -> list[str]:
    """Every integer kernel, fused float activation and TensorFlow op's TFLite op is a table row."""
    t = _table(table)
    problems = [f"{op}: an integer kernel in {RUNTIME} for an op with no row in qconvert/ops/table.py"
                for op in _runtime_kernels(kernels) if op not in t]
    problems += [f"{act}: a fused activation in {FLOAT} ACTIVATION_FUNCTIONS with no row in qconvert/ops/table.py"
                 for act in float_kernels.ACTIVATION_FUNCTIONS if act not in t]
    for tf_name, tf_op in _tf_ops(tf_ops).items():
        if tf_op.tfl is None:
            continue
        r = t.get(tf_op.tfl)
        if r is None:
            problems.append(f"{tf_op.tfl}: {TF_TABLE}['{tf_name}'] makes it, and it has no row in qconvert/ops/table.py")
        elif r.made is not Made.FLOAT:
            problems.append(f"{tf_op.tfl}: {TF_TABLE}['{tf_name}'] makes it in the float graph, its row says made="
                            f"{r.made.name}")
    return problems


def check_rows_have_their_pieces(table: Mapping[str, OpRow] | None = None,
                                 kernels: Mapping[str, Any] | None = None) -> list[str]:
    """Each row has the kernels, recipe and parameters its facts call for."""
    runtime = _runtime_kernels(kernels)
    problems: list[str] = []
    for name, r in _table(table).items():
        def need(ok: bool, piece: str) -> None:
            if not ok:
                problems.append(f"{name}: {piece}")

        need(r.name == name, f"the row is filed under '{name}' but named '{r.name}'")
        if r.made is Made.FLOAT and r.rule is not Rule.QUANT:
            need(r.kernel is not None or r.reshapes,
                 f"no float kernel (a function in {FLOAT}, the row's kernel=): constant folding and calibration run it")
        if r.kernel is not None:
            need(_in_float_kernels(r.kernel), f"its float kernel {r.kernel!r} is not in {FLOAT}")
        if r.rescales:
            need(r.requant is not None,
                 f"no requant recipe (a function in {RECIPES}, the row's requant=): its int8 kernel rescales")
        if r.requant is recipes.lookup_table:
            need(r.lut is not None, "no lut= (the float32 function in qconvert/quant/multipliers.py whose table "
                                    "its kernel builds)")
        if r.rule is Rule.FIXED:
            need(r.fixed is not None, "no fixed= output parameters (its rule is FIXED)")
            need(r.form16 is Form16.NONE or r.fixed16 is not None, "no fixed16= output parameters for its 16x8 form")
        # every op of a file has an integer kernel but FAKE_QUANT (never in one) and DEQUANTIZE (to float32 at
        # a model output: the float boundary); the kernel runs each form the row claims
        boundary_only = r.rule is Rule.QUANT and r.requant is None
        if not r.dropped_after_legalize and not boundary_only:
            forms = ["int8"] + [form for form, claimed in (("16x8", r.form16 is Form16.RUN), ("uint8", r.uint8),
                                                          ("int8 → int16", r.int8_to_int16),
                                                          ("int32 shapes", r.int32_shapes)) if claimed]
            need(name in runtime, f"no integer kernel in {RUNTIME} (`qconvert run` executes its forms: "
                                  f"{', '.join(forms)})")
        if r.int8_to_int16:
            need(r.form16 is Form16.RUN, "int8_to_int16 needs the 16x8 kernel (form16=Form16.RUN)")
    return problems


def test_registries_are_table_rows() -> None:
    problems = check_registries_are_rows()
    assert not problems, "\n".join(problems)


def test_every_row_has_what_its_facts_need() -> None:
    problems = check_rows_have_their_pieces()
    assert not problems, "\n".join(problems)


def test_the_facts_live_in_the_rows() -> None:
    """What used to be written apart from the table now follows from it."""
    from qconvert.tools.targets import WEIGHTED

    assert WEIGHTED == tuple(sorted(n for n, r in TABLE.items() if r.rule is Rule.WEIGHTED))
    assert set(WEIGHTED) == {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV"}
    import qconvert.ops.table as table_module
    import qconvert.runtime.kernels as runtime_kernels

    for gone in ("INT16_KERNELS", "UINT8_KERNELS", "WIDENING_KERNELS"):
        assert not hasattr(runtime_kernels, gone), gone
    assert not hasattr(table_module, "_INT8_TABLES")
    # the ops TensorFlow 2.21 writes no usable 16x8 form for (measured: tests/e2e/test_int16.py)
    assert {n for n, r in TABLE.items() if r.form16 is Form16.NONE and r.made is Made.FLOAT} == {
        "SUM", "RELU_N1_TO_1", "PRELU", "HARD_SWISH", "SQUARED_DIFFERENCE", "SPACE_TO_DEPTH", "DEPTH_TO_SPACE",
        "ARG_MAX", "UNIDIRECTIONAL_SEQUENCE_LSTM", "DIV", "SQRT",  # the LSTM, DIV, SQRT: "Quantization to
        # 16x8-bit not yet supported"
        "PADV2"}  # a float32 fill with int16 activations, which LiteRT refuses


def _operand(name: str, scale: float, zp: int, dtype: str) -> Any:
    from qconvert.quant.requant import operand

    return operand(name, (scale,), (zp,), (1, 4), dtype)


def test_a_16x8_record_only_for_a_form_run_executes() -> None:
    """``form16`` decides the int16 record: RUN gets its recipe, WRITTEN (RSQRT's int8 table would
    mean nothing to the int16 kernel) and NONE none; the int8 record is unchanged."""
    from qconvert.ops import requant

    x16, y16 = _operand("x", 2.0**-12, 0, "int16"), _operand("y", 2.0**-11, 0, "int16")
    x8, y8 = _operand("x", 0.02, 3, "int8"), _operand("y", 0.05, -128, "int8")
    assert TABLE["RELU"].form16 is Form16.RUN and requant("RELU", [x16], y16, {}).pairs
    assert TABLE["RSQRT"].form16 is Form16.WRITTEN and requant("RSQRT", [x16], y16, {}) is None
    assert requant("RSQRT", [x8], y8, {}).table is not None
    assert TABLE["PRELU"].form16 is Form16.NONE
    assert requant("SQUARED_DIFFERENCE", [x16, x16], y16, {}) is None
    assert requant("SQUARED_DIFFERENCE", [x8, x8], y8, {}).left_shift == 7


# ---------------------------------------------------------------------------
# docs/adding-an-op.md, walked with a fake op: each step's check fails until the step is done


def _fake_float_kernel(node: Any, x: np.ndarray) -> np.ndarray:
    return x


def _fake_recipe(row: Any, ins: Any, out: Any, options: Any) -> dict:
    return {"pairs": [(1 << 30, 1)]}


def _fake_integer_kernel(call: Any) -> np.ndarray:
    return call.inputs[0]


def _missing(name: str) -> list[str]:
    return [p for p in check_registries_are_rows() + check_rows_have_their_pieces() if p.startswith(f"{name}:")]


def test_adding_an_op_step_by_step(monkeypatch: pytest.MonkeyPatch) -> None:
    from qconvert.frontend import tf_ops
    from qconvert.runtime import kernels as runtime_kernels

    op = "FAKE_ELEMENTWISE"
    # step 0: the TensorFlow op reaches the table with no row: the registry check names it
    monkeypatch.setitem(tf_ops.TF_OPS, "FakeElementwise", SimpleNamespace(tfl=op))
    assert any("has no row in qconvert/ops/table.py" in p for p in _missing(op)), _missing(op)
    # step 1: the row (a rescaling op, made in the float graph); nothing else yet
    monkeypatch.setitem(TABLE, op, OpRow(op, Rule.FREE, 1))
    missing = _missing(op)
    assert any("no float kernel" in p and FLOAT in p for p in missing), missing
    assert any("no requant recipe" in p and RECIPES in p for p in missing), missing
    assert any("no integer kernel" in p and RUNTIME in p for p in missing), missing
    # step 2: its float kernel
    monkeypatch.setitem(TABLE, op, OpRow(op, Rule.FREE, 1, kernel=_fake_float_kernel))
    assert any(f"is not in {FLOAT}" in p for p in _missing(op)), "a kernel outside float_kernels.py is refused"
    monkeypatch.setattr(_fake_float_kernel, "__module__", float_kernels.__name__)
    missing = _missing(op)
    assert not any("float kernel" in p for p in missing) and len(missing) == 2, missing
    assert any("executes its forms: int8, 16x8)" in p for p in missing), "form16 is RUN unless the row says"
    # step 3: its recipe
    monkeypatch.setitem(TABLE, op, OpRow(op, Rule.FREE, 1, kernel=_fake_float_kernel, requant=_fake_recipe))
    missing = _missing(op)
    assert len(missing) == 1 and "no integer kernel" in missing[0], missing
    # step 4: its integer kernel: done
    monkeypatch.setitem(runtime_kernels.KERNELS, op, _fake_integer_kernel)
    assert _missing(op) == []
    # a form the row claims needs its kernel too; a form it does not claim needs nothing
    monkeypatch.delitem(runtime_kernels.KERNELS, op)
    monkeypatch.setitem(TABLE, op, OpRow(op, Rule.FREE, 1, kernel=_fake_float_kernel, requant=_fake_recipe,
                                         uint8=True))
    assert any("no integer kernel" in p and "int8, 16x8, uint8" in p for p in _missing(op)), _missing(op)
    # an integer kernel without a row is refused
    monkeypatch.delitem(TABLE, op)
    monkeypatch.delitem(tf_ops.TF_OPS, "FakeElementwise")
    monkeypatch.setitem(runtime_kernels.KERNELS, op, _fake_integer_kernel)
    assert [p for p in _missing(op) if "integer kernel" in p and "no row" in p], _missing(op)


def test_the_document_names_every_piece_the_checks_ask_for() -> None:
    """docs/adding-an-op.md is the list the checks enforce: every file a check message sends
    you to is a step there."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "adding-an-op.md").read_text()
    for where in ("qconvert/ops/table.py", FLOAT, RECIPES, "qconvert/runtime/kernels.py", "KERNELS",
                  "qconvert/frontend/tf_ops.py", "TF_OPS", "tests/e2e/test_layer_ops.py", "tests/ops/test_op_rows.py",
                  "form16", "made", "uint8", "lut"):
        assert where in doc, f"docs/adding-an-op.md does not mention {where}"
