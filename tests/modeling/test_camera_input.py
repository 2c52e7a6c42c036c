"""Whether a model takes camera ids, and how many: reid.modeling's one answer, through wrappers too."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from reid.modeling import camera_count, takes_camera_ids, unwrap_model
from reid.modeling.backbones import ReIDViT


class _Sie(nn.Module):
    uses_camids = True
    num_cameras = 6

    def forward(self, x: torch.Tensor, camids: torch.Tensor) -> torch.Tensor:
        return x


def test_the_camera_count_is_the_sie_count_or_zero():
    assert takes_camera_ids(_Sie()) and camera_count(_Sie()) == 6
    assert not takes_camera_ids(nn.Identity()) and camera_count(nn.Identity()) == 0  # no uses_camids: images only

    class Vague(nn.Module):
        uses_camids = True

    assert takes_camera_ids(Vague())
    with pytest.raises(ValueError, match="Vague uses camera ids but does not say how many"):
        camera_count(Vague())


def test_a_vit_with_sie_answers_and_one_without_does_not():
    with_sie = ReIDViT("vit_small_transreid", img_size=(32, 16), num_cameras=3)
    assert takes_camera_ids(with_sie) and camera_count(with_sie) == 3
    plain = ReIDViT("vit_small_transreid", img_size=(32, 16), num_cameras=1)  # one camera: no SIE
    assert not takes_camera_ids(plain) and camera_count(plain) == 0


def test_wrappers_answer_as_the_model_inside():
    model = _Sie()
    # DataParallel (DistributedDataParallel is the same kind of wrapper) hides the model's attributes.
    parallel = nn.DataParallel(model)
    assert not hasattr(parallel, "uses_camids")
    assert unwrap_model(parallel) is model and takes_camera_ids(parallel) and camera_count(parallel) == 6
    compiled = torch.compile(model)  # not run: only the wrapper is asked
    assert unwrap_model(compiled) is model and camera_count(compiled) == 6
    assert unwrap_model(nn.DataParallel(compiled)) is model
    plain = nn.Linear(2, 2)
    assert unwrap_model(plain) is plain and not takes_camera_ids(nn.DataParallel(plain))
