"""Turns written without the model (as the hook writer writes them) get their vectors in the
background, with the real model, and are found by meaning without a reindex."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_mem.background_embedding import BackgroundEmbedder
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.real_model


def test_what_a_writer_without_the_model_stored_is_found_by_meaning_after_a_moment(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    with MemoryStore(db) as store:  # a file with vectors: the model's
        store.add("the staging database listens on port 5433", session="s-1")
    with MemoryStore(db, embedder=None) as writer:  # the hook writer's handle: no model
        writer.add_many([{"content": "we chose argon2id for password hashing", "role": "user", "session": "s-2"},
                         {"content": "deploys go out on Tuesdays after 2 pm", "role": "assistant", "session": "s-2"}])
    embedder = BackgroundEmbedder(db, "default", settle=0.05)
    try:
        embedder.notify()
        assert embedder.wait_idle(timeout=300)
    finally:
        embedder.stop()
    assert embedder.embedded == 2
    with MemoryStore(db) as store:
        assert store.count_missing_vectors() == 0
        (hit,) = store.recall("how are passwords stored", k=1, mode="semantic")
        assert hit.entry.content == "we chose argon2id for password hashing"


def test_a_keyword_only_file_gets_no_vectors_and_no_model(tmp_path: Path) -> None:
    db = str(tmp_path / "memory.db")
    with MemoryStore(db, embedder=None) as store:  # made keyword-only
        store.add("we chose argon2id for password hashing")
    embedder = BackgroundEmbedder(db, "default", settle=0.01)
    embedder.notify()
    assert embedder.wait_idle(timeout=60)
    embedder.stop()
    assert embedder.embedded == 0
    with MemoryStore(db, embedder=None) as store:
        assert store.keyword_only
