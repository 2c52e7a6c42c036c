"""Publish a training run as a Hugging Face model repository (docs/model_zoo.md, "Publishing a run").

    python tools/publish.py --run output/demo --output published/demo
    python tools/publish.py --run output/osnet --output published/osnet --onnx --push my-org/osnet-market

The folder holds model.safetensors (the weights, with the config in its metadata), config.yaml,
reid_config.json (input size, normalisation, feature size, format), README.md (the model card: the
Hub's metadata with R-1 / mAP / mINP from the run's tests, the commands, the training config) and,
with --onnx, model.onnx. Any tool loads it back with identical features: `--weights published/demo`,
or `--weights hf://my-org/osnet-market` once pushed. --push needs huggingface_hub and a token
(`hf auth login`, or HF_TOKEN).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from typing import List, Optional

from .args import parse_args, tool_parser
from .errors import run_main

_REPO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def _repo_id(text: str) -> str:
    if not _REPO_ID.fullmatch(text) or ".." in text or len(text) > 96:
        raise argparse.ArgumentTypeError(f"{text!r} is not a repository id: write ORG/NAME (letters, digits, - _ .)")
    return text


def build_parser() -> argparse.ArgumentParser:
    """The parser (no torch before the arguments are right)."""
    p = tool_parser("Publish a training run as a Hugging Face model repository.", __doc__.split("\n\n", 1)[1])
    p.add_argument("--run", required=True, metavar="DIR", help="the training run's folder (config.yaml + weights)")
    p.add_argument("--output", required=True, metavar="DIR", help="the repository folder to write (new or empty)")
    p.add_argument("--name", type=_repo_id, default=None, metavar="ORG/NAME",
                   help="the repository's name in the model card (default: --push's, else the run folder's name)")
    p.add_argument("--onnx", action="store_true", help="add model.onnx (tools/export.py, checked against PyTorch)")
    p.add_argument("--push", type=_repo_id, default=None, metavar="ORG/NAME",
                   help="upload the folder to the Hugging Face Hub as this model repository (huggingface_hub)")
    p.add_argument("--private", action="store_true", help="with --push: a private repository")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of tools/publish.py."""
    parser = build_parser()
    args = parse_args(parser, argv)
    if args.private and not args.push:
        parser.error("--private goes with --push")
    name = args.name or args.push or os.path.basename(os.path.normpath(args.run))

    def work() -> int:
        from reid.inference.publishing import publish_run, push_folder

        def onnx(path: str) -> None:
            from .export import main as export_main

            if export_main(["--run", args.run, "--output", path]) != 0:
                raise ValueError(f"The ONNX export of {args.run} failed (its error is above); publish without --onnx "
                                 "or fix the export first.")

        publish_run(args.run, args.output, name, onnx=onnx if args.onnx else None)
        if args.push:
            push_folder(args.output, args.push, private=args.private)
        return 0

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
