"""Tracking scores from TrackEval (HOTA, DetA, AssA; MOTA, IDSW; IDF1, IDP, IDR), the field's scorer.

TrackEval (the package index's ``trackeval``) runs in the tracker environment
(reid/tracking/tracker_env.py) over MOTChallenge files laid out as it expects them: a
ground-truth folder ``<name>/gt/gt.txt`` per sequence and ``<tracker>/data/<name>.txt``
results. Its MOT17 rules apply: only pedestrians (class 1) with the 'consider' flag count,
and a result box matched to a distractor (static person, reflection, ...) is dropped before
scoring. Scores are in percent (IDSW a count); "COMBINED" holds the figures over all entries.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from typing import Dict, Optional, Sequence as Seq

from .tracker_env import run_side, tracker_python

METRICS = ("HOTA", "DetA", "AssA", "IDF1", "IDP", "IDR", "IDSW", "MOTA")
_TRACKER = "reid"


@dataclass(frozen=True)
class ScoredSequence:
    """One entry to score: a ground-truth file and the number of frames it covers."""

    name: str
    gt_path: str
    length: int


def score_results(entries: Seq[ScoredSequence], results: Dict[str, str], workdir: str,
                  python: Optional[str] = None) -> Dict[str, Dict[str, float]]:
    """TrackEval's figures of `results` (entry name -> MOT result file) against `entries`' ground
    truth: ``{name: {metric: value}, ..., "COMBINED": {...}}``. `workdir` receives the layout
    TrackEval reads (copies; removed first); `python` is the tracker environment's Python."""
    missing = [e.name for e in entries if e.name not in results]
    if missing:
        raise ValueError(f"no tracking result for {missing[0]} ({len(missing)} of {len(entries)} sequences); "
                         "give a result file for every sequence that has ground truth.")
    shutil.rmtree(workdir, ignore_errors=True)
    data = os.path.join(workdir, "trackers", _TRACKER, "data")
    os.makedirs(data)
    for e in entries:
        os.makedirs(os.path.join(workdir, "gt", e.name, "gt"))
        shutil.copyfile(e.gt_path, os.path.join(workdir, "gt", e.name, "gt", "gt.txt"))
        shutil.copyfile(results[e.name], os.path.join(data, e.name + ".txt"))
    output = os.path.join(workdir, "scores.json")
    job = {"command": "score", "gt_folder": os.path.join(workdir, "gt"),
           "trackers_folder": os.path.join(workdir, "trackers"), "output_folder": os.path.join(workdir, "trackeval"),
           "tracker": _TRACKER, "sequences": {e.name: int(e.length) for e in entries}, "output": output}
    run_side(python or tracker_python(), job, os.path.join(workdir, "score_job.json"))
    with open(output, encoding="utf-8") as f:
        return json.load(f)


__all__ = ["METRICS", "ScoredSequence", "score_results"]
