"""Turning the MODEL.DEVICE setting into a torch device."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch


def resolve_device(spec: str) -> torch.device:
    """Turn ``MODEL.DEVICE`` ("auto", "cpu", "cuda", "cuda:N") into a `torch.device`.

    "auto" picks CUDA when it is available, else the CPU. Asking for CUDA on a machine
    without it is an error rather than a silent CPU fallback: a run configured for a GPU
    would otherwise take hours longer without telling anyone. A CUDA device always comes
    back with its index ("cuda" -> the current device, normally ``cuda:0``), because
    ``torch.cuda.set_device`` and DistributedDataParallel refuse a device without one.
    """
    text = str(spec).strip().lower()
    if text in ("", "auto"):
        text = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except RuntimeError as e:
        raise ValueError(
            f"MODEL.DEVICE {spec!r} is not a device; use 'auto', 'cpu', 'cuda' or 'cuda:N'."
        ) from e
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"MODEL.DEVICE is {spec!r} but CUDA is not available on this machine; "
                "set MODEL.DEVICE cpu (or auto)."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"MODEL.DEVICE is {spec!r} but only {torch.cuda.device_count()} CUDA device(s) "
                "exist; pick an index below that."
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"MODEL.DEVICE {spec!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'.")
    return device


__all__ = ["resolve_device"]


@contextmanager
def torch_threads(num: int) -> Iterator[None]:
    """Run the block with `num` torch intra-op threads, restoring the count afterwards.

    Used around the light tensor work (resizing, stacking crops) that feeds another runtime:
    ONNX Runtime's and OpenVINO's threads keep spinning between calls, and torch's own pool
    fighting them for the same cores made each frame of a tracker 1.5x slower on 2 cores
    (docs/benchmarks.md, "Tracking").
    """
    before = torch.get_num_threads()
    torch.set_num_threads(num)
    try:
        yield
    finally:
        torch.set_num_threads(before)
