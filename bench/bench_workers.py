"""Worker processes draining one run on PostgreSQL: every job done exactly once, one worker killed.

    python bench/bench_workers.py [--jobs 1000] [--workers 4]

A run of ``--jobs`` jobs (layers of 20, each job depending on two of the layer before) is stored
on a PostgreSQL server started here (as the tests start it), then drained three times from
scratch: by one worker process, by ``--workers`` processes, and by ``--workers`` processes of which
the first is killed with SIGKILL in its twelfth job (the jobs downstream of its job wait for its
lease to lapse, so that drain carries most of the lease's 3 s). Each worker is ``tests/loop/drain_worker.py``: its jobs take 2 ms and record
their execution in a table of their own. Printed: the wall time of each drain (from the go signal
to the last worker's exit), the executions counted per job (every job exactly once), and how long
the killed worker's job waited for its lease (3 s) to lapse.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import PostgresServer  # noqa: E402

from harness_loop.job import Job  # noqa: E402
from harness_loop.runstore import RunStore  # noqa: E402
from harness_loop.workers import submit  # noqa: E402

WORKER = ROOT / "tests" / "loop" / "drain_worker.py"
TTL_MS = 3000
HANG_AT = 12


def layered(count: int, width: int = 20) -> list[Job]:
    jobs = []
    for i in range(count):
        layer, at = divmod(i, width)
        deps = [] if layer == 0 else [f"j{(layer - 1) * width + (at + d) % width}" for d in (0, 1)]
        jobs.append(Job(id=f"j{i}", prompt=f"job {i}", deps=deps))
    return jobs


def drain(dsn: str, jobs: list[Job], workers: int, kill: bool) -> dict[str, object]:
    with RunStore.open(dsn) as store:
        run_id = submit(store, f"drain {len(jobs)} jobs", jobs)
        store.tables.execute("DROP TABLE IF EXISTS executions")
        store.tables.execute("CREATE TABLE executions (job_id TEXT NOT NULL, worker INTEGER NOT NULL, pid INTEGER NOT NULL)")
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        procs = [subprocess.Popen([sys.executable, str(WORKER), dsn, run_id, str(work), str(n), str(TTL_MS),
                                   *([str(HANG_AT)] if kill and n == 0 else [])],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(workers)]
        while not all((work / f"ready-{n}").exists() for n in range(workers)):
            time.sleep(0.01)
        began = time.perf_counter()
        (work / "go").touch()
        killed_at = None
        if kill:
            # The others can drain a small run before worker 0 reaches its twelfth job: then none is killed.
            while not (work / "hang-0").exists() and procs[0].poll() is None:
                time.sleep(0.005)
            if procs[0].poll() is None:
                os.kill(procs[0].pid, signal.SIGKILL)
                killed_at = time.perf_counter() - began
        for p in procs:
            p.communicate(timeout=600)
        seconds = time.perf_counter() - began
    with RunStore.open(dsn) as store:
        executions = store.tables.execute("SELECT job_id FROM executions").fetchall()
        state = store.load(run_id).run.state
    counts = Counter(job_id for (job_id,) in executions)
    return {"seconds": seconds, "state": state, "jobs": len(jobs), "executed": len(executions),
            "each once": set(counts.values()) == {1} and len(counts) == len(jobs), "killed at": killed_at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    jobs = layered(args.jobs)
    with PostgresServer() as server:
        one = drain(server.dsn, jobs, 1, kill=False)
        alive = drain(server.dsn, jobs, args.workers, kill=False)
        many = drain(server.dsn, jobs, args.workers, kill=True)
    print("| drain | workers | run | jobs executed | every job once | seconds |")
    print("|---|---|---|---|---|---|")
    for name, result, count in (("one worker", one, 1), (f"{args.workers} workers", alive, args.workers),
                                (f"{args.workers} workers, one killed", many, args.workers)):
        print(f"| {name} | {count} | {result['state']} | {result['executed']} of {result['jobs']} |"
              f" {result['each once']} | {result['seconds']:.1f} |")
    if many["killed at"] is None:
        print(f"\nworker 0 never reached its job {HANG_AT}: none was killed (give more --jobs)")
    else:
        print(f"\nthe killed worker died {many['killed at']:.1f} s in; its job waited for a {TTL_MS / 1000:.0f} s lease")


if __name__ == "__main__":
    main()
