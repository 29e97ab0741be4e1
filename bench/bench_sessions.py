"""Session search: does ``recall_sessions`` find the conversation, and what does it cost?

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_sessions.py             # LoCoMo dev + 100k turns
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_sessions.py --n 20000 --json

- Quality, on LoCoMo dev (read at run time from ``--data``, never copied into the project): each
  question is asked within its conversation (``session_prefix``). Session recall@1 and @5: the
  session holding the evidence is the first, or among the first five, that ``recall_sessions``
  ranks. Turn recall@10: the share of evidence turns among the top 10 hits, and with ``context=1``
  counting the turns shown around each hit as found too.
- Cost, at N turns in N/50 sessions (bench_store's corpus, vectors from bench_vectors' cache):
  ``recall_sessions`` p50 against a turn-level hybrid ``recall`` p50, same queries, interleaved,
  the query embedding excluded from both (warmed into recall's query cache first).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_embedder import big_store  # noqa: E402
from bench_store import make_queries  # noqa: E402

from harness_mem.providers.embeddings import MiniLMEmbedder  # noqa: E402
from harness_mem.store import MemoryStore  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def locomo_store(data: Path, cache: Path) -> Path:
    path = cache / "locomo-dev-sessions.db"
    if path.exists():
        return path
    rows = [json.loads(line) for line in (data / "locomo_turns.jsonl").open()]
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    with MemoryStore(partial, embedder=MiniLMEmbedder(), redactor=None) as store:
        store.add_many({"id": r["id"], "text": r["text"], "role": r["role"], "session": r["session"],
                        "created_at": r["ts_iso"] + "Z"} for r in rows)
    partial.rename(path)
    return path


def quality(data: Path, cache: Path) -> dict[str, object]:
    queries = [json.loads(line) for line in (data / "locomo_queries.jsonl").open()]
    turns = {json.loads(line)["id"]: json.loads(line)["session"] for line in (data / "locomo_turns.jsonl").open()}
    scores: dict[str, list[float]] = defaultdict(list)
    by_category: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with MemoryStore(locomo_store(data, cache), embedder=MiniLMEmbedder()) as store:
        for q in queries:
            evidence = [e for e in q["evidence"] if e in turns]
            if not evidence:
                continue
            scope = q["conversation"] + ":"
            wanted_sessions = {turns[e] for e in evidence}
            ranked = [s.session for s in store.recall_sessions(q["question"], k=5, session_prefix=scope, context=0)]
            hits = store.recall(q["question"], k=10, session_prefix=scope, context=1)
            top = {h.entry.id for h in hits}
            shown = top | {c.id for h in hits for c in h.context or ()}
            found = {
                "session_r@1": float(bool(ranked[:1]) and ranked[0] in wanted_sessions),
                "session_r@5": float(bool(wanted_sessions & set(ranked[:5]))),
                "turn_r@10": len(top & set(evidence)) / len(evidence),
                "turn_r@10_context1": len(shown & set(evidence)) / len(evidence),
            }
            for name, value in found.items():
                scores[name].append(value)
                by_category[q["category_name"]][name].append(value)
    return {
        "questions": len(scores["session_r@1"]),
        "all": {name: round(statistics.mean(v), 3) for name, v in scores.items()},
        "by_category": {c: {name: round(statistics.mean(v), 3) for name, v in found.items()}
                        for c, found in sorted(by_category.items())},
    }


def cost(n: int, queries: int, cache: Path) -> dict[str, object]:
    with MemoryStore(big_store(cache, n), embedder=MiniLMEmbedder()) as store:
        texts = make_queries(queries, seed=41)
        for text in texts:  # embed once: both sides then read the query cache
            store.recall(text, k=10)
        turn_ms: list[float] = []
        session_ms: list[float] = []
        for text in texts:
            started = time.perf_counter()
            store.recall(text, k=10)
            turn_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            store.recall_sessions(text, k=5)
            session_ms.append((time.perf_counter() - started) * 1000)
        sessions = store.db.execute("SELECT count(DISTINCT session) FROM entries").fetchone()[0]
    turn, session = statistics.median(turn_ms), statistics.median(session_ms)
    return {"entries": n, "sessions": sessions, "queries": queries, "turn_recall_p50_ms": round(turn, 2),
            "recall_sessions_p50_ms": round(session, 2), "ratio": round(session / turn, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "locomo-dev")
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--cache", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    result = {"quality": quality(args.data, args.cache), "cost": cost(args.n, args.queries, args.cache)}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    q, c = result["quality"], result["cost"]
    print(f"LoCoMo dev, {q['questions']} questions (within their conversation):")  # type: ignore[index]
    for name, value in q["all"].items():  # type: ignore[index]
        print(f"  {name:<22} {value:.3f}")
    print(f"{c['entries']:,} turns in {c['sessions']:,} sessions: recall_sessions p50 {c['recall_sessions_p50_ms']} ms,"  # type: ignore[index]
          f" turn recall p50 {c['turn_recall_p50_ms']} ms, ratio {c['ratio']} (goal ≤ 2)")  # type: ignore[index]


if __name__ == "__main__":
    main()
