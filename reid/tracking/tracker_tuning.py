"""A tracker's settings tuned for one re-ID model on sequences with ground truth (``tools/tune_tracker.py``).

BoxMOT tuned its trackers' defaults for its own detectors and re-ID models; another model's
distances live on another scale and the same settings can lose association that the model could
give. The search space is the one BoxMOT documents for the tracker (``configs/trackers/<name>.yaml``
in the installed BoxMOT: each setting's kind and tuning range, read by
:mod:`reid.tracking.tracker_options`), searched by Optuna's TPE sampler (seeded) for the settings
of highest TrackEval score (HOTA or IDF1, over the tuning sequences together).

The crops are embedded once: every trial runs the tracker over the same boxes and features, so a
trial costs one tracker run and one scoring. The first trial is what tools/track.py does unasked
(BoxMOT's defaults with the model's calibrated appearance gate), so the best is never worse than
it on the tuning sequences; sequences held out of the tuning say whether the gain carries over.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq

from .appearance import AppearanceModel, embed_rows
from .mot_files import MOTRows
from .scoring import ScoredSequence, score_results
from .sequences import Sequence
from .tracker_runs import TrackerKind, _npz, gate_threshold, run_tracker, thresholds_file

#: What a trial is scored by: TrackEval's figures over all tuning sequences.
OBJECTIVES = ("HOTA", "IDF1")
#: Settings never searched: the frame rate is the sequences', appearance on or off is the run's kind.
FIXED = ("frame_rate", "use_embeddings")
Log = Callable[[str], None]


def require_optuna() -> None:
    """An ImportError saying what to install when Optuna is missing (checked before any work)."""
    try:
        import optuna  # noqa: F401
    except ImportError as e:
        raise ImportError('tuning a tracker needs Optuna: pip install -e ".[tune]" (or pip install optuna).') from e


def search_space(spec: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    """The settings of a BoxMOT tracker file (:func:`reid.tracking.tracker_options.read_spec`) that have a
    tuning range or more than one option, except :data:`FIXED`; each keeps its ``parent`` (the setting
    that activates it, whose value must be true, as its own parent's, for it to be searched)."""
    space: Dict[str, Dict[str, Any]] = {}
    for name, entry in spec.items():
        searchable = entry.get("range") or len(entry.get("options") or []) > 1
        if name not in FIXED and entry.get("type") and searchable:
            space[name] = dict(entry)
    return space


def suggest(trial: Any, space: Dict[str, Dict[str, Any]], fixed: Dict[str, Any]) -> Dict[str, Any]:
    """One trial's settings: each searched setting drawn from its range by Optuna's `trial` (a setting
    whose parent is off, in the trial or in `fixed`, is not drawn)."""
    chosen: Dict[str, Any] = {}
    for name, entry in space.items():
        parent = entry.get("parent")
        if parent is not None and (parent in chosen or parent in fixed or parent in space) \
                and not chosen.get(parent, fixed.get(parent, False)):
            continue  # switched off in this trial (or by the run), or its own parent was
        low, high, *step = entry.get("range") or [None, None]
        kind = entry["type"]
        if kind == "uniform":
            chosen[name] = trial.suggest_float(name, float(low), float(high))
        elif kind in ("randint", "qrandint"):  # BoxMOT's upper bound is exclusive
            q = int(step[0]) if step else 1
            top = low + (int(high) - 1 - low) // q * q
            chosen[name] = trial.suggest_int(name, int(low), int(top), step=q)
        else:
            chosen[name] = trial.suggest_categorical(name, list(entry["options"]))
    return chosen


@dataclass
class TuningSet:
    """Sequences with ground truth, their boxes and one model's features of them, written once for the tracker."""

    sequences: List[Sequence]
    inputs: List[str]          # the tracker's .npz input of each sequence
    features: List[Any] = field(default_factory=list)
    boxes: List[MOTRows] = field(default_factory=list)


def prepare(sequences: Seq[Sequence], boxes: Seq[MOTRows], model: Optional[AppearanceModel], folder: str
            ) -> TuningSet:
    """Embed every box of `sequences` with `model` once (None: motion only); the tracker's inputs go into `folder`."""
    os.makedirs(folder, exist_ok=True)
    features = [None if model is None else embed_rows(s, rows, model) for s, rows in zip(sequences, boxes)]
    inputs = [_npz(os.path.join(folder, s.name + ".npz"), rows, f) for s, rows, f in zip(sequences, boxes, features)]
    return TuningSet(list(sequences), inputs, features, list(boxes))


def base_options(kind: TrackerKind, model: Optional[AppearanceModel], data: TuningSet, far: float) -> Dict[str, Any]:
    """What tools/track.py gives the tracker unasked: appearance on (motion only: off) and, where the tracker
    has a gate, the model's calibrated appearance threshold (from the ground truth)."""
    if model is None:
        return dict(kind.motion_options or {})
    options = dict(kind.appearance_options)
    gate = gate_threshold(kind, model, data.sequences, data.boxes, data.features, None, far, thresholds_file)
    if gate.get("distance") is not None:
        options[kind.threshold_option] = float(gate["distance"])
    return options


def score_settings(data: TuningSet, tracker: str, options: Dict[str, Any], folder: str, python: str
                   ) -> Dict[str, Dict[str, float]]:
    """TrackEval's figures of one tracker run with `options` over `data`'s sequences (results into `folder`)."""
    results, _ = run_tracker(data.sequences, data.inputs, tracker, options, folder, python,
                             os.path.join(folder, "job.json"))
    entries = [ScoredSequence(s.name, s.gt_path, s.length) for s in data.sequences]
    return score_results(entries, results, os.path.join(folder, "scoring"), python)


@dataclass
class TuningResult:
    """The trials of one tuning and the best settings."""

    objective: str
    base: Dict[str, Any]                 # track.py's own settings (trial 0)
    trials: List[Dict[str, Any]]         # each: number, settings, value, COMBINED figures

    @property
    def best_trial(self) -> Dict[str, Any]:
        """The trial of highest objective (the earliest of equals: trial 0 wins a tie)."""
        return max(self.trials, key=lambda r: (r["value"], -r["number"]))

    @property
    def best(self) -> Dict[str, Any]:
        """The best trial's settings (base with the drawn ones over it)."""
        return dict(self.best_trial["settings"])


def tune(data: TuningSet, tracker: str, space: Dict[str, Dict[str, Any]], base: Dict[str, Any], python: str,
         folder: str, trials: int, objective: str = "HOTA", seed: int = 0, timeout: Optional[float] = None,
         log: Log = print) -> TuningResult:
    """Search `space` for the settings (over `base`) of highest `objective` on `data`: `trials` runs at
    most (and `timeout` seconds), the first being `base` itself. A setting of `base` that lies outside
    its tuning range widens the range to it (a calibrated gate below BoxMOT's range is searched around)."""
    require_optuna()
    import optuna

    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}.")
    space = {k: dict(v) for k, v in space.items()}
    for key, value in base.items():
        bounds = space.get(key, {}).get("range")
        if bounds and space[key]["type"] == "uniform":
            bounds[:2] = [min(bounds[0], value), max(bounds[1], value)]
    record: List[Dict[str, Any]] = []

    def run(number: int, settings: Dict[str, Any]) -> float:
        figures = score_settings(data, tracker, settings, os.path.join(folder, f"trial_{number:04d}"), python)
        value = float(figures["COMBINED"][objective])
        record.append({"number": number, "settings": settings, "value": value, "metrics": figures["COMBINED"]})
        log(f"trial {number}: {objective} {value:.2f}" + (" (track.py's own settings)" if not number else ""))
        return value if math.isfinite(value) else float("-inf")

    run(0, dict(base))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    study.optimize(lambda trial: run(trial.number + 1, {**base, **suggest(trial, space, base)}),
                   n_trials=max(0, int(trials) - 1), timeout=timeout)
    return TuningResult(objective, dict(base), record)


__all__ = ["FIXED", "OBJECTIVES", "TuningResult", "TuningSet", "base_options", "prepare", "require_optuna",
           "score_settings", "search_space", "suggest", "tune"]
