"""The storage seam: what an engine does for a store, and nothing more.

A :class:`Storage` holds the entries and everything derived from them (the keyword index, the
vectors), and answers the queries the store's parts ask: rows by id or filter, candidates for a
keyword or vector ranking, a session's turns, counts and sizes. Ranking itself (BM25 over
candidates in :mod:`harness_mem.bm25`, fusion in :mod:`harness_mem.fusion`) and every rule about
what may be written (redaction, namespaces, corrections) stay in shared Python above the seam, so
every engine ranks the same candidates the same way and keeps the same promises.

Engines live in :mod:`harness_mem.engines`; :func:`harness_mem.engines.open_storage` picks one for
a path or URL. Every method that reads or writes entries takes the namespace it works in: the
facade (:class:`~harness_mem.store.MemoryStore`) supplies its own, so no caller reaches another's.
Methods without one (rebuilding, counting, collecting garbage) span the whole store.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

from .errors import DuplicateIdError, IdentityKeyError, InvalidInputError, StorageError
from .filters import Selection
from .identities import KEY_ID_SETTING, ROTATING_SETTING, SealedIdentity, Sealer
from .keyword import entry_index_text
from .models import MigrationStatus, now_ms
from .passages import Embedding, Passage, Scored
from .protocols import Embedder
from .redaction import Redactor
from .rows import Row, identity, identity_tags, stored_metadata
from .steps import STEP_PAUSE_S
from .sync import outbox
from .sync.clock import Stamp
from .sync.operations import Operation

OnConflict = Literal["error", "ignore", "replace"]
T = TypeVar("T")

#: The source of the entries consolidation derives from transcripts (segments, facts): they cite
#: their turns in ``metadata.source_turns`` (as its episodes do), are forgotten with them, and are
#: not part of a session's transcript.
DERIVED_SOURCE = "consolidation"


def is_derived(row: Row) -> bool:
    """Whether an entry was derived from others (it cites them in ``metadata.source_turns``, the
    one provenance field every derived writer fills): every device derives its own, so it never syncs."""
    return row.source == DERIVED_SOURCE or '"source_turns"' in row.metadata


#: Where a page of a list in creation order starts: the (created_at, pk) of the entry before it.
Position = tuple[int, int]


def after_position(alias: str, position: Position, newest_first: bool,
                   placeholder: str) -> tuple[str, list[int]]:
    """The condition "after ``position``" (its created_at, pk) in a list by (created_at, pk), for
    keyset pagination, and its parameters: the time bound alone is what an index on
    (…, created_at) can seek to; the pair settles ties."""
    op = "<" if newest_first else ">"
    return (f"{alias}.created_at {op}= {placeholder}"
            f" AND ({alias}.created_at, {alias}.pk) {op} ({placeholder}, {placeholder})",
            [position[0], position[0], position[1]])


ON_CONFLICT: tuple[OnConflict, ...] = ("error", "ignore", "replace")
#: Embeddings computed before a write, keyed by ``id(row)`` of the rows they belong to.
Vectors = dict[int, Embedding]


def check_on_conflict(on_conflict: object) -> None:
    """Refuse an ``on_conflict`` that is not one of :data:`ON_CONFLICT`: an unknown word must not
    quietly act as one of them (an overwrite, say)."""
    if not isinstance(on_conflict, str) or on_conflict not in ON_CONFLICT:
        raise InvalidInputError(
            f"on_conflict must be one of {', '.join(map(repr, ON_CONFLICT))}, not {on_conflict!r:.60}"
        )


def duplicate_id(namespace: str, entry_id: str) -> DuplicateIdError:
    return DuplicateIdError(
        f"an entry with id {entry_id!r} already exists in namespace {namespace!r}"
        " — choose another id, or replace it"
    )


def settle_conflicts(batch: Sequence[Row], on_conflict: OnConflict,
                     stored: Callable[[str, list[str]], list[tuple[str, int]]],
                     delete: Callable[[int], None]) -> list[Row]:
    """The rows of ``batch`` to insert once ids already stored (or repeated in the batch) are
    settled by ``on_conflict``: ``stored(namespace, ids)`` gives the (id, pk) of those stored, and
    ``delete(pk)`` removes one that a row replaces (inside the write transaction)."""
    unique: dict[tuple[str, str], Row] = {}
    for row in batch:
        key = (row.namespace, row.id)
        if key in unique:
            if on_conflict == "error":
                raise duplicate_id(*key)
            if on_conflict == "ignore":
                continue
        unique[key] = row
    for namespace in {namespace for namespace, _ in unique}:
        for entry_id, pk in stored(namespace, [entry_id for ns, entry_id in unique if ns == namespace]):
            if on_conflict == "error":
                raise duplicate_id(namespace, entry_id)
            if on_conflict == "ignore":
                del unique[(namespace, entry_id)]
            else:
                delete(pk)
    return list(unique.values())


Previous = tuple[str, str | None]  # the turn before a turn: (content, role)


def index_texts_of(rows: Sequence[Row], previous: Callable[[Row], Previous | None] | None) -> list[str]:
    """Keyword-index texts for rows in time order: a turn carries its date and the turn before it.

    That turn is the latest of the same session among the rows earlier in the list, or for the
    first of a session ``previous(row)`` (looked up among the stored ones; None: no lookup).
    """
    last: dict[tuple[str, str], Previous | None] = {}
    texts = []
    for row in rows:
        if row.kind != "turn" or not row.session:
            texts.append(entry_index_text(row.content, row.role, row.kind, row.session, row.created_at, None))
            continue
        key = (row.namespace, row.session)
        if key not in last:
            last[key] = previous(row) if previous is not None else None
        texts.append(entry_index_text(row.content, row.role, row.kind, row.session, row.created_at, last[key]))
        last[key] = (row.content, row.role)
    return texts


@dataclass(frozen=True)
class Scope:
    """Whose entries a part of the store works on: a namespace (as stored) and the redactor whose
    pseudonyms its identity fields carry."""

    namespace: str
    redactor: Redactor | None
    #: What seals the raw values of the identity fields this scope's writes pseudonymise (None:
    #: no identity key here, and reads show the pseudonyms).
    sealer: Sealer | None = None

    def key(self, value: str | None) -> str | None:
        """An identity value (id, session, role, a tag) as it is stored, for a lookup by equality."""
        return identity(value, self.redactor)

    def tags(self, tags: Sequence[str] | str) -> tuple[str, ...]:
        """Tags as they are stored, for a lookup by value: cleaned, then each one :meth:`key`'s."""
        return identity_tags(tags, self.redactor)

    def filters(self, filters: Mapping[str, Any]) -> dict[str, Any]:
        """Filter arguments (those of ``recall`` and ``list``) with their identity values (role,
        session, session prefix, tags) in their stored form; the others as given.

        A prefix ending inside a sensitive value cannot match its pseudonym: only whole values do.
        """
        if self.redactor is None:
            return dict(filters)
        keyed: dict[str, Any] = {}
        for name, value in filters.items():
            if name in _IDENTITY_FILTERS and isinstance(value, str):
                value = self.key(value)
            elif name == "exclude_sessions" and value:
                value = tuple(self.key(v) for v in ((value,) if isinstance(value, str) else value))
            elif name in _TAG_FILTERS and value is not None:
                value = self.tags(value)
            elif name == "metadata" and isinstance(value, Mapping):
                value = self._stored_metadata(value)
            keyed[name] = value
        return keyed


    def _stored_metadata(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """A metadata filter with its keys and values as they are stored (:func:`~harness_mem.rows.stored_metadata`;
        an operator is no value the redactor changes): a value the redactor changes is found by its raw form."""
        assert self.redactor is not None
        return dict(stored_metadata(spec, self.redactor).value)


def write_sealed(storage: Storage, sealer: Sealer | None, rows: Sequence[Row], on_conflict: OnConflict,
                 vectors: Vectors | None = None, *, identities: Sequence[SealedIdentity] = ()) -> list[Row]:
    """``storage.write`` of ``rows``, with the identities sealed while they were prepared (by
    ``sealer``, or elsewhere: ``identities``) kept in the same transaction, so a row never commits
    without the raw values behind its pseudonyms (see :mod:`harness_mem.identities`)."""
    sealed = [*identities, *(sealer.take() if sealer is not None else ())]
    try:
        if vectors is None:  # the model runs before the write lock is taken
            vectors = storage.embed_new(rows, on_conflict)
        with storage.transaction():
            if sealed:
                _check_key_unchanged(storage, sealed)
                storage.seal_identities(sealer.namespace if sealer is not None else rows[0].namespace, sealed)
            if on_conflict == "replace":  # its other devices drop the words it replaces, as it does
                outbox.log_replacing(storage, [row for row in rows if not is_derived(row)], now_ms())
            written = storage.write(rows, on_conflict, vectors)
            # Once the store syncs, what was said and written is logged with it.
            outbox.log_added(storage, [row for row in written if not is_derived(row)], sealed)
    except BaseException:
        if sealer is not None:
            sealer.put_back(sealed)
        raise
    return written


def _check_key_unchanged(storage: Storage, sealed: Sequence[SealedIdentity]) -> None:
    if storage.setting(ROTATING_SETTING):  # its rows are being rewritten: one more could clash with them
        raise IdentityKeyError("this store's identity key is being rotated (a run was interrupted) — run"
                               " `harness-mem key rotate` to finish it, then write")
    # A handle opened before a key rotation would write names, and pseudonyms, nobody can find.
    recorded = storage.setting(KEY_ID_SETTING)
    if recorded is not None and any(row.key_id != recorded for row in sealed):
        raise IdentityKeyError(f"this store's identity key was rotated since this handle opened it (it is"
                               f" now {recorded}) — open the store again")


_IDENTITY_FILTERS = frozenset({"role", "session", "session_prefix"})
_TAG_FILTERS = frozenset({"tags", "any_tags", "exclude_tags"})


class SessionSpan(NamedTuple):
    """A session's size and time span (ms since the epoch)."""

    session: str
    turns: int
    started_ms: int
    ended_ms: int


class VectorCounts(NamedTuple):
    """Whether this model's vectors are bound, and how many live entries there are and lack one."""

    bound: bool
    entries: int
    missing: int


class Storage(ABC):
    """Entries and their derived rows in one engine (see the module docstring)."""

    #: The engine's name: ``"sqlite"`` or ``"postgresql"``.
    engine: str
    #: True when nothing may be written (asked for, or the location cannot be written).
    read_only: bool
    #: The model whose vectors this storage writes and searches (None: keyword only).
    embedder: Embedder | None
    #: What the keyword ranking reads (a :class:`~harness_mem.bm25.KeywordSource`), one per lane:
    #: what was said and written, and what consolidation derived (:data:`DERIVED_SOURCE`). Each has
    #: its own statistics, so consolidating never moves how the rest is ranked.
    keywords: Any
    derived_keywords: Any
    #: The namespaces (as stored) the database lets this connection read, if it confines it.
    confined_to: frozenset[str] | None = None
    #: Those of them it may also write (None: it does not confine it).
    writable_to: frozenset[str] | None = None
    #: True when this engine can rekey an older store's pseudonyms (:meth:`rekey_pseudonyms`).
    rekeys_pseudonyms: bool = False

    # ---- lifecycle and settings ---------------------------------------------------------------

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the store is, as a person may read it (a path, or a URL without its password)."""

    @abstractmethod
    def migrate(self) -> bool:
        """Apply pending migrations; True when this call created the store."""

    @abstractmethod
    def close(self) -> None: ...

    def grant(self, role: str, namespace: str, *, read_only: bool = False) -> None:
        """Let a database role read ``namespace`` (as stored), and write it unless ``read_only``,
        beside what it was granted before, enforced by the database. Only an engine with roles can."""
        raise self._no_roles()

    def revoke(self, role: str, namespace: str) -> bool:
        """Take ``namespace`` back from a database role; False when it had not been granted it."""
        raise self._no_roles()

    def grants(self) -> list[tuple[str, str, bool]]:
        """Every grant: (role, namespace as stored, read-only)."""
        raise self._no_roles()

    def _no_roles(self) -> InvalidInputError:
        return InvalidInputError(f"a {self.engine} store has no database roles — granting namespaces to one needs"
                                 " PostgreSQL (on SQLite, whoever can read the file reads every namespace)")

    @abstractmethod
    def redaction_secret(self, *, create: bool) -> str | None:
        """The store's key for keyed pseudonyms, made on first use unless ``create`` is False."""

    def rekey_pseudonyms(self, rekey: Callable[[str], str],
                         reseal: Callable[[str, SealedIdentity], tuple[str, SealedIdentity]], *,
                         finished: Callable[[], bool], finish: Callable[[], None],
                         progress: Callable[[int, int], None] | None = None) -> int:
        """Rewrite every pseudonym the store holds with ``rekey``, and every sealed identity with
        ``reseal``, resuming an interrupted run and stopping once ``finished()`` (another process
        may finish it); ``finish`` runs in the last transaction (see :mod:`harness_mem.pseudonyms`).
        How many rows changed."""
        raise StorageError(f"rekeying an older {self.engine} store's pseudonyms is not supported yet"
                           " — its pseudonyms stay keyed inside it")

    @property
    @abstractmethod
    def keyword_only(self) -> bool:
        """True when the store keeps no vectors by choice."""

    @abstractmethod
    def set_keyword_only(self, keyword_only: bool) -> None:
        """Record (inside a transaction) whether the store keeps vectors."""

    @abstractmethod
    def recorded_model(self) -> dict[str, str] | None:
        """The identity (name, dim, fingerprint) of the model the stored vectors came from."""

    # ---- sealed identities (harness_mem.identities) ------------------------------------------------

    @abstractmethod
    def seal_identities(self, namespace: str, rows: Sequence[SealedIdentity]) -> None:
        """Keep the sealed raw values of stored identity values (inside a transaction); a value
        already kept stays as it was."""

    @abstractmethod
    def sealed_identities(self, namespace: str, stored: Sequence[str]) -> list[SealedIdentity]:
        """The sealed rows kept for these stored identity values, in ``namespace``."""

    @abstractmethod
    def drop_unused_identities(self) -> int:
        """Delete the sealed values no stored entry holds any more (its entries deleted or purged;
        a namespace's own name stays); returns how many went."""

    @abstractmethod
    def every_sealed_identity(self) -> Iterator[tuple[str, SealedIdentity]]:
        """Every sealed row with its namespace (what a copy of the store takes along)."""

    @abstractmethod
    def setting(self, key: str) -> str | None: ...

    @abstractmethod
    def set_setting(self, key: str, value: str) -> None:
        """Store a setting (inside a transaction)."""

    # ---- transactions ---------------------------------------------------------------------------

    @abstractmethod
    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction, taking the write lock up front; a nested call joins the outer one."""

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[None]:
        """One read view around several queries: they all see the store as it was at the first."""

    @abstractmethod
    def data_version(self) -> tuple[int, int]:
        """A token that changes whenever the store's content changes, in this process or another."""

    def recalling(self, namespaces: Sequence[str], recall: Callable[[], T]) -> T:
        """``recall()``, one recall of ``namespaces``. An engine that pays a round trip a statement
        may answer what the recall asks before its snapshot (:meth:`has_derived` of each,
        :meth:`data_version`, :meth:`vector_counts`, :meth:`roles_named`) from one read, until the
        recall ends or something is written; or from the last recall's, checked in the snapshot's
        first round trip, and run ``recall`` again where they were not so."""
        return recall()

    def bulk(self, *, workers: int = 0) -> AbstractContextManager[None]:
        """Many write transactions in a row (an import): the engine may put off its housekeeping
        between them until the block ends, and take a share of its work to ``workers`` processes
        of its own (0: it stays in this one)."""
        return nullcontext()

    def stepwise(self) -> AbstractContextManager[None]:
        """Maintenance in steps (a gc, a purge): the engine does its housekeeping in
        :meth:`between_steps`, not at each step's commit, where it would hold the lock longer."""
        return nullcontext()

    def between_steps(self) -> None:
        """Between two steps of maintenance, the lock let go: a waiting writer's turn."""
        time.sleep(STEP_PAUSE_S)

    @abstractmethod
    def without_waiting(self) -> AbstractContextManager[None]:
        """Inside the block a write that would wait for another writer fails at once instead."""

    @abstractmethod
    def is_busy(self, exc: BaseException) -> bool:
        """True when ``exc`` says another writer holds the store."""

    # ---- vectors ----------------------------------------------------------------------------------

    @abstractmethod
    def use_embedder(self, embedder: Embedder | None) -> None:
        """Write and search the vectors of ``embedder`` from now on (bound on first use)."""

    @abstractmethod
    def vectors_bound(self, *, writing: bool = True) -> bool:
        """Bind this embedder's vectors (recording its model on first use); False without one. A
        reader (``writing=False``) never binds a keyword-only or read-only store."""

    @abstractmethod
    def check_model(self) -> str:
        """Raise unless the stored vectors are this embedder's; else a line naming it."""

    @abstractmethod
    def model_differs(self) -> bool:
        """True when the stored vectors came from another model than this embedder."""

    @abstractmethod
    def embed_new(self, rows: Sequence[Row], on_conflict: OnConflict) -> Vectors:
        """Vectors for the rows a write would insert, in one model call, before any lock is taken."""

    # ---- writes -----------------------------------------------------------------------------------

    @abstractmethod
    def write(self, rows: Sequence[Row], on_conflict: OnConflict, vectors: Vectors | None = None) -> list[Row]:
        """Insert rows with their keyword and vector rows in one transaction; returns those written
        (ids already stored are settled by ``on_conflict``)."""

    @abstractmethod
    def delete(self, namespace: str, entry_id: str) -> bool:
        """Delete an entry and its derived rows; False when there was none."""

    @abstractmethod
    def forget(self, pks: Sequence[int], when: int) -> None:
        """Tombstone entries: their derived rows go now (the skills distilled from a forgotten
        episode among them: they quote it), their content at the next purge."""

    # ---- the sync log (what goes in: :mod:`harness_mem.sync.outbox`; applying: :mod:`~harness_mem.sync.apply`)

    @abstractmethod
    def log_operations(self, operations: Sequence[Operation], *, chunk: str | None = None,
                       text: bool = True) -> None:
        """Append operations to the sync log (inside the write's transaction), with the chunk they came
        in (None: made here), and without their text when ``text`` is False (an add of a forgotten
        entry, known by its hash alone); one already there is kept. A forget's ids are noted with its stamp."""

    @abstractmethod
    def last_stamp(self) -> Stamp | None:
        """The latest clock stamp in the sync log (None: it is empty)."""

    @abstractmethod
    def logged_operations(self, after: int = 0, limit: int = 1000) -> list[tuple[int, str, str | None]]:
        """(seq, hash, canonical JSON) of logged operations past ``seq`` ``after``, in the order they
        were logged; the JSON is None for the ``add`` of an entry since forgotten."""

    @abstractmethod
    def known_operations(self, hashes: Sequence[str]) -> set[str]:
        """Which of these operation hashes the log holds."""

    @abstractmethod
    def logged_about(self, namespace: str, entry_id: str, op: str) -> list[tuple[Stamp, str | None]]:
        """(stamp, canonical JSON or None) of the logged ``op`` operations about one entry, oldest first."""

    @abstractmethod
    def logged_supersedes(self, namespace: str, entry_ids: Sequence[str]) -> list[str]:
        """The canonical JSON of the logged supersedes of any of these entries, or making one of them
        a new version."""

    @abstractmethod
    def logged_stamps(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, list[Stamp]]:
        """The stamps of the logged ``op`` operations about each of these entries, oldest first (those
        with none left out); for ``forget``, of every forget that named the entry."""

    def added_stamps(self, namespace: str, entry_ids: Sequence[str], *, latest: bool = False) -> dict[str, Stamp]:
        """The earliest (``latest``: the latest) stamp of an ``add`` logged for each of these entries
        (those with none left out)."""
        return {entry_id: stamps[-1 if latest else 0]
                for entry_id, stamps in self.logged_stamps(namespace, entry_ids, "add").items()}

    @abstractmethod
    def empty_adds_before(self, namespace: str, entry_id: str, stamp: Stamp) -> None:
        """Let go of the words of the ``add`` operations of an id stamped before ``stamp`` (their hashes
        stay, so a replay is recognised): a forget reached them, not the add holding the id now."""

    def forgotten_stamps(self, namespace: str, entry_ids: Sequence[str]) -> dict[str, Stamp]:
        """The latest stamp of a forget that named each of these entries (those none named left out)."""
        return {entry_id: stamps[-1] for entry_id, stamps in self.logged_stamps(namespace, entry_ids, "forget").items()}

    @abstractmethod
    def selector_forgets(self, namespace: str, after: Stamp) -> list[str]:
        """The canonical JSON of the forgets by a selector stamped after ``after``."""

    @abstractmethod
    def added_twice(self) -> list[tuple[str, str]]:
        """(namespace, entry id) of every entry whose ``add`` the log holds more than once, with words
        (two devices wrote the id: a fork, or the same entry twice)."""

    @abstractmethod
    def latest_logged(self, namespace: str, entry_ids: Sequence[str], op: str) -> dict[str, str]:
        """The canonical JSON of the latest-stamped logged ``op`` operation about each of these entries
        (those with none left out)."""

    @abstractmethod
    def set_expiry(self, namespace: str, entry_id: str, expires_at: int) -> None:
        """Set an entry's expiry, as a renewal applied from another device did on it."""

    @abstractmethod
    def note_written(self, hashes: Sequence[str], chunk: str | None) -> None:
        """Record the chunk of the folder this store's own operations were written to."""

    @abstractmethod
    def chunks_holding_forgotten(self, device: str) -> list[str]:
        """The chunks of this store's own device that hold an add of an entry since forgotten."""

    @abstractmethod
    def forgotten_adds(self, hashes: Sequence[str]) -> set[str]:
        """Which of these hashes are adds of entries since forgotten (logged by their hash alone)."""

    @abstractmethod
    def chunks_read(self, device: str) -> dict[str, str]:
        """The chunks of ``device`` this store has read, and what became of each (applied, quarantined)."""

    @abstractmethod
    def quarantined_chunks(self) -> list[tuple[str, str, str | None]]:
        """Every chunk refused when read: (device, chunk, the one line saying why), by device."""

    @abstractmethod
    def note_chunk(self, device: str, chunk: str, state: str, reason: str | None = None) -> None:
        """Record what became of a chunk read from ``device`` (inside the transaction that applied it)."""

    @abstractmethod
    def move(self, pks: Sequence[int], namespace: str) -> None:
        """Put entries in another namespace (as stored) with their derived rows, inside a write
        transaction; the caller has checked that none of their ids is taken there. A turn's keyword
        row is made again (it carries the turn before it, which is now another), and so is the row
        of the turn that followed it where it was and where it goes."""

    @abstractmethod
    def has_derived(self, namespace: str) -> bool:
        """Whether the namespace holds any :data:`DERIVED_SOURCE` entry (an index answers it)."""

    @abstractmethod
    def derived_from(self, pks: Sequence[int]) -> list[int]:
        """The live entries derived from any of these, for forgetting to reach them: the entries of
        the same session citing one of them in ``metadata.source_turns``, the one provenance field
        every derived entry fills (segments, facts, episodes)."""

    @abstractmethod
    def citing(self, pks: Sequence[int], selection: Selection) -> list[tuple[int, int]]:
        """(entry pk, cited pk) for each entry of ``selection`` that cites one of these turns in
        ``metadata.source_turns`` (same namespace and session): what recall ranks a derived entry
        by beside its own words (:mod:`harness_mem.sourced`)."""

    @abstractmethod
    def rebuild_episodes(self, pks: Sequence[int]) -> None:
        """Among these forgotten entries, the episodes consolidation keeps for a session: set each
        session's episode watermark back to the start, so the next consolidation builds its episode
        again from the turns that remain (inside the forgetting transaction)."""

    @abstractmethod
    def mark_superseded(self, pk: int, by: str | None, when: int | None) -> None:
        """Mark an entry as replaced by the entry ``by`` (inside a transaction; None: as current)."""

    @abstractmethod
    def rename(self, pk: int, entry_id: str) -> None:
        """Give an entry another id (inside a transaction; its derived rows follow it by pk): the version
        that lost a fork of its id makes room for the one that won (:mod:`harness_mem.sync.forks`)."""

    @abstractmethod
    def replaced_by(self, namespace: str, entry_ids: Sequence[str]) -> list[tuple[int, str, str]]:
        """(pk, id, superseded_by) of the live entries superseded by any of these ids."""

    @abstractmethod
    def set_tags(self, pk: int, tags: str) -> None:
        """Give an entry these tags (a JSON list, in their stored form; inside a transaction)."""

    def move_session_tag(self, namespace: str, session: str, old: str, new: str, *, family: str) -> int:
        """Tag ``session``'s current entries ``new`` instead of ``old``, and ``new`` those that have
        no tag starting with ``family`` (what was derived from the session before such tags were
        passed on), in one transaction; tags in their stored form. Returns how many changed."""
        changed = 0
        with self.transaction():
            offset = 0
            while rows := self.session_rows(namespace, session, offset, 500):
                offset += len(rows)
                retagged: dict[str, list[str]] = {}
                for row in rows:
                    tags = [t for t in json.loads(row.tags) if t != old]
                    if not any(t.startswith(family) for t in tags):
                        tags.append(new)
                    if tags != json.loads(row.tags) and row.pk is not None:
                        self.set_tags(row.pk, json.dumps(tags))
                        changed += 1
                        if not is_derived(row):  # once the store syncs, its other devices retag it too
                            retagged[row.id] = tags
                outbox.log_retagged(self, namespace, retagged)
        return changed

    @abstractmethod
    def purge(self, now: int, *, namespace: str | None = None, forgotten: bool = True,
              limit: int | None = None) -> tuple[int, int]:
        """Delete expired (and, with ``forgotten``, forgotten) entries with their derived rows, in
        ``namespace`` or everywhere, at most ``limit`` of them (lowest pk first) in one transaction;
        returns (expired, forgotten) counts."""

    @abstractmethod
    def has_expired(self, now: int) -> bool:
        """True when some entry has expired and is not purged yet."""

    @abstractmethod
    def renew_expiry(self, namespace: str, ids: Sequence[str], now: int) -> dict[str, int]:
        """Renew the expiry of the entries (by stored id) written with a time to live, that have not
        expired yet: each expires its time to live from ``now``; returns id → new expiry (ms)."""

    # ---- reads --------------------------------------------------------------------------------------

    @abstractmethod
    def get(self, namespace: str, entry_id: str, now: int) -> Row | None:
        """A live (not forgotten, not expired) entry by id."""

    @abstractmethod
    def get_many(self, namespace: str, entry_ids: Sequence[str], now: int) -> dict[str, Row]:
        """The live entries among these ids (by stored id), in one query: the turns a derived entry
        cites are read together, not one round trip each."""

    @abstractmethod
    def rows(self, pks: Sequence[int]) -> dict[int, Row]: ...

    @abstractmethod
    def select(self, selection: Selection, *, limit: int | None = None, offset: int = 0,
               newest_first: bool = False, after: str | None = None) -> Iterator[Row]:
        """The entries ``selection`` passes, in creation order (or newest first); ``after`` (an
        entry id of the selection's namespace): only those after it in that order."""

    @abstractmethod
    def count(self, selection: Selection) -> int: ...

    @abstractmethod
    def pks(self, selection: Selection, *, entry_id: str | None = None) -> list[int]: ...

    @abstractmethod
    def duplicate_of(self, namespace: str, kind: str, content_hash: str, now: int) -> str | None:
        """The id of a current entry of ``kind`` with this content hash."""

    @abstractmethod
    def current(self, namespace: str, entry_id: str) -> tuple[int, str | None] | None:
        """(pk, superseded_by) of an entry that is not forgotten."""

    @abstractmethod
    def kept(self, namespace: str, *, entry_id: str | None = None, superseded_by: str | None = None) -> Row | None:
        """The first entry, forgotten ones aside, with this id, or that this id replaced."""

    @abstractmethod
    def pk_of(self, namespace: str, entry_id: str) -> int | None: ...

    @abstractmethod
    def index_texts(self, pks: Sequence[int]) -> dict[int, str]:
        """Each entry's keyword-index text, as its write made it."""

    @abstractmethod
    def rows_after(self, pk: int, limit: int) -> list[Row]:
        """Up to ``limit`` entries of every namespace past ``pk``, in pk order, forgotten ones
        aside (what a copy carries: current and superseded entries)."""

    @abstractmethod
    def stored_vectors(self, pks: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """The stored vector of each entry that has one (its direction: cosine ignores scale)."""

    # ---- what recall asks -----------------------------------------------------------------------

    @abstractmethod
    def speakers(self, pks: Sequence[int]) -> list[tuple[int, str | None, str | None]]:
        """(pk, role, session) of each entry."""

    @abstractmethod
    def roles_named(self, namespace: str, words: Sequence[str]) -> list[str]:
        """The stored roles whose lower-case form is one of ``words``."""

    @abstractmethod
    def nearest(self, vector: npt.NDArray[np.float32], k: int, selection: Selection, *,
                exact_order: bool = True, extra: int = 0) -> list[tuple[int, float]]:
        """(pk, cosine) of the ``k`` entries nearest ``vector`` that pass ``selection``, best first.
        ``exact_order=False``: the near neighbours must be in, their order need not be exact.
        ``extra``: then up to that many more, of those the search compared anyway (its candidates
        past the top k, in order): for a caller that scores them again, at no wider search (by their
        later windows: an engine may leave out those that have none, which nothing can lift)."""

    @abstractmethod
    def cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, float]:
        """The cosine of ``vector`` to each entry's stored vector (those that have one)."""

    @abstractmethod
    def passages(self, pks: Sequence[int]) -> dict[int, list[Passage]]:
        """The later windows of each entry that has any (:mod:`harness_mem.passages`), in order."""

    @abstractmethod
    def passage_cosines(self, vector: npt.NDArray[np.float32], pks: Sequence[int]) -> dict[int, list[Scored]]:
        """The later windows of each entry that has any, in order, each with its cosine to
        ``vector``: what a recall's best-of weighs (an engine may give only the one it picks)."""

    @abstractmethod
    def vector_counts(self) -> VectorCounts: ...

    @abstractmethod
    def missing_vectors(self) -> int:
        """Live entries (every namespace) without a vector of the bound model."""

    # ---- sessions ------------------------------------------------------------------------------------

    @abstractmethod
    def neighbours(self, namespace: str, session: str, created_ms: int, pk: int, n: int, *,
                   include_superseded: bool = False) -> tuple[list[Row], list[Row]]:
        """The ``n`` entries before and after a point of a session, in order."""

    @abstractmethod
    def still_there(self, namespace: str, ids: Sequence[str], *, include_superseded: bool = False) -> set[str]:
        """Those of ``ids`` still stored in a session (and current, unless ``include_superseded``)."""

    @abstractmethod
    def session_span(self, namespace: str, session: str, *, include_superseded: bool = False) -> SessionSpan: ...

    @abstractmethod
    def bookends(self, namespace: str, session: str, *, include_superseded: bool = False) -> tuple[Row, Row]:
        """A session's first and last entries."""

    @abstractmethod
    def sessions(self, namespace: str, limit: int, offset: int, after: str | None = None) -> list[SessionSpan]:
        """Sessions, most recently active first; ``after`` (a session): only those listed after it.
        Found by walking the newest entries back to each session's latest, not by grouping them all."""

    @abstractmethod
    def session_rows(self, namespace: str, session: str, offset: int, limit: int,
                     after: str | None = None) -> list[Row]:
        """A session's current entries in order, a page at a time; ``after`` (an entry id): only
        those after it (the next page, found through the index rather than counted past)."""

    # ---- rebuilding, counting, collecting ---------------------------------------------------------------

    @abstractmethod
    def rebuild_keyword_index(self) -> tuple[int, int]:
        """Rebuild the keyword index from the entries, a batch per write transaction (readers find
        every entry all along); returns (entries, rows indexed)."""

    @abstractmethod
    def drop_vectors(self) -> int:
        """Drop every vector and the recorded model; returns how many went."""

    @abstractmethod
    def embed_missing(self, batch_size: int) -> tuple[int, int]:
        """Embed up to ``batch_size`` entries that lack a vector, the model outside the write lock;
        returns (entries read, vectors written)."""

    @abstractmethod
    def count_all(self) -> int:
        """Entries in every namespace, forgotten ones included."""

    @abstractmethod
    def kept_counts(self) -> list[tuple[str, str, int]]:
        """(namespace, group, count) of every stored entry this connection may read, expired ones
        included, as the engine keeps them while entries change (no entry is read): ``group`` is
        the JSON array ``[kind, role, redactions, forgotten]`` the entries counted share."""

    @abstractmethod
    def expired_groups(self, now: int) -> list[tuple[str, str, str | None, str | None, bool, int]]:
        """(namespace, kind, role, redactions JSON, forgotten, count) groups of the entries expired by
        ``now`` and not purged yet, found through the expiry index."""

    @abstractmethod
    def session_count(self, namespace: str, now: int) -> int: ...

    @abstractmethod
    def namespaces(self) -> list[str]: ...

    @abstractmethod
    def schema_version(self) -> int: ...

    @abstractmethod
    def migration_status(self) -> list[MigrationStatus]:
        """Every migration this store records or this code ships, in order (``migrate --list``)."""

    @abstractmethod
    def largest_sessions(self, namespace: str, now: int, limit: int) -> list[tuple[str, int, int]]:
        """(session, entries, content bytes) of the largest sessions."""

    @abstractmethod
    def size_bytes(self) -> int:
        """The store's size on disk."""

    @abstractmethod
    def sizes(self) -> dict[str, Any]:
        """The store's bytes by what holds them (see :class:`~harness_mem.models.FileSizes`)."""

    @abstractmethod
    def table_sizes(self) -> dict[str, Any]:
        """Rows and bytes per table, largest first."""

    @abstractmethod
    def integrity_check(self) -> list[str]:
        """Problems the engine finds in the store (empty when it is sound)."""

    @abstractmethod
    def engine_checks(self) -> list[tuple[str, Callable[[], str]]]:
        """``doctor``'s checks of the engine itself: (name, probe giving a detail line or raising)."""

    @abstractmethod
    def describe_schema(self) -> str:
        """The schema version and the canonical tables' sizes (raises when one is missing)."""

    @abstractmethod
    def merge_keyword_index(self) -> None:
        """Merge the keyword index, so no deleted entry's term survives in it, in short write
        transactions (writers wait for one step, not for the whole index)."""

    @abstractmethod
    def rewrite(self) -> None:
        """Rewrite the store so no byte of a deleted row survives anywhere in it (raises
        :class:`~harness_mem.errors.StorageError` when the disk has no room for it)."""

    @abstractmethod
    def compact(self, *, rewrite: bool, vacuum: bool) -> dict[str, Any]:
        """Give free space back (a full rewrite with ``rewrite`` or ``vacuum``, else in short
        steps); what was done."""

    @abstractmethod
    def truncate_log(self) -> bool:
        """Empty the write-ahead log; False when a reader kept it."""
