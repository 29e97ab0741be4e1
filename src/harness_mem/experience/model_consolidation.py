"""Consolidation with a model: it writes the segments' summaries and the facts, and decides updates.

The rules cut the session (:mod:`.segments`); the model is then asked, once per session, to write a
summary of each segment and the durable facts, citing the numbers of the turns each came from
(:func:`digest_prompt`). A second call, only when some stored fact is near a new one, shows the
model each new fact beside its nearest stored facts and asks whether it adds, updates or repeats
one (:func:`decisions_prompt`). So a session costs at most two calls, and a reply is trusted only
after validation (:class:`SessionDigest`, :class:`Decisions`): a reply that fails it, or cites a
turn that was not shown, is asked again once with the reason, then set aside — the caller falls
back to the rules' text and counts it. A failed call (server down, timeout, 5xx) raises
:class:`~harness_mem.errors.ModelError` for the caller to retry the session on its next run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Annotated, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..providers.textmodel import TextModel, extract_json
from .derive import SpokenTurn
from .transcript import truncate_turn

__all__ = [
    "DECISIONS_MAX_TOKENS",
    "DIGEST_MAX_TOKENS",
    "MAX_MODEL_FACTS",
    "NEAREST_SHOWN",
    "CitedText",
    "Decision",
    "Decisions",
    "ModelReplyError",
    "SessionDigest",
    "ask",
    "decisions_prompt",
    "digest_prompt",
    "parse_decisions",
    "parse_digest",
]

MAX_MODEL_FACTS = 12
MAX_TEXT_CHARS = 600
DIGEST_MAX_TOKENS = 1_500
DECISIONS_MAX_TOKENS = 600
PROMPT_TURN_CHARS = 600
PROMPT_TOTAL_CHARS = 30_000  # a long session's turns are cut shorter, never left out
NEAREST_SHOWN = 3

_Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_TEXT_CHARS)]


class CitedText(BaseModel):
    """A summary or a fact, with the numbers of the turns it came from (at least one)."""

    model_config = ConfigDict(extra="ignore")
    text: _Text
    turns: list[int] = Field(min_length=1)


class SessionDigest(BaseModel):
    """What the model wrote for a session: one summary per segment, in order, and the facts."""

    model_config = ConfigDict(extra="ignore")
    segments: list[CitedText]
    facts: list[CitedText] = Field(default_factory=list, max_length=MAX_MODEL_FACTS)


class Decision(BaseModel):
    """For new fact number ``fact``: add it, or it updates / repeats the stored fact ``existing``."""

    model_config = ConfigDict(extra="ignore")
    fact: int
    action: Literal["add", "update", "repeat"]
    existing: str | None = None


class Decisions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    decisions: list[Decision]


class ModelReplyError(ValueError):
    """A model reply that does not pass validation; the message says why, in one line."""


DIGEST_PROMPT = """\
Below is one conversation session, turn by turn, already cut into {segments} topic segments.

{turns}

Write JSON and nothing else:
{{"segments": [{{"text": "...", "turns": [1, 2]}}, ...], "facts": [{{"text": "...", "turns": [3]}}, ...]}}
- "segments": exactly {segments} items, in order, one per segment: a summary of 1-3 sentences that \
reads on its own — who talked, on which day, about what — in the third person, with names, never \
"I" or "you", and dates instead of "yesterday" or "last week".
- "facts": at most {max_facts} durable facts worth remembering later (preferences, plans, decisions, \
attributes, events), each one short standalone sentence in the third person with names and dates. \
Leave out small talk. [] is a fine answer.
- "turns": the numbers of the turns each item comes from (at least one, only numbers shown above)."""

DECISIONS_PROMPT = """\
New facts were found in a conversation. Beside each are the stored facts nearest to it.

{facts}

For each new fact decide: "add" (it is new), "update" (it changes a stored fact, which it replaces: \
name that fact's id) or "repeat" (a stored fact says the same: name its id). Reply with JSON and \
nothing else:
{{"decisions": [{{"fact": 1, "action": "add"}}, {{"fact": 2, "action": "update", "existing": "<id>"}}]}}"""


def _shown(turn: SpokenTurn, chars: int) -> str:
    day = f" ({turn.day.isoformat()})" if turn.day is not None else ""
    return f"{turn.role}{day}: {truncate_turn(' '.join(turn.content.split()), chars)[0]}"


def digest_prompt(turns: Sequence[SpokenTurn], segments: Sequence[range]) -> str:
    """The prompt for one session: its turns numbered from 1, each segment headed."""
    chars = max(80, min(PROMPT_TURN_CHARS, PROMPT_TOTAL_CHARS // max(len(turns), 1)))
    lines: list[str] = []
    for number, part in enumerate(segments, start=1):
        lines.append(f"## Segment {number}")
        lines += [f"[{i + 1}] {_shown(turns[i], chars)}" for i in part]
    return DIGEST_PROMPT.format(segments=len(segments), turns="\n".join(lines), max_facts=MAX_MODEL_FACTS)


_M = TypeVar("_M", bound=BaseModel)


def _validated(reply: str, model: type[_M]) -> _M:
    found = extract_json(reply)
    if found is None:
        raise ModelReplyError(f"the reply is not a JSON object ({' '.join(str(reply).split())[:60]!r})")
    try:
        return model.model_validate(found)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ModelReplyError(f"{where}: {first['msg']}") from None


def parse_digest(reply: str, turns: int, segments: int) -> SessionDigest:
    """The validated digest of a reply about ``turns`` turns in ``segments`` segments."""
    digest = _validated(reply, SessionDigest)
    if len(digest.segments) != segments:
        raise ModelReplyError(f"{len(digest.segments)} segment summaries for {segments} segments")
    for kind, items in (("segments", digest.segments), ("facts", digest.facts)):
        for item in items:
            wrong = [n for n in item.turns if not 1 <= n <= turns]
            if wrong:
                raise ModelReplyError(f"{kind} cite turn {wrong[0]}, not one of the {turns} shown")
    return digest


def decisions_prompt(facts: Sequence[str], nearest: Sequence[Sequence[tuple[str, str]]]) -> str:
    """The prompt asking about new ``facts``, each with its nearest stored facts as (id, text)."""
    blocks = []
    for number, (fact, near) in enumerate(zip(facts, nearest, strict=True), start=1):
        shown = "\n".join(f"   - id {json.dumps(id_)}: {text}" for id_, text in near[:NEAREST_SHOWN]) or "   (none)"
        blocks.append(f"{number}. {fact}\n   stored:\n{shown}")
    return DECISIONS_PROMPT.format(facts="\n".join(blocks))


def parse_decisions(reply: str, nearest: Sequence[Sequence[tuple[str, str]]]) -> dict[int, Decision]:
    """Each new fact's decision (numbered from 1); a fact left out is added. An update or repeat
    must name one of the stored facts shown beside that fact."""
    decided: dict[int, Decision] = {}
    for decision in _validated(reply, Decisions).decisions:
        if not 1 <= decision.fact <= len(nearest):
            raise ModelReplyError(f"a decision about fact {decision.fact}, not one of the {len(nearest)} shown")
        if decision.action != "add" and decision.existing not in {id_ for id_, _ in nearest[decision.fact - 1]}:
            raise ModelReplyError(f"fact {decision.fact}: {decision.action} of {decision.existing!r}, not a fact shown")
        decided[decision.fact] = decision
    return decided


_T = TypeVar("_T")


def ask(model: TextModel, prompt: str, parse: Callable[[str], _T], *, max_tokens: int) -> tuple[_T | None, str | None]:
    """Ask ``model`` and parse its reply; a reply that fails is asked again once, with the reason.

    Returns (the parsed reply, None), or (None, why the second reply failed too). A failed call
    raises :class:`~harness_mem.errors.ModelError`.
    """
    reason = None
    for attempt in range(2):
        asked = prompt if attempt == 0 else f"{prompt}\n\nYour previous reply was rejected: {reason}. Reply again."
        reply = model.complete(asked, max_tokens=max_tokens, json=True)
        try:
            return parse(reply), None
        except ModelReplyError as exc:
            reason = str(exc)
    return None, reason
