"""Consolidation a coding agent's hooks start in the background: turns become facts off the hook's path.

A hook must answer in tens of milliseconds, and consolidating a long session takes longer. So
SessionStart (for a large backlog of the project's earlier sessions), PreCompact and SessionEnd
start ``python -m harness_mem.hook_consolidation DB --namespace N SESSION…``: a detached process
that consolidates those sessions with the rules (no model is loaded, as on every hook path) and
exits. Two of them at once are safe: consolidation is incremental and each session's watermark
moves in the transaction that writes its entries (:mod:`harness_mem.experience.consolidate`).

The top of this module imports only the standard library: the hooks import it to start one.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

__all__ = ["main", "run", "start"]


def start(db: str, namespace: str, sessions: Sequence[str]) -> bool:
    """Start consolidating ``sessions`` of the file ``db`` in the background, detached from this
    process; False when it could not be started."""
    if not sessions:
        return False
    try:
        subprocess.Popen(  # noqa: S603  # our own interpreter and module, no shell
            [sys.executable, "-m", "harness_mem.hook_consolidation", db, "--namespace", namespace, "--", *sessions],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except OSError:
        return False
    return True


def run(db: str, namespace: str, sessions: Sequence[str]) -> int:
    """Consolidate ``sessions`` of ``db`` as a hook's store is opened (no model, the default
    redactor); the number of sessions that had something new."""
    from .experience.consolidate import consolidate
    from .store import MemoryStore

    with MemoryStore(db, namespace=namespace, embedder=None, redactor="default") as store:
        return sum(bool(consolidate(store, session=session).sessions) for session in sessions)


def main(argv: list[str] | None = None) -> int:
    """``python -m harness_mem.hook_consolidation DB [--namespace N] SESSION…``: what :func:`start` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness_mem.hook_consolidation", description=main.__doc__)
    parser.add_argument("db", help="the database file")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("sessions", nargs="+", help="the sessions to consolidate")
    args = parser.parse_args(argv)
    run(args.db, args.namespace, args.sessions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
