"""`Run` — a goal, its DAG, a token budget and where it stands — and the report a run ends with.

A run is the whole persisted record of an orchestration: the run row plus its job rows in
:mod:`harness_loop.runstore`. This module converts between the domain types (``Job``, ``Run``) and
those plain row records; the orchestrator never writes SQL and the store never schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any

from pydantic import ConfigDict, Field, WithJsonSchema

from harness_mem.models import Record

from .dag import Dag
from .job import Job, JobId, JobResult, RetryPolicy
from .runstore import JobRecord, RunRecord, StoredRun, render
from .states import JobState, RunState


class RunBudget(Record):
    """A cap on the tokens a run may spend (``None``: no cap)."""

    max_tokens: int | None = Field(None, ge=0)

    def exceeded(self, spent: int) -> bool:
        """Strictly over: spending exactly the budget is allowed."""
        return self.max_tokens is not None and spent > self.max_tokens


# A Dag is a Python object, not data: in JSON a run's jobs are a list.
_DAG_SCHEMA = {"type": "array", "items": {"type": "object", "description": "a Job"}, "description": "the jobs, in insertion order"}


class Run(Record):
    """One orchestration: goal, DAG, budget, spend, and how many times the planner was asked."""

    model_config = ConfigDict(frozen=False, extra="forbid", arbitrary_types_allowed=True)

    id: str
    goal: str
    dag: Annotated[Dag, WithJsonSchema(_DAG_SCHEMA)]
    state: RunState = RunState.CREATED
    budget: RunBudget = Field(default_factory=RunBudget)
    spent_tokens: int = 0
    replans: int = 0
    reason: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    def to_record(self) -> RunRecord:
        return RunRecord(
            id=self.id, goal=self.goal, state=self.state.value, max_tokens=self.budget.max_tokens,
            spent_tokens=self.spent_tokens, replans=self.replans, reason=self.reason, metadata=self.metadata,
        )

    def job_records(self) -> list[JobRecord]:
        return [job_to_record(job, self.id, self.dag.position(job.id)) for job in self.dag]

    @classmethod
    def from_stored(cls, stored: StoredRun) -> Run:
        dag = Dag()
        for record in stored.jobs:
            dag.add(job_from_record(record), position=record.position)
        r = stored.run
        return cls(
            id=r.id, goal=r.goal, dag=dag, state=RunState(r.state), budget=RunBudget(max_tokens=r.max_tokens),
            spent_tokens=r.spent_tokens, replans=r.replans, reason=r.reason, metadata=dict(r.metadata),
        )


@lru_cache(maxsize=256)
def _retry_dict(retry: RetryPolicy) -> dict[str, Any]:
    return retry.to_dict()  # policies are frozen: one dict per distinct policy


def job_to_record(job: Job, run_id: str, position: int) -> JobRecord:
    """The row for ``job`` in run ``run_id``."""
    result = job.result
    return JobRecord(
        run_id=run_id, job_id=job.id, position=position, prompt=job.prompt, deps=tuple(job.deps),
        retry=_retry_dict(job.retry), state=job.state.value, attempts=job.attempts, visits=job.visits,
        result_text=None if result is None else result.text,
        input_tokens=0 if result is None else result.input_tokens,
        output_tokens=0 if result is None else result.output_tokens,
        spent_tokens=job.spent_tokens, last_error=job.last_error, prior_attempt=job.prior_attempt,
        feedback=job.feedback,
    )


def job_from_record(record: JobRecord) -> Job:
    """The job a stored row describes."""
    result = None
    if record.result_text is not None:
        result = JobResult(text=record.result_text, input_tokens=record.input_tokens, output_tokens=record.output_tokens)
    return Job(
        id=record.job_id, prompt=record.prompt, deps=record.deps, retry=RetryPolicy.from_dict(record.retry),
        state=JobState(record.state), result=result, attempts=record.attempts, visits=record.visits,
        last_error=record.last_error, prior_attempt=record.prior_attempt, feedback=record.feedback,
        spent_tokens=record.spent_tokens,
    )


@dataclass(frozen=True)
class JobReport:
    """How one job ended."""

    id: JobId
    state: JobState
    result: JobResult | None
    error: str | None
    attempts: int
    visits: int
    spent_tokens: int = 0


@dataclass(frozen=True)
class RunReport:
    """How a run ended (or where it stands): its state, spend, and every job in insertion order."""

    run_id: str
    goal: str
    state: RunState
    spent_tokens: int
    jobs: tuple[JobReport, ...]
    budget: int | None = None
    reason: str | None = None

    @classmethod
    def from_run(cls, run: Run) -> RunReport:
        jobs = tuple(
            JobReport(j.id, j.state, j.result, j.last_error, j.attempts, j.visits, j.spent_tokens) for j in run.dag
        )
        return cls(run.id, run.goal, run.state, run.spent_tokens, jobs, run.budget.max_tokens, run.reason)

    @property
    def completed(self) -> bool:
        return self.state is RunState.COMPLETED

    def job(self, job_id: JobId) -> JobReport:
        for job in self.jobs:
            if job.id == job_id:
                return job
        raise KeyError(job_id)

    def results(self) -> dict[JobId, JobResult]:
        """The result of every job that has one."""
        return {j.id: j.result for j in self.jobs if j.result is not None}

    def render(self, *, detailed: bool = False) -> str:
        """The run report as text (the same renderer ``harness-loop runs show`` uses)."""
        run = RunRecord(
            id=self.run_id, goal=self.goal, state=self.state.value, max_tokens=self.budget,
            spent_tokens=self.spent_tokens, reason=self.reason,
        )
        jobs = tuple(
            JobRecord(
                run_id=self.run_id, job_id=j.id, position=i, prompt="", state=j.state.value, attempts=j.attempts,
                visits=j.visits, result_text=None if j.result is None else j.result.text,
                spent_tokens=j.spent_tokens, last_error=j.error,
            )
            for i, j in enumerate(self.jobs)
        )
        return render(StoredRun(run, jobs), detailed=detailed)
