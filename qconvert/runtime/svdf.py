"""SVDF int8 as LiteRT's reference kernel computes it (reference ``EvalIntegerSVDF``).

Inputs: x [batch, n_input] int8, weights_feature [n_filter, n_input] int8, weights_time
[n_filter, n_memory] int16, bias [n_unit] int32 (optional), activation state
[batch, n_filter · n_memory] int16 (a VARIABLE tensor: the runtime gives it the state before the
op, zeros on a fresh run). ``n_unit = n_filter / rank``.

1. The state shifts one place to the left along memory (the oldest entry of each filter drops).
2. Feature matmul: ``sum((x - x_zp) · weights_feature)`` (int32) through pairs[0], clamped to
   int16, becomes each filter's newest state entry. The state's zero point is taken as 0 (the
   kernel assumes a symmetric state).
3. Time matmul: per filter, ``sum(weights_time · state)`` over memory (int16 × int16, int32
   accumulator, wrapping as int32 does).
4. The filters of a unit (``rank`` of them) summed, the bias added (int32, wrapping), through
   pairs[1], plus the output zero point, clamped to the record's clamp (the int8 range: the
   kernel applies no ReLU, though the op's options name one).

``svdf`` returns the output and leaves the updated state in ``call.states`` for the interpreter.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from qconvert.errors import KernelError
from qconvert.runtime.int_math import I64, mbqm, wrap32


def svdf_with_state(call: Any) -> tuple[np.ndarray, np.ndarray]:
    """(output int8, new activation state int16)."""
    x, wf, wt = call.inputs[0], call.inputs[1], call.inputs[2]
    bias = call.inputs[3] if len(call.inputs) > 3 else None
    state = call.inputs[4] if len(call.inputs) > 4 else None
    if x is None or wf is None or wt is None or x.ndim < 2 or wf.ndim != 2 or wt.ndim != 2:
        raise KernelError(f"operator {call.index} (SVDF '{call.name}') needs an input, 2-D weights_feature and "
                          "weights_time")
    if state is None or wt.dtype != np.int16 or state.dtype != np.int16:
        found = "no state" if state is None else f"weights_time {wt.dtype}, state {state.dtype}"
        raise KernelError(f"operator {call.index} (SVDF '{call.name}') has {found}: LiteRT's integer SVDF reads "
                          "weights_time and the activation state as int16 (an int8 state, TFLite Micro's form, "
                          "is read as int16 past its end); `qconvert run` executes the int16-state form")
    rank = int(call.options.get("rank", 1) or 0)
    batch, n_input = x.shape[0], int(np.prod(x.shape[1:]))
    n_filter, n_memory = wf.shape[0], wt.shape[1]
    if rank < 1 or n_filter % rank or state.size != batch * n_filter * n_memory or wf.shape[1] != n_input:
        raise KernelError(f"operator {call.index} (SVDF '{call.name}'): rank {rank}, weights {list(wf.shape)} / "
                          f"{list(wt.shape)} and state {list(state.shape)} do not fit input {list(x.shape)}")
    n_unit = n_filter // rank
    m, s = call.pairs(2)
    rows = x.reshape(batch, n_input).astype(I64) - call.input_zps[0]
    feature = wrap32(rows @ wf.astype(I64).T)  # [batch, n_filter]
    newest = np.clip(mbqm(feature, m[0], s[0]), -32768, 32767)
    memory = state.astype(I64).reshape(batch, n_filter, n_memory)
    memory = np.concatenate([memory[:, :, 1:], newest[:, :, None]], axis=2)
    time = wrap32((memory * wt.astype(I64)[None]).sum(axis=2))  # [batch, n_filter]
    acc = wrap32(time.reshape(batch, n_unit, rank).sum(axis=2))
    if bias is not None:
        acc = wrap32(acc + bias.astype(I64).reshape(1, n_unit))
    lo, hi = call.clamp()
    y = np.clip(mbqm(acc, m[1], s[1]) + call.output_zp, lo, hi).astype(np.int8)
    return y.reshape(call.output_shape), memory.reshape(state.shape).astype(np.int16)


def svdf(call: Any) -> np.ndarray:
    """The KERNELS entry: the output; the new state goes to ``call.states`` (input slot 4)."""
    y, state = svdf_with_state(call)
    call.states[4] = state
    return y
