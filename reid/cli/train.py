"""``tools/train.py``: train a model as a config says (the run itself: reid/cli/train_run.py).

This module only parses the flags, loads the config and takes the run folder's lock, with
light imports: a refused run (a busy folder) or ``--help`` answers at once, before torch and
the rest of the library are loaded.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import nullcontext
from typing import TYPE_CHECKING, List, Optional, Sequence

from reid.utils.run_lock import RunLock

from .args import base_parser, load_cfg_from_args, parse_args
from .errors import run_main

if TYPE_CHECKING:  # the engine loads torch; only the type is needed here
    from reid.engine import HookBase

EPILOG = """examples:
  python tools/train.py --config-file configs/Demo/resnet18_circle.yml
  python tools/train.py --config-file configs/Market1501/resnet50_circle.yml DATASETS.ROOT /data SOLVER.AMP bf16
  python tools/train.py --config-file configs/Market1501/resnet50_circle.yml --resume
  python tools/train.py --config-file output/demo/config.yaml --eval-only MODEL.WEIGHTS output/demo/model_final.pth
  torchrun --nproc_per_node 4 tools/train.py --config-file configs/MSMT17/mgn_circle.yml MODEL.SYNC_BN True

An OUTPUT_DIR that already holds a checkpoint is only continued (--resume) or evaluated
(--eval-only), never overwritten: start another run in another OUTPUT_DIR.

exit codes: 0 done, 1 error (NaN/inf loss, bad input), 130 interrupted by Ctrl-C, 143 by SIGTERM
(both after saving a checkpoint that --resume continues from)."""


def main(argv: Optional[Sequence[str]] = None, hooks: Sequence["HookBase"] = ()) -> int:
    """Train (or with --eval-only evaluate) as the config says; returns the exit code.

    `hooks` are the caller's own training hooks (``reid.engine.HookBase``): they run after the
    built-in ones, in the given order, in exactly the run ``tools/train.py`` makes::

        from reid.cli.train import main
        main(["--config-file", "configs/Demo/resnet18_circle.yml"], hooks=[MyHook()])
    """
    parser = base_parser("Train a re-ID model.", EPILOG)
    parser.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR's last checkpoint")
    parser.add_argument("--eval-only", action="store_true", help="only evaluate MODEL.WEIGHTS (or the last checkpoint)")
    parser.add_argument(
        "--drop-head", action="store_true",
        help="load MODEL.WEIGHTS without the identity head (fine-tuning on other identities)",
    )
    args = parse_args(parser, argv)
    return run_main(lambda: _main(args, list(hooks)))


def _main(args: argparse.Namespace, hooks: List["HookBase"]) -> int:
    cfg = load_cfg_from_args(args)
    # One process per run folder, for the whole run (under torchrun: rank 0 for all of them).
    main_rank = os.environ.get("RANK", "0") == "0"
    with RunLock(str(cfg.OUTPUT_DIR), "evaluating" if args.eval_only else "training") if main_rank else nullcontext():
        from .train_run import run_training  # the library, torch included: only once the folder is ours

        return run_training(cfg, args, hooks, main_rank)


if __name__ == "__main__":
    sys.exit(main())
