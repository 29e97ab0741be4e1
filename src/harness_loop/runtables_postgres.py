"""The run tables on a PostgreSQL server, for orchestrators and workers on several machines.

The schema is a numbered set of SQL files in ``harness_loop/migrations/postgres/`` (the same tables
and columns as the SQLite set's, typed for PostgreSQL), applied in order, each in its own
transaction together with its row in ``_migrations_harness_loop``, under an advisory lock: several
processes may open one database at once, and one that finds every file recorded takes no lock at all.
harness_mem's own PostgreSQL set is applied first (its ``settings`` table holds the redaction key
that the memory store and the run store share).

Unlike SQLite's, writers run at once here, so the rows a write decides on are locked: the run row
(``FOR NO KEY UPDATE``) before anything that depends on it, a claimed job row with ``FOR UPDATE SKIP
LOCKED`` (a worker takes the next job nobody else is taking, without waiting for the others), and a
run's event log under a transaction-scoped advisory lock of its own, always last (see
:mod:`harness_loop.runtables` for the order). A worker's claim and settle are sent in pipeline mode
(:meth:`PostgresRunTables.batch`), so those locks are held for one round trip each. The connection
string's password is never shown.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any

from harness_mem.engines import open_storage, shown_location
from harness_mem.errors import ExtensionError, MigrationError, SchemaTooNewError, StorageError
from harness_mem.pseudonyms import database_redactor
from harness_mem.redaction import Redactor

from .runtables import RunTables

if TYPE_CHECKING:
    import psycopg

__all__ = ["MIGRATIONS_TABLE", "PostgresMigration", "PostgresRunTables", "known_migrations"]

MIGRATIONS_TABLE = "_migrations_harness_loop"
# Advisory lock keys (arbitrary, fixed): one for migrating, one class for the runs' event logs (the
# second key is the run's id hashed, so appends to different runs rarely wait for each other).
_MIGRATE_LOCK = 7_310_421_995
_LOG_LOCK_CLASS = 73_104
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_IDLE = 0  # psycopg.pq.TransactionStatus.IDLE: no transaction open


@dataclass(frozen=True)
class PostgresMigration:
    number: int
    name: str
    sql: str


def _directory() -> Traversable:
    return resources.files("harness_loop") / "migrations" / "postgres"


@cache
def known_migrations() -> tuple[PostgresMigration, ...]:
    """harness_loop's PostgreSQL migrations in order (read once per process)."""
    found: dict[int, PostgresMigration] = {}
    directory = _directory()
    for item in directory.iterdir() if directory.is_dir() else ():
        match = _FILE_NAME.match(item.name)
        if match:
            number = int(match.group(1))
            if number in found:
                raise MigrationError(f"harness_loop: two PostgreSQL migrations share number {number:04d}")
            found[number] = PostgresMigration(number, item.name.removesuffix(".sql"), item.read_text(encoding="utf-8"))
    if not found:
        raise MigrationError("no harness_loop PostgreSQL migrations found — the installation is incomplete;"
                             " reinstall harness-mem")
    return tuple(found[n] for n in sorted(found))


@lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    """The shared statements' ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ExtensionError("the PostgreSQL engine needs psycopg — pip install 'harness-mem[postgres]'") from None
    return psycopg


class PostgresRunTables(RunTables):
    """The run tables in the database (and schema, by its search_path) a connection string names."""

    engine = "postgresql"
    deps_of_job = "jsonb_array_elements_text(j.deps::jsonb) AS d(value)"
    claim_lock = " FOR UPDATE OF j SKIP LOCKED"
    row_lock = " FOR UPDATE"
    run_lock = " FOR NO KEY UPDATE"
    answers_later = True

    def __init__(self, dsn: str, *, redactor: Redactor | None = None) -> None:
        driver = _psycopg()
        #: Where the tables are, without the password.
        self.location = shown_location(dsn)
        try:
            self.conn: psycopg.Connection[tuple[Any, ...]] = driver.connect(dsn, autocommit=True)
        except driver.Error as exc:
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise StorageError(f"cannot connect to {self.location}: {reason.replace(dsn, self.location)}") from None
        self._redactor = redactor
        self._dsn = dsn
        self._errors = driver.errors
        self._batched = False

    @classmethod
    def open(cls, dsn: str) -> PostgresRunTables:
        """Migrate harness_mem's set (and take the database's redaction key), connect, migrate ours."""
        storage = open_storage(dsn)
        try:
            storage.migrate()
            redactor = database_redactor(storage, writable=True)
        finally:
            storage.close()
        tables = cls(dsn, redactor=redactor)
        try:
            tables.migrate()
        except BaseException:
            tables.close()
            raise
        return tables

    def __repr__(self) -> str:
        return f"<PostgresRunTables {self.location!r}>"

    # ---- primitives ----------------------------------------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.conn.execute(_placeholders(sql), tuple(params))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(_placeholders(sql), [tuple(row) for row in rows])

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.conn.transaction():
            yield

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        if self._batched or self.conn.info.transaction_status != _IDLE:  # already in a transaction: its view
            yield
            return
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    @contextmanager
    def batch(self) -> Iterator[None]:
        # A claim or a settle is then two round trips, not one per statement, and the locks they
        # take on the run (its row, its log) are held for one round trip, not a dozen. BEGIN and
        # COMMIT are sent by hand: psycopg's transaction() waits for the server at both ends.
        try:
            with self.conn.pipeline():
                self.conn.execute("BEGIN")
                self._batched = True  # libpq reports no transaction while the pipeline is on
                try:
                    yield
                finally:
                    self._batched = False
                self.conn.execute("COMMIT")
        except BaseException:
            if self.conn.info.transaction_status != _IDLE:
                self.conn.rollback()
            raise

    def lock_run(self, run_id: str) -> None:
        # NO KEY UPDATE, as an UPDATE of the row takes: it serialises the writers of the run but not
        # the inserts of its job and event rows, whose foreign keys share-lock the row's key.
        self.execute("SELECT 1 FROM runs WHERE id = ? FOR NO KEY UPDATE", (run_id,))

    def ready_job(self, run_id: str, namespace: str, now: int, finished: Collection[str]) -> tuple[Any, ...] | None:
        # The pick must walk the run's jobs in position order and stop at the first it may take. On
        # a run just submitted (no statistics yet) the planner takes the run for a few rows and
        # would rather fetch them all, check every one's deps and sort: each claim then cost the
        # whole run. Only for this transaction, and only the scans that cannot keep the order.
        self.execute("SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)")
        return super().ready_job(run_id, namespace, now, finished)

    def lock_log(self, run_id: str) -> None:
        self.execute(f"SELECT pg_advisory_xact_lock({_LOG_LOCK_CLASS}, hashtext(?))", (run_id,))

    def redactor(self) -> Redactor:
        if self._redactor is None:
            storage = open_storage(self._dsn)
            try:
                self._redactor = database_redactor(storage, writable=not storage.read_only)
            finally:
                storage.close()
        return self._redactor

    def close(self) -> None:
        self.conn.close()

    @property
    def integrity_error(self) -> type[Exception]:
        error: type[Exception] = self._errors.IntegrityError
        return error

    def is_duplicate_run(self, exc: Exception) -> bool:
        return isinstance(exc, self._errors.UniqueViolation) and exc.diag.constraint_name == "runs_pkey"

    # ---- migrations ------------------------------------------------------------------------------------

    def recorded(self) -> dict[int, str]:
        """number -> name of every migration this database records; empty before the table exists."""
        exists = self.execute(f"SELECT to_regclass('{MIGRATIONS_TABLE}') IS NOT NULL").fetchone()[0]
        if not exists:
            return {}
        return {n: name for n, name in self.execute(f"SELECT number, name FROM {MIGRATIONS_TABLE}").fetchall()}

    def _check_not_newer(self, recorded: dict[int, str]) -> None:
        newest = known_migrations()[-1].number
        newer = sorted(n for n in recorded if n > newest)
        if newer:
            raise SchemaTooNewError(
                f"{self.location} has harness_loop schema version {newer[-1]:04d} but this installation knows only"
                f" up to {newest:04d} — upgrade harness-mem (pip install -U harness-mem)"
            )

    def migrate(self) -> None:
        """Apply the pending files in order, each in a transaction with its bookkeeping row."""
        known = known_migrations()
        recorded = self.recorded()
        self._check_not_newer(recorded)
        if all(m.number in recorded for m in known):
            return  # the common case: nothing to do, no lock taken
        with self.transaction():
            self.execute(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK})")
            self.execute(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} (number INTEGER PRIMARY KEY,"
                         " name TEXT NOT NULL, applied_at TEXT NOT NULL)")
        for migration in known:
            with self.transaction():
                self.execute(f"SELECT pg_advisory_xact_lock({_MIGRATE_LOCK})")
                recorded = self.recorded()  # another process may have got here first
                self._check_not_newer(recorded)
                if migration.number in recorded:
                    continue
                try:
                    self.conn.execute(migration.sql)  # no parameters: the whole file in one go
                except self._errors.Error as exc:
                    raise MigrationError(
                        f"harness_loop PostgreSQL migration {migration.name} failed and was rolled back: {exc}"
                    ) from exc
                self.execute(
                    f"INSERT INTO {MIGRATIONS_TABLE} (number, name, applied_at) VALUES (?, ?, ?)",
                    (migration.number, migration.name, datetime.now(UTC).isoformat(timespec="seconds")),
                )
