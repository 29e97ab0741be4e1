"""What a person's turns' sentences cost a store: import time, vectors, bytes, recall latency (issue #35).

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/bench_turn_sentences.py
    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/bench_turn_sentences.py --corpus lme-user --questions 10 --rounds 3

The same real turns (``bench_recall.py``'s corpora: LoCoMo dev's 2,760 turns, or the user turns of
the first ``--questions`` LongMemEval dev haystacks) are imported into a new SQLite file through the
public API with the built-in model (no vector cache: every text is embedded), once with the turns'
sentences as passages (``passages.AGENT_ROLES`` as shipped) and once without (as if every speaker
were the agent), the two sides taking turns for ``--rounds`` rounds so they meet the same load; the
best import time of each is kept, and its CPU time (every thread of this process: steadier than the
wall clock on a shared machine). Printed for each side: import seconds and turns/s, the vectors
stored per turn (its own and its passages), the file's bytes per turn, and hybrid recall's p50 / p95
latency over the corpus's questions (each within its conversation or haystack, the question's
vector given, as ``bench_recall.py`` asks), and the ratios of with to without. ``--engine
postgresql`` does the same in a schema of its own per import on a server started here (as the tests
start it); its bytes are the schema's tables and indexes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the server helper the tests use
from bench_recall import DEFAULT_DATA, TURN_SENTENCES, Corpus, load_corpus  # noqa: E402
from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore, passages  # noqa: E402
from harness_mem.providers.embeddings import MiniLMEmbedder  # noqa: E402

SIDES = ("people", "none")  # with the turns' sentences (as shipped), without


def rows(store: MemoryStore, query: str) -> list[tuple[Any, ...]]:
    if store.storage.engine == "postgresql":
        return store.storage.query(query)  # type: ignore[attr-defined, no-any-return]
    return list(store.db.execute(query).fetchall())


def stored_bytes(store: MemoryStore, target: str) -> int:
    """The file's bytes (and its log's), or on PostgreSQL its schema's tables with their indexes."""
    if store.storage.engine == "postgresql":
        return int(rows(store, "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c JOIN pg_namespace n"
                               " ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'")[0][0])
    return sum(Path(f"{target}{suffix}").stat().st_size for suffix in ("", "-wal") if Path(f"{target}{suffix}").exists())


def build_once(corpus: Corpus, embedder: MiniLMEmbedder, side: str, target: str) -> dict[str, Any]:
    """Import the corpus into a new store at ``target`` with ``side``'s sentence rule; its time,
    size and recall latency."""
    passages.AGENT_ROLES = TURN_SENTENCES[side]
    with MemoryStore(target, embedder=embedder, redactor=None) as store:
        started, cpu = time.perf_counter(), time.process_time()
        corpus.build(store)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        turns = int(rows(store, "SELECT count(*) FROM entries")[0][0])
        if store.storage.engine == "postgresql":
            stored = rows(store, "SELECT count(*), count(*) FILTER (WHERE sentence) FROM entry_passages")[0]
        elif rows(store, "SELECT 1 FROM sqlite_master WHERE name = 'entries_passages'"):
            stored = rows(store, "SELECT count(*), coalesce(sum(sentence), 0) FROM entries_passages")[0]
        else:  # short turns and no sentences: no passages' table
            stored = (0, 0)
        size = stored_bytes(store, target)
        vectors = store.embed_queries([q.text for q in corpus.questions])
        store.recall("warm up", k=10, mode="hybrid")
        latencies = []
        for q, vector in zip(corpus.questions, vectors, strict=True):
            t0 = time.perf_counter()
            store.recall(q.text, k=corpus.depth, mode="hybrid", session_prefix=q.prefix, query_vector=vector)
            latencies.append((time.perf_counter() - t0) * 1000)
    latencies.sort()
    return {"seconds": seconds, "cpu": cpu, "turns": turns, "passages": int(stored[0]), "sentences": int(stored[1]), "bytes": size,
            "p50": statistics.median(latencies), "p95": latencies[int(0.95 * (len(latencies) - 1))]}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", choices=("locomo-turns", "lme-user"),
                        help="repeatable (default: both)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder of locomo-dev and longmemeval-dev")
    parser.add_argument("--questions", type=int, default=10, help="LongMemEval: the first N haystacks (default: 10)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both sides, best kept (default: 2)")
    parser.add_argument("--engine", choices=("sqlite", "postgresql"), default="sqlite")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.engine == "postgresql":
        with PostgresServer() as server:
            return run(args, lambda _: fresh_schema(server))
    with tempfile.TemporaryDirectory() as scratch:
        return run(args, lambda side: fresh_file(Path(scratch) / f"{side}.db"))


def fresh_schema(server: PostgresServer) -> str:
    schema = f"b_{uuid.uuid4().hex[:12]}"
    with server.connect() as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return f"{server.dsn}?options=-csearch_path%3D{schema},public"


def fresh_file(path: Path) -> str:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return str(path)


def run(args: argparse.Namespace, target: Callable[[str], str]) -> int:
    embedder = MiniLMEmbedder(threads=2)
    embedder.embed(["warm up"])
    print("| corpus | sentences | import | its CPU | turns/s | vectors a turn | bytes a turn | hybrid p50 / p95 ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.corpus or ["locomo-turns", "lme-user"]:
        corpus = load_corpus(name, args.data, args.questions)
        best: dict[str, dict[str, Any]] = {}
        for _ in range(args.rounds):
            for side in SIDES:
                found = build_once(corpus, embedder, side, target(side))
                print(f"  {name} {side}: {found['seconds']:.1f}s ({found['cpu']:.1f}s CPU), recall p50 {found['p50']:.1f} ms",
                      file=sys.stderr, flush=True)
                kept = best.get(side, found)
                best[side] = {**found, **{key: min(found[key], kept[key]) for key in ("seconds", "cpu", "p50", "p95")}}
        for side in SIDES:
            b = best[side]
            print(f"| {name} | {'with' if side == 'people' else 'without'} | {b['seconds']:.1f} s | {b['cpu']:.1f} s"
                  f" | {b['turns'] / b['seconds']:.0f} | {1 + b['passages'] / b['turns']:.2f}"
                  f" ({b['sentences'] / b['turns']:.2f} sentences) | {b['bytes'] / b['turns']:,.0f}"
                  f" | {b['p50']:.1f} / {b['p95']:.1f} |")
        w, wo = best["people"], best["none"]
        print(f"| {name} | with ÷ without | {w['seconds'] / wo['seconds']:.2f}× | {w['cpu'] / wo['cpu']:.2f}× | | "
              f"{(1 + w['passages'] / w['turns']) / (1 + wo['passages'] / wo['turns']):.2f}× |"
              f" {w['bytes'] / wo['bytes']:.2f}× | {w['p50'] / wo['p50']:.2f}× / {w['p95'] / wo['p95']:.2f}× |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
