"""The runtime a checkpoint gets without --backend: ONNX Runtime on a CPU for large jobs, else PyTorch."""
from __future__ import annotations

import importlib.util

import pytest

from reid.config import get_cfg
from reid.inference import backend_choice
from reid.inference.backend_choice import AUTO_MIN_CROPS, KEEP_TORCH, auto_backend


def _cfg(**keys):
    cfg = get_cfg()
    cfg.MODEL.DEVICE, cfg.TEST.FLIP, cfg.TEST.AMP = "cpu", False, "off"
    for key, value in keys.items():
        section, name = key.split("__")
        cfg[section][name] = value
    return cfg


@pytest.fixture
def installed(monkeypatch):
    """Every package of the ONNX path found, whatever this environment has."""
    monkeypatch.setattr(backend_choice, "missing_packages", lambda: ())


def test_a_large_job_on_the_cpu_runs_in_onnx_runtime_and_says_how_to_keep_pytorch(installed):
    chosen, why = auto_backend(_cfg(), None, AUTO_MIN_CROPS)
    assert chosen == "onnxruntime" and "ONNX Runtime" in why and KEEP_TORCH in why and str(AUTO_MIN_CROPS) in why
    assert "\n" not in why


@pytest.mark.parametrize("crops, device", [(None, None), (AUTO_MIN_CROPS - 1, None), (0, None)])
def test_small_or_unknown_jobs_keep_pytorch_without_a_word(installed, crops, device):
    assert auto_backend(_cfg(), device, crops) == (None, "")


def test_a_model_on_a_gpu_keeps_pytorch_without_a_word(installed, monkeypatch):
    monkeypatch.setattr(backend_choice, "resolve_device", lambda spec: __import__("torch").device("cuda", 0))
    assert auto_backend(_cfg(MODEL__DEVICE="cuda"), None, 10 * AUTO_MIN_CROPS) == (None, "")


@pytest.mark.parametrize("keys, words", [
    ({"TEST__FLIP": True}, "TEST.FLIP True"),
    ({"TEST__AMP": "bf16"}, "TEST.AMP bf16"),
])
def test_settings_that_only_pytorch_computes_keep_it_and_say_which(installed, keys, words):
    chosen, why = auto_backend(_cfg(**keys), "cpu", 5000)
    assert chosen is None and why.startswith("embedding with PyTorch, not ONNX Runtime (5000 crops") and words in why


def test_missing_packages_keep_pytorch_and_say_what_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxscript" else object())
    assert backend_choice.missing_packages() == ("onnxscript",)
    chosen, why = auto_backend(_cfg(), "cpu", 5000)
    assert chosen is None and "onnxscript" in why and "pip install" in why
