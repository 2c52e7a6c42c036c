"""Other toolkits' own code as test references, read from their source distributions.

`make test` fetches the source distributions named in the Makefile (REFERENCE_SDISTS) from the
package index into ``.cache/references`` (tests never reach the network). A test takes one file
of one of them, e.g. torchreid 0.2.5's ``torchreid/reid/metrics/rank.py``, extracted into a
temporary folder and imported by its path alone (the package itself, with its heavy imports, is
never installed or imported): the reference computes with the upstream code as published.

Where the file is missing the test is skipped, and under CI (CI=true) it fails instead.
"""
from __future__ import annotations

import importlib.util
import os
import tarfile
import tempfile
from types import ModuleType
from typing import Dict, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCES = os.path.join(ROOT, ".cache", "references")

_loaded: Dict[Tuple[str, str], ModuleType] = {}


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: failing instead of skipping)", pytrace=False)
    pytest.skip(f"{reason} (skipped outside CI)")


def reference_module(sdist: str, member: str) -> ModuleType:
    """The module in file `member` of source distribution `sdist` (``name-version``, e.g.
    ``torchreid-0.2.5``; `member` relative to its top folder), imported by path, once per process."""
    key = (sdist, member)
    if key in _loaded:
        return _loaded[key]
    archive = os.path.join(REFERENCES, f"{sdist}.tar.gz")
    if not os.path.isfile(archive):
        _missing(f"{archive} is missing: `make references` fetches it from the package index")
    folder = tempfile.mkdtemp(prefix="reid-reference-")
    with tarfile.open(archive, "r:gz") as tar:
        found = tar.getmember(f"{sdist}/{member}")
        tar.extractall(folder, members=[found], filter="data")
    path = os.path.join(folder, sdist, member)
    name = "reference_" + "_".join(os.path.splitext(member)[0].replace("-", "_").split("/"))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _loaded[key] = module
    return module


def torchreid_module(member: str) -> ModuleType:
    """torchreid 0.2.5's ``torchreid/<member>`` (e.g. ``reid/metrics/rank.py``) as a module."""
    return reference_module("torchreid-0.2.5", f"torchreid/{member}")
