"""Which b-tree each page of a store's file belongs to, read from the file's pointer map.

SQLite's ``dbstat`` table answers "how many pages does each table and index use", but not every
build has it (pysqlite3-binary does not). A file with ``auto_vacuum`` (FULL or INCREMENTAL, as every
file harness_mem creates) keeps the answer on disk anyway: its pointer-map pages record, for every
other page, what it is (a b-tree root, a b-tree page, an overflow page, a free page) and its parent.
Reading those pages alone (one in every ``usable_size / 5 + 1``: 18 pages for a 60 MB file of
4 KiB pages) and following each page's parents up to its root gives every b-tree's size, overflow
pages included, without reading the b-trees themselves.

The newest copy of a page may still be in the write-ahead log: committed frames of the ``-wal`` file
are read over the main file's pages, the way a reader sees them. The counts are a snapshot of the
file as this function reads it; a writer committing meanwhile can make them differ by a few pages
from what a query on the same connection saw. A page that comes back short (a checkpoint truncated
the WAL after its frames were listed, or a frame is still being written) means the file changed
under the reader: there is no answer then, rather than one made of missing pages.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["PageCounts", "count_pages"]

_HEADER = b"SQLite format 3\x00"
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER_BYTES, _FRAME_HEADER_BYTES = 32, 24
_PENDING_BYTE = 0x40000000  # the page holding this offset (the "lock-byte page") is never used

# Pointer-map entry types (SQLite file format, section 1.7).
_ROOT, _FREE, _OVERFLOW_FIRST, _OVERFLOW_NEXT, _BTREE = 1, 2, 3, 4, 5
_CHILD = (_OVERFLOW_FIRST, _OVERFLOW_NEXT, _BTREE)  # pages with a parent to follow
_COUNTED = 255  # here: a page already counted (a pointer-map page, the lock-byte page)


@dataclass
class PageCounts:
    """Pages of a file by what holds them; they add up to ``pages``."""

    page_size: int
    pages: int
    #: root page number → pages of that b-tree (its root, interior and leaf pages, its overflow pages)
    by_root: dict[int, int] = field(default_factory=dict)
    free: int = 0
    pointer_map: int = 0
    #: the lock-byte page of a file over 1 GiB, and pages the map does not describe
    other: int = 0


class _Changed(Exception):
    """A page read came back short: the file changed while it was read."""


class _Pages:
    """Pages of the file, the newest committed copy of each (from the WAL when it has one)."""

    def __init__(self, file: BinaryIO, page_size: int, wal: dict[int, int], wal_file: BinaryIO | None) -> None:
        self.file, self.page_size, self.wal, self.wal_file = file, page_size, wal, wal_file

    def read(self, pgno: int) -> bytes:
        offset = self.wal.get(pgno)
        if offset is not None and self.wal_file is not None:
            self.wal_file.seek(offset)
            page = self.wal_file.read(self.page_size)
        else:
            self.file.seek((pgno - 1) * self.page_size)
            page = self.file.read(self.page_size)
        if len(page) < self.page_size:
            raise _Changed(f"page {pgno}")
        return page


def _wal_frames(wal_file: BinaryIO, page_size: int) -> dict[int, int]:
    """Page number → offset of its newest copy among the WAL's committed frames.

    A frame belongs to the current log when it carries the header's salts; only frames up to the
    last commit frame (the one recording the file's size) count, as for any reader.
    """
    header = wal_file.read(_WAL_HEADER_BYTES)
    if len(header) < _WAL_HEADER_BYTES:
        return {}
    magic, _, wal_page_size, _, salt1, salt2 = struct.unpack(">6I", header[:24])
    if magic not in _WAL_MAGIC or wal_page_size != page_size:
        return {}
    committed: dict[int, int] = {}
    pending: dict[int, int] = {}
    offset = _WAL_HEADER_BYTES
    while True:
        wal_file.seek(offset)
        frame = wal_file.read(_FRAME_HEADER_BYTES)
        if len(frame) < _FRAME_HEADER_BYTES:
            break
        pgno, size_after_commit, frame_salt1, frame_salt2 = struct.unpack(">4I", frame[:16])
        if (frame_salt1, frame_salt2) != (salt1, salt2):
            break  # a frame of an earlier log, overwritten only this far
        pending[pgno] = offset + _FRAME_HEADER_BYTES
        if size_after_commit:
            committed.update(pending)
            pending.clear()
        offset += _FRAME_HEADER_BYTES + page_size
    return committed


def _map_page(pgno: int, per_map: int, pending_page: int) -> int:
    """The pointer-map page that describes page ``pgno`` (each describes the pages after it)."""
    first = (pgno - 2) // per_map * per_map + 2
    return first + 1 if first == pending_page else first


def count_pages(path: Path, page_count: int) -> PageCounts | None:
    """Pages of the file at ``path`` by b-tree root, from its pointer map.

    ``page_count`` is the file's size in pages as its connection sees it (``PRAGMA page_count``).
    None when the file has no pointer map (``auto_vacuum`` NONE), cannot be read as SQLite, or
    changed while it was read (another connection checkpointed the WAL away).
    """
    try:
        borrowed = _descriptor_open_on(path)
        file: BinaryIO = _Borrowed(borrowed) if borrowed is not None else path.open("rb")  # type: ignore[assignment]
        wal_path = Path(f"{path}-wal")
        wal_file = wal_path.open("rb") if wal_path.exists() else None
        try:
            return _count(file, wal_file, page_count)
        finally:
            if wal_file is not None:
                wal_file.close()  # (SQLite's WAL locks are on the -shm file, not this one)
            if borrowed is None:
                file.close()
    except (OSError, _Changed):
        return None


# Closing any descriptor of a file releases every POSIX lock the process holds on it, SQLite's own
# included. So the file is read through a descriptor SQLite already has open on it (found in
# /proc/self/fd; read with pread, which moves no file offset), and opened (and closed) here only
# where there is none: no connection of this process has the file open then.


def _descriptor_open_on(path: Path) -> int | None:
    """A descriptor this process already has open on the file at ``path`` (Linux), or None."""
    try:
        target = path.resolve()
        with os.scandir("/proc/self/fd") as descriptors:  # closed on the early return too
            for entry in descriptors:
                try:
                    if Path(os.readlink(entry.path)) == target:
                        return int(entry.name)
                except OSError:
                    continue
    except OSError:
        return None
    return None


class _Borrowed:
    """File-like reads through a descriptor owned by someone else: never closed here."""

    def __init__(self, fd: int) -> None:
        self.fd, self.offset = fd, 0

    def seek(self, offset: int) -> None:
        self.offset = offset

    def read(self, size: int) -> bytes:
        data = os.pread(self.fd, size, self.offset)
        self.offset += len(data)
        return data


def _count(file: BinaryIO, wal_file: BinaryIO | None, page_count: int) -> PageCounts | None:
    header = file.read(100)
    if len(header) < 100 or not header.startswith(_HEADER):
        return None
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    wal = _wal_frames(wal_file, page_size) if wal_file is not None else {}
    pages = _Pages(file, page_size, wal, wal_file)
    header = pages.read(1)[:100]  # page 1 as committed: the WAL may hold a newer header
    if struct.unpack(">I", header[52:56])[0] == 0:
        return None  # no pointer map in this file
    usable = page_size - header[20]
    per_map = usable // 5 + 1  # a pointer-map page and the pages it describes
    pending_page = _PENDING_BYTE // page_size + 1

    counts = PageCounts(page_size=page_size, pages=page_count)
    kinds = bytearray(page_count + 1)
    parents = [0] * (page_count + 1)
    map_no, entries = 0, b""
    for pgno in range(2, page_count + 1):
        if pgno == pending_page:
            counts.other += 1
            kinds[pgno] = _COUNTED
            continue
        owner_map = _map_page(pgno, per_map, pending_page)
        if owner_map == pgno:
            counts.pointer_map += 1
            kinds[pgno] = _COUNTED
            continue
        if owner_map != map_no:
            map_no, entries = owner_map, pages.read(owner_map)
        at = 5 * (pgno - map_no - 1)
        kinds[pgno] = entries[at] if at < len(entries) else 0
        parents[pgno] = int.from_bytes(entries[at + 1:at + 5], "big")

    # Each page's root: follow parents up, remembering every page passed on the way.
    root_of = [0] * (page_count + 1)
    root_of[1] = 1  # the schema table's root; page 1 has no entry of its own
    counts.by_root[1] = 1
    for pgno in range(2, page_count + 1):
        kind = kinds[pgno]
        if kind == _COUNTED:
            continue
        if kind == _FREE:
            counts.free += 1
            continue
        chain, page = [], pgno
        while root_of[page] == 0:
            chain.append(page)
            if kinds[page] == _ROOT:
                root_of[page] = page
                break
            parent = parents[page]
            if kinds[page] not in _CHILD or not 0 < parent <= page_count or len(chain) > page_count:
                break  # an unknown entry or a damaged map: counted as other below
            page = parent
        root = root_of[page]
        for passed in chain:
            root_of[passed] = root
        if root:
            counts.by_root[root] = counts.by_root.get(root, 0) + 1
        else:
            counts.other += 1
    return counts
