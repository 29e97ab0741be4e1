"""The SQLite engine: one file holds the entries, their keyword index (FTS5) and their vectors (vec0).

Canonical rows live in ``entries``; the keyword indexes (``entries_fts``, and ``derived_fts`` for
what consolidation derived) and the vectors (``entries_vec``) are derived from them and written and
deleted in the same transaction, so a crash can never leave an entry half-indexed. Every write takes the lock up front (``BEGIN IMMEDIATE``), so
several processes can share a file.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from .. import keyword, migrations
from ..db import (
    BUSY_TIMEOUT_MS,
    CACHE_SIZE_KIB,
    Connection,
    connect,
    driver,
    is_read_only,
    redaction_secret,
    sqlite_version,
    truncate_wal,
    write_transaction,
)
from ..errors import StorageError
from ..filters import Selection
from ..identities import SealedIdentity, identity_values_in_use
from ..models import counted, to_ms
from ..passages import Passage, Scored, embed_entries
from ..protocols import Embedder
from ..rows import COLUMN_NAMES, COLUMNS, PLACEHOLDERS, Row
from ..steps import in_steps, next_step
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
from ..vectors import (
    MAX_KNN,
    VectorFilter,
    VectorIndex,
    VectorRow,
    bump_generation,
    delete_vector,
    drop_vectors,
    entries_without_vectors,
    has_vector_table,
    is_keyword_only,
    live_entries,
    missing_vectors,
    move_vectors,
    set_keyword_only,
    still_without_vectors,
    stored_passage_cosines,
    stored_passages,
)
from . import sqlite_files, sqlite_rekey, sqlite_rewrite
from .sqlite_keywords import (
    KEYWORD_TABLES,
    FTS5Keywords,
    keyword_table,
    recount_totals,
    settle_totals,
    unindex,
    unsettled,
)
from .sqlite_where import where

logger = logging.getLogger(__name__)

# What a new row leaves to SQLite (its pk) and to later writes (a correction, a forget). An insert
# that names fewer columns costs less, even when the others are NULL (100k rows, the same values:
# 23 µs a row against 31), so rows that are not copies of stored ones are written without them.
_LATER = ("superseded_by", "superseded_at", "forgotten_at")
_NEW_COLUMNS = [name for name in COLUMN_NAMES if name != "pk" and name not in _LATER]
_INSERT_NEW = f"INSERT INTO entries ({', '.join(_NEW_COLUMNS)}) VALUES ({', '.join('?' * len(_NEW_COLUMNS))})"
_INSERT_ALL = f"INSERT INTO entries ({COLUMNS}) VALUES ({PLACEHOLDERS})"
_new_values = itemgetter(*map(COLUMN_NAMES.index, _NEW_COLUMNS))
_later_values = itemgetter(*map(COLUMN_NAMES.index, _LATER))
_NOT_YET = (None,) * len(_LATER)

#: An import lets the write-ahead log grow to this many pages (4 KiB each) between copies into the file.
BULK_CHECKPOINT_PAGES = 16_384

_CURRENT = "e.forgotten_at IS NULL AND e.superseded_by IS NULL"
#: With the entries a correction replaced: what frames a session recalled with them.
_KEPT = "e.forgotten_at IS NULL"
# A session's transcript: its entries, less what was derived from them or recorded about the run.
_TRANSCRIPT = f"e.source IS NOT '{DERIVED_SOURCE}' AND e.kind <> 'episode'"
_IN_SESSION = f"e.namespace = ? AND e.session = ? AND {_TRANSCRIPT}"
# An entry ``e`` of the session's transcript that is not its latest: a later one exists.
_LATER_IN_SESSION = ("SELECT 1 FROM entries f WHERE f.namespace = e.namespace AND f.session = e.session"
                     f" AND f.created_at >= e.created_at AND (f.created_at, f.pk) > (e.created_at, e.pk)"
                     f" AND {_TRANSCRIPT.replace('e.', 'f.')} AND {_CURRENT.replace('e.', 'f.')}")
# An entry ``stats`` counts: in the namespace and not expired.
_LIVE = "namespace = ? AND (expires_at IS NULL OR expires_at > ?)"


# The entries whose identity fields may hold a pseudonym (what a sealed value can belong to).
_PSEUDONYMISED_ENTRIES = """SELECT namespace, id, role, session, tags, superseded_by, metadata FROM entries
WHERE (instr(id, '<') OR instr(coalesce(role, ''), '<') OR instr(coalesce(session, ''), '<')
   OR instr(tags, '<') OR instr(coalesce(superseded_by, ''), '<') OR instr(metadata, '<'))"""
#: FTS5's own automerge (segments on a level before a writer's commit merges them), kept between gcs.
FTS5_AUTOMERGE = 4
#: Entries (by pk) one read of drop_unused_identities covers, without the lock.
IDENTITY_SCAN_PKS = 2000
#: Sealed rows one chunk of its deletes takes (the first chunk's, the least, the most).
IDENTITY_ROWS = (100, 10, 5000)

# Set by migration 0013 while a file's derived entries' keyword rows are still in ``entries_fts``.
_DERIVED_TO_MOVE = "keywords.derived_to_move"


class SQLiteStorage(Storage):
    """Entries and their derived rows in one SQLite file (``":memory:"`` for a throwaway one)."""

    engine = "sqlite"
    rekeys_pseudonyms = True

    def __init__(self, path: str | os.PathLike[str], *, read_only: bool = False,
                 cache_kib: int = CACHE_SIZE_KIB) -> None:
        self.path: Path | str = ":memory:" if str(path) == ":memory:" else Path(path)
        #: The file as a sqlite-utils ``Database``: for looking (tables, schema, rows), not for writing
        #: around the store.
        self.db = connect(self.path, read_only=read_only, cache_kib=cache_kib)
        #: The raw connection, for the storage of other tables in the same file (episodes, skills,
        #: the orchestrator's runs), whose writes join this storage's transactions.
        self.conn: Connection = self.db.conn
        self.read_only = is_read_only(self.conn)
        self.embedder: Embedder | None = None
        self.keywords = FTS5Keywords(self.conn, self.index_texts)
        self.derived_keywords = FTS5Keywords(self.conn, self.index_texts, KEYWORD_TABLES[1])
        self._vectors: VectorIndex | None = None
        self._vectors_touched = False
        self._unindexed = False  # this transaction deleted keyword rows: their totals are settled after it
        self._in_transaction = False

    def __repr__(self) -> str:
        return f"<SQLiteStorage {str(self.path)!r}>"

    @property
    def location(self) -> str:
        return str(self.path)

    def migrate(self) -> bool:
        created = any(m.number == 1 for m in migrations.migrate(self.conn, read_only=self.read_only))
        if not self.read_only and self.setting(_DERIVED_TO_MOVE) is not None:
            self._move_derived_keywords()
        if not self.read_only and unsettled(self.conn):  # a crash came between a delete and its settling
            self._settle_totals()
        return created

    def _move_derived_keywords(self) -> None:
        """An older file's derived entries' keyword rows, into their own index (migration 0013)."""
        with self.transaction():
            pks = [pk for (pk,) in self.conn.execute(
                "SELECT pk FROM entries WHERE source = ? AND forgotten_at IS NULL", (DERIVED_SOURCE,))]
            for start in range(0, len(pks), 1000):
                chunk = pks[start:start + 1000]
                self._unindex(KEYWORD_TABLES[0], chunk)
                self.conn.executemany("INSERT INTO derived_fts (rowid, text) VALUES (?, ?)",
                                      self.index_texts(chunk).items())
            self.conn.execute("DELETE FROM settings WHERE key = ?", (_DERIVED_TO_MOVE,))

    def close(self) -> None:
        self.conn.close()

    # ---- settings of the file ------------------------------------------------------------------

    def redaction_secret(self, *, create: bool) -> str | None:
        return redaction_secret(self.conn, create=create)

    @property
    def keyword_only(self) -> bool:
        return is_keyword_only(self.conn)

    def set_keyword_only(self, keyword_only: bool) -> None:
        set_keyword_only(self.conn, keyword_only)

    def recorded_model(self) -> dict[str, str] | None:
        return VectorIndex.recorded_model(self.conn)

    def seal_identities(self, namespace: str, rows: Sequence[SealedIdentity]) -> None:
        # A value sealed again by the same key replaces its row's bytes (each seal has a fresh
        # nonce): how drop_unused_identities tells that a writer used the value meanwhile.
        self.conn.executemany("INSERT INTO identities (namespace, stored, key_id, sealed) VALUES (?, ?, ?, ?)"
                              " ON CONFLICT (namespace, stored) DO UPDATE SET sealed = excluded.sealed"
                              " WHERE key_id = excluded.key_id", [(namespace, *row) for row in rows])

    def sealed_identities(self, namespace: str, stored: Sequence[str]) -> list[SealedIdentity]:
        found: list[SealedIdentity] = []
        for start in range(0, len(stored), 500):
            chunk = stored[start:start + 500]
            found += [SealedIdentity(row[0], row[1], bytes(row[2])) for row in self.conn.execute(
                f"SELECT stored, key_id, sealed FROM identities WHERE namespace = ? AND stored IN ({', '.join('?' * len(chunk))})",
                (namespace, *chunk))]
        return found

    def drop_unused_identities(self) -> int:
        # Telling which sealed values no entry holds reads every entry holding a pseudonym, the
        # whole table's pages (the columns read come after the text): under the write lock that
        # held writers for seconds on a 2 GB file. So it is read without the lock, a range of pks
        # at a time, and the unused rows go in steps, each only while it holds the bytes read
        # before the entries were: a write that holds a value seals it again (seal_identities),
        # so one a writer used meanwhile, wherever its entry is, stays.
        sealed = {(namespace, stored): bytes(blob) for namespace, stored, blob in self.conn.execute(
            "SELECT namespace, stored, sealed FROM identities WHERE stored <> namespace")}
        if not sealed:
            return 0
        used: set[tuple[str, str]] = set()
        last, after = self.conn.execute("SELECT coalesce(max(pk), 0) FROM entries").fetchone()[0], 0
        while after < last:
            used |= identity_values_in_use(self.conn.execute(
                f"{_PSEUDONYMISED_ENTRIES} AND pk > ? AND pk <= ?", (after, after + IDENTITY_SCAN_PKS)))
            after += IDENTITY_SCAN_PKS
        gone = [(*name, blob) for name, blob in sealed.items() if name not in used]
        done, dropped = 0, 0

        def chunk(size: int) -> bool:
            nonlocal done, dropped
            dropped += self.conn.executemany("DELETE FROM identities WHERE namespace = ? AND stored = ? AND sealed = ?",
                                             gone[done:done + size]).rowcount
            done += size
            return done < len(gone)

        if gone:
            in_steps(self.transaction, chunk, IDENTITY_ROWS, self.between_steps)
        return dropped

    def rekey_pseudonyms(self, rekey: Callable[[str], str],
                         reseal: Callable[[str, SealedIdentity], tuple[str, SealedIdentity]], *,
                         finished: Callable[[], bool], finish: Callable[[], None],
                         progress: Callable[[int, int], None] | None = None) -> int:
        changed = sqlite_rekey.rekey_tables(self.conn, rekey, reseal, finished=finished, finish=finish,
                                            progress=progress, reindex=self._reindex_pseudonymised_roles)
        try:  # no page of the file keeps a pseudonym keyed the old way
            self.rewrite()
        except StorageError as exc:
            logger.warning("%s — run `harness-mem gc --vacuum` when there is room, so no old pseudonym stays in"
                           " the file's free pages", exc)
        return changed

    def _reindex_pseudonymised_roles(self) -> None:
        # A role is in the keyword index's text: one holding a pseudonym is indexed again.
        if self.conn.execute("SELECT 1 FROM entries WHERE instr(coalesce(role, ''), '<') LIMIT 1").fetchone():
            self.rebuild_keyword_index()
            self.merge_keyword_index()

    def every_sealed_identity(self) -> Iterator[tuple[str, SealedIdentity]]:
        for row in self.conn.execute("SELECT namespace, stored, key_id, sealed FROM identities").fetchall():
            yield row[0], SealedIdentity(row[1], row[2], bytes(row[3]))

    def setting(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    # ---- transactions ----------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self._in_transaction:
            yield
            return
        self._in_transaction = True
        self._vectors_touched = False
        self._unindexed = False
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
        finally:
            self._in_transaction = False
        if generation is not None and self._vectors is not None:
            self._vectors.committed(generation)
        if self._unindexed:  # FTS5 has written its totals back: now what was deleted comes off them
            self._settle_totals()

    def _settle_totals(self) -> None:
        try:
            with write_transaction(self.conn):
                settle_totals(self.conn)
        except driver().OperationalError:
            pass  # busy past the timeout: the notes stay, and the next write or open settles them

    def _unindex(self, table: str, pks: Sequence[int]) -> None:
        """Take these entries out of a keyword index (inside a write transaction; see unindex)."""
        unindex(self.conn, table, pks)
        self._unindexed = True

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Inside a write transaction the reads already share one view, so nothing more is done."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")  # deferred: a read snapshot in WAL mode, taking no write lock
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def data_version(self) -> tuple[int, int]:
        return self.conn.total_changes, int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    @contextmanager
    def bulk(self, *, workers: int = 0) -> Iterator[None]:
        # Each commit copies the log into the file once it passes wal_autocheckpoint pages (1,000 by
        # default). An import's commits of a few thousand rows each touch pages all over the indexes,
        # which were copied again at nearly every commit: 100k rows spent a quarter of their write
        # time there. Copied every BULK_CHECKPOINT_PAGES pages (64 MB; 100k rows write about 180 MB
        # of log) and once at the end, they are copied a few times, and the log stays bounded.
        usual = self.conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        self.conn.execute(f"PRAGMA wal_autocheckpoint = {BULK_CHECKPOINT_PAGES}")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA wal_autocheckpoint = {usual}")
        if not self.read_only:
            try:
                self.conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            except driver().OperationalError:  # a full disk, say: what was written is safe in the log
                pass  # and the next checkpoint copies it

    def stepwise(self) -> AbstractContextManager[None]:
        return sqlite_files.checkpoints_between_steps(self.conn)

    def between_steps(self) -> None:
        sqlite_files.between_steps(self.conn)

    @contextmanager
    def without_waiting(self) -> Iterator[None]:
        self.conn.execute("PRAGMA busy_timeout = 0")
        try:
            yield
        finally:
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")

    def is_busy(self, exc: BaseException) -> bool:
        text = str(exc).lower()
        return isinstance(exc, driver().OperationalError) and ("locked" in text or "busy" in text)

    # ---- the vector index ------------------------------------------------------------------------

    def use_embedder(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self._vectors = None

    def vectors_bound(self, *, writing: bool = True) -> bool:
        return self.vector_index(writing=writing) is not None

    def vector_index(self, *, writing: bool = True) -> VectorIndex | None:
        """The vector index for this storage's embedder (attached on first use), or None without one.

        A reader (``writing=False``) never turns a keyword-only file into one with vectors, and
        never writes to a read-only one: for it there is then no index to search.
        """
        if self.embedder is None:
            return None
        if self._vectors is None:
            index = VectorIndex(self.conn, self.embedder)
            if not index.attached():
                if not writing and (self.read_only or self.keyword_only):
                    return None
                with self.transaction():
                    index.attach()
            self._vectors = index
        return self._vectors

    def check_model(self) -> str:
        assert self.embedder is not None
        index = VectorIndex(self.conn, self.embedder)
        index.check_model()
        return f"{index.identity()['name']}, {index.dim} dimensions"

    def model_differs(self) -> bool:
        recorded = self.recorded_model()
        return (self.embedder is not None and recorded is not None
                and recorded != VectorIndex(self.conn, self.embedder).identity())

    def embed_new(self, rows: Sequence[Row], on_conflict: OnConflict) -> Vectors:
        if self.vector_index() is None:
            return {}
        todo = list(rows)
        if on_conflict == "ignore":  # re-importing a file must not re-embed what is stored
            stored = set()
            for namespace in {row.namespace for row in rows}:
                ids = [row.id for row in rows if row.namespace == namespace]
                stored |= {(namespace, found) for found in self._stored_ids(namespace, ids)}
            todo = [row for row in rows if (row.namespace, row.id) not in stored]
        if not todo:
            return {}
        assert self.embedder is not None
        embedded = embed_entries(self.embedder, [(row.content, row.role, row.kind) for row in todo])
        return {id(row): embedding for row, embedding in zip(todo, embedded, strict=True)}

    def _stored_ids(self, namespace: str, ids: Sequence[str]) -> list[str]:
        return [found[0] for found in self.conn.execute(
            "SELECT id FROM entries WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
            (namespace, json.dumps(list(ids))),
        )]

    # ---- writes ------------------------------------------------------------------------------------

    def write(self, rows: Sequence[Row], on_conflict: OnConflict, vectors: Vectors | None = None) -> list[Row]:
        index = self.vector_index()
        # Embed before taking the write lock: a model call must not hold up other writers.
        if vectors is None:
            vectors = self.embed_new(rows, on_conflict) if index else {}
        with self.transaction():
            batch = self._resolve_conflicts(list(rows), on_conflict)
            if not batch:
                return []
            texts = self._index_texts(batch)  # before the batch's rows exist
            # Every row's pk is NULL, so SQLite numbers them on from the largest pk, and the write lock
            # is ours until COMMIT: their pks are known, and the index rows can go in as one call.
            first = self.conn.execute("SELECT coalesce(max(pk), 0) + 1 FROM entries").fetchone()[0]
            pks = range(first, first + len(batch))
            if all(map(_NOT_YET.__eq__, map(_later_values, batch))):  # none carries a later write's columns
                self.conn.executemany(_INSERT_NEW, map(_new_values, batch))
            else:  # a copy of a stored entry, its correction included
                self.conn.executemany(_INSERT_ALL, batch)
            if self.conn.execute("SELECT last_insert_rowid()").fetchone()[0] != pks[-1]:
                raise StorageError("entries were numbered out of sequence — run `harness-mem doctor`")
            self._index_keywords(zip(pks, (row.source for row in batch), texts, strict=True))
            if index is not None:
                late = [row for row in batch if id(row) not in vectors]  # raced in since the pre-check: rare
                if late:
                    vectors.update(zip(map(id, late), embed_entries(index.embedder, [(r.content, r.role, r.kind) for r in late]),
                                       strict=True))
                index.write(
                    [VectorRow(pk, row.namespace, row.kind, row.session, row.created_at)
                     for pk, row in zip(pks, batch, strict=True)],
                    np.stack([vectors[id(row)].vector for row in batch]),
                    [vectors[id(row)].passages for row in batch],
                )
                self._vectors_touched = True
        return batch

    def _index_keywords(self, written: Iterable[tuple[int, str | None, str]]) -> None:
        """Put each (pk, source, index text) in its lane's keyword index (see :func:`keyword_table`)."""
        lanes: dict[str, list[tuple[int, str]]] = {}
        for pk, source, text in written:
            lanes.setdefault(keyword_table(source), []).append((pk, text))
        for table, pairs in lanes.items():
            self.conn.executemany(f"INSERT INTO {table} (rowid, text) VALUES (?, ?)", pairs)

    def _resolve_conflicts(self, batch: list[Row], on_conflict: OnConflict) -> list[Row]:
        """The rows to insert once ids already stored (or repeated in the batch) are settled."""
        def stored(namespace: str, ids: list[str]) -> list[tuple[str, int]]:
            return [(entry_id, pk) for entry_id, pk in self.conn.execute(
                "SELECT id, pk FROM entries WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))",
                (namespace, json.dumps(ids)),
            ).fetchall()]

        return settle_conflicts(batch, on_conflict, stored, self._delete_pk)

    def delete(self, namespace: str, entry_id: str) -> bool:
        with self.transaction():
            row = self.conn.execute(
                "SELECT pk FROM entries WHERE namespace = ? AND id = ?", (namespace, entry_id)
            ).fetchone()
            if row is None:
                return False
            self._delete_pk(row[0])
        return True

    # ---- the sync log ------------------------------------------------------------------------------

    def log_operations(self, operations: Sequence[Operation], *, chunk: str | None = None,
                       text: bool = True) -> None:
        self.conn.executemany(
            "INSERT OR IGNORE INTO sync_ops (op_hash, device, hlc_wall, hlc_tick, namespace, entry_id, related_id, op,"
            " operation, origin_chunk) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(op.hash, op.device, *op.hlc, op.ns, op.id, related_id(op), op.op, op.canonical().decode() if text else None,
              chunk) for op in operations])
        self.conn.executemany(
            "INSERT OR IGNORE INTO sync_forgotten (namespace, entry_id, hlc_wall, hlc_tick) VALUES (?, ?, ?, ?)",
            [(op.ns, entry_id, *op.hlc) for op in operations if op.op == "forget"
             for entry_id in op.body.ids])  # type: ignore[union-attr]

    def last_stamp(self) -> Stamp | None:
        found = self.conn.execute(
            "SELECT hlc_wall, hlc_tick FROM sync_ops ORDER BY hlc_wall DESC, hlc_tick DESC LIMIT 1").fetchone()
        return None if found is None else Stamp(*found)

    def logged_operations(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str, str | None]]:
        return [(seq, op_hash, operation) for seq, op_hash, operation in self.conn.execute(
            "SELECT seq, op_hash, operation FROM sync_ops WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit))]

    def known_operations(self, hashes: Sequence[str]) -> set[str]:
        return {found for (found,) in self.conn.execute(
            "SELECT op_hash FROM sync_ops WHERE op_hash IN (SELECT value FROM json_each(?))", (json.dumps(list(hashes)),))}

    def logged_about(self, namespace: str, entry_id: str, op: str) -> list[tuple[Stamp, str | None]]:
        return [(Stamp(wall, tick), text) for wall, tick, text in self.conn.execute(
            "SELECT hlc_wall, hlc_tick, operation FROM sync_ops WHERE namespace = ? AND entry_id = ? AND op = ?"
            " ORDER BY hlc_wall, hlc_tick", (namespace, entry_id, op))]

    def logged_supersedes(self, namespace: str, entry_ids: Sequence[str]) -> list[str]:
        ids = json.dumps(list(entry_ids))
        # Two lookups, one index each (an OR of the two would read the whole log).
        return [text for (text,) in self.conn.execute(
            "SELECT operation FROM sync_ops WHERE namespace = ? AND entry_id IN (SELECT value FROM json_each(?))"
            " AND op = 'supersede' UNION SELECT operation FROM sync_ops INDEXED BY sync_ops_by_related"
            " WHERE namespace = ? AND related_id IN (SELECT value FROM json_each(?)) AND related_id IS NOT NULL",
            (namespace, ids, namespace, ids))]

    def logged_stamps(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, list[Stamp]]:
        ids = json.dumps(list(entry_ids))
        if op == "forget":  # a forget of several ids is logged once: its ids are noted apart
            return stamps_by_id(self.conn.execute(
                "SELECT entry_id, hlc_wall, hlc_tick FROM sync_forgotten WHERE namespace = ?"
                " AND entry_id IN (SELECT value FROM json_each(?)) ORDER BY hlc_wall, hlc_tick", (namespace, ids)))
        return stamps_by_id(self.conn.execute(
            "SELECT entry_id, hlc_wall, hlc_tick FROM sync_ops WHERE namespace = ?"
            " AND entry_id IN (SELECT value FROM json_each(?)) AND op = ? ORDER BY hlc_wall, hlc_tick",
            (namespace, ids, op)))

    def empty_adds_before(self, namespace: str, entry_id: str, stamp: Stamp) -> None:
        self.conn.execute("UPDATE sync_ops SET operation = NULL WHERE namespace = ? AND entry_id = ? AND op = 'add'"
                          " AND operation IS NOT NULL AND (hlc_wall < ? OR (hlc_wall = ? AND hlc_tick < ?))",
                          (namespace, entry_id, stamp.wall, stamp.wall, stamp.tick))

    def selector_forgets(self, namespace: str, after: Stamp) -> list[str]:
        return [text for (text,) in self.conn.execute(
            "SELECT operation FROM sync_ops INDEXED BY sync_ops_forgets WHERE op = 'forget' AND namespace = ?"
            " AND hlc_wall >= ? AND (hlc_wall > ? OR hlc_tick > ?)"
            " AND json_extract(operation, '$.body.selector') IS NOT NULL ORDER BY hlc_wall, hlc_tick",
            (namespace, after.wall, after.wall, after.tick))]

    def added_twice(self) -> list[tuple[str, str]]:
        return [(namespace, entry_id) for namespace, entry_id in self.conn.execute(
            "SELECT namespace, entry_id FROM sync_ops WHERE op = 'add' AND operation IS NOT NULL"
            " GROUP BY namespace, entry_id HAVING count(*) > 1 ORDER BY namespace, entry_id")]

    def latest_logged(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, str]:
        found: dict[str, str] = {}
        for entry_id, text in self.conn.execute(
                "SELECT entry_id, operation FROM sync_ops WHERE namespace = ? AND entry_id IN (SELECT value FROM json_each(?))"
                " AND op = ? AND operation IS NOT NULL ORDER BY hlc_wall, hlc_tick", (namespace, json.dumps(list(entry_ids)), op)):
            found[entry_id] = text
        return found

    def set_expiry(self, namespace: str, entry_id: str, expires_at: int) -> None:
        self.conn.execute("UPDATE entries SET expires_at = ? WHERE namespace = ? AND id = ? AND forgotten_at IS NULL",
                          (expires_at, namespace, entry_id))

    def note_written(self, hashes: Sequence[str], chunk: str | None) -> None:
        self.conn.execute("UPDATE sync_ops SET origin_chunk = ? WHERE op_hash IN (SELECT value FROM json_each(?))",
                          (chunk, json.dumps(list(hashes))))

    def chunks_holding_forgotten(self, device: str) -> list[str]:
        return [chunk for (chunk,) in self.conn.execute(
            "SELECT DISTINCT origin_chunk FROM sync_ops WHERE device = ? AND op = 'add' AND operation IS NULL"
            " AND origin_chunk IS NOT NULL", (device,))]

    def forgotten_adds(self, hashes: Sequence[str]) -> set[str]:
        return {found for (found,) in self.conn.execute(
            "SELECT op_hash FROM sync_ops WHERE op = 'add' AND operation IS NULL"
            " AND op_hash IN (SELECT value FROM json_each(?))", (json.dumps(list(hashes)),))}

    def chunks_read(self, device: str) -> dict[str, str]:
        return dict(self.conn.execute("SELECT chunk, state FROM sync_chunks WHERE device = ?", (device,)).fetchall())

    def quarantined_chunks(self) -> list[tuple[str, str, str | None]]:
        return [(device, chunk, reason) for device, chunk, reason in self.conn.execute(
            "SELECT device, chunk, reason FROM sync_chunks WHERE state = 'quarantined' ORDER BY device, chunk")]

    def note_chunk(self, device: str, chunk: str, state: str, reason: str | None = None) -> None:
        self.conn.execute("INSERT INTO sync_chunks (device, chunk, state, reason) VALUES (?, ?, ?, ?)"
                          " ON CONFLICT (device, chunk) DO UPDATE SET state = excluded.state, reason = excluded.reason",
                          (device, chunk, state, reason))

    def _delete_pk(self, pk: int) -> None:
        row = self.conn.execute(
            "SELECT namespace, session, created_at, kind FROM entries WHERE pk = ?", (pk,)
        ).fetchone()
        self._drop_derived(pk)
        self.conn.execute("DELETE FROM entries WHERE pk = ?", (pk,))
        if row is not None and row[3] == "turn" and row[1]:
            self._reindex_turn_after(row[0], row[1], row[2], pk)

    def _drop_derived(self, pk: int) -> None:
        """Remove an entry's keyword and vector rows (inside a write transaction)."""
        for table in KEYWORD_TABLES:
            self._unindex(table, [pk])
        if self._vectors is not None:
            self._vectors.delete(pk)
        elif has_vector_table(self.conn):  # vectors made by another process's embedder: vec0 has no cascade
            delete_vector(self.conn, pk)
        self._vectors_touched = True
        # The sync log lets go of its words too (its hash stays: a replay of it is recognised).
        self.conn.execute("UPDATE sync_ops SET operation = NULL WHERE op = 'add' AND operation IS NOT NULL"
                          " AND (namespace, entry_id) = (SELECT namespace, id FROM entries WHERE pk = ?)", (pk,))

    def forget(self, pks: Sequence[int], when: int) -> None:
        with self.transaction():
            for pk in pks:
                self._drop_derived(pk)
                self.conn.execute("UPDATE entries SET forgotten_at = ? WHERE pk = ?", (when, pk))
                # The next turn of its session stops carrying its text.
                row = self.conn.execute(
                    "SELECT namespace, session, created_at, kind FROM entries WHERE pk = ?", (pk,)
                ).fetchone()
                if row is not None and row[3] == "turn" and row[1]:
                    self._reindex_turn_after(row[0], row[1], row[2], pk)
            # A skill distilled from a forgotten episode quotes its situation: it goes, with its history.
            self.conn.execute(
                "DELETE FROM skills WHERE pk IN (SELECT s.skill_pk FROM skill_sources s"
                " JOIN episodes ep ON ep.pk = s.episode_pk"
                " JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
                " WHERE e.pk IN (SELECT value FROM json_each(?)) AND s.role = 'distilled')",
                (json.dumps(list(pks)),),
            )

    def move(self, pks: Sequence[int], namespace: str) -> None:
        with self.transaction():
            before = self.rows(pks)
            episodes = [(namespace, row.namespace, row.id) for row in before.values() if row.kind == "episode"]
            if episodes:  # an episode's row follows its entry (below): their link is checked at commit
                self.conn.execute("PRAGMA defer_foreign_keys = ON")
            self.conn.execute("UPDATE entries SET namespace = ? WHERE pk IN (SELECT value FROM json_each(?))",
                              (namespace, json.dumps(list(pks))))
            if self._vectors is not None:
                self._vectors.move(pks, namespace)
            else:  # vectors made by another process's embedder: moved all the same
                move_vectors(self.conn, pks, namespace)
            self._vectors_touched = True
            # An episode's row (the experience store's) goes with its entry, or its old namespace would
            # keep listing it and the new one never would.
            self.conn.executemany("UPDATE episodes SET namespace = ? WHERE namespace = ? AND entry_id = ?", episodes)
            after = self.rows(pks)  # as they are now, in the namespace they went to
            for pk, row in sorted(before.items(), key=lambda item: (item[1].created_at, item[0])):
                if row.kind == "turn" and row.session:
                    self._unindex(keyword_table(row.source), [pk])
                    self._index_keywords([(pk, row.source, self._index_texts([after[pk]], before_pk=pk)[0])])
                    self._reindex_turn_after(row.namespace, row.session, row.created_at, pk)
                    self._reindex_turn_after(namespace, row.session, row.created_at, pk)

    def derived_from(self, pks: Sequence[int]) -> list[int]:
        found: list[int] = []
        for start in range(0, len(pks), 500):
            chunk = list(pks[start:start + 500])
            marks = ", ".join("?" * len(chunk))
            # The sessions' entries (by their index), each citation probed in the chunk's ids (a list
            # SQLite builds once): joining the chunk's rows instead scans each session once per row.
            found += [row[0] for row in self.conn.execute(
                "SELECT DISTINCT d.pk FROM entries d, json_each(d.metadata, '$.source_turns') AS cited"
                f" WHERE (d.namespace, d.session) IN (SELECT namespace, session FROM entries WHERE pk IN ({marks}))"
                " AND d.kind != 'turn' AND d.forgotten_at IS NULL"
                f" AND (d.namespace, cited.value) IN (SELECT namespace, id FROM entries WHERE pk IN ({marks}))"
                f" AND d.pk NOT IN ({marks})",
                (*chunk, *chunk, *chunk),
            )]
        return sorted(set(found))

    def citing(self, pks: Sequence[int], selection: Selection) -> list[tuple[int, int]]:
        if not pks:
            return []
        clause, params = where(selection, "d")
        # The turns' sessions' entries (by their index), each citation matched against the turns' ids.
        return [(int(d), int(t)) for d, t in self.conn.execute(
            "WITH cited AS (SELECT pk, namespace, session, id FROM entries WHERE pk IN (SELECT value FROM json_each(?)))"
            " SELECT d.pk, cited.pk FROM entries d, json_each(d.metadata, '$.source_turns') AS source, cited"
            " WHERE (d.namespace, d.session) IN (SELECT namespace, session FROM cited)"
            " AND d.kind != 'turn' AND cited.namespace = d.namespace AND cited.id = source.value"
            f" AND {clause}",
            (json.dumps(list(pks)), *params),
        )]

    def rebuild_episodes(self, pks: Sequence[int]) -> None:
        self.conn.execute(
            "UPDATE consolidations SET last_pk = 0, turns = 0 WHERE EXISTS (SELECT 1 FROM episodes ep"
            " JOIN entries e ON e.namespace = ep.namespace AND e.id = ep.entry_id"
            " WHERE e.pk IN (SELECT value FROM json_each(?)) AND ep.namespace = consolidations.namespace"
            " AND ep.id = consolidations.episode_id)",
            (json.dumps(list(pks)),),
        )

    def mark_superseded(self, pk: int, by: str | None, when: int | None) -> None:
        self.conn.execute("UPDATE entries SET superseded_by = ?, superseded_at = ? WHERE pk = ?", (by, when, pk))

    def rename(self, pk: int, entry_id: str) -> None:
        self.conn.execute("UPDATE entries SET id = ? WHERE pk = ?", (entry_id, pk))

    def replaced_by(self, namespace: str, entry_ids: Sequence[str]) -> list[tuple[int, str, str]]:
        return [(pk, entry_id, by) for pk, entry_id, by in self.conn.execute(
            "SELECT pk, id, superseded_by FROM entries INDEXED BY entries_superseded WHERE namespace = ?"
            " AND superseded_by IN (SELECT value FROM json_each(?)) AND forgotten_at IS NULL",
            (namespace, json.dumps(list(entry_ids))))]

    def set_tags(self, pk: int, tags: str) -> None:
        self.conn.execute("UPDATE entries SET tags = ? WHERE pk = ?", (tags, pk))

    def purge(self, now: int, *, namespace: str | None = None, forgotten: bool = True,
              limit: int | None = None) -> tuple[int, int]:
        with self.transaction():
            # Each kind found through its own partial index: one query with OR scanned the table,
            # reading every row's text to reach its flags, from the start again for every batch.
            scope = " AND namespace = ?" if namespace is not None else ""
            where = [namespace] if namespace is not None else []
            rows: list[tuple[int, bool]] = []
            if forgotten:
                rows += [(pk, True) for (pk,) in self.conn.execute(
                    f"SELECT pk FROM entries INDEXED BY entries_forgotten WHERE forgotten_at IS NOT NULL{scope} LIMIT ?",
                    (*where, -1 if limit is None else limit))]
            if limit is None or len(rows) < limit:
                rows += [(pk, bool(was_forgotten)) for pk, was_forgotten in self.conn.execute(
                    "SELECT pk, forgotten_at IS NOT NULL FROM entries INDEXED BY entries_by_expiry"
                    " WHERE expires_at IS NOT NULL AND expires_at <= ?"
                    f" AND (forgotten_at IS NULL OR NOT ?){scope} LIMIT ?",
                    (now, forgotten, *where, -1 if limit is None else limit - len(rows)))]
            for pk, _ in rows:
                self._delete_pk(pk)
        tombstones = sum(1 for _, was_forgotten in rows if was_forgotten)
        return len(rows) - tombstones, tombstones

    def renew_expiry(self, namespace: str, ids: Sequence[str], now: int) -> dict[str, int]:
        if not ids:
            return {}
        with self.transaction():
            renewed = self.conn.execute(
                "UPDATE entries SET expires_at = ? + ttl_ms WHERE namespace = ? AND id IN (SELECT value FROM json_each(?))"
                " AND ttl_ms IS NOT NULL AND forgotten_at IS NULL AND expires_at > ? RETURNING id, expires_at",
                (now, namespace, json.dumps(list(ids)), now),
            ).fetchall()
        return {entry_id: int(expires) for entry_id, expires in renewed}

    def has_expired(self, now: int) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT 1", (now,)
        ).fetchone() is not None

    # ---- the keyword index's texts -------------------------------------------------------------------

    def _index_texts(self, rows: Sequence[Row], *, before_pk: int | None = None, lookup: bool = True) -> list[str]:
        """Each row's keyword-index text; a session's first turn here looks up the stored turn
        before it (below ``before_pk`` when given)."""
        return index_texts_of(rows, (lambda row: self._previous_turn(row, before_pk)) if lookup else None)

    def index_texts(self, pks: Sequence[int]) -> dict[int, str]:
        """The keyword-index text of each stored entry, as its write made it (keyword ranking counts
        term frequencies in it): one query for all, each turn with the one before it in its session."""
        rows = self.conn.execute(
            "SELECT e.pk, e.content, e.role, e.kind, e.session, e.created_at, p.content, p.role"
            " FROM json_each(?) AS c CROSS JOIN entries e ON e.pk = c.value"
            " LEFT JOIN entries p ON p.pk = (SELECT q.pk FROM entries q WHERE e.kind = 'turn'"
            " AND q.namespace = e.namespace AND q.session = e.session AND q.kind = 'turn' AND q.forgotten_at IS NULL"
            " AND (q.created_at < e.created_at OR (q.created_at = e.created_at AND q.pk < e.pk))"
            " ORDER BY q.created_at DESC, q.pk DESC LIMIT 1)",
            (json.dumps(list(pks)),),
        ).fetchall()
        return {
            pk: keyword.entry_index_text(content, role, kind, session, created_at,
                            (previous, previous_role) if previous is not None else None)
            for pk, content, role, kind, session, created_at, previous, previous_role in rows
        }

    def _previous_turn(self, row: Row, before_pk: int | None) -> tuple[str, str | None] | None:
        found = self.conn.execute(
            "SELECT content, role FROM entries WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND forgotten_at IS NULL AND (created_at < ? OR (created_at = ? AND pk < ?)) ORDER BY created_at DESC, pk DESC LIMIT 1",
            (row.namespace, row.session, row.created_at, row.created_at, before_pk if before_pk is not None else 2**62),
        ).fetchone()
        return (found[0], found[1]) if found else None

    def _reindex_turn_after(self, namespace: str, session: str, created_ms: int, pk: int) -> None:
        """Rewrite the index row of the turn that followed a deleted one: it held that turn's text."""
        following = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE namespace = ? AND session = ? AND kind = 'turn'"
            " AND forgotten_at IS NULL AND (created_at > ? OR (created_at = ? AND pk > ?)) ORDER BY created_at, pk LIMIT 1",
            (namespace, session, created_ms, created_ms, pk),
        ).fetchone()
        if following is None:
            return
        row, following_pk = Row._make(following), int(following[0])
        text = self._index_texts([row], before_pk=following_pk)[0]
        self._unindex(keyword_table(row.source), [following_pk])
        self._index_keywords([(following_pk, row.source, text)])

    # ---- reads ---------------------------------------------------------------------------------------

    def get(self, namespace: str, entry_id: str, now: int) -> Row | None:
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.id = ? AND e.forgotten_at IS NULL"
            " AND (e.expires_at IS NULL OR e.expires_at > ?)",
            (namespace, entry_id, now),
        ).fetchone()
        return None if row is None else Row._make(row)

    def get_many(self, namespace: str, entry_ids: Sequence[str], now: int) -> dict[str, Row]:
        if not entry_ids:
            return {}
        found = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.id IN (SELECT value FROM json_each(?))"
            " AND e.forgotten_at IS NULL AND (e.expires_at IS NULL OR e.expires_at > ?)",
            (namespace, json.dumps(list(entry_ids)), now),
        ).fetchall()
        return {row.id: row for row in map(Row._make, found)}

    def rows(self, pks: Sequence[int]) -> dict[int, Row]:
        if not pks:
            return {}
        found = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.pk IN (SELECT value FROM json_each(?))", (json.dumps(list(pks)),)
        ).fetchall()
        return {row[0]: Row._make(row) for row in found}

    def select(self, selection: Selection, *, limit: int | None = None, offset: int = 0,
               newest_first: bool = False, after: str | None = None) -> Iterator[Row]:
        clause, params = where(selection)
        kinds = selection.filters.kind
        if kinds is not None and "turn" not in ([kinds] if isinstance(kinds, str) else kinds):
            clause += " AND e.kind <> 'turn'"  # in so many words: what lets the partial index of other kinds serve
        if after is not None:
            position = self._position(selection.namespace, after)
            if position is None:
                return
            condition, bound = after_position('e', position, newest_first, '?')
            clause, params = f"{clause} AND {condition}", [*params, *bound]
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {COLUMNS} FROM entries e WHERE {clause} ORDER BY e.created_at {order}, e.pk {order}"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            params += [-1 if limit is None else limit, offset]
        for row in self.conn.execute(sql, params):
            yield Row._make(row)

    def count(self, selection: Selection) -> int:
        clause, params = where(selection)
        return int(self.conn.execute(f"SELECT count(*) FROM entries e WHERE {clause}", params).fetchone()[0])

    def pks(self, selection: Selection, *, entry_id: str | None = None) -> list[int]:
        clause, params = where(selection)
        if entry_id is not None:
            clause, params = f"{clause} AND e.id = ?", [*params, entry_id]
        return [pk for (pk,) in self.conn.execute(f"SELECT e.pk FROM entries e WHERE {clause}", params)]

    def duplicate_of(self, namespace: str, kind: str, content_hash: str, now: int) -> str | None:
        found = self.conn.execute(
            "SELECT id FROM entries WHERE namespace = ? AND kind = ? AND content_hash = ?"
            " AND superseded_by IS NULL AND forgotten_at IS NULL AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
            (namespace, kind, content_hash, now),
        ).fetchone()
        return str(found[0]) if found else None

    def current(self, namespace: str, entry_id: str) -> tuple[int, str | None] | None:
        found = self.conn.execute(
            "SELECT pk, superseded_by FROM entries WHERE namespace = ? AND id = ? AND forgotten_at IS NULL",
            (namespace, entry_id),
        ).fetchone()
        return None if found is None else (int(found[0]), found[1])

    def kept(self, namespace: str, *, entry_id: str | None = None, superseded_by: str | None = None) -> Row | None:
        column, value = ("id", entry_id) if entry_id is not None else ("superseded_by", superseded_by)
        row = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.forgotten_at IS NULL AND e.{column} = ?"
            " ORDER BY e.pk LIMIT 1", (namespace, value),
        ).fetchone()
        return None if row is None else Row._make(row)

    def pk_of(self, namespace: str, entry_id: str) -> int | None:
        row = self.conn.execute("SELECT pk FROM entries WHERE namespace = ? AND id = ?", (namespace, entry_id)).fetchone()
        return None if row is None else int(row[0])

    def rows_after(self, pk: int, limit: int) -> list[Row]:
        return [Row._make(r) for r in self.conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE pk > ? AND forgotten_at IS NULL ORDER BY pk LIMIT ?", (pk, limit))]

    def stored_vectors(self, pks: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        if not pks or not has_vector_table(self.conn):
            return {}
        return {int(pk): np.asarray(json.loads(values), dtype=np.float32) for pk, values in self.conn.execute(
            "SELECT v.rowid, vec_to_json(v.embedding) FROM json_each(?) AS j CROSS JOIN entries_vec v ON v.rowid = j.value",
            (json.dumps(list(pks)),))}

    # ---- what recall asks ------------------------------------------------------------------------

    def speakers(self, pks: Sequence[int]) -> list[tuple[int, str | None, str | None]]:
        return [(pk, role, session) for pk, role, session in self.conn.execute(
            "SELECT pk, role, session FROM entries WHERE pk IN (SELECT value FROM json_each(?))", (json.dumps(list(pks)),)
        )]

    def roles_named(self, namespace: str, words: Sequence[str]) -> list[str]:
        return [row[0] for row in self.conn.execute(
            "SELECT DISTINCT role FROM entries WHERE namespace = ? AND lower(role) IN (SELECT value FROM json_each(?))",
            (namespace, json.dumps(list(words))),
        )]

    def nearest(self, vector: npt.NDArray[np.float32], k: int, selection: Selection, *,
                exact_order: bool = True, extra: int = 0) -> list[tuple[int, float]]:
        index = self.vector_index()
        assert index is not None  # bound, and checked complete, by the caller
        namespace, filters = selection.namespace, selection.filters
        # Recall's default lane leaves derived entries out (asked only where some exist): the index
        # knows nothing of them, so it is asked for more and they are dropped.
        lane = filters.derived is False and filters.as_of is None
        base = selection.but(derived=None) if lane else selection
        in_index = _vector_filter(base)
        if base.filters.is_empty or in_index is not None:
            # The index keeps superseded entries' vectors (include_superseded finds them): ask for as
            # many more as there are such entries, and drop them.
            hidden = set() if filters.include_superseded else self._superseded_pks(namespace)
            want = k + len(hidden) + (k if lane else 0)
            while True:
                found = index.search(vector, want, namespace, where=in_index, exact_order=exact_order, extra=extra)
                kept = [hit for hit in found if hit[0] not in hidden]
                if lane:
                    kept = self._not_derived(kept)
                if len(kept) >= k or len(found) < want or want >= MAX_KNN:
                    break
                want = min(want * 4, MAX_KNN)
            if len(kept) < k and len(found) >= want:
                return index.search(vector, k, namespace, self.pks(selection), exact_order=exact_order, extra=extra)
            found = kept[:k + extra]
        else:
            # First without the expiry test, which needs every row and not only the index; the hits
            # are checked below, and an expired one sends the search round again with it.
            indexed = Selection(filters, namespace, selection.now, live=False)
            found = index.search(vector, k, namespace, self.pks(indexed), exact_order=exact_order, extra=extra)
        if self._all_pass(found, selection):
            return found
        return index.search(vector, k, namespace, self.pks(selection), exact_order=exact_order, extra=extra)

    def cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, float]:
        index = self.vector_index(writing=False)
        return dict(index.rescore(vector, list(pks), len(pks))) if index is not None and pks else {}

    def passages(self, pks: Sequence[int]) -> dict[int, list[Passage]]:
        return stored_passages(self.conn, pks)

    def passage_cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, list[Scored]]:
        return stored_passage_cosines(self.conn, vector, pks)

    def has_derived(self, namespace: str) -> bool:
        return self.conn.execute(
            "SELECT 1 FROM entries WHERE namespace = ? AND source = ? LIMIT 1", (namespace, DERIVED_SOURCE)
        ).fetchone() is not None

    def _not_derived(self, hits: list[tuple[int, float]]) -> list[tuple[int, float]]:
        derived = {row[0] for row in self.conn.execute(
            "SELECT pk FROM entries WHERE pk IN (SELECT value FROM json_each(?)) AND source = ?",
            (json.dumps([pk for pk, _ in hits]), DERIVED_SOURCE),
        )}
        return [hit for hit in hits if hit[0] not in derived]

    def _superseded_pks(self, namespace: str) -> set[int]:
        """The namespace's superseded entries (a partial index keeps this lookup small)."""
        return {pk for (pk,) in self.conn.execute(
            "SELECT pk FROM entries INDEXED BY entries_superseded WHERE namespace = ? AND superseded_by IS NOT NULL",
            (namespace,),
        )}

    def _all_pass(self, found: list[tuple[int, float]], selection: Selection) -> bool:
        """True when every hit meets every filter, expiry included (the index knows only some)."""
        clause, params = where(selection)
        passing = self.conn.execute(
            # CROSS JOIN: look the few hits up by pk, rather than scan the namespace for them.
            f"SELECT count(*) FROM json_each(?) AS hit CROSS JOIN entries e ON e.pk = hit.value WHERE {clause}",
            [json.dumps([pk for pk, _ in found]), *params],
        ).fetchone()[0]
        return bool(passing == len(found))

    def vector_counts(self) -> VectorCounts:
        # A keyword-only or read-only file this model has no vectors in binds no index: all missing.
        bound = self.vector_index(writing=False) is not None
        total = live_entries(self.conn)
        return VectorCounts(bound, total, missing_vectors(self.conn, total) if bound else total)

    def missing_vectors(self) -> int:
        return missing_vectors(self.conn)

    # ---- sessions ------------------------------------------------------------------------------------

    def neighbours(self, namespace: str, session: str, created_ms: int, pk: int, n: int, *,
                   include_superseded: bool = False) -> tuple[list[Row], list[Row]]:
        shown = _KEPT if include_superseded else _CURRENT
        condition = f"{_IN_SESSION} AND {shown}"
        params = (namespace, session, created_ms, created_ms, pk, n)
        before = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE {condition} AND (e.created_at < ? OR (e.created_at = ? AND e.pk < ?))"
            " ORDER BY e.created_at DESC, e.pk DESC LIMIT ?", params,
        ).fetchall()
        after = self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE {condition} AND (e.created_at > ? OR (e.created_at = ? AND e.pk > ?))"
            " ORDER BY e.created_at, e.pk LIMIT ?", params,
        ).fetchall()
        return [Row._make(row) for row in reversed(before)], [Row._make(row) for row in after]

    def still_there(self, namespace: str, ids: Sequence[str], *, include_superseded: bool = False) -> set[str]:
        shown = _KEPT if include_superseded else _CURRENT
        return {row[0] for row in self.conn.execute(
            "SELECT e.id FROM json_each(?) AS wanted CROSS JOIN entries e ON e.namespace = ? AND e.id = wanted.value"
            f" WHERE e.session IS NOT NULL AND {shown}",
            (json.dumps(list(ids)), namespace),
        )}

    def session_span(self, namespace: str, session: str, *, include_superseded: bool = False) -> SessionSpan:
        shown = _KEPT if include_superseded else _CURRENT
        turns, started, ended = self.conn.execute(
            f"SELECT count(*), min(e.created_at), max(e.created_at) FROM entries e WHERE {_IN_SESSION} AND {shown}",
            (namespace, session),
        ).fetchone()
        return SessionSpan(session, int(turns), started, ended)

    def bookends(self, namespace: str, session: str, *, include_superseded: bool = False) -> tuple[Row, Row]:
        shown = _KEPT if include_superseded else _CURRENT
        first, last = (self.conn.execute(
            f"SELECT {COLUMNS} FROM entries e WHERE {_IN_SESSION} AND {shown} ORDER BY e.created_at {order}, e.pk {order} LIMIT 1",
            (namespace, session),
        ).fetchone() for order in ("ASC", "DESC"))
        return Row._make(first), Row._make(last)

    def sessions(self, namespace: str, limit: int, offset: int, after: str | None = None) -> list[SessionSpan]:
        params: list[Any] = [namespace]
        cursor = ""
        if after is not None:
            position = self._session_position(namespace, after)
            if position is None:
                return []
            condition, bound = after_position('e', position, True, '?')
            cursor, params = f" AND {condition}", [*params, *bound]
        rows = self.conn.execute(
            # Newest entries first, each kept when it is its session's latest; then those sessions'
            # sizes. Both orders pinned: the planner otherwise may walk every entry and re-run the walk.
            f"WITH latest AS MATERIALIZED (SELECT e.session, e.created_at, e.pk FROM entries e INDEXED BY entries_by_time"
            f" WHERE e.namespace = ? AND e.session IS NOT NULL AND {_TRANSCRIPT} AND {_CURRENT}{cursor}"
            f" AND NOT EXISTS ({_LATER_IN_SESSION}) ORDER BY e.created_at DESC, e.pk DESC LIMIT ? OFFSET ?)"
            " SELECT l.session, count(*), min(e.created_at), max(e.created_at)"
            " FROM latest l CROSS JOIN entries e INDEXED BY entries_by_session"
            f" ON e.namespace = ? AND e.session = l.session AND {_TRANSCRIPT} AND {_CURRENT}"
            " GROUP BY l.session, l.created_at, l.pk ORDER BY l.created_at DESC, l.pk DESC",
            (*params, limit, offset, namespace),
        ).fetchall()
        return [SessionSpan(s, int(n), a, b) for s, n, a, b in rows]

    def session_rows(self, namespace: str, session: str, offset: int, limit: int,
                     after: str | None = None) -> list[Row]:
        params: list[Any] = [namespace, session]
        cursor = ""
        if after is not None:
            position = self._position(namespace, after)
            if position is None:
                return []
            condition, bound = after_position('e', position, False, '?')
            cursor, params = f" AND {condition}", [*params, *bound]
        rows = self.conn.execute(  # the session's index: with a time bound the planner may take the namespace's
            f"SELECT {COLUMNS} FROM entries e INDEXED BY entries_by_session WHERE {_IN_SESSION} AND {_CURRENT}{cursor}"
            " ORDER BY e.created_at, e.pk LIMIT ? OFFSET ?",
            (*params, limit, offset),
        ).fetchall()
        return [Row._make(row) for row in rows]

    def _position(self, namespace: str, entry_id: str) -> Position | None:
        """Where an entry stands in a list by time (forgotten or not: a page may start after one)."""
        found = self.conn.execute("SELECT created_at, pk FROM entries WHERE namespace = ? AND id = ?",
                                  (namespace, entry_id)).fetchone()
        return None if found is None else (int(found[0]), int(found[1]))

    def _session_position(self, namespace: str, session: str) -> Position | None:
        """Where a session stands in the list of sessions: its latest current transcript entry."""
        found = self.conn.execute(
            f"SELECT e.created_at, e.pk FROM entries e WHERE {_IN_SESSION} AND {_CURRENT}"
            " ORDER BY e.created_at DESC, e.pk DESC LIMIT 1", (namespace, session)).fetchone()
        return None if found is None else (int(found[0]), int(found[1]))

    # ---- rebuilding derived rows -------------------------------------------------------------------

    def rebuild_keyword_index(self) -> tuple[int, int]:
        # A step at a time, in pk order, the lock let go in between (one transaction for the whole
        # index held writers 1.6 s in the soak): each step takes its rows' index rows out and puts
        # the live ones back, each text with the turn before it as a write would make it. Index rows
        # whose entry is gone altogether go last. Recall is right all along: a row is re-made in the
        # transaction that takes the old one out.
        bounds = sqlite_files.KEYWORD_ROWS
        after, size, indexed = 0, bounds[0], 0
        while True:
            began = time.monotonic()
            with self.transaction():
                found = self.conn.execute(
                    "SELECT pk, forgotten_at IS NULL, source FROM entries WHERE pk > ? ORDER BY pk LIMIT ?",
                    (after, size)).fetchall()
                if not found:
                    break
                for table in KEYWORD_TABLES:
                    self._unindex(table, [pk for pk, _, _ in found])
                texts = self.index_texts([pk for pk, live, _ in found if live])
                self._index_keywords((pk, source, texts[pk]) for pk, _, source in found if pk in texts)
            after, indexed = found[-1][0], indexed + len(texts)
            if len(found) < size:
                break
            size = next_step(size, time.monotonic() - began, bounds)
            self.between_steps()
        # Read without the lock; each is deleted only if its entry is still not there.
        for table in KEYWORD_TABLES:
            strays = [pk for (pk,) in self.conn.execute(
                f"SELECT rowid FROM {table} WHERE rowid NOT IN (SELECT pk FROM entries)").fetchall()]
            if strays:
                with self.transaction():
                    self._unindex(table, [pk for (pk,) in self.conn.execute(
                        "SELECT value FROM json_each(?) WHERE value NOT IN (SELECT pk FROM entries)",
                        (json.dumps(strays),))])
            with self.transaction():
                recount_totals(self.conn, table)  # whatever drift an older file brought
        total = self.conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        return int(total), indexed

    def drop_vectors(self) -> int:
        with self.transaction():
            if self.embedder is not None and self.model_differs():
                index = VectorIndex(self.conn, self.embedder)
                dropped = index.count()
                index.clear()
            else:
                dropped = drop_vectors(self.conn)
            self._vectors_touched = True
        self._vectors = None
        return dropped

    def embed_missing(self, batch_size: int) -> tuple[int, int]:
        index = self.vector_index()
        assert index is not None
        rows = entries_without_vectors(self.conn, batch_size)
        if not rows:
            return 0, 0
        embedded = embed_entries(index.embedder, [(content, role, kind) for _, _, kind, _, content, role, _ in rows])  # outside the write lock
        with self.transaction():
            # Another process may have changed some of these entries while the model ran.
            keep = still_without_vectors(self.conn, rows)
            if keep:
                index.write([VectorRow(*rows[i][:4], rows[i][6]) for i in keep],
                            np.stack([embedded[i].vector for i in keep]), [embedded[i].passages for i in keep])
                self._vectors_touched = True
        return len(rows), len(keep)

    def count_all(self) -> int:
        return int(self.db["entries"].count)

    # ---- what stats and doctor report ----------------------------------------------------------------

    def kept_counts(self) -> list[tuple[str, str, int]]:
        return [(namespace, group, int(n)) for namespace, group, n in self.conn.execute(
            "SELECT namespace, key, value FROM entry_counts WHERE value <> 0")]

    def expired_groups(self, now: int) -> list[tuple[str, str, str | None, str | None, bool, int]]:
        # Through entries_by_expiry: only the entries that have an expiry and reached it are read.
        return [(namespace, kind, role, redactions, bool(forgotten), int(n))
                for namespace, kind, role, redactions, forgotten, n in self.conn.execute(
            "SELECT namespace, kind, role, redactions, forgotten_at IS NOT NULL, count(*) FROM entries"
            " INDEXED BY entries_by_expiry WHERE expires_at IS NOT NULL AND expires_at <= ? GROUP BY 1, 2, 3, 4, 5",
            (now,))]

    def session_count(self, namespace: str, now: int) -> int:
        return int(self.conn.execute(
            f"SELECT count(DISTINCT session) FROM entries WHERE {_LIVE}", (namespace, now)
        ).fetchone()[0])

    def namespaces(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT DISTINCT namespace FROM entries ORDER BY 1")]

    def schema_version(self) -> int:
        applied = [s for s in migrations.status(self.conn) if s.applied_at]
        return applied[-1].number if applied else 0

    def migration_status(self) -> list[migrations.MigrationStatus]:
        return migrations.overview(self.conn)

    def largest_sessions(self, namespace: str, now: int, limit: int) -> list[tuple[str, int, int]]:
        top = self.conn.execute(
            f"SELECT session, count(*) FROM entries WHERE {_LIVE} AND session IS NOT NULL"
            " GROUP BY session ORDER BY 2 DESC, 1 LIMIT ?", (namespace, now, limit),
        ).fetchall()
        found = []
        for session, turns in top:
            content = self.conn.execute(
                f"SELECT sum(length(CAST(content AS BLOB))) FROM entries WHERE {_LIVE} AND session = ?",
                (namespace, now, session),
            ).fetchone()[0]
            found.append((session, int(turns), int(content or 0)))
        return found

    def size_bytes(self) -> int:
        return sqlite_files.file_bytes(self.path)

    def sizes(self) -> dict[str, Any]:
        return sqlite_files.file_sizes(self.conn, self.path, self.snapshot)

    def table_sizes(self) -> dict[str, Any]:
        return sqlite_files.table_sizes(self.conn, self.path, self.snapshot)

    def integrity_check(self) -> list[str]:
        rows = [r[0] for r in self.conn.execute("PRAGMA integrity_check")]
        return [] if rows == ["ok"] else rows

    def engine_checks(self) -> list[tuple[str, Callable[[], str]]]:
        return [
            ("sqlite", lambda: f"{sqlite_version()} via {driver().__name__}"),
            ("fts5", lambda: f"{counted(self.db['entries_fts'].count, 'row')} indexed"
                             f" (and {counted(self.db['derived_fts'].count, 'derived row')})"),
            ("sqlite-vec", lambda: str(self.conn.execute("SELECT vec_version()").fetchone()[0])),
            ("rewrite", lambda: sqlite_rewrite.describe(self.conn)),
        ]

    def describe_schema(self) -> str:
        tables, views = set(self.db.table_names()), set(self.db.view_names())
        missing = [name for name in sqlite_files.EXPECTED_TABLES if name not in tables] + [
            f"view {name}" for name in sqlite_files.EXPECTED_VIEWS if name not in views
        ]
        if missing:
            raise StorageError(f"missing {', '.join(missing)} — the file was changed outside harness-mem")
        counts = ", ".join(f"{name} {self.db[name].count}" for name in ("entries", "episodes", "skills"))
        return f"{self.schema_version():04d}, all migrations applied; {counts}"

    # ---- giving space back -----------------------------------------------------------------------------

    def merge_keyword_index(self) -> None:
        # Dead tokens of deleted entries leave the index only when its segments are merged. One
        # 'optimize' merges the whole index in one transaction (8 s of write lock on a 2 GB file).
        # A negative 'merge' starts the same merge (every segment on one level, so the output is
        # the oldest and tombstoned rows are dropped even from a lone segment) and writes about
        # that many pages of it; positive ones continue it, a chunk at a time in steps bounded by
        # the time they hold the lock (harness_mem.steps.in_steps), the lock let go in between.
        # Only the first chunk is negative: each negative one starts over with the segments
        # writers added meanwhile. A chunk that writes far fewer pages than it may has finished
        # the merge: what it found beside it is writers' new small segments, which their
        # own automerge looks after (merging them here too would never end beside a steady writer).
        # The chunk budget is a guard. Each lane's index is merged in turn.
        for table in KEYWORD_TABLES:
            self._merge_keyword_table(table)

    def _merge_keyword_table(self, table: str) -> None:
        bounds = sqlite_files.MERGE_PAGES
        pages = int(self.conn.execute(f"SELECT count(*) FROM {table}_data").fetchone()[0])
        sign, left = -1, 16 + 4 * pages // bounds[1]

        def merge(size: int) -> bool:
            nonlocal sign, left
            before = self.conn.total_changes
            self.conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('merge', ?)", (sign * size,))
            sign, left = 1, left - 1
            return self.conn.total_changes - before >= max(2, size // 4) and left > 0

        # FTS5's automerge continues a merge in progress before any other, at every writer's commit
        # that passes a work unit (64 leaf pages written), for 64 pages times the index's levels:
        # gc's merge landed on the writers that way, 1-2.2 s on a commit every few seconds beside
        # a gc of a 2 GB file (bench_gc.py --trace). So writers merge nothing until it is done.
        self._set_automerge(table, 0)
        try:
            in_steps(self.transaction, merge, bounds, self.between_steps)
        finally:
            self._set_automerge(table, FTS5_AUTOMERGE)

    def _set_automerge(self, table: str, segments: int) -> None:
        """Set the keyword index's automerge (in its config table: every connection follows it)."""
        with self.transaction():
            self.conn.execute(f"INSERT INTO {table} ({table}, rank) VALUES ('automerge', ?)", (segments,))

    def rewrite(self) -> None:
        sqlite_rewrite.rewrite(self.conn, self.location)

    def compact(self, *, rewrite: bool, vacuum: bool) -> dict[str, Any]:
        recovered: list[str] = []

        def rewrite_tables() -> None:
            recovered.extend(sqlite_rewrite.rewrite(self.conn, self.location))

        # A rewrite cut short is finished or undone by the next gc, whether or not a purge is owed;
        # before a VACUUM too, which would keep a leftover copy's rows.
        unfinished = bool(sqlite_rewrite.leftovers(self.conn))
        if unfinished and vacuum:
            rewrite_tables()
        done = sqlite_files.compact(self.conn, rewrite=rewrite_tables if rewrite or unfinished and not vacuum else None,
                                    vacuum=vacuum, location=self.location)
        return {**done, "rewrite_recovered": recovered}

    def truncate_log(self) -> bool:
        return truncate_wal(self.conn)


def connection_of(storage: Storage) -> Connection:
    """The SQLite connection behind ``storage``, for tables kept beside the entries (episodes,
    skills, consolidation watermarks), whose writes join the storage's transactions."""
    if not isinstance(storage, SQLiteStorage):
        raise StorageError(f"this part of harness-mem keeps its tables in SQLite, and the store is {storage.engine}")
    return storage.conn


def _vector_filter(selection: Selection) -> VectorFilter | None:
    """The filters as the vector index answers them well, or None (then candidates come from `entries`).

    The index answers a session alone from its cached bits and session keys, and kinds and time
    ranges by a vec0 KNN over its metadata. A session with more conditions is found faster through
    the entries' session index, and a role, tags or a session prefix only `entries` knows.
    """
    filters = selection.filters
    if (filters.is_empty or filters.role is not None or filters.session_prefix or filters.tags or filters.any_tags
            or filters.derived is not None or filters.as_of is not None or filters.excludes):
        return None
    if filters.session is not None and (filters.kind is not None or filters.since or filters.until):
        return None
    kinds = None if filters.kind is None else (filters.kind,) if isinstance(filters.kind, str) else tuple(filters.kind)
    return VectorFilter(
        kinds=kinds,
        session=filters.session,
        since_ms=None if filters.since is None else to_ms(filters.since),
        until_ms=None if filters.until is None else to_ms(filters.until),
    )
