"""CLIP's image encoders as re-ID backbones, as CLIP-ReID (Li et al., "CLIP-ReID: Exploiting
Vision-Language Model for Image Re-Identification without Concrete Text Labels", AAAI 2023) uses
them.

The encoders are open_clip's (its ``VisionTransformer`` and ``ModifiedResNet``, built with
OpenAI's parameter names), so OpenAI's CLIP files (their ``visual.`` tensors) and CLIP-ReID's
``image_encoder.`` tensors map onto them name for name. What CLIP-ReID changes, done here:

* ViT-B/16 (``clip_vit_b16``): QuickGELU as in OpenAI's models; the patch convolution may
  overlap (``MODEL.CLIP.STRIDE_SIZE``, 12 in CLIP-ReID's best models: 256x128 -> 21 x 10
  patches); the position embedding of OpenAI's 14 x 14 grid is resized bilinearly to the re-ID
  grid; SIE (``MODEL.CLIP.SIE_CAMERA``): a learned vector per camera, scaled by
  ``SIE_COEF``, added to the class token alone before the position embedding (CLIP-ReID's code;
  TransReID adds it to every token). :meth:`ClipViT.features` gives the class token before the
  last block, after the last block and ``ln_post`` (768 wide) and its projection (512 wide).
* ModifiedResNet-50 (``clip_rn50``): the last stage keeps the resolution (its anti-aliasing
  average pools become identities, "last stride 1"), so 256x128 gives a 16 x 8 map, and the
  attention pooling's position embedding (7 x 7 + 1 in OpenAI's file) is resized to it.
  :meth:`ClipResNet.features` gives the third and fourth stages' maps and the attention-pooled
  projection (1024 wide; the output of the query that is the map's mean).

``forward`` gives the map a meta architecture pools: the class token as ``[B, D, 1, 1]`` (ViT),
the last stage's map (ResNet); ``reid.modeling.meta_arch.clipreid`` uses ``features``.
open_clip is an optional extra (``pip install 'circle-reid[clip]'``), imported when a CLIP
backbone is built.
"""
from __future__ import annotations

import logging
import warnings
import zipfile
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from reid.utils.path_kinds import file_problem

from .pos_embed import patch_grid, resize_pos_embed, source_grid
from .pretrained import PretrainedWeightsError, load_fitting, read_pretrained
from .sie import camera_offsets
from .vit import trunc_normal

logger = logging.getLogger(__name__)

CLIP_HINT = "pip install open_clip_torch (or pip install 'circle-reid[clip]')"


@dataclass(frozen=True)
class ClipSpec:
    """One CLIP model: ``kind`` "vit" or "resnet"; width (ViT: token width, ResNet: stem
    width), layers (ViT: blocks; ResNet: blocks per stage), heads, the projection's width,
    the ViT's patch size, open_clip's name of OpenAI's model (for its download), and the text
    transformer's width, heads and layers (CLIP-ReID's first stage)."""

    kind: str
    width: int
    layers: Tuple[int, ...]
    heads: int
    output_dim: int
    patch: int = 16
    openai_name: str = ""
    text_width: int = 512
    text_heads: int = 8
    text_layers: int = 12

    @property
    def feature_dim(self) -> int:
        """Width of the encoder's feature before the projection (ViT: tokens; ResNet: last stage)."""
        return self.width if self.kind == "vit" else self.width * 32


#: ``MODEL.BACKBONE.NAME`` -> encoder (OpenAI's ViT-B/16 and RN50, the two CLIP-ReID trains).
CLIP_SPECS: Dict[str, ClipSpec] = {
    "clip_vit_b16": ClipSpec("vit", 768, (12,), 12, 512, 16, "ViT-B-16"),
    "clip_rn50": ClipSpec("resnet", 64, (3, 4, 6, 3), 32, 1024, 0, "RN50"),
}


def require_open_clip():
    """The open_clip module, or an ImportError saying how to install it (one line)."""
    try:
        import open_clip
    except ImportError as e:
        raise ImportError(f"The CLIP backbones (clip_vit_b16, clip_rn50) need the open_clip package: {CLIP_HINT}.") from e
    return open_clip


def _resize_positions(table: torch.Tensor, grid: Tuple[int, int], what: str, source: str) -> torch.Tensor:
    """A ``[1 + h*w, C]`` position table (OpenAI's layout: first row the class token's or the mean
    query's) of a square grid resized to `grid` (the shared grid rule: bilinear, as CLIP-ReID)."""
    if table.dim() != 2 or table.shape[0] < 2:
        raise PretrainedWeightsError(f"{source}: {what} has shape {tuple(table.shape)}, not [1 + positions, width]; "
                                     "point MODEL.BACKBONE.PRETRAINED_PATH to an OpenAI CLIP file.")
    old = source_grid(table.shape[0] - 1, source, name=what)
    if old == tuple(grid):
        return table
    logger.info("%s: %s of a %dx%d grid -> this model's %dx%d grid", source, what, *old, *grid)
    return resize_pos_embed(table, tuple(grid), source=old)


class ClipViT(nn.Module):
    """CLIP's vision transformer with overlapping patches and SIE (see the module docstring);
    state-dict names are OpenAI's ``visual.*`` without the prefix, plus ``sie_embed``."""

    def __init__(self, name: str, spec: ClipSpec, img_size: Sequence[int] = (256, 128),
                 stride: Sequence[int] = (16, 16), num_cameras: int = 0, sie_coef: float = 1.0) -> None:
        super().__init__()
        if len(stride) != 2 or not all(0 < int(s) <= spec.patch for s in stride):
            raise ValueError(f"MODEL.CLIP.STRIDE_SIZE must be between 1 and the patch size {spec.patch}, "
                             f"got {list(stride)}.")
        require_open_clip()
        from open_clip.transformer import QuickGELU, VisionTransformer

        self.name, self.spec = name, spec
        base = VisionTransformer(image_size=spec.patch, patch_size=spec.patch, width=spec.width,
                                 layers=spec.layers[0], heads=spec.heads, mlp_ratio=4.0,
                                 output_dim=spec.output_dim, act_layer=QuickGELU)
        self.grid = patch_grid(img_size, spec.patch, stride)
        if min(self.grid) < 1:
            raise ValueError(f"{name}: INPUT.SIZE_TRAIN {list(img_size)} is smaller than one {spec.patch}-pixel patch.")
        self.num_patches = self.grid[0] * self.grid[1]
        self.conv1 = nn.Conv2d(3, spec.width, spec.patch, stride=tuple(int(s) for s in stride), bias=False)
        self.class_embedding = base.class_embedding
        scale = spec.width ** -0.5
        self.positional_embedding = nn.Parameter(scale * torch.randn(self.num_patches + 1, spec.width))
        self.ln_pre, self.transformer, self.ln_post, self.proj = base.ln_pre, base.transformer, base.ln_post, base.proj
        self.out_channels = spec.width
        self.proj_dim = spec.output_dim
        self.num_cameras = int(num_cameras) if int(num_cameras) > 1 else 0
        self.sie_coef = float(sie_coef)
        if self.num_cameras:
            self.sie_embed = nn.Parameter(trunc_normal(torch.zeros(self.num_cameras, spec.width)))

    @property
    def uses_camids(self) -> bool:
        """Whether ``forward`` needs the camera ids (SIE)."""
        return self.num_cameras > 0

    def features(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None,
                 sie: bool = True) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Class token before the last block ``[B, D]``, after it and ``ln_post`` ``[B, D]``, and
        that projected ``[B, output_dim]``; `sie` False leaves the camera embedding out (CLIP-ReID's
        first stage reads the image features without it)."""
        tokens = self.conv1(x).flatten(2).transpose(1, 2)
        cls = self.class_embedding.to(tokens.dtype).expand(tokens.shape[0], 1, -1)
        if self.num_cameras and sie:
            cls = cls + camera_offsets(self.sie_embed, camids, self.sie_coef, self.training, tokens.device)[:, None]
        tokens = self.ln_pre(torch.cat([cls, tokens], dim=1) + self.positional_embedding.to(tokens.dtype))
        blocks = self.transformer.resblocks
        for block in blocks[:-1]:
            tokens = block(tokens)
        before_last = tokens[:, 0]
        cls_out = self.ln_post(blocks[-1](tokens)[:, 0])
        return before_last, cls_out, cls_out @ self.proj

    def forward(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.features(x, camids)[1][:, :, None, None]

    def load_openai(self, path: str = "") -> None:
        """Load OpenAI's CLIP file (`path`, or open_clip's download of it): position embedding
        resized to this grid, SIE left as initialised, every other tensor required with its shape."""
        state, source = _clip_state(self.spec, path)
        conv = state.get("conv1.weight")
        if "positional_embedding" in state and conv is not None and conv.shape == self.conv1.weight.shape:
            state["positional_embedding"] = _resize_positions(state["positional_embedding"], self.grid,
                                                              "positional_embedding", source)
        _load_checked(self, state, source, optional=("sie_embed",))


class ClipResNet(nn.Module):
    """CLIP's ModifiedResNet with last stride 1 and the attention pooling resized to the map (see
    the module docstring); state-dict names are OpenAI's ``visual.*`` without the prefix."""

    def __init__(self, name: str, spec: ClipSpec, img_size: Sequence[int] = (256, 128)) -> None:
        super().__init__()
        require_open_clip()
        from open_clip.modified_resnet import ModifiedResNet

        self.name, self.spec = name, spec
        base = ModifiedResNet(list(spec.layers), spec.output_dim, spec.heads, image_size=224, width=spec.width)
        for child, module in base.named_children():
            self.add_module(child, module)
        first = self.layer4[0]
        first.avgpool = nn.Identity()  # last stride 1: the stage keeps the map's resolution
        if first.downsample is not None:
            first.downsample._modules["-1"] = nn.Identity()
        self.grid = (int(img_size[0]) // 16, int(img_size[1]) // 16)
        if min(self.grid) < 1:
            raise ValueError(f"{name}: INPUT.SIZE_TRAIN {list(img_size)} is smaller than 16 pixels.")
        dim = spec.feature_dim
        self.attnpool.positional_embedding = nn.Parameter(torch.randn(self.grid[0] * self.grid[1] + 1, dim) / dim ** 0.5)
        self.out_channels = dim
        self.proj_dim = spec.output_dim
        self.num_cameras = 0

    @property
    def uses_camids(self) -> bool:
        """CLIP-ReID's ResNet takes no camera ids."""
        return False

    def features(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Third-stage map, fourth-stage map and the attention-pooled projection ``[B, output_dim]``."""
        x = x.to(self.conv1.weight.dtype)
        for conv, bn, act in ((self.conv1, self.bn1, self.act1), (self.conv2, self.bn2, self.act2),
                              (self.conv3, self.bn3, self.act3)):
            x = act(bn(conv(x)))
        x3 = self.layer3(self.layer2(self.layer1(self.avgpool(x))))
        x4 = self.layer4(x3)
        return x3, x4, self.attnpool(x4)

    def forward(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.features(x)[1]

    def load_openai(self, path: str = "") -> None:
        """Load OpenAI's CLIP RN50 file (`path` or its download): the attention pooling's positions
        resized to this map, every other tensor required with its shape."""
        state, source = _clip_state(self.spec, path)
        key = "attnpool.positional_embedding"
        own = self.attnpool.positional_embedding
        if key in state and state[key].dim() == 2 and state[key].shape[1] == own.shape[1]:
            state[key] = _resize_positions(state[key], self.grid, key, source)
        _load_checked(self, state, source)


def _expected(spec: ClipSpec) -> str:
    return f"OpenAI's CLIP {spec.openai_name} file ({spec.openai_name}.pt, or open_clip's copy of it)"


def _clip_state(spec: ClipSpec, path: str) -> Tuple[Dict[str, torch.Tensor], str]:
    """The image encoder's tensors of a CLIP file (without ``visual.`` / ``image_encoder.``), as
    float32, and the file's name for messages; `path` empty: open_clip's download."""
    state, path = read_clip_file(spec, path)
    for prefix in ("visual.", "image_encoder."):
        inner = {k[len(prefix):]: v.float() for k, v in state.items() if k.startswith(prefix)}
        if inner:
            return inner, path
    raise PretrainedWeightsError(f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} holds no CLIP image encoder (no "
                                 f"'visual.' or 'image_encoder.' tensors); point it to {_expected(spec)}.")


def read_clip_file(spec: ClipSpec, path: str) -> Tuple[Dict[str, torch.Tensor], str]:
    """Every tensor of a CLIP file (OpenAI's TorchScript archive, safetensors or a plain state
    dict) and its path; `path` empty: open_clip's download of `spec`'s OpenAI weights."""
    if not path:
        path = _download(spec)
    problem = file_problem(path)  # before opening it: a FIFO would block the zip probe forever
    if problem:
        raise PretrainedWeightsError(f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} {problem}; point it to "
                                     f"{_expected(spec)}, or set MODEL.BACKBONE.PRETRAINED False.")
    if _is_torchscript(path):
        # OpenAI publishes TorchScript archives; torch.jit.load runs no Python code from the file.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "torch.jit is deprecated": still how these are read
            state = {k: v.float() for k, v in torch.jit.load(path, map_location="cpu").state_dict().items()}
    elif path.endswith(".safetensors"):
        from safetensors.torch import load_file

        state = load_file(path)
    else:
        state = read_pretrained(path, _expected(spec))
    return state, path


def _is_torchscript(path: str) -> bool:
    try:
        with zipfile.ZipFile(path) as z:
            return any(n.endswith("constants.pkl") for n in z.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def _download(spec: ClipSpec) -> str:
    """open_clip's download of OpenAI's weights (its own cache); one line naming the source and
    the setting to use instead when it fails."""
    open_clip = require_open_clip()
    cfg = open_clip.pretrained.get_pretrained_cfg(spec.openai_name, "openai")
    where = cfg.get("hf_hub") or cfg.get("url") or f"open_clip's {spec.openai_name} openai weights"
    try:
        target = open_clip.pretrained.download_pretrained(cfg)
    except Exception as exc:  # network, hub and file errors alike: the user's remedy is the same
        target, why = "", f"{type(exc).__name__}"
    else:
        why = "nothing downloaded"
    if not target:
        raise PretrainedWeightsError(
            f"Could not download the CLIP weights of {spec.openai_name} from {where} ({why}). Set "
            f"MODEL.BACKBONE.PRETRAINED_PATH to a local copy of {_expected(spec)}, or set MODEL.BACKBONE.PRETRAINED False.")
    return target


def _load_checked(model: nn.Module, state: Dict[str, torch.Tensor], source: str, optional: tuple = ()) -> None:
    """Load `state` into `model` when every tensor fits; a file of another width or patch size
    gets one line saying which CLIP model it seems to be."""
    conv = state.get("conv1.weight")
    mine = model.conv1.weight
    if conv is not None and conv.shape != mine.shape:
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={source!r} is a CLIP encoder of width {conv.shape[0]} and "
            f"{conv.shape[-1]}-pixel stem/patch kernels; {model.name} has width {mine.shape[0]} and "
            f"{mine.shape[-1]}-pixel ones: point it to {_expected(model.spec)}.")
    load_fitting(model, state, source, model.name, _expected(model.spec), optional=optional)


__all__ = ["CLIP_HINT", "CLIP_SPECS", "ClipResNet", "ClipSpec", "ClipViT", "read_clip_file", "require_open_clip"]
