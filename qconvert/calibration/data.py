"""Calibration samples from files: ``--calibration-data PATH``, read lazily.

* ``.npz``: one array per graph input, named like the input, samples on axis 0
  (``[N, *shape[1:]]``; a single sample may also be given as ``shape`` or ``shape[1:]``).
* ``.npy``: the same for a model with one input.
* a directory: every ``.npz`` / ``.npy`` file in it, in name order, one after the other; or,
  when it holds none, every ``.png`` / ``.jpg`` / ``.jpeg`` image (models with one image input,
  [1, H, W, 1 or 3]): decoded with Pillow (``pip install "qconvert[images]"``), converted to
  grey or RGB, resized to ``--image-size`` (default: the input's H, W) bilinearly, then
  ``(pixel - mean) / std`` per channel (``--mean``, ``--std``; defaults 0 and 1: pixels 0..255).
* a glob (``'shards/*.npz'``, quoted so that the shell leaves it): the matching files (or
  directories), in name order.

``--calibration-samples N`` keeps N samples: all of them in order when there are at
most N, else N drawn without replacement with ``--seed`` (the same N every run).

Nothing is loaded at once: :func:`open_samples` reads only the array headers (the sample
count and shapes are checked before the model runs), and :meth:`Samples.batches` reads the
samples of one batch at a time: ``.npy`` through a memory map, ``.npz`` members as streams
(compressed or not), images decoded one by one. Peak memory is one batch, whatever N is.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from qconvert.errors import ConversionError

if TYPE_CHECKING:
    import zipfile



def _zipfile():  # type: ignore[no-untyped-def]
    """The zipfile module, imported where a .npz is opened or an ``except`` clause naming its
    BadZipFile is reached (an error): with shutil, bz2 and lzma it is 2.3 ms of every conversion
    whose samples are a .npy."""
    import zipfile

    return zipfile

def as_samples(name: str, array: np.ndarray, shape: Sequence[int] | None, where: str) -> np.ndarray:
    """An in-memory array as [N, ...] float32 samples for input ``name`` (the checks of :func:`_layout`)."""
    a = np.asarray(array)
    count, row = _layout(name, tuple(a.shape), a.dtype, shape, where)
    a = a.astype(np.float32).reshape(count, *row)
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
    except (OSError, _zipfile().BadZipFile, EOFError) as exc:
        raise ConversionError(f"cannot read {what} '{path}': {exc}") from None


IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def _per_channel(values: Sequence[float] | float, channels: int, what: str) -> np.ndarray:
    v = np.atleast_1d(np.asarray(values, dtype=np.float32))
    if v.size not in (1, channels):
        raise ConversionError(f"{what} has {v.size} values; the input has {channels} channels")
    return v


class _Rows:
    """One input's samples in one file, read on demand: ``count`` rows of ``shape``."""

    count: int

    def read(self, start: int, stop: int) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        """Release the open file, if any (a directory may hold thousands: one is open at a time)."""


class _ArrayRows(_Rows):
    """Samples already in memory (the API's mapping, a single-sample file, a fallback)."""

    def __init__(self, array: np.ndarray) -> None:
        self.array = array
        self.count = len(array)

    def read(self, start: int, stop: int) -> np.ndarray:
        return self.array[start:stop]


def _layout(name: str, shape: tuple[int, ...], dtype: np.dtype, input_shape: Sequence[int] | None,
            where: str) -> tuple[int, tuple[int, ...]]:
    """(sample count, shape of one read row) of an array of ``shape``, checked against the input's."""
    if dtype.kind not in "fiub":
        raise ConversionError(f"{where}: array for input '{name}' has dtype {dtype}, not numbers")
    if input_shape is None:
        if not shape:
            raise ConversionError(f"{where}: array for input '{name}' is a scalar; expected [N, ...]")
        return shape[0], tuple(shape[1:])
    want = tuple(int(d) for d in input_shape[1:])
    if shape == tuple(input_shape) or shape == want:
        return 1, want
    if shape[1:] != want:
        raise ConversionError(
            f"{where}: array for input '{name}' has shape {list(shape)}; expected "
            f"[N, {', '.join(map(str, want))}] (input shape {list(input_shape)})")
    return shape[0], want


class _NpyRows(_Rows):
    """A ``.npy`` file read a row range at a time with ``seek`` and ``read``. (Not a memory map:
    the pages a map touches count as the process's memory, 3 GB after 5,000 samples of
    224x224x3, measured; read into a buffer, they stay in the page cache only.)"""

    def __init__(self, path: Path, name: str, input_shape: Sequence[int] | None, label: str = "calibration data"
                 ) -> None:
        self.path, self.where, self.label = path, str(path), label
        self.file = self._open()
        shape, fortran, self.dtype = _npy_header(self.file, self.where, label)
        self.offset = self.file.tell()
        self.close()
        self.count, self.row = _layout(name, shape, self.dtype, input_shape, self.where)
        self.row_bytes = int(np.prod(self.row, dtype=np.int64)) * self.dtype.itemsize
        self.whole = None
        if fortran and len(shape) > 1:
            self.whole = load_arrays(path, label).reshape(self.count, *self.row)

    def _open(self):  # type: ignore[no-untyped-def]
        try:
            return open(self.path, "rb")  # noqa: SIM115 - open while this file's samples are read
        except OSError as exc:
            raise ConversionError(f"cannot read {self.label} '{self.path}': {exc.strerror or exc}") from None

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    def read(self, start: int, stop: int) -> np.ndarray:
        if self.whole is not None:
            return self.whole[start:stop]
        if self.file is None:
            self.file = self._open()
        self.file.seek(self.offset + start * self.row_bytes)
        n = (stop - start) * self.row_bytes
        raw = self.file.read(n)
        if len(raw) != n:
            raise ConversionError(f"{self.label} '{self.where}' ends early (truncated .npy)")
        return np.frombuffer(raw, dtype=self.dtype).reshape(stop - start, *self.row)


class _NpzRows(_Rows):
    """One array of a ``.npz`` read as a stream (stored or deflated): rows are read in order,
    a jump backwards reopens the member. A Fortran-ordered array is read whole."""

    def __init__(self, path: Path, key: str, name: str, input_shape: Sequence[int] | None,
                 label: str = "calibration data") -> None:
        self.path, self.member, self.where, self.label = path, f"{key}.npy", f"{path}", label
        self.zip: zipfile.ZipFile | None = None
        self.stream = None
        self.at = 0
        try:
            with _zipfile().ZipFile(path) as z, z.open(self.member) as fh:
                shape, fortran, self.dtype = _npy_header(fh, f"{path}:{key}", label)
                self.count, self.row = _layout(name, shape, self.dtype, input_shape, self.where)
                self.whole = None
                if fortran and len(shape) > 1:  # column-major: no row is contiguous, read it whole
                    raw = fh.read()
                    if len(raw) != int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize:
                        raise ConversionError(f"{label} '{path}' ends early (truncated array '{key}')")
                    self.whole = np.frombuffer(raw, self.dtype).reshape(shape, order="F").reshape(self.count, *self.row)
        except (OSError, _zipfile().BadZipFile, EOFError, zlib.error) as exc:
            raise ConversionError(f"cannot read {label} '{path}': {exc}") from None
        self.row_bytes = int(np.prod(self.row, dtype=np.int64)) * self.dtype.itemsize

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        if self.zip is not None:
            self.zip.close()
            self.zip = None

    def _open(self) -> None:
        if self.stream is not None:
            self.stream.close()
        try:
            if self.zip is None:
                self.zip = _zipfile().ZipFile(self.path)
            self.stream = self.zip.open(self.member)
        except (OSError, _zipfile().BadZipFile, EOFError) as exc:
            raise ConversionError(f"cannot read {self.label} '{self.path}': {exc}") from None
        _npy_header(self.stream, self.where, self.label)
        self.at = 0

    def read(self, start: int, stop: int) -> np.ndarray:
        if self.whole is not None:
            return self.whole[start:stop]
        if self.stream is None or start < self.at:
            self._open()
        assert self.stream is not None
        while self.at < start:  # skip rows (a sparse --calibration-samples draw), a bounded chunk at a time
            step = min(start - self.at, max(1, (8 << 20) // max(self.row_bytes, 1)))
            self._exactly(step * self.row_bytes)
            self.at += step
        raw = self._exactly((stop - start) * self.row_bytes)
        self.at = stop
        return np.frombuffer(raw, dtype=self.dtype).reshape(stop - start, *self.row)

    def _exactly(self, n: int) -> bytes:
        assert self.stream is not None
        try:
            raw = self.stream.read(n)
        except (OSError, _zipfile().BadZipFile, EOFError, zlib.error) as exc:  # a damaged member or deflate stream
            raise ConversionError(f"cannot read {self.label} '{self.where}': {exc}") from None
        if len(raw) != n:
            raise ConversionError(f"{self.label} '{self.where}' ends early (truncated array '{self.member}')")
        return raw


def _npy_header(fh, where: str, label: str = "calibration data"  # type: ignore[no-untyped-def]
                ) -> tuple[tuple[int, ...], bool, np.dtype]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(fh)
        else:
            shape, fortran, dtype = fmt.read_array_header_2_0(fh)
    except (ValueError, OSError, EOFError, _zipfile().BadZipFile, zlib.error) as exc:
        if "magic" in str(exc):
            raise ConversionError(f"{label} '{where}' is not a .npy or .npz file") from None
        raise ConversionError(f"cannot read {label} '{where}': {exc}") from None
    if dtype.hasobject:
        raise ConversionError(f"{label} '{where}' holds Python objects; save numbers (np.float32)")
    return tuple(int(d) for d in shape), bool(fortran), dtype


class _ImageRows(_Rows):
    """Image files decoded one by one (see the module docstring)."""

    def __init__(self, files: Sequence[Path], name: str, shape: Sequence[int] | None,
                 size: tuple[int, int] | None, mean: Sequence[float] | float, std: Sequence[float] | float) -> None:
        if shape is None or len(shape) != 4 or shape[3] not in (1, 3):
            raise ConversionError(f"images need an image input [1, H, W, 1 or 3]; input '{name}' has shape "
                                  f"{list(shape) if shape is not None else 'unknown'}")
        try:
            from PIL import Image  # noqa: F401
        except ImportError:
            raise ConversionError('reading images needs Pillow: pip install "qconvert[images]" '
                                  "(or save the samples as .npz)") from None
        h, w = size if size is not None else (int(shape[1]), int(shape[2]))
        if (h, w) != (int(shape[1]), int(shape[2])):
            raise ConversionError(f"--image-size {h},{w} does not match input '{name}' of shape {list(shape)}")
        self.files, self.h, self.w, self.channels = list(files), h, w, int(shape[3])
        self.mean = _per_channel(mean, self.channels, "--mean")
        self.std = _per_channel(std, self.channels, "--std")
        if np.any(self.std == 0):
            raise ConversionError("--std must not be 0")
        self.count = len(self.files)

    def read(self, start: int, stop: int) -> np.ndarray:
        from PIL import Image

        rows = []
        for f in self.files[start:stop]:
            try:
                with Image.open(f) as img:
                    img = img.convert("L" if self.channels == 1 else "RGB").resize((self.w, self.h), Image.BILINEAR)
                    a = np.asarray(img, dtype=np.float32).reshape(self.h, self.w, self.channels)
            except (OSError, ValueError) as exc:
                raise ConversionError(f"cannot read image '{f}': {exc}") from None
            rows.append((a - self.mean) / self.std)
        return np.stack(rows).astype(np.float32)


class Samples:
    """Calibration samples of every graph input, read a batch at a time.

    ``parts`` are the files in order (one ``{input: rows}`` each, equal counts); sample k of
    the whole is found by counting through them. ``pick`` (sorted indices) keeps a subset."""

    def __init__(self, parts: Sequence[Mapping[str, _Rows]], pick: np.ndarray | None = None,
                 label: str = "calibration data") -> None:
        self.parts, self.label = list(parts), label
        self.images = any(isinstance(rows, _ImageRows) for p in self.parts for rows in p.values())  # decoded pictures
        self.starts = np.cumsum([0] + [next(iter(p.values())).count for p in self.parts])
        self.pick = pick
        self.count = int(self.starts[-1]) if pick is None else len(pick)
        self.names = list(self.parts[0]) if self.parts else []

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray]) -> "Samples":
        return cls([{n: _ArrayRows(a) for n, a in arrays.items()}])

    def __len__(self) -> int:
        return self.count

    def _runs(self, indices: np.ndarray) -> Iterator[tuple[int, int, int]]:
        """(part, start, stop) runs of consecutive rows covering ``indices`` (sorted)."""
        k = 0
        while k < len(indices):
            part = int(np.searchsorted(self.starts, indices[k], side="right")) - 1
            end = int(self.starts[part + 1])
            j = k + 1
            while j < len(indices) and indices[j] == indices[j - 1] + 1 and indices[j] < end:
                j += 1
            base = int(self.starts[part])
            yield part, int(indices[k]) - base, int(indices[j - 1]) + 1 - base
            k = j

    def batches(self, size: int) -> Iterator[dict[str, np.ndarray]]:
        """Feeds of at most ``size`` samples each, float32, checked for NaN and infinity."""
        total = self.count
        current = None
        try:
            for first in range(0, total, size):
                idx = (np.arange(first, min(first + size, total)) if self.pick is None
                       else self.pick[first:first + size])
                pieces: dict[str, list[np.ndarray]] = {n: [] for n in self.names}
                for part, start, stop in self._runs(idx):
                    if current is not None and current != part:
                        self._close(current)
                    current = part
                    for n, rows in self.parts[part].items():
                        pieces[n].append(rows.read(start, stop))
                yield self._feed(pieces, idx)
        finally:
            if current is not None:
                self._close(current)

    def _close(self, part: int) -> None:
        for rows in self.parts[part].values():
            rows.close()

    def _feed(self, pieces: dict[str, list[np.ndarray]], idx: np.ndarray) -> dict[str, np.ndarray]:
        """The batch as float32 arrays, checked for NaN and infinity."""
        feed = {}
        for n, chunks in pieces.items():
            a = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
            a = np.ascontiguousarray(a, dtype=np.float32)
            if not np.all(np.isfinite(a)):
                raise ConversionError(f"{self.label}: array for input '{n}' contains NaN or infinite values "
                                      f"(samples {int(idx[0])}..{int(idx[-1])})")
            feed[n] = a
        return feed

    def read_all(self) -> dict[str, np.ndarray]:
        """Every sample at once (``compare``, tests): ``{input: [N, ...] float32}``."""
        out: dict[str, list[np.ndarray]] = {n: [] for n in self.names}
        for feed in self.batches(max(self.count, 1)):
            for n, a in feed.items():
                out[n].append(a)
        return {n: np.concatenate(v) for n, v in out.items()}


GLOB_CHARS = frozenset("*?[")  # a --calibration-data (or compare --data) path with one of these is a glob


def _expand(path: str | os.PathLike, label: str) -> list[Path]:
    text = str(path)
    if GLOB_CHARS & set(text) and not Path(text).exists():
        import glob

        matches = sorted(glob.glob(text))
        if not matches:
            raise ConversionError(f"{label} '{text}' matches no file")
        return [Path(m) for m in matches]
    return [Path(text)]


def _file_parts(f: Path, inputs: Mapping[str, Sequence[int] | None], label: str) -> dict[str, _Rows]:
    """The ``{input: rows}`` of one .npy / .npz file, from its headers."""
    if f.suffix == ".npy" or not _zipfile().is_zipfile(f):
        if len(inputs) != 1:
            raise ConversionError(
                f"{f}: a .npy file holds one array, but the model has {len(inputs)} inputs "
                f"({', '.join(inputs)}); use a .npz with one array per input")
        (name, shape), = inputs.items()
        return {name: _NpyRows(f, name, shape, label)}
    try:
        with _zipfile().ZipFile(f) as z:
            keys = [m[:-4] for m in z.namelist() if m.endswith(".npy")]
    except (OSError, _zipfile().BadZipFile) as exc:
        raise ConversionError(f"cannot read {label} '{f}': {exc}") from None
    missing = [n for n in inputs if n not in keys]
    if missing and len(inputs) == 1 and len(keys) == 1:  # one input, one array: names need not match
        (name, shape), = inputs.items()
        return {name: _NpzRows(f, keys[0], name, shape, label)}
    if missing:
        raise ConversionError(f"{f}: no array named '{missing[0]}' (arrays: {', '.join(keys) or 'none'}); "
                              f"the model's inputs are {', '.join(inputs)}")
    parts = {n: _NpzRows(f, n, n, s, label) for n, s in inputs.items()}
    counts = {n: r.count for n, r in parts.items()}
    if len(set(counts.values())) != 1:
        raise ConversionError(f"{label}: inputs have different sample counts in {f}: {counts}")
    return parts


def open_samples(path: str | os.PathLike, inputs: Mapping[str, Sequence[int] | None],
                 limit: int | None = None, seed: int = 0, image_size: tuple[int, int] | None = None,
                 mean: Sequence[float] | float = 0.0, std: Sequence[float] | float = 1.0,
                 what: str = "calibration data") -> Samples:
    """The samples at ``path`` (file, directory or glob; see the module docstring), not yet read.
    ``what`` names them in errors (``compare`` reads its ``--data`` here too)."""
    files: list[Path] = []
    images: list[Path] = []
    for p in _expand(path, what):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix in (".npz", ".npy"))
            pictures = sorted(f for f in p.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
            if not found and not pictures:
                raise ConversionError(f"{what} directory '{p}' has no .npz, .npy or image files")
            files += found
            images += pictures if not found else []
        elif p.is_file():
            (images if p.suffix.lower() in IMAGE_SUFFIXES else files).append(p)
        else:
            raise ConversionError(f"{what} '{p}' does not exist")
    if files and images:
        raise ConversionError(f"{what} '{path}' mixes arrays and images; give one kind")
    if images:
        if len(inputs) != 1:
            raise ConversionError(f"images calibrate a model with one input; this one has {len(inputs)}")
        (name, shape), = inputs.items()
        if limit is not None and limit < len(images):
            pick = np.sort(np.random.default_rng(seed).choice(len(images), size=limit, replace=False))
            images = [images[i] for i in pick]
        return Samples([{name: _ImageRows(images, name, shape, image_size, mean, std)}], label=what)
    samples = Samples([_file_parts(f, inputs, what) for f in files], label=what)
    if samples.count == 0:
        raise ConversionError(f"{what} '{path}' has no samples")
    if limit is not None and limit < samples.count:
        samples.pick = np.sort(np.random.default_rng(seed).choice(samples.count, size=limit, replace=False))
        samples.count = limit
    return samples


def samples_from(source: Any, inputs: Mapping[str, Sequence[int] | None], limit: int | None = None,
                 seed: int = 0, image_size: tuple[int, int] | None = None, mean: Sequence[float] | float = 0.0,
                 std: Sequence[float] | float = 1.0, what: str = "calibration data") -> Samples:
    """The samples of ``source``: in-memory arrays (``{input: array}``, the first ``limit``) or a
    file, directory or glob (:func:`open_samples`, ``limit`` drawn with ``seed``)."""
    if isinstance(source, Mapping):
        missing = [n for n in inputs if n not in source]
        if missing:
            raise ConversionError(f"{what} has no array for input '{missing[0]}'")
        arrays = {n: as_samples(n, np.asarray(source[n]), inputs[n], what) for n in inputs}
        return Samples.from_arrays({n: a[:limit] for n, a in arrays.items()})
    return open_samples(source, inputs, limit, seed, image_size, mean, std, what)


def load_samples(path: str | os.PathLike, inputs: Mapping[str, Sequence[int] | None],
                 limit: int | None = None, seed: int = 0, image_size: tuple[int, int] | None = None,
                 mean: Sequence[float] | float = 0.0, std: Sequence[float] | float = 1.0) -> dict[str, np.ndarray]:
    """``{input name: float32 [N, ...]}`` from a file, directory or glob, all at once."""
    return open_samples(path, inputs, limit, seed, image_size, mean, std).read_all()
