"""Progress of a long command, told as it goes: the phase it is in, how much is done of how much,
how many entries are written, the rate and the time left at that rate.

A long job (a backfill import, a copy, a gc) tells a :class:`Progress` what it does; the command
line hands it a :class:`ProgressLines`, which prints at most a line a second on stderr, and every
new phase at once, so a user sees the embedding that takes the time, not a bar full after reading.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO


class Progress(Protocol):
    """What a long job tells as it goes."""

    def phase(self, name: str, total: int | None = None) -> None:
        """A new phase begins (``reading``, ``embedding and writing``, …), with ``total`` units of
        work when it knows how many."""

    def advance(self, done: int, written: int) -> None:
        """``done`` more units of the work are done (entries, or bytes of input), and ``written`` more
        entries are stored."""


class ProgressLines:
    """:class:`Progress` as lines on stderr: a phase when it begins, then at most one line every
    ``interval`` seconds and always the last: done of ``total`` (in ``unit``: ``entries`` or
    ``bytes``), the ``noun`` written (``written=None``: the work itself is all there is to count),
    the rate and the time left at that rate."""

    def __init__(self, command: str, total: int | None = None, *, unit: str = "entries", noun: str = "entries",
                 written: str | None = "written", interval: float = 1.0, stream: TextIO | None = None) -> None:
        self.command = command
        self.total = total
        self.unit = unit
        self.noun = noun
        self.written_as = written
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self.done = 0
        self.written = 0
        self.current = ""
        self._seen: set[str] = set()
        self._started = time.monotonic()
        self._last = 0.0

    def phase(self, name: str, total: int | None = None) -> None:
        if total is not None:
            self.total = total
        # A phase is announced the first time only: a job that reads and writes a batch at a time
        # would otherwise print two lines a batch. The periodic lines name the current one.
        if name not in self._seen:
            self._seen.add(name)
            self._print(f"{self.command}: {name}")
        if not self.done:  # the rate is the work's, not the preparation's
            self._started = time.monotonic()
        self.current = name

    def advance(self, done: int, written: int) -> None:
        self.done += done
        self.written += written
        now = time.monotonic()
        if (self.total is not None and self.done >= self.total) or now - self._last >= self.interval:
            self._last = now
            self._print(self.line(now))

    def close(self) -> None:
        """The last line, when the work ended short of the total it expected (a copy leaves
        forgotten entries behind) or had none."""
        if self.done and (self.total is None or self.done < self.total):
            self.total = self.done
            self.current = "done"
            self._print(self.line(time.monotonic()))

    def line(self, now: float) -> str:
        """The line for the work so far: ``reindex: embedding and writing, 512/2,000 entries, 512 written, 85.3/s, about 17 s left``."""
        of = "" if self.total is None else f"/{self._amount(self.total)}"
        line = f"{self.command}: {self.current}, {self._amount(self.done)}{of} {self._unit()}"
        if self.written_as is not None:
            line += f", {self.written:,}{'' if self.unit == self.noun else ' ' + self.noun} {self.written_as}"
        elapsed = now - self._started
        if self.done and elapsed > 0:
            rate = self.done / elapsed
            line += f", {self._amount(rate)}{' MB' if self.unit == 'bytes' else ''}/s"
            if self.total is not None and self.done < self.total:
                line += f", about {duration((self.total - self.done) / rate)} left"
        return line

    def _amount(self, value: float) -> str:
        return f"{value / 1e6:,.1f}" if self.unit == "bytes" else f"{value:,.0f}" if value >= 100 else f"{value:,.1f}".removesuffix(".0")

    def _unit(self) -> str:
        return "MB read" if self.unit == "bytes" else self.unit

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)


class SessionLines:
    """Consolidation's progress as lines on stderr, at most one a second and always the last:
    sessions done of how many, the one just done, the rate so far and the time left at that rate."""

    def __init__(self, verb: str, interval: float = 1.0, stream: TextIO | None = None) -> None:
        self.verb = verb
        self.interval = interval
        self.stream = stream if stream is not None else sys.stderr
        self._last = 0.0
        self._started = time.monotonic()

    def __call__(self, done: int, total: int, item: str) -> None:
        now = time.monotonic()
        if done == total or now - self._last >= self.interval:
            self._last = now
            line = f"{self.verb} {done:,}/{total:,} sessions ({item})"
            elapsed = now - self._started
            if done and elapsed > 0 and done < total:
                rate = done / elapsed
                line += f"  {rate:,.1f}/s, about {duration((total - done) / rate)} left"
            print(line, file=self.stream, flush=True)


def duration(seconds: float) -> str:
    """A time left as a person says it: 40 s, 3 min, 1 h 20 min."""
    if seconds < 60:
        return f"{max(1, round(seconds))} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
