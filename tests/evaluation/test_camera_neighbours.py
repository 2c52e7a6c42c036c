"""Camera-balanced neighbour lists: the nearest of every camera in turn, against a direct sort."""
import numpy as np
import pytest
import torch

from reid.evaluation.camera_neighbours import camera_balanced_pass
from reid.evaluation.distance import prepare_features
from reid.evaluation.jaccard import jaccard_graph


def _prepared(x, metric="cosine"):
    return prepare_features(torch.from_numpy(x).clone(), metric)


def _direct(x, cams, k):
    """Per item: (rank within camera, distance) order over all items, from a full sort."""
    f = x / np.linalg.norm(x, axis=1, keepdims=True)
    d = 1 - f @ f.T
    out = []
    for i in range(len(x)):
        keys = []
        for c in np.unique(cams):
            idx = np.flatnonzero(cams == c)
            order = idx[np.argsort(d[i, idx], kind="stable")]
            keys += [(r, d[i, j], j) for r, j in enumerate(order)]
        out.append([j for _, _, j in sorted(keys)[:k]])
    return np.array(out), d.max(axis=1)


@pytest.mark.parametrize("k", [1, 5, 12])
def test_lists_match_a_direct_sort(k):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 6)).astype(np.float32)
    cams = rng.integers(0, 3, 40)
    cams[:2] = [0, 1]  # a camera with few items still gives what it has
    nb = camera_balanced_pass(*_prepared(x), "cosine", k, cams)
    want, row_max = _direct(x, cams, k)
    np.testing.assert_array_equal(nb.indices, want)
    np.testing.assert_allclose(nb.row_max, row_max, atol=1e-5)
    assert (nb.indices[:, 0] == np.arange(40)).all()  # the item itself first


def test_each_camera_appears_in_turn():
    # two cameras far apart: plain lists stay in one camera, balanced ones alternate
    rng = np.random.default_rng(1)
    x = rng.standard_normal((30, 8)).astype(np.float32) * 0.1
    cams = np.repeat([0, 1], 15)
    x[cams == 1] += 3.0
    nb = camera_balanced_pass(*_prepared(x), "cosine", 7, cams)
    seen = cams[nb.indices]
    assert (seen[:, 1:3].sum(axis=1) == 1).all()  # ranks 0 of the other camera and 1 of its own


def test_jaccard_graph_with_cameras_relates_cameras():
    # each person seen once per camera; a camera offset dominates: only the balanced graph
    # puts a person's two images within the radius
    rng = np.random.default_rng(2)
    people = np.zeros((20, 32), np.float32)
    people[:, :16] = rng.standard_normal((20, 16))
    offsets = np.zeros((2, 32), np.float32)
    offsets[0, 16:24], offsets[1, 24:] = 3.0, 3.0  # orthogonal to each other and to the people
    x = np.concatenate([people + offsets[0], people + offsets[1]]).astype(np.float32)
    cams = np.repeat([0, 1], 20)
    plain = jaccard_graph(x, 4, 1, 0.9)
    balanced = jaccard_graph(x, 4, 1, 0.9, cameras=cams)
    pairs = np.arange(20)
    # a stored cross-camera pair has d > 0; an absent one (farther than the radius) reads 0
    assert (np.asarray(plain[pairs, pairs + 20]).ravel() == 0).all()
    assert (np.asarray(balanced[pairs, pairs + 20]).ravel() > 0).mean() > 0.9
    with pytest.raises(ValueError, match="one per item"):
        jaccard_graph(x, 4, 1, 0.9, cameras=cams[:5])
