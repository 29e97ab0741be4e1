"""Fit the score calibration of harness_mem/scores.py, and report what one threshold keeps and drops.

Reads the hits that ``bench/bench_recall.py --dump DIR`` records: each question's top hits per
mode (id, score, cosine, coverage) with its evidence, and the same question asked of another
conversation of its corpus, which does not hold its answer. For each mode it fits

    relevance = σ(a + b·coverage + c·similarity)        (keyword mode: σ(a + b·coverage))

by logistic regression of **answers against misses**: the evidence hits among a question's top 10
(positive) and the top 10 hits of the question asked where its answer is not (negative), the two
weighing the same within each corpus, and every corpus the same. So 0.5 means "as typical of an
answer as of a hit for a question the store cannot answer". The other hits of a question's own
conversation are not labelled either way (many are about the same thing as the answer): what a
threshold does to them is reported, not fitted.

The questions are split in two halves (by a hash of their id); the fit on one half is reported on
the other, then the fit on all of them (the coefficients for scores.py).

    python bench/bench_recall.py --dump /tmp/recall-dump
    python bench/calibrate_scores.py /tmp/recall-dump
"""

from __future__ import annotations

import argparse
import hashlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from harness_mem import scores

TOP = 10
THRESHOLDS = (0.3, 0.5, 0.7)
# One hit: its features, whether it is evidence, whether it was asked where the answer is not, its question.
Labelled = tuple[list[float], bool, bool, str]


def half(qid: str) -> int:
    return hashlib.sha1(qid.encode()).digest()[0] & 1


def load(folder: Path) -> dict[str, list[dict[str, Any]]]:
    return {p.name.removesuffix("-hits.pkl"): pickle.load(p.open("rb")) for p in sorted(folder.glob("*-hits.pkl"))}


def fit(x: npt.NDArray[np.float64], y: npt.NDArray[np.float64], w: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Weighted logistic regression by Newton's method (a small ridge keeps it finite)."""
    design = np.column_stack([np.ones(len(x)), x])
    beta = np.zeros(design.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(design @ beta)))
        gradient = design.T @ (w * (y - p)) - 1e-3 * beta
        hessian = (design * (w * p * (1 - p))[:, None]).T @ design + 1e-3 * np.eye(len(beta))
        step = np.linalg.solve(hessian, gradient)
        beta += step
        if np.abs(step).max() < 1e-9:
            break
    return beta


def rows(data: dict[str, list[dict[str, Any]]], mode: str, halves: set[int]) -> dict[str, list[Labelled]]:
    """Per corpus, each question's top hits in ``mode`` (questions without an evidence turn are
    scored by session only, and left out)."""
    out: dict[str, list[Labelled]] = {}
    for corpus, questions in data.items():
        for q in questions:
            foreign = bool(q.get("foreign"))
            if q["mode"] != mode or not (q["evidence"] or foreign) or half(q["qid"]) not in halves:
                continue
            evidence = set(q["evidence"])
            for hit_id, _, cosine, covered in q["hits"][:TOP]:
                features = [float(covered)] if mode == "keyword" else [float(covered), float(cosine or 0.0)]
                out.setdefault(corpus, []).append((features, hit_id in evidence, foreign, q["qid"]))
    return out


def fitted(per_corpus: dict[str, list[Labelled]]) -> npt.NDArray[np.float64]:
    xs, ys, ws = [], [], []
    for found in per_corpus.values():
        answers = [f for f, evidence, _, _ in found if evidence]
        misses = [f for f, _, foreign, _ in found if foreign]
        xs += answers + misses
        ys += [1.0] * len(answers) + [0.0] * len(misses)
        ws += [0.5 / len(answers)] * len(answers) + [0.5 / len(misses)] * len(misses)
    return fit(np.array(xs), np.array(ys), np.array(ws) * 1000)


def report(per_corpus: dict[str, list[Labelled]], beta: npt.NDArray[np.float64]) -> None:
    for corpus, found in per_corpus.items():
        by_question: dict[tuple[str, bool], list[tuple[float, bool]]] = {}
        for features, evidence, foreign, qid in found:
            z = beta[0] + float(np.dot(beta[1:], features))
            by_question.setdefault((qid, foreign), []).append((1 / (1 + np.exp(-z)), evidence))
        probabilities, labels, away, tops = [], [], [], []
        for (_, foreign), ranked in by_question.items():  # in rank order: made to fall along it, as recall does
            made = scores.in_order([p for p, _ in ranked])
            probabilities += made
            labels += [e for _, e in ranked]
            away += [foreign] * len(ranked)
            if foreign:
                tops.append(made[0])
        p, y, f = np.array(probabilities), np.array(labels), np.array(away)
        other = ~y & ~f
        print(f"    {corpus:13s} mean score: evidence {p[y].mean():.2f}, other hits {p[other].mean():.2f},"
              f" hits where the answer is not {p[f].mean():.2f} (the top one {np.mean(tops):.2f})")
        for t in THRESHOLDS:
            print(f"      ≥{t}: keeps {np.mean(p[y] >= t):.2f} of the evidence; drops {np.mean(p[f] < t):.2f} of the hits"
                  f" where the answer is not ({np.mean(np.array(tops) < t):.2f} of their top hits)"
                  f" and {np.mean(p[other] < t):.2f} of the other hits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=Path, help="the folder bench_recall.py --dump wrote")
    args = parser.parse_args()
    data = load(args.dump)
    for mode in ("hybrid", "semantic", "keyword"):
        print(f"{mode} hits — a, b (coverage){'' if mode == 'keyword' else ', c (similarity)'}")
        for train, test in (({0}, {1}), ({1}, {0})):
            beta = fitted(rows(data, mode, train))
            print(f"  fitted on half {min(train)}: {np.round(beta, 2).tolist()}; on half {min(test)}:")
            report(rows(data, mode, test), beta)
        beta = fitted(rows(data, mode, {0, 1}))
        print(f"  fitted on all: {np.round(beta, 2).tolist()}")
        report(rows(data, mode, {0, 1}), beta)


if __name__ == "__main__":
    main()
