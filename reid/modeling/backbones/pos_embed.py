"""The patch grid of a Vision Transformer and the position embedding on it: one rule for every ViT.

* :func:`patch_grid`: the rows and columns of patches a ``patch x patch`` convolution with a
  stride takes from an image, ``floor((H - P) / S) + 1`` by ``floor((W - P) / S) + 1``
  (TransReID's overlapping patches: 256 x 128, P 16, S 12 -> 21 x 10; S 16 -> 16 x 8).
* :func:`guess_grid` and :func:`source_grid`: the grid a pretrained position embedding was
  trained on, from its length (square: ImageNet's 14 x 14 at 224 x 224; or twice as tall as
  wide: person images pretrained at 256 x 128) or as the config names it.
* :func:`resize_pos_embed`: a position embedding moved from one grid to another, the leading
  (class-token) rows kept. Interpolation: bilinear with half-pixel centres
  (``align_corners=False``), as TransReID and CLIP-ReID resize theirs; :data:`INTERPOLATION`.

The layouts: timm's and TransReID's ``pos_embed`` ``[1, 1 + rows*cols, C]``; OpenAI CLIP's
``positional_embedding`` ``[1 + rows*cols, C]`` (no batch axis): both are taken and kept.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .pretrained import PretrainedWeightsError

#: ``torch.nn.functional.interpolate``'s mode for position grids (with ``align_corners=False``).
INTERPOLATION = "bilinear"


def patch_grid(img_size: Sequence[int], patch: int, stride: Union[int, Sequence[int]]) -> Tuple[int, int]:
    """Rows and columns of the patches a ``patch``-sized convolution with `stride` (one number,
    or rows and columns) takes from an image of `img_size` (height, width).

    No check: an image smaller than a patch gives a count below 1, which the caller refuses
    with its own settings' names.
    """
    sy, sx = (stride, stride) if isinstance(stride, int) else (int(stride[0]), int(stride[1]))
    return (int(img_size[0]) - patch) // sy + 1, (int(img_size[1]) - patch) // sx + 1


def guess_grid(positions: int) -> Optional[Tuple[int, int]]:
    """The grid (rows, cols) a pretrained position embedding of `positions` patches was trained on,
    when its length says: square (ImageNet, n x n) or twice as tall as wide (2n x n: person
    images pretrained at 256x128, as PersonViT's LUPerson weights); None otherwise. No length is
    both (sqrt 2 is irrational), but a grid of another shape whose length is one of these
    (18 x 8 = 144 = 12 x 12) cannot be told apart: such files name their grid
    (MODEL.BACKBONE.PRETRAINED_GRID, :func:`source_grid`)."""
    for rows_per_col in (1, 2):
        side = int(round(math.sqrt(positions / rows_per_col)))
        if side > 0 and rows_per_col * side * side == positions:
            return rows_per_col * side, side
    return None


def source_grid(positions: int, source: str, grid: Sequence[int] = (), name: str = "pos_embed") -> Tuple[int, int]:
    """The grid (rows, cols) of a pretrained position embedding of `positions` patch positions:
    `grid` (MODEL.BACKBONE.PRETRAINED_GRID) when given, else :func:`guess_grid`; one error line
    naming the file `source` and the tensor `name` when the grid is malformed or does not fit."""
    where = f"MODEL.BACKBONE.PRETRAINED_PATH={source}"
    if grid:
        if len(grid) != 2 or min(grid) < 1:
            raise PretrainedWeightsError(f"MODEL.BACKBONE.PRETRAINED_GRID must be [rows, cols] (or [] to infer it), "
                                         f"got {list(grid)}.")
        if grid[0] * grid[1] != positions:
            raise PretrainedWeightsError(
                f"{where}: {name} has {positions} patch positions, MODEL.BACKBONE.PRETRAINED_GRID {list(grid)} "
                f"has {grid[0] * grid[1]}; set it to the grid the file was pretrained on.")
        return int(grid[0]), int(grid[1])
    found = guess_grid(positions)
    if found is None:
        raise PretrainedWeightsError(
            f"{where}: {name} has {positions} patch positions, neither a square grid (ImageNet) nor one twice "
            "as tall as wide (person images at 256x128); set MODEL.BACKBONE.PRETRAINED_GRID [rows, cols] to "
            "the grid the file was pretrained on.")
    return found


def resize_pos_embed(pos_embed: torch.Tensor, grid: Tuple[int, int], prefix: int = 1,
                     source: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """Position embedding ``[1, prefix + h*w, C]`` (or ``[prefix + h*w, C]``, OpenAI's layout) of the
    grid `source` (rows, cols; by default :func:`guess_grid` of its length) resized to `grid`
    (:data:`INTERPOLATION`); the `prefix` (class-token) rows are kept. The result has the
    input's layout."""
    if pos_embed.dim() == 2:
        return resize_pos_embed(pos_embed[None], grid, prefix, source)[0]
    tokens, old = pos_embed[:, :prefix], pos_embed[0, prefix:]
    rows, cols = source or guess_grid(old.shape[0]) or (0, 0)
    if not rows or rows * cols != old.shape[0]:
        shape = (f"not a grid of {rows} x {cols}" if source else
                 "neither a square grid (ImageNet) nor one twice as tall as wide (person images at 256x128)")
        raise PretrainedWeightsError(f"pos_embed has {old.shape[0]} patch positions, {shape}: give the grid it was "
                                     "pretrained on (MODEL.BACKBONE.PRETRAINED_GRID [rows, cols]).")
    old = old.reshape(1, rows, cols, -1).permute(0, 3, 1, 2)
    new = F.interpolate(old, size=tuple(grid), mode=INTERPOLATION, align_corners=False)
    return torch.cat([tokens, new.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], -1)], dim=1)


__all__ = ["INTERPOLATION", "guess_grid", "patch_grid", "resize_pos_embed", "source_grid"]
