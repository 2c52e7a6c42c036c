"""The install metadata says what CI tests: setup.py's lower bounds are requirements/min.txt.

CI (.ci/run) runs the suite twice: with requirements/ci.txt (every optional extra) and with
requirements/min.txt (the lowest versions setup.py claims). These tests keep the three files
in step, so that no bound in setup.py is a version nobody ran.
"""
import os
import re
import runpy
from typing import Dict, List, Tuple

import pytest
import setuptools
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPTIONAL_EXTRAS = ("export", "tensorboard", "faiss", "safetensors", "timm", "clip", "tune", "service", "service-tests",
                   "openvino")
IN_ALL = ("export", "tensorboard", "faiss", "safetensors", "timm", "clip", "tune", "service", "service-tests")  # "openvino" is not (setup.py says why)


@pytest.fixture(scope="module")
def setup_kwargs() -> Dict:
    """The keyword arguments setup.py passes to setuptools.setup (nothing is built)."""
    captured: Dict = {}
    original = setuptools.setup
    setuptools.setup = lambda **kw: captured.update(kw)
    try:
        runpy.run_path(os.path.join(ROOT, "setup.py"), run_name="__main__")
    finally:
        setuptools.setup = original
    return captured


def _pins(name: str) -> Dict[str, Version]:
    """``{canonical name: version}`` of the ``name==version`` lines of requirements/<name>."""
    pins = {}
    with open(os.path.join(ROOT, "requirements", name), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                req = Requirement(line)
                (spec,) = req.specifier
                assert spec.operator == "==", f"requirements/{name}: {line!r} is not an exact pin"
                pins[canonicalize_name(req.name)] = Version(spec.version)
    return pins


def _lower_bounds(requirements: List[str]) -> Dict[str, Tuple[Version, Requirement]]:
    bounds = {}
    for text in requirements:
        req = Requirement(text)
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        assert len(lows) == 1, f"setup.py: {text!r} needs exactly one lower bound (>=)"
        bounds[canonicalize_name(req.name)] = (lows[0], req)
    return bounds


def test_setup_lower_bounds_are_the_minimum_environment(setup_kwargs):
    minimum = _pins("min.txt")
    claimed = _lower_bounds(setup_kwargs["install_requires"] + setup_kwargs["extras_require"]["dev"])
    assert {name: low for name, (low, _) in claimed.items()} == minimum


def test_python_minimum_is_stated_once(setup_kwargs):
    text = open(os.path.join(ROOT, "requirements", "min.txt"), encoding="utf-8").read()
    (stated,) = re.findall(r"^# Python (\d+\.\d+)\b", text, flags=re.M)
    assert setup_kwargs["python_requires"] == f">={stated}"
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    assert f"python{stated}" in ci  # the minimum environment is built with that interpreter


def test_optional_extras_start_at_the_versions_ci_runs(setup_kwargs):
    extras = setup_kwargs["extras_require"]
    ci = _pins("ci.txt")
    union = set()
    for extra in OPTIONAL_EXTRAS:
        for name, (low, _) in _lower_bounds(extras[extra]).items():
            assert ci.get(name) == low, f"extra {extra!r}: {name}>={low} but requirements/ci.txt pins {ci.get(name)}"
            if extra in IN_ALL:
                union.add(name)
    assert {canonicalize_name(Requirement(r).name) for r in extras["all"]} == union


def test_ci_pins_satisfy_every_range(setup_kwargs):
    ci = _pins("ci.txt")
    requirements = setup_kwargs["install_requires"] + [r for reqs in setup_kwargs["extras_require"].values() for r in reqs]
    for text in requirements:
        req = Requirement(text)
        name = canonicalize_name(req.name)
        assert name in ci, f"requirements/ci.txt does not pin {name}"
        assert req.specifier.contains(ci[name]), f"requirements/ci.txt: {name}=={ci[name]} is outside {text!r}"
