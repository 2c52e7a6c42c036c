"""Any timm model as a backbone: ``MODEL.BACKBONE.NAME "timm/<timm model name>"``.

timm (``pip install 'circle-reid[timm]'``) is imported only when such a name is built. The
model is created without its classifier and its global pooling, and its
``forward_features`` output becomes the feature map that this toolkit's pooling, embedding,
neck and heads take:

* CNNs (ResNet, ConvNeXt, EfficientNet, ...): their last feature map ``[B, C, h, w]`` as is;
* Swin and the other models that give channels-last maps (``output_fmt`` "NHWC"): the same
  map moved to ``[B, C, h, w]``;
* ViT-style models (tokens ``[B, N, C]``): with ``MODEL.BACKBONE.TOKEN_FEATURE`` "cls" the
  class token as a ``[B, C, 1, 1]`` map (every pooling returns it unchanged; TransReID's
  global feature), with "patches" the patch tokens (class and register tokens left out)
  laid out on their ``[h, w]`` grid, which ``MODEL.HEADS.POOLING`` then pools.

ViT-style models are built for the training input size (``img_size``), so their position
embedding has the re-ID grid (e.g. 16 x 8 patches at 256 x 128); ImageNet weights are
resampled to it by timm's own ``checkpoint_filter_fn`` of the model's family.

ImageNet weights: ``MODEL.BACKBONE.PRETRAINED_PATH`` (a file saved by torch or a
``.safetensors`` file, e.g. timm's ``model.safetensors`` from the Hugging Face hub) when set,
otherwise timm's own download (Hugging Face hub or URL, cached by timm). When neither works,
one line names the timm model, where timm fetches it from and the key to set.
"""
from __future__ import annotations

import difflib
import sys
from typing import Dict, Optional, Sequence, Tuple

import torch
from torch import nn

from .pretrained import PretrainedWeightsError, load_fitting, read_pretrained

PREFIX = "timm/"
TOKEN_FEATURES: Tuple[str, ...] = ("cls", "patches")


def import_timm():
    """The timm module, or an ImportError saying how to install it."""
    try:
        import timm
    except ImportError:
        raise ImportError(
            "MODEL.BACKBONE.NAME 'timm/...' needs the timm package: pip install 'circle-reid[timm]' "
            "(or pip install timm)."
        ) from None
    return timm


def check_model_name(name: str) -> str:
    """The timm architecture of `name` ("vit_small_patch16_224.augreg_in1k" -> its architecture);
    a ValueError naming close matches when timm has no such model."""
    timm = import_timm()
    arch = name.split(".", 1)[0]
    if not name or not timm.is_model(arch):
        close = difflib.get_close_matches(arch, timm.list_models(), n=3, cutoff=0.6)
        hint = f" Did you mean {', '.join(PREFIX + c for c in close)}?" if close else ""
        raise ValueError(
            f"MODEL.BACKBONE.NAME {PREFIX + name!r}: timm has no model {arch!r}.{hint} "
            "timm.list_models('*pattern*') lists the names."
        )
    return arch


def _weights_source(model: nn.Module, name: str) -> str:
    """Where timm fetches `name`'s weights from (for messages)."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    where = []
    if cfg.get("hf_hub_id"):
        where.append(f"huggingface.co/{cfg['hf_hub_id']}")
    if cfg.get("url"):
        where.append(str(cfg["url"]))
    return " or ".join(where) or f"timm's pretrained weights for {name}"


def _classifier_prefixes(model: nn.Module) -> Tuple[str, ...]:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    names = cfg.get("classifier") or ()
    names = (names,) if isinstance(names, str) else tuple(names)
    # A pretrained file keeps the classifier that this backbone was built without.
    return tuple(f"{n}." for n in names) + ("head.", "fc.", "classifier.", "head_dist.")


def read_weights_file(path: str, expected: str) -> Dict[str, torch.Tensor]:
    """A state dict from a ``.safetensors`` file or a file saved by torch (read with ``weights_only``)."""
    if not path.endswith(".safetensors"):
        return read_pretrained(path, expected)
    try:
        from safetensors.torch import load_file

        return load_file(path, device="cpu")
    except Exception as exc:  # truncated or not a safetensors file
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} cannot be read as a .safetensors file "
            f"({type(exc).__name__}); point it to {expected}."
        ) from None


class TimmBackbone(nn.Module):
    """A timm model without classifier and pooling; ``forward`` gives ``[B, C, h, w]``.

    Args:
        name: timm model name (without the "timm/" prefix); a pretrained tag may follow a dot.
        pretrained: load ImageNet (or whatever the tag names) weights.
        pretrained_path: local weights file used instead of timm's download.
        img_size: ``(height, width)`` of the input, for models with a fixed patch grid.
        token_feature: "cls" or "patches" (see the module docstring); ignored for map outputs.
        drop_path: stochastic depth rate, for models that have it.
    """

    def __init__(self, name: str, pretrained: bool = False, pretrained_path: str = "",
                 img_size: Sequence[int] = (256, 128), token_feature: str = "cls", drop_path: float = 0.0) -> None:
        super().__init__()
        if token_feature not in TOKEN_FEATURES:
            raise ValueError(f"MODEL.BACKBONE.TOKEN_FEATURE must be one of {', '.join(TOKEN_FEATURES)}, "
                             f"got {token_feature!r}.")
        check_model_name(name)
        self.name = name
        self.token_feature = token_feature
        self.img_size = (int(img_size[0]), int(img_size[1]))
        download = bool(pretrained) and not pretrained_path
        self.model = self._create(name, download, drop_path)
        self.out_channels = int(self.model.num_features)
        self.output_fmt = str(getattr(self.model, "output_fmt", "NCHW"))
        self.num_prefix_tokens = int(getattr(self.model, "num_prefix_tokens", 1))
        if pretrained and pretrained_path:
            self.load_pretrained(pretrained_path)
        self.is_tokens = self._probe_tokens()

    def _create(self, name: str, download: bool, drop_path: float) -> nn.Module:
        timm = import_timm()
        kwargs = {"num_classes": 0, "global_pool": "", "img_size": self.img_size}
        if drop_path > 0:
            kwargs["drop_path_rate"] = float(drop_path)
        while True:
            try:
                model = timm.create_model(name, pretrained=False, **kwargs)
                break
            except TypeError as exc:  # a keyword this family does not take (CNNs have no img_size)
                dropped = [k for k in kwargs if f"'{k}'" in str(exc)]
                if not dropped:
                    raise
                if dropped[0] == "drop_path_rate":
                    raise ValueError(f"MODEL.BACKBONE.DROP_PATH: timm's {name} has no stochastic depth; "
                                     "set it to 0.") from None
                kwargs.pop(dropped[0])
        if not download:
            return model
        try:  # timm's own download (Hugging Face hub or URL) into its cache, or its cached copy
            return timm.create_model(name, pretrained=True, **kwargs)
        except Exception as exc:  # no network: connection, hub and HTTP errors of several libraries
            raise PretrainedWeightsError(
                f"timm could not get the pretrained weights of {name} from {_weights_source(model, name)} "
                f"({type(exc).__name__}). Download the file where there is a network and set "
                "MODEL.BACKBONE.PRETRAINED_PATH to it, or set MODEL.BACKBONE.PRETRAINED False."
            ) from None

    def load_pretrained(self, path: str) -> None:
        """Load a local weights file of this timm model (classifier dropped, position embedding
        resampled by timm's filter for the family); every backbone tensor must come from it."""
        expected = f"the weights of timm's {self.name} ({_weights_source(self.model, self.name)})"
        state = read_weights_file(path, expected)
        filter_fn = getattr(sys.modules.get(type(self.model).__module__), "checkpoint_filter_fn", None)
        if filter_fn is not None:
            try:
                state = filter_fn(state, self.model)
            except Exception as exc:  # timm's filters assume the family's keys and shapes
                raise PretrainedWeightsError(
                    f"Weights in {path} do not fit timm's {self.name} ({type(exc).__name__}: {exc}). "
                    f"Use {expected}.") from None
        own = self.model.state_dict()
        classifier = _classifier_prefixes(self.model)
        state = {k: v for k, v in state.items() if not (k.startswith(classifier) and k not in own)}
        load_fitting(self.model, state, path, f"timm's {self.name}", expected)

    def _probe_tokens(self) -> bool:
        """Whether ``forward_features`` gives tokens ``[B, N, C]`` (ViT-style) rather than a map."""
        was_training = self.model.training
        try:
            with torch.no_grad():
                out = self.model.eval().forward_features(torch.zeros(1, 3, *self.img_size))
        finally:
            self.model.train(was_training)
        return out.dim() == 3

    def token_grid(self, num_tokens: int) -> Tuple[int, int]:
        """The ``(h, w)`` grid of `num_tokens` patch tokens."""
        grid = getattr(getattr(self.model, "patch_embed", None), "grid_size", None)
        if grid is not None and int(grid[0]) * int(grid[1]) == num_tokens:
            return int(grid[0]), int(grid[1])
        raise ValueError(f"timm's {self.name} gives {num_tokens} patch tokens, which do not form its patch grid; "
                         "use MODEL.BACKBONE.TOKEN_FEATURE cls.")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.model.forward_features(x)
        if out.dim() == 3:
            if self.token_feature == "cls":
                return out[:, 0, :, None, None]
            patches = out[:, self.num_prefix_tokens:]
            h, w = self.token_grid(patches.shape[1])
            return patches.transpose(1, 2).reshape(out.shape[0], out.shape[2], h, w)
        if self.output_fmt == "NHWC":
            return out.permute(0, 3, 1, 2)
        return out


def timm_name(backbone_name: str) -> Optional[str]:
    """The timm model name of a ``MODEL.BACKBONE.NAME`` ("timm/<name>"), None for other names."""
    text = str(backbone_name)
    return text[len(PREFIX):] if text.lower().startswith(PREFIX) else None


__all__ = ["PREFIX", "TOKEN_FEATURES", "TimmBackbone", "check_model_name", "import_timm", "read_weights_file",
           "timm_name"]
