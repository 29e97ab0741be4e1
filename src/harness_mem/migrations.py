"""Schema migrations: numbered SQL files applied in order, each in its own transaction.

The files live in the repository's top-level ``migrations/`` and ship inside the wheel as
``harness_mem/migrations``. A file is named ``NNNN_what.sql``; its number is its identity, so a
shipped file is never edited and numbers are never reused. Each file runs inside ``BEGIN IMMEDIATE``
together with the insert of its bookkeeping row: a failure rolls both back and leaves it pending.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from .db import Connection, driver, write_transaction
from .errors import MigrationError, SchemaTooNewError

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    number: int
    name: str
    sql: str


@dataclass(frozen=True)
class MigrationStatus:
    number: int
    name: str
    applied_at: str | None  # None while pending


def _migrations_dir() -> Traversable | Path:
    packaged = resources.files("harness_mem") / "migrations"
    if packaged.is_dir():
        return packaged
    # A source checkout (editable install): the top-level folder is next to src/.
    return Path(__file__).resolve().parents[2] / "migrations"


@cache
def known_migrations() -> tuple[Migration, ...]:
    found: dict[int, Migration] = {}
    for item in _migrations_dir().iterdir():
        match = _FILE_NAME.match(item.name)
        if not match:
            continue
        number = int(match.group(1))
        if number in found:
            raise MigrationError(f"two migrations share number {number:04d}: {found[number].name}, {item.name}")
        found[number] = Migration(number, item.name.removesuffix(".sql"), item.read_text(encoding="utf-8"))
    if not found:
        raise MigrationError("no migrations found — the harness_mem installation is incomplete; reinstall it")
    return tuple(found[n] for n in sorted(found))


def _ensure_table(conn: Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS _migrations ("
        " number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )


def _applied(conn: Connection) -> dict[int, str]:
    return dict(conn.execute("SELECT number, applied_at FROM _migrations").fetchall())


def status(conn: Connection) -> list[MigrationStatus]:
    """Every known migration with when it was applied (read-only)."""
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = '_migrations'"
    ).fetchone()
    applied = _applied(conn) if has_table else {}
    return [MigrationStatus(m.number, m.name, applied.get(m.number)) for m in known_migrations()]


def _check_not_newer(applied: dict[int, str]) -> None:
    newest_known = known_migrations()[-1].number
    unknown = sorted(n for n in applied if n > newest_known)
    if unknown:
        raise SchemaTooNewError(
            f"the database has schema version {unknown[-1]:04d} but this harness-mem knows only up to"
            f" {newest_known:04d} — upgrade harness-mem (pip install -U harness-mem)"
        )


def migrate(conn: Connection) -> list[Migration]:
    """Apply every pending migration in order; returns the ones this call applied.

    Safe to run from several processes at once: each step re-checks under the write lock.
    """
    with write_transaction(conn):
        _ensure_table(conn)
    _check_not_newer(_applied(conn))
    done: list[Migration] = []
    for migration in known_migrations():
        with write_transaction(conn):
            if conn.execute("SELECT 1 FROM _migrations WHERE number = ?", (migration.number,)).fetchone():
                continue
            try:
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
            except driver().Error as exc:
                raise MigrationError(f"migration {migration.name} failed and was rolled back: {exc}") from exc
            conn.execute(
                "INSERT INTO _migrations (number, name, applied_at) VALUES (?, ?, ?)",
                (migration.number, migration.name, datetime.now(UTC).isoformat(timespec="seconds")),
            )
        done.append(migration)
    return done


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
