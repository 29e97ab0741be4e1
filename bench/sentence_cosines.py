"""What hybrid would rank if a turn's cosine were the best of its sentences' (a simulation, issue #35).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_recall.py --mode keyword --mode hybrid --turn-sentences none --dump /tmp/dump
    HF_HUB_OFFLINE=1 .venv/bin/python bench/sentence_cosines.py /tmp/dump --corpus lme-user --cache /work/cache/lme-vec

A whole turn's vector measures its topic; a user who states a fact in passing, inside a request about
something else, reads far from a question about that fact. This embeds every sentence of every
fusion candidate the dump holds (``passages.sentence_spans`` of the text the store embeds, the
speaker first; vectors cached by text under ``--cache``), gives each candidate the better of its
own cosine and its best sentence's less a margin, and replays ``fusion.fuse`` on that, as
``tune_fusion.py`` does. It chose the margin the store now uses (``passages.SENTENCE_MARGIN``, on
half 0) before the store stored a person's turns' sentences; replay it on a dump of a store without
them (``--turn-sentences none``), since the store's own cosines already are the best of them.
Printed: R@5 / R@10 / MRR@10 on each half of the questions (split as ``tune_fusion.py`` splits them)
and on all, beside the keyword lane's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import tune_fusion  # noqa: E402
from bench_recall import DEFAULT_CACHE, DEFAULT_DATA, CachedEmbedder  # noqa: E402

from harness_mem import fusion  # noqa: E402
from harness_mem.passages import AGENT_ROLES, MAX_SENTENCES, embedding_text, sentence_spans  # noqa: E402

CORPORA = ("lme-user", "lme-all", "locomo-turns")
MARGINS = (0.0, 0.06, 0.15)


def texts(corpus: str, data: Path) -> tuple[dict[str, str], set[str]]:
    """Each entry's embedded text (speaker first, as the store embeds it) by id, and the roles stored."""
    if corpus == "locomo-turns":
        rows = [json.loads(line) for line in (data / "locomo-dev" / "locomo_turns.jsonl").read_text().splitlines()]
        return {r["id"]: embedding_text(r["text"], r["role"]) for r in rows}, {r["role"] for r in rows}
    with gzip.open(data / "longmemeval-dev" / "longmemeval_s_dev.json.gz", "rt", encoding="utf-8") as f:
        records = json.load(f)
    found = {}
    for r in records:
        for sid, turns in zip(r["haystack_session_ids"], r["haystack_sessions"], strict=True):
            for n, turn in enumerate(turns):
                found[f"{r['question_id']}:{sid}:{n}"] = embedding_text(turn["content"], turn["role"])
    return found, {"user", "assistant"}


def sentences_of(text: str, *, people_only: bool, cap: int, min_words: int) -> list[str]:
    """The sentences of an embedded text (speaker first) that a variant embeds: none of an agent's
    turn when ``people_only``, the first ``cap``, each of at least ``min_words`` words."""
    if people_only and any(text.startswith(f"{role}: ") for role in AGENT_ROLES):
        return []
    found = [text[a:b] for a, b in sentence_spans(text)][:cap]
    return [sentence for sentence in found if len(sentence.split()) >= min_words]


def sentence_cosines(rows: list[dict[str, Any]], embedded: dict[str, str], roles: set[str],
                     embedder: CachedEmbedder, *, people_only: bool = False, cap: int = MAX_SENTENCES,
                     min_words: int = 0) -> dict[str, dict[str, float]]:
    """Per question, each candidate's best sentence cosine (candidates of one sentence left out)."""
    ids = {row["pk_to_id"][c.pk] for row in rows for c in row["fusable"]}
    sentences = {i: sentences_of(embedded[i], people_only=people_only, cap=cap, min_words=min_words) for i in ids}
    embedder.embed(sorted({s for found in sentences.values() for s in found}))  # one sorted pass, cached
    # The question as recall embeds it: without the speakers it names.
    asked = [fusion.strip_names(row["question"], [r for r in roles if r.lower() in fusion.role_words(row["question"])])
             for row in rows]
    best: dict[str, dict[str, float]] = {}
    for row, vector in zip(rows, embedder.embed(asked), strict=True):
        best[row["qid"]] = {}
        for c in row["fusable"]:
            found = sentences[row["pk_to_id"][c.pk]]
            if found:
                best[row["qid"]][row["pk_to_id"][c.pk]] = float(np.max(embedder.embed(found) @ vector))
    return best


def with_sentences(rows: list[dict[str, Any]], best: dict[str, dict[str, float]], margin: float | None) -> None:
    """Set each row's candidates' cosine to the better of the turn's and its best sentence's less ``margin``
    (None: the turn's own, as stored)."""
    for row in rows:
        original = row.setdefault("original", row["fusable"])
        if margin is None:
            row["fusable"] = original
            continue
        scored = best[row["qid"]]
        row["fusable"] = [fusion.Candidate(c.pk, c.keyword, max(c.cosine, scored.get(row["pk_to_id"][c.pk], -1.0) - margin),
                                           c.named, c.session) for c in original]


def report(rows: list[dict[str, Any]], label: str) -> str:
    cells = []
    for half in (0, 1, None):
        part = [r for r in rows if half is None or r["half"] == half]
        hybrid, lane = tune_fusion.measure(part), tune_fusion.measure(part, tune_fusion.keyword_lane)
        cells.append("{:.3f} / {:.3f} / {:.3f}".format(*hybrid)
                     + " ({:+.3f} / {:+.3f} / {:+.3f})".format(*(h - k for h, k in zip(hybrid, lane, strict=True))))
    return f"| {label} | " + " | ".join(cells) + " |"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dump", type=Path, help="the folder bench_recall.py --dump wrote")
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="repeatable (default: those in the dump)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder of locomo-dev and longmemeval-dev")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="vector cache (default: %(default)s)")
    parser.add_argument("--margin", type=float, action="append", help=f"repeatable (default: {MARGINS})")
    parser.add_argument("--people-only", action="store_true", help="no sentences for an agent's turns (as the store)")
    parser.add_argument("--cap", type=int, default=MAX_SENTENCES, help="sentences a turn at most (default: %(default)s)")
    parser.add_argument("--min-words", type=int, default=0, help="sentences of fewer words left out (default: none)")
    args = parser.parse_args(argv)
    corpora = tune_fusion.load(args.dump)
    embedder = CachedEmbedder(args.cache, 2, "minilm-int8")
    for corpus in args.corpus or [name for name in CORPORA if name in corpora]:
        if corpus not in corpora:
            parser.error(f"no {corpus}.pkl in {args.dump}")
        rows = corpora[corpus]
        embedded, roles = texts(corpus, args.data)
        best = sentence_cosines(rows, embedded, roles, embedder, people_only=args.people_only, cap=args.cap,
                                min_words=args.min_words)
        print(f"\n{corpus}: R@5 / R@10 / MRR@10 (against the keyword lane)\n")
        print("| turn cosine | half 0 | half 1 | all |\n|---|---|---|---|")
        for margin in (None, *(args.margin or MARGINS)):
            with_sentences(rows, best, margin)
            print(report(rows, "the turn's (shipped)" if margin is None else f"best sentence less {margin:g}"), flush=True)
    embedder.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
