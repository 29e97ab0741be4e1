"""Convergence, property-based: three devices make random changes of every kind that travels and sync
in random orders; once each has read every other's operations they hold the same memory.

Real SQLite stores syncing through a real folder; the steps are :mod:`sync_steps`'s.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from sync_steps import STEPS, everything, play

from harness_mem.store import MemoryStore


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_devices_that_exchanged_everything_hold_the_same_memory(steps: list[tuple[int, str, int]],
                                                                tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("devices")
    folder = root / "Sync"
    stores = [MemoryStore(root / f"d{n}.db", embedder=None) for n in range(3)]
    try:
        for store in stores:
            store.sync(folder)
        forgotten = play(steps, stores, folder)
        held = [everything(store) for store in stores]
        assert held[0] == held[1] == held[2]
        assert stores[0].conflicts() == stores[1].conflicts() == stores[2].conflicts()
        assert not forgotten & {entry["content"] for entry in held[0]}
    finally:
        for store in stores:
            store.close()
