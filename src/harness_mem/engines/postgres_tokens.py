"""The keyword rows of an import's batches (``tsvector`` literals), made in worker processes.

Cutting and stemming a batch's texts into tokens is the largest share of what an import's own
process spends writing to PostgreSQL, and the server waits meanwhile. Inside an import
(:meth:`PostgresStorage.bulk <harness_mem.engines.postgres.PostgresStorage.bulk>`), a large batch's
texts go to a worker process as soon as the batch is known, before it is embedded, so the tokens are
made beside the embedding. The worker sees the rows as they are stored (redacted already: it gets
nothing else), and guesses each one's keyword-index text from the batch alone; the write then makes
each text itself (the turn before a session's first turn is read from the store, inside its
transaction) and takes the worker's literal only for a text the worker made the same, making the
rest here. The rows written are exactly those made without workers.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from ..rows import Row
from ..storage import index_texts_of
from ..workers import exit_with_parent
from .postgres_lexemes import tsvector_literal

__all__ = ["PARALLEL_TOKEN_ROWS", "TokenWorkers"]

# A batch at least this large has its tokens made in a worker; a smaller one costs less here than
# sending it there and back.
PARALLEL_TOKEN_ROWS = 1000

Literal = tuple[str, int]  # a tsvector literal and how many tokens it holds


def _literals(texts: list[str]) -> list[Literal]:
    """Each text's tsvector literal (run in a worker)."""
    return [tsvector_literal(text) for text in texts]


class TokenWorkers:
    """One worker process making the tsvector literals of an import's large batches, started with
    its first one and ended with the import."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._ahead: tuple[Sequence[Row], list[str], Future[list[Literal]]] | None = None

    def start(self, rows: Sequence[Row]) -> None:
        """Have the worker make the literals of ``rows``' texts as the batch alone gives them."""
        if len(rows) < PARALLEL_TOKEN_ROWS or (self._ahead is not None and self._ahead[0] is rows):
            return
        if self._pool is None:
            # spawn, not fork: this process holds a connection and maybe threads, which a fork copies.
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                             initializer=exit_with_parent)
        # The later half: this process makes the rest once it has embedded the batch.
        guessed = index_texts_of(rows, None)[len(rows) // 2:]
        self._ahead = (rows, guessed, self._pool.submit(_literals, guessed))

    def literals(self, rows: Sequence[Row], texts: Sequence[str]) -> list[Literal] | None:
        """The literals of ``texts`` (the keyword-index texts of ``rows``, or of those of them
        written) where :meth:`start` was given ``rows``: the worker's for each text it made the
        same, the others made here. None when the worker was not given them."""
        ahead, self._ahead = self._ahead, None
        if ahead is None or ahead[0] is not rows:
            return None

        made = dict(zip(ahead[1], ahead[2].result(), strict=True))
        return [made[text] if text in made else tsvector_literal(text) for text in texts]

    def close(self) -> None:
        self._ahead = None
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
