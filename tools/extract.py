#!/usr/bin/env python
"""Compute features for every image in folders or list files and save them with their paths.

Folders are searched recursively for .jpg, .jpeg, .png, .bmp, .tif, .tiff and .webp files
(sorted by path); a list file names one image per line (relative paths start from the list
file's folder; "path pid camid" lines work too, and their pids/camids are saved when every
image has them). Features are L2-normalised, made exactly
as the evaluator makes them (resize to INPUT.SIZE_TEST, TEST.FLIP, TEST.AMP), and saved
with the absolute path of each image to an .npz file (default) or a .safetensors file
(needs `pip install safetensors`). Progress is shown on stderr.

Examples:
    # a folder of crops, with the model of a training run
    python tools/extract.py --run output/market_r50_circle --input crops/ --output gallery.npz
    # two folders and a list file, bigger batches on the GPU, flip averaging on
    python tools/extract.py --run output/mgn --input cam1/ cam2/ more.txt --output g.npz \\
        --batch-size 256 --num-workers 8 --device cuda TEST.FLIP True
    # a checkpoint alone (it stores its config), safetensors output
    python tools/extract.py --weights model_final.pth --input crops/ --output gallery.safetensors

Search the result with tools/search.py. See docs/inference.md for the file format.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.inference.commands import add_model_arguments, extract_command, predictor_from_args, run_user_command  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-i", "--input", nargs="+", required=True, metavar="SRC",
                   help="image folders (recursive), list files and/or image files")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="gallery file to write: .npz or .safetensors")
    p.add_argument("--batch-size", type=int, default=None, help="images per batch (default: TEST.IMS_PER_BATCH)")
    p.add_argument("--num-workers", type=int, default=2, help="image-reading processes (default: 2; 0 = none)")
    p.add_argument("--quiet", action="store_true", help="no progress display")
    add_model_arguments(p)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    def work() -> None:
        predictor = predictor_from_args(args, batch_size=args.batch_size, num_workers=args.num_workers)
        extract_command(predictor, args.input, args.output, progress=not args.quiet)

    return run_user_command(work)


if __name__ == "__main__":
    sys.exit(main())
