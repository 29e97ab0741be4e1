"""Offline consolidation: transcripts become episodes (and, with a model, facts), with no agent running.

:func:`consolidate` reads the transcript turns (entries of kind ``turn`` with a session) written by
:class:`~harness_mem.experience.transcript.TranscriptRecorder` or anything else, and keeps **one episode per
session** up to date — built by code, without any model:

* **situation** — the session's first ``user`` turn;
* **tools** — the tool of every ``tool`` turn, in order, duplicates kept (the entry's
  ``metadata.tool``, else the ``[name]`` the turn's text starts with);
* **outcome** — the last ``assistant`` turn;
* **success** — the rule, in order:

  1. the latest turn tagged ``result:success`` or ``result:failure`` decides (the recorder writes
     these when the host passes ``success=``);
  2. otherwise the final assistant or tool turn decides if one of its lines *starts with*
     ``Result:`` or ``Status:`` followed by ``success``/``succeeded``/``passed`` (True) or
     ``failure``/``failed`` (False), in any case — the episode format's own ``Result:`` line;
  3. otherwise None: nobody said, and an unknown result is never guessed from tone.

Sessions are *finished* when they have been quiet for ``idle`` (default 0: every session with turns;
``--idle 10m`` leaves the ones still active alone). A session with no user turn yet is skipped and
looked at again next time.

**Idempotent and incremental.** The ``consolidations`` table (migration 0005) records, per session,
the episode made and the last turn folded into it (the turn's internal row number, which grows as
rows are written — it is reused only if the newest row of the whole file is deleted before the
next write, a case this accepts). A second run with nothing new reads one aggregate query and writes nothing.
When a session receives turns after it was consolidated, its episode is **updated in place** rather
than joined by a second one — a session is one run, and one episode per run is what the distiller
and the skill history expect: the episode keeps its id (so links from skills survive), its
situation stays, the new turns' tools are appended, a new assistant turn replaces the outcome, and
the result is re-decided from the new turns (kept only when they add no assistant turn and say
nothing). Only the new turns are read, so turns that have since expired do not shrink the episode.

Crash safety: an episode's id is derived from its session (``session:<id>``), so a run interrupted
between writing an episode and recording it finds the episode on the next run and rewrites it
instead of adding a duplicate; facts get ids derived from the last turn they cover, and are written
with "ignore if present".

**Facts.** With a :class:`~harness_mem.providers.textmodel.TextModel`, each session's new turns cost one model
call asking for a JSON array of at most :data:`MAX_FACTS` durable facts, each citing the turns it
came from. They are stored as entries of kind ``fact`` (source ``consolidation``, tag
``consolidated``, the session as a field) with metadata ``{"source_turns": [turn ids], "session": s}``.
A reply that is not such an array writes no facts and leaves a note in the report; a failed call
(the server is down) leaves a note too and is retried on the next run. Facts have their own
watermark, so a model configured later extracts facts from sessions consolidated without one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ..errors import DuplicateIdError, InvalidInputError, ModelError, NotFoundError
from ..models import from_ms, new_id, now_ms, parse_time, to_ms
from ..providers.textmodel import TextModel
from ..store import MemoryStore
from .episode import NO_TOOLS, Episode
from .ledger import ConsolidationLedger
from .store import EXPERIENCE_SOURCE, ExperienceStore, episode_tags
from .transcript import DEFAULT_MAX_CHARS, RESULT_TAGS, truncate_turn

__all__ = [
    "CONSOLIDATED_TAG",
    "CONSOLIDATION_SOURCE",
    "MAX_FACTS",
    "ConsolidationReport",
    "Fact",
    "SessionResult",
    "Turn",
    "build_episode",
    "consolidate",
    "episode_id_for",
    "parse_facts",
    "verdict",
]

CONSOLIDATED_TAG = "consolidated"
CONSOLIDATION_SOURCE = "consolidation"
MAX_FACTS = 3
FACTS_MAX_TOKENS = 800
# What one facts prompt shows of a session: each turn cut to its head, and the middle of a very long
# session left out (its start states the task, its end the result).
PROMPT_TURN_CHARS = 600
PROMPT_TOTAL_CHARS = 24_000
MAX_FACT_CHARS = 500

Progress = Callable[[int, int, str], None]

_VERDICT_LINE = re.compile(
    r"^\s*(?:result|status)\s*:\s*(success|succeeded|passed|failure|failed)\b", re.IGNORECASE | re.MULTILINE
)
_TOOL_PREFIX = re.compile(r"^\[([^\],\n\r]{1,200})\] ")
_TAG_VERDICT = {tag: value for value, tag in RESULT_TAGS.items()}


@dataclass(frozen=True)
class Turn:
    """A transcript turn as consolidation reads it."""

    pk: int  # internal row number: the watermark (never leaves the library)
    id: str
    role: str
    content: str
    tags: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    created_ms: int = 0

    @property
    def tool(self) -> str | None:
        """The tool a ``tool`` turn reports on, or None."""
        if self.role != "tool":
            return None
        name = self.metadata.get("tool")
        if not isinstance(name, str):
            match = _TOOL_PREFIX.match(self.content)
            name = match.group(1) if match else None
        if name is None:
            return None
        name = name.strip()
        if not name or name == NO_TOOLS or "," in name or "\n" in name or "\r" in name:
            return None
        return name


@dataclass(frozen=True)
class Fact:
    """A durable fact a model found in a session, with the turns it came from."""

    text: str
    source_turns: tuple[str, ...]


@dataclass
class SessionResult:
    """What consolidation did with one session.

    ``action`` is ``created`` or ``updated`` (the episode), ``unchanged`` (no new turn for the
    episode; facts may still have been extracted) or ``skipped`` (``note`` says why).
    """

    session: str
    action: str
    episode_id: str | None = None
    new_turns: int = 0
    episode: Episode | None = None
    facts: list[str] = field(default_factory=list)  # ids of the fact entries written
    note: str | None = None

    def describe(self) -> str:
        """One readable line (the CLI prints these)."""
        parts = [f"{self.action:<9}", self.session]
        if self.episode is not None:
            outcome = {True: "success", False: "failure", None: "result unknown"}[self.episode.success]
            parts.append(
                f"→ {self.episode_id}  ({self.new_turns} new turns, {len(self.episode.tools)} tool calls, {outcome})"
            )
        if self.facts:
            parts.append(f"+{len(self.facts)} facts")
        if self.note:
            parts.append(f"— {self.note}")
        return "  ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "action": self.action,
            "episode_id": self.episode_id,
            "new_turns": self.new_turns,
            "episode": None if self.episode is None else self.episode.to_dict(),
            "facts": list(self.facts),
            "note": self.note,
        }


@dataclass
class ConsolidationReport:
    """Every session looked at, in the order they were processed, and notes worth reading."""

    sessions: list[SessionResult] = field(default_factory=list)

    def _count(self, action: str) -> int:
        return sum(1 for s in self.sessions if s.action == action)

    @property
    def created(self) -> int:
        return self._count("created")

    @property
    def updated(self) -> int:
        return self._count("updated")

    @property
    def unchanged(self) -> int:
        return self._count("unchanged")

    @property
    def skipped(self) -> int:
        return self._count("skipped")

    @property
    def facts(self) -> int:
        return sum(len(s.facts) for s in self.sessions)

    @property
    def notes(self) -> list[str]:
        return [f"session {s.session}: {s.note}" for s in self.sessions if s.note]

    def summary(self) -> str:
        """One line: what changed."""
        return (
            f"{len(self.sessions)} sessions: {self.created} episodes created, {self.updated} updated, "
            f"{self.unchanged} unchanged, {self.skipped} skipped; {self.facts} facts"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "facts": self.facts,
            "notes": self.notes,
            "results": [s.to_dict() for s in self.sessions],
        }


# ---- building an episode: pure code --------------------------------------------------------------


def verdict(turns: Sequence[Turn]) -> bool | None:
    """The run's result as the transcript states it (see the module docstring), or None."""
    for turn in reversed(turns):
        for tag in reversed(turn.tags):
            if tag in _TAG_VERDICT:
                return _TAG_VERDICT[tag]
    final = next((t for t in reversed(turns) if t.role in ("assistant", "tool")), None)
    if final is not None:
        match = _VERDICT_LINE.search(final.content)
        if match:
            return match.group(1).lower() in ("success", "succeeded", "passed")
    return None


def _clip(text: str) -> str:
    return truncate_turn(text.strip(), DEFAULT_MAX_CHARS)[0]


def build_episode(turns: Sequence[Turn], base: Episode | None = None) -> Episode | None:
    """The episode for ``turns`` (in order), or — with ``base`` — ``base`` extended by them.

    None when there is no base and no user turn to take the situation from.
    """
    tools = [name for name in (t.tool for t in turns) if name]
    last_assistant = next((t for t in reversed(turns) if t.role == "assistant"), None)
    said = verdict(turns)
    if base is None:
        first_user = next((t for t in turns if t.role == "user" and t.content.strip()), None)
        if first_user is None:
            return None
        return Episode(
            situation=_clip(first_user.content),
            outcome=_clip(last_assistant.content) if last_assistant else "",
            tools=tools,
            tags=[CONSOLIDATED_TAG],
            success=said,
        )
    if said is None and last_assistant is None:
        said = base.success  # the new turns neither answer nor judge: the old result stands
    return Episode(
        situation=base.situation,
        outcome=_clip(last_assistant.content) if last_assistant else base.outcome,
        tools=[*base.tools, *tools],
        skills=base.skills,
        tags=list(dict.fromkeys([*base.tags, CONSOLIDATED_TAG])),
        success=said,
    )


def episode_id_for(session: str) -> str:
    """The id of the episode consolidated from ``session`` (stable, so a retried run finds it)."""
    return f"session:{session}"


# ---- facts: one model call per session --------------------------------------------------------------

FACTS_PROMPT = """\
Below is the transcript of one agent session, turn by turn. Extract at most {max_facts} durable facts \
worth remembering after this session: stable preferences, decisions, names, configuration, \
constraints — things that will still be true next week. Leave out small talk, one-off steps, raw \
tool output and anything uncertain. Fewer is better; none is a fine answer.

Session: {session}
{turns}

Reply with a JSON array and nothing else, one object per fact, citing the numbers of the turns it \
comes from:
[{{"fact": "one short self-contained sentence", "turns": [1, 3]}}]
Reply [] when nothing is worth keeping."""


def facts_prompt(session: str, turns: Sequence[Turn], max_facts: int = MAX_FACTS) -> str:
    """The prompt for one session's facts; turns are numbered from 1 in the order given."""
    lines = [
        f"[{i}] {t.role}: {truncate_turn(' '.join(t.content.split()), PROMPT_TURN_CHARS)[0]}"
        for i, t in enumerate(turns, start=1)
    ]
    if sum(len(line) + 1 for line in lines) > PROMPT_TOTAL_CHARS:
        head: list[str] = []
        tail: list[str] = []
        budget = PROMPT_TOTAL_CHARS
        for i in range(len(lines)):
            # Alternate from both ends so the task (start) and the result (end) are kept.
            line = lines[i // 2] if i % 2 == 0 else lines[len(lines) - 1 - i // 2]
            if len(line) + 1 > budget:
                break
            budget -= len(line) + 1
            (head if i % 2 == 0 else tail).append(line)
        omitted = len(lines) - len(head) - len(tail)
        lines = [*head, f"[… {omitted} turns omitted …]", *reversed(tail)]
    return FACTS_PROMPT.format(max_facts=max_facts, session=session, turns="\n".join(lines))


_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)


def _json_array(text: str) -> list[Any] | None:
    """The JSON array in a model reply (also ``{"facts": [...]}``), or None."""
    if not isinstance(text, str):
        return None
    candidates = [text.strip(), *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for open_, close in (("[", "]"), ("{", "}")):
        first, last = text.find(open_), text.rfind(close)
        if 0 <= first < last:
            candidates.append(text[first : last + 1])
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            value = value.get("facts")
        if isinstance(value, list):
            return value
    return None


def parse_facts(reply: str, turns: Sequence[Turn], max_facts: int = MAX_FACTS) -> list[Fact] | None:
    """The facts in a model's reply, linked to ``turns`` (numbered from 1); None when the reply is
    not a JSON array of facts. Blank or over-long items are dropped; at most ``max_facts`` are kept.

    A fact citing no valid turn is linked to every turn shown to the model.
    """
    items = _json_array(reply)
    if items is None:
        return None
    facts: list[Fact] = []
    for item in items:
        cited: Any = []
        if isinstance(item, str):
            text = item
        elif isinstance(item, dict):
            text = next((item[k] for k in ("fact", "text", "content") if isinstance(item.get(k), str)), "")
            cited = item.get("turns", item.get("source_turns", []))
        else:
            continue
        text = " ".join(text.split())
        if not text or len(text) > MAX_FACT_CHARS:
            continue
        numbers = [n for n in (cited if isinstance(cited, list) else [cited])
                   if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= len(turns)]
        sources = [turns[n - 1].id for n in dict.fromkeys(numbers)] or [t.id for t in turns]
        facts.append(Fact(text, tuple(sources)))
        if len(facts) >= max_facts:
            break
    return facts


# ---- the job ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    session: str
    max_pk: int
    last_pk: int | None  # None: never consolidated
    facts_pk: int
    episode_id: str | None
    turns: int
    facts: int


@dataclass(frozen=True)
class _Mark:
    """How far a session is being consolidated: its new turns folded into ``episode_id``."""

    candidate: _Candidate
    episode_id: str
    new: list[Turn]

    @property
    def session(self) -> str:
        return self.candidate.session

    @property
    def last_pk(self) -> int:
        # The highest row number, not the latest time: a late writer's turn may be stamped earlier.
        return max(t.pk for t in self.new)

    @property
    def last_turn_id(self) -> str:
        return self.new[-1].id

    @property
    def turns(self) -> int:
        return self.candidate.turns + len(self.new)

    @property
    def when(self) -> datetime:
        return from_ms(max(t.created_ms for t in self.new))

    @property
    def metadata(self) -> dict[str, Any]:
        return {"consolidated_from": {"session": self.session, "turns": self.turns, "last_turn": self.last_turn_id}}


def consolidate(
    store: MemoryStore,
    *,
    session: str | None = None,
    since: str | datetime | None = None,
    model: TextModel | None = None,
    progress: Progress | None = None,
    idle: float | str | timedelta = 0,
    max_facts: int = MAX_FACTS,
) -> ConsolidationReport:
    """Turn every finished session's new transcript turns into its episode (and facts, with a model).

    :param session: only this session (it counts as finished whatever ``idle`` says).
    :param since: only sessions with a turn at or after this time (ISO-8601 or an age like ``7d``).
    :param model: when given, up to ``max_facts`` facts are extracted per session (one call each).
    :param progress: called as ``progress(done, total, session)`` after each session.
    :param idle: a session is finished once quiet this long: seconds, a timedelta or an age like
        ``10m``; 0 (the default) takes every session as it is now.
    :returns: what happened to each session that had something new.
    """
    if max_facts < 0:
        raise InvalidInputError(f"max_facts must be 0 or more, not {max_facts!r}")
    job = _Job(store, model, max_facts)
    candidates = job.candidates(session=session, since=since, idle=idle)
    report = ConsolidationReport()
    for done, candidate in enumerate(candidates, start=1):
        report.sessions.append(job.run(candidate))
        if progress is not None:
            progress(done, len(candidates), candidate.session)
    return report


class _Job:
    def __init__(self, store: MemoryStore, model: TextModel | None, max_facts: int) -> None:
        self.store = store
        self.experience = ExperienceStore(store)
        self.ledger = ConsolidationLedger(store)
        self.model = model if max_facts > 0 else None
        self.max_facts = max_facts

    def candidates(
        self, *, session: str | None, since: str | datetime | None, idle: float | str | timedelta
    ) -> list[_Candidate]:
        """Sessions with turns past their watermark (the episode's, or the facts' with a model)."""
        rows = self.ledger.sessions_past_watermark(
            with_facts=self.model is not None,
            session=self.store.scope.key(session),  # as stored: its pseudonym when it holds PII
            since_ms=None if since is None else to_ms(parse_time(since)),
            cutoff_ms=None if session is not None else _idle_cutoff(idle, now_ms()),
        )
        return [_Candidate(*row[:7]) for row in rows]

    def turns_after(self, session: str, pk: int) -> list[Turn]:
        return [
            Turn(pk, id_, role or "", content, tuple(json.loads(tags)), json.loads(metadata), created)
            for pk, id_, role, content, tags, metadata, created in self.ledger.turns_after(session, pk)
        ]

    # -- one session --

    def run(self, c: _Candidate) -> SessionResult:
        needs_episode = c.last_pk is None or c.max_pk > c.last_pk
        start = min(c.last_pk or 0, c.facts_pk) if self.model is not None else (c.last_pk or 0)
        turns = self.turns_after(c.session, start)
        new = [t for t in turns if t.pk > (c.last_pk or 0)]
        result = SessionResult(c.session, "unchanged", c.episode_id, len(new))
        if needs_episode and new:
            self._episode(c, new, result)
        if result.action == "skipped" or self.model is None:
            return result
        fresh = [t for t in turns if t.pk > c.facts_pk]
        if fresh:
            self._facts(c.session, fresh, result)
        return result

    def _episode(self, c: _Candidate, new: list[Turn], result: SessionResult) -> None:
        episode_id = c.episode_id or episode_id_for(c.session)
        mark = _Mark(c, episode_id, new)
        if self.ledger.recorded_by_run(episode_id):
            # The run itself recorded this session's episode (with its real tools and verdict): a
            # rebuild from the transcript could only be poorer. Keep it; just move the watermark.
            with self.store.transaction():
                self._record(mark)
            result.action, result.note = "skipped", "the run recorded its own episode; kept as it is"
            return
        base = None
        if c.last_pk is not None:
            try:
                base = self.experience.get(episode_id).episode
            except NotFoundError:
                # Someone deleted the episode on purpose: respect that, and move the watermark on.
                with self.store.transaction():
                    self._record(mark)
                result.action, result.note = "skipped", "its episode was deleted; not recreated"
                return
        episode = build_episode(new, base)
        if episode is None:
            result.action, result.note = "skipped", "no user turn yet to take the situation from"
            return
        try:
            created = self._create(episode, mark) if base is None else None
            if created is not None:
                result.action, episode = "created", created
            else:
                result.action, episode = "updated", self._replace(episode, mark)
        except _Conflict as conflict:
            result.action, result.note = "skipped", str(conflict)
            return
        result.episode_id, result.episode = episode_id, episode

    def _create(self, episode: Episode, mark: _Mark) -> Episode | None:
        """Save a new episode and record the watermark; returns it as stored, or None when one with
        its id already exists (an earlier run stopped between the two) for the caller to rewrite."""
        try:
            stored = self.experience.save(
                episode, id=mark.episode_id, session=mark.session, metadata=mark.metadata, created_at=mark.when
            )
        except DuplicateIdError:
            if self._drop_unlinked(mark.episode_id, mark.session):
                return self._create(episode, mark)
            return None
        with self.store.transaction():
            if not self._record(mark):
                raise _Conflict("another consolidation recorded this session meanwhile")
        return stored.episode

    def _replace(self, episode: Episode, mark: _Mark) -> Episode:
        """Point the episode at a new entry holding ``episode``, move the watermark and delete the old
        entry, in one transaction. The episode's row — its id, its pk and so the links from skills
        distilled from it — stays. Returns the episode as stored."""
        with self.store.transaction():
            entry = self.store.add(
                episode.render(), kind="episode", session=mark.session, tags=episode_tags(episode),
                source=EXPERIENCE_SOURCE, metadata=mark.metadata, id=new_id(), created_at=mark.when,
            )
            kept = Episode.parse(entry.content) or episode  # what the store kept (after any redaction)
            kept.tags = self.experience.kept_tags(episode.tags)
            row = self.ledger.episode_row_entry(mark.episode_id)
            if row is None:
                raise _Conflict(f"the id {mark.episode_id!r} is taken by an entry that is not an episode")
            if not self._record(mark):
                raise _Conflict("another consolidation recorded this session meanwhile")
            self.ledger.repoint_episode(mark.episode_id, entry.id, kept, to_ms(mark.when))
            if row[0] is not None:
                self.store.delete(row[0])
        self._drop_unlinked(mark.episode_id, mark.session)
        return kept

    def _drop_unlinked(self, episode_id: str, session: str) -> bool:
        """Delete consolidation episode entries of ``session`` that no episode row points at (left by
        a run that stopped halfway); True when the entry called ``episode_id`` was one of them."""
        stale = self.ledger.unlinked_episode_entries(session, EXPERIENCE_SOURCE)
        for entry_id in stale:
            self.store.delete(entry_id)
        return episode_id in stale

    def _record(self, mark: _Mark) -> bool:
        """Move the session's watermark (inside a transaction); False when another process moved
        it since the candidates were read."""
        return self.ledger.move_watermark(
            mark.session, seen=mark.candidate.last_pk, episode_id=mark.episode_id, last_pk=mark.last_pk,
            last_turn_id=mark.last_turn_id, turns=mark.turns,
        )

    def _facts(self, session: str, turns: list[Turn], result: SessionResult) -> None:
        assert self.model is not None
        try:
            reply = self.model.complete(facts_prompt(session, turns, self.max_facts), max_tokens=FACTS_MAX_TOKENS)
        except ModelError as exc:
            result.note = f"facts not extracted ({exc}); they will be tried again next run"
            return
        facts = parse_facts(reply, turns, self.max_facts)
        if facts is None:
            shown = " ".join(str(reply).split())[:80]
            result.note = f"the model's reply is not a JSON array of facts ({shown!r}); no facts written"
            facts = []
        last = max(turns, key=lambda t: t.pk)
        items = [
            {
                "id": f"fact:{last.id}:{i}",
                "content": fact.text,
                "kind": "fact",
                "session": session,
                "tags": [CONSOLIDATED_TAG],
                "source": CONSOLIDATION_SOURCE,
                "metadata": {"source_turns": list(fact.source_turns), "session": session},
            }
            for i, fact in enumerate(facts, start=1)
        ]
        with self.store.transaction():
            written = self.store.add_many(items, on_conflict="ignore") if items else []
            self.ledger.count_facts(session, up_to_pk=last.pk, written=len(written))
        result.facts = [e.id for e in written]


class _Conflict(Exception):
    """The session cannot be recorded now (another run got there first); the message says why."""


def _idle_cutoff(idle: float | str | timedelta, now_ms: int) -> int | None:
    """The latest last-turn time (ms) of a session that counts as finished; None when any does."""
    if isinstance(idle, timedelta):
        seconds = idle.total_seconds()
    elif isinstance(idle, str):
        return to_ms(parse_time(idle, now=from_ms(now_ms)))
    else:
        seconds = float(idle)
    if seconds < 0:
        raise InvalidInputError(f"idle must not be negative, got {idle!r}")
    return None if seconds == 0 else now_ms - int(seconds * 1000)

