"""Train/test transforms on uint8 images."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reid.config import get_cfg
from reid.data.transforms import (
    ColorJitter,
    PadRandomCrop,
    RandomErasing,
    RandomHorizontalFlip,
    Resize,
    build_transforms,
    to_chw_tensor,
)


def image(h=40, w=20, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def cfg_with(**input_overrides):
    cfg = get_cfg()
    cfg.INPUT.SIZE_TRAIN = [32, 16]
    cfg.INPUT.SIZE_TEST = [32, 16]
    for k, v in input_overrides.items():
        node, key = (cfg.INPUT, k) if "." not in k else (getattr(cfg.INPUT, k.split(".")[0]), k.split(".")[1])
        setattr(node, key, v)
    return cfg


def test_test_transform_is_resize_only():
    t = build_transforms(cfg_with(), is_train=False)
    img = image()
    out = t(img)
    assert out.dtype == torch.uint8 and out.shape == (3, 32, 16)
    assert torch.equal(out, t(img))  # no randomness
    same = to_chw_tensor(image(32, 16))
    assert torch.equal(Resize((32, 16))(same), same)  # already the right size: untouched


@pytest.mark.parametrize("shape", [(300, 110), (128, 64), (60, 30)])
def test_pil_bilinear_gives_pillows_pixels_as_torchreid_resizes(shape):
    from PIL import Image

    img = image(*shape, seed=3)
    theirs = np.asarray(Image.fromarray(img).resize((128, 256), Image.BILINEAR))  # torchvision's Resize on PIL
    for is_train in (False, True):
        cfg = cfg_with(INTERPOLATION="pil_bilinear", FLIP_PROB=0.0, PADDING=0, **{"REA.ENABLED": False})
        cfg.INPUT.SIZE_TEST = cfg.INPUT.SIZE_TRAIN = [256, 128]
        out = build_transforms(cfg, is_train=is_train)(img)
        assert torch.equal(out, to_chw_tensor(theirs))
    # OpenCV's filter gives other pixels (so the choice matters for torchreid's features).
    assert not torch.equal(Resize((256, 128))(img), to_chw_tensor(theirs))


def test_unknown_interpolation_lists_the_valid_ones():
    with pytest.raises(ValueError, match="INPUT.INTERPOLATION must be one of cv2, pil_bilinear, got 'bicubic'"):
        build_transforms(cfg_with(INTERPOLATION="bicubic"), is_train=False)


def test_train_transform_shape_and_repeatability():
    t = build_transforms(cfg_with(**{"CJ.ENABLED": True}), is_train=True)
    names = [type(x).__name__ for x in t.transforms]
    assert names == ["Resize", "RandomHorizontalFlip", "PadRandomCrop", "ColorJitter", "RandomErasing"]
    img = image()
    torch.manual_seed(5)
    a = [t(img) for _ in range(6)]
    torch.manual_seed(5)
    b = [t(img) for _ in range(6)]
    assert all(x.dtype == torch.uint8 and x.shape == (3, 32, 16) for x in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert any(not torch.equal(a[0], x) for x in a[1:])  # it is random


def test_disabled_ops_are_left_out():
    t = build_transforms(cfg_with(FLIP_PROB=0.0, PADDING=0, **{"REA.ENABLED": False}), is_train=True)
    assert [type(x).__name__ for x in t.transforms] == ["Resize"]


def test_flip_mirrors_and_does_not_mutate():
    x = to_chw_tensor(image())
    before = x.clone()
    out = RandomHorizontalFlip(1.0)(x)
    assert torch.equal(out, before.flip(-1)) and torch.equal(x, before)
    assert RandomHorizontalFlip(0.0)(x) is x


def test_pad_random_crop_is_a_shift_with_zero_border():
    x = to_chw_tensor(image(16, 8)) | 1  # no zero pixels in the input
    torch.manual_seed(0)
    seen = set()
    for _ in range(30):
        out = PadRandomCrop(3)(x)
        assert out.shape == x.shape
        zeros = (out == 0).all(0)
        # Every non-zero pixel equals the input shifted by some (sy, sx) within +-3.
        found = False
        for sy in range(-3, 4):
            for sx in range(-3, 4):
                shifted = torch.zeros_like(x)
                ys0, ys1, xs0, xs1 = max(0, sy), min(16, 16 + sy), max(0, sx), min(8, 8 + sx)
                shifted[:, ys0 - sy: ys1 - sy, xs0 - sx: xs1 - sx] = x[:, ys0:ys1, xs0:xs1]
                if torch.equal(shifted, out):
                    found, shift = True, (sy, sx)
        assert found and zeros.sum() == 16 * 8 - (16 - abs(shift[0])) * (8 - abs(shift[1]))
        seen.add(shift)
    assert len(seen) > 5


def test_random_erasing_rectangle_random_and_mean():
    x = torch.full((3, 64, 32), 7, dtype=torch.uint8)
    torch.manual_seed(1)
    out = RandomErasing(1.0, (0.1, 0.2), 0.3, "random")(x)
    changed = (out != x).any(0)
    ys, xs = torch.nonzero(changed).T
    box = changed[ys.min(): ys.max() + 1, xs.min(): xs.max() + 1]
    area = box.numel() / (64 * 32)
    assert box.float().mean() > 0.9 and 0.08 <= area <= 0.22  # one rectangle of the requested size
    assert torch.equal(x, torch.full((3, 64, 32), 7, dtype=torch.uint8))  # input untouched
    out = RandomErasing(1.0, (0.1, 0.2), 0.3, "mean", (123.675, 116.28, 103.53))(x)
    vals = {tuple(v.tolist()) for v in out.reshape(3, -1).T}
    assert vals == {(7, 7, 7), (124, 116, 104)}
    assert torch.equal(RandomErasing(0.0)(x), x)
    with pytest.raises(ValueError, match="FILL"):
        RandomErasing(fill="zeros")


def test_color_jitter_keeps_uint8():
    x = to_chw_tensor(image())
    torch.manual_seed(0)
    out = ColorJitter(1.0, 0.3, 0.3, 0.3, 0.1)(x)
    assert out.dtype == torch.uint8 and out.shape == x.shape and not torch.equal(out, x)


def test_rejects_non_rgb_arrays():
    with pytest.raises(ValueError, match="uint8"):
        to_chw_tensor(np.zeros((4, 4, 3), np.float32))


def erased_boxes(erase, n, size=(100, 100)):
    """(height, width) of the rectangle `erase` draws on `n` constant images."""
    x = torch.full((3, *size), 7, dtype=torch.uint8)
    out = []
    for _ in range(n):
        changed = (erase(x) != x).any(0)
        out.append((int(changed.any(1).sum()), int(changed.any(0).sum())))
    return np.array(out)


@pytest.mark.slow
def test_random_erasing_aspect_ratio_is_uniform_as_in_the_paper():
    # A small area on a square image: every first attempt fits, so the boxes show the raw law.
    torch.manual_seed(0)
    hw = erased_boxes(RandomErasing(1.0, (0.05, 0.05), 0.3, "mean"), 2000)
    ratio = hw[:, 0] / hw[:, 1]
    assert ratio.min() > 0.25 and ratio.max() < 1 / 0.25
    # Uniform in [0.3, 1/0.3]: P(tall) = (1/0.3 - 1) / (1/0.3 - 0.3) = 0.769; log-uniform: 0.5.
    assert abs((ratio > 1).mean() - 0.769) < 0.04
    assert abs(np.median(ratio) - (0.3 + 1 / 0.3) / 2) < 0.15  # log-uniform median: 1.0


def test_random_erasing_defaults_fill_with_the_mean():
    cfg = get_cfg()
    assert cfg.INPUT.REA.FILL == "mean"
    cfg.INPUT.REA.PROB = 1.0
    rea = build_transforms(cfg, is_train=True).transforms[-1]
    assert isinstance(rea, RandomErasing) and rea.fill == "mean" and RandomErasing().fill == "mean"
    assert rea.mean.flatten().tolist() == [round(m) for m in cfg.MODEL.PIXEL_MEAN]
    with pytest.raises(ValueError, match="INPUT.REA.MIN_RATIO"):
        RandomErasing(min_ratio=3.0)
