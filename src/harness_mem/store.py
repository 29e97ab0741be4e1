"""``MemoryStore``: the facade over one store.

It holds the rules (redaction before anything is written, the namespace every read and write is
confined to, which model embeds) and hands the rest to its parts: a :class:`~harness_mem.storage.Storage`
engine keeps the rows (SQLite by default), :mod:`~harness_mem.recall` ranks, and
:mod:`~harness_mem.corrections`, :mod:`~harness_mem.sessions` and :mod:`~harness_mem.maintenance`
work over the storage through its public methods alone.
"""

from __future__ import annotations

import itertools
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from sqlite_utils import Database

from . import corrections, maintenance, promotion, pseudonyms, rotation, sessions
from .counts import EntryCounts, entry_counts
from .db import CACHE_SIZE_KIB, default_path
from .engines import is_url, open_storage
from .errors import (
    BlockedError,
    HarnessMemError,
    IdentityKeyError,
    InvalidInputError,
    ModelMissingWarning,
    NotFoundError,
    StorageError,
)
from .filters import Selection, make_filters
from .identities import Identities, IdentityKey, SealedIdentity, choose_key, key_file
from .keyfiles import describe_key
from .models import Entry, FileSizes, Hit, Remembered, SessionHit, SessionSummary, from_ms, now_ms
from .progress import Progress
from .protocols import Embedder
from .providers.embeddings import RECORDED_NAMES, default_embedder, default_embedder_available, named_embedder
from .providers.reference import INSTALL_HINT
from .recall import MAX_RECALL_K, Mode, Recall
from .redaction import Redactor
from .rows import MAX_BATCH_CHARS, Row, entry_from_row, identity, prepare_row
from .settings import Settings
from .storage import ON_CONFLICT, OnConflict, Scope, Storage, check_on_conflict, write_sealed
from .sync import outbox
from .sync.exchange import DeviceStatus, SyncReport
from .sync.exchange import join as join_folder
from .sync.exchange import status as sync_status
from .sync.exchange import sync as sync_folder
from .sync.forks import Fork, forks, forks_of, versions_of_forked

__all__ = ["DEFAULT_BATCH_SIZE", "ON_CONFLICT", "MemoryStore", "OnConflict", "check_on_conflict"]

DEFAULT_BATCH_SIZE = 500
_Read = TypeVar("_Read", Entry, Hit)  # what a read gives back, revealed namespace by namespace
LIST_BATCH = 500  # list() reveals identities this many entries at a time

class MemoryStore:
    """Memory entries in one SQLite file: add, recall, get, delete, list.

    Opening a store creates the file if needed and applies pending migrations::

        with MemoryStore("agent.db") as store:
            store.add("we chose argon2id for password hashing", tags=["decision"])
            hits = store.recall("password hashing decision")

    :param path: the database file (``":memory:"`` for a throwaway store); defaults to
        ``$HARNESS_MEM_DB`` or ``memory.db`` in the user's data directory.
    :param namespace: the tenant every write goes to, and every read reads (default ``"default"``;
        with ``namespaces``, the first of them).
    :param namespaces: several namespaces to read at once — a private one and shared ones, say:
        recall ranks them in one list (each hit's ``entry.namespace`` says where it lives) and
        :meth:`get` finds an id in any; writes still go to ``namespace`` alone. On PostgreSQL the
        database lets a role read only the namespaces granted to it (``harness-mem db grant``).
    :param read_only: open an existing, migrated file without the right to change it: every write
        fails, and the daily purge of expired entries (see :meth:`gc`) is not run.
    :param cache_kib: SQLite's page cache for this connection. Warm recall over a large file wants
        the default; a process that answers one query and exits does as well with less.
    :param identity_key: the key that seals the raw values of identity fields (ids, sessions, roles,
        tags, the namespace) the redactor pseudonymises, so reads give them back as written (see
        :mod:`harness_mem.identities`): 32 bytes or 64 hex digits; None takes
        ``$HARNESS_MEM_IDENTITY_KEY``, else the store's key file in the config directory (made on
        first use); False keeps no raw values, and reads show the pseudonyms. Pseudonyms are keyed
        with it too (:mod:`harness_mem.pseudonyms`): where the store's key is not, a value holding
        personal data can be neither written nor looked up.
    :param rekey: rekey an older store's pseudonyms on a writable open, where its key is (see
        :meth:`rekey_pseudonyms`); False leaves that to an explicit call.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        namespace: str | None = None,
        namespaces: Sequence[str] | None = None,
        embedder: Embedder | str | None = "auto",
        redactor: Redactor | Literal["default"] | None = "default",
        read_only: bool = False,
        cache_kib: int = CACHE_SIZE_KIB,
        identity_key: bytes | str | Literal[False] | None = None,
        rekey: bool = True,
    ) -> None:
        namespace, shared = _namespaces(namespace, namespaces)
        if path is None:
            path = default_path()
        #: The engine that keeps this store's rows (see :mod:`harness_mem.storage`).
        self.storage: Storage = open_storage(path, read_only=read_only, cache_kib=cache_kib)
        #: Held by whatever calls this store from several threads (the framework adapters' worker
        #: threads, say): its one connection serves one call at a time. Re-entrant. A thread of
        #: its own may instead take a handle of its own (:meth:`another`).
        self.lock = threading.RLock()
        self._local = threading.local()  # per thread: inside stored_forms()?
        self._opened_with = (path, cache_kib)  # for another(): a server's URL keeps its password here alone
        #: The file, or the server's URL without its password.
        self.path: Path | str = (self.storage.location if is_url(path) else
                                 ":memory:" if str(path) == ":memory:" else Path(path))
        #: True when the store is open read-only (asked for, or its location cannot be written):
        #: reads work, every write is refused.
        self.read_only: bool = self.storage.read_only
        #: The raw values behind this handle's identity pseudonyms (None: it keeps none).
        self.identities: Identities | None = None
        #: The ``identity_key`` this handle was opened with (another handle on the same store takes it).
        self.identity_key = identity_key
        self._given_namespace = namespace
        self._given_shared = shared
        self._shared_identities: dict[str, Identities] = {}
        self._own_redactor = redactor == "default"  # the store's own, rebuilt when the store is rekeyed
        try:
            created = self.storage.migrate()
            self.storage.use_embedder(self._choose_embedder(embedder, created=created))
            # Nothing unredacted reaches the file unless the caller says so (redactor=None), and
            # then every entry written records that it was not redacted. Read-only, a file without
            # a secret gets a throwaway one: nothing it could pseudonymise is ever stored.
            chosen = self._default_redactor(created=created, rekey=rekey) if redactor == "default" else redactor
            #: Whose entries this handle reads and writes: the namespace as stored (an identity
            #: field, so its pseudonym) and the redactor of every write.
            self.scope = self._scope(namespace, chosen, identity_key)
            confined = self.storage.confined_to
            refused = [given for given in (namespace, *shared)
                       if confined is not None and (identity(given, self.redactor) or given) not in confined]
            if refused:
                granted = sorted(confined or ())
                allowed = (f"namespace {granted[0]!r}" if len(granted) == 1 else
                           f"namespaces {', '.join(map(repr, granted))}" if granted else "no namespace")
                raise StorageError(f"this database role may read {allowed} only, not {refused[0]!r}"
                                   " — open the store in those, have the owner run `harness-mem db grant`,"
                                   " or connect as another role")
            self._recall = Recall(self.storage, self.scope, self.namespaces[1:])
            if not self.read_only:
                maintenance.expire_if_due(self.storage)
        except BaseException:
            self.storage.close()
            raise

    def _default_redactor(self, *, created: bool, rekey: bool) -> Redactor:
        """The store's own redactor: keyed by the file's secret, and again by its identity key."""
        settings = Settings.from_env()
        given = self._key_given(settings)
        writable = not self.read_only
        if writable and (rekey or created):
            pseudonyms.settle(self.storage, given, settings.config_dir(), created=created)
        outer = pseudonyms.key_finder(self.storage, given, settings.config_dir(), create=writable)
        secret = self.storage.redaction_secret(create=writable)
        if secret is None and self.storage.confined_to is not None:
            return pseudonyms.withheld_redactor(str(self.path))
        return pseudonyms.store_redactor(self.storage, secret, outer, writable=writable)

    def _key_given(self, settings: Settings) -> bytes | str | None:
        """The identity key given for this handle (False, keeping no raw values, still keys pseudonyms)."""
        given = self.identity_key
        return given if given is not None and given is not False else settings.identity_key

    @property
    def pseudonym_keying(self) -> str:
        """How this store's pseudonyms are keyed: ``"outside"`` (with the identity key, kept outside
        the store), ``"inside"`` (an older store, by a secret in it) or ``"rekeying"`` (being moved
        over); see :mod:`harness_mem.pseudonyms`."""
        return pseudonyms.keying(self.storage).state

    def rekey_pseudonyms(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Key an older store's pseudonyms outside it, with this handle's identity key (see
        :mod:`harness_mem.pseudonyms`), resuming an interrupted run; how many rows changed.

        :param progress: told ``(done, total)`` rows after each step.
        """
        if self.read_only:
            raise InvalidInputError("this store is open read-only — rekeying its pseudonyms writes to it")
        if self.storage.confined_to is not None:
            raise InvalidInputError("a confined database role cannot rekey the store — connect as its owner")
        settings = Settings.from_env()
        given = self._key_given(settings)
        key = choose_key(self.storage, given, settings.config_dir(), create=True)
        if key is None:
            raise pseudonyms.missing_key(self.storage, settings.config_dir())
        with self.lock:
            was_inside = self.pseudonym_keying != "outside"
            changed = pseudonyms.rekey(self.storage, key, progress)
            if was_inside and self._own_redactor:
                # This handle's redactor, namespace and sealer were keyed inside: now as the store is.
                redactor = pseudonyms.store_redactor(
                    self.storage, self.storage.redaction_secret(create=True),
                    pseudonyms.key_finder(self.storage, given, settings.config_dir(), create=True), writable=True)
                # A namespace given in its stored form is rekeyed as the rows holding it were.
                namespace = pseudonyms.rekeyer(key)[0](self._given_namespace)
                self.scope = self._scope(namespace, redactor, self.identity_key)
                self._rescoped()
        return changed

    def rotate_identity_key(self, progress: Callable[[int, int], None] | None = None) -> rotation.Rotation:
        """Make a new identity key and move the store to it: every sealed identity sealed again, every
        identity-field pseudonym keyed again (see :mod:`harness_mem.rotation`); finishes an
        interrupted rotation instead when there is one. The new key is written to the config
        directory's ``keys/``; the old key file stays until you delete it. This handle goes on
        with the new key.

        :param progress: told ``(done, total)`` rows after each step.
        """
        settings = Settings.from_env()
        given = self._key_given(settings)
        with self.lock:
            done = rotation.rotate(self.storage, given, settings.config_dir(), progress)
            if given is not None:
                self.identity_key = key_file(done.new_id, settings.config_dir()).read_text(encoding="ascii").strip()
            if self._own_redactor:
                # This handle's redactor, namespace and sealer were keyed with the old key.
                redactor = pseudonyms.store_redactor(
                    self.storage, self.storage.redaction_secret(create=False),
                    pseudonyms.key_finder(self.storage, self._key_given(settings), settings.config_dir(),
                                          create=False), writable=True)
                # A namespace given in its stored form is renamed as the rows holding it were.
                namespace = done.rename(self._given_namespace)
                self.scope = self._scope(namespace, redactor, self.identity_key)
                self._rescoped()
        return done

    def _scope(self, namespace: str, redactor: Redactor | None, key: bytes | str | Literal[False] | None) -> Scope:
        """The scope of this handle, with what seals its identities when it redacts and may keep them."""
        stored = identity(namespace, redactor) or namespace
        if redactor is None or key is False:
            return Scope(stored, redactor)
        settings = Settings.from_env()
        self.identities = Identities(
            self.storage, stored, given=key if key is not None else settings.identity_key,
            config_dir=settings.config_dir(), writable=not self.read_only,
            secret_kinds=[d.kind for d in redactor.detectors if d.secret],
        )
        sealer = self.identities.sealer
        if stored != namespace and not self.read_only:
            sealer.note(namespace, redactor.pseudonymise(namespace))
        return Scope(stored, redactor, sealer)

    @contextmanager
    def stored_forms(self) -> Iterator[None]:
        """Within the block, on this thread, reads give identity fields as stored (their pseudonyms),
        not as the caller gave them: for code that keeps ids it read in tables of its own (episodes,
        consolidation's provenance), which the stored forms key."""
        self._local.stored_forms = getattr(self._local, "stored_forms", 0) + 1
        try:
            yield
        finally:
            self._local.stored_forms -= 1

    def _revealing(self) -> Identities | None:
        return None if getattr(self._local, "stored_forms", 0) else self.identities

    def _revealing_in(self, namespace: str) -> Identities | None:
        """What reveals the identities of ``namespace`` (as stored): each namespace seals its own."""
        identities = self._revealing()
        if identities is None or namespace == self.namespace:
            return identities
        if namespace not in self._shared_identities:
            settings = Settings.from_env()
            given = self.identity_key
            self._shared_identities[namespace] = Identities(
                self.storage, namespace, given=given if given is not None and given is not False else settings.identity_key,
                config_dir=settings.config_dir(), writable=False)
        return self._shared_identities[namespace]

    def _revealed(self, entries: Sequence[Entry]) -> list[Entry]:
        return self._revealed_in_each(entries, lambda entry: entry.namespace, Identities.entries)

    def _revealed_hits(self, hits: Sequence[Hit]) -> list[Hit]:
        return self._revealed_in_each(hits, lambda hit: hit.entry.namespace, Identities.hits)

    def _revealed_in_each(self, items: Sequence[_Read], namespace_of: Callable[[_Read], str],
                          reveal: Callable[[Identities, Sequence[_Read]], list[_Read]]) -> list[_Read]:
        """``items`` (of one or several namespaces) revealed by each one's identities, in their order."""
        out = list(items)
        for namespace in {namespace_of(item) for item in items}:
            identities = self._revealing_in(namespace)
            if identities is not None:
                at = [i for i, item in enumerate(out) if namespace_of(item) == namespace]
                for i, item in zip(at, reveal(identities, [out[i] for i in at]), strict=True):
                    out[i] = item
        return out

    @property
    def namespace(self) -> str:
        """The namespace every write goes to, as stored (reads read :attr:`namespaces`)."""
        return self.scope.namespace

    @property
    def namespaces(self) -> tuple[str, ...]:
        """Every namespace this handle reads, as stored: :attr:`namespace` first, then the shared ones."""
        redactor = self.scope.redactor
        shared = (identity(given, redactor) or given for given in self._given_shared)
        return (self.scope.namespace, *dict.fromkeys(n for n in shared if n != self.scope.namespace))

    @property
    def redactor(self) -> Redactor | None:
        """What scrubs every write (None: redaction turned off, and recorded on each entry)."""
        return self.scope.redactor

    @redactor.setter
    def redactor(self, redactor: Redactor | None) -> None:
        # The pseudonyms sealed so far stay readable; a redactor with another key makes new ones.
        self._own_redactor = False
        self.scope = Scope(self.scope.namespace, redactor, self.scope.sealer if redactor is not None else None)
        self._rescoped()

    def _rescoped(self) -> None:
        """After :attr:`scope` changed (a new redactor or key): recall reads the namespaces as now stored."""
        self._recall.scope = self.scope
        self._recall.shared = self.namespaces[1:]
        self._shared_identities.clear()

    @property
    def embedder(self) -> Embedder | None:
        """The model that embeds this store's entries and queries (None: keyword recall only)."""
        return self.storage.embedder

    @property
    def db(self) -> Database:
        """The file as a sqlite-utils ``Database``: for looking (tables, schema, rows), not for
        writing around the store; writes go through the store's methods and :meth:`transaction`."""
        database: Database | None = getattr(self.storage, "db", None)
        if database is None:
            raise InvalidInputError(f"a {self.storage.engine} store has no SQLite file to look into")
        return database

    def _choose_embedder(self, embedder: Embedder | str | None, *, created: bool) -> Embedder | None:
        """The embedder this handle uses; a new file opened without one is recorded keyword-only.

        ``"auto"`` honours, in order: a keyword-only file (no model is loaded), ``HARNESS_MEM_EMBEDDER``,
        the model the file's vectors were made with, then the built-in model when it is installed.
        A name (``"minilm"``, ``"minilm-int8"``) or an object is the caller's explicit choice.
        """
        if embedder == "auto":
            wanted = Settings.from_env().embedder
            if self.keyword_only:
                return None
            if wanted == "none":
                embedder = None
            elif wanted != "auto":
                return named_embedder(wanted)
            else:
                recorded = self.storage.recorded_model()
                known = recorded is not None and recorded.get("name") in RECORDED_NAMES
                if known and recorded and not default_embedder_available():
                    # Reading, keyword recall and writing need no model: a plain install opens the file.
                    warnings.warn(ModelMissingWarning(
                        f"this file's entries have vectors ({recorded['name']}), but the model is not installed"
                        f" here: recall is by keyword, and what is written waits for `harness-mem reindex`"
                        f" where the model is — {INSTALL_HINT}"), stacklevel=3)
                    return None
                return named_embedder(recorded["name"]) if known and recorded else default_embedder()
        if isinstance(embedder, str):
            if embedder != "none":
                return named_embedder(embedder)
            embedder = None
        if embedder is None and created and not self.read_only:
            with self.transaction():
                self.storage.set_keyword_only(True)
        return embedder

    @property
    def keyword_only(self) -> bool:
        """True when the file was made (or switched) to keep no vectors: see :meth:`reindex`."""
        return self.storage.keyword_only

    def _filters(self, filters: dict[str, Any]) -> dict[str, Any]:
        """Filters whose identity values (role, session, session prefix, tags) are in their stored form."""
        return self.scope.filters(filters)

    # ---- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self.storage.close()

    def another(self) -> MemoryStore:
        """A second handle on this store, with its own connection (for another thread or a
        background writer): the same namespace, embedder, redactor, identity key and read-only
        flag, opened with what opened this one (a server's password too)."""
        path, cache_kib = self._opened_with
        return MemoryStore(path, namespaces=self.namespaces, embedder=self.embedder, redactor=self.redactor,
                           read_only=self.read_only, cache_kib=cache_kib, identity_key=self.identity_key)

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        shared = f" shared={list(self.namespaces[1:])!r}" if len(self.namespaces) > 1 else ""
        return f"<MemoryStore {str(self.path)!r} namespace={self.namespace!r}{shared}>"

    # ---- writes ------------------------------------------------------------------------------

    def add(
        self,
        content: str,
        *,
        kind: str | None = None,
        role: str | None = None,
        session: str | None = None,
        tags: Iterable[str] = (),
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: str | None = None,
        created_at: str | datetime | None = None,
        expires_at: str | datetime | None = None,
        ttl_days: float | None = None,
        on_conflict: OnConflict = "error",
    ) -> Entry:
        """Store one entry and return it as stored.

        ``kind`` defaults to ``"turn"`` when a role is given, else ``"note"``. ``id`` defaults to a
        new sortable id; an id that already exists raises :class:`DuplicateIdError` unless
        ``on_conflict`` is ``"ignore"`` (keep the old entry) or ``"replace"``.
        """
        item = dict(
            content=content, kind=kind, role=role, session=session, tags=tags, source=source,
            metadata=metadata, id=id, created_at=created_at, expires_at=expires_at, ttl_days=ttl_days,
        )
        stored = self.add_many([item], on_conflict=on_conflict)
        if stored:
            return stored[0]
        return self.get(item["id"])  # type: ignore[arg-type]  # ignored: the existing entry

    def add_many(
        self,
        items: Iterable[Mapping[str, Any] | Entry],
        *,
        on_conflict: OnConflict = "error",
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_invalid: Callable[[int, HarnessMemError], None] | None = None,
        scrubbed_by: Redactor | None = None,
    ) -> list[Entry]:
        """Store many entries, one transaction per ``batch_size`` (or per 32M characters); returns those written.

        Each item is an :class:`Entry` or a mapping with the keyword arguments of :meth:`add`
        (``content`` or ``text``). A bad item raises before its batch is written, unless
        ``on_invalid(index, error)`` is given: then it is reported there and skipped.
        ``scrubbed_by`` names the redactor that already scrubbed the items' content (a transcript
        recorder's): when it is this store's own, the content is not scrubbed a second time.
        """
        content_scrubbed = scrubbed_by is not None and scrubbed_by is self.redactor
        check_on_conflict(on_conflict)
        if batch_size < 1:
            raise InvalidInputError(f"batch_size must be at least 1, not {batch_size!r}")
        written: list[Row] = []
        batch: list[Row] = []
        chars = 0
        for index, item in enumerate(items):
            try:
                row = prepare_row(item, namespace=self.namespace, redactor=self.redactor,
                                  content_scrubbed=content_scrubbed, sealer=self.scope.sealer)
            except (InvalidInputError, BlockedError) as exc:
                if on_invalid is None:
                    raise
                on_invalid(index, exc)
                continue
            batch.append(row)
            chars += len(row.content)
            if len(batch) >= batch_size or chars >= MAX_BATCH_CHARS:
                written += write_sealed(self.storage, self.scope.sealer, batch, on_conflict)
                batch, chars = [], 0
        if batch:
            written += write_sealed(self.storage, self.scope.sealer, batch, on_conflict)
        return self._revealed([entry_from_row(row) for row in written])

    def add_prepared(self, rows: Sequence[Row], *, on_conflict: OnConflict = "error",
                     identities: Sequence[SealedIdentity] = ()) -> int:
        """Write rows made by :func:`~harness_mem.rows.prepare_row` with this store's redactor, in one
        transaction; returns how many were written (ids already stored are settled by ``on_conflict``).

        For importers that prepare rows elsewhere: ``import_jsonl`` parses and redacts in a worker
        process while this one writes. ``identities`` are what that process's sealer (a copy of
        ``scope.sealer``) sealed as it prepared them.
        """
        check_on_conflict(on_conflict)
        rows = list(rows)
        for row in rows:
            if type(row) is not Row or row.pk is not None:
                raise InvalidInputError(f"add_prepared takes new rows from prepare_row, not {row!r:.60}")
            if (row.redactions is None) != (self.redactor is None):
                raise InvalidInputError(
                    "these rows were prepared with redaction " + ("off" if row.redactions is None else "on")
                    + f", and this store has it {'on' if self.redactor is not None else 'off'}"
                )
        return len(write_sealed(self.storage, self.scope.sealer, rows, on_conflict, identities=identities)) if rows else 0

    def transaction(self) -> AbstractContextManager[None]:
        """One write transaction around the block: everything written inside commits together or not at all.

        Takes the write lock up front, so several processes can share the store. Storage built on
        this store (episodes, skills) writes its rows inside the same transaction as the entries
        they belong to. A nested call joins the outer transaction.
        """
        return self.storage.transaction()

    def data_version(self) -> tuple[int, int]:
        """A token that changes whenever the store's content changes, in this process or another.

        For caches of what was read: equal tokens mean nothing was written in between.
        """
        return self.storage.data_version()

    def delete(self, id: str) -> bool:
        """Delete an entry and its derived rows; False when there was none."""
        stored = self.scope.key(id) or id
        with self.storage.transaction():
            pk = self.storage.pk_of(self.namespace, stored)
            # On the store's other devices a forget, which takes every version of an id added apart
            # there: the same versions go here.
            versions = [row.id for row in self.storage.rows(versions_of_forked(self.storage, [pk])).values()
                        ] if pk is not None else []
            deleted = self.storage.delete(self.namespace, stored)
            if deleted:
                outbox.log_forgotten(self.storage, self.namespace, [stored], None, now_ms())
                for version in versions:
                    self.storage.delete(self.namespace, version)
        return deleted

    def promote(self, id: str, *, to: str) -> list[str]:
        """Move the entry ``id`` from this store's namespace into namespace ``to`` (a team's shared
        space) with its history (the versions it corrected, and its corrections) and its sources
        (the turns a derived entry cites): see :mod:`harness_mem.promotion`. Returns the ids moved.
        Refused, nothing moved, when an id is taken there."""
        with self.lock:
            moved = promotion.promote(self.storage, self.scope, self.identities, id, self._stored_namespace(to))
        identities = self._revealing()
        return [identities.value(entry) for entry in moved] if identities is not None else moved

    def grant(self, role: str, namespace: str | None = None, *, read_only: bool = False) -> None:
        """Let the database role ``role`` read ``namespace`` (default: this store's), and write it
        unless ``read_only``, beside the namespaces granted to it before (PostgreSQL). A role
        granted any namespace is confined: the database lets it reach those alone."""
        self.storage.grant(role, self._stored_namespace(namespace), read_only=read_only)

    def revoke(self, role: str, namespace: str | None = None) -> bool:
        """Take ``namespace`` (default: this store's) back from ``role``; False when it had not
        been granted. A role whose last namespace is taken back reads nothing (it stays confined)."""
        return self.storage.revoke(role, self._stored_namespace(namespace))

    def grants(self) -> list[tuple[str, str, bool]]:
        """Every grant: (role, namespace as stored, read-only), by role; a role left with none
        has one row with an empty namespace."""
        return self.storage.grants()

    def _stored_namespace(self, namespace: str | None) -> str:
        if namespace is None:
            return self.namespace
        if not namespace or not isinstance(namespace, str):
            raise InvalidInputError("a namespace must be a non-empty string")
        return identity(namespace, self.redactor) or namespace

    def sync(self, path: str | os.PathLike[str], *, progress: Callable[[int], None] | None = None) -> SyncReport:
        """Exchange this store's operations with the sync folder at ``path`` (any folder the user
        carries between machines: git, Syncthing, a USB stick): write what it did since its last sync,
        apply what every other device did. The first sync starts this store's log. See
        ``docs/design/sync.md``; ``progress(n)`` is called as chunks of ``n`` operations are applied."""
        settings = Settings.from_env()
        config, given = settings.config_dir(), self._key_given(settings)

        def key_here(key_id: str) -> bool:
            return (given is not None and IdentityKey.parse(given).id == key_id) or key_file(key_id, config).exists()

        with self.lock:
            def make_key() -> str | None:
                made = choose_key(self.storage, given, config, create=not self.read_only)
                return None if made is None else made.id

            if join_folder(self.storage, path, key_here=key_here, make_key=make_key) and self._own_redactor:
                # It took the folder's keying: its pseudonyms and sealed values are the other devices' now.
                self.scope = self._scope(self._given_namespace, self._default_redactor(created=False, rekey=False),
                                         self.identity_key)
                self._recall.scope = self.scope
        return sync_folder(self.storage, path, redactor=self.redactor, progress=progress)

    def sync_status(self, path: str | os.PathLike[str]) -> list[DeviceStatus]:
        """Every device of the sync folder at ``path`` and how far this store has read it (nothing is written)."""
        return sync_status(self.storage, path)

    def conflicts(self) -> list[Fork]:
        """Each entry changed on two devices apart (corrected, or its id added with other words), its
        versions with the current one first."""
        return forks(self.storage)

    def forks(self, id: str) -> list[Fork]:
        """The forks the entry ``id`` is part of (empty when none): as the entry corrected apart, one of
        its successors, or a version of an id added apart. ``harness-mem get`` shows them."""
        stored = self.scope.key(id) or id
        return [fork for namespace in self.namespaces for fork in forks_of(self.storage, namespace, stored)]

    def purge_expired(self) -> int:
        """Delete every expired entry (in all namespaces) with its derived rows; returns how many went.

        Opening a store does this once a day on its own; :meth:`gc` does it and gives the space back.
        """
        return maintenance.purge_expired(self.storage)

    def gc(self, *, vacuum: bool = False, progress: Progress | None = None) -> dict[str, Any]:
        """Collect what the file no longer needs: expired and forgotten entries (with their index
        rows and vectors), deleted entries' words in the keyword index (merged), old copies of
        purged rows (the whole file rewritten when an entry was purged), the WAL (checkpointed and
        truncated) and free pages (incremental vacuum; a full ``VACUUM`` only with ``vacuum``,
        which also makes an older file free pages incrementally), in every namespace. Returns what
        was done and a size report by table. This is ``harness-mem gc``; ``progress`` is told each
        step as it begins (see :mod:`harness_mem.progress`).
        """
        return maintenance.gc(self.storage, vacuum=vacuum, progress=progress)

    # ---- memory operations (what agents call: tools, MCP) --------------------------------------

    def remember(self, content: str, *, kind: str | None = None, tags: Iterable[str] = (),
                 session: str | None = None, role: str | None = None, source: str | None = None,
                 metadata: Mapping[str, Any] | None = None, supersedes: str | None = None,
                 id: str | None = None, created_at: str | datetime | None = None,
                 expires_at: str | datetime | None = None, ttl_days: float | None = None) -> Remembered:
        """Store ``content`` unless an exact duplicate (same kind and redacted text) is already here.

        Returns the id (the existing one with ``deduped=True`` for a duplicate) and what redaction
        replaced. ``supersedes=ID`` makes it a correction of that entry (see :meth:`supersede`);
        ``created_at`` is when it became true (default now: see ``as_of`` in :meth:`recall`);
        ``expires_at`` or ``ttl_days`` makes it temporary, as in :meth:`add`.
        """
        return self._revealed_id(corrections.remember(
            self.storage, self.scope, content, kind=kind, tags=tags, session=session, role=role, source=source,
            metadata=metadata, supersedes=supersedes, id=id, created_at=created_at, expires_at=expires_at,
            ttl_days=ttl_days))

    def supersede(self, old_id: str, new_content: str, **changes: Any) -> Remembered:
        """Correct an entry: the new text becomes a new entry, and the old one is kept, marked as
        replaced (recall hides it; :meth:`history` shows the chain). Nothing is overwritten."""
        return self._revealed_id(corrections.supersede(self.storage, self.scope, old_id, new_content, **changes))

    def _revealed_id(self, done: Remembered) -> Remembered:
        identities = self._revealing()
        if identities is None:
            return done
        return done.model_copy(update={"id": identities.value(done.id),
                                       "supersedes": done.supersedes and identities.value(done.supersedes)})

    def history(self, id: str) -> list[Entry]:
        """The chain of corrections ``id`` belongs to, oldest first."""
        return self._revealed(corrections.history(self.storage, self.scope, id))

    def forget(self, id: str | None = None, **filters: Any) -> int:
        """Tombstone an entry (or every entry matching ``session=``, ``tags=``, ``kind=``, ``since=``,
        ``until=``): it is never returned again, and :meth:`purge` removes its content."""
        return corrections.forget(self.storage, self.scope, id, **filters)

    def would_forget(self, id: str) -> list[Entry]:
        """What ``forget`` of ``id`` and its other versions would take, oldest first: those versions and
        every entry derived from them (a summary, fact or episode quoting them). Nothing is written."""
        return self._revealed(corrections.would_forget(self.storage, self.scope, id))

    def purge(self) -> int:
        """Remove this namespace's forgotten and expired entries from the file, bytes included."""
        return corrections.purge(self.storage, self.scope)

    def recent(self, n: int = 20, *, kind: str | None = None) -> list[Entry]:
        """The ``n`` latest entries, newest first: "what was I doing"."""
        if not isinstance(n, int) or not 1 <= n <= sessions.MAX_PAGE:
            raise InvalidInputError(f"n must be between 1 and {sessions.MAX_PAGE}, not {n!r}")
        return list(self.list(limit=n, newest_first=True, kind=kind))

    def recall_sessions(self, query: str, k: int = 5, *, context: int = 1, **recall_args: Any) -> list[SessionHit]:
        """The sessions that best answer ``query``: each with its best hit, the turns around it, its
        first and last turns, its size and dates."""
        with self.stored_forms():  # its frames are read by the stored ids of the hits
            found = sessions.recall_sessions(self.storage, self.scope, self.recall, query, k, context=context,
                                             **recall_args)
        identities = self._revealing()
        return identities.session_hits(found) if identities is not None else found

    def sessions(self, limit: int = 20, offset: int = 0, *, after: str | None = None) -> list[SessionSummary]:
        """Sessions, most recently active first, with their sizes; ``after`` (a session listed):
        the page after it, found through the index (an offset counts past every session before)."""
        found = sessions.sessions(self.storage, self.scope, limit, offset, after)
        identities = self._revealing()
        return identities.summaries(found) if identities is not None else found

    def session_turns(self, session: str, offset: int = 0, limit: int = 50, *, after: str | None = None) -> list[Entry]:
        """One session's entries in order, a page at a time; ``after`` (an entry id): the page after it."""
        return self._revealed(sessions.session_turns(self.storage, self.scope, session, offset, limit, after))

    # ---- reads -------------------------------------------------------------------------------

    def get(self, id: str, *, refresh_ttl: bool = False) -> Entry:
        """The entry with this id; raises :class:`NotFoundError` (also for an expired one).

        ``refresh_ttl`` renews the expiry of an entry written with ``ttl_days``: it expires that
        long from now (a write, so the store must be open for writing)."""
        stored, now = self.scope.key(id) or id, now_ms()
        # The namespace written first, then each shared one read beside it.
        row = next((found for namespace in self.namespaces
                    if (found := self.storage.get(namespace, stored, now)) is not None), None)
        if row is None:
            where = f"namespace {self.namespace!r}" if len(self.namespaces) == 1 else f"namespaces {list(self.namespaces)}"
            raise NotFoundError(f"no entry with id {id!r} in {where} — `harness-mem list` shows the ids")
        entry = entry_from_row(row)
        return self._revealed(self._renewed([entry]) if refresh_ttl else [entry])[0]

    def get_many(self, ids: Sequence[str]) -> list[Entry]:
        """The entries with these ids that are there (not forgotten, not expired), in the order
        asked, each once: one query, where :meth:`get` costs a round trip an id on PostgreSQL."""
        stored = {entry_id: self.scope.key(entry_id) or entry_id for entry_id in dict.fromkeys(ids)}
        rows = self.storage.get_many(self.namespace, list(stored.values()), now_ms())
        return self._revealed([entry_from_row(rows[key]) for key in stored.values() if key in rows])

    def _renewed(self, entries: list[Entry]) -> list[Entry]:
        """``entries`` with the expiry of those written with a time to live renewed, in the store too."""
        ids = [entry.id for entry in entries if entry.ttl_days is not None]
        renewed: dict[str, int] = {}
        if ids:
            with self.storage.transaction():
                renewed = self.storage.renew_expiry(self.namespace, ids, now_ms())
                outbox.log_renewed(self.storage, self.namespace, renewed)
        return [entry.model_copy(update={"expires_at": from_ms(renewed[entry.id])}) if entry.id in renewed else entry
                for entry in entries]

    def _selection(self, filters: dict[str, Any]) -> Selection:
        return Selection(make_filters(**self._filters(filters)), self.namespace, now_ms())

    def count(self, **filters: Any) -> int:
        """How many entries the filters (those of :meth:`recall`) pass."""
        return self.storage.count(self._selection(filters))

    def recall(
        self,
        query: str,
        k: int = 10,
        mode: Mode | None = None,
        *,
        kind: str | Sequence[str] | None = None,
        role: str | None = None,
        session: str | None = None,
        session_prefix: str | None = None,
        tags: Sequence[str] | str = (),
        any_tags: Sequence[str] | str = (),
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        explain: bool = False,
        query_vector: npt.NDArray[np.float32] | None = None,
        strict: bool = False,
        min_score: float | None = None,
        context: int = 0,
        include_superseded: bool = False,
        exact: bool = False,
        derived: bool | Literal["both"] | None = None,
        as_of: str | datetime | None = None,
        exclude_sessions: Sequence[str] | str = (),
        exclude_kinds: Sequence[str] | str = (),
        exclude_tags: Sequence[str] | str = (),
        metadata: Mapping[str, Any] | None = None,
        offset: int = 0,
        refresh_ttl: bool = False,
        rerank: bool = False,
        sources: bool = False,
    ) -> list[Hit]:
        """The ``k`` entries most relevant to ``query``, best first (``[]`` is not an error);
        ``offset`` skips that many best ones first (the next page of ``k``).

        ``mode`` is ``"keyword"`` (FTS5 BM25), ``"semantic"`` (embedding cosine) or ``"hybrid"`` (both,
        fused); the default is hybrid when the store has an embedder, else keyword. Filters apply
        before the top-``k`` cut: a filtered query still returns ``k`` hits when ``k`` entries match.
        Any text is a valid query: it is never passed raw to FTS5. ``query_vector`` is the query's
        embedding when the caller already has it (see :meth:`embed_queries`).

        Entries stored without a vector are matched by keyword alone, with a
        :class:`~harness_mem.errors.MissingVectorsWarning`; ``strict=True`` refuses instead.

        ``min_score`` drops hits scoring below it (scores are in [0, 1], one scale for every mode:
        :mod:`harness_mem.scores`); ``context=N`` gives each turn hit the N turns
        before and after it in its session (``hit.context``); entries a correction replaced are
        left out unless ``include_superseded``. ``exact=True`` ranks keywords with BM25 over every
        word of the query on every match, which costs time in proportion to the file on a large one
        (the default scores only the rarer words that way: see :mod:`harness_mem.bm25`).

        What consolidation derived from transcripts (topic segments, facts: source
        ``"consolidation"``) has its own lane, so it never crowds out the turns it came from: a
        recall without ``kind`` leaves it out, one naming a kind (``"fact"``, ``"summary"``) takes it
        in; ``derived=True`` searches only it, ``derived=False`` never, ``derived="both"`` ranks it
        together with everything else. ``sources=True`` gives each derived hit the turns it came
        from (``hit.sources``, :func:`~harness_mem.sessions.with_sources`), and a turn shown that
        way is not listed again below it. An agent's recall is both (:mod:`harness_mem.tools`): every
        lane, derived entries with their sources, turns where they are what matches.

        ``exclude_sessions``, ``exclude_kinds`` and ``exclude_tags`` leave those out (an agent's
        recall that must not return its own session's turns, say). ``metadata`` keeps entries whose
        metadata meets every condition: ``{"lang": "en", "user.tier": {"$in": ["gold", "silver"]},
        "score": {"$gte": 3}}`` (``$eq $ne $gt $gte $lt $lte $in``; dotted keys are nested ones;
        values compare as JSON's types do; a string the redactor changes is looked for as stored).
        ``refresh_ttl`` renews the expiry of the hits written with a time to live (see :meth:`get`).

        ``rerank=True`` orders the top 30 again by matching the question's word pieces against each
        hit's with the embedding model (:mod:`harness_mem.rerank`): better first hits on every corpus
        measured, for one model pass over those of the 30 texts this store has not read before (about
        0.2 s for chat turns when none are kept yet, some tens of ms once they are; long assistant
        replies cost several times that).

        ``as_of`` answers with what was true at that time (ISO-8601 or an age): entries whose time
        (``created_at``: when it was said, which a caller or consolidation sets) is not later, and
        that no correction had replaced by then — a replaced entry stops being true at its
        successor's time. The default is now: the current entries.
        """
        _check_offset(offset)
        fetch = k  # a k that is not a count is refused by the ranking, with its own message
        if offset and isinstance(k, int) and not isinstance(k, bool):
            fetch = k + offset
            if fetch > MAX_RECALL_K:
                raise InvalidInputError(f"k + offset must be at most {MAX_RECALL_K:,}, not {k} + {offset}")
        if derived not in (True, False, None, "both"):
            raise InvalidInputError(f'derived must be true, false, "both" or left out, not {derived!r:.40}')
        if sources and isinstance(fetch, int) and not isinstance(fetch, bool):
            fetch = min(2 * fetch, MAX_RECALL_K)  # the turns a derived hit shows leave the list
        key = self.scope.key
        role, session, session_prefix = key(role), key(session), key(session_prefix)
        tags, any_tags = self.scope.tags(tags), self.scope.tags(any_tags)
        left_out = self.scope.filters({"exclude_sessions": exclude_sessions, "exclude_tags": exclude_tags,
                                       "metadata": metadata})
        hits = self.storage.recalling(self.namespaces, lambda: self._recall(
            query, fetch, mode, kind=kind, role=role, session=session, session_prefix=session_prefix, tags=tags,
            any_tags=any_tags, since=since, until=until, explain=explain, query_vector=query_vector,
            strict=strict, include_superseded=include_superseded, exact=exact,
            derived=self._lane(kind) if derived is None else None if derived == "both" else derived, as_of=as_of,
            exclude_kinds=exclude_kinds, rerank=rerank, **left_out,
        ))
        if sources:
            hits = sessions.with_sources(self.storage, self.scope, hits)
        hits = hits[offset:k + offset]
        if min_score is not None:
            hits = [hit for hit in hits if hit.score >= min_score]
        if refresh_ttl:
            renewed = self._renewed([hit.entry for hit in hits])
            hits = [hit.model_copy(update={"entry": entry}) for hit, entry in zip(hits, renewed, strict=True)]
        if context:
            hits = sessions.with_context(self.storage, self.scope, hits, context)
        return self._revealed_hits(hits)  # last: the steps above look rows up by their stored ids

    def _lane(self, kind: str | Sequence[str] | None) -> bool | None:
        """The default ``derived`` filter: derived entries out of a recall that names no kind — a
        filter only where there are some, so a store never consolidated ranks as it always has."""
        return False if kind is None and any(self.storage.has_derived(n) for n in self.namespaces) else None

    def embed_queries(self, queries: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of many queries in one model call (to pass to :meth:`recall` as ``query_vector``).

        Each is embedded as recall would: without the speaker names it mentions (see fusion.py).
        """
        return self._recall.embed_queries(queries)

    # ---- maintenance ---------------------------------------------------------------------------

    def reindex(self, *, progress: Callable[[int], None] | None = None, batch_size: int = 256,
                keyword_only: bool = False, phase: Callable[[str], None] | None = None) -> dict[str, int]:
        """Rebuild the derived rows from the canonical ones, in every namespace.

        The keyword index is rebuilt in one transaction. Vectors made by another model are dropped;
        then every entry without a vector is embedded, a batch per transaction, so an interrupted
        reindex resumes where it stopped. ``progress(n)`` is called as entries are done (embedded
        and written), ``phase(name)`` as each phase begins.

        This is also how a file switches models: reindex with another embedder, or with
        ``keyword_only=True`` to drop the vectors and record that the file keeps none. A
        keyword-only file gets vectors again by a reindex with an explicit embedder.
        """
        report = maintenance.reindex(self.storage, progress=progress, batch_size=batch_size, keyword_only=keyword_only,
                                     phase=phase)
        self._recall.vectors_complete = self.embedder is not None
        return report

    def embed_missing(self, batch_size: int = 64) -> int:
        """Embed one batch of the entries written without a vector (by a process without the model,
        such as a hook's writer); returns how many were read, 0 when none is left. A transaction per
        batch: a writer beside it waits for one batch at most."""
        return maintenance.embed_missing(self.storage, batch_size)

    def count_missing_vectors(self) -> int:
        """Entries (in every namespace) that ``reindex`` would embed; 0 without an embedder."""
        return maintenance.count_missing_vectors(self.storage)

    def revealed(self, value: str | None) -> bool:
        """Whether ``value``, as a read gave it (an id, session, role or tag), is a sealed identity
        shown as written: stored as its pseudonym, and given back raw because this process holds
        the identity key. Without the key reads give the pseudonyms, and nothing is revealed."""
        if not value or self.redactor is None:
            return False
        try:
            return self.scope.key(value) != value
        except IdentityKeyError:  # no key here: the value shown is the one stored
            return False

    def counts(self) -> dict[str, EntryCounts]:
        """Every namespace this store may read, with its entries by kind, role and redaction, as the
        engine keeps them while entries change (no entry is read; see :mod:`harness_mem.counts`)."""
        return entry_counts(self.storage, now_ms())

    def file_bytes(self) -> int:
        """The store's bytes on disk: the SQLite file and its WAL, or the PostgreSQL tables'."""
        return self.storage.size_bytes()

    def sizes(self) -> dict[str, Any]:
        """The file's bytes by the table or index that holds them (a
        :class:`~harness_mem.models.FileSizes` as a JSON-ready dict): reads the file's page map."""
        return FileSizes.check(self.storage.sizes()).model_dump(mode="json")

    def stats(self) -> dict[str, Any]:
        """Counts by kind and role, sessions, the largest sessions, the file's size by table and
        index, and the schema version: a :class:`~harness_mem.models.StoreStats` as a JSON-ready
        dict (``harness-mem schema stats`` describes it)."""
        return maintenance.stats(self.storage, self.namespace)

    def diagnose(self) -> dict[str, Any]:
        """What ``harness-mem doctor`` reports: each check with ok and a detail line."""
        settings = Settings.from_env()
        given = self._key_given(settings)
        given_as = "$HARNESS_MEM_IDENTITY_KEY" if self.identity_key in (None, False) else "the identity_key given"
        return maintenance.diagnose(self.storage, lambda: describe_key(self.storage, given, settings.config_dir(),
                                                                       given_as=given_as))

    def integrity_check(self) -> list[str]:
        """Problems SQLite finds in the file (an empty list when it is sound)."""
        return self.storage.integrity_check()

    def export(self) -> Iterator[dict[str, Any]]:
        """Every live entry of the namespace as a JSON-ready dict, oldest first.

        Importing the output (``harness-mem import``) into an empty file rebuilds an identical store.
        """
        for row in self.storage.select(self._selection({}), limit=None, offset=0, newest_first=False):
            yield entry_from_row(row).to_dict()  # as stored: an export holds no raw identity

    # Last in the class: once defined, the name ``list`` in this class body means this method, not
    # the builtin, and type checkers would read later annotations that way.
    def list(self, *, limit: int | None = None, offset: int = 0, newest_first: bool = False,
             refresh_ttl: bool = False, after: str | None = None, **filters: Any) -> Iterator[Entry]:
        """Entries in creation order (or newest first), filtered like :meth:`recall`; ``offset``
        skips that many first (pages of ``limit``), ``after`` (an entry id) starts after that entry
        instead, through the index, however far down it is; ``refresh_ttl`` as in :meth:`get`."""
        _check_offset(offset)
        start = None if after is None else self.scope.key(after) or after
        rows = self.storage.select(self._selection(filters), limit=limit, offset=offset, newest_first=newest_first,
                                   after=start)
        if self._revealing() is None and not refresh_ttl:
            for row in rows:
                yield entry_from_row(row)
            return
        while page := [entry_from_row(row) for row in itertools.islice(rows, LIST_BATCH)]:
            # A page at a time: one lookup of identities (and one renewal) for each.
            yield from self._revealed(self._renewed(page) if refresh_ttl else page)


def _namespaces(namespace: str | None, namespaces: Sequence[str] | None) -> tuple[str, tuple[str, ...]]:
    """The namespace a store writes, and the others it reads: ``namespace`` (else the first of
    ``namespaces``, else ``"default"``), and the rest of ``namespaces``."""
    named = [namespace] if namespace is not None else []
    if namespaces is not None:
        if isinstance(namespaces, str) or not isinstance(namespaces, Sequence) or not namespaces:
            raise InvalidInputError("namespaces must be a non-empty list of namespace names")
        named += list(namespaces)
    for name in named:
        if not name or not isinstance(name, str):
            raise InvalidInputError("a namespace must be a non-empty string")
    written, *shared = named or ["default"]
    return written, tuple(n for n in dict.fromkeys(shared) if n != written)


def _check_offset(offset: object) -> None:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInputError(f"offset must be a whole number, 0 or more, not {offset!r:.40}")
