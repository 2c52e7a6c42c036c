"""The re-ID model as a tracker uses it: the crops of one frame in, one L2-normalised feature each out.

A tracker hands its appearance model the detections of one frame; embedding them in one batch
is what makes re-ID cheap enough to run per frame (docs/tracking.md). Each frame image is read
once for all its boxes; boxes partly outside the image are clipped to it, as a tracker crops.

A model is named as in every tool (``--weights``, ``--run``, ``--config-file``) and runs through
:class:`reid.inference.predictor.Predictor`: a checkpoint of ours with PyTorch (or ONNX Runtime /
OpenVINO with ``backend``), an exported file (``.onnx`` / ``.pt2`` from ``tools/export.py``) in its
runtime, at the input size it was exported with, in the input convention it records.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq, Tuple

import numpy as np

from reid.config.sie_keys import either_key, sie_node

from .frames import clip_boxes, frame_crops
from .mot_files import MOTRows
from .sequences import Sequence

Progress = Callable[[int, int], None]


@dataclass
class AppearanceModel:
    """One appearance model: ``embed(rgb_crops) -> [N, D]`` float32, rows L2-normalised.

    `label` names it in tables and folders; `identity` says which weights it runs (file,
    hashes, backend) and goes into metrics.json.
    """

    label: str
    input_size: Tuple[int, int]
    feature_dim: int
    identity: Dict[str, Any]
    _features: Callable[[List[np.ndarray]], np.ndarray] = field(repr=False)
    cfg: Any = field(default=None, repr=False)  # a checkpoint's config (MODEL.WEIGHTS): finds its thresholds.json
    predictor: Any = field(default=None, repr=False)  # what computes the features (an exported file's thresholds)
    # the model's own pooling of a tracklet's crops (reid/inference/tracklet_pooling.py); None: hand-set only
    frames: Any = field(default=None, repr=False)
    # True for a model trained on tracklets: its own pooling is the tracking tools' default
    video: bool = False

    @property
    def weights(self) -> Optional[str]:
        """The checkpoint file of a checkpoint's model; None for an exported file."""
        return str(self.cfg.MODEL.WEIGHTS) if self.cfg is not None else None

    def embed(self, crops: List[np.ndarray]) -> np.ndarray:
        """L2-normalised features ``[N, D]`` of RGB uint8 crops (any sizes; resized to :attr:`input_size`)."""
        if not crops:
            return np.zeros((0, self.feature_dim), np.float32)
        feats = np.asarray(self._features(crops), dtype=np.float32)
        norms = np.linalg.norm(feats, axis=1, keepdims=True)
        return feats / np.maximum(norms, 1e-12)


#: Names no model may take: motion only's run folder (reid.tracking.tracker_runs), the tracker's inputs.
RESERVED_LABELS = ("motion_only", "features")


def label_folder(label: str) -> str:
    """The folder name of a run's results: its label with spaces as underscores."""
    return label.replace(" ", "_")


def _label(path: str, taken: Seq[str]) -> str:
    """A short unique name for a model file: its name (checkpoints without .pth, exported files
    with their suffix), prefixed by its folder where the name says nothing (model_final) or repeats;
    unique as a folder name too (:func:`label_folder`), and never a reserved one."""
    name = os.path.basename(path)
    stem = name[:-4] if name.endswith(".pth") else name
    used = {label_folder(t) for t in taken} | set(RESERVED_LABELS)
    if stem in ("model_final", "model_best", "model_interrupted") or label_folder(stem) in used:
        stem = f"{os.path.basename(os.path.dirname(os.path.abspath(path)))}-{stem}"
    label, n = stem, 2
    while label_folder(label) in used:
        label, n = f"{stem}-{n}", n + 1
    return label


def check_input_size(model_size: Seq[int], wanted: Optional[Seq[int]], source: str) -> None:
    """One line when a model's fixed input size is not the crop size the tracker is told to hand over."""
    if wanted is not None and tuple(int(s) for s in wanted) != tuple(int(s) for s in model_size):
        h, w = (int(s) for s in model_size)
        raise ValueError(f"{source} takes {h}x{w} crops (height x width) but --input-size asks for "
                         f"{int(wanted[0])}x{int(wanted[1])}; leave --input-size out (crops are resized to what "
                         f"the model takes), or export the model again with --input-size {int(wanted[0])} {int(wanted[1])}.")


def predictor_model(predictor: Any, label: str, source: str) -> AppearanceModel:
    """A :class:`reid.inference.predictor.Predictor` as an appearance model (a checkpoint's, or an
    exported file's: then no config; its calibration travels in the file)."""
    if predictor.uses_camids:
        # An exported file has no config to say which node its model's SIE key is in.
        key = f"{sie_node(predictor.cfg)[1]}.SIE_CAMERA False" if predictor.model is not None else \
            either_key("SIE_CAMERA", "False")
        raise ValueError(f"{source}: this model uses camera ids (SIE) and a tracker gives image crops only; use a "
                         f"model trained with {key}.")
    identity = {"file": os.path.abspath(source) if predictor.exported else source, "backend": predictor.backend,
                "weights_sha256": predictor.weights_sha256}
    cfg = None
    if predictor.model is not None:
        cfg = predictor.cfg.clone()
        cfg.defrost()
        cfg.TEST.FLIP = bool(predictor.flip)  # the features as extracted: a calibration on flipped ones does not hold
        cfg.freeze()
    from reid.data.build import trained_on_tracklets
    from reid.inference.tracklet_pooling import frame_pooling_of

    frames = frame_pooling_of(predictor)
    return AppearanceModel(label, tuple(predictor.input_size), int(predictor.feature_dim), identity,
                           lambda crops: predictor.extract_arrays(crops), cfg=cfg, predictor=predictor, frames=frames,
                           video=frames is not None and trained_on_tracklets(cfg))


def check_convention(predictor: Any, path: str, named: Optional[str]) -> None:
    """An exported file that records no input convention (another exporter's) runs in a tracker only as
    the user names it (`named`: "raw" or "boxmot"): guessed, every feature could be wrong without a sign."""
    opened = predictor.exported_model
    if opened is None or opened.convention is not None:
        if named is not None and opened is not None and opened.convention != named:
            raise ValueError(f"{path} records its input convention ({opened.convention}); leave --input-convention "
                             f"{named} out.")
        return
    if named is None:
        raise ValueError(f"{path} records no input convention (it was not written by tools/export.py), and a tracker "
                         "would feed it crops it may not expect; name it with --input-convention raw (RGB pixels 0-255) "
                         "or boxmot (RGB / 255 with ImageNet mean and std), or export the model with tools/export.py.")
    opened.assume_convention(named)


def load_appearance_models(weights: Seq[str] = (), run: Optional[str] = None, config_file: Optional[str] = None,
                           opts: Optional[Seq[Any]] = None, device: Optional[str] = None, backend: Optional[str] = None,
                           input_size: Optional[Seq[int]] = None, input_convention: Optional[str] = None,
                           crops: Optional[int] = None, log: Optional[Callable[[str], None]] = None,
                           weight_configs: Optional[Dict[str, str]] = None) -> List[AppearanceModel]:
    """Every model named by the tools' options: each of `weights` (checkpoints or exported files; an
    exported file with `run` / `config_file` runs instead of that run's checkpoint, checked against its
    weights), or one model from `run` / `config_file`. `input_size` (H, W) resizes the crops of
    checkpoints (``INPUT.SIZE_TEST``); an exported file whose fixed size differs is refused. `backend`
    None: each exported file's own runtime, and for checkpoints the runtime
    :func:`reid.inference.backend_choice.auto_backend` picks for `crops` crops to embed (ONNX Runtime on a
    CPU for large jobs, else PyTorch; said through `log`). An exported file that records no input
    convention is refused unless `input_convention` names it (:func:`check_convention`). `weight_configs`
    ({file: config file}) gives some of `weights` a config of their own (published models: each with its
    architecture's), used instead of `config_file`."""
    from reid.export.options import is_exported_file
    from reid.inference.predictor import load_predictor

    size_opts = ["INPUT.SIZE_TEST", [int(s) for s in input_size]] if input_size else []
    models: List[AppearanceModel] = []
    taken: List[str] = []
    for path in list(weights) or [None]:
        own = (weight_configs or {}).get(os.fspath(path)) if path is not None else None
        model_config = own or config_file
        exported = path is not None and is_exported_file(path)
        alone = exported and not (run or model_config)
        model_opts = (list(opts or []) + ([] if alone else size_opts)) or None
        chosen = backend if backend is not None or exported else _auto_backend(run, model_config, path, model_opts,
                                                                               device, crops, log)
        predictor = None
        if chosen == "onnxruntime" and backend is None:
            try:
                predictor = load_predictor(run=run, config_file=model_config, weights=path, opts=model_opts,
                                           device=device, backend=chosen, flip=False)
            except Exception as e:  # noqa: BLE001  the exporter's and the runtime's error types vary
                if log is not None:
                    first = (str(e).strip().splitlines() or [""])[0][:300]
                    log(f"ONNX Runtime could not run the exported model ({type(e).__name__}: {first}); embedding with "
                        "PyTorch")
                chosen = None
        if predictor is None:
            predictor = load_predictor(run=run, config_file=model_config, weights=path, opts=model_opts, device=device,
                                       backend=chosen, flip=False if exported or chosen not in (None, "torch") else None)
        if exported:
            check_convention(predictor, os.fspath(path), input_convention)
        if alone:
            check_input_size(predictor.input_size, input_size, os.fspath(path))
        source = os.fspath(path) if path else str(predictor.cfg.MODEL.WEIGHTS)
        # a run is known by its folder's name; a file by its own
        label = _label(source if path or not run else os.path.basename(os.path.abspath(run)) + ".pth", taken)
        models.append(predictor_model(predictor, label, source))
        taken.append(models[-1].label)
    return models


def _auto_backend(run: Optional[str], config_file: Optional[str], path: Optional[str], opts: Optional[Seq[Any]],
                  device: Optional[str], crops: Optional[int], log: Optional[Callable[[str], None]]) -> Optional[str]:
    """The runtime of a checkpoint named without ``--backend`` (reid/inference/backend_choice.py), said
    in one line through `log` where it is not plainly PyTorch."""
    from reid.inference.backend_choice import auto_backend
    from reid.inference.loading import resolve_model

    if crops is None:
        return None
    cfg, _ = resolve_model(run, config_file, path, opts)
    chosen, why = auto_backend(cfg, device, crops)
    if why and log is not None:
        log(why)
    return chosen


def embed_rows(sequence: Sequence, rows: MOTRows, model: AppearanceModel,
               progress: Optional[Progress] = None, frames: bool = False) -> np.ndarray:
    """Features ``[N, D]`` of the boxes `rows` of `sequence`, row for row: the crops of each
    frame are embedded in one batch (as a tracker calls its model). Boxes with no pixels inside
    the image get a zero feature (the tracker never matches on them). With `frames`, the features
    before the neck that the model's own pooling takes (``model.frames``)."""
    pixels = clip_boxes(rows.boxes, sequence.width, sequence.height)
    embed = model.frames.frame_features if frames else model.embed
    out: Optional[np.ndarray] = None if frames else np.zeros((len(rows), model.feature_dim), np.float32)
    inside = np.flatnonzero((pixels[:, 2] > pixels[:, 0]) & (pixels[:, 3] > pixels[:, 1]))
    total = len(np.unique(rows.frame[inside]))
    for done, (_, index, crops) in enumerate(frame_crops(sequence, rows.frame[inside], pixels[inside]), 1):
        f = embed([np.ascontiguousarray(c[:, :, ::-1]) for c in crops])  # BGR -> RGB
        if out is None:  # the frame features' size is the model's, known at the first batch
            out = np.zeros((len(rows), f.shape[1]), np.float32)
        out[inside[index]] = f
        if progress is not None:
            progress(done, total)
    return out if out is not None else np.zeros((len(rows), model.feature_dim), np.float32)
