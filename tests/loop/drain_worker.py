"""One worker process of the drain test (test_workers.py): drains a stored run with harness_loop.workers.

Usage: ``python drain_worker.py DSN RUN_ID WORKDIR NUMBER TTL_MS [HANG_AT]``

It opens the run store, says it is ready (a file ``ready-NUMBER``), waits for the test's ``go``
file, then drains the run. Its runner answers a digest of the job's id and its upstream answers
(``answer``), after recording the execution in the ``executions`` table (job, worker, pid) on a
connection of its own: the table the test counts. With ``HANG_AT`` it hangs, instead, in the
HANG_AT-th job it is given, once it has written ``hang-NUMBER`` (the job's id), so the test knows
what is in flight when it kills it. At the end it prints how many jobs it settled.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import anyio
import psycopg

from harness_loop.job import Job, JobResult
from harness_loop.runstore import RunStore
from harness_loop.workers import Worker

JOB_DELAY_S = 0.002


def answer(job_id: str, upstream_texts: list[str]) -> str:
    digest = hashlib.sha256("|".join([job_id, *upstream_texts]).encode()).hexdigest()[:16]
    return f"{job_id}:{digest}"


async def main(dsn: str, run_id: str, workdir: Path, number: int, ttl_ms: int, hang_at: int | None) -> None:
    given = 0
    with RunStore.open(dsn) as store, psycopg.connect(dsn, autocommit=True) as log:

        async def runner(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
            nonlocal given
            given += 1
            if given == hang_at:
                # Written aside and renamed: the test reads the file as soon as it exists.
                (workdir / f"hang-{number}.tmp").write_text(job.id)
                os.replace(workdir / f"hang-{number}.tmp", workdir / f"hang-{number}")
                await anyio.sleep(600)  # until the test kills this process
            await anyio.sleep(JOB_DELAY_S)
            log.execute("INSERT INTO executions (job_id, worker, pid) VALUES (%s, %s, %s)", (job.id, number, os.getpid()))
            return JobResult(text=answer(job.id, [upstream[d].text for d in job.deps]), input_tokens=1, output_tokens=1)

        worker = Worker(runner, store=store, ttl_ms=ttl_ms, poll_s=0.01,
                        owner=f"{socket.gethostname()}:{os.getpid()}:w{number}")
        (workdir / f"ready-{number}").touch()
        while not (workdir / "go").exists():
            time.sleep(0.005)
        settled = await worker.drain(run_id)
    print(settled)


if __name__ == "__main__":
    dsn, run_id, workdir, number, ttl_ms = sys.argv[1:6]
    hang = int(sys.argv[6]) if len(sys.argv) > 6 else None
    anyio.run(main, dsn, run_id, Path(workdir), int(number), int(ttl_ms), hang)
