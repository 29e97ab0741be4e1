"""``AsyncMemoryStore``: the store for anyio/asyncio agents.

SQLite work stays synchronous (it is fast and the driver is synchronous); each call runs in a worker
thread so the event loop never blocks, and one call at a time touches the connection, which is what
one SQLite connection allows. Writes still take ``BEGIN IMMEDIATE``, so several processes can share
the file as with the sync store.

Every public method of :class:`MemoryStore` is here, awaited (``tests/mem/test_aio.py`` compares the
two surfaces, so they cannot drift). Three differ in shape only: ``close`` is ``aclose``, the
iterators (``list``, ``export``) come back as lists read in the worker thread, and ``transaction``
is an ``async with``: while a task holds it, the other tasks' calls wait, so its writes commit
together and no one else's join them.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .counts import EntryCounts
from .models import Entry, Hit, Remembered, SessionHit, SessionSummary
from .protocols import Embedder
from .redaction import Redactor
from .rows import Row
from .store import MemoryStore
from .sync.exchange import DeviceStatus, SyncReport
from .sync.forks import Fork

if TYPE_CHECKING:
    from sqlite_utils import Database

    from .rotation import Rotation


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
        self._gate = anyio.Lock()  # held by a task's transaction: the others' calls wait for it
        self._owner: object | None = None  # the task holding the transaction

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
        if self._owner is not None and self._owner == anyio.get_current_task().id:
            return await self._in_thread(work)  # inside this task's own transaction
        async with self._gate:
            return await self._in_thread(work)

    async def _in_thread(self, work: Callable[[MemoryStore], Any]) -> Any:
        store = await self.open()
        return await anyio.to_thread.run_sync(functools.partial(work, store), limiter=self._limiter)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """Several awaited writes that commit together (nested calls join it), as
        :meth:`MemoryStore.transaction`; other tasks' calls wait until it ends."""
        me = anyio.get_current_task().id
        if self._owner == me:
            yield
            return
        async with self._gate:
            manager = (await self._in_thread(lambda store: store.transaction()))
            await self._in_thread(lambda store: manager.__enter__())
            self._owner = me
            try:
                yield
            except BaseException as exc:
                self._owner = None
                await anyio.to_thread.run_sync(manager.__exit__, type(exc), exc, exc.__traceback__,
                                               limiter=self._limiter)
                raise
            self._owner = None
            await anyio.to_thread.run_sync(manager.__exit__, None, None, None, limiter=self._limiter)

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

    async def get(self, id: str, *, refresh_ttl: bool = False) -> Entry:
        return await self._call("get", id, refresh_ttl=refresh_ttl)  # type: ignore[no-any-return]

    async def get_many(self, ids: Sequence[str]) -> builtins.list[Entry]:
        return await self._call("get_many", ids)  # type: ignore[no-any-return]

    async def would_forget(self, id: str) -> builtins.list[Entry]:
        return await self._call("would_forget", id)  # type: ignore[no-any-return]

    async def delete(self, id: str) -> bool:
        return await self._call("delete", id)  # type: ignore[no-any-return]

    async def list(self, **filters: Any) -> builtins.list[Entry]:
        # list() is a generator: drain it in the worker thread, where the connection is used.
        return await self._run(lambda store: list(store.list(**filters)))  # type: ignore[no-any-return]

    async def stats(self) -> dict[str, Any]:
        return await self._call("stats")  # type: ignore[no-any-return]

    async def counts(self) -> dict[str, EntryCounts]:
        return await self._call("counts")  # type: ignore[no-any-return]

    async def file_bytes(self) -> int:
        return await self._call("file_bytes")  # type: ignore[no-any-return]

    async def sizes(self) -> dict[str, Any]:
        return await self._call("sizes")  # type: ignore[no-any-return]

    async def revealed(self, value: str | None) -> bool:
        return await self._call("revealed", value)  # type: ignore[no-any-return]

    async def export(self) -> builtins.list[dict[str, Any]]:
        return await self._run(lambda store: list(store.export()))  # type: ignore[no-any-return]

    async def add_prepared(self, rows: Sequence[Row], **options: Any) -> int:
        return await self._call("add_prepared", list(rows), **options)  # type: ignore[no-any-return]

    async def remember(self, content: str, **fields: Any) -> Remembered:
        return await self._call("remember", content, **fields)  # type: ignore[no-any-return]

    async def supersede(self, old_id: str, new_content: str, **changes: Any) -> Remembered:
        return await self._call("supersede", old_id, new_content, **changes)  # type: ignore[no-any-return]

    async def history(self, id: str) -> builtins.list[Entry]:
        return await self._call("history", id)  # type: ignore[no-any-return]

    async def forget(self, id: str | None = None, **filters: Any) -> int:
        return await self._call("forget", id, **filters)  # type: ignore[no-any-return]

    async def purge(self) -> int:
        return await self._call("purge")  # type: ignore[no-any-return]

    async def purge_expired(self) -> int:
        return await self._call("purge_expired")  # type: ignore[no-any-return]

    async def gc(self, **options: Any) -> dict[str, Any]:
        return await self._call("gc", **options)  # type: ignore[no-any-return]

    async def sync(self, path: str | os.PathLike[str], **options: Any) -> SyncReport:
        return await self._call("sync", path, **options)  # type: ignore[no-any-return]

    async def sync_status(self, path: str | os.PathLike[str]) -> builtins.list[DeviceStatus]:
        return await self._call("sync_status", path)  # type: ignore[no-any-return]

    async def conflicts(self) -> builtins.list[Fork]:
        return await self._call("conflicts")  # type: ignore[no-any-return]

    async def forks(self, id: str) -> builtins.list[Fork]:
        return await self._call("forks", id)  # type: ignore[no-any-return]

    async def recent(self, n: int = 20, **options: Any) -> builtins.list[Entry]:
        return await self._call("recent", n, **options)  # type: ignore[no-any-return]

    async def recall_sessions(self, query: str, k: int = 5, **options: Any) -> builtins.list[SessionHit]:
        return await self._call("recall_sessions", query, k, **options)  # type: ignore[no-any-return]

    async def sessions(self, limit: int = 20, offset: int = 0, *, after: str | None = None) -> builtins.list[SessionSummary]:
        return await self._call("sessions", limit, offset, after=after)  # type: ignore[no-any-return]

    async def session_turns(self, session: str, offset: int = 0, limit: int = 50, *,
                            after: str | None = None) -> builtins.list[Entry]:
        return await self._call("session_turns", session, offset, limit, after=after)  # type: ignore[no-any-return]

    async def count(self, **filters: Any) -> int:
        return await self._call("count", **filters)  # type: ignore[no-any-return]

    async def count_missing_vectors(self) -> int:
        return await self._call("count_missing_vectors")  # type: ignore[no-any-return]

    async def embed_missing(self, batch_size: int = 64) -> int:
        return await self._call("embed_missing", batch_size)  # type: ignore[no-any-return]

    async def data_version(self) -> tuple[int, int]:
        return await self._call("data_version")  # type: ignore[no-any-return]

    async def embed_queries(self, queries: Sequence[str]) -> Any:
        return await self._call("embed_queries", list(queries))

    async def reindex(self, **options: Any) -> dict[str, int]:
        return await self._call("reindex", **options)  # type: ignore[no-any-return]

    async def rekey_pseudonyms(self, progress: Callable[[int, int], None] | None = None) -> int:
        return await self._call("rekey_pseudonyms", progress)  # type: ignore[no-any-return]

    async def rotate_identity_key(self, progress: Callable[[int, int], None] | None = None) -> Rotation:
        return await self._call("rotate_identity_key", progress)  # type: ignore[no-any-return]

    async def diagnose(self) -> dict[str, Any]:
        return await self._call("diagnose")  # type: ignore[no-any-return]

    async def integrity_check(self) -> builtins.list[str]:
        return await self._call("integrity_check")  # type: ignore[no-any-return]

    async def grant(self, role: str, namespace: str | None = None, *, read_only: bool = False) -> None:
        await self._call("grant", role, namespace, read_only=read_only)

    async def revoke(self, role: str, namespace: str | None = None) -> bool:
        return await self._call("revoke", role, namespace)  # type: ignore[no-any-return]

    async def grants(self) -> builtins.list[tuple[str, str, bool]]:
        return await self._call("grants")  # type: ignore[no-any-return]

    @property
    def namespace(self) -> str:
        return self.store.namespace

    @property
    def namespaces(self) -> tuple[str, ...]:
        return self.store.namespaces

    async def promote(self, id: str, *, to: str) -> builtins.list[str]:
        return await self._call("promote", id, to=to)  # type: ignore[no-any-return]

    @property
    def path(self) -> Path | str:
        return self.store.path

    @property
    def read_only(self) -> bool:
        return self.store.read_only

    @property
    def embedder(self) -> Embedder | None:
        return self.store.embedder

    @property
    def keyword_only(self) -> bool:
        return self.store.keyword_only

    @property
    def pseudonym_keying(self) -> str:
        return self.store.pseudonym_keying

    @property
    def db(self) -> Database:
        """The open file as a sqlite-utils ``Database``, for looking (see :attr:`MemoryStore.db`)."""
        return self.store.db

    async def another(self) -> AsyncMemoryStore:
        """A second handle on this store, with its own connection and worker thread (see
        :meth:`MemoryStore.another`)."""
        twin = AsyncMemoryStore(*self._open_args[:1], **self._open_args[1])
        twin._store = await self._run(MemoryStore.another)
        return twin

    async def aclose(self) -> None:
        if self._store is not None:
            store, self._store = self._store, None
            await anyio.to_thread.run_sync(store.close, limiter=self._limiter)

    async def __aenter__(self) -> AsyncMemoryStore:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
