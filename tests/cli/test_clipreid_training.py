"""CLIP-ReID's two stages through tools/train.py on tiny synthetic data: the first stage's prompts,
the second stage's image-to-text loss, exact resume of either stage, and what cannot run."""
import json
import os
import signal

import pytest
import torch

from reid.cli import test as cli_test
from reid.cli import train as cli_train
from reid.config import load_config
from reid.engine import HookBase
from reid.modeling.backbones import clip as clip_module
from reid.modeling.backbones.clip import ClipSpec
from reid.modeling.meta_arch.clipreid_prompts import build_prompt_learning
from tests.cli.test_cli import ROOT, tiny_opts
from tests.engine.stubs import assert_same_weights

pytest.importorskip("open_clip", reason="CLIP backbones need open_clip (pip install 'circle-reid[clip]')")

TINY_VIT = ClipSpec("vit", 32, (2,), 2, 16, 16, "ViT-B-16", text_width=16, text_heads=2, text_layers=2)
CONFIG = os.path.join(ROOT, "configs", "Market1501", "clip_vit_b16_clipreid.yml")
# 5 identities x 2 cameras x 2 images = 20 training images: 5 first-stage batches of 4 per epoch.
STAGES = ["MODEL.BACKBONE.PRETRAINED", "False", "INPUT.SIZE_TRAIN", "[64,32]", "INPUT.SIZE_TEST", "[64,32]",
          "DATASETS.NAMES", "[synthetic]", "DATASETS.TESTS", "[synthetic]", "SOLVER.PROMPT_STAGE.MAX_EPOCH", "2",
          "SOLVER.PROMPT_STAGE.IMS_PER_BATCH", "4", "SOLVER.PROMPT_STAGE.WARMUP_EPOCHS", "1",
          "SOLVER.PROMPT_STAGE.CHECKPOINT_PERIOD", "1", "SOLVER.MAX_EPOCH", "2", "SOLVER.CHECKPOINT_PERIOD", "1",
          "SOLVER.BASE_LR", "0.001", "TEST.EVAL_PERIOD", "0", "TEST.IMS_PER_BATCH", "8"]


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    monkeypatch.setitem(clip_module.CLIP_SPECS, "clip_vit_b16", TINY_VIT)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def argv(data, out, *extra):
    return ["--config-file", CONFIG] + tiny_opts(data, out) + STAGES + list(extra)


class StopAt(HookBase):
    """Records its trainer's steps and asks to stop after step `at`; `stage` "prompts" puts it
    into the first stage (reid.training.prompt_stage.split_hooks)."""

    def __init__(self, at=None, stage=None):
        self.at, self.steps, self.stage = at, [], stage

    def after_step(self):
        self.steps.append(self.trainer.iter)
        if self.trainer.iter == self.at:
            self.trainer.request_stop(f"test stop at step {self.at}")


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_two_stages_train_test_and_resume_exactly_from_a_stop_in_either(data, tmp_path):
    a = tmp_path / "a"
    first, second = StopAt(stage="prompts"), StopAt()
    assert cli_train.main(argv(data, a), hooks=[first, second]) == 0
    assert first.steps == list(range(1, 11)) and second.steps == list(range(1, 7))  # 2 x 5 batches of features; 2 x 3 P x K
    stage = a / "prompt_stage"
    assert (stage / "model_final.pth").is_file() and (stage / "image_features.pt").is_file()
    steps = [r for r in _records(stage / "metrics.jsonl") if r.get("type") == "train"]
    assert steps and all("loss_i2t" in r and "loss_t2i" in r for r in steps)
    assert all("loss_i2t" in r and "loss_id" in r for r in _records(a / "metrics.jsonl") if r.get("type") == "train")
    log = (a / "log.txt").read_text()
    assert "CLIP-ReID's first stage done: text features of 5 identities" in log

    # The model's text features are the first stage's final prompts through the text encoder.
    final = torch.load(a / "model_final.pth", weights_only=True)["model"]
    cfg = load_config(str(a / "config.yaml"))
    prompts = build_prompt_learning(load_config(str(stage / "config.yaml")), 5)
    prompts.load_state_dict(torch.load(stage / "model_final.pth", weights_only=True)["model"])
    assert torch.isfinite(final["text_head.features"]).all() and cfg.MODEL.CLIPREID.PROMPT_LEARNING
    # (the second stage never changes them: a buffer, no gradient)
    torch.testing.assert_close(final["text_head.features"], prompts.text_features(), rtol=0, atol=1e-6)

    # tools/test.py on the run: the text head is training-only and not needed.
    assert cli_test.main(["--run", str(a)]) == 0

    # Stopped in the first stage (step 3 of 10), resumed, stopped in the second (step 4 of 6), resumed.
    b = tmp_path / "b"
    stop = StopAt(3, stage="prompts")
    assert cli_train.main(argv(data, b), hooks=[stop]) == 0
    assert stop.steps == [1, 2, 3] and not (b / "model_final.pth").exists()
    rest1, stop2 = StopAt(stage="prompts"), StopAt(4)
    assert cli_train.main(argv(data, b, "--resume"), hooks=[rest1, stop2]) == 0
    assert rest1.steps == list(range(4, 11)) and stop2.steps == [1, 2, 3, 4]
    rest2, rest3 = StopAt(stage="prompts"), StopAt()
    assert cli_train.main(argv(data, b, "--resume"), hooks=[rest2, rest3]) == 0
    assert rest2.steps == [] and rest3.steps == [5, 6]  # the second stage's checkpoint holds the text features
    assert_same_weights(torch.load(stage / "model_final.pth", weights_only=True)["model"],
                        torch.load(b / "prompt_stage" / "model_final.pth", weights_only=True)["model"])
    assert_same_weights(final, torch.load(b / "model_final.pth", weights_only=True)["model"])


@pytest.mark.slow
def test_a_new_run_over_a_stopped_first_stage_is_refused(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_train.main(argv(data, out), hooks=[StopAt(2, stage="prompts")]) == 0
    assert cli_train.main(argv(data, out)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "already holds a training run" in err[0] and "prompt_stage" in err[0], err


@pytest.mark.slow
def test_a_damaged_feature_cache_is_computed_again(data, tmp_path):
    out = tmp_path / "run"
    assert cli_train.main(argv(data, out), hooks=[StopAt(2, stage="prompts")]) == 0
    cache = out / "prompt_stage" / "image_features.pt"
    cache.write_bytes(b"not a torch file")
    assert cli_train.main(argv(data, out, "--resume")) == 0
    assert "image_features.pt cannot be read (" in (out / "log.txt").read_text()
    assert torch.load(cache, weights_only=True)["features"].shape == (20, 16)


@pytest.mark.slow
def test_the_second_stage_takes_our_heads(data, tmp_path):
    out = tmp_path / "run"
    assert cli_train.main(argv(data, out, "MODEL.HEADS.NAME", "circle", "MODEL.LOSSES.ID.LABEL_SMOOTH", "0.0")) == 0
    steps = [r for r in _records(out / "metrics.jsonl") if r.get("type") == "train"]
    assert steps and all("loss_i2t" in r for r in steps)
    state = torch.load(out / "model_final.pth", weights_only=True)["model"]
    assert "head.weight" in state and "text_head.features" in state


@pytest.mark.slow
@pytest.mark.parametrize("extra, message", [
    (["MODEL.META_ARCHITECTURE", "baseline", "MODEL.BACKBONE.NAME", "resnet18"],
     "MODEL.CLIPREID.PROMPT_LEARNING trains CLIP-ReID's text prompts, but MODEL.META_ARCHITECTURE is 'baseline'"),
    (["MODEL.CLIPREID.PROMPT", "A photo of a person."], "has no X word for the learned tokens"),
    (["MODEL.CLIPREID.PROMPT", "A X photo of a X person."], "has X words in more than one place"),
    (["MODEL.CLIPREID.I2T_WEIGHT", "-1"], "MODEL.CLIPREID.I2T_WEIGHT must be a finite number >= 0"),
    (["SOLVER.PROMPT_STAGE.MAX_EPOCH", "0"], "SOLVER.PROMPT_STAGE.MAX_EPOCH must be >= 1"),
    (["SOLVER.PROMPT_STAGE.BASE_LR", "0"], "SOLVER.PROMPT_STAGE.BASE_LR must be a finite number > 0"),
    (["SOLVER.PROMPT_STAGE.IMS_PER_BATCH", "64"],
     "The 20 training images do not fill one batch of SOLVER.PROMPT_STAGE.IMS_PER_BATCH 64: lower it."),
    (["UDA.ENABLED", "True"], "learning without labels (UDA.ENABLED) has none"),
])
def test_what_cannot_run_two_stages_is_one_line(data, tmp_path, capsys, extra, message):
    assert cli_train.main(argv(data, tmp_path / "run", *extra)) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run" / "prompt_stage").exists()


class SignalAt(HookBase):
    """Sends this process SIGTERM after step `at` of the first stage (as a cluster's stop would)."""

    stage = "prompts"

    def __init__(self, at):
        self.at = at

    def after_step(self):
        if self.trainer.iter == self.at:
            os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.slow
def test_sigterm_in_the_first_stage_saves_and_says_requeue(data, tmp_path):
    out = tmp_path / "run"
    assert cli_train.main(argv(data, out), hooks=[SignalAt(2)]) == 143  # 128 + SIGTERM: "requeue me"
    assert (out / "prompt_stage" / "model_interrupted.pth").is_file() and not (out / "model_final.pth").exists()
    assert "--resume" in (out / "log.txt").read_text().splitlines()[-1]  # the last line: how to continue
    rest = StopAt(stage="prompts")
    assert cli_train.main(argv(data, out, "--resume"), hooks=[rest]) == 0
    assert rest.steps == list(range(3, 11)) and (out / "model_final.pth").is_file()


TWO_PROCESS_WORKER = """
import sys
from reid.cli import train as cli_train
from reid.modeling.backbones import clip as clip_module
from tests.cli.test_clipreid_training import TINY_VIT, argv

clip_module.CLIP_SPECS["clip_vit_b16"] = TINY_VIT
data, out = sys.argv[1:3]
sys.exit(cli_train.main(argv(data, out, "SOLVER.IMS_PER_BATCH", "8")))
"""


@pytest.mark.slow
@pytest.mark.skipif(not torch.distributed.is_available() or not torch.distributed.is_gloo_available(),
                    reason="torch.distributed gloo unavailable")
def test_two_processes_split_the_first_stages_batches_and_agree_on_the_prompts(data, tmp_path):
    import subprocess
    import sys

    from reid.data import build_dataset

    # The data once here, so that the two ranks do not race to draw it (tiny_opts' settings).
    build_dataset("synthetic", str(data), num_train_ids=5, num_test_ids=3, num_cameras=2, images_per_camera=2,
                  num_distractors=0, image_size=(64, 32))
    script = tmp_path / "worker.py"
    script.write_text(TWO_PROCESS_WORKER)
    out = tmp_path / "run"
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
           str(data), str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    steps = [r for r in _records(out / "prompt_stage" / "metrics.jsonl") if r.get("type") == "train"]
    # 20 features in batches of 4 split between the 2 processes: 5 steps per epoch, 2 epochs
    assert [r["iter"] for r in steps] == list(range(1, 11))
    final = torch.load(out / "model_final.pth", weights_only=True)["model"]
    prompts = build_prompt_learning(load_config(str(out / "prompt_stage" / "config.yaml")), 5)
    prompts.load_state_dict(torch.load(out / "prompt_stage" / "model_final.pth", weights_only=True)["model"])
    torch.testing.assert_close(final["text_head.features"], prompts.text_features(), rtol=0, atol=1e-6)
    assert "processes: 2" in (out / "log.txt").read_text()


@pytest.mark.slow
def test_a_first_stage_setting_changed_between_stop_and_resume_is_refused_unless_allowed(data, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_train.main(argv(data, out), hooks=[StopAt(2, stage="prompts")]) == 0
    edited = argv(data, out, "SOLVER.PROMPT_STAGE.BASE_LR", "0.01", "--resume")
    assert cli_train.main(edited) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "SOLVER.PROMPT_STAGE.BASE_LR (checkpoint 0.00035, now 0.01)" in err[0], err
    assert "prompt_stage" in err[0] and "--allow-config-change" in err[0]
    rest = StopAt(stage="prompts")
    assert cli_train.main(edited + ["--allow-config-change"], hooks=[rest]) == 0
    assert rest.steps == list(range(3, 11))


@pytest.mark.slow
def test_a_first_stage_warmup_as_long_as_the_stage_is_named_by_its_own_keys(data, tmp_path):
    out = tmp_path / "w"
    assert cli_train.main(argv(data, out, "SOLVER.PROMPT_STAGE.WARMUP_EPOCHS", "2", "SOLVER.MAX_EPOCH", "1")) == 0
    logs = "".join(p.read_text() for p in (out / "log.txt", out / "prompt_stage" / "log.txt") if p.exists())
    assert ("SOLVER.PROMPT_STAGE.WARMUP_EPOCHS 2 (10 iterations) is not shorter than the whole run (10 iterations): "
            "the learning rate never reaches SOLVER.PROMPT_STAGE.BASE_LR") in logs
    warned = [line for line in logs.splitlines() if "is not shorter than the whole run" in line]
    assert warned and all("SOLVER.PROMPT_STAGE.WARMUP_EPOCHS" in line and "SOLVER.WARMUP_ITERS" not in line
                          for line in warned)
