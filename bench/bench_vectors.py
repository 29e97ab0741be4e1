"""Semantic and hybrid recall at scale, embedding throughput, and chromadb side by side.

    python bench/bench_vectors.py                 # 100k entries (embeds them once, then caches)
    python bench/bench_vectors.py --n 20000 --no-chroma --json

Everything is measured in one run on the same vectors, so the ratios hold on a noisy machine:
- embedding throughput: ``MemoryStore.add_many`` of M texts with the real model (rows, FTS, vectors,
  all of it) vs the raw model's ``encode(batch_size=64)`` of the same texts;
- semantic recall at N entries: the store's search (a sign-bit shortlist, rescored by vec0 from the
  stored int8 vectors) vs an exact brute-force vec0 KNN over the same vectors at full precision
  (float32, in a scratch file built by this run; it is also the truth for top-10 agreement), and vs
  a brute-force vec0 KNN over the stored int8 vectors;
- a filtered semantic query (one session of N/50 entries) vs the unfiltered one;
- hybrid latency with the query embedding excluded vs the sum of keyword and semantic latencies;
- bytes on disk of the whole store file (entries, keyword index, vectors);
- chromadb (embedded, persistent, cosine HNSW) given the same vectors: insert throughput, query
  latency, top-10 agreement with exact search, bytes on disk.

The N texts are synthetic (bench_store's sentence generator); their embeddings are computed with the
real model once and cached in ``--cache`` (default ``bench/results/``), keyed by N and the model.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_store import make_queries, make_rows, percentile  # noqa: E402

from harness_mem.db import connect, write_transaction  # noqa: E402
from harness_mem.providers.embeddings import MiniLMEmbedder  # noqa: E402
from harness_mem.store import MemoryStore  # noqa: E402

T = TypeVar("T")


class CachedEmbedder:
    """The real model's identity, answering from precomputed vectors (the store cannot tell)."""

    def __init__(self, model: MiniLMEmbedder, table: dict[str, npt.NDArray[np.float32]]) -> None:
        self.model, self.table = model, table
        self.name, self.dim, self.fingerprint = model.name, model.dim, model.fingerprint

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        missing = [t for t in texts if t not in self.table]
        if missing:
            for text, vector in zip(missing, self.model.embed(missing), strict=True):
                self.table[text] = vector
        return np.stack([self.table[t] for t in texts]) if texts else np.zeros((0, self.dim), np.float32)


def embed_corpus(model: MiniLMEmbedder, texts: list[str], cache: Path) -> npt.NDArray[np.float32]:
    tag = f"-{model.recipe.tag}" if model.recipe is not None else ""  # an int8 model's vectors are its own
    path = cache / f"vectors-{len(texts)}-{model.fingerprint.split(':')[1][:12]}{tag}.npy"
    if path.exists():
        return np.load(path)
    cache.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    vectors = model.embed(texts)
    print(f"  (embedded {len(texts):,} texts in {time.perf_counter() - started:.0f} s; cached in {path})",
          file=sys.stderr)
    np.save(path, vectors)
    return vectors


def float_knn_table(path: Path, vectors: npt.NDArray[np.float32]) -> Callable[[npt.NDArray[np.float32], int], list[int]]:
    """The exact reference: a brute-force vec0 KNN over the float32 vectors (row i = vectors[i])."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path).conn
    conn.execute(f"CREATE VIRTUAL TABLE exact USING vec0(embedding float[{vectors.shape[1]}] distance_metric=cosine)")
    with write_transaction(conn):
        conn.executemany("INSERT INTO exact (rowid, embedding) VALUES (?, ?)",
                         ((i, v.tobytes()) for i, v in enumerate(vectors)))

    def knn(query: npt.NDArray[np.float32], k: int) -> list[int]:
        rows = conn.execute("SELECT rowid FROM exact WHERE embedding MATCH ? AND k = ?",
                            (query.astype(np.float32).tobytes(), k)).fetchall()
        return [int(r[0]) for r in rows]

    return knn


def timed(fn: Callable[[], object]) -> float:
    return timed_call(fn)[0]


def timed_call(fn: Callable[[], T]) -> tuple[float, T]:
    """(milliseconds, result) of one call."""
    started = time.perf_counter()
    value = fn()
    return (time.perf_counter() - started) * 1000, value


def summary(samples: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(samples), 3), "p95": round(percentile(samples, 0.95), 3)}


def agreement(found: list[int], exact: list[int]) -> float:
    return len(set(found) & set(exact)) / max(1, len(exact))


def embedding_throughput(model: MiniLMEmbedder, texts: list[str]) -> dict[str, float]:
    model.embed(texts[:64])  # warm up
    # The raw model: sentence-transformers' own encode (batch 64), the reference runtime.
    reference = MiniLMEmbedder(runtime="torch")
    reference.embed(texts[:64])
    raw_seconds = timed(lambda: reference.embed(texts)) / 1000
    with tempfile.TemporaryDirectory() as tmp, MemoryStore(Path(tmp) / "t.db", embedder=model) as store:
        items = [{"text": t, "role": "user", "session": "s"} for t in texts]
        ours_seconds = timed(lambda: store.add_many(items)) / 1000
    return {
        "texts": len(texts),
        "raw_texts_per_s": round(len(texts) / raw_seconds, 1),
        "ours_texts_per_s": round(len(texts) / ours_seconds, 1),
        "ratio": round(raw_seconds / ours_seconds, 3),
    }


def chroma_side(vectors: npt.NDArray[np.float32], queries: npt.NDArray[np.float32],
                exact: list[list[int]], k: int) -> dict[str, object]:
    try:
        import chromadb
    except ImportError:
        return {"skipped": "chromadb is not installed (pip install --group bench)"}
    tmp = Path(tempfile.mkdtemp())
    try:
        client = chromadb.PersistentClient(path=str(tmp / "chroma"))
        collection = client.create_collection("bench", metadata={"hnsw:space": "cosine"})
        ids = [str(i + 1) for i in range(len(vectors))]
        batch = client.get_max_batch_size()
        started = time.perf_counter()
        for start in range(0, len(vectors), batch):
            collection.add(ids=ids[start:start + batch], embeddings=vectors[start:start + batch])
        insert_seconds = time.perf_counter() - started
        latencies, agree = [], []
        for q, truth in zip(queries, exact, strict=True):
            started = time.perf_counter()
            result = collection.query(query_embeddings=[q], n_results=k)
            latencies.append((time.perf_counter() - started) * 1000)
            agree.append(agreement([int(i) for i in result["ids"][0]], truth))
        disk = sum(p.stat().st_size for p in (tmp / "chroma").rglob("*") if p.is_file())
        return {"insert_per_s": round(len(vectors) / insert_seconds), "query_ms": summary(latencies),
                "top10_agreement": round(float(np.mean(agree)), 4), "bytes_on_disk": disk}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000, help="entries in the store")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--throughput-texts", type=int, default=2000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--no-chroma", action="store_true")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    model = MiniLMEmbedder()
    rows = make_rows(args.n)
    texts = [f"{r['role']}: {r['text']}" for r in rows]  # what the store embeds for a turn
    result: dict[str, object] = {"entries": args.n}
    result["embedding_throughput"] = embedding_throughput(model, [str(r["text"]) for r in rows[: args.throughput_texts]])

    vectors = embed_corpus(model, texts, args.cache)
    query_texts = make_queries(args.queries, seed=23)
    query_vectors = model.embed(query_texts)
    embedder = CachedEmbedder(model, dict(zip(texts, vectors, strict=True)))

    # One session of n/50 entries for the filtered query (every 50th row; the texts are unchanged).
    big_session = "bench-session-big"
    for row in rows[::50]:
        row["session"] = big_session

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "v.db"
        exact_table = float_knn_table(Path(tmp) / "exact" / "exact.db", vectors)
        with MemoryStore(path, embedder=embedder) as store:  # type: ignore[arg-type]
            embedder.embed(texts[:1])  # the model is loaded; inserts below time the store alone
            insert_seconds = timed(lambda: store.add_many(rows, batch_size=5000)) / 1000
            store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            bytes_on_disk = sum(p.stat().st_size for p in Path(tmp).iterdir() if p.is_file())
            index = store.storage.vector_index()
            assert index is not None
            first_ms = timed(lambda: index.search(query_vectors[0], args.k, store.namespace))  # loads the bits
            pk_of = dict(store.db.execute("SELECT id, pk FROM entries").fetchall())
            pks = np.asarray([pk_of[str(r["id"])] for r in rows], dtype=np.int64)
            fast, exact, exact8, filtered, semantic, keyword, hybrid, agree, agree8 = ([] for _ in range(9))
            truths: list[list[int]] = []
            for text, vector in zip(query_texts, query_vectors, strict=True):
                exact_ms, exact_hits = timed_call(lambda v=vector: exact_table(v, args.k))
                exact8_ms, exact8_hits = timed_call(lambda v=vector: index.exact_knn(v, args.k, store.namespace))
                fast_ms, found = timed_call(lambda v=vector: index.search(v, args.k, store.namespace))
                exact.append(exact_ms)
                exact8.append(exact8_ms)
                fast.append(fast_ms)
                truths.append([int(pks[i]) for i in exact_hits])
                agree.append(agreement([pk for pk, _ in found], truths[-1]))
                agree8.append(agreement([pk for pk, _ in exact8_hits], truths[-1]))
                filtered.append(timed(lambda t=text, v=vector: store.recall(
                    t, args.k, "semantic", session=big_session, query_vector=v)))
                semantic.append(timed(lambda t=text, v=vector: store.recall(t, args.k, "semantic", query_vector=v)))
                keyword.append(timed(lambda t=text: store.recall(t, args.k, "keyword")))
                hybrid.append(timed(lambda t=text, v=vector: store.recall(t, args.k, "hybrid", query_vector=v)))
        result["semantic"] = {
            "exact_vec0_knn_ms": summary(exact),
            "exact_vec0_int8_knn_ms": summary(exact8),
            "prefilter_search_ms": summary(fast),
            "first_search_ms": round(first_ms, 1),
            "ratio_p50": round(statistics.median(fast) / statistics.median(exact), 3),
            "top10_agreement": round(float(np.mean(agree)), 4),
            "exact_int8_top10_agreement": round(float(np.mean(agree8)), 4),
            "recall_semantic_ms": summary(semantic),
            "recall_semantic_one_session_ms": summary(filtered),
            "filtered_to_unfiltered_p50": round(statistics.median(filtered) / statistics.median(semantic), 3),
        }
        result["hybrid"] = {
            "keyword_ms": summary(keyword),
            "semantic_ms": summary(semantic),
            "hybrid_ms": summary(hybrid),
            "ratio_to_sum_p50": round(statistics.median(hybrid) / (statistics.median(keyword) + statistics.median(semantic)), 3),
        }
        result["ours_bytes_on_disk"] = bytes_on_disk
        result["ours_insert_per_s"] = round(args.n / insert_seconds)
    if not args.no_chroma:
        result["chromadb"] = chroma_side(vectors, query_vectors, truths, args.k)

    if args.json:
        print(json.dumps(result))
        return
    t, s, h = result["embedding_throughput"], result["semantic"], result["hybrid"]
    print(f"harness-mem vector benchmark — {args.n:,} entries, {args.queries} queries, k={args.k}")
    print(f"  embedding throughput  raw encode(batch 64) {t['raw_texts_per_s']}/s   add_many {t['ours_texts_per_s']}/s"
          f"   ours/raw = {t['ratio']:.2f}   (goal ≥ 0.80)")
    print(f"  semantic  exact vec0 KNN (float32) p50 {s['exact_vec0_knn_ms']['p50']:.2f} ms   shortlist+vec0 rescore p50"
          f" {s['prefilter_search_ms']['p50']:.2f} ms   ratio {s['ratio_p50']:.3f} (goal ≤ 0.10)"
          f"   top-10 agreement {s['top10_agreement']:.3f} (goal ≥ 0.95)")
    print(f"            exact vec0 KNN over the stored int8 p50 {s['exact_vec0_int8_knn_ms']['p50']:.2f} ms"
          f" (agreement {s['exact_int8_top10_agreement']:.3f});  first search in a process {s['first_search_ms']:.1f} ms")
    print(f"            recall(mode=semantic) p50 {s['recall_semantic_ms']['p50']:.2f} ms p95 {s['recall_semantic_ms']['p95']:.2f} ms;"
          f" one session of {args.n // 50:,} p50 {s['recall_semantic_one_session_ms']['p50']:.2f} ms"
          f" = {s['filtered_to_unfiltered_p50']:.2f}× (goal ≤ 1.00)")
    print(f"  hybrid    keyword p50 {h['keyword_ms']['p50']:.2f} ms + semantic {h['semantic_ms']['p50']:.2f} ms;"
          f" hybrid {h['hybrid_ms']['p50']:.2f} ms = {h['ratio_to_sum_p50']:.2f}× the sum (goal ≤ 1.20)")
    print(f"  ours      insert {result['ours_insert_per_s']:,}/s (rows + FTS + vectors, embeddings given)"
          f"   disk {result['ours_bytes_on_disk'] / 1e6:.1f} MB")
    chroma = result.get("chromadb")
    if isinstance(chroma, dict) and "skipped" not in chroma:
        print(f"  chromadb  insert {chroma['insert_per_s']:,}/s   query p50 {chroma['query_ms']['p50']:.2f} ms"
              f"   top-10 agreement {chroma['top10_agreement']:.3f}   disk {chroma['bytes_on_disk'] / 1e6:.1f} MB")
    elif chroma:
        print(f"  chromadb  {chroma['skipped']}")


if __name__ == "__main__":
    main()
