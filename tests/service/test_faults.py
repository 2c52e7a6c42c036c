"""Faults: the server (tools/serve.py) killed with SIGKILL in the middle of a stream of review writes, and an
ingest killed with SIGKILL in the middle of its batches, then started again, on SQLite and PostgreSQL.

After the restart: every decision whose HTTP answer came back (200) is in the log, unchanged; the log holds
no decision nobody asked for; the state (tracklet -> identity, link -> status, identity -> merged_into, the
identities that exist) is the state before the writes with the logged changes replayed in order, each
change's "before" being the state it found (no decision row without its changes, no change without its
row); search answers are the brute-force cosine ranking of the features in the database. After the ingest
kill: whole batches or nothing (every tracklet with all its sightings, features and crop files), every batch
reported committed is there, and the saved vectors load (or are rebuilt) in step with the database.

Servers listen on 127.0.0.1 only and are spoken to with http.client (no proxy is ever consulted);
every process started here is killed in a finally.
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sqlalchemy")

from sqlalchemy import select  # noqa: E402

from reid.store import NewSighting, NewTracklet, Store  # noqa: E402
from reid.store.schema import Decision, Feature, Identity, Link, Sighting, Tracklet, TrackletFeature  # noqa: E402
from reid.store.vectors import ModelVectors, vector_bytes  # noqa: E402
from tests.service import _ingest_loop as loop  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SERVE = os.path.join(ROOT, "tools", "serve.py")
INGEST = os.path.join(ROOT, "tests", "service", "_ingest_loop.py")
MODEL = "fake"
DIM = 32
T0 = 1_764_331_200.0
CAMERAS = (1, 2, 3)


# -- processes ---------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill(proc: Optional[subprocess.Popen]) -> None:
    """SIGKILL `proc` (one this test started) if it still runs, and reap it."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    if proc is not None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def call(port: int, method: str, path: str, token: str, body: Any = None,
         timeout: float = 30.0) -> Tuple[int, Any]:
    """One request to the server on 127.0.0.1:`port`; (status, JSON answer). OSError / HTTPException when the
    connection breaks (the server was killed)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        headers = {"Authorization": f"Bearer {token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            answer = json.loads(raw) if raw else None
        except ValueError:
            answer = raw.decode(errors="replace")
        return r.status, answer
    finally:
        conn.close()


class Server:
    """tools/serve.py on a free 127.0.0.1 port, as a subprocess."""

    def __init__(self, folder: str, database: str, log: str) -> None:
        self.folder, self.database, self.log = folder, database, log
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0

    def start(self, token: str, attempts: int = 3) -> "Server":
        for _ in range(attempts):
            self.port = free_port()
            out = open(self.log, "ab")
            try:
                self.proc = subprocess.Popen([sys.executable, SERVE, "--store", self.folder, "--database",
                                              self.database, "--host", "127.0.0.1", "--port", str(self.port)],
                                             cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
            finally:
                out.close()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    if call(self.port, "GET", "/api/me", token, timeout=5)[0] == 200:
                        return self
                except (OSError, http.client.HTTPException):
                    pass
                time.sleep(0.05)
            kill(self.proc)  # port taken by another process meanwhile, or too slow: try again
        with open(self.log, errors="replace") as f:
            raise RuntimeError(f"tools/serve.py did not start:\n{f.read()[-3000:]}")

    def kill(self) -> None:
        kill(self.proc)


def new_token(folder: str, database: str, spec: str) -> str:
    out = subprocess.run([sys.executable, SERVE, "--store", folder, "--database", database, "--new-token", spec],
                         cwd=ROOT, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if "shown once:" in x][0]
    return line.rsplit(":", 1)[1].strip()


# -- reading the database ----------------------------------------------------------------------------

def state(store: Store) -> Dict[str, Dict[int, Any]]:
    """What review decisions change, read from the database."""
    with store.session() as s:
        return {"tracklets": dict(s.execute(select(Tracklet.id, Tracklet.identity_id)).all()),
                "links": dict(s.execute(select(Link.id, Link.status)).all()),
                "identities": dict(s.execute(select(Identity.id, Identity.merged_into)).all())}


def logged_decisions(store: Store) -> List[Dict[str, Any]]:
    with store.session() as s:
        return [{"id": d.id, "kind": d.kind, "by": d.by_whom, "undoes": d.undoes, "payload": json.loads(d.payload)}
                for d in s.scalars(select(Decision).order_by(Decision.id))]


def replay(initial: Dict[str, Dict[int, Any]], decisions: List[Dict[str, Any]]) -> Dict[str, Dict[int, Any]]:
    """The state after `decisions` (in id order) from `initial`, asserting each change found the state its
    "before" says (a decision whose changes were half written, or a change made without its decision,
    breaks the chain)."""
    now = {k: dict(v) for k, v in initial.items()}
    for d in decisions:
        p = d["payload"]
        for key, (before, after) in p["tracklets"].items():
            assert now["tracklets"][int(key)] == before, (d, key, now["tracklets"][int(key)])
            now["tracklets"][int(key)] = after
            now["identities"].setdefault(after, None)  # a reject or split makes the identity it moves to
        if d["kind"] == "split":
            assert p["request"]["new_identity"] in now["identities"], d
        for key, (before, after) in p["links"].items():
            assert now["links"].get(int(key)) == before, (d, key, now["links"].get(int(key)))
            now["links"][int(key)] = after
        for key, (before, after) in p["identities"].items():
            assert now["identities"][int(key)] == before, (d, key)
            now["identities"][int(key)] = after
        if d["kind"] == "undo":
            assert d["undoes"] == p["request"]["decision"] and d["undoes"] < d["id"], d
    return now


def stored_features(store: Store, model_id: int) -> Tuple[np.ndarray, np.ndarray]:
    """Sighting ids and feature vectors of the model, read from the database (feature id order)."""
    with store.session() as s:
        rows = s.execute(select(Feature.sighting_id, Feature.vector).where(Feature.model_id == model_id)
                         .order_by(Feature.id)).all()
    return (np.array([r[0] for r in rows], np.int64),
            np.stack([np.frombuffer(bytes(r[1]), np.float32) for r in rows]).astype(np.float64))


def brute_force(ids: np.ndarray, feats: np.ndarray, query: np.ndarray, k: int,
                exclude: Optional[int] = None) -> List[Tuple[int, float]]:
    f = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    scores = f @ (query / np.linalg.norm(query))
    order = np.lexsort((np.arange(len(f)), -scores))
    out = [(int(ids[i]), float(scores[i])) for i in order if int(ids[i]) != exclude]
    return out[:k]


def same_ranking(got: List[Tuple[int, float]], expected: List[Tuple[int, float]]) -> None:
    assert [g[0] for g in got] == [e[0] for e in expected], (got, expected)
    np.testing.assert_allclose([g[1] for g in got], [e[1] for e in expected], atol=1e-5)


# -- the server killed during review writes ----------------------------------------------------------

def people_tracklets(rng: np.random.Generator, people: range) -> List[NewTracklet]:
    """Each person seen by every camera as one tracklet of two sightings (people far apart: random
    directions in DIM dimensions), so the linker proposes two links per person."""
    out = []
    for p in people:
        base = np.random.default_rng(1000 + p).normal(size=DIM)
        base /= np.linalg.norm(base)
        for c in CAMERAS:
            t = NewTracklet(source=f"p{p}-c{c}", camera=c)
            for j in range(2):
                key = f"p{p}-c{c}-{j}"
                t.sightings.append(NewSighting(source=key, time=T0 + 1000 * p + 100 * c + j, box=(1.0, 2.0, 8.0, 16.0),
                                               crop=loop.expected_crop(key), frame=j,
                                               feature=(base + 0.05 * rng.normal(size=DIM)).astype(np.float32)))
            out.append(t)
    return out


class Reviewer(threading.Thread):
    """Sends review writes (confirm, reject, split, merge, undo) to the server as fast as it answers, until
    told to stop or the connection breaks; records each request and what came back (None: no answer)."""

    def __init__(self, port: int, token: str, seed: int, stop: threading.Event, outcomes: list,
                 lock: threading.Lock) -> None:
        super().__init__(daemon=True)
        self.port, self.token, self.rng, self.stop = port, token, random.Random(seed), stop
        self.outcomes, self.lock = outcomes, lock
        self.broken = False  # its connection broke: the server went away under it
        self.error: Optional[BaseException] = None

    def get(self, path: str) -> Any:
        status, answer = call(self.port, "GET", path, self.token)
        assert status == 200, (path, status, answer)
        return answer

    def write(self, kind: str, path: str, body: Any = None) -> None:
        record = {"kind": kind, "path": path, "body": body, "status": None, "answer": None}
        with self.lock:
            self.outcomes.append(record)
        record["status"], record["answer"] = call(self.port, "POST", path, self.token, body)
        assert record["status"] in (200, 404, 409), record  # never a 500

    def step(self) -> None:
        kind = self.rng.choice(["confirm", "confirm", "reject", "reject", "split", "merge", "undo"])
        if kind in ("confirm", "reject"):
            links = self.get("/api/links?status=proposed&limit=500")
            if links:
                self.write(kind, f"/api/links/{self.rng.choice(links)['id']}/{kind}")
        elif kind in ("split", "merge"):
            identities = self.get(f"/api/identities?limit=500&min_cameras={2 if kind == 'split' else 1}")
            if kind == "split" and identities:
                ident = self.get(f"/api/identities/{self.rng.choice(identities)['id']}")
                members = [t["id"] for t in ident["tracklets"]]
                if len(members) > 1:
                    moved = self.rng.sample(members, self.rng.randint(1, len(members) - 1))
                    self.write(kind, f"/api/identities/{ident['id']}/split", {"tracklets": moved})
            elif kind == "merge" and len(identities) > 1:
                keep, other = self.rng.sample([x["id"] for x in identities], 2)
                self.write(kind, "/api/identities/merge", {"keep": keep, "other": other})
        else:
            done = self.get("/api/decisions?limit=20")
            if done:
                self.write(kind, f"/api/decisions/{self.rng.choice(done)['id']}/undo")

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.step()
            except (OSError, http.client.HTTPException):
                self.broken = True  # the server is gone
                return
            except BaseException as e:  # noqa: BLE001 - reported by the test
                self.error = e
                return


def drive_and_kill(server: Server, token: str, seed: int, successes: int) -> List[dict]:
    """Three reviewers write until `successes` writes came back 200, then the server gets SIGKILL while
    they are still writing; returns every write made and its answer."""
    outcomes: List[dict] = []
    lock, stop = threading.Lock(), threading.Event()
    reviewers = [Reviewer(server.port, token, seed * 10 + i, stop, outcomes, lock) for i in range(3)]
    for r in reviewers:
        r.start()
    try:
        deadline = time.monotonic() + 120
        while sum(o["status"] == 200 for o in list(outcomes)) < successes:
            assert time.monotonic() < deadline, "the reviewers made too few decisions"
            assert any(r.is_alive() for r in reviewers), outcomes[-5:]
            time.sleep(0.005)
        time.sleep(random.Random(seed).uniform(0, 0.05))  # somewhere in the stream of writes
        assert any(r.is_alive() for r in reviewers), outcomes[-5:]
        server.kill()
    finally:
        stop.set()
        for r in reviewers:
            r.join(60)
    assert not any(r.is_alive() for r in reviewers)
    assert not [r.error for r in reviewers if r.error], [repr(r.error) for r in reviewers]
    assert any(r.broken for r in reviewers), "the server was not killed in the middle of the writes"
    return outcomes


def test_server_killed_during_review_writes(tmp_path, database_url):
    folder, log = str(tmp_path / "store"), str(tmp_path / "serve.log")
    rng = np.random.default_rng(11)
    store = Store(folder, database_url)
    try:
        store.register_model(MODEL, {"sha256": "2" * 64}, dim=DIM, threshold=0.8, threshold_source="test")
        count = store.add_tracklets(MODEL, people_tracklets(rng, range(24)))
        assert count.linked == 48
        store.vectors(store.model(MODEL))
        assert store.save_vectors()  # saved, then more rows: the server starts on stale saved vectors
        store.add_tracklets(MODEL, people_tracklets(rng, range(24, 30)))
        initial = state(store)
        model_id = store.model(MODEL).id
    finally:
        store.close()
    token = new_token(folder, database_url, "alice:review")
    server = Server(folder, database_url, log)
    outcomes: List[dict] = []
    try:
        for round_ in range(2):  # killed, restarted, killed again
            server.start(token)
            outcomes += drive_and_kill(server, token, seed=round_ + 1, successes=25)
            assert server.proc.returncode == -signal.SIGKILL
        server.start(token)

        store = Store(folder, database_url)
        try:
            decisions = logged_decisions(store)
            now = state(store)
            ids, feats = stored_features(store, model_id)
        finally:
            store.close()
        # every answered decision is in the log, as answered; the log holds nothing nobody sent
        logged = {d["id"]: d for d in decisions}
        answered = [o for o in outcomes if o["status"] == 200]
        unanswered = [o for o in outcomes if o["status"] is None]
        assert len(answered) >= 50, len(answered)
        for o in answered:
            d = logged.get(o["answer"]["id"])
            assert d is not None, f"decision {o['answer']['id']} came back 200 but is not in the log: {o}"
            assert (d["kind"], d["by"], d["payload"]) == (o["kind"], "alice", o["answer"]["payload"]), (d, o)
        assert len(answered) <= len(decisions) <= len(answered) + len(unanswered)
        assert len({o["answer"]["id"] for o in answered}) == len(answered)
        # the state is the initial one with the log replayed, and nothing else
        replayed = replay(initial, decisions)
        assert now["tracklets"] == replayed["tracklets"]
        assert now["links"] == replayed["links"]
        assert now["identities"] == replayed["identities"]
        # the restarted server's search is the brute-force ranking of the stored features
        for sid in np.random.default_rng(5).choice(ids, 8, replace=False):
            status, answer = call(server.port, "GET", f"/api/search/sighting/{int(sid)}?k=25", token)
            assert status == 200, answer
            query = feats[list(ids).index(sid)]
            same_ranking([(x["id"], x["score"]) for x in answer["results"]],
                         brute_force(ids, feats, query, 25, int(sid)))
            assert all(x["identity"] == now["tracklets"][x["tracklet"]] for x in answer["results"])
        status, health = call(server.port, "GET", "/api/health", token)
        assert status == 200 and health["counts"]["features"] == len(ids) == 30 * 3 * 2
        assert [v["rows"] for v in health["vectors"].values()] == [len(ids)]
        # and it takes decisions again
        proposed = call(server.port, "GET", "/api/links?status=proposed", token)[1]
        assert proposed
        status, answer = call(server.port, "POST", f"/api/links/{proposed[0]['id']}/confirm", token)
        assert status == 200 and answer["id"] > max(logged), answer
    finally:
        server.kill()


# -- an ingest killed between and inside its batches -------------------------------------------------

def check_whole_batches(store: Store, model_id: int, committed: int) -> int:
    """Every batch is there whole or not at all, each tracklet with all its sightings, their features (the
    bytes the loop wrote) and crop files, its pooled feature and its identity; the batches reported
    committed are all there. Returns how many batches are there."""
    with store.session() as s:
        tracklets = dict(s.execute(select(Tracklet.source, Tracklet.id).where(Tracklet.source.like("b%"))).all())
        sightings = s.execute(select(Sighting.tracklet_id, Sighting.source, Sighting.id, Sighting.crop)).all()
        features = dict(s.execute(select(Feature.sighting_id, Feature.vector)
                                  .where(Feature.model_id == model_id)).all())
        pooled = set(s.scalars(select(TrackletFeature.tracklet_id).where(TrackletFeature.model_id == model_id)))
        identities = set(s.scalars(select(Identity.id)))
        identity_of = dict(s.execute(select(Tracklet.id, Tracklet.identity_id)).all())
    by_tracklet: Dict[int, List[tuple]] = {}
    for tid, source, sid, crop in sightings:
        by_tracklet.setdefault(tid, []).append((source, sid, crop))
    batches = sorted({int(src[1:].split("-")[0]) for src in tracklets})
    assert batches == list(range(len(batches))), batches  # batches commit in order
    assert len(batches) >= committed, (batches, committed)
    assert len(tracklets) == len(batches) * loop.BATCH, "a batch is there in part"
    crops = store.crops
    for b in batches:
        for i in range(loop.BATCH):
            expected = loop.expected_tracklet(b, i)
            tid = tracklets[expected.source]
            got = sorted(by_tracklet.get(tid, []))
            assert [g[0] for g in got] == sorted(x.source for x in expected.sightings), expected.source
            want = {x.source: x for x in expected.sightings}
            for source, sid, crop in got:
                assert features.get(sid) is not None, f"sighting {source} has no feature"
                assert bytes(features[sid]) == vector_bytes(want[source].feature), source
                assert crops.read(crop) == want[source].crop and hashlib.sha256(want[source].crop).hexdigest() == crop
            assert tid in pooled and identity_of[tid] in identities
    assert set(features) <= {sid for rows in by_tracklet.values() for _, sid, _ in rows}
    return len(batches)


def check_vectors(store: Store) -> str:
    """The saved vectors (the loop saves them after each batch) load or are rebuilt, and then hold exactly
    the database's rows and rank as brute force does."""
    model = store.model(MODEL)
    vec = ModelVectors(store.engine, model.id, model.dim, os.path.join(store.folder, "vectors"))
    what = vec.load()
    assert what in ("loaded", "rebuilt"), what
    with store.session() as s:
        rows = s.execute(select(Feature.id, Feature.sighting_id, Feature.vector).where(Feature.model_id == model.id)
                         .order_by(Feature.id)).all()
    assert len(vec) == len(rows)
    assert vec.rows.feature_id[:len(vec)].tolist() == [r[0] for r in rows]
    ids = np.array([r[1] for r in rows], np.int64)
    feats = np.stack([np.frombuffer(bytes(r[2]), np.float32) for r in rows]).astype(np.float64)
    rng = np.random.default_rng(len(rows))
    for _ in range(5):
        query = rng.normal(size=model.dim)
        hits = vec.search(query, 20)
        same_ranking(list(zip(hits.sighting_ids.tolist(), hits.scores.tolist())), brute_force(ids, feats, query, 20))
        found = store.search(MODEL, query, 20, cameras=[1, 3])
        keep = np.isin(np.array(cameras_of(store, ids)), [1, 3])
        same_ranking([(x["id"], x["score"]) for x in found], brute_force(ids[keep], feats[keep], query, 20))
    return what


def cameras_of(store: Store, ids: np.ndarray) -> List[int]:
    with store.session() as s:
        camera = dict(s.execute(select(Sighting.id, Sighting.camera_id)).all())
    return [camera[int(i)] for i in ids]


def run_ingest_until_killed(folder: str, database: str, log: str, until: int, seed: int) -> Tuple[int, str]:
    """Start the loop, let it report `until` batches committed (those already in the store first: it writes
    them again), SIGKILL it at a random moment of the next batch (or of the vectors' save); returns how many
    batches it reported committed, and its output."""
    proc = None
    lines: List[str] = []
    try:
        proc = subprocess.Popen([sys.executable, INGEST, folder, database, MODEL], cwd=ROOT, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=open(log, "ab"), text=True)
        reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 180
        committed = lambda: [ln for ln in list(lines) if ln.startswith("committed")]  # noqa: E731
        while len(committed()) < until:
            assert proc.poll() is None, f"the ingest loop ended: {lines[-5:]}"
            assert time.monotonic() < deadline, "the ingest loop is too slow"
            time.sleep(0.002)
        # how long a new batch takes (with its save), to kill somewhere inside the one after it
        stamp = time.monotonic()
        n = len(committed())
        while len(committed()) == n and time.monotonic() - stamp < 60:
            time.sleep(0.002)
        batch_seconds = time.monotonic() - stamp
        time.sleep(random.Random(seed).uniform(0, batch_seconds))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        reader.join(30)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, lines[-5:])
        return len(committed()), "".join(lines)
    finally:
        kill(proc)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()


def test_ingest_killed_mid_batch(tmp_path, database_url):
    folder, log = str(tmp_path / "store"), str(tmp_path / "ingest.log")
    store = Store(folder, database_url)
    try:
        model = store.register_model(MODEL, {"sha256": "3" * 64}, dim=loop.DIM, threshold=0.9, threshold_source="test")
    finally:
        store.close()
    there = 0
    for round_ in range(3):
        # the run before was killed: this one first writes its batches again (idempotent), then new ones
        committed, _ = run_ingest_until_killed(folder, database_url, log, there + 2, seed=round_)
        store = Store(folder, database_url)
        try:
            batches = check_whole_batches(store, model.id, committed)
            assert batches >= there + 2
            check_vectors(store)
            # the store takes writes again: the next batch, whole
            store.add_tracklets(MODEL, loop.batch_of(batches))
            there = check_whole_batches(store, model.id, batches + 1)
            assert there == batches + 1
        finally:
            store.close()
    with open(log, errors="replace") as f:
        assert "Traceback" not in f.read()


# -- the server stopped by SIGTERM / SIGINT --------------------------------------------------------------

@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_server_stopped_by_a_signal_saves_its_vectors(tmp_path, stop):
    """systemd, docker and kill send SIGTERM: the server answers what is under way, saves the vectors (a
    restart loads them instead of reading every row again), says so in one line and exits 0."""
    folder, log = str(tmp_path / "store"), str(tmp_path / "serve.log")
    database = f"sqlite:///{tmp_path / 'store.db'}"
    store = Store(folder, database)
    try:
        store.register_model(MODEL, {"sha256": "3" * 64}, dim=DIM, threshold=0.8, threshold_source="test")
        store.add_tracklets(MODEL, people_tracklets(np.random.default_rng(5), range(4)))
        model_id = store.model(MODEL).id
    finally:
        store.close()
    saved = os.path.join(folder, "vectors", f"model-{model_id}.npz")
    assert not os.path.exists(saved)
    token = new_token(folder, database, "alice:read")
    server = Server(folder, database, log).start(token)
    try:
        status, health = call(server.port, "GET", "/api/health", token)
        assert status == 200 and health["counts"]["sightings"] == 24
        server.proc.send_signal(stop)
        assert server.proc.wait(timeout=60) == 0
    finally:
        server.kill()
    with open(log) as f:
        lines = f.read().strip().splitlines()
    assert lines[-1] == f"stopped by {stop.name}; vectors saved (1 model(s), a restart loads them)", lines
    assert not [x for x in lines if "Traceback" in x], lines
    store = Store(folder, database)
    try:
        vectors = ModelVectors(store.engine, model_id, DIM, os.path.join(folder, "vectors"))
        assert vectors.load() == "loaded" and len(vectors) == 24
    finally:
        store.close()
