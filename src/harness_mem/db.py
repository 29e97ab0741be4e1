"""The one place connections are made.

Every connection harness_mem (and harness_loop) opens comes from :func:`connect`: it picks the SQLite
driver once per process, sets the pragmas that make several writers safe on one file, loads
sqlite-vec, and hands the connection out wrapped in a sqlite-utils ``Database`` (the handle for
introspection: tables, columns, views, rows). Hot paths use the raw connection, ``db.conn``, with
explicit SQL. Nothing else in the code base imports a SQLite driver.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import secrets
import sqlite3 as _stdlib_sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from sqlite_utils import Database

from .errors import DiskFullError, ExtensionError, StorageError
from .settings import Settings, is_server_url  # the environment is read and checked in one place

__all__ = [
    "BOOKKEEPING_TABLE",
    "BUSY_TIMEOUT_MS",
    "Connection",
    "connect",
    "database",
    "default_path",
    "driver",
    "home_dir",
    "is_read_only",
    "redaction_secret",
    "sqlite_version",
    "truncate_wal",
    "write_transaction",
]

# Writers wait this long for the lock before giving up. Long on purpose: an import holding the
# write lock for a batch must not surface "database is locked" to a concurrent `add`.
BUSY_TIMEOUT_MS = 30_000
CACHE_SIZE_KIB = 64 * 1024
# A try at emptying the WAL waits this long for the other connections, holding the write lock
# meanwhile: the first try briefly, each next one twice as long up to the longest (a reader still
# in the log is a query under way; a new one no longer enters the log once it is all copied). Each
# comes after a pause longer than a waiting writer's longest sleep (SQLite's busy handler sleeps
# at most 100 ms at a time), so every writer waiting gets its turn in between.
TRUNCATE_FIRST_TRY_MS = 250
TRUNCATE_LONGEST_TRY_MS = 2000
TRUNCATE_PAUSE_S = 0.15
#: For a process that reads once and exits: a cold recall's pages, without holding on to more.
ONE_SHOT_CACHE_KIB = 4 * 1024

Connection = Any  # sqlite3.Connection of whichever driver was chosen


@cache
def driver() -> ModuleType:
    """The DB-API module used for every connection in this process.

    ``pysqlite3`` when it is installed (sqlite-utils makes the same choice, and one process must not
    mix two SQLite libraries: they fight over file locks), else the standard ``sqlite3`` if it can
    load extensions.
    """
    try:
        pysqlite3: ModuleType = importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        pass
    else:
        return pysqlite3
    if _can_load_extensions(_stdlib_sqlite3):
        return _stdlib_sqlite3
    raise ExtensionError(
        "this Python's sqlite3 cannot load extensions and pysqlite3 is not installed"
        " — pip install pysqlite3-binary (or use a Python built with extension loading)"
    )


def _can_load_extensions(module: ModuleType) -> bool:
    if not hasattr(module.Connection, "enable_load_extension"):
        return False
    conn = module.connect(":memory:")
    try:
        conn.enable_load_extension(True)
        return True
    except Exception:
        return False
    finally:
        conn.close()


def sqlite_version() -> str:
    return str(driver().sqlite_version)


def connect(path: str | os.PathLike[str], *, read_only: bool = False, cache_kib: int = CACHE_SIZE_KIB) -> Database:
    """Open ``path`` (created if missing) with WAL, a busy timeout, foreign keys and sqlite-vec.

    The connection (``.conn``) is in autocommit mode: writes go through :func:`write_transaction`.
    A file whose location cannot be written (a read-only file, directory or file system) opens
    read-only: every read works, and a write fails with a line saying where (:func:`is_read_only`).
    ``read_only`` opens an existing file so wherever it is (nothing this connection does can change it).
    """
    sqlite = driver()
    target = str(path)
    if is_server_url(target):  # never a file named after a URL
        raise StorageError("this part of harness-mem keeps its tables in a SQLite file, not on a database server"
                           " — give it a file's path")
    if read_only and (target == ":memory:" or not Path(target).is_file()):
        raise StorageError(f"no database at {target} to open read-only — create it first")
    read_only = read_only or (target != ":memory:" and _exists_read_only(Path(target)))
    if target != ":memory:" and not read_only:
        try:
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(_cannot_create(target, exc)) from None
    try:
        conn = _open(sqlite, target, read_only)
    except sqlite.Error as exc:
        if Path(target).is_dir():
            raise StorageError(f"{target} is a folder, not a database file — name a file in it") from None
        raise StorageError(f"cannot open {target}: {exc}") from None
    db = database(conn)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _refuse_foreign(db, target)  # before any pragma below writes to the file
        # A new file frees pages as it goes (PRAGMA incremental_vacuum, `harness-mem gc`); the mode
        # can only be chosen before the first table exists. An older file keeps NONE until a VACUUM.
        if not read_only and conn.execute("PRAGMA page_count").fetchone()[0] == 0:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        if target != ":memory:" and not read_only:
            conn.execute("PRAGMA journal_mode = WAL")
        # NORMAL is durable across process crashes in WAL mode; only power loss can drop the last commit.
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(f"PRAGMA cache_size = -{int(cache_kib)}")
        # No memory-mapped I/O: a mapped page a query touches stays in the process's resident set,
        # and one cold recall over 100k entries would map ~50 MB more; warm queries measured no faster.
        conn.execute("PRAGMA mmap_size = 0")
        conn.execute("PRAGMA temp_store = MEMORY")
        # Deleted and overwritten content is zeroed, not left in free space: forgotten means gone.
        conn.execute("PRAGMA secure_delete = ON")
        if read_only:
            conn.execute("PRAGMA query_only = ON")  # how is_read_only() tells, and a second guard
        _load_sqlite_vec(conn)
    except sqlite.DatabaseError as exc:
        conn.close()
        raise StorageError(f"{target} is not a usable SQLite database ({exc})") from None
    except BaseException:
        conn.close()
        raise
    return db


def _exists_read_only(path: Path) -> bool:
    """True for an existing file that this process cannot write, or whose folder it cannot write
    (SQLite writes its -wal and -shm files beside it)."""
    return path.is_file() and not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK))


def _open(sqlite: ModuleType, target: str, read_only: bool) -> Connection:
    if not read_only:
        return sqlite.connect(target, isolation_level=None, check_same_thread=False)
    uri = "file:" + urllib.parse.quote(os.path.abspath(target)) + "?mode=ro"
    conn = sqlite.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except sqlite.OperationalError:
        # A WAL file whose -shm cannot be created here: nobody can write it in this location either,
        # so it is read as the immutable file it is.
        conn.close()
        return sqlite.connect(uri + "&immutable=1", uri=True, isolation_level=None, check_same_thread=False)


def is_read_only(conn: Connection) -> bool:
    """True for a connection :func:`connect` opened read-only."""
    return bool(conn.execute("PRAGMA query_only").fetchone()[0])


def _refuse_writes(conn: Connection) -> None:
    if is_read_only(conn):
        files = [row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"]
        raise StorageError(
            f"{files[0] if files else 'the database'} is not writable (a read-only file, folder or file system)"
            " — nothing was written"
        )


def _cannot_create(target: str, exc: OSError) -> str:
    """Why the folders of ``target`` could not be made: a file in the way is named, else the OS's reason."""
    blocker = next((p for p in reversed(Path(target).parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        return f"cannot create a database at {target}: {blocker} is a file, not a folder — choose another path"
    return f"cannot create {target}: {exc.strerror} ({exc.filename})"


#: Where applied migrations are recorded: a file with tables but without it was not made by harness-mem.
BOOKKEEPING_TABLE = "_migrations"


def database(conn: Connection) -> Database:
    """``conn`` as a sqlite-utils ``Database``, leaving the connection as it is.

    No plugins (their hooks could change the connection), and SQLite's default trigger semantics:
    sqlite-utils would otherwise switch recursive triggers on.
    """
    return Database(conn, recursive_triggers=False, execute_plugins=False)


def _refuse_foreign(db: Database, target: str) -> None:
    """Refuse a SQLite file that harness-mem did not create, leaving it byte for byte as it was."""
    tables = sorted(name for name in db.table_names() if not name.startswith("sqlite_"))
    if tables and BOOKKEEPING_TABLE not in tables:
        shown = ", ".join(tables[:5]) + (", …" if len(tables) > 5 else "")
        raise StorageError(
            f"{target} is a SQLite database that harness-mem did not create (tables: {shown})"
            " — point --db at a harness-mem file or at a new path; it was left unchanged"
        )


def _load_sqlite_vec(conn: Connection) -> None:
    try:
        import sqlite_vec  # type: ignore[import-untyped]
    except ImportError:
        raise ExtensionError("sqlite-vec is not installed — pip install sqlite-vec") from None
    try:
        conn.enable_load_extension(True)
        sqlite_vec.load(conn)
        conn.enable_load_extension(False)
    except Exception as exc:
        raise ExtensionError(
            f"could not load sqlite-vec ({exc}) — reinstall sqlite-vec for this platform"
            " (pip install --force-reinstall sqlite-vec)"
        ) from None


def truncate_wal(conn: Connection, *, patience_ms: int | None = None) -> bool:
    """Copy the write-ahead log into the file and truncate it to nothing; False when a reader kept it.

    ``wal_checkpoint(TRUNCATE)`` holds the write lock while it copies the log and while it waits for
    the readers still in the log to leave, for as long as its busy timeout: every writer, in every
    process, waits as long, and one that was already waiting gives up first ("database is locked").
    So the log is copied without the write lock first (PASSIVE), and the truncation is tried with
    short waits (from ``TRUNCATE_FIRST_TRY_MS`` to ``TRUNCATE_LONGEST_TRY_MS``), the lock let go in
    between, for up to ``patience_ms`` (the busy timeout by default). A reader that stays in the log
    longer keeps it: the next checkpoint truncates it.
    """
    patience_ms = BUSY_TIMEOUT_MS if patience_ms is None else patience_ms
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    give_up = time.monotonic() + patience_ms / 1000
    wait_ms = TRUNCATE_FIRST_TRY_MS
    try:
        while True:
            conn.execute(f"PRAGMA busy_timeout = {wait_ms}")
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            if not busy:
                return True
            if time.monotonic() >= give_up:
                return False
            time.sleep(TRUNCATE_PAUSE_S)
            wait_ms = min(2 * wait_ms, TRUNCATE_LONGEST_TRY_MS)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")


@contextlib.contextmanager
def write_transaction(conn: Connection) -> Iterator[Connection]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back on any exception.

    IMMEDIATE takes the write lock up front, so a read-then-write transaction cannot fail halfway
    with SQLITE_BUSY when another process writes first; the busy timeout makes it wait instead.
    """
    _refuse_writes(conn)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException as exc:
        try:
            conn.execute("ROLLBACK")
        except driver().OperationalError as failed:
            if "no transaction is active" not in str(failed):  # a failed COMMIT may have ended it already
                raise
        if _is_disk_full(exc):
            files = [row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"]
            raise DiskFullError(
                f"no space left to write {files[0] if files else 'the database'}"
                " — this transaction was rolled back and what was committed before it is kept; free some space"
            ) from None
        raise


def _is_disk_full(exc: BaseException) -> bool:
    """SQLITE_FULL, whichever driver raised it."""
    return type(exc).__name__ == "OperationalError" and "disk is full" in str(exc)


def redaction_secret(conn: Connection, *, create: bool = True) -> str | None:
    """The file's key for keyed pseudonyms (``settings.redaction.secret``), made on first use.

    Every writer on the file (the memory store, the orchestrator's run store) builds its redactor
    from it, so one value gets one pseudonym whoever wrote it. Needs harness_mem's migrations.
    Without ``create`` (a read-only open) a file that has none gives None.
    """
    query = "SELECT value FROM settings WHERE key = 'redaction.secret'"
    row = conn.execute(query).fetchone()
    if row is None and not create:
        return None
    if row is None:
        with write_transaction(conn):
            conn.execute("INSERT OR IGNORE INTO settings (key, value) VALUES ('redaction.secret', ?)",
                         (secrets.token_hex(32),))
        row = conn.execute(query).fetchone()
    return str(row[0])


def default_path() -> Path | str:
    """``$HARNESS_MEM_DB``, else ``memory.db`` in ``$HARNESS_MEM_HOME`` or the user's data directory."""
    return Settings.from_env().db_path()


def home_dir() -> Path:
    """``$HARNESS_MEM_HOME``, else ``harness-mem`` in the user's data directory."""
    return Settings.from_env().home_dir()
