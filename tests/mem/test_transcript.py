"""TranscriptRecorder: synchronous O(1) enqueue, batched background writes, and a flush guarantee.

The tests that write through a real store run on both engines (``store`` is conftest's
``engine_store``; the recorder writes from its own thread, which the PostgreSQL connection allows
too), but the one timing the recorder's enqueue alone.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any

import anyio
import pytest

from harness_mem.errors import InvalidInputError, StorageError
from harness_mem.experience.transcript import (
    DEFAULT_MAX_CHARS,
    TRANSCRIPT_SOURCE,
    TranscriptRecorder,
    tool_turn_text,
    truncate_turn,
)
from harness_mem.models import Entry, Hit
from harness_mem.store import MemoryStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def store(engine_store: MemoryStore) -> MemoryStore:
    return engine_store


def turns(store: MemoryStore, session: str | None = None) -> list[Entry]:
    return list(store.list(kind="turn", session=session))


class SpyMemory:
    """A Memory with ``add_many`` that records every batch and can be made to fail."""

    def __init__(self) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.fail: Exception | None = None

    def add_many(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if self.fail is not None:
            raise self.fail
        self.batches.append(items)
        return items

    def add(self, content: str, **fields: Any) -> Entry:
        raise AssertionError("add_many should be used")

    def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
        return []

    @property
    def written(self) -> list[dict[str, Any]]:
        return [item for batch in self.batches for item in batch]


# ---- capture → close → recall ---------------------------------------------------------------------


async def test_capture_close_recall_round_trip(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="s-1") as rec:
        rec.note_user("Please rotate the TLS certificates on the edge gateway")
        rec.note_tool("shell", {"exit": 0, "stdout": "renewed"})
        rec.note_assistant("The certificates are rotated.", success=True)
    user, tool, assistant = turns(store, "s-1")
    assert [t.role for t in (user, tool, assistant)] == ["user", "tool", "assistant"]
    assert all(t.kind == "turn" and t.session == "s-1" and t.source == TRANSCRIPT_SOURCE for t in (user, tool, assistant))
    assert user.tags == ("role:user", "session:s-1")
    assert assistant.tags == ("role:assistant", "session:s-1", "result:success")
    assert tool.content == '[shell] {"exit":0,"stdout":"renewed"}' and tool.metadata == {"tool": "shell"}
    assert user.created_at <= tool.created_at <= assistant.created_at

    hits = store.recall("TLS certificates gateway", session="s-1", role="user")
    assert [h.entry.id for h in hits] == [user.id]
    assert [h.entry.id for h in store.recall("rotated", tags=["role:assistant", "session:s-1"])] == [assistant.id]


async def test_turn_text_rules(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="s", tags=["agent:alpha"]) as rec:
        rec.note_assistant("   ", reasoning="thinking about the deploy")   # blank text: the reasoning
        rec.note_assistant("")                                              # blank: skipped
        rec.note_user("  \n ")                                             # blank: skipped
        rec.note_tool("read_file", "line one\nline two")                    # a string result stays as is
        rec.note("system", "You are terse.")
    stored = turns(store, "s")
    assert [(t.role, t.content) for t in stored] == [
        ("assistant", "thinking about the deploy"),
        ("tool", "[read_file] line one\nline two"),
        ("system", "You are terse."),
    ]
    assert stored[0].tags == ("role:assistant", "session:s", "agent:alpha")
    assert rec.stats.blank == 2 and rec.stats.written == 3
    assert tool_turn_text("t", [1, "ü"]) == '[t] [1,"ü"]'


# ---- truncation, duplicates, TTL -----------------------------------------------------------------------


async def test_long_turns_are_truncated_with_a_marker(store: MemoryStore) -> None:
    long_text = "x" * 2500
    async with TranscriptRecorder(store, session="s") as rec:
        rec.note_user(long_text)
        rec.note_user("y" * DEFAULT_MAX_CHARS)  # exactly at the limit: kept whole
    first, second = turns(store, "s")
    assert first.content == "x" * 2000 + "… [500 chars truncated]"
    assert first.metadata == {"truncated_chars": 500}
    assert second.content == "y" * 2000 and second.metadata == {}
    assert rec.stats.truncated == 1

    async with TranscriptRecorder(store, session="short", max_chars=10) as rec:
        rec.note_tool("shell", "0123456789abcdef")
    assert turns(store, "short")[0].content == "[shell] 01… [14 chars truncated]"
    async with TranscriptRecorder(store, session="whole", max_chars=0) as rec:
        rec.note_user(long_text)
    assert turns(store, "whole")[0].content == long_text
    assert truncate_turn("abc", 2) == ("ab… [1 chars truncated]", 1)


@pytest.mark.anyio
async def test_a_secret_straddling_the_cut_is_redacted_whole(store: MemoryStore) -> None:
    """Redaction runs on the whole turn before it is cut: no fragment of the card or address survives."""
    padding = "x" * (DEFAULT_MAX_CHARS - 10)
    async with TranscriptRecorder(store, session="s") as rec:
        rec.note_user(f"{padding} card 4111 1111 1111 1111 and ada.lovelace@example.com thanks")
    (turn,) = turns(store, "s")
    assert "4111 1" not in turn.content and "ada.lovelace" not in turn.content
    assert turn.content.startswith(padding) and "chars truncated]" in turn.content
    assert turn.redactions is not None and turn.redactions.get("CREDIT_CARD") == 1 and turn.redactions.get("EMAIL") == 1


async def test_a_turn_the_policy_blocks_is_refused_and_counted_never_stored(engine_target: str) -> None:
    """Under a policy that blocks credentials (hygiene), a turn holding one is refused like any entry
    the policy blocks, in text or in a structured tool result; the turns around it are kept."""
    from harness_mem.redaction import Redactor

    token = "ghp_" + "a1B2" * 9
    with MemoryStore(engine_target, embedder=None, redactor=Redactor.hygiene()) as store:
        async with TranscriptRecorder(store, session="s") as rec:
            rec.note_user("deploy it")
            rec.note_user(f"use the token {token}")
            rec.note_tool("env", {"GITHUB_TOKEN": token})
            rec.note_assistant("Deployed.")
        assert [t.content for t in turns(store, "s")] == ["deploy it", "Deployed."]
        assert rec.stats.refused == 2 and rec.stats.written == 2 and rec.stats.failed == 0
        assert token not in str([t.model_dump() for t in store.list(include_superseded=True)])


async def test_consecutive_duplicates_are_dropped(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="s") as rec:
        for _ in range(3):
            rec.note_tool("ls", {"files": ["a"]})   # a polling echo
        rec.note_assistant('[ls] {"files":["a"]}')  # same text, another role: kept
        rec.note_tool("ls", {"files": ["a"]})       # not consecutive any more: kept
        rec.note_user("again")
        rec.note_user("again")
    assert [t.role for t in turns(store, "s")] == ["tool", "assistant", "tool", "user"]
    assert rec.stats.duplicates == 3


async def test_time_to_live_defaults_to_30_days_and_can_be_turned_off(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="ttl") as rec:
        rec.note_user("forget me in a month")
    (turn,) = turns(store, "ttl")
    assert turn.expires_at is not None
    assert abs(turn.expires_at - turn.created_at - timedelta(days=30)) < timedelta(milliseconds=2)

    async with TranscriptRecorder(store, session="forever", ttl_days=None) as rec:
        rec.note_user("keep me")
    assert turns(store, "forever")[0].expires_at is None

    async with TranscriptRecorder(store, session="brief", ttl_days=0.2 / 86400) as rec:  # 200 ms
        rec.note_user("gone soon")
    assert len(turns(store, "brief")) == 1
    await anyio.sleep(0.3)
    assert turns(store, "brief") == [] and store.recall("gone soon") == []


# ---- the flush guarantee ----------------------------------------------------------------------------


async def test_everything_enqueued_is_written_when_the_block_ends(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="burst", batch_size=100) as rec:
        for i in range(2_000):  # no await in between: the writer cannot run until the block ends
            rec.note_user(f"turn number {i}")
        assert rec.pending == 2_000 and store.count() == 0
    assert store.count(session="burst") == 2_000 and rec.pending == 0
    assert [t.content for t in turns(store, "burst")][:2] == ["turn number 0", "turn number 1"]
    assert await rec.aclose() == 2_000  # closing again is harmless and reports the same total


async def test_writes_are_batched_with_add_many() -> None:
    memory = SpyMemory()
    async with TranscriptRecorder(memory, session="s", batch_size=64) as rec:  # type: ignore[arg-type]
        for i in range(1_000):
            rec.note_user(f"t{i}")
    assert len(memory.written) == 1_000
    assert len(memory.batches) == 16 and max(len(b) for b in memory.batches) == 64


async def test_aclose_returns_the_number_written(store: MemoryStore) -> None:
    rec = TranscriptRecorder(store, session="s")
    async with anyio.create_task_group() as tg:
        await tg.start(rec.run)
        rec.note_user("one")
        rec.note_user("two")
        rec.note_user("two")
        assert await rec.aclose() == 2
    rec.note_user("too late")
    assert rec.stats.late == 1 and store.count() == 2


async def test_leaving_by_an_error_still_flushes(store: MemoryStore) -> None:
    with pytest.raises(ZeroDivisionError):
        async with TranscriptRecorder(store, session="err") as rec:
            for i in range(50):
                rec.note_user(f"before the crash {i}")
            1 / 0  # noqa: B018
    assert store.count(session="err") == 50


async def test_leaving_by_cancellation_still_flushes(store: MemoryStore) -> None:
    with anyio.move_on_after(0.05):
        async with TranscriptRecorder(store, session="cancelled") as rec:
            for i in range(300):
                rec.note_user(f"turn {i}")
            await anyio.sleep(10)  # cancelled here
    assert store.count(session="cancelled") == 300


def test_a_host_without_an_event_loop_flushes_and_closes(store: MemoryStore) -> None:
    with TranscriptRecorder(store, session="sync") as rec:
        rec.note_user("first")
        assert rec.flush() == 1
        rec.note_assistant("second")
        rec.note_assistant("third")
    assert [t.content for t in turns(store, "sync")] == ["first", "second", "third"]
    assert rec.close() == 3 and rec.closed


# ---- the hook side never blocks ------------------------------------------------------------------------


async def test_enqueue_never_touches_the_memory_or_the_content(store: MemoryStore) -> None:
    serialised: list[str] = []

    class Probe:
        def __str__(self) -> str:  # what the JSON encoder falls back to: proof of when it is read
            serialised.append("read")
            return "probe"

    async with TranscriptRecorder(store, session="lazy") as rec:
        rec.note_tool("probe", Probe())
        rec.note_user("x" * 5_000_000)
        assert serialised == [] and store.count() == 0  # nothing was formatted, nothing written
    assert serialised == ["read"]
    assert turns(store, "lazy")[0].content == '[probe] "probe"'


async def test_enqueue_is_fast_whatever_the_size_of_the_turn(sqlite_store: MemoryStore) -> None:
    # The recorder's own speed: the store it writes to afterwards is one engine's (12 s a run).
    big = "y" * 1_000_000
    async with TranscriptRecorder(sqlite_store, session="timing") as rec:
        timings: dict[str, list[float]] = {"small": [], "big": []}
        for i in range(400):
            text, key = ("hi", "small") if i % 2 else (big, "big")
            started = time.thread_time()  # this thread's CPU: neither the writer nor a busy machine counts
            rec.note_user(text)
            timings[key].append(time.thread_time() - started)
    for samples in timings.values():
        samples.sort()
        p50 = samples[len(samples) // 2]
        assert p50 < 50e-6, f"median enqueue took {p50 * 1e6:.1f} µs"
    # a 1 MB turn costs what a 2-byte one does (generous factor: shared CI cores are noisy)
    assert timings["big"][len(timings["big"]) // 2] < 5 * timings["small"][len(timings["small"]) // 2] + 5e-6


async def test_notes_return_while_the_writer_is_stuck_in_a_slow_write() -> None:
    class SlowAsyncMemory:
        def __init__(self) -> None:
            self.gate = anyio.Event()
            self.entered = anyio.Event()
            self.written: list[dict[str, Any]] = []

        async def add_many(self, items: list[dict[str, Any]]) -> None:
            self.entered.set()
            await self.gate.wait()  # a slow disk, a model load: the writer waits here
            self.written.extend(items)

    memory = SlowAsyncMemory()
    async with TranscriptRecorder(memory, session="slow") as rec:  # type: ignore[arg-type]
        rec.note_user("first")
        await memory.entered.wait()
        started = time.thread_time()
        for i in range(1_000):
            rec.note_assistant(f"while blocked {i}")
        assert time.thread_time() - started < 0.5  # CPU: a note that waited for the writer would never return
        assert memory.written == [] and rec.pending == 1_000
        memory.gate.set()
    assert len(memory.written) == 1_001


async def test_an_async_store_is_written_off_the_event_loop(engine_target: str) -> None:
    db_path = engine_target
    from harness_mem.aio import AsyncMemoryStore

    loop_thread = threading.get_ident()
    threads: set[int] = set()
    async with AsyncMemoryStore(db_path, embedder=None) as store:
        original = store.store.add_many

        def spy(*args: Any, **kwargs: Any) -> list[Entry]:
            threads.add(threading.get_ident())
            return original(*args, **kwargs)

        store.store.add_many = spy  # type: ignore[method-assign]
        async with TranscriptRecorder(store, session="async") as rec:
            rec.note_user("written by a worker thread")
            rec.note_user("broken \ud800 surrogate")
            with pytest.raises(InvalidInputError, match="use `async with` or `await recorder.aclose"):
                rec.flush()
        assert [e.content for e in await store.list(session="async")] == ["written by a worker thread"]
        assert rec.stats.failed == 1
    assert threads and loop_thread not in threads


async def test_turns_noted_from_other_threads_are_written(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="threads", poll_interval=0.02) as rec:
        def tool_thread() -> None:
            for i in range(20):
                rec.note_tool("worker", i)

        await anyio.to_thread.run_sync(tool_thread)
        with anyio.fail_after(2):
            while store.count(session="threads") < 20:  # written before close, by the poll
                await anyio.sleep(0.01)
    assert store.count(session="threads") == 20


# ---- other memories, failures, validation --------------------------------------------------------------


async def test_a_plain_memory_gets_one_add_per_turn(store: MemoryStore) -> None:
    class Redacting:
        """Stands in for RedactingMemory: only add and recall."""

        def __init__(self, inner: MemoryStore) -> None:
            self.inner = inner

        def add(self, content: str, **fields: Any) -> Entry:
            return self.inner.add(content.replace("hunter2", "<SECRET>"), **fields)

        def recall(self, query: str, k: int = 10, **filters: Any) -> list[Hit]:
            return self.inner.recall(query, k, **filters)

    async with TranscriptRecorder(Redacting(store), session="red") as rec:
        rec.note_user("my password is hunter2")
        rec.note_tool("login", "ok")
    user, tool = turns(store, "red")
    assert user.content == "my password is <SECRET>" and user.tags == ("role:user", "session:red")
    assert tool.metadata == {"tool": "login"} and tool.expires_at is not None


async def test_a_failing_write_is_counted_and_logged_never_raised(caplog: pytest.LogCaptureFixture) -> None:
    memory = SpyMemory()
    memory.fail = StorageError("disk full")
    with caplog.at_level(logging.WARNING, logger="harness_mem.experience.transcript"):
        async with TranscriptRecorder(memory, session="s") as rec:  # type: ignore[arg-type]
            rec.note_user("lost")
            rec.note_user("also lost")
    assert rec.stats.failed == 2 and rec.stats.written == 0
    assert rec.last_error == "StorageError: disk full"
    assert "transcript s: 2 turn(s) not written: StorageError: disk full" in caplog.text


async def test_invalid_turns_are_skipped_and_the_rest_written(store: MemoryStore) -> None:
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no text for you")

    async with TranscriptRecorder(store, session="s") as rec:
        rec.note_user("fine")
        rec.note_user("broken \ud800 surrogate")
        rec.note_tool("weird", Unprintable())  # fails in the writer, which carries on
        rec.note_user("also fine")
    assert [t.content for t in turns(store, "s")] == ["fine", "also fine"]
    assert rec.stats.failed == 2 and "surrogate" in (rec.last_error or "")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session": ""}, "a transcript needs a session id"),
        ({"session": "s", "ttl_days": 0}, "ttl_days must be a positive number or None"),
        ({"session": "s", "batch_size": 0}, "batch_size must be at least 1"),
    ],
)
def test_bad_settings_are_refused(engine_target: str, kwargs: dict[str, Any], message: str) -> None:
    db_path = engine_target
    with MemoryStore(db_path, embedder=None) as store, pytest.raises(InvalidInputError, match=message):
        TranscriptRecorder(store, **kwargs)


async def test_the_writer_cannot_run_twice(store: MemoryStore) -> None:
    async with TranscriptRecorder(store, session="s") as rec:
        with pytest.raises(InvalidInputError, match="already running"):
            await rec.run()


@pytest.mark.anyio
async def test_an_async_store_not_yet_open_still_gets_whole_turns_redacted(engine_target: str) -> None:
    from harness_mem.aio import AsyncMemoryStore

    memory = AsyncMemoryStore(engine_target, embedder=None)  # no call awaited yet: the file is not open
    padding = "x" * (DEFAULT_MAX_CHARS - 10)
    async with TranscriptRecorder(memory, session="s") as rec:
        rec.note_user(f"{padding} card 4111 1111 1111 1111 end")
    assert rec.stats.failed == 0
    (turn,) = turns(memory.store, "s")
    assert "4111 1" not in turn.content and turn.redactions == {"CREDIT_CARD": 1}
    await memory.aclose()
