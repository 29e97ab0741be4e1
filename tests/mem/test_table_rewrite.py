"""A purge's rewrite works in short transactions (harness_mem.engines.sqlite_rewrite): writers get in
between its steps and nothing they write is lost, a rewrite killed at any step is finished by the next
``gc``, and no copy of a purged row is left in the file's bytes (real SQLite files, real processes)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from moved_rows import store_forgotten_rows

from harness_mem import steps
from harness_mem.engines import sqlite_rewrite
from harness_mem.store import MemoryStore

STEP = 20


@pytest.fixture(autouse=True)
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_rewrite, "ROWS", (STEP, STEP, STEP))
    monkeypatch.setattr(steps, "STEP_TARGET_S", 0.0)  # a step is one chunk: its number says where the rewrite is


def file_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(db.parent.iterdir()) if p.name.startswith(db.name))


def forgotten_store(db: Path) -> list[bytes]:
    """100 marked rows, half corrected and then forgotten (old copies of them in their pages' unused
    middle), an episode among them; returns the forgotten rows' markers."""
    return store_forgotten_rows(db, episode=True)


def schema(store: MemoryStore) -> list[tuple[str, str, str]]:
    return sorted(store.db.conn.execute("SELECT type, name, tbl_name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"))


def test_writers_get_in_between_the_steps_and_every_write_lands_in_the_new_tables(db_path: Path) -> None:
    db_path.parent.mkdir(exist_ok=True)
    markers = forgotten_store(db_path)
    with MemoryStore(db_path, embedder=None, redactor=None) as store, \
            MemoryStore(db_path, embedder=None, redactor=None) as writer:
        before = schema(store)
        kept = {entry.id: entry.content for entry in store.list(limit=1000)}
        store.purge()  # deletes and rewrites; below, a rewrite again with a writer in every pause
        wrote: list[str] = []

        def pause() -> None:  # the write lock is free here: a writer that would wait fails at once
            n = len(wrote)
            with writer.storage.without_waiting():
                if n % 4 == 0:
                    added = writer.add(f"written between steps {n} harbourlight", session="beside")
                    kept[added.id] = added.content
                elif n % 4 == 1:
                    victim = sorted(kept)[n]
                    correction = writer.supersede(victim, f"corrected between steps {n} harbourlight")
                    del kept[victim]
                    kept[correction.id] = f"corrected between steps {n} harbourlight"
                elif n % 4 == 2:
                    victim = sorted(kept)[n]
                    writer.forget(victim)
                    del kept[victim]
                else:
                    replaced = writer.add(f"another between {n} harbourlight", id=sorted(kept)[n], on_conflict="replace")
                    kept[replaced.id] = replaced.content
            wrote.append(n)

        sqlite_rewrite.rewrite_tables(store.db.conn, pause=pause)
        assert len(wrote) >= 8, "the rewrite took fewer steps than the proof needs"
        assert sqlite_rewrite.leftovers(store.db.conn) == [] and schema(store) == before
        conn = store.db.conn
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        assert store.integrity_check() == []
        listed = {entry.id: entry.content for entry in store.list(limit=1000)}
        assert listed == kept
        # The readable view names the table as written: it reads the new one.
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM entries WHERE forgotten_at IS NULL").fetchone()[0]
        found = {hit.entry.id for hit in store.recall("harbourlight", k=100, mode="keyword")}
        assert found == {i for i in listed if "harbourlight" in listed[i]}
        assert store.get("ep1").kind == "episode"
        # The episode's row in the episodes table came through: its entry still has it.
        assert conn.execute("SELECT count(*) FROM episodes e JOIN entries n ON n.id = e.entry_id").fetchone()[0] \
            == conn.execute("SELECT count(*) FROM episodes").fetchone()[0]
        # Another connection opened before the switch reads and writes the new tables.
        writer.add("after the switch harbourlight", id="late")
        assert store.get("late").content == "after the switch harbourlight"
    data = file_bytes(db_path)
    assert [m for m in markers if m in data] == []


KILLED_AT_A_STEP = """
import os, sys
from harness_mem import steps
from harness_mem import steps
from harness_mem.engines import sqlite_rewrite
from harness_mem.store import MemoryStore
sqlite_rewrite.ROWS = (20, 20, 20)
steps.STEP_TARGET_S = 0.0
steps = iter(range(int(sys.argv[2])))
def kill_at_the_last_step():
    if next(steps, None) is None:
        os._exit(9)  # killed between two steps
original = sqlite_rewrite.rewrite_tables
sqlite_rewrite.rewrite_tables = lambda conn, tables=sqlite_rewrite.TABLES, pause=None: original(
    conn, tables, pause=kill_at_the_last_step)
MemoryStore(sys.argv[1], embedder=None).purge()
"""


# Pauses (STEP rows a step): entries copied in steps 1-7, switched at 8, retired in 9-15; the episodes
# switched at 16 (small: one step to copy or retire). ``steps`` N: killed at pause N + 1.
@pytest.mark.parametrize("steps", [1, 4, 7, 9, 14, 15])
def test_a_rewrite_killed_at_a_step_is_finished_by_the_next_gc(tmp_path: Path, steps: int) -> None:
    db = tmp_path / "memory.db"
    markers = forgotten_store(db)
    with MemoryStore(db, embedder=None) as store:
        live = {entry.id: entry.content for entry in store.list(limit=1000)}
    killed = subprocess.run([sys.executable, "-c", KILLED_AT_A_STEP, str(db), str(steps)], capture_output=True)
    assert killed.returncode == 9, killed.stderr
    with MemoryStore(db, embedder=None) as store:
        left = sqlite_rewrite.leftovers(store.db.conn)
        assert left, "the kill came after the rewrite: this case proves nothing"
        # Half-way, the store reads and writes as ever (a copy's triggers keep it in step).
        store.add("written after the kill", id="after-kill")
        report = store.gc()
        assert report["forgotten_purged"] == 50 and report["vacuum"] == "tables"
        assert sqlite_rewrite.leftovers(store.db.conn) == []
        assert store.db.conn.execute("SELECT count(*) FROM sqlite_schema WHERE type = 'trigger'"
                                     " AND name LIKE '%rewrite%'").fetchone()[0] == 0
        assert {entry.id: entry.content for entry in store.list(limit=1000)} == {**live, "after-kill": "written after the kill"}
        assert store.integrity_check() == []
        store.db.conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
    data = file_bytes(db)
    assert [m for m in markers if m in data] == []
