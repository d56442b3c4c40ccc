"""Calibration samples from files: ``--calibration-data PATH``.

* ``.npz``: one array per graph input, named like the input, samples on axis 0
  (``[N, *shape[1:]]``; a single sample may also be given as ``shape`` or ``shape[1:]``).
* ``.npy``: the same for a model with one input.
* a directory: every ``.npz`` / ``.npy`` file in it, in name order, concatenated; or, when it
  holds none, every ``.png`` / ``.jpg`` / ``.jpeg`` image (models with one image input,
  [1, H, W, 1 or 3]): decoded with Pillow (``pip install "qconvert[images]"``), converted to
  grey or RGB, resized to ``--image-size`` (default: the input's H, W) bilinearly, then
  ``(pixel - mean) / std`` per channel (``--mean``, ``--std``; defaults 0 and 1: pixels 0..255).

``--calibration-samples N`` keeps N samples: all of them in order when there are at
most N, else N drawn without replacement with ``--seed`` (the same N every run).
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from qconvert.errors import ConversionError


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


def load_arrays(path: str | os.PathLike, what: str):  # type: ignore[no-untyped-def]
    """``np.load`` of a .npy / .npz (never pickles), failures as one ConversionError line."""
    try:
        return np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise ConversionError(f"{what} '{path}' does not exist") from None
    except ValueError as exc:
        if "pickle" in str(exc):  # numpy's guess for bytes that are no .npy/.npz header
            raise ConversionError(f"{what} '{path}' is not a .npy or .npz file") from None
        raise ConversionError(f"cannot read {what} '{path}': {exc}") from None
    except (OSError, zipfile.BadZipFile, EOFError) as exc:
        raise ConversionError(f"cannot read {what} '{path}': {exc}") from None


def _load_file(path: Path, inputs: Mapping[str, Sequence[int] | None]) -> dict[str, np.ndarray]:
    data = load_arrays(path, "calibration data")
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


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def _per_channel(values: Sequence[float] | float, channels: int, what: str) -> np.ndarray:
    v = np.atleast_1d(np.asarray(values, dtype=np.float32))
    if v.size not in (1, channels):
        raise ConversionError(f"{what} has {v.size} values; the input has {channels} channels")
    return v


def load_images(files: Sequence[Path], name: str, shape: Sequence[int] | None,
                size: tuple[int, int] | None = None, mean: Sequence[float] | float = 0.0,
                std: Sequence[float] | float = 1.0) -> dict[str, np.ndarray]:
    if shape is None or len(shape) != 4 or shape[3] not in (1, 3):
        raise ConversionError(f"images need an image input [1, H, W, 1 or 3]; input '{name}' has shape "
                              f"{list(shape) if shape is not None else 'unknown'}")
    try:
        from PIL import Image
    except ImportError:
        raise ConversionError('reading images needs Pillow: pip install "qconvert[images]" '
                              "(or save the samples as .npz)") from None
    h, w = size if size is not None else (int(shape[1]), int(shape[2]))
    if (h, w) != (int(shape[1]), int(shape[2])):
        raise ConversionError(f"--image-size {h},{w} does not match input '{name}' of shape {list(shape)}")
    channels = int(shape[3])
    m, sd = _per_channel(mean, channels, "--mean"), _per_channel(std, channels, "--std")
    if np.any(sd == 0):
        raise ConversionError("--std must not be 0")
    rows = []
    for f in files:
        try:
            with Image.open(f) as img:
                img = img.convert("L" if channels == 1 else "RGB").resize((w, h), Image.BILINEAR)
                a = np.asarray(img, dtype=np.float32).reshape(h, w, channels)
        except (OSError, ValueError) as exc:
            raise ConversionError(f"cannot read image '{f}': {exc}") from None
        rows.append((a - m) / sd)
    return {name: np.stack(rows).astype(np.float32)}


def load_samples(path: str | os.PathLike, inputs: Mapping[str, Sequence[int] | None],
                 limit: int | None = None, seed: int = 0, image_size: tuple[int, int] | None = None,
                 mean: Sequence[float] | float = 0.0, std: Sequence[float] | float = 1.0) -> dict[str, np.ndarray]:
    """``{input name: float32 [N, ...]}`` from a file or directory (see the module docstring)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".npz", ".npy"))
        images = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
        if not files and images:
            if len(inputs) != 1:
                raise ConversionError(f"images calibrate a model with one input; this one has {len(inputs)}")
            (name, shape), = inputs.items()
            if limit is not None and limit < len(images):
                pick = np.sort(np.random.default_rng(seed).choice(len(images), size=limit, replace=False))
                images = [images[i] for i in pick]
            return load_images(images, name, shape, image_size, mean, std)
        if not files:
            raise ConversionError(f"calibration data directory '{p}' has no .npz, .npy or image files")
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
