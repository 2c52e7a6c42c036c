"""TransReID with its Jigsaw Patch Module (He et al., ICCV 2021, Sec. 3.4): a ViT, a global
branch and k local branches, each with its own BNNeck and identity head.

* The ViT (``vit_*_transreid``, with SIE when camera ids are used) runs up to its last block.
* Global branch ``b1``: a copy of the last block and of the final norm over every token; the
  class token is the global feature.
* JPM: the patch tokens are shifted (the first ``JPM_SHIFT - 1`` patches move to the end, as
  TransReID's code does it: its shift counts the class token) and shuffled in
  ``JPM_GROUPS`` groups (patch ``g * N/G + j`` goes to position ``j * G + g``; when N is not a
  multiple of G, the second-to-last patch is repeated once at the end first), then cut into
  ``JPM_PARTS`` = k parts of ``N // k`` patches. Each part, behind the class token, goes through
  the shared local branch ``b2`` (another copy of the last block and norm); its class token is
  that part's local feature. ``JPM_REARRANGE False`` cuts the unshuffled patches instead.
* Each of the 1 + k features has its own BNNeck (``neck``, ``local_necks.<i>``) and, for training,
  its own identity head (``head``, ``local_heads.<i>``).
* Losses (TransReID's): each configured loss is ``0.5 * global + 0.5 * mean over the k local
  features`` (identity heads on the features after their necks; triplet / pair-wise Circle on the
  features ``MODEL.LOSSES.*.FEAT`` names).
* Test feature: ``[g, l_1 / k, ..., l_k / k]`` concatenated, ``(1 + k) * D`` wide, after the
  necks or (``MODEL.HEADS.NECK_FEAT before``) before them.

The ViT's own last block and norm are kept (TransReID's files have them) but unused, so frozen.
"""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Tuple, Union

import torch
from torch import nn

from ..backbones import ReIDViT, build_backbone
from ..backbones.vit import VIT_SPECS
from ..neck import build_neck
from .common import ReIDModel, freeze_unreached, missing_targets_error


def jigsaw_order(num_patches: int, shift: int, groups: int) -> torch.Tensor:
    """Patch indices after TransReID's shift and shuffle (see the module docstring)."""
    if not 1 <= shift <= num_patches or groups < 1:
        raise ValueError(f"MODEL.TRANSREID.JPM_SHIFT must be in 1..{num_patches} and JPM_GROUPS >= 1, "
                         f"got {shift} and {groups}.")
    order = torch.cat([torch.arange(shift - 1, num_patches), torch.arange(0, shift - 1)])
    if num_patches % groups:
        order = torch.cat([order, order[-2:-1]])
        if order.numel() % groups:
            raise ValueError(f"MODEL.TRANSREID.JPM_GROUPS {groups} does not divide the {num_patches} patches "
                             "(nor one more); choose a divisor.")
    return order.view(groups, -1).t().reshape(-1)


class TransReID(ReIDModel):
    """TransReID with JPM; ``model(images, targets, camids)`` in training, ``model(images, camids=...)``
    (``camids`` only with SIE) in eval mode -> ``[B, (1 + k) * D]``."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        tr = cfg.MODEL.TRANSREID
        self.backbone = build_backbone(cfg)
        if not isinstance(self.backbone, ReIDViT):
            raise ValueError(f"MODEL.META_ARCHITECTURE transreid needs a TransReID ViT backbone ({', '.join(VIT_SPECS)}), "
                             f"not {cfg.MODEL.BACKBONE.NAME!r}: set MODEL.BACKBONE.NAME to one of them.")
        self.parts = int(tr.JPM_PARTS)
        num_patches = self.backbone.num_patches
        if not 1 <= self.parts <= num_patches:
            raise ValueError(f"MODEL.TRANSREID.JPM_PARTS must be in 1..{num_patches} (the patches), got {self.parts}.")
        order = jigsaw_order(num_patches, int(tr.JPM_SHIFT), int(tr.JPM_GROUPS)) if bool(tr.JPM_REARRANGE) \
            else torch.arange(num_patches)
        self.register_buffer("patch_order", order + 1, persistent=False)  # + 1: after the class token
        last, norm = self.backbone.blocks[-1], self.backbone.norm
        self.b1 = nn.Sequential(copy.deepcopy(last), copy.deepcopy(norm))
        self.b2 = nn.Sequential(copy.deepcopy(last), copy.deepcopy(norm))
        freeze_unreached([last, norm], "the ViT's last block and norm (JPM's branches use copies of them)")
        dim = self.backbone.out_channels
        self.feature_dim = dim * (1 + self.parts)
        self.neck = build_neck(cfg.MODEL.HEADS.NECK, dim)
        self.local_necks = nn.ModuleList(build_neck(cfg.MODEL.HEADS.NECK, dim) for _ in range(self.parts))
        if not self.loss_assembly.uses_after_features:
            freeze_unreached([self.neck, self.local_necks], "the necks (every loss uses the features before them)")
        heads = self.identity_heads(cfg, [dim] * (1 + self.parts))
        self.head: Optional[nn.Module] = heads[0] if heads else None
        self.local_heads = nn.ModuleList(heads[1:])

    def branch_features(self, images: torch.Tensor,
                        camids: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        """The global feature ``[B, D]`` and the k local features, before the necks."""
        tokens = self.backbone.forward_tokens(self.preprocess(images), camids, last=False)
        global_feat = self.b1(tokens)[:, 0]
        patches = tokens[:, self.patch_order]
        length = self.backbone.num_patches // self.parts
        cls = tokens[:, :1]
        # The k parts go through the shared branch b2 as one batch of B * k sequences.
        parts = patches[:, : length * self.parts].reshape(tokens.shape[0] * self.parts, length, tokens.shape[2])
        local = self.b2(torch.cat([cls.repeat_interleave(self.parts, dim=0), parts], dim=1))[:, 0]
        # Explicit sizes, not -1: an empty batch has no elements to infer a size from.
        return global_feat, list(local.view(tokens.shape[0], self.parts, tokens.shape[2]).unbind(1))

    def forward(self, images: torch.Tensor, targets: Optional[torch.Tensor] = None,
                camids: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        global_feat, local_feats = self.branch_features(images, camids)
        global_after = self.neck(global_feat)
        local_after = [neck(f) for neck, f in zip(self.local_necks, local_feats)]
        if not self.training:
            first, rest = (global_after, local_after) if self.neck_feat == "after" else (global_feat, local_feats)
            return torch.cat([first] + [f / self.parts for f in rest], dim=1)
        if targets is None:
            raise missing_targets_error()
        heads = [self.head] if self.head is not None else []
        global_losses, self.last_stats = self.loss_assembly(
            targets, heads, [global_after], {"before": [global_feat], "after": [global_after]})
        local_losses, _ = self.loss_assembly(
            targets, list(self.local_heads), local_after, {"before": local_feats, "after": local_after})
        return {k: 0.5 * global_losses[k] + 0.5 * local_losses[k] for k in global_losses}


__all__ = ["TransReID", "jigsaw_order"]
