"""The service fixtures work: a fresh database per backend (SQLite, PostgreSQL) and a headless
browser that loads, clicks and screenshots a page served on 127.0.0.1."""
from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

sa = pytest.importorskip("sqlalchemy")

PAGE = """<!doctype html>
<html><head><title>fixture page</title></head>
<body>
  <p id="status">not clicked</p>
  <button id="go" onclick="document.getElementById('status').textContent = 'clicked'">Go</button>
</body></html>
"""


def _notes_table(metadata):
    return sa.Table("notes", metadata,
                    sa.Column("id", sa.Integer, primary_key=True),
                    sa.Column("text", sa.String(100), nullable=False))


def test_database_roundtrip(database_url):
    """Create a table, insert rows and read them back, on each backend."""
    metadata = sa.MetaData()
    notes = _notes_table(metadata)
    engine = sa.create_engine(database_url)
    try:
        metadata.create_all(engine)
        with engine.begin() as conn:
            conn.execute(notes.insert(), [{"text": "first"}, {"text": "second"}])
        with engine.connect() as conn:
            rows = conn.execute(sa.select(notes.c.text).order_by(notes.c.id)).scalars().all()
        assert rows == ["first", "second"]
        assert engine.dialect.name == database_url.split(":")[0].split("+")[0]
    finally:
        engine.dispose()  # close pooled connections (PostgreSQL's would outlive the test)


def test_databases_are_independent(database_url, request, tmp_path):
    """A table made in one database does not appear in a second fresh one of the same backend."""
    if database_url.startswith("sqlite"):
        other_url = f"sqlite:///{tmp_path / 'other.db'}"
    else:
        other_url = request.getfixturevalue("postgres_cluster").create_database()
    assert other_url != database_url
    metadata = sa.MetaData()
    _notes_table(metadata)
    first, second = sa.create_engine(database_url), sa.create_engine(other_url)
    try:
        metadata.create_all(first)
        assert sa.inspect(first).get_table_names() == ["notes"]
        assert sa.inspect(second).get_table_names() == []
    finally:
        first.dispose()
        second.dispose()


@pytest.fixture
def page_url(tmp_path):
    """The URL of an index.html with a button, served from a thread on 127.0.0.1."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text(PAGE)

    class QuietHandler(SimpleHTTPRequestHandler):
        def log_message(self, *args):  # keep request lines out of the test output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.html"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_browser_clicks_and_screenshots(browser, page_url, tmp_path):
    """The headless browser loads the page, a click runs its JavaScript, a screenshot is a PNG."""
    from selenium.webdriver.common.by import By

    browser.get(page_url)
    assert browser.title == "fixture page"
    status = browser.find_element(By.ID, "status")
    assert status.text == "not clicked"
    browser.find_element(By.ID, "go").click()
    assert status.text == "clicked"
    assert browser.get_window_size() == {"width": 1280, "height": 900}

    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
