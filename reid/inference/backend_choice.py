"""Which runtime embeds a checkpoint's crops when the user names none: the fastest that gives its features.

A tracker embeds a frame's few crops per call, thousands of calls a sequence. On a CPU, eager
PyTorch runs those small batches of a re-ID model several times slower than ONNX Runtime's fused
graph, and collapses when another process holds a core (OSNet x0.25 on 2 cores with one busy
neighbour, docs/benchmarks.md "Tracking": 29.8 frames/s of embedding in PyTorch, 100.9 in ONNX
Runtime). So without ``--backend``, a checkpoint is exported in memory and run in ONNX Runtime
(:func:`auto_backend`) when all of these hold, and in PyTorch otherwise:

* the model runs on the CPU (on a GPU PyTorch is the fast path);
* ``TEST.FLIP`` is off and ``TEST.AMP`` is off: the exported graph returns normalised fp32 features,
  so flip averaging (of unnormalised ones) and reduced precision are PyTorch's alone, and the
  features would not be the ones the checkpoint gives;
* at least :data:`AUTO_MIN_CROPS` crops are to be embedded: the export costs a few seconds (OSNet
  x0.25: about 4 s on 2 cores) and saves about 3.5 ms a crop, so it pays from about 1,000 crops on;
  small jobs (tests, a short clip) keep PyTorch;
* ONNX Runtime and the exporter's packages are installed (``pip install 'circle-reid[export]'``).

The choice follows from the settings, the work and the installed packages, never from a timing, so
two runs of the same command embed alike. The features agree with PyTorch fp32 to about 1e-6
(cosine 1.0000, ``benchmarks/bench_extract.py``); the tools record the backend in their metrics.
"""
from __future__ import annotations

import importlib.util
from typing import Any, Optional, Tuple, Union

import torch

from reid.export.files import ONNX_EXTRA_HINT
from reid.utils.device import resolve_device

#: The fewest crops from which an unnamed backend is ONNX Runtime (see the module docstring).
AUTO_MIN_CROPS = 2000
#: What exporting to ONNX and running the file needs (torch's exporter is built on onnx and onnxscript).
ONNX_PACKAGES = ("onnxruntime", "onnx", "onnxscript")
#: The flag that keeps PyTorch, named in every line that says ONNX Runtime was chosen.
KEEP_TORCH = "--backend torch"


def missing_packages() -> Tuple[str, ...]:
    """The packages of :data:`ONNX_PACKAGES` that are not installed (found without importing them)."""
    return tuple(name for name in ONNX_PACKAGES if importlib.util.find_spec(name) is None)


def auto_backend(cfg: Any, device: Optional[Union[str, torch.device]], crops: Optional[int]) -> Tuple[Optional[str], str]:
    """``(backend, why)`` for a checkpoint of config `cfg` on `device` (None: ``cfg.MODEL.DEVICE``) that
    will embed `crops` crops (None: unknown, PyTorch): ``"onnxruntime"`` when every condition of the
    module docstring holds, else None (PyTorch). `why` is one line saying which and why, empty where
    PyTorch is the plain answer (a GPU, a small job): a tool prints it when it is not empty."""
    where = resolve_device(str(cfg.MODEL.DEVICE) if device is None else str(device))
    amp = str(cfg.TEST.AMP).lower()
    if where.type != "cpu" or crops is None or crops < AUTO_MIN_CROPS:
        return None, ""
    if bool(cfg.TEST.FLIP):
        why = "TEST.FLIP True averages unnormalised features, which only PyTorch computes"
    elif amp != "off":
        why = f"TEST.AMP {amp} is PyTorch's reduced precision"
    elif missing_packages():
        why = f"{', '.join(missing_packages())} not installed ({ONNX_EXTRA_HINT}: several times faster on a CPU)"
    else:
        return "onnxruntime", (f"embedding with ONNX Runtime: the checkpoint exported now ({crops} crops to embed on "
                               f"the CPU, several times faster than PyTorch, same features); {KEEP_TORCH} keeps "
                               "PyTorch")
    return None, f"embedding with PyTorch, not ONNX Runtime ({crops} crops on the CPU): {why}"


__all__ = ["AUTO_MIN_CROPS", "KEEP_TORCH", "ONNX_PACKAGES", "auto_backend", "missing_packages"]
