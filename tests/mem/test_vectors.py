"""Semantic and hybrid recall on real sqlite-vec and on pgvector: the plumbing with the instant
HashedEmbedder, what rests on understanding (paraphrases, the prefilter on real vectors) with the
real model.

The tests of recall run on both engines (``engine_target``; ``hashed_store`` and ``semantic_store``
are conftest's ``engine_hashed_store`` and ``engine_semantic_store``). Those of SQLite's own vector
index (vec0's bit layout and chunks, its shortlist, the int8 upgrade, its query plans) stay there.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from engine_rows import sql, vector_pks, vector_rows
from fake_embedder import HashedEmbedder

from harness_mem.errors import EmbedderError
from harness_mem.store import MemoryStore
from harness_mem.vectors import VectorIndex, pack_signs


class OtherModel:
    """A different 'model' (deterministic random projections), to test the identity check."""

    name, dim, fingerprint = "other-model", 64, "sha256:other"

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rng = [np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(64) for t in texts]
        matrix = np.array(rng, dtype=np.float32).reshape(len(texts), 64)
        return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.fixture
def hashed_store(engine_hashed_store: MemoryStore) -> MemoryStore:
    return engine_hashed_store


@pytest.fixture
def semantic_store(engine_semantic_store: MemoryStore) -> MemoryStore:
    return engine_semantic_store


NOTES = [
    "a cat was sitting on the mat by the window",
    "the quarterly revenue grew by twelve percent",
    "we deploy the web service with blue-green releases on Tuesdays",
    "my grandmother bakes bread every Sunday morning",
    "the database migration failed because of a locked table",
]


@pytest.mark.slow
def test_semantic_recall_finds_paraphrases(semantic_store: MemoryStore) -> None:
    semantic_store.add_many([{"text": t} for t in NOTES])
    top = semantic_store.recall("a kitty resting on a rug", k=1, mode="semantic")[0]
    assert top.entry.content == NOTES[0] and 0.3 < top.score <= 1.0
    assert semantic_store.recall("how much did sales increase", k=1, mode="semantic")[0].entry.content == NOTES[1]
    assert semantic_store.recall("kitty", mode="keyword") == []  # keyword alone cannot see it


def test_add_many_embeds_each_batch_in_one_model_call(engine_target: str, hashed_embedder: HashedEmbedder) -> None:
    counting = hashed_embedder
    with MemoryStore(engine_target, embedder=counting) as store:
        store.add_many([{"text": f"note number {i}"} for i in range(120)], batch_size=50)
        assert counting.calls == [50, 50, 20]
        store.add_many([{"text": f"note number {i}", "id": f"n{i}"} for i in range(3)])
        store.add_many([{"text": f"note number {i}", "id": f"n{i}"} for i in range(3)], on_conflict="ignore")
        assert counting.calls[3:] == [3]  # re-adding known ids embeds nothing
        store.recall("note", mode="semantic")
        store.recall("note", mode="semantic")
        assert counting.calls[4:] == [1]  # the query embedding is cached


def test_filters_apply_before_the_top_k_cut(sqlite_hashed_store: MemoryStore) -> None:
    # SQLite's vector index ranks a shortlist: the filter must apply before it is cut. PostgreSQL
    # compares every row passing a filter that leaves fewer than EXACT_ROWS, so 3000 rows never
    # reach a cut there (that path: test_a_session_search_skips_expired_entries_and_other_sessions).
    hashed_store = sqlite_hashed_store
    hashed_store.add_many([{"text": f"a story about cats number {i}", "session": "noise"} for i in range(3000)],
                          batch_size=1000)
    wanted = hashed_store.add_many([{"text": f"a note about dogs {i}", "session": "wanted"} for i in range(5)])
    hits = hashed_store.recall("cats", k=5, mode="semantic", session="wanted")
    assert sorted(h.entry.id for h in hits) == sorted(e.id for e in wanted)
    hybrid = hashed_store.recall("cats", k=5, mode="hybrid", session="wanted")
    assert sorted(h.entry.id for h in hybrid) == sorted(e.id for e in wanted)


@pytest.mark.slow
def test_prefilter_search_agrees_with_exact_vec0_knn(sqlite_semantic_store: MemoryStore, embedder: object) -> None:
    adjectives = ("weekly", "urgent", "draft", "final", "late", "annual", "secret", "shared")
    topics = ("budget", "hiring", "outage", "launch", "design", "security", "sales", "travel")
    places = ("Berlin", "Lisbon", "Osaka", "Lagos", "Lima", "Oslo", "Quebec", "Perth")
    texts = [f"{w} {v} report from the {p} office, team {i}" for i, (w, v, p) in enumerate(
        (w, v, p) for w in adjectives for v in topics for p in places)] * 3
    texts = [f"{t} (copy {i // 512})" for i, t in enumerate(texts)]  # 1,536 distinct texts
    semantic_store = sqlite_semantic_store  # vec0's own search and its exact kNN
    semantic_store.add_many([{"text": t} for t in texts], batch_size=1000)
    index = semantic_store.storage.vector_index()
    assert index is not None
    overlaps = []
    for query in ("budget outage", "hiring plan", "security review", "travel costs", "launch design"):
        vector = embedder.embed([query])[0]  # type: ignore[attr-defined]
        fast = {pk for pk, _ in index.search(vector, 10, semantic_store.namespace)}
        exact = {pk for pk, _ in index.exact_knn(vector, 10, semantic_store.namespace)}
        overlaps.append(len(fast & exact) / 10)
    assert np.mean(overlaps) >= 0.9


def test_delete_removes_vectors_and_other_processes_see_changes(engine_target: str) -> None:
    # Two connections, as two processes would hold: each keeps its own cache of the vectors.
    db_path = engine_target
    with MemoryStore(db_path, embedder=HashedEmbedder()) as a, MemoryStore(db_path, embedder=HashedEmbedder()) as b:
        a.add_many([{"text": t, "id": str(i)} for i, t in enumerate(NOTES)])
        assert b.recall("a cat on a mat", k=1, mode="semantic")[0].entry.id == "0"  # b loads its cache
        assert a.delete("0")
        assert all(h.entry.id != "0" for h in b.recall("a cat on a mat", mode="semantic"))
        b.add("a small cat napping on a doormat", id="cat2")
        assert a.recall("a cat on a mat", k=1, mode="semantic")[0].entry.id == "cat2"
        assert vector_rows(a) == len(NOTES)


def test_namespaces_do_not_leak_through_vectors(engine_target: str, hashed_embedder: HashedEmbedder) -> None:
    with MemoryStore(engine_target, namespace="alice", embedder=hashed_embedder) as alice, \
            MemoryStore(engine_target, namespace="bob", embedder=hashed_embedder) as bob:
        alice.add("alice keeps her spare key under the flower pot")
        assert bob.recall("where is the spare key", mode="semantic") == []
        assert bob.recall("where is the spare key", mode="hybrid") == []


def test_explain_shows_each_component(hashed_store: MemoryStore) -> None:
    hashed_store.add_many([{"text": t} for t in NOTES])
    hits = hashed_store.recall("database migration locked", k=5, mode="hybrid", explain=True)
    top = hits[0]
    assert top.entry.content == NOTES[4]
    assert top.components is not None and set(top.components) == {"keyword", "semantic", "speaker", "hybrid", "coverage"}
    assert top.components["hybrid"]["rank"] == 1 and 0 < top.score < 1
    assert top.components["semantic"]["rank"] == 1 and top.components["keyword"]["rank"] == 1
    # A hit that only the embedding found still shows its (zero) keyword score and its cosine.
    others = [h for h in hits if h.components and h.components["keyword"]["rank"] is None]
    assert others and all(h.components["keyword"]["score"] == 0.0 for h in others)  # type: ignore[index]
    assert all(h.components["semantic"]["rank"] is not None for h in others)  # type: ignore[index]


def test_no_embedder_fails_clearly_and_keyword_keeps_working(engine_target: str) -> None:
    with MemoryStore(engine_target, embedder=None) as store:
        store.add("deploys are on Tuesdays")
        for mode in ("semantic", "hybrid"):
            with pytest.raises(EmbedderError, match="needs vectors, and this store is keyword-only .* or use --mode keyword"):
                store.recall("deploys", mode=mode)  # type: ignore[arg-type]
        assert store.recall("deploys")[0].entry.content == "deploys are on Tuesdays"  # default: keyword


def test_a_different_model_is_refused_until_reindex(engine_target: str, hashed_embedder: HashedEmbedder) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=hashed_embedder) as store:
        store.add_many([{"text": t} for t in NOTES])
    with MemoryStore(db_path, embedder=OtherModel()) as other:  # type: ignore[arg-type]
        assert other.recall("cat", mode="keyword")  # keyword reads still work
        with pytest.raises(EmbedderError, match="made by hashed-ngrams-test .* run `harness-mem reindex`"):
            other.recall("cat", mode="semantic")
        with pytest.raises(EmbedderError, match="reindex"):
            other.add("a new note would mix vectors")
        report = other.reindex()
        assert report["vectors_dropped"] == len(NOTES) and report["vectors_written"] == len(NOTES)
        assert other.recall("cat", mode="semantic")
        assert other.storage.recorded_model()["name"] == "other-model"  # type: ignore[index]


def test_entries_without_vectors_are_reported_then_reindexed(engine_target: str, hashed_embedder: HashedEmbedder) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as plain:
        plain.add_many([{"text": t} for t in NOTES])
    with MemoryStore(db_path, embedder=hashed_embedder) as store:
        with pytest.raises(EmbedderError, match="no vector yet for 5 entries .* `harness-mem reindex`"):
            store.recall("cat", mode="semantic")
        seen: list[int] = []
        report = store.reindex(progress=seen.append, batch_size=2)
        assert report["vectors_written"] == 5 and seen == [2, 2, 1]
        # Each vector went to its own entry: every note is its own nearest neighbour.
        for note in NOTES:
            assert store.recall(note, k=1, mode="semantic")[0].entry.content == note
        assert store.reindex()["vectors_written"] == 0  # resumable: nothing left to do


class WritesWhileEmbedding(HashedEmbedder):
    """The test embedder, running ``meanwhile`` (another connection's writes) on its first call:
    reindex embeds outside the write lock, so other processes may write in that time."""

    def __init__(self, meanwhile: object) -> None:
        super().__init__()
        self.meanwhile = meanwhile

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.meanwhile is not None:
            self.meanwhile, run = None, self.meanwhile
            run()  # type: ignore[operator]
        return super().embed(texts)


def test_reindex_writes_no_vector_for_what_changed_while_it_embedded(engine_target: str) -> None:
    db_path = engine_target
    MemoryStore(db_path, embedder=HashedEmbedder()).close()  # a file with vectors
    with MemoryStore(db_path, embedder=None) as plain:  # a process without the model writes
        plain.add_many([{"text": t, "id": f"n{i}"} for i, t in enumerate(NOTES)])

        def meanwhile() -> None:
            plain.delete("n1")
            plain.forget("n2")
            plain.delete("n4")  # the highest pk: the next entry is stored under it again
            plain.add("a new note about tide tables and harbour pilots", id="n5")

        with MemoryStore(db_path, embedder=WritesWhileEmbedding(meanwhile)) as store:
            report = store.reindex()
            assert report["vectors_written"] == 3  # n0, n3, then n5 (on SQLite read again under its reused pk)
            pks = dict(sql(store, "SELECT id, pk FROM entries WHERE forgotten_at IS NULL"))
            vectors = vector_pks(store)
            assert vectors == set(pks.values()) and set(pks) == {"n0", "n3", "n5"}
            for entry in store.list():  # each vector is of its own entry's text
                assert store.recall(entry.content, k=1, mode="semantic")[0].entry.id == entry.id
            plain.delete("n5")
            plain.add("one more", id="n6")  # under that pk once more: no vector left in the way
            assert store.reindex()["vectors_written"] == 1 and store.count_missing_vectors() == 0
            assert store.integrity_check() == []


def test_pack_signs_matches_sqlite_vec_bit_layout(store: MemoryStore) -> None:  # conftest's: SQLite
    vector = np.random.default_rng(7).standard_normal(384).astype(np.float32)  # mixed signs in every byte
    ours = pack_signs(vector[None, :])[0].tobytes()
    theirs = store.db.execute("SELECT vec_quantize_binary(?)", (vector.tobytes(),)).fetchone()[0]
    assert ours == theirs


def test_a_file_with_float32_vectors_is_converted_to_one_int8_copy(db_path: Path) -> None:
    """A file from before 0008: float32 vectors in vec0 plus compact copies in `entry_vectors`."""
    from fake_embedder import HashedEmbedder

    from harness_mem.db import connect, write_transaction
    from harness_mem.migrations import known_migrations, split_statements

    embedder = HashedEmbedder()
    notes = [f"note {i} about {topic}" for i, topic in enumerate(["billing", "deploys", "hiring", "security"] * 5)]
    vectors = embedder.embed(notes)
    conn = connect(db_path).conn
    conn.execute("CREATE TABLE _migrations (number INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)")
    for migration in known_migrations():
        if migration.number == 8:
            break
        with write_transaction(conn):
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute("INSERT INTO _migrations VALUES (?, ?, 'then')", (migration.number, migration.name))
    with write_transaction(conn):
        conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)",
                         [(f"embedder.{k}", v) for k, v in VectorIndex(conn, embedder).identity().items()])
        conn.execute("CREATE VIRTUAL TABLE entries_vec USING vec0(embedding float[384] distance_metric=cosine)")
        for pk, (note, vector) in enumerate(zip(notes, vectors, strict=True), start=1):
            conn.execute("INSERT INTO entries (pk, id, kind, content, created_at, content_hash) VALUES (?, ?, 'note', ?, ?, 'h')",
                         (pk, f"n{pk}", note, 1_700_000_000_000 + pk))
            conn.execute("INSERT INTO entries_fts (rowid, text) VALUES (?, ?)", (pk, note))
            conn.execute("INSERT INTO entries_vec (rowid, embedding) VALUES (?, ?)", (pk, vector.tobytes()))
            conn.execute("INSERT INTO entry_vectors (pk, bits, half) VALUES (?, x'00', x'00')", (pk,))
    conn.close()

    with MemoryStore(db_path, embedder=embedder) as store:
        assert store.count_missing_vectors() == 0
        for i, note in enumerate(notes, start=1):
            assert store.recall(note, k=1, mode="semantic")[0].entry.id == f"n{i}"
        tables = set(store.db.table_names())
        assert "entry_vectors" not in tables and "_vectors_upgrade" not in tables
        sql = store.db.execute("SELECT sql FROM sqlite_master WHERE name = 'entries_vec'").fetchone()[0]
        assert "int8[384]" in sql and "bit[384]" in sql and "float[" not in sql


def test_filters_the_index_evaluates_give_the_exact_answer(sqlite_hashed_store: MemoryStore) -> None:
    topics = ["billing", "deploys", "hiring", "security", "travel"]
    items = [
        {"text": f"{topics[i % 5]} item {i} for the {['north', 'south', 'east'][i % 3]} team",
         "role": "user", "session": f"session-with-a-long-identifier-{i % 7}", "kind": "turn" if i % 2 else "note",
         "created_at": f"2026-01-{1 + i % 28:02d}T10:00:00Z"}
        for i in range(3000)
    ]
    sqlite_hashed_store.add_many(items)
    query = "billing item for the north team"
    vector = sqlite_hashed_store.embed_queries([query])[0]
    cases: list[dict[str, object]] = [
        {"session": "session-with-a-long-identifier-3"},
        {"kind": "turn"},
        {"kind": ["turn", "note"], "since": "2026-01-10T00:00:00Z", "until": "2026-01-12T23:00:00Z"},
        {"session": "session-with-a-long-identifier-5", "kind": "note"},
    ]
    for filters in cases:
        found = sqlite_hashed_store.recall(query, k=10, mode="semantic", query_vector=vector, **filters)  # type: ignore[arg-type]
        assert len(found) == 10, filters
        matching = [e for e in sqlite_hashed_store.list(**filters)]  # type: ignore[arg-type]
        assert all(h.entry.id in {e.id for e in matching} for h in found), filters
        # The exact ranking over every matching entry, by the same stored vectors:
        index = sqlite_hashed_store.storage.vector_index()
        assert index is not None
        pks = [row[0] for row in sqlite_hashed_store.db.execute(
            "SELECT pk FROM entries WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps([e.id for e in matching]),))]
        exact = [pk for pk, _ in index.rescore(vector, pks, 10)]
        ids = dict(sqlite_hashed_store.db.execute("SELECT pk, id FROM entries").fetchall())
        overlap = len({h.entry.id for h in found} & {ids[pk] for pk in exact})
        assert overlap >= 9, (filters, overlap)


def test_a_session_search_skips_expired_entries_and_other_sessions(hashed_store: MemoryStore) -> None:
    hashed_store.add_many([{"text": f"deploy window note {i}", "session": f"s{i % 4}", "role": "user"} for i in range(400)])
    hashed_store.add("deploy window note 1", session="s1", role="user", id="gone", created_at="2020-01-01T00:00:00Z",
                     expires_at="2020-01-02T00:00:00Z")
    hashed_store.add("deploy window note 1", session="s2", role="user", id="elsewhere")
    hits = hashed_store.recall("deploy window note 1", k=10, mode="semantic", session="s1")
    assert len(hits) == 10 and {h.entry.session for h in hits} == {"s1"}
    assert "gone" not in {h.entry.id for h in hits} and "elsewhere" not in {h.entry.id for h in hits}


def test_the_bit_cache_reads_the_same_rows_either_way(sqlite_hashed_store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache is read from vec0's chunks; if their layout ever differs, the row-by-row query answers."""
    sqlite_hashed_store.add_many([{"text": f"item {i} of the list", "session": f"s{i % 3}", "id": f"i{i}"} for i in range(1500)])
    for i in range(0, 1500, 7):  # holes in both chunks (vec0's validity bitmap)
        sqlite_hashed_store.delete(f"i{i}")
    index = sqlite_hashed_store.storage.vector_index()
    assert index is not None
    from_chunks = index._read_bits(sqlite_hashed_store.namespace)
    monkeypatch.setattr(VectorIndex, "_agrees", lambda self, pk, bits, session: False)
    row_by_row = index._read_bits(sqlite_hashed_store.namespace)
    order = np.argsort(row_by_row[0])
    assert len(from_chunks[0]) == 1500 - len(range(0, 1500, 7))
    assert np.array_equal(np.sort(from_chunks[0]), row_by_row[0][order])
    chunk_order = np.argsort(from_chunks[0])
    assert np.array_equal(from_chunks[1][:, chunk_order], row_by_row[1][:, order])
    assert np.array_equal(from_chunks[2][chunk_order], row_by_row[2][order])
    # The columns hold each row's packed signs, as vec0 stores them.
    first = int(row_by_row[0][order][0])
    stored = sqlite_hashed_store.db.execute("SELECT bits FROM entries_vec WHERE rowid = ?", (first,)).fetchone()[0]
    assert np.ascontiguousarray(from_chunks[1][:, chunk_order[0]]).tobytes() == bytes(stored)


class MatrixEmbedder:
    """Text "row i" embeds as row i of a fixed matrix: the test chooses every stored vector."""

    name, fingerprint = "matrix-test", "matrix-test:1"

    def __init__(self, matrix: npt.NDArray[np.float32]) -> None:
        self.matrix = matrix
        self.dim = matrix.shape[1]

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([self.matrix[int(t.split()[-1])] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def test_weighted_distance_counts_the_query_magnitude_of_each_differing_sign(db_path: Path) -> None:
    from harness_mem.vectors import WEIGHT_BITS, QueryBits, cache_shortlist

    rng = np.random.default_rng(3)
    matrix = rng.standard_normal((500, 384)).astype(np.float32)
    with MemoryStore(db_path, embedder=MatrixEmbedder(matrix)) as store:  # type: ignore[arg-type]
        store.add_many([{"text": f"row {i}"} for i in range(len(matrix))])
        index = store.storage.vector_index()
        assert index is not None
        cache = index._namespace_bits(store.namespace)
        query = rng.standard_normal(384).astype(np.float32)
        rows = np.arange(len(cache.pks))
        found = cache.weighted_distances(QueryBits.of(query), rows)
        # By hand: the query's magnitudes in 2^WEIGHT_BITS - 1 levels, summed where the signs differ.
        levels = np.rint(np.abs(query) / np.abs(query).max() * ((1 << WEIGHT_BITS) - 1))
        stored = matrix[cache.pks - cache.pks.min()]  # pks number the rows in insertion order
        expected = ((stored > 0) != (query > 0)) @ levels
        assert np.array_equal(found, expected.astype(np.uint16))
        # The shortlist is the rows of smallest weighted distance among the Hamming pass's survivors, nearest first.
        chosen = cache_shortlist(cache, query, 20)
        assert len(chosen.positions) == 20 and found[chosen.positions].max() <= np.sort(found)[19]
        assert np.array_equal(chosen.distances, found[chosen.positions])
        assert np.all(np.diff(chosen.distances.astype(int)) >= 0)


def test_the_shortlist_holds_the_exact_top_10_where_plain_hamming_loses_some(db_path: Path) -> None:
    """Vectors spread unevenly over their dimensions, as a sentence model's are (variance falling
    with rank, randomly rotated): the query's large components decide its neighbours, and plain
    Hamming, counting every sign alike, shortlists only part of the exact top 10; weighing each
    sign by the query's magnitude there holds nearly all of it in the same shortlist."""
    from harness_mem.vectors import SHORTLIST_MIN

    rng = np.random.default_rng(2)
    with anisotropic_store(db_path, rng) as (shape, matrix, store, index):
        agreement, hamming_agreement = [], []
        for _ in range(20):
            query = (rng.standard_normal(384) @ shape.T).astype(np.float32)
            exact = [pk for pk, _ in index.exact_knn(query, 10, store.namespace)]
            found = [pk for pk, _ in index.search(query, 10, store.namespace)]
            agreement.append(len(set(found) & set(exact)) / 10)
            # What plain Hamming's shortlist of the same size would have held, for contrast.
            hamming = np.count_nonzero((matrix > 0) != (query > 0), axis=1)
            shortlist = set((np.argsort(hamming, kind="stable")[:SHORTLIST_MIN] + 1).tolist())
            hamming_agreement.append(len(shortlist & set(exact)) / 10)
        assert np.mean(agreement) >= 0.95
        assert np.mean(hamming_agreement) <= 0.9


def test_a_cold_recall_counts_the_entries_from_indexes_alone(db_path: Path) -> None:
    """Checking that every entry has a vector must not read every entry's row: at a million entries
    that is the whole table, and it made the first query of a process read hundreds of MB."""
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        store.add_many([{"text": f"note {i} about deploys", "id": f"n{i}"} for i in range(40)])
        store.forget("n3")
        store.forget("n4")
    with MemoryStore(db_path, embedder=HashedEmbedder()) as cold:
        statements: list[str] = []
        cold.storage.conn.set_trace_callback(statements.append)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # 38 live entries, 38 vectors: nothing reported missing
            assert len(cold.recall("deploys", k=50, mode="semantic")) == 38
        cold.storage.conn.set_trace_callback(None)
        counts = [sql for sql in statements if "count(" in sql and "entries" in sql]
        assert counts
        for sql in counts:
            plan = [row[3] for row in cold.storage.conn.execute(f"EXPLAIN QUERY PLAN {sql}")]
            assert not any(step.split()[:2] == ["SCAN", "entries"] and "INDEX" not in step for step in plan), (sql, plan)


def test_semantic_recall_grows_its_shortlist_with_the_rows_and_hybrid_keeps_its_own(
    sqlite_hashed_store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Semantic recall rescores more rows as the store grows (to keep its exact top k); hybrid's
    candidates are scored again by fusion, so its shortlist stays the size its k asks for."""
    from harness_mem import vectors

    sqlite_hashed_store.add_many([{"text": f"deploy note {i} for the team"} for i in range(3000)], batch_size=1000)
    rescored: list[int] = []
    original = VectorIndex.rescore
    monkeypatch.setattr(VectorIndex, "rescore", lambda self, query, pks, k: rescored.append(len(pks)) or original(self, query, pks, k))
    monkeypatch.setattr(vectors, "ROWS_PER_SHORTLISTED", 5)  # 3,000 rows: a shortlist of 600
    assert len(sqlite_hashed_store.recall("deploy note", k=10, mode="semantic")) == 10
    assert rescored[0] == 600  # (then the rows near the cut, if any)
    rescored.clear()
    assert len(sqlite_hashed_store.recall("deploy note", k=10, mode="hybrid")) == 10
    # The semantic candidates: the shortlist for hybrid's depth (50), not for the rows.
    assert rescored[0] == VectorIndex.shortlist_size(50) < 600


def anisotropic(rng: np.random.Generator, rows: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float32]]:
    """Vectors spread unevenly over their dimensions, as a sentence model's are (variance falling
    with rank, randomly rotated): the shape that draws them, and ``rows`` of them, unit length."""
    rotation, _ = np.linalg.qr(rng.standard_normal((384, 384)))
    shape = rotation * np.sqrt(np.arange(1, 385) ** -0.5)
    matrix = (rng.standard_normal((rows, 384)) @ shape.T).astype(np.float32)
    return shape, matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@contextmanager
def anisotropic_store(db_path: Path, rng: np.random.Generator) -> Iterator[
        tuple[npt.NDArray[np.float64], npt.NDArray[np.float32], MemoryStore, VectorIndex]]:
    """A store of 6,000 :func:`anisotropic` rows (their vectors its embedder's): the shape that drew
    them, the rows, the store, its vector index."""
    shape, matrix = anisotropic(rng, 6000)
    with MemoryStore(db_path, embedder=MatrixEmbedder(matrix)) as store:  # type: ignore[arg-type]
        store.add_many([{"text": f"row {i}"} for i in range(len(matrix))], batch_size=2000)
        index = store.storage.vector_index()
        assert index is not None
        yield shape, matrix, store, index


def test_rows_near_the_cut_are_rescored_so_neighbours_the_shortlist_ranked_low_are_found(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The weighted distance misranks some exact neighbours below the shortlist; the rows after it
    whose estimate comes near the k-th cosine are rescored too, and find them."""
    from harness_mem import vectors

    rng = np.random.default_rng(5)
    with anisotropic_store(db_path, rng) as (shape, matrix, store, index):
        found, shortlist_alone = [], []
        for _ in range(30):
            query = (rng.standard_normal(384) @ shape.T).astype(np.float32)
            exact = {pk for pk, _ in index.exact_knn(query, 10, store.namespace)}
            found.append(len(exact & {pk for pk, _ in index.search(query, 10, store.namespace)}))
            with monkeypatch.context() as patch:
                patch.setattr(vectors, "NEAR_CUT_ROWS", 0)  # the shortlist alone, as before
                shortlist_alone.append(len(exact & {pk for pk, _ in index.search(query, 10, store.namespace)}))
        missed_before = [i for i, held in enumerate(shortlist_alone) if held < 10]
        assert len(missed_before) >= 5  # the shortlist alone loses exact neighbours here ...
        assert all(found[i] == 10 for i in missed_before)  # ... which the rows near the cut bring back
        assert sum(found) >= 0.99 * 10 * len(found)


def test_near_the_cut_takes_the_rows_whose_estimate_reaches_the_kth_cosine() -> None:
    from harness_mem.vectors import NEAR_CUT_SPREADS, near_the_cut

    rng = np.random.default_rng(1)
    scored = np.arange(100, 340, dtype=np.uint16)  # 240 rows rescored, by weighted distance
    errors = rng.normal(0, 0.01, len(scored))
    cosines = 0.9 - 0.002 * scored + errors  # a line the estimate strays from by about 0.01
    kth = np.sort(cosines)[-10]
    spread = float(np.std(errors))
    # Rows whose line value is well short of the k-th cosine are left; those within the margin taken.
    within = int((0.9 - kth) / 0.002)  # the distance at which the line meets the k-th cosine
    later = np.array([within + 1, within + int(NEAR_CUT_SPREADS * spread / 0.002 / 2),
                      within + int(2 * NEAR_CUT_SPREADS * spread / 0.002)], dtype=np.uint16)
    assert near_the_cut(scored, cosines, later, 10).tolist() == [True, True, False]
    # Rows all at one distance give no line: every later row is rescored.
    assert near_the_cut(np.full(240, 7, np.uint16), cosines, later, 10).all()
