"""``AsyncMemoryStore`` beyond the happy path: its errors, many tasks on one facade, closing it while in
use, and answers identical to the sync store's."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import numpy as np
import numpy.typing as npt
import pytest
from engine_rows import connection as connection_of
from engine_rows import keyword_rows, vector_rows
from fake_embedder import HashedEmbedder

from harness_mem.aio import AsyncMemoryStore
from harness_mem.errors import HarnessMemError, StorageError
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# Every test here but the one about a file that is not SQLite runs on both engines, at ``engine_target``.


def populate(path: Path | str) -> None:
    with MemoryStore(path, embedder=HashedEmbedder()) as store:
        store.add("we chose argon2id for password hashing", id="hash", tags=["decision"])
        store.add("deploys happen on Tuesdays", id="deploy", tags=["ops"])
        store.add_many([{"id": f"t{i}", "text": f"turn {i} about the deploy window", "role": "user" if i % 2 else
                         "assistant", "session": "s1", "created_at": f"2024-05-01T10:0{i}:00Z"} for i in range(6)])


# ---- errors --------------------------------------------------------------------------------------

# (method, positional args, keyword args): each raises a library error in the sync store.
FAILING: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("get", ("nope",), {}),
    ("add", ("   ",), {}),
    ("add", ("x",), {"kind": "memo"}),
    ("add", ("again",), {"id": "hash"}),
    ("add_many", ([{"text": "fine"}, {"text": ""}],), {}),
    ("recall", ("x",), {"mode": "sideways"}),
    ("recall", ("x",), {"since": "someday"}),
    ("list", (), {"kind": "memo"}),
]


@pytest.mark.parametrize(("method", "args", "kwargs"), FAILING, ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(FAILING)])
async def test_errors_are_the_sync_stores_typed_errors(engine_target: str, method: str, args: tuple[Any, ...],
                                                       kwargs: dict[str, Any]) -> None:
    db_path = engine_target
    populate(db_path)
    with MemoryStore(db_path, embedder=None) as sync, pytest.raises(HarnessMemError) as expected:
        result = getattr(sync, method)(*args, **kwargs)
        if method == "list":
            list(result)  # the sync list() is a generator: the error comes with the first row
    async with AsyncMemoryStore(db_path, embedder=None) as store:
        with pytest.raises(HarnessMemError) as raised:
            await getattr(store, method)(*args, **kwargs)
        assert type(raised.value) is type(expected.value) and str(raised.value) == str(expected.value)
        # The failed call let go of the connection: the facade keeps working.
        assert (await store.get("hash")).content == "we chose argon2id for password hashing"


async def test_a_missing_model_is_an_embedder_error(engine_target: str) -> None:
    from harness_mem.errors import EmbedderError

    async with AsyncMemoryStore(engine_target, embedder=None) as store:
        with pytest.raises(EmbedderError, match="semantic recall needs"):
            await store.recall("x", mode="semantic")


async def test_a_file_that_is_not_sqlite_fails_on_entering(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n" * 100)
    with pytest.raises(StorageError, match="is not a usable SQLite database"):
        async with AsyncMemoryStore(path, embedder=None):
            pass
    lazy = AsyncMemoryStore(path, embedder=None)  # without `async with`: the first call opens, and fails
    with pytest.raises(StorageError, match="is not a usable SQLite database"):
        await lazy.add("x")
    with pytest.raises(RuntimeError, match="opens on its first awaited call"):
        lazy.store  # noqa: B018


# ---- many tasks, one facade ----------------------------------------------------------------------


async def test_concurrent_tasks_writing_through_one_facade_lose_nothing(engine_target: str) -> None:
    tasks, adds, batches = 16, 10, 2  # sixteen tasks interleave: more writes each prove no more
    read_errors: list[BaseException] = []
    async with AsyncMemoryStore(engine_target, embedder=HashedEmbedder()) as store:

        async def writer(task: int) -> None:
            for i in range(adds):
                await store.add(f"task t{task} wrote note n{i}", id=f"{task}-{i}", session=f"s{task}")
                if i % 5 == 0:
                    await store.add_many({"text": f"task {task} batch {i} item {j}", "id": f"{task}-b{i}-{j}"}
                                         for j in range(5))

        async def reader() -> None:
            for _ in range(30):
                try:
                    await store.recall("task wrote note", k=5)
                    await store.list(session="s0", limit=3)
                except BaseException as exc:  # noqa: BLE001 — collected, asserted empty below
                    read_errors.append(exc)
                await anyio.sleep(0)

        async with anyio.create_task_group() as group:
            for task in range(tasks):
                group.start_soon(writer, task)
            group.start_soon(reader)
        assert read_errors == []
        expected = tasks * (adds + batches * 5)
        assert (await store.stats())["entries"] == expected
        sync = store.store
        assert {e.id for e in sync.list()} == (
            {f"{t}-{i}" for t in range(tasks) for i in range(adds)}
            | {f"{t}-b{i}-{j}" for t in range(tasks) for i in range(0, adds, 5) for j in range(5)}
        )
        assert keyword_rows(sync) == expected
        assert vector_rows(sync) == expected
        assert sync.integrity_check() == []
        assert [h.entry.id for h in await store.recall("task t7 wrote note n9", k=1)] == ["7-9"]


class Gated(HashedEmbedder):
    """Holds the model call of any text starting with "slow" until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = threading.Event(), threading.Event()

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if texts and texts[0].startswith("slow"):
            self.entered.set()
            assert self.gate.wait(120), "the test never opened the gate"
        return super().embed(texts)


async def test_aclose_while_in_use_waits_for_the_call_in_flight(engine_target: str) -> None:
    db_path = engine_target
    model = Gated()
    store = AsyncMemoryStore(db_path, embedder=model)
    await store.stats()  # opened
    connection = connection_of(store.store)
    written: dict[str, str] = {}
    closed = anyio.Event()

    async def add(text: str) -> None:
        written[text] = (await store.add(text)).id

    async def close() -> None:
        await store.aclose()
        closed.set()

    async with anyio.create_task_group() as group:
        group.start_soon(add, "slow note written while closing")
        await anyio.to_thread.run_sync(model.entered.wait)  # that call is now inside the worker thread
        group.start_soon(add, "queued note behind it")
        group.start_soon(close)
        await anyio.sleep(0.1)
        assert not closed.is_set()  # the connection is not closed under the running call
        model.gate.set()
    assert closed.is_set() and set(written) == {"slow note written while closing", "queued note behind it"}
    with pytest.raises(Exception, match="closed"):
        connection.execute("SELECT 1")  # the connection the facade held is closed
    await store.aclose()  # closing twice is harmless (and closes the queued call's store if it reopened one)
    with MemoryStore(db_path, embedder=None) as sync:
        assert {e.id: e.content for e in sync.list()} == {v: k for k, v in written.items()}
        assert sync.integrity_check() == []


# ---- the same answers as the sync store ----------------------------------------------------------

CALLS: list[tuple[str, Callable[[Any], Any]]] = [
    ("recall keyword", lambda s: s.recall("deploy window", 5, mode="keyword")),
    ("recall hybrid", lambda s: s.recall("deploy window", 5, mode="hybrid", explain=True)),
    ("recall semantic filtered", lambda s: s.recall("turn about", 3, mode="semantic", role="user", session="s1")),
    ("recall tags", lambda s: s.recall("deploys", tags=["ops"])),
    ("list", lambda s: s.list(session="s1", newest_first=True, limit=4)),
    ("list kind", lambda s: s.list(kind="note")),
    ("get", lambda s: s.get("hash")),
    ("stats", lambda s: s.stats()),
]


def comparable(value: Any) -> Any:
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, dict):  # stats: the file's size changes as it is read (the WAL)
        return {k: v for k, v in value.items() if k != "file_bytes"}
    return value


@pytest.mark.parametrize(("name", "call"), CALLS, ids=[name for name, _ in CALLS])
async def test_reads_answer_as_the_sync_store_does(engine_target: str, name: str,
                                                   call: Callable[[Any], Any]) -> None:
    db_path = engine_target
    populate(db_path)
    with MemoryStore(db_path, embedder=HashedEmbedder()) as sync:
        result = call(sync)
        expected = comparable(list(result) if name.startswith("list") else result)
    async with AsyncMemoryStore(db_path, embedder=HashedEmbedder()) as store:
        assert comparable(await call(store)) == expected
    assert expected  # the comparison is not between two empty answers


async def test_delete_answers_as_the_sync_store_does(engine_target: str) -> None:
    db_path = engine_target
    populate(db_path)
    async with AsyncMemoryStore(db_path, embedder=HashedEmbedder()) as store:
        assert await store.delete("deploy") is True
        assert await store.delete("deploy") is False
        hits = await store.recall("deploys happen on Tuesdays", mode="hybrid")
        assert hits and all(h.entry.id != "deploy" for h in hits)
    with MemoryStore(db_path, embedder=HashedEmbedder()) as sync:
        assert sync.delete("deploy") is False and sync.count() == 7
        assert all(h.entry.id != "deploy" for h in sync.recall("deploys Tuesdays", mode="semantic"))


# The sync store's public names the async one spells differently: the rest must match one for one.
RENAMED = {"close": "aclose"}
# The engine and the rules object (the sync store's internals, reached via .store), and stored_forms:
# it holds for the calling thread, and an awaited call runs on the store's worker thread. ``lock`` is
# for threads sharing one sync store (the async one lets one call at a time through on its own), and
# ``identities`` / ``identity_key`` are how it was opened (an async store passes them on when it opens).
SYNC_ONLY = {"storage", "scope", "stored_forms", "lock", "identities", "identity_key"}


def accepts(method: Any, name: str) -> bool:
    """Whether ``method`` takes an argument called ``name`` (by that name, or in its ``**options``)."""
    import inspect

    parameters = inspect.signature(method).parameters
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def test_every_public_method_of_the_store_is_there_awaited(tmp_path: Path) -> None:
    import inspect

    for name, member in inspect.getmembers(MemoryStore):
        if name.startswith("_") or name in SYNC_ONLY:
            continue
        twin = getattr(AsyncMemoryStore, RENAMED.get(name, name), None)
        assert twin is not None, f"AsyncMemoryStore has no {RENAMED.get(name, name)}"
        if isinstance(member, property):
            assert isinstance(twin, property), name
            continue
        if name == "transaction":
            assert inspect.isfunction(twin)  # an async context manager
        else:
            assert inspect.iscoroutinefunction(twin), f"AsyncMemoryStore.{name} is not awaited"
        for parameter in list(inspect.signature(member).parameters)[1:]:  # after self
            assert accepts(twin, parameter), f"AsyncMemoryStore.{name} takes no {parameter}"
    # What an open store carries (path, read_only, …) is there too, once the file is open.
    with MemoryStore(tmp_path / "memory.db", embedder=None) as store:
        carried = {name for name in vars(store) if not name.startswith("_")} - SYNC_ONLY
    assert carried and all(isinstance(getattr(AsyncMemoryStore, name, None), property) for name in carried), carried


async def test_the_corrections_sessions_and_maintenance_calls_answer_as_the_sync_ones(engine_target: str) -> None:
    async with AsyncMemoryStore(engine_target, embedder=None) as store:
        first = await store.remember("the deploy target is staging-us", kind="fact")
        assert (await store.remember("the deploy target is staging-us", kind="fact")).deduped
        new = await store.supersede(first.id, "the deploy target is staging-eu")
        assert [e.content for e in await store.history(new.id)] == ["the deploy target is staging-us",
                                                                    "the deploy target is staging-eu"]
        await store.add_many([{"content": f"turn {i}", "role": "user", "session": "s-1"} for i in range(3)])
        assert [s.session for s in await store.sessions()] == ["s-1"]
        assert [e.content for e in await store.session_turns("s-1")] == ["turn 0", "turn 1", "turn 2"]
        assert len(await store.recent(2)) == 2 and await store.count(kind="turn") == 3
        assert await store.forget(session="s-1") == 3 and await store.purge() == 3
        assert (await store.recall_sessions("turn")) == [] and store.namespace == "default"
        assert len(await store.export()) == 1 and await store.integrity_check() == []  # the current fact


async def test_a_transaction_commits_together_and_keeps_other_tasks_out(engine_target: str) -> None:
    async with AsyncMemoryStore(engine_target, embedder=None) as store:
        with pytest.raises(RuntimeError, match="changed my mind"):
            async with store.transaction():
                await store.add("one", id="one")
                await store.add("two", id="two")
                raise RuntimeError("changed my mind")
        assert await store.count() == 0                          # rolled back, both
        order: list[str] = []

        async def outsider() -> None:
            await store.add("outside", id="outside")
            order.append("outsider")

        async with anyio.create_task_group() as tasks, store.transaction():
            await store.add("inside", id="inside")
            tasks.start_soon(outsider)
            await anyio.sleep(0.2)                          # the outsider waits at the gate meanwhile
            async with store.transaction():                 # nested: joins
                await store.add("nested", id="nested")
            order.append("committed")
        assert order == ["committed", "outsider"]
        assert sorted(e.id for e in await store.list()) == ["inside", "nested", "outside"]
