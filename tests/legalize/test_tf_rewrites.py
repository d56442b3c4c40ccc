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


def test_every_tf_op_that_becomes_a_tflite_op_has_a_rewrite() -> None:
    # FakeQuant* become Q/DQ pairs (legalize_fake_quant, earlier in the stage); Split, SplitV
    # and Unpack become slices in the importer (regrouped by the quantize stage)
    elsewhere = MULTI_OUTPUT | {name for name in TF_OPS if name.startswith("FakeQuant")}
    becomes = {name for name, spec in TF_OPS.items() if spec.tfl is not None}
    assert set(REWRITES) == becomes - elsewhere


def test_a_tf_op_without_a_rewrite_is_an_error_naming_the_node() -> None:
    g = graph_with_input((1, 4))
    g.outputs = [op(g, "Unpack", ["x"], "u", (4,))]
    with pytest.raises(ConversionError, match="node 'u': no legalization for Unpack"):
        legalize_ops(g, Context())


def test_structural_and_unknown_ops_are_left_alone() -> None:
    g = graph_with_input((1, 4))
    g.outputs = [op(g, "Identity", [op(g, "SomethingElse", ["x"], "s", (1, 4))], "i", (1, 4))]
    assert legalize_ops(g, Context()) is False
