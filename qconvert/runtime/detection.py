"""TFLite_Detection_PostProcess: the SSD detector's last step (LiteRT's custom op), in float32.

Inputs (float32): box encodings [1, N, >=4] (center-size y, x, h, w per anchor, scaled), class
scores [1, N, C or C+1] (with a background column first when C+1), anchors [N, 4] (center-size
y, x, h, w). Options (the FlexBuffer map): ``max_detections``, ``max_classes_per_detection``,
``detections_per_class`` (100 when absent), ``use_regular_nms`` (false when absent),
``nms_score_threshold``, ``nms_iou_threshold``, ``num_classes``, ``y_scale``, ``x_scale``,
``h_scale``, ``w_scale``. Outputs (float32): boxes [1, D, 4] (ymin, xmin, ymax, xmax), classes
[1, D], scores [1, D], count [1], with D = max_detections * max_classes_per_detection.

What LiteRT 2.3's kernel computes, step by step (the behaviour, re-implemented here):

- Decoding, per anchor, in binary64 from the float32 values, each result rounded once to float32:
  ``yc = y / y_scale * anchor_h + anchor_y`` (``xc`` likewise with x, w), ``half_h = 0.5 *
  exp(h / h_scale) * anchor_h`` (``half_w`` likewise); then in float32 ``ymin = yc - half_h``,
  ``xmin = xc - half_w``, ``ymax = yc + half_h``, ``xmax = xc + half_w``. ``exp`` is the C
  library's (Python's ``math.exp`` calls the same one).
- One class's NMS: the scores ``>= nms_score_threshold`` in anchor order, sorted by decreasing
  score with ties in anchor order (a stable sort), then greedily: take the next candidate still
  active, deactivate every later one whose IoU with it is ``> nms_iou_threshold``, until the limit
  is reached. IoU in float32: each area ``(ymax - ymin) * (xmax - xmin)``, 0 when either area is
  ``<= 0``, else ``inter / ((area_i + area_j) - inter)`` with the intersection's sides clamped at 0.
  Every decoded box must have ``ymin <= ymax`` and ``xmin <= xmax`` and the IoU threshold lie in
  (0, 1], or the kernel fails.
- Fast NMS (``use_regular_nms`` false): per anchor, its best ``k = min(max_classes_per_detection,
  num_classes)`` classes (k = 1: the first maximum; k > 1: C++'s ``std::partial_sort`` as GNU
  libstdc++ does it, which decides the order of equal scores); one NMS over the anchors' best
  scores, up to ``max_detections``; each kept anchor fills ``k`` slots from slot
  ``max_classes_per_detection * rank``.
- Regular NMS: per class, NMS up to ``min(detections_per_class, max_detections)``; after each
  class the kept list so far and the class's picks are merged by decreasing score, stably (on a
  tie the earlier list first: ``std::inplace_merge``), and cut to ``max_detections``. The first
  ``max_detections`` slots are written, zeros after the count. This is LiteRT's one-thread order
  (its default); with more threads it merges per-thread lists, and equal scores of different
  classes may then come in another order.
- Slots the kernel does not write (fast NMS past the count; either variant past ``max_detections``
  or past ``k`` classes when ``max_classes_per_detection`` exceeds them) keep what LiteRT's arena
  held: here they are 0 (see docs/run.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

F32 = np.float32
OPTIONS = ("max_detections", "max_classes_per_detection", "nms_score_threshold", "nms_iou_threshold",
           "num_classes", "y_scale", "x_scale", "h_scale", "w_scale")  # required; the other two have defaults


class DetectionError(ValueError):
    """What makes LiteRT's kernel fail (Prepare or Eval), in words."""


def _adjust_heap(a: list[int], hole: int, length: int, value: int, before: Callable[[int, int], bool]) -> None:
    """libstdc++'s sift-down to a leaf, then sift-up of ``value`` (its ``__adjust_heap``)."""
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if before(a[child], a[child - 1]):
            child -= 1
        a[hole] = a[child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        a[hole] = a[child - 1]
        hole = child - 1
    parent = (hole - 1) // 2
    while hole > top and before(a[parent], value):
        a[hole] = a[parent]
        hole = parent
        parent = (hole - 1) // 2
    a[hole] = value


def partial_sort(a: list[int], middle: int, before: Callable[[int, int], bool]) -> None:
    """``std::partial_sort(a, a + middle, a + len(a), before)`` as GNU libstdc++ orders it, in
    place: a heap of the first ``middle`` elements, each later element that goes ``before`` the
    heap's top swapped in, then the heap sorted. Elements equal under ``before`` end in the order
    this sequence of moves leaves them (not a stable order), which is what decides ties."""
    if middle <= 0:
        return
    if middle > 1:  # make the heap
        parent = (middle - 2) // 2
        while True:
            _adjust_heap(a, parent, middle, a[parent], before)
            if parent == 0:
                break
            parent -= 1
    for i in range(middle, len(a)):
        if before(a[i], a[0]):
            value, a[i] = a[i], a[0]
            _adjust_heap(a, 0, middle, value, before)
    end = middle
    while end > 1:  # sort the heap
        end -= 1
        value, a[end] = a[end], a[0]
        _adjust_heap(a, 0, end, value, before)


def decreasing_top(values: np.ndarray, count: int) -> list[int]:
    """The indices of the ``count`` largest ``values`` in decreasing order, ties as LiteRT has them:
    for one, the first maximum; for more, libstdc++'s partial sort of the indices 0..n-1."""
    if count == 1:
        return [int(np.argmax(values))]  # the first maximum (no NaN reaches here: see _check_scores)
    order = list(range(len(values)))
    vals = [float(v) for v in values]
    partial_sort(order, count, lambda i, j: vals[i] > vals[j])
    return order[:count]


def decode_boxes(encodings: np.ndarray, anchors: np.ndarray, scales: tuple[float, float, float, float]) -> np.ndarray:
    """Corner boxes [N, 4] (ymin, xmin, ymax, xmax) in float32 from center-size encodings and anchors."""
    y, x, h, w = (encodings[:, k].astype(np.float64) for k in range(4))
    ay, ax, ah, aw = (anchors[:, k].astype(np.float64) for k in range(4))
    ys, xs, hs, ws = (float(F32(s)) for s in scales)
    yc = (y / ys * ah + ay).astype(F32)
    xc = (x / xs * aw + ax).astype(F32)
    eh = np.array([math.exp(v) for v in (h / hs).tolist()], np.float64)  # the C library's exp
    ew = np.array([math.exp(v) for v in (w / ws).tolist()], np.float64)
    half_h = (0.5 * eh * ah).astype(F32)
    half_w = (0.5 * ew * aw).astype(F32)
    return np.stack([yc - half_h, xc - half_w, yc + half_h, xc + half_w], axis=1).astype(F32)


def _iou(boxes: np.ndarray, i: int, others: np.ndarray) -> np.ndarray:
    """IoU of box ``i`` with each of ``others`` (indices), in float32 as the kernel computes it."""
    b, o = boxes[i], boxes[others]
    area_i = (b[2] - b[0]) * (b[3] - b[1])
    area_o = (o[:, 2] - o[:, 0]) * (o[:, 3] - o[:, 1])
    ih = np.maximum(np.minimum(b[2], o[:, 2]) - np.maximum(b[0], o[:, 0]), F32(0))
    iw = np.maximum(np.minimum(b[3], o[:, 3]) - np.maximum(b[1], o[:, 1]), F32(0))
    inter = (ih * iw).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = (inter / ((area_i + area_o) - inter)).astype(F32)
    return np.where((area_i <= 0) | (area_o <= 0), F32(0), iou)


def nms_one_class(boxes: np.ndarray, scores: np.ndarray, score_threshold: float, iou_threshold: float,
                  limit: int) -> list[int]:
    """Anchor indices kept by one class's greedy NMS, best first (at most ``limit``)."""
    kept = np.nonzero(scores >= F32(score_threshold))[0]
    order = kept[np.argsort(-scores[kept], kind="stable")]  # decreasing, ties in anchor order
    active = np.ones(len(order), bool)
    selected: list[int] = []
    limit = min(len(order), limit)
    for i in range(len(order)):
        if len(selected) >= limit or not active.any():
            break
        if not active[i]:
            continue
        selected.append(int(order[i]))
        active[i] = False
        later = np.nonzero(active[i + 1:])[0] + i + 1
        if len(later):
            active[later[_iou(boxes, int(order[i]), order[later]) > F32(iou_threshold)]] = False
    return selected


def _option(options: Mapping[str, Any], key: str, kind: type) -> Any:
    if key not in options:
        raise DetectionError(f"its custom options lack '{key}'")
    value = options[key]
    if kind is float:
        return float(F32(value))
    return int(value)


def postprocess(encodings: np.ndarray, class_scores: np.ndarray, anchors: np.ndarray,
                options: Mapping[str, Any]) -> list[np.ndarray]:
    """The four outputs (boxes, classes, scores, count) of TFLite_Detection_PostProcess."""
    max_det = _option(options, "max_detections", int)
    max_cls = _option(options, "max_classes_per_detection", int)
    per_class = int(options["detections_per_class"]) if options.get("detections_per_class") is not None else 100
    regular = bool(options["use_regular_nms"]) if options.get("use_regular_nms") is not None else False
    score_thr = _option(options, "nms_score_threshold", float)
    iou_thr = _option(options, "nms_iou_threshold", float)
    num_classes = _option(options, "num_classes", int)
    scales = tuple(_option(options, k, float) for k in ("y_scale", "x_scale", "h_scale", "w_scale"))
    if encodings.ndim != 3 or class_scores.ndim != 3 or anchors.ndim != 2:
        raise DetectionError(f"inputs of {encodings.ndim}, {class_scores.ndim} and {anchors.ndim} dimensions; "
                             "LiteRT's kernel wants 3, 3 and 2")
    n = encodings.shape[1]
    if encodings.shape[0] != 1 or encodings.shape[2] < 4 or anchors.shape[0] < n or anchors.shape[1] != 4:
        raise DetectionError(f"box encodings {list(encodings.shape)} with anchors {list(anchors.shape)}; LiteRT's "
                             "kernel wants [1, N, >=4] and [N, 4]")
    with_bg = class_scores.shape[2]
    if class_scores.shape[0] != 1 or class_scores.shape[1] != n or not 0 <= with_bg - num_classes <= 1:
        raise DetectionError(f"class scores {list(class_scores.shape)} for {n} boxes and num_classes {num_classes}; "
                             "LiteRT's kernel wants [1, N, num_classes] or [1, N, num_classes + 1]")
    if regular:
        per_class = min(per_class, max_det)  # LiteRT keeps no more per class than it can output
    if max_det < 0 or max_cls <= 0 or regular and per_class <= 0:
        raise DetectionError(f"max_detections {max_det}, max_classes_per_detection {max_cls}, detections_per_class "
                             f"{per_class}: LiteRT's kernel wants max_detections >= 0 (> 0 with regular NMS), "
                             "max_classes_per_detection > 0 and detections_per_class > 0")
    if not 0.0 < iou_thr <= 1.0:
        raise DetectionError(f"nms_iou_threshold {iou_thr}: LiteRT's kernel wants it in (0, 1]")
    boxes = decode_boxes(encodings[0, :, :4].astype(F32), anchors[:n].astype(F32), scales)  # type: ignore[arg-type]
    bad = np.nonzero((boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3]))[0]
    if len(bad) and (num_classes > 0 or not regular):  # checked where an NMS runs
        raise DetectionError(f"decoded box {int(bad[0])} has ymin > ymax or xmin > xmax (a negative anchor "
                             "height or width); LiteRT's kernel fails on it")
    scores = class_scores[0].astype(F32)
    if np.isnan(scores).any():
        raise DetectionError("a class score is NaN; LiteRT's sorts are undefined on it")
    offset = with_bg - num_classes
    slots = max_det * max_cls
    out_boxes = np.zeros((1, slots, 4), F32)
    out_classes = np.zeros((1, slots), F32)
    out_scores = np.zeros((1, slots), F32)
    if regular:
        count = _regular(boxes, scores, offset, num_classes, per_class, max_det, score_thr, iou_thr,
                         out_boxes, out_classes, out_scores)
    else:
        count = _fast(boxes, scores, offset, num_classes, max_cls, max_det, score_thr, iou_thr,
                      out_boxes, out_classes, out_scores)
    return [out_boxes, out_classes, out_scores, np.array([count], F32)]


def _fast(boxes: np.ndarray, scores: np.ndarray, offset: int, num_classes: int, max_cls: int, max_det: int,
          score_thr: float, iou_thr: float, out_boxes: np.ndarray, out_classes: np.ndarray,
          out_scores: np.ndarray) -> int:
    k = min(max_cls, num_classes)
    per_anchor = [decreasing_top(scores[row, offset:offset + num_classes], k) for row in range(len(scores))]
    best = np.array([scores[row, offset + per_anchor[row][0]] for row in range(len(scores))], F32)
    selected = nms_one_class(boxes, best, score_thr, iou_thr, max_det)
    for rank, anchor in enumerate(selected):
        for col, cls in enumerate(per_anchor[anchor]):
            slot = max_cls * rank + col
            out_boxes[0, slot] = boxes[anchor]
            out_classes[0, slot] = F32(cls)
            out_scores[0, slot] = scores[anchor, offset + cls]
    return len(selected)


def _regular(boxes: np.ndarray, scores: np.ndarray, offset: int, num_classes: int, per_class: int, max_det: int,
             score_thr: float, iou_thr: float, out_boxes: np.ndarray, out_classes: np.ndarray,
             out_scores: np.ndarray) -> int:
    kept: list[tuple[float, int, int]] = []  # the best so far, best first: (score, anchor, class)
    for cls in range(num_classes):
        column = scores[:, offset + cls]
        picks = [(float(column[a]), a, cls) for a in nms_one_class(boxes, column, score_thr, iou_thr, per_class)]
        # a stable merge of two lists sorted by decreasing score: on a tie the earlier list's entry first
        kept = sorted(kept + picks, key=lambda e: -e[0])[:max_det]
    for slot, (score, anchor, cls) in enumerate(kept):
        out_boxes[0, slot] = boxes[anchor]
        out_classes[0, slot] = F32(cls)
        out_scores[0, slot] = F32(score)
    return len(kept)
