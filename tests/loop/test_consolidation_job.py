"""Consolidation as an orchestrator job: a scheduled run consolidates the store, and a bad job fails alone."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_loop.consolidation_job import ConsolidationRunner
from harness_loop.job import Job, RetryPolicy
from harness_loop.orchestrator import Orchestrator
from harness_loop.runs import RunState
from harness_loop.runstore import RunStore
from harness_mem import MemoryStore
from harness_mem.errors import InvalidInputError

pytestmark = pytest.mark.anyio

LINES = (("Ada", "I moved to Porto last month and I love the food there."), ("Bo", "Do you miss Lisbon?"),
         ("Ada", "Not really, I started working at a bakery near the river."))


def talk(store: MemoryStore, session: str) -> None:
    store.add_many([{"content": text, "role": role, "session": session, "created_at": "2023-05-08T10:00:00Z"}
                    for role, text in LINES])


async def test_a_scheduled_run_consolidates_the_store_and_a_second_adds_nothing(tmp_path: Path) -> None:
    memory = MemoryStore(tmp_path / "memory.db", embedder=None)
    talk(memory, "c-1")
    talk(memory, "c-2")
    runs = RunStore.open(tmp_path / "runs.db")
    orchestrator = Orchestrator(ConsolidationRunner(memory), store=runs)
    report = await orchestrator.run("nightly-1", [Job(id="consolidate", prompt="")])
    assert report.state is RunState.COMPLETED
    result = report.job("consolidate").result
    assert result is not None and result.text.startswith("Consolidated 2 sessions: 2 segments, 2 facts")
    assert memory.count(kind="summary") == 2
    again = await orchestrator.run("nightly-2", [Job(id="consolidate", prompt='{"idle": "10m"}')])
    assert again.job("consolidate").result.text.startswith("Consolidated 0 sessions")  # type: ignore[union-attr]
    memory.close()
    runs.close()


async def test_a_job_with_bad_options_fails_with_a_clear_reason(tmp_path: Path) -> None:
    memory = MemoryStore(tmp_path / "memory.db", embedder=None)
    report = await Orchestrator(ConsolidationRunner(memory)).run(
        "bad", [Job(id="consolidate", prompt='{"everything": true}', retry=RetryPolicy(max_attempts=1))]
    )
    assert report.state is not RunState.COMPLETED
    assert "a consolidation job takes the options ['idle', 'session', 'since']" in (report.job("consolidate").error or "")
    memory.close()


def test_options_are_checked() -> None:
    assert ConsolidationRunner.options("") == {}
    assert ConsolidationRunner.options('{"session": "s-1"}') == {"session": "s-1"}
    with pytest.raises(InvalidInputError, match="prompt is JSON options"):
        ConsolidationRunner.options("consolidate everything")
