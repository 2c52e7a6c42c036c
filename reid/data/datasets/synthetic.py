"""The built-in synthetic dataset: generated on first use, cached in Market-1501 layout.

``root/synthetic/<key>/`` holds ``bounding_box_train/``, ``query/``, ``bounding_box_test/``
(names like ``0001_c1s1_000001_00.jpg``) and ``meta.json`` with the generation parameters.
The key spells out every parameter plus a hash (and the renderer version), so changing any of
them generates a new folder and never reuses a stale one. Generation writes into a temporary
sibling folder and renames it into place at the end, so an interrupted run leaves no half
dataset behind (only a ``.tmp-*`` folder that can be deleted).

Split: identities 1..N_train are the training set; N_train+1..N_train+N_test are the test
identities. Every identity is seen by a random subset of 2..num_cameras cameras, with
``images_per_camera`` images in each. For a test identity, the first image of each camera it
appears in is a query and the rest go to the gallery, so every query has same-identity gallery
images in other cameras (and same-camera ones, which the Market-1501 protocol ignores).
``num_distractors`` single images of other people (pid 0) are added to the gallery.

``object_type`` (DATASETS.SYNTHETIC.OBJECT) "vehicle" draws vehicles instead of people
(synthetic_vehicle.py; a square IMAGE_SIZE such as [64, 64] suits them), with the same plan,
cameras and layout; the people's images and folder names do not change with it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from reid.utils.file_io import build_folder_atomically

from .base import DATASET_REGISTRY, DatasetNotFoundError, ReIDDataset
from .market_style import SUBDIRS, load_market_splits
from .synthetic_render import RENDER_VERSION, STYLES, render_image, sample_cameras, sample_identity
from .synthetic_vehicle import VEHICLE_RENDER_VERSION, render_vehicle, sample_vehicle

META_FILE = "meta.json"
JPEG_QUALITY = 95
#: What the images show (DATASETS.SYNTHETIC.OBJECT).
OBJECTS = ("person", "vehicle")


@dataclass(frozen=True)
class SyntheticParams:
    """Everything that determines the generated images."""

    num_train_ids: int = 100
    num_test_ids: int = 100
    num_cameras: int = 6
    images_per_camera: int = 5
    num_distractors: int = 100
    seed: int = 0
    image_size: Tuple[int, int] = (128, 64)
    style: str = "demo"
    object_type: str = "person"

    def validate(self) -> None:
        if self.object_type not in OBJECTS:
            raise ValueError(f"Synthetic dataset: unknown object {self.object_type!r} (DATASETS.SYNTHETIC.OBJECT); "
                             f"valid: {', '.join(OBJECTS)}.")
        if self.style not in STYLES:
            raise ValueError(f"Synthetic dataset: unknown style {self.style!r} (DATASETS.SYNTHETIC.STYLE); "
                             f"valid: {', '.join(STYLES)}.")
        checks = [
            (self.num_train_ids >= 1, "num_train_ids (DATASETS.SYNTHETIC.NUM_TRAIN_IDS) must be >= 1"),
            (self.num_test_ids >= 1, "num_test_ids (DATASETS.SYNTHETIC.NUM_TEST_IDS) must be >= 1"),
            (self.num_cameras >= 2, "num_cameras (DATASETS.SYNTHETIC.NUM_CAMERAS) must be >= 2: "
             "every identity is seen by at least two cameras"),
            (self.images_per_camera >= 2, "images_per_camera (DATASETS.SYNTHETIC.IMAGES_PER_CAMERA) must be "
             ">= 2: one query and at least one gallery image per camera"),
            (self.num_distractors >= 0, "num_distractors must be >= 0"),
            (self.image_size[0] >= 32 and self.image_size[1] >= 16,
             f"image_size (DATASETS.SYNTHETIC.IMAGE_SIZE) must be at least [32, 16], got {list(self.image_size)}"),
        ]
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"Synthetic dataset: {msg}.")

    def as_dict(self) -> dict:
        """The parameters, without ``object_type`` for people (so their folders and meta.json stay
        what they were before vehicles existed); vehicles add their renderer's version."""
        params = asdict(self)
        if self.object_type == "person":
            del params["object_type"]
        else:
            params["object_type"] = [self.object_type, VEHICLE_RENDER_VERSION]
        return params

    def key(self) -> str:
        """Folder name: readable parameters plus a hash of all of them and the renderer version."""
        params = self.as_dict()
        if self.style == "demo":  # the demo's folders keep the names they had before styles existed
            del params["style"]
        else:  # a retuned style must not reuse images drawn with its old settings
            style = asdict(STYLES[self.style])
            # options added later are hashed only where used, so older styles keep their folders
            for added in ("fixed_views", "open_jackets"):
                if not style[added]:
                    del style[added]
            params["style"] = [self.style, style]
        blob = json.dumps({**params, "render_version": RENDER_VERSION}, sort_keys=True)
        digest = hashlib.sha1(blob.encode()).hexdigest()[:8]
        h, w = self.image_size
        style = ("" if self.style == "demo" else f"_{self.style}") + ("" if self.object_type == "person" else "_vehicle")
        return (f"s{self.seed}{style}_ids{self.num_train_ids}+{self.num_test_ids}_cam{self.num_cameras}"
                f"_k{self.images_per_camera}_d{self.num_distractors}_{h}x{w}_v{RENDER_VERSION}_{digest}")


@dataclass(frozen=True)
class _Job:
    subdir: str
    fname: str
    pid: int  # 0 for distractors
    cam: int  # 0-based
    seed: Tuple[int, ...]  # image seed (also picks the identity spec)


def plan_images(p: SyntheticParams) -> List[_Job]:
    """Which image goes where; a pure function of the parameters (no drawing)."""
    jobs: List[_Job] = []
    frame = 0
    for pid in range(1, p.num_train_ids + p.num_test_ids + 1):
        rng = np.random.default_rng([p.seed, 3, pid])
        m = int(rng.integers(2, p.num_cameras + 1))
        cams = np.sort(rng.choice(p.num_cameras, m, replace=False))
        for cam in cams.tolist():
            for k in range(p.images_per_camera):
                frame += 1
                if pid <= p.num_train_ids:
                    sub = "bounding_box_train"
                else:
                    sub = "query" if k == 0 else "bounding_box_test"
                fname = f"{pid:04d}_c{cam + 1}s1_{frame:06d}_{k:02d}.jpg"
                jobs.append(_Job(sub, fname, pid, cam, (p.seed, 4, pid, cam, k)))
    rng = np.random.default_rng([p.seed, 5])
    for j, cam in enumerate(rng.integers(0, p.num_cameras, p.num_distractors).tolist()):
        frame += 1
        jobs.append(_Job("bounding_box_test", f"0000_c{cam + 1}s1_{frame:06d}_00.jpg", 0, cam, (p.seed, 6, j)))
    return jobs


def write_jpeg(path: str, rgb: np.ndarray, quality: int = JPEG_QUALITY) -> None:
    """Save a uint8 RGB image as a JPEG (the same bytes for the same pixels)."""
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise OSError(f"could not encode {path}")
    buf.tofile(path)


def _log(msg: str, verbose: bool) -> None:
    if verbose:
        print(f"[synthetic] {msg}", file=sys.stderr, flush=True)


def generate(folder: str, p: SyntheticParams, verbose: bool = True) -> Dict[str, int]:
    """Render the dataset described by `p` into `folder` (which must not exist); returns counts."""
    jobs = plan_images(p)
    style = STYLES[p.style]
    cams = sample_cameras(p.seed, p.num_cameras, style)
    identities: Dict[Tuple[int, ...], object] = {}
    for sub in SUBDIRS:
        os.makedirs(os.path.join(folder, sub))
    start = time.time()
    step = max(1, len(jobs) // 10)
    for i, job in enumerate(jobs):
        # Distractors are one-off people: their identity comes from the image seed.
        ident_key = (p.seed, 1, job.pid) if job.pid > 0 else (p.seed, 7) + job.seed[2:]
        ident = identities.get(ident_key)
        if ident is None:
            sample = sample_vehicle if p.object_type == "vehicle" else sample_identity
            ident = identities[ident_key] = sample(np.random.default_rng(list(ident_key)), style)
        if p.object_type == "vehicle":
            img = render_vehicle(ident, cams[job.cam], np.random.default_rng(list(job.seed)), p.image_size)
        else:
            img = render_image(ident, cams[job.cam], np.random.default_rng(list(job.seed)), p.image_size,
                               style.open_jackets)
        write_jpeg(os.path.join(folder, job.subdir, job.fname), img)
        if (i + 1) % step == 0 or i + 1 == len(jobs):
            _log(f"rendered {i + 1}/{len(jobs)} images ({time.time() - start:.1f} s)", verbose)
    counts = {sub: sum(j.subdir == sub for j in jobs) for sub in SUBDIRS}
    meta = {"params": p.as_dict(), "render_version": RENDER_VERSION, "counts": counts,
            "seconds": round(time.time() - start, 2)}
    with open(os.path.join(folder, META_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    return counts


def ensure_generated(root: str, p: SyntheticParams, verbose: bool = True) -> str:
    """Folder of the dataset for `p` under ``root/synthetic``, generating it when absent."""
    p.validate()
    parent = os.path.join(root, "synthetic")
    final = os.path.join(parent, p.key())
    meta_path = os.path.join(final, META_FILE)
    if os.path.isfile(meta_path):
        return final
    if os.path.exists(final):
        raise DatasetNotFoundError(
            f"Synthetic dataset folder {final!r} exists but has no {META_FILE} (it was not made by this "
            f"generator, or was edited). Delete the folder and it will be generated again."
        )
    _log(f"generating {final} (first use; cached afterwards)", verbose)
    # Another process that finishes the same dataset first made an identical one.
    build_folder_atomically(final, lambda tmp: generate(tmp, p, verbose), META_FILE)
    return final


@DATASET_REGISTRY.register("synthetic")
class SyntheticDataset(ReIDDataset):
    """Procedurally drawn people (or vehicles), generated on first use (see the module docstring).

    Args:
        root: dataset root; the images go to ``root/synthetic/<key>/``.
        num_train_ids, num_test_ids, num_cameras, images_per_camera, seed, image_size: as in
            DATASETS.SYNTHETIC.*; ``image_size`` is ``(height, width)``.
        num_distractors: pid-0 gallery images; None or a negative value = ``num_test_ids``.
        verbose: print generation progress to stderr.
        style: DATASETS.SYNTHETIC.STYLE, "demo", "shift" or "views" (other domains, see
            ``synthetic_render.RenderStyle``).
        object_type: DATASETS.SYNTHETIC.OBJECT, "person" or "vehicle" (what the images show).
    """

    name = "synthetic"
    #: pid 0 marks one-off distractor people (a different person in every image).
    distractor_pids = (0,)

    def __init__(
        self,
        root: str = "datasets",
        num_train_ids: int = 100,
        num_test_ids: int = 100,
        num_cameras: int = 6,
        images_per_camera: int = 5,
        num_distractors: Optional[int] = None,
        seed: int = 0,
        image_size: Sequence[int] = (128, 64),
        verbose: bool = True,
        style: str = "demo",
        object_type: str = "person",
    ) -> None:
        if num_distractors is None or num_distractors < 0:
            num_distractors = num_test_ids
        self.params = SyntheticParams(int(num_train_ids), int(num_test_ids), int(num_cameras),
                                      int(images_per_camera), int(num_distractors), int(seed),
                                      (int(image_size[0]), int(image_size[1])), str(style), str(object_type))
        self.dataset_dir = ensure_generated(root, self.params, verbose)
        super().__init__(*load_market_splits(self.dataset_dir, self.params.num_cameras))
