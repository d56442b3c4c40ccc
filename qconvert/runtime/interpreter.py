"""``qconvert run``: execute a qconvert .tflite with integers only.

The model's own arithmetic uses the int8/int32 buffers, the zero points, and the
multipliers, shifts and clamps of the ``qconvert_requant`` metadata, never a float scale.
Float scales are read at the boundary only: a QUANTIZE that takes a float32 model input,
a DEQUANTIZE that gives a float32 model output, and float data fed to an int8 input when
the caller asks for it (``quantize_inputs``).

    model = IntegerModel(open("m.tflite", "rb").read())
    outputs = model.run({"input": x_int8})                 # output name -> array
    outputs, trace = model.run(feeds, trace=True)          # every tensor, by name
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from qconvert.converter.ir import ConversionError
from qconvert.runtime.kernels import KERNELS, KernelError, OpCall


class RunError(ConversionError):
    """Bad model or bad feeds: one line for the user."""


def _round_half_away(x: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, np.floor(x + 0.5), np.ceil(x - 0.5))


class IntegerModel:
    def __init__(self, data: bytes) -> None:
        from qconvert.schema.reader import read_model
        from qconvert.schema.requant_metadata import METADATA_NAME, decode

        try:
            self.model = read_model(data)
        except ValueError as exc:
            raise RunError(str(exc)) from None
        if len(self.model.subgraphs) != 1:
            raise RunError(f"the model has {len(self.model.subgraphs)} subgraphs; `qconvert run` runs one")
        raw = self.model.metadata.get(METADATA_NAME)
        if raw is None:
            raise RunError(f"the file has no '{METADATA_NAME}' metadata (integer multipliers and shifts): "
                           "`qconvert run` executes files qconvert wrote; convert the model with qconvert")
        try:
            records = decode(raw)
        except ValueError as exc:
            raise RunError(str(exc)) from None
        self.records = {r.op_index: r for r in records if r.subgraph_index == 0}
        ops = self.model.operators
        for r in self.records.values():
            if r.op_index >= len(ops) or ops[r.op_index].builtin != r.builtin:
                raise RunError(f"{METADATA_NAME} record for operator {r.op_index} ({r.builtin}) does not match "
                               "the model's operators")
        for i, op in enumerate(ops):
            if op.builtin not in KERNELS and op.builtin not in ("QUANTIZE", "DEQUANTIZE"):
                raise RunError(f"operator {i} ({op.builtin} '{self._name(op)}') has no integer kernel; "
                               f"`qconvert run` supports {', '.join(sorted(KERNELS))}, QUANTIZE, DEQUANTIZE")
        self.tensors = self.model.tensors
        self.input_names = [self.tensors[i].name for i in self.model.inputs]
        self.output_names = [self.tensors[i].name for i in self.model.outputs]

    def _name(self, op: Any) -> str:
        return self.tensors[op.outputs[0]].name if op.outputs else "?"

    def input_details(self) -> list[dict[str, Any]]:
        return [{"name": self.tensors[i].name, "dtype": self.tensors[i].dtype, "shape": self.tensors[i].shape}
                for i in self.model.inputs]

    def _zp(self, index: int) -> int:
        t = self.tensors[index]
        return int(t.zero_point[0]) if t.zero_point else 0

    def _feed(self, index: int, value: np.ndarray, quantize_inputs: bool) -> np.ndarray:
        t = self.tensors[index]
        value = np.asarray(value)
        if tuple(value.shape) != tuple(t.shape):
            raise RunError(f"input '{t.name}' is {list(value.shape)}, the model wants {list(t.shape)}")
        if value.dtype == np.dtype(t.dtype):
            return value
        if value.dtype.kind == "f" and t.dtype == "int8" and quantize_inputs:
            q = _round_half_away(value.astype(np.float32) / np.float32(t.scale[0])) + self._zp(index)
            return np.clip(q, -128, 127).astype(np.int8)
        hint = " (pass --quantize-inputs to quantize float data with the input's scale)" if (
            value.dtype.kind == "f" and t.dtype == "int8") else ""
        raise RunError(f"input '{t.name}' is {value.dtype}, the model wants {t.dtype}{hint}")

    def run(self, feeds: Mapping[str, np.ndarray], trace: bool = False,
            quantize_inputs: bool = False) -> Any:
        """Outputs (name → array); with ``trace``, also every tensor computed (name → array)."""
        values: dict[int, np.ndarray] = {}
        names = self.input_names
        if set(feeds) != set(names):
            if len(feeds) == len(names) == 1:
                feeds = {names[0]: next(iter(feeds.values()))}
            else:
                missing = [n for n in names if n not in feeds]
                extra = [n for n in feeds if n not in names]
                raise RunError(f"inputs given {sorted(feeds)}, the model's are {names}"
                               + (f"; missing '{missing[0]}'" if missing else f"; unknown '{extra[0]}'"))
        for index, name in zip(self.model.inputs, names):
            values[index] = self._feed(index, feeds[name], quantize_inputs)
        for k, op in enumerate(self.model.operators):
            values[op.outputs[0]] = self._execute(k, op, values)
        outputs = {self.tensors[i].name: values[i] for i in self.model.outputs}
        if not trace:
            return outputs
        return outputs, {self.tensors[i].name: v for i, v in values.items()}

    def run_op(self, k: int, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
        """Operator ``k`` alone, its inputs taken from ``tensors`` (name → array): for
        checking one kernel against another runtime's tensors."""
        op = self.model.operators[k]
        values = {i: np.asarray(tensors[self.tensors[i].name]) for i in op.inputs
                  if i >= 0 and self.tensors[i].data is None}
        return self._execute(k, op, values)

    def _value(self, index: int, values: dict[int, np.ndarray]) -> np.ndarray | None:
        if index < 0:
            return None
        if index in values:
            return values[index]
        array = self.tensors[index].array()
        if array is None:
            raise RunError(f"tensor '{self.tensors[index].name}' is read before it is computed")
        return array

    def _execute(self, k: int, op: Any, values: dict[int, np.ndarray]) -> np.ndarray:
        inputs = [self._value(i, values) for i in op.inputs]
        out = self.tensors[op.outputs[0]]
        if op.builtin == "QUANTIZE" and inputs[0].dtype == np.float32:  # float boundary
            q = _round_half_away(inputs[0] / np.float32(out.scale[0])) + self._zp(op.outputs[0])
            return np.clip(q, -128, 127).astype(np.int8)
        if op.builtin == "DEQUANTIZE":  # float boundary
            src = self.tensors[op.inputs[0]]
            return ((inputs[0].astype(np.int32) - self._zp(op.inputs[0])).astype(np.float32)
                    * np.float32(src.scale[0])).astype(np.float32)
        kernel = KERNELS["QUANTIZE_INT8"] if op.builtin == "QUANTIZE" else KERNELS[op.builtin]
        call = OpCall(
            index=k, builtin=op.builtin, name=out.name, options=op.options, inputs=inputs,
            input_zps=[self._zp(i) if i >= 0 else 0 for i in op.inputs], output_zp=self._zp(op.outputs[0]),
            output_shape=tuple(out.shape), record=self.records.get(k),
        )
        try:
            return kernel(call)
        except KernelError as exc:
            raise RunError(str(exc)) from None
