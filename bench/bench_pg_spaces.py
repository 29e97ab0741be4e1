"""What reading a private and a shared namespace together costs a keyword recall on PostgreSQL, and
what the database's confinement (row-level security) adds to it.

On a throwaway server (tests/postgres_server.py), notes are spread over three namespaces (``ada``,
``team``, ``bob``) and a login role is granted ``ada`` and ``team``. The same questions are asked,
interleaved in one run, by the owner reading ``ada`` alone, by the owner reading ``ada`` and
``team``, and by the role reading ``ada`` and ``team`` (which the database confines); the median
time of each and their ratios are printed::

    python bench/bench_pg_spaces.py [--notes 20000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402

WORDS = ("deploy pipeline cache warmer billing invoice release train pager rotation schema migration"
         " index vacuum replica backup restore token quota budget alert latency queue worker lease").split()
NAMESPACES = ("ada", "team", "bob")


def _notes(count: int, rng: random.Random) -> list[dict[str, str]]:
    return [{"content": " ".join(rng.choices(WORDS, k=12)) + f" note {i}", "id": f"n{i}"} for i in range(count)]


def _timed(store: MemoryStore, query: str) -> float:
    began = time.perf_counter()
    store.recall(query, k=10, mode="keyword")
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notes", type=int, default=20000, help="notes in all, a third per namespace")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = random.Random(7)
    queries = [" ".join(rng.sample(WORDS, 3)) for _ in range(40)]
    with PostgresServer() as server:
        schema, role = f"b_{uuid.uuid4().hex[:12]}", f"ada_{uuid.uuid4().hex[:8]}"
        with server.connect() as conn:
            conn.execute(f"CREATE SCHEMA {schema}")
        server.create_role(role)
        options = f"?options=-csearch_path%3D{schema},public"
        owner, confined = server.dsn + options, server.dsn_for(user=role) + options
        for namespace in NAMESPACES:
            with MemoryStore(owner, namespace=namespace, embedder=None) as store:
                store.add_many(_notes(args.notes // len(NAMESPACES), rng))
        with MemoryStore(owner, namespace="ada", embedder=None) as store:
            store.grant(role, "ada")
            store.grant(role, "team")
        with server.connect() as conn:
            conn.execute(f"ANALYZE {schema}.entries")
        stores = {"owner, ada": MemoryStore(owner, namespace="ada", embedder=None),
                  "owner, ada + team": MemoryStore(owner, namespaces=["ada", "team"], embedder=None),
                  "role, ada + team": MemoryStore(confined, namespaces=["ada", "team"], embedder=None)}
        times: dict[str, list[float]] = {name: [] for name in stores}
        try:
            for store in stores.values():  # warm: each connection's first plans and caches
                for query in queries[:5]:
                    _timed(store, query)
            for _ in range(args.rounds):
                for query in queries:
                    for name, store in stores.items():  # interleaved: the same load on each
                        times[name].append(_timed(store, query))
        finally:
            for store in stores.values():
                store.close()
    medians = {name: statistics.median(found) * 1000 for name, found in times.items()}
    print(f"{args.notes} notes in {len(NAMESPACES)} namespaces, {len(queries)} questions x {args.rounds} rounds,"
          " keyword recall, k=10")
    for name, median in medians.items():
        print(f"{name:<20} median {median:7.2f} ms")
    print(f"two namespaces / one (owner): {medians['owner, ada + team'] / medians['owner, ada']:.2f}")
    print(f"confined role / owner (two namespaces): {medians['role, ada + team'] / medians['owner, ada + team']:.2f}")


if __name__ == "__main__":
    main()
