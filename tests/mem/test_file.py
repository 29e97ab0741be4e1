"""The file as others see it: readable with sqlite-utils, and a SQLite file we did not make is left alone."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sqlite_vec

from harness_mem.db import connect, driver
from harness_mem.errors import StorageError
from harness_mem.store import MemoryStore

SQLITE_UTILS = str(Path(sys.executable).with_name("sqlite-utils"))


def sqlite_utils(*args: str) -> list[dict[str, object]]:
    result = subprocess.run([SQLITE_UTILS, *args], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_the_memories_view_shows_entries_readably(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("deploys are on Tuesdays", role="assistant", session="s-42", tags=["ops"],
                  created_at="2026-03-02T09:15:00.250Z")
        store.add("we chose argon2id", kind="fact")
    rows = sqlite_utils("rows", str(db_path), "memories")
    assert rows[0] == {
        "id": rows[0]["id"], "namespace": "default", "kind": "turn", "role": "assistant", "session": "s-42",
        "time": "2026-03-02T09:15:00.250Z", "content": "deploys are on Tuesdays", "tags": '["ops"]',
        "superseded_by": None,
    }
    counts = sqlite_utils("query", str(db_path), "select kind, count(*) as n from memories group by kind order by kind")
    assert counts == [{"kind": "fact", "n": 1}, {"kind": "turn", "n": 1}]


def test_sqlite_utils_counts_every_table_with_sqlite_vec_loaded(db_path: Path, hashed_embedder: object) -> None:
    with MemoryStore(db_path, embedder=hashed_embedder) as store:  # type: ignore[arg-type]
        store.add("a note with a vector")
    tables = sqlite_utils("tables", str(db_path), "--counts", f"--load-extension={sqlite_vec.loadable_path()}")
    counts = {t["table"]: t["count"] for t in tables}
    assert counts["entries"] == 1 and "memories" not in counts  # views are not tables


def test_the_store_hands_out_a_sqlite_utils_database(store: MemoryStore) -> None:
    store.add("one")
    assert {"entries", "settings", "_migrations"} <= set(store.db.table_names())
    assert "memories" in store.db.view_names()
    assert store.db["entries"].count == 1


@pytest.mark.parametrize("opener", ["store", "connect"])
def test_a_sqlite_file_we_did_not_make_is_refused_and_left_unchanged(tmp_path: Path, opener: str) -> None:
    foreign = tmp_path / "app.db"
    conn = driver().connect(str(foreign))
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = hashlib.sha256(foreign.read_bytes()).hexdigest()
    with pytest.raises(StorageError, match=r"app.db is a SQLite database that harness-mem did not create \(tables: notes\)"):
        if opener == "store":
            MemoryStore(foreign, embedder=None)
        else:
            connect(foreign)
    assert hashlib.sha256(foreign.read_bytes()).hexdigest() == before  # not even switched to WAL
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_an_empty_sqlite_file_is_taken_over(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    driver().connect(str(empty)).close()
    with MemoryStore(empty, embedder=None) as store:
        assert store.add("first").content == "first"


def test_doctor_reads_the_schema_through_sqlite_utils(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("one")
        schema = next(c for c in store.diagnose()["checks"] if c["name"] == "schema")
        assert schema["ok"] and schema["detail"].endswith("all migrations applied; entries 1, episodes 0, skills 0")
        store.db.execute("DROP VIEW memories")
        schema = next(c for c in store.diagnose()["checks"] if c["name"] == "schema")
        assert not schema["ok"] and "missing view memories" in schema["detail"]
