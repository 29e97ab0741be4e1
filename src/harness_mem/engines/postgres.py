"""The PostgreSQL engine: entries with their keyword rows (``tsvector`` + GIN) and vectors (pgvector).

For a team whose agents run on several machines. The rows are SQLite's, column for column; the
keyword index holds the same tokens FTS5 stores (cut and stemmed in Python, written as a
``tsvector`` with positions, never through a text-search parser), so the shared BM25 in
:mod:`harness_mem.bm25` ranks the same candidates the same way on both engines. Vectors are
``halfvec`` (half the bytes of ``vector``; cosine within 0.001 of float32 on MiniLM vectors) under
an HNSW index, searched with pgvector's iterative scans so a filter applies before the top-k cut.

Writes serialise on one advisory lock per database, the way SQLite's ``BEGIN IMMEDIATE`` does: the
checks a write makes under it (a duplicate, a correction's target) stay atomic with the write.
The connection string's password is never shown: :attr:`PostgresStorage.location` leaves it out.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import numpy.typing as npt

from .. import keyword
from ..bm25 import K1, B, Match, idf, share
from ..errors import ExtensionError, MigrationError, SchemaTooNewError, StorageError
from ..filters import MetadataCondition, Selection
from ..identities import SealedIdentity, identity_values_in_use
from ..models import MigrationStatus, counted, to_ms
from ..passages import PASSAGE_MARGIN, SENTENCE_MARGIN, Embedding, Passage, Scored, embed_entries, read_back
from ..protocols import Embedder
from ..rows import COLUMN_NAMES, COLUMNS, Row
from ..storage import (
    DERIVED_SOURCE,
    OnConflict,
    Position,
    SessionSpan,
    Storage,
    VectorCounts,
    Vectors,
    after_position,
    index_texts_of,
    settle_conflicts,
)
from ..sync.clock import Stamp, stamps_by_id
from ..sync.operations import Operation, related_id
from ..vectors import other_model
from . import postgres_rekey, postgres_rewrite
from .postgres_connection import Connection
from .postgres_lexemes import (
    MAX_POSITION,
    MAX_POSITIONS,
    index_positions,
    query_tokens,
    tsvector_literal,
)
from .postgres_pool import ConnectionPool, PerThread
from .postgres_reads import DATA_VERSION, LIVE_AND_EMBEDDED, Guess, RecallReads, recall_reads
from .postgres_tokens import TokenWorkers

if TYPE_CHECKING:
    import psycopg

__all__ = ["HalfVector", "PostgresStorage", "safe_location", "tsquery_of", "vector_literal"]

T = TypeVar("T")

# How many candidates an HNSW search keeps while it walks the graph, at least.
HNSW_EF_SEARCH = 600
# A filtered vector search that leaves at most this many rows compares them all, exactly.
EXACT_ROWS = 20_000
# An import puts off the HNSW index once it has written this many vectors and more than the store
# held before it: a graph built whole at the end costs a third of one grown a row at a time, and
# rebuilding what was there before costs at most what the import already spent.
DEFERRED_INDEX_ROWS = 2000
# An HNSW graph's build takes about this much memory a vector a dimension (halves, and the
# neighbour lists of pgvector's default 16 links: ~1.4 kB a 384-dimension vector, counted twice
# over), up to this much in all.
_GRAPH_BYTES_A_DIMENSION = 8
_INDEX_MEMORY_KB = 2 * 1024 * 1024
_HNSW_INDEX = "CREATE INDEX IF NOT EXISTS entry_vectors_hnsw ON entry_vectors USING hnsw (embedding halfvec_cosine_ops)"


def best_windows(pks: str) -> str:
    """A query of the entries ``pks`` (an array of their pks, in order) that keep later windows (or
    sentences): each one's pk, the window best-of would pick (passages.best_of: the highest cosine
    less its margin, the first of equals) in :data:`_WINDOW` (its span, its cosine distance to the
    question, a parameter, and whether it is a sentence: columns, not JSON, which took a hybrid
    recall 0.5 ms to decode), and that distance with its margin added. Sent
    whole, as vectors, a search's 200 candidates' windows were ~200 vectors to carry and decode, 4
    of a semantic recall's 6 ms of CPU at 20,000 turns with their sentences; picked a candidate at
    a time, 1.7 ms of the server's. The pks are one array, sorted: the index finds them in one
    descent a leaf page, and the table's pages are read once each (as a join, a descent and a page
    a candidate: 4x the pages read, 1.5x the time)."""
    return ("SELECT DISTINCT ON (b.pk) b.pk, b.start, b.stop, b.distance, b.sentence,"
            f" b.distance + CASE WHEN b.sentence THEN {SENTENCE_MARGIN} ELSE {PASSAGE_MARGIN} END AS weighed"
            " FROM (SELECT p.pk, p.start, p.stop, p.sentence, p.embedding <=> %s::halfvec AS distance"
            f" FROM entry_passages p WHERE p.pk = ANY({pks})) b ORDER BY b.pk, weighed, b.start")


# How many entries of a lane (whether derived: a parameter) hold a word (as stored, a parameter),
# in every namespace the role reads: kept by the database (0019), what counting them gives.
_WORD_COUNT = "(SELECT coalesce(sum(entries), 0)::bigint FROM word_counts WHERE derived = %s AND word = %s)"
# The columns of best_windows' window read along a search (of ``w``), and where the store keeps
# no windows, their NULLs and best_windows' query: none.
_WINDOW = "w.start, w.stop, w.distance, w.sentence"
_NO_WINDOW = "NULL::int, NULL::int, NULL::float8, NULL::boolean"
_NO_WINDOWS = (f"SELECT NULL::bigint AS pk, w.*, NULL::float8 AS weighed FROM (SELECT {_NO_WINDOW})"
               " w (start, stop, distance, sentence) WHERE false")
# What an entry's keyword-index text is made of (keyword.entry_index_text), for the entry ``e``
# joined to _TURN_BEFORE: LATERAL, the turn before it is one walk back along its session's index
# (a scalar subquery joined on its pk was planned as a hash join over the whole table, the
# subquery run twice a row along another index: 100 ms for 200 entries of a fresh table).
_TEXT_PARTS = "e.content, e.role, e.kind, e.session, e.created_at, p.content, p.role"
_TEXT_PART_COUNT = 7
_TURN_BEFORE = ("LEFT JOIN LATERAL (SELECT q.content, q.role FROM entries q WHERE e.kind = 'turn'"
                " AND q.namespace = e.namespace AND q.session = e.session AND q.kind = 'turn' AND q.forgotten_at IS NULL"
                " AND (q.created_at, q.pk) < (e.created_at, e.pk)"
                " ORDER BY q.created_at DESC, q.pk DESC LIMIT 1) p ON true")
# A ranking at most this deep reads its entries' rows along (what a recall shows next); a deeper
# one is a list of fusion's candidates, of which only the winners are read: reading along the rows
# of a hybrid's candidates that the winners come from (the best 50 of each list) made it 1.13x
# slower than the round trip it saves (bench_postgres.py --scale 20000).
ROWS_ALONG = 30
# The sets of namespaces whose last recall's reads are kept (a server recalling for many users).
_LAST_READS_KEPT = 256
#: Entries a keyword-index rebuild re-indexes per transaction.
KEYWORD_BATCH = 1000
# Every write transaction takes this advisory lock first (an arbitrary, fixed key).
_WRITE_LOCK = 7_310_421_993
# A recall's read view, and its plans made once (see snapshot).
_READ_VIEW = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
_GENERIC_PLANS = ("plan_cache_mode", "force_generic_plan")
_CURRENT = "e.forgotten_at IS NULL AND e.superseded_by IS NULL"
_KEPT = "e.forgotten_at IS NULL"
# A session's transcript: its entries, less what was derived from them or recorded about the run.
_TRANSCRIPT = f"e.source IS DISTINCT FROM '{DERIVED_SOURCE}' AND e.kind <> 'episode'"
_IN_SESSION = f"e.namespace = %s AND e.session = %s AND {_TRANSCRIPT}"
# An entry ``e`` of the session's transcript that is not its latest: a later one exists.
_LATER_IN_SESSION = ("SELECT 1 FROM entries f WHERE f.namespace = e.namespace AND f.session = e.session"
                     f" AND f.created_at >= e.created_at AND (f.created_at, f.pk) > (e.created_at, e.pk)"
                     f" AND {_TRANSCRIPT.replace('e.', 'f.')} AND {_CURRENT.replace('e.', 'f.')}")
_LIVE = "namespace = %s AND (expires_at IS NULL OR expires_at > %s)"
_COLUMNS_E = ", ".join(f"e.{c.strip()}" for c in COLUMNS.split(","))
# What a write gives each new row: every column but pk (the database numbers it), and its tokens.
_WRITTEN = (*COLUMN_NAMES[1:], "tokens", "token_count")
# Each (namespace, spelling) of the roles whose lower-case form is one of the words, for the namespaces
# and words given (two text arrays): a walk of entries_by_role (0017) from one spelling to the next,
# an index probe each, not a read of every turn the role said.
_ROLE_SPELLINGS = (
    "WITH RECURSIVE spelled AS ("
    " SELECT n, w, (SELECT role FROM entries WHERE namespace = n AND lower(role) = w ORDER BY role LIMIT 1) AS role"
    " FROM unnest(%s::text[]) n CROSS JOIN unnest(%s::text[]) w"
    " UNION ALL SELECT s.n, s.w, (SELECT role FROM entries WHERE namespace = s.n AND lower(role) = s.w AND role > s.role"
    " ORDER BY role LIMIT 1) FROM spelled s WHERE s.role IS NOT NULL)"
    " SELECT n, role FROM spelled WHERE role IS NOT NULL")
#: What gc cannot take out: the server's write-ahead log is its own (and its archives' and replicas').
LOG_REMAINS = ("purged text stays in the server's WAL segments until checkpoints recycle them"
               " (past wal_keep_size and replication slots), and in WAL archives, replicas and backups")


def safe_location(dsn: str) -> str:
    """``dsn`` without its password (and without any parameter that could hold one)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:
        return "postgresql://…"
    user = f"{parts['user']}@" if parts.get("user") else ""
    host = str(parts.get("host") or "localhost")
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{host}{port}/{parts.get('dbname', '')}"


def _migrations_dir() -> Path:
    from importlib import resources

    packaged = resources.files("harness_mem") / "migrations" / "postgres"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[3] / "migrations" / "postgres"


def vector_literal(vector: npt.NDArray[np.float32]) -> str:
    """A vector as pgvector reads it into a ``halfvec``: ``[0.1,0.2,…]``, each value the half it
    is stored as (rounded here as :class:`HalfVector` rounds it: text and binary send the same
    vector), in the five digits that give that half back."""
    halves = np.asarray(vector, dtype=np.float16).view(np.uint16)
    return "[" + ",".join(_half_texts()[halves].tolist()) + "]"


@lru_cache(maxsize=1)
def _half_texts() -> npt.NDArray[np.object_]:
    """Every half's text, by its bits: looked up, a vector is written 6 times as fast as formatted
    value by value (a statement written out whole, a bench's raw query), for 30 ms once."""
    values = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32).tolist()
    return np.array([f"{value:.5g}" for value in values], dtype=object)


class HalfVector(bytes):
    """A search's vector as ``halfvec`` reads it sent in binary (a dimension count, two unused
    bytes, then big-endian halves), not as text: formatting 384 numbers took 70 µs of a recall's
    CPU, and the server parsed them back. Equal vectors are equal keys."""

    @classmethod
    def of(cls, vector: npt.NDArray[np.float32]) -> HalfVector:
        return cls(struct.pack(">HH", len(vector), 0) + np.asarray(vector, dtype=">f2").tobytes())

    def literal(self) -> str:
        """The same vector as text, for a statement written out whole (an EXPLAIN's)."""
        return vector_literal(np.frombuffer(self, dtype=">f2", offset=4).astype(np.float32))


class HalfVectors(bytes):
    """Many vectors as one ``halfvec[]`` sent in binary: the array's wire format, each element as
    :class:`HalfVector`. The server takes each vector's halves as they come, where from text it
    parsed 384 numbers a vector: 5,000 vectors written in 0.04 s, not 0.36-0.46 (written as text, a
    20,000-turn import's vectors and sentences were a fifth of its time)."""

    @classmethod
    def of(cls, vectors: npt.NDArray[np.float32], element: int) -> HalfVectors:
        """``vectors`` (one a row) as an array of ``element`` (the database's ``halfvec`` type oid)."""
        count, dim = vectors.shape
        header = struct.pack(">iiiii", 1, 0, element, count, 1)  # one dimension, no NULLs, from 1
        items = np.zeros(count, dtype=[("size", ">i4"), ("dim", ">u2"), ("unused", ">u2"), ("halves", ">f2", (dim,))])
        items["size"], items["dim"], items["halves"] = 4 + 2 * dim, dim, vectors
        return cls(header + items.tobytes())


class Pks(list[int]):
    """Entry pks as one ``bigint[]`` parameter, sorted (an index finds them in one descent a leaf
    page) and written by a join: psycopg's list dumper adapts item by item (a hybrid recall's
    50-200 pks a statement, 6% of its CPU)."""

    def __init__(self, pks: Iterable[int]) -> None:
        super().__init__(sorted(pks))


@lru_cache(maxsize=1)
def _pks_dumper() -> type:
    """psycopg's dumper of :class:`Pks`, as the text of a ``bigint[]``."""
    from psycopg.adapt import Dumper

    class PksDumper(Dumper):
        oid = 1016  # bigint[], a built-in type's fixed oid

        def dump(self, obj: Any) -> bytes:
            return ("{" + ",".join(map(str, obj)) + "}").encode()

    return PksDumper


@lru_cache(maxsize=1)
def _half_vector_dumper() -> type:
    """psycopg's dumper of :class:`HalfVector` and :class:`HalfVectors`, bytes sent as they are
    (their type left to the statement's ``::halfvec`` or ``::halfvec[]``)."""
    from psycopg.adapt import Dumper
    from psycopg.pq import Format

    class HalfVectorDumper(Dumper):
        format = Format.BINARY

        def dump(self, obj: Any) -> bytes:
            return bytes(obj)

    return HalfVectorDumper


def _passages(stored: Sequence[Sequence[Any]]) -> list[Passage]:
    """Later windows (or sentences) as stored, (start, stop, vector, sentence) each, the vector
    halfvec_send's bytes: a dimension count, two unused bytes, then big-endian halves."""
    if not stored:
        return []
    raw = [bytes(sent) for _, _, sent, _ in stored]
    halves = np.frombuffer(b"".join(r[4:] for r in raw), dtype=">f2").reshape(len(raw), -1)
    return read_back([(start, stop, sentence) for start, stop, _, sentence in stored], halves)


def index_text(parts: Sequence[Any]) -> str:
    """An entry's keyword-index text from its :data:`_TEXT_PARTS`."""
    content, role, kind, session, created_at, previous, previous_role = parts
    return keyword.entry_index_text(content, role, kind, session, created_at,
                                    (previous, previous_role) if previous is not None else None)


def _lexeme(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def _term_lexemes(term: str) -> list[str]:
    """A query term's tokens as ``tsquery`` lexemes, the last a prefix (``:*``) for a prefix term."""
    tokens, prefix = query_tokens(term)
    parts = [_lexeme(token) for token in tokens]
    if prefix and parts:
        parts[-1] += ":*"
    return parts


def tsquery_of_term(term: str) -> str | None:
    """One query term as a ``tsquery`` (a word, a phrase of adjacent tokens, or a prefix)."""
    parts = _term_lexemes(term)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else "(" + " <-> ".join(parts) + ")"


# A tsquery no entry's tokens match: a lexeme none holds.
_NEVER = "'\\u0000never'"


def tsquery_held(term: str) -> str:
    """A ``tsquery`` an entry's tokens match where its keyword-index text holds ``term`` as
    :func:`~harness_mem.bm25.terms_held` says: each token anywhere, the last of a prefix term as
    the start of a word."""
    return " & ".join(_term_lexemes(term)) or _NEVER


def held_column(terms: Sequence[str]) -> tuple[str, list[str]]:
    """An array of booleans, one a term, of which ``terms`` the entry ``e`` holds
    (:func:`tsquery_held` on its tokens; false where it has none), and its parameters."""
    return ("ARRAY[" + ", ".join(["coalesce(e.tokens @@ %s::tsquery, false)"] * len(terms)) + "]",
            [tsquery_held(term) for term in terms])


def tsquery_of(match: Match) -> str:
    """``match`` (an AND of ORs) as a ``tsquery``; a group with no searchable term matches nothing."""
    groups = []
    for group in match:
        terms = [q for q in (tsquery_of_term(t) for t in group) if q is not None]
        if not terms:
            return _NEVER
        groups.append(terms[0] if len(terms) == 1 else "(" + " | ".join(terms) + ")")
    return " & ".join(groups)


def _term_frequency(term: tuple[tuple[str, ...], bool], lexemes: dict[str, list[int]]) -> int:
    """How often a term (its :func:`query_tokens`) occurs among an entry's ``lexemes`` (token:
    positions), as FTS5 counts it."""
    tokens, prefix = term
    if not tokens:
        return 0
    if len(tokens) == 1 and not prefix:
        return len(lexemes.get(tokens[0], ()))

    def at(i: int) -> set[int]:
        if prefix and i == len(tokens) - 1:
            return {p for lex, ps in lexemes.items() if lex.startswith(tokens[i]) for p in ps}
        return set(lexemes.get(tokens[i], ()))

    starts = at(0)
    for i in range(1, len(tokens)):
        starts &= {p - i for p in at(i)}
    return len(starts)


def _like_prefix(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


_COMPARE = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _metadata(condition: MetadataCondition, alias: str) -> tuple[str, list[Any]]:
    """One metadata condition (see :class:`~harness_mem.filters.MetadataCondition`): JSON's types
    kept apart, as on SQLite; a cast only where the type was checked first (CASE), so a string
    under a key compared as a number never raises."""
    value_at = f"({alias}.metadata::jsonb #> %s)"
    path = list(condition.path)
    if condition.op in _COMPARE:
        operator = _COMPARE[condition.op]
        if isinstance(condition.value, str):
            return (f"(CASE WHEN jsonb_typeof({value_at}) = 'string' THEN {alias}.metadata::jsonb #>> %s END)"
                    f' COLLATE "C" {operator} %s', [path, path, condition.value])
        return (f"(CASE WHEN jsonb_typeof({value_at}) = 'number' THEN ({value_at})::numeric END) {operator} %s",
                [path, path, condition.value])
    wanted = condition.value if condition.op == "$in" else (condition.value,)
    parts, params = [], []
    for value in wanted:
        if isinstance(value, str):
            parts.append(f"coalesce(jsonb_typeof({value_at}) = 'string' AND {alias}.metadata::jsonb #>> %s = %s, false)")
            params.extend([path, path, value])
        elif isinstance(value, bool) or value is None:
            parts.append(f"coalesce({value_at} = %s::jsonb, false)")
            params.extend([path, json.dumps(value)])
        else:
            parts.append(f"coalesce(CASE WHEN jsonb_typeof({value_at}) = 'number' THEN ({value_at})::numeric END = %s, false)")
            params.extend([path, path, value])
    either = " OR ".join(parts)
    return (f"NOT ({either})" if condition.op == "$ne" else f"({either})"), params


def where(selection: Selection, alias: str = "e") -> tuple[str, list[Any]]:
    """A :class:`~harness_mem.filters.Selection` as a WHERE clause over ``entries`` and its parameters."""
    filters = selection.filters
    clauses = [f"{alias}.namespace = %s", f"{alias}.forgotten_at IS NULL"]
    params: list[Any] = [selection.namespace]
    if filters.as_of is not None:  # what was true then (see sqlite_where)
        clauses.append(f"{alias}.created_at <= %s")
        params.append(to_ms(filters.as_of))
        if not filters.include_superseded:
            clauses.append(
                f"({alias}.superseded_by IS NULL OR EXISTS (SELECT 1 FROM entries successor"
                f" WHERE successor.namespace = {alias}.namespace AND successor.id = {alias}.superseded_by"
                " AND successor.created_at > %s))"
            )
            params.append(to_ms(filters.as_of))
    elif not filters.include_superseded:
        clauses.append(f"{alias}.superseded_by IS NULL")
    if selection.live:
        clauses.append(f"({alias}.expires_at IS NULL OR {alias}.expires_at > %s)")
        params.append(selection.now)
    if filters.kind is not None:
        clauses.append(f"{alias}.kind = ANY(%s)")
        params.append([filters.kind] if isinstance(filters.kind, str) else list(filters.kind))
    for column in ("role", "session"):
        value = getattr(filters, column)
        if value is not None:
            clauses.append(f"{alias}.{column} = %s")
            params.append(value)
    prefix = filters.session_prefix
    if prefix:
        clauses.append(f"left({alias}.session, %s) = %s")
        params.extend([len(prefix), prefix])
        if ord(prefix[-1]) < 0x10FFFF:  # the same condition as a range, which an index answers
            clauses.append(f'{alias}.session COLLATE "C" >= %s AND {alias}.session COLLATE "C" < %s')
            params.extend([prefix, prefix[:-1] + chr(ord(prefix[-1]) + 1)])
    if filters.tags:
        clauses.append(f"{alias}.tags::jsonb @> %s::jsonb")
        params.append(json.dumps(list(filters.tags)))
    if filters.any_tags:
        clauses.append(f"{alias}.tags::jsonb ?| %s")
        params.append(list(filters.any_tags))
    if filters.exclude_sessions:
        clauses.append(f"({alias}.session IS NULL OR NOT ({alias}.session = ANY(%s)))")
        params.append(list(filters.exclude_sessions))
    if filters.exclude_kinds:
        clauses.append(f"NOT ({alias}.kind = ANY(%s))")
        params.append(list(filters.exclude_kinds))
    if filters.exclude_tags:
        clauses.append(f"NOT ({alias}.tags::jsonb ?| %s)")
        params.append(list(filters.exclude_tags))
    if filters.derived is not None:
        clauses.append(f"{alias}.source {'=' if filters.derived else 'IS DISTINCT FROM'} %s")
        params.append(DERIVED_SOURCE)
    for condition in filters.metadata:
        clause, values = _metadata(condition, alias)
        clauses.append(clause)
        params.extend(values)
    if filters.since is not None:
        clauses.append(f"{alias}.created_at >= %s")
        params.append(to_ms(filters.since))
    if filters.until is not None:
        clauses.append(f"{alias}.created_at <= %s")
        params.append(to_ms(filters.until))
    return " AND ".join(clauses), params


def bm25_statement(words: int, clause: str, lane: str, *, rows: str | None) -> str:
    """BM25 of a query of ``words`` single words over the entries holding any, in one statement: the
    lane's counts (namespace_state), each word's document frequency (``word_counts``, 0019: what
    counting every entry of the lane holding it gives) and each entry's score, FTS5's formula
    (bm25.idf, bm25.share) term for term and in the same order. The entries holding a word that pass
    the filters (``clause``) are read once, as the raw engine's own ``ts_rank_cd`` query reads them
    (counted from them, the frequencies read every entry holding a word, in the filters or not: a
    narrow time window's recall took 14-17 times the raw query's). A word's frequency in an entry is
    ``ts_rank_cd`` of that word alone with every weight 1: one cover per position, each weighing 1
    (unnesting the tsvector cost 0.1 ms an entry), computed only where the entry holds the word (the
    test costs a fraction of the ranking, and most entries hold one word of several). An entry holding a word more often than a lexeme
    keeps positions, or longer than its positions reach, is returned too, to be counted again. With
    ``rows`` (the column of :meth:`PostgresStorage.holding_along`), each one's row comes along, after
    which of the recall's terms it holds: a statement of its own
    (a generic plan cannot prune a join by a parameter: given as one, the rows of a fusion's 200
    candidates were read and dropped, 2.5 ms of a 4.4 ms statement at 20,000 entries).

    Parameters: the lane's two counters, k1, b, the words' tsqueries, the OR of the words, the
    clause's, the words (as stored) with the lane (whether derived) for each, the two limits, how
    many; then those of ``rows``."""
    terms = range(words)
    frequencies = ", ".join(f"CASE WHEN e.tokens @@ w.q{i} THEN ts_rank_cd('{{1,1,1,1}}', e.tokens, w.q{i})::int"
                            f" ELSE 0 END AS tf{i}" for i in terms)
    queries = ", ".join(f"%s::tsquery AS q{i}" for i in terms)
    counts = ", ".join(f"{_WORD_COUNT} AS df{i}" for i in terms)
    weights = ", ".join(f"CASE WHEN (s.n - c.df{i} + 0.5) / (c.df{i} + 0.5) > 1"
                        f" THEN ln((s.n - c.df{i} + 0.5) / (c.df{i} + 0.5)) ELSE 1e-6 END AS idf{i}" for i in terms)
    shares = " + ".join(f"CASE WHEN h.tf{i} > 0 THEN w.idf{i} * ((h.tf{i} * (s.k1 + 1))"
                        f" / (h.tf{i} + s.k1 * (1 - s.b + s.b * h.ratio))) ELSE 0 END" for i in terms)
    along, joined = (", r.*", f"\nLEFT JOIN LATERAL (SELECT {rows}, {_COLUMNS_E} FROM entries e"
                     " WHERE e.pk = b.pk) r ON true") if rows else ("", "")
    return f"""
WITH stats AS (
    SELECT coalesce(sum(value) FILTER (WHERE key = %s), 0)::float8 AS n,
           coalesce(sum(value) FILTER (WHERE key = %s), 0)::float8 AS tokens FROM namespace_state),
shape AS (SELECT n, CASE WHEN n > 0 THEN tokens / n ELSE 0 END AS average, %s::float8 AS k1, %s::float8 AS b
          FROM stats),
words AS MATERIALIZED (SELECT {queries}),
held AS MATERIALIZED (
    SELECT e.pk, coalesce(e.token_count, 0) AS length, {frequencies}
    FROM words w, entries e WHERE e.tokens @@ %s::tsquery AND e.{lane} AND ({clause})),
counted AS (SELECT {counts}),
weighed AS MATERIALIZED (SELECT {weights} FROM counted c, shape s),  -- once, not once an entry
scored AS (
    SELECT h.pk, h.length, greatest({", ".join(f"h.tf{i}" for i in terms)}) >= %s OR h.length >= %s AS clipped,
           {shares} AS score
    FROM (SELECT held.*, CASE WHEN average > 0 THEN length / average ELSE 1.0 END AS ratio FROM held, shape) h,
         weighed w, shape s),
best AS (SELECT * FROM scored ORDER BY score DESC, pk LIMIT %s)
SELECT b.pk, b.score, b.clipped, b.length, s.n, s.average, ARRAY[{", ".join(f"c.df{i}" for i in terms)}]{along}
FROM (SELECT * FROM best UNION SELECT * FROM scored WHERE clipped) b CROSS JOIN shape s CROSS JOIN counted c{joined}
"""


def keyword_counters(derived: bool) -> tuple[str, str]:
    """The keys (in ``namespace_state``, one row a namespace, kept by triggers as the entries'
    keyword rows change) that count a keyword lane's rows and tokens (BM25's statistics): what was
    said and written, or what consolidation derived, each counted apart (see ``Storage.keywords``)."""
    return ("keywords.derived.rows", "keywords.derived.tokens") if derived else ("keywords.rows", "keywords.tokens")


class PostgresKeywords:
    """:class:`~harness_mem.bm25.KeywordSource` over the ``tokens`` column and its GIN index, for one
    lane: the entries consolidation derived, or all the others."""

    def __init__(self, storage: PostgresStorage, *, derived: bool = False) -> None:
        self.storage = storage
        self.derived = derived
        self.counters = keyword_counters(derived)
        # Every read is confined to the lane (the source is a constant of this module, not input).
        self.lane = f"source {'=' if derived else 'IS DISTINCT FROM'} '{DERIVED_SOURCE}'"
        # What the last ranking counted (the read view it saw, rows, average, each term's df): the
        # same recall's coverage asks for them again, inside the same view.
        self._counted: tuple[object, int, float, dict[str, int]] | None = None

    #: The server scores a whole query over every entry holding a word (:func:`bm25_statement`), at the cost
    #: of the raw engine's own ranked query: bm25.KeywordIndex asks it directly.
    scores_every_match = True

    def remember(self, rows: int, average: float, dfs: dict[str, int]) -> None:
        self._counted = (self.storage.read_view, rows, average, dfs)

    def recalled(self) -> tuple[int, float, dict[str, int]] | None:
        """What the last ranking counted, if it was in the read view still open."""
        counted = self._counted
        if counted is None or counted[0] is None or counted[0] is not self.storage.read_view:
            return None
        return counted[1], counted[2], counted[3]

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.storage.query(sql, params)[0][0]

    def stats(self) -> tuple[int, float]:
        recalled = self.recalled()
        if recalled is not None:
            return recalled[0], recalled[1]
        # Every namespace's counts for the owner; a confined role's own alone (row-level security).
        counts = dict(self.storage.query("SELECT key, sum(value) FROM namespace_state WHERE key = ANY(%s) GROUP BY key",
                                         (list(self.counters),)))
        rows, tokens = (int(counts.get(key) or 0) for key in self.counters)
        return rows, (tokens / rows if rows else 0.0)

    def document_frequency(self, term: str, rows: int) -> int:
        return self.document_frequencies([term], rows)[0]

    def document_frequencies(self, terms: Sequence[str], rows: int) -> list[int]:
        """How many entries hold each term (as the ranking in this read view counted them, or see
        :meth:`frequencies_statement`): what a semantic recall's coverage asks of words it has not
        seen."""
        recalled = self.recalled()
        if recalled is not None and all(term in recalled[2] for term in terms):
            return [recalled[2][term] for term in terms]
        return [int(n) for n in self.storage.query(*self.frequencies_statement(terms))[0]]

    def frequencies_statement(self, terms: Sequence[str]) -> tuple[str, list[Any]]:
        """A statement reading, in one row, how many entries of this lane hold each term: a word's
        from the counts the database keeps a word (0019: a row a namespace, where counting the
        entries holding a common word read thousands, 23 ms at 200,000), a phrase's or a prefix's
        counted along the GIN index."""
        counts, params = [], []
        for term in terms:
            tokens, prefix = query_tokens(term)
            if len(tokens) == 1 and not prefix:
                counts.append(_WORD_COUNT)
                params += [self.derived, tokens[0]]
            else:
                counts.append(f"(SELECT count(*) FROM entries WHERE tokens @@ %s::tsquery AND {self.lane})")
                params.append(tsquery_of(((term,),)))
        return f"SELECT {', '.join(counts)}", params

    def will_count(self, terms: Sequence[str]) -> None:
        if self.storage.read_view is not None:  # counted with the view's next search (PostgresStorage.nearest)
            self.storage.counting_along().append((self, list(terms)))

    def saw_frequencies(self, terms: Sequence[str], counts: Sequence[Any]) -> None:
        """Keep, in this read view, the counts :meth:`frequencies_statement` read along."""
        counted = self._counted
        if counted is not None and counted[0] is self.storage.read_view:
            counted[3].update(zip(terms, map(int, counts), strict=True))

    def ranked(self, terms: Sequence[str], k: int, selection: Selection) -> list[tuple[int, float]]:
        """BM25 over every term, as FTS5's bm25() scores it, of the entries holding any term."""
        if not terms:
            return []
        parsed = [query_tokens(term) for term in terms]  # once, not once an entry
        if all(len(tokens) == 1 and not prefix for tokens, prefix in parsed):
            return self._ranked_by_words(terms, [tokens[0] for tokens, _ in parsed], k, selection)
        return self._ranked_by_positions(terms, parsed, k, selection)

    def _ranked_by_words(self, terms: Sequence[str], words: list[str], k: int,
                         selection: Selection) -> list[tuple[int, float]]:
        """BM25 of a query of single words, scored by the server in one statement
        (:func:`bm25_statement`)."""
        clause, params = where(selection)
        along = self.storage.rows_along(k) > 0
        held, held_params = self.storage.holding_along()
        found = self.storage.query(
            bm25_statement(len(words), clause, self.lane, rows=held if along else None),
            [*self.counters, K1, B, *(tsquery_of(((term,),)) for term in terms), tsquery_of((tuple(terms),)), *params,
             *(value for word in words for value in (self.derived, word)), MAX_POSITIONS, MAX_POSITION, k,
             *(held_params if along else [])])
        if not found:
            return []
        rows, average, dfs = int(found[0][4]), float(found[0][5]), found[0][6]
        self.remember(rows, average, dict(zip(terms, dfs, strict=True)))
        if along:
            self.storage.saw_rows(read[7:] for read in found)
        scored = {int(read[0]): float(read[1]) for read in found}
        clipped = {int(read[0]): int(read[3] or 0) for read in found if read[2]}
        # A lexeme keeps at most 255 positions, none past 16383: an entry holding a word more often
        # (or that far in) is scored from its index text, as FTS5 counts it. It only gains.
        if clipped:
            weights = [idf(rows, int(df)) for df in dfs]
            for pk, text in self.storage.index_texts(sorted(clipped)).items():
                positions, _ = index_positions(text)
                scored[pk] = sum(weight * share(len(positions[word]), clipped[pk], average)
                                 for word, weight in zip(words, weights, strict=True) if positions.get(word))
        best = sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:k]
        self.storage.saw_ranking(best)
        return best

    def _ranked_by_positions(self, terms: Sequence[str], parsed: list[tuple[tuple[str, ...], bool]], k: int,
                             selection: Selection) -> list[tuple[int, float]]:
        """BM25 of a query holding phrases or prefixes: each entry's positions of the query's
        tokens are read, and each term's frequency counted from them here."""
        clause, params = where(selection)
        # Only the query's own tokens come back, each with its positions (what a term's frequency
        # is counted from): whole tsvectors would cost their parsing.
        words = sorted({t for tokens, _ in parsed for t in tokens})
        prefixes = sorted({tokens[-1] for tokens, prefix in parsed if prefix and tokens})
        found = self.storage.query(
            f"SELECT e.pk, e.token_count, u.lexeme, u.positions FROM entries e CROSS JOIN LATERAL unnest(e.tokens) u"
            f" WHERE e.tokens @@ %s::tsquery AND e.{self.lane} AND {clause}"
            " AND (u.lexeme = ANY(%s) OR u.lexeme LIKE ANY(%s))",
            [tsquery_of((tuple(terms),)), *params, words, [_like_prefix(p) for p in prefixes]],
        )
        if not found:
            return []
        held: dict[int, tuple[int, dict[str, list[int]]]] = {}
        clipped: set[int] = set()
        for pk, length, lexeme, positions in found:
            kept = list(positions or ())
            held.setdefault(int(pk), (int(length or 0), {}))[1][lexeme] = kept
            if len(kept) >= MAX_POSITIONS or (kept and kept[-1] >= MAX_POSITION):
                clipped.add(int(pk))
        # A lexeme keeps at most 255 positions, none past 16383: a term of an entry longer than that
        # (or repeated more often) is counted in the entry's index text, as FTS5 counts it.
        for pk, text in (self.storage.index_texts(sorted(clipped)) if clipped else {}).items():
            exact, _ = index_positions(text)
            lexemes = held[pk][1]
            for lexeme in lexemes:
                lexemes[lexeme] = exact.get(lexeme, [])
        rows, average = self.stats()
        idfs = [idf(rows, df) for df in self.document_frequencies(terms, rows)]
        scored = []
        for pk, (length, lexemes) in held.items():
            score = 0.0
            for term, weight in zip(parsed, idfs, strict=True):
                tf = _term_frequency(term, lexemes)
                if tf:
                    score += weight * share(tf, int(length or 0), average)
            scored.append((int(pk), score))
        scored.sort(key=lambda item: (-item[1], item[0]))
        self.storage.saw_ranking(scored[:k])
        return scored[:k]

    def holders(self, match: Match, low: int | None = None, high: int | None = None) -> npt.NDArray[np.int64]:
        sql = f"SELECT pk FROM entries WHERE tokens @@ %s::tsquery AND {self.lane}"
        params: list[Any] = [tsquery_of(match)]
        if low is not None and high is not None:
            sql += " AND pk BETWEEN %s AND %s"
            params += [low, high]
        return np.array(sorted(pk for (pk,) in self.storage.query(sql, params)), dtype=np.int64)

    def holders_among(self, term: str, pks: Sequence[int]) -> npt.NDArray[np.int64]:
        found = self.storage.query(f"SELECT pk FROM entries WHERE pk = ANY(%s) AND tokens @@ %s::tsquery AND {self.lane}",
                                   (list(pks), tsquery_of(((term,),))))
        return np.array(sorted(pk for (pk,) in found), dtype=np.int64)

    def lengths(self, pks: Sequence[int], selection: Selection | None = None) -> dict[int, int]:
        sql, params = "SELECT e.pk, e.token_count FROM entries e WHERE e.pk = ANY(%s) AND e.tokens IS NOT NULL", [list(pks)]
        if selection is not None:
            clause, more = where(selection)
            sql, params = f"{sql} AND {clause}", [*params, *more]
        return {int(pk): int(n or 0) for pk, n in self.storage.query(sql, params)}

    def texts(self, pks: Sequence[int]) -> dict[int, str]:
        return self.storage.index_texts(pks)

    def holding(self, pks: Sequence[int], terms: Sequence[str]) -> dict[int, tuple[bool, ...]]:
        return self.storage.holding(pks, terms)

    def will_hold(self, terms: Sequence[str]) -> None:
        self.storage.will_hold(terms)

    def count(self, selection: Selection, limit: int) -> int:
        clause, params = where(selection)
        return int(self._one(f"SELECT count(*) FROM (SELECT 1 FROM entries e WHERE {clause} LIMIT %s) t",
                             [*params, limit]))

    def pks(self, selection: Selection) -> list[int]:
        return self.storage.pks(selection)


class PostgresStorage(Storage):
    """Entries and their derived rows in a PostgreSQL database (with the pgvector extension)."""

    engine = "postgresql"
    rekeys_pseudonyms = True

    def __init__(self, dsn: str, *, read_only: bool = False) -> None:
        from importlib.util import find_spec

        if find_spec("psycopg") is None:
            raise ExtensionError("the PostgreSQL engine needs psycopg — pip install 'harness-mem[postgres]'")
        self.dsn = dsn
        self.path = safe_location(dsn)
        self.read_only = read_only
        self.pool = ConnectionPool(lambda: Connection(dsn, self.path, self._prepare))
        self.embedder: Embedder | None = None
        self.keywords = PostgresKeywords(self)
        self.derived_keywords = PostgresKeywords(self, derived=True)
        # What the last recall of each set of namespaces read before ranking: the next one is told
        # it (postgres_reads). Any thread's: it is checked before it is relied on.
        self._last_reads: dict[tuple[str, ...], RecallReads] = {}
        self._bound: bool = False
        self._passage_table: bool | None = None
        # Inside bulk(): [vectors the store held at its start (None: not known yet), vectors written
        # since, whether the HNSW index is put off until its end, entries written], and the worker
        # making its tokens.
        self._bulk: list[Any] | None = None
        self._halfvec_oid: int | None = None  # pgvector's halfvec type, asked once (see _halfvec_type)
        self._token_workers: TokenWorkers | None = None

    # Each thread's own (it has a connection of its own: postgres_pool): whether it is inside a write
    # transaction; the read-only snapshot it has open (a new object each), if one is (see
    # :meth:`snapshot`), and what it read in it; what the recall under way was told before its
    # snapshot (see :meth:`recalling`), and whether that is a guess to check.
    _in_transaction: PerThread[bool] = PerThread(lambda: False)
    read_view: PerThread[object | None] = PerThread(lambda: None)
    _seen_in_view: PerThread[tuple[object | None, dict[Any, Any]]] = PerThread(lambda: (None, {}))
    _recall_reads: PerThread[RecallReads | None] = PerThread(lambda: None)
    _guess: PerThread[Guess | None] = PerThread(lambda: None)

    @property
    def conn(self) -> Connection:
        """The calling thread's connection (see :mod:`.postgres_pool`)."""
        return self.pool.current()

    def _once_in_view(self, key: Any, read: Callable[[], Any]) -> Any:
        """``read()``, asked once per read-only snapshot: inside one, the answer cannot change."""
        if self.read_view is None:
            return read()
        view, seen = self._seen_in_view
        if view is not self.read_view:
            self._seen_in_view = (self.read_view, seen := {})
        if key not in seen:
            seen[key] = read()
        return seen[key]

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        """Each new connection's session settings (the first, and any made after a lost one)."""
        conn.adapters.register_dumper(HalfVector, _half_vector_dumper())
        conn.adapters.register_dumper(HalfVectors, _half_vector_dumper())
        conn.adapters.register_dumper(Pks, _pks_dumper())
        if self.read_only:
            conn.execute("SET default_transaction_read_only = on")
        # Filtered HNSW searches continue until enough rows pass the filter (pgvector 0.8).
        conn.execute("SET hnsw.iterative_scan = relaxed_order")
        # pgvector's default (40) kept 0.67 of the exact top 10 at 100k entries (bench_postgres.py
        # --scale); at 20,000, 400 kept .965 of SQLite's semantic top 10 and 600 .991, what
        # comparing every vector keeps. Set once here: a SET per search was three more round trips.
        conn.execute(f"SET hnsw.ef_search = {HNSW_EF_SEARCH}")

    def __repr__(self) -> str:
        return f"<PostgresStorage {self.path!r}>"

    @property
    def location(self) -> str:
        return self.path

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, params).fetchall())

    def query_together(self, *statements: tuple[str, Sequence[Any]]) -> list[list[tuple[Any, ...]]]:
        """Each statement's rows, in one round trip."""
        return self.conn.fetch_together(statements)

    def _run(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int(self.conn.execute(sql, params).rowcount)

    # ---- lifecycle and migrations -----------------------------------------------------------------

    def migrate(self) -> bool:
        """Apply ``migrations/postgres/NNNN_*.sql`` in order, each in its own transaction."""
        files = sorted(p for p in _migrations_dir().glob("[0-9][0-9][0-9][0-9]_*.sql"))
        if not files:
            raise MigrationError("no PostgreSQL migrations found — the installation is incomplete; reinstall harness-mem")
        known = {int(p.name[:4]): p for p in files}
        try:
            return self._migrate(known)
        finally:
            self.confined_to, self.writable_to = self._granted()

    def _migrate(self, known: dict[int, Path]) -> bool:
        if self.read_only or self._applied() >= set(known):
            # Nothing to do: no DDL, which a confined role may not run.
            newer = sorted(self._applied() - set(known))
            if newer:
                raise SchemaTooNewError(
                    f"{self.path} has migration {newer[-1]:04d}, newer than this harness-mem knows — upgrade harness-mem"
                )
            return False
        self._run("CREATE EXTENSION IF NOT EXISTS vector")
        with self.conn.transaction():
            self._run("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
            self._run("CREATE TABLE IF NOT EXISTS _migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                      " applied_at TEXT NOT NULL DEFAULT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'))")
        created = False
        for number, path in sorted(known.items()):
            with self.conn.transaction():
                self._run("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
                applied = {n for (n,) in self.query("SELECT number FROM _migrations")}
                newer = sorted(applied - set(known))
                if newer:
                    raise SchemaTooNewError(
                        f"{self.path} has migration {newer[-1]:04d}, newer than this harness-mem knows — upgrade harness-mem"
                    )
                if number in applied:
                    continue
                self.conn.execute(path.read_text(encoding="utf-8"))
                self._run("INSERT INTO _migrations (number, name) VALUES (%s, %s)", (number, path.stem))
                created = created or number == 1
        return created

    def _applied(self) -> set[int]:
        if not self.query("SELECT to_regclass('_migrations') IS NOT NULL")[0][0]:
            return set()
        return {int(n) for (n,) in self.query("SELECT number FROM _migrations")}

    def close(self) -> None:
        self.pool.close()

    def _granted(self) -> tuple[frozenset[str] | None, frozenset[str] | None]:
        """The namespaces the database lets this role read, and write (None: it does not confine it)."""
        applied = self._applied()
        if 12 in applied:
            readable, writable = self.query("SELECT readable_namespaces(), writable_namespaces()")[0]
            return (None, None) if readable is None else (frozenset(readable), frozenset(writable))
        if 3 in applied:  # a store not migrated yet (opened read-only): one namespace a role
            [(only,)] = self.query("SELECT confined_namespace()")
            return (None, None) if only is None else (frozenset([only]), frozenset([only]))
        return None, None

    def grant(self, role: str, namespace: str, *, read_only: bool = False) -> None:
        """Let ``role`` read ``namespace`` (as stored), and write it unless ``read_only``, beside the
        namespaces it was granted before: the database enforces it (row-level security). Run by
        the store's owner."""
        from psycopg import sql

        if not self.vectors_bound(writing=True) and self.embedder is not None:
            raise StorageError("the vectors' table could not be made")
        # Every table holding a namespace's rows (each confines them to the role's namespaces), the
        # experience tables included.
        tables = ["entries", "episodes", "skills", "skill_revisions", "skill_sources", "consolidations",
                  "derivations", "identities", "sync_ops", "sync_forgotten",
                  *(["entry_vectors"] if self._has_vector_table() else []),
                  *(["entry_passages"] if self._has_passage_table() else [])]
        with self.transaction():
            self._run("INSERT INTO confined_roles (role) VALUES (%s) ON CONFLICT DO NOTHING", (role,))
            self._run("INSERT INTO namespace_roles (role, namespace, read_only) VALUES (%s, %s, %s)"
                      " ON CONFLICT (role, namespace) DO UPDATE SET read_only = excluded.read_only",
                      (role, namespace, read_only))
            who = sql.Identifier(role)
            self.conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(str(self.query("SELECT current_schema()")[0][0])), who))
            # What it reads and never writes: store-wide records (settings: the keys it needs, a policy
            # says) and its namespaces' counts (kept by the database as their entries change).
            store_wide = sql.SQL("_migrations, settings, namespace_state, word_counts")
            self.conn.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(store_wide, who))
            self.conn.execute(sql.SQL("REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON {} FROM {}").format(store_wide, who))
            # Table rights to write are given even to a role that reads alone: the policies decide
            # which namespace's rows it may write (none, for a role granted only read-only ones).
            for table in tables:
                self.conn.execute(sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(
                    sql.Identifier(table), who))

    def revoke(self, role: str, namespace: str) -> bool:
        """Take ``namespace`` (as stored) back from ``role``; False when it had not been granted it.
        A role whose last namespace goes stays confined, to none: it reads nothing."""
        with self.transaction():
            return self._run("DELETE FROM namespace_roles WHERE role = %s AND namespace = %s", (role, namespace)) > 0

    def grants(self) -> list[tuple[str, str, bool]]:
        """Every grant: (role, namespace as stored, read-only), by role then namespace; a role
        confined to none has one row with an empty namespace."""
        return [(str(role), str(namespace or ""), bool(read_only)) for role, namespace, read_only in self.query(
            "SELECT c.role, g.namespace, coalesce(g.read_only, false) FROM confined_roles c"
            " LEFT JOIN namespace_roles g ON g.role = c.role ORDER BY 1, 2")]

    # ---- settings ---------------------------------------------------------------------------------

    def seal_identities(self, namespace: str, rows: Sequence[SealedIdentity]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany("INSERT INTO identities (namespace, stored, key_id, sealed) VALUES (%s, %s, %s, %s)"
                               " ON CONFLICT DO NOTHING", [(namespace, *row) for row in rows])

    def sealed_identities(self, namespace: str, stored: Sequence[str]) -> list[SealedIdentity]:
        rows = self.query("SELECT stored, key_id, sealed FROM identities WHERE namespace = %s AND stored = ANY(%s)",
                          (namespace, list(stored)))
        return [SealedIdentity(row[0], row[1], bytes(row[2])) for row in rows]

    def drop_unused_identities(self) -> int:
        with self.transaction():
            kept = self.query("SELECT namespace, stored FROM identities WHERE stored <> namespace")
            if not kept:
                return 0
            used = identity_values_in_use(self.query(
                "SELECT namespace, id, role, session, tags, superseded_by, metadata FROM entries"
                " WHERE strpos(id, '<') > 0 OR strpos(coalesce(role, ''), '<') > 0"
                " OR strpos(coalesce(session, ''), '<') > 0 OR strpos(tags::text, '<') > 0"
                " OR strpos(coalesce(superseded_by, ''), '<') > 0 OR strpos(metadata::text, '<') > 0"))
            gone = [(namespace, stored) for namespace, stored in kept if (namespace, stored) not in used]
            with self.conn.cursor() as cursor:
                cursor.executemany("DELETE FROM identities WHERE namespace = %s AND stored = %s", gone)
        return len(gone)

    def every_sealed_identity(self) -> Iterator[tuple[str, SealedIdentity]]:
        for row in self.query("SELECT namespace, stored, key_id, sealed FROM identities"):
            yield row[0], SealedIdentity(row[1], row[2], bytes(row[3]))

    def setting(self, key: str) -> str | None:
        found = self.query("SELECT value FROM settings WHERE key = %s", (key,))
        return None if not found else str(found[0][0])

    def set_setting(self, key: str, value: str) -> None:
        self._run("INSERT INTO settings (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                  (key, value))

    def rekey_pseudonyms(self, rekey: Callable[[str], str],
                         reseal: Callable[[str, SealedIdentity], tuple[str, SealedIdentity]], *,
                         finished: Callable[[], bool], finish: Callable[[], None],
                         progress: Callable[[int, int], None] | None = None) -> int:
        changed = postgres_rekey.rekey_tables(self.conn, self.transaction, rekey, reseal, finished=finished,
                                              finish=finish, retokenize=self._retokenize, progress=progress)
        if changed:  # no dead tuple keeps a pseudonym keyed the old way
            for table in postgres_rekey.tables_of(self.conn):
                self._run(f"VACUUM FULL {table}")
        return changed

    def _retokenize(self) -> None:
        """Every live entry's keyword tokens made again (inside a transaction): a role is in them.
        The words' counts are counted again after (a rekey holds the entries' triggers off)."""
        after = 0
        while True:
            found = [int(pk) for (pk,) in self.query(
                "SELECT pk FROM entries WHERE pk > %s AND forgotten_at IS NULL ORDER BY pk LIMIT %s",
                (after, KEYWORD_BATCH))]
            if not found:
                self._run("SELECT recount_words()")
                return
            written = {pk: tsvector_literal(text) for pk, text in self.index_texts(found).items()}
            with self.conn.cursor() as cursor:
                cursor.executemany("UPDATE entries SET tokens = %s::tsvector, token_count = %s WHERE pk = %s",
                                   [(literal, count, pk) for pk, (literal, count) in written.items()])
            after = found[-1]

    def redaction_secret(self, *, create: bool) -> str | None:
        found = self.setting("redaction.secret")
        if found is None and self.confined_to is not None:
            # Not shown to a confined role where it is the pseudonyms' only key (an older store),
            # and never made by one: the owner's open makes it.
            return None
        if found is None and create:
            import secrets

            with self.transaction():
                self._run("INSERT INTO settings (key, value) VALUES ('redaction.secret', %s) ON CONFLICT DO NOTHING",
                          (secrets.token_hex(32),))
            found = self.setting("redaction.secret")
        return found

    @property
    def keyword_only(self) -> bool:
        return self.setting("store.keyword_only") is not None

    def set_keyword_only(self, keyword_only: bool) -> None:
        if keyword_only:
            self._run("INSERT INTO settings (key, value) VALUES ('store.keyword_only', '1') ON CONFLICT DO NOTHING")
        else:
            self._run("DELETE FROM settings WHERE key = 'store.keyword_only'")

    def recorded_model(self) -> dict[str, str] | None:
        rows = self.query("SELECT key, value FROM settings WHERE key LIKE 'embedder.%%'")
        return {k.removeprefix("embedder."): v for k, v in rows} or None

    # ---- transactions --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._in_transaction:
            yield
            return
        if self.read_only:
            raise StorageError(f"{self.path} is open read-only — nothing was written")
        self._in_transaction = True
        self._recall_reads = self._guess = None  # what a recall read before this write may change
        try:
            with self.conn.transaction():
                self._run("SELECT pg_advisory_xact_lock(%s)", (_WRITE_LOCK,))
                yield
                # Counted by the database as the owner: a confined role's in its namespace's row.
                self._run("SELECT bump_data_version()")
        finally:
            self._in_transaction = False

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if self.conn.in_transaction:  # inside one already: one view
            yield
            return
        # Sent with the snapshot's first query: no round trip of its own. Inside it the server plans
        # a statement once (psycopg prepares those sent five times): planned again each call, the
        # ranking's and the search's plans cost 1-5 ms a recall, and their parameters (a tsquery, a
        # vector, over columns kept out of the statistics) could not change them.
        # A recall told what the last one read before its snapshot checks it here (postgres_reads).
        guess = self._guess
        if guess is not None and (guess.truth is not None or self._recall_reads is not guess.reads):
            guess = None  # checked already, or no longer what the recall is told
        # Set in the statement asked with it where there is one: a statement less to send.
        if guess is None:
            self.conn.open_with_next(_READ_VIEW, "SET LOCAL {} = {}".format(*_GENERIC_PLANS))
        else:
            self.conn.open_with_next(_READ_VIEW, asking=(
                "SELECT r.*, set_config('{}', '{}', true)".format(*_GENERIC_PLANS)
                + f" FROM ({self._recall_reads_statement()}) r",
                RecallReads.params(guess.reads.namespaces)))
        self.read_view = object()  # what is counted inside it may be reused until it ends
        try:
            yield
        finally:
            self.read_view = None
            if guess is not None and (answer := self.conn.answer()):
                guess.truth = RecallReads.parse(guess.reads.namespaces, answer[0])
            self.conn.close_opened("COMMIT")

    def data_version(self) -> tuple[int, int]:
        if self._recall_reads is not None:
            return 0, int(self._told("data_version"))
        return 0, int(self.query(f"SELECT {DATA_VERSION}")[0][0])

    def recalling(self, namespaces: Sequence[str], recall: Callable[[], T]) -> T:
        if self._recall_reads is not None or self.conn.in_transaction:
            return recall()  # one recall inside another's, or inside a transaction: asked as they come
        key = tuple(namespaces)
        reads = self._last_reads.get(key)
        if reads is not None:  # told what the last recall read, checked in its snapshot's first round trip
            guess = Guess(reads)
            self._recall_reads, self._guess = reads, guess
            try:
                found = recall()
            finally:
                self._recall_reads = self._guess = None
            if guess.held():
                if guess.truth is not None:
                    self._last_reads[key] = guess.truth
                return found
            reads = guess.truth  # run again on what its snapshot saw (as if read before it, as below)
        if reads is None:
            reads = RecallReads.parse(namespaces, self.query(self._recall_reads_statement(), RecallReads.params(namespaces))[0])
        if len(self._last_reads) >= _LAST_READS_KEPT:
            self._last_reads.clear()
        self._last_reads[key] = self._recall_reads = reads
        try:
            return recall()
        finally:
            self._recall_reads = None

    def _recall_reads_statement(self) -> str:
        # Whether any entry keeps later windows is asked where their table is known (a handle bound
        # to its model knows without a query); elsewhere taken as so: a search reads as far as ever.
        return recall_reads(passages=self._has_passage_table() if self._bound else None)

    def _told(self, name: str, *args: Any) -> Any:
        """What the reads of the recall under way answer to ``name(*args)``, noted if they are a guess."""
        assert self._recall_reads is not None
        if self._guess is not None:
            self._guess.asked.append((name, args))
        return getattr(self._recall_reads, name)(*args)

    @contextmanager
    def without_waiting(self) -> Iterator[None]:
        self._run("SET lock_timeout = '1ms'")
        try:
            yield
        finally:
            self._run("SET lock_timeout = 0")

    def is_busy(self, exc: BaseException) -> bool:
        cause = exc.__cause__ if isinstance(exc, StorageError) else exc  # the driver's own error
        return type(cause).__name__ in ("LockNotAvailable", "QueryCanceled")

    # ---- vectors ---------------------------------------------------------------------------------------

    def _identity(self) -> dict[str, str]:
        assert self.embedder is not None
        return {"name": str(self.embedder.name), "dim": str(int(self.embedder.dim)),
                "fingerprint": str(getattr(self.embedder, "fingerprint", self.embedder.name))}

    def _has_vector_table(self) -> bool:
        # Once this handle bound its model the table is there: no catalogue query per deleted row.
        return self._bound or bool(self.query("SELECT to_regclass('entry_vectors') IS NOT NULL")[0][0])

    def _has_passage_table(self) -> bool:
        # Known once bound (a store written before passages may lack it until its writer opens it).
        if self._bound and self._passage_table is not None:
            return self._passage_table
        self._passage_table = bool(self.query("SELECT to_regclass('entry_passages') IS NOT NULL")[0][0])
        return self._passage_table

    def use_embedder(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self._bound = False
        self._passage_table = None

    def vectors_bound(self, *, writing: bool = True) -> bool:
        if self.embedder is None:
            return False
        if self._bound:
            return True
        recorded = self.recorded_model()
        mine = self._identity()
        if recorded is not None and recorded != mine:
            self.check_model()
        # A store written before passages has its vectors' table and not theirs: its writer makes it.
        if (recorded is None or self.keyword_only or not self._has_vector_table()
                or (writing and not self.read_only and not self._has_passage_table())):
            if not writing and (self.read_only or self.keyword_only):
                return False
            with self.transaction():
                self.set_keyword_only(False)
                if self.recorded_model() is None:
                    for key, value in mine.items():
                        self.set_setting(f"embedder.{key}", value)
                dim = int(mine["dim"])
                self._run(f"CREATE TABLE IF NOT EXISTS entry_vectors (pk BIGINT PRIMARY KEY REFERENCES entries (pk)"
                          f" ON DELETE CASCADE, embedding halfvec({dim}) NOT NULL)")
                self._run(_HNSW_INDEX)
                # A vector is seen only with its entry: a confined role reads no other namespace's.
                self._run("ALTER TABLE entry_vectors ENABLE ROW LEVEL SECURITY")
                self._follow_entry_policies("entry_vectors")
                self._run("SELECT keep_vector_counts()")  # embedding coverage kept as they change (0015)
                # A long entry's later windows and a turn's sentences (harness_mem.passages), under
                # the same rule (a table made before the sentences gets their column in 0018).
                self._run(f"CREATE TABLE IF NOT EXISTS entry_passages (pk BIGINT NOT NULL REFERENCES entries (pk)"
                          f" ON DELETE CASCADE, start INTEGER NOT NULL, stop INTEGER NOT NULL,"
                          f" embedding halfvec({dim}) NOT NULL, sentence BOOLEAN NOT NULL DEFAULT false,"
                          f" PRIMARY KEY (pk, start))")
                self._run("ALTER TABLE entry_passages ENABLE ROW LEVEL SECURITY")
                self._follow_entry_policies("entry_passages")
        self._bound = True
        if writing and not self.read_only and self.confined_to is None and self._bulk is None:
            self._mend_vector_index()
        return True

    def _follow_entry_policies(self, table: str) -> None:
        """Row-level security on ``table`` (a constant: rows keyed by an entry's pk) as migration 0012
        gives the tables that belong to another: read with the entry, written where it may be."""
        entry = f"EXISTS (SELECT 1 FROM entries e WHERE e.pk = {table}.pk"
        for policy in ("of_the_role", "read", "written"):
            self._run(f"DROP POLICY IF EXISTS {table}_{policy} ON {table}")
        self._run(f"CREATE POLICY {table}_read ON {table} FOR SELECT USING ({entry}))")
        self._run(f"CREATE POLICY {table}_written ON {table} USING ({entry} AND namespace_writable(e.namespace)))"
                  f" WITH CHECK ({entry} AND namespace_writable(e.namespace)))")

    def _mend_vector_index(self) -> None:
        """Build the HNSW index if an import that put it off never finished (see :meth:`bulk`)."""
        if not self.query("SELECT to_regclass('entry_vectors_hnsw') IS NULL")[0][0]:
            return
        self._build_vector_index()

    def _build_vector_index(self) -> None:
        """Build the HNSW index whole, with the memory its graph takes: the server's default (64 MB)
        holds 40,000 vectors' graph, and past it pgvector builds on disk, several times as long
        (200,000 vectors: 85 s with room, against most of a 490 s import without)."""
        with self.transaction():
            self._run("SELECT set_config('maintenance_work_mem', greatest(pg_size_bytes(current_setting("
                      "'maintenance_work_mem')) / 1024, least(%s, (SELECT count(*) FROM entry_vectors) * %s"
                      " * coalesce((SELECT value::int FROM settings WHERE key = 'embedder.dim'), 384) / 1024))::text"
                      " || 'kB', true)", (_INDEX_MEMORY_KB, _GRAPH_BYTES_A_DIMENSION))
            self._run(_HNSW_INDEX)

    @contextmanager
    def bulk(self, *, workers: int = 0) -> Iterator[None]:
        """An import: once it has written more vectors than the store held (and
        :data:`DEFERRED_INDEX_ROWS`), the HNSW index is dropped and built again whole at the end.
        Meanwhile semantic recall compares every vector (right, slower); an import stopped midway
        leaves the index to the next handle that writes (:meth:`_mend_vector_index`). Given
        ``workers``, its large batches' keyword tokens are made in a worker process
        (:mod:`.postgres_tokens`)."""
        if self._bulk is not None or self.read_only or self.confined_to is not None:
            yield
            return
        self._bulk = [None, 0, False, 0]
        self._token_workers = TokenWorkers() if workers else None
        finished = False
        try:
            yield
            finished = True
        finally:
            if self._token_workers is not None:
                self._token_workers.close()
                self._token_workers = None
            deferred, written, self._bulk = self._bulk[2], self._bulk[3], None
            if deferred:
                self._build_vector_index()
            if finished and written >= DEFERRED_INDEX_ROWS:  # not on the way out of a failed one
                self._settle_after_import()

    def _settle_after_import(self) -> None:
        """What the planner knows of the tables counted again, the keyword index's pending entries
        merged into it, and the entries' pages marked all-visible, after a large import: its first
        recalls read as every later one does (right after importing 20,000 entries, a keyword
        recall took 3x as long, a semantic one 7x, until autovacuum came by; a search's candidates
        are looked up in ``entries_candidates`` alone only on marked pages, 0020)."""
        if self.conn.in_transaction:  # an import inside a caller's transaction: VACUUM cannot run there
            self.merge_keyword_index()
            self._run("ANALYZE entries")
        else:
            self._run("VACUUM (ANALYZE) entries")  # merges the keyword index's pending list too
        tables = ["word_counts", *(["entry_vectors"] if self._has_vector_table() else []),
                  *(["entry_passages"] if self._has_passage_table() else [])]
        self._run(f"ANALYZE {', '.join(tables)}")

    def _count_for_bulk(self, written: int) -> None:
        """Count ``written`` vectors of an import, putting its HNSW index off once that pays (inside
        the write transaction)."""
        if self._bulk is None or self._bulk[2]:
            return
        if self._bulk[0] is None:
            self._bulk[0] = int(self.query("SELECT count(*) FROM entry_vectors")[0][0])
        self._bulk[1] += written
        if self._bulk[1] >= max(DEFERRED_INDEX_ROWS, self._bulk[0]):
            self._run("DROP INDEX IF EXISTS entry_vectors_hnsw")
            self._bulk[2] = True

    def check_model(self) -> str:
        recorded = self.recorded_model()
        mine = self._identity()
        if recorded is not None and recorded != mine:
            raise other_model(recorded, mine)
        return f"{mine['name']}, {mine['dim']} dimensions"

    def model_differs(self) -> bool:
        recorded = self.recorded_model()
        return self.embedder is not None and recorded is not None and recorded != self._identity()

    def embed_new(self, rows: Sequence[Row], on_conflict: OnConflict) -> Vectors:
        if self._token_workers is not None:  # an import's batch: its tokens are made meanwhile
            self._token_workers.start(rows)
        if not self.vectors_bound():
            return {}
        todo = list(rows)
        if on_conflict == "ignore":
            stored = set()
            for namespace in {row.namespace for row in rows}:
                ids = [row.id for row in rows if row.namespace == namespace]
                stored |= {(namespace, i) for (i,) in self.query(
                    "SELECT id FROM entries WHERE namespace = %s AND id = ANY(%s)", (namespace, ids))}
            todo = [row for row in rows if (row.namespace, row.id) not in stored]
        if not todo:
            return {}
        assert self.embedder is not None
        embedded = embed_entries(self.embedder, [(row.content, row.role, row.kind) for row in todo])
        return {id(row): embedding for row, embedding in zip(todo, embedded, strict=True)}

    # ---- writes -----------------------------------------------------------------------------------------

    def write(self, rows: Sequence[Row], on_conflict: OnConflict, vectors: Vectors | None = None) -> list[Row]:
        bound = self.vectors_bound()
        if vectors is None:
            vectors = self.embed_new(rows, on_conflict) if bound else {}
        if self._token_workers is not None:
            self._token_workers.start(rows)  # unless embed_new did
        with self.transaction():
            batch = self._resolve_conflicts(list(rows), on_conflict)
            if not batch:
                return []
            if self._bulk is not None:
                self._bulk[3] += len(batch)
            texts = self._index_texts(batch)
            made = self._token_workers.literals(rows, texts) if self._token_workers is not None else None
            tokens = made if made is not None else [tsvector_literal(text) for text in texts]
            # One statement for the whole batch (the rows as JSON, typed by the table's own row
            # type): the trigger counting the keyword rows then runs once, not once a row.
            written = json.dumps([dict(zip(_WRITTEN, [*row[1:], literal, count], strict=True))
                                  for row, (literal, count) in zip(batch, tokens, strict=True)])
            numbered = {(namespace, entry_id): int(pk) for pk, namespace, entry_id in self.query(
                f"INSERT INTO entries ({', '.join(_WRITTEN)}) SELECT {', '.join(_WRITTEN)}"
                " FROM json_populate_recordset(NULL::entries, %s::json) RETURNING pk, namespace, id", (written,))}
            pks = [numbered[(row.namespace, row.id)] for row in batch]
            if bound:
                late = [row for row in batch if id(row) not in vectors]
                if late:
                    assert self.embedder is not None
                    vectors.update(zip(map(id, late), embed_entries(self.embedder, [(r.content, r.role, r.kind) for r in late]),
                                       strict=True))
                self._count_for_bulk(len(batch))
                self._insert_vectors(pks, [vectors[id(row)] for row in batch])
        return batch

    def _insert_vectors(self, pks: Sequence[int], embeddings: Sequence[Embedding]) -> None:
        # One statement a table, the vectors as one binary array (HalfVectors): a statement a row
        # fired the trigger counting them (0015) once a row, a quarter of an import's time (COPY
        # would be one too, but is refused under row-level security, which a confined role writes
        # through).
        self._run("INSERT INTO entry_vectors (pk, embedding) SELECT * FROM unnest(%s::bigint[], %s::halfvec[])",
                  (list(pks), HalfVectors.of(np.stack([e.vector for e in embeddings]), self._halfvec_type())))
        later = [(pk, p) for pk, e in zip(pks, embeddings, strict=True) for p in e.passages]
        if later and self._has_passage_table():
            self._run("INSERT INTO entry_passages (pk, start, stop, embedding, sentence)"
                      " SELECT * FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::halfvec[], %s::boolean[])",
                      ([pk for pk, _ in later], [p.start for _, p in later], [p.stop for _, p in later],
                       HalfVectors.of(np.stack([p.vector for _, p in later]), self._halfvec_type()),
                       [p.sentence for _, p in later]))

    def _halfvec_type(self) -> int:
        """The oid of pgvector's ``halfvec`` in this database (an array's wire format names it)."""
        if self._halfvec_oid is None:
            self._halfvec_oid = int(self.query("SELECT 'halfvec'::regtype::oid")[0][0])
        return self._halfvec_oid

    def _resolve_conflicts(self, batch: list[Row], on_conflict: OnConflict) -> list[Row]:
        def stored(namespace: str, ids: list[str]) -> list[tuple[str, int]]:
            return [(entry_id, int(pk)) for entry_id, pk in self.query(
                "SELECT id, pk FROM entries WHERE namespace = %s AND id = ANY(%s)", (namespace, ids))]

        return settle_conflicts(batch, on_conflict, stored, self._delete_pk)

    def delete(self, namespace: str, entry_id: str) -> bool:
        with self.transaction():
            found = self.query("SELECT pk FROM entries WHERE namespace = %s AND id = %s", (namespace, entry_id))
            if not found:
                return False
            self._delete_pk(found[0][0])
        return True

    # ---- the sync log ------------------------------------------------------------------------------

    def log_operations(self, operations: Sequence[Operation], *, chunk: str | None = None,
                       text: bool = True) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO sync_ops (op_hash, device, hlc_wall, hlc_tick, namespace, entry_id, related_id, op,"
                " operation, origin_chunk) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (op_hash) DO NOTHING",
                [(op.hash, op.device, *op.hlc, op.ns, op.id, related_id(op), op.op,
                  op.canonical().decode() if text else None, chunk) for op in operations])
            forgotten = [(op.ns, entry_id, *op.hlc) for op in operations if op.op == "forget"
                         for entry_id in op.body.ids]  # type: ignore[union-attr]
            if forgotten:
                cursor.executemany("INSERT INTO sync_forgotten (namespace, entry_id, hlc_wall, hlc_tick)"
                                   " VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING", forgotten)

    def last_stamp(self) -> Stamp | None:
        found = self.query("SELECT hlc_wall, hlc_tick FROM sync_ops ORDER BY hlc_wall DESC, hlc_tick DESC LIMIT 1")
        return None if not found else Stamp(*found[0])

    def logged_operations(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str, str | None]]:
        return [(seq, op_hash, operation) for seq, op_hash, operation in self.query(
            "SELECT seq, op_hash, operation FROM sync_ops WHERE seq > %s ORDER BY seq LIMIT %s", (after, limit))]

    def known_operations(self, hashes: Sequence[str]) -> set[str]:
        return {found for (found,) in self.query("SELECT op_hash FROM sync_ops WHERE op_hash = ANY(%s)",
                                                 (list(hashes),))}

    def logged_about(self, namespace: str, entry_id: str, op: str) -> list[tuple[Stamp, str | None]]:
        return [(Stamp(wall, tick), text) for wall, tick, text in self.query(
            "SELECT hlc_wall, hlc_tick, operation FROM sync_ops WHERE namespace = %s AND entry_id = %s AND op = %s"
            " ORDER BY hlc_wall, hlc_tick", (namespace, entry_id, op))]

    def logged_supersedes(self, namespace: str, entry_ids: Sequence[str]) -> list[str]:
        # Two lookups, one index each (an OR of the two would read the whole log).
        return [text for (text,) in self.query(
            "SELECT operation FROM sync_ops WHERE namespace = %s AND entry_id = ANY(%s) AND op = 'supersede'"
            " UNION SELECT operation FROM sync_ops WHERE namespace = %s AND related_id = ANY(%s)",
            (namespace, list(entry_ids), namespace, list(entry_ids)))]

    def logged_stamps(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, list[Stamp]]:
        if op == "forget":  # a forget of several ids is logged once: its ids are noted apart
            return stamps_by_id(self.query(
                "SELECT entry_id, hlc_wall, hlc_tick FROM sync_forgotten WHERE namespace = %s AND entry_id = ANY(%s)"
                " ORDER BY hlc_wall, hlc_tick", (namespace, list(entry_ids))))
        return stamps_by_id(self.query(
            "SELECT entry_id, hlc_wall, hlc_tick FROM sync_ops WHERE namespace = %s AND entry_id = ANY(%s) AND op = %s"
            " ORDER BY hlc_wall, hlc_tick", (namespace, list(entry_ids), op)))

    def empty_adds_before(self, namespace: str, entry_id: str, stamp: Stamp) -> None:
        self._run("UPDATE sync_ops SET operation = NULL WHERE namespace = %s AND entry_id = %s AND op = 'add'"
                  " AND operation IS NOT NULL AND (hlc_wall, hlc_tick) < (%s, %s)",
                  (namespace, entry_id, stamp.wall, stamp.tick))

    def selector_forgets(self, namespace: str, after: Stamp) -> list[str]:
        return [text for (text,) in self.query(
            "SELECT operation FROM sync_ops WHERE op = 'forget' AND namespace = %s AND (hlc_wall, hlc_tick) > (%s, %s)"
            " AND operation::jsonb -> 'body' -> 'selector' <> 'null'::jsonb ORDER BY hlc_wall, hlc_tick",
            (namespace, *after))]

    def added_twice(self) -> list[tuple[str, str]]:
        return [(str(namespace), str(entry_id)) for namespace, entry_id in self.query(
            "SELECT namespace, entry_id FROM sync_ops WHERE op = 'add' AND operation IS NOT NULL"
            " GROUP BY namespace, entry_id HAVING count(*) > 1 ORDER BY namespace, entry_id")]

    def latest_logged(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for entry_id, text in self.query(
                "SELECT entry_id, operation FROM sync_ops WHERE namespace = %s AND entry_id = ANY(%s)"
                " AND op = %s AND operation IS NOT NULL ORDER BY hlc_wall, hlc_tick", (namespace, list(entry_ids), op)):
            found[str(entry_id)] = str(text)
        return found

    def set_expiry(self, namespace: str, entry_id: str, expires_at: int) -> None:
        self._run("UPDATE entries SET expires_at = %s WHERE namespace = %s AND id = %s AND forgotten_at IS NULL",
                  (expires_at, namespace, entry_id))

    def note_written(self, hashes: Sequence[str], chunk: str | None) -> None:
        self._run("UPDATE sync_ops SET origin_chunk = %s WHERE op_hash = ANY(%s)", (chunk, list(hashes)))

    def chunks_holding_forgotten(self, device: str) -> list[str]:
        return [chunk for (chunk,) in self.query(
            "SELECT DISTINCT origin_chunk FROM sync_ops WHERE device = %s AND op = 'add' AND operation IS NULL"
            " AND origin_chunk IS NOT NULL", (device,))]

    def forgotten_adds(self, hashes: Sequence[str]) -> set[str]:
        return {found for (found,) in self.query(
            "SELECT op_hash FROM sync_ops WHERE op = 'add' AND operation IS NULL AND op_hash = ANY(%s)",
            (list(hashes),))}

    def chunks_read(self, device: str) -> dict[str, str]:
        return {chunk: state for chunk, state in self.query(
            "SELECT chunk, state FROM sync_chunks WHERE device = %s", (device,))}

    def quarantined_chunks(self) -> list[tuple[str, str, str | None]]:
        return [(device, chunk, reason) for device, chunk, reason in self.query(
            "SELECT device, chunk, reason FROM sync_chunks WHERE state = 'quarantined' ORDER BY device, chunk")]

    def note_chunk(self, device: str, chunk: str, state: str, reason: str | None = None) -> None:
        self._run("INSERT INTO sync_chunks (device, chunk, state, reason) VALUES (%s, %s, %s, %s)"
                  " ON CONFLICT (device, chunk) DO UPDATE SET state = excluded.state, reason = excluded.reason",
                  (device, chunk, state, reason))

    def _delete_pk(self, pk: int) -> None:
        found = self.query("SELECT namespace, session, created_at, kind FROM entries WHERE pk = %s", (pk,))
        self._drop_derived(pk)
        self._run("DELETE FROM entries WHERE pk = %s", (pk,))
        if found and found[0][3] == "turn" and found[0][1]:
            self._reindex_turn_after(found[0][0], found[0][1], found[0][2], pk)

    def _drop_derived(self, pk: int) -> None:
        # The keyword counters follow (triggers, migration 0010).
        self._run("UPDATE entries SET tokens = NULL, token_count = NULL WHERE pk = %s AND tokens IS NOT NULL", (pk,))
        if self._has_vector_table():
            self._run("DELETE FROM entry_vectors WHERE pk = %s", (pk,))
            if self._has_passage_table():
                self._run("DELETE FROM entry_passages WHERE pk = %s", (pk,))
        # The sync log lets go of its words too (its hash stays: a replay of it is recognised).
        self._run("UPDATE sync_ops s SET operation = NULL FROM entries e WHERE e.pk = %s AND s.op = 'add'"
                  " AND s.operation IS NOT NULL AND s.namespace = e.namespace AND s.entry_id = e.id", (pk,))

    def forget(self, pks: Sequence[int], when: int) -> None:
        with self.transaction():
            for pk in pks:
                self._drop_derived(pk)
                self._run("UPDATE entries SET forgotten_at = %s WHERE pk = %s", (when, pk))
                found = self.query("SELECT namespace, session, created_at, kind FROM entries WHERE pk = %s", (pk,))
                if found and found[0][3] == "turn" and found[0][1]:
                    self._reindex_turn_after(found[0][0], found[0][1], found[0][2], pk)
            # A skill distilled from a forgotten episode quotes its situation: it goes, with its history.
            self._run(
                "DELETE FROM skills WHERE pk IN (SELECT s.skill_pk FROM skill_sources s"
                " JOIN episodes ep ON ep.pk = s.episode_pk"
                " JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
                " WHERE e.pk = ANY(%s) AND s.role = 'distilled')",
                (list(pks),),
            )

    def move(self, pks: Sequence[int], namespace: str) -> None:
        # Vectors and passages follow the pk; the keyword counters follow the namespace (triggers).
        with self.transaction():
            before = self.rows(pks)
            episodes = [(namespace, row.namespace, row.id) for row in before.values() if row.kind == "episode"]
            if episodes:  # an episode's row follows its entry (below): their link is checked at commit
                self._run("SET CONSTRAINTS episodes_namespace_entry_id_fkey DEFERRED")
            # Row-level security passes over the rows of a namespace the role may only read: refused whole.
            if self._run("UPDATE entries SET namespace = %s WHERE pk = ANY(%s)", (namespace, list(pks))) < len(before):
                raise StorageError(f"{self.path}: this database role may not write the namespace these entries are in"
                                   " (it was granted it read-only) — nothing was moved")
            # An episode's row (the experience store's) goes with its entry, or its old namespace would
            # keep listing it and the new one never would.
            for moved in episodes:
                self._run("UPDATE episodes SET namespace = %s WHERE namespace = %s AND entry_id = %s", moved)
            for pk, row in sorted(before.items(), key=lambda item: (item[1].created_at, item[0])):
                if row.kind == "turn" and row.session:
                    self._write_tokens(pk, self.index_texts([pk])[pk])
                    self._reindex_turn_after(row.namespace, row.session, row.created_at, pk)
                    self._reindex_turn_after(namespace, row.session, row.created_at, pk)

    def has_derived(self, namespace: str) -> bool:
        if self._recall_reads is not None and namespace in self._recall_reads.namespaces:
            return bool(self._told("has_derived", namespace))
        return bool(self._once_in_view(("has_derived", namespace), lambda: self.query(
            f"SELECT 1 FROM entries WHERE namespace = %s AND source = '{DERIVED_SOURCE}' LIMIT 1", (namespace,))))

    def derived_from(self, pks: Sequence[int]) -> list[int]:
        if not pks:
            return []
        # The sessions' entries first (by their index), each asked once whether it cites any of them.
        return sorted(row[0] for row in self.query(
            "WITH forgotten AS (SELECT namespace, session, id, pk FROM entries WHERE pk = ANY(%s))"
            " SELECT d.pk FROM entries d WHERE (d.namespace, d.session) IN (SELECT namespace, session FROM forgotten)"
            " AND d.kind <> 'turn' AND d.forgotten_at IS NULL AND NOT d.pk = ANY(%s)"
            " AND (d.metadata::jsonb -> 'source_turns') ?| ARRAY("
            "SELECT f.id FROM forgotten f WHERE f.namespace = d.namespace)",
            (list(pks), list(pks)),
        ))

    def citing(self, pks: Sequence[int], selection: Selection) -> list[tuple[int, int]]:
        if not pks:
            return []
        clause, params = where(selection, "d")
        return [(int(d), int(t)) for d, t in self.query(
            "WITH cited AS (SELECT pk, namespace, session, id FROM entries WHERE pk = ANY(%s))"
            " SELECT d.pk, cited.pk FROM entries d JOIN cited ON cited.namespace = d.namespace"
            " AND cited.session = d.session AND (d.metadata::jsonb -> 'source_turns') ? cited.id"
            f" WHERE d.kind <> 'turn' AND {clause}",
            [list(pks), *params],
        )]

    def rebuild_episodes(self, pks: Sequence[int]) -> None:
        self._run(
            "UPDATE consolidations c SET last_pk = 0, turns = 0 WHERE EXISTS (SELECT 1 FROM episodes ep"
            " JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
            " WHERE e.pk = ANY(%s) AND ep.namespace = c.namespace AND ep.id = c.episode_id)",
            (list(pks),),
        )

    def mark_superseded(self, pk: int, by: str | None, when: int | None) -> None:
        self._run("UPDATE entries SET superseded_by = %s, superseded_at = %s WHERE pk = %s", (by, when, pk))

    def rename(self, pk: int, entry_id: str) -> None:
        self._run("UPDATE entries SET id = %s WHERE pk = %s", (entry_id, pk))

    def replaced_by(self, namespace: str, entry_ids: Sequence[str]) -> list[tuple[int, str, str]]:
        return [(int(pk), str(entry_id), str(by)) for pk, entry_id, by in self.query(
            "SELECT pk, id, superseded_by FROM entries WHERE namespace = %s AND superseded_by = ANY(%s)"
            " AND forgotten_at IS NULL", (namespace, list(entry_ids)))]

    def set_tags(self, pk: int, tags: str) -> None:
        self._run("UPDATE entries SET tags = %s WHERE pk = %s", (tags, pk))

    def purge(self, now: int, *, namespace: str | None = None, forgotten: bool = True,
              limit: int | None = None) -> tuple[int, int]:
        with self.transaction():
            scope = "namespace = %s AND " if namespace is not None else ""
            found = self.query(
                f"SELECT pk, forgotten_at IS NOT NULL FROM entries WHERE {scope}((expires_at IS NOT NULL"
                " AND expires_at <= %s)" + (" OR forgotten_at IS NOT NULL)" if forgotten else ")")
                + ("" if limit is None else " ORDER BY pk LIMIT %s"),
                ([namespace] if namespace is not None else []) + [now] + ([] if limit is None else [limit]),
            )
            for pk, _ in found:
                self._delete_pk(pk)
        tombstones = sum(1 for _, was_forgotten in found if was_forgotten)
        return len(found) - tombstones, tombstones

    def renew_expiry(self, namespace: str, ids: Sequence[str], now: int) -> dict[str, int]:
        if not ids:
            return {}
        with self.transaction():
            renewed = self.query(
                "UPDATE entries SET expires_at = %s + ttl_ms WHERE namespace = %s AND id = ANY(%s)"
                " AND ttl_ms IS NOT NULL AND forgotten_at IS NULL AND expires_at > %s RETURNING id, expires_at",
                (now, namespace, list(ids), now),
            )
        return {entry_id: int(expires) for entry_id, expires in renewed}

    def has_expired(self, now: int) -> bool:
        return bool(self.query("SELECT 1 FROM entries WHERE expires_at IS NOT NULL AND expires_at <= %s LIMIT 1", (now,)))

    # ---- keyword-index texts --------------------------------------------------------------------------

    def _index_texts(self, rows: Sequence[Row], *, before_pk: int | None = None) -> list[str]:
        """Each row's keyword-index text; a session's first turn here has the stored turn before it
        (below ``before_pk`` when given), every session's looked up in one statement (one each was a
        round trip per session of an import's batch)."""
        firsts: dict[tuple[str, str], Row] = {}
        for row in rows:
            if row.kind == "turn" and row.session:
                firsts.setdefault((row.namespace, row.session), row)
        found = self._previous_turns(list(firsts.values()), before_pk) if firsts else {}
        return index_texts_of(rows, lambda row: found.get((row.namespace, row.session or "")))

    def _previous_turns(self, rows: Sequence[Row], before_pk: int | None) -> dict[tuple[str, str], tuple[str, str | None]]:
        """The stored turn before each of ``rows`` (turns of distinct sessions), by (namespace, session).
        Each is one walk back along its session's index: ``kind`` is tested so that no index can
        answer it (on a table not analysed yet, the planner walked every turn of the namespace
        back along entries_by_kind, 10 ms a session of an import)."""
        found = self.query(
            "SELECT w.namespace, w.session, t.content, t.role"
            " FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS w(namespace, session, created_at)"
            " CROSS JOIN LATERAL (SELECT content, role FROM entries WHERE namespace = w.namespace"
            " AND session = w.session AND (kind = 'turn') IS TRUE AND forgotten_at IS NULL"
            " AND (created_at < w.created_at OR (created_at = w.created_at AND pk < %s))"
            " ORDER BY created_at DESC, pk DESC LIMIT 1) t",
            ([row.namespace for row in rows], [row.session for row in rows], [row.created_at for row in rows],
             before_pk if before_pk is not None else 2**62))
        return {(namespace, session): (content, role) for namespace, session, content, role in found}

    def _reindex_turn_after(self, namespace: str, session: str, created_ms: int, pk: int) -> None:
        following = self.query(
            f"SELECT {COLUMNS} FROM entries e WHERE namespace = %s AND session = %s AND kind = 'turn'"
            " AND forgotten_at IS NULL AND (created_at > %s OR (created_at = %s AND pk > %s)) ORDER BY created_at, pk LIMIT 1",
            (namespace, session, created_ms, created_ms, pk),
        )
        if not following:
            return
        row = Row._make(following[0])
        self._write_tokens(int(following[0][0]), self._index_texts([row], before_pk=row.pk)[0])

    def _write_tokens(self, pk: int, text: str) -> None:
        literal, count = tsvector_literal(text)
        self._run("UPDATE entries SET tokens = %s::tsvector, token_count = %s WHERE pk = %s", (literal, count, pk))

    def index_texts(self, pks: Sequence[int]) -> dict[int, str]:
        found = self.query(f"SELECT {_TEXT_PARTS}, e.pk FROM entries e {_TURN_BEFORE} WHERE e.pk = ANY(%s)", (Pks(pks),))
        return {int(r[_TEXT_PART_COUNT]): index_text(r[:_TEXT_PART_COUNT]) for r in found}

    def will_hold(self, terms: Sequence[str]) -> None:
        """Read along, with the rows this read view reads next, which of ``terms`` each holds (its
        recall's coverage asks it next: :meth:`holding`)."""
        if self.read_view is not None:
            self._once_in_view("held terms", list)[:] = list(terms)

    def holding_along(self) -> tuple[str, list[Any]]:
        """The column (an array of booleans, of the entry ``e``) that says which of the terms
        :meth:`will_hold` was told each entry holds, and its parameters: a test of its tokens each,
        not its index text (with the turn before it) read and matched here."""
        terms = self._once_in_view("held terms", list) if self.read_view is not None else []
        return held_column(terms) if terms else ("NULL::boolean[]", [])

    def holding(self, pks: Sequence[int], terms: Sequence[str]) -> dict[int, tuple[bool, ...]]:
        """:meth:`KeywordSource.holding <harness_mem.bm25.KeywordSource.holding>`: what the rows
        this read view read came with, the others asked."""
        known: dict[int, tuple[bool, ...]] = self._once_in_view(("held", tuple(terms)), dict)
        missing = [pk for pk in pks if pk not in known]
        if missing and terms:
            column, params = held_column(terms)
            known.update((int(pk), tuple(held)) for pk, held in self.query(
                f"SELECT e.pk, {column} FROM entries e WHERE e.pk = ANY(%s)", [*params, Pks(missing)]))
        return {pk: known[pk] for pk in pks if pk in known}

    def rows_along(self, ranked: int) -> int:
        """How many of a ranking's ``ranked`` best read their rows along: inside a recall's
        snapshot, all of a ranking at most :data:`ROWS_ALONG` deep (what the recall shows next);
        else none."""
        return ranked if ranked <= ROWS_ALONG and self.read_view is not None else 0

    def saw_rows(self, found: Iterable[Sequence[Any]]) -> None:
        """Keep, for :meth:`rows` and :meth:`holding` in this read view, whole rows read along with a
        ranking (each :meth:`holding_along`'s column then the columns; all NULL where none came)."""
        rows = self._once_in_view("rows", dict)
        held = self._once_in_view(("held", tuple(self._once_in_view("held terms", list))), dict)
        for read in found:
            pk = read[1]
            if pk is not None:
                rows[int(pk)] = Row._make(read[1:])
                if read[0] is not None:
                    held[int(pk)] = tuple(read[0])

    # ---- reads -----------------------------------------------------------------------------------------

    def get(self, namespace: str, entry_id: str, now: int) -> Row | None:
        found = self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE e.namespace = %s AND e.id = %s AND e.forgotten_at IS NULL"
            " AND (e.expires_at IS NULL OR e.expires_at > %s)", (namespace, entry_id, now))
        return Row._make(found[0]) if found else None

    def get_many(self, namespace: str, entry_ids: Sequence[str], now: int) -> dict[str, Row]:
        if not entry_ids:
            return {}
        found = self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE e.namespace = %s AND e.id = ANY(%s) AND e.forgotten_at IS NULL"
            " AND (e.expires_at IS NULL OR e.expires_at > %s)", (namespace, list(entry_ids), now))
        return {row.id: row for row in map(Row._make, found)}

    def rows(self, pks: Sequence[int]) -> dict[int, Row]:
        if not pks:
            return {}
        if self.read_view is not None:
            # Inside a recall's snapshot: those its ranking read along are known; the others come
            # with the terms they hold (its coverage asks them next).
            known = self._once_in_view("rows", dict)
            missing = [pk for pk in pks if pk not in known]
            if missing:
                held, params = self.holding_along()
                self.saw_rows(self.query(f"SELECT {held}, {_COLUMNS_E} FROM entries e WHERE e.pk = ANY(%s)",
                                         [*params, Pks(missing)]))
            return {pk: known[pk] for pk in pks if pk in known}
        return {int(r[0]): Row._make(r) for r in self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE e.pk = ANY(%s)", (Pks(pks),))}

    def select(self, selection: Selection, *, limit: int | None = None, offset: int = 0,
               newest_first: bool = False, after: str | None = None) -> Iterator[Row]:
        clause, params = where(selection)
        if after is not None:
            position = self._position(selection.namespace, after)
            if position is None:
                return
            condition, bound = after_position('e', position, newest_first, '%s')
            clause, params = f"{clause} AND {condition}", [*params, *bound]
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {_COLUMNS_E} FROM entries e WHERE {clause} ORDER BY e.created_at {order}, e.pk {order}"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        if offset:
            sql += " OFFSET %s"
            params.append(offset)
        for row in self.query(sql, params):
            yield Row._make(row)

    def count(self, selection: Selection) -> int:
        clause, params = where(selection)
        return int(self.query(f"SELECT count(*) FROM entries e WHERE {clause}", params)[0][0])

    def pks(self, selection: Selection, *, entry_id: str | None = None) -> list[int]:
        clause, params = where(selection)
        if entry_id is not None:
            clause, params = f"{clause} AND e.id = %s", [*params, entry_id]
        return [int(pk) for (pk,) in self.query(f"SELECT e.pk FROM entries e WHERE {clause}", params)]

    def duplicate_of(self, namespace: str, kind: str, content_hash: str, now: int) -> str | None:
        found = self.query(
            "SELECT id FROM entries WHERE namespace = %s AND kind = %s AND content_hash = %s AND superseded_by IS NULL"
            " AND forgotten_at IS NULL AND (expires_at IS NULL OR expires_at > %s) LIMIT 1",
            (namespace, kind, content_hash, now))
        return str(found[0][0]) if found else None

    def current(self, namespace: str, entry_id: str) -> tuple[int, str | None] | None:
        found = self.query("SELECT pk, superseded_by FROM entries WHERE namespace = %s AND id = %s AND forgotten_at IS NULL",
                           (namespace, entry_id))
        return (int(found[0][0]), found[0][1]) if found else None

    def kept(self, namespace: str, *, entry_id: str | None = None, superseded_by: str | None = None) -> Row | None:
        column, value = ("id", entry_id) if entry_id is not None else ("superseded_by", superseded_by)
        found = self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE e.namespace = %s AND e.forgotten_at IS NULL AND e.{column} = %s"
            " ORDER BY e.pk LIMIT 1", (namespace, value))
        return Row._make(found[0]) if found else None

    def pk_of(self, namespace: str, entry_id: str) -> int | None:
        found = self.query("SELECT pk FROM entries WHERE namespace = %s AND id = %s", (namespace, entry_id))
        return int(found[0][0]) if found else None

    def rows_after(self, pk: int, limit: int) -> list[Row]:
        return [Row._make(r) for r in self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE e.pk > %s AND e.forgotten_at IS NULL ORDER BY e.pk LIMIT %s",
            (pk, limit))]

    def stored_vectors(self, pks: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        if not pks or not self._has_vector_table():
            return {}
        return {int(pk): np.asarray(json.loads(text), dtype=np.float32) for pk, text in self.query(
            "SELECT pk, embedding::text FROM entry_vectors WHERE pk = ANY(%s)", (list(pks),))}

    # ---- what recall asks --------------------------------------------------------------------------------

    def speakers(self, pks: Sequence[int]) -> list[tuple[int, str | None, str | None]]:
        known = self._once_in_view("speakers", dict)  # those a vector search read along in this view
        if pks and all(pk in known for pk in pks):
            return [(pk, *known[pk]) for pk in pks]
        return [(int(pk), role, session) for pk, role, session in self.query(
            "SELECT pk, role, session FROM entries WHERE pk = ANY(%s)", (Pks(pks),))]

    def saw_ranking(self, ranked: Sequence[tuple[int, float]]) -> None:
        """Keep a keyword ranking made in this read view: a vector search after it in the view
        reads the cosines of its best entries along (a hybrid recall fuses them next)."""
        if self.read_view is not None:
            self._once_in_view("keyword rankings", list).append([pk for pk, _ in ranked])

    def roles_named(self, namespace: str, words: Sequence[str]) -> list[str]:
        if self._recall_reads is not None and namespace in self._recall_reads.namespaces:
            return list(self._told("roles_named", namespace, tuple(words)))
        return [role for _, role in self.query(_ROLE_SPELLINGS, ([namespace], sorted(set(words))))]

    def nearest(self, vector: npt.NDArray[np.float32], k: int, selection: Selection, *,
                exact_order: bool = True, extra: int = 0) -> list[tuple[int, float]]:
        self.vectors_bound()
        clause, params = where(selection)
        query = HalfVector.of(vector)
        passages = self._has_passage_table()
        # The best k of each keyword ranking of this view (a hybrid recall's other candidates):
        # their cosines, windows and speakers, answered in the search's round trip.
        ranked = list(dict.fromkeys(pk for ranking in self._once_in_view("keyword rankings", list)
                                    for pk in ranking[:k]))
        # Past the k nearest, only an entry with later windows can rise into the top k (by one of
        # them): the ``extra`` are looked for only where the store keeps any windows. Without, the
        # search is read no further than the raw query's (10 rows, not 210).
        wanted_extra = ("WITH extra AS (SELECT " + ("CASE WHEN EXISTS (SELECT 1 FROM entry_passages) THEN %s ELSE 0 END"
                                                    if passages else "0 * %s") + " AS n),")
        if not selection.filters.is_empty:
            # Few rows pass the filters: every one is compared (the HNSW graph, walked under a
            # filter, misses some near neighbours; LoCoMo dev R@10 .624 against .635 exact), in the
            # statement that counts them, with what the graph's search reads along (asked apart,
            # a narrow time window's recall made 7 round trips, not 3).
            exact = (
                wanted_extra +
                f" few AS (SELECT count(*) <= {EXACT_ROWS} AS ok FROM"
                f" (SELECT 1 FROM entries e WHERE {clause} LIMIT {EXACT_ROWS + 1}) t),"
                " passing AS MATERIALIZED (SELECT v.pk, v.embedding <=> %s::halfvec AS distance, e.role, e.session"
                f" FROM entry_vectors v JOIN entries e ON e.pk = v.pk WHERE {clause} AND (SELECT ok FROM few)),"
                " placed AS MATERIALIZED ((SELECT *, row_number() OVER (ORDER BY distance, pk) AS place FROM passing"
                " ORDER BY distance, pk LIMIT %s + (SELECT n FROM extra))"
                # Too many passed: one row without an entry says so (none at all: none passed).
                " UNION ALL SELECT NULL, NULL, NULL, NULL, 0 WHERE NOT (SELECT ok FROM few)),"
                " enough AS (SELECT ok FROM few)")
            found = self._search(exact, [extra, *params, query, *params, k], query, k, passages, empty_is_answer=True,
                                 cosines_of=ranked)
            if found is not None:
                return found
        walked = max(HNSW_EF_SEARCH, min(1000, 4 * k), k + extra)
        # How many of the walk's nearest the statement reads: all it holds (the graph's first
        # ``walked``), or, where the recall's namespaces hold nearly every vector, what it needs (k,
        # and the ``extra`` where any entry keeps windows) and a quarter more for those the filters
        # leave out, 4k at least. The fewer, the less a scan of every vector sorts (at 20,000
        # entries the plan the planner picks, as for the raw query: 420 kept cost 0.45 ms more than
        # 10). Where they are not enough, the statement finds out and the graph is walked on
        # (below): the same hits either way.
        reads, read = self._recall_reads, walked
        if reads is not None and reads.hold_the_vectors():
            wanted = k + (extra if reads.passages else 0)
            read = min(walked, max(min(1000, 4 * k), wanted + max(k, wanted // 4)))
        # Past the k-th, only an entry with later windows can rise into the k, by one of them. Where
        # the namespaces hold nearly every vector, the ``extra`` weighed are the ``extra`` the walk
        # holds next, passing the filters or not, and only one whose window rises is looked up
        # under them (looking each up cost 0.4 ms at 20,000 entries, 1.5 at 200,000): fewer are
        # weighed only by those the filters leave out (at most a tenth another namespace's, and the
        # superseded or expired). Elsewhere most of the walk is another's, and the ``extra`` are
        # the next that pass, each looked up (all in "first", as far as the k and the ``extra``).
        lazy = read < walked
        first_n, tail_n = ("%s", "(SELECT n FROM extra)") if lazy else ("%s + (SELECT n FROM extra)", "0")
        # The graph is walked in a statement of its own (the vectors' table alone, ordered by distance,
        # which the planner answers by the HNSW index), and the filters then meet its nearest
        # ``read``. Joined to the entries in one scan, the planner chose to compare every vector:
        # the filters' columns keep no statistics (migration 0011), so it took them for selective
        # (220 ms at 20,000 entries against 25 ms for the graph). relaxed_order: the scan may give
        # rows slightly out of order; the queries after it sort them. Where the statement reads no
        # more of the walk than it needs, it sorts that again with the pks, and the filters meet it
        # in order and stop once k pass (a sort of their own read it in groups of 32); the whole
        # walk is not sorted so (600 rows and their vectors read, where the filters need ~32).
        walk = (
            wanted_extra +
            # The distance is computed once a vector: ordered by its name, not by the expression
            # again with its own parameter (which the server computed a second time: 41 ms against
            # the raw query's 20 ms for the 20,000 vectors of a scan).
            # How far the walk goes is written into the statement, not a parameter: planned once
            # (see snapshot), the plan picks the graph or a scan of every vector by it.
            " nearest AS MATERIALIZED (SELECT * FROM (SELECT pk, embedding <=> %s::halfvec AS distance FROM entry_vectors"
            f" ORDER BY distance LIMIT {int(read)}) w{' ORDER BY distance, pk' if lazy else ''}),"
            # The first that pass the filters, each candidate looked up by its pk along the walk
            # until enough passed (LIMIT 1 keeps it a lookup: as a join the planner merged it with
            # every entry, 45 ms at 20,000), its speaker read there.
            " first AS MATERIALIZED (SELECT n.pk, n.distance, ok.role, ok.session,"
            " row_number() OVER (ORDER BY n.distance, n.pk) AS place FROM nearest n"
            f" CROSS JOIN LATERAL (SELECT e.role, e.session FROM entries e WHERE e.pk = n.pk AND {clause} LIMIT 1) ok"
            f" ORDER BY n.distance, n.pk LIMIT {first_n}),"
            " tail AS MATERIALIZED (SELECT n.pk, n.distance FROM nearest n"
            " WHERE (n.distance, n.pk) > (SELECT distance, pk FROM first ORDER BY place DESC LIMIT 1)"
            f" ORDER BY n.distance, n.pk LIMIT {tail_n}),"
            " considered AS (SELECT pk FROM first UNION ALL SELECT pk FROM tail),"
            # Whether the walk held what was wanted, or saw every vector (counted only then: a count
            # reads the walk to its end, 13 ms more at 200,000).
            f" enough AS (SELECT CASE WHEN (SELECT count(*) FROM first) >= {first_n}"
            f" AND (SELECT count(*) FROM tail) >= {tail_n} THEN true"
            f" ELSE (SELECT count(*) FROM nearest) < {int(read)} END AS ok)")
        # Past the k-th, what rose by a window and passes the filters.
        risen = (
            " placed AS MATERIALIZED (SELECT * FROM first UNION ALL SELECT t.pk, t.distance, ok.role, ok.session,"
            " %s + row_number() OVER (ORDER BY t.distance, t.pk) FROM tail t JOIN best w ON w.pk = t.pk"
            f" CROSS JOIN LATERAL (SELECT e.role, e.session FROM entries e WHERE e.pk = t.pk AND {clause} LIMIT 1) ok"
            " WHERE w.weighed <= (SELECT distance FROM first WHERE place = %s) + 1e-9)")
        with self._graph_walk(walked):
            known = self._once_in_view(("cosines", query), dict)  # read with a comparison the filters cut short
            found = self._search(walk, [extra, query, *params, k, k], query, k, passages, empty_is_answer=False,
                                 cosines_of=[pk for pk in ranked if pk not in known], placed=(risen, [k, *params, k]))
        if found is not None:
            return found
        # The filters left fewer than wanted of those: the graph is walked on under them.
        rows = self.query(
            "WITH nearest AS MATERIALIZED (SELECT v.pk, v.embedding <=> %s::halfvec AS distance"
            f" FROM entry_vectors v JOIN entries e ON e.pk = v.pk WHERE {clause}"
            " ORDER BY distance LIMIT %s) SELECT pk, distance FROM nearest ORDER BY distance, pk",
            [query, *params, k + extra])
        return [(int(pk), 1.0 - float(distance)) for pk, distance in rows]

    def _search(self, ranked_by: str, params: list[Any], query: HalfVector, k: int, passages: bool, *,
                empty_is_answer: bool, cosines_of: Sequence[int] = (),
                placed: tuple[str, list[Any]] | None = None) -> list[tuple[int, float]] | None:
        """A vector search (for ``query``) whose CTEs (``ranked_by``, taking ``params``) give
        ``placed`` (pk, distance, role, session, place: the nearest that pass the filters, in order)
        and ``enough`` (ok: whether they are the answer), or, where ``placed`` is given (a CTE and
        its parameters), ``considered`` (the pks whose windows are read) for it to place them by
        their windows (``best``); with what a recall reads next along: each
        one's later windows (where the store keeps any), the rows of the nearest
        :meth:`rows_along`, the keyword lanes' counts (the hits' coverage weighs them); and the
        cosines of ``cosines_of`` and the frequencies a keyword lane will ask (:meth:`counting_along`)
        in the same round trip. None when the search is not the answer
        (nor, unless ``empty_is_answer``, when it found nothing)."""
        windowed = "considered" if placed is not None else "placed"
        best = best_windows(f"ARRAY(SELECT pk FROM {windowed} ORDER BY pk)") if passages else _NO_WINDOWS
        along = self.rows_along(k)
        counters = [*self.keywords.counters, *self.derived_keywords.counters]
        placing, placing_params = placed if placed is not None else ("", [])
        held, held_params = self.holding_along()
        search = (
            ranked_by +
            f", best AS MATERIALIZED ({best})" + (f",{placing}" if placing else "") +
            # The nearest ``along`` read whole, apart: a condition on each row's place, put in a
            # LATERAL read, was checked after it (every candidate read, 17-32 ms at 200,000).
            f", shown AS MATERIALIZED (SELECT {held}, {_COLUMNS_E} FROM"
            " (SELECT pk FROM placed ORDER BY distance, pk LIMIT %s) s JOIN entries e ON e.pk = s.pk)"
            " SELECT x.pk, x.distance, x.role, x.session, (SELECT ok FROM enough),"
            " (SELECT ARRAY[" + ", ".join(["coalesce(sum(value) FILTER (WHERE key = %s), 0)"] * 4) + "]"
            " FROM namespace_state WHERE key = ANY(%s)),"
            f" {_WINDOW}, r.*"
            " FROM placed x LEFT JOIN best w ON w.pk = x.pk LEFT JOIN shown r ON r.pk = x.pk"
            # Past the k-th, an entry whose best window does not reach the k-th's first cannot rise
            # into the k (each of those scores at least its first): not sent.
            " WHERE x.place <= %s OR w.weighed <= (SELECT distance FROM placed WHERE place = %s) + 1e-9"
            " ORDER BY x.distance, x.pk",
            [*params, *([query] if passages else []), *placing_params, *held_params, along, *counters, counters, k, k])
        pending = self.counting_along()
        counting, pending[:] = list(pending), []  # counted here, once
        found, *beside = self.query_together(
            search, *([self._cosines_statement(query, cosines_of)] if cosines_of else []),
            *(lane.frequencies_statement(terms) for lane, terms in counting))
        if cosines_of:
            self._saw_cosines(query, beside.pop(0))
        if not found:
            return [] if empty_is_answer else None
        if not found[0][4]:
            return None
        self._once_in_view("speakers", dict).update((pk, (role, session)) for pk, _, role, session, *_ in found)
        self._saw_passages(query, ((read[0], *read[6:10]) for read in found))
        self.saw_rows(read[10:] for read in found)
        self._saw_counts(found[0][5])
        for (lane, terms), counts in zip(counting, beside, strict=True):
            lane.saw_frequencies(terms, counts[0])
        return [(int(pk), 1.0 - float(distance)) for pk, distance, *_ in found]

    def counting_along(self) -> list[tuple[PostgresKeywords, list[str]]]:
        """The terms whose frequencies the keyword lanes will ask in this read view, to be counted
        with its next search (see :meth:`PostgresKeywords.will_count`)."""
        return self._once_in_view("frequencies along", list)  # type: ignore[no-any-return]

    def _saw_counts(self, counts: Sequence[Any]) -> None:
        """Keep, for the keyword lanes in this read view, their counts a vector search read along
        (rows and tokens of each), where no ranking counted them already."""
        for lane, (rows, tokens) in ((self.keywords, counts[:2]), (self.derived_keywords, counts[2:])):
            if lane.recalled() is None:
                lane.remember(int(rows), int(tokens) / int(rows) if rows else 0.0, {})

    @contextmanager
    def _graph_walk(self, size: int) -> Iterator[None]:
        """HNSW searches keeping ``size`` candidates inside the block (the connection's own setting
        when that is its size: no statement sent)."""
        if size == HNSW_EF_SEARCH:
            yield
            return
        self._run(f"SET hnsw.ef_search = {int(size)}")
        try:
            yield
        finally:
            self._run(f"SET hnsw.ef_search = {HNSW_EF_SEARCH}")

    def cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, float]:
        if not pks or not self._has_vector_table():
            return {}
        query = HalfVector.of(vector)
        if self.read_view is None:
            return {int(pk): 1.0 - float(d) for pk, d in self.query(
                "SELECT pk, embedding <=> %s::halfvec FROM entry_vectors WHERE pk = ANY(%s)", (query, Pks(pks)))}
        # Inside a recall's snapshot: those a vector search read along are known; the others'
        # later windows and speakers come along (recall reads them next).
        known = self._once_in_view(("cosines", query), dict)
        missing = [pk for pk in pks if pk not in known]
        if missing:
            self._saw_cosines(query, self.query(*self._cosines_statement(query, missing)))
        return {pk: 1.0 - known[pk] for pk in pks if known.get(pk) is not None}

    def _cosines_statement(self, query: HalfVector, pks: Sequence[int]) -> tuple[str, list[Any]]:
        """The cosine distance of each entry to ``query`` (NULL: it has no vector), its later
        windows and its speaker."""
        if not self._has_passage_table():
            return (f"SELECT e.pk, v.embedding <=> %s::halfvec, {_NO_WINDOW}, e.role, e.session FROM entries e"
                    " LEFT JOIN entry_vectors v ON v.pk = e.pk WHERE e.pk = ANY(%s)", [query, Pks(pks)])
        return (f"WITH best AS MATERIALIZED ({best_windows('%s::bigint[]')})"
                f" SELECT e.pk, v.embedding <=> %s::halfvec, {_WINDOW}, e.role, e.session FROM entries e"
                " LEFT JOIN entry_vectors v ON v.pk = e.pk LEFT JOIN best w ON w.pk = e.pk WHERE e.pk = ANY(%s)",
                [query, Pks(pks), query, Pks(pks)])

    def _saw_cosines(self, query: HalfVector, found: Sequence[tuple[Any, ...]]) -> None:
        """Keep, in this read view, what :meth:`_cosines_statement` read."""
        self._once_in_view(("cosines", query), dict).update((int(pk), d) for pk, d, *_ in found)
        self._once_in_view("speakers", dict).update((int(pk), (role, session)) for pk, *_, role, session in found)
        self._saw_passages(query, ((pk, *window) for pk, distance, *window, _, _ in found if distance is not None))

    def _saw_passages(self, query: HalfVector, found: Iterable[tuple[Any, ...]]) -> None:
        """Keep, for :meth:`passage_cosines` in this read view, each entry's best window read along
        (pk, then :func:`best_windows`' start, stop, distance and sentence, NULL where it has none):
        what best-of makes of all of them."""
        known = self._once_in_view(("passages", query), dict)
        for pk, start, stop, distance, sentence in found:
            known[int(pk)] = [] if start is None else [Scored(int(start), int(stop), bool(sentence), 1.0 - float(distance))]

    def passage_cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, list[Scored]]:
        if not pks or not self._has_vector_table() or not self._has_passage_table():
            return {}
        query = HalfVector.of(vector)
        known = self._once_in_view(("passages", query), dict)  # those a search read along in this view
        missing = [pk for pk in pks if pk not in known]
        if missing:
            known.update((pk, []) for pk in missing)
            for pk, start, stop, distance, sentence in self.query(
                    "SELECT pk, start, stop, embedding <=> %s::halfvec, sentence FROM entry_passages"
                    " WHERE pk = ANY(%s) ORDER BY pk, start", (query, Pks(missing))):
                known[int(pk)].append(Scored(int(start), int(stop), bool(sentence), 1.0 - float(distance)))
        return {pk: known[pk] for pk in pks if known[pk]}

    def passages(self, pks: Sequence[int]) -> dict[int, list[Passage]]:
        found: dict[int, list[Passage]] = {}
        if not pks or not self._has_vector_table() or not self._has_passage_table():
            return found
        rows = self.query("SELECT pk, start, stop, halfvec_send(embedding), sentence FROM entry_passages"
                          " WHERE pk = ANY(%s) ORDER BY pk, start", (list(pks),))
        for (pk, *_), passage in zip(rows, _passages([row[1:] for row in rows]), strict=True):
            found.setdefault(int(pk), []).append(passage)
        return found

    def vector_counts(self) -> VectorCounts:
        bound = self.vectors_bound(writing=False)
        total, vectors = self._told("counts") if self._recall_reads is not None else self._live_and_embedded()
        return VectorCounts(bound, total, total - vectors if bound else total)

    def missing_vectors(self) -> int:
        total, vectors = self._live_and_embedded()
        return total - vectors

    def _live_and_embedded(self) -> tuple[int, int]:
        """Entries not forgotten, and those of them with a vector, in the namespaces this role may
        read: from the counters the triggers keep (0014, 0015), no entry read. A vector belongs to a
        live entry (forgetting drops it), so the difference is what ``reindex`` would embed."""
        live, vectors = self.query(LIVE_AND_EMBEDDED)[0]
        return int(live), int(vectors) if self._has_vector_table() else 0

    # ---- sessions ------------------------------------------------------------------------------------------

    def neighbours(self, namespace: str, session: str, created_ms: int, pk: int, n: int, *,
                   include_superseded: bool = False) -> tuple[list[Row], list[Row]]:
        shown = _KEPT if include_superseded else _CURRENT
        condition = f"{_IN_SESSION} AND {shown}"
        params = (namespace, session, created_ms, created_ms, pk, n)
        before = self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE {condition} AND (e.created_at < %s OR (e.created_at = %s AND e.pk < %s))"
            " ORDER BY e.created_at DESC, e.pk DESC LIMIT %s", params)
        after = self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE {condition} AND (e.created_at > %s OR (e.created_at = %s AND e.pk > %s))"
            " ORDER BY e.created_at, e.pk LIMIT %s", params)
        return [Row._make(r) for r in reversed(before)], [Row._make(r) for r in after]

    def still_there(self, namespace: str, ids: Sequence[str], *, include_superseded: bool = False) -> set[str]:
        shown = _KEPT if include_superseded else _CURRENT
        return {r[0] for r in self.query(
            f"SELECT e.id FROM entries e WHERE e.namespace = %s AND e.id = ANY(%s) AND e.session IS NOT NULL AND {shown}",
            (namespace, list(ids)))}

    def session_span(self, namespace: str, session: str, *, include_superseded: bool = False) -> SessionSpan:
        shown = _KEPT if include_superseded else _CURRENT
        turns, started, ended = self.query(
            f"SELECT count(*), min(e.created_at), max(e.created_at) FROM entries e WHERE {_IN_SESSION} AND {shown}",
            (namespace, session))[0]
        return SessionSpan(session, int(turns), started, ended)

    def bookends(self, namespace: str, session: str, *, include_superseded: bool = False) -> tuple[Row, Row]:
        shown = _KEPT if include_superseded else _CURRENT
        first, last = (self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE {_IN_SESSION} AND {shown}"
            f" ORDER BY e.created_at {order}, e.pk {order} LIMIT 1", (namespace, session))[0] for order in ("ASC", "DESC"))
        return Row._make(first), Row._make(last)

    def sessions(self, namespace: str, limit: int, offset: int, after: str | None = None) -> list[SessionSpan]:
        params: list[Any] = [namespace]
        cursor = ""
        if after is not None:
            position = self._session_position(namespace, after)
            if position is None:
                return []
            condition, bound = after_position('e', position, True, '%s')
            cursor, params = f" AND {condition}", [*params, *bound]
        return [SessionSpan(s, int(n), a, b) for s, n, a, b in self.query(
            # Newest entries first, each kept when it is its session's latest; then those sessions' sizes.
            "WITH latest AS MATERIALIZED (SELECT e.session, e.created_at, e.pk FROM entries e"
            f" WHERE e.namespace = %s AND e.session IS NOT NULL AND {_TRANSCRIPT} AND {_CURRENT}{cursor}"
            f" AND NOT EXISTS ({_LATER_IN_SESSION}) ORDER BY e.created_at DESC, e.pk DESC LIMIT %s OFFSET %s)"
            " SELECT l.session, count(*), min(e.created_at), max(e.created_at) FROM latest l JOIN entries e"
            f" ON e.namespace = %s AND e.session = l.session AND {_TRANSCRIPT} AND {_CURRENT}"
            " GROUP BY l.session, l.created_at, l.pk ORDER BY l.created_at DESC, l.pk DESC",
            (*params, limit, offset, namespace))]

    def session_rows(self, namespace: str, session: str, offset: int, limit: int,
                     after: str | None = None) -> list[Row]:
        params: list[Any] = [namespace, session]
        cursor = ""
        if after is not None:
            position = self._position(namespace, after)
            if position is None:
                return []
            condition, bound = after_position('e', position, False, '%s')
            cursor, params = f" AND {condition}", [*params, *bound]
        return [Row._make(r) for r in self.query(
            f"SELECT {_COLUMNS_E} FROM entries e WHERE {_IN_SESSION} AND {_CURRENT}{cursor}"
            " ORDER BY e.created_at, e.pk LIMIT %s OFFSET %s", (*params, limit, offset))]

    def _position(self, namespace: str, entry_id: str) -> Position | None:
        """Where an entry stands in a list by time (forgotten or not: a page may start after one)."""
        found = self.query("SELECT created_at, pk FROM entries WHERE namespace = %s AND id = %s", (namespace, entry_id))
        return (int(found[0][0]), int(found[0][1])) if found else None

    def _session_position(self, namespace: str, session: str) -> Position | None:
        """Where a session stands in the list of sessions: its latest current transcript entry."""
        found = self.query(f"SELECT e.created_at, e.pk FROM entries e WHERE {_IN_SESSION} AND {_CURRENT}"
                           " ORDER BY e.created_at DESC, e.pk DESC LIMIT 1", (namespace, session))
        return (int(found[0][0]), int(found[0][1])) if found else None

    # ---- rebuilding, counting, collecting --------------------------------------------------------------------

    def rebuild_keyword_index(self) -> tuple[int, int]:
        # A batch of entries per transaction, in pk order: one transaction over the whole table held
        # the write lock for all of it, and every writer waited. Then the counters BM25 reads are
        # counted again, which mends any drift.
        after, indexed = 0, 0
        while True:
            with self.transaction():
                found = self.query("SELECT pk, forgotten_at IS NULL FROM entries WHERE pk > %s"
                                   " ORDER BY pk LIMIT %s", (after, KEYWORD_BATCH))
                if not found:
                    break
                texts = self.index_texts([int(pk) for pk, live in found if live])
                written = {pk: tsvector_literal(text) for pk, text in texts.items()}
                with self.conn.cursor() as cursor:
                    cursor.executemany("UPDATE entries SET tokens = %s::tsvector, token_count = %s WHERE pk = %s",
                                       [(literal, count, pk) for pk, (literal, count) in written.items()])
                    gone = [int(pk) for pk, live in found if not live]
                    cursor.execute("UPDATE entries SET tokens = NULL, token_count = NULL WHERE pk = ANY(%s)", (gone,))
            after, indexed = int(found[-1][0]), indexed + len(written)
            if len(found) < KEYWORD_BATCH:
                break
        with self.transaction():  # the write lock: no writer is half-way, so the counts are exact
            if self.confined_to is None:  # the owner's to write; a confined role's follow its rows
                self._recount_keywords()
            total = int(self.query("SELECT count(*) FROM entries")[0][0])
        return total, indexed

    def _recount_keywords(self) -> None:
        self._run("DELETE FROM namespace_state WHERE key LIKE 'keywords.%%'")
        for lane in (self.keywords, self.derived_keywords):
            rows_key, tokens_key = lane.counters
            self._run("INSERT INTO namespace_state (namespace, key, value)"
                      " SELECT namespace, %s, count(*) FROM entries"
                      f" WHERE tokens IS NOT NULL AND {lane.lane} GROUP BY namespace"
                      " UNION ALL SELECT namespace, %s, coalesce(sum(token_count), 0) FROM entries"
                      f" WHERE tokens IS NOT NULL AND {lane.lane} GROUP BY namespace", (rows_key, tokens_key))
        self._run("SELECT recount_words()")

    def drop_vectors(self) -> int:
        with self.transaction():
            dropped = int(self.query("SELECT count(*) FROM entry_vectors")[0][0]) if self._has_vector_table() else 0
            self._run("DROP TABLE IF EXISTS entry_passages")
            self._run("SELECT drop_vector_counts()")
            self._run("DROP TABLE IF EXISTS entry_vectors")
            self._passage_table = None
            self._run("DELETE FROM settings WHERE key LIKE 'embedder.%%'")
        self._bound = False
        return dropped

    def embed_missing(self, batch_size: int) -> tuple[int, int]:
        self.vectors_bound()
        assert self.embedder is not None
        found = self.query(
            "SELECT e.pk, e.content, e.role, e.kind FROM entries e WHERE e.forgotten_at IS NULL"
            " AND NOT EXISTS (SELECT 1 FROM entry_vectors v WHERE v.pk = e.pk) ORDER BY e.pk LIMIT %s", (batch_size,))
        if not found:
            return 0, 0
        embedded = embed_entries(self.embedder, [(content, role, kind) for _, content, role, kind in found])  # outside the write lock
        with self.transaction():
            # Only the entries still as they were read get their vector.
            current = {int(pk): (content, role) for pk, content, role in self.query(
                "SELECT e.pk, e.content, e.role FROM entries e WHERE e.pk = ANY(%s) AND e.forgotten_at IS NULL"
                " AND NOT EXISTS (SELECT 1 FROM entry_vectors v WHERE v.pk = e.pk)", ([r[0] for r in found],))}
            keep = [i for i, (pk, content, role, _) in enumerate(found) if current.get(int(pk)) == (content, role)]
            self._insert_vectors([int(found[i][0]) for i in keep], [embedded[i] for i in keep])
        return len(found), len(keep)

    def count_all(self) -> int:
        # The counters of every row (0014), forgotten and expired ones too: no entry read.
        return int(self.query("SELECT coalesce(sum(value), 0) FROM namespace_state WHERE key LIKE 'entries:%%'")[0][0])

    def kept_counts(self) -> list[tuple[str, str, int]]:
        # namespace_state's policy shows a confined role its namespaces' counters alone.
        return [(namespace, group, int(n)) for namespace, group, n in self.query(
            "SELECT namespace, substr(key, 9), value FROM namespace_state WHERE key LIKE 'entries:%%' AND value <> 0")]

    def expired_groups(self, now: int) -> list[tuple[str, str, str | None, str | None, bool, int]]:
        return [(namespace, kind, role, redactions, bool(forgotten), int(n))
                for namespace, kind, role, redactions, forgotten, n in self.query(
            "SELECT namespace, kind, role, redactions, forgotten_at IS NOT NULL, count(*) FROM entries"
            " WHERE expires_at <= %s GROUP BY 1, 2, 3, 4, 5", (now,))]

    def session_count(self, namespace: str, now: int) -> int:
        return int(self.query(f"SELECT count(DISTINCT session) FROM entries WHERE {_LIVE}", (namespace, now))[0][0])

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.query("SELECT DISTINCT namespace FROM entries ORDER BY 1")]

    def schema_version(self) -> int:
        return max(self._applied(), default=0)

    def migration_status(self) -> list[MigrationStatus]:
        """This engine's own set (``migrations/postgres``), recorded under harness_mem's name."""
        shipped = {int(p.name[:4]): p.stem for p in _migrations_dir().glob("[0-9][0-9][0-9][0-9]_*.sql")}
        recorded: dict[int, tuple[str, str]] = {}
        if self.query("SELECT to_regclass('_migrations') IS NOT NULL")[0][0]:
            recorded = {int(n): (name, when) for n, name, when in self.query("SELECT number, name, applied_at FROM _migrations")}
        return [MigrationStatus("harness_mem", number, recorded.get(number, (shipped.get(number, ""), ""))[0],
                                recorded[number][1] if number in recorded else None, known=number in shipped)
                for number in sorted(set(shipped) | set(recorded))]

    def largest_sessions(self, namespace: str, now: int, limit: int) -> list[tuple[str, int, int]]:
        return [(s, int(n), int(b or 0)) for s, n, b in self.query(
            f"SELECT session, count(*), sum(octet_length(content)) FROM entries WHERE {_LIVE} AND session IS NOT NULL"
            " GROUP BY session ORDER BY 2 DESC, 1 LIMIT %s", (namespace, now, limit))]

    def _relations(self) -> list[tuple[str, int, int]]:
        """(table, rows estimate, bytes with its indexes and TOAST) of this store's tables. A table a
        gc's rewrite drops meanwhile has no size any more (NULL): it is left out."""
        return [(name, int(rows), int(size)) for name, rows, size in self.query(
            "SELECT c.relname, greatest(c.reltuples, 0)::bigint, pg_total_relation_size(c.oid) FROM pg_class c"
            " WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace ORDER BY 3 DESC, 1")
            if size is not None]

    def size_bytes(self) -> int:
        return sum(size for _, _, size in self._relations())

    def sizes(self) -> dict[str, Any]:
        page = 8192
        parts: list[dict[str, Any]] = [{"name": name, "kind": "table", "table": name, "pages": size // page, "bytes": size}
                 for name, _, size in self._relations()]
        total = sum(p["bytes"] for p in parts)
        return {"source": "pages", "page_size": page, "pages": total // page, "free_pages": 0,
                "file_bytes": total, "parts": parts}

    def table_sizes(self) -> dict[str, Any]:
        sizes = self.sizes()
        by_table = {name: {"rows": int(self.query(f'SELECT count(*) FROM "{name}"')[0][0]), "bytes": size}
                    for name, _, size in self._relations()}
        return {"source": "pg_total_relation_size", "page_size": sizes["page_size"], "pages": sizes["pages"],
                "free_pages": 0, "file_bytes": sizes["file_bytes"], "by_table": by_table}

    def integrity_check(self) -> list[str]:
        problems = []
        unindexed = int(self.query("SELECT count(*) FROM entries WHERE forgotten_at IS NULL AND tokens IS NULL")[0][0])
        if unindexed:
            problems.append(f"no keyword row for {counted(unindexed, 'entry', 'entries')} — run `harness-mem reindex`")
        if self._has_vector_table():
            stray = int(self.query("SELECT count(*) FROM entry_vectors v JOIN entries e ON e.pk = v.pk"
                                   " WHERE e.forgotten_at IS NOT NULL")[0][0])
            if stray:
                problems.append(f"{stray} forgotten entries still have a vector")
        return problems

    def engine_checks(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("postgresql", lambda: str(self.query("SHOW server_version")[0][0])),
            ("pgvector", lambda: str(self.query("SELECT extversion FROM pg_extension WHERE extname = 'vector'")[0][0])),
            ("full text", lambda: f"{counted(self.keywords.stats()[0], 'row')} indexed"
                                  f" (and {counted(self.derived_keywords.stats()[0], 'derived row')})"),
            ("write-ahead log", self._describe_log),
        ]

    def _describe_log(self) -> str:
        """Where purged text may still be: the server's log, kept as its settings say."""
        archive, keep = (str(self.query(f"SHOW {name}")[0][0]) for name in ("archive_mode", "wal_keep_size"))
        slots = int(self.query("SELECT count(*) FROM pg_replication_slots")[0][0])
        return (f"archive_mode {archive}, wal_keep_size {keep}, {counted(slots, 'replication slot')}:"
                f" {LOG_REMAINS}")

    def describe_schema(self) -> str:
        missing = [t for t in ("entries", "settings", "_migrations")
                   if not self.query("SELECT to_regclass(%s) IS NOT NULL", (t,))[0][0]]
        if missing:
            raise StorageError(f"missing {', '.join(missing)} — the database was changed outside harness-mem")
        return f"{self.schema_version():04d}, all migrations applied; entries {self.count_all()}"

    def merge_keyword_index(self) -> None:
        self._run("SELECT gin_clean_pending_list('entries_tokens'::regclass)")

    def rewrite(self) -> None:
        # Each table holding entries' text (their words' counts too), their vectors, episodes or
        # sealed names goes into new files, in steps beside writers (postgres_rewrite); settings, a
        # handful of rows, is rewritten whole in a moment.
        for table in ("entries", "word_counts", "episodes", "identities",
                      *(["entry_vectors"] if self._has_vector_table() else []),
                      *(["entry_passages"] if self._has_passage_table() else [])):
            postgres_rewrite.rewrite_table(self.conn, self.transaction, table)
        self._run("VACUUM FULL settings")

    def compact(self, *, rewrite: bool, vacuum: bool) -> dict[str, Any]:
        if rewrite or vacuum:
            self.rewrite()
        else:
            self._run("VACUUM entries")
        return {"auto_vacuum": "autovacuum", "vacuum": "tables" if rewrite or vacuum else "plain",
                "free_pages_before": 0, "free_pages_after": 0, "wal_truncated": self.truncate_log(),
                "log_remains": LOG_REMAINS}

    def truncate_log(self) -> bool:
        try:
            self._run("CHECKPOINT")
            return True
        except StorageError:  # needs pg_checkpoint (or superuser): the server's own checkpoints do it later
            return False

