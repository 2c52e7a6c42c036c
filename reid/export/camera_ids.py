"""Camera ids as a second model input: models with SIE (a learned camera embedding, TransReID's
Side Information Embedding) compute each image's feature from the image and its camera id.

Such a model says so with ``uses_camids`` and ``num_cameras`` (ids ``0..num_cameras-1``), read
through :func:`reid.modeling.takes_camera_ids` and :func:`reid.modeling.camera_count`; its
exports take ``camids`` (int64 ``[batch]``) beside ``images``, and every runtime checks the ids
here before they reach the graph: an exported graph cannot check values, and ONNX's Gather reads
a negative id as one counted from the end, i.e. another camera's embedding.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import numpy as np
import torch

CAMIDS_NAME = "camids"  # the exported models' second input
CamIds = Union[torch.Tensor, np.ndarray, Sequence[int]]

#: Where images without camera ids meet a model that needs them (a folder, an image file, arrays).
NO_CAMIDS = ("This model uses camera ids (SIE: SIE_CAMERA True in MODEL.TRANSREID or MODEL.CLIP): each feature needs its image's "
             "camera id, and these images have none (folders and image files have no camera ids). Give "
             "tools/extract.py a list file of 'path pid camid' lines, or pass camids=... in Python.")


def _as_id_array(camids: CamIds, what: str) -> np.ndarray:
    """`camids` as a numpy array of their own values (unsigned, object and bool kept as they are:
    an int64 cast first would turn an id past int64 into a negative one)."""
    if isinstance(camids, torch.Tensor):
        ids = camids.detach().cpu()
        return ids.float().numpy() if ids.dtype in (torch.bfloat16, torch.float16) else ids.numpy()
    if not isinstance(camids, (np.ndarray, Sequence)):  # a generator, a set, a single int
        raise TypeError(f"Camera ids for {what} must be a sequence with one integer per image (a list, numpy array or "
                        f"tensor), got {type(camids).__name__}.")
    return np.asarray(camids) if len(camids) else np.zeros(0, dtype=np.int64)


def _is_integer(arr: np.ndarray) -> bool:
    if arr.dtype.kind in "iu":
        return True
    # Python ints past int64 make an object array; they are integers (and out of range).
    return arr.dtype.kind == "O" and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in arr.flat)


def _kind(arr: np.ndarray) -> str:
    """What non-integer ids are, for the error: their dtype, or the Python types among them."""
    if arr.dtype.kind != "O":
        return str(arr.dtype) if arr.dtype.kind != "U" else "str"
    return ", ".join(sorted({type(v).__name__ for v in arr.flat if not isinstance(v, (int, np.integer))}))


def _where(bad: np.ndarray, names: Optional[Sequence[str]]) -> str:
    """Which images the bad ids belong to: the first one's name (or index), and how many more."""
    first = int(bad[0])
    more = len(bad) - 1
    label = names[first] if names is not None else f"image {first}"
    return f" (at {label}" + (f", and {more} more image{'s' if more > 1 else ''})" if more else ")")


def check_camids(camids: Optional[CamIds], batch: int, num_cameras: Optional[int], what: str,
                 names: Optional[Sequence[str]] = None) -> torch.Tensor:
    """`camids` as an int64 CPU tensor ``[batch]``; a one-line error naming `what` otherwise.

    Ids must be integers in ``0..num_cameras-1`` (only ``>= 0`` when `num_cameras` is None: a file
    that does not record its camera count). An id out of range is reported with its value and the
    image it belongs to (`names`: the images' paths, else its position in the batch).
    """
    known = f"0..{num_cameras - 1}" if num_cameras else "0 or more"
    if camids is None:
        count = f", {num_cameras} cameras" if num_cameras else ""
        raise ValueError(f"{what} uses camera ids (SIE{count}): pass each image's camera id with the images "
                         f"(camids: integers {known}, one per image).")
    arr = _as_id_array(camids, what)
    if not (_is_integer(arr) or arr.size == 0):
        raise TypeError(f"Camera ids for {what} must be integers (int64), got {_kind(arr)}.")
    if arr.ndim == 1 and arr.shape[0] != int(batch):
        raise ValueError(f"{batch} images but {arr.shape[0]} camera ids for {what}: pass one camera id per image.")
    if tuple(arr.shape) != (int(batch),):
        raise ValueError(f"{what} needs one camera id per image: camids of shape [{batch}], got {list(arr.shape)}.")
    outside = (arr < 0) | (arr >= num_cameras) if num_cameras else (arr < 0)
    if arr.size and outside.any():
        bad = np.flatnonzero(outside)
        values = list(dict.fromkeys(int(v) for v in arr[bad]))  # distinct, in order of the images
        shown = ", ".join(str(v) for v in values[:5]) + (", ..." if len(values) > 5 else "")
        ids = "id" if len(values) == 1 else "ids"
        verb = "is" if len(values) == 1 else "are"
        raise ValueError(f"Camera {ids} {shown}{_where(bad, names)} {verb} outside the cameras {what} knows "
                         f"({known}); use the ids of the training data's cameras.")
    return torch.from_numpy(arr.astype(np.int64)).contiguous()


__all__ = ["CAMIDS_NAME", "CamIds", "NO_CAMIDS", "check_camids"]
