"""The spool: hook requests handed to a busy writer on disk instead of over its socket.

A hook waits :data:`~harness_mem.hook_writer.ACK_TIMEOUT` for its writer's ack. A writer held up
past that (another process holding the write lock: a ``gc --vacuum`` of a large file) must not make
the host wait on, and the hook must not store the turn itself either, since the writer still holds
the request and will write it once the lock is free. So a hook that sent its request and got no ack
in time hands it off here and returns; the writer drains the spool when it is free (and a new
writer as it starts, should the old one have died). The same request may then arrive twice, from
the socket and from the spool: the turn's id comes from the event id the hook gave it
(:func:`~harness_mem.integrations.claude_code.turn_id`), so the second write stores nothing.

A spool file holds the request as the wire carries it (the header line, then the host's bytes),
written under a temporary name, flushed to disk and renamed, in a directory beside the writer's
socket in the private runtime directory. Names sort by when the request was handed off, so the
writer stores the turns in the order they came.

The top of this module imports only the standard library: a hook imports it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time

#: A handed-off request's file name ends so; one being written has a leading dot and ``.tmp``.
SUFFIX = ".request"


def spool_dir(socket_file: str) -> str:
    """The spool of the writer listening at ``socket_file``."""
    return socket_file.removesuffix(".sock") + ".spool"


def hand_off(socket_file: str, request: bytes) -> bool:
    """Put ``request`` in the spool of the writer at ``socket_file``, durably; False when it cannot
    be written (the hook then stores the turn itself)."""
    directory = spool_dir(socket_file)
    name = f"{time.time_ns():020d}-{os.getpid()}-{secrets.token_hex(4)}"
    partial, final = os.path.join(directory, f".{name}.tmp"), os.path.join(directory, name + SUFFIX)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, 0o700)
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            view = memoryview(request)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(partial, final)
        _sync_dir(directory)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(partial)
        return False
    return True


def pending(socket_file: str) -> list[str]:
    """The paths of the requests waiting in the spool, oldest first."""
    directory = spool_dir(socket_file)
    try:
        names = sorted(n for n in os.listdir(directory) if n.endswith(SUFFIX) and not n.startswith("."))
    except OSError:
        return []
    return [os.path.join(directory, name) for name in names]


def read(path: str, limit: int) -> bytes | None:
    """A spooled request, at most ``limit`` bytes of it; None when it is gone or unreadable."""
    try:
        with open(path, "rb") as spooled:
            return spooled.read(limit)
    except OSError:
        return None


def settle(path: str) -> None:
    """Remove a request the writer has answered (or can never answer)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _sync_dir(directory: str) -> None:
    """Flush the directory entry of a renamed file too, where the platform allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
