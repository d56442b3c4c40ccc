"""Calibration samples from files: ``--calibration-data PATH``.

* ``.npz``: one array per graph input, named like the input, samples on axis 0
  (``[N, *shape[1:]]``; a single sample may also be given as ``shape`` or ``shape[1:]``).
* ``.npy``: the same for a model with one input.
* a directory: every ``.npz`` / ``.npy`` file in it, in name order, concatenated.

``--calibration-samples N`` keeps N samples: all of them in order when there are at
most N, else N drawn without replacement with ``--seed`` (the same N every run).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from qconvert.converter.ir import ConversionError


def as_samples(name: str, array: np.ndarray, shape: Sequence[int] | None, where: str) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.kind not in "fiub":
        raise ConversionError(f"{where}: array for input '{name}' has dtype {a.dtype}, not numbers")
    a = a.astype(np.float32)
    if shape is not None:
        want = tuple(int(d) for d in shape[1:])
        if a.shape == tuple(shape) or a.shape == want:
            a = a.reshape(1, *want)
        elif a.shape[1:] != want:
            raise ConversionError(
                f"{where}: array for input '{name}' has shape {list(a.shape)}; expected "
                f"[N, {', '.join(map(str, want))}] (input shape {list(shape)})")
    if not np.all(np.isfinite(a)):
        raise ConversionError(f"{where}: array for input '{name}' contains NaN or infinite values")
    return a


def _load_file(path: Path, inputs: Mapping[str, Sequence[int] | None]) -> dict[str, np.ndarray]:
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ConversionError(f"cannot read calibration data '{path}': {exc}") from None
    if isinstance(data, np.ndarray):
        if len(inputs) != 1:
            raise ConversionError(
                f"{path}: a .npy file holds one array, but the model has {len(inputs)} inputs "
                f"({', '.join(inputs)}); use a .npz with one array per input")
        (name, shape), = inputs.items()
        return {name: as_samples(name, data, shape, str(path))}
    with data:
        keys = list(data.files)
        missing = [n for n in inputs if n not in keys]
        if missing and len(inputs) == 1 and len(keys) == 1:  # one input, one array: names need not match
            (name, shape), = inputs.items()
            return {name: as_samples(name, data[keys[0]], shape, str(path))}
        if missing:
            raise ConversionError(f"{path}: no array named '{missing[0]}' (arrays: {', '.join(keys) or 'none'}); "
                                  f"the model's inputs are {', '.join(inputs)}")
        return {n: as_samples(n, data[n], s, str(path)) for n, s in inputs.items()}


def load_samples(path: str | os.PathLike, inputs: Mapping[str, Sequence[int] | None],
                 limit: int | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """``{input name: float32 [N, ...]}`` from a file or directory (see the module docstring)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".npz", ".npy"))
        if not files:
            raise ConversionError(f"calibration data directory '{p}' has no .npz or .npy files")
    elif p.is_file():
        files = [p]
    else:
        raise ConversionError(f"calibration data '{p}' does not exist")
    parts = [_load_file(f, inputs) for f in files]
    samples = {n: np.concatenate([part[n] for part in parts]) for n in inputs}
    counts = {n: len(a) for n, a in samples.items()}
    if len(set(counts.values())) != 1:
        raise ConversionError(f"calibration data: inputs have different sample counts: {counts}")
    n = next(iter(counts.values()))
    if n == 0:
        raise ConversionError(f"calibration data '{p}' has no samples")
    if limit is not None and limit < n:
        pick = np.sort(np.random.default_rng(seed).choice(n, size=limit, replace=False))
        samples = {k: v[pick] for k, v in samples.items()}
    return samples
