"""Subagents: own context and transcript, a bounded budget, and an honest status."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness_loop.chat import ModelOutput, Role, ScriptedModel, ToolCall
from harness_loop.guards import FilesExist
from harness_loop.hooks import Event, HookBus, HookEvent
from harness_loop.loop import AgentLoop, Done
from harness_loop.subagent import SubagentSpec, SubagentStatus, run_subagent, subagent_tool
from harness_loop.tools import tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@tool
def ping(n: int) -> str:
    """Ping."""
    return f"pong {n}"


async def test_done_with_its_own_transcript_and_audit_events(tmp_path: Path) -> None:
    seen: list[HookEvent] = []
    bus = HookBus([seen.append])
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("ping", n=1)), "pinged"])
    result = await run_subagent(
        model, SubagentSpec("pinger", "ping once", tools=[ping]), workspace=tmp_path, hooks=bus
    )
    assert result.status is SubagentStatus.DONE and result.text == "pinged" and result.concerns == ()
    assert result.transcript[0].content == "ping once" and len(result.transcript) == 4
    assert "subagent" in (model.requests[0].system or "")
    assert [(e.event, e.name) for e in seen] == [
        (Event.SUBAGENT_START, "pinger"),
        (Event.SUBAGENT_STOP, "pinger"),
    ]


async def test_budget_is_12_and_exhaustion_is_a_concern_or_a_block(tmp_path: Path) -> None:
    script = [ModelOutput.with_calls(ToolCall.of("ping", n=i)) for i in range(30)]
    result = await run_subagent(
        ScriptedModel([*script[:12], "partial findings"]),
        SubagentSpec("s", "t", tools=[ping]),
        workspace=tmp_path,
    )
    assert result.status is SubagentStatus.DONE_WITH_CONCERNS and result.outcome is not None
    assert result.outcome.iters == 12 and result.text == "partial findings"
    result = await run_subagent(
        ScriptedModel(script), SubagentSpec("s", "t", tools=[ping]), workspace=tmp_path
    )
    assert result.status is SubagentStatus.BLOCKED and "budget of 12" in result.concerns[0]


async def test_failed_verdict_is_not_done(tmp_path: Path) -> None:
    spec = SubagentSpec("writer", "write report.md", acceptance=[FilesExist(["report.md"])])
    result = await run_subagent(ScriptedModel(["written", "written"]), spec, workspace=tmp_path)
    assert result.status is SubagentStatus.DONE_WITH_CONCERNS and "report.md" in result.concerns[0]


async def test_stuck_is_blocked_and_markers_are_honoured(tmp_path: Path) -> None:
    same = [ModelOutput.with_calls(ToolCall.of("ping", n=1)) for _ in range(12)]
    result = await run_subagent(ScriptedModel(same), SubagentSpec("s", "t", tools=[ping]), workspace=tmp_path)
    assert result.status is SubagentStatus.BLOCKED and "unchanging" in result.concerns[0]
    result = await run_subagent(
        ScriptedModel(["NEEDS_CONTEXT: which branch?"]), SubagentSpec("s", "t"), workspace=tmp_path
    )
    assert (result.status, result.text) == (SubagentStatus.NEEDS_CONTEXT, "which branch?")
    result = await run_subagent(
        ScriptedModel(["Blocked: no network"]), SubagentSpec("s", "t"), workspace=tmp_path
    )
    assert (result.status, result.text) == (SubagentStatus.BLOCKED, "no network")


async def test_subagent_as_a_tool_of_the_parent(tmp_path: Path) -> None:
    child = ScriptedModel(["NEEDS_CONTEXT: the file name"])
    delegate = subagent_tool(child, workspace=tmp_path)
    parent = ScriptedModel(
        [ModelOutput.with_calls(ToolCall.of("delegate", task="summarise the file")), "asked the user"]
    )
    out = await AgentLoop(parent, [delegate], workspace=tmp_path).run("summarise")
    assert isinstance(out, Done)
    result = json.loads(next(m.content for m in out.transcript if m.role is Role.TOOL))
    assert result == {
        "subagent": "delegate",
        "status": "needs_context",
        "text": "the file name",
        "concerns": ["the file name"],
    }
    assert (
        child.requests[0].messages[0].content == "summarise the file"
    )  # the child never sees the parent's context
