"""The Python API for features: load a trained model in one call, feed it images or arrays.

    from reid.inference import Predictor
    predictor = Predictor.from_run("output/market_r50_circle")
    feats, paths = predictor.extract("crops/")          # folder, list file or image paths
    feats = predictor.extract_arrays([rgb_uint8_image])  # H x W x 3 RGB arrays

A model with SIE (``predictor.uses_camids``) also needs each image's camera id: ``camids=`` of
``extract_paths`` / ``extract_arrays``, or ``path pid camid`` lines of a list file for ``extract``.

Features are float32 numpy arrays ``[N, D]``, L2-normalised (cosine similarity is a dot
product), computed exactly as the evaluator computes them: test transform (resize to
``INPUT.SIZE_TEST``), raw pixels into the model, optional flip averaging (``TEST.FLIP``).
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from yacs.config import CfgNode

from reid.data.image_io import read_image
from reid.data.sources import collect_entries
from reid.data.transforms import build_transforms
from reid.evaluation.extract import autocast_context, check_feature_batch
from reid.export.camera_ids import NO_CAMIDS, check_camids
from reid.export.options import is_exported_file
from reid.export.identity import file_hash, weights_hash
from reid.modeling import camera_count
from reid.utils.device import resolve_device, torch_threads

from .backends import ExportedRuntime, build_runtime, file_backend, file_runtime
from .loading import (
    build_inference_model,
    config_for_exported,
    config_from_checkpoint,
    config_from_file,
    config_from_run,
    resolve_model,
)
from .options import BACKEND_NAMES

PathLike = Union[str, "os.PathLike[str]"]
# Called after every batch with (images done, images in total), e.g. to draw a progress bar.
ProgressFn = Callable[[int, int], None]
ArrayImages = Union[np.ndarray, Sequence[np.ndarray]]


class _ImageFiles(Dataset):
    """Read and test-transform image files; workers of a DataLoader call it in parallel."""

    def __init__(self, paths: Sequence[str], transform: Callable[[np.ndarray], torch.Tensor]) -> None:
        self.paths = list(paths)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.transform(read_image(self.paths[i]))


def _as_image_list(images: ArrayImages) -> List[np.ndarray]:
    """Validate arrays: each ``H x W x 3`` uint8 RGB (a 4-d array is a batch of them)."""
    if isinstance(images, np.ndarray):
        if images.ndim == 4:
            images = list(images)
        elif images.ndim == 3:
            images = [images]
        else:
            raise ValueError(
                f"Expected an H x W x 3 RGB image or an N x H x W x 3 batch, got an array of shape "
                f"{images.shape}."
            )
    out = []
    for i, img in enumerate(images):
        img = np.asarray(img)
        if img.ndim != 3 or img.shape[2] != 3:
            raise ValueError(
                f"Image {i} has shape {img.shape}; expected H x W x 3 (RGB, channels last). "
                "Convert grey or RGBA images to RGB first."
            )
        if img.dtype != np.uint8:
            raise ValueError(
                f"Image {i} has dtype {img.dtype}; expected uint8 RGB pixels 0-255 "
                "(e.g. np.clip(img, 0, 255).astype(np.uint8))."
            )
        out.append(img)
    if not out:
        raise ValueError("No images given: pass at least one H x W x 3 uint8 array.")
    return out


class Predictor:
    """Batched, L2-normalised features from a trained model: a checkpoint's or an exported file's.

    Build it with :meth:`from_run`, :meth:`from_config`, :meth:`from_checkpoint` or
    :meth:`from_exported`, or wrap a model you already have (``Predictor(model, cfg)``; the model
    must follow the raw-pixel contract). `batch_size`, `flip` and `amp` default to
    ``TEST.IMS_PER_BATCH``, ``TEST.FLIP`` and ``TEST.AMP``; `num_workers` reader processes decode
    image files (0 = in this process).

    `exported` (a ``tools/export.py`` file) runs that file instead of the model's weights: checked
    against `model` (its weights identity, input size, camera ids) when one is given, on its own
    when `model` is None (its record then supplies the input size, cameras and identity). `backend`
    "onnxruntime" or "openvino" runs an ONNX file on the CPU (the model's, exported when the
    predictor is built, when no file is given), "torch" the weights (or a ``.pt2`` program); None:
    "torch" for a model, the file's own otherwise (``reid.inference.backends``). `precision` (fp32,
    fp16, int8) is the file's arithmetic: checked against what a given file records, or the
    precision the model is exported at (fp16; int8 files come from ``tools/export.py
    --calibration``). The torch backend computes in fp32 (``TEST.AMP`` for bf16/fp16 autocast).
    `runtime` is an exported file already opened (:meth:`from_exported`).
    """

    def __init__(
        self,
        model: Optional[nn.Module],
        cfg: CfgNode,
        device: Optional[Union[str, torch.device]] = None,
        batch_size: Optional[int] = None,
        flip: Optional[bool] = None,
        amp: Optional[str] = None,
        num_workers: int = 0,
        backend: Optional[str] = None,
        exported: Optional[PathLike] = None,
        precision: Optional[str] = None,
        runtime: Optional[ExportedRuntime] = None,
    ) -> None:
        exported = runtime.path if runtime is not None else os.fspath(exported) if exported else None
        if model is None and not exported:
            raise ValueError("A Predictor needs a model or an exported file (exported=...).")
        self.cfg = cfg
        self.device = resolve_device("cpu" if model is None else cfg.MODEL.DEVICE if device is None else str(device))
        self.model = model.to(self.device).eval() if model is not None else None
        self.batch_size = int(batch_size or cfg.TEST.IMS_PER_BATCH)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}.")
        self.flip = bool(cfg.TEST.FLIP if flip is None else flip)
        self.amp = str(cfg.TEST.AMP if amp is None else amp)
        autocast_context(self.device, self.amp)  # validates the mode now, not at the first batch
        self.num_workers = int(num_workers)
        if backend is not None and str(backend).lower() not in BACKEND_NAMES:
            raise ValueError(f"Unknown inference backend {backend!r}. Valid names: {', '.join(BACKEND_NAMES)}.")
        self.backend = file_backend(exported, backend) if exported else str(backend or "torch").lower()
        self._runtime: Optional[ExportedRuntime] = None
        self._weights_sha256: Optional[str] = None
        self._exported_sha256: Optional[str] = None
        if self.backend == "torch" and not exported and precision not in (None, "fp32"):
            raise ValueError(f"The torch backend runs the fp32 weights; {precision} files run with backend onnxruntime "
                             f"or openvino (tools/extract.py --backend onnxruntime --precision {precision}), and "
                             "TEST.AMP bf16 computes in bf16 with PyTorch.")
        if self.backend != "torch" or exported:
            if self.flip:
                raise ValueError(f"TEST.FLIP True averages unnormalised features, which the exported model does not "
                                 f"return; set TEST.FLIP False, or use the torch backend on the weights instead.")
            if model is None:
                self._runtime = runtime or file_runtime(exported, self.backend, precision)
                size = tuple(int(s) for s in cfg.INPUT.SIZE_TEST)
                if size != self._runtime.file.input_size:
                    raise ValueError(f"{exported} takes {self._runtime.file.input_size[0]}x"
                                     f"{self._runtime.file.input_size[1]} images, the config resizes to {size[0]}x"
                                     f"{size[1]} (INPUT.SIZE_TEST); leave INPUT.SIZE_TEST out (the file's size is used).")
            else:
                self._runtime = build_runtime(self.backend, self.model, self.input_size, exported,
                                              weights=str(cfg.MODEL.WEIGHTS), precision=precision)
            if self._runtime.identity is not None:  # checked equal to the model's: no need to hash it again
                self._weights_sha256 = self._runtime.identity["weights_sha256"]
        self.transform = build_transforms(cfg, is_train=False)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_run(cls, run_dir: PathLike, weights: Optional[PathLike] = None,
                 opts: Optional[Sequence[Any]] = None, **kwargs: Any) -> "Predictor":
        """Load ``<run_dir>/config.yaml`` and the run's result (``model_best.pth`` of a run that
        selected on a validation split, else ``model_final.pth``), or `weights`.

        `opts` are ``KEY VALUE`` config overrides (e.g. ``["TEST.FLIP", True]``); other
        keyword arguments go to the constructor (device, batch_size, flip, amp, num_workers).
        """
        cfg, weights = config_from_run(run_dir, weights, opts)
        return cls(build_inference_model(cfg, weights, kwargs.get("device")), cfg, **kwargs)

    @classmethod
    def from_config(cls, config_file: PathLike, weights: PathLike,
                    opts: Optional[Sequence[Any]] = None, **kwargs: Any) -> "Predictor":
        """Load a model from a YAML config and a weights file (a checkpoint of that config)."""
        cfg = config_from_file(config_file, weights, opts)
        return cls(build_inference_model(cfg, weights, kwargs.get("device")), cfg, **kwargs)

    @classmethod
    def from_checkpoint(cls, weights: PathLike, opts: Optional[Sequence[Any]] = None,
                        **kwargs: Any) -> "Predictor":
        """Load a model from a checkpoint alone, using the config stored inside it."""
        cfg = config_from_checkpoint(weights, opts)
        return cls(build_inference_model(cfg, weights, kwargs.get("device")), cfg, **kwargs)

    @classmethod
    def from_exported(cls, path: PathLike, opts: Optional[Sequence[Any]] = None, **kwargs: Any) -> "Predictor":
        """Run an exported file (``tools/export.py``: ``.onnx``, ``.pt2``, any precision) on its own: its
        record supplies the input size, cameras and weights identity; `opts` are ``KEY VALUE`` overrides
        of the rest (batch size, device of the image reading). Keyword arguments as the constructor's
        (backend: onnxruntime or openvino for ONNX; precision: checked against the file's)."""
        runtime = file_runtime(os.fspath(path), kwargs.pop("backend", None), kwargs.pop("precision", None))
        return cls(None, config_for_exported(runtime.file, opts), backend=runtime.file.runtime, runtime=runtime, **kwargs)

    # ------------------------------------------------------------------ properties
    @property
    def feature_dim(self) -> int:
        """Width D of the features."""
        return int(self.model.feature_dim if self.model is not None else self._runtime.file.feature_dim)

    @property
    def uses_camids(self) -> bool:
        """Whether the model's features need each image's camera id (SIE)."""
        return self.num_cameras > 0 if self.model is not None else self._runtime.file.needs_camids

    @property
    def num_cameras(self) -> Optional[int]:
        """How many camera ids the model knows (0 without SIE; None for an exported file alone that
        takes camera ids but records no count: any non-negative id then)."""
        if self.model is not None:
            return camera_count(self.model)
        return self._runtime.file.num_cameras if self._runtime.file.needs_camids else 0

    @property
    def input_size(self) -> Tuple[int, int]:
        """(height, width) images are resized to (``INPUT.SIZE_TEST``)."""
        h, w = self.cfg.INPUT.SIZE_TEST
        return int(h), int(w)

    @property
    def weights_sha256(self) -> Optional[str]:
        """The identity of the model's weights: the hash of its state (``reid.export.identity``),
        the same for the same weights whatever file they came from (computed once); for an exported
        file alone, the identity it records (None when it records none)."""
        if self._weights_sha256 is None and self.model is not None:
            self._weights_sha256 = weights_hash(self.model)
        return self._weights_sha256

    @property
    def precision(self) -> str:
        """The arithmetic features are made with: fp32 for PyTorch, else the exported file's."""
        return getattr(self._runtime, "precision", "fp32")

    @property
    def file_record(self) -> Dict[str, Any]:
        """The ``circle_reid`` record of the exported file the predictor runs ({} for none)."""
        return self._runtime.file.record if self._runtime is not None else {}

    @property
    def exported_model(self) -> Optional[Any]:
        """The opened exported file the predictor runs (:class:`reid.export.exported.ExportedModel`), else None."""
        return getattr(self._runtime, "file", None)

    @property
    def exported(self) -> Optional[str]:
        """The exported file a backend other than torch runs when one was given, else None."""
        return getattr(self._runtime, "path", None)

    # ------------------------------------------------------------------ extraction
    def describe(self) -> Dict[str, str]:
        """Strings that identify how features were made (stored with a gallery, compared on search).

        ``weights`` is the weights file, ``weights_sha256`` the identity of the weights themselves
        (so a search notices weights replaced under the same name). With a given exported file,
        ``exported`` and ``exported_sha256`` name it; when it records no weights identity (exported
        before identities were written) nothing shows it holds these weights, so ``weights`` names
        the exported file instead and no ``weights_sha256`` is claimed. An exported file run on its own
        names the weights file it records; its architecture is not recorded ("exported file").
        """
        h, w = self.input_size
        alone = self.model is None
        weights = (self._runtime.identity or {}).get("weights_file", "") if alone else self.cfg.MODEL.WEIGHTS
        meta = {
            "weights": "" if not weights else str(weights) if alone else os.path.abspath(weights),
            "meta_architecture": "exported file" if alone else str(self.cfg.MODEL.META_ARCHITECTURE),
            "backbone": "exported file" if alone else str(self.cfg.MODEL.BACKBONE.NAME),
            "input_size": f"{h}x{w}",
            "flip": str(self.flip),
            "feature_dim": str(self.feature_dim),
            "precision": self.precision,
        }
        if self.exported:
            if self._exported_sha256 is None:
                self._exported_sha256 = file_hash(self.exported)
            meta.update(exported=os.path.abspath(self.exported), exported_sha256=self._exported_sha256)
            if self._runtime.identity is None:
                meta["weights"] = f"{os.path.abspath(self.exported)} (an exported file that records no weights)"
                return meta
        # Only where claimed: hashing the weights reads every tensor.
        meta["weights_sha256"] = self.weights_sha256
        return meta

    @torch.inference_mode()
    def features_of_batch(self, images: torch.Tensor, paths: Optional[Sequence[str]] = None,
                          camids: Optional[Sequence[int]] = None) -> torch.Tensor:
        """L2-normalised float32 CPU features of a preprocessed ``[B, 3, H, W]`` pixel batch
        (`camids`: the images' camera ids, which a model with SIE needs; others ignore them).

        A NaN/inf or all-zero feature raises BadFeaturesError (naming the image when `paths`
        gives the batch's files).
        """
        cams = None
        if self.uses_camids:
            if camids is None:
                raise ValueError(NO_CAMIDS)
            cams = check_camids(camids, len(images), self.num_cameras, "this model", paths)
        with self._torch_threads():
            if self._runtime is not None:
                f = torch.from_numpy(np.asarray(self._runtime(images, cams), dtype=np.float32))
            else:
                x = images.to(self.device, non_blocking=True)
                extra = {"camids": cams.to(self.device)} if cams is not None else {}
                with autocast_context(self.device, self.amp):
                    f = self.model(x, **extra).float()
                    if self.flip:
                        # torch.flip returns a copy, so `x` stays as given (no in-place mutation).
                        f = (f + self.model(torch.flip(x, dims=[3]), **extra).float()) / 2
            check_feature_batch(f, paths, amp=self.amp)
            return F.normalize(f, dim=1).cpu()

    def _torch_threads(self) -> ContextManager[None]:
        """One torch thread while another runtime computes (:func:`reid.utils.device.torch_threads`):
        torch's work around it is light (resizing, stacking, normalising), and a second thread pool
        spinning beside the runtime's costs it a third; PyTorch itself keeps every thread."""
        other = self._runtime is not None and self._runtime.file.runtime != "torch"
        return torch_threads(1) if other else contextlib.nullcontext()

    def _run(self, batches, total: int, progress: Optional[ProgressFn],
             paths: Optional[Sequence[str]] = None, camids: Optional[Sequence[int]] = None) -> np.ndarray:
        if self.uses_camids:  # all of them, before any image is read: a missing or extra id shifts every later one
            if camids is None:
                raise ValueError(NO_CAMIDS)
            camids = check_camids(camids, total, self.num_cameras, "this model", paths)
        # Filling a preallocated array keeps peak memory at one copy of the features,
        # which matters for galleries of millions of crops.
        out = np.empty((total, self.feature_dim), dtype=np.float32)
        done = 0
        for batch in batches:
            names = paths[done:done + len(batch)] if paths is not None else None
            cams = camids[done:done + len(batch)] if camids is not None else None
            f = self.features_of_batch(batch, names, cams).numpy()
            out[done:done + len(f)] = f
            done += len(f)
            if progress is not None:
                progress(done, total)
        return out

    def extract_paths(self, paths: Sequence[PathLike], progress: Optional[ProgressFn] = None,
                      camids: Optional[Sequence[int]] = None) -> np.ndarray:
        """Features ``[N, D]`` of the image files `paths` (camera ids `camids`, for SIE), in order."""
        paths = [os.fspath(p) for p in paths]
        if not paths:
            raise ValueError("No image paths given: nothing to extract.")
        loader = DataLoader(
            _ImageFiles(paths, self.transform),
            batch_size=self.batch_size,
            shuffle=False,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )
        return self._run(loader, len(paths), progress, paths, camids)

    def extract_arrays(self, images: ArrayImages, progress: Optional[ProgressFn] = None,
                       camids: Optional[Sequence[int]] = None) -> np.ndarray:
        """Features ``[N, D]`` of RGB uint8 arrays (``H x W x 3`` each, any size, or one batch;
        camera ids `camids`, for SIE)."""
        images = _as_image_list(images)
        total = len(images)
        batches = (self._stack(images[i:i + self.batch_size]) for i in range(0, total, self.batch_size))
        return self._run(batches, total, progress, camids=camids)

    def _stack(self, images: List[np.ndarray]) -> torch.Tensor:
        """The test transform of `images`, stacked (see :meth:`_torch_threads`)."""
        with self._torch_threads():
            return torch.stack([self.transform(img) for img in images])

    def extract(self, sources: Union[PathLike, Sequence[PathLike]],
                progress: Optional[ProgressFn] = None) -> Tuple[np.ndarray, List[str]]:
        """Features of every image in `sources` and the image paths, row for row.

        A source is an image file, a folder (searched recursively for image files) or a list
        file with one path per line; see :func:`reid.data.sources.collect_entries`. A model
        with SIE takes the camera ids of ``path pid camid`` lines (every image needs one).
        """
        paths, camids = self.collect(sources)
        return self.extract_paths(paths, progress, camids), paths

    def collect(self, sources: Union[PathLike, Sequence[PathLike]]) -> Tuple[List[str], Optional[np.ndarray]]:
        """The image paths of `sources` (as :meth:`extract` reads them) and, for a model with SIE,
        their camera ids; reads no image, so a source without camera ids fails before any work."""
        entries = collect_entries(sources)
        if not self.uses_camids:
            return entries.paths, None
        camids = entries.label_arrays()[1]
        if camids is None:
            raise ValueError(NO_CAMIDS)
        return entries.paths, camids


def load_predictor(
    run: Optional[PathLike] = None,
    config_file: Optional[PathLike] = None,
    weights: Optional[PathLike] = None,
    opts: Optional[Sequence[Any]] = None,
    **kwargs: Any,
) -> Predictor:
    """One call for every way of naming a trained model (the tools' ``--run`` / ``--weights`` /
    ``--config-file``; :func:`reid.inference.loading.resolve_model` says how each is read).

    * `run`: a training run folder (config.yaml + its result, model_best.pth or
      model_final.pth; or `weights`);
    * `config_file` and `weights` (or ``MODEL.WEIGHTS`` in `opts`): a YAML config and a
      checkpoint of it; a run's config.yaml alone takes the weights next to it;
    * `weights` alone: a checkpoint that stores its config (every tools/train.py checkpoint).

    `weights` may be an exported file (``.onnx``, ``.pt2``): alone it runs on its own
    (:meth:`Predictor.from_exported`); with `run` or `config_file` it runs instead of that model's
    checkpoint, checked against its weights identity. `opts` are ``KEY VALUE`` overrides; other
    keyword arguments go to :class:`Predictor`.
    """
    if weights is not None and is_exported_file(weights):
        if kwargs.get("exported"):
            raise ValueError(f"Two exported files given: {os.fspath(weights)} and {os.fspath(kwargs['exported'])}; "
                             "name one of them.")
        if run is None and config_file is None:
            return Predictor.from_exported(weights, opts, **kwargs)
        kwargs["exported"], weights = weights, None
    cfg, weights = resolve_model(run, config_file, weights, opts)
    return Predictor(build_inference_model(cfg, weights, kwargs.get("device")), cfg, **kwargs)


__all__ = ["Predictor", "ProgressFn", "load_predictor"]
