"""Train and test transforms on uint8 images.

Input: an ``H x W x 3`` uint8 RGB numpy array (as ``read_image`` returns) or a uint8
``[3, H, W]`` tensor. Output: a uint8 ``[3, H, W]`` tensor; normalisation happens inside the
model. Every random draw uses torch's RNG (``torch.rand``/``torch.randint``), so DataLoader
worker seeding (from the loader's ``generator``) or ``torch.manual_seed`` makes it repeatable.

Train: resize to INPUT.SIZE_TRAIN -> horizontal flip (FLIP_PROB) -> zero-pad by PADDING and
random crop back -> colour jitter (INPUT.CJ, optional) -> random erasing (INPUT.REA).
Random erasing draws the rectangle as Zhong et al.'s reference code does (area uniform in
AREA, aspect ratio uniform in ``[MIN_RATIO, 1/MIN_RATIO]``) and fills it with the pixel mean
MODEL.PIXEL_MEAN rounded to uint8 (INPUT.REA.FILL "mean", the default and what BoT and
fast-reid use; zero after the model's normalisation) or with uniform random uint8 noise per
pixel ("random", the paper's RE-R variant).
Test: resize to INPUT.SIZE_TEST only. Both resize with INPUT.INTERPOLATION.
"""
from __future__ import annotations

from typing import Callable, List, Sequence, Union

import cv2
import numpy as np
import torch
import torchvision.transforms.functional as TF
from torchvision.transforms import Compose  # applies transforms in order

Image = Union[np.ndarray, torch.Tensor]


def to_chw_tensor(img: Image) -> torch.Tensor:
    """uint8 HWC numpy array -> uint8 CHW tensor (tensors pass through)."""
    if isinstance(img, torch.Tensor):
        return img
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise ValueError(f"expected an H x W x 3 uint8 image, got shape {img.shape} dtype {img.dtype}")
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1)))


#: ``INPUT.INTERPOLATION`` values: OpenCV's bilinear (area when shrinking more than 2x), or
#: Pillow's bilinear filter, which is what torchreid (torchvision's Resize on PIL images) uses.
INTERPOLATIONS = ("cv2", "pil_bilinear")


def _pil_bilinear(img: np.ndarray, h: int, w: int) -> np.ndarray:
    # Pillow comes with torchvision. Its bilinear filter widens its support when shrinking
    # (antialiasing), unlike OpenCV's INTER_LINEAR, so the two give different pixels.
    from PIL import Image as PILImage

    bilinear = getattr(PILImage, "Resampling", PILImage).BILINEAR
    return np.asarray(PILImage.fromarray(img).resize((w, h), bilinear))


class Resize:
    """Resize to ``(height, width)``; `interpolation` is one of ``INTERPOLATIONS``.

    "cv2": bilinear, and area averaging when shrinking by more than 2x. "pil_bilinear":
    Pillow's bilinear filter on the uint8 image, pixel for pixel what torchreid's
    ``FeatureExtractor`` and test loader feed their models.
    """

    def __init__(self, size: Sequence[int], interpolation: str = "cv2") -> None:
        self.size = (int(size[0]), int(size[1]))
        if interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"INPUT.INTERPOLATION must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}.")
        self.interpolation = interpolation

    def __call__(self, img: Image) -> torch.Tensor:
        h, w = self.size
        if isinstance(img, torch.Tensor):
            if tuple(img.shape[-2:]) == self.size:
                return img
            img = np.ascontiguousarray(img.permute(1, 2, 0).numpy())
        if img.shape[:2] != self.size:
            if self.interpolation == "pil_bilinear":
                return to_chw_tensor(_pil_bilinear(img, h, w))
            # INTER_AREA avoids aliasing when a large crop is shrunk by more than 2x.
            shrink = img.shape[0] > 2 * h or img.shape[1] > 2 * w
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LINEAR)
        return to_chw_tensor(img)


class RandomHorizontalFlip:
    """Mirror the image with probability `p` (returns a new tensor; the input is not modified)."""

    def __init__(self, p: float = 0.5) -> None:
        self.p = p

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if self.p > 0 and torch.rand(1).item() < self.p:
            return img.flip(-1)
        return img


class PadRandomCrop:
    """Zero-pad by `padding` pixels on each side, then crop a random window of the original size.

    Implemented as a shifted copy into a zero canvas, which is what pad + crop amounts to.
    """

    def __init__(self, padding: int) -> None:
        self.padding = int(padding)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        p = self.padding
        if p <= 0:
            return img
        _, h, w = img.shape
        dy, dx = (torch.randint(0, 2 * p + 1, (2,)) - p).tolist()
        out = torch.zeros_like(img)
        # Source window [y0:y1, x0:x1] lands at [y0-dy : y1-dy, x0-dx : x1-dx].
        y0, y1 = max(0, dy), min(h, h + dy)
        x0, x1 = max(0, dx), min(w, w + dx)
        if y1 > y0 and x1 > x0:
            out[:, y0 - dy : y1 - dy, x0 - dx : x1 - dx] = img[:, y0:y1, x0:x1]
        return out


class ColorJitter:
    """With probability `prob`, jitter brightness, contrast, saturation and hue (fixed order).

    Each factor is drawn uniformly from ``[1 - x, 1 + x]`` (hue: ``[-hue, hue]``) with torch's RNG.
    """

    def __init__(self, prob: float, brightness: float, contrast: float, saturation: float, hue: float) -> None:
        self.prob = prob
        self.brightness, self.contrast, self.saturation, self.hue = brightness, contrast, saturation, hue

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if torch.rand(1).item() >= self.prob:
            return img
        u = (torch.rand(4) * 2 - 1).tolist()
        if self.brightness > 0:
            img = TF.adjust_brightness(img, 1 + u[0] * self.brightness)
        if self.contrast > 0:
            img = TF.adjust_contrast(img, 1 + u[1] * self.contrast)
        if self.saturation > 0:
            img = TF.adjust_saturation(img, 1 + u[2] * self.saturation)
        if self.hue > 0:
            img = TF.adjust_hue(img, u[3] * min(self.hue, 0.5))
        return img


class RandomErasing:
    """Random erasing (Zhong et al., AAAI 2020) on a uint8 CHW tensor.

    With probability `prob`, up to 10 attempts draw an area fraction uniform in `area` and an
    aspect ratio (height / width) uniform in ``[min_ratio, 1/min_ratio]``, as the paper's
    reference code does (so about 77% of the rectangles are tall for ``min_ratio`` 0.3); the
    first rectangle that fits is filled with `mean` (`fill` = "mean") or with uniform random
    uint8 noise (`fill` = "random", the paper's RE-R).
    """

    def __init__(
        self,
        prob: float = 0.5,
        area: Sequence[float] = (0.02, 0.4),
        min_ratio: float = 0.3,
        fill: str = "mean",
        mean: Sequence[float] = (123.675, 116.28, 103.53),
    ) -> None:
        if fill not in ("random", "mean"):
            raise ValueError(f"INPUT.REA.FILL must be 'random' or 'mean', got {fill!r}")
        if not 0 < min_ratio <= 1:
            raise ValueError(f"INPUT.REA.MIN_RATIO must be in (0, 1] (the maximum is its inverse), got {min_ratio!r}")
        self.prob, self.area, self.fill = prob, (float(area[0]), float(area[1])), fill
        self.ratio = (float(min_ratio), 1.0 / float(min_ratio))
        self.mean = torch.tensor([round(float(m)) for m in mean], dtype=torch.uint8).view(3, 1, 1)

    def __call__(self, img: torch.Tensor) -> torch.Tensor:
        if torch.rand(1).item() >= self.prob:
            return img
        c, h, w = img.shape
        # Draw all attempts at once; keep the first that fits.
        r = torch.rand(10, 4, dtype=torch.float64)
        target = (self.area[0] + r[:, 0] * (self.area[1] - self.area[0])) * h * w
        ratio = self.ratio[0] + r[:, 1] * (self.ratio[1] - self.ratio[0])
        eh = torch.sqrt(target * ratio).round().long()
        ew = torch.sqrt(target / ratio).round().long()
        ok = ((eh < h) & (ew < w) & (eh > 0) & (ew > 0)).nonzero()
        if len(ok) == 0:
            return img
        i = int(ok[0])
        eh_i, ew_i = int(eh[i]), int(ew[i])
        y = int(r[i, 2] * (h - eh_i + 1))
        x = int(r[i, 3] * (w - ew_i + 1))
        out = img.clone()
        if self.fill == "random":
            out[:, y : y + eh_i, x : x + ew_i] = torch.randint(0, 256, (c, eh_i, ew_i), dtype=torch.uint8)
        else:
            out[:, y : y + eh_i, x : x + ew_i] = self.mean
        return out


def build_transforms(cfg, is_train: bool = True) -> Compose:
    """Train or test transform from ``cfg.INPUT`` (see the module docstring)."""
    interpolation = str(cfg.INPUT.INTERPOLATION)
    if not is_train:
        return Compose([Resize(cfg.INPUT.SIZE_TEST, interpolation)])
    ops: List[Callable] = [Resize(cfg.INPUT.SIZE_TRAIN, interpolation)]
    if cfg.INPUT.FLIP_PROB > 0:
        ops.append(RandomHorizontalFlip(cfg.INPUT.FLIP_PROB))
    if cfg.INPUT.PADDING > 0:
        ops.append(PadRandomCrop(cfg.INPUT.PADDING))
    cj = cfg.INPUT.CJ
    if cj.ENABLED:
        ops.append(ColorJitter(cj.PROB, cj.BRIGHTNESS, cj.CONTRAST, cj.SATURATION, cj.HUE))
    rea = cfg.INPUT.REA
    if rea.ENABLED and rea.PROB > 0:
        ops.append(RandomErasing(rea.PROB, rea.AREA, rea.MIN_RATIO, rea.FILL, cfg.MODEL.PIXEL_MEAN))
    return Compose(ops)
