"""Which plain statements become facts, and whether corrections replace them (issue #35).

Run from the repository root::

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_facts.py            # both sets, a table
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_facts.py --misses   # and every case it gets wrong
    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_facts.py --json

Two hand-written sets in ``bench/data`` (written for this project, several speakers, chats and
coding sessions alike), each consolidated without a model through :func:`consolidate`, as
``harness-mem consolidate`` does, in keyword-only files (vectors play no part in what is kept):

- ``statements.jsonl``: one sentence or turn each, said by ``who`` to ``to`` on 4 March 2026, in a
  session of its own (the listener greets first, so the session has its two people). ``keep`` lists
  the facts it should give, each as words that must all appear in one fact (the speaker's name among
  them); an empty ``keep`` is a non-statement — a question, greeting, thanks, reaction, hypothetical,
  figure of speech, something said about the listener, an instruction for now — that must give none.
  **Recall**: the statements with a fact holding their words. **Precision**: the facts written that
  hold the words of one the case expects (a fact from a non-statement, or one that says something
  else, is false).
- ``statements_check.jsonl``: the same, written after the rules and never tuned on.
- ``corrections.jsonl``: a speaker's turns over several sessions, one a day apart or more, the last
  correcting the first in some phrasing. **Current**: after consolidating, a current fact (not
  superseded) says ``new`` and none says ``old`` (as phrases: "is vegetarian" is not in "is not
  vegetarian"). **As of**: ``recall(old, kind="fact", as_of=…)``
  on the day between the first and the last turn answers with a fact saying ``old``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness_mem import MemoryStore
from harness_mem.experience import consolidate

DATA = Path(__file__).parent / "data"
#: ``statements`` is the set the rules were written against; ``statements_check`` was written after
#: them, by the same hand but never tuned on: the gap between the two is the honest part.
STATEMENT_SETS = ("statements", "statements_check")
SAID_ON = datetime(2026, 3, 4, 10, 0, tzinfo=UTC)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def words(text: str) -> list[str]:
    return re.findall(r"[\w'’.-]+", text.lower())


def holds(fact: str, spec: str) -> bool:
    """Every word of ``spec`` is in ``fact`` (as a word, or the start of one: "live" in "lives")."""
    said = [w.strip(".") for w in words(fact)]
    return all(any(w.startswith(want.strip(".")) for w in said) for want in words(spec))


@dataclass
class Scored:
    cases: int = 0
    expected: int = 0
    found: int = 0
    facts: int = 0
    true_facts: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        return self.found / self.expected if self.expected else 1.0

    @property
    def precision(self) -> float:
        return self.true_facts / self.facts if self.facts else 1.0


def current_facts(store: MemoryStore) -> list[str]:
    return [e.content for e in store.list(kind="fact") if e.superseded_by is None]


def says(fact: str, phrase: str) -> bool:
    """``phrase`` is in ``fact`` as written (a correction's values: "is vegetarian" is not in "is not
    vegetarian")."""
    return phrase.lower() in fact.lower()


def statements_set(scratch: Path, cases: list[dict[str, Any]]) -> Scored:
    scored = Scored()
    scratch.mkdir(exist_ok=True)
    for n, case in enumerate(cases):
        # A namespace each: the same speaker in two cases must not correct the other's facts.
        with MemoryStore(scratch / "statements.db", embedder=None, namespace=f"case-{n}") as store:
            store.add(f"Hi {case['who']}!", kind="turn", role=case["to"], session="s", created_at=SAID_ON, id="s:0")
            store.add(case["text"], kind="turn", role=case["who"], session="s",
                      created_at=SAID_ON + timedelta(seconds=1), id="s:1")
            consolidate(store)
            facts = current_facts(store)
        keep = case["keep"]
        scored.cases += 1
        scored.expected += len(keep)
        found = [spec for spec in keep if any(holds(f, spec) for f in facts)]
        scored.found += len(found)
        true = [f for f in facts if any(holds(f, spec) for spec in keep)]
        scored.facts += len(facts)
        scored.true_facts += len(true)
        if len(found) < len(keep) or len(true) < len(facts):
            scored.misses.append({"text": case["text"], "who": case["who"], "keep": keep, "facts": facts})
    return scored


@dataclass
class Corrected:
    cases: int = 0
    current: int = 0
    as_of: int = 0
    misses: list[dict[str, Any]] = field(default_factory=list)


def corrections_set(scratch: Path, cases: list[dict[str, Any]]) -> Corrected:
    scored = Corrected()
    for n, case in enumerate(cases):
        with MemoryStore(scratch / f"correction-{n}.db", embedder=None) as store:
            days = [datetime.fromisoformat(day).replace(hour=10, tzinfo=UTC) for day, _ in case["turns"]]
            for i, ((_, text), when) in enumerate(zip(case["turns"], days, strict=True)):
                session = f"s{i}"
                store.add(f"Hi {case['who']}!", kind="turn", role=case["to"], session=session, created_at=when,
                          id=f"{session}:0")
                store.add(text, kind="turn", role=case["who"], session=session,
                          created_at=when + timedelta(seconds=1), id=f"{session}:1")
            consolidate(store)
            facts = current_facts(store)
            now_right = any(says(f, case["new"]) for f in facts) and not any(says(f, case["old"]) for f in facts)
            between = days[-2] + (days[-1] - days[-2]) / 2
            then = store.recall(case["old"], 1, kind="fact", as_of=between)
            then_right = bool(then) and says(then[0].entry.content, case["old"])
            scored.cases += 1
            scored.current += now_right
            scored.as_of += then_right
            if not (now_right and then_right):
                history = [(e.content, e.superseded_by is None) for e in store.list(kind="fact", include_superseded=True)]
                scored.misses.append({"turns": case["turns"], "old": case["old"], "new": case["new"],
                                      "current": now_right, "as_of": then_right, "facts": history})
    return scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="folder with statements.jsonl and corrections.jsonl")
    parser.add_argument("--misses", action="store_true", help="print every case it gets wrong")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-facts-") as scratch:
        said = {name: statements_set(Path(scratch) / name, read_jsonl(args.data / f"{name}.jsonl"))
                for name in STATEMENT_SETS}
        corrected = corrections_set(Path(scratch), read_jsonl(args.data / "corrections.jsonl"))
    result: dict[str, Any] = {
        name: {"cases": scored.cases, "expected": scored.expected, "recall": round(scored.recall, 3),
               "facts": scored.facts, "precision": round(scored.precision, 3)} for name, scored in said.items()
    }
    result["corrections"] = {"cases": corrected.cases, "current": corrected.current, "as_of": corrected.as_of}
    if args.json:
        misses = {name: scored.misses for name, scored in said.items()}
        json.dump({**result, "misses": {**misses, "corrections": corrected.misses}}, sys.stdout, indent=1)
        print()
        return
    print("| set | cases | measure | value |\n|---|---:|---|---:|")
    for name in STATEMENT_SETS:
        s = result[name]
        print(f"| {name} | {s['cases']} | recall (facts kept of {s['expected']} expected) | {s['recall']:.3f} |")
        print(f"| {name} | {s['cases']} | precision ({s['facts']} facts written) | {s['precision']:.3f} |")
    print(f"| corrections | {corrected.cases} | current fact is the new one | {corrected.current}/{corrected.cases} |")
    print(f"| corrections | {corrected.cases} | as_of before answers the old one | {corrected.as_of}/{corrected.cases} |")
    if args.misses:
        for miss in [m for scored in said.values() for m in scored.misses]:
            print(f"\n{miss['who']}: {miss['text']}\n  expected {miss['keep']}\n  got      {miss['facts']}")
        for miss in corrected.misses:
            print(f"\n{miss['turns']}\n  old {miss['old']!r} new {miss['new']!r} current ok: {miss['current']}"
                  f" as_of ok: {miss['as_of']}\n  facts {miss['facts']}")


if __name__ == "__main__":
    main()
