"""How long entries should be matched by meaning: the first window, pooled windows, or best-of.

On LongMemEval dev with both roles (``bench_recall.py``'s corpus, vectors from its cache), each
question's turns are ranked by cosine in numpy, every turn's later windows made as the product makes
them (``MiniLMEmbedder.passages``), and scored:

- ``first``: the first window only (what the model reads of a text; recall before passages);
- ``mean``: the windows' vectors averaged;
- ``best-of +m``: the first window's cosine, or a later window's less the margin ``m`` when higher
  (``harness_mem.passages``; the product's margin is PASSAGE_MARGIN).

Reported: semantic R@5 / R@10, and hybrid R@5 / R@10 with each question's keyword candidates from a
``bench_recall.py --dump`` (its recorded BM25s, fused by ``fusion.fuse``). Then the **needle** test:
for each question with a user evidence turn, that turn's text is put in the middle of an unrelated
long assistant reply from another question's history, which replaces the evidence turn; the rank of
that reply by meaning is reported (top 5 / 10 / 50).

    python bench/bench_recall.py --dump /tmp/recall-dump      # once: keyword candidates, the cache
    python bench/bench_passages.py --dump /tmp/recall-dump
"""

from __future__ import annotations

import argparse
import pickle
import random
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_recall  # noqa: E402

from harness_mem import fusion  # noqa: E402
from harness_mem.passages import PASSAGE_MARGIN  # noqa: E402

Vector = npt.NDArray[np.float32]
Scorer = Callable[[Vector, Vector, Vector, Vector], float]  # (query, first, mean, later windows) -> score


def scorers() -> dict[str, Scorer]:
    found: dict[str, Scorer] = {"first": lambda q, first, mean, later: float(first @ q),
                                "mean": lambda q, first, mean, later: float(mean @ q)}
    for margin in sorted({0.0, 0.03, PASSAGE_MARGIN, 0.1}):
        found[f"best-of +{margin:g}"] = (
            lambda m: lambda q, first, mean, later: max(float(first @ q), float((later @ q).max()) - m)
            if len(later) else float(first @ q))(margin)
    return found


def windows(embedder: bench_recall.CachedEmbedder, text: str) -> tuple[Vector, Vector, Vector]:
    """(first, mean, later windows) of a text, embedded as the product does."""
    spans = embedder.passages(text)
    vectors = embedder.embed([text] + [text[a:b] for a, b in spans])
    mean = vectors.sum(0)  # windows are of one length but the last: weighed alike
    return vectors[0], mean / np.linalg.norm(mean), vectors[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dump", type=Path, required=True, help="a bench_recall.py --dump folder")
    parser.add_argument("--data", type=Path, default=bench_recall.DEFAULT_DATA)
    parser.add_argument("--cache", type=Path, default=bench_recall.DEFAULT_CACHE)
    args = parser.parse_args()
    corpus = bench_recall.longmemeval(args.data, ("user", "assistant"), None)
    embedder = bench_recall.CachedEmbedder(args.cache, 2)
    ids = [entry_id for entry_id, _, _ in corpus.bare]
    session = {entry_id: s for entry_id, s, _ in corpus.bare}
    text_of = dict(zip(ids, corpus.embedded_texts, strict=True))
    bench_recall.log(f"{len(ids):,} turns: embedding their windows (cached)")
    parts = {entry_id: windows(embedder, text_of[entry_id]) for entry_id in ids}
    candidates = {r["qid"]: r["candidates"] for r in pickle.load((args.dump / "lme-all.pkl").open("rb"))}
    queries = embedder.embed([q.text for q in corpus.questions])
    methods = scorers()

    def recall_at(ranked: list[str], evidence: set[str], k: int) -> float:
        return len(set(ranked[:k]) & evidence) / len(evidence)

    table: dict[str, list[list[float]]] = {name: [] for name in methods}
    needles: dict[str, list[int]] = {name: [] for name in methods}
    long_replies = [i for i in ids if text_of[i].startswith("assistant: ") and 2 <= len(parts[i][2]) <= 3]
    rng = random.Random(3)
    for q, vector in zip(corpus.questions, queries, strict=True):
        pool = [i for i in ids if i.startswith(q.prefix)]
        keyword = {c[0]: c[1] for c in candidates.get(q.qid, [])}
        for name, score in methods.items():
            scored = {i: score(vector, *parts[i]) for i in pool}
            ranked = sorted(pool, key=lambda i: -scored[i])
            fused_candidates = list(dict.fromkeys([*keyword, *ranked[:fusion.CANDIDATES]]))
            fused = fusion.fuse([fusion.Candidate(n, keyword.get(i, 0.0), scored[i], False, session[i])
                                 for n, i in enumerate(fused_candidates)], 10, gathering=fusion.gathers(q.text))
            hybrid = [fused_candidates[n] for n, _ in fused]
            if q.evidence:
                table[name].append([recall_at(ranked, set(q.evidence), 5), recall_at(ranked, set(q.evidence), 10),
                                    recall_at(hybrid, set(q.evidence), 5), recall_at(hybrid, set(q.evidence), 10)])
        said = [e for e in sorted(q.evidence) if text_of[e].startswith("user: ")]
        if not said:
            continue
        reply = next(i for i in rng.sample(long_replies, min(50, len(long_replies))) if not i.startswith(q.prefix))
        body = text_of[reply].removeprefix("assistant: ")
        cut = body.find(". ", len(body) // 2)
        cut = cut + 2 if cut > 0 else len(body) // 2
        needle = windows(embedder, f"assistant: {body[:cut]}{text_of[said[0]].removeprefix('user: ')} {body[cut:]}")
        others = [i for i in pool if i != said[0]]
        for name, score in methods.items():
            mine = score(vector, *needle)
            needles[name].append(sum(score(vector, *parts[i]) > mine for i in others))
    print(f"LongMemEval dev, both roles ({len(table['first'])} questions with evidence turns);"
          f" needle: {len(needles['first'])} questions")
    print("| matching | semantic R@5 | R@10 | hybrid R@5 | R@10 | needle in top 5 | 10 | 50 |")
    print("|---|---|---|---|---|---|---|---|")
    for name in methods:
        s5, s10, h5, h10 = np.mean(table[name], axis=0)
        ranks = np.array(needles[name])
        print(f"| {name} | {s5:.3f} | {s10:.3f} | {h5:.3f} | {h10:.3f} | {np.mean(ranks < 5):.3f}"
              f" | {np.mean(ranks < 10):.3f} | {np.mean(ranks < 50):.3f} |")


if __name__ == "__main__":
    main()
