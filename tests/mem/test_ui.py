"""The memory browser (``harness-mem ui``) over a real store, through Starlette's test client: who may
use it (Host, the access token, Origin, CSRF, the headers), what its pages show, and what its
actions change — each action only after its confirmation, and none in read-only mode."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from fake_embedder import cli_process
from starlette.testclient import TestClient

from harness_mem.errors import InvalidInputError, NotFoundError
from harness_mem.experience.consolidate import consolidate
from harness_mem.store import MemoryStore
from harness_mem.ui.app import build_app
from harness_mem.ui.security import Guard
from harness_mem.ui.server import token_for

PORT = 8123
BASE = f"http://127.0.0.1:{PORT}"
SESSION = "s-auth"
TURNS = [
    ("user", "Password hashing: are we still on bcrypt for the login service?"),
    ("assistant", "No. We switched to argon2id last month, with memory cost 64 MiB."),
    ("user", "I live in Lisbon and I prefer tabs over spaces."),
    ("assistant", "Noted: Lisbon, and tabs over spaces."),
]


@pytest.fixture
def memory(db_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(db_path, embedder=None) as store:
        for i, (role, text) in enumerate(TURNS):
            store.add(text, kind="turn", role=role, session=SESSION, id=f"t{i}",
                      created_at=f"2026-03-09T10:3{i}:00Z")
        yield store


def client_for(store: MemoryStore, *, read_only: bool = False, host: str = "127.0.0.1",
               token: str | None = None) -> tuple[TestClient, Guard]:
    guard = Guard(host, PORT, given_token=token, read_only=read_only)
    return TestClient(build_app(store, guard), base_url=BASE, follow_redirects=False), guard


def signed_in(store: MemoryStore, **options: object) -> tuple[TestClient, Guard]:
    """A client that visited the printed URL (so it holds the session cookie)."""
    client, guard = client_for(store, **options)  # type: ignore[arg-type]
    assert client.get(f"/?token={guard.access_token}").status_code == 303
    return client, guard


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def link(entry_id: str) -> str:
    return f'href="/entries/{quote(entry_id)}"'


def post(client: TestClient, path: str, data: dict[str, str], origin: str | None = BASE) -> object:
    headers = {"origin": origin} if origin is not None else {}
    return client.post(path, data=data, headers=headers)


# ---- who may use it ------------------------------------------------------------------------------


def test_a_foreign_host_is_refused_before_anything_else(memory: MemoryStore) -> None:
    client, guard = signed_in(memory)
    # A DNS-rebinding page reaches 127.0.0.1 under its own name: refused, whatever it holds.
    refused = client.get(f"/?token={guard.access_token}", headers={"host": f"evil.example:{PORT}"})
    assert refused.status_code == 421
    assert client.get("/", headers={"host": f"127.0.0.1:{PORT + 1}"}).status_code == 421
    assert client.get("/health", headers={"host": f"localhost:{PORT}"}).status_code == 200


def test_the_printed_token_is_traded_for_a_session_cookie(memory: MemoryStore) -> None:
    client, guard = client_for(memory)
    assert client.get("/").status_code == 401
    assert client.get("/?token=not-the-token-at-all").status_code == 401
    signed = client.get(f"/sessions?token={guard.access_token}&offset=0")
    assert signed.status_code == 303
    assert signed.headers["location"] == "/sessions?offset=0"  # the token leaves the address bar
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and guard.access_token not in cookie
    assert client.get("/sessions").status_code == 200
    # A cookie this server did not sign is no session.
    forged = TestClient(client.app, base_url=BASE, cookies={guard.cookie_name: "made-up.0123"})
    assert forged.get("/sessions").status_code == 401
    assert guard.url(with_token=True) == f"{BASE}/?token={guard.access_token}"


def test_a_post_from_another_origin_is_refused(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    token = csrf_of(client.get("/entries/t0").text)
    for origin in ("http://evil.example", f"http://127.0.0.1:{PORT + 1}", "null", None):
        refused = post(client, "/forget", {"id": "t0", "csrf": token, "confirm": "yes"}, origin=origin)
        assert refused.status_code == 403, origin  # type: ignore[attr-defined]
    # A Referer of this page stands in for a missing Origin.
    shown = client.post("/forget", data={"id": "t0", "csrf": token}, headers={"referer": f"{BASE}/entries/t0"})
    assert shown.status_code == 200
    assert memory.get("t0").content.startswith("Password hashing")


def test_a_post_without_the_sessions_csrf_token_is_refused(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    other, _ = signed_in(memory)
    other_token = csrf_of(other.get("/entries/t0").text)
    for data in ({"id": "t0", "confirm": "yes"}, {"id": "t0", "confirm": "yes", "csrf": ""},
                 {"id": "t0", "confirm": "yes", "csrf": other_token}):
        for path in ("/forget", "/purge", "/correct", "/notes", "/consolidate"):
            assert post(client, path, {**data, "content": "x", "session": SESSION}).status_code == 403  # type: ignore[attr-defined]
    assert memory.get("t0").content.startswith("Password hashing")
    assert memory.count() == len(TURNS)


def test_every_page_carries_the_protective_headers_and_no_inline_code(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    for path in ("/", "/?q=bcrypt", "/entries/t0", "/sessions", f"/sessions/{SESSION}", "/facts", "/health",
                 "/notes/new", "/entries/missing"):
        page = client.get(path)
        policy = page.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "unsafe-inline" not in policy and "frame-ancestors 'none'" in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert page.headers["cache-control"] == "no-store"
        assert page.headers["referrer-policy"] == "same-origin"
        assert "<script" not in page.text and " style=" not in page.text and "<style" not in page.text
        assert "http://" not in page.text and "https://" not in page.text  # nothing fetched from elsewhere


def test_off_loopback_a_token_is_required_and_is_the_guard(memory: MemoryStore, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not loopback, needs a token"):
        token_for("0.0.0.0", None)
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(InvalidInputError, match="at least 16 characters"):
        token_for("0.0.0.0", short)
    token = "a-team-token-0123456789abcdef"
    client, guard = client_for(memory, host="0.0.0.0", token=token)
    assert guard.url(with_token=False) == f"http://0.0.0.0:{PORT}/"  # the given token is never printed
    # Reached under a name it cannot know (a LAN address), the token decides.
    assert client.get("/health", headers={"host": "10.1.2.3:8123"}).status_code == 401
    assert client.get("/health", headers={"host": "10.1.2.3:8123", "authorization": f"Bearer {token}"}).status_code == 200
    assert client.get(f"/health?token={token}", headers={"host": "10.1.2.3:8123"}).status_code == 303


# ---- pages ---------------------------------------------------------------------------------------


def test_search_finds_a_turn_with_its_words_marked_and_its_score_explained(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    page = client.get("/", params={"q": "bcrypt password", "mode": "keyword"}).text
    assert "<mark>bcrypt</mark>" in page and "<mark>Password</mark>" in page
    assert 'href="/entries/t0"' in page and f'href="/sessions/{SESSION}"' in page
    assert "keyword: rank 1" in page
    filtered = client.get("/", params={"q": "tabs", "role": "assistant"}).text
    assert "Noted: Lisbon" in filtered and "I live in Lisbon" not in filtered


def test_bad_input_is_one_line_on_the_page(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    for path, status, words in (("/?q=x&k=abc", 400, "k must be between"), ("/?q=x&mode=psychic", 400, "mode must be"),
                                ("/entries/nope", 404, "no entry with id"), ("/sessions/nope", 400, "no session"),
                                ("/?q=x&since=yesterday-ish", 400, "use ISO-8601")):
        page = client.get(path)
        assert page.status_code == status, path
        assert words in page.text and "Traceback" not in page.text


def test_an_entry_shows_where_it_came_from_its_history_and_what_came_of_it(memory: MemoryStore) -> None:
    consolidate(memory, session=SESSION)
    derived = list(memory.list(session=SESSION, kind=["summary", "fact", "episode"]))
    assert derived, "consolidation derived nothing from the session"
    client, _ = signed_in(memory)
    summary = client.get(f"/entries/{derived[0].id}").text
    assert "How it learnt this" in summary and "argon2id last month" in summary  # the turns' own words
    from_t1 = [e.id for e in derived if "t1" in e.metadata.get("source_turns", [])]
    turn = client.get("/entries/t1").text
    assert from_t1 and "Derived from it" in turn and all(link(entry_id) in turn for entry_id in from_t1)
    newer = memory.supersede("t2", "I live in Porto and I prefer tabs over spaces.")
    history = client.get(f"/entries/{newer.id}").text
    assert "History" in history and "I live in Lisbon" in history and "I live in Porto" in history
    assert "valid from 2026-03-09 10:32:00 until" in history


def test_sessions_and_a_sessions_timeline_beside_what_was_derived(memory: MemoryStore) -> None:
    memory.add("tool output: 3 files changed", kind="turn", role="tool", session=SESSION, id="t9",
               created_at="2026-03-09T10:40:00Z")
    consolidate(memory, session=SESSION)
    client, _ = signed_in(memory)
    listed = client.get("/sessions").text
    assert f'href="/sessions/{SESSION}"' in listed and ">5<" in listed
    timeline = client.get(f"/sessions/{SESSION}").text
    assert timeline.index("Password hashing") < timeline.index("Noted: Lisbon")
    assert "<details><summary>" in timeline and "(tool output)" in timeline  # tool turns folded
    assert "What consolidation derived" in timeline and "Nothing yet" not in timeline
    # Beside each turn what was derived from it, and each derived entry's sources link to its turns here.
    summary = next(e for e in memory.list(session=SESSION, kind="summary") if "t0" in e.metadata["source_turns"])
    turn = re.search(r'<li class="turn role-user" id="turn-t0">.*?</li>', timeline, re.S)
    assert turn and f'href="#derived-{quote(summary.id, safe="")}">summary</a>' in turn.group()
    derived = re.search(rf'<li id="derived-{re.escape(quote(summary.id, safe=""))}">.*?</li>', timeline, re.S)
    assert derived and '<a href="#turn-t0">user at 2026-03-09 10:30:00</a>' in derived.group()


def test_facts_as_of_a_date_show_what_was_true_then(memory: MemoryStore) -> None:
    old = memory.remember("the deploy target is staging-eu", kind="fact", created_at="2026-01-01T00:00:00Z")
    memory.remember("the deploy target is staging-us", kind="fact", supersedes=old.id, created_at="2026-02-01T00:00:00Z")
    client, _ = signed_in(memory)
    now = client.get("/facts").text
    assert "staging-us" in now and "staging-eu" not in now
    then = client.get("/facts", params={"as_of": "2026-01-15T00:00:00Z"}).text
    assert "staging-eu" in then and "staging-us" not in then
    both = client.get("/facts", params={"superseded": "1"}).text
    assert "staging-eu" in both and "staging-us" in both


def test_health_shows_counts_coverage_and_redactions(memory: MemoryStore) -> None:
    memory.add("mail me at someone@example.com", kind="note")
    client, _ = signed_in(memory)
    page = client.get("/health").text
    assert "<dd>5</dd>" in page and "keyword only" in page and "email 1" in page.lower()
    assert "default 5 entries" in page and "note 1" in page and "what holds it" not in page
    sized = client.get("/health?sizes=1").text
    assert "what holds it" in sized and "(keyword index)" in sized
    assert "Run doctor" in page
    checked = client.get("/health?checks=1").text
    assert "ok — integrity" in checked


def test_sealed_identities_show_revealed_and_marked_only_where_the_key_is(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "config"))  # no key file but the one made here
    monkeypatch.delenv("HARNESS_MEM_IDENTITY_KEY", raising=False)
    db = tmp_path / "sealed.db"
    marked = re.compile(r'ada@example\.com</a> <abbr class="revealed"')
    with MemoryStore(db, embedder=None, identity_key="ab" * 32) as store:
        store.add("I deploy the billing service on fridays", kind="turn", role="user", session="ada@example.com",
                  tags=["ops"], id="t1")
        client, _ = signed_in(store)
        for path in ("/?q=fridays&mode=keyword", "/entries/t1", f"/sessions/{quote('ada@example.com')}"):
            page = client.get(path).text
            assert marked.search(page), path  # the session, as written, marked as revealed
            assert page.count('class="revealed"') == (2 if path.startswith("/sessions/") else 1), path  # not "ops"
    with MemoryStore(db, embedder=None, identity_key=False) as store:  # the same file where the key is not
        stored = store.get("t1").session
        assert stored is not None and stored.startswith("<EMAIL:")
        client, _ = signed_in(store)
        for path in ("/?q=fridays&mode=keyword", "/entries/t1", f"/sessions/{quote(stored)}"):
            page = client.get(path).text
            assert "ada@example.com" not in page and 'class="revealed"' not in page, path
            assert "&lt;EMAIL:" in page, path  # the pseudonym, as stored


# ---- actions -------------------------------------------------------------------------------------


def test_forget_shows_what_it_takes_then_removes_it_only_when_confirmed(memory: MemoryStore) -> None:
    consolidate(memory, session=SESSION)
    derived = {e.id for e in memory.would_forget("t1")} - {"t1"}
    assert derived
    client, _ = signed_in(memory)
    token = csrf_of(client.get("/entries/t1").text)
    preview = post(client, "/forget", {"id": "t1", "csrf": token})
    assert preview.status_code == 200  # type: ignore[attr-defined]
    assert all(link(entry_id) in preview.text for entry_id in derived)  # type: ignore[attr-defined]
    assert memory.get("t1")  # nothing changed yet
    done = post(client, "/forget", {"id": "t1", "csrf": token, "confirm": "yes"})
    assert done.status_code == 303 and "notice=forgotten" in done.headers["location"]  # type: ignore[attr-defined]
    for entry_id in {"t1", *derived}:
        with pytest.raises(NotFoundError):
            memory.get(entry_id)
    assert "argon2id" not in client.get("/", params={"q": "argon2id"}).text.split("hits")[-1]


def test_purge_through_the_page_takes_the_text_out_of_the_file(memory: MemoryStore, db_path: Path) -> None:
    client, _ = signed_in(memory)
    token = csrf_of(client.get("/entries/t2").text)
    preview = post(client, "/purge", {"id": "t2", "csrf": token})
    assert "cannot be undone" in preview.text and "I live in Lisbon" in preview.text  # type: ignore[attr-defined]
    assert post(client, "/purge", {"id": "t2", "csrf": token, "confirm": "yes"}).status_code == 303  # type: ignore[attr-defined]
    on_disk = b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))
    assert b"I live in Lisbon" not in on_disk


def test_correct_keeps_the_old_version_and_a_note_is_redacted(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    token = csrf_of(client.get("/entries/t2").text)
    preview = post(client, "/correct", {"id": "t2", "csrf": token, "content": "I live in Porto now."})
    assert "I live in Porto now." in preview.text and memory.get("t2").superseded_by is None  # type: ignore[attr-defined]
    done = post(client, "/correct", {"id": "t2", "csrf": token, "content": "I live in Porto now.", "confirm": "yes"})
    new_id = done.headers["location"].split("?")[0].rsplit("/", 1)[1]  # type: ignore[attr-defined]
    assert [e.content for e in memory.history(new_id)] == [TURNS[2][1], "I live in Porto now."]
    assert memory.get(new_id).source == "ui"
    bad = post(client, "/correct", {"id": "t2", "csrf": token, "content": "again", "confirm": "yes"})
    assert bad.status_code == 400 and "already superseded" in bad.text  # type: ignore[attr-defined]
    noted = post(client, "/notes", {"csrf": token, "content": "write to ana@example.com", "tags": "ops",
                                    "confirm": "yes"})
    note = memory.get(noted.headers["location"].split("?")[0].rsplit("/", 1)[1])  # type: ignore[attr-defined]
    assert "ana@example.com" not in note.content and note.tags == ("ops",) and note.kind == "note"
    empty = post(client, "/notes", {"csrf": token, "content": "   ", "confirm": "yes"})
    assert empty.status_code == 400 and "content" in empty.text  # type: ignore[attr-defined]


def test_consolidating_a_session_previews_what_it_would_write(memory: MemoryStore) -> None:
    client, _ = signed_in(memory)
    token = csrf_of(client.get(f"/sessions/{SESSION}").text)
    preview = post(client, "/consolidate", {"session": SESSION, "csrf": token})
    assert "It would write" in preview.text  # type: ignore[attr-defined]
    assert not list(memory.list(session=SESSION, kind=["summary", "fact"]))
    done = post(client, "/consolidate", {"session": SESSION, "csrf": token, "confirm": "yes"})
    assert done.status_code == 303  # type: ignore[attr-defined]
    assert list(memory.list(session=SESSION, kind=["summary", "fact"]))


def test_read_only_shows_no_form_and_refuses_every_post(memory: MemoryStore) -> None:
    client, guard = signed_in(memory, read_only=True)
    for path in ("/entries/t0", f"/sessions/{SESSION}", "/"):
        page = client.get(path).text
        assert "<form method=\"post\"" not in page and "read-only" in page
    token = guard.csrf_token(guard.session_of(client.cookies[guard.cookie_name]) or "")
    for path in ("/forget", "/purge", "/correct", "/notes", "/consolidate"):
        refused = post(client, path, {"id": "t0", "csrf": token, "confirm": "yes", "content": "x", "session": SESSION})
        assert refused.status_code == 405  # type: ignore[attr-defined]
    assert memory.get("t0") and memory.count() == len(TURNS)


# ---- the command -----------------------------------------------------------------------------------


def test_the_command_refuses_bad_input_in_one_line(memory: MemoryStore, db_path: Path, tmp_path: Path) -> None:
    memory.close()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        for args, words in (
            (["--db", str(db_path), "ui", "--no-open", "--host", "0.0.0.0"], "not loopback, needs a token"),
            (["--db", str(tmp_path / "nowhere.db"), "ui", "--no-open"], "no database at"),
            (["--db", str(db_path), "ui", "--no-open", "--port", str(busy.getsockname()[1])], "cannot listen on"),
            (["--db", str(db_path), "ui", "--no-open", "--port", "70000"], "70000"),
        ):
            done = cli_process(*args, timeout=300)
            said = done.stderr.decode()
            # One Error line (a usage error is click's usage line and its error), never a traceback.
            assert done.returncode != 0 and "Traceback" not in said, (args, said)
            assert words in said.strip().splitlines()[-1], (args, said)
    finally:
        busy.close()
    with MemoryStore(db_path, embedder=None) as reopened:
        assert reopened.count() == len(TURNS)  # nothing stored was touched


# ---- on each engine ----------------------------------------------------------------------------------


def test_on_each_engine_the_preview_lists_exactly_what_forget_takes(engine_store: MemoryStore) -> None:
    for i, (role, text) in enumerate(TURNS):
        engine_store.add(text, kind="turn", role=role, session=SESSION, id=f"t{i}", created_at=f"2026-03-09T10:3{i}:00Z")
    consolidate(engine_store, session=SESSION)
    newer = engine_store.supersede("t2", "I live in Porto and I prefer tabs over spaces.")
    client, _ = signed_in(engine_store)
    page = client.get("/", params={"q": "bcrypt"}).text
    assert link("t0") in page
    token = csrf_of(client.get(f"/entries/{newer.id}").text)
    previewed = {e.id for e in engine_store.would_forget(newer.id)}
    assert {"t2", newer.id} < previewed  # both versions, and what was derived from the old one
    preview = post(client, "/forget", {"id": newer.id, "csrf": token}).text  # type: ignore[attr-defined]
    assert all(link(entry_id) in preview for entry_id in previewed)
    assert post(client, "/forget", {"id": newer.id, "csrf": token, "confirm": "yes"}).status_code == 303  # type: ignore[attr-defined]
    still = {e.id for e in engine_store.list(include_superseded=True)}
    assert not previewed & still and {"t0", "t1", "t3"} <= still
