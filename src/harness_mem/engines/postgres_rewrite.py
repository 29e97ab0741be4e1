"""A PostgreSQL table rewritten beside its writers, so no byte of a deleted row stays in its files.

A deleted row's bytes stay in the table's pages after a plain ``VACUUM``: pruning moves the live
tuples together and leaves the rest of the page as it was, so only a table written into new files
loses them. ``VACUUM FULL`` does that while it holds an ACCESS EXCLUSIVE lock, every writer and
reader waiting for the whole table (7.6 s at 363 MB). Here, as SQLite's rewrite does
(:mod:`harness_mem.engines.sqlite_rewrite`), the table is copied into ``<table>__rewrite`` a batch a
write transaction, a trigger keeping the copy in step with writers; then one short transaction
swaps the names and drops the old table, whose files PostgreSQL truncates at commit. What points at
the table (foreign keys and row-level policies of other tables) is made again on the copy.

One rewrite at a time: a session advisory lock, and a clear error for a second one. A copy left by
a rewrite that failed (a full disk, a crash) is only a copy: the next one drops it and starts again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import HarnessMemError, StorageError
from ..steps import STEP_PAUSE_S, next_step

__all__ = ["REWRITE_BATCH", "rewrite_table"]

#: Rows copied per write transaction (the first batch's, the least and the most), scaled by time.
REWRITE_BATCH = (500, 50, 50_000)
# Held for the length of a rewrite, with the schema's hash: two cannot share one copy.
_REWRITE_LOCK = 731_042_199
# How long the swap waits for the table's ACCESS EXCLUSIVE lock (behind a reader) before it lets
# writers through and tries again: a writer queued behind the swap waits no longer than this.
_SWAP_WAIT = "200ms"
_SWAP_TRIES = 50

Connection = Any  # a psycopg connection (psycopg is an optional dependency)
Transaction = Callable[[], AbstractContextManager[None]]


def _one(conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> Any:
    return conn.execute(sql, params).fetchone()[0]


def _all(conn: Connection, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    return list(conn.execute(sql, params).fetchall())


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@contextmanager
def _only_rewrite(conn: Connection) -> Iterator[None]:
    if not _one(conn, "SELECT pg_try_advisory_lock(%s, hashtext(current_schema()))", (_REWRITE_LOCK,)):
        raise StorageError("a rewrite of this store is already running (another gc or purge) — try again when it ends")
    try:
        yield
    finally:
        conn.execute("SELECT pg_advisory_unlock(%s, hashtext(current_schema()))", (_REWRITE_LOCK,))


def rewrite_table(conn: Connection, transaction: Transaction, table: str) -> int:
    """Rewrite ``table`` (of the current schema) into new files in steps; returns the rows copied.

    ``transaction`` is the storage's write transaction (it takes the store's write lock): each
    batch is one, so a writer waits for one batch, and a row cannot change between being read and
    copied."""
    with _only_rewrite(conn):
        copy = f"{table}__rewrite"
        _drop_copy(conn, table, copy)  # what a failed rewrite left
        key = _key_columns(conn, table)
        try:
            _make_copy(conn, table, copy, key)
            copied = _copy_rows(conn, transaction, table, copy, key)
            for statement in _indexes(conn, table, copy, keys=False):
                conn.execute(statement)
            unchecked = _swap(conn, transaction, table, copy)
        except BaseException as exc:
            _drop_copy(conn, table, copy)  # the table is as it was: only the copy goes
            if isinstance(exc, Exception) and not isinstance(exc, HarnessMemError):
                reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StorageError(f"{table} could not be rewritten ({reason}) — nothing was lost;"
                                   " the next gc or purge tries again") from None
            raise
        for referrer, name in unchecked:  # a scan that holds no writer (SHARE UPDATE EXCLUSIVE)
            conn.execute(f"ALTER TABLE {referrer} VALIDATE CONSTRAINT {_quote(name)}")
        conn.execute(f"ANALYZE {_quote(table)}")  # the new table's planner statistics (text left out)
        return copied


def _key_columns(conn: Connection, table: str) -> list[str]:
    names = [str(name) for (name,) in _all(
        conn, "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
        " ORDER BY array_position(i.indkey::int2[], a.attnum)", (table,))]
    if not names:
        raise StorageError(f"{table} has no primary key: it cannot be rewritten in steps")
    return names


def _drop_copy(conn: Connection, table: str, copy: str) -> None:
    # Only a trigger that is there: dropping one locks the table, even when there is none to drop.
    if _one(conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass AND tgname = %s", (table, copy + "_sync")):
        conn.execute(f"DROP TRIGGER {_quote(copy + '_sync')} ON {_quote(table)}")
    conn.execute(f"DROP TABLE IF EXISTS {_quote(copy)}")
    conn.execute(f"DROP FUNCTION IF EXISTS {_quote(copy + '_sync')}()")


def _make_copy(conn: Connection, table: str, copy: str, key: list[str]) -> None:
    """The empty copy with the table's columns, checks, identity, key indexes, storage parameters and
    statistics targets (its grants and row-level policies come with the swap), and the trigger that copies
    every change made from now on."""
    t, c = _quote(table), _quote(copy)
    conn.execute(f"CREATE TABLE {c} (LIKE {t} INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING CONSTRAINTS"
                 " INCLUDING STORAGE INCLUDING COMPRESSION INCLUDING GENERATED)")
    # Its storage parameters too (word_counts keeps room on each page for its counts' updates).
    options = _one(conn, "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (table,))
    if options:
        conn.execute(f"ALTER TABLE {c} SET ({', '.join(options)})")
    # Statistics targets first, before autovacuum can ANALYZE the copy: text stays out of them.
    for column, target in _all(conn, "SELECT attname, attstattarget FROM pg_attribute WHERE attrelid = %s::regclass"
                                     " AND attnum > 0 AND NOT attisdropped AND attstattarget IS NOT NULL", (table,)):
        conn.execute(f"ALTER TABLE {c} ALTER COLUMN {_quote(column)} SET STATISTICS {int(target)}")
    for statement in _indexes(conn, table, copy, keys=True):
        conn.execute(statement)
    # No grant on the copy until it is the table (with its policies): a confined role would read every
    # namespace there. The trigger runs as the rewrite's owner, so its writes reach the copy all the same.
    match = " AND ".join(f"{_quote(k)} = OLD.{_quote(k)}" for k in key)
    conn.execute(
        f"CREATE FUNCTION {_quote(copy + '_sync')}() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER"
        f" SET search_path FROM CURRENT AS $$ BEGIN"
        f" IF TG_OP <> 'INSERT' THEN DELETE FROM {c} WHERE {match}; END IF;"
        f" IF TG_OP <> 'DELETE' THEN INSERT INTO {c} OVERRIDING SYSTEM VALUE SELECT (NEW).*; END IF;"
        f" RETURN NULL; END $$")
    conn.execute(f"CREATE TRIGGER {_quote(copy + '_sync')} AFTER INSERT OR UPDATE OR DELETE ON {t}"
                 f" FOR EACH ROW EXECUTE FUNCTION {_quote(copy + '_sync')}()")


def _indexes(conn: Connection, table: str, copy: str, *, keys: bool) -> list[str]:
    """CREATE INDEX statements giving ``copy`` the indexes of ``table`` that back its primary key
    and unique constraints (``keys``: the copy's batches and trigger need them from the start), or
    the others, built CONCURRENTLY once the rows are in: in bulk, and beside the trigger's writes."""
    made = []
    for name, definition in _all(conn, "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i"
                                       " JOIN pg_class c ON c.oid = i.indexrelid WHERE i.indrelid = %s::regclass"
                                       " AND EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)"
                                       " = %s", (table, keys)):
        unique = "UNIQUE " if definition.startswith("CREATE UNIQUE") else ""
        made.append(f"CREATE {unique}INDEX {'' if keys else 'CONCURRENTLY '}{_quote(name + '__rewrite')} ON {_quote(copy)}"
                    f" {definition[definition.index(' USING '):]}")
        # An expression's statistics target (text left out of the planner's statistics) goes with it.
        made.extend(f"ALTER INDEX {_quote(name + '__rewrite')} ALTER COLUMN {int(number)} SET STATISTICS {int(target)}"
                    for number, target in _all(conn, "SELECT attnum, attstattarget FROM pg_attribute"
                                                     " WHERE attrelid = %s::regclass AND attstattarget IS NOT NULL",
                                               (name,)))
    return made


def _policies(conn: Connection, table: str, *, on: str) -> list[str]:
    """CREATE POLICY statements giving ``on`` the row-level policies ``table`` has."""
    made = []
    for name, command, permissive, roles, using, check in _all(
            conn, "SELECT polname, polcmd, polpermissive, ARRAY(SELECT CASE WHEN r = 0 THEN 'public'"
                  " ELSE quote_ident(r::regrole::text) END FROM unnest(polroles) r),"
                  " pg_get_expr(polqual, polrelid), pg_get_expr(polwithcheck, polrelid)"
                  " FROM pg_policy WHERE polrelid = %s::regclass", (table,)):
        commands = {"r": "SELECT", "a": "INSERT", "w": "UPDATE", "d": "DELETE", "*": "ALL"}
        made.append(f"CREATE POLICY {_quote(name)} ON {_quote(on)} AS {'PERMISSIVE' if permissive else 'RESTRICTIVE'}"
                    f" FOR {commands[command]} TO {', '.join(roles)}"
                    + (f" USING ({using})" if using else "") + (f" WITH CHECK ({check})" if check else ""))
    return made


def _grants(conn: Connection, table: str, *, on: str) -> list[str]:
    """GRANT statements giving ``on`` the privileges others hold on ``table``."""
    return [f"GRANT {privilege} ON {_quote(on)} TO {'PUBLIC' if grantee == 0 else _quote(str(name))}"
            + (" WITH GRANT OPTION" if grantable else "")
            for grantee, name, privilege, grantable in _all(
                conn, "SELECT a.grantee::oid, CASE WHEN a.grantee = 0 THEN '' ELSE a.grantee::regrole::text END,"
                      " a.privilege_type, a.is_grantable FROM pg_class c, aclexplode(c.relacl) a"
                      " WHERE c.oid = %s::regclass AND a.grantee <> c.relowner", (table,))]


def _copy_rows(conn: Connection, transaction: Transaction, table: str, copy: str, key: list[str]) -> int:
    """Every row of ``table`` into ``copy``, in key order, one batch a write transaction; a row a
    writer already put there (the trigger) is kept as it is."""
    order = ", ".join(_quote(k) for k in key)
    copied, after, size = 0, None, REWRITE_BATCH[0]
    while True:
        began = time.monotonic()
        with transaction():
            where = f"WHERE ({order}) > ({', '.join(['%s'] * len(key))})" if after is not None else ""
            last = conn.execute(
                f"WITH batch AS (SELECT * FROM {_quote(table)} {where} ORDER BY {order} LIMIT %s),"
                f" copied AS (INSERT INTO {_quote(copy)} OVERRIDING SYSTEM VALUE SELECT * FROM batch"
                f" ON CONFLICT DO NOTHING)"
                f" SELECT count(*), {', '.join(f'(array_agg({_quote(k)} ORDER BY {order} DESC))[1]' for k in key)}"
                " FROM batch", (*(after or ()), size)).fetchone()
        if not last[0]:
            return copied
        copied += int(last[0])
        after = tuple(last[1:])
        if last[0] < size:
            return copied
        size = next_step(size, time.monotonic() - began, REWRITE_BATCH)
        time.sleep(STEP_PAUSE_S)  # a waiting writer's turn


def _swap(conn: Connection, transaction: Transaction, table: str, copy: str) -> list[tuple[str, str]]:
    """In one short transaction: the copy takes the table's name, identity counter, constraints'
    and indexes' names, grants, triggers, policies, and what other tables point at it with; the old table goes.
    Returns the foreign keys made again unchecked, (table, name) each."""
    for _ in range(_SWAP_TRIES):
        try:
            with transaction():
                conn.execute(f"SET LOCAL lock_timeout = '{_SWAP_WAIT}'")
                conn.execute(f"LOCK TABLE {_quote(table)} IN ACCESS EXCLUSIVE MODE")
                return _swap_locked(conn, table, copy)
        except Exception as exc:  # psycopg's own, or the storage's one line with psycopg's as its cause
            if "LockNotAvailable" not in (type(exc).__name__, type(exc.__cause__).__name__):
                raise
        time.sleep(STEP_PAUSE_S)  # writers and readers through; then the lock is tried again
    raise StorageError(f"{table} was never free for the {_SWAP_WAIT} its rewrite's last step needs:"
                       " readers held it throughout — try again when it is quieter")


@dataclass
class _Attached:
    """What belongs to a table besides its rows and must be given to its copy at the swap: SQL to
    run again (policies, grants and triggers, others' foreign keys and policies naming it), and
    names to move over (its own indexes, constraints and identity sequences)."""

    security: tuple[bool, bool]  # row-level security (enabled, forced)
    pointing: list[tuple[str, str, str]]  # (table, foreign key, definition) of other tables
    own_keys: list[tuple[str, str]]  # (foreign key, definition) of its own
    dependents: dict[str, list[str]]  # another table whose policies name it: their CREATE POLICY
    statements: list[str]  # its grants, triggers and policies, made again after the rename
    constraints: list[tuple[str, str, str]]  # (name, p or u, index) of its keys
    indexes: list[str]  # the names of its other indexes
    identities: list[tuple[str, str, str]]  # (column, sequence, the sequence's bare name)


def _attached(conn: Connection, table: str, copy: str) -> _Attached:
    security = _all(conn, "SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = %s::regclass", (table,))[0]
    dependents = [str(name) for (name,) in _all(
        conn, "SELECT DISTINCT p.polrelid::regclass::text FROM pg_depend d JOIN pg_policy p ON p.oid = d.objid"
              " WHERE d.classid = 'pg_policy'::regclass AND d.refobjid = %s::regclass"
              " AND p.polrelid <> d.refobjid", (table,))]
    triggers = [str(made) for (made,) in _all(
        conn, "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s::regclass AND NOT tgisinternal"
              " AND tgname <> %s", (table, copy + "_sync"))]
    return _Attached(
        security=(bool(security[0]), bool(security[1])),
        pointing=_all(conn, "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
                            " WHERE confrelid = %s::regclass AND conrelid <> confrelid", (table,)),
        own_keys=_all(conn, "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
                            " WHERE conrelid = %s::regclass AND contype = 'f'", (table,)),
        dependents={name: _policies(conn, name, on=name) for name in dependents},
        statements=[*_grants(conn, table, on=table), *triggers, *_policies(conn, table, on=table)],
        constraints=_all(conn, "SELECT conname, contype, (SELECT relname FROM pg_class WHERE oid = conindid)"
                               " FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN ('p', 'u')", (table,)),
        indexes=[str(name) for (name,) in _all(
            conn, "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                  " WHERE i.indrelid = %s::regclass"
                  " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)", (table,))],
        identities=_all(conn, "SELECT attname, pg_get_serial_sequence(%s, attname), (SELECT relname FROM pg_class"
                              " WHERE oid = pg_get_serial_sequence(%s, attname)::regclass) FROM pg_attribute"
                              " WHERE attrelid = %s::regclass AND attidentity <> ''", (table, table, table)),
    )


def _swap_locked(conn: Connection, table: str, copy: str) -> list[tuple[str, str]]:
    t, c = _quote(table), _quote(copy)
    held = _attached(conn, table, copy)
    for referrer, name, _ in held.pointing:
        conn.execute(f"ALTER TABLE {referrer} DROP CONSTRAINT {_quote(name)}")
    for name in held.dependents:
        for (policy,) in _all(conn, "SELECT polname FROM pg_policy WHERE polrelid = %s::regclass", (name,)):
            conn.execute(f"DROP POLICY {_quote(policy)} ON {name}")
    for column, sequence, _ in held.identities:
        last, called = conn.execute(f"SELECT last_value, is_called FROM {sequence}").fetchone()
        conn.execute("SELECT setval(pg_get_serial_sequence(%s, %s), %s, %s)", (copy, column, last, called))
    conn.execute(f"DROP TRIGGER {_quote(copy + '_sync')} ON {t}")
    conn.execute(f"DROP TABLE {t}")
    conn.execute(f"DROP FUNCTION {_quote(copy + '_sync')}()")
    conn.execute(f"ALTER TABLE {c} RENAME TO {t}")
    for name in held.indexes:
        conn.execute(f"ALTER INDEX {_quote(name + '__rewrite')} RENAME TO {_quote(name)}")
    for name, kind, index in held.constraints:
        conn.execute(f"ALTER TABLE {t} ADD CONSTRAINT {_quote(name)} {'PRIMARY KEY' if kind == 'p' else 'UNIQUE'}"
                     f" USING INDEX {_quote(index + '__rewrite')}")
    for column, _, sequence_name in held.identities:
        made = _one(conn, "SELECT pg_get_serial_sequence(%s, %s)", (table, column))
        conn.execute(f"ALTER SEQUENCE {made} RENAME TO {_quote(sequence_name)}")
    if held.security[0]:
        conn.execute(f"ALTER TABLE {t} ENABLE ROW LEVEL SECURITY")
    if held.security[1]:
        conn.execute(f"ALTER TABLE {t} FORCE ROW LEVEL SECURITY")
    # Checked already (every row came from the table they held on): NOT VALID skips a scan under the lock.
    for name, definition in held.own_keys:
        conn.execute(f"ALTER TABLE {t} ADD CONSTRAINT {_quote(name)} {definition} NOT VALID")
    for referrer, name, definition in held.pointing:
        conn.execute(f"ALTER TABLE {referrer} ADD CONSTRAINT {_quote(name)} {definition} NOT VALID")
    for statement in [*held.statements, *(s for made in held.dependents.values() for s in made)]:
        conn.execute(statement)
    return [(table, name) for name, _ in held.own_keys] + [(referrer, name) for referrer, name, _ in held.pointing]
