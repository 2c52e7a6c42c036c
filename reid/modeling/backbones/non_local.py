"""Non-local block (Wang et al., "Non-local Neural Networks", CVPR 2018), dot-product form.

Eq. (1)-(2) and Sec. 3.2 ("Dot product") of the paper, with its residual wrapper Eq. (6):

    y_i = (1 / N) * sum_j  theta(x_i)^T phi(x_j) * g(x_j)       N = H * W positions
    z_i = BN(W_z y_i) + x_i

theta, phi and g are 1x1 convolutions to `embed_channels` channels; W_z maps back and its
BatchNorm starts at zero (weight and bias), so a new block is the identity and does not
disturb a pretrained backbone. fast-reid's stronger baseline (SBS) inserts these blocks
after the last blocks of ResNet stages 2 and 3 with 1-channel embeddings.
"""
from __future__ import annotations

import torch
from torch import nn


class NonLocalBlock(nn.Module):
    """``x [B, C, H, W] -> x + BN(W_z(y))`` with ``y`` the dot-product non-local response.

    Args:
        channels: input (and output) channels C.
        embed_channels: width of theta / phi / g; 0 = ``C // 2`` (the paper's choice).
    """

    def __init__(self, channels: int, embed_channels: int = 0) -> None:
        super().__init__()
        if embed_channels < 0:
            raise ValueError(f"MODEL.BACKBONE.NON_LOCAL_EMBED must be >= 0, got {embed_channels}.")
        inner = embed_channels or max(1, channels // 2)
        self.embed_channels = inner
        self.theta = nn.Conv2d(channels, inner, kernel_size=1)
        self.phi = nn.Conv2d(channels, inner, kernel_size=1)
        self.g = nn.Conv2d(channels, inner, kernel_size=1)
        self.out_conv = nn.Conv2d(inner, channels, kernel_size=1)
        self.out_bn = nn.BatchNorm2d(channels)
        nn.init.zeros_(self.out_bn.weight)
        nn.init.zeros_(self.out_bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        theta = self.theta(x).flatten(2).transpose(1, 2)  # [B, N, c]
        phi = self.phi(x).flatten(2)                      # [B, c, N]
        g = self.g(x).flatten(2).transpose(1, 2)          # [B, N, c]
        affinity = torch.bmm(theta, phi) / (h * w)        # [B, N, N], Eq. (1) with C(x) = N
        y = torch.bmm(affinity, g).transpose(1, 2).reshape(b, self.embed_channels, h, w)
        return x + self.out_bn(self.out_conv(y))

    def extra_repr(self) -> str:
        return f"embed_channels={self.embed_channels}"


__all__ = ["NonLocalBlock"]
