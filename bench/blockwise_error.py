"""Blockwise against per-channel weights on real layers: the sub-channel RFC's claim, measured.

    python bench/blockwise_error.py [--root ../shared/realmodels]

For every float FULLY_CONNECTED / MatMul weight of the real models (Arm's keyword spotters and
the MNIST graph as ``.pb``, MLCommons Tiny's float ``.tflite`` files), quantized the ways
qconvert writes them: int8 per channel ([-127, 127], scale max|w|/127), int4 per channel
(``--weights int4``: [-7, 7], max|w|/7) and int4 in blocks of 32..256 along the input dimension
(``--block-size``: FLOAT16 scale max|w_block|/7). Prints, per layer, the relative RMS error of
the dequantized weights ``||deq(w) - w|| / ||w||`` and the bytes each layout stores (values and
scales), and the median over layers. Needs no TensorFlow. A block size that does not divide a
layer's input dimension is "-" (qconvert keeps that layer float).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qconvert.frontend.graphdef import read_graphdef  # noqa: E402
from qconvert.quantize_pass.blockwise import blockwise_scales_and_values  # noqa: E402
from qconvert.schema.reader import read_model  # noqa: E402

BLOCKS = (32, 64, 128, 256)


def layers(root: Path) -> list[tuple[str, np.ndarray]]:
    """(name, weights [O, I] float32) of every 2-D float weight fed to a MatMul / FULLY_CONNECTED."""
    out = []
    for pb in sorted(root.glob("*/*.pb")):
        try:
            nodes = read_graphdef(pb)
        except Exception:  # noqa: BLE001  (a file this bench cannot read is skipped, not fatal)
            continue
        by_name = {n.name: n for n in nodes}
        for n in nodes:
            if n.op == "MatMul" and len(n.inputs) > 1:
                src = n.inputs[1].split(":")[0]
                while src in by_name and by_name[src].op == "Identity":
                    src = by_name[src].inputs[0].split(":")[0]
                if src in by_name and by_name[src].op == "Const":
                    w = np.asarray(by_name[src].attrs.get("value"), np.float32)
                    if w.ndim == 2 and w.size >= 1024:
                        out.append((f"{pb.parent.name}/{pb.stem}:{n.name}", w.T))
    for fb in sorted(root.glob("*/*.tflite")):
        try:
            sg = read_model(fb.read_bytes()).subgraphs[0]
        except ValueError:
            continue
        for op in sg.operators:
            if op.builtin == "FULLY_CONNECTED" and len(op.inputs) > 1 and op.inputs[1] >= 0:
                t = sg.tensors[op.inputs[1]]
                if t.dtype == "float32" and t.data is not None and len(t.shape) == 2 and np.prod(t.shape) >= 1024:
                    out.append((f"{fb.parent.name}/{fb.stem}:{t.name}", t.array().astype(np.float32)))
    return out


def rel(deq: np.ndarray, w: np.ndarray) -> float:
    return float(np.linalg.norm(deq.astype(np.float64) - w) / np.linalg.norm(w))


def per_channel(w: np.ndarray, qmax: int) -> np.ndarray:
    s = np.abs(w.astype(np.float64)).max(axis=1, keepdims=True) / qmax
    s = np.where(s > 0, s.astype(np.float32), 1.0)
    x = w / s
    return np.clip(np.sign(x) * np.floor(np.abs(x) + 0.5), -qmax, qmax) * s


def blockwise(w: np.ndarray, block: int) -> np.ndarray | None:
    if w.shape[1] % block:
        return None
    scales, values = blockwise_scales_and_values(w, block)
    return (values.astype(np.float64).reshape(w.shape[0], -1, block)
            * scales.astype(np.float64)[..., None]).reshape(w.shape)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT.parent / "shared" / "realmodels")
    args = ap.parse_args()
    found, seen = [], set()
    for name, w in layers(args.root):  # the same layer in several files (fuzz corpora) counts once
        key = (w.shape, hash(w.tobytes()))
        if key not in seen:
            seen.add(key)
            found.append((name, w))
    if not found:
        print(f"no float fully-connected weights under {args.root}")
        return 1
    cols = ["int8-c", "int4-c", *(f"int4-b{b}" for b in BLOCKS)]
    print(f"{'layer':58s} {'shape':>10s} " + " ".join(f"{c:>9s}" for c in cols))
    errs: dict[str, list[float]] = {c: [] for c in cols}
    size: dict[str, int] = {c: 0 for c in cols}
    for name, w in found:
        o, i = w.shape
        row = {"int8-c": rel(per_channel(w, 127), w), "int4-c": rel(per_channel(w, 7), w)}
        size["int8-c"] += w.size + 4 * o
        size["int4-c"] += w.size // 2 + 4 * o
        for b in BLOCKS:
            d = blockwise(w, b)
            if d is not None:
                row[f"int4-b{b}"] = rel(d, w)
                size[f"int4-b{b}"] += w.size // 2 + 2 * o * (i // b)
        for c, v in row.items():
            errs[c].append(v)
        print(f"{name[-58:]:58s} {f'{o}x{i}':>10s} " + " ".join(f"{row[c]:9.4f}" if c in row else f"{'-':>9s}"
                                                             for c in cols))
    print(f"{'median relative RMS error':58s} {'':>10s} " + " ".join(
        f"{statistics.median(errs[c]):9.4f}" if errs[c] else f"{'-':>9s}" for c in cols))
    print(f"{'layers':58s} {'':>10s} " + " ".join(f"{len(errs[c]):9d}" for c in cols))
    print(f"{'stored bytes (values + scales), those layers':58s} {'':>10s} " + " ".join(f"{size[c]:9d}" for c in cols))
    for b in BLOCKS:
        pairs = [(rel(per_channel(w, 7), w), rel(d, w)) for _, w in found if (d := blockwise(w, b)) is not None]
        if pairs:
            print(f"int4 blocks of {b}: below per-channel int4 on {sum(y < x for x, y in pairs)} of {len(pairs)} "
                  f"layers; error ratio block/per-channel median {statistics.median(y / x for x, y in pairs):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
