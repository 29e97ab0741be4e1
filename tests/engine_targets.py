"""Where a test's store lives on each engine: a SQLite file, or a schema of its own on the
PostgreSQL test server (tests/postgres_server.py). conftest's ``engine`` fixtures are built on these;
a module-scoped fixture that needs a store per engine uses them directly."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Sequence

from postgres_server import PostgresServer

ENGINES = ("sqlite", "postgresql")


def fresh_schema(server: PostgresServer) -> str:
    """A DSN whose search_path is a new, empty schema of its own on the test server."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.dsn}?options=-csearch_path%3D{schema},public"


def schema_of(dsn: str) -> str:
    """The schema a :func:`fresh_schema` DSN names."""
    return dsn.split("search_path%3D", 1)[1].split(",", 1)[0]


def confined_role(server: PostgresServer, owner: str, namespaces: Sequence[str]) -> str:
    """The DSN of a new role, on the schema of ``owner`` (a :func:`fresh_schema` DSN), that the
    owner granted ``namespaces`` with ``harness-mem db grant`` (run as a process of its own)."""
    role = f"r_{uuid.uuid4().hex[:12]}"
    server.create_role(role)
    for namespace in namespaces:
        done = subprocess.run([sys.executable, "-m", "harness_mem", "--db", owner, "--embedder", "none",
                               "db", "grant", role, namespace], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "HARNESS_MEM_EMBEDDER": "none"})
        assert done.returncode == 0, done.stderr
    return server.dsn_for(user=role) + "?" + owner.split("?", 1)[1]
