"""Consolidation a coding agent's hooks start in the background: turns become facts off the hook's path.

A hook must answer in tens of milliseconds, and consolidating a long session takes longer. So
SessionStart (for a large backlog of the project's earlier sessions), PreCompact and SessionEnd
start ``python -m harness_mem.hook_consolidation DB --namespace N SESSION…``: a detached process
that consolidates those sessions with the rules (no model is loaded, as on every hook path), asks
the store's hook writer to embed what it derived, and exits. One runs per store at a time (a lock
file beside the hook writer's socket): the catch-up at SessionStart starts none while one runs (it
would redo the same backlog), and the session that ends meanwhile waits its turn. Two at once
would still be safe, only wasteful: consolidation is incremental and each session's watermark
moves in the transaction that writes its entries (:mod:`harness_mem.experience.consolidate`).

The top of this module imports only the standard library and modules that do (the hooks import it
to start one).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence

from . import hook_client, runtime

__all__ = ["lock_path", "main", "run", "running", "start"]


def lock_path(db: str, namespace: str) -> str:
    """The file a background consolidation of ``db`` and ``namespace`` holds locked while it runs."""
    key = hashlib.sha256(f"{os.path.realpath(db)}\0{namespace}".encode()).hexdigest()[:32]
    return os.path.join(runtime.runtime_dir(), f"consolidating-{key}.lock")


@contextlib.contextmanager
def _locked(db: str, namespace: str, *, wait: bool = False) -> Iterator[bool]:
    """Hold the store's consolidation lock meanwhile (waiting for it with ``wait``); yields False
    when another process holds it."""
    path = lock_path(db, namespace)
    if not runtime.make_private_dir(os.path.dirname(path)):
        yield True  # nowhere private to coordinate: run anyway (it is safe, see above)
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # the lock goes with it


def running(db: str, namespace: str) -> bool:
    """True while a background consolidation of ``db`` and ``namespace`` runs."""
    with _locked(db, namespace) as free:
        return not free


def start(db: str, namespace: str, sessions: Sequence[str], *, wait: bool = False) -> bool:
    """Start consolidating ``sessions`` of the file ``db`` in the background, detached from this
    process; False when it could not be started, or one is running already and not ``wait``
    (with ``wait`` it starts when that one is done)."""
    if not sessions or (not wait and running(db, namespace)):
        return False
    try:
        subprocess.Popen(  # noqa: S603  # our own interpreter and module, no shell
            [sys.executable, "-m", "harness_mem.hook_consolidation", db, "--namespace", namespace,
             *(["--wait"] if wait else []), "--", *sessions],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except OSError:
        return False
    return True


def run(db: str, namespace: str, sessions: Sequence[str], *, wait: bool = False) -> int:
    """Consolidate ``sessions`` of ``db`` as a hook's store is opened (no model, the default
    redactor), once no other consolidation of it runs (``wait``) or only if none does; the number
    of sessions that had something new."""
    from .experience.consolidate import consolidate
    from .store import MemoryStore

    with _locked(db, namespace, wait=wait) as free:
        if not free:
            return 0  # another one runs: it or the next hook takes these sessions
        with MemoryStore(db, namespace=namespace, embedder=None, redactor="default") as store:
            changed = sum(bool(consolidate(store, session=session).sessions) for session in sessions)
    if changed:  # what was derived gets its vectors from the writer's embedder, now rather than at the next hook
        hook_client.ask_to_embed(os.path.realpath(db), namespace)
    return changed


def main(argv: list[str] | None = None) -> int:
    """``python -m harness_mem.hook_consolidation DB [--namespace N] SESSION…``: what :func:`start` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness_mem.hook_consolidation", description=main.__doc__)
    parser.add_argument("db", help="the database file")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--wait", action="store_true", help="wait for a consolidation of the store that runs")
    parser.add_argument("sessions", nargs="+", help="the sessions to consolidate")
    args = parser.parse_args(argv)
    run(args.db, args.namespace, args.sessions, wait=args.wait)
    return 0


if __name__ == "__main__":
    sys.exit(main())
