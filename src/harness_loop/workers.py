"""Workers: processes that drain one stored run together, each job run by one of them at a time.

The :class:`~harness_loop.orchestrator.Orchestrator` executes a run in one process, one scheduler
owning every decision. A run of many jobs can instead be drained by workers in any number of
processes (on several machines, with a PostgreSQL store): :func:`submit` stores the run, and each
:class:`Worker` claims the next job that may run (:meth:`RunStore.claim_job
<harness_loop.runstore.RunStore.claim_job>`: ``FOR UPDATE SKIP LOCKED`` on PostgreSQL, so workers
never wait for each other), runs it while it renews the job's lease, and settles the attempt
(:meth:`RunStore.settle_job <harness_loop.runstore.RunStore.settle_job>`), until the run has ended.

What holds, whatever the number of workers:

- A job runs once every job it depends on has succeeded; among ready jobs, insertion order first.
- Each attempt is settled once, in one transaction that first checks the worker still holds the
  job's lease: a worker that stalled past its lease, and whose job another took over, writes
  nothing (it notices at its next renewal and stops the attempt).
- A worker killed mid-job leaves its job ``running`` under a lease nobody renews; once the lease
  lapses (``ttl_ms``) another worker takes the job over. The cut-short attempt is not charged.
- A failed attempt is retried as the job's :class:`~harness_loop.job.RetryPolicy` says, its backoff
  honoured (the job cannot be claimed before); when its attempts are spent the job is
  dead-lettered and everything downstream of it cancelled.
- Tokens are charged when an attempt is settled; the settle that takes the run over its budget
  stops it (every unfinished job cancelled, the run failed).
- The settle that finishes the last job ends the run: completed, or failed with the count of
  dead-lettered and cancelled jobs, as the orchestrator reports it.

Routers, planners and cancelling a run are the orchestrator's: a run drained by workers has none.
While an orchestrator holds a run's lease, workers claim none of its jobs, and while workers hold
job leases, no orchestrator can claim the run.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from functools import partial

import anyio

from harness_mem.models import new_id

from .dag import Dag
from .errors import OrchestratorError
from .job import Job, JobId, JobResult, RetryPolicy, describe_failure, failure_tokens
from .orchestrator import JobRunner, RunnerFunction, as_runner
from .runs import Run, RunBudget, job_from_record
from .runstore import (
    LEASE_MS,
    TERMINAL_JOB_STATES,
    Attempt,
    JobRecord,
    NewEvent,
    RunRecord,
    RunStore,
    Settlement,
    StoredRun,
    lease_owner,
)
from .states import JobState, RunState, label

__all__ = ["POLL_S", "Worker", "submit"]

#: How long a worker with nothing to claim waits before it looks again (seconds); while it keeps
#: finding nothing, twice as long each time, up to ``_MAX_WAITS`` times as long.
POLL_S = 0.05
_MAX_WAITS = 8


def submit(
    store: RunStore,
    goal: str,
    jobs: Iterable[Job] | Dag,
    *,
    budget: RunBudget | int | None = None,
    run_id: str | None = None,
) -> str:
    """Store a run for workers to drain (it starts ``executing``); returns its id.

    Raises :class:`~harness_loop.errors.DagError` for a graph with an unknown dependency or a cycle,
    and stores nothing then. A run of no jobs is stored completed.
    """
    if not isinstance(budget, RunBudget):
        budget = RunBudget(max_tokens=budget)
    dag = Dag()
    for job in jobs:  # copies, waiting to run: the caller's Job objects are never changed
        dag.add(job.model_copy(update={"state": JobState.PENDING, "attempts": 0, "result": None}))
    dag.validate()
    run = Run(id=run_id or new_id(), goal=goal, dag=dag, budget=budget, state=RunState.EXECUTING,
              metadata={"drained_by": "workers"})
    events = [NewEvent("run.created", data={"goal": goal, "jobs": len(dag)}), NewEvent("run.started")]
    if not len(dag):
        run.state = RunState.COMPLETED
        events.append(NewEvent("run.completed", data={"reason": None, "spent_tokens": 0}))
    store.create(run.to_record(), run.job_records(), events)
    return run.id


class Worker:
    """Runs the jobs of stored runs one at a time, alongside any number of workers elsewhere.

    :param runner: a :class:`~harness_loop.orchestrator.JobRunner`, or an async function
        ``(job, upstream) -> JobResult``, as the orchestrator takes.
    :param store: the run store (the database every worker of the run uses).
    :param ttl_ms: how long a job's lease lasts unless renewed; the worker renews it every third
        of that while the job runs. A dead worker's job waits this long before it is taken over.
    :param poll_s: how long to wait, when no job may run now, before looking again.
    :param owner: the name this worker holds leases under (default: host, pid and a token).

    Example::

        run_id = submit(store, "index the archive", jobs)
        # in each of several processes:
        await Worker(runner, store=RunStore.open(url)).drain(run_id)
    """

    def __init__(
        self,
        runner: JobRunner | RunnerFunction,
        *,
        store: RunStore,
        ttl_ms: int = LEASE_MS,
        poll_s: float = POLL_S,
        owner: str | None = None,
    ) -> None:
        self._runner = as_runner(runner)
        self.store = store
        self.ttl_ms = ttl_ms
        self.poll_s = poll_s
        self.owner = owner or lease_owner()

    async def drain(self, run_id: str) -> int:
        """Claim, run and settle the run's jobs until it has ended; returns how many this worker settled.

        Raises :class:`~harness_loop.errors.OrchestratorError` when the run can never end (no job
        may run and none is running: only a run the orchestrator left half-way can be so).
        """
        settled = 0
        wait = self.poll_s
        while True:
            claimed = self.store.claim_job_and_deps(run_id, self.owner, ttl_ms=self.ttl_ms)
            if claimed is None:
                # One row, not the whole run: idle workers poll this while others work.
                if self.store.run(run_id).is_terminal:
                    return settled
                # Whether the run can still end needs every job: asked once idle for a while.
                if wait >= self.poll_s * _MAX_WAITS and not _may_progress(self.store.load(run_id)):
                    raise OrchestratorError(
                        f"run {run_id} cannot progress: no job may run and none is running — resume it with"
                        " the orchestrator"
                    )
                await anyio.sleep(wait)
                wait = min(wait * 2, self.poll_s * _MAX_WAITS)  # nothing to do for a while: look less often
                continue
            wait = self.poll_s
            if await self._attempt(run_id, *claimed):
                settled += 1

    async def _attempt(self, run_id: str, claimed: JobRecord, deps: list[JobRecord]) -> bool:
        """Run one claimed job (its deps as stored) under its lease and settle it; False when the
        lease was lost."""
        upstream = _upstream(deps)
        result: JobResult | None = None
        error: Exception | None = None
        lost = False

        async def keep_lease() -> None:
            nonlocal lost
            while True:
                await anyio.sleep(self.ttl_ms / 3000)
                with contextlib.suppress(Exception):  # the store is unreachable: the settle will say so
                    if not self.store.renew_job(run_id, claimed.job_id, self.owner, ttl_ms=self.ttl_ms):
                        lost = True  # another worker took the job over: stop, write nothing
                        tg.cancel_scope.cancel()
                        return

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_lease)
            try:
                result = await self._runner.run(job_from_record(claimed), upstream)
                if not isinstance(result, JobResult):
                    raise TypeError(f"the job runner returned {type(result).__name__}, not a JobResult")
            except Exception as exc:
                error = exc
            tg.cancel_scope.cancel()
        if lost:
            return False
        decide = partial(_settle, result=result, error=error)
        return self.store.settle_job(run_id, claimed.job_id, self.owner, decide)


def _upstream(deps: Iterable[JobRecord]) -> dict[JobId, JobResult]:
    """The stored results of a job's deps (a job is claimed only once every dep has succeeded)."""
    found: dict[JobId, JobResult] = {}
    for record in deps:
        assert record.result_text is not None
        found[record.job_id] = JobResult(text=record.result_text, input_tokens=record.input_tokens,
                                         output_tokens=record.output_tokens)
    return found


_WAITING = frozenset({JobState.PENDING.value, JobState.QUEUED.value, JobState.RETRYING.value})


def _may_progress(stored: StoredRun) -> bool:
    """True while some job runs, or waits and may run once its deps (running or waiting) have succeeded."""
    states = {job.job_id: job.state for job in stored.jobs}
    alive = _WAITING | {JobState.RUNNING.value, JobState.SUCCEEDED.value}
    return any(
        job.state == JobState.RUNNING.value
        or (job.state in _WAITING and all(states.get(dep) in alive for dep in job.deps))
        for job in stored.jobs
    )


def _settle(attempt: Attempt, *, result: JobResult | None, error: Exception | None) -> Settlement:
    """What the attempt leads to, from the run as it is stored now (see the module's rules).

    Most settles need the run, the job and how many other jobs are unfinished; the whole run is
    read only to cascade a dead letter, to stop the run over its budget or to count how it ended.
    """
    run, job = attempt.run, attempt.job
    changed: dict[JobId, JobRecord] = {}
    events: list[NewEvent] = []
    retry_at: int | None = None
    tokens = result.total_tokens if result is not None else failure_tokens(error)
    run = replace(run, spent_tokens=run.spent_tokens + tokens)
    spent = job.spent_tokens + tokens
    if result is not None:
        job = replace(job, state=JobState.SUCCEEDED.value, result_text=result.text, input_tokens=result.input_tokens,
                      output_tokens=result.output_tokens, spent_tokens=spent, last_error=None)
        events.append(NewEvent("job.succeeded", job.job_id, {"attempt": job.attempts, "tokens": tokens}))
    else:
        message = describe_failure(error)
        events.append(NewEvent("job.failed", job.job_id, {"attempt": job.attempts, "error": message}))
        retry = RetryPolicy.from_dict(job.retry)
        if job.attempts < retry.max_attempts:
            delay = retry.backoff.delay(job.attempts)
            job = replace(job, state=JobState.RETRYING.value, spent_tokens=spent, last_error=message)
            retry_at = attempt.now + round(delay * 1000)
            events.append(NewEvent("job.retrying", job.job_id, {"next_attempt": job.attempts + 1, "delay_s": delay}))
        else:
            job = replace(job, state=JobState.DEAD_LETTERED.value, spent_tokens=spent, last_error=message)
            events.append(NewEvent("job.dead_lettered", job.job_id, {"error": message}))
    changed[job.job_id] = job
    stored: StoredRun | None = None

    def everything() -> dict[JobId, JobRecord]:
        nonlocal stored
        stored = stored or attempt.load()
        return {j.job_id: changed.get(j.job_id, j) for j in stored.jobs}

    def cancel(target: JobRecord, reason: str) -> None:
        changed[target.job_id] = replace(target, state=JobState.CANCELLED.value, last_error=reason)
        events.append(NewEvent("job.cancelled", target.job_id, {"reason": reason}))

    if job.state == JobState.DEAD_LETTERED.value:
        jobs = everything()
        dependents: dict[JobId, list[JobId]] = {}
        for other in jobs.values():
            for dep in dict.fromkeys(other.deps):
                dependents.setdefault(dep, []).append(other.job_id)
        todo = [job.job_id]
        while todo:  # everything downstream, each with the dependency that stopped it
            parent_id = todo.pop()
            parent = changed.get(parent_id) or jobs[parent_id]
            for child_id in dependents.get(parent.job_id, ()):
                child = changed.get(child_id) or jobs[child_id]
                if child.state not in TERMINAL_JOB_STATES:
                    cancel(child, f"dependency `{parent.job_id}` {label(parent.state)}")
                    todo.append(child_id)
    if RunBudget(max_tokens=run.max_tokens).exceeded(run.spent_tokens):
        for other in everything().values():
            if other.state not in TERMINAL_JOB_STATES:
                cancel(other, "run token budget exceeded")
        run = _finish(run, RunState.FAILED, f"token budget exceeded: spent {run.spent_tokens} of {run.max_tokens}",
                      events)
    elif attempt.unfinished == 0 or stored is not None:
        ends = Counter(j.state for j in everything().values())
        if sum(n for state, n in ends.items() if state not in TERMINAL_JOB_STATES) == 0:
            dead, cancelled = ends[JobState.DEAD_LETTERED.value], ends[JobState.CANCELLED.value]
            if dead or cancelled:
                run = _finish(run, RunState.FAILED, f"{dead} job(s) dead-lettered, {cancelled} cancelled", events)
            else:
                run = _finish(run, RunState.COMPLETED, None, events)
    return Settlement(run, list(changed.values()), events, retry_at)


def _finish(run: RunRecord, state: RunState, reason: str | None, events: list[NewEvent]) -> RunRecord:
    events.append(NewEvent(f"run.{state.value}", data={"reason": reason, "spent_tokens": run.spent_tokens}))
    return replace(run, state=state.value, reason=reason)
