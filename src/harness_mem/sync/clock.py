"""The hybrid logical clock that stamps each operation.

A stamp is ``(wall, tick)``: wall-clock milliseconds, and a tick that breaks ties. A device's
next stamp is later than every stamp it has written or applied, even when its wall clock is behind
another device's or steps back, so an operation made after seeing another is ordered after it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple


class Stamp(NamedTuple):
    """One clock reading: milliseconds since the epoch and a tie-breaking counter."""

    wall: int
    tick: int


def next_stamp(last: Stamp | None, now_ms: int | None = None) -> Stamp:
    """The stamp after ``last`` (the latest one this device has written or applied, None: none yet)."""
    wall = int(time.time() * 1000) if now_ms is None else now_ms
    if last is None or wall > last.wall:
        return Stamp(wall, 0)
    return Stamp(last.wall, last.tick + 1)


def stamps_by_id(rows: Iterable[tuple[str, int, int]]) -> dict[str, list[Stamp]]:
    """The stamps of each id among ``(id, wall, tick)`` rows of the log, in the rows' order."""
    found: dict[str, list[Stamp]] = {}
    for entry_id, wall, tick in rows:
        found.setdefault(entry_id, []).append(Stamp(wall, tick))
    return found
