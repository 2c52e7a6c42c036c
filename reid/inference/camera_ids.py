"""Camera ids as a second model input: models with SIE (a learned camera embedding, TransReID's
Side Information Embedding) compute each image's feature from the image and its camera id.

Such a model says so with ``uses_camids`` and ``num_cameras`` (ids ``0..num_cameras-1``); its
exports take ``camids`` (int64 ``[batch]``) beside ``images``, and every runtime checks the ids
here before they reach the graph: an exported graph cannot check values, and ONNX's Gather reads
a negative id as one counted from the end, i.e. another camera's embedding.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

CAMIDS_NAME = "camids"  # the exported models' second input
CamIds = Union[torch.Tensor, np.ndarray, Sequence[int]]

#: Where images without camera ids meet a model that needs them (a folder, an image file, arrays).
NO_CAMIDS = ("This model uses camera ids (SIE, MODEL.TRANSREID.SIE_CAMERA True): each feature needs its image's "
             "camera id, and these images have none (folders and image files have no camera ids). Give "
             "tools/extract.py a list file of 'path pid camid' lines, or pass camids=... in Python.")


def model_cameras(model: nn.Module) -> int:
    """How many camera ids `model` takes (SIE), or 0 when its features come from the images alone."""
    if not getattr(model, "uses_camids", False):
        return 0
    cameras = int(getattr(model, "num_cameras", 0))
    if cameras < 1:
        raise ValueError(f"{type(model).__name__} uses camera ids but does not say how many (num_cameras); "
                         "it cannot be exported or checked.")
    return cameras


def check_camids(camids: Optional[CamIds], batch: int, num_cameras: Optional[int], what: str) -> torch.Tensor:
    """`camids` as an int64 CPU tensor ``[batch]``; a one-line error naming `what` otherwise.

    Ids must be integers in ``0..num_cameras-1`` (only ``>= 0`` when `num_cameras` is None: a file
    that does not record its camera count).
    """
    known = f"0..{num_cameras - 1}" if num_cameras else "0 or more"
    if camids is None:
        count = f", {num_cameras} cameras" if num_cameras else ""
        raise ValueError(f"{what} uses camera ids (SIE{count}): pass each image's camera id with the images "
                         f"(camids: integers {known}, one per image).")
    if isinstance(camids, torch.Tensor):
        ids = camids.detach().cpu()
        integer = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
    else:
        arr = np.asarray(camids)
        integer = arr.dtype.kind in "iu" or arr.size == 0
        ids = torch.from_numpy(arr.astype(np.int64)) if integer else None
    if not integer:
        dtype = camids.dtype if hasattr(camids, "dtype") else type(camids).__name__
        raise TypeError(f"Camera ids for {what} must be integers (int64), got {dtype}.")
    if tuple(ids.shape) != (int(batch),):
        raise ValueError(f"{what} needs one camera id per image: camids of shape [{batch}], got {list(ids.shape)}.")
    ids = ids.to(torch.int64).contiguous()
    if ids.numel() and (int(ids.min()) < 0 or (num_cameras and int(ids.max()) >= num_cameras)):
        raise ValueError(f"Camera ids {int(ids.min())}..{int(ids.max())} are outside the cameras {what} knows "
                         f"({known}); use the ids of the training data's cameras.")
    return ids


__all__ = ["CAMIDS_NAME", "CamIds", "NO_CAMIDS", "check_camids", "model_cameras"]
