"""Transcript capture that survives a crash: a run's turns are written while it runs, by a thread of its own.

A :class:`TurnWriter` wraps harness_mem's :class:`~harness_mem.experience.TranscriptRecorder`
(which decides what a turn becomes: redaction, truncation, duplicate and blank drops, tags) and
runs its writes on a background thread:

- **The hook side** (``note_user``, ``note_assistant``, ``note_tool``, ``note``) only appends a
  tuple to the recorder's queue -- no formatting, no I/O, no lock -- so what the agent loop pays
  per turn does not depend on the turn's size or on the disk (``bench/bench_loop.py --capture``
  measures it).
- **The writer thread** wakes every ``interval`` seconds (sooner once ``batch`` turns are waiting)
  and writes what is queued in one transaction. It writes through **a connection of its own** to
  the same file: a SQLite connection must not run two threads' transactions at once, and the
  loop's thread keeps using the store's connection (recall, episodes, memory tools) meanwhile.
  Embedding new turns, when the store has an embedder, happens there too, off the event loop.
- **A crash loses little**: a process killed with SIGKILL loses only the turns of the last
  ``interval`` (plus the batch being written, which SQLite rolls back whole). The file's WAL mode
  with ``synchronous=NORMAL`` makes each committed batch survive a process crash.
- :meth:`stop` writes whatever is still queued and waits for the thread (a few milliseconds: at
  most one interval's turns); a writer left running -- the run raised and nobody closed the wiring
  -- is stopped the same way when the interpreter exits.

A store that lives only in memory (``":memory:"``) cannot be opened twice and would not survive a
crash anyway: its turns are queued and written on :meth:`stop`, on the calling thread.

The writer's connection also tells which writes came from *elsewhere*: SQLite's ``data_version``
on a connection changes only when another connection commits. :attr:`TurnWriter.others_version`
is that value, sampled on every wake-up, so a recall cache can ignore the writer's own turn
writes (which a run never recalls) and still see every other write within one interval.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any, cast

from harness_mem import Memory, MemoryStore
from harness_mem.experience import TranscriptRecorder, TranscriptStats

__all__ = ["DEFAULT_BATCH", "DEFAULT_INTERVAL", "TurnWriter"]

logger = logging.getLogger(__name__)

DEFAULT_INTERVAL = 0.5  # seconds a captured turn waits at most before its batch is written
DEFAULT_BATCH = 64  # this many waiting turns are written at once, without waiting for the interval
# How long stop() waits for the thread's last batch: longer than SQLite's busy timeout (30 s), so a
# writer waiting for another process's lock is not abandoned while it can still succeed.
STOP_TIMEOUT = 45.0

_live: weakref.WeakSet[TurnWriter] = weakref.WeakSet()


def _stop_all() -> None:
    for writer in list(_live):
        writer.stop()


atexit.register(_stop_all)


class TurnWriter:
    """One session's turns into ``store``, written in the background as they happen.

    :param store: the memory; the writer opens its own connection to the same file (same
        namespace, embedder and redactor).
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
        self.interval = interval
        self.batch = batch
        self.threaded = str(store.path) != ":memory:"
        self._own: MemoryStore | None = None
        target = store
        if self.threaded:
            self._own = MemoryStore(
                store.path, namespace=store.namespace, embedder=store.embedder, redactor=store.redactor
            )
            target = self._own
        # cast: MemoryStore's keyword-only add() is a Memory in practice, not to a type checker.
        self.transcript = TranscriptRecorder(cast(Memory, target), session=session, tags=tags)
        # Sampled now, before any turn is written, so the first token a cache sees is already stable.
        self.others_version: int | None = self._own.data_version()[1] if self._own is not None else None
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        if self.threaded:
            self._thread = threading.Thread(
                target=self._run, name=f"harness-loop-turns-{session}", daemon=True
            )
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
        """Turns captured and not yet written."""
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
            except Exception as exc:  # keep writing later batches; TranscriptRecorder counts its own failures
                logger.warning("transcript writer (session %s): %s: %s", self.transcript.session,
                               type(exc).__name__, exc)
            if stopping:
                break
        try:
            self.transcript.close()  # turns enqueued since the last flush, and no more after
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

    def __repr__(self) -> str:
        mode = "thread" if self.threaded else "inline"
        return f"<TurnWriter session={self.transcript.session!r} {mode} pending={self.pending}>"
