"""The DAG orchestrator: fan one goal across dependent jobs, durably, on anyio.

One scheduler coroutine owns every decision; jobs run as tasks that only report back through a
stream. Each decision is one *transition*: the scheduler changes its in-memory jobs, commits the
run row, the changed job rows and their events in one transaction (:meth:`RunStore.save`), and only
then acts — starts tasks, cancels them, arms backoff timers. So after ``kill -9`` the file holds a
state the scheduler had committed to, and :meth:`Orchestrator.resume` continues from it: jobs caught
``running``, ``queued`` or ``retrying`` go back to ``pending``; finished jobs never run again.

Rules the scheduler keeps, each closing a way a DAG scheduler can go wrong:

- Launch order is deterministic: among ready jobs, insertion order, so two runs of one graph agree.
- A job waiting out its backoff is ``retrying`` and holds no concurrency slot.
- Attempts survive a resume. An attempt cut short by the crash is undone (it never finished, so it
  is charged neither as an attempt nor as a visit); failed attempts stay charged.
- ``visits`` counts every entry, the first included, so ``max_visits=3`` means at most 3 runs.
- A visit-cap breach dead-letters the loop — the target and the job whose router asked — and
  cancels everything downstream of it, so a final step such as ``publish`` never runs on the output
  of a loop that did not converge.
- Goto targets are checked at run time (and up front when a route declares ``targets``); an
  unknown target dead-letters the routing job instead of crashing the run.
- Replanned jobs are validated: no reused id, no unknown dependency, no cycle.
- Failed attempts that report usage (:class:`JobFailure`) count against the budget.
- Cancel API: :meth:`Orchestrator.cancel`.
- A Goto that re-enters a job while it is running lets it finish, then sends it round again
  instead of keeping a result computed from stale upstream results.

``run()`` reports failures in the :class:`RunReport` rather than raising; it raises only when a
graph cannot even be stored (duplicate job ids, an existing run id) or the store itself fails — in
the latter case the file still holds the last committed state, ready for :meth:`resume`.
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from heapq import heappop, heappush
from typing import Any, Protocol, runtime_checkable

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from harness_mem.errors import InvalidInputError
from harness_mem.models import new_id

from .dag import Dag
from .errors import DagError, OrchestratorError
from .job import Job, JobId, JobResult, describe_failure, failure_tokens
from .planner import Planner
from .route import Continue, Goto, Next, Router, Stop
from .runs import Run, RunBudget, RunReport, job_to_record
from .runstore import LEASE_MS, InMemoryRunStore, NewEvent, RunStoreLike, lease_owner
from .states import JobState, RunState

DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_VISITS = 5
DEFAULT_MAX_REPLANS = 8

# States a crash (or a fresh run) may leave a job in that mean "not finished, not started".
_IN_FLIGHT = (JobState.RUNNING, JobState.QUEUED, JobState.RETRYING, JobState.FAILED)


@runtime_checkable
class JobRunner(Protocol):
    """Executes one attempt of a job; raise to fail it. ``upstream`` maps each dep to its result.

    ``job_prompt(job, upstream)`` builds the text to hand a job's sub-agent: feedback and
    prior attempt first (after a ``Goto``), then the upstream results, then the job's prompt.
    """

    async def run(self, job: Job, upstream: Mapping[JobId, JobResult]) -> JobResult: ...


RunnerFunction = Callable[[Job, Mapping[JobId, JobResult]], Awaitable[JobResult]]


class _FunctionRunner:
    def __init__(self, fn: RunnerFunction) -> None:
        self._fn = fn

    async def run(self, job: Job, upstream: Mapping[JobId, JobResult]) -> JobResult:
        return await self._fn(job, upstream)


def as_runner(runner: JobRunner | RunnerFunction) -> JobRunner:
    """``runner`` as a :class:`JobRunner` (an async function is wrapped in one)."""
    return runner if isinstance(runner, JobRunner) else _FunctionRunner(runner)


@dataclass(frozen=True)
class _Route:
    router: Router
    targets: frozenset[JobId] | None


class Orchestrator:
    """Runs DAGs of jobs with a concurrency limit, retries, routers, replanning and a token budget.

    :param runner: a :class:`JobRunner`, or an async function ``(job, upstream) -> JobResult``.
    :param store: where runs live; a :class:`harness_loop.runstore.RunStore` makes them survive a crash.
        Defaults to an in-memory store.
    :param planner: asked for more jobs whenever the run goes idle (at most ``max_replans`` times).
    :param concurrency: jobs running at once (a job waiting out its backoff does not count).
    :param max_visits: how many times one job may be entered, its first run included; a ``Goto``
        that would exceed it dead-letters the loop.
    :param max_replans: how many times per run the planner may be asked.

    Example::

        orch = Orchestrator(runner, store=RunStore.open("agent.db")).route("review", review)
        report = await orch.run("write the release notes", [draft, review, publish], budget=50_000)
        print(report.render())
    """

    def __init__(
        self,
        runner: JobRunner | RunnerFunction,
        *,
        store: RunStoreLike | None = None,
        planner: Planner | None = None,
        concurrency: int = DEFAULT_CONCURRENCY,
        max_visits: int = DEFAULT_MAX_VISITS,
        max_replans: int = DEFAULT_MAX_REPLANS,
    ) -> None:
        if concurrency < 1:
            raise InvalidInputError(f"concurrency must be at least 1, not {concurrency}")
        if max_visits < 1:
            raise InvalidInputError(f"max_visits must be at least 1, not {max_visits}")
        if max_replans < 0:
            raise InvalidInputError(f"max_replans must not be negative, not {max_replans}")
        self._runner: JobRunner = as_runner(runner)
        self._store: RunStoreLike = store if store is not None else InMemoryRunStore()
        self._owner = lease_owner()  # the name this orchestrator holds run leases under
        self._planner = planner
        self.concurrency = concurrency
        self.max_visits = max_visits
        self.max_replans = max_replans
        self._routes: dict[JobId, _Route] = {}
        self._active: dict[str, _Execution] = {}

    @property
    def store(self) -> RunStoreLike:
        return self._store

    @property
    def active_runs(self) -> list[str]:
        """Ids of the runs this orchestrator is executing right now."""
        return list(self._active)

    def route(self, job_id: JobId, router: Router, *, targets: Iterable[JobId] | None = None) -> Orchestrator:
        """Attach ``router`` to ``job_id``: it decides :class:`Next` each time that job succeeds.

        ``targets`` (optional) lists the jobs its ``Goto`` may name; they are then checked before
        anything runs, and a Goto elsewhere dead-letters the job. Routers live in code and are not
        stored: a resuming orchestrator must attach the same ones.
        """
        self._routes[job_id] = _Route(router, None if targets is None else frozenset(targets))
        return self

    # -- running

    async def run(
        self,
        goal: str,
        jobs: Iterable[Job] | Dag = (),
        *,
        budget: RunBudget | int | None = None,
        run_id: str | None = None,
    ) -> RunReport:
        """Run ``jobs`` towards ``goal`` until every job has finished, the run stops, or it is cancelled.

        A graph with an unknown dependency, an unknown route or a cycle is stored as a failed run in
        which nothing ran; every job carries the reason.
        """
        if not isinstance(budget, RunBudget):
            budget = RunBudget(max_tokens=budget)
        source = list(jobs)
        dag = Dag()
        for job in source:  # copies: the caller's Job objects are never mutated
            copy = job.model_copy()
            if copy.state in _IN_FLIGHT:
                copy.state = JobState.PENDING
            dag.add(copy)
        run = Run(
            id=run_id or new_id(), goal=goal, dag=dag, budget=budget,
            metadata={"concurrency": self.concurrency, "max_visits": self.max_visits,
                      "max_replans": self.max_replans},
        )
        try:
            dag.validate(self._routes, {k: r.targets for k, r in self._routes.items() if r.targets})
        except DagError as exc:
            reason = str(exc)
            run.state, run.reason = RunState.FAILED, reason
            for job in dag:
                job.last_error = reason
            self._store.create(
                run.to_record(), run.job_records(),
                [NewEvent("run.created", data={"goal": goal, "jobs": len(dag)}),
                 NewEvent("run.failed", data={"reason": reason})],
            )
            return RunReport.from_run(run)
        self._store.create(
            run.to_record(), run.job_records(), [NewEvent("run.created", data={"goal": goal, "jobs": len(dag)})]
        )
        self._claim(run.id)
        await _Execution(self, run).drive(resumed=None)
        return RunReport.from_run(run)

    async def resume(self, run_id: str) -> RunReport:
        """Continue a stored run: in-flight jobs go back to pending, finished jobs keep their results.

        A run that already ended is returned as it is. Raises NotFoundError for an unknown id, and
        OrchestratorError while another orchestrator (here or in another process) executes the run.
        """
        if run_id in self._active:
            raise OrchestratorError(f"run {run_id} is already executing in this orchestrator")
        self._claim(run_id)
        try:
            run = Run.from_stored(self._store.load(run_id))
            if not run.state.is_terminal():
                run.dag.validate(self._routes, {k: r.targets for k, r in self._routes.items() if r.targets})
        except BaseException:
            self._store.release(run_id, self._owner)
            raise
        if run.state.is_terminal():
            self._store.release(run_id, self._owner)
            return RunReport.from_run(run)
        resumed: list[Job] = []
        for job in run.dag:
            if job.state not in _IN_FLIGHT:
                continue
            if job.state is JobState.RUNNING:
                # The interrupted attempt never finished: undo its charge (and its visit if it was
                # the entry's first attempt, since relaunching will count that visit again).
                job.attempts = max(job.attempts - 1, 0)
                if job.attempts == 0:
                    job.visits = max(job.visits - 1, 0)
            resumed.append(job)
        await _Execution(self, run).drive(resumed=resumed)
        return RunReport.from_run(run)

    def _claim(self, run_id: str) -> None:
        holder = self._store.claim(run_id, self._owner)
        if holder is not None:
            raise OrchestratorError(
                f"run {run_id} is being executed by {holder} — wait for it to stop (a crashed one's"
                f" lease lapses within {LEASE_MS // 1000} s), or cancel it there"
            )

    def cancel(self, run_id: str | None = None, *, reason: str = "cancelled by caller") -> bool:
        """Cancel ``run_id`` (or every run this orchestrator is executing); True if anything changed.

        A run executing here stops at once: running jobs are interrupted and every unfinished job
        is cancelled. A stored run that is not executing here (say, one a crash left behind) is
        marked cancelled so that :meth:`resume` will not start it. Call from the event loop that runs
        the orchestrator.
        """
        if run_id is None:
            for execution in list(self._active.values()):
                execution.request_cancel(reason)
            return bool(self._active)
        live = self._active.get(run_id)
        if live is not None:
            live.request_cancel(reason)
            return True
        self._claim(run_id)  # not while another process executes it: cancel it there
        try:
            run = Run.from_stored(self._store.load(run_id))
            if run.state.is_terminal():
                return False
            self._cancel_stored(run, reason)
        finally:
            self._store.release(run_id, self._owner)
        return True

    def _cancel_stored(self, run: Run, reason: str) -> None:
        events = []
        for job in run.dag:
            if not job.state.is_terminal():
                job.state, job.last_error = JobState.CANCELLED, reason
                events.append(NewEvent("job.cancelled", job.id, {"reason": reason}))
        run.state, run.reason = RunState.CANCELLED, reason
        events.append(NewEvent("run.cancelled", data={"reason": reason}))
        self._store.save(run.to_record(), run.job_records(), events)

    def report(self, run_id: str) -> RunReport:
        """The stored run as a report (NotFoundError for an unknown id)."""
        return RunReport.from_run(Run.from_stored(self._store.load(run_id)))


# ---- one execution of one run ------------------------------------------------------------------


@dataclass(frozen=True)
class _Finished:
    job_id: JobId
    epoch: int
    result: JobResult | None
    error: Exception | None


@dataclass(frozen=True)
class _Wake:
    job_id: JobId
    epoch: int


_Message = _Finished | _Wake | None  # None: just look at the flags again (a cancel request)


@dataclass
class _Tx:
    """One transition: the jobs it changed, its events, and what to do once it is committed."""

    jobs: dict[JobId, Job] = field(default_factory=dict)
    events: list[NewEvent] = field(default_factory=list)
    actions: list[Callable[[], None]] = field(default_factory=list)

    def touch(self, job: Job) -> None:
        self.jobs[job.id] = job

    def event(self, kind: str, job_id: JobId | None = None, **data: Any) -> None:
        self.events.append(NewEvent(kind, job_id, data))

    def then(self, action: Callable[[], None]) -> None:
        self.actions.append(action)


class _Execution:
    """The scheduler for one run in one process: owns the run's state while it executes."""

    def __init__(self, orchestrator: Orchestrator, run: Run) -> None:
        self.o = orchestrator
        self.run = run
        self.dag = run.dag
        self.store = orchestrator._store
        self.running: dict[JobId, anyio.CancelScope] = {}
        self.sleepers: dict[JobId, anyio.CancelScope] = {}
        self.epoch: dict[JobId, int] = {}  # bumped per launch; tells stale reports from live ones
        self.backoff_done: set[JobId] = set()
        self.queue: list[tuple[int, JobId]] = []  # heap of queued jobs by insertion position
        self.fresh: list[JobId] = []  # became eligible since the last launch pass
        self.stale: dict[JobId, str | None] = {}  # running jobs re-entered under them -> feedback
        self.finished = False
        self.planner_done = False
        self.cancel_reason: str | None = None
        self.lease_holder: str | None = None  # set if another process took the run's lease
        self.send: MemoryObjectSendStream[_Message]
        self.recv: MemoryObjectReceiveStream[_Message]
        self.send, self.recv = anyio.create_memory_object_stream[_Message](math.inf)
        self.tg: TaskGroup | None = None

    # -- driving

    async def drive(self, resumed: list[Job] | None) -> None:
        """Execute until the run finishes; ``resumed`` lists the in-flight jobs a resume puts back."""
        self.o._active[self.run.id] = self
        error: Exception | None = None
        try:
            async with anyio.create_task_group() as tg:
                self.tg = tg
                tg.start_soon(self.keep_lease)
                try:
                    self.begin(resumed)
                    await self.loop()
                except Exception as exc:  # a store failure: stop acting, keep the last commit
                    error = exc
                finally:
                    tg.cancel_scope.cancel()
        finally:
            del self.o._active[self.run.id]
            self.send.close()
            self.recv.close()
            if self.lease_holder is None:
                # After a store error this may fail too; the lease then lapses on its own.
                with contextlib.suppress(Exception):
                    self.store.release(self.run.id, self.o._owner)
        if error is not None:
            raise error

    def begin(self, resumed: list[Job] | None) -> None:
        tx = _Tx()
        for job in resumed or ():
            tx.event("job.reset", job.id, previous=job.state.value, attempts=job.attempts)
            job.state = JobState.PENDING
            tx.touch(job)
        self.run.state = RunState.EXECUTING
        if resumed is None:
            tx.event("run.started")
        else:
            tx.event("run.resumed", reset=[job.id for job in resumed])
        self.commit(tx)
        self.consider(self.dag.ids())

    async def keep_lease(self) -> None:
        """Renew the run's lease while it executes; if another process took it, stop acting."""
        while True:
            await anyio.sleep(LEASE_MS / 3000)
            holder = self.store.claim(self.run.id, self.o._owner)
            if holder is not None:  # this process stalled past the lease, and another resumed the run
                self.lease_holder = holder
                self.send.send_nowait(None)
                return

    async def loop(self) -> None:
        while not self.finished:
            if self.lease_holder is not None:
                raise OrchestratorError(f"run {self.run.id} was taken over by {self.lease_holder}; stopped here")
            if self.cancel_reason is not None:
                self.cancel_run(self.cancel_reason)
                break
            self.launch()
            if not (self.running or self.sleepers or self.queue or self.fresh):
                await self.on_idle()
                continue
            message = await self.recv.receive()
            if isinstance(message, _Finished):
                self.on_finished(message)
            elif isinstance(message, _Wake):
                self.on_wake(message)

    def request_cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
            self.send.send_nowait(None)

    def commit(self, tx: _Tx) -> None:
        """Persist the transition, then act on it: nothing is started or stopped before the commit."""
        run = self.run
        records = [job_to_record(job, run.id, self.dag.position(job.id)) for job in tx.jobs.values()]
        self.store.save(run.to_record(), records, tx.events)
        for action in tx.actions:
            action()

    def consider(self, ids: Iterable[JobId]) -> None:
        """Queue for launch each of ``ids`` that is pending with every dependency succeeded."""
        for job_id in ids:
            job = self.dag[job_id]
            if job.state is JobState.PENDING and self.dag.deps_satisfied(job_id):
                self.fresh.append(job_id)

    # -- launching

    def launch(self) -> None:
        capacity = self.o.concurrency - len(self.running)
        if not self.fresh and (capacity <= 0 or not self.queue):
            return
        dag = self.dag
        fresh = sorted(
            (
                j for j in dict.fromkeys(self.fresh)
                if j not in self.running and (
                    (dag[j].state is JobState.PENDING and dag.deps_satisfied(j))
                    or (dag[j].state is JobState.RETRYING and j in self.backoff_done)
                )
            ),
            key=dag.position,
        )
        self.fresh.clear()
        start: list[JobId] = []
        chosen: set[JobId] = set()
        i = 0
        while capacity > 0:
            while self.queue and (
                dag[self.queue[0][1]].state is not JobState.QUEUED or self.queue[0][1] in chosen
            ):
                heappop(self.queue)  # stale: re-entered, cancelled or already chosen
            head = self.queue[0] if self.queue else None
            if i < len(fresh) and (head is None or dag.position(fresh[i]) < head[0]):
                pick = fresh[i]
                i += 1
            elif head is not None:
                pick = heappop(self.queue)[1]
            else:
                break
            start.append(pick)
            chosen.add(pick)
            capacity -= 1
        wait = fresh[i:]
        if not start and not wait:
            return
        tx = _Tx()
        for job_id in start:
            job = dag[job_id]
            job.state = JobState.RUNNING
            job.attempts += 1
            if job.attempts == 1:
                job.visits += 1  # a new entry begins with its first attempt
            self.backoff_done.discard(job_id)
            tx.touch(job)
            tx.event("job.running", job_id, attempt=job.attempts, visit=job.visits)
            tx.then(partial(self.start, job_id))
        for job_id in wait:
            job = dag[job_id]
            job.state = JobState.QUEUED
            self.backoff_done.discard(job_id)
            tx.touch(job)
            tx.event("job.queued", job_id)
            heappush(self.queue, (dag.position(job_id), job_id))
        self.commit(tx)

    def start(self, job_id: JobId) -> None:
        assert self.tg is not None
        job = self.dag[job_id]
        epoch = self.epoch[job_id] = self.epoch.get(job_id, 0) + 1
        upstream: dict[JobId, JobResult] = {}
        for dep in job.deps:
            result = self.dag[dep].result
            assert result is not None  # launched only once every dep has succeeded
            upstream[dep] = result
        scope = anyio.CancelScope()
        self.running[job_id] = scope
        # A shallow copy is a full snapshot (deps is a tuple, retry and result are frozen): the runner
        # cannot reach the scheduler's job.
        self.tg.start_soon(self.execute, job_id, epoch, copy.copy(job), upstream, scope, name=f"job {job_id}")

    async def execute(
        self, job_id: JobId, epoch: int, job: Job, upstream: dict[JobId, JobResult], scope: anyio.CancelScope
    ) -> None:
        with scope:
            try:
                result = await self.o._runner.run(job, upstream)
                if not isinstance(result, JobResult):
                    raise TypeError(f"the job runner returned {type(result).__name__}, not a JobResult")
                report = _Finished(job_id, epoch, result, None)
            except Exception as exc:
                report = _Finished(job_id, epoch, None, exc)
            self.send.send_nowait(report)

    async def sleep_then_wake(self, job_id: JobId, epoch: int, delay: float, scope: anyio.CancelScope) -> None:
        with scope:
            await anyio.sleep(delay)
            self.send.send_nowait(_Wake(job_id, epoch))

    def arm_retry(self, job_id: JobId, delay: float) -> None:
        if delay <= 0:
            self.backoff_done.add(job_id)
            self.fresh.append(job_id)
            return
        assert self.tg is not None
        scope = anyio.CancelScope()
        self.sleepers[job_id] = scope
        self.tg.start_soon(self.sleep_then_wake, job_id, self.epoch[job_id], delay, scope)

    # -- reports from tasks

    def on_wake(self, message: _Wake) -> None:
        job_id = message.job_id
        if self.epoch.get(job_id) != message.epoch or job_id not in self.sleepers:
            return
        del self.sleepers[job_id]
        if self.dag[job_id].state is JobState.RETRYING:
            self.backoff_done.add(job_id)
            self.fresh.append(job_id)

    def on_finished(self, message: _Finished) -> None:
        job_id = message.job_id
        if self.epoch.get(job_id) != message.epoch or job_id not in self.running:
            return  # a task that was cancelled after it had already reported
        del self.running[job_id]
        job = self.dag[job_id]
        if job_id in self.stale:
            self.on_stale(job, message)
        elif message.error is None:
            assert message.result is not None
            self.on_success(job, message.result)
        else:
            self.on_failure(job, message.error, _Tx())

    def charge(self, job: Job, tokens: int) -> None:
        job.spent_tokens += tokens
        self.run.spent_tokens += tokens

    def on_success(self, job: Job, result: JobResult) -> None:
        tx = _Tx()
        self.charge(job, result.total_tokens)
        tx.event("job.succeeded", job.id, attempt=job.attempts, tokens=result.total_tokens)
        if self.run.budget.exceeded(self.run.spent_tokens):
            self.succeed(job, result, tx)  # it finished; the run stops here, the router is not asked
            self.over_budget(tx)
            self.commit(tx)
            return
        route = self.o._routes.get(job.id)
        decision: Next = Continue()
        if route is not None:
            try:
                decision = route.router(result)
                if not isinstance(decision, Next):
                    raise TypeError(f"returned {decision!r}, not Next.Continue/Goto/Stop")
            except Exception as exc:
                tx.events.pop()  # it did not succeed after all: the router refused its result
                self.on_failure(job, exc, tx, context=f"the router of `{job.id}` failed", charged=True)
                return
        if isinstance(decision, Stop):
            self.succeed(job, result, tx)
            tx.event("job.routed", job.id, next="stop")
            self.stop_all(tx, f"run stopped by the router of `{job.id}`")
            self.finish(tx, RunState.COMPLETED, None)
        elif isinstance(decision, Goto):
            self.on_goto(job, result, decision, route, tx)
        else:
            self.succeed(job, result, tx)
        self.commit(tx)
        self.consider(self.dag.dependents(job.id))

    def succeed(self, job: Job, result: JobResult, tx: _Tx) -> None:
        job.state, job.result, job.last_error = JobState.SUCCEEDED, result, None
        tx.touch(job)

    def on_goto(self, job: Job, result: JobResult, goto: Goto, route: _Route | None, tx: _Tx) -> None:
        target = goto.job
        tx.event("job.routed", job.id, next="goto", target=target, feedback=goto.feedback)
        allowed = route is None or route.targets is None or target in route.targets
        if target not in self.dag or not allowed:
            job.result = result
            self.dead_letter(job, f"the router of `{job.id}` sent the run to unknown job `{target}`", tx)
            return
        affected = self.dag.downstream_of(target)
        over = next((self.dag[a] for a in affected if self.dag[a].visits >= self.o.max_visits), None)
        if over is not None:
            # The loop is not converging: dead-letter it (its target and the job that keeps sending
            # the run back) and stop everything downstream, so nothing publishes an unreviewed draft.
            error = (
                f"`{over.id}` has been entered {over.visits} times (max_visits {self.o.max_visits});"
                " the loop is not converging"
            )
            job.result = result
            self.dead_letter(job, error, tx)
            target_job = self.dag[target]
            if target_job is not job:
                self.cancel_task(target_job)
                self.dead_letter(target_job, error, tx)
            reason = f"the loop through `{target}` was dead-lettered"
            for other in dict.fromkeys(affected + self.dag.downstream_of(job.id)):
                self.cancel_job(self.dag[other], reason, tx)
            return
        self.succeed(job, result, tx)
        self.reenter(target, goto.feedback, affected, tx)

    def reenter(self, target: JobId, feedback: str | None, affected: list[JobId], tx: _Tx) -> None:
        """Send the graph back through ``target``: it and everything downstream run again."""
        for job_id in affected:
            job = self.dag[job_id]
            fb = feedback if job_id == target else None
            if job.state is JobState.RUNNING:
                self.stale[job_id] = fb  # let it finish, then send it round again
                continue
            if job.state is JobState.PENDING and job.attempts == 0:
                if job_id == target:
                    job.feedback = fb
                    tx.touch(job)
                continue
            self.cancel_task(job)
            if job.result is not None:
                job.prior_attempt = job.result.text
            job.state, job.result, job.attempts, job.last_error, job.feedback = (
                JobState.PENDING, None, 0, None, fb,
            )
            tx.touch(job)
            tx.event("job.reentered", job_id, visits=job.visits, feedback=fb)
        tx.then(lambda: self.consider(affected))

    def on_stale(self, job: Job, message: _Finished) -> None:
        """A job re-entered while it ran has finished: keep its answer as the prior attempt, go again."""
        tx = _Tx()
        feedback = self.stale.pop(job.id)
        if message.result is not None:
            self.charge(job, message.result.total_tokens)
            job.prior_attempt = message.result.text
        else:
            self.charge(job, failure_tokens(message.error))
        job.state, job.result, job.attempts, job.last_error, job.feedback = (
            JobState.PENDING, None, 0, None, feedback,
        )
        tx.touch(job)
        tx.event("job.reentered", job.id, visits=job.visits, feedback=feedback, discarded=True)
        self.over_budget(tx)
        self.commit(tx)
        self.consider([job.id])

    def on_failure(
        self, job: Job, error: Exception | None, tx: _Tx, *, context: str | None = None, charged: bool = False
    ) -> None:
        if not charged:
            self.charge(job, failure_tokens(error))
        message = describe_failure(error)
        if context:
            message = f"{context}: {message}"
        job.last_error = message
        tx.touch(job)
        tx.event("job.failed", job.id, attempt=job.attempts, error=message)
        if job.attempts < job.retry.max_attempts:
            delay = job.retry.backoff.delay(job.attempts)
            job.state = JobState.RETRYING
            tx.event("job.retrying", job.id, next_attempt=job.attempts + 1, delay_s=delay)
            tx.then(lambda: self.arm_retry(job.id, delay) if job.state is JobState.RETRYING else None)
        else:
            self.dead_letter(job, message, tx)
        self.over_budget(tx)
        self.commit(tx)

    # -- stopping things

    def dead_letter(self, job: Job, error: str, tx: _Tx) -> None:
        """Give up on ``job`` and cancel everything that depended on it, with the reason."""
        job.state, job.last_error = JobState.DEAD_LETTERED, error
        tx.touch(job)
        tx.event("job.dead_lettered", job.id, error=error)
        self.cascade(job.id, tx)

    def cascade(self, root: JobId, tx: _Tx) -> None:
        todo = [root]
        while todo:
            parent = self.dag[todo.pop()]
            for child_id in self.dag.dependents(parent.id):
                child = self.dag[child_id]
                if not child.state.is_terminal():
                    self.cancel_job(child, f"dependency `{parent.id}` {parent.state.label()}", tx)
                    todo.append(child_id)

    def cancel_job(self, job: Job, reason: str, tx: _Tx) -> None:
        if job.state.is_terminal():
            return
        self.cancel_task(job)
        job.state, job.last_error = JobState.CANCELLED, reason
        tx.touch(job)
        tx.event("job.cancelled", job.id, reason=reason)

    def cancel_task(self, job: Job) -> None:
        """Forget ``job``'s task or backoff timer (the scopes are cancelled once the tx commits)."""
        scope = self.running.pop(job.id, None) or self.sleepers.pop(job.id, None)
        self.stale.pop(job.id, None)
        self.backoff_done.discard(job.id)
        if scope is not None:
            scope.cancel()  # the commit follows in the same synchronous step; the task only dies at its next await

    def stop_all(self, tx: _Tx, reason: str) -> None:
        for job in self.dag:
            self.cancel_job(job, reason, tx)

    def over_budget(self, tx: _Tx) -> bool:
        run = self.run
        if self.finished or not run.budget.exceeded(run.spent_tokens):
            return False
        self.stop_all(tx, "run token budget exceeded")
        self.finish(
            tx, RunState.FAILED, f"token budget exceeded: spent {run.spent_tokens} of {run.budget.max_tokens}"
        )
        return True

    def finish(self, tx: _Tx, state: RunState, reason: str | None) -> None:
        self.run.state, self.run.reason = state, reason
        tx.event(f"run.{state.value}", reason=reason, spent_tokens=self.run.spent_tokens)
        self.finished = True

    def cancel_run(self, reason: str) -> None:
        tx = _Tx()
        self.stop_all(tx, reason)
        self.finish(tx, RunState.CANCELLED, reason)
        self.commit(tx)

    # -- idle: cascade, replan, or finish

    async def on_idle(self) -> None:
        tx = _Tx()
        for job in self.dag:
            if job.state is JobState.PENDING:
                blocked = self.dag.blocking_dep(job.id)
                if blocked is not None:
                    self.cancel_job(job, f"dependency `{blocked[0]}` {blocked[1]}", tx)
                    self.cascade(job.id, tx)
        if tx.jobs:
            self.commit(tx)
            return
        self.consider(self.dag.ids())
        if self.fresh:
            return
        planner = self.o._planner
        if planner is not None and not self.planner_done and self.run.replans < self.o.max_replans:
            await self.replan(planner)
            return
        # Everything has finished. Anything still unfinished here could never run: say so.
        self.stop_all(tx, "never became runnable")
        dead = sum(job.state is JobState.DEAD_LETTERED for job in self.dag)
        cancelled = sum(job.state is JobState.CANCELLED for job in self.dag)
        if dead or cancelled:
            self.finish(tx, RunState.FAILED, f"{dead} job(s) dead-lettered, {cancelled} cancelled")
        else:
            self.finish(tx, RunState.COMPLETED, None)
        self.commit(tx)

    async def replan(self, planner: Planner) -> None:
        run = self.run
        run.state = RunState.PLANNING
        run.replans += 1
        tx = _Tx()
        tx.event("run.planning", replan=run.replans)
        self.commit(tx)
        succeeded = {job.id: job.result for job in self.dag if job.result is not None and
                     job.state is JobState.SUCCEEDED}
        tx = _Tx()
        try:
            proposed = [job.model_copy() for job in await planner.plan(run.goal, succeeded) or ()]
            for job in proposed:
                job.state, job.attempts, job.visits, job.result = JobState.PENDING, 0, 0, None
            self.dag.check_additions(proposed)
        except Exception as exc:
            kind = "proposed an invalid plan" if isinstance(exc, DagError) else "failed"
            self.stop_all(tx, f"the planner {kind}")
            self.finish(tx, RunState.FAILED, f"the planner {kind}: {describe_failure(exc)}")
            self.commit(tx)
            return
        run.state = RunState.EXECUTING
        if not proposed:
            self.planner_done = True
        for job in proposed:
            self.dag.add(job)
            tx.touch(job)
        tx.event("run.replanned", replan=run.replans, added=[job.id for job in proposed])
        self.commit(tx)
        self.consider(job.id for job in proposed)
