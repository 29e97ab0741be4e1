"""Offline consolidation: transcripts become topic segments, facts and, for agent runs, episodes.

:func:`consolidate` reads the transcript turns (entries of kind ``turn`` with a session, whatever
their roles: speaker names, user/assistant, tool) and, per session, incrementally:

* **derives** (:mod:`.derive`) its topic segments — each one ``summary`` entry that reads on its
  own — and its facts — ``fact`` entries, standalone statements in the third person with dates
  resolved. Every derived entry has source ``consolidation``, the tag ``consolidated``, the
  session, ``metadata.source_turns`` (the turns it was made from) and the time of its first source
  turn as its own (when it became true). A fact is stored once (its id comes from its words); a
  fact about something that changes (where someone lives, works, who their partner is, whether they
  like something) supersedes the current fact about it, which stays in its history and stops being
  true at the new one's time (``recall(as_of=…)``). Derived entries have their own recall lane,
  are not turns of their session, and are forgotten with the turns they cite.
* keeps **one episode** up to date when the session is an agent's run (it has tool turns or states
  a result) — built by code: situation (the first ``user`` turn), tools (each ``tool`` turn's,
  in order), outcome (the last ``assistant`` turn) and success, inferred where the turns show it
  clearly (:mod:`.outcomes`: a result tag or verdict line, a test summary or exit status in a tool
  result, the user confirming or rejecting) and recorded with the turn that showed it
  (``metadata.outcome``); otherwise unknown — never guessed from tone. It cites every turn it was
  built from in ``metadata.source_turns`` too, so forgetting any of them forgets it.

With a :class:`~harness_mem.providers.textmodel.TextModel`, the model writes the segments' summaries
and the facts and decides whether a fact adds, updates or repeats a stored one, in at most two
validated calls per session (:mod:`.model_consolidation`); replies it cannot use fall back to the
rules' text, a failed call leaves the session for the next run.

Sessions are *finished* when they have been quiet for ``idle`` (default 0: every session with turns;
``--idle 10m`` leaves the ones still active alone).

**Idempotent and incremental.** Two watermarks per session, each the highest turn row number
folded in (row numbers grow as rows are written, so late writers are found too): the derived
entries' one (``derivations``, migration 0010) and the episode's (``consolidations``, 0005). A
second run with nothing new reads one aggregate query and writes nothing. Segments and facts are
written with their watermark in one transaction, under ids derived from their first turn and from
their words, so a run killed anywhere leaves nothing half-written and the next run neither skips nor
repeats. When a session receives turns after it was consolidated, the new turns get their own
segments and its episode is **updated in place** (same id, so links from skills survive; new tools
appended, a new assistant turn replaces the outcome, the result re-decided from the new turns).
An episode's id is derived from its session (``session:<id>``), so a run interrupted between
writing it and recording it finds it on the next run and rewrites it instead of adding another.
An episode forgotten because a turn it cites was forgotten has its watermark set back to 0: the
next run builds it again, under the same id, from the turns that remain.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from ..errors import DuplicateIdError, InvalidInputError, ModelError, NotFoundError
from ..models import Entry, counted, from_ms, new_id, now_ms, parse_time, to_ms
from ..providers.textmodel import TextModel
from ..storage import DERIVED_SOURCE
from ..store import MemoryStore
from .derive import Derivation, DerivedFact, SpokenTurn, derive, fact_id, segment_id
from .episode import NO_TOOLS, Episode
from .facts import frame_words, restates
from .ledger import ConsolidationLedger
from .model_consolidation import (
    DECISIONS_MAX_TOKENS,
    DIGEST_MAX_TOKENS,
    NEAREST_SHOWN,
    Decision,
    ask,
    decisions_prompt,
    digest_prompt,
    parse_decisions,
    parse_digest,
)
from .outcomes import Outcome, infer_outcome
from .statements import TEAM
from .store import EXPERIENCE_SOURCE, ExperienceStore, episode_tags
from .transcript import DEFAULT_MAX_CHARS, RESULT_TAGS, truncate_turn

__all__ = [
    "CONSOLIDATED_TAG",
    "CONSOLIDATION_SOURCE",
    "ConsolidationReport",
    "SessionResult",
    "Turn",
    "build_episode",
    "consolidate",
    "episode_id_for",
    "verdict",
]

CONSOLIDATED_TAG = "consolidated"
PROJECT_TAG_PREFIX = "project:"
CONSOLIDATION_SOURCE = DERIVED_SOURCE
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
    segments: list[str] = field(default_factory=list)  # ids of the topic segments written
    facts_repeated: int = 0  # facts derived that were already stored (the same words)
    facts_updated: int = 0  # of ``facts``, those that superseded an older fact about the same thing
    model_rejected: bool = False  # the model's replies failed validation twice: the rules wrote it
    texts: dict[str, str] = field(default_factory=dict)  # what each segment and fact says, by id

    def written(self) -> list[tuple[str, str]]:
        """(kind, text) of each segment and fact, segments first: what was (or would be) written."""
        return ([("summary", self.texts[i]) for i in self.segments if i in self.texts]
                + [("fact", self.texts[i]) for i in self.facts if i in self.texts])

    def describe(self) -> str:
        """One readable line (the CLI prints these)."""
        parts = [f"{self.action:<9}", self.session]
        if self.episode is not None:
            outcome = {True: "success", False: "failure", None: "result unknown"}[self.episode.success]
            parts.append(
                f"→ {self.episode_id}  ({self.new_turns} new turns, {len(self.episode.tools)} tool calls, {outcome})"
            )
        if self.segments or self.facts or self.facts_repeated:
            parts.append(f"{counted(len(self.segments), 'segment')}, {counted(len(self.facts), 'fact')}"
                         + (f", {self.facts_updated} updating older ones" if self.facts_updated else "")
                         + (f", {self.facts_repeated} already known" if self.facts_repeated else ""))
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
            "facts_repeated": self.facts_repeated,
            "facts_updated": self.facts_updated,
            "segments": list(self.segments),
            "texts": dict(self.texts),
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
    def derived(self) -> int:
        return self._count("derived")

    @property
    def facts(self) -> int:
        return sum(len(s.facts) for s in self.sessions)

    @property
    def facts_repeated(self) -> int:
        return sum(s.facts_repeated for s in self.sessions)

    @property
    def facts_updated(self) -> int:
        return sum(s.facts_updated for s in self.sessions)

    @property
    def segments(self) -> int:
        return sum(len(s.segments) for s in self.sessions)

    @property
    def notes(self) -> list[str]:
        return [f"session {s.session}: {s.note}" for s in self.sessions if s.note]

    def summary(self) -> str:
        """One line: what changed."""
        return (
            f"{counted(len(self.sessions), 'session')}: {counted(self.segments, 'segment')},"
            f" {counted(self.facts, 'fact')} ({self.facts_updated} updating older ones, {self.facts_repeated}"
            " already known);"
            f" {counted(self.created, 'episode')} created, {self.updated} updated; {self.skipped} skipped"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "sessions": len(self.sessions),
            "created": self.created,
            "updated": self.updated,
            "unchanged": self.unchanged,
            "skipped": self.skipped,
            "derived": self.derived,
            "segments": self.segments,
            "facts": self.facts,
            "facts_updated": self.facts_updated,
            "facts_repeated": self.facts_repeated,
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


def is_agent_run(turns: Sequence[Turn]) -> bool:
    """True when a session is an agent's run (it used a tool or states a result), not a chat."""
    return any(t.role == "tool" for t in turns) or verdict(turns) is not None


def _clip(text: str) -> str:
    return truncate_turn(text.strip(), DEFAULT_MAX_CHARS)[0]


def build_episode(turns: Sequence[Turn], base: Episode | None = None, outcome: Outcome | None = None) -> Episode | None:
    """The episode for ``turns`` (in order), or — with ``base`` — ``base`` extended by them.

    Its success is ``outcome``'s (see :func:`~.outcomes.infer_outcome`), else the turns' result tag
    or verdict line (the base's result carried over when they add no answer and say nothing). None
    when there is no base and no user turn to take the situation from.
    """
    tools = [name for name in (t.tool for t in turns) if name]
    last_assistant = next((t for t in reversed(turns) if t.role == "assistant"), None)
    said = outcome.success if outcome is not None else verdict(turns)
    if outcome is None and base is not None and said is None and last_assistant is None:
        said = base.success  # the new turns neither answer nor judge: the old result stands
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
    return Episode(
        situation=base.situation,
        outcome=_clip(last_assistant.content) if last_assistant else base.outcome,
        tools=[*base.tools, *tools],
        skills=base.skills,
        tags=list(dict.fromkeys([*base.tags, CONSOLIDATED_TAG])),
        success=said,
    )


def cited_turns(metadata: dict[str, Any]) -> tuple[str, ...]:
    """The turn ids a derived entry's ``metadata.source_turns`` cites (none when it holds no list)."""
    cited = metadata.get("source_turns")
    return tuple(t for t in cited if isinstance(t, str)) if isinstance(cited, list) else ()


def episode_id_for(session: str) -> str:
    """The id of the episode consolidated from ``session`` (stable, so a retried run finds it)."""
    return f"session:{session}"


# ---- the job ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    session: str
    max_pk: int
    last_pk: int | None  # None: no episode yet; 0: its episode is to be built again
    episode_id: str | None
    turns: int
    facts: int
    derived_pk: int  # 0: nothing derived yet


@dataclass(frozen=True)
class _Mark:
    """How far a session is being consolidated: its new turns folded into ``episode_id``."""

    candidate: _Candidate
    episode_id: str
    new: list[Turn]
    outcome: Outcome | None = None  # the run's result, the turn that showed it and why
    cited: tuple[str, ...] = ()  # the turns the stored episode was already built from

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
        made: dict[str, Any] = {
            "consolidated_from": {"session": self.session, "turns": self.turns, "last_turn": self.last_turn_id},
            # The provenance every derived entry keeps: forgetting any of these turns forgets the episode.
            "source_turns": list(dict.fromkeys([*self.cited, *(t.id for t in self.new)])),
        }
        return made if self.outcome is None else {**made, "outcome": self.outcome.to_dict()}


def consolidate(
    store: MemoryStore,
    *,
    session: str | None = None,
    since: str | datetime | None = None,
    model: TextModel | None = None,
    progress: Progress | None = None,
    idle: float | str | timedelta = 0,
    dry_run: bool = False,
) -> ConsolidationReport:
    """Turn every finished session's new transcript turns into its episode (and facts, with a model).

    :param session: only this session (it counts as finished whatever ``idle`` says).
    :param since: only sessions with a turn at or after this time (ISO-8601 or an age like ``7d``).
    :param model: when given, the model writes the segments' summaries and the facts (at most two
        calls per session: see :mod:`.model_consolidation`).
    :param progress: called as ``progress(done, total, session)`` after each session.
    :param idle: a session is finished once quiet this long: seconds, a timedelta or an age like
        ``10m``; 0 (the default) takes every session as it is now.
    :param dry_run: derive and report, write nothing (no segment, fact, episode or watermark).
    :returns: what happened to each session that had something new.
    """
    job = _Job(store, None if dry_run else model, dry_run=dry_run)
    report = ConsolidationReport()
    with store.stored_forms():  # the ids read here are kept (provenance, episodes): as stored
        candidates = job.candidates(session=session, since=since, idle=idle)
        for done, candidate in enumerate(candidates, start=1):
            report.sessions.append(job.run(candidate))
            if progress is not None:
                progress(done, len(candidates), candidate.session)
    return report


class _Job:
    def __init__(self, store: MemoryStore, model: TextModel | None, *, dry_run: bool = False) -> None:
        self.store = store
        self.dry_run = dry_run
        self.experience = ExperienceStore(store)
        self.ledger = ConsolidationLedger(store)
        self.model = model
        self.projects: list[str] = []  # the project tags of the session being derived

    def candidates(
        self, *, session: str | None, since: str | datetime | None, idle: float | str | timedelta
    ) -> list[_Candidate]:
        """Sessions with turns past their watermark (the episode's, or the facts' with a model)."""
        rows = self.ledger.sessions_past_watermark(
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
        # A session never made an episode is read whole: a tool turn from an earlier run makes it an
        # agent's run, whose episode starts at its first turn.
        start = min(c.derived_pk, c.last_pk or 0)
        turns = self.turns_after(c.session, start)
        new = [t for t in turns if t.pk > (c.last_pk or 0)]
        result = SessionResult(c.session, "unchanged", c.episode_id, len(new))
        # The episode first: a run stopped after it but before the derived entries is a candidate
        # again (its derived watermark has not moved), and the episode's own bookkeeping repairs it.
        if needs_episode and new and not self.dry_run and (c.episode_id is not None or is_agent_run(new)):
            self._episode(c, new, result)
        fresh = [t for t in turns if t.pk > c.derived_pk]
        if fresh:
            self._derive(c, fresh, result)
        return result

    def _vectors(self, turns: Sequence[Turn]) -> Any:
        """The turns' stored vectors, row for row; None unless every turn has one."""
        if self.store.keyword_only:
            return None
        found = self.store.storage.stored_vectors([t.pk for t in turns])
        if len(found) < len(turns):
            return None
        return np.stack([found[t.pk] for t in turns])

    def _derive(self, c: _Candidate, turns: list[Turn], result: SessionResult) -> None:
        """Write the topic segments and facts of the session's turns past its derived watermark."""
        spoken = [SpokenTurn(t.id, t.role, t.content, from_ms(t.created_ms).date()) for t in turns]
        # What was derived belongs to the project its turns were said in (a coding agent's hooks tag
        # each turn with its repository): recall for that project finds it, another project's does
        # not, and it revises only that project's facts ("MySQL for billing" elsewhere is no correction).
        self.projects = sorted({tag for t in turns for tag in t.tags if tag.startswith(PROJECT_TAG_PREFIX)})
        derivation = derive(spoken, self._vectors(turns), in_project=bool(self.projects))
        when = {t.id: from_ms(t.created_ms) for t in turns}
        segments = [self._item(c.session, "summary", part.text, part.source_turns, segment_id(part.source_turns[0]), when)
                    for part in derivation.segments]
        facts = [self._item(c.session, "fact", fact.text, fact.source_turns, fact_id(fact.text, self.projects), when,
                            fact.about,
                            fact_kind=fact.kind, open_thread=fact.open_thread)
                 for fact in derivation.facts]
        # How the rules' facts relate to stored ones, by id: a correction of a value, a revision.
        changes = {item["id"]: fact for item, fact in zip(facts, derivation.facts, strict=True)
                   if fact.corrects is not None or (fact.revises and fact.about is None)}
        decided: dict[str, Decision] = {}  # by fact id
        if self.model is not None:
            try:
                written = self._model_writes(c.session, spoken, derivation, when, result)
            except ModelError as exc:
                result.note = f"not consolidated ({exc}); it will be tried again next run"
                return
            if written is not None:
                segments, facts, decided = written
                changes = {}
        facts = list({item["id"]: item for item in facts}.values())  # said twice in one session: once
        for item in (*segments, *facts):
            item["tags"] = [*item["tags"], *(p for p in self.projects if p not in item["tags"])]
        if self.dry_run:
            result.action = "derived" if result.action == "unchanged" else result.action
            result.segments = [str(item["id"]) for item in segments]
            result.facts = [str(item["id"]) for item in facts]
            result.texts = {str(item["id"]): str(item["content"]) for item in (*segments, *facts)}
            return
        try:
            with self.store.transaction():
                kept_segments = self.store.add_many(segments, on_conflict="ignore")
                # Facts nothing was decided about are new: written in one batch; the others one by one,
                # in the order said (a correction may correct a fact of the same session).
                def settled(item: dict[str, Any]) -> bool:
                    return item["id"] in decided or "about" in item["metadata"] or item["id"] in changes

                kept_facts = self.store.add_many([item for item in facts if not settled(item)], on_conflict="ignore")
                for item in facts:
                    if item["id"] in changes:
                        entry, updated = self._change_fact(item, changes[item["id"]])
                        if entry is not None:
                            kept_facts.append(entry)
                            result.facts_updated += updated
                    elif settled(item):
                        entry, updated = self._write_fact(item, decided.get(item["id"]))
                        if entry is not None:
                            kept_facts.append(entry)
                            result.facts_updated += updated
                if not self.ledger.move_derived_watermark(
                    c.session, seen=c.derived_pk, derived_pk=max(t.pk for t in turns),
                    segments=len(kept_segments), facts=len(kept_facts),
                ):
                    raise _Conflict("another consolidation derived from this session meanwhile")
        except _Conflict as conflict:
            result.note = str(conflict)
            return
        if result.action == "unchanged":
            result.action = "derived"
        result.segments = [e.id for e in kept_segments]
        result.facts = [e.id for e in kept_facts]
        result.texts = {e.id: e.content for e in (*kept_segments, *kept_facts)}
        result.facts_repeated = len(facts) - len(kept_facts)

    @staticmethod
    def _item(session: str, kind: str, text: str, sources: Sequence[str], id_: str, when: dict[str, datetime],
              about: tuple[str, str] | None = None, *, fact_kind: str | None = None,
              open_thread: bool = False) -> dict[str, Any]:
        """A derived entry to write: it cites its turns, and holds from the time of the first. A
        fact says what kind it is (``metadata.fact_kind``) and whether it leaves something for later
        (``metadata.open_thread``): what a coding agent's next session is told first."""
        item: dict[str, Any] = {
            "id": id_, "content": text, "kind": kind, "session": session, "tags": [CONSOLIDATED_TAG],
            "source": CONSOLIDATION_SOURCE, "metadata": {"source_turns": list(sources)},
            "created_at": min(when[t] for t in sources),
        }
        if about is not None:
            item["tags"].append(about_tag(about[0]))
            item["metadata"]["about"] = {"key": about[0], "value": about[1]}
        if fact_kind is not None:
            item["metadata"]["fact_kind"] = fact_kind
        if open_thread:
            item["metadata"]["open_thread"] = True
        return item

    def _model_writes(
        self, session: str, spoken: list[SpokenTurn], derivation: Derivation, when: dict[str, datetime], result: SessionResult,
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Decision]] | None:
        """The model's segments and facts (and its decisions about stored facts near them); None
        when its replies were rejected twice (the rules' text is written instead, and counted)."""
        assert self.model is not None
        parts = derivation.parts
        digest, why = ask(self.model, digest_prompt(spoken, parts),
                          lambda reply: parse_digest(reply, len(spoken), len(parts)), max_tokens=DIGEST_MAX_TOKENS)
        if digest is None:
            result.model_rejected = True
            result.note = f"the model's replies were rejected ({why}); the rules' segments and facts were written"
            return None
        ids = [t.id for t in spoken]
        segments = [self._item(session, "summary", summary.text, [ids[i] for i in part], segment_id(ids[part[0]]), when)
                    for summary, part in zip(digest.segments, parts, strict=True)]
        facts = [self._item(session, "fact", fact.text, [ids[n - 1] for n in dict.fromkeys(fact.turns)],
                            fact_id(fact.text, self.projects), when)
                 for fact in digest.facts]
        texts = [item["content"] for item in facts]
        # The new facts embedded in one model call, not one per recall.
        semantic = texts and self.store.embedder is not None and not self.store.keyword_only
        vectors = self.store.embed_queries(texts) if semantic else None
        nearest = [[(h.entry.id, h.entry.content) for h in self.store.recall(
                        text, NEAREST_SHOWN, kind="fact", any_tags=self.projects,
                        query_vector=None if vectors is None else vectors[i])]
                   for i, text in enumerate(texts)]
        decided: dict[str, Decision] = {}
        if any(nearest):
            found, why = ask(self.model, decisions_prompt(texts, nearest),
                             lambda reply: parse_decisions(reply, nearest), max_tokens=DECISIONS_MAX_TOKENS)
            if found is None:  # every fact is added: nothing is merged on a guess
                result.note = f"the model's decisions were rejected ({why}); its facts were added as new"
            decided = {facts[number - 1]["id"]: decision for number, decision in (found or {}).items()}
        return segments, facts, decided

    def _write_fact(self, item: dict[str, Any], decision: Decision | None) -> tuple[Entry | None, bool]:
        """Write one fact as decided (the model's decision, or the rules' for facts about something
        that changes); returns the entry written (None for a repeat) and whether it corrects another."""
        if decision is not None and decision.action == "repeat":
            return None, False
        if decision is not None and decision.action == "update" and decision.existing is not None:
            return self._correct(decision.existing, item), True
        if decision is None and "about" in item["metadata"]:
            return self._set_fact(item)
        return next(iter(self.store.add_many([item], on_conflict="ignore")), None), False

    def _correct(self, old_id: str, item: dict[str, Any]) -> Entry:
        new_id_ = item["id"]
        if self._exists(new_id_):
            # Said before and replaced since ("Lisbon", "Porto", "Lisbon" again): a new version of its own.
            new_id_ = f"{new_id_}:{hashlib.sha256(item['metadata']['source_turns'][-1].encode()).hexdigest()[:8]}"
            if self._exists(new_id_):
                return self.store.get(new_id_)
        corrected = self.store.supersede(
            old_id, item["content"], id=new_id_, created_at=item["created_at"], metadata=item["metadata"],
            tags=item["tags"], source=item["source"], session=item["session"],
        )
        return self.store.get(corrected.id)

    def _exists(self, id_: str) -> bool:
        try:
            self.store.get(id_)
        except NotFoundError:
            return False
        return True

    def _change_fact(self, item: dict[str, Any], fact: DerivedFact) -> tuple[Entry | None, bool]:
        """Write a fact that changes one the speaker stated before: a correction of its value ("it's
        the 5th, not the 4th") supersedes the speaker's latest fact holding the wrong value, with the
        right one in its place (nothing is written when there is none); a revision ("we'll use MySQL
        for billing instead") supersedes the fact it restates with one thing changed, else is added."""
        if fact.corrects is not None:
            wrong, right = fact.corrects
            said = re.compile(rf"(?<![\w-]){re.escape(wrong)}(?:st|nd|rd|th)?(?![\w-])", re.IGNORECASE)
            old = next((e for e in self._speakers_facts(fact.speaker, wrong) if said.search(e.content)), None)
            if old is None:
                return None, False
            text = said.sub(right, old.content)
            fixed = {**item, "content": text, "id": fact_id(text, self.projects),
                     "metadata": {**old.metadata, "source_turns": item["metadata"]["source_turns"]},
                     "tags": list(old.tags)}
            return self._correct(old.id, fixed), True
        old = next((e for e in self._speakers_facts(fact.speaker, frame_words(item["content"], fact.speaker))
                    if any(restates(e.content, item["content"], subject) for subject in (fact.speaker, TEAM))), None)
        if old is None:
            return next(iter(self.store.add_many([item], on_conflict="ignore")), None), False
        if old.id == item["id"]:
            return None, False
        return self._correct(old.id, item), True

    def _speakers_facts(self, speaker: str, words: str) -> list[Entry]:
        """The current facts that name ``speaker``, or the team a speaker decides for ("Let's keep the
        retry count at three" is the team's; "make it five, not three" changes it), and share words
        with ``words``, best first."""
        hits = self.store.recall(words, 10, mode="keyword", kind="fact", any_tags=self.projects)
        name = re.compile(rf"(?<!\w)(?:{re.escape(speaker)}|{re.escape(TEAM)})(?!\w)", re.IGNORECASE)
        return [h.entry for h in hits if name.search(h.entry.content)]

    def _set_fact(self, item: dict[str, Any]) -> tuple[Entry | None, bool]:
        """Write a fact about something that can change (where someone lives, …): added when nothing
        is known of it, a repeat (None) when the current fact says the same, else a correction that
        supersedes the current fact — kept in its history, true until this one's time. Returns the
        entry written and whether it is a correction."""
        about = item["metadata"]["about"]
        # The first fact about something takes an id made from what it is about; the current one is
        # the end of that fact's correction chain: two lookups by id, whatever the file's size.
        # In a project, its own chain: "we use MySQL for billing" in one repository corrects nothing
        # said in another.
        first = about_id(about["key"] if not self.projects else "\0".join([about["key"], *self.projects]))
        try:
            current = self.store.history(first)[-1]
        except NotFoundError:
            return next(iter(self.store.add_many([{**item, "id": first}], on_conflict="ignore")), None), False
        if current.superseded_by is not None or current.metadata.get("about", {}).get("value") == about["value"]:
            return None, False  # said again (or its chain ends in a forgotten fact: nothing to correct)
        return self._correct(current.id, item), True

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
        base = previous = None
        if c.last_pk:  # 0: built again from the start (a turn it cited was forgotten, and it with it)
            try:
                stored = self.experience.get(episode_id)
            except NotFoundError:
                # Someone deleted the episode on purpose: respect that, and move the watermark on.
                with self.store.transaction():
                    self._record(mark)
                result.action, result.note = "skipped", "its episode was deleted; not recreated"
                return
            base = stored.episode
            recorded = self.store.get(stored.entry_id).metadata if stored.entry_id else {}
            previous = (Outcome.from_dict(recorded.get("outcome"))
                        or Outcome(base.success, None, "recorded before outcomes were inferred"))
            mark = replace(mark, cited=cited_turns(recorded))
        outcome = infer_outcome(new, before=previous)
        mark = replace(mark, outcome=outcome)
        episode = build_episode(new, base, outcome)
        if episode is None:
            result.action, result.note = "skipped", "no user turn yet to take the situation from"
            return
        try:
            created = self._create(episode, mark) if base is None else None
            if created is not None:
                result.action, episode = "created", created
            else:
                result.action, episode = "updated", self._replace_episode(episode, mark)
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

    def _replace_episode(self, episode: Episode, mark: _Mark) -> Episode:
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


def about_id(key: str) -> str:
    """The id of the first fact about ``key`` (``caroline/home``), where its correction chain starts."""
    return "about:" + hashlib.sha256(key.encode()).hexdigest()[:20]


def about_tag(key: str) -> str:
    """The tag a fact about ``key`` (``caroline/home``) carries, to find the current one."""
    return f"about:{key}"


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

