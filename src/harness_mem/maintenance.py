"""Maintenance of a store: rebuilding derived rows, counting, diagnosing, collecting garbage.

The functions here back :meth:`MemoryStore.reindex`, :meth:`~MemoryStore.stats`,
:meth:`~MemoryStore.diagnose` and :meth:`~MemoryStore.gc` (``harness-mem reindex``, ``stats``,
``doctor``, ``gc``); they run rarely and may read the whole file.

**What deleting leaves behind, and how it goes.** Every connection runs with ``secure_delete``: a
deleted row's bytes are overwritten with zeros, in its page and in pages it frees. Four things
still hold deleted text: the keyword index, which is contentless and so can only mark a deleted
entry's tokens dead (FTS5's own secure-delete needs the tokens, which a contentless index does not
have) until its segments are merged; the write-ahead log, which holds recent pages until a
checkpoint; free pages, which keep the file's size; and old copies of rows in the unused middle of
live pages. SQLite leaves those when it rebuilds a B-tree page (a row that grew and moved, a page
split or merged): it writes the cells afresh from the end of the page and does not clear the bytes
below them, so a row that moved while it was alive keeps a readable copy there after it is deleted,
which ``secure_delete`` never reaches. Only pages written afresh lose them.

:func:`gc` purges expired and forgotten entries, merges the keyword index (dead tokens are
dropped), and then, when an entry was purged, rewrites the tables that hold entries' text (the
entries, the episodes and the identities) so no copy of one survives there; then it frees
pages (incrementally in a file made with ``auto_vacuum = INCREMENTAL``, which every new file is; a
full ``VACUUM`` only when asked, which also converts an older file). It ends by checkpointing and
truncating the WAL. A namespace's ``purge`` does the same for its own forgotten and expired
entries. Expired entries are also purged when a store is opened, at most once a day
(:func:`expire_if_due`), without the rewrite.

**A purge is complete or still owed.** The deletes commit before the rewrite, which needs free
disk space as large as the tables it rewrites and can fail (a full disk) or be cut short (a crash).
So each batch of deletes records, in the same transaction, what it deleted (``PURGE_PENDING_KEY``
in ``settings``); only the rewrite takes it off. Every ``gc`` and ``purge`` finishes what is on
record: the daily purge on open, a purge whose rewrite failed, its own. ``gc`` reports them as
purged.

**Writers keep writing.** Every step is a short write transaction with a pause after it (a batch
of deletes, a bounded merge of the keyword index, a batch of rows copied into a table's fresh copy
or deleted from its old one, free pages handed back 64 at a time until the step has held the lock
its share, a WAL checkpoint without the lock), so a writer in another process waits for one step, whatever the file's size. The rewrite
copies each table while triggers keep the copy in step with writers, switches the names in one
short transaction, and deletes the old table's rows (``secure_delete`` zeroes each page they free)
before dropping it (:mod:`harness_mem.engines.sqlite_rewrite`). Only ``gc --vacuum`` runs SQLite's
``VACUUM``, which holds the write lock for the whole file (about 6 s per GB), and only it writes the
keyword index's own pages afresh: the merge takes a forgotten entry's tokens out of its blocks (the
old blocks zeroed as they are deleted), but an old copy a page rebuild left among the index's pages
stays until then (FTS5's tables cannot be swapped under the connections using them).

An entry removed with ``delete`` is zeroed where it lies; its old copies, if SQLite left any, go
with the next rewrite (``gc`` after a purge, or ``gc --vacuum``). The orchestrator's run events
belong to harness_loop, which prunes them itself (``harness-loop runs gc``).

What is said above is SQLite's case; the steps are the storage's own (:class:`~harness_mem.storage.Storage`),
so another engine gives its own space back its own way. PostgreSQL's pruning leaves a deleted row's
bytes in its page too, so its rewrite also writes the tables into new files beside writers
(:mod:`harness_mem.engines.postgres_rewrite`); what it cannot reach is the server's write-ahead log,
which it recycles on its own schedule (``gc`` reports it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from . import pseudonyms
from .counts import EntryCounts, entry_counts
from .errors import InvalidInputError, StorageError
from .models import FileSizes, SessionSize, StoreStats, counted, format_time, from_ms, now_ms
from .progress import Progress
from .providers.embeddings import default_embedder_available
from .providers.reference import INSTALL_HINT
from .recall import raise_if_missing_vectors
from .steps import in_steps
from .storage import Storage
from .sync import outbox


def reindex(storage: Storage, *, progress: Callable[[int], None] | None = None, batch_size: int = 256,
            keyword_only: bool = False, phase: Callable[[str], None] | None = None) -> dict[str, int]:
    """Rebuild the derived rows from the canonical ones, in every namespace.

    The keyword index is rebuilt a batch of entries per transaction, so a writer beside it waits
    for one batch. Vectors made by another model are dropped; then every entry without a vector is
    embedded, a batch per transaction, so an interrupted reindex resumes where it stopped.
    ``progress(n)`` is called as entries are done, ``phase(name)`` as each phase begins.
    """
    if phase is not None:
        phase("reading the entries, rebuilding the keyword index")
    total, indexed = storage.rebuild_keyword_index()
    report = {"entries": total, "keyword_rows": indexed, "vectors_dropped": 0, "vectors_written": 0}
    if keyword_only:  # the switch to keyword only: no vectors kept, and no model loaded from now on
        storage.use_embedder(None)
        with storage.transaction():
            report["vectors_dropped"] = storage.drop_vectors()
            storage.set_keyword_only(True)
        return report
    if storage.embedder is None:
        return report
    if storage.model_differs():
        report["vectors_dropped"] = storage.drop_vectors()
    storage.vectors_bound()
    if phase is not None:
        phase("embedding and writing vectors")
    while True:
        read, written = storage.embed_missing(batch_size)
        if not read:
            break
        report["vectors_written"] += written
        if progress is not None:
            progress(read)  # every row read is done: written, or gone (a changed one is read again)
    return report


def embed_missing(storage: Storage, batch_size: int = 64) -> int:
    """Embed one batch of the entries still without a vector (written by a process without the
    model); how many were read (0: none is left, or this store makes no vectors). Unlike
    :func:`reindex` it rebuilds nothing and drops nothing: a file whose vectors are another model's
    waits for ``reindex``."""
    if storage.embedder is None or storage.keyword_only or storage.model_differs():
        return 0
    storage.vectors_bound()
    read, _ = storage.embed_missing(batch_size)
    return read


def count_missing_vectors(storage: Storage) -> int:
    """Entries (in every namespace) that ``reindex`` would embed; 0 without an embedder."""
    if storage.embedder is None:
        return 0
    if storage.model_differs():
        return storage.count_all()  # another model's vectors: reindex embeds everything again
    if not storage.vectors_bound(writing=False):  # keyword-only or read-only: nothing bound yet
        return storage.count_all() if storage.keyword_only else storage.missing_vectors()
    return storage.missing_vectors()


def stats(storage: Storage, namespace: str) -> dict[str, Any]:
    """Counts by kind and role, sessions, the largest sessions, the store's size by table and index,
    and the schema version: a :class:`~harness_mem.models.StoreStats` as a JSON-ready dict."""
    now = now_ms()
    every = entry_counts(storage, now)
    mine = every.get(namespace, EntryCounts())
    entries, size = mine.entries, storage.size_bytes()
    report = StoreStats(
        path=storage.location,
        namespace=namespace,
        entries=entries,
        by_kind=dict(sorted(mine.by("kind").items())),
        by_role=_largest_first(mine.by("role")),
        sessions=storage.session_count(namespace, now),
        expired_pending_purge=mine.expired,
        redacted=_largest_first(mine.by("redacted")),
        written_without_redaction=mine.unredacted,
        namespaces=list(every),
        schema_version=storage.schema_version(),
        file_bytes=size,
        bytes_per_entry=round(size / entries, 1) if entries else None,
        largest_sessions=largest_sessions(storage, namespace),
        sizes=FileSizes.check(storage.sizes()),
    )
    return report.model_dump(mode="json")


def _largest_first(counts: dict[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


#: How many sessions ``stats`` lists as the largest.
LARGEST_SESSIONS = 5


def largest_sessions(storage: Storage, namespace: str, limit: int = LARGEST_SESSIONS) -> list[SessionSize]:
    """The namespace's sessions with the most live entries, largest first (ties by session id),
    with the bytes of their content."""
    return [SessionSize(session=session, turns=turns, content_bytes=size)
            for session, turns, size in storage.largest_sessions(namespace, now_ms(), limit)]


def diagnose(storage: Storage, key_check: Callable[[], str] | None = None) -> dict[str, Any]:
    """What ``harness-mem doctor`` reports: each check with ok and a detail line; ``key_check``
    says whether this process has the store's identity key."""
    checks: list[dict[str, Any]] = []

    def check(name: str, probe: Callable[[], str]) -> None:
        try:
            checks.append({"name": name, "ok": True, "detail": probe()})
        except Exception as exc:  # a doctor reports failures; it does not stop at the first
            checks.append({"name": name, "ok": False, "detail": f"{type(exc).__name__}: {exc}"})

    def integrity() -> str:
        problems = storage.integrity_check()
        if problems:
            raise StorageError("; ".join(problems[:5]))
        return "ok"

    for name, probe in storage.engine_checks():
        check(name, probe)
    check("schema", storage.describe_schema)
    check("model", lambda: describe_model(storage))
    check("integrity", integrity)
    check("pseudonyms", lambda: describe_keying(storage))
    check("sync", lambda: describe_sync(storage))
    if key_check is not None:
        check("identity key", key_check)
    return {"path": storage.location, "checks": checks}


def describe_sync(storage: Storage) -> str:
    """Whether the store syncs, and as which device (its log is written in each write's transaction);
    raises when chunks of another device were quarantined: their operations are not here, so this
    store and that device do not hold the same memory."""
    device = outbox.device(storage)
    if device is None:
        return "not syncing (no log kept)"
    last = storage.last_stamp()
    line = f"device {device}, logging every write" + ("" if last is None else f" (latest at {format_time(from_ms(last.wall))})")
    if quarantined := storage.quarantined_chunks():
        first_device, _, reason = quarantined[0]
        raise StorageError(f"{line}; {counted(len(quarantined), 'chunk')} of another device quarantined, not applied"
                           f" (the first, of device {first_device[:12]}: {reason})")
    return line


def describe_keying(storage: Storage) -> str:
    """How the store's pseudonyms are keyed (raises when a rekeying was left unfinished)."""
    keying = pseudonyms.keying(storage)
    if keying.state == "rekeying":
        raise StorageError(keying.describe())
    return keying.describe()


def describe_model(storage: Storage) -> str:
    """The embedding model in use and the vectors' state (raises when they cannot be used)."""
    if storage.keyword_only:
        return "none: a keyword-only store (no model is loaded; `reindex` with --embedder adds vectors)"
    if storage.embedder is None:
        recorded = storage.recorded_model()
        if recorded and not default_embedder_available():
            return (f"not installed here, so recall is by keyword (the file's vectors are {recorded['name']}'s)"
                    f" — {INSTALL_HINT}")
        return "none: keyword recall only" + (f" (vectors by {recorded['name']} stored)" if recorded else "")
    described = storage.check_model()
    raise_if_missing_vectors(storage)
    return f"{described}, every entry embedded"


# ---- expiry and garbage collection -------------------------------------------------------------

#: The ``settings`` key holding when expired entries were last purged (ms since the epoch).
EXPIRY_KEY = "gc.expired_at"
#: Opening a store purges expired entries at most this often.
EXPIRY_EVERY_MS = 86_400_000


#: The ``settings`` key holding what was purged from the tables and not yet from the file's bytes:
#: ``{"expired": n, "forgotten": m}``. It is written in the same transaction as the deletes, so a
#: purge whose rewrite failed (a full disk, a crash) leaves the promise behind, and the next ``gc``
#: or ``purge`` keeps it; only the rewrite that fulfils it takes it away.
PURGE_PENDING_KEY = "gc.purge_pending"
#: Entries deleted per batch (the first's, the least and the most), scaled so a batch takes about
#: ``CHUNK_TARGET_S``: a bulky entry frees many pages, each zeroed and logged. The first is small,
#: as a batch's cost is unknown until one is timed: on PostgreSQL an entry's delete (its vector,
#: counters, the next turn re-indexed) took 18-48 ms, and a first batch of 500 held a writer 4.9 s
#: there (bench/bench_pg_gc.py at load 20).
PURGE_BATCH = (10, 5, 500)


def purge_expired(storage: Storage) -> int:
    """Delete every expired entry (in all namespaces) with its derived rows; returns how many went.

    Their old copies stay in the file's bytes until the next ``gc`` or ``purge`` rewrites it (the
    pending purge is recorded in the file for it)."""
    return _purge(storage, forgotten=False)[0]


def _purge(storage: Storage, *, forgotten: bool, namespace: str | None = None) -> tuple[int, int]:
    """Delete expired entries (and, with ``forgotten``, forgotten ones) of ``namespace`` or every
    namespace with their derived rows, in steps of a transaction each (:func:`~harness_mem.steps.in_steps`),
    each batch (``PURGE_BATCH``) recording what it deleted as a pending purge; returns (expired,
    forgotten) counts."""
    now = now_ms()
    totals = [0, 0]

    def batch(size: int) -> bool:
        expired, tombstones = storage.purge(now, namespace=namespace, forgotten=forgotten, limit=size)
        if expired or tombstones:
            pending_expired, pending_forgotten = pending_purge(storage)
            _set_pending(storage, pending_expired + expired, pending_forgotten + tombstones)
        if namespace is None:
            storage.set_setting(EXPIRY_KEY, str(now))
        totals[0] += expired
        totals[1] += tombstones
        return expired + tombstones == size

    # Between steps, a waiting writer's turn: taken again at once, the lock goes to us.
    in_steps(storage.transaction, batch, PURGE_BATCH, storage.between_steps)
    return totals[0], totals[1]


def pending_purge(storage: Storage) -> tuple[int, int]:
    """(expired, forgotten) entries deleted whose old copies may still be in the file: (0, 0) when
    none."""
    try:
        recorded = json.loads(storage.setting(PURGE_PENDING_KEY) or "{}")
        return int(recorded.get("expired", 0)), int(recorded.get("forgotten", 0))
    except (ValueError, TypeError, AttributeError):  # a damaged marker: a rewrite is owed all the same
        return 0, 1


def _set_pending(storage: Storage, expired: int, forgotten: int) -> None:
    storage.set_setting(PURGE_PENDING_KEY, json.dumps({"expired": max(expired, 0), "forgotten": max(forgotten, 0)}))


def _fulfilled(storage: Storage, expired: int, forgotten: int) -> None:
    """Take what a rewrite removed off the pending purge; what was purged meanwhile stays owed."""
    with storage.transaction():
        now_expired, now_forgotten = pending_purge(storage)
        _set_pending(storage, now_expired - expired, now_forgotten - forgotten)


def purge_namespace(storage: Storage, namespace: str) -> int:
    """Remove ``namespace``'s forgotten and expired entries from the store, bytes included; returns
    how many this call deleted.

    The deletes go in short transactions, each recording a pending purge; then the keyword index
    is merged, the file rewritten and the log emptied, and only then is the purge taken off the
    record. A pending purge left by an earlier one that failed (a full disk) is finished too.
    """
    with storage.stepwise():
        expired, forgotten = _purge(storage, forgotten=True, namespace=namespace)
        storage.drop_unused_identities()  # the sealed names of what is gone go too
        owed = pending_purge(storage)
        if any(owed):
            storage.merge_keyword_index()
            storage.rewrite()
            _fulfilled(storage, *owed)
    if any(owed):
        storage.truncate_log()
    return expired + forgotten


def _last_expiry(storage: Storage) -> int:
    try:
        return int(storage.setting(EXPIRY_KEY) or 0)
    except ValueError:
        return 0


def expire_if_due(storage: Storage) -> int | None:
    """Purge expired entries when none was purged for a day; the number purged, or None when not due.

    Called on every writable open, so it must cost nothing most of the time: a settings read, then
    (once the day is up) one probe of the expiry index; the write transaction happens only when
    something has expired. It never waits for another writer: a busy store (an import, say) is left
    for the next open, as is a store this process may not write.
    """
    if storage.confined_to is not None:  # the store-wide record of it is the owner's to write
        return None
    now = now_ms()
    if now - _last_expiry(storage) < EXPIRY_EVERY_MS or not storage.has_expired(now):
        return None
    with storage.without_waiting():
        try:
            if now_ms() - _last_expiry(storage) < EXPIRY_EVERY_MS:  # another process just did it
                return None
            return purge_expired(storage)
        except Exception as exc:
            if storage.is_busy(exc):
                return None
            raise


def gc(storage: Storage, *, vacuum: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Purge expired and forgotten entries (every namespace), merge the keyword index, rewrite the
    store when an entry was purged, empty the write-ahead log, free pages; report sizes by table.

    Every step works in short write transactions (a batch of deletes, a few hundred pages of the
    keyword index's merge, a batch of rows of the rewrite, free pages handed back 64 at a time until the step has held the
    lock its share),
    so a writer beside gc waits for one step, whatever the file's size. A purged entry's text must
    leave every byte of the file, and only pages written afresh lose the old copies of rows that
    SQLite's page rebuilding leaves behind: the tables holding entries' text are rewritten when a
    purge is owed (this gc's, one the daily expiry on open made, or one whose rewrite failed
    before). The counts reported are the purges this gc completed. Free pages go back to the file
    system by ``PRAGMA incremental_vacuum`` when the file's ``auto_vacuum`` mode is INCREMENTAL
    (every file made since it was introduced). A file in mode NONE keeps its size unless
    ``vacuum``: then a full ``VACUUM`` rewrites it (holding writers for its length), switching it to
    INCREMENTAL on the way. ``progress`` is told each step as it begins, and the entries purged.
    """
    def step(name: str) -> None:
        if progress is not None:
            progress.phase(name)

    if storage.read_only:
        raise InvalidInputError("gc changes the file — open the store for writing, not read-only")
    before = storage.size_bytes()
    with storage.stepwise():
        step("purging expired and forgotten entries")
        purged = sum(_purge(storage, forgotten=True))
        if progress is not None:
            progress.advance(purged, purged)
        storage.drop_unused_identities()  # the sealed names of what is gone (purged or deleted) go too
        step("merging the keyword index")
        storage.merge_keyword_index()
        expired, forgotten = pending_purge(storage)
        owed = bool(expired or forgotten)
        step("rewriting the file" if owed or vacuum else "giving free pages back")
        done = storage.compact(rewrite=owed, vacuum=vacuum)
        if owed:
            _fulfilled(storage, expired, forgotten)
    if owed:
        done["wal_truncated"] = storage.truncate_log()  # the record's own change leaves the log too
    return {
        "path": storage.location,
        "expired_purged": expired,
        "forgotten_purged": forgotten,
        **done,
        "bytes_before": before,
        "bytes_after": storage.size_bytes(),
        "tables": storage.table_sizes(),
    }
