"""Clips in the Baseline (MODEL.VIDEO.TEMPORAL): a tracklet's frames give one feature, their features
before the neck pooled over the frames, then the neck; padded frames never count; images unchanged."""
from __future__ import annotations

import pytest
import torch

from tests.modeling.test_models import H, W, build, images, make_cfg


def _clips(num=3, frames=4, seed=0):
    return images(num * frames, seed=seed).view(num, frames, 3, H, W)


def _frame_features(model, clips):
    """Each frame as an image, its feature before the neck: [B, T, D]."""
    model.neck_feat = "before"
    with torch.no_grad():
        feats = model(clips.flatten(0, 1))
    return feats.view(clips.shape[0], clips.shape[1], -1)


@pytest.mark.parametrize("pooling", ["avg", "max"])
def test_a_clips_feature_is_the_neck_of_its_frames_pooled(pooling):
    model = build(make_cfg(MODEL__VIDEO__TEMPORAL=pooling)).eval()
    clips = _clips()
    frames = _frame_features(model, clips)
    pooled = frames.mean(1) if pooling == "avg" else frames.amax(1)
    with torch.no_grad():
        model.neck_feat = "before"
        torch.testing.assert_close(model(clips), pooled, rtol=1e-5, atol=1e-5)
        model.neck_feat = "after"
        torch.testing.assert_close(model(clips), model.neck(pooled), rtol=1e-5, atol=1e-5)


def test_attention_weighs_frames_by_its_learned_score_and_padding_never_counts():
    model = build(make_cfg(MODEL__VIDEO__TEMPORAL="attention")).eval()
    clips = _clips(num=2, frames=5, seed=1)
    frames = _frame_features(model, clips)
    with torch.no_grad():
        model.temporal.score.weight.normal_(0, 0.05)
        weights = torch.softmax(frames @ model.temporal.score.weight.squeeze(0), dim=1)
        expected = (weights.unsqueeze(-1) * frames).sum(1)
        model.neck_feat = "before"
        torch.testing.assert_close(model(clips), expected, rtol=1e-5, atol=1e-5)
        # the first clip has 3 real frames and 2 of padding (noise): the same as the 3 frames alone
        mask = torch.tensor([[True, True, True, False, False], [True] * 5])
        alone = model(clips[:1, :3])
        torch.testing.assert_close(model(clips, frame_mask=mask)[:1], alone, rtol=1e-5, atol=1e-5)
    assert "temporal.score.weight" in model.state_dict()


def test_training_on_clips_reaches_the_frame_weights_and_images_are_unchanged():
    model = build(make_cfg(MODEL__VIDEO__TEMPORAL="attention")).train()
    losses = model(_clips(num=4, frames=3), torch.tensor([0, 0, 1, 1]))
    sum(losses.values()).backward()
    assert model.temporal.score.weight.grad is not None and model.temporal.score.weight.grad.abs().sum() > 0
    # an image model's parameters and outputs do not change with the new key (avg has no parameters)
    image_model = build(make_cfg()).eval()
    assert not any(k.startswith("temporal") for k in image_model.state_dict())
    with torch.no_grad():
        assert image_model(images()).shape == (4, image_model.feature_dim)


def test_an_unknown_pooling_lists_the_valid_ones():
    with pytest.raises(KeyError, match="attention.*avg.*max"):
        build(make_cfg(MODEL__VIDEO__TEMPORAL="median"))
