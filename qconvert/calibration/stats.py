"""Per-tensor calibration statistics that merge: ``--save-stats`` and ``--stats``.

For each observed tensor: the min and max over the samples, the number of samples, and
(for the histogram methods) a histogram on fixed bins that do not depend on the data: bin
``k`` holds the float32 values whose upper 16 bits are ``k`` (sign, exponent, 7 mantissa
bits: every bin is 2^-7 of its magnitude wide, 65,536 bins cover every float32). Two
shards' statistics merge by min, max and addition, so statistics merged from shards are
*equal* to those of one run over the union of the samples: ranges, and the ranges the
histogram methods derive from them, come out the same bit for bit.

Statistics belong to one float graph: the file carries a fingerprint of the graph as the
calibration stage sees it (every op with its operands, every constant's bytes, every
observed tensor with its shape), and a file from another graph, another converter
setting, or with other observed tensors is refused.

File format (``.npz``, version 1): ``version``, ``fingerprint`` (hex), ``samples``,
``names`` (observed tensors, in graph order), ``min``/``max`` (float32 per name; NaN for
a tensor that held no values), and with histograms ``hist`` ([names, 65536] int64).
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from qconvert.errors import ConversionError

FORMAT_VERSION = 1
BINS = 1 << 16


def _bin_edges() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The finite bins in ascending order of value: (codes, lower edges, upper edges)."""
    mags = (np.arange(0x7F80 + 1, dtype=np.uint32) << 16).view(np.float32).astype(np.float64)  # |v| at code m
    pos = np.arange(0x7F80)  # codes 0x0000..0x7F7F: [mag(m), mag(m+1))
    neg = 0x8000 + pos[::-1]  # codes 0xFF7F..0x8000: (-mag(m+1), -mag(m)]
    codes = np.concatenate([neg, pos])
    lower = np.concatenate([-mags[pos[::-1] + 1], mags[pos]])
    upper = np.concatenate([-mags[pos[::-1]], mags[pos + 1]])
    return codes, lower, upper


_EDGES: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None


def histogram(values: np.ndarray) -> np.ndarray:
    """Counts of ``values`` (float32) per fixed bin: [65536] int64."""
    v = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    return np.bincount(v.view(np.uint32) >> 16, minlength=BINS).astype(np.int64, copy=False)


def histogram_bins(counts: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The fixed-bin histogram as ascending (counts, edges) from the bin holding ``lo`` to the
    one holding ``hi``, empty bins in between kept, outer edges at ``lo`` and ``hi``: the
    (counts, edges) the methods (``qconvert.calibration.methods``) take."""
    global _EDGES
    if _EDGES is None:
        _EDGES = _bin_edges()
    codes, lower, upper = _EDGES
    ordered = counts[codes]
    nonzero = np.flatnonzero(ordered)
    if not len(nonzero):
        return np.zeros(1, np.int64), np.array([lo, hi], np.float64)
    first, last = int(nonzero[0]), int(nonzero[-1])
    edges = np.concatenate([lower[first:last + 1], upper[last:last + 1]])
    edges[0], edges[-1] = lo, hi
    return ordered[first:last + 1], edges


@dataclass
class Stats:
    """Statistics of the observed tensors over some samples. The graph's fingerprint may be given as
    :func:`fingerprint_later`'s function: hashed when first asked for (a conversion that neither saves
    nor reads statistics never asks: 11.9 ms of sha256 on RepViT_M09, 4.3 on MobileViT_XXS, measured; the
    snapshot it hashes costs 0.8)."""

    _fingerprint: str | Callable[[], str]
    names: list[str]
    lo: dict[str, float] = field(default_factory=dict)
    hi: dict[str, float] = field(default_factory=dict)
    hist: dict[str, np.ndarray] | None = None
    samples: int = 0

    @property
    def fingerprint(self) -> str:
        if callable(self._fingerprint):
            self._fingerprint = self._fingerprint()
        return self._fingerprint

    def update(self, name: str, value: np.ndarray) -> None:
        if not value.size:
            return
        a, b = float(value.min()), float(value.max())
        if name in self.lo:
            a, b = min(self.lo[name], a), max(self.hi[name], b)
        self.lo[name], self.hi[name] = a, b
        if self.hist is not None:
            counts = histogram(value)
            if name in self.hist:
                self.hist[name] += counts
            else:
                self.hist[name] = counts

    def update_many(self, names: Sequence[str], values: Sequence[np.ndarray]) -> None:
        """:meth:`update` of each name with its value, as one after another. Without histograms, the
        float32 values' minima and maxima come from one copy and two ``reduceat`` calls instead of two
        reductions per tensor (LiteRT's 8 samples of MobileViT_XXS, 363 tensors: 3.5 against 8.4 ms; RepViT_M09
        3.2 against 5.8; measured);
        a tensor whose minimum or maximum is 0 is reduced again by itself, so that a zero's sign is the
        one :meth:`update` finds."""
        kept = [(n, v) for n, v in zip(names, values) if v.size]
        if self.hist is not None or len(kept) < 2 or any(v.dtype != np.float32 for _, v in kept):
            for n, v in kept:
                self.update(n, v)
            return
        sizes = np.fromiter((v.size for _, v in kept), np.int64, len(kept))
        starts = np.zeros(len(kept), np.int64)
        np.cumsum(sizes[:-1], out=starts[1:])
        flat = np.concatenate([v.reshape(-1) for _, v in kept])
        los, his = np.minimum.reduceat(flat, starts).tolist(), np.maximum.reduceat(flat, starts).tolist()
        for (name, value), a, b in zip(kept, los, his):
            if a == 0.0:
                a = float(value.min())
            if b == 0.0:
                b = float(value.max())
            if name in self.lo:
                a, b = min(self.lo[name], a), max(self.hi[name], b)
            self.lo[name], self.hi[name] = a, b

    def merge(self, other: "Stats", where: str = "statistics") -> None:
        """Add ``other``'s statistics (refused when it comes from another graph or setting)."""
        if (other._fingerprint is not self._fingerprint and other.fingerprint != self.fingerprint  # shards: one
                or other.names != self.names):  # function, not hashed to be merged
            raise ConversionError(
                f"{where} was recorded on another graph or with other options (fingerprint "
                f"{other.fingerprint[:12]}, this conversion's {self.fingerprint[:12]}); record it again with the "
                "same model, --inputs/--outputs/--input-shapes and --activations")
        for n in other.lo:
            self.lo[n] = min(self.lo.get(n, other.lo[n]), other.lo[n])
            self.hi[n] = max(self.hi.get(n, other.hi[n]), other.hi[n])
        if self.hist is not None:
            if other.hist is None:
                self.hist = None
            else:
                for n, c in other.hist.items():
                    self.hist[n] = self.hist[n] + c if n in self.hist else c.copy()
        self.samples += other.samples

    def save(self, path: str | os.PathLike) -> None:
        from qconvert.io import write_atomic

        nan = float("nan")
        arrays = {
            "version": np.array(FORMAT_VERSION), "fingerprint": np.array(self.fingerprint),
            "samples": np.array(self.samples, np.int64), "names": np.array(self.names, dtype=str),
            "min": np.array([self.lo.get(n, nan) for n in self.names], np.float32),
            "max": np.array([self.hi.get(n, nan) for n in self.names], np.float32),
        }
        if self.hist is not None:
            empty = np.zeros(BINS, np.int64)
            arrays["hist"] = np.stack([self.hist.get(n, empty) for n in self.names]) if self.names \
                else np.zeros((0, BINS), np.int64)
        import io

        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        write_atomic(path, buf.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Stats":
        from qconvert.calibration.data import load_arrays

        data = load_arrays(path, "statistics file")
        if isinstance(data, np.ndarray):
            raise ConversionError(f"statistics file '{path}' is a .npy; expected the .npz that --save-stats writes")
        import zipfile  # here, not at the top (2.3 ms of every conversion): the .npz read has imported it

        with data:
            missing = [k for k in ("version", "fingerprint", "samples", "names", "min", "max") if k not in data.files]
            if missing:
                raise ConversionError(f"statistics file '{path}' has no '{missing[0]}': not written by --save-stats")
            try:
                version = int(data["version"])
                if version != FORMAT_VERSION:
                    raise ConversionError(f"statistics file '{path}' has format version {version}; this qconvert "
                                          f"reads version {FORMAT_VERSION}")
                names = [str(n) for n in data["names"]]
                lo, hi = data["min"].astype(np.float32), data["max"].astype(np.float32)
                hist = data["hist"] if "hist" in data.files else None
                if len(lo) != len(names) or len(hi) != len(names) or (
                        hist is not None and hist.shape != (len(names), BINS)):
                    raise ConversionError(f"statistics file '{path}' is inconsistent (array sizes differ)")
                stats = cls(str(data["fingerprint"]), names, samples=int(data["samples"]),
                            hist=None if hist is None else {})
            except (ValueError, KeyError, zipfile.BadZipFile, OSError, EOFError, zlib.error) as exc:
                raise ConversionError(f"cannot read statistics file '{path}': {exc}") from None
        for k, n in enumerate(names):
            if np.isfinite(lo[k]) and np.isfinite(hi[k]):
                stats.lo[n], stats.hi[n] = float(lo[k]), float(hi[k])
                if hist is not None:
                    stats.hist[n] = hist[k].astype(np.int64)  # type: ignore[index]
        return stats


def merged(paths: Sequence[str | os.PathLike], fingerprint: str, names: list[str]) -> Stats:
    """The statistics of ``paths`` merged, each checked against the graph's fingerprint."""
    total = Stats(fingerprint, list(names), hist={})
    for p in paths:
        total.merge(Stats.load(p), f"statistics file '{p}'")
    return total


def fingerprint(graph, names: Sequence[str]) -> str:  # type: ignore[no-untyped-def]
    """sha256 of the float graph the samples run through and of the observed tensors."""
    return fingerprint_later(graph, names)()


def fingerprint_later(graph, names: Sequence[str]) -> Callable[[], str]:  # type: ignore[no-untyped-def]
    """:func:`fingerprint` of the graph as it is now, hashed when the returned function is first
    called: what it hashes is taken now, the constants by reference (passes give a tensor new data,
    they never write into a constant's array), so that later passes do not change it."""
    parts: list[bytes | tuple[str, np.ndarray]] = []
    for node in graph.nodes:
        parts.append(f"{node.op}|{','.join(node.inputs)}|{','.join(node.outputs)}\n".encode())
        for i in node.inputs:
            data = graph.const(i) if i else None
            if data is not None:
                parts.append((i, data))
    for name in list(graph.inputs) + list(names):
        t = graph.tensors[name]
        parts.append(f"observe {name} {t.dtype} {t.shape}\n".encode())
    done: list[str] = []

    def digest() -> str:
        import hashlib  # here: 5 ms of OpenSSL at start-up that a QAT conversion never needs

        if not done:
            h = hashlib.sha256(b"qconvert-stats-1\0")
            for part in parts:
                if isinstance(part, bytes):
                    h.update(part)
                    continue
                a = np.ascontiguousarray(part[1])
                h.update(f"{part[0]}:{a.dtype}:{a.shape}\n".encode())
                h.update(a.tobytes())
            done.append(h.hexdigest())
        return done[0]

    return digest
