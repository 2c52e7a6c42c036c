"""OSNet (Zhou et al., ICCV 2019) and OSNet-AIN (Zhou et al., TPAMI 2021) as re-ID backbones.

OSNet is built from omni-scale residual blocks (paper Sec. 3.2-3.3, Fig. 4): a 1x1
reduction to a quarter of the block's width, T = 4 streams of 1..4 stacked "Lite 3x3"
layers (a pointwise 1x1 convolution followed by a depthwise 3x3, then BN + ReLU; each layer
widens the receptive field by 2), a unified aggregation gate (one small channel-attention
network, shared by the streams, that weights each stream's output per channel before they
are summed), and a 1x1 expansion with BN added to the shortcut. Three stages of two blocks
follow a 7x7 stem; 1x1 conv + 2x2 average pooling transitions halve the map after the first
two stages, so the feature map has stride 16 (16x8 for 256x128 crops).

Width multipliers scale every channel count: x1.0 (64, 256, 384, 512), x0.75, x0.5 and x0.25.
Variants with instance normalisation, for cross-domain generalisation:

* ``osnet_ibn_x1_0``: IBN-style; the stem's norm is InstanceNorm and the two blocks of the
  first stage instance-normalise their output (after the residual sum, before the ReLU).
* ``osnet_ain_*``: the architecture found by the TPAMI paper's search (OSNet-AIN): the stem
  uses InstanceNorm, and five of the six blocks' residual branches end in InstanceNorm
  instead of BatchNorm (first stage both blocks, second stage the second block, third stage
  the first block), added to the shortcut before the ReLU.

Module and parameter names follow torchreid's state dicts (``conv1.conv.weight``,
``conv2.0.conv2a.conv1.weight``, ``conv2.0.gate.fc1.bias``, ``pool2.0.bn.running_var``,
...), so its ImageNet and re-ID files load strictly; the AIN variants name their streams
``conv2.<t>.layers.<i>`` and keep the transitions in ``pool2`` / ``pool3`` as torchreid's
files do. The pooled vector and torchreid's ``fc`` embedding are the meta architecture's
(``MODEL.HEADS.POOLING``, ``MODEL.HEADS.FC_DIM``), not the backbone's.
"""
from __future__ import annotations

import logging
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import nn

from reid.utils.path_kinds import file_problem, is_missing
from reid.utils.registry import UnknownNameError

from .pretrained import PretrainedWeightsError, check_pretrained, file_misfit, read_pretrained

logger = logging.getLogger(__name__)

#: Instance normalisation of a block: none, on the output after the residual sum (IBN), or
#: at the end of the residual branch in place of its last BatchNorm (AIN).
IN_NONE, IN_AFTER_SUM, IN_BRANCH = "none", "after_sum", "branch"

_WIDTHS = {"x1_0": (64, 256, 384, 512), "x0_75": (48, 192, 288, 384), "x0_5": (32, 128, 192, 256),
           "x0_25": (16, 64, 96, 128)}
_PLAIN = ((IN_NONE, IN_NONE), (IN_NONE, IN_NONE), (IN_NONE, IN_NONE))
_IBN = ((IN_AFTER_SUM, IN_AFTER_SUM), (IN_NONE, IN_NONE), (IN_NONE, IN_NONE))
_AIN = ((IN_BRANCH, IN_BRANCH), (IN_NONE, IN_BRANCH), (IN_BRANCH, IN_NONE))

#: Where torchreid publishes the ImageNet weights (Google Drive file ids).
_DRIVE = "https://drive.google.com/uc?id="
_IMAGENET_IDS = {
    "osnet_x1_0": "1LaG1EJpHrxdAxKnSCJ_i0u-nbxSAeiFY",
    "osnet_x0_75": "1uwA9fElHOk3ZogwbeY5GkLI6QPTX70Hq",
    "osnet_x0_5": "16DGLbZukvVYgINws8u8deSaOqjybZ83i",
    "osnet_x0_25": "1rb8UN5ZzPKRc_xvtHlyDh-cSz88YX9hs",
    "osnet_ibn_x1_0": "1sr90V6irlYYDd4_4ISU2iruoRG8J__6l",
    "osnet_ain_x1_0": "1-CaioD9NaqbHK_kzSMW8VE4_3KcsRjEo",
    "osnet_ain_x0_75": "1apy0hpsMypqstfencdH-jKIUEFOW4xoM",
    "osnet_ain_x0_5": "1KusKvEYyKGDTUBVRxRiz55G31wkihB6l",
    "osnet_ain_x0_25": "1SxQt2AvmEcgWNhaRb2xC4rP6ZwVDP0Wt",
}


@dataclass(frozen=True)
class OSNetSpec:
    """One OSNet variant: channels (stem, stage 1..3), stem norm, block IN modes, naming."""

    channels: Tuple[int, int, int, int]
    stem_in: bool
    block_in: Tuple[Tuple[str, str], ...]
    ain_naming: bool


OSNET_SPECS: Dict[str, OSNetSpec] = {
    **{f"osnet_{w}": OSNetSpec(c, False, _PLAIN, False) for w, c in _WIDTHS.items()},
    "osnet_ibn_x1_0": OSNetSpec(_WIDTHS["x1_0"], True, _IBN, False),
    **{f"osnet_ain_{w}": OSNetSpec(c, True, _AIN, True) for w, c in _WIDTHS.items()},
}
OSNET_NAMES: Tuple[str, ...] = tuple(OSNET_SPECS)


class ConvNorm(nn.Module):
    """Convolution (no bias) -> BatchNorm / affine InstanceNorm / nothing -> optional ReLU.

    Attributes ``conv`` and ``bn`` (also for the InstanceNorm, as in torchreid's files).
    """

    def __init__(self, cin: int, cout: int, kernel: int = 1, stride: int = 1, norm: str = "bn",
                 relu: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False)
        if norm == "bn":
            self.bn: Optional[nn.Module] = nn.BatchNorm2d(cout)
        elif norm == "in":
            self.bn = nn.InstanceNorm2d(cout, affine=True)
        else:
            self.bn = None
        self.relu = relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return torch.relu(x) if self.relu else x


class LiteConv3x3(nn.Module):
    """Lite 3x3 (paper Fig. 3): pointwise 1x1, depthwise 3x3, BN, ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 1, bias=False)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, groups=channels, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv2(self.conv1(x))))


def _lite_stream(channels: int, depth: int) -> nn.Sequential:
    """`depth` stacked Lite 3x3 layers (OSNet-AIN naming: ``layers.<i>``)."""
    return nn.Sequential(OrderedDict(layers=nn.Sequential(*(LiteConv3x3(channels) for _ in range(depth)))))


class AggregationGate(nn.Module):
    """Unified aggregation gate (paper Eq. 3): ``x * sigmoid(fc2(relu(fc1(avgpool(x)))))``.

    ``fc1`` reduces the channels 16-fold; both are 1x1 convolutions with bias.
    """

    def __init__(self, channels: int, reduction: int = 16) -> None:
        super().__init__()
        hidden = max(1, channels // reduction)
        self.fc1 = nn.Conv2d(channels, hidden, 1, bias=True)
        self.fc2 = nn.Conv2d(hidden, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = self.fc2(torch.relu(self.fc1(x.mean(dim=(2, 3), keepdim=True))))
        return x * torch.sigmoid(weights)


class OSBlock(nn.Module):
    """Omni-scale residual bottleneck with T = 4 streams and a shared aggregation gate.

    Args:
        cin, cout: input and output channels (the streams run at ``cout // 4``).
        instance_norm: ``IN_NONE``, ``IN_AFTER_SUM`` (IBN) or ``IN_BRANCH`` (AIN).
        ain_naming: streams as ``conv2.<t>.layers.<i>`` (OSNet-AIN files) instead of
            ``conv2a`` (one layer) and ``conv2b/c/d.<i>`` (OSNet files).
    """

    def __init__(self, cin: int, cout: int, instance_norm: str = IN_NONE, ain_naming: bool = False) -> None:
        super().__init__()
        mid = cout // 4
        self.instance_norm = instance_norm
        self.conv1 = ConvNorm(cin, mid)
        if ain_naming:
            self.conv2 = nn.ModuleList(_lite_stream(mid, depth) for depth in range(1, 5))
        else:
            self.conv2a = LiteConv3x3(mid)
            self.conv2b, self.conv2c, self.conv2d = (
                nn.Sequential(*(LiteConv3x3(mid) for _ in range(depth))) for depth in (2, 3, 4))
        self.gate = AggregationGate(mid)
        self.conv3 = ConvNorm(mid, cout, norm="none" if instance_norm == IN_BRANCH else "bn", relu=False)
        self.downsample = ConvNorm(cin, cout, relu=False) if cin != cout else None
        if instance_norm != IN_NONE:
            self.IN = nn.InstanceNorm2d(cout, affine=True)

    def streams(self) -> List[nn.Module]:
        """The 4 streams, shallowest first."""
        if hasattr(self, "conv2a"):
            return [self.conv2a, self.conv2b, self.conv2c, self.conv2d]
        return list(self.conv2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reduced = self.conv1(x)
        mixed = sum(self.gate(stream(reduced)) for stream in self.streams())
        branch = self.conv3(mixed)
        if self.instance_norm == IN_BRANCH:
            branch = self.IN(branch)
        shortcut = x if self.downsample is None else self.downsample(x)
        out = branch + shortcut
        if self.instance_norm == IN_AFTER_SUM:
            out = self.IN(out)
        return torch.relu(out)


def _transition(channels: int) -> nn.Sequential:
    """1x1 conv + BN + ReLU, then 2x2 average pooling (halves the map)."""
    return nn.Sequential(ConvNorm(channels, channels), nn.AvgPool2d(2, stride=2))


def _init_weights(module: nn.Module) -> None:
    """He (fan-out) init for convolutions; the norms keep PyTorch's unit scale / zero shift."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class OSNetBackbone(nn.Module):
    """An OSNet without its pooling, embedding and classifier; ``forward`` returns the conv5 map.

    Args:
        name: one of ``OSNET_NAMES``.
        pretrained: start from torchreid's ImageNet weights (``pretrained_path`` when
            given, else the download cache, else a download from torchreid's Google Drive).
        pretrained_path: local ImageNet file used instead of downloading.

    Attributes:
        out_channels: channels of the returned feature map (512 for x1.0).
    """

    def __init__(self, name: str = "osnet_x1_0", pretrained: bool = False, pretrained_path: str = "") -> None:
        super().__init__()
        key = str(name).lower()
        if key not in OSNET_SPECS:
            raise UnknownNameError(
                f"Unknown MODEL.BACKBONE.NAME {name!r}. Valid OSNet names: {', '.join(OSNET_NAMES)}.")
        self.name = key
        spec = OSNET_SPECS[key]
        c0, c1, c2, c3 = spec.channels
        self.conv1 = ConvNorm(3, c0, kernel=7, stride=2, norm="in" if spec.stem_in else "bn")
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages = [self._stage(cin, cout, modes, spec.ain_naming)
                  for cin, cout, modes in zip((c0, c1, c2), (c1, c2, c3), spec.block_in)]
        if spec.ain_naming:  # transitions are separate modules in OSNet-AIN files ...
            self.conv2, self.pool2 = stages[0], _transition(c1)
            self.conv3, self.pool3 = stages[1], _transition(c2)
        else:  # ... and the last member of the stage in OSNet files
            self.conv2 = nn.Sequential(*stages[0], _transition(c1))
            self.conv3 = nn.Sequential(*stages[1], _transition(c2))
        self.conv4 = stages[2]
        self.conv5 = ConvNorm(c3, c3)
        self.out_channels: int = c3
        _init_weights(self)
        if pretrained:
            self.load_imagenet(pretrained_path)
        elif pretrained_path:
            logger.info("MODEL.BACKBONE.PRETRAINED is off: ignoring PRETRAINED_PATH=%s (random init).",
                        pretrained_path)

    @staticmethod
    def _stage(cin: int, cout: int, modes: Sequence[str], ain_naming: bool) -> nn.Sequential:
        blocks = [OSBlock(cin if i == 0 else cout, cout, mode, ain_naming) for i, mode in enumerate(modes)]
        return nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalised images ``[B, 3, H, W]`` -> feature map ``[B, out_channels, H/16, W/16]``."""
        x = self.maxpool(self.conv1(x))
        for name in ("conv2", "pool2", "conv3", "pool3", "conv4", "conv5"):
            module = getattr(self, name, None)
            if module is not None:
                x = module(x)
        return x

    # ------------------------------------------------------------------ ImageNet weights
    @property
    def url(self) -> str:
        return _DRIVE + _IMAGENET_IDS[self.name]

    @property
    def cache_file(self) -> str:
        """Where a downloaded file is kept (torchreid's file name, in torch's hub cache)."""
        return os.path.join(torch.hub.get_dir(), "checkpoints", f"{self.name}_imagenet.pth")

    def load_imagenet(self, path: str = "") -> List[str]:
        """Load torchreid's ImageNet weights for this variant; returns the file keys not used.

        The file's ``fc.*`` embedding and 1000-class ``classifier.*`` are not part of the
        backbone and are left out; every backbone tensor must come from the file.
        """
        source = path or self.cache_file
        if not path and not os.path.isfile(source):
            self._download(source)
        problem = file_problem(source)
        if is_missing(problem):  # other kinds (a FIFO, a folder) are named by read_pretrained
            raise FileNotFoundError(
                f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} {problem}. Set it to a local copy of torchreid's "
                f"ImageNet file for {self.name} (from {self.url}), clear it to download, or set "
                "MODEL.BACKBONE.PRETRAINED False to train from scratch.")
        expected = f"torchreid's ImageNet file for {self.name} ({self.url})"
        return self._load_checked(read_pretrained(source, expected), source)

    def _download(self, target: str) -> None:
        why = ""
        try:
            import gdown

            os.makedirs(os.path.dirname(target), exist_ok=True)
            partial = target + ".part"
            if gdown.download(self.url, partial, quiet=False) and os.path.isfile(partial):
                os.replace(partial, target)
                return
            why = "the download gave no file"
        except Exception as exc:  # gdown raises many types (network, quota, HTML instead of the file)
            why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        raise PretrainedWeightsError(
            f"Could not download the ImageNet weights for {self.name} from {self.url} ({why}), and "
            "MODEL.BACKBONE.PRETRAINED_PATH is empty. Set MODEL.BACKBONE.PRETRAINED_PATH to a local copy of "
            f"torchreid's {self.name} ImageNet file (or place it at {target}), or connect to the internet; "
            "or set MODEL.BACKBONE.PRETRAINED False to train from scratch.")

    def _load_checked(self, state: Mapping[str, torch.Tensor], source: str) -> List[str]:
        own = self.state_dict()
        unused = [k for k in state if k.startswith(("fc.", "classifier."))]
        state = {k: v for k, v in state.items() if k not in unused}
        fits = osnet_name_from_state(state)
        for key, value in state.items():
            problem = file_misfit(key, value, own)
            if problem:
                hint = f"set MODEL.BACKBONE.NAME {fits}" if fits else f"use the ImageNet file for {self.name}"
                raise PretrainedWeightsError(
                    f"Weights in {source} do not fit {self.name}: {problem}; it is a {fits or 'different'} "
                    f"file: {hint}.")
        missing = [k for k in own if k not in state]
        if missing:
            raise PretrainedWeightsError(
                f"Weights in {source} do not fit {self.name}: {missing[0]} is missing ({len(missing)} tensors); "
                f"use torchreid's ImageNet file for {self.name} ({self.url}).")
        check_pretrained(state, own, source, f"torchreid's ImageNet file for {self.name} ({self.url})")
        self.load_state_dict(state, strict=True)
        logger.info("Loaded ImageNet weights for %s from %s.", self.name, source)
        return unused


def osnet_name_from_state(state: Mapping[str, torch.Tensor]) -> Optional[str]:
    """The OSNet variant whose backbone has `state`'s keys (no prefix), or None.

    Read from the naming (AIN streams), the IN tensors (IBN) and the stem width.
    """
    stem = state.get("conv1.conv.weight")
    if stem is None or stem.dim() != 4:
        return None
    width = {c[0]: w for w, c in _WIDTHS.items()}.get(int(stem.shape[0]))
    if width is None:
        return None
    if any(".conv2.0.layers." in k for k in state):
        name = f"osnet_ain_{width}"
    elif "conv2.0.IN.weight" in state:
        name = f"osnet_ibn_{width}"
    else:
        name = f"osnet_{width}"
    return name if name in OSNET_SPECS else None


__all__ = [
    "OSNET_NAMES",
    "OSNET_SPECS",
    "AggregationGate",
    "LiteConv3x3",
    "OSBlock",
    "OSNetBackbone",
    "OSNetSpec",
    "osnet_name_from_state",
]
