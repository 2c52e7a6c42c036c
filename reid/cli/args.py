"""Command-line basics shared by the programs: ``--config-file``, ``KEY VALUE`` overrides, the config.

Light on purpose (argparse and yacs only): a program can parse its flags, load the config
and refuse a busy run folder before it imports torch.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from typing import List, Optional, Sequence

from reid.config import load_config


def tool_parser(description: str, epilog: str = "") -> argparse.ArgumentParser:
    """An empty parser that prints `description` and `epilog` (examples) as written."""
    return argparse.ArgumentParser(
        description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def base_parser(description: str, epilog: str = "") -> argparse.ArgumentParser:
    """A parser with ``--config-file`` and trailing ``KEY VALUE`` config overrides."""
    parser = tool_parser(description, epilog)
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


def command_line(argv: Optional[Sequence[str]], program: str) -> str:
    """The command line to log and to record in the run lock: ``sys.argv`` when `program`
    parses the process's own arguments; for ``main(argv)`` called from Python, the arguments it
    was given (as `program` would take them) and the script that called it."""
    if argv is None:
        return shlex.join(sys.argv)
    return f"{shlex.join([program, *map(str, argv)])} (main() called from {shlex.join(sys.argv)})"


def overrides(args: argparse.Namespace) -> List[str]:
    """The ``KEY VALUE`` words of the command line (without a leading ``--`` separator)."""
    opts = list(args.opts or [])
    return opts[1:] if opts[:1] == ["--"] else opts


def load_cfg_from_args(args: argparse.Namespace, extra_opts: Optional[List[str]] = None):
    """The merged, frozen config: file, then command-line overrides, then `extra_opts`."""
    return load_config(args.config_file or None, overrides(args) + list(extra_opts or []))


__all__ = ["base_parser", "command_line", "load_cfg_from_args", "overrides", "parse_args", "tool_parser"]
