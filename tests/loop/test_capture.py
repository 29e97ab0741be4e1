"""Capture in the loop: turns written while the run goes on (harness_mem's TranscriptWriter, killed with
the whole agent here; the writer on its own is tested in tests/mem/test_transcript_writer.py), never
recalled by their own run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from harness_loop.chat import ModelOutput, ScriptedModel, ToolCall
from harness_loop.hooks import Event, HookEvent
from harness_loop.loop import AgentLoop, Cancelled, Done
from harness_loop.memory import CachedGuide, MemoryGuide, attach_memory, format_memory_block
from harness_loop.tools import tool
from harness_mem import Entry, MemoryStore
from harness_mem.experience.transcript_writer import THREAD_PREFIX

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
TASK = "reconcile the billing ledger"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(tmp_path / "memory.db", embedder=None) as opened:
        yield opened


def turns(store: MemoryStore, session: str) -> list[Entry]:
    return sorted(store.list(kind="turn", session=session), key=lambda e: (e.created_at, e.id))


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def calls(*keys: str) -> list[ModelOutput | str]:
    return [ModelOutput.with_calls(ToolCall.of("slow", key=k), text=f"checking {k}") for k in keys]


def slow_tool(seconds: float, started: anyio.Event | None = None) -> object:
    """A tool that takes ``seconds``; ``started`` is set once a call is under way."""
    @tool
    async def slow(key: str) -> str:
        """Look something up, slowly."""
        if started is not None:
            started.set()
        await anyio.sleep(seconds)
        return f"{key}: reconciled"

    return slow


# ---- a real process, killed -----------------------------------------------------------------------


def test_turns_finished_a_second_before_a_sigkill_are_in_the_store(tmp_path: Path) -> None:
    db, log = tmp_path / "agent.db", tmp_path / "log.txt"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with subprocess.Popen(
        [sys.executable, str(HERE / "capture_child.py"), str(db), str(log), "60", "0.2"],
        env=env,
        stderr=subprocess.PIPE,
    ) as child:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:  # about 3 s of the run: ~15 tool calls finished
                lines = log.read_text().splitlines() if log.exists() else []
                if sum(line.startswith("done ") for line in lines) >= 15:
                    break
                assert child.poll() is None, child.stderr.read().decode() if child.stderr else ""
                time.sleep(0.05)
            else:
                pytest.fail("the child never got going")
            child.send_signal(signal.SIGKILL)
            killed_at = time.time()
            child.wait(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == -signal.SIGKILL

    lines = log.read_text().splitlines()
    session = next(line.split()[1] for line in lines if line.startswith("session "))
    finished = {int(p[1]): float(p[2]) for p in (line.split() for line in lines) if p[0] == "done"}
    settled = sorted(i for i, at in finished.items() if at < killed_at - 1.0)
    assert len(settled) >= 8  # the test means something only if many turns had time to settle

    with MemoryStore(db, embedder=None) as store:  # the file as the kill left it
        got = store.session_turns(session, limit=1000)
    assert all(t.kind == "turn" for t in got)
    contents = [t.content for t in got]
    assert contents[0] == "read every page of the billing ledger"
    tool_turns = [c for c in contents if c.startswith("[slow_page] ")]
    for i in settled:
        assert f"[slow_page] page {i}: the billing ledger row {i * 7} is reconciled" in tool_turns
        assert f"reading page {i}" in contents  # the model's turn that called it
    # Nothing after the kill, and the order is the run's order.
    written = [int(c.split()[2].rstrip(":")) for c in tool_turns]
    assert written == sorted(written) and set(written) <= set(finished)


# ---- in process -----------------------------------------------------------------------------------


async def test_turns_are_written_while_the_run_goes_on(store: MemoryStore, tmp_path: Path) -> None:
    seen: list[list[str]] = []

    @tool
    async def probe() -> str:
        """Wait, then look at the store from another connection."""
        await anyio.sleep(0.4)
        with MemoryStore(store.path, embedder=None) as other:
            seen.append([t.content for t in turns(other, session)])
        return "probed"

    model = ScriptedModel(
        [*calls("a"), ModelOutput.with_calls(ToolCall.of("probe"), text="probing"), "done"]
    )
    loop = AgentLoop(model, [slow_tool(0.01), probe], workspace=tmp_path)
    session = ""

    def remember_session(event: HookEvent) -> None:
        nonlocal session
        session = event.session

    loop.hooks.add(remember_session, Event.SESSION_START)
    wiring = attach_memory(loop, store, flush_interval=0.1)
    outcome = await loop.run(TASK)

    assert isinstance(outcome, Done)
    # Mid-run, the earlier turns were already in the file (the probe's own call turn too).
    assert seen == [[TASK, "checking a", "[slow] a: reconciled", "probing"]]
    assert [t.content for t in turns(store, session)] == [
        TASK, "checking a", "[slow] a: reconciled", "probing", "[probe] probed", "done"
    ]
    assert wiring.pending == 0 and writer_threads() == []


async def test_a_cancelled_run_flushes_before_it_returns(store: MemoryStore, tmp_path: Path) -> None:
    model = ScriptedModel(calls("a", "b"))
    started = anyio.Event()
    loop = AgentLoop(model, [slow_tool(30, started)], workspace=tmp_path)
    wiring = attach_memory(loop, store, flush_interval=30)  # nothing would be written in the background

    async def cancel_in_the_first_call() -> None:  # however long the machine takes to get there
        await started.wait()
        loop.cancel()

    async with anyio.create_task_group() as tg:
        tg.start_soon(cancel_in_the_first_call)
        outcome = await loop.run(TASK)
    assert isinstance(outcome, Cancelled)
    assert [t.content for t in turns(store, outcome.session)] == [TASK, "checking a"]
    assert wiring.pending == 0 and writer_threads() == []
    assert wiring.last_episode is not None and wiring.last_episode.episode.success is None


async def test_a_run_cancelled_from_outside_keeps_writing_until_closed(store: MemoryStore, tmp_path: Path) -> None:
    sessions: list[str] = []
    started = anyio.Event()
    loop = AgentLoop(ScriptedModel(calls("a")), [slow_tool(30, started)], workspace=tmp_path)
    loop.hooks.add(lambda e: sessions.append(e.session), Event.SESSION_START)
    with attach_memory(loop, store, flush_interval=0.05) as wiring:
        async with anyio.create_task_group() as outside:
            async def tear_down_in_the_first_call() -> None:
                await started.wait()
                outside.cancel_scope.cancel()

            outside.start_soon(tear_down_in_the_first_call)
            await loop.run(TASK)  # no SessionEnd: the run was torn down
        # The writer is still running and writes what was captured, within its interval (generous
        # for a busy machine: the wait ends as soon as they are there).
        deadline = time.monotonic() + 60
        while len(turns(store, sessions[0])) < 2 and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert len(writer_threads()) == 1
        assert [t.content for t in turns(store, sessions[0])] == [TASK, "checking a"]
    assert writer_threads() == [] and wiring.pending == 0


async def test_an_in_memory_store_writes_at_the_end(tmp_path: Path) -> None:
    with MemoryStore(":memory:", embedder=None) as store:
        loop = AgentLoop(ScriptedModel([*calls("a"), "done"]), [slow_tool(0.01)], workspace=tmp_path)
        attach_memory(loop, store)
        outcome = await loop.run(TASK)
        assert writer_threads() == []
        assert [t.content for t in turns(store, outcome.session)] == [
            TASK, "checking a", "[slow] a: reconciled", "done"
        ]


async def test_a_run_never_recalls_its_own_turns(store: MemoryStore, tmp_path: Path) -> None:
    # An earlier conversation about the ledger: the run may recall it.
    store.add("the billing ledger was reconciled last quarter by Ana", role="user", session="earlier")
    model = ScriptedModel([*calls("ledger-1", "ledger-2"), "done"])
    loop = AgentLoop(model, [slow_tool(0.3)], workspace=tmp_path)
    wiring = attach_memory(loop, store, guides=False, flush_interval=0.05)
    guide = MemoryGuide(store, kind=None, exclude=wiring.is_own)
    loop.guides.append(guide)
    outcome = await loop.run(TASK)

    assert isinstance(outcome, Done)
    # By the last call the run's own turns (its task, "checking ledger-1", results) were in the
    # file -- and the only recalled line is the earlier conversation's.
    assert len(turns(store, outcome.session)) == 6
    expected = format_memory_block(["the billing ledger was reconciled last quarter by Ana"])
    assert [r.guides[0] for r in model.requests] == [expected] * 3
    # Between runs nothing is "own": the same guide now finds this run's turns too.
    assert any(h.entry.session == outcome.session for h in guide.recall(TASK))


async def test_own_turns_with_a_session_spanning_runs_are_this_runs_only(store: MemoryStore, tmp_path: Path) -> None:
    first = AgentLoop(ScriptedModel(["ledger answer one"]), [], workspace=tmp_path)
    attach_memory(first, store, session="chat-7")
    await first.run("first question about the ledger")

    seen: list[list[str]] = []
    model = ScriptedModel([*calls("ledger"), "ledger answer two"])
    second = AgentLoop(model, [slow_tool(0.3)], workspace=tmp_path)
    wiring = attach_memory(second, store, session="chat-7", guides=False, flush_interval=0.05)

    class Spy:
        def render(self, query: str) -> str:
            hits = store.recall("ledger", k=20, kind="turn")
            seen.append(sorted(h.entry.content for h in hits if not wiring.is_own(h.entry)))
            return ""

    second.guides.append(Spy())
    await second.run("second question about the ledger")
    # The first run's turns stay recallable in the shared session; the second run's own do not.
    assert seen[-1] == ["first question about the ledger", "ledger answer one"]
    assert wiring.own_session is None  # the run is over


async def test_the_recall_cache_ignores_the_runs_own_writes(store: MemoryStore, tmp_path: Path) -> None:
    store.add("the billing ledger lives in the finance schema", kind="note")
    model = ScriptedModel([*calls("a", "b", "c"), "done"])
    loop = AgentLoop(model, [slow_tool(0.15)], workspace=tmp_path)
    wiring = attach_memory(loop, store, flush_interval=0.05)
    outcome = await loop.run(TASK)
    assert isinstance(outcome, Done) and len(turns(store, outcome.session)) == 8
    # Turns were written between every pair of model calls, and yet each guide recalled once.
    assert [g.renders for g in wiring.guides if isinstance(g, CachedGuide)] == [1, 1]


async def test_the_recall_cache_still_sees_other_writers(store: MemoryStore, tmp_path: Path) -> None:
    @tool
    async def other_process_writes() -> str:
        """Stand in for another process writing a note."""
        with MemoryStore(store.path, embedder=None) as other:
            other.add("the billing ledger closes on the 5th", kind="note")
        await anyio.sleep(0.5)  # the writer samples the file's version within its interval (0.05 s)
        return "ok"

    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("other_process_writes")), "done"])
    loop = AgentLoop(model, [other_process_writes], workspace=tmp_path)
    attach_memory(loop, store, flush_interval=0.05)
    await loop.run(TASK)
    assert model.requests[0].guides == ()  # nothing to recall yet
    assert "closes on the 5th" in model.requests[1].guides[0]

