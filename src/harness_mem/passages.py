"""Passages: a long entry is embedded whole, in windows, so a fact in its middle is findable by meaning.

MiniLM reads the first 256 word pieces of a text, and the rest of a long reply is invisible to its
vector (a third of LongMemEval's turns are longer). An embedder that can split a text (a
:class:`Splitter`, as the default MiniLM is) names the windows after the first; each is embedded in
the same model call and kept beside the entry's vector, which stays the first window's: the vector
index searches that one, and recall looks at the passages of the candidates it rescores
(:data:`PASSAGE_CANDIDATES`).

A **summary** (kind ``summary``: a topic segment consolidation wrote, or any entry a caller files
so) is read sentence by sentence instead: each of its sentences is a passage. It says several
things, and a question about one of them should meet that sentence, not the average of all of them
(on LoCoMo dev, the segments' link@1 rose from .763 to .817: bench/bench_consolidate.py).

An entry is matched **best-of**: its similarity is the first window's cosine, or a later window's
less :data:`PASSAGE_MARGIN` when that is higher, and the snippet shows the window that won. Without
the margin, every long reply gets several more chances to look like any question. Measured by
``bench/bench_passages.py`` on LongMemEval dev with both roles (46,970 turns, 16,286 of them longer
than one window; the evidence is mostly said in short user turns): plain best-of costs semantic
R@5 .567 → .499 and mean pooling of the windows .546; with the margin (0.06) semantic R@5 / R@10
are .556 / .730 and hybrid's stay .700 / .867, while a user's fact put in the middle of an
unrelated long reply is found in the top 10 for 21% of the questions instead of 1%, and in the
top 50 for 62% instead of 8% (there every turn of the question's history, ~500, is scored; recall
scores the passages of its PASSAGE_CANDIDATES).

A **person's turn** (kind ``turn``, any speaker but the agent's own: :data:`AGENT_ROLES`) also gets
its sentences as passages, beside its windows: a user states a fact in passing ("a lot of my old
high school friends…") inside a request about something else, and the whole turn's vector measures
the request. A turn's sentence counts at :data:`SENTENCE_MARGIN` (a passage says which it is:
``Passage.sentence``), a wider margin than a window's: a sentence is short, and a turn of many has
many chances. Only its first :data:`TURN_SENTENCES` count, of :data:`SENTENCE_WORDS` words or
more ("Thanks!" says nothing a question asks about). An assistant's replies get none: they are
long, their windows already give them chances, and with both roles a sentence each cost half 0's
R@5. A file written before keeps its passages as they were and recalls as it did;
``harness-mem reindex --keyword-only`` then ``harness-mem --embedder NAME reindex`` embeds it again
with its turns' sentences. Measured through
the store, with the commands, in docs/measured.md ("What is left below keyword on user turns"):
hybrid at or above its keyword lane on either half of every corpus (user turns' half-0 MRR was
.020 below), for about three quarters more model work at import and 1.9 more vectors a turn.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from .protocols import Embedder

__all__ = ["AGENT_ROLES", "MAX_SENTENCES", "PASSAGE_CANDIDATES", "PASSAGE_MARGIN", "SENTENCE_KINDS", "SENTENCE_MARGIN",
           "SENTENCE_WORDS", "TURN_SENTENCES", "Embedding", "Passage", "Scored", "Splitter", "best_of", "best_scored",
           "embed_entries", "embedding_text", "read_back", "scored", "sentence_bounds", "sentence_spans", "unit_rows"]

#: What a later window's cosine must beat the first window's by before it counts (see above).
PASSAGE_MARGIN = 0.06
#: Recall looks at the passages of up to this many entries past its own candidates, nearest the
#: question by first window among those its vector search compared anyway (and, in hybrid, of every
#: keyword candidate): the index holds first windows only, so in a large store a long entry whose
#: start is about something else is found by its words, not its meaning.
PASSAGE_CANDIDATES = 200
#: What a turn's sentence must beat the turn's first window by (see above; chosen on half 0 of
#: the dev questions: the middle of the margins that keep hybrid at or above its keyword lane there).
SENTENCE_MARGIN = 0.2
#: A turn's first sentences at most, and the words a sentence needs (its speaker counted for the
#: first), to be a passage: a quarter fewer vectors, the same figures on half 0 (see above).
TURN_SENTENCES = 4
SENTENCE_WORDS = 6
#: Kinds whose passages are their sentences (see above).
SENTENCE_KINDS = frozenset({"summary"})
#: Speakers whose turns get no sentence passages: the agent and what it runs (see above).
AGENT_ROLES = frozenset({"assistant", "system", "developer", "tool"})
#: Sentences embedded for one entry at most.
MAX_SENTENCES = 24
_SENTENCE = re.compile(r"[^.!?…\n]+(?:[.!?…]+|$)", re.MULTILINE)


@runtime_checkable
class Splitter(Protocol):
    """An embedder that reads a bounded start of a text, and can say where the rest lies."""

    def passages(self, text: str) -> list[tuple[int, int]]:
        """``(start, stop)`` character spans of ``text``'s windows after the first (``[]`` for a
        text the model reads whole)."""
        ...


class Passage(NamedTuple):
    """A later window of an entry (or a sentence): its span in the entry's content and its unit vector.

    ``sentence``: a sentence of a person's turn, matched at SENTENCE_MARGIN; else a window, or a
    summary's sentence, matched at PASSAGE_MARGIN (as they were tuned)."""

    start: int
    stop: int
    vector: npt.NDArray[np.float32]
    sentence: bool = False

    @property
    def margin(self) -> float:
        return SENTENCE_MARGIN if self.sentence else PASSAGE_MARGIN


class Embedding(NamedTuple):
    """An entry's vector (its first window, what the index searches) and its later passages."""

    vector: npt.NDArray[np.float32]
    passages: tuple[Passage, ...] = ()


def embedding_text(content: str, role: str | None) -> str:
    """What is embedded for an entry: like the keyword index, the speaker goes with the text."""
    return f"{role}: {content}" if role else content


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """``(start, stop)`` of every sentence of ``text``, its leading spaces trimmed."""
    spans = []
    for found in _SENTENCE.finditer(text):
        start, stop = found.span()
        while start < stop and text[start].isspace():
            start += 1
        if start < stop:
            spans.append((start, stop))
    return spans


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """``(start, stop)`` of each sentence of ``text`` (its spaces trimmed), at most MAX_SENTENCES;
    ``[]`` for a text of one sentence, which its vector already is."""
    spans = sentence_bounds(text)
    return spans[:MAX_SENTENCES] if len(spans) > 1 else []


def _passage_spans(splitter: Splitter | None, text: str, kind: str, role: str | None) -> list[tuple[int, int, bool]]:
    """Where an entry's passages lie, and whether each is a turn's sentence: a summary's sentences,
    else the embedder's later windows, and a person's turn's sentences after them. One passage a
    start (they are stored by it): a sentence that starts where a window does is left to the window."""
    if kind in SENTENCE_KINDS:
        return [(start, stop, False) for start, stop in sentence_spans(text)]
    spans = [(start, stop, False) for start, stop in (splitter.passages(text) if splitter is not None else [])]
    if kind == "turn" and role not in AGENT_ROLES:
        taken = {start for start, _, _ in spans}
        spans += [(start, stop, True) for start, stop in sentence_spans(text)[:TURN_SENTENCES]
                  if start not in taken and len(text[start:stop].split()) >= SENTENCE_WORDS]
    return spans


def embed_entries(embedder: Embedder, entries: Sequence[tuple[str, str | None, str]]) -> list[Embedding]:
    """Each (content, role, kind)'s :class:`Embedding`, every passage of every entry in one model call:
    a summary's sentences, another entry's later windows when the embedder can say where they lie,
    and a person's turn's sentences.

    Spans are kept in the content's characters (the role prefix the model also reads is left out;
    a sentence that lies in it goes with the first of the content's).
    """
    texts = [embedding_text(content, role) for content, role, _ in entries]
    # Asked once a batch: a protocol's isinstance walks its attributes (a third of a 20,000-row
    # import's passage work when asked an entry).
    splitter = embedder if isinstance(embedder, Splitter) else None
    spans = [_passage_spans(splitter, text, kind, role) for text, (_, role, kind) in zip(texts, entries, strict=True)]
    windows = [text[start:stop] for text, found in zip(texts, spans, strict=True) for start, stop, _ in found]
    matrix = embedder.embed(texts + windows) if texts else np.zeros((0, embedder.dim), dtype=np.float32)
    embeddings = []
    at = len(texts)
    for i, ((content, _, _), found) in enumerate(zip(entries, spans, strict=True)):
        shift = len(texts[i]) - len(content)  # the role prefix
        passages: dict[int, Passage] = {}
        for n, (start, stop, sentence) in enumerate(found):
            passages.setdefault(max(0, start - shift), Passage(max(0, start - shift), max(0, stop - shift),
                                                               matrix[at + n], sentence))
        at += len(found)
        embeddings.append(Embedding(matrix[i], tuple(sorted(passages.values(), key=lambda p: p.start))))  # as stored
    return embeddings


def unit_rows(vectors: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    """Stored vectors a row, at any scale (int8, halves), made unit length in one pass."""
    matrix = np.asarray(vectors, dtype=np.float32)
    unit: npt.NDArray[np.float32] = matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-9)
    return unit


def read_back(spans: Sequence[tuple[int, int, bool]], vectors: npt.NDArray[Any]) -> list[Passage]:
    """Passages as an engine stored them: (start, stop, sentence) and a vector a row (:func:`unit_rows`)."""
    matrix = unit_rows(vectors)
    return [Passage(int(start), int(stop), matrix[i], bool(sentence)) for i, (start, stop, sentence) in enumerate(spans)]


class Scored(NamedTuple):
    """A passage's span and its cosine to a question: what best-of weighs, and a snippet shows."""

    start: int
    stop: int
    sentence: bool
    cosine: float

    @property
    def margin(self) -> float:
        return SENTENCE_MARGIN if self.sentence else PASSAGE_MARGIN


def scored(query: npt.NDArray[np.float32], passages: Mapping[int, Sequence[Passage]]) -> dict[int, list[Scored]]:
    """Each entry's passages with their cosine to ``query``, every one in one product."""
    found = [p for ps in passages.values() for p in ps]
    if not found:
        return {}
    cosines = (np.stack([p.vector for p in found]) @ query).tolist()
    at, each = 0, {}
    for pk, ps in passages.items():
        each[pk] = [Scored(p.start, p.stop, p.sentence, c) for p, c in zip(ps, cosines[at:at + len(ps)], strict=True)]
        at += len(ps)
    return each


def best_scored(query: npt.NDArray[np.float32], rows: Sequence[tuple[int, int, int, bool]],
                vectors: npt.NDArray[Any]) -> dict[int, list[Scored]]:
    """Of stored passages, (pk, start, stop, sentence) and a vector a row (in each pk's order),
    each pk's one that :func:`best_of` picks, with its cosine to ``query``: every cosine in one
    product and no passage built (a recall weighs ~200 of them to keep a few)."""
    if not rows:
        return {}
    cosines = (unit_rows(vectors) @ query).tolist()
    picked: dict[int, tuple[float, int]] = {}  # pk: (cosine less margin, row)
    for i, ((pk, _, _, sentence), cosine) in enumerate(zip(rows, cosines, strict=True)):
        weighed = cosine - (SENTENCE_MARGIN if sentence else PASSAGE_MARGIN)
        held = picked.get(pk)
        if held is None or weighed > held[0]:  # the first of equals, as max() keeps
            picked[pk] = (weighed, i)
    return {pk: [Scored(int(rows[i][1]), int(rows[i][2]), bool(rows[i][3]), cosines[i])]
            for pk, (_, i) in picked.items()}


def best_of(cosines: Mapping[int, float],
            passages: Mapping[int, Sequence[Scored]]) -> dict[int, tuple[float, Scored | None]]:
    """Each pk's similarity, best-of its first window's cosine (``cosines``) and its passages' less
    their margin, with the passage that won (None: the first window)."""
    matched: dict[int, tuple[float, Scored | None]] = {pk: (first, None) for pk, first in cosines.items()}
    for pk, first in cosines.items():
        found = passages.get(pk)
        if not found:
            continue
        best = found[0] if len(found) == 1 else max(found, key=lambda p: p.cosine - p.margin)
        if best.cosine - best.margin > first:
            matched[pk] = (best.cosine - best.margin, best)
    return matched
