"""What the loop says to a model and what a model says back, plus a scripted model for tests and replay.

The loop speaks one small, provider-neutral vocabulary: a :class:`ModelRequest` (system prompt, guide
blocks, the conversation as :class:`Message` s, tool schemas, JSON mode) goes in, a
:class:`ModelOutput` (text, tool calls with ids and JSON arguments, usage, stop reason, reasoning)
comes out. Anything with an async ``complete(request)`` is a :class:`Model`.

:class:`ScriptedModel` answers from a FIFO script. Tool-call ids are deterministic -- ``"call_"`` plus
a short hash of (name, arguments, position in the script) -- so a run is reproducible, and unique per
call: hashing only (name, arguments) would give two identical calls one id, and the second call's
spill file would overwrite the first's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "Message",
    "Model",
    "ModelOutput",
    "ModelRequest",
    "Role",
    "ScriptedModel",
    "StopReason",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "canonical_json",
]


def canonical_json(value: Any) -> str:
    """Compact JSON with sorted keys: the form used for hashing and comparing arguments."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


class Role(StrEnum):
    """Who a message is from."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class StopReason(StrEnum):
    """Why the model stopped; any tool call forces ``TOOL_USE``."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    STOP_SEQUENCE = "stop_sequence"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call: ``args`` is the parsed JSON object, or the raw string when it did not parse."""

    id: str
    name: str
    args: dict[str, Any] | str = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, /, **args: Any) -> ToolCall:
        """A call with no id yet (a :class:`ScriptedModel` assigns one)."""
        return cls(id="", name=name, args=args)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "args": self.args}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolCall:
        return cls(id=str(data.get("id", "")), name=str(data["name"]), args=data.get("args", {}))


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts of one call (or, summed, of a run)."""

    input: int = 0
    output: int = 0
    cached_input: int = 0
    cache_write_input: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cached_input + other.cached_input,
            self.cache_write_input + other.cache_write_input,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cached_input": self.cached_input,
            "cache_write_input": self.cache_write_input,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Usage:
        data = data or {}
        return cls(
            *(int(data.get(k, 0) or 0) for k in ("input", "output", "cached_input", "cache_write_input"))
        )


@dataclass(frozen=True, slots=True)
class ModelOutput:
    """One model turn."""

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    stop_reason: StopReason = StopReason.END_TURN
    reasoning: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.stop_reason, StopReason):
            object.__setattr__(self, "stop_reason", StopReason(self.stop_reason))
        # Providers disagree on the finish reason of a tool turn; the loop relies on this one.
        if self.tool_calls and self.stop_reason is not StopReason.TOOL_USE:
            object.__setattr__(self, "stop_reason", StopReason.TOOL_USE)

    @classmethod
    def reply(cls, text: str, *, reasoning: str | None = None) -> ModelOutput:
        """A plain text answer."""
        return cls(text=text, reasoning=reasoning)

    @classmethod
    def with_calls(cls, *calls: ToolCall, text: str | None = None) -> ModelOutput:
        """A turn that calls tools."""
        return cls(text=text, tool_calls=tuple(calls), stop_reason=StopReason.TOOL_USE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "tool_calls": [c.to_dict() for c in self.tool_calls],
            "usage": self.usage.to_dict(),
            "stop_reason": self.stop_reason.value,
            "reasoning": self.reasoning,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelOutput:
        try:
            stop = StopReason(data.get("stop_reason") or "end_turn")
        except ValueError:
            stop = StopReason.OTHER
        return cls(
            text=data.get("text"),
            tool_calls=tuple(ToolCall.from_dict(c) for c in data.get("tool_calls") or ()),
            usage=Usage.from_dict(data.get("usage")),
            stop_reason=stop,
            reasoning=data.get("reasoning"),
        )


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of the conversation.

    ``origin`` says who pushed a user message (``"task"``, ``"acceptance"``, ``"stuck-detector"``,
    ...); ``name`` is the tool's name on a tool message.
    """

    role: Role
    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    origin: str | None = None


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the model is told about a tool: its name, description and JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ToolSpec:
        return cls(str(data["name"]), str(data.get("description", "")), dict(data.get("parameters") or {}))


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """Everything one model call sees.

    ``guides`` are blocks rendered fresh before each call (recall, instructions): they sit next to
    the system prompt and are replaced, never stacked into the history.
    """

    messages: Sequence[Message]
    system: str | None = None
    guides: Sequence[str] = ()
    tools: Sequence[ToolSpec] = ()
    json: bool = False
    max_output_tokens: int | None = None


@runtime_checkable
class Model(Protocol):
    """Anything that completes a :class:`ModelRequest`."""

    async def complete(self, request: ModelRequest) -> ModelOutput:
        """One model turn for ``request``."""
        ...


def scripted_call_id(name: str, args: dict[str, Any] | str, position: str) -> str:
    """``"call_"`` + a short hash of the call and where it sits in the script: deterministic and unique."""
    digest = hashlib.sha256(f"{position}\0{name}\0{canonical_json(args)}".encode()).hexdigest()
    return "call_" + digest[:12]


class ScriptedModel:
    """A model that answers from a FIFO script; an exhausted script answers with empty text.

    Script items are :class:`ModelOutput` s or plain strings (text answers). Calls without an id
    get a deterministic, per-call unique one. Every request is kept in :attr:`requests`.
    """

    def __init__(self, script: Iterable[ModelOutput | str] = (), *, name: str = "scripted") -> None:
        self.name = name
        self.requests: list[ModelRequest] = []
        self._script: list[ModelOutput] = [self._with_ids(item, i) for i, item in enumerate(script)]
        self._next = 0

    @staticmethod
    def _with_ids(item: ModelOutput | str, index: int) -> ModelOutput:
        if isinstance(item, str):
            return ModelOutput.reply(item)
        if all(c.id for c in item.tool_calls):
            return item
        calls = tuple(
            c if c.id else replace(c, id=scripted_call_id(c.name, c.args, f"{index}:{j}"))
            for j, c in enumerate(item.tool_calls)
        )
        return replace(item, tool_calls=calls)

    @property
    def remaining(self) -> int:
        """How many scripted outputs have not been used yet."""
        return len(self._script) - self._next

    async def complete(self, request: ModelRequest) -> ModelOutput:
        """The next scripted output (``text=""`` once the script runs out)."""
        self.requests.append(replace(request, messages=tuple(request.messages), guides=tuple(request.guides)))
        if self._next >= len(self._script):
            return ModelOutput(text="")
        out = self._script[self._next]
        self._next += 1
        return out
