"""Command-line basics shared by the programs: ``--config-file``, ``KEY VALUE`` overrides, the config.

Light on purpose (argparse and yacs only): a program can parse its flags, load the config
and refuse a busy run folder before it imports torch.
"""
from __future__ import annotations

import argparse
import math
import shlex
import sys
from typing import Callable, List, Optional, Sequence

from reid.config import value_range

#: Upper bounds of command-line numbers that no config key bounds; each sizes an allocation.
#: Matches per query (search -k, plot --max-rank): results hold queries x k entries.
MAX_MATCHES = 10_000
#: Images in one row of a picture (test --vis-topk, visualize --topk, search -k with --draw).
MAX_TILES = 100
#: Histogram bins (plot similarity --bins).
MAX_BINS = 10_000
#: Grid points per axis (plot gradients --grid): grid^2 points per loss.
MAX_GRID = 2_001


def tool_parser(description: str, epilog: str = "") -> argparse.ArgumentParser:
    """An empty parser that prints `description` and `epilog` (examples) as written."""
    return argparse.ArgumentParser(
        description=description, epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter
    )


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


def int_in(low: int, high: Optional[int] = None, bound_of: str = "") -> Callable[[str], int]:
    """An argparse ``type``: an integer in ``[low, high]`` (no upper bound when `high` is None);
    argparse answers anything else with its usage error naming the flag. `bound_of` names where
    the bounds come from (a config key), for the message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low or (high is not None and value > high):
            where = f">= {low}" if high is None else f"in [{low}, {high}]"
            source = f" (the bounds of {bound_of})" if bound_of else ""
            raise argparse.ArgumentTypeError(f"{value} is out of range: it must lie {where}{source}")
        return value

    return parse


def float_in(low: float, high: Optional[float] = None, what: str = "a number", open_low: bool = False,
             open_high: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite float in ``[low, high]`` (`open_low` / `open_high` leave a bound
    out; no upper bound when `high` is None); anything else is argparse's usage error naming the
    flag, the value and `what` the flag takes (e.g. "a cosine distance")."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        too_low = value <= low if open_low else value < low
        too_high = high is not None and (value >= high if open_high else value > high)
        if not math.isfinite(value) or too_low or too_high:
            where = (f"{'>' if open_low else '>='} {low:g}" if high is None else
                     f"in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}")
            raise argparse.ArgumentTypeError(f"{text} is not {what} {where}")
        return value

    return parse


def config_int(key: str, low: Optional[int] = None) -> Callable[[str], int]:
    """:func:`int_in` with the bounds of config key `key` (``reid.config.value_range``), so that a flag
    meaning the same as the key (``--batch-size``, ``--input-size``) is bounded the same; `low`
    raises the lower bound where the flag needs more."""
    key_low, key_high = value_range(key)
    return int_in(key_low if low is None else max(low, key_low), key_high, key)


__all__ = ["MAX_BINS", "MAX_GRID", "MAX_MATCHES", "MAX_TILES", "command_line", "config_int", "int_in", "overrides",
           "parse_args", "tool_parser"]
