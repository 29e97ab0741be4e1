"""The loop's guards: the stuck detector, the monotony detector, and acceptance checks.

**Stuck.** After a round of tool calls has run, the round is fingerprinted as each call's name,
canonical arguments *and result digest*. Consecutive identical fingerprints count up; at 3 the model
is nudged, at 6 the run stops as Stuck. Because results are part of the fingerprint, polling whose
result changes is progress, not a loop. Running the check after dispatch also means the nudge is
pushed after the tool results, never between an assistant's tool calls and their results.

**Monotony** (off by default). A round whose calls all use one tool counts; the same tool again
adds one, a different sole tool restarts at one, a mixed round resets to zero. Nudge at 8, stop at
16 (after one forced synthesis call).

**Acceptance.** When the model answers without calling tools, checks run in order and stop at the
first failure. A failure is sent back as a user turn while retries remain; otherwise the run ends
*Unverified* -- never Done, and TaskCompleted does not fire: an answer that failed its checks must
never be reported as a success.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from .chat import Message, ToolCall, canonical_json
from .spill import ToolResult

__all__ = [
    "Acceptance",
    "AcceptanceProbe",
    "FilesExist",
    "GuardAction",
    "GuardSignal",
    "MonotonyDetector",
    "MonotonyPolicy",
    "NonEmptyAnswer",
    "StuckDetector",
    "StuckPolicy",
    "Verdict",
]


class GuardAction(StrEnum):
    """What a guard asks the loop to do after a round."""

    NUDGE = "nudge"
    ABORT = "abort"


@dataclass(frozen=True, slots=True)
class GuardSignal:
    """A guard's request: nudge the model with ``message``, or stop the run for ``reason``."""

    action: GuardAction
    origin: str
    count: int
    message: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class StuckPolicy:
    """Stuck detection: on by default, nudge at 3 identical rounds, stop at 6."""

    enabled: bool = True
    nudge_at: int = 3
    abort_at: int = 6


@dataclass(frozen=True, slots=True)
class MonotonyPolicy:
    """Monotony detection: off by default, nudge at 8 rounds of one tool, stop at 16."""

    enabled: bool = False
    nudge_at: int = 8
    abort_at: int = 16


class StuckDetector:
    """Counts consecutive rounds with the same calls *and* the same results."""

    origin = "stuck-detector"

    def __init__(self, policy: StuckPolicy) -> None:
        self.policy = policy
        self.count = 0
        self._last: str | None = None

    def observe(self, round_: Sequence[tuple[ToolCall, ToolResult]]) -> GuardSignal | None:
        """Feed one dispatched round; a signal when the nudge or abort threshold is reached."""
        if not self.policy.enabled or not round_:
            return None
        fingerprint = "|".join(f"{c.name}({canonical_json(c.args)})#{r.digest}" for c, r in round_)
        self.count = self.count + 1 if fingerprint == self._last else 1
        self._last = fingerprint
        n = self.count
        if n >= self.policy.abort_at:
            reason = f"repeated the same tool call {n}× with an unchanging result"
            return GuardSignal(GuardAction.ABORT, self.origin, n, "", reason)
        if n == self.policy.nudge_at:
            message = (
                f"[{self.origin}] You have made the same tool call {n} rounds in a row and the result has "
                "not changed. Stop repeating it: if you are waiting for something, wait inside one call "
                "rather than polling; otherwise try a different approach or answer with what you have."
            )
            return GuardSignal(GuardAction.NUDGE, self.origin, n, message)
        return None


class MonotonyDetector:
    """Counts consecutive rounds that use only one tool."""

    origin = "monotony-detector"

    def __init__(self, policy: MonotonyPolicy) -> None:
        self.policy = policy
        self.count = 0
        self.tool: str | None = None

    def observe(self, names: Sequence[str]) -> GuardSignal | None:
        """Feed the tool names of one round."""
        if not self.policy.enabled or not names:
            return None
        distinct = set(names)
        if len(distinct) > 1:
            self.count, self.tool = 0, None
            return None
        (name,) = distinct
        self.count = self.count + 1 if name == self.tool else 1
        self.tool = name
        n = self.count
        if n >= self.policy.abort_at:
            reason = f"called `{name}` for {n} consecutive rounds without using any other tool"
            message = (
                f"[system: stopped — no progress] You have called `{name}` for {n} rounds in a row. "
                "Write your final answer NOW from what you already have, without calling tools. "
                "State plainly which parts you could not determine."
            )
            return GuardSignal(GuardAction.ABORT, self.origin, n, message, reason)
        if n == self.policy.nudge_at:
            message = (
                f"[{self.origin}] You have called `{name}` for {n} rounds in a row without using any other "
                "tool. Step back: is there a more direct way to get what you need, or enough to answer now?"
            )
            return GuardSignal(GuardAction.NUDGE, self.origin, n, message)
        return None


@dataclass(frozen=True, slots=True)
class Verdict:
    """An acceptance check's finding; ``reason`` is sent to the model when it failed."""

    passed: bool
    reason: str = ""
    check: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "check": self.check}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        return cls(bool(data.get("passed")), str(data.get("reason", "")), str(data.get("check", "")))


@dataclass(frozen=True, slots=True)
class AcceptanceProbe:
    """What a check may look at: the final answer, the workspace and the conversation."""

    text: str
    reasoning: str | None
    workspace: Path
    transcript: Sequence[Message] = field(default=())


@runtime_checkable
class Acceptance(Protocol):
    """A check the final answer must pass."""

    @property
    def name(self) -> str: ...

    def check(self, probe: AcceptanceProbe) -> Verdict:
        """Pass, or fail with a reason the model can act on."""
        ...


@dataclass(frozen=True)
class NonEmptyAnswer:
    """The final turn must contain non-blank text."""

    name: str = "non-empty-answer"

    def check(self, probe: AcceptanceProbe) -> Verdict:
        if probe.text.strip():
            return Verdict(True, check=self.name)
        return Verdict(
            False,
            "You ended that turn without answering: there was no text in it. "
            "Carry on now and write your final answer as text.",
            self.name,
        )


@dataclass(frozen=True)
class FilesExist:
    """Every listed path (relative to the workspace) must exist and be non-empty."""

    paths: Sequence[str | Path]
    name: str = "files-exist"

    def check(self, probe: AcceptanceProbe) -> Verdict:
        missing = []
        for p in self.paths:
            path = probe.workspace / p
            if not path.exists() or (path.is_file() and path.stat().st_size == 0):
                missing.append(str(p))
        if not missing:
            return Verdict(True, check=self.name)
        return Verdict(
            False,
            f"These files must exist and be non-empty, but are missing or empty: {', '.join(missing)}. "
            "Create them, then answer.",
            self.name,
        )
