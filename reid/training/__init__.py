"""Training runs: what ``tools/train.py`` does, as a class whose build steps a user overrides.

- run.py: :class:`TrainingRun` (check, data, test sets, model, evaluation, loader + hooks, trainer,
  CLIP-ReID's first stage, calibration) and :func:`run_training` (the run folder, the process group,
  the log); :class:`TrainingRequest` holds the flags;
- eval_fn.py: the periodic evaluation, where engine and evaluation meet;
- prompt_stage.py: CLIP-ReID's first stage; checks.py: config checks made before any data is read.

It stands on engine, evaluation, uda and inference (decision thresholds at the end); the programs
(reid/cli) stand on it.
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.training.run": ["TrainingRequest", "TrainingRun", "run_training"],
    "reid.training.eval_fn": ["make_eval_fn"],
})

__all__ = sorted(__dir__())
