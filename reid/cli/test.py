"""``tools/test.py``: evaluate trained weights, print R-1/R-5/R-10/mAP/mINP, save what was computed.

This module only parses the flags, with light imports: ``--help`` and argument errors answer
before torch is loaded. The evaluation itself is reid/cli/test_run.py.
"""
from __future__ import annotations

import sys
from typing import Optional, Sequence

from .args import MAX_TILES, command_line, int_in, parse_args, tool_parser
from .errors import run_main
from .model_args import add_model_arguments, check_model_arguments

EPILOG = """examples:
  python tools/test.py --run output/demo
  python tools/test.py --run output/demo --rerank --flip --visualize 5
  python tools/test.py --weights output/demo/model_final.pth --output-dir output/demo/test_again
  python tools/test.py --run output/market_mgn DATASETS.ROOT /data --save-features mgn_market.npz
  python tools/test.py --config-file configs/Market1501/bot_resnet50_ibn.yml --weights market_bot_R50-ibn.pth \\
      MODEL.BACKBONE.STEM_POOL pad DATASETS.ROOT /data
  torchrun --nproc_per_node 2 tools/test.py --run output/market_mgn   # one shard of the images per process
  python tools/test.py --run output/demo --verification --open-set 20   # TAR@FAR, EER, ROC; DIR@FAR
  python tools/test.py --run output/demo --query my/query --gallery my/gallery   # your own folders

The model: --run DIR (a training run: its config.yaml and model_best.pth, else model_final.pth),
--weights FILE (a checkpoint; ours store their config), or --config-file FILE with --weights FILE
(MODEL.WEIGHTS FILE works too; a run's config.yaml alone takes the weights next to it).
KEY VALUE overrides change what is tested and how: DATASETS.TESTS, DATASETS.ROOT, TEST.FLIP,
TEST.METRIC, TEST.RERANK.K1, TEST.AQE.ENABLED, ... (docs/configs.md).

Writes metrics.json into --output-dir (default: DIR/test with --run, else OUTPUT_DIR/test),
ranked-result pictures with --visualize, and features with --save-features (redraw pictures
later with tools/visualize.py)."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Evaluate a model on DATASETS.TESTS; returns the exit code (1 with ``error:`` on bad input)."""
    parser = tool_parser("Evaluate a trained re-ID model on the test sets of DATASETS.TESTS.", EPILOG)
    parser.add_argument("--rerank", action="store_true", help="also report k-reciprocal re-ranking (TEST.RERANK.*)")
    parser.add_argument("--flip", action="store_true", help="average features of each image and its mirror")
    parser.add_argument("--visualize", type=int_in(0), default=0, metavar="K", help="draw ranked results of K queries")
    parser.add_argument("--vis-mode", default="worst", choices=["worst", "best", "random"], help="which queries to draw")
    parser.add_argument("--vis-topk", type=int_in(1, MAX_TILES), default=10,
                        help=f"gallery images per ranked row (at most {MAX_TILES})")
    parser.add_argument("--save-features", default="", metavar="FILE", help="save query/gallery features (.npz)")
    parser.add_argument("--verification", action="store_true",
                        help="also report TAR at each TEST.VERIFICATION.FARS, the thresholds, EER and the ROC")
    parser.add_argument("--open-set", type=int_in(1), default=None, metavar="N",
                        help="open-set identification: hold N query identities out of the gallery and report DIR "
                             "at each FAR (TEST.OPEN_SET.HOLDOUT_IDS)")
    parser.add_argument("--query", default=None, metavar="SRC",
                        help="your own query: a folder of identity sub-folders, or a list file 'path identity "
                             "[camid]' (with --gallery: the test set 'folders', see docs/evaluation.md)")
    parser.add_argument("--gallery", default=None, metavar="SRC", help="your own gallery, as --query")
    parser.add_argument("--output-dir", default="", help="where results go (default: DIR/test with --run, else OUTPUT_DIR/test)")
    add_model_arguments(parser, override_example="DATASETS.ROOT /data TEST.FLIP True")
    args = parse_args(parser, argv)
    check_model_arguments(parser, args)
    if (args.query is None) != (args.gallery is None):
        parser.error("--query and --gallery go together: your own test set needs both")
    args.command = command_line(argv, "tools/test.py")

    def work() -> int:
        from .test_run import run_command  # the library, torch included: only once the arguments are right

        return run_command(args)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
