"""reid/store/store.py: models, writing tracklets (exact rows, one transaction, idempotent), the
folder/database pairing, refused databases, search against a brute-force ranking, identities.

Every test that touches a database runs on SQLite and on PostgreSQL (the ``database_url`` fixture)."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from reid.store import NewTracklet, Store  # noqa: E402
from reid.store.schema import SCHEMA_VERSION  # noqa: E402

from ._data import (OTHER_WEIGHTS, T0, WEIGHTS, brute_force, execute, flat, random_tracklets,  # noqa: E402
                    stored_features, table_rows, tracklet, unit)

DIM = 8


@pytest.fixture
def store(tmp_path, database_url):
    s = Store(str(tmp_path / "store"), database_url)
    yield s
    s.close()


# -- models -------------------------------------------------------------------------------------

def test_register_model_is_added_once_and_a_threshold_updates_it(store):
    info = store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.6, threshold_source="calibrated on A")
    assert (info.name, info.dim, info.threshold, info.threshold_source) == ("demo", DIM, 0.6, "calibrated on A")
    assert info.identity == WEIGHTS
    # the same weights again: the same row; no threshold given keeps the recorded one
    again = store.register_model("demo", dict(WEIGHTS), dim=DIM)
    assert again.id == info.id and again.threshold == 0.6 and again.threshold_source == "calibrated on A"
    # a threshold given replaces it (and where it came from)
    updated = store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.72, threshold_source="reviewed")
    assert updated.id == info.id
    assert store.model("demo").threshold == 0.72 and store.model("demo").threshold_source == "reviewed"
    assert table_rows(store.engine, "SELECT name, dim, threshold, threshold_source FROM models") == [
        ("demo", DIM, 0.72, "reviewed")]
    assert store.model(None).id == info.id  # the only model


def test_register_model_with_other_weights_under_the_same_name_is_refused(store):
    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.6)
    with pytest.raises(ValueError) as e:
        store.register_model("demo", OTHER_WEIGHTS, dim=DIM, threshold=0.9)
    assert str(e.value) == ("model 'demo' in this store has other weights (weights_sha256 abababababababab, 8-d); "
                            "give these weights another --model-name.")
    # the same weights with another width are other weights too
    with pytest.raises(ValueError, match=r"model 'demo' in this store has other weights .*8-d"):
        store.register_model("demo", WEIGHTS, dim=DIM + 1)
    # nothing changed, and the other weights go in under another name
    assert store.model("demo").threshold == 0.6 and store.model("demo").identity == WEIGHTS
    other = store.register_model("demo-2", OTHER_WEIGHTS, dim=DIM + 1)
    assert [m.name for m in store.models()] == ["demo", "demo-2"] and other.dim == DIM + 1


def test_register_model_bad_threshold_and_name_and_unknown_model(store):
    with pytest.raises(ValueError, match=r"^threshold 1.5 must be a cosine similarity in \[-1, 1\]\.$"):
        store.register_model("demo", WEIGHTS, dim=DIM, threshold=1.5)
    with pytest.raises(ValueError, match=r"^model name '' must have 1\.\.200 characters\.$"):
        store.register_model("", WEIGHTS, dim=DIM)
    assert store.models() == []
    with pytest.raises(KeyError) as e:
        store.model("demo")
    assert e.value.args[0] == "model 'demo' is not in this store (its models: none yet: ingest with --model-name)."
    store.register_model("a", WEIGHTS, dim=DIM)
    store.register_model("b", OTHER_WEIGHTS, dim=DIM)
    with pytest.raises(KeyError) as e:
        store.model(None)  # two models: a name is needed
    assert e.value.args[0] == "model None is not in this store (its models: a, b)."


# -- writing ------------------------------------------------------------------------------------

def _two_tracklets(rng):
    a = tracklet("seq1/track7", 2, [T0 + 3.5, T0 + 1.25, T0 + 2.0], rng.normal(size=(3, DIM)) * 5,
                 boxes=[(1.5, 2.5, 30.0, 70.0), (3.0, 4.0, 31.0, 71.0), (5.25, 6.0, 32.0, 72.5)],
                 frames=[36, 14, 21], qualities=[1.0, 0.5, 2.0], camera_name="gate")
    b = tracklet("seq2/track1", 5, [T0 + 10.0], rng.normal(size=(1, DIM)), frames=[None])
    return [a, b]


def test_add_tracklets_writes_exactly_the_rows_crops_and_features(store):
    model = store.register_model("demo", WEIGHTS, dim=DIM)
    tracklets = _two_tracklets(np.random.default_rng(0))
    count = store.add_tracklets("demo", tracklets)
    assert (count.tracklets, count.sightings, count.features, count.skipped_tracklets, count.linked) == (2, 4, 4, 0, 0)
    assert len(count.tracklet_ids) == 2
    assert store.counts() == {"cameras": 2, "sightings": 4, "tracklets": 2, "features": 4, "identities": 2, "links": 0}
    e = store.engine
    assert table_rows(e, "SELECT id, name FROM cameras ORDER BY id") == [(2, "gate"), (5, "camera 5")]
    trows = table_rows(e, "SELECT id, camera_id, source, start, \"end\", identity_id FROM tracklets ORDER BY id")
    assert [r[0] for r in trows] == count.tracklet_ids
    # start and end: the first and last sighting time; each tracklet its own identity
    assert [r[1:5] for r in trows] == [(2, "seq1/track7", T0 + 1.25, T0 + 3.5),
                                       (5, "seq2/track1", T0 + 10.0, T0 + 10.0)]
    assert len({r[5] for r in trows}) == 2
    assert sorted(r[5] for r in trows) == sorted(r[0] for r in table_rows(e, "SELECT id FROM identities"))
    srows = table_rows(e, "SELECT source, tracklet_id, camera_id, time, frame, x, y, w, h, crop FROM sightings "
                          "ORDER BY id")
    tid = {r[2]: r[0] for r in trows}
    expected = []
    for t in tracklets:
        for x in t.sightings:
            expected.append((x.source, tid[t.source], t.camera, x.time, x.frame, *x.box,
                             hashlib.sha256(x.crop).hexdigest()))
    assert srows == expected
    # the crop files: named by the SHA-256 of their bytes, holding exactly those bytes
    for x, row in zip(flat(tracklets), srows):
        path = os.path.join(store.folder, "crops", row[-1][:2], row[-1] + ".jpg")
        with open(path, "rb") as f:
            assert f.read() == x.crop
        assert store.crops.read(row[-1]) == x.crop
    # features: float32 bytes of the L2-normalised vector, one per sighting
    got = stored_features(e, model.id)
    want = unit(np.stack([x.feature for x in flat(tracklets)]))
    assert got["feats"].dtype == np.float32 and got["feats"].shape == (4, DIM)
    np.testing.assert_allclose(got["feats"], want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got["feats"], axis=1), 1.0, atol=1e-6)
    blobs = table_rows(e, "SELECT vector FROM features ORDER BY id")
    assert all(len(bytes(b[0])) == 4 * DIM for b in blobs)
    # the tracklet feature: the quality-weighted sum of the unit sighting features, normalised
    tf = {r[0]: np.frombuffer(bytes(r[1]), np.float32) for r in
          table_rows(e, "SELECT tracklet_id, vector FROM tracklet_features WHERE model_id = :m", m=model.id)}
    a = tracklets[0]
    pooled = sum(q * u for q, u in zip([s.quality for s in a.sightings],
                                       unit(np.stack([s.feature for s in a.sightings])).astype(np.float64)))
    np.testing.assert_allclose(tf[tid["seq1/track7"]], pooled / np.linalg.norm(pooled), atol=1e-6)
    np.testing.assert_allclose(tf[tid["seq2/track1"]], unit(tracklets[1].sightings[0].feature), atol=1e-6)
    # what the API reads back
    sid = table_rows(e, "SELECT id FROM sightings WHERE source = 'seq1/track7/2'")[0][0]
    np.testing.assert_allclose(store.sighting_vector("demo", sid), want[2], atol=1e-6)


def test_add_tracklets_twice_writes_nothing_the_second_time(store):
    store.register_model("demo", WEIGHTS, dim=DIM)
    tracklets = _two_tracklets(np.random.default_rng(1))
    first = store.add_tracklets("demo", tracklets)
    before = store.counts()
    rows = table_rows(store.engine, "SELECT id, source, tracklet_id, time FROM sightings ORDER BY id")
    second = store.add_tracklets("demo", _two_tracklets(np.random.default_rng(1)))
    assert (second.tracklets, second.sightings, second.features, second.skipped_tracklets, second.tracklet_ids) == \
        (0, 0, 0, 2, [])
    assert first.tracklets == 2
    assert store.counts() == before
    assert table_rows(store.engine, "SELECT id, source, tracklet_id, time FROM sightings ORDER BY id") == rows
    # a tracklet given twice in one call is written once
    dup = tracklet("seq3/track2", 1, [T0 + 50], np.ones((1, DIM)))
    third = store.add_tracklets("demo", [dup, tracklet("seq3/track2", 1, [T0 + 50], np.ones((1, DIM)))])
    assert (third.tracklets, third.sightings) == (1, 1)
    assert store.counts()["sightings"] == before["sightings"] + 1


def test_a_second_model_adds_only_its_features(store):
    a = store.register_model("a", WEIGHTS, dim=DIM)
    b = store.register_model("b", OTHER_WEIGHTS, dim=3)
    rng = np.random.default_rng(2)
    store.add_tracklets("a", _two_tracklets(rng))
    before = store.counts()
    ids_before = table_rows(store.engine, "SELECT id FROM sightings ORDER BY id")
    with_b = _two_tracklets(np.random.default_rng(2))
    for x in flat(with_b):
        x.feature = rng.normal(size=3)
    count = store.add_tracklets("b", with_b)
    assert (count.tracklets, count.sightings, count.features, count.skipped_tracklets) == (0, 0, 4, 2)
    after = store.counts()
    assert after == dict(before, features=before["features"] + 4)
    assert table_rows(store.engine, "SELECT id FROM sightings ORDER BY id") == ids_before
    got = stored_features(store.engine, b.id)
    assert got["feats"].shape == (4, 3)
    np.testing.assert_allclose(got["feats"], unit(np.stack([x.feature for x in flat(with_b)])), atol=1e-6)
    assert len(stored_features(store.engine, a.id)["feats"]) == 4
    assert table_rows(store.engine, "SELECT model_id, COUNT(*) FROM tracklet_features GROUP BY model_id "
                                    "ORDER BY model_id") == [(a.id, 2), (b.id, 2)]
    # and again: nothing more
    again = store.add_tracklets("b", with_b)
    assert (again.features, again.skipped_tracklets) == (0, 2) and store.counts() == after


def test_a_feature_of_the_wrong_width_is_refused_before_anything_is_written(store):
    store.register_model("demo", WEIGHTS, dim=DIM)
    good = tracklet("ok", 1, [T0], np.ones((1, DIM)))
    bad = tracklet("bad", 1, [T0 + 1, T0 + 2], np.ones((2, DIM + 1)))
    with pytest.raises(ValueError) as e:
        store.add_tracklets("demo", [good, bad])
    assert str(e.value) == "sighting 'bad/0': a 9-d feature; model 'demo' has 8-d features."
    assert store.counts() == {"cameras": 0, "sightings": 0, "tracklets": 0, "features": 0, "identities": 0,
                              "links": 0}
    assert store.crops.orphans([]) == []  # checked before any crop file is written
    with pytest.raises(ValueError, match=r"^tracklet 'empty' has no sightings\.$"):
        store.add_tracklets("demo", [NewTracklet("empty", 1, [])])
    with pytest.raises(ValueError, match=r"^tracklet 'nan' has a sighting time that is not a number\.$"):
        store.add_tracklets("demo", [tracklet("nan", 1, [float("nan")], np.ones((1, DIM)))])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 0.0])
def test_a_feature_without_a_direction_is_refused(store, value):
    """A NaN, inf or all-zero feature would rank as NaN (and no index over it could be built)."""
    store.register_model("demo", WEIGHTS, dim=DIM)
    feats = np.ones((2, DIM))
    feats[1] = 0.0 if value == 0.0 else 1.0
    feats[1, 3] = value
    with pytest.raises(ValueError) as e:
        store.add_tracklets("demo", [tracklet("t", 1, [T0, T0 + 1], feats)])
    assert str(e.value) == ("sighting 't/1': its feature is all zeros or holds NaN or inf; a feature must be a "
                            "finite, non-zero vector.")
    assert store.counts()["sightings"] == 0


def test_a_batch_that_fails_midway_leaves_nothing(store):
    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.5)
    rng = np.random.default_rng(3)
    store.add_tracklets("demo", [tracklet("old", 1, [T0], rng.normal(size=(1, DIM)))])
    before = store.counts()
    snapshot = table_rows(store.engine, "SELECT id, source FROM sightings ORDER BY id")
    # the second tracklet reuses a sighting key already in the store: the insert fails after the
    # first tracklet, its cameras, identities and sightings were flushed
    batch = [tracklet("new", 3, [T0 + 5, T0 + 6], rng.normal(size=(2, DIM)), seed=1),
             tracklet("clash", 4, [T0 + 7], rng.normal(size=(1, DIM)), seed=2)]
    batch[1].sightings[0].source = "old/0"
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError):
        store.add_tracklets("demo", batch)
    assert store.counts() == before
    assert table_rows(store.engine, "SELECT id, source FROM sightings ORDER BY id") == snapshot
    assert table_rows(store.engine, "SELECT id FROM cameras ORDER BY id") == [(1,)]
    # the crop files were written first: orphans, which the same batch made right finds again
    known = [r[0] for r in table_rows(store.engine, "SELECT crop FROM sightings")]
    orphans = store.crops.orphans(known)
    assert sorted(orphans) == sorted({hashlib.sha256(x.crop).hexdigest() for x in flat(batch)})
    batch[1].sightings[0].source = "clash/0"
    count = store.add_tracklets("demo", batch)
    assert (count.tracklets, count.sightings) == (2, 3)
    known = [r[0] for r in table_rows(store.engine, "SELECT crop FROM sightings")]
    assert store.crops.orphans(known) == []


def test_an_exception_in_the_linking_step_rolls_the_whole_batch_back(store, monkeypatch):
    import reid.store.store as store_module

    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.5)
    store.add_tracklets("demo", [tracklet("old", 1, [T0], np.ones((1, DIM)))])
    before = store.counts()

    def boom(*args, **kwargs):
        raise RuntimeError("linker failed")

    monkeypatch.setattr(store_module, "link_new_tracklets", boom)
    with pytest.raises(RuntimeError, match="linker failed"):
        store.add_tracklets("demo", [tracklet("new", 2, [T0 + 9], np.ones((1, DIM)))])
    assert store.counts() == before
    assert table_rows(store.engine, "SELECT source FROM tracklets") == [("old",)]
    assert table_rows(store.engine, "SELECT COUNT(*) FROM tracklet_features") == [(1,)]


# -- opening ------------------------------------------------------------------------------------

@pytest.fixture
def engines(monkeypatch):
    """Every engine opened in this test (reid.store.database.create_database_engine watched)."""
    import reid.store.database as database_module

    made = []
    real = database_module.create_database_engine

    def watched(url):
        made.append(real(url))
        return made[-1]

    monkeypatch.setattr(database_module, "create_database_engine", watched)
    return made


@pytest.fixture
def other_database_url(request, tmp_path, database_url):
    """A second fresh database of the same kind as `database_url`."""
    if database_url.startswith("sqlite"):
        return f"sqlite:///{tmp_path / 'other.db'}"
    return request.getfixturevalue("postgres_cluster").create_database()


def test_a_store_folder_is_paired_with_its_database(tmp_path, database_url, other_database_url, engines):
    from reid.store.database import shown

    folder = str(tmp_path / "store")
    first = Store(folder, database_url)
    store_id = table_rows(first.engine, "SELECT value FROM store_meta WHERE key = 'store_id'")[0][0]
    first.close()
    with open(os.path.join(folder, "store.json")) as f:
        assert json.load(f) == {"store_id": store_id, "format_version": 1}
    Store(folder, database_url).close()  # the same pair opens again
    with pytest.raises(ValueError) as e:
        Store(folder, other_database_url)
    message = str(e.value)
    assert "\n" not in message
    assert message.startswith(f"store folder {os.path.abspath(folder)} belongs to another database than "
                              f"{shown(other_database_url)} (store ids {store_id} and ")
    assert message.endswith("); give the folder and the database of one store.")
    assert engines[-1].pool.checkedin() == 0  # the refused store left no connection open
    assert len(engines) == 3
    # the other database makes a store with a folder of its own
    other = Store(str(tmp_path / "other-store"), other_database_url)
    other.close()
    with open(os.path.join(folder, "store.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(ValueError, match=r"store\.json is damaged; it must be the store\.json this toolkit wrote\.$"):
        Store(folder, database_url)


def test_a_database_of_another_schema_version_is_refused(tmp_path, database_url, engines):
    from reid.store.database import shown

    s = Store(str(tmp_path / "store"), database_url)
    execute(s.engine, "UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    s.close()
    with pytest.raises(ValueError) as e:
        Store(str(tmp_path / "store"), database_url)
    assert str(e.value) == (f"database {shown(database_url)} holds a store of schema version 99; this circle-reid "
                            f"reads version {SCHEMA_VERSION}: use the version that wrote it.")
    assert len(engines) == 2 and engines[-1].pool.checkedin() == 0  # refused: no connection left open


def test_a_database_that_is_neither_sqlite_nor_postgresql_is_refused_with_one_line(tmp_path):
    with pytest.raises(ValueError) as e:
        Store(str(tmp_path / "s1"), "mysql+pymysql://reid:secret@127.0.0.1:3306/reid")
    message = str(e.value)
    assert message == ("database mysql+pymysql://reid:***@127.0.0.1:3306/reid: 'mysql' is not supported; "
                       "a store runs on sqlite or postgresql.")
    assert "secret" not in message
    with pytest.raises(ValueError) as e:
        Store(str(tmp_path / "s2"), "not a database")
    assert str(e.value) == ("database 'not a database' is not a database URL; give sqlite:///FILE or "
                            "postgresql+psycopg://USER@HOST:PORT/NAME.")
    open(tmp_path / "file", "w").close()
    with pytest.raises(ValueError, match=r"^store folder .*file is a file; give a folder\.$"):
        Store(str(tmp_path / "file"))


def test_a_postgresql_server_that_does_not_answer_is_one_line(tmp_path):
    pytest.importorskip("psycopg")
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ValueError) as e:
        Store(str(tmp_path / "s"), f"postgresql://reid:secret@127.0.0.1:{port}/reid")
    message = str(e.value)
    assert message.startswith(f"database postgresql://reid:***@127.0.0.1:{port}/reid cannot be opened: ")
    assert "\n" not in message and "secret" not in message


# -- reading ------------------------------------------------------------------------------------

@pytest.fixture
def filled(store):
    """A store with 40 random tracklets on cameras 1..3 and the inputs they came from."""
    model = store.register_model("demo", WEIGHTS, dim=DIM)
    tracklets = random_tracklets(np.random.default_rng(4), 40, DIM)
    store.add_tracklets("demo", tracklets, link=False)
    ids = dict(table_rows(store.engine, "SELECT source, id FROM sightings"))
    sightings = [(x, t.camera) for t in tracklets for x in t.sightings]
    return {"store": store, "model": model,
            "feats": np.stack([x.feature for x, _ in sightings]),
            "ids": np.array([ids[x.source] for x, _ in sightings]),
            "camera": np.array([c for _, c in sightings]),
            "time": np.array([x.time for x, _ in sightings])}


def _check_search(filled, query, k, keep, **filters):
    got = filled["store"].search("demo", query, k=k, **filters)
    want_ids, want_scores = brute_force(filled["feats"], filled["ids"], query, k, keep)
    assert [h["id"] for h in got] == want_ids
    np.testing.assert_allclose([h["score"] for h in got], want_scores, atol=1e-5)
    return got


def test_search_ranks_as_brute_force_cosine_with_camera_and_time_filters(filled):
    rng = np.random.default_rng(5)
    times = np.sort(filled["time"])
    lo, hi = float(times[len(times) // 4]), float(times[3 * len(times) // 4])  # bounds that are sighting times
    for _ in range(3):
        q = rng.normal(size=DIM)
        _check_search(filled, q, 10, None)
        _check_search(filled, q, 7, np.isin(filled["camera"], [1, 3]), cameras=[1, 3])
        hits = _check_search(filled, q, 500, (filled["time"] >= lo) & (filled["time"] <= hi), start=lo, end=hi)
        assert {h["time"] for h in hits} >= {lo, hi}  # both bounds are inside the window
        _check_search(filled, q, 5, (filled["camera"] == 2) & (filled["time"] >= lo), cameras=[2], start=lo)
        _check_search(filled, q, 5, filled["time"] <= lo, end=lo)
    assert filled["store"].search("demo", q, k=5, cameras=[9]) == []
    assert len(filled["store"].search("demo", q, k=1000)) == len(filled["ids"])


def test_search_results_carry_the_sighting_rows_and_exclude_sighting(filled):
    store = filled["store"]
    row = 11
    sid = int(filled["ids"][row])
    query = filled["feats"][row]
    top = store.search("demo", query, k=4)
    assert top[0]["id"] == sid and top[0]["score"] == pytest.approx(1.0, abs=1e-5)
    fields = table_rows(store.engine, "SELECT s.camera_id, s.time, s.frame, s.x, s.y, s.w, s.h, s.crop, s.tracklet_id, "
                                      "t.identity_id FROM sightings s JOIN tracklets t ON t.id = s.tracklet_id "
                                      "WHERE s.id = :i", i=sid)[0]
    h = top[0]
    assert (h["camera"], h["time"], h["frame"], *h["box"], h["crop"], h["tracklet"], h["identity"]) == fields
    without = store.search("demo", query, k=4, exclude_sighting=sid)
    keep = filled["ids"] != sid
    assert [x["id"] for x in without] == brute_force(filled["feats"], filled["ids"], query, 4, keep)[0]
    assert len(without) == 4 and sid not in [x["id"] for x in without]
    assert [x["id"] for x in without[:3]] == [x["id"] for x in top[1:4]]
    with pytest.raises(ValueError, match=r"^query has 3 values; this model's features have 8\.$"):
        store.search("demo", np.ones(3), k=4)


def test_identity_groups_its_sightings_per_camera_in_time_order(store):
    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.5)
    f = np.ones(DIM)
    # given out of time order, on cameras 3 and 1; one person (the same feature): linked online
    first = tracklet("c3-late", 3, [T0 + 40, T0 + 30], np.stack([f, f]), seed=1)
    second = tracklet("c1", 1, [T0 + 12, T0 + 10, T0 + 11], np.stack([f, f, f]), seed=2)
    third = tracklet("c3-early", 3, [T0 + 5], f[None], seed=3)
    stranger = tracklet("other", 2, [T0], -f[None], seed=4)
    count = store.add_tracklets("demo", [first, second, third, stranger])
    assert count.linked == 2
    ids = dict(table_rows(store.engine, "SELECT source, identity_id FROM tracklets"))
    assert ids["c3-late"] == ids["c1"] == ids["c3-early"] != ids["other"]
    ident = store.identity(ids["c1"])
    assert ident["id"] == ids["c1"] and ident["merged_into"] is None
    assert [t["source"] for t in ident["tracklets"]] == ["c3-early", "c1", "c3-late"]  # by start time
    assert [c["camera"] for c in ident["cameras"]] == [1, 3]
    assert [s["time"] for s in ident["cameras"][0]["sightings"]] == [T0 + 10, T0 + 11, T0 + 12]
    assert [s["time"] for s in ident["cameras"][1]["sightings"]] == [T0 + 5, T0 + 30, T0 + 40]
    assert all(s["identity"] == ids["c1"] for c in ident["cameras"] for s in c["sightings"])
    # the earliest tracklet anchors the identity; the two that joined it have the linker's links
    tid = dict(table_rows(store.engine, "SELECT source, id FROM tracklets"))
    assert ident["id"] == table_rows(store.engine, "SELECT identity_id FROM tracklets WHERE source = 'c3-early'")[0][0]
    assert sorted(x["tracklet"] for x in ident["links"]) == sorted([tid["c1"], tid["c3-late"]])
    assert {(x["made_by"], x["status"]) for x in ident["links"]} == {("linker", "proposed")}
    with pytest.raises(KeyError) as e:
        store.identity(10_000)
    assert e.value.args[0] == "identity 10000 is not in the store."


def test_two_writers_adding_the_same_new_camera_both_succeed(tmp_path, database_url, monkeypatch):
    """Writer A holds its transaction open with camera 7 inserted; writer B, which did not see it,
    inserts camera 7 too, waits for A's commit, and must then go on (not fail on the duplicate)."""
    import threading

    import reid.store.store as store_module

    a = Store(str(tmp_path / "store"), database_url)
    b = Store(str(tmp_path / "store"), database_url)
    a.register_model("demo", WEIGHTS, dim=DIM)
    inside, go = threading.Event(), threading.Event()
    real = store_module.link_new_tracklets

    def held(*args, **kwargs):  # the last step of A's transaction: wait there
        if threading.current_thread().name == "writer-a":
            inside.set()
            assert go.wait(20)
        return real(*args, **kwargs)

    monkeypatch.setattr(store_module, "link_new_tracklets", held)
    errors = []

    def write_a():
        try:
            a.add_tracklets("demo", [tracklet("x", 7, [T0], np.ones((1, DIM)), camera_name="by A")])
        except Exception as e:  # reported below
            errors.append(e)

    writer = threading.Thread(target=write_a, name="writer-a")
    writer.start()
    try:
        assert inside.wait(20)
        threading.Timer(0.3, go.set).start()  # B's insert waits for A's commit meanwhile
        b.add_tracklets("demo", [tracklet("y", 7, [T0 + 100], np.ones((1, DIM)), seed=1, camera_name="by B")])
    finally:
        go.set()
        writer.join(20)
        b.close()
    try:
        assert errors == []
        assert table_rows(a.engine, "SELECT id, name FROM cameras") == [(7, "by A")]
        assert sorted(table_rows(a.engine, "SELECT source FROM tracklets")) == [("x",), ("y",)]
    finally:
        a.close()
