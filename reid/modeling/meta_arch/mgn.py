"""MGN: Multiple Granularity Network (Wang et al., ACM MM 2018), as used in the Circle paper.

Structure (built from any torchvision ResNet so small variants stay cheap to test):

* shared trunk: stem, layer1, layer2 and the first block of layer3 (res_conv4_1);
* three branches, each with its own copy of the rest of layer3 (res_conv4_2 onward) and
  of layer4 (conv5): a global branch (conv5 stride 2 when ``MODEL.MGN.GLOBAL_DOWNSAMPLE``,
  as in the paper, else 1), a 2-part and a 3-part branch (conv5 stride 1, so the stripes
  keep enough rows);
* max pooling throughout by default, as in the MGN paper (max pooling keeps the most
  discriminative response of each stripe): one global vector per branch, and 2 resp. 3
  horizontal stripes from the part branches (``MODEL.MGN.POOLING`` "avg" or "gem" instead;
  each of the 8 features then has its own pooling module, e.g. its own GeM exponent);
* stripes (``MODEL.MGN.STRIPES``): "overlap" bins cover every row and share one when the
  height is not a multiple of the part count; "chunk" cuts ``ceil(H / parts)`` rows per
  stripe (the last one shorter) as ``torch.chunk`` does, which is fast-reid's rule;
* 8 features, in this order: global of the global / 2-part / 3-part branch, then the 2
  stripes top to bottom, then the 3 stripes top to bottom; each reduced to
  ``MODEL.MGN.REDUCTION_DIM`` by its own 1x1 conv + BN + ReLU (``MODEL.MGN.REDUCTION``
  "conv_bn_relu", as in the paper and fast-reid before v1.0) or by the 1x1 conv alone
  ("conv": fast-reid v1.x, whose per-feature BatchNorm is the neck below);
* test feature: the 8 reduced features concatenated (8 x 256 = 2048-d by default).

Loss layouts (``MODEL.MGN.LOSS_LAYOUT``):

* ``"concat"`` (the Circle paper): one identity head on the concatenation after the neck;
  triplet / pair-wise Circle, when listed, see the concatenation ("before"/"after" the neck).
* ``"per_branch"`` (original MGN): one identity head per reduced feature; ``loss_id`` is
  the *mean* of the 8 cross entropies times ``MODEL.LOSSES.ID.WEIGHT`` (the original
  sums them; the mean keeps the weight comparable with the other layouts and the baseline;
  multiply the weight by 8 to reproduce the sum). Triplet / pair-wise Circle are averaged
  over the 3 global features.

The neck (``MODEL.HEADS.NECK``) is applied to the concatenation in both layouts. A
BatchNorm1d normalises each channel on its own, so this equals a separate BNNeck on each
of the 8 features. ``MODEL.BACKBONE.LAST_STRIDE`` and ``MODEL.HEADS.POOLING`` are not
used: the branch strides above and ``MODEL.MGN.POOLING`` take their place.
"""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones import build_backbone, set_stage_stride
from ..neck import build_neck
from ..pooling import build_pooling
from .common import ReIDModel, freeze_unreached, missing_targets_error

LOSS_LAYOUTS: Tuple[str, ...] = ("concat", "per_branch")
STRIPE_MODES: Tuple[str, ...] = ("overlap", "chunk")
REDUCTIONS: Tuple[str, ...] = ("conv_bn_relu", "conv")
NUM_GLOBAL = 3
NUM_FEATURES = 8  # 3 global + 2 + 3 stripes


def split_stripes(fmap: torch.Tensor, parts: int, mode: str = "overlap") -> List[torch.Tensor]:
    """Cut `fmap` ``[B, C, H, W]`` into `parts` horizontal stripes, top to bottom.

    "overlap": stripe i spans rows ``floor(i * H / parts)`` to ``ceil((i + 1) * H / parts)``
    (adaptive pooling's bins), so the stripes cover every row even when H is not a multiple
    of `parts` (neighbours then share a row instead of the last rows being dropped).
    "chunk": ``torch.chunk``'s ``ceil(H / parts)`` rows each, the last stripe shorter.
    Both give equal stripes when H is a multiple of `parts`.
    """
    height = fmap.shape[2]
    if mode == "chunk":
        stripes = list(fmap.chunk(parts, dim=2))
        if len(stripes) != parts:
            raise ValueError(
                f"MODEL.MGN.STRIPES 'chunk' cannot cut a feature map of {height} rows into {parts} stripes; "
                "use a taller input (INPUT.SIZE_TEST) or MODEL.MGN.STRIPES overlap."
            )
        return stripes
    if mode != "overlap":
        raise ValueError(f"MODEL.MGN.STRIPES must be one of {', '.join(STRIPE_MODES)}, got {mode!r}.")
    return [
        fmap[:, :, (i * height) // parts: -((-(i + 1) * height) // parts)] for i in range(parts)
    ]


def stripe_max_pool(fmap: torch.Tensor, parts: int) -> List[torch.Tensor]:
    """Max over each "overlap" stripe of :func:`split_stripes`: `parts` tensors ``[B, C, 1, 1]``."""
    pooled = F.adaptive_max_pool2d(fmap, (parts, 1))
    return list(pooled.split(1, dim=2))


def _reduction(in_channels: int, out_channels: int, kind: str) -> nn.Sequential:
    conv = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=False)
    nn.init.kaiming_normal_(conv.weight, mode="fan_in", nonlinearity="relu")
    if kind == "conv":
        return nn.Sequential(conv)
    return nn.Sequential(conv, nn.BatchNorm2d(out_channels), nn.ReLU(inplace=True))


def _choice(value: object, key: str, choices: Tuple[str, ...]) -> str:
    text = str(value).lower()
    if text not in choices:
        raise ValueError(f"Unknown {key} {value!r}. Valid names: {', '.join(choices)}.")
    return text


class MGN(ReIDModel):
    """Multiple Granularity Network; see the module docstring for structure and losses.

    Train mode: ``model(images, targets)`` -> weighted loss dict; eval mode:
    ``model(images)`` -> ``[B, 8 * MODEL.MGN.REDUCTION_DIM]`` (after the neck, or before
    it with ``MODEL.HEADS.NECK_FEAT`` "before"). Images: raw RGB pixels, 0-255.
    """

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        mgn_cfg = cfg.MODEL.MGN
        self.layout = _choice(mgn_cfg.LOSS_LAYOUT, "MODEL.MGN.LOSS_LAYOUT", LOSS_LAYOUTS)
        self.stripes = _choice(mgn_cfg.STRIPES, "MODEL.MGN.STRIPES", STRIPE_MODES)
        reduction = _choice(mgn_cfg.REDUCTION, "MODEL.MGN.REDUCTION", REDUCTIONS)
        self.reduction_dim = int(mgn_cfg.REDUCTION_DIM)
        if self.reduction_dim <= 0:
            raise ValueError(f"MODEL.MGN.REDUCTION_DIM must be > 0, got {self.reduction_dim}.")
        if int(cfg.MODEL.HEADS.FC_DIM):
            raise ValueError("MODEL.HEADS.FC_DIM is for the baseline meta architecture; MGN reduces its features "
                             "with MODEL.MGN.REDUCTION. Set MODEL.HEADS.FC_DIM 0.")

        resnet = build_backbone(cfg)
        for attr in ("stem", "layer1", "layer2", "layer3", "layer4", "out_channels"):
            if not hasattr(resnet, attr):
                raise TypeError(
                    f"MGN needs a ResNet-style backbone (stem, layer1..layer4); "
                    f"MODEL.BACKBONE.NAME={cfg.MODEL.BACKBONE.NAME!r} has no {attr!r}."
                )
        if len(resnet.layer3) < 2:
            raise ValueError("MGN splits layer3 after its first block; this backbone has only one.")
        if getattr(resnet, "has_non_local", False):
            raise ValueError(
                "MGN does not support non-local blocks (its branches copy plain ResNet stages); "
                "set MODEL.BACKBONE.NON_LOCAL [0, 0, 0, 0]."
            )
        self.trunk = nn.Sequential(
            resnet.conv1, resnet.bn1, resnet.relu, resnet.maxpool,
            resnet.layer1, resnet.layer2, resnet.layer3[0],
        )
        global_stride = 2 if bool(mgn_cfg.GLOBAL_DOWNSAMPLE) else 1
        self.branch_global = self._branch(resnet.layer3[1:], resnet.layer4, global_stride)
        self.branch_part2 = self._branch(resnet.layer3[1:], resnet.layer4, 1)
        self.branch_part3 = self._branch(resnet.layer3[1:], resnet.layer4, 1)
        channels = int(resnet.out_channels)
        self.pool_name = str(mgn_cfg.POOLING).lower()
        self.pools = nn.ModuleList(
            build_pooling(self.pool_name, gem_p=float(cfg.MODEL.HEADS.GEM_P)) for _ in range(NUM_FEATURES)
        )
        self.reductions = nn.ModuleList(
            _reduction(channels, self.reduction_dim, reduction) for _ in range(NUM_FEATURES)
        )
        self.feature_dim: int = NUM_FEATURES * self.reduction_dim
        self.neck = build_neck(cfg.MODEL.HEADS.NECK, self.feature_dim)
        if not self.loss_assembly.uses_after_features:
            freeze_unreached([self.neck], "the neck (every loss uses the features before it)")
        if self.layout == "per_branch" and not self.loss_assembly.uses_identity:
            # Per-branch pair losses see only the global features; the part reductions feed
            # only the per-part identity heads.
            freeze_unreached([*self.pools[NUM_GLOBAL:], *self.reductions[NUM_GLOBAL:]],
                             "the part poolings and reductions (no identity loss)")
        widths = [self.feature_dim] if self.layout == "concat" else [self.reduction_dim] * NUM_FEATURES
        self.heads = nn.ModuleList(self.identity_heads(cfg, widths))

    @staticmethod
    def _branch(layer3_rest: nn.Sequential, layer4: nn.Sequential, stride: int) -> nn.Sequential:
        # Deep copies: each branch learns its own res_conv4_2.. and conv5 weights, all
        # starting from the same (ImageNet) initialisation.
        conv5 = copy.deepcopy(layer4)
        set_stage_stride(conv5, stride)
        return nn.Sequential(copy.deepcopy(layer3_rest), conv5)

    def set_identity_head(self, head: nn.Module) -> None:
        """Train with `head` as the one identity head of the "concat" layout (learning without
        labels puts its cluster memory here; it should have no parameters)."""
        if self.layout != "concat":
            raise ValueError(f"MGN with MODEL.MGN.LOSS_LAYOUT {self.layout!r} has one identity head per feature and "
                             "cannot take a single cluster memory: use MODEL.MGN.LOSS_LAYOUT concat.")
        self.heads = nn.ModuleList([head])

    def backbone_parameters(self) -> List[nn.Parameter]:
        """The ImageNet-initialised parts (trunk and the three branches), which
        ``SOLVER.FREEZE_ITERS`` freezes; the reductions, neck and heads keep training."""
        parts = (self.trunk, self.branch_global, self.branch_part2, self.branch_part3)
        return [p for part in parts for p in part.parameters()]

    def reduced_features(self, images: torch.Tensor) -> List[torch.Tensor]:
        """Raw pixels -> the 8 reduced features ``[B, REDUCTION_DIM]`` in documented order."""
        shared = self.trunk(self.preprocess(images))
        g_map = self.branch_global(shared)
        p2_map = self.branch_part2(shared)
        p3_map = self.branch_part3(shared)
        if self.pool_name == "max" and self.stripes == "overlap":
            # One adaptive pooling call per branch instead of a slice and a pool per stripe.
            pooled = [
                F.adaptive_max_pool2d(g_map, 1),
                F.adaptive_max_pool2d(p2_map, 1),
                F.adaptive_max_pool2d(p3_map, 1),
                *stripe_max_pool(p2_map, 2),
                *stripe_max_pool(p3_map, 3),
            ]
        else:
            maps = [g_map, p2_map, p3_map, *split_stripes(p2_map, 2, self.stripes),
                    *split_stripes(p3_map, 3, self.stripes)]
            pooled = [pool(m)[:, :, None, None] for pool, m in zip(self.pools, maps)]
        return [red(p).flatten(1) for red, p in zip(self.reductions, pooled)]

    def forward(
        self, images: torch.Tensor, targets: Optional[torch.Tensor] = None
    ) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        feats = self.reduced_features(images)
        before = torch.cat(feats, dim=1)
        after = self.neck(before)
        if not self.training:
            return after if self.neck_feat == "after" else before
        if targets is None:
            raise missing_targets_error()
        if self.layout == "concat":
            id_feats = [after]
            pair_feats = {"before": [before], "after": [after]}
        else:
            after_parts = list(after.split(self.reduction_dim, dim=1))
            id_feats = after_parts
            pair_feats = {"before": feats[:NUM_GLOBAL], "after": after_parts[:NUM_GLOBAL]}
        losses, self.last_stats = self.loss_assembly(targets, list(self.heads), id_feats, pair_feats)
        return losses


__all__ = ["LOSS_LAYOUTS", "MGN", "REDUCTIONS", "STRIPE_MODES", "split_stripes", "stripe_max_pool"]
