"""MGN's pooling, stripe and reduction options (the settings fast-reid's MGN needs)."""
import pytest
import torch

from reid.modeling import build_model
from reid.modeling.pooling import GeMPool
from reid.modeling.meta_arch.mgn import split_stripes, stripe_max_pool
from tests.modeling.test_models import make_cfg


def test_chunk_and_overlap_stripes_cut_rows_as_documented():
    fmap = torch.arange(16, dtype=torch.float32).view(1, 1, 16, 1)
    rows = lambda stripes: [s.flatten().tolist() for s in stripes]  # noqa: E731
    assert rows(split_stripes(fmap, 3, "chunk")) == [list(range(0, 6)), list(range(6, 12)), list(range(12, 16))]
    assert rows(split_stripes(fmap, 3, "overlap")) == [list(range(0, 6)), list(range(5, 11)), list(range(10, 16))]
    assert rows(split_stripes(fmap, 2, "chunk")) == rows(split_stripes(fmap, 2, "overlap"))
    with pytest.raises(ValueError, match="MODEL.MGN.STRIPES"):
        split_stripes(fmap, 3, "even")
    with pytest.raises(ValueError, match="cannot cut a feature map of 4 rows into 3"):
        split_stripes(fmap[:, :, :4], 3, "chunk")


def test_overlap_stripes_max_equal_adaptive_max_pooling():
    fmap = torch.randn(2, 3, 7, 4)
    for parts in (2, 3):
        expected = [s.amax(dim=(2, 3), keepdim=True) for s in split_stripes(fmap, parts, "overlap")]
        for got, want in zip(stripe_max_pool(fmap, parts), expected):
            torch.testing.assert_close(got, want)


@pytest.mark.slow
def test_fastreid_style_mgn_has_a_gem_per_feature_and_conv_only_reductions():
    cfg = make_cfg("mgn", MODEL__MGN__POOLING="gem", MODEL__MGN__STRIPES="chunk", MODEL__MGN__REDUCTION="conv",
                   MODEL__MGN__REDUCTION_DIM=16, MODEL__MGN__LOSS_LAYOUT="per_branch")
    model = build_model(cfg)
    assert len(model.pools) == 8 and all(isinstance(p, GeMPool) for p in model.pools)
    assert len({id(p.p) for p in model.pools}) == 8  # one learnable exponent each
    assert all(len(r) == 1 and isinstance(r[0], torch.nn.Conv2d) for r in model.reductions)
    x = torch.randint(0, 256, (2, 3, 96, 32), dtype=torch.uint8)
    model.eval()
    feats = model.reduced_features(x)
    # Feature 5 is the top third of the 3-part branch: GeM over torch.chunk's first 2 of 6 rows, then the conv.
    p3_map = model.branch_part3(model.trunk(model.preprocess(x)))
    top = p3_map[:, :, :2]
    expected = model.reductions[5](model.pools[5](top)[:, :, None, None]).flatten(1)
    torch.testing.assert_close(feats[5], expected)
    out = model(x)
    assert out.shape == (2, 8 * 16)
    # The eval feature is the neck (BatchNorm) of the 8 concatenated conv outputs: no ReLU in between.
    assert (torch.cat(feats, 1) < 0).any()


def test_mgn_refuses_non_local_blocks():
    with pytest.raises(ValueError, match="MODEL.BACKBONE.NON_LOCAL"):
        build_model(make_cfg("mgn", MODEL__BACKBONE__NON_LOCAL=[0, 1, 0, 0]))


def test_mgn_option_names_are_checked():
    for key, value in (("MODEL__MGN__REDUCTION", "conv_bn"), ("MODEL__MGN__STRIPES", "even")):
        with pytest.raises(ValueError, match=key.replace("__", ".")):
            build_model(make_cfg("mgn", **{key: value}))
