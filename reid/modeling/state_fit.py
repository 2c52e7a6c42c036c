"""Whether one tensor of a weights file fits the model: the per-key check every loader shares.

Foreign checkpoints (``reid.modeling.formats``: a file's key renamed onto ours) and pretrained
backbone files (``reid.modeling.backbones``: the same names) ask :func:`misfit` for each tensor,
so a file that does not fit is refused with the same sentence wherever it is loaded: the key,
what it has no counterpart in, or both shapes.
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple

import torch


def part_of(target: str, wanted: torch.Tensor, part: Tuple[int, int]) -> Tuple[str, Tuple[int, ...]]:
    """The name and shape of piece ``i`` of ``n`` (`part`) of our tensor `wanted` (key `target`) when
    it is the concatenation of ``n`` equal pieces along dim 0: ``("neck.weight[256:512]", (256,))``.

    A 0-d tensor (a BatchNorm's step counter) is every piece whole: ``(target, ())``.
    """
    if wanted.dim() == 0:
        return target, ()
    index, count = part
    size = wanted.shape[0] // count
    return f"{target}[{index * size}:{(index + 1) * size}]", (size,) + tuple(wanted.shape[1:])


def misfit(key: str, value: torch.Tensor, target: Optional[str], own: Mapping[str, torch.Tensor], *,
           part: Optional[Tuple[int, int]] = None, file: str = "the checkpoint", model: str = "this model") -> str:
    """Why the file's tensor `key` cannot become the model's tensor `target` ("" when it can).

    Args:
        key: the tensor's name in the file.
        value: the tensor.
        target: our name for it (the same as `key` for files under our names); None when the file's
            naming has no counterpart for `key` at all.
        own: the model's state dict.
        part: ``(i, n)`` when `value` is piece ``i`` of ``n`` equal pieces (dim 0) of `target`
            (:func:`part_of`), e.g. one of q, k, v of a fused qkv projection.
        file, model: how the sentence names the two sides ("the checkpoint" and "this model";
            pretrained files: "the file" and "the model").

    Returns:
        One clause naming `key`: ``"<key> has no counterpart in <model> (no <target>)"`` or
        ``"<key> has shape (a, b) in <file> but <target> has (c, d) in <model>"``; our name is left
        out where it is `key`. The caller adds which file and what to do.
    """
    if target is None or target not in own:
        ours = "" if target is None or target == key else f" (no {target})"
        return f"{key} has no counterpart in {model}{ours}"
    wanted = own[target]
    shown, expected = (target, tuple(wanted.shape)) if part is None else part_of(target, wanted, part)
    divides = part is None or wanted.dim() == 0 or wanted.shape[0] % part[1] == 0
    if tuple(value.shape) == expected and divides:
        return ""
    named = "" if shown == key else f"{shown} has "
    return f"{key} has shape {tuple(value.shape)} in {file} but {named}{expected} in {model}"


__all__ = ["misfit", "part_of"]
