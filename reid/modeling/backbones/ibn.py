"""IBN-a: Instance-Batch Normalisation in the residual blocks (Pan et al., ECCV 2018).

Pan et al. ("Two at Once: Enhancing Learning and Generalization Capacities via IBN-Net",
Sec. 3.2, Fig. 3b) replace the first normalisation of every residual block in conv2_x to
conv4_x (torchvision's ``layer1``..``layer3``) by an IBN layer: the first half of the
channels is instance-normalised (affine), the rest batch-normalised. ``layer4`` and the
stem keep plain BatchNorm, because instance normalisation in the deep layers removes
content information the classifier needs. The same rule holds for the basic blocks of
ResNet-18/34 (the norm after their first 3x3 convolution).

Instance normalisation removes per-image appearance (colour, contrast) from the shallow
features, which is why IBN-a backbones transfer better across re-ID datasets.
"""
from __future__ import annotations

import torch
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

#: Stages whose blocks get an IBN layer (Pan et al.: conv2_x .. conv4_x).
IBN_A_STAGES = ("layer1", "layer2", "layer3")


class IBN(nn.Module):
    """InstanceNorm (affine) on the first ``floor(C / 2)`` channels, BatchNorm on the rest.

    The sub-modules are called ``IN`` and ``BN`` because the IBN-Net authors' ImageNet files
    (and fast-reid's checkpoints) name their tensors ``...bn1.IN.weight`` / ``...bn1.BN.*``;
    keeping the names lets those files load without renaming.

    Args:
        channels: number of input (and output) channels.
    """

    def __init__(self, channels: int) -> None:
        super().__init__()
        if channels < 2:
            raise ValueError(f"IBN needs at least 2 channels, got {channels}.")
        self.half = channels // 2
        self.IN = nn.InstanceNorm2d(self.half, affine=True)
        self.BN = nn.BatchNorm2d(channels - self.half)

    @property
    def num_features(self) -> int:
        """Channels normalised in total (as ``BatchNorm2d.num_features``)."""
        return self.half + self.BN.num_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first, rest = x.split([self.half, x.shape[1] - self.half], dim=1)
        return torch.cat((self.IN(first.contiguous()), self.BN(rest.contiguous())), dim=1)


def apply_ibn_a(net: nn.Module) -> None:
    """Turn a torchvision ResNet into ResNet-IBN-a in place.

    In every block of ``layer1``..``layer3`` the norm after the first convolution (``bn1``)
    becomes an :class:`IBN` of the same width; everything else, including the block types
    (so :func:`set_stage_stride` keeps working), is unchanged.
    """
    for stage_name in IBN_A_STAGES:
        for block in getattr(net, stage_name):
            if not isinstance(block, (Bottleneck, BasicBlock)):
                raise TypeError(f"apply_ibn_a expects torchvision ResNet blocks, got {type(block).__name__}.")
            block.bn1 = IBN(block.bn1.num_features)


__all__ = ["IBN", "IBN_A_STAGES", "apply_ibn_a"]
