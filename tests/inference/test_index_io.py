"""save_index / load_index: every backend round-trips with its gallery labels; bad files are named."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

from reid.inference import Gallery, build_index, faiss_available, load_index, save_gallery, save_index
from reid.inference.index_io import INDEX_FORMAT_VERSION
from tests.inference.synthetic_features import clustered_features

needs_faiss = pytest.mark.skipif(not faiss_available(), reason="faiss is not installed (pip install faiss-cpu)")
BACKEND_PARAMS = ["exact"] + [pytest.param(b, marks=needs_faiss) for b in ("faiss", "ivf", "hnsw")]

PARAMS = {"exact": {}, "faiss": {}, "ivf": {"nlist": 20, "nprobe": 3}, "hnsw": {"hnsw_m": 8, "ef_search": 20}}


@pytest.fixture(scope="module")
def gallery():
    feats, queries = clustered_features(800, 24, num_queries=30, per_id=8, seed=7)
    n = len(feats)
    g = Gallery(feats, [f"/crops/c{i % 3}/{i:05d}_é.jpg" for i in range(n)], pids=np.arange(n) // 8,
                camids=np.arange(n) % 3, meta={"weights": "/runs/a/model_final.pth", "input_size": "256x128"})
    return g, queries


def _arrays(path) -> dict:
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("backend", BACKEND_PARAMS)
def test_every_backend_round_trips_with_its_labels(backend, gallery, tmp_path):
    g, queries = gallery
    index = build_index(g, backend, **PARAMS[backend])
    before = index.search(queries, k=15)
    path = save_index(index, tmp_path / "g.index")
    assert os.listdir(tmp_path) == ["g.index"]  # one file, no temp file left behind
    back = load_index(path)
    assert type(back) is type(index) and back.backend == backend
    assert len(back) == 800 and back.dim == 24 and back.params() == index.params()
    assert back.paths == g.paths and back.meta == g.meta
    np.testing.assert_array_equal(back.pids, g.pids)
    np.testing.assert_array_equal(back.camids, g.camids)
    after = back.search(queries, k=15)
    np.testing.assert_array_equal(after.indices, before.indices)
    np.testing.assert_array_equal(after.scores, before.scores)
    assert _arrays(path)["backend"] == backend


@needs_faiss
def test_search_parameters_are_saved_and_an_unlabelled_index_loads(gallery, tmp_path):
    g, queries = gallery
    index = build_index(g.feats, "ivf", nlist=20)  # features only: no paths, pids, camids
    index.set_search_params(nprobe=7)
    back = load_index(save_index(index, tmp_path / "ivf.index"))
    assert back.nprobe == 7 and back.params() == {"nlist": 20, "nprobe": 7, "train_size": 800, "target_recall": 0.95,
                                                  "measured_recall": index.measured_recall}
    assert back.paths is None and back.pids is None and back.camids is None and back.meta == {}
    hnsw = build_index(g.feats, "hnsw", hnsw_m=8).set_search_params(ef_search=33)
    assert load_index(save_index(hnsw, tmp_path / "h.index")).ef_search == 33


def test_an_exact_index_loads_without_faiss(gallery, tmp_path, monkeypatch):
    g, queries = gallery
    path = save_index(build_index(g), tmp_path / "exact.index")
    monkeypatch.setitem(sys.modules, "faiss", None)
    back = load_index(path)
    assert back.backend == "exact" and back.paths == g.paths


@needs_faiss
def test_a_faiss_index_without_faiss_says_what_to_do(gallery, tmp_path, monkeypatch):
    g, _ = gallery
    path = save_index(build_index(g, "hnsw", hnsw_m=8), tmp_path / "h.index")
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match="h.index.*'hnsw' search backend needs the faiss package: pip install faiss-cpu"):
        load_index(path)


def _rewrite(src, dst, **changes) -> str:
    arrays = _arrays(src)
    for key, value in changes.items():
        if value is None:
            arrays.pop(key)
        else:
            arrays[key] = value
    with open(dst, "wb") as f:  # a file object: np.savez would append .npz to a name
        np.savez(f, **arrays)
    return str(dst)


def test_bad_files_get_one_line_errors_naming_them(gallery, tmp_path):
    g, _ = gallery
    good = save_index(build_index(g), tmp_path / "good.index")
    with pytest.raises(FileNotFoundError, match="missing.index.*save_index"):
        load_index(tmp_path / "missing.index")
    cases = {
        "junk.index": (lambda p: p.write_bytes(b"certainly not a zip file"), "not a circle-reid index or it is damaged"),
        "cut.index": (lambda p: p.write_bytes(open(good, "rb").read()[:5000]), "not a circle-reid index or it is damaged"),
        "gallery.index": (lambda p: save_gallery(g, str(p) + ".npz") and os.replace(str(p) + ".npz", p),
                          r"it is a gallery file \(tools/extract.py\), not a saved index"),
        "foreign.index": (lambda p: _rewrite(good, p, **{k: None for k in _arrays(good)}, weights=np.zeros(3)),
                          r"not a circle-reid index \(no 'index_format' entry; found \['weights'\]\)"),
        "array.index": (lambda p: np.save(p, np.zeros(3)) or os.replace(str(p) + ".npy", p), "a single NumPy array"),
        "newer.index": (lambda p: _rewrite(good, p, format_version=np.asarray(INDEX_FORMAT_VERSION + 1)),
                        f"index format version {INDEX_FORMAT_VERSION + 1} by a newer circle-reid"),
        "other.index": (lambda p: _rewrite(good, p, index_format=np.asarray("someone-else")),
                        "its index_format is 'someone-else'"),
        "annoy.index": (lambda p: _rewrite(good, p, backend=np.asarray("annoy")),
                        "its backend 'annoy' is not one of this version's \\(exact, faiss, hnsw, ivf\\)"),
        "header.index": (lambda p: _rewrite(good, p, params=np.asarray("{not json")),
                         "its header is damaged"),
        "listparams.index": (lambda p: _rewrite(good, p, params=np.asarray("[1, 2]")),
                             "its header is damaged.*must be JSON objects"),
        "nofeats.index": (lambda p: _rewrite(good, p, feats=None), "'feats' array is missing"),
        "nan.index": (lambda p: _rewrite(good, p, feats=np.full((3, 24), np.nan, np.float32)),
                      "NaN or inf"),
        "short.index": (lambda p: _rewrite(good, p, paths=np.asarray(["a.jpg", "b.jpg"])),
                        "800 gallery rows but 2 paths"),
    }
    for name, (make, message) in cases.items():
        path = tmp_path / name
        make(path)
        with pytest.raises(ValueError, match=f"Index file '.*{name}' cannot be used: .*{message}") as err:
            load_index(path)
        assert "\n" not in str(err.value), name


@needs_faiss
def test_damaged_or_mismatched_faiss_data_is_named(gallery, tmp_path):
    g, _ = gallery
    good = save_index(build_index(g, "ivf", nlist=10), tmp_path / "ivf.index")
    data = _arrays(good)["faiss_index"]
    assert str(_arrays(good)["faiss_version"]) == __import__("faiss").__version__
    bad = _rewrite(good, tmp_path / "damaged.index", faiss_index=data[: len(data) // 2],
                   faiss_version=np.asarray("0.0.1"))
    with pytest.raises(ValueError, match=r"damaged.index.*faiss index \(written with faiss 0.0.1\) is damaged.*"
                                         r"inverted lists declare.*rebuild the index") as err:
        load_index(bad)
    assert "\n" not in str(err.value)
    # The header says HNSW but the data is an IVF index: refused, not searched with wrong parameters.
    mixed = _rewrite(good, tmp_path / "mixed.index", backend=np.asarray("hnsw"))
    with pytest.raises(ValueError, match="mixed.index.*holds a faiss IndexIVFFlat, not a 'hnsw' index"):
        load_index(mixed)
    with pytest.raises(ValueError, match="'faiss_index'\\) is missing"):
        load_index(_rewrite(good, tmp_path / "nodata.index", faiss_index=None))
    # A header whose search parameter is invalid.
    params = json.dumps({"nlist": 10, "nprobe": 0, "train_size": 800})
    with pytest.raises(ValueError, match="badparams.index.*nprobe must be an integer >= 1, got 0"):
        load_index(_rewrite(good, tmp_path / "badparams.index", params=np.asarray(params)))
