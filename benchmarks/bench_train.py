#!/usr/bin/env python
"""Training throughput (images/s) and peak memory of the real training step.

Each measurement runs the trainer itself (``Trainer.train``: the loop's step, i.e. forward,
loss, NaN check, backward, optimizer step, and every built-in hook around it, LR schedule and
metrics logger included) for ResNet50 at 256x128 and MGN at 384x128 (the paper's input sizes),
with 751 identities (Market-1501) and the Circle head; a timing hook reads the clock after the
warm-up steps and after the last one. ``--model resnet18 --batch-size 64`` (96x48) is
the demo's step (configs/Demo). Two data sources:

* default: one batch of random uint8 images already on the device (compute only);
* ``--with-loader``: the real pipeline (JPEG decoding, augmentation, collation, host-to-device
  copy) over a generated synthetic dataset of 128x64 JPEGs (Market-1501's crop size), to see
  whether data loading limits training. ``benchmarks/bench_loader.py`` measures the pipeline
  alone.

Timing: ``--warmup`` untimed iterations (cuDNN autotuning, allocator warm-up), then ``--iters``
timed ones, with ``torch.cuda.synchronize()`` before and after the timed loop. Each model runs
in its own subprocess so that peak memory (CUDA: ``max_memory_allocated``; CPU: the process's
``ru_maxrss``, which includes the Python/torch baseline but not loader workers) is its own.

    python benchmarks/bench_train.py --device cpu --batch-size 8 --iters 3 --warmup 1
    python benchmarks/bench_train.py --device cuda --amp bf16 --channels-last
    python benchmarks/bench_train.py --device cuda --amp fp16 --channels-last --with-loader --workers 8
    python benchmarks/bench_train.py --device cuda --grid --workers 8   # every row of docs/benchmarks.md

``--grid`` runs every combination for both models in one call: AMP off / bf16 / fp16 (CUDA
only) x channels_last off / on (CUDA only), in-memory, then the fastest setting per model
again with the real loader; the table shows which of compute or loading sets the pace.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from reid.engine import HookBase  # noqa: E402

MODELS = {
    # name: (meta architecture, backbone, input [H, W])
    "resnet50": ("baseline", "resnet50", [256, 128]),
    "mgn": ("mgn", "resnet50", [384, 128]),
    "resnet18": ("baseline", "resnet18", [96, 48]),  # the demo (configs/Demo/resnet18_circle.yml)
    "vit_small": ("baseline", "vit_small_transreid", [256, 128]),  # ViT-S/16, stride 16, class token
    "vit_small_jpm": ("transreid", "vit_small_transreid", [256, 128]),  # + stride 12 and JPM (TransReID, no SIE)
    "clip_vit_b16": ("clipreid", "clip_vit_b16", [256, 128]),  # CLIP-ReID's ViT-B/16 (stride 16; needs open_clip)
    "clip_rn50": ("clipreid", "clip_rn50", [256, 128]),  # CLIP-ReID's RN50 (last stride 1)
}


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["all", *MODELS], default="all",
                   help="all = resnet50 and mgn (the paper's models)")
    p.add_argument("--size", nargs=2, type=int, metavar=("H", "W"), help="input size (default: the model's)")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    p.add_argument("--amp", choices=["off", "bf16", "fp16"], default="off")
    p.add_argument("--channels-last", action="store_true", help="channels_last memory format (CUDA only)")
    p.add_argument("--batch-size", type=int, default=0, help="images per step (default: 64 on CUDA, 8 on CPU)")
    p.add_argument("--iters", type=int, default=0, help="timed iterations (default: 50 on CUDA, 3 on CPU)")
    p.add_argument("--warmup", type=int, default=-1, help="untimed iterations first (default: 10 on CUDA, 1 on CPU)")
    p.add_argument("--with-loader", action="store_true", help="feed the real data pipeline (synthetic dataset)")
    p.add_argument("--workers", type=int, default=4, help="loader worker processes with --with-loader")
    p.add_argument("--data-root", default=os.path.join(tempfile.gettempdir(), "reid_bench_data"),
                   help="where the synthetic dataset is generated for --with-loader")
    p.add_argument("--num-classes", type=int, default=751, help="identities of the classifier (Market-1501: 751)")
    p.add_argument("--grid", action="store_true",
                   help="every AMP x channels_last combination per model, then the fastest with the loader")
    p.add_argument("--json", action="store_true", help="(internal) print one JSON result instead of a table")
    return p.parse_args(argv)


def _defaults(args: argparse.Namespace, device: torch.device) -> None:
    gpu = device.type == "cuda"
    args.batch_size = args.batch_size or (64 if gpu else 8)
    args.iters = args.iters or (50 if gpu else 3)
    args.warmup = args.warmup if args.warmup >= 0 else (10 if gpu else 1)


class _RepeatBatch:
    """A 'loader' that yields the same on-device batch: measures compute only."""

    def __init__(self, batch: Dict[str, torch.Tensor], length: int) -> None:
        self.batch, self.length = batch, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        for _ in range(self.length):
            yield self.batch


def _cfg(args: argparse.Namespace, name: str, out: str):
    from reid.config import get_cfg

    arch, backbone, size = MODELS[name]
    cfg = get_cfg()
    cfg.OUTPUT_DIR = out
    cfg.MODEL.DEVICE = args.device
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.BACKBONE.NAME = backbone
    if backbone == "resnet18":
        cfg.MODEL.BACKBONE.LAST_STRIDE = 2  # as the demo
    cfg.MODEL.BACKBONE.PRETRAINED = False  # speed does not depend on the weights; no download
    cfg.MODEL.HEADS.NAME = "circle"
    cfg.MODEL.HEADS.NUM_CLASSES = args.num_classes
    cfg.INPUT.SIZE_TRAIN = list(args.size or size)
    cfg.INPUT.SIZE_TEST = list(args.size or size)  # a ViT is built for one patch grid
    if arch == "transreid":
        cfg.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    cfg.SOLVER.IMS_PER_BATCH = args.batch_size
    cfg.SOLVER.AMP = args.amp
    cfg.SOLVER.CHANNELS_LAST = bool(args.channels_last)
    cfg.SOLVER.MAX_EPOCH = 1
    cfg.SOLVER.WARMUP_ITERS = 0
    cfg.SOLVER.LOG_PERIOD = 10**9  # no log lines inside the timed loop
    cfg.DATALOADER.NUM_WORKERS = args.workers
    cfg.DATALOADER.NUM_INSTANCE = 4
    cfg.DATASETS.ROOT = args.data_root
    cfg.DATASETS.NAMES = ["synthetic"]
    s = cfg.DATASETS.SYNTHETIC
    # Enough identities for P = batch / 4 distinct ones per batch; JPEGs of Market-1501's crop
    # size (128x64), upscaled to the input size by the transform as in a real run.
    s.NUM_TRAIN_IDS = max(100, args.batch_size // 4 * 2)
    s.NUM_TEST_IDS = 10
    s.IMAGE_SIZE = [128, 64]
    return cfg


class _Clock(HookBase):
    """Reads the clock after the warm-up steps and after the last step (a user hook)."""

    def __init__(self, warmup: int, device: torch.device) -> None:
        self.warmup, self.device = warmup, device
        self.t0 = self.t1 = 0.0

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def before_train(self) -> None:
        if self.warmup == 0:
            self.t0 = self._now()

    def after_step(self) -> None:
        if self.trainer.iter == self.warmup:
            self.t0 = self._now()
            if self.device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(self.device)
        if self.trainer.iter == self.trainer.max_iter:
            self.t1 = self._now()


def measure(args: argparse.Namespace, name: str) -> Dict[str, object]:
    """Run warmup + timed iterations of model `name` in this process; returns one result row."""
    from reid.engine import Trainer
    from reid.modeling import build_model
    from reid.utils.device import resolve_device

    device = resolve_device(args.device)
    _defaults(args, device)
    steps = args.warmup + args.iters
    size = list(args.size or MODELS[name][2])
    with tempfile.TemporaryDirectory() as out:
        cfg = _cfg(args, name, out)
        if args.with_loader:
            from reid.data import build_train_data, build_train_loader

            data = build_train_data(cfg)
            cfg.MODEL.HEADS.NUM_CLASSES = data.num_classes
            loader = _Take(build_train_loader(cfg, data.items), steps)
        else:
            h, w = size
            g = torch.Generator().manual_seed(0)
            images = torch.randint(0, 256, (args.batch_size, 3, h, w), dtype=torch.uint8, generator=g)
            targets = torch.arange(args.batch_size) // 4 % args.num_classes
            loader = _RepeatBatch({"images": images.to(device), "targets": targets.to(device)}, steps)
        clock = _Clock(args.warmup, device)
        trainer = Trainer(cfg, build_model(cfg), loader, progress=False, hooks=[clock])
        trainer.train()
        elapsed = clock.t1 - clock.t0
        images_done = args.iters * args.batch_size
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device) / 2**30
        peak_kind = "GPU"
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB (Linux)
        peak_kind = "RSS"
    return {
        "model": name,
        "input": "x".join(map(str, size)),
        "batch": args.batch_size,
        "device": str(device) + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""),
        "amp": args.amp,
        "channels_last": bool(args.channels_last and device.type == "cuda"),
        "data": f"loader ({args.workers} workers)" if args.with_loader else "in-memory",
        "images_per_s": images_done / elapsed,
        "ms_per_iter": 1000 * elapsed / max(1, args.iters),
        "peak_gib": peak,
        "peak_kind": peak_kind,
        "iters": args.iters,
    }


class _Take:
    """The first `length` batches of `loader`, going round it as often as needed (one 'epoch')."""

    def __init__(self, loader, length: int) -> None:
        self.loader, self.length = loader, length
        self.sampler = loader.sampler  # the trainer positions the real sampler

    def __len__(self) -> int:
        return self.length

    def __iter__(self):
        it = _cycle(self.loader)
        for _ in range(self.length):
            yield next(it)


def _cycle(loader):
    while True:
        for batch in loader:
            yield batch


def table(rows: List[Dict[str, object]]) -> str:
    head = "| model | input | batch | device | AMP | channels_last | data | images/s | ms/iter | peak memory |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(
            f"| {r['model']} | {r['input']} | {r['batch']} | {r['device']} | {r['amp']} | "
            f"{'yes' if r['channels_last'] else 'no'} | {r['data']} | {r['images_per_s']:.1f} | "
            f"{r['ms_per_iter']:.0f} | {r['peak_gib']:.2f} GiB ({r['peak_kind']}) |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.json:
        print(json.dumps(measure(args, args.model)))
        return 0
    names = ["resnet50", "mgn"] if args.model == "all" else [args.model]
    rows = []
    for name in names:
        settings = _grid(args) if args.grid else [args]
        model_rows = []
        for setting in settings:
            row = _run_one(setting, name)
            if row is None:
                return 1
            model_rows.append(row)
        if args.grid:
            best = max(model_rows, key=lambda r: r["images_per_s"])
            with_loader = argparse.Namespace(**{**vars(args), "amp": best["amp"],
                                                "channels_last": best["channels_last"], "with_loader": True})
            row = _run_one(with_loader, name)
            if row is None:
                return 1
            model_rows.append(row)
        rows += model_rows
    print(f"host: {platform.node()} | {platform.processor() or platform.machine()} | "
          f"{os.cpu_count()} CPUs | torch {torch.__version__}")
    print(table(rows))
    return 0


def _grid(args: argparse.Namespace) -> List[argparse.Namespace]:
    """The in-memory settings of ``--grid``: fp16 and channels_last only where they apply."""
    gpu = str(args.device).startswith("cuda") or (args.device == "auto" and torch.cuda.is_available())
    amps = ["off", "bf16", "fp16"] if gpu else ["off", "bf16"]
    layouts = [False, True] if gpu else [False]
    return [argparse.Namespace(**{**vars(args), "amp": amp, "channels_last": cl, "with_loader": False})
            for amp in amps for cl in layouts]


def _run_one(args: argparse.Namespace, name: str):
    """One measurement in a fresh process (so peak-memory figures are its own); None on failure."""
    cmd = [sys.executable, os.path.abspath(__file__), "--json"] + _forward_args(args, name)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout + proc.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _forward_args(args: argparse.Namespace, name: str) -> List[str]:
    out = (["--size", *map(str, args.size)] if args.size else []) + ["--model", name, "--device", args.device, "--amp", args.amp, "--batch-size", str(args.batch_size),
           "--iters", str(args.iters), "--warmup", str(args.warmup), "--workers", str(args.workers),
           "--data-root", args.data_root, "--num-classes", str(args.num_classes)]
    if args.channels_last:
        out.append("--channels-last")
    if args.with_loader:
        out.append("--with-loader")
    return out


if __name__ == "__main__":
    sys.exit(main())
