"""What happens to each kind of finding: the :class:`Action` values and the :class:`Policy` table.

A policy is plain data, kept apart from the detectors so that choosing what to do with an e-mail
address (label it, mask it, hash it, block the write, keep it) never touches how one is found. Two
policies ship: :meth:`Policy.default` for transcripts, which never blocks, and :meth:`Policy.hygiene`
for long-term memory, where money and credentials block the write.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

__all__ = ["SECRET_KINDS", "Action", "Policy"]


class Action(Enum):
    """What happens to a detected value."""

    LABEL = "label"  # <EMAIL>
    MASK = "mask"  # ************1111
    HASH = "hash"  # <EMAIL:3f9a0c12d4e1>
    BLOCK = "block"  # <MONEY>, and the whole text is flagged as blocked
    KEEP = "keep"  # left as is (still reported as a span)


# Kinds whose values are credentials: never partially shown, never hashed.
SECRET_KINDS: frozenset[str] = frozenset({"API_KEY", "JWT", "PRIVATE_KEY", "SECRET"})


@dataclass(frozen=True)
class Policy:
    """Which :class:`Action` each kind gets; kinds not listed get ``fallback``."""

    name: str
    fallback: Action = Action.LABEL
    actions: Mapping[str, Action] = field(default_factory=dict)

    def __post_init__(self) -> None:
        frozen = MappingProxyType({kind.upper(): Action(a) for kind, a in self.actions.items()})
        object.__setattr__(self, "actions", frozen)

    @classmethod
    def default(cls) -> Policy:
        """For transcripts: never drops. Cards masked, money kept, everything else labelled."""
        actions = {kind: Action.LABEL for kind in SECRET_KINDS}
        actions |= {"CREDIT_CARD": Action.MASK, "MONEY": Action.KEEP}
        return cls("default", Action.LABEL, actions)

    @classmethod
    def hygiene(cls) -> Policy:
        """For long-term memory: money and secrets block the write, cards masked, the rest labelled."""
        actions = {kind: Action.BLOCK for kind in SECRET_KINDS}
        actions |= {"CREDIT_CARD": Action.MASK, "MONEY": Action.BLOCK}
        return cls("hygiene", Action.LABEL, actions)

    def action_for(self, kind: str) -> Action:
        return self.actions.get(kind, self.fallback)

    def __reduce__(self) -> tuple[Any, ...]:
        # A mapping proxy does not pickle; a redactor travels to import worker processes.
        return (Policy, (self.name, self.fallback, dict(self.actions)))

    def with_action(self, kind: str, action: Action) -> Policy:
        """A copy of this policy with ``kind`` mapped to ``action``."""
        return Policy(self.name, self.fallback, {**self.actions, kind.upper(): action})
