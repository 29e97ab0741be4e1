"""The agent loop against a scripted model: iterations, hooks, budgets, and what the guards must do."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness_loop.chat import ModelOutput, ModelRequest, Role, ScriptedModel, ToolCall
from harness_loop.guards import FilesExist, MonotonyPolicy, NonEmptyAnswer, StuckPolicy
from harness_loop.hooks import Deny, Event, HookBus, HookEvent
from harness_loop.loop import (
    AgentLoop,
    BudgetExhausted,
    Cancelled,
    Done,
    LoopConfig,
    Stuck,
    Unverified,
)
from harness_loop.spill import ToolResult
from harness_loop.tools import tool

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Events:
    """A hook that keeps every event."""

    def __init__(self) -> None:
        self.seen: list[HookEvent] = []

    def __call__(self, event: HookEvent) -> None:
        self.seen.append(event)

    def kinds(self) -> list[Event]:
        return [e.event for e in self.seen]

    def count(self, kind: Event) -> int:
        return sum(1 for e in self.seen if e.event is kind)


def calls(name: str, n: int, **args: Any) -> list[ModelOutput]:
    return [ModelOutput.with_calls(ToolCall.of(name, **args)) for _ in range(n)]


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def test_text_only_answer_takes_one_iteration(tmp_path: Path) -> None:
    loop = AgentLoop(ScriptedModel(["42"]), workspace=tmp_path)
    out = await loop.run("what is six times seven?")
    assert isinstance(out, Done) and out.ok
    assert (out.text, out.iters, out.tools_called) == ("42", 1, 0)


async def test_tool_then_text_takes_two_iterations(tmp_path: Path) -> None:
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("lookup", key="a")), "it is a"])
    out = await AgentLoop(model, [lookup], workspace=tmp_path).run("look up a")
    assert isinstance(out, Done)
    assert (out.iters, out.tools_called, out.text) == (2, 1, "it is a")
    second = model.requests[1].messages
    assert second[-1].role is Role.TOOL and second[-1].content == "value of a"
    assert second[-1].tool_call_id == second[-2].tool_calls[0].id


async def test_deny_blocks_the_call_before_it_runs(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool
    def delete_everything(path: str) -> str:
        """Dangerous."""
        ran.append(path)
        return "gone"

    events = Events()
    bus = HookBus([events])
    bus.add(lambda e: Deny("no deleting in tests"), Event.PRE_TOOL_USE)
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("delete_everything", path="/")), "ok, I won't"])
    out = await AgentLoop(model, [delete_everything], workspace=tmp_path, hooks=bus).run("clean up")
    assert ran == []
    assert isinstance(out, Done) and out.tools_called == 0
    result = json.loads(model.requests[1].messages[-1].content)
    assert result == {"ok": False, "denied_by_hook": "no deleting in tests"}
    assert events.count(Event.POST_TOOL_USE) == 0


async def test_first_deny_wins_and_later_hooks_do_not_run() -> None:
    later: list[HookEvent] = []
    bus = HookBus()
    bus.add(lambda e: Deny("first"))
    bus.add(lambda e: Deny("second"))
    bus.add(later.append)
    decision = bus.fire(HookEvent(Event.PRE_TOOL_USE, "s"))
    assert decision == Deny("first") and later == []


async def test_deny_stops_concurrent_reads_before_any_of_them_runs(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool(read_only=True)
    async def peek(name: str) -> str:
        """Read something."""
        ran.append(name)
        return name

    bus = HookBus()
    bus.add(
        lambda e: Deny("secret") if e.call and e.call.args == {"name": "secret"} else None, Event.PRE_TOOL_USE
    )
    model = ScriptedModel(
        [
            ModelOutput.with_calls(
                ToolCall.of("peek", name="a"),
                ToolCall.of("peek", name="secret"),
                ToolCall.of("peek", name="b"),
            ),
            "done",
        ]
    )
    out = await AgentLoop(model, [peek], workspace=tmp_path, hooks=bus).run("read")
    assert sorted(ran) == ["a", "b"] and out.tools_called == 2
    tool_msgs = [m for m in model.requests[1].messages if m.role is Role.TOOL]
    assert [m.content for m in tool_msgs] == ["a", json.dumps({"ok": False, "denied_by_hook": "secret"}), "b"]


async def test_read_only_calls_run_concurrently(tmp_path: Path) -> None:
    # Each read returns only once all three have started: run one after another, the first would
    # wait for the others until its generous deadline and fail.
    started: list[int] = []
    all_started = anyio.Event()

    @tool(read_only=True)
    async def slow_read(n: int) -> int:
        """Read slowly."""
        started.append(n)
        if len(started) == 3:
            all_started.set()
        with anyio.fail_after(60):
            await all_started.wait()
        return n

    model = ScriptedModel(
        [ModelOutput.with_calls(*(ToolCall.of("slow_read", n=i) for i in range(3))), "done"]
    )
    out = await AgentLoop(model, [slow_read], workspace=tmp_path).run("read three")
    assert [m.content for m in out.transcript if m.role is Role.TOOL] == ["0", "1", "2"]


async def test_budget_exhausted_after_max_iters_with_synthesis_and_one_warning(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel(
        [*(ModelOutput.with_calls(ToolCall.of("lookup", key=str(i))) for i in range(3)), "synthesised answer"]
    )
    loop = AgentLoop(model, [lookup], workspace=tmp_path, config=LoopConfig(max_iters=3), hooks=[events])
    out = await loop.run("never ends")
    assert isinstance(out, BudgetExhausted) and not out.deadline_reached
    assert out.iters == 3 and out.last_text == "synthesised answer"
    assert events.count(Event.BUDGET_WARNING) == 1
    assert events.count(Event.TASK_COMPLETED) == 0
    synthesis = model.requests[-1]
    assert synthesis.tools == () and "iteration budget exhausted" in synthesis.messages[-1].content
    assert events.kinds()[-1] is Event.SESSION_END


async def test_identical_calls_with_unchanging_result_nudge_at_3_and_stop_at_6(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel(calls("lookup", 20, key="same"))
    out = await AgentLoop(model, [lookup], workspace=tmp_path, hooks=[events]).run("loop forever")
    assert isinstance(out, Stuck)
    assert (out.repeated, out.iters) == (6, 6)
    assert "unchanging result" in out.reason
    nudges = [m for m in out.transcript if m.origin == "stuck-detector"]
    assert len(nudges) == 1 and "3 rounds in a row" in nudges[0].content
    # The nudge follows the third round's tool result: tool calls and their results stay adjacent.
    i = out.transcript.index(nudges[0])
    assert out.transcript[i - 1].role is Role.TOOL and out.transcript[i - 2].tool_calls
    assert [e.event for e in events.seen].count(Event.FEEDBACK) == 1
    assert model.remaining == 14


async def test_assistant_tool_calls_are_always_followed_by_their_results(tmp_path: Path) -> None:
    model = ScriptedModel(calls("lookup", 20, key="same"))
    out = await AgentLoop(model, [lookup], workspace=tmp_path).run("loop")
    msgs = out.transcript
    for i, m in enumerate(msgs):
        if m.tool_calls:
            following = msgs[i + 1 : i + 1 + len(m.tool_calls)]
            assert [f.tool_call_id for f in following] == [c.id for c in m.tool_calls]


async def test_distinct_calls_are_not_stuck(tmp_path: Path) -> None:
    model = ScriptedModel(
        [*(ModelOutput.with_calls(ToolCall.of("lookup", key=str(i))) for i in range(10)), "done"]
    )
    out = await AgentLoop(model, [lookup], workspace=tmp_path).run("look up ten keys")
    assert isinstance(out, Done) and out.iters == 11
    assert not [m for m in out.transcript if m.origin == "stuck-detector"]


async def test_polling_whose_result_changes_is_not_stuck(tmp_path: Path) -> None:
    state = {"n": 0}

    @tool
    def job_status() -> str:
        """Poll the job."""
        state["n"] += 1
        return f"running, {state['n'] * 10}% done"

    model = ScriptedModel([*calls("job_status", 9), "finished"])
    out = await AgentLoop(model, [job_status], workspace=tmp_path).run("wait for the job")
    assert isinstance(out, Done) and out.iters == 10


async def test_stuck_detection_custom_thresholds_and_off(tmp_path: Path) -> None:
    cfg = LoopConfig(stuck=StuckPolicy(nudge_at=2, abort_at=3))
    out = await AgentLoop(
        ScriptedModel(calls("lookup", 20, key="k")), [lookup], workspace=tmp_path, config=cfg
    ).run("t")
    assert isinstance(out, Stuck) and out.iters == 3
    cfg = LoopConfig(max_iters=8, stuck=StuckPolicy(enabled=False))
    out = await AgentLoop(
        ScriptedModel(calls("lookup", 20, key="k")), [lookup], workspace=tmp_path, config=cfg
    ).run("t")
    assert isinstance(out, BudgetExhausted) and out.iters == 8


async def test_monotony_guard_is_off_by_default_and_nudges_then_stops_when_on(tmp_path: Path) -> None:
    script = [ModelOutput.with_calls(ToolCall.of("lookup", key=str(i))) for i in range(20)]
    out = await AgentLoop(
        ScriptedModel(script), [lookup], workspace=tmp_path, config=LoopConfig(max_iters=20)
    ).run("t")
    assert isinstance(out, BudgetExhausted)

    cfg = LoopConfig(monotony=MonotonyPolicy(enabled=True, nudge_at=3, abort_at=5))
    model = ScriptedModel([*script[:5], "what I found"])
    out = await AgentLoop(model, [lookup], workspace=tmp_path, config=cfg).run("t")
    assert isinstance(out, Stuck) and out.iters == 5 and out.repeated == 5
    assert "called `lookup` for 5 consecutive rounds" in out.reason
    assert [m.origin for m in out.transcript if m.origin and m.origin != "task"] == [
        "monotony-detector",
        "monotony-detector",
    ]
    assert model.requests[-1].tools == ()  # the forced synthesis is tool-less
    assert out.last_text == "what I found"


async def test_acceptance_failure_is_retried_once(tmp_path: Path) -> None:
    model = ScriptedModel([ModelOutput(text="", reasoning="thinking..."), "the answer"])
    out = await AgentLoop(model, workspace=tmp_path).run("answer")
    assert isinstance(out, Done) and out.iters == 2 and out.text == "the answer"
    retry = model.requests[1].messages[-1]
    assert retry.role is Role.USER and retry.origin == "acceptance" and "without answering" in retry.content


async def test_persistent_failure_is_unverified_and_does_not_fire_task_completed(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel(
        [ModelOutput(text="", reasoning="hmm"), ModelOutput(text=" ", reasoning="still thinking")]
    )
    out = await AgentLoop(model, workspace=tmp_path, hooks=[events]).run("answer")
    assert isinstance(out, Unverified) and not out.ok
    assert out.iters == 2 and out.text == "still thinking" and not out.verdict.passed
    assert events.count(Event.TASK_COMPLETED) == 0
    checked = [e for e in events.seen if e.event is Event.ACCEPTANCE_CHECKED]
    assert [(e.name, e.passed) for e in checked] == [("non-empty-answer", False)] * 2


async def test_files_exist_names_the_missing_file(tmp_path: Path) -> None:
    events = Events()
    checks = [NonEmptyAnswer(), FilesExist(["简历.docx"])]
    out = await AgentLoop(
        ScriptedModel(["written", "written, really"]), workspace=tmp_path, acceptance=checks, hooks=[events]
    ).run("write it")
    assert isinstance(out, Unverified) and "简历.docx" in out.verdict.reason
    assert events.count(Event.TASK_COMPLETED) == 0

    (tmp_path / "简历.docx").write_bytes(b"PK")
    events = Events()
    out = await AgentLoop(
        ScriptedModel(["written"]), workspace=tmp_path, acceptance=checks, hooks=[events]
    ).run("write it")
    assert isinstance(out, Done) and events.count(Event.TASK_COMPLETED) == 1


async def test_event_order_of_a_tool_round(tmp_path: Path) -> None:
    events = Events()
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("lookup", key="a")), "done"])
    await AgentLoop(model, [lookup], workspace=tmp_path, hooks=[events]).run("t")
    E = Event
    assert events.kinds() == [
        E.SESSION_START,
        E.HEARTBEAT,
        E.PRE_MODEL,
        E.POST_MODEL,
        E.PRE_TOOL_USE,
        E.POST_TOOL_USE,
        E.HEARTBEAT,
        E.PRE_MODEL,
        E.POST_MODEL,
        E.ACCEPTANCE_CHECKED,
        E.TASK_COMPLETED,
        E.SESSION_END,
    ]
    post = next(e for e in events.seen if e.event is E.POST_TOOL_USE)
    assert post.result is not None and post.result.content == "value of a" and post.seq == 0


async def test_200kB_result_is_spilled_byte_exact(tmp_path: Path) -> None:
    @tool
    def firehose() -> str:
        """Too much output."""
        return "x" * 200_000

    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("firehose")), "done"])
    out = await AgentLoop(model, [firehose], workspace=tmp_path).run("t")
    seen = model.requests[1].messages[-1].content
    marker = json.loads(seen)
    assert len(seen.encode()) < 24576
    assert set(marker) == {"spilled", "tool", "bytes_total", "path", "preview", "note"}
    assert marker["spilled"] is True and marker["tool"] == "firehose" and marker["bytes_total"] == 200_000
    assert marker["preview"] == "x" * 4096 and "Do not repeat the original call" in marker["note"]
    spilled = Path(marker["path"])
    assert spilled.parent == tmp_path.resolve() / ".harness" / "spill" and spilled.suffix == ".txt"
    assert spilled.read_bytes() == b"x" * 200_000
    assert isinstance(out, Done)


async def test_tool_deadline_cancels_the_call_and_tells_the_model(tmp_path: Path) -> None:
    # Neither call ends by itself while the run lasts: the run ends only if both are given up on.
    release = threading.Event()

    @tool(timeout=0.05)
    async def hang() -> str:
        """Never returns."""
        await anyio.sleep(3600)
        return "late"

    @tool
    def sync_hang() -> str:
        """Blocks a thread."""
        release.wait(120)
        return "late"

    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("hang"), ToolCall.of("sync_hang")), "gave up"])
    try:
        with anyio.fail_after(60):  # a failure detector, not a speed goal
            out = await AgentLoop(
                model, [hang, sync_hang], workspace=tmp_path, config=LoopConfig(tool_timeout=0.05)
            ).run("t")
    finally:
        release.set()  # the abandoned thread ends
    results = [json.loads(m.content) for m in out.transcript if m.role is Role.TOOL]
    assert all(r["timeout"] is True and "0.05s deadline" in r["error"] for r in results)
    assert isinstance(out, Done)


async def test_tool_errors_and_bad_arguments_reach_the_model(tmp_path: Path) -> None:
    @tool
    def boom(n: int) -> int:
        """Fails."""
        raise ValueError(f"bad n {n}")

    model = ScriptedModel(
        [
            ModelOutput.with_calls(
                ToolCall.of("boom", n=1),
                ToolCall("c2", "boom", {"m": 1}),
                ToolCall("c3", "boom", "{not json"),
                ToolCall.of("booom", n=1),
            ),
            "ok",
        ]
    )
    out = await AgentLoop(model, [boom], workspace=tmp_path).run("t")
    errors = [json.loads(m.content)["error"] for m in out.transcript if m.role is Role.TOOL]
    assert errors[0] == "ValueError: bad n 1"
    assert "has no argument 'm'" in errors[1]
    assert "not valid JSON" in errors[2]
    assert "did you mean `boom`?" in errors[3]


def _nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


_SELF: dict[str, object] = {}
_SELF["me"] = _SELF


@pytest.mark.parametrize(
    ("result", "error"),
    [
        ({"v": _nested(5000)}, "`odd` returned a value that cannot be sent as JSON: the tool's result is nested"
                               " more than 64 levels deep — flatten it"),
        (ToolResult(True, {"v": _nested(900)}), "`odd` returned a value that cannot be sent as JSON: the tool's"
                                                " result is nested more than 64 levels deep — flatten it"),
        (_SELF, "`odd` returned a value that cannot be sent as JSON: the tool's result is nested more than 64"),
    ],
)
async def test_a_result_too_deep_for_json_is_a_tool_error_and_the_run_goes_on(
    tmp_path: Path, result: object, error: str
) -> None:
    @tool
    def odd() -> object:
        """Returns something awkward."""
        return result

    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("odd")), "carried on"])
    out = await AgentLoop(model, [odd], workspace=tmp_path).run("t")
    assert isinstance(out, Done) and out.text == "carried on"
    [message] = [json.loads(m.content) for m in out.transcript if m.role is Role.TOOL]
    assert message["error"].startswith(error)


async def test_cancel_interrupts_a_tool_and_keeps_the_transcript_well_formed(tmp_path: Path) -> None:
    @tool
    async def wait_forever() -> str:
        """Waits."""
        await anyio.sleep(30)
        return "never"

    events = Events()
    cancel = anyio.Event()
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("wait_forever"))])
    loop = AgentLoop(model, [wait_forever], workspace=tmp_path, hooks=[events])
    async with anyio.create_task_group() as tg:

        async def fire() -> None:
            await anyio.sleep(0.05)
            cancel.set()

        tg.start_soon(fire)
        out = await loop.run("wait", cancel=cancel)
    assert isinstance(out, Cancelled) and out.iters == 1 and out.tools_called == 0
    last = out.transcript[-1]
    assert last.role is Role.TOOL and json.loads(last.content) == {
        "error": "run cancelled",
        "cancelled": True,
    }
    assert events.kinds()[-2:] == [Event.CANCELLED, Event.SESSION_END]


async def test_cancel_method_and_a_preset_event(tmp_path: Path) -> None:
    class SlowModel:
        async def complete(self, request: Any) -> ModelOutput:
            await anyio.sleep(30)
            return ModelOutput.reply("late")

    loop = AgentLoop(SlowModel(), workspace=tmp_path)
    async with anyio.create_task_group() as tg:

        async def cancel_soon() -> None:
            await anyio.sleep(0.05)
            loop.cancel()

        tg.start_soon(cancel_soon)
        out = await loop.run("t")
    assert isinstance(out, Cancelled) and out.iters == 0

    preset = anyio.Event()
    preset.set()
    out = await AgentLoop(ScriptedModel(["hi"]), workspace=tmp_path).run("t", cancel=preset)
    assert isinstance(out, Cancelled) and out.iters == 0


async def test_wall_clock_deadline_ends_the_run_without_a_model_call_after_it(tmp_path: Path) -> None:
    class SlowModel:
        calls = 0

        async def complete(self, request: Any) -> ModelOutput:
            SlowModel.calls += 1
            await anyio.sleep(3600)
            return ModelOutput.reply("late")

    with anyio.fail_after(60):  # a failure detector: without the deadline the run waits an hour
        out = await AgentLoop(SlowModel(), workspace=tmp_path, config=LoopConfig(time_limit=0.1)).run("t")
    assert isinstance(out, BudgetExhausted) and out.deadline_reached and SlowModel.calls == 1


async def test_guides_are_rendered_before_each_call_and_replaced_not_stacked(tmp_path: Path) -> None:
    class CountingGuide:
        def __init__(self) -> None:
            self.queries: list[str] = []

        def render(self, query: str) -> str:
            self.queries.append(query)
            return f"memory block #{len(self.queries)}"

    guide = CountingGuide()
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("lookup", key="a")), "", "done"])
    await AgentLoop(
        model, [lookup], workspace=tmp_path, guides=[guide, type("Empty", (), {"render": lambda s, q: ""})()]
    ).run("the task")
    assert [r.guides for r in model.requests] == [
        ("memory block #1",),
        ("memory block #2",),
        ("memory block #3",),
    ]
    assert guide.queries == ["the task"] * 3  # the retry prompt never becomes the query
    assert all("memory block" not in m.content for r in model.requests for m in r.messages)


async def test_hook_errors_propagate_and_the_loop_can_run_again(tmp_path: Path) -> None:
    def broken(event: HookEvent) -> None:
        raise RuntimeError("hook bug")

    loop = AgentLoop(ScriptedModel(["a", "b"]), workspace=tmp_path, hooks=HookBus([broken]))
    with pytest.raises(RuntimeError, match="hook bug"):
        await loop.run("t")
    loop.hooks = HookBus()
    assert isinstance(await loop.run("t"), Done)


async def test_scripted_ids_are_unique_per_call_even_for_identical_calls() -> None:
    model = ScriptedModel(
        [ModelOutput.with_calls(ToolCall.of("f", a=1), ToolCall.of("f", a=1)), *calls("f", 2, a=1)]
    )
    request = ModelRequest(messages=())
    ids = []
    for _ in range(3):
        out = await model.complete(request)
        ids += [c.id for c in out.tool_calls]
    assert len(set(ids)) == 4 and all(i.startswith("call_") for i in ids)
    again = ScriptedModel([ModelOutput.with_calls(ToolCall.of("f", a=1), ToolCall.of("f", a=1))])
    assert [c.id for c in (await again.complete(request)).tool_calls] == ids[:2]
    assert (await again.complete(request)).text == ""
