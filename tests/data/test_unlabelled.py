"""The unlabelled dataset source: folders and list files of crops without identities."""
from __future__ import annotations

import os

import pytest

from reid.config import get_cfg
from reid.data import build_dataset, build_train_data
from reid.data.datasets import DatasetFormatError, DatasetNotFoundError
from reid.data.datasets.unlabelled import number_cameras


def _crops(root, write_jpeg, names):
    return [write_jpeg(os.path.join(root, n)) for n in names]


def test_folder_is_scanned_recursively_with_cameras_from_names(tmp_path, write_jpeg):
    _crops(str(tmp_path / "crops"), write_jpeg,
           ["cam10/x_c10_1.jpg", "cam2/y_c2_5.png", "cam2/z_c2_7.JPG", ".hidden/h_c1_1.jpg"])
    (tmp_path / "crops" / "notes.txt").write_text("not an image")
    ds = build_dataset("unlabelled", str(tmp_path), folder="crops", camera_regex=r"_c(\d+)_")
    names = {os.path.basename(p): (pid, cam) for p, pid, cam in ds.train}
    # Numeric order of the camera values: c2 -> 0, c10 -> 1 (not the string order "10" < "2").
    assert names == {"x_c10_1.jpg": (-1, 1), "y_c2_5.png": (-1, 0), "z_c2_7.JPG": (-1, 0)}
    assert ds.query == [] and ds.gallery == [] and not ds.has_labels
    assert ds.summary().splitlines()[3].split("|")[1].strip() == "-"  # no identity count for unlabelled crops


def test_folder_without_regex_is_one_camera(tmp_path, write_jpeg):
    _crops(str(tmp_path), write_jpeg, ["a.jpg", "b.jpg"])
    ds = build_dataset("unlabelled", "unused-root", folder=str(tmp_path))
    assert [cam for _, _, cam in ds.train] == [0, 0]


def test_list_file_with_and_without_cameras(tmp_path, write_jpeg):
    _crops(str(tmp_path / "imgs"), write_jpeg, ["a.jpg", "b c.jpg", "d.jpg"])
    (tmp_path / "with.txt").write_text("# my crops\npath camid\nimgs/a.jpg 4\nimgs/b c.jpg,1\n\nimgs/d.jpg 4 # again\n")
    ds = build_dataset("unlabelled", str(tmp_path), list_file="with.txt")
    assert [(os.path.basename(p), pid, cam) for p, pid, cam in ds.train] == [
        ("a.jpg", -1, 1), ("b c.jpg", -1, 0), ("d.jpg", -1, 1)]
    (tmp_path / "without.txt").write_text("imgs/a.jpg\nimgs/b c.jpg\n")
    ds = build_dataset("unlabelled", str(tmp_path), list_file="without.txt")
    assert [cam for _, _, cam in ds.train] == [0, 0]


def test_number_cameras_orders_numbers_numerically_then_names():
    assert number_cameras(["10", "2", "2", "front"]) == [1, 0, 0, 2]
    assert number_cameras([None, None]) == [0, 0]


@pytest.mark.parametrize("kwargs, match", [
    ({}, "set exactly one of DATASETS.UNLABELLED.DIR"),
    ({"folder": "a", "list_file": "b"}, "set exactly one of DATASETS.UNLABELLED.DIR"),
    ({"folder": "missing"}, "DATASETS.UNLABELLED.DIR 'missing' was not found"),
    ({"list_file": "missing.txt"}, "DATASETS.UNLABELLED.LIST 'missing.txt' was not found"),
])
def test_missing_sources_name_the_key(tmp_path, kwargs, match):
    with pytest.raises(DatasetNotFoundError, match=match):
        build_dataset("unlabelled", str(tmp_path), **kwargs)


def test_empty_folder_is_one_line_naming_it(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    (tmp_path / "empty" / "readme.txt").write_text("x")
    with pytest.raises(DatasetNotFoundError) as e:
        build_dataset("unlabelled", str(tmp_path), folder="empty")
    assert "names no images" in str(e.value) and "searched recursively" in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_camera_regex_and_unmatched_names(tmp_path, write_jpeg):
    _crops(str(tmp_path), write_jpeg, ["p_c1.jpg", "nocam.jpg"])
    with pytest.raises(ValueError, match="is not a regular expression"):
        build_dataset("unlabelled", ".", folder=str(tmp_path), camera_regex="_c(")
    with pytest.raises(ValueError, match="has 0 groups; it needs exactly one"):
        build_dataset("unlabelled", ".", folder=str(tmp_path), camera_regex=r"_c\d")
    with pytest.raises(DatasetFormatError, match=r"nocam.jpg'?: its file name does not match .*CAMERA_REGEX"):
        build_dataset("unlabelled", ".", folder=str(tmp_path), camera_regex=r"_c(\d+)")


def test_list_errors_name_file_and_line(tmp_path, write_jpeg):
    write_jpeg(str(tmp_path / "a.jpg"))
    (tmp_path / "mixed.txt").write_text("a.jpg 1\na.jpg\n")
    with pytest.raises(DatasetFormatError, match=r"mixed.txt, line 2: no camera id, unlike the lines before it"):
        build_dataset("unlabelled", str(tmp_path), list_file="mixed.txt")
    (tmp_path / "gone.txt").write_text("a.jpg\nb.jpg\n")
    with pytest.raises(DatasetNotFoundError, match=r"gone.txt, line 2: image .*b.jpg' does not exist"):
        build_dataset("unlabelled", str(tmp_path), list_file="gone.txt")
    for name, text, fragment in [
        ("negcam.txt", "a.jpg -3\n", r"negcam.txt, line 1: '-3' after the image path is not a camera id"),
        ("extra.txt", "a.jpg\na.jpg 1 extra\n", r"extra.txt, line 2: '1 extra' after the image path is not a camera id"),
        ("folder.txt", ".\n", r"folder.txt, line 1: .* is a folder; list image files, or set DATASETS.UNLABELLED.DIR"),
        ("text.txt", "negcam.txt\n", r"text.txt, line 1: .*negcam.txt' is not an image file"),
    ]:  # each was "image 'a.jpg -3' does not exist" or, for a text file, accepted until training read it
        (tmp_path / name).write_text(text)
        with pytest.raises(DatasetFormatError, match=fragment):
            build_dataset("unlabelled", str(tmp_path), list_file=name)
    (tmp_path / "b.webp").write_bytes((tmp_path / "a.jpg").read_bytes())  # every image type the tools read
    (tmp_path / "webp.txt").write_text("b.webp\n")
    assert len(build_dataset("unlabelled", str(tmp_path), list_file="webp.txt").train) == 1
    (tmp_path / "blank.txt").write_text("# nothing\n")
    with pytest.raises(DatasetNotFoundError, match="names no images"):
        build_dataset("unlabelled", str(tmp_path), list_file="blank.txt")


def _cfg(tmp_path, **unlabelled):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(tmp_path)
    cfg.DATASETS.NAMES = ["unlabelled"]
    cfg.DATASETS.TESTS = []
    for key, value in unlabelled.items():
        setattr(cfg.DATASETS.UNLABELLED, key, value)
    return cfg


def test_supervised_training_refuses_unlabelled_crops(tmp_path, write_jpeg):
    _crops(str(tmp_path / "crops"), write_jpeg, ["a.jpg", "b.jpg"])
    cfg = _cfg(tmp_path, DIR="crops")
    with pytest.raises(ValueError, match="'unlabelled', whose images have no identity labels.*UDA.ENABLED True"):
        build_train_data(cfg)
    data = build_train_data(cfg, labels_required=False)
    assert not data.labelled and data.num_classes == 0
    assert [pid for _, pid, _ in data.items] == [-1, -1]
    cfg.TEST.VAL_IDS = 2
    with pytest.raises(ValueError, match="TEST.VAL_IDS 2 holds out labelled identities.*set TEST.VAL_IDS 0"):
        build_train_data(cfg, labels_required=False)


def test_repeated_crops_are_kept_once_and_reported(tmp_path, write_jpeg, caplog):
    import shutil

    crops = tmp_path / "crops"
    originals = _crops(str(crops), write_jpeg, ["a_c1_1.jpg", "b_c2_1.jpg"])
    shutil.copy(originals[0], crops / "copy_c1_2.jpg")  # byte-identical, another name
    (crops / "sub").mkdir()
    shutil.copy(originals[0], crops / "sub" / "a_c1_1.jpg")  # byte-identical, a sub-folder
    with caplog.at_level("WARNING", logger="reid"):
        clean = build_dataset("unlabelled", str(tmp_path), folder=str(crops), camera_regex=r"_c(\d+)_").train
    assert [os.path.basename(p) for p, _, _ in clean] == ["a_c1_1.jpg", "b_c2_1.jpg"]  # was: 4 crops, a 3 times
    assert "crops: 2 of 4 images repeat another one (0 the same file" in caplog.text
    caplog.clear()
    # A list naming one crop through a hard link, a symbolic link, './' and '..' spellings and twice.
    os.link(originals[1], tmp_path / "hard_c2_9.jpg")
    os.symlink(originals[1], tmp_path / "soft_c2_9.jpg")
    listing = tmp_path / "crops.txt"
    listing.write_text("crops/a_c1_1.jpg\ncrops/b_c2_1.jpg\nhard_c2_9.jpg\nsoft_c2_9.jpg\n./crops/./b_c2_1.jpg\n"
                       "crops/sub/../b_c2_1.jpg\ncrops/a_c1_1.jpg\ncrops/copy_c1_2.jpg\n")
    with caplog.at_level("WARNING", logger="reid"):
        listed = build_dataset("unlabelled", str(tmp_path), list_file=str(listing), camera_regex=r"_c(\d+)_").train
    assert [(os.path.basename(p), pid, cam) for p, pid, cam in listed] == [("a_c1_1.jpg", -1, 0), ("b_c2_1.jpg", -1, 1)]
    lines = [r.getMessage() for r in caplog.records if "repeat another one" in r.getMessage()]
    assert len(lines) == 1 and "6 of 8 images repeat another one (5 the same file" in lines[0], lines
    assert "1 byte-identical copies) and are kept once; e.g. " in lines[0] and "hard_c2_9.jpg is the same file as" in lines[0]


@pytest.mark.slow
def test_a_catastrophic_camera_regex_ends_in_one_line_not_a_hang(tmp_path, write_jpeg):
    import subprocess
    import sys

    write_jpeg(str(tmp_path / "crops" / ("a" * 60 + "!.jpg")))
    code = ("from reid.data import build_dataset\n"
            f"build_dataset('unlabelled', '.', folder={str(tmp_path / 'crops')!r}, camera_regex='(a|aa)+$')\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:  # before: 1.6^60 steps of backtracking on the one name
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONPATH=root))
    except subprocess.TimeoutExpired:
        pytest.fail("the folder scan hung on the camera regex")
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1 and last.startswith("reid.utils.safe_regex.RegexError: DATASETS.UNLABELLED.CAMERA_REGEX"), proc.stderr
    assert "'(a|aa)+$' took more than 2 s on the name 'aaaa" in last and "!.jpg' and was stopped" in last


def test_a_camera_regex_that_finds_one_camera_in_every_name_says_so(tmp_path, write_jpeg, caplog):
    _crops(str(tmp_path), write_jpeg, ["p_c1_0.jpg", "q_c2_0.jpg", "r_c3_0.jpg"])
    with caplog.at_level("WARNING"):
        ds = build_dataset("unlabelled", ".", folder=str(tmp_path), camera_regex=r"_(c)\d")
    assert {c for _, _, c in ds.train} == {0}
    assert any("finds one camera ('c') in all 3 images" in r.getMessage() and "_c(\\d+)" in r.getMessage()
               for r in caplog.records)
    caplog.clear()
    with caplog.at_level("WARNING"):
        ds = build_dataset("unlabelled", ".", folder=str(tmp_path), camera_regex=r"_c(\d)")
    assert {c for _, _, c in ds.train} == {0, 1, 2} and not any("finds one camera" in r.getMessage()
                                                                  for r in caplog.records)
