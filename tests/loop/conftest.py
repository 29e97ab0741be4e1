"""Shared fixtures for harness_loop tests."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from postgres_server import PostgresServer


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio (the anyio pytest plugin reads this)."""
    return "asyncio"


@pytest.fixture
def run_target(engine_target: str) -> str:
    """Where a new, empty run store lives, once per engine: a SQLite file, or a schema of its own on
    the PostgreSQL test server (``engine_target``'s)."""
    return engine_target


@pytest.fixture
def new_target(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], str]:
    """Make a new, empty store's target on the engine named (``"sqlite"`` or ``"postgresql"``), as
    ``engine_target`` does: for fixtures whose parameters mix engines with something else."""

    def make(engine: str) -> str:
        if engine == "sqlite":
            return str(tmp_path / f"runs-{uuid.uuid4().hex[:6]}.db")
        server: PostgresServer = request.getfixturevalue("postgres_server")
        return fresh_schema(server)

    return make


@pytest.fixture
def postgres_target(postgres_server: PostgresServer) -> str:
    """A DSN whose search_path is a new, empty schema on the test server."""
    return fresh_schema(postgres_server)


def fresh_schema(server: PostgresServer) -> str:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.dsn}?options=-csearch_path%3D{schema},public"
