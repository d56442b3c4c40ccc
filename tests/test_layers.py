"""The package's layers and its one op table, checked on the source (issue 14).

1. import-linter's contracts in pyproject.toml (layers; the runtime never imports the IR,
   the converter or the tools; only ``schema/`` imports LiteRT; only the frontend's
   freezing imports TensorFlow) hold.
2. Nobody branches on op names outside the places that own them: TFLite builtin names are
   compared only in ``ops/`` (the table), ``frontend/`` and ``legalize/`` (the TensorFlow
   legalization map) and ``quant/multipliers.py`` (TFLite's fused-activation enum, whose
   names are RELU, RELU6, ...); TensorFlow op names only in ``frontend/`` and ``legalize/``.
3. Every package says what it owns and what it may import, and each stage is declared in its
   package's ``stage.py``. (The stage table of docs/architecture.md is checked against
   ``STAGES`` in tests/test_docs.py.)
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "qconvert"

TFLITE_ALLOWED = ("ops/", "frontend/", "legalize/", "quant/multipliers.py")
TF_ALLOWED = ("frontend/", "legalize/")


def _tflite_names() -> set[str]:
    from ai_edge_litert import schema_py_generated as schema

    return {k for k in vars(schema.BuiltinOperator) if k.isupper()}


def _tf_names() -> set[str]:
    from qconvert.frontend.tf_ops import TF_OPS

    return set(TF_OPS) | {"FakeQuantWithMinMaxVars", "Shape", "StridedSlice", "Pack", "Prod", "Cast"}


def _compared_strings(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, string) for every string constant compared with ==, !=, in, not in."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare) or not any(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        for side in (node.left, *node.comparators):
            elts = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            found += [(node.lineno, e.value) for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return found


def test_import_contracts_hold() -> None:
    lint = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    if not os.path.exists(lint):
        pytest.skip("import-linter is not installed (it is in the test extra)")
    proc = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_op_names_are_compared_only_where_they_are_owned() -> None:
    pytest.importorskip("ai_edge_litert", reason="LiteRT's schema lists the TFLite builtin names")
    tflite, tf = _tflite_names(), _tf_names()
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, text in _compared_strings(ast.parse(path.read_text())):
            if text in tflite and not rel.startswith(TFLITE_ALLOWED):
                offenders.append(f"{rel}:{line} compares with TFLite op {text!r}: ask the op table (qconvert.ops)")
            if text in tf and not rel.startswith(TF_ALLOWED):
                offenders.append(f"{rel}:{line} compares with TensorFlow op {text!r}: that belongs in the frontend")
    assert not offenders, "\n".join(offenders)


def test_the_check_sees_a_comparison() -> None:
    """The scan above can fail: it finds a comparison written the way passes used to be."""
    tree = ast.parse('if node.op == "CONV_2D" or node.op in ("ADD", "SUB"):\n    pass\n')
    assert [t for _, t in _compared_strings(tree)] == ["CONV_2D", "ADD", "SUB"]


def test_every_package_says_what_it_owns_and_may_import() -> None:
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "May import" in doc, f"{init.relative_to(ROOT)}: its docstring must say what it may import"


def test_each_stage_is_declared_in_its_package() -> None:
    """docs/architecture.md's package column says where a stage is: ``qconvert/<package>/stage.py``."""
    import importlib

    from qconvert.converter.pipeline import DYNAMIC_RANGE_STAGES, STAGES

    for stage in (*STAGES, *DYNAMIC_RANGE_STAGES):
        declared = vars(importlib.import_module(f"qconvert.{stage.package}.stage")).values()
        assert any(v is stage for v in declared), f"stage '{stage.name}' is not in qconvert/{stage.package}/stage.py"

