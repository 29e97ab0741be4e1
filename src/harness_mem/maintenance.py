"""Maintenance of a store's file: rebuilding derived rows, counting, diagnosing, collecting garbage.

The functions here back :meth:`MemoryStore.reindex`, :meth:`~MemoryStore.stats`,
:meth:`~MemoryStore.diagnose` and :meth:`~MemoryStore.gc` (``harness-mem reindex``, ``stats``,
``doctor``, ``gc``); they run rarely and may read the whole file.

**What deleting leaves behind, and how it goes.** Every connection runs with ``secure_delete``: a
deleted row's bytes are overwritten with zeros, in its page and in pages it frees. Four things
still hold deleted text: the keyword index, which is contentless and so can only mark a deleted
entry's tokens dead (FTS5's own secure-delete needs the tokens, which a contentless index does not
have) until its segments are merged; the write-ahead log, which holds recent pages until a
checkpoint; free pages, which keep the file's size; and old copies of rows in the unused middle of
live pages. SQLite leaves those when it rebuilds a B-tree page (a row that grew and moved, a page
split or merged): it writes the cells afresh from the end of the page and does not clear the bytes
below them, so a row that moved while it was alive keeps a readable copy there after it is deleted,
which ``secure_delete`` never reaches. Only rewriting every page (``VACUUM``) removes those.

:func:`gc` purges expired and forgotten entries, merges the keyword index into one segment
(``optimize``: dead tokens are dropped), and then, when it purged any entry, rewrites the file
(:func:`rewrite`) so no copy of one survives; otherwise it frees pages (incrementally in a file made
with ``auto_vacuum = INCREMENTAL``, which every new file is; a full ``VACUUM`` only when asked,
which also converts an older file). It ends by checkpointing and truncating the WAL. A namespace's
``purge`` does the same for its own forgotten and expired entries. Expired entries are also purged
when a store is opened, at most once a day (:func:`expire_if_due`), without the rewrite: their
copies go at the next ``gc`` or ``purge`` that rewrites the file. Forgotten ones (tombstones) go at
the next ``gc`` or ``purge``. An entry removed with ``delete`` is zeroed where it lies; its old
copies, if SQLite left any, go with the next rewrite (``gc`` after a purge, or ``gc --vacuum``).
The orchestrator's run events belong to harness_loop, which prunes them itself
(``harness-loop runs gc``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import migrations
from .db import BUSY_TIMEOUT_MS, driver, sqlite_version, truncate_wal
from .errors import InvalidInputError, StorageError
from .models import FileSizes, SessionSize, StoreStats, now_ms
from .pages import count_pages
from .recall import raise_if_missing_vectors
from .rows import COLUMNS, Row
from .vectors import (
    VectorIndex,
    VectorRow,
    drop_vectors,
    entries_without_vectors,
    missing_vectors,
    set_keyword_only,
    still_without_vectors,
)

if TYPE_CHECKING:
    from .store import MemoryStore


def reindex(store: MemoryStore, *, progress: Callable[[int], None] | None = None, batch_size: int = 256,
            keyword_only: bool = False) -> dict[str, int]:
    """Rebuild the derived rows from the canonical ones, in every namespace.

    The keyword index is rebuilt in one transaction. Vectors made by another model are dropped;
    then every entry without a vector is embedded, a batch per transaction, so an interrupted
    reindex resumes where it stopped. ``progress(n)`` is called as entries are done.
    """
    total = store._conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    with store.transaction():
        store._conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')")
        # A forgotten entry gets no index row back: recall must never find it.
        rows = store._conn.execute(
            f"SELECT {COLUMNS} FROM entries WHERE forgotten_at IS NULL ORDER BY namespace, session, created_at, pk"
        ).fetchall()
        # In this order every turn's previous turn is the one before it: no lookups needed.
        texts = store._index_texts([Row._make(row) for row in rows], lookup=False)
        store._conn.executemany("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)",
                              zip((row[0] for row in rows), texts, strict=True))
    report = {"entries": total, "keyword_rows": len(rows), "vectors_dropped": 0, "vectors_written": 0}
    if keyword_only:  # the switch to keyword only: no vectors kept, and no model loaded from now on
        with store.transaction():
            report["vectors_dropped"] = drop_vectors(store._conn)
            set_keyword_only(store._conn, True)
            store._vectors_touched = True
        store._vectors, store.embedder = None, None
        return report
    if store.embedder is None:
        return report
    fresh = VectorIndex(store._conn, store.embedder)
    recorded = VectorIndex.recorded_model(store._conn)
    if recorded is not None and recorded != fresh.identity():
        with store.transaction():
            report["vectors_dropped"] = fresh.count()
            fresh.clear()
            store._vectors_touched = True
        store._vectors = None
    index = store._vector_index()
    assert index is not None
    while True:
        rows = entries_without_vectors(store._conn, batch_size)
        if not rows:
            break
        vectors = index.embedder.embed([text for _, _, _, _, text, _ in rows])  # outside the write lock
        with store.transaction():
            # Another process may have changed some of these entries while the model ran.
            keep = still_without_vectors(store._conn, rows)
            if keep:
                index.write([VectorRow(*rows[i][:4], rows[i][5]) for i in keep], vectors[keep])
                store._vectors_touched = True
        report["vectors_written"] += len(keep)
        if progress is not None:
            progress(len(rows))  # every row read is done: written, or gone (a changed one is read again)
    store._recall.vectors_complete = True
    return report


def count_missing_vectors(store: MemoryStore) -> int:
    """Entries (in every namespace) that ``reindex`` would embed; 0 without an embedder."""
    if store.embedder is None:
        return 0
    recorded = VectorIndex.recorded_model(store._conn)
    if recorded is not None and recorded != VectorIndex(store._conn, store.embedder).identity():
        return int(store.db["entries"].count)  # another model's vectors: reindex embeds everything again
    if store._vector_index(writing=False) is None:  # keyword-only or read-only: nothing bound yet
        return int(store.db["entries"].count) if store.keyword_only else missing_vectors(store._conn)
    return missing_vectors(store._conn)


# An entry ``stats`` counts: in the namespace and not expired.
_LIVE = "namespace = ? AND (expires_at IS NULL OR expires_at > ?)"


def stats(store: MemoryStore) -> dict[str, Any]:
    """Counts by kind and role, sessions, the largest sessions, the file's size by table and index,
    and the schema version: a :class:`~harness_mem.models.StoreStats` as a JSON-ready dict.

    It reads each live entry of the namespace once (a plain scan of the table: cheaper than
    visiting the rows through an index, which the filter on expiry would need anyway), the
    session index twice, and a few pages of the file for the sizes (:func:`file_sizes`).
    """
    ns, now = store.namespace, now_ms()
    by_kind: dict[str, int] = {}
    by_role: dict[str, int] = {}
    redacted: dict[str, int] = {}
    unredacted = expired = 0
    for gone, kind, role, redactions, n in store._conn.execute(
        "SELECT expires_at IS NOT NULL AND expires_at <= ?, kind, role, redactions, count(*)"
        " FROM entries NOT INDEXED WHERE namespace = ? GROUP BY 1, 2, 3, 4", (now, ns)
    ):
        if gone:  # expired, not purged yet: counted apart
            expired += n
            continue
        by_kind[kind] = by_kind.get(kind, 0) + n
        if role is not None:
            by_role[role] = by_role.get(role, 0) + n
        if redactions is None:
            unredacted += n
            continue
        for name, count in _redaction_counts(redactions):
            redacted[name] = redacted.get(name, 0) + count * n
    sessions = store._conn.execute(
        f"SELECT count(DISTINCT session) FROM entries WHERE {_LIVE}", (ns, now)
    ).fetchone()[0]
    namespaces = [r[0] for r in store._conn.execute("SELECT DISTINCT namespace FROM entries ORDER BY 1")]
    applied = [s for s in migrations.status(store._conn) if s.applied_at]
    entries, size = sum(by_kind.values()), file_bytes(store)
    report = StoreStats(
        path=str(store.path),
        namespace=ns,
        entries=entries,
        by_kind=dict(sorted(by_kind.items())),
        by_role=dict(sorted(by_role.items(), key=lambda item: (-item[1], item[0]))),
        sessions=sessions,
        expired_pending_purge=expired,
        redacted=dict(sorted(redacted.items(), key=lambda item: (-item[1], item[0]))),
        written_without_redaction=unredacted,
        namespaces=namespaces,
        schema_version=applied[-1].number if applied else 0,
        file_bytes=size,
        bytes_per_entry=round(size / entries, 1) if entries else None,
        largest_sessions=largest_sessions(store),
        sizes=FileSizes.check(file_sizes(store)),
    )
    return report.model_dump(mode="json")


def _redaction_counts(redactions: str) -> list[tuple[str, int]]:
    """(kind, count) pairs of an entry's ``redactions`` column (a JSON object of counts)."""
    try:
        counts = json.loads(redactions)
    except ValueError:
        return []
    if not isinstance(counts, dict):
        return []
    return [(str(k), int(v)) for k, v in counts.items() if isinstance(v, int | float)]


#: How many sessions ``stats`` lists as the largest.
LARGEST_SESSIONS = 5


def largest_sessions(store: MemoryStore, limit: int = LARGEST_SESSIONS) -> list[SessionSize]:
    """The namespace's sessions with the most live entries, largest first (ties by session id),
    with the bytes of their content."""
    ns, now = store.namespace, now_ms()
    top = store._conn.execute(
        f"SELECT session, count(*) FROM entries WHERE {_LIVE} AND session IS NOT NULL"
        " GROUP BY session ORDER BY 2 DESC, 1 LIMIT ?", (ns, now, limit),
    ).fetchall()
    found = []
    for session, turns in top:
        content = store._conn.execute(
            f"SELECT sum(length(CAST(content AS BLOB))) FROM entries WHERE {_LIVE} AND session = ?", (ns, now, session),
        ).fetchone()[0]
        found.append(SessionSize(session=session, turns=turns, content_bytes=int(content or 0)))
    return found


def file_bytes(store: MemoryStore) -> int:
    if not isinstance(store.path, Path):
        return 0
    return sum(
        p.stat().st_size for p in (store.path, Path(f"{store.path}-wal")) if p.exists()
    )


def diagnose(store: MemoryStore) -> dict[str, Any]:
    """What ``harness-mem doctor`` reports: each check with ok and a detail line."""
    checks: list[dict[str, Any]] = []

    def check(name: str, probe: Callable[[], str]) -> None:
        try:
            checks.append({"name": name, "ok": True, "detail": probe()})
        except Exception as exc:  # a doctor reports failures; it does not stop at the first
            checks.append({"name": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})

    def integrity() -> str:
        problems = integrity_check(store)
        if problems:
            raise StorageError("; ".join(problems[:5]))
        return "ok"

    check("sqlite", lambda: f"{sqlite_version()} via {driver().__name__}")
    check("fts5", lambda: f"{store.db['entries_fts'].count} rows indexed")
    check("sqlite-vec", lambda: str(store._conn.execute("SELECT vec_version()").fetchone()[0]))
    check("schema", lambda: describe_schema(store))
    check("model", lambda: describe_model(store))
    check("integrity", integrity)
    return {"path": str(store.path), "checks": checks}


# What every migrated file holds: the canonical tables, the keyword index and the readable view.
EXPECTED_TABLES = ("entries", "entries_fts", "settings", "episodes", "skills", "skill_revisions", "consolidations")
EXPECTED_VIEWS = ("memories",)


def describe_schema(store: MemoryStore) -> str:
    """The schema version and the canonical tables' row counts (raises when a table or view is missing)."""
    tables, views = set(store.db.table_names()), set(store.db.view_names())
    missing = [name for name in EXPECTED_TABLES if name not in tables] + [
        f"view {name}" for name in EXPECTED_VIEWS if name not in views
    ]
    if missing:
        raise StorageError(f"missing {', '.join(missing)} — the file was changed outside harness-mem")
    applied = [s for s in migrations.status(store._conn) if s.applied_at]
    counts = ", ".join(f"{name} {store.db[name].count}" for name in ("entries", "episodes", "skills"))
    return f"{applied[-1].number:04d}, all migrations applied; {counts}"


def describe_model(store: MemoryStore) -> str:
    """The embedding model in use and the vectors' state (raises when they cannot be used)."""
    if store.keyword_only:
        return "none: a keyword-only store (no model is loaded; `reindex` with --embedder adds vectors)"
    if store.embedder is None:
        recorded = VectorIndex.recorded_model(store._conn)
        return "none: keyword recall only" + (f" (vectors by {recorded['name']} stored)" if recorded else "")
    index = VectorIndex(store._conn, store.embedder)
    index.check_model()
    raise_if_missing_vectors(store._conn)
    return f"{index.identity()['name']}, {index.dim} dimensions, every entry embedded"


def integrity_check(store: MemoryStore) -> list[str]:
    """Problems SQLite finds in the file (an empty list when it is sound)."""
    rows = [r[0] for r in store._conn.execute("PRAGMA integrity_check")]
    return [] if rows == ["ok"] else rows


# ---- expiry and garbage collection -------------------------------------------------------------

#: The ``settings`` key holding when expired entries were last purged (ms since the epoch).
EXPIRY_KEY = "gc.expired_at"
#: Opening a store purges expired entries at most this often.
EXPIRY_EVERY_MS = 86_400_000
_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}


def purge_expired(store: MemoryStore) -> int:
    """Delete every expired entry (in all namespaces) with its derived rows; returns how many went."""
    return _purge(store, forgotten=False)[0]


def _purge(store: MemoryStore, *, forgotten: bool) -> tuple[int, int]:
    """Delete expired entries (and, with ``forgotten``, forgotten ones) of every namespace with their
    derived rows, in one transaction; returns (expired, forgotten) counts."""
    now = now_ms()
    with store.transaction():
        rows = store._conn.execute(
            "SELECT pk, forgotten_at IS NOT NULL FROM entries WHERE (expires_at IS NOT NULL AND expires_at <= ?)"
            + (" OR forgotten_at IS NOT NULL" if forgotten else ""), (now,)
        ).fetchall()
        for pk, _ in rows:
            store._delete_pk(pk)
        store._conn.execute(
            "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (EXPIRY_KEY, str(now)),
        )
    tombstones = sum(1 for _, was_forgotten in rows if was_forgotten)
    return len(rows) - tombstones, tombstones


def _last_expiry(store: MemoryStore) -> int:
    row = store._conn.execute("SELECT value FROM settings WHERE key = ?", (EXPIRY_KEY,)).fetchone()
    try:
        return int(row[0]) if row is not None else 0
    except ValueError:
        return 0


def expire_if_due(store: MemoryStore) -> int | None:
    """Purge expired entries when none was purged for a day; the number purged, or None when not due.

    Called on every writable open, so it must cost nothing most of the time: a settings read, then
    (once the day is up) one probe of the expiry index; the write transaction happens only when
    something has expired. It never waits for another writer: a busy file (an import, say) is left
    for the next open, as is a file this process may not write.
    """
    now = now_ms()
    if now - _last_expiry(store) < EXPIRY_EVERY_MS:
        return None
    if store._conn.execute(
        "SELECT 1 FROM entries WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT 1", (now,)
    ).fetchone() is None:
        return None
    store._conn.execute("PRAGMA busy_timeout = 0")
    try:
        if now_ms() - _last_expiry(store) < EXPIRY_EVERY_MS:  # another process just did it
            return None
        return purge_expired(store)
    except driver().OperationalError as exc:
        if "locked" in str(exc).lower() or "busy" in str(exc).lower():
            return None
        raise
    finally:
        store._conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


def rewrite(store: MemoryStore) -> None:
    """Rewrite every page of the file (``VACUUM``): no byte of a deleted row survives it, not even
    the copies SQLite's page rebuilding leaves in the unused middle of a live page (see the module
    docstring). It needs free disk space as large as the file, and the write lock for as long."""
    if store._conn.in_transaction:
        raise StorageError("the file cannot be rewritten inside a transaction — purge outside the `with` block")
    store._conn.execute("VACUUM")


def gc(store: MemoryStore, *, vacuum: bool = False) -> dict[str, Any]:
    """Purge expired and forgotten entries (every namespace), merge the keyword index, rewrite the
    file when an entry was purged, checkpoint and truncate the WAL, free pages; report sizes by table.

    A purged entry's text must leave every byte of the file, and only a full ``VACUUM`` removes
    the old copies of rows that SQLite's page rebuilding leaves behind (:func:`rewrite`); it needs
    as much free disk space as the file, and the write lock for as long. With nothing purged, free
    pages go back to the file system by ``PRAGMA incremental_vacuum`` when the file's
    ``auto_vacuum`` mode is INCREMENTAL (every file made since it was introduced). A file in mode
    NONE keeps its size unless ``vacuum``: then a full ``VACUUM`` rewrites it, switching it to
    INCREMENTAL on the way.
    """
    if store.read_only:
        raise InvalidInputError("gc changes the file — open the store for writing, not read-only")
    conn = store._conn
    before = file_bytes(store)
    expired, forgotten = _purge(store, forgotten=True)
    with store.transaction():  # dead tokens of deleted entries leave the index only when merged
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('optimize')")
    mode = _AUTO_VACUUM.get(int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]), "none")
    free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    vacuumed = "none"
    if vacuum or expired or forgotten:
        if vacuum and mode == "none":
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with the VACUUM below
        rewrite(store)
        vacuumed = "full"
        mode = _AUTO_VACUUM.get(int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]), "none")
    elif mode == "incremental" and free_pages:
        conn.execute("PRAGMA incremental_vacuum").fetchall()  # it frees a page per step: run it to the end
        vacuumed = "incremental"
    truncated = truncate_wal(conn)
    return {
        "path": str(store.path),
        "expired_purged": expired,
        "forgotten_purged": forgotten,
        "auto_vacuum": mode,
        "vacuum": vacuumed,
        "free_pages_before": free_pages,
        "free_pages_after": int(conn.execute("PRAGMA freelist_count").fetchone()[0]),
        # A reader in another process can keep the WAL from being reset: its pages stay until then.
        "wal_truncated": truncated,
        "bytes_before": before,
        "bytes_after": file_bytes(store),
        "tables": table_sizes(store),
    }


def table_sizes(store: MemoryStore) -> dict[str, Any]:
    """Rows and bytes per table, largest first, with the file's page totals.

    A table's bytes include its indexes and, for a virtual table, its shadow tables (see
    :func:`file_sizes` for where they come from). When neither route is open, only rows are known
    per table (``bytes`` is None) and the file's page counts give the totals.
    """
    conn = store._conn
    btrees = _schema_btrees(store)
    virtual = {b.owner for b in btrees if b.kind in _GROUPED}
    by_table: dict[str, dict[str, Any]] = {}
    for table in sorted({b.owner for b in btrees}):
        if table in virtual or table.startswith("sqlite_"):
            rows = None
        else:
            rows = int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        by_table[table] = {"rows": rows, "bytes": None}
    totals, pages, source = _btree_pages(store, btrees)
    if pages is not None:
        for b in btrees:
            entry = by_table.setdefault(b.owner, {"rows": None, "bytes": None})
            entry["bytes"] = (entry["bytes"] or 0) + pages.get(b.name, 0) * totals["page_size"]
    ordered = sorted(by_table.items(), key=lambda item: (-(item[1]["bytes"] or 0), -(item[1]["rows"] or 0), item[0]))
    return {"source": source, **totals, "by_table": dict(ordered)}


# What a virtual table's module makes of it, as the size report names it.
_VIRTUAL_KINDS = {"fts5": "keyword index", "vec0": "vector index"}
# Kinds whose b-trees (shadow tables and their indexes) are reported together, under their owner.
_GROUPED = {*_VIRTUAL_KINDS.values(), "virtual table"}


class _BTree:
    """A b-tree of the file (a table, an index or a shadow table) and what it belongs to."""

    def __init__(self, name: str, root: int, kind: str, owner: str) -> None:
        self.name, self.root, self.kind, self.owner = name, root, kind, owner


def _schema_btrees(store: MemoryStore) -> list[_BTree]:
    """Every b-tree in the file with its kind ("table", "index", or what its virtual table is:
    "keyword index", "vector index", "virtual table") and the table it belongs to. A virtual
    table's shadow tables (``entries_fts_data``, ``entries_vec_chunks``, …) and their indexes
    belong to the virtual table."""
    master = store._conn.execute("SELECT type, name, tbl_name, sql, rootpage FROM sqlite_master").fetchall()
    virtual: dict[str, str] = {}
    for kind, name, _, sql, _ in master:
        text = (sql or "").upper()
        if kind == "table" and text.startswith("CREATE VIRTUAL"):
            module = text.split("USING", 1)[-1].strip().split("(", 1)[0].strip().lower()
            virtual[name] = _VIRTUAL_KINDS.get(module, "virtual table")
    found = [_BTree("sqlite_schema", 1, "table", "sqlite_schema")]
    for kind, name, table, _, root in master:
        if not root or kind not in ("table", "index"):
            continue
        parent = next((v for v in virtual if (table == v or table.startswith(f"{v}_")) and name != v), None)
        if parent is not None:
            found.append(_BTree(name, int(root), virtual[parent], parent))
        else:
            found.append(_BTree(name, int(root), kind, table if kind == "index" else name))
    # A virtual table has no b-tree of its own: it is listed with no pages, to own its shadows.
    found += [_BTree(name, 0, kind, name) for name, kind in virtual.items()]
    return found


def _btree_pages(store: MemoryStore, btrees: list[_BTree]) -> tuple[dict[str, int], dict[str, int] | None, str]:
    """(the file's page totals, pages per b-tree name or None, where those came from).

    From the file's pointer map when it has one (a file with auto_vacuum, as every file harness_mem
    creates: a few pages read, see :mod:`harness_mem.pages`), else from SQLite's ``dbstat`` table when
    this build has it (it reads every page), else per b-tree pages are unknown ("pages").
    """
    conn = store._conn
    # One read transaction around the page counts and the reading of the file's bytes: while it reads
    # from the WAL, no other connection's checkpoint can truncate or restart it. (A snapshot of a fully
    # checkpointed file does not hold the WAL: if it changes meanwhile, count_pages says so with None.)
    with store._snapshot():
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        count = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        mapped = count_pages(store.path, count) if isinstance(store.path, Path) else None
    totals = {"page_size": page_size, "pages": count, "free_pages": free, "file_bytes": page_size * count}
    if mapped is not None:
        by_root = {b.root: b.name for b in btrees if b.root}
        return totals, {by_root.get(root, f"page {root}"): n for root, n in mapped.by_root.items()}, "pointer-map"
    try:
        stat = conn.execute("SELECT name, count(*) FROM dbstat GROUP BY name").fetchall()
    except driver().OperationalError:
        return totals, None, "pages"
    return totals, {str(name): int(n) for name, n in stat}, "dbstat"


def file_sizes(store: MemoryStore) -> dict[str, Any]:
    """The file's bytes by what holds them, largest first: each table and each index on its own, a
    virtual table together with its shadow tables ("keyword index (entries_fts*)"), free pages,
    and the pages of the file's own structure (its pointer map). The parts add up to the file's
    size; they are empty when this SQLite build cannot tell (no pointer map, no ``dbstat``)."""
    btrees = _schema_btrees(store)
    totals, pages, source = _btree_pages(store, btrees)
    parts: list[dict[str, Any]] = []
    if pages is not None:
        page_size = totals["page_size"]
        grouped: dict[tuple[str, str], int] = {}
        for b in btrees:
            group = (b.owner, b.kind) if b.kind in _GROUPED else (b.name, b.kind)
            grouped[group] = grouped.get(group, 0) + pages.get(b.name, 0)
        owners = {b.name: b.owner for b in btrees}
        for (name, kind), n in grouped.items():
            if not n:
                continue
            if kind in _GROUPED:
                parts.append({"name": f"{kind} ({name}*)", "kind": kind, "table": name, "pages": n})
            else:
                parts.append({"name": name, "kind": kind, "table": owners[name], "pages": n})
        if totals["free_pages"]:
            parts.append({"name": "free pages", "kind": "free", "table": None, "pages": totals["free_pages"]})
        # The file's own pages (its pointer map, the lock-byte page past 1 GiB) and any b-tree
        # the schema does not name: what the parts above leave of the file.
        rest = totals["pages"] - sum(grouped.values()) - totals["free_pages"]
        if rest > 0:
            parts.append({"name": "pointer map and other pages", "kind": "file", "table": None, "pages": rest})
        for part in parts:
            part["bytes"] = part["pages"] * page_size
        parts.sort(key=lambda part: (-part["pages"], part["name"]))
    return {"source": source, **totals, "parts": parts}
