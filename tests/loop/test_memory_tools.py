"""The memory tools in agent runs: remember then recall across runs, corrections, refusals, bad arguments."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import harness_loop
from harness_loop.chat import Message, ModelOutput, Role, ScriptedModel, ToolCall
from harness_loop.loop import AgentLoop, Done, Outcome
from harness_loop.memory import attach_memory
from harness_loop.memory_tools import MAX_SHOWN_CHARS, MEMORY_TOOL_NAMES, memory_tools
from harness_loop.tools import tool
from harness_mem import GuardedMemory, MemoryStore

pytestmark = pytest.mark.anyio

FACT = "The billing service deploys to staging-eu through the blue pipeline."


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(tmp_path / "memory.db", embedder=None) as opened:
        yield opened


def tool_messages(outcome: Outcome) -> list[Message]:
    return [m for m in outcome.transcript if m.role is Role.TOOL]


def error_of(message: Message) -> dict[str, Any]:
    content = json.loads(message.content)
    assert isinstance(content, dict) and "error" in content, message.content
    return content


async def run_once(store: MemoryStore, tmp_path: Path, task: str, *calls: ToolCall, **options: Any) -> Outcome:
    script: list[ModelOutput | str] = [ModelOutput.with_calls(c) for c in calls]
    loop = AgentLoop(ScriptedModel([*script, "done"]), [], workspace=tmp_path)
    attach_memory(loop, store, tools=True, **options)
    return await loop.run(task)


async def test_remember_in_one_run_recall_in_the_next(store: MemoryStore, tmp_path: Path) -> None:
    first = await run_once(
        store, tmp_path, "note where billing deploys",
        ToolCall.of("remember", content=FACT, kind="fact", tags=["billing", "deploy"]),
    )
    (saved,) = tool_messages(first)
    assert saved.content.startswith("Remembered as [")
    entry_id = saved.content.split("[", 1)[1].split("]", 1)[0]
    assert store.get(entry_id).kind == "fact" and store.get(entry_id).source == "agent"

    second = await run_once(store, tmp_path, "deploy billing", ToolCall.of("recall", query="where does billing deploy"))
    (found,) = tool_messages(second)
    lines = found.content.splitlines()
    # The fact, and the first run's episode and turns (its task was about billing too): a recall
    # without a kind searches every lane. Never the running run's own turns.
    assert lines[0] == "4 memories for 'where does billing deploy', best first:"
    at = next(i for i, line in enumerate(lines) if line.startswith(("1. ", "2. ", "3. ", "4. ")) and entry_id in line)
    assert lines[at].endswith(" · tags: billing, deploy") and f"[{entry_id}] fact · " in lines[at]
    assert lines[at + 1] == f"   {FACT}"
    assert sum(" episode " in line and "[session:" in line for line in lines) == 1
    assert "   note where billing deploys" in lines  # the first run's task, a turn
    assert second.session not in found.content
    assert isinstance(second, Done)


async def test_the_same_fact_twice_is_stored_once(store: MemoryStore, tmp_path: Path) -> None:
    outcome = await run_once(
        store, tmp_path, "remember twice",
        ToolCall.of("remember", content=FACT), ToolCall.of("remember", content="  " + FACT + "\n"),
    )
    first, second = tool_messages(outcome)
    entry_id = first.content.split("[", 1)[1].split("]", 1)[0]
    assert second.content == f"Already in memory as [{entry_id}] (exact duplicate; nothing new was stored)."
    assert store.count(kind="note") == 1


async def test_supersede_and_forget(store: MemoryStore, tmp_path: Path) -> None:
    old = store.remember(FACT, kind="fact").id
    other = store.remember("the payments service deploys on Fridays", kind="fact").id
    outcome = await run_once(
        store, tmp_path, "fix the memory",
        ToolCall.of("update_memory", id=old, content="The billing service now deploys to staging-us."),
        ToolCall.of("recall", query="billing service deploys"),
        ToolCall.of("forget", id=f"[{other}]"),  # brackets as recall shows them are tolerated
        ToolCall.of("recall", query="payments Fridays"),
        ToolCall.of("forget", id="no-such-id"),
    )
    corrected, recalled, forgotten, gone, unknown = tool_messages(outcome)
    new_id = corrected.content.split("[", 1)[1].split("]", 1)[0]
    assert corrected.content.startswith(f"Corrected: [{new_id}] replaces [{old}]")
    assert "staging-us" in recalled.content and "staging-eu" not in recalled.content  # the old one is hidden
    assert [e.id for e in store.history(new_id)] == [old, new_id]
    assert forgotten.content == f"Forgotten: [{other}] will not be recalled again."
    assert gone.content == "No memories match 'payments Fridays'."
    message = error_of(unknown)["error"]
    # What to call instead, never a command line.
    assert "no entry with id 'no-such-id'" in message and "recall" in message and "harness-mem" not in message


async def test_a_guarded_write_that_is_refused_comes_back_as_a_tool_error(store: MemoryStore, tmp_path: Path) -> None:
    fact_id = store.remember(FACT, kind="fact").id
    guard = GuardedMemory(store, blocked_substrings=["Project Falcon"])
    outcome = await run_once(
        store, tmp_path, "remember things",
        ToolCall.of("remember", content="the deploy key is AKIAIOSFODNN7EXAMPLE"),
        ToolCall.of("remember", content="Project Falcon ships in May"),
        ToolCall.of("remember", content="The billing service deploys to staging-eu via the blue pipeline."),
        ToolCall.of("remember", content="mail bob@example.com about the billing invoices"),
        ToolCall.of("update_memory", id=fact_id, content="we paid $1,200 for it"),
        guard=guard,
    )
    secret, listed, near, accepted, money = tool_messages(outcome)
    assert error_of(secret)["reason"] == "policy" and "API_KEY" in error_of(secret)["error"]
    assert error_of(listed)["reason"] == "blocked-substring"
    refused = error_of(near)
    assert refused["reason"] == "duplicate" and refused["duplicate_of"] == fact_id
    assert accepted.content.startswith("Remembered as [")
    assert error_of(money)["reason"] == "policy"
    # Nothing refused reached the file; the accepted note was stored guard-redacted.
    assert [e.content for e in store.list(kind="note")] == ["mail <EMAIL> about the billing invoices"]
    assert store.count(kind="fact") == 1
    assert isinstance(outcome, Done)  # errors are the model's information, not the run's end


async def test_a_transcript_turn_is_not_a_near_duplicate(store: MemoryStore, tmp_path: Path) -> None:
    # The task says the fact; the run's own turn is in the file by the time the model remembers it.
    @tool
    async def wait() -> str:
        """Wait for the writer."""
        await anyio.sleep(0.3)
        return "waited"

    loop = AgentLoop(
        ScriptedModel(
            [ModelOutput.with_calls(ToolCall.of("wait")), ModelOutput.with_calls(ToolCall.of("remember", content=FACT)), "ok"]
        ),
        [wait],
        workspace=tmp_path,
    )
    attach_memory(loop, store, tools=True, guard=GuardedMemory(store), flush_interval=0.05)
    outcome = await loop.run(FACT)
    assert tool_messages(outcome)[1].content.startswith("Remembered as [")


# The limits are harness_mem.tools' (the MCP server's), checked by the spec; the loop's own check of
# names comes first.
BAD_CALLS: list[tuple[ToolCall, str]] = [
    (ToolCall.of("remember", content=42), "content: Input should be a valid string"),
    (ToolCall.of("remember", content="   "), "content: is empty"),
    (ToolCall.of("remember", content="x" * 65_537), "content: String should have at most 65536 characters"),
    (ToolCall.of("remember", content="ok", kind="secret"), "kind: Input should be 'note', 'fact' or 'summary'"),
    (ToolCall.of("remember", content="ok", tags="billing"), "tags: Input should be a valid list"),
    (ToolCall.of("remember", content="ok", tags=["x" * 101]), "tags.0: String should have at most 100 characters"),
    (ToolCall.of("remember", content="ok", tags=[f"t{i}" for i in range(33)]), "tags: List should have at most 32 items"),
    (ToolCall.of("remember", content="ok", ttl_days=1, expires_at="2030-01-01"), "give expires_at or ttl_days, not both"),
    (ToolCall.of("remember", text="ok"), "`remember` has no argument 'text'"),
    (ToolCall.of("recall", query="billing", k=0), "k: Input should be greater than or equal to 1"),
    (ToolCall.of("recall", query="billing", k=101), "k: Input should be less than or equal to 100"),
    (ToolCall.of("recall", query="billing", k=True), "k: Input should be a valid integer"),
    (ToolCall.of("recall", query="billing", k="5"), "k: Input should be a valid integer"),
    (ToolCall.of("recall", query="billing", kind="everything"), "kind: Input should be"),
    (ToolCall.of("recall", query="billing", context=9), "context: Input should be less than or equal to 5"),
    (ToolCall.of("recall", query=["billing"]), "query: Input should be a valid string"),
    (ToolCall.of("recall_sessions", query="q" * 4097), "query: String should have at most 4096 characters"),
    (ToolCall.of("recall"), "`recall` needs argument 'query'"),
    (ToolCall.of("forget", id=""), "id: String should have at least 1 character"),
    (ToolCall.of("update_memory", id="x"), "`update_memory` needs argument 'content'"),
    (ToolCall.of("get_memory", id="x", history_limit=101), "history_limit: Input should be less than or equal to 100"),
]


async def test_bad_arguments_are_tool_errors_naming_the_argument(store: MemoryStore, tmp_path: Path) -> None:
    outcome = await run_once(store, tmp_path, "misuse the tools", *(c for c, _ in BAD_CALLS))
    messages = tool_messages(outcome)
    assert len(messages) == len(BAD_CALLS)
    for (call, expected), message in zip(BAD_CALLS, messages, strict=True):
        assert expected in error_of(message)["error"], (call, message.content)
    assert store.count(kind=["note", "fact"]) == 0 and isinstance(outcome, Done)


async def test_recall_leaves_out_the_running_runs_own_turns(store: MemoryStore, tmp_path: Path) -> None:
    await run_once(store, tmp_path, "what is the ledger schema? the ledger is in finance")

    @tool
    async def wait() -> str:
        """Let the writer write."""
        await anyio.sleep(0.3)
        return "waited"

    script = [
        ModelOutput.with_calls(ToolCall.of("wait")),
        ModelOutput.with_calls(ToolCall.of("recall", query="ledger", kind="turn")),
        ModelOutput.with_calls(ToolCall.of("recall_sessions", query="ledger")),
        "done",
    ]
    loop = AgentLoop(ScriptedModel(script), [wait], workspace=tmp_path)
    attach_memory(loop, store, tools=True, flush_interval=0.05)
    outcome = await loop.run("check the ledger again, ledger ledger")
    _, turns, sessions = tool_messages(outcome)
    assert store.count(kind="turn", session=outcome.session) >= 3  # the task, the wait and its result
    # Only the earlier run's turns: this run's (its task says "ledger" three times) are left out.
    assert "the ledger is in finance" in turns.content
    assert "check the ledger again" not in turns.content and outcome.session not in turns.content
    assert sessions.content.startswith("1 past session for 'ledger'")
    assert outcome.session not in sessions.content


async def test_results_are_compact(store: MemoryStore, tmp_path: Path) -> None:
    store.remember("ledger " + "row " * 1000, kind="note")
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    added = [
        store.add(f"ledger turn {w}", role="user" if i % 2 == 0 else "assistant", session="s-1")
        for i, w in enumerate(words)
    ]
    anchor = added[3].id
    notes, turns, sessions = tool_messages(
        await run_once(
            store, tmp_path, "look",
            ToolCall.of("recall", query="ledger", kind="note"),
            ToolCall.of("recall", query="delta", kind="turn", k=1, context=1),
            ToolCall.of("recall_sessions", query="delta", k=1),
        )
    )
    body = notes.content.splitlines()[2]
    assert len(body) <= MAX_SHOWN_CHARS + 40 and body.endswith("[3406 more chars]")
    assert turns.content.splitlines()[2:] == [
        "   ledger turn delta",
        "   just before it:",
        "     user: ledger turn charlie",
        "   just after it:",
        "     user: ledger turn echo",
    ]
    lines = sessions.content.splitlines()
    assert lines[1].startswith("1. session s-1 · ") and lines[1].endswith(" · 6 entries")
    assert lines[2:] == [
        "   began: user: ledger turn alpha",
        "     …",
        "   user: ledger turn charlie",
        f"   best match [{anchor}]: assistant: ledger turn delta",
        "   user: ledger turn echo",
        "     …",
        "   ended: assistant: ledger turn foxtrot",
    ]


def test_every_tool_is_described_for_a_model(store: MemoryStore) -> None:
    tools = memory_tools(store)
    assert sorted(t.name for t in tools) == sorted(MEMORY_TOOL_NAMES)
    for t in tools:
        assert len(t.description) > 150 and "\n\n" in t.description  # what it does, then when to use it
        assert "Use it" in t.description
        for name, schema in t.parameters["properties"].items():
            assert schema.get("description"), (t.name, name)
    readers = {t.name for t in tools if t.read_only}
    assert readers == {"recall", "recall_sessions", "get_memory", "recent_activity", "find_skills"}
    assert "memory_tools" in harness_loop.__all__ and harness_loop.memory_tools is memory_tools
