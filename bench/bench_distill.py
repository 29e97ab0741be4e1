"""How long the distiller's gate takes to say no (and yes) with many skills already known.

The baseline to beat, measured at 500 existing skills on a design that re-tokenises every skill for
every episode: rejections in 2–81 ns with no model call, an accepted episode in 2 ms, and 13.3 ms
to rescan a skills directory. Here the skills are tokenised once into an inverted index, so an
episode only touches the skills that share a token with it.

Run::

    .venv/bin/python bench/bench_distill.py            # 500 skills
    .venv/bin/python bench/bench_distill.py --skills 5000 --repeat 9

Everything is synthetic and local: a scripted model stands in for the one model call.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

from harness_mem.experience.distill import Draft, DuplicateSkill, SkillDistiller
from harness_mem.experience.episode import Episode
from harness_mem.experience.skills import Skill, write_skill_md
from harness_mem.experience.store import ExperienceStore
from harness_mem.providers.textmodel import ScriptedTextModel
from harness_mem.store import MemoryStore

VERBS = "deploy rotate backup restore migrate review triage profile benchmark upgrade audit index compact".split()
OBJECTS = (
    "website database certificates cluster queue cache bucket pipeline service schema report invoice "
    "dashboard container registry firewall gateway replica snapshot ledger".split()
)
FILLER = (
    "production staging nightly carefully verify confirm health metrics alerts rollback canary window "
    "owners budget latency throughput regions tenants secrets tokens logs traces quota retries "
    "approval checklist runbook incident customer release hotfix branch commit tests coverage".split()
)


def make_skills(count: int, seed: int = 7) -> list[Skill]:
    rng = random.Random(seed)
    skills: list[Skill] = []
    for i in range(count):
        verb, obj = rng.choice(VERBS), rng.choice(OBJECTS)
        words = rng.sample(FILLER, 8) + [f"topic{i:05d}", f"system{i % 97:03d}"]
        skills.append(Skill(
            name=f"{verb}-{obj}-{i}",
            description=f"{verb.capitalize()} the {obj} ({' '.join(words)}). Use when the {obj} needs it.",
            body=f"# {verb} {obj}\n\n1. Check {words[0]}.\n2. Do the {verb}.\n3. Verify {words[1]}.\n",
        ))
    return skills


def episodes(skills: list[Skill]) -> dict[str, Episode]:
    tools = ["read_file", "shell", "shell", "http_get", "shell"]
    target = skills[len(skills) // 2]
    return {
        "reject: 1 tool call": Episode("rotate the certificates on the edge gateway", "done", tools=["shell"],
                                       success=True),
        "reject: not a success": Episode("rotate the certificates on the edge gateway", "broke", tools=tools,
                                         success=False),
        "reject: 1 distinct tool": Episode("rotate the certificates on the edge gateway", "done",
                                           tools=["shell"] * 5, success=True),
        "reject: duplicate skill": Episode(target.description, "done", tools=tools, success=True),
        "accept (gate passes)": Episode(
            "Summarise the quarterly sales spreadsheet for the finance team and email the summary",
            "sent", tools=tools, success=True,
        ),
        "accept, shares words with many skills": Episode(
            "Deploy the pipeline for the quarterly finance spreadsheet and notify the owners",
            "done", tools=tools, success=True,
        ),
    }


REPLY = json.dumps({
    "name": "summarise-sales-spreadsheet",
    "title": "Summarise a sales spreadsheet",
    "description": "Summarises a sales spreadsheet into a short report for finance. Use when finance asks for numbers.",
    "steps": ["Open the spreadsheet", "Compute the totals per region", "Write the summary", "Email it"],
    "pitfalls": ["Mixing currencies"],
})


def best(fn: Callable[[], object], number: int, repeat: int) -> float:
    """Seconds per call: the minimum over ``repeat`` runs of ``number`` calls."""
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number


def fmt(seconds: float) -> str:
    if seconds < 1e-6:
        return f"{seconds * 1e9:.0f} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skills", type=int, default=500, help="existing skills (default 500)")
    parser.add_argument("--number", type=int, default=2000, help="calls per timing run (default 2000)")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs; the best is kept (default 5)")
    args = parser.parse_args()

    skills = make_skills(args.skills)
    rows: list[tuple[str, str, str]] = []

    build = best(lambda: SkillDistiller(ScriptedTextModel(), skills), 1, args.repeat)
    rows.append((f"index {args.skills} skills (once per distiller)", fmt(build), "-"))

    for label, episode in episodes(skills).items():
        model = ScriptedTextModel()
        distiller = SkillDistiller(model, skills)
        verdict = distiller.gate(episode)
        if label.startswith("reject: duplicate"):
            assert isinstance(verdict, DuplicateSkill), verdict
        elif label.startswith("accept"):
            assert verdict is None, verdict
        else:
            assert verdict is not None
        seconds = best(functools.partial(distiller.gate, episode), args.number, args.repeat)
        rows.append((f"gate, {label}", fmt(seconds), str(model.calls)))

    accepted = episodes(skills)["accept (gate passes)"]
    distiller = SkillDistiller(ScriptedTextModel(), skills)
    assert isinstance(distiller.build(accepted, REPLY), Draft)
    seconds = best(lambda: distiller.build(accepted, REPLY), max(1, args.number // 10), args.repeat)
    rows.append(("draft from a canned reply (parse, name, lint)", fmt(seconds), "0"))

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "skills"
        for skill in skills:
            write_skill_md(skill, root)
        seconds = best(lambda: SkillDistiller.for_directory(ScriptedTextModel(), root), 1, args.repeat)
        rows.append((f"load {args.skills} skills from a directory + index", fmt(seconds), "-"))
        with MemoryStore(Path(tmp) / "bench.db") as store:
            experience = ExperienceStore(store)
            for skill in skills:
                experience.save_skill(skill)
            seconds = best(lambda: SkillDistiller.for_store(ScriptedTextModel(), experience), 1, args.repeat)
            rows.append((f"load {args.skills} skills from the database + index", fmt(seconds), "-"))

    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'time':>10}  model calls")
    print(f"{'-' * width}  {'-' * 10}  -----------")
    for case, took, calls in rows:
        print(f"{case:<{width}}  {took:>10}  {calls:>11}")
    print(f"\n{args.skills} existing skills; best of {args.repeat} runs. Baseline at 500 skills: "
          "rejections 2–81 ns, accept 2 ms, directory rescan 13.3 ms.")


if __name__ == "__main__":
    main()
