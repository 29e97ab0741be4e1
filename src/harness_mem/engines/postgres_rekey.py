"""Keying a PostgreSQL store's pseudonyms again, in place (see :mod:`harness_mem.pseudonyms`).

One transaction does it all, so a crash rolls it back and the next run starts over (nothing is
ever keyed twice): every column of :data:`~harness_mem.pseudonyms.IDENTITY_COLUMNS` that holds a
pseudonym rewritten, the keyword tokens of the entries made again when a role held one (a role is
in the indexed text), and every sealed identity sealed again under its new namespace and value.
PostgreSQL checks a foreign key at each statement, and an episode names its entry by id: the
tables' foreign keys are dropped for the transaction and made again (checked) before it commits;
the append-only run log's triggers are off meanwhile. Only the store's owner may do that, so a
confined role never rekeys. After the commit the storage writes those tables anew (``VACUUM FULL``),
so no dead row version keeps a pseudonym keyed the old way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from ..identities import SealedIdentity
from ..pseudonyms import IDENTITY_COLUMNS

__all__ = ["rekey_tables", "tables_of"]

Rekey = Callable[[str], str]
Reseal = Callable[[str, SealedIdentity], tuple[str, SealedIdentity]]
_STEP = 1000


def rekey_tables(conn: Any, transaction: Callable[[], AbstractContextManager[None]], rekey: Rekey, reseal: Reseal, *,
                 finished: Callable[[], bool], finish: Callable[[], None], retokenize: Callable[[], None],
                 progress: Callable[[int, int], None] | None = None) -> int:
    """Rewrite every pseudonym of the store with ``rekey`` and every sealed identity with ``reseal``,
    in one ``transaction()``; ``retokenize()`` makes the entries' keyword tokens again, ``finish()``
    marks the store done. Nothing once ``finished()``. How many rows changed."""
    changed = 0
    with transaction():
        if finished():
            return 0
        tables = [t for t in tables_of(conn) if t != "identities"]
        total = sum(_one(conn, f"SELECT count(*) FROM {t}") for t in tables)
        keys = conn.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s)", (tables,)).fetchall()
        for table, name, _ in keys:
            conn.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        guarded = [t for t in tables if _one(conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = %s::regclass"
                                             " AND NOT tgisinternal", (t,))]
        for table in guarded:
            conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        done = 0
        roles_changed = False
        for table in tables:
            columns = _present(conn, table, IDENTITY_COLUMNS[table])
            where = " OR ".join(f"strpos(coalesce({c}::text, ''), '<') > 0" for c in columns)
            rows = conn.execute(f"SELECT ctid, {', '.join(columns)} FROM {table} WHERE {where}").fetchall()
            updates = []
            for ctid, *values in rows:
                new = [rekey(v) if isinstance(v, str) and "<" in v else v for v in values]
                if new != values:
                    updates.append((*new, ctid))
                    roles_changed = roles_changed or (table == "entries" and new[columns.index("role")] != values[
                        columns.index("role")])
            with conn.cursor() as cursor:
                for start in range(0, len(updates), _STEP):
                    cursor.executemany(f"UPDATE {table} SET {', '.join(f'{c} = %s' for c in columns)} WHERE ctid = %s",
                                       updates[start:start + _STEP])
            changed += len(updates)
            done += _one(conn, f"SELECT count(*) FROM {table}")
            if progress is not None:
                progress(done, total)
        if roles_changed:
            retokenize()
        changed += _reseal(conn, reseal)
        for table in guarded:
            conn.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        for table, name, definition in keys:
            conn.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        finish()
    return changed


def tables_of(conn: Any) -> list[str]:
    """The tables a rekeying rewrites that this database has (the sealed identities' too)."""
    return [t for t in (*IDENTITY_COLUMNS, "identities") if _exists(conn, t)]


def _one(conn: Any, sql: str, params: Sequence[Any] = ()) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def _exists(conn: Any, table: str) -> bool:
    return conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0] is True


def _present(conn: Any, table: str, columns: Sequence[str]) -> list[str]:
    found = {row[0] for row in conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (table,))}
    return [c for c in columns if c in found]


def _reseal(conn: Any, reseal: Reseal) -> int:
    rows = conn.execute("SELECT namespace, stored, key_id, sealed FROM identities").fetchall()
    resealed = [reseal(row[0], SealedIdentity(row[1], row[2], bytes(row[3]))) for row in rows]
    conn.execute("DELETE FROM identities")
    with conn.cursor() as cursor:
        cursor.executemany("INSERT INTO identities (namespace, stored, key_id, sealed) VALUES (%s, %s, %s, %s)"
                           " ON CONFLICT DO NOTHING", [(namespace, *row) for namespace, row in resealed])
    return len(rows)
