"""What a session's transcript is worth keeping, derived by code: topic segments and facts.

:func:`derive` takes a session's turns (in order, with their vectors when the file has them) and
returns

* **segments** — the session cut where its subject changes (:mod:`.segments`), each written as a
  summary that reads on its own and is much shorter than its turns: its day, then what was said of
  substance (the facts first, then the statements worth most), in the third person with dates
  resolved (:mod:`.statements`) — no questions (what a user asked an assistant for is reported:
  :mod:`.requests`), no small talk;
* **facts** — the statements of a durable kind (:mod:`.facts`: where someone lives or works, diet,
  health, family, plans, preferences, a project's decisions and conventions …), else a turn's best
  event, from the people in the conversation (not an assistant's replies), each citing its turn
  and, when it answers the other speaker's question, that question.

Nothing here touches the store: :func:`~.consolidate.consolidate` writes what this returns.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np
import numpy.typing as npt

from .facts import chatter, correction, fact_about, fact_kind, open_thread, revises
from .requests import request
from .segments import segment
from .statements import Statement, as_the_team, content_words, display_name, sentences, statements
from .timephrases import format_day

__all__ = ["Derivation", "DerivedFact", "DerivedSegment", "SpokenTurn", "condensed", "derive", "fact_id", "segment_id"]

#: A turn gives at most this many facts, in the order said: its statements of a recognised kind
#: (:func:`.facts.fact_kind`), else its best event.
FACTS_PER_TURN = 3
#: A segment's summary holds at most this share of the words of its turns (its statements are
#: kept whole; the first always goes in): a summary is worth keeping only if it is much shorter.
SUMMARY_SHARE = 0.35
#: … but a few short turns still get a sentence's worth.
SUMMARY_MIN_WORDS = 12
#: … and a long segment no more than a reader takes in at once.
SUMMARY_MAX_WORDS = 400
#: … of which an assistant's advice takes at most this many words: a summary is for what people
#: said of themselves and asked for; the advice itself is in the turns it cites.
ADVICE_MAX_WORDS = 60
#: A first clause with this many content words says enough on its own (see :func:`condensed`).
CLAUSE_WORDS = 3
# An assistant's replies are advice and steps, not facts about anyone: they are kept in the segments …
_ASSISTANT_ROLE = "assistant"
_NOT_FACT_SOURCES = frozenset({_ASSISTANT_ROLE, "system", "tool"})
# … except what it states about the project it works on — a decision, a convention, the setup —
# when it speaks for the team ("we switched to argon2id") or answers a question about it ("How do
# deploys work here?" — "Deploys go out on Tuesdays …"); not the log of its own work ("The site is
# deployed and answers 200"). Never its events or corrections.
_PROJECT_KINDS = frozenset({"decision", "convention", "setup"})
_FOR_THE_TEAM = re.compile(r"^(?:we|we've|we're|our)\b", re.IGNORECASE)
_TEAM_SPEAKS = re.compile(r"^(?:we|our|let's|let us)\b", re.IGNORECASE)  # "We'll …", "Let's go with …"
# A question about the asker's own project ("How do deploys work here?", "what does our CI run?"):
# what an assistant answers to it is the project's. Asked for advice in general ("any tips for a
# moist cake?"), its answer ("Make sure not to overmix the batter") is no one's convention.
_ABOUT_THE_PROJECT = re.compile(r"\b(?:here|we|we're|we've|our|us|this (?:repo|repository|project|codebase|service|"
                                r"app|team|company)|the (?:repo|repository|project|codebase|team))\b", re.IGNORECASE)


@dataclass(frozen=True)
class SpokenTurn:
    """A transcript turn as derivation reads it: who said what, when."""

    id: str
    role: str
    content: str
    day: date | None


@dataclass(frozen=True)
class DerivedSegment:
    text: str
    source_turns: tuple[str, ...]


@dataclass(frozen=True)
class DerivedFact:
    text: str
    source_turns: tuple[str, ...]
    score: float
    # (what it is about, what it says): ("caroline/home", "porto"). A later fact about the same
    # thing that says something else replaces it; one that says the same repeats it.
    about: tuple[str, str] | None = None
    speaker: str = ""
    # (said wrong, right) when it corrects a value the speaker gave before ("it's the 5th, not the 4th"):
    # it is written as that fact with the value replaced, or not at all.
    corrects: tuple[str, str] | None = None
    # It presents itself as a change ("… now", "instead"): it replaces the speaker's fact it restates.
    revises: bool = False
    kind: str | None = None  # what kind of fact (:func:`.facts.fact_kind`): "decision", "home", "plan" …
    # It leaves something for later (:func:`.facts.open_thread`): a reminder, a to-do, a next step.
    open_thread: bool = False


@dataclass(frozen=True)
class Derivation:
    segments: list[DerivedSegment]  # those with something worth keeping, in order
    facts: list[DerivedFact]
    parts: list[range]  # every segment's turns (what a model is asked to summarise)


def segment_id(first_turn_id: str) -> str:
    """The id of the segment starting at a turn: stable, so a rerun after a crash finds it."""
    return f"segment:{first_turn_id}"


def fact_id(text: str, within: Sequence[str] = ()) -> str:
    """The id of a fact: the same words make the same id, so a fact said twice is stored once —
    once per project (``within``: its project tags), so a fact said in two projects is each one's."""
    words = " ".join(content_words(text))
    scope = "\0".join(sorted(within))
    digest = hashlib.sha256((f"{words}\0{scope}" if scope else words).encode()).hexdigest()[:20]
    return f"fact:{digest}"


def _speakers(turns: Sequence[SpokenTurn]) -> list[str]:
    return list(dict.fromkeys(t.role for t in turns if t.role and t.role != "tool"))


def _listener(role: str, people: Sequence[str]) -> str | None:
    """Who "you" is: the other speaker when exactly two people talk."""
    others = [p for p in people if p != role]
    return display_name(others[0]) if len(people) == 2 and others else None


def _statements(turn: SpokenTurn, people: Sequence[str]) -> list[Statement]:
    if turn.role == "tool" or not turn.content.strip():
        return []  # tool output is evidence for an episode, not something a person said
    return statements(turn.content, turn_id=turn.id, speaker=display_name(turn.role),
                      listener=_listener(turn.role, people), said_on=turn.day)


def _words(text: str) -> int:
    return len(text.split())


# Where a sentence goes on after what it states: an aside, a reaction, a reason ("…, and it was so
# powerful!", "… - it was good!", ", especially for desserts").
_CLAUSE_END = re.compile(r"(?:,? and it (?:was|is)|,? - |,? – |, (?:especially|which|but|so|though|because|since|"
                         r"as|like|just|and|or|even|plus)\b|!|;)")
_MARKUP = re.compile(r"\*\*|__|`|^(?:\d{1,2}[.)]|[-*•])\s+")  # a list item's number, bold, code marks
_FILLER = re.compile(r"\b(?:really|so|just|totally|pretty|super|very|actually|definitely|absolutely|kinda|"
                     r"sort of|kind of|literally|honestly|basically|quite|truly)\s+", re.IGNORECASE)


def condensed(text: str) -> str:
    """A statement as a note holds it: its first clause, if that says enough on its own, without
    intensifiers ("Caroline went to a LGBTQ support group on 7 May 2023 and it was so powerful." →
    "Caroline went to a LGBTQ support group on 7 May 2023.")."""
    text = _MARKUP.sub("", text)
    cut = _CLAUSE_END.search(text)
    if cut and len(content_words(text[:cut.start()])) >= CLAUSE_WORDS:
        text = text[:cut.start()]
    text = _FILLER.sub("", text).strip(" ,.!")
    return text[:1].upper() + text[1:] + "." if text else text


def _of_substance(statement: Statement, kind: str | None) -> bool:
    """A fact, or a statement worth something that is not chatter: what a summary may hold."""
    return kind is not None or (statement.score > 0 and not chatter(statement.said, statement.listener))


def _account(turns: Sequence[SpokenTurn], said: Sequence[tuple[Statement, str | None]]) -> str:
    """A segment as a reader would note it (``said``: its statements of substance, with their
    kinds): who and when, then what was said, in the order said, within :data:`SUMMARY_SHARE` of
    its turns' words, an assistant's advice within :data:`ADVICE_MAX_WORDS` of them — each turn's
    best statement first (a fact before the rest, people before an assistant), then each one's
    second …, each cut to its first clause (:func:`condensed`)."""
    candidates = range(len(said))
    advisers = {t.id for t in turns if t.role in _NOT_FACT_SOURCES}
    whole = min(max(SUMMARY_SHARE * sum(_words(t.content) for t in turns), SUMMARY_MIN_WORDS), SUMMARY_MAX_WORDS)
    budget = {False: whole, True: min(whole, ADVICE_MAX_WORDS)}  # people's words; the advice's, within the whole

    def worth(i: int) -> tuple[bool, bool, float]:  # what people said of themselves before an assistant's advice
        return said[i][0].turn_id in advisers, said[i][1] is None, -said[i][0].score

    # Each turn's best first, then each turn's second …: what the segment covers, not one turn's all.
    by_turn: dict[str, list[int]] = {}
    for i in sorted(candidates, key=worth):
        by_turn.setdefault(said[i][0].turn_id, []).append(i)
    nth = {i: n for ids in by_turn.values() for n, i in enumerate(ids)}
    ranked = sorted(candidates, key=lambda i: (nth[i], *worth(i)))
    noted = {i: condensed(said[i][0].text) for i in candidates}
    chosen: list[int] = []
    size = {False: 0.0, True: 0.0}  # people's words, the advice's
    for i in ranked:
        words, advised = _words(noted[i]), said[i][0].turn_id in advisers
        if chosen and (size[advised] + words > budget[advised] or size[False] + size[True] + words > whole):
            continue
        chosen.append(i)
        size[advised] += words
    text = " ".join(noted[i] for i in sorted(chosen))
    who = _names(_speakers(turns))
    day = next((t.day for t in turns if t.day is not None), None)
    head = who if day is None else f"{who} on {format_day(day)}"
    return f"{head[:1].upper()}{head[1:]}: {text}"


def _names(people: Sequence[str]) -> str:
    shown = [display_name(p) for p in people]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def derive(turns: Sequence[SpokenTurn], vectors: npt.NDArray[np.float32] | None = None, *,
           in_project: bool = False) -> Derivation:
    """The segments and facts of a session's turns (in order; ``vectors`` row for row, or None).
    ``in_project``: the session was held in a project (a coding agent's, tagged with its
    repository), so an assistant's answer to any question there may state the project's facts."""
    people = _speakers(turns)
    asked = [i > 0 and turns[i - 1].role != turn.role and _asks(turns[i - 1].content) for i, turn in enumerate(turns)]
    of_the_project = [asked[i] and (in_project or _ABOUT_THE_PROJECT.search(turns[i - 1].content) is not None)
                      for i in range(len(turns))]
    said = [[_for_the_team(s, _kind(turn.role, s, people, answers=of_the_project[i]), turn.day)
             for s in _statements(turn, people)]
            for i, turn in enumerate(turns)]
    asked_for = [_requests(turn, people, said[i]) for i, turn in enumerate(turns)]
    segments = []
    parts = segment([t.content for t in turns], vectors)
    for part in parts:
        kept = [pair for i in part for pair in (*(p for p in said[i] if _of_substance(*p)), *asked_for[i])]
        if not kept:
            continue  # greetings and questions only: nothing to keep
        segments.append(DerivedSegment(_account([turns[i] for i in part], kept), tuple(turns[i].id for i in part)))
    facts = []
    for i, found in enumerate(said):
        if turns[i].role in _NOT_FACT_SOURCES and not any(kind for _, kind in found):
            continue
        sources = (turns[i - 1].id, turns[i].id) if asked[i] else (turns[i].id,)
        facts += _facts(found, sources, personal=turns[i].role not in _NOT_FACT_SOURCES)
    return Derivation(segments, facts, parts)


def _requests(turn: SpokenTurn, people: Sequence[str],
              said: Sequence[tuple[Statement, str | None]]) -> list[tuple[Statement, str | None]]:
    """What a person asked an assistant for in this turn, reported (:mod:`.requests`): a summary's
    note of it. Questions between people, and an assistant's own, are not reported."""
    if turn.role in _NOT_FACT_SOURCES or _ASSISTANT_ROLE not in people:
        return []
    listener = display_name(_ASSISTANT_ROLE)
    found = (request(s.said, turn_id=turn.id, speaker=s.speaker, listener=listener, said_on=turn.day) for s, _ in said)
    return [(r, None) for r in found if r is not None]


def _for_the_team(statement: Statement, kind: str | None, day: date | None) -> tuple[Statement, str | None]:
    """A project's decision, convention or setup said with "we" or "let's" is the team's (see
    :func:`.statements.as_the_team`); any other statement stays the speaker's."""
    if kind in _PROJECT_KINDS and _TEAM_SPEAKS.match(statement.said):
        return as_the_team(statement, day), kind
    return statement, kind


def _asks(text: str) -> bool:
    """True when a turn asks something: one of its sentences is a question ("How do deploys work
    here again? I always forget.")."""
    return any(sentence.endswith("?") for sentence in sentences(text))


def _kind(role: str, statement: Statement, people: Sequence[str], *, answers: bool) -> str | None:
    """The kind of fact a statement is (:func:`.facts.fact_kind`), or None: what an assistant says
    counts only when it states the project's decisions, conventions or setup for the team or in
    answer to a question about the project (``answers``)."""
    if role in ("system", "tool"):
        return None
    kind = fact_kind(statement.said, listener=_listener(role, people))
    if role != "assistant":
        # What someone left for later is kept until it is done, whatever else it is.
        return "plan" if kind in (None, "event") and open_thread(statement.said) else kind
    return kind if kind in _PROJECT_KINDS and (answers or _FOR_THE_TEAM.match(statement.said)) else None


def _facts(found: Sequence[tuple[Statement, str | None]], sources: tuple[str, ...], *,
           personal: bool = True) -> list[DerivedFact]:
    """The facts among a turn's statements (with their kinds): those of a recognised kind, else its
    best event; and the corrections of a value said before. ``personal`` False (an assistant's
    turn): its typed statements only."""
    typed = [(s, kind) for s, kind in found if kind not in (None, "event")]
    events = sorted(((s, kind) for s, kind in found if kind == "event"), key=lambda pair: -pair[0].score)
    chosen = typed[:FACTS_PER_TURN] or (events[:1] if personal else [])
    facts = [DerivedFact(s.text, sources, s.score, fact_about(s.text, s.speaker, kind), s.speaker, None,
                         revises(s.said), kind, open_thread(s.said)) for s, kind in chosen]
    for s, _ in found if personal else ():
        fixed = correction(s.said)
        if fixed is not None:
            facts.append(DerivedFact(s.text, sources, s.score, None, s.speaker, fixed))
    return facts
