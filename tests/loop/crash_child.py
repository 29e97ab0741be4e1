"""A child process for the crash test: run (or resume) a 20-job DAG whose runner logs every execution.

Usage: ``python crash_child.py start|resume DB LOG RUN_ID [HANG_JOBS]`` (DB: a file, or a PostgreSQL URL)

Twenty jobs in five layers of four; each job depends on two jobs of the layer above. The runner
appends ``start <job> <pid>`` before working and ``end <job> <pid>`` after, and answers a digest of
its id and its upstream answers, so the parent can recompute every expected result. In ``start``
mode the jobs in ``HANG_JOBS`` (comma-separated) sleep for a minute, so the parent knows exactly
what is in flight when it kills us. On completion the child prints the report as JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Mapping

import anyio

from harness_loop.job import Job, JobResult
from harness_loop.orchestrator import Orchestrator
from harness_loop.runstore import RunStore

LAYERS, WIDTH = 5, 4
JOB_DELAY_S = 0.05
CONCURRENCY = 2  # small, so that jobs also wait in `queued` when the kill comes


def job_ids() -> list[str]:
    return [f"j{layer}{k}" for layer in range(LAYERS) for k in range(WIDTH)]


def deps_of(job_id: str) -> list[str]:
    layer, k = int(job_id[1]), int(job_id[2])
    if layer == 0:
        return []
    return [f"j{layer - 1}{k}", f"j{layer - 1}{(k + 1) % WIDTH}"]


def answer(job_id: str, upstream_texts: list[str]) -> str:
    """What job ``job_id`` answers, given its deps' answers in deps order."""
    digest = hashlib.sha256("|".join([job_id, *upstream_texts]).encode()).hexdigest()[:16]
    return f"{job_id}:{digest}"


def expected_answers() -> dict[str, str]:
    done: dict[str, str] = {}
    for job_id in job_ids():
        done[job_id] = answer(job_id, [done[d] for d in deps_of(job_id)])
    return done


class LoggingRunner:
    def __init__(self, log_path: str, hang: set[str]) -> None:
        self.log_path = log_path
        self.hang = hang

    def log(self, line: str) -> None:
        # One write() per line, in append mode: a SIGKILL cannot leave half a line behind.
        with open(self.log_path, "a", encoding="utf-8") as f:
            f.write(f"{line} {os.getpid()}\n")

    async def run(self, job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        self.log(f"start {job.id}")
        await anyio.sleep(60 if job.id in self.hang else JOB_DELAY_S)
        text = answer(job.id, [upstream[d].text for d in job.deps])
        self.log(f"end {job.id}")
        return JobResult(text, 1, 1)


async def main(mode: str, db: str, log: str, run_id: str, hang: set[str]) -> None:
    with RunStore.open(db) as store:
        runner = LoggingRunner(log, hang if mode == "start" else set())
        orch = Orchestrator(runner, store=store, concurrency=CONCURRENCY)
        if mode == "start":
            jobs = [Job(j, f"work on {j}", deps=deps_of(j)) for j in job_ids()]
            report = await orch.run("crash test", jobs, run_id=run_id)
        else:
            report = await orch.resume(run_id)
    print(json.dumps({"state": report.state.value, "spent_tokens": report.spent_tokens}))


if __name__ == "__main__":
    mode, db, log, run_id = sys.argv[1:5]
    hang = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else set()
    anyio.run(main, mode, db, log, run_id, hang)
