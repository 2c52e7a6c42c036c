"""Proof that TransReID checkpoints give TransReID's own features in this toolkit.

For each of TransReID's model variants (ViT-B/16 plain, with SIE, with JPM, with both and
stride 12 as in its released models, and DeiT-S) the script

1. writes seeded synthetic person crops of mixed sizes as image files, with a camera id each
   (a list file of ``path pid camid`` lines);
2. builds TransReID's own model with TransReID's own code (a checkout of
   github.com/damo-cv/TransReID, ``--transreid-repo``, run in a separate Python environment with
   its dependencies, ``--transreid-python``), fills every tensor with seeded synthetic weights,
   saves ``model.state_dict()`` as TransReID's training does, loads it back with the model's own
   ``load_param`` as TransReID's ``test.py`` does, and computes the features as its
   ``do_inference`` does: Pillow reading, torchvision ``Resize`` + ``ToTensor`` + ``Normalize``
   (0.5 / 0.5), ``model(img, cam_label=camids)`` in eval mode;
3. loads the same files here through ``MODEL.WEIGHTS`` (``reid.engine.checkpoint_files``, this
   toolkit's test transform) and through ``tools/extract.py --config-file CFG --weights FILE``
   on the list file, with ``configs/Market1501/vit_base_transreid.yml`` and overrides;
4. records the largest absolute difference of the L2-normalised features and the smallest
   per-image cosine, and, as a check that the comparison can fail, the difference when every
   image is given camera 0 (for the SIE variants).

Run it with this repository's environment; TransReID's part runs in a subprocess:

    python benchmarks/compare_transreid.py --transreid-python /path/to/env/bin/python \\
        --transreid-repo /path/to/TransReID

``--fixture tests/fixtures/transreid_reference.npz`` also writes the CI fixture (4 PNG crops per
variant at 128x64 input, no weights: the tests rebuild weights and crops from the seeds below).
Other projects built on TransReID's code run the same comparison through a :class:`Family`
(``benchmarks/compare_personvit.py``).
TransReID's code imports ``torch._six``, which torch removed in 2.0; the reference subprocess
puts a stand-in module with the one name it reads (``container_abcs``, Python's
``collections.abc``) into ``sys.modules`` before importing it. Nothing of TransReID is patched.
"""
from __future__ import annotations

import argparse
import collections.abc
import json
import os
import subprocess
import sys
import tempfile
import types
from typing import Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare_fastreid as shared  # noqa: E402  (seeded generators, compare())
import compare_torchreid as crops  # noqa: E402  (seeded crops written as image files)

CONFIG = "configs/Market1501/vit_base_transreid.yml"
_PLAIN = ["MODEL.META_ARCHITECTURE", "baseline"]
_NO_SIE = ["MODEL.TRANSREID.SIE_CAMERA", False]
#: name -> TransReID's settings (its config keys) and this repository's overrides of CONFIG.
ARCHS: Dict[str, Dict[str, object]] = {
    "vit_base": {"theirs": {"STRIDE_SIZE": [16, 16]},
                 "opts": _PLAIN + _NO_SIE + ["MODEL.TRANSREID.STRIDE_SIZE", [16, 16]]},
    "vit_sie": {"theirs": {"STRIDE_SIZE": [16, 16], "SIE_CAMERA": True},
                "opts": _PLAIN + ["MODEL.TRANSREID.STRIDE_SIZE", [16, 16]]},
    "vit_jpm": {"theirs": {"STRIDE_SIZE": [16, 16], "JPM": True},
                "opts": _NO_SIE + ["MODEL.TRANSREID.STRIDE_SIZE", [16, 16]]},
    "vit_transreid_stride": {"theirs": {"STRIDE_SIZE": [12, 12], "SIE_CAMERA": True, "JPM": True}, "opts": []},
    "deit_small": {"theirs": {"STRIDE_SIZE": [16, 16], "TRANSFORMER_TYPE": "deit_small_patch16_224_TransReID"},
                   "opts": _PLAIN + _NO_SIE + ["MODEL.TRANSREID.STRIDE_SIZE", [16, 16],
                                               "MODEL.BACKBONE.NAME", "vit_small_transreid"]},
}


class Family(NamedTuple):
    """One project of TransReID's lineage as the comparison runs it.

    Attributes:
        label: the project's name in messages ("TransReID").
        option: the prefix of its command-line options (``--<option>-python``, ``--<option>-repo``).
        repo: what ``--<option>-repo`` points to.
        code_dir: the folder of that checkout holding its ``config`` and ``model`` packages.
        config: this repository's config the variants override.
        archs: variant name -> ``{"theirs": its MODEL.* settings, "opts": our overrides of config}``.
        theirs: its MODEL.* settings shared by every variant.
        script: the script whose ``--reference`` mode runs its code (in its own environment).
        reference: that mode's function (default :func:`run_reference`, for TransReID's code and
            its copies), ``(out_dir, archs, size, images, repo, family)``.
        tolerance: the largest absolute difference of features the comparison accepts.
    """

    label: str
    option: str
    repo: str
    code_dir: str
    config: str
    archs: Dict[str, Dict[str, object]]
    theirs: Dict[str, object]
    script: str
    reference: Optional[Callable[..., None]] = None
    tolerance: float = 1e-4  # TOLERANCE


TRANSREID = Family(label="TransReID", option="transreid", repo="a checkout of github.com/damo-cv/TransReID",
                   code_dir="", config=CONFIG, archs=ARCHS, script=os.path.abspath(__file__),
                   theirs={"TRANSFORMER_TYPE": "vit_base_patch16_224_TransReID", "PRETRAIN_CHOICE": "self"})
TOLERANCE = 1e-4  # (Family.tolerance holds it per project)
WEIGHT_SEED = 2027
NUM_CLASSES = 16
NUM_CAMERAS = 6
FULL = ((256, 128), [(128, 64), (256, 128), (300, 110), (400, 160), (160, 60), (96, 48)], "jpg")
SMALL = crops.SMALL  # the CI fixture's crops: the torchreid proof's, written by the same code


def camera_of(index: int) -> int:
    """The camera id given to crop `index`."""
    return (index * 5 + 2) % NUM_CAMERAS


def synthesize_tensor(key: str, shape: Sequence[int], seed: int = WEIGHT_SEED) -> torch.Tensor:
    """A seeded value for TransReID state-dict entry `key` that keeps activations in range.

    Linear layers get 1/sqrt(fan_in)-scaled normal weights (the residual branches' output layers
    half of that), the patch projection He-scaled ones; LayerNorm and BatchNorm parameters and
    statistics are drawn around their usual values; token, position and camera embeddings are
    large enough to change the features.
    """
    name = key.rsplit(".", 1)[-1]
    if name in ("num_batches_tracked", "running_mean", "running_var"):
        return crops.synthesize_tensor(key, shape, seed)  # BatchNorm statistics as in the torchreid proof
    gen = shared._generator(seed, key)
    shape = tuple(int(s) for s in shape)
    if name in ("cls_token", "pos_embed", "sie_embed"):
        return 0.5 * torch.randn(shape, generator=gen)
    if name == "weight" and len(shape) == 4:
        return torch.randn(shape, generator=gen) * (2.0 / (shape[1] * shape[2] * shape[3])) ** 0.5
    if name == "weight" and len(shape) == 2:
        if key.startswith(("classifier", "base.fc.")):
            return 0.01 * torch.randn(shape, generator=gen)
        scale = 0.5 if key.endswith(("attn.proj.weight", "mlp.fc2.weight")) else 1.0
        return scale * torch.randn(shape, generator=gen) / shape[1] ** 0.5
    if name == "weight":  # LayerNorm / BatchNorm scale
        return shared._uniform(shape, 0.5, 1.5, gen)
    if name == "bias":
        return 0.1 * torch.randn(shape, generator=gen)
    raise ValueError(f"no synthesis rule for {key} {shape}")


def synthesize_state(layout: Sequence[Tuple[str, Sequence[int]]], seed: int = WEIGHT_SEED) -> Dict[str, torch.Tensor]:
    """A full state dict from ``(key, shape)`` pairs, in that order."""
    return {key: synthesize_tensor(key, shape, seed) for key, shape in layout}


def write_list(folder: str, paths: Sequence[str]) -> str:
    """``list.txt`` in `folder`: one ``path pid camid`` line per crop (pid 1, camera :func:`camera_of`)."""
    listing = os.path.join(folder, "list.txt")
    with open(listing, "w", encoding="utf-8") as f:
        f.writelines(f"{os.path.abspath(p)} 1 {camera_of(i)}\n" for i, p in enumerate(paths))
    return listing


# ------------------------------------------------------------------ the project's side (its own env)
def _their_cfg(name: str, size: Tuple[int, int], family: Family = TRANSREID):
    from config import cfg as defaults

    cfg = defaults.clone()
    settings = {"NAME": "transformer", "SIE_COE": 3.0, **family.theirs, **family.archs[name]["theirs"]}
    cfg.merge_from_list([x for k, v in settings.items() for x in (f"MODEL.{k}", v)]
                        + ["INPUT.SIZE_TRAIN", list(size), "INPUT.SIZE_TEST", list(size),
                           "INPUT.PIXEL_MEAN", [0.5] * 3, "INPUT.PIXEL_STD", [0.5] * 3, "TEST.NECK_FEAT", "before"])
    return cfg


def run_reference(out_dir: str, archs: Sequence[str], size: Tuple[int, int], images: str, repo: str,
                  family: Family = TRANSREID) -> None:
    """The project's part: ``<arch>.pth`` and ``reference.npz`` in `out_dir`."""
    sys.modules.setdefault("torch._six", types.SimpleNamespace(container_abcs=collections.abc))  # torch >= 2.0
    sys.path.insert(0, os.path.join(repo, family.code_dir))
    import torchvision.transforms as T
    from PIL import Image
    from model import make_model

    paths = sorted(os.path.join(images, f) for f in os.listdir(images) if not f.endswith(".txt"))
    arrays: Dict[str, np.ndarray] = {}
    for name in archs:
        cfg = _their_cfg(name, size, family)
        model = make_model(cfg, num_class=NUM_CLASSES, camera_num=NUM_CAMERAS, view_num=1)
        layout = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
        model.load_state_dict(synthesize_state(layout), strict=True)
        saved = {k: v.clone() for k, v in model.state_dict().items()}
        path = os.path.join(out_dir, f"{name}.pth")
        torch.save(model.state_dict(), path)  # as the project's training saves its models
        model = make_model(cfg, num_class=NUM_CLASSES, camera_num=NUM_CAMERAS, view_num=1)
        model.load_param(path)  # as the project's test.py loads them
        # Some load_param versions skip tensors that do not fit without a word: check that all arrived.
        unloaded = [k for k, v in model.state_dict().items() if not torch.equal(v, saved[k])]
        if unloaded:
            raise RuntimeError(f"{family.label}'s load_param did not load {unloaded[:3]}")
        transform = T.Compose([T.Resize(cfg.INPUT.SIZE_TEST), T.ToTensor(),
                               T.Normalize(mean=cfg.INPUT.PIXEL_MEAN, std=cfg.INPUT.PIXEL_STD)])
        img = torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])
        camids = torch.tensor([camera_of(i) for i in range(len(paths))])
        with torch.no_grad():
            feats = model.eval()(img, cam_label=camids, view_label=torch.zeros_like(camids)).numpy()
        record_reference(arrays, name, feats, layout, family.label)
    arrays["size"] = np.array(size)
    np.savez_compressed(os.path.join(out_dir, "reference.npz"), **arrays)


def record_reference(arrays: Dict[str, np.ndarray], name: str, feats: np.ndarray,
                     layout: Sequence[Tuple[str, Sequence[int]]], label: str) -> None:
    """Store a variant's reference features and state-dict layout (what a fixture keeps)."""
    arrays[f"{name}/features"] = feats.astype(np.float32)
    arrays[f"{name}/keys"] = np.array([k for k, _ in layout])
    arrays[f"{name}/shapes"] = np.array(json.dumps([list(s) for _, s in layout]))
    print(f"{name}: {label} features {feats.shape}", flush=True)


# ------------------------------------------------------------------ our side
def arch_opts(name: str, size: Tuple[int, int], family: Family = TRANSREID) -> list:
    """Config overrides for `name` at input `size` (no ImageNet download, CPU)."""
    return list(family.archs[name]["opts"]) + ["INPUT.SIZE_TRAIN", list(size), "INPUT.SIZE_TEST", list(size),
                                               "MODEL.BACKBONE.PRETRAINED", False, "MODEL.DEVICE", "cpu"]


def our_features(name: str, weights: str, size: Tuple[int, int], paths: Sequence[str],
                 camids: Sequence[int], family: Family = TRANSREID) -> np.ndarray:
    """Features of this repository's model for `name` on image files: MODEL.WEIGHTS, test transform."""
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.data.image_io import read_image
    from reid.data.transforms import build_transforms
    from reid.engine.checkpoint_files import load_checkpoint
    from reid.modeling import build_model

    cfg = load_config(os.path.join(ROOT, family.config),
                      arch_opts(name, size, family) + ["MODEL.HEADS.NUM_CLASSES", NUM_CLASSES])
    model = build_model(cfg)
    load_checkpoint(weights, model=model)
    transform = build_transforms(cfg, is_train=False)
    extra = {"camids": torch.as_tensor(list(camids))} if model.uses_camids else {}
    with torch.no_grad():
        return model.eval()(torch.stack([transform(read_image(p)) for p in paths]), **extra).numpy()


def extract_features(name: str, weights: str, size: Tuple[int, int], listing: str, out: str,
                     family: Family = TRANSREID) -> np.ndarray:
    """L2-normalised features from ``tools/extract.py --config-file CFG --weights FILE`` on a list file."""
    sys.path.insert(0, ROOT)
    from reid.cli.extract import main as extract_main

    argv = ["--config-file", os.path.join(ROOT, family.config), "--weights", weights, "--input", listing,
            "--output", out, "--device", "cpu", "--quiet", "--num-workers", "0",
            *[str(v) for v in family.archs[name]["opts"]],
            "INPUT.SIZE_TRAIN", f"[{size[0]},{size[1]}]", "INPUT.SIZE_TEST", f"[{size[0]},{size[1]}]"]
    if extract_main(argv) != 0:
        raise RuntimeError(f"tools/extract.py failed for {name}")
    with np.load(out) as data:
        return data["feats"]


def _reference(python: str, repo: str, out: str, archs: Sequence[str], size: Tuple[int, int],
               images: str, family: Family = TRANSREID) -> Dict[str, np.ndarray]:
    subprocess.run([python, family.script, "--reference", f"--{family.option}-repo", repo, "--out", out,
                    "--archs", *archs, "--size", str(size[0]), str(size[1]), "--images", images], check=True)
    with np.load(os.path.join(out, "reference.npz")) as ref:
        return {k: ref[k] for k in ref.files}


def _normed(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def main(argv: Sequence[str] = None, family: Family = TRANSREID, doc: str = __doc__) -> int:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(f"--{family.option}-python", dest="python",
                   help=f"python of the environment for {family.label}'s code (torch, torchvision, yacs)")
    p.add_argument(f"--{family.option}-repo", dest="repo", help=family.repo)
    crops.add_comparison_arguments(p, family.archs)
    args = p.parse_args(argv)
    if not args.repo:
        p.error(f"--{family.option}-repo is required ({family.repo})")
    if args.reference:
        (family.reference or run_reference)(args.out, args.archs, tuple(args.size), args.images, args.repo, family)
        return 0
    if not args.python:
        p.error(f"--{family.option}-python is required (the environment for {family.label}'s code)")
    out = args.out or tempfile.mkdtemp(prefix=f"compare_{family.option}_")
    os.makedirs(out, exist_ok=True)
    size, sizes, ext = FULL
    images = os.path.join(out, "images")
    paths = crops.write_crops(images, sizes, ext)
    listing = write_list(out, paths)
    camids = [camera_of(i) for i in range(len(paths))]
    reference = _reference(args.python, args.repo, out, args.archs, size, images, family)
    results = {}
    for name in args.archs:
        weights = os.path.join(out, f"{name}.pth")
        theirs = reference[f"{name}/features"]
        row = {"dim": int(theirs.shape[1]),
               "model_weights": shared.compare(our_features(name, weights, size, paths, camids, family), theirs),
               "extract_py": shared.compare(extract_features(name, weights, size, listing,
                                                             os.path.join(out, f"{name}.npz"), family),
                                            _normed(theirs))}
        if family.archs[name]["theirs"].get("SIE_CAMERA"):  # the comparison can fail: wrong cameras, other features
            row["all_camera_0"] = shared.compare(
                our_features(name, weights, size, paths, [0] * len(paths), family), theirs)
        results[name] = row
        for label, r in row.items():
            if label != "dim":
                print(f"{name} {label}: max|diff| {r['max_abs_diff']:.2e} min cos {r['min_cosine']:.7f}", flush=True)
    crops.save_results(out, size, sizes, results, args.fixture,
                       lambda small, small_size, images: _reference(args.python, args.repo, small, args.archs,
                                                                    small_size, images, family))
    checked = [results[n][w]["max_abs_diff"] for n in results for w in ("model_weights", "extract_py")]
    return 0 if all(d <= family.tolerance for d in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
