"""Synthetic multi-camera sequences: files, ground truth, detections, pixels, settings."""
from __future__ import annotations

import configparser
import hashlib
import json
import os
import re

import cv2
import numpy as np
import pytest

from reid.cli.make_sequences import main as make_sequences_main
from reid.data.datasets.synthetic_render import STYLES, render_image, sample_cameras, sample_identity
from reid.tracking.synthetic_sequences import (
    CameraTruth, SequenceSettings, box_visibility, ground_truth, make_sequences, plan_visits, render_frames,
)

TINY = SequenceSettings(cameras=2, frames=40, width=320, height=180)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("seq") / "tiny")
    summary = make_sequences(out, TINY)
    return out, summary


def _gt(out, cam):
    return np.loadtxt(os.path.join(out, f"synth-c{cam}", "gt", "gt.txt"), delimiter=",", ndmin=2)


def _det(out, cam):
    return np.loadtxt(os.path.join(out, f"synth-c{cam}", "det", "det.txt"), delimiter=",", ndmin=2)


def _iou(a, b):
    """IoU of every box in a [N, 4] with every box in b [M, 4] (left, top, width, height)."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, :2] + a[:, None, 2:], b[None, :, :2] + b[None, :, 2:])
    inter = np.clip(hi - lo, 0, None).prod(-1)
    return inter / (a[:, None, 2:].prod(-1) + b[None, :, 2:].prod(-1) - inter)


def _files(folder):
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_layout_and_seqinfo(tiny):
    out, summary = tiny
    assert sorted(os.listdir(out)) == ["sequences.json", "synth-c1", "synth-c2"]
    for cam in (1, 2):
        seq = os.path.join(out, f"synth-c{cam}")
        ini = configparser.ConfigParser()
        ini.read(os.path.join(seq, "seqinfo.ini"))
        info = dict(ini["Sequence"])
        assert info == {"name": f"synth-c{cam}", "imdir": "img1", "framerate": "10", "seqlength": "40",
                        "imwidth": "320", "imheight": "180", "imext": ".jpg", "camera": str(cam), "scene": "synth"}
        images = sorted(os.listdir(os.path.join(seq, "img1")))
        assert images == [f"{k:06d}.jpg" for k in range(1, 41)]
        assert cv2.imread(os.path.join(seq, "img1", images[0])).shape == (180, 320, 3)
        assert _gt(out, cam).shape[1] == 9 and _det(out, cam).shape[1] == 10
        # The bytes as they were written before reid.tracking.mot_files wrote them.
        assert open(os.path.join(seq, "seqinfo.ini"), "rb").read() == (
            f"[Sequence]\nname=synth-c{cam}\nimDir=img1\nframeRate=10\nseqLength=40\nimWidth=320\nimHeight=180\n"
            f"imExt=.jpg\ncamera={cam}\nscene=synth\n").encode()
        for sub, line in (("gt", r"\d+,\d+,-?\d+,-?\d+,\d+,\d+,1,1,[01]\.\d{5}"),
                          ("det", r"\d+,-1,(\d+\.\d\d,){4}0\.\d{3},-1,-1,-1")):
            text = open(os.path.join(seq, sub, f"{sub}.txt"), "rb").read().decode("ascii")
            assert text.endswith("\n") and all(re.fullmatch(line, t) for t in text.split("\n")[:-1]), sub
    with open(os.path.join(out, "sequences.json")) as f:
        assert json.load(f) == json.loads(json.dumps(summary))
    assert summary["settings"]["frames"] == 40


def test_same_seed_same_bytes_other_seed_differs(tiny, tmp_path):
    out, _ = tiny
    make_sequences(str(tmp_path / "again"), TINY)
    assert _files(out) == _files(str(tmp_path / "again"))
    make_sequences(str(tmp_path / "other"), SequenceSettings(**{**TINY.__dict__, "seed": 1}))
    other = _files(str(tmp_path / "other"))
    same = _files(out)
    assert other.keys() == same.keys()
    assert other["synth-c1/gt/gt.txt"] != same["synth-c1/gt/gt.txt"]
    assert other["synth-c1/img1/000001.jpg"] != same["synth-c1/img1/000001.jpg"]


def test_ground_truth_boxes_and_visibility(tiny):
    out, _ = tiny
    for cam in (1, 2):
        gt = _gt(out, cam)
        frame, pid, box, vis = gt[:, 0].astype(int), gt[:, 1].astype(int), gt[:, 2:6], gt[:, 8]
        assert frame.min() >= 1 and frame.max() <= 40 and pid.min() >= 1 and pid.max() <= TINY.identities
        assert (gt[:, 6] == 1).all() and (gt[:, 7] == 1).all()  # consider, pedestrian
        assert (box[:, 2:] > 0).all() and (box == np.round(box)).all()
        # at least partly inside the frame
        assert ((box[:, 0] < 320) & (box[:, 0] + box[:, 2] > 0) & (box[:, 1] < 180) & (box[:, 1] + box[:, 3] > 0)).all()
        assert ((vis >= 0) & (vis <= 1)).all() and (vis < 1).any() and (vis == 1).any()
        assert len(set(zip(frame.tolist(), pid.tolist()))) == len(gt)  # one box per person and frame
        # Visibility recomputed on a pixel raster: nearer (lower bottom; ties: higher id) drawn later.
        checked = 0
        for f in np.unique(frame):
            rows = np.flatnonzero(frame == f)
            bottom = box[rows, 1] + box[rows, 3]
            for r in rows:
                x, y, w, h = box[r].astype(int)
                canvas = np.zeros((h, w), bool)
                xs, ys = np.arange(x, x + w), np.arange(y, y + h)
                canvas |= ~((xs >= 0) & (xs < 320))[None, :] | ~((ys >= 0) & (ys < 180))[:, None]
                for o in rows:
                    b_o = y + h  # this box's bottom
                    nearer = bottom[rows == o][0] > b_o or (bottom[rows == o][0] == b_o and pid[o] > pid[r])
                    if o != r and nearer:
                        ox, oy, ow, oh = box[o].astype(int)
                        canvas[max(oy - y, 0):max(oy + oh - y, 0), max(ox - x, 0):max(ox + ow - x, 0)] = True
                assert vis[r] == pytest.approx(1 - canvas.mean(), abs=1e-5), (cam, f, pid[r])
                checked += 1
        assert checked == len(gt)


def test_box_visibility_cases():
    # a box half outside the left border, a box covering the right half of another, a hidden one
    assert box_visibility([[-10, 0, 20, 10]], 100, 100) == pytest.approx([0.5])
    assert box_visibility([[0, 0, 20, 10], [10, 0, 30, 30]], 100, 100) == pytest.approx([0.5, 1.0])
    assert box_visibility([[10, 10, 5, 5], [0, 0, 50, 50]], 100, 100) == pytest.approx([0.0, 1.0])
    assert box_visibility([[200, 0, 10, 10]], 100, 100) == pytest.approx([0.0])
    # two occluders overlapping each other: their union counts once
    assert box_visibility([[0, 0, 10, 10], [0, 0, 5, 10], [2, 0, 5, 10]], 100, 100)[0] == pytest.approx(0.3)


def test_global_ids_reentry_and_crossings(tiny):
    out, summary = tiny
    ids = [set(_gt(out, c)[:, 1].astype(int)) for c in (1, 2)]
    assert ids[0] & ids[1], "some person appears in both cameras"
    assert summary["ids_in_several_cameras"] == sorted(ids[0] & ids[1])
    reentries = crossings = 0
    for cam in (1, 2):
        gt = _gt(out, cam)
        for p in np.unique(gt[:, 1]):
            frames = np.sort(gt[gt[:, 1] == p, 0])
            reentries += int((np.diff(frames) > 1).any())  # left the view and came back
        for f in np.unique(gt[:, 0]):
            b = gt[gt[:, 0] == f, 2:6]
            iou = _iou(b, b)
            crossings += int((np.triu(iou, 1) > 0).any())
    assert reentries >= 1 and crossings >= 1
    assert any(s["reentering_ids"] for s in summary["sequences"].values())


def test_detections_noisy_but_near_ground_truth(tiny):
    out, summary = tiny
    found = total = 0
    for cam in (1, 2):
        gt, det = _gt(out, cam), _det(out, cam)
        assert (det[:, 1] == -1).all() and ((det[:, 6] > 0) & (det[:, 6] <= 1)).all()
        assert (det[:, 2] >= 0).all() and (det[:, 2] + det[:, 4] <= 320 + 1e-6).all()
        for f in np.unique(gt[:, 0]):
            g = gt[(gt[:, 0] == f) & (gt[:, 8] > 0.5), 2:6]
            d = det[det[:, 0] == f, 2:6]
            if len(g):
                total += len(g)
                found += int((_iou(g, d).max(1) > 0.5).sum()) if len(d) else 0
        assert summary["sequences"][f"synth-c{cam}"]["false_positives"] > 0  # the default asks for some
    assert 0.7 < found / total < 1.0  # misses exist, most visible people are detected


def test_clean_detections_equal_ground_truth_and_false_positives_on_request(tmp_path):
    s = SequenceSettings(frames=20, width=320, height=180, miss_rate=0.0, false_positives=0.0, jitter=0.0)
    make_sequences(str(tmp_path / "clean"), s)
    gt, det = _gt(str(tmp_path / "clean"), 1), _det(str(tmp_path / "clean"), 1)
    full = gt[gt[:, 8] == 1]
    for row in full:
        d = det[det[:, 0] == row[0], 2:6]
        assert np.abs(d - row[2:6]).sum(1).min() < 0.01  # the box itself
    noisy = SequenceSettings(frames=20, width=320, height=180, miss_rate=0.0, false_positives=3.0, jitter=0.0)
    summary = make_sequences(str(tmp_path / "fp"), noisy)
    det_fp = _det(str(tmp_path / "fp"), 1)
    assert len(det_fp) > len(det) and summary["sequences"]["synth-c1"]["false_positives"] > 20


def test_people_differ_from_the_background(tiny):
    out, _ = tiny
    for cam in (1, 2):
        empty = CameraTruth(cam, *(np.zeros(0, np.int64) for _ in range(2)), np.zeros((0, 4), np.int64),
                            np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool), np.zeros(0, np.int64))
        backgrounds = {}
        render_frames(TINY, empty, {}, lambda k, img: backgrounds.__setitem__(k, img.astype(np.float32)))
        gt = _gt(out, cam)
        full = gt[(gt[:, 8] == 1) & (gt[:, 2] >= 0) & (gt[:, 3] >= 0) & (gt[:, 2] + gt[:, 4] <= 320)
                  & (gt[:, 3] + gt[:, 5] <= 180)]
        assert len(full) > 10
        for f, _, x, y, w, h in full[:, :6].astype(int):
            frame = cv2.imread(os.path.join(out, f"synth-c{cam}", "img1", f"{f:06d}.jpg"))[..., ::-1].astype(np.float32)
            changed = np.abs(frame - backgrounds[f]).max(-1) > 25  # JPEG's error on noise stays below
            assert changed[y:y + h, x:x + w].mean() > 0.08, (cam, f, x, y)  # a person is drawn there
            elsewhere = np.ones((180, 320), bool)
            for ox, oy, ow, oh in gt[gt[:, 0] == f, 2:6].astype(int):
                elsewhere[max(oy, 0):max(oy + oh, 0), max(ox, 0):max(ox + ow, 0)] = False
            assert changed[elsewhere].mean() < 0.01  # and nothing outside the people's boxes


def test_plan_gives_every_camera_people_near_the_target_density():
    s = SequenceSettings(cameras=3, identities=30, frames=300, people_per_frame=6)
    truths = ground_truth(s, plan_visits(s))
    for t in truths:
        assert 3 < len(t.frame) / s.frames < 9


@pytest.mark.parametrize("bad, words", [
    (dict(cameras=0), "cameras 0"), (dict(cameras=9), "cameras 9"), (dict(frames=0), "frames 0"),
    (dict(width=10), "--size WxH"), (dict(miss_rate=1.0), "miss_rate 1.0"), (dict(jitter=-1.0), "jitter -1.0"),
    (dict(false_positives=float("nan")), "false_positives nan"), (dict(people_per_frame=50.0), "--identities"),
    (dict(scene="a/b"), "scene 'a/b'"), (dict(style="nope"), "style 'nope'"), (dict(frames=2.5), "frames 2.5"),
])
def test_bad_settings_are_one_line_errors(bad, words):
    with pytest.raises(ValueError, match=words.replace(".", r"\.").replace("(", r"\(")) as e:
        SequenceSettings(**bad).check()
    assert "\n" not in str(e.value)


def test_the_tools_defaults_are_the_librarys():
    from reid.cli.make_sequences import build_parser

    args = build_parser().parse_args(["--output", "x"])
    given = {k: getattr(args, k) for k in SequenceSettings().__dict__ if hasattr(args, k)}
    given["width"], given["height"] = args.size
    assert len(given) >= 12 and given == {k: v for k, v in SequenceSettings().__dict__.items() if k in given}


def test_tool_reports_bad_values_and_existing_folders(tmp_path, capsys):
    assert make_sequences_main(["--output", str(tmp_path), "--cameras", "9"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cameras 9" in err and "--cameras" in err
    args = ["--output", str(tmp_path), "--frames", "3", "--size", "128x96", "--quiet"]
    assert make_sequences_main(args) == 0
    assert make_sequences_main(args) == 1
    assert "--overwrite" in capsys.readouterr().err
    assert make_sequences_main(args + ["--overwrite"]) == 0
    with pytest.raises(SystemExit):
        make_sequences_main(["--output", str(tmp_path), "--size", "big"])
    assert "WIDTHxHEIGHT" in capsys.readouterr().err


def test_the_docs_command_runs_as_written(tmp_path):
    from tests.cli.test_docs_examples import doc_command

    argv = doc_command("tracking.md", "make-sequences")
    assert argv[:2] == ["python", "tools/make_sequences.py"]
    argv = argv[2:]
    argv[argv.index("--output") + 1] = str(tmp_path / "synth_mot")
    assert make_sequences_main(argv + ["--quiet"]) == 0
    assert sorted(os.listdir(tmp_path / "synth_mot")) == ["sequences.json", "synth-c1", "synth-c2"]


def test_renderer_crops_unchanged():
    """render_image draws what RENDER_VERSION 4 drew (the demo's dataset stays byte-identical):
    this digest was taken before the renderer gained draw_person/apply_camera_look."""
    h = hashlib.sha256()
    for style in ("demo", "shift"):
        cams = sample_cameras(0, 3, STYLES[style])
        for pid in range(8):
            ident = sample_identity(np.random.default_rng([0, 1, pid]), STYLES[style])
            for c in range(3):
                h.update(render_image(ident, cams[c], np.random.default_rng([0, 4, pid, c]), (128, 64)).tobytes())
    assert h.hexdigest() == "5cefdbdd01d0cd0b75869af1e9ef1517ffb3b754615b9d2f8c0c3dbb7eadc677"


def test_the_style_option_draws_the_scene_in_another_domain_and_records_it(tmp_path):
    """--style shift: the same people and tracks (ground truth unchanged), drawn in another domain."""
    outs = {}
    for style in ("demo", "shift"):
        out = tmp_path / style
        argv = ["--output", str(out), "--cameras", "1", "--frames", "3", "--size", "320x180", "--quiet"]
        assert make_sequences_main(argv + (["--style", style] if style != "demo" else [])) == 0
        assert json.load(open(out / "sequences.json"))["settings"]["style"] == style
        outs[style] = out / "synth-c1"
    assert (outs["demo"] / "gt" / "gt.txt").read_text() == (outs["shift"] / "gt" / "gt.txt").read_text()
    demo, shift = (cv2.imread(str(o / "img1" / "000001.jpg")) for o in (outs["demo"], outs["shift"]))
    assert demo.shape == shift.shape and np.abs(demo.astype(int) - shift.astype(int)).mean() > 10
