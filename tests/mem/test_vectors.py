"""Semantic and hybrid recall on real sqlite-vec: the plumbing with the instant HashedEmbedder, what
rests on understanding (paraphrases, the prefilter on real vectors) with the real model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
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


def test_add_many_embeds_each_batch_in_one_model_call(db_path: Path, hashed_embedder: HashedEmbedder) -> None:
    counting = hashed_embedder
    with MemoryStore(db_path, embedder=counting) as store:
        store.add_many([{"text": f"note number {i}"} for i in range(120)], batch_size=50)
        assert counting.calls == [50, 50, 20]
        store.add_many([{"text": f"note number {i}", "id": f"n{i}"} for i in range(3)])
        store.add_many([{"text": f"note number {i}", "id": f"n{i}"} for i in range(3)], on_conflict="ignore")
        assert counting.calls[3:] == [3]  # re-adding known ids embeds nothing
        store.recall("note", mode="semantic")
        store.recall("note", mode="semantic")
        assert counting.calls[4:] == [1]  # the query embedding is cached


def test_filters_apply_before_the_top_k_cut(hashed_store: MemoryStore) -> None:
    hashed_store.add_many([{"text": f"a story about cats number {i}", "session": "noise"} for i in range(3000)],
                          batch_size=1000)
    wanted = hashed_store.add_many([{"text": f"a note about dogs {i}", "session": "wanted"} for i in range(5)])
    hits = hashed_store.recall("cats", k=5, mode="semantic", session="wanted")
    assert sorted(h.entry.id for h in hits) == sorted(e.id for e in wanted)
    hybrid = hashed_store.recall("cats", k=5, mode="hybrid", session="wanted")
    assert sorted(h.entry.id for h in hybrid) == sorted(e.id for e in wanted)


@pytest.mark.slow
def test_prefilter_search_agrees_with_exact_vec0_knn(semantic_store: MemoryStore, embedder: object) -> None:
    adjectives = ("weekly", "urgent", "draft", "final", "late", "annual", "secret", "shared")
    topics = ("budget", "hiring", "outage", "launch", "design", "security", "sales", "travel")
    places = ("Berlin", "Lisbon", "Osaka", "Lagos", "Lima", "Oslo", "Quebec", "Perth")
    texts = [f"{w} {v} report from the {p} office, team {i}" for i, (w, v, p) in enumerate(
        (w, v, p) for w in adjectives for v in topics for p in places)] * 3
    texts = [f"{t} (copy {i // 512})" for i, t in enumerate(texts)]  # 1,536 distinct texts
    semantic_store.add_many([{"text": t} for t in texts], batch_size=1000)
    index = semantic_store._vector_index()
    assert index is not None
    overlaps = []
    for query in ("budget outage", "hiring plan", "security review", "travel costs", "launch design"):
        vector = embedder.embed([query])[0]  # type: ignore[attr-defined]
        fast = {pk for pk, _ in index.search(vector, 10, semantic_store.namespace)}
        exact = {pk for pk, _ in index.exact_knn(vector, 10)}
        overlaps.append(len(fast & exact) / 10)
    assert np.mean(overlaps) >= 0.9


def test_delete_removes_vectors_and_other_processes_see_changes(db_path: Path) -> None:
    # Two connections, as two processes would hold: each keeps its own cache of the vectors.
    with MemoryStore(db_path, embedder=HashedEmbedder()) as a, MemoryStore(db_path, embedder=HashedEmbedder()) as b:
        a.add_many([{"text": t, "id": str(i)} for i, t in enumerate(NOTES)])
        assert b.recall("a cat on a mat", k=1, mode="semantic")[0].entry.id == "0"  # b loads its cache
        assert a.delete("0")
        assert all(h.entry.id != "0" for h in b.recall("a cat on a mat", mode="semantic"))
        b.add("a small cat napping on a doormat", id="cat2")
        assert a.recall("a cat on a mat", k=1, mode="semantic")[0].entry.id == "cat2"
        assert a.db.execute("SELECT count(*) FROM entries_vec").fetchone()[0] == len(NOTES)
        assert a.db.execute("SELECT count(*) FROM entry_vectors").fetchone()[0] == len(NOTES)


def test_namespaces_do_not_leak_through_vectors(db_path: Path, hashed_embedder: HashedEmbedder) -> None:
    with MemoryStore(db_path, namespace="alice", embedder=hashed_embedder) as alice, \
            MemoryStore(db_path, namespace="bob", embedder=hashed_embedder) as bob:
        alice.add("alice keeps her spare key under the flower pot")
        assert bob.recall("where is the spare key", mode="semantic") == []
        assert bob.recall("where is the spare key", mode="hybrid") == []


def test_explain_shows_each_component(hashed_store: MemoryStore) -> None:
    hashed_store.add_many([{"text": t} for t in NOTES])
    hits = hashed_store.recall("database migration locked", k=5, mode="hybrid", explain=True)
    top = hits[0]
    assert top.entry.content == NOTES[4]
    assert top.components is not None and set(top.components) == {"keyword", "semantic", "speaker"}
    assert top.components["semantic"]["rank"] == 1 and top.components["keyword"]["rank"] == 1
    # A hit that only the embedding found still shows its (zero) keyword score and its cosine.
    others = [h for h in hits if h.components and h.components["keyword"]["rank"] is None]
    assert others and all(h.components["keyword"]["score"] == 0.0 for h in others)  # type: ignore[index]
    assert all(h.components["semantic"]["rank"] is not None for h in others)  # type: ignore[index]


def test_no_embedder_fails_clearly_and_keyword_keeps_working(db_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        store.add("deploys are on Tuesdays")
        for mode in ("semantic", "hybrid"):
            with pytest.raises(EmbedderError, match="needs an embedding model .* or use --mode keyword"):
                store.recall("deploys", mode=mode)  # type: ignore[arg-type]
        assert store.recall("deploys")[0].entry.content == "deploys are on Tuesdays"  # default: keyword


def test_a_different_model_is_refused_until_reindex(db_path: Path, hashed_embedder: HashedEmbedder) -> None:
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
        assert VectorIndex.recorded_model(other.db.conn)["name"] == "other-model"  # type: ignore[index]


def test_entries_without_vectors_are_reported_then_reindexed(db_path: Path, hashed_embedder: HashedEmbedder) -> None:
    with MemoryStore(db_path, embedder=None) as plain:
        plain.add_many([{"text": t} for t in NOTES])
    with MemoryStore(db_path, embedder=hashed_embedder) as store:
        with pytest.raises(EmbedderError, match="5 entries have no vector yet .* `harness-mem reindex`"):
            store.recall("cat", mode="semantic")
        seen: list[int] = []
        report = store.reindex(progress=seen.append, batch_size=2)
        assert report["vectors_written"] == 5 and seen == [2, 2, 1]
        # Each vector went to its own entry: every note is its own nearest neighbour.
        for note in NOTES:
            assert store.recall(note, k=1, mode="semantic")[0].entry.content == note
        assert store.reindex()["vectors_written"] == 0  # resumable: nothing left to do


def test_pack_signs_matches_sqlite_vec_bit_layout(store: MemoryStore) -> None:
    vector = np.linspace(-1, 1, 384, dtype=np.float32)
    ours = pack_signs(vector[None, :])[0].tobytes()
    theirs = store.db.execute("SELECT vec_quantize_binary(?)", (vector.tobytes(),)).fetchone()[0]
    assert ours == theirs
