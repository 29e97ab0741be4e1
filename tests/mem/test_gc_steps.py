"""How gc's steps share the write lock with writers in other processes, on a real SQLite file: a
step's commit only writes its pages (the log is copied into the file between steps, by gc, without
the lock), and every statement that could hold the lock for long goes in steps."""

from __future__ import annotations

from pathlib import Path

from harness_mem.store import MemoryStore

BULKY = "bulky " + "z" * 50_000  # about 13 pages a row


def pages_in_file(db: Path) -> int:
    """The database's size in pages as the file's own header says: what checkpoints have copied in."""
    with db.open("rb") as file:
        return int.from_bytes(file.read(100)[28:32], "big")


def test_a_steps_commit_leaves_copying_the_log_to_between_steps(db_path: Path) -> None:
    # A commit past the log's auto-checkpoint size (1,000 pages) copies the log into the file
    # before it returns: inside a step, that time would count as the step's.
    with MemoryStore(db_path, embedder=None, redactor=None) as store:
        storage = store.storage
        with storage.stepwise():
            before = pages_in_file(db_path)
            store.add_many([{"text": f"{BULKY} {i}"} for i in range(200)])  # about 2,600 pages
            assert pages_in_file(db_path) == before  # still in the log
            storage.between_steps()
            assert pages_in_file(db_path) > before + 2000
        before = pages_in_file(db_path)
        store.add_many([{"text": f"{BULKY} again {i}"} for i in range(200)])
        assert pages_in_file(db_path) > before + 2000  # outside gc, commits copy the log as usual
