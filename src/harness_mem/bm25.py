"""Top-k BM25 that does not score every match: keyword recall at a million entries.

FTS5's ``bm25()`` costs time in proportion to every row holding any query term: it walks each
term's whole posting list to count it (for the idf), then scores every matching row, a few µs each.
An OR of a question's words touches a large share of a big file: at a million entries, most of a
second. Walking a posting list for rowids alone, or intersecting two (FTS5 seeks the longer one),
costs far less. So when the words' lists are long together (over :data:`SCORED_ROWS` rows), the
ranking is built from such reads instead:

- each term's document frequency is counted by FTS5 (a walk of its posting list, stopped at
  :data:`_COUNTED` rows; a more common term is counted in four slices of the rowid range);
- **candidates** are every entry holding one of the rarest terms (the rarest whose lists hold at
  most :data:`CANDIDATE_ROWS` rows together), and every entry holding two of the next
  :data:`PAIRED` terms (an AND, which FTS5 answers by seeking);
- each other term is looked up among the candidates (another AND);
- candidates are weighed by the idf of the terms they hold and, a slice at a time, by their length
  (BM25 with every term counted once); an entry holding one other term alone joins when that term's
  idf could still reach the top;
- the best few hundred are then scored in full: each term's frequency counted in the entry's index
  text (rebuilt as its write made it), whose tokens are read in the form the index stores them
  (lower case, diacritics removed, Porter-stemmed as the tokenizer does: ``snowballstemmer``'s
  "porter" agrees with it on all but a few words), with FTS5's idf, k1 and b.

What it leaves out: an entry holding a single common word and none of the rare ones, and one whose
words repeat so often that its one-count weight ranked it below the few hundred scored in full. ``exact=True`` always has FTS5 score
every word on every match. On LoCoMo questions planted among a million chat turns the two find the
same evidence (bench/bench_scale.py), and a filtered query is answered inside its filter the same
way, at a cost that follows the filter's size, not the file's.

The ranking is shared Python over what an engine's keyword index answers (:class:`KeywordSource`:
counts, the entries a match finds, lengths, index texts, and its own exact BM25 of an OR), so
every engine ranks the same candidates the same way; SQLite's source reads FTS5 (see
:mod:`harness_mem.engines.sqlite_keywords`).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from .filters import Selection

# FTS5's bm25() constants.
K1 = 1.2
B = 0.75
# Above this many posting-list rows for the whole query, FTS5 no longer scores it (a few µs a row).
SCORED_ROWS = 4096
# The rarest terms' entries that are all candidates, at most (read as rowids: well under a µs a row).
CANDIDATE_ROWS = 8192
# How many of the next-rarest terms give candidates by pairs (each pair is one AND).
PAIRED = 4
# A filtered recall whose filter leaves at most this many entries ranks inside them.
NARROW = 5000
# A rowid lookup costs about as much as walking this many posting-list entries.
_PROBE_COST = 40
# Candidates scored in full, at least (by their idf weight, the rest cannot reach the top 10).
_RESCORED = 200
# The candidates whose lengths are read, at most, in multiples of those scored in full: beyond that,
# an entry would need to be far shorter than those before it to reach the top.
_EXAMINED = 4
# A remembered df is read again once the row count has moved by this share of it.
_STALE_SHARE = 0.01
_CACHED_TERMS = 65536
# Terms held by fewer entries than this are counted exactly; more common ones by sampling.
_COUNTED = 16384

#: A match: an entry matches when it holds one term of every group (an AND of ORs). Terms are
#: :func:`keyword.query_terms <harness_mem.keyword.query_terms>`' quoted words, phrases and prefixes.
Match = tuple[tuple[str, ...], ...]


class KeywordSource(Protocol):
    """What an engine's keyword index answers; the ranking over it is this module's (shared) Python."""

    #: True when :meth:`ranked` costs about what the engine's own ranked query does however many
    #: entries a query's words find (PostgreSQL scores BM25 in the statement): every query is then
    #: ranked by it, exactly; False for FTS5, whose bm25() is what the shortcuts here avoid.
    scores_every_match: bool

    def stats(self) -> tuple[int, float]:
        """(rows indexed, average tokens per row)."""
        ...

    def document_frequency(self, term: str, rows: int) -> int:
        """How many entries hold ``term`` (an estimate is fine for a very common one)."""
        ...

    def document_frequencies(self, terms: Sequence[str], rows: int) -> list[int]:
        """:meth:`document_frequency` of each term (an engine across a network counts them at once)."""
        ...

    def will_count(self, terms: Sequence[str]) -> None:
        """The terms whose :meth:`document_frequencies` will be asked once the statement this read
        sends next has answered (a semantic recall's coverage, after its search): an engine across a
        network may count them in that statement's round trip."""
        ...

    def ranked(self, terms: Sequence[str], k: int, selection: Selection) -> list[tuple[int, float]]:
        """The ``k`` best entries holding any of ``terms`` that pass ``selection``, by BM25 over
        every term (:data:`K1`, :data:`B`, FTS5's idf), best first: (pk, score)."""
        ...

    def holders(self, match: Match, low: int | None = None, high: int | None = None) -> npt.NDArray[np.int64]:
        """The pks of the entries ``match`` finds (within ``low``..``high`` when given), ascending."""
        ...

    def holders_among(self, term: str, pks: Sequence[int]) -> npt.NDArray[np.int64]:
        """Those of ``pks`` that hold ``term``."""
        ...

    def lengths(self, pks: Sequence[int], selection: Selection | None = None) -> dict[int, int]:
        """Each entry's length in index tokens; with ``selection``, only of those that pass it."""
        ...

    def texts(self, pks: Sequence[int]) -> dict[int, str]:
        """The keyword-index text of each entry, as its write made it."""
        ...

    def holding(self, pks: Sequence[int], terms: Sequence[str]) -> dict[int, tuple[bool, ...]]:
        """Which of ``terms`` each entry's keyword-index text holds (:func:`terms_held`), for
        those of ``pks`` that have one."""
        ...

    def will_hold(self, terms: Sequence[str]) -> None:
        """The terms :meth:`holding` will be asked of the entries this read reads next (a recall's
        coverage): an engine across a network reads that along with them."""
        ...

    def count(self, selection: Selection, limit: int) -> int:
        """How many entries pass ``selection``, counted up to ``limit``."""
        ...

    def pks(self, selection: Selection) -> list[int]:
        """The entries that pass ``selection``."""
        ...


@dataclass(frozen=True)
class Term:
    """One query term: its FTS5 string (quoted) and how many entries hold it."""

    fts: str
    df: int

    @property
    def form(self) -> str | None:
        """The token the index stores for a one-word term (None for a phrase or a prefix)."""
        word = self.fts[1:-1]
        if self.fts.startswith('"') and self.fts.endswith('"') and " " not in word and '"' not in word:
            return index_form(word)
        return None


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    """The Porter stemmer: PyStemmer's compiled one, which snowballstemmer hands out when it is
    installed (a dependency; the same stems as its own pure-Python one, 9 times as fast)."""
    import snowballstemmer  # type: ignore[import-untyped]

    return snowballstemmer.stemmer("porter")


def _fold(text: str) -> str:
    """``text`` without diacritics (unicode61's remove_diacritics)."""
    decomposed = unicodedata.normalize("NFKD", text)
    if decomposed == text:  # nothing to remove (curly quotes, CJK, emoji): the common case
        return text
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


@lru_cache(maxsize=65536)  # a whole chat vocabulary: an import on PostgreSQL stems each word once
def index_form(word: str) -> str:
    """``word`` as the index's tokenizer stores it (porter over unicode61, diacritics removed)."""
    folded = _fold(word).lower()
    if len(folded) < 3 or not folded.isascii() or not folded.isalpha():
        return folded  # the tokenizer leaves short words alone; the stemmer knows only a-z
    return str(_stemmer().stemWord(folded))


_TOKEN = re.compile(r"[^\W_]+")


def index_tokens(text: str) -> list[str]:
    """``text`` as the keyword index's tokenizer cuts it: runs of letters and digits (unicode61),
    each in its stored form (:func:`index_form`)."""
    text = text.lower()
    if not text.isascii():
        text = _fold(text)
    return [index_form(token) for token in _TOKEN.findall(text)]


def forms_held(text: str, forms: Sequence[str]) -> set[str]:
    """Which of ``forms`` (index tokens) ``text`` holds, as the index would store its words.

    Only words that start like one of the forms are stemmed (a Porter stem is the word with its
    ending changed): a long text costs a regex scan, not a stem per word.
    """
    pattern, wanted = _forms_pattern(tuple(forms))
    if pattern is None:
        return set()
    text = text.lower()
    if not text.isascii():
        text = _fold(text)
    return {form for form in map(index_form, pattern.findall(text)) if form in wanted}


@lru_cache(maxsize=1024)  # a recall asks the same forms of each of its hits
def _forms_pattern(forms: tuple[str, ...]) -> tuple[re.Pattern[str] | None, frozenset[str]]:
    """The words that start like one of ``forms`` (none: no form), and the forms."""
    starts = sorted({re.escape(form[:3]) for form in forms if form}, key=len, reverse=True)
    if not starts:
        return None, frozenset()
    return re.compile(r"(?<![^\W_])(?:" + "|".join(starts) + r")[^\W_]*"), frozenset(forms)


@lru_cache(maxsize=8192)
def term_tokens(term: str) -> tuple[tuple[str, ...], bool]:
    """A query term (``"word"``, ``"a phrase"`` or the prefix ``"x"*``) as index tokens, and
    whether its last token is a prefix (not stemmed, as FTS5 does)."""
    prefix = term.endswith("*")
    inner = term.rstrip("*").strip('"').lower()
    if not inner.isascii():
        inner = _fold(inner)
    raw = _TOKEN.findall(inner)
    tokens = [index_form(token) for token in raw]
    if prefix and raw:
        tokens[-1] = raw[-1]
    return tuple(tokens), prefix


def terms_held(terms: Sequence[str], index_text: str) -> tuple[bool, ...]:
    """Which of ``terms`` (FTS5 query terms) ``index_text`` holds: each of a term's tokens anywhere
    in it (a phrase's in any order), the last of a prefix term as the start of a word."""
    split = [term_tokens(term) for term in terms]
    whole = [tokens[:-1] if prefix else tokens for tokens, prefix in split]
    held = forms_held(index_text, [t for tokens in whole for t in tokens])
    words: list[str] | None = None
    found = []
    for (tokens, prefix), needed in zip(split, whole, strict=True):
        holds = bool(tokens) and all(t in held for t in needed)
        if holds and prefix:
            words = index_tokens(index_text) if words is None else words
            holds = any(word.startswith(tokens[-1]) for word in words)
        found.append(holds)
    return tuple(found)


# Entries and the terms each holds: rowids, and a bit mask over the query's terms for each.
_Held = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]
# Some entries that all hold the same terms: their rowids, and the mask of those terms.
_Part = tuple[npt.NDArray[np.int64], int]


def _combine(parts: Sequence[_Part]) -> _Held:
    """The entries of ``parts``, each once, with the masks of every part it is in OR-ed together."""
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    pks = np.concatenate([rowids for rowids, _ in parts])
    masks = np.concatenate([np.full(len(rowids), mask, dtype=np.int64) for rowids, mask in parts])
    order = np.argsort(pks, kind="stable")
    pks, masks = pks[order], masks[order]
    if not len(pks):
        return pks, masks
    starts = np.flatnonzero(np.concatenate(([True], pks[1:] != pks[:-1])))
    return pks[starts], np.bitwise_or.reduceat(masks, starts)


def idf(rows: int, df: int) -> float:
    """FTS5's idf: log((N - n + 0.5) / (n + 0.5)), floored at a millionth."""
    value = math.log((rows - df + 0.5) / (df + 0.5))
    return value if value > 0 else 1e-6


def share(tf: int, length: int, average: float) -> float:
    """The BM25 term-frequency part, FTS5's way: tf·(k1+1) / (tf + k1·(1 − b + b·len/avglen))."""
    ratio = length / average if average > 0 else 1.0
    return tf * (K1 + 1) / (tf + K1 * (1 - B + B * ratio))


class KeywordIndex:
    """BM25 rankings over an engine's keyword index (it keeps a df cache)."""

    def __init__(self, *, scored_rows: int = SCORED_ROWS, candidate_rows: int = CANDIDATE_ROWS,
                 narrow: int = NARROW) -> None:
        self.scored_rows = scored_rows
        self.candidate_rows = candidate_rows
        self.narrow = narrow
        self._df: dict[str, tuple[int, int]] = {}  # term: (df, the row count it was read at)

    def document_frequency(self, source: KeywordSource, term: str, rows: int) -> int:
        """How many entries hold ``term``, as the engine counts it.

        Counts are remembered while the file cannot have moved them by more than 1%: a common
        term's count is reused across many writes, a rare term's is read again after any.
        """
        cached = self._df.get(term)
        if cached is not None and abs(rows - cached[1]) <= _STALE_SHARE * cached[0]:
            return cached[0]
        df = source.document_frequency(term, rows)
        self._keep(term, df, rows)
        return df

    def document_frequencies(self, source: KeywordSource, terms: Sequence[str], rows: int) -> list[int]:
        """:meth:`document_frequency` of each term, those not remembered asked of the engine at once."""
        stale = [t for t in dict.fromkeys(terms)
                 if (cached := self._df.get(t)) is None or abs(rows - cached[1]) > _STALE_SHARE * cached[0]]
        counted = dict(zip(stale, source.document_frequencies(stale, rows), strict=True)) if stale else {}
        for term, df in counted.items():
            self._keep(term, df, rows)
        return [counted[t] if t in counted else self._df[t][0] for t in terms]

    def will_weigh(self, source: KeywordSource, terms: Sequence[str]) -> None:
        """The terms :meth:`document_frequencies` will be asked next, after another statement: those
        not remembered are counted by ``source`` along with it, where it can."""
        unknown = [t for t in dict.fromkeys(terms) if t not in self._df]
        if unknown:
            source.will_count(unknown)

    def _keep(self, term: str, df: int, rows: int) -> None:
        if len(self._df) >= _CACHED_TERMS:
            self._df.clear()
        self._df[term] = (df, rows)

    # ---- ranking --------------------------------------------------------------------------------

    def ranking(
        self, source: KeywordSource, terms: Sequence[str], k: int, selection: Selection, *, exact: bool = False,
    ) -> list[tuple[int, float]]:
        """(pk, score) of the ``k`` best entries by BM25 that pass ``selection``, best first.

        The engine scores the query itself when ``exact`` or when its words' posting lists are
        short together; otherwise see the module docstring. A filter that leaves few entries (a
        session, a conversation's prefix, a day) is answered inside them: each term's entries are
        read within their pk range, or looked up one by one when that is cheaper.
        """
        if exact or source.scores_every_match:
            return source.ranked(terms, k, selection)
        rows, average = source.stats()
        if rows <= self.scored_rows:
            return source.ranked(terms, k, selection)
        counted = [Term(t, self.document_frequency(source, t, rows)) for t in terms]
        counted = sorted((t for t in counted if t.df), key=lambda t: t.df)  # a word no entry holds adds nothing
        if sum(t.df for t in counted) <= self.scored_rows:
            return source.ranked([t.fts for t in counted], k, selection) if counted else []
        # Whether the filters leave few entries is asked of the indexed ones alone (kind, session,
        # time): tags and roles would be tested on every entry of the namespace to find out.
        indexed = selection.but(tags=(), any_tags=(), role=None)
        if not indexed.filters.is_empty and source.count(indexed, self.narrow + 1) <= self.narrow:
            held = self._held_within(source, counted, sorted(source.pks(selection)), rows)
            return self._score(source, counted, held, rows, average, k)
        parts, rare = self._held_by_candidates(source, counted)
        scored = self._score(source, counted, _combine(parts), rows, average, k, selection)
        # An entry holding one of the other terms alone scores at most idf·(k1+1). Where that could
        # reach the top k, that term's own best entries (ranked by the engine) join the candidates,
        # if the term is not so common that ranking its entries costs more than the query's budget.
        added = False
        for i in range(rare, len(counted)):
            if len(scored) >= k and idf(rows, counted[i].df) * (K1 + 1) <= scored[k - 1][1]:
                continue
            if counted[i].df > self.candidate_rows:
                continue
            best = [pk for pk, _ in source.ranked([counted[i].fts], k, selection)]
            parts.append((np.array(best, dtype=np.int64), 1 << i))
            added = added or bool(best)
        if added:
            scored = self._score(source, counted, _combine(parts), rows, average, k, selection)
        if len(scored) < k:
            # Fewer candidates than hits wanted (the filters exclude most of what the words find,
            # or few entries hold two words): entries holding one common word count now.
            return source.ranked([t.fts for t in counted], k, selection)
        return scored

    # ---- which entries hold which terms -----------------------------------------------------------

    def _held_by_candidates(self, source: KeywordSource, terms: list[Term]) -> tuple[list[_Part], int]:
        """The candidates (see the module docstring) as (pks, bit mask of the terms they hold)
        parts over ``terms`` (rarest first), and how many of the rarest terms gave all their entries."""
        count = 0
        total = 0
        for term in terms:
            if count and total + term.df > self.candidate_rows:
                break
            count += 1
            total += term.df
        parts = [(source.holders(((term.fts,),)), 1 << i) for i, term in enumerate(terms[:count])]
        anchor = tuple(t.fts for t in terms[:count])
        parts += [(source.holders((anchor, (terms[i].fts,))), 1 << i) for i in range(count, len(terms))]
        # Entries holding none of the rarest terms but two of the next ones. They may hold a third
        # term beyond these: it is not looked up (its idf is lower than theirs).
        parts += [
            (source.holders(((terms[i].fts,), (terms[j].fts,))), (1 << i) | (1 << j))
            for i, j in combinations(range(count, min(len(terms), count + PAIRED)), 2)
        ]
        return parts, count

    def _held_within(self, source: KeywordSource, terms: list[Term], pks: list[int], rows: int) -> _Held:
        """Which of the entries ``pks`` (sorted) hold which terms."""
        if not pks:
            return _combine([])
        members = np.array(pks, dtype=np.int64)
        low, high = pks[0], pks[-1]
        span = (high - low + 1) / max(rows, 1)
        parts: list[_Part] = []
        for i, term in enumerate(terms):
            if term.df * span <= _PROBE_COST * len(pks):  # walking the term's rows in the range is cheaper
                found = source.holders(((term.fts,),), low, high)
                holders = found[np.isin(found, members, assume_unique=True)]
            else:
                holders = source.holders_among(term.fts, pks)
            parts.append((holders, 1 << i))
        return _combine(parts)

    # ---- scores ---------------------------------------------------------------------------------

    def _score(
        self, source: KeywordSource, terms: list[Term], held: _Held, rows: int, average: float, k: int,
        selection: Selection | None = None,
    ) -> list[tuple[int, float]]:
        """The best ``k`` of the entries ``held`` (rowids, masks of the terms each holds), best first.

        Entries are weighed by the idf of the terms they hold, most first; then, a slice at a time,
        the ``selection`` and their lengths give each its BM25 with
        every term counted once.
        Slices are read until the next entry's weight, even at the shortest length, cannot reach the
        last of the best :data:`_RESCORED` (or ``2k``), which are then scored in full: each term's
        frequency counted in the entry's index text.
        """
        pks, masks = held
        if not len(pks):
            return []
        idfs = np.array([idf(rows, t.df) for t in terms])
        distinct, which = np.unique(masks, return_inverse=True)
        bits = (distinct[:, None] >> np.arange(len(terms), dtype=np.int64)) & 1
        weights = (bits @ idfs)[which]
        order = np.argsort(-weights, kind="stable")  # pks ascending: ties go to the older entry
        wanted = max(_RESCORED, 2 * k)
        shortest = share(1, 0, average)
        chosen: list[tuple[float, int, int]] = []  # (-score with every term once, pk, mask)
        lengths: dict[int, int] = {}
        start = 0
        while start < min(len(order), _EXAMINED * wanted):
            if len(chosen) >= wanted:
                chosen.sort()
                del chosen[wanted:]
                if weights[order[start]] * shortest < -chosen[-1][0]:
                    break
            at = order[start : start + wanted]
            start += wanted
            batch = [int(pk) for pk in pks[at]]
            read = source.lengths(batch, selection)
            lengths.update(read)
            chosen.extend(
                (-float(weights[i]) * share(1, read[pk], average), pk, int(masks[i]))
                for i, pk in zip(at, batch, strict=True) if pk in read
            )
        chosen.sort()
        best = chosen[:wanted]
        written = source.texts([pk for _, pk, _ in best])
        forms = [t.form for t in terms]
        # Only tokens that start like a term's form can be that term (a Porter stem is the word
        # with its ending changed): the regex finds just those, in C.
        starts = sorted({re.escape(form[:3]) for form in forms if form}, key=len, reverse=True)
        candidates = re.compile(r"(?<![^\W_])(?:" + "|".join(starts) + r")[^\W_]*") if starts else None
        scored = []
        for _, pk, mask in best:
            text = written.get(pk, "").lower()
            if not text.isascii():  # as the tokenizer does: "josé" is stored as "jose"
                text = _fold(text)
            counts = Counter(index_form(token) for token in candidates.findall(text)) if candidates else Counter()
            length = lengths.get(pk, 0)
            score = 0.0
            for i, form in enumerate(forms):
                if mask >> i & 1:
                    tf = max(1, counts[form]) if form is not None else 1
                    score += float(idfs[i]) * share(tf, length, average)
            scored.append((pk, score))
        scored.sort(key=lambda item: (-item[1], item[0]))
        return scored[:k]
