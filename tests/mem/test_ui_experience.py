"""The memory browser's episodes and skills, over a real store: an episode shows its result and the
turn that showed it; a skill shows every revision and the episode behind each."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

from starlette.testclient import TestClient

from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.store import MemoryStore
from harness_mem.ui.app import build_app
from harness_mem.ui.security import Guard

PORT = 8123


def signed_in(store: MemoryStore) -> TestClient:
    guard = Guard("127.0.0.1", PORT)
    client = TestClient(build_app(store, guard), base_url=f"http://127.0.0.1:{PORT}", follow_redirects=False)
    assert client.get(f"/?token={guard.access_token}").status_code == 303
    return client


def a_run(store: MemoryStore, session: str) -> None:
    """A session whose tests failed, were fixed, and passed: the passing run is what shows the result."""
    turns = [("user", "The login test fails after the argon2 switch; fix it."),
             ("tool", "==== 1 failed, 11 passed in 0.84s ===="),
             ("assistant", "The hash prefix check expected bcrypt's $2b$; it now accepts argon2id."),
             ("tool", "==== 12 passed in 0.91s ===="),
             ("assistant", "Fixed: the login tests pass again.")]
    for i, (role, text) in enumerate(turns):
        store.add(text, kind="turn", role=role, session=session, id=f"{session}-t{i}",
                  created_at=f"2026-03-09T10:3{i}:00Z")


def test_an_episode_shows_its_result_and_the_turn_that_showed_it(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        a_run(store, "s-login")
        consolidate(store, session="s-login")
        [episode] = ExperienceStore(store).list()
        client = signed_in(store)
        listed = client.get("/episodes").text
        assert "The login test fails" in listed and "success" in listed
        assert f'href="/entries/{quote("s-login-t3")}"' in listed  # the passing test run showed it
        assert "12 passed" in listed
        page = client.get(f"/episodes/{quote(episode.id)}").text
        assert 'href="/entries/s-login-t3"' in page and 'href="/sessions/s-login"' in page
        entry = client.get(f"/entries/{quote(episode.entry_id or '')}").text
        assert "shown by" in entry and 'href="/entries/s-login-t3"' in entry
        assert "No episodes with that result" in client.get("/episodes", params={"result": "failure"}).text
        assert client.get("/episodes", params={"result": "maybe"}).status_code == 400


def test_a_skill_shows_each_revision_with_the_episode_behind_it(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        a_run(store, "s-login")
        consolidate(store, session="s-login")
        experience = ExperienceStore(store)
        [episode] = experience.list()
        first = Skill("fix-hash-checks", "Use when a password hash check fails after a hashing change.",
                      "Check the hash prefix the test expects.")
        experience.save_skill(first, origin="distilled", rationale="learnt from the login fix", episode_id=episode.id)
        second = Skill(first.name, first.description, "Check the prefix, then run the whole auth suite.")
        experience.save_skill(second, origin="revised", rationale="one run missed the session tests")
        client = signed_in(store)
        listed = client.get("/skills").text
        assert 'href="/skills/fix-hash-checks"' in listed and "Use when a password hash check fails" in listed
        page = client.get("/skills/fix-hash-checks").text
        assert page.index("Version 2: revised") < page.index("Version 1: distilled")
        assert "one run missed the session tests" in page and "no episode prompted it" in page
        assert page.count(f'href="/episodes/{quote(episode.id)}"') == 2  # behind version 1, and a source
        assert "run the whole auth suite" in page and "Check the hash prefix the test expects" in page
        learnt = client.get(f"/episodes/{quote(episode.id)}").text
        assert 'href="/skills/fix-hash-checks"' in learnt
        assert client.get("/skills/no-such-skill").status_code == 404
        assert "no skill named" in client.get("/skills/no-such-skill").text


def test_redacted_text_is_shown_as_stored_with_each_placeholder_explained(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        stored = store.remember("mail ana at ana@example.com about the rollout", kind="note")
        client = signed_in(store)
        page = client.get(f"/entries/{quote(stored.id)}").text
        assert "ana@example.com" not in page
        assert '<abbr class="placeholder" title="redacted: the email written here was removed' in page
        assert "&lt;EMAIL&gt;</abbr>" in page  # as stored
        found = client.get("/", params={"q": "rollout"}).text
        assert "<mark>rollout</mark>" in found and 'class="placeholder"' in found


def test_placeholders_are_told_apart_from_the_words_a_search_marks() -> None:
    from harness_mem.ui.pages import marked

    assert marked("ask <EMAIL:0123456789ab> about the Rollout, key <API_KEY>", "rollout email") == [
        ("ask ", "plain"), ("<EMAIL:0123456789ab>", "pseudonym"), (" about the ", "plain"), ("Rollout", "matched"),
        (", key ", "plain"), ("<API_KEY>", "removed")]
