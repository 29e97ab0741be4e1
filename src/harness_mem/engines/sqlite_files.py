"""What a SQLite store's file holds and how its space goes back: sizes by table, rewrites, vacuums.

SQLite leaves old copies of rows in the unused middle of live pages when it rebuilds a B-tree page
(see :mod:`harness_mem.maintenance`): only pages written afresh lose them, so a purge ends with a
rewrite of the tables holding entries' text (:mod:`.sqlite_rewrite`), and ``gc --vacuum`` with
``VACUUM`` (:func:`vacuum_file`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from ..db import Connection, driver, truncate_wal, write_transaction
from ..errors import DiskFullError, StorageError
from ..pages import count_pages
from ..steps import STEP_PAUSE_S, in_steps

Snapshot = Callable[[], AbstractContextManager[None]]
_AUTO_VACUUM = {0: "none", 1: "full", 2: "incremental"}

# What every migrated file holds: the canonical tables, the keyword index and the readable view.
EXPECTED_TABLES = ("entries", "entries_fts", "derived_fts", "settings", "episodes", "skills", "skill_revisions", "consolidations", "derivations")
EXPECTED_VIEWS = ("memories",)



def file_bytes(path: Path | str) -> int:
    """The file's bytes on disk, its write-ahead log included (0 for an in-memory store)."""
    if not isinstance(path, Path):
        return 0
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


# The sizes of maintenance's steps (see :mod:`harness_mem.steps`): the first step's, the least and the most.
#: Pages of the keyword index one chunk of a merge step writes (the first chunk's, the least, the most).
MERGE_PAGES = (64, 16, 4096)
#: Free pages one ``PRAGMA incremental_vacuum`` call hands back (the first call's, the least, the
#: most). A step calls it until it has held the lock its time: a page at the end of the file that is
#: in use must be moved first, which costs many times a free one, so a step sized in pages from the
#: last one's time overshot when it met used pages (2,048 pages held the lock 1.6 s beside a writer
#: on a 2 GB file; 8,192 held it 2.7 s); timed call by call, a step overshoots by one call at most.
VACUUM_PAGES = (16, 1, 1024)
#: Entries one step of a keyword-index rebuild re-indexes.
KEYWORD_ROWS = (1000, 100, 20000)


def between_steps(conn: Connection) -> None:
    """The lock let go between two steps of maintenance: the step's pages copied from the log into
    the file by this process, without the lock (a passive checkpoint), rather than by the next
    writer's commit, which would wait that long; then a waiting writer's turn."""
    copy_log(conn)
    time.sleep(STEP_PAUSE_S)


def copy_log(conn: Connection) -> None:
    """Copy the log into the file (a passive checkpoint: no lock) and sync what it copied."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    except driver().OperationalError:  # a full disk, say: the pages are safe in the log, the step's
        pass  # own write reports it, and the next checkpoint copies them
    flush(conn)


def flush(conn: Connection) -> None:
    """Write the file's pages a checkpoint copied in out to the disk (fsync), without any lock.

    A checkpoint syncs the file only when it copied the log to its end: when a writer committed
    meanwhile, the pages stay unsynced until the next checkpoint that does, which may be the
    writer's own at its commit (past 1,000 pages of log), waiting for all of them to reach the disk."""
    files = [file for _, name, file in conn.execute("PRAGMA database_list") if name == "main"]
    if not files or not files[0]:
        return  # in memory
    try:
        fd = os.open(files[0], os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # the next checkpoint syncs it
    finally:
        os.close(fd)


@contextmanager
def checkpoints_between_steps(conn: Connection) -> Iterator[None]:
    """No checkpoint at this connection's commits meanwhile (:func:`between_steps` makes them): a
    step's commit, which counts toward its time under the lock, then only writes the step's pages."""
    usual = conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    try:
        yield
    finally:
        conn.execute(f"PRAGMA wal_autocheckpoint = {usual}")


def vacuum_file(conn: Connection, location: str = "the database") -> None:
    """Rewrite every page of the file (``VACUUM``), as ``gc --vacuum`` asks: it holds the write lock
    for the whole file (about 6 s per GB), and needs free disk space as large as the file."""
    if conn.in_transaction:
        raise StorageError("the file cannot be vacuumed inside a transaction")
    with space_for(location):
        conn.execute("VACUUM")


@contextmanager
def space_for(location: str) -> Iterator[None]:
    """Turns a full disk during a rewrite into the one-line error that says what to do."""
    try:
        yield
    except (driver().OperationalError, DiskFullError) as exc:  # VACUUM's own, or a step's rolled back
        if not isinstance(exc, DiskFullError) and "disk is full" not in str(exc):
            raise
        raise StorageError(
            f"no space left to rewrite {location} (a rewrite needs free space as large as the file)"
            " — nothing stored was lost, and the next `harness-mem gc` finishes the purge; free some space"
        ) from None


def compact(conn: Connection, *, rewrite: Callable[[], None] | None, vacuum: bool,
            location: str = "the database") -> dict[str, Any]:
    """Give the file's free space back, after rewriting what a purge owes.

    With ``rewrite`` (an entry was purged: :func:`~.sqlite_rewrite.rewrite`) the tables holding
    entries' text are written afresh first; with ``vacuum`` the whole file is (``VACUUM``, which also
    switches a file in auto_vacuum mode NONE to INCREMENTAL). Then, in a file made for it, an
    incremental vacuum hands the free pages back in steps of about :data:`~harness_mem.steps.STEP_TARGET_S` of write lock
    each, so a writer waits for one step at most, however many pages are free. Last, the WAL is
    emptied.
    """
    mode = _AUTO_VACUUM.get(int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]), "none")
    free_pages = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    vacuumed = "none"
    if vacuum:
        if mode == "none":
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")  # takes effect with the VACUUM below
        vacuum_file(conn, location)
        vacuumed = "full"
        mode = _AUTO_VACUUM.get(int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]), "none")
    elif rewrite is not None:
        rewrite()
        vacuumed = "tables"
    left = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
    if vacuumed != "full" and mode == "incremental" and left:
        def free_now() -> int:
            return int(conn.execute("PRAGMA freelist_count").fetchone()[0])

        at_last_pause, stalled = left, False

        def hand_back(pages: int) -> bool:
            if stalled:
                return False
            conn.execute(f"PRAGMA incremental_vacuum({pages})").fetchall()  # a page per row: read them all
            return free_now() > 0

        def pause() -> None:
            nonlocal at_last_pause, stalled
            # A checkpoint without the lock between steps keeps the log from growing with the file.
            copy_log(conn)
            # Writers freeing pages as fast as they go back: what is left goes at the next gc.
            now = free_now()
            stalled, at_last_pause = now >= at_last_pause, now
            if not stalled:
                time.sleep(STEP_PAUSE_S)

        in_steps(lambda: write_transaction(conn), hand_back, VACUUM_PAGES, pause)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        vacuumed = vacuumed if vacuumed == "tables" else "incremental"
    truncated = truncate_wal(conn)
    return {
        "auto_vacuum": mode,
        "vacuum": vacuumed,
        "free_pages_before": free_pages,
        "free_pages_after": int(conn.execute("PRAGMA freelist_count").fetchone()[0]),
        # A reader in another process can keep the WAL from being reset: its pages stay until then.
        "wal_truncated": truncated,
    }


def table_sizes(conn: Connection, path: Path | str, snapshot: Snapshot) -> dict[str, Any]:
    """Rows and bytes per table, largest first, with the file's page totals.

    A table's bytes include its indexes and, for a virtual table, its shadow tables (see
    :func:`file_sizes` for where they come from). When neither route is open, only rows are known
    per table (``bytes`` is None) and the file's page counts give the totals.
    """
    btrees = _schema_btrees(conn)
    virtual = {b.owner for b in btrees if b.kind in _GROUPED}
    by_table: dict[str, dict[str, Any]] = {}
    for table in sorted({b.owner for b in btrees}):
        if table in virtual or table.startswith("sqlite_"):
            rows = None
        else:
            rows = int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        by_table[table] = {"rows": rows, "bytes": None}
    totals, pages, source = _btree_pages(conn, path, snapshot, btrees)
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


def _schema_btrees(conn: Connection) -> list[_BTree]:
    """Every b-tree in the file with its kind ("table", "index", or what its virtual table is:
    "keyword index", "vector index", "virtual table") and the table it belongs to. A virtual
    table's shadow tables (``entries_fts_data``, ``entries_vec_chunks``, …) and their indexes
    belong to the virtual table."""
    master = conn.execute("SELECT type, name, tbl_name, sql, rootpage FROM sqlite_master").fetchall()
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


def _btree_pages(conn: Connection, path: Path | str, snapshot: Snapshot, btrees: list[_BTree]) -> tuple[dict[str, int], dict[str, int] | None, str]:
    """(the file's page totals, pages per b-tree name or None, where those came from).

    From the file's pointer map when it has one (a file with auto_vacuum, as every file harness_mem
    creates: a few pages read, see :mod:`harness_mem.pages`), else from SQLite's ``dbstat`` table when
    this build has it (it reads every page), else per b-tree pages are unknown ("pages").
    """
    # One read transaction around the page counts and the reading of the file's bytes: while it reads
    # from the WAL, no other connection's checkpoint can truncate or restart it. (A snapshot of a fully
    # checkpointed file does not hold the WAL: if it changes meanwhile, count_pages says so with None.)
    with snapshot():
        page_size = int(conn.execute("PRAGMA page_size").fetchone()[0])
        count = int(conn.execute("PRAGMA page_count").fetchone()[0])
        free = int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        mapped = count_pages(path, count) if isinstance(path, Path) else None
    totals = {"page_size": page_size, "pages": count, "free_pages": free, "file_bytes": page_size * count}
    if mapped is not None:
        by_root = {b.root: b.name for b in btrees if b.root}
        return totals, {by_root.get(root, f"page {root}"): n for root, n in mapped.by_root.items()}, "pointer-map"
    try:
        stat = conn.execute("SELECT name, count(*) FROM dbstat GROUP BY name").fetchall()
    except driver().OperationalError:
        return totals, None, "pages"
    return totals, {str(name): int(n) for name, n in stat}, "dbstat"


def file_sizes(conn: Connection, path: Path | str, snapshot: Snapshot) -> dict[str, Any]:
    """The file's bytes by what holds them, largest first: each table and each index on its own, a
    virtual table together with its shadow tables ("keyword index (entries_fts*)"), free pages,
    and the pages of the file's own structure (its pointer map). The parts add up to the file's
    size; they are empty when this SQLite build cannot tell (no pointer map, no ``dbstat``)."""
    btrees = _schema_btrees(conn)
    totals, pages, source = _btree_pages(conn, path, snapshot, btrees)
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
