"""Multi-process training helpers: torchrun initialisation, rank queries, SyncBN and DDP.

Launch with ``torchrun --nproc_per_node N tools/train.py ...``: torchrun sets ``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT``, and
:func:`init_distributed` reads them. Without them (a plain ``python tools/train.py``) every
helper here behaves as a single process of rank 0, so the trainer needs no special case.
"""
from __future__ import annotations

import logging
import os
import sys
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable, Iterator, Optional, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from reid.utils.process import get_rank, get_world_size, is_main_process
from reid.utils.stop_request import StopRequested

T = TypeVar("T")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: Optional[str] = None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError as e:
        raise ValueError(f"Environment variable {name}={value!r} must be an integer (torchrun sets it).") from e


# Rank 0 evaluates (and saves) while the other ranks wait in a barrier; PyTorch's default of
# 10 minutes for NCCL would abort a job whose evaluation is long (MSMT17 with re-ranking).
PROCESS_GROUP_TIMEOUT = timedelta(hours=2)
# Joining the group, though, is quick unless something is wrong (a rank 0 that cannot be
# reached, a process that never started): that must not wait for hours.
DEFAULT_JOIN_TIMEOUT = 300.0
MAX_JOIN_TIMEOUT = 7 * 24 * 3600.0


def local_cuda_index(local_rank: int) -> int:
    """The CUDA device index of the process with `local_rank` on its node.

    Normally ``local_rank`` itself. A launcher that gives each process its own GPU (SLURM
    binding through a per-task ``CUDA_VISIBLE_DEVICES``) shows every process one device,
    which is then index 0 whatever the local rank. More processes than GPUs otherwise is an
    error: processes sharing a GPU would silently run slower.
    """
    count = torch.cuda.device_count()
    if local_rank < count:
        return local_rank
    if count == 1 and os.environ.get("CUDA_VISIBLE_DEVICES", "").strip():
        return 0
    raise RuntimeError(
        f"LOCAL_RANK {local_rank} but only {count} CUDA device(s) are visible; lower "
        "--nproc_per_node to the number of GPUs."
    )


def init_distributed(device_spec: str = "auto") -> DistInfo:
    """Join the process group described by torchrun's environment variables, if any.

    Backend: NCCL when training on CUDA, gloo on the CPU (``device_spec`` is
    ``MODEL.DEVICE``). On CUDA each process binds to ``cuda:LOCAL_RANK``. Returns a
    single-process :class:`DistInfo` when ``WORLD_SIZE`` is unset or 1. Calling it again
    after the group exists just reports the current one.
    """
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, dist.get_backend())
    if world_size <= 1:
        return DistInfo(0, 1, 0, None)
    if not dist.is_available():
        raise RuntimeError(
            "WORLD_SIZE > 1 but this PyTorch build has no torch.distributed; run a single process "
            "or install a PyTorch build with distributed support."
        )
    spec = str(device_spec).lower()
    use_cuda = torch.cuda.is_available() and spec != "cpu"
    if use_cuda:
        torch.cuda.set_device(local_cuda_index(local_rank))
    backend = "nccl" if use_cuda else "gloo"
    missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if k not in os.environ]
    if missing:
        raise RuntimeError(
            f"WORLD_SIZE={world_size} but {', '.join(missing)} is not set; launch with "
            "torchrun --nproc_per_node N tools/train.py ... (it sets them)."
        )
    with _bounded_join(rank, world_size):
        dist.init_process_group(backend=backend, init_method="env://", rank=rank, world_size=world_size,
                                timeout=PROCESS_GROUP_TIMEOUT)
    return DistInfo(rank, world_size, local_rank, backend)


def join_timeout() -> float:
    """Seconds a process waits for all the others to join (``REID_DIST_JOIN_TIMEOUT``, default 300)."""
    value = os.environ.get("REID_DIST_JOIN_TIMEOUT", "").strip() or str(DEFAULT_JOIN_TIMEOUT)
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_JOIN_TIMEOUT:
        raise ValueError(f"Environment variable REID_DIST_JOIN_TIMEOUT={value!r} must be a number of seconds > 0 "
                         f"and at most {MAX_JOIN_TIMEOUT:g} (a week).")
    return seconds


@contextmanager
def _bounded_join(rank: int, world_size: int) -> Iterator[None]:
    """End the process with one line if joining the process group takes longer than
    :func:`join_timeout`. PyTorch waits for the group's own timeout (hours, see
    PROCESS_GROUP_TIMEOUT) for a rank 0 that cannot be reached or processes that never start,
    inside a C++ call no Python exception can interrupt: so a watchdog thread exits."""
    seconds = join_timeout()
    joined = threading.Event()
    endpoint = f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}"

    def watchdog() -> None:
        if not joined.wait(seconds):
            sys.stderr.write(
                f"error: process {rank} of {world_size} waited {seconds:g} s for the others to join at {endpoint} "
                "(MASTER_ADDR:MASTER_PORT): check that every process of the job started (WORLD_SIZE), that this "
                "address reaches rank 0's machine and its port is open; REID_DIST_JOIN_TIMEOUT=SECONDS waits longer.\n")
            sys.stderr.flush()
            os._exit(1)

    threading.Thread(target=watchdog, name="reid-join-watchdog", daemon=True).start()
    try:
        yield
    finally:
        joined.set()


def barrier() -> None:
    """Wait for every process (no-op when not distributed)."""
    if get_world_size() > 1:
        dist.barrier()


class PeerFailedError(RuntimeError):
    """Another process of the run failed; this one stops too instead of waiting for it."""


# What run_on_main's one all-reduce carries (the maximum wins): success, a stop signal's number
# (the work was abandoned for a stop, not failed), or a failure.
_FAILED = 1 << 10


def agree_on_failure(failed: bool, what: str, device: torch.device, stopped_by: int = 0) -> None:
    """Tell every process whether any of them failed at `what`; raise on the healthy ones if so.

    Call it on every rank at the same point. Without it, a rank that raises (rank 0 alone
    evaluates and writes checkpoints) leaves the others blocked in their next collective until
    the process-group timeout (hours). The one all-reduce doubles as the barrier that point
    needs anyway. The failed rank raises its own error itself, after this call. `stopped_by`
    (a signal number) says the work was abandoned for a stop: the other ranks then raise
    :class:`~reid.utils.stop_request.StopRequested` too, so that all of them stop alike.
    """
    if get_world_size() <= 1:
        return
    flag = torch.tensor([float(_FAILED if failed else stopped_by)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    outcome = int(flag.item())
    if failed or stopped_by:
        return
    if outcome >= _FAILED:
        raise PeerFailedError(
            f"Another process failed during {what} (its error is in rank 0's log or on the console); "
            f"process {get_rank()} stops too."
        )
    if outcome > 0:
        raise StopRequested(outcome, f"{what} on another process")


def run_on_main(fn: Callable[[], T], what: str, device: torch.device) -> Optional[T]:
    """Run `fn` on rank 0 only, then agree with every rank on whether it failed.

    Returns `fn`'s result on rank 0 (None elsewhere). If it raised, rank 0 re-raises that
    error and every other rank raises :class:`PeerFailedError` at once; if it gave up for a
    stop signal (:class:`~reid.utils.stop_request.StopRequested`), every rank raises that.
    """
    result: Optional[T] = None
    error: Optional[BaseException] = None
    if get_rank() == 0:
        try:
            result = fn()
        except Exception as e:  # re-raised below, after the other ranks have been told
            error = e
    stopped_by = error.signum if isinstance(error, StopRequested) else 0
    agree_on_failure(error is not None and not stopped_by, what, device, stopped_by)
    if error is not None:
        raise error
    return result


#: How long the ranks wait for each other at the end of a run before each leaves on its own.
LEAVE_TIMEOUT = timedelta(seconds=20)


def cleanup_distributed() -> None:
    """Leave the process group if one was created (call at the end of a run).

    The ranks first meet (gloo: a barrier that gives up after :data:`LEAVE_TIMEOUT`, so a rank whose
    peer is gone still leaves): rank 0 hosts the group's store, and a rank still using it when rank 0
    has left aborts in gloo's teardown ("terminate called without an active exception", exit -6).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    with suppress(Exception):  # a peer failed or left: nothing to wait for
        if dist.get_backend() == "gloo":
            dist.monitored_barrier(timeout=LEAVE_TIMEOUT)
        else:
            dist.barrier()
    dist.destroy_process_group()


def convert_sync_bn(model: nn.Module, device: torch.device) -> nn.Module:
    """BatchNorm -> SyncBatchNorm for a multi-process run on GPUs.

    Statistics are then computed over the whole global batch (P x K over all ranks) instead
    of each rank's slice. PyTorch's SyncBatchNorm works only on GPU tensors, so on the CPU
    the model is returned unchanged with a warning.
    """
    if get_world_size() <= 1:
        return model
    if device.type != "cuda":
        logger.warning("MODEL.SYNC_BN is on but SyncBatchNorm needs CUDA; keeping per-process BatchNorm on %s.", device)
        return model
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def wrap_ddp(model: nn.Module, device: torch.device, find_unused_parameters: bool = False) -> nn.Module:
    """Wrap `model` in DistributedDataParallel when more than one process runs.

    `find_unused_parameters` must be True while some trainable parameters get no gradient
    in an iteration, as when the backbone is frozen for ``SOLVER.FREEZE_ITERS`` iterations
    (the trainer passes it then). Permanently frozen parameters (the BNNeck shift,
    ``requires_grad=False``) are ignored by DDP and need nothing; the models freeze the
    parts no configured loss reaches for this reason.

    Buffers: with SyncBatchNorm every rank computes the same running statistics (and the
    CurricularFace ``t`` is all-reduced by the head), so rank 0's buffers are not broadcast
    before every forward; with per-process BatchNorm they are, to keep the ranks' models
    identical. Gradients are bucket views (no copy into the all-reduce buckets).
    """
    if get_world_size() <= 1:
        return model
    has_sync_bn = any(isinstance(m, nn.SyncBatchNorm) for m in model.modules())
    kwargs = dict(find_unused_parameters=find_unused_parameters, broadcast_buffers=not has_sync_bn,
                  gradient_as_bucket_view=True)
    if device.type == "cuda":
        return nn.parallel.DistributedDataParallel(model, device_ids=[device.index], output_device=device.index, **kwargs)
    return nn.parallel.DistributedDataParallel(model, **kwargs)


__all__ = [
    "DistInfo",
    "PROCESS_GROUP_TIMEOUT",
    "PeerFailedError",
    "agree_on_failure",
    "barrier",
    "cleanup_distributed",
    "convert_sync_bn",
    "get_rank",
    "get_world_size",
    "init_distributed",
    "join_timeout",
    "is_main_process",
    "local_cuda_index",
    "run_on_main",
    "wrap_ddp",
]
