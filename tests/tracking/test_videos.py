"""Video files as sequences (reid/tracking/videos.py): decoded once, reused while unchanged, every bad
file one line, and nothing that looks decoded after a stop."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reid.tracking.sequences import SequenceError, find_sequences
from reid.tracking.videos import SOURCE_FILE, find_videos, video_sequences
from tests.tracking.video_files import encode_video, read_video, sequences_as_videos

cv2 = pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    root = tmp_path_factory.mktemp("videos")
    make_sequences(str(root / "seq"), SequenceSettings(cameras=2, frames=12, width=160, height=96, seed=1),
                   log=lambda _: None)
    return str(root / "seq"), sequences_as_videos(str(root / "seq"), str(root / "lobby"), fps=12.5)


def test_videos_become_the_sequences_they_were_made_from(videos, tmp_path):
    seq_folder, files = videos
    originals = find_sequences(seq_folder)
    found = find_videos([os.path.dirname(files[0])], need="det")
    assert found == sorted(files)
    sequences = video_sequences(found, str(tmp_path), log=lambda _: None)
    for camera, (s, original) in enumerate(zip(sequences, originals), start=1):
        assert (s.name, s.length, s.width, s.height) == (original.name, 12, 160, 96)
        assert (s.camera, s.scene, s.frame_rate) == (camera, "lobby", 12.5)
        assert s.root == os.path.join(str(tmp_path), "videos", original.name)
        assert open(s.det_path).read() == open(original.det_path).read()
        assert open(s.gt_path).read() == open(original.gt_path).read()
        decoded = read_video(files[camera - 1])
        assert len(decoded) == s.length
        # the frames are the video's (JPEG at quality 95 on top of the decoder's output)
        frame = cv2.imread(s.frame_path(5)).astype(float)
        assert np.abs(frame - decoded[4]).mean() < 3


def test_a_decoded_video_is_used_again_until_its_file_changes(videos, tmp_path):
    _, files = videos
    said = []
    first = video_sequences(files[:1], str(tmp_path), log=said.append)
    frame = first[0].frame_path(1)
    stamp = os.stat(frame).st_mtime_ns
    assert len(said) == 1 and "decoding" in said[0]
    again = video_sequences(files[:1], str(tmp_path), log=said.append)
    assert again == first and len(said) == 1 and os.stat(frame).st_mtime_ns == stamp
    st = os.stat(files[0])
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    try:
        video_sequences(files[:1], str(tmp_path), log=said.append)
    finally:
        os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    assert len(said) == 2 and json.load(open(os.path.join(first[0].root, SOURCE_FILE)))["stamps"]["video"][1] == \
        st.st_mtime_ns + 10**9


def test_bad_video_inputs_are_one_line_each(videos, tmp_path):
    _, files = videos
    with pytest.raises(FileNotFoundError, match="Video .*nothing.mp4' does not exist; check the path"):
        find_videos([str(tmp_path / "nothing.mp4")])
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    with pytest.raises(SequenceError, match=r"--video .*empty: a folder with no video file"):
        find_videos([str(empty)])
    other = tmp_path / "other"
    other.mkdir()
    twin = encode_video([np.zeros((32, 32, 3), np.uint8)] * 2, str(other / os.path.basename(files[0])))
    with pytest.raises(SequenceError, match=r"would both be sequence 'synth-c1'.*rename one"):
        find_videos([files[0], twin])
    with pytest.raises(SequenceError, match=r"no .*synth-c1.det.txt beside it \(its detections.*--detections gt"):
        find_videos([twin], need="det")
    with pytest.raises(SequenceError, match=r"no .*synth-c1.gt.txt beside it \(its ground truth"):
        find_videos([twin], need="gt")
    fake = tmp_path / "fake.mp4"
    fake.write_bytes(b"not a video at all" * 100)
    # FFmpeg's reason ("moov atom not found") where this OpenCV build passes it on
    with pytest.raises(SequenceError, match=r"fake.mp4: (not a video OpenCV can read( \(.+\))?; convert|no frame)"):
        video_sequences(find_videos([str(fake)]), str(tmp_path / "out"), log=lambda _: None)
    assert not os.path.exists(tmp_path / "out" / "videos") or os.listdir(tmp_path / "out" / "videos") == []


def test_a_folder_the_tool_did_not_decode_is_never_replaced(videos, tmp_path):
    _, files = videos
    mine = tmp_path / "videos" / "synth-c1"
    mine.mkdir(parents=True)
    (mine / "keep.txt").write_text("the user's")
    with pytest.raises(SequenceError, match=r"videos/synth-c1 exists and was not decoded by this toolkit.*move it away"):
        video_sequences(files[:1], str(tmp_path), log=lambda _: None)
    assert os.listdir(mine) == ["keep.txt"] and (mine / "keep.txt").read_text() == "the user's"


def test_a_decode_stopped_midway_leaves_nothing_that_looks_decoded(videos, tmp_path, monkeypatch):
    _, files = videos
    written = []

    def imwrite(path, image, params=None):
        written.append(path)
        if len(written) == 5:
            raise KeyboardInterrupt  # Ctrl-C while frame 5 is written
        return real(path, image, params or [])

    real = cv2.imwrite
    monkeypatch.setattr(cv2, "imwrite", imwrite)
    with pytest.raises(KeyboardInterrupt):
        video_sequences(files[:1], str(tmp_path), log=lambda _: None)
    assert os.listdir(tmp_path / "videos") == []
    monkeypatch.setattr(cv2, "imwrite", real)
    (s,) = video_sequences(files[:1], str(tmp_path), log=lambda _: None)
    assert s.length == 12 and sorted(os.listdir(tmp_path / "videos")) == ["synth-c1"]


def _capture(shapes, fps=10.0):
    """A stand-in for cv2.VideoCapture whose stream has frames of `shapes` and states `fps`."""

    class Capture:
        def __init__(self, *_):
            self.shapes = list(shapes)

        def isOpened(self):
            return True

        def get(self, _):
            return fps

        def read(self):
            return (True, np.zeros(self.shapes.pop(0), np.uint8)) if self.shapes else (False, None)

        def release(self):
            pass

    return Capture


@pytest.mark.parametrize("fps", [0.0, float("nan"), 90000.0])
def test_a_video_without_a_usable_frame_rate_is_one_line(tmp_path, fps, monkeypatch):
    path = tmp_path / "cam.mp4"
    path.write_bytes(b"x")
    monkeypatch.setattr(cv2, "VideoCapture", _capture([(48, 64, 3)], fps))
    with pytest.raises(SequenceError, match=r"cam.mp4: the video states no usable frame rate .*ffmpeg -r"):
        video_sequences([str(path)], str(tmp_path / "out"), log=lambda _: None)
    assert not os.path.exists(tmp_path / "out" / "videos")


def test_frames_of_changing_size_are_refused(tmp_path):
    path = tmp_path / "cam.avi"
    import cv2 as cv

    writer = cv.VideoWriter(str(path), cv.VideoWriter_fourcc(*"MJPG"), 10.0, (64, 48))
    for _ in range(3):
        writer.write(np.zeros((48, 64, 3), np.uint8))
    writer.release()
    (s,) = video_sequences([str(path)], str(tmp_path / "out"), log=lambda _: None)
    assert (s.width, s.height, s.length, s.frame_rate) == (64, 48, 3, 10.0)

    import unittest.mock

    capture = _capture([(48, 64, 3), (48, 64, 3), (24, 32, 3)])  # OpenCV hands such frames over as they come
    with unittest.mock.patch.object(cv, "VideoCapture", capture):
        os.utime(path, ns=(0, 0))  # a changed file: decoded again
        with pytest.raises(SequenceError, match=r"cam.avi: frame 3 is 32x24 pixels, the first 64x48; re-encode"):
            video_sequences([str(path)], str(tmp_path / "out"), log=lambda _: None)
    # the earlier decode is still there and whole
    assert sorted(os.listdir(tmp_path / "out" / "videos")) == ["cam"]
    assert len(os.listdir(tmp_path / "out" / "videos" / "cam" / "img1")) == 3


def test_a_fifo_where_the_detections_go_is_named_not_called_missing(videos, tmp_path):
    _, files = videos
    video = encode_video([np.zeros((32, 32, 3), np.uint8)] * 2, str(tmp_path / "cam.mp4"))
    os.mkfifo(tmp_path / "cam.det.txt")
    with pytest.raises(SequenceError, match=r"cam.det.txt is a FIFO \(named pipe\), not a file; put the MOTChallenge"):
        find_videos([video], need="det")
