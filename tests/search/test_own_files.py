"""Search never answers a query with its own image: the same file under any name, or a copy of it."""
import shutil

import numpy as np
import pytest

from reid.cli.search import search_command
from reid.inference import Gallery, build_index, save_gallery
from reid.search.own_files import EXTRA_MATCHES, search_without_own_files
from reid.data.sources import collect_entries
from tests.utils.test_same_files import OWN_FILE_WAYS, own_file_in

# Features by content, as a model gives them: the query's own image scores 1.0, the true match 0.9.
VECTORS = {b"query": (1.0, 0.0, 0.0), b"match": (0.9, 0.43589, 0.0), b"other": (0.5, 0.8660254, 0.0),
           b"far": (0.0, 0.0, 1.0)}


class ContentPredictor:
    """The parts of a Predictor that search uses; features come from the file's bytes."""

    device = "cpu"
    feature_dim = 3

    def collect(self, sources):
        return collect_entries(sources).paths, None

    def extract_paths(self, paths, camids=None):
        return np.array([VECTORS[open(p, "rb").read()] for p in paths], np.float32)

    def describe(self):
        return {"weights": "", "input_size": "", "flip": ""}


def _gallery(tmp_path, own):
    (tmp_path / "q").mkdir()
    (tmp_path / "g").mkdir()
    (tmp_path / "q" / "query.jpg").write_bytes(b"query")
    for name in (b"match", b"other", b"far"):
        (tmp_path / "g" / (name.decode() + ".jpg")).write_bytes(name)
    paths = ["g/match.jpg", "g/other.jpg", "g/far.jpg", own_file_in(tmp_path, "query.jpg")[own]()]
    feats = np.array([VECTORS[open(tmp_path / p, "rb").read()] for p in paths], np.float32)
    return save_gallery(Gallery(feats, paths), tmp_path / "gallery.npz")


@pytest.mark.parametrize("how", OWN_FILE_WAYS)
def test_search_leaves_the_querys_own_image_out_whatever_its_name(tmp_path, monkeypatch, how):
    monkeypatch.chdir(tmp_path)  # the gallery's paths are relative, as tools/extract.py run here writes them
    gallery = _gallery(tmp_path, how)
    lines = []
    records = search_command(ContentPredictor(), gallery, ["q/query.jpg"], k=2, json_path=str(tmp_path / "m.json"),
                             log=lines.append)
    assert [m["path"] for m in records[0]["matches"]] == ["g/match.jpg", "g/other.jpg"]  # was: itself first, 1.0
    assert records[0]["matches"][0]["score"] == pytest.approx(0.9, abs=1e-4)
    assert records[0]["own_images_left_out"] == 1
    note = [line for line in lines if line.startswith("left out 1 gallery images that are a query's own image")]
    why = "1 the same file" if "link" in how or "spelling" in how else "1 byte-identical copies"
    assert len(note) == 1 and why in note[0] and "gallery row 3" in note[0], lines


def test_a_query_with_many_copies_still_gets_k_matches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jpg").write_bytes(b"query")
    paths = []
    for i in range(EXTRA_MATCHES + 5):  # more copies than one search over-fetches
        shutil.copy(tmp_path / "q.jpg", tmp_path / f"copy{i}.jpg")
        paths.append(f"copy{i}.jpg")
    for name in (b"match", b"other", b"far"):
        (tmp_path / (name.decode() + ".jpg")).write_bytes(name)
        paths.append(name.decode() + ".jpg")
    feats = np.array([VECTORS[open(tmp_path / p, "rb").read()] for p in paths], np.float32)
    index = build_index(Gallery(feats, paths))
    found = search_without_own_files(index, feats[:1], ["q.jpg"], k=3)
    assert [paths[i] for i in found.indices[0]] == ["match.jpg", "other.jpg", "far.jpg"]
    assert len(found.left_out[0]) == EXTRA_MATCHES + 5
    # Fewer images than k that are not the query's own: all of them, no error.
    found = search_without_own_files(index, feats[:1], ["q.jpg"], k=len(paths))
    assert len(found.indices[0]) == 3 and found.scores[0][0] == pytest.approx(0.9, abs=1e-4)


def test_a_gallery_path_missing_here_is_kept(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "q.jpg").write_bytes(b"query")
    index = build_index(Gallery(np.array([VECTORS[b"query"], VECTORS[b"other"]], np.float32),
                                ["elsewhere/q.jpg", "elsewhere/o.jpg"]))
    found = search_without_own_files(index, np.array([VECTORS[b"query"]], np.float32), ["q.jpg"], k=2)
    assert list(found.indices[0]) == [0, 1] and found.left_out == [[]]
    assert found.note(["q.jpg"], index.paths) is None
