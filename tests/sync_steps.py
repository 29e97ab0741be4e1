"""Random steps on devices that sync through one folder: what the sync property test plays.

A step is (device, action, a number choosing what it acts on). The actions cover every change that
travels: adds of ids of a device's own, adds of two ids every device writes (forks), replaces of
those, the same words added on several devices, corrections, forgets by id and by session, deletes,
and syncs at random points.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from harness_mem.errors import DuplicateIdError
from harness_mem.store import MemoryStore

ACTIONS = ["add", "add-shared", "add-shared", "replace-shared", "same-words-shared", "correct", "correct",
           "forget", "forget-session", "delete", "sync", "sync"]
#: The id every device may add with the same words: a forget of it does not reach a later add of them.
SAME_WORDS_ID = "same"
STEPS = st.lists(st.tuples(st.integers(0, 2), st.sampled_from(ACTIONS), st.integers(0, 50)), min_size=1, max_size=25)


def everything(store: MemoryStore) -> list[dict[str, Any]]:
    """Every version a device holds, history included, in a form two devices can be compared by."""
    return sorted((entry.to_dict() for entry in store.list(include_superseded=True)), key=lambda e: str(e["id"]))


def play(steps: Sequence[tuple[int, str, int]], stores: Sequence[MemoryStore], folder: Path) -> set[str]:
    """Play the steps, then sync every device twice over (each reads every other's last chunk); the
    words forgotten by id on a device that held them (they must be gone everywhere)."""
    forgotten: set[str] = set()
    for n, (device, action, pick) in enumerate(steps):
        store = stores[device]
        live = sorted(e.id for e in store.list())
        if action == "add":
            store.add(f"word{n} in session {pick % 3}", id=f"d{device}-{n}", session=f"s{pick % 3}")
        elif action == "add-shared":  # two ids every device writes, each in a session of its own
            with contextlib.suppress(DuplicateIdError):  # held here already, or forgotten and not purged
                store.add(f"shared words {n} from d{device}", id=f"shared{pick % 2}", session=f"s{pick % 2}")
        elif action == "replace-shared":
            store.add(f"replacing words {n} from d{device}", id=f"shared{pick % 2}", session=f"s{pick % 2}",
                      on_conflict="replace")
        elif action == "same-words-shared":  # the same words every device may write, tagged by who wrote them
            with contextlib.suppress(DuplicateIdError):
                store.add("words every device writes", id=SAME_WORDS_ID, tags=[f"d{device}"], metadata={"step": n})
        elif action == "correct" and live:
            store.supersede(live[pick % len(live)], f"corrected word{n}", id=f"d{device}-{n}")
        elif action == "forget" and live:
            chosen = live[pick % len(live)]
            if chosen != SAME_WORDS_ID:
                forgotten.add(store.get(chosen).content)
            store.forget(chosen)
        elif action == "forget-session":
            store.forget(session=f"s{pick % 3}")
        elif action == "delete" and live:
            store.delete(live[pick % len(live)])
        elif action == "sync":
            store.sync(folder)
    for _ in range(2):
        for store in stores:
            store.sync(folder)
    return forgotten


def leftovers(stores: Sequence[MemoryStore], root: Path, marker: bytes) -> list[Path]:
    """Each store synced, purged and collected once more; then the files under ``root`` that still
    hold ``marker`` (a chunk read unzipped)."""
    for store in stores:
        store.sync(root / "Sync")
        store.purge()
        store.gc()
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    return [p for p in files if marker in (gzip.decompress(p.read_bytes()) if p.suffix == ".gz" else p.read_bytes())]
