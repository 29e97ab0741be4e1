"""What forget + purge + gc leave on PostgreSQL, read in the server's own files.

The test server is ours (tests/postgres_server.py): its data directory can be read byte for byte.
A forgotten entry's words must be gone from every file of the database after gc (the tables, their
TOAST and indexes, and the catalogue, pg_statistic included: ANALYZE, as autovacuum runs it, never
samples stored text); the write-ahead log (pg_wal) is the server's and keeps them until it recycles
its segments, which gc says. And gc rewrites the tables in steps: a writer on another connection
commits between them, and what it wrote is in the rewritten table.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from engine_targets import fresh_schema, schema_of
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer

from harness_mem.errors import HarnessMemError, NotFoundError
from harness_mem.experience import Episode
from harness_mem.experience.store import ExperienceStore
from harness_mem.store import MemoryStore

# The advisory lock a rewrite holds for its length, with its schema's hash (engines.postgres_rewrite).
REWRITE_LOCK = 731_042_199


def planted(n: int) -> list[str]:
    """``n`` words found nowhere else on the server."""
    run = uuid.uuid4().hex[:8]
    return [f"qzplant{run}x{i:03d}" for i in range(n)]


def files_holding(root: Path, words: list[str]) -> dict[str, int]:
    """Files under ``root`` that hold any of ``words``, with how many of them each holds."""
    found = {}
    encoded = [w.encode() for w in words]
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            held = sum(1 for w in encoded if w in data)
            if held:
                found[str(path.relative_to(root))] = held
    return found


def test_forgotten_text_leaves_every_file_of_the_database_and_its_statistics(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    markers, episode_markers = planted(40), planted(5)
    with MemoryStore(dsn, embedder=HashedEmbedder(), redactor=None) as store:
        doomed = [store.add(f"{word} the deploy key is {word}", role="user", session=f"{word}@example.com",
                            tags=[word], metadata={"note": word}) for word in markers]
        store.add_many([{"text": f"filler note number {i} about deploys", "session": "s1", "role": "user"}
                        for i in range(2000)])
        experience = ExperienceStore(store)  # an episode's words are in its row of `episodes` too
        doomed_episodes = [experience.record(Episode(situation=f"fixing {word}", outcome=f"{word} fixed", tools=["shell"]))
                           for word in episode_markers]
        with postgres_server.connect() as admin:
            admin.execute(f"SET search_path = {schema_of(dsn)}")
            admin.execute("ANALYZE")  # as autovacuum would, while the markers are live
            assert not any(w in str(admin.execute("SELECT * FROM pg_stats WHERE schemaname = %s",
                                                  (schema_of(dsn),)).fetchall()) for w in markers)
            for entry_id in [entry.id for entry in doomed] + doomed_episodes:
                assert store.forget(entry_id) == 1
            report = store.gc()
            assert report["forgotten_purged"] == 45 and "WAL" in report["log_remains"]
            admin.execute("ANALYZE")
            admin.execute("CHECKPOINT")
        assert store.count() == 2000 and store.recall("filler deploys", k=3)
    data = postgres_server.data_dir
    left = files_holding(data, markers + episode_markers)
    assert not {path: n for path, n in left.items() if not path.startswith("pg_wal/")}
    # The log is the server's: it keeps them until checkpoints recycle its segments (gc says so).
    assert set(left) <= {p for p in left if p.startswith("pg_wal/")}


def test_stored_text_is_never_sampled_into_planner_statistics(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    word = planted(1)[0]
    with MemoryStore(dsn, embedder=None, redactor=None) as store:
        # The same values in every row: what ANALYZE would keep as most common, were it let.
        store.add_many([{"text": f"{word} said again", "role": word, "session": word, "tags": [word],
                         "metadata": {"who": word}} for _ in range(300)])
        with postgres_server.connect() as admin:
            admin.execute(f"SET search_path = {schema_of(dsn)}")
            admin.execute("ANALYZE")
            kept = admin.execute("SELECT s.* FROM pg_statistic s JOIN pg_class c ON c.oid = s.starelid"
                                 " WHERE c.relnamespace = %s::regnamespace", (schema_of(dsn),)).fetchall()
    assert kept and word not in str(kept)  # the structural columns' statistics are kept, no text


@contextmanager
def mid_rewrite(store: MemoryStore, then: Callable[[], None]) -> Iterator[list[int]]:
    """Runs ``then`` once, between two of the rewrite's steps (the copy made, partly filled);
    yields the copy's row count seen then."""
    storage = store.storage
    original = storage.transaction
    seen: list[int] = []

    def stepping() -> AbstractContextManager[None]:
        if not seen:
            copying = storage.query("SELECT to_regclass('entries__rewrite') IS NOT NULL")[0][0]
            copied = storage.query("SELECT count(*) FROM entries__rewrite")[0][0] if copying else 0
            if copied > 0:
                seen.append(int(copied))
                then()
        return original()

    storage.transaction = stepping  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        storage.transaction = original  # type: ignore[method-assign]


def test_a_writer_commits_between_the_rewrites_steps_and_keeps_what_it_wrote(
        postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_mem.engines import postgres_rewrite

    monkeypatch.setattr(postgres_rewrite, "REWRITE_BATCH", (200, 200, 200))  # many steps on a small table
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=HashedEmbedder(), redactor=None) as store, \
            MemoryStore(dsn, embedder=HashedEmbedder(), redactor=None) as writer:
        kept = store.add_many([{"text": f"filler note number {i} about deploys", "session": "s1", "role": "user"}
                               for i in range(1500)])
        doomed = store.add("a forgotten plan for zyxwarble", role="user", session="s1")
        store.forget(doomed.id)
        written: list[str] = []
        corrected: list[str] = []

        def write_beside() -> None:  # another connection, while gc is between two steps
            written.extend(e.id for e in writer.add_many([{"text": f"written beside the rewrite {i} wombatfest"}
                                                          for i in range(20)]))
            corrected.append(writer.supersede(kept[0].id, "a corrected note about quokkaharbour").id)
            assert writer.delete(kept[-1].id)

        with mid_rewrite(store, write_beside) as seen:
            report = store.gc()
        assert seen and 0 < seen[0] < 1500  # the writer committed while the copy was half made
        assert report["forgotten_purged"] == 1
        assert len(written) == 20 and all("wombatfest" in store.get(i).content for i in written)
        assert "quokkaharbour" in store.get(corrected[0]).content
        assert store.recall("quokkaharbour", k=1)[0].entry.id == corrected[0]
        for gone in (kept[-1].id, doomed.id):
            with pytest.raises(NotFoundError):
                store.get(gone)
        assert store.count() == 1500 - 1 + 20  # one deleted, one corrected (its old version hidden)
        assert all(check["ok"] for check in store.diagnose()["checks"])  # counts, keyword rows, vectors
        assert all("zyxwarble" not in hit.entry.content for hit in store.recall("zyxwarble", k=3))
        with postgres_server.connect() as admin:
            admin.execute(f"SET search_path = {schema_of(dsn)}")
            assert admin.execute("SELECT to_regclass('entries__rewrite')").fetchone() == (None,)
            missing = admin.execute("SELECT count(*) FROM entries e LEFT JOIN entry_vectors v ON v.pk = e.pk"
                                    " WHERE v.pk IS NULL AND e.forgotten_at IS NULL").fetchone()
            assert missing == (0,)
        # Written after the swap: the table's identity, indexes and keys carry on as before.
        after = writer.add("a note after the rewrite about numbatgrove")
        assert store.recall("numbatgrove", k=1)[0].entry.id == after.id


def test_a_second_rewrite_is_refused_while_one_runs_and_nothing_is_lost(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=None, redactor=None) as store:
        store.add_many([{"text": f"note {i} about kayaks"} for i in range(50)])
        gone = store.add("a note to forget about velvetmoth")
        store.forget(gone.id)
        with postgres_server.connect() as other:
            lock = (REWRITE_LOCK, schema_of(dsn))
            other.execute("SELECT pg_advisory_lock(%s, hashtext(%s))", lock)  # another gc's rewrite
            with pytest.raises(HarnessMemError, match="already running"):
                store.gc()
            other.execute("SELECT pg_advisory_unlock(%s, hashtext(%s))", lock)
        assert store.count() == 50
        report = store.gc()  # finishes what the refused one left owed
        assert report["forgotten_purged"] == 1 and store.count() == 50


def test_doctor_says_what_the_servers_log_keeps(postgres_server: PostgresServer) -> None:
    with MemoryStore(fresh_schema(postgres_server), embedder=None) as store:
        checks = {check["name"]: check for check in store.diagnose()["checks"]}
    log = checks["write-ahead log"]
    assert log["ok"] and "archive_mode off" in log["detail"] and "WAL segments" in log["detail"]


def test_the_purge_starts_with_a_small_step_and_grows_by_its_time(postgres_server: PostgresServer) -> None:
    with MemoryStore(fresh_schema(postgres_server), embedder=None) as store:
        ids = [e.id for e in store.add_many([{"text": f"turn {i} about otters", "session": "s1", "role": "user"}
                                             for i in range(100)])]
        for entry_id in ids:
            store.forget(entry_id)
        storage, limits = store.storage, []
        purge = storage.purge

        def recorded(now: int, **scope: Any) -> tuple[int, int]:
            limits.append(scope["limit"])
            return purge(now, **scope)

        storage.purge = recorded  # type: ignore[method-assign]
        assert store.gc()["forgotten_purged"] == 100
    # A writer waits for one step: a few entries' deletes (18-48 ms each on a busy PostgreSQL), not 500.
    assert limits[0] <= 10 and len(limits) >= 3


# A gc in its own process whose rewrite copies 50 rows a step, to be killed mid-copy.
SLOW_GC = """
import sys
from harness_mem.engines import postgres_rewrite
from harness_mem.store import MemoryStore
postgres_rewrite.REWRITE_BATCH = (50, 50, 50)
with MemoryStore(sys.argv[1], embedder=None) as store:
    store.gc()
"""


def test_a_rewrite_killed_mid_copy_is_undone_by_the_next_gc(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=None, redactor=None) as store:
        store.add_many([{"text": f"note {i} about herons", "session": "s1", "role": "user"} for i in range(1000)])
        gone = store.add("a plan for gribblefrost to forget", session="s1", role="user")
        store.forget(gone.id)
        gc = subprocess.Popen([sys.executable, "-c", SLOW_GC, dsn], env={**os.environ, "HF_HUB_OFFLINE": "1"})
        try:
            with postgres_server.connect() as admin:
                admin.execute(f"SET search_path = {schema_of(dsn)}")
                copied = 0
                deadline = time.monotonic() + 300
                while copied == 0 and gc.poll() is None and time.monotonic() < deadline:
                    if admin.execute("SELECT to_regclass('entries__rewrite')").fetchone() != (None,):
                        copied = admin.execute("SELECT count(*) FROM entries__rewrite").fetchone()[0]  # type: ignore[index]
            assert copied, "the gc ended before its copy was seen"
        finally:
            gc.kill()
            gc.wait()
        # Left behind: the copy and its trigger. Writers still write; the next gc drops both and finishes.
        later = store.add("written after the crash about egrets")
        report = store.gc()
        assert report["forgotten_purged"] == 1
        assert store.count() == 1001 and store.get(later.id).content.endswith("egrets")
        with postgres_server.connect() as admin:
            admin.execute(f"SET search_path = {schema_of(dsn)}")
            assert admin.execute("SELECT to_regclass('entries__rewrite')").fetchone() == (None,)
            assert admin.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'entries'::regclass"
                                 " AND tgname LIKE '%%rewrite%%'").fetchone() == (0,)
            admin.execute("CHECKPOINT")
    assert not {p for p in files_holding(postgres_server.data_dir, ["gribblefrost"]) if not p.startswith("pg_wal/")}


def test_a_confined_role_writes_during_the_rewrite_and_stays_confined_after(
        postgres_server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_mem.engines import postgres_rewrite

    monkeypatch.setattr(postgres_rewrite, "REWRITE_BATCH", (100, 100, 100))
    owner = fresh_schema(postgres_server)
    alice = f"alice_{uuid.uuid4().hex[:8]}"
    postgres_server.create_role(alice)
    as_alice = owner.replace(postgres_server.dsn, postgres_server.dsn_for(user=alice))
    with MemoryStore(owner, namespace="team-b", embedder=HashedEmbedder()) as other_team:
        other_team.add("team b keeps its own deploy notes")
    with MemoryStore(owner, namespace="team-a", embedder=HashedEmbedder()) as admin:
        admin.add_many([{"text": f"team a note {i} about deploys"} for i in range(600)])
        admin.grant(alice)
        gone = admin.add("team a forgets the plan for snorkelwink")
        admin.forget(gone.id)
        with MemoryStore(as_alice, namespace="team-a", embedder=HashedEmbedder()) as confined:
            written: list[str] = []
            raw = confined.storage.conn  # type: ignore[attr-defined]

            def write_and_peek() -> None:
                written.append(confined.add("written by alice mid-rewrite").id)
                with pytest.raises(HarnessMemError, match="permission denied"):  # the copy holds every namespace
                    raw.execute("SELECT count(*) FROM entries__rewrite")

            with mid_rewrite(admin, write_and_peek) as seen:
                assert admin.gc()["forgotten_purged"] == 1
            assert seen and written
            confined.add("written by alice after the rewrite")
            assert raw.execute("SELECT DISTINCT namespace FROM entries").fetchall() == [("team-a",)]
            assert raw.execute("SELECT count(*) FROM entry_vectors").fetchone() == (602,)  # its own alone
            assert raw.execute("UPDATE entries SET content = 'x' WHERE namespace = 'team-b'").rowcount == 0
            assert confined.get(written[0]).content == "written by alice mid-rewrite"
    with MemoryStore(owner, namespace="team-b", embedder=None) as other_team:
        assert other_team.count() == 1


def test_a_store_analyzed_before_the_upgrade_has_its_text_samples_cleared(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    word = planted(1)[0]
    with MemoryStore(dsn, embedder=None, redactor=None) as store:
        store.add_many([{"text": f"{word} said again", "session": word} for _ in range(200)])
    with postgres_server.connect() as admin:
        admin.execute(f"SET search_path = {schema_of(dsn)}")
        # As a store migrated before 0011 was: statistics on every column, taken by ANALYZE.
        admin.execute("ALTER TABLE entries ALTER COLUMN content SET STATISTICS -1,"
                      " ALTER COLUMN session SET STATISTICS -1")
        admin.execute("DELETE FROM _migrations WHERE number = 11")
        admin.execute("ANALYZE entries")
        sampled = "SELECT most_common_vals::text FROM pg_stats WHERE schemaname = %s AND tablename = 'entries'"
        assert word in str(admin.execute(sampled, (schema_of(dsn),)).fetchall())
        with MemoryStore(dsn, embedder=None):  # the upgrade
            pass
        assert word not in str(admin.execute(sampled, (schema_of(dsn),)).fetchall())
        admin.execute("ANALYZE entries")
        assert word not in str(admin.execute(sampled, (schema_of(dsn),)).fetchall())
