"""What durability costs the orchestrator: the SQLite run store against the in-memory one.

Runs N no-op jobs (the runner returns at once) through :class:`harness_loop.orchestrator.Orchestrator`
with each store and reports the wall-clock time per job and per committed transition. Every
transition is one ``BEGIN IMMEDIATE … COMMIT`` on the SQLite store, so the difference between the
two rows is the price of surviving ``kill -9``. A second table times bare ``RunStore.save`` calls
(one job row and one event per call) without the scheduler around them.

Example::

    python bench/bench_orchestrator.py --jobs 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path

import anyio

from harness_loop.job import Job, JobResult
from harness_loop.orchestrator import Orchestrator
from harness_loop.runstore import (
    LEASE_MS,
    EventRecord,
    InMemoryRunStore,
    JobRecord,
    NewEvent,
    RunRecord,
    RunStore,
    RunStoreLike,
    RunSummary,
    StoredRun,
)
from harness_mem.db import sqlite_version


class Counting:
    """Wraps a store and counts transitions (save calls) and events."""

    def __init__(self, inner: RunStoreLike) -> None:
        self.inner = inner
        self.commits = 0
        self.events_written = 0

    def create(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        self.commits += 1
        self.events_written += len(events)
        self.inner.create(run, jobs, events)

    def save(self, run: RunRecord, jobs: Sequence[JobRecord] = (), events: Sequence[NewEvent] = ()) -> None:
        self.commits += 1
        self.events_written += len(events)
        self.inner.save(run, jobs, events)

    def load(self, run_id: str) -> StoredRun:
        return self.inner.load(run_id)

    def claim(self, run_id: str, owner: str, *, ttl_ms: int = LEASE_MS) -> str | None:
        return self.inner.claim(run_id, owner, ttl_ms=ttl_ms)

    def release(self, run_id: str, owner: str) -> None:
        self.inner.release(run_id, owner)

    def list_runs(self, *, limit: int | None = None, state: str | None = None) -> list[RunSummary]:
        return self.inner.list_runs(limit=limit, state=state)

    def events(self, run_id: str, *, after: int = 0, limit: int | None = None) -> list[EventRecord]:
        return self.inner.events(run_id, after=after, limit=limit)


async def noop(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
    return JobResult("")


def make_jobs(shape: str, n: int) -> list[Job]:
    if shape == "independent":
        return [Job(f"j{i}", "noop") for i in range(n)]
    if shape == "chain":
        return [Job("j0", "noop")] + [Job(f"j{i}", "noop", deps=[f"j{i - 1}"]) for i in range(1, n)]
    width = max(n // 10, 1)  # layered: ten layers, each job waits for one job of the layer above
    return [Job(f"j{i}", "noop", deps=[f"j{i - width}"] if i >= width else []) for i in range(n)]


def run_once(store_kind: str, shape: str, n: int, concurrency: int, workdir: Path) -> tuple[float, int, int]:
    if store_kind == "sqlite":
        inner: RunStoreLike = RunStore.open(str(workdir / f"bench-{time.monotonic_ns()}.db"))
    else:
        inner = InMemoryRunStore()
    store = Counting(inner)
    orch = Orchestrator(noop, store=store, concurrency=concurrency)
    jobs = make_jobs(shape, n)

    async def go() -> float:
        start = time.perf_counter()
        report = await orch.run("bench", jobs)
        elapsed = time.perf_counter() - start
        assert report.completed, report.reason
        return elapsed

    elapsed = anyio.run(go)
    getattr(inner, "close", lambda: None)()
    return elapsed, store.commits, store.events_written


def bare_saves(store_kind: str, n: int, workdir: Path) -> float:
    """Seconds for ``n`` saves of one job row plus one event, without a scheduler."""
    store: RunStore | InMemoryRunStore
    if store_kind == "sqlite":
        store = RunStore.open(str(workdir / f"bare-{time.monotonic_ns()}.db"))
    else:
        store = InMemoryRunStore()
    run = RunRecord(id="bare", goal="bench", state="executing")
    store.create(run, [JobRecord(run_id="bare", job_id=f"j{i}", position=i, prompt="noop") for i in range(n)])
    start = time.perf_counter()
    for i in range(n):
        job = JobRecord(run_id="bare", job_id=f"j{i}", position=i, prompt="noop", state="running", attempts=1)
        store.save(run, [job], [NewEvent("job.running", f"j{i}", {"attempt": 1})])
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed


def best(repeat: int, fn: Callable[[], tuple[float, int, int]]) -> tuple[float, int, int]:
    results = [fn() for _ in range(repeat)]
    return min(results, key=lambda r: r[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="no-op jobs per run (default 1000)")
    parser.add_argument("--concurrency", type=int, default=4, help="orchestrator concurrency (default 4)")
    parser.add_argument("--shape", choices=["independent", "chain", "layered", "all"], default="all")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell; the fastest is reported")
    parser.add_argument("--dir", type=Path, default=None, help="where the SQLite files go (default: a temp dir)")
    args = parser.parse_args()

    workdir = args.dir or Path(tempfile.mkdtemp(prefix="bench-orch-"))
    workdir.mkdir(parents=True, exist_ok=True)
    shapes = ["independent", "chain", "layered"] if args.shape == "all" else [args.shape]
    try:
        print(f"SQLite {sqlite_version()}, {args.jobs} no-op jobs, concurrency {args.concurrency},"
              f" best of {args.repeat}, files in {workdir}")
        print()
        header = (f"{'shape':<12} {'store':<7} {'commits':>8} {'events':>7} {'total ms':>9} {'µs/job':>8}"
                  f" {'µs/commit':>10} {'+µs/commit vs memory':>21}")
        print(header)
        print("-" * len(header))
        for shape in shapes:
            memory = best(args.repeat, partial(run_once, "memory", shape, args.jobs, args.concurrency, workdir))
            sqlite = best(args.repeat, partial(run_once, "sqlite", shape, args.jobs, args.concurrency, workdir))
            for name, (secs, commits, events) in (("memory", memory), ("sqlite", sqlite)):
                extra = ""
                if name == "sqlite":
                    extra = f"{(secs - memory[0]) / commits * 1e6:>21.1f}"
                print(f"{shape:<12} {name:<7} {commits:>8} {events:>7} {secs * 1e3:>9.1f}"
                      f" {secs / args.jobs * 1e6:>8.1f} {secs / commits * 1e6:>10.1f} {extra}")
        print()
        print(f"bare save(): one job row + one event per transaction, {args.jobs} transactions")
        for name in ("memory", "sqlite"):
            secs = min(bare_saves(name, args.jobs, workdir) for _ in range(args.repeat))
            print(f"  {name:<7} {secs / args.jobs * 1e6:>8.1f} µs/save")
    finally:
        if args.dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
