"""What the service refuses before a route runs (token, body size, Host), and what it reads again."""
from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from fastapi.testclient import TestClient  # noqa: E402

from reid.service import create_app  # noqa: E402
from reid.service.app import MAX_JSON_BYTES  # noqa: E402
from reid.service.tokens import Tokens  # noqa: E402
from reid.store import Store  # noqa: E402
from tests.store._data import T0, WEIGHTS, tracklet  # noqa: E402

DIM = 4


@pytest.fixture
def served(tmp_path):
    store = Store(str(tmp_path / "store"))
    store.register_model("demo", WEIGHTS, dim=DIM, threshold=0.5)
    store.add_tracklets("demo", [tracklet("a", 1, [T0], np.eye(DIM)[:1]), tracklet("b", 2, [T0 + 5], np.eye(DIM)[:1])])
    tokens = Tokens(str(tmp_path / "store" / "tokens.json"))
    review = tokens.add("ann", "review")
    app = create_app(store, tokens, embed=lambda crops: np.ones((len(crops), DIM)), model_name="demo")
    yield store, tokens, TestClient(app), {"Authorization": f"Bearer {review}"}
    store.close()


def test_no_token_is_refused_before_the_body_is_read(served):
    _, _, client, _ = served
    for body in (b"{not json", b"[" + b"1," * 1000 + b"1]"):
        r = client.post("/api/identities/1/split", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 401 and r.json() == {
            "detail": "a valid token is needed: send 'Authorization: Bearer <token>'."}
        assert r.headers["www-authenticate"] == "Bearer"


def test_bodies_over_the_route_limit_are_refused_unread(served):
    store, _, client, headers = served
    before = store.counts()
    big = b"[" + b"1," * (MAX_JSON_BYTES // 2) + b"1]"
    r = client.post("/api/identities/1/split", content=big, headers={**headers, "content-type": "application/json"})
    assert r.status_code == 413 and f"over this route's limit of {MAX_JSON_BYTES}" in r.json()["detail"]
    r = client.post("/api/search/image", headers=headers, files={"image": ("a.png", b"x" * (9 << 20), "image/png")})
    assert r.status_code == 413
    assert store.counts() == before


def test_a_token_made_while_serving_counts_at_once(served, tmp_path):
    _, tokens, client, _ = served
    other = Tokens(tokens.path)  # another process: tools/serve.py --new-token
    late = other.add("late", "read")
    assert client.get("/api/me", headers={"Authorization": f"Bearer {late}"}).json() == {"name": "late", "role": "read"}
    with open(tokens.path, "w", encoding="utf-8") as f:  # every token removed by hand
        f.write('{"tokens": []}')
    assert client.get("/api/me", headers={"Authorization": f"Bearer {late}"}).status_code == 401


def test_a_crop_whose_file_is_gone_is_not_found(served):
    store, _, client, headers = served
    crop = store.sightings([1])[1]["crop"]
    os.remove(store.crops.path(crop))
    r = client.get(f"/api/crops/{crop}", headers=headers)
    assert r.status_code == 404 and "every writer must use the same folder" in r.json()["detail"]


def test_loopback_server_answers_loopback_names_only(tmp_path):
    from reid.cli.serve import LOOPBACK_HOSTS

    store = Store(str(tmp_path / "store"))
    tokens = Tokens(str(tmp_path / "tokens.json"))
    client = TestClient(create_app(store, tokens, allowed_hosts=LOOPBACK_HOSTS), base_url="http://127.0.0.1:8000")
    assert client.get("/").status_code == 200
    assert client.get("/", headers={"host": "localhost:8000"}).status_code == 200
    assert client.get("/", headers={"host": "rebound.example:8000"}).status_code == 400  # DNS rebinding
    store.close()


def test_a_new_folder_for_a_database_that_holds_a_store_is_refused(served, tmp_path):
    store, _, _, _ = served
    with pytest.raises(ValueError) as e:
        Store(str(tmp_path / "elsewhere"), store.database)
    assert "already holds a store (2 sightings) whose crops are in another folder" in str(e.value)
