"""Galleries, indexes and checkpoints from someone else, written as a hostile user would: rows that
are not unit length, damaged metadata, faiss data that declares more than it holds, configs that
describe models far larger than their weights. Each answers correctly or in one line."""
import json
import logging
import struct

import numpy as np
import pytest
import torch

from reid.config import get_cfg
from reid.engine.checkpoint_files import CheckpointError, save_checkpoint
from reid.inference import Gallery, build_index, load_gallery, load_index, save_gallery, save_index
from reid.search.index_base import SearchResult
from reid.inference.predictor import Predictor

faiss = pytest.importorskip("faiss")


def unit(n, d, seed):
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def write_npz(path, **arrays):
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return str(path)


def gallery_arrays(n=6, d=4):
    return dict(feats=unit(n, d, 0), paths=np.asarray([f"/g/{i}.jpg" for i in range(n)]),
                format_version=np.asarray(1), meta=np.asarray("{}"))


# --------------------------------------------------------------------------- galleries
def test_rows_of_any_length_are_normalised_with_a_warning_and_rank_correctly(tmp_path, caplog):
    arrays = gallery_arrays()
    scaled = arrays["feats"] * np.array([[1e20], [1], [1e-20], [7], [1], [1]], np.float32)
    path = write_npz(tmp_path / "scaled.npz", **{**arrays, "feats": scaled})
    with caplog.at_level(logging.WARNING):
        g = load_gallery(path)
    assert any("3 of 6 feature rows were not unit length" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(g.feats, arrays["feats"], atol=1e-6)
    result = build_index(g.feats).search(arrays["feats"], k=1)
    assert result.indices[:, 0].tolist() == list(range(6)) and np.allclose(result.scores[:, 0], 1, atol=1e-6)


def test_zero_rows_are_refused_naming_the_file_and_row(tmp_path):
    arrays = gallery_arrays()
    arrays["feats"][4] = 0
    path = write_npz(tmp_path / "zero.npz", **arrays)
    with pytest.raises(ValueError, match=r"zero.npz' is not a valid gallery: feature row 4 is all zero"):
        load_gallery(path)
    with pytest.raises(ValueError, match="feature row 4 is all zero"):
        save_gallery(Gallery(arrays["feats"], list(arrays["paths"])), tmp_path / "out.npz")
    assert not (tmp_path / "out.npz").exists()


@pytest.mark.parametrize("change, message", [
    (dict(meta=np.asarray("[1, 2, 3]")), "metadata is not a JSON object"),
    (dict(meta=np.asarray(["{}", "{}"])), "metadata is not a JSON object"),
    (dict(meta=np.asarray("[" * 100_000)), "metadata is not a JSON object"),
    (dict(format_version=np.asarray([1, 2, 3])), r"format_version is not one integer"),
    (dict(format_version=np.asarray(99)), "format version 99 is newer"),
    (dict(paths=np.arange(6)), r"paths are not a list of strings \(int64\)"),
    (dict(pids=np.linspace(0, 1, 6)), r"pids are not a 1-d integer array"),
    (dict(feats=np.ones((6, 4), np.int64)), "not a float array"),
])
def test_damaged_gallery_metadata_is_one_line(tmp_path, change, message):
    path = write_npz(tmp_path / "damaged.npz", **{**gallery_arrays(), **change})
    with pytest.raises(ValueError, match=rf"damaged.npz' is not a valid gallery: .*{message}") as err:
        load_gallery(path)
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_safetensors_gallery_with_damaged_header_values(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    feats = unit(3, 4, 1)
    paths_json = np.frombuffer(json.dumps([1, 2, 3]).encode(), dtype=np.uint8).copy()
    path = tmp_path / "g.safetensors"
    path.write_bytes(st.save({"feats": feats, "paths_json": paths_json}, metadata={"meta": "[]"}))
    with pytest.raises(ValueError, match="paths are not a list of strings"):
        load_gallery(path)
    paths_json = np.frombuffer(json.dumps(["a", "b", "c"]).encode(), dtype=np.uint8).copy()
    path.write_bytes(st.save({"feats": feats, "paths_json": paths_json}, metadata={"meta": "[]"}))
    with pytest.raises(ValueError, match="metadata is not a JSON object"):
        load_gallery(path)
    path.write_bytes(st.save({"feats": feats, "paths_json": paths_json}, metadata={"format_version": "x"}))
    with pytest.raises(ValueError, match="format_version is not one integer"):
        load_gallery(path)


# --------------------------------------------------------------------------- indexes
def test_an_exact_index_with_rows_of_another_length_is_normalised_and_zero_rows_refused(tmp_path, caplog):
    g = unit(50, 8, 2)
    path = save_index(build_index(g, "exact"), tmp_path / "e.index")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["feats"] = arrays["feats"] * 1e20
    with caplog.at_level(logging.WARNING):
        index = load_index(write_npz(tmp_path / "scaled.index", **arrays))
    assert any("50 of 50 rows were not unit length" in r.getMessage() for r in caplog.records)
    res = index.search(g[:5], k=1)
    assert res.indices[:, 0].tolist() == [0, 1, 2, 3, 4] and np.allclose(res.scores[:, 0], 1, atol=1e-5)
    arrays["feats"][7] = 0
    with pytest.raises(ValueError, match=r"zero.index' cannot be used: feature row 7 is all zero.*rebuild the index"):
        load_index(write_npz(tmp_path / "zero.index", **arrays))


def _with_faiss_blob(tmp_path, name, blob):
    g = unit(20, 8, 3)
    path = save_index(build_index(g, "faiss"), tmp_path / "ok.index")
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["faiss_index"] = np.frombuffer(bytes(blob), dtype=np.uint8)
    return write_npz(tmp_path / name, **arrays)


def test_faiss_data_that_declares_more_than_it_holds_never_reaches_faiss(tmp_path, monkeypatch):
    flat = faiss.IndexFlatIP(8)
    flat.add(unit(20, 8, 3))
    blob = bytearray(faiss.serialize_index(flat).tobytes())
    struct.pack_into("<Q", blob, 4 + 4 + 8 + 8 + 8 + 1 + 4, 1 << 29)  # the vectors' length: 2**29 floats
    path = _with_faiss_blob(tmp_path, "claim.index", blob)

    def must_not_run(*args, **kwargs):
        raise AssertionError("faiss was handed bytes that declare more than they hold")

    monkeypatch.setattr(faiss, "deserialize_index", must_not_run)
    with pytest.raises(ValueError, match=r"claim.index' cannot be used: its faiss index .* is damaged or foreign "
                                         r"\(the flat index's vectors: 536870912 elements declared") as err:
        load_index(path)
    assert len(str(err.value)) < 400


def test_faiss_index_kinds_and_metrics_this_toolkit_never_saves_are_refused(tmp_path):
    l2 = faiss.IndexFlatL2(8)
    l2.add(unit(20, 8, 3))
    with pytest.raises(ValueError, match="uses metric 1; this toolkit's indexes use inner product"):
        load_index(_with_faiss_blob(tmp_path, "l2.index", faiss.serialize_index(l2).tobytes()))
    lsh = faiss.IndexLSH(8, 16)
    lsh.add(unit(20, 8, 3))
    with pytest.raises(ValueError, match="not one of the kinds this toolkit saves"):
        load_index(_with_faiss_blob(tmp_path, "lsh.index", faiss.serialize_index(lsh).tobytes()))


@pytest.mark.parametrize("backend, params", [("faiss", {}), ("ivf", dict(nlist=4)), ("hnsw", {})])
def test_a_faiss_index_of_vectors_that_are_not_unit_length_is_refused(tmp_path, backend, params):
    g = unit(300, 8, 4)
    good = build_index(g, backend, **params)
    scaled = g * np.float32(1e10)
    raw = good.index
    raw.reset()
    raw.add(scaled)  # what a crafted file would hold
    with pytest.raises(ValueError, match=r"cannot be used: its stored vectors are not unit length.*rebuild the index "
                                         r"from the gallery"):
        load_index(save_index(good, tmp_path / f"{backend}.index"))


def test_a_search_that_returns_impossible_scores_raises():
    with pytest.raises(ValueError, match=r"returned a score of 1e\+20.*Rebuild the index"):
        SearchResult(np.zeros((1, 2), np.int64), np.array([[1e20, 0.5]], np.float32))
    with pytest.raises(ValueError, match="score of nan"):
        SearchResult(np.zeros((1, 1), np.int64), np.array([[np.nan]], np.float32))


# --------------------------------------------------------------------------- checkpoints
def test_a_stored_config_describing_a_far_larger_model_than_the_weights_is_refused(tmp_path):
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "mgn"
    path = save_checkpoint(str(tmp_path / "tiny.pth"), model={"w": torch.zeros(10)}, cfg=cfg.dump())
    with pytest.raises(CheckpointError, match=r"config for .*tiny.pth describes a model of [\d,]+ MB, but the file "
                                              r"holds 0 MB of weights"):
        Predictor.from_checkpoint(path)
