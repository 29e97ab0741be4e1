"""The soak on PostgreSQL: 4 writer and 2 reader processes on one fresh schema of the test server
for a fixed time, with `harness-mem gc` and `reindex` run again and again beside them; then every
acknowledged write is checked to be there, and nothing else.

As in test_soak.py (whose workers, tests/soak_worker.py, these are, given a DSN): the processes
stop ``HARNESS_MEM_SOAK_SECONDS`` (default 30) after the first was started, whatever their start-up
took (the load itself lasts at least ``MIN_LOAD_S``), and the checks at the end take a few seconds
more. Fewer processes than on SQLite: each PostgreSQL operation costs the server's backend its CPU
too, on the same two cores. A lock error, a deadlock, a traceback or a lost write in any process is a
failure: nothing here retries.
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
from engine_rows import keyword_rows, sql, vector_pks
from engine_targets import fresh_schema
from fake_embedder import HashedEmbedder
from postgres_server import PostgresServer
from soak_checks import Expected, check_outputs, drive, start_worker

from harness_mem.errors import NotFoundError
from harness_mem.passages import embedding_text
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow

WRITERS, READERS = 4, 2
#: The writer that stores no vectors: what each reindex has to embed.
KEYWORD_ONLY = WRITERS - 1
#: The test's own entries (see test_soak.py): a semantic query always has some vector to search.
SEED_WRITER, SEEDS = WRITERS, 5
SOAK_SECONDS = float(os.environ.get("HARNESS_MEM_SOAK_SECONDS", "30"))
MIN_LOAD_S = 15
STARTUP_LIMIT_S = 120
MAINTENANCE = (("cli", "gc"), ("library", "reindex"), ("cli", "reindex", "--quiet"), ("library", "gc"),
               ("cli", "gc", "--vacuum", "--json"), ("library", "reindex"))
# SQLite's lock error, and what PostgreSQL says when a lock is not had or two transactions deadlock.
BAD_OUTPUT = ("Traceback", "unexpected", "Exception ignored", "database is locked", "deadlock",
              "lock timeout", "could not obtain lock", "could not serialize")


def test_soak_many_processes_lose_no_acknowledged_write_on_postgres(
        postgres_server: PostgresServer, tmp_path: Path) -> None:
    dsn, workdir = fresh_schema(postgres_server), tmp_path / "work"
    workdir.mkdir()
    with MemoryStore(dsn, embedder=HashedEmbedder()) as seeding:  # migrate and bind the model once
        seeding.add_many([{"text": f"seed note about the soak w{SEED_WRITER}x{i}", "id": f"w{SEED_WRITER}x{i}"}
                          for i in range(SEEDS)])
    started = time.monotonic()
    procs = {f"{role}-{n}": start_worker(role, n, dsn, workdir, str(KEYWORD_ONLY))
             for role, count in (("writer", WRITERS), ("reader", READERS)) for n in range(count)}
    own = MemoryStore(dsn, embedder=HashedEmbedder())
    maintenance, load_seconds = drive(procs, workdir, dsn, own, started=started, seconds=SOAK_SECONDS,
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
    ran = Counter(command[0] for command, _, _ in maintenance)
    assert ran["gc"] >= 1 and ran["reindex"] >= 1, ran

    with MemoryStore(dsn, embedder=HashedEmbedder()) as store:
        # Every expiring entry has expired once the latest expiry has passed (at most MAX_TTL_S).
        latest = sql(store, "SELECT max(expires_at) FROM entries")[0][0] or 0
        time.sleep(max(0.0, latest / 1000 - time.time() + 0.05))
        rows = sql(store, "SELECT id, pk, forgotten_at IS NOT NULL, superseded_by IS NOT NULL, content FROM entries"
                          " WHERE namespace = ?", (store.namespace,))
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

        # The keyword index (each entry's tokens, with the counters BM25 reads) holds the kept
        # entries and no tombstone; no deleted or forgotten entry kept a vector.
        assert store.integrity_check() == []
        kept_pks = {pk for pk, _, _ in kept.values()}
        assert {pk for (pk,) in sql(store, "SELECT pk FROM entries WHERE tokens IS NOT NULL")} == kept_pks
        assert keyword_rows(store) == len(kept_pks)
        vectors = vector_pks(store)
        assert vectors <= kept_pks, f"vectors of deleted entries: {sorted(vectors - kept_pks)[:20]}"
        unembedded = {i for i, (pk, _, _) in kept.items() if pk not in vectors}
        assert {writers[i] for i in unembedded} <= {KEYWORD_ONLY}, sorted(unembedded)[:20]

        # A last gc takes the tombstones and the expired entries with all their rows; a reindex
        # embeds what the keyword-only writer left, each vector from its own entry's text.
        collected = store.gc()
        assert (collected["forgotten_purged"], collected["expired_purged"]) == (len(tombstones), len(kept) - len(live))
        store.reindex()
        assert store.count_missing_vectors() == 0
        remaining = {entry_id: (pk, content, role) for entry_id, pk, content, role in sql(
            store, "SELECT id, pk, content, role FROM entries")}
        assert set(remaining) == set(live)
        by_pk = {pk: (content, role) for pk, content, role in remaining.values()}
        assert {pk for (pk,) in sql(store, "SELECT pk FROM entries WHERE tokens IS NOT NULL")} == set(by_pk)
        assert keyword_rows(store) == len(by_pk)
        assert vector_pks(store) == set(by_pk)
        stored = store.storage.stored_vectors(sorted(by_pk))
        pks = sorted(stored)
        mine = np.stack([stored[pk] for pk in pks])
        wanted = HashedEmbedder().embed([embedding_text(*by_pk[pk]) for pk in pks])
        cosines = np.sum(mine * wanted, axis=1) / np.linalg.norm(mine, axis=1)
        assert cosines.min() > 0.99, f"entry {pks[int(cosines.argmin())]} holds another entry's vector"
        assert store.integrity_check() == []

    report = {
        "seconds": SOAK_SECONDS, "load_s": round(load_seconds, 1), "wall_s": round(time.monotonic() - started, 1),
        "entries_at_end": len(live), "tombstones_left": len(tombstones), "expired_left": len(kept) - len(live),
        "acknowledged": dict(expected.counts), "operations": dict(worked), "maintenance": dict(ran),
        "slowest_op_s": slowest,
    }
    print(f"\nsoak: {json.dumps(report)}")
