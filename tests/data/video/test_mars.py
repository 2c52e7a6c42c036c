"""MARS: tracks from the info .mat files, query_IDX protocol, junk and distractors, bad input."""
import os
import shutil

import numpy as np
import pytest
from scipy.io import savemat

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.data.video import MARS, build_video_dataset

from .video_files import MARS_TEST, assert_one_line, write_mars


@pytest.fixture
def mars(tmp_path):
    return write_mars(str(tmp_path)), str(tmp_path)


def _info(files, subset, rows):
    path = os.path.join(files["dir"], "info", f"tracks_{subset}_info.mat")
    savemat(path, {f"track_{subset}_info": np.array(rows, np.float64)})
    return path


def test_counts_and_protocol(mars):
    files, root = mars
    ds = build_video_dataset("mars", root)
    assert isinstance(ds, MARS) and ds.dataset_dir == files["dir"]
    assert len(ds.train) == 3 and ds.num_frames(ds.train) == 9
    assert ds.num_train_pids == 2 and ds.num_train_cams == 2
    # query_IDX = [1, 3]: test rows 0 and 2; the gallery is every other test track, junk included
    assert [(t[1], t[2], len(t[0])) for t in ds.query] == [(2, 0, 3), (4, 2, 2)]
    assert [(t[1], t[2], len(t[0])) for t in ds.gallery] == [(2, 1, 2), (4, 0, 2), (0, 0, 2), (-1, 1, 1)]
    assert ds.junk_pids == (-1,) and ds.distractor_pids == (0,)
    assert ds.test_notes["junk_gallery_tracklets"] == 1 and ds.test_notes["distractor_gallery_tracklets"] == 1


def test_frames_pids_cameras_and_relabelling(mars):
    files, root = mars
    ds = MARS(root=os.path.join(root, "mars"))  # the MARS folder itself also works
    frames, pid, camid = ds.train[2]
    assert (pid, camid) == (1, 0)  # pid 3 relabelled to 1 (pids 1, 3 -> 0, 1)
    assert ds.train_pid_map == {1: 0, 3: 1}
    assert [os.path.relpath(p, files["dir"]) for p in frames] == [
        f"bbox_train/0003/0003C1T0002F00{k}.jpg" for k in range(1, 5)]
    assert all(os.path.isfile(p) for t in ds.train + ds.query + ds.gallery for p in t[0])
    junk = ds.gallery[-1][0]
    assert [os.path.relpath(p, files["dir"]) for p in junk] == ["bbox_test/00-1/00-1C2T0001F001.jpg"]


def test_keep_junk_false_drops_junk_tracks_only(mars):
    ds = MARS(mars[1], keep_junk=False)
    assert [t[1] for t in ds.gallery] == [2, 4, 0]
    assert ds.test_notes["junk_kept"] is False


def test_query_idx_selects_the_queries(mars):
    files, root = mars
    savemat(os.path.join(files["dir"], "info", "query_IDX.mat"), {"query_IDX": np.array([[6, 2]], np.float64)})
    ds = MARS(root)
    assert [(t[1], t[2]) for t in ds.query] == [(-1, 1), (2, 1)]
    assert len(ds.gallery) == len(MARS_TEST) - 2


def test_missing_dataset_shows_the_layout(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        MARS(str(tmp_path))
    first = str(e.value).splitlines()[0]
    assert "MARS" in first and str(tmp_path) in first
    assert "Expected layout" in str(e.value) and "query_IDX.mat" in str(e.value)


@pytest.mark.parametrize("name", ["tracks_train_info.mat", "test_name.txt", "query_IDX.mat"])
def test_missing_info_file_is_one_line(mars, name):
    files, root = mars
    path = os.path.join(files["dir"], "info", name)
    os.remove(path)
    with pytest.raises(DatasetNotFoundError) as e:
        MARS(root)
    assert_one_line(e.value, path)


def test_info_range_beyond_the_name_list(mars):
    files, root = mars
    rows = [list(r) for r in files["train_rows"]]
    rows[2][1] = len(files["train_names"]) + 5
    path = _info(files, "train", rows)
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "row 3", "train_name.txt", f"{len(files['train_names'])} lines")


def test_info_start_after_end(mars):
    files, root = mars
    rows = [list(r) for r in files["test_rows"]]
    rows[1][0], rows[1][1] = rows[1][1], rows[1][0]
    path = _info(files, "test", rows)
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "row 2")


@pytest.mark.parametrize("column,value,shown", [(2, 3, "pid 3, camera 1"), (3, 4, "pid 1, camera 4")])
def test_info_row_disagreeing_with_the_names(mars, column, value, shown):
    files, root = mars
    rows = [list(r) for r in files["train_rows"]]
    rows[0][column] = value
    path = _info(files, "train", rows)
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "row 1", f"({shown})", "'0001C1T0001F001.jpg'", "belongs to pid 1, camera 1")


def test_info_of_wrong_shape_or_key_or_unreadable(mars):
    files, root = mars
    path = os.path.join(files["dir"], "info", "tracks_test_info.mat")
    savemat(path, {"track_test_info": np.ones((3, 3))})
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "N x 4", "(3, 3)")
    savemat(path, {"tracks": np.ones((3, 4))})
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "'track_test_info'", "tracks")
    with open(path, "wb") as f:
        f.write(b"not a mat file at all" * 10)
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "Cannot read MATLAB file")


def test_missing_image_is_one_line(mars):
    files, root = mars
    path = os.path.join(files["dir"], "bbox_test", "0004", "0004C1T0002F002.jpg")
    os.remove(path)
    with pytest.raises(DatasetNotFoundError) as e:
        MARS(root)
    assert_one_line(e.value, path, "1 listed images are missing")
    shutil.rmtree(os.path.join(files["dir"], "bbox_test", "0004"))
    with pytest.raises(DatasetNotFoundError) as e:
        MARS(root)
    assert_one_line(e.value, "0004C3T0001F001.jpg", "4 listed images")


def test_bad_name_in_the_name_list(mars):
    files, root = mars
    path = os.path.join(files["dir"], "info", "train_name.txt")
    names = list(files["train_names"])
    names[1] = "0001_c1_f001.jpg"
    with open(path, "w") as f:
        f.write("\n".join(names) + "\n")
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "line 2", "'0001_c1_f001.jpg'")


@pytest.mark.parametrize("idx,needle", [([1, 7], "query index 7"), ([0], "query index 0"),
                                        ([2, 2], "query index 2 is listed twice")])
def test_bad_query_idx(mars, idx, needle):
    files, root = mars
    path = os.path.join(files["dir"], "info", "query_IDX.mat")
    savemat(path, {"query_IDX": np.array([idx], np.float64)})
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, needle)


def test_non_integer_info_values(mars):
    files, root = mars
    path = os.path.join(files["dir"], "info", "query_IDX.mat")
    savemat(path, {"query_IDX": np.array([[1.5]])})
    with pytest.raises(DatasetFormatError) as e:
        MARS(root)
    assert_one_line(e.value, path, "non-integer")
