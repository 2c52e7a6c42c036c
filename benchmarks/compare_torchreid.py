"""Proof that torchreid checkpoints give torchreid's own features in this toolkit.

For each architecture (OSNet x1.0 / x0.75 / x0.5 / x0.25, OSNet-IBN x1.0, OSNet-AIN x1.0 /
x0.25, ResNet50 and ResNet50-fc512) the script

1. writes seeded synthetic person crops of mixed sizes (smaller and larger than the model's
   input, so the resize enlarges and shrinks) as JPEG files;
2. builds torchreid's own model with torchreid's code (the ``torchreid`` 0.2.5 package, run in
   a separate Python environment: ``--torchreid-python``), fills every tensor with seeded
   synthetic weights (BatchNorm statistics and InstanceNorm parameters included, so that
   nothing stays at an identity initialisation), saves it with torchreid's
   ``save_checkpoint`` as its training engine does (``{"state_dict", "epoch", "rank1" (a numpy
   float), "optimizer"}``), and computes the features of the image files with torchreid's
   ``FeatureExtractor`` (Pillow reading and resizing, ToTensor, Normalize, the model in eval
   mode). For osnet_x0_25 it also writes a file as the model zoo's are: a bare state dict with
   DataParallel's ``module.`` prefix in torch's legacy serialization;
3. loads those files here through ``MODEL.WEIGHTS`` (``reid.engine.checkpoint_files``, this
   toolkit's test transform) and through ``tools/extract.py --config-file CFG --weights FILE``
   on the same files, with the torchreid config of the architecture;
4. records the largest absolute feature difference and the smallest per-image cosine, and,
   as a check that the comparison can fail, the difference with OpenCV's resize
   (``INPUT.INTERPOLATION cv2``) instead of Pillow's.

Run it with this repository's environment; torchreid's part runs in a subprocess:

    python benchmarks/compare_torchreid.py --torchreid-python /path/to/torchreid-env/bin/python

``--fixture tests/fixtures/torchreid_reference.npz`` also writes the CI fixture (4 small PNG
crops per architecture at 128x64 input, no weights: the tests rebuild the weights and crops
from the seeds below). torchreid 0.2.5 reads its own checkpoints with ``torch.load``'s
default, which is ``weights_only=True`` since torch 2.6 and refuses the numpy ``rank1`` that
its engine stores; the reference subprocess therefore runs with torch's documented switch
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (this toolkit reads the same files with
``weights_only=True``). Nothing of torchreid is patched.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List, Mapping, Sequence, Tuple

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare_fastreid as shared  # noqa: E402  (seeded generators, synthetic images, compare())

_FAMILY = "configs/Market1501/{}_torchreid.yml"
_BASE = "configs/Base-torchreid.yml"

#: name -> this repository's config (+ overrides) for torchreid's model of that name.
ARCHS: Dict[str, Dict[str, object]] = {
    **{name: {"config": _FAMILY.format(name), "opts": []}
       for name in ("osnet_x1_0", "osnet_x0_75", "osnet_x0_5", "osnet_x0_25", "osnet_ibn_x1_0", "osnet_ain_x1_0")},
    "osnet_ain_x0_25": {"config": _FAMILY.format("osnet_ain_x1_0"), "opts": ["MODEL.BACKBONE.NAME", "osnet_ain_x0_25"]},
    "resnet50": {"config": _BASE, "opts": ["MODEL.BACKBONE.NAME", "resnet50", "MODEL.BACKBONE.LAST_STRIDE", 2,
                                           "MODEL.HEADS.FC_DIM", 0]},
    "resnet50_fc512": {"config": _BASE, "opts": ["MODEL.BACKBONE.NAME", "resnet50", "MODEL.BACKBONE.LAST_STRIDE", 1]},
}
#: The architectures the issue's 1e-5 criterion names.
REQUIRED = ("osnet_x1_0", "osnet_x0_25", "osnet_ibn_x1_0", "osnet_ain_x1_0")
TOLERANCE = 1e-5

WEIGHT_SEED = 2026
IMAGE_SEED = 13
NUM_CLASSES = 16
#: (input size, crop sizes, file type): the full comparison and the CI fixture.
FULL = ((256, 128), [(128, 64), (256, 128), (300, 110), (400, 160), (160, 60), (96, 48), (350, 140), (200, 90)], "jpg")
SMALL = ((128, 64), [(128, 64), (300, 110), (90, 40), (200, 90)], "png")
ZOO_FILE = ("osnet_x0_25", "osnet_x0_25_zoo_style.pt")


# ------------------------------------------------------------------ shared synthesis (torch only)
def synthesize_tensor(key: str, shape: Sequence[int], seed: int = WEIGHT_SEED) -> torch.Tensor:
    """A seeded value for torchreid state-dict entry `key` that keeps activations in range.

    Convolutions and the fc Linear get He-scaled normal weights, the classifier small ones;
    norm statistics and affine parameters are drawn around their usual values, the last
    norm of each residual branch smaller so that the residual sums stay bounded.
    """
    gen = shared._generator(seed, key)
    shape = tuple(int(s) for s in shape)
    name = key.rsplit(".", 1)[-1]
    if name == "num_batches_tracked":
        return torch.tensor(int(torch.randint(1, 10_000, (1,), generator=gen)), dtype=torch.long)
    if name == "running_mean":
        return 0.1 * torch.randn(shape, generator=gen)
    if name == "running_var":
        return shared._uniform(shape, 0.5, 1.5, gen)
    if name == "weight" and len(shape) == 4:
        fan_in = shape[1] * shape[2] * shape[3]
        return torch.randn(shape, generator=gen) * (2.0 / fan_in) ** 0.5
    if name == "weight" and len(shape) == 2:
        if key.startswith("classifier."):
            return 0.01 * torch.randn(shape, generator=gen)
        return torch.randn(shape, generator=gen) * (2.0 / shape[1]) ** 0.5
    if name == "weight":
        residual_end = key.endswith((".conv3.bn.weight", ".bn3.weight", ".IN.weight"))
        return shared._uniform(shape, 0.1, 0.4, gen) if residual_end else shared._uniform(shape, 0.5, 1.0, gen)
    if name == "bias":
        return 0.1 * torch.randn(shape, generator=gen)
    raise ValueError(f"no synthesis rule for {key} {shape}")


def synthesize_state(layout: Sequence[Tuple[str, Sequence[int]]], seed: int = WEIGHT_SEED) -> Dict[str, torch.Tensor]:
    """A full state dict from ``(key, shape)`` pairs, in that order."""
    return {key: synthesize_tensor(key, shape, seed) for key, shape in layout}


def synthesize_crops(sizes: Sequence[Tuple[int, int]], seed: int = IMAGE_SEED) -> List[np.ndarray]:
    """One smooth RGB uint8 ``H x W x 3`` image per size."""
    return [shared.synthesize_images(1, h, w, seed + i)[0].permute(1, 2, 0).numpy() for i, (h, w) in enumerate(sizes)]


def write_crops(folder: str, sizes: Sequence[Tuple[int, int]], ext: str, seed: int = IMAGE_SEED) -> List[str]:
    """The crops of :func:`synthesize_crops` as image files ``00.<ext>``, ``01.<ext>`` ... (sorted order)."""
    import cv2

    os.makedirs(folder, exist_ok=True)
    paths = []
    for i, img in enumerate(synthesize_crops(sizes, seed)):
        path = os.path.join(folder, f"{i:02d}.{ext}")
        if not cv2.imwrite(path, np.ascontiguousarray(img[:, :, ::-1])):  # RGB -> BGR file order
            raise OSError(f"could not write {path}")
        paths.append(path)
    return paths


# ------------------------------------------------------------------ torchreid side (its own env)
def run_reference(out_dir: str, archs: Sequence[str], size: Tuple[int, int], images: str) -> None:
    """torchreid's part: ``<arch>/model.pth.tar-60`` and ``reference.npz`` in `out_dir`."""
    from torchreid.reid import models
    from torchreid.reid.optim import build_optimizer
    from torchreid.reid.utils import FeatureExtractor, save_checkpoint

    paths = sorted(os.path.join(images, f) for f in os.listdir(images))
    arrays: Dict[str, np.ndarray] = {}
    for name in archs:
        model = models.build_model(name, num_classes=NUM_CLASSES, pretrained=False)
        layout = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
        model.load_state_dict(synthesize_state(layout), strict=True)
        optimizer = build_optimizer(model, optim="amsgrad", lr=0.0015)
        # As torchreid's engine saves after an evaluation: rank1 is a numpy float there.
        save_checkpoint({"state_dict": model.state_dict(), "epoch": 60, "rank1": np.float32(0.5),
                         "optimizer": optimizer.state_dict()}, os.path.join(out_dir, name))
        if name == ZOO_FILE[0]:
            zoo = torch.nn.DataParallel(model).state_dict()  # the "module." prefix of multi-GPU training
            torch.save(zoo, os.path.join(out_dir, ZOO_FILE[1]), _use_new_zipfile_serialization=False)
        extractor = FeatureExtractor(model_name=name, model_path=os.path.join(out_dir, name, "model.pth.tar-60"),
                                     image_size=size, device="cpu", verbose=False)
        feats = extractor(paths).numpy().astype(np.float32)
        arrays[f"{name}/features"] = feats
        arrays[f"{name}/keys"] = np.array([k for k, _ in layout])
        arrays[f"{name}/shapes"] = np.array(json.dumps([list(s) for _, s in layout]))
        print(f"{name}: torchreid features {feats.shape}", flush=True)
    arrays["size"] = np.array(size)
    np.savez_compressed(os.path.join(out_dir, "reference.npz"), **arrays)


# ------------------------------------------------------------------ our side
def layout_from(reference: Mapping[str, np.ndarray], name: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """torchreid's ``(key, shape)`` layout of `name` stored in a reference file."""
    return shared.layout_from(reference, name)


def arch_opts(name: str, size: Tuple[int, int]) -> list:
    """Config overrides for `name` at input `size` (no ImageNet download, CPU)."""
    return list(ARCHS[name]["opts"]) + ["INPUT.SIZE_TEST", list(size), "MODEL.BACKBONE.PRETRAINED", False,
                                        "MODEL.DEVICE", "cpu"]


def our_features(name: str, weights: str, size: Tuple[int, int], paths: Sequence[str],
                 interpolation: str = "pil_bilinear") -> np.ndarray:
    """Features of this repository's model for `name` on image files: MODEL.WEIGHTS, test transform."""
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.data.image_io import read_image
    from reid.data.transforms import build_transforms
    from reid.engine.checkpoint_files import load_checkpoint
    from reid.modeling import build_model

    opts = arch_opts(name, size) + ["MODEL.HEADS.NUM_CLASSES", NUM_CLASSES, "INPUT.INTERPOLATION", interpolation]
    cfg = load_config(os.path.join(ROOT, ARCHS[name]["config"]), opts)
    model = build_model(cfg)
    load_checkpoint(weights, model=model)
    transform = build_transforms(cfg, is_train=False)
    with torch.no_grad():
        return model.eval()(torch.stack([transform(read_image(p)) for p in paths])).numpy()


def extract_features(name: str, weights: str, size: Tuple[int, int], folder: str, out: str,
                     extra: Sequence[str] = ()) -> np.ndarray:
    """L2-normalised features from ``tools/extract.py --config-file CFG --weights FILE`` on `folder`."""
    sys.path.insert(0, ROOT)
    from reid.cli.extract import main as extract_main

    argv = ["--config-file", os.path.join(ROOT, ARCHS[name]["config"]), "--weights", weights, "--input", folder,
            "--output", out, "--device", "cpu", "--quiet", "--num-workers", "0",
            *[str(v) for v in ARCHS[name]["opts"]], "INPUT.SIZE_TEST", f"[{size[0]},{size[1]}]", *extra]
    if extract_main(argv) != 0:
        raise RuntimeError(f"tools/extract.py failed for {name}")
    with np.load(out) as data:
        return data["feats"]


def _reference(python: str, out: str, archs: Sequence[str], size: Tuple[int, int], images: str) -> Dict[str, np.ndarray]:
    env = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")
    subprocess.run([python, os.path.abspath(__file__), "--reference", "--out", out, "--archs", *archs,
                    "--size", str(size[0]), str(size[1]), "--images", images], check=True, env=env)
    with np.load(os.path.join(out, "reference.npz")) as ref:
        return {k: ref[k] for k in ref.files}


def save_results(out: str, size: Tuple[int, int], sizes: Sequence[Tuple[int, int]], results: Mapping[str, object],
                 fixture: str, reference: Callable[[str, Tuple[int, int], str], Mapping[str, np.ndarray]]) -> None:
    """Write ``results.json`` into `out` and, when `fixture` names a file, the CI fixture: the
    reference project's features (``reference(folder, input size, images folder)``) of the small
    crops (:data:`SMALL`), which the tests rebuild from the seeds."""
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump({"size": list(size), "crop_sizes": sizes, "results": results}, f, indent=2)
    print(f"results: {os.path.join(out, 'results.json')}")
    if fixture:
        small_size, small_sizes, small_ext = SMALL
        small = os.path.join(out, "small")
        write_crops(os.path.join(small, "images"), small_sizes, small_ext)
        np.savez_compressed(fixture, **reference(small, small_size, os.path.join(small, "images")))
        print(f"fixture: {fixture} ({os.path.getsize(fixture) / 1024:.0f} KiB)")


def _line(name: str, label: str, r: Mapping[str, float]) -> str:
    return (f"{name} {label}: max|diff| {r['max_abs_diff']:.2e} min cos {r['min_cosine']:.7f} "
            f"(centred {r['min_centred_cosine']:.7f})")


def add_comparison_arguments(p: argparse.ArgumentParser, archs: Sequence[str]) -> None:
    """The options a comparison script shares: variants, output folder, fixture, and the hidden
    ones of its reference side (the subprocess that runs the other toolkit's code)."""
    p.add_argument("--archs", nargs="+", default=list(archs), choices=list(archs))
    p.add_argument("--out", default="", help="folder for the checkpoints and results (default: a temp folder)")
    p.add_argument("--fixture", default="", help="also write the CI fixture (small PNG crops) to this .npz")
    p.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)  # the reference side
    p.add_argument("--size", nargs=2, type=int, help=argparse.SUPPRESS)
    p.add_argument("--images", help=argparse.SUPPRESS)


def main(argv: Sequence[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torchreid-python", help="python of the environment that has torchreid 0.2.5 installed")
    add_comparison_arguments(p, ARCHS)
    args = p.parse_args(argv)
    if args.reference:
        run_reference(args.out, args.archs, tuple(args.size), args.images)
        return 0
    if not args.torchreid_python:
        p.error("--torchreid-python is required (the environment with torchreid 0.2.5)")
    out = args.out or tempfile.mkdtemp(prefix="compare_torchreid_")
    os.makedirs(out, exist_ok=True)
    size, sizes, ext = FULL
    images = os.path.join(out, "images")
    paths = write_crops(images, sizes, ext)
    reference = _reference(args.torchreid_python, out, args.archs, size, images)
    results = {}
    for name in args.archs:
        weights = os.path.join(out, name, "model.pth.tar-60")
        theirs = reference[f"{name}/features"]
        normed = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
        row = {"dim": int(theirs.shape[1]),
               "model_weights": shared.compare(our_features(name, weights, size, paths), theirs),
               "extract_py": shared.compare(extract_features(name, weights, size, images,
                                                             os.path.join(out, f"{name}.npz")), normed),
               "extract_py_cv2_resize": shared.compare(
                   extract_features(name, weights, size, images, os.path.join(out, f"{name}_cv2.npz"),
                                    ["INPUT.INTERPOLATION", "cv2"]), normed)}
        if name == ZOO_FILE[0]:
            row["zoo_file_extract_py"] = shared.compare(extract_features(
                name, os.path.join(out, ZOO_FILE[1]), size, images, os.path.join(out, f"{name}_zoo.npz")), normed)
        results[name] = row
        for label, r in row.items():
            if label != "dim":
                print(_line(name, label, r), flush=True)
    save_results(out, size, sizes, results, args.fixture,
                 lambda small, small_size, images: _reference(args.torchreid_python, small, args.archs, small_size,
                                                              images))
    checked = [results[n][w]["max_abs_diff"] for n in results for w in ("model_weights", "extract_py")
               if n in REQUIRED]
    return 0 if all(d <= TOLERANCE for d in checked) else 1


if __name__ == "__main__":
    sys.exit(main())
