"""`Job` — one node of a run's DAG — and its state machine, results and retry policy.

A job is one unit of work (typically one sub-agent invocation) with dependencies on other jobs, a
retry policy, and a place for its result. The two-level model (run + job) is what lets the
orchestrator recover from a crash: a job caught ``running`` when the process died goes back to
``pending`` on resume, while a ``succeeded`` job keeps its result and never runs again.

States and numbers are fixed, because runs already stored depend on them: the stored name is
snake_case (``dead_lettered``), the display label hyphenated (``dead-lettered``),
exponential backoff is ``min(base * factor**(attempt-1), max)``, and a retry policy allows at
least one attempt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, StrictStr, ValidationInfo, field_validator
from pydantic_core import ErrorDetails

from harness_mem.errors import InvalidInputError
from harness_mem.models import Record

from .states import JobState

JobId = str


class JobResult(Record):
    """What a job produced, and what producing it cost."""

    text: str
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)

    def with_tokens(self, input_tokens: int, output_tokens: int) -> JobResult:
        return self.model_copy(update={"input_tokens": input_tokens, "output_tokens": output_tokens})

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class JobFailure(Exception):
    """Raise from a runner to fail an attempt and still charge the tokens it spent.

    Any exception fails the attempt; this one also carries usage, so a model call that answered
    nonsense counts against the run's budget (tokens spent on a failed attempt are still spent).
    """

    def __init__(self, message: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        super().__init__(message)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens


def failure_tokens(error: BaseException | None) -> int:
    """The tokens a failed attempt reports having spent (a :class:`JobFailure`'s; 0 for any other error)."""
    total = 0
    for name in ("input_tokens", "output_tokens"):
        value = getattr(error, name, 0)
        if isinstance(value, int) and not isinstance(value, bool):
            total += max(value, 0)
    return total


def describe_failure(error: BaseException | None) -> str:
    """A failed attempt's error as one message: its text, else its type's name."""
    if error is None:
        return "unknown error"
    text = str(error).strip()
    return text or type(error).__name__


class Backoff(Record):
    """How long to wait before a retry: none, a fixed delay, or exponential with a cap (seconds)."""

    kind: Literal["none", "fixed", "exponential"] = "none"
    delay_s: float = Field(0.0, ge=0, description="fixed: the wait before every retry")
    base_s: float = Field(0.0, ge=0, description="exponential: the first wait")
    factor: int = Field(2, ge=0, description="exponential: each wait is this many times the one before")
    max_s: float = Field(0.0, ge=0, description="exponential: the longest wait")

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        if field == "kind":
            return f"unknown backoff kind {error.get('input')!r} — use none, fixed or exponential"
        if error["type"] == "greater_than_equal":
            return "backoff delays and factor must not be negative"
        return None

    @classmethod
    def none(cls) -> Backoff:
        """Retry immediately."""
        return cls()

    @classmethod
    def fixed(cls, delay_s: float) -> Backoff:
        """Wait ``delay_s`` seconds before every retry."""
        return cls(kind="fixed", delay_s=delay_s)

    @classmethod
    def exponential(cls, base_s: float, factor: int, max_s: float) -> Backoff:
        """``base_s * factor**(attempt-1)``, capped at ``max_s``."""
        return cls(kind="exponential", base_s=base_s, factor=factor, max_s=max_s)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based: 1 precedes the 2nd run)."""
        if self.kind == "fixed":
            return self.delay_s
        if self.kind == "exponential":
            try:
                grown = self.base_s * float(self.factor) ** max(attempt - 1, 0)
            except OverflowError:  # saturate to infinity; `min` then caps it at `max_s`
                grown = math.inf
            return min(grown, self.max_s)
        return 0.0

    def to_dict(self) -> dict[str, Any]:
        if self.kind == "fixed":
            return {"kind": "fixed", "delay_s": self.delay_s}
        if self.kind == "exponential":
            return {"kind": "exponential", "base_s": self.base_s, "factor": self.factor, "max_s": self.max_s}
        return {"kind": "none"}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Backoff:
        kind = data.get("kind", "none")
        if kind == "fixed":
            return cls.fixed(float(data["delay_s"]))
        if kind == "exponential":
            return cls.exponential(float(data["base_s"]), int(data["factor"]), float(data["max_s"]))
        return cls(kind=kind)


class RetryPolicy(Record):
    """How many times a job may run (``max_attempts`` includes the first) and the wait between."""

    # At least one attempt (a policy of 0 would never run the job): 0 or less reads as 1.
    max_attempts: Annotated[int, AfterValidator(lambda n: max(n, 1))] = 1
    backoff: Backoff = Field(default_factory=Backoff.none)

    @classmethod
    def once(cls) -> RetryPolicy:
        """No retries."""
        return cls()

    def to_dict(self) -> dict[str, Any]:
        return {"max_attempts": self.max_attempts, "backoff": self.backoff.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RetryPolicy:
        return cls(max_attempts=int(data.get("max_attempts", 1)), backoff=Backoff.from_dict(data.get("backoff", {})))


def _job_id(value: str) -> str:
    if not value.strip():
        raise InvalidInputError(f"a job id must be a non-empty string, not {value!r}")
    return value


class Job(Record):
    """One node of a run's DAG: a prompt, the jobs it waits for, and where it stands.

    ``attempts`` counts runs within the current entry (retries); ``visits`` counts entries — one
    for the first run, one more each time a router's ``Goto`` sends the graph back through it. A job
    that fails twice then succeeds, and is re-entered once, has visited twice.

    The spec a caller writes is ``id``, ``prompt``, ``deps`` and ``retry``; the other fields are
    where the job stands, which the orchestrator updates in place.
    """

    model_config = ConfigDict(frozen=False, extra="forbid")

    id: Annotated[StrictStr, AfterValidator(_job_id)] = Field(description="unique within the run")
    prompt: str
    deps: tuple[JobId, ...] = Field((), description="ids of the jobs this one waits for")  # any sequence in
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    state: JobState = JobState.PENDING
    result: JobResult | None = None
    attempts: int = Field(0, ge=0)
    visits: int = Field(0, ge=0)
    last_error: str | None = None
    # What this job produced on its previous lap and why it was sent back (set by a Goto); both go
    # in front of the prompt so the job improves on its answer instead of repeating it.
    prior_attempt: str | None = None
    feedback: str | None = None
    spent_tokens: int = Field(0, ge=0, description="every attempt of every visit, failed ones included")

    @field_validator("deps", mode="before")
    @classmethod
    def _deps_not_a_string(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            job = info.data.get("id", "?")
            raise InvalidInputError(f"deps of {job!r} must be a list of job ids, not a string")
        return value

    @classmethod
    def message(cls, field: str, error: ErrorDetails) -> str | None:
        if field == "id" and error["type"] != "value_error":
            return f"a job id must be a non-empty string, not {error.get('input')!r}"
        return None

    def with_deps(self, deps: Iterable[JobId]) -> Job:
        return self.model_copy(update={"deps": tuple(deps)})

    def with_retry(self, retry: RetryPolicy) -> Job:
        return self.model_copy(update={"retry": retry})


def job_prompt(job: Job, upstream: Mapping[JobId, JobResult]) -> str:
    """The text a runner hands its worker: feedback and prior attempt first, then upstream results.

    The prefixes are a contract (workers' prompts are tuned to them): keep them byte for byte.
    Upstream results follow ``job.deps`` order.
    """
    prefix = ""
    if job.feedback is not None:
        prefix += f"Your previous answer was rejected: {job.feedback}\n"
    if job.prior_attempt is not None:
        prefix += f"What you answered last time (do not repeat it — improve on it):\n{job.prior_attempt}\n\n"
    if not upstream:
        return prefix + job.prompt
    order = [dep for dep in job.deps if dep in upstream] + [k for k in upstream if k not in job.deps]
    body = "Results from upstream jobs you depend on:\n"
    body += "".join(f"--- {dep} ---\n{upstream[dep].text}\n" for dep in order)
    return prefix + body + "\nYour task:\n" + job.prompt
