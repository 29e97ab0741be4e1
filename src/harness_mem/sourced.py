"""Derived entries ranked with their sources.

A summary or a fact that consolidation wrote cites the turns it came from (``metadata.source_turns``).
It is condensed: a summary keeps about a third of its turns' words, so a question about a detail
its segment settled often shares few words with the summary and many with the turn that said it.
Recall therefore ranks a summary by the better of two pieces of evidence: its own words, and the
best-ranked turn it cites (ranked by the same query, mode and filters, in the turns' own lane).
This holds where a recall returns no turns (``derived=True``, ``kind="summary"``) and ranks by
meaning (hybrid, semantic). Where turns rank too, a turn that matches is a hit of its own; and a
keyword-only recall has no common scale for the two lanes (each keyword index counts its own words:
on LongMemEval dev, lifting by BM25 cost two of 15 knowledge updates their current value). What the
reader gets is the summary, with its sources beside it when asked (``sources=True``); of entries
that cite the same turn, the one whose own words match better comes first (:data:`OWN_SHARE`).
Facts are ranked by their own words (:data:`KINDS`).

Measured on LoCoMo dev (bench/bench_consolidate.py, link@1 of the annotators' observations over the
derived entries): .62 by their own words alone, .835 ranked with their sources.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

#: The kinds that stand for every turn they cite: a segment's summary. A fact stands for what it
#: says, not for the rest of its turn ("Ada is vegetarian." is no answer to where she lives because
#: she said both in one breath), so it is found by its own words.
KINDS = ("summary",)
#: How much a cited turn's score counts for the summary that cites it (0: own words alone): most of
#: it, so that a fact that says what was asked, nearly as well as the turn, still comes first. Chosen
#: on either half of LoCoMo dev's observations, the same on both (link@1 .83 / .84, F1@1 .29 / .29;
#: at 1.0 summaries were first for all but one and F1@1 fell to .24; at 0.6 link@1 fell to .75).
SOURCE_SHARE = 0.75
#: The entry's own score added on top, so that of two entries citing the same turn the one that
#: says what was asked wins (and a fact beats the segment around it when both say it).
OWN_SHARE = 0.1


@dataclass(frozen=True)
class Sourced:
    """The ranking with sources counted, and for each entry its cited turn lifted, that turn."""

    ranked: list[tuple[int, float]]
    lifted_by: dict[int, int]


def ranked_with_sources(own: Sequence[tuple[int, float]], turns: Mapping[int, float],
                        citations: Iterable[tuple[int, int]]) -> Sourced:
    """``own`` ((pk, score), best first) ranked again: an entry citing a ranked turn scores
    ``max(own, SOURCE_SHARE * its best cited turn's) + OWN_SHARE * own``; the rest keep their own.

    ``turns`` are the turns' scores in their own ranking, on the same scale as ``own``;
    ``citations`` are (entry pk, turn pk) pairs; an entry found only through a citation joins with
    an own score of 0.
    """
    scores = dict(own)
    best_turn: dict[int, tuple[float, int]] = {}
    for entry, turn in citations:
        score = turns.get(turn)
        if score is not None and (entry not in best_turn or score > best_turn[entry][0]):
            best_turn[entry] = (score, turn)
    lifted_by: dict[int, int] = {}
    final = dict(scores)
    for pk, (turn_score, turn) in best_turn.items():
        score = scores.get(pk, 0.0)
        if SOURCE_SHARE * turn_score > score:
            lifted_by[pk] = turn
        final[pk] = max(score, SOURCE_SHARE * turn_score) + OWN_SHARE * score
    ranked = sorted(final.items(), key=lambda item: (-item[1], item[0]))
    return Sourced(ranked, lifted_by)
