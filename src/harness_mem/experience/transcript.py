"""Transcript capture: every turn of a conversation into memory, without slowing the host down.

The contract: **the hook side only enqueues, a background writer persists.** An agent loop calls
:meth:`TranscriptRecorder.note_user`, :meth:`~TranscriptRecorder.note_assistant` and
:meth:`~TranscriptRecorder.note_tool` from wherever it sees a turn; each call appends one tuple to
a queue and returns. Nothing on that path formats, serialises, truncates, compares or touches the
database, so a call costs the same for a 10-byte turn and a 10-MB tool result, and a slow disk or
a model load can never stall the host's loop. The writer does the rest in batches: it skips blank
turns, drops *consecutive* duplicates (same role and text — in one measured shared memory, 70% of
the entries were tool-call echoes), cuts long turns to their head plus
``"… [{n} chars truncated]"``, and stores each turn as an entry of kind ``turn`` with ``role`` and
``session`` as fields, tags ``role:{r}`` and ``session:{s}``, source
``"transcript"`` and, by default, a 30-day time to live.

**The flush guarantee is part of the API.** Leaving ``async with`` (or awaiting :meth:`aclose`)
waits until every turn enqueued before it is written, even when the block is left by an exception
or a cancellation (the flush is shielded), and returns how many turns were written::

    async with TranscriptRecorder(store, session="s-42") as rec:
        rec.note_user("deploy the site")
        ...                                   # the loop runs; the writer writes as it goes
        rec.note_tool("shell", {"exit": 0})
        rec.note_assistant("Deployed.", success=True)
    # here every turn above is in the database

A host without an event loop uses the same methods and calls :meth:`flush` or :meth:`close`
(``with TranscriptRecorder(...) as rec:`` closes on exit). The recorder knows nothing of
harness_loop: any host adapts its own hooks to these plain methods.

**A host that must survive kill -9** uses :class:`~harness_mem.experience.TranscriptWriter`
(``transcript_writer``): the same recorder, written by a thread with a connection of its own
every fraction of a second, so a killed process loses only the turns of the last interval.

**Where the writes run.** Given an :class:`~harness_mem.aio.AsyncMemoryStore`, the writer awaits
its ``add_many``: the write runs in a worker thread, behind the same one-call-at-a-time limiter as
the host's own awaited calls on that store, so the event loop never waits on SQLite and the
connection is never used by two threads at once. This is the choice for async hosts. Given a plain
:class:`~harness_mem.store.MemoryStore` (or any synchronous memory), the writer writes on the event
loop's own thread, between the host's awaits — the thread on which the host itself uses that store,
so their transactions cannot interleave either. That costs the loop a few tenths of a millisecond
per turn with a keyword-only store (see ``bench/bench_experience.py``), more with an embedder.

A write that fails is logged and counted (:attr:`TranscriptStats.failed`, :attr:`last_error`),
never raised into the host: losing a turn of transcript must not crash an agent. Transcripts are
the biggest PII surface; the store redacts every write by default, and a
:class:`~harness_mem.redaction.guarded.RedactingMemory` (any object with ``add``) can stand in for it.
A turn written to a store is redacted once: the writer scrubs it whole with the store's redactor
before cutting it, and the store, told so, does not scrub it again (a memory with only ``add``,
such as a ``RedactingMemory``, scrubs what it is given once more).
"""

from __future__ import annotations

import inspect
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from ..errors import InvalidInputError
from ..protocols import Memory

if TYPE_CHECKING:
    from ..aio import AsyncMemoryStore
    from ..redaction import Redactor

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEFAULT_TTL_DAYS",
    "RESULT_TAGS",
    "TRANSCRIPT_SOURCE",
    "TranscriptRecorder",
    "TranscriptStats",
    "tool_turn_text",
    "truncate_turn",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_CHARS = 2000
DEFAULT_TTL_DAYS: float = 30
DEFAULT_BATCH_SIZE = 256
# How often a running writer looks for turns enqueued from other threads (those cannot wake it).
DEFAULT_POLL_INTERVAL = 0.1
TRANSCRIPT_SOURCE = "transcript"
# The tag a host puts on a turn that states the run's result; consolidation reads it.
RESULT_TAGS: dict[bool, str] = {True: "result:success", False: "result:failure"}


def truncate_turn(text: str, max_chars: int = DEFAULT_MAX_CHARS, *, redactor: Redactor | None = None) -> tuple[str, int]:
    """``text`` cut to its first ``max_chars`` characters plus ``"… [{n} chars truncated]"``, and ``n``.

    ``max_chars`` of 0 (or less) keeps every character. With ``redactor``, for text not redacted
    yet, the cut never goes through a value it finds: it moves back to the value's start
    (:func:`~harness_mem.redaction.cut_point`), so the redaction that runs when the text is
    written takes the value whole instead of missing a fragment of it.
    """
    if max_chars <= 0 or len(text) <= max_chars:
        return text, 0
    kept = max_chars if redactor is None else redactor.cut_point(text, max_chars)
    cut = len(text) - kept
    return f"{text[:kept]}… [{cut} chars truncated]", cut


def tool_turn_text(name: str, result: Any) -> str:
    """A tool turn's text: ``"[{name}] {result}"``.

    A string result is kept as it is (JSON-quoting it would only escape its quotes and newlines,
    making it harder to read and to recall); anything else is written as compact JSON.
    """
    if isinstance(result, str):
        body = result
    else:
        try:
            body = json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)
        except (TypeError, ValueError):  # circular structures
            body = repr(result)
    return f"[{name}] {body}"


def _scrubbed_json(redactor: Any, result: Any) -> tuple[str | None, dict[str, int], bool]:
    """A non-string tool result as :func:`tool_turn_text` writes it, with every string in it
    scrubbed first, what was found, and whether the policy blocks it; None when it is not JSON data
    (a circular structure: its ``repr`` is then scrubbed as text)."""
    try:
        plain = json.loads(json.dumps(result, ensure_ascii=False, default=str))
    except (TypeError, ValueError):
        return None, {}, False
    scrubbed = redactor.scrub_value(plain)
    return (json.dumps(scrubbed.value, ensure_ascii=False, separators=(",", ":")), dict(scrubbed.counts),
            scrubbed.blocked)


@dataclass(frozen=True)
class TranscriptStats:
    """What a recorder has done so far.

    ``written`` turns are in the memory; ``duplicates`` and ``blank`` were dropped by design;
    ``truncated`` were written cut; ``refused`` held what the redaction policy blocks (a secret under
    a hygiene policy) and were not written; ``failed`` could not be written (see ``last_error``);
    ``late`` arrived after close and were ignored; ``pending`` are still queued.
    """

    written: int = 0
    duplicates: int = 0
    blank: int = 0
    truncated: int = 0
    refused: int = 0
    failed: int = 0
    late: int = 0
    pending: int = 0

    def to_dict(self) -> dict[str, int]:
        return dict(vars(self))


# A queued turn, kept as a bare tuple because building it is the whole cost of the hook side:
# (role, text, reasoning, tool name, success, time in ns). For a tool turn, "text" is the raw result.
_Queued = tuple[str, Any, Any, str | None, bool | None, int]


class TranscriptRecorder:
    """Captures a session's turns into ``memory``: synchronous enqueue, batched background writes.

    :param memory: where turns go — an :class:`~harness_mem.aio.AsyncMemoryStore` or a
        :class:`~harness_mem.store.MemoryStore` (batched through ``add_many``), or any object with
        ``add(content, **fields)``, such as a ``RedactingMemory``.
    :param session: the session (conversation) id every turn is stored under.
    :param max_chars: longer turns keep their head and a ``"… [n chars truncated]"`` marker;
        0 keeps everything.
    :param ttl_days: turns expire this many days after they happened; None keeps them forever.
    :param tags: extra tags for every turn (after ``role:…`` and ``session:…``).
    :param batch_size: at most this many turns per write.
    :param poll_interval: how often a running writer checks for turns enqueued from other threads.
    """

    def __init__(
        self,
        memory: Memory | AsyncMemoryStore,
        *,
        session: str,
        max_chars: int = DEFAULT_MAX_CHARS,
        ttl_days: float | None = DEFAULT_TTL_DAYS,
        tags: Iterable[str] = (),
        batch_size: int = DEFAULT_BATCH_SIZE,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
    ) -> None:
        if not isinstance(session, str) or not session.strip():
            raise InvalidInputError("a transcript needs a session id (a non-empty string)")
        if ttl_days is not None and (isinstance(ttl_days, bool) or not ttl_days > 0):
            raise InvalidInputError(f"ttl_days must be a positive number or None (keep forever), not {ttl_days!r}")
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be at least 1, not {batch_size!r}")
        if isinstance(tags, str):
            tags = [tags]
        self.memory = memory
        self.session = session
        self.max_chars = max_chars
        self.ttl_days = ttl_days
        self.batch_size = batch_size
        # An async memory (AsyncMemoryStore) is awaited by the writer and cannot be written from sync code.
        self._async_memory = inspect.iscoroutinefunction(
            getattr(memory, "add_many", None) or getattr(memory, "add", None)
        )
        self.poll_interval = poll_interval
        self._tags = [f"session:{session}", *(t for t in tags if t)]
        self._pending: deque[_Queued] = deque()  # append/popleft are atomic: any thread may enqueue
        self._closing = False
        self._write_lock = threading.Lock()  # one batch at a time, whoever writes it
        self._last: tuple[str, str] | None = None  # (role, text) of the last turn kept: the dedup key
        self._counts = {"written": 0, "duplicates": 0, "blank": 0, "truncated": 0, "refused": 0, "failed": 0,
                        "late": 0}
        self.last_error: str | None = None
        # Set while run() is active: the loop's thread (only it may wake the writer) and two events.
        self._loop_thread: int | None = None
        self._wake: anyio.Event | None = None
        self._stopped: anyio.Event | None = None
        self._exit_stack: AsyncExitStack | None = None

    def __repr__(self) -> str:
        return f"<TranscriptRecorder session={self.session!r} pending={len(self._pending)}>"

    # ---- the hook side: synchronous, O(1), never raises for content, never touches the memory --

    def note_user(self, text: str) -> None:
        """Record the user's turn (a hook sees only model output and tool results, so the host
        notes the user's message itself)."""
        self._enqueue(("user", text, None, None, None, time.time_ns()))

    def note_assistant(self, text: str | None, *, reasoning: str | None = None, success: bool | None = None) -> None:
        """Record the model's turn: its text, or its reasoning when the text is blank.

        ``success`` states the run's result (tag ``result:success``/``result:failure``), which
        consolidation turns into the episode's result.
        """
        self._enqueue(("assistant", text, reasoning, None, success, time.time_ns()))

    def note_tool(self, name: str, result: Any, *, success: bool | None = None) -> None:
        """Record a tool's result as ``"[{name}] {result}"`` (non-string results as JSON, made by
        the writer: do not mutate ``result`` afterwards)."""
        self._enqueue(("tool", result, None, name, success, time.time_ns()))

    def note(self, role: str, text: str, *, success: bool | None = None) -> None:
        """Record a turn with any role (``system``, a speaker's name, …)."""
        self._enqueue((role, text, None, None, success, time.time_ns()))

    def _enqueue(self, item: _Queued) -> None:
        if self._closing:
            self._counts["late"] += 1
            return
        self._pending.append(item)
        # An anyio event may only be set from its loop's thread; other threads rely on the poll.
        if self._loop_thread == threading.get_ident() and self._wake is not None:
            self._wake.set()

    # ---- state ---------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Turns enqueued and not yet written (or dropped)."""
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closing

    @property
    def stats(self) -> TranscriptStats:
        return TranscriptStats(**self._counts, pending=len(self._pending))

    # ---- the writer side -------------------------------------------------------------------------

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The background writer: writes queued turns until the recorder is closed and drained.

        ``async with`` starts it for you; a host with its own task group may instead
        ``tg.start_soon(recorder.run)`` and later ``await recorder.aclose()``.
        """
        if self._loop_thread is not None:
            raise InvalidInputError("this recorder's writer is already running")
        self._loop_thread = threading.get_ident()
        self._wake = anyio.Event()
        self._stopped = anyio.Event()
        task_status.started()
        try:
            while True:
                while self._pending:
                    await self._write_batch()
                if self._closing:
                    return
                self._wake = anyio.Event()  # anyio events cannot be cleared: take a fresh one
                if self._pending:
                    continue
                with anyio.move_on_after(self.poll_interval):
                    await self._wake.wait()
        finally:
            self._loop_thread = None
            self._stopped.set()

    async def _write_batch(self) -> None:
        if self._async_memory:
            from ..aio import AsyncMemoryStore

            if isinstance(self.memory, AsyncMemoryStore):
                await self.memory.open()  # its redactor (the file's own key) is needed to prepare turns
            # Only the writer task writes to an async memory (flush() refuses), so batches stay in order.
            with self._write_lock:  # never held across the await below
                items, redactor = self._take()
            if items:
                await self._write_async(items, redactor)
        else:
            self._drain_batch()
        await anyio.lowlevel.checkpoint()  # let the host run between two batches

    def flush(self) -> int:
        """Write every queued turn now, on the calling thread; returns how many were written."""
        if self._async_memory:
            raise InvalidInputError(
                "this recorder writes to an async store — use `async with` or `await recorder.aclose()`"
            )
        before = self._counts["written"]
        while self._pending:
            self._drain_batch()
        return self._counts["written"] - before

    def close(self) -> int:
        """Stop accepting turns, write what is queued, and return how many turns were written in all.

        For hosts without an event loop; an async host uses ``async with`` or :meth:`aclose`.
        """
        self._closing = True
        if self._pending or not self._async_memory:
            self.flush()
        return self._counts["written"]

    async def aclose(self) -> int:
        """Stop accepting turns, wait until every queued turn is written, and return how many
        turns were written in all."""
        self._closing = True
        if self._loop_thread is not None and self._stopped is not None:
            if self._loop_thread == threading.get_ident() and self._wake is not None:
                self._wake.set()
            await self._stopped.wait()
        while self._pending:  # no writer ran, or it was cancelled before it drained
            await self._write_batch()
        return self._counts["written"]

    async def __aenter__(self) -> TranscriptRecorder:
        stack = AsyncExitStack()
        task_group = await stack.enter_async_context(anyio.create_task_group())
        await task_group.start(self.run)
        self._exit_stack = stack
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shielded: leaving the block by an error or a cancellation still writes every turn.
        with anyio.CancelScope(shield=True):
            await self.aclose()
        stack, self._exit_stack = self._exit_stack, None
        if stack is not None:
            # The writer has finished, so the task group has nothing left to wait for. It is not
            # handed the block's exception: that would come back wrapped in an ExceptionGroup.
            await stack.__aexit__(None, None, None)

    def __enter__(self) -> TranscriptRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- turning queued tuples into entries ---------------------------------------------------------

    def _drain_batch(self) -> None:
        """Take up to ``batch_size`` queued turns, drop what must be dropped, and write the rest."""
        with self._write_lock:
            items, redactor = self._take()
            if items:
                self._write(items, redactor)

    def _take(self) -> tuple[list[dict[str, Any]], Redactor | None]:
        """Up to ``batch_size`` queued turns as entry fields, minus those dropped by design, and the
        redactor that scrubbed them (the memory's; None when it has none).

        The caller holds ``_write_lock``: the dedup key and the counts belong to one batch at a time.
        """
        redactor = getattr(self.memory, "redactor", None)
        if redactor is None or not hasattr(redactor, "scrub"):
            redactor = None
        items: list[dict[str, Any]] = []
        for _ in range(min(self.batch_size, len(self._pending))):
            try:
                item = self._prepare(self._pending.popleft(), redactor)
            except Exception as exc:  # a result whose str() raises, say: lose that turn, not the writer
                self._failed(1, f"{type(exc).__name__}: {exc}")
                continue
            if item is not None:
                items.append(item)
        return items, redactor

    def _prepare(self, queued: _Queued, redactor: Redactor | None) -> dict[str, Any] | None:
        role, raw, reasoning, tool, success, at_ns = queued
        found: dict[str, int] = {}
        blocked = False
        if tool is not None:
            if redactor is not None and hasattr(redactor, "scrub_value") and not isinstance(raw, str):
                # Scrub a structured result before it is written as JSON: JSON escapes the quotes
                # of a string value, and a '"password": "…"' inside one reads '\"password\": \"…\"',
                # which no detector takes for an assignment.
                body, found, blocked = _scrubbed_json(redactor, raw)
                text = tool_turn_text(tool, raw) if body is None else f"[{tool}] {body}"
            else:
                text = tool_turn_text(tool, raw)
        else:
            text = raw if isinstance(raw, str) else ("" if raw is None else str(raw))
            if reasoning and not text.strip():
                text = reasoning if isinstance(reasoning, str) else str(reasoning)
        if not text.strip():
            self._counts["blank"] += 1
            return None
        key = (role, text)
        if key == self._last:
            self._counts["duplicates"] += 1
            return None
        self._last = key
        # Redact the whole text before cutting it: a card number or an address straddling the cut
        # would otherwise reach the store as a fragment no detector recognises.
        if redactor is not None:
            scrubbed = redactor.scrub(text)
            text = scrubbed.text
            blocked = blocked or scrubbed.blocked
            for kind, n in scrubbed.counts.items():
                found[kind] = found.get(kind, 0) + n
        if blocked:  # the policy refuses this turn, as it refuses any entry: nothing of it is stored
            self._counts["refused"] += 1
            return None
        content, cut = truncate_turn(text, self.max_chars)
        metadata: dict[str, Any] = {}
        if tool is not None:
            metadata["tool"] = tool
        if cut:
            self._counts["truncated"] += 1
            metadata["truncated_chars"] = cut
        tags = [f"role:{role}", *self._tags]
        if success is not None:
            tags.append(RESULT_TAGS[bool(success)])
        created = datetime.fromtimestamp(at_ns / 1e9, UTC)
        return {
            "content": content,
            "kind": "turn",
            "role": role,
            "session": self.session,
            "tags": tags,
            "source": TRANSCRIPT_SOURCE,
            "metadata": metadata or None,
            "created_at": created,
            "expires_at": created + timedelta(days=self.ttl_days) if self.ttl_days is not None else None,
            **({"redactions": found} if found else {}),
        }

    def _write(self, items: list[dict[str, Any]], redactor: Redactor | None) -> None:
        from ..store import MemoryStore  # the store imports numpy: only writers pay for it

        memory = self.memory
        try:
            if isinstance(memory, MemoryStore):
                bad: list[str] = []
                # The turns were scrubbed whole by the store's own redactor: it need not scrub them again.
                written = memory.add_many(items, on_invalid=lambda i, exc: bad.append(str(exc)), scrubbed_by=redactor)
                self._counts["written"] += len(written)
                if bad:
                    self._failed(len(bad), bad[-1])
                return
            add_many: Callable[..., Any] | None = getattr(memory, "add_many", None)
            if callable(add_many):
                add_many(items)
                self._counts["written"] += len(items)
                return
        except Exception as exc:  # a transcript failure must not crash the host; it is counted
            self._failed(len(items), f"{type(exc).__name__}: {exc}")
            return
        for item in items:  # a plain Memory (a redacting wrapper, say): one add per turn
            content = item.pop("content")
            item.pop("redactions", None)  # `add` takes no counts; the wrapper scrubs the text again
            try:
                memory.add(content, **_present(item))
            except Exception as exc:
                self._failed(1, f"{type(exc).__name__}: {exc}")
            else:
                self._counts["written"] += 1

    async def _write_async(self, items: list[dict[str, Any]], redactor: Redactor | None) -> None:
        from ..aio import AsyncMemoryStore

        memory: Any = self.memory
        try:
            if isinstance(memory, AsyncMemoryStore):
                bad: list[str] = []
                written = await memory.add_many(
                    items, on_invalid=lambda i, exc: bad.append(str(exc)), scrubbed_by=redactor
                )
                self._counts["written"] += len(written)
                if bad:
                    self._failed(len(bad), bad[-1])
                return
            if inspect.iscoroutinefunction(getattr(memory, "add_many", None)):
                await memory.add_many(items)
                self._counts["written"] += len(items)
                return
        except Exception as exc:  # a transcript failure must not crash the host; it is counted
            self._failed(len(items), f"{type(exc).__name__}: {exc}")
            return
        for item in items:  # an async memory with only add: one call per turn
            content = item.pop("content")
            item.pop("redactions", None)
            try:
                await memory.add(content, **_present(item))
            except Exception as exc:
                self._failed(1, f"{type(exc).__name__}: {exc}")
            else:
                self._counts["written"] += 1

    def _failed(self, count: int, message: str) -> None:
        self._counts["failed"] += count
        self.last_error = message
        logger.warning("transcript %s: %d turn(s) not written: %s", self.session, count, message)


def _present(fields: Mapping[str, Any]) -> dict[str, Any]:
    """The fields that carry a value (a plain Memory's ``add`` may not accept None for all)."""
    return {k: v for k, v in fields.items() if v is not None}
