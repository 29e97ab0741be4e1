"""The HNSW graph on PostgreSQL is built with the engine's options (HNSW_OPTIONS: a denser graph than
pgvector's default, which left some exact neighbours out of any search's reach at 200,000 entries),
on a new store and, through its migration, on a store whose index was built before them."""

from __future__ import annotations

import psycopg
import pytest
from engine_targets import fresh_schema
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer

from harness_mem import MemoryStore
from harness_mem.engines.postgres import HNSW_OPTIONS

pytestmark = pytest.mark.slow

TOPICS = ("lake", "pottery", "camping", "painting", "adoption", "counseling", "running", "sunrise")


def graph_options(dsn: str) -> dict[str, str]:
    """The options the store's HNSW index was built with (none: pgvector's defaults)."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT reloptions FROM pg_class WHERE oid = to_regclass('entry_vectors_hnsw')").fetchone()
    assert row is not None, "the store has no HNSW index"
    return dict(option.split("=") for option in row[0] or [])


def wanted() -> dict[str, str]:
    return {key.strip(): value.strip() for key, value in (part.split("=") for part in HNSW_OPTIONS.split(","))}


def test_a_new_store_builds_its_graph_with_the_engines_options(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=HashedEmbedder()) as store:
        store.add("a note about the lake", id="n0")
    assert graph_options(dsn) == wanted()


def test_a_store_whose_graph_was_built_before_gets_it_rebuilt_by_its_migration(postgres_server: PostgresServer) -> None:
    dsn = fresh_schema(postgres_server)
    with MemoryStore(dsn, embedder=HashedEmbedder()) as store:
        store.add_many([{"id": f"n{i}", "text": f"note {i} about the {TOPICS[i % 8]} and the {TOPICS[i * 3 % 8]}"}
                        for i in range(300)])
        before = [(h.entry.id, round(h.score, 6)) for h in store.recall("pottery by the lake", k=10, mode="semantic")]
    with psycopg.connect(dsn) as conn:  # as a store migrated before the options were: the default graph
        conn.execute("DROP INDEX entry_vectors_hnsw")
        conn.execute("CREATE INDEX entry_vectors_hnsw ON entry_vectors USING hnsw (embedding halfvec_cosine_ops)")
        conn.execute("DELETE FROM _migrations WHERE name LIKE '%\\_denser\\_vector\\_graph'")
    assert graph_options(dsn) == {}
    with MemoryStore(dsn, embedder=HashedEmbedder()) as store:
        assert graph_options(dsn) == wanted()
        assert [(h.entry.id, round(h.score, 6)) for h in store.recall("pottery by the lake", k=10, mode="semantic")] == before
    with psycopg.connect(dsn) as conn:  # one index, under its own name: nothing left of the rebuild
        assert conn.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'entry_vectors'"
                            " AND indexdef LIKE '%hnsw%' AND schemaname = current_schema()").fetchone() == (1,)
