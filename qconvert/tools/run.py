"""``qconvert run MODEL.tflite --input x.npz``: the command around :class:`IntegerModel`.

Inputs: a ``.npz`` with one array per model input (named like the input; with one input
the name may differ), or a ``.npy`` for a one-input model. An array shaped like the input
is one sample; one with an extra leading axis ``[N, *input shape]`` — or, for a batch-1
input, N on the batch axis — is N samples, run one after another; the outputs come back
the same way (stacked on a new leading axis, or on their batch axis).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from qconvert.calibration.data import load_arrays
from qconvert.io import write_atomic
from qconvert.runtime.interpreter import IntegerModel, RunError
from qconvert.tools.text import table as text_table


def read_model(path: str | os.PathLike, integer_fully_connected: bool = False, runtime: str = "litert-ref",
               rounding: str = "double") -> IntegerModel:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RunError(f"cannot read '{path}': {exc.strerror or exc}") from None
    return IntegerModel(data, integer_fully_connected=integer_fully_connected, runtime=runtime, rounding=rounding)


def read_inputs(path: str | os.PathLike, model: IntegerModel) -> tuple[dict[str, np.ndarray], str]:
    """(name → [N, *shape] arrays, layout): "single" (one sample as the input's shape),
    "stacked" ([N, *shape]) or "batch" (N on a batch-1 input's batch axis)."""

    data = load_arrays(path, "input data")
    names = model.input_names
    if isinstance(data, np.ndarray):
        if len(names) != 1:
            raise RunError(f"{path}: a .npy holds one array; the model has inputs {names}: use a .npz")
        arrays = {names[0]: data}
    else:
        with data:
            keys = list(data.files)
            if len(names) == 1 and len(keys) == 1:
                arrays = {names[0]: data[keys[0]]}
            else:
                missing = [n for n in names if n not in keys]
                if missing:
                    raise RunError(f"{path}: no array named '{missing[0]}' (arrays: {', '.join(keys) or 'none'}); "
                                   f"the model's inputs are {', '.join(names)}")
                arrays = {n: data[n] for n in names}
    counts: set[int] = set()
    layouts: set[str] = set()
    out = {}
    for d in model.input_details():
        a = np.asarray(arrays[d["name"]])
        shape = tuple(d["shape"])
        if a.shape == shape:
            out[d["name"]] = a[None]
            counts.add(1)
            layouts.add("single")
        elif a.shape[1:] == shape:
            out[d["name"]] = a
            counts.add(len(a))
            layouts.add("stacked")
        elif shape and shape[0] == 1 and a.ndim == len(shape) and a.shape[1:] == shape[1:]:
            out[d["name"]] = a[:, None]  # samples on the batch axis, as for --calibration-data
            counts.add(len(a))
            layouts.add("batch")
        else:
            raise RunError(f"{path}: array '{d['name']}' is {list(a.shape)}; the input is {list(shape)} "
                           f"(or [N, {', '.join(map(str, shape[1:]))}] for N samples)")
    if len(counts) != 1 or len(layouts) != 1:
        raise RunError(f"{path}: the arrays hold different numbers of samples")
    return out, layouts.pop()


def run_samples(model: IntegerModel, feeds: dict[str, np.ndarray], trace: bool = False,
                quantize_inputs: bool = False) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Run every sample; (outputs, traced tensors), each stacked on a leading sample axis."""
    n = len(next(iter(feeds.values())))
    outs: dict[str, list[np.ndarray]] = {}
    traced: dict[str, list[np.ndarray]] = {}
    for k in range(n):
        result = model.run({name: a[k] for name, a in feeds.items()}, trace=trace, quantize_inputs=quantize_inputs)
        o, t = result if trace else (result, {})
        for name, v in o.items():
            outs.setdefault(name, []).append(v)
        for name, v in t.items():
            traced.setdefault(name, []).append(v)
    return ({k: np.stack(v) for k, v in outs.items()}, {k: np.stack(v) for k, v in traced.items()})


def _unstack(v: np.ndarray) -> np.ndarray:
    """[N, 1, ...] → [N, ...] (per-sample tensors with a batch axis of 1)."""
    return v.reshape(v.shape[0], *v.shape[2:]) if v.ndim >= 2 and v.shape[1] == 1 else v


def _summary(name: str, v: np.ndarray) -> list[str]:
    flat = v.reshape(-1)
    row = [name, f"{v.dtype}", "[" + ",".join(map(str, v.shape)) + "]",
           f"{flat.min()}" if flat.size else "-", f"{flat.max()}" if flat.size else "-"]
    return row


def run_command(model_path: str, input_path: str, output: str | None, trace: bool,
                quantize_inputs: bool, integer_fully_connected: bool = False, runtime: str = "litert-ref",
                rounding: str = "double", notes: list[str] | None = None) -> str:
    """The command's output text; ``notes`` (when given) receives the model's notes (where `run` departs
    from LiteRT REF on purpose: an int8 SUM that rescales)."""
    model = read_model(model_path, integer_fully_connected, runtime, rounding)
    if notes is not None:
        notes.extend(model.notes)
    feeds, layout = read_inputs(input_path, model)
    outputs, traced = run_samples(model, feeds, trace=trace, quantize_inputs=quantize_inputs)
    if layout == "single":  # single samples in, single samples out
        outputs = {k: v[0] for k, v in outputs.items()}
        traced = {k: v[0] for k, v in traced.items()}
    elif layout == "batch":  # samples on the batch axis in, on the batch axis out
        outputs = {k: _unstack(v) for k, v in outputs.items()}
        traced = {k: _unstack(v) for k, v in traced.items()}
    lines = []
    if trace:
        rows = [["#", "op", "output", "dtype", "shape", "min", "max"]]
        for k, op in enumerate(model.model.operators):
            name = model.tensors[op.outputs[0]].name
            rows.append([str(k), op.builtin] + _summary(name, traced[name]))
        lines += text_table(rows, right=(0, 5, 6)) + [""]
    rows = [["output", "dtype", "shape", "min", "max"]] + [_summary(k, v) for k, v in outputs.items()]
    lines += text_table(rows, right=(3, 4))
    for name, v in outputs.items():
        if v.size <= 32:
            lines.append(f"{name} = {np.array2string(v, separator=', ', max_line_width=100)}")
    if output:
        buf = io.BytesIO()
        arrays = {**traced, **outputs}
        np.savez(buf, **arrays)
        write_atomic(output, buf.getvalue())
        lines.append(f"wrote {output} ({len(arrays)} arrays)")
    return "\n".join(lines) + "\n"
