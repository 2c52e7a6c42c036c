"""Your own query and gallery folders (the "folders" test set): identities from sub-folder names or
list files, with camera ids (the protocol) or without (only the identical image is left out)."""
import os
import shutil

import numpy as np
import pytest

from reid.data import build_dataset
from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.evaluation import evaluate_rank
from tests.utils.test_same_files import OWN_FILE_WAYS, own_file_in


def img(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\xff\xd8 not decoded here: " + str(path).encode())  # each file its own bytes
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


# ------------------------------------------------------- the query's own image is never in its gallery
# Features by content: identical bytes give identical features, as a model would. alice's query is
# nearer bob's gallery image (cos 0.8) than alice's other image (cos 0.6): her true rank-1 is a miss.
VECTORS = {b"alice-q": (1.0, 0.0), b"alice-g": (0.6, 0.8), b"bob-g": (0.8, 0.6), b"bob-q": (0.0, 1.0),
           b"bob-g2": (0.1, 0.995)}


def _scenario(tmp_path, cameras):
    """Query list (alice, bob) and the clean gallery lines; returns (query list, gallery lines)."""
    for name in VECTORS:
        (tmp_path / "q" / name.decode()).parent.mkdir(parents=True, exist_ok=True)
        folder = "q" if name.endswith(b"-q") else "g"
        (tmp_path / folder).mkdir(exist_ok=True)
        (tmp_path / folder / (name.decode() + ".jpg")).write_bytes(name)
    cam = (lambda c: f" {c}") if cameras else (lambda c: "")
    (tmp_path / "query.txt").write_text(f"q/alice-q.jpg alice{cam(0)}\nq/bob-q.jpg bob{cam(1)}\n")
    return [f"g/alice-g.jpg alice{cam(2)}", f"g/bob-g.jpg bob{cam(2)}", f"g/bob-g2.jpg bob{cam(0)}"]


def _scores(ds):
    feats = {}
    for path, _, _ in ds.query + ds.gallery:
        feats[path] = np.asarray(VECTORS[open(path, "rb").read()], np.float32)
    q = np.stack([feats[p] for p, _, _ in ds.query])
    g = np.stack([feats[p] for p, _, _ in ds.gallery])
    ids = [np.array([it[k] for it in items]) for items in (ds.query, ds.gallery) for k in (1, 2)]
    res = evaluate_rank(1.0 - q @ g.T, ids[0], ids[2], ids[1], ids[3], max_rank=3)
    return res["cmc"][0], res["mAP"]


@pytest.mark.parametrize("how", OWN_FILE_WAYS)
def test_a_query_file_in_the_gallery_under_any_name_never_counts(tmp_path, how):
    for cameras in (True, False):  # with camera ids first: before, no case was caught there
        t = tmp_path / ("cams" if cameras else "plain")
        clean = _scenario(t, cameras)
        (t / "clean.txt").write_text("\n".join(clean) + "\n")
        own = own_file_in(t, "alice-q.jpg")[how]()
        # The query's own image, labelled as alice from another camera (the labels cannot tell).
        (t / "gallery.txt").write_text("\n".join(clean + [f"{own} alice" + (" 3" if cameras else "")]) + "\n")
        expected = _scores(build_dataset("folders", query_path=str(t / "query.txt"), gallery_path=str(t / "clean.txt")))
        assert expected == (pytest.approx(0.5), pytest.approx((0.5 + (1 + 2 / 3) / 2) / 2))  # alice: rank 2
        ds = build_dataset("folders", query_path=str(t / "query.txt"), gallery_path=str(t / "gallery.txt"))
        assert _scores(ds) == expected, (how, cameras)  # was R-1 1.0: the query found itself
        record = ds.test_notes["query_files_in_gallery"]
        kind = "same_file" if "link" in how or "spelling" in how else "identical_bytes"
        assert record == {"count": 1, "same_file": 0, "identical_bytes": 0, "removed_from_gallery": 0, kind: 1}
        assert len(ds.gallery) == 4  # left out for its own query only: still a picture of alice for the others


def test_a_query_file_labelled_as_someone_else_is_removed_and_reported(tmp_path, caplog):
    clean = _scenario(tmp_path, cameras=False)
    shutil.copy(tmp_path / "q" / "alice-q.jpg", tmp_path / "g" / "dup.jpg")
    (tmp_path / "gallery.txt").write_text("\n".join(clean + ["g/dup.jpg bob"]) + "\n")
    with caplog.at_level("WARNING", logger="reid"):
        ds = build_dataset("folders", query_path=str(tmp_path / "query.txt"), gallery_path=str(tmp_path / "gallery.txt"))
    assert [os.path.basename(p) for p, _, _ in ds.gallery] == ["alice-g.jpg", "bob-g.jpg", "bob-g2.jpg"]
    assert ds.test_notes["query_files_in_gallery"] == {"count": 1, "same_file": 0, "identical_bytes": 1,
                                                       "removed_from_gallery": 1}
    lines = [r.getMessage() for r in caplog.records if "gallery images are query images" in r.getMessage()]
    assert len(lines) == 1 and "1 byte-identical copies" in lines[0] and "dup.jpg is a byte-identical copy of query" in lines[0]
    assert "removed from the gallery" in lines[0]


def test_same_size_other_bytes_and_the_queries_own_copies(tmp_path):
    clean = _scenario(tmp_path, cameras=False)
    (tmp_path / "g" / "same_size.jpg").write_bytes(b"alice-x")  # the size of b"alice-q", other bytes
    VECTORS[b"alice-x"] = (0.0, -1.0)
    shutil.copy(tmp_path / "q" / "alice-q.jpg", tmp_path / "q" / "alice-q2.jpg")  # the query twice
    (tmp_path / "query.txt").write_text("q/alice-q.jpg alice\nq/alice-q2.jpg alice\nq/bob-q.jpg bob\n")
    (tmp_path / "gallery.txt").write_text("\n".join(clean + ["g/same_size.jpg alice", "q/alice-q.jpg alice"]) + "\n")
    try:
        ds = build_dataset("folders", query_path=str(tmp_path / "query.txt"), gallery_path=str(tmp_path / "gallery.txt"))
        assert ds.test_notes["query_files_in_gallery"]["count"] == 1  # same_size.jpg is not a copy
        # The gallery's copy is left out for both queries of that image: each ranks alice-g second.
        assert _scores(ds) == (pytest.approx(1 / 3), pytest.approx((0.5 + 0.5 + (1 + 2 / 3) / 2) / 3))
    finally:
        del VECTORS[b"alice-x"]


def test_images_the_folder_scan_leaves_out_are_reported(tmp_path, caplog):
    """A gallery of links to crops elsewhere lost those images without a word (only extract said so)."""
    img(tmp_path / "q" / "alice" / "1.jpg")
    img(tmp_path / "g" / "alice" / "2.jpg")
    os.symlink(img(tmp_path / "elsewhere" / "3.jpg"), tmp_path / "g" / "alice" / "3.jpg")
    os.mkfifo(tmp_path / "g" / "alice" / "4.jpg")
    with caplog.at_level("WARNING", logger="reid"):
        ds = build_dataset("folders", query_path=str(tmp_path / "q"), gallery_path=str(tmp_path / "g"))
    assert [os.path.basename(p) for p, _, _ in ds.gallery] == ["2.jpg"]
    lines = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert any(line.startswith("gallery: ") and "1 symbolic links that point outside the folder" in line
               and "3.jpg" in line for line in lines), lines
    assert any("1 entries that are not regular files" in line for line in lines), lines
