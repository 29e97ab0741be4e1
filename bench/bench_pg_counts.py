"""What the database's keeping of each namespace's keyword counts costs a PostgreSQL write.

Since migration 0009 triggers keep each namespace's keyword counters (BM25's statistics) as the
entries' keyword rows change, so a confined role cannot rewrite them. This adds the same notes
with ``add_many`` to fresh stores on a throwaway server (tests/postgres_server.py), with the
counting trigger on and, as the baseline, off, alternating, and prints the best time of each and
their ratio, both measured in this run::

    python bench/bench_pg_counts.py [--notes 4000] [--rounds 3]
    python bench/bench_pg_counts.py --vectors    # the vectors' counter (migration 0015) instead

With ``--vectors`` the notes are embedded (the tests' instant hashed embedder, so the model's time
does not hide the database's) and the trigger on and off is the one counting each namespace's
vectors, the embedding coverage the health page shows.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from fake_embedder import HashedEmbedder  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402


def _add(server: PostgresServer, notes: list[dict[str, str]], *, counted: bool, vectors: bool) -> float:
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    embedder = HashedEmbedder() if vectors else None
    with MemoryStore(f"{server.dsn}?options=-csearch_path%3D{schema},public", embedder=embedder) as store:
        if vectors:
            store.add("the first note makes the vectors' table", id="first")
        if not counted:
            trigger = "entry_vectors_added_counts ON entry_vectors" if vectors else "entries_added_keyword_counts ON entries"
            name, _, table = trigger.split()
            with server.connect() as conn:
                conn.execute(f"ALTER TABLE {schema}.{table} DISABLE TRIGGER {name}")
        began = time.perf_counter()
        store.add_many(notes)
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--vectors", action="store_true", help="the vectors' counter, with embedded notes")
    args = parser.parse_args()
    notes = [{"content": f"note {i} about the deploy pipeline and the cache warmer number {i % 97}", "id": f"n{i}"}
             for i in range(args.notes)]
    times: dict[bool, list[float]] = {True: [], False: []}
    with PostgresServer() as server:
        for _ in range(args.rounds):
            for counted in (True, False):
                times[counted].append(_add(server, notes, counted=counted, vectors=args.vectors))
    best = {counted: min(seconds) for counted, seconds in times.items()}
    what = "embedded notes (the vectors' counter)" if args.vectors else "notes"
    print(f"add_many of {args.notes:,} {what}, best of {args.rounds}: {best[True]:.3f} s counted by the trigger,"
          f" {best[False]:.3f} s with it off — ratio {best[True] / best[False]:.2f}")


if __name__ == "__main__":
    main()
