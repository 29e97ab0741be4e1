"""Several real processes on one store: nothing lost, never "database is locked", and a killed
writer leaves a sound store with everything it had committed. Each test runs on both engines (a
SQLite file, a PostgreSQL schema: ``engine_target``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from engine_rows import keyword_rows, vector_rows
from fake_embedder import HashedEmbedder

from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import sys
    from harness_mem.store import MemoryStore
    path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with MemoryStore(path, embedder=None) as store:
        for i in range(count):
            if i % 10 == 0:   # batches and single adds interleave across processes
                store.add_many([{"text": f"batch {worker} {i} {j}", "id": f"{worker}-b{i}-{j}"} for j in range(5)])
            store.add(f"worker {worker} wrote entry {i}", id=f"{worker}-{i}", session=f"w{worker}")
            # read-then-write: the kind of transaction that fails without BEGIN IMMEDIATE
            store.add(f"echo of {store.count(session=f'w{worker}')}", id=f"{worker}-echo-{i}", on_conflict="replace")
    print("done")
    """
)


def _spawn(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_concurrent_writer_processes_lose_nothing(engine_target: str) -> None:
    db_path = engine_target
    MemoryStore(db_path, embedder=None).close()  # create and migrate once, then race
    workers, per_worker = 4, 60
    procs = [_spawn(WRITER, str(db_path), str(w), str(per_worker)) for w in range(workers)]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
        assert "locked" not in err and out.strip() == "done"
    with MemoryStore(db_path, embedder=None) as store:
        expected = workers * (per_worker * 2 + (per_worker // 10) * 5)
        assert store.count() == expected
        for w in range(workers):
            assert store.get(f"{w}-{per_worker - 1}").content == f"worker {w} wrote entry {per_worker - 1}"
        assert store.integrity_check() == []
        assert len(store.recall("worker wrote entry", k=1000)) == workers * per_worker


EMBEDDING_WRITER = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, sys.argv[4])  # the tests directory: the deterministic test embedder
    from fake_embedder import HashedEmbedder
    from harness_mem.store import MemoryStore
    path, worker, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with MemoryStore(path, embedder=HashedEmbedder()) as store:
        for i in range(count):
            store.add(f"worker w{worker} planted tree t{i}", id=f"{worker}-{i}")  # a word set of its own
            if i % 5 == 4:
                store.delete(f"{worker}-{i - 2}")
            # This process's vector cache must see its own write while the others keep changing the file.
            hit = store.recall(f"worker w{worker} planted tree t{i}", k=1, mode="semantic")[0]
            assert hit.entry.id == f"{worker}-{i}", (i, hit.entry.id)
    print("done")
    """
)


def test_concurrent_writer_processes_keep_one_vector_per_entry(engine_target: str) -> None:
    db_path = engine_target
    MemoryStore(db_path, embedder=HashedEmbedder()).close()  # create, migrate and bind the model once
    workers, per_worker = 4, 30
    tests_dir = str(Path(__file__).resolve().parents[1])
    procs = [_spawn(EMBEDDING_WRITER, str(db_path), str(w), str(per_worker), tests_dir) for w in range(workers)]
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert "locked" not in err and out.strip() == "done"
    with MemoryStore(db_path, embedder=HashedEmbedder()) as store:
        expected = workers * (per_worker - per_worker // 5)
        assert store.count() == expected and store.count_missing_vectors() == 0
        assert (vector_rows(store), keyword_rows(store)) == (expected, expected)
        for entry in store.list():  # each vector belongs to its own entry
            assert store.recall(entry.content, k=1, mode="semantic")[0].entry.id == entry.id
        assert store.integrity_check() == []


def test_concurrent_first_open_migrates_once(engine_target: str) -> None:
    path = engine_target
    opener = "import sys\nfrom harness_mem.store import MemoryStore\nMemoryStore(sys.argv[1], embedder=None).add('hi')\nprint('done')"
    procs = [_spawn(opener, str(path)) for _ in range(4)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with MemoryStore(path, embedder=None) as store:
        assert store.count() == 4


KILLED = textwrap.dedent(
    """
    import sys
    from harness_mem.store import MemoryStore
    with MemoryStore(sys.argv[1], embedder=None) as store:
        i = 0
        while True:
            store.add_many([{"text": f"entry {i} {j} " + "x" * 500, "id": f"{i}-{j}"} for j in range(20)])
            print(i, flush=True)
            i += 1
    """
)


def test_a_killed_writer_leaves_a_sound_file_with_every_committed_batch(engine_target: str) -> None:
    db_path = engine_target
    MemoryStore(db_path, embedder=None).close()
    committed = -1
    deadline = time.monotonic() + 60
    with _spawn(KILLED, str(db_path)) as proc:
        assert proc.stdout is not None
        while committed < 30 and time.monotonic() < deadline:
            committed = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with MemoryStore(db_path, embedder=None) as store:
        assert store.integrity_check() == []
        count = store.count()
        assert count % 20 == 0  # batches are all or nothing
        assert count >= (committed + 1) * 20  # every batch it reported as committed survived
        assert store.get(f"{committed}-19").content.startswith(f"entry {committed} 19")
        assert keyword_rows(store) == count  # the index never lags the canonical rows
