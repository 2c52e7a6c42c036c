"""Trainer behaviour with stub data/model: outputs, resume equivalence, signals, NaN guard,
model selection, AMP switches, backbone freezing and clipping (the built-in hooks at work)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from reid.engine import NonFiniteLossError, Trainer, TrainingInterrupted
from reid.engine.checkpoint_files import CheckpointError, last_checkpoint
from reid.utils.logger import setup_logger

from tests.engine.stubs import StubReID, assert_same_weights, model_state, stub_cfg, stub_loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IPE = 6  # 48 stub images / batch 8


def run(cfg, model=None, num_workers=0, eval_fn=None, resume=False):
    setup_logger(cfg.OUTPUT_DIR)
    trainer = Trainer(cfg, model or StubReID(), stub_loader(cfg, num_workers), eval_fn=eval_fn, progress=False)
    trainer.resume_or_load(resume=resume)
    return trainer, trainer.train()


def read_metrics(out):
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """One uninterrupted 2-epoch run that the resume tests compare against."""
    out = tmp_path_factory.mktemp("straight")
    cfg = stub_cfg(out)
    run(cfg)
    return str(out)


@pytest.mark.slow
def test_run_writes_config_log_metrics_and_checkpoints(straight):
    files = set(os.listdir(straight))
    assert {"config.yaml", "log.txt", "metrics.jsonl", "model_0001.pth", "model_final.pth", "last_checkpoint"} <= files
    assert open(os.path.join(straight, "last_checkpoint")).read().strip() == "model_final.pth"
    log = open(os.path.join(straight, "log.txt")).read()
    assert "epoch 2/2" in log and "loss_id" in log and "loss_reg" in log and "s_p" in log and "img/s" in log
    assert "Model selection: none (TEST.VAL_IDS 0)" in log
    records = read_metrics(straight)
    train = [r for r in records if r["type"] == "train"]
    # LOG_PERIOD 2 with 6 iterations per epoch: iterations 2, 4, 6, 8, 10, 12.
    assert [r["iter"] for r in train] == [2, 4, 6, 8, 10, 12]
    assert [r["epoch"] for r in train] == [1, 1, 1, 2, 2, 2]
    for r in train:
        assert {"lr", "loss", "loss_id", "loss_reg", "s_p", "s_n", "images_per_s", "time", "eta_s"} <= r.keys()
        assert r["loss"] == pytest.approx(r["loss_id"] + r["loss_reg"], rel=1e-5)
        assert -1.0 <= r["s_n"] <= 1.0 and r["images_per_s"] > 0
    ckpt = torch.load(os.path.join(straight, "model_final.pth"), weights_only=True)
    assert {"model", "optimizer", "scheduler", "scaler", "epoch", "iteration", "rng", "sampler", "cfg", "hooks"} <= ckpt.keys()
    assert "train_model" not in ckpt  # the evaluated weights are the trained ones
    assert ckpt["epoch"] == 2 and ckpt["iteration"] == 2 * IPE
    assert ckpt["sampler"] == {"epoch": 2, "start_batch": 0}
    assert "head.t" in ckpt["model"]  # head buffers travel with the weights
    assert ckpt["scheduler"]["last_epoch"] == 2 * IPE


@pytest.mark.slow
def test_same_seed_repeats_the_run(straight, tmp_path):
    run(stub_cfg(tmp_path))
    assert_same_weights(model_state(os.path.join(straight, "model_final.pth")), model_state(str(tmp_path / "model_final.pth")))


@pytest.mark.slow
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_at_epoch_boundary_ends_where_straight_run_ends(num_workers, tmp_path):
    ref = tmp_path / "ref"
    run(stub_cfg(ref), num_workers=num_workers)
    # "Stop" after epoch 1: keep only what existed then, and resume in a fresh trainer.
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(ref / "model_0001.pth", resumed / "model_0001.pth")
    trainer, result = run(stub_cfg(resumed), num_workers=num_workers, resume=True)
    assert result.iteration == 2 * IPE
    assert_same_weights(model_state(str(ref / "model_final.pth")), model_state(str(resumed / "model_final.pth")))
    log = open(resumed / "log.txt").read()
    assert "Resumed from" in log and "continuing at epoch 2 batch 0" in log


@pytest.mark.slow
@pytest.mark.parametrize("stop_at", [2, IPE - 1])
def test_signal_mid_epoch_saves_then_resume_matches_straight(straight, tmp_path, stop_at):
    cfg = stub_cfg(tmp_path)
    setup_logger(cfg.OUTPUT_DIR)

    def on_forward(call):
        # The signal arrives during forward call `stop_at` of epoch 1 (0-based within the epoch).
        if call == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)  # the trainer's handler turns it into a stop request

    trainer = Trainer(cfg, StubReID(on_forward=on_forward), stub_loader(cfg), progress=False)
    with pytest.raises(TrainingInterrupted) as err:
        trainer.train()
    assert err.value.exit_code == 143
    assert err.value.checkpoint.endswith("model_interrupted.pth")
    assert "--resume" in str(err.value) and "SIGTERM" in str(err.value)
    ckpt = torch.load(err.value.checkpoint, weights_only=True)
    assert ckpt["iteration"] == stop_at + 1
    assert ckpt["sampler"] == {"epoch": 0, "start_batch": stop_at + 1}
    assert last_checkpoint(str(tmp_path)) == err.value.checkpoint
    # A fresh process-like resume: new model object, new loader, new trainer.
    _, result = run(stub_cfg(tmp_path), resume=True)
    assert result.iteration == 2 * IPE
    assert_same_weights(model_state(os.path.join(straight, "model_final.pth")), model_state(str(tmp_path / "model_final.pth")))
    assert not os.path.exists(tmp_path / "model_interrupted.pth")  # superseded, removed


class AbandonOnSignal:
    """An eval_fn (or a hook's work) that a stop signal interrupts, as feature extraction is."""

    def __init__(self, at_epoch: int) -> None:
        self.at_epoch, self.calls = at_epoch, []

    def __call__(self, model, epoch):
        from reid.utils.stop_request import check_stop

        self.calls.append(epoch)
        if epoch == self.at_epoch and len(self.calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the evaluation runs
            check_stop("feature extraction")
        return [{"split": "test", "dataset": "stub", "mAP": float(epoch)}]


@pytest.mark.slow
@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_while_the_stop_is_saved_does_not_lose_the_checkpoint(straight, tmp_path, second):
    # A scheduler's signal and the copy a launcher forwards arrive together; the second one lands
    # in the middle of writing model_interrupted.pth.
    cfg = stub_cfg(tmp_path)
    setup_logger(cfg.OUTPUT_DIR)

    def on_forward(call):
        if call == IPE + 2:
            os.kill(os.getpid(), signal.SIGTERM)

    trainer = Trainer(cfg, StubReID(on_forward=on_forward), stub_loader(cfg), progress=False)
    save = trainer.checkpointer.save

    def save_under_fire(name):
        if name == "model_interrupted.pth":
            os.kill(os.getpid(), second)
        return save(name)

    trainer.checkpointer.save = save_under_fire
    with pytest.raises(TrainingInterrupted) as err:
        trainer.train()
    assert err.value.exit_code == 143 and err.value.checkpoint.endswith("model_interrupted.pth")
    assert torch.load(err.value.checkpoint, weights_only=True)["iteration"] == IPE + 3
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # given back once everything was saved
    _, result = run(stub_cfg(tmp_path), resume=True)
    assert_same_weights(model_state(os.path.join(straight, "model_final.pth")), model_state(str(tmp_path / "model_final.pth")))


@pytest.mark.slow
def test_a_stop_during_the_evaluation_saves_the_epoch_and_resume_evaluates_it_again(straight, tmp_path):
    cfg = stub_cfg(tmp_path)
    setup_logger(cfg.OUTPUT_DIR)
    eval_fn = AbandonOnSignal(at_epoch=1)
    trainer = Trainer(cfg, StubReID(), stub_loader(cfg), eval_fn=eval_fn, progress=False)
    with pytest.raises(TrainingInterrupted) as err:
        trainer.train()
    assert err.value.exit_code == 143 and err.value.checkpoint.endswith("model_interrupted.pth")
    ckpt = torch.load(err.value.checkpoint, weights_only=True)
    # Epoch 1's steps are all done but not its end-of-epoch work (evaluation, model_0001.pth).
    assert ckpt["iteration"] == IPE and ckpt["sampler"] == {"epoch": 0, "start_batch": IPE}
    assert not (tmp_path / "model_0001.pth").exists()
    log = (tmp_path / "log.txt").read_text()
    assert "Evaluation after epoch 1 failed" not in log
    # A resume evaluates epoch 1 (no step is trained twice) and continues to the same weights.
    trainer, result = run(stub_cfg(tmp_path), eval_fn=eval_fn, resume=True)
    assert eval_fn.calls == [1, 1, 2] and result.iteration == 2 * IPE
    assert (tmp_path / "model_0001.pth").exists()
    evals = [r for r in read_metrics(tmp_path) if r["type"] == "eval"]
    assert [(r["epoch"], r["mAP"]) for r in evals] == [(1, 1.0), (2, 2.0)]
    assert_same_weights(model_state(os.path.join(straight, "model_final.pth")), model_state(str(tmp_path / "model_final.pth")))


@pytest.mark.slow
def test_a_stop_during_a_hooks_epoch_start_work_keeps_the_position(straight, tmp_path):
    from reid.engine import HookBase
    from reid.utils.stop_request import check_stop

    class Clustering(HookBase):  # like learning without labels: extraction before every epoch
        def __init__(self):
            self.starts = []

        def before_epoch(self):
            self.starts.append((self.trainer.epoch, self.trainer.start_batch))
            if len(self.starts) == 2:
                os.kill(os.getpid(), signal.SIGUSR1)
                check_stop("clustering")

    cfg = stub_cfg(tmp_path)
    setup_logger(cfg.OUTPUT_DIR)
    hook = Clustering()
    trainer = Trainer(cfg, StubReID(), stub_loader(cfg), progress=False, hooks=[hook])
    with pytest.raises(TrainingInterrupted) as err:
        trainer.train()
    assert err.value.exit_code == 138 and "SIGUSR1" in str(err.value)
    # The epoch-1 checkpoint was written at epoch 2's start, before the abandoned work: nothing newer.
    assert err.value.checkpoint.endswith("model_0001.pth") and not (tmp_path / "model_interrupted.pth").exists()
    hook2 = Clustering()
    setup_logger(cfg.OUTPUT_DIR)
    trainer = Trainer(stub_cfg(tmp_path), StubReID(), stub_loader(cfg), progress=False, hooks=[hook2])
    trainer.resume_or_load(resume=True)
    trainer.train()
    assert hook.starts == [(0, 0), (1, 0)] and hook2.starts == [(1, 0)]
    assert_same_weights(model_state(os.path.join(straight, "model_final.pth")), model_state(str(tmp_path / "model_final.pth")))


def _resumable_copy(straight, tmp_path, cfg_text=None):
    """model_0001.pth of the straight run as the last checkpoint of a run in tmp_path, its stored
    config replaced by `cfg_text` (None: removed)."""
    data = torch.load(os.path.join(straight, "model_0001.pth"), weights_only=True)
    if cfg_text is None:
        del data["cfg"]
    else:
        data["cfg"] = cfg_text
    torch.save(data, tmp_path / "model_0001.pth")
    (tmp_path / "last_checkpoint").write_text("model_0001.pth")


@pytest.mark.slow
def test_a_stored_config_of_another_version_is_still_compared_on_the_keys_both_know(straight, tmp_path, reid_log):
    stored = torch.load(os.path.join(straight, "model_0001.pth"), weights_only=True)["cfg"]
    _resumable_copy(straight, tmp_path, stored + "RENAMED_LATER:\n  KEY: 1\n")
    with pytest.raises(CheckpointError, match=r"SOLVER.BASE_LR \(checkpoint 0.05, now 0.1\)"):
        run(stub_cfg(tmp_path, **{"SOLVER.BASE_LR": 0.1}), resume=True)
    assert "has keys this version does not know (RENAMED_LATER); the others are compared" in reid_log.text


@pytest.mark.slow
def test_a_checkpoint_without_a_stored_config_says_nothing_was_compared(straight, tmp_path, reid_log):
    _resumable_copy(straight, tmp_path, None)
    _, result = run(stub_cfg(tmp_path), resume=True)
    assert result.iteration == 2 * IPE
    assert "stores no config to compare this run's settings with" in reid_log.text


SIGTERM_SCRIPT = textwrap.dedent(
    """
    import os, sys
    sys.path.insert(0, {root!r})
    from tests.engine.stubs import StubReID, stub_cfg, stub_loader, touch
    from reid.engine import Trainer, TrainingInterrupted
    from reid.utils.logger import setup_logger

    out = sys.argv[1]
    cfg = stub_cfg(out, **{{"SOLVER.MAX_EPOCH": 40}})
    setup_logger(out)
    def on_forward(call):
        if call == 3:
            touch(os.path.join(out, "started"))
    trainer = Trainer(cfg, StubReID(on_forward=on_forward, delay=0.05), stub_loader(cfg), progress=False)
    trainer.resume_or_load(resume=True)
    try:
        trainer.train()
    except TrainingInterrupted as e:
        print(e)
        sys.exit(e.exit_code)
    """
)


@pytest.mark.slow
def test_sigterm_to_a_training_process_saves_and_exits_143(tmp_path):
    script = tmp_path / "train_stub.py"
    script.write_text(SIGTERM_SCRIPT.format(root=ROOT))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while not (out / "started").exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the training subprocess never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, output
    assert "Training stopped by SIGTERM" in output
    path = last_checkpoint(str(out))
    assert path is not None and path.endswith("model_interrupted.pth")
    ckpt = torch.load(path, weights_only=True)
    assert 4 <= ckpt["iteration"] < 40 * IPE
    assert ckpt["sampler"]["start_batch"] == ckpt["iteration"] % IPE or ckpt["sampler"]["start_batch"] == IPE


@pytest.mark.slow
def test_nan_loss_stops_with_iteration_and_term_and_keeps_checkpoint(straight, tmp_path):
    nan_call = IPE + 2  # third iteration of epoch 2, after model_0001.pth was written
    cfg = stub_cfg(tmp_path)
    with pytest.raises(NonFiniteLossError) as err:
        run(cfg, model=StubReID(nan_at=nan_call))
    msg = str(err.value)
    assert "loss_id" in msg and f"iteration {nan_call}" in msg and "epoch 2" in msg
    assert err.value.checkpoint.endswith("model_0001.pth")
    assert "model_0001.pth" in msg
    # The good checkpoint is intact: loadable and equal to the straight run's epoch-1 file.
    assert_same_weights(model_state(os.path.join(straight, "model_0001.pth")), model_state(str(tmp_path / "model_0001.pth")))
    assert last_checkpoint(str(tmp_path)).endswith("model_0001.pth")
    assert not os.path.exists(tmp_path / "model_final.pth")
    assert not os.path.exists(tmp_path / "model_interrupted.pth")


def eval_sequence(val_maps, test_maps):
    """An eval_fn returning preset val/test mAPs per epoch (the test split keeps improving)."""
    def eval_fn(model, epoch):
        assert not model.training  # the trainer switches to eval mode around evaluation
        recs = [{"split": "test", "dataset": "stub", "R-1": 50.0, "R-5": 60.0, "R-10": 70.0, "mAP": test_maps[epoch - 1], "mINP": 5.0}]
        if val_maps is not None:
            recs.append({"split": "val", "dataset": "stub", "R-1": 40.0, "mAP": val_maps[epoch - 1]})
        return recs
    return eval_fn


@pytest.mark.slow
def test_best_model_is_chosen_on_validation_split_only(tmp_path):
    cfg = stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 3, "TEST.VAL_IDS": 2})
    trainer, result = run(cfg, eval_fn=eval_sequence([10.0, 30.0, 20.0], [1.0, 2.0, 90.0]))
    assert result.best == {"metric": "val/mAP", "value": 30.0, "epoch": 2, "iteration": 2 * IPE}
    best = torch.load(str(tmp_path / "model_best.pth"), weights_only=True)
    assert best["epoch"] == 2
    assert_same_weights(best["model"], model_state(str(tmp_path / "model_0002.pth")))
    hooks_state = torch.load(str(tmp_path / "model_final.pth"), weights_only=True)["hooks"]
    assert hooks_state["EvalHook"]["best"]["value"] == 30.0  # the tracker resumes with the run
    evals = [r for r in read_metrics(str(tmp_path)) if r["type"] == "eval"]
    assert [(r["epoch"], r["split"]) for r in evals] == [(1, "test"), (1, "val"), (2, "test"), (2, "val"), (3, "test"), (3, "val")]
    assert evals[4]["mAP"] == 90.0 and evals[4]["iter"] == 3 * IPE and evals[4]["dataset"] == "stub"
    assert last_checkpoint(str(tmp_path)).endswith("model_final.pth")  # best is not a resume point


@pytest.mark.slow
def test_without_validation_split_test_scores_select_nothing(tmp_path):
    cfg = stub_cfg(tmp_path, **{"TEST.EVAL_PERIOD": 5})  # period beyond the run: only the final eval
    _, result = run(cfg, eval_fn=eval_sequence(None, [5.0, 99.0]))
    assert result.best is None and result.best_checkpoint is None
    assert not os.path.exists(tmp_path / "model_best.pth")
    assert result.final_checkpoint.endswith("model_final.pth")
    evals = [r for r in read_metrics(str(tmp_path)) if r["type"] == "eval"]
    assert [(r["epoch"], r["split"], r["mAP"]) for r in evals] == [(2, "test", 99.0)]


def test_resume_of_finished_run_does_nothing(straight, tmp_path):
    shutil.copy(os.path.join(straight, "model_final.pth"), tmp_path / "model_final.pth")
    trainer, result = run(stub_cfg(tmp_path), resume=True)
    assert result.iteration == 2 * IPE and trainer.model.calls == 0
    assert "Training already finished" in open(tmp_path / "log.txt").read()


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    trainer, result = run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1}), resume=True)
    assert result.iteration == IPE
    assert "no checkpoint in" in open(tmp_path / "log.txt").read()


def test_resume_with_a_longer_schedule_is_refused_and_a_shorter_one_warns(straight, tmp_path):
    # The checkpoint's schedule (2 epochs) is restored on resume: a 3rd epoch would run at LR 0.
    for name in ("model_final.pth", "config.yaml"):
        shutil.copy(os.path.join(straight, name), tmp_path / name)
    config_before = (tmp_path / "config.yaml").read_text()
    with pytest.raises(CheckpointError) as err:
        run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 3}), resume=True)
    msg = str(err.value)
    assert "model_final.pth" in msg and "6 extra iterations" in msg and "learning rate 0.00e+00" in msg
    assert "MODEL.WEIGHTS" in msg and "another OUTPUT_DIR" in msg and "SOLVER.MAX_EPOCH 2" in msg
    assert (tmp_path / "config.yaml").read_text() == config_before  # the run's record is untouched
    # Fewer iterations than the schedule only warn (the run is already past them).
    trainer, result = run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1}), resume=True)
    assert result.iteration == 2 * IPE and trainer.model.calls == 0
    log = open(tmp_path / "log.txt").read()
    assert "The checkpoint's LR schedule is kept" in log and "Training already finished" in log


def failing_eval(fail_epoch):
    def eval_fn(model, epoch):
        if epoch == fail_epoch:
            raise ValueError("No query has a valid match in the gallery")
        return [{"split": "test", "dataset": "stub", "mAP": 1.0}]
    return eval_fn


@pytest.mark.slow
@pytest.mark.parametrize(
    "period,fail_epoch,saved",
    [(1, 1, "model_0001.pth"), (0, 1, "model_interrupted.pth"), (1, 2, "model_final.pth")],
)
def test_failed_evaluation_saves_the_epoch_before_stopping(tmp_path, period, fail_epoch, saved):
    cfg = stub_cfg(tmp_path, **{"SOLVER.CHECKPOINT_PERIOD": period})
    with pytest.raises(ValueError, match="No query"):
        run(cfg, eval_fn=failing_eval(fail_epoch))
    path = str(tmp_path / saved)
    assert last_checkpoint(str(tmp_path)) == path
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["epoch"] == fail_epoch and ckpt["iteration"] == fail_epoch * IPE
    assert ckpt["sampler"] == {"epoch": fail_epoch, "start_batch": 0}
    log = open(tmp_path / "log.txt").read()
    assert f"Evaluation after epoch {fail_epoch} failed: ValueError" in log
    assert f"saved to {path}" in log
    if fail_epoch < 2:
        # --resume continues after the saved epoch and finishes the run.
        trainer, result = run(stub_cfg(tmp_path, **{"SOLVER.CHECKPOINT_PERIOD": period}), resume=True)
        assert result.iteration == 2 * IPE and trainer.model.calls == IPE
        assert result.final_checkpoint is not None


@pytest.mark.slow
def test_warmup_longer_than_the_run_warns_once(tmp_path):
    run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1, "SOLVER.WARMUP_ITERS": 100}))
    log = open(tmp_path / "log.txt").read()
    assert log.count("SOLVER.WARMUP_ITERS 100 is not shorter than the whole run (6 iterations)") == 1
    run(stub_cfg(tmp_path / "short", **{"SOLVER.MAX_EPOCH": 1}))
    assert "WARMUP_ITERS" not in open(tmp_path / "short" / "log.txt").read().split("Schedule:")[1]


def test_fp16_on_cpu_and_unknown_amp_are_explained(tmp_path):
    with pytest.raises(ValueError, match=r"SOLVER.AMP fp16 needs CUDA.*Use SOLVER.AMP bf16"):
        Trainer(stub_cfg(tmp_path, **{"SOLVER.AMP": "fp16"}), StubReID(), stub_loader(stub_cfg(tmp_path)))
    with pytest.raises(ValueError, match=r"Unknown SOLVER.AMP 'fp8'.*off, bf16, fp16"):
        Trainer(stub_cfg(tmp_path, **{"SOLVER.AMP": "fp8"}), StubReID(), stub_loader(stub_cfg(tmp_path)))


def test_bf16_autocast_trains_on_cpu(tmp_path):
    _, result = run(stub_cfg(tmp_path, **{"SOLVER.AMP": "bf16", "SOLVER.MAX_EPOCH": 1}))
    assert result.final_checkpoint is not None
    train = [r for r in read_metrics(str(tmp_path)) if r["type"] == "train"]
    assert all(r["loss"] is not None for r in train)


@pytest.mark.slow
@pytest.mark.parametrize("freeze", [IPE, IPE - 2])
def test_backbone_freeze_trains_only_neck_and_head_first(tmp_path, freeze):
    cfg = stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1, "SOLVER.FREEZE_ITERS": freeze})
    model = StubReID()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    run(cfg, model=model)
    after = model.state_dict()
    changed = not torch.equal(before["backbone.0.weight"], after["backbone.0.weight"])
    assert changed == (freeze < IPE)
    assert not torch.equal(before["head.weight"], after["head.weight"])
    assert not torch.equal(before["neck.weight"], after["neck.weight"])
    assert all(p.requires_grad for p in model.backbone.parameters())  # unfrozen afterwards
    assert not model.neck.bias.requires_grad  # a permanently frozen tensor stays frozen


def test_freeze_needs_a_known_backbone(tmp_path):
    class NoBackbone(StubReID):
        def __init__(self):
            super().__init__()
            self.features = self.backbone
            del self.backbone

    with pytest.raises(ValueError, match="backbone_parameters"):
        Trainer(stub_cfg(tmp_path, **{"SOLVER.FREEZE_ITERS": 2}), NoBackbone(), stub_loader(stub_cfg(tmp_path)))


@pytest.mark.slow
def test_gradient_clipping_logs_the_norm(tmp_path):
    run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1, "SOLVER.CLIP_GRAD_NORM": 1e-3}))
    train = [r for r in read_metrics(str(tmp_path)) if r["type"] == "train"]
    assert all(r["grad_norm"] > 0 for r in train)


@pytest.mark.slow
def test_periodic_checkpoints_are_bounded(tmp_path):
    run(stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 5, "SOLVER.CHECKPOINT_KEEP": 2}))
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".pth")) == ["model_0003.pth", "model_0004.pth", "model_final.pth"]


def test_bad_batches_and_outputs_are_explained(tmp_path):
    cfg = stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1})

    class TupleLoader(list):
        pass

    loader = TupleLoader([(torch.zeros(2, 3, 8, 4), torch.zeros(2, dtype=torch.long))])
    trainer = Trainer(cfg, StubReID(), loader, progress=False)
    with pytest.raises(TypeError, match="dicts with 'images', 'targets' .*got tuple"):
        trainer.train()
    sie = StubReID()
    sie.uses_camids = True  # a model with a camera embedding: batches without camera ids cannot feed it
    with pytest.raises(TypeError, match=r"dicts with 'images', 'targets', 'camids' .*got \['images', 'targets'"):
        Trainer(stub_cfg(tmp_path / "sie", **{"SOLVER.MAX_EPOCH": 1}), sie,
                TupleLoader([{"images": loader[0][0], "targets": loader[0][1]}]), progress=False).train()
    with pytest.raises(ValueError, match="yields no batch"):
        Trainer(cfg, StubReID(), TupleLoader([]), progress=False)


# ----------------------------------------------------------------------------------------
# End to end with the real data pipeline and models (tiny: resnet18, 32x16, 4 identities).
# ----------------------------------------------------------------------------------------
def real_cfg(root, out, arch="baseline", head="circle", **overrides):
    from reid.config import get_cfg

    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.DATASETS.NAMES = ["synthetic"]
    cfg.DATASETS.TESTS = ["synthetic"]
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.NUM_CAMERAS, s.IMAGES_PER_CAMERA, s.NUM_DISTRACTORS = 4, 3, 2, 2, 0
    s.IMAGE_SIZE = [64, 32]
    # 32x16 inputs keep a CPU iteration cheap; the /16 feature map (2x1) still feeds MGN's stripes.
    cfg.INPUT.SIZE_TRAIN = [32, 16]
    cfg.INPUT.SIZE_TEST = [32, 16]
    cfg.INPUT.PADDING = 2
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.HEADS.NAME = head
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.MGN.REDUCTION_DIM = 32
    cfg.MODEL.DEVICE = "cpu"
    cfg.SOLVER.IMS_PER_BATCH = 8
    cfg.DATALOADER.NUM_INSTANCE = 2
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SOLVER.OPTIMIZER = "SGD"  # one state tensor per weight (Adam: two): smaller checkpoints
    cfg.SOLVER.BASE_LR = 0.01
    cfg.SOLVER.MAX_EPOCH = 1
    cfg.SOLVER.WARMUP_ITERS = 2
    cfg.SOLVER.LOG_PERIOD = 1
    cfg.SOLVER.CHECKPOINT_PERIOD = 10  # only model_final.pth (and interrupt checkpoints)
    cfg.OUTPUT_DIR = str(out)
    for key, value in overrides.items():
        node = cfg
        for part in key.split(".")[:-1]:
            node = node[part]
        node[key.split(".")[-1]] = value
    return cfg


def real_trainer(cfg, on_forward=None, resume=False):
    from reid.data import build_train_data, build_train_loader
    from reid.modeling import build_model

    setup_logger(cfg.OUTPUT_DIR)
    data = build_train_data(cfg)
    cfg.MODEL.HEADS.NUM_CLASSES = data.num_classes
    torch.manual_seed(0)  # same initial weights in every run of a test
    model = build_model(cfg)
    if on_forward is not None:
        calls = []
        model.register_forward_pre_hook(lambda m, args: on_forward(len(calls)) or calls.append(1))
    trainer = Trainer(cfg, model, build_train_loader(cfg, data.items), progress=False)
    trainer.resume_or_load(resume=resume)
    return trainer


@pytest.fixture(scope="module")
def synthetic_root(tmp_path_factory):
    from reid.data import build_dataset

    root = tmp_path_factory.mktemp("data")
    build_dataset("synthetic", str(root), num_train_ids=4, num_test_ids=3, num_cameras=2,
                  images_per_camera=2, num_distractors=0, image_size=(64, 32))
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch,head,layout",
    [("baseline", h, "concat") for h in ("circle", "amsoftmax", "arcface", "curricularface", "normface", "linear")]
    + [("mgn", "circle", "concat"), ("mgn", "amsoftmax", "per_branch")],
)
def test_real_models_and_heads_train_and_write_outputs(synthetic_root, tmp_path, arch, head, layout):
    # P=4 identities x K=4 images: the whole tiny training set in one iteration.
    cfg = real_cfg(synthetic_root, tmp_path, arch, head, **{"MODEL.MGN.LOSS_LAYOUT": layout,
                                                            "SOLVER.IMS_PER_BATCH": 16, "DATALOADER.NUM_INSTANCE": 4})
    trainer = real_trainer(cfg)
    result = trainer.train()
    ipe = trainer.loop.iters_per_epoch
    ckpt = torch.load(result.final_checkpoint, weights_only=True)
    assert ckpt["iteration"] == ipe and ckpt["epoch"] == 1
    assert any(k.startswith(("head.", "heads.")) for k in ckpt["model"])
    train = [r for r in read_metrics(str(tmp_path)) if r["type"] == "train"]
    assert [r["iter"] for r in train] == list(range(1, ipe + 1))
    assert all(r["loss_id"] > 0 and r["loss"] >= r["loss_id"] - 1e-6 for r in train)
    if head != "linear":
        assert all(-1.0 <= r["s_p"] <= 1.0 and -1.0 <= r["s_n"] <= 1.0 for r in train)
    log = open(tmp_path / "log.txt").read()
    assert "loss_id" in log and "Saved checkpoint" in log


@pytest.mark.slow
def test_real_pipeline_resume_after_signal_matches_straight_run(synthetic_root, tmp_path):
    # CurricularFace: its running t buffer must resume too, not only the weights.
    straight = real_trainer(real_cfg(synthetic_root, tmp_path / "a", head="curricularface", **{"SOLVER.MAX_EPOCH": 2}))
    straight.train()
    ipe = straight.loop.iters_per_epoch

    def on_forward(call):
        if call == ipe:  # during the 1st iteration of epoch 2
            os.kill(os.getpid(), signal.SIGINT)

    interrupted = real_trainer(real_cfg(synthetic_root, tmp_path / "b", head="curricularface", **{"SOLVER.MAX_EPOCH": 2}), on_forward)
    with pytest.raises(TrainingInterrupted) as err:
        interrupted.train()
    assert err.value.exit_code == 130
    resumed = real_trainer(real_cfg(synthetic_root, tmp_path / "b", head="curricularface", **{"SOLVER.MAX_EPOCH": 2}), resume=True)
    assert (resumed.loop.epoch, resumed.loop.start_batch) == (1, 1)
    resumed.train()
    a = model_state(str(tmp_path / "a" / "model_final.pth"))
    b = model_state(str(tmp_path / "b" / "model_final.pth"))
    assert "head.t" in a
    assert_same_weights(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("stop_call", ["mid_epoch", "last_of_epoch"])
def test_real_loader_with_persistent_workers_resumes_exactly(synthetic_root, tmp_path, stop_call):
    # Per-sample seeds: augmentation depends on the sample's position only, so a run stopped
    # anywhere (even mid-epoch) and resumed with persistent loader workers ends with the
    # uninterrupted run's weights.
    extra = {"SOLVER.MAX_EPOCH": 2, "DATALOADER.NUM_WORKERS": 2, "SOLVER.IMS_PER_BATCH": 4}
    straight = real_trainer(real_cfg(synthetic_root, tmp_path / "a", **extra))
    assert straight.loop.loader.persistent_workers
    straight.train()
    ipe = straight.loop.iters_per_epoch
    stop_at = ipe // 2 if stop_call == "mid_epoch" else ipe - 1

    def on_forward(call):
        if call == stop_at:
            os.kill(os.getpid(), signal.SIGTERM)

    interrupted = real_trainer(real_cfg(synthetic_root, tmp_path / "b", **extra), on_forward)
    with pytest.raises(TrainingInterrupted) as err:
        interrupted.train()
    assert err.value.exit_code == 143
    resumed = real_trainer(real_cfg(synthetic_root, tmp_path / "b", **extra), resume=True)
    assert (resumed.loop.epoch, resumed.loop.start_batch) == (0, stop_at + 1)
    resumed.train()
    assert_same_weights(model_state(str(tmp_path / "a" / "model_final.pth")),
                        model_state(str(tmp_path / "b" / "model_final.pth")))


# ----------------------------------------------------------------------------------------
# Run plumbing: logger, metrics writer, seeding, device resolution, progress bar.
# ----------------------------------------------------------------------------------------
def test_logger_rank0_writes_file_once_and_other_ranks_do_not(tmp_path):
    import logging

    log = setup_logger(str(tmp_path / "a"))
    log = setup_logger(str(tmp_path / "a"))  # a second setup must not duplicate lines
    log.info("hello once")
    logging.getLogger("reid.engine.something").info("child logger line")
    text = open(tmp_path / "a" / "log.txt").read()
    assert text.count("hello once") == 1 and "child logger line" in text
    setup_logger(str(tmp_path / "b"), rank=1).warning("from rank 1")
    assert not os.path.exists(tmp_path / "b" / "log.txt")
    setup_logger(None)


def test_metrics_writer_lines_are_strict_json_and_flushed(tmp_path):
    from reid.utils.logger import MetricsWriter

    w = MetricsWriter(str(tmp_path), tensorboard=False)
    w.write({"type": "train", "iter": 1, "loss": torch.tensor(2.5), "bad": float("nan")})
    # Readable before close: every line is flushed as written.
    line = open(tmp_path / "metrics.jsonl").read()
    assert json.loads(line) == {"type": "train", "iter": 1, "loss": 2.5, "bad": None}
    w.close()
    off = MetricsWriter(str(tmp_path / "rank1"), enabled=False)
    off.write({"type": "train"})
    assert not os.path.exists(tmp_path / "rank1")


def test_seeding_and_device_resolution():
    from reid.utils.device import resolve_device
    from reid.utils.process import derive_seed, seed_everything

    seed_everything(5)
    a = torch.rand(3)
    seed_everything(5)
    assert torch.equal(a, torch.rand(3))
    seed_everything(5, rank=1)
    assert not torch.equal(a, torch.rand(3))
    assert derive_seed(0, 1) != derive_seed(1, 0)
    with pytest.raises(ValueError, match="non-negative"):
        derive_seed(-1)
    assert resolve_device("cpu").type == "cpu"
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="MODEL.DEVICE 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available.*MODEL.DEVICE cpu"):
            resolve_device("cuda")


def test_cuda_devices_always_carry_an_index(monkeypatch):
    # torch.cuda.set_device and DDP refuse torch.device("cuda"); "auto"/"cuda" must resolve
    # to the current device's index. CUDA is faked: only the answers of torch.cuda matter.
    from reid.engine.distributed import local_cuda_index
    from reid.utils.device import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert resolve_device("cuda") == torch.device("cuda", 1)
    assert resolve_device("cuda:0") == torch.device("cuda", 0)
    with pytest.raises(ValueError, match="only 2 CUDA device"):
        resolve_device("cuda:2")
    # One GPU per process: torchrun's local rank, or index 0 when the launcher has already
    # narrowed CUDA_VISIBLE_DEVICES to one GPU per process (SLURM).
    assert local_cuda_index(1) == 1
    with pytest.raises(RuntimeError, match="LOCAL_RANK 2 but only 2 CUDA device"):
        local_cuda_index(2)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    assert local_cuda_index(3) == 0
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(RuntimeError, match="lower --nproc_per_node"):
        local_cuda_index(1)


def test_resume_with_a_gradient_scaler_from_a_checkpoint_without_one(straight, tmp_path):
    # Switching to fp16 on resume: a checkpoint saved without a scaler still resumes, with a
    # fresh scaler. (fp16 needs CUDA, so a CPU scaler stands in for it.)
    shutil.copytree(straight, tmp_path, dirs_exist_ok=True)
    cfg = stub_cfg(tmp_path)
    setup_logger(cfg.OUTPUT_DIR)
    trainer = Trainer(cfg, StubReID(), stub_loader(cfg), progress=False)
    trainer.loop.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    assert trainer.resume_or_load(resume=True).endswith("model_final.pth")
    assert trainer.loop.iter == 2 * IPE and trainer.loop.scaler.get_scale() == 1024.0
    assert "has no gradient-scaler state" in open(tmp_path / "log.txt").read()


@pytest.mark.slow
def test_progress_bar_when_asked(tmp_path, capsys):
    cfg = stub_cfg(tmp_path, **{"SOLVER.MAX_EPOCH": 1})
    setup_logger(cfg.OUTPUT_DIR)
    Trainer(cfg, StubReID(), stub_loader(cfg), progress=True).train()
    err = capsys.readouterr().err
    # Captured stderr is not a terminal: whole progress lines (one per tenth of the epoch, here
    # every step), the last one complete, with the loss; no carriage returns.
    lines = [line for line in err.splitlines() if line.startswith("epoch 1/1:")]
    assert "\r" not in err and len(lines) == IPE
    assert lines[-1].startswith(f"epoch 1/1: 100% {IPE}/{IPE} it [") and "loss=" in lines[-1]


@pytest.mark.slow
def test_a_video_run_stopped_mid_epoch_resumes_to_the_straight_runs_weights(synthetic_root, tmp_path):
    # Clips drawn at random from tracklets: the frames a clip takes follow from the sample's seed, as its
    # augmentation does, so a resume mid-epoch with persistent workers draws the same clips.
    extra = {"DATASETS.NAMES": ["synthetic_video"], "DATASETS.TESTS": ["synthetic_video"], "DATASETS.VIDEO.FRAMES": 3,
             "DATALOADER.VIDEO.SAMPLER": "random", "DATALOADER.VIDEO.SEQ_LEN": 2, "SOLVER.MAX_EPOCH": 2,
             "DATALOADER.NUM_WORKERS": 2, "SOLVER.IMS_PER_BATCH": 4, "MODEL.VIDEO.TEMPORAL": "attention"}
    straight = real_trainer(real_cfg(synthetic_root, tmp_path / "a", **extra))
    straight.train()
    ipe = straight.loop.iters_per_epoch
    assert ipe >= 2

    def on_forward(call):
        if call == ipe + 1:  # mid epoch 2
            os.kill(os.getpid(), signal.SIGTERM)

    interrupted = real_trainer(real_cfg(synthetic_root, tmp_path / "b", **extra), on_forward)
    with pytest.raises(TrainingInterrupted):
        interrupted.train()
    resumed = real_trainer(real_cfg(synthetic_root, tmp_path / "b", **extra), resume=True)
    assert (resumed.loop.epoch, resumed.loop.start_batch) == (1, 2)
    resumed.train()
    a = model_state(str(tmp_path / "a" / "model_final.pth"))
    assert "temporal.score.weight" in a
    assert_same_weights(a, model_state(str(tmp_path / "b" / "model_final.pth")))
