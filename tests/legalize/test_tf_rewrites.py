"""The frontend's TF op table and the ``legalize`` stage's rewrites agree: the importer accepts
no TensorFlow op that ``legalize_ops`` cannot rewrite, and no rewrite waits for an op the
importer refuses."""

from __future__ import annotations

import pytest
from graphs import graph_with_input, op

from qconvert.errors import ConversionError
from qconvert.frontend.tf_ops import MULTI_OUTPUT, TF_OPS
from qconvert.ir.passes import Context
from qconvert.legalize.tf_rewrites import REWRITES, legalize_ops


def test_every_rewrite_is_for_a_tf_op_the_importer_takes() -> None:
    # FakeQuant* become Q/DQ pairs (legalize_fake_quant, earlier in the stage); Split, SplitV
    # and Unpack become slices in the importer (regrouped by the quantize stage)
    elsewhere = MULTI_OUTPUT | {name for name in TF_OPS if name.startswith("FakeQuant")}
    becomes = {name for name, spec in TF_OPS.items() if spec.tfl is not None}
    assert set(REWRITES) <= becomes - elsewhere


@pytest.mark.parametrize("name", sorted(n for n, s in TF_OPS.items() if s.tfl is not None and n not in REWRITES
                                        and n not in MULTI_OUTPUT and not n.startswith("FakeQuant")))
def test_a_tf_op_without_a_rewrite_is_renamed_to_its_tflite_op(name: str) -> None:
    """The ops TF_OPS alone declares (Relu, Tanh, Abs, ...) become their TFLite op with no options."""
    g = graph_with_input((1, 4))
    g.outputs = [op(g, name, ["x"], "n", (1, 4), T="DT_FLOAT")]
    assert legalize_ops(g, Context()) is True
    assert g.nodes[0].op == TF_OPS[name].tfl and g.nodes[0].attrs == {}


def test_a_tf_op_without_a_rewrite_is_an_error_naming_the_node() -> None:
    g = graph_with_input((1, 4))
    g.outputs = [op(g, "Unpack", ["x"], "u", (4,))]
    with pytest.raises(ConversionError, match="node 'u': no legalization for Unpack"):
        legalize_ops(g, Context())


def test_structural_and_unknown_ops_are_left_alone() -> None:
    g = graph_with_input((1, 4))
    g.outputs = [op(g, "Identity", [op(g, "SomethingElse", ["x"], "s", (1, 4))], "i", (1, 4))]
    assert legalize_ops(g, Context()) is False
