"""``MemoryStore``: the facade over one SQLite file.

Canonical rows live in ``entries``; the keyword index (``entries_fts``) is derived from them and is
written and deleted in the same transaction, so a crash can never leave an entry half-indexed.
Every write takes the lock up front (``BEGIN IMMEDIATE``), so several processes can share a file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from sqlite_utils import Database

from . import corrections, keyword, maintenance, migrations, sessions
from .db import (
    CACHE_SIZE_KIB,
    Connection,
    connect,
    default_path,
    is_read_only,
    redaction_secret,
    write_transaction,
)
from .errors import (
    BlockedError,
    DuplicateIdError,
    HarnessMemError,
    InvalidInputError,
    NotFoundError,
    StorageError,
)
from .filters import make_filters
from .models import Entry, Hit, Remembered, SessionHit, SessionSummary, now_ms
from .protocols import Embedder
from .providers.embeddings import RECORDED_NAMES, default_embedder, named_embedder
from .recall import Mode, Recall
from .redaction import Redactor
from .rows import COLUMNS, MAX_BATCH_CHARS, PLACEHOLDERS, Row, entry_from_row, identity, prepare_row
from .settings import Settings
from .vectors import (
    VectorIndex,
    VectorRow,
    bump_generation,
    embedding_text,
    has_vector_table,
    is_keyword_only,
    set_keyword_only,
)

OnConflict = Literal["error", "ignore", "replace"]
ON_CONFLICT: tuple[OnConflict, ...] = ("error", "ignore", "replace")

DEFAULT_BATCH_SIZE = 500

_DAY_MS = 86_400_000
_IDENTITY_FILTERS = frozenset({"role", "session", "session_prefix"})


def check_on_conflict(on_conflict: object) -> None:
    """Refuse an ``on_conflict`` that is not one of :data:`ON_CONFLICT`: an unknown word must not
    quietly act as one of them (an overwrite, say)."""
    if not isinstance(on_conflict, str) or on_conflict not in ON_CONFLICT:
        raise InvalidInputError(
            f"on_conflict must be one of {', '.join(map(repr, ON_CONFLICT))}, not {on_conflict!r:.60}"
        )


class MemoryStore:
    """Memory entries in one SQLite file: add, recall, get, delete, list.

    Opening a store creates the file if needed and applies pending migrations::

        with MemoryStore("agent.db") as store:
            store.add("we chose argon2id for password hashing", tags=["decision"])
            hits = store.recall("password hashing decision")

    :param path: the database file (``":memory:"`` for a throwaway store); defaults to
        ``$HARNESS_MEM_DB`` or ``memory.db`` in the user's data directory.
    :param namespace: the tenant every read and write is confined to.
    :param read_only: open an existing, migrated file without the right to change it: every write
        fails, and the daily purge of expired entries (see :meth:`gc`) is not run.
    :param cache_kib: SQLite's page cache for this connection. Warm recall over a large file wants
        the default; a process that answers one query and exits does as well with less.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        namespace: str = "default",
        embedder: Embedder | str | None = "auto",
        redactor: Redactor | Literal["default"] | None = "default",
        read_only: bool = False,
        cache_kib: int = CACHE_SIZE_KIB,
    ) -> None:
        if not namespace or not isinstance(namespace, str):
            raise InvalidInputError("namespace must be a non-empty string")
        if path is None:
            path = default_path()
        self.path: Path | str = ":memory:" if str(path) == ":memory:" else Path(path)
        self.namespace = namespace
        self._vectors: VectorIndex | None = None
        self._vectors_touched = False
        self._in_transaction = False
        #: The file as a sqlite-utils ``Database``: for looking (tables, schema, rows), not for writing
        #: around the store; writes go through the store's methods and :meth:`transaction`.
        self.db: Database = connect(self.path, read_only=read_only, cache_kib=cache_kib)
        self._conn: Connection = self.db.conn
        #: True when the file is open read-only (asked for, or its location cannot be written):
        #: reads work, every write is refused.
        self.read_only: bool = is_read_only(self._conn)
        try:
            created = any(m.number == 1 for m in migrations.migrate(self._conn, read_only=self.read_only))
            self.embedder: Embedder | None = self._choose_embedder(embedder, created=created)
            # Nothing unredacted reaches the file unless the caller says so (redactor=None), and
            # then every entry written records that it was not redacted. Read-only, a file without
            # a key gets a throwaway one: nothing it could pseudonymise is ever stored.
            self.redactor: Redactor | None = (
                Redactor.default(secret=redaction_secret(self._conn, create=not self.read_only))
                if redactor == "default" else redactor
            )
            # The namespace is an identity field: stored, and so matched, as its pseudonym.
            self.namespace = self._key(namespace) or namespace
            self._recall = Recall(self)
            if not self.read_only:
                maintenance.expire_if_due(self)
        except BaseException:
            self._conn.close()
            raise

    def _choose_embedder(self, embedder: Embedder | str | None, *, created: bool) -> Embedder | None:
        """The embedder this handle uses; a new file opened without one is recorded keyword-only.

        ``"auto"`` honours, in order: a keyword-only file (no model is loaded), ``HARNESS_MEM_EMBEDDER``,
        the model the file's vectors were made with, then the built-in model when it is installed.
        A name (``"minilm"``, ``"minilm-int8"``) or an object is the caller's explicit choice.
        """
        if embedder == "auto":
            wanted = Settings.from_env().embedder
            if self.keyword_only:
                return None
            if wanted == "none":
                embedder = None
            elif wanted != "auto":
                return named_embedder(wanted)
            else:
                recorded = VectorIndex.recorded_model(self._conn)
                known = recorded is not None and recorded.get("name") in RECORDED_NAMES
                return named_embedder(recorded["name"]) if known and recorded else default_embedder()
        if isinstance(embedder, str):
            if embedder != "none":
                return named_embedder(embedder)
            embedder = None
        if embedder is None and created and not self.read_only:
            with self.transaction():
                set_keyword_only(self._conn, True)
        return embedder

    @property
    def keyword_only(self) -> bool:
        """True when the file was made (or switched) to keep no vectors: see :meth:`reindex`."""
        return is_keyword_only(self._conn)

    def _key(self, value: str | None) -> str | None:
        """An identity value (id, session, role) as this store stores it, for a lookup by equality."""
        return identity(value, self.redactor)

    def _filters(self, filters: dict[str, Any]) -> dict[str, Any]:
        """Filters whose identity values (role, session, session prefix) are in their stored form.

        A prefix ending inside a sensitive value cannot match its pseudonym: only whole values do.
        """
        if self.redactor is None:
            return filters
        return {name: self._key(value) if name in _IDENTITY_FILTERS and isinstance(value, str) else value
                for name, value in filters.items()}

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self._conn.close()

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
        check_on_conflict(on_conflict)
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
        check_on_conflict(on_conflict)
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

    def _write(self, batch: list[Row], on_conflict: OnConflict,
               vectors: dict[int, npt.NDArray[np.float32]] | None = None) -> list[Row]:
        """Insert a batch and its index rows in one transaction; returns the rows written.

        ``vectors`` are the rows' embeddings when the caller made them already (see ``_embed_new``).
        """
        index = self._vector_index()
        # Embed before taking the write lock: a model call must not hold up other writers.
        if vectors is None:
            vectors = self._embed_new(batch, on_conflict) if index else {}
        with self.transaction():
            batch = self._resolve_conflicts(batch, on_conflict)
            if not batch:
                return []
            texts = self._index_texts(batch)  # before the batch's rows exist
            # Every row's pk is NULL, so SQLite numbers them on from the largest pk, and the write lock
            # is ours until COMMIT: their pks are known, and the index rows can go in as one call.
            first = self._conn.execute("SELECT coalesce(max(pk), 0) + 1 FROM entries").fetchone()[0]
            pks = range(first, first + len(batch))
            self._conn.executemany(f"INSERT INTO entries ({COLUMNS}) VALUES ({PLACEHOLDERS})", batch)
            if self._conn.execute("SELECT last_insert_rowid()").fetchone()[0] != pks[-1]:
                raise StorageError("entries were numbered out of sequence — run `harness-mem doctor`")
            self._conn.executemany("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", zip(pks, texts, strict=True))
            if index is not None:
                late = [row for row in batch if id(row) not in vectors]  # raced in since the pre-check: rare
                if late:
                    vectors.update(zip(map(id, late), index.embedder.embed([embedding_text(r.content, r.role) for r in late]),
                                       strict=True))
                index.write(
                    [VectorRow(pk, row.namespace, row.kind, row.session, row.created_at)
                     for pk, row in zip(pks, batch, strict=True)],
                    np.stack([vectors[id(row)] for row in batch]),
                )
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
                texts.append(_index_text(row.content, row.role, row.kind, row.session, row.created_at, None))
                continue
            key = (row.namespace, row.session)
            if key not in last:
                last[key] = self._previous_turn(row, before_pk) if lookup else None
            texts.append(_index_text(row.content, row.role, row.kind, row.session, row.created_at, last[key]))
            last[key] = (row.content, row.role)
        return texts

    def _index_texts_of(self, pks: Sequence[int]) -> dict[int, str]:
        """The keyword-index text of each stored entry, as its write made it (keyword ranking counts
        term frequencies in it): one query for all, each turn with the one before it in its session."""
        rows = self._conn.execute(
            "SELECT e.pk, e.content, e.role, e.kind, e.session, e.created_at, p.content, p.role"
            " FROM json_each(?) AS c CROSS JOIN entries e ON e.pk = c.value"
            " LEFT JOIN entries p ON p.pk = (SELECT q.pk FROM entries q WHERE e.kind = 'turn'"
            " AND q.namespace = e.namespace AND q.session = e.session AND q.kind = 'turn' AND q.forgotten_at IS NULL"
            " AND (q.created_at < e.created_at OR (q.created_at = e.created_at AND q.pk < e.pk))"
            " ORDER BY q.created_at DESC, q.pk DESC LIMIT 1)",
            (json.dumps(list(pks)),),
        ).fetchall()
        return {
            pk: _index_text(content, role, kind, session, created_at,
                            (previous, previous_role) if previous is not None else None)
            for pk, content, role, kind, session, created_at, previous, previous_role in rows
        }

    def _previous_turn(self, row: Row, before_pk: int | None) -> tuple[str, str | None] | None:
        found = self._conn.execute(
            "SELECT content, role FROM entries WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND forgotten_at IS NULL AND (created_at < ? OR (created_at = ? AND pk < ?)) ORDER BY created_at DESC, pk DESC LIMIT 1",
            (row.namespace, row.session, row.created_at, row.created_at, before_pk if before_pk is not None else 2**62),
        ).fetchone()
        return (found[0], found[1]) if found else None

    def _reindex_turn_after(self, namespace: str, session: str, created_ms: int, pk: int) -> None:
        """Rewrite the index row of the turn that followed a deleted one: it held that turn's text."""
        following = self._conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND forgotten_at IS NULL AND (created_at > ? OR (created_at = ? AND pk > ?)) ORDER BY created_at, pk LIMIT 1",
            (namespace, session, created_ms, created_ms, pk),
        ).fetchone()
        if following is None:
            return
        text = self._index_texts([Row._make(following)], before_pk=following[0])[0]
        self._conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (following[0],))
        self._conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (following[0], text))

    def _embed_new(self, batch: list[Row], on_conflict: OnConflict) -> dict[int, npt.NDArray[np.float32]]:
        """Vectors for the rows of ``batch`` that will be inserted (keyed by ``id(row)``), in one model call."""
        todo = batch
        if on_conflict == "ignore":  # re-importing a file must not re-embed what is stored
            stored = set()
            for namespace in {row.namespace for row in batch}:
                ids = [row.id for row in batch if row.namespace == namespace]
                stored |= {(namespace, found[0]) for found in self._conn.execute(
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
    def transaction(self) -> Iterator[None]:
        """One write transaction around the block: everything written inside commits together or not at all.

        Takes the write lock up front (``BEGIN IMMEDIATE``), so several processes can share the file.
        Storage built on this store (episodes, skills) writes its rows inside the same transaction as
        the entries they belong to. A nested call joins the outer transaction.
        """
        if self._in_transaction:
            yield
            return
        self._in_transaction = True
        self._vectors_touched = False
        generation = None
        try:
            with write_transaction(self._conn):
                yield
                if self._vectors_touched:
                    generation = bump_generation(self._conn)
        except BaseException:
            if self._vectors is not None:
                self._vectors.rolled_back()
            raise
        finally:
            self._in_transaction = False
        if generation is not None and self._vectors is not None:
            self._vectors.committed(generation)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction around several queries: they all see the file as it was at the first.

        Inside a write transaction the reads already share one view, so nothing more is done.
        """
        if self._conn.in_transaction:
            yield
            return
        self._conn.execute("BEGIN")  # deferred: a read snapshot in WAL mode, taking no write lock
        try:
            yield
        finally:
            self._conn.execute("COMMIT")

    def data_version(self) -> tuple[int, int]:
        """A token that changes whenever the file's content changes, in this process or another.

        For caches of what was read: equal tokens mean nothing was written in between.
        """
        return self._conn.total_changes, int(self._conn.execute("PRAGMA data_version").fetchone()[0])

    def _vector_index(self, *, writing: bool = True) -> VectorIndex | None:
        """The vector index for this store's embedder (attached on first use), or None without one.

        A reader (``writing=False``) never turns a keyword-only file into one with vectors, and
        never writes to a read-only one: for it there is then no index to search.
        """
        if self.embedder is None:
            return None
        if self._vectors is None:
            index = VectorIndex(self._conn, self.embedder)
            if not index.attached():
                if not writing and (self.read_only or self.keyword_only):
                    return None
                with self.transaction():
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
            for entry_id, pk in self._conn.execute(
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
        with self.transaction():
            row = self._conn.execute(
                "SELECT pk FROM entries WHERE namespace = ? AND id = ?", (self.namespace, self._key(id))
            ).fetchone()
            if row is None:
                return False
            self._delete_pk(row[0])
        return True

    def _delete_pk(self, pk: int) -> None:
        row = self._conn.execute(
            "SELECT namespace, session, created_at, kind FROM entries WHERE pk = ?", (pk,)
        ).fetchone()
        self._drop_derived(pk)
        self._conn.execute("DELETE FROM entries WHERE pk = ?", (pk,))
        if row is not None and row[3] == "turn" and row[1]:
            self._reindex_turn_after(row[0], row[1], row[2], pk)

    def _drop_derived(self, pk: int) -> None:
        """Remove an entry's keyword and vector rows (inside a write transaction)."""
        self._conn.execute("DELETE FROM entries_fts WHERE rowid = ?", (pk,))
        if self._vectors is not None:
            self._vectors.delete(pk)
        elif has_vector_table(self._conn):  # vectors made by another process's embedder: vec0 has no cascade
            self._conn.execute("DELETE FROM entries_vec WHERE rowid = ?", (pk,))
        self._vectors_touched = True

    def _reindex_neighbour(self, pk: int) -> None:
        """After a turn is forgotten, the next turn of its session stops carrying its text."""
        row = self._conn.execute(
            "SELECT namespace, session, created_at, kind FROM entries WHERE pk = ?", (pk,)
        ).fetchone()
        if row is not None and row[3] == "turn" and row[1]:
            self._reindex_turn_after(row[0], row[1], row[2], pk)

    def purge_expired(self) -> int:
        """Delete every expired entry (in all namespaces) with its derived rows; returns how many went.

        Opening a store does this once a day on its own; :meth:`gc` does it and gives the space back.
        """
        return maintenance.purge_expired(self)

    def gc(self, *, vacuum: bool = False) -> dict[str, Any]:
        """Collect what the file no longer needs: expired and forgotten entries (with their index
        rows and vectors), deleted entries' words in the keyword index (merged), old copies of
        purged rows (the whole file rewritten when an entry was purged), the WAL (checkpointed and
        truncated) and free pages (incremental vacuum; a full ``VACUUM`` only with ``vacuum``,
        which also makes an older file free pages incrementally), in every namespace. Returns what
        was done and a size report by table. This is ``harness-mem gc``.
        """
        return maintenance.gc(self, vacuum=vacuum)

    # ---- memory operations (what agents call: tools, MCP) --------------------------------------

    def remember(self, content: str, *, kind: str | None = None, tags: Iterable[str] = (),
                 session: str | None = None, role: str | None = None, source: str | None = None,
                 metadata: Mapping[str, Any] | None = None, supersedes: str | None = None) -> Remembered:
        """Store ``content`` unless an exact duplicate (same kind and redacted text) is already here.

        Returns the id (the existing one with ``deduped=True`` for a duplicate) and what redaction
        replaced. ``supersedes=ID`` makes it a correction of that entry (see :meth:`supersede`).
        """
        return corrections.remember(self, content, kind=kind, tags=tags, session=session, role=role,
                                    source=source, metadata=metadata, supersedes=supersedes)

    def supersede(self, old_id: str, new_content: str, **changes: Any) -> Remembered:
        """Correct an entry: the new text becomes a new entry, and the old one is kept, marked as
        replaced (recall hides it; :meth:`history` shows the chain). Nothing is overwritten."""
        return corrections.supersede(self, old_id, new_content, **changes)

    def history(self, id: str) -> list[Entry]:
        """The chain of corrections ``id`` belongs to, oldest first."""
        return corrections.history(self, id)

    def forget(self, id: str | None = None, **filters: Any) -> int:
        """Tombstone an entry (or every entry matching ``session=``, ``tags=``, ``kind=``, ``since=``,
        ``until=``): it is never returned again, and :meth:`purge` removes its content."""
        return corrections.forget(self, id, **filters)

    def purge(self) -> int:
        """Remove this namespace's forgotten and expired entries from the file, bytes included."""
        return corrections.purge(self)

    def recent(self, n: int = 20, *, kind: str | None = None) -> list[Entry]:
        """The ``n`` latest entries, newest first: "what was I doing"."""
        if not isinstance(n, int) or not 1 <= n <= sessions.MAX_PAGE:
            raise InvalidInputError(f"n must be between 1 and {sessions.MAX_PAGE}, not {n!r}")
        return list(self.list(limit=n, newest_first=True, kind=kind))

    def recall_sessions(self, query: str, k: int = 5, *, context: int = 1, **recall_args: Any) -> list[SessionHit]:
        """The sessions that best answer ``query``: each with its best hit, the turns around it, its
        first and last turns, its size and dates."""
        return sessions.recall_sessions(self, query, k, context=context, **recall_args)

    def sessions(self, limit: int = 20, offset: int = 0) -> list[SessionSummary]:
        """Sessions, most recently active first, with their sizes."""
        return sessions.sessions(self, limit, offset)

    def session_turns(self, session: str, offset: int = 0, limit: int = 50) -> list[Entry]:
        """One session's entries in order, a page at a time."""
        return sessions.session_turns(self, session, offset, limit)

    # ---- reads -------------------------------------------------------------------------------

    def get(self, id: str) -> Entry:
        """The entry with this id; raises :class:`NotFoundError` (also for an expired one)."""
        row = self._conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.id = ? AND e.forgotten_at IS NULL"
            " AND (e.expires_at IS NULL OR e.expires_at > ?)",
            (self.namespace, self._key(id), now_ms()),
        ).fetchone()
        if row is None:
            raise NotFoundError(
                f"no entry with id {id!r} in namespace {self.namespace!r} — `harness-mem list` shows the ids"
            )
        return entry_from_row(row)


    def count(self, **filters: Any) -> int:
        where, params = make_filters(**self._filters(filters)).sql(self.namespace, now_ms())
        return int(self._conn.execute(f"SELECT count(*) FROM entries e WHERE {where}", params).fetchone()[0])

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
        strict: bool = False,
        min_score: float | None = None,
        context: int = 0,
        include_superseded: bool = False,
        exact: bool = False,
    ) -> list[Hit]:
        """The ``k`` entries most relevant to ``query``, best first (``[]`` is not an error).

        ``mode`` is ``"keyword"`` (FTS5 BM25), ``"semantic"`` (embedding cosine) or ``"hybrid"`` (both,
        fused); the default is hybrid when the store has an embedder, else keyword. Filters apply
        before the top-``k`` cut: a filtered query still returns ``k`` hits when ``k`` entries match.
        Any text is a valid query: it is never passed raw to FTS5. ``query_vector`` is the query's
        embedding when the caller already has it (see :meth:`embed_queries`).

        Entries stored without a vector are matched by keyword alone, with a
        :class:`~harness_mem.errors.MissingVectorsWarning`; ``strict=True`` refuses instead.

        ``min_score`` drops hits scoring below it; ``context=N`` gives each turn hit the N turns
        before and after it in its session (``hit.context``); entries a correction replaced are
        left out unless ``include_superseded``. ``exact=True`` ranks keywords with BM25 over every
        word of the query on every match, which costs time in proportion to the file on a large one
        (the default scores only the rarer words that way: see :mod:`harness_mem.bm25`).
        """
        role, session, session_prefix = self._key(role), self._key(session), self._key(session_prefix)
        hits = self._recall(
            query, k, mode, kind=kind, role=role, session=session, session_prefix=session_prefix, tags=tags,
            any_tags=any_tags, since=since, until=until, explain=explain, query_vector=query_vector,
            strict=strict, include_superseded=include_superseded, exact=exact,
        )
        if min_score is not None:
            hits = [hit for hit in hits if hit.score >= min_score]
        return sessions.with_context(self, hits, context) if context else hits

    def embed_queries(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of many queries in one model call (to pass to :meth:`recall` as ``query_vector``).

        Each is embedded as recall would: without the speaker names it mentions (see fusion.py).
        """
        return self._recall.embed_queries(queries)

    # ---- maintenance ---------------------------------------------------------------------------

    def reindex(self, *, progress: Callable[[int], None] | None = None, batch_size: int = 256,
                keyword_only: bool = False) -> dict[str, int]:
        """Rebuild the derived rows from the canonical ones, in every namespace.

        The keyword index is rebuilt in one transaction. Vectors made by another model are dropped;
        then every entry without a vector is embedded, a batch per transaction, so an interrupted
        reindex resumes where it stopped. ``progress(n)`` is called as entries are done.

        This is also how a file switches models: reindex with another embedder, or with
        ``keyword_only=True`` to drop the vectors and record that the file keeps none. A
        keyword-only file gets vectors again by a reindex with an explicit embedder.
        """
        return maintenance.reindex(self, progress=progress, batch_size=batch_size, keyword_only=keyword_only)

    def count_missing_vectors(self) -> int:
        """Entries (in every namespace) that ``reindex`` would embed; 0 without an embedder."""
        return maintenance.count_missing_vectors(self)

    def stats(self) -> dict[str, Any]:
        """Counts by kind and role, sessions, the largest sessions, the file's size by table and
        index, and the schema version: a :class:`~harness_mem.models.StoreStats` as a JSON-ready
        dict (``harness-mem schema stats`` describes it)."""
        return maintenance.stats(self)

    def diagnose(self) -> dict[str, Any]:
        """What ``harness-mem doctor`` reports: each check with ok and a detail line."""
        return maintenance.diagnose(self)

    def integrity_check(self) -> list[str]:
        """Problems SQLite finds in the file (an empty list when it is sound)."""
        return maintenance.integrity_check(self)

    def export(self) -> Iterator[dict[str, Any]]:
        """Every live entry of the namespace as a JSON-ready dict, oldest first.

        Importing the output (``harness-mem import``) into an empty file rebuilds an identical store.
        """
        for entry in self.list():
            yield entry.to_dict()

    # Last in the class: once defined, the name ``list`` in this class body means this method, not
    # the builtin, and type checkers would read later annotations that way.
    def list(self, *, limit: int | None = None, newest_first: bool = False, **filters: Any) -> Iterator[Entry]:
        """Entries in creation order (or newest first), filtered like :meth:`recall`."""
        where, params = make_filters(**self._filters(filters)).sql(self.namespace, now_ms())
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {COLUMNS} FROM entries e WHERE {where} ORDER BY e.created_at {order}, e.pk {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        for row in self._conn.execute(sql, params):
            yield entry_from_row(row)


def _duplicate(namespace: str, entry_id: str) -> DuplicateIdError:
    return DuplicateIdError(
        f"an entry with id {entry_id!r} already exists in namespace {namespace!r}"
        " — choose another id, or replace it"
    )


def _index_text(content: str, role: str | None, kind: str, session: str | None, created_ms: int,
                previous: tuple[str, str | None] | None) -> str:
    """An entry's keyword-index text: a turn of a session carries its date and the turn before it."""
    if kind != "turn" or not session:
        return keyword.index_text(content, role)
    return keyword.index_text(content, role, day=_day(created_ms // _DAY_MS), previous=previous)


@lru_cache(maxsize=4096)
def _day(days_since_epoch: int) -> date:
    """The UTC date of a day number (``ms // _DAY_MS``): turns of one day share it, hence the cache."""
    return _EPOCH + timedelta(days=days_since_epoch)


_EPOCH = date(1970, 1, 1)
