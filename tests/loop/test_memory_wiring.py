"""Memory in the loop: recall guides, transcript capture with its flush guarantee, an episode per run."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from harness_loop.chat import ModelOutput, ModelRequest, ScriptedModel, ToolCall
from harness_loop.guards import FilesExist
from harness_loop.hooks import Deny, Event, HookEvent
from harness_loop.loop import (
    AgentLoop,
    BudgetExhausted,
    Cancelled,
    Done,
    Guide,
    Stuck,
    Unverified,
)
from harness_loop.memory import (
    MEMORY_HEADER,
    CachedGuide,
    MemoryGuide,
    MemoryWiring,
    attach_memory,
    format_memory_block,
    run_success,
)
from harness_loop.tools import tool
from harness_mem import Entry, Episode, ExperienceStore, MemoryStore
from harness_mem.db import connect
from harness_mem.errors import EmbedderError, ModelError
from harness_mem.experience.consolidate import consolidate
from harness_mem.experience.store import GUIDE_HEADER, ExperienceGuide, ExperienceRecorder

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TASK = "deploy the billing service to staging"
ANSWER = "Deployed billing to staging-eu; health checks pass."


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MemoryStore]:
    with MemoryStore(tmp_path / "memory.db", embedder=None) as opened:
        yield opened


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    return f"{key}: staging-eu"


def tool_then_answer(answer: str = ANSWER, key: str = "billing") -> ScriptedModel:
    return ScriptedModel([ModelOutput.with_calls(ToolCall.of("lookup", key=key)), answer])


def turns(store: MemoryStore, session: str) -> list[Entry]:
    return sorted(store.list(kind="turn", session=session), key=lambda e: (e.created_at, e.id))


def blocks(request: ModelRequest, header: str) -> list[str]:
    return [g for g in request.guides if g.startswith(header)]


# ---- MemoryGuide ---------------------------------------------------------------------------------


def test_memory_block_has_a_fixed_format_and_is_empty_without_hits(store: MemoryStore) -> None:
    store.add("the billing service deploys to staging-eu", kind="note")
    store.add("billing invoices are due monthly", kind="fact")
    guide = MemoryGuide(store)
    assert guide.render(TASK) == (
        "[memory-recall]\nRelevant prior context (from your long-term memory):"
        "\n  1. the billing service deploys to staging-eu"
        "\n  2. billing invoices are due monthly"
    )
    assert guide.render("quantum chromodynamics") == ""
    assert guide.render("") == ""
    assert format_memory_block([]) == ""
    assert format_memory_block(["two\nlines"]) == MEMORY_HEADER + "\n  1. two\n     lines"


def test_memory_guide_recalls_curated_kinds_unless_told_otherwise(store: MemoryStore) -> None:
    store.add("billing note", kind="note")
    store.add("billing user turn", role="user", session="s1")
    ExperienceStore(store).record(Episode("billing deploy", "ok"))
    assert [h.entry.kind for h in MemoryGuide(store).recall("billing")] == ["note"]
    assert {h.entry.kind for h in MemoryGuide(store, kind=None).recall("billing")} == {
        "note",
        "turn",
        "episode",
    }
    assert [h.entry.kind for h in MemoryGuide(store, kind="turn", role="user").recall("billing")] == ["turn"]


def test_memory_guide_filters_top_k_min_score_exclusions_and_duplicates(store: MemoryStore) -> None:
    for i in range(8):
        store.add(f"billing note {i}", kind="note", tags=["ops"] if i % 2 else ["secret"])
    store.add("billing note 1", kind="note", tags=["ops"])  # a duplicate of an earlier note
    assert len(MemoryGuide(store, top_k=3).recall("billing")) == 3
    ops = MemoryGuide(store, top_k=10, tags=["ops"]).recall("billing")
    assert {h.entry.content for h in ops} == {
        "billing note 1",
        "billing note 3",
        "billing note 5",
        "billing note 7",
    }
    assert len(ops) == 4  # the duplicate is shown once
    kept = MemoryGuide(store, top_k=10, exclude_tags=["secret"]).recall("billing")
    assert kept and all("secret" not in h.entry.tags for h in kept)
    assert MemoryGuide(store, min_score=1e9).render("billing") == ""
    assert MemoryGuide(store, top_k=0).render("billing") == ""


def test_memory_guide_checks_its_mode_when_built(store: MemoryStore) -> None:
    with pytest.raises(EmbedderError):
        MemoryGuide(store, mode="semantic")  # no embedder: fail now, not at the first model call
    MemoryGuide(store, mode="keyword")


def test_both_guides_satisfy_the_loop_guide_protocol(store: MemoryStore) -> None:
    # harness_mem's ExperienceGuide needs no adapter: render(query) -> str is the whole protocol.
    assert isinstance(ExperienceGuide(ExperienceStore(store)), Guide)
    assert isinstance(MemoryGuide(store), Guide)


def test_cached_guide_recalls_again_only_when_the_store_changes(store: MemoryStore, tmp_path: Path) -> None:
    store.add("billing deploys to staging-eu", kind="note")
    cached = CachedGuide(MemoryGuide(store), store)
    first = cached.render("billing")
    assert cached.render("billing") == first and cached.renders == 1
    assert cached.render("staging") != "" and cached.renders == 2  # another query
    cached.render("billing")
    store.add("billing needs a VPN", kind="note")  # a write on this connection
    assert "VPN" in cached.render("billing") and cached.renders == 4
    with MemoryStore(store.path, embedder=None) as other:  # a write by another connection
        other.add("billing owner is the payments team", kind="note")
    assert "payments team" in cached.render("billing") and cached.renders == 5
    expiring = CachedGuide(MemoryGuide(store), store, max_age=0)
    expiring.render("billing")
    expiring.render("billing")
    assert expiring.renders == 2
    assert isinstance(cached, Guide)


# ---- run_success ---------------------------------------------------------------------------------


def test_run_success_follows_the_acceptance_verdict() -> None:
    from harness_loop.guards import Verdict

    assert run_success(Done(iters=1, tools_called=0, text="ok")) is True
    assert run_success(Unverified(iters=2, tools_called=0, text="x", verdict=Verdict(False, "no"))) is False
    assert run_success(Stuck(iters=6, tools_called=6, reason="loop", repeated=6)) is False
    assert run_success(BudgetExhausted(iters=3, tools_called=3)) is False
    assert run_success(BudgetExhausted(iters=1, tools_called=0, deadline_reached=True)) is False
    assert run_success(Cancelled(iters=1, tools_called=0)) is None


# ---- a wired run ---------------------------------------------------------------------------------


async def test_transcript_turns_are_in_the_store_when_the_run_returns(
    store: MemoryStore, tmp_path: Path
) -> None:
    model = ScriptedModel(
        [ModelOutput.with_calls(ToolCall.of("lookup", key="billing"), text="Let me look that up."), ANSWER]
    )
    loop = AgentLoop(model, [lookup], workspace=tmp_path)
    wiring = attach_memory(loop, store)
    outcome = await loop.run(TASK)

    assert isinstance(outcome, Done)
    assert wiring.last_session == outcome.session and wiring.pending == 0
    got = turns(store, outcome.session)
    assert [(t.role, t.content) for t in got] == [
        ("user", TASK),
        ("assistant", "Let me look that up."),
        ("tool", "[lookup] billing: staging-eu"),
        ("assistant", ANSWER),
    ]
    assert all(t.session == outcome.session and f"session:{outcome.session}" in t.tags for t in got)
    assert got[2].metadata == {"tool": "lookup"}
    assert "result:success" in got[-1].tags  # the final answer carries the run's result
    assert wiring.transcript_stats is not None and wiring.transcript_stats.written == 4


async def test_hooks_only_enqueue_and_the_run_end_flushes(store: MemoryStore, tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    @tool
    def probe() -> str:
        """Look at the store mid-run."""
        seen["turns during the run"] = store.count(kind="turn")
        seen["pending during the run"] = wiring.pending
        return "probed"

    loop = AgentLoop(
        ScriptedModel([ModelOutput.with_calls(ToolCall.of("probe")), "done"]), [probe], workspace=tmp_path
    )
    # A long interval: the background writer does not get to write before the run ends.
    wiring = attach_memory(loop, store, flush_interval=60)
    outcome = await loop.run(TASK)
    # Queued, not written: the task and the model's (blank, tool-call-only) turn, which the writer drops.
    assert seen == {"turns during the run": 0, "pending during the run": 2}
    assert len(turns(store, outcome.session)) == 3 and wiring.pending == 0


async def test_a_run_that_raises_is_written_on_leaving_the_block(store: MemoryStore, tmp_path: Path) -> None:
    class Failing(ScriptedModel):
        async def complete(self, request: ModelRequest) -> ModelOutput:
            if self.remaining == 0:
                raise ModelError("the server went away")
            return await super().complete(request)

    sessions: list[str] = []
    loop = AgentLoop(
        Failing([ModelOutput.with_calls(ToolCall.of("lookup", key="a"))]), [lookup], workspace=tmp_path
    )
    loop.hooks.add(lambda e: sessions.append(e.session), Event.SESSION_START)
    with attach_memory(loop, store, flush_interval=60) as wiring:
        with pytest.raises(ModelError):
            await loop.run(TASK)
        # No SessionEnd: the turns (task, tool-call turn, tool result) wait for the writer's next
        # batch (an interval away here) or the block's end.
        assert wiring.pending == 3 and store.count(kind="turn") == 0
    assert [t.role for t in turns(store, sessions[0])] == ["user", "tool"]
    assert ExperienceStore(store).count() == 0  # no outcome, no episode


async def test_the_next_run_writes_what_a_raised_run_left(store: MemoryStore, tmp_path: Path) -> None:
    class FailOnce(ScriptedModel):
        failed = False

        async def complete(self, request: ModelRequest) -> ModelOutput:
            if not self.failed:
                self.failed = True
                raise ModelError("flaky")
            return await super().complete(request)

    sessions: list[str] = []
    loop = AgentLoop(FailOnce(["fine"]), [], workspace=tmp_path)
    loop.hooks.add(lambda e: sessions.append(e.session), Event.SESSION_START)
    attach_memory(loop, store)
    with pytest.raises(ModelError):
        await loop.run("first task")
    await loop.run("second task")
    assert [t.content for t in turns(store, sessions[0])] == ["first task"]
    assert [t.content for t in turns(store, sessions[1])] == ["second task", "fine"]


async def test_guides_inject_each_block_once_replaced_not_stacked(store: MemoryStore, tmp_path: Path) -> None:
    store.add("the billing service deploys to staging-eu", kind="note")
    ExperienceStore(store).record(
        Episode("deploy the billing service to prod", "rolled out", tools=["lookup"], success=True)
    )

    @tool
    def remember(text: str) -> str:
        """Save a note."""
        store.add(text, kind="note")
        return "saved"

    model = ScriptedModel(
        [
            ModelOutput.with_calls(ToolCall.of("lookup", key="billing")),
            ModelOutput.with_calls(ToolCall.of("remember", text="billing staging needs a VPN")),
            ANSWER,
        ]
    )
    loop = AgentLoop(model, [lookup, remember], workspace=tmp_path)
    attach_memory(loop, store)
    await loop.run(TASK)

    assert len(model.requests) == 3
    for request in model.requests:
        assert len(request.guides) == 2
        assert len(blocks(request, MEMORY_HEADER)) == 1
        assert len(blocks(request, GUIDE_HEADER)) == 1
        assert "deploy the billing service to prod" in blocks(request, GUIDE_HEADER)[0]
        # Blocks sit beside the history, never in it.
        assert not any(
            "[memory-recall]" in m.content or "[experience-recall]" in m.content for m in request.messages
        )
    # Replaced: the note written mid-run shows up in the next call's (single) memory block.
    assert "VPN" not in blocks(model.requests[1], MEMORY_HEADER)[0]
    assert "VPN" in blocks(model.requests[2], MEMORY_HEADER)[0]
    # Recalled once, then again only after the write (the loop's query is always the task).
    assert [g.renders for g in loop.guides if isinstance(g, CachedGuide)] == [2, 2]


async def test_episode_after_a_passing_run(store: MemoryStore, tmp_path: Path) -> None:
    loop = AgentLoop(tool_then_answer(), [lookup], workspace=tmp_path)
    wiring = attach_memory(loop, store)
    outcome = await loop.run(TASK)

    stored = ExperienceStore(store).list()
    assert len(stored) == 1 and wiring.last_episode is not None
    assert stored[0].id == wiring.last_episode.id == f"session:{outcome.session}"
    assert stored[0].episode == Episode(TASK, ANSWER, tools=["lookup"], success=True)
    assert store.get(stored[0].entry_id or "").session == outcome.session


async def test_episode_after_an_unverified_run_is_a_failure(store: MemoryStore, tmp_path: Path) -> None:
    model = ScriptedModel(["I wrote the report.", "I really wrote the report."])
    loop = AgentLoop(model, [], workspace=tmp_path, acceptance=[FilesExist(["report.md"])])
    wiring = attach_memory(loop, store)
    outcome = await loop.run("write report.md")

    assert isinstance(outcome, Unverified)
    ep = ExperienceStore(store).get(f"session:{outcome.session}").episode
    assert ep.success is False and ep.outcome == "I really wrote the report."
    final = turns(store, outcome.session)[-1]
    assert final.content == "I really wrote the report." and "result:failure" in final.tags
    assert wiring.last_error is None


async def test_a_run_without_an_answer_records_how_it_ended(store: MemoryStore, tmp_path: Path) -> None:
    model = ScriptedModel([ModelOutput.with_calls(ToolCall.of("lookup", key="same")) for _ in range(10)])
    loop = AgentLoop(model, [lookup], workspace=tmp_path)
    wiring = attach_memory(loop, store)
    outcome = await loop.run(TASK)

    assert isinstance(outcome, Stuck)
    assert wiring.last_episode is not None
    ep = wiring.last_episode.episode
    assert ep.success is False and ep.outcome.startswith("(no answer: stuck: ")
    assert ep.tools == ["lookup"] * outcome.tools_called
    final = turns(store, outcome.session)[-1]
    assert (
        final.role == "system"
        and final.content.startswith("[run ended: stuck")
        and "result:failure" in final.tags
    )


async def test_a_cancelled_run_has_an_unknown_result(store: MemoryStore, tmp_path: Path) -> None:
    cancel = anyio.Event()
    cancel.set()
    loop = AgentLoop(ScriptedModel(["never"]), [], workspace=tmp_path)
    wiring = attach_memory(loop, store)
    outcome = await loop.run(TASK, cancel=cancel)
    assert isinstance(outcome, Cancelled)
    assert wiring.last_episode is not None and wiring.last_episode.episode.success is None


async def test_a_second_run_recalls_the_first_runs_episode(store: MemoryStore, tmp_path: Path) -> None:
    first = AgentLoop(tool_then_answer(), [lookup], workspace=tmp_path)
    attach_memory(first, store)
    await first.run(TASK)

    model = tool_then_answer("Done again.")
    second = AgentLoop(model, [lookup], workspace=tmp_path)
    attach_memory(second, store)
    await second.run("deploy the billing service to staging again")

    experience = blocks(model.requests[0], GUIDE_HEADER)
    assert experience == [
        GUIDE_HEADER + f"\n  1. situation: {TASK}\n     tools used: lookup\n     outcome: {ANSWER}"
    ]
    assert ExperienceStore(store).count() == 2


async def test_tool_results_are_stored_redacted(store: MemoryStore, tmp_path: Path) -> None:
    @tool
    def whois(name: str) -> dict[str, str]:
        """Contact details."""
        return {"name": name, "email": "alice.smith@example.com"}

    model = ScriptedModel(
        [ModelOutput.with_calls(ToolCall.of("whois", name="alice")), "Mail alice.smith@example.com."]
    )
    loop = AgentLoop(model, [whois], workspace=tmp_path)
    attach_memory(loop, store)
    outcome = await loop.run("who owns billing?")

    tool_turn = next(t for t in turns(store, outcome.session) if t.role == "tool")
    assert tool_turn.content.startswith("[whois] ") and "<EMAIL>" in tool_turn.content
    # Nothing unredacted anywhere in the file's rows (read through a second connection).
    raw = connect(store.path)
    try:
        rows = raw.execute("SELECT content FROM entries UNION ALL SELECT outcome FROM episodes").fetchall()
    finally:
        raw.close()
    assert rows and not any("alice.smith@example.com" in r[0] for r in rows)


async def test_denied_calls_are_not_tools_used(store: MemoryStore, tmp_path: Path) -> None:
    model = ScriptedModel(
        [ModelOutput.with_calls(ToolCall.of("lookup", key="a"), ToolCall.of("lookup", key="forbidden")), "ok"]
    )
    loop = AgentLoop(model, [lookup], workspace=tmp_path)
    loop.hooks.add(
        lambda e: Deny("no") if e.call is not None and e.call.args == {"key": "forbidden"} else None,
        Event.PRE_TOOL_USE,
    )
    wiring = attach_memory(loop, store)
    outcome = await loop.run(TASK)
    assert outcome.tools_called == 1
    assert wiring.last_episode is not None and wiring.last_episode.episode.tools == ["lookup"]


async def test_a_memory_write_failure_never_costs_the_outcome(store: MemoryStore, tmp_path: Path) -> None:
    class Broken(ExperienceStore):
        def save(self, *args: Any, **kwargs: Any) -> Any:
            raise OSError("disk full")

    loop = AgentLoop(tool_then_answer(), [lookup], workspace=tmp_path)
    wiring = attach_memory(loop, store, experience=Broken(store))
    outcome = await loop.run(TASK)
    assert isinstance(outcome, Done)
    assert wiring.last_episode is None and wiring.last_error is not None and "disk full" in wiring.last_error
    assert len(turns(store, outcome.session)) == 3  # the transcript still went in


async def test_consolidation_updates_the_runs_episode_instead_of_adding_one(
    store: MemoryStore, tmp_path: Path
) -> None:
    for task in (TASK, "write report.md"):
        acceptance = [FilesExist(["report.md"])] if "report" in task else None
        loop = AgentLoop(tool_then_answer(), [lookup], workspace=tmp_path, acceptance=acceptance)
        attach_memory(loop, store)
        await loop.run(task)
    recorded = {s.id: s.episode for s in ExperienceStore(store).list()}
    report = consolidate(store)
    assert consolidate(store).to_dict() is not None  # and again: nothing more to do
    episodes = {s.id: s.episode for s in ExperienceStore(store).list()}
    assert episodes == recorded  # the runs' own episodes are kept as they were, not rebuilt
    assert {e.situation for e in episodes.values()} == {TASK, "write report.md"}
    assert all(r.action == "skipped" for r in report.sessions)


async def test_a_fixed_session_spans_runs(store: MemoryStore, tmp_path: Path) -> None:
    outcomes = []
    for task in ("first question", "second question"):
        loop = AgentLoop(ScriptedModel(["answer"]), [], workspace=tmp_path)
        attach_memory(loop, store, session="chat-42")
        outcomes.append(await loop.run(task))
    got = turns(store, "chat-42")
    assert [t.content for t in got if t.role == "user"] == ["first question", "second question"]
    assert {f"run:{o.session}" for o in outcomes} <= {tag for t in got for tag in t.tags}
    stored = ExperienceStore(store).list()
    assert len(stored) == 2 and len({s.id for s in stored}) == 2


async def test_options_turn_parts_off(store: MemoryStore, tmp_path: Path) -> None:
    recorder = ExperienceRecorder(ExperienceStore(store))
    model = tool_then_answer()
    loop = AgentLoop(model, [lookup], workspace=tmp_path)
    wiring = attach_memory(loop, store, experience=recorder, guides=False, transcripts=False)
    recorder.on_skill_activated({"skill": "deploy-runbook"})  # cleared: traces start with the run
    assert isinstance(wiring, MemoryWiring) and loop.guides == []
    await loop.run(TASK)
    assert model.requests[0].guides == () and store.count(kind="turn") == 0
    assert wiring.last_episode is not None and wiring.last_episode.episode.skills == []

    loop = AgentLoop(tool_then_answer(), [lookup], workspace=tmp_path)
    attach_memory(loop, store, record_episode=False)
    await loop.run(TASK)
    assert ExperienceStore(store).count() == 1 and store.count(kind="turn") == 3


# ---- the example ---------------------------------------------------------------------------------


def test_the_example_runs_offline_and_remembers(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_LOOP_")}
    env["HF_HUB_OFFLINE"] = "1"
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "agent_with_memory.py"),
            "--db",
            str(db),
            "-w",
            str(workspace),
            "--keyword-only",
            "What is in this workspace?",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("(offline demo) I listed the workspace")
    assert "episode session:" in result.stderr
    with MemoryStore(db, embedder=None) as store:
        assert [t.role for t in sorted(store.list(kind="turn"), key=lambda e: e.created_at)] == [
            "user",
            "tool",
            "assistant",
        ]
        assert "notes.txt" in next(iter(store.list(kind="turn", role="tool"))).content
        episodes = ExperienceStore(store).list()
        assert (
            len(episodes) == 1 and episodes[0].episode.tools == ["list_dir"] and episodes[0].episode.success
        )


def test_the_example_talks_to_an_openai_compatible_server(tmp_path: Path) -> None:
    import httpx

    with subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("fake_openai_server.py")),
            "--port",
            "0",
            "--lifetime",
            "60",
        ],
        stdout=subprocess.PIPE,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            base = f"http://127.0.0.1:{server.stdout.readline().split()[1]}"
            call = {
                "id": "c1",
                "type": "function",
                "function": {"name": "list_dir", "arguments": '{"path": "."}'},
            }
            replies = [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "assistant", "content": "Two files."},
            ]
            script = [
                {"status": 200, "body": {"choices": [{"index": 0, "message": m, "finish_reason": "stop"}]}}
                for m in replies
            ]
            httpx.post(f"{base}/_script", json={"responses": script}).raise_for_status()
            env = {**os.environ, "HARNESS_LOOP_MODEL_URL": f"{base}/v1", "HARNESS_LOOP_MODEL": "fake"}
            result = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "examples" / "agent_with_memory.py"),
                    "--db",
                    str(tmp_path / "agent.db"),
                    "-w",
                    str(tmp_path),
                    "--keyword-only",
                    "--note",
                    "the workspace files are fixtures",
                    "What files are in the workspace?",
                ],
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
            sent = httpx.get(f"{base}/_requests").json()
        finally:
            server.terminate()
            server.wait(timeout=5)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Two files.\n"
    system = sent[0]["body"]["messages"][0]
    assert system["role"] == "system" and "[memory-recall]" in system["content"]
    assert "the workspace files are fixtures" in system["content"]
    with MemoryStore(tmp_path / "agent.db", embedder=None) as store:
        assert ExperienceStore(store).list()[0].episode.outcome == "Two files."


def test_event_shape_the_wiring_relies_on() -> None:
    # SessionEnd carries the outcome and SessionStart the task: the loop needs no change for memory.
    assert {"outcome", "task", "output", "call", "result", "session"} <= set(HookEvent.__dataclass_fields__)
