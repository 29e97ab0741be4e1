"""Maintenance of a store's file: rebuilding derived rows, counting, diagnosing.

The functions here back :meth:`MemoryStore.reindex`, :meth:`~MemoryStore.stats` and
:meth:`~MemoryStore.diagnose` (``harness-mem reindex``, ``stats``, ``doctor``); they run rarely and
may read the whole file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import migrations
from .db import driver, sqlite_version
from .errors import StorageError
from .models import now_ms
from .recall import raise_if_missing_vectors
from .rows import COLUMNS, Row
from .vectors import (
    VectorIndex,
    VectorRow,
    drop_vectors,
    entries_without_vectors,
    missing_vectors,
    set_keyword_only,
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
        vectors = index.embedder.embed([text for _, _, _, _, text, _ in rows])
        with store.transaction():
            index.write([VectorRow(pk, ns, kind, session, created) for pk, ns, kind, session, _, created in rows],
                        vectors)
            store._vectors_touched = True
        report["vectors_written"] += len(rows)
        if progress is not None:
            progress(len(rows))
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


def stats(store: MemoryStore) -> dict[str, Any]:
    """Counts by kind and role, sessions, the file's size, and the schema version."""
    ns, now = store.namespace, now_ms()
    live = "namespace = ? AND (expires_at IS NULL OR expires_at > ?)"
    by_kind = dict(store._conn.execute(
        f"SELECT kind, count(*) FROM entries WHERE {live} GROUP BY kind ORDER BY kind", (ns, now)
    ).fetchall())
    by_role = dict(store._conn.execute(
        f"SELECT role, count(*) FROM entries WHERE {live} AND role IS NOT NULL GROUP BY role ORDER BY 2 DESC",
        (ns, now),
    ).fetchall())
    sessions = store._conn.execute(
        f"SELECT count(DISTINCT session) FROM entries WHERE {live}", (ns, now)
    ).fetchone()[0]
    expired = store._conn.execute(
        "SELECT count(*) FROM entries WHERE namespace = ? AND expires_at <= ?", (ns, now)
    ).fetchone()[0]
    redacted = dict(store._conn.execute(
        f"SELECT j.key, sum(j.value) FROM entries, json_each(entries.redactions) AS j WHERE {live}"
        " GROUP BY j.key ORDER BY 2 DESC, 1", (ns, now),
    ).fetchall())
    unredacted = store._conn.execute(
        f"SELECT count(*) FROM entries WHERE {live} AND redactions IS NULL", (ns, now)
    ).fetchone()[0]
    namespaces = [r[0] for r in store._conn.execute("SELECT DISTINCT namespace FROM entries ORDER BY 1")]
    applied = [s for s in migrations.status(store._conn) if s.applied_at]
    return {
        "path": str(store.path),
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
        "file_bytes": file_bytes(store),
    }


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
