"""TrainingRun: the steps of tools/train.py as methods, each overridable, in the documented order."""
from __future__ import annotations

import json

import pytest
import torch

from reid.config import load_config
from reid.training import TrainingRequest, TrainingRun, run_training
from tests.cli.test_cli import DEMO, tiny_opts

ORDER = ["check_settings", "build_train_data", "build_test_sets", "complete_config", "build_model", "build_eval_fn",
         "build_loader_and_hooks", "build_trainer", "run_first_stage", "calibrate"]


class Recorded(TrainingRun):
    """Each step recorded; the model's BatchNorm layers frozen (the documented example)."""

    calls: list = []

    def __getattribute__(self, name):
        if name in ORDER:
            type(self).calls.append(name)
        return super().__getattribute__(name)

    def build_model(self):
        model = super().build_model()
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.eval().requires_grad_(False)
        return model


@pytest.mark.slow
def test_an_overridden_step_shapes_the_run_and_the_steps_run_in_order(tmp_path):
    cfg = load_config(DEMO, tiny_opts(tmp_path / "data", tmp_path / "run"))
    Recorded.calls = []
    assert run_training(cfg, TrainingRequest(command="test"), run_class=Recorded) == 0
    assert Recorded.calls == ORDER
    final = torch.load(tmp_path / "run" / "model_final.pth", weights_only=True)["model"]
    initial = Recorded(cfg, TrainingRequest()).build_model().state_dict()
    frozen = [k for k in final if k.startswith("backbone.") and k.endswith("bn1.weight")]
    assert frozen and all(torch.equal(final[k], initial[k]) for k in frozen)  # BatchNorm kept as built
    records = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert any(r.get("type") == "eval" for r in records)


def test_a_new_run_over_a_finished_one_is_refused_before_anything_is_built(tmp_path):
    from reid.engine.checkpoint_files import CheckpointError, save_checkpoint

    out = tmp_path / "run"
    out.mkdir()
    save_checkpoint(str(out / "model_final.pth"), model={})
    cfg = load_config(DEMO, tiny_opts(tmp_path / "data", out))
    Recorded.calls = []
    with pytest.raises(CheckpointError, match="already holds a training run"):
        run_training(cfg, TrainingRequest(), run_class=Recorded)
    assert Recorded.calls == []


@pytest.mark.parametrize("backbone, node", [("clip_vit_b16", "CLIP"), ("vit_base_transreid", "TRANSREID")])
def test_complete_config_counts_the_cameras_into_the_models_own_sie_node(backbone, node):
    from types import SimpleNamespace

    other = {"CLIP": "TRANSREID", "TRANSREID": "CLIP"}[node]
    cfg = load_config(None, ["MODEL.BACKBONE.NAME", backbone, f"MODEL.{node}.SIE_CAMERA", True])
    data = SimpleNamespace(num_classes=3, items=[("a.jpg", 0, 0), ("b.jpg", 1, 4), ("c.jpg", 2, 2)])
    run = TrainingRun(cfg.clone(), TrainingRequest())
    run.complete_config(data)
    assert run.cfg.MODEL[node].NUM_CAMERAS == 5 and run.cfg.MODEL[other].NUM_CAMERAS == 0
    assert run.cfg.MODEL.HEADS.NUM_CLASSES == 3
    # A key too small for the data names the key that model reads.
    run = TrainingRun(load_config(None, ["MODEL.BACKBONE.NAME", backbone, f"MODEL.{node}.SIE_CAMERA", True,
                                         f"MODEL.{node}.NUM_CAMERAS", 3]), TrainingRequest())
    with pytest.raises(ValueError, match=rf"camera ids up to 4 but MODEL.{node}.NUM_CAMERAS is 3: set it to 5"):
        run.complete_config(data)
