"""The recipe's working stages: track and link, tracks to crops, training without labels.

Each function does one stage's work into the folder it is given and returns what the stage's
record keeps; the recipe (reid/adapt/recipe.py) decides which stages run. They call the library
the tools call (reid.tracking for tools/track.py and tools/link_cameras.py, reid.training for
tools/train.py), so the stages' files are those tools' files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq

Log = Callable[[str], None]

#: The sub-folders of a tracking stage: tools/track.py's output and tools/link_cameras.py's.
TRACK_DIR, LINKS_DIR = "track", "links"
#: The crops stage's data folder (tools/tracks_to_reid.py --tracks's output) and the training run's OUTPUT_DIR.
CROPS_DIR, TRAIN_DIR = "unlabelled", "adapted"
#: False accept rate of the appearance gate and of the cross-camera link threshold (the tools' default).
FAR = 1e-2


@dataclass(frozen=True)
class ModelSpec:
    """A model as the tools name it: a run folder, a weights file, or a config file (with weights)."""

    run: Optional[str] = None
    weights: Optional[str] = None
    config_file: Optional[str] = None


@dataclass
class TrackingSetup:
    """What both tracking stages share: the sequences, their detections and the tracker's settings."""

    sequences: List[Any]
    boxes: List[Any]
    tracker: str
    detections: str
    tracker_options: Dict[str, Any]
    python: str
    link_threshold: Optional[float] = None
    crops_per_tracklet: int = 8
    device: Optional[str] = None
    backend: Optional[str] = None
    threads: int = 1  # torch's CPU threads while embedding crops (tools/track.py's --threads)
    progress: Optional[Callable[[str, Dict[str, Any]], None]] = None
    log: Log = field(default=print)


class StageStopped(Exception):
    """A stage ended before completing without an error of its own (training stopped by a signal)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)


def _link_fallback(model: Any, where: str) -> Callable[[], Any]:
    """The model's own calibrated link threshold (its thresholds.json), or one line asking for one."""
    def fallback():
        from reid.tracking.tracker_runs import thresholds_file

        found = thresholds_file(model, FAR)
        if found is None:
            raise ValueError(f"{where}: no linking threshold for {model.label}: neither the ground truth (absent, or too "
                             "few tracklets of different people to calibrate 1% false accepts) nor a thresholds.json "
                             "of the model gives one; pass --link-threshold D (a cosine distance in (0, 2], e.g. 0.3).")
        return found["distance"], found["source"]
    return fallback


def track_and_link(setup: TrackingSetup, model: ModelSpec, folder: str) -> Dict[str, Any]:
    """Track the sequences with `model` into ``folder/track`` (tools/track.py's files: result files,
    metrics.json, summary.md) and link the cameras into ``folder/links`` (tools/link_cameras.py's:
    tracks/, identities.json, metrics.json); returns the files and counts for the stage's record."""
    from reid.utils.device import torch_threads

    with torch_threads(int(setup.threads)):
        return _track_and_link(setup, model, folder)


def _track_and_link(setup: TrackingSetup, model: ModelSpec, folder: str) -> Dict[str, Any]:
    from reid.tracking.appearance import label_folder, load_appearance_models
    from reid.tracking.cross_camera import LinkSettings, link_cameras, trackeval_score
    from reid.tracking.report import write_report
    from reid.tracking.tracker_runs import track_runs

    log = setup.log
    appearance = load_appearance_models([model.weights] if model.weights else [], run=model.run,
                                        config_file=model.config_file, device=setup.device, backend=setup.backend,
                                        crops=sum(len(b) for b in setup.boxes), log=log)[0]
    track_dir, links_dir = os.path.join(folder, TRACK_DIR), os.path.join(folder, LINKS_DIR)
    # The model alone, no motion-only run: the comparison is before against after, on the same detections.
    runs = track_runs(setup.sequences, [appearance], setup.tracker, track_dir, setup.python,
                      detections=setup.detections, far=FAR, tracker_options=setup.tracker_options,
                      progress=setup.progress, log=log, boxes=setup.boxes)
    write_report(runs, track_dir, {"sequences": os.path.dirname(setup.sequences[0].root), "tracker": setup.tracker,
                                   "detections": setup.detections, "far": FAR,
                                   "tracker_options": setup.tracker_options,
                                   "sequence_names": [s.name for s in setup.sequences]})
    results = os.path.join(track_dir, label_folder(appearance.label))
    settings = LinkSettings(setup.link_threshold, setup.crops_per_tracklet, None, None, FAR).check()
    record = link_cameras(setup.sequences, results, appearance, links_dir, settings,
                          score=lambda e, r, w: trackeval_score(e, r, w, setup.python), metrics=True, log=log,
                          fallback=_link_fallback(appearance, "--link-threshold"))
    return {"label": appearance.label, "results": results, "track_metrics": os.path.join(track_dir, "metrics.json"),
            "links_metrics": os.path.join(links_dir, "metrics.json") if record.get("metrics") else None,
            "identities_file": os.path.join(links_dir, "identities.json"),
            "tracks": int(record["num_tracklets"]), "identities": int(record["num_identities"]),
            "identities_in_several_cameras": int(record["identities_in_several_cameras"]),
            "link_threshold": record["threshold"], "model": appearance.identity}


def make_crops(sequences: Seq[Any], results: str, folder: str, frame_step: int, min_height: int,
               log: Log) -> Dict[str, Any]:
    """The tracklets of `results` as unlabelled crops in ``folder/unlabelled`` (tools/tracks_to_reid.py
    --tracks: crops/, crops.txt with ``path camid``, tracklets.csv, summary.json)."""
    from reid.tracking.to_reid import CropSettings, tracks_to_crops

    data = os.path.join(folder, CROPS_DIR)
    settings = CropSettings(min_height=min_height, frame_step=frame_step).check()
    summary = tracks_to_crops(sequences, results, data, settings, log=log)
    cameras = sorted({int(s["camera"]) for s in summary["sequences"] if s["crops"]})
    return {"data": data, "list": os.path.join(data, "crops.txt"), "crops": int(summary["crops"]),
            "tracklets": int(summary["tracklets"]), "cameras": cameras}


def _model_config_file(model: ModelSpec, folder: str) -> tuple:
    """The model's config written to ``folder/model_config.yaml`` (as the tools resolve it: a run's
    config.yaml, a checkpoint's stored config, or --config-file) and its weights file."""
    from reid.inference.loading import resolve_model
    from reid.utils.file_io import atomic_write_text

    check_model(model)
    cfg, weights = resolve_model(model.run, model.config_file, model.weights)
    path = os.path.join(folder, "model_config.yaml")
    atomic_write_text(path, cfg.dump())
    return path, os.path.abspath(weights)


def check_model(model: ModelSpec, opts: Seq[Any] = ()) -> str:
    """The weights file of `model` (resolved as every tool resolves it), or the tools' one-line error.

    The training overrides `opts` are merged into the model's config once here, so that an unknown key
    or a bad value is refused before any tracking rather than when stage 3 starts."""
    from reid.export.options import is_exported_file
    from reid.inference.loading import resolve_model

    if model.weights and is_exported_file(model.weights):
        raise ValueError(f"--weights {model.weights} is an exported file, which cannot be trained; pass the "
                         "checkpoint (.pth) it was exported from, or its --run.")
    weights = resolve_model(model.run, model.config_file, model.weights)[1]
    if opts:
        try:
            resolve_model(model.run, model.config_file, model.weights, opts=list(opts))
        except ValueError as e:
            raise ValueError(f"--opts: {e}") from None
    return os.path.abspath(weights)


def training_started(folder: str) -> bool:
    """Whether stage 3's training in `folder` has saved a checkpoint (a rerun continues it then; before
    that there is nothing to keep, and a rerun with other settings starts it afresh)."""
    from reid.engine.checkpoint_files import last_checkpoint

    out = os.path.join(folder, TRAIN_DIR)
    return os.path.isdir(out) and last_checkpoint(out) is not None


def adapt_model(model: ModelSpec, crops: Dict[str, Any], folder: str, epochs: int, user_opts: Seq[Any],
                hooks: Seq[Any], command: str, log: Log) -> Dict[str, Any]:
    """Train `model` on the crops without labels into ``folder/adapted`` (a tools/train.py run with
    --resume: a stopped training continues where it stopped); returns the run's files and choices.
    A training stopped by a signal raises :class:`StageStopped` with tools/train.py's exit code."""
    from reid.training.run import TrainingRequest, run_training
    from reid.utils.run_lock import RunLock

    from .config import build_adaptation_config, chosen_settings

    config_file, weights = _model_config_file(model, folder)
    out = os.path.join(folder, TRAIN_DIR)
    cfg = build_adaptation_config(config_file, crops["crops"], crops["tracklets"], len(crops["cameras"]),
                                  crops["list"], weights, out, epochs, user_opts, log)
    chosen = chosen_settings(cfg)
    log("adapting: " + ", ".join(f"{k} {v}" for k, v in chosen.items()))
    with RunLock(out, "training", command=command):
        request = TrainingRequest(resume=True, config_file=config_file, command=command)
        code = run_training(cfg, request, list(hooks))
    final = os.path.join(out, "model_final.pth")
    if code != 0 or not os.path.isfile(final):
        raise StageStopped(f"the training in {out} stopped before its end (exit code {code}); its checkpoints are "
                           "kept: run the same command again to continue it.", code or 1)
    return {"run": out, "weights": final, "settings": chosen, "clusters": last_clustering(out)}


def last_clustering(run: str) -> Optional[Dict[str, Any]]:
    """The last clustering record of a training run's metrics.jsonl (clusters found, images kept), or None."""
    import json

    path = os.path.join(run, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    last = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            if '"cluster"' in line:
                record = json.loads(line)
                if record.get("type") == "cluster":
                    last = record
    if last is None:
        return None
    keys = ("epoch", "clusters", "images", "images_kept", "eps", "outlier_share", "multi_camera_share")
    return {k: last[k] for k in keys if k in last}


__all__ = ["CROPS_DIR", "FAR", "LINKS_DIR", "ModelSpec", "StageStopped", "TRACK_DIR", "TRAIN_DIR", "TrackingSetup",
           "adapt_model", "check_model", "last_clustering", "make_crops", "track_and_link", "training_started"]
