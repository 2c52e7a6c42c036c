"""Your own query and gallery folders (the "folders" test set): identities from sub-folder names or
list files, with camera ids (the protocol) or without (only the identical image is left out)."""
import os

import numpy as np
import pytest

from reid.data import build_dataset
from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.evaluation import evaluate_rank


def img(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8 not decoded here")
    return str(path)


def test_identities_come_from_sub_folder_names_and_match_across_sides(tmp_path):
    q = [img(tmp_path / "q" / "alice" / "1.jpg"), img(tmp_path / "q" / "bob" / "cam2" / "7.png")]
    g = [img(tmp_path / "g" / "bob" / "3.jpg"), img(tmp_path / "g" / "carol" / "4.jpg"),
         img(tmp_path / "g" / "alice" / "9.jpg")]
    ds = build_dataset("folders", query_path=str(tmp_path / "q"), gallery_path=str(tmp_path / "g"))
    names = {"alice": 1, "bob": 2, "carol": 3}
    assert [(p, pid) for p, pid, _ in ds.query] == [(q[0], names["alice"]), (q[1], names["bob"])]
    assert sorted((p, pid) for p, pid, _ in ds.gallery) == sorted(
        [(g[0], names["bob"]), (g[1], names["carol"]), (g[2], names["alice"])])
    assert ds.train == [] and not ds.with_cameras


def test_without_cameras_only_the_identical_image_is_left_out(tmp_path):
    a1 = img(tmp_path / "q" / "a" / "1.jpg")
    a2 = img(tmp_path / "q" / "a" / "2.jpg")
    listing = tmp_path / "gallery.txt"
    listing.write_text(f"{a1} a\n{a2} a\n{img(tmp_path / 'b1.jpg')} b\n")  # the queries themselves, and b
    ds = build_dataset("folders", query_path=str(tmp_path / "q"), gallery_path=str(listing))
    q_pids = np.array([p for _, p, _ in ds.query])
    q_cams = np.array([c for _, _, c in ds.query])
    g_pids = np.array([p for _, p, _ in ds.gallery])
    g_cams = np.array([c for _, _, c in ds.gallery])
    # Distances: each query is nearest to itself (0), then to b (0.5), then to the other image of a (0.9).
    d = np.array([[0.0, 0.9, 0.5], [0.9, 0.0, 0.5]], np.float32)
    res = evaluate_rank(d, q_pids, g_pids, q_cams, g_cams, max_rank=3)
    # The identical file is not counted: the other image of a is the one match, ranked after b.
    assert res["num_valid_queries"] == 2 and res["cmc"][0] == 0.0 and res["cmc"][1] == 1.0
    assert res["mAP"] == pytest.approx(0.5)


def test_list_files_with_cameras_follow_the_protocol(tmp_path):
    a = img(tmp_path / "a.jpg")
    b = img(tmp_path / "b.jpg")
    c = img(tmp_path / "c.jpg")
    (tmp_path / "q.txt").write_text(f"# query\n{a}, 7, 0\n")
    (tmp_path / "g.txt").write_text(f"{b} 7 0\n{c} 7 1\n{a} -1 3\n")  # same camera = junk; -1 dropped
    ds = build_dataset("folders", query_path=str(tmp_path / "q.txt"), gallery_path=str(tmp_path / "g.txt"))
    assert ds.with_cameras and ds.query == [(a, 1, 0)] and ds.gallery == [(b, 1, 0), (c, 1, 1)]


@pytest.mark.parametrize("make, message", [
    (lambda t: (img(t / "q" / "loose.jpg"), str(t / "q"))[1], "images outside any sub-folder"),
    (lambda t: (os.makedirs(t / "q" / "x"), str(t / "q"))[1], "no images in identity sub-folders"),
    (lambda t: str(t / "missing"), "does not exist"),
    (lambda t: ((t / "bad.txt").write_text("only-a-path\n"), str(t / "bad.txt"))[1], "expected 'path identity"),
    (lambda t: ((t / "cams.txt").write_text(f"{img(t / 'x.jpg')} 1 0\n{img(t / 'y.jpg')} 2\n"), str(t / "cams.txt"))[1],
     "have a camera id: give one for every image"),
])
def test_bad_folders_and_lists_are_one_line(tmp_path, make, message):
    source = make(tmp_path)
    gallery = img(tmp_path / "g" / "p" / "1.jpg")
    with pytest.raises((DatasetFormatError, DatasetNotFoundError), match=message):
        build_dataset("folders", query_path=source, gallery_path=os.path.dirname(os.path.dirname(gallery)))
