"""Every page of the memory browser, in headless Chromium over a real store served by a real
``harness-mem ui`` process, passes the accessibility check (tests/accessibility.py: labels and names,
landmarks, heading order, contrast, keyboard reach and visible focus) and logs no error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from accessibility import problems
from ui_process import browser, chromium_path, ui_process

from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.store import MemoryStore

# In `make test` (not marked slow): the proof of the page is these tests in a real browser.
pytestmark = pytest.mark.skipif(chromium_path() is None, reason="no chromium on this machine (CI installs it: .ci/run)")
WAIT_MS = 60_000  # generous: the machine may be loaded


@pytest.fixture
def stored(db_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A store with a session, what consolidation derived from it, an episode, a skill and a redaction."""
    with MemoryStore(db_path, embedder=None) as store:
        turns = [("user", "The login test fails after the argon2 switch; mail me at ana@example.com when fixed."),
                 ("tool", "==== 1 failed, 11 passed in 0.84s ===="),
                 ("assistant", "We switched to argon2id last month; the prefix check now accepts it."),
                 ("tool", "==== 12 passed in 0.91s ===="),
                 ("assistant", "Fixed: the login tests pass again.")]
        for i, (role, text) in enumerate(turns):
            store.add(text, kind="turn", role=role, session="s-auth", id=f"t{i}", created_at=f"2026-03-09T10:3{i}:00Z")
        consolidate(store, session="s-auth")
        experience = ExperienceStore(store)
        [episode] = experience.list()
        experience.save_skill(Skill("fix-hash-checks", "Use when a password hash check fails after a change.",
                                    "Check the prefix the test expects."), origin="distilled", episode_id=episode.id)
        fact = next(iter(store.list(kind="fact")), None)
        assert fact is not None
        yield db_path, episode.id, fact.id


@pytest.fixture
def chromium() -> Iterator[Any]:
    with browser() as launched:
        yield launched


def test_every_page_passes_the_accessibility_check(stored: tuple[Path, str, str], chromium: Any) -> None:
    db, episode_id, fact_id = stored
    paths = ["/", "/?q=argon2id", "/entries/t0", f"/entries/{quote(fact_id)}", "/sessions", "/sessions/s-auth",
             "/facts", "/episodes", f"/episodes/{quote(episode_id)}", "/skills", "/skills/fix-hash-checks",
             "/health", "/health?checks=1", "/notes/new"]
    with ui_process(db) as (url, _):
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        page = chromium.new_page()
        page.set_default_timeout(WAIT_MS)
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.goto(url)
        found: dict[str, list[str]] = {}
        for path in paths:
            page.goto(origin + path)
            page.wait_for_selector("main h1")
            found[path] = problems(page)
        page.goto(origin + "/entries/t0")
        page.click("text=Forget…")  # the confirmation page, reached as a person would
        page.wait_for_selector("button.confirm")
        found["forget's confirmation"] = problems(page)
        assert {path: lines for path, lines in found.items() if lines} == {}
        assert errors == []


def test_the_check_finds_each_kind_of_problem(chromium: Any) -> None:
    page = chromium.new_page()
    page.set_content(
        '<html><head><style>a:focus { outline: none; } .faint { color: #bbb; }</style></head><body>'
        '<nav><a href="#x">fine</a></nav><h1>Title</h1><h3>skipped a level</h3>'
        '<p class="faint">hard to read</p><input name="q"><button></button><a href="#y">no outline</a>'
        '<button tabindex="-1">out of the Tab order</button></body></html>')
    found = "\n".join(problems(page))
    for expected in ("no lang", "no title", "one main", "banner", "navigation landmark without a name",
                     "h3 after h1", "contrast", "textbox without an accessible name",
                     "button without an accessible name", "shows no focus outline", "cannot be reached with the Tab key"):
        assert expected in found, expected


def test_reading_works_with_javascript_off(stored: tuple[Path, str, str], chromium: Any) -> None:
    db, episode_id, fact_id = stored
    with ui_process(db) as (url, _):
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
        context = chromium.new_context(java_script_enabled=False)
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(url)
        page.fill("#q", "argon2id")
        page.press("#q", "Enter")  # the browser's own form submission
        page.wait_for_selector("li.hit mark")
        page.click("li.hit a.entry-link")
        page.wait_for_selector("main h1")
        page.goto(f"{origin}/entries/{quote(fact_id)}")
        assert "How it learnt this" in page.inner_text("main")
        page.goto(f"{origin}/episodes/{quote(episode_id)}")
        assert "shown by" in page.inner_text("main")
        page.goto(f"{origin}/sessions/s-auth")
        assert not page.is_visible("li.role-tool p.content")  # tool turns folded
        page.locator("li.role-tool summary").first.press("Enter")  # and one opens without script (by keyboard)
        assert page.is_visible("li.role-tool details[open] p.content")
        context.close()
