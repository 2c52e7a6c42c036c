"""Proof that CLIP-ReID checkpoints give CLIP-ReID's own features in this toolkit.

CLIP-ReID (Li et al., AAAI 2023, github.com/Syliz517/CLIP-ReID) saves ``model.state_dict()`` of
its ``build_transformer``: the CLIP image encoder (``image_encoder.*``, OpenAI's names), the SIE
table ``cv_embed``, ``bottleneck`` / ``bottleneck_proj`` and ``classifier`` / ``classifier_proj``,
and for its two-stage models the text side (``prompt_learner.*``, ``text_encoder.*``). BoxMOT's
``clip_*.pt`` files are these checkpoints. For each variant below (ViT-B/16 of the two-stage
model, ViT-B/16 with SIE and overlapping patches as in its best released models, RN50, and the
ViT-B/16 of its baseline ``make_model``) the script

1. writes seeded synthetic crops of mixed sizes as image files, with a camera id each;
2. builds CLIP-ReID's own model with CLIP-ReID's own code (``--clipreid-repo``, run in a separate
   Python environment, ``--clipreid-python``), fills every tensor with seeded synthetic weights,
   saves ``model.state_dict()`` as its training does, loads it back with the model's own
   ``load_param`` as its ``test_clipreid.py`` does, and computes the features as its
   ``do_inference`` does: Pillow reading, torchvision ``Resize`` + ``ToTensor`` + ``Normalize``,
   ``model(img, cam_label=camids)`` in eval mode, ``TEST.NECK_FEAT before`` (its configs);
3. loads the same files here through ``MODEL.WEIGHTS`` and through ``tools/extract.py
   --config-file configs/Market1501/clip_vit_b16_baseline.yml --weights FILE`` on the list file;
4. records the largest absolute difference of the features and the smallest per-image cosine,
   and, as a check that the comparison can fail, the difference when every crop is given camera 0
   (SIE variant).

CLIP-ReID's constructor downloads OpenAI's CLIP file and moves the model to CUDA. In the reference
subprocess (its code unchanged) the download is replaced by CLIP-ReID's own ``build_model`` on a
seeded state dict of OpenAI's layout, and the CUDA moves it makes (``.to("cuda")``,
``.cuda()``) leave tensors where they are, so that it runs on a CPU. Run it with this
repository's environment:

    python benchmarks/compare_clipreid.py --clipreid-python /path/to/env/bin/python \\
        --clipreid-repo /path/to/CLIP-ReID

(the environment needs torch, torchvision, timm, yacs, ftfy, regex and Pillow).
``--fixture tests/fixtures/clipreid_reference.npz`` also writes the CI fixture (4 PNG crops per
variant at 128x64, layouts and features only).
"""
from __future__ import annotations

import os
import sys
from typing import Dict, Sequence, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import compare_fastreid as shared  # noqa: E402  (seeded generators)
import compare_torchreid as crops  # noqa: E402  (BatchNorm statistics)
import compare_transreid as lineage  # noqa: E402  (the comparison itself)

CONFIG = "configs/Market1501/clip_vit_b16_baseline.yml"
WEIGHT_SEED = 2031
_IMAGENET = ["MODEL.PIXEL_MEAN", [123.675, 116.28, 103.53], "MODEL.PIXEL_STD", [58.395, 57.12, 57.375]]
#: name -> CLIP-ReID's settings (its config keys; BUILDER: which of its model files) and our overrides.
ARCHS: Dict[str, Dict[str, object]] = {
    "vit_clipreid": {"theirs": {"NAME": "ViT-B-16", "BUILDER": "make_model_clipreid"}, "opts": []},
    "vit_clipreid_sie_olp": {
        "theirs": {"NAME": "ViT-B-16", "BUILDER": "make_model_clipreid", "STRIDE_SIZE": [12, 12],
                   "SIE_CAMERA": True, "SIE_COE": 1.0},
        "opts": ["MODEL.CLIP.STRIDE_SIZE", [12, 12], "MODEL.CLIP.SIE_CAMERA", True,
                 "MODEL.CLIP.NUM_CAMERAS", lineage.NUM_CAMERAS]},
    "rn50_clipreid": {"theirs": {"NAME": "RN50", "BUILDER": "make_model_clipreid", "PIXEL": "imagenet"},
                      "opts": ["MODEL.BACKBONE.NAME", "clip_rn50"] + _IMAGENET},
    "vit_baseline": {"theirs": {"NAME": "ViT-B-16", "BUILDER": "make_model"}, "opts": []},
}
#: OpenAI's CLIP shapes (its build_model reads them back from the state dict).
_OPENAI = {"ViT-B-16": dict(embed_dim=512, vision_layers=12, vision_width=768, vision_patch_size=16, grid=14),
           "RN50": dict(embed_dim=1024, vision_layers=(3, 4, 6, 3), vision_width=64, vision_patch_size=None, grid=7)}


def synthesize_tensor(key: str, shape: Sequence[int], seed: int = WEIGHT_SEED) -> torch.Tensor:
    """A seeded value for CLIP / CLIP-ReID state-dict entry `key` that keeps activations in range.

    Linear and attention projections get 1/sqrt(fan_in)-scaled weights (the residual branches'
    output layers half of that), convolutions He-scaled ones (each bottleneck's last BatchNorm
    small, so that the residual sums stay bounded); token, position and camera embeddings are
    large enough to change the features; the text side's tables are small.
    """
    name = key.rsplit(".", 1)[-1]
    if name in ("num_batches_tracked", "running_mean", "running_var"):
        return crops.synthesize_tensor(key, shape, seed)
    gen = shared._generator(seed, key)
    shape = tuple(int(s) for s in shape)
    if "token_embedding" in key or name in ("token_prefix", "token_suffix", "cls_ctx") or \
            (name == "positional_embedding" and not key.startswith(("visual", "image_encoder"))):
        return 0.02 * torch.randn(shape, generator=gen)
    if name in ("class_embedding", "positional_embedding", "cv_embed"):
        return 0.5 * torch.randn(shape, generator=gen)
    if name == "logit_scale":
        return torch.full(shape, 4.6052)
    if name == "weight" and len(shape) == 4:
        return torch.randn(shape, generator=gen) * (2.0 / (shape[1] * shape[2] * shape[3])) ** 0.5
    if name in ("proj", "text_projection"):  # used as x @ proj: the fan-in is the first axis
        return torch.randn(shape, generator=gen) / shape[0] ** 0.5
    if name in ("weight", "in_proj_weight") and len(shape) == 2:
        if key.startswith("classifier"):
            return 0.01 * torch.randn(shape, generator=gen)
        scale = 0.5 if key.endswith(("attn.out_proj.weight", "mlp.c_proj.weight")) else 1.0
        return scale * torch.randn(shape, generator=gen) / shape[1] ** 0.5
    if name == "weight":  # LayerNorm / BatchNorm scale
        return shared._uniform(shape, 0.1, 0.3, gen) if key.endswith("bn3.weight") else shared._uniform(shape, 0.5, 1.5, gen)
    if name in ("bias", "in_proj_bias"):
        return 0.1 * torch.randn(shape, generator=gen)
    raise ValueError(f"no synthesis rule for {key} {shape}")


def synthesize_state(layout: Sequence[Tuple[str, Sequence[int]]], seed: int = WEIGHT_SEED) -> Dict[str, torch.Tensor]:
    """A full state dict from ``(key, shape)`` pairs, in that order."""
    return {key: synthesize_tensor(key, shape, seed) for key, shape in layout}


# ------------------------------------------------------------------ CLIP-ReID's side (its own env)
def _cpu_only() -> None:
    """CLIP-ReID's constructors move tensors to CUDA; on a CPU those moves keep them where they are."""
    to = torch.nn.Module.to

    def module_to(self, *args, **kwargs):
        if args and str(args[0]).startswith("cuda"):
            return self
        return to(self, *args, **kwargs)

    torch.nn.Module.to = module_to
    torch.Tensor.cuda = lambda self, *args, **kwargs: self


def _openai_loader(clip_module):
    """A stand-in for CLIP-ReID's ``load_clip_to_cpu``: its own ``build_model`` on a seeded state
    dict of OpenAI's layout (built by its own ``CLIP`` class at 224x224) instead of the download."""
    from model.clip.model import CLIP

    def load(name: str, h_resolution: int, w_resolution: int, stride: int):
        o = _OPENAI[name]
        ref = CLIP(o["embed_dim"], 224, o["vision_layers"], o["vision_width"], o["vision_patch_size"],
                   o["vision_patch_size"] or 16, 77, 49408, 512, 8, 12, o["grid"], o["grid"])
        layout = [(k, tuple(v.shape)) for k, v in ref.state_dict().items()]
        return clip_module.build_model(synthesize_state(layout, WEIGHT_SEED + 1), h_resolution, w_resolution, stride)

    return load


def run_reference(out_dir: str, archs: Sequence[str], size: Tuple[int, int], images: str, repo: str,
                  family: lineage.Family) -> None:
    """CLIP-ReID's part: ``<arch>.pth`` and ``reference.npz`` in `out_dir`."""
    sys.path.insert(0, repo)
    _cpu_only()
    import torchvision.transforms as T
    from PIL import Image

    from config import cfg as defaults
    import model.make_model as baseline_file
    import model.make_model_clipreid as clipreid_file
    from model.clip import clip as clip_module

    for module in (baseline_file, clipreid_file):
        module.load_clip_to_cpu = _openai_loader(clip_module)
    paths = sorted(os.path.join(images, f) for f in os.listdir(images) if not f.endswith(".txt"))
    camids = torch.tensor([lineage.camera_of(i) for i in range(len(paths))])
    arrays: Dict[str, np.ndarray] = {}
    for name in archs:
        theirs = dict(family.archs[name]["theirs"])
        builder = {"make_model": baseline_file, "make_model_clipreid": clipreid_file}[theirs.pop("BUILDER")]
        pixel = theirs.pop("PIXEL", "clip")
        mean, std = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) if pixel == "imagenet" else ([0.5] * 3, [0.5] * 3)
        cfg = defaults.clone()
        cfg.merge_from_list([x for k, v in theirs.items() for x in (f"MODEL.{k}", v)]
                            + ["INPUT.SIZE_TRAIN", list(size), "INPUT.SIZE_TEST", list(size), "INPUT.PIXEL_MEAN", mean,
                               "INPUT.PIXEL_STD", std, "TEST.NECK_FEAT", "before", "DATASETS.NAMES", "market1501"])

        def build():
            return builder.make_model(cfg, num_class=lineage.NUM_CLASSES, camera_num=lineage.NUM_CAMERAS, view_num=1)

        model = build()
        layout = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
        model.load_state_dict(synthesize_state(layout), strict=True)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        path = os.path.join(out_dir, f"{name}.pth")
        torch.save(model.state_dict(), path)  # as its training saves its models
        model = build()
        model.load_param(path)  # as its test_clipreid.py loads them
        unloaded = [k for k, v in model.state_dict().items() if not torch.equal(v, saved[k])]
        if unloaded:
            raise RuntimeError(f"CLIP-ReID's load_param did not load {unloaded[:3]}")
        transform = T.Compose([T.Resize(cfg.INPUT.SIZE_TEST), T.ToTensor(), T.Normalize(mean=mean, std=std)])
        img = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])
        with torch.no_grad():  # its do_inference passes the camera ids only with SIE_CAMERA
            cams = camids if cfg.MODEL.SIE_CAMERA else None
            feats = model.eval()(img, cam_label=cams, view_label=None).numpy()
        lineage.record_reference(arrays, name, feats, layout, family.label)
    arrays["size"] = np.array(size)
    np.savez_compressed(os.path.join(out_dir, "reference.npz"), **arrays)


CLIPREID = lineage.Family(
    label="CLIP-ReID", option="clipreid", repo="a checkout of github.com/Syliz517/CLIP-ReID", code_dir="",
    config=CONFIG, archs=ARCHS, theirs={}, script=os.path.abspath(__file__), reference=run_reference,
    tolerance=1e-5)


def main(argv=None) -> int:
    return lineage.main(argv, CLIPREID, __doc__)


if __name__ == "__main__":
    sys.exit(main())
