"""JSON schemas of the job and run specs harness_loop takes in, by name (as :mod:`harness_mem.schema`)."""

from __future__ import annotations

from typing import Any

from harness_mem.errors import InvalidInputError
from harness_mem.models import Record

from .job import Backoff, Job, JobResult, RetryPolicy
from .runs import Run, RunBudget

MODELS: dict[str, type[Record]] = {
    "job": Job,
    "job-result": JobResult,
    "retry-policy": RetryPolicy,
    "backoff": Backoff,
    "run": Run,
    "run-budget": RunBudget,
}


def json_schema(name: str) -> dict[str, Any]:
    """The JSON schema of the spec called ``name``; see :data:`MODELS`."""
    try:
        return MODELS[name].json_schema()
    except KeyError:
        raise InvalidInputError(f"no schema named {name!r} — use one of: {', '.join(MODELS)}") from None


def schemas() -> dict[str, dict[str, Any]]:
    """Every job and run spec's JSON schema, by name."""
    return {name: json_schema(name) for name in MODELS}
