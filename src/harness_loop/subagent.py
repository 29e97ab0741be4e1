"""Subagents: a child loop with its own context, transcript and budget, and a status the parent can act on.

A subagent starts from an empty conversation (only its task), runs with default guards and a
budget of 12 iterations, and hands back a :class:`SubagentResult`. Its status is honest:

- ``DONE``               answered and acceptance passed;
- ``DONE_WITH_CONCERNS`` answered, but acceptance failed, or the budget ran out with some text;
- ``BLOCKED``            stuck, cancelled, out of budget with nothing to show, or said ``BLOCKED:``;
- ``NEEDS_CONTEXT``      said ``NEEDS_CONTEXT:`` -- it needs something only the caller knows.

A failed acceptance verdict is never reported as ``DONE``, so the parent does not build on an
unchecked answer. The parent's hook bus sees ``SubagentStart`` and ``SubagentStop``, so audit hooks
can account for delegated work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import anyio

from .chat import Message, Model
from .guards import Acceptance
from .hooks import Event, HookBus, HookEvent
from .loop import (
    AgentLoop,
    BudgetExhausted,
    Cancelled,
    Done,
    Guide,
    LoopConfig,
    Outcome,
    Recorder,
    Stuck,
    Unverified,
)
from .tools import Tool, tool

__all__ = ["SubagentResult", "SubagentSpec", "SubagentStatus", "run_subagent", "subagent_tool"]

SUBAGENT_PROTOCOL = (
    "You are a subagent: another agent gave you this task and will act on your answer. Answer with the "
    "result itself. If you cannot go on without information only the caller has, answer with a first line "
    "`NEEDS_CONTEXT: <what you need>`. If something outside your control stops you, answer `BLOCKED: <why>`."
)


class SubagentStatus(StrEnum):
    """What the parent should make of a subagent's answer."""

    DONE = "done"
    DONE_WITH_CONCERNS = "done_with_concerns"
    BLOCKED = "blocked"
    NEEDS_CONTEXT = "needs_context"


@dataclass(frozen=True)
class SubagentSpec:
    """A child task: its tools, prompt, guides and checks, and a bounded budget."""

    name: str
    task: str
    tools: Sequence[Tool | Callable[..., Any]] = ()
    system: str | None = None
    guides: Sequence[Guide] = ()
    acceptance: Sequence[Acceptance] | None = None
    max_iters: int = 12
    time_limit: float | None = None


@dataclass(frozen=True)
class SubagentResult:
    """The child's status, its answer, what worries it, and its full outcome (with transcript)."""

    name: str
    status: SubagentStatus
    text: str
    concerns: tuple[str, ...] = ()
    outcome: Outcome | None = field(default=None, repr=False)

    @property
    def transcript(self) -> tuple[Message, ...]:
        return self.outcome.transcript if self.outcome else ()

    def to_dict(self) -> dict[str, Any]:
        """What a parent model sees when the subagent runs as a tool."""
        return {
            "subagent": self.name,
            "status": self.status.value,
            "text": self.text,
            "concerns": list(self.concerns),
        }


def _marker(text: str) -> tuple[SubagentStatus, str] | None:
    head, sep, rest = text.strip().partition(":")
    for status, word in (
        (SubagentStatus.NEEDS_CONTEXT, "NEEDS_CONTEXT"),
        (SubagentStatus.BLOCKED, "BLOCKED"),
    ):
        if sep and head.strip().upper() == word:
            return status, rest.strip()
    return None


def classify(name: str, outcome: Outcome) -> SubagentResult:
    """Map a child loop's outcome to a :class:`SubagentResult`."""
    text = getattr(outcome, "text", None) or outcome.last_text or ""
    if isinstance(outcome, (Done, Unverified)) and (marked := _marker(text)):
        status, detail = marked
        return SubagentResult(name, status, detail, (detail,) if detail else (), outcome)
    if isinstance(outcome, Done):
        return SubagentResult(name, SubagentStatus.DONE, text, (), outcome)
    if isinstance(outcome, Unverified):
        return SubagentResult(
            name, SubagentStatus.DONE_WITH_CONCERNS, text, (outcome.verdict.reason,), outcome
        )
    if isinstance(outcome, BudgetExhausted):
        why = (
            "ran out of time"
            if outcome.deadline_reached
            else f"used its whole budget of {outcome.iters} iterations"
        )
        status = SubagentStatus.DONE_WITH_CONCERNS if text.strip() else SubagentStatus.BLOCKED
        return SubagentResult(name, status, text, (why,), outcome)
    if isinstance(outcome, Stuck):
        return SubagentResult(name, SubagentStatus.BLOCKED, text, (outcome.reason,), outcome)
    if isinstance(outcome, Cancelled):
        return SubagentResult(name, SubagentStatus.BLOCKED, text, ("cancelled",), outcome)
    return SubagentResult(name, SubagentStatus.BLOCKED, text, (f"ended as {outcome.kind}",), outcome)


async def run_subagent(
    model: Model,
    spec: SubagentSpec,
    *,
    workspace: str | Path = ".",
    hooks: HookBus | None = None,
    recorder: Recorder | None = None,
    cancel: anyio.Event | None = None,
) -> SubagentResult:
    """Run ``spec`` in a fresh child loop; ``hooks`` (the parent's) see SubagentStart and SubagentStop."""
    system = f"{spec.system}\n\n{SUBAGENT_PROTOCOL}" if spec.system else SUBAGENT_PROTOCOL
    child = AgentLoop(
        model,
        spec.tools,
        system=system,
        workspace=workspace,
        config=LoopConfig(max_iters=spec.max_iters, time_limit=spec.time_limit),
        guides=spec.guides,
        acceptance=spec.acceptance,
        recorder=recorder,
    )
    label = f"subagent:{spec.name}"
    if hooks is not None:
        hooks.fire(HookEvent(Event.SUBAGENT_START, label, name=spec.name, task=spec.task))
    outcome = await child.run(spec.task, cancel=cancel)
    result = classify(spec.name, outcome)
    if hooks is not None:
        hooks.fire(
            HookEvent(
                Event.SUBAGENT_STOP, outcome.session, name=spec.name, text=result.status.value, outcome=result
            )
        )
    return result


def subagent_tool(
    model: Model,
    *,
    name: str = "delegate",
    tools: Sequence[Tool | Callable[..., Any]] = (),
    system: str | None = None,
    workspace: str | Path = ".",
    max_iters: int = 12,
    timeout: float = 600.0,
    hooks: HookBus | None = None,
) -> Tool:
    """A tool that hands a self-contained task to a fresh subagent and returns its status and answer."""

    async def delegate(task: str) -> dict[str, Any]:
        """Hand a self-contained task to a subagent with a fresh context; returns its status and answer.

        :param task: everything the subagent needs to know: it does not see this conversation.
        """
        spec = SubagentSpec(name=name, task=task, tools=tools, system=system, max_iters=max_iters)
        result = await run_subagent(model, spec, workspace=workspace, hooks=hooks)
        return result.to_dict()

    return tool(delegate, name=name, timeout=timeout)
