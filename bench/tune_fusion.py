"""Choose fusion constants honestly: on one half of the questions of every corpus, reported on the other.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_recall.py --dump /tmp/recall-dump   # the candidates
    .venv/bin/python bench/tune_fusion.py /tmp/recall-dump

``bench_recall.py --dump`` records, for every hybrid query, the candidates ``fusion.fuse`` was given
(keyword BM25, cosine, speaker and session of each) and the evidence. This replays
``harness_mem.fusion.fuse`` itself on them with other constants (patched on the module), so a
figure here is what the store would answer with those constants, without rebuilding any store.

Honesty, as bench/tune_hybrid.py's leave-one-out: the questions of each corpus are split by a hash
of their id into two halves; each setting of the grid is scored on the *tuning* half by the mean over
corpora of R@10 (no corpus switches: one setting for all), the best is chosen there, and the table
reports the *held-out* half, beside the shipped constants on the same half. Then the roles swap, so
both halves are reported held-out.

``--against-keyword`` holds hybrid to its own keyword lane (the candidates ordered by BM25 alone,
which is what keyword mode answers): each setting of a wider grid (the cosine's noise floor and the
keyword's share for a question that gathers too) is scored on the tuning half by its *worst* margin over that lane, over every corpus and every
measure (R@5, R@10, MRR@10), so the setting chosen is the one least below keyword anywhere, not the
one best on average; the held-out half is reported beside the keyword lane and the shipped constants.

``--losses CORPUS`` lists the questions of that corpus where hybrid ranks the first right entry lower
than its keyword lane: the question, both ranks, the weights and the cosine's noise floor, and every
entry hybrid put above the right one with its BM25 and cosine (``*``: evidence).

``--ceiling`` asks the opposite question: the best each corpus reaches over a wider grid (the
speaker prior too) when the constants are chosen *on the very questions they are scored on*, per
corpus and per measure. No honest recipe of these two signals does better, so a goal above it
needs another signal (a reranker, a better model), not other constants.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import pickle
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from harness_mem import fusion

GRID: dict[str, Sequence[float]] = {
    "KEYWORD_WEIGHT": (0.2, 0.3, 0.45),
    "KEYWORD_SPREAD": (0.0, 1.0, 2.0, 4.0, 8.0),
    "COSINE_SPREAD": (0.0, 0.05, 0.1, 0.2),
    "SESSION_PRIOR": (0.25, 0.5),
}


@contextmanager
def constants(setting: dict[str, float]) -> Iterator[None]:
    """fusion's module constants set to ``setting`` (a spread of 0: that signal always fully counts)."""
    saved = {name: getattr(fusion, name) for name in setting}
    try:
        for name, value in setting.items():
            setattr(fusion, name, value if value > 0 or not name.endswith("_SPREAD") else 1e-12)
        yield
    finally:
        for name, value in saved.items():
            setattr(fusion, name, value)


def load(folder: Path) -> dict[str, list[dict[str, Any]]]:
    corpora = {}
    for path in sorted(folder.glob("*.pkl")):
        if path.stem.endswith("-hits"):  # the hits' score features, for bench/calibrate_scores.py
            continue
        with path.open("rb") as f:
            rows = pickle.load(f)
        for row in rows:
            ids = [c[0] for c in row["candidates"]]
            row["pk_to_id"] = dict(enumerate(ids))
            row["fusable"] = [fusion.Candidate(i, kw, cos, named, session)
                              for i, (_, kw, cos, named, session) in enumerate(row["candidates"])]
            row["half"] = hashlib.sha1(row["qid"].encode()).digest()[0] % 2
            row["gathering"] = fusion.gathers(row["question"])
        corpora[path.stem] = [row for row in rows if row["evidence"]]
    return corpora


def keyword_lane(row: dict[str, Any]) -> list[str]:
    """The candidates in keyword mode's order: BM25 alone, the entries that match."""
    matched = sorted((c for c in row["fusable"] if c.keyword > 0), key=lambda c: (-c.keyword, c.pk))
    return [row["pk_to_id"][c.pk] for c in matched[:10]]


def fused(row: dict[str, Any]) -> list[str]:
    return [row["pk_to_id"][pk] for pk, _ in fusion.fuse(row["fusable"], 10, gathering=row["gathering"])]


def measure(rows: list[dict[str, Any]], ranker: Any = fused) -> tuple[float, float, float]:
    r5, r10, mrr = [], [], []
    for row in rows:
        ranked = ranker(row)
        evidence = set(row["evidence"])
        r5.append(len(evidence & set(ranked[:5])) / len(evidence))
        r10.append(len(evidence & set(ranked)) / len(evidence))
        first = next((i for i, e in enumerate(ranked, start=1) if e in evidence), None)
        mrr.append(1 / first if first else 0.0)
    return float(np.mean(r5)), float(np.mean(r10)), float(np.mean(mrr))


CEILING_GRID: dict[str, Sequence[float]] = {
    "KEYWORD_WEIGHT": (0.1, 0.2, 0.3, 0.4, 0.5, 0.6),
    "SPEAKER_PRIOR": (0.0, 0.1, 0.2, 0.4),
    "SESSION_PRIOR": (0.0, 0.25, 0.5, 1.0),
    "KEYWORD_SPREAD": (0.0, 4.0, 8.0, 16.0),
    "COSINE_SPREAD": (0.0, 0.1, 0.2, 0.4),
}


def ceiling(corpora: dict[str, list[dict[str, Any]]]) -> None:
    """Per corpus, the best R@5, R@10 and MRR@10 of any CEILING_GRID setting, chosen on the same questions."""
    best: dict[str, list[tuple[float, dict[str, float]]]] = {name: [(0.0, {})] * 3 for name in corpora}
    for values in itertools.product(*CEILING_GRID.values()):
        setting = dict(zip(CEILING_GRID, values, strict=True))
        with constants(setting):
            for name, rows in corpora.items():
                for i, figure in enumerate(measure(rows)):
                    if figure > best[name][i][0]:
                        best[name][i] = (figure, setting)
    print("| corpus | best R@5 | best R@10 | best MRR@10 | (each chosen on the questions it is scored on) |")
    print("|---|---|---|---|---|")
    for name, found in best.items():
        cells = " | ".join(f"{figure:.3f}" for figure, _ in found)
        chosen = "; ".join(", ".join(f"{k.lower()} {v:g}" for k, v in setting.items()) for _, setting in found)
        print(f"| {name} | {cells} | {chosen} |", flush=True)


AGAINST_KEYWORD_GRID: dict[str, Sequence[float]] = {
    "KEYWORD_WEIGHT": (0.3, 0.4),
    "KEYWORD_SPREAD": (8.0, 16.0),
    "COSINE_FLOOR": (0.0, 0.25, 0.5),
    "GATHERING_KEYWORD_WEIGHT": (0.3, 0.4, 0.5, 0.6, 0.7),
}


def against_keyword(corpora: dict[str, list[dict[str, Any]]]) -> None:
    """Choose on one half the setting whose worst margin over the keyword lane is largest; report the other."""
    shipped = {name: getattr(fusion, name) for name in AGAINST_KEYWORD_GRID}
    settings = [dict(zip(AGAINST_KEYWORD_GRID, values, strict=True))
                for values in itertools.product(*AGAINST_KEYWORD_GRID.values())]
    print("| held-out half | ranking | " + " | ".join(corpora) + " | worst margin over keyword |")
    print("|---|---|" + "---|" * len(corpora) + "---|")
    for held in (0, 1):
        tuning = {name: [r for r in rows if r["half"] != held] for name, rows in corpora.items()}
        testing = {name: [r for r in rows if r["half"] == held] for name, rows in corpora.items()}
        lanes = {half: {name: measure(rows, keyword_lane) for name, rows in part.items()}
                 for half, part in (("tuning", tuning), ("testing", testing))}

        def margins(part: dict[str, list[dict[str, Any]]], lane: dict[str, tuple[float, float, float]]
                    ) -> tuple[float, float]:
            figures = {name: measure(rows) for name, rows in part.items()}
            gaps = [h - k for name in part for h, k in zip(figures[name], lane[name], strict=True)]
            return min(gaps), float(np.mean(gaps))

        def objective(setting: dict[str, float], tuning: dict[str, list[dict[str, Any]]] = tuning,
                      lane: dict[str, tuple[float, float, float]] = lanes["tuning"]) -> tuple[float, float]:
            with constants(setting):
                return margins(tuning, lane)

        chosen = max(settings, key=objective)
        cells = ["{:.3f} / {:.3f} / {:.3f}".format(*lanes["testing"][name]) for name in corpora]
        print(f"| {held} | keyword lane | " + " | ".join(cells) + " | |")
        for label, setting in (("shipped", shipped), ("chosen", chosen)):
            with constants(setting):
                cells = ["{:.3f} / {:.3f} / {:.3f}".format(*measure(rows)) for rows in testing.values()]
                worst, _ = margins(testing, lanes["testing"])
            text = ", ".join(f"{k.lower()} {v:g}" for k, v in setting.items())
            print(f"| {held} | {label}: {text} | " + " | ".join(cells) + f" | {worst:+.3f} |", flush=True)


def first_right(ranked: list[str], evidence: set[str]) -> int | None:
    return next((rank for rank, entry in enumerate(ranked, start=1) if entry in evidence), None)


def losses(rows: list[dict[str, Any]]) -> None:
    """Each question hybrid ranks below its keyword lane (the rank of the first right entry), and
    what it put above that entry."""
    for row in rows:
        lane, hybrid, evidence = keyword_lane(row), fused(row), set(row["evidence"])
        by_lane, by_hybrid = first_right(lane, evidence), first_right(hybrid, evidence)
        if (by_hybrid or len(hybrid) + 1) <= (by_lane or len(lane) + 1):
            continue
        candidates = {row["pk_to_id"][c.pk]: c for c in row["fusable"]}
        keyword_weight, _ = fusion.weights(row["fusable"], gathering=row["gathering"])
        floor = fusion.noise_floor([c.cosine for c in row["fusable"]])
        print(f"\n[half {row['half']}] {row['category']}: {row['question']}\n  keyword rank {by_lane},"
              f" hybrid rank {by_hybrid}; keyword weight {keyword_weight:.2f}, cosine floor {floor or 0:.3f}"
              f"{', gathers' if row['gathering'] else ''}")
        for rank, entry in enumerate(hybrid[:by_hybrid or len(hybrid)], start=1):
            c = candidates[entry]
            print(f"  {'*' if entry in evidence else ' '} {rank:2d}. keyword rank"
                  f" {lane.index(entry) + 1 if entry in lane else '-':>2} bm25 {c.keyword:6.2f}"
                  f" cosine {c.cosine:.3f} session {c.session} {entry}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=Path, help="the folder bench_recall.py --dump wrote")
    parser.add_argument("--ceiling", action="store_true", help="the best any setting reaches, chosen on the test questions")
    parser.add_argument("--against-keyword", action="store_true",
                        help="choose the setting least below the keyword lane anywhere (on one half; the other reported)")
    parser.add_argument("--losses", metavar="CORPUS",
                        help="list the questions of this corpus where hybrid ranks the right entry below keyword")
    args = parser.parse_args(argv)
    corpora = load(args.dump)
    if not corpora:
        parser.error(f"no *.pkl in {args.dump}")
    if args.losses:
        if args.losses not in corpora:
            parser.error(f"no {args.losses}.pkl in {args.dump} (there: {', '.join(corpora)})")
        losses(corpora[args.losses])
        return 0
    if args.ceiling:
        ceiling(corpora)
        return 0
    if args.against_keyword:
        against_keyword(corpora)
        return 0
    shipped = {name: getattr(fusion, name) for name in GRID}
    # The recipe before the adaptive weights: fixed 0.3 / 0.7 whatever the scores (spread 0).
    original = {"KEYWORD_WEIGHT": 0.3, "KEYWORD_SPREAD": 0.0, "COSINE_SPREAD": 0.0, "SESSION_PRIOR": 0.5}
    settings = [dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())]
    print("| held-out half | constants (chosen on the other half) | " + " | ".join(corpora) + " |")
    print("|---|---|" + "---|" * len(corpora))
    for held in (0, 1):
        tuning = {name: [r for r in rows if r["half"] != held] for name, rows in corpora.items()}
        testing = {name: [r for r in rows if r["half"] == held] for name, rows in corpora.items()}

        def objective(setting: dict[str, float], tuning: dict[str, list[dict[str, Any]]] = tuning) -> float:
            with constants(setting):
                return float(np.mean([measure(rows)[1] for rows in tuning.values()]))

        chosen = max(settings, key=objective)
        for label, setting in (("fixed weights", original), ("shipped", shipped), ("chosen", chosen)):
            with constants(setting):
                cells = ["{:.3f} / {:.3f} / {:.3f}".format(*measure(rows)) for rows in testing.values()]
            text = ", ".join(f"{k.lower()} {v:g}" for k, v in setting.items())
            print(f"| {held} | {label}: {text} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
