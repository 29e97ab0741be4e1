"""Scores in [0, 1]: what a hit's score means, the same in every mode and in stores of any size.

A recall's *order* is its mode's (BM25; cosine; the fused hybrid with its speaker and session
priors). The *score* each hit carries estimates how likely the hit is to hold what the question
asks, from two features of the hit itself that mean the same in a store of twenty entries or a
million, with coefficients fitted for each mode (so a score means the same whichever mode made it):

- **coverage**: the share of the question's information that the hit's indexed words hold. Each
  query term weighs ``log(1 + N / (df + 0.5))`` (a word in every entry weighs little, a word no
  entry holds as much as the rarest), and coverage is the weight of the terms the hit holds over
  that of all of them. BM25 is not comparable across stores: in a 20-entry store every idf is
  ~0, and its only match scores 1e-6.
- **similarity**: its cosine to the question (best-of its passages), in the modes that embed the
  question (keyword mode loads no model, and scores from coverage alone).

``relevance = σ(a + b·coverage + c·similarity)``, fitted by ``bench/calibrate_scores.py`` as
answers against misses: the evidence among the top 10 hits of the three dev corpora's questions,
against the top 10 hits of the same questions asked of a conversation that does not hold their
answer, the two weighing the same. So **0.5 means "as typical of an answer as of a hit for a
question the store cannot answer"**; higher is more like an answer. Other hits about the same
thing as the answer score high too (they are not misses). At 0.5, hybrid recall keeps 75–97% of
the evidence on the dev corpora and drops 87–95% of the hits of a question the store cannot
answer (the README has the table, on held-out halves too). Last, the scores are made to fall
along the mode's order (pool-adjacent-violators: the smallest change that does), so
``min_score`` cuts the ranking, never a hole in it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["COEFFICIENTS", "calibrated", "coverage_of", "in_order", "relevance", "term_weight"]

#: (a, b, c) per mode (b: coverage, c: similarity), fitted by bench/calibrate_scores.py on all the
#: dev questions (keyword mode has no similarity).
COEFFICIENTS = {"hybrid": (-5.62, 8.48, 9.05), "semantic": (-6.64, 8.74, 11.61), "keyword": (-4.28, 11.86, 0.0)}


def term_weight(rows: int, df: int) -> float:
    """How much a query term says: ``log(1 + N / (df + 0.5))``, positive even in a tiny store."""
    return math.log1p(rows / (df + 0.5))


def coverage_of(held: Sequence[bool], weights: Sequence[float]) -> float:
    """The weighted share of a query's terms an entry holds (``held``, a flag a term:
    :func:`~harness_mem.bm25.terms_held` of its keyword-index text), in [0, 1]."""
    total = sum(weights)
    if total <= 0:
        return 0.0
    return sum(weight for holds, weight in zip(held, weights, strict=True) if holds) / total


def relevance(mode: str, covered: float, similarity: float = 0.0) -> float:
    """The calibrated score of a hit with this coverage and similarity."""
    a, b, c = COEFFICIENTS[mode]
    return 1.0 / (1.0 + math.exp(-(a + b * covered + c * similarity)))


def in_order(scores: Sequence[float]) -> list[float]:
    """``scores`` (in rank order) made non-increasing with the least squared change (pool adjacent
    violators): a run that rises is replaced by its mean."""
    blocks: list[list[float]] = []  # [sum, count]
    for score in scores:
        blocks.append([score, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] < blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    out: list[float] = []
    for total, count in blocks:
        out.extend([total / count] * int(count))
    return out


def calibrated(mode: str, ranked: Sequence[int], coverages: Mapping[int, float],
               similarities: Mapping[int, float]) -> list[float]:
    """The scores of the ``ranked`` pks, in order."""
    return in_order([relevance(mode, coverages.get(pk, 0.0), similarities.get(pk, 0.0)) for pk in ranked])
