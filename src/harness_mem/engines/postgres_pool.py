"""The PostgreSQL engine's connections when a store is used from several threads: one each.

A psycopg connection runs one statement at a time, and a recall's snapshot or a write's
transaction spans several: two threads on one connection would run inside each other's. So each
thread gets a connection of its own on its first statement, and keeps it; once a thread has ended,
its connection is handed to the next thread that needs one rather than closed, so a store behind a
thread pool holds as many connections as threads use it at once, each made once.

What a thread keeps between the statements of one call (the snapshot it has open, what it read
in it) is kept per thread too: :class:`PerThread`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from .postgres_connection import Connection

__all__ = ["ConnectionPool", "PerThread"]

T = TypeVar("T")


class ConnectionPool:
    """A connection per live thread, made by ``make``; the opening thread's made at once (a store
    that cannot connect fails as it opens)."""

    def __init__(self, make: Callable[[], Connection]) -> None:
        self._new_connection = make
        self._lock = threading.Lock()
        self._held: dict[threading.Thread, Connection] = {}
        self._idle: list[Connection] = []
        self._first = self._held[threading.current_thread()] = make()
        self._closed = False

    def current(self) -> Connection:
        """The calling thread's connection: its own, or an ended thread's, or a new one."""
        thread = threading.current_thread()
        held = self._held.get(thread)
        if held is not None:
            return held
        if self._closed:
            return self._first  # closed: it says so when used
        with self._lock:
            for other in [t for t in self._held if not t.is_alive()]:
                self._idle.append(self._held.pop(other))
            reused = self._idle.pop() if self._idle else None
        conn = reused if reused is not None else self._new_connection()  # made outside the lock: a connect takes time
        with self._lock:
            self._held[thread] = conn
        return conn

    def count(self) -> int:
        """How many connections the pool holds (in use or idle)."""
        with self._lock:
            return len(self._held) + len(self._idle)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            every = [*self._held.values(), *self._idle]
        for conn in every:
            conn.close()


class PerThread(Generic[T]):
    """An attribute whose value is the calling thread's own (``default()`` until it sets one)."""

    def __init__(self, default: Callable[[], T]) -> None:
        self._default = default

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def _values(self, instance: Any) -> threading.local:
        local: threading.local | None = instance.__dict__.get("_per_thread")
        if local is None:
            local = instance.__dict__.setdefault("_per_thread", threading.local())
        return local

    def __get__(self, instance: Any, owner: type | None = None) -> T:
        values = self._values(instance)
        try:  # one lookup where the thread has set it (a recall reads these ~90 times)
            value: T = getattr(values, self._name)
        except AttributeError:
            value = self._default()
            setattr(values, self._name, value)
        return value

    def __set__(self, instance: Any, value: T) -> None:
        setattr(self._values(instance), self._name, value)
