"""The hook's side of the writer (:mod:`harness_mem.hook_writer`): where a writer listens, asking it
to store one hook's turn (or to embed what another process wrote beside it), and starting one.

Kept apart from the writer itself, so that what only asks a writer (a hook, a background
consolidation) imports nothing of what serves.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import sys
import time
from typing import Any, NamedTuple

from .runtime import is_private, make_private_dir, runtime_dir

#: Bumped when the wire format changes: it is part of the socket's name, so an old writer still
#: running after an upgrade is never asked in a format it does not know.
PROTOCOL = 1
#: A tool result past this is not a turn worth keeping whole, and refusing it bounds the memory a
#: hook can take (tool results are cut to a few thousand characters anyway). Both paths refuse it.
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
MAX_REPLY_BYTES = 16 * 1024 * 1024
#: How long a hook waits for the ack before it stores the turn itself (Claude Code gives a hook 10 s).
ACK_TIMEOUT = 5.0
#: How long a detached hook waits for a held-up writer (its busy timeout is 30 s, and the hooks
#: queued behind it each may wait as long), and how often it asks a new one when that one died.
DETACHED_WAIT_SECONDS = 600.0
DETACHED_ATTEMPTS = 20
DETACHED_RETRY_SECONDS = 0.5
# sun_path holds 108 bytes on Linux and 104 on macOS, the terminating NUL included.
MAX_SOCKET_PATH_BYTES = 103
#: A request's purpose when it is not a hook's: another process (a background consolidation) wrote
#: entries beside the writer, which its embedder would otherwise leave without vectors until the next hook.
EMBED_PURPOSE = "embed"


class Reply(NamedTuple):
    """The writer's answer to one hook: what to print on stdout, or the one-line error, and the
    notices for stderr (what the hook skipped, though it succeeded)."""

    output: str | None = None
    error: str | None = None
    notices: tuple[str, ...] = ()
    #: No ack came in time: a detached copy of the hook waits for it (the writer will store the turn).
    handed_off: bool = False


# ---- where a writer listens ----------------------------------------------------------------------


def socket_path(db: str, namespace: str) -> str | None:
    """The socket of the writer for ``db`` (a resolved path) and ``namespace``; None when the
    runtime directory's path is too long for a Unix socket."""
    key = hashlib.sha256(f"{PROTOCOL}\0{db}\0{namespace}".encode()).hexdigest()[:32]
    path = os.path.join(runtime_dir(), f"writer-{key}.sock")
    return path if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES else None


def lock_path(socket_file: str) -> str:
    """The file a writer holds locked while it runs (its pid inside): one writer per socket."""
    return socket_file.removesuffix(".sock") + ".lock"


def peer_uid(connection: socket.socket) -> int | None:
    """The user id of the process at the other end; None where the platform cannot tell (there the
    private directory is the only guard)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)


def is_own_user(connection: socket.socket) -> bool:
    uid = peer_uid(connection)
    return uid is None or uid == os.getuid()


# ---- the hook's side -----------------------------------------------------------------------------


def ask(db: str, namespace: str, event: str, raw: bytes, *, timeout: float = ACK_TIMEOUT,
        event_id: str | None = None, detach: bool = True, purpose: str = "hook") -> Reply | None:
    """The running writer's answer to one hook; None when no writer answered (none running, a stale
    socket, a writer that died before its ack, or one for another store): the hook stores its turn
    itself. A writer that took the request but sends no ack within ``timeout`` will still store it:
    a detached copy of the hook waits for that ack (``handed_off``, see :func:`wait_detached`)."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    path = socket_path(db, namespace)
    if path is None or not is_private(os.path.dirname(path)):
        return None
    event_id = event_id or new_event_id()
    header = {"protocol": PROTOCOL, "event": event, "db": db, "namespace": namespace, "cwd": _cwd(),
              "event_id": event_id, "purpose": purpose}
    request = json.dumps(header).encode() + b"\n" + raw
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        try:
            connection.settimeout(timeout)
            connection.connect(path)
            if not is_own_user(connection):
                return None
            connection.sendall(request)
            connection.shutdown(socket.SHUT_WR)
        except OSError:  # socket.timeout included: the writer did not take the request whole
            return None
        try:
            answer = read_all(connection, MAX_REPLY_BYTES)
        except OSError:  # no ack in time: the writer has the request and is held up
            if detach and wait_detached(connection, db, namespace, event, raw, event_id):
                return Reply(handed_off=True)
            answer = b""
    try:
        message = json.loads(answer)
    except ValueError:  # nothing (the writer died before its ack) or cut short
        message = None
    return reply_of(message)


def ask_to_embed(db: str, namespace: str) -> bool:
    """Tell the running writer for ``db`` (a resolved path) and ``namespace`` that entries were
    written beside it, for its embedder; False when no writer answered (the next one embeds them)."""
    return ask(db, namespace, "", b"", detach=False, purpose=EMBED_PURPOSE) is not None


def wait_detached(connection: socket.socket, db: str, namespace: str, event: str, raw: bytes,
                  event_id: str) -> bool:
    """Leave a detached copy of this hook waiting for the ack on ``connection``, so the hook can
    return; False where a process cannot be forked. Should the writer die or fail without storing it
    (its 30 s busy timeout can run out first), the copy asks again, a new writer if need be, with
    the same event id (a turn stored meanwhile is then not stored again)."""
    if not hasattr(os, "fork"):
        return False
    try:
        if os.fork():
            return True  # the hook: back to the host
    except OSError:
        return False
    try:  # the copy: never returns into the hook's code
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the host's pipes closed here, so it stops waiting for them
            os.dup2(null, fd)
        connection.settimeout(DETACHED_WAIT_SECONDS)
        with contextlib.suppress(OSError, ValueError):
            if _stored(reply_of(json.loads(read_all(connection, MAX_REPLY_BYTES)))):
                os._exit(0)
        connection.close()
        for _ in range(DETACHED_ATTEMPTS):
            if _stored(ask(db, namespace, event, raw, timeout=DETACHED_WAIT_SECONDS, event_id=event_id,
                           detach=False)):
                break
            start(db, namespace)  # exits at once while another writer runs
            time.sleep(DETACHED_RETRY_SECONDS)
    finally:
        os._exit(0)


def _stored(reply: Reply | None) -> bool:
    """True for an ack. An error may be the writer's busy timeout running out while the lock is still
    held, so a detached hook asks again (the event id keeps a turn already stored from another copy)."""
    return reply is not None and reply.error is None


def new_event_id() -> str:
    """The identity of one hook run: its request, however often it reaches a writer, is one turn."""
    return os.urandom(16).hex()


def reply_of(message: Any) -> Reply | None:
    """The writer's reply line as a :class:`Reply`; None when it is not one."""
    if not isinstance(message, dict):
        return None
    if message.get("status") == "ok":
        output, notices = message.get("output"), message.get("notices")
        return Reply(output=output if isinstance(output, str) else None,
                     notices=tuple(str(n) for n in notices) if isinstance(notices, list) else ())
    if message.get("status") == "error":
        return Reply(error=str(message.get("message")))
    return None


def start(db: str, namespace: str) -> bool:
    """Start a writer for ``db`` and ``namespace`` in the background, detached from this process (it
    outlives the hook); False when none can run here. A writer that finds another already running
    exits at once."""
    if not hasattr(socket, "AF_UNIX"):
        return False
    path = socket_path(db, namespace)
    if path is None or not make_private_dir(os.path.dirname(path)):
        return False
    import subprocess  # only here: a hook that reached its writer never starts one

    try:
        subprocess.Popen(  # noqa: S603  # our own interpreter and module, no shell
            [sys.executable, "-m", "harness_mem.hook_writer", db, "--namespace", namespace],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )
    except OSError:
        return False
    return True


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # the directory was removed under us
        return None


def read_all(connection: socket.socket, limit: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = connection.recv(1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)
