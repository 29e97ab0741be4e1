"""Offline consolidation as an orchestrator job, so a scheduled run can keep a store consolidated.

:class:`ConsolidationRunner` is a :class:`~harness_loop.orchestrator.JobRunner` that runs
:func:`harness_mem.experience.consolidate` on a store::

    store = MemoryStore("agent.db")
    orchestrator = Orchestrator(ConsolidationRunner(store), store=RunStore.open("agent.db"))
    await orchestrator.run("nightly-2026-12-01", [Job(id="consolidate", prompt='{"idle": "10m"}')])

A job's prompt holds its options as JSON (``session``, ``since``, ``idle``; empty for none) and its
result is the report's summary line, with the report itself as JSON on the next line. Consolidation
is idempotent and resumable, so a job that crashed and is run again by a resumed run (the
orchestrator's rule for unfinished jobs) finishes the work without repeating any of it. It runs in a
worker thread, so other jobs of the run go on meanwhile: give it a store of its own (a connection
nothing else uses at the same time).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from harness_mem import MemoryStore, TextModel
from harness_mem.errors import InvalidInputError
from harness_mem.experience import consolidate

from .job import Job, JobId, JobResult

__all__ = ["OPTIONS", "ConsolidationRunner"]

#: What a consolidation job's prompt may set.
OPTIONS = frozenset({"session", "since", "idle"})


class ConsolidationRunner:
    """Runs each job it is given as one consolidation of ``store`` (with ``model``, when given)."""

    def __init__(self, store: MemoryStore, *, model: TextModel | None = None) -> None:
        self.store = store
        self.model = model

    @staticmethod
    def options(prompt: str) -> dict[str, Any]:
        """The options a job's prompt sets; raises :class:`InvalidInputError` naming what is wrong."""
        if not prompt.strip():
            return {}
        try:
            options = json.loads(prompt)
        except ValueError:
            raise InvalidInputError(f"a consolidation job's prompt is JSON options, not {prompt[:60]!r}") from None
        if not isinstance(options, dict) or not set(options) <= OPTIONS:
            raise InvalidInputError(f"a consolidation job takes the options {sorted(OPTIONS)}, not {options!r:.80}")
        return options

    async def run(self, job: Job, upstream: Mapping[JobId, JobResult]) -> JobResult:
        options = self.options(job.prompt)
        report = await anyio.to_thread.run_sync(lambda: consolidate(self.store, model=self.model, **options))
        return JobResult(text=f"Consolidated {report.summary()}\n{json.dumps(report.to_dict())}")
