"""Rewriting tables of a live SQLite file in short write transactions: a purge's rewrite without VACUUM.

A deleted row can leave old copies in the unused middle of live pages (see
:mod:`harness_mem.maintenance`), and only pages written afresh lose them. ``VACUUM`` writes every
page afresh but holds the write lock for the whole file (about 6 s per GB). This writes afresh only
the tables that hold an entry's text (:data:`TABLES`), each in steps a writer can wait for:

1. **Start**: an empty copy of the table (``<table>__rewrite``, with the same columns, constraints
   and indexes, the indexes named ``<index>__rewrite``) and triggers on the table that repeat every
   insert, update and delete on the copy, so the copy stays in step with writers in any process.
2. **Copy**: the rows in key order, in steps that end when they have held the lock their time
   (``INSERT OR IGNORE``: a row a trigger already put there is newer).
3. **Switch**, one short transaction: the triggers go, the table is renamed ``<table>__retired``
   and the copy takes its name; its indexes take their names too (the one edit of
   ``sqlite_schema`` SQLite has no statement for: an index's name is not part of its content, and
   the schema version is raised so every connection reads the schema again). Views, triggers and
   foreign keys that name the table are left as written (``legacy_alter_table``, foreign keys off
   for the switch), so they name the copy now; the table's own triggers are made again on the copy.
4. **Retire**: the old table's rows are deleted in such steps, then the table is dropped.
   With ``secure_delete`` every page it frees is zeroed, so no copy of a purged row is left in them.

**Where it stopped, from the names alone.** A copy and its triggers are made in one transaction and
go in one (the switch, or a take-down that has emptied the copy first), so a copy with its three
triggers is in step with the table: every row it holds is the table's row. A rewrite cut short at
any point (a crash, a full disk, a kill) leaves tables whose names say where it stopped, and the
next one (:func:`rewrite_tables`, which every ``gc`` runs when it finds them) says what it did:
it finishes a retirement; it finishes a copy in step (the rows copied before are kept); and it
undoes a copy without its triggers (an older version's take-down cut short, or one edited by
hand), which is out of step and may hold text forgotten since: it is emptied and dropped, and the
table copied afresh. A copy that fails is taken down at once, so its triggers do not slow writers;
if that fails too, the copy stays in step for the next rewrite to finish.

**One rewrite at a time.** Two rewrites of one file would share its copies, so each holds a lock
on the file (:func:`one_at_a_time`, a ``flock`` the system lets go when the process ends, however
it ends); another gets the one-line "a rewrite is already running" error and changes nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence

from .. import runtime
from ..db import Connection, write_transaction
from ..errors import StorageError
from ..steps import in_steps
from . import sqlite_files

__all__ = ["TABLES", "describe", "leftovers", "one_at_a_time", "rewrite", "rewrite_tables", "running"]

#: The tables whose rows hold an entry's text: the entries, the episodes made from them and the
#: identities (an entry's session or tag as its pseudonym, the key of its sealed row). Not the
#: keyword index's own tables: FTS5 keeps state on them in every connection (statements, a blob
#: reader), and swapping them under it crashed writers in other processes (a stress test beside
#: this module's rewrite: segmentation faults within seconds). Its pages are written afresh only by
#: ``gc --vacuum``; the merge drops forgotten tokens from its blocks, zeroed as they are deleted.
TABLES = ("entries", "episodes", "identities")
COPY, RETIRED = "__rewrite", "__retired"
#: Rows one chunk of a step copies or deletes: the first chunk's, the least and the most (a step
#: takes chunks until it has held the lock its time, see :func:`harness_mem.steps.in_steps`).
ROWS = (100, 10, 5_000)
_TRIGGERS = ("insert", "update", "delete")
_INDEX_NAME = re.compile(r"^(CREATE (?:UNIQUE )?INDEX )(\"?)([\w]+)\2", re.IGNORECASE)
_TABLE_NAME = re.compile(r"^(CREATE TABLE )(['\"]?)([\w]+)\2", re.IGNORECASE)


def rewrite(conn: Connection, location: str = "the database") -> list[str]:
    """A purge's rewrite: :data:`TABLES` written afresh (a full disk is the one-line error that
    says the purge is still owed); what was found of an earlier rewrite cut short, and done with it."""
    if conn.in_transaction:
        raise StorageError("the file cannot be rewritten inside a transaction — purge outside the `with` block")
    with sqlite_files.space_for(location):
        return rewrite_tables(conn, TABLES)


def rewrite_tables(conn: Connection, tables: Sequence[str] = TABLES, *,
                   pause: Callable[[], None] | None = None) -> list[str]:
    """Write every page of ``tables`` afresh, in steps of a write transaction each, the lock let go
    between them (``pause``, by default a passive checkpoint and ``STEP_PAUSE_S`` of sleep); returns
    a line for each leftover of an earlier rewrite, saying whether it was finished or undone."""
    between = pause or (lambda: sqlite_files.between_steps(conn))
    done: list[str] = []
    with one_at_a_time(conn):
        for table in tables:
            if _exists(conn, table + RETIRED):  # an earlier rewrite stopped after its switch
                _retire(conn, table + RETIRED, between)
                done.append(f"finished a rewrite cut short after its switch: the old rows of {table} deleted")
            if not _exists(conn, table):
                continue
            if _exists(conn, table + COPY):
                if _in_step(conn, table):
                    done.append(f"finished a rewrite cut short: the copy of {table} was in step, and is completed")
                else:
                    _retire(conn, table + COPY, between)
                    done.append(f"undid a rewrite cut short: the copy of {table} had lost its triggers (out of step,"
                                " it could hold forgotten text), so it was deleted and made afresh")
            _start(conn, table)
            try:
                _copy(conn, table, between)
            except BaseException:
                _take_down(conn, table, between)
                raise
            _switch(conn, table)
            between()
            _retire(conn, table + RETIRED, between)
    return done


def leftovers(conn: Connection) -> list[str]:
    """The tables an unfinished rewrite left (copies and retired tables): [] when none."""
    return [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table' AND (name LIKE ? ESCAPE '!' OR name LIKE ? ESCAPE '!')",
        ("%" + COPY.replace("_", "!_"), "%" + RETIRED.replace("_", "!_")))]


def describe(conn: Connection) -> str:
    """What ``doctor`` says of rewrites: none left, one running, or (raised) one left unfinished."""
    left = leftovers(conn)
    if not left:
        return "none unfinished"
    if running(conn):
        return f"one running now (another gc or purge: {', '.join(left)})"
    raise StorageError(f"a rewrite was cut short and left {', '.join(left)}"
                       " — the next `harness-mem gc` finishes or undoes it")


def _lock_path(conn: Connection) -> str | None:
    """The file a rewrite of this connection's database holds locked; None for a private one (in memory)."""
    files = [file for _, name, file in conn.execute("PRAGMA database_list") if name == "main"]
    if not files or not files[0]:
        return None
    key = hashlib.sha256(os.path.realpath(files[0]).encode()).hexdigest()[:32]
    return os.path.join(runtime.runtime_dir(), f"rewriting-{key}.lock")


@contextlib.contextmanager
def one_at_a_time(conn: Connection) -> Iterator[None]:
    """Hold the lock on rewriting this connection's database meanwhile; the one-line error when
    another rewrite holds it (in this process or another)."""
    path = _lock_path(conn)
    if path is None or not runtime.make_private_dir(os.path.dirname(path)):
        yield  # nothing shared, or nowhere private to coordinate
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(
                "a rewrite of this file is already running (another gc or purge) — nothing was lost;"
                " run `harness-mem gc` again when it has finished") from None
        yield
    finally:
        os.close(fd)  # the lock goes with it


def running(conn: Connection) -> bool:
    """True while a rewrite of this connection's database runs (in any process)."""
    try:
        with one_at_a_time(conn):
            return False
    except StorageError:
        return True


def _in_step(conn: Connection, table: str) -> bool:
    """True when ``table``'s copy has its three triggers (made with it in one transaction)."""
    names = [f"{table}{COPY}_{trigger}" for trigger in _TRIGGERS]
    found = conn.execute(f"SELECT count(*) FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ?"
                         f" AND name IN ({', '.join('?' * len(names))})", (table, *names)).fetchone()[0]
    return int(found) == len(names)


def _exists(conn: Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None


def _key(conn: Connection, table: str) -> list[str]:
    """The columns rows are copied in the order of: the rowid, or a WITHOUT ROWID table's primary key."""
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()[0]
    if not re.search(r"WITHOUT\s+ROWID\s*$", sql, re.IGNORECASE):
        return ["rowid"]
    columns = sorted((pk, name) for _, name, _, _, _, pk in conn.execute(f'PRAGMA table_info("{table}")') if pk)
    return [f'"{name}"' for _, name in columns]


def _start(conn: Connection, table: str) -> None:
    copy = table + COPY
    if _exists(conn, copy):  # a copy begun before and in step (see rewrite_tables)
        return
    key = _key(conn, table)
    same = " AND ".join(f"{column} = NEW.{column}" for column in key)
    gone = " AND ".join(f"{column} = OLD.{column}" for column in key)
    with write_transaction(conn):
        sql = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?", (table,)).fetchone()[0]
        conn.execute(_TABLE_NAME.sub(lambda m: f'{m.group(1)}"{copy}"', sql, count=1))
        for name, index_sql in _indexes(conn, table):
            renamed = _named(index_sql, name + COPY)
            conn.execute(re.sub(rf"\bON\s+(['\"]?){re.escape(table)}\1", f'ON "{copy}"', renamed, count=1))
        insert = f'INSERT OR REPLACE INTO "{copy}" SELECT * FROM "{table}" WHERE {same};'
        conn.execute(f'CREATE TRIGGER "{copy}_insert" AFTER INSERT ON "{table}" BEGIN {insert} END')
        conn.execute(f'CREATE TRIGGER "{copy}_update" AFTER UPDATE ON "{table}" BEGIN'
                     f' DELETE FROM "{copy}" WHERE {gone}; {insert} END')
        conn.execute(f'CREATE TRIGGER "{copy}_delete" AFTER DELETE ON "{table}" BEGIN DELETE FROM "{copy}" WHERE {gone}; END')


def _indexes(conn: Connection, table: str) -> list[tuple[str, str]]:
    """The table's own indexes (name, CREATE statement); the ones its constraints make come with it."""
    return [(name, sql) for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL ORDER BY name",
        (table,))]


def _own_triggers(conn: Connection, table: str) -> list[tuple[str, str]]:
    """The triggers on ``table`` (name, CREATE statement), once a rewrite's own are gone."""
    return [(name, sql) for name, sql in conn.execute(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = ? ORDER BY name", (table,))]


def _copy(conn: Connection, table: str, between: Callable[[], None]) -> None:
    key = _key(conn, table)
    columns = ", ".join(key)
    marks = ", ".join("?" * len(key))
    after: tuple[object, ...] | None = None

    def chunk(size: int) -> bool:
        nonlocal after
        since = "" if after is None else f"WHERE ({columns}) > ({marks})"
        last = conn.execute(f'SELECT {columns} FROM "{table}" {since} ORDER BY {columns} LIMIT 1 OFFSET ?',
                            (*(after or ()), size - 1)).fetchone()
        upto = "" if last is None else f"({columns}) <= ({marks})"
        where = " AND ".join(part for part in (since.removeprefix("WHERE "), upto) if part)
        conn.execute(f'INSERT OR IGNORE INTO "{table}{COPY}" SELECT * FROM "{table}"'
                     + (f" WHERE {where}" if where else ""), (*(after or ()), *(last or ())))
        after = None if last is None else tuple(last)
        return last is not None  # else that chunk took the rest

    in_steps(lambda: write_transaction(conn), chunk, ROWS, between)


def _switch(conn: Connection, table: str) -> None:
    copy, retired = table + COPY, table + RETIRED
    # Both pragmas are no-ops inside a transaction: set around it, on this connection only.
    foreign_keys = int(conn.execute("PRAGMA foreign_keys").fetchone()[0])
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA legacy_alter_table = ON")
    try:
        with write_transaction(conn):
            for trigger in _TRIGGERS:
                conn.execute(f'DROP TRIGGER "{copy}_{trigger}"')
            indexes = [name for name, _ in _indexes(conn, table)]
            # The table's own triggers (the kept counts) would follow it to its retired name and
            # count its retirement as deletes: they go with the name instead, to the copy.
            triggers = _own_triggers(conn, table)
            for name, _ in triggers:
                conn.execute(f'DROP TRIGGER "{name}"')
            conn.execute(f'ALTER TABLE "{table}" RENAME TO "{retired}"')
            conn.execute(f'ALTER TABLE "{copy}" RENAME TO "{table}"')
            for _, trigger_sql in triggers:
                conn.execute(trigger_sql)
            version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
            conn.execute("PRAGMA writable_schema = ON")
            try:
                for name in indexes:
                    _rename_index(conn, name, name + RETIRED)
                    _rename_index(conn, name + COPY, name)
                conn.execute(f"PRAGMA schema_version = {version + 1}")
            finally:
                conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.execute("PRAGMA legacy_alter_table = OFF")
        conn.execute(f"PRAGMA foreign_keys = {'ON' if foreign_keys else 'OFF'}")


def _rename_index(conn: Connection, old: str, new: str) -> None:
    sql = conn.execute("SELECT sql FROM sqlite_schema WHERE type = 'index' AND name = ?", (old,)).fetchone()[0]
    conn.execute("UPDATE sqlite_schema SET name = ?, sql = ? WHERE type = 'index' AND name = ?",
                 (new, _named(sql, new), old))


def _named(index_sql: str, name: str) -> str:
    """An index's CREATE statement with another name."""
    return _INDEX_NAME.sub(lambda m: f'{m.group(1)}"{name}"', index_sql, count=1)


def _retire(conn: Connection, table: str, between: Callable[[], None]) -> None:
    """Delete ``table``'s rows a batch at a time (each page they empty is zeroed and freed), then drop it."""
    _empty(conn, table, between)
    with write_transaction(conn):
        conn.execute(f'DROP TABLE "{table}"')


def _empty(conn: Connection, table: str, between: Callable[[], None]) -> None:
    key = ", ".join(_key(conn, table))

    def chunk(size: int) -> bool:
        return bool(conn.execute(f'DELETE FROM "{table}" WHERE ({key}) IN'
                                 f' (SELECT {key} FROM "{table}" ORDER BY {key} LIMIT ?)', (size,)).rowcount == size)

    in_steps(lambda: write_transaction(conn), chunk, ROWS, between)


def _take_down(conn: Connection, table: str, between: Callable[[], None]) -> None:
    """Undo a copy that failed: its rows deleted with its triggers still there (so at every point
    it is in step), then the triggers and the copy dropped together."""
    copy = table + COPY
    try:
        _empty(conn, copy, between)
        with write_transaction(conn):
            for trigger in _TRIGGERS:
                conn.execute(f'DROP TRIGGER "{copy}_{trigger}"')
            conn.execute(f'DROP TABLE "{copy}"')
    except Exception:  # the copy's own failure is the one reported; the copy, still in step, is the next rewrite's
        pass
