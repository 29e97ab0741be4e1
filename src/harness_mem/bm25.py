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
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations
from typing import Any

import numpy as np
import numpy.typing as npt

from .db import Connection
from .filters import Filters

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

#: Gives the keyword-index text of each entry asked for (by pk), as it was written.
IndexTexts = Callable[[Sequence[int]], dict[int, str]]


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
    import snowballstemmer  # type: ignore[import-untyped]

    return snowballstemmer.stemmer("porter")


def _fold(text: str) -> str:
    """``text`` without diacritics (unicode61's remove_diacritics)."""
    decomposed = unicodedata.normalize("NFKD", text)
    if decomposed == text:  # nothing to remove (curly quotes, CJK, emoji): the common case
        return text
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


@lru_cache(maxsize=8192)
def index_form(word: str) -> str:
    """``word`` as the index's tokenizer stores it (porter over unicode61, diacritics removed)."""
    folded = _fold(word).lower()
    if len(folded) < 3 or not folded.isascii() or not folded.isalpha():
        return folded  # the tokenizer leaves short words alone; the stemmer knows only a-z
    return str(_stemmer().stemWord(folded))


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """An SQLite varint (big-endian, 7 bits a byte, the ninth byte whole) at ``pos``: (value, next pos)."""
    value = 0
    for _ in range(8):
        byte = data[pos]
        pos += 1
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos
    return (value << 8) | data[pos], pos + 1


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
    """BM25 rankings over ``entries_fts`` for one store (it keeps a df cache)."""

    def __init__(self, *, scored_rows: int = SCORED_ROWS, candidate_rows: int = CANDIDATE_ROWS,
                 narrow: int = NARROW) -> None:
        self.scored_rows = scored_rows
        self.candidate_rows = candidate_rows
        self.narrow = narrow
        self._df: dict[str, tuple[int, int]] = {}  # index form: (df, the row count it was read at)

    # ---- statistics -----------------------------------------------------------------------------

    def stats(self, conn: Connection) -> tuple[int, float]:
        """(rows, average tokens per row), as FTS5 keeps them for bm25()."""
        row = conn.execute("SELECT block FROM entries_fts_data WHERE id = 1").fetchone()
        if row is None or not row[0]:
            return 0, 0.0
        rows, pos = _varint(row[0], 0)
        tokens, _ = _varint(row[0], pos)
        return rows, (tokens / rows if rows else 0.0)

    def document_frequency(self, conn: Connection, fts: str, rows: int) -> int:
        """How many entries hold the term ``fts`` (a quoted word, a quoted phrase or a prefix).

        Counted by FTS5 itself (its own tokenizer) up to :data:`_COUNTED`; a term held by more is
        counted in four slices of the rowid range and scaled up, so the cost stays bounded however
        common the term (its idf is low then, and a 1% error moves it by about 0.01). Counts are
        remembered while the file cannot have moved them by more than 1%: a common term's count
        is reused across many writes, a rare term's is read again after any.
        """
        cached = self._df.get(fts)
        if cached is not None and abs(rows - cached[1]) <= _STALE_SHARE * cached[0]:
            return cached[0]
        df = conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM entries_fts WHERE entries_fts MATCH ? LIMIT ?)", (fts, _COUNTED)
        ).fetchone()[0]
        if df >= _COUNTED:
            # Two queries: SQLite reads the end of the b-tree for a lone min() or max(), not for both.
            low = conn.execute("SELECT min(id) FROM entries_fts_docsize").fetchone()[0]
            high = conn.execute("SELECT max(id) FROM entries_fts_docsize").fetchone()[0]
            span = high - low + 1
            width = max(1, span // 32)
            sampled = sum(
                conn.execute(
                    "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ? AND rowid BETWEEN ? AND ?",
                    (fts, start, start + width - 1),
                ).fetchone()[0]
                for start in (low + span * i // 4 for i in range(4))
            )
            df = max(_COUNTED, min(rows, round(sampled * span / (4 * width))))
        if len(self._df) >= _CACHED_TERMS:
            self._df.clear()
        self._df[fts] = (df, rows)
        return int(df)

    # ---- ranking --------------------------------------------------------------------------------

    def ranking(
        self, conn: Connection, terms: Sequence[str], k: int, filters: Filters, namespace: str, now: int,
        texts: IndexTexts, *, exact: bool = False,
    ) -> list[tuple[int, float]]:
        """(pk, score) of the ``k`` best entries by BM25 that pass ``filters``, best first.

        FTS5 scores the query itself when ``exact`` or when its words' posting lists are short
        together; otherwise see the module docstring. A filter that leaves few entries (a session,
        a conversation's prefix, a day) is answered inside them: each term's entries are read
        within their rowid range, or looked up one by one when that is cheaper.
        """
        where, params = filters.sql(namespace, now)
        rows, average = self.stats(conn)
        if exact or rows <= self.scored_rows:
            return self._fts_ranking(conn, " OR ".join(terms), k, where, params)
        counted = [Term(t, self.document_frequency(conn, t, rows)) for t in terms]
        counted = sorted((t for t in counted if t.df), key=lambda t: t.df)  # a word no entry holds adds nothing
        if sum(t.df for t in counted) <= self.scored_rows:
            return self._fts_ranking(conn, " OR ".join(t.fts for t in counted), k, where, params) if counted else []
        # Whether the filters leave few entries is asked of the indexed ones alone (kind, session,
        # time): tags and roles would be tested on every entry of the namespace to find out.
        indexed = filters.model_copy(update={"tags": (), "any_tags": (), "role": None})
        if not indexed.is_empty:
            bound, bound_params = indexed.sql(namespace, now)
            count = conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {bound} LIMIT ?)",
                                 [*bound_params, self.narrow + 1]).fetchone()[0]
            if count <= self.narrow:  # (SQLite stops counting at narrow + 1)
                inside = conn.execute(f"SELECT e.pk FROM entries e WHERE {where}", params).fetchall()
                held = self._held_within(conn, counted, sorted(pk for (pk,) in inside), rows)
                return self._score(conn, counted, held, rows, average, k, texts)
        parts, rare = self._held_by_candidates(conn, counted)
        scored = self._score(conn, counted, _combine(parts), rows, average, k, texts, (where, params))
        # An entry holding one of the other terms alone scores at most idf·(k1+1). Where that could
        # reach the top k, that term's own best entries (ranked by FTS5) join the candidates, if
        # the term is not so common that ranking its entries costs more than the query's budget.
        added = False
        for i in range(rare, len(counted)):
            if len(scored) >= k and idf(rows, counted[i].df) * (K1 + 1) <= scored[k - 1][1]:
                continue
            if counted[i].df > self.candidate_rows:
                continue
            best = [pk for pk, _ in self._fts_ranking(conn, counted[i].fts, k, where, params)]
            parts.append((np.array(best, dtype=np.int64), 1 << i))
            added = added or bool(best)
        if added:
            scored = self._score(conn, counted, _combine(parts), rows, average, k, texts, (where, params))
        if len(scored) < k:
            # Fewer candidates than hits wanted (the filters exclude most of what the words find,
            # or few entries hold two words): entries holding one common word count now.
            return self._fts_ranking(conn, " OR ".join(t.fts for t in counted), k, where, params)
        return scored

    def _fts_ranking(
        self, conn: Connection, expression: str, k: int, where: str, params: list[Any]
    ) -> list[tuple[int, float]]:
        """FTS5's own ranking of ``expression``, filtered; the score is ``-bm25`` (higher is better)."""
        # Ask FTS5 for a shortlist first: ORDER BY rank LIMIT lets it skip sorting every match.
        # If filters leave fewer than k of the shortlist, fall back to ranking all matches.
        shortlist = max(4 * k, 64)
        rows: list[Any] = []
        for limit in (shortlist, -1):
            rows = conn.execute(
                "SELECT e.pk, f.rank FROM"
                " (SELECT rowid, rank FROM entries_fts WHERE entries_fts MATCH ? ORDER BY rank LIMIT ?) AS f"
                # CROSS JOIN keeps the matches as the outer loop: otherwise SQLite may start from
                # `entries` through the namespace index and test the filters on every row.
                f" CROSS JOIN entries e ON e.pk = f.rowid WHERE {where} ORDER BY f.rank LIMIT ?",
                [expression, limit, *params, k],
            ).fetchall()
            if len(rows) >= k or limit == -1:
                break
            count = conn.execute(
                "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?", (expression,)
            ).fetchone()[0]
            if count <= shortlist:
                break
        return [(pk, -float(rank)) for pk, rank in rows]

    # ---- which entries hold which terms -----------------------------------------------------------

    def _rowids(self, conn: Connection, expression: str, *bounds: int) -> npt.NDArray[np.int64]:
        """The rowids matching ``expression`` (within ``bounds``, inclusive, when given), ascending."""
        # One string from SQLite, parsed by numpy: about a third of the time of a row per rowid.
        sql = "SELECT group_concat(rowid) FROM entries_fts WHERE entries_fts MATCH ?"
        if bounds:
            sql += " AND rowid BETWEEN ? AND ?"
        found = conn.execute(sql, (expression, *bounds)).fetchone()[0]
        return np.fromstring(found, dtype=np.int64, sep=",") if found else np.empty(0, dtype=np.int64)

    def _held_by_candidates(self, conn: Connection, terms: list[Term]) -> tuple[list[_Part], int]:
        """The candidates (see the module docstring) as (rowids, bit mask of the terms they hold)
        parts over ``terms`` (rarest first), and how many of the rarest terms gave all their entries."""
        count = 0
        total = 0
        for term in terms:
            if count and total + term.df > self.candidate_rows:
                break
            count += 1
            total += term.df
        parts = [(self._rowids(conn, term.fts), 1 << i) for i, term in enumerate(terms[:count])]
        anchor = "(" + " OR ".join(t.fts for t in terms[:count]) + ")"
        parts += [(self._rowids(conn, f"{anchor} AND {terms[i].fts}"), 1 << i) for i in range(count, len(terms))]
        # Entries holding none of the rarest terms but two of the next ones. They may hold a third
        # term beyond these: it is not looked up (its idf is lower than theirs).
        parts += [
            (self._rowids(conn, f"{terms[i].fts} AND {terms[j].fts}"), (1 << i) | (1 << j))
            for i, j in combinations(range(count, min(len(terms), count + PAIRED)), 2)
        ]
        return parts, count

    def _held_within(self, conn: Connection, terms: list[Term], pks: list[int], rows: int) -> _Held:
        """Which of the entries ``pks`` (sorted) hold which terms."""
        if not pks:
            return _combine([])
        members = np.array(pks, dtype=np.int64)
        low, high = pks[0], pks[-1]
        span = (high - low + 1) / max(rows, 1)
        as_json = json.dumps(pks)
        parts: list[_Part] = []
        for i, term in enumerate(terms):
            if term.df * span <= _PROBE_COST * len(pks):  # walking the term's rows in the range is cheaper
                found = self._rowids(conn, term.fts, low, high)
                holders = found[np.isin(found, members, assume_unique=True)]
            else:
                holders = np.array([pk for (pk,) in conn.execute(
                    "SELECT c.value FROM json_each(?) AS c WHERE EXISTS"
                    " (SELECT 1 FROM entries_fts WHERE entries_fts MATCH ? AND rowid = c.value)",
                    (as_json, term.fts),
                )], dtype=np.int64)
            parts.append((holders, 1 << i))
        return _combine(parts)

    # ---- scores ---------------------------------------------------------------------------------

    def _score(
        self, conn: Connection, terms: list[Term], held: _Held, rows: int, average: float, k: int,
        texts: IndexTexts, filters: tuple[str, list[Any]] | None = None,
    ) -> list[tuple[int, float]]:
        """The best ``k`` of the entries ``held`` (rowids, masks of the terms each holds), best first.

        Entries are weighed by the idf of the terms they hold, most first; then, a slice at a time,
        the filters (a WHERE clause and its parameters) and their lengths give each its BM25 with
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
            read = self._lengths(conn, batch, filters)
            lengths.update(read)
            chosen.extend(
                (-float(weights[i]) * share(1, read[pk], average), pk, int(masks[i]))
                for i, pk in zip(at, batch, strict=True) if pk in read
            )
        chosen.sort()
        best = chosen[:wanted]
        written = texts([pk for _, pk, _ in best])
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

    def _lengths(
        self, conn: Connection, pks: Sequence[int], filters: tuple[str, list[Any]] | None = None
    ) -> dict[int, int]:
        """Each entry's length in index tokens (what bm25() normalises by); with ``filters`` (a WHERE
        clause over ``entries e`` and its parameters), only of the entries that pass them."""
        if filters is None:
            sql, params = "SELECT c.value, d.sz FROM json_each(?) AS c CROSS JOIN entries_fts_docsize d ON d.id = c.value", []
        else:
            # CROSS JOIN: look each pk up, rather than let SQLite scan the namespace index testing each row.
            sql = ("SELECT e.pk, d.sz FROM json_each(?) AS c CROSS JOIN entries e ON e.pk = c.value"
                   f" CROSS JOIN entries_fts_docsize d ON d.id = e.pk WHERE {filters[0]}")
            params = filters[1]
        # A length below 128 is one byte, the common case by far.
        return {pk: (size[0] if size[0] < 0x80 else _varint(size, 0)[0]) if size else 0
                for pk, size in conn.execute(sql, [json.dumps(list(pks)), *params])}
