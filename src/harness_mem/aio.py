"""``AsyncMemoryStore``: the store for anyio/asyncio agents.

SQLite work stays synchronous (it is fast and the driver is synchronous); each call runs in a worker
thread so the event loop never blocks, and one call at a time touches the connection, which is what
one SQLite connection allows. Writes still take ``BEGIN IMMEDIATE``, so several processes can share
the file as with the sync store.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import anyio
import anyio.to_thread

from .models import Entry, Hit
from .redaction import Redactor
from .store import MemoryStore


class AsyncMemoryStore:
    """The async twin of :class:`MemoryStore`: same arguments, same methods, awaited.

    ::

        async with AsyncMemoryStore("agent.db") as store:
            await store.add("the user prefers short answers", kind="fact")
            hits = await store.recall("how should I answer")
    """

    def __init__(self, path: Any = None, **options: Any) -> None:
        self._open_args = (path, options)
        self._store: MemoryStore | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def open(self) -> MemoryStore:
        """Open the file (in the worker thread) unless it is open; the first awaited call does this."""
        if self._store is None:
            path, options = self._open_args
            self._store = await anyio.to_thread.run_sync(
                functools.partial(MemoryStore, path, **options), limiter=self._limiter
            )
        return self._store

    async def _run(self, work: Callable[[MemoryStore], Any]) -> Any:
        """``work(store)`` in the worker thread, opening the store first if needed."""
        store = await self.open()
        return await anyio.to_thread.run_sync(functools.partial(work, store), limiter=self._limiter)

    async def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await self._run(lambda store: getattr(store, method)(*args, **kwargs))

    @property
    def store(self) -> MemoryStore:
        """The underlying sync store (opened on the first awaited call)."""
        if self._store is None:
            raise RuntimeError("the store opens on its first awaited call; await one first")
        return self._store

    @property
    def redactor(self) -> Redactor | None:
        """The open store's redactor (None before the file is open, or with redaction off)."""
        return None if self._store is None else self._store.redactor

    async def add(self, content: str, **fields: Any) -> Entry:
        return await self._call("add", content, **fields)  # type: ignore[no-any-return]

    async def add_many(self, items: Iterable[Mapping[str, Any] | Entry], **options: Any) -> list[Entry]:
        return await self._call("add_many", list(items), **options)  # type: ignore[no-any-return]

    async def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        return await self._call("recall", query, k, **filters)  # type: ignore[no-any-return]

    async def get(self, id: str) -> Entry:
        return await self._call("get", id)  # type: ignore[no-any-return]

    async def delete(self, id: str) -> bool:
        return await self._call("delete", id)  # type: ignore[no-any-return]

    async def list(self, **filters: Any) -> list[Entry]:
        # list() is a generator: drain it in the worker thread, where the connection is used.
        return await self._run(lambda store: list(store.list(**filters)))  # type: ignore[no-any-return]

    async def stats(self) -> dict[str, Any]:
        return await self._call("stats")  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await anyio.to_thread.run_sync(store.close, limiter=self._limiter)

    async def __aenter__(self) -> AsyncMemoryStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
