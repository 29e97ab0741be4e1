"""The memory browser's lists on a real store, on each engine: a page starts after the last item of
the one before (keyset), so following "next page" shows every item once even while the list grows
at its top, and a deep page costs what the first does. The health page reads the counts the store keeps, no entry."""

from __future__ import annotations

import re
from pathlib import Path

from engine_targets import fresh_schema
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer
from starlette.testclient import TestClient

from harness_mem.engines.postgres import PostgresStorage
from harness_mem.store import MemoryStore
from harness_mem.ui.app import build_app
from harness_mem.ui.pages import PAGE_SIZE, health_page
from harness_mem.ui.security import Guard

PORT = 8123
NEXT = re.compile(r'href="\?([^"]*after=[^"]*)" rel="next"')


def signed_in(store: MemoryStore) -> TestClient:
    guard = Guard("127.0.0.1", PORT)
    client = TestClient(build_app(store, guard), base_url=f"http://127.0.0.1:{PORT}", follow_redirects=False)
    assert client.get(f"/?token={guard.access_token}").status_code == 303
    return client


def walk(client: TestClient, path: str, shown: re.Pattern[str], between: object = None) -> list[str]:
    """Every item a list shows, following its "next page" links to the end; ``between`` runs after
    the first page (a write that lands at the top of the list)."""
    seen: list[str] = []
    url = path
    while True:
        page = client.get(url.replace("&amp;", "&"))
        assert page.status_code == 200, page.text
        assert "offset=" not in page.text
        seen += shown.findall(page.text)
        found = NEXT.search(page.text)
        if found is None:
            return seen
        if callable(between) and len(seen) == PAGE_SIZE:
            between()
        url = f"{path}?{found.group(1)}"


def test_sessions_page_by_keyset_and_a_new_session_moves_nothing(engine_store: MemoryStore) -> None:
    n = PAGE_SIZE + 12
    for i in range(n):  # two sessions a minute: ties in time too
        engine_store.add(f"turn of session {i}", kind="turn", role="user", session=f"s{i:03}", id=f"t{i}",
                         created_at=f"2026-03-09T10:{i // 2:02}:00Z")
    client = signed_in(engine_store)
    order = walk(client, "/sessions", re.compile(r'<td><a href="/sessions/(s\d+)">'),
                 between=lambda: engine_store.add("a new session", kind="turn", session="s999", id="new"))
    assert order == [f"s{i:03}" for i in reversed(range(n))]  # each once, newest first: none repeated


def test_facts_and_a_sessions_turns_page_by_keyset(engine_store: MemoryStore) -> None:
    n = PAGE_SIZE + 7
    for i in range(n):
        engine_store.add(f"fact number {i}", kind="fact", id=f"f{i:03}", created_at=f"2026-03-{1 + i // 10:02}T00:00:00Z")
        engine_store.add(f"turn number {i}", kind="turn", role="user", session="long", id=f"t{i:03}",
                         created_at="2026-03-09T10:00:00Z")  # all at once: only the order of writing tells
    client = signed_in(engine_store)
    facts = walk(client, "/facts", re.compile(r"fact number (\d+)"),
                 between=lambda: engine_store.add("a fact just learnt", kind="fact", id="fresh"))
    assert facts == [str(i) for i in reversed(range(n))]
    turns = walk(client, "/sessions/long", re.compile(r"turn number (\d+)"))
    assert turns == [str(i) for i in range(n)]
    assert client.get("/facts", params={"after": "x" * 2000}).status_code == 400
    assert "No facts" in client.get("/facts", params={"after": "no-such-entry"}).text


PREVIOUS = re.compile(r'href="\?([^"]*)" rel="prev"')


def test_previous_page_shows_the_page_before_without_an_offset(engine_store: MemoryStore) -> None:
    n = 3 * PAGE_SIZE + 4
    for i in range(n):
        engine_store.add(f"fact number {i}", kind="fact", id=f"f{i:03}", created_at=f"2026-03-{1 + i // 10:02}T00:00:00Z")
    client = signed_in(engine_store)
    shown = re.compile(r"fact number (\d+)")
    forward: list[list[str]] = []
    url = "/facts"
    for _ in range(4):
        page = client.get(url).text
        forward.append(shown.findall(page))
        found = NEXT.search(page)
        url = f"/facts?{found.group(1).replace('&amp;', '&')}" if found else url
    assert [len(p) for p in forward] == [PAGE_SIZE, PAGE_SIZE, PAGE_SIZE, 4]
    assert PREVIOUS.search(client.get("/facts").text) is None  # the first page has none
    backward = []
    for _ in range(2):  # from the last page back to the second; the second's way back is "first page"
        found = PREVIOUS.search(page)
        assert found is not None and "offset=" not in found.group(1)
        page = client.get(f"/facts?{found.group(1).replace('&amp;', '&')}").text
        backward.append(shown.findall(page))
    assert backward == [forward[2], forward[1]]
    assert PREVIOUS.search(page) is None and 'href="?">← first page' in page
    too_long = [("back", f"f{i:03}") for i in range(30)] + [("after", "f100")]
    assert client.get("/facts", params=too_long).status_code == 400


def test_episodes_and_skills_page_by_keyset(engine_store: MemoryStore) -> None:
    from harness_mem.experience.episode import Episode
    from harness_mem.experience.skills import Skill
    from harness_mem.experience.store import ExperienceStore

    experience = ExperienceStore(engine_store)
    n = PAGE_SIZE + 3
    for i in range(n):
        experience.record(Episode(f"situation {i}", f"outcome {i}", success=i % 2 == 0), created_at="2026-03-09T10:00:00Z")
        experience.save_skill(Skill(f"skill-{i:03}", f"Use when case {i} comes up."))
    client = signed_in(engine_store)
    episodes = walk(client, "/episodes", re.compile(r">situation (\d+)<"))
    assert episodes == [str(i) for i in reversed(range(n))]
    failures = walk(client, "/episodes?result=failure", re.compile(r">situation (\d+)<"))
    assert failures == [str(i) for i in reversed(range(n)) if i % 2]
    skills = walk(client, "/skills", re.compile(r'href="/skills/(skill-\d+)"'))
    assert skills == [f"skill-{i:03}" for i in range(n)]


def test_previous_page_of_episodes_is_the_page_before(db_path: Path) -> None:
    from harness_mem.experience.episode import Episode
    from harness_mem.experience.store import ExperienceStore

    with MemoryStore(db_path, embedder=None) as store:
        experience = ExperienceStore(store)
        for i in range(2 * PAGE_SIZE + 3):
            experience.record(Episode(f"situation {i}", f"outcome {i}"), created_at="2026-03-09T10:00:00Z")
        client = signed_in(store)
        shown = re.compile(r">situation (\d+)<")
        pages, url = [], "/episodes"
        for _ in range(3):
            page = client.get(url).text
            pages.append(shown.findall(page))
            found = NEXT.search(page)
            url = f"/episodes?{found.group(1).replace('&amp;', '&')}" if found else url
        found = PREVIOUS.search(page)  # on the third page: back to the second, not to the first
        assert found is not None
        assert shown.findall(client.get(f"/episodes?{found.group(1).replace('&amp;', '&')}").text) == pages[1]


def test_health_reads_no_entry_and_is_true_right_after_a_write(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        for i in range(3):
            store.add(f"turn {i}", kind="turn", role="user", session="s", id=f"t{i}")
        client = signed_in(store)
        statements: list[str] = []
        store.storage.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        assert "turn 3" in client.get("/health").text
        with MemoryStore(db_path, embedder=None) as other:  # another process's write shows at once
            other.add("a new note", kind="note")
        page = client.get("/health").text
        assert "note 1 · turn 3" in page and "<dd>4</dd>" in page
        # The entries are read only through the expiry index (those expired since they were counted).
        read = [sql for sql in statements if re.search(r"\bFROM entries\b", sql)]
        assert read and all("INDEXED BY entries_by_expiry" in sql for sql in read)


def test_health_on_sqlite_counts_entries_without_a_vector_reading_no_entry(db_path: Path,
                                                                           hashed_embedder: HashedEmbedder) -> None:
    with MemoryStore(db_path, embedder=hashed_embedder) as store:
        store.add_many([{"content": f"turn {i}", "role": "user", "session": "s"} for i in range(40)])
    with MemoryStore(db_path, embedder=None) as without_model:
        without_model.add("written without the model", kind="note")
    with MemoryStore(db_path, embedder=hashed_embedder) as store:
        statements: list[str] = []
        store.storage.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
        page = health_page(store, with_checks=False, with_sizes=False)
        store.storage.conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert (page.counts.entries, page.missing_vectors) == (41, 1)
    read = [sql for sql in statements if re.search(r"\bFROM entries\b", sql)]
    assert all("INDEXED BY entries_by_expiry" in sql for sql in read), read


def test_health_on_postgresql_reads_no_entry_nor_vector(postgres_server: PostgresServer,
                                                        hashed_embedder: HashedEmbedder) -> None:
    target = fresh_schema(postgres_server)
    with MemoryStore(target, embedder=hashed_embedder) as store:
        store.add_many([{"content": f"turn {i}", "role": "user", "session": "s"} for i in range(40)])
    with MemoryStore(target, embedder=None) as without_model:
        without_model.add("written without the model", kind="note")
    with MemoryStore(target, embedder=hashed_embedder) as store:
        storage = store.storage
        assert isinstance(storage, PostgresStorage)
        rows_read = ("SELECT relname, coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)"
                     " FROM pg_stat_xact_user_tables WHERE relname IN ('entries', 'entry_vectors')")
        with storage.conn.transaction():  # the statistics of this transaction's reads, table by table
            storage.query("SELECT set_config('enable_seqscan', 'off', true)")  # an index where one serves, as at 1M
            before = dict(storage.query(rows_read))
            page = health_page(store, with_checks=False, with_sizes=False)
            after = dict(storage.query(rows_read))
    assert (page.counts.entries, page.missing_vectors) == (41, 1)
    # Neither the entries nor their vectors were read (but through the expiry index: none expired).
    assert {table: after[table] - before.get(table, 0) for table in after} == {"entries": 0, "entry_vectors": 0}


def test_the_kind_index_serves_only_queries_about_other_kinds(db_path: Path) -> None:
    """A plain (namespace, kind, created_at) index took the place of the session index in a keyword
    recall's lookup of each turn's previous turn (0.2 s became 10 s at 100,000 turns): the index is
    partial, and no statement a recall runs is planned on it."""
    with MemoryStore(db_path, embedder=None) as store:
        for i in range(40):
            store.add(f"turn {i} about argon2id hashing", kind="turn", role="user", session=f"s{i % 4}", id=f"t{i}")
        store.add("the deploy target is staging-eu", kind="fact")
        conn = store.storage.conn  # type: ignore[attr-defined]
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        store.recall("argon2id hashing", 5, "keyword")
        conn.set_trace_callback(None)
        plans = [" ".join(str(row[-1]) for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
                 for sql in statements if sql.lstrip().upper().startswith(("SELECT", "WITH"))]
        assert plans and not [plan for plan in plans if "entries_by_kind" in plan]
        facts = " ".join(str(row[-1]) for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT pk FROM entries e WHERE e.namespace = 'default' AND e.kind IN ('fact')"
            " AND e.kind <> 'turn' ORDER BY e.created_at DESC, e.pk DESC LIMIT 51"))
        assert "entries_by_kind" in facts  # what the facts page asks, through it
