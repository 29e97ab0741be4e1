"""Import and export entries as JSON Lines, one entry an object a line.

An import keeps every good line and reports every bad one with its line number and the reason, so a
10,000-line file with three broken lines stores 9,997 entries and says exactly which three to fix.
Ids make it idempotent: a line whose id is already stored is skipped (or replaced, if asked).

A line is ``{"id"?, "text"|"content", "kind"?, "role"?, "session"?, "tags"?, "timestamp"?|"created_at"?,
"expires_at"?, "ttl_days"?, "updated_at"?, "source"?, "metadata"?, "namespace"?}``; any other key is kept in the
entry's metadata, so nothing a source file says is lost. A line nesting lists and objects more than
:data:`~harness_mem.models.MAX_NESTING` (64) levels deep is a bad line, like any other; so is one
holding an integer longer than Python reads from text (4,300 digits), and a line longer than
:data:`MAX_LINE_BYTES` (8 MiB), which a file is read in blocks to find: only its first bytes are
ever held, never the whole line. A reason is one line of at most :data:`MAX_REASON_CHARS` characters.

Reading, checking and redacting a line costs about as much as writing it, so a large import hands
them to a worker process and writes what it sends back, in order, a transaction per batch.
"""

from __future__ import annotations

import collections
import itertools
import json
import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from .errors import BlockedError, InvalidInputError, StorageError
from .identities import SealedIdentity, Sealer
from .models import MAX_NESTING, dumps
from .redaction import Redactor
from .rows import BULK_BATCH_SIZE, MAX_BATCH_CHARS, Row, prepare_row
from .workers import PARALLEL_MIN_LINES, exit_with_parent

if TYPE_CHECKING:  # not at run time: the import worker process loads this module and needs no store
    from .store import MemoryStore, OnConflict

# An entry's content is at most a million characters; as JSON, escaped, that is at most about 6 MB.
MAX_LINE_BYTES = 8 << 20
_READ_BYTES = 1 << 20  # a file is read this much at a time
# A line is skipped past its limit to reach the next one, but not for ever: /dev/zero has no end.
MAX_SKIPPED_BYTES = 1 << 30

KNOWN_KEYS = frozenset(
    {"id", "text", "content", "kind", "role", "session", "tags", "timestamp", "created_at", "expires_at",
     "ttl_days", "updated_at", "source", "metadata", "namespace", "redactions"}
)


@dataclass(frozen=True)
class LineError:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass
class ImportReport:
    lines: int = 0
    added: int = 0
    skipped: int = 0  # already stored (same id) and left as they were
    errors: list[LineError] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


def parse_line(raw: bytes | str) -> dict[str, Any] | None:
    """One line as an entry item; None for a blank line; raises InvalidInputError with the reason."""
    if len(raw) > MAX_LINE_BYTES:  # (a str has at least as many bytes as characters)
        raise InvalidInputError(f"the line is longer than {MAX_LINE_BYTES:,} bytes — split its text into several entries")
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInputError(f"not valid UTF-8 (byte {exc.start})") from None
    text = raw.strip().lstrip("\ufeff")
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(f"not valid JSON ({exc.msg} at column {exc.colno})") from None
    except RecursionError:  # nested deeper than the parser's stack: far past MAX_NESTING
        raise InvalidInputError(f"the line is nested more than {MAX_NESTING} levels deep — flatten it") from None
    except ValueError:
        # The parser's only other ValueError: an integer longer than Python converts from text
        # (sys.get_int_max_str_digits(), 4,300 digits by default). Raised from inside the scanner, it
        # is one bad line, not the end of the import.
        raise InvalidInputError(
            f"a number has more than {sys.get_int_max_str_digits():,} digits — write it as a string"
        ) from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"expected a JSON object, got {type(data).__name__}")
    if "content" not in data:
        if "text" not in data:
            raise InvalidInputError('no "text" or "content" field')
        data["content"] = data.pop("text")
    else:
        data.pop("text", None)
    if "timestamp" in data:
        timestamp = data.pop("timestamp")
        data.setdefault("created_at", timestamp)
    data.pop("content_hash", None)  # derived: recomputed from the content, as in an export
    for name in ("superseded_by", "superseded_at", "updated_at", "ttl_days"):  # null in an export: not given
        if data.get(name) is None:
            data.pop(name, None)
    if data.keys() <= KNOWN_KEYS:  # the common case: nothing to move into the metadata
        return data
    extra = {k: data.pop(k) for k in data.keys() - KNOWN_KEYS}
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise InvalidInputError("metadata must be a JSON object")
    data["metadata"] = {**extra, **metadata}
    return data


def read_lines(
    stream: IO[bytes] | IO[str], *, limit: int = MAX_LINE_BYTES, progress: Callable[[int], None] | None = None,
    skip_limit: int = MAX_SKIPPED_BYTES,
) -> Iterator[bytes | str]:
    """The lines of ``stream`` without their newlines, read a block at a time; ``progress(n)`` is
    called as each block of ``n`` bytes (or characters) is read.

    A line longer than ``limit`` comes out cut to ``limit + 1`` (which :func:`parse_line` refuses):
    the rest is skipped as it is read, so a 2 GB line costs no more memory than a short one; a
    line still without its newline after ``skip_limit`` bytes raises :class:`InvalidInputError`
    (the lines before it have been given).
    """
    read: Callable[[int], Any] = getattr(stream, "read1", stream.read)  # read1: what has arrived, so a pipe is not held up
    rest: list[Any] = []  # the start of a line the blocks so far have not finished (at most limit + 1)
    size = 0  # how long that line is so far, skipped part included
    while block := read(_READ_BYTES):
        if progress is not None:
            progress(len(block))
        *complete, tail = block.split(b"\n" if isinstance(block, bytes) else "\n")
        for part in complete:
            if rest:
                part = block[:0].join([*rest, part[: max(limit + 1 - size, 0)]]) if size <= limit else block[:0].join(rest)
                rest, size = [], 0
            yield part[: limit + 1]
        if complete:
            size = 0
        if tail:
            if size <= limit:
                rest.append(tail[: limit + 1 - size])
            size += len(tail)
            if size > skip_limit:
                raise InvalidInputError(
                    f"a line runs past {skip_limit:,} bytes without a newline — the input is read no further"
                )
    if rest:
        yield rest[0][:0].join(rest)


def import_jsonl(
    store: MemoryStore,
    lines: Iterable[bytes | str] | IO[bytes] | IO[str],
    *,
    on_conflict: OnConflict = "ignore",
    batch_size: int = BULK_BATCH_SIZE,
    progress: Callable[[int], None] | None = None,
    workers: int | None = None,
    written: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import JSON Lines into ``store``, a transaction per ``batch_size`` lines; ``progress(n)`` is
    called as lines are read, ``written(size, added)`` as each batch is committed, with the size of
    its lines in the input (newlines included) and the entries added so far: a progress bar over
    the input's size that follows ``written`` reaches its end when the last entry is stored, not when
    the last line is read (embedding, the slow part, comes after reading).
    ``lines`` may be a file, read with :func:`read_lines`.

    Parsing, checking and redacting cost about as much as writing, so a large import does them in
    ``workers`` other processes while this one writes (the engine may start one of its own too: see
    :meth:`Storage.bulk <harness_mem.storage.Storage.bulk>`). ``None`` chooses: one worker when the
    input reaches :data:`PARALLEL_MIN_LINES` lines and the machine has a second core, else none.
    """
    from .store import check_on_conflict  # here: the worker process loads this module without the store

    check_on_conflict(on_conflict)
    if batch_size < 1:
        raise InvalidInputError(f"batch_size must be at least 1, not {batch_size!r}")
    report = ImportReport()
    if hasattr(lines, "read"):
        lines = read_lines(lines)  # type: ignore[arg-type]
    sizes: collections.deque[int] = collections.deque()  # each chunk's input size, until it is written
    chunks = _sized(_chunks(lines, batch_size, report, progress), sizes)
    if workers is None:
        chunks, large = _peek(chunks, PARALLEL_MIN_LINES)
        workers = 1 if large and (os.cpu_count() or 1) > 1 else 0
    if workers:
        prepared = _prepared_by_workers(chunks, store.namespace, store.redactor, workers, store.scope.sealer)
    else:
        prepared = _prepared_here(chunks, store.namespace, store.redactor, store.scope.sealer)
    try:
        with store.storage.bulk(workers=workers):
            for rows, errors, sealed in prepared:
                added = store.add_prepared(rows, on_conflict=on_conflict, identities=sealed)
                report.added += added
                report.skipped += len(rows) - added
                report.errors.extend(LineError(number, reason) for number, reason in errors)
                size = sizes.popleft()  # chunks are prepared and written in the order they were read
                if written is not None:
                    written(size, report.added)
    finally:
        # Shut the workers down here, on this thread, when a write fails: left to the garbage
        # collector, the generator's cleanup may run on the pool's own thread, which cannot join itself.
        close = getattr(prepared, "close", None)
        if close is not None:
            close()
    report.errors.sort(key=lambda e: e.line)
    return report


def prepare_chunk(
    first: int, lines: list[bytes | str], namespace: str, redactor: Redactor | None, sealer: Sealer | None = None
) -> tuple[list[Row], list[tuple[int, str]], list[SealedIdentity]]:
    """The rows of ``lines`` (numbered from ``first``), each bad line's (number, reason), and the
    identities ``sealer`` sealed as it went (see :mod:`harness_mem.identities`)."""
    rows: list[Row] = []
    errors: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, start=first):
        try:
            item = parse_line(raw)
            if item is not None:
                rows.append(prepare_row(item, namespace=namespace, redactor=redactor, sealer=sealer))
        except (InvalidInputError, BlockedError) as exc:
            errors.append((number, one_line(str(exc))))
    return rows, errors, sealer.take() if sealer is not None else []


# A reason may quote what the line held (a 4,000-digit time, a kind with a line break in it): it is
# printed as one line, short enough to read.
MAX_REASON_CHARS = 300


def one_line(reason: str) -> str:
    """``reason`` on one line, cut to :data:`MAX_REASON_CHARS` characters."""
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[: MAX_REASON_CHARS - 1] + "…"
    return " ".join(reason.splitlines())



_Chunk = tuple[int, list[bytes | str]]  # (number of its first line, its lines)


def _chunks(
    lines: Iterable[bytes | str], size: int, report: ImportReport, progress: Callable[[int], None] | None
) -> Iterator[_Chunk]:
    """Lines in chunks of ``size`` (or fewer, if their text passes MAX_BATCH_CHARS), counted in ``report``."""
    chunk: list[bytes | str] = []
    chars = 0
    first = 1
    for raw in lines:
        chunk.append(raw)
        chars += len(raw)
        if len(chunk) >= size or chars >= MAX_BATCH_CHARS:
            report.lines += len(chunk)
            if progress is not None:
                progress(len(chunk))
            yield first, chunk
            first += len(chunk)
            chunk, chars = [], 0
    if chunk:
        report.lines += len(chunk)
        if progress is not None:
            progress(len(chunk))
        yield first, chunk


def _sized(chunks: Iterator[_Chunk], sizes: collections.deque[int]) -> Iterator[_Chunk]:
    """``chunks``, each one's input size appended to ``sizes`` as it is read."""
    for first, chunk in chunks:
        sizes.append(sum(len(line) + 1 for line in chunk))
        yield first, chunk


def _peek(chunks: Iterator[_Chunk], lines: int) -> tuple[Iterator[_Chunk], bool]:
    """Read chunks until they hold ``lines`` lines; (all the chunks again, whether there were that many)."""
    seen: list[_Chunk] = []
    count = 0
    for chunk in chunks:
        seen.append(chunk)
        count += len(chunk[1])
        if count >= lines:
            return itertools.chain(seen, chunks), True
    return iter(seen), False


def _prepared_here(chunks: Iterator[_Chunk], namespace: str, redactor: Redactor | None,
                   sealer: Sealer | None) -> Iterator[_Prepared]:
    return (prepare_chunk(first, chunk, namespace, redactor, sealer) for first, chunk in chunks)


def _prepared_by_workers(
    chunks: Iterator[_Chunk], namespace: str, redactor: Redactor | None, workers: int, sealer: Sealer | None
) -> Iterator[_Prepared]:
    """``prepare_chunk`` of each chunk, in order, mostly done by ``workers`` processes.

    The caller writes each result as it comes. Starting a worker takes about half a second: this
    process prepares the first chunk itself meanwhile (and writes it), and more while the workers
    have not answered yet rather than wait; after that, a chunk takes a worker about as long to
    prepare as it takes this process to write.
    """
    try:
        pickle.dumps(redactor)
    except Exception:  # a custom detector that cannot travel (a lambda, say): prepare here instead
        yield from _prepared_here(chunks, namespace, redactor, sealer)
        return
    # spawn, not fork: the caller may hold threads and an open connection, which a fork would copy.
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_start_worker, initargs=(namespace, redactor, sealer))
    pending: deque[Future[_Shipped] | _Prepared] = deque()  # in input order
    answered = False  # has a worker sent a result yet?
    most = 4 * (workers + 1)  # chunks held at once

    def busy() -> int:
        return sum(isinstance(slot, Future) for slot in pending)

    try:
        opening = next(chunks, None)
        for first, chunk in itertools.islice(chunks, workers + 1):  # the workers start on these
            pending.append(pool.submit(_prepare_in_worker, first, chunk))
        if opening is not None:
            yield prepare_chunk(*opening, namespace, redactor, sealer)
        for first, chunk in chunks:
            # No room for another chunk in the workers' queue: write until there is, except while
            # the workers are starting up.
            while busy() > workers and (answered or _ready(pending[0]) or len(pending) >= most):
                answered = answered or isinstance(pending[0], Future)
                yield _received(pending.popleft())
            if busy() <= workers:
                pending.append(pool.submit(_prepare_in_worker, first, chunk))
            else:  # the workers are starting up: prepare this chunk here rather than wait for them
                pending.append(prepare_chunk(first, chunk, namespace, redactor, sealer))
            while pending and not isinstance(pending[0], Future):  # prepared here: write it now
                yield _received(pending.popleft())
        while pending:
            yield _received(pending.popleft())
    except BrokenProcessPool:
        raise StorageError(
            "the import's worker process stopped unexpectedly; what was written is kept"
            " — run the import again (it skips stored ids), or pass --workers 0"
        ) from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


_Prepared = tuple[list[Row], list[tuple[int, str]], list[SealedIdentity]]
# What a worker sends back: rows as plain tuples, which pickle in half the time of named ones.
_Shipped = tuple[list[tuple[Any, ...]], list[tuple[int, str]], list[tuple[str, str, bytes]]]


def _ready(slot: Future[_Shipped] | _Prepared) -> bool:
    return not isinstance(slot, Future) or slot.done()


def _received(slot: Future[_Shipped] | _Prepared) -> _Prepared:
    if not isinstance(slot, Future):
        return slot
    rows, errors, sealed = slot.result()
    return list(map(Row._make, rows)), errors, list(map(SealedIdentity._make, sealed))


_worker_setup: tuple[str, Redactor | None, Sealer | None] = ("default", None, None)


def _start_worker(namespace: str, redactor: Redactor | None, sealer: Sealer | None) -> None:
    global _worker_setup
    _worker_setup = (namespace, redactor, sealer)
    exit_with_parent()


def _prepare_in_worker(first: int, lines: list[bytes | str]) -> _Shipped:
    rows, errors, sealed = prepare_chunk(first, lines, *_worker_setup)
    return list(map(tuple, rows)), errors, [(s.stored, s.key_id, s.sealed) for s in sealed]


def export_jsonl(store: MemoryStore, out: IO[str]) -> int:
    """Write every live entry of the store's namespace as JSON Lines; returns how many."""
    count = 0
    for record in store.export():
        out.write(dumps(record) + "\n")
        count += 1
    return count
