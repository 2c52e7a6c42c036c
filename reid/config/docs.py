"""Render docs/configs.md from defaults.py, so the key reference cannot drift from the code.

The comment line(s) directly above each ``_C.KEY = value`` assignment are its documentation;
``get_cfg()`` supplies the default value.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List

from .config import get_cfg, key_value

_ASSIGN = re.compile(r"^_C\.([A-Z0-9_.]+) = (.*)$")
HEADER = (
    "# Configuration keys\n\n"
    "Generated from `reid/config/defaults.py` by `python tools/gen_config_docs.py`; "
    "do not edit by hand (a test checks that this file is current).\n\n"
    "Set keys in a YAML file (`_BASE_: other.yml` inherits, paths relative to the file) or on "
    "the command line after the flags: `python tools/train.py --config-file F KEY VALUE ...`.\n\n"
    "Lists of names on the command line: `DATASETS.NAMES market1501,msmt17` or "
    "`DATASETS.NAMES [market1501,msmt17]` (no quotes needed); numbers: `SOLVER.STEPS '[40, 70]'`. "
    "In YAML, quote words that YAML 1.1 reads as booleans (`AMP: \"off\"`, not `AMP: off`); "
    "`BASE_LR: 1e-3` is accepted although YAML reads it as a string.\n"
)


def key_comments(defaults_path: str) -> Dict[str, str]:
    """Map every key (e.g. "SOLVER.BASE_LR") to the comment lines written above it."""
    comments: Dict[str, str] = {}
    pending: List[str] = []
    with open(defaults_path, encoding="utf-8") as f:
        for raw in f:
            line = raw.rstrip("\n")
            stripped = line.strip()
            if stripped.startswith("#") and not stripped.startswith("# ---"):
                pending.append(stripped.lstrip("#").strip())
                continue
            m = _ASSIGN.match(line)
            if m and not m.group(2).startswith("CN("):
                comments[m.group(1)] = " ".join(pending)
            pending = []
    return comments


def render_config_docs() -> str:
    """The Markdown text of docs/configs.md: one table per top-level section."""
    cfg = get_cfg()
    sections: Dict[str, List[str]] = {}
    for key, doc in key_comments(os.path.join(os.path.dirname(__file__), "defaults.py")).items():
        section = key.split(".")[0] if "." in key else "(top level)"
        value = key_value(cfg, key)
        shown = repr(value) if isinstance(value, str) else str(value)
        cell = doc.replace("|", "\\|")
        sections.setdefault(section, []).append(f"| `{key}` | `{shown}` | {cell} |")
    parts = [HEADER]
    for section, rows in sections.items():
        parts.append(f"\n## {section}\n\n| key | default | meaning |\n|---|---|---|\n" + "\n".join(rows) + "\n")
    return "".join(parts)
