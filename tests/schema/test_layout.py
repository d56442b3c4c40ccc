"""schema.layout (the schema facts the writer packs options tables with) against the installed
``schema_py_generated`` it is generated from: the checked-in file is what the generator writes now
(a LiteRT upgrade that changes the schema fails here: regenerate), every options table the writer
can emit packs to the object API's bytes, and converting does not load the generated module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ai_edge_litert import schema_py_generated as schema

from qconvert.ir import Graph, Node, QuantParams, Tensor
from qconvert.schema import gen_layout, layout, writer
from qconvert.schema.codes import camel_to_snake

from test_builder import _object_api  # noqa: E402 (this directory is on sys.path under pytest)

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_layout_is_what_the_installed_schema_gives():
    assert (ROOT / "qconvert/schema/layout.py").read_text() == gen_layout.layout(), (
        "the installed ai_edge_litert schema changed: python -m qconvert.schema.gen_layout > qconvert/schema/layout.py")


def test_every_options_union_member_has_its_table():
    for union in ("BuiltinOptions", "BuiltinOptions2"):
        members = {k for k, v in layout.ENUMS[union].items() if v}
        assert members <= set(layout.OPTIONS)
        for name in members:
            assert [f[0] for f in layout.OPTIONS[name][1]] == list(vars(getattr(schema, name + "T")()))


def _non_default(default):  # type: ignore[no-untyped-def]
    if isinstance(default, bool):
        return not default
    return default + 3 if isinstance(default, int) else default + 0.25


def options_graph() -> Graph:
    """A node for every builtin with an options table: each scalar field away from its default, then
    each given at its default (written as no field); a few with a vector field (the object API)."""
    g = Graph()
    g.add_tensor(Tensor("x", "int8", (1, 4), quant=QuantParams((0.5,), (3,))))
    ops = [op for op in writer.BUILTIN_CODES if op not in writer._NOT_WRITABLE and writer.options_table(op)]
    k = 0
    for op in ops:
        fields = layout.OPTIONS[writer.options_table(op)[2]][1]
        scalars = {camel_to_snake(f): d for f, _, fmt, d in fields if fmt}
        for attrs in ({a: _non_default(d) for a, d in scalars.items()}, scalars):
            if attrs or op in writer._EMPTY_OPTIONS_OPS:
                g.add_tensor(Tensor(f"y{k}", "int8", (1, 4), quant=QuantParams((0.5,), (3,))))
                g.add_node(Node(op, ["x"], [f"y{k}"], dict(attrs), name=f"n{k}"))
                k += 1
    for op, attrs in (("SQUEEZE", {"squeeze_dims": [0]}), ("RESHAPE", {"new_shape": [4, 1]}),
                      ("BUCKETIZE", {"boundaries": [0.5, 1.5]}), ("STABLEHLO_GATHER", {"offset_dims": [1], "index_vector_dim": 2})):
        g.add_tensor(Tensor(f"y{k}", "int8", (1, 4), quant=QuantParams((0.5,), (3,))))
        g.add_node(Node(op, ["x"], [f"y{k}"], attrs, name=f"n{k}"))
        k += 1
    g.inputs, g.outputs = ["x"], [f"y{k - 1}"]
    return g


def test_every_options_table_as_the_object_api_packs_it():
    g = options_graph()
    with_scalars = {name for name, (_, fields) in layout.OPTIONS.items() if any(fmt for _, _, fmt, _ in fields)}
    reachable = {writer.options_table(op)[2] for op in writer.BUILTIN_CODES if writer.options_table(op)}
    assert {writer.options_table(n.op)[2] for n in g.nodes} >= reachable & with_scalars
    assert len(reachable & with_scalars) >= 70
    ours = writer.write_model(g)
    assert _object_api(ours) == ours
    model = schema.ModelT.InitFromPackedBuf(ours, 0)
    ops = model.subgraphs[0].operators
    assert ops[0].builtinOptionsType != 0 and any(op.builtinOptions2Type for op in ops)
    assert list(ops[-4].builtinOptions.squeezeDims) == [0] and list(ops[-1].builtinOptions2.offsetDims) == [1]


_WRITE_A_MODEL = """
import sys
import qconvert.api, qconvert.cli, qconvert.schema.flexbuffer, qconvert.schema.requant_metadata
from qconvert.ir import Graph, Node, QuantParams, Tensor
from qconvert.schema.writer import write_model
g = Graph()
for name in ("x", "y", "z"):
    g.add_tensor(Tensor(name, "int8", (1, 4, 4, 2), quant=QuantParams((0.5,), (3,))))
g.add_node(Node("MAX_POOL_2D", ["x"], ["y"], {"padding": "SAME", "stride_w": 1, "stride_h": 1, "filter_width": 2,
                                             "filter_height": 2, "fused_activation_function": "RELU"}, name="pool"))
g.add_node(Node("PAD", ["y"], ["z"], {}, name="pad"))
g.inputs, g.outputs = ["x"], ["z"]
write_model(g)
print(sorted(m for m in sys.modules if m.endswith(("schema_py_generated", "flexbuffers"))))
"""


def test_writing_a_model_does_not_load_the_generated_schema_module():
    out = subprocess.run([sys.executable, "-c", _WRITE_A_MODEL], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "[]"
