"""What the database's keeping of each namespace's keyword counts costs a PostgreSQL write.

Since migration 0009 triggers keep each namespace's keyword counters (BM25's statistics) as the
entries' keyword rows change, so a confined role cannot rewrite them. This adds the same notes
with ``add_many`` to fresh stores on a throwaway server (tests/postgres_server.py), with the
counting trigger on and, as the baseline, off, alternating, and prints the best time of each and
their ratio, both measured in this run::

    python bench/bench_pg_counts.py [--notes 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402


def _add(server: PostgresServer, notes: list[dict[str, str]], *, counted: bool) -> float:
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    with MemoryStore(f"{server.dsn}?options=-csearch_path%3D{schema},public", embedder=None) as store:
        if not counted:
            with server.connect() as conn:
                conn.execute(f"ALTER TABLE {schema}.entries DISABLE TRIGGER entries_added_keyword_counts")
        began = time.perf_counter()
        store.add_many(notes)
        return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    notes = [{"content": f"note {i} about the deploy pipeline and the cache warmer number {i % 97}", "id": f"n{i}"}
             for i in range(args.notes)]
    times: dict[bool, list[float]] = {True: [], False: []}
    with PostgresServer() as server:
        for _ in range(args.rounds):
            for counted in (True, False):
                times[counted].append(_add(server, notes, counted=counted))
    best = {counted: min(seconds) for counted, seconds in times.items()}
    print(f"add_many of {args.notes:,} notes, best of {args.rounds}: {best[True]:.3f} s counted by the trigger,"
          f" {best[False]:.3f} s with it off — ratio {best[True] / best[False]:.2f}")


if __name__ == "__main__":
    main()
