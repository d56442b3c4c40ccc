"""``qconvert run``: execute a quantized .tflite with integers only.

The model's own arithmetic uses the int8/int32 buffers (int16 activations and int64 biases
in a 16x8 file, int8 values of INT4 weights, uint8 in TFLite's older files), the zero points,
and the multipliers, shifts and clamps of the ``qconvert_requant`` metadata, never a float
scale while running. A file without that metadata (another converter's) gets the same records
computed once, at load, from its float32 scales by the converter's own requant function
(``computed`` is then true). Float scales are otherwise read at the boundary only: a QUANTIZE
that takes a float32 model input, a DEQUANTIZE that gives a float32 model output, and float
data fed to an integer input when the caller asks for it (``quantize_inputs``). A float island
(``--keep-float``: DEQUANTIZE → float ops → QUANTIZE) computes in float32 as LiteRT REF's float
kernels do (``float_ref.py``), its QUANTIZE/DEQUANTIZE reading their scales like the boundary's.

    model = IntegerModel(open("m.tflite", "rb").read())
    outputs = model.run({"input": x_int8})                 # output name -> array
    outputs, trace = model.run(feeds, trace=True)          # every tensor, by name

State: the VARIABLE tensors of SVDF (its activation state) and UNIDIRECTIONAL_SEQUENCE_LSTM (its
output and cell states) start every ``run()`` as LiteRT's freshly allocated interpreter has them
(``ResetVariableTensor``: an int8 state at its zero point, others at 0): each run is one
invocation of a fresh interpreter, no state carries from one run to the next. The trace shows a
state as its op left it, as LiteRT's tensors do after ``invoke()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from qconvert.errors import KernelError, RunError
from qconvert.ops import Form16, Rule, custom_row, float_operands, requant, row
from qconvert.ops.recipes import sum_ as requant_sum
from qconvert.ops.recipes_seq import LSTM_PAIR_CELL_SCALE, unidirectional_sequence_lstm
from qconvert.quant import round_half_away_array
from qconvert.quant.requant import operand as requant_operand
from qconvert.runtime.float_ref import FLOAT_KERNELS
from qconvert.runtime.int_math import ROUNDINGS, rounding
from qconvert.runtime.kernels import KERNELS, OpCall
from qconvert.schema import flexbuffer
from qconvert.schema.reader import read_model
from qconvert.schema.requant_metadata import METADATA_NAME, decode

CUSTOM_KERNELS = sorted(name for name in KERNELS if custom_row("CUSTOM", name) is not None)  # run executes these

RUNTIMES = ("litert-ref", "tflm")  # whose integer arithmetic `run` reproduces
MAX_ELEMENTS = 1 << 28  # per tensor: a damaged shape is refused, not allocated


def _converts(op: Any) -> bool:
    """QUANTIZE / DEQUANTIZE: at a float32 model input or output they quantize or
    dequantize with the file's scale (the float boundary); QUANTIZE int8 → int8 is a kernel."""
    r = row(op.builtin)
    return r is not None and r.rule is Rule.QUANT


def _float_op(op: Any, tensors: Any) -> bool:
    """An op of a float island (``--keep-float``): a float32 result, not QUANTIZE/DEQUANTIZE, not an
    op on raw values (CAST, TILE) nor a custom op (both checked on their own)."""
    r = row(op.builtin)
    return (bool(op.outputs) and tensors[op.outputs[0]].dtype == "float32" and not _converts(op)
            and op.custom_code is None and not (r is not None and r.any_type))


def float_kind(sg: Any) -> tuple[str, str] | None:
    """("hybrid", what) for a dynamic-range file (an op with float32 activations and int8 constant
    weights), ("float16", what) for float16 constants, None otherwise: the two float kinds of
    files TensorFlow writes (``--activations float``), which `run` names when it refuses them."""
    for k, op in enumerate(sg.operators):
        r = row(op.builtin)
        if r is None or r.hybrid is None:
            continue
        slots = r.operand_slots
        if max(slots[0], slots[1]) >= len(op.inputs) or min(op.inputs[slots[0]], op.inputs[slots[1]]) < 0:
            continue
        x, w = sg.tensors[op.inputs[slots[0]]], sg.tensors[op.inputs[slots[1]]]
        if x.dtype == "float32" and w.data is not None and w.dtype in ("int8", "int4") and w.blockwise is None:
            return "hybrid", (f"operator {k} ({op.builtin} '{_show(sg.tensors[op.outputs[0]].name)}') is hybrid: "
                              f"float32 activations, {w.dtype} weights '{_show(w.name)}'")
    half = next((t for t in sg.tensors if t.dtype == "float16" and t.data is not None), None)
    if half is not None:
        return "float16", f"constant '{_show(half.name)}' is float16 (read through DEQUANTIZE)"
    return None


def _show(name: str) -> str:
    """A tensor name fit for a one-line message (a damaged file may hold any bytes)."""
    text = "".join(c if c.isprintable() else "?" for c in str(name))
    return text if len(text) <= 80 else text[:77] + "..."


_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
# the element types of an op that copies or converts raw values (the row's any_type: CAST, TILE): LiteRT's
# kernels take these and more (float16, bfloat16, complex64, int4, strings), which `run` does not hold
RAW_TYPES = ("bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "float32", "float64")


def quantize_float(x: np.ndarray, scale: float, zero_point: int, dtype: str = "int8") -> np.ndarray:
    """The float boundary (reference AffineQuantize): ``round(x / scale)`` in float32, ties
    away from zero, plus the zero point, clamped to int8 (int16)."""
    q = round_half_away_array((np.asarray(x, np.float32) / np.float32(scale)).astype(np.float32))
    return np.clip(q.astype(np.int64) + int(zero_point), *_RANGES[dtype]).astype(dtype)


class IntegerModel:
    def __init__(self, data: bytes, integer_fully_connected: bool = False, runtime: str = "litert-ref",
                 rounding: str = "double") -> None:
        """``runtime``: whose arithmetic to reproduce, LiteRT's reference kernels (``litert-ref``) or
        TFLite Micro's (``tflm``: FULLY_CONNECTED by the 31-bit multiplier). ``rounding``: how
        MultiplyByQuantizedMultiplier rounds (``qconvert.runtime.int_math.ROUNDINGS``); any but
        ``double`` also takes FULLY_CONNECTED by the multiplier, as such builds do."""
        if runtime not in RUNTIMES:
            raise RunError(f"runtime {runtime!r}: choose {', '.join(RUNTIMES)}")
        if rounding not in ROUNDINGS:
            raise RunError(f"rounding {rounding!r}: choose {', '.join(ROUNDINGS)}")
        self.runtime, self.rounding = runtime, rounding
        self.integer_fully_connected = integer_fully_connected or runtime == "tflm" or rounding != "double"
        try:
            self.model = read_model(data)
        except ValueError as exc:
            raise RunError(str(exc)) from None
        if len(self.model.subgraphs) != 1:
            raise RunError(f"the model has {len(self.model.subgraphs)} subgraphs; `qconvert run` runs one")
        block = next((t for t in self.model.tensors if t.blockwise is not None), None)
        if block is not None:
            raise RunError(f"tensor '{_show(block.name)}' has blockwise (sub-channel) quantization: `qconvert run` "
                           "executes int8 models with per-tensor or per-channel parameters; run this one in "
                           "LiteRT (XNNPACK)")
        kind = float_kind(self.model.subgraphs[0])
        if kind is not None:
            raise RunError(f"a {'dynamic-range' if kind[0] == 'hybrid' else 'float16'} file ({kind[1]}): "
                           f"`qconvert run` executes integer kernels only, and this file computes in float; "
                           f"run it in LiteRT")
        activations = [t for t in self.model.tensors if t.data is None]
        if activations and all(t.dtype == "float32" for t in activations) and \
                any(_float_op(op, self.model.tensors) for op in self.model.operators):  # (raw copies, custom ops run)
            raise RunError("a float file (every activation is float32): `qconvert run` executes quantized files, "
                           "float ops only in islands between a DEQUANTIZE and a QUANTIZE; run it in LiteRT")
        raw = self.model.metadata.get(METADATA_NAME)
        ops = self.model.operators
        self.computed = raw is None  # no qconvert metadata: the parameters from the file's scales
        if raw is None:
            records = self._records_from_scales()
        else:
            try:
                records = decode(raw)
            except ValueError as exc:
                raise RunError(str(exc)) from None
        self.records = {r.op_index: r for r in records if r.subgraph_index == 0}
        for r in self.records.values():
            if r.op_index >= len(ops) or ops[r.op_index].builtin != r.builtin:
                raise RunError(f"{METADATA_NAME} record for operator {r.op_index} ({r.builtin}) does not match "
                               "the model's operators")
        self.tensors = self.model.tensors
        self.custom_options: dict[int, dict[str, Any]] = {}  # the custom ops' decoded options, by operator
        for i, op in enumerate(ops):
            if not op.outputs or any(not -1 <= t < len(self.tensors) for t in op.inputs + op.outputs):
                raise RunError(f"operator {i} ({op.builtin}) names a tensor the model does not have")
            if op.custom_code is not None and custom_row(op.builtin, op.custom_code) is None:  # ethos-u, ...
                raise RunError(f"operator {i} is the custom op '{_show(op.custom_code or '?')}' "
                               f"('{self._name(op)}'): `qconvert run` executes TFLite's builtin ops and the custom "
                               f"op{'s' if len(CUSTOM_KERNELS) > 1 else ''} {', '.join(CUSTOM_KERNELS)}; run this "
                               "file where that op is registered")
            if custom_row(op.builtin, op.custom_code) is not None:
                self._check_custom(i, op)
                continue
            if _float_op(op, self.model.tensors):
                self._check_float(i, op)
                continue
            if op.builtin not in KERNELS and not _converts(op):
                raise RunError(f"operator {i} ({op.builtin} '{self._name(op)}') has no integer kernel; "
                               f"`qconvert run` supports {', '.join(sorted({*KERNELS, 'DEQUANTIZE'}))}")
            self._check_types(i, op)
        for t in self.tensors:
            if t.dtype in _RANGES and t.data is None and any(not _RANGES[t.dtype][0] <= z <= _RANGES[t.dtype][1]
                                                             for z in t.zero_point):
                raise RunError(f"{t.dtype} tensor '{_show(t.name)}' has a zero point outside {list(_RANGES[t.dtype])}")
            if any(d < 0 for d in t.shape) or int(np.prod(t.shape, dtype=np.float64)) > MAX_ELEMENTS:
                raise RunError(f"tensor '{_show(t.name)}' has shape {list(t.shape)}; `qconvert run` needs "
                               f"static shapes of at most {MAX_ELEMENTS} elements")
        if runtime == "tflm":
            self._check_tflm_lstms()
        self.notes = self._litert_ref_notes() if runtime == "litert-ref" else []
        self.input_names = [self.tensors[i].name for i in self.model.inputs]
        self.output_names = [self.tensors[i].name for i in self.model.outputs]

    def _litert_ref_notes(self) -> list[str]:
        """Where `run` follows LiteRT's optimized kernel, not its reference one: an int8 SUM whose input and
        output parameters differ (the rescaling path). LiteRT 2.3's reference kernel gives wrong values there
        (measured: -3 dB against the float model where the optimized kernel gives 30 dB; its outputs fit a sum
        of the int8 values read as uint8, clamped to [0, 255]); `run` computes the sum rescaled by the
        integer multiplier, equal to the optimized kernel on 72-74 % of outputs and within 1 LSB on all."""
        notes = []
        for k, op in enumerate(self.model.operators):
            r = row(op.builtin)
            if r is None or r.requant is not requant_sum or not op.inputs or not op.outputs:
                continue
            x, y = self.tensors[op.inputs[0]], self.tensors[op.outputs[0]]
            if x.dtype == y.dtype == "int8" and (tuple(np.float32(x.scale)), x.zero_point) != (
                    tuple(np.float32(y.scale)), y.zero_point):
                notes.append(f"operator {k} (SUM '{_show(y.name)}') is an int8 SUM that rescales: LiteRT's reference "
                             "kernel (BUILTIN_REF) computes it wrongly (about 0 dB), so `run` follows LiteRT's "
                             "optimized kernel there (within 1 LSB), not BUILTIN_REF")
        return notes

    def _check_tflm_lstms(self) -> None:
        """The LSTM kernel here is LiteRT's, and TFLite Micro's differs (measured: 1 of 160 outputs 1 LSB
        apart at a 2^-14 cell scale; below 2^-15 TFLite Micro computes tanh(c) where LiteRT writes
        nothing): `--runtime tflm` refuses an LSTM rather than pass LiteRT's result off as TFLite Micro's."""
        for k, op in enumerate(self.model.operators):
            r_, rec = row(op.builtin), self.records.get(k)
            if r_ is None or r_.requant is not unidirectional_sequence_lstm or rec is None:
                continue
            log2 = rec.pairs[LSTM_PAIR_CELL_SCALE][0]
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}', cell state scale 2^{log2}): `run "
                           "--runtime tflm` has LiteRT's integer LSTM, not TFLite Micro's; run this file in "
                           "TFLite Micro itself")

    def _records_from_scales(self) -> list[Any]:
        """A file another converter wrote: what each kernel's Prepare derives from the file's
        float32 scales, by the function the converter stores its records with
        (``qconvert.ops.requant``). The floats are read here, once, never while running."""
        tensors = self.model.tensors

        def operand(i: int) -> Any:
            if i < 0 or i >= len(tensors):
                return None
            t = tensors[i]
            return requant_operand(t.name, t.scale or (), t.zero_point or (), t.shape, t.dtype)

        records = []
        for k, op in enumerate(self.model.operators):
            if not op.outputs or _converts(op) and op.builtin not in KERNELS:
                continue
            out, x = operand(op.outputs[0]), operand(op.inputs[0]) if op.inputs else None
            if out is None or not out.scale or out.dtype not in _RANGES and not (  # float or int32: nothing to derive
                    _converts(op) and out.dtype == "int32"):  # but QUANTIZE int16 -> int32 (TFLite Micro's files)
                continue
            if _converts(op) and (x is None or x.dtype not in _RANGES):  # QUANTIZE of a float input: the boundary
                continue
            try:
                # the op's intermediates (LSTM's) follow its inputs
                rec = requant(op.builtin, [operand(i) for i in op.inputs + op.intermediates], out, op.options, k)
            except (ValueError, ArithmeticError, IndexError, KeyError, TypeError) as exc:
                raise RunError(f"operator {k} ({op.builtin} '{_show(out.name)}'): its quantization parameters "
                               f"cannot be turned into integer ones ({exc})") from None
            if rec is not None:
                records.append(rec)
        return records

    def _check_types(self, k: int, op: Any) -> None:
        """int8 activations, or int16 ones (16x8; int32/int64 only for biases, shapes and axes);
        float only at the boundary; QUANTIZE may change int8 to int16 and back, SOFTMAX int8 to
        int16. A state (VARIABLE) tensor is not an activation slot: SVDF and LSTM kernels check
        their int16 states themselves."""
        r = row(op.builtin)
        if r is not None and r.any_type:  # CAST, TILE: raw values of any type, no parameters read
            self._check_raw_types(k, op)
            return
        slots = float_operands(op.builtin, op.inputs)  # activations, not shapes or axes (RESHAPE's shape)
        acts = [t for t in [op.inputs[j] for j in slots] + op.outputs if t >= 0 and self.tensors[t].data is None
                and not (t in op.outputs and self.tensors[t].dtype in ("int32", "int64"))]  # ARG_MAX's index
        kinds = {self.tensors[t].dtype for t in acts}
        boundary = _converts(op) and len(kinds - {"float32"}) == 1 and kinds - {"float32"} <= set(_RANGES)
        requantize = _converts(op) and op.builtin in KERNELS and len(kinds) == 2 and kinds <= set(_RANGES)
        shapes = kinds == {"int32"} and r is not None and r.int32_shapes  # int32 shape arithmetic (SHAPE → PACK)
        widening = r is not None and r.int8_to_int16 and kinds == {"int8", "int16"} and all(
            self.tensors[t].dtype == "int16" for t in op.outputs)  # int8 in, int16 out
        if not (len(kinds) == 1 and kinds <= set(_RANGES)) and not boundary and not requantize and not shapes \
                and not widening:
            main = self.tensors[op.outputs[0]].dtype if self.tensors[op.outputs[0]].dtype in _RANGES else "int8"
            odd = next(t for t in acts if self.tensors[t].dtype != main)
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') has a {self.tensors[odd].dtype} "
                           f"tensor '{_show(self.tensors[odd].name)}'; `qconvert run` executes int8 and 16x8 "
                           "models (float only at the model's inputs and outputs and in float islands)")
        for kind, supported in (("int16", r is not None and r.form16 is Form16.RUN),
                                ("uint8", r is not None and r.uint8)):
            if kind in kinds and not supported and not _converts(op):
                raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') is {kind}: `qconvert run` has no "
                               f"{kind} kernel for {op.builtin}; run this file in LiteRT")
        for t in acts:
            if self.tensors[t].dtype in _RANGES and not self.tensors[t].zero_point:
                raise RunError(f"{self.tensors[t].dtype} tensor '{_show(self.tensors[t].name)}' has no zero point")

    def _check_float(self, k: int, op: Any) -> None:
        """An op of a float island: float32 activations in and out, float32 constants (int32/int64 for
        shapes and axes), and a float kernel here that computes what LiteRT REF's does, to the bit."""
        if op.builtin not in FLOAT_KERNELS:
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') is float32: `qconvert run` executes "
                           f"float islands of {', '.join(sorted(FLOAT_KERNELS))}; run this file in LiteRT")
        slots = float_operands(op.builtin, op.inputs)
        for j, i in enumerate(op.inputs):
            if i < 0:
                continue
            t = self.tensors[i]
            float_slot = j in slots or t.data is not None and t.dtype not in ("int32", "int64")
            if (t.dtype != "float32") if float_slot else (t.dtype not in ("int32", "int64")):
                raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') is float32 but its operand "
                               f"'{_show(t.name)}' is {t.dtype}; `qconvert run` executes float ops on float32 "
                               "operands (a DEQUANTIZE before each quantized one)")

    def _check_custom(self, k: int, op: Any) -> None:
        """A custom op ``run`` executes (its row's ``custom``): float32 operands, every one given (its
        constants float32 too: the anchors), and options that decode as a FlexBuffer map. Its float32
        outputs are read by a QUANTIZE (the float boundary) or are the model's outputs."""
        options = flexbuffer.decode(op.custom_options or b"")
        if not isinstance(options, dict):
            raise RunError(f"operator {k} (custom op '{op.custom_code}' '{self._name(op)}'): its custom options are "
                           "not a FlexBuffer map; LiteRT's kernel reads its attributes from one")
        self.custom_options[k] = options
        for i in op.inputs + op.outputs:
            if i < 0 or self.tensors[i].dtype != "float32":
                what = "is missing" if i < 0 else f"is {self.tensors[i].dtype} ('{_show(self.tensors[i].name)}')"
                raise RunError(f"operator {k} (custom op '{op.custom_code}' '{self._name(op)}'): an operand {what}; "
                               "`qconvert run` executes it on float32 operands (as qconvert and TensorFlow's float "
                               "files write it)")

    def _check_raw_types(self, k: int, op: Any) -> None:
        """An op that copies or converts raw values (the row's ``any_type``: CAST, TILE) takes any of
        ``RAW_TYPES``, as LiteRT's kernel does; one that is not a conversion (rule RAW) keeps its
        input's type, and its other operands (TILE's multiples) are int32 or int64. A float32 output
        is then read by a QUANTIZE (the float boundary) or is the model's output."""
        r = row(op.builtin)
        slots = float_operands(op.builtin, op.inputs)
        if not op.inputs or min(op.inputs) < 0 or len(op.outputs) != 1:
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') has inputs {op.inputs} and outputs "
                           f"{op.outputs}; `qconvert run` needs every input and one output")
        data = [self.tensors[op.inputs[j]] for j in slots] + [self.tensors[op.outputs[0]]]
        odd = next((t for t in data if t.dtype not in RAW_TYPES), None)
        if odd is not None:
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') has a {odd.dtype} tensor "
                           f"'{_show(odd.name)}'; `qconvert run` executes {op.builtin} on {', '.join(RAW_TYPES)}")
        if r is not None and r.rule is not Rule.RAW and len({t.dtype for t in data}) > 1:
            raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}') takes {data[0].dtype} to "
                           f"{data[-1].dtype}; TFLite's {op.builtin} keeps its input's type")
        for j, i in enumerate(op.inputs):
            if j not in slots and self.tensors[i].dtype not in ("int32", "int64"):
                raise RunError(f"operator {k} ({op.builtin} '{self._name(op)}'): operand {j} "
                               f"'{_show(self.tensors[i].name)}' is {self.tensors[i].dtype}; TFLite's {op.builtin} "
                               "takes int32 or int64 there")

    def _name(self, op: Any) -> str:
        return _show(self.tensors[op.outputs[0]].name) if op.outputs else "?"

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
            raise RunError(f"input '{_show(t.name)}' is {list(value.shape)}, the model wants {list(t.shape)}")
        if value.dtype == np.dtype(t.dtype):
            return value
        if value.dtype.kind == "f" and t.dtype in _RANGES and quantize_inputs:
            return quantize_float(value, t.scale[0], self._zp(index), t.dtype)
        hint = " (pass --quantize-inputs to quantize float data with the input's scale)" if (
            value.dtype.kind == "f" and t.dtype in _RANGES) else ""
        raise RunError(f"input '{_show(t.name)}' is {value.dtype}, the model wants {t.dtype}{hint}")

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
        values.update(self._initial_states())
        for index, name in zip(self.model.inputs, names):
            values[index] = self._feed(index, feeds[name], quantize_inputs)
        for k, op in enumerate(self.model.operators):
            y = self._execute(k, op, values)
            for index, value in zip(op.outputs, y if isinstance(y, list) else [y]):
                values[index] = value
        outputs = {self.tensors[i].name: self._value(i, values) for i in self.model.outputs}  # may be a constant
        if not trace:
            return outputs
        return outputs, {self.tensors[i].name: v for i, v in values.items()}

    def run_op(self, k: int, tensors: Mapping[Any, np.ndarray]) -> np.ndarray:
        """Operator ``k`` alone, its inputs taken from ``tensors`` (name → array, or tensor index →
        array where names are not unique): for checking one kernel against another runtime's
        tensors. A state (VARIABLE) input starts as in :meth:`run`, whatever ``tensors`` holds
        (another runtime's state tensor shows its value after the op)."""
        op = self.model.operators[k]
        values = self._initial_states()
        values.update({i: np.asarray(tensors[i] if i in tensors else tensors[self.tensors[i].name]) for i in op.inputs
                       if i >= 0 and self.tensors[i].data is None and not self.tensors[i].is_variable})
        return self._execute(k, op, values)

    def _initial_states(self) -> dict[int, np.ndarray]:
        """The VARIABLE tensors as a fresh LiteRT interpreter has them: int8 at the zero point, else 0."""
        return {i: np.full(t.shape, self._zp(i) if t.dtype == "int8" else 0, dtype=t.dtype)
                for i, t in enumerate(self.tensors) if t.is_variable and t.data is None and t.dtype in _RANGES}

    def _value(self, index: int, values: dict[int, np.ndarray]) -> np.ndarray | None:
        if index < 0:
            return None
        if index in values:
            return values[index]
        t = self.tensors[index]
        array = t.array()
        if array is None and t.dtype in RAW_TYPES and 0 in t.shape:  # no elements: an empty buffer, as LiteRT has it
            return np.zeros(t.shape, t.dtype)
        if array is None:
            raise RunError(f"tensor '{_show(self.tensors[index].name)}' is read before it is computed")
        return array

    def _execute(self, k: int, op: Any, values: dict[int, np.ndarray]) -> Any:
        out = self.tensors[op.outputs[0]]
        where = f"operator {k} ({op.builtin} '{_show(out.name)}')"
        try:
            inputs = [self._value(i, values) for i in op.inputs]
        except (ValueError, TypeError) as exc:  # a constant whose bytes do not fit its shape or type
            raise RunError(f"{where}: an input cannot be read: {exc}") from None
        if _float_op(op, self.tensors):  # a float island's op: LiteRT REF's float32 kernel
            try:
                y = FLOAT_KERNELS[op.builtin](op.options, *inputs, output_shape=tuple(out.shape))
            except (ValueError, IndexError, TypeError, KeyError, MemoryError) as exc:
                raise RunError(f"{where} cannot run: {type(exc).__name__}: "
                               f"{_show(str(exc).splitlines()[0]) if str(exc) else ''}") from None
            if tuple(y.shape) != tuple(out.shape):
                raise RunError(f"{where} computes shape {list(y.shape)}, the file declares {list(out.shape)}")
            return y.astype(np.float32, copy=False)
        custom = k in self.custom_options
        for i, v in zip(op.inputs, inputs):
            if not custom and v is not None and self.tensors[i].data is not None and v.dtype.name not in ("int8", "uint8", "int16",
                                                                                           "int32", "int64"):
                raise RunError(f"{where}: constant '{_show(self.tensors[i].name)}' is {v.dtype.name}; an integer "
                               "model's constants are int8 weights, int16 operands, int32/int64 biases and shapes")
        if _converts(op) and inputs[0].dtype == np.float32:  # float boundary: quantize
            return quantize_float(inputs[0], out.scale[0], self._zp(op.outputs[0]), out.dtype)
        if _converts(op) and out.dtype == "float32":  # float boundary: dequantize
            src = self.tensors[op.inputs[0]]
            return ((inputs[0].astype(np.int32) - self._zp(op.inputs[0])).astype(np.float32)
                    * np.float32(src.scale[0])).astype(np.float32)
        kernel = KERNELS[op.custom_code if custom else op.builtin]
        call = OpCall(
            index=k, builtin=op.builtin, name=_show(out.name), options=self.custom_options.get(k, op.options),
            inputs=inputs,
            input_zps=[self._zp(i) if i >= 0 else 0 for i in op.inputs], output_zp=self._zp(op.outputs[0]),
            output_shape=tuple(out.shape), record=self.records.get(k),
            integer_fully_connected=self.integer_fully_connected, output_dtype=out.dtype,
            input_scales=[float(self.tensors[i].scale[0]) if i >= 0 and self.tensors[i].scale else 0.0
                          for i in op.inputs],
            output_scale=float(out.scale[0]) if out.scale else 0.0,
        )
        try:
            with rounding(self.rounding):
                y = kernel(call)
        except KernelError as exc:
            raise RunError(str(exc)) from None
        except (ValueError, IndexError, TypeError, KeyError, MemoryError, ArithmeticError) as exc:  # a damaged file
            raise RunError(f"{where} cannot run: {type(exc).__name__}: "
                           f"{_show(str(exc).splitlines()[0]) if str(exc) else ''}") from None
        if isinstance(y, list):  # one array per output (SPLIT, SPLIT_V, UNPACK)
            if len(y) != len(op.outputs):
                raise RunError(f"{where} computes {len(y)} outputs, the file declares {len(op.outputs)}")
            for value, index in zip(y, op.outputs):
                if custom and self.tensors[index].shape == ():  # unknown: the kernel sets it, as LiteRT's Prepare
                    continue
                if tuple(value.shape) != tuple(self.tensors[index].shape):
                    raise RunError(f"{where} computes shape {list(value.shape)} for output "
                                   f"'{_show(self.tensors[index].name)}', the file declares "
                                   f"{list(self.tensors[index].shape)}")
            return y
        if tuple(y.shape) != tuple(out.shape):
            raise RunError(f"{where} computes shape {list(y.shape)}, the file declares {list(out.shape)}")
        for slot, state in call.states.items():  # SVDF, LSTM: their state tensors as the op leaves them
            values[op.inputs[slot]] = state
        return y
