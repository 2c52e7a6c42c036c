"""reid/store/online_linking.py: which identity a new tracklet joins (mean cosine similarity,
the offline linker's constraints, ties, order), and what the store records when it joins.

choose_identity is checked on hand-made tracklets against hand-computed means; the rest through a
Store on SQLite and on PostgreSQL (the ``database_url`` fixture)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from reid.store import Store  # noqa: E402
from reid.store.online_linking import LinkRules, as_tracklets, choose_identity  # noqa: E402
from reid.tracking.linking import Transitions  # noqa: E402

from ._data import T0, WEIGHTS, table_rows, tracklet, unit  # noqa: E402


def _held(rows):
    """(camera, start, end, identity, feature) rows -> the held Tracklets and their identities."""
    cam, start, end, ident, feats = zip(*rows)
    return (as_tracklets(np.array(cam), np.array(start, float), np.array(end, float),
                         unit(np.array(feats, float))), np.array(ident, np.int64))


def _new(camera, start, end, feature):
    f = unit(np.array(feature, float))
    return f, as_tracklets(np.array([camera]), np.array([start], float), np.array([end], float), f[None])


# identity 10: two tracklets, identity 20: one; cameras 2, 3 and 4, all long before the new one
HELD = [(2, 0.0, 10.0, 10, [1.0, 0.0, 0.0]),
        (3, 20.0, 30.0, 10, [0.6, 0.8, 0.0]),
        (4, 40.0, 50.0, 20, [0.0, 1.0, 0.0])]
NEW = [0.8, 0.6, 0.0]
# by hand: identity 10: (0.8 * 1 + (0.8 * 0.6 + 0.6 * 0.8)) / 2 = (0.8 + 0.96) / 2 = 0.88; identity 20: 0.6
MEAN_10, MEAN_20 = 0.88, 0.6


def test_choose_identity_takes_the_best_mean_similarity_at_or_above_the_threshold():
    held, ident = _held(HELD)
    f, new = _new(1, 100.0, 110.0, NEW)
    best = choose_identity(f, new, held, ident, 0.5, LinkRules())
    assert best[0] == 10 and best[1] == pytest.approx(MEAN_10, abs=1e-6)
    # the mean, not the best single pair (0.96) nor the best tracklet of the identity
    assert choose_identity(f, new, held, ident, 0.9, LinkRules()) is None
    # at the threshold joins; just above it does not
    assert choose_identity(f, new, held, ident, best[1], LinkRules()) == best
    assert choose_identity(f, new, held, ident, best[1] + 1e-9, LinkRules()) is None
    # the second identity when the first is ruled out (a person rejected it)
    second = choose_identity(f, new, held, ident, 0.5, LinkRules(), rejected=[10])
    assert second[0] == 20 and second[1] == pytest.approx(MEAN_20, abs=1e-6)
    assert choose_identity(f, new, held, ident, 0.7, LinkRules(), rejected=[10]) is None
    assert choose_identity(f, new, held.select(np.zeros(3, bool)), ident[:0], -1.0, LinkRules()) is None


def test_choose_identity_same_camera_overlap_blocks_the_whole_identity():
    held, ident = _held(HELD)
    # camera 2 at 5..12 overlaps identity 10's camera-2 tracklet (0..10): two people, whatever the score
    f, new = _new(2, 5.0, 12.0, NEW)
    got = choose_identity(f, new, held, ident, 0.5, LinkRules())
    assert got[0] == 20 and got[1] == pytest.approx(MEAN_20, abs=1e-6)
    # sharing one instant is an overlap too; a millisecond later is not
    f, new = _new(2, 10.0, 12.0, NEW)
    assert choose_identity(f, new, held, ident, 0.5, LinkRules())[0] == 20
    f, new = _new(2, 10.001, 12.0, NEW)
    assert choose_identity(f, new, held, ident, 0.5, LinkRules())[0] == 10
    # another camera at the same time is no constraint (cameras may see one place)
    f, new = _new(5, 5.0, 12.0, NEW)
    assert choose_identity(f, new, held, ident, 0.5, LinkRules())[0] == 10


def test_choose_identity_max_gap():
    held, ident = _held(HELD)
    f, new = _new(1, 100.0, 110.0, NEW)  # gaps to identity 10: 90 s (camera 2) and 70 s (camera 3); to 20: 50 s
    assert choose_identity(f, new, held, ident, 0.5, LinkRules(max_gap=90.0))[0] == 10  # a gap equal to it is allowed
    # one tracklet of the identity too far rules the identity out
    assert choose_identity(f, new, held, ident, 0.5, LinkRules(max_gap=89.9))[0] == 20
    assert choose_identity(f, new, held, ident, 0.5, LinkRules(max_gap=49.0)) is None


def test_choose_identity_transitions():
    held, ident = _held([(2, 0.0, 10.0, 10, [1.0, 0.0]), (3, 0.0, 10.0, 20, [1.0, 0.0])])
    rules = LinkRules(transitions=Transitions({(1, 2): (10.0, 60.0)}))
    for start, want in [(30.0, 10), (20.0, 10), (70.0, 10), (15.0, None), (75.0, None)]:
        f, new = _new(1, start, start + 5, [1.0, 0.0])
        got = choose_identity(f, new, held, ident, 0.5, rules)
        assert (got[0] if got else None) == want, start  # gap start - 10 must lie in [10, 60]; camera 3: not listed
    # tracklets of one camera are not ruled by the transitions (a person may come back)
    held, ident = _held([(1, 0.0, 1.0, 10, [1.0, 0.0])])
    f, new = _new(1, 5000.0, 5001.0, [1.0, 0.0])
    assert choose_identity(f, new, held, ident, 0.5, rules)[0] == 10


def test_choose_identity_ties_go_to_the_older_identity():
    # identity 7 comes first among the held rows; 3 is older (a lower id): 3 wins an exact tie
    held, ident = _held([(2, 0.0, 1.0, 7, [0.0, 1.0]), (3, 0.0, 1.0, 3, [0.0, 1.0]), (4, 0.0, 1.0, 5, [1.0, 0.0])])
    f, new = _new(1, 10.0, 11.0, [0.0, 1.0])
    assert choose_identity(f, new, held, ident, 0.5, LinkRules()) == (3, pytest.approx(1.0))
    # a better score beats age
    f, new = _new(1, 10.0, 11.0, [0.1, 1.0])
    held, ident = _held([(2, 0.0, 1.0, 7, [0.1, 1.0]), (3, 0.0, 1.0, 3, [0.0, 1.0])])
    assert choose_identity(f, new, held, ident, 0.5, LinkRules())[0] == 7


def test_link_rules_check():
    assert LinkRules(threshold=0.5, max_gap=0.0).check() == LinkRules(threshold=0.5, max_gap=0.0)
    with pytest.raises(ValueError) as e:
        LinkRules(threshold=1.5).check()
    assert str(e.value) == "link threshold 1.5 must be a cosine similarity in [-1, 1] (e.g. 0.5)."
    with pytest.raises(ValueError, match=r"^max gap -1.0 must be a number of seconds >= 0\.$"):
        LinkRules(max_gap=-1.0).check()
    with pytest.raises(ValueError, match=r"^max gap nan must be"):
        LinkRules(max_gap=float("nan")).check()


# -- through a store ----------------------------------------------------------------------------

DIM = 6


def _store(tmp_path, url, rules=None, threshold=0.5):
    s = Store(str(tmp_path / "store"), url, rules=rules)
    s.register_model("demo", WEIGHTS, dim=DIM, threshold=threshold)
    return s


@pytest.fixture
def stores(tmp_path, database_url):
    made = []

    def make(rules=None, threshold=0.5):
        made.append(_store(tmp_path, database_url, rules, threshold))
        return made[-1]

    yield make
    for s in made:
        s.close()


def _identities(store):
    return dict(table_rows(store.engine, "SELECT source, identity_id FROM tracklets"))


def _vec(*values):
    v = np.zeros(DIM)
    v[:len(values)] = values
    return v


def test_without_a_threshold_nothing_is_linked(stores):
    store = stores(threshold=None)
    same = _vec(1.0)
    count = store.add_tracklets("demo", [tracklet(f"t{i}", i + 1, [T0 + 10 * i], same[None], seed=i) for i in range(4)])
    assert count.linked == 0
    ids = _identities(store)
    assert len(set(ids.values())) == 4
    assert store.counts()["links"] == 0 and store.counts()["identities"] == 4


def test_the_rules_threshold_replaces_the_models(stores):
    a, b = _vec(1.0, 0.2), _vec(1.0, -0.2)  # cosine 0.96 / 1.04 = 0.923
    store = stores(rules=LinkRules(threshold=0.9), threshold=0.95)
    count = store.add_tracklets("demo", [tracklet("a", 1, [T0], a[None]), tracklet("b", 2, [T0 + 5], b[None], seed=1)])
    assert count.linked == 1


def test_a_joining_tracklet_gets_the_linkers_proposed_link_scored_by_the_mean_similarity(stores):
    store = stores(threshold=0.5)
    rng = np.random.default_rng(0)
    base = _vec(3.0, 1.0, 0.5)
    # p1 and p2: one person on cameras 1 and 2 (p2 joins p1 online); q: someone else
    first = [tracklet("p1", 1, [T0, T0 + 1], base + 0.3 * rng.normal(size=(2, DIM)), seed=1),
             tracklet("q", 3, [T0 + 5], _vec(-1.0, 2.0, 0.0, 3.0)[None], seed=3),
             tracklet("p2", 2, [T0 + 20], (base + 0.3 * rng.normal(size=DIM))[None], seed=2)]
    assert store.add_tracklets("demo", first).linked == 1
    ids = _identities(store)
    assert ids["p2"] == ids["p1"] != ids["q"]
    held = {r[0]: np.frombuffer(bytes(r[1]), np.float32).astype(np.float64) for r in table_rows(
        store.engine, "SELECT t.source, f.vector FROM tracklet_features f JOIN tracklets t ON t.id = f.tracklet_id")}
    new = tracklet("n", 4, [T0 + 40, T0 + 41], base + 0.3 * rng.normal(size=(2, DIM)), seed=4)
    # the new tracklet's feature: its unit sighting features summed (qualities 1), normalised
    pooled = unit(unit(np.stack([x.feature for x in new.sightings])).astype(np.float64).sum(0)).astype(np.float64)
    want = (held["p1"] @ pooled + held["p2"] @ pooled) / 2  # average linkage over the identity's two tracklets
    assert want > 0.5 > held["q"] @ pooled
    before = store.counts()
    count = store.add_tracklets("demo", [new])
    assert count.linked == 1
    tid = count.tracklet_ids[0]
    links = table_rows(store.engine, "SELECT tracklet_id, identity_id, score, made_by, by_whom, status FROM links "
                                     "ORDER BY id")
    assert len(links) == 2
    assert links[1][:2] == (tid, ids["p1"]) and links[1][3:] == ("linker", "", "proposed")
    assert links[1][2] == pytest.approx(want, abs=1e-6)
    assert links[0][2] == pytest.approx(held["p1"] @ held["p2"], abs=1e-6)  # p2's: its one-tracklet mean
    assert _identities(store)["n"] == ids["p1"]
    # the identity the tracklet was given on insert is gone: one more tracklet, no more identities
    after = store.counts()
    assert after["tracklets"] == before["tracklets"] + 1 and after["identities"] == before["identities"] == 2
    assert sorted(r[0] for r in table_rows(store.engine, "SELECT id FROM identities")) == sorted({ids["p1"], ids["q"]})


def test_same_camera_overlapping_tracklets_never_join(stores):
    store = stores(threshold=0.1)
    same = np.stack([_vec(1.0, 1.0)] * 2)
    # camera 1: a 0..10, b 5..15 (overlaps a), c 10..12 (touches a at 10, overlaps b), d 20..30 (after all)
    count = store.add_tracklets("demo", [tracklet("a", 1, [T0, T0 + 10], same, seed=1),
                                         tracklet("b", 1, [T0 + 5, T0 + 15], same, seed=2),
                                         tracklet("c", 1, [T0 + 10, T0 + 12], same, seed=3),
                                         tracklet("d", 1, [T0 + 20, T0 + 30], same, seed=4)])
    ids = _identities(store)
    assert len({ids["a"], ids["b"], ids["c"]}) == 3
    assert ids["d"] == ids["a"] and count.linked == 1  # free of all three: the tie goes to the oldest
    # a later batch: 11..25 overlaps b, c and d (so a's identity too): it stays alone
    store.add_tracklets("demo", [tracklet("e", 1, [T0 + 11, T0 + 25], same, seed=5)])
    ids = _identities(store)
    assert ids["e"] not in {ids[x] for x in "abcd"}
    # 16..18 overlaps nothing of a's identity (0..10, 20..30) nor c: it joins the oldest identity
    store.add_tracklets("demo", [tracklet("f", 1, [T0 + 16, T0 + 18], same, seed=6)])
    assert _identities(store)["f"] == ids["a"]


def test_max_gap_rule(stores):
    same = _vec(0.0, 1.0)
    store = stores(rules=LinkRules(max_gap=60.0))
    store.add_tracklets("demo", [tracklet("a", 1, [T0, T0 + 10], np.stack([same, same]), seed=1),
                                 tracklet("near", 2, [T0 + 70], same[None], seed=2),    # 60 s after a: joins
                                 tracklet("far", 3, [T0 + 200], same[None], seed=3)])  # 190 s after a
    ids = _identities(store)
    assert ids["near"] == ids["a"] and ids["far"] != ids["a"]


def test_transitions_rule(stores):
    same = _vec(0.0, 1.0)
    store = stores(rules=LinkRules(transitions=Transitions({(1, 2): (30.0, 100.0)})))
    store.add_tracklets("demo", [tracklet("a", 1, [T0, T0 + 10], np.stack([same, same]), seed=1),
                                 tracklet("fast", 2, [T0 + 20], same[None], seed=2),   # 10 s after a: too fast
                                 tracklet("ok", 2, [T0 + 50], same[None], seed=3),     # 40 s: allowed
                                 tracklet("c3", 3, [T0 + 50], same[None], seed=4)])    # pairs with 3: not listed
    ids = _identities(store)
    assert ids["fast"] != ids["a"]
    # ok may join a (40 s) or fast (same camera, not overlapping): equal scores, a's identity is older
    assert ids["ok"] == ids["a"]
    assert ids["c3"] not in {ids["a"], ids["fast"]}
    assert store.counts()["links"] == 1


def test_tracklets_are_linked_in_order_of_their_start_time(stores):
    store = stores()
    same = _vec(1.0, 0.0, 1.0)
    # given late first: the early one is linked first (to nothing), then the late one joins it
    count = store.add_tracklets("demo", [tracklet("late", 2, [T0 + 100], same[None], seed=1),
                                         tracklet("early", 1, [T0 + 10], same[None], seed=2)])
    assert count.linked == 1
    tid = dict(table_rows(store.engine, "SELECT source, id FROM tracklets"))
    assert tid["late"] < tid["early"]  # inserted in the given order
    ids = _identities(store)
    assert ids["late"] == ids["early"]
    assert table_rows(store.engine, "SELECT tracklet_id, identity_id FROM links") == [(tid["late"], ids["early"])]


def test_a_tie_between_two_identities_goes_to_the_older_one(stores):
    from reid.store import review

    store = stores()
    same = _vec(0.5, 0.5, 0.5)
    store.add_tracklets("demo", [tracklet("x", 2, [T0], same[None], seed=1),
                                 tracklet("y", 3, [T0 + 1], same[None], seed=2)], link=False)
    ids = _identities(store)
    x = table_rows(store.engine, "SELECT id FROM tracklets WHERE source = 'x'")[0][0]
    # a person merges them, then splits x off: x (the first tracklet) is in the newest identity, y in the oldest
    with store.session() as s:
        review.merge(s, ids["x"], ids["y"], by="test")
    with store.session() as s:
        newest = review.split(s, ids["x"], [x], by="test")["new_identity"]
    assert _identities(store) == {"x": newest, "y": ids["x"]} and newest > ids["x"]
    count = store.add_tracklets("demo", [tracklet("z", 1, [T0 + 10], same[None], seed=3)])
    assert count.linked == 1
    assert _identities(store)["z"] == ids["x"]
    assert table_rows(store.engine, "SELECT score FROM links WHERE made_by = 'linker'")[0][0] == \
        pytest.approx(1.0, abs=1e-6)


def test_a_store_refuses_rules_that_cannot_work(tmp_path):
    for rules, message in [(LinkRules(threshold=2.0), "link threshold 2.0 must be a cosine similarity in [-1, 1] "
                                                      "(e.g. 0.5)."),
                           (LinkRules(max_gap=-5.0), "max gap -5.0 must be a number of seconds >= 0.")]:
        with pytest.raises(ValueError) as e:
            Store(str(tmp_path / "store"), rules=rules)
        assert str(e.value) == message
    assert not (tmp_path / "store").exists()  # refused before anything was made


def test_a_tracklets_given_span_not_its_sightings_decides_the_overlap(stores):
    # two tracks of camera 1 at 0..19 s and 17..29 s: the sightings kept of each (a few crops) do not
    # overlap, the tracks do; two people at once in one camera, never one identity
    store = stores(threshold=0.1)
    same = np.stack([_vec(1.0, 1.0)] * 2)
    a = tracklet("a", 1, [T0, T0 + 10], same, seed=1)
    b = tracklet("b", 1, [T0 + 20, T0 + 25], same, seed=2)
    a.start_time, a.end_time = T0, T0 + 19
    b.start_time, b.end_time = T0 + 17, T0 + 29
    assert store.add_tracklets("demo", [a, b]).linked == 0
    ids = _identities(store)
    assert ids["a"] != ids["b"]
    assert sorted(table_rows(store.engine, "SELECT source, start, \"end\" FROM tracklets")) == [
        ("a", T0, T0 + 19), ("b", T0 + 17, T0 + 29)]


def test_a_tracklets_given_span_counts_for_max_gap(stores):
    same = _vec(1.0, 1.0)
    store = stores(rules=LinkRules(max_gap=10.0), threshold=0.1)
    a = tracklet("a", 1, [T0, T0 + 5], np.stack([same, same]), seed=1)
    a.start_time, a.end_time = T0, T0 + 19   # the track went on after its last kept crop
    c = tracklet("c", 2, [T0 + 29], same[None], seed=3)  # 10 s after the track, 24 s after its last crop
    assert store.add_tracklets("demo", [a, c]).linked == 1
