"""DukeMTMC-VideoReID: one tracklet per folder, camera from the frame names."""
import os
import shutil

import pytest

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError
from reid.data.video import DukeMTMCVideoReID, build_video_dataset

from .video_files import DUKE, assert_one_line, write_duke, write_frames


@pytest.fixture
def duke(tmp_path):
    return write_duke(str(tmp_path)), str(tmp_path)


def test_counts_pids_cameras(duke):
    folder, root = duke
    ds = build_video_dataset("dukemtmc_videoreid", root)
    assert isinstance(ds, DukeMTMCVideoReID) and ds.dataset_dir == folder
    assert [(t[1], t[2], len(t[0])) for t in ds.train] == [(0, 5, 3), (0, 1, 2), (1, 0, 12)]
    assert ds.train_pid_map == {1: 0, 5: 1}
    assert [(t[1], t[2]) for t in ds.query] == [(2, 2), (7, 7)]
    assert [(t[1], t[2]) for t in ds.gallery] == [(2, 3), (7, 4), (9, 0)]
    assert ds.num_frames(ds.gallery) == sum(n for *_, n in DUKE["gallery"])
    assert ds.num_train_cams == 3


def test_frames_are_in_frame_order(duke):
    folder, root = duke
    frames = DukeMTMCVideoReID(os.path.join(root, "dukemtmc-videoreid")).train[2][0]
    numbers = [int(os.path.basename(p).split("_F")[1][:4]) for p in frames]
    assert numbers == list(range(1, 13))
    assert os.path.dirname(frames[0]) == os.path.join(folder, "train", "0005", "0001")


def test_empty_tracklet_folder(duke):
    folder, root = duke
    empty = os.path.join(folder, "gallery", "0009", "0002")
    os.makedirs(empty)
    with pytest.raises(DatasetFormatError) as e:
        DukeMTMCVideoReID(root)
    assert_one_line(e.value, empty, "no frame images")


def test_mixed_cameras_and_bad_names(duke):
    folder, root = duke
    track = os.path.join(folder, "query", "0002", "0001")
    write_frames(track, ["0002_C5_F0009_X09999.jpg"])
    with pytest.raises(DatasetFormatError) as e:
        DukeMTMCVideoReID(root)
    assert_one_line(e.value, track, "mixes cameras [3, 5]")
    shutil.rmtree(track)
    bad = write_frames(track, ["frame1.jpg"])[0]
    with pytest.raises(DatasetFormatError) as e:
        DukeMTMCVideoReID(root)
    assert_one_line(e.value, bad, "0001_C6_F0001_X00001.jpg")
    shutil.rmtree(track)
    write_frames(track, ["0002_C9_F0001_X00001.jpg"])
    with pytest.raises(DatasetFormatError) as e:
        DukeMTMCVideoReID(root)
    assert_one_line(e.value, track, "C9", "C1..C8")


def test_non_numeric_person_folder(duke):
    folder, root = duke
    write_frames(os.path.join(folder, "train", "misc", "0001"), ["0001_C1_F0001_X00001.jpg"])
    with pytest.raises(DatasetFormatError) as e:
        DukeMTMCVideoReID(root)
    assert_one_line(e.value, os.path.join(folder, "train", "misc"))


def test_missing_dataset_shows_the_layout(duke):
    folder, root = duke
    shutil.rmtree(os.path.join(folder, "gallery"))
    with pytest.raises(DatasetNotFoundError) as e:
        DukeMTMCVideoReID(root)
    assert "DukeMTMC-VideoReID" in str(e.value).splitlines()[0]
    assert "lacks: gallery" in str(e.value) and "Expected layout" in str(e.value)
