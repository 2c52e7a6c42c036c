"""Checkpoints: atomic save, weights_only loading, head mismatch / drop_head, pointer and pruning."""
import os
import pickle
import random

import numpy as np
import pytest
import torch
from torch import nn

from reid.config import get_cfg
from reid.engine.checkpoint_files import (
    INTERRUPT_NAME,
    CheckpointError,
    CheckpointManager,
    last_checkpoint,
    load_checkpoint,
    periodic_name,
    save_checkpoint,
)
from reid.engine.lr_scheduler import build_lr_scheduler
from reid.engine.optimizer import build_optimizer
from reid.utils.process import get_rng_state, set_rng_state


class Head(nn.Module):
    def __init__(self, d, c):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(c, d))
        self.register_buffer("t", torch.zeros(()))  # like CurricularFace's running t


class Net(nn.Module):
    def __init__(self, num_classes=5, width=4):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(3, width), nn.BatchNorm1d(width))
        self.head = Head(width, num_classes) if num_classes > 0 else None


def test_full_state_round_trip_with_weights_only(tmp_path):
    cfg = get_cfg()
    model = Net()
    opt = build_optimizer(cfg, model)
    sched = build_lr_scheduler(cfg, opt, iters_per_epoch=7)
    model.backbone[0].weight.sum().backward()
    opt.step()
    sched.step()
    path = str(tmp_path / "ckpt.pth")
    save_checkpoint(path, model=model.state_dict(), optimizer=opt.state_dict(), scheduler=sched.state_dict(),
                    scaler=None, epoch=3, iteration=21, sampler={"epoch": 3, "start_batch": 0},
                    rng=get_rng_state(), cfg=cfg.dump(), best={"metric": "val/mAP", "value": 1.5, "epoch": 2})
    raw = torch.load(path, weights_only=True)  # everything must be allowed by the safe unpickler
    assert raw["epoch"] == 3 and raw["best"]["value"] == 1.5 and "SOLVER" in raw["cfg"]

    model2 = Net()
    opt2 = build_optimizer(cfg, model2)
    sched2 = build_lr_scheduler(cfg, opt2, iters_per_epoch=7)
    data = load_checkpoint(path, model=model2, optimizer=opt2, scheduler=sched2)
    assert data["iteration"] == 21
    for k, v in model.state_dict().items():
        assert torch.equal(v, model2.state_dict()[k]), k
    assert sched2.last_epoch == sched.last_epoch
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_rng_state_round_trip():
    state = get_rng_state()
    a = (random.random(), float(np.random.rand()), float(torch.rand(())), np.random.randn())
    random.random(), np.random.rand(), torch.rand(3)
    set_rng_state(state)
    b = (random.random(), float(np.random.rand()), float(torch.rand(())), np.random.randn())
    assert a == b


def test_failed_save_keeps_previous_file(tmp_path):
    path = str(tmp_path / "model_0001.pth")
    save_checkpoint(path, epoch=1)
    before = open(path, "rb").read()
    with pytest.raises((pickle.PicklingError, AttributeError)):  # what pickle raises for a lambda
        save_checkpoint(path, epoch=2, bad=lambda: None)  # not serialisable
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["model_0001.pth"]  # no temp file left behind


def test_missing_and_corrupt_files_are_named(tmp_path):
    missing = str(tmp_path / "nope.pth")
    with pytest.raises(CheckpointError, match=r"not found: .*nope\.pth"):
        load_checkpoint(missing, model=Net())
    corrupt = tmp_path / "bad.pth"
    corrupt.write_bytes(b"this is not a checkpoint")
    with pytest.raises(CheckpointError, match=r"Could not read checkpoint .*bad\.pth.*text file"):
        load_checkpoint(str(corrupt))
    good = str(tmp_path / "good.pth")
    save_checkpoint(good, model=Net().state_dict())
    truncated = tmp_path / "trunc.pth"
    truncated.write_bytes(open(good, "rb").read()[:50])
    with pytest.raises(CheckpointError, match=r"trunc\.pth"):
        load_checkpoint(str(truncated))


def _unreadable(path) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(str(path))
    msg = str(e.value)
    # torch's own advice (load with weights_only=False) must never reach the user
    assert "weights_only=False" not in msg and "weights_only` set to `False" not in msg
    assert "Re-running" not in msg
    return msg


def test_config_given_as_weights_points_to_the_checkpoints(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("MODEL:\n  WEIGHTS: ''\nSOLVER:\n  BASE_LR: 0.001\n")
    save_checkpoint(str(run / "model_final.pth"), model=Net().state_dict())
    save_checkpoint(str(run / periodic_name(5)), model=Net().state_dict())
    msg = _unreadable(run / "config.yaml")
    assert str(run / "config.yaml") in msg and "YAML" in msg and "weights_only=True" in msg
    assert str(run / "model_final.pth") in msg and "model_0005.pth" in msg
    assert "Delete" not in msg  # the user's config is not a damaged checkpoint


def test_damaged_checkpoint_may_be_deleted_only_inside_a_run_folder(tmp_path):
    good = tmp_path / "good.pth"
    save_checkpoint(str(good), model=Net().state_dict())
    data = good.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("SEED: 0\n")
    save_checkpoint(str(run / periodic_name(5)), model=Net().state_dict())
    (run / periodic_name(10)).write_bytes(data[: len(data) // 2])  # a copy cut short
    msg = _unreadable(run / periodic_name(10))
    assert "damaged" in msg and "Delete it" in msg and "model_0005.pth" in msg
    loose = tmp_path / "downloaded.pth"
    loose.write_bytes(data[: len(data) // 2])
    msg = _unreadable(loose)
    assert "damaged" in msg and "Delete" not in msg


def test_torch_file_with_unsafe_objects_is_not_loaded_unsafely(tmp_path):
    path = tmp_path / "foreign.pth"
    torch.save({"model": Net().state_dict(), "args": random.Random(0)}, str(path))  # an arbitrary class
    msg = _unreadable(path)
    assert "foreign.pth" in msg and "weights_only=True" in msg and "Delete" not in msg


def test_head_shape_mismatch_explains_how_to_fine_tune(tmp_path):
    path = str(tmp_path / "market.pth")
    save_checkpoint(path, model=Net(num_classes=751).state_dict())
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path, model=Net(num_classes=1041))
    msg = str(err.value)
    assert "market.pth" in msg and "head.weight" in msg
    assert "(751, 4)" in msg and "(1041, 4)" in msg
    assert "--drop-head" in msg


def test_drop_head_loads_everything_else(tmp_path):
    src = Net(num_classes=751)
    path = str(tmp_path / "market.pth")
    save_checkpoint(path, model=src.state_dict())
    dst = Net(num_classes=10)
    head_before = dst.head.weight.detach().clone()
    load_checkpoint(path, model=dst, drop_head=True)
    assert torch.equal(dst.backbone[0].weight, src.backbone[0].weight)
    assert torch.equal(dst.backbone[1].running_mean, src.backbone[1].running_mean)
    assert torch.equal(dst.head.weight, head_before)


def test_headless_model_and_ddp_prefix(tmp_path):
    src = Net(num_classes=5)
    path = str(tmp_path / "ddp.pth")
    save_checkpoint(path, model={"module." + k: v for k, v in src.state_dict().items()})
    inference = Net(num_classes=0)
    load_checkpoint(path, model=inference)  # head tensors are simply not needed
    assert torch.equal(inference.backbone[0].weight, src.backbone[0].weight)


def test_other_architecture_is_an_error(tmp_path):
    path = str(tmp_path / "wide.pth")
    save_checkpoint(path, model=Net(width=8).state_dict())
    with pytest.raises(CheckpointError, match=r"different architecture: backbone\.0\.weight"):
        load_checkpoint(path, model=Net(width=4), drop_head=True)


def test_weights_only_file_cannot_resume_optimizer(tmp_path):
    path = str(tmp_path / "model_best.pth")
    model = Net()
    save_checkpoint(path, model=model.state_dict(), epoch=1)
    with pytest.raises(CheckpointError, match=r"model_best\.pth has no optimizer state"):
        load_checkpoint(path, model=model, optimizer=build_optimizer(get_cfg(), model))


def test_last_checkpoint_pointer_and_fallbacks(tmp_path):
    out = str(tmp_path)
    assert last_checkpoint(out) is None
    save_checkpoint(os.path.join(out, periodic_name(2)), epoch=2)
    save_checkpoint(os.path.join(out, periodic_name(10)), epoch=10)
    assert last_checkpoint(out).endswith("model_0010.pth")  # by epoch number, not by name order
    mgr = CheckpointManager(out, keep=0)
    mgr.save(INTERRUPT_NAME, {"epoch": 10})
    assert last_checkpoint(out).endswith(INTERRUPT_NAME)
    assert open(os.path.join(out, "last_checkpoint")).read().strip() == INTERRUPT_NAME


def test_manager_keeps_checkpoints_bounded(tmp_path):
    out = str(tmp_path)
    mgr = CheckpointManager(out, keep=2)
    mgr.save(INTERRUPT_NAME, {"epoch": 0})
    for epoch in range(1, 5):
        mgr.save(periodic_name(epoch), {"epoch": epoch})
    mgr.save("model_best.pth", {"epoch": 3}, resumable=False)
    mgr.save("model_final.pth", {"epoch": 5})
    assert sorted(os.listdir(out)) == ["last_checkpoint", "model_0003.pth", "model_0004.pth", "model_best.pth", "model_final.pth"]
    assert last_checkpoint(out).endswith("model_final.pth")


def test_manager_on_other_ranks_writes_nothing(tmp_path):
    mgr = CheckpointManager(str(tmp_path), keep=2, enabled=False)
    assert mgr.save(periodic_name(1), {"epoch": 1}) is None
    assert os.listdir(tmp_path) == []


# --- checkpoints from someone else ----------------------------------------------------------

@pytest.mark.parametrize("tamper, message", [
    (lambda s: s.update({"backbone.0.weight": torch.ones(4, 3, dtype=torch.int64)}),
     r"backbone.0.weight is torch.int64 where the model has torch.float32"),
    (lambda s: s["backbone.1.running_var"].fill_(float("inf")), r"backbone.1.running_var holds inf"),
    (lambda s: s["backbone.0.bias"].fill_(float("nan")), r"backbone.0.bias holds NaN \(4 of 4 values\)"),
    (lambda s: s["backbone.1.running_var"].fill_(-1.0), r"backbone.1.running_var \(a BatchNorm variance\) holds negative"),
])
def test_unusable_weights_are_refused_naming_the_file_and_tensor(tmp_path, tamper, message):
    state = Net().state_dict()
    tamper(state)
    path = save_checkpoint(str(tmp_path / "stranger.pth"), model=state)
    model = Net()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match=rf"stranger.pth cannot be used: {message}"):
        load_checkpoint(path, model=model)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # nothing was loaded


def test_a_state_dict_of_non_tensors_or_non_string_names_is_one_line(tmp_path):
    for bad in ({"backbone.0.weight": "not a tensor"}, {3: torch.zeros(1)}, ["a", "list"]):
        path = save_checkpoint(str(tmp_path / "odd.pth"), model=bad)
        with pytest.raises(CheckpointError, match="odd.pth"):
            load_checkpoint(path, model=Net())


def test_the_last_checkpoint_pointer_never_leads_out_of_the_run(tmp_path):
    outside = tmp_path / "elsewhere.pth"
    save_checkpoint(str(outside), model=Net().state_dict())
    run = tmp_path / "run"
    run.mkdir()
    (run / "last_checkpoint").write_text("../elsewhere.pth\n")
    assert last_checkpoint(str(run)) is None
    save_checkpoint(str(run / periodic_name(3)), model=Net().state_dict())
    (run / "last_checkpoint").write_text("/etc/passwd\n")
    assert last_checkpoint(str(run)) == str(run / "model_0003.pth")  # the newest of the run instead


def test_a_fifo_named_as_checkpoint_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / "model.pth")
    with pytest.raises(CheckpointError, match=r"model.pth is a FIFO \(named pipe\), not a file; name a .pth file"):
        load_checkpoint(str(tmp_path / "model.pth"), model=Net())


@pytest.mark.parametrize("legacy", [True, False])
def test_torchreid_style_files_load_state_dict_module_prefix_and_numpy_rank1(tmp_path, legacy):
    # torchreid saves {"state_dict", "epoch", "rank1", "optimizer"}; rank1 is a numpy float, keys
    # often carry DataParallel's "module." prefix, and older files use the legacy serialization.
    model = Net()
    state = {f"module.{k}": v for k, v in model.state_dict().items()}
    path = tmp_path / "model.pth.tar-60"
    torch.save({"state_dict": state, "epoch": 60, "rank1": np.float32(0.91), "optimizer": {"state": {}}}, path,
               _use_new_zipfile_serialization=not legacy)
    other = Net()
    data = load_checkpoint(str(path), model=other)
    assert data["epoch"] == 60 and float(data["rank1"]) == pytest.approx(0.91)
    for k, v in model.state_dict().items():
        assert torch.equal(other.state_dict()[k], v), k


def test_objects_other_than_tensors_and_numpy_scalars_are_still_refused(tmp_path):
    path = tmp_path / "evil.pth"
    torch.save({"state_dict": {}, "obj": Net()}, path)
    with pytest.raises(CheckpointError, match="weights_only=True refuses"):
        load_checkpoint(str(path), model=Net())



@pytest.mark.parametrize("make, kind", [
    (lambda p: open(p, "wb").write(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(64)), "a JPEG image"),
    (lambda p: np.savez(open(p, "wb"), feats=np.ones(3)), "a NumPy .npz archive"),
    (lambda p: open(p, "wb").write(b"%PDF-1.4\n\x00binary"), "a PDF document"),
])
def test_a_file_that_is_not_a_checkpoint_is_named_for_what_it_is(tmp_path, make, kind):
    path = str(tmp_path / "weights.pth")
    make(path)
    msg = _unreadable(path)
    assert f"Could not read checkpoint {path}: it is {kind}, not a checkpoint (a file written by torch.save)" in msg
    assert "\n" not in msg


def test_an_image_models_weights_start_a_temporal_attention_model_at_the_frames_mean(tmp_path, caplog):
    from reid.modeling import build_model
    from tests.modeling.test_models import images, make_cfg

    torch.manual_seed(0)
    image = build_model(make_cfg()).eval()
    path = str(tmp_path / "image.pth")
    save_checkpoint(path, model=image.state_dict())
    video = build_model(make_cfg(MODEL__VIDEO__TEMPORAL="attention"))
    with torch.no_grad():
        video.temporal.score.weight.fill_(1.0)  # not the initial zeros: the load must not need them
    with caplog.at_level("INFO", logger="reid.engine.checkpoint_files"):
        load_checkpoint(path, model=video)
    assert "has no temporal.score.weight (an image model's): it starts at zero" in caplog.text
    assert not video.temporal.score.weight.any()
    with torch.no_grad():
        clip = images(6).view(2, 3, 3, *images(1).shape[-2:])
        # the attention model from the image model's weights is the image model on clips (avg over frames)
        torch.testing.assert_close(video.eval()(clip), image(clip))
    # any other missing tensor is still refused
    state = {k: v for k, v in image.state_dict().items() if not k.startswith("neck.")}
    save_checkpoint(path, model=state)
    with pytest.raises(CheckpointError, match="lacks tensors the model needs: neck"):
        load_checkpoint(path, model=build_model(make_cfg(MODEL__VIDEO__TEMPORAL="attention")))
