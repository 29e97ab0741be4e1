"""How gc's steps share the write lock with writers in other processes, on a real SQLite file: a
step's commit only writes its pages (the log is copied into the file between steps, by gc, without
the lock), and every statement that could hold the lock for long goes in steps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness_mem.store import MemoryStore

BULKY = "bulky " + "z" * 50_000  # about 13 pages a row


def pages_in_file(db: Path) -> int:
    """The database's size in pages as the file's own header says: what checkpoints have copied in."""
    with db.open("rb") as file:
        return int.from_bytes(file.read(100)[28:32], "big")


def test_a_steps_commit_leaves_copying_the_log_to_between_steps(db_path: Path) -> None:
    # A commit past the log's auto-checkpoint size (1,000 pages) copies the log into the file
    # before it returns: inside a step, that time would count as the step's.
    with MemoryStore(db_path, embedder=None, redactor=None) as store:
        storage = store.storage
        with storage.stepwise():
            before = pages_in_file(db_path)
            store.add_many([{"text": f"{BULKY} {i}"} for i in range(200)])  # about 2,600 pages
            assert pages_in_file(db_path) == before  # still in the log
            storage.between_steps()
            assert pages_in_file(db_path) > before + 2000
        before = pages_in_file(db_path)
        store.add_many([{"text": f"{BULKY} again {i}"} for i in range(200)])
        assert pages_in_file(db_path) > before + 2000  # outside gc, commits copy the log as usual


def sessions_store(db: Path, n: int) -> list[str]:
    """A store whose ``n`` entries each hold a session that is an e-mail (stored as a pseudonym,
    its raw value sealed in ``identities``); their ids."""
    with MemoryStore(db, embedder=None) as store:
        return [store.add(f"note {i}", session=f"user{i:03d}@example.com").id for i in range(n)]


def test_finding_unused_sealed_names_reads_the_entries_without_the_write_lock(db_path: Path) -> None:
    # Another writer holds the lock throughout: nothing is unused, so nothing waits for it.
    sessions_store(db_path, 30)
    with MemoryStore(db_path, embedder=None) as store, MemoryStore(db_path, embedder=None) as writer, \
            writer.transaction():
        writer.add("the other writer's entry")
        with store.storage.without_waiting():  # the lock taken would fail at once: "locked"
            assert store.storage.drop_unused_identities() == 0


def test_a_sealed_name_a_writer_uses_while_the_entries_are_read_stays(db_path: Path) -> None:
    ids = sessions_store(db_path, 30)
    with MemoryStore(db_path, embedder=None) as store, MemoryStore(db_path, embedder=None) as writer:
        assert store.delete(ids[7])  # user007's name is now unused
        written: list[str] = []

        def meanwhile(sql: str) -> None:  # a write in another connection once the entries are read, before the deletes
            if not written and sql.startswith("BEGIN IMMEDIATE"):  # traced before it takes the lock
                written.append(writer.add("user007 is back", session="user007@example.com").id)

        store.db.conn.set_trace_callback(meanwhile)
        dropped = store.storage.drop_unused_identities()
        store.db.conn.set_trace_callback(None)
        assert written and dropped == 0
        assert store.get(written[0]).session == "user007@example.com"  # its raw value still opens
        assert store.delete(written[0])
        assert store.storage.drop_unused_identities() == 1  # unused now, it goes


def test_between_steps_syncs_the_pages_its_checkpoint_copied(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SQLite syncs the file only after a checkpoint that reached the end of the log; one cut short
    # (here by a reader in it, beside gc by a writer's commit) leaves its pages for the next
    # checkpoint to sync: a writer's, which then waits for them all to reach the disk.
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real_fsync(fd)))
    with MemoryStore(db_path, embedder=None, redactor=None) as store, \
            MemoryStore(db_path, embedder=None, redactor=None) as reader, store.storage.stepwise():
        store.add_many([{"text": f"{BULKY} {i}"} for i in range(100)])
        with reader.storage.snapshot():
            reader.count()  # its view holds the log from here on
            store.add_many([{"text": f"{BULKY} more {i}"} for i in range(100)])
            store.storage.between_steps()
    assert synced == [str(db_path.resolve())]


def test_writers_leave_the_keyword_index_merge_to_gc_while_it_runs(db_path: Path) -> None:
    # A writer's commit continues a merge in progress (FTS5's automerge): while gc merges, the
    # index's automerge is off for every connection, and it is back once gc is done.
    def automerge(conn: object) -> list[int]:
        return [int(v) for (v,) in conn.execute(  # type: ignore[attr-defined]
            "SELECT v FROM entries_fts_config WHERE k = 'automerge'")]

    seen: list[list[int]] = []
    with MemoryStore(db_path, embedder=None, redactor=None) as store, \
            MemoryStore(db_path, embedder=None, redactor=None) as writer:
        for i in range(40):  # a segment each
            store.add(f"note {i} about topic{i % 7}")

        def meanwhile(sql: str) -> None:
            if sql.startswith("INSERT INTO entries_fts (") and "VALUES ('merge'" in sql:
                seen.append(automerge(writer.db.conn))

        store.db.conn.set_trace_callback(meanwhile)
        store.gc()
        store.db.conn.set_trace_callback(None)
        assert seen and all(found == [0] for found in seen)
        assert automerge(writer.db.conn) == [4]
