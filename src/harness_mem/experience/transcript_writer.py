"""Transcript capture that survives kill -9: a session's turns written while it runs, by a thread of its own.

A :class:`TranscriptWriter` is a :class:`~harness_mem.experience.TranscriptRecorder` (which decides
what a turn becomes: redaction, truncation, blank and duplicate drops, tags) driven by a background
thread instead of an event loop, for a host that must not lose its transcript when it is killed.

**What a SIGKILL can cost.** The thread writes what is queued every ``interval`` seconds (sooner
once ``batch`` turns wait), each batch in one transaction. A committed batch survives a crash of
the process (WAL mode with ``synchronous=NORMAL``), and a batch being written when the process
dies is rolled back whole, never left half-written. So a process killed at any moment loses only
the turns noted in the last interval; the file stays intact.

**What the host pays.** ``note_user``, ``note_assistant``, ``note_tool`` and ``note`` append a
tuple to the recorder's queue and return: no formatting, no I/O, no lock, whatever the turn's size
or the disk's speed (``bench/bench_loop.py --capture`` measures it). Redacting, cutting and, with
an embedder, embedding happen on the writer thread.

**Its own connection.** The thread writes through a :class:`~harness_mem.store.MemoryStore` of its
own on the same file, with the same namespace, embedder and redactor: one SQLite connection must
not run two threads' transactions at once, and the host keeps using its store meanwhile. That
connection also tells which writes came from elsewhere: SQLite's ``data_version`` changes only when
*another* connection commits, so :attr:`TranscriptWriter.others_version`, sampled on every wake-up,
lets a recall cache ignore the writer's own turns and still see every other write within one
interval.

**Stopping.** :meth:`TranscriptWriter.stop` writes what is still queued (at most one interval's
turns) and joins the thread; ``with TranscriptWriter(...) as writer:`` stops on leaving the block.
A writer nobody stopped is stopped when the interpreter exits normally. A store that lives only in
memory (``":memory:"``) cannot be opened twice and would not survive a crash anyway: its turns wait
in the queue and are written by :meth:`~TranscriptWriter.stop`, on the calling thread.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Iterable
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from ..errors import InvalidInputError
from ..protocols import Memory
from .transcript import TranscriptRecorder, TranscriptStats

if TYPE_CHECKING:
    from ..store import MemoryStore

__all__ = ["DEFAULT_BATCH", "DEFAULT_INTERVAL", "STOP_TIMEOUT", "THREAD_PREFIX", "TranscriptWriter"]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5  # seconds a noted turn waits at most before its batch is written
DEFAULT_BATCH = 64  # this many waiting turns are written at once, without waiting for the interval
# How long stop() waits for the thread's last batch: longer than SQLite's busy timeout (30 s), so a
# writer waiting for another process's lock is not abandoned while it can still succeed.
STOP_TIMEOUT = 45.0
THREAD_PREFIX = "harness-mem-transcript-"

# Writers still running, stopped at interpreter exit (weak: a writer stopped and dropped goes away).
_live: weakref.WeakSet[TranscriptWriter] = weakref.WeakSet()


def _stop_all() -> None:
    for writer in list(_live):
        writer.stop()


atexit.register(_stop_all)


class TranscriptWriter:
    """One session's turns into ``store``, written in the background as they happen.

    :param store: the memory; the writer opens its own connection to the same file (same
        namespace, embedder and redactor). A ``":memory:"`` store is written on :meth:`stop`.
    :param session: the session the turns are stored under.
    :param tags: extra tags for every turn.
    :param interval: seconds a turn waits at most before it is written.
    :param batch: this many waiting turns wake the writer at once.
    """

    def __init__(
        self,
        store: MemoryStore,
        *,
        session: str,
        tags: Iterable[str] = (),
        interval: float = DEFAULT_INTERVAL,
        batch: int = DEFAULT_BATCH,
    ) -> None:
        if isinstance(interval, bool) or not isinstance(interval, int | float) or not interval > 0:
            raise InvalidInputError(f"interval must be a positive number of seconds, not {interval!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidInputError(f"batch must be a whole number of turns, at least 1, not {batch!r}")
        self.interval = interval
        self.batch = batch
        self.threaded = str(store.path) != ":memory:"
        self._own: MemoryStore | None = None
        target = store
        if self.threaded:
            self._own = store.another()
            target = self._own
        try:
            # cast: MemoryStore's keyword-only add() is a Memory in practice, not to a type checker.
            self.transcript = TranscriptRecorder(cast(Memory, target), session=session, tags=tags)
        except BaseException:
            if self._own is not None:
                self._own.close()
            raise
        # Sampled now, before any turn is written, so the first token a cache sees is already stable.
        self.others_version: int | None = self._own.data_version()[1] if self._own is not None else None
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        if self.threaded:
            self._thread = threading.Thread(target=self._run, name=f"{THREAD_PREFIX}{session}", daemon=True)
            self._thread.start()
            _live.add(self)

    # ---- the hook side: enqueue and return -----------------------------------------------------

    def note_user(self, text: str) -> None:
        self.transcript.note_user(text)
        self._nudge()

    def note_assistant(self, text: str | None, *, reasoning: str | None = None, success: bool | None = None) -> None:
        self.transcript.note_assistant(text, reasoning=reasoning, success=success)
        self._nudge()

    def note_tool(self, name: str, result: Any) -> None:
        self.transcript.note_tool(name, result)
        self._nudge()

    def note(self, role: str, text: str, *, success: bool | None = None) -> None:
        self.transcript.note(role, text, success=success)
        self._nudge()

    def _nudge(self) -> None:
        if self.transcript.pending >= self.batch:
            self._wake.set()

    # ---- state ---------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        """Turns noted and not yet written."""
        return self.transcript.pending

    @property
    def stats(self) -> TranscriptStats:
        return self.transcript.stats

    @property
    def last_error(self) -> str | None:
        return self.transcript.last_error

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ---- the writer side -------------------------------------------------------------------------

    def _run(self) -> None:
        assert self._own is not None
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            stopping = self._stopping
            try:
                if self.transcript.pending:
                    self.transcript.flush()
                self.others_version = self._own.data_version()[1]
            except Exception as exc:  # keep writing later batches; the recorder counts its own failures
                logger.warning("transcript writer (session %s): %s: %s", self.transcript.session,
                               type(exc).__name__, exc)
            if stopping:
                break
        try:
            self.transcript.close()  # turns noted since the last flush, and no more after
        finally:
            self._own.close()

    def stop(self) -> TranscriptStats:
        """Write every turn still queued, stop the thread, and return what was written in all.

        Turns noted afterwards are counted as late and not written. Safe to call twice.
        """
        thread, self._thread = self._thread, None
        if thread is None:
            if not self.threaded:
                self.transcript.close()  # an in-memory store: written here, on the caller's thread
            return self.transcript.stats
        self._stopping = True
        self._wake.set()
        thread.join(STOP_TIMEOUT)
        _live.discard(self)
        if thread.is_alive():
            logger.warning(
                "transcript writer (session %s) still busy after %.0f s; %d turn(s) may be unwritten",
                self.transcript.session, STOP_TIMEOUT, self.transcript.pending,
            )
        return self.transcript.stats

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        mode = "thread" if self.threaded else "inline"
        return f"<TranscriptWriter session={self.transcript.session!r} {mode} pending={self.pending}>"
