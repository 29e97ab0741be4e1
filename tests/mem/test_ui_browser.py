"""The memory browser in a real browser: ``harness-mem ui`` as its own process on 127.0.0.1 over a
real store, driven by headless Chromium (the system's, through Playwright). A person searches,
opens an entry and forgets it through the confirmation page; a page on another site cannot make
the browser forget anything; no page logs an error or fetches from anywhere else. And the process
loads no embedding model until a search by meaning needs one."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from ui_process import browser, chromium_path, ui_process

from harness_mem.errors import NotFoundError
from harness_mem.store import MemoryStore

# In `make test` (not marked slow): the proof of the page is these tests in a real browser.
pytestmark = pytest.mark.skipif(chromium_path() is None, reason="no chromium on this machine (CI installs it: .ci/run)")
WAIT_MS = 60_000  # generous: the machine may be loaded


@pytest.fixture
def stored(db_path: Path) -> Path:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("Password hashing: are we still on bcrypt?", kind="turn", role="user", session="s-auth", id="t0")
        store.add("No. We switched to argon2id last month.", kind="turn", role="assistant", session="s-auth", id="t1")
    return db_path


@pytest.fixture
def chromium() -> Iterator[Any]:
    with browser() as launched:
        yield launched


def watched(page: Any, origin: str) -> tuple[list[str], list[str]]:
    """Console errors, and requests that went anywhere but ``origin``, as the page runs."""
    errors: list[str] = []
    elsewhere: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: None if request.url.startswith(origin) else elsewhere.append(request.url))
    return errors, elsewhere


def test_search_finds_a_turn_and_forget_through_the_page_removes_it(stored: Path, chromium: Any) -> None:
    with ui_process(stored) as (url, _):
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        page = chromium.new_page()
        page.set_default_timeout(WAIT_MS)
        errors, elsewhere = watched(page, origin)
        page.goto(url)
        assert "token=" not in page.url  # traded for the session cookie
        page.fill("#q", "argon2id")
        page.press("#q", "Enter")
        page.wait_for_selector("li.hit mark")
        assert "argon2id" in page.inner_text("ol.hits")
        page.click("li.hit a.entry-link")
        page.wait_for_selector("text=Forget…")
        page.click("text=Forget…")
        page.wait_for_selector("button.confirm")
        assert "argon2id last month" in page.inner_text("ul.affected")  # what it will take, before it does
        with MemoryStore(stored, embedder=None) as store:
            assert store.get("t1")  # not before the confirmation
        page.click("button.confirm")
        page.wait_for_selector("p.notice")
        page.fill("#q", "argon2id")
        page.press("#q", "Enter")
        page.wait_for_selector("p.count")
        assert page.inner_text("p.count") == "0 hits"
        for path in ("/sessions", "/sessions/s-auth", "/facts", "/health", "/entries/t0"):
            page.goto(origin + path)
            page.wait_for_selector("main h1")
        assert errors == [] and elsewhere == []
    with MemoryStore(stored, embedder=None) as store, pytest.raises(NotFoundError):
        store.get("t1")


class _CrossSitePage(BaseHTTPRequestHandler):
    """A page on another origin with a form aimed at the memory browser's forget."""

    target = ""

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        body = (f'<!doctype html><title>win a prize</title><form method="post" action="{self.target}forget">'
                '<input type="hidden" name="id" value="t0"><input type="hidden" name="confirm" value="yes">'
                '<input type="hidden" name="csrf" value="0123abcd"><button id="go">Claim</button></form>').encode()
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_form_on_another_site_cannot_make_the_browser_forget(stored: Path, chromium: Any) -> None:
    with ui_process(stored) as (url, _):
        origin = "{0.scheme}://{0.netloc}/".format(urlsplit(url))
        handler = type("Page", (_CrossSitePage,), {"target": origin})
        other = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=other.serve_forever, daemon=True).start()
        try:
            page = chromium.new_page()
            page.set_default_timeout(WAIT_MS)
            page.goto(url)  # signed in: the browser holds the session cookie
            page.goto(f"http://127.0.0.1:{other.server_address[1]}/")
            with page.expect_response(lambda response: response.url.endswith("/forget")) as answered:
                page.click("#go")
            assert answered.value.status in (401, 403)
        finally:
            other.shutdown()
            other.server_close()
    with MemoryStore(stored, embedder=None) as store:
        assert store.get("t0")


@pytest.mark.slow  # loads the real model
@pytest.mark.real_model
def test_the_model_loads_only_when_a_search_by_meaning_needs_it(tmp_path: Path) -> None:
    db = tmp_path / "memory.db"
    made = subprocess.run([sys.executable, "-m", "harness_mem", "--db", str(db), "add", "we chose argon2id"],
                          capture_output=True, timeout=600)
    assert made.returncode == 0, made.stderr.decode()[-2000:]
    with ui_process(db) as (url, proc), httpx.Client(timeout=600, follow_redirects=True) as client:
        base = url.split("?")[0]

        def loaded() -> bool:
            maps = Path(f"/proc/{proc.pid}/maps").read_text()
            return any(name in maps for name in ("onnxruntime", "libtorch", "sentence_transformers"))

        client.get(url)
        assert client.get(base + "health").status_code == 200
        assert "argon2id" in client.get(base, params={"q": "argon2id", "mode": "keyword"}).text
        assert not loaded()
        assert "argon2id" in client.get(base, params={"q": "password hashing", "mode": "semantic"}).text
        assert loaded()
