"""Code an import worker process can import (the tests directory is on its path): a gate that kills it."""

from __future__ import annotations

import multiprocessing
import os
import signal


def kill_on_marker(text: str) -> bool:
    """A redaction gate that kills a worker process (never the test's own) on ``KILL-THE-WORKER``."""
    if "KILL-THE-WORKER" in text and multiprocessing.parent_process() is not None:
        os.kill(os.getpid(), signal.SIGKILL)
    return False
