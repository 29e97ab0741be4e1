"""Run leases: two orchestrators (or processes) never execute the same run at once."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import anyio
import pytest

from harness_loop.errors import OrchestratorError
from harness_loop.job import Job, JobResult
from harness_loop.orchestrator import Orchestrator
from harness_loop.runs import RunState
from harness_loop.runstore import InMemoryRunStore, RunRecord, RunStore, RunStoreLike

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def runs(request: pytest.FixtureRequest, new_target: Callable[[str], str]) -> Iterator[RunStoreLike]:
    store: RunStore | InMemoryRunStore = (
        InMemoryRunStore() if request.param == "memory" else RunStore.open(new_target(request.param)))
    store.create(RunRecord("r1", "a goal", "executing"))
    yield store
    store.close()


def _dead_pid() -> int:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(child.stdout)  # exited and reaped: no process has this pid (until it is reused)


def test_a_lease_has_one_holder_until_released(runs: RunStoreLike) -> None:
    assert runs.claim("r1", "host:1:a") is None
    assert runs.claim("r1", "host:1:a") is None  # renewing
    assert runs.claim("r1", "elsewhere:7:b") == "host:1:a"
    runs.release("r1", "elsewhere:7:b")  # not the holder: no effect
    assert runs.claim("r1", "elsewhere:7:b") == "host:1:a"
    runs.release("r1", "host:1:a")
    assert runs.claim("r1", "elsewhere:7:b") is None


def test_a_lapsed_lease_or_a_dead_holder_can_be_taken_over(runs: RunStoreLike) -> None:
    assert runs.claim("r1", "elsewhere:7:a", ttl_ms=0) is None  # lapses at once
    assert runs.claim("r1", "elsewhere:8:b") is None
    here_but_dead = f"{socket.gethostname()}:{_dead_pid()}:c"
    runs.release("r1", "elsewhere:8:b")
    assert runs.claim("r1", here_but_dead) is None
    assert runs.claim("r1", "elsewhere:9:d") is None  # its process is gone: the lease means nothing
    here_and_alive = f"{socket.gethostname()}:1:e"  # pid 1 always exists
    runs.release("r1", "elsewhere:9:d")
    assert runs.claim("r1", here_and_alive) is None
    assert runs.claim("r1", "elsewhere:9:d") == here_and_alive


async def test_a_run_executing_elsewhere_is_neither_resumed_nor_cancelled(run_target: str) -> None:
    started, release = anyio.Event(), anyio.Event()

    async def slow(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        started.set()
        await release.wait()
        return JobResult("done")

    with RunStore.open(run_target) as first_store, RunStore.open(run_target) as second_store:
        first = Orchestrator(slow, store=first_store)
        second = Orchestrator(slow, store=second_store)  # another process, as far as the lease knows
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: first.run("long", [Job("a", "A")], run_id="long"))
            await started.wait()
            with pytest.raises(OrchestratorError, match="run long is being executed by"):
                await second.resume("long")
            with pytest.raises(OrchestratorError, match="is being executed by"):
                second.cancel("long")
            release.set()
        report = await second.resume("long")  # finished and released: returned as it is
        assert report.state is RunState.COMPLETED
        assert second_store.claim("long", "someone:1:x") is None  # nobody holds it now


async def test_an_execution_that_lost_its_lease_stops_acting(run_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness_loop.orchestrator.LEASE_MS", 150)  # renew every 50 ms
    started = anyio.Event()

    async def forever(job: Job, upstream: Mapping[str, JobResult]) -> JobResult:
        started.set()
        await anyio.sleep(60)
        return JobResult("never")

    with RunStore.open(run_target) as store:
        orchestrator = Orchestrator(forever, store=store)
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                async def run_and_expect_the_stop() -> None:
                    with pytest.raises(OrchestratorError, match="run stalled was taken over by elsewhere:9:z"):
                        await orchestrator.run("stalled", [Job("a", "A")], run_id="stalled")

                tg.start_soon(run_and_expect_the_stop)
                await started.wait()
                # Another process decided this one was gone (it stalled past the lease) and took over.
                with RunStore.open(run_target) as other, other.tables.transaction():
                    other.tables.execute("UPDATE runs SET lease_owner = 'elsewhere:9:z', lease_until = ?", (9 * 10**15,))
        assert store.load("stalled").run.state == "executing"  # nothing written after the takeover
