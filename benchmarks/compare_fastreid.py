"""Proof that fast-reid checkpoints give fast-reid's own features in this toolkit.

For each architecture (BoT R50 / R50-IBN-a, SBS R50 / R50-IBN-a, MGN R50 / R50-IBN-a) the
script

1. builds fast-reid's own model with fast-reid's code (the ``fastreid`` 1.4.0 package, run
   in a separate Python environment: ``--fastreid-python``), fills it with seeded synthetic
   weights (every tensor, BatchNorm statistics and GeM exponents included, so that nothing
   stays at an identity initialisation), saves it with fast-reid's ``Checkpointer`` exactly
   as fast-reid's trainer does, and computes fast-reid's eval-mode features of seeded
   synthetic images;
2. loads that checkpoint file here through ``MODEL.WEIGHTS`` (``reid.engine.checkpoint_files``)
   with this repository's config for the architecture, and through ``tools/extract.py
   --weights`` on the same images written as PNG files;
3. records the largest absolute feature difference and the smallest per-image cosine.

Run it with this repository's environment; fast-reid's part runs in a subprocess, so the
two code bases never share a process:

    python benchmarks/compare_fastreid.py --fastreid-python /path/to/fastreid-env/bin/python

``--fixture tests/fixtures/fastreid_reference.npz`` also writes the small CI fixture (small
images, no weights: the tests rebuild the weights and images from the seeds below and
compare with the features fast-reid produced). Under torch 2.x fast-reid 1.4.0 needs no
code changes for model building and inference; its package is installed with ``--no-deps``
because it pins torchvision 0.14 (see docs/inference.md).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import zlib
from typing import Dict, List, Mapping, Sequence, Tuple

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Smaller inputs for the CI fixture (the stripes and non-local maps keep several rows).
FIXTURE_SIZES = {"bot": (128, 64), "sbs": (192, 64), "mgn": (192, 64)}


def _arch(meta: str, ibn: bool, config: str, opts: Sequence[object] = (), pool: str = "",
          size: Tuple[int, int] = (), fixture_size: Tuple[int, int] = ()) -> Dict[str, object]:
    """fast-reid's settings of BoT ("bot"), SBS ("sbs") or MGN ("mgn") and this repository's config;
    `pool`, `size`, `fixture_size` replace the recipe's pooling layer and input sizes (vehicles)."""
    fastreid = {"depth": "50x", "ibn": ibn, "nl": meta == "sbs", "meta": "MGN" if meta == "mgn" else "Baseline",
                "pool": pool or ("GlobalAvgPool" if meta == "bot" else "GeneralizedMeanPoolingP"),
                "cls": "Linear" if meta == "bot" else "CircleSoftmax", "neck_feat": "before" if meta == "bot" else "after",
                "embedding": 256 if meta == "mgn" else 0}
    return {"fastreid": fastreid, "config": config, "opts": list(opts),
            "size": tuple(size) or ((256, 128) if meta == "bot" else (384, 128)),
            "fixture_size": tuple(fixture_size) or FIXTURE_SIZES[meta]}


#: name -> fast-reid settings (as its Base-bagtricks / Base-SBS / Base-MGN configs), this
#: repository's config (+ overrides), full-size input.
ARCHS: Dict[str, Dict[str, object]] = {
    "bot_R50": _arch("bot", False, "configs/Market1501/bot_resnet50.yml"),
    "bot_R50-ibn": _arch("bot", True, "configs/Market1501/bot_resnet50_ibn.yml"),
    "sbs_R50": _arch("sbs", False, "configs/Market1501/sbs_resnet50.yml"),
    "sbs_R50-ibn": _arch("sbs", True, "configs/Market1501/sbs_resnet50_ibn.yml"),
    "mgn_R50": _arch("mgn", False, "configs/Market1501/mgn_fastreid_resnet50_ibn.yml",
                     ["MODEL.BACKBONE.NAME", "resnet50"]),
    "mgn_R50-ibn": _arch("mgn", True, "configs/Market1501/mgn_fastreid_resnet50_ibn.yml"),
    # Vehicles at 256x256 (fast-reid's configs/VeRi/sbs_R50-ibn.yml and VehicleID/bagtricks_R50-ibn.yml;
    # the latter pools with GeneralizedMeanPooling: p fixed at 3, no tensor in the file).
    "sbs_R50-ibn_veri": _arch("sbs", True, "configs/VeRi/sbs_resnet50_ibn.yml", size=(256, 256),
                              fixture_size=(128, 128)),
    "bot_R50-ibn_vehicleid": _arch("bot", True, "configs/VehicleID/bot_resnet50_ibn.yml",
                                   pool="GeneralizedMeanPooling", size=(256, 256), fixture_size=(128, 128)),
}
WEIGHT_SEED = 2026
IMAGE_SEED = 11
NUM_CLASSES = 16
NUM_IMAGES = {True: 4, False: 8}  # fixture: 4 small images; full comparison: 8


# ------------------------------------------------------------------ shared synthesis (torch only)
def _generator(seed: int, key: str) -> torch.Generator:
    # Per-key seeds: a tensor's values do not depend on the order or number of other keys.
    return torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))


def _uniform(shape: Sequence[int], lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand(tuple(shape), generator=gen)


def synthesize_tensor(key: str, shape: Sequence[int], seed: int = WEIGHT_SEED) -> torch.Tensor:
    """A seeded value for fast-reid state-dict entry `key` that keeps activations in range.

    Convolutions get He-scaled normal weights; BatchNorm statistics and affine parameters
    are drawn around their usual values (the last norm of each residual branch smaller, so
    that 16 residual additions stay bounded); non-local output norms are non-zero (a zero
    norm would make the block the identity and hide its mapping); GeM exponents lie in
    [2.5, 3.5].
    """
    gen = _generator(seed, key)
    shape = tuple(int(s) for s in shape)
    name = key.rsplit(".", 1)[-1]
    if name == "num_batches_tracked":
        return torch.tensor(int(torch.randint(1, 10_000, (1,), generator=gen)), dtype=torch.long)
    if name == "p":
        return _uniform(shape, 2.5, 3.5, gen)
    if name == "running_mean":
        return 0.1 * torch.randn(shape, generator=gen)
    if name == "running_var":
        return _uniform(shape, 0.5, 1.5, gen)
    if name == "weight" and len(shape) == 4:
        fan_in = shape[1] * shape[2] * shape[3]
        return torch.randn(shape, generator=gen) * (2.0 / fan_in) ** 0.5
    if name == "weight" and len(shape) == 2:  # identity classifier
        return 0.01 * torch.randn(shape, generator=gen)
    if name == "weight":
        residual_end = key.endswith((".bn3.weight", ".W.1.weight"))
        return _uniform(shape, 0.1, 0.4, gen) if residual_end else _uniform(shape, 0.5, 1.0, gen)
    if name == "bias":
        return 0.1 * torch.randn(shape, generator=gen)
    raise ValueError(f"no synthesis rule for {key} {shape}")


def synthesize_state(layout: Sequence[Tuple[str, Sequence[int]]], seed: int = WEIGHT_SEED) -> "Dict[str, torch.Tensor]":
    """A full state dict from ``(key, shape)`` pairs, in that order."""
    return {key: synthesize_tensor(key, shape, seed) for key, shape in layout}


def synthesize_images(num: int, height: int, width: int, seed: int = IMAGE_SEED) -> torch.Tensor:
    """`num` different smooth RGB uint8 images ``[num, 3, height, width]`` (0-255)."""
    gen = torch.Generator().manual_seed(seed)
    coarse = torch.rand((num, 3, max(2, height // 16), max(2, width // 16)), generator=gen) * 255.0
    smooth = torch.nn.functional.interpolate(coarse, size=(height, width), mode="bilinear", align_corners=False)
    noise = 12.0 * torch.randn((num, 3, height, width), generator=gen)
    return (smooth + noise).round().clamp(0, 255).to(torch.uint8)


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(((a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))).min())


def compare(ours: np.ndarray, theirs: np.ndarray) -> Dict[str, float]:
    """How close ``[N, D]`` features `ours` are to `theirs`, row by row.

    ``min_cosine`` is the acceptance criterion (>= 0.9999 per image). Features of a network
    with synthetic weights share a large common component (every image's feature points
    roughly the same way), which makes a raw cosine forgiving; ``min_centred_cosine``
    compares the features after subtracting the mean of `theirs` over the images, i.e. how
    well the image-to-image variation is reproduced, and is far more sensitive.
    """
    a, b = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    centre = b.mean(0, keepdims=True)
    return {"max_abs_diff": float(np.abs(a - b).max()), "min_cosine": _min_cosine(a, b),
            "min_centred_cosine": _min_cosine(a - centre, b - centre),
            "feature_norm": float(np.linalg.norm(b, axis=1).mean())}


# ------------------------------------------------------------------ fast-reid side (its own env)
def _fastreid_model(spec: Mapping[str, object]):
    from fastreid.config import get_cfg
    from fastreid.modeling import build_model

    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = spec["meta"]
    cfg.MODEL.BACKBONE.DEPTH = spec["depth"]
    cfg.MODEL.BACKBONE.WITH_IBN = spec["ibn"]
    cfg.MODEL.BACKBONE.WITH_NL = spec["nl"]
    cfg.MODEL.BACKBONE.LAST_STRIDE = 1
    cfg.MODEL.BACKBONE.PRETRAIN = False
    cfg.MODEL.HEADS.POOL_LAYER = spec["pool"]
    cfg.MODEL.HEADS.CLS_LAYER = spec["cls"]
    cfg.MODEL.HEADS.NECK_FEAT = spec["neck_feat"]
    cfg.MODEL.HEADS.EMBEDDING_DIM = spec["embedding"]
    cfg.MODEL.HEADS.WITH_BNNECK = True
    cfg.MODEL.HEADS.NUM_CLASSES = NUM_CLASSES
    cfg.MODEL.DEVICE = "cpu"
    return build_model(cfg)


def run_reference(out_dir: str, archs: Sequence[str], fixture: bool) -> None:
    """fast-reid's part: checkpoints ``<arch>.pth`` and ``reference.npz`` in `out_dir`."""
    from fastreid.utils.checkpoint import Checkpointer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    arrays: Dict[str, np.ndarray] = {}
    for name in archs:
        spec = ARCHS[name]["fastreid"]
        model = _fastreid_model(spec)
        layout = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
        model.load_state_dict(synthesize_state(layout), strict=True)
        model.eval()
        optimizer = torch.optim.Adam(model.parameters(), lr=3.5e-4)
        # As fast-reid's trainer writes them: model, optimizer and the iteration.
        Checkpointer(model, out_dir, optimizer=optimizer).save(name, iteration=1234)
        size = ARCHS[name]["fixture_size"] if fixture else ARCHS[name]["size"]
        images = synthesize_images(NUM_IMAGES[fixture], *size)
        with torch.no_grad():
            # fast-reid normalises its input in place; it gets a float copy (0-255, RGB).
            feats = model(images.float().clone()).numpy().astype(np.float32)
        arrays[f"{name}/features"] = feats
        arrays[f"{name}/keys"] = np.array([k for k, _ in layout])
        arrays[f"{name}/shapes"] = np.array(json.dumps([list(s) for _, s in layout]))
        arrays[f"{name}/size"] = np.array(size)
        print(f"{name}: fast-reid features {feats.shape}", flush=True)
    np.savez_compressed(os.path.join(out_dir, "reference.npz"), **arrays)


# ------------------------------------------------------------------ our side
def layout_from(reference: Mapping[str, np.ndarray], name: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """The fast-reid ``(key, shape)`` layout of `name` stored in a reference file."""
    keys = [str(k) for k in reference[f"{name}/keys"]]
    shapes = json.loads(str(reference[f"{name}/shapes"]))
    return list(zip(keys, [tuple(s) for s in shapes]))


def our_features(name: str, weights: str, size: Tuple[int, int], num: int,
                 num_classes: int = NUM_CLASSES) -> np.ndarray:
    """Eval-mode features of this repository's model for `name`, weights loaded via MODEL.WEIGHTS."""
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.engine.checkpoint_files import load_checkpoint
    from reid.modeling import build_model

    spec = ARCHS[name]
    opts = list(spec["opts"]) + ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.HEADS.NUM_CLASSES", num_classes,
                                 "MODEL.WEIGHTS", weights, "INPUT.SIZE_TEST", list(size)]
    cfg = load_config(os.path.join(ROOT, spec["config"]), opts)
    model = build_model(cfg)
    load_checkpoint(weights, model=model)
    model.eval()
    with torch.no_grad():
        return model(synthesize_images(num, *size)).numpy()


def extract_features(name: str, weights: str, size: Tuple[int, int], num: int, work: str) -> np.ndarray:
    """L2-normalised features from ``tools/extract.py --weights`` on the images saved as PNG."""
    import cv2

    sys.path.insert(0, ROOT)
    from reid.cli.extract import main as extract_main

    folder = os.path.join(work, f"{name}_images")
    os.makedirs(folder, exist_ok=True)
    images = synthesize_images(num, *size).permute(0, 2, 3, 1).numpy()
    for i, img in enumerate(images):
        cv2.imwrite(os.path.join(folder, f"{i:02d}.png"), img[:, :, ::-1])  # RGB -> BGR file order
    out = os.path.join(work, f"{name}.npz")
    spec = ARCHS[name]
    argv = ["--config-file", os.path.join(ROOT, spec["config"]), "--weights", weights, "--input", folder,
            "--output", out, "--device", "cpu", "--quiet", "--num-workers", "0",
            *[str(v) for v in spec["opts"]], "INPUT.SIZE_TEST", f"[{size[0]},{size[1]}]"]
    if extract_main(argv) != 0:
        raise RuntimeError(f"tools/extract.py failed for {name}")
    with np.load(out) as data:
        return data["feats"]


def main(argv: Sequence[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fastreid-python", help="python of the environment that has fastreid 1.4.0 installed")
    p.add_argument("--archs", nargs="+", default=list(ARCHS), choices=list(ARCHS))
    p.add_argument("--out", default="", help="folder for the checkpoints and results (default: a temp folder)")
    p.add_argument("--fixture", default="", help="also write the CI fixture (small images) to this .npz")
    p.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)  # fast-reid's side
    p.add_argument("--small", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reference:
        run_reference(args.out, args.archs, fixture=args.small)
        return 0
    if not args.fastreid_python:
        p.error("--fastreid-python is required (the environment with fastreid 1.4.0)")
    out = args.out or tempfile.mkdtemp(prefix="compare_fastreid_")
    os.makedirs(out, exist_ok=True)
    here = os.path.abspath(__file__)
    subprocess.run([args.fastreid_python, here, "--reference", "--out", out, "--archs", *args.archs], check=True)
    with np.load(os.path.join(out, "reference.npz")) as ref:
        reference = {k: ref[k] for k in ref.files}
    results = {}
    for name in args.archs:
        size = tuple(int(v) for v in reference[f"{name}/size"])
        weights = os.path.join(out, f"{name}.pth")
        theirs = reference[f"{name}/features"]
        num = theirs.shape[0]
        direct = compare(our_features(name, weights, size, num), theirs)
        normed = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
        extracted = compare(extract_features(name, weights, size, num, out), normed)
        results[name] = {"size": list(size), "dim": int(theirs.shape[1]), "model_weights": direct,
                         "extract_py": extracted}
        print(f"{name}: MODEL.WEIGHTS max|diff| {direct['max_abs_diff']:.2e} min cos {direct['min_cosine']:.7f} "
              f"(centred {direct['min_centred_cosine']:.7f}) | extract.py max|diff| "
              f"{extracted['max_abs_diff']:.2e} min cos {extracted['min_cosine']:.7f} "
              f"(centred {extracted['min_centred_cosine']:.7f})", flush=True)
    with open(os.path.join(out, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
    print(f"results: {os.path.join(out, 'results.json')}")
    if args.fixture:
        small = os.path.join(out, "small")
        os.makedirs(small, exist_ok=True)
        subprocess.run([args.fastreid_python, here, "--reference", "--small", "--out", small, "--archs",
                        *args.archs], check=True)
        with np.load(os.path.join(small, "reference.npz")) as ref:
            np.savez_compressed(args.fixture, **{k: ref[k] for k in ref.files})
        print(f"fixture: {args.fixture} ({os.path.getsize(args.fixture) / 1024:.0f} KiB)")
    worst = min(r[w]["min_cosine"] for r in results.values() for w in ("model_weights", "extract_py"))
    return 0 if worst >= 0.9999 else 1


if __name__ == "__main__":
    sys.exit(main())
