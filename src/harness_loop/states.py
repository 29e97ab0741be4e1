"""Run and job states: the one definition of their stored names and display labels.

An enum member's value is the name stored in the ``runs.state`` and ``jobs.state`` columns (and
allowed by their CHECK constraints), snake_case: ``dead_lettered``. Its :meth:`label` is the
hyphenated form people read: ``dead-lettered``. :mod:`harness_loop.runstore` derives its tuples of
valid names from these enums, so a state cannot exist in one place and not the other.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["JobState", "RunState", "label"]


def label(stored: str) -> str:
    """The display label of a stored state name: ``dead_lettered`` -> ``dead-lettered``."""
    return stored.replace("_", "-")


class RunState(StrEnum):
    """Lifecycle of a run; the value is the stored name."""

    CREATED = "created"
    PLANNING = "planning"  # asking the planner for more jobs
    EXECUTING = "executing"
    WAITING = "waiting"  # allowed by the schema; the orchestrator never enters it
    AGGREGATING = "aggregating"  # allowed by the schema; the orchestrator never enters it
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_terminal(self) -> bool:
        return self in _TERMINAL_RUN

    def label(self) -> str:
        return label(self.value)


class JobState(StrEnum):
    """Lifecycle of one job; the value is the stored name."""

    PENDING = "pending"  # waiting for its dependencies to succeed
    QUEUED = "queued"  # dependencies satisfied, waiting for a concurrency slot
    RUNNING = "running"  # an attempt is executing
    SUCCEEDED = "succeeded"  # finished; `result` is set
    FAILED = "failed"  # an attempt failed (transient: recorded in the event log)
    RETRYING = "retrying"  # waiting out a backoff delay, holding no slot
    DEAD_LETTERED = "dead_lettered"  # out of attempts (or a loop that would not converge)
    CANCELLED = "cancelled"  # stopped: the run was cancelled, stopped, over budget, or a dep died

    def is_terminal(self) -> bool:
        return self in _TERMINAL_JOB

    def label(self) -> str:
        """The display label: ``dead-lettered`` for ``dead_lettered``."""
        return label(self.value)


_TERMINAL_RUN = frozenset({RunState.COMPLETED, RunState.FAILED, RunState.CANCELLED})
_TERMINAL_JOB = frozenset({JobState.SUCCEEDED, JobState.DEAD_LETTERED, JobState.CANCELLED})
