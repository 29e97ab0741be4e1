"""The keyword index of a SQLite store: FTS5's answers for the shared BM25 ranking (:mod:`harness_mem.bm25`).

There are two indexes, one per lane: ``entries_fts`` for what was said and written, ``derived_fts``
for what consolidation derived from it (topic segments, facts), so that the derived entries' words
never move the statistics the others are ranked by (see :func:`keyword_table`). Each is contentless:
it keeps each entry's tokens by rowid (the entry's pk), FTS5's own statistics in its ``_data`` table
and each row's length in ``_docsize``. Everything here reads those, never the entries' text, except
:meth:`FTS5Keywords.texts`, which rebuilds an entry's index text as its write made it.

**Totals.** bm25() reads an index's totals (rows, tokens) from its averages record. A contentless_delete
table adds to them on insert but never takes a deleted row off: every forget, replacement and
reindex would inflate them (a reindex doubled the rows). So deletes go through :func:`unindex`,
which notes what is to come off, and :func:`settle_totals` takes it off in the next transaction
(FTS5 writes its own totals back when a transaction that changed the index commits, over any
correction made inside it). The note is a setting written with the delete, so a crash between the
two only delays the correction to the next deleting write or open.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ..bm25 import Match, terms_held
from ..db import Connection
from ..filters import Selection
from ..storage import DERIVED_SOURCE
from .sqlite_where import where

#: The keyword index of each lane: what was said and written, and what consolidation derived.
KEYWORD_TABLES = ("entries_fts", "derived_fts")

# Terms held by fewer entries than this are counted exactly; more common ones by sampling.
COUNTED = 16384


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """An SQLite varint (big-endian, 7 bits a byte, the ninth byte whole) at ``pos``: (value, next pos)."""
    value = 0
    for _ in range(8):
        byte = data[pos]
        pos += 1
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos
    return (value << 8) | data[pos], pos + 1


# What is to come off each index's totals: "<rows> <tokens>", keyed by table.
_UNCOUNTED = "keywords.uncounted."


def encode_varint(value: int) -> bytes:
    """``value`` as an SQLite varint (the inverse of :func:`varint`)."""
    if value > 0x00FFFFFFFFFFFFFF:  # nine bytes: eight of seven bits, then a whole one
        head = value >> 8
        return bytes(0x80 | ((head >> (7 * (7 - i))) & 0x7F) for i in range(8)) + bytes([value & 0xFF])
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(reversed(groups))


def _totals(conn: Connection, table: str) -> tuple[int, int] | None:
    """(rows, tokens) as the index's averages record keeps them; None when it has none yet."""
    row = conn.execute(f"SELECT block FROM {table}_data WHERE id = 1").fetchone()
    if row is None or not row[0]:
        return None
    rows, pos = varint(row[0], 0)
    return rows, varint(row[0], pos)[0]


def _size(blob: bytes | None) -> int:
    """A row's length in tokens, from its ``_docsize`` blob (one byte below 128, the common case)."""
    return (blob[0] if blob[0] < 0x80 else varint(blob, 0)[0]) if blob else 0


def unindex(conn: Connection, table: str, pks: Sequence[int]) -> None:
    """Delete these entries' rows from ``table`` (inside a write transaction), noting their rows and
    tokens to come off its totals (see the module docstring)."""
    found = conn.execute(f"SELECT d.sz FROM json_each(?) AS c CROSS JOIN {table}_docsize d ON d.id = c.value",
                         (json.dumps(list(pks)),)).fetchall()
    if not found:
        return
    conn.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT value FROM json_each(?))", (json.dumps(list(pks)),))
    before = conn.execute("SELECT value FROM settings WHERE key = ?", (_UNCOUNTED + table,)).fetchone()
    rows, tokens = (int(n) for n in before[0].split()) if before else (0, 0)
    conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                 (_UNCOUNTED + table, f"{rows + len(found)} {tokens + sum(_size(sz) for (sz,) in found)}"))


def unsettled(conn: Connection) -> bool:
    """Whether some deleted rows are still to come off an index's totals (read without a lock)."""
    return conn.execute("SELECT 1 FROM settings WHERE key LIKE ? LIMIT 1", (_UNCOUNTED + "%",)).fetchone() is not None


def settle_totals(conn: Connection) -> None:
    """Take what :func:`unindex` noted off each index's totals (in a write transaction of its own,
    after the ones that deleted: every note there is, whichever connection wrote it)."""
    noted = conn.execute("SELECT key, value FROM settings WHERE key LIKE ?", (_UNCOUNTED + "%",)).fetchall()
    for key, value in noted:
        table = key[len(_UNCOUNTED):]
        totals = _totals(conn, table) if table in KEYWORD_TABLES else None
        if totals is not None:
            rows, tokens = (int(n) for n in value.split())
            _write_totals(conn, table, totals[0] - rows, totals[1] - tokens)
        conn.execute("DELETE FROM settings WHERE key = ?", (key,))


def recount_totals(conn: Connection, table: str) -> None:
    """Set an index's totals to what its rows hold: mends any drift, such as an older file's deletes
    that were never taken off. In a write transaction that changes no index (FTS5 would write its own
    totals over these at commit); the notes of deletes committed before are dropped, as counted."""
    rows, tokens = 0, 0
    for (size,) in conn.execute(f"SELECT sz FROM {table}_docsize"):
        rows, tokens = rows + 1, tokens + _size(size)
    if _totals(conn, table) is not None:
        _write_totals(conn, table, rows, tokens)
    conn.execute("DELETE FROM settings WHERE key = ?", (_UNCOUNTED + table,))


def _write_totals(conn: Connection, table: str, rows: int, tokens: int) -> None:
    conn.execute(f"UPDATE {table}_data SET block = ? WHERE id = 1",
                 (encode_varint(max(rows, 0)) + encode_varint(max(tokens, 0)),))


def keyword_table(source: str | None) -> str:
    """The keyword index an entry's words go in, by its source."""
    return KEYWORD_TABLES[source == DERIVED_SOURCE]


def fts_expression(match: Match) -> str:
    """``match`` as an FTS5 MATCH expression (its terms are already quoted for FTS5)."""
    groups = [group[0] if len(group) == 1 else "(" + " OR ".join(group) + ")" for group in match]
    return " AND ".join(groups)


class FTS5Keywords:
    """:class:`~harness_mem.bm25.KeywordSource` over one of :data:`KEYWORD_TABLES`."""

    scores_every_match = False  # bm25() walks every posting: the shared shortcuts rank a large file

    def __init__(self, conn: Connection, texts: Callable[[Sequence[int]], dict[int, str]],
                 table: str = KEYWORD_TABLES[0]) -> None:
        assert table in KEYWORD_TABLES  # it goes into SQL
        self.conn = conn
        self.table = table
        self._texts = texts

    def stats(self) -> tuple[int, float]:
        """(rows, average tokens per row), as FTS5 keeps them for bm25()."""
        rows, tokens = _totals(self.conn, self.table) or (0, 0)
        return rows, (tokens / rows if rows else 0.0)

    def document_frequencies(self, terms: Sequence[str], rows: int) -> list[int]:
        return [self.document_frequency(term, rows) for term in terms]  # no round trips to save

    def will_count(self, terms: Sequence[str]) -> None:
        return None  # counted when asked: nothing to save

    def document_frequency(self, term: str, rows: int) -> int:
        """Counted by FTS5 itself (its own tokenizer) up to :data:`COUNTED`; a term held by more is
        counted in four slices of the rowid range and scaled up, so the cost stays bounded however
        common the term (its idf is low then, and a 1% error moves it by about 0.01)."""
        conn = self.conn
        df = conn.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM {self.table} WHERE {self.table} MATCH ? LIMIT ?)", (term, COUNTED)
        ).fetchone()[0]
        if df >= COUNTED:
            # Two queries: SQLite reads the end of the b-tree for a lone min() or max(), not for both.
            low = conn.execute(f"SELECT min(id) FROM {self.table}_docsize").fetchone()[0]
            high = conn.execute(f"SELECT max(id) FROM {self.table}_docsize").fetchone()[0]
            span = high - low + 1
            width = max(1, span // 32)
            sampled = sum(
                conn.execute(
                    f"SELECT count(*) FROM {self.table} WHERE {self.table} MATCH ? AND rowid BETWEEN ? AND ?",
                    (term, start, start + width - 1),
                ).fetchone()[0]
                for start in (low + span * i // 4 for i in range(4))
            )
            df = max(COUNTED, min(rows, round(sampled * span / (4 * width))))
        return int(df)

    def ranked(self, terms: Sequence[str], k: int, selection: Selection) -> list[tuple[int, float]]:
        """FTS5's own ranking of an OR of ``terms``, filtered; the score is ``-bm25`` (higher is better)."""
        expression = " OR ".join(terms)
        clause, params = where(selection)
        # Ask FTS5 for a shortlist first: ORDER BY rank LIMIT lets it skip sorting every match.
        # If filters leave fewer than k of the shortlist, fall back to ranking all matches.
        shortlist = max(4 * k, 64)
        rows: list[Any] = []
        for limit in (shortlist, -1):
            rows = self.conn.execute(
                "SELECT e.pk, f.rank FROM"
                f" (SELECT rowid, rank FROM {self.table} WHERE {self.table} MATCH ? ORDER BY rank LIMIT ?) AS f"
                # CROSS JOIN keeps the matches as the outer loop: otherwise SQLite may start from
                # `entries` through the namespace index and test the filters on every row.
                f" CROSS JOIN entries e ON e.pk = f.rowid WHERE {clause} ORDER BY f.rank LIMIT ?",
                [expression, limit, *params, k],
            ).fetchall()
            if len(rows) >= k or limit == -1:
                break
            count = self.conn.execute(
                f"SELECT count(*) FROM {self.table} WHERE {self.table} MATCH ?", (expression,)
            ).fetchone()[0]
            if count <= shortlist:
                break
        return [(pk, -float(rank)) for pk, rank in rows]

    def holders(self, match: Match, low: int | None = None, high: int | None = None) -> npt.NDArray[np.int64]:
        # One string from SQLite, parsed by numpy: about a third of the time of a row per rowid.
        sql = f"SELECT group_concat(rowid) FROM {self.table} WHERE {self.table} MATCH ?"
        params: list[Any] = [fts_expression(match)]
        if low is not None and high is not None:
            sql += " AND rowid BETWEEN ? AND ?"
            params += [low, high]
        found = self.conn.execute(sql, params).fetchone()[0]
        return np.fromstring(found, dtype=np.int64, sep=",") if found else np.empty(0, dtype=np.int64)

    def holders_among(self, term: str, pks: Sequence[int]) -> npt.NDArray[np.int64]:
        return np.array([pk for (pk,) in self.conn.execute(
            "SELECT c.value FROM json_each(?) AS c WHERE EXISTS"
            f" (SELECT 1 FROM {self.table} WHERE {self.table} MATCH ? AND rowid = c.value)",
            (json.dumps(list(pks)), term),
        )], dtype=np.int64)

    def lengths(self, pks: Sequence[int], selection: Selection | None = None) -> dict[int, int]:
        """Each entry's length in index tokens (what bm25() normalises by), from FTS5's docsize."""
        params: list[Any] = []
        if selection is None:
            sql = f"SELECT c.value, d.sz FROM json_each(?) AS c CROSS JOIN {self.table}_docsize d ON d.id = c.value"
        else:
            clause, params = where(selection)
            # CROSS JOIN: look each pk up, rather than let SQLite scan the namespace index testing each row.
            sql = ("SELECT e.pk, d.sz FROM json_each(?) AS c CROSS JOIN entries e ON e.pk = c.value"
                   f" CROSS JOIN {self.table}_docsize d ON d.id = e.pk WHERE {clause}")
        return {pk: _size(size) for pk, size in self.conn.execute(sql, [json.dumps(list(pks)), *params])}

    def texts(self, pks: Sequence[int]) -> dict[int, str]:
        return self._texts(pks)

    def holding(self, pks: Sequence[int], terms: Sequence[str]) -> dict[int, tuple[bool, ...]]:
        return {pk: terms_held(terms, text) for pk, text in self._texts(pks).items()}

    def will_hold(self, terms: Sequence[str]) -> None:
        return None  # read when asked: nothing to save

    def count(self, selection: Selection, limit: int) -> int:
        clause, params = where(selection)
        return int(self.conn.execute(f"SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {clause} LIMIT ?)",
                                     [*params, limit]).fetchone()[0])

    def pks(self, selection: Selection) -> list[int]:
        clause, params = where(selection)
        return [pk for (pk,) in self.conn.execute(f"SELECT e.pk FROM entries e WHERE {clause}", params)]
