"""From raw agent transcripts to skills: which runs consolidation calls a success, and what gets distilled.

Generates agent transcripts — a user's task, the assistant's plan, tool calls with their results, a
final answer, sometimes the user's reaction, half the time arriving after a first consolidation
(so the episode is updated from that one turn) — for a few kinds of task repeated with variations, each
run with a known true result (succeeded, failed or unknown: nobody checked) shown in one of several
ways (a red-then-green test run, a final health check, the user's word, a result tag, a verdict
line…), plus a few plain chats. They are recorded with :class:`TranscriptRecorder` into a real
SQLite file, :func:`consolidate` turns them into episodes, and :class:`SkillDistiller` (a scripted
model answering its one call per accepted episode) drafts skills from them, oldest run first.

It reports the episodes made, a confusion table of the inferred result against the generated truth
— both consolidation's own ``episode.success`` and :func:`infer_outcome` on each episode's stored
turns — the skills distilled, and checks that none came from a run that failed or that nobody
checked. It exits 1 when a skill came from such a run, or when a failed or unknown run was inferred
to be a success.

Run::

    .venv/bin/python bench/bench_distill_from_transcripts.py              # 60 runs
    .venv/bin/python bench/bench_distill_from_transcripts.py --runs 300 --seed 3 --json

Some styles are hard on purpose, to keep the table honest: a passing test summary at the end of an
output longer than the recorder keeps, and a user approving in words no rule knows ("ship it").
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.distill import Draft, SkillDistiller
from harness_mem.experience.outcomes import infer_outcome
from harness_mem.experience.store import ExperienceStore
from harness_mem.experience.transcript import TranscriptRecorder
from harness_mem.providers.textmodel import ScriptedTextModel
from harness_mem.store import MemoryStore

# ---- what a run looks like -------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """A kind of task, with variations, its neutral tool steps and the skill a model would draft."""

    slug: str
    task: str  # formatted with {target}
    targets: tuple[str, ...]
    plan: str
    steps: tuple[tuple[str, Any], ...]  # (tool, result): no step shows a result by itself
    skill_steps: tuple[str, ...]


FAMILIES = (
    Family(
        "fix-failing-importer-tests", "The {target} importer crashes on blank lines; fix it and make the test suite pass",
        ("CSV", "TSV", "JSON-lines", "fixed-width", "Excel"),
        "I'll read the parser, reproduce the crash with the tests, fix it, then rerun the suite.",
        (("read_file", "def parse(lines):\n    for line in lines:\n        yield line.split(sep)"),
         ("search", {"matches": ["importer.py:14", "tests/test_import.py:40"]}),
         ("edit_file", {"path": "importer.py", "written": 412}),
         ("edit_file", {"path": "tests/test_import.py", "written": 96})),
        ("Reproduce the crash with the test suite", "Read the parser around the failing line",
         "Skip or handle the malformed input", "Add a regression test", "Rerun the whole suite until it is green"),
    ),
    Family(
        "deploy-static-site", "Deploy the {target} static site to production and check that it is live",
        ("marketing", "docs", "status", "careers", "blog"),
        "Plan: build the site, upload it to the bucket, invalidate the CDN, then check the live URL.",
        (("read_file", "site.toml: bucket = 'www', cdn = 'edge'"),
         ("build", {"pages": 48, "out": "public/"}),
         ("upload", {"files": 48, "bytes": 1_204_331}),
         ("cdn", {"invalidation": "I2J3K4", "paths": ["/*"]})),
        ("Build the site from a clean checkout", "Upload the output directory to the bucket",
         "Invalidate the CDN paths", "Request the live URL and check the status and content"),
    ),
    Family(
        "upgrade-python-dependency", "Upgrade {target} to the latest major version in the billing service",
        ("requests", "pydantic", "sqlalchemy", "celery", "httpx"),
        "First I'll read the changelog and the pins, then bump the pin, adapt the code and run the tests.",
        (("read_file", "requirements.txt: pinned, 31 packages"),
         ("fetch_url", {"title": "Changelog", "sections": 12}),
         ("edit_file", {"path": "requirements.txt", "written": 1}),
         ("edit_file", {"path": "billing/client.py", "written": 7})),
        ("Read the changelog for breaking changes", "Bump the pin in the requirements file",
         "Adapt the call sites the changelog names", "Run the tests and fix what the upgrade broke"),
    ),
    Family(
        "rotate-service-credentials", "Rotate the database password used by the {target} service without downtime",
        ("orders", "search", "billing", "reports", "auth"),
        "I'll create the new credential, store it in the vault, roll the service, then verify it connects.",
        (("vault_read", {"path": "db/app", "version": 7}),
         ("db_admin", {"created_role_version": 8}),
         ("vault_write", {"path": "db/app", "version": 8}),
         ("rollout", {"replicas": 3, "updated": 3})),
        ("Create the new credential beside the old one", "Store it in the vault as a new version",
         "Roll the service so every replica picks it up", "Verify the service connects, then retire the old credential"),
    ),
)

# How a run shows its result: (style, truth, the tail after the neutral steps).
# A tail is a list of ("tool", name, result) / ("assistant", text[, success]) / ("user", text).
RED = ("tool", "shell", "collected 14 items\n\ntests ....F.F.F.......\n\n"
       "========================= 3 failed, 11 passed in 1.84s =========================")
GREEN = ("tool", "shell", "collected 14 items\n\ntests ..............\n\n"
         "============================= 14 passed in 1.51s ==============================")
TRUNCATED_GREEN = ("tool", "shell", "collected 900 items\n\n" + "tests/test_bulk.py " + "." * 3000 + "\n\n"
                   "============================= 900 passed in 41.2s =============================")
SUCCESS, FAILURE, UNKNOWN = True, False, None
STYLES: list[tuple[str, bool | None, list[tuple[Any, ...]]]] = [
    ("tests red, fix, green", SUCCESS, [RED, ("tool", "edit_file", {"written": 3}), GREEN,
                                        ("assistant", "Fixed; the whole suite passes.")]),
    ("final health check 200", SUCCESS, [("tool", "shell", {"exit": 0, "stdout": "done"}),
                                         ("tool", "http_get", {"status": 200, "bytes": 5120}),
                                         ("assistant", "Done; it answers 200.")]),
    ("the user confirms", SUCCESS, [("assistant", "I made the change; please try it."),
                                    ("user", "Perfect, that works now. Thanks!")]),
    ("result tag from the host", SUCCESS, [("assistant", "Done.", True)]),
    ("verdict line", SUCCESS, [("tool", "cargo", "test result: ok. 9 passed; 0 failed; 0 ignored; 0 measured"),
                               ("assistant", "All checks pass.\nResult: success")]),
    ("hard: summary cut off by the recorder", SUCCESS, [TRUNCATED_GREEN, ("assistant", "The suite is green.")]),
    ("hard: approval in unknown words", SUCCESS, [("assistant", "Ready for review."), ("user", "ship it")]),
    ("tests still red", FAILURE, [RED, ("tool", "edit_file", {"written": 2}), RED,
                                  ("assistant", "Three tests still fail; I need more time.")]),
    ("green, then the push is rejected", FAILURE, [GREEN, ("tool", "shell", {"exit": 1, "stderr": "rejected"}),
                                                   ("assistant", "The change is ready but the push was rejected.")]),
    ("the user: still broken", FAILURE, [GREEN, ("assistant", "Fixed and tested."),
                                         ("user", "Still broken on staging, same error as before.")]),
    ("result tag: failure", FAILURE, [("assistant", "I could not finish this.", False)]),
    ("traceback at the end", FAILURE, [("tool", "python", "Traceback (most recent call last):\n  File \"run.py\", "
                                        "line 9, in <module>\nKeyError: 'region'"),
                                       ("assistant", "It crashed on a missing setting.")]),
    ("final health check 503", FAILURE, [("tool", "http_get", {"status": 503}), ("assistant", "It is not up yet.")]),
    ("claims success, nothing checked", UNKNOWN, [("assistant", "Everything worked perfectly! All done.")]),
    ("the user asks a question", UNKNOWN, [("assistant", "Change made."), ("user", "Does it handle the old format too?")]),
    ("a bare thanks", UNKNOWN, [("assistant", "I've applied the change."), ("user", "thanks")]),
]
CHATS = [
    ("What does idempotent mean?", "Doing it twice has the same effect as doing it once."),
    ("Which port does PostgreSQL use by default?", "5432."),
    ("Summarise our deploy policy in one line.", "Deploy on weekdays before 4 pm, with a rollback plan."),
]


@dataclass
class Run:
    session: str
    family: Family
    style: str
    truth: bool | None
    late: int = 0  # trailing turns (the user's reply) recorded after the first consolidation


def generate(runs: int, seed: int) -> list[tuple[Run, list[tuple[Any, ...]]]]:
    """``runs`` agent runs, styles spread evenly, families and targets at random, in a shuffled order."""
    rng = random.Random(seed)
    made = []
    for i in range(runs):
        style, truth, tail = STYLES[i % len(STYLES)]
        family = rng.choice(FAMILIES)
        target = rng.choice(family.targets)
        steps = [("tool", name, result) for name, result in family.steps]
        turns = [("user", family.task.format(target=target)), ("assistant", family.plan), *steps, *tail]
        # Half the time the user's last word comes after the episode was made: the episode is updated.
        late = 1 if tail[-1][0] == "user" and rng.random() < 0.5 else 0
        made.append((Run("", family, style, truth, late), turns))
    rng.shuffle(made)
    for i, (run, _) in enumerate(made, start=1):
        run.session = f"run-{i:03d}"
    return made


def record(store: MemoryStore, session: str, turns: list[tuple[Any, ...]]) -> None:
    with TranscriptRecorder(store, session=session) as rec:
        for turn in turns:
            if turn[0] == "user":
                rec.note_user(turn[1])
            elif turn[0] == "tool":
                rec.note_tool(turn[1], turn[2])
            else:
                rec.note_assistant(turn[1], success=turn[2] if len(turn) > 2 else None)


def draft_reply(family: Family) -> str:
    """What a model would answer for a run of ``family`` (the scripted model's one reply)."""
    words = family.slug.replace("-", " ")
    return json.dumps({
        "name": family.slug,
        "title": words.capitalize(),
        "description": f"How to {words} safely and verify the result. Use when asked to {words}.",
        "steps": list(family.skill_steps),
        "pitfalls": ["Declaring success before the check has run"],
    })


# ---- the report --------------------------------------------------------------------------------

LABEL = {True: "success", False: "failure", None: "unknown"}


def confusion(pairs: list[tuple[bool | None, bool | None]]) -> dict[str, dict[str, int]]:
    counts = Counter(pairs)
    return {LABEL[t]: {LABEL[p]: counts[(t, p)] for p in (True, False, None)} for t in (True, False, None)}


def print_confusion(title: str, table: dict[str, dict[str, int]]) -> None:
    print(f"\n{title}")
    print(f"  {'true ↓  inferred →':<20}{'success':>9}{'failure':>9}{'unknown':>9}")
    for truth, row in table.items():
        print(f"  {truth:<20}" + "".join(f"{row[p]:>9}" for p in ("success", "failure", "unknown")))


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=60, help="agent runs to generate (default 60)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    parser.add_argument("--db", type=Path, help="keep the SQLite file here (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")

    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "bench.db"
        if path.exists():
            parser.error(f"{path} exists: give a new file to --db")
        generated = generate(args.runs, args.seed)
        truth = {run.session: run for run, _ in generated}
        with MemoryStore(path, embedder=None) as store:
            started = time.perf_counter()
            for run, turns in generated:
                record(store, run.session, turns[: len(turns) - run.late])
            recording = time.perf_counter() - started
            for i, (question, answer) in enumerate(CHATS, start=1):
                record(store, f"chat-{i}", [("user", question), ("assistant", answer), ("user", "thanks")])
            report, consolidating = timed(lambda: consolidate(store))
            for run, turns in generated:
                if run.late:
                    record(store, run.session, turns[-run.late:])
            again, reconsolidating = timed(lambda: consolidate(store))
            experience = ExperienceStore(store)
            episodes = experience.list(limit=None, newest_first=False)
            result = evaluate(store, experience, episodes, truth)
        result.update({
            "runs": args.runs, "seed": args.seed, "chats": len(CHATS),
            "sessions_consolidated": len(report.sessions), "episodes_created": report.created,
            "episodes_updated_by_late_replies": again.updated,
            "chats_with_an_episode": sum(1 for s in report.sessions if s.session.startswith("chat-") and s.episode_id),
            "seconds": {"record": round(recording, 3), "consolidate": round(consolidating, 3),
                        "consolidate_again": round(reconsolidating, 3)},
        })
    problems = result["problems"]
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    for problem in problems:
        print(f"Error: {problem}", file=sys.stderr)
    return 1 if problems else 0


def evaluate(store: MemoryStore, experience: ExperienceStore, episodes: list[Any], truth: dict[str, Run]) -> dict[str, Any]:
    """Infer each episode's result, distil skills oldest run first, and check where they came from."""
    by_session = {}
    for stored in episodes:
        session = stored.id.removeprefix("session:")
        if session in truth:
            by_session[session] = stored
    turns = {session: list(store.list(kind="turn", session=session)) for session in by_session}
    started = time.perf_counter()
    inferred = {session: infer_outcome(turns[session]) for session in by_session}
    inferring = time.perf_counter() - started
    # What consolidation sees when it updates an episode: only the late turns, going on from the earlier outcome.
    late = {s: truth[s].late for s in by_session if truth[s].late}
    updated = {s: infer_outcome(turns[s][-n:], before=infer_outcome(turns[s][:-n])) for s, n in late.items()}
    # Once consolidation records infer_outcome's result (metadata.outcome), the episodes are used as stored.
    recorded_by_consolidation = any(
        isinstance(store.get(stored.entry_id).metadata.get("outcome"), dict)
        for stored in by_session.values() if stored.entry_id
    )

    model = ScriptedTextModel()
    distiller = SkillDistiller.for_store(model, experience)
    skills: list[dict[str, Any]] = []
    skips: Counter[str] = Counter()
    for session, stored in by_session.items():
        run = truth[session]
        episode = stored.episode
        if not recorded_by_consolidation:
            # What the episode says once consolidation records infer_outcome's result.
            episode = episode.model_copy(update={"success": inferred[session].success})
        if distiller.gate(episode) is None:
            model.push(draft_reply(run.family))
        drafted = distiller.distill(episode)
        if isinstance(drafted, Draft):
            distiller.save(drafted, experience, episode_id=stored.id)
            skills.append({"skill": drafted.skill.name, "episode": stored.id, "true_result": LABEL[run.truth],
                           "inferred": inferred[session].reason, "style": run.style})
        else:
            skips[drafted.reason] += 1

    problems = [f"skill {s['skill']!r} came from {s['episode']}, a run whose true result is {s['true_result']}"
                for s in skills if s["true_result"] != "success"]
    problems += [f"{session} ({truth[session].style}) was inferred a success: {outcome.reason}"
                 for session, outcome in inferred.items() if outcome.success and truth[session].truth is not True]
    problems += [f"{session}: updating from the late reply gives {outcome.success}, the whole run "
                 f"{inferred[session].success}" for session, outcome in updated.items()
                 if (outcome.success, outcome.turn_id) != (inferred[session].success, inferred[session].turn_id)]
    styles: dict[str, dict[str, Any]] = {}
    for session, outcome in inferred.items():
        run = truth[session]
        row = styles.setdefault(run.style, {"truth": LABEL[run.truth], "runs": 0, "inferred": Counter(), "reason": ""})
        row["runs"] += 1
        row["inferred"][LABEL[outcome.success]] += 1
        row["reason"] = outcome.reason
    return {
        "episodes": len(by_session),
        "outcome_source": "episode metadata.outcome" if recorded_by_consolidation else "infer_outcome on the turns",
        "confusion_consolidation": confusion([(truth[s].truth, e.episode.success) for s, e in by_session.items()]),
        "confusion_inferred": confusion([(truth[s].truth, o.success) for s, o in inferred.items()]),
        "styles": {k: {**v, "inferred": dict(v["inferred"])} for k, v in styles.items()},
        "late_replies": len(updated),
        "late_replies_agreeing": sum(1 for s, o in updated.items() if o.success == inferred[s].success),
        "skills": skills,
        "skips": dict(skips),
        "model_calls": model.calls,
        "seconds_infer_per_run": inferring / max(1, len(inferred)),
        "problems": problems,
    }


def show(result: dict[str, Any]) -> None:
    print(f"{result['runs']} agent runs (seed {result['seed']}) + {result['chats']} chats recorded in "
          f"{result['seconds']['record']:.2f} s; consolidate: {result['sessions_consolidated']} sessions, "
          f"{result['episodes_created']} episodes created in {result['seconds']['consolidate']:.2f} s; "
          f"chats given an episode: {result['chats_with_an_episode']}")
    print(f"late user replies: {result['late_replies']} recorded after the first pass; consolidating again updated "
          f"{result['episodes_updated_by_late_replies']} episodes in {result['seconds']['consolidate_again']:.2f} s; "
          f"infer_outcome on the late turns with before= agrees with the whole run for "
          f"{result['late_replies_agreeing']} of {result['late_replies']}")
    print_confusion("episode.success as consolidation records it now:", result["confusion_consolidation"])
    print_confusion(f"infer_outcome on each episode's stored turns ({result['seconds_infer_per_run'] * 1e6:.0f} µs a run):",
                    result["confusion_inferred"])
    print("\nby style (inferred)")
    width = max(len(s) for s in result["styles"])
    for style, row in sorted(result["styles"].items(), key=lambda kv: (kv[1]["truth"], kv[0])):
        shown = ", ".join(f"{k} {v}" for k, v in sorted(row["inferred"].items()))
        print(f"  {style:<{width}}  true {row['truth']:<8} {row['runs']:>3} runs → {shown:<24} e.g. {row['reason']}")
    print(f"\nskills distilled ({result['outcome_source']}): {len(result['skills'])}, "
          f"model calls: {result['model_calls']}, skipped: "
          + ", ".join(f"{k} {v}" for k, v in sorted(result["skips"].items())))
    for skill in result["skills"]:
        print(f"  {skill['skill']:<28} from {skill['episode']}  true {skill['true_result']}  ({skill['inferred']})")
    bad = [s for s in result["skills"] if s["true_result"] != "success"]
    print(f"skills from failed or unknown runs: {len(bad)}")


if __name__ == "__main__":
    sys.exit(main())
