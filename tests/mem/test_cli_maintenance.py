"""The maintenance commands: ``init``, ``reindex``, and the ``redact`` filter.

``reindex`` is checked on both engines (``engine_target``); ``init`` makes and checks SQLite files."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
from click.testing import CliRunner
from engine_rows import keyword_rows, lose_keyword_rows, vector_rows
from fake_embedder import HashedEmbedder

from harness_mem.cli import cli
from harness_mem.db import connect
from harness_mem.migrations import known_migrations
from harness_mem.store import MemoryStore

LATEST = known_migrations()[-1].number


def run(*args: str, input: bytes | str | None = None) -> object:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


# ---- init ----------------------------------------------------------------------------------------


def tables(path: Path) -> set[str]:
    conn = connect(path)
    try:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        conn.close()


def test_init_creates_the_file_and_its_folders_and_applies_every_migration(tmp_path: Path) -> None:
    path = tmp_path / "new" / "nested" / "agent.db"
    result = run("--db", str(path), "init")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout == f"Ready: {path} (schema {LATEST:04d}, keyword + vectors)\n"
    assert {"entries", "entries_fts", "settings", "episodes", "skills", "consolidations",
            "_migrations"} <= tables(path)
    conn = connect(path)
    try:
        assert {n for (n,) in conn.execute("SELECT number FROM _migrations")} == {m.number for m in known_migrations()}
    finally:
        conn.close()


def test_init_again_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "agent.db"
    first = run("--db", str(path), "init")
    run("--db", str(path), "--embedder", "none", "add", "kept across inits", "--id", "keep")
    conn = connect(path)

    def snapshot() -> tuple[list[object], list[object]]:
        return (conn.execute("SELECT * FROM _migrations ORDER BY number").fetchall(),
                conn.execute("SELECT * FROM settings ORDER BY key").fetchall())

    try:
        before = snapshot()
        again = run("--db", str(path), "init")
        assert again.exit_code == 0 and again.stdout == first.stdout
        assert snapshot() == before  # no migration re-run, the redaction secret kept
    finally:
        conn.close()
    assert json.loads(run("--db", str(path), "get", "keep", "--json").stdout)["content"] == "kept across inits"


def test_init_on_an_empty_file_makes_it_a_store(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    assert run("--db", str(path), "init").stdout == f"Ready: {path} (schema {LATEST:04d}, keyword + vectors)\n"
    assert "entries" in tables(path)


def test_init_on_a_file_that_is_not_sqlite_is_one_line_and_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    content = b"shopping list\n- milk\n- bread\n" * 200
    path.write_bytes(content)
    result = run("--db", str(path), "init")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == f"Error: {path} is not a usable SQLite database (file is not a database)\n"
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # no -wal or -shm left beside it


def test_init_on_a_directory_is_a_usage_error(tmp_path: Path) -> None:
    result = run("--db", str(tmp_path), "init")
    assert result.exit_code == 2 and "is a directory" in result.stderr and "Traceback" not in result.stderr


# ---- reindex -------------------------------------------------------------------------------------

TURNS = [
    ("user", "what is your favourite colour"),
    ("assistant", "blue, since the trip to Lisbon"),
    ("user", "and the cat's name?"),
]
def reindexed(n: int, written: int, dropped: int) -> str:
    """The reindex summary, its nouns agreeing with their counts ("1 vector", "0 vectors")."""
    def s(count: int) -> str:
        return "" if count == 1 else "s"
    return (f"Reindexed {n} entr{'y' if n == 1 else 'ies'}: keyword index rebuilt, {written} vector{s(written)} written,"
            f" {dropped} stale vector{s(dropped)} dropped")


@pytest.fixture
def keyword_only(engine_target: str) -> str:
    """A file written without an embedder: three turns of a session and two notes, no vectors."""
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as store:
        for i, (role, text) in enumerate(TURNS):
            store.add(text, role=role, session="s1", id=f"t{i}", created_at=f"2024-05-0{i + 1}T10:00:00Z")
        store.add("a note about cats", id="n1")
        store.add("a note about dogs", id="n2")
    return db_path


def test_reindex_embeds_a_keyword_only_store_with_progress_on_stderr(keyword_only: str) -> None:
    db = ("--db", str(keyword_only))
    refused = run(*db, "recall", "cats", "--mode", "semantic")
    assert refused.exit_code == 1
    assert refused.stderr == ("Error: semantic recall needs vectors, and this store is keyword-only — give it"
                              " vectors with `harness-mem --embedder minilm-int8s reindex`, or use --mode keyword\n")
    kept = run(*db, "reindex")  # a plain reindex honours the file's choice, and says how to switch
    assert kept.stderr.splitlines() == [
        reindexed(n=5, written=0, dropped=0),
        "This store is keyword-only; `harness-mem --embedder minilm-int8s reindex` gives it vectors.",
    ]
    result = run(*db, "--embedder", "minilm", "reindex")
    assert result.exit_code == 0 and result.stdout == ""
    lines = result.stderr.splitlines()
    # The phases as they begin, then the count of entries embedded and written, the rate, the summary.
    assert lines[:2] == ["reindex: reading the entries, rebuilding the keyword index",
                         "reindex: embedding and writing vectors"]
    assert lines[2].startswith("reindex: embedding and writing vectors, 5/5 entries, 5 written, ")
    assert lines[2].endswith("/s") and lines[3:] == [reindexed(n=5, written=5, dropped=0)]
    hits = [json.loads(line) for line in run(*db, "recall", "a note about cats", "--mode", "semantic", "--json").stdout.splitlines()]
    assert hits[0]["id"] == "n1" and len(hits) == 5
    with MemoryStore(keyword_only, embedder=None) as store:
        model = HashedEmbedder()
        assert store.storage.recorded_model() == {"name": model.name, "dim": str(model.dim),
                                                  "fingerprint": model.fingerprint}
    again = run(*db, "reindex")
    assert again.stderr == reindexed(n=5, written=0, dropped=0) + "\n"  # nothing left: no progress bar


def test_reindex_quiet_has_no_progress(keyword_only: str) -> None:
    result = run("--db", str(keyword_only), "--embedder", "minilm", "reindex", "--quiet")
    assert result.stderr == reindexed(n=5, written=5, dropped=0) + "\n"


def test_reindex_without_an_embedder_rebuilds_the_keyword_index(keyword_only: str) -> None:
    db = ("--db", str(keyword_only), "--embedder", "none")

    def found(query: str) -> list[str]:
        return [json.loads(line)["id"] for line in run(*db, "recall", query, "--json", "-k", "10").stdout.splitlines()]

    # A turn is indexed with the turn before it: "favourite colour" finds the question and its answer.
    assert sorted(found("favourite colour")) == ["t0", "t1"]
    lose_keyword_rows(keyword_only)  # lose the derived rows
    assert found("favourite colour") == [] and found("dogs") == []
    result = run(*db, "reindex")
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == reindexed(n=5, written=0, dropped=0)
    assert sorted(found("favourite colour")) == ["t0", "t1"] and found("dogs") == ["n2"]
    assert sorted(found("Lisbon")) == ["t1", "t2"]  # each turn's context is rebuilt as it was written
    with MemoryStore(keyword_only, embedder=None) as store:
        assert keyword_rows(store) == 5
        assert store.count_missing_vectors() == 0  # no embedder: nothing to embed, nothing reported


def test_reindex_replaces_vectors_of_another_model(engine_target: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=HashedEmbedder(name="older-model")) as store:
        store.add_many([{"text": f"note {i} about the garden"} for i in range(4)])
    refused = run("--db", str(db_path), "recall", "garden", "--mode", "semantic")
    assert refused.exit_code == 1 and "made by older-model" in refused.stderr
    result = run("--db", str(db_path), "reindex")
    assert result.stderr.splitlines()[-1] == reindexed(n=4, written=4, dropped=4)
    assert run("--db", str(db_path), "recall", "garden", "--mode", "semantic").exit_code == 0


class StopsAfter(HashedEmbedder):
    """The default test embedder (same identity) that fails on its call number ``calls_allowed + 1``."""

    def __init__(self, calls_allowed: int) -> None:
        super().__init__()
        self.calls_allowed = calls_allowed

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if len(self.calls) == self.calls_allowed:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-reindex
        return super().embed(texts)


def test_an_interrupted_reindex_resumes_where_it_stopped(keyword_only: str) -> None:
    with MemoryStore(keyword_only, embedder=StopsAfter(2)) as store:
        done: list[int] = []
        with pytest.raises(KeyboardInterrupt):
            store.reindex(progress=done.append, batch_size=2)
        assert done == [2, 2] and store.count_missing_vectors() == 1  # two batches were committed
    result = run("--db", str(keyword_only), "reindex")
    assert result.stderr.splitlines()[-1] == reindexed(n=5, written=1, dropped=0)
    with MemoryStore(keyword_only, embedder=HashedEmbedder()) as store:
        assert store.count_missing_vectors() == 0
        assert vector_rows(store) == 5
        # Each entry kept its own vector through the interruption: every note is its own nearest neighbour.
        for entry in store.list():
            assert store.recall(entry.content, k=1, mode="semantic")[0].entry.id == entry.id


# ---- redact --------------------------------------------------------------------------------------


def test_redact_filters_stdin_to_stdout_unchanged_but_for_what_it_redacts(db_path: Path) -> None:
    result = run("--db", str(db_path), "redact", input=b"mail me at ada@example.com\nbye\n")
    assert result.exit_code == 0 and result.stderr == ""
    assert result.stdout_bytes == b"mail me at <EMAIL>\nbye\n"
    assert not db_path.exists()  # a filter: no database is opened
    clean = "第一行：没有个人信息\r\n\tindented line\nno newline at the end".encode()
    assert run("redact", input=clean).stdout_bytes == clean


def test_redact_of_empty_input_is_empty_output() -> None:
    result = run("redact", input=b"")
    assert result.exit_code == 0 and result.stdout_bytes == b"" and result.stderr == ""
    as_json = run("redact", "--json", input=b"")
    assert json.loads(as_json.stdout) == {"text": "", "counts": {}, "blocked": False}


def test_redact_of_invalid_utf8_is_one_line() -> None:
    result = run("redact", input=b"card \xff\xfe 4111 1111 1111 1111")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr == "Error: stdin is not valid UTF-8 (byte 5) — convert it to UTF-8\n"


def test_redact_text_argument_and_json() -> None:
    assert run("redact", "mail ada@example.com").stdout == "mail <EMAIL>\n"
    result = run("redact", "--json", input="call 13800138000 or ada@example.com")
    assert json.loads(result.stdout) == {"text": "call <PHONE> or <EMAIL>", "counts": {"EMAIL": 1, "PHONE": 1},
                                         "blocked": False}


def test_redact_hygiene_exits_non_zero_on_what_it_would_refuse() -> None:
    fine = run("redact", "--policy", "hygiene", input="nothing to see here")
    assert fine.exit_code == 0 and fine.stdout == "nothing to see here"
    refused = run("redact", "--policy", "hygiene", "--json", input="my key sk-abcdefghijklmnopqrstuvwxyz123456")
    assert refused.exit_code == 1
    report = json.loads(refused.stdout)
    assert report["blocked"] is True and "sk-abcdefghijklmnopqrstuvwxyz123456" not in report["text"]
