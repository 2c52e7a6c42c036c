"""CLIP's text encoder reading one learned prompt per identity, and the fixed classifier its
text features make (CLIP-ReID, Li et al., AAAI 2023, Sec. 3.2-3.3).

* :class:`PromptedText`: OpenAI's text transformer (open_clip's ``TextTransformer`` modules, with
  OpenAI's parameter names and QuickGELU) fed ``[prefix, the identity's M tokens, suffix]``,
  where prefix and suffix are the token embeddings of the template around its run of ``X``
  words ("A photo of a X X X X person.": M = 4). Only the identity tokens ``cls_ctx`` train
  (first stage); the text feature is the end-of-text token after ``ln_final``, projected.
  The token embedding table is used once, for the prefix and suffix, and not kept.
* :class:`TextHead`: the text features of every identity, computed once after the first stage
  and fixed (a buffer, saved with the model): the second stage's image-to-text logits are
  the image projection times them (CLIP-ReID's ``image_features @ text_features.t()``).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import nn

from .backbones.clip import ClipSpec, require_open_clip
from .backbones.pretrained import PretrainedWeightsError, fit_problem

#: OpenAI's text context and vocabulary (the tokenizer open_clip ships).
CONTEXT_LENGTH = 77
VOCAB_SIZE = 49408
# Tensor names of the text side of an OpenAI/open_clip CLIP file (top level, no prefix).
TEXT_KEYS = ("token_embedding.", "positional_embedding", "transformer.", "ln_final.", "text_projection")


def text_state(state: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    """The text encoder's tensors of a whole CLIP state dict (OpenAI's top-level names)."""
    return {k: v.float() for k, v in state.items() if k.startswith(TEXT_KEYS)}


def prompt_slots(template: str) -> tuple:
    """``(tokens [77], first, end)``: the tokenized template and the span of its run of X words
    (the learned tokens); one line naming MODEL.CLIPREID.PROMPT when there is none or several."""
    open_clip = require_open_clip()
    key = f"MODEL.CLIPREID.PROMPT {template!r}"
    ids = open_clip.tokenize([template])[0]
    x_id = int(open_clip.tokenize(["X"])[0][1])
    eot = int(ids.argmax())  # the end-of-text token has the largest id
    if eot == CONTEXT_LENGTH - 1 and len(open_clip.tokenizer.SimpleTokenizer().encode(template)) > CONTEXT_LENGTH - 2:
        raise ValueError(f"{key} is longer than CLIP's {CONTEXT_LENGTH - 2} tokens: shorten it.")
    slots = (ids == x_id).nonzero().flatten().tolist()
    if not slots:
        raise ValueError(f"{key} has no X word for the learned tokens: write it as e.g. 'A photo of a X X X X person.'.")
    if slots != list(range(slots[0], slots[-1] + 1)):
        raise ValueError(f"{key} has X words in more than one place: the learned tokens are one run of X words.")
    return ids, slots[0], slots[-1] + 1


class PromptedText(nn.Module):
    """``module(labels [B])`` -> text features ``[B, output_dim]`` of those identities' prompts.

    Args:
        spec: the CLIP model (its text width, heads, layers and joint-space width).
        template: MODEL.CLIPREID.PROMPT.
        num_classes: identities (one row of ``cls_ctx`` each).
        state: the text tensors of a CLIP file (:func:`text_state`); None leaves the encoder
            at open_clip's initialisation (tests, or a checkpoint loaded afterwards).
        source: the file's name, for messages.
    """

    def __init__(self, spec: ClipSpec, template: str, num_classes: int,
                 state: Optional[Dict[str, torch.Tensor]] = None, source: str = "") -> None:
        super().__init__()
        require_open_clip()
        from open_clip.model import QuickGELU
        from open_clip.transformer import TextTransformer

        text = TextTransformer(context_length=CONTEXT_LENGTH, vocab_size=VOCAB_SIZE, width=spec.text_width,
                               heads=spec.text_heads, layers=spec.text_layers, output_dim=spec.output_dim,
                               act_layer=QuickGELU)
        if state is not None:
            problem = fit_problem(state, text.state_dict())
            if problem:
                raise PretrainedWeightsError(
                    f"The text encoder of {source} does not fit CLIP {spec.openai_name}'s: {problem}. Point "
                    f"MODEL.BACKBONE.PRETRAINED_PATH to OpenAI's {spec.openai_name} file (the first stage needs its "
                    "text side and token embedding; CLIP-ReID's own files lack the latter).")
            text.load_state_dict(state, strict=True)
        tokens, first, end = prompt_slots(template)
        with torch.no_grad():
            embedded = text.token_embedding(tokens[None]).float()
        self.register_buffer("token_prefix", embedded[:, :first].clone())
        self.register_buffer("token_suffix", embedded[:, end:].clone())
        self.eot = int(tokens.argmax())
        self.transformer, self.ln_final = text.transformer, text.ln_final
        self.positional_embedding, self.text_projection = text.positional_embedding, text.text_projection
        self.register_buffer("attn_mask", text.attn_mask, persistent=False)
        for p in self.parameters():
            p.requires_grad_(False)
        # CLIP-ReID initialises the identity tokens as N(0, 0.02) (its PromptLearner).
        self.cls_ctx = nn.Parameter(torch.randn(num_classes, end - first, spec.text_width) * 0.02)

    def forward(self, labels: torch.Tensor) -> torch.Tensor:
        b = labels.shape[0]
        x = torch.cat([self.token_prefix.expand(b, -1, -1), self.cls_ctx[labels],
                       self.token_suffix.expand(b, -1, -1)], dim=1)
        x = x + self.positional_embedding
        x = self.transformer(x, attn_mask=self.attn_mask)
        return self.ln_final(x[:, self.eot]) @ self.text_projection


class TextHead(nn.Module):
    """The fixed text features of every identity (a buffer, NaN until set) and the image-to-text
    logits ``proj @ features.T``; a head by its name (``text_head``): dropped with ``--drop-head``."""

    def __init__(self, num_classes: int, dim: int) -> None:
        super().__init__()
        self.register_buffer("features", torch.full((num_classes, dim), float("nan")))
        self._checked = False

    def set_features(self, features: torch.Tensor) -> None:
        """Store the first stage's text features ``[num_classes, dim]``."""
        if tuple(features.shape) != tuple(self.features.shape):
            raise ValueError(f"Text features of shape {tuple(features.shape)} do not fit the model's "
                             f"{tuple(self.features.shape)} (identities x projection width).")
        self.features.copy_(features.detach().to(self.features))
        self._checked = False

    def forward(self, proj: torch.Tensor) -> torch.Tensor:
        if not self._checked:  # once per run: a silent constant loss would train nothing
            if not bool(torch.isfinite(self.features).all()):
                raise RuntimeError("MODEL.CLIPREID.PROMPT_LEARNING: the identities' text features are not set; "
                                   "tools/train.py runs the first stage (prompt learning) before training this "
                                   "model: train with it, or set MODEL.CLIPREID.PROMPT_LEARNING False.")
            self._checked = True
        return proj @ self.features.to(proj.dtype).t()


__all__ = ["CONTEXT_LENGTH", "PromptedText", "TextHead", "VOCAB_SIZE", "prompt_slots", "text_state"]
