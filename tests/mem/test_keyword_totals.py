"""The totals SQLite's keyword index ranks by (rows, tokens) follow what it holds.

FTS5's contentless_delete index never takes a deleted row off the totals bm25() reads, so every
forget, replacement and reindex inflated them (a reindex doubled the rows) and moved every keyword
score. The store takes them off itself (engines/sqlite_keywords.py): a file that held entries and
forgot them ranks what is left exactly as a file that never held them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_mem.engines import sqlite_keywords
from harness_mem.engines.sqlite import SQLiteStorage
from harness_mem.store import MemoryStore

QUERIES = ["weather in town", "rain tomorrow", "a walk by the river"]


def notes(numbers: range) -> list[dict[str, str]]:
    return [{"id": f"n{i}", "content": f"note {i} about the weather in town {i}, rain or a walk by the river"
             + " and more" * (i % 7)} for i in numbers]


def keyword_scores(store: MemoryStore) -> dict[str, list[tuple[str, object]]]:
    """Each query's keyword hits with their BM25, and the totals it was computed from."""
    ranked: dict[str, list[tuple[str, object]]] = {
        q: [(h.entry.id, h.components["keyword"]["score"]) for h in store.recall(q, 10, mode="keyword", explain=True)
            if h.components is not None] for q in QUERIES}
    return {**ranked, "totals": [("rows and average", store.storage.keywords.stats())]}


@pytest.fixture
def never_held(tmp_path: Path) -> dict[str, list[tuple[str, object]]]:
    with MemoryStore(tmp_path / "never.db", embedder=None) as store:
        store.add_many(notes(range(20, 60)))
        return keyword_scores(store)


def test_forgetting_and_reindexing_rank_as_if_the_entries_were_never_there(
        db_path: Path, never_held: dict[str, list[tuple[str, object]]]) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add_many(notes(range(60)))
        assert keyword_scores(store) != never_held
        for i in range(20):
            store.forget(f"n{i}")
        assert keyword_scores(store) == never_held
        store.reindex()  # every row taken out and put back
        assert keyword_scores(store) == never_held


def test_a_replaced_entry_counts_once(db_path: Path, never_held: dict[str, list[tuple[str, object]]]) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add_many(notes(range(20, 60)))
        store.add_many(notes(range(20, 60)), on_conflict="replace")  # every row deleted and written again
        assert keyword_scores(store) == never_held


def test_a_crash_before_the_totals_are_settled_is_mended_on_the_next_open(
        db_path: Path, never_held: dict[str, list[tuple[str, object]]], monkeypatch: pytest.MonkeyPatch) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add_many(notes(range(60)))
        with monkeypatch.context() as patched:  # the process dies after the forget commits
            patched.setattr(SQLiteStorage, "_settle_totals", lambda self: None)
            for i in range(20):
                store.forget(f"n{i}")
    with MemoryStore(db_path, embedder=None) as store:
        assert keyword_scores(store) == never_held


def test_an_older_files_drift_is_mended_by_reindex(db_path: Path, never_held: dict[str, list[tuple[str, object]]]) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add_many(notes(range(20, 60)))
        conn = store.db.conn
        conn.execute("UPDATE entries_fts_data SET block = ? WHERE id = 1",  # as an older version left it
                     (sqlite_keywords.encode_varint(97) + sqlite_keywords.encode_varint(4000),))
        conn.commit()
        assert keyword_scores(store) != never_held
        store.reindex()
        assert keyword_scores(store) == never_held


@pytest.mark.parametrize("value", [0, 1, 127, 128, 16383, 16384, 2**21, 2**35 + 7, 2**56 - 1, 2**56, 2**63 - 1])
def test_varints_read_back(value: int) -> None:
    encoded = sqlite_keywords.encode_varint(value)
    assert sqlite_keywords.varint(encoded, 0) == (value, len(encoded))
