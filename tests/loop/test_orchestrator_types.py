"""The orchestrator's value types: states and labels, backoff numbers, retry policy, routes, the Dag."""

from __future__ import annotations

import pytest

from harness_loop.dag import Dag
from harness_loop.errors import DagError
from harness_loop.job import Backoff, Job, JobResult, JobState, RetryPolicy, job_prompt
from harness_loop.route import Continue, Goto, Next, Stop
from harness_loop.runs import RunBudget, RunState, job_from_record, job_to_record
from harness_loop.runstore import JOB_STATES, RUN_STATES
from harness_mem.errors import HarnessMemError, InvalidInputError


def test_job_states_keep_the_seed_names_and_labels() -> None:
    assert [s.value for s in JobState] == list(JOB_STATES)
    assert JobState.DEAD_LETTERED.value == "dead_lettered"
    assert JobState.DEAD_LETTERED.label() == "dead-lettered"
    assert [s.label() for s in JobState] == [
        "pending",
        "queued",
        "running",
        "succeeded",
        "failed",
        "retrying",
        "dead-lettered",
        "cancelled",
    ]
    assert {s for s in JobState if s.is_terminal()} == {
        JobState.SUCCEEDED,
        JobState.DEAD_LETTERED,
        JobState.CANCELLED,
    }
    assert [s.value for s in RunState] == list(RUN_STATES)


def test_exponential_backoff_grows_and_caps() -> None:
    b = Backoff.exponential(1.0, 2, 10.0)
    assert [b.delay(a) for a in (1, 2, 3, 5)] == [1.0, 2.0, 4.0, 10.0]
    assert b.delay(10_000) == 10.0  # saturates instead of overflowing
    assert Backoff.fixed(0.5).delay(7) == 0.5
    assert Backoff.none().delay(3) == 0.0
    with pytest.raises(InvalidInputError):
        Backoff.fixed(-1)


def test_retry_policy_allows_at_least_one_attempt_and_round_trips() -> None:
    assert RetryPolicy(0).max_attempts == 1
    assert RetryPolicy.once() == RetryPolicy(1, Backoff.none())
    policy = RetryPolicy(3, Backoff.exponential(0.1, 3, 2.0))
    assert RetryPolicy.from_dict(policy.to_dict()) == policy
    assert RetryPolicy.from_dict(RetryPolicy(2, Backoff.fixed(1.5)).to_dict()).backoff.delay(1) == 1.5


def test_job_result_tokens() -> None:
    r = JobResult("x").with_tokens(3, 4)
    assert (r.input_tokens, r.output_tokens, r.total_tokens) == (3, 4, 7)


def test_job_record_round_trip() -> None:
    job = Job(
        "b",
        "do b",
        deps=["a"],
        retry=RetryPolicy(2, Backoff.fixed(0.01)),
        state=JobState.SUCCEEDED,
        result=JobResult("out", 1, 2),
        attempts=2,
        visits=1,
        prior_attempt="old",
        feedback="fb",
        spent_tokens=9,
    )
    back = job_from_record(job_to_record(job, "r", 3))
    assert back == job
    assert job_to_record(Job("a", "p"), "r", 0).result_text is None
    assert job_from_record(job_to_record(Job("e", "p", result=JobResult("")), "r", 0)).result == JobResult("")


def test_job_refuses_bad_ids_and_string_deps() -> None:
    with pytest.raises(InvalidInputError):
        Job("", "p")
    with pytest.raises(InvalidInputError, match="list of job ids"):
        Job("a", "p", deps="b")
    assert Job("a", "p").with_deps(["x", "y"]).deps == ("x", "y")


def test_job_prompt_prefixes_are_exact() -> None:
    job = Job("d", "Write the summary.", deps=("b", "c"))
    assert job_prompt(Job("a", "Just do it."), {}) == "Just do it."
    assert job_prompt(job, {"c": JobResult("C"), "b": JobResult("B")}) == (
        "Results from upstream jobs you depend on:\n--- b ---\nB\n--- c ---\nC\n\nYour task:\nWrite the summary."
    )
    job.feedback, job.prior_attempt = "33 characters, limit is 26", "attempt-1"
    assert job_prompt(job, {}) == (
        "Your previous answer was rejected: 33 characters, limit is 26\n"
        "What you answered last time (do not repeat it — improve on it):\nattempt-1\n\n"
        "Write the summary."
    )


def test_next_shapes() -> None:
    assert Next.Continue() == Continue()
    assert Next.back_to("revise") == Goto("revise") == Next.Goto("revise", None)
    assert Next.back_to_with("revise", "too long") == Goto("revise", "too long")
    assert isinstance(Next.Stop(), Stop) and isinstance(Stop(), Next)


def test_budget_is_strict() -> None:
    assert not RunBudget(150).exceeded(150)
    assert RunBudget(150).exceeded(151)
    assert not RunBudget(None).exceeded(10**9)


def diamond() -> Dag:
    return Dag(
        [Job("a", "A"), Job("b", "B", deps=["a"]), Job("c", "C", deps=["a"]), Job("d", "D", deps=["b", "c"])]
    )


def test_dag_questions() -> None:
    dag = diamond()
    assert dag.ids() == ["a", "b", "c", "d"]
    assert dag.downstream_of("b") == ["b", "d"]
    assert dag.downstream_of("a") == ["a", "b", "c", "d"]
    assert dag.dependents("a") == ["b", "c"]
    assert dag.deps_satisfied("a") and not dag.deps_satisfied("b")
    dag["a"].state = JobState.SUCCEEDED
    assert dag.deps_satisfied("b")
    dag["b"].state = JobState.DEAD_LETTERED
    assert dag.blocking_dep("d") == ("b", "dead-lettered")
    assert dag.find_cycle() is None
    dag.validate()


def test_dag_refuses_duplicates_unknown_deps_routes_and_cycles() -> None:
    with pytest.raises(DagError, match="share the id `a`"):
        Dag([Job("a", "1"), Job("a", "2")])
    with pytest.raises(DagError, match="`b` depends on unknown job `x`"):
        Dag([Job("a", "A"), Job("b", "B", deps=["x"])]).validate()
    with pytest.raises(DagError, match="router is attached to unknown job `nope`"):
        diamond().validate(routes=["nope"])
    with pytest.raises(DagError, match="may go to unknown job `ghost`"):
        diamond().validate(routes=["d"], targets={"d": ["a", "ghost"]})
    cyclic = Dag([Job("a", "A", deps=["c"]), Job("b", "B", deps=["a"]), Job("c", "C", deps=["b"])])
    assert cyclic.find_cycle() == ["a", "c", "b", "a"]
    with pytest.raises(DagError, match="cycle: a → c → b → a"):
        cyclic.validate()
    with pytest.raises(DagError, match="cycle"):
        Dag([Job("self", "S", deps=["self"])]).validate()
    assert issubclass(DagError, InvalidInputError) and issubclass(DagError, HarnessMemError)


def test_long_chain_has_no_recursion_limit() -> None:
    jobs = [Job("j0", "p")] + [Job(f"j{i}", "p", deps=[f"j{i - 1}"]) for i in range(1, 5000)]
    assert Dag(jobs).find_cycle() is None


def test_check_additions() -> None:
    dag = diamond()
    dag.check_additions([Job("e", "E", deps=["d"]), Job("f", "F", deps=["e"])])
    with pytest.raises(DagError, match="reuses the id `b`"):
        dag.check_additions([Job("b", "again")])
    with pytest.raises(DagError, match="unknown job `zzz`"):
        dag.check_additions([Job("e", "E", deps=["zzz"])])
    with pytest.raises(DagError, match="cycle"):
        dag.check_additions([Job("e", "E", deps=["f"]), Job("f", "F", deps=["e"])])
    assert len(dag) == 4  # checking never changes the graph
