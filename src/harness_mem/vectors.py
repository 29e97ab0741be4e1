"""The vector index: every embedding lives once, in sqlite-vec, and every semantic query runs through it.

One vec0 table, ``entries_vec``, keyed by the entry's internal pk and written or deleted in the same
transaction as the entry. Each row holds:

- ``embedding int8[dim]`` — the vector, scaled by its own largest component to ±127 and rounded.
  Cosine distance does not depend on each vector's scale, so no scale is stored; the cosine of two
  int8 vectors differs from the float32 one by about 0.0006 on MiniLM vectors (bench/bench_vectors.py);
- ``bits bit[dim]`` — the signs of the same vector, for the shortlist;
- ``namespace`` as the partition key, and ``kind``, ``session_key`` (a 63-bit hash of the session
  id; text longer than 12 bytes is stored out of line by vec0, which makes equality slow) and
  ``created_at`` as metadata columns, so a filtered query reads only the rows that match.

A query is answered in two steps, both by vec0:

1. **Shortlist** — the entries nearest by sign bits, in two passes over an in-memory copy of the
   namespace's sign bits and session keys (56 bytes an entry), read straight from vec0's own
   chunks: a vec0 KNN over 100k bit vectors costs as much as it saves (its per-chunk top-k grows
   with the shortlist size), while the copy answers in milliseconds.

   a. the Hamming distance to the query's signs keeps PREFILTER_PER_SHORTLIST × the shortlist;
   b. those are ranked again by a *weighted* Hamming distance: a differing sign costs the query's
      magnitude in that dimension (in 2^WEIGHT_BITS - 1 levels), so the query keeps its precision
      and only the stored side is one bit. Plain Hamming counts a sign the query barely has like
      its largest one: on MiniLM questions over a million entries its top 240 held 0.76 of the
      exact top 10, the weighted pass's 0.92 (bench/bench_scale.py --vectors).

   The shortlist grows with the rows searched (ROWS_PER_SHORTLISTED): a one-bit estimate misranks
   a near neighbour below a share of the rows that does not shrink as the rows grow.
   A session filter selects rows of the copy by session key; kinds and time ranges are a vec0 KNN
   restricted by its metadata (plain Hamming there); other filters (role, tags, a session prefix)
   hand in the candidate pks.
2. **Rescore** — the shortlist's int8 vectors are compared with the query's by
   ``vec_distance_cosine`` in SQL, reading them by pk from vec0.
3. **Near the cut** — the weighted distance is an estimate: at 200,000 entries a shortlist of 240
   held .97 of the int8 exact top 10, and a fixed one long enough for .99 rescored four times the
   rows for every query. Instead the shortlist's own cosines against their weighted distances (a
   line through them) tell how far the estimate strays for this query; the rows ranked after the
   shortlist, up to NEAR_CUT_ROWS of them, are rescored too where the line, raised by
   NEAR_CUT_SPREADS times its errors' spread, reaches the k-th cosine. A query whose neighbours
   stand clear rescores few or none; one at a crowded cut rescores more.

Filters always apply before the top-k cut. A generation counter in ``settings`` tells each process
when another changed the vectors; its own writes update its copy in place.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from .db import Connection, database
from .errors import EmbedderError
from .passages import Passage, Scored, best_scored, read_back
from .protocols import Embedder

TABLE = "entries_vec"
#: A long entry's later windows and a turn's sentences (see :mod:`harness_mem.passages`), int8
#: like the index's vectors; ``sentence`` says which (1: a turn's sentence).
PASSAGES = "entries_passages"
PASSAGES_SQL = (f"CREATE TABLE IF NOT EXISTS {PASSAGES} (pk INTEGER NOT NULL, start INTEGER NOT NULL,"
                " stop INTEGER NOT NULL, embedding BLOB NOT NULL, sentence INTEGER NOT NULL DEFAULT 0,"
                " PRIMARY KEY (pk, start)) WITHOUT ROWID")
# Shortlist = max(SHORTLIST_MIN, SHORTLIST_PER_HIT × k, rows / ROWS_PER_SHORTLISTED), chosen in
# bench/bench_scale.py --vectors for ≥ 0.95 top-10 agreement with vec0's exact KNN on MiniLM questions
# at 100k and 1M entries (0.98 and 0.99).
SHORTLIST_MIN = 240
SHORTLIST_PER_HIT = 10
ROWS_PER_SHORTLISTED = 1000
# The Hamming pass keeps this many rows per shortlisted one for the weighted pass: fewer than about
# ten lose some of the exact top 10 before the weighted pass sees them.
PREFILTER_PER_SHORTLIST = 16
# The query's magnitudes are weighed in 2^WEIGHT_BITS - 1 levels: three bits rank as well as float
# weights do, and keep the distance a small integer (a histogram finds the cut).
WEIGHT_BITS = 3
# How many rows after the shortlist may be rescored near the cut (see the module docstring), and
# how many spreads of the estimate's error a row may fall short of the k-th cosine by and still be:
# on 200,000 entries (bench/bench_exact_neighbours.py) four spreads within 720 rows held .991 of the
# int8 exact top 10 (the shortlist of 240 alone .969), rescoring 302 rows more on average (a median
# of 258); 3.5 spreads .989 for 182 more. At 1M (simulated) .987 against .978, 317 more on average;
# within 3,000 rows .996, but 837 more on average and 3,000 at p95 (vec0 rescores a row in ~14 µs).
NEAR_CUT_ROWS = 720
NEAR_CUT_SPREADS = 4.0
# A filtered vec0 KNN ranks by plain Hamming distance: it needs the longer shortlist of old.
HAMMING_SHORTLIST_PER_HIT = 24
# vec0 refuses a KNN with k above this.
MAX_KNN = 4096

GENERATION_KEY = "vectors.generation"


class VectorRow(NamedTuple):
    """What the index keeps beside a vector: the entry's pk and the fields filters look at."""

    pk: int
    namespace: str
    kind: str
    session: str | None
    created_at: int  # ms since the epoch


@dataclass(frozen=True)
class VectorFilter:
    """The filters vec0 evaluates itself (its metadata columns); None means "any"."""

    kinds: tuple[str, ...] | None = None
    session: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None

    def sql(self) -> tuple[str, list[object]]:
        clauses: list[str] = []
        params: list[object] = []
        if self.kinds is not None:
            clauses.append(f"kind IN ({', '.join('?' * len(self.kinds))})")
            params.extend(self.kinds)
        if self.session is not None:
            clauses.append("session_key = ?")
            params.append(session_key(self.session))
        if self.since_ms is not None:
            clauses.append("created_at >= ?")
            params.append(self.since_ms)
        if self.until_ms is not None:
            clauses.append("created_at <= ?")
            params.append(self.until_ms)
        return "".join(f" AND {c}" for c in clauses), params


def other_model(recorded: dict[str, str], mine: dict[str, str]) -> EmbedderError:
    """The error for vectors made by another model than the one at hand (identities as recorded)."""
    return EmbedderError(
        f"this database's vectors were made by {recorded.get('name')} ({recorded.get('dim')} dims,"
        f" {recorded.get('fingerprint')}), not by {mine['name']} ({mine['dim']} dims, {mine['fingerprint']})"
        " — run `harness-mem reindex` to rebuild them with the current model"
    )


def session_key(session: str | None) -> int:
    """The session's key in the index: 0 for none, else a positive 63-bit hash of its id."""
    if session is None:
        return 0
    digest = hashlib.blake2b(session.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "little") >> 1) or 1


def bump_generation(conn: Connection) -> int:
    """Mark the vectors as changed (inside a write transaction); returns the new generation."""
    row = conn.execute(
        "UPDATE settings SET value = CAST(value AS INTEGER) + 1 WHERE key = ? RETURNING value", (GENERATION_KEY,)
    ).fetchone()
    return int(row[0])


def has_vector_table(conn: Connection) -> bool:
    return bool(database(conn)[TABLE].exists())


def drop_vectors(conn: Connection) -> int:
    """Drop every vector and the recorded model (inside a write transaction); returns how many went."""
    dropped = int(conn.execute(f"SELECT count(*) FROM {TABLE}_rowids").fetchone()[0]) if _has_current_layout(conn) else 0
    conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.execute(f"DROP TABLE IF EXISTS {PASSAGES}")
    conn.execute("DELETE FROM settings WHERE key LIKE 'embedder.%'")
    return dropped


#: Set in ``settings`` when the file keeps no vectors by choice: opens then load no model.
KEYWORD_ONLY_KEY = "store.keyword_only"


def delete_vector(conn: Connection, pk: int) -> None:
    """Delete an entry's vector and passages (inside a write transaction): vec0 has no cascade."""
    conn.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (pk,))
    if database(conn)[PASSAGES].exists():
        conn.execute(f"DELETE FROM {PASSAGES} WHERE pk = ?", (pk,))


def move_vectors(conn: Connection, pks: Sequence[int], namespace: str) -> list[tuple[int, bytes, int]]:
    """Put the vectors of ``pks`` in ``namespace``'s partition (inside a write transaction): vec0
    cannot change a row's partition key, so each row is read, deleted and written again, bytes as
    they were. Returns (pk, sign bits, session key) of each row moved."""
    if not pks or not has_vector_table(conn):
        return []
    found = conn.execute(
        f"SELECT rowid, kind, session_key, created_at, embedding, bits FROM {TABLE}"
        " WHERE rowid IN (SELECT value FROM json_each(?))", (json.dumps(list(pks)),)).fetchall()
    for pk, *_ in found:
        conn.execute(f"DELETE FROM {TABLE} WHERE rowid = ?", (pk,))
    conn.executemany(
        f"INSERT INTO {TABLE} (rowid, namespace, kind, session_key, created_at, embedding, bits)"
        " VALUES (?, ?, ?, ?, ?, vec_int8(?), vec_bit(?))",
        [(pk, namespace, kind, key, created, embedding, bits) for pk, kind, key, created, embedding, bits in found])
    return [(int(pk), bytes(bits), int(key)) for pk, _, key, _, _, bits in found]


def stored_passages(conn: Connection, pks: Sequence[int]) -> dict[int, list[Passage]]:
    """The later windows (and sentences) of the given entries (those that have any), in order."""
    found: dict[int, list[Passage]] = {}
    rows, vectors = _passage_rows(conn, pks)
    for (pk, *_), passage in zip(rows, read_back([(start, stop, s) for _, start, stop, s in rows], vectors),
                                 strict=True):
        found.setdefault(pk, []).append(passage)
    return found


def stored_passage_cosines(conn: Connection, query: npt.NDArray[np.float32],
                           pks: Sequence[int]) -> dict[int, list[Scored]]:
    """Of the given entries' later windows (and sentences), each entry's one a recall's best-of
    picks for ``query``, with its cosine (:func:`~harness_mem.passages.best_scored`)."""
    return best_scored(query, *_passage_rows(conn, pks))


def _passage_rows(conn: Connection, pks: Sequence[int]) -> tuple[list[tuple[int, int, int, bool]], npt.NDArray[np.int8]]:
    """The given entries' passages, (pk, start, stop, sentence) a row in order, and their vectors."""
    table = database(conn)[PASSAGES]
    none = np.empty((0, 0), dtype=np.int8)
    if not pks or not table.exists():
        return [], none
    # A file written before turns' sentences has no such column until its next writer adds it.
    sentence = "p.sentence" if "sentence" in table.columns_dict else "0"
    found = conn.execute(
        f"SELECT p.pk, p.start, p.stop, p.embedding, {sentence} FROM json_each(?) AS j CROSS JOIN {PASSAGES} p"
        " ON p.pk = j.value ORDER BY p.pk, p.start", (json.dumps(list(pks)),)
    ).fetchall()
    if not found:
        return [], none
    vectors = np.frombuffer(b"".join(row[3] for row in found), dtype=np.int8).reshape(len(found), -1)
    return [(int(pk), int(start), int(stop), bool(s)) for pk, start, stop, _, s in found], vectors


def _make_passage_table(conn: Connection) -> None:
    """Create the passages' table, or give an older one its ``sentence`` column (inside a write
    transaction): its rows are windows (and summaries' sentences), as the default says."""
    conn.execute(PASSAGES_SQL)
    if "sentence" not in database(conn)[PASSAGES].columns_dict:
        conn.execute(f"ALTER TABLE {PASSAGES} ADD COLUMN sentence INTEGER NOT NULL DEFAULT 0")


def is_keyword_only(conn: Connection) -> bool:
    return conn.execute("SELECT 1 FROM settings WHERE key = ?", (KEYWORD_ONLY_KEY,)).fetchone() is not None


def set_keyword_only(conn: Connection, keyword_only: bool) -> None:
    """Record (inside a write transaction) whether the file keeps vectors."""
    if keyword_only:
        conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES (?, '1')", (KEYWORD_ONLY_KEY,))
    else:
        conn.execute("DELETE FROM settings WHERE key = ?", (KEYWORD_ONLY_KEY,))


def live_entries(conn: Connection) -> int:
    """Entries (in every namespace) not forgotten, from the counters the entries' triggers keep
    (``entry_counts``): no entry is read (counting them read an index of a million rows)."""
    return int(conn.execute(  # a counter's key is [kind, role, redactions, forgotten]
        "SELECT coalesce(sum(value), 0) FROM entry_counts WHERE json_extract(key, '$[3]') = 0").fetchone()[0])


def missing_vectors(conn: Connection, live: int | None = None) -> int:
    """Entries (in every namespace) that have no vector yet: ``reindex`` embeds them. ``live`` is
    :func:`live_entries` when the caller has just counted them."""
    live = live_entries(conn) if live is None else live
    if not _has_current_layout(conn):
        return live
    # A vector row exists only for a live entry (deleting or forgetting an entry drops its vector),
    # so the live entries less the vectors are those without one: counting vec0's plain table of
    # pks reads no entry (matching each entry against it read every live one, at every view).
    return live - int(conn.execute(f"SELECT count(*) FROM {TABLE}_rowids").fetchone()[0])


#: An entry to embed: (pk, namespace, kind, session, content, role, created_at).
Unembedded = tuple[int, str, str, str | None, str, str | None, int]


def entries_without_vectors(conn: Connection, limit: int) -> list[Unembedded]:
    """Up to ``limit`` entries that have no vector."""
    return [(int(pk), ns, kind, session, content, role, int(created)) for pk, ns, kind, session, content, role, created
            in conn.execute(
                "SELECT pk, namespace, kind, session, content, role, created_at FROM entries e"
                f" WHERE e.forgotten_at IS NULL AND NOT EXISTS (SELECT 1 FROM {TABLE}_rowids r WHERE r.rowid = e.pk)"
                " ORDER BY pk LIMIT ?", (limit,))]


def still_without_vectors(conn: Connection, rows: Sequence[Unembedded]) -> list[int]:
    """The positions in ``rows`` (from :func:`entries_without_vectors`) that may have their vectors written.

    Called inside the write transaction, after the model ran outside it: meanwhile another
    connection may have deleted or forgotten an entry (a vector then would belong to nobody, and
    block the pk's reuse), embedded it, or deleted it and stored another entry under the same pk
    (the vector would then be of the wrong text). Only rows that are as they were read pass.
    """
    current = {
        int(pk): (ns, kind, session, content, role, int(created))
        for pk, ns, kind, session, content, role, created in conn.execute(
            "SELECT pk, namespace, kind, session, content, role, created_at FROM entries e"
            " WHERE e.pk IN (SELECT value FROM json_each(?)) AND e.forgotten_at IS NULL"
            f" AND NOT EXISTS (SELECT 1 FROM {TABLE}_rowids r WHERE r.rowid = e.pk)",
            (json.dumps([row[0] for row in rows]),),
        )
    }
    return [i for i, (pk, *read) in enumerate(rows) if current.get(pk) == tuple(read)]


def pack_signs(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
    """One bit per dimension (1 = positive), least significant bit first, like sqlite-vec's ``bit[]``."""
    return np.packbits(vectors > 0, axis=1, bitorder="little")


def quantize(vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.int8]:
    """Each vector scaled by its own largest component to ±127 and rounded (cosine ignores the scale)."""
    peak = np.abs(vectors).max(axis=1, keepdims=True)
    peak[peak == 0] = 1.0
    scaled: npt.NDArray[np.int8] = np.rint(vectors * (127.0 / peak)).astype(np.int8)
    return scaled


def _has_current_layout(conn: Connection) -> bool:
    """True when the vec0 table holds int8 vectors and sign bits (older files kept float32 alone)."""
    table = database(conn)[TABLE]
    return bool(table.exists() and "bit[" in table.schema)


@dataclass
class NamespaceBits:
    """A namespace's sign bits, pks ascending; stored a column of 64-bit words per 64 dimensions,
    which makes the Hamming distance a few passes over contiguous memory (8× faster than by row)."""

    generation: int
    pks: npt.NDArray[np.int64]       # (n,), ascending
    columns: npt.NDArray[np.uint64]  # (dim / 64, n)
    sessions: npt.NDArray[np.int64]  # (n,): each row's session key, the vec0 metadata column

    @classmethod
    def build(
        cls, generation: int, pks: npt.NDArray[np.int64], columns: npt.NDArray[np.uint64],
        sessions: npt.NDArray[np.int64],
    ) -> NamespaceBits:
        """The cache of rows in any order (``columns``: (dim / 64, n)); rows read in pk order, as
        vec0 fills its chunks, are kept as they are (no sort, no copy)."""
        if len(pks) > 1 and not bool(np.all(pks[1:] > pks[:-1])):
            order = np.argsort(pks, kind="stable")
            pks, columns, sessions = pks[order], columns[:, order], sessions[order]
        return cls(generation, pks, np.ascontiguousarray(columns), sessions)

    def add(self, pks: npt.NDArray[np.int64], bits: npt.NDArray[np.uint8], sessions: npt.NDArray[np.int64]) -> None:
        added = bits.view(np.uint64).T
        if len(self.pks) == 0 or pks.min() > self.pks[-1]:  # new rows number on: append, no re-sort
            order = np.argsort(pks, kind="stable")
            self.pks = np.concatenate([self.pks, pks[order]])
            self.columns = np.concatenate([self.columns, added[:, order]], axis=1)
            self.sessions = np.concatenate([self.sessions, sessions[order]])
            return
        merged = NamespaceBits.build(
            self.generation, np.concatenate([self.pks, pks]), np.concatenate([self.columns, added], axis=1),
            np.concatenate([self.sessions, sessions]),
        )
        self.pks, self.columns, self.sessions = merged.pks, merged.columns, merged.sessions

    def remove(self, pks: Sequence[int]) -> None:
        keep = ~np.isin(self.pks, np.asarray(pks, dtype=np.int64))
        self.pks, self.sessions = self.pks[keep], self.sessions[keep]
        self.columns = np.ascontiguousarray(self.columns[:, keep])

    def in_session(self, session: str) -> npt.NDArray[np.intp]:
        """Positions of the rows whose session key is this session's (a hash: callers check the hits)."""
        found: npt.NDArray[np.intp] = np.flatnonzero(self.sessions == session_key(session))
        return found

    def positions(self, candidates: Sequence[int]) -> npt.NDArray[np.intp]:
        """Where each candidate pk sits (those without a vector are left out), without a scan."""
        wanted = np.asarray(candidates, dtype=np.int64)
        at: npt.NDArray[np.intp] = np.searchsorted(self.pks, wanted)
        inside = at < len(self.pks)
        at, wanted = at[inside], wanted[inside]
        found: npt.NDArray[np.intp] = at[self.pks[at] == wanted]
        return found

    def distances(self, query_words: npt.NDArray[np.uint64], at: npt.NDArray[np.intp] | None) -> npt.NDArray[np.uint16]:
        """Hamming distance from the query's sign bits to each row (or to the rows ``at``)."""
        rows = len(self.pks) if at is None else len(at)
        total = np.zeros(rows, dtype=np.uint16)
        differ = np.empty(rows, dtype=np.uint64)
        count = np.empty(rows, dtype=np.uint8)
        for column, word in zip(self.columns, query_words, strict=True):
            np.bitwise_xor(column if at is None else column[at], word, out=differ)
            total += np.bitwise_count(differ, out=count)
        return total

    def weighted_distances(self, query: QueryBits, at: npt.NDArray[np.intp]) -> npt.NDArray[np.uint16]:
        """Sum, over the dimensions where row ``at``'s sign differs from the query's, of the query's
        magnitude there (in levels: see :class:`QueryBits`)."""
        total = np.zeros(len(at), dtype=np.uint16)
        differ = np.empty(len(at), dtype=np.uint64)
        masked = np.empty(len(at), dtype=np.uint64)
        count = np.empty(len(at), dtype=np.uint8)
        for c, column in enumerate(self.columns):
            np.bitwise_xor(column[at], query.signs[c], out=differ)
            for level, plane in enumerate(query.planes[:, c]):
                np.bitwise_and(differ, plane, out=masked)
                np.bitwise_count(masked, out=count)
                total += count.astype(np.uint16) << level
        return total


@dataclass(frozen=True)
class QueryBits:
    """A query as the shortlist compares it: its sign bits, and its magnitudes in 2^WEIGHT_BITS - 1
    levels as bit planes (``planes[b]`` holds bit b of each dimension's level), each a row of
    64-bit words like the cached columns."""

    signs: npt.NDArray[np.uint64]   # (dim / 64,)
    planes: npt.NDArray[np.uint64]  # (WEIGHT_BITS, dim / 64)

    @classmethod
    def of(cls, query: npt.NDArray[np.float32]) -> QueryBits:
        magnitude = np.abs(query.astype(np.float32))
        peak = float(magnitude.max())
        top = (1 << WEIGHT_BITS) - 1
        levels = np.rint(magnitude * (top / peak)).astype(np.uint8) if peak > 0 else np.zeros(len(query), np.uint8)
        planes = np.stack([(levels >> b) & 1 for b in range(WEIGHT_BITS)])
        return cls(
            pack_signs(query[None, :]).view(np.uint64)[0],
            np.packbits(planes, axis=1, bitorder="little").view(np.uint64),
        )




def nearest(distances: npt.NDArray[np.uint16], count: int) -> npt.NDArray[np.intp]:
    """Indexes of the ``count`` smallest distances (ties at the cut broken by position).

    Distances are small integers: a histogram finds the cut in one pass, faster than a partition.
    """
    if count >= len(distances):
        return np.arange(len(distances))
    cumulative = np.cumsum(np.bincount(distances))
    cut = int(np.searchsorted(cumulative, count))  # the distance at which `count` is reached
    below = np.flatnonzero(distances < cut)
    at_cut = np.flatnonzero(distances == cut)[: count - len(below)]
    return np.concatenate([below, at_cut])


class Shortlist(NamedTuple):
    """Rows of a namespace's cache nearest to a query, nearest first, and their weighted distances."""

    positions: npt.NDArray[np.intp]
    distances: npt.NDArray[np.uint16]


def cache_shortlist(
    cache: NamespaceBits, query: npt.NDArray[np.float32], count: int, at: npt.NDArray[np.intp] | None = None
) -> Shortlist:
    """The ``count`` rows (among ``at``, or all) nearest to ``query``: the nearest by Hamming distance,
    ranked again by the weighted distance (see the module docstring)."""
    bits = QueryBits.of(query)
    kept = nearest(cache.distances(bits.signs, at), PREFILTER_PER_SHORTLIST * count)
    if at is not None:
        kept = at[kept]
    weighted = cache.weighted_distances(bits, kept)
    chosen = nearest(weighted, count)
    chosen = chosen[np.argsort(weighted[chosen], kind="stable")]
    return Shortlist(kept[chosen], weighted[chosen])


def near_the_cut(scored: npt.NDArray[np.uint16], cosines: npt.NDArray[np.float64], later: npt.NDArray[np.uint16],
                 k: int) -> npt.NDArray[np.bool_]:
    """Which ``later`` rows (by weighted distance) may have a cosine above the k-th best of the rows
    rescored (``scored`` distances, ``cosines``): those whose cosine, as a line through the rescored
    rows predicts it, falls short of the k-th by less than NEAR_CUT_SPREADS spreads of the line's
    errors. Every later row when the rescored ones cannot place a line (all at one distance)."""
    if len(later) == 0 or len(cosines) < k:
        return np.ones(len(later), dtype=bool)
    if len(cosines) < 3 or int(scored.max()) == int(scored.min()):
        return np.ones(len(later), dtype=bool)
    slope, intercept = np.polyfit(scored.astype(np.float64), cosines, 1)
    spread = float(np.std(cosines - (slope * scored + intercept)))
    cut = float(np.partition(cosines, len(cosines) - k)[len(cosines) - k])
    found: npt.NDArray[np.bool_] = slope * later.astype(np.float64) + intercept + NEAR_CUT_SPREADS * spread >= cut
    return found


@dataclass
class _Pending:
    added: list[tuple[str, npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.int64]]] = field(
        default_factory=list
    )
    deleted: list[int] = field(default_factory=list)


class VectorIndex:
    """Vector rows of one store, for one embedding model (its dimension fixes the table)."""

    def __init__(self, conn: Connection, embedder: Embedder) -> None:
        self.conn = conn
        self.embedder = embedder
        self.dim = int(embedder.dim)
        if self.dim % 64:
            raise EmbedderError(f"embedding dimension {self.dim} is not a multiple of 64 — unsupported")
        self._bits: dict[str, NamespaceBits] = {}
        self._pending = _Pending()

    # ---- model identity ------------------------------------------------------------------------

    @staticmethod
    def recorded_model(conn: Connection) -> dict[str, str] | None:
        rows = dict(conn.execute("SELECT key, value FROM settings WHERE key LIKE 'embedder.%'").fetchall())
        return {k.removeprefix("embedder."): v for k, v in rows.items()} or None

    def identity(self) -> dict[str, str]:
        return {
            "name": str(self.embedder.name),
            "dim": str(self.dim),
            "fingerprint": str(getattr(self.embedder, "fingerprint", self.embedder.name)),
        }

    def check_model(self) -> dict[str, str] | None:
        """The recorded model (None when none is yet); raises if it is not this index's model."""
        recorded = self.recorded_model(self.conn)
        mine = self.identity()
        if recorded is not None and recorded != mine:
            raise other_model(recorded, mine)
        return recorded

    def attached(self) -> bool:
        """True when the file already records this model with a current table (nothing to write);
        raises if it records another model."""
        return (self.check_model() is not None and not is_keyword_only(self.conn)
                and has_vector_table(self.conn) and _has_current_layout(self.conn))

    def attach(self) -> None:
        """Check (or record) that this file's vectors come from this model; create or upgrade the table.

        Runs inside the caller's write transaction. A keyword-only file stops being one: vectors are
        about to be written.
        """
        set_keyword_only(self.conn, False)
        if self.check_model() is None:
            self.conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)",
                                  [(f"embedder.{k}", v) for k, v in self.identity().items()])
        if has_vector_table(self.conn) and not _has_current_layout(self.conn):
            self._upgrade_float_table()
        self.conn.execute(self._table_sql(if_not_exists=True))

    def _table_sql(self, *, if_not_exists: bool = False) -> str:
        """The vec0 table's definition, in one place: int8 vectors, their sign bits, and the columns
        a filtered search reads."""
        return (
            f"CREATE VIRTUAL TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{TABLE} USING vec0("
            "namespace text partition key, kind text, session_key integer, created_at integer,"
            f" embedding int8[{self.dim}] distance_metric=cosine, bits bit[{self.dim}])"
        )

    def _upgrade_float_table(self) -> None:
        """Files written before int8 storage kept float32 vectors: quantise them into the new table."""
        self.conn.execute("CREATE TABLE _vectors_upgrade (pk INTEGER PRIMARY KEY, embedding BLOB NOT NULL)")
        self.conn.execute(f"INSERT INTO _vectors_upgrade SELECT rowid, embedding FROM {TABLE}")
        self.conn.execute(f"DROP TABLE {TABLE}")
        self.conn.execute(self._table_sql())
        last = 0
        while True:
            batch = self.conn.execute(
                "SELECT u.pk, u.embedding, e.namespace, e.kind, e.session, e.created_at FROM _vectors_upgrade u"
                " JOIN entries e ON e.pk = u.pk WHERE u.pk > ? ORDER BY u.pk LIMIT 5000", (last,)
            ).fetchall()
            if not batch:
                break
            vectors = np.frombuffer(b"".join(r[1] for r in batch), dtype=np.float32).reshape(len(batch), -1)
            self._insert([VectorRow(r[0], r[2], r[3], r[4], r[5]) for r in batch], vectors)
            last = batch[-1][0]
        self.conn.execute("DROP TABLE _vectors_upgrade")

    # ---- writes (inside the store's transaction) -----------------------------------------------

    def write(self, rows: Sequence[VectorRow], vectors: npt.NDArray[np.float32],
              passages: Sequence[Sequence[Passage]] = ()) -> None:
        """Index each row's vector, and keep its passages (one sequence per row, when given)."""
        signs = self._insert(rows, vectors)
        later = [(row.pk, p) for row, found in zip(rows, passages, strict=True) for p in found] if passages else []
        if later:
            _make_passage_table(self.conn)  # with the first long entry (older files have none)
            scaled = quantize(np.stack([p.vector for _, p in later]))
            self.conn.executemany(f"INSERT INTO {PASSAGES} (pk, start, stop, embedding, sentence) VALUES (?, ?, ?, ?, ?)",
                                  [(pk, p.start, p.stop, scaled[i].tobytes(), int(p.sentence))
                                   for i, (pk, p) in enumerate(later)])
        for namespace in {row.namespace for row in rows}:
            chosen = [i for i, row in enumerate(rows) if row.namespace == namespace]
            self._pending.added.append((
                namespace,
                np.asarray([rows[i].pk for i in chosen], dtype=np.int64),
                signs[chosen],
                np.asarray([session_key(rows[i].session) for i in chosen], dtype=np.int64),
            ))

    def _insert(self, rows: Sequence[VectorRow], vectors: npt.NDArray[np.float32]) -> npt.NDArray[np.uint8]:
        signs = pack_signs(vectors)
        scaled = quantize(vectors)
        self.conn.executemany(
            f"INSERT INTO {TABLE} (rowid, namespace, kind, session_key, created_at, embedding, bits)"
            " VALUES (?, ?, ?, ?, ?, vec_int8(?), vec_bit(?))",
            [(row.pk, row.namespace, row.kind, session_key(row.session), row.created_at,
              scaled[i].tobytes(), signs[i].tobytes()) for i, row in enumerate(rows)],
        )
        return signs

    def delete(self, pk: int) -> None:
        delete_vector(self.conn, pk)
        self._pending.deleted.append(pk)

    def move(self, pks: Sequence[int], namespace: str) -> None:
        """Put the vectors of ``pks`` in ``namespace`` (see :func:`move_vectors`), caches told."""
        moved = move_vectors(self.conn, pks, namespace)
        if moved:
            self._pending.deleted.extend(pk for pk, _, _ in moved)
            self._pending.added.append((
                namespace, np.asarray([pk for pk, _, _ in moved], dtype=np.int64),
                np.frombuffer(b"".join(bits for _, bits, _ in moved), dtype=np.uint8).reshape(len(moved), -1),
                np.asarray([key for _, _, key in moved], dtype=np.int64)))

    def committed(self, generation: int) -> None:
        """Fold this process's own committed writes into its caches (no reload needed)."""
        pending, self._pending = self._pending, _Pending()
        for namespace, cache in list(self._bits.items()):
            if cache.generation != generation - 1:
                del self._bits[namespace]  # someone else wrote in between: reload on next search
                continue
            if pending.deleted:
                cache.remove(pending.deleted)
            added = [(pks, signs, keys) for added_ns, pks, signs, keys in pending.added if added_ns == namespace]
            if added:
                cache.add(*(np.concatenate(parts) for parts in zip(*added, strict=True)))
            cache.generation = generation

    def rolled_back(self) -> None:
        self._pending = _Pending()

    # ---- reads ---------------------------------------------------------------------------------

    def _generation(self) -> int:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (GENERATION_KEY,)).fetchone()
        return int(row[0]) if row else 0

    def _namespace_bits(self, namespace: str) -> NamespaceBits:
        generation = self._generation()
        cache = self._bits.get(namespace)
        if cache is None or cache.generation != generation:
            cache = NamespaceBits.build(generation, *self._read_bits(namespace))
            self._bits[namespace] = cache
        return cache

    def _read_bits(
        self, namespace: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint64], npt.NDArray[np.int64]]:
        """Every vector's pk, sign bits (as cache columns: (dim / 64, n) words) and session key in
        ``namespace``, read from vec0's chunks.

        A chunk holds up to 1,024 rows: a validity bitmap and their pks, and beside it the packed
        bits and the session keys of the same rows. The bitmaps are read first (a few bytes a
        chunk) to size the arrays; then each chunk's blobs go straight into them, one chunk at a
        time, so a million rows take their 56 MB and little more. Reading chunks is about 10× faster
        than selecting row by row; if this sqlite-vec lays its chunks out differently, the row by row
        query answers instead. The int8 vectors are never read.
        """
        width = self.dim // 8
        words = self.dim // 64
        try:
            chunks = f" FROM {TABLE}_chunks c WHERE c.partition00 = ? ORDER BY c.chunk_id"
            valid = [np.unpackbits(np.frombuffer(v, dtype=np.uint8), bitorder="little").astype(bool)
                     for (v,) in self.conn.execute("SELECT c.validity" + chunks, (namespace,))]
            rows = sum(int(v.sum()) for v in valid)
            pks = np.empty(rows, dtype=np.int64)
            columns = np.empty((words, rows), dtype=np.uint64)
            sessions = np.empty(rows, dtype=np.int64)
            at = 0
            cursor = self.conn.execute(
                f"SELECT c.rowids, b.vectors, s.data FROM {TABLE}_chunks c"
                f" JOIN {TABLE}_vector_chunks01 b ON b.rowid = c.chunk_id"
                f" JOIN {TABLE}_metadatachunks01 s ON s.rowid = c.chunk_id"
                " WHERE c.partition00 = ? ORDER BY c.chunk_id",
                (namespace,),
            )
            for number, (rowids, vectors, keys) in enumerate(cursor):
                size = len(rowids) // 8
                mask = valid[number][:size]
                count = int(mask.sum())
                if count == size:  # a full chunk: slices, no mask
                    mask = slice(None)  # type: ignore[assignment]
                pks[at:at + count] = np.frombuffer(rowids, dtype=np.int64)[mask]
                columns[:, at:at + count] = np.frombuffer(vectors, dtype=np.uint64).reshape(size, words)[mask].T
                sessions[at:at + count] = np.frombuffer(keys, dtype=np.int64)[:size][mask]
                at += count
            if at != rows or (rows and not self._agrees(int(pks[-1]), columns[:, -1], int(sessions[-1]))):
                raise LookupError("vec0's chunks are laid out differently")
            return pks, columns, sessions
        except Exception:  # another chunk layout: take the public way
            found = self.conn.execute(
                f"SELECT rowid, bits, session_key FROM {TABLE} WHERE namespace = ?", (namespace,)
            ).fetchall()
            pks = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
            raw = np.frombuffer(b"".join(r[1] for r in found), dtype=np.uint8).reshape(len(found), width)
            columns = np.ascontiguousarray(raw.view(np.uint64).T)
            return pks, columns, np.fromiter((r[2] for r in found), dtype=np.int64, count=len(found))

    def _agrees(self, pk: int, words: npt.NDArray[np.uint64], session: int) -> bool:
        """True when the public view of row ``pk`` says what the chunks said (the layout is as read)."""
        row = self.conn.execute(f"SELECT bits, session_key FROM {TABLE} WHERE rowid = ?", (pk,)).fetchone()
        return row is not None and bytes(row[0]) == np.ascontiguousarray(words).tobytes() and int(row[1]) == session

    @staticmethod
    def shortlist_size(k: int, rows: int = 0) -> int:
        """How many of ``rows`` rows the sign bits shortlist for rescoring, for the top ``k``."""
        return min(MAX_KNN, max(SHORTLIST_MIN, SHORTLIST_PER_HIT * k, rows // ROWS_PER_SHORTLISTED))

    def search(
        self,
        query: npt.NDArray[np.float32],
        k: int,
        namespace: str,
        candidates: list[int] | None = None,
        where: VectorFilter | None = None,
        *,
        exact_order: bool = True,
        extra: int = 0,
    ) -> list[tuple[int, float]]:
        """(pk, cosine similarity) of the k nearest entries, best first, then up to ``extra`` more of
        the rows the search compared anyway (its shortlist past the top k: no wider search).

        ``candidates`` restricts the search to those pks (the rows that passed the filters); ``where``
        restricts it with the filters vec0 evaluates itself. ``exact_order=False`` keeps the
        shortlist at its size for ``k`` however many rows there are, and rescores no rows near the
        cut after it: for candidates that are scored
        again by their exact cosine (hybrid's fusion), which need the near neighbours in but not the
        exact top ``k`` that a longer shortlist buys. Each row rescored costs 10-30 µs (vec0 reads
        both its vectors by pk), so at 1M entries this rescores 500 rows instead of 1,000: a hybrid
        recall took 45 ms instead of 56, with the same recall@10 on LoCoMo (bench/bench_scale.py --vectors).
        """
        def shortlist_for(rows: int) -> int:
            return self.shortlist_size(k, rows if exact_order else 0)

        if candidates is not None and len(candidates) <= shortlist_for(len(candidates)):
            return self.rescore(query, candidates, k + extra)
        session_only = where is not None and where == VectorFilter(session=where.session)
        if where is not None and candidates is None and not session_only:
            return self._filtered_knn(query, k, namespace, where, extra)
        cache = self._namespace_bits(namespace)
        if candidates is not None:
            at = cache.positions(candidates)
        elif where is not None and where.session is not None:
            at = cache.in_session(where.session)  # the session keys are cached beside the bits
        else:
            at = None
        shortlist = shortlist_for(len(cache.pks) if at is None else len(at))
        if not exact_order:  # nor rows near the cut: hybrid's top 10 came out the same in .997 (200,000 entries)
            return self.rescore(query, cache.pks[cache_shortlist(cache, query, shortlist, at).positions].tolist(),
                                k + extra)
        return self._near_exact(query, k, extra, cache, shortlist, at)

    def _near_exact(self, query: npt.NDArray[np.float32], k: int, extra: int, cache: NamespaceBits, shortlist: int,
                    at: npt.NDArray[np.intp] | None) -> list[tuple[int, float]]:
        """The shortlist rescored, then the rows after it near the cut (see the module docstring)."""
        ranked = cache_shortlist(cache, query, shortlist + NEAR_CUT_ROWS, at)
        first = cache.pks[ranked.positions[:shortlist]].tolist()
        scored = self.rescore(query, first, len(first))
        later = ranked.positions[shortlist:]
        if len(later):
            cosine_of = dict(scored)
            rescored = [i for i, pk in enumerate(first) if pk in cosine_of]
            worth = near_the_cut(ranked.distances[rescored], np.array([cosine_of[first[i]] for i in rescored]),
                                 ranked.distances[shortlist:], k)
            scored += self.rescore(query, cache.pks[later[worth]].tolist(), int(worth.sum()))
        return sorted(scored, key=lambda hit: (-hit[1], hit[0]))[:k + extra]

    def _filtered_knn(
        self, query: npt.NDArray[np.float32], k: int, namespace: str, where: VectorFilter, extra: int = 0
    ) -> list[tuple[int, float]]:
        """A vec0 KNN over the sign bits of the rows ``where`` lets through, rescored in the same query."""
        clauses, params = where.sql()
        rows = self.conn.execute(
            f"SELECT rowid, vec_distance_cosine(embedding, vec_int8(?)) AS d FROM {TABLE}"
            f" WHERE bits MATCH vec_bit(?) AND k = ? AND namespace = ?{clauses} ORDER BY d LIMIT ?",
            [quantize(query[None, :])[0].tobytes(), pack_signs(query[None, :])[0].tobytes(),
             min(MAX_KNN, max(SHORTLIST_MIN, HAMMING_SHORTLIST_PER_HIT * k)), namespace, *params, k + extra],
        ).fetchall()
        return [(int(pk), 1.0 - float(distance)) for pk, distance in rows]

    def rescore(self, query: npt.NDArray[np.float32], pks: list[int], k: int) -> list[tuple[int, float]]:
        """Cosine similarity of ``query`` to each pk's stored vector, computed by vec0; the k best."""
        if not pks:
            return []
        # json_each … CROSS JOIN reads each row by pk; `rowid IN (…)` would make vec0 scan every chunk.
        rows = self.conn.execute(
            f"SELECT v.rowid, vec_distance_cosine(v.embedding, vec_int8(?)) AS d FROM json_each(?) AS j"
            f" CROSS JOIN {TABLE} v ON v.rowid = j.value ORDER BY d, v.rowid LIMIT ?",
            (quantize(query[None, :])[0].tobytes(), json.dumps(pks), k),
        ).fetchall()
        return [(int(pk), 1.0 - float(distance)) for pk, distance in rows]

    def exact_knn(self, query: npt.NDArray[np.float32], k: int, namespace: str) -> list[tuple[int, float]]:
        """Brute-force vec0 KNN over every stored vector of ``namespace`` (what the fast path is measured against)."""
        rows = self.conn.execute(
            f"SELECT rowid, distance FROM {TABLE} WHERE embedding MATCH vec_int8(?) AND k = ? AND namespace = ?",
            (quantize(query[None, :])[0].tobytes(), k, namespace),
        ).fetchall()
        return [(int(pk), 1.0 - float(distance)) for pk, distance in rows]

    def count(self) -> int:
        if not has_vector_table(self.conn):
            return 0
        return int(self.conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()[0])

    def clear(self) -> None:
        """Drop every vector and the recorded model (inside a transaction): ``reindex`` starts over."""
        drop_vectors(self.conn)
        self._bits.clear()
