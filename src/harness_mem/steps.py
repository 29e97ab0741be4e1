"""How maintenance works beside writers: in steps of a short write transaction each, a pause between.

A writer in another process waits for the write lock by polling (SQLite's busy handler sleeps up to
100 ms between tries; PostgreSQL queues it). So every long job — a purge's deletes, the keyword
index's merge and rebuild, a table's rewrite, free pages handed back — is cut into steps that hold
the lock about :data:`STEP_TARGET_S`, with :data:`STEP_PAUSE_S` between them: a step taken again
at once would win every time, and the writer wait for all the steps.

A step is bounded by the time it holds the lock, measured while it holds it (:func:`in_steps`): it
does its work in small chunks and commits once they have taken its time, so a busy machine makes a
step do less rather than hold the lock longer (steps sized from earlier steps' times held a writer
4-6 s on a 2 GB file beside a CPU load of 6-15: each step took longer than the last had). A chunk's
cost must grow with its size alone: one that does fixed work first (a scan) takes that long however
small it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager

__all__ = ["CHUNK_TARGET_S", "STEP_PAUSE_S", "STEP_TARGET_S", "in_steps", "next_step"]

#: How long one step should hold the write lock.
STEP_TARGET_S = 0.25
#: How long one chunk of a step should take: the most a step overshoots its time by, unless a chunk
#: is suddenly much slower than the one before it.
CHUNK_TARGET_S = 0.04
#: The pause between two steps, the lock let go (1.6 s of waiting was measured beside a 270 MB gc
#: whose steps followed each other at once).
STEP_PAUSE_S = 0.15


def next_step(size: int, took_s: float, bounds: tuple[int, int, int], target_s: float = STEP_TARGET_S) -> int:
    """The next step's (or chunk's) size: ``size`` scaled so it takes about ``target_s`` (at most
    twice as large: a step's cost per item can grow, as merges reach the larger segments);
    ``bounds`` are (first, least, most)."""
    _, least, most = bounds
    return max(least, min(most, 2 * size, int(size * target_s / max(took_s, 0.001))))


def in_steps(transaction: Callable[[], AbstractContextManager[object]], chunk: Callable[[int], bool],
             bounds: tuple[int, int, int], pause: Callable[[], None]) -> None:
    """Call ``chunk(size)`` until it returns False (nothing left), in write transactions that each
    end when the time they have held the lock reaches :data:`STEP_TARGET_S`, ``pause()`` after each.

    The clock starts once ``transaction()`` holds the lock and is read after every chunk; a chunk's
    size (``bounds``: first, least, most) is scaled so it takes about :data:`CHUNK_TARGET_S`, and a
    step stops before a chunk that would take it past its time at the last chunk's pace. The commit
    holds the lock too, writing every page the step changed to the log (0.4 s for 30,000 pages at
    load 15): its time per second of chunks, measured at each commit, is counted into the next step.
    """
    size, commit_share = bounds[0], None  # no commit timed yet: the first step is one chunk
    while True:
        with transaction():
            held = time.monotonic()
            while True:
                began = time.monotonic()
                more = chunk(size)
                ended = time.monotonic()
                size = next_step(size, ended - began, bounds, CHUNK_TARGET_S)
                if not more or commit_share is None:
                    break
                # Another chunk at the last one's pace, and the commit they would make:
                if (ended - held + ended - began) * (1 + commit_share) >= STEP_TARGET_S:
                    break
        commit_share = (time.monotonic() - ended) / max(ended - held, 0.001)
        if not more:
            return
        pause()
