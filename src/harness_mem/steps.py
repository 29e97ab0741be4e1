"""How maintenance works beside writers: in steps of a short write transaction each, a pause between.

A writer in another process waits for the write lock by polling (SQLite's busy handler sleeps up to
100 ms between tries; PostgreSQL queues it). So every long job — a purge's deletes, the keyword
index's merge and rebuild, a table's rewrite, free pages handed back — is cut into steps sized to
hold the lock about :data:`STEP_TARGET_S`, with :data:`STEP_PAUSE_S` between them: a step taken again
at once would win every time, and the writer wait for all the steps.
"""

from __future__ import annotations

__all__ = ["STEP_PAUSE_S", "STEP_TARGET_S", "next_step"]

#: How long one step should hold the write lock: each step's size is scaled from the last one's
#: time, so a slow disk gets smaller steps and a writer beside it waits no longer.
STEP_TARGET_S = 0.25
#: The pause between two steps, the lock let go (1.6 s of waiting was measured beside a 270 MB gc
#: whose steps followed each other at once).
STEP_PAUSE_S = 0.15


def next_step(size: int, took_s: float, bounds: tuple[int, int, int]) -> int:
    """The next step's size: ``size`` scaled so the step takes about ``STEP_TARGET_S`` (at most
    twice as large: a step's cost per item can grow, as merges reach the larger segments);
    ``bounds`` are (first, least, most)."""
    _, least, most = bounds
    return max(least, min(most, 2 * size, int(size * STEP_TARGET_S / max(took_s, 0.001))))
