"""Errors harness_loop raises on purpose, under harness_mem's tree so one ``except`` catches both::

    HarnessMemError                     (harness_mem.errors)
    ├── InvalidInputError
    │   └── DagError                    a job graph refused before anything ran
    └── OrchestratorError               the orchestrator cannot go on as asked
        └── DagError

A run that fails (dead letters, budget, a router's stop) is not an error: it is a finished run
whose report says so. These exceptions are for graphs that cannot be run at all.
"""

from __future__ import annotations

from harness_mem.errors import HarnessMemError, InvalidInputError


class OrchestratorError(HarnessMemError):
    """The orchestrator cannot go on as asked."""


class DagError(OrchestratorError, InvalidInputError):
    """A job graph with a duplicate id, an unknown dependency or route, or a cycle."""
