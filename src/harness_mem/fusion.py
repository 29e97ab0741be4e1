"""Hybrid ranking: one score from the keyword and the semantic evidence about each candidate.

Equal-weight reciprocal rank fusion loses to BM25 alone on long conversations (LoCoMo recall@10:
.587 vs .620), because it gives the much weaker embedding ranking the same say and throws the
scores away. What works (bench/tune_hybrid.py, every parameter chosen there, and stable when tuned
on four conversations and tested on the fifth):

- **Candidates** are the keyword top-50 and the semantic top-50; every candidate gets both features:
  its cosine from the stored vector, and its BM25 from a keyword ranking taken 200 deep (a semantic
  candidate further down scores 0 there). Scoring every missing feature as 0 costs 2 points of
  recall@10; the 200-deep cut costs .004 against exact BM25 for all, at half the latency.
- **Score fusion**: ``w · bm25 / max(bm25) + (1 - w) · cosine``, BM25 normalised by the query's best
  match, cosine as it is. ``w`` is 0.3 scaled by how much each signal tells this query's candidates
  apart (:func:`informativeness`, then the two renormalised): a signal whose scores are near-equal
  or near zero over the candidates (a name in every fact of a small store: BM25 ~1e-6 each) has
  almost no weight, so it cannot reorder what the other ranks. On held-out halves of the three dev
  corpora it gains over fixed 0.3 / 0.7 on each (bench/tune_fusion.py; LongMemEval user turns R@5
  .805 → .829 on one half, equal on the other).
- **A cosine counts above the query's noise floor**: by how far it rises above the lowest quarter
  of the candidates' cosines (:func:`noise_floor`), not from 0. Among turns the question is not
  about, MiniLM's cosines differ by a tenth or two at random; the raw cosine let that noise
  overturn the keyword lane's best match when the match says the detail in passing (LongMemEval: a
  user's fact mid-message, cosine 0.01 against a topical turn's 0.13, both under the quartile).
  Above the floor nothing changes. On every dev corpus it gains or holds (within .002) every
  measure, on either half of the questions (LongMemEval user turns R@5 / MRR .866 / .750 → .872 /
  .759, both roles .660 / .638 → .681 / .642); no setting of the other constants did
  (bench/tune_fusion.py --against-keyword).
- **A question that gathers leans on its words** (:func:`gathers`: how many, how much, in total,
  between): the keyword's share is 0.5 instead of 0.3. Its evidence is the user's mentions in
  passing ("I took both bikes in for a service") inside turns about something else, found by the
  exact words; the whole turn's cosine measures the turn's topic, so a turn about bikes in general
  read closer and came first. On LongMemEval dev user turns these 44 questions were the whole of
  hybrid's loss to its keyword lane (MRR .818 against .855, on either half of them); the share is
  what bench/tune_fusion.py --against-keyword chooses on one half of every corpus (the other half
  chose 0.6 with other constants moved, worse on the half held out). LoCoMo holds within .002: its
  names and speakers carry such questions.
- **Speaker prior** (+0.2): questions name people ("what did Caroline research?"), and on LoCoMo the
  named speaker said 96% of the evidence. The names are also removed from the text that is
  embedded for the query: a name dominates a MiniLM query vector and drags it towards everything
  that person ever said (semantic recall@10 .493 → .634). With roles like user/assistant/tool this
  only fires when a question names one. In a chat store (roles ``user`` and ``assistant``) the
  question's pronouns name one (:func:`pronoun_role`): "what did *I* buy?" is asked by the user about
  what the user said, so the user's turns get the prior, and "what did *you* recommend?" the
  assistant's ("when can *I* ship?" asks what holds for the user, and names no one). An
  assistant's long reply on the question's topic otherwise outranked the user's passing mention of
  the fact (LongMemEval dev, both roles, R@5 / MRR .728 / .674 → .831 / .749, keyword .728 / .672;
  above keyword on each half of the questions: +.068 / +.047 and +.133 / +.103). No constant was
  chosen for it: the prior is the named speaker's.
- **Session prior** (+0.5 × the best score in the candidate's session): evidence clusters in the
  session where the question's topic came up. Not for a question that gathers (:func:`gathers`:
  how many, how much, in total, between): its evidence is spread over sessions, and lifting one
  session's turns pushes the others out (LongMemEval dev user turns, hybrid R@5 .847 → .871, its
  multi-session and temporal-reasoning questions; LoCoMo unchanged: R@5 / R@10 .727 / .807).
- **Decision prior** (+0.2, the speaker prior's: no constant chosen): a question that asks what was
  decided (:func:`asks_decision`: "what did we decide about the auth refactor?") wants the turn or
  fact that decides ("Let's keep server-side sessions…", "Decision noted: …", a fact of kind
  ``decision``), not the turn that raised the topic, which shares the question's words; "decide" and
  "decision" are different stems, so the keyword lane alone never finds "Decision noted". The dev
  corpora hardly ask so (7 of LoCoMo's 760 questions, 1 of LongMemEval's): LoCoMo turns MRR .611 →
  .612, every other figure of bench/bench_recall.py unchanged.

Measured on LoCoMo (recall@10, `harness-mem eval`): keyword .710 (with the context index of
keyword.index_text), semantic .634, this hybrid .80; the other corpora are in bench/bench_recall.py.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from typing import NamedTuple

KEYWORD_WEIGHT = 0.3   # the cosine gets the rest
#: The keyword's share for a question that gathers (:func:`gathers`): its evidence is said in passing.
GATHERING_KEYWORD_WEIGHT = 0.5
SPEAKER_PRIOR = 0.2
DECISION_PRIOR = SPEAKER_PRIOR  # the question names what the entry is, as it can name who said it
SESSION_PRIOR = 0.5
CANDIDATES = 50        # from each ranking; deeper changes recall@10 by < .002
KEYWORD_DEPTH = 200    # BM25 scores looked up for the semantic candidates too
# The spread of a signal over its candidates (best minus median) at which it gets 63% of its weight:
# BM25 in nats, and the cosine. Chosen by bench/tune_fusion.py on either half of the questions of the
# three dev corpora, the same on both halves (larger spreads than these chose differently per half).
KEYWORD_SPREAD = 8.0
COSINE_SPREAD = 0.2
#: The share of a query's candidates whose cosine is noise: a cosine counts by how far it rises above
#: this quantile of the candidates' cosines (0: raw cosines, as before).
COSINE_FLOOR = 0.25


def depth(k: int) -> int:
    """How many candidates each ranking contributes for a top-``k`` hybrid result."""
    return max(CANDIDATES, k)


class Candidate(NamedTuple):
    """An entry fusion scores (a tuple: a hybrid recall makes ~250 of them, 0.5 µs less each than
    a frozen dataclass)."""

    pk: int
    keyword: float       # -bm25 (higher is better); 0 when the entry does not match the query
    cosine: float
    named: bool          # the entry's role is named in the query
    session: str | None
    decides: bool = False  # the entry records a decision, and the query asks for one


def informativeness(scores: Sequence[float], scale: float) -> float:
    """How much a signal tells its candidates apart, in [0, 1): ``1 - exp(-(best - median) / scale)``.

    Scores that are near-equal over the candidates (a name that is in every fact), or all near zero
    (BM25 of words with no idf left in a small store: 1e-6 each), have a best barely above their
    median, so the signal's weight goes to ~0 and it cannot reorder the others. ``scale`` is the
    spread, in the signal's own units, at which it gets 63% of its weight.
    """
    if not scores:
        return 0.0
    ordered = sorted(scores)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
    return 1.0 - math.exp(-max(0.0, ordered[-1] - median) / scale)


def weights(candidates: Sequence[Candidate], *, gathering: bool = False) -> tuple[float, float]:
    """The (keyword, cosine) weights for this query's candidates, summing to 1 (see module docstring;
    ``gathering``: see :func:`gathers`)."""
    share = GATHERING_KEYWORD_WEIGHT if gathering else KEYWORD_WEIGHT
    keyword = share * informativeness([c.keyword for c in candidates], KEYWORD_SPREAD)
    cosine = (1 - share) * informativeness([c.cosine for c in candidates], COSINE_SPREAD)
    total = keyword + cosine
    if total <= 0:
        return 0.0, 1.0  # neither tells anything apart: the order is the priors', then the cosine's
    return keyword / total, cosine / total


def noise_floor(cosines: Sequence[float]) -> float | None:
    """The cosine below which a candidate's is noise for this query: the :data:`COSINE_FLOOR`
    quantile of the candidates' cosines (None when the floor is off)."""
    if COSINE_FLOOR <= 0 or not cosines:
        return None
    ordered = sorted(cosines)
    return ordered[min(len(ordered) - 1, int(COSINE_FLOOR * len(ordered)))]


#: A question that gathers evidence from several sessions: it counts, totals or spans two events.
_GATHERING = re.compile(r"\b(?:how many|how much|total|between)\b", re.IGNORECASE)


def gathers(query: str) -> bool:
    """True for a question whose answer is gathered over sessions ("how many plants did I buy?",
    "how much have I spent in total?", "how many days between the wedding and the move?")."""
    return _GATHERING.search(query) is not None


#: A question about what was decided, agreed or settled ("what did we decide about …", "what was the
#: decision on …", "what did we settle on for …", "which queue did we go with?").
_DECISION_QUESTION = re.compile(r"\b(?:decid(?:e|ed|es|ing)|decisions?|agreed|settled|go(?:ing)? with|went with)\b",
                                re.IGNORECASE)


def asks_decision(query: str) -> bool:
    """True for a question about what was decided (see :data:`DECISION_PRIOR`)."""
    return _DECISION_QUESTION.search(query) is not None


def fuse(candidates: Sequence[Candidate], k: int, *, gathering: bool = False) -> list[tuple[int, float]]:
    """The top ``k`` (pk, score) of the candidates, best first (``gathering``: see :func:`gathers`)."""
    if not candidates:
        return []
    best_keyword = max(c.keyword for c in candidates)
    keyword_weight, cosine_weight = weights(candidates, gathering=gathering)
    floor = noise_floor([c.cosine for c in candidates])
    base = {
        c.pk: keyword_weight * (c.keyword / best_keyword if best_keyword > 0 else 0.0)
        + cosine_weight * (c.cosine if floor is None else max(0.0, c.cosine - floor))
        + (SPEAKER_PRIOR if c.named else 0.0)
        + (DECISION_PRIOR if c.decides else 0.0)
        for c in candidates
    }
    session_best: dict[str, float] = {}
    for c in candidates:
        if c.session is not None:
            session_best[c.session] = max(session_best.get(c.session, float("-inf")), base[c.pk])
    prior = 0.0 if gathering else SESSION_PRIOR
    scored = [
        (c.pk, base[c.pk] + prior * (session_best[c.session] if c.session is not None else base[c.pk]))
        for c in candidates
    ]
    scored.sort(key=lambda item: (-item[1], item[0]))
    return scored[:k]


_WORD = re.compile(r"\w+")
def query_words(query: str) -> list[str]:
    """Lower-cased words of a query, first occurrence order (to look roles up by)."""
    return list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))


_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself)\b", re.IGNORECASE)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|yourselves)\b", re.IGNORECASE)


# "can I", "should I": a question of what holds for the user, which anyone may have said.
_MODAL_I = re.compile(r"\b(?:can|could|should|shall|may|might|must|would|will)\s+i\b", re.IGNORECASE)


def pronoun_role(query: str) -> str | None:
    """The chat role a question names by its pronouns: ``"user"`` when it speaks in the first person
    alone (the user asks about what they said: "what did I buy?", "where is my passport?"),
    ``"assistant"`` in the second person alone, else None. "Can you remind me what you said…"
    names both, so neither; "when can I ship?" asks what holds for the user, not what they said."""
    first = _FIRST_PERSON.search(_MODAL_I.sub(" ", query)) is not None
    second = _SECOND_PERSON.search(query) is not None
    if first == second:
        return None
    return "user" if first else "assistant"


def role_words(query: str) -> list[str]:
    """The words a query may name a role (speaker) by: its own, and the chat role its pronouns name."""
    words = query_words(query)
    if words and (person := pronoun_role(query)) is not None:
        words.append(person)
    return words


def strip_names(query: str, names: Iterable[str]) -> str:
    """``query`` without the given names (and their possessive 's), spaces collapsed.

    Falls back to the query itself if nothing else would be left.
    """
    names = [n for n in names if n]
    if not names:
        return query
    pattern = re.compile(r"\b(?:" + "|".join(re.escape(n) for n in names) + r")(?:'s|’s)?\b", re.IGNORECASE)
    stripped = " ".join(pattern.sub(" ", query).split())
    return stripped if _WORD.search(stripped) else query
