"""The API's OpenAPI schema fuzzed with schemathesis against the real server on the loopback: no answer
is a 500, every status is one the schema declares, and every body matches the schema of its status.

The app (reid/service/app.py) runs under uvicorn in a thread, on a socket bound to 127.0.0.1; the
schema is read from its /openapi.json and every generated request goes to that address only (a
requests session that ignores proxy settings from the environment and refuses any other host). Each
operation gets a bounded number of derandomized examples (repeatable), valid ones and ones that break
the schema, with a review token and again with a read token; on SQLite and PostgreSQL.
"""
from __future__ import annotations

import io
import socket
import threading
import time
from typing import Dict, List
from urllib.parse import urlsplit

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("sqlalchemy")
schemathesis = pytest.importorskip("schemathesis")

import requests  # noqa: E402
import uvicorn  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from PIL import Image  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (content_type_conformance, response_schema_conformance,  # noqa: E402
                                               status_code_conformance)

from reid.service.app import create_app  # noqa: E402
from reid.service.tokens import Tokens  # noqa: E402
from reid.store import NewSighting, NewTracklet, Store  # noqa: E402

pytestmark = pytest.mark.slow

DIM = 8
MODEL = "fake"
T0 = 1_764_331_200.0
LOOPBACK = ("127.0.0.1", "::1")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
#: Examples per operation and generation mode (review token; the read token gets READ_EXAMPLES).
EXAMPLES = 30
READ_EXAMPLES = 12


def fake_embed(crops: List[np.ndarray]) -> np.ndarray:
    """A stand-in model: the first DIM pixel values centred on 127.5 (a flat image gets a fixed direction)."""
    feats = np.stack([np.resize(c.reshape(-1), DIM).astype(np.float32) - 127.5 for c in crops])
    feats[:, 0] += 1.0  # never all zeros
    return feats / np.linalg.norm(feats, axis=1, keepdims=True)


def jpeg(rgb: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(rgb).save(out, format="JPEG", quality=90)
    return out.getvalue()


def small_store(folder: str, database_url: str) -> Store:
    """Three people, each seen by two cameras as one tracklet of two sightings, linked online (proposed
    links for the fuzzer to confirm, reject, split, merge and undo)."""
    rng = np.random.default_rng(3)
    bases = np.linalg.qr(rng.normal(size=(DIM, DIM)))[0][:3]
    store = Store(folder, database_url)
    store.register_model(MODEL, {"sha256": "1" * 64}, dim=DIM, threshold=0.8, threshold_source="test")
    tracklets = []
    for p in range(3):
        for c in (1, 2):
            t = NewTracklet(source=f"p{p}-c{c}", camera=c)
            for j in range(2):
                feature = (bases[p] + 0.05 * rng.normal(size=DIM)).astype(np.float32)
                t.sightings.append(NewSighting(source=f"p{p}-c{c}-{j}", time=T0 + 100 * p + 10 * c + j,
                                               box=(1.0, 2.0, 8.0, 16.0), frame=j, feature=feature,
                                               crop=jpeg(rng.integers(0, 256, (16, 8, 3), dtype=np.uint8))))
            tracklets.append(t)
    count = store.add_tracklets(MODEL, tracklets)
    assert count.tracklets == 6 and count.linked == 3
    return store


class LoopbackSession(requests.Session):
    """A requests session that talks to the loopback only: proxy settings from the environment are
    ignored, and a request for any other host fails before it is sent."""

    def __init__(self) -> None:
        super().__init__()
        self.trust_env = False
        self.sent = 0
        self.last = None  # the last request sent

    def send(self, request, **kwargs):
        host = urlsplit(request.url).hostname
        if host not in LOOPBACK:
            raise AssertionError(f"a request for {request.url} (not the loopback) was about to be sent")
        self.sent += 1
        self.last = request
        return super().send(request, **kwargs)


class LoopbackServer:
    """uvicorn serving `app` in a thread on a free 127.0.0.1 port."""

    def __init__(self, app) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self) -> "LoopbackServer":
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start on the loopback")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.sock.close()


@pytest.fixture
def served(tmp_path, database_url):
    store = small_store(str(tmp_path / "store"), database_url)
    tokens = Tokens(str(tmp_path / "tokens.json"))
    review, read = tokens.add("alice", "review"), tokens.add("bob", "read")
    app = create_app(store, tokens, embed=fake_embed, model_name=MODEL)
    session = LoopbackSession()
    try:
        with LoopbackServer(app) as server:
            yield server.url, session, {"review": review, "read": read}
    finally:
        session.close()
        store.close()


#: What uvicorn (h11) answers, as text, to a request that is not valid HTTP: the app never sees it.
HTTP_LEVEL_REFUSAL = "Invalid HTTP request received."


def refused_by_http_layer(request: requests.PreparedRequest) -> bool:
    """Whether h11 (uvicorn's HTTP parser, with uvicorn's default limit on a request's head) refuses
    `request`'s request line and headers, as the server saw them, before any app could (the fuzzer's
    invalid header names, or a query string of 100 KiB)."""
    import h11

    head = f"{request.method} {request.path_url} HTTP/1.1\r\n".encode("latin-1", "replace")
    for name, value in request.headers.items():
        head += name.encode("latin-1", "replace") + b": " + str(value).encode("latin-1", "replace") + b"\r\n"
    head += b"Host: 127.0.0.1\r\n\r\n"  # http.client adds the Host header
    limit = uvicorn.Config(None).h11_max_incomplete_event_size or 16 * 1024  # None: h11's own default, 16 KiB
    if len(head) > limit:  # h11 refuses a head it has not seen whole past the limit: as the bytes arrive
        return True
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=limit)
    try:
        conn.receive_data(head)
        conn.next_event()
    except h11.RemoteProtocolError:
        return True
    return False


def fuzz(schema, base_url: str, session: LoopbackSession, token: str, modes, examples: int) -> Dict[str, str]:
    """Run every operation of `schema` with `examples` generated cases per mode; returns the failures
    ("METHOD path [mode]" -> report), empty when every answer passed CHECKS."""
    failures: Dict[str, str] = {}
    answers: List[str] = []  # the answers that failed a check, for the report
    headers = {"Authorization": f"Bearer {token}"}
    for result in schema.get_all_operations():
        operation = result.ok()
        takes_input = any(len(x) for x in (operation.path_parameters, operation.query, operation.body))
        # an operation that takes no parameters and no body has no invalid request to make
        for mode in [m for m in modes if takes_input or m is GenerationMode.POSITIVE]:
            @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
            @given(case=operation.as_strategy(generation_mode=mode))
            def run(case) -> None:
                try:
                    response = case.call(base_url=base_url, session=session, headers=headers, timeout=30)
                except (requests.ConnectionError, requests.exceptions.ChunkedEncodingError):
                    # uvicorn answers a request h11 cannot parse with a 400 and closes the connection; the
                    # body the client is still sending then resets it, and the 400 may be lost with it
                    if refused_by_http_layer(session.last):
                        return
                    raise
                if response.status_code == 400 and response.text == HTTP_LEVEL_REFUSAL:
                    return  # uvicorn refused bytes that are not HTTP before the app saw them: no API answer
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except BaseException:
                    answers.append(f"{response.status_code} {response.headers.get('content-type')} "
                                   f"{response.text[:200]!r}")
                    raise

            try:
                run()
            except (Exception, BaseExceptionGroup) as e:  # noqa: BLE001 - collected, reported together below
                failures[f"{operation.method.upper()} {operation.path} [{mode.value}]"] = \
                    str(e)[:3000] + "\nanswers that failed: " + "; ".join(answers[-3:])
    return failures


def load_schema(base_url: str, session: LoopbackSession):
    r = session.get(f"{base_url}/openapi.json", timeout=30)
    assert r.status_code == 200, r.text
    document = r.json()
    schema = schemathesis.openapi.from_dict(document, config=schemathesis.Config())
    operations = [x.ok() for x in schema.get_all_operations()]
    assert len(operations) >= 18, [f"{o.method} {o.path}" for o in operations]
    return schema


def test_fuzzed_api_answers_within_its_schema(served):
    base_url, session, tokens = served
    assert urlsplit(base_url).hostname == "127.0.0.1"
    schema = load_schema(base_url, session)
    failures = fuzz(schema, base_url, session, tokens["review"], (GenerationMode.POSITIVE, GenerationMode.NEGATIVE),
                    EXAMPLES)
    failures.update({f"{k} (read token)": v for k, v in fuzz(
        schema, base_url, session, tokens["read"], (GenerationMode.POSITIVE,), READ_EXAMPLES).items()})
    assert session.sent > 500
    assert not failures, "\n\n".join(f"== {k}\n{v}" for k, v in failures.items())
    # the server is still whole after the fuzzing: the store answers
    r = session.get(f"{base_url}/api/health", headers={"Authorization": f"Bearer {tokens['read']}"}, timeout=30)
    assert r.status_code == 200 and r.json()["counts"]["sightings"] == 12


def test_refusals_are_declared_with_one_line_bodies(served):
    """The statuses the API gives for refusals are in the schema of the operations that give them, with
    the one-line ``{"detail": ...}`` body the server sends (not FastAPI's default list of errors)."""
    base_url, session, tokens = served
    document = session.get(f"{base_url}/openapi.json", timeout=30).json()
    for path, methods in document["paths"].items():
        if not path.startswith("/api/"):
            continue
        for method, op in methods.items():
            declared = set(op["responses"])
            assert {"401", "422"} <= declared, (method, path, declared)
            if method == "post" and path != "/api/search/image":  # the writes need the review role
                assert "403" in declared, (method, path, declared)
            text = str(op["responses"]["422"])
            assert "HTTPValidationError" not in text, (method, path, text)
    # what the server actually sends for a few refusals
    auth = {"Authorization": f"Bearer {tokens['read']}"}
    cases = [("get", "/api/me", {}, 401), ("post", "/api/links/1/confirm", auth, 403),
             ("get", "/api/sightings/999999", auth, 404), ("get", "/api/sightings/0", auth, 422),
             ("get", "/api/sightings/abc", auth, 422)]
    # ids past the id columns' range (32 bits on PostgreSQL) are refused as parameters (they once reached
    # PostgreSQL as "integer out of range": a 500); the largest id is merely not there
    review = {"Authorization": f"Bearer {tokens['review']}"}
    big = 2**31
    cases += [("get", f"/api/identities/{big}", auth, 422), ("get", f"/api/identities/{big - 1}", auth, 404),
              ("get", f"/api/search/sighting/{2**40}", auth, 422), ("get", f"/api/links?after={big}", auth, 422),
              ("get", f"/api/decisions?before={2**62}", auth, 422), ("post", f"/api/decisions/{big}/undo", review, 422),
              ("post", "/api/identities/merge", review, 422, {"keep": big, "other": 1}),
              ("post", "/api/identities/1/split", review, 422, {"tracklets": [2**63]}),
              ("post", "/api/identities/1/split", review, 422, {"tracklets": [big]}),
              ("post", "/api/exports", review, 422, None, b"{not json"),
              ("post", "/api/exports", review, 400, None, b"\xff[")]  # not even text: FastAPI's 400
    for method, path, headers, status, *body in cases:
        kwargs = {}
        if body and body[0] is not None:
            kwargs["json"] = body[0]
        elif len(body) > 1:
            kwargs["data"] = body[1]
            headers = dict(headers, **{"Content-Type": "application/json"})
        r = session.request(method, f"{base_url}{path}", headers=headers, timeout=30, **kwargs)
        assert r.status_code == status, (path, r.status_code, r.text)
        detail = r.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail, (path, detail)
