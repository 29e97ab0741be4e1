"""The PostgreSQL engine's one connection to its server, made again when the server dropped it.

A store lives as long as its process (an MCP server, an agent); the server may restart under it.
Before each statement sent outside a transaction, a connection the server has closed is noticed
without a round trip (its socket holds the server's goodbye, or end-of-file) and replaced by a
fresh one, prepared as the first was. Nothing is ever sent twice: a statement or transaction whose
connection is lost midway (a write may have committed) fails, in one line, and the next call
reconnects.

Every error of the driver reaches the caller as one line, a :class:`~harness_mem.errors.StorageError`
whose ``__cause__`` is psycopg's own (what :meth:`PostgresStorage.is_busy` reads).
"""

from __future__ import annotations

import select
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from ..errors import StorageError

if TYPE_CHECKING:
    import psycopg

__all__ = ["Connection"]


def first_line(exc: BaseException) -> str:
    """The first non-empty line of ``exc``'s message, or its type's name."""
    for line in str(exc).splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def refused_by_row_security(exc: BaseException) -> bool:
    """Whether the server refused a write because a row-level security policy forbids it (a role
    writing a namespace it may only read)."""
    return getattr(exc, "sqlstate", None) == "42501" and "row-level security" in str(exc)


class Connection:
    """psycopg's connection (autocommit) behind the few calls the engine makes: ``execute``,
    ``cursor``, ``transaction``, ``in_transaction``, ``close``. ``prepare`` sets up each new connection."""

    def __init__(self, dsn: str, location: str, prepare: Callable[[psycopg.Connection[Any]], None]) -> None:
        import psycopg

        self._psycopg = psycopg
        self._dsn = dsn
        self.location = location
        self._prepare = prepare
        self._closed = False
        self._depth = 0  # transactions open through this object: never reconnected under one
        self._opening: tuple[str, ...] | None = None  # a BEGIN (and settings) sent with the next statement
        self._asking: tuple[str, Sequence[Any]] | None = None  # a statement sent with them, its answer kept
        self._answered: list[tuple[Any, ...]] | None = None
        self._ending = False  # a read's COMMIT sent, its answer not read yet (see close_opened)
        self._raw = self._connect(first=True)

    # ---- the connection itself ------------------------------------------------------------------------

    def _connect(self, *, first: bool = False) -> psycopg.Connection[Any]:
        import psycopg

        try:
            raw: psycopg.Connection[Any] = psycopg.connect(self._dsn, autocommit=True)
        except psycopg.Error as exc:
            reason = first_line(exc).replace(self._dsn, self.location)
            doing = "connect to" if first else "reconnect to"
            raise StorageError(f"cannot {doing} {self.location}: {reason}") from None
        try:
            self._prepare(raw)
        except psycopg.Error as exc:
            raw.close()
            raise StorageError(f"{self.location}: {first_line(exc)}") from exc
        return raw

    def _between_calls(self) -> bool:
        """Whether no transaction is open (a lost connection's status is unknown)."""
        status = self._raw.info.transaction_status
        return self._depth == 0 and status in (self._psycopg.pq.TransactionStatus.IDLE,
                                               self._psycopg.pq.TransactionStatus.UNKNOWN)

    def _dropped(self) -> bool:
        """Whether the server closed this idle connection: nothing is due on it, so a readable
        socket means a goodbye (a terminated session) or end-of-file."""
        raw = self._raw
        if raw.closed or raw.broken:
            return True
        try:
            readable, _, _ = select.select([raw.fileno()], [], [], 0)
        except (OSError, ValueError):
            return True
        if not readable:
            return False
        pgconn = raw.pgconn
        try:
            pgconn.consume_input()
            pgconn.consume_input()  # the goodbye first, end-of-file next
        except self._psycopg.OperationalError:
            return True
        return bool(pgconn.status != self._psycopg.pq.ConnStatus.OK)

    def _live(self) -> psycopg.Connection[Any]:
        """The connection, made again first if the server dropped it while no call was in progress."""
        if self._closed:
            raise StorageError(f"{self.location}: this store is closed")
        self._read_ending()
        if self._between_calls() and self._dropped():
            self._reopen()
        return self._raw

    def _reopen(self) -> None:
        with suppress(self._psycopg.Error):
            self._raw.close()
        self._raw = self._connect()

    def _failure(self, exc: BaseException) -> StorageError:
        if self._raw.broken or self._raw.closed:
            return StorageError(
                f"lost the connection to {self.location} ({first_line(exc)}) — this call's transaction was not"
                " committed, or its outcome is unknown if it was committing; the next call reconnects")
        if refused_by_row_security(exc):
            return StorageError(
                f"{self.location}: this database role may not write that namespace (row-level security: it was"
                " granted it read-only, or not at all) — nothing was written; the store's owner grants writing"
                " with `harness-mem db grant ROLE NAMESPACE`")
        return StorageError(f"{self.location}: {first_line(exc)}")

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            raise self._failure(exc) from exc

    # ---- what the engine calls ---------------------------------------------------------------------------

    def execute(self, sql: Any, params: Sequence[Any] | None = None) -> psycopg.Cursor[Any]:
        raw = self._live()
        opening, self._opening = self._opening, None
        with self._translated():
            if opening is None:
                return raw.execute(sql, params)
            with raw.pipeline():  # the BEGIN and this statement in one round trip
                asked = self._open(raw, opening)
                cursor = raw.execute(sql, params)
            self._keep_answer(asked)
            return cursor

    def fetch_together(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        """Each statement's rows, the statements sent together and answered in one round trip
        (where libpq pipelines them; else one after the other)."""
        raw = self._live()
        if not self._psycopg.Pipeline.is_supported():
            return [list(self.execute(sql, params).fetchall()) for sql, params in statements]
        opening, self._opening = self._opening, None
        with self._translated():
            with raw.pipeline():
                asked = self._open(raw, opening) if opening is not None else None
                cursors = [raw.execute(sql, params) for sql, params in statements]
            self._keep_answer(asked)
            return [list(cursor.fetchall()) for cursor in cursors]

    def open_with_next(self, begin: str, *settings: str, asking: tuple[str, Sequence[Any]] | None = None) -> None:
        """Send ``begin`` (a BEGIN statement), then ``settings`` (``SET LOCAL`` statements), together
        with the next statement, not on their own: a read's transaction costs no round trip of its
        own (where libpq pipelines statements). ``asking`` (a statement and its parameters) goes
        with them, first inside the transaction: its rows are kept for :meth:`answer`."""
        self._live()  # a dropped connection is replaced now, not under the transaction
        self._opening, self._asking, self._answered = (begin, *settings), asking, None
        if not self._psycopg.Pipeline.is_supported():
            self._begin_now()

    def answer(self) -> list[tuple[Any, ...]] | None:
        """The rows of the statement :meth:`open_with_next` was asked to send (None: the
        transaction it opened never began, no statement having followed)."""
        return self._answered

    def _open(self, raw: psycopg.Connection[Any], opening: Sequence[str]) -> psycopg.Cursor[Any] | None:
        """Send what :meth:`open_with_next` put off (inside a pipeline, or not); the cursor of what
        it was asked, if anything."""
        for statement in opening:
            raw.execute(statement)
        asking, self._asking = self._asking, None
        return raw.execute(*asking) if asking is not None else None

    def _keep_answer(self, asked: psycopg.Cursor[Any] | None) -> None:
        if asked is not None:
            self._answered = list(asked.fetchall())

    def _begin_now(self) -> None:
        """Send a BEGIN put off by :meth:`open_with_next` alone (a cursor's or a nested
        transaction's statements must run inside it)."""
        opening, self._opening = self._opening, None
        if opening is not None:
            with self._translated():
                self._keep_answer(self._open(self._live(), opening))

    def close_opened(self, end: str) -> None:
        """End what :meth:`open_with_next` began: nothing to send if no statement followed it, and
        no wait for the answer (a read-only transaction's end cannot fail in a way that loses
        anything): it is read before the next statement, a round trip saved."""
        if self._opening is not None:
            self._opening = self._asking = None
            return
        raw = self._live()
        if raw.broken or raw.closed or self._depth:
            return  # lost: the next call reconnects; inside a write's transaction: it ends that
        pgconn = raw.pgconn
        try:
            pgconn.send_query(end.encode())
            while pgconn.flush():  # a few bytes: sent at once unless the socket is full
                select.select([], [raw.fileno()], [], None)
        except self._psycopg.OperationalError:
            return  # the connection is gone: noticed before the next statement
        self._ending = True

    def _read_ending(self) -> None:
        """Read the answer to the COMMIT :meth:`close_opened` sent, if it has not been read yet. Its
        failure (a lost connection) is left for the next statement to meet on a fresh one."""
        if not self._ending:
            return
        self._ending = False
        pgconn = self._raw.pgconn
        try:
            while True:
                while pgconn.is_busy():
                    select.select([self._raw.fileno()], [], [], None)
                    pgconn.consume_input()
                if pgconn.get_result() is None:
                    return
        except (self._psycopg.OperationalError, OSError, ValueError):
            return

    @contextmanager
    def cursor(self) -> Iterator[psycopg.Cursor[Any]]:
        self._begin_now()
        raw = self._live()
        with self._translated(), raw.cursor() as cursor:
            yield cursor

    @contextmanager
    def transaction(self) -> Iterator[None]:
        self._begin_now()
        raw = self._live()
        self._depth += 1
        try:
            with self._translated(), raw.transaction():
                yield
        finally:
            self._depth -= 1

    @property
    def in_transaction(self) -> bool:
        """Whether a transaction is open on the connection, or begins with the next statement (not
        on one lost: the next statement goes to a fresh connection)."""
        if self._opening is not None:
            return True
        if self._ending:
            return False  # its COMMIT is sent
        status = self._raw.info.transaction_status
        return status in (self._psycopg.pq.TransactionStatus.ACTIVE, self._psycopg.pq.TransactionStatus.INTRANS,
                          self._psycopg.pq.TransactionStatus.INERROR)

    def close(self) -> None:
        self._closed = True
        self._raw.close()
