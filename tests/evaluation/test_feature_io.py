"""save_features / load_features round trip and the errors of a bad file."""
import os

import numpy as np
import pytest
import torch

from reid.evaluation import load_features, save_features
from reid.evaluation.extract import Features


def _features(n, dim=4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return Features(
        feats=torch.nn.functional.normalize(torch.randn(n, dim, generator=gen), dim=1),
        pids=np.arange(n, dtype=np.int64),
        camids=np.arange(n, dtype=np.int64) % 3,
        paths=[f"img/é_{i}.jpg" for i in range(n)],
    )


def test_round_trip(tmp_path):
    q, g = _features(3), _features(5, seed=1)
    path = str(tmp_path / "sub" / "feats.npz")
    save_features(path, q, g)
    assert os.listdir(tmp_path / "sub") == ["feats.npz"]  # no temp file left behind
    q2, g2 = load_features(path)
    for a, b in ((q, q2), (g, g2)):
        assert torch.equal(a.feats, b.feats) and b.feats.dtype == torch.float32
        np.testing.assert_array_equal(a.pids, b.pids)
        np.testing.assert_array_equal(a.camids, b.camids)
        assert b.pids.dtype == np.int64 and b.camids.dtype == np.int64
        assert a.paths == b.paths


def test_writes_exactly_the_given_name(tmp_path):
    path = str(tmp_path / "features.bin")
    save_features(path, _features(2), _features(2))
    assert os.path.isfile(path)
    assert load_features(path)[0].paths == _features(2).paths


def test_missing_file_and_garbage(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_features(str(tmp_path / "nope.npz"))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="bad.npz.*not a readable .npz"):
        load_features(str(bad))
    plain = str(tmp_path / "plain.npy")
    np.save(plain, np.zeros(3))
    with pytest.raises(ValueError, match="plain.npy.*not a readable .npz.*single NumPy array"):
        load_features(plain)


def test_missing_keys_and_inconsistent_lengths(tmp_path):
    path = str(tmp_path / "partial.npz")
    np.savez(path, query_feats=np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="partial.npz.*lacks .*gallery_feats"):
        load_features(path)
    q, g = _features(3), _features(4)
    save_features(path, q, g)
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["gallery_camids"] = arrays["gallery_camids"][:2]
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match="partial.npz.*gallery_camids has shape \\(2,\\) but gallery_feats has 4 rows"):
        load_features(path)
