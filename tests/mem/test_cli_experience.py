"""`harness-mem episodes …`, `skills …` and `consolidate`, through click's CliRunner.

Model-backed commands talk to a real HTTP server on 127.0.0.1 (tests/loop/fake_openai_server.py).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result
from fake_openai import FakeServer

from harness_mem.cli import cli
from harness_mem.experience.skills import Skill
from harness_mem.experience.store import ExperienceStore
from harness_mem.experience.transcript import TranscriptRecorder
from harness_mem.store import MemoryStore

SITUATION = "Deploy the marketing site to production and check that it is live"
SKILL = Skill(
    "deploy-static-site",
    "Deploys a static website to production and verifies it answers. Use when a site must go live.",
    "# Deploy a static site\n\n## Steps\n\n1. Build the site.\n2. Run the deploy script.\n3. Check the health URL.",
)


@pytest.fixture(autouse=True)
def _no_model_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HARNESS_MEM_MODEL_URL", "HARNESS_MEM_MODEL", "HARNESS_MEM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def run(db: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--db", str(db), "--embedder", "none", *args], catch_exceptions=False, env=env)


def json_lines(result: Result) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


def deploy_session(db: Path, session: str = "s-1", *, success: bool = True) -> None:
    with MemoryStore(db, embedder=None) as store, TranscriptRecorder(store, session=session) as rec:
        rec.note_user(SITUATION)
        rec.note_tool("read_file", "RELEASE.md: v2")
        rec.note_tool("shell", {"exit": 0, "out": "built"})
        rec.note_tool("shell", {"exit": 0, "out": "deployed"})
        rec.note_tool("http_get", {"status": 200})
        rec.note_assistant("The site is deployed and answers 200.", success=success)


# ---- help ------------------------------------------------------------------------------------------


def test_every_new_command_has_help_with_an_example() -> None:
    paths = [("consolidate",)]
    for group in ("episodes", "skills"):
        command = cli.commands[group]
        assert isinstance(command, click.Group)
        paths += [(group, name) for name in command.commands]
    assert len(paths) == 1 + 3 + 6
    for path in paths:
        result = CliRunner().invoke(cli, [*path, "--help"], catch_exceptions=False)
        assert result.exit_code == 0 and "Example:" in result.stdout, path


# ---- consolidate --------------------------------------------------------------------------------------


def test_consolidate_prints_results_and_progress_then_adds_nothing(db_path: Path) -> None:
    deploy_session(db_path, "s-1")
    deploy_session(db_path, "s-2", success=False)
    first = run(db_path, "consolidate")
    assert first.exit_code == 0
    assert first.stdout.splitlines() == [
        "created    s-1  → session:s-1  (6 new turns, 4 tool calls, success)  1 segment, 0 facts",
        "created    s-2  → session:s-2  (6 new turns, 4 tool calls, failure)  1 segment, 0 facts",
    ]
    assert "consolidated 2/2 sessions (s-2)" in first.stderr.splitlines()
    assert first.stderr.splitlines()[-1] == (
        "Consolidated 2 sessions: 2 segments, 0 facts (0 updating older ones, 0 already known); 2 episodes created,"
        " 0 updated; 0 skipped"
    )
    exported = run(db_path, "export").stdout
    again = run(db_path, "consolidate", "--json")
    assert again.exit_code == 0 and again.stdout == ""
    assert again.stderr.splitlines() == [
        "Consolidated 0 sessions: 0 segments, 0 facts (0 updating older ones, 0 already known); 0 episodes created,"
        " 0 updated; 0 skipped"
    ]
    assert run(db_path, "export").stdout == exported


def test_consolidate_json_and_quiet(db_path: Path) -> None:
    deploy_session(db_path)
    result = run(db_path, "consolidate", "--session", "s-1", "--json", "-q")
    (line,) = json_lines(result)
    assert line["action"] == "created" and line["episode"]["tools"] == ["read_file", "shell", "shell", "http_get"]
    assert result.stderr.startswith("Consolidated 1 session:")  # -q: no progress lines


def talk(db: Path, session: str = "c-1") -> None:
    with MemoryStore(db, embedder=None) as store:
        store.add_many([{"content": text, "role": role, "session": session, "created_at": "2023-05-08T10:00:00Z"}
                        for role, text in (("Ada", "I moved to Porto last month."), ("Bo", "Do you like it?"),
                                           ("Ada", "I love it, and I adopted two cats."))])


def digest_reply(facts: list[dict[str, object]]) -> str:
    return json.dumps({"segments": [{"text": "Ada told Bo about Porto.", "turns": [1, 3]}], "facts": facts})


def test_consolidate_has_the_model_write_through_the_loopback_server(db_path: Path, fake: FakeServer) -> None:
    talk(db_path)
    fake.say(digest_reply([{"text": "Ada moved to Porto in April 2023.", "turns": [1]}]))
    env = {"HARNESS_MEM_MODEL_URL": fake.url, "HARNESS_MEM_MODEL": "facts-model"}
    result = run(db_path, "consolidate", env=env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.endswith("1 segment, 1 fact\n")
    (sent,) = fake.requests()
    assert sent["body"]["model"] == "facts-model"
    assert "[1] Ada (2023-05-08): I moved to Porto last month." in sent["body"]["messages"][0]["content"]
    (fact,) = json_lines(run(db_path, "list", "--kind", "fact", "--json"))
    assert fact["content"] == "Ada moved to Porto in April 2023." and fact["session"] == "c-1"
    assert len(fact["metadata"]["source_turns"]) == 1 and fact["source"] == "consolidation"
    assert run(db_path, "consolidate", env=env).stdout == "" and len(fake.requests()) == 1


@pytest.mark.parametrize(
    ("replies", "note"),
    [
        (["I could not find any facts, sorry.", "{\"segments\": [}"], "the reply is not a JSON object"),
        ([digest_reply([{"text": "x", "turns": [7]}])] * 2, "facts cite turn 7, not one of the 3 shown"),
    ],
)
def test_consolidate_falls_back_to_the_rules_on_replies_it_cannot_use(
    db_path: Path, fake: FakeServer, replies: list[str], note: str
) -> None:
    talk(db_path)
    fake.say(*replies)
    result = run(db_path, "consolidate", "--model-url", fake.url, "--model", "m")
    assert result.exit_code == 0 and len(fake.requests()) == 2
    assert f"the model's replies were rejected ({note}" in result.stdout
    (summary,) = json_lines(run(db_path, "list", "--kind", "summary", "--json"))
    assert summary["content"].startswith("Ada and Bo on 8 May 2023: ")


@pytest.mark.parametrize(
    "step",
    [{"status": 500, "body": {"error": {"message": "boom"}}},
     {"status": 200, "delay": 3, "body": {"choices": []}}],
    ids=["http-500", "timeout"],
)
def test_consolidate_writes_nothing_when_the_server_fails_and_tries_again_later(
    db_path: Path, fake: FakeServer, step: dict[str, object]
) -> None:
    talk(db_path)
    fake.script(*[step] * 4)
    result = run(db_path, "consolidate", "--model-url", fake.url, "--model", "m", "--model-timeout", "1")
    assert result.exit_code == 0 and "it will be tried again next run" in result.stdout
    assert run(db_path, "list", "--kind", "summary").stdout == ""
    fake.reset()
    fake.say(digest_reply([]))
    again = run(db_path, "consolidate", "--model-url", fake.url, "--model", "m")
    assert again.exit_code == 0 and "1 segment, 0 facts" in again.stdout


# ---- episodes -------------------------------------------------------------------------------------------


def test_episodes_list_show_recall(db_path: Path) -> None:
    deploy_session(db_path, "s-1")
    deploy_session(db_path, "s-2", success=False)
    run(db_path, "consolidate", "-q")

    listed = run(db_path, "episodes", "list")
    assert listed.exit_code == 0
    assert listed.stdout.splitlines()[0].startswith("session:s-2  ")  # newest first
    assert "    tools: read_file, shell, shell, http_get" in listed.stdout
    assert [e["id"] for e in json_lines(run(db_path, "episodes", "list", "--success", "--json"))] == ["session:s-1"]
    assert [e["id"] for e in json_lines(run(db_path, "episodes", "list", "--failure", "--json"))] == ["session:s-2"]
    assert run(db_path, "episodes", "list", "--tool", "nope").stderr == "No episodes.\n"

    shown = run(db_path, "episodes", "show", "session:s-1")
    assert shown.stdout.splitlines()[2:] == [
        "",
        "Situation: " + SITUATION,
        "Tools used: read_file, shell, shell, http_get",
        "Result: success",
        "Outcome: The site is deployed and answers 200.",
    ]
    assert json_lines(run(db_path, "episodes", "show", "session:s-1", "--json"))[0]["success"] is True

    recalled = json_lines(run(db_path, "episodes", "recall", "deploy the marketing site", "--json"))
    assert [r["id"] for r in recalled] == ["session:s-1", "session:s-2"]  # success first at equal relevance
    assert recalled[0]["score"] > recalled[1]["score"]
    readable = run(db_path, "episodes", "recall", "deploy the marketing site", "-k", "1")
    assert readable.stdout.startswith("[") and "session:s-1" in readable.stdout


# ---- skills --------------------------------------------------------------------------------------------


def test_skills_list_show_export_import(db_path: Path, tmp_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        experience = ExperienceStore(store)
        experience.save_skill(SKILL, origin="saved", rationale="written by hand")
        experience.save_skill(Skill(SKILL.name, SKILL.description, SKILL.body + "\n4. Purge the cache."),
                              origin="saved", rationale="added the cache purge")
    listed = run(db_path, "skills", "list")
    assert listed.stdout.startswith("deploy-static-site  v2  revision 0  Deploys a static website")
    assert run(db_path, "skills", "show", SKILL.name).stdout.endswith("4. Purge the cache.\n")
    history = run(db_path, "skills", "show", SKILL.name, "--history").stdout.splitlines()
    assert [line.split()[0] for line in history] == ["v1", "v2"] and history[1].endswith("added the cache purge")
    assert len(json_lines(run(db_path, "skills", "show", SKILL.name, "--history", "--json"))[0]["history"]) == 2

    out = tmp_path / "skills"
    exported = run(db_path, "skills", "export", str(out))
    assert exported.stdout == f"{out / SKILL.name / 'SKILL.md'}\n"
    assert json_lines(run(db_path, "skills", "export", str(out), "--json")) == [
        {"name": SKILL.name, "path": str(out / SKILL.name / "SKILL.md")}
    ]
    (out / "broken").mkdir()
    (out / "broken" / "SKILL.md").write_text("no front matter\n")
    other = tmp_path / "other.db"
    imported = run(other, "skills", "import", str(out))
    assert imported.exit_code == 1
    assert imported.stdout == "saved      deploy-static-site\n"
    assert imported.stderr.splitlines()[0].startswith(f"Error: {out / 'broken' / 'SKILL.md'}: ")
    assert run(other, "skills", "import", str(out), "--json").stdout.count('"unchanged":["deploy-static-site"]') == 1


def test_skills_export_refuses_a_symlinked_skill_folder(db_path: Path, tmp_path: Path) -> None:
    with MemoryStore(db_path, embedder=None) as store:
        ExperienceStore(store).save_skill(SKILL)
    out, elsewhere = tmp_path / "skills", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / SKILL.name).symlink_to(elsewhere, target_is_directory=True)
    result = run(db_path, "skills", "export", str(out))
    assert result.exit_code == 1
    assert result.stderr == (f"Error: {out / SKILL.name} is a symbolic link, and skills are never written through one"
                             " — remove the link or write to another folder\n")
    assert list(elsewhere.iterdir()) == []


def test_skills_distill_and_revise_through_the_loopback_server(db_path: Path, fake: FakeServer) -> None:
    deploy_session(db_path, "s-1")
    run(db_path, "consolidate", "-q")
    model = ["--model-url", fake.url, "--model", "m"]
    fake.say(json.dumps({
        "name": "deploy-static-site", "title": "Deploy a static site",
        "description": "Deploys a static website and verifies it answers. Use when a site must go live.",
        "steps": ["Read the release notes", "Build", "Deploy", "Check the health URL"], "pitfalls": [],
    }))
    drafted = run(db_path, "skills", "distill", "session:s-1", "--save", *model)
    assert drafted.exit_code == 0, drafted.stderr
    assert drafted.stdout.startswith("---\nname: deploy-static-site\n")
    assert drafted.stderr == "Drafted skill deploy-static-site (saved as version 1)\n"
    assert json_lines(run(db_path, "skills", "list", "--json"))[0]["source_episodes"] == ["session:s-1"]

    # A failed run that followed the skill: revise it.
    with MemoryStore(db_path, embedder=None) as store:
        from harness_mem.experience.episode import Episode

        ExperienceStore(store).record(Episode(SITUATION, "the cache served the old site", tools=["shell"],
                                              skills=["deploy-static-site"], success=False), id="failed-run")
    fake.say(json.dumps({"body": "# Deploy a static site\n\n1. Build.\n2. Deploy.\n3. Purge the CDN cache.\n"
                                    "4. Check the health URL.", "rationale": "Purge the cache after deploying."}))
    revised = run(db_path, "skills", "revise", "deploy-static-site", "failed-run", "--complaint", "stale cache",
                  "--save", "--json", *model)
    assert revised.exit_code == 0, revised.stderr
    data = json_lines(revised)[0]
    assert data["revision"] == 1 and data["saved_version"] == 2 and "Purge the CDN cache" in data["skill_md"]
    assert "stale cache" in fake.requests()[-1]["body"]["messages"][0]["content"]


def test_refusals_cost_no_model_call_and_are_not_errors(db_path: Path, fake: FakeServer) -> None:
    deploy_session(db_path, "s-2", success=False)
    run(db_path, "consolidate", "-q")
    model = ["--model-url", fake.url, "--model", "m"]
    result = run(db_path, "skills", "distill", "session:s-2", *model)
    assert result.exit_code == 0 and result.stdout == ""
    assert result.stderr == "Not distilled: the run failed; only runs that worked become skills\n"
    with MemoryStore(db_path, embedder=None) as store:
        ExperienceStore(store).save_skill(SKILL)
    refused = run(db_path, "skills", "revise", SKILL.name, "session:s-2", *model)
    assert refused.exit_code == 0 and refused.stderr.startswith("Not revised: the run did not use skill")
    assert fake.requests() == []


# ---- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["episodes", "show", "nope"],
         "Error: no episode with id 'nope' in namespace 'default' — `harness-mem episodes list` shows the ids"),
        (["skills", "show", "nope"],
         "Error: no skill named 'nope' in namespace 'default' — `harness-mem skills list` shows them"),
        (["skills", "export", "{tmp}/out", "--name", "nope"],
         "Error: no skill named 'nope' in namespace 'default' — `harness-mem skills list` shows them"),
        (["skills", "distill", "session:s-1"],
         "Error: no model configured — pass --model-url and --model (or set HARNESS_MEM_MODEL_URL and HARNESS_MEM_MODEL)"),
        (["skills", "revise", "deploy-static-site", "session:s-1"],
         "Error: no model configured — pass --model-url and --model (or set HARNESS_MEM_MODEL_URL and HARNESS_MEM_MODEL)"),
        (["skills", "distill", "nope", "--model-url", "http://127.0.0.1:9/v1", "--model", "m"],
         "Error: no episode with id 'nope' in namespace 'default' — `harness-mem episodes list` shows the ids"),
        (["skills", "revise", "nope", "session:s-1", "--model-url", "http://127.0.0.1:9/v1", "--model", "m"],
         "Error: no skill named 'nope' in namespace 'default' — `harness-mem skills list` shows them"),
        (["consolidate", "--model-url", "http://127.0.0.1:9/v1"],
         "Error: a model server was given (http://127.0.0.1:9/v1) but no model name — pass --model"
         " (or set HARNESS_MEM_MODEL)"),
        (["consolidate", "--since", "someday"],
         "Error: cannot read a time from 'someday' — use ISO-8601 (2024-05-01T12:00:00Z) or an age (7d, 24h)"),
    ],
)
def test_user_errors_are_one_line(db_path: Path, tmp_path: Path, args: list[str], message: str) -> None:
    deploy_session(db_path)
    run(db_path, "consolidate", "-q")
    result = run(db_path, *[a.replace("{tmp}", str(tmp_path)) for a in args])
    assert result.exit_code == 1
    assert result.stderr == message + "\n"
    assert result.stdout == ""


def test_an_unreachable_model_server_is_one_line(db_path: Path) -> None:
    deploy_session(db_path)
    run(db_path, "consolidate", "-q")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free now, and nothing listens on it
    result = run(db_path, "skills", "distill", "session:s-1", "--model-url", f"http://127.0.0.1:{port}/v1",
                 "--model", "m", "--model-timeout", "2", env={"HARNESS_MEM_RAISE_ERRORS": ""})
    assert result.exit_code == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"Error: cannot connect to http://127.0.0.1:{port}/v1/chat/completions")
    assert line.endswith("is the server running? Check --model-url (HARNESS_MEM_MODEL_URL)")
