"""Schema migrations: named sets of numbered SQL files, each file applied in its own transaction.

A :class:`MigrationSet` is a name, a directory of ``NNNN_what.sql`` files and a bookkeeping table in
the database. Within a set a file's number is its identity, so a shipped file is never edited and a
number is never reused. Each file runs inside ``BEGIN IMMEDIATE`` together with the insert of its
bookkeeping row: a failure rolls both back and leaves it pending. Every step re-checks under the
write lock, so several processes may open (and migrate) one file at once.

Two sets exist today. harness_mem's (:data:`HARNESS_MEM`: the repository's top-level ``migrations/``,
shipped as ``harness_mem/migrations``) records itself in ``_migrations``, the table it had before
sets had names. Every other set records itself in ``_migrations_<name>``: harness_loop's set, which
owns the orchestrator's runs tables, uses ``_migrations_harness_loop``. Any set may say it comes
``after`` others; migrating it migrates those first. harness_mem knows no set but its own; it finds
the others a file holds by their bookkeeping tables (:func:`recorded_sets`).

A migration can be *retired* (:class:`Retired`) when what it creates moved to another set but files
made before the move still depend on it. It then runs only where its condition holds; elsewhere it
is recorded as skipped: a bookkeeping row like any other (so an older version of the code sees it as
done and never runs it) plus a row in ``_migration_skips`` with the reason, for ``migrate --list``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from .db import Connection, driver, write_transaction
from .errors import MigrationError, SchemaTooNewError
from .models import MigrationStatus

__all__ = [
    "HARNESS_MEM",
    "Migration",
    "MigrationSet",
    "MigrationStatus",
    "Retired",
    "column_exists",
    "known_migrations",
    "migrate",
    "overview",
    "recorded",
    "recorded_sets",
    "split_statements",
    "status",
    "table_exists",
]

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_SET_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# The table harness_mem's set has used since before sets had names.
_LEGACY_TABLE = "_migrations"
_LEGACY_SET = "harness_mem"
_SKIPS_TABLE = "_migration_skips"


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


def _never(conn: Connection) -> bool:
    return False


@dataclass(frozen=True)
class Retired:
    """A migration whose tables moved to another set: it runs only where ``runs_when(conn)`` holds.

    ``reason`` is what ``migrate --list`` shows next to it. The condition looks at the schema, not
    at the bookkeeping, so it stays right whichever version of the code created the file.
    """

    reason: str
    runs_when: Callable[[Connection], bool] = _never


def table_exists(conn: Connection, table: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone() is not None


def column_exists(conn: Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in conn.execute("SELECT * FROM pragma_table_info(?)", (table,)))


def _table_for(set_name: str) -> str:
    return _LEGACY_TABLE if set_name == _LEGACY_SET else f"{_LEGACY_TABLE}_{set_name}"


class MigrationSet:
    """A named, ordered set of SQL migrations with its own bookkeeping table.

    :param name: lower-case letters, digits and ``_``; it names the bookkeeping table
        (``_migrations_<name>``; ``_migrations`` for ``harness_mem``) and error messages.
    :param directory: where the ``NNNN_what.sql`` files are (a folder or an ``importlib.resources``
        traversable, so the files can ship inside a wheel).
    :param retired: migrations that run only where a condition holds, by number.
    :param after: sets to migrate before this one (their tables may be needed by its files).
    :param upgrade: the distribution to upgrade when a file is newer than this code.
    """

    def __init__(
        self,
        name: str,
        directory: Traversable | Path,
        *,
        retired: Mapping[int, Retired] | None = None,
        after: Iterable[MigrationSet] = (),
        upgrade: str = "harness-mem",
    ) -> None:
        if not _SET_NAME.match(name):
            raise MigrationError(f"bad migration set name {name!r} — use lower-case letters, digits and _")
        self.name = name
        self.table = _table_for(name)
        self.directory = directory
        self.retired: dict[int, Retired] = dict(retired or {})
        self.after = tuple(after)
        self.upgrade = upgrade

    def __repr__(self) -> str:
        return f"MigrationSet({self.name!r})"

    @cached_property
    def _known(self) -> tuple[Migration, ...]:
        found: dict[int, Migration] = {}
        if self.directory.is_dir():
            for item in self.directory.iterdir():
                match = _FILE_NAME.match(item.name)
                if not match:
                    continue
                number = int(match.group(1))
                if number in found:
                    raise MigrationError(
                        f"{self.name}: two migrations share number {number:04d}: {found[number].name}, {item.name}"
                    )
                found[number] = Migration(number, item.name.removesuffix(".sql"), item.read_text(encoding="utf-8"))
        if not found:
            raise MigrationError(
                f"no {self.name} migrations found in {self.directory} — the installation is incomplete; reinstall"
                f" {self.upgrade}"
            )
        unknown = sorted(set(self.retired) - set(found))
        if unknown:
            raise MigrationError(f"{self.name}: retired migration {unknown[0]:04d} does not exist")
        return tuple(found[n] for n in sorted(found))

    def known(self) -> tuple[Migration, ...]:
        """The set's migrations in order (read once per process)."""
        return self._known

    # -- reading

    def _recorded(self, conn: Connection) -> dict[int, tuple[str, str]]:
        """number -> (name, applied_at) for every bookkeeping row; empty before the table exists."""
        if not table_exists(conn, self.table):
            return {}
        return {n: (name, at) for n, name, at in conn.execute(f"SELECT number, name, applied_at FROM {self.table}")}

    def status(self, conn: Connection) -> list[MigrationStatus]:
        """Every known migration (and any newer one the file records) with its state; read-only."""
        rows = self._recorded(conn)
        skips = _skipped(conn, self.name)
        found = []
        for m in self.known():
            at = rows.get(m.number, (None, None))[1]
            retired = self.retired.get(m.number)
            found.append(MigrationStatus(self.name, m.number, m.name, at, m.number in skips,
                                         retired.reason if retired else None))
        newest = self.known()[-1].number
        found += [
            MigrationStatus(self.name, n, name, at, n in skips, known=False)
            for n, (name, at) in sorted(rows.items()) if n > newest
        ]
        return found

    def version(self, conn: Connection) -> int:
        """The highest migration number this file records for the set (0: none)."""
        return max(self._recorded(conn), default=0)

    def _check_not_newer(self, recorded: Iterable[int]) -> None:
        newest_known = self.known()[-1].number
        unknown = sorted(n for n in recorded if n > newest_known)
        if unknown:
            raise SchemaTooNewError(
                f"the database has {self.name} schema version {unknown[-1]:04d} but this installation knows only"
                f" up to {newest_known:04d} — upgrade {self.upgrade} (pip install -U {self.upgrade})"
            )

    # -- writing

    def migrate(self, conn: Connection) -> list[Migration]:
        """Apply every pending migration in order (the ``after`` sets' first); returns the ones this
        call ran (skipped ones are not in it).

        Safe to run from several processes at once: each step re-checks under the write lock, and a
        file whose bookkeeping is complete costs no write transaction at all.
        """
        for earlier in self.after:
            earlier.migrate(conn)
        if not table_exists(conn, self.table):
            with write_transaction(conn):
                conn.execute(
                    f"CREATE TABLE IF NOT EXISTS {self.table} ("
                    " number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
                )
        recorded = self._recorded(conn)
        self._check_not_newer(recorded)
        done: list[Migration] = []
        for migration in self.known():
            if migration.number in recorded:
                continue
            with write_transaction(conn):
                if conn.execute(f"SELECT 1 FROM {self.table} WHERE number = ?", (migration.number,)).fetchone():
                    continue  # another process got here first
                retired = self.retired.get(migration.number)
                ran = retired is None or retired.runs_when(conn)
                if retired is not None and not ran:
                    _record_skip(conn, self.name, migration.number, retired.reason)
                else:
                    self._run(conn, migration)
                conn.execute(
                    f"INSERT INTO {self.table} (number, name, applied_at) VALUES (?, ?, ?)",
                    (migration.number, migration.name, datetime.now(UTC).isoformat(timespec="seconds")),
                )
            if ran:
                done.append(migration)
        return done

    def _run(self, conn: Connection, migration: Migration) -> None:
        try:
            for statement in split_statements(migration.sql):
                conn.execute(statement)
        except driver().Error as exc:
            raise MigrationError(
                f"{self.name} migration {migration.name} failed and was rolled back: {exc}"
            ) from exc


def _skipped(conn: Connection, set_name: str) -> set[int]:
    if not table_exists(conn, _SKIPS_TABLE):
        return set()
    return {n for (n,) in conn.execute(f"SELECT number FROM {_SKIPS_TABLE} WHERE set_name = ?", (set_name,))}


def _record_skip(conn: Connection, set_name: str, number: int, reason: str) -> None:
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {_SKIPS_TABLE} (set_name TEXT NOT NULL, number INTEGER NOT NULL,"
        " reason TEXT NOT NULL, PRIMARY KEY (set_name, number)) WITHOUT ROWID"
    )
    conn.execute(f"INSERT INTO {_SKIPS_TABLE} (set_name, number, reason) VALUES (?, ?, ?)", (set_name, number, reason))


def recorded_sets(conn: Connection) -> list[str]:
    """The names of the sets this file has bookkeeping for, ``harness_mem`` first."""
    tables = [row[0] for row in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND (name = ? OR name LIKE ? ESCAPE '\\')"
        " ORDER BY name", (_LEGACY_TABLE, _LEGACY_TABLE.replace("_", "\\_") + "\\_%"),
    )]
    names = [_LEGACY_SET if t == _LEGACY_TABLE else t.removeprefix(_LEGACY_TABLE + "_") for t in tables]
    return sorted((n for n in names if _SET_NAME.match(n)), key=lambda n: (n != _LEGACY_SET, n))


def recorded(conn: Connection, set_name: str) -> list[MigrationStatus]:
    """What the file records for a set whose files this code may not have: no pending ones (read-only)."""
    table = _table_for(set_name)
    if not table_exists(conn, table):
        return []
    skips = _skipped(conn, set_name)
    rows = conn.execute(f"SELECT number, name, applied_at FROM {table} ORDER BY number").fetchall()
    return [MigrationStatus(set_name, n, name, at, n in skips, known=False) for n, name, at in rows]


def overview(conn: Connection, known: Iterable[MigrationSet] | None = None) -> list[MigrationStatus]:
    """Every migration of the sets in ``known`` (default: harness_mem's), pending ones included, then
    what the file records for any other set; read-only. This is ``harness-mem migrate --list``."""
    sets = {s.name: s for s in (known if known is not None else (HARNESS_MEM,))}
    names = list(sets) + [name for name in recorded_sets(conn) if name not in sets]
    found: list[MigrationStatus] = []
    for name in names:
        found += sets[name].status(conn) if name in sets else recorded(conn, name)
    return found


# ---- harness_mem's own set ----------------------------------------------------------------------


def _harness_mem_dir() -> Traversable | Path:
    packaged = resources.files("harness_mem") / "migrations"
    if packaged.is_dir():
        return packaged
    # A source checkout (editable install): the top-level folder is next to src/.
    return Path(__file__).resolve().parents[2] / "migrations"


def _runs_table_predates_leases(conn: Connection) -> bool:
    return table_exists(conn, "runs") and not column_exists(conn, "runs", "lease_owner")


_RUNS_MOVED = "the runs tables moved to the harness_loop migration set"

#: harness_mem's migrations. 0002 (runs, jobs, run_events) and 0006 (run leases) are retired: a new
#: file gets those tables from harness_loop's set, and 0006 still upgrades a file whose runs table an
#: earlier version created without leases.
HARNESS_MEM = MigrationSet(
    _LEGACY_SET,
    _harness_mem_dir(),
    retired={
        2: Retired(_RUNS_MOVED),
        6: Retired(_RUNS_MOVED + "; it still adds the lease columns to a runs table that 0002 created",
                   _runs_table_predates_leases),
    },
)


def known_migrations() -> tuple[Migration, ...]:
    """harness_mem's migrations in order."""
    return HARNESS_MEM.known()


def migrate(conn: Connection, *, read_only: bool = False) -> list[Migration]:
    """Apply harness_mem's pending migrations; returns the ones this call ran.

    A file that cannot be written is only checked: it opens if it is up to date, and otherwise
    fails with a line that says why (it would need upgrading, which is a write).
    """
    if not read_only:
        return HARNESS_MEM.migrate(conn)
    pending = [m for m in HARNESS_MEM.status(conn) if m.applied_at is None]
    if pending:
        raise MigrationError(
            f"this file needs {len(pending)} upgrade(s) ({pending[0].name} …) but its location is read-only"
            " — open it once where it can be written"
        )
    return []


def status(conn: Connection) -> list[MigrationStatus]:
    """harness_mem's migrations with their state (read-only)."""
    return HARNESS_MEM.status(conn)


def split_statements(script: str) -> list[str]:
    """Split a SQL script into complete statements (trigger bodies stay whole).

    ``executescript`` would commit the surrounding transaction first; running statements one by one
    keeps the migration and its bookkeeping row atomic.
    """
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if driver().complete_statement(pending):
            if pending.strip().strip(";").strip() and not _only_comments(pending):
                statements.append(pending.strip())
            pending = ""
    if pending.strip() and not _only_comments(pending):
        raise MigrationError(f"incomplete SQL statement at the end of a migration: {pending.strip()[:80]}")
    return statements


def _only_comments(sql: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in sql.splitlines())
