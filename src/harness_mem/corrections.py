"""Memory that changes without losing its history: remember, supersede, forget, purge.

Nothing is overwritten in place. A correction is a new entry; the old one stays, pointing at it
(``superseded_by``), and recall hides it unless asked. Forgetting leaves a tombstone: the entry's
keyword and vector rows go at once, so recall can never return it, and :func:`purge` later removes
its content from the file itself (with ``secure_delete``, an FTS5 merge and a rewrite of the file,
so the bytes are gone too, not only unreachable).

The functions here back :meth:`MemoryStore.remember`, ``supersede``, ``forget``, ``purge`` and
``history``.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import maintenance
from .db import truncate_wal
from .errors import InvalidInputError, NotFoundError
from .filters import make_filters
from .models import Entry, Remembered, now_ms
from .rows import COLUMNS, Row, entry_from_row, prepare_row

if TYPE_CHECKING:
    from .store import MemoryStore


def normalise(content: str) -> str:
    """What remember stores and compares: Unicode NFC, without surrounding whitespace."""
    return unicodedata.normalize("NFC", content).strip() if isinstance(content, str) else content


def remember(
    store: MemoryStore,
    content: str,
    *,
    kind: str | None = None,
    tags: Iterable[str] = (),
    session: str | None = None,
    role: str | None = None,
    source: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    supersedes: str | None = None,
) -> Remembered:
    """Store ``content`` unless the namespace holds it already (same kind, same text once redacted).

    An exact duplicate writes nothing and returns the existing id with ``deduped=True``; there is
    no fuzzy merging. With ``supersedes``, the new entry replaces that one (see :func:`supersede`).
    """
    item = {"content": normalise(content), "kind": kind, "tags": list(tags) if not isinstance(tags, str) else tags,
            "session": session, "role": role, "source": source, "metadata": metadata}
    row = prepare_row(item, namespace=store.namespace, redactor=store.redactor)
    redactions = json.loads(row.redactions) if row.redactions else {}
    if supersedes is None and (found := _duplicate(store, row)) is not None:  # the common repeat: a read only
        return Remembered(id=found, deduped=True, redactions=redactions)
    # The model runs before the write lock is taken (the first call in a process loads it); the checks
    # are made again under the lock, so the duplicate test and the correction mark stay atomic.
    vectors = store._embed_new([row], "error") if store._vector_index() else {}
    with store.transaction():
        if supersedes is None:
            found = _duplicate(store, row)
            if found is not None:
                return Remembered(id=found, deduped=True, redactions=redactions)
        else:
            old_pk = _current_pk(store, supersedes)
        store._write([row], "error", vectors)
        if supersedes is not None:
            store._conn.execute("UPDATE entries SET superseded_by = ?, superseded_at = ? WHERE pk = ?",
                                (row.id, now_ms(), old_pk))
    return Remembered(id=row.id, deduped=False, redactions=redactions, supersedes=supersedes)


def _duplicate(store: MemoryStore, row: Row) -> str | None:
    """The id of a current entry with the same namespace, kind and (redacted) content, if any."""
    found = store._conn.execute(
        "SELECT id FROM entries WHERE namespace = ? AND kind = ? AND content_hash = ?"
        " AND superseded_by IS NULL AND forgotten_at IS NULL AND (expires_at IS NULL OR expires_at > ?) LIMIT 1",
        (row.namespace, row.kind, row.content_hash, now_ms()),
    ).fetchone()
    return str(found[0]) if found else None


def supersede(store: MemoryStore, old_id: str, new_content: str, **changes: Any) -> Remembered:
    """Correct an entry: a new entry with ``new_content`` replaces ``old_id``, which is kept and marked.

    The new entry keeps the old one's kind, role, session and tags unless ``changes`` gives others.
    """
    old = store.get(old_id)
    defaults = {"kind": old.kind, "role": old.role, "session": old.session, "tags": old.tags}
    return remember(store, new_content, supersedes=old_id, **{**defaults, **changes})


def _current_pk(store: MemoryStore, entry_id: str) -> int:
    """The pk of a live entry that nothing has replaced yet (what a correction may replace)."""
    found = store._conn.execute(
        "SELECT pk, superseded_by FROM entries WHERE namespace = ? AND id = ? AND forgotten_at IS NULL",
        (store.namespace, store._key(entry_id)),
    ).fetchone()
    if found is None:
        raise NotFoundError(f"no entry with id {entry_id!r} in namespace {store.namespace!r}")
    if found[1] is not None:
        raise InvalidInputError(f"entry {entry_id!r} was already superseded by {found[1]!r} — correct that one")
    return int(found[0])


def forget(
    store: MemoryStore,
    id: str | None = None,
    *,
    session: str | None = None,
    tags: Sequence[str] | str = (),
    kind: str | Sequence[str] | None = None,
    since: str | datetime | None = None,
    until: str | datetime | None = None,
) -> int:
    """Tombstone the entry ``id``, or every entry matching the filters (all versions); returns how many.

    Recall, get and list never return a forgotten entry again; its keyword and vector rows are
    removed now, its content at the next :func:`purge`.
    """
    filters = make_filters(kind=kind, session=store._key(session), tags=tags, since=since, until=until,
                           include_superseded=True)
    if id is None and filters.is_empty:
        raise InvalidInputError("forget needs an id or a filter (session, tags, kind, since, until)")
    where, params = filters.sql(store.namespace, now_ms(), live=False)
    if id is not None:
        where, params = f"{where} AND e.id = ?", [*params, store._key(id)]
    with store.transaction():
        rows = store._conn.execute(f"SELECT pk FROM entries e WHERE {where}", params).fetchall()
        if id is not None and not rows:
            raise NotFoundError(f"no entry with id {id!r} in namespace {store.namespace!r}")
        when = now_ms()
        for (pk,) in rows:
            store._drop_derived(pk)
            store._conn.execute("UPDATE entries SET forgotten_at = ? WHERE pk = ?", (when, pk))
            store._reindex_neighbour(pk)
    return len(rows)


def purge(store: MemoryStore) -> int:
    """Remove forgotten and expired entries of this namespace from the file; returns how many went.

    Deleted rows are zeroed (``secure_delete``), the keyword index's segments are merged so that
    no deleted term survives in them, the file is rewritten (``VACUUM``: SQLite's page rebuilding
    leaves old copies of rows in the unused middle of live pages, which only a rewrite removes),
    and the WAL is checkpointed and truncated: the text is gone from the file's bytes, not only
    from its tables. The rewrite needs free disk space as large as the file.
    """
    store._conn.execute("PRAGMA secure_delete = ON")
    with store.transaction():
        pks = [pk for (pk,) in store._conn.execute(
            "SELECT pk FROM entries WHERE namespace = ? AND (forgotten_at IS NOT NULL"
            " OR (expires_at IS NOT NULL AND expires_at <= ?))", (store.namespace, now_ms()),
        )]
        for pk in pks:
            store._delete_pk(pk)
        if pks:
            store._conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('optimize')")
    if pks:
        maintenance.rewrite(store)
        truncate_wal(store._conn)
    return len(pks)


def history(store: MemoryStore, entry_id: str) -> list[Entry]:
    """The correction chain ``entry_id`` belongs to, oldest first (one entry when never corrected)."""
    entry = store.get(entry_id)
    chain = [entry]
    seen = {entry.id}
    while True:  # back: the entries each one replaced
        before = _one(store, "superseded_by = ?", chain[0].id)
        if before is None or before.id in seen:
            break
        chain.insert(0, before)
        seen.add(before.id)
    while chain[-1].superseded_by and chain[-1].superseded_by not in seen:  # forward: what replaced it
        after = _one(store, "id = ?", chain[-1].superseded_by)
        if after is None:
            break
        chain.append(after)
        seen.add(after.id)
    return chain


def _one(store: MemoryStore, condition: str, value: str) -> Entry | None:
    row = store._conn.execute(
        f"SELECT {COLUMNS} FROM entries e WHERE e.namespace = ? AND e.forgotten_at IS NULL AND e.{condition}"
        " ORDER BY e.pk LIMIT 1", (store.namespace, value),
    ).fetchone()
    return entry_from_row(row) if row else None
