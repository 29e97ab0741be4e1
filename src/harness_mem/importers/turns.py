"""What a transcript reader gives for each record: a turn to store, or the reason it stores nothing.

Readers know nothing of the store: they turn records into :class:`ImportedTurn` values with stable
ids (a record's own uuid, else its file and line), so that a second run finds what the first one
stored; :mod:`.transcripts` cuts, redacts (through the store) and writes them. Every record that
gives no turn gives a :class:`Skipped` with a short reason, which the import counts: a summary says
what was left out and why, never "150 of 150 lines rejected". A reader ends with a :class:`Resume`,
saying where the next run may start reading.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..integrations.claude_code import strip_injected

#: Text a host put into the conversation itself (instructions, environment, command echoes):
#: the hooks never see it as a prompt, so an import leaves it out too.
INJECTED = "injected context"
NO_TEXT = "no text"
NO_TIME = "no timestamp"
CALL_WITHOUT_RESULT = "tool call without its result"
RESULT_WITHOUT_CALL = "tool result without its call"


@dataclass(frozen=True)
class ImportedTurn:
    """One turn as a reader found it, before it is cut and redacted."""

    id: str
    role: str
    text: str
    session: str
    created_at: str
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Skipped:
    """A record (or part of one) that gives no turn, and why."""

    reason: str


@dataclass(frozen=True)
class Resume:
    """What a reader gives last: what a later read of the same file, once lines are appended, must
    read again (:mod:`.positions`): from ``line`` on (a tool call still waiting for its result;
    None: nothing before the next new line), after the lines ``header`` (the session's header)."""

    line: int | None = None
    header: tuple[int, ...] = ()


Item = ImportedTurn | Skipped | Resume


def load_record(raw: bytes | str) -> dict[str, Any] | Skipped | None:
    """One JSONL line as a JSON object; None for a blank line, :class:`Skipped` for anything else."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError:
        return Skipped("not UTF-8")
    if not text.strip():
        return None
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):  # a number too long to read is a ValueError too
        return Skipped("not JSON")
    if not isinstance(record, dict):
        return Skipped("not a JSON object")
    return record


def record_kind(kind: object, suffix: str = "record") -> Skipped:
    """The reason for a record of a type that holds no turn: ``summary record``."""
    if isinstance(kind, str) and 0 < len(kind) <= 40 and kind.replace("-", "_").replace("/", "_").isidentifier():
        return Skipped(f"{kind} {suffix}")
    return Skipped(f"{suffix} of no known type")


def block_pattern(tags: Iterable[str]) -> re.Pattern[str]:
    """What :func:`without_blocks` removes: each ``<tag …>…</tag>``; an opening tag without its
    close takes the rest of the text (a cut quote of injected text is still injected text)."""
    names = "|".join(re.escape(tag) for tag in tags)
    return re.compile(rf"<({names})(?:\s[^>]*)?>.*?(?:</\1>|\Z)", re.DOTALL)


def without_blocks(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` without the blocks ``pattern`` finds, stripped."""
    return pattern.sub("", text).strip() if "<" in text else text.strip()


def said(role: str, text: str, host_blocks: re.Pattern[str], host_prefix: str) -> str:
    """What a person or an assistant said in ``text``: a user message without the blocks its host
    put in (``host_blocks``) — nothing when it opens with ``host_prefix`` — and without the memory
    the hooks injected; "" when nothing is left."""
    if role == "user":
        text = without_blocks(text, host_blocks)
        if text.startswith(host_prefix):
            return ""
    return strip_injected(text)


def texts_of(blocks: object, *kinds: str) -> list[str]:
    """The ``text`` of each content block of one of ``kinds`` in a list of blocks (a string is one text)."""
    if isinstance(blocks, str):
        return [blocks]
    if not isinstance(blocks, list):
        return []
    return [b["text"] for b in blocks
            if isinstance(b, dict) and b.get("type") in kinds and isinstance(b.get("text"), str)]


def parsed_json(value: object) -> object:
    """``value`` read as JSON when it is a string holding some (tool arguments often are), else as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (ValueError, RecursionError):
            return value
    return value
