"""The cluster memory: ClusterNCE logits and the momentum update, against their formulas."""
import pytest
import torch
import torch.nn.functional as F

from reid.uda.cluster_memory import ClusterMemory


def _memory(update="mean", momentum=0.2, temperature=0.05, c=4, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    memory = ClusterMemory(d, temperature=temperature, momentum=momentum, update=update)
    memory.reset(torch.randn(c, d, generator=g))
    q = torch.randn(6, d, generator=g)
    y = torch.tensor([0, 2, 2, 0, 2, 3])
    return memory, q, y


def test_logits_are_cosines_over_temperature_and_the_loss_is_cluster_nce():
    memory, q, y = _memory(temperature=0.07)
    logits = memory(q, y)
    c = memory.weight
    assert torch.allclose(c.norm(dim=1), torch.ones(4))  # reset normalises the centroids
    cos = F.normalize(q, dim=1) @ c.t()
    torch.testing.assert_close(logits, cos / 0.07)
    # ClusterNCE: -log(exp(q.c_y / tau) / sum_k exp(q.c_k / tau)), per sample, averaged.
    expected = -torch.stack([(cos[i, y[i]] / 0.07) - torch.logsumexp(cos[i] / 0.07, 0) for i in range(6)]).mean()
    torch.testing.assert_close(F.cross_entropy(logits, y), expected)
    assert set(memory.last_stats) == {"s_p", "s_n"}
    torch.testing.assert_close(memory.last_stats["s_p"], cos[torch.arange(6), y].mean())


@pytest.mark.parametrize("update", ["mean", "hard"])
def test_momentum_update_follows_the_formula(update):
    memory, q, y = _memory(update=update, momentum=0.2)
    before = memory.weight.clone()
    memory.train()
    memory(q, y)
    memory.update()
    qn = F.normalize(q, dim=1)
    expected = before.clone()
    for k in (0, 2, 3):
        members = (y == k).nonzero().flatten()
        if update == "mean":
            new = qn[members].mean(dim=0)
        else:  # the member least similar to the memory vector
            new = qn[members[(qn[members] @ before[k]).argmin()]]
        expected[k] = F.normalize(0.2 * before[k] + 0.8 * new, dim=0)
    torch.testing.assert_close(memory.weight, expected)
    memory.update()  # no new forward: nothing to apply twice
    torch.testing.assert_close(memory.weight, expected)


def test_eval_forward_does_not_update_and_memory_is_not_a_weight():
    memory, q, y = _memory()
    before = memory.weight.clone()
    memory.eval()
    memory(q, y)
    memory.update()
    torch.testing.assert_close(memory.weight, before)
    assert memory.state_dict() == {} and list(memory.parameters()) == []


def test_load_vectors_keeps_the_bits_and_bad_inputs_are_refused():
    memory, _, _ = _memory()
    saved = memory.weight.clone() * 1.0000001
    memory.load_vectors(saved)
    assert torch.equal(memory.weight, saved)
    with pytest.raises(ValueError, match=r"centroids must be \[C >= 1, 8\]"):
        memory.reset(torch.zeros(0, 8))
    with pytest.raises(RuntimeError, match="empty: reset"):
        ClusterMemory(8)(torch.randn(2, 8))
    with pytest.raises(ValueError, match="momentum must lie in"):
        ClusterMemory(8, momentum=1.0)
    with pytest.raises(ValueError, match="Unknown cluster memory update 'avg'"):
        ClusterMemory(8, update="avg")
