"""The review page in a real browser (headless Chromium) against a real server (uvicorn on 127.0.0.1):
a tiny model trained on the synthetic dataset, its gallery ingested as tracklets of one sighting each
and linked online; the page searches by an uploaded query image (the person comes first), shows an
identity's sightings per camera, splits, merges, confirms, rejects and undoes by clicks and keys, and
every change is checked through the API. Screenshots go to the test's folder and to docs/images/
(docs/service.md shows them).

Nothing leaves the machine: the server listens on 127.0.0.1, the browser resolves no other host
(tests/_services.py), and the test checks that every resource the page loaded came from the server.
"""
from __future__ import annotations

import hashlib
import io
import os
import re
import time
from dataclasses import dataclass
from typing import Dict, List

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("selenium")

import httpx  # noqa: E402
from PIL import Image  # noqa: E402
from sqlalchemy import select  # noqa: E402

from reid.service.app import create_app  # noqa: E402
from reid.service.tokens import Tokens  # noqa: E402
from reid.store import NewSighting, NewTracklet, Store  # noqa: E402
from reid.store.schema import Sighting  # noqa: E402
from tests._services import served_in_thread  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")
DOCS_IMAGES = os.path.join(ROOT, "docs", "images")
MODEL = "demo-synthetic"
#: Cosine similarity at or above which the linker joins a tracklet to an identity: on this data it
#: proposes ~20 links (most right, a few wrong) and leaves several identities of 2+ tracklets.
THRESHOLD = 0.6
T0 = 1_764_331_200.0  # 2025-11-28 12:00:00 UTC
#: The synthetic data: 20 training people, 5 test people seen by 2-3 cameras, 2 gallery images each.
SYNTHETIC = dict(num_train_ids=20, num_test_ids=5, num_cameras=3, images_per_camera=3, num_distractors=0,
                 image_size=(128, 64))
WAIT = 20  # seconds the page may take for anything


def train_opts(data: str, out: str) -> List[str]:
    """The demo config shrunk to ~20 s on 2 CPU cores (tests/cli/test_cli.py's tiny_opts with more people
    and 10 epochs): enough that the first gallery image is the right person for most queries."""
    s = SYNTHETIC
    return ["DATASETS.ROOT", data, "OUTPUT_DIR", out, "MODEL.DEVICE", "cpu",
            "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", str(s["num_train_ids"]),
            "DATASETS.SYNTHETIC.NUM_TEST_IDS", str(s["num_test_ids"]),
            "DATASETS.SYNTHETIC.NUM_CAMERAS", str(s["num_cameras"]),
            "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", str(s["images_per_camera"]),
            "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "0", "DATASETS.SYNTHETIC.IMAGE_SIZE", str(list(s["image_size"])),
            "INPUT.SIZE_TRAIN", "[32, 16]", "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2",
            "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE", "2", "DATALOADER.NUM_WORKERS", "0",
            "SOLVER.MAX_EPOCH", "10", "SOLVER.WARMUP_ITERS", "1", "SOLVER.LOG_PERIOD", "100",
            "TEST.EVAL_PERIOD", "0", "SOLVER.CHECKPOINT_PERIOD", "100"]


def rgb(path: str) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"))


@dataclass
class Trained:
    """The trained model, the synthetic data and their features (computed once per test module)."""

    embed: object
    dim: int
    weights_sha256: str
    gallery: list                # (path, pid, camid)
    gallery_feats: np.ndarray
    query: tuple                 # the query image chosen: (path, pid, camid)


class _Lock:
    """An exclusive lock on a file (xdist workers train the model once between them)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self):
        self.f = open(self.path, "w")
        try:
            import fcntl
            fcntl.flock(self.f, fcntl.LOCK_EX)
        except ImportError:  # not POSIX: each worker trains its own
            pass
        return self

    def __exit__(self, *exc):
        self.f.close()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Trained:
    from reid.cli import train as cli_train
    from reid.data import build_dataset
    from reid.tracking.appearance import load_appearance_models

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # this run's folder, shared by its workers
    shared = base / "service-page-model"
    with _Lock(str(base / "service-page-model.lock")):
        run = shared / "run"
        if not (run / "model_final.pth").is_file():
            out = shared / f"run-{os.getpid()}"
            assert cli_train.main(["--config-file", DEMO] + train_opts(str(shared / "data"), str(out))) == 0
            os.replace(out, run)
    model = load_appearance_models(run=str(run), device="cpu")[0]
    data = build_dataset("synthetic", str(shared / "data"), verbose=False, **SYNTHETIC)
    gallery = list(data.gallery)
    g = model.embed([rgb(p) for p, _, _ in gallery])
    q = model.embed([rgb(p) for p, _, _ in data.query])
    g_pids = np.array([pid for _, pid, _ in gallery])
    q_pids = np.array([pid for _, pid, _ in data.query])
    sims = q @ g.T
    rank1 = float(np.mean(g_pids[sims.argmax(1)] == q_pids))
    assert rank1 >= 0.6, f"the tiny model is not trained enough: rank-1 {rank1:.2f}"
    # the query the page searches with: of those whose best match is their person at a score clearly over
    # the threshold, the one whose person is first by the widest margin
    margin = np.array([sims[i][g_pids == q_pids[i]].max() - sims[i][g_pids != q_pids[i]].max()
                       for i in range(len(q_pids))])
    margin[sims.max(1) < THRESHOLD + 0.05] = -np.inf
    best = int(np.argmax(margin))
    assert margin[best] > 0.05, "no query image is found first with a clear margin"
    with open(run / "model_final.pth", "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return Trained(model.embed, int(g.shape[1]), digest, gallery, g, tuple(data.query[best]))


@dataclass
class Site:
    url: str
    store: Store
    review_token: str
    read_token: str
    api: httpx.Client              # with the review token
    pid_of_sighting: Dict[int, int]
    trained: Trained

    def get(self, path: str, **kw):
        r = self.api.get(path, **kw)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def members(self, identity: int) -> set:
        return {t["id"] for t in self.get(f"/api/identities/{identity}")["tracklets"]}

    def links(self, status: str = "proposed") -> Dict[int, dict]:
        return {x["id"]: x for x in self.get("/api/links", params={"status": status, "limit": 500})}

    def decisions(self) -> List[dict]:
        return self.get("/api/decisions")


def ingest(store: Store, trained: Trained) -> Dict[int, int]:
    """The gallery as tracklets of one sighting each, in a shuffled order one every 20 s (online linking
    joins them as they come); returns sighting id -> pid."""
    store.register_model(MODEL, {"weights_sha256": trained.weights_sha256}, dim=trained.dim,
                         threshold=THRESHOLD, threshold_source="test: chosen for the synthetic gallery")
    order = np.random.default_rng(0).permutation(len(trained.gallery))
    tracklets, pid_of_source = [], {}
    for i, j in enumerate(order):
        path, pid, camid = trained.gallery[j]
        name = os.path.basename(path)
        with open(path, "rb") as f:
            crop = f.read()
        w, h = Image.open(io.BytesIO(crop)).size
        tracklets.append(NewTracklet(source=f"gallery/{name}", camera=int(camid), sightings=[
            NewSighting(source=f"gallery/{name}#0", time=T0 + 20.0 * i, box=(0.0, 0.0, float(w), float(h)),
                        crop=crop, feature=trained.gallery_feats[j], frame=i)]))
        pid_of_source[f"gallery/{name}#0"] = int(pid)
    count = store.add_tracklets(MODEL, tracklets)
    assert count.linked >= 6, count
    with store.session() as s:
        return {sid: pid_of_source[src] for src, sid in s.execute(select(Sighting.source, Sighting.id))}


@pytest.fixture
def site(tmp_path, trained):
    """A store of the synthetic gallery served by uvicorn on 127.0.0.1 (a free port) from a thread."""
    store = Store(str(tmp_path / "store"))
    pid_of_sighting = ingest(store, trained)
    tokens = Tokens(str(tmp_path / "tokens.json"))
    review, read = tokens.add("operator", "review"), tokens.add("viewer", "read")
    app = create_app(store, tokens, embed=trained.embed, model_name=MODEL)
    try:
        with served_in_thread(app) as url:
            # trust_env=False: no proxy from the environment; only this loopback address is ever contacted
            with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {review}"}, trust_env=False,
                              timeout=30) as client:
                assert client.get("/").status_code == 200
                yield Site(url, store, review, read, client, pid_of_sighting, trained)
    finally:
        store.close()


# -- browser helpers -----------------------------------------------------------------------------------

def wait_for(browser, condition, what: str, timeout: float = WAIT):
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    try:  # the page redraws lists as answers come: an element found may be replaced before it is read
        return WebDriverWait(browser, timeout, poll_frequency=0.05, ignored_exceptions=(
            NoSuchElementException, StaleElementReferenceException, IndexError)).until(lambda d: condition(d))
    except Exception as e:  # TimeoutException: say what was awaited, and the status line
        line = browser.find_element("id", "status").text
        raise AssertionError(f"waiting for {what}: {type(e).__name__}; status bar: {line!r}") from None


def until(check, what: str, timeout: float = WAIT):
    """Poll the API until `check()` is true."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"waiting for {what}"
        time.sleep(0.05)


def by_testid(browser, testid: str):
    return browser.find_elements("css selector", f"[data-testid='{testid}']")


def click(browser, element) -> None:
    """Click `element` after scrolling it to the middle of the window (the fixed header and status bar
    cover the window's edges)."""
    browser.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'});", element)
    element.click()


def status_line(browser) -> str:
    return browser.find_element("id", "status").text


def sign_in(browser, site: Site, token: str, role: str = "review") -> None:
    browser.get(site.url + "/")
    box = browser.find_element("id", "token")
    box.send_keys(token)
    click(browser, browser.find_element("id", "token-save"))
    wait_for(browser, lambda d: d.find_element("id", "whoami").text.endswith(role), "the token to be accepted")


def crops_loaded(browser, selector: str) -> bool:
    """Every crop under `selector` is shown from a blob: URL and decoded."""
    return browser.execute_script(
        "const imgs = [...document.querySelectorAll(arguments[0] + ' img.crop')];"
        "return imgs.length > 0 && imgs.every(i => i.src.startsWith('blob:') && i.complete && i.naturalWidth > 0);",
        selector)


def press(browser, key: str) -> None:
    """A key press on the page itself (not in a text box)."""
    from selenium.webdriver.common.action_chains import ActionChains

    browser.execute_script("document.activeElement && document.activeElement.blur();")
    ActionChains(browser).send_keys(key).perform()


def screenshot(browser, tmp_path, name: str) -> None:
    """Save the window to the test's folder and, reduced to 256 colours, to docs/images/<name>."""
    raw = tmp_path / name
    assert browser.save_screenshot(str(raw))
    image = Image.open(raw).convert("RGB")
    assert image.size == (1280, 900) or image.size[0] >= 1280
    os.makedirs(DOCS_IMAGES, exist_ok=True)
    out = io.BytesIO()
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(out, "PNG", optimize=True)
    assert len(out.getvalue()) < 200_000, f"{name}: {len(out.getvalue())} bytes"
    tmp = os.path.join(DOCS_IMAGES, f".{name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(out.getvalue())
    os.replace(tmp, os.path.join(DOCS_IMAGES, name))


def only_this_server(browser, site: Site) -> None:
    """Every resource the page loaded came from the server (or a blob: URL it made); no policy blocked one."""
    names = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert names, "the page loaded nothing?"
    for name in names:
        assert name.startswith((site.url + "/", "blob:", "data:")), name
    assert "security policy" not in status_line(browser)


# -- the tests -----------------------------------------------------------------------------------------

def test_search_by_upload_finds_the_person_first(browser, site, tmp_path):
    path, pid, _ = site.trained.query
    sign_in(browser, site, site.review_token)
    browser.find_element("id", "search-k").clear()
    browser.find_element("id", "search-k").send_keys("24")
    browser.find_element("id", "search-file").send_keys(path)
    wait_for(browser, lambda d: d.find_element("id", "search-preview").get_attribute("src").startswith("blob:"),
             "the query preview")
    click(browser, browser.find_element("id", "search-image-btn"))
    wait_for(browser, lambda d: len(by_testid(d, "result")) == 24, "24 results")
    wait_for(browser, lambda d: crops_loaded(d, "#results"), "the result crops")

    cards = by_testid(browser, "result")
    shown = [int(c.get_attribute("data-sighting")) for c in cards]
    # the API answers the same search the same way, and its first sighting is the query's person
    with open(path, "rb") as f:
        answer = site.api.post("/api/search/image", params={"k": 24},
                               files={"image": (os.path.basename(path), f.read(), "image/jpeg")}).json()
    assert shown == [r["id"] for r in answer["results"]]
    assert site.pid_of_sighting[shown[0]] == pid
    assert answer["threshold"] == pytest.approx(THRESHOLD)
    # each card: score, camera, time, a link to its identity; best first
    scores = [float(c.get_attribute("data-score")) for c in cards]
    assert scores == sorted(scores, reverse=True)
    first = cards[0]
    assert first.find_element("css selector", "[data-testid='result-score']").text == f"{answer['results'][0]['score']:.3f}"
    assert f"cam {answer['results'][0]['camera']}" in first.text
    assert first.find_element("css selector", "[data-testid='result-identity']").get_attribute("href").endswith(
        f"#identity/{answer['results'][0]['identity']}")
    # the threshold line sits between the results at or above it and those below
    order = browser.execute_script(
        "return [...document.getElementById('results').children].map(c => c.id === 'threshold-line' ? 'line' : c.dataset.score);")
    assert order.count("line") == 1
    cut = order.index("line")
    assert all(float(s) >= THRESHOLD for s in order[:cut]) and all(float(s) < THRESHOLD for s in order[cut + 1:])
    assert 0 < cut < 24, "the chosen query has results on both sides of the threshold"
    line = browser.find_element("id", "threshold-line")
    assert line.is_displayed() and f"{THRESHOLD:.3f}" in line.text and line.size["height"] > 5
    screenshot(browser, tmp_path, "service_search.png")
    only_this_server(browser, site)

    # filters: cameras, a time window (the browser's local time, sent as UTC), k; search by a sighting
    target = shown[3]
    when = site.get(f"/api/sightings/{target}")["time"]
    browser.execute_script(
        "const f = (t) => { const d = new Date(t * 1000), p = (n) => String(n).padStart(2, '0');"
        " return `${d.getFullYear()}-${p(d.getMonth()+1)}-${p(d.getDate())}`"
        " + `T${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`; };"
        "document.getElementById('search-start').value = f(arguments[0]);"
        "document.getElementById('search-end').value = f(arguments[1]);", T0, when + 200)
    browser.find_element("id", "search-cameras").send_keys("0, 1")
    browser.find_element("id", "search-sighting").send_keys(str(target))
    click(browser, browser.find_element("id", "search-sighting-btn"))
    wait_for(browser, lambda d: "sighting #" in d.find_element("id", "search-summary").text, "the search by sighting")
    wait_for(browser, lambda d: crops_loaded(d, "#results"), "the result crops")
    got = [(int(c.get_attribute("data-sighting")), int(c.get_attribute("data-camera")), float(c.get_attribute("data-time")))
           for c in by_testid(browser, "result")]
    expected = site.get(f"/api/search/sighting/{target}", params={
        "k": 24, "cameras": "0,1", "start": T0, "end": when + 200})["results"]
    assert [g[0] for g in got] == [r["id"] for r in expected] and got
    assert target not in [g[0] for g in got]
    assert all(cam in (0, 1) and T0 <= t <= when + 200 for _, cam, t in got)

    # a result's identity link opens that identity
    ident = int(by_testid(browser, "result")[0].get_attribute("data-identity"))
    click(browser, by_testid(browser, "result-identity")[0])
    wait_for(browser, lambda d: d.find_element("id", "identity-heading").text.startswith(f"Identity #{ident} "),
             "the identity view")


def test_identity_view_split_merge_and_undo(browser, site, tmp_path):
    listed = site.get("/api/identities", params={"limit": 500})
    ident = max(listed, key=lambda x: (x["tracklets"], len(x["cameras"]), -x["id"]))
    iid = ident["id"]
    record = site.get(f"/api/identities/{iid}")
    members = {t["id"] for t in record["tracklets"]}
    assert len(members) >= 3
    sign_in(browser, site, site.review_token)
    click(browser, browser.find_element("id", "nav-identity"))
    wait_for(browser, lambda d: len(by_testid(d, "identity-card")) == len(listed), "the identity list")
    wait_for(browser, lambda d: crops_loaded(d, "#identity-list"), "the identity list's crops")
    browser.save_screenshot(str(tmp_path / "identities.png"))
    browser.find_element("id", "identity-input").send_keys(str(iid))
    click(browser, browser.find_element("id", "identity-open"))
    wait_for(browser, lambda d: d.find_element("id", "identity-heading").text.startswith(f"Identity #{iid} "), "the identity")
    wait_for(browser, lambda d: crops_loaded(d, "#timeline"), "the timeline's crops")
    # one timeline row per camera, each sighting placed left to right by time
    rows = by_testid(browser, "timeline-row")
    assert [int(r.get_attribute("data-camera")) for r in rows] == [c["camera"] for c in record["cameras"]]
    for row, cam in zip(rows, record["cameras"]):
        thumbs = row.find_elements("css selector", "[data-testid='timeline-thumb']")
        assert [int(t.get_attribute("data-sighting")) for t in thumbs] == [s["id"] for s in cam["sightings"]]
        xs = [t.rect["x"] for t in thumbs]
        assert xs == sorted(xs)
    assert len(by_testid(browser, "tracklet-row")) == len(members)
    assert {int(r.get_attribute("data-link")) for r in by_testid(browser, "link-row")} == {x["id"] for x in record["links"]}
    screenshot(browser, tmp_path, "service_identity.png")

    # split: tick one tracklet in the table and click another's picture on the timeline
    ordered = sorted(members)
    click(browser, browser.find_element("css selector", f"input[data-testid='tracklet-check'][data-tracklet='{ordered[-1]}']"))
    # a picture on the timeline that no other covers at its centre (pictures close in time overlap)
    free = browser.execute_script(
        "return [...document.querySelectorAll(\"[data-testid='timeline-thumb']\")].filter(t => {"
        " const r = t.getBoundingClientRect(); t.scrollIntoView({block: 'center'});"
        " const q = t.getBoundingClientRect();"
        " return t.contains(document.elementFromPoint(q.left + q.width / 2, q.top + q.height / 2)); })"
        ".map(t => Number(t.dataset.tracklet));")
    other = next(t for t in reversed(ordered[:-1]) if t in free)
    picked = {ordered[-1], other}
    click(browser, browser.find_element("css selector", f"[data-testid='timeline-thumb'][data-tracklet='{other}']"))
    assert browser.find_element("id", "split-btn").text == "Split 2 selected tracklet(s)"
    click(browser, browser.find_element("id", "split-btn"))
    wait_for(browser, lambda d: "split off as identity #" in status_line(d), "the split")
    new = int(re.search(r"identity #(\d+)", status_line(browser).split("split off as")[1]).group(1))
    assert site.members(new) == picked
    assert site.members(iid) == members - picked
    split_decision = site.decisions()[0]
    assert split_decision["kind"] == "split" and split_decision["by"] == "operator"
    wait_for(browser, lambda d: len(by_testid(d, "tracklet-row")) == len(members) - 2, "the identity redrawn")

    # merge the new identity back in by its number
    browser.find_element("id", "merge-other").send_keys(str(new))
    click(browser, browser.find_element("id", "merge-btn"))
    wait_for(browser, lambda d: f"identity #{new} merged into #{iid}" in status_line(d), "the merge")
    assert site.members(iid) == members and site.members(new) == set()
    assert site.get(f"/api/identities/{new}")["merged_into"] == iid
    wait_for(browser, lambda d: len(by_testid(d, "tracklet-row")) == len(members), "the identity redrawn")

    # undo the merge (the page's last decision), then the split from the decision log
    click(browser, browser.find_element("id", "identity-undo"))
    wait_for(browser, lambda d: "undone" in status_line(d), "the undo")
    assert site.members(iid) == members - picked and site.members(new) == picked
    assert site.get(f"/api/identities/{new}")["merged_into"] is None
    click(browser, browser.find_element("id", "nav-review"))
    row = wait_for(browser, lambda d: d.find_elements(
        "css selector", f"[data-testid='decision-row'][data-decision='{split_decision['id']}']"), "the decision log")[0]
    click(browser, row.find_element("css selector", "[data-testid='decision-undo']"))
    until(lambda: site.members(iid) == members, "the split to be undone")
    assert site.members(new) == set()
    wait_for(browser, lambda d: "undone" in d.find_element(
        "css selector", f"[data-testid='decision-row'][data-decision='{split_decision['id']}']").text, "the log to show it")

    # the identity's links: confirm one and reject another from its page
    proposed = [x["id"] for x in site.get(f"/api/identities/{iid}")["links"] if x["status"] == "proposed"]
    assert len(proposed) >= 2
    click(browser, browser.find_element("id", "nav-identity"))
    wait_for(browser, lambda d: d.find_element("id", "identity-list").is_displayed(), "the identity list")
    browser.find_element("id", "identity-input").clear()
    browser.find_element("id", "identity-input").send_keys(str(iid))
    click(browser, browser.find_element("id", "identity-open"))
    row = wait_for(browser, lambda d: [r for r in d.find_elements(
        "css selector", f"[data-testid='link-row'][data-link='{proposed[0]}']") if r.is_displayed()], "the identity's links")[0]
    click(browser, row.find_element("css selector", "[data-testid='link-confirm']"))
    until(lambda: proposed[0] in site.links("confirmed"), "the link to be confirmed")
    wait_for(browser, lambda d: d.find_element("css selector", f"[data-testid='link-row'][data-link='{proposed[0]}']")
             .get_attribute("data-status") == "confirmed", "the link row redrawn")
    rejected = site.get(f"/api/identities/{iid}")["links"]
    link = next(x for x in rejected if x["id"] == proposed[1])
    click(browser, browser.find_element(
        "css selector", f"[data-testid='link-row'][data-link='{proposed[1]}'] [data-testid='link-reject']"))
    until(lambda: proposed[1] in site.links("rejected"), "the link to be rejected")
    assert site.members(iid) == members - {link["tracklet"]}
    wait_for(browser, lambda d: len(by_testid(d, "tracklet-row")) == len(members) - 1, "the identity redrawn")
    only_this_server(browser, site)


def test_review_queue_by_clicks_and_keys(browser, site, tmp_path):
    proposed = site.links()
    assert len(proposed) >= 6
    sign_in(browser, site, site.review_token)
    wait_for(browser, lambda d: d.find_element("id", "queue-count").text == str(len(proposed)), "the queue count")
    click(browser, browser.find_element("id", "nav-review"))
    wait_for(browser, lambda d: len(by_testid(d, "link-card")) == len(proposed), "the review queue")
    wait_for(browser, lambda d: crops_loaded(d, "#queue"), "the queue's crops")
    # least sure first, each with its tracklet's crop and the identity's other crop side by side
    cards = by_testid(browser, "link-card")
    order = [int(c.get_attribute("data-link")) for c in cards]
    assert order == [x["id"] for x in site.get("/api/links", params={"limit": 500})]
    assert len(cards[0].find_elements("css selector", "img.crop")) == 2
    assert cards[0].find_element("css selector", "[data-testid='link-score']").text.endswith(
        f"{proposed[order[0]]['score']:.3f}")
    assert "current" in cards[0].get_attribute("class")
    browser.find_element("id", "keys").is_displayed()
    assert "confirm" in browser.find_element("id", "keys").text
    screenshot(browser, tmp_path, "service_review.png")

    # y: confirm the selected (first) link
    first = order[0]
    press(browser, "y")
    until(lambda: site.links("confirmed").keys() == {first}, "y to confirm")
    wait_for(browser, lambda d: int(by_testid(d, "link-card")[0].get_attribute("data-link")) == order[1], "the next link")
    # n: reject the next one; its tracklet leaves the identity
    second = proposed[order[1]]
    press(browser, "n")
    until(lambda: set(site.links("rejected")) == {order[1]}, "n to reject")
    assert second["tracklet"] not in site.members(second["identity"])
    # u: undo the reject
    wait_for(browser, lambda d: "rejected" in status_line(d), "the reject to be shown")
    press(browser, "u")
    until(lambda: order[1] in site.links(), "u to undo")
    assert second["tracklet"] in site.members(second["identity"])
    assert site.links("rejected") == {}
    # j moves the selection down; y confirms that one
    wait_for(browser, lambda d: len(by_testid(d, "link-card")) == len(proposed) - 1, "the queue redrawn")
    wait_for(browser, lambda d: int(d.find_element("css selector", ".link-card.current").get_attribute("data-link")) == order[1],
             "the selection to stay in place")
    press(browser, "j")
    assert int(browser.find_element("css selector", ".link-card.current").get_attribute("data-link")) == order[2]
    press(browser, "y")
    until(lambda: site.links("confirmed").keys() == {first, order[2]}, "j, y to confirm the third link")
    # a click on Reject, then Undo in the log
    wait_for(browser, lambda d: order[2] not in [int(c.get_attribute("data-link")) for c in by_testid(d, "link-card")],
             "the queue redrawn")
    target = order[3]
    card = browser.find_element("css selector", f"[data-testid='link-card'][data-link='{target}']")
    click(browser, card.find_element("css selector", "[data-testid='queue-reject']"))
    until(lambda: set(site.links("rejected")) == {target}, "the click to reject")
    reject = site.decisions()[0]
    assert reject["kind"] == "reject" and reject["payload"]["request"]["link"] == target
    row = wait_for(browser, lambda d: d.find_elements(
        "css selector", f"[data-testid='decision-row'][data-decision='{reject['id']}'] [data-testid='decision-undo']"),
        "the log's Undo")[0]
    click(browser, row)
    until(lambda: target in site.links(), "the log's Undo")
    # the undo button on top undoes the page's last decision still standing: the confirm of the third link
    click(browser, browser.find_element("id", "undo-last"))
    until(lambda: site.links("confirmed").keys() == {first}, "Undo last")
    kinds = [d["kind"] for d in site.decisions()]
    assert kinds == ["undo", "undo", "reject", "confirm", "undo", "reject", "confirm"]
    # two quick presses of y confirm two links, each the one selected when its turn comes
    wait_for(browser, lambda d: order[2] in [int(c.get_attribute("data-link")) for c in by_testid(d, "link-card")],
             "the queue redrawn")
    queue = [int(c.get_attribute("data-link")) for c in by_testid(browser, "link-card")]
    current = int(browser.find_element("css selector", ".link-card.current").get_attribute("data-link"))
    nxt = queue[queue.index(current) + 1]
    press(browser, "yy")
    until(lambda: site.links("confirmed").keys() == {first, current, nxt}, "y, y to confirm two links")
    only_this_server(browser, site)


def test_tokens_and_refusals_show_in_the_status_bar(browser, site):
    browser.get(site.url + "/")
    wait_for(browser, lambda d: "Enter a token" in status_line(d), "the request for a token")
    # the page loaded only from this server, and with no token asked the API for nothing
    only_this_server(browser, site)
    # an unknown token: 401, one line
    browser.find_element("id", "token").send_keys("not-a-token")
    click(browser, browser.find_element("id", "token-save"))
    wait_for(browser, lambda d: status_line(d).startswith("Error 401:"), "the 401")
    assert "\n" not in status_line(browser)
    assert browser.find_element("id", "status").get_attribute("data-state") == "error"
    # a read token may look but not decide: 403 in the status bar, nothing changed
    sign_in(browser, site, site.read_token, role="read")
    assert browser.execute_script("return sessionStorage.getItem('reid-token');") == site.read_token
    before = (site.links(), site.decisions())
    click(browser, browser.find_element("id", "nav-review"))
    wait_for(browser, lambda d: len(by_testid(d, "link-card")) == len(before[0]), "the review queue")
    press(browser, "y")
    wait_for(browser, lambda d: status_line(d).startswith("Error 403:"), "the 403")
    assert "read" in status_line(browser)
    browser.execute_script("document.getElementById('status').textContent = '';")
    click(browser, by_testid(browser, "queue-reject")[0])
    wait_for(browser, lambda d: status_line(d).startswith("Error 403:"), "the 403 of a click")
    assert (site.links(), site.decisions()) == before
    # a bad parameter: 422 in one line naming it
    click(browser, browser.find_element("id", "nav-search"))
    browser.find_element("id", "search-cameras").send_keys("two")
    browser.find_element("id", "search-sighting").send_keys("1")
    click(browser, browser.find_element("id", "search-sighting-btn"))
    wait_for(browser, lambda d: status_line(d).startswith("Error 422:") and "cameras" in status_line(d), "the 422")
    # forgetting the token clears it
    click(browser, browser.find_element("id", "token-forget"))
    assert browser.execute_script("return sessionStorage.getItem('reid-token');") is None
    only_this_server(browser, site)
