"""Pictures of tracks (reid/tracking/annotated.py): every frame, each box outlined in its id's colour
where the box is, the id on a patch of that colour, and nothing half-written after a stop."""
from __future__ import annotations

import os

import numpy as np
import pytest

from reid.tracking.annotated import THICKNESS, id_colour, write_frames, write_pictures, write_video
from reid.tracking.mot_files import MOTRows
from reid.tracking.sequences import read_sequence
from tests.tracking.sequence_files import HEIGHT, WIDTH, write_sequence
from tests.tracking.video_files import read_video

cv2 = pytest.importorskip("cv2")

FRAMES = 6


@pytest.fixture
def sequence(tmp_path):
    """A grey sequence (so drawn colours stand out) with two tracks: id 3 in every frame, id 8 in frames 2-4."""
    folder = write_sequence(str(tmp_path / "cam"), length=FRAMES)
    for k in range(1, FRAMES + 1):
        cv2.imwrite(os.path.join(folder, "img1", f"{k:06d}.png"), np.full((HEIGHT, WIDTH, 3), 128, np.uint8))
    s = read_sequence(folder)
    frames = np.r_[np.arange(1, FRAMES + 1), [2, 3, 4]]
    ids = np.r_[np.full(FRAMES, 3), [8, 8, 8]]
    boxes = np.array([[10 + 2 * k, 20, 20, 30] for k in range(FRAMES)] + [[60, 22, 16, 28]] * 3, float)
    return s, MOTRows(frames, ids, boxes, np.ones(len(ids)), np.full(len(ids), -1), np.full(len(ids), -1.0))


def _outline(frame: np.ndarray, box) -> np.ndarray:
    """The pixels of the left and right edges of `box` (MOT left, top, width, height), drawn THICKNESS wide."""
    x, y, w, h = (int(v) for v in box)
    rows = slice(y + 4, y + h - 4)  # away from the corners and the id patch
    return np.concatenate([frame[rows, x:x + THICKNESS], frame[rows, x + w - THICKNESS:x + w]], axis=1).reshape(-1, 3)


def _check(frames, rows):
    assert len(frames) == FRAMES
    for k, frame in enumerate(frames, start=1):
        here = np.flatnonzero(rows.frame == k)
        for i in here:
            colour = np.array(id_colour(int(rows.track_id[i])), float)
            assert np.abs(_outline(frame.astype(float), rows.boxes[i]) - colour).mean() < 40, (k, rows.track_id[i])
            x, y, w, h = (int(v) for v in rows.boxes[i])
            assert np.abs(frame[y + h // 2, x + w // 2].astype(float) - 128).max() < 30  # inside: the picture
            patch = frame[max(y - 14, 0):y, x:x + 12].reshape(-1, 3).astype(float)
            assert np.abs(patch - colour).sum(1).min() < 60 and patch.sum(1).min() < 200  # the colour, and text
        # where no box is, nothing is drawn
        mask = np.ones(frame.shape[:2], bool)
        for i in here:
            x, y, w, h = (int(v) for v in rows.boxes[i])
            mask[max(y - 16, 0):y + h + 2, max(x - 2, 0):x + w + 24] = False
        assert np.abs(frame[mask].astype(float) - 128).mean() < 4


def test_an_annotated_video_has_every_frame_and_each_id_where_its_box_is(sequence, tmp_path):
    s, rows = sequence
    path = write_video(s, rows, str(tmp_path / "out" / "cam.mp4"))
    assert os.listdir(tmp_path / "out") == ["cam.mp4"]
    _check(read_video(path), rows)


def test_annotated_frames_are_the_same_pictures(sequence, tmp_path):
    s, rows = sequence
    written = write_pictures(s, rows, str(tmp_path / "out"), video=False, frames=True)
    assert written == [str(tmp_path / "out" / s.name)]
    names = sorted(os.listdir(written[0]))
    assert names == [f"{k:06d}.jpg" for k in range(1, FRAMES + 1)]
    _check([cv2.imread(os.path.join(written[0], n)) for n in names], rows)


def test_ids_get_distinct_steady_colours():
    colours = [id_colour(i) for i in range(1, 13)]
    assert len(set(colours)) == 12 and id_colour(5) == id_colour(5)
    closest = min(np.abs(np.subtract(a, b)).sum() for i, a in enumerate(colours) for b in colours[i + 1:])
    assert closest > 40


def test_a_write_stopped_midway_leaves_no_picture(sequence, tmp_path, monkeypatch):
    s, rows = sequence
    import reid.tracking.annotated as annotated

    real = annotated.read_frame

    def read_frame(seq, frame):
        if frame == 4:
            raise KeyboardInterrupt
        return real(seq, frame)

    monkeypatch.setattr(annotated, "read_frame", read_frame)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        write_video(s, rows, str(out / "cam.mp4"))
    with pytest.raises(KeyboardInterrupt):
        write_frames(s, rows, str(out / "cam"))
    assert os.listdir(out) == []
