"""Where an import stopped reading each transcript, so the next run reads only what was appended.

A coding agent's transcripts only grow: a backfill run again a week later would otherwise read
every file whole (3-4 s per 30 MB) to find the few new turns. So after a file is read, the store's
settings keep its size, modification time, a fingerprint of its first and last bytes, and the line
the next read starts at (with its byte offset): the first line still needed — after the last one
read, or a tool call still waiting for its result — and the lines a reader needs again before it
(Codex's session header). On the next run a file of the same size and time is not opened for
reading at all; one that grew with the same first and last bytes is read from that line on; any
other (rewritten, truncated, replaced) is read in full. Turn ids still dedupe, so reading too much
stores nothing twice, and a position is saved only once the turns before it are written.

Only positions are kept, never text (a pending tool call's input may hold a secret, and settings
are not redacted).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..store import MemoryStore

__all__ = ["FINGERPRINT_BYTES", "Position", "Start", "fingerprint", "saved", "save", "start_of"]

#: How many of a file's first and last bytes tell that it grew rather than changed.
FINGERPRINT_BYTES = 4096


@dataclass(frozen=True)
class Position:
    """What a read of a file left: the file as it was read, and where the next read starts."""

    size: int  # bytes read, to the end of the last whole line
    mtime_ns: int
    inode: int
    head: str  # sha256 of the first FINGERPRINT_BYTES bytes read
    tail: str  # sha256 of the last FINGERPRINT_BYTES bytes read
    line: int  # the number of the line the next read starts at …
    offset: int  # … and where it starts
    header: tuple[tuple[int, int, int], ...] = ()  # lines read again first: (number, offset, length)


@dataclass(frozen=True)
class Start:
    """Where to read a file this time: nothing (``unchanged``), or from ``line`` at ``offset`` after
    the ``header`` lines; line 1 at offset 0 is the whole file."""

    unchanged: bool = False
    line: int = 1
    offset: int = 0
    header: tuple[tuple[int, int, int], ...] = ()


WHOLE = Start()


def _key(store: MemoryStore, format: str, path: Path) -> str:
    where = hashlib.sha256(os.path.realpath(path).encode()).hexdigest()[:32]
    return f"import.position.{format}.{store.namespace}.{where}"


def saved(store: MemoryStore, format: str, path: Path) -> Position | None:
    """The position the last import of ``path`` in ``format`` left in this namespace, if any."""
    raw = store.storage.setting(_key(store, format, path))
    if raw is None:
        return None
    try:
        fields = json.loads(raw)
        fields["header"] = tuple(tuple(h) for h in fields.get("header", ()))
        return Position(**fields)
    except (ValueError, TypeError):
        return None  # written by another version: read the file whole once


def save(store: MemoryStore, format: str, path: Path, position: Position) -> None:
    with store.storage.transaction():
        store.storage.set_setting(_key(store, format, path), json.dumps(asdict(position)))


def fingerprint(fd: int, end: int) -> tuple[str, str]:
    """The sha256 of the first and of the last :data:`FINGERPRINT_BYTES` of the file's first ``end`` bytes."""
    head = os.pread(fd, min(FINGERPRINT_BYTES, end), 0)
    tail_start = max(end - FINGERPRINT_BYTES, 0)
    tail = os.pread(fd, end - tail_start, tail_start)
    return hashlib.sha256(head).hexdigest(), hashlib.sha256(tail).hexdigest()


def start_of(store: MemoryStore, format: str, path: Path, fd: int) -> Start:
    """Where to read the open file ``fd`` (at ``path``) this time (see the module)."""
    last = saved(store, format, path)
    if last is None:
        return WHOLE
    now = os.fstat(fd)
    if now.st_ino != last.inode or now.st_size < last.size:
        return WHOLE  # replaced or truncated
    if now.st_size == last.size and now.st_mtime_ns == last.mtime_ns:
        return Start(unchanged=True)
    if fingerprint(fd, last.size) != (last.head, last.tail):
        return WHOLE  # rewritten
    return Start(line=last.line, offset=last.offset, header=last.header)
