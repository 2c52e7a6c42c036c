"""Where and how a run computes: device, AMP, cuDNN/TF32 switches, SyncBN, channels_last, DDP.

Everything here happens once, before the first step; the loop then only reads the result
(:class:`DeviceSetup`) and the wrapped model.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from reid.utils.device import resolve_device
from reid.utils.process import get_world_size

from .distributed import convert_sync_bn, local_cuda_index, wrap_ddp

logger = logging.getLogger(__name__)

AMP_MODES = ("off", "bf16", "fp16")


@dataclass(frozen=True)
class DeviceSetup:
    """The device a process trains on and the numeric settings that go with it."""

    device: torch.device
    amp_dtype: Optional[torch.dtype]  # autocast dtype, None without AMP
    use_scaler: bool  # fp16 needs a gradient scaler
    channels_last: bool  # NHWC inputs and weights (pays off with cuDNN only)


def amp_settings(mode: str, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """(autocast dtype or None, use a GradScaler) for ``SOLVER.AMP`` on `device`."""
    key = str(mode).lower()
    if key == "off":
        return None, False
    if key == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(
                f"SOLVER.AMP bf16 needs a GPU with bfloat16 support; {torch.cuda.get_device_name(device)} "
                "has none. Use SOLVER.AMP fp16 on this GPU."
            )
        return torch.bfloat16, False
    if key == "fp16":
        if device.type != "cuda":
            raise ValueError(
                f"SOLVER.AMP fp16 needs CUDA (float16 training relies on a CUDA gradient scaler), "
                f"but the run is on {device}. Use SOLVER.AMP bf16 (works on CPU) or SOLVER.AMP off."
            )
        return torch.float16, True
    raise ValueError(f"Unknown SOLVER.AMP {mode!r}. Valid values: {', '.join(AMP_MODES)}.")


def pick_device(spec: str) -> torch.device:
    """``MODEL.DEVICE`` as this process's device; under torchrun each process takes its own GPU."""
    device = resolve_device(spec)
    if device.type == "cuda" and get_world_size() > 1:
        # One GPU per process: torchrun's LOCAL_RANK picks it (an index in MODEL.DEVICE
        # would put every process on the same GPU).
        local = torch.device("cuda", local_cuda_index(int(os.environ.get("LOCAL_RANK", 0))))
        if device.index is not None and device.index != local.index:
            logger.warning("MODEL.DEVICE %s ignored under torchrun: this process uses %s.", spec, local)
        device = local
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def configure_backends(device: torch.device, deterministic: bool) -> None:
    """cuDNN autotuning or determinism, and TF32 matmuls, for a CUDA run (nothing on the CPU)."""
    if device.type != "cuda":
        return
    torch.backends.cudnn.deterministic = deterministic
    # Autotuning picks the fastest kernels for the fixed input size, but non-deterministically.
    torch.backends.cudnn.benchmark = not deterministic
    if deterministic:
        # cuDNN's flag alone leaves other CUDA kernels free to use atomics (the cross-entropy
        # backward, adaptive max pooling's backward in MGN). warn_only: an op without a
        # deterministic kernel warns instead of stopping the run. cuBLAS needs its workspace
        # setting before its first use, i.e. now.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True


def setup_device(cfg) -> DeviceSetup:
    """Resolve MODEL.DEVICE / SOLVER.AMP / SOLVER.CHANNELS_LAST and set the backend switches."""
    device = pick_device(str(cfg.MODEL.DEVICE))
    amp_dtype, use_scaler = amp_settings(cfg.SOLVER.AMP, device)
    configure_backends(device, bool(cfg.CUDNN_DETERMINISTIC))
    # channels_last only pays off with cuDNN kernels; on the CPU it just adds copies.
    channels_last = bool(cfg.SOLVER.CHANNELS_LAST) and device.type == "cuda"
    return DeviceSetup(device, amp_dtype, use_scaler, channels_last)


def place_model(model: nn.Module, setup: DeviceSetup, sync_bn: bool) -> nn.Module:
    """`model` on the device, with SyncBN (multi-GPU) and channels_last as configured."""
    model = model.to(setup.device)
    if sync_bn:
        model = convert_sync_bn(model, setup.device)
    if setup.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def wrap_for_training(model: nn.Module, setup: DeviceSetup, sometimes_frozen: Iterable[nn.Parameter]) -> nn.Module:
    """The module the loop calls: DDP around `model` when several processes run, else `model`.

    Parameters that get no gradient in some iterations (a backbone frozen for the first
    iterations) need DDP's unused-parameter search.
    """
    return wrap_ddp(model, setup.device, find_unused_parameters=bool(list(sometimes_frozen)))


__all__ = ["AMP_MODES", "DeviceSetup", "amp_settings", "configure_backends", "pick_device", "place_model",
           "setup_device", "wrap_for_training"]
