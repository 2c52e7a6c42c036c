"""CLIP-ReID's first stage as a model the trainer runs (Li et al., AAAI 2023, Sec. 3.3).

The image encoder is frozen, so its features of the training images are computed once (the
projection ``f_proj``, without augmentation or SIE, as CLIP-ReID's stage-1 loader) and the
"images" of this model's batches are those features. Per batch of features ``V`` with labels
``y``, the text features ``T`` of the same labels' prompts (reid.modeling.clip_text) give

    loss_i2t = L_supcon(V -> T),   loss_t2i = L_supcon(T -> V)

(reid.modeling.losses.supcon); only the identities' prompt tokens train. Afterwards
:meth:`PromptLearning.text_features` gives every identity's text feature for the second stage.
"""
from __future__ import annotations

import logging
from typing import Dict, Optional

import torch
from torch import nn

from ..backbones.clip import CLIP_SPECS, read_clip_file
from ..clip_text import PromptedText, text_state
from ..losses import supervised_contrastive_loss

logger = logging.getLogger(__name__)


class PromptLearning(nn.Module):
    """``model(features [B, P], targets [B])`` -> ``{"loss_i2t", "loss_t2i"}`` (see the module
    docstring); ``text`` is the :class:`PromptedText` whose ``cls_ctx`` trains."""

    def __init__(self, text: PromptedText) -> None:
        super().__init__()
        self.text = text
        self.last_stats: Dict[str, torch.Tensor] = {}

    def forward(self, images: torch.Tensor, targets: torch.Tensor,
                camids: Optional[torch.Tensor] = None) -> Dict[str, torch.Tensor]:
        text = self.text(targets)
        return {"loss_i2t": supervised_contrastive_loss(images, text, targets, targets),
                "loss_t2i": supervised_contrastive_loss(text, images, targets, targets)}

    @torch.no_grad()
    def text_features(self, batch: int = 64) -> torch.Tensor:
        """Every identity's text feature ``[num_classes, P]`` (float32), `batch` prompts at a time."""
        was = self.training
        self.eval()
        labels = torch.arange(self.text.cls_ctx.shape[0], device=self.text.cls_ctx.device)
        out = torch.cat([self.text(labels[i:i + batch]).float() for i in range(0, len(labels), batch)])
        self.train(was)
        return out


def build_prompt_learning(cfg, num_classes: int) -> PromptLearning:
    """The first stage's model for ``cfg``'s CLIP backbone: the text side of the CLIP file that
    ``MODEL.BACKBONE.PRETRAINED_PATH`` names (or its download); with ``MODEL.BACKBONE.PRETRAINED``
    False the text encoder keeps open_clip's random initialisation (tests), with a warning."""
    name = str(cfg.MODEL.BACKBONE.NAME).lower()
    if name not in CLIP_SPECS:
        raise ValueError(f"MODEL.CLIPREID.PROMPT_LEARNING needs a CLIP backbone ({', '.join(CLIP_SPECS)}), "
                         f"not {cfg.MODEL.BACKBONE.NAME!r}.")
    spec = CLIP_SPECS[name]
    state, source = None, ""
    if bool(cfg.MODEL.BACKBONE.PRETRAINED):
        whole, source = read_clip_file(spec, str(cfg.MODEL.BACKBONE.PRETRAINED_PATH))
        state = text_state(whole)
        if not state:
            raise ValueError(f"MODEL.BACKBONE.PRETRAINED_PATH={source!r} holds no CLIP text encoder, which "
                             f"MODEL.CLIPREID.PROMPT_LEARNING needs: point it to OpenAI's {spec.openai_name} file.")
    else:
        logger.warning("MODEL.BACKBONE.PRETRAINED is False: the prompts are learned through a randomly "
                       "initialised text encoder, which has no meaning to transfer.")
    return PromptLearning(PromptedText(spec, str(cfg.MODEL.CLIPREID.PROMPT), num_classes, state, source))


__all__ = ["PromptLearning", "build_prompt_learning"]
