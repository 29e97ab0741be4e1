"""The run tables in a SQLite file (the memory file harness_mem keeps its entries in).

The schema is harness_loop's migration set (:data:`MIGRATIONS`: SQL files in ``harness_loop/migrations/``,
inside the package so the wheel carries them, recorded in ``_migrations_harness_loop``). It comes after
harness_mem's set, which brings a runs table made by an older version up to the columns this set
expects. Every write runs under ``BEGIN IMMEDIATE``: one writer at a time, so nothing here locks rows.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from importlib import resources
from typing import Any

from harness_mem.db import Connection, connect, driver, is_read_only, redaction_secret, write_transaction
from harness_mem.migrations import HARNESS_MEM, Migration, MigrationSet
from harness_mem.pseudonyms import database_redactor
from harness_mem.redaction import Redactor

from .runtables import RunTables

__all__ = ["MIGRATIONS", "SQLiteRunTables", "migrate"]

MIGRATIONS = MigrationSet("harness_loop", resources.files("harness_loop") / "migrations", after=(HARNESS_MEM,))


def migrate(conn: Connection) -> list[Migration]:
    """Apply harness_mem's pending migrations, then harness_loop's; returns the ones this call ran."""
    done = HARNESS_MEM.migrate(conn)
    return done + MIGRATIONS.migrate(conn)


class FileSettings:
    """The settings of the file the run tables are kept in, as the memory store keeps them."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def setting(self, key: str) -> str | None:
        row = self.conn.execute("SELECT value FROM settings WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_setting(self, key: str, value: str) -> None:
        self.conn.execute("INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT (key)"
                          " DO UPDATE SET value = excluded.value", (key, value))

    def transaction(self) -> AbstractContextManager[None]:
        return _transaction(self.conn)

    def redaction_secret(self, *, create: bool) -> str | None:
        return redaction_secret(self.conn, create=create)


@contextmanager
def _transaction(conn: Connection) -> Iterator[None]:
    with write_transaction(conn):
        yield


class SQLiteRunTables(RunTables):
    """The run tables on a connection from :func:`harness_mem.db.connect`."""

    engine = "sqlite"
    deps_of_job = "json_each(j.deps) AS d"

    def __init__(self, conn: Connection, *, owns_connection: bool = False) -> None:
        #: The SQLite connection (autocommit; writes go through :meth:`transaction`).
        self.conn = conn
        self.owns_connection = owns_connection

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> SQLiteRunTables:
        """Open the file at ``path`` and apply both migration sets; :meth:`close` closes it."""
        conn = connect(path).conn
        try:
            migrate(conn)
        except BaseException:
            conn.close()
            raise
        return cls(conn, owns_connection=True)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.conn.executemany(sql, rows)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with write_transaction(self.conn):
            yield

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        yield  # each read is its own statement, as it always was

    def lock_run(self, run_id: str) -> None:
        pass  # BEGIN IMMEDIATE holds the whole file's write lock already

    def lock_log(self, run_id: str) -> None:
        pass

    def migrate(self) -> None:
        MIGRATIONS.migrate(self.conn)

    def redactor(self) -> Redactor:
        return database_redactor(FileSettings(self.conn), writable=not is_read_only(self.conn))

    def close(self) -> None:
        if self.owns_connection:
            self.conn.close()

    @property
    def integrity_error(self) -> type[Exception]:
        error: type[Exception] = driver().IntegrityError
        return error

    def is_duplicate_run(self, exc: Exception) -> bool:
        return "runs.id" in str(exc)
