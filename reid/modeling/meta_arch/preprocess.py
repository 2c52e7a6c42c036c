"""Pixel normalisation inside the model, so that exported models take raw pixels."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn


class PixelNormalizer(nn.Module):
    """Map raw RGB pixels (uint8 or float, 0-255) to ``(x - mean) / std`` in float32.

    Mean and std are non-persistent buffers: they follow the model across devices but are
    not stored in checkpoints, because the run's config (saved next to every checkpoint)
    is their single source of truth. The input tensor is never modified in place: callers
    reuse it (e.g. for a flipped second pass).
    """

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        if len(mean) != 3 or len(std) != 3:
            raise ValueError(
                f"MODEL.PIXEL_MEAN and MODEL.PIXEL_STD need 3 values (RGB), got {list(mean)} "
                f"and {list(std)}."
            )
        if any(float(s) <= 0 for s in std):
            raise ValueError(f"MODEL.PIXEL_STD values must be > 0, got {list(std)}.")
        self.register_buffer(
            "pixel_mean", torch.tensor([float(m) for m in mean]).view(1, 3, 1, 1), persistent=False
        )
        self.register_buffer(
            "pixel_std", torch.tensor([float(s) for s in std]).view(1, 3, 1, 1), persistent=False
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dim() != 4 or images.shape[1] != 3:
            raise ValueError(
                f"Expected images of shape [B, 3, H, W] (RGB, 0-255), got {tuple(images.shape)}."
            )
        # Out-of-place ops only: `.to` returns the input itself when it is already float32.
        x = images.to(dtype=self.pixel_mean.dtype)
        return (x - self.pixel_mean) / self.pixel_std


__all__ = ["PixelNormalizer"]
