"""Acting through the memory browser in a real browser: headless Chromium over a real store served
by a real ``harness-mem ui`` process. Each action is reached as a person reaches it (a button, its
confirmation page, its Yes), and what it changed is read back from the store through the library:
consolidating a session, what it derived with its sources and history, a correction that keeps the
old version (and the facts ``as of`` a day before it show that one), a note stored redacted, and a forget whose words
leave every byte of the file at ``gc``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from ui_process import browser, chromium_path, ui_process

from harness_mem.errors import NotFoundError
from harness_mem.store import MemoryStore

# In `make test` (not marked slow): the proof of the page is these tests in a real browser.
pytestmark = pytest.mark.skipif(chromium_path() is None, reason="no chromium on this machine (CI installs it: .ci/run)")
WAIT_MS = 60_000  # generous: the machine may be loaded
SESSION = "s-auth"
TURNS = [("user", "The login test fails after the argon2 switch."),
         ("tool", "==== 1 failed, 11 passed in 0.84s ===="),
         ("assistant", "We switched to argon2id last month; the prefix check now accepts it."),
         ("tool", "==== 12 passed in 0.91s ===="),
         ("user", "Thanks, that works.")]


@pytest.fixture
def stored(db_path: Path) -> Path:
    with MemoryStore(db_path, embedder=None) as store:
        for i, (role, text) in enumerate(TURNS):
            store.add(text, kind="turn", role=role, session=SESSION, id=f"t{i}", created_at=f"2026-03-09T10:3{i}:00Z")
        store.add("The deploy target is staging-eu.", kind="fact", id="f-deploy", created_at="2026-03-09T11:00:00Z")
    return db_path


@pytest.fixture
def chromium() -> Iterator[Any]:
    with browser() as launched:
        yield launched


def opened(chromium: Any, url: str) -> tuple[Any, str, list[str]]:
    """A signed-in page, its origin, and the console errors it logs."""
    page = chromium.new_page()
    page.set_default_timeout(WAIT_MS)
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(url)
    return page, "{0.scheme}://{0.netloc}".format(urlsplit(url)), errors


def test_consolidate_a_session_then_correct_what_it_derived(stored: Path, chromium: Any) -> None:
    with ui_process(stored) as (url, _):
        page, origin, errors = opened(chromium, url)
        page.goto(f"{origin}/sessions/{SESSION}")
        assert "Nothing yet" in page.inner_text("section.derived")
        page.click("text=Consolidate this session…")
        page.wait_for_selector("button.confirm")
        assert "It would write" in page.inner_text("main")  # the preview, written by a dry run
        with MemoryStore(stored, embedder=None) as store:
            assert not list(store.list(session=SESSION, kind=["summary", "fact", "episode"]))
        page.click("button.confirm")
        page.wait_for_selector("p.notice")
        derived = page.inner_text("section.derived")
        assert "Nothing yet" not in derived
        with MemoryStore(stored, embedder=None) as store:
            written = list(store.list(session=SESSION, kind=["summary", "fact", "episode"]))
            assert written
            summary = next(e for e in written if e.kind == "summary")
        # The summary shows the turns it came from, in their words, each linked.
        page.goto(f"{origin}/entries/{quote(summary.id)}")
        sources = page.inner_text("section.sources")
        assert any(text in sources for _, text in TURNS)
        page.click("section.sources a.entry-link >> nth=0")
        page.wait_for_selector("main h1")
        assert "/entries/t" in page.url
        # A correction: a confirmation, then a new version; the old one stays in the history.
        page.goto(f"{origin}/entries/{quote(summary.id)}")
        page.fill("#content", "The login service hashes passwords with argon2id (corrected).")
        page.click("text=Correct…")
        page.wait_for_selector("button.confirm")
        with MemoryStore(stored, embedder=None) as store:
            assert store.get(summary.id).superseded_by is None  # not before the Yes
        page.click("button.confirm")
        page.wait_for_selector("section.history")
        history = page.inner_text("section.history")
        assert summary.content[:40] in history and "(corrected)" in history and "until" in history
        with MemoryStore(stored, embedder=None) as store:
            versions = store.history(summary.id)
            assert [v.content for v in versions][-1].endswith("(corrected).") and len(versions) == 2
            assert versions[-1].source == "ui"  # written by the update_memory operation, as from the browser
        assert errors == []


def test_a_note_added_through_the_page_is_stored_redacted(stored: Path, chromium: Any) -> None:
    with ui_process(stored) as (url, _):
        page, origin, errors = opened(chromium, url)
        page.goto(f"{origin}/notes/new")
        page.fill("#content", "The on-call for auth is ana@example.com this week.")
        page.fill("#tags", "ops")
        page.click("text=Store…")
        page.wait_for_selector("button.confirm")
        with MemoryStore(stored, embedder=None) as store:
            assert not list(store.list(kind="note"))  # not before the Yes
        page.click("button.confirm")
        page.wait_for_selector("p.notice")
        shown = page.inner_text("main")
        assert "ana@example.com" not in shown and "<EMAIL" in shown  # the placeholder, as stored
        assert errors == []
    with MemoryStore(stored, embedder=None) as store:
        [note] = store.list(kind="note")
        assert note.tags == ("ops",) and note.source == "ui" and "ana@example.com" not in note.content


def test_forget_through_the_page_then_gc_leaves_no_byte_of_it(stored: Path, chromium: Any) -> None:
    words = b"prefix check now accepts it"
    with ui_process(stored) as (url, _):
        page, origin, errors = opened(chromium, url)
        page.goto(f"{origin}/entries/t2")
        page.click("text=Forget…")
        page.wait_for_selector("button.confirm")
        page.click("button.confirm")
        page.wait_for_selector("p.notice")
        assert errors == []
    with MemoryStore(stored, embedder=None) as store, pytest.raises(NotFoundError):
        store.get("t2")
    done = subprocess.run([sys.executable, "-m", "harness_mem", "--db", str(stored), "gc"], capture_output=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert not any(words in path.read_bytes() for path in stored.parent.glob(stored.name + "*"))


def test_a_corrected_fact_as_of_before_the_correction_shows_the_old_text(stored: Path, chromium: Any) -> None:
    with ui_process(stored) as (url, _):
        page, origin, errors = opened(chromium, url)
        page.goto(f"{origin}/entries/f-deploy")
        page.fill("#content", "The deploy target is staging-us.")
        page.click("text=Correct…")
        page.click("button.confirm")
        page.wait_for_selector("section.history")
        page.goto(f"{origin}/facts")
        now = page.inner_text("ul.hits")
        assert "staging-us" in now and "staging-eu" not in now
        page.fill("#as_of", "2026-03-10")
        page.click("text=Show")
        page.wait_for_selector("main h1:has-text('as of')")
        then = page.inner_text("ul.hits")
        assert "staging-eu" in then and "staging-us" not in then  # what was true then
        assert errors == []
