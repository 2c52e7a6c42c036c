"""The API docs page (/docs): Swagger UI served by the server itself, in a real browser, nothing from a CDN."""
from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("fastapi_offline")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from selenium.webdriver.common.by import By  # noqa: E402

from reid.service import create_app  # noqa: E402
from reid.service.app import CSP, DOCS_CSP  # noqa: E402
from reid.service.tokens import Tokens  # noqa: E402
from reid.store import Store  # noqa: E402
from tests._services import served_in_thread  # noqa: E402


@pytest.fixture
def server_url(tmp_path):
    store = Store(str(tmp_path / "store"))
    try:
        with served_in_thread(create_app(store, Tokens(str(tmp_path / "tokens.json")))) as url:
            yield url
    finally:
        store.close()


def test_docs_are_served_locally_with_their_own_policy(server_url):
    with httpx.Client(base_url=server_url, trust_env=False) as client:
        page = client.get("/docs")
        assert page.status_code == 200 and page.headers["content-security-policy"] == DOCS_CSP
        assert "http" not in page.text.lower()  # every asset is this server's
        assert client.get("/docs-assets/swagger-ui-bundle.js").status_code == 200
        assert client.get("/").headers["content-security-policy"] == CSP  # the review page keeps the strict one
        schema = client.get("/openapi.json").json()
    # the bearer scheme is declared, so the docs page's Authorize button sends the token
    assert any(v.get("scheme") == "bearer" for v in schema["components"]["securitySchemes"].values())


@pytest.mark.slow
def test_docs_page_renders_every_operation_in_the_browser(browser, server_url):
    browser.get(server_url + "/docs")
    deadline = time.monotonic() + 30
    while not browser.find_elements(By.CSS_SELECTOR, ".opblock"):
        assert time.monotonic() < deadline, "Swagger UI drew no operation"
        time.sleep(0.2)
    with httpx.Client(base_url=server_url, trust_env=False) as client:
        paths = client.get("/openapi.json").json()["paths"]
    expected = sum(len(ops) for ops in paths.values())
    assert len(browser.find_elements(By.CSS_SELECTOR, ".opblock")) == expected
    names = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
    assert names and all(n.startswith((server_url + "/", "data:")) for n in names), names
