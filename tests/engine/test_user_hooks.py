"""User hooks: the examples of docs/training.md run as written, stops requested by a hook,
and hook state across a resume."""
import math
import os
import re
from types import SimpleNamespace

import pytest
import torch

from reid.cli import train as cli_train
from reid.engine import HookBase, Trainer
from reid.utils.logger import setup_logger

from tests.engine.stubs import StubReID, assert_same_weights, stub_cfg, stub_loader

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")
IPE = 6  # 48 stub images / batch 8


def doc_example(name: str) -> dict:
    """Run the python block after ``<!-- example: name -->`` in docs/training.md; its namespace."""
    text = open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8").read()
    match = re.search(rf"<!-- example: {name} -->\s*```python\n(.*?)```", text, re.S)
    assert match, f"docs/training.md has no example {name!r}"
    namespace: dict = {}
    exec(compile(match.group(1), f"docs/training.md:{name}", "exec"), namespace)
    return namespace


class StopAt(HookBase):
    """Records every step it sees and asks to stop after step `at` (None: never)."""

    def __init__(self, at=None):
        self.at, self.steps = at, []

    def after_step(self):
        self.steps.append(self.trainer.iter)
        if self.trainer.iter == self.at:
            self.trainer.request_stop(f"test stop at step {self.at}")


def run_stub(out, hooks=(), eval_fn=None, resume=False, **overrides):
    cfg = stub_cfg(out, **overrides)
    setup_logger(cfg.OUTPUT_DIR)
    trainer = Trainer(cfg, StubReID(), stub_loader(cfg), eval_fn=eval_fn, progress=False, hooks=list(hooks))
    trainer.resume_or_load(resume=resume)
    return trainer, trainer.train()


@pytest.mark.slow
def test_hook_events_run_in_order_around_every_step(tmp_path):
    events = []

    class Recorder(HookBase):
        def before_train(self):
            events.append(("before_train", self.trainer.iter, self.trainer.max_iter))

        def before_epoch(self):
            events.append(("before_epoch", self.trainer.epoch))

        def before_step(self):
            events.append(("before_step", self.trainer.iter))

        def after_step(self):
            assert {"loss", "loss_id", "loss_reg", "lr", "s_p", "s_n"} <= self.trainer.last_metrics.keys()
            events.append(("after_step", self.trainer.iter))

        def after_epoch(self):
            events.append(("after_epoch", self.trainer.epoch))

        def after_train(self):
            events.append(("after_train", self.trainer.error))

    trainer, _ = run_stub(tmp_path, hooks=[Recorder()])
    assert isinstance(trainer.hooks[-1], Recorder)  # user hooks come after the built-in ones
    expected = [("before_train", 0, 2 * IPE)]
    for epoch in range(2):
        expected.append(("before_epoch", epoch))
        for step in range(epoch * IPE, (epoch + 1) * IPE):
            expected += [("before_step", step), ("after_step", step + 1)]
        expected.append(("after_epoch", epoch))
    assert events == expected + [("after_train", None)]
    with pytest.raises(TypeError, match="HookBase"):
        trainer.loop.register_hooks([object()])


@pytest.mark.slow
def test_after_train_sees_the_error_that_ended_the_run(tmp_path):
    seen = []

    class Watcher(HookBase):
        def after_train(self):
            seen.append(type(self.trainer.error).__name__)

    with pytest.raises(FloatingPointError):
        cfg = stub_cfg(tmp_path)
        setup_logger(cfg.OUTPUT_DIR)
        Trainer(cfg, StubReID(nan_at=3), stub_loader(cfg), progress=False, hooks=[Watcher()]).train()
    assert seen == ["NonFiniteLossError"]


def _tiny(root, out):
    from tests.cli.test_cli import tiny_opts

    return ["--config-file", DEMO] + tiny_opts(root, out) + ["SOLVER.MAX_EPOCH", "2", "TEST.EVAL_PERIOD", "0"]


@pytest.mark.slow
def test_a_user_hook_stops_the_cli_run_at_step_5_and_resume_ends_like_an_uninterrupted_run(tmp_path):
    data = tmp_path / "data"
    whole = StopAt()
    assert cli_train.main(_tiny(data, tmp_path / "a"), hooks=[whole]) == 0
    total = whole.steps[-1]
    assert whole.steps == list(range(1, total + 1)) and total > 5  # the hook saw every step

    stopper = StopAt(at=5)
    assert cli_train.main(_tiny(data, tmp_path / "b"), hooks=[stopper]) == 0
    assert stopper.steps == [1, 2, 3, 4, 5]
    ckpt = torch.load(tmp_path / "b" / "model_interrupted.pth", weights_only=True)
    assert ckpt["iteration"] == 5
    log = (tmp_path / "b" / "log.txt").read_text()
    assert "Stopped (test stop at step 5) after iteration 5; continue with --resume" in log

    rest = StopAt()
    assert cli_train.main(_tiny(data, tmp_path / "b") + ["--resume"], hooks=[rest]) == 0
    assert rest.steps == list(range(6, total + 1))
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)["model"]
    assert_same_weights(a, b)


@pytest.mark.slow
def test_ema_example_evaluates_saves_and_resumes_the_average_exactly(tmp_path):
    EMAHook = doc_example("ema")["EMAHook"]
    evaluated = []

    def eval_fn(model, epoch):
        evaluated.append({k: v.clone() for k, v in model.state_dict().items()})
        return [{"split": "test", "dataset": "stub", "mAP": 1.0}]

    straight_ema = EMAHook(decay=0.9)
    trainer, _ = run_stub(tmp_path / "a", hooks=[straight_ema], eval_fn=eval_fn)
    final = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)
    # The average is what was evaluated and what "model" holds; the trained weights ride along.
    assert_same_weights(final["model"], straight_ema.ema.state_dict())
    assert_same_weights(evaluated[-1], straight_ema.ema.state_dict())
    assert_same_weights(final["train_model"], trainer.model.state_dict())
    assert not torch.equal(final["model"]["head.weight"], final["train_model"]["head.weight"])
    assert_same_weights(final["hooks"]["EMAHook"]["ema"], final["model"])

    # Stopped mid-epoch, then resumed with a new hook object: the same average at the end.
    run_stub(tmp_path / "b", hooks=[EMAHook(decay=0.9), StopAt(at=IPE + 2)], eval_fn=eval_fn)
    resumed_ema = EMAHook(decay=0.9)
    run_stub(tmp_path / "b", hooks=[resumed_ema, StopAt()], eval_fn=eval_fn, resume=True)
    final_b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)
    assert_same_weights(final["model"], final_b["model"])
    assert_same_weights(final["train_model"], final_b["train_model"])


def test_ema_example_forgets_the_random_start_on_the_demos_short_schedule():
    """0.999 over the demo's 420 steps keeps 0.999^420 = 66% of the starting weights; the
    example's warm-up of the decay keeps none worth counting (docs/training.md says why)."""
    EMAHook = doc_example("ema")["EMAHook"]

    def start_share(hook, steps=420):
        model = torch.nn.Linear(1, 1, bias=False)
        torch.nn.init.zeros_(model.weight)  # the "random" start is 0, the trained weight is 1
        hook.trainer = SimpleNamespace(model=model, eval_model=model, iter=0)
        hook.before_train()
        with torch.no_grad():
            model.weight.fill_(1.0)
        for step in range(1, steps + 1):
            hook.trainer.iter = step
            hook.after_step()
        return 1.0 - float(hook.ema.weight)

    warm = start_share(EMAHook(decay=0.999))
    assert warm == pytest.approx(math.prod(min(0.999, (1 + n) / (10 + n)) for n in range(1, 421)), abs=1e-6)  # float32
    assert warm < 1e-6
    assert start_share(EMAHook(decay=0.999, warmup=False)) == pytest.approx(0.999 ** 420, rel=1e-4)
    # On a long run the warm-up ends and the full decay applies (from step 8,990 for 0.999).
    late = EMAHook(decay=0.999)
    late.trainer = SimpleNamespace(iter=8990)
    assert late.step_decay() == 0.999


@pytest.mark.slow
def test_early_stopping_example_stops_and_its_state_resumes(tmp_path):
    EarlyStopping = doc_example("early-stopping")["EarlyStopping"]
    maps = iter([10.0, 20.0, 15.0, 12.0, 30.0, 40.0])

    def eval_fn(model, epoch):
        return [{"split": "val", "dataset": "val", "mAP": next(maps)}]

    hook = EarlyStopping(patience=2)
    _, result = run_stub(tmp_path, hooks=[hook], eval_fn=eval_fn, **{"SOLVER.MAX_EPOCH": 6, "TEST.VAL_IDS": 2})
    # Epochs 3 and 4 did not beat epoch 2's 20.0: stopped after epoch 4 of 6.
    assert result.stop_reason.startswith("early stopping") and result.iteration == 4 * IPE
    assert (hook.best, hook.waited) == (20.0, 2)
    ckpt = torch.load(tmp_path / "model_0004.pth", weights_only=True)
    assert ckpt["hooks"]["EarlyStopping"] == {"best": 20.0, "waited": 2}
    assert result.best["value"] == 20.0 and result.best["epoch"] == 2  # model_best.pth kept epoch 2

    restored = EarlyStopping(patience=2)
    restored.load_state_dict(ckpt["hooks"]["EarlyStopping"])
    assert (restored.best, restored.waited) == (20.0, 2)


@pytest.mark.slow
def test_hook_state_missing_or_unknown_on_resume_is_reported(tmp_path):
    class Counter(HookBase):
        def __init__(self):
            self.n = 0

        def after_step(self):
            self.n += 1

        def state_dict(self):
            return {"n": self.n}

        def load_state_dict(self, state):
            self.n = state["n"]

    run_stub(tmp_path, hooks=[Counter(), StopAt(at=3)], **{"SOLVER.MAX_EPOCH": 1})
    again = Counter()
    run_stub(tmp_path, hooks=[again], resume=True, **{"SOLVER.MAX_EPOCH": 1})
    assert again.n == IPE  # 3 before the stop + 3 after the resume
    fresh = tmp_path / "fresh"
    run_stub(fresh, hooks=[StopAt(at=2)], **{"SOLVER.MAX_EPOCH": 1})
    late = Counter()
    run_stub(fresh, hooks=[late], resume=True, **{"SOLVER.MAX_EPOCH": 1})
    log = (fresh / "log.txt").read_text()
    assert "Hook Counter has state but" in log and "it starts afresh" in log and late.n == IPE - 2

    class Twin(Counter):
        @property
        def name(self):
            return "Counter"

    with pytest.raises(ValueError, match="both named 'Counter'"):
        run_stub(tmp_path / "twins", hooks=[Counter(), Twin(), StopAt(at=1)], **{"SOLVER.MAX_EPOCH": 1})
