"""``reindex`` rebuilds the keyword index a step at a time, letting writers in between, on both engines.

One transaction over the whole index held every writer for its length (1.6 s in the soak, and it
grows with the store). The proof is a writer that starts during the first step and must have
committed before the second step begins: with one transaction there is no second step, and the
writer commits only after the rebuild.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from engine_rows import is_postgres

from harness_mem.engines import postgres, sqlite_files
from harness_mem.store import MemoryStore

ENTRIES = 60
STEP = 25


@pytest.fixture(autouse=True)
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_files, "KEYWORD_ROWS", (STEP, STEP, STEP))
    monkeypatch.setattr(postgres, "KEYWORD_BATCH", STEP)


def test_a_writer_gets_in_between_the_steps_of_a_reindex(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add_many([{"content": f"note {i} about the harbour crane", "id": f"n{i}"} for i in range(ENTRIES)])
        store.add("we moved the pier lights", role="ana", session="s1", id="t1")
        store.add("and painted the crane", role="bo", session="s1", id="t2")
        store.forget("n3")
        wrote = threading.Event()
        failure: list[BaseException] = []
        other = MemoryStore(engine_target, embedder=None)

        def write_beside() -> None:
            try:
                other.add("a lighthouse keeper's log", id="beside")
                wrote.set()
            except BaseException as exc:  # reported by the test below
                failure.append(exc)

        steps: list[bool] = []
        real = store.storage.index_texts

        def index_texts(pks: Any) -> dict[int, str]:
            if not steps:  # the first step holds the write lock: the writer starts and waits for it
                threading.Thread(target=write_beside, daemon=True).start()
                time.sleep(0.5)
                steps.append(wrote.is_set())
            else:  # a later step: the writer, waiting since the first, is done by now
                steps.append(wrote.wait(timeout=120))  # a failure detector: generous on a busy machine
            return real(pks)

        store.storage.index_texts = index_texts  # type: ignore[method-assign]
        try:
            report = store.reindex()
        finally:
            other.close()
        assert not failure, failure
        assert len(steps) >= 3 and steps[0] is False and all(steps[1:]), steps
        # The forgotten note gets no index row back; the writer's entry, after the first step, is indexed again.
        assert report["keyword_rows"] == ENTRIES + 2 - 1 + 1

        del store.storage.index_texts
        found = {hit.entry.id for hit in store.recall("harbour crane", k=100, mode="keyword")}
        assert found == {f"n{i}" for i in range(ENTRIES)} - {"n3"} | {"t2"}
        assert [hit.entry.id for hit in store.recall("lighthouse keeper", mode="keyword")] == ["beside"]
        # t2's index text carries the turn before it, as its write made it.
        assert [hit.entry.id for hit in store.recall("pier lights", k=5, mode="keyword")] == ["t1", "t2"]
        assert store.integrity_check() == []


def test_reindex_drops_keyword_rows_whose_entry_is_gone(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add_many([{"content": f"mooring rope number {i}", "id": f"r{i}"} for i in range(5)])
        conn = store.db.conn
        with store.transaction():  # an entry gone without its index row: the drift reindex mends
            conn.execute("DELETE FROM entries WHERE id = 'r2'")
        assert not is_postgres(str(db_path))
        assert len(conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH 'mooring'").fetchall()) == 5
        store.reindex()
        assert len(conn.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH 'mooring'").fetchall()) == 4
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")
        assert sorted(hit.entry.id for hit in store.recall("mooring rope", mode="keyword")) == ["r0", "r1", "r3", "r4"]
