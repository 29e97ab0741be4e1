"""A role confined by ``db grant`` cannot reach past its namespace through the store-wide tables.

On the real PostgreSQL server of the tests: the owner fills two namespaces and confines a role to
one with ``harness-mem db grant``; the role, connected straight to the database, tries what an
attacker would (rewriting the settings and the migrations' record, deleting the keyword counters,
writing another namespace's counts). Each attempt fails with an error, and the owner and the
other namespace find, rank and forget as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import psycopg
import pytest
from postgres_server import PostgresServer

from harness_mem import MemoryStore
from harness_mem.errors import IdentityKeyError, StorageError

pytestmark = pytest.mark.slow

CAROL = "carol@example.com"


def _schema(server: PostgresServer) -> tuple[str, str, str]:
    """A fresh schema: the owner's DSN on it, a new role's DSN on it, and the role's name."""
    tag = uuid.uuid4().hex[:8]
    schema, role = f"c_{tag}", f"mallory_{tag}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    server.create_role(role)
    options = f"?options=-csearch_path%3D{schema},public"
    return server.dsn + options, server.dsn_for(user=role) + options, role


def _grant(owner: str, namespace: str, role: str) -> None:
    granted = subprocess.run([sys.executable, "-m", "harness_mem", "--db", owner, "-N", namespace, "--embedder", "none",
                              "db", "grant", role], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "HARNESS_MEM_EMBEDDER": "none"})
    assert granted.returncode == 0, granted.stderr


def _refused(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> str:
    with pytest.raises(psycopg.Error) as refused:
        conn.execute(statement)
    return str(refused.value).splitlines()[0]


def test_a_confined_role_cannot_rewrite_what_other_namespaces_rest_on(postgres_server: PostgresServer) -> None:
    owner, confined, role = _schema(postgres_server)
    with MemoryStore(owner, namespace="team-a", embedder=None) as team_a:
        team_a.add("team a keeps its deploy notes here", id="first")
    with MemoryStore(owner, namespace="team-b", embedder=None) as team_b:
        team_b.add("carol asked for the invoice copy", session=CAROL, id="call")
        team_b.add("the quarterly invoice run is on the fifth", id="run")
        ranked = [(h.entry.id, round(h.score, 9)) for h in team_b.recall("invoice", mode="keyword")]
        statistics = team_b.storage.keywords.stats()  # type: ignore[attr-defined]  # BM25's, store-wide
    _grant(owner, "team-a", role)
    schema = owner.split("%3D")[1].split(",")[0]
    with psycopg.connect(confined, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}, public")
        # Store-wide records: read-only, and only the keys a confined role needs.
        for attack in ("UPDATE settings SET value = 'planted' WHERE key = 'redaction.secret'",
                       "DELETE FROM settings",
                       "INSERT INTO settings (key, value) VALUES ('pseudonyms.keyed', 'inside')",
                       "INSERT INTO _migrations (number, name) VALUES (9999, 'planted')",
                       "DELETE FROM _migrations",
                       # Each namespace's counts are kept by the database as its entries change.
                       "DELETE FROM namespace_state",
                       "UPDATE namespace_state SET value = -5",
                       "INSERT INTO namespace_state (namespace, key, value) VALUES ('team-a', 'keywords.rows', 1e9)"):
            assert "permission denied for table" in _refused(conn, attack), attack
        shown = {key for (key,) in conn.execute("SELECT key FROM settings")}
        assert shown and all(key.startswith(("embedder.", "data.", "store.", "pseudonyms.", "identities.", "gc.",
                                             "redaction.")) for key in shown), shown
        # It sees its own namespace's counts alone.
        assert {ns for (ns,) in conn.execute("SELECT DISTINCT namespace FROM namespace_state")} == {"team-a"}
    # Through the library, a store-wide write is refused in one line, nothing written.
    with MemoryStore(confined, namespace="team-a", embedder=None) as store:
        store.add("a write of its own namespace still works", id="second")
        store.forget("second")
        with pytest.raises(StorageError, match="permission denied for table settings") as refused:
            store.storage.set_setting("redaction.secret", "planted")
        assert "\n" not in str(refused.value)
    with MemoryStore(owner, namespace="team-b", embedder=None) as team_b:
        assert [e.id for e in team_b.list(session=CAROL)] == ["call"]
        assert [(h.entry.id, round(h.score, 9)) for h in team_b.recall("invoice", mode="keyword")] == ranked
        assert team_b.storage.keywords.stats() == statistics  # type: ignore[attr-defined]
        assert team_b.forget(session=CAROL) == 1
        assert list(team_b.list(session=CAROL)) == []


def test_an_older_store_keeps_its_in_file_key_from_a_confined_role(postgres_server: PostgresServer) -> None:
    owner, confined, role = _schema(postgres_server)
    with MemoryStore(owner, namespace="team-a", embedder=None) as team_a:
        team_a.add("a note", id="n1")
    _grant(owner, "team-a", role)
    schema = owner.split("%3D")[1].split(",")[0]
    # Pseudonyms keyed by the in-file secret alone (a store made before they were keyed outside):
    # there the secret is the key, and a confined role does not see it.
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute("DELETE FROM settings WHERE key = 'pseudonyms.keyed'")
    with psycopg.connect(confined, autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}, public")
        assert conn.execute("SELECT value FROM settings WHERE key = 'redaction.secret'").fetchall() == []
    with MemoryStore(confined, namespace="team-a", embedder=None) as store:  # it reads, and makes no pseudonym
        assert [e.id for e in store.list()] == ["n1"]
        for attempt in (lambda: store.add("called back", session=CAROL), lambda: list(store.list(session=CAROL))):
            with pytest.raises(IdentityKeyError, match="may not read") as refused:
                attempt()
            assert "\n" not in str(refused.value)
        store.add("nothing personal in this one", id="n2")
        assert store.count() == 2


def test_a_role_granted_before_the_upgrade_loses_its_writes_to_settings(postgres_server: PostgresServer) -> None:
    from pathlib import Path

    from harness_mem.engines.postgres import PostgresStorage

    owner, confined, role = _schema(postgres_server)
    # The store as the release before this one made it, with a role granted the way it granted.
    older = PostgresStorage(owner)
    shipped = sorted((Path(__file__).resolve().parents[2] / "migrations" / "postgres").glob("[0-9][0-9][0-9][0-9]_*.sql"))
    for path in shipped:
        if int(path.name[:4]) < 9:
            older.conn.execute(path.read_text(encoding="utf-8"))
            older.conn.execute("CREATE TABLE IF NOT EXISTS _migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                               " applied_at TEXT NOT NULL DEFAULT '')")
            older.conn.execute("INSERT INTO _migrations (number, name) VALUES (%s, %s)", (int(path.name[:4]), path.stem))
    older.conn.execute("INSERT INTO namespace_roles (role, namespace) VALUES (%s, 'team-a')", (role,))
    older.conn.execute(f"GRANT USAGE ON SCHEMA {owner.split('%3D')[1].split(',')[0]} TO {role}")
    older.conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON entries, settings, identities TO {role}")
    older.conn.execute(f"GRANT SELECT ON _migrations TO {role}")
    older.close()
    with MemoryStore(owner, namespace="team-b", embedder=None) as team_b:  # the owner's open upgrades it
        team_b.add("carol asked for the invoice copy", session=CAROL, id="call")
    with psycopg.connect(confined, autocommit=True) as conn:
        conn.execute(f"SET search_path = {owner.split('%3D')[1].split(',')[0]}, public")
        assert "permission denied for table settings" in _refused(
            conn, "UPDATE settings SET value = 'planted' WHERE key = 'redaction.secret'")
        assert conn.execute("SELECT count(*) FROM namespace_state").fetchone() == (0,)  # team-b's are not its own
    with MemoryStore(confined, namespace="team-a", embedder=None) as store:
        store.add("its own namespace is still its to write", id="own")
        assert [h.entry.id for h in store.recall("namespace", mode="keyword")] == ["own"]


def test_a_confined_role_is_refused_sync_in_one_line_and_its_writes_travel_with_the_owners(
        postgres_server: PostgresServer, tmp_path: object) -> None:
    """Syncing is the whole store's (its device, its place in the folder, the chunks it read): a
    confined role is told to sync as the owner, nothing is written, and what the role wrote after the
    owner started the log travels at the owner's sync."""
    from pathlib import Path

    folder = Path(str(tmp_path)) / "Sync"
    owner, confined, role = _schema(postgres_server)
    with MemoryStore(owner, namespace="team-a", embedder=None) as store:
        store.add("the owner's note", id="owned")
    _grant(owner, "team-a", role)
    env = {**os.environ, "HARNESS_MEM_EMBEDDER": "none"}
    refused = subprocess.run([sys.executable, "-m", "harness_mem", "--db", confined, "-N", "team-a", "sync", str(folder)],
                             capture_output=True, text=True, timeout=120, env=env)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert "confined to some namespaces" in line and "as the store's owner" in line
    assert not (folder / "harness-mem" / "devices").exists()
    with MemoryStore(owner, namespace="team-a", embedder=None) as store:
        store.sync(folder)
    with MemoryStore(confined, namespace="team-a", embedder=None) as store:
        store.add("written by the confined role", id="theirs")
    with MemoryStore(owner, namespace="team-a", embedder=None) as store:
        assert store.sync(folder).written == 1
    with MemoryStore(Path(str(tmp_path)) / "laptop.db", namespace="team-a", embedder=None) as laptop:
        laptop.sync(folder)
        assert sorted(e.id for e in laptop.list()) == ["owned", "theirs"]
