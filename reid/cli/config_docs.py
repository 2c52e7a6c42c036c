"""Regenerate docs/configs.md from reid/config/defaults.py.

Example:
    python tools/gen_config_docs.py            # rewrite docs/configs.md
    python tools/gen_config_docs.py --check    # exit 1 if docs/configs.md is stale
"""
from __future__ import annotations

import argparse
import os
import sys

from reid.config.docs import render_config_docs
from reid.utils.file_io import atomic_write_text

# The repository's docs/configs.md (this module is reid/cli/config_docs.py).
DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "docs", "configs.md")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="only check that the file is current")
    args = parser.parse_args(argv)
    text = render_config_docs()
    if args.check:
        current = open(DOC, encoding="utf-8").read() if os.path.exists(DOC) else ""
        if current != text:
            print(f"{DOC} is stale: run python tools/gen_config_docs.py", file=sys.stderr)
            return 1
        print(f"{DOC} is current")
        return 0
    atomic_write_text(DOC, text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
