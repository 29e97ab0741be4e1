"""harness_loop's tables in the memory file: its migration set, applied after harness_mem's.

The SQL files live in ``harness_loop/migrations/`` (inside the package, so the wheel carries them)
and are recorded in the file's ``_migrations_harness_loop`` table. The set comes after
:data:`harness_mem.migrations.HARNESS_MEM`: migrating it migrates harness_mem's set first, which
also brings a runs table made by an older version up to the columns this set expects.
"""

from __future__ import annotations

from importlib import resources

from harness_mem.db import Connection
from harness_mem.migrations import HARNESS_MEM, Migration, MigrationSet

__all__ = ["MIGRATIONS", "migrate"]

MIGRATIONS = MigrationSet("harness_loop", resources.files("harness_loop") / "migrations", after=(HARNESS_MEM,))


def migrate(conn: Connection) -> list[Migration]:
    """Apply harness_mem's pending migrations, then harness_loop's; returns the ones this call ran."""
    done = HARNESS_MEM.migrate(conn)
    return done + MIGRATIONS.migrate(conn)
