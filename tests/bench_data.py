"""Tiny stand-ins for the dev sets the bench scripts read from ``../shared/data`` (LoCoMo and
LongMemEval), in their file formats, written fresh for tests/test_bench_scripts.py: the scripts run
on them in seconds wherever the real data is absent. The words are made up here; only the shapes
(file names, fields, id schemes, date formats) follow the real sets, which is what a script that
no longer runs trips on.
"""

from __future__ import annotations

import gzip
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

SPEAKERS = (("Ann", "Ben"), ("Cleo", "Dev"))
TOPICS = ("pottery class", "marathon training", "new puppy", "job interview", "trip to Lisbon", "guitar lessons")
SESSIONS, TURNS = 3, 6  # per conversation; each turn names its session's topic
#: The LongMemEval question types the scripts break their figures down by.
QUESTION_TYPES = ("single-session-user", "single-session-preference", "knowledge-update", "temporal-reasoning")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def write_locomo(folder: Path) -> Path:
    """``folder/locomo-dev`` with every file the scripts read: turns, queries (categories 1-4 and
    the adversarial 5), facts, fact queries, observations."""
    dev = folder / "locomo-dev"
    dev.mkdir(parents=True)
    turns, queries, cat5, facts, fact_queries, observations = [], [], [], [], [], []
    for c, (one, two) in enumerate(SPEAKERS):
        conv = f"conv-{c + 1}"
        seq = 0
        for s in range(1, SESSIONS + 1):
            topic = TOPICS[s - 1]  # the same in each conversation: a question asked of another has hits
            start = datetime(2023, 5, 8 + 7 * s, 13, 56)
            session = f"{conv}:session_{s}"
            ids = []
            for t in range(1, TURNS + 1):
                speaker = one if t % 2 else two
                dia = f"D{s}:{t}"
                when = start + timedelta(minutes=t)
                turns.append({"id": f"{conv}:{dia}", "conversation": conv, "session": session, "role": speaker,
                              "timestamp": f"{when:%-I:%M %p} on {when.day} {when:%B}, {when.year}",
                              "text": f"{speaker} talks about the {topic}, part {t}: it went well on day {s}.",
                              "dia_id": dia, "ts_iso": when.isoformat(), "seq": seq})
                ids.append(f"{conv}:{dia}")
                seq += 1
            fact_id = f"{conv}:S{s}:F1"
            fact = f"{one} started the {topic} in May 2023."
            facts.append({"id": fact_id, "kind": "fact", "session": session, "timestamp": start.isoformat(),
                          "tags": [one], "text": fact})
            observations.append({"id": fact_id, "conversation": conv, "session": session, "speaker": one,
                                 "text": fact, "evidence": ids[:1]})
            for category, name in ((1, "multi-hop"), (2, "temporal"), (3, "open-domain"), (4, "single-hop")):
                qid = f"{conv}:q{len(queries)}"
                question = {"qid": qid, "conversation": conv, "question": f"What did {one} say about the {topic}?",
                            "category": category, "category_name": name, "evidence": [ids[category - 1]],
                            "answer": topic}
                queries.append(question)
                fact_queries.append({**question, "evidence": [fact_id]})
            cat5.append({"qid": f"{conv}:q{100 + s}", "conversation": conv, "category": 5,
                         "question": f"What did {two} say about the {topic}?", "category_name": "adversarial",
                         "evidence": [ids[1]], "answer": topic})
    for name, rows in (("locomo_turns", turns), ("locomo_queries", queries), ("locomo_queries_cat5", cat5),
                       ("locomo_facts", facts), ("locomo_fact_queries", fact_queries),
                       ("locomo_observations", observations)):
        _write_jsonl(dev / f"{name}.jsonl", rows)
    return dev


def write_longmemeval(folder: Path, questions: int = 4) -> Path:
    """``folder/longmemeval-dev/longmemeval_s_dev.json.gz``: haystacks of a few sessions each, one of
    them holding the answer (``has_answer`` on its user turn), plus one abstention question."""
    dev = folder / "longmemeval-dev"
    dev.mkdir(parents=True)
    records = []
    for q in range(questions + 1):
        qid = f"q{q:03d}" + ("_abs" if q == questions else "")
        sessions, dates, ids = [], [], []
        for s, topic in enumerate(TOPICS[:3]):
            answer = s == q % 3
            user = {"role": "user", "content": f"I booked the {topic} for question {q} on Tuesday."}
            if answer:
                user["has_answer"] = True
            # A long reply (several passages of a long text) beside the short turns.
            long_reply = " ".join(f"Step {n}: for the {topic}, bring what the booking asks for." for n in range(60))
            sessions.append([user, {"role": "assistant", "content": f"Noted: the {topic} is on Tuesday."},
                             {"role": "user", "content": " "},  # a blank turn, as the real set has
                             {"role": "user", "content": f"What should I bring to the {topic}?"},
                             {"role": "assistant", "content": long_reply}])
            day = datetime(2023, 5, 1 + s, 9, 30)
            dates.append(f"{day:%Y/%m/%d} ({day:%a}) {day:%H:%M}")
            ids.append(f"answer_{q}_{s}" if answer else f"session_{q}_{s}")
        records.append({"question_id": qid, "question_type": QUESTION_TYPES[q % len(QUESTION_TYPES)],
                        "question": f"When is the {TOPICS[q % 3]} I booked for question {q}?",
                        "question_date": "2023/06/01 (Thu) 10:00", "answer": "Tuesday",
                        "answer_session_ids": [ids[q % 3]], "haystack_dates": dates,
                        "haystack_session_ids": ids, "haystack_sessions": sessions})
    with gzip.open(dev / "longmemeval_s_dev.json.gz", "wt", encoding="utf-8") as f:
        json.dump(records, f)
    return dev
