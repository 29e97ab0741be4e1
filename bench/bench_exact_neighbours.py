"""Which of each question's exact ten nearest neighbours the engines miss, and by how much.

    python bench/bench_exact_neighbours.py --keep /work/cache/exact --scale 200000 --questions 100
    python bench/bench_exact_neighbours.py --keep /work/cache/exact --scale 200000 --ef-search 600,1000
    python bench/bench_exact_neighbours.py --keep /work/cache/exact --scale 200000 --index m=16,ef_construction=128
    python bench/bench_exact_neighbours.py --keep /work/cache/exact --scale 200000 --simulate 1000000

Reads the stores ``bench_postgres.py --scale N --keep DIR`` built (DIR/scale-N: the SQLite file and the
PostgreSQL data directory) and the corpus's float32 vectors (the bench's synthetic embedder again, over
the same generated turns; cached beside the store as ``.float32.npy``), then for each question:

- the exact float32 top 10 (numpy, cosine), and the exact top 10 over each engine's stored precision
  (int8 scaled per vector for SQLite, halfvec for PostgreSQL): a miss that the stored precision's
  own exact top 10 also makes is a near-tie, not a search miss;
- SQLite's vector search (the sign-bit shortlist rescored in int8, with the rows near the cut and
  without: ``NEAR_CUT_ROWS`` 0, interleaved, timed) and PostgreSQL's bare HNSW query
  at each ``--ef-search`` (as the store sets it: iterative scan, relaxed order);
- for every exact neighbour a search missed: how far its cosine is above the 11th exact neighbour's
  (a gap below the storage's error, ~1e-3 halfvec, ~6e-4 int8, is a tie the storage cannot order);
- how crowded the cut is: rows within 0.01 / 0.02 of the 10th neighbour's cosine; and whether the
  synthetic filler is unrealistically dense: the real MiniLM vectors of filler texts it is drawn
  around against as many synthetic filler vectors, how near the questions and each other.

``--simulate N`` builds no store: SQLite's search over N entries of the same corpus, its sign bits'
cache in memory, shortlist and rows near the cut chosen by the store's own functions, rescored in
numpy (for a scale too large to build here; the kept folder gives the cached question vectors).

``--index m=M,ef_construction=E`` rebuilds the kept server's HNSW index with those parameters first
(timed, with the server's maintenance_work_mem or ``--build-memory``; copy the kept folder before:
the index stays rebuilt).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the server helper the tests use

from postgres_server import PostgresServer  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402

Floats = npt.NDArray[np.float32]
# A cosine difference the stores cannot be trusted to order: halfvec moves a cosine by up to ~1e-3.
TIE = 1e-3


def corpus_vectors(folder: Path, n: int, data: Path) -> tuple[list[str], Floats, Floats]:
    """The corpus's entry ids, float32 vectors (as the store embedded them; cached beside the store)
    and the real MiniLM vectors of filler texts the synthetic ones were drawn around."""
    from bench_scale import DEFAULT_SEED, generate, planted_turns, vector_embedder

    from harness_mem.passages import embedding_text

    db = folder / f"scale-{n}.db"
    cache, ids_cache = Path(f"{db}.float32.npy"), Path(f"{db}.ids.json")
    embedder = vector_embedder(db, DEFAULT_SEED, data)
    real = unit(embedder.centred + embedder.mean)  # the anchors: real MiniLM vectors of filler texts
    if cache.exists() and ids_cache.exists():
        return json.loads(ids_cache.read_text(encoding="utf-8")), np.load(cache), real
    turns = list(generate(n, DEFAULT_SEED, planted=planted_turns(data)))
    vectors = embedder.embed([embedding_text(t["text"], t.get("role")) for t in turns])
    ids = [t["id"] for t in turns]
    np.save(cache, vectors)
    ids_cache.write_text(json.dumps(ids), encoding="utf-8")
    return ids, vectors, real


def unit(vectors: npt.NDArray[np.floating]) -> Floats:
    as_float = vectors.astype(np.float32)
    return as_float / np.linalg.norm(as_float, axis=1, keepdims=True)  # type: ignore[no-any-return]


def top(cosines: Floats, k: int) -> npt.NDArray[np.intp]:
    """Rows of the k largest cosines, best first."""
    part = np.argpartition(-cosines, k)[:k]
    return part[np.argsort(-cosines[part], kind="stable")]  # type: ignore[no-any-return]


def crowding(queries: Floats, corpus: Floats, k: int = 10) -> tuple[float, float, float]:
    """Median, over the queries, of the 10th neighbour's cosine and of the rows within 0.01 and 0.02 of it."""
    tenth, near1, near2 = [], [], []
    for q in queries:
        c = corpus @ q
        cut = float(np.partition(-c, k - 1)[k - 1]) * -1
        tenth.append(cut)
        near1.append(int(((c >= cut - 0.01) & (c < cut)).sum()))
        near2.append(int(((c >= cut - 0.02) & (c < cut)).sum()))
    return float(np.median(tenth)), float(np.median(near1)), float(np.median(near2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keep", type=Path, required=True, help="the folder bench_postgres.py --keep built")
    parser.add_argument("--scale", type=int, default=200_000)
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev")
    parser.add_argument("--ef-search", default="600", help="comma-separated hnsw.ef_search values to walk at")
    parser.add_argument("--index", help="rebuild the HNSW index first: m=M,ef_construction=E")
    parser.add_argument("--build-memory", help="with --index: maintenance_work_mem for the build (default: the"
                        " server's, as a migration builds it)")
    parser.add_argument("--no-sqlite", action="store_true", help="PostgreSQL only")
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    parser.add_argument("--simulate", type=int, help="no store: SQLite's search over N generated entries, simulated")
    args = parser.parse_args()
    if args.simulate:
        simulate(args.simulate, args.keep / f"scale-{args.scale}", args.data, args.questions)
        return

    from bench_scale import planted_questions, question_vectors

    from harness_mem import vectors as vectors_module
    from harness_mem.vectors import VectorIndex, quantize

    reach = vectors_module.NEAR_CUT_ROWS

    folder = args.keep / f"scale-{args.scale}"
    db = folder / f"scale-{args.scale}.db"
    ids, vectors, real = corpus_vectors(folder, args.scale, args.data)
    questions = planted_questions(args.data)[: args.questions]
    queries = unit(question_vectors(db, questions))
    exact32 = unit(vectors)
    stored = {"int8": unit(quantize(vectors)), "halfvec": unit(vectors.astype(np.float16))}
    row_of = {entry: i for i, entry in enumerate(ids)}

    truth, eleventh, cosines = [], [], []
    stored_truth: dict[str, list[set[int]]] = {name: [] for name in stored}
    for q in queries:
        c = exact32 @ q
        best = top(c, 11)
        truth.append(set(best[:10].tolist()))
        eleventh.append(float(c[best[10]]))
        cosines.append(c)
        for name, corpus in stored.items():
            stored_truth[name].append(set(top(corpus @ q, 10).tolist()))

    found: dict[str, list[set[int]]] = {}
    if not args.no_sqlite:
        embedder = _embedder(db, args.data)
        with MemoryStore(str(db), read_only=True, embedder=embedder) as lite:  # type: ignore[arg-type]
            index = VectorIndex(lite.storage.conn, embedder)  # type: ignore[attr-defined,arg-type]
            pk_row = {int(pk): row_of[entry] for pk, entry in lite.storage.conn.execute(  # type: ignore[attr-defined]
                "SELECT pk, id FROM entries")}
            index.search(queries[0], 10, "default")  # the sign bits' copy read
            # Each question searched with the rows near the cut rescored and without (the shortlist
            # alone, as before), the two interleaved, in turn first.
            ms: dict[str, list[float]] = {"sqlite": [], "sqlite, shortlist alone": []}
            for i, q in enumerate(queries):
                for name in sorted(ms, reverse=bool(i % 2)):
                    vectors_module.NEAR_CUT_ROWS = reach if name == "sqlite" else 0
                    began = time.perf_counter()
                    hits = index.search(q, 10, "default")
                    ms[name].append((time.perf_counter() - began) * 1000)
                    found.setdefault(name, []).append({pk_row[pk] for pk, _ in hits})
            vectors_module.NEAR_CUT_ROWS = reach
            for name, taken in ms.items():
                print(f"{name} search: p50 {sorted(taken)[len(taken) // 2]:.1f} ms,"
                      f" p95 {sorted(taken)[int(len(taken) * 0.95)]:.1f} ms")

    if not args.no_postgres:
        found.update(postgres_searches(folder, args.index, args.build_memory, args.ef_search, queries, row_of))
    report(args.scale, queries, truth, eleventh, cosines, stored_truth, found)
    between_engines(found)
    print("\ncrowding at the cut (median over questions: 10th neighbour's cosine; rows within 0.01, 0.02 below it)")
    tenth, near1, near2 = crowding(queries, exact32)
    print(f"  whole corpus: {tenth:.3f}; {near1:.0f}; {near2:.0f}")
    # Filler alone, real against synthetic at the same count: how near the questions, how near each other.
    synthetic = exact32[[i for i, entry in enumerate(ids) if not entry.startswith("conv-")]]
    count = min(len(real), len(synthetic))  # (a tiny corpus has fewer synthetic rows than anchors)
    chosen = np.random.default_rng(0)
    real = real[chosen.choice(len(real), size=count, replace=False)]
    synthetic = synthetic[chosen.choice(len(synthetic), size=count, replace=False)]
    seen = min(2000, count)
    for name, corpus in ((f"{count:,} real filler texts (the anchors)", real),
                         (f"{count:,} synthetic filler vectors", synthetic)):
        by_question = np.sort(corpus @ queries.T, axis=0)[::-1]
        among = corpus[:seen] @ corpus.T
        among[np.arange(seen), np.arange(seen)] = -1
        print(f"  {name}: nearest to a question {np.median(by_question[0]):.3f}, its 10th {np.median(by_question[9]):.3f};"
              f" a vector's nearest other {np.median(among.max(axis=1)):.3f}")
    planted = np.mean([sum(1 for row in want if ids[row].startswith("conv-")) / 10 for want in truth])
    print(f"  share of the exact top 10 that is planted (real) turns: {planted:.2f}")


def postgres_searches(folder: Path, index: str | None, memory: str | None, ef_search: str, queries: Floats,
                      row_of: dict[str, int]) -> dict[str, list[set[int]]]:
    """The bare HNSW query's answers at each ``ef_search`` (rows of the corpus), the index rebuilt first if asked."""
    from harness_mem.engines.postgres import vector_literal

    found: dict[str, list[set[int]]] = {}
    with PostgresServer(kept=folder / "postgres") as server, server.connect() as raw:
        if index:
            options = dict(part.split("=") for part in index.split(","))
            with_clause = ", ".join(f"{key} = {int(value)}" for key, value in options.items())
            if memory:
                raw.execute("SELECT set_config('maintenance_work_mem', %s, false)", (memory,))
            memory = raw.execute("SHOW maintenance_work_mem").fetchone()[0]
            began = time.perf_counter()
            raw.execute("DROP INDEX IF EXISTS entry_vectors_hnsw")
            raw.execute("CREATE INDEX entry_vectors_hnsw ON entry_vectors USING hnsw"
                        f" (embedding halfvec_cosine_ops) WITH ({with_clause})")
            raw.commit()
            print(f"HNSW index rebuilt WITH ({with_clause}): {time.perf_counter() - began:.0f} s"
                  f" (maintenance_work_mem {memory})")
        definition = raw.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'entry_vectors_hnsw'").fetchone()
        print(f"PostgreSQL index: {definition[0] if definition else None}")
        pk_row = {int(pk): row_of[entry] for pk, entry in raw.execute("SELECT pk, id FROM entries")}
        raw.execute("SET hnsw.iterative_scan = relaxed_order")
        for ef in (int(v) for v in ef_search.split(",")):
            raw.execute(f"SET hnsw.ef_search = {ef}")
            rows, ms = [], []
            for q in queries:
                began = time.perf_counter()
                got = raw.execute("SELECT pk FROM entry_vectors ORDER BY embedding <=> %s::halfvec LIMIT 10",
                                  (vector_literal(q),)).fetchall()
                ms.append((time.perf_counter() - began) * 1000)
                rows.append({pk_row[int(pk)] for (pk,) in got})
            found[f"postgresql ef_search {ef}"] = rows
            print(f"postgresql ef_search {ef}: p50 {sorted(ms)[len(ms) // 2]:.1f} ms")
    return found


def report(scale: int, queries: Floats, truth: list[set[int]], eleventh: list[float], cosines: list[Floats],
           stored_truth: dict[str, list[set[int]]], found: dict[str, list[set[int]]]) -> None:
    print(f"\n{scale:,} entries, {len(queries)} questions; top-10 overlap with the exact float32 top 10\n")
    for name, sets in stored_truth.items():
        print(f"exact over {name}: {np.mean([len(s & t) / 10 for s, t in zip(sets, truth, strict=True)]):.3f}")
    for engine, sets in found.items():
        precision = "int8" if engine.startswith("sqlite") else "halfvec"
        print(f"\n{engine}: {np.mean([len(s & t) / 10 for s, t in zip(sets, truth, strict=True)]):.3f}"
              f" (against exact {precision}: "
              f"{np.mean([len(s & t) / 10 for s, t in zip(sets, stored_truth[precision], strict=True)]):.3f})")
        gaps, ties, search_misses = [], 0, 0
        for i, (got, want) in enumerate(zip(sets, truth, strict=True)):
            for row in want - got:
                gaps.append(float(cosines[i][row]) - eleventh[i])
                if row not in stored_truth[precision][i]:
                    ties += 1  # its own precision's exact top 10 leaves it out too
                else:
                    search_misses += 1
        tolerant = np.mean([len(s & t) + sum(1 for row in t - s if cosines[i][row] - eleventh[i] < TIE) for i, (s, t)
                            in enumerate(zip(sets, truth, strict=True))]) / 10
        print(f"  counting a miss within {TIE} of the 11th exact neighbour's cosine as found: {tolerant:.3f}")
        if gaps:
            g = np.array(gaps)
            print(f"  {len(g)} misses: {ties} left out by the exact {precision} order too (ties), {search_misses} by the"
                  f" search; cosine above the 11th exact neighbour: median {np.median(g):.4f},"
                  f" < 1e-3: {(g < 1e-3).sum()}, < 0.005: {(g < 0.005).sum()}, < 0.01: {(g < 0.01).sum()},"
                  f" max {g.max():.4f}")


def simulate(n: int, folder: Path, data: Path, asked: int) -> None:
    """SQLite's search over ``n`` entries of the same corpus without building the store: the sign bits'
    cache built in memory, the shortlist and the rows near the cut chosen by the store's own code
    (``cache_shortlist``, ``near_the_cut``), the rescoring done in numpy over the int8 vectors vec0
    would hold; against the exact int8 top 10, with the rows each question rescores (vec0 rescores a
    row in about 14 µs at 200,000 entries), and the shortlist alone beside it."""
    from bench_scale import (
        DEFAULT_SEED,
        generate,
        planted_questions,
        planted_turns,
        question_vectors,
        vector_embedder,
    )

    from harness_mem import vectors as vectors_module
    from harness_mem.passages import embedding_text

    db = folder / f"scale-{folder.name.removeprefix('scale-')}.db"  # its cached question and real vectors
    embedder = vector_embedder(db, DEFAULT_SEED, data)
    turns = generate(n, DEFAULT_SEED, planted=planted_turns(data))
    parts = []
    while batch := [embedding_text(t["text"], t.get("role")) for _, t in zip(range(100_000), turns, strict=False)]:
        parts.append(embedder.embed(batch))
    vectors = np.concatenate(parts)
    del parts
    queries = question_vectors(db, planted_questions(data)[:asked])
    cache = vectors_module.NamespaceBits.build(  # the cache the index reads, built here from the bits
        0, np.arange(1, n + 1, dtype=np.int64), vectors_module.pack_signs(vectors).view(np.uint64).T.copy(),
        np.zeros(n, np.int64))
    stored = vectors_module.quantize(vectors)
    del vectors
    norms = np.linalg.norm(stored.astype(np.float32), axis=1)
    shortlist = vectors_module.VectorIndex.shortlist_size(10, n)
    print(f"{n:,} entries (simulated), {len(queries)} questions, a shortlist of {shortlist}")
    for reach in (0, vectors_module.NEAR_CUT_ROWS):
        agreement, rows, ms = [], [], []
        for q in queries:
            query = vectors_module.quantize(q[None, :])[0].astype(np.float32)
            query /= np.linalg.norm(query)
            began = time.perf_counter()
            ranked = vectors_module.cache_shortlist(cache, q, shortlist + reach)
            ms.append((time.perf_counter() - began) * 1000)
            cosines = stored[ranked.positions].astype(np.float32) @ query / norms[ranked.positions]
            chosen = np.arange(min(shortlist, len(cosines)))
            if reach:
                worth = vectors_module.near_the_cut(ranked.distances[:shortlist], cosines[:shortlist].astype(np.float64),
                                                    ranked.distances[shortlist:], 10)
                chosen = np.concatenate([chosen, shortlist + np.flatnonzero(worth)])
            found = set(ranked.positions[chosen[np.argsort(-cosines[chosen], kind="stable")[:10]]].tolist())
            exact: list[tuple[float, int]] = []
            for start in range(0, n, 250_000):
                part = stored[start:start + 250_000].astype(np.float32) @ query / norms[start:start + 250_000]
                exact += [(float(part[i]), start + int(i)) for i in np.argpartition(-part, 10)[:10]]
            agreement.append(len(found & {row for _, row in sorted(exact, reverse=True)[:10]}) / 10)
            rows.append(len(chosen))
        name = "shortlist alone" if not reach else f"rows near the cut (up to {reach}, {vectors_module.NEAR_CUT_SPREADS} spreads)"
        print(f"  {name}: top 10 against the exact int8 one {np.mean(agreement):.3f}; rows rescored mean"
              f" {np.mean(rows):.0f}, p50 {np.median(rows):.0f}, p95 {np.percentile(rows, 95):.0f};"
              f" the shortlist's numpy passes p50 {np.median(ms):.1f} ms")


def between_engines(found: dict[str, list[set[int]]]) -> None:
    """The two engines' top 10 against each other (what bench_postgres.py's overlap measures, for the bare searches)."""
    for name, theirs in found.items():
        if name.startswith("postgresql") and "sqlite" in found:
            print(f"top-10 overlap sqlite / {name}:"
                  f" {np.mean([len(a & b) / 10 for a, b in zip(found['sqlite'], theirs, strict=True)]):.3f}")


def _embedder(db: Path, data: Path) -> object:
    from bench_scale import DEFAULT_SEED, vector_embedder

    return vector_embedder(db, DEFAULT_SEED, data)


if __name__ == "__main__":
    main()
