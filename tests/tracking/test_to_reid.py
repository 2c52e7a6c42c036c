"""reid.tracking.to_reid: ground truth -> Market-1501 folders, tracker results -> unlabelled crops."""
import csv
import json
import os
import re

import cv2
import numpy as np
import pytest

from reid.data.datasets import CustomDataset, Market1501, UnlabelledDataset
from reid.tracking.mot_files import read_gt
from reid.tracking.sequences import SequenceError, find_sequences
from reid.tracking.to_reid import TRACKLET_REGEX, CropSettings, clip_boxes, gt_to_reid, tracks_to_crops
from tests.tracking.sequence_files import frame_pixels, write_sequence

SETTINGS = CropSettings(min_height=20, frame_step=1, image_ext=".png", seed=3)


def _gt(ids, frames=(1, 2, 3), extra=""):
    """Boxes of persons `ids` in `frames`: a column each, moving right by a pixel a frame."""
    lines = [f"{f},{i},{5 + 20 * (i - 1) + f},5,15,40,1,1,0.9" for f in frames for i in ids]
    return "\n".join(lines) + "\n" + extra


# rows the default filters drop: another class, consider 0, low visibility, too small
DROPPED = "1,9,1,1,10,40,1,7,1\n1,10,1,1,10,40,0,1,1\n1,11,1,1,10,40,1,1,0.1\n1,12,1,1,10,12,1,1,1\n"


@pytest.fixture
def scenes(tmp_path):
    """A scene of two cameras with global ids 1..4, and a sequence of its own whose id 1 is someone else."""
    root = tmp_path / "seqs"
    write_sequence(str(root / "lobby-c1"), length=3, seed=1, gt=_gt([1, 2, 3, 4], extra=DROPPED),
                   extra={"scene": "lobby", "camera": "1"})
    write_sequence(str(root / "lobby-c2"), length=3, seed=2, gt=_gt([1, 2, 3, 4]), extra={"scene": "lobby", "camera": "2"})
    # person 7, partly outside the image on the left: clipped before cropping
    write_sequence(str(root / "street"), length=3, seed=3, gt=_gt([1, 2]) + "2,7,-6,10,20,40,1,1,1\n",
                   extra={"camera": "3"})
    return find_sequences(str(root))


def _truth(sequences):
    """{(scope, track id, camera, frame): (sequence, clipped box)} of the boxes the filters keep."""
    from reid.tracking.mot_files import read_gt

    truth = {}
    for seq in sequences:
        rows = read_gt(seq.gt_path, seq)
        keep = (rows.cls == 1) & (rows.conf == 1) & (rows.visibility >= 0.3) & (rows.boxes[:, 3] >= 20)
        for f, t, box in zip(rows.frame[keep], rows.track_id[keep], clip_boxes(rows.boxes[keep], 96, 64)):
            scope = "scene:lobby" if seq.scene == "lobby" else f"sequence:{seq.root}"
            truth[(scope, int(t), seq.camera, int(f))] = (seq, box)
    return truth


def test_ground_truth_becomes_a_market_folder_the_loaders_read(tmp_path, scenes):
    out = str(tmp_path / "reid")
    logged = []
    summary = gt_to_reid(scenes, out, SETTINGS, log=logged.append)
    truth = _truth(scenes)
    data = Market1501(root=out)
    items = {"bounding_box_train": data.train, "query": data.query, "bounding_box_test": data.gallery}
    # every crop once, every kept box once
    assert sum(len(v) for v in items.values()) == len(truth) == 4 * 3 * 2 + 2 * 3 + 1
    identities = {d["pid"]: d for d in summary["identities"]}
    assert len(identities) == 7 and {d["split"] for d in identities.values()} == {"train", "test"}
    seen = set()
    for sub, loaded in items.items():
        for path, _, camid in loaded:
            name = os.path.basename(path)
            m = re.fullmatch(r"(\d{4})_c(\d)s1_(\d{6})_00\.png", name)
            pid, cam, frame = int(m.group(1)), int(m.group(2)), int(m.group(3))
            assert os.path.dirname(path).endswith(sub) and camid == cam - 1
            ident = identities[pid]
            assert ident["split"] == ("train" if sub == "bounding_box_train" else "test")
            key = (ident["scope"], ident["track_id"], cam, frame)
            seq, (x0, y0, x1, y1) = truth[key]
            seen.add(key)
            expected = frame_pixels({"lobby-c1": 1, "lobby-c2": 2, "street": 3}[seq.name] * 1000 + frame)[y0:y1, x0:x1]
            np.testing.assert_array_equal(cv2.imread(path), expected)
    assert seen == set(truth)
    # global ids: track 1 of both lobby cameras is one pid; track 1 of the street another
    lobby1 = [d["pid"] for d in identities.values() if d["scope"] == "scene:lobby" and d["track_id"] == 1]
    street1 = [d["pid"] for d in identities.values() if d["scope"].startswith("sequence:") and d["track_id"] == 1]
    assert len(lobby1) == len(street1) == 1 and lobby1 != street1
    # identities disjoint; one query per test identity and camera; train pids as the summary says
    train_pids = {pid for d, pid in [(d, d["pid"]) for d in identities.values()] if d["split"] == "train"}
    assert set(data.train_pid_map) == train_pids
    test_pids = {p for _, p, _ in data.query} | {p for _, p, _ in data.gallery}
    assert not train_pids & test_pids and len(train_pids) + len(test_pids) == 7
    pairs = [(p, c) for _, p, c in data.query]
    assert len(pairs) == len(set(pairs)) == len({(p, c) for _, p, c in data.query + data.gallery})
    assert summary["splits"]["query"] == {"images": len(data.query), "ids": len({p for p, _ in pairs})}
    # the custom lists hold the same items
    custom = CustomDataset(root=out, train_list="train.txt", query_list="query.txt", gallery_list="gallery.txt")
    assert sorted(custom.query) == sorted(data.query) and sorted(custom.gallery) == sorted(data.gallery)
    assert sorted(custom.train) == sorted(data.train)
    assert json.load(open(os.path.join(out, "summary.json"))) == summary
    assert logged[0].startswith(f"wrote {out}: train ")


def test_split_is_seeded_and_the_filters_apply(tmp_path, scenes):
    a = gt_to_reid(scenes, str(tmp_path / "a"), SETTINGS, log=lambda _: None)
    b = gt_to_reid(scenes, str(tmp_path / "b"), SETTINGS, log=lambda _: None)
    assert a["identities"] == b["identities"] and a["splits"] == b["splits"]
    every_other = CropSettings(min_height=20, frame_step=2, image_ext=".png", seed=3)
    c = gt_to_reid(scenes, str(tmp_path / "c"), every_other, log=lambda _: None)
    assert sum(s["images"] for s in c["splits"].values()) == 4 * 2 * 2 + 2 * 2  # frames 1 and 3


def test_errors_are_one_line(tmp_path, scenes):
    os.makedirs(tmp_path / "full")
    (tmp_path / "full" / "x").write_text("")
    with pytest.raises(FileExistsError, match="full exists and is not empty; name a new folder"):
        gt_to_reid(scenes, str(tmp_path / "full"), SETTINGS)
    with pytest.raises(ValueError, match="has 0 identity after the filters"):
        gt_to_reid(scenes, str(tmp_path / "none"), CropSettings(min_height=60), log=lambda _: None)
    assert not os.path.exists(tmp_path / "none")
    with pytest.raises(ValueError, match="train fraction 1.0 must lie in"):
        gt_to_reid(scenes, str(tmp_path / "x"), CropSettings(train_fraction=1.0))
    # two sequences of one scene claiming one camera
    root = tmp_path / "same"
    for k in (1, 2):
        write_sequence(str(root / f"s{k}"), length=3, gt=_gt([1, 2]), extra={"scene": "x", "camera": "1"})
    with pytest.raises(ValueError, match=r"Two crops would both be named .*/same/s1 and .*/same/s2\); sequences of one scene"):
        gt_to_reid(find_sequences(str(root)), str(tmp_path / "y"), SETTINGS)
    bare = write_sequence(str(tmp_path / "nogt" / "s"), length=3)
    with pytest.raises(SequenceError, match=r"nogt/s: no gt/gt.txt \(1 of 1 sequences lack one\); give --tracks DIR"):
        gt_to_reid(find_sequences(bare), str(tmp_path / "z"), SETTINGS)


def test_tracker_results_become_unlabelled_crops_with_tracklets(tmp_path, scenes):
    tracks = tmp_path / "tracks"
    os.makedirs(tracks)
    for seq in scenes:  # the tracker's ids: 10 + track
        lines = [f"{f},{10 + i},{5 + 20 * (i - 1) + f},5,15,40,0.9,-1,-1,-1" for f in (1, 2, 3) for i in (1, 2)]
        (tracks / f"{seq.name}.txt").write_text("\n".join(lines) + "\n")
    out = str(tmp_path / "crops")
    summary = tracks_to_crops(scenes, str(tracks), out, SETTINGS, log=lambda _: None)
    assert summary["crops"] == 3 * 2 * 3 and summary["tracklets"] == 6
    names = sorted(os.listdir(os.path.join(out, "crops")))
    assert names[0] == "lobby-c1_c1_t000011_f000001.png" and len(names) == 18
    x0 = 5 + 1
    np.testing.assert_array_equal(cv2.imread(os.path.join(out, "crops", names[0])), frame_pixels(1001)[5:45, x0:x0 + 15])
    data = UnlabelledDataset(root=out, list_file="crops.txt")
    assert len(data.train) == 18 and {c for _, _, c in data.train} == {0, 1, 2}
    with open(os.path.join(out, "tracklets.csv")) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 18 and rows[0] == {"path": "crops/lobby-c1_c1_t000011_f000001.png", "tracklet": "0",
                                           "sequence": "lobby-c1", "camera": "1", "track_id": "11", "frame": "1"}
    # the tracklet the UDA regex finds in a name is the csv's tracklet
    by_key = {}
    for row in rows:
        key = re.search(TRACKLET_REGEX, os.path.basename(row["path"])).group(1)
        by_key.setdefault(key, set()).add(row["tracklet"])
    assert len(by_key) == 6 and all(len(v) == 1 for v in by_key.values())
    os.remove(tracks / "street.txt")
    with pytest.raises(FileNotFoundError, match=r"tracks/street.txt: no tracker result file for sequence street"):
        tracks_to_crops(scenes, str(tracks), str(tmp_path / "again"), SETTINGS)


def test_clip_boxes_cuts_what_lies_outside_the_image():
    boxes = np.array([[-6, 10, 20, 40], [90.5, 50.2, 20, 30], [3, 4, 5, 6]])
    assert clip_boxes(boxes, 96, 64).tolist() == [[0, 10, 14, 50], [90, 50, 96, 64], [3, 4, 8, 10]]


def test_generated_sequences_convert_to_the_ground_truths_identities(tmp_path):
    """On the synthetic multi-camera scene (global ids): every crop is one kept gt box, of its
    person, camera and frame, and every kept gt box is one crop."""
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    make_sequences(str(tmp_path / "seqs"), SequenceSettings(cameras=2, frames=30, width=320, height=180, seed=3),
                   log=lambda _: None)
    sequences = find_sequences(str(tmp_path / "seqs"))
    settings = CropSettings()
    summary = gt_to_reid(sequences, str(tmp_path / "reid"), settings, log=lambda _: None)
    person = {d["pid"]: d["track_id"] for d in summary["identities"]}
    assert len(set(d["scope"] for d in summary["identities"])) == 1  # one scene: global ids stay global
    crops = set()
    for split in ("bounding_box_train", "query", "bounding_box_test"):
        for name in os.listdir(tmp_path / "reid" / split):
            pid, cam, frame = map(int, re.fullmatch(r"(\d{4})_c(\d+)s1_(\d{6})_00\.jpg", name).groups())
            crops.add((person[pid], cam, frame, split == "query"))
    expected = set()
    for seq in sequences:
        gt = read_gt(seq.gt_path, seq)
        x0, y0 = np.clip(gt.boxes[:, 0], 0, seq.width), np.clip(gt.boxes[:, 1], 0, seq.height)
        x1 = np.clip(gt.boxes[:, 0] + gt.boxes[:, 2], 0, seq.width)
        y1 = np.clip(gt.boxes[:, 1] + gt.boxes[:, 3], 0, seq.height)
        keep = ((gt.cls == 1) & (gt.conf == 1) & (gt.visibility >= settings.min_visibility)
                & ((gt.frame - 1) % settings.frame_step == 0) & (np.ceil(y1) - np.floor(y0) >= settings.min_height)
                & (x1 > x0))
        expected |= {(int(t), seq.camera, int(f)) for t, f in zip(gt.track_id[keep], gt.frame[keep])}
    assert {c[:3] for c in crops} == expected and len(crops) == len(expected)  # each box once, in one split
    test_people = {p for p, _, _, q in crops if q}
    train_people = {person[d["pid"]] for d in summary["identities"] if d["split"] == "train"}
    assert test_people and train_people and not test_people & train_people
