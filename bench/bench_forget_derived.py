"""What following provenance costs a forget: the same forget with and without derived entries.

    python bench/bench_forget_derived.py [--turns 10000] [--forget 500] [--postgres]

Two stores are filled alike: one session of ``--turns`` turns (plus 200 short sessions around it),
``--forget`` of them tagged ``batch``. One store also holds derived entries, as consolidation
writes them: a summary for every 25 turns, citing them in ``metadata.source_turns``. Then
``forget(tags=["batch"])`` runs on each, and the figure is the ratio of the two times, measured in
the same run: what finding (and forgetting) the derived entries adds to the forget itself. With
``--postgres`` the same runs on a PostgreSQL server started here, as the tests start it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from engine_targets import fresh_schema  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

from harness_mem.store import MemoryStore  # noqa: E402

PER_SUMMARY = 25


def fill(target: str, turns: int, forgotten: int, *, derived: bool) -> None:
    with MemoryStore(target, embedder=None) as store:
        store.add_many([{"id": f"t{i}", "content": f"turn number {i} about the weekly deploy", "role": "user",
                         "session": "big", "tags": ["batch"] if i < forgotten else []} for i in range(turns)])
        for k in range(200):
            store.add_many([{"content": f"short session {k} turn {i}", "role": "user", "session": f"s{k}"}
                            for i in range(20)])
        if derived:
            store.add_many([{"id": f"summary-{j}", "content": f"summary {j} of the weekly deploy", "kind": "summary",
                             "source": "consolidation", "session": "big",
                             "metadata": {"source_turns": [f"t{i}" for i in range(j, min(j + PER_SUMMARY, turns))]}}
                            for j in range(0, turns, PER_SUMMARY)])


def timed_forget(target: str) -> tuple[float, int]:
    with MemoryStore(target, embedder=None) as store:
        started = time.perf_counter()
        count = store.forget(tags=["batch"])
        return time.perf_counter() - started, count


def measure(engine: str, targets: tuple[str, str], turns: int, forgotten: int) -> None:
    plain, derived = targets
    fill(plain, turns, forgotten, derived=False)
    fill(derived, turns, forgotten, derived=True)
    plain_s, plain_n = timed_forget(plain)
    derived_s, derived_n = timed_forget(derived)
    print(f"{engine}: forget {plain_n} turns {plain_s:.3f} s; with the {derived_n - plain_n} summaries citing them"
          f" {derived_s:.3f} s; ratio {derived_s / plain_s:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--forget", type=int, default=500)
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        measure("sqlite", (f"{scratch}/plain.db", f"{scratch}/derived.db"), args.turns, args.forget)
    if args.postgres:
        with PostgresServer() as server:
            measure("postgresql", (fresh_schema(server), fresh_schema(server)), args.turns, args.forget)


if __name__ == "__main__":
    main()
