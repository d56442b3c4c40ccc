"""Sliding-window arithmetic shared by shape inference, the float executor and the
integer runtime: TensorFlow's SAME / VALID output sizes and paddings, and strided views."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from qconvert.errors import ConversionError


def window_out(size: int, k: int, stride: int, dilation: int, padding: str) -> int:
    eff = (k - 1) * dilation + 1
    if padding == "SAME":
        return -(-size // stride)
    if padding == "VALID":
        return (size - eff) // stride + 1
    raise ConversionError(f"padding '{padding}' is not supported; use SAME or VALID")


def window_padding(size: int, k: int, stride: int, dilation: int, padding: str) -> tuple[int, int, int]:
    """(output size, pad before, pad after) as TensorFlow computes SAME / VALID."""
    out = window_out(size, k, stride, dilation, padding)
    if padding == "VALID":
        return out, 0, 0
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return out, total // 2, total - total // 2


def windows(attrs: Mapping[str, Any], x: np.ndarray, kh: int, kw: int, fill: float = 0.0,
            max_elements: int | None = None) -> np.ndarray:
    """[N, OH, OW, kh, kw, C] view of the (padded) input's sliding windows, for an op whose
    ``attrs`` (TFLite option names: stride_h, dilation_h_factor, padding, ...) say how.
    Also the integer kernels' (qconvert run); ``max_elements`` refuses a padded input larger
    than that (ValueError) instead of allocating it."""
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    dh, dw = int(attrs.get("dilation_h_factor", 1)), int(attrs.get("dilation_w_factor", 1))
    padding = attrs.get("padding", "VALID")
    n, h, w, c = x.shape
    oh, top, bottom = window_padding(h, kh, sh, dh, padding)
    ow, left, right = window_padding(w, kw, sw, dw, padding)
    if max_elements is not None and n * (h + top + bottom) * (w + left + right) * c > max_elements:
        raise ValueError(f"window {kh}x{kw}, stride {sh}x{sw}, dilation {dh}x{dw} on input {list(x.shape)} "
                         "needs too large a padded input")
    if top or bottom or left or right:
        x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=fill)
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, oh, ow, kh, kw, c), (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)
