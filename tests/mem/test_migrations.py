from __future__ import annotations

from pathlib import Path

import pytest

from harness_mem import migrations
from harness_mem.db import connect
from harness_mem.errors import MigrationError, SchemaTooNewError
from harness_mem.migrations import Migration, split_statements
from harness_mem.store import MemoryStore

EXPECTED_ENTRY_COLUMNS = {
    "pk": "INTEGER", "id": "TEXT", "namespace": "TEXT", "kind": "TEXT", "content": "TEXT", "role": "TEXT",
    "session": "TEXT", "tags": "TEXT", "source": "TEXT", "metadata": "TEXT", "created_at": "INTEGER",
    "expires_at": "INTEGER", "content_hash": "TEXT", "redactions": "TEXT",
}


def test_a_blank_database_gets_the_expected_schema(db_path: Path) -> None:
    conn = connect(db_path)
    applied = migrations.migrate(conn)
    assert [m.number for m in applied] == [m.number for m in migrations.known_migrations()]
    columns = {row[1]: row[2] for row in conn.execute("PRAGMA table_info(entries)")}
    assert columns == EXPECTED_ENTRY_COLUMNS
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(entries)")}
    assert {"entries_by_time", "entries_by_session", "entries_by_expiry"} <= indexes
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"entries", "entries_fts", "settings", "_migrations"} <= tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_migrating_twice_is_harmless(db_path: Path) -> None:
    conn = connect(db_path)
    migrations.migrate(conn)
    assert migrations.migrate(conn) == []
    assert all(status.applied_at for status in migrations.status(conn))


def test_migration_numbers_are_unique_and_increasing() -> None:
    numbers = [m.number for m in migrations.known_migrations()]
    assert numbers == sorted(set(numbers)) and numbers[0] == 1


def test_a_newer_database_is_refused_clearly(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("kept safe")
        store.db.execute("INSERT INTO _migrations VALUES (9999, '9999_from_the_future', '2030-01-01')")
    with pytest.raises(SchemaTooNewError, match="schema version 9999 .* upgrade harness-mem"):
        MemoryStore(db_path, embedder=None)


def test_a_failing_migration_rolls_back_with_its_bookkeeping(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = migrations.known_migrations()
    broken = Migration(good[-1].number + 1, "9998_broken", "CREATE TABLE half_done (x);\nSELECT * FROM no_such_table;")
    monkeypatch.setattr(migrations, "known_migrations", lambda: (*good, broken))
    conn = connect(db_path)
    with pytest.raises(MigrationError, match="9998_broken failed and was rolled back"):
        migrations.migrate(conn)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables  # the first statement was rolled back too
    assert broken.number not in {n for (n,) in conn.execute("SELECT number FROM _migrations")}
    assert "entries" in tables  # earlier migrations stay applied


def test_split_statements_keeps_trigger_bodies_whole() -> None:
    script = """
    -- a comment
    CREATE TABLE t (x);
    CREATE TRIGGER t_ai AFTER INSERT ON t BEGIN
        INSERT INTO t VALUES (new.x + 1);
        SELECT 1;
    END;
    """
    statements = split_statements(script)
    assert len(statements) == 2
    assert statements[1].startswith("CREATE TRIGGER") and statements[1].endswith("END;")


def test_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.txt"
    bogus.write_text("this is not sqlite" * 100)
    from harness_mem.errors import StorageError

    with pytest.raises(StorageError, match="not a usable SQLite database"):
        MemoryStore(bogus, embedder=None)
