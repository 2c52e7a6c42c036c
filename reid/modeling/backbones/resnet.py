"""torchvision ResNet as a re-ID backbone: configurable last stride, ImageNet weights.

The backbone keeps torchvision's attribute names (``conv1``, ``bn1``, ``layer1`` ...
``layer4``) so that torchvision state dicts load without renaming, and drops the
classifier (``avgpool``, ``fc``): pooling belongs to the meta architecture.
"""
from __future__ import annotations

import logging
import os
from typing import Dict, List, Tuple
from urllib.error import URLError

import torch
from torch import nn
from torchvision import models as tv_models
from torchvision.models.resnet import BasicBlock, Bottleneck

from reid.utils.registry import UnknownNameError

logger = logging.getLogger(__name__)

# name -> (torchvision constructor, ImageNet weights enum member).
# IMAGENET1K_V1 is the checkpoint the published re-ID baselines (BoT, MGN, the Circle
# paper) start from; the V2 weights were trained with a much heavier recipe, and a
# different starting point would make the paper's numbers harder to compare against.
_ARCHS = {
    "resnet18": (tv_models.resnet18, tv_models.ResNet18_Weights.IMAGENET1K_V1),
    "resnet34": (tv_models.resnet34, tv_models.ResNet34_Weights.IMAGENET1K_V1),
    "resnet50": (tv_models.resnet50, tv_models.ResNet50_Weights.IMAGENET1K_V1),
    "resnet101": (tv_models.resnet101, tv_models.ResNet101_Weights.IMAGENET1K_V1),
    "resnet152": (tv_models.resnet152, tv_models.ResNet152_Weights.IMAGENET1K_V1),
}

RESNET_NAMES: Tuple[str, ...] = tuple(_ARCHS)


class PretrainedWeightsError(RuntimeError):
    """ImageNet weights were requested but could not be obtained or do not fit."""


def set_stage_stride(stage: nn.Sequential, stride: int) -> None:
    """Set the spatial stride of a ResNet stage (its first block) in place.

    The stride lives in the first block's 3x3 convolution (``conv2`` of a bottleneck,
    ``conv1`` of a basic block) and in its shortcut's 1x1 convolution; both must agree
    or the residual sum fails on mismatched sizes.
    """
    if stride not in (1, 2):
        raise ValueError(f"stride must be 1 or 2, got {stride!r}.")
    first = stage[0]
    if isinstance(first, Bottleneck):
        first.conv2.stride = (stride, stride)
    elif isinstance(first, BasicBlock):
        first.conv1.stride = (stride, stride)
    else:
        raise TypeError(
            f"set_stage_stride expects a torchvision ResNet stage, got a first block of type "
            f"{type(first).__name__}."
        )
    if first.downsample is not None:
        first.downsample[0].stride = (stride, stride)
    first.stride = stride


def _unwrap_state_dict(obj: object, path: str) -> Dict[str, torch.Tensor]:
    """Return the tensor mapping inside a saved file (plain or wrapped in a dict)."""
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} does not hold a state dict of tensors. "
            "Point it to a torchvision ResNet checkpoint (e.g. resnet50-0676ba61.pth)."
        )
    # Checkpoints saved from DataParallel/DDP prefix every key with "module.".
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in obj.items()}


class ResNetBackbone(nn.Module):
    """A torchvision ResNet without its classifier; ``forward`` returns the conv5 map.

    Args:
        name: one of ``RESNET_NAMES``.
        last_stride: stride of ``layer4`` (1 keeps a 16x8 map for 256x128 input, as in
            BoT/MGN; 2 is torchvision's original).
        pretrained: start from ImageNet weights (``pretrained_path`` when given, else
            torchvision's download/cache).
        pretrained_path: local torchvision state dict used instead of downloading.

    Attributes:
        out_channels: channels of the returned feature map (2048 for ResNet50).
    """

    def __init__(
        self,
        name: str = "resnet50",
        last_stride: int = 1,
        pretrained: bool = False,
        pretrained_path: str = "",
    ) -> None:
        super().__init__()
        key = str(name).lower()
        if key not in _ARCHS:
            raise UnknownNameError(
                f"Unknown MODEL.BACKBONE.NAME {name!r}. Valid names: {', '.join(RESNET_NAMES)}."
            )
        if last_stride not in (1, 2):
            raise ValueError(
                f"MODEL.BACKBONE.LAST_STRIDE must be 1 or 2, got {last_stride!r}."
            )
        self.name = key
        constructor, self._weights = _ARCHS[key]
        net = constructor(weights=None)
        self.conv1, self.bn1, self.relu, self.maxpool = net.conv1, net.bn1, net.relu, net.maxpool
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        self.out_channels: int = net.fc.in_features
        set_stage_stride(self.layer4, last_stride)
        if pretrained:
            self.load_imagenet(pretrained_path)
        elif pretrained_path:
            logger.info(
                "MODEL.BACKBONE.PRETRAINED is off: ignoring PRETRAINED_PATH=%s (random init).",
                pretrained_path,
            )

    # ------------------------------------------------------------------ weights
    def load_imagenet(self, path: str = "") -> Tuple[List[str], List[str]]:
        """Load ImageNet weights from `path` or torchvision; return (missing, unexpected) keys.

        The classifier keys (``fc.*``) are expected to be unused and are not reported.
        """
        if path:
            state = self._read_local(path)
            source = path
        else:
            state = self._download()
            source = self._weights.url
        return self._load_checked(state, source)

    def _read_local(self, path: str) -> Dict[str, torch.Tensor]:
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} does not exist. Set it to a local copy "
                f"of the torchvision file ({os.path.basename(self._weights.url)}), clear it to "
                "download the weights, or set MODEL.BACKBONE.PRETRAINED False to train from scratch."
            )
        obj = torch.load(path, map_location="cpu", weights_only=True)
        return _unwrap_state_dict(obj, path)

    def _download(self) -> Dict[str, torch.Tensor]:
        url = self._weights.url
        filename = os.path.basename(url)
        cache = os.path.join(torch.hub.get_dir(), "checkpoints", filename)
        try:
            # Reads the torch hub cache when the file is there; downloads (once) otherwise.
            return self._weights.get_state_dict(progress=True, check_hash=True)
        except (URLError, OSError) as exc:  # URLError, socket and SSL errors are all OSError
            raise PretrainedWeightsError(
                f"Could not download the ImageNet weights for {self.name} from {url} ({exc}). "
                f"Either set MODEL.BACKBONE.PRETRAINED_PATH to a local copy of the torchvision "
                f"file {filename} (or place it at {cache}), or connect to the internet; "
                "or set MODEL.BACKBONE.PRETRAINED False to train from scratch (random init)."
            ) from exc

    def _load_checked(self, state: Dict[str, torch.Tensor], source: str) -> Tuple[List[str], List[str]]:
        own = self.state_dict()
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
        bad_shapes = [
            f"{k}: file {tuple(v.shape)} vs model {tuple(own[k].shape)}"
            for k, v in state.items()
            if k in own and own[k].shape != v.shape
        ]
        if bad_shapes:
            raise PretrainedWeightsError(
                f"Weights in {source} do not fit {self.name} ({len(bad_shapes)} shape mismatches, "
                f"first: {bad_shapes[0]}). Use the torchvision file for {self.name} "
                f"({os.path.basename(self._weights.url)})."
            )
        result = self.load_state_dict(state, strict=False)
        missing, unexpected = list(result.missing_keys), list(result.unexpected_keys)
        if missing and len(missing) == len(own):
            raise PretrainedWeightsError(
                f"No key of {source} matches {self.name}; is it a torchvision ResNet state dict?"
            )
        if missing:
            logger.warning("ImageNet weights %s: %d missing keys: %s", source, len(missing), missing)
        if unexpected:
            logger.warning(
                "ImageNet weights %s: %d unexpected keys: %s", source, len(unexpected), unexpected
            )
        logger.info("Loaded ImageNet weights for %s from %s.", self.name, source)
        return missing, unexpected

    # ------------------------------------------------------------------ forward
    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """conv1 + bn + relu + max pool (stride 4 overall)."""
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised images ``[B, 3, H, W]`` -> conv5 feature map ``[B, out_channels, h, w]``."""
        x = self.stem(x)
        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        return self.layer4(x)
