"""One step of the loop: bf16 against float32, gradient clipping against an unclipped
reference, the NaN guard, the position a resume continues from."""
import copy

import pytest
import torch

from reid.engine import NonFiniteLossError, TrainLoop
from reid.engine.placement import DeviceSetup

from tests.engine.stubs import StubReID, stub_cfg, stub_loader


def make_loop(model, amp_dtype=None, clip=0.0, lr=0.05):
    cfg = stub_cfg("unused")
    setup = DeviceSetup(torch.device("cpu"), amp_dtype, use_scaler=False, channels_last=False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return TrainLoop(model, model, optimizer, scaler, stub_loader(cfg), setup, max_epoch=1, clip_grad_norm=clip)


def first_batch():
    loader = stub_loader(stub_cfg("unused"))
    loader.sampler.set_epoch(0)
    return next(iter(loader))


def no_dropout_model():
    model = StubReID()
    model.dropout.p = 0.0  # the two precisions must see the same activations
    return model


def test_bf16_step_gives_a_finite_loss_close_to_float32():
    batch = first_batch()
    fp32 = make_loop(no_dropout_model()).run_step(batch)
    bf16 = make_loop(no_dropout_model(), amp_dtype=torch.bfloat16).run_step(batch)
    for key in ("loss", "loss_id"):
        assert torch.isfinite(torch.tensor(bf16[key]))
        # bfloat16 keeps 8 bits of mantissa: a few parts in a thousand per operation.
        assert bf16[key] == pytest.approx(fp32[key], rel=2e-2)
    assert bf16[key] != fp32[key]  # autocast really ran in bfloat16


def test_clipping_limits_the_gradient_norm_and_logs_the_norm_before_clipping():
    batch = first_batch()
    reference = no_dropout_model()
    model = copy.deepcopy(reference)
    # Unclipped gradients of the same batch from the same weights.
    losses = reference(batch["images"], batch["targets"])
    sum(losses.values()).backward()
    params = [p for p in reference.parameters() if p.grad is not None]
    unclipped = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params]))
    max_norm = float(unclipped) / 10
    record = make_loop(model, clip=max_norm).run_step(batch)
    assert float(record["grad_norm"]) == pytest.approx(float(unclipped), rel=1e-5)
    clipped = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in model.parameters()
                                                     if p.grad is not None]))
    assert float(clipped) == pytest.approx(max_norm, rel=1e-4)  # scaled down to the limit exactly


def test_a_nan_loss_raises_before_the_weights_change():
    model = StubReID(nan_at=0)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    loop = make_loop(model)
    with pytest.raises(NonFiniteLossError, match="Loss term loss_id is nan at iteration 0"):
        loop.run_step(first_batch())
    # (Buffers such as BatchNorm statistics move during the forward itself, as in any framework.)
    for key, value in model.named_parameters():
        assert torch.equal(value, before[key]), key
    assert loop.optimizer.state_dict()["state"] == {}  # no optimizer step was taken


def test_position_names_where_a_resume_continues():
    loop = make_loop(StubReID())
    loop.epoch, loop.start_batch = 2, 3
    assert loop.position() == (2, 3)
    loop.start_batch = loop.iters_per_epoch  # all batches done, end-of-epoch work not yet
    assert loop.position() == (2, loop.iters_per_epoch)
    loop._epoch_ending = True  # inside after_epoch: the next resume starts the next epoch
    assert loop.position() == (3, 0)
