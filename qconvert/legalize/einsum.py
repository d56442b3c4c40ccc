"""``Einsum(x, y)`` as TensorFlow's converter lowers it (its ``tf-einsum`` rewrite, then the usual
legalization), for two operands with static shapes:

1. Each label of the equation is a *batch* label (in x, y and the output), an *x-free* label
   (x and the output), a *y-free* label (y and the output) or a *contracted* label (x and y).
2. ``x`` is transposed to [batch…, x-free…, contracted…] (labels in x's order), ``y`` to
   [batch…, contracted…, y-free…] (labels in y's order); an identity permutation writes nothing.
3. Both are reshaped for one matrix product: x to [batch…, M, K], y to [batch…, K, N], with K the
   contracted labels' product, N the y-free labels' product, and M the x-free labels' product,
   or, without batch labels, the x-free dimensions themselves (so that a projection
   ``[B, T, D] x [D, N]`` stays 3-D: FULLY_CONNECTED keeping its dimensions), or 1 without x-free
   labels; a reshape to the same shape writes nothing.
4. ``BatchMatMulV2(x, y)`` (no adjoints: FULLY_CONNECTED when ``y`` is a 2-D constant), then a
   reshape to the output's dimensions in [batch, x-free, y-free] order, then a transpose to the
   equation's output order.

A constant operand is transposed and reshaped here (TensorFlow folds those ops). What the rule
does not lower is refused in one line naming the node and the equation: an ellipsis, a label
repeated in one operand, a label summed within one operand, one or three operands, batch
dimensions of different sizes (broadcast).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple, Sequence

from qconvert.errors import ConversionError


class EinsumPlan(NamedTuple):
    """The ops one Einsum becomes: permutations (``None``: identity, nothing written) and shapes
    (``None``: unchanged). (A NamedTuple: compared and shown like the frozen dataclass it was,
    without the 0.3 ms of start-up its generated methods took.)"""

    x_perm: tuple[int, ...] | None
    x_shape: tuple[int, ...] | None
    y_perm: tuple[int, ...] | None
    y_shape: tuple[int, ...] | None
    product: tuple[int, ...]  # the BatchMatMulV2's output
    out_shape: tuple[int, ...] | None  # the reshape after it
    out_perm: tuple[int, ...] | None  # the transpose after that


class Unsupported(ValueError):
    """An equation the rule does not lower (the reason, for the one-line refusal)."""


def _terms(equation: str) -> tuple[str, str, str]:
    eq = equation.replace(" ", "")
    if "->" not in eq:
        raise Unsupported("no explicit output ('->')")
    inputs, out = eq.split("->", 1)
    terms = inputs.split(",")
    if len(terms) != 2:
        raise Unsupported(f"{len(terms)} operands (two are lowered)")
    for t in (*terms, out):
        if "." in t:
            raise Unsupported("an ellipsis ('...')")
        if not t.isalpha() and t:
            raise Unsupported(f"a label that is not a letter in '{t}'")
        if len(set(t)) != len(t):
            raise Unsupported(f"a label repeated in '{t}' (a diagonal or trace)")
    return terms[0], terms[1], out


def _perm(order: Sequence[int]) -> tuple[int, ...] | None:
    p = tuple(order)
    return None if p == tuple(range(len(p))) else p


def plan(equation: str, xs: Sequence[int], ys: Sequence[int]) -> EinsumPlan:
    """The lowering of ``equation`` for operand shapes ``xs``, ``ys``; raises :class:`Unsupported`."""
    a, b, out = _terms(equation)
    if len(a) != len(xs) or len(b) != len(ys):
        raise Unsupported(f"operand ranks {len(xs)} and {len(ys)} for '{a}' and '{b}'")
    for c in a + b:
        if c not in out and (c in a) != (c in b):
            raise Unsupported(f"label '{c}' is summed within one operand")
    for c in out:
        if c not in a and c not in b:
            raise Unsupported(f"output label '{c}' is in no operand")
    size = {c: int(d) for c, d in zip(a, xs)}
    for c, d in zip(b, ys):
        if c in size and size[c] != int(d):
            raise Unsupported(f"label '{c}' has sizes {size[c]} and {int(d)} (broadcasting)")
        size[c] = int(d)
    batch = [c for c in a if c in b and c in out]
    x_free = [c for c in a if c not in b]
    contracted = [c for c in a if c in b and c not in out]
    y_free = [c for c in b if c not in a]
    x_perm = [a.index(c) for c in batch + x_free + contracted]
    y_perm = [b.index(c) for c in batch + contracted + y_free]
    lead = [size[c] for c in batch]
    if not x_free:
        rows = [1]
    elif not batch:
        rows = [size[c] for c in x_free]
    else:
        rows = [prod(size[c] for c in x_free)]
    k, n = prod(size[c] for c in contracted), prod(size[c] for c in y_free)
    x_shape, y_shape = (*lead, *rows, k), (*lead, k, n)
    order = batch + x_free + y_free
    out_shape = tuple(size[c] for c in order)
    transposed_x = tuple(int(xs[p]) for p in x_perm)
    transposed_y = tuple(int(ys[p]) for p in y_perm)
    product = (*lead, *rows, n)
    return EinsumPlan(
        x_perm=_perm(x_perm), x_shape=None if x_shape == transposed_x else x_shape,
        y_perm=_perm(y_perm), y_shape=None if y_shape == transposed_y else y_shape,
        product=product, out_shape=None if out_shape == product else out_shape,
        out_perm=_perm([order.index(c) for c in out]))


def refusal(node_name: str, equation: str, reason: str) -> ConversionError:
    return ConversionError(f"node '{node_name}' (Einsum '{equation}'): not lowered to TFLite ops: {reason}; "
                           f"qconvert lowers, as TensorFlow's einsum lowering does, two-operand contractions of "
                           f"explicit labels (rewrite it with tf.linalg.matmul, tf.transpose and tf.reshape)")
