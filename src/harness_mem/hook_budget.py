"""A hook answered in process, within the time the host gives it.

A hook no writer answered runs the full CLI itself. Its write waits for the store's write lock as
long as the busy timeout (30 s), and another process may hold it that long (a ``gc --vacuum`` of a
large file); Claude Code kills a hook after 10 s, so a hook that waited would block the host and
then lose its turn. So the CLI runs in a forked child whose output this process relays: when the
child has not finished within the budget, the hook returns (status 0, a one-line note) and the
child finishes alone, storing the turn once the lock is free; only its answer (context the host
no longer waits for) is lost.

The top of this module imports only the standard library: every hook that falls back imports it.
"""

from __future__ import annotations

import os
import selectors
import sys
import time
from collections.abc import Callable

#: Seconds from a hook's start after which it returns, whatever its child still does (Claude Code's
#: timeout for harness-mem's hooks is 10 s; the rest is for starting and leaving).
IN_PROCESS_BUDGET = 8.0
BUSY_NOTE = ("note: the store is busy (another process holds its write lock): this hook's turn is"
             " being stored in the background\n")


def run_within(work: Callable[[], None], deadline: float) -> None:
    """Run ``work`` (which ends by exiting, as the CLI does) in a child and relay its stdout, stderr
    and exit status until ``deadline`` (a :func:`time.monotonic` time); past it, leave it running
    and exit 0 with :data:`BUSY_NOTE`. Never returns. Where no process can be forked, ``work`` runs
    here, unbounded."""
    if not hasattr(os, "fork"):
        work()
        sys.exit(0)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _child(work, out_read, out_write, err_read, err_write)
    os.close(out_write)
    os.close(err_write)
    relayed = _relay({out_read: 1, err_read: 2}, deadline)
    if not relayed:
        os.write(2, BUSY_NOTE.encode())
        os._exit(0)  # the child carries on alone (its own session: the host's kill does not reach it)
    _, status = os.waitpid(pid, 0)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def _child(work: Callable[[], None], out_read: int, out_write: int, err_read: int, err_write: int) -> None:
    """The forked child: its output into the pipes, never the host's; then ``work``, exiting as it does
    (its exit handlers run, so what it loaded shows as in any process)."""
    try:
        os.setsid()
        os.close(out_read)
        os.close(err_read)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_write, 1)
        os.dup2(err_write, 2)
        for fd in (null, out_write, err_write):
            os.close(fd)
    except OSError:
        os._exit(1)
    work()
    sys.exit(0)


def _relay(pipes: dict[int, int], deadline: float) -> bool:
    """Copy each pipe to its descriptor until all are closed (True) or ``deadline`` passes (False).
    Output is held until the child is done: a line cut at the deadline would be no JSON at all."""
    held: dict[int, list[bytes]] = {fd: [] for fd in pipes}
    with selectors.DefaultSelector() as selector:
        for fd in pipes:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    held[key.fd].append(chunk)
                else:
                    selector.unregister(key.fd)
                    os.close(key.fd)
    for fd, target in pipes.items():
        data = b"".join(held[fd])
        while data:
            data = data[os.write(target, data):]
    return True
