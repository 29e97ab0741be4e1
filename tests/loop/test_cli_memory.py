"""``harness-loop run --db``: the command-line agent with a memory, against an OpenAI-compatible server
on 127.0.0.1 that refuses a null content the way llama.cpp's does."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result
from fake_openai import FakeServer

from harness_loop.cli import main as loop_cli
from harness_mem import ExperienceStore, MemoryStore


def harness_loop(*args: str, env: dict[str, str] | None = None) -> Result:
    """``harness-loop ARGS`` in this process: the agent and its memory, not the process, are under test."""
    return CliRunner(env=env).invoke(loop_cli, list(args), prog_name="harness-loop", catch_exceptions=False)


def reply(message: dict[str, object]) -> dict[str, object]:
    return {"status": 200, "body": {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}}


def test_run_with_a_db_recalls_offers_the_memory_tools_and_captures_the_run(tmp_path: Path, fake: FakeServer) -> None:
    db = tmp_path / "agent.db"
    with MemoryStore(db, embedder=None) as store:
        store.add("deploys go to staging-eu since March", kind="note")
    fake.strict()
    remember = {"id": "c1", "type": "function",
                "function": {"name": "remember", "arguments": json.dumps({"content": "Ada asked where we deploy"})}}
    fake.script(reply({"role": "assistant", "content": None, "tool_calls": [remember]}),
                reply({"role": "assistant", "content": "To staging-eu, since March."}))
    result = harness_loop("run", "--db", str(db), "--model-url", fake.url, "--model", "m", "--no-record",
                          "-w", str(tmp_path), "Where do we deploy?")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "To staging-eu, since March.\n"
    first, second = (r["body"] for r in fake.requests())
    assert "[memory-recall]" in first["messages"][0]["content"] and "staging-eu" in first["messages"][0]["content"]
    assert {"remember", "recall"} <= {t["function"]["name"] for t in first["tools"]}
    assert first["tool_choice"] == "auto"
    assert "content" not in second["messages"][2] and second["messages"][2]["tool_calls"]  # never null
    with MemoryStore(db, embedder=None) as store:
        assert [e.content for e in store.list(kind="note")] == [
            "deploys go to staging-eu since March", "Ada asked where we deploy"
        ]
        assert {t.role for t in store.list(kind="turn")} == {"user", "tool", "assistant"}
        assert len(ExperienceStore(store).list()) == 1


def test_run_without_a_db_writes_no_store(tmp_path: Path, fake: FakeServer) -> None:
    fake.say("No memory here.")
    result = harness_loop("run", "--model-url", fake.url, "--model", "m", "--no-record", "-w", str(tmp_path), "hi",
                          env={"HARNESS_MEM_DB": str(tmp_path / "should-not-exist.db")})
    assert result.exit_code == 0, result.stderr
    assert not (tmp_path / "should-not-exist.db").exists()


def test_run_with_namespaces_recalls_the_private_and_shared_ones_and_writes_the_first(
        tmp_path: Path, fake: FakeServer) -> None:
    db = tmp_path / "team.db"
    for namespace, note in (("ada", "ada deploys the billing service on fridays"),
                            ("team", "the team deploys billing through the release train"),
                            ("bob", "bob deploys billing by hand with zanzibarquux")):
        with MemoryStore(db, namespace=namespace, embedder=None) as store:
            store.add(note, kind="note")
    remember = {"id": "c1", "type": "function",
                "function": {"name": "remember", "arguments": json.dumps({"content": "Ada asked how billing deploys"})}}
    fake.script(reply({"role": "assistant", "content": None, "tool_calls": [remember]}),
                reply({"role": "assistant", "content": "Through the release train."}))
    result = harness_loop("run", "--db", str(db), "-N", "ada", "-N", "team", "--model-url", fake.url, "--model", "m",
                          "--no-record", "-w", str(tmp_path), "How does billing deploy?")
    assert result.exit_code == 0, result.stderr
    recalled = fake.requests()[0]["body"]["messages"][0]["content"]
    assert "release train" in recalled and "fridays" in recalled and "zanzibarquux" not in recalled
    with MemoryStore(db, namespace="ada", embedder=None) as store:
        assert "Ada asked how billing deploys" in [e.content for e in store.list(kind="note")]
    with MemoryStore(db, namespace="team", embedder=None) as store:
        assert store.count(kind="note") == 1 and store.count(kind="turn") == 0
