"""Incoming words through this store's redactor, a large apply's share of them in a worker process.

Text from another device passes this store's redactor too (a device that stores raw text cannot make
this one). That is most of what a fresh device's first sync costs in Python, as it is for an
import, so a large apply shares it the way an import does: one worker process scrubs batches from
the end while this process scrubs from the start and takes back every batch the worker has not
begun (the worker starts in about half a second; a busy machine gives it less). The results come
back in order, the same as scrubbing here.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NamedTuple

from ..errors import StorageError
from ..redaction import Redactor
from ..workers import PARALLEL_MIN_LINES, exit_with_parent

#: Below this many texts, starting a worker (about half a second) costs more than it saves.
PARALLEL_MIN = PARALLEL_MIN_LINES
BATCH = 1000  # texts a worker scrubs in one call


class Scrubbed(NamedTuple):
    """A text as this store's redactor leaves it: its new words, what was found, whether it is refused."""

    text: str
    counts: dict[str, int]
    blocked: bool


def scrub_all(redactor: Redactor, texts: Sequence[str]) -> list[Scrubbed]:
    """Each text scrubbed by ``redactor``, in order; a large list shared with a worker process."""
    if len(texts) < PARALLEL_MIN or (os.cpu_count() or 1) < 2 or not _travels(redactor):
        return [scrub_one(redactor, text) for text in texts]
    starts = list(range(0, len(texts), BATCH))
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
                               initargs=(redactor,))
    try:
        # The worker works from the end; this process from the start, taking back what it has not begun.
        handed: dict[int, Future[list[Scrubbed]]] = {
            start: pool.submit(_scrub_in_worker, list(texts[start:start + BATCH])) for start in reversed(starts[1:])}
        done: list[Scrubbed] = []
        for start in starts:
            future = handed.get(start)
            if future is None or future.cancel():
                done += [scrub_one(redactor, text) for text in texts[start:start + BATCH]]
            else:
                done += future.result()
        return done
    except BrokenProcessPool:
        raise StorageError("the sync's worker process stopped unexpectedly; nothing of this chunk was applied"
                           " — sync again") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def scrub_one(redactor: Redactor, text: str) -> Scrubbed:
    """One text scrubbed by ``redactor``."""
    found = redactor.scrub(text)
    return Scrubbed(found.text, found.counts, found.blocked)


def _travels(redactor: Redactor) -> bool:
    try:
        pickle.dumps(redactor)
    except Exception:  # a custom detector that cannot travel (a lambda, say): scrub here instead
        return False
    return True


_worker_redactor: Redactor | None = None


def _start_worker(redactor: Redactor) -> None:
    global _worker_redactor
    _worker_redactor = redactor
    exit_with_parent()


def _scrub_in_worker(texts: list[str]) -> list[Scrubbed]:
    assert _worker_redactor is not None
    return [scrub_one(_worker_redactor, text) for text in texts]
