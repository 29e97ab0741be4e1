"""Where a test's store lives on each engine: a SQLite file, or a schema of its own on the
PostgreSQL test server (tests/postgres_server.py). conftest's ``engine`` fixtures are built on these;
a module-scoped fixture that needs a store per engine uses them directly."""

from __future__ import annotations

import uuid

from postgres_server import PostgresServer

ENGINES = ("sqlite", "postgresql")


def fresh_schema(server: PostgresServer) -> str:
    """A DSN whose search_path is a new, empty schema of its own on the test server."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.dsn}?options=-csearch_path%3D{schema},public"
