"""Small float models written by other producers than TensorFlow's Keras/GraphDef converters:
litert-torch (formerly ai-edge-torch) from PyTorch, and ``TFLiteConverter.experimental_from_jax``.

    python bench/producer_models.py [--out tests/fixtures/producers] [--only NAME ...]

writes one float ``.tflite`` per model (fixed seeds; each well under 200 KB) for
tests/e2e/test_producers.py, which cannot install PyTorch or JAX. bench/producers.py builds the
same models. Needs torch + litert-torch (PyTorch models) and jax + tensorflow (the JAX model);
a producer that is not installed is skipped with a line.

The files were last written with: torch 2.14.1, litert-torch 0.10.0, jax/jaxlib 0.10.2,
tensorflow 2.21.0 (Python 3.11, x86-64 Linux).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

# name -> (producer, input shape of the float file's one input)
SHAPES = {
    "litert_torch_cnn": ("litert-torch", (1, 3, 32, 32)),
    "litert_torch_transformer": ("litert-torch", (1, 16, 8)),
    "litert_torch_cnn_padded_pool": ("litert-torch", (1, 3, 32, 32)),
    "jax_cnn": ("jax (experimental_from_jax)", (1, 28, 28, 1)),
    "jax_cnn_reduce_window": ("jax (experimental_from_jax)", (1, 28, 28, 1)),  # bench only
}


def torch_missing() -> str | None:
    try:
        import litert_torch  # noqa: F401
        import torch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 (ImportError, or a CUDA library torch cannot load)
        return f"{type(exc).__name__}: {exc}"
    return None


def jax_missing() -> str | None:
    try:
        import jax  # noqa: F401
        import tensorflow as tf
    except Exception as exc:  # noqa: BLE001 (any import failure skips the producer)
        return f"{type(exc).__name__}: {exc}"
    if not hasattr(tf.lite.TFLiteConverter, "experimental_from_jax"):
        return f"tensorflow {tf.__version__} has no TFLiteConverter.experimental_from_jax"
    return None


def _torch_models(with_bench_only: bool = False) -> dict[str, object]:
    import torch
    from torch import nn

    class BasicBlock(nn.Module):  # torchvision.models.resnet.BasicBlock's shape
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = torch.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return torch.relu(y + (x if self.down is None else self.down(x)))

    class InvertedResidual(nn.Module):  # torchvision's MobileNetV2 block, with a MobileNetV3 SE + hardswish
        def __init__(self, c: int, expand: int) -> None:
            super().__init__()
            h = c * expand
            self.expand = nn.Sequential(nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6())
            self.dw = nn.Sequential(nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h), nn.Hardswish())
            self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(h, 8, 1), nn.ReLU(), nn.Conv2d(8, h, 1),
                                    nn.Hardsigmoid())
            self.project = nn.Sequential(nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):  # type: ignore[no-untyped-def]
            y = self.dw(self.expand(x))
            return x + self.project(y * self.se(y))

    class SmallCNN(nn.Module):
        def __init__(self, pool_padding: int = 0) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
            # torchvision's ResNet stem pools with MaxPool2d(3, 2, 1): litert-torch writes it as
            # PADV2 (-inf) + MAX_POOL_2D VALID (litert_torch_cnn_padded_pool)
            self.pool = nn.MaxPool2d(3, 2, 1) if pool_padding else nn.MaxPool2d(2, 2)
            self.layer1 = BasicBlock(16, 16, 1)
            self.layer2 = BasicBlock(16, 32, 2)
            self.ir = InvertedResidual(32, 2)
            self.avg = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(32, 10)

        def forward(self, x):  # type: ignore[no-untyped-def]
            x = self.ir(self.layer2(self.layer1(self.pool(self.stem(x)))))
            return self.fc(torch.flatten(self.avg(x), 1))

    class SmallTransformer(nn.Module):  # one pre-norm encoder layer over 16 tokens of 8 features
        def __init__(self, d: int = 32, heads: int = 4, tokens: int = 16) -> None:
            super().__init__()
            self.proj = nn.Linear(8, d)
            self.pos = nn.Parameter(torch.randn(1, tokens, d) * 0.1)
            self.enc = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.0, batch_first=True,
                                                  activation="gelu", norm_first=True)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, 5)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.head(self.norm(self.enc(self.proj(x) + self.pos)).mean(dim=1))

    torch.manual_seed(0)
    cnn, transformer = SmallCNN(), SmallTransformer()
    torch.manual_seed(0)
    padded = SmallCNN(pool_padding=1)
    for m in (cnn, transformer, padded):
        m.eval()
        for mod in m.modules():  # BatchNorm statistics and affine parameters away from the identity
            if isinstance(mod, (nn.BatchNorm2d, nn.LayerNorm)):
                with torch.no_grad():
                    mod.weight.uniform_(0.5, 1.5)
                    mod.bias.uniform_(-0.2, 0.2)
                    if isinstance(mod, nn.BatchNorm2d):
                        mod.running_mean.uniform_(-0.2, 0.2)
                        mod.running_var.uniform_(0.5, 1.5)
    return {"litert_torch_cnn": cnn, "litert_torch_transformer": transformer, "litert_torch_cnn_padded_pool": padded}


def build_torch(with_bench_only: bool = False) -> dict[str, bytes]:
    """The PyTorch models converted by litert-torch (float, no quantization)."""
    import os
    import tempfile

    import litert_torch
    import torch

    out = {}
    for name, model in _torch_models(with_bench_only).items():
        x = torch.from_numpy(np.random.default_rng(0).standard_normal(SHAPES[name][1]).astype(np.float32))
        edge = litert_torch.convert(model, (x,))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.tflite")
            edge.export(path)
            out[name] = Path(path).read_bytes()
    return out


def build_jax(with_bench_only: bool = False) -> dict[str, bytes]:
    """A small JAX CNN (conv, bias, relu twice, dense, tanh, dense) through
    ``tf.lite.TFLiteConverter.experimental_from_jax`` (float, no optimizations)."""
    import jax
    import jax.numpy as jnp
    import tensorflow as tf

    rng = np.random.default_rng(0)  # float32 weights (the converter enables jax's float64)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    w1, b1, w2, b2 = normal((3, 3, 1, 8), 0.4), normal((8,), 0.1), normal((3, 3, 8, 16), 0.15), normal((16,), 0.1)
    w3, w4 = normal((16 * 7 * 7, 32), 0.03), normal((32, 10), 0.2)

    dn = ("NHWC", "HWIO", "NHWC")

    def conv(x, w, b, stride):  # type: ignore[no-untyped-def]
        return jax.nn.relu(jax.lax.conv_general_dilated(x, w, (stride, stride), "SAME", dimension_numbers=dn) + b)

    def model(x):  # type: ignore[no-untyped-def]
        y = conv(conv(x, w1, b1, 2), w2, b2, 2)
        return jnp.tanh(y.reshape(1, -1) @ w3) @ w4

    def pooled(x):  # type: ignore[no-untyped-def]
        # an average pool through lax.reduce_window (flax's nn.avg_pool) becomes STABLEHLO_REDUCE_WINDOW,
        # an op with a body subgraph, which qconvert refuses (bench only)
        y = conv(x, w1, b1, 1)
        y = jax.lax.reduce_window(y, np.float32(0), jax.lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        y = conv(y * np.float32(0.25), w2, b2, 2)
        return jnp.tanh(y.reshape(1, -1) @ w3) @ w4

    x = np.zeros(SHAPES["jax_cnn"][1], np.float32)
    out = {}
    for name, fn in [("jax_cnn", model), ("jax_cnn_reduce_window", pooled)][:2 if with_bench_only else 1]:
        converter = tf.lite.TFLiteConverter.experimental_from_jax([fn], [[("x", x)]])
        out[name] = bytes(converter.convert())
    return out


BUILDERS: list[tuple[str, Callable[[], str | None], Callable[[bool], dict[str, bytes]]]] = [
    ("litert-torch", torch_missing, build_torch),
    ("jax (experimental_from_jax)", jax_missing, build_jax),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "producers"))
    ap.add_argument("--only", nargs="*", default=[], help="write only these models (names)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for producer, missing, build in BUILDERS:
        why = missing()
        if why:
            print(f"skipped {producer}: not installed ({why})")
            continue
        for name, data in build().items():
            if args.only and name not in args.only:
                continue
            (out / f"{name}.tflite").write_bytes(data)
            print(f"{producer}: {out / name}.tflite, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
