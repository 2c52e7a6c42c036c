"""The store's HTTP API (reid/service/app.py) on SQLite and PostgreSQL: search answers are the brute
force cosine ranking of the stored features under the filters; review decisions change exactly what
the API returns, and undo brings it back; and the refusals: no or unknown token (401), a read token
on a write route (403), paths in crop names, oversized / non-image uploads, SQL in every text field,
each refused with one line and the database unchanged; the page's Content-Security-Policy and static
files reference nothing on another host.

Everything runs in-process (FastAPI's TestClient): no socket is opened.
"""
from __future__ import annotations

import io
import os
import re
import struct
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Dict, List

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("sqlalchemy")

from fastapi.testclient import TestClient  # noqa: E402
from PIL import Image  # noqa: E402
from sqlalchemy import select  # noqa: E402

from reid.service.app import CSP, STATIC, create_app  # noqa: E402
from reid.service.tokens import Tokens  # noqa: E402
from reid.service.uploads import MAX_UPLOAD_BYTES  # noqa: E402
from reid.store import NewSighting, NewTracklet, Store  # noqa: E402
from reid.store.schema import Base, Sighting, Tracklet  # noqa: E402

DIM = 16
MODEL = "fake"
THRESHOLD = 0.8
T0 = 1_764_331_200.0  # 2025-11-28 12:00:00 UTC
PEOPLE = 4
CAMERAS = (1, 2, 3)
SQL = ["1; DROP TABLE sightings; --", "' OR '1'='1", "1) OR (1=1", "x'); DELETE FROM links; --",
       "1 UNION SELECT crop FROM sightings"]


def fake_embed(crops: List[np.ndarray]) -> np.ndarray:
    """A stand-in model: the first DIM pixel values (RGB order) centred on 127.5, L2-normalised, so a
    test picks the feature of an upload by its pixels."""
    feats = np.stack([c.reshape(-1)[:DIM].astype(np.float32) - 127.5 for c in crops])
    return feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def png_bytes(rgb: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="PNG")
    return out.getvalue()


def jpeg_bytes(rgb: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="JPEG", quality=90)
    return out.getvalue()


def upload_of(vector: np.ndarray) -> bytes:
    """A small PNG whose first DIM pixel values are 127.5 + 100 * vector (fake_embed's feature ~ vector)."""
    values = np.clip(np.round(127.5 + 100 * unit(vector)), 0, 255).astype(np.uint8)
    rgb = np.full(8 * 4 * 3, 128, np.uint8)
    rgb[:DIM] = values
    return png_bytes(rgb.reshape(8, 4, 3))


def png_claiming(width: int, height: int) -> bytes:
    """A PNG of a few dozen bytes whose header claims width x height pixels (its data is a stub)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(b"IEND", b"")


@dataclass
class Site:
    client: TestClient
    store: Store
    app: object
    review: Dict[str, str]  # headers of a review token ("alice")
    read: Dict[str, str]    # headers of a read token ("bob")
    bases: np.ndarray       # [PEOPLE, DIM] each person's direction
    features: Dict[str, np.ndarray]   # sighting source -> feature ingested
    times: Dict[str, float]
    cameras: Dict[str, int]
    person: Dict[str, int]            # sighting source -> person
    tracklet_person: Dict[int, int]   # tracklet id -> person
    sighting_id: Dict[str, int]       # sighting source -> id

    def get(self, path: str, headers=None, **kw):
        return self.client.get(path, headers=dict(self.review, **(headers or {})), **kw)

    def post(self, path: str, headers=None, **kw):
        return self.client.post(path, headers=dict(self.review, **(headers or {})), **kw)

    def members(self, identity: int) -> set:
        r = self.get(f"/api/identities/{identity}")
        assert r.status_code == 200, r.text
        return {t["id"] for t in r.json()["tracklets"]}

    def identity_of(self, tracklet: int) -> int:
        with self.store.session() as s:
            return s.scalar(select(Tracklet.identity_id).where(Tracklet.id == tracklet))

    def links(self, status: str = "proposed") -> Dict[int, dict]:
        r = self.get("/api/links", params={"status": status, "limit": 500})
        assert r.status_code == 200, r.text
        return {x["id"]: x for x in r.json()}

    def brute_force(self, query: np.ndarray, k: int, cameras=None, start=None, end=None, exclude=None) -> List[tuple]:
        """(sighting id, score) of the k best stored features by cosine similarity, best first."""
        rows = [(self.sighting_id[src], float(unit(f) @ unit(query))) for src, f in self.features.items()
                if (cameras is None or self.cameras[src] in cameras)
                and (start is None or self.times[src] >= start) and (end is None or self.times[src] <= end)
                and self.sighting_id[src] != exclude]
        rows.sort(key=lambda r: -r[1])
        return rows[:k]


def snapshot(store: Store) -> Dict[str, list]:
    """Every row of every table of the store, and its crop files: what must not change on a refusal."""
    out: Dict[str, list] = {}
    with store.session() as s:
        for table in Base.metadata.sorted_tables:
            out[table.name] = [tuple(r) for r in s.execute(select(table).order_by(*table.primary_key.columns)).all()]
    out["crop files"] = sorted(os.path.relpath(os.path.join(d, f), store.crops.folder)
                               for d, _, files in os.walk(store.crops.folder) for f in files)
    return out


@pytest.fixture
def site(tmp_path, database_url):
    """A store of PEOPLE people, each seen by every camera as one tracklet of two sightings, linked online
    by the model's threshold (every person's three tracklets in one identity: two proposed links each);
    a review token (alice) and a read token (bob)."""
    rng = np.random.default_rng(7)
    bases = np.linalg.qr(rng.normal(size=(DIM, DIM)))[0][:PEOPLE]  # orthogonal: people far apart
    store = Store(str(tmp_path / "store"), database_url)
    store.register_model(MODEL, {"sha256": "0" * 64}, dim=DIM, threshold=THRESHOLD, threshold_source="test calibration")
    features, times, cameras, person = {}, {}, {}, {}
    tracklets = []
    for p in range(PEOPLE):
        for c in CAMERAS:
            t = NewTracklet(source=f"p{p}-c{c}", camera=c, camera_name=f"gate {c}")
            for j in range(2):
                src = f"p{p}-c{c}-{j}"
                when = T0 + 600 * p + 120 * c + 10 * j
                feature = unit(bases[p] + 0.05 * rng.normal(size=DIM)).astype(np.float32)
                pixels = rng.integers(0, 256, size=(16, 8, 3), dtype=np.uint8)
                t.sightings.append(NewSighting(source=src, time=when, box=(10.0 * j, 5.0, 8.0, 16.0),
                                               crop=jpeg_bytes(pixels), feature=feature, frame=j))
                features[src], times[src], cameras[src], person[src] = feature, when, c, p
            tracklets.append(t)
    count = store.add_tracklets(MODEL, tracklets)
    assert count.tracklets == PEOPLE * len(CAMERAS) and count.sightings == 2 * len(tracklets)
    with store.session() as s:
        sighting_id = dict(s.execute(select(Sighting.source, Sighting.id)).all())
        tracklet_person = {tid: int(src[1:].split("-")[0]) for src, tid in s.execute(select(Tracklet.source, Tracklet.id))}
    tokens = Tokens(str(tmp_path / "tokens.json"))
    review, read = tokens.add("alice", "review"), tokens.add("bob", "read")
    app = create_app(store, tokens, embed=fake_embed, model_name=MODEL)
    with TestClient(app) as client:
        yield Site(client, store, app, {"Authorization": f"Bearer {review}"}, {"Authorization": f"Bearer {read}"},
                   bases, features, times, cameras, person, tracklet_person, sighting_id)
    store.close()


def identities_by_person(site: Site) -> Dict[int, int]:
    """person -> the identity holding all of its tracklets (asserting the linker put each person together)."""
    out = {}
    for p in range(PEOPLE):
        ids = {site.identity_of(t) for t, q in site.tracklet_person.items() if q == p}
        assert len(ids) == 1, f"person {p} is split over identities {ids}"
        out[p] = ids.pop()
    assert len(set(out.values())) == PEOPLE
    return out


def one_line_refusal(r, *codes: int) -> None:
    assert r.status_code in codes, (r.status_code, r.text)
    detail = r.json()["detail"]
    assert isinstance(detail, str) and detail and "\n" not in detail, detail


# -- setup facts ---------------------------------------------------------------------------------------

def test_linker_put_each_person_in_one_identity_with_proposed_links(site):
    by_person = identities_by_person(site)
    proposed = site.links()
    assert len(proposed) == PEOPLE * (len(CAMERAS) - 1)
    for link in proposed.values():
        assert link["identity"] == by_person[site.tracklet_person[link["tracklet"]]]
        assert link["score"] >= THRESHOLD and link["made_by"] == "linker"
        assert link["crop"] and link["identity_crop"] and link["crop"] != link["identity_crop"]
    me = site.get("/api/me").json()
    assert me == {"name": "alice", "role": "review"}
    assert site.client.get("/api/me", headers=site.read).json() == {"name": "bob", "role": "read"}


# -- search ------------------------------------------------------------------------------------------

def assert_same_ranking(answer: dict, expected: List[tuple]) -> None:
    got = [(r["id"], r["score"]) for r in answer["results"]]
    assert [g[0] for g in got] == [e[0] for e in expected]
    np.testing.assert_allclose([g[1] for g in got], [e[1] for e in expected], atol=1e-5)
    scores = [g[1] for g in got]
    assert scores == sorted(scores, reverse=True)


def test_the_review_queue_pages_in_its_own_order(site):
    """Proposed links come least sure first: a page of 3 after the last link of the page before, until
    none are left, gives the whole queue in order, each link once; decided links newest first likewise."""
    whole = site.get("/api/links", params={"limit": 500}).json()
    assert len(whole) == 2 * PEOPLE
    assert [(x["score"], x["id"]) for x in whole] == sorted((x["score"], x["id"]) for x in whole)
    assert len({x["score"] for x in whole}) > 1  # by score, not by id: paging by id would skip some
    paged, after = [], None
    while True:
        page = site.get("/api/links", params=dict(limit=3, **({"after": after} if after else {}))).json()
        if not page:
            break
        paged += page
        after = page[-1]["id"]
        assert len(paged) <= len(whole), "a page came twice"
    assert [x["id"] for x in paged] == [x["id"] for x in whole]
    for link in [x["id"] for x in whole[:4]]:
        assert site.post(f"/api/links/{link}/confirm").status_code == 200
    confirmed = site.get("/api/links", params={"status": "confirmed"}).json()
    assert [x["id"] for x in confirmed] == sorted((x["id"] for x in whole[:4]), reverse=True)
    second = site.get("/api/links", params={"status": "confirmed", "limit": 2, "after": confirmed[1]["id"]}).json()
    assert [x["id"] for x in second] == [x["id"] for x in confirmed[2:4]]
    # a confirmed link still anchors the queue's next page; a link that never was is a 404
    rest = site.get("/api/links", params={"after": whole[3]["id"]}).json()
    assert [x["id"] for x in rest] == [x["id"] for x in whole[4:]]
    one_line_refusal(site.get("/api/links", params={"after": 999999}), 404)


def test_search_by_upload_is_the_brute_force_cosine_ranking(site):
    for p in range(PEOPLE):
        data = upload_of(site.bases[p])
        query = fake_embed([np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))])[0]
        r = site.client.post("/api/search/image", params={"k": 5}, headers=site.read,
                             files={"image": ("q.png", data, "image/png")})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["model"] == MODEL
        assert answer["threshold"] == pytest.approx(THRESHOLD) and answer["threshold_source"] == "test calibration"
        assert_same_ranking(answer, site.brute_force(query, 5))
        by_id = {v: k for k, v in site.sighting_id.items()}
        # the person the upload shows comes first: all six of their sightings are at the top
        assert {site.person[by_id[x["id"]]] for x in answer["results"][:5]} == {p}
        for x in answer["results"]:  # each result is the stored sighting, with its tracklet's identity
            src = by_id[x["id"]]
            assert (x["camera"], x["time"]) == (site.cameras[src], site.times[src])
            assert site.tracklet_person[x["tracklet"]] == site.person[src]
            assert x["identity"] == site.identity_of(x["tracklet"])
    # every stored row when k is large
    data = upload_of(site.bases[0])
    query = fake_embed([np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))])[0]
    r = site.client.post("/api/search/image", params={"k": 200}, headers=site.read,
                         files={"image": ("q.png", data, "image/png")})
    assert len(r.json()["results"]) == len(site.features)
    assert_same_ranking(r.json(), site.brute_force(query, 200))


def iso(seconds: float, style: str) -> str:
    when = datetime.fromtimestamp(seconds, timezone.utc)
    if style == "Z":
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    if style == "offset":
        return when.isoformat()  # +00:00
    if style == "naive":  # no zone: UTC
        return when.replace(tzinfo=None).isoformat()
    if style == "cet":  # the same instant written in UTC+01:00
        return datetime.fromtimestamp(seconds, timezone.utc).astimezone(
            timezone(__import__("datetime").timedelta(hours=1))).isoformat()
    return repr(seconds)  # epoch seconds


@pytest.mark.parametrize("style", ["Z", "offset", "naive", "cet", "epoch"])
def test_search_filters_cameras_and_time_window(site, style):
    query = site.features["p1-c2-0"]
    sid = site.sighting_id["p1-c2-0"]
    start, end = T0 + 600 + 120 * 2, T0 + 600 * 2 + 120 * 3 + 10  # from p1-c2-0 to p2-c3-1, inclusive
    cases = [
        ({"cameras": "2,3"}, dict(cameras={2, 3})),
        ({"cameras": " 1 "}, dict(cameras={1})),
        ({"start": iso(start, style)}, dict(start=start)),
        ({"end": iso(end, style)}, dict(end=end)),
        ({"start": iso(start, style), "end": iso(end, style), "cameras": "3,1"}, dict(start=start, end=end, cameras={1, 3})),
    ]
    for params, bounds in cases:
        expected = site.brute_force(query, 50, **bounds, exclude=sid)
        r = site.get(f"/api/search/sighting/{sid}", params=dict(params, k=50))
        assert r.status_code == 200, (params, r.text)
        assert_same_ranking(r.json(), expected)
        assert r.json()["threshold"] == pytest.approx(THRESHOLD)
        for x in r.json()["results"]:
            assert "cameras" not in bounds or x["camera"] in bounds["cameras"]
            assert bounds.get("start", -np.inf) <= x["time"] <= bounds.get("end", np.inf)
    # the same filters on an upload
    data = upload_of(site.bases[2])
    q = fake_embed([np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))])[0]
    r = site.client.post("/api/search/image", headers=site.read, files={"image": ("q.png", data, "image/png")},
                         params={"k": 50, "cameras": "3", "start": iso(start, style), "end": iso(end, style)})
    assert r.status_code == 200, r.text
    assert_same_ranking(r.json(), site.brute_force(q, 50, cameras={3}, start=start, end=end))


def test_search_by_sighting_excludes_itself_and_keeps_k(site):
    for src in ("p0-c1-0", "p3-c3-1"):
        sid = site.sighting_id[src]
        for k in (1, 3, 23, 200):
            r = site.get(f"/api/search/sighting/{sid}", params={"k": k})
            assert r.status_code == 200
            assert_same_ranking(r.json(), site.brute_force(site.features[src], k, exclude=sid))
            assert sid not in [x["id"] for x in r.json()["results"]]
            assert len(r.json()["results"]) == min(k, len(site.features) - 1)
    # the sighting itself, its crop
    sid = site.sighting_id["p0-c1-0"]
    one = site.get(f"/api/sightings/{sid}").json()
    assert one["camera"] == 1 and one["time"] == site.times["p0-c1-0"] and one["frame"] == 0
    crop = site.get(f"/api/crops/{one['crop']}")
    assert crop.status_code == 200 and crop.headers["content-type"] == "image/jpeg"
    assert crop.content == site.store.crops.read(one["crop"])


def test_search_refuses_bad_windows_and_unknown_things(site):
    sid = site.sighting_id["p0-c1-0"]
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"start": iso(T0 + 10, "Z"), "end": iso(T0, "Z")}), 422)
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"start": "yesterday"}), 422)
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"start": "nan"}), 422)
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"k": 0}), 422)
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"k": 201}), 422)
    one_line_refusal(site.get("/api/search/sighting/999999"), 404)
    one_line_refusal(site.get(f"/api/search/sighting/{sid}", params={"model": "other"}), 404)
    one_line_refusal(site.get("/api/sightings/999999"), 404)
    one_line_refusal(site.get("/api/identities/999999"), 404)


# -- decisions ---------------------------------------------------------------------------------------

def decision_log(site: Site) -> List[dict]:
    r = site.get("/api/decisions")
    assert r.status_code == 200
    return r.json()


def test_confirm_then_undo(site):
    before_members = {i: site.members(i) for i in identities_by_person(site).values()}
    proposed = site.links()
    link = min(proposed)
    d = site.post(f"/api/links/{link}/confirm")
    assert d.status_code == 200, d.text
    d = d.json()
    assert d["kind"] == "confirm" and d["by"] == "alice" and d["payload"]["links"] == {str(link): ["proposed", "confirmed"]}
    assert set(site.links()) == set(proposed) - {link}
    assert set(site.links("confirmed")) == {link}
    assert {i: site.members(i) for i in before_members} == before_members  # nobody moved
    ident = site.get(f"/api/identities/{proposed[link]['identity']}").json()
    assert {x["id"]: x["status"] for x in ident["links"]}[link] == "confirmed"
    one_line_refusal(site.post(f"/api/links/{link}/confirm"), 409)  # not proposed any more

    u = site.post(f"/api/decisions/{d['id']}/undo")
    assert u.status_code == 200, u.text
    assert u.json()["kind"] == "undo" and u.json()["undoes"] == d["id"]
    assert set(site.links()) == set(proposed)
    assert site.links("confirmed") == {}
    assert [x["id"] for x in decision_log(site)] == [u.json()["id"], d["id"]]
    one_line_refusal(site.post(f"/api/decisions/{d['id']}/undo"), 409)         # already undone
    one_line_refusal(site.post(f"/api/decisions/{u.json()['id']}/undo"), 409)  # an undo is not undone


def test_reject_moves_the_tracklet_out_and_undo_brings_it_back(site):
    proposed = site.links()
    link = max(proposed)
    tracklet, identity = proposed[link]["tracklet"], proposed[link]["identity"]
    members = site.members(identity)
    assert tracklet in members
    d = site.post(f"/api/links/{link}/reject").json()
    new = d["payload"]["tracklets"][str(tracklet)][1]
    assert d["payload"]["tracklets"] == {str(tracklet): [identity, new]}
    assert site.members(identity) == members - {tracklet}
    assert site.members(new) == {tracklet}
    assert set(site.links()) == set(proposed) - {link}
    assert set(site.links("rejected")) == {link}
    one_line_refusal(site.post(f"/api/links/{link}/reject"), 409)

    site.post(f"/api/decisions/{d['id']}/undo").raise_for_status()
    assert site.members(identity) == members
    assert site.members(new) == set()
    assert set(site.links()) == set(proposed) and site.links("rejected") == {}


def test_split_then_undo(site):
    by_person = identities_by_person(site)
    identity = by_person[2]
    members = sorted(site.members(identity))
    moved = members[1:]
    r = site.post(f"/api/identities/{identity}/split", json={"tracklets": moved})
    assert r.status_code == 200, r.text
    new = r.json()["new_identity"]
    assert r.json()["kind"] == "split" and r.json()["payload"]["request"]["tracklets"] == moved
    assert site.members(identity) == {members[0]}
    assert site.members(new) == set(moved)
    listed = {x["id"]: x for x in site.get("/api/identities").json()}
    assert listed[new]["tracklets"] == len(moved) and listed[identity]["tracklets"] == 1
    # refused splits change nothing
    before = snapshot(site.store)
    one_line_refusal(site.post(f"/api/identities/{identity}/split", json={"tracklets": [members[0]]}), 409)  # all of it
    one_line_refusal(site.post(f"/api/identities/{identity}/split", json={"tracklets": [moved[0]]}), 409)  # not a member
    one_line_refusal(site.post(f"/api/identities/{identity}/split", json={"tracklets": []}), 422)
    one_line_refusal(site.post("/api/identities/999999/split", json={"tracklets": [1]}), 404)
    assert snapshot(site.store) == before

    site.post(f"/api/decisions/{r.json()['id']}/undo").raise_for_status()
    assert site.members(identity) == set(members)
    assert site.members(new) == set()


def test_merge_then_undo(site):
    by_person = identities_by_person(site)
    keep, other = by_person[0], by_person[1]
    a, b = site.members(keep), site.members(other)
    r = site.post("/api/identities/merge", json={"keep": keep, "other": other})
    assert r.status_code == 200, r.text
    assert site.members(keep) == a | b and site.members(other) == set()
    gone = site.get(f"/api/identities/{other}").json()
    assert gone["merged_into"] == keep
    listed = {x["id"] for x in site.get("/api/identities").json()}
    assert keep in listed and other not in listed
    person_links = {x["tracklet"]: x for x in site.get(f"/api/identities/{keep}").json()["links"] if x["made_by"] == "person"}
    assert set(person_links) == b and all(x["status"] == "confirmed" and x["by"] == "alice" for x in person_links.values())
    one_line_refusal(site.post("/api/identities/merge", json={"keep": keep, "other": other}), 409)  # merged already
    one_line_refusal(site.post("/api/identities/merge", json={"keep": keep, "other": keep}), 409)
    one_line_refusal(site.post(f"/api/identities/{other}/split", json={"tracklets": [1]}), 409)

    site.post(f"/api/decisions/{r.json()['id']}/undo").raise_for_status()
    assert site.members(keep) == a and site.members(other) == b
    assert site.get(f"/api/identities/{other}").json()["merged_into"] is None
    statuses = {x["id"]: x["status"] for x in site.get(f"/api/identities/{keep}").json()["links"]}
    assert all(statuses[x["id"]] == "withdrawn" for x in person_links.values())


def test_undo_waits_for_later_decisions_to_be_undone_first(site):
    by_person = identities_by_person(site)
    proposed = site.links()
    link = next(i for i, x in sorted(proposed.items()) if x["identity"] == by_person[3])
    tracklet = proposed[link]["tracklet"]
    rejected = site.post(f"/api/links/{link}/reject").json()
    alone = rejected["payload"]["tracklets"][str(tracklet)][1]
    merged = site.post("/api/identities/merge", json={"keep": by_person[0], "other": alone}).json()
    assert tracklet in site.members(by_person[0])
    before = snapshot(site.store)
    one_line_refusal(site.post(f"/api/decisions/{rejected['id']}/undo"), 409)
    assert snapshot(site.store) == before
    site.post(f"/api/decisions/{merged['id']}/undo").raise_for_status()
    site.post(f"/api/decisions/{rejected['id']}/undo").raise_for_status()
    assert tracklet in site.members(by_person[3])
    assert link in site.links()
    kinds = [(x["kind"], x["undoes"]) for x in decision_log(site)]
    assert kinds == [("undo", rejected["id"]), ("undo", merged["id"]), ("merge", None), ("reject", None)]
    one_line_refusal(site.post("/api/decisions/999999/undo"), 404)
    one_line_refusal(site.post("/api/links/999999/confirm"), 404)
    one_line_refusal(site.post("/api/links/999999/reject"), 404)


# -- security ----------------------------------------------------------------------------------------

#: Routes that change the store (each must need the review role); every route that is not a GET and
#: not in POST_READS is taken as one, so a route added later is checked too.
WRITES = {("POST", "/api/links/{link_id}/confirm"), ("POST", "/api/links/{link_id}/reject"),
          ("POST", "/api/identities/{identity_id}/split"), ("POST", "/api/identities/merge"),
          ("POST", "/api/decisions/{decision_id}/undo")}
#: Routes that read but take a POST (an upload).
POST_READS = {("POST", "/api/search/image")}


def api_routes(app) -> List[tuple]:
    out = []
    for route in app.routes:
        path = getattr(route, "path", "")
        if path.startswith("/api"):
            for method in sorted(getattr(route, "methods", ()) or ()):
                if method != "HEAD":
                    out.append((method, path))
    return out


def request_for(site: Site, method: str, path: str, ids: Dict[str, object], headers: Dict[str, str]):
    """A well-formed request to a route (valid ids and bodies), so that only the token decides."""
    url = re.sub(r"\{(\w+)\}", lambda m: str(ids.get(m.group(1), 1)), path)
    kw: Dict[str, object] = {"headers": headers}
    if method != "GET":
        kw["json"] = {}
    if path.endswith("/split"):
        kw["json"] = {"tracklets": [ids["tracklet"]]}
    elif path.endswith("/merge"):
        kw["json"] = {"keep": ids["identity_id"], "other": ids["other_identity"]}
    elif path == "/api/search/image":
        kw["files"] = {"image": ("q.png", upload_of(site.bases[0]), "image/png")}
    return site.client.request(method, url, **kw)


def route_ids(site: Site) -> Dict[str, object]:
    by_person = identities_by_person(site)
    proposed = site.links()
    link = min(proposed)
    decision = site.post(f"/api/links/{max(proposed)}/confirm").json()["id"]  # something to undo
    split_from = by_person[0]
    return {"sighting_id": site.sighting_id["p0-c1-0"], "identity_id": split_from, "other_identity": by_person[1],
            "tracklet": max(site.members(split_from)), "link_id": link, "decision_id": decision,
            "name": site.get(f"/api/sightings/{site.sighting_id['p0-c1-0']}").json()["crop"]}


def test_every_api_route_needs_a_known_token(site):
    ids = route_ids(site)
    before = snapshot(site.store)
    routes = api_routes(site.app)
    assert len(routes) >= 14 and set(WRITES) <= set(routes)
    bad_headers = [{}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Bearer "},
                   {"Authorization": site.review["Authorization"].replace("Bearer", "Basic")},
                   {"Authorization": site.review["Authorization"][len("Bearer "):]},   # no scheme
                   {"Authorization": site.review["Authorization"] + "x"},
                   {"Authorization": "Bearer ' OR '1'='1"}]
    for method, path in routes:
        for headers in bad_headers:
            r = request_for(site, method, path, ids, headers)
            assert r.status_code == 401, (method, path, headers, r.status_code, r.text)
            assert r.headers.get("www-authenticate") == "Bearer"
            one_line_refusal(r, 401)
            assert "results" not in r.text and "crop" not in r.json()
    assert snapshot(site.store) == before


def test_a_read_token_may_not_change_anything(site):
    ids = route_ids(site)
    writes = {(m, p) for m, p in api_routes(site.app) if m != "GET"} - POST_READS
    assert WRITES <= writes
    before = snapshot(site.store)
    for method, path in sorted(writes):
        r = request_for(site, method, path, ids, site.read)
        one_line_refusal(r, 403)
        assert "read" in r.json()["detail"]
        assert snapshot(site.store) == before, (method, path)
    # ... and may read everything
    for method, path in api_routes(site.app):
        if (method, path) not in writes:
            r = request_for(site, method, path, ids, site.read)
            assert r.status_code == 200, (method, path, r.text)
    assert snapshot(site.store) == before
    # the same requests with the review token do change it (so the 403s above were the role, not the request)
    for method, path in sorted(WRITES):
        if path.endswith("/confirm"):
            assert request_for(site, method, path, ids, site.review).status_code == 200
    assert snapshot(site.store) != before


CROP_NAMES = [
    "../../etc/passwd", "..%2F..%2Fetc%2Fpasswd", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "%2e%2e%2fstore.db",
    "..%252F..%252Fetc%252Fpasswd", "/etc/passwd", "%2Fetc%2Fpasswd", "....//....//etc/passwd", "..\\..\\store.db",
    "g" * 64, "A" * 64, "z" * 63 + "0", "0" * 63, "0" * 65, "0" * 64 + ".jpg", "0" * 62 + "..",
    "%00" + "0" * 61, "0" * 64 + "%00", "' OR '1'='1", "crops", "store.db", "secret",
]


def test_crop_names_never_reach_another_file(site, tmp_path):
    secret = b"root:x:0:0:SECRET-CONTENT"
    (tmp_path / "secret").write_bytes(secret)
    (tmp_path / "store" / "secret").write_bytes(secret)
    orphan = site.store.crops.put(b"\xff\xd8 a crop file no sighting names")  # on disk, not in the database
    real = site.get(f"/api/sightings/{site.sighting_id['p0-c1-0']}").json()["crop"]
    names = CROP_NAMES + [orphan, "0" * 64, real.upper(), "..%2Fcrops%2F" + real, real[:2] + "/" + real,
                          "%2e%2e%2fcrops%2f" + real[:2] + "%2f" + real + ".jpg"]
    before = snapshot(site.store)
    for name in names:
        r = site.client.get("/api/crops/" + name, headers=site.read)
        assert r.status_code in (404, 422), (name, r.status_code)
        assert r.headers.get("content-type", "").startswith("application/json"), name
        assert b"SECRET" not in r.content and b"root:" not in r.content and b"\xff\xd8" not in r.content[:2]
    # the static files are no way around it either
    for path in ["/static/../app.py", "/static/..%2Fapp.py", "/static/%2e%2e/app.py", "/static/..%2F..%2Fsecret",
                 "/static//etc/passwd", "/static/%2Fetc%2Fpasswd"]:
        r = site.client.get(path)
        assert r.status_code in (400, 404), (path, r.status_code)
        assert b"create_app" not in r.content and b"SECRET" not in r.content and b"root:" not in r.content
    assert site.get(f"/api/crops/{real}").status_code == 200
    assert snapshot(site.store) == before


def upload(site: Site, data: bytes, name: str = "q.png", kind: str = "image/png", app_client=None):
    client = app_client or site.client
    return client.post("/api/search/image", headers=site.read, files={"image": (name, data, kind)})


def test_uploads_too_large_or_not_images_are_refused(site, tmp_path):
    before = snapshot(site.store)
    # a PNG of ~100 bytes that claims 10000 x 10000 pixels (100 megapixels)
    bomb = png_claiming(10000, 10000)
    assert len(bomb) < 200
    one_line_refusal(upload(site, bomb), 413)
    # ... and a real one, made by Pillow: 1 bit per pixel compresses to a few kB
    out = io.BytesIO()
    Image.new("1", (10000, 10000)).save(out, format="PNG", optimize=True)
    assert len(out.getvalue()) < 100_000
    one_line_refusal(upload(site, out.getvalue()), 413)
    one_line_refusal(upload(site, png_claiming(70000, 70000)), 413)   # over Pillow's own bomb limit too
    # not images
    for data, name, kind in [(b"hello, not an image", "q.txt", "text/plain"),
                             (b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n", "q.pdf", "application/pdf"),
                             (b'<svg xmlns="x"><script>alert(1)</script></svg>', "q.svg", "image/svg+xml"),
                             (b"", "q.png", "image/png"),
                             (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "q.png", "image/png"),  # a damaged PNG
                             (b"GIF89a" + b"\x01\x00\x01\x00\x00\x00\x00;", "q.gif", "image/gif")]:
        one_line_refusal(upload(site, data, name, kind), 415)
    # a lie about the type does not help: a text file sent as image/jpeg
    one_line_refusal(upload(site, b"SELECT * FROM sightings", "q.jpg", "image/jpeg"), 415)
    # over the byte limit (the server's default), even though it starts as a valid PNG
    big = upload_of(site.bases[0])
    big = big + b"\x00" * (MAX_UPLOAD_BYTES + 1 - len(big))
    one_line_refusal(upload(site, big), 413)
    # a smaller limit set for the app
    small_app = create_app(site.store, Tokens(str(tmp_path / "tokens.json")), embed=fake_embed, model_name=MODEL,
                           max_upload_bytes=1000)
    with TestClient(small_app) as client:
        noisy = png_bytes(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8))
        assert len(noisy) > 1000
        one_line_refusal(upload(site, noisy, app_client=client), 413)
        assert upload(site, upload_of(site.bases[0]), app_client=client).status_code == 200
    # a missing file field
    one_line_refusal(site.client.post("/api/search/image", headers=site.read), 422)
    assert snapshot(site.store) == before


def test_sql_in_every_text_field_is_refused_and_changes_nothing(site):
    ids = route_ids(site)
    sid, ident = ids["sighting_id"], ids["identity_id"]
    before = snapshot(site.store)
    png = upload_of(site.bases[0])
    for sql in SQL:
        refusals = [
            site.get(f"/api/search/sighting/{sid}", params={"cameras": sql}),
            site.get(f"/api/search/sighting/{sid}", params={"start": sql}),
            site.get(f"/api/search/sighting/{sid}", params={"end": sql}),
            site.get(f"/api/search/sighting/{sid}", params={"model": sql}),
            site.get(f"/api/search/sighting/{sid}", params={"k": sql}),
            site.post("/api/search/image", params={"cameras": sql}, files={"image": ("q.png", png, "image/png")}),
            site.post("/api/search/image", params={"start": sql}, files={"image": ("q.png", png, "image/png")}),
            site.post("/api/search/image", params={"end": sql}, files={"image": ("q.png", png, "image/png")}),
            site.post("/api/search/image", params={"model": sql}, files={"image": ("q.png", png, "image/png")}),
            site.get("/api/links", params={"status": sql}),
            site.get("/api/links", params={"after": sql}),
            site.get("/api/links", params={"limit": sql}),
            site.get("/api/decisions", params={"before": sql}),
            site.get("/api/identities", params={"min_cameras": sql}),
            site.get("/api/identities", params={"offset": sql}),
            site.post(f"/api/identities/{ident}/split", json={"tracklets": [sql]}),
            site.post(f"/api/identities/{ident}/split", json={"tracklets": sql}),
            site.post("/api/identities/merge", json={"keep": sql, "other": ident}),
            site.post("/api/identities/merge", json={"keep": ident, "other": sql}),
            site.post(f"/api/identities/{ident}/split", content=sql, headers={"Content-Type": "application/json"}),
            site.get("/api/sightings/" + sql.replace("/", "%2F")),
            site.get("/api/identities/" + sql.replace("/", "%2F")),
            site.post("/api/links/" + sql.replace("/", "%2F") + "/confirm"),
            site.post("/api/decisions/" + sql.replace("/", "%2F") + "/undo"),
            site.get("/api/crops/" + sql.replace("/", "%2F")),
        ]
        for r in refusals:
            assert 400 <= r.status_code < 500, (sql, r.request.url, r.status_code, r.text)
            if r.headers.get("content-type", "").startswith("application/json"):
                one_line_refusal(r, r.status_code)
        assert snapshot(site.store) == before, sql
    # the store still answers as before
    assert site.get(f"/api/search/sighting/{sid}").status_code == 200
    assert len(site.links()) == PEOPLE * (len(CAMERAS) - 1) - 1  # route_ids confirmed one


def test_validation_errors_are_one_line_naming_the_parameter(site):
    r = site.get("/api/links", params={"limit": 0})
    one_line_refusal(r, 422)
    assert r.json()["detail"].startswith("limit:")
    r = site.post("/api/identities/merge", json={"keep": 1})
    one_line_refusal(r, 422)
    assert r.json()["detail"].startswith("other:")


# -- the page and its headers --------------------------------------------------------------------------

def test_csp_and_headers_on_the_page_and_the_api(site):
    for path, headers in [("/", {}), ("/static/app.js", {}), ("/static/style.css", {}), ("/api/health", site.read),
                          ("/api/health", {}), ("/api/crops/nothing", site.read)]:
        r = site.client.get(path, headers=headers)
        assert r.headers["content-security-policy"] == CSP, path
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
    assert "default-src 'self'" in CSP and "script-src 'self'" in CSP and "connect-src 'self'" in CSP
    assert "unsafe-inline" not in CSP and "unsafe-eval" not in CSP and "*" not in CSP and "http" not in CSP
    page = site.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert site.client.get("/static/app.js").headers["content-type"].split(";")[0] in (
        "text/javascript", "application/javascript")
    health = site.client.get("/api/health", headers=site.read).json()
    assert health["counts"]["sightings"] == len(site.features)


def static_files() -> Dict[str, str]:
    out = {}
    for name in sorted(os.listdir(STATIC)):
        with open(os.path.join(STATIC, name), encoding="utf-8") as f:
            out[name] = f.read()
    return out


def test_the_page_references_nothing_on_another_host():
    files = static_files()
    assert {"index.html", "app.js", "style.css"} <= set(files)
    for name, text in files.items():
        assert not re.search(r"(?i)\b(https?|ftp|wss?):", text), f"{name} names a URL with a scheme"
        assert not re.search(r"(?i)(src|href|action)\s*=\s*[\"']?\s*//", text), f"{name}: a protocol-relative URL"
        assert not re.search(r"(?i)url\(\s*[\"']?\s*(//|[a-z]+:)(?!data:)", text), f"{name}: url() to another host"
        assert "@import" not in text, name
        assert not re.search(r"(?i)fetch\(\s*[\"'`](?!/)", text), f"{name}: fetch of a URL that is not this server's"
    html = files["index.html"]
    # everything the page loads is one of these files, by a path on this server
    for ref in re.findall(r"(?:src|href)\s*=\s*\"([^\"]*)\"", html):
        assert ref.startswith(("/static/", "#", "data:")), ref
        if ref.startswith("/static/"):
            assert ref[len("/static/"):] in files, ref
    # the CSP allows no inline code or style: none is written
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html), "inline script"
    assert not re.search(r"\son[a-z]+\s*=", html), "inline event handler"
    assert not re.search(r"\sstyle\s*=", html), "inline style attribute"
    assert "<style" not in html
    # every id the tests and the docs rely on is there
    for id_ in ["token", "token-save", "search-file", "search-image-btn", "search-sighting", "search-sighting-btn",
                "search-cameras", "search-start", "search-end", "search-k", "results", "identity", "timeline",
                "tracklets", "split-btn", "merge-other", "merge-btn", "identity-links", "queue", "undo-last",
                "decisions", "status", "keys"]:
        assert f'id="{id_}"' in html, id_
    js = files["app.js"]
    assert "innerHTML" not in js and "eval(" not in js and "document.write" not in js
    assert "sessionStorage" in js and "localStorage" not in js  # the token lives only as long as the tab
