"""The layout the purge tests prove on: rows of random length, half of them corrected (a corrected row
grows and moves, and SQLite rebuilds the pages around it, which can leave old copies in a page's
unused middle)."""

from __future__ import annotations

import random

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
