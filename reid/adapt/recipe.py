"""The adaptation recipe: a model adapted to a site from the site's own videos, without labels.

Stages, each in its own sub-folder of the output folder (reid/adapt/records.py: ``settings.json``
when it starts, ``done.json`` when complete):

1. ``1-track-before/``: the sequences tracked with the given model (``track/``, tools/track.py's
   files) and their cameras linked into identities (``links/``, tools/link_cameras.py's files);
2. ``2-crops/``: the tracker's tracklets as unlabelled crops with tracklet and camera ids
   (``unlabelled/``, tools/tracks_to_reid.py --tracks's files);
3. ``3-adapt/``: the model trained on those crops without labels (``adapted/``, a tools/train.py run
   of the model's own config plus reid/adapt/config.py's settings);
4. ``4-track-after/``: stage 1 again with the adapted model (same tracker, settings, detections);
5. ``report.json`` / ``report.md``: stage 1 against stage 4 (reid/adapt/report.py).

A rerun skips complete stages, continues a stopped training exactly (tools/train.py --resume),
redoes another stopped stage, and refuses settings other than those recorded.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq

from .records import StageRecord, claim_folder, read_json, settings_difference
from .report import REPORT_JSON, REPORT_MD, build_report, summary_line, write_report
from .stages import (ModelSpec, TrackingSetup, adapt_model, check_model, make_crops, track_and_link,
                     training_started)

STAGES = ("1-track-before", "2-crops", "3-adapt", "4-track-after")
#: Epochs of training without labels unless told (configs/UDA/synthetic_shift.yml's).
DEFAULT_EPOCHS = 10


def _absolute(path: Optional[str]) -> Optional[str]:
    return None if path is None else os.path.abspath(path)


@dataclass
class AdaptRequest:
    """What tools/adapt.py is asked (one field per option)."""

    output: str
    sequences: Optional[str] = None
    videos: Optional[List[str]] = None
    model: ModelSpec = field(default_factory=ModelSpec)
    tracker: str = "botsort"
    detections: str = "det"
    tracker_options: Dict[str, Any] = field(default_factory=dict)
    link_threshold: Optional[float] = None
    crops_per_tracklet: int = 8
    frame_step: int = 5
    min_height: int = 32
    epochs: int = DEFAULT_EPOCHS
    opts: List[Any] = field(default_factory=list)
    device: Optional[str] = None
    backend: Optional[str] = None
    threads: int = 1
    tracker_python: Optional[str] = None
    command: str = "tools/adapt.py"
    progress: Optional[Callable[[str, Dict[str, Any]], None]] = None
    log: Callable[[str], None] = print

    def stage_settings(self) -> Dict[str, Dict[str, Any]]:
        """Each stage's recorded settings, named by their options: a stage's include those of the stages
        it reads, so a change anywhere upstream is caught at the first stage it touches."""
        tracking = {"--sequences": _absolute(self.sequences),
                    "--video": [os.path.abspath(v) for v in self.videos] if self.videos else None,
                    "--run": _absolute(self.model.run), "--weights": _absolute(self.model.weights),
                    "--config-file": _absolute(self.model.config_file), "--tracker": self.tracker,
                    "--detections": self.detections, "--tracker-option": dict(sorted(self.tracker_options.items())),
                    "--link-threshold": self.link_threshold, "--crops-per-tracklet": self.crops_per_tracklet,
                    "--backend": self.backend}
        crops = {**tracking, "--frame-step": self.frame_step, "--min-height": self.min_height}
        adapt = {**crops, "--epochs": self.epochs, "--opts": [str(o) for o in self.opts]}
        return {STAGES[0]: tracking, STAGES[1]: crops, STAGES[2]: adapt, STAGES[3]: adapt}


def _inputs(req: AdaptRequest):
    """The sequences (or videos) and their detections, checked before any work."""
    from reid.tracking.sequences import find_sequences
    from reid.tracking.tracker_runs import check_boxes, sequence_detections
    from reid.tracking.videos import find_videos

    if req.videos:
        return find_videos(req.videos, need=req.detections), None, None
    sequences = find_sequences(req.sequences)
    boxes = [sequence_detections(s, req.detections) for s in sequences]
    check_boxes(sequences, boxes, req.detections, req.log)
    return None, sequences, boxes


def _check_link_threshold(req: AdaptRequest, sequences, records: Dict[str, "StageRecord"]) -> None:
    """Without ground truth in every sequence the adapted model has no calibrated link threshold (its
    training has no labelled split for a thresholds.json): refused before any tracking, since a rerun
    with --link-threshold would differ from the recorded settings of the stages already done."""
    if req.link_threshold is not None or all(s.gt_path for s in sequences):
        return
    if records[STAGES[3]].done is not None:
        return
    missing = next(s for s in sequences if not s.gt_path)
    raise ValueError(f"{missing.root} has no gt/gt.txt, so the adapted model's threshold for linking cameras cannot be "
                     "calibrated (it has no thresholds.json); pass --link-threshold D (a cosine distance in (0, 2], "
                     "e.g. 0.3), used before and after.")


def _run_stage(record: StageRecord, settings: Dict[str, Any], work: Callable[[str], Dict[str, Any]],
               log: Callable[[str], None], fresh: bool = True) -> Dict[str, Any]:
    """`work(folder)` unless the stage is complete; its result either way."""
    done = record.done
    if done is not None:
        log(f"{record.name}: complete in {record.folder}, skipped")
        return done["result"]
    again = os.path.isdir(record.folder)
    if again:
        log(f"{record.name}: {'continued' if not fresh else 'redone'} (an earlier run stopped during it)")
    record.start(settings, fresh=fresh)
    result = work(record.folder)
    record.finish(settings, result)
    return result


def run_recipe(req: AdaptRequest, hooks: Seq[Any] = ()) -> Dict[str, Any]:
    """Run (or continue) the recipe of the module docstring; returns report.json's content. `hooks` are
    training hooks (``reid.engine.HookBase``) added to stage 3's run, as ``reid.cli.train.main`` takes."""
    from reid.tracking.tracker_env import tracker_python
    from reid.tracking.tracker_options import check_options_in_env
    from reid.tracking.tracker_runs import check_tracker, sequence_detections, check_boxes
    from reid.tracking.videos import video_sequences

    log, output = req.log, os.path.abspath(req.output)
    videos, sequences, boxes = _inputs(req)
    device_opts = ["MODEL.DEVICE", req.device] if req.device else []  # the user's --opts still win
    check_model(req.model, device_opts + list(req.opts))
    records = {name: StageRecord(os.path.join(output, name)) for name in STAGES}
    if sequences is not None:
        _check_link_threshold(req, sequences, records)
    lock = claim_folder(output, videos or [req.sequences])
    try:
        settings = req.stage_settings()
        # every refusal before any work; a training that saved a checkpoint is continued, not redone
        trained = training_started(records[STAGES[2]].folder)
        for name in STAGES:
            records[name].check(settings[name], started=name == STAGES[2] and trained)
        report_path = os.path.join(output, REPORT_JSON)
        recorded = read_json(report_path)
        problem = recorded and settings_difference(recorded.get("settings", {}), settings[STAGES[3]], report_path)
        if problem:
            raise ValueError(problem)
        if recorded is not None and all(records[n].done is not None for n in STAGES):
            for name in STAGES:
                log(f"{name}: complete in {records[name].folder}, skipped")
            log(f"report: complete in {report_path}, skipped")
            return recorded
        for name in (REPORT_JSON, REPORT_MD):  # a report beside stages being redone would describe another run
            if os.path.isfile(os.path.join(output, name)):
                os.remove(os.path.join(output, name))
        if videos:
            sequences = video_sequences(videos, output, log)
            boxes = [sequence_detections(s, req.detections) for s in sequences]
            check_boxes(sequences, boxes, req.detections, log)
            _check_link_threshold(req, sequences, records)
        python = tracker_python(req.tracker_python, log=log)
        if req.tracker_options and any(records[n].done is None for n in (STAGES[0], STAGES[3])):
            check_options_in_env(dict(req.tracker_options), python, req.tracker,
                                 check_tracker(req.tracker).threshold_option, log=log)
        setup = TrackingSetup(sequences, boxes, req.tracker, req.detections, dict(req.tracker_options), python,
                              req.link_threshold, req.crops_per_tracklet, req.device, req.backend, req.threads,
                              req.progress, log)
        before = _run_stage(records[STAGES[0]], settings[STAGES[0]],
                            lambda folder: track_and_link(setup, req.model, folder), log)
        crops = _run_stage(records[STAGES[1]], settings[STAGES[1]],
                           lambda folder: make_crops(sequences, before["results"], folder, req.frame_step,
                                                     req.min_height, log), log)
        adapted = _run_stage(records[STAGES[2]], settings[STAGES[2]],
                             lambda folder: adapt_model(req.model, crops, folder, req.epochs,
                                                        device_opts + list(req.opts), hooks, req.command, log),
                             log, fresh=not trained)
        after = _run_stage(records[STAGES[3]], settings[STAGES[3]],
                           lambda folder: track_and_link(setup, ModelSpec(run=adapted["run"]), folder), log)
        report = build_report(before, crops, adapted, after, settings[STAGES[3]])
        paths = write_report(output, report)
        log(f"report: wrote {', '.join(paths)}")
        return report
    finally:
        lock.release()


__all__ = ["AdaptRequest", "DEFAULT_EPOCHS", "STAGES", "run_recipe", "summary_line"]
