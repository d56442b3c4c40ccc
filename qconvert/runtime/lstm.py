"""UNIDIRECTIONAL_SEQUENCE_LSTM, the 8x8_16 integer kernel of LiteRT (lstm_eval.cc
``EvalInteger8x8_16`` with portable_tensor_utils): int8 input, weights and output state, int16
cell state, int32 biases; no layer norm, peephole or projection (the recipe refuses those).

Parameters: the record of ``qconvert.ops.recipes_seq.unidirectional_sequence_lstm`` (pairs in
the order of its LSTM_PAIR_* constants); the input's and the output state's zero points from the
tensors. The output and cell states are VARIABLE tensors: the runtime gives them the values
before the op (a fresh run: the output state's zero point, and 0).

Each time step, with ``h`` the output state (int8) and ``c`` the cell state (int16):

* gate pre-activation (Q3.12, int16), for each gate of (input, forget, cell, output):
  ``sat16(MBQM(b + sum((x - x_zp)·W), input pair))``, then
  ``sat16(MBQM(sum((h - h_zp)·R), recurrent pair) + that)``; int32 accumulators;
* input, forget, output gates: gemmlowp ``logistic`` on int16 Q3.12 → Q0.15; cell gate:
  gemmlowp ``tanh`` on Q3.12 → Q0.15 (CIFG: the input gate is ``32767 - forget``);
* ``c = int16(RDPOT(f·c, 15))``, ``u = int16(RDPOT(i·g, 30 + log2 cell scale))``,
  ``c = sat16(c + u)``, then clipped to ± the quantized cell clip when it is > 0;
* ``h = clamp8(MBQM(o · tanh(c), hidden pair) + hidden_zp)`` with gemmlowp ``tanh`` on the cell
  state read as Q(15 + log2 cell scale); ``h`` is the step's output. LiteRT's ``ApplyTanh`` has
  forms for 0 to 6 integer bits only and otherwise returns without writing its output buffer,
  which then still holds this step's input gate: with a cell state scale below 2**-15 (TensorFlow
  writes 2**-16 to 2**-19 for small cell states) ``h`` is ``o · i``, reproduced here; a CIFG LSTM
  (no input gate: an unwritten buffer) is refused then.

The int16 gemmlowp arithmetic (``fixedpoint.h`` on ``std::int16_t``: SaturatingRoundingDoublingHighMul
with a 2**14 nudge and truncating division, saturating adds where gemmlowp saturates for 16 bits,
wrapping ones elsewhere, its int32 constants rounded to 16 bits by ``RDPOT(v, 16)``) is below,
vectorised over int64 arrays holding int16 values.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.errors import KernelError
from qconvert.ops.recipes_seq import (
    LSTM_BIASES,
    LSTM_CELL_STATE,
    LSTM_INPUT_WEIGHTS,
    LSTM_OUTPUT_STATE,
    LSTM_PAIR_CELL_CLIP,
    LSTM_PAIR_CELL_SCALE,
    LSTM_PAIR_HIDDEN,
    LSTM_PAIR_HIDDEN_ZP,
    LSTM_PAIR_INPUT,
    LSTM_PAIR_RECURRENT,
    LSTM_PAIRS,
    LSTM_RECURRENT_WEIGHTS,
)
from qconvert.runtime.int_math import I64, mbqm, rdpot, wrap16, wrap32

# ---------------------------------------------------------------------------
# gemmlowp fixed point on int16


def _sat16(v: np.ndarray) -> np.ndarray:
    return np.clip(v, -32768, 32767)


def _c16(raw32: int) -> int:
    """A gemmlowp constant given as an int32 raw value, rescaled to int16: RDPOT(v, 16)."""
    return int(wrap16(rdpot(np.asarray(raw32, I64), 16)))


def _srdhm16(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    a, b = np.asarray(a, I64), np.asarray(b, I64)
    ab = a * b
    t = ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14))
    q = np.where(t >= 0, t >> 15, -((-t) >> 15))  # C division truncates
    return wrap16(np.where((a == -32768) & (b == -32768), 32767, q))


def _shl_sat16(x: np.ndarray, exponent: int) -> np.ndarray:
    """gemmlowp SaturatingRoundingMultiplyByPOT with a positive exponent, int16."""
    if exponent == 0:
        return x
    threshold = (1 << (15 - exponent)) - 1
    return np.where(x > threshold, 32767, np.where(x < -threshold, -32768, wrap16(x << exponent)))


_EXP_MINUS_ONE_EIGHTH = _c16(1895147668)
_ONE_THIRD = _c16(715827883)
_BARREL = tuple((e, _c16(m)) for e, m in ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                                          (2, 39332535), (3, 720401), (4, 242)))
_FORTY_EIGHT_SEVENTEENTHS = _c16(1515870810)  # Q2.13
_MINUS_THIRTY_TWO_SEVENTEENTHS = _c16(-1010580540)  # Q2.13
_ONE_F0 = 32767
_ONE_F2 = 1 << 13
_HALF_F0 = _c16(1 << 30)


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: np.ndarray) -> np.ndarray:
    x = wrap16(a + (1 << 12))
    x2 = _srdhm16(x, x)
    x3 = _srdhm16(x2, x)
    x4 = _srdhm16(x2, x2)
    x4_over_4 = rdpot(x4, 2)
    poly = rdpot(wrap16(_srdhm16(wrap16(x4_over_4 + x3), _ONE_THIRD) + x2), 1)
    return _sat16(_EXP_MINUS_ONE_EIGHTH + _srdhm16(_EXP_MINUS_ONE_EIGHTH, wrap16(x + poly)))


def exp_on_negative_values16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``exp_on_negative_values`` for int16 Q(integer_bits) inputs <= 0; Q0.15 out."""
    fractional_bits = 15 - integer_bits
    quarter = 1 << (fractional_bits - 2)
    a_mod = wrap16((a & (quarter - 1)) - quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(_shl_sat16(a_mod, integer_bits))
    remainder = wrap16(a_mod - a)
    for exponent, multiplier in _BARREL:
        if integer_bits > exponent:
            bit = (remainder & (1 << (fractional_bits + exponent))) != 0
            result = np.where(bit, _srdhm16(result, multiplier), result)
    if integer_bits > 5:
        result = np.where(a < _c16(-(1 << (36 - integer_bits))), 0, result)
    return np.where(a == 0, _ONE_F0, result)


def _newton_reciprocal(a: np.ndarray) -> np.ndarray:
    """The shared start of gemmlowp's ``1/(1+x)`` and ``(1-x)/(1+x)``: x ≈ 1/(half the
    denominator), Q2.13, after three Newton steps."""
    total = a + _ONE_F0 + np.where(a + _ONE_F0 >= 0, 1, -1)  # RoundingHalfSum(a, 1): (a + b ± 1) / 2, truncated
    half_denominator = wrap16(np.where(total >= 0, total // 2, -((-total) // 2)))
    x = wrap16(_FORTY_EIGHT_SEVENTEENTHS + _srdhm16(half_denominator, _MINUS_THIRTY_TWO_SEVENTEENTHS))
    for _ in range(3):
        one_minus = wrap16(_ONE_F2 - _srdhm16(half_denominator, x))
        x = wrap16(x + _shl_sat16(_srdhm16(x, one_minus), 2))
    return x


def logistic16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``logistic`` on int16 Q(integer_bits) → Q0.15."""
    a = np.asarray(a, I64)
    positive = a > 0
    magnitude = np.where(positive, a, wrap16(-a))
    x = _newton_reciprocal(exp_on_negative_values16(wrap16(-magnitude), integer_bits))
    if_positive = _shl_sat16(x, 1)  # Rescale<0>(ExactMulByPot<-1>(x))
    return np.where(a == 0, _HALF_F0, np.where(positive, if_positive, wrap16(_ONE_F0 - if_positive)))


def tanh16(a: np.ndarray, integer_bits: int) -> np.ndarray:
    """gemmlowp ``tanh`` on int16 Q(integer_bits) → Q0.15."""
    a = np.asarray(a, I64)
    negative = a < 0
    n = np.where(negative, a, wrap16(-a))
    x = _newton_reciprocal(exp_on_negative_values16(n, integer_bits + 1))
    t = _shl_sat16(wrap16(x - _ONE_F2), 2)  # Rescale<0>(x - 1)
    return np.where(a == 0, 0, np.where(negative, wrap16(-t), t))


# ---------------------------------------------------------------------------
# the kernel


def _fail(call: Any, why: str) -> KernelError:
    return KernelError(f"operator {call.index} (UNIDIRECTIONAL_SEQUENCE_LSTM '{call.name}'): {why}")


def lstm_with_state(call: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(output int8, final output state int8, final cell state int16)."""
    ins = call.inputs
    x = ins[0]
    if x is None or x.dtype != np.int8 or len(ins) <= LSTM_CELL_STATE:
        raise _fail(call, "the integer kernel takes an int8 input")
    h0, c0 = ins[LSTM_OUTPUT_STATE], ins[LSTM_CELL_STATE]
    if h0 is None or c0 is None or h0.dtype != np.int8 or c0.dtype != np.int16:
        raise _fail(call, "the 8x8_16 kernel takes an int8 output state and an int16 cell state")
    m, s = call.pairs(LSTM_PAIRS)
    time_major = bool(call.options.get("time_major", False))
    if x.ndim == 2:
        steps = x[None].astype(I64)  # [time, batch, input]
    elif x.ndim == 3:
        steps = (x if time_major else x.transpose(1, 0, 2)).astype(I64)
    else:
        raise _fail(call, f"input of rank {x.ndim}; the kernel takes rank 2 or 3")
    n_time, n_batch, n_input = steps.shape
    cifg = ins[LSTM_INPUT_WEIGHTS[0]] is None
    gates = range(1, 4) if cifg else range(4)
    if any(ins[slots[g]] is None or ins[slots[g]].ndim != 2 for g in gates
           for slots in (LSTM_INPUT_WEIGHTS, LSTM_RECURRENT_WEIGHTS)):
        raise _fail(call, "the integer kernel needs 2-D input and recurrent weights for every gate it computes")
    input_zp, state_zp = call.input_zps[0], call.input_zps[LSTM_OUTPUT_STATE]
    n_cell = ins[LSTM_INPUT_WEIGHTS[3]].shape[0]
    n_output = ins[LSTM_RECURRENT_WEIGHTS[3]].shape[1]
    if h0.size != n_batch * n_output or c0.size != n_batch * n_cell:
        raise _fail(call, f"states {list(h0.shape)} / {list(c0.shape)} do not fit {n_batch} batch(es) of "
                          f"{n_output} outputs and {n_cell} cells")
    cell_log2 = int(m[LSTM_PAIR_CELL_SCALE])
    cell_clip = int(m[LSTM_PAIR_CELL_CLIP])
    hidden_zp = int(m[LSTM_PAIR_HIDDEN_ZP])
    tanh_bits = 15 + cell_log2
    if not 0 <= 30 + cell_log2 <= 31 or not 0 <= tanh_bits <= 6 and cifg:
        raise _fail(call, f"cell state scale 2**{cell_log2}: LiteRT's kernel takes 2**-30 to 2**-9 "
                          "(to 2**-15 without an input gate)")

    # the input's contribution to every gate, all steps at once (it does not depend on the state)
    flat = steps.reshape(n_time * n_batch, n_input)
    from_input, recurrent = {}, {}
    for g in gates:
        w = ins[LSTM_INPUT_WEIGHTS[g]].astype(I64)
        bias = ins[LSTM_BIASES[g]]
        if bias is not None and bias.shape != (n_cell,):
            raise _fail(call, f"gate bias {list(bias.shape)} for {n_cell} cells")
        acc = wrap32(flat @ w.T - input_zp * w.sum(axis=1) + (0 if bias is None else bias.astype(I64)))
        from_input[g] = _sat16(mbqm(acc, m[LSTM_PAIR_INPUT + g], s[LSTM_PAIR_INPUT + g])).reshape(
            n_time, n_batch, n_cell)
        r = ins[LSTM_RECURRENT_WEIGHTS[g]].astype(I64)
        recurrent[g] = (r, state_zp * r.sum(axis=1))

    h = h0.reshape(n_batch, n_output).astype(I64)
    c = c0.reshape(n_batch, n_cell).astype(I64)
    out = np.empty((n_time, n_batch, n_output), I64)
    for t in range(n_time):
        pre = {}
        for g in gates:
            r, offset = recurrent[g]
            acc = wrap32(h @ r.T - offset)
            pre[g] = _sat16(mbqm(acc, m[LSTM_PAIR_RECURRENT + g], s[LSTM_PAIR_RECURRENT + g]) + from_input[g][t])
        forget = logistic16(pre[1], 3)
        cell_gate = tanh16(pre[2], 3)
        input_gate = wrap16(_ONE_F0 - forget) if cifg else logistic16(pre[0], 3)
        c = wrap16(rdpot(forget * c, 15))
        c = _sat16(c + wrap16(rdpot(input_gate * cell_gate, 30 + cell_log2)))
        if cell_clip > 0:
            c = np.clip(c, -cell_clip, cell_clip)
        output_gate = logistic16(pre[3], 3)
        # ApplyTanh has forms for 0 to 6 integer bits only and leaves its buffer as it was otherwise: the
        # buffer holds this step's input gate (cell state scales below 2**-15, which TensorFlow writes)
        hidden = output_gate * (tanh16(c, tanh_bits) if 0 <= tanh_bits <= 6 else input_gate)
        h = np.clip(mbqm(hidden, m[LSTM_PAIR_HIDDEN], s[LSTM_PAIR_HIDDEN]) + hidden_zp, -128, 127)
        out[t] = h
    y = out if time_major or x.ndim == 2 else out.transpose(1, 0, 2)
    return (y.reshape(call.output_shape).astype(np.int8), h.reshape(h0.shape).astype(np.int8),
            c.reshape(c0.shape).astype(np.int16))


def unidirectional_sequence_lstm(call: Any) -> np.ndarray:
    """The KERNELS entry: the output; the final output and cell states go to ``call.states``."""
    y, h, c = lstm_with_state(call)
    call.states[LSTM_OUTPUT_STATE], call.states[LSTM_CELL_STATE] = h, c
    return y
