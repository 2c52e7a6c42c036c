"""Built-in hooks on their own, driven by a stand-in loop: the metrics writer's averages and
ETA, the signal hook, the epoch seeding."""
import json
import os
import signal
import time
from types import SimpleNamespace

import pytest
import torch

from reid.engine.hooks import MetricsLogger, SeedEachEpoch, StopOnSignal


def fake_loop(**kw):
    loop = SimpleNamespace(epoch=0, start_batch=0, iter=0, iters_per_epoch=6, max_epoch=1, max_iter=6,
                           eval_records=[], last_metrics={}, rank=0, world_size=1, stop_reason=None, error=None,
                           loader=None)
    loop.__dict__.update(kw)
    # Like TrainLoop.request_stop: the first reason is kept.
    loop.request_stop = lambda reason, signum=None: setattr(loop, "stop_reason", loop.stop_reason or reason)
    return loop


def step(hook, loop, **metrics):
    loop.iter += 1
    loop.start_batch += 1
    loop.last_metrics = metrics
    hook.after_step()


def records(out):
    return [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]


def test_metrics_logger_eta_averages_since_training_started(tmp_path):
    # One fast window must not make the ETA collapse: 4 iterations took about 8 s, so 2 s each.
    hook = MetricsLogger(str(tmp_path), period=4, enabled=True, progress=False)
    hook.trainer = loop = fake_loop()
    hook.before_train()
    hook.before_epoch()
    hook._t0 = time.perf_counter() - 8.0
    for _ in range(4):
        step(hook, loop, loss=1.0, lr=0.1, images=8.0)
    hook.after_train()
    (record,) = records(tmp_path)
    assert record["iter"] == 4 and record["eta_s"] == pytest.approx((6 - 4) * 2.0, rel=0.05)


def test_metrics_logger_means_and_gradient_norm_over_finite_steps(tmp_path):
    # fp16 steps that the scaler skips have an infinite norm, logged as 0 with weight 0: the
    # mean covers the other steps only.
    hook = MetricsLogger(str(tmp_path), period=3, enabled=True, progress=False)
    hook.trainer = loop = fake_loop()
    hook.before_train()
    hook.before_epoch()
    for loss, norm, finite in ((1.0, 2.0, 1.0), (2.0, 4.0, 1.0), (3.0, 0.0, 0.0)):
        step(hook, loop, loss=loss, loss_id=loss, lr=0.3, images=8.0,
             grad_norm=torch.tensor(norm), grad_norm_steps=torch.tensor(finite))
    loop.eval_records.append({"type": "eval", "split": "test", "dataset": "x", "epoch": 1, "iter": 3, "mAP": 5.0})
    hook.after_epoch()
    hook.after_train()
    train, evaluation = records(tmp_path)
    assert train["grad_norm"] == 3.0 and train["loss"] == 2.0 and train["loss_id"] == 2.0
    assert "grad_norm_steps" not in train and train["images_per_s"] > 0
    assert evaluation == {"type": "eval", "split": "test", "dataset": "x", "epoch": 1, "iter": 3, "mAP": 5.0}


def test_metrics_logger_on_other_ranks_writes_nothing(tmp_path):
    hook = MetricsLogger(str(tmp_path / "rank1"), period=1, enabled=False, progress=True)
    hook.trainer = loop = fake_loop()
    hook.before_train()
    hook.before_epoch()
    step(hook, loop, loss=1.0, lr=0.1, images=8.0)
    hook.after_train()
    assert not os.path.exists(tmp_path / "rank1")


def test_signal_hook_requests_a_stop_and_restores_the_handlers(monkeypatch):
    from reid.engine import hooks as hooks_module
    from reid.utils.stop_request import StopRequested, check_stop, stop_signal

    clock = [100.0]
    monkeypatch.setattr(hooks_module.time, "monotonic", lambda: clock[0])
    hook = StopOnSignal()
    hook.trainer = loop = fake_loop()
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)}
    hook.before_train()
    try:
        os.kill(os.getpid(), signal.SIGUSR1)  # SLURM's warning ahead of a time limit
        assert loop.stop_reason == "SIGUSR1" and stop_signal() == signal.SIGUSR1
        with pytest.raises(StopRequested, match="feature extraction abandoned: SIGUSR1"):
            check_stop("feature extraction")  # what an evaluation in progress sees
        os.kill(os.getpid(), signal.SIGINT)  # within a second: the same request delivered twice
        assert loop.stop_reason == "SIGUSR1"
        clock[0] += 1.5
        with pytest.raises(KeyboardInterrupt):  # a second Ctrl-C later means "now"
            os.kill(os.getpid(), signal.SIGINT)
        hook.after_train()  # other hooks save the last checkpoint here: a signal must still be a request
        assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
    finally:
        hook.release()
    assert {s: signal.getsignal(s) for s in before} == before
    assert stop_signal() is None  # the request ended with the run that acted on it
    check_stop("anything")


def test_epoch_seeding_depends_on_the_epoch_and_keeps_restored_states_mid_epoch():
    hook = SeedEachEpoch(7)
    hook.trainer = loop = fake_loop(epoch=3)
    hook.before_epoch()
    a = torch.rand(2)
    torch.rand(5)  # whatever ran before (an evaluation) does not matter
    hook.before_epoch()
    assert torch.equal(a, torch.rand(2))
    loop.epoch = 4
    hook.before_epoch()
    assert not torch.equal(a, torch.rand(2))
    # A single-process run resumed mid-epoch keeps the generator state the checkpoint restored.
    loop.start_batch = 2
    state = torch.get_rng_state()
    hook.before_epoch()
    assert torch.equal(torch.get_rng_state(), state)
