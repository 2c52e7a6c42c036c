"""save_index / load_index: every backend round-trips with its gallery labels; bad files are named."""
from __future__ import annotations

import json
import logging
import os
import sys

import numpy as np
import pytest

from reid.inference import Gallery, build_index, faiss_available, load_index, save_gallery, save_index
from reid.search.index_io import INDEX_FORMAT_VERSION
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
    with pytest.raises(ValueError, match="badparams.index.*saved parameter nprobe is 0, not an integer from 1 to 10"):
        load_index(_rewrite(good, tmp_path / "badparams.index", params=np.asarray(params)))


@needs_faiss
def test_numbers_in_a_saved_index_header_are_bounded_on_load(gallery, tmp_path):
    g, _ = gallery
    hnsw = save_index(build_index(g.feats, "hnsw", hnsw_m=8), tmp_path / "h.index")
    ivf = save_index(build_index(g.feats, "ivf", nlist=20), tmp_path / "i.index")
    header = json.loads(str(_arrays(hnsw)["params"]))
    cases = [
        # faiss allocates the candidate list per query: 10^12 entries would exhaust memory at the first search.
        (hnsw, {**header, "ef_search": 10 ** 12}, "saved parameter ef_search is 1000000000000, not an integer from "
                                                  "1 to 8192"),
        (hnsw, {**header, "ef_search": True}, "saved parameter ef_search is True"),
        (hnsw, {**header, "measured_recall": "0.99"}, "saved parameter measured_recall is '0.99', not a recall"),
        (hnsw, {**header, "target_recall": 7}, "saved parameter target_recall is 7"),
        (ivf, {"nlist": 20, "nprobe": 10 ** 30, "train_size": 800}, "saved parameter nprobe is 10000000000"),
        (ivf, {"nlist": 20, "nprobe": 3, "train_size": [800]}, "saved parameter train_size is [800]"),
        (ivf, {"nlist": 20, "nprobe": 3, "train_size": 10 ** 9}, "saved parameter train_size is 1000000000, not an integer from 0 to 800"),
    ]
    for src, params, message in cases:
        bad = _rewrite(src, tmp_path / "bad.index", params=np.asarray(json.dumps(params)))
        with pytest.raises(ValueError) as err:
            load_index(bad)
        assert f"Index file {bad!r} cannot be used: its {message}" in str(err.value) and "\n" not in str(err.value)
    # The same bound when set on a loaded index (tools/search.py --ef-search).
    with pytest.raises(ValueError, match="ef_search must be an integer from 1 to 8192, got 100000"):
        load_index(hnsw).set_search_params(ef_search=100_000)


def _uniform(num, dim, seed):
    x = np.random.default_rng(seed).standard_normal((num, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _claiming(src, dst, **claims) -> str:
    """A copy of the index file `src` whose header records other parameters (e.g. a recall)."""
    params = json.loads(str(_arrays(src)["params"]))
    params.update(claims)
    return _rewrite(src, dst, params=np.asarray(json.dumps(params)))


@needs_faiss
def test_a_false_recorded_recall_is_caught_when_asked(tmp_path, caplog):
    """The issue's case: an IVF-PQ index whose file says recall 1.0 while it gives far less."""
    gallery = _uniform(3000, 32, 0)
    pq = build_index(gallery, "ivf", nlist=20, pq_m=4, pq_nbits=4)  # coarse codes: low recall, honestly recorded
    assert pq.measured_recall < 0.7
    path = save_index(pq, tmp_path / "pq.index")
    caplog.clear()  # (the build's own warning: the target is out of reach)
    saved = _arrays(path)
    np.testing.assert_array_equal(saved["recall_rows"], pq.recall_sample.rows)
    np.testing.assert_array_equal(saved["recall_truth"], pq.recall_sample.truth)
    with caplog.at_level(logging.WARNING):
        honest = load_index(path, verify_recall=True)
    assert honest.verified_recall == pytest.approx(pq.measured_recall, abs=1e-9) and not caplog.records
    assert load_index(path).verified_recall is None  # measured only when asked
    lying = _claiming(path, tmp_path / "lying.index", measured_recall=1.0)
    with caplog.at_level(logging.WARNING):
        back = load_index(lying)
        assert not caplog.records and back.measured_recall == 1.0
        back = load_index(lying, verify_recall=True)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert f"Index file {lying} records recall@10 1.000, but re-measured on 512 sample queries it gives " \
           f"{pq.measured_recall:.3f}: the recorded value is wrong" in warning
    assert back.verified_recall == pytest.approx(pq.measured_recall, abs=1e-9)


@needs_faiss
@pytest.mark.parametrize("backend,params", [("ivf", {"nlist": 50, "nprobe": 2}), ("hnsw", {"hnsw_m": 4, "ef_search": 8})])
def test_an_index_saved_without_a_sample_is_measured_on_its_own_vectors(backend, params, tmp_path, caplog):
    """Files of earlier versions hold no sample (and recorded a recall that counted each row's
    own match): the check draws one from the stored vectors, a bounded block at a time."""
    gallery = _uniform(4000, 16, 1)
    index = build_index(gallery, backend, **params)
    path = save_index(index, tmp_path / "new.index")
    caplog.clear()
    old = _claiming(path, tmp_path / "old.index", measured_recall=min(1.0, index.measured_recall + 0.2))
    old = _rewrite(old, old, recall_rows=None, recall_queries=None, recall_truth=None)
    with caplog.at_level(logging.WARNING):
        back = load_index(old, verify_recall=True)
    assert back.recall_sample is None
    # The same sample rows (same seed) and exact answers: the same recall as at build time.
    assert back.verified_recall == pytest.approx(index.measured_recall, abs=1e-9)
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "old.index records recall@10" in warning and "the recorded value is wrong" in warning


@needs_faiss
def test_a_compressed_index_without_a_sample_says_it_cannot_be_checked(tmp_path, caplog):
    pq = build_index(_uniform(2000, 16, 2), "ivf", nlist=10, pq_m=4, pq_nbits=4)
    path = save_index(pq, tmp_path / "pq.index")
    caplog.clear()
    old = _rewrite(path, tmp_path / "old_pq.index", recall_rows=None, recall_queries=None, recall_truth=None)
    with caplog.at_level(logging.WARNING):
        assert load_index(old, verify_recall=True).verified_recall is None
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "old_pq.index: its recall cannot be re-measured" in warning and "compressed vectors" in warning
    exact = save_index(build_index(_uniform(50, 8, 3)), tmp_path / "exact.index")
    assert load_index(exact, verify_recall=True).verified_recall is None  # exact: nothing to measure


@needs_faiss
def test_a_damaged_recall_sample_is_one_line_naming_the_file(tmp_path):
    index = build_index(_uniform(500, 8, 4), "hnsw", hnsw_m=4)
    path = save_index(index, tmp_path / "h.index")
    truth = _arrays(path)["recall_truth"]
    cases = {
        "missing.index": dict(recall_truth=None),
        "outside.index": dict(recall_truth=truth + 10_000),
        "width.index": dict(recall_queries=np.zeros((len(truth), 3), np.float32)),
        "nan.index": dict(recall_queries=np.full((len(truth), 8), np.nan, np.float32)),
    }
    for name, change in cases.items():
        bad = _rewrite(path, tmp_path / name, **change)
        with pytest.raises(ValueError, match=f"Index file '.*{name}' cannot be used: its recall sample") as err:
            load_index(bad)
        assert "\n" not in str(err.value) and "rebuild the index" in str(err.value)


@needs_faiss
def test_the_search_tool_verifies_a_saved_index(tmp_path, capsys, caplog):
    from tests._tools import load_tool

    pq = build_index(_uniform(3000, 32, 5), "ivf", nlist=20, pq_m=4, pq_nbits=4)  # no paths: not needed to check
    path = save_index(pq, tmp_path / "pq.index")
    lying = _claiming(path, tmp_path / "lying.index", measured_recall=1.0)
    tool = load_tool("search")
    capsys.readouterr()
    caplog.clear()
    assert tool.main(["--index", path, "--verify-recall"]) == 0
    assert f"recall@10 of {path} measured again: {pq.measured_recall:.3f} (recorded: {pq.measured_recall:.3f})" \
        in capsys.readouterr().out and not caplog.records
    assert tool.main(["--index", lying, "--verify-recall"]) == 0
    assert "(recorded: 1.000)" in capsys.readouterr().out
    (warning,) = [r.getMessage() for r in caplog.records]  # (printed on stderr outside pytest)
    assert "records recall@10 1.000" in warning and "IVF-PQ ranks by compressed codes" in warning
    with pytest.raises(SystemExit):
        tool.main(["--gallery", "g.npz", "--verify-recall"])
    assert "--verify-recall checks a saved index: give it with --index FILE" in capsys.readouterr().err
