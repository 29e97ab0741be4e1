"""Context compaction: when it fires, what it keeps, what the summary call sees, and replay."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from harness_loop.chat import Message, ModelOutput, ModelRequest, Role, ScriptedModel, ToolCall
from harness_loop.compaction import (
    COMPACTION_ORIGIN,
    SUMMARY_SYSTEM,
    estimate_tokens,
    plan_compaction,
)
from harness_loop.hooks import Event, HookEvent
from harness_loop.loop import AgentLoop, Done, LoopConfig
from harness_loop.record import SessionRecorder, format_trace, read_session, replay
from harness_loop.tools import tool
from harness_mem.errors import InvalidInputError, ModelError

pytestmark = pytest.mark.anyio

TASK = "collect the pages"  # 17 chars: 33 with the per-message framing
PAGE = "x" * 400
SUMMARY = "Pages 0-5 fetched; each is 400 x's. Nothing else found yet."
SYSTEM = "You fetch pages."


@tool
def fetch(i: int) -> str:
    """Fetch a page."""
    return PAGE


def call(i: int) -> ModelOutput:
    return ModelOutput.with_calls(ToolCall.of("fetch", i=i))


# Sizes, by the documented estimate (chars / 4, +16 chars per message): a round is an assistant
# turn calling fetch (5 + len('{"i":0}') + 16 = 28) and its result (400 + 16 = 416) -- 444 chars,
# 111 tokens. With a 1000-token budget compaction fires at 800 tokens and keeps at most 300 tokens
# (1200 chars) of recent turns: two rounds (888 chars) but not three (1332).
BUDGET = 1000


def config(**overrides: object) -> LoopConfig:
    return LoopConfig(context_budget=BUDGET, **overrides)  # type: ignore[arg-type]


def test_the_estimate_is_chars_over_four() -> None:
    messages = [
        Message(Role.USER, TASK, origin="task"),
        Message(Role.ASSISTANT, "", tool_calls=(ToolCall("c0", "fetch", {"i": 0}),)),
        Message(Role.TOOL, PAGE, tool_call_id="c0", name="fetch"),
    ]
    assert estimate_tokens(messages) == (33 + 28 + 416 + 3) // 4  # rounded up
    assert estimate_tokens(messages, system="s" * 40) == estimate_tokens(messages) + 10


async def test_compaction_fires_at_the_budget_and_keeps_task_summary_and_recent_rounds(tmp_path: Path) -> None:
    # Before the model call of iteration n the history is the task plus n rounds: 33 + 444n chars,
    # which first reaches 800 tokens (3200 chars) at n = 8. So the 9th model call is the summary.
    script: list[ModelOutput | str] = [call(i) for i in range(8)] + [SUMMARY, call(8), call(9), "done"]
    model = ScriptedModel(script)
    events: list[HookEvent] = []
    loop = AgentLoop(model, [fetch], system=SYSTEM, workspace=tmp_path, config=config())
    loop.hooks.add(events.append)
    outcome = await loop.run(TASK)

    assert isinstance(outcome, Done) and outcome.iters == 11
    compacted = [e for e in events if e.event is Event.COMPACTED]
    assert len(compacted) == 1
    event = compacted[0]
    assert event.text == SUMMARY and event.replaced == 12 and event.iter == 8
    assert event.ratio == round(math.ceil((len(SYSTEM) + 33 + 444 * 8) / 4) / BUDGET, 3)
    # It fired between the heartbeat and the PreModel of iteration 8.
    order = [e.event for e in events if e.iter == 8]
    assert order[:3] == [Event.HEARTBEAT, Event.COMPACTED, Event.PRE_MODEL]

    summary_call = model.requests[8]
    assert summary_call.system == SUMMARY_SYSTEM and summary_call.tools == ()
    assert summary_call.guides == ()
    assert len(summary_call.messages) == 1 and TASK in summary_call.messages[0].content
    assert summary_call.messages[0].content.count("-> called fetch(") == 6  # the six oldest rounds

    after = model.requests[9]  # the first call after compaction
    assert after.system == SYSTEM  # the system prompt is not part of what is compacted
    messages = list(after.messages)
    assert messages[0] == Message(Role.USER, TASK, origin="task")
    assert messages[1].role is Role.USER and messages[1].origin == COMPACTION_ORIGIN
    assert messages[1].content.endswith("\n" + SUMMARY)
    assert messages[1].content.startswith("[summary of 12 earlier messages")
    # The two latest rounds, whole: each call next to its result.
    assert [(m.role, m.tool_calls[0].args if m.tool_calls else m.tool_call_id) for m in messages[2::2]] == [
        (Role.ASSISTANT, {"i": 6}),
        (Role.ASSISTANT, {"i": 7}),
    ]
    assert [m.tool_call_id for m in messages[3::2]] == [m.tool_calls[0].id for m in messages[2::2]]
    assert len(messages) == 6
    # The outcome's transcript is the compacted conversation; usage includes the summary call.
    assert outcome.transcript[1].origin == COMPACTION_ORIGIN


async def test_no_compaction_below_the_budget_or_without_one(tmp_path: Path) -> None:
    for cfg in (LoopConfig(), LoopConfig(context_budget=100_000)):
        model = ScriptedModel([*(call(i) for i in range(10)), "done"])
        events: list[HookEvent] = []
        loop = AgentLoop(model, [fetch], workspace=tmp_path, config=cfg)
        loop.hooks.add(events.append, Event.COMPACTED)
        outcome = await loop.run(TASK)
        assert isinstance(outcome, Done) and outcome.text == "done" and events == []
        assert len(model.requests) == 11


def rounds(*calls_per_round: int) -> list[Message]:
    """A task, then per round an assistant turn with that many calls and their results."""
    messages = [Message(Role.USER, TASK, origin="task")]
    for r, n in enumerate(calls_per_round):
        calls = tuple(ToolCall(f"c{r}.{j}", "fetch", {"i": j}) for j in range(n))
        messages.append(Message(Role.ASSISTANT, "", tool_calls=calls))
        messages += [Message(Role.TOOL, PAGE, tool_call_id=c.id, name="fetch") for c in calls]
    return messages


def test_the_plan_never_splits_a_call_from_its_result() -> None:
    # Rounds of 1, 3, 1 and 3 calls: whatever the keep budget, the kept part starts at an assistant
    # turn and holds the result of every call it holds, and no result without its call.
    messages = rounds(1, 3, 1, 3)
    for keep_tokens in (10, 200, 400, 700, 900, 10_000):
        split = plan_compaction(messages, keep_tokens)
        if split is None:
            continue
        assert messages[split].role is Role.ASSISTANT
        kept_results = {m.tool_call_id for m in messages[split:] if m.role is Role.TOOL}
        kept_calls = {c.id for m in messages[split:] for c in m.tool_calls}
        assert kept_results == kept_calls
    # The latest round is kept even when it alone is over the keep budget.
    assert plan_compaction(messages, 10) == len(messages) - 4
    # Everything fits: nothing between the task and the kept part, nothing to summarise.
    assert plan_compaction(messages, 10_000) is None


def test_an_earlier_summary_alone_is_not_summarised_again() -> None:
    task = Message(Role.USER, TASK, origin="task")
    summary = Message(Role.USER, "[summary]\nall done so far", origin=COMPACTION_ORIGIN)
    messages = [task, summary, *rounds(1)[1:]]
    assert plan_compaction(messages, 10) is None
    assert plan_compaction([task, summary, *rounds(1, 1)[1:]], 10) == 4  # summary + a round: yes


async def test_a_failed_or_blank_summary_leaves_the_conversation_whole(tmp_path: Path) -> None:
    class FailingSummaries(ScriptedModel):
        async def complete(self, request: ModelRequest) -> ModelOutput:
            if request.system == SUMMARY_SYSTEM:
                self.requests.append(request)
                raise ModelError("summary call failed")
            return await super().complete(request)

    model = FailingSummaries([*(call(i) for i in range(10)), "done"])
    events: list[HookEvent] = []
    loop = AgentLoop(model, [fetch], workspace=tmp_path, config=config())
    loop.hooks.add(events.append, Event.COMPACTED)
    outcome = await loop.run(TASK)
    assert isinstance(outcome, Done) and outcome.text == "done" and events == []
    summary_attempts = [r for r in model.requests if r.system == SUMMARY_SYSTEM]
    assert len(summary_attempts) == 3  # before the calls of iterations 8, 9 and 10
    assert len(outcome.transcript) == 1 + 2 * 10 + 1  # nothing replaced

    # A blank summary is no summary: iterations 8 and 9 both try, neither replaces anything.
    blank = ScriptedModel([*(call(i) for i in range(8)), "   ", call(8), "", "done"])
    loop = AgentLoop(blank, [fetch], workspace=tmp_path, config=config())
    loop.hooks.add(events.append, Event.COMPACTED)
    outcome = await loop.run(TASK)
    assert isinstance(outcome, Done) and outcome.text == "done"
    assert events == [] and not any(m.origin == COMPACTION_ORIGIN for m in outcome.transcript)


async def test_a_compacting_run_is_recorded_and_replays(tmp_path: Path) -> None:
    script: list[ModelOutput | str] = [call(i) for i in range(8)] + [SUMMARY, call(8), "done"]
    path = tmp_path / "run.jsonl"
    with SessionRecorder(path) as recorder:
        loop = AgentLoop(
            ScriptedModel(script), [fetch], system=SYSTEM, workspace=tmp_path, config=config(),
            recorder=recorder,
        )
        await loop.run(TASK)
    session = read_session(path)
    (record,) = session.of_kind("compaction")
    assert record["replaced"] == 12 and record["budget"] == BUDGET
    assert record["tokens_before"] == math.ceil((len(SYSTEM) + 33 + 444 * 8) / 4)
    assert record["tokens_after"] < record["tokens_before"]
    assert [r.get("purpose") for r in session.of_kind("post_model")].count("compaction") == 1
    assert any(line.split()[2:3] == ["compact"] for line in format_trace(session.records))
    report = await replay(session)
    assert report.reproduced, report.divergences


def test_config_refuses_budgets_and_fractions_that_make_no_sense() -> None:
    for bad in (
        {"context_budget": 0},
        {"context_budget": -5},
        {"context_budget": 1.5},
        {"context_budget": True},
        {"context_budget": 1000, "compact_at": 0.2, "compact_keep": 0.5},
        {"context_budget": 1000, "compact_at": 1.5},
        {"context_budget": 1000, "compact_keep": 0},
    ):
        with pytest.raises(InvalidInputError):
            LoopConfig(**bad)  # type: ignore[arg-type]
    assert LoopConfig.from_dict(LoopConfig(context_budget=500).to_dict()).context_budget == 500
