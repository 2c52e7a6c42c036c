#!/usr/bin/env python
"""Thin entry point; the program lives in reid/cli/train_splits.py (run with --help for examples)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.cli.train_splits import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
