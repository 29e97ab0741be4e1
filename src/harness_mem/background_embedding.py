"""Vectors for what a process without the model wrote, made in the background.

A hook must answer in milliseconds, so the hook writer (:mod:`harness_mem.hook_writer`) stores
turns without embedding them. :class:`BackgroundEmbedder` is the thread beside it that gives them
their vectors: told after each write (:meth:`~BackgroundEmbedder.notify`), it waits a moment for the
turns that follow (a tool call brings several), then embeds every entry still without a vector, a
batch per transaction, with its own connection and the store's own model, loaded on first need. A
turn is found by meaning seconds after it was said, with no ``reindex``.

A keyword-only file, or one whose vectors are another model's (that is ``reindex``'s work), gets
nothing. A failure (the model missing, the file gone) is said once on stderr and stops the thread:
the turns stay stored, and ``harness-mem reindex`` embeds them later.
"""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import MemoryStore

__all__ = ["BackgroundEmbedder", "SETTLE_SECONDS"]

#: How long a write's turn waits for the next ones before the batch is embedded.
SETTLE_SECONDS = 0.5
#: Entries per transaction: short enough that a hook's write beside it waits little.
BATCH_SIZE = 32


class BackgroundEmbedder:
    """A daemon thread that embeds the store's entries without vectors, after each :meth:`notify`."""

    def __init__(self, db: str, namespace: str, *, settle: float = SETTLE_SECONDS) -> None:
        self.db = db
        self.namespace = namespace
        self.settle = settle
        self.embedded = 0  # entries read and embedded so far (for tests and the writer's log)
        self._wanted = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="harness-mem-embedder", daemon=True)
        self._thread.start()

    def notify(self) -> None:
        """Something was written: embed it soon."""
        self._idle.clear()
        self._wanted.set()

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until everything notified so far has been embedded (or the thread stopped)."""
        return self._idle.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Finish the batch at hand and stop."""
        self._stopping.set()
        self._wanted.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        store: MemoryStore | None = None
        try:
            while not self._stopping.is_set():
                self._wanted.wait()
                if self._stopping.wait(self.settle):
                    break
                self._wanted.clear()
                if store is None:
                    store = self._open()
                    if store is None:
                        return
                while not self._stopping.is_set():
                    done = store.embed_missing(BATCH_SIZE)
                    self.embedded += done
                    if not done:
                        break
                if not self._wanted.is_set():
                    self._idle.set()
        except Exception as exc:  # a thread must not die silently: the turns wait for `reindex`
            print(f"harness-mem: the background embedder stopped ({type(exc).__name__}: {exc});"
                  " `harness-mem reindex` embeds what is left", file=sys.stderr)
        finally:
            self._idle.set()
            if store is not None:
                store.close()

    def _open(self) -> MemoryStore | None:
        """The store with its own model; None when it makes no vectors (keyword-only, no model here)."""
        import warnings

        from .store import MemoryStore

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the model missing here is no news to a background thread
            store = MemoryStore(self.db, namespace=self.namespace, embedder="auto")
        if store.embedder is None:
            store.close()
            return None
        return store
