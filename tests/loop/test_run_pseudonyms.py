"""The run tables' pseudonyms are keyed as the memory store's are (harness_mem.pseudonyms): a new
file's with the identity key, an older file's rekeyed in place with its entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_loop.runstore import JobRecord, NewEvent, RunRecord, RunStore
from harness_mem.db import connect
from harness_mem.errors import IdentityKeyError
from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore

RUN = "run for ada@example.com"
JOB = "call +44 20 7946 0958"


def stored(runs: RunStore, value: str) -> str:
    """``value`` as the run tables store it (the run store gives ids back as stored)."""
    assert runs.redactor is not None
    return runs.redactor.pseudonymise(value).text


def create(runs: RunStore) -> None:
    jobs = [JobRecord(run_id=RUN, job_id=JOB, position=0, prompt="ring"),
            JobRecord(run_id=RUN, job_id="after", position=1, prompt="then", deps=(JOB,))]
    runs.create(RunRecord(id=RUN, goal="ship it"), jobs, [NewEvent("run.created", job_id="after")])


def sql(target: str, statement: str) -> list[tuple[object, ...]]:
    """One statement on the store's database, around the store (SQLite's or PostgreSQL's driver)."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as pg:
            cursor = pg.execute(statement)
            return list(cursor.fetchall()) if cursor.description else []
    conn = connect(target).conn
    try:
        return list(conn.execute(statement).fetchall())
    finally:
        conn.close()


def stored_run_ids(target: str) -> set[str]:
    return {str(r) for (r,) in sql(target, "SELECT id FROM runs")}


def test_a_new_files_run_ids_are_keyed_outside_and_a_keyless_run_store_is_refused(
        db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with RunStore.open(db_path) as runs:
        create(runs)
        assert runs.load(RUN).job("after").deps == (stored(runs, JOB),)
        job = stored(runs, JOB)
    conn = connect(db_path).conn
    [(secret,)] = conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchall()
    conn.close()
    assert job != Redactor.default(secret=secret).pseudonymise(JOB).text  # not the in-file secret's alone
    with MemoryStore(db_path, embedder=None) as memory:
        assert memory.pseudonym_keying == "outside"
        with RunStore.on(memory) as runs:  # the memory store's redactor makes the same pseudonyms
            assert runs.load(RUN).run.goal == "ship it"
    monkeypatch.setenv("HARNESS_MEM_CONFIG", str(tmp_path / "no-keys-here"))
    with RunStore.open(db_path) as runs, pytest.raises(IdentityKeyError, match="which is not here"):
        runs.load(RUN)


def test_an_older_files_runs_are_rekeyed_with_its_entries(engine_target: str) -> None:
    MemoryStore(engine_target, embedder=None).close()
    sql(engine_target, "DELETE FROM settings WHERE key = 'pseudonyms.keyed'")
    with MemoryStore(engine_target, embedder=None, rekey=False) as memory, RunStore.on(memory) as runs:
        create(runs)
        memory.add("a note", session=RUN)
    before = stored_run_ids(engine_target)
    with MemoryStore(engine_target, embedder=None) as memory:  # rekeys the whole database, run tables too
        assert memory.pseudonym_keying == "outside"
        assert [e.session for e in memory.list(session=RUN)] == [RUN]
        with RunStore.on(memory) as runs:
            loaded = runs.load(RUN)
            assert [j.job_id for j in loaded.jobs] == [stored(runs, JOB), "after"]
            assert loaded.job("after").deps == (stored(runs, JOB),)
            assert [e.job_id for e in runs.events(RUN)] == ["after"]
            runs.save(loaded.run, events=[NewEvent("run.note")])  # the log still refuses edits, and takes new events
    assert not before & stored_run_ids(engine_target)
    with pytest.raises(Exception, match="append-only"):
        sql(engine_target, "UPDATE run_events SET kind = 'x'")
