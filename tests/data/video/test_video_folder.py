"""A user's tracklets: list file, <pid>_c<cam>_* folders, loose crops grouped by _c<cam>_t<track>."""
import os
import shutil

import pytest

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.data.video import VideoFolderDataset, build_video_dataset
from reid.tracking.to_reid import TRACKLET_REGEX

from .video_files import assert_one_line, write_frames, write_video_folder


@pytest.fixture
def mine(tmp_path):
    return write_video_folder(str(tmp_path))


def _names(tracklet):
    return [os.path.basename(p) for p in tracklet[0]]


def test_list_file_train(mine):
    folder, _ = mine
    ds = build_video_dataset("video_folder", folder)
    assert isinstance(ds, VideoFolderDataset) and ds.has_labels
    assert [(t[1], t[2]) for t in ds.train] == [(0, 0), (1, 3)]
    assert ds.train_pid_map == {12: 0, 30: 1}
    assert _names(ds.train[0]) == ["1.jpg", "9.jpg", "10.jpg"]  # natural order, not "10" < "9"


def test_tracklet_folders_query(mine):
    ds = VideoFolderDataset(mine[0])
    assert [(t[1], t[2], _names(t)) for t in ds.query] == [(7, 1, ["f1.jpg", "f2.jpg"]), (12, 0, ["x.png"])]


def test_loose_crops_grouped_into_tracklets(mine):
    ds = VideoFolderDataset(mine[0])
    got = [(t[1], t[2], _names(t)) for t in ds.gallery]
    assert got == [
        (7, 0, ["0007_c1_t000001_f9.jpg", "0007_c1_t000001_f10.jpg"]),
        (-1, 0, ["MOT17-02_c1_t000003_f000009.jpg", "MOT17-02_c1_t000003_f000012.jpg"]),
        (-1, 1, ["MOT17-02_c2_t000003_f000001.jpg"]),
    ]
    assert ds.junk_pids == (-1,)


def test_grouping_agrees_with_the_tracklet_regex_of_to_reid(mine):
    import re

    crops = mine[1]["crops"]
    keys = {re.match(TRACKLET_REGEX, c).group(1) for c in crops}
    ds = VideoFolderDataset(mine[0])
    assert len(ds.gallery) == len(keys)
    for t in ds.gallery:
        assert len({re.match(TRACKLET_REGEX, n).group(1) for n in _names(t)}) == 1


def test_unlabelled_train(mine):
    folder, _ = mine
    shutil.rmtree(os.path.join(folder, "train"))
    write_frames(os.path.join(folder, "train"), ["cam_c1_t000001_f000001.jpg", "cam_c2_t000002_f000001.jpg"])
    ds = VideoFolderDataset(folder)
    assert not ds.has_labels and [(t[1], t[2]) for t in ds.train] == [(-1, 0), (-1, 1)]
    write_frames(os.path.join(folder, "train"), ["0004_c1_t000009_f000001.jpg"])
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, os.path.join(folder, "train"), "2 of 3 train tracklets")


def test_train_is_optional(mine):
    folder, _ = mine
    shutil.rmtree(os.path.join(folder, "train"))
    ds = VideoFolderDataset(folder)
    assert ds.train == [] and len(ds.query) == 2


def test_empty_tracklet_folder_and_list_entry(mine):
    folder, _ = mine
    empty = os.path.join(folder, "query", "0003_c1_empty")
    os.makedirs(empty)
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, empty, "no frame images")
    os.rmdir(empty)
    os.makedirs(os.path.join(folder, "train", "walk_c"))
    with open(os.path.join(folder, "train", "tracklets.txt"), "a") as f:
        f.write("walk_c 5 0\n")
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, "walk_c", "tracklets.txt, line 5", "no frame images")


@pytest.mark.parametrize("line,needle", [("walk_a 12", "not 'folder pid camid'"), ("walk_a x 0", "not 'folder"),
                                         ("walk_a 1 -2", "not 'folder"), ("gone 1 0", "does not exist")])
def test_bad_list_lines(mine, line, needle):
    folder, _ = mine
    path = os.path.join(folder, "train", "tracklets.txt")
    with open(path, "w") as f:
        f.write(f"walk_a 1 0\n{line}\n")
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, path, "line 2", needle)


def test_bad_folder_and_crop_names(mine):
    folder, _ = mine
    bad = os.path.join(folder, "query", "person7")
    write_frames(bad, ["1.jpg"])
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, bad, "<pid>_c<camera>_<anything>")
    shutil.rmtree(bad)
    crop = write_frames(os.path.join(folder, "gallery"), ["snapshot.jpg"])[0]
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, crop, "MOT17-02_c1_t000003_f000012.jpg")
    os.remove(crop)
    zero = write_frames(os.path.join(folder, "gallery"), ["0001_c0_t000001_f000001.jpg"])[0]
    with pytest.raises(DatasetFormatError) as e:
        VideoFolderDataset(folder)
    assert_one_line(e.value, zero, "c0", "1 or more")


def test_missing_dataset_shows_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        VideoFolderDataset(str(tmp_path))
    assert "video folder" in str(e.value).splitlines()[0]
    assert "lacks: query, gallery" in str(e.value) and "Expected layout" in str(e.value)
