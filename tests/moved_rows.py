"""The layout the purge tests prove on: rows of random length, half of them corrected (a corrected row
grows and moves, and SQLite rebuilds the pages around it, which can leave old copies in a page's
unused middle)."""

from __future__ import annotations

import random
import re
from pathlib import Path

from harness_mem.store import MemoryStore


def write_moved_rows(store: MemoryStore, seed: int) -> list[tuple[int, str]]:
    """Fill ``store`` (50 filler notes, then 100 marked rows, every other one corrected); returns the
    corrected rows as (number, id). A row's marker is ``marker(number)``."""
    rnd = random.Random(seed)
    store.add_many([{"text": f"filler note number {i} about the weekly deploy", "session": "kept", "role": "user"}
                    for i in range(50)])
    corrected = []
    for i in range(100):
        text = f"{marker(i)} wrote " + "x" * rnd.randint(5, 120)
        if i % 2:
            store.add(text, session=f"user{i:03d}", role="user", tags=[f"who{i:03d}"])
        else:
            entry = store.get(store.remember(text, tags=[f"who{i:03d}"], session=f"user{i:03d}").id)
            store.supersede(entry.id, f"corrected note {i}")
            corrected.append((i, entry.id))
    return corrected


def marker(number: int) -> str:
    return f"secret{number:03d}marker"


PAGE = 4096


TABLE_LEAF, INDEX_LEAF = 0x0D, 0x0A  # b-tree page types: a table's rows; an index's (or a WITHOUT ROWID table's) keys


def plant_old_copies(db: Path, markers: list[bytes], *, leaves: tuple[int, ...] = (TABLE_LEAF,),
                     every: bool = False) -> int:
    """Write each marker into the unused middle of the page holding it (between the cell pointers
    and the cells, where SQLite leaves old copies of rows a page rebuild moved, and which it never
    reads): the old copies a long-lived file gathers, made on purpose. Only leaf pages of the types
    in ``leaves`` are used; with ``every``, beside each copy of the marker in such a page, else
    beside the first. The file must be closed and checkpointed. Returns how many were planted."""
    data = bytearray(db.read_bytes())
    planted = 0
    used: dict[int, int] = {}  # page start → where its next copy goes
    for text in markers:
        places = [m.start() for m in re.finditer(re.escape(text), bytes(data))]
        for at in places if every else places[:1]:
            if at < PAGE:  # on page 1 (its header is longer): leave it
                continue
            start = at // PAGE * PAGE
            page = data[start:start + PAGE]
            if page[0] not in leaves:
                continue
            cells = int.from_bytes(page[3:5], "big")
            # Low in the gap, where new cells reach last (they are placed from the top of it down) and
            # a few more cell pointers still fit above: where a long-lived page's old copies stay.
            offset = used.get(start, 8 + 2 * cells + 16)
            if offset + len(text) > (int.from_bytes(page[5:7], "big") or PAGE) - 16:
                continue
            data[start + offset:start + offset + len(text)] = text
            used[start] = offset + len(text)
            planted += 1
    db.write_bytes(bytes(data))
    return planted


def store_forgotten_rows(db: Path, *, seed: int = 8, later: int = 0, pad: int = 60, episode: bool = False) -> list[bytes]:
    """A store of :func:`write_moved_rows` (and ``later`` notes of ``pad`` words after them, and an
    episode), old copies of the corrected rows planted beside them (:func:`plant_old_copies`), the
    corrected rows then forgotten; returns their markers."""
    with MemoryStore(db, embedder=None, redactor=None) as store:
        corrected = write_moved_rows(store, seed)
        if later:
            store.add_many([{"text": f"later note {i} " + "pad " * pad, "session": "later", "role": "user"}
                            for i in range(later)])
        if episode:
            store.add("deploy episode", kind="episode", id="ep1", session="kept")
        store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    markers = [marker(i).encode() for i, _ in corrected]
    assert plant_old_copies(db, markers) >= 5, "too few pages with room for an old copy"
    with MemoryStore(db, embedder=None, redactor=None) as store:
        for _, entry_id in corrected:
            store.forget(entry_id)
    return markers
