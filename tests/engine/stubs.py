"""Tiny stand-ins for the data and model layers, used by the engine tests.

They follow the contracts of docs/architecture.md (dict batches, ``loss_*`` dicts,
``last_stats``, a sampler with ``set_epoch(epoch, start_batch)``) but run in milliseconds,
so the trainer's own logic (resume, signals, NaN guard, model selection) can be tested
exactly and quickly. Deliberately random in the same places as the real pipeline: the
dataset draws augmentation noise from torch's RNG, the model has dropout.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, Sampler

from reid.config import get_cfg
from reid.utils.process import derive_seed, sample_seeds, seed_sample

NUM_CLASSES = 6


class StubImages(Dataset):
    """`n` images of 3x8x4 uint8: a fixed pattern per identity plus random noise (augmentation)."""

    def __init__(self, n: int = 48, num_classes: int = NUM_CLASSES) -> None:
        g = torch.Generator().manual_seed(123)
        self.bases = torch.randint(0, 200, (num_classes, 3, 8, 4), generator=g, dtype=torch.uint8)
        self.pids = [i % num_classes for i in range(n)]

    def __len__(self) -> int:
        return len(self.pids)

    def __getitem__(self, key) -> dict:
        i, seed = key  # (index, per-sample seed), as the real train sampler sends them
        seed_sample(seed)
        pid = self.pids[i]
        noise = torch.randint(0, 40, (3, 8, 4), dtype=torch.uint8)  # global torch RNG, like the transforms
        return {"images": self.bases[pid] + noise, "targets": pid, "camids": 0, "img_paths": f"img{i}.jpg"}


class StubSampler(Sampler):
    """Seeded per-epoch permutation with ``set_epoch(epoch, start_batch)``; rank-sharded; yields
    ``(index, seed)`` with the per-sample seeds of the real samplers."""

    def __init__(self, n: int, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.rank, self.world_size = rank, world_size
        self.num_batches = (n // world_size) // batch_size
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        self.epoch, self.start_batch = epoch, start_batch

    def indices(self, epoch: int) -> np.ndarray:
        perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
        mine = perm[self.rank :: self.world_size]
        return mine[: self.num_batches * self.batch_size]

    def __iter__(self):
        idx = self.indices(self.epoch)
        start = self.start_batch * self.batch_size
        seeds = sample_seeds(derive_seed(self.seed, self.epoch, self.rank), np.arange(start, len(idx)))
        return iter(zip(idx[start:].tolist(), seeds.tolist()))

    def __len__(self) -> int:
        return self.num_batches * self.batch_size


def stub_loader(cfg, num_workers: int = 0, rank: int = 0, world_size: int = 1, n: int = 48) -> DataLoader:
    """Loader over StubImages with the per-process batch ``IMS_PER_BATCH / world_size``."""
    batch = int(cfg.SOLVER.IMS_PER_BATCH) // world_size
    return DataLoader(
        StubImages(n),
        batch_size=batch,
        sampler=StubSampler(n, batch, int(cfg.SEED), rank, world_size),
        drop_last=True,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
        generator=torch.Generator().manual_seed(int(cfg.SEED)),
    )


class StubHead(nn.Module):
    """Cosine head with class weights ``weight`` and a running buffer (like CurricularFace's t)."""

    def __init__(self, d: int, c: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c, d) * 0.1)
        self.register_buffer("t", torch.zeros(()))

    def forward(self, feats: torch.Tensor, targets: torch.Tensor):
        cos = F.linear(F.normalize(feats), F.normalize(self.weight))
        mask = F.one_hot(targets, cos.shape[1]).bool()
        with torch.no_grad():
            self.t.mul_(0.9).add_(0.1 * cos[mask].mean())
        return 16.0 * cos, cos[mask].mean().detach(), cos[~mask].mean().detach()


class StubReID(nn.Module):
    """backbone -> pool -> BNNeck (frozen shift) -> cosine head; returns two loss terms.

    `nan_at`: the 0-based forward call (counted per instance) whose losses are NaN.
    `on_forward(call_index)`: a hook run at the start of each forward (tests use it to send
    signals or stop at a chosen iteration). `delay`: seconds to sleep per forward.
    """

    def __init__(self, num_classes: int = NUM_CLASSES, nan_at: Optional[int] = None,
                 on_forward: Optional[Callable[[int], None]] = None, delay: float = 0.0) -> None:
        super().__init__()
        torch.manual_seed(0)  # identical initial weights for every run of a test
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.dropout = nn.Dropout(0.2)
        self.neck = nn.BatchNorm1d(8)
        self.neck.bias.requires_grad_(False)
        self.head = StubHead(8, num_classes)
        self.nan_at, self.on_forward, self.delay = nan_at, on_forward, delay
        self.calls = 0
        self.last_stats: Dict[str, float] = {}

    def forward(self, images: torch.Tensor, targets: Optional[torch.Tensor] = None):
        call = self.calls
        self.calls += 1
        if self.on_forward is not None:
            self.on_forward(call)
        if self.delay:
            time.sleep(self.delay)
        x = images.float() / 255.0
        feats = self.neck(self.dropout(self.backbone(x).mean(dim=(2, 3))))
        if not self.training:
            return feats
        logits, s_p, s_n = self.head(feats, targets)
        loss_id = F.cross_entropy(logits, targets)
        loss_reg = 0.01 * feats.pow(2).mean()
        if self.nan_at is not None and call == self.nan_at:
            loss_id = loss_id * float("nan")
        self.last_stats = {"s_p": s_p, "s_n": s_n}
        return {"loss_id": loss_id, "loss_reg": loss_reg}


def stub_cfg(output_dir: str, **overrides):
    """A small config for the stubs: SGD + cosine, 2 epochs of 6 iterations, CPU."""
    cfg = get_cfg()
    cfg.OUTPUT_DIR = str(output_dir)
    cfg.MODEL.DEVICE = "cpu"
    cfg.SEED = 3
    s = cfg.SOLVER
    s.OPTIMIZER = "SGD"
    s.BASE_LR = 0.05
    s.MOMENTUM = 0.9
    s.SCHED = "cosine"
    s.WARMUP_ITERS = 3
    s.MAX_EPOCH = 2
    s.IMS_PER_BATCH = 8
    s.LOG_PERIOD = 2
    s.CHECKPOINT_PERIOD = 1
    s.CHECKPOINT_KEEP = 0
    s.CHANNELS_LAST = False
    cfg.TEST.EVAL_PERIOD = 1
    for key, value in overrides.items():
        node = cfg
        parts = key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    return cfg


def model_state(path: str) -> Dict[str, torch.Tensor]:
    """The model weights stored in checkpoint `path`."""
    return torch.load(path, weights_only=True)["model"]


def assert_same_weights(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs (max abs diff {(a[k].float() - b[k].float()).abs().max()})"


def touch(path: str) -> None:
    """Create an empty marker file (the SIGTERM test waits for one)."""
    with open(path, "w"):
        pass
