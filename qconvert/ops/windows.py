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


def nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool) -> np.ndarray:
    """Source index of each output index in a nearest-neighbour resize (TFLite's
    ``GetNearestNeighbor``: float32 scale, round with align_corners, floor otherwise)."""
    f = np.float32
    scale = (f(in_size - 1) / f(out_size - 1) if align_corners and out_size > 1 else f(in_size) / f(out_size))
    pos = (np.arange(out_size, dtype=f) + f(0.5 if half_pixel_centers else 0.0)) * scale
    if align_corners:
        idx = np.where(pos >= 0, np.floor(pos + f(0.5)), np.ceil(pos - f(0.5))).astype(np.int64)
    else:
        idx = np.floor(pos).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    return np.maximum(idx, 0) if half_pixel_centers else idx


def bilinear_taps(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, fraction) source taps of a bilinear resize, in float32 as TFLite's float
    kernel computes them (``ComputeInterpolationValues``)."""
    f = np.float32
    scale = (f(in_size - 1) / f(out_size - 1) if align_corners and out_size > 1 else f(in_size) / f(out_size))
    pos = np.arange(out_size, dtype=f)
    pos = (pos + f(0.5)) * scale - f(0.5) if half_pixel_centers else pos * scale
    lower = np.maximum(np.floor(pos).astype(np.int64), 0)
    upper = np.minimum(np.ceil(pos).astype(np.int64), in_size - 1)
    return lower, upper, (pos - lower.astype(f)).astype(f)


def bilinear_taps_int(in_size: int, out_size: int, align_corners: bool, half_pixel_centers: bool
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lower, upper, fraction in 1/1024) taps of TFLite's integer bilinear resize
    (``ComputeInterpolationValuesInteger``: a 10-bit fixed-point scale, C division)."""
    if align_corners and out_size > 1:
        scale = (1024 * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
    else:
        scale = (1024 * in_size + out_size // 2) // out_size
    pos = np.arange(out_size, dtype=np.int64) * scale
    if half_pixel_centers:
        pos = pos + scale // 2 - 512
    lower = np.maximum(np.trunc(pos / 1024).astype(np.int64), 0)  # C division truncates
    upper = np.minimum(np.trunc((pos + 1023) / 1024).astype(np.int64), in_size - 1)
    return lower, upper, pos - 1024 * lower


def space_to_depth(x: np.ndarray, block: int) -> np.ndarray:
    """NHWC: each ``block``×``block`` patch becomes ``block²·C`` channels (row, column, channel)."""
    n, h, w, c = x.shape
    return x.reshape(n, h // block, block, w // block, block, c).transpose(0, 1, 3, 2, 4, 5) \
        .reshape(n, h // block, w // block, block * block * c)


def depth_to_space(x: np.ndarray, block: int) -> np.ndarray:
    """The inverse of ``space_to_depth``."""
    n, h, w, c = x.shape
    return x.reshape(n, h, w, block, block, c // (block * block)).transpose(0, 1, 3, 2, 4, 5) \
        .reshape(n, h * block, w * block, c // (block * block))


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
    x, (oh, ow), (sh, sw), (dh, dw) = padded(attrs, x, kh, kw, fill, max_elements)
    n, c = x.shape[0], x.shape[3]
    s = x.strides
    return np.lib.stride_tricks.as_strided(
        x, (n, oh, ow, kh, kw, c), (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]), writeable=False)


def padded(attrs: Mapping[str, Any], x: np.ndarray, kh: int, kw: int, fill: float = 0.0,
           max_elements: int | None = None) -> tuple[np.ndarray, tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The input padded for a ``kh``×``kw`` window as ``attrs`` say, with the output size,
    the strides and the dilations: ``(x, (oh, ow), (sh, sw), (dh, dw))``."""
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
    return x, (oh, ow), (sh, sw), (dh, dw)


def transpose_conv_scatter(attrs: Mapping[str, Any], taps: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """TRANSPOSE_CONV's output [N, out_h, out_w, O] from ``taps`` [N, H, W, kh, kw, O], each
    input pixel's product with every filter tap: input pixel (y, x) adds tap (i, j) at output
    (y·stride − top + i, x·stride − left + j); what falls outside is dropped. The padding is
    TFLite's (transpose_conv.cc): that of a convolution from the output's size back to the input's."""
    sh, sw = int(attrs.get("stride_h", 1)), int(attrs.get("stride_w", 1))
    n, h, w, kh, kw, o = taps.shape
    padding = attrs.get("padding", "VALID")
    top = window_padding(out_h, kh, sh, 1, padding)[1]
    left = window_padding(out_w, kw, sw, 1, padding)[1]
    full = np.zeros((n, max((h - 1) * sh + kh, top + out_h), max((w - 1) * sw + kw, left + out_w), o), taps.dtype)
    for i in range(kh):
        for j in range(kw):
            full[:, i:i + (h - 1) * sh + 1:sh, j:j + (w - 1) * sw + 1:sw, :] += taps[:, :, :, i, j, :]
    return full[:, top:top + out_h, left:left + out_w, :]


STRIDED_SLICE_MASKS = ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask", "shrink_axis_mask")


def strided_index(rank: int, begin: Any, end: Any, strides: Any, masks: Mapping[str, Any], what: str) -> tuple:
    """The numpy index of a StridedSlice (``begin``/``end``/``strides`` with TensorFlow's bit
    masks; a shrunk axis is an integer index). Ellipsis and new-axis masks are refused."""
    b, e, s = (np.asarray(v).reshape(-1).astype(np.int64) for v in (begin, end, strides))
    if masks.get("ellipsis_mask", 0) or masks.get("new_axis_mask", 0):
        raise ConversionError(f"{what}: ellipsis/new-axis masks are not supported")
    if not (b.size == e.size == s.size) or b.size > rank or (s == 0).any():
        raise ConversionError(f"{what}: begin/end/strides {b.tolist()}/{e.tolist()}/{s.tolist()} "
                              f"do not fit rank {rank}")
    index: list[Any] = []
    for i in range(b.size):
        if int(masks.get("shrink_axis_mask", 0)) >> i & 1:
            index.append(int(b[i]))
            continue
        lo = None if int(masks.get("begin_mask", 0)) >> i & 1 else int(b[i])
        hi = None if int(masks.get("end_mask", 0)) >> i & 1 else int(e[i])
        index.append(slice(lo, hi, int(s[i])))
    return tuple(index)


def strided_shape(shape: tuple[int, ...], index: tuple, what: str) -> tuple[int, ...]:
    """The shape ``x[index]`` has for ``x`` of ``shape``, without allocating ``x``."""
    probe = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape, (0,) * len(shape))
    try:
        return tuple(int(d) for d in probe[index].shape)
    except IndexError as exc:
        raise ConversionError(f"{what}: {exc} (input shape {list(shape)})") from None
