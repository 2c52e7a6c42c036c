"""reid/store/vectors.py: a model's vectors kept in step with the database.

Search is checked against a brute-force cosine ranking of the feature rows read with plain SQL
(equal for "exact", recall@10 >= 0.9 for the faiss backends), with camera and time filters and
after rows are appended; refresh() against a second writer; save()/load() against a database
that changed behind the saved file's back. On SQLite and on PostgreSQL (``database_url``)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from reid.store import Store  # noqa: E402
from reid.store import filtered_search  # noqa: E402
from reid.store import vectors as vectors_module  # noqa: E402
from reid.store.vectors import ModelVectors, model_vectors_info  # noqa: E402

from ._data import (OTHER_WEIGHTS, T0, WEIGHTS, brute_force, execute, random_tracklets,  # noqa: E402
                    stored_features, table_rows, tracklet, unit)

DIM = 16
APPROXIMATE = ["hnsw", "ivf"]


@pytest.fixture(autouse=True, scope="module")
def one_faiss_thread():
    """One faiss (OpenMP) thread: small builds on a small shared machine are far faster so."""
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


CENTERS = np.random.default_rng(123).normal(size=(30, DIM))


@pytest.fixture
def store(tmp_path, database_url):
    s = Store(str(tmp_path / "store"), database_url)
    s.register_model("demo", WEIGHTS, dim=DIM)
    yield s
    s.close()


def fill(store, count, seed, prefix="r", model="demo"):
    """Add `count` clustered random tracklets (1..3 sightings each) under `model`; no linking."""
    tracklets = random_tracklets(np.random.default_rng(seed), count, DIM, prefix=prefix, centers=CENTERS)
    store.add_tracklets(model, tracklets, link=False)
    return sum(len(t.sightings) for t in tracklets)


def model_vectors(store, backend="exact", model="demo"):
    m = store.model(model)
    return ModelVectors(store.engine, m.id, m.dim, os.path.join(store.folder, "vectors"), backend=backend)


def truth(store, model="demo"):
    return stored_features(store.engine, store.model(model).id)


def queries(n, seed):
    rng = np.random.default_rng(seed)
    return CENTERS[rng.integers(0, len(CENTERS), n)] + 0.4 * rng.normal(size=(n, DIM))


def keep(rows, cameras=None, start=None, end=None):
    """The rows a search filter keeps (None: all), computed here."""
    if cameras is None and start is None and end is None:
        return None
    m = np.ones(len(rows["time"]), bool)
    if cameras is not None:
        m &= np.isin(rows["camera"], cameras)
    if start is not None:
        m &= rows["time"] >= start
    if end is not None:
        m &= rows["time"] <= end
    return m


def filters(rows):
    """Search keywords: none, cameras, a time window (bounds that are sighting times), both, an end."""
    t = np.sort(rows["time"])
    lo, hi = float(t[len(t) // 5]), float(t[len(t) // 2])
    return [{}, {"cameras": [1, 3]}, {"start": lo, "end": hi}, {"cameras": [2], "start": lo}, {"end": lo}]


def check_exact(vec, rows, qs, k=10):
    for q in qs:
        for kw in filters(rows):
            hits = vec.search(q, k, **kw)
            ids, scores = brute_force(rows["feats"], rows["sighting_id"], q, k, keep(rows, **kw))
            assert [int(i) for i in hits.sighting_ids] == ids, kw
            np.testing.assert_allclose(hits.scores, scores, atol=1e-5)


def recall(vec, rows, qs, k=10, **kw):
    """Mean recall@k of `vec` against brute force, with the filter `kw`; also checks that every hit
    satisfies the filter and carries its true cosine similarity."""
    kept = keep(rows, **kw)
    vector_of = dict(zip(rows["sighting_id"].tolist(), rows["feats"].astype(np.float64)))
    found = []
    for q in qs:
        hits = vec.search(q, k, **kw)
        want, _ = brute_force(rows["feats"], rows["sighting_id"], q, k, kept)
        got = [int(i) for i in hits.sighting_ids]
        assert len(got) == len(set(got)) == min(k, len(want))
        if kept is not None:
            allowed = set(rows["sighting_id"][kept].tolist())
            assert set(got) <= allowed
        qn = q / np.linalg.norm(q)
        np.testing.assert_allclose(hits.scores, [vector_of[i] @ qn for i in got], atol=1e-5)
        assert np.all(np.diff(hits.scores) <= 1e-7)  # best first
        found.append(len(set(got) & set(want)) / len(want))
    return float(np.mean(found))


# -- search -------------------------------------------------------------------------------------

@pytest.mark.parametrize("gathered", [True, False])
def test_exact_filters_gathered_or_scored_in_place_agree_with_brute_force(store, monkeypatch, gathered):
    """A filter keeping many rows is scored in place (no copy of the matrix), one keeping few is gathered:
    both give brute force's answer."""
    fill(store, 60, seed=41)
    monkeypatch.setattr(filtered_search, "EXACT_FILTER_ROWS", 10**9 if gathered else 0)
    vec = model_vectors(store)
    vec.load()
    check_exact(vec, truth(store), queries(3, seed=42))


def test_exact_search_equals_brute_force_with_filters_and_after_appends(store):
    n = fill(store, 60, seed=1)
    vec = model_vectors(store)
    assert vec.load() == "built"
    assert len(vec) == n and vec.index is None
    rows = truth(store)
    check_exact(vec, rows, queries(4, seed=2))
    added = fill(store, 15, seed=3, prefix="more")
    assert vec.refresh() == added
    assert len(vec) == n + added
    rows = truth(store)
    check_exact(vec, rows, queries(4, seed=4))
    # a query row finds itself first; the whole gallery when k is larger
    own = vec.search(rows["feats"][-1], 1)
    assert int(own.sighting_ids[0]) == rows["sighting_id"][-1] and own.scores[0] == pytest.approx(1.0, abs=1e-6)
    assert len(vec.search(queries(1, 5)[0], 10_000).sighting_ids) == n + added
    with pytest.raises(ValueError, match=r"^query has 15 values; this model's features have 16\.$"):
        vec.search(np.ones(DIM - 1), 3)


@pytest.mark.slow
@pytest.mark.parametrize("backend", APPROXIMATE)
def test_approximate_search_recall_with_filters_and_appended_rows(store, backend, monkeypatch):
    n = fill(store, 400, seed=6)
    vec = model_vectors(store, backend)
    assert vec.load() == "built"
    assert vec.index is not None and vec.indexed == n == len(vec)
    rows = truth(store)
    qs = queries(25, seed=7)
    assert recall(vec, rows, qs) >= 0.9
    # filters through the index (over-fetch, then the filter), not the exact path for small filters
    monkeypatch.setattr(filtered_search, "EXACT_FILTER_ROWS", 0)
    for kw in filters(rows)[1:]:
        assert recall(vec, rows, qs, **kw) >= 0.9, kw
    # appended rows: found (each finds itself first) and ranked with the rest
    added = fill(store, 40, seed=8, prefix="more")
    assert vec.refresh() == added and len(vec) == n + added
    rows = truth(store)
    for i in range(n, n + added, 7):
        hit = vec.search(rows["feats"][i], 1)
        assert int(hit.sighting_ids[0]) == rows["sighting_id"][i] and hit.scores[0] == pytest.approx(1.0, abs=1e-5)
    assert recall(vec, rows, qs) >= 0.9
    assert recall(vec, rows, qs, cameras=[1, 3]) >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("backend", APPROXIMATE)
def test_rows_not_in_the_index_yet_are_searched_exactly(store, backend, monkeypatch):
    n = fill(store, 150, seed=9)
    vec = model_vectors(store, backend)
    vec.load()
    assert vec.indexed == n
    # rows read but not added to the index (as while a new index is being built)
    monkeypatch.setattr(vec, "_maybe_reindex", lambda force=False: None)
    added = fill(store, 30, seed=10, prefix="tail")
    assert vec.refresh() == added and vec.indexed == n and len(vec) == n + added
    rows = truth(store)
    tail = set(rows["sighting_id"][n:].tolist())
    monkeypatch.setattr(filtered_search, "EXACT_FILTER_ROWS", 0)  # filters through the index too
    for q in list(queries(10, seed=11)) + list(rows["feats"][n::5]):
        for kw in filters(rows)[:3]:
            got = [int(i) for i in vec.search(q, 10, **kw).sighting_ids]
            want, _ = brute_force(rows["feats"], rows["sighting_id"], q, 10, keep(rows, **kw))
            # every tail row of the true top 10 is there (the tail is scored exactly)
            assert [i for i in want if i in tail] == [i for i in got if i in tail], kw


# -- in step with the database ------------------------------------------------------------------

def test_refresh_reads_the_rows_a_second_writer_added(store):
    n = fill(store, 30, seed=12)
    vec = model_vectors(store)
    vec.load()
    other = Store(store.folder, store.database)  # another process on the same store
    try:
        added = fill(other, 20, seed=13, prefix="w2")
    finally:
        other.close()
    assert len(vec) == n
    assert vec.refresh() == added
    assert len(vec) == n + added
    rows = truth(store)
    np.testing.assert_array_equal(vec.rows.sighting_id[:len(vec)], rows["sighting_id"])
    check_exact(vec, rows, queries(3, seed=14))
    assert vec.refresh() == 0
    # the Store's own search sees them as well
    q = rows["feats"][-1]
    assert store.search("demo", q, k=1)[0]["id"] == rows["sighting_id"][-1]


def test_refresh_rebuilds_when_the_database_disagrees(store, monkeypatch):
    fill(store, 30, seed=15)
    vec = model_vectors(store)
    vec.load()
    assert vec.rebuilds == 0
    fids = truth(store)["feature_id"]
    # the newest row removed: the cheap check (largest id went down) sees it
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=int(fids[-1]))
    vec.refresh()
    assert vec.rebuilds == 1 and model_vectors_info(vec)["rebuilds"] == 1
    assert len(vec) == len(fids) - 1
    # a row in the middle removed: seen by the whole-fingerprint check
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=int(fids[5]))
    vec.refresh(verify=True)
    assert vec.rebuilds == 2
    rows = truth(store)
    assert len(vec) == len(rows["feature_id"]) == len(fids) - 2
    np.testing.assert_array_equal(vec.rows.feature_id[:len(vec)], rows["feature_id"])
    check_exact(vec, rows, queries(2, seed=16))
    # ... which runs every VERIFY_SECONDS on its own
    monkeypatch.setattr(vectors_module, "VERIFY_SECONDS", 0.0)
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=int(fids[7]))
    vec.refresh()
    assert vec.rebuilds == 3 and len(vec) == len(fids) - 3
    # in step: no rebuild
    vec.refresh()
    assert vec.rebuilds == 3


def _gap_below_the_max(store):
    """Feature rows of "demo", then of "other", then of "demo" again: "demo"'s ids have a gap. Returns
    a sighting that has no "demo" feature and the id of its "other" feature (inside the gap)."""
    store.register_model("other", OTHER_WEIGHTS, dim=DIM)
    fill(store, 10, seed=17)
    t = random_tracklets(np.random.default_rng(18), 3, DIM, prefix="o")
    store.add_tracklets("other", t, link=False)
    fill(store, 10, seed=19, prefix="late")
    other_id = store.model("other").id
    return table_rows(store.engine, "SELECT sighting_id, id FROM features WHERE model_id = :m ORDER BY id",
                      m=other_id)[0]


def _insert_below_the_max(store, sighting_id, feature_id):
    """A "demo" feature row with an id below the largest one held, written behind the store's back
    (as a transaction that committed late would)."""
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=feature_id)
    execute(store.engine, "INSERT INTO features (id, sighting_id, model_id, vector) VALUES (:i, :s, :m, :v)",
            i=feature_id, s=sighting_id, m=store.model("demo").id,
            v=np.full(DIM, 1 / np.sqrt(DIM), np.float32).tobytes())


def test_refresh_reads_rows_committed_below_the_largest_id(store):
    """A row whose id is below the largest held (another writer committed late) is read, not rebuilt for."""
    sighting, gap_id = _gap_below_the_max(store)
    vec = model_vectors(store)
    vec.load()
    n = len(vec)
    assert gap_id < int(vec.rows.feature_id[n - 1])
    _insert_below_the_max(store, sighting, gap_id)
    assert vec.refresh(verify=True) == 1
    assert vec.rebuilds == 0 and len(vec) == n + 1
    hit = vec.search(np.ones(DIM), 1)
    assert int(hit.sighting_ids[0]) == sighting and hit.scores[0] == pytest.approx(1.0, abs=1e-6)


# -- files --------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["exact", "hnsw"])
def test_save_then_load_in_step_is_loaded(store, backend):
    n = fill(store, 40, seed=20)
    vec = model_vectors(store, backend)
    vec.load()
    path = vec.save()
    assert path == os.path.join(store.folder, "vectors", f"model-{store.model('demo').id}.npz")
    assert os.path.isfile(path)
    again = model_vectors(store, backend)
    assert again.load() == "loaded"
    assert again.rebuilds == 0 and len(again) == n
    for name in ("feature_id", "sighting_id", "camera", "time", "feats"):
        np.testing.assert_array_equal(getattr(again.rows, name)[:n], getattr(vec.rows, name)[:n])
    if backend != "exact":
        assert again.index is not None and again.indexed == n
    for q in queries(5, seed=21):
        a, b = vec.search(q, 10), again.search(q, 10)
        np.testing.assert_array_equal(a.sighting_ids, b.sighting_ids)
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-6)
    # rows appended since the save (larger ids): still loaded, then the new rows read
    added = fill(store, 10, seed=22, prefix="new")
    third = model_vectors(store, backend)
    assert third.load() == "loaded"
    assert len(third) == n + added and third.rebuilds == 0
    if backend == "exact":
        check_exact(third, truth(store), queries(2, seed=23))


def test_load_rebuilds_when_a_row_was_deleted_behind_its_back(store):
    fill(store, 30, seed=24)
    vec = model_vectors(store)
    vec.load()
    vec.save()
    rows = truth(store)
    gone = int(rows["sighting_id"][10])
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=int(rows["feature_id"][10]))
    again = model_vectors(store)
    assert again.load() == "rebuilt"
    assert again.rebuilds == 1 and len(again) == len(rows["feature_id"]) - 1
    assert gone not in again.search(rows["feats"][10], 10_000).sighting_ids.tolist()
    check_exact(again, truth(store), queries(2, seed=25))
    # the rebuilt rows saved: in step again
    again.save()
    assert model_vectors(store).load() == "loaded"


def test_load_rebuilds_when_rows_appear_below_the_saved_largest_id(store):
    sighting, gap_id = _gap_below_the_max(store)
    vec = model_vectors(store)
    vec.load()
    vec.save()
    n = len(vec)
    _insert_below_the_max(store, sighting, gap_id)
    again = model_vectors(store)
    assert again.load() == "rebuilt"
    assert again.rebuilds == 1 and len(again) == n + 1
    assert int(again.search(np.ones(DIM), 1).sighting_ids[0]) == sighting


def test_a_saved_file_of_another_backend_or_a_damaged_one_is_rebuilt(store):
    n = fill(store, 20, seed=26)
    vec = model_vectors(store, "exact")
    vec.load()
    path = vec.save()
    assert model_vectors(store, "hnsw").load() == "rebuilt"
    # a file of another format version, or whose description lacks the fingerprint, is not taken
    with np.load(path) as z:
        saved = {k: z[k] for k in z.files}
    info = json.loads(str(saved["info"]))
    for bad in [dict(info, format_version=info["format_version"] + 1),
                {k: v for k, v in info.items() if k != "fingerprint"}, [info],
                dict(info, fingerprint={"rows": 3})]:
        np.savez(path, **dict(saved, info=np.array(json.dumps(bad))))
        again = model_vectors(store, "exact")
        assert again.load() == "rebuilt" and len(again) == n, bad
    np.savez(path, **saved)
    assert model_vectors(store, "exact").load() == "loaded"
    with open(path, "wb") as f:
        f.write(b"not an npz file")
    again = model_vectors(store, "exact")
    assert again.load() == "rebuilt" and len(again) == n
    # no saved file: built, which is no disagreement
    os.remove(path)
    fresh = model_vectors(store, "exact")
    assert fresh.load() == "built" and fresh.rebuilds == 0 and len(fresh) == n
    assert model_vectors_info(fresh) == {"rows": n, "indexed": n, "backend": "exact", "measured_recall": 1.0,
                                         "rebuilds": 0}


def test_an_empty_model_searches_to_nothing(store):
    vec = model_vectors(store)
    assert vec.load() == "built" and len(vec) == 0
    assert vec.search(np.ones(DIM), 5).sighting_ids.tolist() == []
    store.add_tracklets("demo", [tracklet("one", 1, [T0], np.ones((1, DIM)))], link=False)
    assert vec.refresh() == 1
    assert len(vec.search(np.ones(DIM), 5).sighting_ids) == 1


def test_a_background_index_built_before_a_rebuild_is_not_swapped_in(store, monkeypatch):
    """A new index built in the background from the rows before a rebuild (a row deleted) holds
    other row positions: swapping it in would name the wrong sightings."""
    import threading

    monkeypatch.setattr(vectors_module, "MIN_REBUILD_ROWS", 1)
    n = fill(store, 20, seed=27)
    vec = model_vectors(store, "faiss")
    vec.load()
    assert vec.trained_on == n
    built, release = threading.Event(), threading.Event()
    real_build = vec._build

    def slow_build(*args):
        index = real_build(*args)
        if threading.current_thread().name.startswith("reindex"):
            built.set()
            assert release.wait(20)
        return index

    monkeypatch.setattr(vec, "_build", slow_build)
    fill(store, 30, seed=28, prefix="more")  # twice the rows trained on: a background rebuild starts
    vec.refresh()
    worker = vec._rebuilder
    assert worker is not None and built.wait(20)
    fids = truth(store)["feature_id"]
    execute(store.engine, "DELETE FROM features WHERE id = :i", i=int(fids[3]))
    vec.refresh(verify=True)  # the rows are read again: every position past 3 moves
    release.set()
    worker.join(20)
    assert not worker.is_alive()
    rows = truth(store)
    assert len(vec) == len(rows["feature_id"])
    monkeypatch.setattr(filtered_search, "EXACT_FILTER_ROWS", 0)
    for i in range(0, len(rows["feature_id"]), 5):
        hit = vec.search(rows["feats"][i], 1)
        assert int(hit.sighting_ids[0]) == rows["sighting_id"][i] and hit.scores[0] == pytest.approx(1.0, abs=1e-5)
    check_exact(vec, rows, queries(2, seed=29))


# -- filtered search through the index, adds off the search path ---------------------------------------------

def near_on_one_camera(store, rng, query, near=120, far=240):
    """`near` rows close to `query`, all on camera 1, and `far` random rows on cameras 2 and 3: a search
    for camera 2 finds none of its matches among the index's first answers."""
    close = unit(query)[None] + 0.05 * rng.normal(size=(near, DIM))
    spread = rng.normal(size=(far, DIM))
    store.add_tracklets("demo", [tracklet(f"near{i}", 1, [T0 + i], close[i]) for i in range(near)] +
                        [tracklet(f"far{i}", 2 + i % 2, [T0 + near + i], spread[i]) for i in range(far)], link=False)


def test_a_filter_whose_rows_are_far_from_the_query_asks_the_index_for_more(store, monkeypatch):
    pytest.importorskip("faiss")
    rng = np.random.default_rng(31)
    query = rng.normal(size=DIM)
    near_on_one_camera(store, rng, query)
    vec = model_vectors(store, "faiss")
    vec.load()
    rows = truth(store)
    exact_calls, asked = [], []
    real_exact, real_search = filtered_search.exact, vec.index.search
    monkeypatch.setattr(filtered_search, "exact", lambda *a: exact_calls.append(1) or real_exact(*a))
    monkeypatch.setattr(vec.index, "search", lambda q, k: asked.append(k) or real_search(q, k))
    monkeypatch.setattr(filtered_search, "EXACT_FILTER_ROWS", 0)  # the index answers even a small filter
    hits = vec.search(query, 10, cameras=[2])
    want, scores = brute_force(rows["feats"], rows["sighting_id"], query, 10, keep(rows, cameras=[2]))
    assert [int(i) for i in hits.sighting_ids] == want
    np.testing.assert_allclose(hits.scores, scores, atol=1e-5)
    # 10 of 360 rows kept 120: asked for 10 * 3 * 2 = 60, none on camera 2 among them; then 4 times as many
    assert asked == [60, 240] and not exact_calls
    # past MAX_FETCH the filter's rows are scored exactly (the same answer)
    asked.clear()
    monkeypatch.setattr(filtered_search, "MAX_FETCH", 100)
    again = vec.search(query, 10, cameras=[2])
    assert [int(i) for i in again.sighting_ids] == want and asked == [60, 100] and exact_calls == [1]


def test_camera_filters_through_the_lookup_table_and_without_it_agree(store):
    fill(store, 60, seed=33)
    vec = model_vectors(store)
    vec.load()
    rows = truth(store)
    for cameras in ([1, 3], [2, 2_000_000_000], [7], []):  # through the table
        for q in queries(3, seed=34):
            hits = vec.search(q, 10, cameras=cameras)
            want, _ = brute_force(rows["feats"], rows["sighting_id"], q, 10, keep(rows, cameras=cameras))
            assert [int(i) for i in hits.sighting_ids] == want, cameras
    # a camera numbered past the table's size: np.isin
    store.add_tracklets("demo", [tracklet("big", 2_000_000_000, [T0], np.ones(DIM))], link=False)
    vec.refresh()
    rows = truth(store)
    assert vec.rows.camera_max == 2_000_000_000 > filtered_search.CAMERA_TABLE_SIZE
    for cameras in ([1, 3], [2_000_000_000, 2], [7], []):
        for q in queries(3, seed=34):
            hits = vec.search(q, 10, cameras=cameras)
            want, _ = brute_force(rows["feats"], rows["sighting_id"], q, 10, keep(rows, cameras=cameras))
            assert [int(i) for i in hits.sighting_ids] == want, cameras


@pytest.mark.slow
@pytest.mark.parametrize("backend", APPROXIMATE)
def test_new_rows_join_the_index_in_the_background_and_are_found_meanwhile(store, backend):
    n = fill(store, 150, seed=35)
    m = store.model("demo")
    vec = ModelVectors(store.engine, m.id, m.dim, backend=backend, background_adds=True)
    vec.load()
    assert vec.indexed == n
    added = fill(store, 40, seed=36, prefix="bg")
    assert vec.refresh() == added and len(vec) == n + added
    rows = truth(store)
    for i in range(n, n + added, 3):  # in the index or still in the exact tail: found either way
        hit = vec.search(rows["feats"][i], 1)
        assert int(hit.sighting_ids[0]) == rows["sighting_id"][i]
    if vec._adder is not None:
        vec._adder.join(60)
    assert vec.indexed == n + added == vec.index.index.ntotal
    assert recall(vec, rows, queries(20, seed=37)) >= 0.9
