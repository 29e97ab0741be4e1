"""A session cut where its subject changes (TextTiling, over meaning or over words).

Hearst's TextTiling: score each gap between two turns by how alike the turns on either side of it
are (a window of :data:`WINDOW` turns each way), and cut at the gaps that sit in the deepest
valleys of that curve — where the conversation moves on. The likeness is the cosine of the mean
turn vectors when the file has vectors, else the cosine of the windows' word counts (lexical
cohesion). Cuts never leave a segment shorter than :data:`MIN_TURNS`, and a session gets at most
one segment per :data:`TURNS_PER_SEGMENT` turns (the deepest valleys win), so the segments of a
transcript never number more than a quarter of its turns: a summary is worth keeping beside the
turns only if it is much shorter than them.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from .statements import content_words

__all__ = ["MIN_TURNS", "TURNS_PER_SEGMENT", "WINDOW", "cut_points", "segment"]

WINDOW = 3
MIN_TURNS = 3
TURNS_PER_SEGMENT = 4


def _vector_gaps(vectors: npt.NDArray[np.float32]) -> list[float]:
    """The likeness across each gap (between turn i-1 and turn i, for i = 1 … n-1)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    gaps = []
    for i in range(1, len(unit)):
        left = unit[max(0, i - WINDOW):i].mean(axis=0)
        right = unit[i:i + WINDOW].mean(axis=0)
        denominator = float(np.linalg.norm(left) * np.linalg.norm(right))
        gaps.append(float(left @ right) / denominator if denominator else 0.0)
    return gaps


def _cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(count * b[word] for word, count in a.items())
    denominator = math.sqrt(sum(c * c for c in a.values()) * sum(c * c for c in b.values()))
    return dot / denominator if denominator else 0.0


def _word_gaps(texts: Sequence[str]) -> list[float]:
    bags = [Counter(content_words(text)) for text in texts]
    gaps = []
    for i in range(1, len(bags)):
        left: Counter[str] = sum(bags[max(0, i - WINDOW):i], Counter())
        right: Counter[str] = sum(bags[i:i + WINDOW], Counter())
        gaps.append(_cosine(left, right))
    return gaps


def cut_points(likeness: Sequence[float], *, min_turns: int = MIN_TURNS, most: int | None = None) -> list[int]:
    """The turn indexes where new segments start, from the likeness across each gap.

    A gap's depth is how far the curve climbs on both sides before it falls again; cuts go at the
    gaps deeper than the mean depth minus half its spread (Hearst's cutoff), deepest first, keeping
    every segment at least ``min_turns`` long, and ``most`` cuts at most.
    """
    n = len(likeness)
    depths = []
    for i, value in enumerate(likeness):
        left = right = value
        j = i
        while j > 0 and likeness[j - 1] >= left:
            j -= 1
            left = likeness[j]
        j = i
        while j < n - 1 and likeness[j + 1] >= right:
            j += 1
            right = likeness[j]
        depths.append((left - value) + (right - value))
    if not depths:
        return []
    mean = sum(depths) / len(depths)
    spread = math.sqrt(sum((d - mean) ** 2 for d in depths) / len(depths))
    cutoff = max(mean - spread / 2, 1e-9)
    starts: list[int] = []
    for gap in sorted(range(n), key=lambda g: -depths[g]):
        if depths[gap] < cutoff or (most is not None and len(starts) >= most):
            break
        start = gap + 1  # the gap after turn `gap` starts a segment at turn gap + 1
        bounds = sorted([0, *starts, start, n + 1])
        if all(b - a >= min_turns for a, b in zip(bounds, bounds[1:], strict=False)):
            starts.append(start)
    return sorted(starts)


def segment(texts: Sequence[str], vectors: npt.NDArray[np.float32] | None = None, *,
            min_turns: int = MIN_TURNS) -> list[range]:
    """The session's turns (in order) cut into topic segments, as ranges of turn indexes.

    ``vectors`` are the turns' embeddings, row for row; without them the cut is lexical.
    """
    if len(texts) < 2 * min_turns:
        return [range(len(texts))] if texts else []
    likeness = _vector_gaps(vectors) if vectors is not None else _word_gaps(texts)
    most = max(0, len(texts) // TURNS_PER_SEGMENT - 1)
    starts = [0, *cut_points(likeness, min_turns=min_turns, most=most), len(texts)]
    return [range(a, b) for a, b in zip(starts, starts[1:], strict=False)]
