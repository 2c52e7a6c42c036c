"""The one grid rule of the ViT backbones: the patch grid, the pretrained grid, the position resize."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reid.modeling.backbones import PretrainedWeightsError, ReIDViT
from reid.modeling.backbones.pos_embed import (INTERPOLATION, guess_grid, patch_grid, resize_pos_embed,
                                               source_grid)


def test_the_patch_grid_of_overlapping_patches():
    assert patch_grid((256, 128), 16, 12) == (21, 10)  # TransReID's stride 12
    assert patch_grid((256, 128), 16, (16, 16)) == (16, 8)
    assert patch_grid((224, 224), 16, 16) == (14, 14)
    assert patch_grid((384, 128), 16, (12, 16)) == (31, 8)
    assert ReIDViT("vit_small_transreid", img_size=(256, 128), stride=(12, 12)).patch_embed.grid == (21, 10)


def test_a_pretrained_grid_is_square_or_twice_as_tall_or_named():
    assert guess_grid(196) == (14, 14) and guess_grid(128) == (16, 8) and guess_grid(6) is None
    assert source_grid(196, "in1k.pth") == (14, 14)
    assert source_grid(144, "x.pth", [18, 8]) == (18, 8)  # 144 would be guessed 12 x 12
    with pytest.raises(PretrainedWeightsError, match=r"=clip.pt: positional_embedding has 6 patch positions, neither"):
        source_grid(6, "clip.pt", name="positional_embedding")
    with pytest.raises(PretrainedWeightsError, match=r"PRETRAINED_GRID \[6, 2\] has 12"):
        source_grid(16, "x.pth", [6, 2])


def _reference(grid_part: torch.Tensor, source, target) -> torch.Tensor:
    """What vit.py did: the patch rows as a [1, C, rows, cols] image, interpolated, flattened back."""
    image = grid_part.reshape(1, *source, -1).permute(0, 3, 1, 2)
    resized = F.interpolate(image, size=target, mode="bilinear", align_corners=False)
    return resized.permute(0, 2, 3, 1).reshape(target[0] * target[1], -1)


def test_an_imagenet_grid_resized_onto_the_reid_grid_is_bilinear_interpolation_with_the_class_token_kept():
    assert INTERPOLATION == "bilinear"
    torch.manual_seed(0)
    pos = torch.randn(1, 1 + 14 * 14, 8)  # timm / TransReID layout
    out = resize_pos_embed(pos, (21, 10))
    assert out.shape == (1, 1 + 210, 8)
    torch.testing.assert_close(out[0, 0], pos[0, 0])
    torch.testing.assert_close(out[0, 1:], _reference(pos[0, 1:], (14, 14), (21, 10)))
    # OpenAI CLIP's positional_embedding has no batch axis: the same numbers, in its layout.
    flat = resize_pos_embed(pos[0], (21, 10))
    assert flat.shape == (211, 8)
    torch.testing.assert_close(flat, out[0])
    # A grid its length cannot tell (8 x 2 is 16 positions, as 4 x 4): given as the source.
    tall = torch.randn(17, 4)
    torch.testing.assert_close(resize_pos_embed(tall, (5, 2), source=(8, 2))[1:], _reference(tall[1:], (8, 2), (5, 2)))
    with pytest.raises(PretrainedWeightsError, match="6 patch positions, neither a square grid"):
        resize_pos_embed(torch.zeros(7, 4), (5, 2))
