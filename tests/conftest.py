"""Shared, generic test fixtures."""
from __future__ import annotations

import os
import zlib
from typing import Callable, Sequence

import cv2
import numpy as np
import pytest


def _write_jpeg(path: str, size: Sequence[int] = (32, 16), value: int = -1) -> str:
    """Write a small random (or constant, when value >= 0) RGB JPEG at `path`; returns the path."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    h, w = size
    rng = np.random.default_rng(zlib.crc32(os.path.basename(path).encode()))
    img = np.full((h, w, 3), value, np.uint8) if value >= 0 else rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    if not cv2.imwrite(path, img):
        raise OSError(f"could not write {path}")
    return path


@pytest.fixture
def write_jpeg() -> Callable[..., str]:
    """``write_jpeg(path, size=(32, 16), value=-1)``: create a small JPEG (folders included)."""
    return _write_jpeg


@pytest.fixture(scope="module")
def one_torch_thread_module():
    """Run a module's tests with one torch intra-op thread, restoring the count afterwards.

    Test machines are small and shared: several intra-op threads fighting for 2 cores make
    tiny convolutions 10-30x slower.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def reid_log(caplog):
    """caplog that also sees the "reid" logger's records after ``setup_logger`` (which stops
    them from propagating to the root logger, where caplog listens)."""
    import logging

    logger = logging.getLogger("reid")
    logger.addHandler(caplog.handler)
    level, propagate = logger.level, logger.propagate
    logger.setLevel(logging.INFO)
    # caplog also listens on the root logger: without this a record would be seen twice when
    # no earlier test has run setup_logger (a test run alone).
    logger.propagate = False
    yield caplog
    logger.removeHandler(caplog.handler)
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """An empty torch hub cache and a download that fails as it does without a network."""
    from urllib.error import URLError

    import torch

    def no_network(*args, **kwargs):
        raise URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "hub"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", no_network)


@pytest.fixture(scope="session")
def tracker_python(tmp_path_factory) -> str:
    """The Python of the tracker environment (BoxMOT + TrackEval from the package index, this
    environment's packages underneath; reid/tracking/tracker_env.py), made once per test run
    and shared by the test processes (a file lock makes it once); ``$REID_TRACKER_ENV`` reuses
    one that exists."""
    from reid.tracking.tracker_env import create_env, default_env_dir

    if os.environ.get("REID_TRACKER_ENV"):
        return create_env(default_env_dir(), log=lambda _: None)
    shared = tmp_path_factory.getbasetemp().parent  # the same for every pytest-xdist worker of this run
    return create_env(str(shared / "tracker-env"), log=lambda _: None)


# --- Services: PostgreSQL and a headless browser (tests/_services.py) ----------------------------

def _missing(reason: str) -> None:
    """Skip the test for want of `reason`, outside CI; under CI (CI=true) fail it: CI must run
    every backend and the browser, not silently skip them."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: failing instead of skipping)", pytrace=False)
    pytest.skip(f"{reason} (skipped outside CI)")


@pytest.fixture(scope="session")
def postgres_cluster():
    """A throwaway PostgreSQL cluster (``tests/_services.PostgresCluster``) on a free 127.0.0.1
    port, one per test process (each pytest-xdist worker has its own), stopped and removed at
    the end of the session, failed tests or not."""
    from tests._services import PostgresCluster, postgres_missing

    reason = postgres_missing()
    if reason:
        _missing(reason)
    cluster = PostgresCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path) -> str:
    """The SQLAlchemy URL of a fresh, empty database; each test runs once per backend:
    SQLite (a file in tmp_path) and PostgreSQL (a new database in the session's cluster; it
    goes with the cluster)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    return request.getfixturevalue("postgres_cluster").create_database()


@pytest.fixture
def browser():
    """A Selenium webdriver on Debian's headless Chromium (window 1280x900) with a fresh profile,
    quit after the test."""
    import tempfile

    from tests._services import browser_missing, chrome_driver

    reason = browser_missing()
    if reason:
        _missing(reason)
    # Chromium may still be writing to its profile as it exits: ignore errors removing it.
    with tempfile.TemporaryDirectory(prefix="reid-chrome-", ignore_cleanup_errors=True) as profile:
        driver = chrome_driver(profile)
        try:
            yield driver
        finally:
            driver.quit()
