"""RunStore (on SQLite and on PostgreSQL) and InMemoryRunStore: the same contract, plus what only a
database can promise."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from harness_loop.runstore import (
    InMemoryRunStore,
    JobRecord,
    NewEvent,
    RunRecord,
    RunStore,
    RunStoreLike,
    StoredRun,
    label,
    render,
    render_events,
    render_list,
)
from harness_mem.errors import DuplicateIdError, InvalidInputError, NotFoundError


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, new_target: Callable[[str], str]) -> Iterator[RunStoreLike]:
    if request.param == "memory":
        s: RunStore | InMemoryRunStore = InMemoryRunStore()
    else:
        s = RunStore.open(new_target(request.param))
    yield s
    s.close()


def job(run_id: str, job_id: str, position: int, **fields: object) -> JobRecord:
    return JobRecord(run_id=run_id, job_id=job_id, position=position, prompt=f"do {job_id}", **fields)  # type: ignore[arg-type]


def test_create_then_load_round_trips(store: RunStoreLike) -> None:
    run = RunRecord(id="r1", goal="ship it", max_tokens=500, metadata={"concurrency": 4})
    jobs = [
        job("r1", "b", 1, deps=("a",), retry={"max_attempts": 3, "backoff": {"kind": "none"}}),
        job("r1", "a", 0),
    ]
    store.create(run, jobs, [NewEvent("run.created", data={"jobs": 2})])

    loaded = store.load("r1")
    assert loaded.run.goal == "ship it"
    assert loaded.run.state == "created"
    assert loaded.run.max_tokens == 500
    assert loaded.run.metadata == {"concurrency": 4}
    assert loaded.run.created_at > 0 and loaded.run.updated_at >= loaded.run.created_at
    assert [j.job_id for j in loaded.jobs] == ["a", "b"]  # insertion position, not argument order
    assert loaded.job("b").deps == ("a",)
    assert loaded.job("b").retry == {"max_attempts": 3, "backoff": {"kind": "none"}}
    assert loaded.job("a").result_text is None


def test_save_updates_state_and_keeps_definitions(store: RunStoreLike) -> None:
    store.create(RunRecord(id="r1", goal="g"), [job("r1", "a", 0)])
    store.save(
        RunRecord(id="r1", goal="g", state="executing", spent_tokens=30),
        [
            JobRecord(
                run_id="r1", job_id="a", position=7, prompt="CHANGED", deps=("zzz",), state="succeeded",
                attempts=2, visits=1, result_text="", input_tokens=10, output_tokens=20, spent_tokens=30,
                last_error=None, prior_attempt="old", feedback="why",
            ),
            job("r1", "new", 1),
        ],
        [NewEvent("job.succeeded", "a", {"tokens": 30})],
    )
    loaded = store.load("r1")
    assert loaded.run.state == "executing" and loaded.run.spent_tokens == 30
    a = loaded.job("a")
    assert (a.state, a.attempts, a.visits, a.result_text, a.spent_tokens) == ("succeeded", 2, 1, "", 30)
    assert (a.prior_attempt, a.feedback) == ("old", "why")
    assert (a.prompt, a.deps, a.position) == ("do a", (), 0)  # fixed once stored
    assert [j.job_id for j in loaded.jobs] == ["a", "new"]


def test_event_seq_increases_per_run(store: RunStoreLike) -> None:
    store.create(RunRecord(id="r1", goal="g"), [], [NewEvent("run.created")])
    store.create(RunRecord(id="r2", goal="g"), [], [NewEvent("run.created")])
    store.save(RunRecord(id="r1", goal="g"), [], [NewEvent("a"), NewEvent("b", "x", {"n": 1})])
    store.save(RunRecord(id="r2", goal="g"), [], [NewEvent("c")])
    store.save(RunRecord(id="r1", goal="g"), [], [NewEvent("d")])

    r1 = store.events("r1")
    assert [(e.seq, e.kind) for e in r1] == [(1, "run.created"), (2, "a"), (3, "b"), (4, "d")]
    assert r1[2].job_id == "x" and r1[2].data == {"n": 1}
    assert [e.seq for e in store.events("r2")] == [1, 2]
    assert [e.kind for e in store.events("r1", after=2)] == ["b", "d"]
    assert [e.kind for e in store.events("r1", after=1, limit=1)] == ["a"]


def test_unknown_run_is_not_found(store: RunStoreLike) -> None:
    with pytest.raises(NotFoundError, match="runs list"):
        store.load("nope")
    with pytest.raises(NotFoundError):
        store.events("nope")
    with pytest.raises(NotFoundError):
        store.save(RunRecord(id="nope", goal="g"))


def test_duplicate_run_id_is_refused(store: RunStoreLike) -> None:
    store.create(RunRecord(id="r1", goal="g"))
    with pytest.raises(DuplicateIdError, match="already exists"):
        store.create(RunRecord(id="r1", goal="again"))
    assert store.load("r1").run.goal == "g"


@pytest.mark.parametrize(
    ("run", "jobs"),
    [
        (RunRecord(id="r1", goal="g", state="exploding"), []),
        (RunRecord(id="r1", goal="g"), [JobRecord(run_id="r1", job_id="a", position=0, prompt="p", state="done")]),
        (RunRecord(id="r1", goal="g"), [JobRecord(run_id="other", job_id="a", position=0, prompt="p")]),
    ],
)
def test_bad_records_are_refused(store: RunStoreLike, run: RunRecord, jobs: list[JobRecord]) -> None:
    with pytest.raises(InvalidInputError):
        store.create(run, jobs)


def test_list_runs_newest_first_with_counts(store: RunStoreLike) -> None:
    store.create(RunRecord(id="r1", goal="first"), [job("r1", "a", 0), job("r1", "b", 1)])
    store.create(RunRecord(id="r2", goal="second", state="completed"), [job("r2", "a", 0, state="succeeded")])
    store.save(RunRecord(id="r1", goal="first", state="failed"), [job("r1", "a", 0, state="dead_lettered")])

    runs = store.list_runs()
    assert [s.run.id for s in runs] in (["r2", "r1"], ["r1", "r2"])  # same millisecond: id breaks the tie
    by_id = {s.run.id: s for s in runs}
    assert by_id["r1"].job_counts == {"dead_lettered": 1, "pending": 1}
    assert by_id["r1"].total_jobs == 2
    assert [s.run.id for s in store.list_runs(state="completed")] == ["r2"]
    assert len(store.list_runs(limit=1)) == 1
    with pytest.raises(InvalidInputError):
        store.list_runs(state="bogus")


def test_render_matches_the_report_line_format() -> None:
    stored = StoredRun(
        RunRecord(id="r1", goal="write\nit", state="failed", max_tokens=150, spent_tokens=200,
                  reason="token budget exceeded: spent 200 of 150"),
        (
            JobRecord(run_id="r1", job_id="a", position=0, prompt="p", state="succeeded", visits=1,
                      attempts=2, spent_tokens=100, result_text="x" * 100),
            JobRecord(run_id="r1", job_id="b", position=1, prompt="p", state="dead_lettered", visits=2,
                      attempts=1, last_error="boom\nagain"),
            JobRecord(run_id="r1", job_id="c", position=2, prompt="p", state="cancelled",
                      last_error="run token budget exceeded"),
        ),
    )
    assert render(stored).splitlines() == [
        "run r1: failed — 200 of 150 tokens",
        "goal: write it",
        "reason: token budget exceeded: spent 200 of 150",
        "  - a: succeeded (entered 1×) — " + "x" * 80,
        "  - b: dead-lettered (entered 2×) — failed: boom again",
        "  - c: cancelled (entered 0×) — failed: run token budget exceeded",
    ]
    assert "  - a: succeeded (entered 1×, attempts 2, tokens 100) — " in render(stored, detailed=True)
    assert label("dead_lettered") == "dead-lettered"


def test_render_events_and_list(store: RunStoreLike) -> None:
    store.create(RunRecord(id="r1", goal="g"), [job("r1", "a", 0)], [NewEvent("run.created", data={"jobs": 1})])
    store.save(RunRecord(id="r1", goal="g"), [], [NewEvent("job.running", "a")])
    lines = render_events(store.events("r1")).splitlines()
    assert lines[0].split()[0] == "1" and '{"jobs":1}' in lines[0]
    assert lines[1].split()[2:] == ["job.running", "a"]
    listing = render_list(store.list_runs())
    assert listing.startswith("r1  created") and "0/1 jobs" in listing


def test_to_dict_is_json_ready(store: RunStoreLike) -> None:
    import json

    store.create(RunRecord(id="r1", goal="g"), [job("r1", "a", 0)], [NewEvent("run.created")])
    data = store.load("r1").to_dict()
    assert data["id"] == "r1" and data["jobs"][0]["id"] == "a" and data["created_at"].endswith("Z")
    json.dumps([data, store.list_runs()[0].to_dict(), store.events("r1")[0].to_dict()])


# ---- only a database: SQLite or PostgreSQL --------------------------------------------------------


@pytest.fixture
def db_store(run_target: str) -> Iterator[RunStore]:
    s = RunStore.open(run_target)
    yield s
    s.close()


def test_event_log_is_append_only(db_store: RunStore) -> None:
    db_store.create(RunRecord(id="r1", goal="g"), [], [NewEvent("run.created"), NewEvent("x")])
    tables = db_store.tables
    for statement, params in [
        ("UPDATE run_events SET kind = 'forged' WHERE run_id = ?", ("r1",)),
        ("DELETE FROM run_events WHERE run_id = ?", ("r1",)),
        ("INSERT INTO run_events (run_id, seq, at, kind) VALUES (?, 1, 0, 'again')", ("r1",)),
    ]:
        with pytest.raises(tables.integrity_error, match="append-only"), tables.transaction():
            tables.execute(statement, params)
    assert [e.kind for e in db_store.events("r1")] == ["run.created", "x"]
    # Deleting the whole run is still possible: its log goes with it.
    with tables.transaction():
        tables.execute("DELETE FROM runs WHERE id = 'r1'")
    assert tables.execute("SELECT COUNT(*) FROM run_events").fetchone()[0] == 0


def test_a_failed_save_changes_nothing(db_store: RunStore) -> None:
    db_store.create(RunRecord(id="r1", goal="g"), [job("r1", "a", 0)], [NewEvent("run.created")])
    bad = JobRecord(run_id="r1", job_id="b", position=0, prompt="p")  # position 0 is taken
    with pytest.raises(db_store.tables.integrity_error):
        db_store.save(
            RunRecord(id="r1", goal="g", state="executing"),
            [job("r1", "a", 0, state="running"), bad],
            [NewEvent("job.running", "a")],
        )
    loaded = db_store.load("r1")
    assert loaded.run.state == "created" and loaded.job("a").state == "pending" and len(loaded.jobs) == 1
    assert [e.kind for e in db_store.events("r1")] == ["run.created"]


def test_namespaces_do_not_see_each_other(run_target: str) -> None:
    with RunStore.open(run_target) as default, RunStore.open(run_target, namespace="team") as team:
        default.create(RunRecord(id="r1", goal="mine"))
        assert [s.run.id for s in default.list_runs()] == ["r1"]
        assert team.list_runs() == []
        with pytest.raises(NotFoundError):
            team.load("r1")
        with pytest.raises(NotFoundError):
            team.events("r1")


def test_a_second_connection_sees_committed_state(run_target: str) -> None:
    with RunStore.open(run_target) as writer, RunStore.open(run_target) as reader:
        writer.create(RunRecord(id="r1", goal="g"), [job("r1", "a", 0)])
        writer.save(RunRecord(id="r1", goal="g", state="executing"), [job("r1", "a", 0, state="running")])
        assert reader.load("r1").job("a").state == "running"


def test_a_pruned_log_keeps_each_finished_runs_last_event(db_store: RunStore) -> None:
    db_store.create(RunRecord(id="done", goal="g"), [], [NewEvent("run.created"), NewEvent("x")])
    db_store.save(RunRecord(id="done", goal="g", state="completed"), [], [NewEvent("run.completed")])
    db_store.create(RunRecord(id="live", goal="g", state="executing"), [], [NewEvent("run.created")])
    assert db_store.prune_events(0) == 0
    assert db_store.prune_events(2**62) == 2
    assert [(e.seq, e.kind) for e in db_store.events("done")] == [(3, "run.completed")]
    assert [e.kind for e in db_store.events("live")] == ["run.created"]
