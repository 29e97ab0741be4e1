"""Workers draining one stored run (harness_loop.workers), on SQLite and on PostgreSQL, and four real
processes draining 200 jobs on PostgreSQL while one of them is killed."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path

import anyio
import pytest

from harness_loop.errors import OrchestratorError
from harness_loop.job import Backoff, Job, JobFailure, JobResult, RetryPolicy
from harness_loop.orchestrator import Orchestrator
from harness_loop.runstore import Attempt, RunStore, Settlement, StoredRun
from harness_loop.workers import Worker, submit

pytestmark = pytest.mark.anyio

WORKER = Path(__file__).with_name("drain_worker.py")


@pytest.fixture
def store(run_target: str) -> Iterator[RunStore]:
    with RunStore.open(run_target) as opened:
        yield opened


def answer(job_id: str, upstream_texts: list[str]) -> str:
    digest = hashlib.sha256("|".join([job_id, *upstream_texts]).encode()).hexdigest()[:16]
    return f"{job_id}:{digest}"


def layered(layers: int, width: int) -> list[Job]:
    """``layers`` of ``width`` jobs, each (below the first layer) depending on two of the layer above."""
    return [
        Job(id=f"j{layer:02d}{k:02d}", prompt=f"work on {layer}/{k}",
            deps=[] if layer == 0 else [f"j{layer - 1:02d}{k:02d}", f"j{layer - 1:02d}{(k + 1) % width:02d}"])
        for layer in range(layers) for k in range(width)
    ]


def expected(jobs: list[Job]) -> dict[str, str]:
    done: dict[str, str] = {}
    for job in jobs:
        done[job.id] = answer(job.id, [done[d] for d in job.deps])
    return done


async def digest_runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
    await anyio.sleep(0)
    return JobResult(text=answer(job.id, [upstream[d].text for d in job.deps]), input_tokens=1, output_tokens=1)


def results(stored: StoredRun) -> dict[str, str | None]:
    return {job.job_id: job.result_text for job in stored.jobs}


async def test_three_workers_drain_a_dag_each_job_once_in_dependency_order(run_target: str) -> None:
    jobs = layered(5, 6)
    stores = [RunStore.open(run_target) for _ in range(3)]  # one connection each, as three processes
    try:
        run_id = submit(stores[0], "drain it", jobs, run_id="drained")
        settled: list[int] = []

        async def drain(store: RunStore) -> None:
            settled.append(await Worker(digest_runner, store=store, poll_s=0.005).drain(run_id))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                for store in stores:
                    tg.start_soon(drain, store)
        stored = stores[0].load(run_id)
        events = stores[0].events(run_id)
    finally:
        for store in stores:
            store.close()
    assert stored.run.state == "completed" and stored.run.spent_tokens == 2 * len(jobs)
    assert sum(settled) == len(jobs)
    assert results(stored) == expected(jobs)  # every job saw its deps' answers
    assert all((job.state, job.attempts, job.visits) == ("succeeded", 1, 1) for job in stored.jobs)
    kinds = Counter((e.kind, e.job_id) for e in events if e.job_id)
    assert all(kinds["job.running", job.id] == kinds["job.succeeded", job.id] == 1 for job in jobs)
    # A job started only after each of its deps had succeeded.
    seq = {(e.kind, e.job_id): e.seq for e in events}
    assert all(seq["job.running", job.id] > seq["job.succeeded", dep] for job in jobs for dep in job.deps)
    assert [e.kind for e in events][-1] == "run.completed"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_failures_are_retried_after_their_backoff_then_dead_lettered_downstream_cancelled(store: RunStore) -> None:
    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        if job.id == "flaky":
            raise JobFailure("still broken", input_tokens=2)
        return JobResult(text="ok")

    retry = RetryPolicy(max_attempts=2, backoff=Backoff.fixed(0.2))
    jobs = [Job(id="flaky", prompt="p", retry=retry), Job(id="after", prompt="p", deps=["flaky"]),
            Job(id="last", prompt="p", deps=["after"]), Job(id="alone", prompt="p")]
    run_id = submit(store, "g", jobs)
    with anyio.fail_after(20):
        await Worker(runner, store=store, poll_s=0.01).drain(run_id)
    stored = store.load(run_id)
    assert stored.run.state == "failed" and stored.run.reason == "1 job(s) dead-lettered, 2 cancelled"
    assert stored.run.spent_tokens == 4  # both failed attempts reported their tokens
    flaky = stored.job("flaky")
    assert (flaky.state, flaky.attempts, flaky.last_error) == ("dead_lettered", 2, "still broken")
    assert (stored.job("after").state, stored.job("after").last_error) == ("cancelled", "dependency `flaky` dead-lettered")
    assert stored.job("last").last_error == "dependency `after` cancelled"
    assert stored.job("alone").state == "succeeded"
    events = store.events(run_id)
    first_failure = next(e for e in events if e.kind == "job.failed")
    second_start = [e for e in events if e.kind == "job.running" and e.job_id == "flaky"][1]
    assert second_start.at - first_failure.at >= 200  # the backoff was waited out


async def test_a_lapsed_job_lease_is_taken_over_and_the_late_worker_writes_nothing(store: RunStore) -> None:
    run_id = submit(store, "g", [Job(id="a", prompt="p"), Job(id="b", prompt="p", deps=["a"])])
    first = store.claim_job(run_id, "host:1:first", ttl_ms=0)  # its lease lapses at once
    assert first is not None and (first.job_id, first.state, first.attempts) == ("a", "running", 1)
    taken = store.claim_job(run_id, "host:2:second")
    assert taken is not None and (taken.job_id, taken.attempts, taken.visits) == ("a", 1, 1)  # not charged twice
    assert store.claim_job(run_id, "host:3:third") is None  # b waits for a; a is held
    assert store.renew_job(run_id, "a", "host:1:first") is False
    assert store.settle_job(run_id, "a", "host:1:first", lambda stored: pytest.fail("must not be asked")) is False
    reclaimed = [e for e in store.events(run_id) if e.kind == "job.reclaimed"]
    assert [(e.job_id, e.data["from"], e.data["worker"]) for e in reclaimed] == [("a", "host:1:first", "host:2:second")]
    assert store.renew_job(run_id, "a", "host:2:second") is True

    def by_hand(attempt: Attempt) -> Settlement:
        return Settlement(attempt.run, [replace(attempt.job, state="succeeded", result_text="a:by hand")])

    assert store.settle_job(run_id, "a", "host:2:second", by_hand) is True
    assert store.settle_job(run_id, "a", "host:2:second", by_hand) is False  # settled: the lease is gone
    await Worker(digest_runner, store=store, poll_s=0.01).drain(run_id)
    stored = store.load(run_id)
    assert stored.run.state == "completed" and stored.job("b").result_text == answer("b", ["a:by hand"])


async def test_a_dead_letter_cancels_a_hundred_jobs_downstream_in_one_settle_numbered_in_order(store: RunStore) -> None:
    # More events than one batched insert takes: each batch is numbered after the one before it.
    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        raise JobFailure("broken")

    jobs = [Job(id="root", prompt="p", retry=RetryPolicy(max_attempts=1)),
            *(Job(id=f"c{i:03d}", prompt="p", deps=["root"]) for i in range(100))]
    run_id = submit(store, "g", jobs)
    assert await Worker(runner, store=store, poll_s=0.01).drain(run_id) == 1
    events = store.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    kinds = [e.kind for e in events]
    assert kinds[:5] == ["run.created", "run.started", "job.running", "job.failed", "job.dead_lettered"]
    assert kinds[5:] == ["job.cancelled"] * 100 + ["run.failed"]
    assert [e.job_id for e in events[5:105]] == [f"c{i:03d}" for i in range(100)]
    stored = store.load(run_id)
    assert stored.run.reason == "1 job(s) dead-lettered, 100 cancelled"
    assert {j.state for j in stored.jobs[1:]} == {"cancelled"}


async def test_a_run_over_its_budget_stops(store: RunStore) -> None:
    run_id = submit(store, "g", [Job(id=f"j{i}", prompt="p") for i in range(6)], budget=5)
    await Worker(digest_runner, store=store).drain(run_id)  # 2 tokens a job
    stored = store.load(run_id)
    assert stored.run.state == "failed" and stored.run.reason == "token budget exceeded: spent 6 of 5"
    assert [j.state for j in stored.jobs] == ["succeeded"] * 3 + ["cancelled"] * 3


async def test_workers_and_an_orchestrator_exclude_each_other(store: RunStore) -> None:
    run_id = submit(store, "g", [Job(id="a", prompt="p"), Job(id="b", prompt="p")])
    assert store.claim_job(run_id, "host:1:worker") is not None
    with pytest.raises(OrchestratorError, match="is being executed by host:1:worker"):
        await Orchestrator(digest_runner, store=store).resume(run_id)
    other = submit(store, "g", [Job(id="a", prompt="p")])
    assert store.claim(other, "host:2:orchestrator") is None
    assert store.claim_job(other, "host:1:worker") is None  # the orchestrator's run


async def test_workers_finish_a_run_an_orchestrator_left_half_way(store: RunStore) -> None:
    from harness_loop.runstore import JobRecord, RunRecord

    store.create(RunRecord(id="left", goal="g", state="executing"), [
        JobRecord(run_id="left", job_id="a", position=0, prompt="p", state="succeeded", attempts=1, visits=1,
                  result_text="a:1"),
        JobRecord(run_id="left", job_id="b", position=1, prompt="p", deps=("a",), state="running", attempts=1, visits=1),
        JobRecord(run_id="left", job_id="c", position=2, prompt="p", deps=("a",), state="queued"),
    ])
    await Worker(digest_runner, store=store, poll_s=0.01).drain("left")
    stored = store.load("left")
    assert stored.run.state == "completed"
    assert [(j.job_id, j.state, j.attempts) for j in stored.jobs] == [
        ("a", "succeeded", 1), ("b", "succeeded", 1), ("c", "succeeded", 1)]  # b's cut-short attempt: not charged
    assert stored.job("b").result_text == answer("b", ["a:1"])


def test_an_unknown_run_is_not_found(store: RunStore) -> None:
    from harness_mem.errors import NotFoundError

    with pytest.raises(NotFoundError, match="runs list"):
        store.claim_job("nope", "host:1:w")
    run_id = submit(store, "g", [Job(id="a", prompt="p")])  # the claim rolled back: the store still works
    assert store.claim_job(run_id, "host:1:w") is not None


def test_a_settle_the_database_refuses_writes_nothing_and_the_store_goes_on(store: RunStore) -> None:
    run_id = submit(store, "g", [Job(id="a", prompt="p")])
    assert store.claim_job(run_id, "host:1:w") is not None
    before = store.events(run_id)

    def refused(attempt: Attempt) -> Settlement:  # the runs table's check refuses a negative spend
        return Settlement(replace(attempt.run, spent_tokens=-1),
                          [replace(attempt.job, state="succeeded", result_text="a:1")])

    with pytest.raises(store.tables.integrity_error):
        store.settle_job(run_id, "a", "host:1:w", refused)
    stored = store.load(run_id)
    assert (stored.job("a").state, stored.job("a").result_text, stored.run.spent_tokens) == ("running", None, 0)
    assert store.events(run_id) == before

    def by_hand(attempt: Attempt) -> Settlement:
        return Settlement(attempt.run, [replace(attempt.job, state="succeeded", result_text="a:1")])

    assert store.settle_job(run_id, "a", "host:1:w", by_hand) is True  # the lease was kept
    assert store.load(run_id).job("a").result_text == "a:1"


def test_claims_skip_the_rows_other_workers_are_taking(postgres_target: str) -> None:
    """On PostgreSQL a claim never waits for another's: the row being taken is skipped."""
    with RunStore.open(postgres_target) as first, RunStore.open(postgres_target) as second:
        run_id = submit(first, "g", [Job(id="a", prompt="p"), Job(id="b", prompt="p")])
        second.tables.execute("SET lock_timeout = '5s'")  # a claim that waited would fail, not hang
        with first.tables.transaction():
            taking = first.tables.ready_job(run_id, first.namespace, 2**62, ("completed", "failed", "cancelled"))
            assert taking is not None and taking[1] == "a"  # (run_id, job_id, …): locked until this block ends
            # The row stays locked until this block ends: a claim that waited for it would fail.
            claimed = second.claim_job(run_id, "host:2:second")
            assert claimed is not None and claimed.job_id == "b"


# ---- four real processes on PostgreSQL, one killed -------------------------------------------------


@pytest.mark.slow
def test_four_worker_processes_drain_200_jobs_exactly_once_though_one_is_killed(
    tmp_path: Path, postgres_target: str
) -> None:
    # A lease of 3 s, renewed every second: long enough that a worker slowed down by a busy machine
    # keeps its jobs, short enough that the killed one's job is taken over soon.
    ttl_ms, hang_at = 3000, 12
    jobs = layered(10, 20)
    with RunStore.open(postgres_target) as store:
        run_id = submit(store, "drain 200 jobs", jobs)
        store.tables.execute("CREATE TABLE executions (job_id TEXT NOT NULL, worker INTEGER NOT NULL, pid INTEGER NOT NULL)")
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), postgres_target, run_id, str(tmp_path), str(n), str(ttl_ms),
             *([str(hang_at)] if n == 0 else [])],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for n in range(4)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready-{n}").exists() for n in range(4)):
            assert all(w.poll() is None for w in workers), [w.communicate()[1] for w in workers if w.poll() is not None]
            assert time.monotonic() < deadline, "the workers never got ready"
            time.sleep(0.01)
        (tmp_path / "go").touch()
        while not (tmp_path / "hang-0").exists():
            assert workers[0].poll() is None, workers[0].communicate()[1]
            assert time.monotonic() < deadline, "worker 0 never reached its hanging job"
            time.sleep(0.005)
        hung = (tmp_path / "hang-0").read_text()
        os.kill(workers[0].pid, signal.SIGKILL)
        outputs = [w.communicate(timeout=60) for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()
    assert workers[0].returncode == -signal.SIGKILL
    for w, (_, err) in zip(workers[1:], outputs[1:], strict=True):
        assert w.returncode == 0, err
    settled = [int(out) for out, _ in outputs[1:]]

    with RunStore.open(postgres_target) as store:
        stored = store.load(run_id)
        events = store.events(run_id)
        executions = store.tables.execute("SELECT job_id, worker FROM executions").fetchall()
        succeeded_rows = store.tables.execute("SELECT count(*) FROM jobs WHERE state = 'succeeded'").fetchone()[0]
    assert stored.run.state == "completed" and stored.run.spent_tokens == 2 * len(jobs)
    # Every job was done exactly once: one execution each in the table, one settled result each.
    done = Counter(job_id for job_id, _ in executions)
    assert len(executions) == len(jobs) and set(done) == {job.id for job in jobs} and set(done.values()) == {1}
    assert succeeded_rows == len(jobs)
    assert Counter(e.job_id for e in events if e.kind == "job.succeeded") == Counter({job.id: 1 for job in jobs})
    # Worker 0 settled the jobs it was given before the one it hung in; the three survivors all worked.
    assert Counter(worker for _, worker in executions)[0] == hang_at - 1
    assert sum(settled) == len(jobs) - (hang_at - 1) and all(n > 0 for n in settled)
    assert results(stored) == expected(jobs)
    # The killed worker's job was taken over by another, only once its lease had lapsed, uncharged.
    claims = [e for e in events if e.kind in ("job.running", "job.reclaimed") and e.job_id == hung]
    (hung_at,) = [i for i, e in enumerate(claims) if e.data["worker"].endswith(f":{workers[0].pid}:w0")]
    started, taken = claims[hung_at], claims[hung_at + 1:]
    assert len(taken) == 1 and taken[0].kind == "job.reclaimed" and not taken[0].data["worker"].endswith(":w0")
    assert taken[0].data["from"] == started.data["worker"]
    assert taken[0].at >= started.at + ttl_ms
    assert dict(executions)[hung] != 0
    assert (stored.job(hung).attempts, stored.job(hung).visits) == (1, 1)
