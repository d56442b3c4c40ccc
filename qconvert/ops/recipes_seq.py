"""Prepare-time recipes of the sequence ops, SVDF and UNIDIRECTIONAL_SEQUENCE_LSTM: the integer
parameters LiteRT's int8 kernels derive from the tensors' float32 scales (svdf.cc ``Prepare``,
unidirectional_sequence_lstm.cc ``PopulateQuantizedLstmParams8x8_16``). Computed once, at load;
the integer kernels in ``qconvert.runtime.svdf`` / ``qconvert.runtime.lstm`` read only the record.

The converter writes UNIDIRECTIONAL_SEQUENCE_LSTM (a Keras LSTM, ``lstm_operands`` below gives its
operands' parameters) and stores its record in the ``qconvert_requant`` metadata; SVDF it never
writes: the runtime computes that record for files other converters wrote. The record's ``pairs``
carry every integer the kernel needs, in the order each recipe's docstring gives; an integer
that is not a multiplier travels as ``(value, 0)``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from qconvert import quant as qm
from qconvert.quant.int16_params import checked_log2
from qconvert.quant.requant import Operand

Inputs = Sequence["Operand | None"]
Parts = dict[str, Any]

# UNIDIRECTIONAL_SEQUENCE_LSTM operand slots (lstm_shared.h)
LSTM_INPUT = 0
LSTM_INPUT_WEIGHTS = (1, 2, 3, 4)  # input-to-{input, forget, cell, output}
LSTM_RECURRENT_WEIGHTS = (5, 6, 7, 8)  # recurrent-to-{input, forget, cell, output}
LSTM_PEEPHOLE = (9, 10, 11)  # cell-to-{input, forget, output}
LSTM_BIASES = (12, 13, 14, 15)  # {input, forget, cell, output} gate bias
LSTM_PROJECTION = (16, 17)  # projection weights, projection bias
LSTM_OUTPUT_STATE, LSTM_CELL_STATE = 18, 19
LSTM_LAYER_NORM = (20, 21, 22, 23)
LSTM_INTERMEDIATES = 5  # the kernel's five intermediates follow the inputs (the runtime appends them)

# the record's pairs (UNIDIRECTIONAL_SEQUENCE_LSTM)
LSTM_PAIR_INPUT = 0  # 0..3: effective input-to-gate scale, gates (input, forget, cell, output); CIFG: input (0, 0)
LSTM_PAIR_RECURRENT = 4  # 4..7: effective recurrent-to-gate scale, same gate order
LSTM_PAIR_HIDDEN = 8  # effective hidden scale: o·tanh(c) (2**-30 units) to the output state
LSTM_PAIR_CELL_SCALE = 9  # (log2 of the cell state's scale, 0), e.g. (-11, 0)
LSTM_PAIR_CELL_CLIP = 10  # (quantized cell clip, 0); 0: no clip
LSTM_PAIR_HIDDEN_ZP = 11  # (zero point of the hidden intermediate, 0): the output state's, in practice
LSTM_PAIRS = 12


def _operand(ins: Inputs, slot: int, what: str) -> Operand:
    if slot >= len(ins) or ins[slot] is None:
        raise ValueError(f"{what} (input {slot}) is missing")
    t = ins[slot]
    if not t.scale:  # type: ignore[union-attr]
        raise ValueError(f"{what} '{t.name}' has no quantization")  # type: ignore[union-attr]
    return t  # type: ignore[return-value]


def svdf(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """SVDF int8 (svdf.cc ``Prepare``; inputs: x, weights_feature, weights_time, bias, state).

    pairs[0]: ``double(x) * double(weights_feature) / double(state)``, the feature matmul to the
    int16 state; pairs[1]: ``double(state) * double(weights_time) / double(out)``, the time
    matmul to the output. weights_time and the state must be int16 (ValueError otherwise).
    clamp: the int8 range, whatever the fused activation: the integer
    kernel (reference ``EvalIntegerSVDF``) clamps to [-128, 127] only, though Eval insists on
    RELU."""
    x = _operand(ins, 0, "input")
    wf = _operand(ins, 1, "weights_feature")
    wt = _operand(ins, 2, "weights_time")
    state = _operand(ins, 4, "activation state")
    odd = next((t for t in (wt, state) if t.dtype not in ("int16", "")), None)
    if odd is not None:  # TFLite Micro's int8-state SVDF: LiteRT reads the int8 buffers as int16, past their end
        raise ValueError(f"{odd.dtype} {'state' if odd is state else 'weights_time'}: LiteRT's integer SVDF reads "
                         "weights_time and the state as int16, an int8 one past its end (it corrupts LiteRT's "
                         "heap); `qconvert run` executes the int16-state SVDF")
    return {"pairs": [qm.quantize_multiplier(x.s * wf.s / state.s),
                      qm.quantize_multiplier(state.s * wt.s / out.s)],
            "clamp": (-128, 127)}


def _checked_log2(scale: float) -> int:
    """CheckedLog2 (kernel_util): the cell state's scale must be a power of two (to 1e-3 in log2)."""
    is_pot, log2 = checked_log2(scale)
    if not is_pot:
        raise ValueError(f"cell state scale {scale} is not a power of two, as the int16 cell state needs")
    return log2


def unidirectional_sequence_lstm(row: Any, ins: Inputs, out: Operand, options: Mapping[str, Any]) -> Parts:
    """UNIDIRECTIONAL_SEQUENCE_LSTM with int8 activations, int8 weights and an int16 cell state
    (the 8x8_16 integer kernel, lstm_eval.cc ``EvalInteger8x8_16``), without layer norm,
    peephole or projection; CIFG (no input gate) is taken. ``ins``: the op's 24 (or 20) inputs,
    then its 5 intermediates (the kernel reads the scale and zero point of the fifth, the hidden
    state's).

    As ``PopulateQuantizedLstmParams8x8_16`` computes them: each gate's pre-activation is
    Q3.12 (scale 2**-12), so the effective input-to-gate scale is ``w * x / 2**-12`` and the
    recurrent one ``w_rec * output_state / 2**-12``, each in FLOAT32 arithmetic, then
    QuantizeMultiplier; the hidden scale is ``2**-15 / hidden * 2**-15`` in double, rounded to
    float32; the quantized cell clip is ``int16(min(max(clip / cell_scale, -32768), 32767))`` in
    float32, truncated.

    pairs (see the LSTM_PAIR_* constants): 0..3 input-to-gate (input, forget, cell, output),
    4..7 recurrent-to-gate, 8 hidden, 9 (log2 cell scale, 0), 10 (cell clip, 0), 11 (hidden
    zero point, 0). The kernel takes the input's and the output state's zero points from the
    tensors, and folds ``-zp · rowsum(w)`` into each gate's bias itself (the kernel's
    ``PrecomputeZeroPointTimesWeightWithBias``, integers only)."""
    n_inputs = len(ins) - LSTM_INTERMEDIATES
    if n_inputs not in (20, 24):
        raise ValueError(f"{len(ins)} inputs and intermediates; the integer kernel takes 20 or 24 inputs and "
                         f"{LSTM_INTERMEDIATES} intermediates")
    own, intermediates = ins[:n_inputs], ins[n_inputs:]
    present = [s for s in (*LSTM_PEEPHOLE, *LSTM_PROJECTION, *LSTM_LAYER_NORM) if s < n_inputs and own[s] is not None]
    if present:
        kind = "peephole" if present[0] in LSTM_PEEPHOLE else "projection" if present[0] in LSTM_PROJECTION \
            else "layer norm"
        raise ValueError(f"an LSTM with {kind} weights (input {present[0]}): `qconvert run` executes the integer "
                         "LSTM without peephole, projection or layer norm")
    x = _operand(own, LSTM_INPUT, "input")
    output_state = _operand(own, LSTM_OUTPUT_STATE, "output state")
    cell_state = _operand(own, LSTM_CELL_STATE, "cell state")
    hidden = _operand(intermediates, LSTM_INTERMEDIATES - 1, "hidden intermediate")
    cifg = own[LSTM_INPUT_WEIGHTS[0]] is None
    gate_scale = np.float32(2.0**-12)
    pairs: list[tuple[int, int]] = []
    for slots, state in ((LSTM_INPUT_WEIGHTS, x), (LSTM_RECURRENT_WEIGHTS, output_state)):
        for g, slot in enumerate(slots):
            if g == 0 and cifg:
                pairs.append((0, 0))
                continue
            w = _operand(own, slot, "weights")
            effective = np.float32(np.float32(np.float32(w.s) * np.float32(state.s)) / gate_scale)
            pairs.append(qm.quantize_multiplier(float(effective)))
    hidden_scale = float(np.float32(2.0**-15 / float(np.float32(hidden.s)) * 2.0**-15))
    pairs.append(qm.quantize_multiplier(hidden_scale))
    cell_log2 = _checked_log2(cell_state.s)
    clip = np.float32(options.get("cell_clip", 0.0) or 0.0)
    quantized_clip = 0
    if clip > 0:
        quantized_clip = int(min(max(np.float32(clip / np.float32(cell_state.s)), np.float32(-32768.0)),
                                 np.float32(32767.0)))
    pairs += [(cell_log2, 0), (quantized_clip, 0), (hidden.zp, 0)]
    return {"pairs": pairs, "clamp": (-128, 127)}


# ---------------------------------------------------------------------------
# The parameters of an LSTM's operands under post-training quantization
# ---------------------------------------------------------------------------

LSTM_INTERMEDIATE_NAMES = ("input_to_input_intermediate", "input_to_forget_intermediate",
                           "input_to_cell_intermediate", "input_to_output_intermediate",
                           "effective_hidden_scale_intermediate")
CELL_STATE_BITS = 16


def power_of_two_bound(value: float) -> float:
    """The least power of two not below ``value`` (prepare_quantize_helper.h ``PowerOfTwoBound``)."""
    return float(2.0 ** np.ceil(np.log2(value))) if value > 0 else 1.0


def lstm_operands(x: qm.QuantParams, y: qm.QuantParams, weights: Mapping[int, np.ndarray],
                  ranges: Mapping[Any, Any], legacy_float_scale: bool
                  ) -> tuple[dict[int, qm.QuantParams], dict[int, qm.QuantParams], list[qm.QuantParams | None]]:
    """What TensorFlow's post-training quantizer gives a UNIDIRECTIONAL_SEQUENCE_LSTM without
    peephole, projection or layer norm (the 8x8_16 kernel; prepare_quantize_helper.h
    ``ConvertLstmStatsToQDQs`` over operator_property.cc's LSTM properties), measured on TF 2.21:

    - each of the 8 weight matrices: int8, one symmetric narrow-range scale (max|w| / 127);
    - each gate bias: int32, scale = input scale × its input-to-gate weight's scale;
    - the output state (slot 18): from the union of its recorded range and the output's when the
      output's own recorded range survives TensorFlow's RemoveRedundantStatsOps
      (``ranges["output_kept"]``: ``PrepareLstmOutputScale`` runs after it and needs both
      statistics); the final state is one of the outputs, so that is the output's range;
    - the cell state (slot 19): int16, zero point 0, scale = PowerOfTwoBound(max(|min|, |max|)) / 32768
      of its recorded range (zero included);
    - the intermediates: the four gate ones carry nothing without layer norm (float32, no
      parameters); the fifth (the hidden value o·tanh(c), which the calibrator records: the output
      values) from the output's own recorded range.

    The integer kernel writes h at the hidden intermediate's scale and zero point into the output
    state, reads it back at the output state's, and copies the output state's bytes into the output
    (lstm_eval.cc): the three must agree. Where the output takes another op's parameters (a
    Bidirectional layer's LSTMs: the concatenation's), TensorFlow 2.21 still gives the state and the
    hidden value the recorded ranges (measured: three different scales in one op, so LiteRT reads
    that LSTM's output at the wrong scale); qconvert gives both the output's parameters.

    ``ranges``: the recorded (min, max) of the states by slot, ``"output"`` (the op's output, as
    recorded) and ``"output_kept"``. Returns (constant slot → parameters, state slot → parameters,
    the five intermediates' parameters)."""
    consts: dict[int, qm.QuantParams] = {}
    for slots, in_gate in ((LSTM_INPUT_WEIGHTS, True), (LSTM_RECURRENT_WEIGHTS, False)):
        for k, slot in enumerate(slots):
            if slot not in weights:
                continue
            m = float(np.abs(np.asarray(weights[slot], np.float64)).max()) if weights[slot].size else 0.0
            consts[slot] = qm.value_range_params(-m, m, narrow_range=True)
            if in_gate and LSTM_BIASES[k] in weights:
                consts[LSTM_BIASES[k]] = qm.bias_params(x, consts[slot], legacy_float_scale)
    if ranges.get("output_kept"):  # TensorFlow's parameters (in practice the output's: see below)
        out_lo, out_hi = ranges["output"]
        h_lo, h_hi = ranges[LSTM_OUTPUT_STATE]
        state = qm.calibrated_range_params(min(h_lo, out_lo), max(h_hi, out_hi))
        hidden = qm.calibrated_range_params(out_lo, out_hi)
    else:  # the output takes another op's parameters: the state and the hidden value take them too
        state = hidden = y
    lo, hi = min(ranges[LSTM_CELL_STATE][0], 0.0), max(ranges[LSTM_CELL_STATE][1], 0.0)
    bound = power_of_two_bound(max(abs(lo), abs(hi)))
    qmax = 2 ** (CELL_STATE_BITS - 1)
    cell = qm.QuantParams((bound / qmax,), (0,), None, -qmax, qmax - 1, qm.storage_dtype(CELL_STATE_BITS))
    states = {LSTM_OUTPUT_STATE: state, LSTM_CELL_STATE: cell}
    return consts, states, [None, None, None, None, hidden]
