"""The experience tables on either engine: one set of statements, and a thin adapter per engine.

:class:`~.store.ExperienceStore` and :class:`~.ledger.ConsolidationLedger` write their SQL once,
with ``?`` placeholders, in the dialect both SQLite and PostgreSQL read (``INSERT … ON CONFLICT DO
NOTHING``, ``RETURNING pk``). The few constructs the engines spell differently are asked of the
adapter as fragments: the elements of a JSON array (``json_each`` / ``jsonb_array_elements_text``),
the type of a JSON member (``json_type`` / ``jsonb_typeof``) and the larger of two values (``max`` /
``greatest``). The adapter runs a statement on the memory store's own connection, so a write made
inside :meth:`MemoryStore.transaction() <harness_mem.store.MemoryStore.transaction>` commits or
rolls back with the entries written there (an episode's entry and its row, on both engines).

The tables themselves are the engines' migrations: SQLite's ``0003_experience`` and
``0005_consolidation``, PostgreSQL's ``postgres/0004_experience``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

from ..engines.sqlite import connection_of
from ..errors import StorageError

if TYPE_CHECKING:
    from ..storage import Storage

__all__ = ["Cursor", "Tables", "tables_of"]


class Cursor(Protocol):
    """What a statement's result offers on both engines (a DB-API cursor)."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Tables:
    """The experience tables on SQLite (the base: statements run as written)."""

    engine = "sqlite"

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # the store's own connection (sqlite3, or psycopg in autocommit)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement written with ``?`` placeholders."""
        cursor: Cursor = self.conn.execute(sql, tuple(params))
        return cursor

    def insert(self, sql: str, params: Sequence[Any] = ()) -> int:
        """Run an ``INSERT … RETURNING pk`` and give the new row's pk."""
        return int(self.execute(sql, params).fetchone()[0])

    def elements(self, column: str) -> str:
        """A FROM item: the text elements of the JSON array in ``column``, as a column ``value``."""
        return f"json_each({column})"

    def json_type(self, column: str, member: str) -> str:
        """The JSON type of ``column``'s top-level ``member`` (NULL when absent; 'object' for one)."""
        return f"json_type({column}, '$.{_member(member)}')"

    def greatest(self, a: str, b: str) -> str:
        return f"max({a}, {b})"


class PostgresTables(Tables):
    """The experience tables on PostgreSQL: ``?`` becomes psycopg's ``%s``, JSON text is read as ``jsonb``."""

    engine = "postgresql"

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        cursor: Cursor = self.conn.execute(_placeholders(sql), tuple(params))
        return cursor

    def elements(self, column: str) -> str:
        return f"jsonb_array_elements_text({column}::jsonb) AS elements(value)"

    def json_type(self, column: str, member: str) -> str:
        return f"jsonb_typeof({column}::jsonb -> '{_member(member)}')"

    def greatest(self, a: str, b: str) -> str:
        return f"greatest({a}, {b})"


def _member(name: str) -> str:
    if not name.replace("_", "").isalnum():
        raise ValueError(f"not a plain JSON member name: {name!r}")
    return name


@lru_cache(maxsize=256)
def _placeholders(sql: str) -> str:
    """``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled). The shared statements hold
    no ``?`` other than placeholders."""
    return sql.replace("%", "%%").replace("?", "%s")


def tables_of(storage: Storage) -> Tables:
    """The experience tables of ``storage``'s engine, on the storage's own connection."""
    if storage.engine == "postgresql":
        from ..engines.postgres import PostgresStorage

        if isinstance(storage, PostgresStorage):
            return PostgresTables(storage.conn)
    if storage.engine == "sqlite":
        return Tables(connection_of(storage))
    raise StorageError(f"the experience tables have no adapter for the {storage.engine} engine")
