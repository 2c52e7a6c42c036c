"""reid.tracking.mot_files: values read from gt/det/result files, the first bad line named, round trips."""
import os

import cv2
import numpy as np
import pytest

from reid.tracking.mot_files import (MOTFileError, MOTRows, read_detections, read_gt, read_results,
                                     write_detections, write_gt, write_results, write_seqinfo)
from reid.tracking.sequences import read_sequence
from tests.tracking.sequence_files import frame_pixels, write_sequence

GT = """1,1,10,5,20,40,1,1,0.8
1,2,-5,0,30,50.5,0,7,1
2, 1, 11.5, 6, 20, 40, 1, 1, 0.25

3,3,90,60,20,30,1,1,0.0
"""


def _file(tmp_path, text, name="gt.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_read_gt_values(tmp_path):
    rows = read_gt(_file(tmp_path, GT))
    assert len(rows) == 4 and rows.frame.dtype == np.int64 and rows.track_id.dtype == np.int64
    assert rows.frame.tolist() == [1, 1, 2, 3] and rows.track_id.tolist() == [1, 2, 1, 3]
    np.testing.assert_array_equal(rows.boxes, [[10, 5, 20, 40], [-5, 0, 30, 50.5], [11.5, 6, 20, 40], [90, 60, 20, 30]])
    assert rows.conf.tolist() == [1, 0, 1, 1] and rows.cls.tolist() == [1, 7, 1, 1]
    assert rows.visibility.tolist() == [0.8, 1.0, 0.25, 0.0]
    assert rows.in_frame(1).track_id.tolist() == [1, 2] and len(rows.in_frame(9)) == 0
    assert rows.select(np.array([3, 0])).frame.tolist() == [3, 1]
    both = MOTRows.concatenate([rows, rows.select(rows.cls == 7)])
    assert both.cls.tolist() == [1, 7, 1, 1, 7] and both.boxes.shape == (5, 4)


def test_whitespace_separated_and_empty_files(tmp_path):
    rows = read_gt(_file(tmp_path, "1 1 10 5 20 40 1 1 0.8\n2\t4  1 2 3 4 1 1 1\n"))
    assert rows.track_id.tolist() == [1, 4] and rows.boxes[1].tolist() == [1, 2, 3, 4]
    for text in ("", "\n  \n"):
        empty = read_gt(_file(tmp_path, text))
        assert len(empty) == 0 and empty.boxes.shape == (0, 4)


def test_detections_and_results_columns(tmp_path):
    det = read_detections(_file(tmp_path, "1,-1,1,2,3,4,0.9\n2,-1,5,6,7,8,0.5\n", "det.txt"))
    assert det.track_id.tolist() == [-1, -1] and det.conf.tolist() == [0.9, 0.5]
    assert det.cls.tolist() == [-1, -1] and det.visibility.tolist() == [-1, -1]
    det10 = read_detections(_file(tmp_path, "3,-1,1,2,3,4,0.7,-1,-1,-1\n", "det.txt"))
    assert det10.frame.tolist() == [3] and det10.conf.tolist() == [0.7]
    six = read_results(_file(tmp_path, "1,5,1,2,3,4\n", "r.txt"))
    assert six.track_id.tolist() == [5] and six.conf.tolist() == [1.0]


SEQ_ERRORS = [
    ("1,1,10,5,20,40,1,1,0.8\n2,1,10,5,20,40,1\n",
     "2: expected 9 comma-separated values (frame,id,x,y,w,h,consider,class,visibility), found 7; "),
    ("1,1,10,5,20,40,1,1,0.8\n\n1,2,10,abc,20,40,1,1,0.8\n", "3: column 4 (y) is 'abc', not a number; "),
    ("1,1,10,5,20,nan,1,1,0.8\n", "1: column 6 (h) is nan; write a finite number."),
    ("1,1,10,5,20,40,1,1,0.8\n1,2,10,5,20,inf,1,1,0.8\n", "2: column 6 (h) is inf; "),
    ("1,1,10,5,20,40,1,1,0.8\n9,1,10,5,20,40,1,1,0.8\n",
     "2: frame 9 is outside 1..4 (seqLength of sequence s); fix the line or seqinfo.ini."),
    ("0,1,10,5,20,40,1,1,0.8\n", "1: frame 0 is outside 1..4"),
    ("1.5,1,10,5,20,40,1,1,0.8\n", "1: frame 1.5 is not a whole number"),
    ("1,2.5,10,5,20,40,1,1,0.8\n", "1: id 2.5 is not a whole number"),
    ("1,1,10,5,0,40,1,1,0.8\n", "1: box width/height 0/40 must be > 0"),
    ("1,1,10,5,20,40,1,1,0.8\n2,1,96,5,20,40,1,1,0.8\n",
     "2: box x,y,w,h = 96,5,20,40 lies entirely outside the 96x64 image of sequence s; fix or remove the line."),
    ("1,1,-20,5,20,40,1,1,0.8\n", "1: box x,y,w,h = -20,5,20,40 lies entirely outside"),
    ("1,1,10,5,20,40,1,1,1.5\n", "1: visibility 1.5 is outside [0, 1]"),
    ("1,1,10,5,20,40,1,1.5,1\n", "1: class 1.5 is not a whole number"),
    # the first bad line wins, whichever check finds it
    ("1,1,10,5,20,40,1,1,0.8\n2,1,10,5,20,-1,1,1,0.8\n3,1,10,5,20,40,1,1,7\n", "2: box width/height 20/-1"),
]


@pytest.mark.parametrize("text, expected", SEQ_ERRORS)
def test_gt_errors_name_file_and_first_bad_line(tmp_path, text, expected):
    seq = read_sequence(write_sequence(str(tmp_path / "s")))
    path = _file(tmp_path, text)
    with pytest.raises(MOTFileError) as e:
        read_gt(path, seq)
    message = str(e.value)
    assert message.startswith(f"{path}:{expected}"), message
    assert "\n" not in message


def test_boxes_partly_outside_are_kept_and_no_sequence_checks_frames_from_1(tmp_path):
    seq = read_sequence(write_sequence(str(tmp_path / "s")))
    rows = read_gt(_file(tmp_path, "1,1,-10,-10,20,20,1,1,1\n4,2,90,60,50,50,1,1,1\n"), seq)
    assert rows.boxes[:, 0].tolist() == [-10, 90]
    assert read_gt(_file(tmp_path, "900,1,10,5,20,40,1,1,0.8\n")).frame.tolist() == [900]  # no sequence: no limit
    with pytest.raises(MOTFileError, match=r"gt.txt:1: frame 0 is below 1"):
        read_gt(_file(tmp_path, "0,1,10,5,20,40,1,1,0.8\n"))


def test_detection_and_result_errors(tmp_path):
    path = _file(tmp_path, "1,-1,1,2,3,4,0.9\n1,-1,1,2,3\n", "det.txt")
    with pytest.raises(MOTFileError) as e:
        read_detections(path)
    assert str(e.value).startswith(f"{path}:2: expected 7 to 10 comma-separated values "
                                   "(frame,id,x,y,w,h,conf,world_x,world_y,world_z), found 5; ")
    path = _file(tmp_path, "1,1,1,2,3,4,1,-1,-1,-1\n2,1,1,2,3,4,1\n", "r.txt")
    with pytest.raises(MOTFileError, match=r"r.txt:2: 7 values, unlike the 10 of line 1; write every line"):
        read_results(path)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        read_results(str(tmp_path / "missing.txt"))


def test_write_then_read_round_trips(tmp_path):
    rows = read_gt(_file(tmp_path, GT))
    shuffled = rows.select(np.array([3, 2, 1, 0]))
    text = open(write_gt(str(tmp_path / "out" / "gt.txt"), shuffled)).read()
    assert text.splitlines()[0] == "1,1,10.00,5.00,20.00,40.00,1,1,0.8"
    again = read_gt(str(tmp_path / "out" / "gt.txt"))
    for name in ("frame", "track_id", "boxes", "conf", "cls", "visibility"):
        np.testing.assert_allclose(getattr(again, name), getattr(rows, name))
    res = write_results(str(tmp_path / "res.txt"), shuffled)
    assert open(res).read().splitlines()[1] == "1,2,-5.00,0.00,30.00,50.50,0.00,-1,-1,-1"
    np.testing.assert_array_equal(read_results(res).track_id, rows.track_id)
    det = write_detections(str(tmp_path / "det.txt"), shuffled)
    assert open(det).read().splitlines()[-1] == "3,-1,90.00,60.00,20.00,30.00,1.00,-1,-1,-1"
    assert read_detections(det).frame.tolist() == [1, 1, 2, 3]
    write_results(str(tmp_path / "none.txt"), MOTRows.empty())
    assert open(tmp_path / "none.txt").read() == "" and len(read_results(str(tmp_path / "none.txt"))) == 0
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_other_precisions_and_seqinfo_round_trip(tmp_path):
    rows = read_gt(_file(tmp_path, GT)).select(np.array([0, 3]))
    text = open(write_gt(str(tmp_path / "whole.txt"), rows, fmt="%d,%d,%d,%d,%d,%d,%d,%d,%.5f")).read()
    assert text == "1,1,10,5,20,40,1,1,0.80000\n3,3,90,60,20,30,1,1,0.00000\n"
    det = write_detections(str(tmp_path / "det3.txt"), rows, fmt="%d,%d,%.2f,%.2f,%.2f,%.2f,%.3f,%d,%d,%d")
    assert open(det).read().splitlines()[0] == "1,-1,10.00,5.00,20.00,40.00,1.000,-1,-1,-1"
    folder = tmp_path / "s"
    os.makedirs(folder / "img1")
    for i in (1, 2, 3):
        assert cv2.imwrite(str(folder / "img1" / f"{i:06d}.jpg"), frame_pixels(i))
    path = write_seqinfo(str(folder / "seqinfo.ini"), "s", 12.5, 3, 96, 64, camera=2, scene="hall")
    assert open(path).read() == ("[Sequence]\nname=s\nimDir=img1\nframeRate=12.5\nseqLength=3\nimWidth=96\n"
                                 "imHeight=64\nimExt=.jpg\ncamera=2\nscene=hall\n")
    seq = read_sequence(str(folder))
    assert (seq.name, seq.frame_rate, seq.length, seq.width, seq.height, seq.camera, seq.scene) == \
        ("s", 12.5, 3, 96, 64, 2, "hall")
    write_seqinfo(path, "s", 10, 3, 96, 64)  # camera and scene are optional keys
    assert "camera" not in open(path).read() and "scene" not in open(path).read()


def test_values_numpy_refuses_two_boxes_of_one_track_in_a_frame_and_negative_result_ids(tmp_path):
    path = str(tmp_path / "gt.txt")
    with open(path, "w") as f:
        f.write("1,1,1,1,5,5,1,1,1\n1,1_0,1,1,5,5,1,1,1\n")  # Python's float() takes '1_0', numpy does not
    with pytest.raises(MOTFileError, match=r"gt.txt:2: a value is not a plain number"):
        read_gt(path)
    with open(path, "w") as f:
        f.write("1,1,1,1,5,5,1,1,1\n2,1,1,1,5,5,1,1,1\n2,2,1,1,5,5,1,1,1\n2,1,3,3,5,5,1,1,1\n")
    with pytest.raises(MOTFileError, match=r"gt.txt:4: track 1 has a second box in frame 2"):
        read_gt(path)
    results = str(tmp_path / "r.txt")
    with open(results, "w") as f:
        f.write("1,3,1,1,5,5\n2,-1,1,1,5,5\n")
    with pytest.raises(MOTFileError, match=r"r.txt:2: track id -1 is negative"):
        read_results(results)


def test_a_trackers_box_predicted_past_the_image_edge_is_kept(tmp_path):
    """Trackers write their Kalman prediction for a person walking out: the next tool reads it."""
    seq = read_sequence(write_sequence(str(tmp_path / "s"), length=2))
    path = str(tmp_path / "r.txt")
    with open(path, "w") as f:
        f.write("1,1,90,5,20,40\n2,1,100,5,20,40\n")  # frame 2: entirely right of the 96-pixel image
    assert read_results(path, seq).boxes[:, 0].tolist() == [90, 100]
