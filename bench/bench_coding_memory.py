"""A coding agent's memory across sessions, through Claude Code's hooks as real processes.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/bench_coding_memory.py [--json]

Two git repositories named ``myproj`` (``clientA/myproj`` with an origin remote, ``clientB/myproj``
without). Session 1 of A says five decisions among requests and chatter, then ends: its SessionEnd
hook consolidates it in the background. B's session says its own billing decision. Then:

- **SessionStart of A's session 2**: how many of the five decisions its context holds, how much
  chatter, how many tokens (characters / 4), and nothing of B's;
- **UserPromptSubmit** in a session not briefed yet: five questions, each about one decision in
  other words, and five prompts about nothing decided: how many get the right memory, how many
  get anything (keyword recall, score ≥ 0.5; a hook loads no model);
- **B** asked A's questions: how many memories of A it gets (the goal is none);
- **by meaning**: the store is made as ``harness-mem init`` makes it (with the built-in model when
  it is installed), so the hook writer's background embedder gives each turn its vector: five
  questions that share no word with the decision they ask about, recalled by meaning and by
  keyword alone over the project's turns (top 3), and the time from session 1's last hook until
  all five are found by meaning (no ``reindex``);
- the time from SessionEnd to the facts being there, and each hook's wall time (spawn to exit,
  the store's hook writer running).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from harness_mem.errors import EmbedderError
from harness_mem.integrations.claude_code import CHARS_PER_TOKEN
from harness_mem.integrations.projects import find_project
from harness_mem.settings import Settings
from harness_mem.store import MemoryStore

HARNESS_MEM = Path(sys.executable).with_name("harness-mem")
#: (what session 1 says, the words its fact keeps, a question about it in other words)
DECISIONS = [
    ("We'll use Postgres for billing.", "Postgres for billing", "Which database is billing on, Postgres or MySQL?"),
    ("Let's go with Redis for the session cache.", "Redis for the session cache",
     "Which cache store do we use for sessions?"),
    ("Never push to main.", "Never push to main", "Can I push my fix straight to main?"),
    ("The CI runs on GitHub Actions.", "GitHub Actions", "Where does CI run, GitHub Actions or Jenkins?"),
    ("Rate limit logins to 5 a minute per IP.", "Rate limit logins",
     "How many login attempts per minute do we allow?"),
]
#: A question about each decision sharing no word with it: keyword recall cannot find it, meaning can.
BY_MEANING = ["Which database holds our invoices?", "Where do we keep logged-in users' state?",
              "Can I commit directly to the primary branch?", "Where do automated builds happen?",
              "How often may someone try to sign in?"]
REQUESTS = ["Run the tests.", "Fix the failing import in app.py.", "Commit.", "Push and open a PR.",
            "Thanks, that's all for today."]
UNRELATED = ["add a dark mode toggle to settings", "fix the typo in the README", "what's the weather today",
             "rename the helper in utils.py", "show me the git log"]


def git_repo(path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if origin:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


class Hooks:
    def __init__(self, db: Path, env: dict[str, str]) -> None:
        self.db, self.env, self.times = db, env, {}  # type: ignore[var-annotated]

    def __call__(self, event: str, cwd: Path, session: str, **fields: Any) -> str:
        payload = {"session_id": session, "transcript_path": "/nonexistent.jsonl", "cwd": str(cwd),
                   "hook_event_name": event, **fields}
        started = time.perf_counter()
        done = subprocess.run([str(HARNESS_MEM), "hook", event, "--db", str(self.db)], input=json.dumps(payload),
                              capture_output=True, text=True, env=self.env, cwd=cwd, check=False)
        self.times.setdefault(event, []).append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"hook {event} failed: {done.stderr.strip()}")
        if not done.stdout.strip():
            return ""
        return str(json.loads(done.stdout)["hookSpecificOutput"]["additionalContext"])

    def session(self, cwd: Path, session: str, prompts: list[str]) -> None:
        self("SessionStart", cwd, session, source="startup")
        for prompt in prompts:
            self("UserPromptSubmit", cwd, session, prompt=prompt)
            self("Stop", cwd, session, last_assistant_message="Done.", stop_hook_active=False)
        self("SessionEnd", cwd, session, reason="prompt_input_exit")


def stop_writers(runtime: Path) -> None:
    """Stop the hook writer this benchmark's hooks started (its pid is in its lock file)."""
    for lock in runtime.glob("writer-*.lock"):
        text = lock.read_text().strip()
        if text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(text), signal.SIGTERM)


def facts(db: Path, cwd: Path) -> int:
    project = find_project(str(cwd))
    assert project is not None
    with MemoryStore(db, embedder=None) as store:
        return store.count(kind="fact", tags=[project.tag])


def found_by_meaning(store: MemoryStore, cwd: Path) -> dict[str, int]:
    """Of :data:`BY_MEANING`, how many bring back their decision's turn in the top 3, by meaning and by keyword."""
    project = find_project(str(cwd))
    assert project is not None
    found = {"semantic": 0, "keyword": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # entries still without a vector: what is being measured
        for question, (said, _, _) in zip(BY_MEANING, DECISIONS, strict=True):
            for mode in found:
                try:
                    hits = store.recall(question, 3, mode=mode, kind="turn", tags=[project.tag])
                except EmbedderError:  # no turn has its vector yet: none found by meaning so far
                    hits = []
                found[mode] += any(h.entry.content == said for h in hits)
    return found


def until_found_by_meaning(store: MemoryStore, cwd: Path, deadline: float) -> tuple[float | None, dict[str, int]]:
    """Seconds until every :data:`BY_MEANING` question finds its turn by meaning (None: not by
    ``deadline``), and what was found then."""
    started = time.perf_counter()
    while True:
        found = found_by_meaning(store, cwd)
        if found["semantic"] == len(BY_MEANING):
            return time.perf_counter() - started, found
        if time.perf_counter() > deadline:
            return None, found
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runtime = root / "run"
        runtime.mkdir(mode=0o700)
        # The model's export stays where this machine keeps it: made once per machine (10-30 s, minutes
        # on a loaded one), it is not what a session waits for.
        env = dict(os.environ, HF_HUB_OFFLINE="1", HARNESS_MEM_RUNTIME_DIR=str(runtime), HOME=str(root / "home"),
                   HARNESS_MEM_WRITER_IDLE_SECONDS="60", HARNESS_MEM_CACHE_DIR=str(Settings.from_env().cache_path()))
        env.pop("HARNESS_MEM_RAISE_ERRORS", None)
        db = root / "memory.db"
        # As `harness-mem init` makes it: vectors when the model is here. The benchmark's own handle
        # (with the model, loaded before the sessions) asks the questions by meaning.
        reader = MemoryStore(db)
        with_vectors = reader.embedder is not None
        a = git_repo(root / "clientA" / "myproj", "git@github.com:client-a/myproj.git")
        b = git_repo(root / "clientB" / "myproj")
        hook = Hooks(db, env)
        said = [d for d, _, _ in DECISIONS]
        hook.session(a, "a-1", [said[0], REQUESTS[0], said[1], REQUESTS[1], said[2], said[3], REQUESTS[2],
                                said[4], *REQUESTS[3:]])
        ended = time.perf_counter()
        embedded_s, meaning = until_found_by_meaning(reader, a, ended + 120) if with_vectors else (None, {})
        while facts(db, a) < len(DECISIONS) and time.perf_counter() - ended < 60:
            time.sleep(0.05)
        consolidated_s = time.perf_counter() - ended
        reader.close()
        hook.session(b, "b-1", ["We'll use MySQL for billing.", "Commit."])
        while not facts(db, b) and time.perf_counter() - ended < 60:
            time.sleep(0.05)

        start = hook("SessionStart", a, "a-2", source="startup")
        lines = [line for line in start.splitlines() if line.startswith("- ")]
        asked = [hook("UserPromptSubmit", a, f"a-q{i}", prompt=q) for i, (_, _, q) in enumerate(DECISIONS)]
        noise = [hook("UserPromptSubmit", a, f"a-n{i}", prompt=p) for i, p in enumerate(UNRELATED)]
        leaks = [hook("UserPromptSubmit", b, f"b-q{i}", prompt=q) for i, (_, _, q) in enumerate(DECISIONS)]
        b_start = hook("SessionStart", b, "b-2", source="startup")

        # Each hook's time, the writer warm: the scenario's own calls plus ten more of each.
        for i in range(10):
            hook("SessionStart", a, f"t-{i}", source="startup")
            hook("UserPromptSubmit", a, f"t-{i}", prompt=DECISIONS[i % 5][2])
        stop_writers(runtime)
    report = {
        "load": [round(x, 2) for x in os.getloadavg()],
        "session_start": {
            "decisions": sum(kept in start for _, kept, _ in DECISIONS), "of": len(DECISIONS), "lines": len(lines),
            "chatter_lines": sum(any(r.rstrip(".") in line for r in REQUESTS) for line in lines),
            "tokens_chars_over_4": len(start) // CHARS_PER_TOKEN, "other_repo_lines": int("MySQL" in start),
        },
        "prompt": {
            "right_memory": sum(kept in got for (_, kept, _), got in zip(DECISIONS, asked, strict=True)),
            "of": len(DECISIONS),
            "answered": sum(bool(got) for got in asked),
            "lines_per_answer": round(statistics.mean(got.count("\n- ") for got in asked if got), 2) if any(asked) else 0,
            "unrelated_answered": sum(bool(got) for got in noise), "unrelated_of": len(UNRELATED),
        },
        "other_repo": {"prompts_given_a_memory_of_a": sum(any(k in got for _, k, _ in DECISIONS) for got in leaks),
                       "session_start_lines_of_a": sum(k in b_start for _, k, _ in DECISIONS),
                       "its_own_decision_at_start": "MySQL for billing" in b_start},
        "by_meaning": {"vectors": with_vectors,
                       "session_end_to_found_by_meaning_s": None if embedded_s is None else round(embedded_s, 2),
                       "found_by_meaning_top3": meaning.get("semantic"), "found_by_keyword_top3": meaning.get("keyword"),
                       "of": len(BY_MEANING)},
        "session_end_to_facts_s": round(consolidated_s, 2),
        "hook_ms_p50": {event: round(statistics.median(t) * 1000, 1) for event, t in hook.times.items()},
        "hook_ms_max": {event: round(max(t) * 1000, 1) for event, t in hook.times.items()},
    }
    if args.json:
        print(json.dumps(report))
        return
    print(json.dumps(report, indent=2))
    print("\nSessionStart of A's second session, as the agent reads it:\n" + start)
    print("\nA prompt in other words:", DECISIONS[4][2], "\n" + asked[4])


if __name__ == "__main__":
    main()
