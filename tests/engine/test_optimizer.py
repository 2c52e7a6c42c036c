"""Optimizer construction: parameter groups (head / bias / norm / frozen) and optimizer kinds."""
import pytest
import torch
from torch import nn

from reid.config import get_cfg
from reid.engine.optimizer import build_optimizer, build_param_groups


class GeMPool(nn.Module):
    """Stand-in for the real GeM pooling: a learnable exponent p."""

    def __init__(self):
        super().__init__()
        self.p = nn.Parameter(torch.tensor(3.0))

    def forward(self, x):
        return x.clamp(min=1e-6).pow(self.p).mean(dim=(2, 3)).pow(1.0 / self.p)


class Head(nn.Module):
    def __init__(self, d, c):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c, d))
        self.register_buffer("t", torch.zeros(()))


class TinyReID(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
        self.pool = GeMPool()
        self.neck = nn.BatchNorm1d(4)
        self.neck.bias.requires_grad_(False)  # BNNeck: frozen shift
        self.head = Head(4, 5)


def cfg_with(**solver):
    cfg = get_cfg()
    cfg.SOLVER.BASE_LR = 0.1
    cfg.SOLVER.HEADS_LR_FACTOR = 10.0
    cfg.SOLVER.BIAS_LR_FACTOR = 2.0
    cfg.SOLVER.WEIGHT_DECAY = 1e-3
    cfg.SOLVER.WEIGHT_DECAY_BIAS = 1e-4
    cfg.SOLVER.WEIGHT_DECAY_NORM = 0.0
    for k, v in solver.items():
        cfg.SOLVER[k] = v
    return cfg


def settings_by_name(optimizer):
    out = {}
    for g in optimizer.param_groups:
        for name in g["param_names"]:
            out[name] = (g["name"], pytest.approx(g["lr"]), pytest.approx(g["weight_decay"]))
    return out


def test_groups_assign_lr_and_decay_per_parameter_kind():
    opt = build_optimizer(cfg_with(OPTIMIZER="SGD"), TinyReID())
    got = settings_by_name(opt)
    assert got == {
        "backbone.0.weight": ("body.weight", 0.1, 1e-3),
        "backbone.0.bias": ("body.bias", 0.2, 1e-4),
        "backbone.1.weight": ("body.norm.weight", 0.1, 0.0),
        "backbone.1.bias": ("body.norm.bias", 0.2, 0.0),
        "pool.p": ("body.norm.weight", 0.1, 0.0),
        "neck.weight": ("body.norm.weight", 0.1, 0.0),
        "head.weight": ("head.weight", 1.0, 1e-3),
    }


def test_frozen_parameters_are_left_out():
    model = TinyReID()
    opt = build_optimizer(cfg_with(), model)
    given = {id(p) for g in opt.param_groups for p in g["params"]}
    assert id(model.neck.bias) not in given
    assert len(given) == sum(1 for p in model.parameters() if p.requires_grad)


def test_model_may_declare_its_head_parameters():
    class Declared(TinyReID):
        def __init__(self):
            super().__init__()
            self.classifier = nn.Linear(4, 3, bias=False)

        def head_parameters(self):
            return [self.classifier.weight]

    got = settings_by_name(build_optimizer(cfg_with(), Declared()))
    assert got["classifier.weight"][0] == "head.weight"
    assert got["classifier.weight"][1] == pytest.approx(1.0)
    # With an explicit declaration, the name rule no longer applies.
    assert got["head.weight"][0] == "body.weight"


def test_mgn_style_heads_list_is_detected():
    class Multi(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Linear(4, 4)
            self.heads = nn.ModuleList([Head(4, 3), Head(4, 3)])

    got = settings_by_name(build_optimizer(cfg_with(), Multi()))
    assert got["heads.0.weight"][0] == got["heads.1.weight"][0] == "head.weight"


def test_optimizer_kinds_and_hyperparameters():
    model = TinyReID()
    sgd = build_optimizer(cfg_with(OPTIMIZER="SGD", MOMENTUM=0.8, NESTEROV=True), model)
    assert isinstance(sgd, torch.optim.SGD)
    assert sgd.defaults["momentum"] == 0.8 and sgd.defaults["nesterov"] is True
    adam = build_optimizer(cfg_with(OPTIMIZER="adam", MOMENTUM=0.85), model)
    assert type(adam) is torch.optim.Adam and adam.defaults["betas"] == (0.85, 0.999)
    adamw = build_optimizer(cfg_with(OPTIMIZER="AdamW"), model)
    assert type(adamw) is torch.optim.AdamW


def test_group_layout_does_not_depend_on_factors():
    # Resuming needs the same group structure even when factor values coincide.
    a = build_param_groups(cfg_with(HEADS_LR_FACTOR=1.0, BIAS_LR_FACTOR=1.0), TinyReID())
    b = build_param_groups(cfg_with(HEADS_LR_FACTOR=3.0, BIAS_LR_FACTOR=2.0), TinyReID())
    assert [g["name"] for g in a] == [g["name"] for g in b]


def test_unknown_optimizer_lists_valid_names():
    with pytest.raises(ValueError, match=r"Unknown SOLVER.OPTIMIZER 'Lamb'.*SGD, Adam, AMSGrad, AdamW"):
        build_optimizer(cfg_with(OPTIMIZER="Lamb"), TinyReID())


def test_amsgrad_is_adam_with_the_amsgrad_variant():
    opt = build_optimizer(cfg_with(OPTIMIZER="AMSGrad", BETA2=0.99), TinyReID())
    assert type(opt) is torch.optim.Adam and all(g["amsgrad"] for g in opt.param_groups)
    assert all(g["betas"] == (0.9, 0.99) for g in opt.param_groups)
    assert not any(g["amsgrad"] for g in build_optimizer(cfg_with(OPTIMIZER="Adam"), TinyReID()).param_groups)


def test_nesterov_without_momentum_is_explained():
    with pytest.raises(ValueError, match="SOLVER.NESTEROV needs SOLVER.MOMENTUM > 0"):
        build_optimizer(cfg_with(OPTIMIZER="SGD", MOMENTUM=0.0, NESTEROV=True), TinyReID())


def test_fully_frozen_model_is_an_error():
    model = TinyReID()
    for p in model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer(cfg_with(), model)


def test_optimizer_state_dict_records_group_names():
    opt = build_optimizer(cfg_with(), TinyReID())
    sd = opt.state_dict()
    assert [g["name"] for g in sd["param_groups"]] == [g["name"] for g in opt.param_groups]
    assert "head.weight" in sd["param_groups"][-1]["param_names"]
