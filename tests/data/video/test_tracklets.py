"""The tracklet representation: relabelling, the summary table, the registry, empty tracklets."""
import pytest

from reid.data.datasets.base import DatasetFormatError
from reid.data.video import VIDEO_DATASET_REGISTRY, VideoReIDDataset, build_video_dataset
from reid.data.video.tracklets import check_tracklet, list_frames, natural_key
from reid.utils.registry import UnknownNameError

from .video_files import assert_one_line, write_frames

TRAIN = [(("a1", "a2"), 40, 0), (("b1",), 7, 1), (("c1", "c2", "c3"), 40, 2), (("d1",), 12, 0)]
QUERY = [(("q1", "q2"), 3, 0)]
GALLERY = [(("g1",), 3, 1), (("g2", "g3"), 0, 1)]


def test_train_pids_are_relabelled_in_sorted_order_and_test_pids_kept():
    ds = VideoReIDDataset(TRAIN, QUERY, GALLERY, name="toy")
    assert [t[1] for t in ds.train] == [2, 0, 2, 1]
    assert ds.train_pid_map == {7: 0, 12: 1, 40: 2}
    assert [t[0] for t in ds.train] == [t[0] for t in TRAIN]  # frames untouched
    assert ds.query == QUERY and ds.gallery == GALLERY
    assert ds.num_train_pids == 3 and ds.num_train_cams == 3
    assert VideoReIDDataset(TRAIN, QUERY, GALLERY, relabel=False).train == TRAIN


def test_summary_counts_ids_tracklets_frames_cameras():
    lines = VideoReIDDataset(TRAIN, QUERY, GALLERY, name="toy").summary().splitlines()
    assert lines[0] == "Video dataset toy"
    assert "tracklets" in lines[1] and "frames" in lines[1]
    assert lines[3].split("|") == ["  train    ", "      3 ", "         4 ", "         7 ", "       3"]
    assert [c.strip() for c in lines[4].split("|")] == ["query", "1", "1", "2", "1"]
    assert [c.strip() for c in lines[5].split("|")] == ["gallery", "2", "2", "3", "1"]


def test_registry_names_and_unknown_name():
    assert VIDEO_DATASET_REGISTRY.names() == ["dukemtmc_videoreid", "ilidsvid", "mars", "prid2011", "synthetic_video",
                                             "video_folder"]
    with pytest.raises(UnknownNameError) as e:
        build_video_dataset("mars2", "x")
    assert_one_line(e.value, "'mars2'", "ilidsvid", "prid2011")


def test_a_tracklet_without_frames_is_a_one_line_error():
    assert check_tracklet(["x.jpg"], "t") == ("x.jpg",)
    with pytest.raises(DatasetFormatError) as e:
        check_tracklet([], "'/data/cam1/person007'")
    assert_one_line(e.value, "'/data/cam1/person007'", "no frame images")


def test_frames_are_in_natural_order_and_hidden_or_other_files_skipped(tmp_path):
    write_frames(str(tmp_path), ["f10.jpg", "f9.jpg", "f100.png", "._f1.jpg", "f1.jpg"])
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "sub.jpg").mkdir()
    assert [p.rsplit("/", 1)[1] for p in list_frames(str(tmp_path))] == ["f1.jpg", "f9.jpg", "f10.jpg", "f100.png"]
    assert sorted(["b2", "a10", "a9", "a"], key=natural_key) == ["a", "a9", "a10", "b2"]
