"""Checkpoint files: atomic saving, safe loading, the "last checkpoint" pointer, pruning.

What a training checkpoint holds is listed in reid/engine/checkpointer.py. Everything in it is
a tensor or a plain Python value, so it loads with ``torch.load(..., weights_only=True)``, which
cannot run code from the file.
"""
from __future__ import annotations

import glob
import logging
import os
import pickle
import re
from typing import Any, Dict, List, Mapping, Optional

import torch
from torch import nn

from reid.modeling.formats import convert_foreign_state
from reid.utils.file_io import DiskFullError, atomic_write, atomic_write_text
from reid.utils.file_signatures import file_kind
from reid.utils.path_kinds import MISSING, file_problem, is_missing
from reid.utils.text_files import brief
from reid.utils.value_checks import weight_problem

from .params import head_names, is_head_key

logger = logging.getLogger(__name__)

#: State-dict prefix of the Baseline's temporal pooling (MODEL.VIDEO.TEMPORAL; reid/modeling/temporal.py).
TEMPORAL_PREFIX = "temporal."
#: Text file in OUTPUT_DIR holding the file name of the newest resumable checkpoint.
LAST_CHECKPOINT_FILE = "last_checkpoint"
FINAL_NAME = "model_final.pth"
BEST_NAME = "model_best.pth"
INTERRUPT_NAME = "model_interrupted.pth"
_PERIODIC_RE = re.compile(r"^model_(\d{4,})\.pth$")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, or does not fit the model it is loaded into."""


def periodic_name(epoch: int) -> str:
    """File name of the checkpoint written after `epoch` completed epochs (``model_0010.pth``)."""
    return f"model_{int(epoch):04d}.pth"


def save_checkpoint(path: str, **state: Any) -> str:
    """Write `state` to `path` with torch.save, atomically (temp file + rename); returns `path`.

    A crash or a full disk during the write leaves the previous file at `path` untouched.
    """
    atomic_write(path, lambda f: torch.save(state, f))
    return path


def read_checkpoint(path: str, map_location: Any = "cpu") -> Dict[str, Any]:
    """Load the dict stored at `path` with ``weights_only=True``; errors name the file."""
    problem = file_problem(path)
    if is_missing(problem):
        detail = "" if problem == MISSING else f" (it {problem})"
        raise CheckpointError(
            f"Checkpoint file not found: {path}{detail}. Check the path (MODEL.WEIGHTS or OUTPUT_DIR) "
            "or start without it."
        )
    if problem:
        raise CheckpointError(f"Checkpoint {path} {problem}; name a .pth file.")
    if path.endswith(".safetensors"):
        return read_safetensors(path)
    try:
        data = _load_weights_only(path, map_location)
    except Exception as e:  # torch raises several types for truncated / foreign files
        raise CheckpointError(_unreadable_message(path, e)) from e
    if not isinstance(data, dict):
        raise CheckpointError(f"Checkpoint {path} holds a {type(data).__name__}, expected a dict.")
    return data


def read_safetensors(path: str) -> Dict[str, Any]:
    """A ``.safetensors`` file (a published model, tools/publish.py) as a checkpoint dict: its tensors
    are the ``"model"`` state dict and its ``cfg`` metadata, when present, the config. The format holds
    tensors and strings only, so reading it can run no code."""
    try:
        from safetensors import safe_open
    except ImportError:
        raise CheckpointError(f"{path} is a .safetensors file, which needs safetensors: pip install safetensors.") from None
    try:
        with safe_open(path, framework="pt") as f:
            data: Dict[str, Any] = {"model": {k: f.get_tensor(k) for k in f.keys()}}
            cfg = (f.metadata() or {}).get("cfg")
    except Exception as e:  # safetensors raises its own error types for damaged headers
        raise CheckpointError(f"{path} cannot be read as a .safetensors file ({type(e).__name__}: {e}); download "
                              "it again.") from None
    if cfg:
        data["cfg"] = cfg
    return data


def _numpy_scalar_globals() -> list:
    """numpy scalars and dtypes, safe to unpickle (plain data): torchreid stores its rank-1 as one."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    scalar = core.multiarray.scalar
    dtypes = [type(np.dtype(t)) for t in ("float16", "float32", "float64", "int32", "int64", "bool")]
    found = [scalar, np.dtype, *dtypes]
    if scalar.__module__ != "numpy.core.multiarray":  # numpy 2 reading a file written by numpy 1
        found.append((scalar, "numpy.core.multiarray.scalar"))
    return found


def _load_weights_only(path: str, map_location: Any) -> Any:
    """``torch.load(weights_only=True)``; a file that holds numpy scalars is read with those allowed."""
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        if "numpy" not in str(e):
            raise
    with torch.serialization.safe_globals(_numpy_scalar_globals()):
        return torch.load(path, map_location=map_location, weights_only=True)


_RUN_MARKERS = ("config.yaml", LAST_CHECKPOINT_FILE)


def _describe_file(path: str) -> str:
    """What `path` is from its first bytes: "torch" (torch.save's zip archive or legacy pickle
    stream, or another zip), else :func:`reid.utils.file_signatures.content_kind`'s phrase
    ("a JPEG image", "a YAML/text file", "an empty file", ...).

    Anything but "torch" that fails to load is not a checkpoint at all, and saying what it is
    helps more than torch's unpickler message.
    """
    kind = file_kind(path)
    return "torch" if kind.startswith("a torch checkpoint") or kind == "a zip archive" else kind


def _checkpoints_beside(path: str) -> List[str]:
    """Checkpoint files in the folder of `path` other than `path` itself, newest first."""
    folder = os.path.dirname(os.path.abspath(path))
    names = [FINAL_NAME] + [os.path.basename(p) for p in reversed(_periodic_files(folder))] + [BEST_NAME]
    own = os.path.basename(path)
    return [os.path.join(folder, n) for n in names if n != own and os.path.isfile(os.path.join(folder, n))]


def _unreadable_message(path: str, error: BaseException) -> str:
    """Why `path` did not load with weights_only=True, and what to load instead.

    torch's own text is left out on purpose: it recommends ``weights_only=False``, which
    would let the file run code, and the files this toolkit writes never need it.
    """
    kind = _describe_file(path)
    folder = os.path.dirname(os.path.abspath(path))
    others = _checkpoints_beside(path)
    if others:
        where = f"this folder has {', '.join(os.path.basename(o) for o in others[:3])}: e.g. {others[0]}"
    else:
        where = "a run folder holds model_final.pth (end of training) and model_XXXX.pth (periodic)"
    point = f"Point MODEL.WEIGHTS (or --weights) to a checkpoint written by training ({where})."
    head = f"Could not read checkpoint {path}:"
    if kind in ("a YAML/text file", "a text file", "a JSON/text file"):
        shown = f"{kind} (a config?)" if kind == "a YAML/text file" else kind[2:]
        return f"{head} it is {shown}, not a checkpoint readable with weights_only=True. {point}"
    if kind == "an empty file":
        return f"{head} the file is empty (0 bytes), so it is not a checkpoint. {point}"
    if kind != "torch":
        return f"{head} it is {kind}, not a checkpoint (a file written by torch.save). {point}"
    # torch.save's format: either it is damaged or it holds objects that the safe loader refuses.
    if isinstance(error, pickle.UnpicklingError) or "Weights only load failed" in str(error):
        return (
            f"{head} it is a torch file, but it holds Python objects other than tensors and plain "
            "values, which weights_only=True refuses because loading them could run code from the "
            "file. Checkpoints written by this toolkit never need that; save only the state dict "
            f"(torch.save(model.state_dict(), ...)) where the file came from. {point}"
        )
    damaged = (
        f"{head} it is a damaged torch checkpoint (truncated or incompletely copied; "
        f"{type(error).__name__})."
    )
    in_run = any(os.path.isfile(os.path.join(folder, m)) for m in _RUN_MARKERS)
    if in_run:
        # Inside a run folder the file is disposable: last_checkpoint() falls back to the
        # newest remaining checkpoint when the one it names is gone.
        return (
            f"{damaged} Delete it (resuming then falls back to the newest remaining checkpoint), "
            f"or point to another checkpoint: {where}."
        )
    return f"{damaged} Copy or download it again. {point}"


def model_state(data: Mapping[str, Any], source: str = "") -> Dict[str, torch.Tensor]:
    """The model state dict inside a checkpoint: ``model`` (ours, fast-reid), ``state_dict``
    (torchreid) or the bare state dict, without a DDP ``module.`` prefix; every entry a named
    tensor (a CheckpointError naming `source` otherwise)."""
    state = data.get("model", data.get("state_dict", data))
    where = f"Checkpoint {source}" if source else "The checkpoint"
    if not isinstance(state, Mapping):
        raise CheckpointError(f"{where}: its 'model' entry is a {type(state).__name__}, not a state dict.")
    for key, value in state.items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(f"{where}: its state dict maps {brief(key)} to a {type(value).__name__}; a state "
                                  "dict maps parameter names to tensors. Use a checkpoint written by torch.save of "
                                  "a model's state_dict().")
    # Weights saved from a DistributedDataParallel wrapper carry a "module." prefix.
    if state and all(k.startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return dict(state)


def load_model_state(
    model: nn.Module, state: Mapping[str, torch.Tensor], source: str, drop_head: bool = False
) -> List[str]:
    """Copy `state` into `model`, checking names and shapes; returns the keys left at init.

    Shapes must match exactly, and every tensor must be usable (floating point where the
    model's is, finite, BatchNorm variances non-negative: ``reid.utils.value_checks``). An
    identity-head tensor whose shape differs (a model built
    for another number of classes) raises an error naming `source`, the tensor and both
    shapes, unless `drop_head` is True: then every head tensor of the checkpoint is ignored
    and the model keeps its freshly initialised head (fine-tuning on other identities).
    """
    state = dict(state)
    heads = head_names(model)

    def is_head(key: str) -> bool:
        # By name too: a model built without a head (NUM_CLASSES 0) has no head_names.
        return key in heads or is_head_key(key)

    if drop_head:
        state = {k: v for k, v in state.items() if not is_head(k)}
    own = model.state_dict()
    mismatched = [
        (k, tuple(state[k].shape), tuple(own[k].shape))
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    head_mismatch = [m for m in mismatched if is_head(m[0])]
    if head_mismatch:
        key, theirs, ours = head_mismatch[0]
        raise CheckpointError(
            f"Checkpoint {source} does not fit the model's identity head: {key} has shape {theirs} "
            f"in the checkpoint but {ours} in the model (the checkpoint was trained on "
            f"{theirs[0] if theirs else '?'} classes, this dataset has {ours[0] if ours else '?'}). "
            "To fine-tune on these identities, load it without the head: pass --drop-head to "
            "tools/train.py (load_checkpoint(..., drop_head=True) in Python). Testing needs no "
            "head: build the model with MODEL.HEADS.NUM_CLASSES 0."
        )
    if mismatched:
        lines = "; ".join(f"{k}: checkpoint {a} vs model {b}" for k, a, b in mismatched[:5])
        raise CheckpointError(
            f"Checkpoint {source} was saved from a different architecture: {lines}. Use the config "
            "the checkpoint was trained with (its 'cfg' entry, or config.yaml next to it)."
        )
    # Head tensors are expected to be absent from an inference model, so only others count.
    unexpected = sorted(k for k in state if k not in own and not is_head(k))
    if unexpected:
        raise CheckpointError(
            f"Checkpoint {source} has tensors the model lacks: {', '.join(unexpected[:5])}"
            f"{' ...' if len(unexpected) > 5 else ''}. Use the config the checkpoint was trained "
            "with (MODEL.META_ARCHITECTURE, MODEL.BACKBONE.NAME, ...)."
        )
    state = {k: v for k, v in state.items() if k in own}
    # copy_ would cast an integer tensor into a float parameter without a word, and NaN or an
    # infinite BN variance would turn every feature into NaN or zero: refuse before loading.
    problem = weight_problem(state, own)
    if problem:
        raise CheckpointError(
            f"Checkpoint {source} cannot be used: {problem}. A model loaded from it would give meaningless "
            "features; use an intact checkpoint (download or convert it again)."
        )
    missing = sorted(k for k in own if k not in state)
    # A learned temporal attention absent from an image model's checkpoint keeps its initial zeros,
    # which pool a clip's frames by their mean: exactly what the image model does with a clip.
    fresh = [k for k in missing if k.startswith(TEMPORAL_PREFIX)]
    if fresh:
        with torch.no_grad():
            for key in fresh:
                own[key].zero_()  # state_dict() shares the parameters' storage
        logger.info("Checkpoint %s has no %s (an image model's): it starts at zero, the frames' mean", source,
                    ", ".join(fresh))
    missing_nonhead = [k for k in missing if not is_head(k) and k not in fresh]
    if missing_nonhead:
        raise CheckpointError(
            f"Checkpoint {source} lacks tensors the model needs: {', '.join(missing_nonhead[:5])}"
            f"{' ...' if len(missing_nonhead) > 5 else ''}. Use the config the checkpoint was "
            "trained with."
        )
    missing = [k for k in missing if k not in fresh]
    if missing and not drop_head:
        raise CheckpointError(
            f"Checkpoint {source} has no identity-head weights ({missing[0]}) but the model has a "
            "head; pass --drop-head (drop_head=True) to start the head from scratch."
        )
    model.load_state_dict(state, strict=False)
    return missing


def load_checkpoint(
    path: str,
    model: Optional[nn.Module] = None,
    optimizer: Optional[torch.optim.Optimizer] = None,
    scheduler: Optional[Any] = None,
    scaler: Optional[Any] = None,
    drop_head: bool = False,
    map_location: Any = "cpu",
    data: Optional[Dict[str, Any]] = None,
) -> Dict[str, Any]:
    """Read `path` and load whatever objects are given; returns the whole checkpoint dict.

    `data` is the checkpoint already read from `path` (read_checkpoint), to avoid reading it twice.

    `model` gets the weights (see :func:`load_model_state` for the shape checks and
    `drop_head`; a fast-reid or torchreid checkpoint is converted first by
    ``reid.modeling.formats``); `optimizer`, `scheduler` and `scaler` get their
    states when the checkpoint has them (a weights-only file such as ``model_best.pth`` has none: asking for them is an
    error naming the file). Missing or corrupt files raise :class:`CheckpointError`.
    """
    data = read_checkpoint(path, map_location=map_location) if data is None else data
    if model is not None:
        state = model_state(data, path)
        converted = convert_foreign_state(model, state, path)  # another toolkit's names onto ours, strictly
        if converted is not None:
            state, drop_head = converted.state, drop_head or converted.head_dropped
        load_model_state(model, state, path, drop_head=drop_head)
    for name, obj in (("optimizer", optimizer), ("scheduler", scheduler), ("scaler", scaler)):
        if obj is None:
            continue
        if data.get(name) is None:
            raise CheckpointError(
                f"Checkpoint {path} has no {name} state, so training cannot resume from it; "
                "resume from a training checkpoint (model_XXXX.pth, model_final.pth) or load it "
                "as MODEL.WEIGHTS to start a new schedule."
            )
        try:
            obj.load_state_dict(data[name])
        except (ValueError, KeyError, RuntimeError) as e:
            raise CheckpointError(
                f"The {name} state in {path} does not fit this run ({e}). Resume with the same "
                "config the checkpoint was written with."
            ) from e
    return data


def last_checkpoint(output_dir: str) -> Optional[str]:
    """Path of the newest resumable checkpoint in `output_dir`, or None when there is none.

    Reads the ``last_checkpoint`` pointer file; if it is absent (e.g. a folder copied without
    it) the newest ``model_final.pth`` / ``model_XXXX.pth`` is used.
    """
    pointer = os.path.join(output_dir, LAST_CHECKPOINT_FILE)
    if os.path.isfile(pointer):
        with open(pointer, "r", encoding="utf-8", errors="replace") as f:
            name = f.read(256).strip()
        # Only a checkpoint name of this folder: a pointer from someone else ("../../x") must
        # not lead a resume to a file outside the run.
        if name in (FINAL_NAME, INTERRUPT_NAME) or _PERIODIC_RE.match(name):
            path = os.path.join(output_dir, name)
            if os.path.isfile(path):
                return path
    final = os.path.join(output_dir, FINAL_NAME)
    if os.path.isfile(final):
        return final
    periodic = _periodic_files(output_dir)
    return periodic[-1] if periodic else None


def _periodic_files(output_dir: str) -> List[str]:
    """``model_XXXX.pth`` files in `output_dir`, oldest (lowest epoch) first."""
    found = ((_PERIODIC_RE.match(os.path.basename(p)), p) for p in glob.glob(os.path.join(output_dir, "model_*.pth")))
    return [p for _, p in sorted((int(m.group(1)), p) for m, p in found if m)]


class CheckpointManager:
    """Writes a run's checkpoints into `output_dir` and keeps their number bounded.

    * ``model_XXXX.pth`` every ``CHECKPOINT_PERIOD`` epochs; only the newest `keep` stay
      (0 = keep all);
    * ``model_final.pth`` at the end, ``model_best.pth`` (weights + metric) on a new best
      validation score, ``model_interrupted.pth`` on Ctrl-C/SIGTERM (removed again once a
      newer periodic or final checkpoint exists);
    * ``last_checkpoint`` names the newest resumable file and is updated after the file is
      completely written, so a crash mid-save never points at a partial file.

    With `enabled` False (ranks other than 0) nothing is written.
    """

    def __init__(self, output_dir: str, keep: int = 2, enabled: bool = True) -> None:
        if keep < 0:
            raise ValueError(f"SOLVER.CHECKPOINT_KEEP must be >= 0 (0 = keep all), got {keep}.")
        self.output_dir = output_dir
        self.keep = int(keep)
        self.enabled = enabled

    def path(self, name: str) -> str:
        return os.path.join(self.output_dir, name)

    def save(self, name: str, state: Mapping[str, Any], resumable: bool = True) -> Optional[str]:
        """Write `state` to ``output_dir/name``; resumable files update the pointer and pruning."""
        if not self.enabled:
            return None
        try:
            path = save_checkpoint(self.path(name), **state)
        except DiskFullError as e:
            last = last_checkpoint(self.output_dir)
            kept = f" --resume continues from {os.path.basename(last)}, the last complete checkpoint." if last else ""
            raise DiskFullError(f"{e}{kept}") from None
        if resumable:
            atomic_write_text(self.path(LAST_CHECKPOINT_FILE), name + "\n")
            self._prune(name)
        return path

    def _prune(self, newest: str) -> None:
        if newest != INTERRUPT_NAME:
            stale = self.path(INTERRUPT_NAME)
            if os.path.isfile(stale):
                os.remove(stale)
        if self.keep == 0:
            return
        periodic = _periodic_files(self.output_dir)
        for old in periodic[: max(0, len(periodic) - self.keep)]:
            if os.path.basename(old) != newest:
                os.remove(old)


__all__ = [
    "BEST_NAME",
    "FINAL_NAME",
    "INTERRUPT_NAME",
    "LAST_CHECKPOINT_FILE",
    "CheckpointError",
    "read_safetensors",
    "CheckpointManager",
    "last_checkpoint",
    "load_checkpoint",
    "load_model_state",
    "model_state",
    "periodic_name",
    "read_checkpoint",
    "save_checkpoint",
]
