"""LR schedule: closed-form values of warmup + multistep / cosine, and resume from state_dict."""
import io
import math

import pytest
import torch

from reid.config import get_cfg
from reid.engine.lr_scheduler import WarmupDecayLR, build_lr_scheduler


def make_optimizer(lrs=(1.0, 10.0)):
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
    return torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], lr=lrs[0])


def lrs_over(sched, n):
    out = []
    for _ in range(n):
        out.append([g["lr"] for g in sched.optimizer.param_groups])
        sched.optimizer.step()
        sched.step()
    return out


def test_warmup_then_multistep_matches_closed_form():
    cfg = get_cfg()
    cfg.SOLVER.SCHED = "multistep"
    cfg.SOLVER.MAX_EPOCH = 6
    cfg.SOLVER.STEPS = [2, 4]
    cfg.SOLVER.GAMMA = 0.1
    cfg.SOLVER.WARMUP_ITERS = 4
    cfg.SOLVER.WARMUP_FACTOR = 0.2
    ipe = 3
    got = lrs_over(build_lr_scheduler(cfg, make_optimizer(), ipe), 18)
    for i, (lr0, lr1) in enumerate(got):
        warm = 0.2 + 0.8 * i / 4 if i < 4 else 1.0
        decay = 0.1 ** sum(i >= s * ipe for s in (2, 4))
        assert lr0 == pytest.approx(warm * decay), i
        assert lr1 == pytest.approx(10 * warm * decay), i
    # Spot values: iteration 0 is the warmup factor; the first step drops at epoch 2 (it 6).
    assert got[0][0] == pytest.approx(0.2)
    assert got[5][0] == pytest.approx(1.0)
    assert got[6][0] == pytest.approx(0.1)
    assert got[12][0] == pytest.approx(0.01)


def test_cosine_reaches_min_factor_at_the_end():
    opt = make_optimizer((2.0,))
    sched = WarmupDecayLR(opt, "cosine", max_iters=20, iters_per_epoch=5, min_lr_factor=0.1, warmup_iters=0)
    got = [v[0] for v in lrs_over(sched, 21)]
    for i, lr in enumerate(got):
        expected = 2.0 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(i, 20) / 20)))
        assert lr == pytest.approx(expected), i
    assert got[0] == pytest.approx(2.0)
    assert got[10] == pytest.approx(2.0 * 0.55)
    assert got[20] == pytest.approx(0.2)


def test_state_dict_resume_continues_the_same_curve():
    def fresh():
        return WarmupDecayLR(make_optimizer(), "cosine", max_iters=30, iters_per_epoch=10, warmup_iters=7, warmup_factor=0.01)

    straight = lrs_over(fresh(), 30)
    first = fresh()
    lrs_over(first, 12)
    buf = io.BytesIO()
    torch.save({"opt": first.optimizer.state_dict(), "sched": first.state_dict()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)  # must not need pickle of arbitrary objects
    second = fresh()
    second.optimizer.load_state_dict(state["opt"])
    second.load_state_dict(state["sched"])
    assert second.last_epoch == 12
    resumed = lrs_over(second, 18)
    assert [v for pair in resumed for v in pair] == pytest.approx([v for pair in straight[12:] for v in pair])


def test_bad_settings_are_explained():
    with pytest.raises(ValueError, match=r"Unknown SOLVER.SCHED 'step'.*multistep, cosine"):
        WarmupDecayLR(make_optimizer(), "step", 10, 5)
    with pytest.raises(ValueError, match="STEPS must be increasing"):
        WarmupDecayLR(make_optimizer(), "multistep", 10, 5, steps=[4, 2])
    with pytest.raises(ValueError, match="yields no batch"):
        WarmupDecayLR(make_optimizer(), "multistep", 10, 0)
