"""Keying a SQLite file's pseudonyms again, in place (see :mod:`harness_mem.pseudonyms`).

Every column of harness_mem's tables that holds identity values is rewritten with the function
given (each pseudonym in it replaced by its new form): the entries a few hundred rows at a
transaction, each transaction recording how far it got in ``settings``, so a crash loses at most
one step and the next run goes on from there; the small tables keyed by their values (a session's
watermarks) and the sealed identities, whose associated data binds the namespace and the stored
value, in the last transaction, with the mark that the file is done. A pseudonym is never keyed
twice: a row is either before the recorded point or not yet touched.

A table that refuses updates by trigger (harness_loop's append-only run events) has the trigger
dropped and made again around each step, in its transaction. Foreign keys are off for the run (an episode names its entry by id, and the two are rewritten in
different steps); nothing is deleted meanwhile, and each reference is rewritten the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from ..db import Connection, write_transaction
from ..errors import StorageError
from ..identities import SealedIdentity
from ..pseudonyms import IDENTITY_COLUMNS

__all__ = ["PROGRESS_SETTING", "REKEY_COLUMNS", "ROWS_PER_STEP", "rekey_tables"]

# Tables without a rowid, keyed by their identity columns: rewritten in the last transaction.
_KEYED_TABLES = ("consolidations", "derivations")
#: The tables with a rowid, rewritten a step at a time.
REKEY_COLUMNS = {t: c for t, c in IDENTITY_COLUMNS.items() if t not in _KEYED_TABLES}
#: The rows of a table rewritten in one transaction: what a crash may lose and redo.
ROWS_PER_STEP = 500
#: How far a run got: "<table> <last rowid rewritten>".
PROGRESS_SETTING = "pseudonyms.rekeyed_to"

Rekey = Callable[[str], str]
Reseal = Callable[[str, SealedIdentity], tuple[str, SealedIdentity]]


def rekey_tables(conn: Connection, rekey: Rekey, reseal: Reseal, *, finished: Callable[[], bool],
                 finish: Callable[[], None], reindex: Callable[[], None],
                 progress: Callable[[int, int], None] | None = None) -> int:
    """Rewrite every pseudonym in the file's tables with ``rekey`` and every sealed identity with
    ``reseal`` (given its namespace and row, the new ones); ``reindex`` runs once the rows are
    rewritten, ``finish`` in the last transaction. Resumes where an earlier run stopped; does
    nothing once ``finished()`` (another process may get there first). Returns how many rows changed."""
    tables = [t for t in REKEY_COLUMNS if _exists(conn, t)]
    with write_transaction(conn):
        if finished():
            return 0
        if _progress(conn) is None:  # a first run: from the first table's first row
            _set_progress(conn, f"{tables[0]} 0")
    total = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in tables)
    done = changed = 0
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        for table in tables:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            columns = tuple(c for c in REKEY_COLUMNS[table] if c in present)
            # An append-only table refuses updates by trigger: off for the step, back in the same transaction.
            guards = [str(sql) for (sql,) in conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? AND sql LIKE '%UPDATE ON%'",
                (table,))]
            while True:
                with write_transaction(conn):
                    after = _resumed_at(conn, table, tables)
                    if after is None:  # done in an earlier run
                        done += conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                        break
                    rows = conn.execute(f"SELECT rowid, {', '.join(columns)} FROM {table} WHERE rowid > ?"
                                        f" ORDER BY rowid LIMIT {ROWS_PER_STEP}", (after,)).fetchall()
                    with _unguarded(conn, guards):
                        changed += _rewrite(conn, table, columns, rows, rekey)
                    last = rows[-1][0] if rows else after
                    _set_progress(conn, f"{table} {last}" if len(rows) == ROWS_PER_STEP else _next(table, tables))
                done += len(rows)
                if progress is not None:
                    progress(done, total)
                if len(rows) < ROWS_PER_STEP:
                    break
        reindex()
        with write_transaction(conn):
            if _progress(conn) is None:  # another process finished it meanwhile
                return changed
            for table in _KEYED_TABLES:
                if _exists(conn, table):
                    changed += _rewrite_keyed(conn, table, IDENTITY_COLUMNS[table], rekey)
            changed += _reseal(conn, reseal)
            conn.execute("DELETE FROM settings WHERE key = ?", (PROGRESS_SETTING,))
            finish()
    finally:
        conn.execute("PRAGMA foreign_keys = ON")
    return changed


def _exists(conn: Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None


def _next(table: str, tables: Sequence[str]) -> str:
    following = tables[tables.index(table) + 1:]
    return f"{following[0]} 0" if following else "keyed 0"


def _progress(conn: Connection) -> str | None:
    row = conn.execute("SELECT value FROM settings WHERE key = ?", (PROGRESS_SETTING,)).fetchone()
    return None if row is None else str(row[0])


def _set_progress(conn: Connection, at: str) -> None:
    conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                 (PROGRESS_SETTING, at))


def _resumed_at(conn: Connection, table: str, tables: Sequence[str]) -> int | None:
    """The last rowid of ``table`` already rewritten (0: none), or None when the table is done (or
    the whole rekeying, by another process)."""
    recorded = _progress(conn)
    if recorded is None:
        return None
    at, _, after = recorded.partition(" ")
    order = [*tables, "keyed"]
    if at not in order:
        raise StorageError(f"the file records a rekeying stopped at {recorded!r}, which this harness-mem does not know")
    reached, this = order.index(at), order.index(table)
    return None if reached > this else int(after) if reached == this else 0


@contextmanager
def _unguarded(conn: Connection, guards: Sequence[str]) -> Iterator[None]:
    """The block with the triggers whose SQL is ``guards`` dropped, and made again after it."""
    names = [conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND sql = ?", (sql,)).fetchone()[0]
             for sql in guards]
    for name in names:
        conn.execute(f"DROP TRIGGER {name}")
    yield
    for sql in guards:
        conn.execute(sql)


def _rewrite(conn: Connection, table: str, columns: Sequence[str], rows: Sequence[Sequence[object]],
             rekey: Rekey) -> int:
    updates = []
    for rowid, *values in rows:
        new = [rekey(v) if isinstance(v, str) and "<" in v else v for v in values]
        if new != values:
            updates.append((*new, rowid))
    if updates:
        conn.executemany(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in columns)} WHERE rowid = ?", updates)
    return len(updates)


def _rewrite_keyed(conn: Connection, table: str, columns: Sequence[str], rekey: Rekey) -> int:
    where = " OR ".join(f"instr(coalesce({c}, ''), '<')" for c in columns)
    rows = conn.execute(f"SELECT {', '.join(columns)} FROM {table} WHERE {where}").fetchall()
    match = " AND ".join(f"{c} IS ?" for c in columns)
    conn.executemany(f"UPDATE {table} SET {', '.join(f'{c} = ?' for c in columns)} WHERE {match}",
                     [(*(rekey(v) if isinstance(v, str) else v for v in row), *row) for row in rows])
    return len(rows)


def _reseal(conn: Connection, reseal: Reseal) -> int:
    rows = conn.execute("SELECT namespace, stored, key_id, sealed FROM identities").fetchall()
    resealed = [reseal(row[0], SealedIdentity(row[1], row[2], bytes(row[3]))) for row in rows]
    conn.execute("DELETE FROM identities")
    conn.executemany("INSERT OR IGNORE INTO identities (namespace, stored, key_id, sealed) VALUES (?, ?, ?, ?)",
                     [(namespace, *row) for namespace, row in resealed])
    return len(rows)
