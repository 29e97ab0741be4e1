"""Worker processes that take a share of a large job's CPU work (an import's, a sync's redaction):
when one pays for itself, and how it ends with the process that started it.

Apart from :mod:`harness_mem.jsonl` and :mod:`harness_mem.sync.incoming`, which both start them, so
that neither imports the other.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading

__all__ = ["PARALLEL_MIN_LINES", "exit_with_parent"]

# Below this, starting a worker process (about half a second: it imports harness_mem) costs more
# than it saves.
PARALLEL_MIN_LINES = 20_000


def exit_with_parent() -> None:
    """End this worker process as soon as the process that started it is gone, however it ended.

    A worker waits for chunks from its parent; if the parent is killed (``kill -9``), nothing ever
    tells it to stop, and it would wait forever, holding the resource tracker open with it. The
    parent's sentinel (the end of a pipe only the parent holds open, or its process handle on
    Windows) becomes ready when the parent dies, so one thread waiting on it is enough.
    """
    parent = multiprocessing.parent_process()
    if parent is None:  # not started by multiprocessing: nothing to watch
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="harness-mem-parent-watch", daemon=True).start()
