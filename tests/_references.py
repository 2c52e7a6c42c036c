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
import sys
import tarfile
import tempfile
from types import ModuleType, SimpleNamespace
from typing import Any, Dict, Optional, Tuple

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCES = os.path.join(ROOT, ".cache", "references")

_loaded: Dict[Tuple[str, str], ModuleType] = {}


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: failing instead of skipping)", pytrace=False)
    pytest.skip(f"{reason} (skipped outside CI)")


def reference_module(sdist: str, member: str, stubs: Optional[Dict[str, Dict[str, Any]]] = None) -> ModuleType:
    """The module in file `member` of source distribution `sdist` (``name-version``, e.g.
    ``torchreid-0.2.5``; `member` relative to its top folder), imported by path, once per process.

    `stubs` ({module name: {attribute: value}}) stand in for the package modules the file imports at
    its top (e.g. the base class of torchreid's video engine, whose module pulls in the whole
    package) while it is imported; the code under test is the file's own."""
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
    saved = {stub: sys.modules.get(stub) for stub in stubs or {}}
    try:
        for stub, attributes in (stubs or {}).items():
            sys.modules[stub] = SimpleNamespace(**attributes)  # type: ignore[assignment]
        spec.loader.exec_module(module)
    finally:
        for stub, before in saved.items():
            if before is None:
                sys.modules.pop(stub, None)
            else:
                sys.modules[stub] = before
    _loaded[key] = module
    return module


def torchreid_module(member: str, stubs: Optional[Dict[str, Dict[str, Any]]] = None) -> ModuleType:
    """torchreid 0.2.5's ``torchreid/<member>`` (e.g. ``reid/metrics/rank.py``) as a module."""
    return reference_module("torchreid-0.2.5", f"torchreid/{member}", stubs)
