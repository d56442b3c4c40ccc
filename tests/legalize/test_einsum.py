"""The Einsum lowering (qconvert.legalize.einsum): plans derived by hand from the rule (labels
sorted into batch, x-free, contracted and y-free; operands transposed to [batch, free,
contracted] / [batch, contracted, free], reshaped to one matrix product, the product reshaped
and transposed to the output), numpy's einsum as the oracle of the arithmetic, and the
refusals. tests/e2e/test_transformers.py compares the written files with TensorFlow's."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import graph_with_input

from qconvert.errors import ConversionError
from qconvert.ir import Node, Tensor
from qconvert.ir.passes import Context
from qconvert.legalize.einsum import EinsumPlan, Unsupported, plan
from qconvert.legalize.tf_rewrites import legalize_ops


@pytest.mark.parametrize("eq,xs,ys,expected", [
    # a projection: nothing moves, the weight [c, d·e], the product back to [a, b, d, e]
    ("abc,cde->abde", (1, 8, 16), (16, 2, 8), EinsumPlan(None, None, None, (16, 16), (1, 8, 16), (1, 8, 2, 8), None)),
    # scores: x [a,e,c,d] → [a,c,e,d], y [a,b,c,d] → [a,c,d,b]; product [a,c,e,b] → [a,c,b,e]
    ("aecd,abcd->acbe", (1, 8, 2, 4), (1, 6, 2, 4),
     EinsumPlan((0, 2, 1, 3), None, (0, 2, 3, 1), None, (1, 2, 8, 6), None, (0, 1, 3, 2))),
    # attention × value: y [a,e,c,d] → [a,c,e,d]; product [a,c,b,d] → [a,b,c,d]
    ("acbe,aecd->abcd", (1, 2, 8, 6), (1, 6, 2, 4),
     EinsumPlan(None, None, (0, 2, 1, 3), None, (1, 2, 8, 4), None, (0, 2, 1, 3))),
    # output projection: x [a,b,c,d] → [a,b,c·d], y [c,d,e] → [c·d, e]
    ("abcd,cde->abe", (1, 8, 2, 4), (2, 4, 16), EinsumPlan(None, (1, 8, 8), None, (8, 16), (1, 8, 16), None, None)),
    # no x-free label: a row of 1 in the product, reshaped away
    ("ab,abc->ac", (2, 4), (2, 4, 3), EinsumPlan(None, (2, 1, 4), None, None, (2, 1, 3), (2, 3), None)),
    # batch and two x-free labels: the free ones flattened into one row dimension
    ("abcd,ad->abc", (2, 3, 4, 5), (2, 5), EinsumPlan(None, (2, 12, 5), None, (2, 5, 1), (2, 12, 1), (2, 3, 4), None)),
])
def test_plans_follow_the_rule(eq: str, xs: tuple, ys: tuple, expected: EinsumPlan) -> None:
    assert plan(eq, xs, ys) == expected


@pytest.mark.parametrize("eq,xs,ys", [
    ("abc,cde->abde", (1, 8, 16), (16, 2, 8)), ("aecd,abcd->acbe", (1, 8, 2, 4), (1, 6, 2, 4)),
    ("acbe,aecd->abcd", (1, 2, 8, 6), (1, 6, 2, 4)), ("abcd,cde->abe", (1, 8, 2, 4), (2, 4, 16)),
    ("ab,abc->ac", (2, 4), (2, 4, 3)), ("abcd,ad->abc", (2, 3, 4, 5), (2, 5)), ("abc,cd->dab", (1, 4, 6), (6, 5)),
    ("bac,cbd->dba", (3, 2, 4), (4, 3, 5)), ("ij,jk->ki", (3, 4), (4, 5)),
])
def test_the_plan_computes_the_einsum(eq: str, xs: tuple, ys: tuple) -> None:
    """Transpose, reshape, matmul, reshape, transpose as planned: numpy's einsum."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=xs), rng.normal(size=ys)
    p = plan(eq, xs, ys)
    a = x if p.x_perm is None else np.transpose(x, p.x_perm)
    a = a if p.x_shape is None else a.reshape(p.x_shape)
    b = y if p.y_perm is None else np.transpose(y, p.y_perm)
    b = b if p.y_shape is None else b.reshape(p.y_shape)
    out = np.matmul(a, b)
    assert out.shape == p.product
    out = out if p.out_shape is None else out.reshape(p.out_shape)
    out = out if p.out_perm is None else np.transpose(out, p.out_perm)
    np.testing.assert_allclose(out, np.einsum(eq, x, y), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("eq,xs,ys,reason", [
    ("ab,bc", (2, 4), (4, 3), "no explicit output"),
    ("...b,bc->...c", (2, 4), (4, 3), "ellipsis"),
    ("abb,bc->ac", (1, 4, 4), (4, 3), "repeated"),
    ("ab,bc->a", (2, 4), (4, 3), "summed within one operand"),
    ("abc,acd->abd", (1, 4, 6), (3, 6, 5), "broadcasting"),
    ("ab,bc,cd->ad", (2, 4), (4, 3), "3 operands"),
])
def test_what_the_rule_does_not_lower_is_refused(eq: str, xs: tuple, ys: tuple, reason: str) -> None:
    with pytest.raises(Unsupported, match=reason):
        plan(eq, xs, ys)


def test_the_rewrite_refuses_in_one_line_naming_the_node_and_the_equation() -> None:
    g = graph_with_input((1, 4))
    g.add_tensor(Tensor("y", "float32", (4, 3), np.ones((4, 3), np.float32)))
    g.add_tensor(Tensor("e", "float32", (1,)))
    g.add_node(Node("Einsum", ["x", "y"], ["e"], {"equation": "ab,bc->a"}, name="e"))
    g.outputs = ["e"]
    with pytest.raises(ConversionError) as err:
        legalize_ops(g, Context())
    assert "\n" not in str(err.value) and "node 'e' (Einsum 'ab,bc->a')" in str(err.value)


def test_the_rewrite_writes_the_planned_ops() -> None:
    """The scores equation: two TRANSPOSEs, BATCH_MATMUL, a TRANSPOSE writing the node's own output."""
    g = graph_with_input((1, 8, 2, 4))
    g.add_tensor(Tensor("k", "float32", (1, 6, 2, 4)))
    g.inputs.append("k")
    g.add_tensor(Tensor("s", "float32", (1, 2, 8, 6)))
    g.add_node(Node("Einsum", ["x", "k"], ["s"], {"equation": "aecd,abcd->acbe"}, name="s"))
    g.outputs = ["s"]
    legalize_ops(g, Context())
    assert [n.op for n in g] == ["TRANSPOSE", "TRANSPOSE", "BATCH_MATMUL", "TRANSPOSE"]
    last = g.nodes[-1]
    assert last.outputs == ["s"] and g.const(last.inputs[1]).tolist() == [0, 1, 3, 2]
    assert g.nodes[2].attrs["adj_x"] is False and g.nodes[2].attrs["adj_y"] is False
