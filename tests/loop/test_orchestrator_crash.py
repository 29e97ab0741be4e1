"""kill -9 in the middle of a run, then resume it from another process, on SQLite and on PostgreSQL.

The child (``crash_child.py``) runs a 20-job DAG against a real database and logs every execution. Two
jobs hang and fill both concurrency slots, so when the parent sends SIGKILL it knows exactly what is
in flight: two jobs running, one queued behind them, eleven succeeded. A second process
resumes the run. What must hold: the run completes; no job that had succeeded (was committed)
before the kill runs again; every unfinished job runs exactly once more; every job's result in the
database is the one its inputs determine.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from harness_loop.runstore import RunStore

CHILD = Path(__file__).with_name("crash_child.py")
HANG = ("j21", "j32")  # j32 does not depend on j21, so both end up running at once
RUN_ID = "crash-run"


def child_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def log_lines(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        kind, job, pid = line.split()
        lines.append((kind, job, int(pid)))
    return lines


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_in_a_new_process(tmp_path: Path, run_target: str) -> None:
    db, log = run_target, tmp_path / "executions.log"
    with subprocess.Popen(
        [sys.executable, str(CHILD), "start", db, str(log), RUN_ID, ",".join(HANG)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            deadline = time.monotonic() + 60
            while not {("start", job, child.pid) for job in HANG} <= set(log_lines(log)):
                assert child.poll() is None, f"the child exited early: {child.communicate()[1]}"
                assert time.monotonic() < deadline, "the child never reached the hanging jobs"
                time.sleep(0.01)
            # No sleep needed: j33 was queued in the same commit that started j32, and with both slots
            # held by hung jobs nothing else can move.
            os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=10)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert child.returncode == -signal.SIGKILL

    with RunStore.open(db) as store:
        at_kill = store.load(RUN_ID)
    all_jobs = {j.job_id for j in at_kill.jobs}
    in_state = {
        s: {j.job_id for j in at_kill.jobs if j.state == s} for s in ("succeeded", "running", "queued")
    }
    succeeded_before = in_state["succeeded"]
    assert len(all_jobs) == 20
    assert at_kill.run.state == "executing"
    assert in_state["running"] == set(HANG)
    assert in_state["queued"] == {"j33"}
    assert succeeded_before == {"j00", "j01", "j02", "j03", "j10", "j11", "j12", "j13", "j20", "j22", "j23"}
    executed_before = len(log_lines(log))

    resumed = subprocess.Popen(
        [sys.executable, str(CHILD), "resume", db, str(log), RUN_ID],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    assert json.loads(out)["state"] == "completed"

    after = log_lines(log)[executed_before:]
    assert after and all(pid == resumed.pid for _, _, pid in after)
    resumed_starts = [job for kind, job, _ in after if kind == "start"]
    assert not set(resumed_starts) & succeeded_before, "a job that had succeeded ran again"
    assert sorted(resumed_starts) == sorted(all_jobs - succeeded_before)  # each unfinished job once

    expected = child_module().expected_answers()
    with RunStore.open(db) as store:
        final = store.load(RUN_ID)
        events = store.events(RUN_ID)
    assert final.run.state == "completed"
    assert {j.job_id: (j.state, j.result_text) for j in final.jobs} == {
        job_id: ("succeeded", text) for job_id, text in expected.items()
    }
    # The attempts the kill interrupted are undone, not charged: one attempt, one visit each.
    assert all((final.job(job).attempts, final.job(job).visits) == (1, 1) for job in HANG)
    # Only committed results count: 20 jobs x 2 tokens, however many executions the kill wasted.
    assert final.run.spent_tokens == 40
    resumed_event = next(e for e in events if e.kind == "run.resumed")
    assert set(resumed_event.data["reset"]) == {*HANG, "j33"}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
