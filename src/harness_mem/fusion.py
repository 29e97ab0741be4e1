"""Hybrid ranking: fuse the keyword (BM25) and semantic (cosine) rankings into one.

Equal-weight reciprocal rank fusion loses to BM25 alone on long conversations (LoCoMo: .585 vs .620
recall@10), because the embedding's ranking is much weaker there and RRF gives it the same say.
Fusing normalised *scores* with a weight lets a confident keyword match dominate while the
embedding still lifts the paraphrases BM25 cannot see. The weights are tuned in bench/tune_hybrid.py.
"""

from __future__ import annotations

# Candidates taken from each ranking before fusing (tuned: deeper lists add noise, shallower ones
# miss the paraphrases).
CANDIDATES_PER_HIT = 5
MIN_CANDIDATES = 50
KEYWORD_WEIGHT = 0.5


def depth(k: int) -> int:
    """How many candidates each ranking contributes for a top-``k`` hybrid result."""
    return max(MIN_CANDIDATES, CANDIDATES_PER_HIT * k)


def fuse(keyword: list[tuple[int, float]], semantic: list[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The top ``k`` (pk, fused score) of two rankings (each best first, higher score = better)."""
    top_keyword = keyword[0][1] if keyword else 1.0
    scores: dict[int, float] = {}
    for pk, score in keyword:
        scores[pk] = KEYWORD_WEIGHT * (score / top_keyword if top_keyword > 0 else 0.0)
    for pk, similarity in semantic:
        scores[pk] = scores.get(pk, 0.0) + (1 - KEYWORD_WEIGHT) * max(similarity, 0.0)
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:k]
