"""Maintenance steps are bounded by the time they hold the lock, measured while they hold it
(harness_mem.steps.in_steps): when the machine gets busy and each item costs more, the steps do less,
and no step holds the lock much past its time. The clock here is the steps' own, driven by the work
(no timing of this machine), so the proof holds at any load."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from harness_mem import steps

BOUNDS = (100, 10, 50_000)


class BusyMachine:
    """A clock that moves only with the work: each item costs ``cost`` seconds, and ``slower``
    times as much from ``busy_after`` items on (the other processes take the cores)."""

    def __init__(self, items: int, cost: float, *, slower: float, busy_after: int, commit: float = 0) -> None:
        self.now, self.left, self.done = 0.0, items, 0
        self.cost, self.slower, self.busy_after = cost, slower, busy_after
        self.commit = commit  # a commit's time per second of work in its step (its pages written out)
        self.held: list[float] = []  # each step's time under the lock
        self.chunk_times: list[float] = []

    def monotonic(self) -> float:
        return self.now

    @contextmanager
    def transaction(self) -> Iterator[None]:
        began = self.now
        yield
        self.now += self.commit * (self.now - began)
        self.held.append(self.now - began)

    def chunk(self, size: int) -> bool:
        n = min(size, self.left)
        before = self.now
        for _ in range(n):
            self.now += self.cost * (self.slower if self.done >= self.busy_after else 1)
            self.done += 1
        self.left -= n
        self.chunk_times.append(self.now - before)
        return self.left > 0

    def pause(self) -> None:
        self.now += steps.STEP_PAUSE_S


@pytest.mark.parametrize("slower", [1, 5, 20])
def test_a_busy_machine_makes_the_steps_do_less_not_hold_the_lock_longer(monkeypatch: pytest.MonkeyPatch, slower: float) -> None:
    machine = BusyMachine(200_000, 0.0001, slower=slower, busy_after=30_000)
    monkeypatch.setattr(steps, "time", SimpleNamespace(monotonic=machine.monotonic))
    steps.in_steps(machine.transaction, machine.chunk, BOUNDS, machine.pause)
    assert machine.left == 0
    # Every step but the one the slowdown fell in ends within a chunk of its time, a chunk being a
    # small share of it at the new pace; that one overshoots by one chunk at most.
    held = sorted(machine.held)
    assert held[-2] <= steps.STEP_TARGET_S + 2 * steps.CHUNK_TARGET_S
    assert held[-1] <= steps.STEP_TARGET_S + (slower + 1) * steps.CHUNK_TARGET_S


def test_a_step_stops_when_the_work_is_done(monkeypatch: pytest.MonkeyPatch) -> None:
    machine = BusyMachine(7, 0.0001, slower=1, busy_after=0)
    monkeypatch.setattr(steps, "time", SimpleNamespace(monotonic=machine.monotonic))
    steps.in_steps(machine.transaction, machine.chunk, BOUNDS, machine.pause)
    assert machine.left == 0 and len(machine.held) == 1


@pytest.mark.parametrize("commit", [0.5, 3])
def test_a_step_counts_its_commit_in_its_time(monkeypatch: pytest.MonkeyPatch, commit: float) -> None:
    # The commit holds the lock while it writes the step's pages to the log: left out of a step's
    # time, it kept the lock past it, the more the more pages the step changed.
    machine = BusyMachine(200_000, 0.0001, slower=1, busy_after=0, commit=commit)
    monkeypatch.setattr(steps, "time", SimpleNamespace(monotonic=machine.monotonic))
    steps.in_steps(machine.transaction, machine.chunk, BOUNDS, machine.pause)
    assert machine.left == 0
    # At most one chunk, and its share of the commit, past the step's time; the first step (its
    # commit not timed yet) is one chunk.
    assert max(machine.held) <= steps.STEP_TARGET_S + (1 + commit) * steps.CHUNK_TARGET_S
    assert machine.held[0] <= (1 + commit) * steps.CHUNK_TARGET_S
