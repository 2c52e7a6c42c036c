"""The re-ID Vision Transformer of TransReID (He et al., "TransReID: Transformer-based Object
Re-Identification", ICCV 2021), written from the paper, without timm.

* Overlapping patch embedding (Sec. 3.2, "overlapping patches"): a P x P convolution with
  stride S <= P, so a H x W input gives ``N = floor((H - P) / S + 1) * floor((W - P) / S + 1)``
  patches (256 x 128, P 16: S 16 -> 16 x 8, S 12 -> 21 x 10).
* A learnable class token and position embedding; pretrained position embeddings (ImageNet's square
  grid, or the 2:1 grid of person images pretrained at 256x128) are resized to the re-ID grid by
  2-D bilinear interpolation (Sec. 3.1), the class token's kept. Both rules (the grid, the resize)
  are :mod:`reid.modeling.backbones.pos_embed`'s, shared with the other ViT backbones.
* Side Information Embedding (SIE, Sec. 3.3, Eq. 5): a learnable vector per camera, scaled by
  lambda (``sie_coef``) and added to every token with the position embedding:
  ``Z_0 = [x_cls; F(x_1); ...; F(x_N)] + P + lambda * S(C[r])``.
* Pre-norm transformer blocks (LayerNorm eps 1e-6, multi-head self-attention, GELU MLP,
  stochastic depth), then a final LayerNorm.

Parameter names are the ones TransReID's (and timm's) ViT state dicts use (``cls_token``,
``pos_embed``, ``sie_embed``, ``patch_embed.proj``, ``blocks.<i>.attn.qkv``, ``norm``), so
ImageNet files and TransReID's checkpoints map onto it tensor for tensor.
"""
from __future__ import annotations

import logging
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple
from urllib.error import URLError

import torch
import torch.nn.functional as F
from torch import nn

from .pos_embed import patch_grid, resize_pos_embed, source_grid
from .pretrained import PretrainedWeightsError, load_fitting, read_pretrained, unwrap_state_dict
from .sie import camera_offsets

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ViTSpec:
    """The shape of one ViT family: width, depth, heads, MLP ratio, qkv bias, attention scale."""

    embed_dim: int
    depth: int
    num_heads: int
    mlp_ratio: float = 4.0
    qkv_bias: bool = True
    qk_scale: Optional[float] = None  # None: head_dim ** -0.5
    url: str = ""  # the ImageNet file TransReID starts from


#: ``MODEL.BACKBONE.NAME`` -> shape. ViT-B/16 (also DeiT-B) and ViT-S/16 (DeiT-S: 384 wide, 6 heads).
VIT_SPECS: Dict[str, ViTSpec] = {
    "vit_base_transreid": ViTSpec(768, 12, 12, url="https://github.com/rwightman/pytorch-image-models/releases/"
                                  "download/v0.1-vitjx/jx_vit_base_p16_224-80ecf9dd.pth"),
    "vit_small_transreid": ViTSpec(384, 12, 6, url="https://dl.fbaipublicfiles.com/deit/"
                                   "deit_small_distilled_patch16_224-649709d9.pth"),
}
PATCH_SIZE = 16


class PatchEmbed(nn.Module):
    """Patches of ``patch x patch`` pixels taken every ``stride`` pixels, projected to the width."""

    def __init__(self, img_size: Sequence[int], patch: int, stride: Sequence[int], dim: int) -> None:
        super().__init__()
        sy, sx = int(stride[0]), int(stride[1])
        if not (0 < sy <= patch and 0 < sx <= patch):
            raise ValueError(f"MODEL.TRANSREID.STRIDE_SIZE must be between 1 and the patch size {patch}, "
                             f"got {list(stride)}.")
        h, w = int(img_size[0]), int(img_size[1])
        if h < patch or w < patch:
            raise ValueError(f"INPUT.SIZE_TRAIN {[h, w]} is smaller than one {patch} x {patch} patch.")
        self.grid = patch_grid((h, w), patch, (sy, sx))
        self.img_size = (h, w)
        self.proj = nn.Conv2d(3, dim, kernel_size=patch, stride=(sy, sx))
        nn.init.normal_(self.proj.weight, std=math.sqrt(2.0 / (patch * patch * dim)))
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if tuple(x.shape[2:]) != self.img_size:
            raise ValueError(f"The ViT was built for {self.img_size[0]}x{self.img_size[1]} inputs (INPUT.SIZE_TRAIN), "
                             f"got {x.shape[2]}x{x.shape[3]}: set INPUT.SIZE_TEST to the same size.")
        return self.proj(x).flatten(2).transpose(1, 2)


class Attention(nn.Module):
    """Multi-head self-attention with one fused qkv projection."""

    def __init__(self, dim: int, num_heads: int, qkv_bias: bool, qk_scale: Optional[float]) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.scale = float(qk_scale) if qk_scale else (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def mlp(dim: int, hidden: int) -> nn.Sequential:
    """Linear -> GELU -> Linear (``fc1``, ``act``, ``fc2``)."""
    return nn.Sequential(OrderedDict(fc1=nn.Linear(dim, hidden), act=nn.GELU(), fc2=nn.Linear(hidden, dim)))


def drop_path(x: torch.Tensor, rate: float, training: bool) -> torch.Tensor:
    """Stochastic depth: drop the residual branch of whole samples with probability `rate`."""
    if rate <= 0 or not training:
        return x
    keep = 1.0 - rate
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    return x * mask / keep


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, spec: ViTSpec, drop_path_rate: float = 0.0) -> None:
        super().__init__()
        dim = spec.embed_dim
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, spec.num_heads, spec.qkv_bias, spec.qk_scale)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = mlp(dim, int(dim * spec.mlp_ratio))
        self.drop_path = float(drop_path_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + drop_path(self.attn(self.norm1(x)), self.drop_path, self.training)
        return x + drop_path(self.mlp(self.norm2(x)), self.drop_path, self.training)


def pretrained_grid(pos_embed: torch.Tensor, source: str, grid: Sequence[int] = ()) -> Tuple[int, int]:
    """The position grid (rows, cols) of a pretrained ``pos_embed`` ``[1, 1 + rows*cols, D]``: `grid`
    (MODEL.BACKBONE.PRETRAINED_GRID) when given, else square or 2:1 from its length
    (:func:`~reid.modeling.backbones.pos_embed.source_grid`); one error line naming `source` when
    the shape is not that of a position embedding or the grid does not fit."""
    if pos_embed.dim() != 3 or pos_embed.shape[0] != 1 or pos_embed.shape[1] < 2:
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={source}: pos_embed has shape {tuple(pos_embed.shape)}, not [1, 1 + "
            "positions, width] (the class token's position, then one per patch); point it to a ViT file whose "
            "pos_embed has that shape.")
    return source_grid(int(pos_embed.shape[1]) - 1, source, grid)


def trunc_normal(tensor: torch.Tensor, std: float = 0.02) -> torch.Tensor:
    return nn.init.trunc_normal_(tensor, std=std, a=-2 * std, b=2 * std)


class ReIDViT(nn.Module):
    """TransReID's ViT (see the module docstring).

    ``forward(x, camids=None)`` gives the class token after the final norm as a ``[B, D, 1, 1]``
    map (the pooling of a meta architecture returns it unchanged); ``forward_tokens`` gives every
    token, or those before the last block, where JPM's branches (copies of the last block and
    norm) start; ``num_cameras > 1`` adds SIE's camera embedding.
    """

    def __init__(self, name: str, img_size: Sequence[int] = (256, 128), stride: Sequence[int] = (16, 16),
                 drop_path_rate: float = 0.1, num_cameras: int = 0, sie_coef: float = 3.0) -> None:
        super().__init__()
        spec = VIT_SPECS[name]
        self.name, self.spec = name, spec
        dim = spec.embed_dim
        self.out_channels = dim
        self.patch_embed = PatchEmbed(img_size, PATCH_SIZE, stride, dim)
        self.num_patches = self.patch_embed.grid[0] * self.patch_embed.grid[1]
        self.cls_token = nn.Parameter(trunc_normal(torch.zeros(1, 1, dim)))
        self.pos_embed = nn.Parameter(trunc_normal(torch.zeros(1, self.num_patches + 1, dim)))
        self.num_cameras = int(num_cameras) if int(num_cameras) > 1 else 0
        self.sie_coef = float(sie_coef)
        if self.num_cameras:
            self.sie_embed = nn.Parameter(trunc_normal(torch.zeros(self.num_cameras, 1, dim)))
        # Deeper blocks drop more (linear from 0); plain floats, as the model may be built on the meta device.
        rates = [float(drop_path_rate) * i / max(spec.depth - 1, 1) for i in range(spec.depth)]
        self.blocks = nn.ModuleList(Block(spec, r) for r in rates)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                trunc_normal(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    @property
    def uses_camids(self) -> bool:
        """Whether ``forward`` needs the camera ids (SIE)."""
        return self.num_cameras > 0

    def embed(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Tokens before the blocks: patches, class token, position (and camera) embedding."""
        tokens = self.patch_embed(x)
        tokens = torch.cat([self.cls_token.expand(tokens.shape[0], -1, -1), tokens], dim=1) + self.pos_embed
        if not self.num_cameras:
            return tokens
        return tokens + camera_offsets(self.sie_embed, camids, self.sie_coef, self.training, tokens.device)

    def forward_tokens(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None,
                       last: bool = True) -> torch.Tensor:
        """All tokens ``[B, 1 + N, D]``: after every block and the norm, or (``last=False``) before
        the last block, where TransReID's JPM branches start."""
        tokens = self.embed(x, camids)
        for block in self.blocks if last else self.blocks[:-1]:
            tokens = block(tokens)
        return self.norm(tokens) if last else tokens

    def forward(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.forward_tokens(x, camids)[:, 0, :, None, None]

    def load_imagenet(self, path: str = "", grid: Sequence[int] = ()) -> None:
        """Load an ImageNet ViT/DeiT file (timm's or DeiT's; `path`, or TransReID's file downloaded
        into torch's hub cache) or a person-pretrained one (PersonViT's LUPerson files: a DINO-style
        teacher, a 2:1 position grid): classifier and distillation token dropped, position
        embedding resized to this grid (from `grid`, rows and cols, when given; else square or 2:1
        from its length; logged), every other tensor required with its shape."""
        expected = (f"an ImageNet ViT file of {self.name}'s width such as {self.spec.url}, "
                    f"or PersonViT's LUPerson file of that width")
        if path:
            state = read_pretrained(path, expected)
        else:
            path = self.spec.url
            try:
                state = unwrap_state_dict(torch.hub.load_state_dict_from_url(
                    path, map_location="cpu", check_hash=True, weights_only=True), path, expected)
            except (URLError, OSError) as exc:  # URLError, socket and SSL errors are all OSError
                raise PretrainedWeightsError(
                    f"Could not download the ImageNet weights of {self.name} from {path} ({type(exc).__name__}). "
                    "Set MODEL.BACKBONE.PRETRAINED_PATH to a local copy of that file, or set "
                    "MODEL.BACKBONE.PRETRAINED False.") from None
        own = self.state_dict()
        if "dist_token" in state and "pos_embed" in state and state["pos_embed"].dim() == 3:  # DeiT distilled: its 2nd position is the dist token
            state["pos_embed"] = torch.cat([state["pos_embed"][:, :1], state["pos_embed"][:, 2:]], dim=1)
        state = {k: v for k, v in state.items() if not k.startswith(("head", "dist_token", "fc.", "pre_logits"))}
        weight = state.get("patch_embed.proj.weight")
        if weight is not None and weight.dim() == 2 and weight.numel() == own["patch_embed.proj.weight"].numel():
            # old linear patchification; another width is left as it is, for the shape check's one line
            state["patch_embed.proj.weight"] = weight.reshape(own["patch_embed.proj.weight"].shape)
        if "pos_embed" in state:
            source = pretrained_grid(state["pos_embed"], path, grid)
            if source != self.patch_embed.grid or state["pos_embed"].shape != own["pos_embed"].shape:
                state["pos_embed"] = resize_pos_embed(state["pos_embed"], self.patch_embed.grid, source=source)
            # Logged: the grid is read from the length unless given, and a wrong guess would load without error.
            logger.info("%s: position embedding of a %dx%d patch grid (%s) -> this model's %dx%d grid", path, *source,
                        "MODEL.BACKBONE.PRETRAINED_GRID" if grid else "square or 2:1, from its length",
                        *self.patch_embed.grid)
        load_fitting(self, state, path, self.name, expected, optional=("sie_embed",))  # ImageNet files: no cameras


__all__ = ["PATCH_SIZE", "VIT_SPECS", "ReIDViT", "ViTSpec", "resize_pos_embed"]
