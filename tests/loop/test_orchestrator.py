"""The orchestrator's scenarios: the core DAG behaviour, then the guarantees on scheduling and resume."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_loop.dag import Dag
from harness_loop.errors import DagError, OrchestratorError
from harness_loop.job import Backoff, Job, JobFailure, JobResult, JobState, RetryPolicy, job_prompt
from harness_loop.orchestrator import Orchestrator
from harness_loop.planner import StaticPlanner
from harness_loop.route import Next
from harness_loop.runs import RunReport, RunState
from harness_loop.runstore import InMemoryRunStore, RunStore, StoredRun
from harness_mem.errors import DuplicateIdError, NotFoundError

pytestmark = pytest.mark.anyio

FAST = Backoff.fixed(0.01)


@dataclass
class Script:
    """A scripted runner: records every start, fails on cue, answers ``attempt-{n}`` per job."""

    delay: float = 0.0
    delays: dict[str, float] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)  # job id -> how many attempts fail first
    tokens: dict[str, tuple[int, int]] = field(default_factory=dict)
    starts: list[str] = field(default_factory=list)
    prompts: dict[str, list[str]] = field(default_factory=dict)
    upstream: dict[str, list[list[str]]] = field(default_factory=dict)
    times: dict[str, list[float]] = field(default_factory=dict)
    cancelled: list[str] = field(default_factory=list)
    in_flight: int = 0
    peak: int = 0

    async def run(self, job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        self.starts.append(job.id)
        self.prompts.setdefault(job.id, []).append(job_prompt(job, upstream))
        self.upstream.setdefault(job.id, []).append(list(upstream))
        self.times.setdefault(job.id, []).append(time.monotonic())
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            await anyio.sleep(self.delays.get(job.id, self.delay))
        except BaseException:
            self.cancelled.append(job.id)
            raise
        finally:
            self.in_flight -= 1
        if self.failures.get(job.id, 0) > 0:
            self.failures[job.id] -= 1
            raise RuntimeError(f"{job.id} broke")
        n = self.starts.count(job.id)
        return JobResult(f"attempt-{n}", *self.tokens.get(job.id, (0, 0)))


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.fixture
def store(db_path: str) -> Iterator[RunStore]:
    s = RunStore.open(db_path)
    yield s
    s.close()


def states(report: RunReport) -> dict[str, str]:
    return {j.id: j.state.value for j in report.jobs}


def diamond() -> list[Job]:
    return [
        Job("a", "A"),
        Job("b", "B", deps=["a"]),
        Job("c", "C", deps=["a"]),
        Job("d", "D", deps=["b", "c"]),
    ]


# ---- core scenarios: order, retries, dead letters, replanning, budgets, routers -------------------


async def test_diamond_runs_in_dependency_order_and_d_sees_both(store: RunStore) -> None:
    script = Script(delay=0.01)
    report = await Orchestrator(script, store=store).run("diamond", diamond())

    assert report.state is RunState.COMPLETED
    assert script.starts == ["a", "b", "c", "d"]
    assert script.upstream["d"] == [["b", "c"]]
    assert script.prompts["d"][0].startswith("Results from upstream jobs you depend on:\n--- b ---\n")
    assert set(states(report).values()) == {"succeeded"}
    stored = store.load(report.run_id)
    assert stored.run.state == "completed"
    assert [(j.job_id, j.state, j.result_text) for j in stored.jobs] == [
        ("a", "succeeded", "attempt-1"),
        ("b", "succeeded", "attempt-1"),
        ("c", "succeeded", "attempt-1"),
        ("d", "succeeded", "attempt-1"),
    ]


async def test_launch_order_is_insertion_order_and_repeatable() -> None:
    ids = ["zeta", "alpha", "mu", "beta", "omega", "kappa", "delta"]
    orders = []
    for _ in range(3):
        script = Script(delay=0.005)
        await Orchestrator(script, concurrency=2).run("order", [Job(i, i) for i in ids])
        orders.append(script.starts)
        assert script.peak == 2
    assert orders == [ids, ids, ids]


async def test_retry_then_success(store: RunStore) -> None:
    script = Script(failures={"a": 1})
    report = await Orchestrator(script, store=store).run("retry", [Job("a", "A", retry=RetryPolicy(2, FAST))])

    assert report.state is RunState.COMPLETED
    assert script.starts == ["a", "a"]
    a = report.job("a")
    assert (a.state, a.attempts, a.visits, a.error, a.result) == (
        JobState.SUCCEEDED,
        2,
        1,
        None,
        JobResult("attempt-2"),
    )
    kinds = [(e.kind, e.job_id) for e in store.events(report.run_id) if e.job_id == "a"]
    assert kinds == [
        ("job.running", "a"),
        ("job.failed", "a"),
        ("job.retrying", "a"),
        ("job.running", "a"),
        ("job.succeeded", "a"),
    ]


async def test_dead_letter_cancels_dependents_with_a_reason(store: RunStore) -> None:
    script = Script(failures={"b": 99})
    jobs = [
        Job("a", "A"),
        Job("b", "B", deps=["a"], retry=RetryPolicy(2, FAST)),
        Job("c", "C", deps=["b"]),
        Job("d", "D", deps=["c"]),
        Job("e", "E", deps=["a"]),
    ]
    report = await Orchestrator(script, store=store).run("cascade", jobs)

    assert report.state is RunState.FAILED
    assert script.starts.count("b") == 2 and "c" not in script.starts and "d" not in script.starts
    assert states(report) == {
        "a": "succeeded",
        "b": "dead_lettered",
        "c": "cancelled",
        "d": "cancelled",
        "e": "succeeded",
    }
    assert report.job("b").error == "b broke"
    assert report.job("c").error == "dependency `b` dead-lettered"
    assert report.job("d").error == "dependency `c` cancelled"
    assert report.reason == "1 job(s) dead-lettered, 2 cancelled"
    text = report.render()
    assert "  - b: dead-lettered (entered 1×) — failed: b broke" in text
    assert "  - c: cancelled (entered 0×) — failed: dependency `b` dead-lettered" in text


async def test_replan_adds_jobs_that_see_earlier_results(store: RunStore) -> None:
    script = Script()
    planner = StaticPlanner([Job("b", "B", deps=["a"])])
    report = await Orchestrator(script, store=store, planner=planner).run("replan", [Job("a", "A")])

    assert report.state is RunState.COMPLETED
    assert script.starts == ["a", "b"]
    assert script.upstream["b"] == [["a"]]
    stored = store.load(report.run_id)
    assert stored.run.replans == 2  # one that added b, one that said done
    assert [j.job_id for j in stored.jobs] == ["a", "b"]


class EndlessPlanner:
    def __init__(self) -> None:
        self.calls = 0

    async def plan(self, goal: str, succeeded: Mapping[str, JobResult]) -> list[Job]:
        self.calls += 1
        return [Job(f"more-{self.calls}", "again", deps=list(succeeded)[-1:])]


async def test_replanning_is_bounded() -> None:
    planner = EndlessPlanner()
    report = await Orchestrator(Script(), planner=planner, max_replans=3).run("endless", [Job("a", "A")])
    assert report.state is RunState.COMPLETED
    assert planner.calls == 3
    assert [j.id for j in report.jobs] == ["a", "more-1", "more-2", "more-3"]


@pytest.mark.parametrize(
    ("proposal", "why"),
    [
        ([Job("a", "overwrite me")], "reuses the id `a`"),
        ([Job("b", "B", deps=["ghost"])], "unknown job `ghost`"),
        ([Job("b", "B", deps=["c"]), Job("c", "C", deps=["b"])], "cycle"),
    ],
)
async def test_an_invalid_plan_fails_the_run_without_touching_the_graph(
    proposal: list[Job], why: str
) -> None:
    script = Script()
    report = await Orchestrator(script, planner=StaticPlanner(proposal)).run("bad plan", [Job("a", "A")])
    assert report.state is RunState.FAILED
    assert report.reason is not None and "invalid plan" in report.reason and why in report.reason
    assert [j.id for j in report.jobs] == ["a"]
    assert report.job("a").result == JobResult("attempt-1")  # not overwritten
    assert script.starts == ["a"]


async def test_budget_cancels_the_rest(store: RunStore) -> None:
    script = Script(tokens={"a": (60, 40), "b": (60, 40), "c": (60, 40)})
    jobs = [Job("a", "A"), Job("b", "B", deps=["a"]), Job("c", "C", deps=["b"])]
    report = await Orchestrator(script, store=store, concurrency=1).run("budget", jobs, budget=150)

    assert report.state is RunState.FAILED
    assert states(report) == {"a": "succeeded", "b": "succeeded", "c": "cancelled"}
    assert report.job("c").error == "run token budget exceeded"
    assert report.spent_tokens == 200
    assert report.reason == "token budget exceeded: spent 200 of 150"
    assert "c" not in script.starts
    assert store.load(report.run_id).run.spent_tokens == 200


class CostlyFailure:
    """Fails twice, charging 100 tokens each time, then would succeed."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        self.calls += 1
        if self.calls <= 2:
            raise JobFailure("model answered nonsense", input_tokens=80, output_tokens=20)
        return JobResult("fine")


async def test_failed_attempts_count_against_the_budget() -> None:
    runner = CostlyFailure()
    job = Job("a", "A", retry=RetryPolicy(5, Backoff.none()))
    report = await Orchestrator(runner).run("costly", [job], budget=150)
    assert report.state is RunState.FAILED
    assert runner.calls == 2
    assert report.spent_tokens == 200
    assert report.job("a").state is JobState.CANCELLED
    assert report.job("a").spent_tokens == 200


async def test_cycle_is_refused_before_anything_runs(store: RunStore) -> None:
    script = Script()
    jobs = [Job("a", "A", deps=["b"]), Job("b", "B", deps=["a"])]
    report = await Orchestrator(script, store=store).run("cycle", jobs)

    assert report.state is RunState.FAILED
    assert script.starts == []
    assert all("cycle" in (j.error or "") for j in report.jobs)
    assert store.load(report.run_id).run.state == "failed"  # stored, so `runs show` can explain it


async def test_unknown_dep_or_route_is_refused_with_zero_starts(store: RunStore) -> None:
    script = Script()
    report = await Orchestrator(script, store=store).run("dep", [Job("a", "A", deps=["ghost"])])
    assert report.state is RunState.FAILED and script.starts == []
    assert "failed: job `a` depends on unknown job `ghost`" in report.render()

    orch = Orchestrator(script, store=store).route("nope", lambda r: Next.Continue())
    report = await orch.run("route", [Job("a", "A")])
    assert report.state is RunState.FAILED and script.starts == []
    assert "failed: a router is attached to unknown job `nope`" in report.render()

    orch = Orchestrator(script, store=store).route("a", lambda r: Next.back_to("x"), targets=["x"])
    report = await orch.run("target", [Job("a", "A")])
    assert report.state is RunState.FAILED and script.starts == []
    assert "may go to unknown job `x`" in (report.job("a").error or "")


async def test_review_loop_carries_feedback_and_the_prior_attempt(store: RunStore) -> None:
    script = Script()
    verdicts = iter([Next.back_to_with("revise", "too long"), Next.back_to_with("revise", "still long")])

    def review(result: JobResult) -> Next:
        return next(verdicts, Next.Continue())

    jobs = [
        Job("revise", "Write it."),
        Job("review", "Judge it.", deps=["revise"]),
        Job("publish", "Ship it.", deps=["review"]),
    ]
    report = await Orchestrator(script, store=store).route("review", review).run("loop", jobs)

    assert report.state is RunState.COMPLETED
    assert script.starts == ["revise", "review"] * 3 + ["publish"]
    assert script.prompts["revise"] == [
        "Write it.",
        "Your previous answer was rejected: too long\n"
        "What you answered last time (do not repeat it — improve on it):\nattempt-1\n\nWrite it.",
        "Your previous answer was rejected: still long\n"
        "What you answered last time (do not repeat it — improve on it):\nattempt-2\n\nWrite it.",
    ]
    # The re-entered reviewer sees its own previous verdict, but no feedback (that was for revise).
    assert script.prompts["review"][1].startswith("What you answered last time")
    revise = report.job("revise")
    assert (revise.visits, revise.attempts, revise.result) == (3, 1, JobResult("attempt-3"))
    assert report.job("publish").visits == 1


async def test_visit_cap_dead_letters_the_loop_and_stops_downstream(store: RunStore) -> None:
    script = Script()
    orch = Orchestrator(script, store=store, max_visits=3).route(
        "review", lambda r: Next.back_to_with("revise", "never good enough")
    )
    jobs = [
        Job("revise", "Write it."),
        Job("review", "Judge it.", deps=["revise"]),
        Job("publish", "Ship it.", deps=["review"]),
    ]
    report = await orch.run("cap", jobs)

    assert report.state is RunState.FAILED
    assert script.starts.count("revise") == 3  # max_visits is a cap on runs, the first included
    assert "publish" not in script.starts
    message = "`revise` has been entered 3 times (max_visits 3); the loop is not converging"
    assert (report.job("review").state, report.job("review").error) == (JobState.DEAD_LETTERED, message)
    assert (report.job("revise").state, report.job("revise").error) == (JobState.DEAD_LETTERED, message)
    assert report.job("publish").state is JobState.CANCELLED
    assert report.job("review").result == JobResult("attempt-3")  # the last draft is still visible


async def test_stop_ends_the_run_early_as_a_success(store: RunStore) -> None:
    script = Script()
    orch = Orchestrator(script, store=store, concurrency=1).route("a", lambda r: Next.Stop())
    report = await orch.run("stop", [Job("a", "A"), Job("b", "B", deps=["a"]), Job("c", "C")])

    assert report.state is RunState.COMPLETED
    assert script.starts == ["a"]
    assert states(report) == {"a": "succeeded", "b": "cancelled", "c": "cancelled"}
    assert report.job("b").error == "run stopped by the router of `a`"


async def test_no_routers_is_a_plain_dag() -> None:
    script = Script()
    jobs = [Job("a", "A"), Job("b", "B", deps=["a"]), Job("c", "C", deps=["b"])]
    report = await Orchestrator(script).run("plain", jobs)
    assert report.state is RunState.COMPLETED and script.starts == ["a", "b", "c"]


# ---- scheduling guarantees: backoff slots, durability, cancel, resume, bad input ------------------


async def test_backoff_does_not_hold_a_concurrency_slot() -> None:
    script = Script(failures={"a": 1}, delays={"b": 0.02, "c": 0.02})
    jobs = [Job("a", "A", retry=RetryPolicy(2, Backoff.fixed(0.3))), Job("b", "B"), Job("c", "C")]
    report = await Orchestrator(script, concurrency=1).run("slots", jobs)

    assert report.state is RunState.COMPLETED
    # While a waits out its 0.3 s backoff, b and c run in the only slot.
    assert script.starts == ["a", "b", "c", "a"]
    assert script.times["a"][1] - script.times["a"][0] >= 0.3
    assert script.peak == 1


async def test_every_transition_is_committed_before_the_runner_is_called(store: RunStore) -> None:
    seen: list[tuple[str, str, int, int]] = []

    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        row = store.load(run_id).job(job.id)
        seen.append((job.id, row.state, row.attempts, row.visits))
        if len(seen) == 1:
            raise RuntimeError("first try fails")
        return JobResult("ok")

    run_id = "committed-first"
    jobs = [Job("a", "A", retry=RetryPolicy(2, FAST)), Job("b", "B", deps=["a"])]
    report = await Orchestrator(runner, store=store).run("commit", jobs, run_id=run_id)
    assert report.state is RunState.COMPLETED
    assert seen == [("a", "running", 1, 1), ("a", "running", 2, 1), ("b", "running", 1, 1)]
    events = store.events(run_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].kind == "run.completed"


async def test_goto_to_an_unknown_job_dead_letters_the_router_job() -> None:
    script = Script()
    orch = Orchestrator(script).route("a", lambda r: Next.back_to("nowhere"))
    report = await orch.run("ghost", [Job("a", "A"), Job("b", "B", deps=["a"])])
    assert report.state is RunState.FAILED
    assert report.job("a").state is JobState.DEAD_LETTERED
    assert report.job("a").error == "the router of `a` sent the run to unknown job `nowhere`"
    assert report.job("b").error == "dependency `a` dead-lettered"


async def test_a_router_that_raises_fails_the_attempt() -> None:
    calls = []

    def flaky(result: JobResult) -> Next:
        calls.append(result.text)
        if len(calls) == 1:
            raise ValueError("cannot parse the verdict")
        return Next.Continue()

    script = Script()
    orch = Orchestrator(script).route("a", flaky)
    report = await orch.run("router", [Job("a", "A", retry=RetryPolicy(2, FAST))])
    assert report.state is RunState.COMPLETED
    assert calls == ["attempt-1", "attempt-2"]
    assert report.job("a").attempts == 2


async def test_a_runner_returning_the_wrong_type_fails_the_job() -> None:
    async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        return "just text"  # type: ignore[return-value]

    report = await Orchestrator(runner).run("type", [Job("a", "A")])
    assert report.state is RunState.FAILED
    assert report.job("a").error == "the job runner returned str, not a JobResult"


async def test_reentering_a_running_job_sends_it_round_again() -> None:
    # a -> b (fast, routed) and a -> c (slow). b's first verdict sends the graph back to a while c is
    # still running on a's first answer: c must run again on a's second answer.
    script = Script(delays={"c": 0.1})
    verdicts = iter([Next.back_to_with("a", "again")])
    orch = Orchestrator(script).route("b", lambda r: next(verdicts, Next.Continue()))
    jobs = [
        Job("a", "A"),
        Job("b", "B", deps=["a"]),
        Job("c", "C", deps=["a"]),
        Job("d", "D", deps=["b", "c"]),
    ]
    report = await orch.run("stale", jobs)

    assert report.state is RunState.COMPLETED
    assert script.starts.count("a") == 2 and script.starts.count("c") == 2 and script.starts.count("d") == 1
    assert script.prompts["c"][1].startswith("What you answered last time")
    assert "--- a ---\nattempt-2\n" in script.prompts["c"][1]
    assert report.job("c").result == JobResult("attempt-2")


async def test_cancel_stops_a_live_run(store: RunStore) -> None:
    script = Script(delay=5)
    orch = Orchestrator(script, store=store)
    result = {}

    async def go() -> None:
        result["report"] = await orch.run(
            "cancel me", [Job("a", "A"), Job("b", "B", deps=["a"])], run_id="live"
        )

    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            while not script.starts:
                await anyio.sleep(0.005)
            assert orch.active_runs == ["live"]
            assert orch.cancel("live", reason="operator said stop")

    report = result["report"]
    assert report.state is RunState.CANCELLED and report.reason == "operator said stop"
    assert states(report) == {"a": "cancelled", "b": "cancelled"}
    assert script.cancelled == ["a"]
    assert store.load("live").run.state == "cancelled"
    assert orch.active_runs == []
    assert orch.cancel("live") is False  # already over


async def test_cancel_marks_a_stored_run_so_resume_leaves_it(store: RunStore) -> None:
    run_id = await crash_midway(store)
    orch = Orchestrator(Script(), store=store)
    assert orch.cancel(run_id, reason="abandoned") is True
    report = await orch.resume(run_id)
    assert report.state is RunState.CANCELLED
    assert all(j.state in (JobState.SUCCEEDED, JobState.CANCELLED) for j in report.jobs)
    with pytest.raises(NotFoundError):
        orch.cancel("no-such-run")


async def crash_midway(store: RunStore) -> str:
    """Run a → b → c and abandon the process-equivalent while b is running: the file keeps b running."""
    script = Script(delays={"b": 10})
    orch = Orchestrator(script, store=store)
    with anyio.move_on_after(2):
        async with anyio.create_task_group() as tg:
            jobs = [Job("a", "A"), Job("b", "B", deps=["a"]), Job("c", "C", deps=["b"])]
            tg.start_soon(partial(orch.run, "crash", jobs, run_id="crashed"))
            while "b" not in script.starts:
                await anyio.sleep(0.005)
            tg.cancel_scope.cancel()  # like kill -9: no cleanup reaches the store
    assert store.load("crashed").job("b").state == "running"
    return "crashed"


async def test_resume_runs_only_what_had_not_finished(db_path: str) -> None:
    with RunStore.open(db_path) as store:
        run_id = await crash_midway(store)
    with RunStore.open(db_path) as store:  # a new "process"
        script = Script()
        report = await Orchestrator(script, store=store).resume(run_id)
        events = [e.kind for e in store.events(run_id)]
    assert report.state is RunState.COMPLETED
    assert script.starts == ["b", "c"]  # a had succeeded: never again
    assert report.job("a").result == JobResult("attempt-1")
    # The interrupted attempt of b is undone: one attempt, one visit, not two.
    assert (report.job("b").attempts, report.job("b").visits) == (1, 1)
    assert "run.resumed" in events and "job.reset" in events


async def test_attempts_survive_a_resume(db_path: str) -> None:
    retry = RetryPolicy(3, Backoff.exponential(0.01, 3000, 30))  # 0.01 s, then 30 s
    with RunStore.open(db_path) as store:
        script = Script(failures={"a": 99})
        orch = Orchestrator(script, store=store)
        with anyio.move_on_after(2):
            async with anyio.create_task_group() as tg:
                tg.start_soon(partial(orch.run, "flaky", [Job("a", "A", retry=retry)], run_id="flaky"))
                while not (script.failures["a"] == 97 and store.load("flaky").job("a").state == "retrying"):
                    await anyio.sleep(0.005)
                tg.cancel_scope.cancel()  # crash during the long backoff before attempt 3
        row = store.load("flaky").job("a")
        assert (row.state, row.attempts) == ("retrying", 2)

    with RunStore.open(db_path) as store:
        script = Script(failures={"a": 99})
        report = await Orchestrator(script, store=store).resume("flaky")
    assert script.starts == ["a"]  # exactly the one attempt that was left, not three more
    assert report.job("a").state is JobState.DEAD_LETTERED
    assert report.job("a").attempts == 3


async def test_resume_of_a_finished_run_changes_nothing(store: RunStore) -> None:
    report = await Orchestrator(Script(), store=store).run("done", [Job("a", "A")])
    before = len(store.events(report.run_id))
    script = Script()
    again = await Orchestrator(script, store=store).resume(report.run_id)
    assert again.state is RunState.COMPLETED and script.starts == []
    assert len(store.events(report.run_id)) == before


async def test_resume_unknown_run_is_not_found(store: RunStore) -> None:
    with pytest.raises(NotFoundError):
        await Orchestrator(Script(), store=store).resume("missing")


async def test_duplicate_ids_are_refused_loudly() -> None:
    orch = Orchestrator(Script(), store=InMemoryRunStore())
    with pytest.raises(DagError):
        await orch.run("dup", [Job("a", "A"), Job("a", "again")])
    await orch.run("first", [Job("a", "A")], run_id="same")
    with pytest.raises(DuplicateIdError):
        await orch.run("second", [Job("a", "A")], run_id="same")


async def test_callers_jobs_are_not_mutated() -> None:
    jobs = diamond()
    await Orchestrator(Script()).run("copy", Dag(jobs))
    assert all(j.state is JobState.PENDING and j.result is None and j.attempts == 0 for j in jobs)


async def test_resume_while_running_here_is_refused(store: RunStore) -> None:
    script = Script(delay=5)
    orch = Orchestrator(script, store=store)
    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(partial(orch.run, "busy", [Job("a", "A")], run_id="busy"))
            while not script.starts:
                await anyio.sleep(0.005)
            with pytest.raises(OrchestratorError, match="already executing"):
                await orch.resume("busy")
            orch.cancel()


async def test_concurrency_limit_holds() -> None:
    script = Script(delay=0.01)
    report = await Orchestrator(script, concurrency=3).run("wide", [Job(f"j{i}", "p") for i in range(12)])
    assert report.state is RunState.COMPLETED
    assert script.peak == 3


# ---- properties over random graphs ----------------------------------------------------------------


@st.composite
def random_runs(draw: st.DrawFn) -> tuple[list[Job], dict[str, int], int]:
    n = draw(st.integers(1, 12))
    jobs = []
    for i in range(n):
        deps = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        attempts = draw(st.integers(1, 3))
        jobs.append(Job(f"j{i}", f"p{i}", deps=[f"j{d}" for d in deps], retry=RetryPolicy(attempts, Backoff.none())))
    failures = {f"j{i}": draw(st.integers(0, 3)) for i in range(n)}
    return jobs, failures, draw(st.integers(1, 4))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_runs())
def test_random_graphs_keep_the_invariants(tmp_path: Path, case: tuple[list[Job], dict[str, int], int]) -> None:
    jobs, failures, concurrency = case
    script = Script(failures=dict(failures))
    path = tmp_path / f"prop-{time.monotonic_ns()}.db"

    async def go() -> tuple[RunReport, StoredRun]:
        with RunStore.open(str(path)) as store:
            report = await Orchestrator(script, store=store, concurrency=concurrency).run("prop", jobs)
            return report, store.load(report.run_id)

    report, stored = anyio.run(go)
    by_id = {j.id: j for j in jobs}
    assert script.peak <= concurrency
    for job in report.jobs:
        assert job.state.is_terminal()
        runs = script.starts.count(job.id)
        should_fail = failures[job.id] >= by_id[job.id].retry.max_attempts
        if job.state is JobState.SUCCEEDED:
            assert runs == failures[job.id] + 1 and not should_fail
            assert all(report.job(d).state is JobState.SUCCEEDED for d in by_id[job.id].deps)
        elif job.state is JobState.DEAD_LETTERED:
            assert runs == by_id[job.id].retry.max_attempts and should_fail
        else:
            assert runs == 0 and (job.error or "").startswith("dependency ")
    # Every job started only after all of its deps had succeeded.
    for job_id, ups in script.upstream.items():
        assert all(sorted(u) == sorted(by_id[job_id].deps) for u in ups)
    assert {j.job_id: j.state for j in stored.jobs} == {j.id: j.state.value for j in report.jobs}
    all_succeeded = all(j.state is JobState.SUCCEEDED for j in report.jobs)
    assert report.state is (RunState.COMPLETED if all_succeeded else RunState.FAILED)


async def test_a_goal_alone_is_planned_into_jobs() -> None:
    script = Script()
    planner = StaticPlanner([Job("a", "A"), Job("b", "B", deps=["a"])])
    report = await Orchestrator(script, planner=planner).run("just a goal")
    assert report.state is RunState.COMPLETED and script.starts == ["a", "b"]


async def test_cancel_during_a_backoff_wait(store: RunStore) -> None:
    script = Script(failures={"a": 9})
    orch = Orchestrator(script, store=store)
    result = {}

    async def go() -> None:
        result["report"] = await orch.run("wait", [Job("a", "A", retry=RetryPolicy(3, Backoff.fixed(30)))])

    with anyio.fail_after(3):
        async with anyio.create_task_group() as tg:
            tg.start_soon(go)
            while not (orch.active_runs and store.load(orch.active_runs[0]).job("a").state == "retrying"):
                await anyio.sleep(0.005)
            orch.cancel()
    report = result["report"]
    assert report.state is RunState.CANCELLED
    assert report.job("a").state is JobState.CANCELLED and script.starts == ["a"]
