"""Honest modes: keyword-only files, entries without vectors, read-only locations, models by name.

Every test but those of read-only locations (a read-only mount, an immutable file, file
permissions: SQLite's file) runs on both engines, at ``engine_target``."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner
from engine_rows import has_vector_table
from fake_embedder import HashedEmbedder

from harness_mem.cli import cli
from harness_mem.engines import shown_location
from harness_mem.errors import EmbedderError, MissingVectorsWarning, StorageError
from harness_mem.store import MemoryStore


def run(db: Path | str, *args: str) -> object:
    return CliRunner().invoke(cli, ["--db", str(db), *args], catch_exceptions=False)


class RefusingEmbedder(HashedEmbedder):
    """Counts as a model, but must never be asked for a vector."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        raise AssertionError(f"the model was called for {list(texts)!r}")


def no_model_may_load() -> None:
    raise AssertionError("a model was chosen for a keyword-only file")


# ---- keyword-only files ---------------------------------------------------------------------------


@pytest.mark.parametrize("create", [
    ["init", "--keyword-only"],
    ["--embedder", "none", "add", "deploys are on Tuesdays"],
    ["--embedder", "none", "import", "-"],
])
def test_a_file_made_without_a_model_stays_keyword_only(engine_target: str, create: list[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = engine_target
    result = CliRunner().invoke(cli, ["--db", str(db_path), *create], input='{"text": "deploys are on Tuesdays"}\n',
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    monkeypatch.setattr("harness_mem.store.default_embedder", no_model_may_load)
    run(db_path, "add", "the staging database is Postgres 16")  # plain commands: no model chosen, none loaded
    recalled = run(db_path, "recall", "staging database", "--json")
    assert recalled.exit_code == 0 and recalled.stderr == ""  # type: ignore[attr-defined]
    assert json.loads(recalled.stdout.splitlines()[0])["content"] == "the staging database is Postgres 16"  # type: ignore[attr-defined]
    with MemoryStore(db_path) as store:
        assert store.keyword_only and store.embedder is None
    assert "keyword-only store" in run(db_path, "doctor").stdout  # type: ignore[attr-defined]


def test_the_environment_makes_a_new_file_keyword_only_but_not_an_existing_one(
        fresh_target: Callable[[], str], monkeypatch: pytest.MonkeyPatch) -> None:
    vectors, fresh = fresh_target(), fresh_target()
    with MemoryStore(vectors) as store:
        store.add("made with vectors")
    monkeypatch.setenv("HARNESS_MEM_EMBEDDER", "none")
    with MemoryStore(vectors) as existing, MemoryStore(fresh) as new:
        assert existing.embedder is None and not existing.keyword_only
        assert new.embedder is None and new.keyword_only


def test_init_keyword_only_refuses_a_file_with_vectors(engine_target: str) -> None:
    db_path = engine_target
    run(db_path, "add", "a note with a vector")
    result = run(db_path, "init", "--keyword-only")
    assert result.exit_code == 1  # type: ignore[attr-defined]
    assert result.stderr == (  # type: ignore[attr-defined]
        f"Error: {shown_location(db_path)} already exists with vectors — `harness-mem reindex --keyword-only` drops them\n")


def test_switching_is_reindex_both_ways(engine_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db_path = engine_target
    for text in ("cats purr", "dogs bark", "the deploy is on Friday"):
        run(db_path, "add", text)
    dropped = run(db_path, "reindex", "--keyword-only")
    assert "0 vectors written, 3 stale vectors dropped" in dropped.stderr  # type: ignore[attr-defined]
    with MemoryStore(db_path) as store:
        assert store.keyword_only and store.embedder is None
        assert has_vector_table(store) is False
    # A reader with a model named explicitly does not turn the file back: it recalls by keyword and says so.
    with pytest.warns(MissingVectorsWarning, match="no vector yet for 3 of 3 entries"), \
            MemoryStore(db_path, embedder=RefusingEmbedder()) as store:
        assert [h.entry.content for h in store.recall("deploy")] == ["the deploy is on Friday"]
        assert store.keyword_only
    back = run(db_path, "--embedder", "minilm", "reindex", "--quiet")
    assert "3 vectors written" in back.stderr  # type: ignore[attr-defined]
    with MemoryStore(db_path) as store:
        assert not store.keyword_only and store.embedder is not None
        assert store.recall("deploy", mode="semantic")[0].entry.content == "the deploy is on Friday"


def test_an_unknown_model_name_is_refused(engine_target: str) -> None:
    db_path = engine_target
    result = CliRunner().invoke(cli, ["--db", str(db_path), "--embedder", "bge-huge", "stats"])
    assert result.exit_code == 2 and "'bge-huge' is not one of" in result.stderr
    with pytest.raises(EmbedderError, match="unknown embedder 'bge-huge'"):
        MemoryStore(db_path, embedder="bge-huge")


# ---- entries without vectors ----------------------------------------------------------------------


@pytest.fixture
def partial(engine_target: str) -> str:
    """A file with vectors, where one entry was added by a process without the model."""
    db_path = engine_target
    with MemoryStore(db_path) as store:
        store.add("cats purr when they are content", id="cats")
        store.add("dogs bark at the postman", id="dogs")
    with MemoryStore(db_path, embedder=None) as store:
        store.add("the kettle is descaled monthly", id="kettle")
    return db_path


def test_hybrid_recall_answers_with_the_vectors_it_has_and_warns_once(partial: str) -> None:
    result = run(partial, "recall", "kettle descaled", "--json")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()][0] == "kettle"  # type: ignore[attr-defined]
    assert result.stderr == (  # type: ignore[attr-defined]
        "warning: no vector yet for 1 of 3 entries, so keyword matching alone can find them"
        " — run `harness-mem reindex` to embed them\n")
    semantic = run(partial, "recall", "cats", "--mode", "semantic", "--json")
    assert semantic.exit_code == 0 and "so no semantic search can find them" in semantic.stderr  # type: ignore[attr-defined]


def test_strict_refuses_before_any_model_is_asked(partial: str) -> None:
    with MemoryStore(partial, embedder=RefusingEmbedder()) as store, \
            pytest.raises(EmbedderError, match="no vector yet for 1 entry .* run `harness-mem reindex`"):
        store.recall("cats", strict=True)
    result = run(partial, "recall", "cats", "--strict")
    assert result.exit_code == 1 and result.stderr.startswith("Error: no vector yet for 1 entry ")  # type: ignore[attr-defined]


def test_hybrid_over_a_file_with_no_vector_loads_no_model(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        assert not store.keyword_only  # a file that is not keyword-only …
    with MemoryStore(db_path, embedder=None) as store:
        store.add("the kettle is descaled monthly")  # … whose entries have no vector
    with pytest.warns(MissingVectorsWarning), MemoryStore(db_path, embedder=RefusingEmbedder()) as store:
        assert [h.entry.content for h in store.recall("kettle")] == ["the kettle is descaled monthly"]
    with MemoryStore(db_path, embedder=RefusingEmbedder()) as store, \
            pytest.raises(EmbedderError, match="no vector yet"):
        store.recall("kettle", mode="semantic")


# ---- read-only locations --------------------------------------------------------------------------


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextlib.contextmanager
def read_only_mount(folder: Path) -> Iterator[Path]:
    """``folder`` seen through a read-only bind mount (needs root; skips the test otherwise)."""
    target = folder.parent / (folder.name + "-ro")
    target.mkdir()
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(target)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot make a read-only mount here")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[Path]:
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file immutable here")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def written_store(folder: Path) -> Path:
    folder.mkdir()
    path = folder / "memory.db"
    with MemoryStore(path) as store:
        store.add("cats purr when they are content", id="cats")
        store.add("dogs bark at the postman", id="dogs")
    return path


def check_read_only(path: Path) -> None:
    before = digest(path)
    assert run(path, "recall", "cats", "--json").stdout.count("\n") == 2  # type: ignore[attr-defined]
    assert "entries" in run(path, "stats").stdout  # type: ignore[attr-defined]
    added = run(path, "add", "a new note")
    assert added.exit_code == 1  # type: ignore[attr-defined]
    assert added.stderr == (  # type: ignore[attr-defined]
        f"Error: {path} is not writable (a read-only file, folder or file system) — nothing was written\n")
    with MemoryStore(path) as store:
        assert store.read_only
        with pytest.raises(StorageError, match="is not writable"):
            store.delete("cats")
        assert store.get("cats").content == "cats purr when they are content"
    assert digest(path) == before
    # SQLite may open its shared-memory files beside the file when the folder allows it; nothing else.
    assert {p.name for p in path.parent.iterdir()} <= {path.name, f"{path.name}-wal", f"{path.name}-shm"}


def test_a_read_only_file_system_is_read_and_never_written(tmp_path: Path) -> None:
    path = written_store(tmp_path / "data")
    with read_only_mount(path.parent) as mounted:
        check_read_only(mounted / path.name)


def test_an_immutable_file_is_read_and_never_written(tmp_path: Path) -> None:
    path = written_store(tmp_path / "data")
    with immutable(path):
        check_read_only(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write a file whatever its mode")
def test_a_file_without_write_permission_is_read_and_never_written(tmp_path: Path) -> None:
    path = written_store(tmp_path / "data")
    path.chmod(0o444)
    path.parent.chmod(0o555)
    try:
        check_read_only(path)
    finally:
        path.parent.chmod(0o755)


def test_the_environment_knows_every_model_by_name() -> None:
    from typing import get_args

    from harness_mem.providers.embeddings import EMBEDDERS
    from harness_mem.settings import Settings

    assert set(get_args(Settings.model_fields["embedder"].annotation)) == {"auto", "none", *EMBEDDERS}
