"""ResNet and ResNet-IBN-a as re-ID backbones: last stride, stem pooling, non-local blocks.

The backbone keeps torchvision's attribute names (``conv1``, ``bn1``, ``layer1`` ...
``layer4``) so that torchvision and IBN-Net state dicts load without renaming, and drops
the classifier (``avgpool``, ``fc``): pooling belongs to the meta architecture.
"""
from __future__ import annotations

import logging
import os
from typing import Dict, List, Sequence, Tuple
from urllib.error import URLError

import torch
from torch import nn
from torchvision import models as tv_models
from torchvision.models.resnet import BasicBlock, Bottleneck

from reid.utils.path_kinds import file_problem, is_missing
from reid.utils.registry import UnknownNameError

from .ibn import apply_ibn_a
from .non_local import NonLocalBlock
from .pretrained import PretrainedWeightsError, check_pretrained, file_misfit, read_pretrained, unwrap_state_dict

logger = logging.getLogger(__name__)

# name -> (torchvision constructor, URL of the ImageNet weights, IBN-a).
# IMAGENET1K_V1 is the checkpoint the published re-ID baselines (BoT, MGN, the Circle
# paper) start from; the V2 weights were trained with a much heavier recipe, and a
# different starting point would make the paper's numbers harder to compare against.
# The IBN-a files are the IBN-Net authors' release (github.com/XingangPan/IBN-Net, v1.0),
# the ones fast-reid's IBN models start from.
_IBN_RELEASE = "https://github.com/XingangPan/IBN-Net/releases/download/v1.0/"
_ARCHS = {
    "resnet18": (tv_models.resnet18, tv_models.ResNet18_Weights.IMAGENET1K_V1.url, False),
    "resnet34": (tv_models.resnet34, tv_models.ResNet34_Weights.IMAGENET1K_V1.url, False),
    "resnet50": (tv_models.resnet50, tv_models.ResNet50_Weights.IMAGENET1K_V1.url, False),
    "resnet101": (tv_models.resnet101, tv_models.ResNet101_Weights.IMAGENET1K_V1.url, False),
    "resnet152": (tv_models.resnet152, tv_models.ResNet152_Weights.IMAGENET1K_V1.url, False),
    "resnet18_ibn_a": (tv_models.resnet18, _IBN_RELEASE + "resnet18_ibn_a-2f571257.pth", True),
    "resnet34_ibn_a": (tv_models.resnet34, _IBN_RELEASE + "resnet34_ibn_a-94bc1577.pth", True),
    "resnet50_ibn_a": (tv_models.resnet50, _IBN_RELEASE + "resnet50_ibn_a-d9d0bb7b.pth", True),
    "resnet101_ibn_a": (tv_models.resnet101, _IBN_RELEASE + "resnet101_ibn_a-59ea0ac6.pth", True),
}

RESNET_NAMES: Tuple[str, ...] = tuple(_ARCHS)
_EXPECTED = "a torchvision ResNet checkpoint (e.g. resnet50-0676ba61.pth)"

#: ``MODEL.BACKBONE.STEM_POOL`` values: the 3x3 stride-2 max pool after conv1, either
#: torchvision's (padding 1) or fast-reid's (no padding, ceil mode; fast-reid since 2020-08).
#: Both give the same map size for even inputs, but the windows are one pixel apart.
STEM_POOLS: Tuple[str, ...] = ("pad", "ceil")


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


def _stem_pool(kind: str) -> nn.MaxPool2d:
    key = str(kind).lower()
    if key == "pad":
        return nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
    if key == "ceil":
        return nn.MaxPool2d(kernel_size=3, stride=2, padding=0, ceil_mode=True)
    raise ValueError(f"MODEL.BACKBONE.STEM_POOL must be one of {', '.join(STEM_POOLS)}, got {kind!r}.")


def _check_non_local(counts: Sequence[int], stages: Sequence[nn.Sequential]) -> List[int]:
    counts = [int(c) for c in counts]
    if len(counts) != 4 or any(c < 0 for c in counts):
        raise ValueError(
            f"MODEL.BACKBONE.NON_LOCAL needs 4 non-negative counts (blocks per stage), got {list(counts)}."
        )
    for i, (count, stage) in enumerate(zip(counts, stages)):
        if count > len(stage):
            raise ValueError(
                f"MODEL.BACKBONE.NON_LOCAL asks for {count} non-local blocks in stage {i + 1}, which has "
                f"only {len(stage)} residual blocks."
            )
    return counts


class ResNetBackbone(nn.Module):
    """A ResNet (torchvision layout) without its classifier; ``forward`` returns the conv5 map.

    Args:
        name: one of ``RESNET_NAMES``; ``*_ibn_a`` builds ResNet-IBN-a (see ``ibn.py``).
        last_stride: stride of ``layer4`` (1 keeps a 16x8 map for 256x128 input, as in
            BoT/MGN; 2 is torchvision's original).
        pretrained: start from ImageNet weights (``pretrained_path`` when given, else
            the download cache: torchvision's files, or the IBN-Net authors' for IBN-a).
        pretrained_path: local ImageNet state dict used instead of downloading.
        stem_pool: ``"pad"`` (torchvision's max pool) or ``"ceil"`` (fast-reid's).
        non_local: per stage, the number of :class:`NonLocalBlock` inserted after its
            last residual blocks (fast-reid's SBS ResNet50: ``[0, 2, 3, 0]``).
        non_local_embed: embedding width of those blocks (0 = half their input channels).

    Attributes:
        out_channels: channels of the returned feature map (2048 for ResNet50).
        non_local: for each stage, a ModuleList of its non-local blocks (often empty).
    """

    def __init__(
        self,
        name: str = "resnet50",
        last_stride: int = 1,
        pretrained: bool = False,
        pretrained_path: str = "",
        stem_pool: str = "pad",
        non_local: Sequence[int] = (0, 0, 0, 0),
        non_local_embed: int = 0,
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
        constructor, self._url, ibn = _ARCHS[key]
        net = constructor(weights=None)
        if ibn:
            apply_ibn_a(net)
        self.conv1, self.bn1, self.relu = net.conv1, net.bn1, net.relu
        self.maxpool = _stem_pool(stem_pool)
        self.layer1, self.layer2, self.layer3, self.layer4 = net.layer1, net.layer2, net.layer3, net.layer4
        self.out_channels: int = net.fc.in_features
        set_stage_stride(self.layer4, last_stride)
        stages = self.stages()
        counts = _check_non_local(non_local, stages)
        self.non_local = nn.ModuleList(
            nn.ModuleList(NonLocalBlock(_stage_channels(stage), int(non_local_embed)) for _ in range(count))
            for count, stage in zip(counts, stages)
        )
        self.has_non_local = any(counts)
        if pretrained:
            self.load_imagenet(pretrained_path)
        elif pretrained_path:
            logger.info(
                "MODEL.BACKBONE.PRETRAINED is off: ignoring PRETRAINED_PATH=%s (random init).",
                pretrained_path,
            )

    def stages(self) -> List[nn.Sequential]:
        """``[layer1, layer2, layer3, layer4]``."""
        return [self.layer1, self.layer2, self.layer3, self.layer4]

    @property
    def _source(self) -> str:
        return "IBN-Net authors' release" if "_ibn_" in self.name else "torchvision"

    # ------------------------------------------------------------------ weights
    def load_imagenet(self, path: str = "") -> Tuple[List[str], List[str]]:
        """Load ImageNet weights from `path` or the download cache; return (missing, unexpected) keys.

        The classifier keys (``fc.*``) are expected to be unused and the non-local blocks
        (not part of any ImageNet file; they start as the identity) expected to be missing;
        neither is reported.
        """
        if path:
            return self._load_checked(self._read_local(path), path)
        return self._load_checked(self._download(), self._url)

    def _read_local(self, path: str) -> Dict[str, torch.Tensor]:
        problem = file_problem(path)
        if is_missing(problem):  # other kinds (a FIFO, a folder) are named by read_pretrained
            raise FileNotFoundError(
                f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} {problem}. Set it to a local copy "
                f"of the {self._source} file ({os.path.basename(self._url)}), clear it to "
                "download the weights, or set MODEL.BACKBONE.PRETRAINED False to train from scratch."
            )
        return read_pretrained(path, _EXPECTED)

    def _download(self) -> Dict[str, torch.Tensor]:
        url = self._url
        filename = os.path.basename(url)
        cache = os.path.join(torch.hub.get_dir(), "checkpoints", filename)
        try:
            # Reads the torch hub cache when the file is there; downloads (once) otherwise.
            # Both sources put the SHA-256 prefix in the file name, which check_hash verifies.
            state = torch.hub.load_state_dict_from_url(url, progress=True, check_hash=True, map_location="cpu",
                                                       weights_only=True)
        except (URLError, OSError) as exc:  # URLError, socket and SSL errors are all OSError
            raise PretrainedWeightsError(
                f"Could not download the ImageNet weights for {self.name} from {url} ({exc}). "
                f"Either set MODEL.BACKBONE.PRETRAINED_PATH to a local copy of the {self._source} "
                f"file {filename} (or place it at {cache}), or connect to the internet; "
                "or set MODEL.BACKBONE.PRETRAINED False to train from scratch (random init)."
            ) from exc
        return unwrap_state_dict(state, url, _EXPECTED)

    def _load_checked(self, state: Dict[str, torch.Tensor], source: str) -> Tuple[List[str], List[str]]:
        own = self.state_dict()
        state = {k: v for k, v in state.items() if not k.startswith("fc.")}
        bad_shapes = [p for p in (file_misfit(k, v, own) for k, v in state.items() if k in own) if p]
        if bad_shapes:
            raise PretrainedWeightsError(
                f"Weights in {source} do not fit {self.name} ({len(bad_shapes)} shape mismatches, "
                f"first: {bad_shapes[0]}). Use the {self._source} file for {self.name} "
                f"({os.path.basename(self._url)})."
            )
        check_pretrained(state, own, source, f"the {self._source} file ({os.path.basename(self._url)})")
        result = self.load_state_dict(state, strict=False)
        missing = [k for k in result.missing_keys if not k.startswith("non_local.")]
        unexpected = list(result.unexpected_keys)
        if missing and len(result.missing_keys) == len(own):
            raise PretrainedWeightsError(
                f"No key of {source} matches {self.name}; is it a {self._source} ResNet state dict "
                f"({os.path.basename(self._url)})?"
            )
        mix_up = _ibn_mix_up(self.name, missing, unexpected)
        if mix_up:
            raise PretrainedWeightsError(f"Weights in {source} do not fit {self.name}: {mix_up}")
        for what, keys in (("missing", missing), ("unexpected", unexpected)):
            if keys:
                logger.warning("ImageNet weights %s: %d %s keys: %s", source, len(keys), what, keys)
        logger.info("Loaded ImageNet weights for %s from %s.", self.name, source)
        return missing, unexpected

    # ------------------------------------------------------------------ forward
    def stem(self, x: torch.Tensor) -> torch.Tensor:
        """conv1 + bn + relu + max pool (stride 4 overall)."""
        return self.maxpool(self.relu(self.bn1(self.conv1(x))))

    def run_stage(self, index: int, x: torch.Tensor) -> torch.Tensor:
        """Stage `index` (0-3) with its non-local blocks after its last residual blocks."""
        stage, blocks = self.stages()[index], self.non_local[index]
        if len(blocks) == 0:
            return stage(x)
        first = len(stage) - len(blocks)
        for i, block in enumerate(stage):
            x = block(x)
            if i >= first:
                x = blocks[i - first](x)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised images ``[B, 3, H, W]`` -> conv5 feature map ``[B, out_channels, h, w]``."""
        x = self.stem(x)
        for index in range(4):
            x = self.run_stage(index, x)
        return x


def _stage_channels(stage: nn.Sequential) -> int:
    """Output channels of a torchvision ResNet stage (its last block's last norm)."""
    last = stage[-1]
    return int(last.bn3.num_features if isinstance(last, Bottleneck) else last.bn2.num_features)


def _ibn_mix_up(name: str, missing: Sequence[str], unexpected: Sequence[str]) -> str:
    """What to do when a plain ResNet file meets an IBN-a model or the other way round, else ""."""
    if any(".bn1.IN." in k for k in missing):
        return (f"it has no IBN layers (a plain ResNet file) while MODEL.BACKBONE.NAME is {name}; use the "
                f"IBN-Net file {os.path.basename(_ARCHS[name][1])}, or set MODEL.BACKBONE.NAME {name[:-6]}.")
    if any(".bn1.IN." in k for k in unexpected):
        ibn = f"{name}_ibn_a"
        use = f"set MODEL.BACKBONE.NAME {ibn}, or use" if ibn in _ARCHS else "use"
        return (f"it has IBN layers (an IBN-a file) while MODEL.BACKBONE.NAME is {name}; {use} the torchvision "
                f"file {os.path.basename(_ARCHS[name][1])}.")
    return ""
