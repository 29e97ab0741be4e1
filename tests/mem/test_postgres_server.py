"""The PostgreSQL test server is real: psycopg connects, pgvector and full-text search answer, and
row-level security keeps two roles' namespaces apart — what the PostgreSQL engine will rest on.

Each test works inside a transaction that is rolled back, or in a database of its own, so the
session's one server stays clean for the others.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from postgres_server import HOST, SERVER_USER, PostgresServer

pytestmark = pytest.mark.slow


@pytest.fixture
def conn(postgres_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    with psycopg.connect(postgres_dsn) as connection:
        yield connection
        connection.rollback()


def process_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended, it waits for init to reap it


def plan(conn: psycopg.Connection[tuple[object, ...]], query: str) -> str:
    return "\n".join(str(row[0]) for row in conn.execute(f"EXPLAIN {query}"))


def test_connects_to_postgresql_18_with_pgvector_08(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    major = conn.execute("SHOW server_version_num").fetchone()
    vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    assert major is not None and int(str(major[0])) // 10000 == 18
    assert vector is not None and str(vector[0]).startswith("0.8.")


def _listening(port: int, table: str) -> set[str]:
    """The local addresses (hex, as the kernel writes them) that listen on ``port``."""
    found = set()
    with open(f"/proc/net/{table}") as sockets:
        next(sockets)
        for line in sockets:
            local, state = line.split()[1], line.split()[3]
            address, port_hex = local.rsplit(":", 1)
            if int(port_hex, 16) == port and state == "0A":  # 0A: LISTEN
                found.add(address)
    return found


def test_listens_on_loopback_only(postgres_server: PostgresServer) -> None:
    assert postgres_server.port is not None
    with postgres_server.connect() as admin:
        settings = dict(admin.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('listen_addresses', 'unix_socket_directories')"
        ).fetchall())
    assert settings == {"listen_addresses": HOST, "unix_socket_directories": ""}
    # The kernel's own list: one IPv4 socket on 127.0.0.1 (0100007F), none on IPv6.
    assert _listening(postgres_server.port, "tcp") == {"0100007F"}
    assert _listening(postgres_server.port, "tcp6") == set()
    # Another loopback address of this machine is not served.
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"postgresql://postgres@127.0.0.2:{postgres_server.port}/postgres", connect_timeout=3)


def test_server_runs_as_an_unprivileged_user(postgres_server: PostgresServer,
                                             conn: psycopg.Connection[tuple[object, ...]]) -> None:
    backend = conn.execute("SELECT pg_backend_pid()").fetchone()
    assert backend is not None
    expected = pwd.getpwnam(SERVER_USER).pw_uid if os.geteuid() == 0 else os.geteuid()
    for pid in (postgres_server.postmaster_pid, int(str(backend[0]))):
        owner = os.stat(f"/proc/{pid}").st_uid
        assert owner == expected and owner != 0


def test_hnsw_cosine_index_finds_the_nearest_row(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute("CREATE TABLE items (id int PRIMARY KEY, embedding vector(3) NOT NULL)")
    # Near [1,0,0] by angle: 'long' (a long vector, far by L2); by L2: 'short'.
    conn.execute("INSERT INTO items VALUES (1, '[10,1,0]'), (2, '[0.5,0.5,0]'), (3, '[0,0,1]'), (4, '[-1,0,0]')")
    conn.execute("CREATE INDEX items_embedding ON items USING hnsw (embedding vector_cosine_ops)")
    conn.execute("SET LOCAL enable_seqscan = off")
    query = "SELECT id FROM items ORDER BY embedding <=> '[1,0,0]' LIMIT 2"
    assert "items_embedding" in plan(conn, query)
    assert [row[0] for row in conn.execute(query)] == [1, 2]
    nearest_by_l2 = conn.execute("SELECT id FROM items ORDER BY embedding <-> '[1,0,0]' LIMIT 1").fetchone()
    assert nearest_by_l2 == (2,)
    with pytest.raises(psycopg.errors.DataException):  # the declared dimension is enforced
        conn.execute("INSERT INTO items VALUES (5, '[1,2]')")


def test_halfvec_with_an_hnsw_index(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute("CREATE TABLE halves (id int PRIMARY KEY, embedding halfvec(3) NOT NULL)")
    conn.execute("INSERT INTO halves VALUES (1, '[0,1,0]'), (2, '[0.9,0.1,0]'), (3, '[0,0,1]')")
    conn.execute("CREATE INDEX halves_embedding ON halves USING hnsw (embedding halfvec_cosine_ops)")
    conn.execute("SET LOCAL enable_seqscan = off")
    query = "SELECT id FROM halves ORDER BY embedding <=> '[1,0,0]'::vector(3)::halfvec(3) LIMIT 1"
    assert "halves_embedding" in plan(conn, query)
    assert conn.execute(query).fetchone() == (2,)


def test_full_text_search_with_a_gin_index(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute("CREATE TABLE docs (id int PRIMARY KEY, body text NOT NULL)")
    conn.execute("""INSERT INTO docs VALUES (1, 'we decided the auth refactor ships on Monday'),
                    (2, 'deploy to production after review'), (3, 'password hashing uses argon2'),
                    (4, 'auth tokens expire; deploy the fix')""")
    conn.execute("CREATE INDEX docs_body ON docs USING gin (to_tsvector('simple', body))")
    conn.execute("SET LOCAL enable_seqscan = off")

    def matching(tsquery: str) -> list[int]:
        query = f"SELECT id FROM docs WHERE to_tsvector('simple', body) @@ to_tsquery('simple', '{tsquery}')"
        assert "docs_body" in plan(conn, query)
        return sorted(int(str(row[0])) for row in conn.execute(query))

    assert matching("auth | deploy") == [1, 2, 4]  # OR: either word
    assert matching("auth & deploy") == [4]
    assert matching("argon2") == [3]
    assert matching("kubernetes") == []


def test_row_level_security_keeps_roles_namespaces_apart(postgres_server: PostgresServer) -> None:
    dsn = postgres_server.create_database("rls_roles")
    alice = postgres_server.create_role("alice", database="rls_roles")
    bob = postgres_server.create_role("bob", database="rls_roles")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE memories (namespace text NOT NULL DEFAULT current_user, body text NOT NULL)")
        admin.execute("ALTER TABLE memories ENABLE ROW LEVEL SECURITY")
        admin.execute("CREATE POLICY own_namespace ON memories USING (namespace = current_user)"
                      " WITH CHECK (namespace = current_user)")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON memories TO alice, bob")

    with psycopg.connect(alice, autocommit=True) as as_alice, psycopg.connect(bob, autocommit=True) as as_bob:
        as_alice.execute("INSERT INTO memories (body) VALUES ('alice secret')")
        as_bob.execute("INSERT INTO memories (body) VALUES ('bob secret')")
        assert as_alice.execute("SELECT namespace, body FROM memories").fetchall() == [("alice", "alice secret")]
        assert as_bob.execute("SELECT namespace, body FROM memories").fetchall() == [("bob", "bob secret")]
        # Bob can neither change nor remove Alice's rows, nor write into her namespace.
        assert as_bob.execute("UPDATE memories SET body = 'x' WHERE namespace = 'alice'").rowcount == 0
        assert as_bob.execute("DELETE FROM memories WHERE namespace = 'alice'").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            as_bob.execute("INSERT INTO memories VALUES ('alice', 'planted')")

    with psycopg.connect(dsn) as admin:  # the superuser bypasses the policy: both rows are intact
        assert admin.execute("SELECT namespace, body FROM memories ORDER BY namespace").fetchall() == [
            ("alice", "alice secret"), ("bob", "bob secret")]


def test_row_level_security_on_a_session_setting(postgres_server: PostgresServer) -> None:
    # One application role, the namespace chosen per transaction: SET LOCAL app.namespace.
    dsn = postgres_server.create_database("rls_setting")
    app = postgres_server.create_role("app", database="rls_setting")
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("CREATE TABLE memories (namespace text NOT NULL, body text NOT NULL)")
        admin.execute("ALTER TABLE memories ENABLE ROW LEVEL SECURITY")
        admin.execute("CREATE POLICY by_setting ON memories"
                      " USING (namespace = current_setting('app.namespace', true))")
        admin.execute("GRANT SELECT ON memories TO app")
        admin.execute("INSERT INTO memories VALUES ('a', 'one'), ('a', 'two'), ('b', 'three')")

    with psycopg.connect(app) as conn:
        assert conn.execute("SELECT count(*) FROM memories").fetchone() == (0,)  # no namespace: nothing
        conn.execute("SET LOCAL app.namespace = 'a'")
        assert [row[0] for row in conn.execute("SELECT body FROM memories ORDER BY body")] == ["one", "two"]
        conn.rollback()
        conn.execute("SET LOCAL app.namespace = 'b'")
        assert [row[0] for row in conn.execute("SELECT body FROM memories")] == ["three"]


def test_stop_ends_the_server_and_removes_its_directory() -> None:
    server = PostgresServer()
    server.start()
    root, port, pid = server.root, server.port, server.postmaster_pid
    assert root is not None and root.is_dir() and server.start_seconds is not None
    with psycopg.connect(server.dsn) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    server.stop()
    assert not root.exists()
    assert not process_alive(pid)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"postgresql://postgres@{HOST}:{port}/postgres", connect_timeout=3)
    server.stop()  # a second stop does nothing
    assert not server.running
