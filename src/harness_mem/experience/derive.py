"""What a session's transcript is worth keeping, derived by code: topic segments and facts.

:func:`derive` takes a session's turns (in order, with their vectors when the file has them) and
returns

* **segments** — the session cut where its subject changes (:mod:`.segments`), each written as a
  short account that reads on its own: who talked, on which day, about what, then what each of them
  said of substance, in the third person with dates resolved (:mod:`.statements`);
* **facts** — the statements worth keeping on their own (the best of each turn that says something
  durable, from the people in the conversation, not an assistant's replies), each citing its turn
  and, when it answers the other speaker's question, that question.

Nothing here touches the store: :func:`~.consolidate.consolidate` writes what this returns.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

import numpy as np
import numpy.typing as npt

from .segments import segment
from .facts import FACT_SCORE, correction, fact_about, fact_kind, revises
from .statements import Statement, content_words, display_name, statements
from .timephrases import format_day

__all__ = ["FACT_SCORE", "Derivation", "DerivedFact", "DerivedSegment", "SpokenTurn", "derive", "fact_about", "fact_id",
           "segment_id"]

#: A turn gives at most this many facts, in the order said: its statements of a recognised kind
#: (:func:`.facts.fact_kind`), else its best event.
FACTS_PER_TURN = 2
#: A segment's account is cut after this many characters (its statements are kept whole).
SEGMENT_CHARS = 1_500
TOPIC_WORDS = 4
# Words the rewriting itself puts in ("Ada and others"), which say nothing of the subject.
_NOT_TOPICS = frozenset({"others", "user", "assistant", "user's", "assistant's"})
# An assistant's replies are advice and steps, not facts about anyone: they are kept in the segments.
_NOT_FACT_SOURCES = frozenset({"assistant", "system", "tool"})


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


@dataclass(frozen=True)
class Derivation:
    segments: list[DerivedSegment]  # those with something worth keeping, in order
    facts: list[DerivedFact]
    parts: list[range]  # every segment's turns (what a model is asked to summarise)


def segment_id(first_turn_id: str) -> str:
    """The id of the segment starting at a turn: stable, so a rerun after a crash finds it."""
    return f"segment:{first_turn_id}"


def fact_id(text: str) -> str:
    """The id of a fact: the same words make the same id, so a fact said twice is stored once."""
    digest = hashlib.sha256(" ".join(content_words(text)).encode()).hexdigest()[:20]
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


def _names(people: Sequence[str]) -> str:
    shown = [display_name(p) for p in people]
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _topic(said: Sequence[Statement], people: Sequence[str]) -> list[str]:
    names = {w for p in people for w in content_words(display_name(p))}
    counts = Counter(w for s in said for w in s.words
                     if w not in names and w not in _NOT_TOPICS and len(w) > 3 and not w.isdigit())
    return [w for w, _ in counts.most_common(TOPIC_WORDS)]


def _account(turns: Sequence[SpokenTurn], said: Sequence[Statement], people: Sequence[str]) -> str:
    day = next((t.day for t in turns if t.day is not None), None)
    who = _names(_speakers(turns) or people)
    head = f"On {format_day(day)}, {who}" if day is not None else who[:1].upper() + who[1:]
    topic = _topic(said, people)
    lines = [f"{head} talked{' about ' + ', '.join(topic) if topic else ''}."]
    size = len(lines[0])
    for statement in said:
        if size + len(statement.text) + 1 > SEGMENT_CHARS:
            break
        lines.append(statement.text)
        size += len(statement.text) + 1
    return " ".join(lines)


def derive(turns: Sequence[SpokenTurn], vectors: npt.NDArray[np.float32] | None = None) -> Derivation:
    """The segments and facts of a session's turns (in order; ``vectors`` row for row, or None)."""
    people = _speakers(turns)
    said = [_statements(turn, people) for turn in turns]
    segments = []
    parts = segment([t.content for t in turns], vectors)
    for part in parts:
        kept = [s for i in part for s in said[i]]
        if not kept:
            continue  # greetings and questions only: nothing to keep
        segments.append(DerivedSegment(_account([turns[i] for i in part], kept, people),
                                       tuple(turns[i].id for i in part)))
    facts = []
    for i, found in enumerate(said):
        if turns[i].role in _NOT_FACT_SOURCES:
            continue
        asked = i > 0 and turns[i - 1].role != turns[i].role and turns[i - 1].content.rstrip().endswith("?")
        sources = (turns[i - 1].id, turns[i].id) if asked else (turns[i].id,)
        facts += _facts(found, sources, _listener(turns[i].role, people))
    return Derivation(segments, facts, parts)


def _facts(found: Sequence[Statement], sources: tuple[str, ...], listener: str | None) -> list[DerivedFact]:
    """The facts among a turn's statements: those of a recognised kind, else its best event; and
    the corrections of a value said before."""
    kinds = [fact_kind(s.said, listener=listener) for s in found]
    typed = [(s, kind) for s, kind in zip(found, kinds, strict=True) if kind not in (None, "event")]
    events = sorted(((s, kind) for s, kind in zip(found, kinds, strict=True) if kind == "event"),
                    key=lambda pair: -pair[0].score)
    chosen = typed[:FACTS_PER_TURN] or events[:1]
    facts = [DerivedFact(s.text, sources, s.score, fact_about(s.text, s.speaker, kind), s.speaker, None,
                         revises(s.said)) for s, kind in chosen]
    for s in found:
        fixed = correction(s.said)
        if fixed is not None:
            facts.append(DerivedFact(s.text, sources, s.score, None, s.speaker, fixed))
    return facts
