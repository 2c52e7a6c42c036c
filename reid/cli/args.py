"""Command-line basics shared by the programs: ``--config-file``, ``KEY VALUE`` overrides, the config.

Light on purpose (argparse and yacs only): a program can parse its flags, load the config
and refuse a busy run folder before it imports torch.
"""
from __future__ import annotations

import argparse
from typing import List, Optional

from reid.config import load_config


def base_parser(description: str, epilog: str = "") -> argparse.ArgumentParser:
    """A parser with ``--config-file`` and trailing ``KEY VALUE`` config overrides."""
    parser = argparse.ArgumentParser(
        description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config-file", default="", metavar="FILE", help="YAML config (may use _BASE_)")
    parser.add_argument(
        "opts",
        nargs="*",
        metavar="KEY VALUE",
        help="config overrides, e.g. SOLVER.BASE_LR 0.001 OUTPUT_DIR out/run1",
    )
    return parser


def parse_args(parser: argparse.ArgumentParser, argv: Optional[List[str]] = None) -> argparse.Namespace:
    """Parse flags and ``KEY VALUE`` overrides in any order (flags may follow the overrides)."""
    return parser.parse_intermixed_args(argv)


def load_cfg_from_args(args: argparse.Namespace, extra_opts: Optional[List[str]] = None):
    """The merged, frozen config: file, then command-line overrides, then `extra_opts`."""
    opts = list(args.opts or [])
    if opts and opts[0] == "--":
        opts = opts[1:]
    return load_config(args.config_file or None, opts + list(extra_opts or []))


__all__ = ["base_parser", "load_cfg_from_args", "parse_args"]
