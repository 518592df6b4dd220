"""Selection: sorting, top-k, and the detection heads' non-maximum suppression and RoI align.

None of these multiply; their ``ops`` are comparisons and sampling arithmetic, and the
roofline costs them by those and by what they read and write (their inputs and outputs):

* ``sort`` (``sort``, ``argsort``) and ``unique`` (which sorts): ``n * ceil(log2(m))``
  for ``n`` input elements sorted along a dimension of ``m`` (all ``n`` for ``unique``
  without ``dim``);
* ``topk``: ``n * max(1, ceil(log2(k + 1)))``, a heap of ``k`` per row;
* ``nms`` (``torchvision.ops.nms``, ``batched_nms``): the sort of the ``N`` scores plus
  the IoU of every pair of boxes, :data:`IOU_OPS` each (the worst case: the number of
  pairs compared depends on the data); its output (kept indices) has a size only the
  run knows, so the traced one is that of the input it was traced on;
* ``roi_align`` (``torchvision.ops.roi_align``, ``ps_roi_align``): per output element,
  ``sampling_ratio ** 2`` bilinear samples of :data:`BILINEAR_OPS` each (an adaptive
  ``sampling_ratio <= 0`` counts as 2, as ``MultiScaleRoIAlign`` uses); it reads its whole
  feature map and boxes (an upper bound: the boxes may cover less).
"""
from __future__ import annotations

import math

from .registry import LayerKind, numel, register_kind

#: operations of one intersection-over-union of two boxes (4 min/max, 2 clamped widths,
#: an area product, the union and a division)
IOU_OPS = 10
#: operations of one bilinear sample (4 weighted taps)
BILINEAR_OPS = 8
#: the samples per bin side an adaptive RoI align is counted with
ADAPTIVE_SAMPLES = 2


def _bound(args: tuple, kwargs: dict, names: tuple[str, ...]) -> dict:
    return dict(zip(names, args)) | kwargs


@register_kind
class Sort(LayerKind):
    name = "sort"
    ops = ("sort", "argsort")
    #: the dimension sorted when the call names none (None: all elements, flattened)
    default_dim: int | None = -1

    def attrs_from_call(self, args, kwargs):
        dim = kwargs.get("dim", args[1] if len(args) > 1 else self.default_dim)
        return {"dim": dim if isinstance(dim, int) and not isinstance(dim, bool) else self.default_dim}

    def count_ops(self, attrs, in_shapes, out_shapes):
        shape = in_shapes[0] if in_shapes else ()
        dim = attrs.get("dim", self.default_dim)
        length = numel(shape) if dim is None or not shape else shape[dim]
        return float(numel(shape) * max(1, math.ceil(math.log2(max(length, 1)))))


@register_kind
class Unique(Sort):
    """``torch.unique`` sorts (all elements, or along ``dim``) and drops repeats."""
    name = "unique"
    ops = ("unique",)
    default_dim = None


@register_kind
class TopK(LayerKind):
    name = "topk"
    ops = ("topk",)

    def attrs_from_call(self, args, kwargs):
        k = _bound(args, kwargs, ("input", "k")).get("k", 1)
        return {"k": k if isinstance(k, int) else 1}

    def count_ops(self, attrs, in_shapes, out_shapes):
        n = numel(in_shapes[0]) if in_shapes else 0
        return float(n * max(1, math.ceil(math.log2(attrs.get("k", 1) + 1))))


@register_kind
class NonMaximumSuppression(LayerKind):
    name = "nms"
    ops = ("nms", "torchvision.ops.boxes.nms", "torchvision.ops.boxes.batched_nms")

    def count_ops(self, attrs, in_shapes, out_shapes):
        boxes = in_shapes[0][0] if in_shapes and in_shapes[0] else 0
        return float(boxes * max(1, math.ceil(math.log2(max(boxes, 1)))) + boxes * (boxes - 1) // 2 * IOU_OPS)


@register_kind
class RoIAlign(LayerKind):
    name = "roi_align"
    ops = ("roi_align", "ps_roi_align", "torchvision.ops.roi_align.roi_align",
           "torchvision.ops.ps_roi_align.ps_roi_align")

    def attrs_from_call(self, args, kwargs):
        if len(args) >= 6:       # torch.ops.torchvision.roi_align(input, rois, scale, height, width, ratio, ...)
            ratio = args[5]
        else:                    # torchvision.ops.roi_align(input, boxes, output_size, scale, ratio, ...)
            ratio = _bound(args, kwargs, ("input", "boxes", "output_size", "spatial_scale",
                                          "sampling_ratio")).get("sampling_ratio", -1)
        return {"sampling_ratio": ratio if isinstance(ratio, int) else -1}

    def count_ops(self, attrs, in_shapes, out_shapes):
        ratio = attrs.get("sampling_ratio", -1)
        samples = (ratio if ratio > 0 else ADAPTIVE_SAMPLES) ** 2
        return float(numel(out_shapes[0]) * samples * BILINEAR_OPS) if out_shapes else 0.0
