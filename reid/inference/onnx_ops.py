"""ONNX translation of adaptive max pooling for any static input size.

torch's TorchScript-based ONNX exporter translates ``adaptive_max_pool2d`` only when the
output size divides the input size (then it is a plain MaxPool). MGN's 3-stripe pooling at
INPUT.SIZE_TEST 256x128 pools 16 rows into 3 bins, which it rejects. Bins of adaptive
pooling are known once the input size is fixed (row bin i spans ``floor(i*H/oh)`` to
``ceil((i+1)*H/oh)``), so each bin becomes a Slice + ReduceMax, and the bins are
concatenated back. The exported graph has static H and W anyway (only the batch is free).
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, List, Sequence

import torch

_OP = "aten::adaptive_max_pool2d"


def adaptive_bins(size: int, out: int) -> List[tuple]:
    """(start, end) of each of `out` adaptive-pooling bins over `size` positions."""
    return [(math.floor(i * size / out), math.ceil((i + 1) * size / out)) for i in range(out)]


def _const(g, values: Sequence[int]):
    return g.op("Constant", value_t=torch.tensor(list(values), dtype=torch.int64))


def _reduce_max(g, x, axes: Sequence[int]):
    # ReduceMax takes its axes as an attribute up to opset 17 and as an input from opset 18.
    if g.opset >= 18:
        return g.op("ReduceMax", x, _const(g, axes), keepdims_i=1)
    return g.op("ReduceMax", x, axes_i=list(axes), keepdims_i=1)


def _adaptive_max_pool2d(g, x, output_size):
    from torch.onnx import symbolic_helper

    out_h, out_w = symbolic_helper._parse_arg(output_size, "is")
    # varyingSizes() keeps the static dims and gives None for the dynamic batch axis.
    sizes = x.type().varyingSizes() if x.type().kind() == "TensorType" else None
    if out_h == 1 and out_w == 1:
        return g.op("GlobalMaxPool", x), None
    if not sizes or sizes[2] is None or sizes[3] is None:
        return symbolic_helper._unimplemented(
            "adaptive_max_pool2d", "the input height and width must be static to export it", x
        )
    rows = []
    for h0, h1 in adaptive_bins(int(sizes[2]), int(out_h)):
        cols = []
        for w0, w1 in adaptive_bins(int(sizes[3]), int(out_w)):
            part = g.op("Slice", x, _const(g, [h0, w0]), _const(g, [h1, w1]), _const(g, [2, 3]))
            cols.append(_reduce_max(g, part, [2, 3]))
        rows.append(cols[0] if len(cols) == 1 else g.op("Concat", *cols, axis_i=3))
    pooled = rows[0] if len(rows) == 1 else g.op("Concat", *rows, axis_i=2)
    # The indices output is never used by the models; the exporter accepts None for it.
    return pooled, None


@contextlib.contextmanager
def adaptive_pool_symbolic(opset: int) -> Iterator[None]:
    """Within the block, ONNX export translates adaptive max pooling with any static size."""
    torch.onnx.register_custom_op_symbolic(_OP, _adaptive_max_pool2d, opset)
    try:
        yield
    finally:
        # Leave torch's exporter as it was for other code in this process.
        torch.onnx.unregister_custom_op_symbolic(_OP, opset)


__all__ = ["adaptive_bins", "adaptive_pool_symbolic"]
