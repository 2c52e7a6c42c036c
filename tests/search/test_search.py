"""Saved galleries and top-K search, down to tools/search.py finding a planted match."""
from __future__ import annotations

import json
import os
import shutil
import sys

import cv2
import numpy as np
import pytest
import torch

from reid.config import get_cfg, save_config
from reid.inference import (
    ExactIndex,
    Gallery,
    build_index,
    faiss_available,
    load_gallery,
    load_index,
    save_gallery,
    save_index,
    search,
)
from reid.modeling import build_model
from tests._tools import load_tool


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _unit(rows: int, dim: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _gallery(n: int = 50, dim: int = 16) -> Gallery:
    return Gallery(
        feats=_unit(n, dim, seed=0),
        paths=[f"/data/g/{i:04d}_é.jpg" for i in range(n)],  # non-ASCII must survive both formats
        pids=np.arange(n) // 5,
        camids=np.arange(n) % 3,
        meta={"weights": "/runs/a/model_final.pth", "input_size": "256x128"},
    )


# ---------------------------------------------------------------------------- gallery files
@pytest.mark.parametrize("ext", ["npz", "safetensors"])
def test_gallery_round_trip(tmp_path, ext):
    if ext == "safetensors":
        pytest.importorskip("safetensors")
    g = _gallery()
    path = save_gallery(g, tmp_path / f"g.{ext}")
    back = load_gallery(path)
    np.testing.assert_array_equal(back.feats, g.feats)
    assert back.paths == g.paths and back.meta == g.meta
    np.testing.assert_array_equal(back.pids, g.pids)
    np.testing.assert_array_equal(back.camids, g.camids)
    assert os.listdir(tmp_path) == [f"g.{ext}"]  # atomic write: no temp file left behind


def test_gallery_without_identities_and_overwrite(tmp_path):
    path = tmp_path / "g.npz"
    save_gallery(_gallery(), path)
    save_gallery(Gallery(_unit(3, 8, 1), ["a.jpg", "b.jpg", "c.jpg"]), path)
    back = load_gallery(path)
    assert back.pids is None and back.camids is None and back.dim == 8 and len(back) == 3


def test_safetensors_missing_package_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "safetensors", None)
    with pytest.raises(ImportError, match="npz"):
        save_gallery(_gallery(), tmp_path / "g.safetensors")


def test_evaluator_feature_files_load_as_galleries(tmp_path):
    g = _gallery(6, 4)
    np.savez(tmp_path / "features.npz", query_feats=g.feats[:2], query_paths=np.array(g.paths[:2]),
             gallery_feats=g.feats, gallery_paths=np.array(g.paths), gallery_pids=g.pids, gallery_camids=g.camids)
    back = load_gallery(tmp_path / "features.npz")
    assert back.paths == g.paths
    np.testing.assert_array_equal(back.pids, g.pids)


def test_bad_gallery_files_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.npz.*tools/extract.py"):
        load_gallery(tmp_path / "missing.npz")
    with pytest.raises(ValueError, match=r"\.npz.*\.safetensors"):
        load_gallery(tmp_path / "gallery.pkl")
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="junk.npz"):
        load_gallery(tmp_path / "junk.npz")
    np.savez(tmp_path / "nopaths.npz", feats=_unit(3, 4, 0))
    with pytest.raises(ValueError, match="nopaths.npz.*has no array 'paths'"):
        load_gallery(tmp_path / "nopaths.npz")
    np.savez(tmp_path / "short.npz", feats=_unit(3, 4, 0), paths=np.array(["a", "b"]))
    with pytest.raises(ValueError, match="short.npz.*3 feature rows but 2 paths"):
        load_gallery(tmp_path / "short.npz")
    with pytest.raises(ValueError, match="3 feature rows but 2 pids"):
        Gallery(_unit(3, 4, 0), ["a", "b", "c"], pids=[1, 2])


# ---------------------------------------------------------------------------- search
def test_planted_match_comes_first():
    g = _unit(500, 32, seed=1)
    planted = [7, 123, 499]
    noise = 0.01 * np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32)
    queries = g[planted] + noise
    result = search(queries, g, k=5)
    assert result.indices.shape == (3, 5) and result.indices.dtype == np.int64
    assert result.indices[:, 0].tolist() == planted
    assert np.all(np.diff(result.scores, axis=1) <= 0)  # best first
    # Scores are cosine similarities, computed on normalised features whatever the input scale.
    expected = (queries / np.linalg.norm(queries, axis=1, keepdims=True)) @ g.T
    np.testing.assert_allclose(result.scores, -np.sort(-expected, axis=1)[:, :5], atol=1e-5)
    np.testing.assert_array_equal(search(queries * 7.0, g, k=5).indices, result.indices)


def test_chunking_over_queries_does_not_change_results():
    g, q = _unit(300, 16, seed=3), _unit(40, 16, seed=4)
    whole = ExactIndex(g).search(q, k=10)
    chunked = ExactIndex(g, max_elements=300 * 7).search(q, k=10)  # chunks of 7 queries
    np.testing.assert_array_equal(chunked.indices, whole.indices)
    # BLAS may sum in another order for another matrix shape: equal up to float rounding.
    np.testing.assert_allclose(chunked.scores, whole.scores, atol=1e-6, rtol=0)


def test_k_is_capped_at_the_gallery_size_and_bad_inputs_raise():
    g = _unit(4, 8, seed=5)
    assert search(g[:1], g, k=10).indices.shape == (1, 4)
    with pytest.raises(ValueError, match="16-d but the gallery's are 8-d"):
        search(_unit(2, 16, 6), g)
    with pytest.raises(ValueError, match=">= 1"):
        search(g, g, k=0)
    with pytest.raises(ValueError, match="Unknown search backend 'annoy'"):
        build_index(g, backend="annoy")
    with pytest.raises(ValueError, match="empty"):
        build_index(np.zeros((0, 8), np.float32))


def test_faiss_backend_agrees_with_exact():
    pytest.importorskip("faiss")
    g = _unit(200, 24, seed=7)
    q = g[[5, 50]] + 0.01
    exact = search(q, g, k=8)
    fast = search(q, g, k=8, backend="faiss")
    np.testing.assert_array_equal(fast.indices, exact.indices)
    np.testing.assert_allclose(fast.scores, exact.scores, atol=1e-5)


def test_faiss_asked_for_but_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match="faiss-cpu"):
        build_index(_unit(3, 4, 0), backend="faiss")


# ---------------------------------------------------------------------------- tools/search.py
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run folder (untrained resnet18, 64x32), 8 gallery images, one query (the pixels of gallery
    image 5 in another file) and the gallery file tools/extract.py makes from them."""
    root = tmp_path_factory.mktemp("search")
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TEST = [64, 32]
    torch.manual_seed(0)
    run = root / "run"
    run.mkdir()
    save_config(cfg, str(run / "config.yaml"))
    torch.save({"model": build_model(cfg).state_dict(), "cfg": cfg.dump()}, run / "model_final.pth")
    rng = np.random.default_rng(0)
    (root / "gallery").mkdir()
    for i in range(8):
        cv2.imwrite(str(root / "gallery" / f"{i}.jpg"), rng.integers(0, 256, (64, 32, 3), dtype=np.uint8))
    (root / "queries").mkdir()
    # Gallery image 5's pixels, stored losslessly in another file: the same features, not the same file
    # (an exact copy would be the query's own image, which search never answers with).
    cv2.imwrite(str(root / "queries" / "q.png"), cv2.imread(str(root / "gallery" / "5.jpg")))
    assert load_tool("extract").main(["--run", str(run), "--input", str(root / "gallery"),
                                       "--output", str(root / "g.npz"), "--quiet", "--num-workers", "0"]) == 0
    return root


@pytest.mark.slow
def test_search_tool_finds_the_query_itself(tiny_run, tmp_path, capsys):
    run = tiny_run / "run"
    capsys.readouterr()
    tool = load_tool("search")
    args = ["--run", str(run), "--gallery", str(tiny_run / "g.npz"), "--query", str(tiny_run / "queries"),
            "-k", "3", "--draw", str(tmp_path / "pics"), "--json", str(tmp_path / "m.json")]
    assert tool.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("query 1/1:") and lines[0].endswith("q.png")
    first = lines[1].split()  # rank, similarity, path
    assert first[0] == "1" and first[2].endswith(os.sep + "5.jpg") and float(first[1]) > 0.9999
    matches = json.loads((tmp_path / "m.json").read_text())[0]["matches"]
    assert [m["rank"] for m in matches] == [1, 2, 3] and matches[0]["path"].endswith("5.jpg")
    pictures = os.listdir(tmp_path / "pics")
    assert pictures == ["0000_q.jpg"]
    picture = cv2.imread(str(tmp_path / "pics" / pictures[0]))
    # One strip: query + 3 matches side by side, each 128 px tall (the default) at the 1:2 aspect.
    assert picture.shape[1] >= 4 * 64 and 128 < picture.shape[0] < 2 * 128

    # A gallery made by another model (other feature size) is refused, naming the file.
    save_gallery(Gallery(_unit(2, 16, 0), ["a.jpg", "b.jpg"]), tmp_path / "other.npz")
    args[args.index(str(tiny_run / "g.npz"))] = str(tmp_path / "other.npz")
    assert tool.main(args) == 1
    err = capsys.readouterr().err
    assert "other.npz" in err and "16-d" in err and "512-d" in err


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["exact", pytest.param("hnsw", marks=pytest.mark.skipif(
    not faiss_available(), reason="faiss is not installed (pip install faiss-cpu)"))])
def test_search_tool_builds_an_index_once_then_searches_it(backend, tiny_run, tmp_path, capsys):
    run, gallery, queries = str(tiny_run / "run"), str(tiny_run / "g.npz"), str(tiny_run / "queries")
    tool = load_tool("search")
    saved = str(tmp_path / "g.index")
    # Building and saving needs no model.
    assert tool.main(["--gallery", gallery, "--backend", backend, "--save-index", saved]) == 0
    assert f"saved the {backend!r} index of 8 gallery images with their paths to {saved}" in capsys.readouterr().out
    index = load_index(saved)
    assert index.backend == backend and len(index) == 8 and index.paths == load_gallery(gallery).paths
    assert index.meta["input_size"] == "64x32"  # the model details travel with the index

    common = ["--run", run, "--query", queries, "-k", "8"]
    assert tool.main(["--gallery", gallery, "--json", str(tmp_path / "from_gallery.json")] + common) == 0
    assert tool.main(["--index", saved, "--json", str(tmp_path / "from_index.json")] + common) == 0
    from_gallery = json.loads((tmp_path / "from_gallery.json").read_text())
    from_index = json.loads((tmp_path / "from_index.json").read_text())
    assert [m["path"] for m in from_index[0]["matches"]] == [m["path"] for m in from_gallery[0]["matches"]]
    assert from_index[0]["matches"][0]["path"].endswith(os.sep + "5.jpg")
    np.testing.assert_allclose([m["score"] for m in from_index[0]["matches"]],
                               [m["score"] for m in from_gallery[0]["matches"]], atol=1e-5)
    capsys.readouterr()

    # Build, save and search in one run; a search parameter changes a saved HNSW index.
    if backend == "hnsw":
        assert tool.main(["--gallery", gallery, "--backend", "hnsw", "--hnsw-m", "4", "--save-index",
                          str(tmp_path / "h4.index")] + common) == 0
        assert load_index(tmp_path / "h4.index").params()["hnsw_m"] == 4
        assert tool.main(["--index", saved, "--ef-search", "200"] + common) == 0
        assert "ef_search=200" in capsys.readouterr().out

    # Mistakes get one line naming the file or the flag.
    wrong_backend = "ivf" if backend == "hnsw" else "faiss"
    other = save_index(build_index(Gallery(_unit(2, 16, 0), ["a.jpg", "b.jpg"])), tmp_path / "other.index")
    cases = [
        (["--index", other], "other.index' holds 16-d features (made by an unknown model) but the query model gives "
                             "512-d"),
        (["--index", saved, "--backend", wrong_backend], f"is a {backend!r} index, not {wrong_backend!r}"),
        (["--index", saved, "--nlist", "4"], "--nlist only apply when building an index"),
        (["--index", saved, "--nprobe", "4"], f"'nprobe' is not a search parameter of the {backend!r} backend"),
        (["--index", gallery], "g.npz' cannot be used: it is a gallery file"),
        (["--index", saved, "--save-index", str(tmp_path / "x.index")], "is already a saved index"),
        (["--gallery", gallery, "--backend", "exact", "--ef-search", "4"],
         "'ef_search' is not a parameter of the 'exact' search backend"),
    ]
    for extra, message in cases:
        assert tool.main(common + extra) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and err.count("\n") == 1, (extra, err)
    with pytest.raises(SystemExit):  # nothing to do: neither queries nor --save-index
        tool.main(["--gallery", gallery])
    assert "--save-index" in capsys.readouterr().err


@pytest.mark.slow
def test_search_tells_weights_apart_by_their_hash_not_their_file_name(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run / "run", run)
    gallery = str(tmp_path / "g.npz")
    assert load_tool("extract").main(["--run", str(run), "--input", str(tiny_run / "gallery"), "--output", gallery,
                                       "--quiet", "--num-workers", "0"]) == 0
    meta = load_gallery(gallery).meta
    assert meta["weights_sha256"].startswith("sha256:") and meta["weights"] == str(run / "model_final.pth")
    search = load_tool("search")
    query = ["--gallery", gallery, "--query", str(tiny_run / "queries"), "-k", "1"]
    # The same weights under another name: not a different model.
    shutil.copy(run / "model_final.pth", tmp_path / "copy.pth")
    capsys.readouterr()
    assert search.main(["--weights", str(tmp_path / "copy.pth")] + query) == 0
    assert "warning" not in capsys.readouterr().out
    # Other weights swapped in under the gallery's own file name (the run trained again): said.
    data = torch.load(run / "model_final.pth", weights_only=True)
    data["model"] = {k: (v * 1.01 if v.is_floating_point() else v) for k, v in data["model"].items()}
    torch.save(data, run / "model_final.pth")
    assert search.main(["--run", str(run)] + query) == 0
    out = capsys.readouterr().out
    assert f"warning: the gallery was made with other weights than the queries: {run / 'model_final.pth'} (sha256" in out
    assert meta["weights_sha256"][7:19] in out
