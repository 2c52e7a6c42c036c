"""iLIDS-VID: the published splits (.mat, test = first half), camera 1 query / camera 2 gallery."""
import os
import shutil

import numpy as np
import pytest
from scipy.io import savemat

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.data.video import ILIDSVID, build_video_dataset

from .video_files import ILIDS_PEOPLE, assert_one_line, ilids_frames, ilids_splits, write_ilidsvid

SPLITS = os.path.join("train-test people splits", "train_test_splits_ilidsvid.mat")


@pytest.fixture
def ilids(tmp_path):
    return write_ilidsvid(str(tmp_path)), str(tmp_path)


def _people(row):
    """(train, test) person numbers of a 1-based ls_set row: test = first half."""
    half = len(row) // 2
    return (sorted(ILIDS_PEOPLE[int(i) - 1] for i in row[half:]),
            sorted(ILIDS_PEOPLE[int(i) - 1] for i in row[:half]))


def test_split_0_counts_and_protocol(ilids):
    folder, root = ilids
    ds = build_video_dataset("ilidsvid", root)
    assert isinstance(ds, ILIDSVID) and ds.dataset_dir == folder and ds.num_splits == 10
    # row 0 is 1..6: test = people 1, 2, 4 (first half), train = 5, 7, 9
    assert [t[1] for t in ds.query] == [1, 2, 4] and all(t[2] == 0 for t in ds.query)
    assert [t[1] for t in ds.gallery] == [1, 2, 4] and all(t[2] == 1 for t in ds.gallery)
    assert ds.train_pid_map == {5: 0, 7: 1, 9: 2}
    assert [(t[1], t[2]) for t in ds.train] == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]
    assert [len(t[0]) for t in ds.query] == [ilids_frames(1, p) for p in (1, 2, 4)]
    assert ds.num_frames(ds.train) == sum(ilids_frames(c, p) for c in (1, 2) for p in (5, 7, 9))
    assert ds.test_notes["split_id"] == 0


def test_frames_in_order_from_the_right_camera(ilids):
    folder, root = ilids
    frames = ILIDSVID(root).gallery[2][0]
    assert [os.path.relpath(p, folder) for p in frames] == [
        f"i-LIDS-VID/sequences/cam2/person004/cam2_person004_{317 + k:05d}.png" for k in range(ilids_frames(2, 4))]


@pytest.mark.parametrize("split_id", [1, 4, 9])
def test_each_split_matches_the_mat_file(ilids, split_id):
    train, test = _people(ilids_splits()[split_id])
    ds = ILIDSVID(ilids[1], split_id=split_id)
    assert [t[1] for t in ds.query] == test == [t[1] for t in ds.gallery]
    assert sorted(ds.train_pid_map) == train
    assert ds.split_id == split_id


def test_split_0_and_1_differ(ilids):
    a, b = ILIDSVID(ilids[1], split_id=0), ILIDSVID(ilids[1], split_id=1)
    assert [t[1] for t in a.query] == [1, 2, 4] and [t[1] for t in b.query] == [2, 5, 9]
    assert sorted(b.train_pid_map) == [1, 4, 7]


@pytest.mark.parametrize("split_id", [10, -1, "0", 1.0, True])
def test_split_index_out_of_range(ilids, split_id):
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(ilids[1], split_id=split_id)
    assert_one_line(e.value, repr(split_id), "0..9", "train_test_splits_ilidsvid.mat")


def test_missing_dataset_shows_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        ILIDSVID(str(tmp_path))
    assert "iLIDS-VID" in str(e.value).splitlines()[0]
    assert "Expected layout" in str(e.value) and "train_test_splits_ilidsvid.mat" in str(e.value)


def test_empty_person_folder(ilids):
    folder, root = ilids
    person = os.path.join(folder, "i-LIDS-VID", "sequences", "cam2", "person009")
    shutil.rmtree(person)
    os.makedirs(person)
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(root)
    assert_one_line(e.value, person, "no frame images")


def test_person_in_one_camera_only(ilids):
    folder, root = ilids
    shutil.rmtree(os.path.join(folder, "i-LIDS-VID", "sequences", "cam2", "person004"))
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(root)
    assert_one_line(e.value, "'person004'", os.path.join("sequences", "cam2"))


def test_split_naming_a_person_that_is_not_there(ilids):
    folder, root = ilids
    bad = ilids_splits()
    bad[3, 4] = 7
    savemat(os.path.join(folder, SPLITS), {"ls_set": bad})
    ILIDSVID(root, split_id=0)  # other rows still load
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(root, split_id=3)
    assert_one_line(e.value, SPLITS, "split 3", "person index 7", "6 person folders")


def test_splits_file_with_wrong_key_or_shape(ilids):
    folder, root = ilids
    path = os.path.join(folder, SPLITS)
    savemat(path, {"splits": ilids_splits()})
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(root)
    assert_one_line(e.value, path, "'ls_set'")
    savemat(path, {"ls_set": np.arange(1, 8, dtype=np.float64)[None]})
    with pytest.raises(DatasetFormatError) as e:
        ILIDSVID(root)
    assert_one_line(e.value, path, "(1, 7)")


def test_stray_folder_is_named(ilids):
    folder, root = ilids
    for cam in ("cam1", "cam2"):
        os.makedirs(os.path.join(folder, "i-LIDS-VID", "sequences", cam, "zz_backup"))
    # "zz_backup" sorts after the person folders (index 7), so split 0 (indices 1..6) does not use it ...
    ILIDSVID(root)
    savemat(os.path.join(folder, SPLITS), {"ls_set": np.array([[7, 1, 2, 3, 4, 5]], np.float64)})
    with pytest.raises(DatasetFormatError) as e:  # ... but a split that names it fails on it
        ILIDSVID(root)
    assert_one_line(e.value, os.path.join("cam1", "zz_backup"), "person001")
