"""A look past the store into either engine's own rows, for the tests that run on both engines and
check what a write left behind (index rows, vectors, transactions, every stored value).

On SQLite each helper reads what the single-engine tests read before (``entries_fts``,
``entries_vec``, the connection's transaction flag, the file's bytes); on PostgreSQL the same
thing in that engine's tables (the ``tokens`` column, ``entry_vectors``, the server's transaction
status, every value of every table in the store's schema).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pii import every_stored_text, every_written_byte

from harness_mem.db import driver
from harness_mem.store import MemoryStore


@contextmanager
def sqlite_file(path: Path) -> Iterator[Any]:
    """A plain connection to a SQLite file, committed and closed after the block. It uses the store's
    own SQLite library: a second library with the same file open in this process would drop the
    store's locks, and a read could then meet a half-checkpointed file ("malformed")."""
    conn = driver().connect(str(path))
    try:
        with conn:
            yield conn
    finally:
        conn.close()


def is_postgres(target: MemoryStore | str | Path) -> bool:
    if isinstance(target, MemoryStore):
        return target.storage.engine == "postgresql"
    return str(target).startswith("postgresql://")


def sql(store: MemoryStore, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of a query both engines read alike (a plain SELECT over ``entries`` or ``settings``,
    parameters as ``?``)."""
    if is_postgres(store):
        return store.storage.query(query.replace("?", "%s"), params)  # type: ignore[attr-defined, no-any-return]
    return list(store.db.execute(query, params).fetchall())


def keyword_rows(store: MemoryStore) -> int:
    """Entries with a row in the keyword index. On PostgreSQL the rows must also agree with the
    counters BM25 reads its statistics from (``keywords.rows`` and ``keywords.tokens``, each
    namespace's in ``namespace_state``)."""
    if not is_postgres(store):
        return int(store.db.execute("SELECT count(*) FROM entries_fts").fetchone()[0])
    rows, tokens = sql(store, "SELECT count(*), coalesce(sum(token_count), 0) FROM entries WHERE tokens IS NOT NULL")[0]
    counted = dict(sql(store, "SELECT key, sum(value) FROM namespace_state WHERE key IN ('keywords.rows', 'keywords.tokens')"
                              " GROUP BY key"))
    assert (int(counted.get("keywords.rows", 0)), int(counted.get("keywords.tokens", 0))) == (rows, tokens), (
        f"the keyword counters {counted} drifted from the index rows ({rows} rows, {tokens} tokens)")
    return int(rows)


def vector_rows(store: MemoryStore) -> int:
    """Stored vectors (of every namespace)."""
    if not is_postgres(store):
        return int(store.db.execute("SELECT count(*) FROM entries_vec").fetchone()[0])
    if not sql(store, "SELECT to_regclass('entry_vectors') IS NOT NULL")[0][0]:
        return 0
    return int(sql(store, "SELECT count(*) FROM entry_vectors")[0][0])


def vector_pks(store: MemoryStore) -> set[int]:
    """The pks of the entries that have a stored vector."""
    if not is_postgres(store):
        return {pk for (pk,) in store.db.execute("SELECT rowid FROM entries_vec")}
    if not sql(store, "SELECT to_regclass('entry_vectors') IS NOT NULL")[0][0]:
        return set()
    return {int(pk) for (pk,) in sql(store, "SELECT pk FROM entry_vectors")}


def keyword_holders(store: MemoryStore, *words: str) -> list[int]:
    """The pks of the entries whose index row holds every one of ``words``, in order."""
    if not is_postgres(store):
        found = store.db.execute("SELECT rowid FROM entries_fts WHERE entries_fts MATCH ? ORDER BY rowid",
                                 (" AND ".join(words),))
        return [pk for (pk,) in found]
    match = tuple((f'"{word}"',) for word in words)
    return [int(pk) for pk in store.storage.keywords.holders(match)]


def in_transaction(store: MemoryStore) -> bool:
    """True while the store's connection is inside a transaction (holding the write lock)."""
    if not is_postgres(store):
        return bool(store.db.conn.in_transaction)
    return bool(store.storage.conn.in_transaction)  # type: ignore[attr-defined]


def stored_values(dsn: str) -> bytes:
    """Every value of every table in the schema a PostgreSQL store lives in, as text (the keyword
    index's ``tokens`` included); vectors aside, as SQLite's proofs leave its float vectors aside."""
    import psycopg
    from psycopg import sql as pgsql

    data = b""
    with psycopg.connect(dsn, autocommit=True) as conn:
        # pg_catalog, not information_schema: that view takes tens of ms once a run made many schemas.
        columns = conn.execute(
            "SELECT c.relname, a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " JOIN pg_type t ON t.oid = a.atttypid WHERE c.relnamespace = current_schema()::regnamespace"
            " AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped AND t.typname NOT IN ('vector', 'halfvec')"
            " ORDER BY c.relname, a.attnum").fetchall()
        tables: dict[str, list[str]] = {}
        for table, column in columns:
            tables.setdefault(table, []).append(column)
        for table, names in tables.items():
            query = pgsql.SQL("SELECT {} FROM {}").format(
                pgsql.SQL(", ").join(pgsql.SQL("{}::text").format(pgsql.Identifier(n)) for n in names),
                pgsql.Identifier(table))
            for row in conn.execute(query):
                data += b"".join(str(value).encode() for value in row if value is not None)
    return data


def written(target: str | Path) -> bytes:
    """What a store at ``target`` left behind: on SQLite every byte under the file's folder (the
    file, its -wal and -shm, and every table's values); on PostgreSQL every value of its schema."""
    if is_postgres(target):
        return stored_values(str(target))
    return every_written_byte(Path(target).parent)


def stored_text(target: str | Path) -> bytes:
    """What the store at ``target`` holds: on SQLite the file, its -wal and -shm and every table's
    values (pii.every_stored_text); on PostgreSQL every value of its schema."""
    if is_postgres(target):
        return stored_values(str(target))
    return every_stored_text(Path(target))


def connection(store: MemoryStore) -> Any:
    """The store's own database connection (sqlite3's, or psycopg's)."""
    if is_postgres(store):
        return store.storage.conn  # type: ignore[attr-defined]
    return store.db.conn


def has_vector_table(store: MemoryStore) -> bool:
    """True while the store keeps a table of vectors (``entries_vec``, or ``entry_vectors``)."""
    if not is_postgres(store):
        return bool(store.db["entries_vec"].exists())
    return bool(sql(store, "SELECT to_regclass('entry_vectors') IS NOT NULL")[0][0])


def lose_keyword_rows(target: str | Path) -> None:
    """Throw the keyword index's rows away behind the store's back (what ``reindex`` rebuilds)."""
    if is_postgres(target):
        import psycopg

        with psycopg.connect(str(target), autocommit=True) as conn:
            conn.execute("UPDATE entries SET tokens = NULL, token_count = NULL")
            conn.execute("UPDATE namespace_state SET value = 0 WHERE key IN ('keywords.rows', 'keywords.tokens')")
        return
    from harness_mem.db import connect

    conn = connect(Path(target))
    conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('delete-all')")
    conn.close()
