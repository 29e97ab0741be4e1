"""A bounded soak: 8 writer and 4 reader processes on one file for a fixed time, with `harness-mem gc`
and `reindex` run again and again beside them; then every acknowledged write is checked to be there.

The processes are real (tests/soak_worker.py, on the instant test embedder). They stop
``HARNESS_MEM_SOAK_SECONDS`` (default 30) after the first was started, whatever their start-up
took (the load itself lasts at least ``MIN_LOAD_S``); the checks at the end take a few seconds
more. Each operation is small, so a slow or loaded machine does fewer operations in that time
instead of running longer. A lock error, a traceback or a lost write in any process is a failure:
nothing here retries.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from fake_embedder import HashedEmbedder
from soak_checks import Expected, check_outputs, drive, start_worker
from soak_worker import KEYWORD_ONLY_WRITER

from harness_mem.errors import NotFoundError
from harness_mem.passages import embedding_text
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow

WRITERS, READERS = 8, 4
#: The test's own entries carry this writer number: written with vectors before the workers start
#: and never changed, so a semantic query always has some vector to search (with none at all, it
#: is refused by design).
SEED_WRITER, SEEDS = WRITERS, 5
SOAK_SECONDS = float(os.environ.get("HARNESS_MEM_SOAK_SECONDS", "30"))
MIN_LOAD_S = 15
STARTUP_LIMIT_S = 180  # twelve interpreters importing numpy on a busy two-core machine
# Run one after the other for the whole soak by the test process: as a real CLI process (slow to
# start on a busy machine), or through its own store (one more connection on the file).
MAINTENANCE = (("cli", "gc"), ("library", "reindex"), ("cli", "reindex", "--quiet"), ("library", "gc"),
               ("cli", "gc", "--vacuum", "--json"), ("library", "reindex"))
BAD_OUTPUT = ("Traceback", "unexpected", "Exception ignored", "database is locked")


def test_soak_many_processes_lose_no_acknowledged_write(tmp_path: Path) -> None:
    db, workdir = tmp_path / "soak.db", tmp_path / "work"
    workdir.mkdir()
    with MemoryStore(db, embedder=HashedEmbedder()) as seeding:  # create, migrate and bind the model once
        seeding.add_many([{"text": f"seed note about the soak w{SEED_WRITER}x{i}", "id": f"w{SEED_WRITER}x{i}"}
                          for i in range(SEEDS)])
    started = time.monotonic()
    procs = {f"{role}-{n}": start_worker(role, n, str(db), workdir)
             for role, count in (("writer", WRITERS), ("reader", READERS)) for n in range(count)}
    own = MemoryStore(db, embedder=HashedEmbedder())
    maintenance, load_seconds = drive(procs, workdir, str(db), own, started=started, seconds=SOAK_SECONDS,
                                      min_load_s=MIN_LOAD_S, startup_limit_s=STARTUP_LIMIT_S,
                                      maintenance=MAINTENANCE)
    check_outputs(procs, workdir, maintenance, BAD_OUTPUT)

    expected = Expected(live={f"w{SEED_WRITER}x{i}": SEED_WRITER for i in range(SEEDS)})
    for n in range(WRITERS):
        expected.replay(n, (workdir / f"writer-{n}.log").read_text())
    worked: Counter[str] = Counter()
    slowest: dict[str, tuple[float, str]] = {}
    for name in procs:
        done = json.loads((workdir / f"{name}.json").read_text())
        assert sum(done["counts"].values()) > 0, f"{name} did nothing in {load_seconds:.0f} s"
        worked.update(done["counts"])
        slowest[name] = (round(done["slowest"][0], 2), done["slowest"][1])
    ran = Counter(args[0] for args, _, _ in maintenance)
    assert ran["gc"] >= 1 and ran["reindex"] >= 1, ran

    with MemoryStore(db, embedder=HashedEmbedder()) as store:
        conn = store.db.conn
        # Every expiring entry has expired once the latest expiry has passed (at most MAX_TTL_S).
        latest = conn.execute("SELECT max(expires_at) FROM entries").fetchone()[0] or 0
        time.sleep(max(0.0, latest / 1000 - time.time() + 0.05))
        rows = conn.execute(
            "SELECT id, pk, forgotten_at IS NOT NULL, superseded_by IS NOT NULL, content FROM entries"
            " WHERE namespace = ?", (store.namespace,),
        ).fetchall()
        kept = {entry_id: (pk, superseded, content) for entry_id, pk, forgotten, superseded, content in rows
                if not forgotten}  # expired ones included, until a purge
        tombstones = {entry_id for entry_id, _, forgotten, _, _ in rows if forgotten}
        live = {entry_id: kept[entry_id] for entry_id in set(kept) - set(expected.expiring)}
        lost, extra = set(expected.live) - set(live), set(live) - set(expected.live)
        assert not lost and not extra, f"acknowledged but missing: {sorted(lost)[:20]}; stored but deleted: {sorted(extra)[:20]}"
        assert tombstones <= expected.forgotten, sorted(tombstones - expected.forgotten)[:20]
        assert {i for i, (_, superseded, _) in live.items() if superseded} == expected.superseded
        writers = {**expected.live, **expected.expiring}
        for entry_id, (_, _, content) in kept.items():  # each entry holds what its own writer wrote
            assert re.search(rf"\bw{writers[entry_id]}[xrcp]\d+\b", content), (entry_id, content)
            assert not entry_id.startswith("w") or entry_id in content.split(), (entry_id, content)
        for entry_id in expected.forgotten | set(expected.expiring):
            with pytest.raises(NotFoundError):
                store.get(entry_id)
        assert {entry.id for entry in store.list()} == set(live) - expected.superseded

        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")  # raises when corrupt
        assert store.integrity_check() == []
        kept_pks = {pk for pk, _, _ in kept.values()}
        assert {pk for (pk,) in conn.execute("SELECT rowid FROM entries_fts")} == kept_pks

        # Vectors: none for a deleted or forgotten entry, one for every entry a process with the
        # model wrote; the keyword-only writer's entries wait for the next reindex.
        vector_pks = {pk for (pk,) in conn.execute("SELECT rowid FROM entries_vec_rowids")}
        assert vector_pks <= kept_pks, f"vectors of deleted entries: {sorted(vector_pks - kept_pks)[:20]}"
        unembedded = {i for i, (pk, _, _) in kept.items() if pk not in vector_pks}
        assert {writers[i] for i in unembedded} <= {KEYWORD_ONLY_WRITER}, sorted(unembedded)[:20]

        # A last gc takes the tombstones and the expired entries with all their rows; a reindex
        # embeds what the keyword-only writer left, each vector from its own entry's text.
        collected = store.gc()
        assert (collected["forgotten_purged"], collected["expired_purged"]) == (len(tombstones), len(kept) - len(live))
        store.reindex()
        assert store.count_missing_vectors() == 0
        remaining = {entry_id: (pk, content, role) for entry_id, pk, content, role in conn.execute(
            "SELECT id, pk, content, role FROM entries")}
        assert set(remaining) == set(live)
        by_pk = {pk: (content, role) for pk, content, role in remaining.values()}
        assert {pk for (pk,) in conn.execute("SELECT rowid FROM entries_fts")} == set(by_pk)
        stored = conn.execute("SELECT rowid, embedding FROM entries_vec").fetchall()
        assert {pk for pk, _ in stored} == set(by_pk)
        pks = [pk for pk, _ in stored]
        mine = np.stack([np.frombuffer(blob, dtype=np.int8).astype(np.float32) for _, blob in stored])
        wanted = HashedEmbedder().embed([embedding_text(*by_pk[pk]) for pk in pks])
        cosines = np.sum(mine * wanted, axis=1) / np.linalg.norm(mine, axis=1)
        assert cosines.min() > 0.99, f"entry {pks[int(cosines.argmin())]} holds another entry's vector"
        assert store.integrity_check() == []
        conn.execute("INSERT INTO entries_fts (entries_fts) VALUES ('integrity-check')")

    report = {
        "seconds": SOAK_SECONDS, "load_s": round(load_seconds, 1), "wall_s": round(time.monotonic() - started, 1),
        "entries_at_end": len(live), "tombstones_left": len(tombstones), "expired_left": len(kept) - len(live),
        "acknowledged": dict(expected.counts), "operations": dict(worked), "maintenance": dict(ran),
        "slowest_op_s": slowest,
    }
    print(f"\nsoak: {json.dumps(report)}")
