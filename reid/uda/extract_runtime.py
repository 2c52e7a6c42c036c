"""The feature pass of the clustering step in the fastest runtime that can run it (UDA.EXTRACT_RUNTIME).

Before every epoch of learning without labels, :class:`reid.uda.hooks.ClusterEachEpoch` extracts the
features of every training crop with the current weights, and that pass is most of a clustering
step. On a CPU, eager PyTorch runs a re-ID model's many small convolutions several times slower
than ONNX Runtime's fused graph (OSNet x0.25 on 2 cores: 155 against 675 crops/s, docs/benchmarks.md),
so the pass can run the current weights exported to ONNX instead:

* ``torch``: :func:`reid.evaluation.extract.extract_features`, as evaluation runs it.
* ``onnxruntime``: every epoch the model is exported as ``tools/export.py`` exports it (the eval-mode
  graph of a copy: raw pixels in, L2-normalised features out), opened in ONNX Runtime on the CPU
  and run over the same loader; features equal PyTorch fp32's to about 1e-7 (cosine 1.0000).
  The export lives above this layer (reid.export, reid.inference): the caller that builds the run
  (reid.training) hands it in (``runtimes``: :func:`reid.inference.cluster_runtime.cluster_runtimes`).
* ``auto`` (default): ``onnxruntime`` where it is known to pay and to give the same features: the
  model on the CPU, TEST.AMP off (bf16 is PyTorch's arithmetic), TEST.FLIP off (the exported file
  returns normalised features; flip averaging averages unnormalised ones), at least
  :data:`AUTO_MIN_IMAGES` crops (below, the export of every epoch costs about what it saves), and
  the runtime handed in with its packages installed; ``torch`` otherwise, and for the rest of the
  run when the model cannot be exported. The choice follows from the settings, the data's size and
  the installed packages, never from a timing, so a resumed run extracts as the interrupted one did.

One log line names the runtime and why (at the first extraction, and again if an export fails).
The caller sets the model's ``neck_feat`` before the call (the export takes the model as it is);
the model keeps its train/eval mode. Nothing here draws from the random streams (and
:class:`~reid.uda.hooks.ClusterEachEpoch` restores them around extraction anyway).
"""
from __future__ import annotations

import importlib
import logging
import sys
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from reid.evaluation.extract import check_feature_batch, extract_features
from reid.modeling import takes_camera_ids
from reid.utils.logger import progress_bar
from reid.utils.stop_request import check_stop

logger = logging.getLogger(__name__)

KEY = "UDA.EXTRACT_RUNTIME"
#: The values of UDA.EXTRACT_RUNTIME.
EXTRACT_RUNTIMES = ("auto", "torch", "onnxruntime")
#: The fewest training crops from which ``auto`` exports the model every epoch. The export and the
#: session cost 4-9 s a time on 2 cores (OSNet x0.25, measured in a clustering step: 8.9 s); OSNet
#: x0.25 saves about 5 ms a crop (155 -> 635 crops/s), so the export repays itself from about 2,000
#: crops, and clearly (twice over) from 4,000. Small data (tests, demos, a site's first videos) keeps PyTorch.
AUTO_MIN_IMAGES = 4000

#: ``runner(pixels uint8 [B, 3, H, W], camids int64 [B] or None) -> L2-normalised features [B, D]``.
Runner = Callable[[torch.Tensor, Optional[torch.Tensor]], np.ndarray]


@dataclass(frozen=True)
class ExtractRuntime:
    """A runtime other than PyTorch for the feature pass: ``build(model, input_size) -> Runner`` (the
    model's current weights), the packages it needs and how to install them."""

    build: Callable[[nn.Module, Tuple[int, int]], Runner]
    packages: Tuple[str, ...] = ()
    install_hint: str = ""

    def missing(self) -> List[str]:
        """The packages of ``packages`` that cannot be imported here."""
        missing = []
        for name in self.packages:
            try:
                importlib.import_module(name)
            except ImportError:
                missing.append(name)
        return missing


#: The runtimes a caller hands in: name (one of EXTRACT_RUNTIMES[2:]) -> ExtractRuntime.
Runtimes = Mapping[str, ExtractRuntime]


def check_extract_runtime(value: str, flip: bool = False) -> str:
    """UDA.EXTRACT_RUNTIME `value` lower-cased, or a ValueError naming the key: an unknown name, or
    ``onnxruntime`` with TEST.FLIP on (the exported file returns normalised features)."""
    name = str(value).lower()
    if name not in EXTRACT_RUNTIMES:
        raise ValueError(f"{KEY} {value!r} is not one of: {', '.join(EXTRACT_RUNTIMES)} (auto: ONNX Runtime on a CPU "
                         "where it pays, else PyTorch).")
    if name != "torch" and name != "auto" and flip:
        raise ValueError(f"{KEY} {name} runs the exported model, which returns normalised features, but TEST.FLIP "
                         f"True averages unnormalised ones: set TEST.FLIP False, or {KEY} auto or torch.")
    return name


def _unavailable(name: str, runtimes: Runtimes) -> str:
    """Why runtime `name` cannot run here ('' when it can)."""
    runtime = runtimes.get(name)
    if runtime is None:
        return f"this run was built without the {name} runtime (reid.training hands it in)"
    missing = runtime.missing()
    return f"{', '.join(missing)} not installed ({runtime.install_hint})" if missing else ""


def choose_runtime(requested: str, device: torch.device, flip: bool = False, amp: str = "off",
                   num_images: Optional[int] = None, runtimes: Optional[Runtimes] = None) -> Tuple[str, str]:
    """``(runtime, why)``: what UDA.EXTRACT_RUNTIME `requested` comes to for `num_images` crops and a
    model on `device` with TEST.FLIP `flip` and TEST.AMP `amp` (see the module docstring).

    ``onnxruntime`` asked for by name where it cannot run is an ImportError saying what to install
    (it runs on the CPU: a model on a GPU is exported to it all the same).
    """
    requested = check_extract_runtime(requested, flip)
    runtimes = runtimes or {}
    if requested == "torch":
        return "torch", f"{KEY} torch"
    if requested != "auto":
        why = _unavailable(requested, runtimes)
        if why:
            raise ImportError(f"{KEY} {requested} exports the model each epoch and runs it in {requested}, but {why}; "
                              f"or set {KEY} auto or torch.")
        return requested, f"{KEY} {requested}"
    device = torch.device(device)
    why = ""
    if device.type != "cpu":
        why = f"the model is on {device.type}, where PyTorch runs it"
    elif amp != "off":
        why = f"TEST.AMP {amp} is PyTorch's reduced precision"
    elif flip:
        why = "TEST.FLIP averages unnormalised features, which the exported model does not return"
    elif num_images is not None and num_images < AUTO_MIN_IMAGES:
        why = f"{num_images} crops are too few to repay an export every epoch (from {AUTO_MIN_IMAGES} on)"
    else:
        why = _unavailable("onnxruntime", runtimes)
    if why:
        return "torch", f"{KEY} auto: {why}"
    return "onnxruntime", (f"{KEY} auto: the model exported each epoch runs on the CPU several times faster than in "
                           "PyTorch, with the same features")


def runner_features(runner: Runner, loader: Iterable[dict], camids: bool = False) -> torch.Tensor:
    """The L2-normalised float32 features ``[N, D]`` of `loader`'s images from `runner` (given each
    image's camera id with `camids`); an all-zero or NaN feature is refused as in evaluation."""
    feats: List[torch.Tensor] = []
    total = len(loader) if hasattr(loader, "__len__") else None
    with progress_bar(total, "extract", enabled=sys.stderr.isatty(), leave=False) as bar:
        for batch in loader:
            check_stop("feature extraction")
            cams = torch.as_tensor(batch["camids"], dtype=torch.int64) if camids else None
            f = torch.from_numpy(np.array(runner(batch["images"], cams), dtype=np.float32))
            check_feature_batch(f, batch["img_paths"])
            feats.append(f)
            bar.update(1)
    if not feats:
        raise ValueError("The loader yielded no images: nothing to extract.")
    return torch.cat(feats)


class ClusterExtractor:
    """``extractor(model, loader, device) -> features [N, D]`` (L2-normalised float32, CPU) of the
    clustering step, in the runtime UDA.EXTRACT_RUNTIME (`runtime`) comes to for `num_images` crops
    (see the module docstring). `flip` and `amp` are TEST.FLIP and TEST.AMP, `input_size`
    INPUT.SIZE_TEST (the loader's crop size). A wrong value, or ``onnxruntime`` by name where it
    cannot run, is refused here, when the run is built.

    After the first call ``runtime`` is the runtime in use and ``reason`` why; the first call logs
    them in one line (and a failed export one more, a warning).
    """

    def __init__(self, runtime: str = "auto", flip: bool = False, amp: str = "off",
                 input_size: Sequence[int] = (256, 128), num_images: Optional[int] = None,
                 runtimes: Optional[Runtimes] = None) -> None:
        self.requested = check_extract_runtime(runtime, flip)
        self.runtimes: Dict[str, ExtractRuntime] = dict(runtimes or {})
        self.flip, self.amp = bool(flip), str(amp)
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.num_images = num_images
        self.runtime: Optional[str] = None
        self.reason = ""
        if self.requested not in ("auto", "torch"):  # a runtime asked for by name that cannot run: now
            choose_runtime(self.requested, torch.device("cpu"), self.flip, self.amp, num_images, self.runtimes)

    def _say(self, runtime: str, reason: str, warn: bool = False) -> None:
        self.runtime, self.reason = runtime, reason
        (logger.warning if warn else logger.info)(
            "Clustering extracts features with %s (%s).", "PyTorch" if runtime == "torch" else "ONNX Runtime", reason)

    def __call__(self, model: nn.Module, loader: Iterable[dict], device: torch.device) -> torch.Tensor:
        device = torch.device(device)
        first = self.runtime is None
        if first:
            n = self.num_images
            if n is None and hasattr(loader, "dataset") and hasattr(loader.dataset, "__len__"):
                n = len(loader.dataset)
            name, reason = choose_runtime(self.requested, device, self.flip, self.amp, n, self.runtimes)
        else:
            name, reason = self.runtime, self.reason
        if name != "torch":
            try:
                runner = self.runtimes[name].build(model, self.input_size)
            except Exception as e:  # noqa: BLE001  (the exporter's and the runtimes' error types vary)
                if self.requested == name:
                    raise RuntimeError(f"{KEY} {name}: the model could not be exported to it ({_first_line(e)}); set "
                                       f"{KEY} torch (or auto, which falls back to PyTorch).") from e
                # one line, and PyTorch for the rest of the run (the model's graph does not change)
                self._say("torch", f"{KEY} auto: the model could not be exported to ONNX Runtime ({_first_line(e)}), "
                                   "so PyTorch for the rest of the run", warn=True)
            else:
                if first:
                    self._say(name, reason)
                return runner_features(runner, loader, camids=takes_camera_ids(model))
        elif first:
            self._say(name, reason)
        return extract_features(model, loader, device, flip=self.flip, amp=self.amp).feats


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


__all__ = ["AUTO_MIN_IMAGES", "EXTRACT_RUNTIMES", "ClusterExtractor", "ExtractRuntime", "Runner", "Runtimes",
           "check_extract_runtime", "choose_runtime", "runner_features"]
