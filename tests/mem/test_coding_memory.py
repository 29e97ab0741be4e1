"""A coding agent's memory end to end: Claude Code's hooks as real processes on a real SQLite file.

Session 1 in ``clientA/myproj`` decides five things among chatter, then ends (SessionEnd starts its
consolidation in the background). Session 2 starts with those decisions in its context and none of
the chatter; a prompt that asks about one in other words gets it when the session was not given it
already. ``clientB/myproj`` — another repository with the same directory name — gets none of it.
Projects are git repositories: ``git init`` and ``git remote add`` make them as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hook_writers import private_runtime_dir

from harness_mem.experience import consolidate
from harness_mem.integrations import claude_code
from harness_mem.integrations.projects import find_project, normalise_remote
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.slow  # real processes

BIN = Path(sys.executable).parent
DECISIONS = [
    ("We'll use Postgres for billing.", "Postgres for billing"),
    ("Let's go with Redis for the session cache.", "Redis for the session cache"),
    ("Never push to main.", "Never push to main"),
    ("The CI runs on GitHub Actions.", "The CI runs on GitHub Actions"),
    ("Rate limit logins to 5 a minute per IP.", "Rate limit logins to 5 a minute per IP"),
]
CHATTER = ["Commit.", "Push and open a PR.", "Thanks, that's all for today."]


@pytest.fixture(autouse=True)
def runtime_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with private_runtime_dir(monkeypatch) as directory:
        yield directory


def git_repo(path: Path, origin: str | None = None) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    if origin is not None:
        subprocess.run(["git", "-C", str(path), "remote", "add", "origin", origin], check=True)
    return path


def hook(tmp_path: Path, db: Path, event: str, cwd: Path, session: str, **fields: Any) -> dict[str, Any] | None:
    """Run ``harness-mem hook EVENT`` as the installed settings name it; its JSON answer, if any."""
    payload = {"session_id": session, "transcript_path": str(tmp_path / f"{session}.jsonl"), "cwd": str(cwd),
               "hook_event_name": event, **fields}
    environ = dict(os.environ, HF_HUB_OFFLINE="1", HOME=str(tmp_path / "home"))
    environ.pop("HARNESS_MEM_RAISE_ERRORS", None)
    done = subprocess.run([str(BIN / "harness-mem"), "hook", event, "--db", str(db)], input=json.dumps(payload),
                          capture_output=True, text=True, env=environ, cwd=cwd, timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def context(answer: dict[str, Any] | None, event: str) -> str:
    if answer is None:
        return ""
    assert answer["hookSpecificOutput"]["hookEventName"] == event
    text = answer["hookSpecificOutput"]["additionalContext"]
    assert text.startswith(claude_code.OPEN_MARK) and text.endswith(claude_code.CLOSE_MARK)
    return str(text)


def say(tmp_path: Path, db: Path, cwd: Path, session: str, prompts: list[str]) -> None:
    for prompt in prompts:
        hook(tmp_path, db, "UserPromptSubmit", cwd, session, prompt=prompt)
        hook(tmp_path, db, "Stop", cwd, session, last_assistant_message="Done.", stop_hook_active=False)


def facts_of(db: Path, cwd: Path) -> list[str]:
    project = find_project(str(cwd))
    assert project is not None
    with MemoryStore(db, embedder=None) as store:
        return [e.content for e in store.list(kind="fact", tags=[project.tag])]


def wait_for(condition: Any, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.1)
    return bool(condition())


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "memory.db"
    MemoryStore(path, embedder=None).close()
    return path


def test_decisions_of_one_session_brief_the_next_and_never_another_repository(tmp_path: Path, db: Path) -> None:
    a = git_repo(tmp_path / "clientA" / "myproj", "git@github.com:client-a/myproj.git")
    b = git_repo(tmp_path / "clientB" / "myproj")  # no remote: its root path names it
    assert context(hook(tmp_path, db, "SessionStart", a, "a-1", source="startup"), "SessionStart") == ""

    say(tmp_path, db, a, "a-1", [d for d, _ in DECISIONS[:3]] + ["Run the tests."] +
        [d for d, _ in DECISIONS[3:]] + CHATTER)
    hook(tmp_path, db, "SessionEnd", a, "a-1", reason="prompt_input_exit")  # consolidated in the background
    say(tmp_path, db, b, "b-1", ["We'll use MySQL for billing.", "Commit."])
    hook(tmp_path, db, "SessionEnd", b, "b-1", reason="prompt_input_exit")
    assert wait_for(lambda: len(facts_of(db, a)) >= 5 and facts_of(db, b)), (facts_of(db, a), facts_of(db, b))

    # Session 2 of A, started from a subdirectory: the decisions, dated, and none of the chatter.
    (a / "src").mkdir()
    start = context(hook(tmp_path, db, "SessionStart", a / "src", "a-2", source="startup"), "SessionStart")
    for _, said in DECISIONS:
        assert said in start, said
    assert "github.com/client-a/myproj" in start and time.strftime("%Y-%m-%d") in start
    assert not any(chatter.rstrip(".") in start for chatter in CHATTER) and "Run the tests" not in start, start
    assert "The team will use Postgres for billing." in start and "and others" not in start  # the team decided
    assert "MySQL" not in start  # B's
    assert len(start) / claude_code.CHARS_PER_TOKEN <= claude_code.CONTEXT_TOKENS

    # A prompt about one decision in other words: given it only where the session was not already.
    question = "How many login attempts per minute do we allow?"
    assert hook(tmp_path, db, "UserPromptSubmit", a, "a-2", prompt=question) is None  # in a-2's context already
    fresh = context(hook(tmp_path, db, "UserPromptSubmit", a, "a-3", prompt=question), "UserPromptSubmit")
    assert "Rate limit logins to 5 a minute per IP" in fresh and "Postgres" not in fresh
    again = hook(tmp_path, db, "UserPromptSubmit", a, "a-3", prompt="And the login limit, per minute, again?")
    assert again is None  # never twice in one session
    cache = context(hook(tmp_path, db, "UserPromptSubmit", a, "a-3", prompt="Which cache store do we use for sessions?"),
                    "UserPromptSubmit")
    assert "Redis" in cache and "Rate limit" not in cache
    assert hook(tmp_path, db, "UserPromptSubmit", a, "a-3", prompt="add a dark mode toggle to settings") is None

    # B, the other myproj: its own decision, none of A's, by SessionStart or by prompt.
    b_start = context(hook(tmp_path, db, "SessionStart", b, "b-2", source="startup"), "SessionStart")
    assert "MySQL for billing" in b_start
    assert not any(said in b_start for _, said in DECISIONS)
    assert hook(tmp_path, db, "UserPromptSubmit", b, "b-2", prompt="How many login attempts per minute do we allow?") \
        is None


def test_session_start_consolidates_a_small_backlog_itself(tmp_path: Path, db: Path) -> None:
    """A session that ended without SessionEnd (a crash, a closed terminal): the next SessionStart
    consolidates its few turns in process, and has its decisions at once."""
    repo = git_repo(tmp_path / "shop", "https://github.com/Acme/Shop.git")
    say(tmp_path, db, repo, "s-1", ["Never push to main.", "Commit."])
    start = context(hook(tmp_path, db, "SessionStart", repo, "s-2", source="startup"), "SessionStart")
    assert "Never push to main" in start and "Commit" not in start


def test_pre_compact_consolidates_the_session_so_far_in_the_background(tmp_path: Path, db: Path) -> None:
    """A long session compacted mid-way: PreCompact answers at once and consolidates what was said
    so far in the background; a session started meanwhile in the repository has it."""
    repo = git_repo(tmp_path / "shop", "git@github.com:acme/shop.git")
    say(tmp_path, db, repo, "s-1", ["We'll use Postgres for billing.", "Run the tests."])
    assert hook(tmp_path, db, "PreCompact", repo, "s-1", trigger="auto", custom_instructions="") is None
    assert wait_for(lambda: facts_of(db, repo) == ["The team will use Postgres for billing."]), facts_of(db, repo)
    start = context(hook(tmp_path, db, "SessionStart", repo, "s-2", source="startup"), "SessionStart")
    assert "Postgres for billing" in start and "Run the tests" not in start


def test_a_large_backlog_is_consolidated_in_the_background_not_in_the_hook(tmp_path: Path, db: Path) -> None:
    """A long session that ended without SessionEnd: SessionStart answers without consolidating it
    (more than INLINE_TURNS turns) and starts that in the background; the next session has it."""
    repo = git_repo(tmp_path / "shop", "git@github.com:acme/shop.git")
    project = find_project(str(repo))
    assert project is not None
    turns = [{"content": "Never push to main.", "role": "user"}] + [
        {"content": f"[Bash] pytest -q tests/test_{i}.py\n{i} passed", "role": "tool"}
        for i in range(claude_code.INLINE_TURNS + 5)]
    with MemoryStore(db, embedder=None) as store:  # as the capture hooks write them
        store.add_many([{**t, "kind": "turn", "session": "long", "tags": [project.tag, "session:long"]} for t in turns])
    first = context(hook(tmp_path, db, "SessionStart", repo, "next", source="startup"), "SessionStart")
    assert "Never push to main" not in first  # not consolidated in the hook
    assert wait_for(lambda: "Never push to main." in facts_of(db, repo))
    later = context(hook(tmp_path, db, "SessionStart", repo, "later", source="startup"), "SessionStart")
    assert "Never push to main" in later


def test_a_project_is_its_repository(tmp_path: Path) -> None:
    for url in ("https://github.com/Acme/shop.git", "git@github.com:Acme/shop.git", "ssh://git@GitHub.com/Acme/shop/",
                "https://user:token@github.com:443/Acme/shop"):
        assert normalise_remote(url) == "github.com/Acme/shop", url
    main = git_repo(tmp_path / "a" / "shop", "git@github.com:Acme/shop.git")
    clone = git_repo(tmp_path / "elsewhere" / "shop-copy", "https://github.com/Acme/shop")
    plain = git_repo(tmp_path / "b" / "shop")
    (plain / "deep" / "er").mkdir(parents=True)
    found = {find_project(str(p)) for p in (main, clone)}
    assert len(found) == 1 and next(iter(found)).tag == "project:github.com/Acme/shop"  # type: ignore[union-attr]
    assert find_project(str(plain / "deep" / "er")) == find_project(str(plain))
    assert find_project(str(plain)).key == str(plain)  # type: ignore[union-attr]
    assert find_project(str(tmp_path / "no-repo")).key == str(tmp_path / "no-repo")  # type: ignore[union-attr]
    assert find_project(str(plain)) != find_project(str(tmp_path / "c" / "shop"))
    # A linked worktree of a repository without a remote is that repository.
    subprocess.run(["git", "-C", str(plain), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "init"], check=True)
    subprocess.run(["git", "-C", str(plain), "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "wt"], check=True)
    assert find_project(str(tmp_path / "wt")) == find_project(str(plain))
    assert find_project("") is None and find_project(None) is None


def test_what_a_session_was_given_starts_anew_with_its_context(runtime_dir: Path) -> None:
    claude_code.remember_given("s", ["a", "b"])
    claude_code.remember_given("s", ["c"])
    assert claude_code.given("s") == ["a", "b", "c"] and claude_code.given("t") == []
    claude_code.remember_given("s", ["d"], fresh=True)  # SessionStart after /compact: the context is new
    assert claude_code.given("s") == ["d"]
    assert (runtime_dir.stat().st_mode & 0o077) == 0  # ids only, in a directory no one else may enter


def test_consolidation_corrects_a_decision_only_within_its_project(tmp_path: Path) -> None:
    from harness_mem.experience.consolidate import consolidate

    said = [("a-1", "project:github.com/acme/shop", "We'll use Postgres for billing."),
            ("b-1", "project:/home/me/clientB/shop", "We'll use MySQL for billing."),
            ("a-2", "project:github.com/acme/shop", "We'll use SQLite for billing.")]
    with MemoryStore(tmp_path / "m.db", embedder=None) as store:
        for session, project, text in said:
            store.add(text, kind="turn", role="user", session=session, tags=[project])
            consolidate(store, session=session)
        current = {e.content: e.tags for e in store.list(kind="fact")}
        replaced = [e.content for e in store.list(kind="fact", include_superseded=True) if e.superseded_by]
    assert replaced == ["The team will use Postgres for billing."]  # by A's own later decision
    assert {text: [t for t in tags if t.startswith("project:")] for text, tags in current.items()} == {
        "The team will use MySQL for billing.": ["project:/home/me/clientB/shop"],
        "The team will use SQLite for billing.": ["project:github.com/acme/shop"],
    }


def test_a_session_starts_with_the_projects_rules_then_its_open_threads_then_the_rest(tmp_path: Path) -> None:
    repo = git_repo(tmp_path / "shop", "git@github.com:acme/shop.git")
    project = find_project(str(repo))
    assert project is not None
    said = [
        ("user", "I moved the billing docs to the wiki last week."),               # an event: other facts
        ("user", "Remind me next week to delete the old retry wrapper."),          # an open thread
        ("user", "How do deploys work here again?"),
        ("assistant", "Deploys go out on Tuesdays after 2 pm via the deploy-bot."),  # setup, answering
        ("user", "We'll use Postgres for billing."),                                # a decision
        ("user", "Push and open a PR."),                                            # a task for now: nothing
    ]
    with MemoryStore(tmp_path / "memory.db", embedder=None) as store:
        now = time.time()
        store.add_many([{"content": text, "role": role, "session": "s-1", "tags": [project.tag],
                         "created_at": now - 60 + n} for n, (role, text) in enumerate(said)])
        consolidate(store)
        context = claude_code.session_context(store, {"cwd": str(repo), "session_id": "s-2"})
    assert context is not None
    lines = context.text.splitlines()
    rules, threads, others = (lines.index(title) for title in claude_code.CONTEXT_GROUPS)
    assert rules < threads < others
    block = {title: lines[start + 1:end] for title, start, end in
             zip(claude_code.CONTEXT_GROUPS, (rules, threads, others), (threads, others, len(lines) - 1), strict=True)}
    assert [line.split(": ", 1)[1] for line in block["Decisions, conventions and setup:"]] == [
        "The team will use Postgres for billing.",
        "Deploys go out on Tuesdays after 2 pm via the deploy-bot."]  # newest first
    assert any("retry wrapper" in line for line in block["Open threads, left for later:"])
    assert any("billing docs to the wiki" in line for line in block["Other facts:"])
    assert "Push and open a PR" not in context.text


def test_the_same_decision_in_two_projects_is_each_ones(tmp_path: Path) -> None:
    projects = [find_project(str(git_repo(tmp_path / name, f"git@github.com:acme/{name}.git"))) for name in ("a", "b")]
    with MemoryStore(tmp_path / "memory.db", embedder=None) as store:
        for n, project in enumerate(projects):
            assert project is not None
            store.add_many([{"content": "Never push directly to main.", "role": "user", "session": f"s-{n}",
                             "tags": [project.tag]}])
        consolidate(store)
        for project in projects:
            assert project is not None
            (fact,) = store.list(kind="fact", tags=[project.tag])
            assert "Never push directly to main" in fact.content
        assert len(list(store.list(kind="fact"))) == 2


def test_turns_an_older_version_tagged_by_directory_name_go_back_to_their_own_repository(tmp_path: Path,
                                                                                           db: Path) -> None:
    """Stores written before a project was its repository tag turns ``project:myproj`` for both
    ``clientA/myproj`` and ``clientB/myproj``. Such a tag is given to no one; a SessionStart in a
    directory re-tags the old sessions Claude Code recorded there (their transcripts lie beside its
    own, and name the directory), what consolidation derived from them included."""
    a = git_repo(tmp_path / "clientA" / "myproj", "git@github.com:client-a/myproj.git")
    b = git_repo(tmp_path / "clientB" / "myproj")
    folders = {repo: tmp_path / "home" / ".claude" / "projects" / str(repo).replace("/", "-") for repo in (a, b)}
    old = [(a, "old-a", "We'll use Postgres for billing."), (b, "old-b", "We'll use MySQL for billing.")]
    with MemoryStore(db, embedder=None) as store:  # as the hooks of an older version wrote them
        for repo, session, text in old:
            store.add(text, kind="turn", role="user", session=session, source="claude-code",
                      tags=["role:user", f"session:{session}", "project:myproj"],
                      metadata={"host": "claude-code", "event": "UserPromptSubmit"})
            folders[repo].mkdir(parents=True)
            (folders[repo] / f"{session}.jsonl").write_text(json.dumps(
                {"type": "user", "uuid": "u1", "sessionId": session, "cwd": str(repo),
                 "timestamp": "2025-06-01T10:00:00.000Z", "message": {"role": "user", "content": text}}) + "\n")
        # What consolidation derived back then carried no project at all.
        store.add("Redis holds the session cache.", kind="fact", session="old-a", tags=["consolidated"])

    def start(repo: Path, session: str) -> str:
        transcript = str(folders[repo] / f"{session}.jsonl")
        return context(hook(tmp_path, db, "SessionStart", repo, session, source="startup", transcript_path=transcript),
                       "SessionStart")

    # A session whose transcript is elsewhere adopts nothing, and a basename tag reaches no one.
    elsewhere = context(hook(tmp_path, db, "SessionStart", a, "new-0", source="startup"), "SessionStart")
    assert "billing" not in elsewhere and "Redis" not in elsewhere
    in_a, in_b = start(a, "new-a"), start(b, "new-b")
    assert "Postgres for billing" in in_a and "Redis holds the session cache" in in_a and "MySQL" not in in_a
    assert "MySQL for billing" in in_b and "Postgres" not in in_b and "Redis" not in in_b
    with MemoryStore(db, embedder=None) as store:
        assert store.count(tags=["project:myproj"]) == 0
        tags = {e.content: [t for t in e.tags if t.startswith("project:")] for e in store.list(kind="turn")}
    assert tags == {"We'll use Postgres for billing.": ["project:github.com/client-a/myproj"],
                    "We'll use MySQL for billing.": [f"project:{b}"]}


def test_on_each_engine_a_sessions_basename_tag_moves_to_its_repository(engine_store: MemoryStore) -> None:
    store = engine_store
    store.add("We'll use Postgres for billing.", role="user", session="old-a", tags=["project:myproj", "role:user"])
    store.add("Postgres for billing.", kind="fact", session="old-a", tags=["consolidated"])
    store.add("We'll use MySQL for billing.", role="user", session="old-b", tags=["project:myproj"])
    moved = store.storage.move_session_tag(store.namespace, "old-a", "project:myproj", "project:github.com/a/myproj",
                                           family="project:")
    assert moved == 2
    assert {e.content: e.tags for e in store.list()} == {
        "We'll use Postgres for billing.": ("role:user", "project:github.com/a/myproj"),
        "Postgres for billing.": ("consolidated", "project:github.com/a/myproj"),
        "We'll use MySQL for billing.": ("project:myproj",)}
