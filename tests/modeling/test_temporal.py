"""Temporal aggregation of frame features: formulas, masks, attention weights, chunked pooling."""
from __future__ import annotations

import pytest
import torch

from reid.data.frame_sampling import test_chunks as chunk_indices
from reid.modeling import temporal as tp
from reid.utils.registry import UnknownNameError

B, T, D = 3, 7, 5


def frames(seed=0, b=B, t=T, d=D):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, d, generator=g, dtype=torch.float64)


def ragged_mask():
    """Rows with 7, 4 and 1 valid frames; padding at the end, as a collate would leave it."""
    lengths = torch.tensor([7, 4, 1])
    return torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1), lengths


def trained_attention(seed=1):
    """An attention module with non-zero scores (a fresh one is exactly avg)."""
    m = tp.build_temporal("attention", D).double()
    with torch.no_grad():
        m.score.weight.copy_(torch.randn(1, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64))
    return m


def test_names():
    assert tp.TEMPORAL_POOLINGS == ("attention", "avg", "max")
    for name in tp.TEMPORAL_POOLINGS:
        assert isinstance(tp.build_temporal(name, D), tp.TemporalPooling)


def test_unknown_name_lists_valid_ones():
    with pytest.raises(UnknownNameError) as err:
        tp.build_temporal("lstm", D)
    msg = str(err.value)
    assert "MODEL.VIDEO.TEMPORAL" in msg and "'lstm'" in msg
    assert all(name in msg for name in tp.TEMPORAL_POOLINGS)
    with pytest.raises(UnknownNameError, match="Valid names: attention, avg, max"):
        tp.pool_chunks([], "mean")


def test_avg_and_max_match_formulas_without_mask():
    x = frames()
    torch.testing.assert_close(tp.build_temporal("avg", D)(x), x.sum(1) / T)
    # Computed independently of torch's reductions: Python's max over each (row, channel).
    expected = torch.tensor([[max(x[b, :, d].tolist()) for d in range(D)] for b in range(B)], dtype=x.dtype)
    torch.testing.assert_close(tp.build_temporal("max", D)(x), expected)


def test_masks_honoured_and_huge_padding_ignored():
    x = frames()
    mask, lengths = ragged_mask()
    padded = x.clone()
    padded[~mask] = 1e30
    with_nan = x.clone()
    with_nan[~mask] = float("nan")
    avg, mx, att = tp.build_temporal("avg", D), tp.build_temporal("max", D), trained_attention()
    for b in range(B):
        valid = x[b, : lengths[b]]
        for inp in (padded, with_nan):
            torch.testing.assert_close(avg(inp, mask)[b], valid.mean(0))
            torch.testing.assert_close(mx(inp, mask)[b], valid.max(0).values)
            torch.testing.assert_close(att(inp, mask)[b], att(valid.unsqueeze(0))[0])
    assert torch.isfinite(att(with_nan, mask)).all()


def test_attention_matches_softmax_formula():
    att = trained_attention()
    x = frames(2)
    s = x @ att.score.weight[0]
    w = torch.exp(s) / torch.exp(s).sum(1, keepdim=True)
    torch.testing.assert_close(att(x), (w.unsqueeze(-1) * x).sum(1))
    torch.testing.assert_close(att.weights(x), w)


def test_attention_weights_sum_to_one_over_valid_frames():
    att = trained_attention()
    mask, lengths = ragged_mask()
    x = frames(3)
    x[~mask] = 1e30
    w = att.weights(x, mask)
    torch.testing.assert_close(w.sum(1), torch.ones(B, dtype=w.dtype))
    assert (w[~mask] == 0).all() and (w[mask] > 0).all()


def test_fresh_attention_is_avg():
    x, (mask, _) = frames(4), ragged_mask()
    att = tp.build_temporal("attention", D).double()
    torch.testing.assert_close(att(x, mask), tp.build_temporal("avg", D)(x, mask))


def test_gradients_reach_the_attention_layer_and_not_the_padding():
    att = tp.build_temporal("attention", D).double()   # zero-initialised: gradient must still flow
    mask, _ = ragged_mask()
    x = frames(5).requires_grad_(True)
    target = torch.randn(B, D, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    (att(x, mask) * target).sum().backward()
    g = att.score.weight.grad
    assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0
    assert (x.grad[~mask] == 0).all() and torch.isfinite(x.grad).all()


def test_empty_rows_give_zeros_not_nan():
    x = frames(6)
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, :3] = True
    for name in tp.TEMPORAL_POOLINGS:
        out = tp.build_temporal(name, D).double()(x, mask)
        assert torch.isfinite(out).all() and (out[1:] == 0).all() and out[0].abs().sum() > 0


@pytest.mark.parametrize("name", ["avg", "max", "attention"])
@pytest.mark.parametrize("chunk", [1, 3, 4, 7, 20])
def test_chunked_equals_unchunked(name, chunk):
    module = trained_attention() if name == "attention" else tp.build_temporal(name, D)
    x = frames(7, b=2, t=11)
    whole = module(x)
    summaries = [module.summarize(x[:, idx]) for idx in chunk_indices(11, chunk)]
    torch.testing.assert_close(tp.pool_chunks(summaries, name), whole, rtol=1e-12, atol=1e-12)
    # The merge is the module's own too.
    torch.testing.assert_close(module.merge(summaries), whole, rtol=1e-12, atol=1e-12)


def test_avg_chunk_merge_is_frame_count_weighted():
    x = frames(8, b=1, t=10)
    avg = tp.build_temporal("avg", D)
    a, b = avg.summarize(x[:, :9]), avg.summarize(x[:, 9:])
    torch.testing.assert_close(tp.pool_chunks([a, b], "avg"), (9 * a.value + b.value) / 10)
    assert not torch.allclose(tp.pool_chunks([a, b], "avg"), (a.value + b.value) / 2)


@pytest.mark.parametrize("name", ["avg", "max", "attention"])
def test_chunked_with_padding_and_an_empty_chunk(name):
    module = trained_attention() if name == "attention" else tp.build_temporal(name, D)
    mask, _ = ragged_mask()
    x = frames(10)
    x[~mask] = 1e30
    whole = module(x, mask)
    parts = [module.summarize(x[:, i:i + 3], mask[:, i:i + 3]) for i in (0, 3, 6)]  # row 2 has empty chunks
    torch.testing.assert_close(tp.pool_chunks(parts, name), whole)


def test_bad_inputs():
    avg = tp.build_temporal("avg", D)
    with pytest.raises(ValueError, match=r"^temporal pooling expects frame features \[B, T, D\]"):
        avg(torch.zeros(2, 3))
    with pytest.raises(ValueError, match=r"^temporal pooling mask must be bool"):
        avg(torch.zeros(2, 3, 4), torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"^temporal pooling mask must be bool"):
        avg(torch.zeros(2, 3, 4), torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^pool_chunks needs at least one chunk summary"):
        tp.pool_chunks([], "max")
    with pytest.raises(ValueError, match=r"^temporal attention needs the feature size dim >= 1, got 0"):
        tp.build_temporal("attention", 0)


@pytest.mark.parametrize("method", ["avg", "max", "attention"])
def test_grouped_merge_of_chunks_from_many_batches_equals_pooling_each_tracklet_at_once(method):
    """Tracklets of 7, 4 and 1 frames cut into the chunks a flat frame loader of 3 frames per batch
    gives (a chunk never crosses a batch or a tracklet), merged all at once by pool_grouped."""
    module = trained_attention() if method == "attention" else tp.build_temporal(method, D)
    x, (mask, lengths) = frames(seed=3), ragged_mask()
    flat = torch.cat([x[b, : int(n)] for b, n in enumerate(lengths)])  # 12 frames in order
    owner = torch.repeat_interleave(torch.arange(B), lengths)
    values, masses, groups = [], [], []
    for start in range(0, len(flat), 3):
        f, o = flat[start:start + 3], owner[start:start + 3]
        for t in o.unique().tolist():
            chunk = f[o == t].unsqueeze(0)
            s = module.summarize(chunk)
            values.append(s.value), masses.append(s.log_mass), groups.append(t)
    merged = tp.pool_grouped(tp.ChunkSummary(torch.cat(values), torch.cat(masses)), torch.tensor(groups), B, method)
    torch.testing.assert_close(merged, module(x, mask))
    # A tracklet with no chunk (an empty group) gives zeros, not NaN.
    more = tp.pool_grouped(tp.ChunkSummary(torch.cat(values), torch.cat(masses)), torch.tensor(groups), B + 1, method)
    assert torch.equal(more[B], torch.zeros(D, dtype=x.dtype)) and torch.isfinite(more).all()
