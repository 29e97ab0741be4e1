"""Conditional edges and bounded cycles: what turns the DAG into a graph.

A DAG says what may run in parallel. It cannot say "if the review fails, go back and revise", and
that shape is most of agent work: draft → review → revise → review again. A :data:`Router` runs
after a job succeeds and says what happens next: :class:`Continue`, :class:`Goto` an earlier job
(which runs again, with everything downstream of it), or :class:`Stop` the run as a success. The
``deps`` graph stays acyclic; re-entry is a scheduling decision with a hard visit cap, so a loop
that never converges ends as a dead letter rather than a bill.

Put the criterion in the router, not in the prompt: a model asked to judge its own output tends to
agree with itself (in a measured run, a model reviewing its own draft answered "LGTM" to 30
characters against a limit of 15). And say
why when going back: without feedback a revise loop produced 33, 33, 33, 31, 33 characters against
a limit of 26 — a loop that cannot see its own last attempt repeats, it does not refine::

    def review(result: JobResult) -> Next:
        n = len(result.text)
        return Next.Continue() if n <= LIMIT else Next.back_to_with("revise", f"{n} characters, limit is {LIMIT}")

    Orchestrator(runner).route("review", review, targets=["revise"])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from .job import JobId, JobResult

_GotoType: TypeAlias = "Goto"  # the class attribute `Next.Goto` shadows the name inside `Next`


class Next:
    """What happens after a job succeeds: ``Next.Continue()``, ``Next.Goto(job, feedback)``, ``Next.Stop()``."""

    __slots__ = ()

    Continue: ClassVar[type[Continue]]
    Goto: ClassVar[type[Goto]]
    Stop: ClassVar[type[Stop]]

    @staticmethod
    def back_to(job: JobId) -> _GotoType:
        """Go back to ``job`` without saying why (prefer :meth:`back_to_with`)."""
        return Goto(job)

    @staticmethod
    def back_to_with(job: JobId, feedback: str) -> _GotoType:
        """Go back to ``job`` and tell it why: the feedback is the first thing it reads."""
        return Goto(job, feedback)


@dataclass(frozen=True, slots=True)
class Continue(Next):
    """Ordinary progress: dependents run once their deps are satisfied."""


@dataclass(frozen=True, slots=True)
class Goto(Next):
    """Re-enter the graph at ``job``: it runs again, with everything downstream of it that had finished."""

    job: JobId
    feedback: str | None = None


@dataclass(frozen=True, slots=True)
class Stop(Next):
    """End the run here as a success, leaving the rest of the graph unrun."""


Next.Continue = Continue
Next.Goto = Goto
Next.Stop = Stop

# A router is any callable from a finished job's result to a decision; criteria belong in code.
Router: TypeAlias = Callable[[JobResult], Next]
