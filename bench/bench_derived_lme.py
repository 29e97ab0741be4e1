"""Whether what consolidation keeps answers LongMemEval's questions about the user (issue #35).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_derived_lme.py             # keyword-only files (~2 min)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_derived_lme.py --hybrid    # with the model (cached vectors)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_derived_lme.py --half a    # one half of the questions
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_derived_lme.py --show single-session-preference  # read them
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_derived_lme.py --type single-session-preference  # one type (~2 min)

``--hybrid`` embeds with the built-in model (int8 MiniLM, as ``bench_recall.py`` does, so the turn
vectors it cached are read back, not recomputed) and caches every vector it computes, the derived
entries' and their sentences' too, under ``--cache``: a second run embeds nothing new but what
changed. Progress goes to stderr. The questions split in two halves by a hash of their id
(``--half a`` / ``--half b``): a change is chosen on one and reported on the other and on all; a run
over all prints both halves' rows.

The questions of LongMemEval_S dev (read at run time from ``--data``, never copied) whose answer is
something the user said about themselves: ``single-session-user``, ``single-session-preference`` and
``knowledge-update`` (abstention questions skipped). Each question's haystack (both roles, ~490
turns) is stored under the session prefix ``"<question id>:"`` in one file and consolidated without
a model, as ``harness-mem consolidate`` does. Then, per question, within its haystack:

- **derived top 5**: ``recall(question, 5, derived=True)`` — the facts and summaries alone, a
  summary ranked with the turns it cites (:mod:`harness_mem.sourced`); beside it the same ranked by
  their own words alone;
- **turns top 5**: ``recall(question, 5)`` — the raw turns, as before consolidating.

A list *answers* when one of its entries holds the answer: every content word of a short answer (up
to four), or 60% of a longer one's. MRR is over the first entry that holds it. Preference answers
are rubrics ("The user would prefer suggestions that …"), which no stored text holds word for word:
for them the column that counts is **from an evidence session** (an entry of the top 5 comes from a
session the answer was stated in; for a derived entry, the session it was derived from), shown for
every type. For knowledge-update questions the answer is the current value; which older value it
replaced is not labelled, so "the current value above the old" is read off MRR (the current
value's rank).
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from bench_consolidate import own_words_only  # noqa: E402
from bench_recall import DEFAULT_CACHE, CachedEmbedder, haystack_turns  # noqa: E402

from harness_mem import MemoryStore  # noqa: E402
from harness_mem.experience import consolidate  # noqa: E402
from harness_mem.experience.statements import content_words  # noqa: E402
from harness_mem.models import has_visible_text  # noqa: E402
from harness_mem.providers.embeddings import DEFAULT_QUANTIZATION, FLAG_NAMES  # noqa: E402

# Derived entries as recall ranks them (a summary with its sources), by their own words alone, raw turns.
LANES = ("derived", "own", "turns")
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
TYPES = ("single-session-user", "single-session-preference", "knowledge-update")
K = 5
HALVES = ("a", "b")


def half_of(question_id: str) -> str:
    """Which half a question is in: fixed by its id, independent of the answers."""
    return HALVES[hashlib.sha1(question_id.encode()).digest()[0] % 2]


def answer_words(answer: str) -> list[str]:
    """The words an entry must hold to hold the answer ("We've met up twice." → met, twice)."""
    words = [w for w in content_words(answer) if "'" not in w]
    return list(dict.fromkeys(words)) or [w.lower() for w in re.findall(r"\w+", answer)]


def holds(text: str, wanted: list[str]) -> bool:
    said = set(content_words(text)) | {w.lower() for w in re.findall(r"\w+", text)}
    found = sum(w in said for w in wanted)
    return found == len(wanted) if len(wanted) <= 4 else found >= 0.6 * len(wanted)


def first_answering(texts: list[str], wanted: list[str]) -> int | None:
    return next((rank for rank, text in enumerate(texts, start=1) if holds(text, wanted)), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the folder of longmemeval-dev")
    parser.add_argument("--hybrid", action="store_true", help="store vectors (all-MiniLM-L6-v2, cached) and recall hybrid")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="vector cache for --hybrid")
    parser.add_argument("--embedder", choices=["minilm-int8s", "minilm-int8", "minilm"], default=FLAG_NAMES[DEFAULT_QUANTIZATION],
                        help="the model for --hybrid (default: %(default)s, the built-in one)")
    parser.add_argument("--half", choices=HALVES, help="only the questions of this half")
    parser.add_argument("--type", choices=TYPES, action="append", dest="types",
                        help="only the questions of this type (repeatable; default: all three)")
    parser.add_argument("--show", choices=TYPES, help="print, for each question of this type, what consolidation"
                        " kept of the sessions the answer was said in and what ranks top 5 instead (stderr)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    with gzip.open(args.data / "longmemeval-dev" / "longmemeval_s_dev.json.gz", "rt", encoding="utf-8") as f:
        records = [r for r in json.load(f) if r["question_type"] in (args.types or TYPES)
                   and not r["question_id"].endswith("_abs")
                   and args.half in (None, half_of(r["question_id"]))]
    embedder = CachedEmbedder(args.cache, threads=2, name=args.embedder) if args.hybrid else None
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-derived-lme-") as scratch, \
            MemoryStore(Path(scratch) / "lme.db", embedder=embedder, redactor=None) as store:  # type: ignore[arg-type]
        items = [{"id": f"{r['question_id']}:{sid}:{n}", "content": turn["content"], "role": turn["role"],
                  "session": f"{r['question_id']}:{sid}", "created_at": when}
                 for r in records for sid, n, when, turn in haystack_turns(r)
                 if has_visible_text(turn["content"])]  # a few haystack turns are empty: a store refuses those
        started = time.perf_counter()
        store.add_many(items, batch_size=2000)
        print(f"stored {len(items):,} turns of {len(records)} haystacks in {time.perf_counter() - started:.0f} s",
              file=sys.stderr)
        started = time.perf_counter()
        report = consolidate(store, progress=lambda done, total, _: done % 200 == 0 and print(
            f"  consolidated {done:,}/{total:,} sessions ({time.perf_counter() - started:.0f} s)", file=sys.stderr))
        print(f"consolidated in {time.perf_counter() - started:.0f} s: {report.summary()}", file=sys.stderr)
        turns = len(items)
        for r in records:
            prefix = f"{r['question_id']}:"
            wanted = answer_words(str(r["answer"]))
            evidence = {f"{prefix}{sid}" for sid in r["answer_session_ids"]}
            derived = store.recall(r["question"], K, derived=True, session_prefix=prefix)
            with own_words_only():
                own = store.recall(r["question"], K, derived=True, session_prefix=prefix)
            plain = store.recall(r["question"], K, session_prefix=prefix)
            if args.show == r["question_type"]:
                show(store, r, evidence, derived, plain)
            rows.append({"type": r["question_type"], "half": half_of(r["question_id"]), "answer": r["answer"], "question": r["question"],
                         **{lane: first_answering([h.entry.content for h in hits], wanted)
                            for lane, hits in (("derived", derived), ("own", own), ("turns", plain))},
                         **{f"{lane}_session": any(h.entry.session in evidence for h in hits)
                            for lane, hits in (("derived", derived), ("own", own), ("turns", plain))},
                         "derived_top": [h.entry.content for h in derived[:1]]})
        derived_count = store.count(kind="fact", derived=True) + store.count(kind="summary", derived=True)
    if embedder is not None:
        embedder.flush()
        print(f"embedded {embedder.embedded:,} texts not cached before in {embedder.seconds:.0f} s", file=sys.stderr)
    result: dict[str, Any] = {"questions": len(rows), "turns": turns, "derived_entries": derived_count,
                              "mode": "hybrid" if args.hybrid else "keyword", "by_type": {}}
    groups = {kind: [row for row in rows if kind in ("all", row["type"])] for kind in (*TYPES, "all")}
    if args.half is None:
        groups |= {f"all, half {half}": [row for row in rows if row["half"] == half] for half in HALVES}
    for kind, picked in groups.items():
        if not picked:  # a small run may hold no question of a type, or none in a half
            continue
        result["by_type"][kind] = {
            "n": len(picked),
            **{f"{lane}_at_5": sum(row[lane] is not None for row in picked) / len(picked) for lane in LANES},
            **{f"{lane}_mrr": sum(1 / row[lane] for row in picked if row[lane]) / len(picked) for lane in LANES},
            **{f"{lane}_session": sum(row[f"{lane}_session"] for row in picked) / len(picked) for lane in LANES},
        }
    if args.json:
        json.dump({**result, "rows": rows}, sys.stdout, indent=1)
        print()
        print(table(result), file=sys.stderr)  # for the reader of the log
        return
    print(table(result))


def show(store: MemoryStore, record: dict[str, Any], evidence: set[str], derived: list[Any], plain: list[Any]) -> None:
    """What an agent would read: the derived entries of the evidence sessions, then both top 5s
    (``*``: from an evidence session)."""
    say = functools.partial(print, file=sys.stderr)
    say(f"\n=== {record['question_id']} (half {half_of(record['question_id'])}): {record['question']}")
    say(f"    answer: {str(record['answer'])[:300]}")
    for session in sorted(evidence):
        say(f"  kept of {session}:")
        for entry in store.list(session=session, derived=True):
            say(f"    [{entry.kind}] {entry.content[:300]}")
    for lane, hits in (("derived top 5", derived), ("raw turns top 5", plain)):
        say(f"  {lane}:")
        for h in hits:
            mark = "*" if h.entry.session in evidence else " "
            say(f"   {mark} {h.score:.3f} [{h.entry.kind if h.entry.kind != 'turn' else h.entry.role}]"
                f" {h.entry.content[:200]!r}")


def table(result: dict[str, Any]) -> str:
    """The figures as a Markdown table, a row per question type (and per half)."""
    lines = [f"LongMemEval dev, {result['questions']} questions about the user, {result['turns']:,} turns,"
             f" {result['derived_entries']:,} derived entries ({result['mode']})\n",
             "| question type | n | derived top 5 holds the answer | MRR | from an evidence session |"
             " … ranked by their own words alone | MRR | from an evidence session |"
             " raw turns top 5 holds it | MRR | from an evidence session |",
             "|---|---:|" + "---:|" * 3 * len(LANES)]
    for kind, s in result["by_type"].items():
        lines.append(f"| {kind} | {s['n']} | " + " | ".join(
            f"{s[f'{lane}_at_5']:.3f} | {s[f'{lane}_mrr']:.3f} | {s[f'{lane}_session']:.3f}" for lane in LANES) + " |")
    return "\n".join(lines)

if __name__ == "__main__":
    main()
