from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness_mem import migrations
from harness_mem.db import connect, driver
from harness_mem.errors import MigrationError, SchemaTooNewError
from harness_mem.migrations import (
    MigrationSet,
    Retired,
    column_exists,
    recorded,
    recorded_sets,
    split_statements,
    table_exists,
)
from harness_mem.store import MemoryStore

EXPECTED_ENTRY_COLUMNS = {
    "pk": "INTEGER", "id": "TEXT", "namespace": "TEXT", "kind": "TEXT", "content": "TEXT", "role": "TEXT",
    "session": "TEXT", "tags": "TEXT", "source": "TEXT", "metadata": "TEXT", "created_at": "INTEGER",
    "expires_at": "INTEGER", "content_hash": "TEXT", "redactions": "TEXT",
    "superseded_by": "TEXT", "superseded_at": "INTEGER", "forgotten_at": "INTEGER",
    "updated_at": "INTEGER", "ttl_ms": "INTEGER",
}


def test_a_blank_database_gets_the_expected_schema(db_path: Path) -> None:
    conn = connect(db_path)
    applied = migrations.migrate(conn)
    # 0002 and 0006 are retired: a new file gets the runs tables from harness_loop's set instead.
    assert [m.number for m in applied] == [m.number for m in migrations.known_migrations() if m.number not in (2, 6)]
    columns = {row[1]: row[2] for row in conn.execute("PRAGMA table_info(entries)")}
    assert columns == EXPECTED_ENTRY_COLUMNS
    indexes = {row[1] for row in conn.execute("PRAGMA index_list(entries)")}
    assert {"entries_by_time", "entries_by_session", "entries_by_expiry"} <= indexes
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"entries", "entries_fts", "settings", "_migrations"} <= tables
    assert not {"runs", "jobs", "run_events"} & tables
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] >= 5000


def test_retired_migrations_are_recorded_as_skipped(db_path: Path) -> None:
    conn = connect(db_path)
    migrations.migrate(conn)
    states = {s.name: s.state for s in migrations.status(conn)}
    assert states == {"0001_init": "applied", "0002_runs": "skipped", "0003_experience": "applied",
                      "0004_vectors": "applied", "0005_consolidation": "applied", "0006_run_leases": "skipped",
                      "0007_memories_view": "applied", "0008_vectors_in_vec0": "applied",
                      "0009_corrections": "applied", "0010_derivations": "applied",
                      "0011_updated_and_ttl": "applied", "0012_identities": "applied",
                      "0013_derived_keywords": "applied", "0014_episode_provenance": "applied",
                      "0015_sync_log": "applied", "0016_entries_by_kind": "applied",
                      "0017_entry_counts": "applied"}
    # An older harness-mem reads only _migrations: every number is there, so it never runs 0002 itself.
    assert [n for (n,) in conn.execute("SELECT number FROM _migrations ORDER BY number")] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]
    skipped = next(s for s in migrations.status(conn) if s.number == 2)
    assert skipped.retired == "the runs tables moved to the harness_loop migration set"
    assert skipped.applied_at is not None and skipped.to_dict()["state"] == "skipped"


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


def write_set(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, sql in files.items():
        (directory / name).write_text(sql)
    return directory


def test_a_failing_migration_rolls_back_with_its_bookkeeping(db_path: Path, tmp_path: Path) -> None:
    files = write_set(tmp_path / "set", {
        "0001_good.sql": "CREATE TABLE good (x);",
        "0002_broken.sql": "CREATE TABLE half_done (x);\nSELECT * FROM no_such_table;",
    })
    conn = connect(db_path)
    with pytest.raises(MigrationError, match="extra migration 0002_broken failed and was rolled back"):
        MigrationSet("extra", files).migrate(conn)
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables  # the first statement was rolled back too
    assert {n for (n,) in conn.execute("SELECT number FROM _migrations_extra")} == {1}  # 0001 stays applied
    assert "good" in tables


def test_a_named_set_keeps_its_own_bookkeeping_and_comes_after_another(db_path: Path, tmp_path: Path) -> None:
    first = MigrationSet("first", write_set(tmp_path / "a", {"0001_base.sql": "CREATE TABLE base (id INTEGER PRIMARY KEY);"}))
    second = MigrationSet("second", write_set(tmp_path / "b", {
        "0001_child.sql": "CREATE TABLE child (base_id INTEGER REFERENCES base (id));",
    }), after=[first])
    conn = connect(db_path)
    assert [m.name for m in second.migrate(conn)] == ["0001_child"]  # `first` migrated before it
    assert first.version(conn) == 1 and second.version(conn) == 1
    assert recorded_sets(conn) == ["first", "second"]
    assert [s.name for s in recorded(conn, "second")] == ["0001_child"]
    assert second.migrate(conn) == [] and recorded(conn, "nothing_here") == []
    migrations.migrate(conn)
    assert recorded_sets(conn)[0] == "harness_mem"


def test_a_newer_schema_is_refused_per_set(db_path: Path, tmp_path: Path) -> None:
    extra = MigrationSet("extra", write_set(tmp_path / "set", {"0001_one.sql": "CREATE TABLE one (x);"}))
    conn = connect(db_path)
    extra.migrate(conn)
    conn.execute("INSERT INTO _migrations_extra VALUES (3, '0003_from_the_future', '2030-01-01')")
    with pytest.raises(SchemaTooNewError) as refused:
        extra.migrate(conn)
    assert str(refused.value) == (
        "the database has extra schema version 0003 but this installation knows only up to 0001"
        " — upgrade harness-mem (pip install -U harness-mem)"
    )
    # Reading the status still works, and says which one this code does not know.
    assert [(s.name, s.state, s.known) for s in extra.status(conn)] == [
        ("0001_one", "applied", True), ("0003_from_the_future", "applied", False),
    ]


def test_a_retired_migration_runs_only_where_its_condition_holds(tmp_path: Path) -> None:
    files = write_set(tmp_path / "set", {
        "0001_base.sql": "CREATE TABLE base (x);",
        "0002_old_extra.sql": "ALTER TABLE legacy ADD COLUMN y;",
    })

    def make() -> MigrationSet:
        return MigrationSet("extra", files, retired={2: Retired("moved", lambda c: table_exists(c, "legacy"))})

    new = connect(tmp_path / "new.db")
    assert [m.number for m in make().migrate(new)] == [1]
    assert [(s.state, s.retired) for s in make().status(new)] == [("applied", None), ("skipped", "moved")]

    old = connect(tmp_path / "old.db")
    old.execute("CREATE TABLE legacy (x)")
    assert [m.number for m in make().migrate(old)] == [1, 2]
    assert column_exists(old, "legacy", "y")
    assert [s.state for s in make().status(old)] == ["applied", "applied"]

    with pytest.raises(MigrationError, match="retired migration 0009 does not exist"):
        MigrationSet("extra", files, retired={9: Retired("gone")}).known()


def test_concurrent_openers_record_each_migration_once(tmp_path: Path) -> None:
    files = write_set(tmp_path / "set", {f"{n:04d}_step.sql": f"CREATE TABLE t{n} (x);" for n in range(1, 6)})
    path = tmp_path / "race.db"
    barrier = threading.Barrier(4)
    ran: list[int] = []
    errors: list[BaseException] = []

    def opener() -> None:
        conn = connect(path)
        try:
            barrier.wait()
            ran.extend(m.number for m in MigrationSet("race", files).migrate(conn))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(ran) == [1, 2, 3, 4, 5]  # each ran in exactly one opener
    conn = driver().connect(str(path))  # a file of this set alone: connect() would call it foreign
    assert conn.execute("SELECT count(*), count(DISTINCT number) FROM _migrations_race").fetchone() == (5, 5)


def test_a_bad_set_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="bad migration set name 'Bad-Name'"):
        MigrationSet("Bad-Name", tmp_path)
    with pytest.raises(MigrationError, match="no empty migrations found"):
        MigrationSet("empty", tmp_path).known()


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
