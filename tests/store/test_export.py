"""Reviewed identities as training data (reid/store/export.py): which identities count as reviewed, the
Market-1501 folder + list files they are written to, a training run on that folder, and the threshold
calibrated on them (recorded on the model, returned by search, used by online linking); the API routes
and tools/serve.py's --export / --calibrate.

Every store here is synthetic: small JPEG crops made with numpy/cv2 and known features (person ``p``
points along axis ``p``, plus seeded noise), so the truth of every sighting is known to the test.
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter
from typing import Dict, List, Sequence, Tuple

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

import cv2  # noqa: E402
from sqlalchemy import select  # noqa: E402

from reid.store import NewSighting, NewTracklet, Store, review  # noqa: E402
from reid.store.export import calibrate_reviewed, export_reviewed, reviewed_identities  # noqa: E402
from reid.store.schema import Link, Sighting, Tracklet  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")
DIM = 64
MODEL = "demo"
WEIGHTS = {"weights_sha256": "ab" * 32, "backend": "test"}
T0 = 1.7e9  # seconds since 1970: every sighting's time is T0 + a few seconds
NAME = re.compile(r"^(\d{4})_c(\d+)s1_(-?\d{6})_(\d{2,})\.jpg$")
FOLDER_OF = {"train": "bounding_box_train", "query": "query", "gallery": "bounding_box_test"}

# ----------------------------------------------------------------------------- synthetic store


class Truth:
    """What the test put in the store: per sighting source, its person, camera, time, frame, crop and
    feature; per tracklet source, its person and its tracklet (for pooled features)."""

    def __init__(self) -> None:
        self.sightings: Dict[str, dict] = {}
        self.tracklets: Dict[str, NewTracklet] = {}
        self.person_of_tracklet: Dict[str, int] = {}

    def by_crop(self) -> Dict[bytes, dict]:
        out = {s["crop"]: s for s in self.sightings.values()}
        assert len(out) == len(self.sightings), "two synthetic crops came out equal"
        return out


def crop_jpeg(person: int, rng: np.random.Generator) -> bytes:
    """A 64x32 BGR person-like crop: a shirt and trousers colour of the person's own, seeded noise."""
    top = np.array([(37 * person) % 256, (91 * person + 60) % 256, (151 * person + 120) % 256], np.int16)
    bottom = np.array([(200 - 53 * person) % 256, (17 * person + 30) % 256, (71 * person + 200) % 256], np.int16)
    img = np.empty((64, 32, 3), np.int16)
    img[:32], img[32:] = top, bottom
    img += rng.integers(-25, 26, img.shape, dtype=np.int16)
    ok, data = cv2.imencode(".jpg", np.clip(img, 0, 255).astype(np.uint8))
    assert ok
    return data.tobytes()


def tracklet(truth: Truth, person: int, camera: int, start: float, n: int = 3, noise: float = 0.05,
             first_frame=None) -> NewTracklet:
    """Person `person` seen by `camera` from T0 + `start` for `n` sightings, one second apart (frames from
    `first_frame`, default 10 x `start`)."""
    key = f"p{person}-c{camera}-t{start:g}"
    sightings = []
    for k in range(n):
        rng = np.random.default_rng([person, camera, int(start), k])
        feature = np.zeros(DIM, np.float32)
        feature[person] = 1.0
        feature += rng.normal(0.0, noise, DIM).astype(np.float32)
        crop = crop_jpeg(person, rng)
        frame = (int(start) * 10 if first_frame is None else first_frame) + k
        s = NewSighting(source=f"{key}-s{k}", time=T0 + start + k, box=(0.0, 0.0, 32.0, 64.0), crop=crop,
                        feature=feature, frame=frame)
        sightings.append(s)
        truth.sightings[s.source] = {"person": person, "camera": camera, "time": s.time, "frame": frame,
                                     "crop": crop, "feature": feature, "tracklet": key}
    t = NewTracklet(source=key, camera=camera, sightings=sightings)
    truth.tracklets[key] = t
    truth.person_of_tracklet[key] = person
    return t


def new_store(tmp_path, database_url: str, threshold=0.6, name: str = "store") -> Store:
    store = Store(str(tmp_path / name), database_url)
    store.register_model(MODEL, WEIGHTS, DIM, threshold=threshold, threshold_source="given by the test")
    return store


def identity_of(store: Store, tracklet_source: str) -> int:
    with store.session() as s:
        return int(s.scalar(select(Tracklet.identity_id).where(Tracklet.source == tracklet_source)))


def links_by_tracklet(store: Store) -> Dict[str, List[Tuple[int, int, str]]]:
    """Tracklet source -> its links ``(link id, identity, status)``."""
    out: Dict[str, List[Tuple[int, int, str]]] = {}
    with store.session() as s:
        for link, source in s.execute(select(Link, Tracklet.source).join(Tracklet, Tracklet.id == Link.tracklet_id)
                                      .order_by(Link.id)):
            out.setdefault(source, []).append((link.id, link.identity_id, link.status))
    return out


def sighting_ids(store: Store) -> Dict[str, int]:
    with store.session() as s:
        return dict(s.execute(select(Sighting.source, Sighting.id)).all())


def confirm_all(store: Store, keys: Sequence[str]) -> None:
    """Confirm the (single, proposed) link of each tracklet in `keys`."""
    found = links_by_tracklet(store)
    with store.session() as s:
        for key in keys:
            (link_id, _, status), = found[key]
            assert status == "proposed", key
            review.confirm(s, link_id, "tester")


@pytest.fixture
def scenario(tmp_path, database_url):
    """A store of 8 people linked online (threshold 0.6), then reviewed:

    A (0): cameras 1, 2, 3, both links confirmed                         -> reviewed
    B (1): cameras 1, 2, its link confirmed                              -> reviewed
    C (2): cameras 2, 3, its link still proposed                         -> not
    D (3): cameras 1, 2, 3, one link confirmed, one proposed             -> not
    E (4): camera 4 only, one tracklet, no link                          -> not
    F (5): cameras 1, 4, its link rejected (the tracklet leaves)         -> neither identity
    G (6): camera 1 and camera 5 ingested without linking, then merged   -> reviewed (the merge)
    H (7): camera 2 twice (two tracklets), the link confirmed            -> reviewed, one camera
    """
    truth = Truth()
    store = new_store(tmp_path, database_url)
    plan = [(0, 1, 0), (0, 2, 100), (0, 3, 200), (1, 1, 10), (1, 2, 110), (2, 2, 20), (2, 3, 120),
            (3, 1, 30), (3, 2, 130), (3, 3, 230), (4, 4, 40), (5, 1, 50), (5, 4, 150), (6, 1, 60),
            (7, 2, 70), (7, 2, 170)]
    count = store.add_tracklets(MODEL, [tracklet(truth, *p) for p in plan])
    assert count.tracklets == len(plan) and count.linked == 8
    assert store.add_tracklets(MODEL, [tracklet(truth, 6, 5, 160)], link=False).linked == 0
    links = links_by_tracklet(store)
    # the linker did what the scenario assumes: every later tracklet of a person joined the person's first
    for key, person in truth.person_of_tracklet.items():
        first = next(k for k, p in truth.person_of_tracklet.items() if p == person)
        if key != first and key != "p6-c5-t160":
            assert identity_of(store, key) == identity_of(store, first), key
            assert [status for _, _, status in links[key]] == ["proposed"], key
    assert identity_of(store, "p6-c5-t160") != identity_of(store, "p6-c1-t60")

    confirm_all(store, ["p0-c2-t100", "p0-c3-t200", "p1-c2-t110", "p3-c2-t130", "p7-c2-t170"])
    with store.session() as s:
        review.reject(s, links["p5-c4-t150"][0][0], "tester")
        review.merge(s, identity_of(store, "p6-c1-t60"), identity_of(store, "p6-c5-t160"), "tester")
    ident = {p: identity_of(store, k) for k, p in truth.person_of_tracklet.items() if k != "p5-c4-t150"}
    yield store, truth, ident
    store.close()


# ----------------------------------------------------------------------------- reviewed identities


def test_reviewed_identities_are_those_with_every_link_decided_and_one_confirmed(scenario):
    store, truth, ident = scenario
    with store.session() as s:
        assert reviewed_identities(s) == sorted(ident[p] for p in (0, 1, 6, 7))
    assert ident[6] == identity_of(store, "p6-c5-t160")  # the merge moved G's second tracklet
    rejected = identity_of(store, "p5-c4-t150")
    assert rejected != ident[5]

    # undoing B's confirmation makes its link proposed again: B waits, and is out
    with store.session() as s:
        decision = next(d for d in review.decisions(s, limit=50) if d["kind"] == "confirm"
                        and int(next(iter(d["payload"]["links"]))) == links_by_tracklet(store)["p1-c2-t110"][0][0])
        review.undo(s, decision["id"], "tester")
    with store.session() as s:
        assert reviewed_identities(s) == sorted(ident[p] for p in (0, 6, 7))
    # deciding what waited brings B and D in; C's only link rejected leaves C with nothing confirmed
    confirm_all(store, ["p1-c2-t110", "p3-c3-t230"])
    with store.session() as s:
        review.reject(s, links_by_tracklet(store)["p2-c3-t120"][0][0], "tester")
    with store.session() as s:
        assert reviewed_identities(s) == sorted(ident[p] for p in (0, 1, 3, 6, 7))


# ----------------------------------------------------------------------------- export


def read_list(path) -> List[Tuple[str, int, int]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            p, pid, cam = line.split()
            rows.append((p, int(pid), int(cam)))
    return rows


def exported(out) -> Dict[str, List[str]]:
    """Split -> the file names in its folder."""
    return {split: sorted(os.listdir(os.path.join(out, folder))) for split, folder in FOLDER_OF.items()}


def test_export_writes_market_names_lists_and_a_seeded_test_split(scenario, tmp_path):
    store, truth, ident = scenario
    out = tmp_path / "export"
    record = export_reviewed(store, str(out), test_fraction=0.5, seed=3)
    reviewed = sorted(ident[p] for p in (0, 1, 6, 7))
    pids = {identity: n for n, identity in enumerate(reviewed, 1)}
    person_of = {ident[p]: p for p in (0, 1, 6, 7)}
    # the test split: a seeded draw of round(0.5 * 3) among the identities seen by 2+ cameras (A, B, G; not H)
    several = sorted(ident[p] for p in (0, 1, 6))
    test = set(np.random.default_rng(3).choice(several, size=2, replace=False).tolist())
    assert record["test_identities"] == 2 and ident[7] not in test

    by_crop = truth.by_crop()
    files = exported(out)
    seen: Dict[int, List[Tuple[float, int, str, int]]] = {}  # identity -> (time, k, split, camera)
    for split, names in files.items():
        for name in names:
            m = NAME.match(name)
            assert m, name
            with open(out / FOLDER_OF[split] / name, "rb") as f:
                data = f.read()
            sighting = by_crop[data]  # the bytes are a stored crop, unchanged
            person = sighting["person"]
            identity = ident[person]
            assert identity in pids, f"{name}: person {person} was not reviewed"
            assert int(m.group(1)) == pids[identity] and int(m.group(2)) == sighting["camera"]
            assert int(m.group(3)) == sighting["frame"]
            seen.setdefault(identity, []).append((sighting["time"], int(m.group(4)), split, sighting["camera"]))
    # every sighting of every reviewed identity, and nothing else
    expected = Counter(ident[s["person"]] for s in truth.sightings.values() if ident.get(s["person"]) in pids)
    assert {i: len(v) for i, v in seen.items()} == dict(expected)
    assert sum(expected.values()) == 27  # A 9, B 6, G 6, H 6
    for identity, rows in seen.items():
        rows.sort()
        assert [k for _, k, _, _ in rows] == list(range(len(rows))), person_of[identity]  # k: time order
        if identity not in test:
            assert {split for _, _, split, _ in rows} == {"train"}
            continue
        # one query per camera: its first sighting; the rest in the gallery
        first = {}
        for t, _, split, cam in rows:
            first.setdefault(cam, t)
            assert split == ("query" if t == first[cam] else "gallery")
    queries = Counter(pid for pid in (int(NAME.match(n).group(1)) for n in files["query"]))
    assert queries == Counter({pids[i]: len({c for *_, c in seen[i]}) for i in test})

    # the list files list exactly the folder's files, with pid and camera of their names
    for split, names in files.items():
        rows = read_list(out / f"{split}.txt")
        assert sorted(p for p, _, _ in rows) == [f"{FOLDER_OF[split]}/{n}" for n in names]
        for p, pid, cam in rows:
            m = NAME.match(os.path.basename(p))
            assert (pid, cam) == (int(m.group(1)), int(m.group(2)))
    with open(out / "export.json", encoding="utf-8") as f:
        saved = json.load(f)
    assert saved == record
    assert record["identities"] == 4 and record["reviewed_only"] is True
    assert record["images"] == {split: len(names) for split, names in files.items()}
    assert record["pids"] == {str(i): p for i, p in pids.items()}
    assert (record["seed"], record["test_fraction"], record["store"]) == (3, 0.5, store.folder)

    # the same seed gives the same export; the draw follows the seed
    again = tmp_path / "again"
    export_reviewed(store, str(again), test_fraction=0.5, seed=3)
    for split in FOLDER_OF:
        assert (again / f"{split}.txt").read_text() == (out / f"{split}.txt").read_text()
    draws = set()
    for seed in range(12):
        rec = export_reviewed(store, str(tmp_path / f"seed{seed}"), test_fraction=0.5, seed=seed)
        chosen = {int(i) for i, p in rec["pids"].items()
                  if any(int(NAME.match(os.path.basename(q)).group(1)) == p
                         for q, _, _ in read_list(tmp_path / f"seed{seed}" / "query.txt"))}
        assert chosen == set(np.random.default_rng(seed).choice(several, size=2, replace=False).tolist())
        draws.add(frozenset(chosen))
    assert len(draws) > 1

    # no test split: every image trains
    rec = export_reviewed(store, str(tmp_path / "all-train"), test_fraction=0.0)
    assert rec["test_identities"] == 0 and rec["images"] == {"train": 27, "query": 0, "gallery": 0}
    assert (tmp_path / "all-train" / "query.txt").read_text() == ""


def test_every_test_query_keeps_a_gallery_match_in_another_camera(tmp_path, database_url):
    """One query per camera, except that a query always keeps a gallery image of another camera: with
    one sighting per camera, the last camera of one sighting stays in the gallery."""
    from reid.evaluation import compute_distance, evaluate_rank

    truth = Truth()
    store = new_store(tmp_path, database_url)
    shapes = {0: [(1, 1), (2, 1)],          # two cameras of one sighting: one query (camera 1)
              1: [(1, 3), (2, 1)],          # one camera of several: its query, camera 2 gallery only
              2: [(1, 2), (2, 2)],          # two cameras of several: a query each
              3: [(1, 1), (2, 1), (3, 1)],  # three of one: queries from cameras 1 and 2
              4: [(4, 2), (5, 1), (6, 1)]}  # one of several + two of one: queries from 4 and 5
    tracklets = []
    for person, cams in shapes.items():
        for j, (cam, n) in enumerate(cams):
            tracklets.append(tracklet(truth, person, cam, 100 * j + 10 * person, n=n))
    store.add_tracklets(MODEL, tracklets)
    confirm_all(store, [k for k in links_by_tracklet(store)])
    try:
        record = export_reviewed(store, str(tmp_path / "out"), test_fraction=0.99, seed=0)
    finally:
        store.close()
    assert record["test_identities"] == 5 and record["images"]["train"] == 0
    by_crop = truth.by_crop()
    q = read_list(tmp_path / "out" / "query.txt")
    g = read_list(tmp_path / "out" / "gallery.txt")
    query_cams = {}
    for p, pid, cam in q:
        query_cams.setdefault(by_crop[(tmp_path / "out" / p).read_bytes()]["person"], []).append(cam)
    assert {p: sorted(c) for p, c in query_cams.items()} == {0: [1], 1: [1], 2: [1, 2], 3: [1, 2], 4: [4, 5]}
    # every query is valid under the Market-1501 protocol (a match of its pid in another camera)
    feats = np.eye(10, dtype=np.float32)
    qf, gf = feats[[pid for _, pid, _ in q]], feats[[pid for _, pid, _ in g]]
    result = evaluate_rank(compute_distance(qf, gf), np.array([r[1] for r in q]), np.array([r[1] for r in g]),
                           np.array([r[2] for r in q]), np.array([r[2] for r in g]), max_rank=5)
    assert result["num_valid_queries"] == len(q) == 8 and result["mAP"] == pytest.approx(1.0)


@pytest.mark.slow
def test_repeated_frame_numbers_still_give_every_sighting_its_own_file(tmp_path, database_url):
    """Two recordings of one camera number their frames alike: one person seen in both at the same frame
    numbers (200 sightings) is still 200 files, none written over another."""
    truth = Truth()
    store = new_store(tmp_path, database_url)
    store.add_tracklets(MODEL, [tracklet(truth, 0, 1, 0, n=100, first_frame=0),
                                tracklet(truth, 0, 1, 1000, n=100, first_frame=0)])
    confirm_all(store, ["p0-c1-t1000"])
    try:
        record = export_reviewed(store, str(tmp_path / "out"), test_fraction=0.0)
    finally:
        store.close()
    names = exported(tmp_path / "out")["train"]
    assert record["images"]["train"] == len(names) == 200
    rows = read_list(tmp_path / "out" / "train.txt")
    assert len({p for p, _, _ in rows}) == 200
    by_crop = truth.by_crop()
    crops = {(tmp_path / "out" / "bounding_box_train" / n).read_bytes() for n in names}
    assert crops == set(by_crop)


def test_export_refuses_a_used_folder_and_a_store_without_reviews(scenario, tmp_path, database_url):
    store, truth, ident = scenario
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match=r"export folder .*used is not empty; give a new folder"):
        export_reviewed(store, str(used))
    assert os.listdir(used) == ["notes.txt"]
    with pytest.raises(ValueError, match=r"is a file; give a new folder"):
        export_reviewed(store, str(used / "notes.txt"))
    with pytest.raises(ValueError, match=r"no export folder given"):
        export_reviewed(store, "")
    with pytest.raises(ValueError, match=r"test fraction 1\.0 must lie in \[0, 1\)"):
        export_reviewed(store, str(tmp_path / "x"), test_fraction=1.0)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_reviewed(store, str(empty))["identities"] == 4  # an empty folder is fine

    # a store whose links all wait: nothing to export, and nothing written
    other = new_store(tmp_path, f"sqlite:///{tmp_path / 'other.db'}", name="other")
    try:
        other.add_tracklets(MODEL, [tracklet(Truth(), 0, 1, 0), tracklet(Truth(), 0, 2, 100)])
        assert other.counts()["links"] == 1
        with pytest.raises(ValueError, match=r"no reviewed identity to export: confirm links"):
            export_reviewed(other, str(tmp_path / "nothing"))
        assert not (tmp_path / "nothing").exists()
        assert export_reviewed(other, str(tmp_path / "machine"), include_unreviewed=True)["identities"] == 1
    finally:
        other.close()


# ----------------------------------------------------------------------------- the export trains


@pytest.fixture
def training_export(tmp_path, database_url):
    """8 reviewed people on cameras 1..6 (2 or 3 cameras each, 3 sightings per tracklet), exported
    with 2 test identities."""
    truth = Truth()
    store = new_store(tmp_path, database_url)
    rng = np.random.default_rng(5)
    tracklets = []
    for person in range(8):
        cams = sorted(rng.choice(np.arange(1, 7), size=2 + person % 2, replace=False).tolist())
        tracklets += [tracklet(truth, person, int(c), 100 * j + 10 * person) for j, c in enumerate(cams)]
    store.add_tracklets(MODEL, tracklets)
    confirm_all(store, list(links_by_tracklet(store)))
    out = tmp_path / "export"
    try:
        record = export_reviewed(store, str(out), test_fraction=0.25, seed=1)
    finally:
        store.close()
    assert record["identities"] == 8 and record["test_identities"] == 2
    return out, record


@pytest.mark.slow
def test_a_reviewed_export_trains_and_loads_as_market1501_and_custom(training_export, tmp_path,
                                                                     one_torch_thread_module):
    from reid.cli import train as cli_train
    from reid.data import build_dataset

    out, record = training_export
    lists = {split: read_list(out / f"{split}.txt") for split in ("train", "query", "gallery")}
    # cameras 1..6: the folder is a Market-1501 folder (cameras 0-based there), with the lists' images
    market = build_dataset("market1501", root=str(out))
    custom = build_dataset("custom", root=str(out), train_list="train.txt", query_list="query.txt",
                           gallery_list="gallery.txt")
    for split in ("train", "query", "gallery"):
        want = sorted((os.path.join(str(out), p), pid, cam) for p, pid, cam in lists[split])
        assert len(want) == record["images"][split] > 0
        if split == "train":  # training pids are relabelled 0..N-1 in pid order
            relabel = {pid: n for n, pid in enumerate(sorted({pid for _, pid, _ in want}))}
            want = [(p, relabel[pid], cam) for p, pid, cam in want]
        assert sorted(getattr(custom, split)) == want
        assert sorted(getattr(market, split)) == [(p, pid, cam - 1) for p, pid, cam in want]

    run = tmp_path / "run"
    argv = ["--config-file", DEMO, "DATASETS.NAMES", '("custom",)', "DATASETS.TESTS", '("custom",)',
            "DATASETS.ROOT", str(out), "DATASETS.CUSTOM.TRAIN_LIST", str(out / "train.txt"),
            "DATASETS.CUSTOM.QUERY_LIST", str(out / "query.txt"),
            "DATASETS.CUSTOM.GALLERY_LIST", str(out / "gallery.txt"),
            "OUTPUT_DIR", str(run), "MODEL.DEVICE", "cpu",
            "INPUT.SIZE_TRAIN", "[32, 16]", "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2",
            "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE", "2", "DATALOADER.NUM_WORKERS", "0",
            "SOLVER.MAX_EPOCH", "1", "SOLVER.WARMUP_ITERS", "1", "SOLVER.LOG_PERIOD", "1"]
    assert cli_train.main(argv) == 0
    assert (run / "model_final.pth").is_file()
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    evals = [r for r in records if r["type"] == "eval"]
    assert train and all(np.isfinite(r["loss_id"]) for r in train)
    assert evals and evals[-1]["dataset"] == "custom" and 0 <= evals[-1]["mAP"] <= 100


# ----------------------------------------------------------------------------- calibration

REVIEWED = range(6)


@pytest.fixture
def calibration_store(tmp_path, database_url):
    """6 reviewed people on cameras 1..3 (3 sightings each), one person whose link waits, one never
    linked; model threshold 0.5 to start with."""
    truth = Truth()
    store = new_store(tmp_path, database_url, threshold=0.5)
    tracklets = [tracklet(truth, p, c, 100 * c + 10 * p, noise=0.08) for p in range(8) for c in (1, 2, 3)
                 if p < 6 or (p == 6 and c < 3) or (p == 7 and c == 1)]
    store.add_tracklets(MODEL, tracklets)
    links = links_by_tracklet(store)
    assert len(links) == 6 * 2 + 1
    confirm_all(store, [k for k in links if truth.person_of_tracklet[k] in REVIEWED])
    yield store, truth
    store.close()


def independent_calibration(store: Store, truth: Truth, far: float, people=REVIEWED):
    """reid.evaluation.thresholds.calibrate on the reviewed people's features as the test made them
    (L2-normalised float32, in the store's sighting order)."""
    from reid.evaluation.thresholds import calibrate

    order = sighting_ids(store)
    rows = sorted((order[key], s) for key, s in truth.sightings.items() if s["person"] in people)
    feats = np.stack([s["feature"].reshape(1, -1) / np.maximum(np.linalg.norm(s["feature"].reshape(1, -1), axis=1,
                                                                               keepdims=True), 1e-12)
                      for _, s in rows]).reshape(len(rows), DIM).astype(np.float32)
    pids = np.array([s["person"] for _, s in rows])
    cams = np.array([s["camera"] for _, s in rows])
    return calibrate(feats, feats, pids, pids, cams, cams, [far])


def test_calibrate_reviewed_records_the_threshold_of_the_reviewed_identities(calibration_store):
    store, truth = calibration_store
    expected = independent_calibration(store, truth, 0.01)
    want = expected["thresholds"]["0.01"]
    record = calibrate_reviewed(store, MODEL, 0.01)
    got = record["thresholds"]["0.01"]
    assert got["similarity"] == pytest.approx(want["similarity"], abs=1e-6)
    assert got["tar"] == pytest.approx(want["tar"], abs=1e-9)
    assert (record["num_impostor"], record["num_genuine"], record["num_identities"]) == \
        (expected["num_impostor"], expected["num_genuine"], 6)  # the waiting and the unlinked people stay out
    model = store.model(MODEL)
    assert model.threshold == pytest.approx(want["similarity"], abs=1e-6)
    assert model.threshold != 0.5
    assert model.threshold_source == "calibrated on 6 reviewed identities at FAR 0.01"
    # another rate records another threshold
    calibrate_reviewed(store, MODEL, 0.05)
    assert store.model(MODEL).threshold == pytest.approx(
        independent_calibration(store, truth, 0.05)["thresholds"]["0.05"]["similarity"], abs=1e-6)
    assert store.model(MODEL).threshold_source.endswith("at FAR 0.05")


def test_calibration_refuses_too_few_reviewed_identities_or_pairs(tmp_path, database_url, calibration_store):
    store, truth = calibration_store
    with pytest.raises(ValueError, match=r"too few pairs of different people to resolve a false accept rate of 1e-05"):
        calibrate_reviewed(store, MODEL, 1e-5)
    assert store.model(MODEL).threshold == 0.5  # nothing recorded
    with pytest.raises(KeyError, match="nope"):
        calibrate_reviewed(store, "nope", 0.01)

    one = new_store(tmp_path, f"sqlite:///{tmp_path / 'one.db'}", name="one")
    try:
        t = Truth()
        one.add_tracklets(MODEL, [tracklet(t, 0, 1, 0), tracklet(t, 0, 2, 100), tracklet(t, 1, 1, 10)])
        with pytest.raises(ValueError, match=r"needs at least 2 reviewed identities with features of 'demo'; 0 found"):
            calibrate_reviewed(one, MODEL, 0.01)
        confirm_all(one, ["p0-c2-t100"])
        with pytest.raises(ValueError, match=r"at least 2 reviewed identities .*; 1 found: review more links first"):
            calibrate_reviewed(one, MODEL, 0.01)
        assert one.model(MODEL).threshold == 0.6
    finally:
        one.close()


def test_search_returns_and_linking_uses_the_calibrated_threshold(calibration_store):
    from fastapi.testclient import TestClient

    from reid.service import create_app, store_tokens

    store, truth = calibration_store
    tokens = store_tokens(store.folder)
    token = tokens.add("t", "review")
    client = TestClient(create_app(store, tokens))
    auth = {"Authorization": f"Bearer {token}"}
    sid = sighting_ids(store)["p0-c1-t100-s0"]
    before = client.get(f"/api/search/sighting/{sid}", params={"k": 5}, headers=auth)
    assert before.status_code == 200, before.text
    assert before.json()["threshold"] == 0.5 and before.json()["threshold_source"] == "given by the test"

    calibrate_reviewed(store, MODEL, 0.01)
    threshold = store.model(MODEL).threshold
    after = client.get(f"/api/search/sighting/{sid}", params={"k": 5}, headers=auth).json()
    assert after["model"] == MODEL and after["threshold"] == threshold
    assert after["threshold_source"] == "calibrated on 6 reviewed identities at FAR 0.01"
    assert len(after["results"]) == 5

    # online linking uses it: a tracklet whose score with person 0 lies between the calibrated threshold
    # and the old one (0.5) joins person 0 now (it would have started an identity of its own before)
    assert threshold < 0.4
    held = [truth.tracklets[k] for k, p in truth.person_of_tracklet.items()]
    pooled = np.stack([t.pooled() for t in held]).astype(np.float64)
    mean0 = np.mean([t.pooled() for t in held if truth.person_of_tracklet[t.source] == 0], axis=0).astype(np.float64)
    basis, _ = np.linalg.qr(pooled.T)  # an orthonormal basis of every held tracklet's feature
    w = np.random.default_rng(9).normal(size=DIM)
    w -= basis @ (basis.T @ w)
    w /= np.linalg.norm(w)
    target = (threshold + 0.5) / 2
    cos = target / np.linalg.norm(mean0)
    v = (cos * mean0 / np.linalg.norm(mean0) + np.sqrt(1 - cos ** 2) * w).astype(np.float32)
    crop = crop_jpeg(0, np.random.default_rng(10))
    new = NewTracklet(source="late-p0", camera=9, sightings=[
        NewSighting(source="late-p0-s0", time=T0 + 5000, box=(0, 0, 32, 64), crop=crop, feature=v, frame=1)])
    count = store.add_tracklets(MODEL, [new])
    assert count.linked == 1
    assert identity_of(store, "late-p0") == identity_of(store, "p0-c1-t100")
    (_, _, status), = links_by_tracklet(store)["late-p0"]
    assert status == "proposed"


def test_api_exports_and_calibrates_with_a_review_token_only(calibration_store, tmp_path):
    from fastapi.testclient import TestClient

    from reid.service import create_app, store_tokens

    store, truth = calibration_store
    tokens = store_tokens(store.folder)
    review_token, read_token = tokens.add("t", "review"), tokens.add("r", "read")
    client = TestClient(create_app(store, tokens))
    as_reviewer = {"Authorization": f"Bearer {review_token}"}
    as_reader = {"Authorization": f"Bearer {read_token}"}

    refused = client.post("/api/exports", json={}, headers=as_reader)
    assert refused.status_code == 403 and "may read only" in refused.json()["detail"]
    assert client.post("/api/exports", json={}).status_code == 401
    assert not os.path.exists(os.path.join(store.folder, "exports"))
    done = client.post("/api/exports", json={"test_fraction": 0.5, "seed": 2}, headers=as_reviewer)
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["by"] == "t" and body["identities"] == 6 and body["test_identities"] == 3
    assert os.path.dirname(body["folder"]) == os.path.join(store.folder, "exports")
    with open(os.path.join(body["folder"], "export.json"), encoding="utf-8") as f:
        saved = json.load(f)
    assert saved["images"] == body["images"] and sum(body["images"].values()) == 6 * 3 * 3
    assert len(read_list(os.path.join(body["folder"], "query.txt"))) == body["images"]["query"] == 3 * 3
    bad = client.post("/api/exports", json={"test_fraction": 1.5}, headers=as_reviewer)
    assert bad.status_code == 422

    refused = client.post(f"/api/models/{MODEL}/calibrate", params={"far": 0.01}, headers=as_reader)
    assert refused.status_code == 403
    assert store.model(MODEL).threshold == 0.5
    done = client.post(f"/api/models/{MODEL}/calibrate", params={"far": 0.01}, headers=as_reviewer)
    assert done.status_code == 200, done.text
    want = independent_calibration(store, truth, 0.01)["thresholds"]["0.01"]["similarity"]
    assert done.json()["name"] == MODEL and done.json()["threshold"] == pytest.approx(want, abs=1e-6)
    assert done.json()["threshold_source"] == "calibrated on 6 reviewed identities at FAR 0.01"
    assert client.post("/api/models/nope/calibrate", headers=as_reviewer).status_code == 404
    unresolved = client.post(f"/api/models/{MODEL}/calibrate", params={"far": 1e-5}, headers=as_reviewer)
    assert unresolved.status_code == 409 and "too few pairs" in unresolved.json()["detail"]
    assert client.post(f"/api/models/{MODEL}/calibrate", params={"far": 0}, headers=as_reviewer).status_code == 422

    # a store with nothing reviewed: both refused with the reason
    bare = new_store(tmp_path, f"sqlite:///{tmp_path / 'bare.db'}", name="bare")
    try:
        t = Truth()
        bare.add_tracklets(MODEL, [tracklet(t, 0, 1, 0), tracklet(t, 0, 2, 100)])
        bare_tokens = store_tokens(bare.folder)
        bare_client = TestClient(create_app(bare, bare_tokens))
        headers = {"Authorization": f"Bearer {bare_tokens.add('t', 'review')}"}
        nothing = bare_client.post("/api/exports", json={}, headers=headers)
        assert nothing.status_code == 409 and "no reviewed identity to export" in nothing.json()["detail"]
        few = bare_client.post(f"/api/models/{MODEL}/calibrate", headers=headers)
        assert few.status_code == 409 and "at least 2 reviewed identities" in few.json()["detail"]
    finally:
        bare.close()


# ----------------------------------------------------------------------------- tools/serve.py


def test_serve_export_and_calibrate_print_one_line_and_exit(calibration_store, tmp_path, database_url,
                                                           capsys):
    from reid.cli import serve

    store, truth = calibration_store
    base = ["--store", store.folder, "--database", database_url]
    out = tmp_path / "exported"
    assert serve.main(base + ["--export", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("exported 6 reviewed identities (1 for testing; images {'train': ")
    assert lines[0].endswith(f") to {out}")
    assert json.loads((out / "export.json").read_text())["identities"] == 6

    assert serve.main(base + ["--calibrate", "0.01"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    threshold = store.model(MODEL).threshold
    want = independent_calibration(store, truth, 0.01)["thresholds"]["0.01"]
    assert threshold == pytest.approx(want["similarity"], abs=1e-6)
    assert lines == [f"model '{MODEL}': threshold cosine similarity {threshold:.4f} at FAR 0.01 "
                     f"(TAR {want['tar']:.3f}), recorded for search and linking"]

    # both at once, the model named
    assert serve.main(base + ["--export", str(tmp_path / "both"), "--calibrate", "0.05", "--model-name", MODEL]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("exported 6") and "at FAR 0.05" in lines[1]
    assert store.model(MODEL).threshold_source.endswith("at FAR 0.05")


def test_serve_export_and_calibrate_errors_are_one_line(calibration_store, tmp_path, database_url, capsys):
    from reid.cli import serve

    store, truth = calibration_store
    base = ["--store", store.folder, "--database", database_url]
    used = tmp_path / "used"
    used.mkdir()
    (used / "a.txt").write_text("x")

    def error(argv) -> str:
        assert serve.main(argv) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
        return lines[0]

    line = error(base + ["--export", str(used)])
    assert line == f"error: export folder {used} is not empty; give a new folder."
    assert "no export folder given" in error(base + ["--export", ""])
    assert error(base + ["--calibrate", "0.01", "--model-name", "nope"]).startswith(
        "error: model 'nope' is not in this store (its models: demo)")
    assert not (tmp_path / "first").exists()
    error(base + ["--calibrate", "0.01", "--model-name", "nope", "--export", str(tmp_path / "first")])
    assert not (tmp_path / "first").exists()  # the model is checked before anything is written
    assert "too few pairs" in error(base + ["--calibrate", "1e-5"])
    assert store.model(MODEL).threshold == 0.5
    missing = tmp_path / "no-store"
    assert "holds no store" in error(["--store", str(missing), "--export", str(tmp_path / "x")])
    assert not missing.exists()  # not made into an empty store
    with pytest.raises(SystemExit):
        serve.main(base + ["--calibrate", "0"])
    assert "--calibrate" in capsys.readouterr().err

    # a store with nothing reviewed
    bare = new_store(tmp_path, f"sqlite:///{tmp_path / 'bare.db'}", name="bare")
    t = Truth()
    bare.add_tracklets(MODEL, [tracklet(t, 0, 1, 0), tracklet(t, 0, 2, 100)])
    bare.close()
    bare_args = ["--store", str(tmp_path / "bare"), "--database", f"sqlite:///{tmp_path / 'bare.db'}"]
    assert "no reviewed identity to export" in error(bare_args + ["--export", str(tmp_path / "y")])
    assert "at least 2 reviewed identities" in error(bare_args + ["--calibrate", "0.01"])
