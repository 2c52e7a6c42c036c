"""reid/store/review.py: confirm, reject, split, merge and undo change tracklets, links and
identities exactly as its docstring says, log what they changed, and refuse what cannot be done
with a message naming it. On SQLite and on PostgreSQL (the ``database_url`` fixture)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from reid.store import Store  # noqa: E402
from reid.store import review  # noqa: E402
from reid.store.review import NotFound, ReviewError  # noqa: E402

from ._data import T0, WEIGHTS, table_rows, tracklet  # noqa: E402

DIM = 4


@pytest.fixture
def world(tmp_path, database_url):
    """Two people, linked online: I = {a (camera 1), b (2), c (3)} with the linker's proposed links
    of b and c; J = {d (4), e (5)} with e's link."""
    store = Store(str(tmp_path / "store"), database_url)
    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.5)
    one, two = np.eye(DIM)[0][None], np.eye(DIM)[1][None]
    count = store.add_tracklets("demo", [tracklet("a", 1, [T0], one, seed=1),
                                         tracklet("b", 2, [T0 + 20], one, seed=2),
                                         tracklet("c", 3, [T0 + 40], one, seed=3),
                                         tracklet("d", 4, [T0 + 60], two, seed=4),
                                         tracklet("e", 5, [T0 + 80], two, seed=5)])
    assert count.linked == 3
    t = dict(table_rows(store.engine, "SELECT source, id FROM tracklets"))
    ident = dict(table_rows(store.engine, "SELECT source, identity_id FROM tracklets"))
    link = {src: lid for lid, src in table_rows(
        store.engine, "SELECT l.id, t.source FROM links l JOIN tracklets t ON t.id = l.tracklet_id")}
    assert ident["a"] == ident["b"] == ident["c"] != ident["d"] == ident["e"]
    yield {"store": store, "t": t, "I": ident["a"], "J": ident["d"], "link": link}
    store.close()


def decide(world, action, *args, by="ann"):
    with world["store"].session() as s:
        return action(s, *args, by=by)


def state(world):
    """Everything a decision may change: tracklet -> identity, link -> (tracklet, identity, status,
    made_by, by), identity -> merged_into."""
    e = world["store"].engine
    return {"tracklets": dict(table_rows(e, "SELECT id, identity_id FROM tracklets")),
            "links": {r[0]: r[1:] for r in table_rows(
                e, "SELECT id, tracklet_id, identity_id, status, made_by, by_whom FROM links")},
            "identities": dict(table_rows(e, "SELECT id, merged_into FROM identities"))}


ABSENT = "(no row)"


def changed(before, after):
    """What differs between two states: {table: {key: (before, after)}} (ABSENT: no such row)."""
    out = {}
    for table in before:
        keys = set(before[table]) | set(after[table])
        diff = {k: (before[table].get(k, ABSENT), after[table].get(k, ABSENT)) for k in keys
                if before[table].get(k, ABSENT) != after[table].get(k, ABSENT)}
        if diff:
            out[table] = diff
    return out


def decision_rows(world):
    return table_rows(world["store"].engine, "SELECT id, kind, by_whom, undoes FROM decisions ORDER BY id")


def test_confirm_and_its_undo(world):
    lb = world["link"]["b"]
    before = state(world)
    d = decide(world, review.confirm, lb)
    assert (d["kind"], d["by"], d["undoes"]) == ("confirm", "ann", None)
    assert d["payload"] == {"request": {"link": lb}, "tracklets": {}, "links": {str(lb): ["proposed", "confirmed"]},
                            "identities": {}}
    after = state(world)
    assert changed(before, after) == {"links": {lb: (before["links"][lb], before["links"][lb][:2] + (
        "confirmed", "linker", ""))}}
    with pytest.raises(ReviewError) as e:
        decide(world, review.confirm, lb)
    assert str(e.value) == f"link {lb} is confirmed, not proposed."
    u = decide(world, review.undo, d["id"], by="bob")
    assert (u["kind"], u["by"], u["undoes"]) == ("undo", "bob", d["id"])
    assert u["payload"] == {"request": {"decision": d["id"]}, "tracklets": {},
                            "links": {str(lb): ["confirmed", "proposed"]}, "identities": {}}
    assert state(world) == before
    assert decision_rows(world) == [(d["id"], "confirm", "ann", None), (u["id"], "undo", "bob", d["id"])]


def test_reject_moves_the_tracklet_to_an_identity_of_its_own_and_undo_brings_it_back(world):
    lb, b, I = world["link"]["b"], world["t"]["b"], world["I"]
    before = state(world)
    d = decide(world, review.reject, lb)
    after = state(world)
    new = after["tracklets"][b]
    assert new not in before["identities"] and after["identities"][new] is None
    assert changed(before, after) == {
        "tracklets": {b: (I, new)},
        "links": {lb: (before["links"][lb], (b, I, "rejected", "linker", ""))},
        "identities": {new: (ABSENT, None)}}  # a new identity (merged into nothing)
    assert d["payload"] == {"request": {"link": lb}, "tracklets": {str(b): [I, new]},
                            "links": {str(lb): ["proposed", "rejected"]}, "identities": {}}
    with pytest.raises(ReviewError) as e:
        decide(world, review.reject, lb)
    assert str(e.value) == f"link {lb} is already rejected."
    decide(world, review.undo, d["id"])
    restored = state(world)
    # the previous state exactly; the identity the reject made stays, empty
    assert changed(before, restored) == {"identities": {new: (ABSENT, None)}}
    assert new not in restored["tracklets"].values()


def test_reject_of_a_confirmed_link_and_of_a_tracklet_that_already_left(world):
    lc, c, I = world["link"]["c"], world["t"]["c"], world["I"]
    decide(world, review.confirm, lc)
    d = decide(world, review.reject, lc)  # a person may change their mind
    assert d["payload"]["links"] == {str(lc): ["confirmed", "rejected"]}
    assert state(world)["tracklets"][c] != I
    # b was split off first: its link speaks of a grouping that is gone, so neither verdict applies
    lb, b = world["link"]["b"], world["t"]["b"]
    split = decide(world, review.split, I, [b])
    before = state(world)
    for action in (review.reject, review.confirm):
        with pytest.raises(review.ReviewError) as e:
            decide(world, action, lb)
        assert str(e.value) == (f"link {lb} is out of date: tracklet {b} has left identity {I} (it is in identity "
                                f"{split['new_identity']} now); review that identity.")
    assert changed(before, state(world)) == {}


def test_split_moves_the_tracklets_together_to_a_new_identity(world):
    t, I = world["t"], world["I"]
    before = state(world)
    d = decide(world, review.split, I, [t["c"], t["b"], t["c"]])
    new = d["new_identity"]
    assert new not in before["identities"]
    assert d["payload"] == {"request": {"identity": I, "tracklets": sorted([t["b"], t["c"]]), "new_identity": new},
                            "tracklets": {str(t["b"]): [I, new], str(t["c"]): [I, new]}, "links": {},
                            "identities": {}}
    assert changed(before, state(world)) == {"tracklets": {t["b"]: (I, new), t["c"]: (I, new)},
                                             "identities": {new: (ABSENT, None)}}
    decide(world, review.undo, d["id"])
    assert changed(before, state(world)) == {"identities": {new: (ABSENT, None)}}


def test_split_refuses_what_it_cannot_do(world):
    t, I, J = world["t"], world["I"], world["J"]
    before = state(world)
    cases = [((I, []), ReviewError, "split needs at least one tracklet."),
             ((I, [t["a"], t["d"]]), ReviewError, f"tracklet {t['d']} is not in identity {I}."),
             ((I, [t["a"], t["b"], t["c"]]), ReviewError,
              f"split would move every tracklet of identity {I}; leave at least one."),
             ((987654, [t["a"]]), NotFound, "identity 987654 is not in the store.")]
    for args, kind, message in cases:
        with pytest.raises(kind) as e:
            decide(world, review.split, *args)
        assert type(e.value) is kind and str(e.value) == message
    decide(world, review.merge, I, J)
    with pytest.raises(ReviewError) as e:
        decide(world, review.split, J, [t["d"]])
    assert str(e.value) == f"identity {J} was merged into {I}; review that one."
    assert len(decision_rows(world)) == 1  # only the merge
    assert changed(before, state(world))["identities"] == {J: (None, I)}


def test_merge_moves_every_tracklet_with_a_persons_link_and_undo_withdraws_them(world):
    t, I, J = world["t"], world["I"], world["J"]
    before = state(world)
    d = decide(world, review.merge, I, J, by="carol")
    after = state(world)
    new_links = sorted(set(after["links"]) - set(before["links"]))
    assert len(new_links) == 2
    assert sorted(after["links"][x] for x in new_links) == sorted(
        [(t["d"], I, "confirmed", "person", "carol"), (t["e"], I, "confirmed", "person", "carol")])
    assert table_rows(world["store"].engine, "SELECT score FROM links WHERE made_by = 'person'") == [(None,), (None,)]
    assert changed(before, after) == {
        "tracklets": {t["d"]: (J, I), t["e"]: (J, I)},
        "links": {x: (ABSENT, after["links"][x]) for x in new_links},
        "identities": {J: (None, I)}}
    assert d["payload"] == {"request": {"keep": I, "other": J},
                            "tracklets": {str(t["d"]): [J, I], str(t["e"]): [J, I]},
                            "links": {str(x): [None, "confirmed"] for x in new_links},
                            "identities": {str(J): [None, I]}}
    ident = world["store"].identity(J)
    assert ident["merged_into"] == I and ident["tracklets"] == []
    u = decide(world, review.undo, d["id"])
    assert u["payload"]["links"] == {str(x): ["confirmed", "withdrawn"] for x in new_links}
    restored = state(world)
    # the state before, plus the person's two links, withdrawn (kept for the log, not "rejected")
    assert changed(before, restored) == {"links": {x: (ABSENT, after["links"][x][:2] + ("withdrawn", "person", "carol"))
                                                   for x in new_links}}


def test_merge_refuses_what_it_cannot_do(world):
    I, J = world["I"], world["J"]
    with pytest.raises(ReviewError) as e:
        decide(world, review.merge, I, I)
    assert str(e.value) == f"identity {I} cannot be merged with itself."
    with pytest.raises(NotFound) as e:
        decide(world, review.merge, I, 987654)
    assert str(e.value) == "identity 987654 is not in the store."
    with pytest.raises(NotFound) as e:
        decide(world, review.merge, 987654, J)
    assert str(e.value) == "identity 987654 is not in the store."
    decide(world, review.merge, I, J)
    for keep, other in [(I, J), (J, I)]:
        with pytest.raises(ReviewError) as e:
            decide(world, review.merge, keep, other)
        assert str(e.value) == f"identity {J} was merged into {I}; review that one."


def test_undo_is_blocked_while_a_later_decision_holds_what_it_changed(world):
    t, I = world["t"], world["I"]
    before = state(world)
    split = decide(world, review.split, I, [t["c"]])
    new = split["new_identity"]
    merge = decide(world, review.merge, I, new)  # c comes back to I by a later decision
    held = state(world)
    with pytest.raises(ReviewError) as e:
        decide(world, review.undo, split["id"])
    assert str(e.value).startswith("a later decision (decision ")
    assert str(e.value).endswith(f") moved tracklet {t['c']} (now in identity {I}); undo that one first.")
    assert state(world) == held and len(decision_rows(world)) == 2  # the refused undo changed nothing
    decide(world, review.undo, merge["id"])
    decide(world, review.undo, split["id"])
    final = state(world)
    person = [k for k, v in final["links"].items() if v[3] == "person"]
    assert [final["links"][k][2] for k in person] == ["withdrawn"]
    assert changed(before, final) == {"identities": {new: (ABSENT, None)},
                                      "links": {k: (ABSENT, final["links"][k]) for k in person}}


def test_undo_is_blocked_by_a_later_change_of_the_same_link(world):
    lb = world["link"]["b"]
    confirm = decide(world, review.confirm, lb)
    reject = decide(world, review.reject, lb)
    with pytest.raises(ReviewError) as e:
        decide(world, review.undo, confirm["id"])
    assert str(e.value).startswith("a later decision (decision ") and ", reject) changed link" in str(e.value)
    assert str(e.value).endswith(f"changed link {lb} (now rejected); undo that one first.")
    decide(world, review.undo, reject["id"])
    decide(world, review.undo, confirm["id"])
    assert state(world)["links"][lb][2] == "proposed"


def test_an_undo_is_made_once_and_is_not_itself_undone(world):
    lb = world["link"]["b"]
    d = decide(world, review.confirm, lb)
    u = decide(world, review.undo, d["id"])
    with pytest.raises(ReviewError) as e:
        decide(world, review.undo, d["id"])
    assert str(e.value) == f"decision {d['id']} is already undone."
    with pytest.raises(ReviewError) as e:
        decide(world, review.undo, u["id"])
    assert str(e.value) == f"decision {u['id']} is an undo; make the decision again instead."
    again = decide(world, review.confirm, lb)  # the decision made again instead
    assert state(world)["links"][lb][2] == "confirmed"
    with world["store"].session() as s:
        assert [x["id"] for x in review.decisions(s)] == [again["id"], u["id"], d["id"]]  # newest first
        assert [x["id"] for x in review.decisions(s, limit=1, before=again["id"])] == [u["id"]]


def test_unknown_ids_are_not_found_with_their_name(world):
    cases = [(review.confirm, (987654,), "link 987654 is not in the store."),
             (review.reject, (987654,), "link 987654 is not in the store."),
             (review.undo, (987654,), "decision 987654 is not in the store.")]
    for action, args, message in cases:
        with pytest.raises(NotFound) as e:
            decide(world, action, *args)
        assert str(e.value) == message  # not quoted, as KeyError would
        assert isinstance(e.value, ReviewError) and isinstance(e.value, KeyError)
    assert decision_rows(world) == []


def test_a_bad_reviewer_name_is_refused_and_changes_nothing(world):
    before = state(world)
    for by in ["x" * 201, None]:
        for action, args in [(review.confirm, (world["link"]["b"],)), (review.reject, (world["link"]["b"],)),
                             (review.split, (world["I"], [world["t"]["b"]])),
                             (review.merge, (world["I"], world["J"]))]:
            with pytest.raises(ReviewError) as e:
                decide(world, action, *args, by=by)
            assert str(e.value) == "reviewer name must be text of at most 200 characters."
    assert changed(before, state(world)) == {}
    assert decision_rows(world) == []
    decide(world, review.confirm, world["link"]["b"], by="x" * 200)  # at the limit


@pytest.mark.parametrize("name", ["x'); DROP TABLE decisions; --", "ann\"; DELETE FROM links WHERE 1=1; --",
                                  "' OR '1'='1", "%s %(by)s :by ? $1 {0}"])
def test_sql_looking_reviewer_names_are_stored_verbatim(world, name):
    before = state(world)
    counts = world["store"].counts()
    d = decide(world, review.merge, world["I"], world["J"], by=name)
    assert d["by"] == name
    assert decision_rows(world) == [(d["id"], "merge", name, None)]
    after = state(world)
    new_links = set(after["links"]) - set(before["links"])
    assert [after["links"][x][4] for x in sorted(new_links)] == [name, name]
    # nothing else changed: every table still there, the same rows but the merge's
    assert world["store"].counts() == dict(counts, links=counts["links"] + 2)
    assert {k: v for k, v in after["links"].items() if k not in new_links} == before["links"]
    u = decide(world, review.undo, d["id"], by=name)
    assert decision_rows(world)[-1] == (u["id"], "undo", name, d["id"])


def test_undo_does_not_put_tracklets_back_into_an_identity_merged_away(world):
    """Split c off I, then merge I into J: undoing the split would hide c in I, which no longer shows."""
    t, I, J = world["t"], world["I"], world["J"]
    first = decide(world, review.split, I, [t["c"]])
    merge = decide(world, review.merge, J, I)
    before = state(world)
    with pytest.raises(review.ReviewError) as e:
        decide(world, review.undo, first["id"])
    assert str(e.value) == (f"identity {I} was merged into {J} by a later decision (decision {merge['id']}, merge); "
                            "undo that one first.")
    assert changed(before, state(world)) == {}
    decide(world, review.undo, merge["id"])  # in the order the message gives, both undo
    decide(world, review.undo, first["id"])
    assert state(world)["tracklets"][t["c"]] == I


def test_out_of_date_links_leave_the_queue_and_do_not_count_for_review(world):
    from reid.store.export import reviewed_identities
    from reid.store.queries import pending_links

    t, I, lb, lc = world["t"], world["I"], world["link"]["b"], world["link"]["c"]
    decide(world, review.confirm, lc)
    with world["store"].session() as s:
        assert {x["id"] for x in pending_links(s)} >= {lb} and I not in reviewed_identities(s)
    decide(world, review.split, I, [t["b"]])  # b's proposed link speaks of I, which b left
    with world["store"].session() as s:
        assert lb not in {x["id"] for x in pending_links(s)}
        assert I in reviewed_identities(s)  # what waited no longer applies; c's confirmation does


def test_writers_take_turns_through_the_write_lock(world):
    """A decision started while another writer holds the lock runs after that writer commits, and sees
    what it wrote (two merges crossing cannot both happen)."""
    import threading

    store, I, J = world["store"], world["I"], world["J"]
    holding, results = threading.Event(), {}

    def first():
        with store.writing() as s:
            holding.set()
            results["first"] = review.merge(s, I, J, by="ann")
            import time
            time.sleep(0.5)  # the second merge must wait for this commit, not decide on the state before it

    def second():
        holding.wait(10)
        try:
            with store.writing() as s:
                results["second"] = review.merge(s, J, I, by="bob")
        except review.ReviewError as e:
            results["second"] = e

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert isinstance(results["second"], review.ReviewError)
    assert str(results["second"]) == f"identity {J} was merged into {I}; review that one."
    assert state(world)["identities"][J] == I and state(world)["identities"][I] is None
