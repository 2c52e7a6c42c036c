"""Ingest (reid/store/ingest*.py, tools/ingest.py): tracks, crop folders and galleries into a store;
idempotent, one transaction per batch, a second model adding features only, kill -9 losing nothing."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

pytest.importorskip("sqlalchemy")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
from sqlalchemy import text  # noqa: E402

from reid.cli import ingest as cli  # noqa: E402
from reid.search import Gallery, save_gallery  # noqa: E402
from reid.store.ingest import ingest, register_appearance_model, source_key  # noqa: E402
from reid.store.ingest_images import CropFolderSource, GallerySource, NamePattern  # noqa: E402
from reid.store.ingest_tracks import TrackSource, default_track_name  # noqa: E402
from reid.store.store import Store  # noqa: E402
from reid.store.times import parse_time  # noqa: E402
from reid.tracking.appearance import AppearanceModel  # noqa: E402
from reid.tracking.cross_camera import read_camera_tracks  # noqa: E402
from reid.tracking.sequences import find_sequences  # noqa: E402
from tests.tracking.sequence_files import write_sequence  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
T0 = 1764338701.25  # 2025-11-28T14:05:01.25Z


def fake_model(seed: int = 0, dim: int = 12) -> AppearanceModel:
    """A model without torch: each RGB crop's 2x2 colour thumbnail through a fixed random projection."""
    projection = np.random.default_rng(seed).normal(size=(12, dim)).astype(np.float32)

    def features(crops):
        thumbs = np.stack([cv2.resize(c, (2, 2), interpolation=cv2.INTER_AREA).reshape(-1) for c in crops])
        return thumbs.astype(np.float32) / 255.0 @ projection

    return AppearanceModel(f"fake{seed}", (16, 8), dim, {"weights_sha256": f"fake-{seed}"}, features)


# Three people in camera 1, two in camera 2 (boxes inside the 96x64 frames; one partly off the edge).
GT1 = "".join(f"{f},{i},{4 + 20 * i},{5},{14},{30},1,1,1\n" for f in range(1, 7) for i in (1, 2, 3))
GT2 = "".join(f"{f},{i},{10 + 30 * i},{20},{16},{40},1,1,1\n" for f in range(2, 6) for i in (1, 2))
GT2 += "3,9,90,10,20,20,1,1,1\n"


@pytest.fixture
def sequences(tmp_path):
    root = tmp_path / "seqs"
    write_sequence(str(root / "cam1"), length=6, gt=GT1, extra={"camera": "1"}, seed=1)
    write_sequence(str(root / "cam2"), length=6, gt=GT2, extra={"camera": "2"}, seed=2)
    return str(root)


def table_counts(store: Store) -> dict:
    counts = store.counts()
    with store.session() as s:
        counts["tracklet_features"] = s.execute(text("select count(*) from tracklet_features")).scalar()
    return counts


def test_times_are_read_in_every_way_people_write_them():
    assert parse_time("1764338701.25") == T0
    assert parse_time("2025-11-28T14:05:01.25Z") == T0
    assert parse_time("2025-11-28T14:05:01.25") == T0  # no zone: UTC
    assert parse_time("2025-11-28T15:05:01.25+01:00") == T0
    assert parse_time("20251128T140501.250Z") == T0
    for bad in ("yesterday", "nan", "20251328T140501Z"):
        with pytest.raises(ValueError, match="is not a"):
            parse_time(bad, "--start-time")


def test_name_patterns_give_camera_and_time():
    pattern = NamePattern()
    assert pattern.match(["a/c3_1764338701.25_x.jpg", "c12_20251128T140501.250Z.png", "img_001.jpg"]) == [
        (3, T0), (12, T0), None]
    custom = NamePattern(r"cam(?P<camera>\d+)-(?P<time>[\d.]+)\.jpg")
    assert custom.match(["cam2-5.5.jpg"]) == [(2, 5.5)]
    with pytest.raises(ValueError, match="no named group 'time'"):
        NamePattern(r"c(?P<camera>\d+)")
    with pytest.raises(ValueError, match="is not a regular expression"):
        NamePattern(r"c(?P<camera>\d+")


def test_long_keys_stay_unique_and_short_enough():
    a, b = source_key("crop", "x" * 600, 1), source_key("crop", "x" * 600, 2)
    assert a != b and len(a) <= 500 and source_key("crop", "x" * 600, 1) == a


def test_tracks_become_tracklets_of_their_camera_and_time_and_twice_add_nothing(tmp_path, sequences):
    seqs = find_sequences(sequences)
    store = Store(str(tmp_path / "store"))
    model = fake_model()
    info, _ = register_appearance_model(store, "fake", model, threshold=0.99)
    assert info.threshold == 0.99 and info.identity == {"weights_sha256": "fake-0"}
    source = TrackSource(seqs, read_camera_tracks(seqs, "gt"), model, default_track_name("gt", sequences),
                         start_time=T0, crops_per_tracklet=4)
    seen = []
    count = ingest(store, "fake", source, batch_size=2, progress=lambda done, total: seen.append((done, total)))
    assert (count.tracklets, count.sightings, count.skipped_tracklets) == (6, 4 * 3 + 4 * 2 + 1, 0)
    assert seen[0] == (0, 6) and seen[-1] == (6, 6) and len(seen) == 4  # 3 batches of 2
    with store.session() as s:
        rows = s.execute(text(
            "select t.source, t.camera_id, s.time, s.frame, s.w from sightings s join tracklets t "
            "on t.id = s.tracklet_id order by t.source, s.frame")).all()
    by_key = {}
    for key, camera, when, frame, w in rows:
        by_key.setdefault(key, []).append((camera, when, frame, w))
    assert sorted(by_key) == sorted(f"track:gt/seqs:cam{c}:{i}" for c, ids in ((1, (1, 2, 3)), (2, (1, 2, 3)))
                                    for i in ids)
    camera, when, frame, w = by_key["track:gt/seqs:cam2:1"][0]
    assert camera == 2 and frame == 2 and when == pytest.approx(T0 + 0.1) and w == 16  # frame rate 10
    # the box partly off the 96-pixel edge is kept with its own size; its crop is the part inside
    assert by_key["track:gt/seqs:cam2:3"] == [(2, pytest.approx(T0 + 0.2), 3, 20.0)]
    assert all(len(v) <= 4 for v in by_key.values())
    for sid, sighting in store.sightings(range(1, 100)).items():
        assert os.path.isfile(store.crops.path(sighting["crop"]))
    before = table_counts(store)
    again = ingest(store, "fake", TrackSource(seqs, read_camera_tracks(seqs, "gt"), model, "gt/seqs",
                                              start_time=T0, crops_per_tracklet=4))
    assert (again.tracklets, again.sightings, again.features, again.skipped_tracklets) == (0, 0, 0, 6)
    assert again.changed_tracklets == 0 and table_counts(store) == before
    # the same names with other times (a tracker run again, another clock): skipped, but counted as changed
    other = ingest(store, "fake", TrackSource(seqs, read_camera_tracks(seqs, "gt"), model, "gt/seqs",
                                              start_time=T0 + 5, crops_per_tracklet=4))
    assert (other.tracklets, other.skipped_tracklets, other.changed_tracklets) == (0, 6, 6)
    assert other.changed_example.startswith("track:gt/seqs:cam") and table_counts(store) == before


def test_a_results_folder_is_read_as_the_tracking_tools_write_it(tmp_path, sequences):
    results = tmp_path / "links" / "tracks"
    results.mkdir(parents=True)
    (results / "cam1.txt").write_text("1,7,4,5,14,30,0.9\n2,7,5,5,14,30,0.8\n")
    (results / "cam2.txt").write_text("1,7,40,20,16,40,0.9\n")
    seqs = find_sequences(sequences)
    store = Store(str(tmp_path / "store"))
    model = fake_model()
    register_appearance_model(store, "fake", model)
    name = default_track_name(str(results), sequences)
    count = ingest(store, "fake", TrackSource(seqs, read_camera_tracks(seqs, str(results)), model, name))
    assert name == "links/tracks" and count.tracklets == 2 and count.sightings == 3 and count.linked == 0
    sources = {t["source"] for i in (1, 2) for t in store.identity(i)["tracklets"]}
    assert sources == {"track:links/tracks:cam1:7", "track:links/tracks:cam2:7"}


def write_crops(folder, names, size=(24, 12)):
    os.makedirs(folder, exist_ok=True)
    for n, name in enumerate(names):
        image = np.random.default_rng(n).integers(0, 256, (*size, 3), dtype=np.uint8)
        assert cv2.imwrite(os.path.join(folder, name), image)
    return [os.path.join(folder, name) for name in names]


def test_a_crop_folder_gives_one_tracklet_per_crop_and_a_second_model_adds_features_only(tmp_path):
    folder = str(tmp_path / "lobby")
    write_crops(folder, ["c1_1764338701.25_a.jpg", "c2_20251128T140511.250Z_b.png"])
    write_crops(os.path.join(folder, "more"), ["c1_1764338702_c.jpg"])
    store = Store(str(tmp_path / "store"))
    for seed in (0, 1):
        register_appearance_model(store, f"fake{seed}", fake_model(seed))
    count = ingest(store, "fake0", CropFolderSource(folder, fake_model(0)))
    assert (count.tracklets, count.sightings, count.features) == (3, 3, 3)
    hits = store.search("fake0", np.ones(12, np.float32), k=10)
    assert sorted((h["camera"], h["time"], tuple(h["box"])) for h in hits) == [
        (1, T0, (0, 0, 12, 24)), (1, T0 + 0.75, (0, 0, 12, 24)), (2, T0 + 10, (0, 0, 12, 24))]
    jpeg = [h for h in hits if h["time"] == T0][0]
    with open(os.path.join(folder, "c1_1764338701.25_a.jpg"), "rb") as f:  # a JPEG is kept as it is
        assert store.crops.read(jpeg["crop"]) == f.read()
    before = table_counts(store)
    second = ingest(store, "fake1", CropFolderSource(folder, fake_model(1)))
    assert (second.tracklets, second.sightings, second.features, second.skipped_tracklets) == (0, 0, 3, 3)
    after = table_counts(store)
    assert after == dict(before, features=6, tracklet_features=6)
    assert len(store.search("fake1", np.ones(12, np.float32), k=10)) == 3
    third = ingest(store, "fake1", CropFolderSource(folder, fake_model(1)))
    assert (third.features, third.skipped_tracklets) == (0, 3) and table_counts(store) == after


def test_bad_crop_names_fail_before_anything_is_written_and_a_bad_image_after_the_batches_before_it(tmp_path):
    folder = str(tmp_path / "crops")
    write_crops(folder, ["c1_10_a.jpg", "photo.jpg"])
    store = Store(str(tmp_path / "store"))
    register_appearance_model(store, "fake", fake_model())
    with pytest.raises(ValueError, match=r"photo\.jpg: the name does not say camera and time \(1 of 2"):
        ingest(store, "fake", CropFolderSource(folder, fake_model()))
    assert store.counts()["tracklets"] == 0
    os.remove(os.path.join(folder, "photo.jpg"))
    with open(os.path.join(folder, "c1_20_b.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
    write_crops(folder, ["c1_30_c.jpg"])
    with pytest.raises(OSError, match=r"--crops: image .*c1_20_b\.jpg: .*run the same command again"):
        ingest(store, "fake", CropFolderSource(folder, fake_model()), batch_size=1)
    assert store.counts()["tracklets"] == 1  # the batch before it, committed
    os.remove(os.path.join(folder, "c1_20_b.jpg"))
    count = ingest(store, "fake", CropFolderSource(folder, fake_model()), batch_size=1)
    assert (count.tracklets, count.skipped_tracklets) == (1, 1)


def make_gallery(tmp_path, n=6, camids=True, dim=12):
    paths = write_crops(str(tmp_path / "images"), [f"c9_{100 + k}_{k}.jpg" if k % 2 else f"img{k}.jpg"
                                                   for k in range(n)])
    feats = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    gallery = Gallery(feats, paths, camids=np.arange(n) % 3 + 1 if camids else None,
                      meta={"weights_sha256": "gallery-model", "input_size": "24x12"})
    return save_gallery(gallery, str(tmp_path / "gallery.npz"))


def test_a_gallery_keeps_its_features_cameras_and_names(tmp_path):
    from reid.search import load_gallery

    path = make_gallery(tmp_path)
    gallery = load_gallery(path)
    store = Store(str(tmp_path / "store"))
    store.register_model("g", gallery.meta, gallery.dim)
    count = ingest(store, "g", GallerySource(gallery, path, start_time=50.0))
    assert (count.tracklets, count.sightings) == (6, 6)
    for k in range(6):
        hit = store.search("g", gallery.feats[k], k=1)[0]
        assert hit["score"] == pytest.approx(1.0, abs=1e-5)
        assert hit["camera"] == k % 3 + 1  # the gallery's camids, not the name's c9
        assert hit["time"] == (100 + k if k % 2 else 50.0)
    assert ingest(store, "g", GallerySource(gallery, path)).skipped_tracklets == 6


def test_gallery_mistakes_are_one_line_naming_the_file(tmp_path, capsys):
    store_dir = str(tmp_path / "store")
    path = make_gallery(tmp_path, camids=False)
    assert cli.main(["--store", store_dir, "--gallery", path, "--model-name", "g"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --gallery {path} records no cameras (camids)") and "\n" not in err
    path = make_gallery(tmp_path)
    os.remove(str(tmp_path / "images" / "img4.jpg"))
    assert cli.main(["--store", store_dir, "--gallery", path, "--model-name", "g", "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "img4.jpg" in err and err.startswith("error: --gallery") and "\n" not in err
    assert not os.path.exists(store_dir)  # the refused input left no empty store behind
    with pytest.raises(SystemExit):
        cli.main(["--store", store_dir, "--gallery", path])
    assert "--gallery needs --model-name" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--store", store_dir, "--tracks", "gt", "--run", "r"])
    assert "--tracks needs the sequences" in capsys.readouterr().err


def test_the_tool_ingests_a_gallery_and_says_what_it_did(tmp_path, capsys):
    path = make_gallery(tmp_path)
    argv = ["--store", str(tmp_path / "store"), "--gallery", path, "--model-name", "g", "--threshold", "0.5",
            "--quiet", "--batch-size", "4"]
    assert cli.main(argv) == 0
    # the last line (a log line may come first when the "reid" logger prints to stdout: its rows are not unit length)
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith(
        "ingested 6 tracklets (6 sightings, 6 features) under model 'g'; skipped 0 already stored; linked ")
    assert cli.main(argv) == 0
    out = capsys.readouterr()
    assert "ingested 0 tracklets (0 sightings, 0 features) under model 'g'; skipped 6 already stored" in out.out
    assert "warning" not in out.err
    # images whose names give no time take --start-time: another value is another input under the same names
    assert cli.main(argv + ["--start-time", "2026-11-28T14:00:00Z"]) == 0
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("warning: 3 of the tracklets skipped are stored under the same keys with another start "
                          "time (e.g. 'gallery:") and "--source-name" in err
    store = Store(str(tmp_path / "store"))
    assert store.model("g").threshold == 0.5
    store.close()
    # bad input for a store that exists: refused, and the store stays whole
    assert cli.main(["--store", str(tmp_path / "store"), "--gallery", str(tmp_path / "none.npz"), "--model-name",
                     "g", "--quiet"]) == 1
    assert "none.npz" in capsys.readouterr().err
    assert Store(str(tmp_path / "store")).counts()["sightings"] == 6



# ---------------------------------------------------------------------------- spans, ranges, the tool's rules

def same_model(dim: int = 12) -> AppearanceModel:
    """A model that sees everyone alike (every feature the same): whatever the rules allow is linked."""
    return AppearanceModel("same", (16, 8), dim, {"weights_sha256": "same"},
                           lambda crops: np.ones((len(crops), dim), np.float32))


def test_overlapping_tracks_of_one_camera_stay_apart_though_their_chosen_crops_do_not_overlap(tmp_path):
    # camera 1: track 1 on frames 1..20, track 2 on 18..30 (10 fps); two crops each: frames 1, 11 and 18, 25
    gt = "".join(f"{f},1,4,5,14,30,1,1,1\n" for f in range(1, 21))
    gt += "".join(f"{f},2,60,5,14,30,1,1,1\n" for f in range(18, 31))
    write_sequence(str(tmp_path / "seqs" / "cam1"), length=30, gt=gt, extra={"camera": "1"}, seed=1)
    seqs = find_sequences(str(tmp_path / "seqs"))
    store = Store(str(tmp_path / "store"))
    register_appearance_model(store, "same", same_model(), threshold=0.5)
    count = ingest(store, "same", TrackSource(seqs, read_camera_tracks(seqs, "gt"), same_model(), "gt/seqs",
                                              start_time=T0, crops_per_tracklet=2))
    with store.session() as s:
        frames = dict(s.execute(text("select t.source, group_concat(s.frame) from sightings s join tracklets t "
                                     "on t.id = s.tracklet_id group by t.source")).all())
        spans = {k: (a, b) for k, a, b in s.execute(text('select source, start, "end" from tracklets')).all()}
        identities = {k for (k,) in s.execute(text("select identity_id from tracklets")).all()}
    assert frames == {"track:gt/seqs:cam1:1": "1,11", "track:gt/seqs:cam1:2": "18,25"}  # crops 0..1 s, 1.7..2.4 s
    # the tracks' spans: frames 1..20 and 18..30 (not 1..11 and 18..25)
    assert spans == {"track:gt/seqs:cam1:1": (T0, pytest.approx(T0 + 1.9, abs=1e-6)),
                     "track:gt/seqs:cam1:2": (pytest.approx(T0 + 1.7, abs=1e-6), pytest.approx(T0 + 2.9, abs=1e-6))}
    assert count.linked == 0 and len(identities) == 2


def _one(camera=1, frame=1, name="", **span):
    from reid.store.records import NewSighting, NewTracklet

    return NewTracklet("trk", camera, [NewSighting("trk:1", T0 + 1, (0, 0, 4, 8), b"", np.ones(12), frame)],
                       camera_name=name, **span)


def test_a_given_span_must_hold_every_sighting():
    assert (_one(start_time=T0, end_time=T0 + 2).check().start, _one(end_time=T0 + 2).end) == (T0, T0 + 2)
    assert (_one(end_time=T0 + 2).start, _one().end) == (T0 + 1, T0 + 1)  # the sightings' where not given
    for bad, message in [(_one(start_time=T0 + 1.5), r"^tracklet 'trk': start_time .* contains every sighting"),
                         (_one(end_time=T0), r"^tracklet 'trk': end_time .* contains every sighting"),
                         (_one(end_time=float("nan")), r"^tracklet 'trk': end_time nan "),
                         (_one(start_time=float("-inf")), r"^tracklet 'trk': start_time -inf ")]:
        with pytest.raises(ValueError, match=message):
            bad.check()


def test_values_postgresql_refuses_are_refused_in_one_line(tmp_path):
    one = _one
    for bad, message in [(one(camera=2 ** 31), r"^tracklet 'trk': camera 2147483648 is not in 0\.\.2147483647; number"),
                         (one(camera=-1), r"^tracklet 'trk': camera -1 is not in"),
                         (one(name="x" * 201), r"^tracklet 'trk': camera name 'x+'\.\.\. has 201 characters; .* at "
                                               r"most 200\.$"),
                         (one(frame=2 ** 31), r"^tracklet 'trk': sighting 'trk:1' has frame 2147483648, not in "
                                              r"-2147483648\.\.2147483647; number the frames"),
                         (one(frame=-2 ** 31 - 1), r"has frame -2147483649, not in")]:
        with pytest.raises(ValueError, match=message) as e:
            bad.check()
        assert "\n" not in str(e.value)
    assert one(camera=2 ** 31 - 1, frame=-2 ** 31, name="x" * 200).check()
    store = Store(str(tmp_path / "store"))
    store.register_model("m", {"weights_sha256": "m"}, 12)
    with pytest.raises(ValueError, match="camera 2147483648"):
        store.add_tracklets("m", [one(camera=2 ** 31)])
    assert store.counts()["tracklets"] == 0
    # in names, before anything is written
    with pytest.raises(ValueError, match=r"^c99999999999_10\.jpg: camera 99999999999 \(--name-pattern\) is not in "
                                         r"0\.\.2147483647; rename the file or change the pattern\.$"):
        NamePattern().match(["c99999999999_10.jpg"])
    with pytest.raises(ValueError, match=r"^cam-3-10\.jpg: camera -3 "):
        NamePattern(r"cam(?P<camera>-?\d+)-(?P<time>\d+)").match(["cam-3-10.jpg"])
    from reid.search import load_gallery

    gallery = load_gallery(make_gallery(tmp_path))
    gallery.camids[2] = 2 ** 31
    with pytest.raises(ValueError, match=r"img2\.jpg has camera 2147483648, not in 0\.\.2147483647 \(1 images\)"):
        GallerySource(gallery, "g.npz").plan()


@pytest.fixture
def tool_model(monkeypatch):
    """tools/ingest.py's model is :func:`same_model` (--run is not read), calibrated at cosine similarity 0.42
    at any --far (a model's thresholds.json)."""
    import reid.store.ingest as store_ingest
    import reid.tracking.appearance as appearance

    monkeypatch.setattr(appearance, "load_appearance_models", lambda **_: [same_model()])

    def calibrated(model, far, threshold=None):
        return (threshold, "given (--threshold)") if threshold is not None else (0.42, f"thresholds.json; FAR {far:g}")

    monkeypatch.setattr(store_ingest, "model_threshold", calibrated)


def _crops_10_s_apart(tmp_path):
    folder = str(tmp_path / "crops")
    write_crops(folder, [f"c1_{T0}_a.jpg", f"c2_{T0 + 10}_b.jpg"])
    return folder


def _tool_args(store_dir, folder, *more):
    return ["--store", store_dir, "--crops", folder, "--run", "output/none", *more]


def test_a_recorded_threshold_stays_unless_the_tool_is_told_to_replace_it(tmp_path, capsys, tool_model):
    folder = _crops_10_s_apart(tmp_path)
    new = str(tmp_path / "new")
    assert cli.main(_tool_args(new, folder, "--quiet")) == 0  # a new model: the calibrated threshold, as before
    assert (Store(new).model("same").threshold, Store(new).model("same").threshold_source) == (
        0.42, "thresholds.json; FAR 0.01")
    store_dir = str(tmp_path / "store")
    reviewed = "calibrated on 40 reviewed identities at FAR 0.01"
    Store(store_dir).register_model("same", {"weights_sha256": "same"}, 12, threshold=0.7, threshold_source=reviewed)
    capsys.readouterr()
    assert cli.main(_tool_args(store_dir, folder)) == 0
    model = Store(store_dir).model("same")
    assert (model.threshold, model.threshold_source) == (0.7, reviewed)
    assert f"model 'same': linking threshold cosine similarity 0.7000 ({reviewed})" in capsys.readouterr().err
    assert cli.main(_tool_args(store_dir, folder, "--far", "0.001")) == 0
    assert (Store(store_dir).model("same").threshold, Store(store_dir).model("same").threshold_source) == (
        0.42, "thresholds.json; FAR 0.001")
    err = capsys.readouterr().err.splitlines()
    assert "model 'same': threshold 0.7000 -> 0.4200 (thresholds.json; FAR 0.001)" in err
    assert cli.main(_tool_args(store_dir, folder, "--threshold", "0.9")) == 0
    assert Store(store_dir).model("same").threshold == 0.9
    assert "model 'same': threshold 0.4200 -> 0.9000 (given (--threshold))" in capsys.readouterr().err.splitlines()
    # the library: the same
    register_appearance_model(Store(store_dir), "same", same_model())
    assert Store(store_dir).model("same").threshold == 0.9


def test_the_tool_passes_max_gap_and_transitions_to_online_linking(tmp_path, capsys, tool_model, sequences):
    folder = _crops_10_s_apart(tmp_path)
    linked = []
    for name, more in [("free", []), ("gap", ["--max-gap", "1"]), ("gap10", ["--max-gap", "10"])]:
        assert cli.main(_tool_args(str(tmp_path / name), folder, "--quiet", *more)) == 0
        linked.append(capsys.readouterr().out.strip().endswith("linked 1 to an existing identity"))
    assert linked == [True, False, True]
    slow = tmp_path / "slow.json"  # cameras 1 and 2 at least 20 s apart: crops 10 s apart are two people
    slow.write_text('{"transitions": [{"cameras": [1, 2], "min_seconds": 20}]}')
    assert cli.main(_tool_args(str(tmp_path / "slow"), folder, "--quiet", "--transitions", str(slow))) == 0
    assert capsys.readouterr().out.strip().endswith("linked 0 to an existing identity")
    # --tracks: the file's cameras are checked against the sequences' (1 and 2), before anything is stored
    other = tmp_path / "other.json"
    other.write_text('{"transitions": [{"cameras": [1, 7]}]}')
    store_dir = str(tmp_path / "tracks")
    assert cli.main(["--store", store_dir, "--tracks", "gt", "--sequences", sequences, "--run", "output/none",
                     "--transitions", str(other), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {other}: camera 7 is not a camera of these sequences") and "\n" not in err
    assert Store(store_dir).counts()["tracklets"] == 0
    assert cli.main(_tool_args(str(tmp_path / "bad"), folder, "--transitions", str(tmp_path / "none.json"))) == 1
    assert "none.json" in capsys.readouterr().err


def test_another_process_writing_meanwhile_is_one_line_and_says_to_run_again(tmp_path, capsys, tool_model,
                                                                          monkeypatch):
    from sqlalchemy.exc import IntegrityError, OperationalError

    folder = _crops_10_s_apart(tmp_path)
    for error in (IntegrityError("INSERT INTO tracklets ...", {}, sqlite3.IntegrityError(
                      "UNIQUE constraint failed: tracklets.source")),
                  OperationalError("INSERT INTO tracklets ...", {}, sqlite3.OperationalError("database is locked"))):
        def taken(*_, error=error, **__):
            raise error

        monkeypatch.setattr(Store, "add_tracklets", taken)
        assert cli.main(_tool_args(str(tmp_path / "store"), folder, "--quiet")) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"error: another process wrote these tracklets (or holds the database) meanwhile: "
                       f"({type(error.orig).__module__}.{type(error.orig).__name__}) {error.orig}; run the same "
                       "command again: it skips what is stored.")
    # another database error is not that: shown as it is
    monkeypatch.setattr(Store, "add_tracklets", lambda *_, **__: (_ for _ in ()).throw(OperationalError(
        "SELECT 1", {}, sqlite3.OperationalError("disk I/O error"))))
    with pytest.raises(OperationalError, match="disk I/O error"):
        cli.main(_tool_args(str(tmp_path / "store"), folder, "--quiet"))

# ------------------------------------------------------------------------------------------- kill -9

def _clustered_gallery(tmp_path, n: int, people: int = 40) -> str:
    """`n` crops of `people` people (features near one centre each), over 4 cameras, times in the names."""
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(people, 16))
    person = rng.integers(0, people, n)
    feats = (centres[person] + 0.3 * rng.normal(size=(n, 16))).astype(np.float32)
    folder = tmp_path / "images"
    folder.mkdir()
    paths = []
    for k in range(n):
        path = str(folder / f"c{k % 4 + 1}_{1000 + 7 * k}_{k}.jpg")
        assert cv2.imwrite(path, rng.integers(0, 256, (16, 8, 3), dtype=np.uint8))
        paths.append(path)
    return save_gallery(Gallery(feats, paths, camids=np.arange(n) % 4 + 1, meta={"weights_sha256": "g"}),
                        str(tmp_path / "gallery.npz"))


def _tool(store: str, gallery: str):
    return [sys.executable, os.path.join(ROOT, "tools", "ingest.py"), "--store", store, "--gallery", gallery,
            "--model-name", "g", "--threshold", "0.8", "--batch-size", "25", "--quiet"]


def _rows(db: str, query: str):
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30) as con:
        return con.execute(query).fetchall()


def _partition(store_dir: str):
    """The tracklets of each identity, by source key: what linking decided."""
    groups = {}
    for source, identity in _rows(os.path.join(store_dir, "store.db"), "select source, identity_id from tracklets"):
        groups.setdefault(identity, set()).add(source)
    return sorted(sorted(g) for g in groups.values())


@pytest.mark.slow
def test_kill_9_mid_ingest_loses_nothing_committed_and_a_rerun_completes(tmp_path):
    n = 1500
    gallery = _clustered_gallery(tmp_path, n)
    env = dict(os.environ, PYTHONPATH=ROOT)
    whole = str(tmp_path / "whole")
    subprocess.run(_tool(whole, gallery), check=True, env=env, timeout=600, capture_output=True)

    killed = str(tmp_path / "killed")
    db = os.path.join(killed, "store.db")
    proc = subprocess.Popen(_tool(killed, gallery), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                if _rows(db, "select count(*) from tracklets")[0][0] > 0:  # a batch committed
                    break
            except sqlite3.Error:  # not made yet, or its tables not yet
                pass
            time.sleep(0.01)
        assert proc.poll() is None, f"the ingest ended before it was killed: {proc.stderr.read()[-2000:]!r}"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL

    stored = _rows(db, "select count(*) from tracklets")[0][0]
    assert 0 < stored < n and stored % 25 == 0  # whole batches only
    # no half rows: every tracklet has its sighting, every sighting its feature, every tracklet its pooled one
    assert _rows(db, "select count(*) from tracklets t where (select count(*) from sightings s where "
                     "s.tracklet_id = t.id) != 1 or (select count(*) from tracklet_features f where "
                     "f.tracklet_id = t.id) != 1")[0][0] == 0
    assert _rows(db, "select count(*) from sightings")[0][0] == stored
    assert _rows(db, "select count(*) from sightings s where (select count(*) from features f where "
                     "f.sighting_id = s.id) != 1")[0][0] == 0
    assert _rows(db, "select count(*) from tracklets t left join identities i on i.id = t.identity_id "
                     "where i.id is null")[0][0] == 0
    for (crop,) in _rows(db, "select crop from sightings"):
        assert os.path.isfile(os.path.join(killed, "crops", crop[:2], crop + ".jpg"))

    done = subprocess.run(_tool(killed, gallery), env=env, timeout=600, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"ingested {n - stored} tracklets" in done.stdout and f"skipped {stored} already stored" in done.stdout
    a, b = Store(whole), Store(killed)
    assert a.counts() == b.counts() and a.counts()["tracklets"] == n
    assert a.counts()["links"] > 0  # linking ran, and decided the same after the stop
    assert _partition(whole) == _partition(killed)


@pytest.mark.slow
def test_the_tool_ingests_tracks_of_videos_with_a_model_and_again_adds_nothing(tmp_path, capsys):
    from tests.tracking.model_files import tiny_checkpoint
    from tests.tracking.video_files import sequences_as_videos

    root = tmp_path / "seqs"
    det = "".join(f"{f},-1,4,5,14,30,0.9\n" for f in range(1, 7))
    write_sequence(str(root / "cam1"), length=6, gt=GT1, det=det, extra={"camera": "1"}, seed=1)
    write_sequence(str(root / "cam2"), length=6, gt=GT2, det=det, extra={"camera": "2"}, seed=2)
    videos = sequences_as_videos(str(root), str(tmp_path / "videos"))
    weights = tiny_checkpoint(tmp_path)
    store_dir = str(tmp_path / "store")
    argv = ["--store", store_dir, "--tracks", "gt", "--video", *videos, "--weights", weights, "--quiet",
            "--start-time", "2025-11-28T14:05:01.25Z", "--crops-per-tracklet", "3"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("ingested 6 tracklets (") and "under model 'tiny'" in out
    assert sorted(os.listdir(os.path.join(store_dir, "videos"))) == ["cam1", "cam2"]  # decoded once, kept
    store = Store(store_dir)
    assert store.model("tiny").identity["weights_sha256"] and store.model("tiny").threshold is None
    first = min((s["time"], s["camera"]) for s in store.sightings(range(1, 50)).values())
    assert first == (pytest.approx(T0), 1)
    before = table_counts(store)
    assert cli.main(argv) == 0
    assert "ingested 0 tracklets (0 sightings, 0 features) under model 'tiny'; skipped 6" in capsys.readouterr().out
    assert table_counts(store) == before
