"""Side Information Embedding (SIE; TransReID, He et al., ICCV 2021, Eq. 5): a learned vector per
camera, scaled by lambda, added to a ViT's tokens. TransReID adds it to every token, CLIP-ReID to
the class token alone; both look the camera's row up here, with the same checks."""
from __future__ import annotations

from typing import Optional

import torch

NO_CAMIDS = ("This model uses camera ids (SIE: SIE_CAMERA of MODEL.TRANSREID or MODEL.CLIP): call model(images, camids=...), "
             "or give tools/extract.py a list file of 'path pid camid' lines.")


def camera_offsets(table: torch.Tensor, camids: Optional[torch.Tensor], coef: float, training: bool,
                   device: torch.device) -> torch.Tensor:
    """``coef * table[camids]``: each image's camera vector. One-line ValueErrors for missing ids
    and, in eval mode, for ids outside the table (a traced graph cannot read values: the runtimes
    of exported models check them, reid.export.camera_ids)."""
    if camids is None:
        raise ValueError(NO_CAMIDS)
    camids = camids.to(device=device, dtype=torch.long)
    if not training and not torch.compiler.is_compiling() and camids.numel() \
            and not 0 <= int(camids.min()) <= int(camids.max()) < table.shape[0]:
        raise ValueError(f"Camera ids {int(camids.min())}..{int(camids.max())} are outside the "
                         f"{table.shape[0]} cameras this model's SIE embedding was trained with.")
    return coef * table[camids]


__all__ = ["NO_CAMIDS", "camera_offsets"]
