"""The hook writer: one long-lived process per store that answers ``harness-mem hook EVENT``.

A hook is a fresh process on every prompt and tool call, and importing the store costs it half a
second. So the hook (:mod:`harness_mem.entry`) only reads the host's JSON and hands it, raw, to a
writer that keeps the :class:`~harness_mem.store.MemoryStore` open: the writer checks and answers it
with the same code as the in-process path (:func:`~harness_mem.integrations.claude_code.parse_payload`
and :func:`~harness_mem.integrations.claude_code.respond`, so redaction, cutting, repeats and tags
are the same), commits, and only then acks. An acked turn is in the database. A hook that reached
no writer stores its turn itself, in process (a turn the writer committed just before dying is then
the session's last turn again, which ``capture`` drops as a repeat).

A writer that took the request but sends no ack within :data:`ACK_TIMEOUT` is held up (another
process holds the write lock: a ``gc --vacuum`` of a large file) and will still store it. So the
hook neither keeps the host waiting nor stores the turn beside it: it returns at once, leaving a
detached copy of itself to wait for the ack (:func:`wait_detached`), which asks a new writer should
that one die first. The turn's id comes from the hook run's event id (``event_id`` in the header),
so a request that reaches a writer twice is stored once. The request stays in memory throughout.

One writer serves one (database file, namespace), with the default redactor and no embedder in a
hook's path: a thread beside it (:class:`~harness_mem.background_embedding.BackgroundEmbedder`)
gives each stored turn its vector a moment later, so it is found by meaning with no ``reindex``. It
listens on a Unix socket in a directory only its user can enter (``$HARNESS_MEM_RUNTIME_DIR``, else
``$XDG_RUNTIME_DIR/harness-mem``, else ``harness-mem-UID`` in the temporary directory), named by a
hash of the file's resolved path and the namespace; it answers only its own user's processes and
exits after :data:`DEFAULT_IDLE_SECONDS` without a request (``$HARNESS_MEM_WRITER_IDLE_SECONDS``),
removing its socket. Nothing but the store's own (redacted) write puts a turn's text on disk.

The wire format: the hook sends one JSON header line (:data:`PROTOCOL`, event, database, namespace,
working directory, event id, purpose), then the host's bytes as they came, then closes its sending side; the writer
answers one JSON line: ``{"status": "ok", "output": …, "notices": […]}``, ``{"status": "error", "message": …}``
(the one-line error the in-process path prints), or ``{"status": "retry"}`` (not this writer's
store: the hook answers in process). A header whose ``purpose`` is :data:`EMBED_PURPOSE` is no
hook's: a background consolidation says it wrote entries, and the writer's embedder embeds them.

The top of this module imports only the standard library: every hook imports it to reach the writer.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
from types import FrameType
from typing import TYPE_CHECKING, Any

from .hook_client import (
    EMBED_PURPOSE,
    MAX_PAYLOAD_BYTES,
    PROTOCOL,
    is_own_user,
    lock_path,
    read_all,
    socket_path,
)
from .runtime import make_private_dir

if TYPE_CHECKING:
    from .background_embedding import BackgroundEmbedder
    from .store import MemoryStore

IDLE_ENV = "HARNESS_MEM_WRITER_IDLE_SECONDS"
DEFAULT_IDLE_SECONDS = 600.0
#: How long the writer gives one hook to send its request (a hook that stalls must not hold up the rest).
REQUEST_TIMEOUT = 5.0
MAX_HEADER_BYTES = 64 * 1024
RAISE_ERRORS_ENV = "HARNESS_MEM_RAISE_ERRORS"

# ---- the writer's side ---------------------------------------------------------------------------


class _Stop(Exception):
    """SIGTERM or SIGHUP: leave the serving loop and clean up."""


def serve(db: str, namespace: str, *, idle: float) -> int:
    """Run the writer for ``db`` and ``namespace`` until it has been idle for ``idle`` seconds, or
    is told to stop; the exit status (0 also when another writer already serves this store)."""
    import fcntl

    from .background_embedding import BackgroundEmbedder

    db = os.path.realpath(db)
    path = socket_path(db, namespace)
    if path is None or not make_private_dir(os.path.dirname(path)) or not os.path.isfile(db):
        return 1  # never creates a database: the hook answers in process, with its error
    lock = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return 0  # another writer runs (or is starting) for this store
        store = _open(db, namespace)
        try:
            identity = _identity(db)
            listener = _listen(path)
            os.ftruncate(lock, 0)
            os.write(lock, f"{os.getpid()}\n".encode())
            embedder = BackgroundEmbedder(db, namespace)  # the turns get vectors beside it, not in a hook's time
            try:
                _loop(listener, store, db, namespace, identity, idle, embedder)
            finally:
                _remove_socket(path, listener)
                embedder.stop()
            if not _is_file(db, identity):
                # Deleted or replaced while open: closing would checkpoint and remove the -wal file
                # by its name, which may now be the new database's. Leave without touching it.
                os._exit(0)
        finally:
            store.close()
    finally:
        os.close(lock)  # the lock goes with it
    return 0


def _open(db: str, namespace: str) -> MemoryStore:
    from .store import MemoryStore

    # As the in-process hook does: no model, the default redactor.
    return MemoryStore(db, namespace=namespace, embedder=None, redactor="default")


def _identity(db: str) -> tuple[int, int]:
    info = os.stat(db)
    return info.st_dev, info.st_ino


def _is_file(db: str, identity: tuple[int, int]) -> bool:
    """True while ``db`` is still the file this writer opened."""
    try:
        return _identity(db) == identity
    except OSError:
        return False


def _listen(path: str) -> socket.socket:
    # Under the lock no other writer runs: a socket file left here is stale (its writer was killed).
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    umask = os.umask(0o177)  # the socket is 0600 from the moment it exists
    try:
        listener.bind(path)
    finally:
        os.umask(umask)
    listener.listen(64)
    return listener


def _remove_socket(path: str, listener: socket.socket) -> None:
    # Still under the lock: the file at ``path`` is this writer's, no other could have bound it.
    listener.close()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _loop(listener: socket.socket, store: MemoryStore, db: str, namespace: str, identity: tuple[int, int],
          idle: float, embedder: BackgroundEmbedder) -> None:
    def stop(signum: int, frame: FrameType | None) -> None:
        raise _Stop

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    deadline = time.monotonic() + idle
    try:
        while (remaining := deadline - time.monotonic()) > 0:
            listener.settimeout(remaining)
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                break
            with connection:
                if not _handle(connection, store, db, namespace, identity):
                    break
            embedder.notify()
            deadline = time.monotonic() + idle
    except _Stop:
        pass


def _handle(connection: socket.socket, store: MemoryStore, db: str, namespace: str,
            identity: tuple[int, int]) -> bool:
    """Answer one hook; False when this writer should stop (its database file was replaced)."""
    connection.settimeout(REQUEST_TIMEOUT)
    try:
        if not is_own_user(connection):
            return True  # another user's process: no answer at all
        header, raw = _read_request(connection)
    except (OSError, ValueError):
        return True  # a hook that went away or sent garbage: it stores its turn itself
    if header.get("protocol") != PROTOCOL or header.get("db") != db or header.get("namespace") != namespace:
        _send(connection, {"status": "retry"})
        return True
    if not _is_file(db, identity):  # deleted or replaced: writing on would go to a file no one reads
        _send(connection, {"status": "retry"})
        return False
    if header.get("purpose") == EMBED_PURPOSE:  # nothing to store: the loop wakes the embedder
        _send(connection, {"status": "ok", "output": None, "notices": []})
        return True
    _enter(header.get("cwd"))
    _send(connection, _answer(store, str(header.get("event")), raw, _event_id(header)))
    return True


def _enter(cwd: object) -> None:
    if isinstance(cwd, str):  # a relative transcript_path means what it meant to the hook
        with contextlib.suppress(OSError):
            os.chdir(cwd)


def _event_id(header: dict[str, Any]) -> str | None:
    found = header.get("event_id")
    return found if isinstance(found, str) and 0 < len(found) <= 128 else None


def _read_request(connection: socket.socket) -> tuple[dict[str, Any], bytes]:
    data = b""
    while b"\n" not in data:
        chunk = connection.recv(1 << 16)
        if not chunk or len(data) > MAX_HEADER_BYTES:
            raise ValueError("no header")
        data += chunk
    line, _, rest = data.partition(b"\n")
    header = json.loads(line)
    if not isinstance(header, dict):
        raise ValueError("the header is not an object")
    return header, rest + read_all(connection, MAX_PAYLOAD_BYTES - len(rest))


def _answer(store: MemoryStore, event: str, raw: bytes, event_id: str | None = None) -> dict[str, Any]:
    from .errors import InvalidInputError
    from .integrations import claude_code

    try:
        if len(raw) > MAX_PAYLOAD_BYTES:
            raise InvalidInputError(f"the {event} hook input is over {MAX_PAYLOAD_BYTES // 2**20} MiB")
        answered = claude_code.answer(store, claude_code.parse_payload(raw, event), event, event_id)
    except Exception as exc:
        return {"status": "error", "message": error_line(exc)}
    return {"status": "ok", "output": answered.output, "notices": list(answered.notices)}


def error_line(exc: Exception) -> str:
    """The message the in-process hook prints after ``Error: `` for ``exc``."""
    from .cliutils import user_error

    mapped = user_error(exc, RAISE_ERRORS_ENV)
    if mapped is not None:
        return mapped.format_message()
    import traceback  # asked for with $HARNESS_MEM_RAISE_ERRORS: the whole story

    return "".join(traceback.format_exception(exc)).rstrip()


def _send(connection: socket.socket, reply: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # the hook gave up waiting: it stores its turn itself
        connection.sendall(json.dumps(reply, ensure_ascii=False).encode() + b"\n")


def idle_seconds() -> float:
    """``$HARNESS_MEM_WRITER_IDLE_SECONDS`` when it is a positive number, else the default."""
    try:
        value = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_SECONDS)
    except ValueError:
        return DEFAULT_IDLE_SECONDS
    return value if 0 < value < float("inf") else DEFAULT_IDLE_SECONDS


def main(argv: list[str] | None = None) -> int:
    """``python -m harness_mem.hook_writer DB [--namespace N]``: what :func:`start` runs."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m harness_mem.hook_writer", description=main.__doc__)
    parser.add_argument("db", help="the database file")
    parser.add_argument("--namespace", default="default")
    args = parser.parse_args(argv)
    return serve(args.db, args.namespace, idle=idle_seconds())


if __name__ == "__main__":
    sys.exit(main())
