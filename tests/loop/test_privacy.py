"""Nothing unredacted reaches the disk from harness_loop either: PII of every kind the default
detectors cover, sent through the orchestrator (goal, prompts, results, errors, feedback, events,
ids), the agent loop (spilled results, recordings, transcripts, episodes) and a whole run with memory
attached, must not appear in any byte of the database, its -wal and -shm, or any file the run wrote.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pii import (
    EVERY_FORM,
    FORMS,
    PII,
    SAMPLES,
    SLOW_PATH,
    assert_absent,
    every_written_byte,
    grouped,
    luhn,
    straddling,
)

from harness_loop.chat import ModelOutput, ScriptedModel, ToolCall
from harness_loop.cli import main
from harness_loop.job import Job, JobResult, RetryPolicy
from harness_loop.loop import AgentLoop, Done, LoopConfig
from harness_loop.memory import attach_memory
from harness_loop.openai_client import OpenAIChatModel
from harness_loop.orchestrator import Orchestrator
from harness_loop.record import SessionRecorder, read_session, replay
from harness_loop.route import Next
from harness_loop.runs import RunState
from harness_loop.runstore import NewEvent, RunRecord, RunStore
from harness_loop.spill import PREVIEW_BYTES, SPILL_DIR
from harness_loop.tools import tool
from harness_loop.workers import Worker, submit
from harness_mem.experience import DEFAULT_MAX_CHARS
from harness_mem.redaction import Redactor
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio

V = SAMPLES


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_the_samples_are_all_redacted() -> None:
    """The proofs below mean something only if every sample is one the redactor finds."""
    redactor = Redactor.default()
    for value in V:
        assert_absent([value], redactor.scrub(f"see {value} now").text.encode(), heads=True)


# ---- the orchestrator ---------------------------------------------------------------------------


def postgres_values(target: str) -> bytes:
    """Every row of every table in the target's schema, as text: what a PostgreSQL store wrote."""
    import psycopg

    with psycopg.connect(target, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()").fetchall()]
        return b"\n".join(str(row[0]).encode() for table in tables
                          for row in conn.execute(f'SELECT t::text FROM "{table}" t').fetchall())


def written(target: str, tmp_path: Path) -> bytes:
    """What a run store on ``target`` left behind: the SQLite file's bytes, or the PostgreSQL rows."""
    return postgres_values(target) if target.startswith("postgresql://") else every_written_byte(tmp_path)


async def test_an_orchestrated_run_stores_no_raw_pii(tmp_path: Path, run_target: str) -> None:
    db = run_target
    verdicts = iter([Next.back_to_with("draft", f"too vague: name {V[6]} explicitly")])

    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        if job.id == "notify":
            raise RuntimeError(f"could not reach {V[1]} or {V[2]}")
        return JobResult(text=f"{job.id} done: contact {V[3]}, card {V[4]}")

    jobs = [
        Job(id=f"lookup {V[0]}", prompt=f"find the account of {V[0]} and {V[5]}"),
        Job(id="draft", prompt=f"draft a reply to {V[7]}", deps=[f"lookup {V[0]}"]),
        Job(id="review", prompt="check the draft", deps=["draft"]),
        Job(id="notify", prompt=f"text {V[8]}", deps=["review"], retry=RetryPolicy(max_attempts=2)),
    ]
    with RunStore.open(db) as store:
        orchestrator = Orchestrator(runner, store=store).route("review", lambda result: next(verdicts, Next.Continue()))
        report = await orchestrator.run(f"help {V[9]} with {V[10]}", jobs, run_id=f"run {V[11]}")
        assert report.state is RunState.FAILED and report.job("notify").error
        # Looked up by its raw id, the run is found; what comes back is the redacted text.
        stored = store.load(f"run {V[11]}")
        assert stored.run.redacted is True and stored.run.id.startswith("run <API_KEY:")
        assert stored.run.goal == "help <SSN> with <API_KEY>"
        assert stored.job("notify").last_error == "could not reach ************6467 or **** **** **** 1888"
        assert [job.job_id for job in stored.jobs][0].startswith("lookup <EMAIL:")
        assert stored.jobs[1].deps == (stored.jobs[0].job_id,)
        events = store.events(f"run {V[11]}")
        assert any(e.kind == "job.failed" for e in events)
        assert {e.job_id for e in events if e.job_id} >= {stored.jobs[0].job_id}
        # A stored run cancelled later: its reason passes the redactor too.
        store.create(RunRecord(id=f"later {V[0]}", goal="wait"), [], [NewEvent("run.created", data={"who": V[1]})])
        assert orchestrator.cancel(f"later {V[0]}", reason=f"asked by {V[2]}")
        assert store.load(f"later {V[0]}").run.state == "cancelled"
    assert_absent(V, written(db, tmp_path))


async def test_a_run_drained_by_workers_stores_no_raw_pii(tmp_path: Path, run_target: str) -> None:
    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        if job.id.startswith("notify"):
            raise RuntimeError(f"could not reach {V[1]} or {V[2]}")
        return JobResult(text=f"{job.id} done: contact {V[3]}, card {V[4]}, after {sorted(upstream)}")

    jobs = [
        Job(id=f"lookup {V[0]}", prompt=f"find the account of {V[0]} and {V[5]}"),
        Job(id="draft", prompt=f"draft a reply to {V[7]}", deps=[f"lookup {V[0]}"]),
        Job(id=f"notify {V[8]}", prompt=f"text {V[8]}", deps=["draft"], retry=RetryPolicy(max_attempts=2)),
    ]
    with RunStore.open(run_target) as store:
        run_id = submit(store, f"help {V[9]} with {V[10]}", jobs, run_id=f"run {V[11]}")
        await Worker(runner, store=store, poll_s=0.01, owner=f"worker of {V[6]}:1:a").drain(run_id)
        stored = store.load(run_id)  # found by its raw id; what comes back is redacted
        assert stored.run.state == "failed" and stored.run.goal == "help <SSN> with <API_KEY>"
        assert stored.jobs[0].job_id.startswith("lookup <EMAIL:") and stored.jobs[1].deps == (stored.jobs[0].job_id,)
        assert stored.jobs[2].last_error == "could not reach ************6467 or **** **** **** 1888"
    assert_absent(V, written(run_target, tmp_path))


def test_a_run_store_on_a_memory_store_uses_its_redactor_and_records_an_opt_out(tmp_path: Path) -> None:
    with MemoryStore(tmp_path / "a.db", embedder=None, redactor=None) as raw:
        runs = RunStore.on(raw)
        runs.create(RunRecord(id="r1", goal=f"mail {V[0]}"))
        assert runs.load("r1").run.goal == f"mail {V[0]}" and runs.load("r1").run.redacted is False
    with MemoryStore(tmp_path / "a.db", embedder=None) as memory:
        runs = RunStore.on(memory)
        runs.create(RunRecord(id="r2", goal=f"mail {V[0]}"))
        assert runs.load("r2").run.goal == "mail <EMAIL>" and runs.load("r2").run.redacted is True
        runs.save(RunRecord(id="r2", goal="", state="completed"))
        # One write without redaction marks the run for good.
        RunStore(memory.db.conn, redactor=None).save(RunRecord(id="r2", goal="", state="completed", reason=V[0]))
        assert runs.load("r2").run.redacted is False


def test_a_run_store_on_a_postgres_memory_store_uses_its_redactor(postgres_target: str) -> None:
    with MemoryStore(postgres_target, embedder=None, redactor=None) as raw, RunStore.on(raw) as runs:
        assert runs.engine == "postgresql" and runs.redactor is None
        runs.create(RunRecord(id="r1", goal=f"mail {V[0]}"))
        assert runs.load("r1").run.goal == f"mail {V[0]}" and runs.load("r1").run.redacted is False
    with MemoryStore(postgres_target, embedder=None, namespace=f"team {V[0]}") as memory, RunStore.on(memory) as runs:
        assert runs.namespace == memory.namespace and V[0] not in runs.namespace
        runs.create(RunRecord(id="r2", goal=f"mail {V[0]}"))
        assert runs.load("r2").run.goal == "mail <EMAIL>" and runs.load("r2").run.redacted is True


def test_the_file_keys_pseudonyms_the_same_for_memory_and_runs(run_target: str) -> None:
    with MemoryStore(run_target, embedder=None, namespace=f"team {V[0]}") as memory:
        memory.add("x", session=f"run {V[3]}")
        with RunStore.open(run_target, namespace=f"team {V[0]}") as runs:
            runs.create(RunRecord(id=f"run {V[3]}", goal="g"))
            assert runs.namespace == memory.namespace and V[0] not in runs.namespace
            assert runs.load(f"run {V[3]}").run.id == next(memory.list()).session


# ---- pruning finished runs' events ---------------------------------------------------------------


def test_runs_gc_prunes_only_finished_runs_old_events(tmp_path: Path, run_target: str) -> None:
    db = run_target
    with RunStore.open(db) as store:
        store.create(RunRecord(id="done", goal="g"), [], [NewEvent("run.created", data={"note": "zebracorn"})])
        store.save(RunRecord(id="done", goal="g", state="completed"), [], [NewEvent("run.completed")])
        store.create(RunRecord(id="live", goal="g", state="executing"), [], [NewEvent("run.created")])
        assert store.prune_events(0) == 0  # nothing is older than the epoch
    result = CliRunner().invoke(main, ["runs", "--db", str(db), "gc", "--events-older-than", "0s"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("1 run events pruned; 0 expired and 0 forgotten entries purged;")
    with RunStore.open(db) as store:
        assert [e.kind for e in store.events("done")] == ["run.completed"]
        assert store.load("done").run.state == "completed"
        assert [e.kind for e in store.events("live")] == ["run.created"]
        store.save(RunRecord(id="done", goal="g", state="completed"), [], [NewEvent("run.noted")])
        # The last event of a run stays, so its numbering carries on after a prune.
        assert [(e.seq, e.kind) for e in store.events("done")] == [(2, "run.completed"), (3, "run.noted")]
    assert_absent(["zebracorn"], written(db, tmp_path))
    bad = CliRunner().invoke(main, ["runs", "--db", str(db), "gc", "--events-older-than", "soon"])
    assert bad.exit_code == 1 and bad.stderr.startswith("Error: cannot read a time from 'soon'")
    assert "Traceback" not in bad.output


# ---- the agent loop: spill files, recordings, transcripts, episodes -----------------------------


def huge_result() -> str:
    """600 card numbers and as many AWS keys: far over the 24 KiB ceiling, so it is spilled."""
    cards = [luhn(f"4{i:014d}") for i in range(600)]
    keys = [f"AKIA{i:016d}" for i in range(600)]
    lines = [f"row {i}: card {grouped(card, ' ') if i % 2 else card}, key {key}"
             for i, (card, key) in enumerate(zip(cards, keys, strict=True))]
    return "\n".join(lines)


@tool
def export_customers(region: str) -> str:
    """Dump the customer table."""
    return huge_result()


@tool
def customer_record(email: str) -> dict[str, Any]:
    """A customer's record, with a huge notes field (spilled, the rest kept as meta)."""
    return {"email": email, "phone": V[5], "notes": huge_result()}


@tool(read_only=True)
def lookup(email: str) -> dict[str, Any]:
    """A small result: it stays in the context, unspilled."""
    return {"email": email, "iban": V[7], "ok": True}


def script() -> list[ModelOutput | str]:
    return [
        ModelOutput.with_calls(ToolCall.of("lookup", email=V[0]), text=f"Looking up {V[0]}."),
        ModelOutput.with_calls(ToolCall.of("export_customers", region=f"near {V[6]}"),
                               ToolCall.of("customer_record", email=V[0])),
        f"The customer {V[0]} has card {V[1]} and phone {V[4]}.",
    ]


async def test_spill_files_hold_no_raw_pii(tmp_path: Path) -> None:
    raw = huge_result()
    loop = AgentLoop(ScriptedModel(script()), [lookup, export_customers, customer_record], workspace=tmp_path)
    outcome = await loop.run(f"Export the customers of {V[9]}")
    assert isinstance(outcome, Done)
    spilled = sorted((tmp_path / SPILL_DIR).iterdir())
    assert len(spilled) == 2 and all(p.stat().st_size > 10_000 for p in spilled)
    text = "\n".join(p.read_text(encoding="utf-8") for p in spilled)
    assert text.count("<API_KEY>") == 1200 and text.count("************") >= 600
    markers = [json.loads(m.content) for m in outcome.transcript if m.content.startswith('{"spilled"')]
    assert len(markers) == 2 and all("AKIA" not in m["preview"] for m in markers)
    secrets = [*V, *(line.split("key ")[1] for line in raw.splitlines()[:50]),
               *(line.split("card ")[1].split(",")[0] for line in raw.splitlines()[:50])]
    assert_absent(secrets, every_written_byte(tmp_path))


async def test_spilling_without_a_redactor_is_explicit(tmp_path: Path) -> None:
    loop = AgentLoop(ScriptedModel(script()), [lookup, export_customers, customer_record], workspace=tmp_path,
                     redactor=None)
    await loop.run("export")
    assert "AKIA0000000000000000" in "".join(p.read_text() for p in (tmp_path / SPILL_DIR).iterdir())


async def test_a_recording_holds_no_raw_pii_and_replays_from_the_redacted_text(tmp_path: Path) -> None:
    recorder = SessionRecorder.create(tmp_path / "sessions")
    with recorder:
        loop = AgentLoop(ScriptedModel(script()), [lookup, export_customers, customer_record],
                         workspace=tmp_path / "work", recorder=recorder)
        outcome = await loop.run(f"Export the customers of {V[9]}, then mail {V[0]}")
    session = read_session(recorder.path)
    start = session.of_kind("start")[0]
    assert start["redacted"] is True and "<EMAIL>" in start["task"]
    assert_absent(V, every_written_byte(tmp_path))
    report = await replay(recorder.path)
    assert report.reproduced, report.divergences
    assert isinstance(report.outcome, Done) and "<EMAIL>" in report.outcome.text
    assert report.outcome.text != outcome.text  # the live run answered with the raw text


async def test_a_whole_run_with_memory_leaves_no_raw_pii_anywhere(tmp_path: Path) -> None:
    db = tmp_path / "agent.db"
    with MemoryStore(db, embedder=None) as store:
        store.add(f"{V[0]} prefers e-mail; their backup card is {V[1]}", kind="fact", session=f"user {V[0]}")
        recorder = SessionRecorder.create(tmp_path / "sessions")
        with recorder:
            loop = AgentLoop(ScriptedModel(script()), [lookup, export_customers, customer_record],
                             workspace=tmp_path / "work", recorder=recorder)
            with attach_memory(loop, store, session=f"user {V[0]}") as wiring:
                outcome = await loop.run(f"Export the customers of {V[9]} for {V[0]}")
        assert isinstance(outcome, Done) and wiring.last_error is None
        assert store.count(session=f"user {V[0]}", kind="turn") >= 3
        assert wiring.last_episode is not None
        with RunStore.on(store) as runs:
            runs.create(RunRecord(id=f"run {V[0]}", goal=f"follow up with {V[2]}"))
        await anyio.sleep(0)
    assert_absent(V, every_written_byte(tmp_path))


# ---- generated values of every form, through the orchestrator and a whole loop ---------------------


def by_form(values: list[str]) -> dict[str, str]:
    return dict(zip(FORMS, values, strict=True))


@SLOW_PATH
@given(values=EVERY_FORM)
def test_an_orchestrated_run_with_every_form_stores_no_raw_pii(tmp_path_factory: pytest.TempPathFactory,
                                                              values: list[str]) -> None:
    """Goal, prompts, results, errors, router feedback, events, cancel reasons, run and job ids."""
    root = tmp_path_factory.mktemp("orchestrated")
    every, pick = "; ".join(values), by_form(values)
    lookup, draft = f"lookup {pick['card-nbsp']}", f"draft {pick['ssn-bare']}"
    notify = f"notify {pick['key-slack-webhook']}"
    verdicts = iter([Next.back_to_with(draft, f"too vague: name {every}")])

    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        if job.id == notify:
            raise RuntimeError(f"could not reach {every}")
        return JobResult(text=f"{job.id} done: {every}")

    jobs = [
        Job(id=lookup, prompt=f"find the accounts of {every}"),
        Job(id=draft, prompt=f"draft a reply to {every}", deps=[lookup]),
        Job(id="review", prompt="check the draft", deps=[draft]),
        Job(id=notify, prompt=f"text {every}", deps=["review"], retry=RetryPolicy(max_attempts=2)),
    ]
    run_id = f"run {pick['secret-cookie']}"

    async def main() -> None:
        with RunStore.open(root / "agent.db") as store:
            orchestrator = Orchestrator(runner, store=store).route(
                "review", lambda result: next(verdicts, Next.Continue()))
            report = await orchestrator.run(f"help {every}", jobs, run_id=run_id)
            assert report.state is RunState.FAILED and report.job(notify).error
            stored = store.load(run_id)  # found by its raw id; what comes back is redacted
            assert stored.run.redacted is True and stored.jobs[-1].last_error
            assert [job.state for job in stored.jobs] == ["succeeded", "succeeded", "succeeded", "dead_lettered"]
            assert any(e.kind == "job.reentered" for e in store.events(run_id))
            later = f"later {pick['iban-lower']}"
            store.create(RunRecord(id=later, goal="wait"), [], [NewEvent("run.created", data={"who": list(values)})])
            assert orchestrator.cancel(later, reason=f"asked by {every}")

    anyio.run(main)
    assert_absent(values, every_written_byte(root))


@tool
def echo_all(rows: list[str]) -> str:
    """Every row, 24 KiB and more: spilled."""
    return "\n".join(f"row {i}: {row}" for i in range(12) for row in rows)


@tool
def record_of(email: str, rows: list[str]) -> dict[str, Any]:
    """A record with a huge notes field (spilled, the rest kept as meta)."""
    return {"email": email, "rows": rows[:5], "notes": "\n".join(f"note {i}: {row}" for i in range(12) for row in rows)}


@tool(read_only=True)
def find(query: str, rows: list[str]) -> dict[str, Any]:
    """A small result: it stays in the context, unspilled."""
    return {"query": query, "found": rows}


@SLOW_PATH
@given(values=EVERY_FORM)
def test_a_whole_run_with_every_form_leaves_no_raw_pii_anywhere(tmp_path_factory: pytest.TempPathFactory,
                                                               values: list[str]) -> None:
    """Spill files, the recording, transcript turns, the episode, a run record: all from one loop run."""
    root = tmp_path_factory.mktemp("loop")
    every, rows = "; ".join(values), [str(v) for v in values]
    script = [
        ModelOutput.with_calls(ToolCall.of("find", query=every, rows=rows), text=f"Looking up {every}."),
        ModelOutput.with_calls(ToolCall.of("echo_all", rows=rows), ToolCall.of("record_of", email=rows[0], rows=rows)),
        f"Done for {every}.",
    ]

    async def main() -> None:
        with MemoryStore(root / "agent.db", embedder=None) as store:
            store.add(every, kind="fact", session=f"user {values[0]}")
            recorder = SessionRecorder.create(root / "sessions")
            with recorder:
                loop = AgentLoop(ScriptedModel(script), [find, echo_all, record_of], workspace=root / "work",
                                 recorder=recorder)
                with attach_memory(loop, store, session=f"user {values[0]}") as wiring:
                    outcome = await loop.run(f"Export the customers of {every}")
            assert isinstance(outcome, Done) and wiring.last_error is None and wiring.last_episode is not None
            assert len(list((root / "work" / SPILL_DIR).iterdir())) == 2
            assert store.count(session=f"user {values[0]}", kind="turn") >= 3
            with RunStore.on(store) as runs:
                runs.create(RunRecord(id=f"run {values[1]}", goal=f"follow up with {every}"))

    anyio.run(main)
    assert_absent(values, every_written_byte(root))


# ---- truncation: a cut through a value leaves nothing of it -------------------------------------------

CUTS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def offsets(value: str) -> st.SearchStrategy[int]:
    """How far into ``value`` a cut falls: never at its edges."""
    return st.integers(1, len(value) - 1)


@tool
def text_of(text: str) -> str:
    """Return ``text``: a result as long as the caller makes it."""
    return text


async def run_with_memory(root: Path, store: MemoryStore, script: list[ModelOutput | str], task: str,
                          config: LoopConfig | None = None, name: str = "run") -> Any:
    """One loop run with a recording and memory attached (transcript turns, an episode)."""
    recorder = SessionRecorder.create(root / "sessions", prefix=name)
    with recorder:
        loop = AgentLoop(ScriptedModel(script), [text_of], workspace=root / "work", recorder=recorder,
                         config=config or LoopConfig())
        with attach_memory(loop, store, session=f"cut {name}") as wiring:
            outcome = await loop.run(task)
    assert wiring.last_error is None
    return outcome


@CUTS
@given(value=PII, data=st.data())
def test_a_value_straddling_a_result_cut_leaves_no_fragment(tmp_path_factory: pytest.TempPathFactory,
                                                           value: str, data: st.DataObject) -> None:
    """A spilled result's preview is its first 4 KiB; a result that cannot be spilled keeps its first
    24 KiB. Both reach the transcript and the recording."""
    offset = data.draw(offsets(value), label="offset")
    root = tmp_path_factory.mktemp("result-cut")
    tail = " and more" * 3000  # over the 24 KiB ceiling
    previewed = straddling(value, PREVIEW_BYTES, offset) + tail
    truncated = straddling(value, LoopConfig().max_result_bytes or 0, offset) + tail

    async def main() -> None:
        with MemoryStore(root / "agent.db", embedder=None) as store:
            calls = [ModelOutput.with_calls(ToolCall.of("text_of", text=previewed)), "done"]
            outcome = await run_with_memory(root, store, calls, "show the text", name="spilled")
            assert isinstance(outcome, Done) and len(list((root / "work" / SPILL_DIR).iterdir())) == 1
            calls = [ModelOutput.with_calls(ToolCall.of("text_of", text=truncated)), "done"]
            outcome = await run_with_memory(root, store, calls, "show the text", LoopConfig(spill=False), "cut")
            assert isinstance(outcome, Done)
            assert any('"truncated":true' in t.content for t in store.list(session="cut cut"))

    anyio.run(main)
    assert_absent([value], every_written_byte(root), heads=True)


@CUTS
@given(value=PII, data=st.data())
def test_a_value_straddling_an_episode_cut_leaves_no_fragment(tmp_path_factory: pytest.TempPathFactory,
                                                             value: str, data: st.DataObject) -> None:
    """The episode a run leaves keeps the first 2,000 characters of its task and of its answer."""
    offset = data.draw(offsets(value), label="offset")
    root = tmp_path_factory.mktemp("episode-cut")
    task = straddling(value, DEFAULT_MAX_CHARS, offset) + " then report back"
    answer = straddling(value, DEFAULT_MAX_CHARS, offset) + " is what I found"

    async def main() -> None:
        with MemoryStore(root / "agent.db", embedder=None) as store:
            assert isinstance(await run_with_memory(root, store, [answer], task), Done)
            assert any("chars truncated]" in e.content for e in store.list(kind="episode"))

    anyio.run(main)
    assert_absent([value], every_written_byte(root), heads=True)


@CUTS
@given(value=PII, data=st.data())
def test_a_value_straddling_an_error_message_cut_leaves_no_fragment(tmp_path_factory: pytest.TempPathFactory,
                                                                   value: str, data: st.DataObject) -> None:
    """A server's error message is cut to 300 characters, and the arguments of a tool call that are
    not JSON to 200: the error reaches the recording, the transcript and the orchestrator's job."""
    offset = data.draw(offsets(value), label="offset")
    root = tmp_path_factory.mktemp("error-cut")
    echoed = straddling(value, 300, offset) + " is not an allowed input"
    bad_args = straddling(value, 200, offset) + " }"

    def server(request: httpx.Request) -> httpx.Response:
        return httpx.Response(400, json={"error": {"message": echoed}})

    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        client = httpx.AsyncClient(transport=httpx.MockTransport(server))
        model = OpenAIChatModel("http://model.test/v1", "m", client=client, max_retries=0)
        recorder = SessionRecorder.create(root / "sessions", prefix=job.id)
        with recorder:
            await AgentLoop(model, [], workspace=root / "work", recorder=recorder).run(job.prompt)
        return JobResult(text="not reached")

    async def main() -> None:
        with MemoryStore(root / "agent.db", embedder=None) as store:
            calls = [ModelOutput.with_calls(ToolCall(id="call-1", name="text_of", args=bad_args)), "done"]
            assert isinstance(await run_with_memory(root, store, calls, "show the text"), Done)
            with RunStore.on(store) as runs:
                report = await Orchestrator(runner, store=runs).run("ask", [Job(id="ask", prompt="hello")])
            assert "HTTP 400" in (report.job("ask").error or "")

    anyio.run(main)
    assert_absent([value], every_written_byte(root), heads=True)
