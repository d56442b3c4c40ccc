"""Structure figures of the qconvert package, by reading its source (nothing is run).

    python bench/layout_metrics.py [--root DIR] [--json]

Prints, per package (a directory, or a top-level module) and in total:
- lines of Python;
- imports inside function bodies (an ``import`` under a ``def``);
- op-name comparisons: ``==``/``!=``/``in``/``not in`` with a string constant (or a
  tuple/list/set of them) that names a TFLite builtin (from LiteRT's schema) or a
  TensorFlow op name; and op-keyed tables: dict literals with two or more such keys.

Issue 14 asks for these before and after the redesign; ``--root`` reads another checkout
(e.g. a ``git worktree`` of the commit before).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# TensorFlow op names qconvert has read or may read (GraphDef op types). Shape-arithmetic
# ops are included: comparing a node's op with one of them is still branching on op names.
TF_OP_NAMES = {
    "Placeholder", "PlaceholderWithDefault", "Const", "Identity", "IdentityN", "StopGradient", "Snapshot", "NoOp",
    "Conv2D", "DepthwiseConv2dNative", "MatMul", "BiasAdd", "Add", "AddV2", "Sub", "Mul", "RealDiv", "Neg",
    "FusedBatchNorm", "FusedBatchNormV2", "FusedBatchNormV3", "Relu", "Relu6", "LeakyRelu", "Maximum",
    "Minimum", "AvgPool", "MaxPool", "Mean", "Max", "Sum", "Reshape", "Transpose", "SpaceToBatchND",
    "BatchToSpaceND", "Squeeze", "ExpandDims", "ConcatV2", "Pad", "Softmax", "Sigmoid", "Tanh", "Rsqrt",
    "Sqrt", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel",
    "Shape", "StridedSlice", "Pack", "Unpack", "Prod", "Cast", "Fill", "Range", "Slice", "Split", "SplitV",
    "GatherV2", "ResizeBilinear", "ResizeNearestNeighbor", "Conv2DBackpropInput",
}


def builtin_names() -> set[str]:
    try:
        from ai_edge_litert import schema_py_generated as s
    except ImportError:  # a fixed list is enough for the ops qconvert knows
        return {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "MEAN", "RELU", "RELU6",
                "RELU_N1_TO_1", "MAXIMUM", "MINIMUM", "AVERAGE_POOL_2D", "MAX_POOL_2D", "CONCATENATION",
                "RESHAPE", "SQUEEZE", "PAD", "SOFTMAX", "LOGISTIC", "TANH", "QUANTIZE", "DEQUANTIZE",
                "FAKE_QUANT", "TRANSPOSE", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND"}
    return {k for k in vars(s.BuiltinOperator) if k.isupper()}


def _op_strings(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value in names
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_op_strings(e, names) for e in node.elts)
    return False


def scan_file(path: Path, names: set[str]) -> dict[str, int]:
    source = path.read_text()
    tree = ast.parse(source)
    counts = Counter(lines=len(source.splitlines()))
    parents: dict[ast.AST, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            parents[child] = parent
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            p = parents.get(node)
            while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)):
                p = parents.get(p)
            counts["imports_in_functions" if p is not None else "imports_module_level"] += 1
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) and any(
                    _op_strings(s, names) for s in sides):
                counts["op_name_comparisons"] += 1
        elif isinstance(node, ast.Dict):
            keyed = sum(1 for k in node.keys if k is not None and _op_strings(k, names))
            if keyed >= 2:
                counts["op_keyed_tables"] += 1
    return dict(counts)


def measure(root: Path) -> dict[str, dict[str, int]]:
    names = builtin_names() | TF_OP_NAMES
    pkg = root / "qconvert"
    per: dict[str, Counter[str]] = {}
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg)
        key = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        per.setdefault(key, Counter()).update(scan_file(path, names))
        per.setdefault("files:" + str(rel), Counter()).update(scan_file(path, names))
    return {k: dict(v) for k, v in per.items()}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(ROOT), help="checkout to read (default: this one)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--files", action="store_true", help="also one row per file")
    args = p.parse_args(argv)
    per = measure(Path(args.root))
    if args.json:
        print(json.dumps(per, indent=1, sort_keys=True))
        return 0
    cols = ("lines", "imports_module_level", "imports_in_functions", "op_name_comparisons", "op_keyed_tables")
    print(f"{'package':40s} " + " ".join(f"{c[:18]:>18s}" for c in cols))
    total: Counter[str] = Counter()
    for key in sorted(per):
        if key.startswith("files:"):
            continue
        total.update(per[key])
    rows = [k for k in sorted(per) if not k.startswith("files:") or args.files]
    for key in rows:
        print(f"{key:40s} " + " ".join(f"{per[key].get(c, 0):18d}" for c in cols))
    print(f"{'TOTAL':40s} " + " ".join(f"{total.get(c, 0):18d}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
