"""Job and run specs are pydantic records: validated with one-line errors, with JSON schemas."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

import harness_loop
from harness_loop.job import Backoff, Job, JobResult, JobState, RetryPolicy
from harness_loop.runs import RunBudget
from harness_mem.errors import InvalidInputError


def test_every_spec_schema_is_valid_json_schema_and_names_its_fields() -> None:
    found = harness_loop.schemas()
    assert set(found) == {"job", "job-result", "retry-policy", "backoff", "run", "run-budget"}
    for schema in found.values():
        Draft202012Validator.check_schema(schema)
    assert {"id", "prompt", "deps", "retry"} <= set(found["job"]["properties"])
    assert set(found["backoff"]["properties"]) == {"kind", "delay_s", "base_s", "factor", "max_s"}
    job = Job("build", "build it", deps=["plan"], retry=RetryPolicy(3, Backoff.exponential(0.1, 2, 5.0)))
    Draft202012Validator(found["job"]).validate(job.model_dump(mode="json"))
    assert not Draft202012Validator(found["job"]).is_valid({"id": "a", "prompt": "p", "deps": "b"})
    with pytest.raises(InvalidInputError, match="no schema named 'jobs'"):
        harness_loop.json_schema("jobs")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Job("", "p"), "a job id must be a non-empty string, not ''"),
        (lambda: Job(3, "p"), "a job id must be a non-empty string, not 3"),
        (lambda: Job("a", "p", deps="b"), "deps of 'a' must be a list of job ids, not a string"),
        (lambda: Job("a", "p", state="lost"), "state must be one of"),
        (lambda: Job("a", "p", retry={"max_attempts": "many"}), "retry.max_attempts must be an integer, not str"),
        (lambda: Backoff("linear"), "unknown backoff kind 'linear' — use none, fixed or exponential"),
        (lambda: Backoff.fixed(-1), "backoff delays and factor must not be negative"),
        (lambda: JobResult("x", -1), "input_tokens must be at least 0, not -1"),
        (lambda: RunBudget("lots"), "max_tokens must be an integer, not str"),
    ],
)
def test_a_bad_spec_is_one_line_that_names_the_field(make: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        make()  # type: ignore[operator]


def test_specs_keep_their_dataclass_manners() -> None:
    job = Job("a", "p", deps=["x"], retry={"max_attempts": 2, "backoff": {"kind": "fixed", "delay_s": 1.5}})
    assert job.deps == ("x",) and job.retry == RetryPolicy(2, Backoff.fixed(1.5)) and job.state is JobState.PENDING
    copy = job.with_deps(["y"])
    copy.state = JobState.RUNNING  # jobs are mutable state; the copy is its own
    assert (job.deps, job.state) == (("x",), JobState.PENDING)
    assert RetryPolicy(0).max_attempts == 1 and hash(RetryPolicy(2)) == hash(RetryPolicy(2))
    assert JobResult("x").with_tokens(3, 4).total_tokens == 7
