#!/usr/bin/env python
"""Thin entry point; the program lives in reid/cli/torch_wheels.py (run with --help)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.cli.torch_wheels import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
