"""``tools/train.py``: train a model as a config says (the run itself: reid/training/run.py).

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

from reid.config import load_config
from reid.utils.path_kinds import file_problem, is_missing
from reid.utils.run_lock import RunLock

from .args import command_line, overrides, parse_args, tool_parser
from .errors import run_main
from .model_args import CONFIG_HELP, check_model_arguments

if TYPE_CHECKING:  # the engine loads torch; only the type is needed here
    from reid.engine import HookBase

EPILOG = """examples:
  python tools/train.py --config-file configs/Demo/resnet18_circle.yml
  python tools/train.py --config-file configs/Market1501/resnet50_circle.yml DATASETS.ROOT /data SOLVER.AMP bf16
  python tools/train.py --run output/demo --resume        # continue the run in output/demo
  python tools/train.py --run output/demo --eval-only     # evaluate its result (model_best or model_final)
  python tools/train.py --config-file output/demo/config.yaml --weights output/demo/model_final.pth \
      SOLVER.MAX_EPOCH 24 OUTPUT_DIR output/demo_longer   # a new run from a run's weights
  torchrun --nproc_per_node 4 tools/train.py --config-file configs/MSMT17/mgn_circle.yml MODEL.SYNC_BN True

An OUTPUT_DIR that already holds a checkpoint is only continued (--resume) or evaluated
(--eval-only), never overwritten: start another run in another OUTPUT_DIR.

exit codes: 0 done, 1 error (NaN/inf loss, bad input), 130 interrupted by Ctrl-C, 143 by SIGTERM, 138 by
SIGUSR1 (each after saving a checkpoint that --resume continues from: a scheduler may requeue the job on them).
Several processes or nodes: python tools/launch.py [torchrun options] tools/train.py ... --resume."""


def main(argv: Optional[Sequence[str]] = None, hooks: Sequence["HookBase"] = ()) -> int:
    """Train (or with --eval-only evaluate) as the config says; returns the exit code.

    `hooks` are the caller's own training hooks (``reid.engine.HookBase``): they run after the
    built-in ones, in the given order, in exactly the run ``tools/train.py`` makes::

        from reid.cli.train import main
        main(["--config-file", "configs/Demo/resnet18_circle.yml"], hooks=[MyHook()])
    """
    parser = tool_parser("Train a re-ID model.", EPILOG)
    parser.add_argument("--config-file", default="", metavar="FILE", help=CONFIG_HELP.split(";")[0])
    parser.add_argument("--run", metavar="DIR",
                        help="a training run's folder: its config.yaml, with OUTPUT_DIR DIR (for --resume, --eval-only)")
    parser.add_argument("--weights", metavar="FILE",
                        help="weights to start from (MODEL.WEIGHTS); with --eval-only, the weights to evaluate")
    parser.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR's last checkpoint")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="with --resume: continue although settings that change the training differ from the "
                             "checkpoint's (refused otherwise, naming them)")
    parser.add_argument("--eval-only", action="store_true",
                        help="only evaluate: --weights or MODEL.WEIGHTS; with --run, the run's result "
                             "(model_best, model_final, else its last checkpoint)")
    parser.add_argument(
        "--drop-head", action="store_true",
        help="load MODEL.WEIGHTS without the identity head (fine-tuning on other identities)",
    )
    parser.add_argument("opts", nargs="*", metavar="KEY VALUE",
                        help="config overrides, e.g. SOLVER.BASE_LR 0.001 OUTPUT_DIR out/run1")
    args = parse_args(parser, argv)
    check_model_arguments(parser, args)
    if args.weights and "MODEL.WEIGHTS" in overrides(args)[::2]:
        parser.error("--weights and MODEL.WEIGHTS both name the weights; pass one of them")
    if args.allow_config_change and not args.resume:
        parser.error("--allow-config-change goes with --resume (a new run takes any settings)")
    args.command = command_line(argv, "tools/train.py")
    return run_main(lambda: _main(args, list(hooks)))


def train_config(args: argparse.Namespace):
    """The run's config: --config-file (or --run's config.yaml, with OUTPUT_DIR DIR), the
    overrides, then --weights as MODEL.WEIGHTS."""
    config_file, before = args.config_file or None, []
    if args.run:
        config_file = os.path.join(args.run, "config.yaml")
        problem = file_problem(config_file)
        if problem is not None:
            where = "no config.yaml there" if is_missing(problem) else f"its config.yaml {problem}"
            raise (FileNotFoundError if is_missing(problem) else ValueError)(
                f"--run {args.run!r}: {where}. Pass a training run's folder (its OUTPUT_DIR), "
                "or start a new run with --config-file."
            )
        before = ["OUTPUT_DIR", args.run]  # the user's own OUTPUT_DIR override still wins
    after = ["MODEL.WEIGHTS", args.weights] if args.weights else []
    # A run's config.yaml is self-contained (train.py writes it merged), as every tool reads it.
    return load_config(config_file, before + overrides(args) + after, allow_bases=not args.run)


def _main(args: argparse.Namespace, hooks: List["HookBase"]) -> int:
    cfg = train_config(args)
    # One process per run folder, for the whole run (under torchrun: rank 0 for all of them).
    main_rank = os.environ.get("RANK", "0") == "0"
    what = "evaluating" if args.eval_only else "training"
    with RunLock(str(cfg.OUTPUT_DIR), what, command=args.command) if main_rank else nullcontext():
        from reid.training.run import TrainingRequest, run_training  # torch included: only once the folder is ours

        request = TrainingRequest(
            resume=args.resume, eval_only=args.eval_only, drop_head=args.drop_head,
            allow_config_change=args.allow_config_change, run_dir=args.run or "",
            weights_named=bool(args.weights) or "MODEL.WEIGHTS" in overrides(args)[::2],
            config_file=os.path.join(args.run, "config.yaml") if args.run else args.config_file, command=args.command)
        return run_training(cfg, request, hooks, main_rank)


if __name__ == "__main__":
    sys.exit(main())
