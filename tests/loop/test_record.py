"""Recording, offline replay (no model, no tools) with divergence reports, trace, and the CLI over them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from harness_loop.chat import ModelOutput, ScriptedModel, ToolCall
from harness_loop.cli import main
from harness_loop.hooks import Deny, Event, HookBus
from harness_loop.loop import AgentLoop, BudgetExhausted, Cancelled, Done, LoopConfig, Outcome, Stuck
from harness_loop.record import (
    RecordingError,
    SessionRecorder,
    SessionStats,
    format_trace,
    read_session,
    replay,
)
from harness_loop.tools import tool
from harness_mem.errors import ModelError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Counter:
    """A tool whose calls are counted, so a test can prove replay never ran it."""

    def __init__(self) -> None:
        self.calls = 0

        @tool(read_only=True)
        def count(step: int) -> dict[str, Any]:
            """Count."""
            self.calls += 1
            return {"step": step, "calls": self.calls}

        @tool
        def dump() -> str:
            """A huge result."""
            self.calls += 1
            return "d" * 50_000

        @tool
        def rm(path: str) -> str:
            """Remove."""
            self.calls += 1
            return "removed"

        self.tools = [count, dump, rm]


def rich_script() -> list[ModelOutput | str]:
    return [
        ModelOutput.with_calls(ToolCall.of("count", step=1), ToolCall.of("count", step=2)),
        ModelOutput.with_calls(ToolCall.of("dump"), ToolCall.of("rm", path="/")),
        ModelOutput(text="", reasoning="let me think"),
        "final answer",
    ]


async def record_run(
    tmp_path: Path, script: list[ModelOutput | str], counter: Counter, **kw: Any
) -> tuple[Path, Outcome]:
    recorder = SessionRecorder.create(tmp_path / "sessions")
    bus = HookBus()
    bus.add(lambda e: Deny("not here") if e.call and e.call.name == "rm" else None, Event.PRE_TOOL_USE)
    with recorder:
        loop = AgentLoop(
            ScriptedModel(script), counter.tools, workspace=tmp_path, hooks=bus, recorder=recorder, **kw
        )
        outcome = await loop.run("count things")
    return recorder.path, outcome


async def test_replay_reproduces_the_run_without_model_or_tools(tmp_path: Path) -> None:
    counter = Counter()
    path, outcome = await record_run(tmp_path, rich_script(), counter)
    assert isinstance(outcome, Done) and outcome.iters == 4 and outcome.tools_called == 3
    calls_before = counter.calls
    report = await replay(path)
    assert counter.calls == calls_before  # no tool ran during replay
    assert report.reproduced, report.divergences
    assert isinstance(report.outcome, Done)
    assert report.outcome.to_dict() | {"session": ""} == outcome.to_dict() | {"session": ""}
    assert (report.model_turns, report.tool_results) == (4, 3)
    # What the model saw is reproduced too, spill marker and denial included.
    assert [m.content for m in report.outcome.transcript] == [m.content for m in outcome.transcript]


async def test_record_kinds_and_stats(tmp_path: Path) -> None:
    path, _ = await record_run(tmp_path, rich_script(), Counter())
    session = read_session(path)
    kinds = [r["kind"] for r in session.records]
    assert kinds[0] == "start" and kinds[-1] == "end"
    assert {"heartbeat", "pre_model", "post_model", "pre_tool", "post_tool", "acceptance", "feedback"} <= set(
        kinds
    )
    assert all(isinstance(r["ts_ms"], int) for r in session.records)
    denied = [r for r in session.of_kind("pre_tool") if r.get("denied_by")]
    assert [r["action"]["tool"] for r in denied] == ["rm"]
    stats = SessionStats.of(session.records)
    assert (stats.model_calls, stats.tool_calls, stats.iters) == (4, 4, 4)


async def test_a_different_tool_in_replay_is_reported_as_a_divergence(tmp_path: Path) -> None:
    path, _ = await record_run(tmp_path, rich_script(), Counter())
    records = read_session(path).records
    post = [r for r in records if r["kind"] == "post_model"][1]
    post["output"]["tool_calls"][0]["name"] = "delete_all"
    report = await replay(records)
    assert not report.reproduced
    (d,) = report.divergences
    assert d.what == "tool call" and d.iter == 1
    assert d.expected == "dump()" and d.got == "delete_all()"

    # The same from a live model that asks for another tool than the recording holds.
    other = ScriptedModel([ModelOutput.with_calls(ToolCall.of("count", step=99))])
    report = await replay(path, model=other)
    assert [str(d) for d in report.divergences] == [
        "iteration 0: tool call: recorded count(step=1), replay count(step=99)"
    ]


async def test_an_extra_model_turn_is_a_divergence(tmp_path: Path) -> None:
    path, _ = await record_run(tmp_path, ["done"], Counter())
    records = [r for r in read_session(path).records if r["kind"] != "post_model"]
    report = await replay(records)
    assert report.divergences[0].what == "model turn"


@pytest.mark.parametrize(
    ("script", "config", "kind"),
    [
        (
            [ModelOutput.with_calls(ToolCall.of("count", step=i)) for i in range(3)] + ["summary"],
            LoopConfig(max_iters=3),
            BudgetExhausted,
        ),
        ([ModelOutput.with_calls(ToolCall.of("rm", path="x")) for _ in range(8)], LoopConfig(), Stuck),
    ],
)
async def test_budget_and_stuck_runs_replay(
    tmp_path: Path, script: list[Any], config: LoopConfig, kind: type
) -> None:
    path, outcome = await record_run(tmp_path, script, Counter(), config=config)
    assert isinstance(outcome, kind)
    report = await replay(path)
    assert report.reproduced, report.divergences
    assert type(report.outcome) is kind


async def test_cancelled_run_replays_as_cancelled(tmp_path: Path) -> None:
    @tool
    async def wait() -> str:
        """Waits."""
        await anyio.sleep(30)
        return "never"

    recorder = SessionRecorder(tmp_path / "run.jsonl")
    loop = AgentLoop(
        ScriptedModel([ModelOutput.with_calls(ToolCall.of("wait"))]),
        [wait],
        workspace=tmp_path,
        recorder=recorder,
    )
    async with anyio.create_task_group() as tg:

        async def cancel_soon() -> None:
            await anyio.sleep(0.05)
            loop.cancel()

        tg.start_soon(cancel_soon)
        outcome = await loop.run("wait")
    recorder.close()
    assert isinstance(outcome, Cancelled)
    report = await replay(recorder.path)
    assert report.reproduced, report.divergences
    assert isinstance(report.outcome, Cancelled) and report.outcome.iters == 1


async def test_deadline_and_model_error_runs_replay(tmp_path: Path) -> None:
    class Stalls:
        async def complete(self, request: Any) -> ModelOutput:
            await anyio.sleep(30)
            raise AssertionError("unreachable")

    class Fails:
        async def complete(self, request: Any) -> ModelOutput:
            raise ModelError("server exploded — try later")

    recorder = SessionRecorder(tmp_path / "deadline.jsonl")
    with recorder:
        outcome = await AgentLoop(Stalls(), workspace=tmp_path, recorder=recorder).run("t", time_limit=0.05)
    assert isinstance(outcome, BudgetExhausted) and outcome.deadline_reached
    report = await replay(recorder.path)
    assert report.reproduced, report.divergences
    assert isinstance(report.outcome, BudgetExhausted) and report.outcome.deadline_reached

    recorder = SessionRecorder(tmp_path / "error.jsonl")
    with recorder, pytest.raises(ModelError):
        await AgentLoop(Fails(), workspace=tmp_path, recorder=recorder).run("t")
    report = await replay(recorder.path)
    assert report.reproduced and report.outcome is None
    assert report.error == "ModelError: server exploded — try later"


async def test_one_file_per_run(tmp_path: Path) -> None:
    a = SessionRecorder.create(tmp_path)
    b = SessionRecorder.create(tmp_path)
    assert a.path != b.path
    loop = AgentLoop(ScriptedModel(["one", "two"]), workspace=tmp_path, recorder=a)
    await loop.run("first")
    with pytest.raises(RecordingError, match="one SessionRecorder per run"):
        await loop.run("second")
    loop.recorder = b  # the refusal left the loop usable
    assert isinstance(await loop.run("third"), Done)
    with pytest.raises(RecordingError, match="never appended"):
        SessionRecorder(a.path)
    a.close()
    b.close()


def test_malformed_lines_are_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"kind": "start", "ts_ms": 1, "task": "t"}\n{"kind": "heart\n[1, 2]\n{"kind": "end", "ts_ms": 2}\n'
    )
    with pytest.raises(RecordingError, match=r"malformed lines 2, 3 \(not valid JSON"):
        read_session(path)
    session = read_session(path, strict=False)
    assert [n for n, _ in session.bad_lines] == [2, 3] and len(session.records) == 2


async def test_trace_shows_the_timeline(tmp_path: Path) -> None:
    path, _ = await record_run(tmp_path, rich_script(), Counter())
    lines = format_trace(read_session(path).records)
    text = "\n".join(lines)
    assert "start" in lines[0] and "count things" in lines[0]
    assert "→ count(step=1), count(step=2)" in text
    assert "spilled 50000 B to" in text
    assert 'rm(path="/") DENIED: not here' in text
    assert "accept    non-empty-answer FAILED" in text
    assert "end       done: iters 4, tools 3 — final answer" in text
    assert lines[-1].startswith("4 model calls, 4 tool calls, 4 iterations")


# -- the CLI over recordings --------------------------------------------------------------------


def invoke(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


async def test_cli_trace_and_replay(tmp_path: Path) -> None:
    path, _ = await record_run(tmp_path, rich_script(), Counter())
    result = await anyio.to_thread.run_sync(invoke, "trace", str(path))
    assert result.exit_code == 0 and "final answer" in result.stdout
    result = await anyio.to_thread.run_sync(invoke, "replay", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(
        "reproduced: done after 4 iterations and 3 tool calls (4 model turns and 3 tool results"
    )

    records = read_session(path).records
    [r for r in records if r["kind"] == "post_model"][0]["output"]["tool_calls"][0]["args"] = {"step": 7}
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = await anyio.to_thread.run_sync(invoke, "replay", str(tampered))
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [
        "diverged (1):",
        "  iteration 0: tool call: recorded count(step=1), replay count(step=7)",
    ]


@pytest.mark.parametrize(
    ("content", "command", "error"),
    [
        (None, "replay", "Error: {path} does not exist — give the path of a .jsonl recording\n"),
        (None, "trace", "Error: {path} does not exist — give the path of a .jsonl recording\n"),
        (
            '{"kind": "start"}\nnot json\n',
            "replay",
            "Error: {path}: malformed line 2 (not valid JSON (Expecting value)) — fix or delete those lines "
            "(a crashed run can leave a partial last line)\n",
        ),
        (
            '{"kind": "end"}\n',
            "replay",
            "Error: {path} has no start record — it is not a harness-loop recording\n",
        ),
    ],
)
def test_cli_errors_are_one_line(tmp_path: Path, content: str | None, command: str, error: str) -> None:
    path = tmp_path / "rec.jsonl"
    if content is not None:
        path.write_text(content)
    result = invoke(command, str(path))
    assert result.exit_code == 1
    assert result.stderr == error.format(path=path)
    assert "Traceback" not in result.output


def test_cli_trace_warns_about_bad_lines_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "rec.jsonl"
    path.write_text('{"kind": "start", "ts_ms": 5, "task": "t"}\n{oops\n')
    result = invoke("trace", str(path))
    assert result.exit_code == 0
    assert (
        result.stderr
        == "Warning: line 2 skipped: not valid JSON (Expecting property name enclosed in double quotes)\n"
    )
    assert "start" in result.stdout


def test_cli_run_without_a_server_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HARNESS_LOOP_MODEL_URL", "HARNESS_LOOP_MODEL"):
        monkeypatch.delenv(name, raising=False)
    result = invoke("run", "-w", str(tmp_path), "hello")
    assert result.exit_code == 1
    assert result.stderr == (
        "Error: no model configured — pass --model-url and --model "
        "(or set HARNESS_LOOP_MODEL_URL and HARNESS_LOOP_MODEL)\n"
    )
