"""Spaces a team shares: a private namespace and shared ones read in one ranked recall, one written;
grants a role adds, loses and lists; a memory promoted into a shared space with its history and sources.

On SQLite the code keeps a store to the namespaces it was opened with; on the real PostgreSQL the
tests start, the database does (row-level security), for two roles connected as themselves: one
reading and writing its own namespace and the team's, one reading the team's alone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer

from harness_mem import MemoryStore
from harness_mem.errors import HarnessMemError, InvalidInputError, NotFoundError, StorageError

ENV = {**os.environ, "HARNESS_MEM_EMBEDDER": "none"}


def _cli(location: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness_mem", "--db", str(location), "--embedder", "none", *args],
                          capture_output=True, text=True, timeout=300, env=ENV)


def _fill(location: str | Path, embedder: HashedEmbedder | None = None) -> None:
    """Three namespaces: ada's own, the team's, and bob's (which ada must never see)."""
    with MemoryStore(location, namespace="ada", embedder=embedder) as ada:
        ada.add("ada deploys the billing service on fridays", id="ada-deploy")
    with MemoryStore(location, namespace="team", embedder=embedder) as team:
        team.add("the team deploys billing through the release train", id="team-deploy")
        team.add("the team rotates the on-call pager weekly", id="team-pager")
    with MemoryStore(location, namespace="bob", embedder=embedder) as bob:
        bob.add("bob deploys billing by hand with zanzibarquux", id="bob-deploy")


def _every_mode_reads_ada_and_team_alone(store: MemoryStore) -> None:
    for mode in ("keyword", "semantic", "hybrid"):
        hits = store.recall("deploys billing", k=10, mode=mode)  # type: ignore[arg-type]
        assert {h.entry.namespace for h in hits} <= {"ada", "team"}, mode
        assert {"ada-deploy", "team-deploy"} <= {h.entry.id for h in hits}, mode
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True), mode


def _promotable(store: MemoryStore) -> None:
    """A fact derived from two turns of a session, then corrected: what promote must take along."""
    store.add("ada: we keep invoices for seven years", kind="turn", role="ada", session="s1", id="t1")
    store.add("bob: agreed, seven years", kind="turn", role="bob", session="s1", id="t2")
    store.add("invoices are kept for seven years", kind="fact", source="consolidation", id="f1",
              metadata={"source_turns": ["t1", "t2"]})
    store.supersede("f1", "invoices are kept for ten years", id="f2", source="consolidation",
                    metadata={"source_turns": ["t1", "t2"]})


# ---- SQLite: the code keeps to the namespaces a store was opened with ------------------------------


def test_a_store_reads_a_private_and_a_shared_namespace_in_one_ranking_and_writes_the_first(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    _fill(db)
    with MemoryStore(db, namespaces=["ada", "team"], embedder=None) as store:
        hits = store.recall("deploys billing", mode="keyword")
        assert {(h.entry.id, h.entry.namespace) for h in hits} == {("ada-deploy", "ada"), ("team-deploy", "team")}
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert store.get("team-pager").namespace == "team"  # found in the shared namespace
        with pytest.raises(NotFoundError):
            store.get("bob-deploy")  # a third namespace is never read
        assert store.recall("zanzibarquux", mode="keyword") == []
        written = store.add("a new note of ada's")
        assert written.namespace == "ada"
    with MemoryStore(db, namespace="team", embedder=None) as team:
        assert team.count() == 2  # nothing written into the shared namespace


def test_names_sealed_in_a_shared_namespace_read_back_as_written(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    with MemoryStore(db, namespace="team", embedder=None) as team:
        team.add("carol wants the invoice copy by friday", session="carol@example.com", id="call-carol")
    with MemoryStore(db, namespace="ada", embedder=None) as ada:
        ada.add("ada sends invoices on fridays", session="ada@example.com", id="ada-invoices")
    with MemoryStore(db, namespaces=["ada", "team"], embedder=None) as store:
        hits = store.recall("invoice friday", mode="keyword")
        assert {(h.entry.id, h.entry.session) for h in hits} == {("call-carol", "carol@example.com"),
                                                                 ("ada-invoices", "ada@example.com")}
        assert store.get("call-carol").session == "carol@example.com"


def test_semantic_and_hybrid_recall_rank_the_namespaces_read_together(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    embedder = HashedEmbedder()
    _fill(db, embedder)
    with MemoryStore(db, namespaces=["ada", "team"], embedder=embedder) as store:
        _every_mode_reads_ada_and_team_alone(store)
        with store.another() as other:  # a second handle (a background writer's) reads the same namespaces
            assert other.namespaces == ("ada", "team")
        # A promoted entry's vector goes with it (the index's per-namespace caches too).
        store.promote("ada-deploy", to="team")
        hits = store.recall("ada deploys the billing service on fridays", k=3, mode="semantic")
        assert (hits[0].entry.id, hits[0].entry.namespace) == ("ada-deploy", "team")
    with MemoryStore(db, namespace="ada", embedder=embedder) as ada:
        assert ada.recall("ada deploys the billing service on fridays", k=3, mode="semantic") == []
    with MemoryStore(db, namespace="team", embedder=embedder) as team:
        assert team.recall("ada deploys the billing service on fridays", k=1, mode="semantic")[0].entry.id == "ada-deploy"


def test_promote_moves_an_entry_with_its_history_and_sources_into_the_shared_namespace(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    with MemoryStore(db, namespace="ada", embedder=None) as ada:
        _promotable(ada)
        ada.add("ada: unrelated chatter about lunch", kind="turn", role="ada", session="s1", id="t3")
        moved = ada.promote("f2", to="team")
        assert moved == ["f1", "f2", "t1", "t2"]
        assert [e.id for e in ada.list(include_superseded=True)] == ["t3"]
        # The turn left behind no longer carries the text of the turn before it, now moved.
        assert ada.recall("agreed seven", mode="keyword") == []
    with MemoryStore(db, namespace="team", embedder=None) as team:
        assert [e.id for e in team.history("f2")] == ["f1", "f2"]
        [hit] = team.recall("invoices kept years", mode="keyword", kind="fact", sources=True)
        assert hit.entry.id == "f2" and hit.entry.namespace == "team"
        assert [s.id for s in hit.sources or ()] == ["t1", "t2"]
        assert team.recall("lunch chatter", mode="keyword") == []


def test_a_promoted_entry_keeps_its_names_readable_in_the_shared_namespace(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    with MemoryStore(db, namespace="ada", embedder=None) as ada:
        ada.add("carol wants invoices monthly", session="carol@example.com", tags=["carol@example.com"], id="pref")
        ada.promote("pref", to="team")
    with MemoryStore(db, namespace="team", embedder=None) as team:
        moved = team.get("pref")
        assert (moved.session, moved.tags) == ("carol@example.com", ("carol@example.com",))
        assert [e.id for e in team.list(session="carol@example.com")] == ["pref"]


def test_promote_is_refused_whole_when_an_id_is_taken_in_the_target(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    with MemoryStore(db, namespace="team", embedder=None) as team:
        team.add("the team's own t2", id="t2")
    with MemoryStore(db, namespace="ada", embedder=None) as ada:
        _promotable(ada)
        with pytest.raises(InvalidInputError, match="has an entry with id 't2' already — nothing was moved"):
            ada.promote("f2", to="team")
        assert ada.count(include_superseded=True) == 4
        with pytest.raises(InvalidInputError, match="already"):
            ada.promote("f2", to="ada")


def test_the_cli_reads_several_namespaces_and_promotes(tmp_path: Path) -> None:
    db = tmp_path / "team.db"
    _fill(db)
    found = _cli(db, "-N", "ada", "-N", "team", "recall", "deploys billing", "--mode", "keyword", "--json")
    assert found.returncode == 0, found.stderr
    hits = [json.loads(line) for line in found.stdout.splitlines()]
    assert {(h["id"], h["namespace"]) for h in hits} == {("ada-deploy", "ada"), ("team-deploy", "team")}
    shown = _cli(db, "-N", "ada", "-N", "team", "recall", "deploys billing", "--mode", "keyword")
    assert "[team]" in shown.stdout and "[ada]" in shown.stdout
    promoted = _cli(db, "-N", "ada", "promote", "ada-deploy", "--to", "team")
    assert promoted.returncode == 0, promoted.stderr
    assert "Moved 1 entry to namespace 'team'" in promoted.stdout
    listed = _cli(db, "-N", "team", "list", "--json")
    assert {json.loads(line)["id"] for line in listed.stdout.splitlines()} == {"ada-deploy", "team-deploy", "team-pager"}
    # Given after the command, a repeated -N keeps its order: the first is written.
    added = _cli(db, "add", "written after the command", "-N", "bob", "-N", "team", "--id", "late")
    assert added.returncode == 0, added.stderr
    with MemoryStore(db, namespace="bob", embedder=None) as bob:
        assert bob.get("late").namespace == "bob"
    missing = _cli(db, "-N", "ada", "promote", "nope", "--to", "team")
    assert missing.returncode == 1 and missing.stderr.startswith("Error:") and len(missing.stderr.splitlines()) == 1
    grants = _cli(db, "db", "grants")  # roles are PostgreSQL's
    assert grants.returncode == 1 and "needs PostgreSQL" in grants.stderr and len(grants.stderr.splitlines()) == 1


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_the_mcp_server_recalls_several_namespaces_and_remembers_in_the_first(tmp_path: Path) -> None:
    mcp = pytest.importorskip("mcp")
    db = tmp_path / "team.db"
    _fill(db)
    params = mcp.StdioServerParameters(
        command=sys.executable, args=["-m", "harness_mem", "mcp", "--no-project", "--db", str(db), "-N", "ada",
                                      "-N", "team"], env=ENV)
    async with mcp.Client(params, read_timeout_seconds=120) as client:
        found = await client.call_tool("recall", {"query": "deploys billing", "mode": "keyword"})
        assert not found.is_error, found.content[0].text
        hits = found.structured_content["hits"]
        assert {(h["id"], h["namespace"]) for h in hits} == {("ada-deploy", "ada"), ("team-deploy", "team")}
        written = await client.call_tool("remember", {"content": "ada remembers the freeze starts monday"})
        assert not written.is_error, written.content[0].text
    with MemoryStore(db, namespace="ada", embedder=None) as ada:
        assert ada.count() == 2


# ---- PostgreSQL: the database keeps each role to the namespaces granted to it -----------------------


def _schema(server: PostgresServer) -> tuple[str, dict[str, str]]:
    """A fresh schema: the owner's DSN on it, and two new roles' DSNs on it by name."""
    tag = uuid.uuid4().hex[:8]
    schema = f"s_{tag}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    options = f"?options=-csearch_path%3D{schema},public"
    roles = {}
    for name in ("ada", "reader"):
        role = f"{name}_{tag}"
        server.create_role(role)
        roles[name] = server.dsn_for(user=role) + options
    return server.dsn + options, roles


def _role(dsn: str) -> str:
    return dsn.split("://", 1)[1].split("@", 1)[0]


def test_grants_add_revoke_and_list_and_the_database_holds_each_role_to_them(postgres_server: PostgresServer) -> None:
    owner, roles = _schema(postgres_server)
    ada, reader = _role(roles["ada"]), _role(roles["reader"])
    _fill(owner)
    for args in (("db", "grant", ada, "ada"), ("db", "grant", ada, "team"),
                 ("db", "grant", reader, "team", "--read-only")):
        granted = _cli(owner, *args)
        assert granted.returncode == 0, granted.stderr
    listed = _cli(owner, "db", "grants", "--json")
    assert [json.loads(line) for line in listed.stdout.splitlines()] == [
        {"role": ada, "namespace": "ada", "read_only": False},
        {"role": ada, "namespace": "team", "read_only": False},
        {"role": reader, "namespace": "team", "read_only": True},
    ]
    # Granting the team's namespace did not cut ada off its own: one ranking over both.
    with MemoryStore(roles["ada"], namespaces=["ada", "team"], embedder=None) as store:
        hits = store.recall("deploys billing", mode="keyword")
        assert {(h.entry.id, h.entry.namespace) for h in hits} == {("ada-deploy", "ada"), ("team-deploy", "team")}
        assert store.recall("zanzibarquux", mode="keyword") == []
        # Bob's words reach ada through no statistic: not the counts, not a word's document frequency.
        keywords = store.storage.keywords  # type: ignore[attr-defined]
        assert keywords.stats()[0] == 3
        assert keywords.document_frequency('"zanzibarquux"', 3) == 0
        assert keywords.document_frequency('"deploy"', 3) == 2
        store.add("ada's second note")
    with pytest.raises(StorageError, match="may read namespaces 'ada', 'team' only, not 'bob'"):
        MemoryStore(roles["ada"], namespaces=["ada", "bob"], embedder=None)
    # A read-only role reads the team's namespace; its write is refused by the database, in one line.
    with MemoryStore(roles["reader"], namespace="team", embedder=None) as store:
        assert {h.entry.id for h in store.recall("deploys billing", mode="keyword")} == {"team-deploy"}
        with pytest.raises(StorageError, match="may not write that namespace") as refused:
            store.add("a write the reader may not make")
        assert "\n" not in str(refused.value)
        assert store.count() == 2
    with psycopg.connect(roles["reader"], autocommit=True) as conn:  # straight to the database, too
        schema = owner.split("%3D")[1].split(",")[0]
        conn.execute(f"SET search_path = {schema}, public")
        assert conn.execute("UPDATE entries SET content = 'defaced'").rowcount == 0
        assert conn.execute("DELETE FROM entries").rowcount == 0
        assert {ns for (ns,) in conn.execute("SELECT DISTINCT namespace FROM entries")} == {"team"}
        with pytest.raises(psycopg.Error, match="row-level security"):
            conn.execute("INSERT INTO entries (id, namespace, kind, content, created_at, content_hash)"
                         " VALUES ('x', 'team', 'note', 'planted', 0, 'h')")
    with MemoryStore(owner, namespace="team", embedder=None) as team:
        assert team.count() == 2
    # Revoking takes one namespace back; the last one taken leaves the role reading nothing.
    revoked = _cli(owner, "db", "revoke", ada, "team")
    assert revoked.returncode == 0, revoked.stderr
    with MemoryStore(roles["ada"], namespace="ada", embedder=None) as store:
        assert {h.entry.id for h in store.recall("deploys billing", mode="keyword")} == {"ada-deploy"}
    with pytest.raises(StorageError, match="not 'team'"):
        MemoryStore(roles["ada"], namespaces=["ada", "team"], embedder=None)
    assert _cli(owner, "db", "revoke", reader, "team").returncode == 0
    with psycopg.connect(roles["reader"], autocommit=True) as conn:
        conn.execute(f"SET search_path = {schema}, public")
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (0,)
    again = _cli(owner, "db", "revoke", reader, "team")
    assert again.returncode == 1 and "had not been granted" in again.stderr


def test_a_role_with_vectors_ranks_its_namespaces_in_every_mode(postgres_server: PostgresServer) -> None:
    owner, roles = _schema(postgres_server)
    embedder = HashedEmbedder()
    _fill(owner, embedder)
    ada, reader = _role(roles["ada"]), _role(roles["reader"])
    for args in (("db", "grant", ada, "ada"), ("db", "grant", ada, "team"), ("db", "grant", reader, "team", "--read-only")):
        assert _cli(owner, *args).returncode == 0
    with psycopg.connect(roles["reader"], autocommit=True) as conn:  # the team's vectors: read, never changed
        conn.execute(f"SET search_path = {owner.split('%3D')[1].split(',')[0]}, public")
        assert conn.execute("DELETE FROM entry_vectors").rowcount == 0
        assert conn.execute("SELECT count(*) FROM entry_vectors").fetchone() == (2,)
    with MemoryStore(roles["ada"], namespaces=["ada", "team"], embedder=embedder) as store:
        _every_mode_reads_ada_and_team_alone(store)
        assert len(store.recall("deploys billing", k=10, mode="semantic")) == 3  # bob's vector is not there
        store.add("ada's note, embedded and written by her role")
    with psycopg.connect(roles["ada"], autocommit=True) as conn:
        conn.execute(f"SET search_path = {owner.split('%3D')[1].split(',')[0]}, public")
        assert conn.execute("SELECT count(*) FROM entry_vectors").fetchone() == (4,)


def test_a_role_promotes_into_the_shared_namespace_with_history_and_sources(postgres_server: PostgresServer) -> None:
    owner, roles = _schema(postgres_server)
    ada, reader = _role(roles["ada"]), _role(roles["reader"])
    with MemoryStore(owner, namespace="team", embedder=None) as team:
        team.add("the team rotates the on-call pager weekly", id="team-pager")
    for args in (("db", "grant", ada, "ada"), ("db", "grant", ada, "team"),
                 ("db", "grant", reader, "ada", "--read-only"), ("db", "grant", reader, "team")):
        assert _cli(owner, *args).returncode == 0
    with MemoryStore(roles["ada"], namespace="ada", embedder=None) as store:
        _promotable(store)
        store.add("ada: unrelated chatter about lunch", kind="turn", role="ada", session="s1", id="t3")
    # A role that may only read ada's namespace cannot move its memories out of it.
    with MemoryStore(roles["reader"], namespace="ada", embedder=None) as store:
        with pytest.raises(HarnessMemError, match="may not write the namespace these entries are in"):
            store.promote("f2", to="team")
        assert store.count(include_superseded=True) == 5
    with MemoryStore(roles["ada"], namespaces=["ada", "team"], embedder=None) as store:
        assert store.promote("f2", to="team") == ["f1", "f2", "t1", "t2"]
        assert [e.id for e in store.list(include_superseded=True)] == ["t3"]  # ada's own keeps the rest
        # The turn left behind no longer carries the text of the turn before it, now moved.
        assert [h.entry.id for h in store.recall("agreed", mode="keyword")] == ["t2"]
        [hit] = store.recall("invoices kept years", mode="keyword", kind="fact", sources=True)
        assert (hit.entry.id, hit.entry.namespace) == ("f2", "team")
        assert [s.id for s in hit.sources or ()] == ["t1", "t2"]
    with MemoryStore(owner, namespace="team", embedder=None) as team:
        assert [e.id for e in team.history("f2")] == ["f1", "f2"]
        # Each namespace's keyword counters (what a role's BM25 statistics are summed from) followed.
        counted = dict(team.storage.query(  # type: ignore[attr-defined]
            "SELECT namespace, value FROM namespace_state WHERE key = 'keywords.rows'"))
        assert (counted["team"], counted["ada"]) == (3, 1)
