"""Replanning: when a run goes idle, a :class:`Planner` may add jobs towards the goal.

The orchestrator asks at most ``max_replans`` times per run (the count is stored with the run, so a
resume does not reset it). Proposed jobs are checked like the first graph — no reused id, no unknown
dependency, no cycle — and an invalid proposal fails the run instead of corrupting it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, runtime_checkable

from .job import Job, JobId, JobResult


@runtime_checkable
class Planner(Protocol):
    """Proposes more jobs for a goal from what has succeeded so far; an empty answer means done."""

    async def plan(self, goal: str, succeeded: Mapping[JobId, JobResult]) -> Sequence[Job]: ...


class StaticPlanner:
    """Adds a fixed set of jobs the first time it is asked, then says done."""

    def __init__(self, jobs: Iterable[Job]) -> None:
        self._jobs: list[Job] | None = list(jobs)

    async def plan(self, goal: str, succeeded: Mapping[JobId, JobResult]) -> Sequence[Job]:
        jobs, self._jobs = self._jobs, None
        return [job.model_copy() for job in jobs or ()]
