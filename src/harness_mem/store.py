"""``MemoryStore``: the facade over one SQLite file.

Canonical rows live in ``entries``; the keyword index (``entries_fts``) is derived from them and is
written and deleted in the same transaction, so a crash can never leave an entry half-indexed.
Every write takes the lock up front (``BEGIN IMMEDIATE``), so several processes can share a file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from . import fusion, keyword, migrations
from .db import Connection, connect, default_path, driver, sqlite_version, write_transaction
from .errors import (
    BlockedError,
    DuplicateIdError,
    EmbedderError,
    HarnessMemError,
    InvalidInputError,
    NotFoundError,
    StorageError,
)
from .filters import Filters, make_filters
from .models import Entry, Hit, now_ms
from .protocols import Embedder
from .providers.embeddings import INSTALL_HINT, default_embedder
from .redaction import Redactor
from .rows import COLUMNS, PLACEHOLDERS, Row, entry_from_row, prepare_row
from .vectors import VectorIndex, bump_generation, embedding_text, has_vector_table, missing_vectors

OnConflict = Literal["error", "ignore", "replace"]
Mode = Literal["keyword", "semantic", "hybrid"]

DEFAULT_BATCH_SIZE = 500
BULK_BATCH_SIZE = 5000  # imports: fewer, larger transactions (each commit also flushes an FTS5 segment)
MAX_BATCH_CHARS = 32_000_000  # a batch is held in memory until written: bound its text, not only its count
QUERY_CACHE_SIZE = 256

_DAY_MS = 86_400_000


class MemoryStore:
    """Memory entries in one SQLite file: add, recall, get, delete, list.

    Opening a store creates the file if needed and applies pending migrations::

        with MemoryStore("agent.db") as store:
            store.add("we chose argon2id for password hashing", tags=["decision"])
            hits = store.recall("password hashing decision")

    :param path: the database file (``":memory:"`` for a throwaway store); defaults to
        ``$HARNESS_MEM_DB`` or ``memory.db`` in the user's data directory.
    :param namespace: the tenant every read and write is confined to.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        namespace: str = "default",
        embedder: Embedder | Literal["auto"] | None = "auto",
        redactor: Redactor | Literal["default"] | None = "default",
    ) -> None:
        if not namespace or not isinstance(namespace, str):
            raise InvalidInputError("namespace must be a non-empty string")
        if path is None:
            path = default_path()
        self.path: Path | str = ":memory:" if str(path) == ":memory:" else Path(path)
        self.namespace = namespace
        # "auto": the built-in model when its packages are installed. It loads on first use, so
        # opening a store and keyword recall never pay for it.
        self.embedder: Embedder | None = default_embedder() if embedder == "auto" else embedder
        self._vectors: VectorIndex | None = None
        self._vectors_touched = False
        self._vectors_complete = False  # checked once, on the first semantic query
        self._query_vectors: OrderedDict[str, npt.NDArray[np.float32]] = OrderedDict()
        self.conn: Connection = connect(self.path)
        try:
            migrations.migrate(self.conn)
            # Nothing unredacted reaches the file unless the caller says so (redactor=None), and
            # then every entry written records that it was not redacted.
            self.redactor: Redactor | None = (
                Redactor.default(secret=self._redaction_secret()) if redactor == "default" else redactor
            )
        except BaseException:
            self.conn.close()
            raise

    def _redaction_secret(self) -> str:
        """This file's key for HASH pseudonyms (made once, on first open)."""
        row = self.conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchone()
        if row is None:
            with write_transaction(self.conn):
                self.conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES ('redaction.secret', ?)",
                                  (secrets.token_hex(32),))
            row = self.conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchone()
        return str(row[0])

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<MemoryStore {str(self.path)!r} namespace={self.namespace!r}>"

    # ---- writes ------------------------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        kind: str | None = None,
        role: str | None = None,
        session: str | None = None,
        tags: Iterable[str] = (),
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        created_at: str | datetime | None = None,
        expires_at: str | datetime | None = None,
        ttl_days: float | None = None,
        on_conflict: OnConflict = "error",
    ) -> Entry:
        """Store one entry and return it as stored.

        ``kind`` defaults to ``"turn"`` when a role is given, else ``"note"``. ``id`` defaults to a
        new sortable id; an id that already exists raises :class:`DuplicateIdError` unless
        ``on_conflict`` is ``"ignore"`` (keep the old entry) or ``"replace"``.
        """
        item = dict(
            content=content, kind=kind, role=role, session=session, tags=tags, source=source,
            metadata=metadata, id=id, created_at=created_at, expires_at=expires_at, ttl_days=ttl_days,
        )
        stored = self.add_many([item], on_conflict=on_conflict)
        if stored:
            return stored[0]
        return self.get(item["id"])  # type: ignore[arg-type]  # ignored: the existing entry

    def add_many(
        self,
        items: Iterable[Mapping[str, Any] | Entry],
        *,
        on_conflict: OnConflict = "error",
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_invalid: Callable[[int, HarnessMemError], None] | None = None,
    ) -> list[Entry]:
        """Store many entries, one transaction per ``batch_size`` (or per 32M characters); returns those written.

        Each item is an :class:`Entry` or a mapping with the keyword arguments of :meth:`add`
        (``content`` or ``text``). A bad item raises before its batch is written, unless
        ``on_invalid(index, error)`` is given: then it is reported there and skipped.
        """
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be at least 1, not {batch_size!r}")
        written: list[Row] = []
        batch: list[Row] = []
        chars = 0
        for index, item in enumerate(items):
            try:
                row = prepare_row(item, namespace=self.namespace, redactor=self.redactor)
            except (InvalidInputError, BlockedError) as exc:
                if on_invalid is None:
                    raise
                on_invalid(index, exc)
                continue
            batch.append(row)
            chars += len(row.content)
            if len(batch) >= batch_size or chars >= MAX_BATCH_CHARS:
                written += self._write(batch, on_conflict)
                batch, chars = [], 0
        if batch:
            written += self._write(batch, on_conflict)
        return [entry_from_row(row) for row in written]

    def add_prepared(self, rows: Sequence[Row], *, on_conflict: OnConflict = "error") -> int:
        """Write rows made by :func:`~harness_mem.rows.prepare_row` with this store's redactor, in one
        transaction; returns how many were written (ids already stored are settled by ``on_conflict``).

        For importers that prepare rows elsewhere: ``import_jsonl`` parses and redacts in a worker
        process while this one writes.
        """
        rows = list(rows)
        for row in rows:
            if type(row) is not Row or row.pk is not None:
                raise InvalidInputError(f"add_prepared takes new rows from prepare_row, not {row!r:.60}")
            if (row.redactions is None) != (self.redactor is None):
                raise InvalidInputError(
                    "these rows were prepared with redaction " + ("off" if row.redactions is None else "on")
                    + f", and this store has it {'on' if self.redactor is not None else 'off'}"
                )
        return len(self._write(rows, on_conflict)) if rows else 0

    def _write(self, batch: list[Row], on_conflict: OnConflict) -> list[Row]:
        """Insert a batch and its index rows in one transaction; returns the rows written."""
        index = self._vector_index()
        # Embed before taking the write lock: a model call must not hold up other writers.
        vectors = self._embed_new(batch, on_conflict) if index else {}
        with self._transaction():
            batch = self._resolve_conflicts(batch, on_conflict)
            if not batch:
                return []
            texts = self._index_texts(batch)  # before the batch's rows exist
            # Every row's pk is NULL, so SQLite numbers them on from the largest pk, and the write lock
            # is ours until COMMIT: their pks are known, and the index rows can go in as one call.
            first = self.conn.execute("SELECT coalesce(max(pk), 0) + 1 FROM entries").fetchone()[0]
            pks = range(first, first + len(batch))
            self.conn.executemany(f"INSERT INTO entries ({COLUMNS}) VALUES ({PLACEHOLDERS})", batch)
            if self.conn.execute("SELECT last_insert_rowid()").fetchone()[0] != pks[-1]:
                raise StorageError("entries were numbered out of sequence — run `harness-mem doctor`")
            self.conn.executemany("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", zip(pks, texts, strict=True))
            if index is not None:
                late = [row for row in batch if id(row) not in vectors]  # raced in since the pre-check: rare
                if late:
                    vectors.update(zip(map(id, late), index.embedder.embed([embedding_text(r.content, r.role) for r in late]),
                                       strict=True))
                for namespace in {row.namespace for row in batch}:
                    chosen = [(pk, row) for pk, row in zip(pks, batch, strict=True) if row.namespace == namespace]
                    index.write(namespace, [pk for pk, _ in chosen], np.stack([vectors[id(row)] for _, row in chosen]))
                self._vectors_touched = True
        return batch

    def _index_texts(self, rows: Sequence[Row], *, before_pk: int | None = None, lookup: bool = True) -> list[str]:
        """Keyword-index texts for rows in time order: a turn carries its date and the turn before it.

        The previous turn is the latest one of the same session among the stored rows (looked up
        once per session, below ``before_pk`` when given) and the rows earlier in the list.
        """
        last: dict[tuple[str, str], tuple[str, str | None] | None] = {}
        texts = []
        for row in rows:
            if row.kind != "turn" or not row.session:
                texts.append(keyword.index_text(row.content, row.role))
                continue
            key = (row.namespace, row.session)
            if key not in last:
                last[key] = self._previous_turn(row, before_pk) if lookup else None
            texts.append(keyword.index_text(row.content, row.role, day=_day(row.created_at // _DAY_MS),
                                            previous=last[key]))
            last[key] = (row.content, row.role)
        return texts

    def _previous_turn(self, row: Row, before_pk: int | None) -> tuple[str, str | None] | None:
        found = self.conn.execute(
            "SELECT content, role FROM entries WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND (created_at < ? OR (created_at = ? AND pk < ?)) ORDER BY created_at DESC, pk DESC LIMIT 1",
            (row.namespace, row.session, row.created_at, row.created_at, before_pk if before_pk is not None else 2**62),
        ).fetchone()
        return (found[0], found[1]) if found else None

    def _reindex_turn_after(self, namespace: str, session: str, created_ms: int, pk: int) -> None:
        """Rewrite the index row of the turn that followed a deleted one: it held that turn's text."""
        following = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND (created_at > ? OR (created_at = ? AND pk > ?)) ORDER BY created_at, pk LIMIT 1",
            (namespace, session, created_ms, created_ms, pk),
        ).fetchone()
        if following is None:
            return
        text = self._index_texts([Row._make(following)], before_pk=following[0])[0]
        self.conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (following[0],))
        self.conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (following[0], text))

    def _embed_new(self, batch: list[Row], on_conflict: OnConflict) -> dict[int, npt.NDArray[np.float32]]:
        """Vectors for the rows of ``batch`` that will be inserted (keyed by ``id(row)``), in one model call."""
        todo = batch
        if on_conflict == "ignore":  # re-importing a file must not re-embed what is stored
            stored = set()
            for namespace in {row.namespace for row in batch}:
                ids = [row.id for row in batch if row.namespace == namespace]
                stored |= {(namespace, found[0]) for found in self.conn.execute(
                    "SELECT id FROM entries WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                    (namespace, json.dumps(ids)),
                )}
            todo = [row for row in batch if (row.namespace, row.id) not in stored]
        if not todo:
            return {}
        assert self._vectors is not None
        matrix = self._vectors.embedder.embed([embedding_text(row.content, row.role) for row in todo])
        return {id(row): matrix[i] for i, row in enumerate(todo)}

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """A write transaction that also keeps this process's vector cache in step."""
        self._vectors_touched = False
        generation = None
        try:
            with write_transaction(self.conn):
                yield
                if self._vectors_touched:
                    generation = bump_generation(self.conn)
        except BaseException:
            if self._vectors is not None:
                self._vectors.rolled_back()
            raise
        if generation is not None and self._vectors is not None:
            self._vectors.committed(generation)

    def _vector_index(self) -> VectorIndex | None:
        """The vector index for this store's embedder (attached on first use), or None without one."""
        if self.embedder is None:
            return None
        if self._vectors is None:
            index = VectorIndex(self.conn, self.embedder)
            with write_transaction(self.conn):
                index.attach()
            self._vectors = index
        return self._vectors

    def _resolve_conflicts(self, batch: list[Row], on_conflict: OnConflict) -> list[Row]:
        """The rows to insert once ids already stored (or repeated in the batch) are settled."""
        unique: dict[tuple[str, str], Row] = {}
        for row in batch:
            key = (row.namespace, row.id)
            if key in unique:
                if on_conflict == "error":
                    raise _duplicate(*key)
                if on_conflict == "ignore":
                    continue
            unique[key] = row
        for namespace in {namespace for namespace, _ in unique}:
            ids = [entry_id for ns, entry_id in unique if ns == namespace]
            for entry_id, pk in self.conn.execute(
                "SELECT id, pk FROM entries WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                (namespace, json.dumps(ids)),
            ).fetchall():
                if on_conflict == "error":
                    raise _duplicate(namespace, entry_id)
                if on_conflict == "ignore":
                    del unique[(namespace, entry_id)]
                else:
                    self._delete_pk(pk)
        return list(unique.values())

    def delete(self, id: str) -> bool:
        """Delete an entry and its derived rows; False when there was none."""
        with self._transaction():
            row = self.conn.execute(
                "SELECT pk FROM entries WHERE namespace = ? AND id = ?", (self.namespace, id)
            ).fetchone()
            if row is None:
                return False
            self._delete_pk(row[0])
        return True

    def _delete_pk(self, pk: int) -> None:
        row = self.conn.execute(
            "SELECT namespace, session, created_at, kind FROM entries WHERE pk = ?", (pk,)
        ).fetchone()
        self.conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (pk,))
        if self._vectors is not None:
            self._vectors.delete(pk)
        elif has_vector_table(self.conn):  # vectors made by another process's embedder: vec0 has no cascade
            self.conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (pk,))
        self.conn.execute("DELETE FROM entries WHERE pk = ?", (pk,))  # entry_vectors goes by cascade
        self._vectors_touched = True
        if row is not None and row[3] == "turn" and row[1]:
            self._reindex_turn_after(row[0], row[1], row[2], pk)

    def purge_expired(self) -> int:
        """Delete every expired entry (in all namespaces); returns how many went."""
        with self._transaction():
            pks = [r[0] for r in self.conn.execute(
                "SELECT pk FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ?", (now_ms(),)
            )]
            for pk in pks:
                self._delete_pk(pk)
        return len(pks)

    # ---- reads -------------------------------------------------------------------------------

    def get(self, id: str) -> Entry:
        """The entry with this id; raises :class:`NotFoundError` (also for an expired one)."""
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.id = ?"
            " AND (e.expires_at IS NULL OR e.expires_at > ?)",
            (self.namespace, id, now_ms()),
        ).fetchone()
        if row is None:
            raise NotFoundError(
                f"no entry with id {id!r} in namespace {self.namespace!r} — `harness-mem list` shows the ids"
            )
        return entry_from_row(row)

    def list(self, *, limit: int | None = None, newest_first: bool = False, **filters: Any) -> Iterator[Entry]:
        """Entries in creation order (or newest first), filtered like :meth:`recall`."""
        where, params = make_filters(**filters).sql(self.namespace, now_ms())
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {COLUMNS} FROM entries e WHERE {where} ORDER BY e.created_at {order}, e.pk {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        for row in self.conn.execute(sql, params):
            yield entry_from_row(row)

    def count(self, **filters: Any) -> int:
        where, params = make_filters(**filters).sql(self.namespace, now_ms())
        return int(self.conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", params).fetchone()[0])

    def recall(
        self,
        query: str,
        k: int = 10,
        mode: Mode | None = None,
        *,
        kind: str | Sequence[str] | None = None,
        role: str | None = None,
        session: str | None = None,
        session_prefix: str | None = None,
        tags: Sequence[str] | str = (),
        any_tags: Sequence[str] | str = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        explain: bool = False,
        query_vector: npt.NDArray[np.float32] | None = None,
    ) -> list[Hit]:
        """The ``k`` entries most relevant to ``query``, best first (``[]`` is not an error).

        ``mode`` is ``"keyword"`` (FTS5 BM25), ``"semantic"`` (embedding cosine) or ``"hybrid"`` (both,
        fused); the default is hybrid when the store has an embedder, else keyword. Filters apply
        before the top-``k`` cut: a filtered query still returns ``k`` hits when ``k`` entries match.
        Any text is a valid query: it is never passed raw to FTS5. ``query_vector`` is the query's
        embedding when the caller already has it (see :meth:`embed_queries`).
        """
        if not isinstance(query, str):
            raise InvalidInputError("a query must be a string")
        mode = self._resolve_mode(mode)
        if k <= 0:
            return []
        filters = make_filters(kind, role, session, session_prefix, tags, any_tags, since, until)
        rankings: dict[str, list[tuple[int, float]]] = {}
        named: list[str] = []
        if mode != "keyword":
            named = self._named_roles(query)
            if query_vector is None and query.strip():
                query_vector = self._query_vector(fusion.strip_names(query, named))
        depth = fusion.depth(k) if mode == "hybrid" else k
        if mode in ("keyword", "hybrid"):
            # Keyword scores are cheap past the top few (FTS5 ranks every match anyway), and hybrid
            # needs them for the semantic candidates too: take them deep.
            rankings["keyword"] = self._keyword_ranking(
                query, fusion.KEYWORD_DEPTH if mode == "hybrid" else depth, filters
            )
        if mode in ("semantic", "hybrid"):
            rankings["semantic"] = self._semantic_ranking(query, depth, filters, query_vector)
        features: dict[int, fusion.Candidate] = {}
        if mode == "hybrid":
            assert query_vector is not None or not rankings["semantic"]
            ranked, features = self._fuse(query, rankings["keyword"], rankings["semantic"], query_vector, named, k)
        else:
            ranked = rankings[mode]
        entries = self._entries_by_pk([pk for pk, _ in ranked])
        positions = {name: {pk: rank for rank, (pk, _) in enumerate(ranking, start=1)}
                     for name, ranking in rankings.items()} if explain else {}
        hits = []
        for pk, score in ranked:
            components = None
            if explain:
                # Each retriever's rank (None: outside its list) and score; hybrid also shows the
                # speaker prior, and scores the candidates a list missed (cosine from the stored vector).
                components = {name: {"rank": positions[name].get(pk), "score": dict(rankings[name]).get(pk, 0.0)}
                              for name in rankings}
                if pk in features:
                    components["keyword"]["score"] = features[pk].keyword
                    components["semantic"]["score"] = features[pk].cosine
                    components["speaker"] = {"rank": None, "score": fusion.SPEAKER_PRIOR if features[pk].named else 0.0}
            entry = entries[pk]
            hits.append(Hit(entry, score, keyword.snippet(entry.content, query), components))
        return hits

    def _resolve_mode(self, mode: str | None) -> Mode:
        if mode is None:
            return "hybrid" if self.embedder is not None else "keyword"
        if mode not in ("keyword", "semantic", "hybrid"):
            raise InvalidInputError(f"unknown recall mode {mode!r} — use keyword, semantic or hybrid")
        if mode != "keyword" and self.embedder is None:
            raise EmbedderError(
                f"{mode} recall needs an embedding model and none is available"
                f" — {INSTALL_HINT}, or use --mode keyword"
            )
        return mode  # type: ignore[return-value]

    def _keyword_ranking(self, query: str, k: int, filters: Filters) -> list[tuple[int, float]]:
        """(pk, score) by BM25, best first; the score is ``-bm25`` so that higher is better."""
        expression = keyword.match_expression(query)
        if expression is None:
            return []
        where, params = filters.sql(self.namespace, now_ms())
        # Ask FTS5 for a shortlist first: ORDER BY rank LIMIT lets it skip sorting every match.
        # If filters leave fewer than k of the shortlist, fall back to ranking all matches.
        shortlist = max(4 * k, 64)
        for limit in (shortlist, -1):
            rows = self.conn.execute(
                "SELECT e.pk, f.rank FROM"
                " (SELECT rowid, rank FROM entries_fts WHERE entries_fts MATCH ? ORDER BY rank LIMIT ?) AS f"
                # CROSS JOIN keeps the matches as the outer loop: otherwise SQLite may start from
                # `entries` through the namespace index and test the filters on every row.
                f" CROSS JOIN entries e ON e.pk = f.rowid WHERE {where} ORDER BY f.rank LIMIT ?",
                [expression, limit, *params, k],
            ).fetchall()
            if len(rows) >= k or limit == -1:
                break
            if self._match_count(expression) <= shortlist:
                break
        return [(pk, -float(rank)) for pk, rank in rows]

    def _match_count(self, expression: str) -> int:
        return int(self.conn.execute(
            "SELECT count(*) FROM entries_fts WHERE entries_fts MATCH ?", (expression,)
        ).fetchone()[0])

    def _fuse(
        self,
        query: str,
        keyword_ranking: list[tuple[int, float]],
        semantic_ranking: list[tuple[int, float]],
        vector: npt.NDArray[np.float32] | None,
        named: list[str],
        k: int,
    ) -> tuple[list[tuple[int, float]], dict[int, fusion.Candidate]]:
        """Give every candidate of either ranking both features, then score them (see fusion.py).

        Returns the top ``k`` and every candidate's features (for ``explain``).
        """
        keyword_scores, cosines = dict(keyword_ranking), dict(semantic_ranking)
        # Candidates: the keyword top CANDIDATES and every semantic hit. A semantic hit outside the
        # keyword ranking's KEYWORD_DEPTH scores 0 for keyword: that far down, its share is tiny.
        pks = list(dict.fromkeys([*(pk for pk, _ in keyword_ranking[: fusion.CANDIDATES]), *cosines]))
        if not pks:
            return [], {}
        uncosined = [pk for pk in pks if pk not in cosines]
        if uncosined and vector is not None and self._vectors is not None:
            cosines.update(self._vectors.rescore(vector, uncosined, len(uncosined)))
        lowered = {name.lower() for name in named}
        rows = self.conn.execute(
            "SELECT pk, role, session FROM entries WHERE pk IN (SELECT value FROM json_each(?))", (json.dumps(pks),)
        ).fetchall()
        candidates = [
            fusion.Candidate(pk, keyword_scores.get(pk, 0.0), cosines.get(pk, 0.0),
                             role is not None and role.lower() in lowered, session)
            for pk, role, session in rows
        ]
        return fusion.fuse(candidates, k), {c.pk: c for c in candidates}

    def _named_roles(self, query: str) -> list[str]:
        """The roles (speakers) of this namespace that ``query`` names, as stored."""
        words = fusion.query_words(query)
        if not words:
            return []
        return [row[0] for row in self.conn.execute(
            "SELECT DISTINCT role FROM entries WHERE namespace = ? AND lower(role) IN (SELECT value FROM json_each(?))",
            (self.namespace, json.dumps(words)),
        )]

    def _semantic_ranking(
        self, query: str, k: int, filters: Filters, vector: npt.NDArray[np.float32] | None = None
    ) -> list[tuple[int, float]]:
        """(pk, cosine similarity), best first, among the entries that pass ``filters``."""
        index = self._vector_index()
        assert index is not None
        self._check_vectors_complete(index)
        if not query.strip():
            return []
        if vector is None:
            vector = self._query_vector(query)
        where, params = filters.sql(self.namespace, now_ms())
        if filters.is_empty:
            # The whole namespace: search the in-memory prefilter, then drop expired entries.
            found = index.search(vector, k, self.namespace)
            live = {pk for (pk,) in self.conn.execute(
                # CROSS JOIN: look the few hits up by pk, rather than scan the namespace for them.
                f"SELECT e.pk FROM json_each(?) AS hit CROSS JOIN entries e ON e.pk = hit.value WHERE {where}",
                [json.dumps([pk for pk, _ in found]), *params],
            )}
            if len(live) == len(found):
                return found
        candidates = [pk for (pk,) in self.conn.execute(f"SELECT e.pk FROM entries e WHERE {where}", params)]
        return index.search(vector, k, self.namespace, candidates)

    def _check_vectors_complete(self, index: VectorIndex) -> None:
        if self._vectors_complete:
            return
        _raise_if_missing_vectors(self.conn)
        self._vectors_complete = True

    def _query_vector(self, query: str) -> npt.NDArray[np.float32]:
        """The query's embedding; recent ones are cached (agents ask the same thing repeatedly)."""
        cached = self._query_vectors.get(query)
        if cached is not None:
            self._query_vectors.move_to_end(query)
            return cached
        assert self.embedder is not None
        vector = self.embedder.embed([query])[0]
        self._query_vectors[query] = vector
        if len(self._query_vectors) > QUERY_CACHE_SIZE:
            self._query_vectors.popitem(last=False)
        return vector

    def embed_queries(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of many queries in one model call (to pass to :meth:`recall` as ``query_vector``).

        Each is embedded as recall would: without the speaker names it mentions (see fusion.py).
        """
        if self.embedder is None:
            raise EmbedderError(f"no embedding model is available — {INSTALL_HINT}")
        return self.embedder.embed([fusion.strip_names(q, self._named_roles(q)) for q in queries])

    def _entries_by_pk(self, pks: list[int]) -> dict[int, Entry]:
        if not pks:
            return {}
        rows = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.pk IN (SELECT value FROM json_each(?))", (json.dumps(pks),)
        ).fetchall()
        return {row[0]: entry_from_row(row) for row in rows}

    def reindex(self, *, progress: Callable[[int], None] | None = None, batch_size: int = 256) -> dict[str, int]:
        """Rebuild the derived rows from the canonical ones, in every namespace.

        The keyword index is rebuilt in one transaction. Vectors made by another model are dropped;
        then every entry without a vector is embedded, a batch per transaction, so an interrupted
        reindex resumes where it stopped. ``progress(n)`` is called as entries are done.
        """
        total = self.conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        with self._transaction():
            self.conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')")
            rows = self.conn.execute(
                f"SELECT {COLUMNS} FROM entries ORDER BY namespace, session, created_at, pk"
            ).fetchall()
            # In this order every turn's previous turn is the one before it: no lookups needed.
            texts = self._index_texts([Row._make(row) for row in rows], lookup=False)
            self.conn.executemany("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)",
                                  zip((row[0] for row in rows), texts, strict=True))
        report = {"entries": total, "keyword_rows": total, "vectors_dropped": 0, "vectors_written": 0}
        if self.embedder is None:
            return report
        fresh = VectorIndex(self.conn, self.embedder)
        recorded = VectorIndex.recorded_model(self.conn)
        if recorded is not None and recorded != fresh.identity():
            with self._transaction():
                report["vectors_dropped"] = fresh.count()
                fresh.clear()
                self._vectors_touched = True
            self._vectors = None
        index = self._vector_index()
        assert index is not None
        while True:
            rows = self.conn.execute(
                "SELECT pk, namespace, content, role FROM entries e WHERE NOT EXISTS"
                " (SELECT 1 FROM entry_vectors v WHERE v.pk = e.pk) ORDER BY pk LIMIT ?",
                (batch_size,),
            ).fetchall()
            if not rows:
                break
            vectors = index.embedder.embed([embedding_text(content, role) for _, _, content, role in rows])
            with self._transaction():
                for namespace in {row[1] for row in rows}:
                    chosen = [i for i, row in enumerate(rows) if row[1] == namespace]
                    index.write(namespace, [rows[i][0] for i in chosen], vectors[chosen])
                self._vectors_touched = True
            report["vectors_written"] += len(rows)
            if progress is not None:
                progress(len(rows))
        self._vectors_complete = True
        return report

    def count_missing_vectors(self) -> int:
        """Entries (in every namespace) that ``reindex`` would embed; 0 without an embedder."""
        return missing_vectors(self.conn) if self.embedder is not None else 0

    def stats(self) -> dict[str, Any]:
        """Counts by kind and role, sessions, the file's size, and the schema version."""
        ns, now = self.namespace, now_ms()
        live = "namespace = ? AND (expires_at IS NULL OR expires_at > ?)"
        by_kind = dict(self.conn.execute(
            f"SELECT kind, count(*) FROM entries WHERE {live} GROUP BY kind ORDER BY kind", (ns, now)
        ).fetchall())
        by_role = dict(self.conn.execute(
            f"SELECT role, count(*) FROM entries WHERE {live} AND role IS NOT NULL GROUP BY role ORDER BY 2 DESC",
            (ns, now),
        ).fetchall())
        sessions = self.conn.execute(
            f"SELECT count(DISTINCT session) FROM entries WHERE {live}", (ns, now)
        ).fetchone()[0]
        expired = self.conn.execute(
            "SELECT count(*) FROM entries WHERE namespace = ? AND expires_at <= ?", (ns, now)
        ).fetchone()[0]
        redacted = dict(self.conn.execute(
            f"SELECT j.key, sum(j.value) FROM entries, json_each(entries.redactions) AS j WHERE {live}"
            " GROUP BY j.key ORDER BY 2 DESC, 1", (ns, now),
        ).fetchall())
        unredacted = self.conn.execute(
            f"SELECT count(*) FROM entries WHERE {live} AND redactions IS NULL", (ns, now)
        ).fetchone()[0]
        namespaces = [r[0] for r in self.conn.execute("SELECT DISTINCT namespace FROM entries ORDER BY 1")]
        applied = [s for s in migrations.status(self.conn) if s.applied_at]
        return {
            "path": str(self.path),
            "namespace": ns,
            "entries": sum(by_kind.values()),
            "by_kind": by_kind,
            "by_role": by_role,
            "sessions": sessions,
            "expired_pending_purge": expired,
            "redacted": redacted,
            "written_without_redaction": unredacted,
            "namespaces": namespaces,
            "schema_version": applied[-1].number if applied else 0,
            "file_bytes": self._file_bytes(),
        }

    def _file_bytes(self) -> int:
        if not isinstance(self.path, Path):
            return 0
        return sum(
            p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists()
        )

    def export(self) -> Iterator[dict[str, Any]]:
        """Every live entry of the namespace as a JSON-ready dict, oldest first.

        Importing the output (``harness-mem import``) into an empty file rebuilds an identical store.
        """
        for entry in self.list():
            yield entry.to_dict()

    def diagnose(self) -> dict[str, Any]:
        """What ``harness-mem doctor`` reports: each check with ok and a detail line."""
        checks: list[dict[str, Any]] = []

        def check(name: str, probe: Callable[[], str]) -> None:
            try:
                checks.append({"name": name, "ok": True, "detail": probe()})
            except Exception as exc:  # a doctor reports failures; it does not stop at the first
                checks.append({"name": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})

        def integrity() -> str:
            problems = self.integrity_check()
            if problems:
                raise StorageError("; ".join(problems[:5]))
            return "ok"

        check("sqlite", lambda: f"{sqlite_version()} via {driver().__name__}")
        check("fts5", lambda: str(self.conn.execute("SELECT count(*) FROM entries_fts").fetchone()[0]) + " rows indexed")
        check("sqlite-vec", lambda: str(self.conn.execute("SELECT vec_version()").fetchone()[0]))
        check("schema", lambda: f"{self.stats()['schema_version']:04d}, all migrations applied")
        check("model", self._describe_model)
        check("integrity", integrity)
        return {"path": str(self.path), "checks": checks}

    def _describe_model(self) -> str:
        """The embedding model in use and the vectors' state (raises when they cannot be used)."""
        if self.embedder is None:
            recorded = VectorIndex.recorded_model(self.conn)
            return "none: keyword recall only" + (f" (vectors by {recorded['name']} stored)" if recorded else "")
        index = VectorIndex(self.conn, self.embedder)
        index.check_model()
        _raise_if_missing_vectors(self.conn)
        return f"{index.identity()['name']}, {index.dim} dimensions, every entry embedded"

    def integrity_check(self) -> list[str]:
        """Problems SQLite finds in the file (an empty list when it is sound)."""
        rows = [r[0] for r in self.conn.execute("PRAGMA integrity_check")]
        return [] if rows == ["ok"] else rows


def _raise_if_missing_vectors(conn: Connection) -> None:
    missing = missing_vectors(conn)
    if missing:
        raise EmbedderError(
            f"{missing} entries have no vector yet (stored without an embedder)"
            " — run `harness-mem reindex` to embed them, or use --mode keyword"
        )


def _duplicate(namespace: str, entry_id: str) -> DuplicateIdError:
    return DuplicateIdError(
        f"an entry with id {entry_id!r} already exists in namespace {namespace!r}"
        " — choose another id, or replace it"
    )


@lru_cache(maxsize=4096)
def _day(days_since_epoch: int) -> date:
    """The UTC date of a day number (``ms // _DAY_MS``): turns of one day share it, hence the cache."""
    return _EPOCH + timedelta(days=days_since_epoch)


_EPOCH = date(1970, 1, 1)
