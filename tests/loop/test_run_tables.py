"""harness_loop's migration set: new files, files made before the set existed, and the state names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness_loop import runstore as schema
from harness_loop.runstore import JOB_STATES, RUN_STATES, NewEvent, RunRecord, RunStore
from harness_loop.states import JobState, RunState
from harness_mem.db import Connection, connect, write_transaction
from harness_mem.errors import SchemaTooNewError
from harness_mem.migrations import known_migrations, recorded_sets, split_statements, status
from harness_mem.store import MemoryStore

RUN_COLUMNS = ["id", "namespace", "goal", "state", "max_tokens", "spent_tokens", "replans", "reason",
               "metadata", "created_at", "updated_at", "lease_owner", "lease_until", "redacted"]
JOB_COLUMNS = ["run_id", "job_id", "position", "prompt", "deps", "retry", "state", "attempts", "visits",
               "result_text", "input_tokens", "output_tokens", "spent_tokens", "last_error", "prior_attempt",
               "feedback", "updated_at", "lease_owner", "lease_until"]
EVENT_COLUMNS = ["run_id", "seq", "at", "kind", "job_id", "data"]
TRIGGERS = {"run_events_seq_increases", "run_events_no_update", "run_events_no_delete"}


def old_file(path: Path, upto: int) -> Connection:
    """A file as an earlier harness-mem left it: its first ``upto`` migrations, run unconditionally."""
    conn = connect(path)
    conn.execute("CREATE TABLE _migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
    for migration in known_migrations()[:upto]:
        with write_transaction(conn):
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO _migrations VALUES (?, ?, '2025-01-01T00:00:00+00:00')",
                         (migration.number, migration.name))
    return conn


def shape(conn: Connection) -> dict[str, object]:
    """What the runs tables look like, comparable between two files."""
    found: dict[str, object] = {}
    for table in ("runs", "jobs", "run_events"):
        found[table] = [tuple(row) for row in conn.execute(f"PRAGMA table_xinfo({table})")]
        found[table + " indexes"] = sorted(tuple(row[1:]) for row in conn.execute(f"PRAGMA index_list({table})"))
        found[table + " keys"] = sorted(tuple(row[2:]) for row in conn.execute(f"PRAGMA foreign_key_list({table})"))
    found["triggers"] = sorted(row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"
                                                              " AND tbl_name = 'run_events'"))
    return found


def test_a_new_file_gets_the_runs_tables_from_harness_loop(tmp_path: Path) -> None:
    conn = connect(tmp_path / "new.db")
    ran = schema.migrate(conn)
    assert [m.name for m in ran][-3:] == ["0001_runs", "0002_run_privacy", "0003_job_leases"]
    assert [row[1] for row in conn.execute("PRAGMA table_info(runs)")] == RUN_COLUMNS
    assert [row[1] for row in conn.execute("PRAGMA table_info(jobs)")] == JOB_COLUMNS
    assert [row[1] for row in conn.execute("PRAGMA table_info(run_events)")] == EVENT_COLUMNS
    assert set(shape(conn)["triggers"]) == TRIGGERS  # type: ignore[arg-type]
    assert recorded_sets(conn) == ["harness_mem", "harness_loop"]
    assert [(s.name, s.state) for s in schema.MIGRATIONS.status(conn)] == [
        ("0001_runs", "applied"), ("0002_run_privacy", "applied"), ("0003_job_leases", "applied")]
    assert schema.migrate(conn) == []


@pytest.mark.parametrize("upto", [1, 2, 3, 5, 6])
def test_a_file_from_an_earlier_version_upgrades_with_its_rows(tmp_path: Path, upto: int) -> None:
    conn = old_file(tmp_path / "old.db", upto)
    with write_transaction(conn):
        conn.execute("INSERT INTO entries (id, kind, content, created_at, content_hash) VALUES"
                     " ('e1', 'note', 'kept across upgrades', 1, 'h')")
        if upto >= 2:
            conn.execute("INSERT INTO runs (id, goal, state, created_at, updated_at) VALUES ('r1', 'old goal', 'failed', 1, 2)")
            conn.execute("INSERT INTO jobs (run_id, job_id, position, prompt, state, updated_at, result_text)"
                         " VALUES ('r1', 'a', 0, 'do a', 'dead_lettered', 2, 'half')")
            conn.execute("INSERT INTO run_events (run_id, seq, at, kind) VALUES ('r1', 1, 1, 'run.created')")
    conn.close()

    with RunStore.open(tmp_path / "old.db") as store:
        if upto >= 2:
            stored = store.load("r1")
            assert (stored.run.goal, stored.run.state, stored.job("a").state) == ("old goal", "failed", "dead_lettered")
            assert stored.job("a").result_text == "half"
            assert [e.kind for e in store.events("r1")] == ["run.created"]
            assert store.claim("r1", "me") is None  # the lease columns are there
        store.create(RunRecord(id="r2", goal="new goal"), [], [NewEvent("run.created")])
        store.save(RunRecord(id="r2", goal="new goal", state="completed"), [], [NewEvent("run.completed")])
        assert [e.seq for e in store.events("r2")] == [1, 2]

    conn = connect(tmp_path / "old.db")
    assert shape(conn) == shape(_new_file(tmp_path))
    states = {s.number: s.state for s in status(conn)}
    # What earlier versions ran stays applied; what they had not run yet, new code skips or runs.
    assert states[2] == ("applied" if upto >= 2 else "skipped")
    assert states[6] == ("applied" if upto >= 2 else "skipped")
    assert all(state != "pending" for state in states.values())
    assert [s.state for s in schema.MIGRATIONS.status(conn)] == ["applied", "applied", "applied"]
    conn.close()
    with MemoryStore(tmp_path / "old.db", embedder=None) as memory:
        assert memory.get("e1").content == "kept across upgrades"
        assert memory.stats()["schema_version"] == known_migrations()[-1].number


def _new_file(tmp_path: Path) -> Connection:
    conn = connect(tmp_path / "fresh.db")
    schema.migrate(conn)
    return conn


def test_memory_store_first_then_run_store(tmp_path: Path) -> None:
    path = tmp_path / "both.db"
    with MemoryStore(path, embedder=None) as memory:
        memory.add("a note")
    with RunStore.open(path) as store:
        store.create(RunRecord(id="r1", goal="g"))
    with MemoryStore(path, embedder=None) as memory, RunStore.open(path) as store:
        assert memory.count() == 1 and store.load("r1").run.goal == "g"
    assert shape(connect(path)) == shape(_new_file(tmp_path))


def test_a_newer_harness_loop_schema_is_refused(tmp_path: Path) -> None:
    conn = _new_file(tmp_path)
    conn.execute("INSERT INTO _migrations_harness_loop VALUES (7, '0007_later', '2030-01-01')")
    with pytest.raises(SchemaTooNewError, match=r"has harness_loop schema version 0007 but this installation knows"
                                                 r" only up to 0003 — upgrade harness-mem"):
        RunStore.open(tmp_path / "fresh.db")
    MemoryStore(tmp_path / "fresh.db", embedder=None).close()  # harness_mem's own set is still fine


@pytest.mark.parametrize("make", ["new", "old"])
def test_the_schema_allows_exactly_the_states_the_enums_define(tmp_path: Path, make: str) -> None:
    conn = _new_file(tmp_path) if make == "new" else old_file(tmp_path / "old.db", 6)
    for table, names in (("runs", RUN_STATES), ("jobs", JOB_STATES)):
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
        allowed = re.search(r"state IN \(([^)]*)\)", sql).group(1)  # type: ignore[union-attr]
        assert re.findall(r"'([a-z_]+)'", allowed) == list(names)
    assert tuple(s.value for s in RunState) == RUN_STATES
    assert tuple(s.value for s in JobState) == JOB_STATES
    assert JobState.DEAD_LETTERED.value == "dead_lettered"  # the stored name never changes


# ---- PostgreSQL: the same tables, from harness_loop/migrations/postgres/ ---------------------------


def pg_columns(store: RunStore, table: str) -> list[str]:
    return [row[0] for row in store.tables.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?"
        " ORDER BY ordinal_position", (table,)).fetchall()]


def pg_recorded(store: RunStore) -> list[tuple[int, str, str]]:
    return [tuple(row) for row in store.tables.execute(
        "SELECT number, name, applied_at FROM _migrations_harness_loop ORDER BY number").fetchall()]


def test_a_new_postgres_database_gets_the_runs_tables(postgres_target: str) -> None:
    from harness_loop.runtables_postgres import known_migrations as postgres_migrations

    with RunStore.open(postgres_target) as store:
        assert store.engine == "postgresql"
        assert pg_columns(store, "runs") == RUN_COLUMNS
        assert pg_columns(store, "jobs") == JOB_COLUMNS
        assert pg_columns(store, "run_events") == EVENT_COLUMNS
        triggers = {row[0] for row in store.tables.execute(
            "SELECT tgname FROM pg_trigger WHERE tgrelid = 'run_events'::regclass AND NOT tgisinternal").fetchall()}
        assert triggers == TRIGGERS
        recorded = pg_recorded(store)
        assert [(n, name) for n, name, _ in recorded] == [(m.number, m.name) for m in postgres_migrations()]
        # harness_mem's set came first: its settings hold the key both stores pseudonymise with.
        assert store.tables.execute("SELECT count(*) FROM _migrations").fetchone()[0] >= 1
    with RunStore.open(postgres_target) as again:
        assert pg_recorded(again) == recorded  # nothing ran twice


def test_several_processes_open_one_new_postgres_database_at_once(postgres_target: str) -> None:
    import threading

    barrier, errors, opened = threading.Barrier(6), [], []

    def open_one() -> None:
        barrier.wait()
        try:
            with RunStore.open(postgres_target) as store:
                opened.append(pg_recorded(store))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == [] and len(opened) == 6
    assert all(seen == opened[0] for seen in opened) and len(opened[0]) >= 1


def test_a_newer_harness_loop_schema_is_refused_on_postgres(postgres_target: str) -> None:
    with RunStore.open(postgres_target) as store, store.tables.transaction():
        store.tables.execute("INSERT INTO _migrations_harness_loop VALUES (7, '0007_later', '2030-01-01')")
    with pytest.raises(SchemaTooNewError, match=r"has harness_loop schema version 0007 but this installation knows"
                                                 r" only up to 0001 — upgrade harness-mem"):
        RunStore.open(postgres_target)
    MemoryStore(postgres_target, embedder=None).close()  # harness_mem's own set is still fine


def test_the_postgres_schema_allows_exactly_the_states_the_enums_define(postgres_target: str) -> None:
    with RunStore.open(postgres_target) as store:
        for table, names in (("runs", RUN_STATES), ("jobs", JOB_STATES)):
            checks = [row[0] for row in store.tables.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = ?::regclass AND contype = 'c'",
                (table,)).fetchall()]
            (state_check,) = [c for c in checks if "(state " in c]
            assert re.findall(r"'([a-z_]+)'", state_check) == list(names)
