"""Hooks: plain callables the loop calls at fixed points of a run, registered on a :class:`HookBus`.

A hook receives a :class:`HookEvent` and may return :class:`Deny` (or nothing). The bus calls hooks in
registration order; the first Deny wins and stops the rest. The loop honours Deny only on
``PreToolUse``, which fires before *any* execution of the call -- read-only calls that run
concurrently are all vetted first, so a Deny stops a read before it runs, not after it has already
run. Hooks are synchronous: one that needs I/O should enqueue and return.

Events the loop fires, in order::

    SessionStart
    per iteration: Heartbeat, [Compacted,] PreModel, PostModel, then either
                   per tool call PreToolUse and PostToolUse (none after a Deny; a concurrent read-only
                   batch fires all its PreToolUse first), then any Feedback nudge,
                   or, on a turn without tool calls, AcceptanceChecked per check (Feedback on a retry)
    TaskCompleted      only when acceptance passed
    BudgetWarning      once, when the iteration budget runs out
    Cancelled          when cancel() or the cancel event ends the run
    SessionEnd         last (a run that raises fires none: the exception is the news)

``Compacted`` fires when the conversation neared ``LoopConfig.context_budget`` and its older turns
were replaced by a summary (``text``: the summary, ``ratio``: the estimated size against the budget
before, ``replaced``: how many messages the summary stands in for); it can also precede a synthesis
call. ``SubagentStart`` / ``SubagentStop`` fire on the parent's bus around a child loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .chat import ModelOutput, ModelRequest, ToolCall
    from .spill import ToolResult

__all__ = ["Deny", "Event", "Hook", "HookBus", "HookEvent"]


class Event(StrEnum):
    """The points of a run at which hooks fire."""

    SESSION_START = "SessionStart"
    SESSION_END = "SessionEnd"
    HEARTBEAT = "Heartbeat"
    PRE_MODEL = "PreModel"
    POST_MODEL = "PostModel"
    PRE_TOOL_USE = "PreToolUse"
    POST_TOOL_USE = "PostToolUse"
    FEEDBACK = "Feedback"
    ACCEPTANCE_CHECKED = "AcceptanceChecked"
    TASK_COMPLETED = "TaskCompleted"
    BUDGET_WARNING = "BudgetWarning"
    CANCELLED = "Cancelled"
    COMPACTED = "Compacted"
    SUBAGENT_START = "SubagentStart"
    SUBAGENT_STOP = "SubagentStop"


@dataclass(frozen=True, slots=True)
class HookEvent:
    """What happened: the event plus whichever details it carries (the rest are None).

    ``seq`` numbers tool calls within a run (denied ones included); unlike call ids it never repeats.
    """

    event: Event
    session: str
    iter: int = 0
    task: str | None = None
    request: ModelRequest | None = None
    output: ModelOutput | None = None
    call: ToolCall | None = None
    seq: int | None = None
    result: ToolResult | None = None
    text: str | None = None
    name: str | None = None
    passed: bool | None = None
    ratio: float | None = None
    outcome: Any = None
    replaced: int | None = None


@dataclass(frozen=True, slots=True)
class Deny:
    """Refuse the action; ``reason`` is shown to the model."""

    reason: str


Hook = Callable[[HookEvent], Deny | None]


class HookBus:
    """Hooks in registration order, each optionally limited to some events."""

    def __init__(self, hooks: Iterable[Hook] = ()) -> None:
        self._hooks: list[tuple[frozenset[Event] | None, Hook]] = []
        for h in hooks:
            self.add(h)

    def add(self, hook: Hook, *events: Event) -> Hook:
        """Register ``hook`` for ``events`` (all events when none are named, or its own ``events`` attribute)."""
        wanted = events or getattr(hook, "events", None)
        self._hooks.append((frozenset(wanted) if wanted else None, hook))
        return hook

    def on(self, *events: Event) -> Callable[[Hook], Hook]:
        """Decorator form of :meth:`add`."""
        return lambda hook: self.add(hook, *events)

    def __len__(self) -> int:
        return len(self._hooks)

    def fire(self, event: HookEvent) -> Deny | None:
        """Call the matching hooks in order; return the first Deny (later hooks do not run)."""
        for wanted, hook in self._hooks:
            if wanted is None or event.event in wanted:
                decision = hook(event)
                if isinstance(decision, Deny):
                    return decision
        return None
